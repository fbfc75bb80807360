/* scale.c — one per-device program on slices of several sizes (tpusim scale, docs/pods.md): for each slice
 * the timing model's step with its collectives spanning that slice, then samples/s, speed-up and efficiency
 * against the smallest slice, time to train and cost per run; beside them the same program on N GPUs of one
 * server (src/timing/gpu.c). Weak scaling keeps the per-device batch; strong scaling keeps the global batch
 * and needs the program at each per-device batch ("{b}" in its file name). Output: a text table, JSON, and an
 * SVG chart (throughput against chips on log axes with the linear ideal, and efficiency) also inside an HTML
 * page with the table. */
#include "profile/profile.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct scl_row {
    char    name[64];
    int     gpu;              /* a GPU server row */
    int     chips, devices, hosts;
    int64_t batch_dev, batch_global;
    double  step_s, coll_s;   /* predicted step and its collectives' time (hidden behind compute or not) */
    double  coll_hidden_s;    /* of which ran beside compute (not step time) */
    double  samples_s, speedup, efficiency;
    double  steps, train_s;   /* to train (0: no dataset) */
    double  price, cost;      /* per chip-hour, per run (or per 1000 steps); 0: none */
    char    bound[16];
} scl_row;

struct tpu_scale {
    tpu_scale_opts o;
    char          *program;
    int            nrows;
    scl_row       *rows;
    int            ref;       /* the smallest TPU slice */
    char          *table, *json;
};

void tpu_scale_free(tpu_scale *s)
{
    if (!s) return;
    ut_free(s->program);
    ut_free(s->rows);
    ut_free(s->table);
    ut_free(s->json);
    ut_free(s);
}

/* ---- inputs ---- */

/* The program path for a per-device batch: "{b}" replaced; without it, the path as given. */
static char *scl_path(const char *pattern, int64_t b)
{
    const char *at = strstr(pattern, "{b}");
    ut_buf buf;
    ut_buf_init(&buf);
    if (at) {
        ut_buf_put(&buf, pattern, (size_t)(at - pattern));
        ut_buf_printf(&buf, "%lld", (long long)b);
        ut_buf_puts(&buf, at + 3);
    } else {
        ut_buf_puts(&buf, pattern);
    }
    return ut_buf_take(&buf);
}

/* Price per chip- or GPU-hour from "key=price,...": the slice's name, its generation or cloud prefix, a
 * GPU's name; a plain number applies to every TPU. 0 if none. */
double prf_price(const char *prices, const char *slice, const char *gen, const char *prefix, int gpu)
{
    if (!prices || !*prices) return 0;
    if (!strchr(prices, '=')) return gpu ? 0 : strtod(prices, NULL);
    double best = 0;
    int rank = 0;   /* slice name beats generation */
    const char *p = prices;
    while (*p) {
        const char *eq = strchr(p, '='), *comma = strchr(p, ',');
        if (!eq || (comma && comma < eq)) break;
        size_t kl = (size_t)(eq - p);
        double v = strtod(eq + 1, NULL);
        if (slice && strlen(slice) == kl && !strncasecmp(p, slice, kl)) best = v, rank = 2;
        else if (rank < 2 && ((gen && strlen(gen) == kl && !strncasecmp(p, gen, kl)) ||
                              (prefix && strlen(prefix) == kl && !strncasecmp(p, prefix, kl)))) best = v, rank = 1;
        if (!comma) break;
        p = comma + 1;
    }
    return best;
}

