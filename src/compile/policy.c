/* policy.c — precision policies as module rewrites. `mixed_bfloat16` does to a float32 program what Keras'
 * mixed_bfloat16 policy does to a model: activations and gradients in bfloat16, variables and their updates
 * in float32. In HLO terms:
 *   - parameters and constants keep float32 (they are the variables and inputs; uses convert them);
 *   - dots and convolutions take bf16 operands and produce bf16 (the MXU's native form);
 *   - elementwise and data-movement ops compute in bf16;
 *   - reductions, scatters, sorts, control flow and custom-calls keep float32 (their operands are converted
 *     back: sums accumulate in f32, like Keras' layers that compute statistics in float32);
 *   - the optimizer update — the elementwise chain that ends in an output with the shape of an f32
 *     parameter (the new value of a variable or of optimizer state) — stays float32;
 *   - outputs keep their types, so the rewritten program has the same signature.
 * The rewrite edits a clone of the module (hlo_module_clone), inserting converts; the result is verified. */
#include "compile.h"
#include "policy.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

static int pol_is_elementwise(const hlo_instr *in)
{
    hlo_class c = hlo_op_class((hlo_op)in->op);
    if (c == HLO_CLASS_EW1 || c == HLO_CLASS_EW2 || c == HLO_CLASS_EW3) return 1;
    switch ((hlo_op)in->op) {
    case HLO_BROADCAST: case HLO_RESHAPE: case HLO_TRANSPOSE: case HLO_SLICE: case HLO_DYNAMIC_SLICE:
    case HLO_DYNAMIC_UPDATE_SLICE: case HLO_PAD: case HLO_REVERSE: case HLO_CONCATENATE: case HLO_COPY:
    case HLO_GATHER: case HLO_IOTA: case HLO_BITCAST:
        return 1;
    default: return 0;
    }
}

/* Ops that compute in bf16 under the policy (their f32 results become bf16). */
static int pol_computes_bf16(const hlo_instr *in)
{
    return pol_is_elementwise(in) || in->op == HLO_DOT || in->op == HLO_CONVOLUTION || in->op == HLO_RNG;
}

typedef struct pol_state {
    tpu_ctx    *ctx;
    hlo_module *m;
    uint8_t    *keep;      /* per instruction of the current computation: stays f32 (update path) */
    uint8_t    *to_bf16;   /* per instruction: result retyped f32 -> bf16 */
    int         nconv;
} pol_state;

static hlo_instr *pol_convert(pol_state *P, hlo_comp *c, hlo_instr *src, tpu_dtype to, const hlo_instr *at)
{
    hlo_instr *cv = ut_arena_alloc(&P->m->arena, sizeof *cv);
    hlo_instr **ops = ut_arena_alloc(&P->m->arena, sizeof *ops);
    char name[256];
    snprintf(name, sizeof name, "%.200s.%s.%d", src->name, to == TPU_BF16 ? "bf16" : "f32", P->nconv++);
    if (!cv || !ops) return NULL;
    cv->name = ut_arena_strdup(&P->m->arena, name);
    if (!cv->name) return NULL;
    cv->op = HLO_CONVERT;
    cv->shape = src->shape;
    cv->shape.dtype = (uint8_t)to;
    cv->nops = 1;
    cv->ops = ops;
    ops[0] = src;
    cv->parent = c;
    cv->line = at->line;
    cv->col = at->col;
    return cv;
}

/* Marks the update path: elementwise chains (incl. broadcasts/reshapes of scalars) feeding an entry output
 * whose shape equals an f32 parameter's shape. */
static void pol_mark_updates(pol_state *P, const hlo_comp *c, const hlo_instr *in)
{
    if (P->keep[in->id]) return;
    if (!(pol_is_elementwise(in) || in->op == HLO_CONVERT) || in->op == HLO_GATHER) return;
    P->keep[in->id] = 1;
    for (int i = 0; i < in->nops; i++) pol_mark_updates(P, c, in->ops[i]);
}

static int pol_matches_param(const hlo_comp *c, const hlo_shape *s)
{
    if (!hlo_shape_is_array(s) || s->dtype != TPU_F32) return 0;
    for (int i = 0; i < c->nparams; i++) {
        const hlo_shape *ps = &c->params[i]->shape;
        if (hlo_shape_is_tuple(ps)) {
            for (int k = 0; k < ps->ntuple; k++)
                if (hlo_shape_same(&ps->tuple[k], s)) return 1;
        } else if (hlo_shape_same(ps, s)) {
            return 1;
        }
    }
    return 0;
}

