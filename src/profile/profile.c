/* profile.c — the public profile API: verify, apply the policy, compile for the chip, run the timing model,
 * and present the result as a summary with an op table, or as JSON. */
#include "profile.h"
#include "compile/policy.h"

#include <assert.h>
#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *prf_op_label(const tim_op *t, char *buf, size_t n)
{
    const char *on = hlo_meta(t->root, "op_name");
    if (on) {
        /* the last two path components say most ("dense_1/MatMul") */
        const char *s = on + strlen(on);
        int slashes = 0;
        while (s > on && slashes < 2) {
            s--;
            if (*s == '/') slashes++;
        }
        if (*s == '/') s++;
        snprintf(buf, n, "%s (%s)", t->root->name, s);
    } else {
        snprintf(buf, n, "%s", t->root->name);
    }
    return buf;
}

/* One op's sort key: the key travels with the index, so the comparison needs no context (re-entrant). */
typedef struct prf_key {
    double t;   /* total time: time_s x count */
    int    i;
} prf_key;

static int prf_by_time(const void *a, const void *b)
{
    const prf_key *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? 1 : -1;
    return x->i - y->i;
}

tpu_status prf_sort_ops(prf_profile *p)
{
    if (p->order) return TPU_OK;
    int n = p->tim->nops;
    prf_key *k = ut_malloc((size_t)(n ? n : 1) * sizeof *k);
    p->order = ut_malloc((size_t)(n ? n : 1) * sizeof *p->order);
    if (!k || !p->order) {
        ut_free(k);
        ut_free(p->order);
        p->order = NULL;
        return TPU_ERR_NOMEM;
    }
    for (int i = 0; i < n; i++) k[i] = (prf_key){p->tim->ops[i].time_s * p->tim->ops[i].count, i};
    qsort(k, (size_t)n, sizeof *k, prf_by_time);
    for (int i = 0; i < n; i++) p->order[i] = k[i].i;
    ut_free(k);
    return TPU_OK;
}

void tpu_profile_free(tpu_profile *p)
{
    if (!p) return;
    tim_result_free(p->tim);
    cmp_memory_stats_free(&p->mem);
    cmp_program_free(p->prog);
    hlo_module_free(p->owned);
    ut_free(p->summary);
    ut_free(p->json);
    ut_free(p->advice);
    ut_free(p->order);
    ut_free(p);
}

/* The devices a program was written for: replica_count x num_partitions, else the highest device id its
 * collectives' explicit groups name + 1 (1 if none). */
static int prf_program_devices(const hlo_module *m)
{
    int64_t n = hlo_module_replica_count(m) * hlo_module_num_partitions(m);
    if (n > 1) return (int)n;
    int64_t hi = 0;
    for (int c = 0; c < m->ncomps; c++)
        for (int i = 0; i < m->comps[c]->ninstrs; i++) {
            const hlo_attr *a = hlo_attr_find(m->comps[c]->instrs[i], HK_REPLICA_GROUPS);
            if (!a || a->kind != HA_RGROUPS) continue;
            const hlo_rgroups *g = a->v.rgroups;
            if (g->iota && g->gdims[0] * g->gdims[1] > hi) hi = g->gdims[0] * g->gdims[1];
            for (int k = 0; !g->iota && k < g->ngroups; k++)
                for (int j = 0; j < g->len[k]; j++)
                    if (g->ids[k][j] + 1 > hi) hi = g->ids[k][j] + 1;
        }
    return hi > 1 && hi < (1 << 30) ? (int)hi : 1;
}

tpu_profile_opts tpu_profile_opts_default(void)
{
    tpu_profile_opts o;
    memset(&o, 0, sizeof o);
    o.steps = 1;
    o.steps_per_exec = 1;
    return o;
}

