/* t_mobilenet.c — the corpus' MobileNetV2 training step (PyTorch/XLA, batch 96, 156 convolutions, 52
 * batch-norms) on deterministic random inputs, compared with what XLA:CPU computed for the same HLO text
 * (tests/conformance/mobilenet/ref_seed1.json, made by tests/conformance/mobilenet_ref.py: per output its
 * count, NaN count, sum, sum of |x|, min, max and 32 sampled elements). Exact mode runs by default; set
 * TPUSIM_SLOW_TESTS=1 to run TPU numerics against its TPU-numerics reference too. */
#include "test.h"

#include <cJSON.h>
#include <math.h>
#include <stdlib.h>

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

static double num(const cJSON *o, const char *k) { return cJSON_GetNumberValue(cJSON_GetObjectItem(o, k)); }

/* Compares the run's outputs with one reference; returns the number of outputs out of tolerance.
 *
 * Tolerances come from the reference's own sensitivity (mobilenet_ref.py moved every input by one ulp and
 * re-ran XLA:CPU): an output is allowed 4x the change that perturbation caused, and at least 1e-3 of its
 * scale. With these random (not fan-in scaled) weights most gradients are chaotic (1 ulp of input moves them
 * by up to 28% of their maximum): for the outputs the reference lists as noise-sensitive only the count,
 * the NaN count and the sum of |x| (to max(5%, 4x its sensitivity, 2x the elements' sensitivity)) are compared. */
static int check_mode(tpu_ctx *ctx, tpu_module *m, tpu_tensor **ins, int nin, const cJSON *ref, const cJSON *sens,
                      const cJSON *noisy, tpu_numerics mode, const char *label)
{
    tpu_run_opts o = tpu_run_opts_default();
    o.numerics = mode;
    tpu_tensor **outs = NULL;
    int nout = 0;
    if (tpu_run(ctx, m, &o, ins, nin, &outs, &nout) != TPU_OK) {
        test_fail(__FILE__, __LINE__, "mobilenet [%s]: %s", label, tpu_errmsg(ctx));
        return 1;
    }
    int bad = 0, nnoisy = 0;
    double worst = 0;
    CHECK_EQ_INT(nout, cJSON_GetArraySize(ref));
    for (int i = 0; i < nout && i < cJSON_GetArraySize(ref); i++) {
        const cJSON *r = cJSON_GetArrayItem(ref, i);
        const tpu_tensor *t = outs[i];
        int64_t n = tpu_tensor_count(t);
        if (n != (int64_t)num(r, "count")) {
            test_fail(__FILE__, __LINE__, "mobilenet [%s] out%d: %lld elements, reference %lld", label, i, (long long)n,
                      (long long)num(r, "count"));
            bad++;
            continue;
        }
        double sum = 0, sum_abs = 0, mn = INFINITY, mx = -INFINITY;
        int64_t nans = 0;
        for (int64_t k = 0; k < n; k++) {
            double v = tpu_tensor_get_f64(t, k);
            if (isnan(v)) {
                nans++;
                continue;
            }
            sum += v;
            sum_abs += fabs(v);
            if (v < mn) mn = v;
            if (v > mx) mx = v;
        }
        /* scale of the output: its mean magnitude and its extremes; differences are judged against it.
         * Summation order differs (convolutions, batch statistics), so f32 rounding differences grow through
         * the 52 layers: 1e-3 of the output's scale is far below any real error (a wrong op moves values by
         * their own size) and above the reordering noise measured here (see the note printed). */
        double scale = fmax(fabs(num(r, "max")), fabs(num(r, "min")));
        const cJSON *se = sens ? cJSON_GetArrayItem(sens, i) : NULL;
        double s_rel = se && cJSON_GetObjectItem(se, "sample_max_diff_rel_to_max") ? num(se, "sample_max_diff_rel_to_max") : 0;
        double s_sum = se && cJSON_GetObjectItem(se, "sum_abs_rel_change") ? num(se, "sum_abs_rel_change") : 0;
        int is_noisy = 0;
        const cJSON *nz;
        cJSON_ArrayForEach(nz, noisy) if ((int)cJSON_GetNumberValue(nz) == i) is_noisy = 1;
        double tol = fmax(1e-3, 4 * s_rel) * (scale > 0 ? scale : 1);
        if (is_noisy) {
            double sa_err = fabs(sum_abs - num(r, "sum_abs")) / fmax(num(r, "sum_abs"), 1e-30);
            /* outputs whose every element moved by ~100% under the 1-ulp perturbation (s_rel ~ 1) are
             * cancellation noise: their sum of |x| is only held to the same order */
            double allow = fmax(0.05, fmax(4 * s_sum, 2 * s_rel));
            if (nans != (int64_t)num(r, "nan_count") || !(sa_err <= allow)) {
                test_fail(__FILE__, __LINE__, "mobilenet [%s] out%d (noise-sensitive): sum of |x| off by %.3g (allowed %.3g)", label,
                          i, sa_err, allow);
                bad++;
            }
            nnoisy++;
            continue;
        }
        double err = 0;
        const cJSON *samples = cJSON_GetObjectItem(r, "samples");
        for (int j = 0; j < cJSON_GetArraySize(samples); j++) {
            int64_t k = (int64_t)((double)j * (double)n / cJSON_GetArraySize(samples));
            double want = cJSON_GetNumberValue(cJSON_GetArrayItem(samples, j)), got = tpu_tensor_get_f64(t, k);
            if (isnan(want) != isnan(got)) err = INFINITY;
            else if (!isnan(want)) err = fmax(err, fabs(got - want));
        }
        err = fmax(err, fabs(mx - num(r, "max")));
        err = fmax(err, fabs(mn - num(r, "min")));
        double sum_err = fabs(sum - num(r, "sum")) / fmax(num(r, "sum_abs"), 1e-30);
        if (nans != (int64_t)num(r, "nan_count") || !(err <= tol) || !(sum_err <= fmax(1e-3, 4 * s_sum))) {
            test_fail(__FILE__, __LINE__, "mobilenet [%s] out%d: max sample/extreme error %.3g (tolerance %.3g), relative sum "
                      "error %.3g, NaNs %lld vs %lld", label, i, err, tol, sum_err, (long long)nans,
                      (long long)num(r, "nan_count"));
            bad++;
        }
        if (scale > 0 && err / scale > worst) worst = err / scale;
    }
    fprintf(stderr, "  mobilenet [%s]: %d/%d outputs within tolerance (%d noise-sensitive ones compared by their sum of |x|); "
            "worst error of the others %.3g of the output's scale\n", label, nout - bad, nout, nnoisy, worst);
    tpu_tensors_free(outs, nout);
    return bad;
}

