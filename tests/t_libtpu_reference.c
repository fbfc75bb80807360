/* t_libtpu_reference.c — tpusim's memory model against the real TPU compiler.
 *
 * tests/reference/libtpu_memory.py compiles a set of JAX programs with XLA:TPU (PyPI's libtpu) ahead of
 * time for TPU topologies on a CPU-only machine and records what the real compiler decided:
 * memory_analysis() (argument/output/temp bytes), the HBM space of its memory-usage report, its largest buffers with their tiled layouts, its
 * optimized programs (tests/reference/hlo/NAME.opt.hlo) and each generation's usable HBM from a deliberate
 * out-of-memory compile. This file checks tpusim against those numbers; it needs neither Python nor libtpu.
 *
 * Tolerances, from what was measured (tests/reference/libtpu_memory.md):
 *   - a tiled buffer of the real buffer assignment: exact (padding with a given layout is arithmetic);
 *   - usable HBM per generation: within the rounding of the compiler's "of 15.48G hbm" (0.005 GiB);
 *   - the programs, before and after optimization: ratchets on the median and largest error over the set and on
 *     how many are within 10% and 30% (below); argument bytes exact; the out-of-memory verdict on every compile. */
#include "test.h"

#include <cjson/cJSON.h>
#include <stdlib.h>

#define REF_DIR  "tests/reference/"
#define REF_JSON REF_DIR "libtpu_memory.json"

static char *ref_read(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (buf) buf[n] = 0;
    fclose(f);
    return buf;
}

static cJSON *ref_load(void)
{
    char *t = ref_read(REF_JSON);
    if (!t) {
        test_fail(__FILE__, __LINE__, "cannot read %s (run from the repository root)", REF_JSON);
        return NULL;
    }
    cJSON *j = cJSON_Parse(t);
    free(t);
    if (!j) test_fail(__FILE__, __LINE__, "%s: not JSON", REF_JSON);
    return j;
}

static double ref_num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static const char *ref_str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* tpusim's memory report (as parsed JSON) for a module, or NULL with the reason in `why`. */
static cJSON *ref_plan(tpu_ctx *ctx, tpu_module *m, const char *chip, char *why, size_t nwhy)
{
    tpu_memory_opts o = {.chip = chip};
    tpu_memory *mem = NULL;
    if (tpu_memory_plan(ctx, m, &o, &mem) != TPU_OK) {
        snprintf(why, nwhy, "%s", tpu_errmsg(ctx));
        return NULL;
    }
    const char *js = tpu_memory_json(mem);
    cJSON *j = js ? cJSON_Parse(js) : NULL;
    tpu_memory_free(mem);
    if (!j) snprintf(why, nwhy, "no memory JSON");
    return j;
}

static cJSON *ref_plan_file(tpu_ctx *ctx, const char *path, const char *chip, char *why, size_t nwhy)
{
    tpu_module *m = NULL;
    if (tpu_module_load(ctx, path, &m) != TPU_OK) {
        snprintf(why, nwhy, "%s", tpu_errmsg(ctx));
        return NULL;
    }
    cJSON *j = ref_plan(ctx, m, chip, why, nwhy);
    tpu_module_free(m);
    return j;
}

static double ref_err(double got, double want) { return want > 0 ? (got - want) / want : 0; }