/* Profiles the program at per-device batch b on `chip`; *r gets the model's result (kept alive in *prof). */
static tpu_status scl_profile(tpu_ctx *ctx, tpu_scale *s, const char *chip, int64_t b, tpu_module **m, tpu_profile **prof)
{
    *m = NULL;
    *prof = NULL;
    char *path = scl_path(s->program, b);
    if (!path) return ut_nomem(ctx);
    tpu_status st = tpu_module_load(ctx, path, m);
    tpu_profile_opts po = tpu_profile_opts_default();
    po.chip = chip;
    po.span_slice = s->o.span_slice >= 0;
    if (!st) st = tpu_profile_program(ctx, *m, &po, prof);
    /* without {b}: the program's own batch (the leading dimension of its largest non-state input) must match */
    int64_t have = st || strstr(s->program, "{b}") ? 0 : tpu_profile_batch(*prof);
    if (!st && have && have != b)
        st = ut_err(ctx, TPU_ERR_INVALID, "%s takes %lld samples per device; %lld are needed here: put {b} in the "
                    "program's name (step_b{b}.hlo) and make the file for each per-device batch (e.g. "
                    "examples/resnet50_pod/make_step.py %lld)", path, (long long)have, (long long)b, (long long)b);
    if (st) {
        tpu_profile_free(*prof);
        tpu_module_free(*m);
        *prof = NULL;
        *m = NULL;
    }
    ut_free(path);
    return st;
}

/* The program's batch per device when the user gave none (weak scaling): what the file says. */
static tpu_status scl_default_batch(tpu_ctx *ctx, tpu_scale *s, const char *chip, int64_t *b)
{
    if (strstr(s->program, "{b}"))
        return ut_err(ctx, TPU_ERR_INVALID, "%s names a batch ({b}): give --per-core-batch or --global-batch", s->program);
    tpu_module *m = NULL;
    tpu_profile *p = NULL;
    tpu_profile_opts po = tpu_profile_opts_default();
    po.chip = chip;
    tpu_status st = tpu_module_load(ctx, s->program, &m);
    if (!st) st = tpu_profile_program(ctx, m, &po, &p);
    if (!st) *b = tpu_profile_batch(p);
    if (!st && *b < 1) st = ut_err(ctx, TPU_ERR_INVALID, "%s: cannot tell its batch: give --per-core-batch", s->program);
    tpu_profile_free(p);
    tpu_module_free(m);
    return st;
}

/* ---- rows ---- */

static void scl_finish_row(const tpu_scale *s, scl_row *r)
{
    r->samples_s = r->step_s > 0 ? (double)r->batch_global / r->step_s : 0;
    if (s->o.dataset_size > 0 && s->o.epochs > 0 && r->batch_global > 0) {
        r->steps = ceil(s->o.dataset_size * s->o.epochs / (double)r->batch_global);
        r->train_s = r->steps * r->step_s;
    }
    double units = r->gpu ? r->devices : r->chips;
    double hours = (r->train_s > 0 ? r->train_s : 1000 * r->step_s) / 3600;
    r->cost = r->price > 0 ? hours * units * r->price : 0;
}

static tpu_status scl_tpu_row(tpu_ctx *ctx, tpu_scale *s, const char *name, scl_row *r)
{
    chp_slice sl;
    tpu_status st = chp_slice_parse(ctx, name, &sl);
    if (st) return st;
    snprintf(r->name, sizeof r->name, "%s", sl.name);
    r->chips = sl.chips;
    r->devices = sl.devices;
    r->hosts = sl.hosts;
    if (s->o.global_batch > 0) {
        if (s->o.global_batch % sl.devices)
            return ut_err(ctx, TPU_ERR_INVALID, "the global batch %lld does not split over the %d devices of %s",
                          (long long)s->o.global_batch, sl.devices, sl.name);
        r->batch_dev = s->o.global_batch / sl.devices;
    } else {
        r->batch_dev = s->o.per_core_batch;
    }
    r->batch_global = r->batch_dev * sl.devices;
    tpu_module *m = NULL;
    tpu_profile *p = NULL;
    st = scl_profile(ctx, s, name, r->batch_dev, &m, &p);
    if (st) return st;
    const tim_result *t = p->tim;
    r->step_s = t->step_s;
    r->coll_hidden_s = t->collective_hidden_s;
    r->coll_s = t->by_bound[TIM_BOUND_COLLECTIVE] + t->collective_hidden_s;
    snprintf(r->bound, sizeof r->bound, "%s", tpu_profile_bound(p));
    r->price = prf_price(s->o.prices, sl.name, sl.chip.name, sl.chip.cloud_prefix, 0);
    scl_finish_row(s, r);
    tpu_profile_free(p);
    tpu_module_free(m);
    return TPU_OK;
}

