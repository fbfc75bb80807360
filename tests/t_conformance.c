/* t_conformance.c — the conformance suite: every program under tests/conformance/cases/ (exported from JAX,
 * optimized by XLA:CPU, or handwritten) runs in both numerics modes and is compared with XLA:CPU's own
 * outputs for the same HLO text (exact.npz) and with the TPU-numerics reference (tpu.npz), with the
 * per-output tolerances the generator measured (tests/conformance/gen_cases.py). Prints a table and the
 * worst error per mode. Set CONFORMANCE=name1,name2 to run some cases only. */
#include "test.h"
#include "util/tensor.h"

#include <cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdlib.h>

#define CASES_DIR "tests/conformance/cases"

typedef struct npz {
    tpu_tensor **t;
    char       **names;
    int          n;
} npz;

static void npz_free(npz *z)
{
    tpu_tensors_free(z->t, z->n);
    tpu_names_free(z->names, z->n);
    memset(z, 0, sizeof *z);
}

static tpu_tensor *npz_get(const npz *z, const char *name)
{
    for (int i = 0; i < z->n; i++)
        if (!strcmp(z->names[i], name)) return z->t[i];
    return NULL;
}

static char *read_text(const char *path)
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

static int json_in_list(const cJSON *list, const char *name)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, list) if (cJSON_IsString(e) && !strcmp(e->valuestring, name)) return 1;
    return 0;
}

/* A float32 tensor holding values of another float type, converted to that type (exactly). */
static tpu_tensor *as_dtype(tpu_ctx *ctx, const tpu_tensor *src, tpu_dtype dt)
{
    tpu_tensor *t = NULL;
    if (tpu_tensor_new(ctx, dt, tpu_tensor_rank(src), tpu_tensor_dims(src), &t) != TPU_OK) return NULL;
    for (int64_t i = 0; i < tpu_tensor_count(src); i++) ten_store_f64(dt, tpu_tensor_data(t), i, tpu_tensor_get_f64(src, i));
    return t;
}

typedef struct cmp_result {
    int    ok;
    double max_abs, max_rel;
    char   why[256];
} cmp_result;

/* |got - want| <= atol + rtol*|want|, or within 4 ulps of the output's largest magnitude for float outputs:
 * XLA does not fix the order of a reduction's additions, and a different order moves small elements of a
 * sum by a few ulps of the sum's scale (not of their own size). */
static void compare(const tpu_tensor *got, const tpu_tensor *want, double atol, double rtol, cmp_result *r)
{
    int64_t n = tpu_tensor_count(want);
    double scale = 0;
    tpu_dtype wt = tpu_tensor_dtype(got);
    for (int64_t i = 0; i < n; i++) {
        double b = tpu_tensor_get_f64(want, i);
        if (isfinite(b) && fabs(b) > scale) scale = fabs(b);
    }
    double ulp = wt == TPU_F32 ? 1.0 / (1 << 23) : wt == TPU_BF16 ? 1.0 / 128 : wt == TPU_F16 ? 1.0 / 1024 : 0;
    double floor_tol = 4 * ulp * scale;
    if (tpu_tensor_count(got) != n || tpu_tensor_rank(got) != tpu_tensor_rank(want)) {
        char a[64], b[64];
        tpu_tensor_shape_str(got, a, sizeof a);
        tpu_tensor_shape_str(want, b, sizeof b);
        snprintf(r->why, sizeof r->why, "shape %s, expected %s", a, b);
        r->ok = 0;
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        double a = tpu_tensor_get_f64(got, i), b = tpu_tensor_get_f64(want, i);
        if (isnan(b) || isnan(a)) {
            if (isnan(a) != isnan(b)) {
                if (r->ok) snprintf(r->why, sizeof r->why, "element %lld: %.9g vs %.9g", (long long)i, a, b);
                r->ok = 0;
                r->max_abs = INFINITY;
            }
            continue;
        }
        if (isinf(b) || isinf(a)) {
            if (a != b) {
                if (r->ok) snprintf(r->why, sizeof r->why, "element %lld: %.9g vs %.9g", (long long)i, a, b);
                r->ok = 0;
                r->max_abs = INFINITY;
            }
            continue;
        }
        double d = fabs(a - b);
        double rel = d / (fabs(b) > 1e-30 ? fabs(b) : 1e-30);
        if (d > r->max_abs) r->max_abs = d;
        if (d > 0 && rel > r->max_rel && fabs(b) > atol) r->max_rel = rel;
        if (!(d <= atol + rtol * fabs(b)) && !(d <= floor_tol)) {
            if (r->ok)
                snprintf(r->why, sizeof r->why, "element %lld: %.9g vs %.9g (|diff| %.3g > atol %.3g + rtol %.3g*|ref|)",
                         (long long)i, a, b, d, atol, rtol);
            r->ok = 0;
        }
    }
}

