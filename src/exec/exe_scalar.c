/* exe_scalar.c — compiles small scalar computations (reducers, comparators, scatter combiners, map bodies)
 * into a flat register program and evaluates it per element without allocating tensors. */
#include "exec.h"
#include "exe_ops.h"
#include "exe_fuse.h"
#include "util/fp.h"

#include <stdlib.h>
#include <string.h>

typedef struct exe_sinstr {
    uint16_t         op;
    uint8_t          dtype;      /* result dtype */
    uint8_t          in_dtype;   /* dtype of operand a (compare, convert) */
    int              a, b, c;    /* operand registers */
    exe_scalar       k;          /* constant / parameter number in k.i */
    const char      *dir, *type; /* compare */
    int              ebits, mbits;
    const exe_scalar_fn *sub;    /* call */
    int             *sub_args;
} exe_sinstr;

struct exe_scalar_fn {
    const exe_state *S;
    int              n;
    exe_sinstr      *code;
    int              nparams;
    uint8_t          pdtype[64];
    int              nresults;
    int              res[64];
    uint8_t          rdtype[64];
    hlo_op           binop;
    exe_vfn         *vfn;         /* the same computation on many lanes at once, or NULL */
};

static tpu_status exe_sfn_build(exe_state *S, const hlo_comp *c, exe_scalar_fn **out);

tpu_status exe_scalar_fn_get(exe_state *S, const hlo_comp *c, const exe_scalar_fn **fn)
{
    if (!S->scalar_fns) {
        S->scalar_fns = ut_calloc((size_t)S->m->ncomps, sizeof *S->scalar_fns);
        if (!S->scalar_fns) return ut_nomem(S->ctx);
    }
    if (!S->scalar_fns[c->id]) {
        exe_scalar_fn *f = NULL;
        tpu_status st = exe_sfn_build(S, c, &f);
        if (st) return st;
        S->scalar_fns[c->id] = f;
    }
    *fn = S->scalar_fns[c->id];
    return TPU_OK;
}

void exe_scalar_fn_free(exe_scalar_fn *f)
{
    if (!f) return;
    for (int i = 0; i < f->n; i++) ut_free(f->code[i].sub_args);
    ut_free(f->code);
    exe_vfn_free(f->vfn);
    ut_free(f);
}

static int exe_is_commutative(hlo_op op)
{
    return op == HLO_ADD || op == HLO_MULTIPLY || op == HLO_MAXIMUM || op == HLO_MINIMUM || op == HLO_AND ||
           op == HLO_OR || op == HLO_XOR;
}

static tpu_status exe_sfn_unsupported(exe_state *S, const hlo_comp *c, const hlo_instr *in, const char *why)
{
    return ut_err(S->ctx, TPU_ERR_UNSUPPORTED, "%s:%d:%d: computation '%s' applied per element: instruction '%s' (%s) %s",
                  S->m->filename, in->line, in->col, c->name, in->name, hlo_op_name((hlo_op)in->op), why);
}