tpu_status tpu_profile_program(tpu_ctx *ctx, const tpu_module *m, const tpu_profile_opts *opts, tpu_profile **out)
{
    *out = NULL;
    prf_profile *p = ut_calloc(1, sizeof *p);
    if (!p) return ut_nomem(ctx);
    p->ctx = ctx;
    p->opts = opts ? *opts : tpu_profile_opts_default();
    if (p->opts.steps < 1) p->opts.steps = 1;
    if (p->opts.steps_per_exec < 1) p->opts.steps_per_exec = 1;
    tpu_status st = cmp_resolve_chip(ctx, p->opts.chip, &p->slice);
    p->m = m;
    if (!st) st = cmp_verify_or_fail(ctx, m);
    if (!st && p->opts.policy && strcmp(p->opts.policy, "float32")) {
        st = cmp_apply_policy(ctx, m, p->opts.policy, &p->owned);
        if (!st) p->m = p->owned;
    }
    if (!st) {
        hlo_module *inl = NULL;
        st = cmp_inline_calls(ctx, p->m, &inl);
        if (!st) {
            hlo_module_free(p->owned);
            p->owned = inl;
            p->m = inl;
        }
    }
    if (!st) st = cmp_compile(ctx, p->m, &p->slice.chip, NULL, &p->prog);
    if (!st && cmp_memory_compute(p->prog, &p->mem, 10)) st = ut_nomem(ctx);
    if (!st) {
        p->topts.steps = p->opts.steps;
        p->topts.steps_per_exec = p->opts.steps_per_exec;
        p->topts.input_rate = p->opts.input_rate;
        p->topts.batch = p->opts.batch;
        p->topts.widen_groups = p->opts.span_slice ? prf_program_devices(p->prog->m) : 0;
        st = tim_model(ctx, p->prog, &p->slice, &p->topts, &p->tim);
    }
    if (!st && prf_sort_ops(p)) st = ut_nomem(ctx);
    if (st) {
        tpu_profile_free(p);
        return st;
    }
    *out = p;
    return TPU_OK;
}

double tpu_profile_step_time(const tpu_profile *p) { return p->tim->step_s; }
const char *tpu_profile_bound(const tpu_profile *p) { return tim_bound_name(p->tim->bound); }
double tpu_profile_mxu_utilization(const tpu_profile *p) { return p->tim->mxu_util; }
int64_t tpu_profile_batch(const tpu_profile *p) { return p->tim->batch; }
int tpu_profile_fits(const tpu_profile *p) { return p->mem.fits; }
int tpu_profile_devices(const tpu_profile *p) { return p->slice.devices; }

static void prf_fmt_time(char *b, size_t n, double s)
{
    if (s >= 1) snprintf(b, n, "%.3f s", s);
    else if (s >= 1e-3) snprintf(b, n, "%.3f ms", s * 1e3);
    else snprintf(b, n, "%.2f us", s * 1e6);
}

