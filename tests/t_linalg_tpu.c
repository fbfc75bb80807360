/* t_linalg_tpu.c — the TPU linear-algebra custom-calls (LuDecomposition, Qr,
 * ProductOfElementaryHouseholderReflectors, Eigh) and bf16 sums against jax on the CPU.
 *
 * tests/reference/linalg_tpu.py lowers jax.numpy.linalg functions for TPUs (the programs a TPU user hands
 * tpusim; libtpu compiles each) and records what jax computes for them on the CPU (LAPACK); eigen- and
 * singular vectors come out as absolute values (their signs are not unique). bf16_sum is a raw bf16 reduce
 * whose golden value is the f32-accumulated sum. Each program runs here in both numerics modes, with the fast
 * kernels and with the naive references (EXE_REF_KERNELS in exe_run_cfg.ref).
 *
 * Tolerance: integer outputs (pivots, permutations) exact; bf16 outputs exact (an f32 sum rounded once);
 * f32 outputs within 2e-5 of each output's largest magnitude (LAPACK in f32 against LAPACK in f32, or the f64
 * references rounded: measured at most 1.7e-6, on svd's vectors). */
#include "test.h"
#include "exec/kernels/ref.h"

#include <cjson/cJSON.h>
#include <stdlib.h>

#define LT_DIR "tests/reference/linalg/"

static char *lt_read(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (b) b[n] = 0;
    fclose(f);
    return b;
}

typedef struct lt_npz {
    tpu_tensor **t;
    char       **names;
    int          n;
} lt_npz;

static void lt_npz_free(lt_npz *z)
{
    for (int i = 0; i < z->n; i++) {
        tpu_tensor_free(z->t[i]);
        free(z->names[i]);
    }
    free(z->t);
    free(z->names);
    memset(z, 0, sizeof *z);
}

static const tpu_tensor *lt_member(const lt_npz *z, const char *name)
{
    for (int i = 0; i < z->n; i++)
        if (!strcmp(z->names[i], name)) return z->t[i];
    return NULL;
}

/* Largest |got - want| over the output, relative to want's largest magnitude. */
static double lt_rel_err(const tpu_tensor *got, const tpu_tensor *want)
{
    int64_t n = tpu_tensor_count(want);
    double scale = 0, diff = 0;
    for (int64_t k = 0; k < n; k++) {
        double w = tpu_tensor_get_f64(want, k), g = tpu_tensor_get_f64(got, k);
        if (fabs(w) > scale) scale = fabs(w);
        double d = fabs(g - w);
        if (!(d <= diff)) diff = d;   /* NaN propagates */
    }
    return scale > 0 ? diff / scale : diff;
}

/* Runs one case in one way; returns the number of outputs checked. */
static int lt_run_case(tpu_ctx *ctx, const char *name, tpu_numerics mode, int ref)
{
    char path[512];
    snprintf(path, sizeof path, LT_DIR "%s.hlo", name);
    tpu_module *m = NULL;
    if (tpu_module_load(ctx, path, &m) != TPU_OK) {
        test_fail(__FILE__, __LINE__, "%s: %s", path, tpu_errmsg(ctx));
        return 0;
    }
    lt_npz in = {0}, want = {0};
    snprintf(path, sizeof path, LT_DIR "%s.inputs.npz", name);
    int ok = tpu_npz_load(ctx, path, &in.t, &in.names, &in.n) == TPU_OK;
    snprintf(path, sizeof path, LT_DIR "%s.golden.npz", name);
    ok = ok && tpu_npz_load(ctx, path, &want.t, &want.names, &want.n) == TPU_OK;
    int checked = 0;
    tpu_tensor **out = NULL;
    int nout = 0;
    if (!ok) {
        test_fail(__FILE__, __LINE__, "%s: %s", name, tpu_errmsg(ctx));
        goto done;
    }
    tpu_run_opts o = tpu_run_opts_default();
    o.numerics = mode;
    exe_run_cfg cfg = {.ref = ref ? EXE_REF_KERNELS : 0};
    tpu_status st = exe_run(ctx, m, &o, &cfg, in.t, in.n, &out, &nout);
    if (st != TPU_OK) {
        test_fail(__FILE__, __LINE__, "%s (%s%s): %s", name, mode == TPU_NUMERICS_TPU ? "tpu" : "exact",
                  ref ? ", references" : "", tpu_errmsg(ctx));
        goto done;
    }
    CHECK_MSG(nout == want.n, "%s: %d outputs, golden %d", name, nout, want.n);
    for (int i = 0; i < nout; i++) {
        char member[32];
        snprintf(member, sizeof member, "out%d", i);
        const tpu_tensor *w = lt_member(&want, member);
        if (!w || tpu_tensor_count(w) != tpu_tensor_count(out[i])) {
            test_fail(__FILE__, __LINE__, "%s %s: no golden value of its size", name, member);
            continue;
        }
        tpu_dtype dt = tpu_tensor_dtype(out[i]);
        double tol = dt == TPU_F32 ? 2e-5 : dt == TPU_F64 ? 1e-12 : 0;
        double e = lt_rel_err(out[i], w);
        CHECK_MSG(e <= tol, "%s %s (%s%s): off by %.3g of its largest value (tolerance %.1g)", name, member,
                  mode == TPU_NUMERICS_TPU ? "tpu" : "exact", ref ? ", references" : "", e, tol);
        checked++;
    }
done:
    if (out) tpu_tensors_free(out, nout);
    lt_npz_free(&in);
    lt_npz_free(&want);
    tpu_module_free(m);
    return checked;
}