/* n GPUs of one server running the same per-device program (timed on the reference slice's compile). */
static tpu_status scl_gpu_row(tpu_ctx *ctx, tpu_scale *s, const tim_gpu *g, int n, scl_row *r)
{
    snprintf(r->name, sizeof r->name, "%dx %s", n, g->name);
    r->gpu = 1;
    r->devices = n;
    r->hosts = 1;
    if (s->o.global_batch > 0) {
        if (s->o.global_batch % n)
            return ut_err(ctx, TPU_ERR_INVALID, "the global batch %lld does not split over %d GPUs", (long long)s->o.global_batch, n);
        r->batch_dev = s->o.global_batch / n;
    } else {
        r->batch_dev = s->o.per_core_batch;
    }
    r->batch_global = r->batch_dev * n;
    tpu_module *m = NULL;
    tpu_profile *p = NULL;
    tpu_status st = scl_profile(ctx, s, s->rows[s->ref].name, r->batch_dev, &m, &p);
    if (st) return st;
    r->step_s = tim_gpu_step_s(p->tim, g, n, &r->coll_s);
    snprintf(r->bound, sizeof r->bound, "roofline");
    r->price = prf_price(s->o.prices, g->name, NULL, NULL, 1);
    scl_finish_row(s, r);
    tpu_profile_free(p);
    tpu_module_free(m);
    return TPU_OK;
}

/* The comma-separated names of a list (at most 64). */
static int scl_split(const char *list, char names[][64], int max)
{
    int n = 0;
    const char *p = list;
    while (p && *p && n < max) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        while (len && isspace((unsigned char)*p)) p++, len--;
        if (len >= 64) len = 63;
        if (len) {
            memcpy(names[n], p, len);
            names[n][len] = 0;
            n++;
        }
        p = c ? c + 1 : NULL;
    }
    return n;
}

tpu_status tpu_scale_run(tpu_ctx *ctx, const tpu_scale_opts *o, tpu_scale **out)
{
    *out = NULL;
    if (!o || !o->program || !o->slices) return ut_err(ctx, TPU_ERR_INVALID, "tpu_scale_run needs a program and slices");
    char slices[64][64], gpus[16][64];
    int ns = scl_split(o->slices, slices, 64);
    int ng = o->gpus && !strcmp(o->gpus, "none") ? 0 : scl_split(o->gpus ? o->gpus : "V100,A100,H100", gpus, 16);
    if (ns < 1) return ut_err(ctx, TPU_ERR_INVALID, "no slices given (e.g. v2-8,v2-32,v2-128)");
    if (o->per_core_batch > 0 && o->global_batch > 0)
        return ut_err(ctx, TPU_ERR_INVALID, "give --per-core-batch (weak scaling) or --global-batch (strong), not both");
    for (int k = 0; k < ng; k++)
        if (!tim_gpu_find(gpus[k]))
            return ut_err(ctx, TPU_ERR_INVALID, "unknown GPU '%s': tpusim knows V100, A100 and H100", gpus[k]);
    tpu_scale *s = ut_calloc(1, sizeof *s);
    if (!s || !(s->program = ut_strdup(o->program)) || !(s->rows = ut_calloc((size_t)(ns + ng), sizeof *s->rows))) {
        tpu_scale_free(s);
        return ut_nomem(ctx);
    }
    s->o = *o;
    s->o.program = s->program;
    if (s->o.gpu_count < 1) s->o.gpu_count = 8;
    tpu_status st = TPU_OK;
    if (s->o.global_batch <= 0 && s->o.per_core_batch <= 0) st = scl_default_batch(ctx, s, slices[0], &s->o.per_core_batch);
    for (int i = 0; !st && i < ns; i++) {
        st = scl_tpu_row(ctx, s, slices[i], &s->rows[i]);
        if (st) ut_err_prefix(ctx, "%s", slices[i]);
        s->nrows++;
    }
    s->ref = 0;
    for (int i = 1; !st && i < ns; i++)
        if (s->rows[i].chips < s->rows[s->ref].chips) s->ref = i;
    for (int k = 0; !st && k < ng; k++) {
        st = scl_gpu_row(ctx, s, tim_gpu_find(gpus[k]), s->o.gpu_count, &s->rows[s->nrows]);
        s->nrows++;
    }
    if (st) {
        tpu_scale_free(s);
        return st;
    }
    const scl_row *ref = &s->rows[s->ref];
    for (int i = 0; i < s->nrows; i++) {
        scl_row *r = &s->rows[i];
        r->speedup = ref->samples_s > 0 ? r->samples_s / ref->samples_s : 0;
        double units = r->gpu ? 0 : (double)r->chips / ref->chips;
        r->efficiency = units > 0 ? r->speedup / units : 0;
    }
    *out = s;
    return TPU_OK;
}