static tpu_status pol_rewrite_comp(pol_state *P, hlo_comp *c, int is_entry)
{
    int n = c->ninstrs;
    P->keep = ut_calloc((size_t)n, 1);
    P->to_bf16 = ut_calloc((size_t)n, 1);
    hlo_instr **cvt_bf16 = ut_calloc((size_t)n, sizeof *cvt_bf16);   /* cached converts of each instruction */
    hlo_instr **cvt_f32 = ut_calloc((size_t)n, sizeof *cvt_f32);
    hlo_instr **out = ut_malloc((size_t)(3 * n + 8) * sizeof *out);
    tpu_status st = TPU_OK;
    if (!P->keep || !P->to_bf16 || !cvt_bf16 || !cvt_f32 || !out) {
        st = ut_nomem(P->ctx);
        goto done;
    }
    if (is_entry) {
        const hlo_instr *r = c->root;
        if (r->op == HLO_TUPLE) {
            for (int i = 0; i < r->nops; i++)
                if (pol_matches_param(c, &r->ops[i]->shape)) pol_mark_updates(P, c, r->ops[i]);
        } else if (pol_matches_param(c, &r->shape)) {
            pol_mark_updates(P, c, r);
        }
    }
    int nout = 0;
    for (int i = 0; i < n; i++) {
        hlo_instr *in = c->instrs[i];
        /* the type each operand must have: bf16 for ops computing in bf16, else the operand's original type */
        int bf = pol_computes_bf16(in) && !P->keep[i] && hlo_shape_is_array(&in->shape) &&
                 (in->shape.dtype == TPU_F32 || in->shape.dtype == TPU_PRED || in->op == HLO_COMPARE);
        if (in->op == HLO_COMPARE) {
            /* compare in bf16 when either side became bf16 */
            bf = 0;
            for (int k = 0; k < in->nops; k++) bf |= P->to_bf16[in->ops[k]->id];
        }
        if (in->op == HLO_SELECT || in->op == HLO_CLAMP) bf = bf && !P->keep[i];
        for (int k = 0; k < in->nops; k++) {
            hlo_instr *o = in->ops[k];
            int o_bf = P->to_bf16[o->id];
            int want_bf = 0, want_f32 = 0;
            if (!hlo_shape_is_array(&o->shape)) continue;
            if (bf && (o->shape.dtype == TPU_F32 || o_bf) && !(in->op == HLO_SELECT && k == 0)) want_bf = !o_bf && o->shape.dtype == TPU_F32;
            else if (o_bf && (!bf || (in->op == HLO_DYNAMIC_SLICE && k > 0))) want_f32 = 1;
            /* index operands and the pad value of pad keep their own types */
            if ((in->op == HLO_DYNAMIC_SLICE || in->op == HLO_DYNAMIC_UPDATE_SLICE || in->op == HLO_GATHER) &&
                o->shape.dtype != TPU_F32 && !o_bf)
                want_bf = want_f32 = 0;
            if (want_bf) {
                if (!cvt_bf16[o->id]) {
                    cvt_bf16[o->id] = pol_convert(P, c, o, TPU_BF16, in);
                    if (!cvt_bf16[o->id]) { st = ut_nomem(P->ctx); goto done; }
                    out[nout++] = cvt_bf16[o->id];
                }
                in->ops[k] = cvt_bf16[o->id];
            } else if (want_f32) {
                if (!cvt_f32[o->id]) {
                    cvt_f32[o->id] = pol_convert(P, c, o, TPU_F32, in);
                    if (!cvt_f32[o->id]) { st = ut_nomem(P->ctx); goto done; }
                    out[nout++] = cvt_f32[o->id];
                }
                in->ops[k] = cvt_f32[o->id];
            }
        }
        if (bf && in->shape.dtype == TPU_F32) {
            in->shape.dtype = TPU_BF16;
            P->to_bf16[i] = 1;
        }
        /* tuples and get-tuple-element carry their operands' types */
        if (in->op == HLO_TUPLE) {
            for (int k = 0; k < in->nops && k < in->shape.ntuple; k++)
                if (hlo_shape_is_array(&in->ops[k]->shape)) in->shape.tuple[k].dtype = in->ops[k]->shape.dtype;
        }
        out[nout++] = in;
    }
    /* outputs keep their original types */
    if (is_entry || c->root) {
        hlo_instr *r = c->root;
        if (r->op == HLO_TUPLE) {
            for (int k = 0; k < r->nops; k++) {
                hlo_instr *o = r->ops[k];
                if (o->op == HLO_CONVERT && o->nops == 1 && P->nconv && strstr(o->name, ".f32.")) continue;
                if (hlo_shape_is_array(&o->shape) && o->shape.dtype == TPU_BF16 && r->shape.tuple[k].dtype == TPU_BF16 &&
                    P->to_bf16[o->id]) {
                    hlo_instr *cv = pol_convert(P, c, o, TPU_F32, r);
                    if (!cv) { st = ut_nomem(P->ctx); goto done; }
                    /* insert before the root */
                    out[nout] = out[nout - 1];
                    out[nout - 1] = cv;
                    nout++;
                    r->ops[k] = cv;
                    r->shape.tuple[k].dtype = TPU_F32;
                }
            }
        } else if (P->to_bf16[r->id]) {
            hlo_instr *cv = pol_convert(P, c, r, TPU_F32, r);
            if (!cv) { st = ut_nomem(P->ctx); goto done; }
            r->is_root = 0;
            cv->is_root = 1;
            c->root = cv;
            out[nout++] = cv;
        }
    }
    /* each instruction, at most one convert to bf16 of each f32 one and two converts to f32 of each bf16 one
     * (for f32 readers, for the outputs), one root convert */
    assert(nout <= 3 * n + 8);
    c->instrs = ut_arena_alloc(&P->m->arena, (size_t)nout * sizeof *c->instrs);
    if (!c->instrs) { st = ut_nomem(P->ctx); goto done; }
    memcpy(c->instrs, out, (size_t)nout * sizeof *out);
    c->ninstrs = nout;
    for (int i = 0; i < nout; i++) c->instrs[i]->id = i;
done:
    ut_free(P->keep);
    ut_free(P->to_bf16);
    ut_free(cvt_bf16);
    ut_free(cvt_f32);
    ut_free(out);
    P->keep = P->to_bf16 = NULL;
    return st;
}

