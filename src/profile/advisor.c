/* advisor.c — concrete pointers from the profile, each with its evidence and a predicted gain. Gains come
 * from running the timing model again on the changed program or options (steps per execution, the
 * mixed_bfloat16 policy, no input wait, larger matmul rows), never from a rule of thumb. The pointers are
 * ordered by predicted gain, largest first. */
#include "profile.h"
#include "compile/policy.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct adv_item {
    double gain_s;   /* predicted step time saved (0: not quantified) */
    char  *text;
} adv_item;

typedef struct adv_list {
    adv_item *v;
    int       n, cap;
    int       failed;
} adv_list;

static void adv_add(adv_list *l, double gain, ut_buf *b)
{
    if (b->failed) {
        l->failed = 1;
        ut_buf_free(b);
        return;
    }
    adv_item *nv = ut_grow(l->v, sizeof *nv, l->n, &l->cap, 16);
    if (!nv) {
        l->failed = 1;
        ut_buf_free(b);
        return;
    }
    l->v = nv;
    l->v[l->n].gain_s = gain;
    l->v[l->n++].text = ut_buf_take(b);
}

static int adv_by_gain(const void *a, const void *b)
{
    const adv_item *x = a, *y = b;
    if (x->gain_s != y->gain_s) return x->gain_s < y->gain_s ? 1 : -1;
    return 0;
}

static void adv_time(char *b, size_t n, double s)
{
    if (s >= 1) snprintf(b, n, "%.3g s", s);
    else if (s >= 1e-3) snprintf(b, n, "%.3g ms", s * 1e3);
    else snprintf(b, n, "%.3g us", s * 1e6);
}

/* "predicted step 12.3 ms instead of 45.6 ms (3.71x)" */
static void adv_gain_line(ut_buf *b, double now, double then)
{
    char a[32], c[32];
    adv_time(a, sizeof a, then);
    adv_time(c, sizeof c, now);
    ut_buf_printf(b, "   Predicted: step %s instead of %s (%.2fx faster).\n", a, c, then > 0 ? now / then : 0);
}

/* The model again with other step options. */
static double adv_rerun_opts(tpu_ctx *ctx, const prf_profile *p, const tim_opts *o)
{
    tim_result *r = NULL;
    if (tim_model(ctx, p->prog, &p->slice, o, &r) != TPU_OK) return -1;
    double s = r->step_s + p->extra_s;   /* the runtime's collective runs in the step whatever the options */
    tim_result_free(r);
    return s;
}

/* The model on the program rewritten for a precision policy. */
static double adv_rerun_policy(tpu_ctx *ctx, const prf_profile *p, const char *policy, double *mxu_s)
{
    hlo_module *m2 = NULL;
    cmp_program *prog = NULL;
    tim_result *r = NULL;
    double s = -1;
    if (cmp_apply_policy(ctx, p->m, policy, &m2) == TPU_OK && cmp_compile(ctx, m2, &p->slice.chip, NULL, &prog) == TPU_OK &&
        tim_model(ctx, prog, &p->slice, &p->topts, &r) == TPU_OK) {
        s = r->step_s + p->extra_s;
        *mxu_s = r->by_bound[TIM_BOUND_COMPUTE];
    }
    tim_result_free(r);
    cmp_program_free(prog);
    hlo_module_free(m2);
    return s;
}

static int adv_is_f32_mxu(const tim_op *t)
{
    if (t->mxu_flops <= 0) return 0;
    for (int m = 0; m < t->op->ninstrs; m++) {
        const hlo_instr *in = t->op->instrs[m];
        if (in->op != HLO_DOT && in->op != HLO_CONVOLUTION) continue;
        for (int k = 0; k < in->nops && k < 2; k++)
            if (in->ops[k]->shape.dtype == TPU_F32) return 1;
    }
    return 0;
}

static int adv_is_dynamic(hlo_op op)
{
    return op == HLO_GATHER || op == HLO_SCATTER || op == HLO_DYNAMIC_SLICE || op == HLO_DYNAMIC_UPDATE_SLICE ||
           op == HLO_SELECT_AND_SCATTER || op == HLO_SORT;
}

