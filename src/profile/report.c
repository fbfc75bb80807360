/* report.c — the HTML profile report: headline figures, then charts a person would rather look at than read
 * (all inline SVG, no scripts, no network): where the step goes (time by bound), a timeline of one step,
 * the top ops, a roofline of every op, time by opcode; then the advisor's pointers and the text summary. */
#include "profile.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *rp_color[TIM_BOUND_COUNT] = {"#4c78a8", "#72b7b2", "#f58518", "#e45756", "#bab0ac", "#b279a2", "#d3d3d3"};

static void rp_time(char *b, size_t n, double s)
{
    if (s >= 1) snprintf(b, n, "%.3g s", s);
    else if (s >= 1e-3) snprintf(b, n, "%.3g ms", s * 1e3);
    else snprintf(b, n, "%.3g us", s * 1e6);
}

static void rp_svg_open(ut_buf *b, const char *id, int w, int h)
{
    ut_buf_printf(b, "<svg id=\"%s\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
                     "font-family=\"Helvetica,Arial,sans-serif\" font-size=\"12\">\n", id, w, h, w, h);
}

static void rp_legend(ut_buf *b)
{
    ut_buf_puts(b, "<div class=\"legend\">");
    for (int k = 0; k < TIM_BOUND_COUNT; k++)
        ut_buf_printf(b, "<span class=\"k\" style=\"background:%s\"></span>%s", rp_color[k], tim_bound_name((tim_bound)k));
    ut_buf_puts(b, "</div>\n");
}

/* Where the step goes: one stacked bar of time by bound. */
static void rp_bound_bar(ut_buf *b, const tim_result *r)
{
    ut_buf_puts(b, "<h2>Where the step goes</h2>\n");
    rp_svg_open(b, "bounds", 1000, 60);
    double x = 0, W = 1000;
    char t[32];
    for (int k = 0; k < TIM_BOUND_COUNT; k++) {
        if (r->by_bound[k] <= 0 || r->step_s <= 0) continue;
        double w = W * r->by_bound[k] / r->step_s;
        rp_time(t, sizeof t, r->by_bound[k]);
        ut_buf_printf(b, "<rect class=\"bound\" x=\"%.1f\" y=\"5\" width=\"%.1f\" height=\"40\" fill=\"%s\"><title>%s: %s (%.1f%%)</title></rect>\n",
                      x, w, rp_color[k], tim_bound_name((tim_bound)k), t, 100 * r->by_bound[k] / r->step_s);
        if (w > 90)
            ut_buf_printf(b, "<text x=\"%.1f\" y=\"30\" fill=\"white\" font-weight=\"bold\">%s %.0f%%</text>\n", x + 6,
                          tim_bound_name((tim_bound)k), 100 * r->by_bound[k] / r->step_s);
        x += w;
    }
    ut_buf_puts(b, "</svg>\n");
    rp_legend(b);
}

