/* profile.h — the profile of a program on a chip: the timing model's result with the presentation around
 * it (summary, op table, JSON, Chrome trace, HTML report, advisor). Names start with prf_. */
#ifndef TPU_PROFILE_H
#define TPU_PROFILE_H

#include "timing/model.h"
#include "compile/memory.h"

struct tpu_profile {
    tpu_ctx         *ctx;
    hlo_module      *owned;        /* policy-rewritten module, if any */
    const hlo_module *m;
    chp_slice        slice;
    cmp_program     *prog;
    cmp_memory_stats mem;
    tim_result      *tim;
    tim_opts         topts;
    tpu_profile_opts opts;
    char            *summary, *json, *advice;
    int              summary_top;  /* the top ops `summary` was built for */
    int             *order;        /* ops sorted by total time, largest first */
    /* a collective the step runs outside the program (the trainer's gradient all-reduce, executed by the
     * runtime between grad.hlo and apply.hlo): after the ops on the timeline, and in tim's totals */
    double           extra_s;
    char             extra_name[64];
};
typedef struct tpu_profile prf_profile;

/* Display name of an op: its root instruction, with the metadata op_name when there is one. */
const char *prf_op_label(const tim_op *t, char *buf, size_t n);
/* Appends the text summary with the `top` most expensive ops (0: 15) to b; needs p->order. */
void prf_summary(const prf_profile *p, int top, ut_buf *b);
/* Fills p->order. */
tpu_status prf_sort_ops(prf_profile *p);

/* Adds a collective the runtime runs in every step beside the program (seconds on one device, bytes it
 * sends): the step time, the collective share, ICI bytes, utilization and bound follow. Before any
 * summary, JSON or advice is asked for. */
void prf_add_runtime_collective(prf_profile *p, const char *name, double seconds, double ici_bytes);

/* scale.c: dollars per chip-hour (or GPU-hour with gpu) from a price list: a plain number (chips only), or
 * "KEY=PRICE,..." where the slice's name wins over its generation or cloud prefix (case ignored); 0 if none
 * applies. */
double prf_price(const char *prices, const char *slice, const char *gen, const char *prefix, int gpu);

/* trace.c */
tpu_status prf_trace_json(tpu_ctx *ctx, const prf_profile *p, ut_buf *b);
/* report.c */
tpu_status prf_html(tpu_ctx *ctx, const prf_profile *p, ut_buf *b);
/* advisor.c: writes the advice (pointers with evidence and predicted gain) */
tpu_status prf_advise(tpu_ctx *ctx, const prf_profile *p, ut_buf *b);
/* The advisor's rules one at a time (a table in advisor.c): rule i's name (NULL past the last), and one rule
 * run alone: its pointer (unnumbered) appended to b and its predicted gain in *gain_s, or nothing when the
 * rule does not fire. TPU_ERR_INVALID for an unknown name. */
const char *prf_advise_rule_name(int i);
tpu_status  prf_advise_rule(tpu_ctx *ctx, const prf_profile *p, const char *rule, ut_buf *b, double *gain_s);

#endif