static int adv_is_collective(hlo_op op)
{
    return hlo_op_class(op) == HLO_CLASS_COLL;
}

/* The input pipeline. */
static void adv_input(tpu_ctx *ctx, const prf_profile *p, adv_list *L)
{
    const tim_result *r = p->tim;
    double step = r->step_s;
    char t1[32], t2[32];
    if (r->idle_s > 0.02 * step) {
        ut_buf b;
        ut_buf_init(&b);
        tim_opts o = p->topts;
        o.input_rate = 0;
        double then = adv_rerun_opts(ctx, p, &o);
        adv_time(t1, sizeof t1, r->input_s);
        adv_time(t2, sizeof t2, step - r->idle_s);
        ut_buf_printf(&b, "The input pipeline is the bottleneck: the device idles %.0f%% of each step waiting for data.\n"
                          "   Evidence: the host delivers a batch of %lld every %s; the device needs %s per step, so it\n"
                          "   consumes %.4g samples/s and the host gives %.4g.\n"
                          "   Fix: parallel reads and decoding (interleave, num_parallel_calls), prefetch, a cached or\n"
                          "   pre-processed dataset, more host CPU; or do augmentation on the device.\n",
                      100 * r->idle_s / step, (long long)r->batch, t1, t2,
                      (step - r->idle_s) > 0 ? (double)r->batch / (step - r->idle_s) : 0, p->opts.input_rate);
        if (then > 0) adv_gain_line(&b, step, then);
        adv_add(L, then > 0 ? step - then : r->idle_s, &b);
    }
}

/* Host round trips: steps per execution. */
static void adv_steps_per_exec(tpu_ctx *ctx, const prf_profile *p, adv_list *L)
{
    const tim_result *r = p->tim;
    double step = r->step_s;
    char t1[32];
    if (p->opts.steps_per_exec < 32 && r->host_s > 0.01 * step) {
        tim_opts o = p->topts;
        o.steps_per_exec = 32;
        double then = adv_rerun_opts(ctx, p, &o);
        if (then > 0 && then < step * 0.99) {
            ut_buf b;
            ut_buf_init(&b);
            adv_time(t1, sizeof t1, r->host_s);
            ut_buf_printf(&b, "Program launches cost %.0f%% of the step (%s of host round trip per step at %d step%s per\n"
                              "   execution). Raise steps_per_execution to 32 (Keras compile(steps_per_execution=32), or a\n"
                              "   jax.lax.fori_loop over steps; --steps-per-exec 32 here).\n",
                          100 * r->host_s / step, t1, p->opts.steps_per_exec, p->opts.steps_per_exec == 1 ? "" : "s");
            adv_gain_line(&b, step, then);
            adv_add(L, step - then, &b);
        }
    }
}

/* F32 matmuls: the mixed_bfloat16 policy, modelled on the rewritten program. */
static void adv_mixed_bfloat16(tpu_ctx *ctx, const prf_profile *p, adv_list *L)
{
    const tim_result *r = p->tim;
    double step = r->step_s;
    double f32_mxu = 0, f32_any = 0;
    for (int i = 0; i < r->nops; i++) {
        const tim_op *t = &r->ops[i];
        if (t->op->kind == CMP_CONTROL || !adv_is_f32_mxu(t)) continue;
        f32_any += t->time_s * t->count;
        if (t->bound == TIM_BOUND_COMPUTE) f32_mxu += t->time_s * t->count;
    }
    int mixed = p->opts.policy && !strcmp(p->opts.policy, "mixed_bfloat16");
    if (!mixed && f32_any > 0.05 * step) {
        double mxu_then = 0;
        double then = adv_rerun_policy(ctx, p, "mixed_bfloat16", &mxu_then);
        if (then > 0 && then < step * 0.98) {
            ut_buf b;
            ut_buf_init(&b);
            ut_buf_printf(&b, "Enable mixed bfloat16 (Keras mixed_precision.set_global_policy('mixed_bfloat16'); --policy\n"
                              "   mixed_bfloat16 here): %.0f%% of the step is matmuls and convolutions on float32 operands",
                          100 * f32_any / step);
            if (f32_mxu > 0) ut_buf_printf(&b, " (%.0f%% MXU-bound, some at HIGH/HIGHEST precision: 3-6 bf16 passes)", 100 * f32_mxu / step);
            ut_buf_puts(&b, ",\n   and float32 activations double the HBM traffic. Modelled on the rewritten program:\n");
            adv_gain_line(&b, step, then);
            adv_add(L, step - then, &b);
        }
    }
}

