/* trace.c — the step timeline as Chrome trace-event JSON (opens in Perfetto and chrome://tracing).
 * Process "TPU": one track per device (device 0 shows every op; the others, running the same SPMD program,
 * show their steps); process "host": program launches and the input pipeline. Times in microseconds. */
#include "profile.h"

#include <string.h>

static void tr_str(ut_buf *b, const char *s)
{
    ut_buf_putc(b, '"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') ut_buf_printf(b, "\\%c", c);
        else if (c < 0x20) ut_buf_printf(b, "\\u%04x", c);
        else ut_buf_putc(b, (char)c);
    }
    ut_buf_putc(b, '"');
}

static void tr_event(ut_buf *b, int *first, const char *name, const char *cat, int pid, int tid, double ts_us, double dur_us)
{
    ut_buf_puts(b, *first ? "\n  {" : ",\n  {");
    *first = 0;
    ut_buf_puts(b, "\"name\": ");
    tr_str(b, name);
    ut_buf_printf(b, ", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f", cat, pid, tid,
                  ts_us, dur_us);
}

static void tr_meta(ut_buf *b, int *first, const char *what, int pid, int tid, const char *name)
{
    ut_buf_puts(b, *first ? "\n  {" : ",\n  {");
    *first = 0;
    ut_buf_printf(b, "\"name\": \"%s\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"args\": {\"name\": ", what, pid, tid);
    tr_str(b, name);
    ut_buf_puts(b, "}}");
}

tpu_status prf_trace_json(tpu_ctx *ctx, const prf_profile *p, ut_buf *b)
{
    const tim_result *r = p->tim;
    int steps = p->opts.steps < 1 ? 1 : p->opts.steps;
    int spe = p->opts.steps_per_exec < 1 ? 1 : p->opts.steps_per_exec;
    int tracks = p->slice.devices < 8 ? p->slice.devices : 8;
    if (tracks < 1) tracks = 1;
    /* keep traces of huge programs loadable: at most ~200k op events */
    int op_steps = steps;
    if ((double)r->nops * steps > 200000) op_steps = (int)(200000 / (r->nops ? r->nops : 1));
    if (op_steps < 1) op_steps = 1;
    int first = 1;
    ut_buf_puts(b, "{\"displayTimeUnit\": \"ns\", \"otherData\": {\"generator\": \"tpusim\", \"chip\": ");
    tr_str(b, p->slice.name);
    ut_buf_puts(b, ", \"program\": ");
    tr_str(b, p->m->name);
    ut_buf_puts(b, "},\n \"traceEvents\": [");
    tr_meta(b, &first, "process_name", 1, 0, "TPU");
    tr_meta(b, &first, "process_name", 2, 0, "host");
    for (int d = 0; d < tracks; d++) {
        char nm[64];
        snprintf(nm, sizeof nm, "device %d%s", d, p->slice.devices > tracks && d == tracks - 1 ? " (and the rest)" : "");
        tr_meta(b, &first, "thread_name", 1, d, nm);
    }
    tr_meta(b, &first, "thread_name", 2, 0, "launch");
    tr_meta(b, &first, "thread_name", 2, 1, "input pipeline");
    double t = 0;
    for (int s = 0; s < steps; s++) {
        double step_start = t;
        if (s % spe == 0) {
            tr_event(b, &first, "program launch", "host", 2, 0, t * 1e6, p->topts.launch_s > 0 ? p->topts.launch_s * 1e6 : 30);
            ut_buf_puts(b, "}");
        }
        if (r->input_s > 0) {
            char nm[64];
            snprintf(nm, sizeof nm, "batch %d (%lld samples)", s, (long long)r->batch);
            tr_event(b, &first, nm, "input", 2, 1, t * 1e6, r->input_s * 1e6);
            ut_buf_puts(b, "}");
        }
        double dev = t + r->host_s;
        char sname[64];
        snprintf(sname, sizeof sname, "step %d", s);
        for (int d = 0; d < tracks; d++) {
            tr_event(b, &first, sname, "step", 1, d, dev * 1e6, r->device_s * 1e6);
            ut_buf_printf(b, ", \"args\": {\"flops\": %.6g, \"mxu_utilization\": %.4f}}", r->flops, r->mxu_util);
        }
        if (s < op_steps) {
            /* ops of device 0, control ops spanning their children */
            double cur = dev;
            for (int i = 0; i < r->nops; i++) {
                const tim_op *op = &r->ops[i];
                char lbl[300];
                prf_op_label(op, lbl, sizeof lbl - 32);
                if (op->op->kind == CMP_CONTROL) {
                    double span = 0;
                    for (int k = i + 1; k < r->nops && r->ops[k].depth > op->depth; k++)
                        if (r->ops[k].op->kind != CMP_CONTROL) span += r->ops[k].time_s * r->ops[k].count;
                    if (op->root->op == HLO_WHILE)
                        snprintf(lbl + strlen(lbl), 32, " x%.0f%s", op->trips, op->trip_known ? "" : "?");
                    tr_event(b, &first, lbl, "control", 1, 0, cur * 1e6, span * 1e6);
                    ut_buf_puts(b, "}");
                    continue;   /* children follow, laid out inside the span */
                }
                double dur = op->time_s * op->count;
                if (op->count > 1.5) snprintf(lbl + strlen(lbl), 32, " x%.0f", op->count);
                tr_event(b, &first, lbl, tim_bound_name(op->bound), 1, 0, cur * 1e6, dur * 1e6);
                ut_buf_printf(b, ", \"args\": {\"opcode\": \"%s\", \"bound\": \"%s\", \"flops\": %.6g, \"hbm_bytes\": %lld, "
                                 "\"mxu_us\": %.4f, \"vpu_us\": %.4f, \"hbm_us\": %.4f, \"ici_us\": %.4f, \"count\": %.0f}}",
                              hlo_op_name((hlo_op)op->root->op), tim_bound_name(op->bound), op->flops * op->count,
                              (long long)((double)op->hbm_bytes * op->count), op->mxu_s * 1e6, op->vpu_s * 1e6,
                              op->hbm_s * 1e6, op->ici_s * 1e6, op->count);
                cur += dur;
            }
        }
        t = step_start + r->step_s;
        if (b->failed) return ut_nomem(ctx);
    }
    ut_buf_puts(b, "\n]}\n");
    return b->failed ? ut_nomem(ctx) : TPU_OK;
}