static tpu_status exe_sfn_build(exe_state *S, const hlo_comp *c, exe_scalar_fn **out)
{
    exe_scalar_fn *f = ut_calloc(1, sizeof *f);
    if (!f) return ut_nomem(S->ctx);
    f->S = S;
    f->n = c->ninstrs;
    f->code = ut_calloc((size_t)c->ninstrs, sizeof *f->code);
    if (!f->code) {
        ut_free(f);
        return ut_nomem(S->ctx);
    }
    f->binop = HLO_OP_COUNT;
    tpu_status st = TPU_OK;
    if (c->nparams > 64) st = ut_err(S->ctx, TPU_ERR_UNSUPPORTED, "computation '%s' has too many parameters", c->name);
    f->nparams = c->nparams;
    for (int i = 0; !st && i < c->nparams; i++) {
        const hlo_shape *s = &c->params[i]->shape;
        if (!hlo_shape_is_array(s) || s->rank != 0)
            st = exe_sfn_unsupported(S, c, c->params[i], "is not a scalar parameter");
        else f->pdtype[i] = s->dtype;
    }
    for (int i = 0; !st && i < c->ninstrs; i++) {
        const hlo_instr *in = c->instrs[i];
        exe_sinstr *q = &f->code[i];
        q->op = in->op;
        q->dtype = in->shape.dtype;
        q->a = in->nops > 0 ? in->ops[0]->id : -1;
        q->b = in->nops > 1 ? in->ops[1]->id : -1;
        q->c = in->nops > 2 ? in->ops[2]->id : -1;
        if (in->nops > 0) q->in_dtype = in->ops[0]->shape.dtype;
        hlo_op op = (hlo_op)in->op;
        if (op == HLO_TUPLE) {
            if (in != c->root) { st = exe_sfn_unsupported(S, c, in, "tuple only allowed as the root"); break; }
            continue;
        }
        if (!hlo_shape_is_array(&in->shape) || in->shape.rank != 0) {
            st = exe_sfn_unsupported(S, c, in, "does not produce a scalar");
            break;
        }
        hlo_class cls = hlo_op_class(op);
        switch (op) {
        case HLO_PARAMETER: q->k.i = in->param_no; break;
        case HLO_CONSTANT:
            if (!in->literal || in->literal->elided) { st = exe_sfn_unsupported(S, c, in, "has no value"); break; }
            q->k = exe_scalar_load((tpu_dtype)in->shape.dtype, in->literal->data, 0);
            break;
        case HLO_COMPARE:
            q->dir = hlo_attr_str(in, HK_DIRECTION);
            q->type = hlo_attr_str(in, HK_TYPE);
            if (!q->dir) st = exe_sfn_unsupported(S, c, in, "has no direction");
            break;
        case HLO_REDUCE_PRECISION:
            q->ebits = (int)hlo_attr_int(in, HK_EXPONENT_BITS, 8);
            q->mbits = (int)hlo_attr_int(in, HK_MANTISSA_BITS, 23);
            break;
        case HLO_CALL:
            if (in->ncalled != 1) { st = exe_sfn_unsupported(S, c, in, "calls no computation"); break; }
            st = exe_scalar_fn_get(S, in->called[0], &q->sub);
            if (!st && in->nops) {
                q->sub_args = ut_malloc((size_t)in->nops * sizeof(int));
                if (!q->sub_args) st = ut_nomem(S->ctx);
                for (int k = 0; !st && k < in->nops; k++) q->sub_args[k] = in->ops[k]->id;
            }
            break;
        case HLO_CONVERT: case HLO_BITCAST_CONVERT: case HLO_COPY: case HLO_BITCAST: case HLO_SELECT:
        case HLO_CLAMP: case HLO_RESHAPE: case HLO_BROADCAST:
            break;
        default:
            if (cls != HLO_CLASS_EW1 && cls != HLO_CLASS_EW2) st = exe_sfn_unsupported(S, c, in, "is not supported per element");
            break;
        }
    }
    if (!st) {
        const hlo_instr *r = c->root;
        if (r->op == HLO_TUPLE) {
            if (r->nops > 64) st = ut_err(S->ctx, TPU_ERR_UNSUPPORTED, "computation '%s' returns too many values", c->name);
            f->nresults = r->nops;
            for (int i = 0; !st && i < r->nops; i++) {
                f->res[i] = r->ops[i]->id;
                f->rdtype[i] = r->ops[i]->shape.dtype;
            }
        } else {
            f->nresults = 1;
            f->res[0] = r->id;
            f->rdtype[0] = r->shape.dtype;
            /* a plain binary op of the two parameters? */
            if (c->nparams == 2 && c->ninstrs == 3 && hlo_op_class((hlo_op)r->op) == HLO_CLASS_EW2 && r->nops == 2 &&
                r->ops[0]->op == HLO_PARAMETER && r->ops[1]->op == HLO_PARAMETER && r->ops[0] != r->ops[1] &&
                (r->ops[0]->param_no == 0 || exe_is_commutative((hlo_op)r->op)) &&
                f->pdtype[0] == f->pdtype[1] && r->shape.dtype == f->pdtype[0])
                f->binop = (hlo_op)r->op;
        }
    }
    if (st) {
        exe_scalar_fn_free(f);
        return st;
    }
    f->vfn = exe_vfn_build(c);   /* NULL: lanes not available (no memory, or no block form): per element */
    *out = f;
    return TPU_OK;
}

const exe_vfn *exe_scalar_fn_vfn(const exe_scalar_fn *fn) { return fn->vfn; }

