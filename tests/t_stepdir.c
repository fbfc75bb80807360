/* t_stepdir.c — every committed STEP_DIR (examples/<name>/signature.json; format in docs/step_dir.md): the
 * signature parses, each program loads and verifies with its parameters laid out as the signature says,
 * init_state.npz and the datasets (.npz shards and the cached .tpuds format) agree with it, and grad.hlo then
 * apply.hlo on one real batch give step.hlo's new state and metrics (tpu_run, TPU numerics). A checker that
 * passes everything proves nothing, so a corrupted copy of a STEP_DIR must fail it. */
#include "test.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    const char *name, *role, *source;   /* point into the cJSON tree */
    tpu_dtype   dtype;
    int         rank;
    int64_t     dims[TPU_MAX_RANK];
    double      dflt;                   /* hypers: the nominal value */
} sd_entry;

typedef struct {
    const char *dir;
    cJSON      *root;
    int         B, E;
    sd_entry   *state, batch[16], ebatch[16], hyper[16];
    int         ns, nb, neb, nh, nmetric, nemetric, nparam, nstat;
    int         problems;
    char        msg[2048];              /* the first few problems */
} stepdir;

/* A dataset: named arrays with a common first dimension. */
typedef struct {
    tpu_tensor **t;
    char       **names;
    int          n;
} sd_data;

static void sd_fail(stepdir *sd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sd_fail(stepdir *sd, const char *fmt, ...)
{
    size_t len = strlen(sd->msg);
    if (sd->problems++ < 4 && len + 8 < sizeof sd->msg) {
        va_list ap;
        va_start(ap, fmt);
        snprintf(sd->msg + len, sizeof sd->msg - len, "\n    %s: ", sd->dir);
        len = strlen(sd->msg);
        vsnprintf(sd->msg + len, sizeof sd->msg - len, fmt, ap);
        va_end(ap);
    }
}

static void sd_path(char *buf, size_t size, const stepdir *sd, const char *rel)
{
    snprintf(buf, size, "%s/%s", sd->dir, rel);
}

static const char *sd_str(const cJSON *o, const char *key)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(j) ? j->valuestring : NULL;
}

static void shape_str(char *buf, size_t size, tpu_dtype dt, int rank, const int64_t *dims)
{
    int n = snprintf(buf, size, "%s[", tpu_dtype_name(dt));
    for (int i = 0; i < rank && n > 0 && (size_t)n < size; i++)
        n += snprintf(buf + n, size - n, "%s%lld", i ? "," : "", (long long)dims[i]);
    if (n > 0 && (size_t)n < size) snprintf(buf + n, size - n, "]");
}

