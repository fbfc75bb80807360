/* trn_sig.c — STEP_DIR/signature.json (docs/step_dir.md sections 1, 2, 5, 10): parsed with cJSON into a
 * trn_sig, checked key by key; every error names the file and the key ("state[3].dtype"). Also the checks
 * of a program's parameters and results against the signature, and the loading of a state .npz. */
#include "train/train.h"
#include "hlo/hlo.h"

#include <cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const trn_prog_kind[TRN_NPROG] = {"step", "grad", "apply", "eval"};

static const char *const trn_role_name[] = {"param", "stat", "opt", "counter"};

void trn_shape_str(tpu_dtype dt, int rank, const int64_t *dims, char *buf, size_t n)
{
    size_t len = (size_t)snprintf(buf, n, "%s[", tpu_dtype_name(dt));
    for (int i = 0; i < rank && len < n; i++) len += (size_t)snprintf(buf + len, n - len, "%s%lld", i ? "," : "", (long long)dims[i]);
    if (len < n) snprintf(buf + len, n - len, "]");
}

/* dir joined with a relative path (an absolute path stays as it is). */
static char *trn_join(const char *dir, const char *rel)
{
    if (rel[0] == '/' || !dir[0]) return ut_strdup(rel);
    size_t a = strlen(dir), b = strlen(rel);
    char *p = ut_malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    size_t k = a;
    if (a && dir[a - 1] != '/') p[k++] = '/';
    memcpy(p + k, rel, b + 1);
    return p;
}

static void trn_entries_free(trn_entry *e, int n)
{
    for (int i = 0; e && i < n; i++) {
        ut_free(e[i].name);
        ut_free(e[i].source);
    }
    ut_free(e);
}

static void trn_metrics_free(trn_metric *m, int n)
{
    for (int i = 0; m && i < n; i++) ut_free(m[i].name);
    ut_free(m);
}

void trn_sig_free(trn_sig *s)
{
    if (!s) return;
    ut_free(s->dir);
    ut_free(s->path);
    ut_free(s->name);
    for (int i = 0; i < TRN_NPROG; i++) ut_free(s->prog[i]);
    ut_free(s->init_state);
    trn_entries_free(s->state, s->nstate);
    ut_free(s->param_idx);
    ut_free(s->stat_idx);
    trn_entries_free(s->batch, s->nbatch);
    for (int i = 0; s->hyper && i < s->nhyper; i++) ut_free(s->hyper[i].name);
    ut_free(s->hyper);
    trn_metrics_free(s->metric, s->nmetric);
    trn_entries_free(s->ebatch, s->nebatch);
    trn_metrics_free(s->emetric, s->nemetric);
    for (int i = 0; s->report && i < s->nreport; i++) ut_free(s->report[i].name);
    ut_free(s->report);
    ut_free(s->data_train);
    ut_free(s->data_eval);
    ut_free(s->cached_train);
    ut_free(s->cached_eval);
    ut_free(s);
}

/* ---- key access with messages ---- */

typedef struct trn_rd {
    tpu_ctx    *ctx;
    const char *path;
} trn_rd;

static tpu_status trn_bad(trn_rd *r, const char *key, const char *fmt, ...) UT_PRINTF(3, 4);
static tpu_status trn_bad(trn_rd *r, const char *key, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ut_err(r->ctx, TPU_ERR_INVALID, "%s: key '%s': %s", r->path, key, msg);
}

