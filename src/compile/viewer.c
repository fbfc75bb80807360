/* viewer.c — the memory viewer: an SVG picture of HBM in use across the program (padded and unpadded, with
 * arguments as the floor), the peak marked, the capacity line, and the live ranges of the largest buffers
 * named underneath; plus an HTML page that embeds it with the report. */
#include "compile.h"
#include "memory.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Live bytes at each schedule position of the entry plan (temps, outputs, sub-plan reservations). */
static int vw_live(const cmp_program *p, int64_t **pad_out, int64_t **unp_out)
{
    const cmp_plan *e = p->entry;
    int np = e->nops + 1;
    int64_t *pad = ut_calloc((size_t)np, sizeof *pad), *unp = ut_calloc((size_t)np, sizeof *unp);
    if (!pad || !unp) {
        ut_free(pad);
        ut_free(unp);
        return 0;
    }
    int eid = e->comp->id;
    for (int v = 0; v < p->nvalues; v++) {
        const cmp_value *val = &p->values[v];
        if (val->alias >= 0 || val->comp != eid || (val->kind != CMP_V_TEMP && val->kind != CMP_V_OUTPUT)) continue;
        for (int q = val->start < 0 ? 0 : val->start; q <= val->end && q < np; q++) {
            pad[q] += val->padded;
            unp[q] += val->unpadded;
        }
    }
    for (int k = 0; k < e->nops; k++)
        if (e->ops[k].kind == CMP_CONTROL) {
            pad[k] += e->ops[k].sub_peak;
            unp[k] += e->ops[k].sub_peak;
        }
    *pad_out = pad;
    *unp_out = unp;
    return 1;
}

static const char *vw_colors[] = {"#e45756", "#f58518", "#54a24b", "#b279a2", "#ff9da6",
                                  "#9d755d", "#72b7b2", "#eeca3b", "#4c78a8", "#bab0ac"};

tpu_status cmp_memory_svg(tpu_ctx *ctx, ut_buf *b, const cmp_program *p, const cmp_memory_stats *ms)
{
    int64_t *pad, *unp;
    if (!vw_live(p, &pad, &unp)) return ut_nomem(ctx);
    const cmp_plan *e = p->entry;
    int np = e->nops + 1;
    int64_t base_pad = ms->args_padded + ms->consts_padded, base_unp = ms->args_unpadded + ms->consts_padded;
    int64_t top = 0;
    for (int q = 0; q < np; q++)
        if (base_pad + pad[q] > top) top = base_pad + pad[q];
    /* the y axis shows the capacity line unless the program is far below it, where it would flatten the
     * picture: then the axis fits the program and the capacity is named in the corner */
    int cap_on_chart = top >= ms->capacity / 4;
    int64_t ymax = cap_on_chart && ms->capacity > top ? ms->capacity : top;
    ymax = (int64_t)((double)ymax * 1.08) + 1;
    int nbars = ms->nlargest < 10 ? ms->nlargest : 10;
    const double W = 1100, L = 90, R = 20, T = 60, H = 300, BAR = 22;
    double plot_w = W - L - R;
    double height = T + H + 50 + nbars * BAR + 40;
    char s1[32], s2[32], s3[32];
    ut_buf_printf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
                     "font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n", W, height, W, height);
    ut_buf_puts(b, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
    cmp_fmt_bytes(s1, sizeof s1, ms->used);
    cmp_fmt_bytes(s2, sizeof s2, ms->capacity);
    ut_buf_puts(b, "<text x=\"20\" y=\"24\" font-size=\"17\" font-weight=\"bold\">HBM in use across ");
    ut_buf_html_esc(b, p->m->name);
    ut_buf_printf(b, " on %s — peak %s of %s %s</text>\n", p->chip->name, s1, s2, ms->fits ? "(fits)" : "(DOES NOT FIT)");
    ut_buf_printf(b, "<text x=\"20\" y=\"44\" fill=\"#555\">x: the program's %d ops in schedule order; y: bytes per "
                     "core. Grey floor: arguments; dark: the program's data; light: padding added by (8,128) tiling.</text>\n",
                  e->nops);
    /* axes and grid */
    for (int t = 0; t <= 5; t++) {
        double y = T + H - H * t / 5.0;
        cmp_fmt_bytes(s1, sizeof s1, (int64_t)((double)ymax * t / 5.0));
        ut_buf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", L, y, W - R, y);
        ut_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#444\">%s</text>\n", L - 6, y + 4, s1);
    }
    /* schedule position q is the band [VX(q), VX(q+1)); at most 10 labelled ticks, each a distinct op */
    int nt = np < 10 ? np : 10;
    for (int t = 0; t < nt; t++) {
        int q = (int)((int64_t)t * np / nt);
        ut_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#444\">%d</text>\n",
                      L + plot_w * (q + 0.5) / np, T + H + 16, q);
    }