/* ---- text, JSON ---- */

static void scl_time(char *b, size_t n, double s)
{
    if (s <= 0) snprintf(b, n, "-");
    else if (s >= 3600) snprintf(b, n, "%.2f h", s / 3600);
    else if (s >= 60) snprintf(b, n, "%.1f min", s / 60);
    else if (s >= 1) snprintf(b, n, "%.2f s", s);
    else if (s >= 1e-3) snprintf(b, n, "%.2f ms", s * 1e3);
    else snprintf(b, n, "%.1f us", s * 1e6);
}

const char *tpu_scale_table(tpu_scale *s)
{
    if (s->table) return s->table;
    ut_buf b;
    ut_buf_init(&b);
    int weak = s->o.global_batch <= 0;
    if (weak) ut_buf_printf(&b, "%s: weak scaling, %lld samples per device per step\n", s->program, (long long)s->o.per_core_batch);
    else ut_buf_printf(&b, "%s: strong scaling, a global batch of %lld samples per step\n", s->program, (long long)s->o.global_batch);
    int train = s->o.dataset_size > 0 && s->o.epochs > 0;
    ut_buf_printf(&b, "%-14s %6s %7s %5s %6s %8s %10s %20s %12s %9s %10s %11s %10s\n", "slice", "chips", "devices", "hosts",
                  "b/dev", "global", "step", "collectives", "samples/s", "speed-up", "efficiency", train ? "to train" : "",
                  s->o.prices ? (train ? "cost/run" : "cost/1k") : "");
    for (int i = 0; i < s->nrows; i++) {
        const scl_row *r = &s->rows[i];
        char st[24], co[24], tt[24], coll[40], chips[16], eff[16], cost[24];
        scl_time(st, sizeof st, r->step_s);
        scl_time(co, sizeof co, r->coll_s);
        scl_time(tt, sizeof tt, r->train_s);
        /* the share of the step the collectives take, or how much of them ran beside compute */
        if (r->coll_hidden_s > 0)
            snprintf(coll, sizeof coll, "%s (%.0f%% hidden)", co, r->coll_s > 0 ? 100 * r->coll_hidden_s / r->coll_s : 0);
        else
            snprintf(coll, sizeof coll, "%s (%.0f%%)", co, r->step_s > 0 ? 100 * r->coll_s / r->step_s : 0);
        if (r->gpu) snprintf(chips, sizeof chips, "-");
        else snprintf(chips, sizeof chips, "%d", r->chips);
        if (r->gpu) snprintf(eff, sizeof eff, "-");
        else snprintf(eff, sizeof eff, "%.1f%%", 100 * r->efficiency);
        if (r->cost > 0) snprintf(cost, sizeof cost, "$%.2f", r->cost);
        else snprintf(cost, sizeof cost, "%s", s->o.prices ? "-" : "");
        ut_buf_printf(&b, "%-14s %6s %7d %5d %6lld %8lld %10s %20s %12.0f %8.2fx %10s %11s %10s\n", r->name, chips, r->devices,
                      r->hosts, (long long)r->batch_dev, (long long)r->batch_global, st, coll, r->samples_s, r->speedup, eff,
                      train ? tt : "", cost);
    }
    ut_buf_printf(&b, "speed-up: samples/s against %s; efficiency: samples/s per chip against it (100%%: linear)\n",
                  s->rows[s->ref].name);
    if (s->nrows > 0 && s->rows[s->nrows - 1].gpu)
        ut_buf_printf(&b, "GPU rows: the same per-device program as a roofline per op (published peaks, NVLink ring "
                      "all-reduce within one server; src/timing/gpu.c)\n");
    s->table = ut_buf_take(&b);
    return s->table ? s->table : "";
}