/* The real compiler's file is committed with the json: a missing one is an error, not a skip. */
TEST(libtpu_ref_json_is_complete)
{
    cJSON *j = ref_load();
    REQUIRE(j);
    const cJSON *progs = cJSON_GetObjectItemCaseSensitive(j, "programs");
    REQUIRE(cJSON_IsArray(progs));
    int n = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, progs) {
        if (cJSON_GetObjectItemCaseSensitive(p, "error")) continue;
        n++;
        const cJSON *real = cJSON_GetObjectItemCaseSensitive(p, "real");
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(real, "oom"))) {   /* the compiler ran out of memory */
            CHECK(ref_str(real, "message") && strstr(ref_str(real, "message"), "RESOURCE_EXHAUSTED"));
            CHECK(ref_str(p, "hlo") != NULL);
            continue;
        }
        CHECK(ref_num(real, "hbm_bytes") > 0);
        CHECK(ref_num(real, "argument_bytes") >= 0);
        /* the real HBM figure is the usage report's HBM space (default, plus v4's "hbm"), what libtpu's
         * out-of-memory check totals (tests/reference/libtpu_oom_fragmentation.md), not memory_analysis'
         * args + outputs + temp - aliased, whose temp counts the heap's fragmentation twice */
        const cJSON *ms = cJSON_GetObjectItemCaseSensitive(real, "memory_spaces");
        double hbm_space = ref_num(ms, "default") + (ref_num(ms, "hbm") > 0 ? ref_num(ms, "hbm") : 0);
        CHECK_MSG(ref_num(ms, "default") > 0 && ref_num(real, "hbm_bytes") == hbm_space,
                  "%s: hbm_bytes %.0f, usage report's HBM space %.0f", ref_str(p, "program"), ref_num(real, "hbm_bytes"),
                  hbm_space);
        const char *h = ref_str(p, "hlo"), *oh = ref_str(p, "opt_hlo");
        REQUIRE(h && oh);
        FILE *f = fopen(h, "r");
        CHECK_MSG(f != NULL, "%s missing", h);
        if (f) fclose(f);
        f = fopen(oh, "r");
        CHECK_MSG(f != NULL, "%s missing", oh);
        if (f) fclose(f);
    }
    CHECK_MSG(n >= 10, "only %d programs compiled by the real compiler", n);
    cJSON_Delete(j);
}

/* tpusim's size for one array written with the given layout (as an entry parameter), or -1. */
static double ref_array_bytes(tpu_ctx *ctx, const char *shape, const char *chip)
{
    char text[512];
    snprintf(text, sizeof text, "HloModule b\n\nENTRY e {\n  ROOT p = %s parameter(0)\n}\n", shape);
    tpu_module *m = NULL;
    if (tpu_module_parse(ctx, text, strlen(text), "buffer", &m) != TPU_OK) return -1;
    char why[256];
    cJSON *r = ref_plan(ctx, m, chip, why, sizeof why);
    tpu_module_free(m);
    if (!r) return -1;
    double got = ref_num(r, "argument_bytes");
    cJSON_Delete(r);
    return got;
}

/* Known mismatches today (tpusim ignores the T(...) tiles written in a layout and has one tile per type
 * class): the real compiler uses T(4,128)/T(2,128)/T(1,128) tiles when the second-minor dimension is small,
 * pads 8-bit rows to 8 (v3) rather than 32, tiles rank-1 arrays by 128..1024 elements and allocates at least
 * 1 KiB (v2-v4) or 512 B (v5e and later) per array. A ratchet: lower these as src/chip and src/compile learn
 * the rules; the goal is 0. */
#define REF_KNOWN_LARGEST_MISMATCHES 20
#define REF_KNOWN_SHAPE_MISMATCHES   230
#define REF_KNOWN_DEFAULT_MISMATCHES 270

/* Every large buffer of the real buffer assignment and every probed array, written with the compiler's own
 * tiled layout, should have the size tpusim computes for it; and an array written with the default layout
 * (as in an unoptimized program) should get the size of the layout the compiler would choose. */
