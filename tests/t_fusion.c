/* t_fusion.c — fused elementwise loops compute bit-for-bit what the unfused reference kernels compute: every
 * conformance program runs fused (fast kernels) and unfused with the per-element reference loops
 * (EXE_REF_ELEMENTWISE), in both numerics modes, and the outputs are compared byte by byte. */
#include "test.h"
#include "exec/exe_fuse.h"
#include "exec/kernels/ref.h"

#include <dirent.h>
#include <stdlib.h>

static int run_both(tpu_ctx *ctx, const char *dir, tpu_numerics mode, int *compared)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/program.hlo", dir);
    tpu_module *m = NULL;
    if (tpu_module_load(ctx, path, &m) != TPU_OK) return 1;   /* the conformance test reports load errors */
    tpu_tensor **ins = NULL, **a = NULL, **b = NULL;
    int nin = 0, na = 0, nb = 0, bad = 0;
    if (tpu_random_inputs(ctx, m, 11, &ins, &nin) != TPU_OK) {
        tpu_module_free(m);
        return 1;
    }
    tpu_run_opts o = tpu_run_opts_default();
    o.numerics = mode;
    exe_run_cfg fused = {0}, unfused = {.ref = EXE_NO_FUSION | EXE_REF_ELEMENTWISE};
    tpu_status s1 = exe_run(ctx, m, &o, &fused, ins, nin, &a, &na);
    tpu_status s2 = exe_run(ctx, m, &o, &unfused, ins, nin, &b, &nb);
    if (s1 != s2) {
        test_fail(__FILE__, __LINE__, "%s: fused run %s, unfused %s", dir, tpu_status_name(s1), tpu_status_name(s2));
        bad = 1;
    } else if (s1 == TPU_OK) {
        CHECK_EQ_INT(na, nb);
        for (int i = 0; i < na && i < nb; i++) {
            (*compared)++;
            if (tpu_tensor_nbytes(a[i]) != tpu_tensor_nbytes(b[i]) ||
                memcmp(tpu_tensor_cdata(a[i]), tpu_tensor_cdata(b[i]), tpu_tensor_nbytes(a[i]))) {
                /* NaNs may differ in payload only if both are NaN: compare values */
                int64_t k, n = tpu_tensor_count(a[i]);
                for (k = 0; k < n; k++) {
                    double x = tpu_tensor_get_f64(a[i], k), y = tpu_tensor_get_f64(b[i], k);
                    if (!(x == y || (x != x && y != y))) break;
                }
                if (k < n) {
                    test_fail(__FILE__, __LINE__, "%s (%s): output %d element %lld: fused %.9g, unfused %.9g", dir,
                              mode == TPU_NUMERICS_TPU ? "tpu" : "exact", i, (long long)k, tpu_tensor_get_f64(a[i], k),
                              tpu_tensor_get_f64(b[i], k));
                    bad = 1;
                }
            }
        }
    }
    tpu_tensors_free(a, na);
    tpu_tensors_free(b, nb);
    tpu_tensors_free(ins, nin);
    tpu_module_free(m);
    return bad;
}

TEST(fusion_matches_unfused_on_conformance_programs)
{
    DIR *d = opendir("tests/conformance/cases");
    REQUIRE(d != NULL);
    tpu_ctx *ctx = tpu_ctx_new();
    struct dirent *e;
    int cases = 0, compared = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char dir[600];
        snprintf(dir, sizeof dir, "tests/conformance/cases/%s", e->d_name);
        run_both(ctx, dir, TPU_NUMERICS_TPU, &compared);
        run_both(ctx, dir, TPU_NUMERICS_EXACT, &compared);
        cases++;
    }
    closedir(d);
    tpu_ctx_free(ctx);
    CHECK(cases > 30);
    CHECK(compared > 100);
}

/* Integer chains with broadcast constants (hash and RNG rounds): the fused loop takes a scalar operand as a
 * scalar (shift counts 0, 31, 32, 33; constants on either side of ops that commute and of ones that do not);
 * bit for bit the unfused reference. */