static const cJSON *trn_get(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

static tpu_status trn_str(trn_rd *r, const cJSON *o, const char *k, const char *key, int optional, const char **out)
{
    const cJSON *v = trn_get(o, k);
    *out = NULL;
    if (!v || cJSON_IsNull(v)) return optional ? TPU_OK : trn_bad(r, key, "missing");
    if (!cJSON_IsString(v) || !v->valuestring) return trn_bad(r, key, "wants a string");
    *out = v->valuestring;
    return TPU_OK;
}

static tpu_status trn_num(trn_rd *r, const cJSON *o, const char *k, const char *key, int optional, double dflt,
                          double *out)
{
    const cJSON *v = trn_get(o, k);
    *out = dflt;
    if (!v || cJSON_IsNull(v)) return optional ? TPU_OK : trn_bad(r, key, "missing");
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return trn_bad(r, key, "wants a number");
    *out = v->valuedouble;
    return TPU_OK;
}

static tpu_status trn_int(trn_rd *r, const cJSON *o, const char *k, const char *key, int optional, int64_t dflt,
                          int64_t lo, int64_t *out)
{
    double d;
    tpu_status st = trn_num(r, o, k, key, optional, (double)dflt, &d);
    if (st) return st;
    if (d != floor(d) || d < (double)lo || d > 9.0e15) return trn_bad(r, key, "wants an integer >= %lld, not %g", (long long)lo, d);
    *out = (int64_t)d;
    return TPU_OK;
}

static tpu_status trn_list(trn_rd *r, const cJSON *o, const char *k, const char *key, int optional, const cJSON **out)
{
    const cJSON *v = trn_get(o, k);
    *out = NULL;
    if (!v || cJSON_IsNull(v)) return optional ? TPU_OK : trn_bad(r, key, "missing");
    if (!cJSON_IsArray(v)) return trn_bad(r, key, "wants a list");
    *out = v;
    return TPU_OK;
}

static tpu_status trn_dtype(trn_rd *r, const cJSON *o, const char *key, tpu_dtype *out)
{
    const char *s;
    char k[96];
    snprintf(k, sizeof k, "%s.dtype", key);
    tpu_status st = trn_str(r, o, "dtype", k, 0, &s);
    if (st) return st;
    tpu_dtype t = tpu_dtype_from_name(s, strlen(s));
    char kind = tpu_dtype_kind(t);
    if (t == TPU_INVALID || kind == 'o') return trn_bad(r, k, "unknown element type '%s'", s);
    if (tpu_dtype_bits(t) < 8) return trn_bad(r, k, "'%s': sub-byte element types are not supported", s);
    *out = t;
    return TPU_OK;
}

static tpu_status trn_shape(trn_rd *r, const cJSON *o, const char *key, int *rank, int64_t *dims)
{
    const cJSON *l;
    char k[96];
    snprintf(k, sizeof k, "%s.shape", key);
    tpu_status st = trn_list(r, o, "shape", k, 0, &l);
    if (st) return st;
    int n = cJSON_GetArraySize(l);
    if (n > TPU_MAX_RANK) return trn_bad(r, k, "rank %d (at most %d)", n, TPU_MAX_RANK);
    for (int i = 0; i < n; i++) {
        const cJSON *d = cJSON_GetArrayItem(l, i);
        if (!cJSON_IsNumber(d) || d->valuedouble != floor(d->valuedouble) || d->valuedouble < 0 || d->valuedouble > 1e15)
            return trn_bad(r, k, "dimension %d is not a non-negative integer", i);
        dims[i] = (int64_t)d->valuedouble;
    }
    *rank = n;
    return TPU_OK;
}

static char *trn_dup_or_nomem(trn_rd *r, const char *s, tpu_status *st)
{
    char *p = ut_strdup(s);
    if (!p) *st = ut_nomem(r->ctx);
    return p;
}

/* A list of {name, dtype, shape, ...} entries. kind 0: state, 1: batch, 2: eval batch. */
static tpu_status trn_entries(trn_rd *r, const cJSON *root, const char *k, int kind, int64_t batch, trn_entry **out,
                              int *count)
{
    const cJSON *l;
    tpu_status st = trn_list(r, root, k, k, 0, &l);
    if (st) return st;
    int n = cJSON_GetArraySize(l);
    if (n == 0 && kind != 0) return trn_bad(r, k, "no entries");
    trn_entry *e = ut_calloc((size_t)(n ? n : 1), sizeof *e);
    if (!e) return ut_nomem(r->ctx);
    *out = e;
    *count = n;
    for (int i = 0; i < n && !st; i++) {
        const cJSON *o = cJSON_GetArrayItem(l, i);
        char key[96];
        snprintf(key, sizeof key, "%s[%d]", k, i);
        if (!cJSON_IsObject(o)) return trn_bad(r, key, "wants an object");
        const char *name, *s;
        char kk[128];
        snprintf(kk, sizeof kk, "%s.name", key);
        if ((st = trn_str(r, o, "name", kk, 0, &name))) return st;
        if (!name[0] || strlen(name) > 255) return trn_bad(r, kk, "1 to 255 bytes, not %zu", strlen(name));
        for (int j = 0; j < i; j++)
            if (!strcmp(e[j].name, name)) return trn_bad(r, kk, "'%s' is also %s[%d]'s name", name, k, j);
        e[i].name = trn_dup_or_nomem(r, name, &st);
        if (st) return st;
        if ((st = trn_dtype(r, o, key, &e[i].dtype))) return st;
        if ((st = trn_shape(r, o, key, &e[i].rank, e[i].dims))) return st;
        if (kind == 0) {
            snprintf(kk, sizeof kk, "%s.role", key);
            if ((st = trn_str(r, o, "role", kk, 0, &s))) return st;
            e[i].role = -1;
            for (int q = 0; q < 4; q++)
                if (!strcmp(s, trn_role_name[q])) e[i].role = q;
            if (e[i].role < 0) return trn_bad(r, kk, "unknown role '%s' (param, stat, opt or counter)", s);
            if (e[i].role == TRN_PARAM && tpu_dtype_kind(e[i].dtype) != 'f')
                return trn_bad(r, kk, "a param must be floating point ('%s' is %s)", name, tpu_dtype_name(e[i].dtype));
        } else {
            snprintf(kk, sizeof kk, "%s.source", key);
            if ((st = trn_str(r, o, "source", kk, 0, &s))) return st;
            if (!strcmp(s, "@mask")) {
                if (kind != 2) return trn_bad(r, kk, "\"@mask\" is for eval batches only");
                if (e[i].dtype != TPU_F32 || e[i].rank != 1)
                    return trn_bad(r, key, "the \"@mask\" input must be f32[%lld]", (long long)batch);
            } else {
                e[i].source = trn_dup_or_nomem(r, s, &st);
                if (st) return st;
            }
            char kd[128];
            snprintf(kd, sizeof kd, "%s.shape", key);
            if (e[i].rank < 1 || e[i].dims[0] != batch)
                return trn_bad(r, kd, "the leading dimension must be the per-replica batch %lld", (long long)batch);
        }
    }
    return st;
}

static tpu_status trn_metrics(trn_rd *r, const cJSON *root, const char *k, trn_metric **out, int *count)
{
    const cJSON *l;
    tpu_status st = trn_list(r, root, k, k, 0, &l);
    if (st) return st;
    int n = cJSON_GetArraySize(l);
    trn_metric *m = ut_calloc((size_t)(n ? n : 1), sizeof *m);
    if (!m) return ut_nomem(r->ctx);
    *out = m;
    *count = n;
    for (int i = 0; i < n; i++) {
        const cJSON *o = cJSON_GetArrayItem(l, i);
        char key[96], kk[128];
        snprintf(key, sizeof key, "%s[%d]", k, i);
        if (!cJSON_IsObject(o)) return trn_bad(r, key, "wants an object");
        const char *name, *c;
        snprintf(kk, sizeof kk, "%s.name", key);
        if ((st = trn_str(r, o, "name", kk, 0, &name))) return st;
        m[i].name = trn_dup_or_nomem(r, name, &st);
        if (st) return st;
        if ((st = trn_dtype(r, o, key, &m[i].dtype))) return st;
        snprintf(kk, sizeof kk, "%s.combine", key);
        if ((st = trn_str(r, o, "combine", kk, 1, &c))) return st;
        if (c && strcmp(c, "mean") && strcmp(c, "sum")) return trn_bad(r, kk, "'%s' (mean or sum)", c);
        m[i].sum = c && !strcmp(c, "sum");
    }
    return TPU_OK;
}

static tpu_status trn_schedule(trn_rd *r, const cJSON *o, const char *key, double dflt, trn_sched *s)
{
    char kk[160];
    const char *kind;
    memset(s, 0, sizeof *s);
    if (!o || cJSON_IsNull(o)) {   /* no schedule: the default, constant */
        s->kind = TRN_SCHED_CONSTANT;
        s->value = dflt;
        return TPU_OK;
    }
    if (!cJSON_IsObject(o)) return trn_bad(r, key, "wants an object");
    snprintf(kk, sizeof kk, "%s.kind", key);
    tpu_status st = trn_str(r, o, "kind", kk, 0, &kind);
    if (st) return st;
#define NUM(field, name, opt, dv) do { snprintf(kk, sizeof kk, "%s.%s", key, name); \
        if ((st = trn_num(r, o, name, kk, opt, dv, &s->field))) return st; } while (0)
    if (!strcmp(kind, "constant")) {
        s->kind = TRN_SCHED_CONSTANT;
        NUM(value, "value", 0, 0);
    } else if (!strcmp(kind, "step")) {
        s->kind = TRN_SCHED_STEP;
        NUM(initial, "initial", 0, 0);
        NUM(gamma, "gamma", 1, 0.1);
        snprintf(kk, sizeof kk, "%s.step_size", key);
        if ((st = trn_int(r, o, "step_size", kk, 0, 1, 1, &s->step_size))) return st;
    } else if (!strcmp(kind, "one_cycle")) {
        s->kind = TRN_SCHED_ONE_CYCLE;
        NUM(max_lr, "max_lr", 0, 0);
        NUM(pct_start, "pct_start", 1, 0.3);
        NUM(div_factor, "div_factor", 1, 25.0);
        NUM(final_div_factor, "final_div_factor", 1, 1e4);
        if (!(s->pct_start > 0 && s->pct_start < 1)) return trn_bad(r, key, "pct_start must be in (0, 1), not %g", s->pct_start);
        if (!(s->div_factor > 0) || !(s->final_div_factor > 0))
            return trn_bad(r, key, "div_factor and final_div_factor must be > 0");
        snprintf(kk, sizeof kk, "%s.total_steps", key);
        if ((st = trn_int(r, o, "total_steps", kk, 1, -1, -1, &s->total_steps))) return st;
        if (s->total_steps == 0 || s->total_steps == 1) return trn_bad(r, kk, "must be >= 2 (or null: --steps)");
        const char *an;
        snprintf(kk, sizeof kk, "%s.anneal", key);
        if ((st = trn_str(r, o, "anneal", kk, 1, &an))) return st;
        if (an && strcmp(an, "cos") && strcmp(an, "linear")) return trn_bad(r, kk, "'%s' (cos or linear)", an);
        s->cos = !an || !strcmp(an, "cos");
    } else {
        return trn_bad(r, kk, "unknown schedule kind '%s' (constant, step or one_cycle)", kind);
    }
#undef NUM
    return TPU_OK;
}