TEST(linalg_tpu_custom_calls_match_jax_cpu)
{
    char *js = lt_read(LT_DIR "cases.json");
    REQUIRE(js);
    cJSON *j = cJSON_Parse(js);
    free(js);
    REQUIRE(j);
    tpu_ctx *ctx = tpu_ctx_new();
    int ncases = 0, nout = 0, targets[4] = {0};
    static const char *const names[4] = {"LuDecomposition", "Qr", "ProductOfElementaryHouseholderReflectors", "Eigh"};
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(j, "cases")) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(c, "name");
        if (!cJSON_IsString(nm)) continue;
        const cJSON *t;
        cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(c, "custom_calls"))
            for (int k = 0; k < 4; k++) targets[k] += cJSON_IsString(t) && !strcmp(t->valuestring, names[k]);
        for (int mode = 0; mode < 2; mode++)
            for (int ref = 0; ref < 2; ref++)
                nout += lt_run_case(ctx, nm->valuestring, mode ? TPU_NUMERICS_EXACT : TPU_NUMERICS_TPU, ref);
        ncases++;
    }
    for (int k = 0; k < 4; k++) CHECK_MSG(targets[k] >= 3, "only %d cases call %s", targets[k], names[k]);
    CHECK(ncases >= 15 && nout >= 4 * 25);
    tpu_ctx_free(ctx);
    cJSON_Delete(j);
}

/* tpusim check calls the programs jax.numpy.linalg lowers for TPUs compatible (libtpu compiles them all). */
TEST(linalg_tpu_programs_are_compatible)
{
    static const char *const cases[] = {"solve", "inv", "det", "qr", "eigh", "svd", "pinv", NULL};
    tpu_ctx *ctx = tpu_ctx_new();
    for (int i = 0; cases[i]; i++) {
        char path[256];
        snprintf(path, sizeof path, LT_DIR "%s.hlo", cases[i]);
        tpu_module *m = NULL;
        tpu_report *r = NULL;
        if (tpu_module_load(ctx, path, &m) != TPU_OK || tpu_check(ctx, m, "v5e", &r) != TPU_OK) {
            test_fail(__FILE__, __LINE__, "%s: %s", path, tpu_errmsg(ctx));
        } else {
            CHECK_MSG(tpu_report_compatible(r), "%s: %s", cases[i], tpu_report_text(r));
        }
        tpu_report_free(r);
        tpu_module_free(m);
    }
    tpu_ctx_free(ctx);
}

/* A malformed custom-call is a clear error, not a crash: wrong result arity, non-square Eigh, integer input. */
TEST(linalg_tpu_malformed_calls_fail_cleanly)
{
    static const char *const bad[] = {
        "HloModule b\nENTRY e {\n a = f32[4,4] parameter(0)\n ROOT l = f32[4,4] custom-call(a), "
        "custom_call_target=\"LuDecomposition\"\n}\n",
        "HloModule b\nENTRY e {\n a = f32[4,3] parameter(0)\n ROOT l = (f32[4,3], f32[4]) custom-call(a), "
        "custom_call_target=\"Eigh\"\n}\n",
        "HloModule b\nENTRY e {\n a = s32[4,4] parameter(0)\n ROOT l = (s32[4,4], s32[4]) custom-call(a), "
        "custom_call_target=\"Qr\"\n}\n",
        "HloModule b\nENTRY e {\n a = f32[3,4] parameter(0)\n t = f32[3] parameter(1)\n ROOT q = f32[3,4] "
        "custom-call(a, t), custom_call_target=\"ProductOfElementaryHouseholderReflectors\"\n}\n",
        NULL};
    tpu_ctx *ctx = tpu_ctx_new();
    for (int i = 0; bad[i]; i++) {
        tpu_module *m = NULL;
        REQUIRE_OK(ctx, tpu_module_parse(ctx, bad[i], strlen(bad[i]), "bad", &m));
        tpu_tensor **in = NULL, **out = NULL;
        int nin = 0, nout = 0;
        REQUIRE_OK(ctx, tpu_random_inputs(ctx, m, 1, &in, &nin));
        tpu_run_opts o = tpu_run_opts_default();
        for (int ref = 0; ref < 2; ref++) {
            exe_run_cfg cfg = {.ref = ref ? EXE_REF_KERNELS : 0};
            tpu_status st = exe_run(ctx, m, &o, &cfg, in, nin, &out, &nout);
            CHECK_MSG(st != TPU_OK, "case %d ran", i);
            if (st == TPU_OK) tpu_tensors_free(out, nout);
            else CHECK(strlen(tpu_errmsg(ctx)) > 10);
        }
        tpu_tensors_free(in, nin);
        tpu_module_free(m);
    }
    tpu_ctx_free(ctx);
}