#define VX(q) (L + plot_w * (double)(q) / (double)np)
#define VY(v) (T + H - H * (double)(v) / (double)ymax)
    /* steps, down-sampled to at most 1500 columns keeping each column's maximum (the peak stays visible);
     * drawn back to front: padding over the data, the data over the arguments' floor, the floor last */
    int cols = np < 1500 ? np : 1500;
    const char *layers[3] = {"#aec7e8", "#1f77b4", "#c7c7c7"};
    for (int layer = 0; layer < 3; layer++) {
        ut_buf_printf(b, "<polygon fill=\"%s\" stroke=\"none\" points=\"%.1f,%.1f", layers[layer], VX(0), VY(0));
        for (int c = 0; c < cols; c++) {
            int q0 = (int)((int64_t)c * np / cols), q1 = (int)((int64_t)(c + 1) * np / cols);
            if (q1 <= q0) q1 = q0 + 1;
            int64_t m = 0;
            for (int q = q0; q < q1 && q < np; q++) {
                int64_t v = layer == 2 ? base_pad : layer == 0 ? base_pad + pad[q] : base_pad + unp[q];
                if (v > m) m = v;
            }
            ut_buf_printf(b, " %.1f,%.1f %.1f,%.1f", VX(q0), VY(m), VX(q1), VY(m));
        }
        ut_buf_printf(b, " %.1f,%.1f\"/>\n", VX(np), VY(0));
    }
    /* capacity and peak */
    cmp_fmt_bytes(s1, sizeof s1, ms->capacity);
    if (cap_on_chart) {
        ut_buf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#d62728\" stroke-width=\"2\" "
                         "stroke-dasharray=\"6,4\"/>\n", L, VY(ms->capacity), W - R, VY(ms->capacity));
        ut_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#d62728\">HBM capacity %s</text>\n", W - R - 4,
                      VY(ms->capacity) - 5, s1);
    } else {
        ut_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#d62728\">HBM capacity %s: far above "
                         "this chart</text>\n", W - R - 4, T - 4, s1);
    }
    int pk = e->peak_pos < np ? e->peak_pos : 0;
    double px = VX(pk + 0.5);
    cmp_fmt_bytes(s1, sizeof s1, base_pad + pad[pk]);
    cmp_fmt_bytes(s3, sizeof s3, base_unp + unp[pk]);
    ut_buf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\" stroke-width=\"1.5\"/>\n", px, T,
                  px, T + H);
    ut_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-weight=\"bold\">peak %s (unpadded %s) at op %d",
                  px + (px > W / 2 ? -6 : 6), T + 14, px > W / 2 ? "end" : "start", s1, s3, pk);
    if (pk < e->nops) {
        ut_buf_puts(b, ": ");
        ut_buf_html_esc(b, e->ops[pk].root->name);
    }
    ut_buf_puts(b, "</text>\n");
    /* largest buffers: live ranges */
    double y0 = T + H + 40;
    ut_buf_printf(b, "<text x=\"20\" y=\"%.1f\" font-weight=\"bold\">Largest buffers (live range, padded size, "
                     "expansion from padding)</text>\n", y0);
    for (int i = 0; i < nbars; i++) {
        const cmp_value *val = &p->values[ms->largest[i]];
        double y = y0 + 10 + i * BAR;
        int a = val->comp == e->comp->id ? (val->start < 0 ? 0 : val->start) : 0;
        int z = val->comp == e->comp->id ? val->end : e->nops;
        double x0 = VX(a), x1 = VX(z < np ? z + 1 : np);
        if (x1 - x0 < 2) x1 = x0 + 2;
        ut_buf_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" opacity=\"0.85\"/>\n", x0, y,
                      x1 - x0, BAR - 6, vw_colors[i % 10]);
        cmp_fmt_bytes(s1, sizeof s1, val->padded);
        /* the label: after the bar, before it, or over it, wherever it fits (about 6.6 px a character) */
        ut_buf lbl;
        ut_buf_init(&lbl);
        ut_buf_printf(&lbl, "%s ", s1);
        cmp_print_tiled_shape(&lbl, p->chip, &val->shape);
        if (val->unpadded > 0 && val->padded > val->unpadded) ut_buf_printf(&lbl, " (%.1fx)", (double)val->padded / (double)val->unpadded);
        const char *on = hlo_meta(val->def, "op_name");
        ut_buf_printf(&lbl, " — %s", on ? on : val->def->name);
        double tw = 6.6 * (double)(lbl.len < 200 ? lbl.len : 200);
        double tx = x1 + 4;
        const char *anchor = "start";
        if (tx + tw > W - 4) {
            if (x0 - 4 - tw >= 4) {
                tx = x0 - 4;
                anchor = "end";
            } else {
                tx = x0 + 4;
            }
        }
        ut_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\">", tx, y + BAR - 10, anchor);
        ut_buf_html_esc(b, lbl.data ? lbl.data : "");
        ut_buf_free(&lbl);
        ut_buf_puts(b, "</text>\n");
    }