/* {name, dtype, shape[, role][, source]} */
static int sd_entry_parse(stepdir *sd, const cJSON *j, const char *what, sd_entry *e)
{
    memset(e, 0, sizeof *e);
    e->name = sd_str(j, "name");
    const char *dt = sd_str(j, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(j, "shape");
    if (!e->name || !dt || !cJSON_IsArray(shape)) {
        sd_fail(sd, "%s: an entry needs name, dtype and shape", what);
        return 0;
    }
    e->dtype = tpu_dtype_from_name(dt, strlen(dt));
    if (e->dtype == TPU_INVALID) sd_fail(sd, "%s %s: unknown dtype \"%s\"", what, e->name, dt);
    e->rank = cJSON_GetArraySize(shape);
    if (e->rank > TPU_MAX_RANK) {
        sd_fail(sd, "%s %s: rank %d", what, e->name, e->rank);
        return 0;
    }
    for (int i = 0; i < e->rank; i++) {
        const cJSON *d = cJSON_GetArrayItem(shape, i);
        if (!cJSON_IsNumber(d) || d->valuedouble < 0) sd_fail(sd, "%s %s: bad dimension %d", what, e->name, i);
        e->dims[i] = cJSON_IsNumber(d) ? (int64_t)d->valuedouble : 0;
    }
    e->role = sd_str(j, "role");
    e->source = sd_str(j, "source");
    return 1;
}

static int sd_entries(stepdir *sd, const cJSON *arr, const char *what, sd_entry *out, int cap)
{
    if (!cJSON_IsArray(arr)) {
        sd_fail(sd, "%s: not a list", what);
        return 0;
    }
    int n = cJSON_GetArraySize(arr);
    if (n > cap) {
        sd_fail(sd, "%s: %d entries, the test takes %d", what, n, cap);
        return 0;
    }
    for (int i = 0; i < n; i++) sd_entry_parse(sd, cJSON_GetArrayItem(arr, i), what, &out[i]);
    return n;
}

static int sd_count(const cJSON *arr)
{
    return cJSON_IsArray(arr) ? cJSON_GetArraySize(arr) : 0;
}

static void sd_free(stepdir *sd)
{
    free(sd->state);
    cJSON_Delete(sd->root);
}

static int sd_open(stepdir *sd, const char *dir)
{
    memset(sd, 0, sizeof *sd);
    sd->dir = dir;
    char path[1024];
    sd_path(path, sizeof path, sd, "signature.json");
    FILE *f = fopen(path, "rb");
    if (!f) {
        sd_fail(sd, "cannot open signature.json");
        return 0;
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)len + 1);
    size_t got = fread(text, 1, (size_t)len, f);
    fclose(f);
    text[got] = 0;
    sd->root = cJSON_Parse(text);
    free(text);
    if (!sd->root) {
        sd_fail(sd, "signature.json does not parse as JSON");
        return 0;
    }
    const cJSON *r = sd->root, *ver = cJSON_GetObjectItemCaseSensitive(r, "version");
    const char *fmt = sd_str(r, "format");
    if (!fmt || strcmp(fmt, "tpusim.step_dir") || !cJSON_IsNumber(ver) || ver->valuedouble != 1) {
        sd_fail(sd, "format/version is not tpusim.step_dir 1");
        return 0;
    }
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(r, "per_replica_batch");
    sd->B = cJSON_IsNumber(b) ? (int)b->valuedouble : 0;
    if (sd->B < 1) sd_fail(sd, "per_replica_batch missing or < 1");

    const cJSON *state = cJSON_GetObjectItemCaseSensitive(r, "state");
    sd->state = calloc((size_t)sd_count(state) + 1, sizeof *sd->state);
    sd->ns = sd_entries(sd, state, "state", sd->state, sd_count(state));
    for (int i = 0; i < sd->ns; i++) {
        const char *role = sd->state[i].role ? sd->state[i].role : "(none)";
        char kind = tpu_dtype_kind(sd->state[i].dtype);
        if (!strcmp(role, "param")) {
            sd->nparam++;
            if (kind != 'f') sd_fail(sd, "state %s: a param must be floating point", sd->state[i].name);
        } else if (!strcmp(role, "stat")) {
            sd->nstat++;
        } else if (strcmp(role, "opt") && strcmp(role, "counter")) {
            sd_fail(sd, "state %s: unknown role %s", sd->state[i].name, role);
        }
    }
    sd->nb = sd_entries(sd, cJSON_GetObjectItemCaseSensitive(r, "batch"), "batch", sd->batch, 16);
    for (int i = 0; i < sd->nb; i++) {
        if (!sd->batch[i].source) sd_fail(sd, "batch %s: no source", sd->batch[i].name);
        if (sd->batch[i].rank < 1 || sd->batch[i].dims[0] != sd->B)
            sd_fail(sd, "batch %s: leading dimension is not per_replica_batch %d", sd->batch[i].name, sd->B);
    }
    const cJSON *hy = cJSON_GetObjectItemCaseSensitive(r, "hypers");
    sd->nh = sd_count(hy) > 16 ? 16 : sd_count(hy);
    for (int i = 0; i < sd->nh; i++) {
        const cJSON *h = cJSON_GetArrayItem(hy, i);
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(h, "default");
        const cJSON *sch = cJSON_GetObjectItemCaseSensitive(h, "schedule");
        const char *kind = sd_str(sch, "kind");
        sd->hyper[i] = (sd_entry){.name = sd_str(h, "name"), .dtype = TPU_F32, .dflt = cJSON_IsNumber(d) ? d->valuedouble : 0};
        if (!sd->hyper[i].name || !cJSON_IsNumber(d)) sd_fail(sd, "hyper %d: needs name and default", i);
        if (!kind || (strcmp(kind, "constant") && strcmp(kind, "one_cycle") && strcmp(kind, "step")))
            sd_fail(sd, "hyper %d: unknown schedule kind", i);
    }
    sd->nmetric = sd_count(cJSON_GetObjectItemCaseSensitive(r, "metrics"));
    const char *loss = sd_str(r, "loss_metric");
    int has_loss = 0;
    for (int i = 0; i < sd->nmetric; i++) {
        const cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(r, "metrics"), i);
        const char *c = sd_str(m, "combine");
        has_loss |= loss && sd_str(m, "name") && !strcmp(sd_str(m, "name"), loss);
        if (!c || (strcmp(c, "mean") && strcmp(c, "sum"))) sd_fail(sd, "metric %d: combine must be mean or sum", i);
    }
    if (!has_loss) sd_fail(sd, "loss_metric is not one of the metrics");
    const char *gr = sd_str(r, "grad_reduce");
    if (!gr || strcmp(gr, "mean")) sd_fail(sd, "grad_reduce must be \"mean\"");
    const cJSON *lr = cJSON_GetObjectItemCaseSensitive(r, "lr_scaling");
    const char *rule = sd_str(lr, "rule");
    if (!rule || (strcmp(rule, "linear") && strcmp(rule, "none"))) sd_fail(sd, "lr_scaling.rule must be linear or none");

    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(r, "eval");
    if (cJSON_IsObject(ev)) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(ev, "per_replica_batch");
        sd->E = cJSON_IsNumber(e) ? (int)e->valuedouble : 0;
        sd->neb = sd_entries(sd, cJSON_GetObjectItemCaseSensitive(ev, "batch"), "eval.batch", sd->ebatch, 16);
        sd->nemetric = sd_count(cJSON_GetObjectItemCaseSensitive(ev, "metrics"));
        for (int i = 0; i < sd->neb; i++)
            if (sd->ebatch[i].rank < 1 || sd->ebatch[i].dims[0] != sd->E)
                sd_fail(sd, "eval.batch %s: leading dimension is not eval.per_replica_batch", sd->ebatch[i].name);
    }
    return sd->problems == 0;
}