void prf_summary(const prf_profile *p, int top, ut_buf *b)
{
    assert(p->order || !p->tim->nops);   /* tpu_profile_program sorted the ops */
    if (top <= 0) top = 15;
    const tim_result *r = p->tim;
    const chp_slice *sl = &p->slice;
    char t1[32], t2[32], t3[32];
    prf_fmt_time(t1, sizeof t1, r->step_s);
    ut_buf_printf(b, "%s on %s (%d chip%s, %d device%s; one device's program)\n", p->m->name, sl->name, sl->chips,
                  sl->chips == 1 ? "" : "s", sl->devices, sl->devices == 1 ? "" : "s");
    ut_buf_printf(b, "  step time        %s per step", t1);
    if (p->opts.steps_per_exec > 1) ut_buf_printf(b, " (%d steps per host call)", p->opts.steps_per_exec);
    ut_buf_putc(b, '\n');
    ut_buf_printf(b, "  FLOP/s           %.3g of %.3g peak (%.1f%%); %.3g FLOPs per step\n", r->flops_per_s, r->peak_flops,
                  r->peak_flops > 0 ? 100 * r->flops_per_s / r->peak_flops : 0, r->flops);
    ut_buf_printf(b, "  MXU utilization  %.1f%%\n", 100 * r->mxu_util);
    char hb[32];
    cmp_fmt_bytes(hb, sizeof hb, r->hbm_bytes);
    ut_buf_printf(b, "  HBM traffic      %s per step (%.1f%% of the bandwidth)\n", hb,
                  r->step_s > 0 ? 100.0 * (double)r->hbm_bytes / (r->step_s * sl->chip.hbm_bw * sl->chip.cores_per_device /
                                                                   (sl->chip.cores_per_chip ? sl->chip.cores_per_chip : 1))
                                : 0);
    ut_buf_printf(b, "  bound            %s\n", tim_bound_name(r->bound));
    ut_buf_puts(b, "  time by bound   ");
    for (int k = 0; k < TIM_BOUND_COUNT; k++) {
        if (r->by_bound[k] <= 0) continue;
        prf_fmt_time(t2, sizeof t2, r->by_bound[k]);
        ut_buf_printf(b, " %s %s (%.0f%%),", tim_bound_name((tim_bound)k), t2, r->step_s > 0 ? 100 * r->by_bound[k] / r->step_s : 0);
    }
    if (b->len && b->data[b->len - 1] == ',') b->len--;
    ut_buf_putc(b, '\n');
    if (r->idle_s > 0) {
        prf_fmt_time(t2, sizeof t2, r->idle_s);
        prf_fmt_time(t3, sizeof t3, r->input_s);
        ut_buf_printf(b, "  INPUT-BOUND: the device idles %s per step (%.0f%%) waiting for the host pipeline (%s per batch "
                          "of %lld)\n", t2, 100 * r->idle_s / r->step_s, t3, (long long)r->batch);
    }
    if (r->unknown_trips)
        ut_buf_printf(b, "  note: %d while loop%s with a trip count tpusim could not infer counted once\n", r->unknown_trips,
                      r->unknown_trips == 1 ? "" : "s");
    char mb[32], cap[32];
    cmp_fmt_bytes(mb, sizeof mb, p->mem.used);
    cmp_fmt_bytes(cap, sizeof cap, p->mem.capacity);
    ut_buf_printf(b, "  HBM use          %s of %s per device%s\n", mb, cap, p->mem.fits ? "" : "  (DOES NOT FIT: see tpusim memory)");
    if (p->opts.price_per_chip_hour > 0) {
        double per_step = r->step_s / 3600.0 * p->opts.price_per_chip_hour * sl->chips;
        ut_buf_printf(b, "  cost             $%.4g per 1000 steps at $%.2f per chip-hour (%d chips)\n", per_step * 1000,
                      p->opts.price_per_chip_hour, sl->chips);
    }
    ut_buf_printf(b, "\n  %-52s %10s %6s %9s %10s %6s %-10s\n", "top ops", "time", "%", "count", "GFLOP", "MXU%", "bound");
    for (int i = 0, shown = 0; i < r->nops && shown < top; i++) {
        const tim_op *t = &r->ops[p->order[i]];
        if (t->op->kind == CMP_CONTROL || t->time_s * t->count <= 0) continue;   /* control, or fused into consumers */
        char lbl[256];
        prf_op_label(t, lbl, sizeof lbl);
        if (strlen(lbl) > 52) strcpy(lbl + 49, "...");
        prf_fmt_time(t2, sizeof t2, t->time_s * t->count);
        ut_buf_printf(b, "  %-52s %10s %5.1f%% %9.0f %10.3f %5.1f%% %-10s\n", lbl, t2,
                      r->step_s > 0 ? 100 * t->time_s * t->count / r->step_s : 0, t->count, t->flops * t->count / 1e9,
                      100 * t->mxu_util, tim_bound_name(t->bound));
        shown++;
    }
}