/* MXU padding: dimensions that are not multiples of the array (and of 8 for streamed rows). */
static void adv_mxu_padding(tpu_ctx *ctx, const prf_profile *p, adv_list *L)
{
    const tim_result *r = p->tim;
    const chp_chip *chip = &p->slice.chip;
    double step = r->step_s;
    char t1[32];
    double waste_s = 0;
    int listed = 0;
    ut_buf b;
    ut_buf_init(&b);
    for (int i = 0; i < r->nops && listed < 5; i++) {
        const tim_op *t = &r->ops[p->order[i]];
        double tt = t->time_s * t->count;
        if (t->mxu_flops <= 0 || t->pad_waste < 0.25 || tt < 0.01 * step || t->bound != TIM_BOUND_COMPUTE) continue;
        int64_t B, M, N, K;
        if (!tim_gemm_of(t, &B, &M, &N, &K)) continue;
        if (!listed)
            ut_buf_printf(&b, "Padding wastes MXU passes: the %dx%d MXU works on whole %d-wide tiles of the held and contracted\n"
                              "   dimensions and 8-row groups of the streamed one. The worst ops:\n",
                          chip->mxu_rows, chip->mxu_cols, chip->mxu_cols);
        char lbl[200];
        prf_op_label(t, lbl, sizeof lbl);
        int64_t held = M < N ? M : N, stream = M < N ? N : M;
        ut_buf_printf(&b, "   - %s: %lld x [%lld,%lld]x[%lld,%lld], %.0f%% of its MXU work is padding (%.1f%% of the step);",
                      lbl, (long long)B, (long long)M, (long long)K, (long long)K, (long long)N, 100 * t->pad_waste, 100 * tt / step);
        if (held % chip->mxu_cols) ut_buf_printf(&b, " %lld is not a multiple of %d;", (long long)held, chip->mxu_cols);
        if (K % chip->mxu_rows) ut_buf_printf(&b, " K=%lld is not a multiple of %d;", (long long)K, chip->mxu_rows);
        if (stream % 8) ut_buf_printf(&b, " %lld is not a multiple of 8;", (long long)stream);
        if (b.len && b.data[b.len - 1] == ';') b.len--;
        ut_buf_putc(&b, '\n');
        waste_s += tt * t->pad_waste;
        listed++;
    }
    if (listed) {
        adv_time(t1, sizeof t1, waste_s);
        ut_buf_printf(&b, "   Fix: make batch and feature sizes multiples of %d (hidden sizes, heads x head_dim, vocabulary,\n"
                          "   filters), e.g. pad them up: the same MXU time then does useful work. Predicted: %s per step\n"
                          "   (%.0f%%) of these ops' MXU time is padding that would become useful work.\n",
                      chip->mxu_cols, t1, 100 * waste_s / step);
        adv_add(L, waste_s, &b);
    } else {
        ut_buf_free(&b);
    }
}