static const char *sd_program(const stepdir *sd, const char *kind)
{
    return sd_str(cJSON_GetObjectItemCaseSensitive(sd->root, "programs"), kind);
}

/* The parameter layout of a program (docs/step_dir.md section 2). */
static int sd_layout(const stepdir *sd, const char *kind, const sd_entry **out, int cap)
{
    int n = 0;
    for (int i = 0; i < sd->ns && n < cap; i++) out[n++] = &sd->state[i];
    if (!strcmp(kind, "step") || !strcmp(kind, "grad"))
        for (int i = 0; i < sd->nb && n < cap; i++) out[n++] = &sd->batch[i];
    if (!strcmp(kind, "apply"))
        for (int i = 0; i < sd->ns && n < cap; i++)
            if (sd->state[i].role && !strcmp(sd->state[i].role, "param")) out[n++] = &sd->state[i];
    if (!strcmp(kind, "eval"))
        for (int i = 0; i < sd->neb && n < cap; i++) out[n++] = &sd->ebatch[i];
    if (!strcmp(kind, "step") || !strcmp(kind, "apply"))
        for (int i = 0; i < sd->nh && n < cap; i++) out[n++] = &sd->hyper[i];
    return n;
}

/* Loads, verifies and checks the parameters of one program; NULL if absent or broken. */
static tpu_module *sd_load_program(stepdir *sd, tpu_ctx *ctx, const char *kind)
{
    const char *file = sd_program(sd, kind);
    if (!file) return NULL;
    char path[1024];
    sd_path(path, sizeof path, sd, file);
    tpu_module *m = NULL;
    if (tpu_module_load(ctx, path, &m) != TPU_OK) {
        sd_fail(sd, "%s: %s", file, tpu_errmsg(ctx));
        return NULL;
    }
    tpu_report *rep = NULL;
    if (tpu_check(ctx, m, NULL, &rep) != TPU_OK || !tpu_report_compatible(rep))
        sd_fail(sd, "%s does not verify: %s", file, rep ? tpu_report_verdict(rep) : tpu_errmsg(ctx));
    tpu_report_free(rep);
    const sd_entry *want[2048];
    int n = sd_layout(sd, kind, want, 2048);
    if (tpu_module_num_params(m) != n) sd_fail(sd, "%s has %d parameters, the signature lays out %d", file,
                                               tpu_module_num_params(m), n);
    for (int i = 0; i < n && i < tpu_module_num_params(m); i++) {
        tpu_dtype dt;
        int rank;
        int64_t dims[TPU_MAX_RANK];
        if (tpu_module_param_info(m, i, &dt, &rank, dims) != TPU_OK) continue;
        int same = dt == want[i]->dtype && rank == want[i]->rank;
        for (int d = 0; same && d < rank; d++) same = dims[d] == want[i]->dims[d];
        if (!same) {
            char a[128], b[128];
            shape_str(a, sizeof a, dt, rank, dims);
            shape_str(b, sizeof b, want[i]->dtype, want[i]->rank, want[i]->dims);
            sd_fail(sd, "%s parameter %d is %s, the signature's %s is %s", file, i, a, want[i]->name, b);
        }
    }
    return m;
}

/* Same dtype and shape as the entry (rows_only: the first dimension may differ, a dataset array feeding it). */
static int tensor_matches(const tpu_tensor *t, const sd_entry *e, int rows_only)
{
    if (tpu_tensor_dtype(t) != e->dtype || tpu_tensor_rank(t) != e->rank) return 0;
    for (int d = rows_only ? 1 : 0; d < e->rank; d++)
        if (tpu_tensor_dims(t)[d] != e->dims[d]) return 0;
    return 1;
}

static void data_free(sd_data *d)
{
    tpu_tensors_free(d->t, d->n);
    tpu_names_free(d->names, d->n);
    memset(d, 0, sizeof *d);
}

static int data_find(const sd_data *d, const char *name)
{
    for (int i = 0; i < d->n; i++)
        if (!strcmp(d->names[i], name)) return i;
    return -1;
}

