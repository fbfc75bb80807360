/* trn_report.c — what the trainer says at the end: step.hlo profiled on the slice with the measured input
 * rate and steps per execution, plus the runtime's all-reduce time; the profile (HTML, trace), the memory
 * viewer and the advisor's pointers. Also the learning-rate finder (docs/step_dir.md section 8) with its
 * JSON, JSON lines and SVG plot (the same picture as python/tpusim/lr_find.py draws). */
#include "train/trn_trainer.h"
#include "profile/profile.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static char *trn_join2(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = ut_malloc(a + b + 2);
    if (p) snprintf(p, a + b + 2, "%s%s%s", dir, a && dir[a - 1] == '/' ? "" : "/", name);
    return p;
}

tpu_status tpu_trainer_finish(tpu_ctx *ctx, tpu_trainer *tr, tpu_train_result *res)
{
    const trn_sig *s = tr->sig;
    memset(res, 0, sizeof *res);
    res->steps = tr->step;
    res->replicas = tr->R;
    res->global_batch = s->B * tr->R;
    res->loss = tr->mlast[s->loss_idx];
    res->wall_s = tr->wall_s;
    res->steps_per_s = tr->wall_s > 0 ? (double)tr->steps_run / tr->wall_s : 0;
    res->input_samples_per_s = tr->pipe_busy_s > 0 ? tr->pipe_samples / tr->pipe_busy_s : 0;
    res->metrics_jsonl = tr->f_metrics;
    tpu_profile_free(tr->prof);
    tr->prof = NULL;
    /* one device's program; the pipeline feeds every replica, so each device gets 1/R of its rate */
    double rate = tr->o.input_rate > 0 ? tr->o.input_rate : res->input_samples_per_s;
    tpu_profile_opts po = tpu_profile_opts_default();
    po.chip = tr->slice;
    po.steps_per_exec = tr->o.steps_per_exec;
    po.steps = tr->o.steps_per_exec > 1 ? (tr->o.steps_per_exec * 2 < 64 ? tr->o.steps_per_exec * 2 : 64) : 2;
    po.batch = s->B;
    po.input_rate = rate > 0 ? rate / tr->R : 0;
    tpu_status st = tpu_profile_program(ctx, tr->prog[TRN_STEP], &po, &tr->prof);
    if (st) return st;
    prf_profile *p = tr->prof;
    res->sim_program_s = tpu_profile_step_time(p);
    res->sim_allreduce_s = tr->ici_s;
    /* the profile, its HTML and trace show the step the trainer predicts: the program and the all-reduce */
    prf_add_runtime_collective(p, "all-reduce (gradients, runtime)", tr->ici_s, (double)tr->ici_bytes);
    res->sim_step_s = res->sim_program_s + res->sim_allreduce_s;   /* = tpu_profile_step_time(p) now */
    res->mxu_utilization = tpu_profile_mxu_utilization(p);
    res->bound = tpu_profile_bound(p);
    res->input_bound = p->tim->idle_s > 0;
    const char *adv = tpu_profile_advice(p);
    ut_free(tr->advice);
    tr->advice = ut_strdup(adv ? adv : "");
    res->advice = tr->advice;
    if (!tr->model_dir) return TPU_OK;
    ut_free(tr->f_profile);
    ut_free(tr->f_trace);
    ut_free(tr->f_memory);
    tr->f_profile = trn_join2(tr->model_dir, "profile.html");
    tr->f_trace = trn_join2(tr->model_dir, "trace.json");
    tr->f_memory = trn_join2(tr->model_dir, "memory.html");
    if (!tr->f_profile || !tr->f_trace || !tr->f_memory) return ut_nomem(ctx);
    if ((st = tpu_profile_write_html(ctx, p, tr->f_profile))) return st;
    res->profile_html = tr->f_profile;
    if ((st = tpu_profile_write_trace(ctx, p, tr->f_trace))) return st;
    res->trace_json = tr->f_trace;
    tpu_memory_free(tr->mem);
    tr->mem = NULL;
    tpu_memory_opts mo = tpu_memory_opts_default();
    mo.chip = tr->slice;
    if ((st = tpu_memory_plan(ctx, tr->prog[TRN_STEP], &mo, &tr->mem))) return st;
    if ((st = tpu_memory_write_html(ctx, tr->mem, tr->f_memory))) return st;
    res->memory_html = tr->f_memory;
    return TPU_OK;
}

/* ---- the learning-rate finder ---- */

typedef struct trn_point {
    double lr, loss;
} trn_point;