/* Small matmuls: the MXU waits on weight loads and fill/drain. */
static void adv_small_matmuls(tpu_ctx *ctx, const prf_profile *p, adv_list *L)
{
    const tim_result *r = p->tim;
    const chp_chip *chip = &p->slice.chip;
    double step = r->step_s;
    char t1[32];
    int listed = 0;
    double idle_s = 0;
    ut_buf b;
    ut_buf_init(&b);
    double peak = tim_mxu_peak_flops(chip);
    for (int i = 0; i < r->nops && listed < 3; i++) {
        const tim_op *t = &r->ops[p->order[i]];
        double tt = t->time_s * t->count;
        if (t->mxu_flops <= 0 || t->mxu_s <= 0 || tt < 0.02 * step || t->bound != TIM_BOUND_COMPUTE) continue;
        double eff = t->mxu_flops / (t->mxu_s * peak);   /* useful share of the MXU time */
        if (eff > 0.5 || t->pad_waste > 0.5) continue;
        int64_t B, M, N, K;
        if (!tim_gemm_of(t, &B, &M, &N, &K)) continue;
        int64_t stream = M > N ? M : N;
        double now = tim_mxu_gemm_s(chip, B, M, N, K, t->mxu_passes, NULL);
        double x4 = M >= N ? tim_mxu_gemm_s(chip, B, M * 4, N, K, t->mxu_passes, NULL)
                           : tim_mxu_gemm_s(chip, B, M, N * 4, K, t->mxu_passes, NULL);
        if (!listed)
            ut_buf_puts(&b, "Small matmuls leave the MXU idle: too few rows stream through each weight tile to hide its load\n"
                            "   and the array's fill and drain.\n");
        char lbl[200];
        prf_op_label(t, lbl, sizeof lbl);
        ut_buf_printf(&b, "   - %s: %lld x [%lld,%lld]x[%lld,%lld] uses %.0f%% of the MXU; 4x the rows (%lld) would take\n"
                          "     %.2fx the time (modelled).\n",
                      lbl, (long long)B, (long long)M, (long long)K, (long long)K, (long long)N, 100 * eff,
                      (long long)stream * 4, now > 0 ? x4 / now : 0);
        idle_s += tt * (1 - eff);
        listed++;
    }
    if (listed) {
        adv_time(t1, sizeof t1, idle_s);
        ut_buf_printf(&b, "   Fix: larger batches (per-device batch of at least a few hundred rows per matmul), fuse small\n"
                          "   matmuls (e.g. batch the heads), or use a smaller slice. %s of these ops' time is MXU idle time.\n",
                      t1);
        adv_add(L, idle_s * 0.5, &b);
    } else {
        ut_buf_free(&b);
    }
}

/* Gathers, scatters and other data-dependent ops. */
static void adv_dynamic_ops(tpu_ctx *ctx, const prf_profile *p, adv_list *L)
{
    const tim_result *r = p->tim;
    double step = r->step_s;
    char t1[32];
    double dyn = 0;
    const tim_op *worst = NULL;
    for (int i = 0; i < r->nops; i++) {
        const tim_op *t = &r->ops[i];
        if (t->op->kind == CMP_CONTROL || !adv_is_dynamic((hlo_op)t->root->op)) continue;
        dyn += t->time_s * t->count;
        if (!worst || t->time_s * t->count > worst->time_s * worst->count) worst = t;
    }
    if (dyn > 0.15 * step && worst) {
        ut_buf b;
        ut_buf_init(&b);
        char lbl[200];
        prf_op_label(worst, lbl, sizeof lbl);
        adv_time(t1, sizeof t1, dyn);
        ut_buf_printf(&b, "Dynamic gathers, scatters and sorts take %s (%.0f%% of the step); the largest is %s (%s).\n"
                          "   They run on the vector unit with data-dependent addresses and move whole padded tiles.\n"
                          "   Fix: one-hot matmuls for small tables (the MXU does them faster), sorted or bucketed indices,\n"
                          "   embedding lookups on SparseCores where the chip has them (v5p, v6e, v7). Up to %s is at stake.\n",
                      t1, 100 * dyn / step, lbl, hlo_op_name((hlo_op)worst->root->op), t1);
        adv_add(L, dyn * 0.5, &b);
    }
}