/* Appends rows of `add` to `*acc` (same dtype and per-example shape). */
static tpu_status rows_concat(tpu_ctx *ctx, tpu_tensor **acc, const tpu_tensor *add)
{
    int r = tpu_tensor_rank(add);
    int64_t dims[TPU_MAX_RANK];
    memcpy(dims, tpu_tensor_dims(add), sizeof(int64_t) * (size_t)r);
    dims[0] += tpu_tensor_dims(*acc)[0];
    tpu_tensor *t = NULL;
    tpu_status st = tpu_tensor_new(ctx, tpu_tensor_dtype(add), r, dims, &t);
    if (st != TPU_OK) return st;
    memcpy(tpu_tensor_data(t), tpu_tensor_cdata(*acc), tpu_tensor_nbytes(*acc));
    memcpy((char *)tpu_tensor_data(t) + tpu_tensor_nbytes(*acc), tpu_tensor_cdata(add), tpu_tensor_nbytes(add));
    tpu_tensor_free(*acc);
    *acc = t;
    return TPU_OK;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A directory of .npz shards, concatenated in name order. */
static int data_load_npz_dir(stepdir *sd, tpu_ctx *ctx, const char *path, sd_data *out)
{
    memset(out, 0, sizeof *out);
    DIR *dir = opendir(path);
    if (!dir) {
        sd_fail(sd, "dataset %s: not a directory", path);
        return 0;
    }
    char *files[256];
    int nf = 0;
    for (struct dirent *de; (de = readdir(dir)) && nf < 256;) {
        size_t l = strlen(de->d_name);
        if (l > 4 && !strcmp(de->d_name + l - 4, ".npz")) files[nf++] = strdup(de->d_name);
    }
    closedir(dir);
    qsort(files, (size_t)nf, sizeof *files, cmp_str);
    if (!nf) sd_fail(sd, "dataset %s: no .npz shards", path);
    for (int f = 0; f < nf; f++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", path, files[f]);
        sd_data s;
        if (tpu_npz_load(ctx, p, &s.t, &s.names, &s.n) != TPU_OK) {
            sd_fail(sd, "%s: %s", p, tpu_errmsg(ctx));
            continue;
        }
        if (f == 0) {
            *out = s;
            continue;
        }
        for (int i = 0; i < out->n; i++) {
            int k = data_find(&s, out->names[i]);
            if (k < 0 || tpu_tensor_dtype(s.t[k]) != tpu_tensor_dtype(out->t[i])) {
                sd_fail(sd, "%s: array %s missing or of another dtype", p, out->names[i]);
                continue;
            }
            if (rows_concat(ctx, &out->t[i], s.t[k]) != TPU_OK) sd_fail(sd, "%s: %s", p, tpu_errmsg(ctx));
        }
        data_free(&s);
    }
    for (int f = 0; f < nf; f++) free(files[f]);
    return out->n > 0;
}

static uint64_t rd64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static uint32_t rd32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* One .tpuds file, read as docs/step_dir.md section 6.2 lays it out (a reader written from the document, to
 * hold the Python writer to it). */
static int data_load_tpuds(stepdir *sd, tpu_ctx *ctx, const char *path, sd_data *out)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) {
        sd_fail(sd, "dataset %s: cannot open", path);
        return 0;
    }
    fseek(f, 0, SEEK_END);
    uint64_t size = (uint64_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char h[64], e[128];
    int ok = fread(h, 1, 64, f) == 64 && !memcmp(h, "TPUSIMDS", 8) && rd32(h + 8) == 1;
    uint32_t na = ok ? rd32(h + 12) : 0;
    uint64_t n = rd64(h + 16), hsize = rd64(h + 24), fsize = rd64(h + 32);
    if (!ok || na < 1 || na > 64 || fsize != size || hsize != ((64 + 128 * (uint64_t)na + 4095) / 4096 * 4096)) {
        sd_fail(sd, "%s: bad header (magic, version, num_arrays, header_size or file_size)", path);
        fclose(f);
        return 0;
    }
    out->t = calloc(na, sizeof *out->t);
    out->names = calloc(na, sizeof *out->names);
    for (uint32_t k = 0; k < na && ok; k++) {
        fseek(f, 64 + 128 * (long)k, SEEK_SET);
        if (fread(e, 1, 128, f) != 128) break;
        char name[49] = {0}, dt[9] = {0};
        memcpy(name, e, 48);
        memcpy(dt, e + 48, 8);
        int rank = (int)rd32(e + 56);
        int64_t dims[TPU_MAX_RANK];
        dims[0] = (int64_t)n;
        uint64_t per = 1;
        tpu_dtype t = tpu_dtype_from_name(dt, strlen(dt));
        if (t == TPU_INVALID || rank > 6) {
            sd_fail(sd, "%s: array %u: dtype \"%s\" or rank %d", path, k, dt, rank);
            break;
        }
        for (int d = 0; d < rank; d++) {
            dims[d + 1] = (int64_t)rd64(e + 64 + 8 * d);
            per *= (uint64_t)dims[d + 1];
        }
        uint64_t off = rd64(e + 112), nbytes = rd64(e + 120);
        if (off % 4096 || nbytes != n * per * tpu_dtype_size(t) || off + nbytes > size) {
            sd_fail(sd, "%s: array %s: offset %llu / nbytes %llu do not fit", path, name, (unsigned long long)off,
                    (unsigned long long)nbytes);
            break;
        }
        if (tpu_tensor_new(ctx, t, rank + 1, dims, &out->t[k]) != TPU_OK) break;
        out->names[k] = strdup(name);
        out->n = (int)k + 1;
        fseek(f, (long)off, SEEK_SET);
        if (fread(tpu_tensor_data(out->t[k]), 1, nbytes, f) != nbytes) sd_fail(sd, "%s: %s truncated", path, name);
    }
    fclose(f);
    if (out->n != (int)na) {
        sd_fail(sd, "%s: could not read every array", path);
        return 0;
    }
    return 1;
}