/* A timeline of one step: every op as a bar at its start, coloured by its bound; loops as bands below. */
static void rp_timeline(ut_buf *b, const prf_profile *p)
{
    const tim_result *r = p->tim;
    double W = 1000, total = r->step_s > 0 ? r->step_s : 1;
    ut_buf_puts(b, "<h2>One step on a device</h2>\n<p class=\"note\">Ops in schedule order (loops unrolled into their trip "
                   "counts), host launch first, then any wait for input. Hover for details.</p>\n");
    rp_svg_open(b, "timeline", 1000, 110);
    ut_buf_printf(b, "<rect x=\"0\" y=\"10\" width=\"%.2f\" height=\"40\" fill=\"%s\"><title>host launch</title></rect>\n",
                  W * r->host_s / total, rp_color[TIM_BOUND_HOST]);
    double cur = r->host_s, pend_x = -1, pend_w = 0;
    int pend_b = -1, drawn = 0;
    char t[32], lbl[200];
    for (int i = 0; i < r->nops; i++) {
        const tim_op *op = &r->ops[i];
        if (op->op->kind == CMP_CONTROL) {
            double span = 0;
            for (int k = i + 1; k < r->nops && r->ops[k].depth > op->depth; k++)
                if (r->ops[k].op->kind != CMP_CONTROL) span += r->ops[k].time_s * r->ops[k].count;
            if (W * span / total >= 2) {
                prf_op_label(op, lbl, sizeof lbl);
                rp_time(t, sizeof t, span);
                ut_buf_printf(b, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"8\" fill=\"#888\" opacity=\"0.6\"><title>", W * cur / total,
                              56 + 10 * (op->depth > 3 ? 3 : op->depth), W * span / total);
                ut_buf_html_esc(b, lbl);
                ut_buf_printf(b, " x%.0f: %s</title></rect>\n", op->trips, t);
            }
            continue;
        }
        double dur = op->time_s * op->count;
        if (dur <= 0) continue;
        double x = W * cur / total, w = W * dur / total;
        cur += dur;
        if (w < 0.5 && drawn > 4000) continue;
        if (w < 0.5) {
            /* merge slivers of the same bound into one bar */
            if (pend_b == (int)op->bound && x - (pend_x + pend_w) < 0.01) {
                pend_w += w;
                continue;
            }
            if (pend_b >= 0 && pend_w > 0.05)
                ut_buf_printf(b, "<rect x=\"%.2f\" y=\"10\" width=\"%.2f\" height=\"40\" fill=\"%s\"/>\n", pend_x, pend_w, rp_color[pend_b]);
            pend_b = (int)op->bound;
            pend_x = x;
            pend_w = w;
            continue;
        }
        prf_op_label(op, lbl, sizeof lbl);
        rp_time(t, sizeof t, dur);
        ut_buf_printf(b, "<rect class=\"op\" x=\"%.2f\" y=\"10\" width=\"%.2f\" height=\"40\" fill=\"%s\"><title>", x, w, rp_color[op->bound]);
        ut_buf_html_esc(b, lbl);
        ut_buf_printf(b, ": %s, %s</title></rect>\n", t, tim_bound_name(op->bound));
        drawn++;
    }
    if (pend_b >= 0 && pend_w > 0.05)
        ut_buf_printf(b, "<rect x=\"%.2f\" y=\"10\" width=\"%.2f\" height=\"40\" fill=\"%s\"/>\n", pend_x, pend_w, rp_color[pend_b]);
    if (p->extra_s > 0) {   /* the runtime's collective after the program's ops */
        rp_time(t, sizeof t, p->extra_s);
        ut_buf_printf(b, "<rect class=\"op\" x=\"%.2f\" y=\"10\" width=\"%.2f\" height=\"40\" fill=\"%s\"><title>", W * cur / total,
                      W * p->extra_s / total, rp_color[TIM_BOUND_COLLECTIVE]);
        ut_buf_html_esc(b, p->extra_name);
        ut_buf_printf(b, ": %s, collective (run by the runtime)</title></rect>\n", t);
    }
    if (r->idle_s > 0)
        ut_buf_printf(b, "<rect x=\"%.2f\" y=\"10\" width=\"%.2f\" height=\"40\" fill=\"%s\"><title>waiting for input</title></rect>\n",
                      W * (r->host_s + r->device_s) / total, W * r->idle_s / total, rp_color[TIM_BOUND_IDLE]);
    /* axis */
    for (int k = 0; k <= 4; k++) {
        rp_time(t, sizeof t, total * k / 4);
        double x = W * k / 4;
        ut_buf_printf(b, "<line x1=\"%.1f\" y1=\"50\" x2=\"%.1f\" y2=\"54\" stroke=\"#444\"/><text x=\"%.1f\" y=\"104\" text-anchor=\"%s\">%s</text>\n",
                      x, x, x, k == 0 ? "start" : k == 4 ? "end" : "middle", t);
    }
    ut_buf_puts(b, "</svg>\n");
}

