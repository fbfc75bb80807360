/* t_kernels_golden.c — gather, scatter, reduce-window, select-and-scatter, sort, topk, rng-bit-generator,
 * cholesky, triangular-solve, batch-norm and fft against XLA:CPU. tests/golden/make_kernel_golden.py ran each
 * small HLO module tests/golden/kernels/<case>.hlo on XLA:CPU and stored the inputs (in0..) and outputs
 * (out0..) in <case>.npz. Every case runs twice: with the fast kernels and with the reference kernels
 * (EXE_REF_KERNELS in exe_run_cfg.ref), in exact numerics. Tolerance 0 means bit-identical (NaN matches any NaN). */
#include "test.h"
#include "exec/kernels/ref.h"

#include <dirent.h>
#include <stdlib.h>

#define KG_DIR "tests/golden/kernels/"

typedef struct kg_tol {
    const char *prefix;
    double      atol, rtol;
} kg_tol;

static double kg_get(const tpu_tensor *t, int64_t i)
{
    const void *d = tpu_tensor_cdata(t);
    switch (tpu_tensor_dtype(t)) {
    case TPU_C64: return ((const float *)d)[i];
    case TPU_C128: return ((const double *)d)[i];
    default: return tpu_tensor_get_f64(t, i);
    }
}

/* Compares one output; returns the max abs error (and fails the test past the tolerance). */
static double kg_compare(const char *cs, int k, const tpu_tensor *got, const tpu_tensor *want, double atol, double rtol)
{
    if (tpu_tensor_dtype(got) != tpu_tensor_dtype(want) || tpu_tensor_rank(got) != tpu_tensor_rank(want) ||
        memcmp(tpu_tensor_dims(got), tpu_tensor_dims(want), sizeof(int64_t) * (size_t)tpu_tensor_rank(got))) {
        char a[64], b[64];
        tpu_tensor_shape_str(got, a, sizeof a);
        tpu_tensor_shape_str(want, b, sizeof b);
        test_fail(__FILE__, __LINE__, "%s out%d: shape %s, want %s", cs, k, a, b);
        return INFINITY;
    }
    tpu_dtype dt = tpu_tensor_dtype(got);
    char kind = tpu_dtype_kind(dt);
    if (kind != 'f' && kind != 'c') {
        if (memcmp(tpu_tensor_cdata(got), tpu_tensor_cdata(want), tpu_tensor_nbytes(got))) {
            int64_t n = tpu_tensor_count(got), bad = -1;
            size_t es = tpu_dtype_size(dt);
            for (int64_t i = 0; i < n && bad < 0; i++)
                if (memcmp((const char *)tpu_tensor_cdata(got) + i * es, (const char *)tpu_tensor_cdata(want) + i * es, es)) bad = i;
            test_fail(__FILE__, __LINE__, "%s out%d: element %lld is %.17g, want %.17g", cs, k, (long long)bad,
                      tpu_tensor_get_f64(got, bad), tpu_tensor_get_f64(want, bad));
        }
        return 0;
    }
    int64_t n = tpu_tensor_count(got) * (kind == 'c' ? 2 : 1);
    double maxerr = 0;
    int reported = 0;
    for (int64_t i = 0; i < n; i++) {
        double a = kg_get(got, i), b = kg_get(want, i);
        int ok;
        if (isnan(a) || isnan(b)) ok = isnan(a) && isnan(b);
        else if (atol == 0 && rtol == 0) ok = a == b && signbit(a) == signbit(b);
        else {
            double e = fabs(a - b);
            if (isinf(a) || isinf(b)) e = a == b ? 0 : INFINITY;
            if (e > maxerr) maxerr = e;
            ok = e <= atol + rtol * fabs(b);
        }
        if (!ok && reported++ < 3)
            test_fail(__FILE__, __LINE__, "%s out%d: element %lld is %.9g, want %.9g (atol %g rtol %g)", cs, k,
                      (long long)i, a, b, atol, rtol);
    }
    return maxerr;
}

static tpu_tensor *kg_member(tpu_tensor **ts, char **ns, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(ns[i], name)) return ts[i];
    return NULL;
}