const char *tpu_scale_json(tpu_scale *s)
{
    if (s->json) return s->json;
    ut_buf b;
    ut_buf_init(&b);
    ut_buf_printf(&b, "{\"program\": \"%s\", \"scaling\": \"%s\", \"reference\": \"%s\", \"rows\": [", s->program,
                  s->o.global_batch > 0 ? "strong" : "weak", s->rows[s->ref].name);
    for (int i = 0; i < s->nrows; i++) {
        const scl_row *r = &s->rows[i];
        ut_buf_printf(&b, "%s\n  {\"name\": \"%s\", \"gpu\": %s, \"chips\": %d, \"devices\": %d, \"hosts\": %d, "
                      "\"batch_per_device\": %lld, \"global_batch\": %lld, \"step_time_s\": %.9g, \"collective_s\": %.9g, "
                      "\"collective_hidden_s\": %.9g, \"samples_per_s\": %.9g, \"speedup\": %.6g, \"efficiency\": %.6g, \"steps_to_train\": %.0f, "
                      "\"time_to_train_s\": %.9g, \"price_per_hour\": %.6g, \"cost\": %.6g, \"bound\": \"%s\"}",
                      i ? "," : "", r->name, r->gpu ? "true" : "false", r->chips, r->devices, r->hosts,
                      (long long)r->batch_dev, (long long)r->batch_global, r->step_s, r->coll_s, r->coll_hidden_s, r->samples_s,
                      r->speedup, r->efficiency, r->steps, r->train_s, r->price, r->cost, r->bound);
    }
    ut_buf_puts(&b, "\n]}\n");
    s->json = ut_buf_take(&b);
    return s->json ? s->json : "";
}

/* ---- the chart ---- */

static double scl_log_pos(double v, double lo, double hi, double a, double b)
{
    if (v <= 0 || lo <= 0 || hi <= lo) return a;
    return a + (b - a) * (log(v) - log(lo)) / (log(hi) - log(lo));
}

