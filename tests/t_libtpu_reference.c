/* t_libtpu_reference.c — tpusim's memory model against the real TPU compiler.
 *
 * tests/reference/libtpu_memory.py compiles a set of JAX programs with XLA:TPU (PyPI's libtpu) ahead of
 * time for TPU topologies on a CPU-only machine and records what the real compiler decided:
 * memory_analysis() (argument/output/temp bytes), its largest buffers with their tiled layouts, its
 * optimized programs (tests/reference/hlo/NAME.opt.hlo) and each generation's usable HBM from a deliberate
 * out-of-memory compile. This file checks tpusim against those numbers; it needs neither Python nor libtpu.
 *
 * Tolerances, from what was measured (tests/reference/libtpu_memory.md):
 *   - a tiled buffer of the real buffer assignment: exact (padding with a given layout is arithmetic);
 *   - usable HBM per generation: within the rounding of the compiler's "of 15.48G hbm" (0.005 GiB);
 *   - the optimized programs (the real layouts, fusion and schedule are given, tpusim only re-runs liveness and
 *     the heap): arguments exact to 1%, the HBM total within 20%. The real compiler rematerializes, shares
 *     buffers in place inside fusions and places some temporaries in VMEM; tpusim does none of that, and was
 *     measured between -14% and +8% (v2/v3, where no VMEM is used for temporaries);
 *   - the unoptimized programs (what users give tpusim): tpusim chooses layouts and fusion itself, and the
 *     measured error is large for some programs. Each has a bound just above today's error (a ratchet: a
 *     change to src/compile/ that makes a program worse fails; one that makes it better should lower the bound
 *     here). */
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
        CHECK(ref_num(real, "hbm_bytes") > 0);
        CHECK(ref_num(real, "argument_bytes") >= 0);
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

/* Per program: the bound on |tpusim - real| / real for the program before optimization (what users give
 * tpusim: tpusim chooses layouts and fusion itself), and for the compiler's optimized program (the real layouts,
 * fusion and schedule given: tpusim only re-runs liveness and the heap) with its arguments' bound. Today's
 * error rounded up by about 10 points: a change that makes a program worse fails; when one makes it better,
 * lower its bound here. The goal is 0.20 before optimization and 0.10 after. opt < 0 would mark an optimized
 * program the front end cannot read (none today); the test says when it starts to. */
typedef struct ref_bound {
    const char *name;
    double      pre, opt, opt_args;
} ref_bound;

static const ref_bound ref_bounds[] = {
    /* name                     pre    opt    opt args     measured now (pre / opt), see libtpu_memory.md; bounds are
     *                                                      the measurement + 10 points: a regression fails */
    {"mlp_fwd",                 0.10,  0.10,  0.01},   /* 0% / 0% */
    {"mlp_train",               0.22,  0.17,  0.01},   /* +12% / -7% */
    {"mlp_train_bf16",          0.12,  0.17,  0.01},   /* +2% / -7% */
    {"mlp_train_bf16.v5e",      0.32,  0.10,  0.01},   /* +22% (temporaries in VMEM, not modelled) / 0% */
    {"mlp_train_bf16.v6e",      0.32,  0.10,  0.01},   /* +22% / 0% */
    {"cnn_nhwc_train",          0.74,  0.12,  0.01},   /* +64% (the compiler keeps f32 activations as bf16) / -1% */
    {"cnn_nchw_train",          0.74,  0.12,  0.01},   /* +64% / -1% */
    {"conv_small_features",     0.10,  0.19,  0.01},   /* 0% / -9% */
    {"transformer_train",       0.73,  0.18,  0.01},   /* +62% / -8% */
    {"transformer_train_bf16",  0.40,  0.10,  0.01},   /* +29% (v4) / 0% */
    {"onehot_output",           0.10,  0.10,  0.01},   /* 0% / 0% */
    {"onehot_rowmajor",         0.97,  0.10,  0.01},   /* -87% (the {1,0} layout is forced at compile time, not in the text) / 0% */
    {"onehot_loss",             0.16,  0.10,  0.01},   /* +5% / 0% */
    {"while_fori",              0.44,  0.12,  0.01},   /* -34% / -1% */
    {"scan_rnn",                0.27,  0.12,  0.01},   /* -16% / -1% */
    {"rank1_degenerate",        0.75,  0.66,  0.01},   /* -65% / -56% (the real compiler's 55K of temporaries are unexplained) */
    {"embedding",               0.10,  0.10,  0.01},   /* 0% / 0% */
    {"odd_shapes_bf16",         0.10,  0.10,  0.01},   /* 0% / 0% */
    {"odd_shapes_bf16.v5e",     0.10,  0.10,  0.01},   /* 0% / 0% (S(1) VMEM buffers and copy-start's source alias) */
    {"int8_pred",               0.10,  0.10,  0.01},   /* 0% / 0% */
    {"int8_pred.v6e",           0.10,  0.10,  0.01},   /* 0% / 0% */
    {NULL, 0, 0, 0},
};