static tpu_status trn_sig_parse(trn_rd *r, trn_sig *s, const cJSON *root)
{
    tpu_status st;
    const char *str;
    const cJSON *o, *l;
    if (!cJSON_IsObject(root)) return ut_err(r->ctx, TPU_ERR_INVALID, "%s: not a JSON object", r->path);
    if ((st = trn_str(r, root, "format", "format", 0, &str))) return st;
    if (strcmp(str, "tpusim.step_dir")) return trn_bad(r, "format", "'%s' is not \"tpusim.step_dir\"", str);
    int64_t ver;
    if ((st = trn_int(r, root, "version", "version", 0, 0, 0, &ver))) return st;
    if (ver != 1) return trn_bad(r, "version", "%lld: this tpusim reads version 1", (long long)ver);
    if ((st = trn_str(r, root, "name", "name", 0, &str))) return st;
    if (!(s->name = trn_dup_or_nomem(r, str, &st))) return st;

    o = trn_get(root, "programs");
    if (!cJSON_IsObject(o)) return trn_bad(r, "programs", o ? "wants an object" : "missing");
    for (int k = 0; k < TRN_NPROG; k++) {
        char key[32];
        snprintf(key, sizeof key, "programs.%s", trn_prog_kind[k]);
        if ((st = trn_str(r, o, trn_prog_kind[k], key, k != TRN_STEP, &str))) return st;
        if (str && !(s->prog[k] = trn_join(s->dir, str))) return ut_nomem(r->ctx);
    }
    const cJSON *is = trn_get(root, "init_state");
    if (!is) return trn_bad(r, "init_state", "missing (null for a shapes-only STEP_DIR)");
    if (!cJSON_IsNull(is)) {
        if (!cJSON_IsString(is)) return trn_bad(r, "init_state", "wants a file name or null");
        if (!(s->init_state = trn_join(s->dir, is->valuestring))) return ut_nomem(r->ctx);
    }
    if ((st = trn_int(r, root, "per_replica_batch", "per_replica_batch", 0, 0, 1, &s->B))) return st;
    if ((st = trn_entries(r, root, "state", 0, 0, &s->state, &s->nstate))) return st;
    s->param_idx = ut_calloc((size_t)s->nstate + 1, sizeof *s->param_idx);
    s->stat_idx = ut_calloc((size_t)s->nstate + 1, sizeof *s->stat_idx);
    if (!s->param_idx || !s->stat_idx) return ut_nomem(r->ctx);
    for (int i = 0; i < s->nstate; i++) {
        if (s->state[i].role == TRN_PARAM) s->param_idx[s->nparam++] = i;
        if (s->state[i].role == TRN_STAT) s->stat_idx[s->nstat++] = i;
    }
    if ((st = trn_entries(r, root, "batch", 1, s->B, &s->batch, &s->nbatch))) return st;

    if ((st = trn_list(r, root, "hypers", "hypers", 0, &l))) return st;
    s->nhyper = cJSON_GetArraySize(l);
    s->hyper = ut_calloc((size_t)s->nhyper + 1, sizeof *s->hyper);
    if (!s->hyper) return ut_nomem(r->ctx);
    for (int i = 0; i < s->nhyper; i++) {
        const cJSON *h = cJSON_GetArrayItem(l, i);
        char key[64], kk[96];
        snprintf(key, sizeof key, "hypers[%d]", i);
        if (!cJSON_IsObject(h)) return trn_bad(r, key, "wants an object");
        snprintf(kk, sizeof kk, "%s.name", key);
        if ((st = trn_str(r, h, "name", kk, 0, &str))) return st;
        if (!(s->hyper[i].name = trn_dup_or_nomem(r, str, &st))) return st;
        tpu_dtype dt;
        if ((st = trn_dtype(r, h, key, &dt))) return st;
        if (dt != TPU_F32) return trn_bad(r, key, "hypers are f32, not %s", tpu_dtype_name(dt));
        snprintf(kk, sizeof kk, "%s.default", key);
        if ((st = trn_num(r, h, "default", kk, 0, 0, &s->hyper[i].dflt))) return st;
        snprintf(kk, sizeof kk, "%s.schedule", key);
        if ((st = trn_schedule(r, trn_get(h, "schedule"), kk, s->hyper[i].dflt, &s->hyper[i].sched))) return st;
    }
    if ((st = trn_metrics(r, root, "metrics", &s->metric, &s->nmetric))) return st;
    for (int i = 0; i < s->nmetric; i++)
        if (s->metric[i].dtype != TPU_F32 && tpu_dtype_kind(s->metric[i].dtype) != 'f') {
            char key[64];
            snprintf(key, sizeof key, "metrics[%d].dtype", i);
            return trn_bad(r, key, "metrics are floating-point scalars");
        }
    if ((st = trn_str(r, root, "loss_metric", "loss_metric", 0, &str))) return st;
    s->loss_idx = -1;
    for (int i = 0; i < s->nmetric; i++)
        if (!strcmp(s->metric[i].name, str)) s->loss_idx = i;
    if (s->loss_idx < 0) return trn_bad(r, "loss_metric", "'%s' is not one of the metrics", str);
    if ((st = trn_str(r, root, "grad_reduce", "grad_reduce", 0, &str))) return st;
    if (strcmp(str, "mean")) return trn_bad(r, "grad_reduce", "'%s': version 1 knows \"mean\"", str);

    o = trn_get(root, "eval");
    if (o && !cJSON_IsNull(o)) {
        if (!cJSON_IsObject(o)) return trn_bad(r, "eval", "wants an object or null");
        if ((st = trn_int(r, o, "per_replica_batch", "eval.per_replica_batch", 0, 0, 1, &s->E))) return st;
        if ((st = trn_entries(r, o, "batch", 2, s->E, &s->ebatch, &s->nebatch))) return st;
        if ((st = trn_metrics(r, o, "metrics", &s->emetric, &s->nemetric))) return st;
        if ((st = trn_list(r, o, "report", "eval.report", 1, &l))) return st;
        s->nreport = l ? cJSON_GetArraySize(l) : 0;
        s->report = ut_calloc((size_t)s->nreport + 1, sizeof *s->report);
        if (!s->report) return ut_nomem(r->ctx);
        for (int i = 0; i < s->nreport; i++) {
            const cJSON *e = cJSON_GetArrayItem(l, i);
            char key[64], kk[96];
            snprintf(key, sizeof key, "eval.report[%d]", i);
            if (!cJSON_IsObject(e)) return trn_bad(r, key, "wants an object");
            snprintf(kk, sizeof kk, "%s.name", key);
            if ((st = trn_str(r, e, "name", kk, 0, &str))) return st;
            if (!(s->report[i].name = trn_dup_or_nomem(r, str, &st))) return st;
            static const char *const fld[2] = {"numerator", "denominator"};
            for (int q = 0; q < 2; q++) {
                snprintf(kk, sizeof kk, "%s.%s", key, fld[q]);
                if ((st = trn_str(r, e, fld[q], kk, 0, &str))) return st;
                int idx = -1;
                for (int j = 0; j < s->nemetric; j++)
                    if (!strcmp(s->emetric[j].name, str)) idx = j;
                if (idx < 0) return trn_bad(r, kk, "'%s' is not one of eval.metrics", str);
                if (q == 0) s->report[i].num = idx;
                else s->report[i].den = idx;
            }
        }
        s->has_eval = s->prog[TRN_EVAL] != NULL;
    }

    s->lr_hyper = -1;
    o = trn_get(root, "lr_scaling");
    if (!cJSON_IsObject(o)) return trn_bad(r, "lr_scaling", o ? "wants an object" : "missing");
    if ((st = trn_str(r, o, "rule", "lr_scaling.rule", 0, &str))) return st;
    if (strcmp(str, "linear") && strcmp(str, "none")) return trn_bad(r, "lr_scaling.rule", "'%s' (linear or none)", str);
    s->lr_linear = !strcmp(str, "linear");
    int64_t rr;
    if ((st = trn_int(r, o, "reference_replicas", "lr_scaling.reference_replicas", !s->lr_linear, 1, 1, &rr))) return st;
    s->ref_replicas = (int)rr;
    if ((st = trn_list(r, o, "hypers", "lr_scaling.hypers", !s->lr_linear, &l))) return st;
    for (int i = 0; l && i < cJSON_GetArraySize(l); i++) {
        const cJSON *e = cJSON_GetArrayItem(l, i);
        char key[64];
        snprintf(key, sizeof key, "lr_scaling.hypers[%d]", i);
        if (!cJSON_IsString(e)) return trn_bad(r, key, "wants a hyper's name");
        int idx = -1;
        for (int j = 0; j < s->nhyper; j++)
            if (!strcmp(s->hyper[j].name, e->valuestring)) idx = j;
        if (idx < 0) return trn_bad(r, key, "'%s' is not one of the hypers", e->valuestring);
        s->hyper[idx].scaled = s->lr_linear;
        if (i == 0) s->lr_hyper = idx;
    }
    if (s->lr_hyper < 0)
        for (int j = 0; j < s->nhyper; j++)
            if (!strcmp(s->hyper[j].name, "learning_rate")) s->lr_hyper = j;

    s->shuffle = 1;
    o = trn_get(root, "data");
    if (o && !cJSON_IsNull(o)) {
        if (!cJSON_IsObject(o)) return trn_bad(r, "data", "wants an object");
        const cJSON *sh = trn_get(o, "shuffle");
        if (sh && !cJSON_IsNull(sh)) {
            if (!cJSON_IsBool(sh)) return trn_bad(r, "data.shuffle", "wants true or false");
            s->shuffle = cJSON_IsTrue(sh);
        }
        int64_t seed;
        if ((st = trn_int(r, o, "seed", "data.seed", 1, 0, 0, &seed))) return st;
        s->seed = (uint64_t)seed;
        const char *tr, *ev;
        if ((st = trn_str(r, o, "train", "data.train", 1, &tr))) return st;
        if ((st = trn_str(r, o, "eval", "data.eval", 1, &ev))) return st;
        if (tr && !(s->data_train = trn_join(s->dir, tr))) return ut_nomem(r->ctx);
        if (ev && !(s->data_eval = trn_join(s->dir, ev))) return ut_nomem(r->ctx);
        const cJSON *c = trn_get(o, "cached");
        if (c && !cJSON_IsNull(c)) {
            if (!cJSON_IsObject(c)) return trn_bad(r, "data.cached", "wants an object");
            if ((st = trn_str(r, c, "train", "data.cached.train", 1, &tr))) return st;
            if ((st = trn_str(r, c, "eval", "data.cached.eval", 1, &ev))) return st;
            if (tr && !(s->cached_train = trn_join(s->dir, tr))) return ut_nomem(r->ctx);
            if (ev && !(s->cached_eval = trn_join(s->dir, ev))) return ut_nomem(r->ctx);
        }
    }
    return TPU_OK;
}