static void data_free_tpuds(sd_data *d)
{
    for (int i = 0; i < d->n; i++) {
        tpu_tensor_free(d->t[i]);
        free(d->names[i]);
    }
    free(d->t);
    free(d->names);
    memset(d, 0, sizeof *d);
}

/* Checks every input's source against the dataset and cuts the first `rows` examples as the batch. */
static int data_batch(stepdir *sd, tpu_ctx *ctx, const sd_data *d, const char *what, const sd_entry *in, int nin,
                      int rows, tpu_tensor **batch)
{
    int ok = 1;
    for (int i = 0; i < nin; i++) {
        batch[i] = NULL;
        if (in[i].source && !strcmp(in[i].source, "@mask")) {
            ok &= tpu_tensor_new(ctx, TPU_F32, 1, in[i].dims, &batch[i]) == TPU_OK;
            for (int r = 0; ok && r < rows; r++) ((float *)tpu_tensor_data(batch[i]))[r] = 1.0f;
            continue;
        }
        int k = in[i].source ? data_find(d, in[i].source) : -1;
        if (k < 0) {
            sd_fail(sd, "%s: no array \"%s\" for batch input %s", what, in[i].source ? in[i].source : "?", in[i].name);
            ok = 0;
            continue;
        }
        const tpu_tensor *a = d->t[k];
        if (!tensor_matches(a, &in[i], 1) || tpu_tensor_dims(a)[0] < rows) {
            char s[128], w[128];
            tpu_tensor_shape_str(a, s, sizeof s);
            shape_str(w, sizeof w, in[i].dtype, in[i].rank, in[i].dims);
            sd_fail(sd, "%s: array %s is %s, batch input %s wants %s per batch", what, in[i].source, s, in[i].name, w);
            ok = 0;
            continue;
        }
        ok &= tpu_tensor_new(ctx, in[i].dtype, in[i].rank, in[i].dims, &batch[i]) == TPU_OK;
        if (ok) memcpy(tpu_tensor_data(batch[i]), tpu_tensor_cdata(a), tpu_tensor_nbytes(batch[i]));
    }
    return ok;
}

/* The cached copy of a dataset must hold the same arrays, bytes for bytes. */
static void data_same(stepdir *sd, const sd_data *a, const sd_data *b, const char *what)
{
    if (a->n != b->n) sd_fail(sd, "%s: %d arrays vs %d in the .npz shards", what, b->n, a->n);
    for (int i = 0; i < a->n; i++) {
        int k = data_find(b, a->names[i]);
        if (k < 0 || tpu_tensor_nbytes(a->t[i]) != tpu_tensor_nbytes(b->t[k])
            || tpu_tensor_rank(a->t[i]) != tpu_tensor_rank(b->t[k])
            || memcmp(tpu_tensor_cdata(a->t[i]), tpu_tensor_cdata(b->t[k]), tpu_tensor_nbytes(a->t[i])))
            sd_fail(sd, "%s: array %s differs from the .npz shards", what, a->names[i]);
    }
}

static double max_abs(const tpu_tensor *t)
{
    double m = 0;
    for (int64_t i = 0; i < tpu_tensor_count(t); i++) {
        double v = fabs(tpu_tensor_get_f64(t, i));
        if (v > m) m = v;
    }
    return m;
}