/* The top ops as horizontal bars. */
static void rp_top_ops(ut_buf *b, const prf_profile *p)
{
    const tim_result *r = p->tim;
    int top = 20, shown = 0;
    double maxt = 0;
    for (int i = 0; i < r->nops; i++) {
        const tim_op *t = &r->ops[p->order[i]];
        if (t->op->kind != CMP_CONTROL && t->time_s * t->count > maxt) maxt = t->time_s * t->count;
    }
    int n = 0;
    for (int i = 0; i < r->nops && n < top; i++)
        if (r->ops[p->order[i]].op->kind != CMP_CONTROL && r->ops[p->order[i]].time_s > 0) n++;
    ut_buf_puts(b, "<h2>Top ops by time</h2>\n");
    rp_svg_open(b, "topops", 1100, 24 * n + 10);
    char t[32];
    for (int i = 0; i < r->nops && shown < n; i++) {
        const tim_op *op = &r->ops[p->order[i]];
        if (op->op->kind == CMP_CONTROL || op->time_s <= 0) continue;
        char lbl[256];
        prf_op_label(op, lbl, sizeof lbl);
        if (strlen(lbl) > 60) strcpy(lbl + 57, "...");
        double tt = op->time_s * op->count, w = maxt > 0 ? 380 * tt / maxt : 0;
        double y = 5 + 24 * shown;
        rp_time(t, sizeof t, tt);
        ut_buf_printf(b, "<text x=\"0\" y=\"%.1f\">", y + 14);
        ut_buf_html_esc(b, lbl);
        ut_buf_printf(b, "</text><rect class=\"topop\" x=\"430\" y=\"%.1f\" width=\"%.1f\" height=\"18\" fill=\"%s\"/>"
                         "<text x=\"%.1f\" y=\"%.1f\">%s (%.1f%%), %s, MXU %.0f%%%s</text>\n",
                      y, w < 1 ? 1 : w, rp_color[op->bound], 436 + w, y + 14, t, r->step_s > 0 ? 100 * tt / r->step_s : 0,
                      tim_bound_name(op->bound), 100 * op->mxu_util, op->count > 1.5 ? " (in a loop)" : "");
        shown++;
    }
    ut_buf_puts(b, "</svg>\n");
}

/* A roofline: every op at (FLOPs per HBM byte, FLOP/s achieved), the device's peak and bandwidth as lines. */
static void rp_roofline(ut_buf *b, const prf_profile *p)
{
    const tim_result *r = p->tim;
    const chp_chip *c = &p->slice.chip;
    double peak = tim_mxu_peak_flops(c);
    double bw = c->hbm_bw * c->cores_per_device / (c->cores_per_chip ? c->cores_per_chip : 1);
    if (peak <= 0 || bw <= 0) return;
    double W = 700, H = 380, L = 70, B = 40;
    double x0 = -2, x1 = 5, y0 = log10(peak) - 6, y1 = log10(peak) + 0.3;   /* log10 axes */
#define RX(v) (L + (W - L - 10) * ((v) - x0) / (x1 - x0))
#define RY(v) (H - B - (H - B - 10) * ((v) - y0) / (y1 - y0))
    ut_buf_puts(b, "<h2>Roofline</h2>\n<p class=\"note\">Each op at its arithmetic intensity (FLOPs per HBM byte) and the "
                   "FLOP/s it achieves; circle area is its share of the step. Ops under the sloped line are memory bound.</p>\n");
    rp_svg_open(b, "roofline", (int)W, (int)H);
    ut_buf_printf(b, "<rect x=\"%.0f\" y=\"10\" width=\"%.0f\" height=\"%.0f\" fill=\"#fafafa\" stroke=\"#ccc\"/>\n", L, W - L - 10, H - B - 10);
    for (int e = (int)ceil(x0); e <= (int)x1; e++)
        ut_buf_printf(b, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">1e%d</text>\n", RX(e), H - B + 16, e);
    for (int e = (int)ceil(y0); e <= (int)floor(y1); e++)
        ut_buf_printf(b, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">1e%d</text>\n", L - 4, RY(e) + 4, e);
    ut_buf_printf(b, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">FLOPs per HBM byte</text>\n", (L + W) / 2, H - 6);
    ut_buf_printf(b, "<text x=\"14\" y=\"%.0f\" transform=\"rotate(-90 14 %.0f)\" text-anchor=\"middle\">FLOP/s</text>\n", H / 2, H / 2);
    /* the roof: min(peak, bw * intensity) */
    double ridge = log10(peak / bw);
    double xs = y0 - log10(bw) > x0 ? y0 - log10(bw) : x0;
    ut_buf_printf(b, "<polyline class=\"roof\" fill=\"none\" stroke=\"#333\" stroke-width=\"2\" points=\"%.1f,%.1f %.1f,%.1f %.1f,%.1f\"/>\n",
                  RX(xs), RY(xs + log10(bw)), RX(ridge), RY(log10(peak)), RX(x1), RY(log10(peak)));
    ut_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\">MXU peak %.3g TFLOP/s</text>\n", RX(ridge) + 6, RY(log10(peak)) + 14, peak / 1e12);
    ut_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" transform=\"rotate(-38 %.1f %.1f)\">HBM %.3g %s</text>\n", RX(x0 + 0.6),
                  RY(x0 + 0.6 + log10(bw)) - 6, RX(x0 + 0.6), RY(x0 + 0.6 + log10(bw)) - 6, bw >= 1e12 ? bw / 1e12 : bw / 1e9,
                  bw >= 1e12 ? "TB/s" : "GB/s");
    int drawn = 0;
    for (int i = 0; i < r->nops && drawn < 600; i++) {
        const tim_op *op = &r->ops[p->order[i]];
        if (op->op->kind == CMP_CONTROL || op->time_s <= 0 || op->flops <= 0) continue;
        double ai = op->hbm_bytes > 0 ? op->flops / (double)op->hbm_bytes : pow(10, x1);
        double fs = op->flops / op->time_s;
        double lx = log10(ai), ly = log10(fs);
        if (lx < x0) lx = x0;
        if (lx > x1) lx = x1;
        if (ly < y0) ly = y0;
        if (ly > y1) ly = y1;
        double share = r->step_s > 0 ? op->time_s * op->count / r->step_s : 0;
        double rad = 2 + 40 * sqrt(share);
        char lbl[200], t[32];
        prf_op_label(op, lbl, sizeof lbl);
        rp_time(t, sizeof t, op->time_s * op->count);
        ut_buf_printf(b, "<circle class=\"pt\" cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" fill=\"%s\" fill-opacity=\"0.6\" stroke=\"%s\"><title>",
                      RX(lx), RY(ly), rad, rp_color[op->bound], rp_color[op->bound]);
        ut_buf_html_esc(b, lbl);
        ut_buf_printf(b, ": %.3g FLOP/B, %.3g TFLOP/s, %s</title></circle>\n", ai, fs / 1e12, t);
        drawn++;
    }
    ut_buf_puts(b, "</svg>\n");