/* Throughput against chips (GPUs at their count) on log axes, the linear ideal through the reference. */
static void scl_svg_throughput(const tpu_scale *s, ut_buf *b, double x0, double y0, double w, double h)
{
    double xlo = 1e30, xhi = 0, ylo = 1e30, yhi = 0;
    const scl_row *ref = &s->rows[s->ref];
    for (int i = 0; i < s->nrows; i++) {
        const scl_row *r = &s->rows[i];
        double x = r->gpu ? r->devices : r->chips, ideal = r->gpu ? 0 : ref->samples_s * r->chips / ref->chips;
        if (x < xlo) xlo = x;
        if (x > xhi) xhi = x;
        if (r->samples_s > 0 && r->samples_s < ylo) ylo = r->samples_s;
        if (r->samples_s > yhi) yhi = r->samples_s;
        if (ideal > yhi) yhi = ideal;
    }
    xlo /= 1.5, xhi *= 1.5, ylo /= 2, yhi *= 2;
    ut_buf_printf(b, "<g id=\"throughput\"><rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"#ffffff\" stroke=\"#999\"/>\n",
                  x0, y0, w, h);
    ut_buf_printf(b, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"14\">samples/s (log) against chips (log)</text>\n", x0, y0 - 8);
    /* the linear ideal */
    double ix0 = scl_log_pos(ref->chips, xlo, xhi, x0, x0 + w), iy0 = scl_log_pos(ref->samples_s, ylo, yhi, y0 + h, y0);
    double big = xhi, ix1 = scl_log_pos(big, xlo, xhi, x0, x0 + w);
    double iy1 = scl_log_pos(ref->samples_s * big / ref->chips, ylo, yhi, y0 + h, y0);
    ut_buf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888888\" stroke-dasharray=\"6,4\"/>\n",
                  ix0, iy0, ix1, iy1);
    ut_buf_printf(b, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\" fill=\"#666\">dashed: linear from %s</text>\n",
                  x0 + 8, y0 + 16, ref->name);
    ut_buf_printf(b, "<circle cx=\"%.0f\" cy=\"%.0f\" r=\"5\" fill=\"#1f77b4\"/><text x=\"%.0f\" y=\"%.0f\" font-size=\"11\">"
                  "TPU slices</text><rect x=\"%.0f\" y=\"%.0f\" width=\"9\" height=\"9\" fill=\"#ff7f0e\"/><text x=\"%.0f\" "
                  "y=\"%.0f\" font-size=\"11\">GPU servers (roofline; x = GPUs)</text>\n", x0 + 12, y0 + 30, x0 + 22, y0 + 34,
                  x0 + 8, y0 + 41, x0 + 22, y0 + 49);
    /* axis labels: samples/s at each power of ten, chips at each slice */
    for (double v = pow(10, floor(log10(ylo))); v <= yhi; v *= 10) {
        if (v < ylo) continue;
        double y = scl_log_pos(v, ylo, yhi, y0 + h, y0);
        ut_buf_printf(b, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#eee\"/><text x=\"%.0f\" y=\"%.1f\" "
                      "font-size=\"10\" text-anchor=\"end\">%.0f</text>\n", x0, y, x0 + w, y, x0 - 4, y + 3, v);
    }
    for (int i = 0; i < s->nrows; i++)
        if (!s->rows[i].gpu)
            ut_buf_printf(b, "<text x=\"%.1f\" y=\"%.0f\" font-size=\"10\" text-anchor=\"middle\">%d</text>\n",
                          scl_log_pos(s->rows[i].chips, xlo, xhi, x0, x0 + w), y0 + h + 14, s->rows[i].chips);
    /* the slices: a line through them */
    ut_buf_puts(b, "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"3\" points=\"");
    for (int i = 0; i < s->nrows; i++)
        if (!s->rows[i].gpu)
            ut_buf_printf(b, "%.1f,%.1f ", scl_log_pos(s->rows[i].chips, xlo, xhi, x0, x0 + w),
                          scl_log_pos(s->rows[i].samples_s, ylo, yhi, y0 + h, y0));
    ut_buf_puts(b, "\"/>\n");
    for (int i = 0; i < s->nrows; i++) {
        const scl_row *r = &s->rows[i];
        double x = scl_log_pos(r->gpu ? r->devices : r->chips, xlo, xhi, x0, x0 + w);
        double y = scl_log_pos(r->samples_s, ylo, yhi, y0 + h, y0);
        if (r->gpu)
            ut_buf_printf(b, "<rect class=\"gpu\" x=\"%.1f\" y=\"%.1f\" width=\"10\" height=\"10\" fill=\"#ff7f0e\"/>"
                          "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">%s</text>\n", x - 5, y - 5, x + 8, y + 4, r->name);
        else
            ut_buf_printf(b, "<circle class=\"tpu\" cx=\"%.1f\" cy=\"%.1f\" r=\"6\" fill=\"#1f77b4\"/>"
                          "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">%s</text>\n", x, y, x + 8, y - 8, r->name);
    }
    ut_buf_puts(b, "</g>\n");
}

/* Efficiency bars per slice. */
static void scl_svg_efficiency(const tpu_scale *s, ut_buf *b, double x0, double y0, double w, double h)
{
    int n = 0;
    double top = 1.0;
    for (int i = 0; i < s->nrows; i++)
        if (!s->rows[i].gpu) {
            n++;
            if (s->rows[i].efficiency > top) top = s->rows[i].efficiency;
        }
    ut_buf_printf(b, "<g id=\"efficiency\"><rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"#ffffff\" stroke=\"#999\"/>\n",
                  x0, y0, w, h);
    ut_buf_printf(b, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"14\">scaling efficiency (100%% = linear)</text>\n", x0, y0 - 8);
    double full = y0 + h - h * 1.0 / (top * 1.1);
    ut_buf_printf(b, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#888888\" stroke-dasharray=\"6,4\"/>\n",
                  x0, full, x0 + w, full);
    double bw = n ? w / n : w;
    int k = 0;
    for (int i = 0; i < s->nrows; i++) {
        const scl_row *r = &s->rows[i];
        if (r->gpu) continue;
        double bh = h * r->efficiency / (top * 1.1), x = x0 + k * bw + bw * 0.15;
        ut_buf_printf(b, "<rect class=\"eff\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#2ca02c\"/>"
                      "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">%.0f%%</text><text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">%s</text>\n",
                      x, y0 + h - bh, bw * 0.7, bh, x, y0 + h - bh - 4, 100 * r->efficiency, x, y0 + h + 14, r->name);
        k++;
    }
    ut_buf_puts(b, "</g>\n");
}

static void scl_svg(const tpu_scale *s, ut_buf *b)
{
    ut_buf_puts(b, "<svg id=\"scaling\" xmlns=\"http://www.w3.org/2000/svg\" width=\"1000\" height=\"440\" "
                   "font-family=\"sans-serif\">\n<rect width=\"1000\" height=\"440\" fill=\"#fafafa\"/>\n");
    scl_svg_throughput(s, b, 60, 50, 520, 340);
    scl_svg_efficiency(s, b, 640, 50, 330, 340);
    ut_buf_puts(b, "</svg>\n");
}

static tpu_status scl_write(tpu_ctx *ctx, ut_buf *b, const char *path)
{
    if (b->failed) {
        ut_buf_free(b);
        return ut_nomem(ctx);
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        ut_buf_free(b);
        return ut_err(ctx, TPU_ERR_IO, "%s: cannot write", path);
    }
    size_t n = fwrite(b->data, 1, b->len, f);
    int bad = n != b->len || fclose(f) != 0;
    ut_buf_free(b);
    return bad ? ut_err(ctx, TPU_ERR_IO, "%s: write failed", path) : TPU_OK;
}

tpu_status tpu_scale_write_svg(tpu_ctx *ctx, tpu_scale *s, const char *path)
{
    ut_buf b;
    ut_buf_init(&b);
    scl_svg(s, &b);
    return scl_write(ctx, &b, path);
}

tpu_status tpu_scale_write_html(tpu_ctx *ctx, tpu_scale *s, const char *path)
{
    ut_buf b;
    ut_buf_init(&b);
    ut_buf_puts(&b, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>tpusim scale</title>\n<style>body{font-family:"
                    "sans-serif;margin:20px} pre{background:#f4f4f4;padding:10px}</style></head><body>\n<h1>Scaling: ");
    ut_buf_html_esc(&b, s->program);
    ut_buf_puts(&b, "</h1>\n");
    scl_svg(s, &b);
    ut_buf_puts(&b, "<h2>Table</h2>\n<pre id=\"table\">");
    ut_buf_html_esc(&b, tpu_scale_table(s));
    ut_buf_puts(&b, "</pre>\n<p>Predicted by tpusim's timing model (docs/timing.md, docs/pods.md): each slice runs the "
                    "same per-device program, its collectives spanning the slice on its torus.</p>\n</body></html>\n");
    return scl_write(ctx, &b, path);
}