static void trn_smooth(const trn_point *p, int n, double *out)
{
    double avg = 0;
    for (int i = 0; i < n; i++) {
        avg = 0.95 * avg + 0.05 * p[i].loss;
        out[i] = avg / (1 - pow(0.95, i + 1));
    }
}

/* python/tpusim/lr_find.suggest: the steepest descent of the smoothed loss over log(lr) (np.gradient),
 * the first 5 and last 3 points left out. 0 when there are too few points. */
static double trn_suggest(const trn_point *p, int n, const double *sm)
{
    int lo = 5, hi = n - 3;
    if (hi - lo < 3) return 0;
    double best = INFINITY, lr = 0;
    for (int i = lo; i < hi; i++) {
        double g;
        if (i == lo) g = (sm[i + 1] - sm[i]) / (log(p[i + 1].lr) - log(p[i].lr));
        else if (i == hi - 1) g = (sm[i] - sm[i - 1]) / (log(p[i].lr) - log(p[i - 1].lr));
        else {
            double hs = log(p[i].lr) - log(p[i - 1].lr), hd = log(p[i + 1].lr) - log(p[i].lr);
            g = (hs * hs * sm[i + 1] + (hd * hd - hs * hs) * sm[i] - hd * hd * sm[i - 1]) / (hs * hd * (hd + hs));
        }
        if (g < best) {
            best = g;
            lr = p[i].lr;
        }
    }
    return lr;
}

/* Python's json writes NaN and Infinity as bare tokens; its reader takes them back. */
static void trn_pynum(ut_buf *b, double v)
{
    if (isnan(v)) ut_buf_puts(b, "NaN");
    else if (isinf(v)) ut_buf_puts(b, v > 0 ? "Infinity" : "-Infinity");
    else ut_buf_printf(b, "%.17g", v);
}

static double trn_nice_step(double span, int n)
{
    double step = pow(10, floor(log10(span / n)));
    static const double mult[] = {1, 2, 5, 10};
    for (int i = 0; i < 4; i++)
        if (span / (step * mult[i]) <= n) return step * mult[i];
    return step * 10;
}