#undef RX
#undef RY
}

/* Time by opcode of the ops' roots. */
static void rp_by_opcode(ut_buf *b, const prf_profile *p)
{
    const tim_result *r = p->tim;
    double t_of[HLO_OP_COUNT];
    memset(t_of, 0, sizeof t_of);
    for (int i = 0; i < r->nops; i++) {
        const tim_op *op = &r->ops[i];
        if (op->op->kind == CMP_CONTROL || (unsigned)op->root->op >= HLO_OP_COUNT) continue;
        t_of[op->root->op] += op->time_s * op->count;
    }
    int idx[12], n = 0;
    for (int k = 0; k < 12; k++) {
        int best = -1;
        for (int o = 0; o < HLO_OP_COUNT; o++) {
            int used = 0;
            for (int q = 0; q < n; q++) used |= idx[q] == o;
            if (!used && t_of[o] > 0 && (best < 0 || t_of[o] > t_of[best])) best = o;
        }
        if (best < 0) break;
        idx[n++] = best;
    }
    if (!n) return;
    ut_buf_puts(b, "<h2>Time by op (root opcode of each fused op)</h2>\n");
    rp_svg_open(b, "byopcode", 800, 22 * n + 10);
    char t[32];
    for (int k = 0; k < n; k++) {
        double w = t_of[idx[0]] > 0 ? 500 * t_of[idx[k]] / t_of[idx[0]] : 0, y = 5 + 22 * k;
        rp_time(t, sizeof t, t_of[idx[k]]);
        ut_buf_printf(b, "<text x=\"0\" y=\"%.0f\">%s</text><rect x=\"180\" y=\"%.0f\" width=\"%.1f\" height=\"16\" fill=\"#4c78a8\"/>"
                         "<text x=\"%.1f\" y=\"%.0f\">%s (%.1f%%)</text>\n",
                      y + 13, hlo_op_name((hlo_op)idx[k]), y, w < 1 ? 1 : w, 186 + w, y + 13, t,
                      r->step_s > 0 ? 100 * t_of[idx[k]] / r->step_s : 0);
    }
    ut_buf_puts(b, "</svg>\n");
}