TEST(mobilenet_v2_matches_xla_cpu)
{
    const char *quick = getenv("TPUSIM_QUICK");
    if (quick && *quick && strcmp(quick, "0")) {
        test_skip("TPUSIM_QUICK: the MobileNetV2 step runs in the release test only");
        return;
    }
    const char *path = test_corpus("hlo/mobilenet_v2.hlo");
    if (!path) {
        test_skip("../shared/corpus absent");
        return;
    }
    char *js = slurp("tests/conformance/mobilenet/ref_seed1.json");
    REQUIRE(js);
    cJSON *ref = cJSON_Parse(js);
    free(js);
    REQUIRE(ref);
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    tpu_tensor **ins = NULL;
    int nin = 0;
    if (tpu_module_load(ctx, path, &m) != TPU_OK || tpu_random_inputs(ctx, m, 1, &ins, &nin) != TPU_OK) {
        test_fail(__FILE__, __LINE__, "%s", tpu_errmsg(ctx));
        goto done;
    }
    /* the inputs are the generator's: check the recorded first elements and sums */
    const cJSON *chk;
    cJSON_ArrayForEach(chk, cJSON_GetObjectItem(ref, "input_checks"))
    {
        int p = (int)num(chk, "param");
        REQUIRE(p < nin);
        double s = 0;
        for (int64_t k = 0; k < tpu_tensor_count(ins[p]); k++) s += tpu_tensor_get_f64(ins[p], k);
        CHECK_NEAR(tpu_tensor_get_f64(ins[p], 0), num(chk, "first"), 1e-7);
        CHECK_NEAR(s, num(chk, "sum"), 1e-6 * fmax(1, fabs(num(chk, "sum"))));
    }
    const cJSON *sens = cJSON_GetObjectItem(ref, "exact_sensitivity");
    const cJSON *noisy = cJSON_GetObjectItem(cJSON_GetObjectItem(ref, "observations"), "outputs_noise_sensitive");
    check_mode(ctx, m, ins, nin, cJSON_GetObjectItem(ref, "exact"), sens, noisy, TPU_NUMERICS_EXACT, "exact");
    const char *slow = getenv("TPUSIM_SLOW_TESTS");
    if (slow && *slow && strcmp(slow, "0"))
        check_mode(ctx, m, ins, nin, cJSON_GetObjectItem(ref, "tpu"), sens, noisy, TPU_NUMERICS_TPU, "tpu");
done:
    tpu_tensors_free(ins, nin);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
    cJSON_Delete(ref);
}
