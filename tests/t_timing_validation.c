/* t_timing_validation.c — the timing model against published TPU measurements (docs/timing-validation.md).
 *
 * examples/timing/validation.json lists each measurement (what, program, chip, measured seconds, how it was
 * timed, source) as examples/timing/validate.py wrote it; this test profiles every program again and checks the
 * set: how many rows, the median and the largest |predicted / measured - 1|. The bounds are ratchets at today's
 * figures (a change to src/timing or src/compile that makes the set worse fails; one that makes it better lowers
 * them here). The goal of issue 13 is a median of 10% and a maximum of 25% over at least 25 rows: the median is
 * met; the maximum is not (ResNet-50 on v3-32, -35.7%, whose measured step is per image 1.9x the v3-8 one on the
 * same chip: 38 ms a step that does not depend on the batch, time on the run's hosts rather than the device;
 * docs/timing-validation.md says why). */
#include "test.h"

#include <cjson/cJSON.h>
#include <stdlib.h>

#define TV_DIR  "examples/timing/"
#define TV_JSON TV_DIR "validation.json"

#define TV_MIN_ROWS   50
#define TV_MEDIAN     0.055   /* measured 5.3% over 50 rows (6.7% before chains computed once) */
#define TV_MAX        0.36    /* measured 35.7% (ResNet-50 on v3-32, batch 32 per core; 41.0% on v3-8 before) */
#define TV_GEMM_MAX   0.15    /* GEMM rows: 14.6% (Ironwood 1024^3; 27.7% before v7's measured kernel cost) */
#define TV_LLM_MAX    0.09    /* LLM rows: 8.5% (MaxText 64B on v5e; 13.2% before VMEM in MSA order, 14.98% before v6e wrote dS once) */

static char *tv_read(const char *path)
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

static int tv_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The prediction for one row as validate.py makes it: device time for device traces, plus the calibrated host
 * cost of a Python call for rows timed from Python, the step time for training steps. -1 on error. */
static double tv_predict(tpu_ctx *ctx, const char *prog, const char *chip, const char *timing, double python_s)
{
    char path[512];
    snprintf(path, sizeof path, TV_DIR "%s", prog);
    tpu_module *m = NULL;
    if (tpu_module_load(ctx, path, &m) != TPU_OK) return -1;
    tpu_profile_opts o = {0};
    char chip_path[512];
    size_t cl = strlen(chip);
    if (cl > 5 && !strcmp(chip + cl - 5, ".json")) {   /* a chip file beside the programs (a benchmark's settings) */
        snprintf(chip_path, sizeof chip_path, TV_DIR "%s", chip);
        chip = chip_path;
    }
    o.chip = chip;
    tpu_profile *p = NULL;
    double s = -1;
    if (tpu_profile_program(ctx, m, &o, &p) == TPU_OK) {
        const char *js = tpu_profile_json(p);
        cJSON *j = js ? cJSON_Parse(js) : NULL;
        const cJSON *dev = j ? cJSON_GetObjectItemCaseSensitive(j, "device_time_s") : NULL;
        const cJSON *step = j ? cJSON_GetObjectItemCaseSensitive(j, "step_time_s") : NULL;
        if (cJSON_IsNumber(dev) && cJSON_IsNumber(step)) {
            if (!strcmp(timing, "device")) s = dev->valuedouble;
            else if (!strcmp(timing, "python")) s = dev->valuedouble + python_s;
            else s = step->valuedouble;
        }
        cJSON_Delete(j);
        tpu_profile_free(p);
    }
    tpu_module_free(m);
    return s;
}