tpu_status trn_sig_load(tpu_ctx *ctx, const char *dir, trn_sig **out)
{
    *out = NULL;
    trn_sig *s = ut_calloc(1, sizeof *s);
    if (!s) return ut_nomem(ctx);
    s->dir = ut_strdup(dir);
    s->path = trn_join(dir, "signature.json");
    if (!s->dir || !s->path) {
        trn_sig_free(s);
        return ut_nomem(ctx);
    }
    char *text = NULL;
    size_t len = 0;
    tpu_status st = ut_read_text(ctx, s->path, &text, &len);
    if (st) {
        ut_err_prefix(ctx, "%s is not a STEP_DIR (docs/step_dir.md)", dir);
        trn_sig_free(s);
        return st;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        /* cJSON says where it stopped: turn that into a line and column */
        size_t off = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
        int line = 1, col = 1;
        for (size_t i = 0; i < off; i++) {
            if (text[i] == '\n') { line++; col = 1; }
            else col++;
        }
        st = ut_err(ctx, TPU_ERR_PARSE, "%s:%d:%d: not valid JSON", s->path, line, col);
    } else {
        trn_rd r = {ctx, s->path};
        st = trn_sig_parse(&r, s, root);
    }
    cJSON_Delete(root);
    ut_free(text);
    if (st) {
        trn_sig_free(s);
        return st;
    }
    *out = s;
    return TPU_OK;
}

