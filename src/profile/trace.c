/* trace.c — the step timeline as Chrome trace-event JSON (opens in ui.perfetto.dev and chrome://tracing).
 *
 * Process 1 "TPU <slice>" has one track per TensorCore: device 0's cores show every op of the program (on a
 * megacore device both cores run each op, split between them), the other devices, running the same SPMD
 * program, show their steps (at most 16 core tracks; the last one stands for the rest). When the host
 * feeds slower than the device consumes, each core shows the wait as "waiting for input". Process 2 "host"
 * has the program launches (one per steps_per_exec steps) and the input pipeline's batches. Times are in
 * microseconds; every op event carries its FLOPs, bytes, unit times and bound in "args". */
#include "profile.h"

#include <string.h>

#define TR_MAX_TRACKS 16
#define TR_MAX_OP_EVENTS 200000
#define TR_MAX_STEPS 10000   /* steps drawn one by one; the rest are one event per track (--steps 1e8 stays small) */

/* Opens an "X" (complete) event; the caller closes it with "}" or adds ", \"args\": {...}}". */
static void tr_event(ut_buf *b, int *first, const char *name, const char *cat, int pid, int tid, double ts_us, double dur_us)
{
    ut_buf_puts(b, *first ? "\n  {" : ",\n  {");
    *first = 0;
    ut_buf_puts(b, "\"name\": ");
    ut_buf_json_str(b, name);
    ut_buf_printf(b, ", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f", cat, pid, tid,
                  ts_us, dur_us);
}

static void tr_meta(ut_buf *b, int *first, const char *what, int pid, int tid, const char *name)
{
    ut_buf_puts(b, *first ? "\n  {" : ",\n  {");
    *first = 0;
    ut_buf_printf(b, "\"name\": \"%s\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"args\": {\"name\": ", what, pid, tid);
    ut_buf_json_str(b, name);
    ut_buf_puts(b, "}}");
}

/* The ops of one step on one core track, starting at `t0` (seconds); control ops span their children. */
static void tr_ops(ut_buf *b, int *first, const prf_profile *p, int tid, double t0)
{
    const tim_result *r = p->tim;
    double cur = t0;
    for (int i = 0; i < r->nops; i++) {
        const tim_op *op = &r->ops[i];
        char lbl[300];
        prf_op_label(op, lbl, sizeof lbl - 40);
        if (op->op->kind == CMP_CONTROL) {
            double span = 0;
            for (int k = i + 1; k < r->nops && r->ops[k].depth > op->depth; k++)
                if (r->ops[k].op->kind != CMP_CONTROL) span += r->ops[k].time_s * r->ops[k].count;
            if (op->root->op == HLO_WHILE) snprintf(lbl + strlen(lbl), 40, " x%.0f%s", op->trips, op->trip_known ? "" : "?");
            tr_event(b, first, lbl, "control", 1, tid, cur * 1e6, span * 1e6);
            ut_buf_printf(b, ", \"args\": {\"opcode\": \"%s\", \"trips\": %.0f, \"trip_count_known\": %s}}",
                          hlo_op_name((hlo_op)op->root->op), op->trips, op->trip_known ? "true" : "false");
            continue;   /* children follow, laid out inside the span */
        }
        double dur = op->time_s * op->count;
        if (dur <= 0) continue;   /* duplicated into its consumers: no kernel of its own */
        if (op->count > 1.5) snprintf(lbl + strlen(lbl), 40, " x%.0f", op->count);
        tr_event(b, first, lbl, tim_bound_name(op->bound), 1, tid, cur * 1e6, dur * 1e6);
        ut_buf_printf(b, ", \"args\": {\"opcode\": \"%s\", \"kind\": \"%s\", \"bound\": \"%s\", \"flops\": %.6g, \"hbm_bytes\": %.6g, "
                         "\"mxu_us\": %.4f, \"vpu_us\": %.4f, \"hbm_us\": %.4f, \"ici_us\": %.4f, \"count\": %.0f, "
                         "\"mxu_utilization\": %.4f, \"padding_waste\": %.4f}}",
                      hlo_op_name((hlo_op)op->root->op), cmp_op_kind_name(op->op->kind), tim_bound_name(op->bound),
                      op->flops * op->count, (double)op->hbm_bytes * op->count, op->mxu_s * 1e6, op->vpu_s * 1e6,
                      op->hbm_s * 1e6, op->ici_s * 1e6, op->count, op->mxu_util, op->pad_waste);
        cur += dur;
    }
    if (p->extra_s > 0) {   /* the runtime's collective (the trainer's gradient all-reduce) */
        tr_event(b, first, p->extra_name, "collective", 1, tid, cur * 1e6, p->extra_s * 1e6);
        ut_buf_puts(b, ", \"args\": {\"bound\": \"collective\", \"executed_by\": \"runtime\"}}");
    }
}