static void tol_for(const cJSON *c, const char *mode, int out, double *atol, double *rtol)
{
    char key[32];
    snprintf(key, sizeof key, "tol_%s", mode);
    const cJSON *t = cJSON_GetObjectItem(c, key);
    *atol = cJSON_GetNumberValue(cJSON_GetObjectItem(t, "atol"));
    *rtol = cJSON_GetNumberValue(cJSON_GetObjectItem(t, "rtol"));
    const cJSON *per = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "tol_per_output"), mode);
    const cJSON *e = per ? cJSON_GetArrayItem(per, out) : NULL;
    if (e) {
        *atol = cJSON_GetNumberValue(cJSON_GetObjectItem(e, "atol"));
        *rtol = cJSON_GetNumberValue(cJSON_GetObjectItem(e, "rtol"));
    }
}

static int selected(const char *name)
{
    const char *f = getenv("CONFORMANCE");
    if (!f || !*f) return 1;
    size_t n = strlen(name);
    for (const char *p = f; *p;) {
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == n && !strncmp(p, name, n)) return 1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

/* Runs one case in one mode; returns 1 if every output is within tolerance. */
static int run_case_mode(tpu_ctx *ctx, const char *dir, const char *name, const cJSON *c, tpu_module *m,
                         tpu_tensor **ins, int nin, const char *mode, double *worst_abs, double *worst_rel,
                         char *worst_at, size_t worst_at_n)
{
    char path[1024];
    snprintf(path, sizeof path, "%.900s/%s.npz", dir, mode);
    npz want = {0};
    if (tpu_npz_load(ctx, path, &want.t, &want.names, &want.n) != TPU_OK) {
        test_fail(__FILE__, __LINE__, "%s: %s", name, tpu_errmsg(ctx));
        return 0;
    }
    tpu_run_opts o = tpu_run_opts_default();
    o.numerics = strcmp(mode, "tpu") ? TPU_NUMERICS_EXACT : TPU_NUMERICS_TPU;
    tpu_tensor **outs = NULL;
    int nout = 0;
    int ok = 1;
    if (tpu_run(ctx, m, &o, ins, nin, &outs, &nout) != TPU_OK) {
        test_fail(__FILE__, __LINE__, "%s [%s]: run failed: %s", name, mode, tpu_errmsg(ctx));
        npz_free(&want);
        return 0;
    }
    int expected = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(c, "outputs"));
    if (nout != expected) {
        test_fail(__FILE__, __LINE__, "%s [%s]: %d outputs, expected %d", name, mode, nout, expected);
        ok = 0;
    }
    for (int i = 0; ok && i < nout; i++) {
        char member[32];
        snprintf(member, sizeof member, "out%d", i);
        const tpu_tensor *w = npz_get(&want, member);
        if (!w) {
            test_fail(__FILE__, __LINE__, "%s [%s]: reference has no %s", name, mode, member);
            ok = 0;
            break;
        }
        const cJSON *skip = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "tpu_reference_skip"), member);
        if (skip && !strcmp(mode, "tpu")) continue;   /* the reference cannot show what the TPU does here */
        double atol, rtol;
        tol_for(c, mode, i, &atol, &rtol);
        cmp_result r = {1, 0, 0, ""};
        compare(outs[i], w, atol, rtol, &r);
        if (r.max_abs > *worst_abs) {
            *worst_abs = r.max_abs;
            snprintf(worst_at, worst_at_n, "%s out%d", name, i);
        }
        if (r.max_rel > *worst_rel) *worst_rel = r.max_rel;
        if (!r.ok) {
            test_fail(__FILE__, __LINE__, "%s [%s] out%d: %s (max abs %.3g, max rel %.3g)", name, mode, i, r.why, r.max_abs,
                      r.max_rel);
            ok = 0;
        }
    }
    tpu_tensors_free(outs, nout);
    npz_free(&want);
    return ok;
}

/* Totals over the cases run, for the summary test (which sorts after them: '/' < '_'). */
static int conf_ncase, conf_ran, conf_pass[2];
static double conf_worst_abs[2], conf_worst_rel[2];
static char conf_worst_at[2][160];