TEST(libtpu_ref_buffer_sizes)
{
    cJSON *j = ref_load();
    REQUIRE(j);
    tpu_ctx *ctx = tpu_ctx_new();
    int n_largest = 0, bad_largest = 0, n_shape = 0, bad_shape = 0, bad_default = 0;
    char first[3][256] = {"", "", ""};
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(j, "programs")) {
        const char *chip = ref_str(p, "chip");
        const cJSON *v;
        cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(p, "real_largest")) {
            const char *shape = ref_str(v, "shape");
            if (!shape || !chip || strstr(shape, "S(")) continue;   /* S(n): not HBM */
            double want = ref_num(v, "bytes"), got = ref_array_bytes(ctx, shape, chip);
            CHECK_MSG(got >= 0, "%s: %s", shape, tpu_errmsg(ctx));
            n_largest++;
            if (got != want && !bad_largest++)
                snprintf(first[0], sizeof first[0], "%s on %s: tpusim %.0f, real %.0f", shape, chip, got, want);
        }
    }
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(j, "shapes")) {
        const char *shape = ref_str(p, "shape"), *chip = ref_str(p, "chip");
        if (!shape || !chip) continue;
        double want = ref_num(p, "bytes"), got = ref_array_bytes(ctx, shape, chip);
        CHECK_MSG(got >= 0, "%s: %s", shape, tpu_errmsg(ctx));
        n_shape++;
        if (got != want && !bad_shape++)
            snprintf(first[1], sizeof first[1], "%s on %s: tpusim %.0f, real %.0f", shape, chip, got, want);
        /* the same array with the layout dropped */
        char plain[256];
        snprintf(plain, sizeof plain, "%s", shape);
        char *brace = strchr(plain, '{');
        if (brace) *brace = 0;
        got = ref_array_bytes(ctx, plain, chip);
        if (got != want && !bad_default++)
            snprintf(first[2], sizeof first[2], "%s on %s: tpusim %.0f, real %.0f (%s)", plain, chip, got, want, shape);
    }
    printf("    buffers: %d/%d largest, %d/%d arrays differ with the real layout, %d/%d with the default layout\n",
           bad_largest, n_largest, bad_shape, n_shape, bad_default, n_shape);
    for (int i = 0; i < 3; i++)
        if (first[i][0]) printf("      e.g. %s\n", first[i]);
    CHECK(n_largest >= 30 && n_shape >= 100);
    CHECK_MSG(bad_largest <= REF_KNOWN_LARGEST_MISMATCHES, "%d largest buffers differ (known: %d)", bad_largest,
              REF_KNOWN_LARGEST_MISMATCHES);
    CHECK_MSG(bad_shape <= REF_KNOWN_SHAPE_MISMATCHES, "%d arrays differ (known: %d)", bad_shape,
              REF_KNOWN_SHAPE_MISMATCHES);
    CHECK_MSG(bad_default <= REF_KNOWN_DEFAULT_MISMATCHES, "%d default-layout arrays differ (known: %d)", bad_default,
              REF_KNOWN_DEFAULT_MISMATCHES);
    tpu_ctx_free(ctx);
    cJSON_Delete(j);
}

/* The HBM a program may use, per generation, as the real compiler states it in its out-of-memory error
 * ("Used 111.87G of 15.48G hbm"), and tpusim's verdict on the same oversize program. */
TEST(libtpu_ref_usable_hbm_and_oom)
{
    cJSON *j = ref_load();
    REQUIRE(j);
    tpu_ctx *ctx = tpu_ctx_new();
    const cJSON *oom = cJSON_GetObjectItemCaseSensitive(j, "oom");
    REQUIRE(cJSON_IsObject(oom));
    int n = 0;
    const cJSON *g;
    cJSON_ArrayForEach(g, oom) {
        const char *chip = ref_str(g, "chip");
        double usable = ref_num(g, "usable_hbm_approx"), used = ref_num(g, "used_bytes_approx");
        if (!chip || usable <= 0) continue;
        /* jax's v4 topology compiles for one TensorCore (16 GiB, "of 15.25G"); tpusim's v4 devices are
         * megacore chips (32 GiB, "of 30.75G" in public reports), so v4 is not compared here */
        if (!strcmp(g->string, "v4")) continue;
        char why[512];
        cJSON *r = ref_plan_file(ctx, REF_DIR "hlo/oom_sort.hlo", chip, why, sizeof why);
        if (!r) {
            test_fail(__FILE__, __LINE__, "oom_sort.hlo on %s: %s", chip, why);
            continue;
        }
        n++;
        double cap = ref_num(r, "hbm_capacity_bytes");
        /* the message rounds to 0.01G */
        CHECK_MSG(fabs(cap - usable) <= 0.0051 * 1073741824.0, "%s: usable HBM tpusim %.4fG, real compiler %.2fG",
                  chip, cap / 1073741824.0, usable / 1073741824.0);
        const cJSON *fits = cJSON_GetObjectItemCaseSensitive(r, "fits");
        CHECK_MSG(cJSON_IsFalse(fits), "%s: tpusim says the oversize program fits", chip);
        /* the real compiler's "Used" is its whole heap; tpusim's peak should be of the same size */
        double peak = ref_num(r, "peak_bytes");
        CHECK_MSG(fabs(ref_err(peak, used)) <= 0.40, "%s: oversize program tpusim %.2fG, real compiler %.2fG", chip,
                  peak / 1073741824.0, used / 1073741824.0);
        cJSON_Delete(r);
    }
    CHECK(n >= 5);
    tpu_ctx_free(ctx);
    cJSON_Delete(j);
}