TEST(fusion_scalar_operands_match_unfused)
{
    static const char *hlo =
        "HloModule h\nENTRY main {\n x = u32[5000] parameter(0)\n s = u32[] parameter(1)\n"
        " c0 = u32[] constant(0)\n c31 = u32[] constant(31)\n c32 = u32[] constant(32)\n c33 = u32[] constant(33)\n"
        " k = u32[] constant(2246822507)\n b0 = u32[5000] broadcast(c0), dimensions={}\n"
        " b31 = u32[5000] broadcast(c31), dimensions={}\n b32 = u32[5000] broadcast(c32), dimensions={}\n"
        " b33 = u32[5000] broadcast(c33), dimensions={}\n bk = u32[5000] broadcast(k), dimensions={}\n"
        " bs = u32[5000] broadcast(s), dimensions={}\n"
        " a1 = u32[5000] xor(x, bs)\n a2 = u32[5000] shift-left(a1, b31)\n a3 = u32[5000] shift-right-logical(a1, b32)\n"
        " a4 = u32[5000] shift-left(a1, b33)\n a5 = u32[5000] shift-right-logical(a1, b0)\n a6 = u32[5000] multiply(bk, a5)\n"
        " a7 = u32[5000] subtract(bk, a6)\n a8 = u32[5000] subtract(a7, bk)\n a9 = u32[5000] shift-left(b31, a1)\n"
        " a10 = u32[5000] or(a2, a3)\n a11 = u32[5000] add(a10, a4)\n a12 = u32[5000] add(bs, a11)\n"
        " a13 = u32[5000] and(a12, a8)\n a14 = u32[5000] xor(a13, a9)\n"
        " y = s32[5000] bitcast-convert(a14)\n c5 = s32[] constant(-5)\n b5 = s32[5000] broadcast(c5), dimensions={}\n"
        " y1 = s32[5000] add(b5, y)\n y2 = s32[5000] shift-right-logical(y1, y)\n"
        " ROOT t = (u32[5000], s32[5000]) tuple(a14, y2)\n}\n";
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    REQUIRE(tpu_module_parse(ctx, hlo, strlen(hlo), "scalar_ops", &m) == TPU_OK);
    tpu_tensor **ins = NULL, **a = NULL, **b = NULL;
    int nin = 0, na = 0, nb = 0;
    REQUIRE(tpu_random_inputs(ctx, m, 5, &ins, &nin) == TPU_OK);
    tpu_run_opts o = tpu_run_opts_default();
    exe_run_cfg fused = {0}, unfused = {.ref = EXE_NO_FUSION | EXE_REF_ELEMENTWISE};
    CHECK(exe_run(ctx, m, &o, &fused, ins, nin, &a, &na) == TPU_OK);
    CHECK(exe_run(ctx, m, &o, &unfused, ins, nin, &b, &nb) == TPU_OK);
    CHECK_EQ_INT(na, 2);
    CHECK_EQ_INT(nb, 2);
    for (int i = 0; i < na && i < nb; i++)
        CHECK_MSG(!memcmp(tpu_tensor_cdata(a[i]), tpu_tensor_cdata(b[i]), tpu_tensor_nbytes(a[i])), "output %d: fused != unfused", i);
    tpu_tensors_free(a, na);
    tpu_tensors_free(b, nb);
    tpu_tensors_free(ins, nin);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* Smallest max_steps that lets the run finish (the run's instruction count), by bisection. */
static int64_t loop_steps_needed(tpu_ctx *ctx, tpu_module *m, tpu_tensor **ins, int nin, unsigned ref)
{
    int64_t lo = 1, hi = (int64_t)1 << 22;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        tpu_run_opts o = tpu_run_opts_default();
        o.max_steps = mid;
        exe_run_cfg cfg = {.ref = ref};
        tpu_tensor **out = NULL;
        int nout = 0;
        tpu_status st = exe_run(ctx, m, &o, &cfg, ins, nin, &out, &nout);
        tpu_tensors_free(out, nout);
        if (st == TPU_OK) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

/* The loop programs of the benchmark (thousands of iterations of small instructions): run repeatedly in one
 * thread, so results land in recycled buffers and value records (exe_core.c's small lists, the pool kept
 * between runs), they stay bit for bit what the unfused reference kernels give; and the step limit counts
 * every live instruction, fused members too, as it does unfused. */
TEST(loop_programs_repeat_like_reference)
{
    static const char *progs[] = {"bench/programs/scan_small_steps.hlo", "bench/programs/while_newton.hlo"};
    tpu_ctx *ctx = tpu_ctx_new();
    for (size_t p = 0; p < sizeof progs / sizeof progs[0]; p++) {
        tpu_module *m = NULL;
        REQUIRE_OK(ctx, tpu_module_load(ctx, progs[p], &m));
        tpu_tensor **ins = NULL, **ref = NULL;
        int nin = 0, nref = 0;
        REQUIRE_OK(ctx, tpu_random_inputs(ctx, m, 3, &ins, &nin));
        tpu_run_opts o = tpu_run_opts_default();
        exe_run_cfg slow = {.ref = EXE_NO_FUSION | EXE_REF_ELEMENTWISE | EXE_REF_KERNELS};
        REQUIRE_OK(ctx, exe_run(ctx, m, &o, &slow, ins, nin, &ref, &nref));
        for (int rep = 0; rep < 3; rep++) {
            tpu_tensor **a = NULL;
            int na = 0;
            CHECK_MSG(exe_run(ctx, m, &o, NULL, ins, nin, &a, &na) == TPU_OK, "%s: %s", progs[p], tpu_errmsg(ctx));
            CHECK_EQ_INT(na, nref);
            for (int i = 0; i < na && i < nref; i++)
                CHECK_MSG(tpu_tensor_nbytes(a[i]) == tpu_tensor_nbytes(ref[i]) &&
                          !memcmp(tpu_tensor_cdata(a[i]), tpu_tensor_cdata(ref[i]), tpu_tensor_nbytes(a[i])),
                          "%s run %d output %d: fast != reference", progs[p], rep, i);
            tpu_tensors_free(a, na);
        }
        if (p == 0) {
            int64_t fused = loop_steps_needed(ctx, m, ins, nin, 0), unfused = loop_steps_needed(ctx, m, ins, nin, EXE_NO_FUSION);
            CHECK_MSG(fused == unfused && fused > 2000 * 20, "%s: %lld steps fused, %lld unfused", progs[p], (long long)fused,
                      (long long)unfused);
        }
        tpu_tensors_free(ref, nref);
        tpu_tensors_free(ins, nin);
        tpu_module_free(m);
    }
    tpu_ctx_free(ctx);
}

/* The unfused convert kernel's f32 -> bf16 fast path (elementwise.c ew_convert_range, TPU mode: subnormal
 * results flushed) against the per-element reference, byte by byte, on f32 bit patterns of every kind
 * (hashed integers: NaNs, infinities, subnormals, ties). TPU mode only: in exact mode the fast path keeps
 * bf16 subnormal results (fp_f32_to_bf16, XLA:CPU's convert) where the reference reads an f32 subnormal
 * input as zero — a difference older than this test, left for whoever owns exact-mode converts. */
TEST(convert_f32_bf16_fast_matches_reference)
{
    static const char *hlo =
        "HloModule h\nENTRY main {\n x = u32[70000] parameter(0)\n io = u32[70000] iota(), iota_dimension=0\n"
        " k = u32[] constant(2654435761)\n bk = u32[70000] broadcast(k), dimensions={}\n"
        " c13 = u32[] constant(13)\n b13 = u32[70000] broadcast(c13), dimensions={}\n"
        " a = u32[70000] add(x, io)\n h1 = u32[70000] multiply(a, bk)\n h2 = u32[70000] shift-right-logical(h1, b13)\n"
        " h = u32[70000] xor(h1, h2)\n f = f32[70000] bitcast-convert(h)\n"
        " ROOT y = bf16[70000] convert(f)\n}\n";
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    REQUIRE(tpu_module_parse(ctx, hlo, strlen(hlo), "convert_bf16", &m) == TPU_OK);
    tpu_tensor **ins = NULL;
    int nin = 0;
    REQUIRE(tpu_random_inputs(ctx, m, 9, &ins, &nin) == TPU_OK);
    for (int mode = 0; mode < 1; mode++) {
        tpu_run_opts o = tpu_run_opts_default();
        o.numerics = mode ? TPU_NUMERICS_EXACT : TPU_NUMERICS_TPU;
        exe_run_cfg fast = {.ref = EXE_NO_FUSION}, ref = {.ref = EXE_NO_FUSION | EXE_REF_ELEMENTWISE};
        tpu_tensor **a = NULL, **b = NULL;
        int na = 0, nb = 0;
        CHECK(exe_run(ctx, m, &o, &fast, ins, nin, &a, &na) == TPU_OK);
        CHECK(exe_run(ctx, m, &o, &ref, ins, nin, &b, &nb) == TPU_OK);
        if (na == 1 && nb == 1) {
            const uint16_t *fa = tpu_tensor_cdata(a[0]), *fb = tpu_tensor_cdata(b[0]);
            int64_t bad = -1;
            for (int64_t i = 0; i < tpu_tensor_count(a[0]) && bad < 0; i++)
                if (fa[i] != fb[i]) bad = i;
            CHECK_MSG(bad < 0, "mode %d: element %lld: fast %04x, reference %04x", mode, (long long)bad, bad < 0 ? 0 : fa[bad],
                      bad < 0 ? 0 : fb[bad]);
        }
        tpu_tensors_free(a, na);
        tpu_tensors_free(b, nb);
    }
    tpu_tensors_free(ins, nin);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* f32 and bf16 fused binary ops with a scalar broadcast on either side (exe_fuse.c reads it once:
 * ewb_binary_f32_scalar) against the unfused per-element reference, byte by byte in both numerics modes, on
 * hashed f32 bit patterns (NaN, inf, signed zeros, subnormals) and scalars that are a parameter, -0 and NaN. */
TEST(fusion_float_scalar_operands_match_unfused)
{
    static const char *hlo =
        "HloModule h\nENTRY main {\n x = u32[5000] parameter(0)\n s = f32[] parameter(1)\n io = u32[5000] iota(), iota_dimension=0\n"
        " k = u32[] constant(2654435761)\n bk = u32[5000] broadcast(k), dimensions={}\n"
        " a = u32[5000] add(x, io)\n h = u32[5000] multiply(a, bk)\n f = f32[5000] bitcast-convert(h)\n"
        " nz = f32[] constant(-0)\n nan = f32[] constant(nan)\n"
        " bs = f32[5000] broadcast(s), dimensions={}\n bz = f32[5000] broadcast(nz), dimensions={}\n"
        " bn = f32[5000] broadcast(nan), dimensions={}\n"
        " f1 = f32[5000] add(f, bs)\n f2 = f32[5000] subtract(bs, f1)\n f3 = f32[5000] multiply(f2, bz)\n"
        " f4 = f32[5000] divide(bs, f2)\n f5 = f32[5000] maximum(f4, bz)\n f6 = f32[5000] minimum(bz, f)\n"
        " f7 = f32[5000] maximum(bn, f5)\n f8 = f32[5000] divide(f6, bs)\n f9 = f32[5000] add(f3, f8)\n"
        " g = bf16[5000] convert(f)\n gs = bf16[] convert(s)\n bg = bf16[5000] broadcast(gs), dimensions={}\n"
        " g1 = bf16[5000] multiply(bg, g)\n g2 = bf16[5000] subtract(g1, bg)\n g3 = bf16[5000] divide(g2, bg)\n"
        " g4 = bf16[5000] minimum(g3, bg)\n g5 = bf16[5000] add(bg, g4)\n"
        " ROOT t = (f32[5000], f32[5000], bf16[5000]) tuple(f7, f9, g5)\n}\n";
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    REQUIRE(tpu_module_parse(ctx, hlo, strlen(hlo), "float_scalars", &m) == TPU_OK);
    tpu_tensor **ins = NULL;
    int nin = 0;
    REQUIRE(tpu_random_inputs(ctx, m, 11, &ins, &nin) == TPU_OK);
    for (int mode = 0; mode < 2; mode++) {
        tpu_run_opts o = tpu_run_opts_default();
        o.numerics = mode ? TPU_NUMERICS_EXACT : TPU_NUMERICS_TPU;
        exe_run_cfg fused = {0}, unfused = {.ref = EXE_NO_FUSION | EXE_REF_ELEMENTWISE};
        tpu_tensor **a = NULL, **b = NULL;
        int na = 0, nb = 0;
        CHECK(exe_run(ctx, m, &o, &fused, ins, nin, &a, &na) == TPU_OK);
        CHECK(exe_run(ctx, m, &o, &unfused, ins, nin, &b, &nb) == TPU_OK);
        for (int i = 0; i < na && i < nb; i++)
            CHECK_MSG(!memcmp(tpu_tensor_cdata(a[i]), tpu_tensor_cdata(b[i]), tpu_tensor_nbytes(a[i])),
                      "mode %d output %d: fused != unfused", mode, i);
        tpu_tensors_free(a, na);
        tpu_tensors_free(b, nb);
    }
    tpu_tensors_free(ins, nin);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

static void fused_matches_unfused(const char *hlo, const char *name, int threads)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    REQUIRE(tpu_module_parse(ctx, hlo, strlen(hlo), name, &m) == TPU_OK);
    tpu_tensor **ins = NULL, **a = NULL, **b = NULL;
    int nin = 0, na = 0, nb = 0;
    REQUIRE(tpu_random_inputs(ctx, m, 7, &ins, &nin) == TPU_OK);
    tpu_run_opts o = tpu_run_opts_default();
    o.threads = threads;
    exe_run_cfg fused = {0}, unfused = {.ref = EXE_NO_FUSION | EXE_REF_ELEMENTWISE};
    CHECK(exe_run(ctx, m, &o, &fused, ins, nin, &a, &na) == TPU_OK);
    CHECK(exe_run(ctx, m, &o, &unfused, ins, nin, &b, &nb) == TPU_OK);
    CHECK_EQ_INT(na, nb);
    for (int i = 0; i < na && i < nb; i++)
        CHECK_MSG(tpu_tensor_nbytes(a[i]) == tpu_tensor_nbytes(b[i]) &&
                  !memcmp(tpu_tensor_cdata(a[i]), tpu_tensor_cdata(b[i]), tpu_tensor_nbytes(a[i])),
                  "%s output %d: fused != unfused", name, i);
    tpu_tensors_free(a, na);
    tpu_tensors_free(b, nb);
    tpu_tensors_free(ins, nin);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* The fusion plan of computation c with every instruction live: its groups and each instruction's group
 * (gof, n entries; the caller frees it and the groups). 0 when planning fails. */
static int plan_all_live(tpu_ctx *ctx, const hlo_comp *c, int **gof, exe_fgroup **groups, int *ng)
{
    uint8_t *live = malloc((size_t)c->ninstrs);
    *gof = malloc((size_t)c->ninstrs * sizeof **gof);
    *groups = NULL;
    *ng = 0;
    int ok = live && *gof;
    if (ok) {
        memset(live, 1, (size_t)c->ninstrs);
        ok = exe_fuse_plan(ctx, c, 1, live, *gof, groups, ng) == TPU_OK;
    }
    free(live);
    return ok;
}

/* Both fused ways (with tables, and the reference elementwise path without them) against unfused reference
 * kernels, byte for byte, in numerics mode `mode` (1: exact) on `threads` threads (0: the default). */
static void fused_ways_match_unfused(tpu_ctx *ctx, tpu_module *m, tpu_tensor **ins, int nin, int mode, int threads)
{
    tpu_run_opts o = tpu_run_opts_default();
    o.numerics = mode ? TPU_NUMERICS_EXACT : TPU_NUMERICS_TPU;
    if (threads > 0) o.threads = threads;
    exe_run_cfg unfused = {.ref = EXE_NO_FUSION | EXE_REF_ELEMENTWISE};
    tpu_tensor **ref = NULL;
    int nref = 0;
    REQUIRE(exe_run(ctx, m, &o, &unfused, ins, nin, &ref, &nref) == TPU_OK);
    for (int way = 0; way < 2; way++) {
        exe_run_cfg cfg = {.ref = way ? EXE_REF_ELEMENTWISE : 0};
        tpu_tensor **a = NULL;
        int na = 0;
        CHECK(exe_run(ctx, m, &o, &cfg, ins, nin, &a, &na) == TPU_OK);
        CHECK_EQ_INT(na, nref);
        for (int i = 0; i < na && i < nref; i++)
            CHECK_MSG(tpu_tensor_nbytes(a[i]) == tpu_tensor_nbytes(ref[i]) &&
                      !memcmp(tpu_tensor_cdata(a[i]), tpu_tensor_cdata(ref[i]), tpu_tensor_nbytes(a[i])),
                      "mode %d, %d threads, %s: output %d differs from the unfused reference", mode, threads,
                      way ? "fused without tables" : "fused", i);
        tpu_tensors_free(a, na);
    }
    tpu_tensors_free(ref, nref);
}

/* Scratch buffers are shared between members whose lifetimes in a block do not overlap, and the block
 * shrinks when many values are live at once: a chain where ten values stay live to the end (f32, u32 and
 * u64, a bf16 input converted per block, scalar inputs read directly and through broadcasts, outputs taken
 * from the middle), over a count that leaves a short last block; one and several threads. */
TEST(fusion_shared_buffers_match_unfused)
{
    char hlo[16384];
    int len = snprintf(hlo, sizeof hlo,
                       "HloModule h\nENTRY main {\n x = f32[10007] parameter(0)\n u = u32[10007] parameter(1)\n"
                       " h = bf16[10007] parameter(2)\n s = f32[] parameter(3)\n k = u32[] parameter(4)\n"
                       " bs = f32[10007] broadcast(s), dimensions={}\n bk = u32[10007] broadcast(k), dimensions={}\n"
                       " hf = f32[10007] convert(h)\n w = u64[10007] convert(u)\n c7 = u64[] constant(7)\n"
                       " b7 = u64[10007] broadcast(c7), dimensions={}\n w1 = u64[10007] multiply(w, b7)\n"
                       " f0 = f32[10007] add(x, hf)\n i0 = u32[10007] xor(u, bk)\n");
    for (int i = 1; i < 10; i++)
        len += snprintf(hlo + len, sizeof hlo - (size_t)len,
                        " f%d = f32[10007] multiply(f%d, bs)\n g%d = f32[10007] add(f%d, x)\n"
                        " i%d = u32[10007] add(i%d, bk)\n j%d = u32[10007] shift-left(i%d, u)\n",
                        i, i - 1, i, i, i, i - 1, i, i);
    len += snprintf(hlo + len, sizeof hlo - (size_t)len, " a1 = f32[10007] add(g1, g2)\n p1 = u32[10007] or(j1, j2)\n");
    for (int i = 2; i < 9; i++)
        len += snprintf(hlo + len, sizeof hlo - (size_t)len,
                        " a%d = f32[10007] add(a%d, g%d)\n p%d = u32[10007] xor(p%d, j%d)\n", i, i - 1, i + 1, i, i - 1, i + 1);
    len += snprintf(hlo + len, sizeof hlo - (size_t)len,
                    " q = u64[10007] convert(p8)\n r = u64[10007] add(q, w1)\n rb = bf16[10007] convert(a8)\n"
                    " ROOT t = (f32[10007], u32[10007], u64[10007], bf16[10007], f32[10007]) tuple(a8, p8, r, rb, f5)\n}\n");
    REQUIRE(len < (int)sizeof hlo);
    fused_matches_unfused(hlo, "shared_buffers", 1);
    fused_matches_unfused(hlo, "shared_buffers", 2);
    fused_matches_unfused(hlo, "shared_buffers", 3);
}

/* Broadcast scalars read once by the f32 ops (either side: add, subtract, multiply, divide, maximum, minimum;
 * also bf16), the compares (f32, s32, u32; every direction) and select (either or both choices scalar): every
 * value an output of its own. */
TEST(fusion_scalar_float_compare_select_match_unfused)
{
    static const char *ops[] = {"add", "subtract", "multiply", "divide", "maximum", "minimum"};
    static const char *dirs[] = {"EQ", "NE", "LT", "LE", "GT", "GE"};
    char hlo[16384], root[4096];
    int len = snprintf(hlo, sizeof hlo,
                       "HloModule h\nENTRY main {\n x = f32[3001] parameter(0)\n s = f32[] parameter(1)\n"
                       " i = s32[3001] parameter(2)\n k = s32[] parameter(3)\n h = bf16[3001] parameter(4)\n"
                       " c = f32[] constant(-0)\n z = f32[] constant(0.25)\n"
                       " bs = f32[3001] broadcast(s), dimensions={}\n bc = f32[3001] broadcast(c), dimensions={}\n"
                       " bz = f32[3001] broadcast(z), dimensions={}\n bk = s32[3001] broadcast(k), dimensions={}\n"
                       " hs = bf16[] convert(s)\n bh = bf16[3001] broadcast(hs), dimensions={}\n"
                       " u = u32[3001] bitcast-convert(i)\n ku = u32[] bitcast-convert(k)\n bu = u32[3001] broadcast(ku), dimensions={}\n"), rl = 0;
    for (int o = 0; o < 6; o++) {
        len += snprintf(hlo + len, sizeof hlo - (size_t)len,
                        " l%d = f32[3001] %s(bs, x)\n r%d = f32[3001] %s(x, bc)\n hl%d = bf16[3001] %s(bh, h)\n"
                        " hr%d = bf16[3001] %s(h, bh)\n",
                        o, ops[o], o, ops[o], o, ops[o], o, ops[o]);
        rl += snprintf(root + rl, sizeof root - (size_t)rl, "%sl%d, r%d, hl%d, hr%d", o ? ", " : "", o, o, o, o);
    }
    for (int d = 0; d < 6; d++) {
        len += snprintf(hlo + len, sizeof hlo - (size_t)len,
                        " pf%d = pred[3001] compare(x, bz), direction=%s\n pi%d = pred[3001] compare(i, bk), direction=%s\n"
                        " pu%d = pred[3001] compare(u, bu), direction=%s\n"
                        " sa%d = f32[3001] select(pf%d, bs, x)\n sb%d = s32[3001] select(pi%d, i, bk)\n"
                        " sc%d = f32[3001] select(pu%d, bs, bz)\n",
                        d, dirs[d], d, dirs[d], d, dirs[d], d, d, d, d, d, d);
        rl += snprintf(root + rl, sizeof root - (size_t)rl, ", pf%d, pi%d, pu%d, sa%d, sb%d, sc%d", d, d, d, d, d, d);
    }
    len += snprintf(hlo + len, sizeof hlo - (size_t)len, " ROOT t = tuple(%s)\n}\n", root);
    REQUIRE(len < (int)sizeof hlo && rl < (int)sizeof root);
    fused_matches_unfused(hlo, "scalar_float", 1);
    fused_matches_unfused(hlo, "scalar_float", 2);
}

/* Rotates or(shift-left(x, l), shift-right-logical(x, r)) run as one member: scalar counts that add up to 32
 * and that do not (0/32, 32/0, 33/19, a parameter k and 32 - k), per-element counts (0..98 left, 27..34 right),
 * the or's operands in either order, s32 lanes, a rotate of a rotate, and shifts also read elsewhere (not
 * folded); the values are spread over all 32 bits first (random inputs are small). */
TEST(fusion_rotates_match_unfused)
{
    static const char *hlo =
        "HloModule h\nENTRY main {\n x0 = u32[4099] parameter(0)\n c = u32[4099] parameter(1)\n y0 = s32[4099] parameter(2)\n"
        " k = u32[] parameter(3)\n cm = u32[] constant(2654435761)\n bm = u32[4099] broadcast(cm), dimensions={}\n"
        " x1 = u32[4099] multiply(x0, bm)\n x = u32[4099] add(x1, bm)\n"
        " c13 = u32[] constant(13)\n c19 = u32[] constant(19)\n c0 = u32[] constant(0)\n"
        " c32 = u32[] constant(32)\n c33 = u32[] constant(33)\n k2 = u32[] subtract(c32, k)\n"
        " b13 = u32[4099] broadcast(c13), dimensions={}\n b19 = u32[4099] broadcast(c19), dimensions={}\n"
        " b0 = u32[4099] broadcast(c0), dimensions={}\n b32 = u32[4099] broadcast(c32), dimensions={}\n"
        " b33 = u32[4099] broadcast(c33), dimensions={}\n bk = u32[4099] broadcast(k), dimensions={}\n"
        " bk2 = u32[4099] broadcast(k2), dimensions={}\n"
        " l1 = u32[4099] shift-left(x, b13)\n r1 = u32[4099] shift-right-logical(x, b19)\n o1 = u32[4099] or(l1, r1)\n"
        " l2 = u32[4099] shift-left(x, b0)\n r2 = u32[4099] shift-right-logical(x, b32)\n o2 = u32[4099] or(r2, l2)\n"
        " l3 = u32[4099] shift-left(x, b32)\n r3 = u32[4099] shift-right-logical(x, b0)\n o3 = u32[4099] or(l3, r3)\n"
        " l4 = u32[4099] shift-left(x, b33)\n r4 = u32[4099] shift-right-logical(x, b19)\n o4 = u32[4099] or(l4, r4)\n"
        " l5 = u32[4099] shift-left(x, bk)\n r5 = u32[4099] shift-right-logical(x, bk2)\n o5 = u32[4099] or(l5, r5)\n"
        " d = u32[4099] add(c, c)\n e = u32[4099] multiply(d, c)\n c27 = u32[] constant(27)\n"
        " b27 = u32[4099] broadcast(c27), dimensions={}\n f = u32[4099] add(c, b27)\n"
        " l6 = u32[4099] shift-left(x, e)\n r6 = u32[4099] shift-right-logical(x, f)\n o6 = u32[4099] or(l6, r6)\n"
        " l7 = u32[4099] shift-left(o1, b13)\n r7 = u32[4099] shift-right-logical(o1, b19)\n o7 = u32[4099] or(l7, r7)\n"
        " p7 = u32[4099] xor(o7, l7)\n"
        " ys = s32[4099] bitcast-convert(x)\n y = s32[4099] add(ys, y0)\n"
        " cs = s32[] constant(5)\n cs2 = s32[] constant(27)\n bs = s32[4099] broadcast(cs), dimensions={}\n"
        " bs2 = s32[4099] broadcast(cs2), dimensions={}\n ls = s32[4099] shift-left(y, bs)\n rs = s32[4099] shift-right-logical(y, bs2)\n"
        " os = s32[4099] or(rs, ls)\n"
        " ROOT t = (u32[4099], u32[4099], u32[4099], u32[4099], u32[4099], u32[4099], u32[4099], s32[4099]) tuple(o1, o2, o3, o4, o5, o6, p7, os)\n}\n";
    fused_matches_unfused(hlo, "rotates", 1);
    fused_matches_unfused(hlo, "rotates", 2);
}

/* 64-bit lanes: a broadcast scalar on either side (shift counts 0, 63, 64, 65, a parameter; add, subtract,
 * multiply, and, or, xor), and 64 -> 32-bit converts (jax's iota split into two u32 halves). */
TEST(fusion_scalar_64bit_and_narrowing_match_unfused)
{
    static const char *ops[] = {"add", "subtract", "multiply", "and", "or", "xor", "shift-left", "shift-right-logical"};
    static const char *cnt[] = {"0", "63", "64", "65", "2654435761", "33"};
    char hlo[16384], root[4096];
    int len = snprintf(hlo, sizeof hlo,
                       "HloModule h\nENTRY main {\n i = u64[3001] iota(), iota_dimension=0\n x0 = u64[3001] parameter(0)\n"
                       " k = u64[] parameter(1)\n m = u64[] constant(11400714819323198485)\n bm = u64[3001] broadcast(m), dimensions={}\n"
                       " x1 = u64[3001] add(x0, i)\n x = u64[3001] multiply(x1, bm)\n bk = u64[3001] broadcast(k), dimensions={}\n"),
        rl = 0;
    for (int c = 0; c < 6; c++) {
        len += snprintf(hlo + len, sizeof hlo - (size_t)len, " c%d = u64[] constant(%s)\n b%d = u64[3001] broadcast(c%d), dimensions={}\n",
                        c, cnt[c], c, c);
        for (int o = 0; o < 8; o++) {
            len += snprintf(hlo + len, sizeof hlo - (size_t)len, " r%d_%d = u64[3001] %s(x, b%d)\n l%d_%d = u64[3001] %s(b%d, x)\n",
                            c, o, ops[o], c, c, o, ops[o], c);
            rl += snprintf(root + rl, sizeof root - (size_t)rl, "%sr%d_%d, l%d_%d", rl ? ", " : "", c, o, c, o);
        }
    }
    len += snprintf(hlo + len, sizeof hlo - (size_t)len,
                    " rk = u64[3001] shift-right-logical(x, bk)\n lk = u64[3001] subtract(bk, x)\n"
                    " n1 = u32[3001] convert(x)\n s = s64[3001] bitcast-convert(x)\n n2 = s32[3001] convert(s)\n"
                    " n3 = s32[3001] convert(x)\n n4 = u32[3001] convert(s)\n"
                    " ROOT t = tuple(%s, rk, lk, n1, n2, n3, n4)\n}\n", root);
    REQUIRE(len < (int)sizeof hlo && rl < (int)sizeof root);
    fused_matches_unfused(hlo, "scalar_64bit", 1);
    fused_matches_unfused(hlo, "scalar_64bit", 2);
}

/* Unsigned divide and remainder by a broadcast scalar (a parameter: random 0..7, so 0 and 1 too; constants
 * 1000, 2^31 + 1, 2^32 - 1) on spread-out values, and a signed remainder by a scalar beside them. */
TEST(fusion_divrem_by_scalar_match_unfused)
{
    static const char *hlo =
        "HloModule h\nENTRY main {\n x0 = u32[5003] parameter(0)\n k = u32[] parameter(1)\n y = s32[5003] parameter(2)\n"
        " cm = u32[] constant(2654435761)\n bm = u32[5003] broadcast(cm), dimensions={}\n x1 = u32[5003] multiply(x0, bm)\n"
        " i = u32[5003] iota(), iota_dimension=0\n x2 = u32[5003] multiply(i, bm)\n x = u32[5003] add(x1, x2)\n"
        " bk = u32[5003] broadcast(k), dimensions={}\n c1 = u32[] constant(1000)\n b1 = u32[5003] broadcast(c1), dimensions={}\n"
        " c2 = u32[] constant(2147483649)\n b2 = u32[5003] broadcast(c2), dimensions={}\n"
        " c3 = u32[] constant(4294967295)\n b3 = u32[5003] broadcast(c3), dimensions={}\n"
        " r0 = u32[5003] remainder(x, bk)\n q0 = u32[5003] divide(x, bk)\n r1 = u32[5003] remainder(x, b1)\n"
        " q1 = u32[5003] divide(x, b1)\n r2 = u32[5003] remainder(x, b2)\n q2 = u32[5003] divide(x, b2)\n"
        " r3 = u32[5003] remainder(x, b3)\n q3 = u32[5003] divide(x, b3)\n s = u32[5003] add(r1, q1)\n"
        " cs = s32[] constant(-7)\n bs = s32[5003] broadcast(cs), dimensions={}\n ys = s32[5003] bitcast-convert(x)\n"
        " rs = s32[5003] remainder(ys, bs)\n"
        " ROOT t = tuple(r0, q0, s, r2, q2, r3, q3, rs)\n}\n";
    fused_matches_unfused(hlo, "divrem", 1);
    fused_matches_unfused(hlo, "divrem", 2);
}

/* f32 multiply-adds fold the product into the add or subtract: product on either side of add and subtract,
 * scalar factors, a Horner chain, a product read twice (not folded), a bf16 add (not folded), products of
 * large and tiny values (overflow, subnormal results). */
TEST(fusion_multiply_add_match_unfused)
{
    static const char *hlo =
        "HloModule h\nENTRY main {\n x = f32[4097] parameter(0)\n y = f32[4097] parameter(1)\n w = f32[4097] parameter(2)\n"
        " s = f32[] parameter(3)\n h = bf16[4097] parameter(4)\n bs = f32[4097] broadcast(s), dimensions={}\n"
        " big = f32[] constant(3e38)\n bb = f32[4097] broadcast(big), dimensions={}\n tiny = f32[] constant(1.5e-38)\n"
        " bt = f32[4097] broadcast(tiny), dimensions={}\n"
        " m1 = f32[4097] multiply(x, y)\n a1 = f32[4097] add(w, m1)\n m2 = f32[4097] multiply(x, bs)\n a2 = f32[4097] add(m2, y)\n"
        " m3 = f32[4097] multiply(y, w)\n a3 = f32[4097] subtract(x, m3)\n m4 = f32[4097] multiply(bs, w)\n a4 = f32[4097] subtract(m4, x)\n"
        " m5 = f32[4097] multiply(a1, x)\n a5 = f32[4097] add(m5, a2)\n m6 = f32[4097] multiply(a5, x)\n a6 = f32[4097] add(m6, a3)\n"
        " m7 = f32[4097] multiply(a6, x)\n a7 = f32[4097] subtract(a4, m7)\n"
        " m8 = f32[4097] multiply(x, w)\n a8 = f32[4097] add(m8, y)\n d8 = f32[4097] add(a8, m8)\n"
        " m9 = f32[4097] multiply(x, bb)\n a9 = f32[4097] add(m9, bb)\n m10 = f32[4097] multiply(y, bt)\n a10 = f32[4097] subtract(m10, bt)\n"
        " hf = f32[4097] convert(h)\n m11 = f32[4097] multiply(hf, hf)\n a11 = f32[4097] add(m11, x)\n"
        " mh = bf16[4097] multiply(h, h)\n ah = bf16[4097] add(mh, h)\n"
        " ROOT t = tuple(a1, a2, a3, a4, a7, d8, a9, a10, a11, ah)\n}\n";
    fused_matches_unfused(hlo, "muladd", 1);
    fused_matches_unfused(hlo, "muladd", 2);
}

/* Several outputs of one group while an input that dies there receives an output in place (a dot's result,
 * read by every member): the outputs with tensors of their own are written directly, the one in place only
 * at the block's end. */
TEST(fusion_outputs_direct_and_in_place_match_unfused)
{
    static const char *hlo =
        "HloModule h\nENTRY main {\n p = f32[96,80] parameter(0)\n q = f32[80,96] parameter(1)\n"
        " d = f32[96,96] dot(p, q), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n c = f32[] constant(2)\n"
        " bc = f32[96,96] broadcast(c), dimensions={}\n e = f32[96,96] multiply(d, bc)\n f = f32[96,96] add(e, d)\n"
        " g = f32[96,96] subtract(f, d)\n h = f32[96,96] multiply(g, d)\n"
        " ROOT t = (f32[96,96], f32[96,96], f32[96,96]) tuple(e, g, h)\n}\n";
    fused_matches_unfused(hlo, "outputs_in_place", 1);
    fused_matches_unfused(hlo, "outputs_in_place", 2);
}

/* Dynamic-slices read only by fused members are absorbed (each block copies its part of the window): rank 1
 * and 2, starts in range, negative and past the end (clamped), s32/u32/s64 starts, f32/bf16/s32/u64 windows
 * over several blocks, a window read by two members, one also read outside (not absorbed), and a window that
 * moves in a loop (a fori_loop accumulating x[i*8 : i*8+60, i*16 : i*16+70]). */
TEST(fusion_dynamic_slice_windows_match_unfused)
{
    static const char *hlo =
        "HloModule h\n"
        "body { p = (s32[], f32[60,70], f32[200,300]) parameter(0)\n i = s32[] get-tuple-element(p), index=0\n"
        " acc = f32[60,70] get-tuple-element(p), index=1\n x = f32[200,300] get-tuple-element(p), index=2\n"
        " c8 = s32[] constant(8)\n c16 = s32[] constant(16)\n r = s32[] multiply(i, c8)\n q = s32[] multiply(i, c16)\n"
        " w = f32[60,70] dynamic-slice(x, r, q), dynamic_slice_sizes={60,70}\n a = f32[60,70] add(acc, w)\n"
        " one = s32[] constant(1)\n j = s32[] add(i, one)\n ROOT t = (s32[], f32[60,70], f32[200,300]) tuple(j, a, x) }\n"
        "cond { p = (s32[], f32[60,70], f32[200,300]) parameter(0)\n i = s32[] get-tuple-element(p), index=0\n"
        " n = s32[] constant(20)\n ROOT lt = pred[] compare(i, n), direction=LT }\n"
        "ENTRY main {\n x = f32[200,300] parameter(0)\n h = bf16[100,90] parameter(1)\n v = s32[9000] parameter(2)\n"
        " u = u64[50,120] parameter(3)\n k = s32[] parameter(4)\n"
        " z = f32[] constant(0)\n zb = f32[60,70] broadcast(z), dimensions={}\n c0 = s32[] constant(0)\n"
        " init = (s32[], f32[60,70], f32[200,300]) tuple(c0, zb, x)\n wl = (s32[], f32[60,70], f32[200,300]) while(init), condition=cond, body=body\n"
        " loop = f32[60,70] get-tuple-element(wl), index=1\n"
        " m5 = s32[] constant(-5)\n big = s64[] constant(100000)\n ku = u32[] constant(17)\n c3 = s32[] constant(3)\n"
        " w1 = f32[60,70] dynamic-slice(x, k, k), dynamic_slice_sizes={60,70}\n"
        " w2 = f32[60,70] dynamic-slice(x, m5, c3), dynamic_slice_sizes={60,70}\n"
        " big2 = s64[] constant(17)\n w3 = f32[60,70] dynamic-slice(x, big, big2), dynamic_slice_sizes={60,70}\n"
        " e1 = f32[60,70] multiply(w1, w2)\n e2 = f32[60,70] add(e1, w3)\n e3 = f32[60,70] subtract(e2, w1)\n"
        " hb = bf16[40,33] dynamic-slice(h, k, m5), dynamic_slice_sizes={40,33}\n hc = bf16[40,33] multiply(hb, hb)\n"
        " hd = bf16[40,33] add(hc, hb)\n"
        " vb = s32[2500] dynamic-slice(v, k), dynamic_slice_sizes={2500}\n vc = s32[2500] multiply(vb, vb)\n"
        " vd = s32[2500] add(vc, vb)\n"
        " ku2 = u32[] constant(4000000000)\n ub = u64[30,100] dynamic-slice(u, ku, ku2), dynamic_slice_sizes={30,100}\n uc = u64[30,100] add(ub, ub)\n"
        " ud = u64[30,100] xor(uc, ub)\n"
        " wo = f32[60,70] dynamic-slice(x, c3, c3), dynamic_slice_sizes={60,70}\n wp = f32[60,70] multiply(wo, wo)\n"
        " wq = f32[60,70] add(wp, wo)\n wr = f32[4200] reshape(wo)\n"
        " ROOT t = tuple(loop, e3, hd, vd, ud, wq, wr)\n}\n";
    fused_matches_unfused(hlo, "dynamic_slice", 1);
    fused_matches_unfused(hlo, "dynamic_slice", 2);
}

/* One-block groups (a loop body's small fused ops) run on the calling thread and read array broadcasts through
 * tables planned once (exe_fmember.bidx): broadcasts along each dimension of a matrix, a 3-d one skipping a
 * dimension, s32, u64 and pred operands, a bf16 one (no table: converted per element), a group over several
 * blocks (no table), and the same in a loop. Each runs fused with the tables, fused without them
 * (EXE_REF_ELEMENTWISE: fu_broadcast) and unfused with the reference kernels: the same bytes. */
TEST(fusion_small_group_broadcast_tables_match_unfused)
{
    static const char *hlo =
        "HloModule h\n"
        "body { p = (s32[], f32[8,8], f32[8]) parameter(0)\n i = s32[] get-tuple-element(p), index=0\n"
        " a = f32[8,8] get-tuple-element(p), index=1\n v = f32[8] get-tuple-element(p), index=2\n"
        " b0 = f32[8,8] broadcast(v), dimensions={0}\n b1 = f32[8,8] broadcast(v), dimensions={1}\n"
        " c = f32[] constant(0.5)\n bc = f32[8,8] broadcast(c), dimensions={}\n m = f32[8,8] multiply(b0, b1)\n"
        " s = f32[8,8] multiply(a, bc)\n n = f32[8,8] add(s, m)\n t = f32[8,8] tanh(n)\n"
        " one = s32[] constant(1)\n j = s32[] add(i, one)\n ROOT r = (s32[], f32[8,8], f32[8]) tuple(j, t, v) }\n"
        "cond { p = (s32[], f32[8,8], f32[8]) parameter(0)\n i = s32[] get-tuple-element(p), index=0\n"
        " k = s32[] constant(30)\n ROOT lt = pred[] compare(i, k), direction=LT }\n"
        "ENTRY main {\n v = f32[8] parameter(0)\n w = f32[4,6] parameter(1)\n iv = s32[7] parameter(2)\n"
        " u = u64[3] parameter(3)\n h = bf16[8] parameter(4)\n pv = pred[5] parameter(5)\n mm = f32[8,8] parameter(6)\n"
        " r = f32[100] parameter(7)\n x3 = f32[3] parameter(8)\n"
        " b0 = f32[8,8] broadcast(v), dimensions={0}\n b1 = f32[8,8] broadcast(v), dimensions={1}\n"
        " e0 = f32[8,8] multiply(b0, b1)\n e1 = f32[8,8] subtract(e0, mm)\n"
        " bw = f32[4,5,6] broadcast(w), dimensions={0,2}\n e2 = f32[4,5,6] multiply(bw, bw)\n e3 = f32[4,5,6] add(e2, bw)\n"
        " bx = f32[2,3,4] broadcast(x3), dimensions={1}\n e4 = f32[2,3,4] exponential(bx)\n"
        " bi = s32[3,7] broadcast(iv), dimensions={1}\n bi2 = s32[3,7] broadcast(iv), dimensions={1}\n"
        " e5 = s32[3,7] multiply(bi, bi2)\n"
        " bu = u64[3,4] broadcast(u), dimensions={0}\n e6 = u64[3,4] xor(bu, bu)\n e7 = u64[3,4] add(e6, bu)\n"
        " bh = bf16[8,8] broadcast(h), dimensions={1}\n e8 = bf16[8,8] multiply(bh, bh)\n"
        " bp = pred[5,2] broadcast(pv), dimensions={0}\n e9 = pred[5,2] not(bp)\n"
        " br = f32[100,50] broadcast(r), dimensions={0}\n e10 = f32[100,50] multiply(br, br)\n"
        " z = s32[] constant(0)\n init = (s32[], f32[8,8], f32[8]) tuple(z, mm, v)\n"
        " wl = (s32[], f32[8,8], f32[8]) while(init), condition=cond, body=body\n"
        " loop = f32[8,8] get-tuple-element(wl), index=1\n"
        " ROOT t = tuple(e1, e3, e4, e5, e7, e8, e9, e10, loop)\n}\n";
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    REQUIRE(tpu_module_parse(ctx, hlo, strlen(hlo), "bcast_tables", &m) == TPU_OK);
    /* the plan: tables for the array broadcasts of the one-block groups (none in the group of 5000 elements) */
    int *gof = NULL, ng = 0, tables = 0, big = 0;
    exe_fgroup *groups = NULL;
    REQUIRE(plan_all_live(ctx, m->entry, &gof, &groups, &ng));
    for (int g = 0; g < ng; g++)
        for (int k = 0; k < groups[g].nmembers; k++) {
            const exe_fmember *fm = &groups[g].members[k];
            tables += fm->bidx != NULL;
            big += fm->bidx != NULL && !strcmp(fm->in->name, "br");
        }
    exe_fuse_free(groups, ng);
    free(gof);
    CHECK_MSG(tables >= 7 && big == 0, "%d broadcast tables planned (%d for the multi-block group)", tables, big);
    tpu_tensor **ins = NULL;
    int nin = 0;
    REQUIRE(tpu_random_inputs(ctx, m, 13, &ins, &nin) == TPU_OK);
    for (int mode = 0; mode < 2; mode++) fused_ways_match_unfused(ctx, m, ins, nin, mode, 0);
    tpu_tensors_free(ins, nin);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* Views (exe_fmember.view): static moves read by group members through one composed table, the chain under
 * them never materialised: slices (strided), reshapes, transposes, reverses and broadcasts over them; a
 * contiguous run read in place; column blocks of a matrix, copied a row at a time; bf16 bottoms (no table:
 * fu_view_index per element), one over several blocks beside a scalar broadcast's buffer, which an input read
 * only by the view must not overwrite (a transposing bf16 broadcast had that fault before views); s32, u64 and
 * pred bottoms; lax.scan's row xs[i] (a dynamic-slice and its reshape: the slice's member stands for both,
 * starts clamped; not where the reshape is read elsewhere too); a slice read by two broadcasts and the result (not chained); the transpose of a dot
 * (formerly written transposed by the dot); a lone op over a plain reshape (left alone: the reshape is a view
 * already); a view over several blocks; one too large to be a view; and
 * jnp.outer(h[:8], h[:8]) of a tanh in a loop. Each runs fused with the tables, fused without them
 * (EXE_REF_ELEMENTWISE) and unfused with the reference kernels: the same bytes. */
TEST(fusion_views_match_unfused)
{
    static const char *hlo =
        "HloModule h\n"
        "body { p = (s32[], f32[64], f32[8,8]) parameter(0)\n i = s32[] get-tuple-element(p), index=0\n"
        " h = f32[64] get-tuple-element(p), index=1\n m = f32[8,8] get-tuple-element(p), index=2\n"
        " c9 = f32[] constant(0.9)\n b9 = f32[64] broadcast(c9), dimensions={}\n hm = f32[64] multiply(h, b9)\n"
        " t = f32[64] tanh(hm)\n s0 = f32[8] slice(t), slice={[0:8]}\n s1 = f32[8] slice(t), slice={[8:64:7]}\n"
        " r0 = f32[8,1] reshape(s0)\n r1 = f32[8] reshape(r0)\n o0 = f32[8,8] broadcast(r1), dimensions={0}\n"
        " o1 = f32[8,8] broadcast(s1), dimensions={1}\n tm = f32[8,8] transpose(m), dimensions={1,0}\n"
        " e = f32[8,8] multiply(o0, o1)\n f = f32[8,8] add(e, tm)\n"
        " one = s32[] constant(1)\n j = s32[] add(i, one)\n ROOT r = (s32[], f32[64], f32[8,8]) tuple(j, t, f) }\n"
        "cond { p = (s32[], f32[64], f32[8,8]) parameter(0)\n i = s32[] get-tuple-element(p), index=0\n"
        " k = s32[] constant(25)\n ROOT lt = pred[] compare(i, k), direction=LT }\n"
        "ENTRY main {\n x = f32[6,10] parameter(0)\n y = f32[10,3] parameter(1)\n z = f32[20] parameter(2)\n"
        " hb = bf16[8,8] parameter(3)\n iv = s32[4,5] parameter(4)\n u = u64[12] parameter(5)\n pv = pred[10] parameter(6)\n"
        " w = f32[16] parameter(7)\n a = f32[8,16] parameter(8)\n bm = f32[16,8] parameter(9)\n big = f32[64,64] parameter(10)\n"
        " huge = f32[65,64] parameter(11)\n h0 = f32[64] parameter(12)\n m0 = f32[8,8] parameter(13)\n"
        " bigb = bf16[64,64] parameter(14)\n bbt = bf16[64,64] transpose(bigb), dimensions={1,0}\n"
        " cb = bf16[] constant(1.5)\n cbb = bf16[64,64] broadcast(cb), dimensions={}\n bbm = bf16[64,64] multiply(cbb, bbt)\n"
        " bbt2 = bf16[64,64] broadcast(bigb), dimensions={1,0}\n bbm2 = bf16[64,64] multiply(cbb, bbt2)\n"
        " cols = f32[32,384] parameter(15)\n cs = f32[32,128] slice(cols), slice={[0:32], [128:256]}\n"
        " cm = f32[32,128] multiply(cs, cs)\n cs2 = f32[4,24] slice(cols), slice={[3:7], [300:324]}\n"
        " cm2 = f32[4,24] add(cs2, cs2)\n"
        " xsd = f32[30,64] parameter(16)\n kk = s32[] parameter(17)\n cz = s32[] constant(0)\n cm5 = s32[] constant(-5)\n"
        " c100 = s32[] constant(100)\n xd = f32[1,64] dynamic-slice(xsd, kk, cz), dynamic_slice_sizes={1,64}\n"
        " xdr = f32[64] reshape(xd)\n xde = f32[64] multiply(xdr, h0)\n"
        " xd2 = f32[2,32] dynamic-slice(xsd, c100, cm5), dynamic_slice_sizes={2,32}\n xd2r = f32[64] reshape(xd2)\n"
        " xd2e = f32[64] add(xd2r, xde)\n"
        " xd3 = f32[1,64] dynamic-slice(xsd, cz, kk), dynamic_slice_sizes={1,64}\n xd3r = f32[64] reshape(xd3)\n"
        " xd3e = f32[64] subtract(xd3r, h0)\n rz = f32[4,16] reshape(h0)\n rn = f32[4,16] negate(rz)\n"
        " xs = f32[3,10] slice(x), slice={[1:6:2], [0:10]}\n xt = f32[10,3] transpose(xs), dimensions={1,0}\n"
        " xr = f32[10,3] reverse(xt), dimensions={0}\n e1 = f32[10,3] add(xr, y)\n e2 = f32[10,3] multiply(e1, xr)\n"
        " xc = f32[2,10] slice(x), slice={[2:4], [0:10]}\n xcr = f32[20] reshape(xc)\n e3 = f32[20] subtract(xcr, z)\n"
        " e4 = f32[20] multiply(e3, e3)\n"
        " hbt = bf16[8,8] transpose(hb), dimensions={1,0}\n hc = bf16[8,8] multiply(hbt, hbt)\n hd = bf16[8,8] add(hc, hbt)\n"
        " ivs = s32[5,4] transpose(iv), dimensions={1,0}\n ivb = s32[3,5,4] broadcast(ivs), dimensions={1,2}\n"
        " iw = s32[3,5,4] multiply(ivb, ivb)\n"
        " us0 = u64[6] slice(u), slice={[0:12:2]}\n us = u64[2,3] reshape(us0)\n ux = u64[2,3] xor(us, us)\n uy = u64[2,3] add(ux, us)\n"
        " pr = pred[10] reverse(pv), dimensions={0}\n pn = pred[10] not(pr)\n pa = pred[10] and(pn, pv)\n"
        " q = f32[8] slice(w), slice={[3:11]}\n qb0 = f32[8,8] broadcast(q), dimensions={0}\n"
        " qb1 = f32[8,8] broadcast(q), dimensions={1}\n g = f32[8,8] multiply(qb0, qb1)\n"
        " d = f32[8,8] dot(a, bm), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        " dt = f32[8,8] transpose(d), dimensions={1,0}\n dg = f32[8,8] add(dt, dt)\n"
        " bt = f32[64,64] transpose(big), dimensions={1,0}\n bs = f32[64,64] multiply(bt, bt)\n"
        " ht = f32[64,65] transpose(huge), dimensions={1,0}\n hs = f32[64,65] multiply(ht, ht)\n"
        " c0 = s32[] constant(0)\n init = (s32[], f32[64], f32[8,8]) tuple(c0, h0, m0)\n"
        " wl = (s32[], f32[64], f32[8,8]) while(init), condition=cond, body=body\n"
        " lh = f32[64] get-tuple-element(wl), index=1\n lm = f32[8,8] get-tuple-element(wl), index=2\n"
        " ROOT t = tuple(e2, e4, hd, iw, uy, pa, g, q, dg, bs, hs, lh, lm, bbm, bbm2, cm, cm2, xd2e, xd3r, xd3e, rn)\n}\n";
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    REQUIRE(tpu_module_parse(ctx, hlo, strlen(hlo), "views", &m) == TPU_OK);
    /* the plans: views over chains (their moves absorbed), in place for the contiguous run, none too large */
    int views = 0, runs = 0, rows = 0, absorbed = 0, kept = 0;
    for (int ci = 0; ci < m->ncomps; ci++) {
        const hlo_comp *c = m->comps[ci];
        int *gof = NULL, ng = 0;
        exe_fgroup *groups = NULL;
        REQUIRE(plan_all_live(ctx, c, &gof, &groups, &ng));
        for (int g = 0; g < ng; g++)
            for (int k = 0; k < groups[g].nmembers; k++) {
                const exe_fmember *fm = &groups[g].members[k];
                views += fm->view != 0;
                runs += fm->view == 2;
                rows += fm->view == 1 && fm->vrun >= 16;
            }
        for (int i = 0; i < c->ninstrs; i++) {
            const char *nm = c->instrs[i]->name;
            if (!strcmp(nm, "xs") || !strcmp(nm, "xt") || !strcmp(nm, "s0") || !strcmp(nm, "r0") || !strcmp(nm, "r1") ||
                !strcmp(nm, "us0") || !strcmp(nm, "ivs") || !strcmp(nm, "s1") || !strcmp(nm, "xd") || !strcmp(nm, "xdr") ||
                !strcmp(nm, "xd2") || !strcmp(nm, "xd2r"))
                absorbed += gof[i] == EXE_FUSE_ABSORBED;
            if (!strcmp(nm, "q") || !strcmp(nm, "ht") || !strcmp(nm, "xd3") || !strcmp(nm, "xd3r") || !strcmp(nm, "rz") ||
                !strcmp(nm, "rn"))
                kept += gof[i] == EXE_FUSE_NONE;
        }
        exe_fuse_free(groups, ng);
        free(gof);
    }
    CHECK_MSG(views >= 14 && runs >= 1 && rows == 2 && absorbed == 12 && kept == 6, "%d views (%d in place, %d by rows), "
              "%d of 12 moves absorbed, %d of 6 kept", views, runs, rows, absorbed, kept);
    tpu_tensor **ins = NULL;
    int nin = 0;
    REQUIRE(tpu_random_inputs(ctx, m, 17, &ins, &nin) == TPU_OK);
    for (int mode = 0; mode < 2; mode++)
        for (int threads = 1; threads <= 2; threads++) fused_ways_match_unfused(ctx, m, ins, nin, mode, threads);
    tpu_tensors_free(ins, nin);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}