hlo_op exe_scalar_fn_binop(const exe_scalar_fn *fn) { return fn->binop; }
int exe_scalar_fn_nparams(const exe_scalar_fn *fn) { return fn->nparams; }
int exe_scalar_fn_nresults(const exe_scalar_fn *fn) { return fn->nresults; }
tpu_dtype exe_scalar_fn_param_dtype(const exe_scalar_fn *fn, int i) { return (tpu_dtype)fn->pdtype[i]; }

/* Reinterprets the bits of a scalar of dtype `from` as dtype `to` (same width). */
static exe_scalar exe_bitcast_scalar(const exe_state *S, tpu_dtype from, tpu_dtype to, exe_scalar v)
{
    unsigned char buf[16] = {0};
    exe_scalar_store(S, from, buf, 0, v);
    return exe_scalar_load(to, buf, 0);
}

void exe_scalar_fn_eval(const exe_scalar_fn *fn, const exe_scalar *args, exe_scalar *results)
{
    exe_scalar small[128];
    exe_scalar *r = fn->n <= 128 ? small : ut_malloc((size_t)fn->n * sizeof *r);
    if (!r) {
        for (int i = 0; i < fn->nresults; i++) results[i].f = 0, results[i].i = 0;
        return;
    }
    const exe_state *S = fn->S;
    for (int i = 0; i < fn->n; i++) {
        const exe_sinstr *q = &fn->code[i];
        hlo_op op = (hlo_op)q->op;
        tpu_dtype t = (tpu_dtype)q->dtype;
        switch (op) {
        case HLO_PARAMETER: r[i] = args[q->k.i]; break;
        case HLO_CONSTANT: r[i] = q->k; break;
        case HLO_TUPLE: break;
        case HLO_COMPARE:
            r[i].f = 0;
            r[i].i = exe_scalar_compare((tpu_dtype)q->in_dtype, r[q->a], r[q->b], q->dir, q->type);
            break;
        case HLO_SELECT: r[i] = r[q->a].i ? r[q->b] : r[q->c]; break;
        case HLO_CLAMP: {
            /* clamp(min, x, max) = min(max(x, min), max) */
            exe_scalar m = exe_scalar_binop(S, HLO_MAXIMUM, t, r[q->b], r[q->a]);
            r[i] = exe_scalar_binop(S, HLO_MINIMUM, t, m, r[q->c]);
            break;
        }
        case HLO_CONVERT: r[i] = exe_scalar_convert(S, (tpu_dtype)q->in_dtype, t, r[q->a]); break;
        case HLO_BITCAST_CONVERT: r[i] = exe_bitcast_scalar(S, (tpu_dtype)q->in_dtype, t, r[q->a]); break;
        case HLO_COPY:   /* a dtype-changing copy (optimized TPU programs) converts */
            r[i] = (tpu_dtype)q->in_dtype == t ? r[q->a] : exe_scalar_convert(S, (tpu_dtype)q->in_dtype, t, r[q->a]);
            break;
        case HLO_BITCAST: case HLO_RESHAPE: case HLO_BROADCAST: r[i] = r[q->a]; break;
        case HLO_REDUCE_PRECISION: {
            exe_scalar v = r[q->a];
            if (t == TPU_F64) v.f = fp_reduce_precision_f64(v.f, q->ebits, q->mbits);
            else v.f = exe_round_float(S, t, fp_reduce_precision_f32((float)v.f, q->ebits, q->mbits));
            r[i] = v;
            break;
        }
        case HLO_CALL: {
            exe_scalar sa[64], sr[64];
            for (int k = 0; k < q->sub->nparams; k++) sa[k] = r[q->sub_args[k]];
            exe_scalar_fn_eval(q->sub, sa, sr);
            r[i] = sr[0];
            break;
        }
        default:
            if (hlo_op_class(op) == HLO_CLASS_EW1) r[i] = exe_scalar_unop(S, op, (tpu_dtype)q->in_dtype, r[q->a]);
            else r[i] = exe_scalar_binop(S, op, t, r[q->a], r[q->b]);
            break;
        }
    }
    for (int i = 0; i < fn->nresults; i++) results[i] = r[fn->res[i]];
    if (r != small) ut_free(r);
}