/* Runs case `name` (both kernel variants) against its golden outputs. */
static void kg_case(const char *name, double atol, double rtol, int verbose)
{
    char path[512];
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    tpu_tensor **ts = NULL;
    char **ns = NULL;
    int nt = 0;
    snprintf(path, sizeof path, KG_DIR "%s.hlo", name);
    tpu_status st = tpu_module_load(ctx, path, &m);
    CHECK_MSG(st == TPU_OK, "%s: %s", path, tpu_errmsg(ctx));
    snprintf(path, sizeof path, KG_DIR "%s.npz", name);
    if (!st) {
        st = tpu_npz_load(ctx, path, &ts, &ns, &nt);
        CHECK_MSG(st == TPU_OK, "%s: %s", path, tpu_errmsg(ctx));
    }
    tpu_tensor *in[16];
    int nin = 0, nwant = 0;
    char key[16];
    while (!st && nin < 16) {
        snprintf(key, sizeof key, "in%d", nin);
        if (!(in[nin] = kg_member(ts, ns, nt, key))) break;
        nin++;
    }
    for (;;) {
        snprintf(key, sizeof key, "out%d", nwant);
        if (st || !kg_member(ts, ns, nt, key)) break;
        nwant++;
    }
    for (int ref = 0; !st && ref < 2; ref++) {
        tpu_run_opts o = tpu_run_opts_default();
        o.numerics = TPU_NUMERICS_EXACT;
        tpu_tensor **outs = NULL;
        int nout = 0;
        exe_run_cfg cfg = {.ref = ref ? EXE_REF_KERNELS : 0};
        tpu_status rs = exe_run(ctx, m, &o, &cfg, in, nin, &outs, &nout);
        if (rs) {
            test_fail(__FILE__, __LINE__, "%s (%s kernels): %s", name, ref ? "reference" : "fast", tpu_errmsg(ctx));
            continue;
        }
        CHECK_MSG(nout == nwant, "%s: %d outputs, want %d", name, nout, nwant);
        char cs[160];
        snprintf(cs, sizeof cs, "%s (%s)", name, ref ? "ref" : "fast");
        double worst = 0;
        for (int k = 0; k < nout && k < nwant; k++) {
            snprintf(key, sizeof key, "out%d", k);
            double e = kg_compare(cs, k, outs[k], kg_member(ts, ns, nt, key), atol, rtol);
            if (e > worst) worst = e;
        }
        if (verbose) printf("    %-40s max abs err %.3g\n", cs, worst);
        tpu_tensors_free(outs, nout);
    }
    for (int i = 0; i < nt; i++) tpu_tensor_free(ts[i]);
    free(ts);
    tpu_names_free(ns, nt);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

static int kg_strcmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Every case whose name starts with one of the prefixes; returns how many ran. */
static int kg_family(const kg_tol *tols, int ntols)
{
    DIR *d = opendir(KG_DIR);
    if (!d) {
        test_fail(__FILE__, __LINE__, "cannot open " KG_DIR " (run from the repository root)");
        return 0;
    }
    char *names[512];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 512) {
        size_t len = strlen(e->d_name);
        if (len > 4 && !strcmp(e->d_name + len - 4, ".hlo")) names[n++] = strndup(e->d_name, len - 4);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, kg_strcmp);
    int ran = 0, verbose = getenv("TPUSIM_TEST_VERBOSE") != NULL;
    for (int i = 0; i < n; i++) {
        for (int t = 0; t < ntols; t++)
            if (!strncmp(names[i], tols[t].prefix, strlen(tols[t].prefix))) {
                kg_case(names[i], tols[t].atol, tols[t].rtol, verbose);
                ran++;
                break;
            }
        free(names[i]);
    }
    return ran;
}

TEST(kernels_golden_gather_scatter)
{
    static const kg_tol t[] = {{"gather_", 0, 0}, {"scatter_", 0, 0}};
    CHECK(kg_family(t, 2) >= 15);
}

TEST(kernels_golden_window)
{
    static const kg_tol t[] = {{"rw_", 0, 0}, {"ss_", 0, 0}};
    CHECK(kg_family(t, 2) >= 10);
}

TEST(kernels_golden_sort_topk)
{
    static const kg_tol t[] = {{"sort_", 0, 0}, {"topk_", 0, 0}};
    CHECK(kg_family(t, 2) >= 8);
}

TEST(kernels_golden_rng_bit_generator)
{
    static const kg_tol t[] = {{"rbg_", 0, 0}};
    CHECK(kg_family(t, 1) >= 6);
}

TEST(kernels_golden_linalg)
{
    /* XLA:CPU runs blocked algorithms in the element type; tpusim uses LAPACK/BLAS (fast) or f64 substitution
     * (reference), so results agree to rounding */
    static const kg_tol t[] = {{"chol_f32", 1e-6, 2e-6}, {"chol_f64", 1e-14, 1e-14}, {"chol_not_pd", 1e-6, 2e-6},
                               {"chol_big", 1e-5, 1e-5}, {"trsm_f32", 1e-6, 2e-6}, {"trsm_f64", 1e-14, 1e-14}};
    CHECK(kg_family(t, 6) >= 20);
}

TEST(kernels_golden_batchnorm)
{
    /* XLA:CPU sums in f32 in its own order; tpusim sums in f64 and rounds once. grad_operand is a difference
     * of nearly equal terms, so the sums' last-ulp differences grow there. Inference has no sums: it matches
     * bit for bit when XLA's rsqrt is correctly rounded, within an ulp of the terms where its vectorised loop
     * is not. */
    static const kg_tol t[] = {{"bn_training", 2e-6, 2e-6}, {"bn_inference", 2e-6, 2.5e-7}, {"bn_grad", 2e-4, 2e-5}};
    CHECK(kg_family(t, 3) >= 9);
}

TEST(kernels_golden_fft)
{
    /* XLA:CPU (DUCC) computes c64 transforms in f32; tpusim in f64, rounded once */
    static const kg_tol t[] = {{"fft_c64_big", 1e-4, 1e-6}, {"fft_c64", 5e-6, 2e-6}, {"fft_c128", 1e-13, 1e-13}};
    CHECK(kg_family(t, 3) >= 16);
}