/* ---- programs against the signature ---- */

typedef struct trn_want {
    const char *what;          /* "state 'params/w0'", "grad of 'params/w0'", "hyper 'learning_rate'" */
    const char *name;
    tpu_dtype   dtype;
    int         rank;
    const int64_t *dims;
} trn_want;

static tpu_status trn_match(tpu_ctx *ctx, const char *prog, const char *side, int i, const trn_want *w,
                            const hlo_shape *s)
{
    char want[128], got[128];
    if (!hlo_shape_is_array(s))
        return ut_err(ctx, TPU_ERR_INVALID, "%s: %s %d (%s%s%s) is not an array", prog, side, i, w->what,
                      w->name ? " " : "", w->name ? w->name : "");
    int ok = s->dtype == w->dtype && s->rank == w->rank;
    for (int d = 0; ok && d < s->rank; d++) ok = s->dims[d] == w->dims[d];
    if (ok) return TPU_OK;
    trn_shape_str(w->dtype, w->rank, w->dims, want, sizeof want);
    trn_shape_str((tpu_dtype)s->dtype, s->rank, s->dims, got, sizeof got);
    return ut_err(ctx, TPU_ERR_INVALID, "%s: %s %d is %s, but the signature's %s%s%s is %s", prog, side, i, got,
                  w->what, w->name ? " " : "", w->name ? w->name : "", want);
}

