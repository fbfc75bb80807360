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