/* The case's inputs in parameter order, narrow types restored (owned[i]: a converted copy to free). */
static int load_inputs(tpu_ctx *ctx, const char *name, const cJSON *c, const npz *in, tpu_tensor **ins, tpu_tensor **owned)
{
    const cJSON *inputs = cJSON_GetObjectItem(c, "inputs"), *bf = cJSON_GetObjectItem(c, "bf16_as_f32");
    const cJSON *f8 = cJSON_GetObjectItem(c, "f8_as_f32");
    for (int i = 0; i < cJSON_GetArraySize(inputs); i++) {
        const char *member = cJSON_GetObjectItem(cJSON_GetArrayItem(inputs, i), "member")->valuestring;
        tpu_tensor *t = npz_get(in, member);
        if (!t) {
            test_fail(__FILE__, __LINE__, "%s: inputs.npz lacks %s", name, member);
            return 0;
        }
        const cJSON *f8t = cJSON_GetObjectItem(f8, member);
        if (json_in_list(bf, member)) t = owned[i] = as_dtype(ctx, t, TPU_BF16);
        else if (cJSON_IsString(f8t))
            t = owned[i] = as_dtype(ctx, t, tpu_dtype_from_name(f8t->valuestring, strlen(f8t->valuestring)));
        ins[i] = t;
        if (!t) return 0;
    }
    return 1;
}

/* One case (a test of its own, "conformance/<case>"), in both modes. */
static void conformance_case(const char *name)
{
    const char *modes[2] = {"exact", "tpu"};
    char dir[512], path[1024];
    snprintf(dir, sizeof dir, "%s/%.400s", CASES_DIR, name);
    snprintf(path, sizeof path, "%s/case.json", dir);
    char *js = read_text(path);
    cJSON *c = js ? cJSON_Parse(js) : NULL;
    free(js);
    conf_ran++;
    if (!c) {
        test_fail(__FILE__, __LINE__, "%s: cannot read case.json", name);
        return;
    }
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    npz in = {0};
    snprintf(path, sizeof path, "%s/program.hlo", dir);
    if (tpu_module_load(ctx, path, &m) != TPU_OK) {
        test_fail(__FILE__, __LINE__, "%s: %s", name, tpu_errmsg(ctx));
        goto done;
    }
    tpu_warnings_clear(ctx);
    snprintf(path, sizeof path, "%s/inputs.npz", dir);
    if (tpu_npz_load(ctx, path, &in.t, &in.names, &in.n) != TPU_OK) {
        test_fail(__FILE__, __LINE__, "%s: %s", name, tpu_errmsg(ctx));
        goto done;
    }
    int nin = cJSON_GetArraySize(cJSON_GetObjectItem(c, "inputs"));
    tpu_tensor **ins = calloc((size_t)(nin ? nin : 1), sizeof *ins);
    tpu_tensor **owned = calloc((size_t)(nin ? nin : 1), sizeof *owned);
    int ok = ins && owned && load_inputs(ctx, name, c, &in, ins, owned);
    for (int md = 0; ok && md < 2; md++)
        if (run_case_mode(ctx, dir, name, c, m, ins, nin, modes[md], &conf_worst_abs[md], &conf_worst_rel[md],
                          conf_worst_at[md], sizeof conf_worst_at[md])) conf_pass[md]++;
    for (int i = 0; owned && i < nin; i++) tpu_tensor_free(owned[i]);
    free(owned);
    free(ins);
done:
    npz_free(&in);
    tpu_module_free(m);
    cJSON_Delete(c);
    tpu_ctx_free(ctx);
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* One test per case directory (CONFORMANCE=a,b picks some), registered at start. */
__attribute__((constructor)) static void conformance_register(void)
{
    DIR *d = opendir(CASES_DIR);
    if (!d) return;   /* the summary test fails */
    char *names[256];
    struct dirent *e;
    while ((e = readdir(d)) && conf_ncase < 256)
        if (e->d_name[0] != '.' && selected(e->d_name) && strlen(e->d_name) < 128) names[conf_ncase++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)conf_ncase, sizeof *names, by_name);
    for (int k = 0; k < conf_ncase; k++) {
        char tn[160];
        snprintf(tn, sizeof tn, "conformance/%s", names[k]);
        test_register_arg(tn, __FILE__, conformance_case, names[k]);
        free(names[k]);
    }
}

/* The totals of the cases that ran, and the suite is all there. */
TEST(conformance_cases)
{
    DIR *d = opendir(CASES_DIR);
    REQUIRE(d != NULL);
    closedir(d);
    if (conf_ran)
        fprintf(stderr, "  conformance: exact %d/%d cases passed (worst abs err %.3g in %s, rel %.3g); tpu %d/%d (worst abs %.3g in "
                        "%s, rel %.3g); each within its case's tolerance\n",
                conf_pass[0], conf_ran, conf_worst_abs[0], conf_worst_at[0], conf_worst_rel[0], conf_pass[1], conf_ran,
                conf_worst_abs[1], conf_worst_at[1], conf_worst_rel[1]);
    CHECK(conf_ncase >= 30 || getenv("CONFORMANCE"));
}