/* Collectives. */
static void adv_collectives(tpu_ctx *ctx, const prf_profile *p, adv_list *L)
{
    const tim_result *r = p->tim;
    double step = r->step_s;
    char t1[32], t2[32];
    if (r->by_bound[TIM_BOUND_COLLECTIVE] > 0.15 * step) {
        double coll = r->by_bound[TIM_BOUND_COLLECTIVE], compute = r->by_bound[TIM_BOUND_COMPUTE];
        double bytes = 0;
        int n = 0;
        for (int i = 0; i < r->nops; i++) {
            const tim_op *t = &r->ops[i];
            if (t->op->kind == CMP_CONTROL || !adv_is_collective((hlo_op)t->root->op)) continue;
            bytes += (double)t->ici_bytes * t->count;
            n++;
        }
        ut_buf b;
        ut_buf_init(&b);
        adv_time(t1, sizeof t1, coll);
        /* what is left after the collectives the model already ran beside compute (r->collective_hidden_s) */
        double hide = coll < compute - r->collective_hidden_s ? coll : compute - r->collective_hidden_s;
        if (hide < 0) hide = 0;
        adv_time(t2, sizeof t2, hide);
        /* the model already ran each collective beside the compute independent of it: what is left waits for
         * the ops that feed it or holds up the ops that read it */
        ut_buf_printf(&b, "Collectives take %s of the step that compute does not hide (%.0f%%): %d collective ops move %.3g GB per device over ICI on\n"
                          "   %s (%d chips). They wait for the ops that feed them or hold up the ops that read them.\n"
                          "   Fix: a larger per-device batch (the gradient all-reduce does not grow with it), gradient\n"
                          "   accumulation, fewer and larger collectives (XLA combines small ones), independent work\n"
                          "   beside them (split them, pipeline them over layers): up to %s could hide behind the MXU work.\n",
                      t1, 100 * coll / step, n, bytes / 1e9, p->slice.name, p->slice.chips, t2);
        adv_add(L, hide, &b);
    }
}

/* HBM bound: how much of the traffic is layout padding. */
static void adv_hbm_bound(tpu_ctx *ctx, const prf_profile *p, adv_list *L)
{
    const tim_result *r = p->tim;
    double step = r->step_s;
    char t1[32], t2[32];
    if (r->by_bound[TIM_BOUND_MEMORY] > 0.3 * step) {
        double padded = 0, unpadded = 0;
        for (int i = 0; i < r->nops; i++) {
            const tim_op *t = &r->ops[i];
            if (t->op->kind == CMP_CONTROL || t->bound != TIM_BOUND_MEMORY) continue;
            const cmp_op *op = t->op;
            for (int k = 0; k < op->nin; k++) {
                padded += (double)p->prog->values[op->in[k]].padded * t->count;
                unpadded += (double)p->prog->values[op->in[k]].unpadded * t->count;
            }
            for (int k = 0; k < op->nout; k++) {
                padded += (double)p->prog->values[op->out[k]].padded * t->count;
                unpadded += (double)p->prog->values[op->out[k]].unpadded * t->count;
            }
        }
        double mem = r->by_bound[TIM_BOUND_MEMORY];
        double frac = padded > 0 ? 1 - unpadded / padded : 0;
        ut_buf b;
        ut_buf_init(&b);
        adv_time(t1, sizeof t1, mem);
        ut_buf_printf(&b, "The step is HBM-bandwidth bound: memory-bound ops take %s (%.0f%% of the step).\n", t1, 100 * mem / step);
        if (frac > 0.1) {
            adv_time(t2, sizeof t2, mem * frac);
            ut_buf_printf(&b, "   %.0f%% of their traffic is layout padding (arrays are tiled (8,128) in HBM: the last dimension\n"
                              "   pads to 128, the second last to 8). Fix: feature dims multiples of 128 and the dimension\n"
                              "   before them multiples of 8, or put the large dimension last. Up to %s per step.\n",
                          100 * frac, t2);
        } else {
            ut_buf_puts(&b, "   Fix: bfloat16 activations, fewer materialized intermediates (remat choices), larger fusions.\n");
        }
        adv_add(L, frac > 0.1 ? mem * frac : 0, &b);
    }
}