/* Worst |a-b| relative to max|b| (floats), or 0/1 for equal/unequal integers. */
static double rel_diff(const tpu_tensor *a, const tpu_tensor *b)
{
    if (tpu_tensor_count(a) != tpu_tensor_count(b) || tpu_tensor_dtype(a) != tpu_tensor_dtype(b)) return INFINITY;
    int fl = tpu_dtype_kind(tpu_tensor_dtype(a)) == 'f';
    double worst = 0, scale = fl ? fmax(max_abs(b), 1e-30) : 1.0;
    for (int64_t i = 0; i < tpu_tensor_count(a); i++) {
        double d = fabs(tpu_tensor_get_f64(a, i) - tpu_tensor_get_f64(b, i));
        if (d != d) return INFINITY;
        if (d > worst) worst = d;
    }
    return worst / scale;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* A dataset path relative to the STEP_DIR: a directory of .npz shards or a .tpuds file. */
static int data_load(stepdir *sd, tpu_ctx *ctx, const char *rel, sd_data *d, int *tpuds)
{
    char path[1024];
    sd_path(path, sizeof path, sd, rel);
    *tpuds = ends_with(rel, ".tpuds");
    return *tpuds ? data_load_tpuds(sd, ctx, path, d) : data_load_npz_dir(sd, ctx, path, d);
}

static void data_release(sd_data *d, int tpuds)
{
    if (tpuds) data_free_tpuds(d);
    else data_free(d);
}

/* Loads the named set (data.<key>), compares its cached copy (data.cached.<key>) with it, cuts a batch. */
static int sd_dataset_batch(stepdir *sd, tpu_ctx *ctx, const char *key, const sd_entry *in, int nin, int rows,
                            tpu_tensor **batch)
{
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(sd->root, "data");
    const char *rel = sd_str(data, key);
    if (!rel) {
        sd_fail(sd, "data.%s: no dataset named", key);
        return 0;
    }
    sd_data d, c;
    int tp, ctp, ok = data_load(sd, ctx, rel, &d, &tp);
    const char *cached = sd_str(cJSON_GetObjectItemCaseSensitive(data, "cached"), key);
    if (ok && cached && data_load(sd, ctx, cached, &c, &ctp)) {
        data_same(sd, &d, &c, cached);
        data_release(&c, ctp);
    }
    if (ok) ok = data_batch(sd, ctx, &d, rel, in, nin, rows, batch);
    data_release(&d, tp);
    return ok;
}

static tpu_tensor **sd_run(stepdir *sd, tpu_ctx *ctx, const tpu_module *m, const char *kind, tpu_tensor *const *in,
                           int nin, int want)
{
    tpu_run_opts o = tpu_run_opts_default();
    tpu_tensor **out = NULL;
    int nout = 0;
    if (tpu_run(ctx, m, &o, in, nin, &out, &nout) != TPU_OK) {
        sd_fail(sd, "%s.hlo does not run: %s", kind, tpu_errmsg(ctx));
        return NULL;
    }
    if (nout != want) {
        sd_fail(sd, "%s.hlo gives %d results, the signature lays out %d", kind, nout, want);
        tpu_tensors_free(out, nout);
        return NULL;
    }
    return out;
}

/* Relative tolerances: step.hlo and grad+apply compute the same operations, but XLA may order a fused sum
 * differently, and Adam divides by sqrt(v) of tiny gradients. */
#define SD_STATE_TOL 1e-4
#define SD_METRIC_TOL 1e-5

/* grad then apply against step on the initial state and one real batch; eval on one eval batch. */
static void sd_check_run(stepdir *sd, tpu_ctx *ctx, tpu_module *const *prog, tpu_tensor **state)
{
    int S = sd->ns, P = sd->nparam, T = sd->nstat, M = sd->nmetric, N = sd->nb;
    tpu_tensor *batch[16] = {0}, *ebatch[16] = {0}, *hyp[16] = {0};
    tpu_tensor **in = calloc((size_t)(2 * S + N + 16 + 16), sizeof *in);
    tpu_tensor **g = NULL, **a = NULL, **st = NULL, **ev = NULL;
    int verbose = getenv("TPUSIM_TEST_VERBOSE") != NULL;
    if (!sd_dataset_batch(sd, ctx, "train", sd->batch, N, sd->B, batch)) goto done;
    for (int i = 0; i < sd->nh; i++) {
        if (tpu_tensor_new(ctx, TPU_F32, 0, NULL, &hyp[i]) != TPU_OK) goto done;
        *(float *)tpu_tensor_data(hyp[i]) = (float)sd->hyper[i].dflt;
    }
    int n = 0;   /* step(state, batch, hypers) */
    for (int i = 0; i < S; i++) in[n++] = state[i];
    for (int i = 0; i < N; i++) in[n++] = batch[i];
    for (int i = 0; i < sd->nh; i++) in[n++] = hyp[i];
    if (!(st = sd_run(sd, ctx, prog[0], "step", in, n, S + M))) goto done;
    int changed = 0;
    for (int i = 0; i < S; i++)
        if (sd->state[i].role && !strcmp(sd->state[i].role, "param")) changed |= rel_diff(st[i], state[i]) > 0;
    if (!changed) sd_fail(sd, "step.hlo changed no parameter");

    if (prog[1] && prog[2]) {
        if (!(g = sd_run(sd, ctx, prog[1], "grad", in, S + N, P + T + M))) goto done;
        n = 0;   /* apply(state with stats := new stats, grads, hypers) */
        for (int i = 0, p = 0, t = 0; i < S; i++) {
            const char *role = sd->state[i].role;
            in[n++] = !strcmp(role, "stat") ? g[P + t++] : state[i];
            if (!strcmp(role, "param") && !tensor_matches(g[p++], &sd->state[i], 0))
                sd_fail(sd, "grad.hlo: the gradient of %s has another dtype or shape", sd->state[i].name);
        }
        for (int i = 0; i < P; i++) in[n++] = g[i];
        for (int i = 0; i < sd->nh; i++) in[n++] = hyp[i];
        if (!(a = sd_run(sd, ctx, prog[2], "apply", in, n, S))) goto done;
        for (int i = 0; i < S; i++) {
            double d = rel_diff(a[i], st[i]);
            if (verbose) printf("    %s: %s grad+apply vs step %.3g\n", sd->dir, sd->state[i].name, d);
            if (!(d <= SD_STATE_TOL))
                sd_fail(sd, "new %s: grad+apply and step differ by %.3g relative", sd->state[i].name, d);
        }
        for (int j = 0; j < M; j++) {
            double d = rel_diff(g[P + T + j], st[S + j]);
            if (!(d <= SD_METRIC_TOL)) sd_fail(sd, "metric %d: grad.hlo and step.hlo differ by %.3g", j, d);
        }
    }
    if (prog[3]) {
        if (!sd_dataset_batch(sd, ctx, "eval", sd->ebatch, sd->neb, sd->E, ebatch)) goto done;
        n = 0;
        for (int i = 0; i < S; i++) in[n++] = state[i];
        for (int i = 0; i < sd->neb; i++) in[n++] = ebatch[i];
        if (!(ev = sd_run(sd, ctx, prog[3], "eval", in, n, sd->nemetric))) goto done;
        const cJSON *em = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(sd->root, "eval"), "metrics");
        for (int j = 0; j < sd->nemetric; j++) {
            double v = tpu_tensor_get_f64(ev[j], 0);
            const char *name = sd_str(cJSON_GetArrayItem(em, j), "name");
            if (!isfinite(v)) sd_fail(sd, "eval metric %s is not finite", name ? name : "?");
            if (name && !strcmp(name, "count") && v != sd->E) sd_fail(sd, "eval count %g, want %d", v, sd->E);
        }
    }
done:
    if (st) tpu_tensors_free(st, S + M);
    if (g) tpu_tensors_free(g, P + T + M);
    if (a) tpu_tensors_free(a, S);
    if (ev) tpu_tensors_free(ev, sd->nemetric);
    for (int i = 0; i < 16; i++) {
        tpu_tensor_free(batch[i]);
        tpu_tensor_free(ebatch[i]);
        tpu_tensor_free(hyp[i]);
    }
    free(in);
}