tpu_status prf_trace_json(tpu_ctx *ctx, const prf_profile *p, ut_buf *b)
{
    const tim_result *r = p->tim;
    const chp_chip *chip = &p->slice.chip;
    int steps = p->opts.steps < 1 ? 1 : p->opts.steps;
    int spe = p->opts.steps_per_exec < 1 ? 1 : p->opts.steps_per_exec;
    int cpd = chip->cores_per_device > 0 ? chip->cores_per_device : 1;
    int cpc = chip->cores_per_chip > 0 ? chip->cores_per_chip : 1;
    int cores = p->slice.devices * cpd;
    int tracks = cores < TR_MAX_TRACKS ? cores : TR_MAX_TRACKS;
    if (tracks < 1) tracks = 1;
    /* keep traces of huge programs loadable: op events for the first steps only */
    int op_steps = steps;
    double per_step = (double)(r->nops ? r->nops : 1) * (cpd < tracks ? cpd : tracks);
    if (per_step * steps > TR_MAX_OP_EVENTS) op_steps = (int)(TR_MAX_OP_EVENTS / per_step);
    if (op_steps < 1) op_steps = 1;
    double launch_s = p->topts.launch_s > 0 ? p->topts.launch_s : 30e-6;
    int first = 1;
    ut_buf_puts(b, "{\"displayTimeUnit\": \"ns\", \"otherData\": {\"generator\": \"tpusim\", \"slice\": ");
    ut_buf_json_str(b, p->slice.name);
    ut_buf_puts(b, ", \"program\": ");
    ut_buf_json_str(b, p->m->name);
    ut_buf_printf(b, ", \"step_time_s\": %.9g, \"steps\": %d, \"steps_per_exec\": %d, \"bound\": \"%s\"},\n \"traceEvents\": [",
                  r->step_s, steps, spe, tim_bound_name(r->bound));
    char nm[128];
    snprintf(nm, sizeof nm, "TPU %s", p->slice.name);
    tr_meta(b, &first, "process_name", 1, 0, nm);
    tr_meta(b, &first, "process_name", 2, 0, "host");
    for (int k = 0; k < tracks; k++) {
        int dev = k / cpd, core = k % cpd, chipi = k / cpc;
        int rest = cores > tracks && k == tracks - 1;
        if (cpd > 1) snprintf(nm, sizeof nm, "device %d core %d (chip %d)%s", dev, core, chipi, rest ? " and the rest" : "");
        else snprintf(nm, sizeof nm, "device %d (chip %d core %d)%s", dev, chipi, k % cpc, rest ? " and the rest" : "");
        tr_meta(b, &first, "thread_name", 1, k, nm);
        ut_buf_puts(b, ",\n  {\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": 1, ");
        ut_buf_printf(b, "\"tid\": %d, \"args\": {\"sort_index\": %d}}", k, k);
    }
    tr_meta(b, &first, "thread_name", 2, 0, "program launches");
    tr_meta(b, &first, "thread_name", 2, 1, "input pipeline");
    double t = 0;
    int drawn = steps < TR_MAX_STEPS ? steps : TR_MAX_STEPS;
    for (int s = 0; s < drawn; s++) {
        double step_start = t;
        if (s % spe == 0) {
            snprintf(nm, sizeof nm, "launch (steps %d-%d)", s, s + spe - 1 < steps - 1 ? s + spe - 1 : steps - 1);
            tr_event(b, &first, nm, "host", 2, 0, t * 1e6, launch_s * 1e6);
            ut_buf_puts(b, "}");
        }
        if (r->input_s > 0) {
            snprintf(nm, sizeof nm, "batch %d (%lld samples)", s, (long long)r->batch);
            tr_event(b, &first, nm, "input", 2, 1, t * 1e6, r->input_s * 1e6);
            ut_buf_puts(b, "}");
        }
        double dev = t + r->host_s;
        char sname[64];
        snprintf(sname, sizeof sname, "step %d", s);
        for (int k = 0; k < tracks; k++) {
            int is_dev0 = k < cpd;
            if (is_dev0 && s < op_steps) {
                tr_ops(b, &first, p, k, dev);
            } else {
                tr_event(b, &first, sname, "step", 1, k, dev * 1e6, r->device_s * 1e6);
                ut_buf_printf(b, ", \"args\": {\"flops\": %.6g, \"mxu_utilization\": %.4f}}", r->flops, r->mxu_util);
            }
            if (r->idle_s > 0) {
                tr_event(b, &first, "waiting for input", "idle", 1, k, (dev + r->device_s) * 1e6, r->idle_s * 1e6);
                ut_buf_puts(b, "}");
            }
        }
        t = step_start + r->step_s;
        if (b->failed) return ut_nomem(ctx);
    }
    if (drawn < steps) {
        snprintf(nm, sizeof nm, "steps %d-%d (%d more, drawn as one)", drawn, steps - 1, steps - drawn);
        for (int k = 0; k < tracks; k++) {
            tr_event(b, &first, nm, "step", 1, k, t * 1e6, (double)(steps - drawn) * r->step_s * 1e6);
            ut_buf_puts(b, "}");
        }
    }
    ut_buf_puts(b, "\n]}\n");
    return b->failed ? ut_nomem(ctx) : TPU_OK;
}