tpu_status trn_sig_check_program(tpu_ctx *ctx, const trn_sig *s, int kind, const tpu_module *m)
{
    const char *prog = s->prog[kind];
    trn_want p[1024], r[1024];
    int np = 0, nr = 0;
    static const int64_t scalar[1] = {0};
#define ADD(arr, n, w, nm, dt, rk, dm) do { if ((n) >= 1024) return ut_err(ctx, TPU_ERR_UNSUPPORTED, \
        "%s: more than 1024 parameters or results", prog); arr[(n)++] = (trn_want){w, nm, dt, rk, dm}; } while (0)
    /* parameters */
    for (int i = 0; i < s->nstate; i++) ADD(p, np, "state", s->state[i].name, s->state[i].dtype, s->state[i].rank, s->state[i].dims);
    if (kind == TRN_STEP || kind == TRN_GRAD)
        for (int i = 0; i < s->nbatch; i++) ADD(p, np, "batch input", s->batch[i].name, s->batch[i].dtype, s->batch[i].rank, s->batch[i].dims);
    if (kind == TRN_EVAL)
        for (int i = 0; i < s->nebatch; i++) ADD(p, np, "eval input", s->ebatch[i].name, s->ebatch[i].dtype, s->ebatch[i].rank, s->ebatch[i].dims);
    if (kind == TRN_APPLY)
        for (int i = 0; i < s->nparam; i++) {
            const trn_entry *e = &s->state[s->param_idx[i]];
            ADD(p, np, "gradient of", e->name, e->dtype, e->rank, e->dims);
        }
    if (kind == TRN_STEP || kind == TRN_APPLY)
        for (int i = 0; i < s->nhyper; i++) ADD(p, np, "hyper", s->hyper[i].name, TPU_F32, 0, scalar);
    /* results */
    if (kind == TRN_STEP || kind == TRN_APPLY)
        for (int i = 0; i < s->nstate; i++) ADD(r, nr, "new state", s->state[i].name, s->state[i].dtype, s->state[i].rank, s->state[i].dims);
    if (kind == TRN_GRAD) {
        for (int i = 0; i < s->nparam; i++) {
            const trn_entry *e = &s->state[s->param_idx[i]];
            ADD(r, nr, "gradient of", e->name, e->dtype, e->rank, e->dims);
        }
        for (int i = 0; i < s->nstat; i++) {
            const trn_entry *e = &s->state[s->stat_idx[i]];
            ADD(r, nr, "new statistic", e->name, e->dtype, e->rank, e->dims);
        }
    }
    if (kind == TRN_STEP || kind == TRN_GRAD)
        for (int i = 0; i < s->nmetric; i++) ADD(r, nr, "metric", s->metric[i].name, s->metric[i].dtype, 0, scalar);
    if (kind == TRN_EVAL)
        for (int i = 0; i < s->nemetric; i++) ADD(r, nr, "eval metric", s->emetric[i].name, s->emetric[i].dtype, 0, scalar);