/* Cached for the last `top` asked for: a call with another top builds the text again. */
const char *tpu_profile_summary(tpu_profile *p, int top)
{
    if (top <= 0) top = 15;
    if (p->summary && p->summary_top == top) return p->summary;
    ut_free(p->summary);
    ut_buf b;
    ut_buf_init(&b);
    prf_summary(p, top, &b);
    p->summary = ut_buf_take(&b);
    p->summary_top = top;
    return p->summary ? p->summary : "out of memory\n";
}

void prf_add_runtime_collective(prf_profile *p, const char *name, double seconds, double ici_bytes)
{
    tim_result *r = p->tim;
    if (seconds <= 0) return;
    snprintf(p->extra_name, sizeof p->extra_name, "%s", name);
    p->extra_s += seconds;
    /* it runs between two programs, so it adds to the step as the trainer counts it (any wait for input
     * stays as it was) */
    double step = r->step_s + seconds;
    r->device_s += seconds;
    r->ici_bytes += (int64_t)ici_bytes;
    r->by_bound[TIM_BOUND_COLLECTIVE] += seconds;
    r->mxu_util = r->step_s > 0 ? r->mxu_util * r->step_s / step : 0;
    r->step_s = step;
    r->flops_per_s = step > 0 ? r->flops / step : 0;
    r->bound = TIM_BOUND_COMPUTE;
    for (int b = 0; b < TIM_BOUND_COUNT; b++)
        if (r->by_bound[b] > r->by_bound[r->bound]) r->bound = (tim_bound)b;
}

const char *tpu_profile_json(tpu_profile *p)
{
    if (p->json) return p->json;
    const tim_result *r = p->tim;
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "module", p->m->name);
    cJSON_AddStringToObject(o, "chip", p->slice.chip.name);
    cJSON_AddStringToObject(o, "slice", p->slice.name);
    cJSON_AddNumberToObject(o, "devices", p->slice.devices);
    cJSON_AddNumberToObject(o, "step_time_s", r->step_s);
    cJSON_AddNumberToObject(o, "device_time_s", r->device_s);
    cJSON_AddNumberToObject(o, "collective_hidden_s", r->collective_hidden_s);
    cJSON_AddNumberToObject(o, "host_time_s", r->host_s);
    cJSON_AddNumberToObject(o, "idle_time_s", r->idle_s);
    if (p->extra_s > 0) cJSON_AddNumberToObject(o, "runtime_collective_s", p->extra_s);
    cJSON_AddNumberToObject(o, "flops", r->flops);
    cJSON_AddNumberToObject(o, "mxu_flops", r->mxu_flops);
    cJSON_AddNumberToObject(o, "flops_per_s", r->flops_per_s);
    cJSON_AddNumberToObject(o, "peak_flops", r->peak_flops);
    cJSON_AddNumberToObject(o, "mxu_utilization", r->mxu_util);
    cJSON_AddNumberToObject(o, "hbm_bytes", (double)r->hbm_bytes);
    cJSON_AddNumberToObject(o, "ici_bytes", (double)r->ici_bytes);
    cJSON_AddStringToObject(o, "bound", tim_bound_name(r->bound));
    cJSON_AddBoolToObject(o, "input_bound", r->idle_s > 0);
    cJSON_AddNumberToObject(o, "batch", (double)r->batch);
    cJSON_AddNumberToObject(o, "steps_per_exec", p->opts.steps_per_exec);
    cJSON_AddNumberToObject(o, "unknown_trip_counts", r->unknown_trips);
    cJSON_AddNumberToObject(o, "hbm_peak_bytes", (double)p->mem.used);
    cJSON_AddBoolToObject(o, "fits", p->mem.fits);
    cJSON *bb = cJSON_AddObjectToObject(o, "time_by_bound_s");
    for (int k = 0; bb && k < TIM_BOUND_COUNT; k++) cJSON_AddNumberToObject(bb, tim_bound_name((tim_bound)k), r->by_bound[k]);
    cJSON *arr = cJSON_AddArrayToObject(o, "ops");
    for (int i = 0; arr && i < r->nops; i++) {
        const tim_op *t = &r->ops[p->order[i]];
        cJSON *e = cJSON_CreateObject();
        if (!e) break;
        cJSON_AddStringToObject(e, "name", t->root->name);
        cJSON_AddStringToObject(e, "opcode", hlo_op_name((hlo_op)t->root->op));
        cJSON_AddStringToObject(e, "kind", cmp_op_kind_name(t->op->kind));
        const char *on = hlo_meta(t->root, "op_name");
        if (on) cJSON_AddStringToObject(e, "op_name", on);
        cJSON_AddNumberToObject(e, "time_s", t->time_s * t->count);
        cJSON_AddNumberToObject(e, "time_per_call_s", t->time_s);
        cJSON_AddNumberToObject(e, "count", t->count);
        cJSON_AddStringToObject(e, "bound", tim_bound_name(t->bound));
        cJSON_AddNumberToObject(e, "flops", t->flops * t->count);
        cJSON_AddNumberToObject(e, "hbm_bytes", (double)t->hbm_bytes * t->count);
        cJSON_AddNumberToObject(e, "mxu_s", t->mxu_s);
        cJSON_AddNumberToObject(e, "vpu_s", t->vpu_s);
        cJSON_AddNumberToObject(e, "hbm_s", t->hbm_s);
        cJSON_AddNumberToObject(e, "ici_s", t->ici_s);
        cJSON_AddNumberToObject(e, "mxu_utilization", t->mxu_util);
        cJSON_AddNumberToObject(e, "padding_waste", t->pad_waste);
        if (t->fused_into > 0) cJSON_AddNumberToObject(e, "fused_into_consumers", t->fused_into);
        cJSON_AddNumberToObject(e, "instructions", t->op->ninstrs);
        cJSON_AddNumberToObject(e, "depth", t->depth);
        cJSON_AddItemToArray(arr, e);
    }
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    if (!s) return NULL;
    p->json = ut_strdup(s);
    cJSON_free(s);
    return p->json;
}