static void trn_svg(ut_buf *b, const trn_point *pts, int n, double suggestion, const char *title)
{
    trn_point *p = ut_calloc((size_t)n + 1, sizeof *p);
    double *sm = ut_calloc((size_t)n + 1, sizeof *sm);
    int k = 0;
    for (int i = 0; p && i < n; i++)
        if (isfinite(pts[i].loss) && pts[i].lr > 0) p[k++] = pts[i];
    if (!p || !sm || k < 2) {
        ut_free(p);
        ut_free(sm);
        ut_buf_puts(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"640\" height=\"60\"><text x=\"10\" y=\"30\">"
                       "too few finite points to plot</text></svg>\n");
        return;
    }
    trn_smooth(p, k, sm);
    const double W = 640, H = 400, L = 70, R = 20, T = 40, B = 50;
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, ymaxsm = -INFINITY, ymaxraw = -INFINITY;
    for (int i = 0; i < k; i++) {
        x0 = fmin(x0, log10(p[i].lr));
        x1 = fmax(x1, log10(p[i].lr));
        y0 = fmin(y0, fmin(p[i].loss, sm[i]));
        ymaxsm = fmax(ymaxsm, sm[i]);
        ymaxraw = fmax(ymaxraw, p[i].loss);
    }
    /* clipped so that a final blow-up does not flatten the curve */
    double y1 = fmin(fmax(ymaxsm, sm[0]) * 1.05, ymaxraw);
    if (y1 <= y0) y1 = y0 + 1;
    double xs = fmax(x1 - x0, 1e-12);
#define X(lr) (L + (log10(lr) - x0) / xs * (W - L - R))
#define Y(v) (T + (1.0 - (fmin(fmax((v), y0), y1) - y0) / (y1 - y0)) * (H - T - B))
    ut_buf_printf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" viewBox=\"0 0 %g %g\" "
                     "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
                     "<text x=\"%g\" y=\"22\" font-size=\"15\">%s</text>\n", W, H, W, H, L, title);
    for (int e = (int)floor(x0); e <= (int)ceil(x1); e++) {
        if (e < x0 - 1e-9 || e > x1 + 1e-9) continue;
        double x = X(pow(10, e));
        ut_buf_printf(b, "<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" y2=\"%g\" stroke=\"#ddd\"/>\n"
                         "<text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\">1e%d</text>\n", x, T, x, H - B, x, H - B + 16, e);
    }
    double st = trn_nice_step(y1 - y0, 5);
    for (double v = ceil(y0 / st) * st; v <= y1 + 1e-12 * (y1 - y0); v += st) {
        double y = Y(v);
        ut_buf_printf(b, "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"#ddd\"/>\n"
                         "<text x=\"%g\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", L, y, W - R, y, L - 6, y + 4, v);
    }
    ut_buf_printf(b, "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"#444\"/>\n", L, T, W - L - R, H - T - B);
    for (int c = 0; c < 2; c++) {
        ut_buf_printf(b, "<polyline fill=\"none\" %s points=\"", c ? "stroke=\"#c33\" stroke-width=\"2\"" : "stroke=\"#9ab\" stroke-width=\"1\"");
        for (int i = 0; i < k; i++) ut_buf_printf(b, "%s%.1f,%.1f", i ? " " : "", X(p[i].lr), Y(c ? sm[i] : p[i].loss));
        ut_buf_puts(b, "\"/>\n");
    }
    if (suggestion > 0) {
        double x = X(suggestion);
        ut_buf_printf(b, "<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" y2=\"%g\" stroke=\"#26a\" stroke-dasharray=\"4,3\"/>\n"
                         "<text x=\"%.1f\" y=\"%g\" fill=\"#26a\">suggested %.3g</text>\n", x, T, x, H - B, x + 4, T + 14, suggestion);
    }
    ut_buf_printf(b, "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">learning rate (log scale)</text>\n", (L + W - R) / 2, H - 12);
    ut_buf_printf(b, "<text x=\"16\" y=\"%g\" transform=\"rotate(-90 16 %g)\" text-anchor=\"middle\">training loss</text>\n",
                  (T + H - B) / 2, (T + H - B) / 2);
    ut_buf_printf(b, "<text x=\"%g\" y=\"%g\" fill=\"#9ab\">raw</text><text x=\"%g\" y=\"%g\" fill=\"#c33\">smoothed</text>\n"
                     "</svg>\n", L + 8, H - B - 8, L + 40, H - B - 8);
#undef X
#undef Y
    ut_free(p);
    ut_free(sm);
}

static char *trn_with_ext(const char *path, const char *ext)
{
    size_t n = strlen(path);
    if (n > 5 && !strcmp(path + n - 5, ".json")) n -= 5;
    size_t m = n + strlen(ext) + 1;
    char *p = ut_malloc(m);
    if (p) snprintf(p, m, "%.*s%s", (int)n, path, ext);
    return p;
}

tpu_status tpu_train_lr_find(tpu_ctx *ctx, const char *step_dir, const tpu_train_opts *opts, double lr_min,
                             double lr_max, const char *out_json, double *suggestion)
{
    if (suggestion) *suggestion = 0;
    tpu_train_opts o = opts ? *opts : tpu_train_opts_default();
    if (o.steps <= 0) o.steps = 100;
    if (!(lr_min > 0) || !(lr_max > lr_min))
        return ut_err(ctx, TPU_ERR_INVALID, "learning-rate finder: wants 0 < --lr-min < --lr-max (got %g, %g)", lr_min, lr_max);
    if (o.steps < 2) return ut_err(ctx, TPU_ERR_INVALID, "learning-rate finder: wants --steps >= 2");
    o.resume = 0;
    o.model_dir = NULL;   /* from init_state, never a checkpoint; nothing of a training run is written */
    o.eval_data = "none";
    o.steps_per_exec = 1;
    tpu_trainer *tr = NULL;
    tpu_status st = tpu_trainer_new(ctx, step_dir, &o, &tr);
    if (st) return st;
    const trn_sig *s = tr->sig;
    if (s->lr_hyper < 0) {
        tpu_trainer_free(tr);
        return ut_err(ctx, TPU_ERR_INVALID, "%s: no learning-rate hyper (lr_scaling.hypers[0] or 'learning_rate')", s->path);
    }
    tr->lr_find = 1;
    int n = (int)(o.steps > 1000000 ? 1000000 : o.steps);
    trn_point *pts = ut_calloc((size_t)n, sizeof *pts);
    double *m1 = ut_calloc((size_t)s->nmetric + 1, sizeof *m1);
    if (!pts || !m1) st = ut_nomem(ctx);
    trn_pipe_cfg pc = {tr->train, s, tr->R, tr->seed, s->shuffle, 0, n, tr->o.prefetch, tr->o.input_delay_s, 0, 0};
    if (!st) st = trn_pipe_start(ctx, &pc, &tr->pipe);
    double avg = 0, best = INFINITY;
    int np = 0;
    if (!st && o.log)
        fprintf(o.log, "learning-rate finder: %s from %g to %g over at most %d steps, %d replica%s\n", s->hyper[s->lr_hyper].name,
                lr_min, lr_max, n, tr->R, tr->R == 1 ? "" : "s");
    for (int i = 0; !st && i < n; i++) {
        double lr = lr_min * pow(lr_max / lr_min, (double)i / (double)(n - 1));
        tr->lr_find_value = lr;
        trn_batch *b = NULL;
        st = trn_pipe_next(ctx, tr->pipe, &b);
        if (!st) st = trn_run_step(ctx, tr, b, m1);
        trn_batch_free(b);
        if (st) break;
        double loss = m1[s->loss_idx];
        pts[np].lr = lr;
        pts[np++].loss = loss;
        avg = 0.95 * avg + 0.05 * loss;
        best = fmin(best, avg / (1 - pow(0.95, i + 1)));
        if (o.log) fprintf(o.log, "  step %3d  %s %-10.3g loss %.5g\n", i, s->hyper[s->lr_hyper].name, (double)(float)lr, loss);
        if (!isfinite(loss) || (i >= 10 && loss > 4 * best)) break;
    }
    double sug = 0;
    if (!st) {
        double *sm = ut_calloc((size_t)np + 1, sizeof *sm);
        if (!sm) st = ut_nomem(ctx);
        else {
            trn_smooth(pts, np, sm);
            sug = trn_suggest(pts, np, sm);
            ut_free(sm);
        }
    }
    /* the JSON the Python side reads, one point per line, and the plot */
    char *jl = out_json ? trn_with_ext(out_json, ".jsonl") : NULL, *sv = out_json ? trn_with_ext(out_json, ".svg") : NULL;
    if (!st && out_json && (!jl || !sv)) st = ut_nomem(ctx);
    if (!st && out_json) {
        ut_buf b, l, g;
        ut_buf_init(&b);
        ut_buf_init(&l);
        ut_buf_init(&g);
        ut_buf_printf(&b, "{\"hyper\": \"%s\", \"replicas\": %d, \"per_replica_batch\": %lld, \"suggestion\": ",
                      s->hyper[s->lr_hyper].name, tr->R, (long long)s->B);
        if (sug > 0) trn_pynum(&b, sug);
        else ut_buf_puts(&b, "null");
        ut_buf_puts(&b, ",\n \"points\": [");
        for (int i = 0; i < np; i++) {
            ut_buf_printf(&b, "%s\n  {\"step\": %d, \"lr\": ", i ? "," : "", i);
            trn_pynum(&b, pts[i].lr);
            ut_buf_puts(&b, ", \"loss\": ");
            trn_pynum(&b, pts[i].loss);
            ut_buf_puts(&b, "}");
            ut_buf_printf(&l, "{\"step\": %d, \"lr\": ", i);
            trn_pynum(&l, pts[i].lr);
            ut_buf_puts(&l, ", \"loss\": ");
            trn_pynum(&l, pts[i].loss);
            ut_buf_puts(&l, "}\n");
        }
        ut_buf_puts(&b, "]}\n");
        char title[300];
        snprintf(title, sizeof title, "learning-rate finder: %.200s, %d replica%s", s->name, tr->R, tr->R == 1 ? "" : "s");
        trn_svg(&g, pts, np, sug, title);
        if (b.failed || l.failed || g.failed) st = ut_nomem(ctx);
        if (!st) st = trn_write_atomic(ctx, out_json, b.data, b.len);
        if (!st) st = trn_write_atomic(ctx, jl, l.data ? l.data : "", l.len);
        if (!st) st = trn_write_atomic(ctx, sv, g.data, g.len);
        ut_buf_free(&b);
        ut_buf_free(&l);
        ut_buf_free(&g);
    }
    if (!st && o.log) {
        if (sug > 0) fprintf(o.log, "suggested %s: %.3g (steepest descent of the smoothed loss)\n", s->hyper[s->lr_hyper].name, sug);
        else fprintf(o.log, "no suggestion: too few points\n");
        if (out_json) fprintf(o.log, "wrote %s, %s, %s\n", out_json, jl, sv);
    }
    if (suggestion) *suggestion = sug;
    ut_free(jl);
    ut_free(sv);
    ut_free(pts);
    ut_free(m1);
    tpu_trainer_free(tr);
    return st;
}