#undef ADD
    const hlo_comp *e = m->entry;
    if (e->nparams != np)
        return ut_err(ctx, TPU_ERR_INVALID, "%s: %d parameters, but the signature gives %s.hlo %d (docs/step_dir.md section 2)",
                      prog, e->nparams, trn_prog_kind[kind], np);
    for (int i = 0; i < np; i++) {
        tpu_status st = trn_match(ctx, prog, "parameter", i, &p[i], &e->params[i]->shape);
        if (st) return st;
    }
    const hlo_shape *rs = &e->root->shape;
    int n = hlo_shape_is_tuple(rs) ? rs->ntuple : 1;
    if (n != nr)
        return ut_err(ctx, TPU_ERR_INVALID, "%s: %d results, but the signature gives %s.hlo %d (docs/step_dir.md section 2)",
                      prog, n, trn_prog_kind[kind], nr);
    for (int i = 0; i < nr; i++) {
        tpu_status st = trn_match(ctx, prog, "result", i, &r[i], hlo_shape_is_tuple(rs) ? &rs->tuple[i] : rs);
        if (st) return st;
    }
    return TPU_OK;
}

/* Each member's header against the signature before its data are read: a member that is no state entry, or
 * whose dtype or shape differs, is refused without inflating it. */
static int trn_state_filter(void *user, const char *name, int index, tpu_dtype dtype, int rank, const int64_t *dims,
                            char *why, size_t why_size)
{
    const trn_sig *s = user;
    (void)index;
    for (int i = 0; i < s->nstate; i++) {
        const trn_entry *e = &s->state[i];
        if (strcmp(e->name, name)) continue;
        int ok = dtype == e->dtype && rank == e->rank;
        for (int d = 0; ok && d < rank; d++) ok = dims[d] == e->dims[d];
        if (ok) return 0;
        char want[128], got[128];
        trn_shape_str(e->dtype, e->rank, e->dims, want, sizeof want);
        trn_shape_str(dtype, rank, dims, got, sizeof got);
        snprintf(why, why_size, "is %s, the signature says %s", got, want);
        return 1;
    }
    snprintf(why, why_size, "is not a state entry of %s", s->path);
    return 1;
}