/* Vector-bound: elementwise and reduction work, and how much of it runs on padding lanes. */
static void adv_vector_bound(tpu_ctx *ctx, const prf_profile *p, adv_list *L)
{
    const tim_result *r = p->tim;
    const chp_chip *chip = &p->slice.chip;
    double step = r->step_s;
    char t1[32], t2[32];
    if (r->by_bound[TIM_BOUND_VECTOR] > 0.2 * step) {
        double vec = r->by_bound[TIM_BOUND_VECTOR], pad_s = 0;
        const tim_op *worst = NULL;
        double worst_fill = 1;
        for (int i = 0; i < r->nops; i++) {
            const tim_op *t = &r->ops[i];
            if (t->op->kind == CMP_CONTROL || t->bound != TIM_BOUND_VECTOR) continue;
            /* lanes used: elements over elements padded to (8,128) f32 vector registers */
            double used = 0, padded = 0;
            for (int m = 0; m < t->op->ninstrs; m++) {
                hlo_shape f = cmp_instr_shape(p->prog, t->op->instrs[m]);   /* in its assigned layout */
                const hlo_shape *s = &t->op->instrs[m]->shape;
                if (!hlo_shape_is_array(s) || !tpu_dtype_size((tpu_dtype)s->dtype)) continue;
                f.dtype = TPU_F32;
                used += (double)hlo_shape_count(s);
                padded += (double)cmp_padded_bytes(chip, &f) / 4.0;
            }
            double fill = padded > 0 ? used / padded : 1;
            pad_s += t->time_s * t->count * (1 - fill);
            if (fill < worst_fill && t->time_s * t->count > 0.01 * step) {
                worst_fill = fill;
                worst = t;
            }
        }
        ut_buf b;
        ut_buf_init(&b);
        adv_time(t1, sizeof t1, vec);
        ut_buf_printf(&b, "The vector unit bounds %s (%.0f%% of the step): elementwise math, reductions and\n"
                          "   transcendentals (exp, log, divide) that the MXU cannot do.\n", t1, 100 * vec / step);
        if (worst && pad_s > 0.05 * vec) {
            char lbl[200];
            prf_op_label(worst, lbl, sizeof lbl);
            adv_time(t2, sizeof t2, pad_s);
            ut_buf_printf(&b, "   %s of it computes padding lanes: arrays are processed in (8,128) registers, so a small last\n"
                              "   dimension wastes lanes. The worst: %s uses %.1f%% of its lanes.\n"
                              "   Fix: lay arrays out with a large last dimension (multiples of 128), transpose size-1 or small\n"
                              "   dimensions away from the end. Up to %s per step.\n",
                          t2, lbl, 100 * worst_fill, t2);
        } else {
            ut_buf_puts(&b, "   Fix: bfloat16 for elementwise chains where accuracy allows, fuse softmax/normalization work\n"
                            "   (e.g. a flash-attention kernel keeps the scores in VMEM), fewer transcendentals.\n");
            pad_s = 0;
        }
        adv_add(L, pad_s, &b);
    }
}

/* Launch-bound programs: many tiny ops. */
static void adv_launch_bound(tpu_ctx *ctx, const prf_profile *p, adv_list *L)
{
    const tim_result *r = p->tim;
    const chp_chip *chip = &p->slice.chip;
    double step = r->step_s;
    if (r->by_bound[TIM_BOUND_OVERHEAD] > 0.2 * step) {
        ut_buf b;
        ut_buf_init(&b);
        ut_buf_printf(&b, "Small ops dominate: %.0f%% of the step is per-op launch cost (%.2g us per op). Larger batches\n"
                          "   or fewer, bigger ops (vectorize loops with vmap, avoid per-element while loops) help.\n",
                      100 * r->by_bound[TIM_BOUND_OVERHEAD] / step, chip->op_overhead_s * 1e6);
        adv_add(L, r->by_bound[TIM_BOUND_OVERHEAD] * 0.5, &b);
    }
}