static const ref_bound *ref_bound_of(const char *name)
{
    for (int i = 0; ref_bounds[i].name; i++)
        if (!strcmp(ref_bounds[i].name, name)) return &ref_bounds[i];
    return NULL;
}

TEST(libtpu_ref_unoptimized_programs)
{
    cJSON *j = ref_load();
    REQUIRE(j);
    tpu_ctx *ctx = tpu_ctx_new();
    int checked = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(j, "programs")) {
        const char *name = ref_str(p, "program"), *chip = ref_str(p, "chip");
        const cJSON *real = cJSON_GetObjectItemCaseSensitive(p, "real");
        if (!name || !chip || !real) continue;
        const ref_bound *b = ref_bound_of(name);
        if (!b) {
            test_fail(__FILE__, __LINE__, "%s: no bound in ref_bounds", name);
            continue;
        }
        char why[512];
        cJSON *r = ref_plan_file(ctx, ref_str(p, "hlo"), chip, why, sizeof why);
        if (!r) {
            test_fail(__FILE__, __LINE__, "%s.hlo: %s", name, why);
            continue;
        }
        double peak = ref_num(r, "peak_bytes"), rhbm = ref_num(real, "hbm_bytes");
        double e = ref_err(peak, rhbm);
        CHECK_MSG(fabs(e) <= b->pre, "%s on %s (unoptimized): tpusim %.0f, real %.0f (%+.1f%%, bound %.0f%%)", name,
                  chip, peak, rhbm, 100 * e, 100 * b->pre);
        checked++;
        cJSON_Delete(r);
    }
    CHECK(checked >= 10);
    tpu_ctx_free(ctx);
    cJSON_Delete(j);
}

TEST(libtpu_ref_optimized_programs)
{
    cJSON *j = ref_load();
    REQUIRE(j);
    tpu_ctx *ctx = tpu_ctx_new();
    int checked = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(j, "programs")) {
        const char *name = ref_str(p, "program"), *chip = ref_str(p, "chip");
        const cJSON *real = cJSON_GetObjectItemCaseSensitive(p, "real");
        const ref_bound *b = name ? ref_bound_of(name) : NULL;
        if (!chip || !real || !b) continue;   /* a missing bound is reported by the test above */
        char why[512];
        cJSON *r = ref_plan_file(ctx, ref_str(p, "opt_hlo"), chip, why, sizeof why);
        if (!r) {
            CHECK_MSG(b->opt < 0, "%s.opt.hlo: %s", name, why);
            continue;
        }
        if (b->opt < 0) {
            printf("    note: %s.opt.hlo now reads: give it a bound in ref_bounds\n", name);
            cJSON_Delete(r);
            continue;
        }
        double args = ref_num(r, "argument_bytes"), peak = ref_num(r, "peak_bytes");
        double rargs = ref_num(real, "argument_bytes"), rhbm = ref_num(real, "hbm_bytes");
        CHECK_MSG(fabs(ref_err(args, rargs)) <= b->opt_args, "%s on %s (optimized): arguments tpusim %.0f, real %.0f",
                  name, chip, args, rargs);
        CHECK_MSG(fabs(ref_err(peak, rhbm)) <= b->opt, "%s on %s (optimized): tpusim %.0f, real %.0f (%+.1f%%, bound %.0f%%)",
                  name, chip, peak, rhbm, 100 * ref_err(peak, rhbm), 100 * b->opt);
        checked++;
        cJSON_Delete(r);
    }
    CHECK(checked >= 8);
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
    "odd_shapes_bf16.v5e", "int8_pred", "int8_pred.v6e", "embedding_grad", "dus_loop", "segment_sum", NULL};

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