tpu_status trn_sig_load_state(tpu_ctx *ctx, const trn_sig *s, const char *npz, tpu_tensor ***state)
{
    *state = NULL;
    tpu_tensor **t = NULL;
    char **names = NULL;
    int n = 0;
    tpu_status st = tpu_npz_load_filtered(ctx, npz, trn_state_filter, (void *)s, &t, &names, &n);
    if (st) return st;
    tpu_tensor **out = ut_calloc((size_t)s->nstate + 1, sizeof *out);
    if (!out) st = ut_nomem(ctx);
    for (int i = 0; !st && i < s->nstate; i++) {
        const trn_entry *e = &s->state[i];
        int k = -1;
        for (int j = 0; j < n; j++)
            if (names[j] && !strcmp(names[j], e->name)) k = j;
        if (k < 0) {
            st = ut_err(ctx, TPU_ERR_INVALID, "%s: no member '%s' for state entry %d of %s", npz, e->name, i, s->path);
            break;
        }
        const tpu_tensor *x = t[k];
        int ok = x->dtype == e->dtype && x->rank == e->rank;
        for (int d = 0; ok && d < e->rank; d++) ok = x->dims[d] == e->dims[d];
        if (!ok) {
            char want[128], got[128];
            trn_shape_str(e->dtype, e->rank, e->dims, want, sizeof want);
            trn_shape_str(x->dtype, x->rank, x->dims, got, sizeof got);
            st = ut_err(ctx, TPU_ERR_INVALID, "%s: member '%s' is %s, the signature says %s", npz, e->name, got, want);
            break;
        }
        out[i] = t[k];
        t[k] = NULL;
    }
    for (int j = 0; j < n; j++) tpu_tensor_free(t[j]);
    ut_free(t);
    tpu_names_free(names, n);
    if (st) {
        if (out) tpu_tensors_free(out, s->nstate);
        return st;
    }
    *state = out;
    return TPU_OK;
}