tpu_status prf_html(tpu_ctx *ctx, const prf_profile *p, ut_buf *b)
{
    const tim_result *r = p->tim;
    char t[32], hb[32], cap[32];
    ut_buf_puts(b, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>tpusim profile: ");
    ut_buf_html_esc(b, p->m->name);
    ut_buf_puts(b, "</title><style>body{font-family:Helvetica,Arial,sans-serif;margin:24px;color:#222;max-width:1150px}"
                   "pre{background:#f6f6f6;padding:12px;border-radius:6px;overflow-x:auto;font-size:12px}h2{margin-top:30px}"
                   ".k{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px}.note{color:#666;font-size:13px}"
                   ".cards{display:flex;flex-wrap:wrap;gap:12px}.card{background:#f0f4f8;border-radius:8px;padding:10px 16px;min-width:150px}"
                   ".card b{display:block;font-size:22px}.bad{color:#c0392b}</style></head><body>\n<h1>");
    ut_buf_html_esc(b, p->m->name);
    ut_buf_puts(b, " on ");
    ut_buf_html_esc(b, p->slice.name);
    ut_buf_puts(b, "</h1>\n<p class=\"note\">Predicted by the tpusim timing model (shapes only; docs/timing.md) for one device's "
                   "program.</p>\n<div class=\"cards\">\n");
    rp_time(t, sizeof t, r->step_s);
    ut_buf_printf(b, "<div class=\"card\" id=\"step\">step time<b>%s</b></div>\n", t);
    ut_buf_printf(b, "<div class=\"card\">FLOP/s<b>%.3g T</b>%.1f%% of peak</div>\n", r->flops_per_s / 1e12,
                  r->peak_flops > 0 ? 100 * r->flops_per_s / r->peak_flops : 0);
    ut_buf_printf(b, "<div class=\"card\">MXU utilization<b>%.1f%%</b></div>\n", 100 * r->mxu_util);
    ut_buf_printf(b, "<div class=\"card\">bound<b>%s</b></div>\n", tim_bound_name(r->bound));
    cmp_fmt_bytes(hb, sizeof hb, p->mem.used);
    cmp_fmt_bytes(cap, sizeof cap, p->mem.capacity);
    ut_buf_printf(b, "<div class=\"card\">HBM use<b%s>%s</b>of %s%s</div>\n", p->mem.fits ? "" : " class=\"bad\"", hb, cap,
                  p->mem.fits ? "" : " (does not fit)");
    if (r->idle_s > 0) {
        rp_time(t, sizeof t, r->idle_s);
        ut_buf_printf(b, "<div class=\"card\">input-bound<b class=\"bad\">%.0f%%</b>%s idle per step</div>\n", 100 * r->idle_s / r->step_s, t);
    }
    ut_buf_puts(b, "</div>\n");
    rp_bound_bar(b, r);
    rp_timeline(b, p);
    rp_top_ops(b, p);
    rp_roofline(b, p);
    rp_by_opcode(b, p);
    ut_buf_puts(b, "<h2>Advice</h2>\n<pre id=\"advice\">");
    ut_buf adv;
    ut_buf_init(&adv);
    tpu_status st = prf_advise(ctx, p, &adv);
    if (!st) ut_buf_html_esc(b, adv.data ? adv.data : "");
    ut_buf_free(&adv);
    ut_buf_puts(b, "</pre>\n<h2>Summary</h2>\n<pre id=\"summary\">");
    ut_buf sum;
    ut_buf_init(&sum);
    prf_summary(p, 30, &sum);
    ut_buf_html_esc(b, sum.data ? sum.data : "");
    b->failed |= sum.failed;
    ut_buf_free(&sum);
    ut_buf_puts(b, "</pre>\n</body></html>\n");
    if (st) return st;
    return b->failed ? ut_nomem(ctx) : TPU_OK;
}