/* Every check of the file comment on one STEP_DIR; run: also execute the programs. Problems go to sd. */
static void sd_check(stepdir *sd, const char *dir, int run)
{
    if (!sd_open(sd, dir)) return;
    tpu_ctx *ctx = tpu_ctx_new();
    static const char *kinds[4] = {"step", "grad", "apply", "eval"};
    tpu_module *prog[4] = {0};
    tpu_tensor **init = NULL, **state = calloc((size_t)sd->ns + 1, sizeof *state);
    char **names = NULL;
    int ninit = 0;
    if (!sd_program(sd, "step")) sd_fail(sd, "programs.step is missing");
    for (int k = 0; k < 4; k++) prog[k] = sd_load_program(sd, ctx, kinds[k]);
    if (!sd_program(sd, "grad") != !sd_program(sd, "apply")) sd_fail(sd, "grad and apply come together");
    if (!sd_program(sd, "eval") != !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(sd->root, "eval")))
        sd_fail(sd, "programs.eval and the eval section come together");

    const char *init_file = sd_str(sd->root, "init_state");
    if (init_file) {
        char path[1024];
        sd_path(path, sizeof path, sd, init_file);
        if (tpu_npz_load(ctx, path, &init, &names, &ninit) != TPU_OK) {
            sd_fail(sd, "%s: %s", init_file, tpu_errmsg(ctx));
        } else {
            for (int i = 0; i < sd->ns; i++) {
                int k = -1;
                for (int j = 0; j < ninit && k < 0; j++)
                    if (!strcmp(names[j], sd->state[i].name)) k = j;
                if (k < 0) sd_fail(sd, "%s has no member %s", init_file, sd->state[i].name);
                else if (!tensor_matches(init[k], &sd->state[i], 0))
                    sd_fail(sd, "%s: member %s has another dtype or shape than the signature", init_file, sd->state[i].name);
                else state[i] = init[k];
            }
            if (ninit != sd->ns) sd_fail(sd, "%s has %d members for %d state entries", init_file, ninit, sd->ns);
        }
    }
    if (run && init_file && sd->problems == 0 && prog[0]) sd_check_run(sd, ctx, prog, state);

    free(state);
    if (init) tpu_tensors_free(init, ninit);
    tpu_names_free(names, ninit);
    for (int k = 0; k < 4; k++) tpu_module_free(prog[k]);
    tpu_ctx_free(ctx);
}

/* examples/<name>/ holding a signature.json, sorted. */
static int stepdirs(char dirs[][256], int cap)
{
    DIR *d = opendir("examples");
    int n = 0;
    if (!d) return 0;
    for (struct dirent *de; (de = readdir(d)) && n < cap;) {
        char p[512];
        snprintf(p, sizeof p, "examples/%s/signature.json", de->d_name);
        if (de->d_name[0] != '.' && access(p, R_OK) == 0) snprintf(dirs[n++], 256, "examples/%s", de->d_name);
    }
    closedir(d);
    qsort(dirs, (size_t)n, sizeof dirs[0], (int (*)(const void *, const void *))strcmp);
    return n;
}