/* ---- the programs: tpusim's HBM figure against the real compiler's ----
 * Over the whole reference set (48 programs x v3, v5e, v6e and one v4 compile, tests/reference/libtpu_memory.md
 * "Summary"), before optimization (what users give tpusim: it chooses layouts, fusion, schedule and VMEM
 * placement itself) and on libtpu's optimized programs (layouts, fusion and schedule given). The bounds are
 * ratchets at today's measurement: a change that makes the set worse fails; one that makes it better lowers them
 * here. The goal (issue 13) is a median of 10% and a maximum of 30% before optimization: both are met since
 * VMEM candidates go in MSA's benefit order (vit_patch_train on v5e, +43.9% before, is -12.4%; the tiny
 * rank1_degenerate on v5e/v6e, -57% before tpusim put tuple index tables in the heap, is -23%). */
/* The real figure is the HBM space of the compiler's memory-usage report (what its out-of-memory check totals:
 * tests/reference/libtpu_oom_fragmentation.md); before, memory_analysis' args + outputs + temp - aliased, whose temp
 * counts the heap's fragmentation twice (then: before optimization median 0.1%, max 72.5%, 121 and 138 within
 * 10% and 30%; v3 median 2.0%; optimized median 0.1%, max 55.4%, 132 and 142). The medians rose because the HBM
 * space also holds what memory_analysis leaves out: tuple index tables and scalars in the 16 KiB-aligned heap
 * of v5e/v6e programs whose temporaries are otherwise all in VMEM (0.2-1.7 MiB). */
#define REF_PRE_MEDIAN          0.012   /* all compiles: 1.20% (1.03% before MSA's benefit order, which traded
                                         * small errors near the median for the maximum: conv1d_train on v5e/v6e
                                         * places the buffer libtpu does and lands at -1.2%, the output sharing
                                         * the heap; 1.38% before the tuple index tables) */
#define REF_PRE_MEDIAN_V3       0.033   /* v3, where every temporary is in HBM: 3.24% */
#define REF_PRE_MAX             0.26    /* 25.1% (resnet_block_train on v6e); 43.9% (vit_patch_train on v5e)
                                         * before MSA's benefit order, 57.1% before the tuple index tables
                                         * (rank1_degenerate on v5e, 0.09 MiB, now -23.0%) */
#define REF_PRE_WITHIN_10       123     /* of 143 within 10% (122 before MSA's benefit order) */
#define REF_PRE_WITHIN_30       143     /* of 143 within 30% (142) */
#define REF_OPT_MEDIAN          0.0055  /* 0.51% */
#define REF_OPT_MAX             0.33    /* 32.9% (rank1_degenerate on v3) */
#define REF_OPT_WITHIN_10       140
#define REF_OPT_WITHIN_30       144

