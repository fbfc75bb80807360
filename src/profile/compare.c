/* compare.c — what-if (tpusim profile --compare): the same per-device program profiled on other slices, as a
 * table beside the profile at hand, with the cost of 1000 steps when prices are given. Names start with prf_. */
#include "profile.h"

#include <stdlib.h>
#include <string.h>

static void prf_cmp_time(char *b, size_t n, double s)
{
    if (s >= 1) snprintf(b, n, "%.3f s", s);
    else if (s >= 1e-3) snprintf(b, n, "%.3f ms", s * 1e3);
    else snprintf(b, n, "%.2f us", s * 1e6);
}

/* One row: slice `name` (as the caller spelled it) profiled as q, against the base step time. */
static void prf_cmp_row(ut_buf *b, const char *name, const prf_profile *q, double base, const char *prices, int is_base)
{
    double step = q->tim->step_s;
    char t[32], lbl[64];
    prf_cmp_time(t, sizeof t, step);
    snprintf(lbl, sizeof lbl, "%s%s", name, is_base ? " (this)" : "");
    int chips = q->slice.chips, devices = q->slice.devices;
    ut_buf_printf(b, "  %-22s %5d %7d %12s %8.2fx %6.1f%% %-10s %-4s", lbl, chips, devices, t, step > 0 ? base / step : 0,
                  100 * q->tim->mxu_util, tim_bound_name(q->tim->bound), q->mem.fits ? "yes" : "NO");
    if (q->tim->batch > 0 && step > 0) ut_buf_printf(b, " %12.0f", (double)q->tim->batch * devices / step);
    else ut_buf_printf(b, " %12s", "-");
    double pr = prf_price(prices, name, q->slice.chip.name, NULL, 0);
    if (pr > 0) ut_buf_printf(b, "   $%.4g", step * 1000 / 3600 * pr * chips);
    ut_buf_putc(b, '\n');
}

tpu_status tpu_profile_compare(tpu_ctx *ctx, const tpu_module *m, const tpu_profile_opts *o, const tpu_profile *base,
                               const char *slices, const char *prices, char **table)
{
    *table = NULL;
    ut_buf b, errs;
    ut_buf_init(&b);
    ut_buf_init(&errs);
    double step = base->tim->step_s;
    ut_buf_puts(&b, "\nwhat-if: the same per-device program on other slices (a slice with more devices does more samples per "
                    "step)\n");
    ut_buf_printf(&b, "  %-22s %5s %7s %12s %9s %7s %-10s %-4s %12s%s\n", "slice", "chips", "devices", "step time",
                  "speed-up", "MXU", "bound", "fits", "samples/s", prices ? "   $/1000 steps" : "");
    prf_cmp_row(&b, o->chip ? o->chip : base->slice.name, base, step, prices, 1);
    char *copy = ut_strdup(slices ? slices : "");
    if (!copy) return ut_nomem(ctx);
    tpu_status st = TPU_OK;
    for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        tpu_profile_opts o2 = *o;
        o2.chip = tok;
        tpu_profile *q = NULL;
        tpu_status qs = tpu_profile_program(ctx, m, &o2, &q);
        if (qs) {
            /* the others still get their rows; the error names every slice that failed */
            ut_buf_printf(&errs, "%s%s: %s", errs.len ? "; " : "", tok, tpu_errmsg(ctx));
            st = qs == TPU_ERR_NOMEM ? qs : st ? st : qs;
            continue;
        }
        prf_cmp_row(&b, tok, q, step, prices, 0);
        tpu_profile_free(q);
    }
    ut_free(copy);
    if (b.failed || errs.failed) st = TPU_ERR_NOMEM;
    if (st == TPU_ERR_NOMEM) ut_nomem(ctx);
    else if (st) ut_err(ctx, st, "%s", errs.data);
    ut_buf_free(&errs);
    *table = ut_buf_take(&b);
    if (!*table && !st) st = ut_nomem(ctx);
    return st;
}