TEST(stepdir_examples)
{
    char dirs[32][256];
    int n = stepdirs(dirs, 32);
    CHECK_MSG(n >= 1, "no examples/*/signature.json (run from the repository root)");
    for (int i = 0; i < n; i++) {
        stepdir sd;
        sd_check(&sd, dirs[i], 1);
        CHECK_MSG(sd.problems == 0, "%d problem(s):%s", sd.problems, sd.msg);
        sd_free(&sd);
    }
}

/* A copy of examples/digits_mlp in a temporary directory (links to its files), with `from` replaced by `to`
 * once in signature.json and, if corrupt, one byte of data/train.tpuds's first array changed. */
static int mutant(char *tmp, const char *from, const char *to, int corrupt)
{
    static const char *src = "examples/digits_mlp";
    static const char *links[] = {"step.hlo", "grad.hlo", "apply.hlo", "eval.hlo", "init_state.npz", "data/train",
                                  "data/test", "data/test.tpuds"};
    char cwd[512], a[1024], b[1024];
    strcpy(tmp, "/tmp/tpusim-stepdir-XXXXXX");
    if (!getcwd(cwd, sizeof cwd) || !mkdtemp(tmp)) return 0;
    snprintf(a, sizeof a, "%s/data", tmp);
    mkdir(a, 0755);
    for (size_t i = 0; i < sizeof links / sizeof *links; i++) {
        snprintf(a, sizeof a, "%s/%s/%s", cwd, src, links[i]);
        snprintf(b, sizeof b, "%s/%s", tmp, links[i]);
        if (symlink(a, b) != 0) return 0;
    }
    /* signature.json with one edit; data/train.tpuds copied, maybe with one byte changed */
    const char *files[2] = {"signature.json", "data/train.tpuds"};
    for (int k = 0; k < 2; k++) {
        snprintf(a, sizeof a, "%s/%s", src, files[k]);
        FILE *f = fopen(a, "rb");
        if (!f) return 0;
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        fseek(f, 0, SEEK_SET);
        char *buf = calloc((size_t)len + 1, 1);
        size_t got = fread(buf, 1, (size_t)len, f);
        fclose(f);
        snprintf(b, sizeof b, "%s/%s", tmp, files[k]);
        FILE *o = fopen(b, "wb");
        if (!o) {
            free(buf);
            return 0;
        }
        char *at = k == 0 && from ? strstr(buf, from) : NULL;
        if (at) {
            fwrite(buf, 1, (size_t)(at - buf), o);
            fputs(to, o);
            fputs(at + strlen(from), o);
        } else {
            if (k == 1 && corrupt && got > 4096) buf[4096] ^= 1;
            fwrite(buf, 1, got, o);
        }
        fclose(o);
        free(buf);
        if (k == 0 && from && !at) return 0;
    }
    return 1;
}

static void mutant_remove(const char *tmp)
{
    static const char *files[] = {"step.hlo", "grad.hlo", "apply.hlo", "eval.hlo", "init_state.npz", "data/train",
                                  "data/test", "data/test.tpuds", "data/train.tpuds", "signature.json", "data", ""};
    char p[1024];
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(p, sizeof p, "%s/%s", tmp, files[i]);
        if (remove(p) != 0 && files[i][0]) rmdir(p);
    }
}

TEST(stepdir_checker_catches_mismatches)
{
    if (access("examples/digits_mlp/signature.json", R_OK) != 0) return;
    static const struct { const char *from, *to, *want; int corrupt; } cases[] = {
        {NULL, NULL, NULL, 0},   /* the unchanged copy passes */
        {"[64, 128], \"role\": \"param\"", "[64, 127], \"role\": \"param\"", "parameter 0 is f32[64,128]", 0},
        {"\"dtype\": \"u8\"", "\"dtype\": \"s8\"", "the signature's x is s8", 0},
        {"\"kind\": \"one_cycle\"", "\"kind\": \"cyclic\"", "unknown schedule kind", 0},
        {"\"role\": \"counter\"", "\"role\": \"count\"", "unknown role", 0},
        {"\"source\": \"y\"", "\"source\": \"label\"", "no array \"label\"", 0},
        {"\"per_replica_batch\": 16,\n  \"state\"", "\"per_replica_batch\": 8,\n  \"state\"", "leading dimension", 0},
        {NULL, NULL, "differs from the .npz shards", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char tmp[64];
        REQUIRE(mutant(tmp, cases[i].from, cases[i].to, cases[i].corrupt));
        stepdir sd;
        sd_check(&sd, tmp, 1);
        if (!cases[i].want) CHECK_MSG(sd.problems == 0, "unchanged copy: %s", sd.msg);
        else CHECK_MSG(sd.problems > 0 && strstr(sd.msg, cases[i].want), "case %zu (%s): want \"%s\", got%s", i,
                       cases[i].to ? cases[i].to : "corrupt", cases[i].want, sd.msg);
        sd_free(&sd);
        mutant_remove(tmp);
    }
}