/* It does not fit. */
static void adv_does_not_fit(tpu_ctx *ctx, const prf_profile *p, adv_list *L)
{
    if (!p->mem.fits) {
        ut_buf b;
        ut_buf_init(&b);
        char u[32], c[32];
        cmp_fmt_bytes(u, sizeof u, p->mem.used);
        cmp_fmt_bytes(c, sizeof c, p->mem.capacity);
        ut_buf_printf(&b, "The program does not fit: it needs %s of HBM per device and %s is available (tpusim memory\n"
                          "   lists the largest allocations). The times above assume it ran; shard it over more devices,\n"
                          "   rematerialize activations, or use a chip with more HBM.\n", u, c);
        adv_add(L, 1e30, &b);   /* first: nothing else matters until it fits */
    }
}

/* The rules, in the order they are tried; each appends at most one pointer. Rules may assume a step that
 * takes time. */
typedef void (*adv_rule_fn)(tpu_ctx *ctx, const prf_profile *p, adv_list *L);
static const struct {
    const char *name;
    adv_rule_fn fn;
} adv_rules[] = {
    {"input", adv_input},
    {"steps_per_exec", adv_steps_per_exec},
    {"mixed_bfloat16", adv_mixed_bfloat16},
    {"mxu_padding", adv_mxu_padding},
    {"small_matmuls", adv_small_matmuls},
    {"dynamic_ops", adv_dynamic_ops},
    {"collectives", adv_collectives},
    {"hbm_bound", adv_hbm_bound},
    {"vector_bound", adv_vector_bound},
    {"launch_bound", adv_launch_bound},
    {"does_not_fit", adv_does_not_fit},
};
#define ADV_NRULES ((int)(sizeof adv_rules / sizeof *adv_rules))

static void adv_list_free(adv_list *L)
{
    for (int i = 0; i < L->n; i++) ut_free(L->v[i].text);
    ut_free(L->v);
}

const char *prf_advise_rule_name(int i) { return i >= 0 && i < ADV_NRULES ? adv_rules[i].name : NULL; }

tpu_status prf_advise_rule(tpu_ctx *ctx, const prf_profile *p, const char *rule, ut_buf *out, double *gain_s)
{
    int k = 0;
    while (k < ADV_NRULES && strcmp(adv_rules[k].name, rule)) k++;
    if (k == ADV_NRULES) return ut_err(ctx, TPU_ERR_INVALID, "no advisor rule '%s'", rule);
    if (gain_s) *gain_s = 0;
    if (p->tim->step_s <= 0) return TPU_OK;
    adv_list L = {0};
    adv_rules[k].fn(ctx, p, &L);
    if (L.n && !L.failed) {
        ut_buf_puts(out, L.v[0].text);
        if (gain_s) *gain_s = L.v[0].gain_s;
    }
    tpu_status st = L.failed ? ut_nomem(ctx) : TPU_OK;
    adv_list_free(&L);
    return st;
}

tpu_status prf_advise(tpu_ctx *ctx, const prf_profile *p, ut_buf *out)
{
    const tim_result *r = p->tim;
    if (r->step_s <= 0) {
        ut_buf_puts(out, "The step takes no time: nothing to advise.\n");
        return out->failed ? ut_nomem(ctx) : TPU_OK;
    }
    assert(p->order || !r->nops);   /* the padding and small-matmul rules walk the ops by time */
    adv_list L = {0};
    for (int k = 0; k < ADV_NRULES; k++) adv_rules[k].fn(ctx, p, &L);
    if (L.failed) {
        adv_list_free(&L);
        return ut_nomem(ctx);
    }
    if (L.n) qsort(L.v, (size_t)L.n, sizeof *L.v, adv_by_gain);
    for (int i = 0; i < L.n; i++) {
        ut_buf_printf(out, "%d. %s", i + 1, L.v[i].text);
        ut_free(L.v[i].text);
    }
    ut_free(L.v);
    if (!L.n) ut_buf_puts(out, "No obvious problems: the step is dominated by useful work.\n");
    if (r->unknown_trips)
        ut_buf_printf(out, "Note: %d while loop%s had a trip count tpusim could not infer and %s counted once; the real step\n"
                           "   may be longer.\n", r->unknown_trips, r->unknown_trips == 1 ? "" : "s", r->unknown_trips == 1 ? "was" : "were");
    return out->failed ? ut_nomem(ctx) : TPU_OK;
}