static int ref_dbl_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double ref_median(double *v, int n)
{
    if (n <= 0) return 0;
    qsort(v, (size_t)n, sizeof *v, ref_dbl_cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* |error| of tpusim's peak for every compiled record's program ("hlo" or "opt_hlo"); counts into *n. Records the
 * largest in `worst`. v3_only: only v3 compiles. */
static double *ref_errors(tpu_ctx *ctx, const cJSON *j, const char *which, int v3_only, int *n, char *worst, size_t nworst)
{
    const cJSON *progs = cJSON_GetObjectItemCaseSensitive(j, "programs");
    double *e = calloc((size_t)cJSON_GetArraySize(progs) + 1, sizeof *e), big = -1;
    *n = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, progs) {
        const cJSON *real = cJSON_GetObjectItemCaseSensitive(p, "real");
        const char *name = ref_str(p, "program"), *chip = ref_str(p, "chip"), *path = ref_str(p, which);
        if (!real || !name || !chip || !path || cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(real, "oom"))) continue;
        if (!strcmp(which, "hlo") && cJSON_GetObjectItemCaseSensitive(p, "constrained")) continue;
        if (v3_only && strcmp(ref_str(p, "gen") ? ref_str(p, "gen") : "", "v3")) continue;
        char why[512];
        cJSON *r = ref_plan_file(ctx, path, chip, why, sizeof why);
        if (!r) {
            test_fail(__FILE__, __LINE__, "%s (%s): %s", path, chip, why);
            continue;
        }
        double err = fabs(ref_err(ref_num(r, "peak_bytes"), ref_num(real, "hbm_bytes")));
        if (err > big) {
            big = err;
            snprintf(worst, nworst, "%s on %s: %+.1f%%", name, chip, 100 * ref_err(ref_num(r, "peak_bytes"), ref_num(real, "hbm_bytes")));
        }
        e[(*n)++] = err;
        cJSON_Delete(r);
    }
    return e;
}

static void ref_check_set(const char *which, double *e, int n, double median_bound, double max_bound, int within10,
                          int within30, const char *worst)
{
    int w10 = 0, w30 = 0;
    double mx = 0;
    for (int i = 0; i < n; i++) {
        w10 += e[i] <= 0.10;
        w30 += e[i] <= 0.30;
        if (e[i] > mx) mx = e[i];
    }
    double med = ref_median(e, n);
    printf("    %s: %d compiles, median %.1f%%, max %.1f%% (%s), %d within 10%%, %d within 30%%\n", which, n, 100 * med,
           100 * mx, worst, w10, w30);
    CHECK_MSG(med <= median_bound, "%s: median |error| %.2f%% (bound %.2f%%)", which, 100 * med, 100 * median_bound);
    CHECK_MSG(mx <= max_bound, "%s: max |error| %.1f%%, %s (bound %.1f%%)", which, 100 * mx, worst, 100 * max_bound);
    CHECK_MSG(w10 >= within10, "%s: %d within 10%% (bound %d)", which, w10, within10);
    CHECK_MSG(w30 >= within30, "%s: %d within 30%% (bound %d)", which, w30, within30);
}

TEST(libtpu_ref_unoptimized_programs)
{
    cJSON *j = ref_load();
    REQUIRE(j);
    tpu_ctx *ctx = tpu_ctx_new();
    int n = 0, n3 = 0;
    char worst[256] = "", worst3[256] = "";
    double *e = ref_errors(ctx, j, "hlo", 0, &n, worst, sizeof worst);
    double *e3 = ref_errors(ctx, j, "hlo", 1, &n3, worst3, sizeof worst3);
    CHECK(n >= 120 && n3 >= 40);
    ref_check_set("before optimization", e, n, REF_PRE_MEDIAN, REF_PRE_MAX, REF_PRE_WITHIN_10, REF_PRE_WITHIN_30, worst);
    double m3 = ref_median(e3, n3);
    printf("    before optimization, v3 only: median %.1f%% (%s worst)\n", 100 * m3, worst3);
    CHECK_MSG(m3 <= REF_PRE_MEDIAN_V3, "v3: median |error| %.2f%% (bound %.2f%%)", 100 * m3, 100 * REF_PRE_MEDIAN_V3);
    free(e);
    free(e3);
    tpu_ctx_free(ctx);
    cJSON_Delete(j);
}

TEST(libtpu_ref_optimized_programs)
{
    cJSON *j = ref_load();
    REQUIRE(j);
    tpu_ctx *ctx = tpu_ctx_new();
    int n = 0;
    char worst[256] = "";
    double *e = ref_errors(ctx, j, "opt_hlo", 0, &n, worst, sizeof worst);
    CHECK(n >= 120);
    ref_check_set("optimized by libtpu", e, n, REF_OPT_MEDIAN, REF_OPT_MAX, REF_OPT_WITHIN_10, REF_OPT_WITHIN_30, worst);
    free(e);
    tpu_ctx_free(ctx);
    cJSON_Delete(j);
}

