/* report.c — the HTML profile report: the summary, a bar of time by bound, the top ops as bars, and the
 * advisor's pointers, as a page a person would rather look at than read. */
#include "profile.h"

#include <string.h>

static void rp_esc(ut_buf *b, const char *s)
{
    for (; s && *s; s++) {
        if (*s == '<') ut_buf_puts(b, "&lt;");
        else if (*s == '>') ut_buf_puts(b, "&gt;");
        else if (*s == '&') ut_buf_puts(b, "&amp;");
        else if (*s == '"') ut_buf_puts(b, "&quot;");
        else ut_buf_putc(b, *s);
    }
}

static const char *rp_color[TIM_BOUND_COUNT] = {"#4c78a8", "#72b7b2", "#f58518", "#e45756", "#bab0ac", "#b279a2", "#d3d3d3"};

tpu_status prf_html(tpu_ctx *ctx, const prf_profile *p, ut_buf *b)
{
    const tim_result *r = p->tim;
    ut_buf_puts(b, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>tpusim profile: ");
    rp_esc(b, p->m->name);
    ut_buf_puts(b, "</title><style>body{font-family:Helvetica,Arial,sans-serif;margin:24px;color:#222;max-width:1200px}"
                   "pre{background:#f6f6f6;padding:12px;border-radius:6px;overflow-x:auto}h2{margin-top:28px}"
                   ".k{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px}</style></head><body>\n<h1>");
    rp_esc(b, p->m->name);
    ut_buf_printf(b, " on %s</h1>\n<p>Predicted step time <b>%.4g ms</b>, MXU utilization <b>%.1f%%</b>, bound: <b>%s</b>.</p>\n",
                  p->slice.name, r->step_s * 1e3, 100 * r->mxu_util, tim_bound_name(r->bound));
    /* time by bound: one stacked bar */
    ut_buf_puts(b, "<h2>Where the step goes</h2>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1000\" height=\"70\" "
                   "font-family=\"Helvetica,Arial,sans-serif\" font-size=\"12\">\n");
    double x = 0, W = 1000;
    for (int k = 0; k < TIM_BOUND_COUNT; k++) {
        if (r->by_bound[k] <= 0 || r->step_s <= 0) continue;
        double w = W * r->by_bound[k] / r->step_s;
        ut_buf_printf(b, "<rect x=\"%.1f\" y=\"5\" width=\"%.1f\" height=\"34\" fill=\"%s\"><title>%s: %.4g ms</title></rect>\n", x, w,
                      rp_color[k], tim_bound_name((tim_bound)k), r->by_bound[k] * 1e3);
        if (w > 70)
            ut_buf_printf(b, "<text x=\"%.1f\" y=\"27\" fill=\"white\">%s %.0f%%</text>\n", x + 5, tim_bound_name((tim_bound)k),
                          100 * r->by_bound[k] / r->step_s);
        x += w;
    }
    ut_buf_puts(b, "</svg>\n<div>");
    for (int k = 0; k < TIM_BOUND_COUNT; k++)
        ut_buf_printf(b, "<span class=\"k\" style=\"background:%s\"></span>%s", rp_color[k], tim_bound_name((tim_bound)k));
    ut_buf_puts(b, "</div>\n");
    /* top ops */
    int top = r->nops < 20 ? r->nops : 20, shown = 0;
    double maxt = 0;
    for (int i = 0; i < r->nops; i++) {
        const tim_op *t = &r->ops[p->order[i]];
        if (t->op->kind != CMP_CONTROL && t->time_s * t->count > maxt) maxt = t->time_s * t->count;
    }
    ut_buf_printf(b, "<h2>Top ops by time</h2>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1100\" height=\"%d\" "
                     "font-family=\"Helvetica,Arial,sans-serif\" font-size=\"12\">\n", 24 * top + 10);
    for (int i = 0; i < r->nops && shown < top; i++) {
        const tim_op *t = &r->ops[p->order[i]];
        if (t->op->kind == CMP_CONTROL) continue;
        char lbl[256];
        prf_op_label(t, lbl, sizeof lbl);
        if (strlen(lbl) > 60) strcpy(lbl + 57, "...");
        double tt = t->time_s * t->count, w = maxt > 0 ? 560 * tt / maxt : 0;
        double y = 5 + 24 * shown;
        ut_buf_printf(b, "<text x=\"0\" y=\"%.1f\">", y + 14);
        rp_esc(b, lbl);
        ut_buf_printf(b, "</text><rect x=\"430\" y=\"%.1f\" width=\"%.1f\" height=\"18\" fill=\"%s\"/>"
                         "<text x=\"%.1f\" y=\"%.1f\">%.4g ms, %s, MXU %.0f%%</text>\n",
                      y, w < 1 ? 1 : w, rp_color[t->bound], 436 + w, y + 14, tt * 1e3, tim_bound_name(t->bound), 100 * t->mxu_util);
        shown++;
    }
    ut_buf_puts(b, "</svg>\n<h2>Advice</h2>\n<pre>");
    ut_buf adv;
    ut_buf_init(&adv);
    tpu_status st = prf_advise(ctx, p, &adv);
    if (!st) rp_esc(b, adv.data ? adv.data : "");
    ut_buf_free(&adv);
    ut_buf_puts(b, "</pre>\n<h2>Summary</h2>\n<pre>");
    rp_esc(b, tpu_profile_summary((tpu_profile *)p, 30));
    ut_buf_puts(b, "</pre>\n</body></html>\n");
    if (st) return st;
    return b->failed ? ut_nomem(ctx) : TPU_OK;
}