#undef VX
#undef VY
    ut_buf_puts(b, "</svg>\n");
    ut_free(pad);
    ut_free(unp);
    return b->failed ? ut_nomem(ctx) : TPU_OK;
}

tpu_status cmp_memory_html(tpu_ctx *ctx, ut_buf *b, const cmp_program *p, const cmp_memory_stats *ms)
{
    ut_buf_puts(b, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>tpusim memory: ");
    ut_buf_html_esc(b, p->m->name);
    ut_buf_puts(b, "</title>\n<style>body{font-family:Helvetica,Arial,sans-serif;margin:24px;color:#222}"
                   "pre{background:#f6f6f6;padding:12px;border-radius:6px;overflow-x:auto}"
                   "table{border-collapse:collapse}td,th{padding:4px 10px;border-bottom:1px solid #ddd;text-align:right}"
                   "th{text-align:left}</style></head><body>\n<h1>Memory: ");
    ut_buf_html_esc(b, p->m->name);
    ut_buf_printf(b, " on %s</h1>\n", p->chip->name);
    char a[32], o[32], t[32], c[32], r[32], u[32];
    cmp_fmt_bytes(a, sizeof a, ms->args_padded);
    cmp_fmt_bytes(o, sizeof o, ms->outputs_padded);
    cmp_fmt_bytes(t, sizeof t, ms->temp_peak);
    cmp_fmt_bytes(c, sizeof c, ms->capacity);
    cmp_fmt_bytes(r, sizeof r, ms->reserved);
    cmp_fmt_bytes(u, sizeof u, ms->used);
    ut_buf_printf(b, "<p><b>%s</b>: uses %s of %s HBM per device (one %s).</p>\n", ms->fits ? "Fits" : "Does not fit", u, c,
                  chp_device_desc(p->chip));
    ut_buf_printf(b, "<table><tr><th>arguments</th><td>%s</td></tr><tr><th>outputs</th><td>%s</td></tr>"
                     "<tr><th>temporaries + outputs (peak)</th><td>%s</td></tr><tr><th>reserved</th><td>%s</td></tr></table>\n",
                  a, o, t, r);
    tpu_status st = cmp_memory_svg(ctx, b, p, ms);
    if (st) return st;
    ut_buf_puts(b, "<h2>Report</h2>\n<pre>");
    ut_buf rep;
    ut_buf_init(&rep);
    cmp_memory_text(&rep, p, ms);
    ut_buf_html_esc(b, rep.data);
    ut_buf_free(&rep);
    ut_buf_puts(b, "</pre>\n</body></html>\n");
    return b->failed ? ut_nomem(ctx) : TPU_OK;
}