/* Computations that run as program flow (entry, while/conditional/call bodies): the ones rewritten. */
static void pol_mark_flow(const hlo_comp *c, uint8_t *flow)
{
    if (flow[c->id]) return;
    flow[c->id] = 1;
    for (int i = 0; i < c->ninstrs; i++) {
        const hlo_instr *in = c->instrs[i];
        if (in->op == HLO_WHILE || in->op == HLO_CONDITIONAL || in->op == HLO_CALL)
            for (int k = 0; k < in->ncalled; k++) pol_mark_flow(in->called[k], flow);
    }
}

tpu_status cmp_rewrite_done(tpu_ctx *ctx, hlo_module *m, const char *what)
{
    hlo_module_renumber(m);
    tpu_status st = cmp_verify_or_fail(ctx, m);
    if (st && st != TPU_ERR_NOMEM) ut_err_prefix(ctx, "internal: %s produced a module that does not verify", what);
    return st;
}

static tpu_status pol_mixed_bf16(tpu_ctx *ctx, hlo_module *c)
{
    /* calls and control flow keep f32 at their boundaries: their callee signatures stay as they are */
    uint8_t *flow = ut_calloc((size_t)c->ncomps, 1);
    if (!flow) return ut_nomem(ctx);
    pol_mark_flow(c->entry, flow);
    pol_state P;
    memset(&P, 0, sizeof P);
    P.ctx = ctx;
    P.m = c;
    tpu_status st = TPU_OK;
    for (int i = 0; i < c->ncomps && !st; i++)
        if (flow[i]) st = pol_rewrite_comp(&P, c->comps[i], c->comps[i] == c->entry);
    ut_free(flow);
    return st ? st : cmp_rewrite_done(ctx, c, "the mixed_bfloat16 rewrite");
}

tpu_status cmp_apply_policy(tpu_ctx *ctx, const hlo_module *m, const char *policy, hlo_module **out)
{
    *out = NULL;
    if (!policy || !strcmp(policy, "float32")) policy = "float32";
    else if (strcmp(policy, "mixed_bfloat16"))
        return ut_err(ctx, TPU_ERR_INVALID, "unknown precision policy '%s' (known: float32, mixed_bfloat16)", policy);
    hlo_module *c = NULL;
    tpu_status st = hlo_module_clone(ctx, m, &c);
    if (st || !strcmp(policy, "float32")) {
        *out = c;
        return st;
    }
    /* the rewrite reads shapes: the input must verify */
    st = cmp_verify_or_fail(ctx, m);
    if (!st) st = pol_mixed_bf16(ctx, c);
    if (st) {
        hlo_module_free(c);
        return st;
    }
    *out = c;
    return TPU_OK;
}