TEST(timing_validation_against_published_measurements)
{
    char *text = tv_read(TV_JSON);
    REQUIRE(text);
    cJSON *j = cJSON_Parse(text);
    free(text);
    REQUIRE(j);
    const cJSON *py = cJSON_GetObjectItemCaseSensitive(j, "python_call_s"), *rows = cJSON_GetObjectItemCaseSensitive(j, "rows");
    REQUIRE(cJSON_IsNumber(py) && cJSON_IsArray(rows));
    tpu_ctx *ctx = tpu_ctx_new();
    int n = 0, groups[3] = {0};
    double *err = calloc((size_t)cJSON_GetArraySize(rows) + 1, sizeof *err), worst = 0, gemm_worst = 0, llm_worst = 0;
    char worst_what[256] = "";
    const cJSON *r;
    cJSON_ArrayForEach(r, rows) {
        const cJSON *what = cJSON_GetObjectItemCaseSensitive(r, "what"), *prog = cJSON_GetObjectItemCaseSensitive(r, "program");
        const cJSON *chip = cJSON_GetObjectItemCaseSensitive(r, "chip"), *tm = cJSON_GetObjectItemCaseSensitive(r, "timing");
        const cJSON *meas = cJSON_GetObjectItemCaseSensitive(r, "measured_s"), *grp = cJSON_GetObjectItemCaseSensitive(r, "group");
        const cJSON *src = cJSON_GetObjectItemCaseSensitive(r, "source");
        if (!cJSON_IsString(prog) || !cJSON_IsString(chip) || !cJSON_IsString(tm) || !cJSON_IsNumber(meas) ||
            !cJSON_IsString(grp) || !cJSON_IsString(src) || !src->valuestring[0]) {
            test_fail(__FILE__, __LINE__, "a row of %s lacks a field", TV_JSON);
            continue;
        }
        double s = tv_predict(ctx, prog->valuestring, chip->valuestring, tm->valuestring, py->valuedouble);
        if (s <= 0) {
            test_fail(__FILE__, __LINE__, "%s on %s: %s", prog->valuestring, chip->valuestring, tpu_errmsg(ctx));
            continue;
        }
        double e = fabs(s / meas->valuedouble - 1);
        err[n++] = e;
        groups[0] += !strcmp(grp->valuestring, "GEMM");
        groups[1] += !strcmp(grp->valuestring, "CNN");
        groups[2] += !strcmp(grp->valuestring, "LLM");
        if (!strcmp(grp->valuestring, "GEMM") && e > gemm_worst) gemm_worst = e;
        if (!strcmp(grp->valuestring, "LLM") && e > llm_worst) llm_worst = e;
        if (e > worst) {
            worst = e;
            snprintf(worst_what, sizeof worst_what, "%s on %s: %+.1f%%", cJSON_IsString(what) ? what->valuestring : "?",
                     chip->valuestring, 100 * (s / meas->valuedouble - 1));
        }
    }
    qsort(err, (size_t)n, sizeof *err, tv_cmp);
    double med = n ? (n % 2 ? err[n / 2] : (err[n / 2 - 1] + err[n / 2]) / 2) : 1;
    printf("    timing validation: %d rows (%d GEMM, %d CNN, %d LLM), median |error| %.1f%%, max %.1f%% (%s), GEMM max %.1f%%\n",
           n, groups[0], groups[1], groups[2], 100 * med, 100 * worst, worst_what, 100 * gemm_worst);
    CHECK_MSG(n >= TV_MIN_ROWS, "%d rows", n);
    CHECK(groups[0] >= 20 && groups[1] >= 4 && groups[2] >= 4);
    CHECK_MSG(med <= TV_MEDIAN, "median |error| %.2f%% (bound %.1f%%)", 100 * med, 100 * TV_MEDIAN);
    CHECK_MSG(worst <= TV_MAX, "max |error| %.1f%%, %s (bound %.0f%%)", 100 * worst, worst_what, 100 * TV_MAX);
    CHECK_MSG(gemm_worst <= TV_GEMM_MAX, "GEMM rows: max |error| %.1f%% (bound %.0f%%)", 100 * gemm_worst, 100 * TV_GEMM_MAX);
    CHECK_MSG(llm_worst <= TV_LLM_MAX, "LLM rows: max |error| %.1f%% (bound %.0f%%)", 100 * llm_worst, 100 * TV_LLM_MAX);
    free(err);
    tpu_ctx_free(ctx);
    cJSON_Delete(j);
}