/* The set is what issue 13 asked for: at least 40 programs each compiled for at least 3 generations; tpusim's
 * argument bytes equal the compiler's on every compile (the compiler chooses entry layouts: the least padding);
 * and the out-of-memory verdict agrees on every compile (big_mlp_train runs out on v3 and v5e, fits v6e). */
TEST(libtpu_ref_set_arguments_and_verdicts)
{
    cJSON *j = ref_load();
    REQUIRE(j);
    tpu_ctx *ctx = tpu_ctx_new();
    const cJSON *progs = cJSON_GetObjectItemCaseSensitive(j, "programs"), *p;
    char names[256][64];
    int gens[256] = {0}, nnames = 0, compiles = 0, ooms = 0;
    cJSON_ArrayForEach(p, progs) {
        const cJSON *real = cJSON_GetObjectItemCaseSensitive(p, "real");
        const char *name = ref_str(p, "program"), *chip = ref_str(p, "chip"), *path = ref_str(p, "hlo");
        if (!real || !name || !chip || !path) continue;
        char base[64];
        snprintf(base, sizeof base, "%s", name);
        char *dot = strchr(base, '.');
        if (dot) *dot = 0;
        int k = 0;
        while (k < nnames && strcmp(names[k], base)) k++;
        if (k == nnames && nnames < 256) snprintf(names[nnames++], sizeof names[0], "%s", base);
        if (k < 256) gens[k]++;
        char why[512];
        cJSON *r = ref_plan_file(ctx, path, chip, why, sizeof why);
        if (!r) {
            test_fail(__FILE__, __LINE__, "%s (%s): %s", path, chip, why);
            continue;
        }
        compiles++;
        int oom = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(real, "oom"));
        ooms += oom;
        const cJSON *fits = cJSON_GetObjectItemCaseSensitive(r, "fits");
        CHECK_MSG(oom ? cJSON_IsFalse(fits) : cJSON_IsTrue(fits), "%s on %s: libtpu %s, tpusim says it %s", name, chip,
                  oom ? "runs out of memory" : "compiles", cJSON_IsTrue(fits) ? "fits" : "does not fit");
        if (!oom)
            CHECK_MSG(ref_num(r, "argument_bytes") == ref_num(real, "argument_bytes"), "%s on %s: arguments %.0f, real %.0f",
                      name, chip, ref_num(r, "argument_bytes"), ref_num(real, "argument_bytes"));
        cJSON_Delete(r);
    }
    int three = 0;
    for (int k = 0; k < nnames; k++) three += gens[k] >= 3;
    CHECK_MSG(three >= 40, "%d programs compiled for 3 generations or more", three);
    CHECK(compiles >= 140 && ooms >= 2);
    tpu_ctx_free(ctx);
    cJSON_Delete(j);
}

/* Inputs for both programs: tpu_random_inputs scaled by 1/16 (exact in bf16), so that the trained programs
 * stay well conditioned (uniform [-1,1) weights saturate softmax/tanh and make the two roundings diverge). */
static tpu_tensor **ref_inputs(tpu_ctx *ctx, const tpu_module *m, int *n)
{
    tpu_tensor **in = NULL;
    if (tpu_random_inputs(ctx, m, 7, &in, n) != TPU_OK) return NULL;
    for (int i = 0; i < *n; i++) {
        tpu_tensor *t = in[i];
        int64_t c = tpu_tensor_count(t);
        if (tpu_tensor_dtype(t) == TPU_F32) {
            float *x = tpu_tensor_data(t);
            for (int64_t k = 0; k < c; k++) x[k] *= 0.0625f;
        } else if (tpu_tensor_dtype(t) == TPU_BF16) {
            uint16_t *x = tpu_tensor_data(t);   /* 2^-4: the exponent field minus 4 (no value is that small) */
            for (int64_t k = 0; k < c; k++)
                if (x[k] & 0x7f80) x[k] = (uint16_t)(x[k] - (4 << 7));
        }
    }
    return in;
}

/* The compiler's optimized programs run in the executor (dtype-changing copies, mixed-precision fusions,
 * ConcatBitcast, AllocateBuffer, AssumeGatherIndicesInBound, async slices) and compute what their source
 * programs compute: the same inputs give the same outputs within bf16 rounding of a few values the compiler
 * keeps in other precisions (measured: at most 0.5% of the output's largest value). Programs with more than
 * 16M input elements are left out (the one-hot ones, 10 s each). */
