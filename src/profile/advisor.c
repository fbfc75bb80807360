/* advisor.c — concrete pointers from the profile, each with its evidence and the predicted gain. */
#include "profile.h"

#include <string.h>

tpu_status prf_advise(tpu_ctx *ctx, const prf_profile *p, ut_buf *b)
{
    const tim_result *r = p->tim;
    int n = 0;
    /* input-bound */
    if (r->idle_s > 0.05 * r->step_s) {
        ut_buf_printf(b, "%d. The input pipeline is the bottleneck: the device idles %.0f%% of each step waiting for data.\n"
                         "   Evidence: the host delivers a batch every %.4g ms, the device needs %.4g ms.\n"
                         "   Fix: prefetch, parallel reads, a cached dataset format; a step time of %.4g ms is possible.\n",
                      ++n, 100 * r->idle_s / r->step_s, r->input_s * 1e3, (r->device_s + r->host_s) * 1e3,
                      (r->device_s + r->host_s) * 1e3);
    }
    /* host launch overhead */
    if (r->host_s > 0.1 * r->step_s && p->opts.steps_per_exec < 32) {
        double better = r->device_s + r->host_s * p->opts.steps_per_exec / 32.0;
        ut_buf_printf(b, "%d. Program launches cost %.0f%% of the step. Raise steps_per_execution to 32 (--steps-per-exec 32):\n"
                         "   predicted step %.4g ms instead of %.4g ms.\n",
                      ++n, 100 * r->host_s / r->step_s, better * 1e3, r->step_s * 1e3);
    }
    /* MXU padding waste on the biggest matmuls */
    for (int i = 0; i < r->nops && i < 50; i++) {
        const tim_op *t = &r->ops[p->order[i]];
        if (t->mxu_flops <= 0 || t->pad_waste < 0.3 || t->time_s * t->count < 0.05 * r->step_s) continue;
        char lbl[256];
        prf_op_label(t, lbl, sizeof lbl);
        ut_buf_printf(b, "%d. %s wastes %.0f%% of its MXU passes on padding (%.0f%% of the step).\n"
                         "   Fix: make batch and feature dimensions multiples of %d (the MXU is %dx%d).\n",
                      ++n, lbl, 100 * t->pad_waste, 100 * t->time_s * t->count / r->step_s, p->slice.chip.mxu_cols,
                      p->slice.chip.mxu_rows, p->slice.chip.mxu_cols);
        break;
    }
    /* f32 matmuls at high precision */
    double multi = 0;
    for (int i = 0; i < r->nops; i++)
        if (r->ops[i].mxu_passes > 1 && r->ops[i].bound == TIM_BOUND_COMPUTE) multi += r->ops[i].time_s * r->ops[i].count;
    if (multi > 0.1 * r->step_s)
        ut_buf_printf(b, "%d. %.0f%% of the step runs f32 matmuls at HIGH/HIGHEST precision (3-6 bf16 passes each).\n"
                         "   Fix: default precision or the mixed_bfloat16 policy would cut that time by up to %.0f%%.\n",
                      ++n, 100 * multi / r->step_s, 100 * multi / r->step_s * 2 / 3);
    if (r->bound == TIM_BOUND_MEMORY)
        ut_buf_printf(b, "%d. The step is HBM-bandwidth bound (%.0f%% of the time). bfloat16 activations (--policy "
                         "mixed_bfloat16) halve most of the traffic.\n", ++n, 100 * r->by_bound[TIM_BOUND_MEMORY] / r->step_s);
    if (r->by_bound[TIM_BOUND_COLLECTIVE] > 0.2 * r->step_s)
        ut_buf_printf(b, "%d. Collectives take %.0f%% of the step: larger per-device batches amortise the gradient all-reduce.\n",
                      ++n, 100 * r->by_bound[TIM_BOUND_COLLECTIVE] / r->step_s);
    if (r->by_bound[TIM_BOUND_OVERHEAD] > 0.2 * r->step_s)
        ut_buf_printf(b, "%d. Small ops dominate: %.0f%% of the step is per-op launch cost. Larger batches or fewer, bigger "
                         "ops help.\n", ++n, 100 * r->by_bound[TIM_BOUND_OVERHEAD] / r->step_s);
    if (!p->mem.fits)
        ut_buf_printf(b, "%d. The program does not fit in HBM (see tpusim memory for the largest allocations).\n", ++n);
    if (!n) ut_buf_puts(b, "No obvious problems: the step is dominated by useful work.\n");
    return b->failed ? ut_nomem(ctx) : TPU_OK;
}