const char *tpu_profile_advice(tpu_profile *p)
{
    if (p->advice) return p->advice;
    ut_buf b;
    ut_buf_init(&b);
    if (prf_advise(p->ctx, p, &b)) {
        ut_buf_free(&b);
        return NULL;
    }
    p->advice = ut_buf_take(&b);
    return p->advice;
}

static tpu_status prf_write(tpu_ctx *ctx, const char *path, ut_buf *b) { return ut_write_file(ctx, path, b->data, b->len, 0); }

tpu_status tpu_profile_write_trace(tpu_ctx *ctx, const tpu_profile *p, const char *path)
{
    ut_buf b;
    ut_buf_init(&b);
    tpu_status st = prf_trace_json(ctx, p, &b);
    if (!st) st = b.failed ? ut_nomem(ctx) : prf_write(ctx, path, &b);
    ut_buf_free(&b);
    return st;
}

tpu_status tpu_profile_write_html(tpu_ctx *ctx, const tpu_profile *p, const char *path)
{
    ut_buf b;
    ut_buf_init(&b);
    tpu_status st = prf_html(ctx, p, &b);
    if (!st) st = b.failed ? ut_nomem(ctx) : prf_write(ctx, path, &b);
    ut_buf_free(&b);
    return st;
}

double tpu_profile_flops(const tpu_profile *p) { return p->tim->flops; }
double tpu_profile_hbm_bytes(const tpu_profile *p) { return (double)p->tim->hbm_bytes; }
double tpu_profile_ici_bytes(const tpu_profile *p) { return (double)p->tim->ici_bytes; }
double tpu_profile_device_time(const tpu_profile *p) { return p->tim->device_s; }