/* The optimized programs this check runs: the first reference set's (small: the whole set, 145 compiles of
 * larger models, would take many minutes on two cores). */
static const char *const ref_run_set[] = {
    "mlp_fwd", "mlp_train", "mlp_train_bf16", "mlp_train_bf16.v5e", "mlp_train_bf16.v6e", "cnn_nhwc_train",
    "cnn_nchw_train", "conv_small_features", "transformer_train", "transformer_train_bf16", "onehot_output",
    "onehot_rowmajor", "onehot_loss", "while_fori", "scan_rnn", "rank1_degenerate", "embedding", "odd_shapes_bf16",
    "odd_shapes_bf16.v5e", "int8_pred", "int8_pred.v6e", "embedding_grad", "segment_sum", NULL};

static int ref_in_run_set(const char *name)
{
    for (int i = 0; name && ref_run_set[i]; i++)
        if (!strcmp(ref_run_set[i], name)) return 1;
    return 0;
}

TEST(libtpu_ref_optimized_programs_run_like_their_sources)
{
    cJSON *j = ref_load();
    REQUIRE(j);
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_run_opts o = tpu_run_opts_default();
    int checked = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(j, "programs")) {
        const char *src = ref_str(p, "hlo"), *opt = ref_str(p, "opt_hlo");
        if (!src || !opt || !ref_in_run_set(ref_str(p, "program"))) continue;
        tpu_module *ms = NULL, *mo = NULL;
        tpu_tensor **in = NULL, **os = NULL, **oo = NULL;
        int nin = 0, nos = 0, noo = 0;
        if (tpu_module_load(ctx, src, &ms) || tpu_module_load(ctx, opt, &mo)) {
            test_fail(__FILE__, __LINE__, "%s / %s: %s", src, opt, tpu_errmsg(ctx));
            goto next;
        }
        int64_t elems = 0;   /* the one-hot programs (29M-element inputs) only repeat what smaller ones check */
        for (int i = 0; i < tpu_module_num_params(mo); i++) {
            tpu_dtype dt;
            int rank;
            int64_t dims[TPU_MAX_RANK], c = 1;
            if (tpu_module_param_info(mo, i, &dt, &rank, dims) == TPU_OK)
                for (int k = 0; k < rank; k++) c *= dims[k];
            elems += c;
        }
        if (elems > ((int64_t)1 << (getenv("TPUSIM_QUICK") ? 20 : 24))) goto next;   /* sanitizer builds: smaller */
        in = ref_inputs(ctx, mo, &nin);
        if (!in || tpu_run(ctx, ms, &o, in, nin, &os, &nos) || tpu_run(ctx, mo, &o, in, nin, &oo, &noo)) {
            test_fail(__FILE__, __LINE__, "%s: %s", opt, tpu_errmsg(ctx));
            goto next;
        }
        CHECK_MSG(nos == noo, "%s: %d outputs, its source %d", opt, noo, nos);
        for (int i = 0; i < nos && i < noo; i++) {
            int64_t c = tpu_tensor_count(os[i]);
            if (c != tpu_tensor_count(oo[i])) {
                test_fail(__FILE__, __LINE__, "%s out%d: %lld elements, its source %lld", opt, i,
                          (long long)tpu_tensor_count(oo[i]), (long long)c);
                continue;
            }
            double scale = 0, diff = 0;
            for (int64_t k = 0; k < c; k++) {
                double a = tpu_tensor_get_f64(os[i], k), b = tpu_tensor_get_f64(oo[i], k);
                if (fabs(a) > scale) scale = fabs(a);
                if (!(fabs(a - b) <= diff)) diff = isnan(a) && isnan(b) ? diff : fabs(a - b);
            }
            CHECK_MSG(diff <= 0.01 * scale, "%s out%d: differs from its source by %.3g (largest value %.3g)", opt, i,
                      diff, scale);
        }
        checked++;
    next:
        if (os) tpu_tensors_free(os, nos);
        if (oo) tpu_tensors_free(oo, noo);
        if (in) tpu_tensors_free(in, nin);
        tpu_module_free(ms);
        tpu_module_free(mo);
    }
    CHECK(checked >= (getenv("TPUSIM_QUICK") ? 8 : 20));
    tpu_ctx_free(ctx);
    cJSON_Delete(j);
}

/* An optimized program moves data and changes its float type in one instruction (dus_loop.opt.hlo:
 * `bf16[64,1024] dynamic-slice(f32[2048,1024] ...)`): the values are converted, not reinterpreted. */
TEST(libtpu_ref_mixed_type_data_movement)
{
    static const char *text =
        "HloModule m\nENTRY e {\n  x = f32[4,8]{1,0:T(8,128)} parameter(0)\n  i = s32[] parameter(1)\n"
        "  z = s32[] constant(0)\n  d = bf16[2,8]{1,0:T(8,128)(2,1)} dynamic-slice(x, i, z), dynamic_slice_sizes={2,8}\n"
        "  s = bf16[4,4]{1,0:T(8,128)(2,1)} slice(x), slice={[0:4], [0:4]}\n"
        "  t = bf16[8,4]{1,0:T(8,128)(2,1)} transpose(x), dimensions={1,0}\n"
        "  ROOT r = (bf16[2,8], bf16[4,4], bf16[8,4]) tuple(d, s, t)\n}\n";
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    REQUIRE_OK(ctx, tpu_module_parse(ctx, text, strlen(text), "mixed", &m));
    int64_t dx[2] = {4, 8};
    tpu_tensor *in[2] = {NULL, NULL};
    REQUIRE_OK(ctx, tpu_tensor_new(ctx, TPU_F32, 2, dx, &in[0]));
    REQUIRE_OK(ctx, tpu_tensor_new(ctx, TPU_S32, 0, NULL, &in[1]));
    float *x = tpu_tensor_data(in[0]);
    for (int k = 0; k < 32; k++) x[k] = 1.0f + (float)k / 64;   /* 1.5078125 etc.: bf16 rounds some */
    *(int32_t *)tpu_tensor_data(in[1]) = 1;
    tpu_run_opts o = tpu_run_opts_default();
    tpu_tensor **out = NULL;
    int nout = 0;
    REQUIRE_OK(ctx, tpu_run(ctx, m, &o, in, 2, &out, &nout));
    REQUIRE(nout == 3);
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 8; c++) {
            float want = x[(1 + r) * 8 + c];
            CHECK_NEAR(tpu_tensor_get_f64(out[0], r * 8 + c), want, fabs(want) * 0x1p-8);
        }
    CHECK_NEAR(tpu_tensor_get_f64(out[1], 5), x[9], 0.01);
    CHECK_NEAR(tpu_tensor_get_f64(out[2], 1 * 4 + 2), x[2 * 8 + 1], 0.01);
    tpu_tensors_free(out, nout);
    tpu_tensor_free(in[0]);
    tpu_tensor_free(in[1]);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* Every program libtpu optimized is one a TPU runs: tpusim check calls each compatible (the compiler's own
 * custom-calls, tiled bitcasts and mixed-type data movement included). */
TEST(libtpu_ref_optimized_programs_check_compatible)
{
    cJSON *j = ref_load();
    REQUIRE(j);
    tpu_ctx *ctx = tpu_ctx_new();
    int checked = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(j, "programs")) {
        const char *path = ref_str(p, "opt_hlo"), *chip = ref_str(p, "chip");
        if (!path || !chip) continue;
        tpu_module *m = NULL;
        tpu_report *r = NULL;
        if (tpu_module_load(ctx, path, &m) != TPU_OK || tpu_check(ctx, m, chip, &r) != TPU_OK) {
            test_fail(__FILE__, __LINE__, "%s: %s", path, tpu_errmsg(ctx));
        } else {
            CHECK_MSG(tpu_report_compatible(r), "%s: %s", path, tpu_report_text(r));
            checked++;
        }
        tpu_report_free(r);
        tpu_module_free(m);
    }
    CHECK(checked >= 140);
    tpu_ctx_free(ctx);
    cJSON_Delete(j);
}
