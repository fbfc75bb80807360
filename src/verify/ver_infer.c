/* ver_infer.c — shape inference for every HLO opcode, after XLA's shape_inference and operation semantics.
 *
 * One function per op family, each starting with the rule it checks. Dynamic dimensions ('<=N', '?') are
 * compared by their bound and carried to the result where XLA carries them. Messages start with the opcode
 * and say what differs, with numbers: "dot: contracting dimension sizes differ: lhs dim 1 is 64, rhs dim 0
 * is 32".
 */
#include "verify.h"

#include <stdarg.h>
#include <string.h>

typedef struct vi {
    const hlo_module *m;
    const hlo_instr  *in;
    ut_arena         *a;
    char             *msg;
    size_t            msz;
    hlo_shape        *out;
} vi;

static ver_infer_status vi_fail(vi *v, const char *fmt, ...) UT_PRINTF(2, 3);
static ver_infer_status vi_fail(vi *v, const char *fmt, ...)
{
    if (v->msg && v->msz) {
        int n = snprintf(v->msg, v->msz, "%s: ", hlo_op_name((hlo_op)v->in->op));
        if (n < 0) n = 0;
        if ((size_t)n < v->msz) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(v->msg + n, v->msz - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return VER_INFER_ERROR;
}

/* Operand k's shape; past the last operand, a shape of no type (so no rule reads outside the operand list:
 * every array check fails on it). */
static const hlo_shape vi_missing;
static const hlo_shape *vi_op(const vi *v, int k) { return k < v->in->nops ? &v->in->ops[k]->shape : &vi_missing; }
#define OPS(k) vi_op(v, k)
#define NOPS (v->in->nops)
#define VI_TRY(x)                                  \
    do {                                           \
        ver_infer_status st_ = (x);                \
        if (st_ == VER_INFER_ERROR) return st_;    \
    } while (0)

static char vi_kind(int dtype) { return tpu_dtype_kind((tpu_dtype)dtype); }
static int vi_is_float(int t) { return vi_kind(t) == 'f'; }
static int vi_is_complex(int t) { return vi_kind(t) == 'c'; }
static int vi_is_int(int t) { return vi_kind(t) == 's' || vi_kind(t) == 'u'; }
static int vi_is_pred(int t) { return vi_kind(t) == 'p'; }
static const char *vi_tn(int t) { return tpu_dtype_name((tpu_dtype)t); }

static int vi_complex_part(int t) { return t == TPU_C128 ? TPU_F64 : TPU_F32; }

/* A short text of a shape for messages (one of a few rotating buffers). */
static const char *vi_ss(const hlo_shape *s)
{
    static _Thread_local char buf[4][160];
    static _Thread_local int k;
    char *b = buf[k++ & 3];
    if (s->dtype == TPU_INVALID) return "(unknown shape)";
    return hlo_shape_str(s, b, sizeof buf[0]);
}

static void vi_set_array(hlo_shape *s, int dtype, int rank, const int64_t *dims, uint16_t dyn)
{
    memset(s, 0, sizeof *s);
    s->dtype = (uint8_t)dtype;
    s->rank = (uint8_t)rank;
    s->dyn_mask = dyn;
    for (int i = 0; i < rank; i++) s->dims[i] = dims[i];
}

/* A copy of s without its layout (inferred shapes carry none). Tuples share element storage. */
static void vi_copy(hlo_shape *d, const hlo_shape *s)
{
    *d = *s;
    d->layout = NULL;
    d->is_buffer = 0;
}

static ver_infer_status vi_tuple(vi *v, hlo_shape *out, int n, const hlo_shape *elems)
{
    memset(out, 0, sizeof *out);
    out->dtype = TPU_TUPLE;
    out->ntuple = n;
    if (n) {
        out->tuple = ut_arena_alloc(v->a, (size_t)n * sizeof(hlo_shape));
        if (!out->tuple) return vi_fail(v, "out of memory");
        for (int i = 0; i < n; i++) vi_copy(&out->tuple[i], &elems[i]);
    }
    return VER_INFER_OK;
}

static ver_infer_status vi_need_array(vi *v, int k, const char *what)
{
    const hlo_shape *s = OPS(k);
    if (k >= NOPS) return vi_fail(v, "%s (operand %d) is missing: %d operand%s given", what, k, NOPS, NOPS == 1 ? "" : "s");
    if (!hlo_shape_is_array(s))
        return vi_fail(v, "%s (operand %d) must be an array, got %s", what, k, vi_ss(s));
    return VER_INFER_OK;
}

/* Same dims (bounds compared; '?' matches anything). */
static int vi_dims_eq(const hlo_shape *a, const hlo_shape *b)
{
    if (a->rank != b->rank) return 0;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i] && a->dims[i] >= 0 && b->dims[i] >= 0) return 0;
    return 1;
}

static int vi_same_ignoring_fp(int a, int b)
{
    return a == b || (vi_is_float(a) && vi_is_float(b));
}

/* Bits of precision to pick the higher of two float types (XLA's HigherPrecisionElementType). */
static int vi_higher(int a, int b)
{
    if (a == b) return a;
    int ba = tpu_dtype_bits((tpu_dtype)a), bb = tpu_dtype_bits((tpu_dtype)b);
    if (ba != bb) return ba > bb ? a : b;
    /* same width (f16 vs bf16): XLA prefers the one with more mantissa bits, f16 */
    return a == TPU_F16 || b == TPU_F16 ? TPU_F16 : a;
}

static const hlo_attr *vi_attr(vi *v, hlo_attr_key k) { return hlo_attr_find(v->in, k); }

/* Overflow-checked arithmetic for sizes computed from attributes (absurd values must not wrap). */
static _Thread_local int vi_ovf;
static int64_t vi_mul(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) { vi_ovf = 1; return 0; }
    return r;
}
static int64_t vi_add(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) { vi_ovf = 1; return 0; }
    return r;
}

static ver_infer_status vi_need_attr(vi *v, hlo_attr_key k, const hlo_attr **a)
{
    *a = vi_attr(v, k);
    if (!*a) return vi_fail(v, "the required attribute %s is missing", hlo_attr_key_name(k));
    return VER_INFER_OK;
}

static ver_infer_status vi_ints(vi *v, hlo_attr_key k, int required, int *n, const int64_t **vals)
{
    const hlo_attr *a = vi_attr(v, k);
    if (!a) {
        *n = 0;
        *vals = NULL;
        if (required) return vi_fail(v, "the required attribute %s={...} is missing", hlo_attr_key_name(k));
        return VER_INFER_OK;
    }
    if (a->kind != HA_INTS) return vi_fail(v, "%s must be a list of integers {a,b,...}", hlo_attr_key_name(k));
    *n = a->v.ints.n;
    *vals = a->v.ints.v;
    return VER_INFER_OK;
}

/* Each of n dims in [0, rank) and none twice. */
static ver_infer_status vi_dims_valid(vi *v, const char *what, int n, const int64_t *d, int rank)
{
    uint32_t seen = 0;
    for (int i = 0; i < n; i++) {
        if (d[i] < 0 || d[i] >= rank)
            return vi_fail(v, "%s has dimension %lld, out of range for rank %d", what, (long long)d[i], rank);
        if (seen & (1u << d[i])) return vi_fail(v, "%s lists dimension %lld twice", what, (long long)d[i]);
        seen |= 1u << d[i];
    }
    return VER_INFER_OK;
}

static const hlo_comp *vi_comp(vi *v, hlo_attr_key k, int i)
{
    const hlo_attr *a = vi_attr(v, k);
    if (!a || (a->kind != HA_COMP && a->kind != HA_COMPS) || i >= a->v.comps.n) return NULL;
    return a->v.comps.v[i];
}

static ver_infer_status vi_need_comp(vi *v, hlo_attr_key k, const hlo_comp **c)
{
    *c = vi_comp(v, k, 0);
    if (!*c) return vi_fail(v, "the required attribute %s=%%computation is missing", hlo_attr_key_name(k));
    return VER_INFER_OK;
}

/* The computation takes exactly n parameters compatible with shapes[i] (fp precision may differ when
 * loose is set). */
static ver_infer_status vi_check_params(vi *v, const hlo_comp *c, const char *role, int n, const hlo_shape *shapes,
                                        int loose)
{
    if (c->nparams != n)
        return vi_fail(v, "%s computation '%s' takes %d parameter%s, expected %d", role, c->name, c->nparams,
                       c->nparams == 1 ? "" : "s", n);
    for (int i = 0; i < n; i++) {
        const hlo_shape *p = &c->params[i]->shape;
        int ok = ver_shape_match(p, &shapes[i]);
        if (!ok && loose && hlo_shape_is_array(p) && hlo_shape_is_array(&shapes[i]) &&
            vi_same_ignoring_fp(p->dtype, shapes[i].dtype) && vi_dims_eq(p, &shapes[i]))
            ok = 1;
        if (!ok)
            return vi_fail(v, "%s computation '%s' parameter %d is %s, expected %s", role, c->name, i, vi_ss(p),
                           vi_ss(&shapes[i]));
    }
    return VER_INFER_OK;
}

/* A reducer: (acc_0..acc_{k-1}, x_0..x_{k-1}) -> acc (k == 1) or (acc_0, ..., acc_{k-1}), all scalars. The
 * accumulators have the init types acc[i]; inputs may differ from acc only in fp precision. */
static ver_infer_status vi_reducer(vi *v, const hlo_comp *c, const char *role, int k, const int *acc)
{
    if (c->nparams != 2 * k)
        return vi_fail(v, "%s computation '%s' takes %d parameters, expected %d (accumulator%s, then input%s)", role,
                       c->name, c->nparams, 2 * k, k > 1 ? "s" : "", k > 1 ? "s" : "");
    for (int i = 0; i < 2 * k; i++) {
        const hlo_shape *p = &c->params[i]->shape;
        if (!hlo_shape_is_array(p) || p->rank != 0)
            return vi_fail(v, "%s computation '%s' parameter %d must be a scalar, got %s", role, c->name, i, vi_ss(p));
        int want = acc[i % k];
        if (i < k ? p->dtype != want : !vi_same_ignoring_fp(p->dtype, want))
            return vi_fail(v, "%s computation '%s' parameter %d is %s, expected %s[]", role, c->name, i, vi_ss(p),
                           vi_tn(want));
    }
    const hlo_shape *r = &c->root->shape;
    if (k == 1 && hlo_shape_is_tuple(r) && r->ntuple == 1) r = &r->tuple[0];   /* XLA accepts a 1-tuple */
    if (k == 1) {
        if (!hlo_shape_is_array(r) || r->rank != 0 || r->dtype != acc[0])
            return vi_fail(v, "%s computation '%s' returns %s, expected %s[]", role, c->name, vi_ss(r), vi_tn(acc[0]));
    } else {
        if (!hlo_shape_is_tuple(r) || r->ntuple != k)
            return vi_fail(v, "%s computation '%s' returns %s, expected a tuple of %d scalars", role, c->name, vi_ss(r), k);
        for (int i = 0; i < k; i++)
            if (!hlo_shape_is_array(&r->tuple[i]) || r->tuple[i].rank != 0 || r->tuple[i].dtype != acc[i])
                return vi_fail(v, "%s computation '%s' result %d is %s, expected %s[]", role, c->name, i,
                               vi_ss(&r->tuple[i]), vi_tn(acc[i]));
    }
    return VER_INFER_OK;
}

/* ---- elementwise ---- */

static ver_infer_status vi_unary(vi *v)
{
    hlo_op op = (hlo_op)v->in->op;
    const hlo_shape *x = OPS(0);
    if (op == HLO_COPY) {
        vi_copy(v->out, x);
        return VER_INFER_OK;
    }
    VI_TRY(vi_need_array(v, 0, "the operand"));
    int t = x->dtype, rt = t;
    const char *need = NULL;
    switch (op) {
    case HLO_ABS:
        if (vi_is_pred(t)) need = "a number";
        if (vi_is_complex(t)) rt = vi_complex_part(t);
        break;
    case HLO_NEGATE:
        if (vi_is_pred(t)) need = "a number";
        break;
    case HLO_SIGN:
        if (vi_is_pred(t) || vi_kind(t) == 'u') need = "a signed integer, float or complex";
        break;
    case HLO_NOT:
        if (!vi_is_pred(t) && !vi_is_int(t)) need = "pred or an integer";
        break;
    case HLO_POPCNT: case HLO_CLZ:
        if (!vi_is_int(t)) need = "an integer";
        break;
    case HLO_IS_FINITE:
        if (!vi_is_float(t)) need = "a float";
        rt = TPU_PRED;
        break;
    case HLO_REAL: case HLO_IMAG:
        if (vi_is_complex(t)) rt = vi_complex_part(t);
        else if (!vi_is_float(t)) need = "complex or float";
        break;
    case HLO_CEIL: case HLO_FLOOR: case HLO_ROUND_NEAREST_AFZ: case HLO_ROUND_NEAREST_EVEN: case HLO_ERF:
    case HLO_CBRT:
        if (!vi_is_float(t)) need = "a float";
        break;
    case HLO_REDUCE_PRECISION: {
        if (!vi_is_float(t)) need = "a float";
        int64_t eb = hlo_attr_int(v->in, HK_EXPONENT_BITS, -1), mb = hlo_attr_int(v->in, HK_MANTISSA_BITS, -1);
        if (eb < 1) return vi_fail(v, "exponent_bits must be at least 1 (got %lld)", (long long)eb);
        if (mb < 0) return vi_fail(v, "mantissa_bits must be at least 0 (got %lld)", (long long)mb);
        break;
    }
    default:   /* transcendental: exp, log, sine, tanh, sqrt, rsqrt, logistic, ... */
        if (!vi_is_float(t) && !vi_is_complex(t)) need = "a float or complex";
        break;
    }
    if (need) return vi_fail(v, "operand must be %s, got %s", need, vi_ss(x));
    vi_set_array(v->out, rt, x->rank, x->dims, x->dyn_mask);
    return VER_INFER_OK;
}

/* Two operands of the same dimensions (no implicit broadcast in HLO). */
static ver_infer_status vi_same_dims2(vi *v, const hlo_shape *a, const hlo_shape *b, const char *an, const char *bn)
{
    if (!vi_dims_eq(a, b))
        return vi_fail(v, "%s %s and %s %s have different dimensions (HLO has no implicit broadcast: broadcast one "
                          "of them first)", an, vi_ss(a), bn, vi_ss(b));
    return VER_INFER_OK;
}

static ver_infer_status vi_binary(vi *v)
{
    hlo_op op = (hlo_op)v->in->op;
    VI_TRY(vi_need_array(v, 0, "lhs"));
    VI_TRY(vi_need_array(v, 1, "rhs"));
    const hlo_shape *a = OPS(0), *b = OPS(1);
    VI_TRY(vi_same_dims2(v, a, b, "lhs", "rhs"));
    int ta = a->dtype, tb = b->dtype;
    if (op == HLO_STOCHASTIC_CONVERT) {
        if (!vi_is_float(ta)) return vi_fail(v, "operand must be a float, got %s", vi_ss(a));
        if (vi_kind(tb) != 'u' || tpu_dtype_bits((tpu_dtype)tb) != tpu_dtype_bits((tpu_dtype)ta))
            return vi_fail(v, "random bits must be an unsigned integer as wide as the operand, got %s for %s", vi_ss(b),
                           vi_ss(a));
        const hlo_shape *d = &v->in->shape;
        if (!hlo_shape_is_array(d)) return vi_fail(v, "the result must be an array");
        vi_set_array(v->out, d->dtype, a->rank, a->dims, a->dyn_mask | b->dyn_mask);
        return VER_INFER_GIVEN;
    }
    if (!vi_same_ignoring_fp(ta, tb))
        return vi_fail(v, "operands have different element types: lhs %s, rhs %s (insert a convert)", vi_ss(a), vi_ss(b));
    int t = vi_higher(ta, tb), rt = t;
    const char *need = NULL;
    switch (op) {
    case HLO_AND: case HLO_OR: case HLO_XOR:
        if (!vi_is_pred(t) && !vi_is_int(t)) need = "pred or integers";
        break;
    case HLO_SHIFT_LEFT: case HLO_SHIFT_RIGHT_ARITHMETIC: case HLO_SHIFT_RIGHT_LOGICAL: case HLO_MULHI:
        if (!vi_is_int(t)) need = "integers";
        break;
    case HLO_ATAN2:
        if (!vi_is_float(t) && !vi_is_complex(t)) need = "floats or complex";
        break;
    case HLO_COMPLEX:
        if (t != TPU_F32 && t != TPU_F64) need = "f32 or f64";
        rt = t == TPU_F64 ? TPU_C128 : TPU_C64;
        break;
    case HLO_COMPARE: {
        rt = TPU_PRED;
        const char *dir = hlo_attr_str(v->in, HK_DIRECTION);
        if (!dir) return vi_fail(v, "the required attribute direction= (EQ, NE, GE, GT, LE, LT) is missing");
        static const char *const dirs[] = {"EQ", "NE", "GE", "GT", "LE", "LT"};
        int okd = 0;
        for (int i = 0; i < 6; i++) okd |= !strcmp(dir, dirs[i]);
        if (!okd) return vi_fail(v, "direction=%s is not one of EQ, NE, GE, GT, LE, LT", dir);
        const char *ty = hlo_attr_str(v->in, HK_TYPE);
        if (ty && strcmp(ty, "FLOAT") && strcmp(ty, "TOTALORDER") && strcmp(ty, "SIGNED") && strcmp(ty, "UNSIGNED"))
            return vi_fail(v, "type=%s is not one of FLOAT, TOTALORDER, SIGNED, UNSIGNED", ty);
        break;
    }
    case HLO_MAXIMUM: case HLO_MINIMUM:
        break;
    default:   /* add subtract multiply divide power remainder */
        if (vi_is_pred(t)) need = "numbers";
        break;
    }
    if (need) return vi_fail(v, "operands must be %s, got %s", need, vi_ss(a));
    vi_set_array(v->out, rt, a->rank, a->dims, a->dyn_mask | b->dyn_mask);
    return VER_INFER_OK;
}

static ver_infer_status vi_select(vi *v)
{
    for (int k = 0; k < 3; k++) VI_TRY(vi_need_array(v, k, k ? "a value" : "the predicate"));
    const hlo_shape *p = OPS(0), *t = OPS(1), *f = OPS(2);
    if (p->dtype != TPU_PRED) return vi_fail(v, "the predicate must be pred, got %s", vi_ss(p));
    int types_ok = t->dtype == f->dtype || (vi_same_ignoring_fp(t->dtype, f->dtype) && ver_mixed_precision(v->m));
    if (!types_ok || !vi_dims_eq(t, f))
        return vi_fail(v, "on_true %s and on_false %s must have the same shape", vi_ss(t), vi_ss(f));
    if (!vi_dims_eq(p, t))
        return vi_fail(v, "the predicate %s must have the dimensions of the values %s (broadcast it first)", vi_ss(p),
                       vi_ss(t));
    vi_set_array(v->out, t->dtype, t->rank, t->dims, t->dyn_mask | f->dyn_mask);
    return VER_INFER_OK;
}

static ver_infer_status vi_clamp(vi *v)
{
    for (int k = 0; k < 3; k++) VI_TRY(vi_need_array(v, k, k == 1 ? "the operand" : "a bound"));
    const hlo_shape *lo = OPS(0), *x = OPS(1), *hi = OPS(2);
    if (lo->dtype != x->dtype || hi->dtype != x->dtype)
        return vi_fail(v, "min %s, operand %s and max %s must have the same element type", vi_ss(lo), vi_ss(x), vi_ss(hi));
    if ((lo->rank && !vi_dims_eq(lo, x)) || (hi->rank && !vi_dims_eq(hi, x)))
        return vi_fail(v, "min %s and max %s must be scalars or have the operand's dimensions %s", vi_ss(lo), vi_ss(hi),
                       vi_ss(x));
    vi_set_array(v->out, x->dtype, x->rank, x->dims, x->dyn_mask);
    return VER_INFER_OK;
}

/* ---- conversions and reshapes (result type or dims given in the text) ---- */

static ver_infer_status vi_convert(vi *v)
{
    VI_TRY(vi_need_array(v, 0, "the operand"));
    const hlo_shape *x = OPS(0), *d = &v->in->shape;
    if (!hlo_shape_is_array(d)) return vi_fail(v, "the result must be an array, got %s", vi_ss(d));
    if (vi_is_complex(x->dtype) && !vi_is_complex(d->dtype))
        return vi_fail(v, "cannot convert complex %s to %s (take real or imag first)", vi_ss(x), vi_tn(d->dtype));
    vi_set_array(v->out, d->dtype, x->rank, x->dims, x->dyn_mask);
    return VER_INFER_GIVEN;
}

static ver_infer_status vi_bitcast_convert(vi *v)
{
    VI_TRY(vi_need_array(v, 0, "the operand"));
    const hlo_shape *x = OPS(0), *d = &v->in->shape;
    if (!hlo_shape_is_array(d)) return vi_fail(v, "the result must be an array, got %s", vi_ss(d));
    int bi = tpu_dtype_bits((tpu_dtype)x->dtype), bo = tpu_dtype_bits((tpu_dtype)d->dtype);
    if (vi_is_pred(x->dtype) || vi_is_pred(d->dtype)) return vi_fail(v, "pred cannot be bitcast");
    int64_t dims[TPU_MAX_RANK];
    int rank = x->rank;
    memcpy(dims, x->dims, sizeof(int64_t) * (size_t)rank);
    if (bo < bi) {
        /* narrower result: a new minor dimension of size bi/bo */
        if (bi % bo) return vi_fail(v, "cannot bitcast %d-bit to %d-bit elements", bi, bo);
        if (rank == TPU_MAX_RANK) return vi_fail(v, "result rank above %d", TPU_MAX_RANK);
        dims[rank++] = bi / bo;
    } else if (bo > bi) {
        if (bo % bi) return vi_fail(v, "cannot bitcast %d-bit to %d-bit elements", bi, bo);
        if (rank == 0 || dims[rank - 1] != bo / bi)
            return vi_fail(v, "bitcasting %s to the wider %s needs a minor dimension of size %d", vi_ss(x),
                           vi_tn(d->dtype), bo / bi);
        rank--;
    }
    vi_set_array(v->out, d->dtype, rank, dims, 0);
    return VER_INFER_OK;
}

/* Product of the dimensions (at their bounds), or -1 when a dimension is unbounded. */
static int64_t vi_count(const hlo_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++) {
        if (s->dims[i] < 0) return -1;
        if (s->dims[i] && n > INT64_MAX / s->dims[i]) return -1;
        n *= s->dims[i];
    }
    return n;
}

static ver_infer_status vi_reshape(vi *v)
{
    VI_TRY(vi_need_array(v, 0, "the operand"));
    const hlo_shape *x = OPS(0), *d = &v->in->shape;
    if (!hlo_shape_is_array(d)) return vi_fail(v, "the result must be an array, got %s", vi_ss(d));
    if (d->dtype != x->dtype)
        return vi_fail(v, "the result type %s differs from the operand's %s (reshape keeps the element type)",
                       vi_tn(d->dtype), vi_tn(x->dtype));
    int64_t a = vi_count(x), b = vi_count(d);
    if (a >= 0 && b >= 0 && a != b)
        return vi_fail(v, "element counts differ: operand %s has %lld, result %s has %lld", vi_ss(x), (long long)a,
                       vi_ss(d), (long long)b);
    if (v->in->op == HLO_RESHAPE) {
        int64_t id = hlo_attr_int(v->in, HK_INFERRED_DIMENSION, -1);
        if (id < -1 || id >= d->rank) return vi_fail(v, "inferred_dimension=%lld out of range", (long long)id);
    } else {
        /* dynamic-reshape(operand, size_0, ..., size_{rank-1}) */
        if (NOPS != d->rank + 1)
            return vi_fail(v, "takes the operand and one size per result dimension: %d operands for a rank-%d result",
                           NOPS, d->rank);
        for (int k = 1; k < NOPS; k++)
            if (!hlo_shape_is_array(OPS(k)) || OPS(k)->rank != 0 || !vi_is_int(OPS(k)->dtype))
                return vi_fail(v, "size operand %d must be an integer scalar, got %s", k, vi_ss(OPS(k)));
    }
    vi_copy(v->out, d);
    return VER_INFER_GIVEN;
}

/* Elements of an array with a tiled layout (a compiled program's T(r,c) or T(n) first tile), padded to whole
 * tiles; -1 when the layout has no tile. A compiled program's bitcast keeps the physical size, which the tiles
 * decide: f32[8,17]{1,0:T(8,128)} and f32[8,16]{1,0:T(8,128)} are both one 4 KiB tile. */
static int64_t vi_tiled_count(const hlo_shape *s)
{
    const hlo_layout *l = s->layout;
    if (!l || l->ntiles < 1 || l->tiles[0].n < 1 || l->tiles[0].n > 2 || l->rank != s->rank || s->rank < 1) return -1;
    int m2m[TPU_MAX_RANK];
    hlo_shape_m2m(s, m2m);
    const hlo_tile *t = &l->tiles[0];
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++) {
        int64_t d = s->dims[i], q = 0;
        if (i == m2m[0]) q = t->d[t->n - 1];
        else if (t->n == 2 && s->rank > 1 && i == m2m[1]) q = t->d[0];
        if (q > 0) d = (d + q - 1) / q * q;
        n = vi_mul(n, d);
    }
    return n;
}

static ver_infer_status vi_bitcast(vi *v)
{
    const hlo_shape *x = OPS(0), *d = &v->in->shape;
    if (hlo_shape_is_array(x) && hlo_shape_is_array(d)) {
        int64_t a = vi_count(x), b = vi_count(d), ta = vi_tiled_count(x), tb = vi_tiled_count(d);
        if (ta >= 0 && tb >= 0 && x->dtype == d->dtype) {   /* both tiled: compare what they occupy */
            a = ta;
            b = tb;
        }
        vi_ovf = 0;
        int64_t ba = vi_mul(a, tpu_dtype_bits((tpu_dtype)x->dtype)), bb = vi_mul(b, tpu_dtype_bits((tpu_dtype)d->dtype));
        if (a >= 0 && b >= 0 && !vi_ovf && ba != bb)
            return vi_fail(v, "operand %s and result %s have different sizes in bits", vi_ss(x), vi_ss(d));
    }
    vi_copy(v->out, d);
    return VER_INFER_GIVEN;
}

/* ---- data movement ---- */

static ver_infer_status vi_broadcast(vi *v)
{
    VI_TRY(vi_need_array(v, 0, "the operand"));
    const hlo_shape *x = OPS(0), *d = &v->in->shape;
    int n;
    const int64_t *dims;
    VI_TRY(vi_ints(v, HK_DIMENSIONS, x->rank > 0, &n, &dims));
    if (d->dtype == TPU_INVALID) {
        /* XLA's parser, for a broadcast written without a shape, reads dimensions as new leading sizes */
        int64_t r[TPU_MAX_RANK];
        if (n + x->rank > TPU_MAX_RANK) return vi_fail(v, "result rank above %d", TPU_MAX_RANK);
        for (int i = 0; i < n; i++) r[i] = dims[i];
        for (int i = 0; i < x->rank; i++) r[n + i] = x->dims[i];
        vi_set_array(v->out, x->dtype, n + x->rank, r, (uint16_t)(x->dyn_mask << n));
        return VER_INFER_OK;
    }
    if (!hlo_shape_is_array(d)) return vi_fail(v, "the result must be an array, got %s", vi_ss(d));
    if (n != x->rank)
        return vi_fail(v, "dimensions={...} has %d entries for an operand of rank %d (one result dimension per operand "
                          "dimension)", n, x->rank);
    VI_TRY(vi_dims_valid(v, "dimensions", n, dims, d->rank));
    for (int i = 0; i < n; i++)
        if (x->dims[i] != d->dims[dims[i]] && x->dims[i] >= 0 && d->dims[dims[i]] >= 0)
            return vi_fail(v, "operand dimension %d has size %lld but result dimension %lld has size %lld", i,
                           (long long)x->dims[i], (long long)dims[i], (long long)d->dims[dims[i]]);
    vi_set_array(v->out, x->dtype, d->rank, d->dims, d->dyn_mask);
    return VER_INFER_OK;
}

static ver_infer_status vi_transpose(vi *v)
{
    VI_TRY(vi_need_array(v, 0, "the operand"));
    const hlo_shape *x = OPS(0);
    int n;
    const int64_t *p;
    VI_TRY(vi_ints(v, HK_DIMENSIONS, 1, &n, &p));
    if (n != x->rank) return vi_fail(v, "dimensions={...} has %d entries for an operand of rank %d (must be a permutation)",
                                     n, x->rank);
    VI_TRY(vi_dims_valid(v, "the permutation", n, p, x->rank));
    int64_t d[TPU_MAX_RANK];
    uint16_t dyn = 0;
    for (int i = 0; i < n; i++) {
        d[i] = x->dims[p[i]];
        if (x->dyn_mask & (1u << p[i])) dyn |= (uint16_t)(1u << i);
    }
    vi_set_array(v->out, x->dtype, n, d, dyn);
    return VER_INFER_OK;
}

static ver_infer_status vi_reverse(vi *v)
{
    VI_TRY(vi_need_array(v, 0, "the operand"));
    int n;
    const int64_t *d;
    VI_TRY(vi_ints(v, HK_DIMENSIONS, 1, &n, &d));
    VI_TRY(vi_dims_valid(v, "dimensions", n, d, OPS(0)->rank));
    vi_copy(v->out, OPS(0));
    return VER_INFER_OK;
}

static ver_infer_status vi_slice(vi *v)
{
    VI_TRY(vi_need_array(v, 0, "the operand"));
    const hlo_shape *x = OPS(0);
    const hlo_attr *a;
    VI_TRY(vi_need_attr(v, HK_SLICE, &a));
    const hlo_slice *s = a->v.slice;
    if (s->rank != x->rank) return vi_fail(v, "slice={...} has %d ranges for an operand of rank %d", s->rank, x->rank);
    int64_t d[TPU_MAX_RANK];
    for (int i = 0; i < s->rank; i++) {
        if (s->stride[i] <= 0) return vi_fail(v, "dimension %d: stride %lld must be positive", i, (long long)s->stride[i]);
        if (s->start[i] < 0 || s->start[i] > s->limit[i] || (x->dims[i] >= 0 && s->limit[i] > x->dims[i]))
            return vi_fail(v, "dimension %d: range [%lld:%lld] is outside [0:%lld] of %s", i, (long long)s->start[i],
                           (long long)s->limit[i], (long long)x->dims[i], vi_ss(x));
        d[i] = (s->limit[i] - s->start[i]) / s->stride[i] + ((s->limit[i] - s->start[i]) % s->stride[i] != 0);
    }
    vi_set_array(v->out, x->dtype, x->rank, d, 0);
    return VER_INFER_OK;
}

/* Start indices: `rank` integer scalars from operand `first` on, or (old form) one rank-1 vector. */
static ver_infer_status vi_start_indices(vi *v, int first, int rank)
{
    int n = NOPS - first;
    if (n == 1 && OPS(first)->rank == 1 && rank != 1) {
        const hlo_shape *s = OPS(first);
        if (!vi_is_int(s->dtype) || s->dims[0] != rank)
            return vi_fail(v, "the start-index vector must be an integer s32[%d], got %s", rank, vi_ss(s));
        return VER_INFER_OK;
    }
    if (n != rank) return vi_fail(v, "needs %d start indices (one per operand dimension), got %d", rank, n);
    int t = -1;
    for (int k = first; k < NOPS; k++) {
        const hlo_shape *s = OPS(k);
        if (!hlo_shape_is_array(s) || s->rank != 0 || !vi_is_int(s->dtype))
            return vi_fail(v, "start index (operand %d) must be an integer scalar, got %s", k, vi_ss(s));
        if (t >= 0 && s->dtype != t) return vi_fail(v, "start indices have different types (%s and %s)", vi_tn(t), vi_tn(s->dtype));
        t = s->dtype;
    }
    return VER_INFER_OK;
}

static ver_infer_status vi_dynamic_slice(vi *v)
{
    if (NOPS < 1) return vi_fail(v, "needs an operand");
    VI_TRY(vi_need_array(v, 0, "the operand"));
    const hlo_shape *x = OPS(0);
    VI_TRY(vi_start_indices(v, 1, x->rank));
    int n;
    const int64_t *sz;
    VI_TRY(vi_ints(v, HK_DYNAMIC_SLICE_SIZES, 1, &n, &sz));
    if (n != x->rank) return vi_fail(v, "dynamic_slice_sizes has %d entries for an operand of rank %d", n, x->rank);
    for (int i = 0; i < n; i++)
        if (sz[i] < 0 || (x->dims[i] >= 0 && sz[i] > x->dims[i]))
            return vi_fail(v, "slice size %lld in dimension %d does not fit in the operand %s", (long long)sz[i], i, vi_ss(x));
    vi_set_array(v->out, x->dtype, n, sz, 0);
    return VER_INFER_OK;
}

static ver_infer_status vi_dynamic_update_slice(vi *v)
{
    if (NOPS < 2) return vi_fail(v, "needs an operand and an update");
    VI_TRY(vi_need_array(v, 0, "the operand"));
    VI_TRY(vi_need_array(v, 1, "the update"));
    const hlo_shape *x = OPS(0), *u = OPS(1);
    if (u->rank != x->rank) return vi_fail(v, "update %s and operand %s have different ranks", vi_ss(u), vi_ss(x));
    if (!vi_same_ignoring_fp(u->dtype, x->dtype) || (u->dtype != x->dtype))
        return vi_fail(v, "update %s and operand %s have different element types", vi_ss(u), vi_ss(x));
    for (int i = 0; i < x->rank; i++)
        if (u->dims[i] > x->dims[i] && x->dims[i] >= 0)
            return vi_fail(v, "update dimension %d (%lld) is larger than the operand's (%lld)", i, (long long)u->dims[i],
                           (long long)x->dims[i]);
    VI_TRY(vi_start_indices(v, 2, x->rank));
    vi_copy(v->out, x);
    return VER_INFER_OK;
}

static ver_infer_status vi_concatenate(vi *v)
{
    if (NOPS < 1) return vi_fail(v, "needs at least one operand");
    int n;
    const int64_t *dd;
    VI_TRY(vi_ints(v, HK_DIMENSIONS, 1, &n, &dd));
    if (n != 1) return vi_fail(v, "dimensions={d} must name exactly one dimension, got %d", n);
    for (int k = 0; k < NOPS; k++) VI_TRY(vi_need_array(v, k, "an operand"));
    const hlo_shape *x = OPS(0);
    int64_t d = dd[0];
    if (d < 0 || d >= x->rank) return vi_fail(v, "dimension %lld out of range for rank %d", (long long)d, x->rank);
    int64_t dims[TPU_MAX_RANK];
    memcpy(dims, x->dims, sizeof(int64_t) * x->rank);
    uint16_t dyn = x->dyn_mask;
    for (int k = 1; k < NOPS; k++) {
        const hlo_shape *y = OPS(k);
        if (y->dtype != x->dtype)
            return vi_fail(v, "operand %d %s has a different element type than operand 0 %s", k, vi_ss(y), vi_ss(x));
        if (y->rank != x->rank) return vi_fail(v, "operand %d %s has a different rank than operand 0 %s", k, vi_ss(y), vi_ss(x));
        for (int i = 0; i < x->rank; i++)
            if (i != d && y->dims[i] != x->dims[i] && y->dims[i] >= 0 && x->dims[i] >= 0)
                return vi_fail(v, "operand %d %s differs from operand 0 %s in dimension %d (only dimension %lld may differ)",
                               k, vi_ss(y), vi_ss(x), i, (long long)d);
        vi_ovf = 0;
        dims[d] = dims[d] < 0 || y->dims[d] < 0 ? -1 : vi_add(dims[d], y->dims[d]);
        if (vi_ovf) return vi_fail(v, "the concatenated size overflows");
        dyn |= y->dyn_mask;
    }
    vi_set_array(v->out, x->dtype, x->rank, dims, dyn);
    return VER_INFER_OK;
}

static ver_infer_status vi_pad(vi *v)
{
    VI_TRY(vi_need_array(v, 0, "the operand"));
    VI_TRY(vi_need_array(v, 1, "the padding value"));
    const hlo_shape *x = OPS(0), *pv = OPS(1);
    if (pv->rank != 0 || pv->dtype != x->dtype)
        return vi_fail(v, "the padding value must be a %s scalar, got %s", vi_tn(x->dtype), vi_ss(pv));
    const hlo_attr *a;
    VI_TRY(vi_need_attr(v, HK_PADDING, &a));
    const hlo_padding *p = a->v.padding;
    if (p->rank != x->rank) return vi_fail(v, "padding has %d dimensions for an operand of rank %d", p->rank, x->rank);
    int64_t d[TPU_MAX_RANK];
    for (int i = 0; i < x->rank; i++) {
        if (p->interior[i] < 0) return vi_fail(v, "dimension %d: negative interior padding", i);
        int64_t n = x->dims[i];
        vi_ovf = 0;
        d[i] = vi_add(vi_add(vi_add(n, p->lo[i]), p->hi[i]), n > 0 ? vi_mul(n - 1, p->interior[i]) : 0);
        if (vi_ovf) return vi_fail(v, "dimension %d: the padded size overflows", i);
        if (d[i] < 0)
            return vi_fail(v, "dimension %d: padding %lld_%lld_%lld of size %lld gives a negative size", i,
                           (long long)p->lo[i], (long long)p->hi[i], (long long)p->interior[i], (long long)n);
    }
    vi_set_array(v->out, x->dtype, x->rank, d, 0);
    return VER_INFER_OK;
}

static ver_infer_status vi_iota(vi *v)
{
    const hlo_shape *d = &v->in->shape;
    if (!hlo_shape_is_array(d)) return vi_fail(v, "the result must be an array, got %s", vi_ss(d));
    const hlo_attr *a;
    VI_TRY(vi_need_attr(v, HK_IOTA_DIMENSION, &a));
    if (a->v.i < 0 || a->v.i >= d->rank)
        return vi_fail(v, "iota_dimension=%lld out of range for %s", (long long)a->v.i, vi_ss(d));
    if (vi_is_pred(d->dtype)) return vi_fail(v, "cannot make an iota of pred");
    vi_copy(v->out, d);
    return VER_INFER_GIVEN;
}

static ver_infer_status vi_gte(vi *v)
{
    const hlo_shape *t = OPS(0);
    const hlo_attr *a;
    VI_TRY(vi_need_attr(v, HK_INDEX, &a));
    if (!hlo_shape_is_tuple(t)) return vi_fail(v, "the operand must be a tuple, got %s", vi_ss(t));
    if (a->v.i < 0 || a->v.i >= t->ntuple)
        return vi_fail(v, "index=%lld out of range for a tuple of %d elements", (long long)a->v.i, t->ntuple);
    vi_copy(v->out, &t->tuple[a->v.i]);
    return VER_INFER_OK;
}

static ver_infer_status vi_tuple_op(vi *v)
{
    hlo_shape tmp[16];
    hlo_shape *e = NOPS <= 16 ? tmp : ut_arena_alloc(v->a, (size_t)NOPS * sizeof(hlo_shape));
    if (!e) return vi_fail(v, "out of memory");
    for (int k = 0; k < NOPS; k++) e[k] = *OPS(k);
    return vi_tuple(v, v->out, NOPS, e);
}

/* ---- gather / scatter ---- */

static int vi_contains(int n, const int64_t *v, int64_t x)
{
    for (int i = 0; i < n; i++)
        if (v[i] == x) return 1;
    return 0;
}

static ver_infer_status vi_sorted(vi *v, const char *what, int n, const int64_t *d)
{
    for (int i = 1; i < n; i++)
        if (d[i] <= d[i - 1]) return vi_fail(v, "%s must be sorted and without repeats", what);
    return VER_INFER_OK;
}

static ver_infer_status vi_gather(vi *v)
{
    VI_TRY(vi_need_array(v, 0, "the operand"));
    VI_TRY(vi_need_array(v, 1, "the start indices"));
    const hlo_shape *x = OPS(0), *ix = OPS(1);
    if (!vi_is_int(ix->dtype)) return vi_fail(v, "start indices must be integers, got %s", vi_ss(ix));
    int noff, ncol, nmap, nss, nob, nsb;
    const int64_t *off, *col, *map, *ss, *ob, *sb;
    VI_TRY(vi_ints(v, HK_OFFSET_DIMS, 1, &noff, &off));
    VI_TRY(vi_ints(v, HK_COLLAPSED_SLICE_DIMS, 1, &ncol, &col));
    VI_TRY(vi_ints(v, HK_START_INDEX_MAP, 1, &nmap, &map));
    VI_TRY(vi_ints(v, HK_SLICE_SIZES, 1, &nss, &ss));
    VI_TRY(vi_ints(v, HK_OPERAND_BATCHING_DIMS, 0, &nob, &ob));
    VI_TRY(vi_ints(v, HK_START_INDICES_BATCHING_DIMS, 0, &nsb, &sb));
    const hlo_attr *ivd_a;
    VI_TRY(vi_need_attr(v, HK_INDEX_VECTOR_DIM, &ivd_a));
    int64_t ivd = ivd_a->v.i;
    if (ivd < 0 || ivd > ix->rank)
        return vi_fail(v, "index_vector_dim=%lld out of range for start indices %s", (long long)ivd, vi_ss(ix));
    /* indices with the index vector dimension made explicit */
    int64_t e[TPU_MAX_RANK + 1];
    int er = ix->rank;
    memcpy(e, ix->dims, sizeof(int64_t) * ix->rank);
    if (ivd == ix->rank) e[er++] = 1;
    if (e[ivd] != nmap)
        return vi_fail(v, "start_index_map has %d entries but the index vector (dimension %lld of %s) has %lld", nmap,
                       (long long)ivd, vi_ss(ix), (long long)e[ivd]);
    if (nss != x->rank) return vi_fail(v, "slice_sizes has %d entries for an operand of rank %d", nss, x->rank);
    VI_TRY(vi_sorted(v, "offset_dims", noff, off));
    VI_TRY(vi_sorted(v, "collapsed_slice_dims", ncol, col));
    VI_TRY(vi_dims_valid(v, "collapsed_slice_dims", ncol, col, x->rank));
    VI_TRY(vi_dims_valid(v, "start_index_map", nmap, map, x->rank));
    VI_TRY(vi_dims_valid(v, "operand_batching_dims", nob, ob, x->rank));
    if (nob != nsb)
        return vi_fail(v, "operand_batching_dims has %d entries but start_indices_batching_dims has %d", nob, nsb);
    if (noff + ncol + nob != x->rank)
        return vi_fail(v, "offset_dims (%d) + collapsed_slice_dims (%d) + operand_batching_dims (%d) must equal the "
                          "operand rank %d", noff, ncol, nob, x->rank);
    for (int i = 0; i < ncol; i++) {
        if (vi_contains(nob, ob, col[i])) return vi_fail(v, "dimension %lld is both collapsed and batching", (long long)col[i]);
    }
    for (int i = 0; i < x->rank; i++) {
        if (ss[i] < 0 || (x->dims[i] >= 0 && ss[i] > x->dims[i]))
            return vi_fail(v, "slice size %lld in dimension %d does not fit in the operand %s", (long long)ss[i], i, vi_ss(x));
        if ((vi_contains(ncol, col, i) || vi_contains(nob, ob, i)) && ss[i] > 1)
            return vi_fail(v, "collapsed or batching dimension %d must have slice size 1, got %lld", i, (long long)ss[i]);
    }
    for (int i = 0; i < nsb; i++)
        if (sb[i] < 0 || sb[i] >= er || sb[i] == ivd)
            return vi_fail(v, "start_indices_batching_dims entry %lld is out of range or the index vector dimension",
                           (long long)sb[i]);
    int out_rank = noff + er - 1;
    if (out_rank > TPU_MAX_RANK) return vi_fail(v, "result rank %d above %d", out_rank, TPU_MAX_RANK);
    for (int i = 0; i < noff; i++)
        if (off[i] < 0 || off[i] >= out_rank)
            return vi_fail(v, "offset_dims entry %lld out of range for the result rank %d", (long long)off[i], out_rank);
    int64_t d[TPU_MAX_RANK];
    int next_off = 0, next_batch = 0;
    for (int i = 0; i < out_rank; i++) {
        if (vi_contains(noff, off, i)) {
            while (next_off < x->rank && (vi_contains(ncol, col, next_off) || vi_contains(nob, ob, next_off))) next_off++;
            d[i] = ss[next_off++];
        } else {
            if (next_batch == ivd) next_batch++;
            d[i] = e[next_batch++];
        }
    }
    vi_set_array(v->out, x->dtype, out_rank, d, 0);
    return VER_INFER_OK;
}

static ver_infer_status vi_scatter(vi *v)
{
    if (NOPS < 3 || NOPS % 2 == 0)
        return vi_fail(v, "takes N operands, the indices and N updates (an odd count of at least 3), got %d", NOPS);
    int n = (NOPS - 1) / 2;
    for (int k = 0; k < NOPS; k++) VI_TRY(vi_need_array(v, k, k < n ? "an operand" : k == n ? "the indices" : "an update"));
    const hlo_shape *x = OPS(0), *ix = OPS(n), *u = OPS(n + 1);
    if (!vi_is_int(ix->dtype)) return vi_fail(v, "scatter indices must be integers, got %s", vi_ss(ix));
    for (int k = 1; k < n; k++)
        if (!vi_dims_eq(OPS(k), x)) return vi_fail(v, "operand %d %s and operand 0 %s differ", k, vi_ss(OPS(k)), vi_ss(x));
    for (int k = 1; k < n; k++)
        if (!vi_dims_eq(OPS(n + 1 + k), u))
            return vi_fail(v, "update %d %s and update 0 %s differ", k, vi_ss(OPS(n + 1 + k)), vi_ss(u));
    int nuw, niw, nsd, nib, nsb;
    const int64_t *uw, *iw, *sd, *ib, *sb;
    VI_TRY(vi_ints(v, HK_UPDATE_WINDOW_DIMS, 1, &nuw, &uw));
    VI_TRY(vi_ints(v, HK_INSERTED_WINDOW_DIMS, 1, &niw, &iw));
    VI_TRY(vi_ints(v, HK_SCATTER_DIMS_TO_OPERAND_DIMS, 1, &nsd, &sd));
    VI_TRY(vi_ints(v, HK_INPUT_BATCHING_DIMS, 0, &nib, &ib));
    VI_TRY(vi_ints(v, HK_SCATTER_INDICES_BATCHING_DIMS, 0, &nsb, &sb));
    const hlo_attr *ivd_a;
    VI_TRY(vi_need_attr(v, HK_INDEX_VECTOR_DIM, &ivd_a));
    int64_t ivd = ivd_a->v.i;
    if (ivd < 0 || ivd > ix->rank)
        return vi_fail(v, "index_vector_dim=%lld out of range for indices %s", (long long)ivd, vi_ss(ix));
    int64_t e[TPU_MAX_RANK + 1];
    int er = ix->rank;
    memcpy(e, ix->dims, sizeof(int64_t) * ix->rank);
    if (ivd == ix->rank) e[er++] = 1;
    if (e[ivd] != nsd)
        return vi_fail(v, "scatter_dims_to_operand_dims has %d entries but the index vector has %lld", nsd, (long long)e[ivd]);
    VI_TRY(vi_sorted(v, "update_window_dims", nuw, uw));
    VI_TRY(vi_sorted(v, "inserted_window_dims", niw, iw));
    VI_TRY(vi_dims_valid(v, "update_window_dims", nuw, uw, u->rank));
    VI_TRY(vi_dims_valid(v, "inserted_window_dims", niw, iw, x->rank));
    VI_TRY(vi_dims_valid(v, "scatter_dims_to_operand_dims", nsd, sd, x->rank));
    VI_TRY(vi_dims_valid(v, "input_batching_dims", nib, ib, x->rank));
    if (nib != nsb) return vi_fail(v, "input_batching_dims has %d entries but scatter_indices_batching_dims has %d", nib, nsb);
    if (nuw + niw + nib != x->rank)
        return vi_fail(v, "update_window_dims (%d) + inserted_window_dims (%d) + input_batching_dims (%d) must equal the "
                          "operand rank %d", nuw, niw, nib, x->rank);
    if (u->rank != nuw + er - 1)
        return vi_fail(v, "updates %s must have rank %d (update_window_dims %d + scatter dims %d)", vi_ss(u), nuw + er - 1,
                       nuw, er - 1);
    /* window dims fit the operand; scatter dims match the indices */
    int next_w = 0, next_s = 0;
    for (int i = 0; i < u->rank; i++) {
        if (vi_contains(nuw, uw, i)) {
            while (next_w < x->rank && (vi_contains(niw, iw, next_w) || vi_contains(nib, ib, next_w))) next_w++;
            if (next_w < x->rank && u->dims[i] > x->dims[next_w] && x->dims[next_w] >= 0)
                return vi_fail(v, "update window dimension %d (%lld) is larger than operand dimension %d (%lld)", i,
                               (long long)u->dims[i], next_w, (long long)x->dims[next_w]);
            next_w++;
        } else {
            if (next_s == ivd) next_s++;
            if (u->dims[i] != e[next_s] && u->dims[i] >= 0 && e[next_s] >= 0)
                return vi_fail(v, "update scatter dimension %d is %lld but the indices say %lld", i, (long long)u->dims[i],
                               (long long)e[next_s]);
            next_s++;
        }
    }
    const hlo_comp *c;
    VI_TRY(vi_need_comp(v, HK_TO_APPLY, &c));
    int acc[TPU_MAX_RANK];
    if (n > TPU_MAX_RANK) return vi_fail(v, "too many operands");
    for (int k = 0; k < n; k++) acc[k] = OPS(k)->dtype;
    VI_TRY(vi_reducer(v, c, "to_apply", n, acc));
    if (n == 1) {
        vi_copy(v->out, x);
        return VER_INFER_OK;
    }
    hlo_shape e2[TPU_MAX_RANK];
    for (int k = 0; k < n; k++) e2[k] = *OPS(k);
    return vi_tuple(v, v->out, n, e2);
}

/* ---- reductions and windows ---- */

static ver_infer_status vi_reduce(vi *v)
{
    if (NOPS < 2 || NOPS % 2) return vi_fail(v, "takes N inputs and N init values (an even count), got %d", NOPS);
    int n = NOPS / 2;
    if (n > TPU_MAX_RANK) return vi_fail(v, "too many inputs");
    for (int k = 0; k < NOPS; k++) VI_TRY(vi_need_array(v, k, k < n ? "an input" : "an init value"));
    const hlo_shape *x = OPS(0);
    int acc[TPU_MAX_RANK];
    for (int k = 0; k < n; k++) {
        if (!vi_dims_eq(OPS(k), x)) return vi_fail(v, "input %d %s and input 0 %s have different dimensions", k,
                                                   vi_ss(OPS(k)), vi_ss(x));
        const hlo_shape *init = OPS(n + k);
        if (init->rank != 0) return vi_fail(v, "init value %d must be a scalar, got %s", k, vi_ss(init));
        acc[k] = init->dtype;
    }
    int nd;
    const int64_t *dims;
    VI_TRY(vi_ints(v, HK_DIMENSIONS, 1, &nd, &dims));
    VI_TRY(vi_dims_valid(v, "dimensions", nd, dims, x->rank));
    const hlo_comp *c;
    VI_TRY(vi_need_comp(v, HK_TO_APPLY, &c));
    VI_TRY(vi_reducer(v, c, "to_apply", n, acc));
    int64_t d[TPU_MAX_RANK];
    int r = 0;
    uint16_t dyn = 0;
    for (int i = 0; i < x->rank; i++) {
        if (vi_contains(nd, dims, i)) continue;
        if (x->dyn_mask & (1u << i)) dyn |= (uint16_t)(1u << r);
        d[r++] = x->dims[i];
    }
    if (n == 1) {
        vi_set_array(v->out, acc[0], r, d, dyn);
        return VER_INFER_OK;
    }
    hlo_shape e[TPU_MAX_RANK];
    for (int k = 0; k < n; k++) vi_set_array(&e[k], acc[k], r, d, dyn);
    return vi_tuple(v, v->out, n, e);
}

/* XLA's window output size: base dilated, padded, then the dilated window slid with its stride. */
static ver_infer_status vi_window_dims(vi *v, const hlo_window *w, const hlo_shape *x, const int *which, int n,
                                       int64_t *out)
{
    if (w->rank != n) return vi_fail(v, "the window has %d dimensions, expected %d", w->rank, n);
    for (int i = 0; i < n; i++) {
        const hlo_window_dim *d = &w->d[i];
        if (d->size <= 0) return vi_fail(v, "window dimension %d has size %lld (must be positive)", i, (long long)d->size);
        if (d->stride <= 0) return vi_fail(v, "window dimension %d has stride %lld (must be positive)", i, (long long)d->stride);
        if (d->lhs_dilate <= 0 || d->rhs_dilate <= 0) return vi_fail(v, "window dimension %d has a dilation below 1", i);
        int64_t base = x->dims[which ? which[i] : i];
        vi_ovf = 0;
        int64_t db = base <= 0 ? 0 : vi_add(vi_mul(base - 1, d->lhs_dilate), 1);
        int64_t padded = vi_add(vi_add(db, d->pad_lo), d->pad_hi);
        int64_t dw = vi_add(vi_mul(d->size - 1, d->rhs_dilate), 1);
        if (vi_ovf) return vi_fail(v, "window dimension %d: sizes overflow", i);
        if (padded < 0) return vi_fail(v, "window dimension %d: padding leaves a negative size", i);
        out[i] = padded < dw ? 0 : (padded - dw) / d->stride + 1;
    }
    return VER_INFER_OK;
}

static const hlo_window *vi_window(vi *v)
{
    static const hlo_window none;
    const hlo_attr *a = vi_attr(v, HK_WINDOW);
    return a ? a->v.window : &none;
}

static ver_infer_status vi_reduce_window(vi *v)
{
    if (NOPS < 2 || NOPS % 2) return vi_fail(v, "takes N inputs and N init values (an even count), got %d", NOPS);
    int n = NOPS / 2;
    if (n > TPU_MAX_RANK) return vi_fail(v, "too many inputs");
    for (int k = 0; k < NOPS; k++) VI_TRY(vi_need_array(v, k, k < n ? "an input" : "an init value"));
    const hlo_shape *x = OPS(0);
    int acc[TPU_MAX_RANK];
    for (int k = 0; k < n; k++) {
        if (!vi_dims_eq(OPS(k), x)) return vi_fail(v, "input %d %s and input 0 %s differ", k, vi_ss(OPS(k)), vi_ss(x));
        if (OPS(n + k)->rank != 0) return vi_fail(v, "init value %d must be a scalar, got %s", k, vi_ss(OPS(n + k)));
        acc[k] = OPS(n + k)->dtype;
    }
    const hlo_comp *c;
    VI_TRY(vi_need_comp(v, HK_TO_APPLY, &c));
    VI_TRY(vi_reducer(v, c, "to_apply", n, acc));
    int64_t d[TPU_MAX_RANK];
    VI_TRY(vi_window_dims(v, vi_window(v), x, NULL, x->rank, d));
    if (n == 1) {
        vi_set_array(v->out, acc[0], x->rank, d, 0);
        return VER_INFER_OK;
    }
    hlo_shape e[TPU_MAX_RANK];
    for (int k = 0; k < n; k++) vi_set_array(&e[k], acc[k], x->rank, d, 0);
    return vi_tuple(v, v->out, n, e);
}

static ver_infer_status vi_select_and_scatter(vi *v)
{
    for (int k = 0; k < 3; k++) VI_TRY(vi_need_array(v, k, k == 0 ? "the operand" : k == 1 ? "the source" : "the init value"));
    const hlo_shape *x = OPS(0), *src = OPS(1), *init = OPS(2);
    if (init->rank != 0 || init->dtype != x->dtype)
        return vi_fail(v, "the init value must be a %s scalar, got %s", vi_tn(x->dtype), vi_ss(init));
    int64_t d[TPU_MAX_RANK];
    VI_TRY(vi_window_dims(v, vi_window(v), x, NULL, x->rank, d));
    hlo_shape ws;
    vi_set_array(&ws, src->dtype, x->rank, d, 0);
    if (!vi_dims_eq(src, &ws))
        return vi_fail(v, "the source %s must have the window output shape %s", vi_ss(src), vi_ss(&ws));
    const hlo_comp *sel, *sct;
    VI_TRY(vi_need_comp(v, HK_SELECT, &sel));
    VI_TRY(vi_need_comp(v, HK_SCATTER, &sct));
    hlo_shape two[2];
    vi_set_array(&two[0], x->dtype, 0, NULL, 0);
    two[1] = two[0];
    VI_TRY(vi_check_params(v, sel, "select", 2, two, 1));
    const hlo_shape *sr = &sel->root->shape;
    if (!hlo_shape_is_array(sr) || sr->rank || sr->dtype != TPU_PRED)
        return vi_fail(v, "select computation '%s' must return pred[], returns %s", sel->name, vi_ss(sr));
    int acc[1] = {src->dtype};
    VI_TRY(vi_reducer(v, sct, "scatter", 1, acc));
    vi_copy(v->out, x);
    return VER_INFER_OK;
}

static ver_infer_status vi_map(vi *v)
{
    if (NOPS < 1) return vi_fail(v, "needs at least one operand");
    for (int k = 0; k < NOPS; k++) VI_TRY(vi_need_array(v, k, "an operand"));
    const hlo_shape *x = OPS(0);
    hlo_shape sc[64];
    if (NOPS > 64) return vi_fail(v, "too many operands");
    for (int k = 0; k < NOPS; k++) {
        if (!vi_dims_eq(OPS(k), x)) return vi_fail(v, "operand %d %s and operand 0 %s differ", k, vi_ss(OPS(k)), vi_ss(x));
        vi_set_array(&sc[k], OPS(k)->dtype, 0, NULL, 0);
    }
    const hlo_comp *c;
    VI_TRY(vi_need_comp(v, HK_TO_APPLY, &c));
    VI_TRY(vi_check_params(v, c, "to_apply", NOPS, sc, 0));
    const hlo_shape *r = &c->root->shape;
    if (!hlo_shape_is_array(r) || r->rank)
        return vi_fail(v, "to_apply computation '%s' must return a scalar, returns %s", c->name, vi_ss(r));
    vi_set_array(v->out, r->dtype, x->rank, x->dims, x->dyn_mask);
    return VER_INFER_OK;
}

static ver_infer_status vi_sort(vi *v)
{
    if (NOPS < 1) return vi_fail(v, "needs at least one operand");
    if (NOPS > 32) return vi_fail(v, "too many operands");
    for (int k = 0; k < NOPS; k++) VI_TRY(vi_need_array(v, k, "an operand"));
    const hlo_shape *x = OPS(0);
    int nd;
    const int64_t *dims;
    VI_TRY(vi_ints(v, HK_DIMENSIONS, 1, &nd, &dims));
    if (nd != 1) return vi_fail(v, "dimensions={d} must name exactly one dimension, got %d", nd);
    if (dims[0] < 0 || dims[0] >= x->rank)
        return vi_fail(v, "sort dimension %lld out of range for %s", (long long)dims[0], vi_ss(x));
    hlo_shape sc[64];
    for (int k = 0; k < NOPS; k++) {
        if (!vi_dims_eq(OPS(k), x)) return vi_fail(v, "operand %d %s and operand 0 %s differ", k, vi_ss(OPS(k)), vi_ss(x));
        vi_set_array(&sc[2 * k], OPS(k)->dtype, 0, NULL, 0);
        sc[2 * k + 1] = sc[2 * k];
    }
    const hlo_comp *c;
    VI_TRY(vi_need_comp(v, HK_TO_APPLY, &c));
    VI_TRY(vi_check_params(v, c, "comparator", 2 * NOPS, sc, 1));
    const hlo_shape *r = &c->root->shape;
    if (!hlo_shape_is_array(r) || r->rank || r->dtype != TPU_PRED)
        return vi_fail(v, "comparator '%s' must return pred[], returns %s", c->name, vi_ss(r));
    if (NOPS == 1) {
        vi_copy(v->out, x);
        return VER_INFER_OK;
    }
    hlo_shape e[32];
    for (int k = 0; k < NOPS; k++) e[k] = *OPS(k);
    return vi_tuple(v, v->out, NOPS, e);
}

static ver_infer_status vi_topk(vi *v)
{
    VI_TRY(vi_need_array(v, 0, "the operand"));
    const hlo_shape *x = OPS(0);
    const hlo_attr *ka;
    VI_TRY(vi_need_attr(v, HK_K, &ka));
    if (x->rank < 1) return vi_fail(v, "the operand must have rank 1 or more, got %s", vi_ss(x));
    int64_t k = ka->v.i, last = x->dims[x->rank - 1];
    if (k < 0 || (last >= 0 && k > last))
        return vi_fail(v, "k=%lld but the last dimension of %s has %lld elements", (long long)k, vi_ss(x), (long long)last);
    hlo_shape e[2];
    vi_set_array(&e[0], x->dtype, x->rank, x->dims, 0);
    e[0].dims[x->rank - 1] = k;
    e[1] = e[0];
    e[1].dtype = TPU_S32;
    return vi_tuple(v, v->out, 2, e);
}

/* ---- dot and convolution ---- */

/* The result element type of an MXU op: the declared (preferred) type when it is a legal choice, else the
 * operands' (higher precision) type. */
static ver_infer_status vi_mxu_type(vi *v, int ta, int tb, int *rt)
{
    /* Mixed operand types are legal HLO (XLA's OperandUpcaster / DotOperandConverter passes exist to normalise
     * them, e.g. bf16 x s4 weight-only quantisation): the result takes the floating or wider type. */
    if (vi_is_complex(ta) != vi_is_complex(tb))
        return vi_fail(v, "operands mix complex and real element types (%s and %s)", vi_tn(ta), vi_tn(tb));
    int t;
    if (vi_is_int(ta) && vi_is_int(tb)) t = tpu_dtype_bits((tpu_dtype)ta) >= tpu_dtype_bits((tpu_dtype)tb) ? ta : tb;
    else if (vi_kind(ta) != vi_kind(tb)) t = vi_is_float(ta) || vi_is_complex(ta) ? ta : tb;
    else t = vi_higher(ta, tb);
    int d = v->in->shape.dtype;
    if (d != TPU_INVALID && hlo_shape_is_array(&v->in->shape)) {
        /* preferred_element_type: ints may accumulate into ints or floats, floats into floats */
        int ok = vi_is_float(t) || vi_is_complex(t) ? (vi_kind(d) == vi_kind(t)) : (vi_is_int(d) || vi_is_float(d));
        if (vi_is_pred(t)) ok = d == TPU_PRED || vi_is_int(d) || vi_is_float(d);
        if (!ok) return vi_fail(v, "result type %s is not a valid accumulation type for %s operands", vi_tn(d), vi_tn(t));
        t = d;
    }
    *rt = t;
    return VER_INFER_OK;
}

typedef struct vi_dnums {
    int n_lb, n_rb, n_lc, n_rc;
    const int64_t *lb, *rb, *lc, *rc;
} vi_dnums;

static ver_infer_status vi_dot_core(vi *v, const hlo_shape *a, const hlo_shape *b, vi_dnums *dn, int skip_rhs_dim,
                                    int64_t *d, int *rank)
{
    VI_TRY(vi_ints(v, HK_LHS_BATCH_DIMS, 0, &dn->n_lb, &dn->lb));
    VI_TRY(vi_ints(v, HK_RHS_BATCH_DIMS, 0, &dn->n_rb, &dn->rb));
    VI_TRY(vi_ints(v, HK_LHS_CONTRACTING_DIMS, 0, &dn->n_lc, &dn->lc));
    VI_TRY(vi_ints(v, HK_RHS_CONTRACTING_DIMS, 0, &dn->n_rc, &dn->rc));
    if (dn->n_lb != dn->n_rb)
        return vi_fail(v, "lhs has %d batch dimensions but rhs has %d", dn->n_lb, dn->n_rb);
    if (dn->n_lc != dn->n_rc)
        return vi_fail(v, "lhs has %d contracting dimensions but rhs has %d", dn->n_lc, dn->n_rc);
    VI_TRY(vi_dims_valid(v, "lhs_batch_dims", dn->n_lb, dn->lb, a->rank));
    VI_TRY(vi_dims_valid(v, "rhs_batch_dims", dn->n_rb, dn->rb, b->rank));
    VI_TRY(vi_dims_valid(v, "lhs_contracting_dims", dn->n_lc, dn->lc, a->rank));
    VI_TRY(vi_dims_valid(v, "rhs_contracting_dims", dn->n_rc, dn->rc, b->rank));
    for (int i = 0; i < dn->n_lc; i++)
        if (vi_contains(dn->n_lb, dn->lb, dn->lc[i]) || vi_contains(dn->n_rb, dn->rb, dn->rc[i]))
            return vi_fail(v, "a dimension is both batch and contracting");
    for (int i = 0; i < dn->n_lb; i++) {
        int64_t x = a->dims[dn->lb[i]], y = b->dims[dn->rb[i]];
        if (x != y && x >= 0 && y >= 0)
            return vi_fail(v, "batch dimension sizes differ: lhs dim %lld is %lld, rhs dim %lld is %lld",
                           (long long)dn->lb[i], (long long)x, (long long)dn->rb[i], (long long)y);
    }
    for (int i = 0; i < dn->n_lc; i++) {
        int64_t x = a->dims[dn->lc[i]], y = b->dims[dn->rc[i]];
        if (x != y && x >= 0 && y >= 0)
            return vi_fail(v, "contracting dimension sizes differ: lhs dim %lld is %lld, rhs dim %lld is %lld",
                           (long long)dn->lc[i], (long long)x, (long long)dn->rc[i], (long long)y);
    }
    int r = 0;
    for (int i = 0; i < dn->n_lb; i++) d[r++] = a->dims[dn->lb[i]];
    for (int i = 0; i < a->rank; i++)
        if (!vi_contains(dn->n_lb, dn->lb, i) && !vi_contains(dn->n_lc, dn->lc, i)) d[r++] = a->dims[i];
    for (int i = 0; i < b->rank; i++)
        if (!vi_contains(dn->n_rb, dn->rb, i) && !vi_contains(dn->n_rc, dn->rc, i) && i != skip_rhs_dim) {
            if (r == TPU_MAX_RANK) return vi_fail(v, "result rank above %d", TPU_MAX_RANK);
            d[r++] = b->dims[i];
        }
    *rank = r;
    return VER_INFER_OK;
}

static ver_infer_status vi_dot(vi *v)
{
    VI_TRY(vi_need_array(v, 0, "lhs"));
    VI_TRY(vi_need_array(v, 1, "rhs"));
    const hlo_shape *a = OPS(0), *b = OPS(1);
    vi_dnums dn;
    int64_t d[TPU_MAX_RANK];
    int r, t;
    VI_TRY(vi_dot_core(v, a, b, &dn, -1, d, &r));
    if (v->in->op == HLO_SCALED_DOT) {
        for (int k = 2; k < 4; k++) {
            VI_TRY(vi_need_array(v, k, "a scale"));
            if (OPS(k)->rank != OPS(k - 2)->rank)
                return vi_fail(v, "scale %s must have the rank of its operand %s", vi_ss(OPS(k)), vi_ss(OPS(k - 2)));
        }
        t = v->in->shape.dtype != TPU_INVALID ? v->in->shape.dtype : TPU_F32;
    } else {
        VI_TRY(vi_mxu_type(v, a->dtype, b->dtype, &t));
    }
    const hlo_attr *pr = vi_attr(v, HK_OPERAND_PRECISION);
    if (pr && pr->v.idents.n != 2 && pr->v.idents.n != 0)
        return vi_fail(v, "operand_precision has %d entries, expected 2 (one per operand)", pr->v.idents.n);
    vi_set_array(v->out, t, r, d, 0);
    return VER_INFER_OK;
}

static ver_infer_status vi_ragged_dot(vi *v)
{
    for (int k = 0; k < 3; k++) VI_TRY(vi_need_array(v, k, k == 0 ? "lhs" : k == 1 ? "rhs" : "group sizes"));
    const hlo_shape *a = OPS(0), *b = OPS(1), *g = OPS(2);
    int nlr, nrg;
    const int64_t *lr, *rg;
    VI_TRY(vi_ints(v, HK_LHS_RAGGED_DIMS, 1, &nlr, &lr));
    VI_TRY(vi_ints(v, HK_RHS_GROUP_DIMS, 0, &nrg, &rg));
    if (nlr != 1) return vi_fail(v, "lhs_ragged_dims must name exactly one dimension, got %d", nlr);
    if (lr[0] < 0 || lr[0] >= a->rank) return vi_fail(v, "lhs_ragged_dims %lld out of range", (long long)lr[0]);
    if (!vi_is_int(g->dtype) || g->rank < 1) return vi_fail(v, "group sizes must be an integer array, got %s", vi_ss(g));
    int64_t groups = g->dims[g->rank - 1];
    vi_dnums dn;
    int64_t d[TPU_MAX_RANK];
    int r, t;
    memset(&dn, 0, sizeof dn);
    VI_TRY(vi_ints(v, HK_LHS_CONTRACTING_DIMS, 0, &dn.n_lc, &dn.lc));
    VI_TRY(vi_ints(v, HK_LHS_BATCH_DIMS, 0, &dn.n_lb, &dn.lb));
    int mode = vi_contains(dn.n_lc, dn.lc, lr[0]) ? 1 : vi_contains(dn.n_lb, dn.lb, lr[0]) ? 2 : 0;
    int skip = -1;
    if (mode == 0) {
        /* ragged non-contracting dimension: rhs carries one matrix per group */
        if (nrg != 1) return vi_fail(v, "rhs_group_dims must name one dimension when the ragged dimension is not contracting");
        if (rg[0] < 0 || rg[0] >= b->rank) return vi_fail(v, "rhs_group_dims %lld out of range", (long long)rg[0]);
        if (b->dims[rg[0]] != groups && groups >= 0)
            return vi_fail(v, "rhs group dimension has %lld groups but group sizes %s has %lld", (long long)b->dims[rg[0]],
                           vi_ss(g), (long long)groups);
        skip = (int)rg[0];
    }
    VI_TRY(vi_dot_core(v, a, b, &dn, skip, d, &r));
    VI_TRY(vi_mxu_type(v, a->dtype, b->dtype, &t));
    if (mode == 1) {
        /* ragged contracting dimension: one result per group in front */
        if (r == TPU_MAX_RANK) return vi_fail(v, "result rank above %d", TPU_MAX_RANK);
        memmove(d + 1 + dn.n_lb, d + dn.n_lb, sizeof(int64_t) * (size_t)(r - dn.n_lb));
        d[dn.n_lb] = groups;
        r++;
    }
    vi_set_array(v->out, t, r, d, 0);
    return VER_INFER_OK;
}

static ver_infer_status vi_convolution(vi *v)
{
    VI_TRY(vi_need_array(v, 0, "lhs"));
    VI_TRY(vi_need_array(v, 1, "rhs"));
    const hlo_shape *a = OPS(0), *b = OPS(1);
    const hlo_attr *dla;
    VI_TRY(vi_need_attr(v, HK_DIM_LABELS, &dla));
    const hlo_dimlabels *dl = dla->v.dimlabels;
    int ns = dl->nspatial;
    if (a->rank != ns + 2 || b->rank != ns + 2)
        return vi_fail(v, "dim_labels %s has %d spatial dimensions, so lhs and rhs need rank %d; got %s and %s", dl->text,
                       ns, ns + 2, vi_ss(a), vi_ss(b));
    int64_t fg = hlo_attr_int(v->in, HK_FEATURE_GROUP_COUNT, 1), bg = hlo_attr_int(v->in, HK_BATCH_GROUP_COUNT, 1);
    if (fg < 1 || bg < 1) return vi_fail(v, "group counts must be at least 1 (feature %lld, batch %lld)", (long long)fg, (long long)bg);
    if (fg > 1 && bg > 1) return vi_fail(v, "feature_group_count and batch_group_count cannot both exceed 1");
    int64_t in_b = a->dims[dl->in_batch], in_f = a->dims[dl->in_feature];
    int64_t k_i = b->dims[dl->k_in], k_o = b->dims[dl->k_out];
    if (in_f % fg)
        return vi_fail(v, "input features (%lld) are not divisible by feature_group_count=%lld", (long long)in_f, (long long)fg);
    if (in_f / fg != k_i)
        return vi_fail(v, "input features %lld / feature_group_count %lld = %lld, but the kernel's input feature dimension "
                          "is %lld", (long long)in_f, (long long)fg, (long long)(in_f / fg), (long long)k_i);
    if (k_o % fg)
        return vi_fail(v, "kernel output features (%lld) are not divisible by feature_group_count=%lld", (long long)k_o, (long long)fg);
    if (in_b % bg)
        return vi_fail(v, "batch (%lld) is not divisible by batch_group_count=%lld", (long long)in_b, (long long)bg);
    if (k_o % bg)
        return vi_fail(v, "kernel output features (%lld) are not divisible by batch_group_count=%lld", (long long)k_o, (long long)bg);
    const hlo_window *w = vi_window(v);
    if (w->rank != ns) return vi_fail(v, "window has %d dimensions but dim_labels has %d spatial dimensions", w->rank, ns);
    for (int i = 0; i < ns; i++)
        if (w->d[i].size != b->dims[dl->k_spatial[i]])
            return vi_fail(v, "window size %lld in spatial dimension %d differs from the kernel's %lld (rhs dim %d)",
                           (long long)w->d[i].size, i, (long long)b->dims[dl->k_spatial[i]], dl->k_spatial[i]);
    int64_t sp[TPU_MAX_RANK];
    VI_TRY(vi_window_dims(v, w, a, dl->in_spatial, ns, sp));
    int64_t d[TPU_MAX_RANK];
    d[dl->out_batch] = in_b / bg;
    d[dl->out_feature] = k_o;
    for (int i = 0; i < ns; i++) d[dl->out_spatial[i]] = sp[i];
    int t;
    VI_TRY(vi_mxu_type(v, a->dtype, b->dtype, &t));
    vi_set_array(v->out, t, ns + 2, d, 0);
    return VER_INFER_OK;
}

/* ---- linear algebra, fft, batch norm, rng ---- */

static ver_infer_status vi_fft(vi *v)
{
    VI_TRY(vi_need_array(v, 0, "the operand"));
    const hlo_shape *x = OPS(0);
    const char *ty = hlo_attr_str(v->in, HK_FFT_TYPE);
    int nl;
    const int64_t *len;
    if (!ty) return vi_fail(v, "the required attribute fft_type= (FFT, IFFT, RFFT, IRFFT) is missing");
    VI_TRY(vi_ints(v, HK_FFT_LENGTH, 1, &nl, &len));
    if (nl < 1 || nl > 3) return vi_fail(v, "fft_length must have 1 to 3 entries, got %d", nl);
    if (x->rank < nl) return vi_fail(v, "operand %s has fewer dimensions than fft_length (%d)", vi_ss(x), nl);
    int64_t d[TPU_MAX_RANK];
    memcpy(d, x->dims, sizeof(int64_t) * x->rank);
    int first = x->rank - nl, rt;
    if (!strcmp(ty, "FFT") || !strcmp(ty, "IFFT")) {
        if (!vi_is_complex(x->dtype)) return vi_fail(v, "%s needs a complex operand, got %s", ty, vi_ss(x));
        for (int i = 0; i < nl; i++)
            if (d[first + i] != len[i])
                return vi_fail(v, "fft_length[%d]=%lld but the operand dimension is %lld", i, (long long)len[i], (long long)d[first + i]);
        rt = x->dtype;
    } else if (!strcmp(ty, "RFFT")) {
        if (x->dtype != TPU_F32 && x->dtype != TPU_F64) return vi_fail(v, "RFFT needs an f32 or f64 operand, got %s", vi_ss(x));
        for (int i = 0; i < nl; i++)
            if (d[first + i] != len[i])
                return vi_fail(v, "fft_length[%d]=%lld but the operand dimension is %lld", i, (long long)len[i], (long long)d[first + i]);
        d[x->rank - 1] = len[nl - 1] / 2 + 1;
        rt = x->dtype == TPU_F64 ? TPU_C128 : TPU_C64;
    } else if (!strcmp(ty, "IRFFT")) {
        if (!vi_is_complex(x->dtype)) return vi_fail(v, "IRFFT needs a complex operand, got %s", vi_ss(x));
        for (int i = 0; i < nl - 1; i++)
            if (d[first + i] != len[i])
                return vi_fail(v, "fft_length[%d]=%lld but the operand dimension is %lld", i, (long long)len[i], (long long)d[first + i]);
        if (d[x->rank - 1] != len[nl - 1] / 2 + 1)
            return vi_fail(v, "IRFFT: the last operand dimension must be fft_length/2+1 = %lld, got %lld",
                           (long long)(len[nl - 1] / 2 + 1), (long long)d[x->rank - 1]);
        d[x->rank - 1] = len[nl - 1];
        rt = vi_complex_part(x->dtype);
    } else {
        return vi_fail(v, "fft_type=%s is not one of FFT, IFFT, RFFT, IRFFT", ty);
    }
    vi_set_array(v->out, rt, x->rank, d, 0);
    return VER_INFER_OK;
}

static ver_infer_status vi_square(vi *v, const hlo_shape *a, const char *what)
{
    if (a->rank < 2) return vi_fail(v, "%s must have rank 2 or more, got %s", what, vi_ss(a));
    if (a->dims[a->rank - 1] != a->dims[a->rank - 2])
        return vi_fail(v, "%s %s must be square in its two minor dimensions", what, vi_ss(a));
    if (!vi_is_float(a->dtype) && !vi_is_complex(a->dtype)) return vi_fail(v, "%s must be float or complex, got %s", what, vi_ss(a));
    return VER_INFER_OK;
}

static ver_infer_status vi_cholesky(vi *v)
{
    VI_TRY(vi_need_array(v, 0, "the operand"));
    VI_TRY(vi_square(v, OPS(0), "the operand"));
    vi_copy(v->out, OPS(0));
    return VER_INFER_OK;
}

static ver_infer_status vi_triangular_solve(vi *v)
{
    VI_TRY(vi_need_array(v, 0, "a"));
    VI_TRY(vi_need_array(v, 1, "b"));
    const hlo_shape *a = OPS(0), *b = OPS(1);
    VI_TRY(vi_square(v, a, "a"));
    if (b->rank != a->rank || b->dtype != a->dtype)
        return vi_fail(v, "a %s and b %s must have the same rank and element type", vi_ss(a), vi_ss(b));
    for (int i = 0; i < a->rank - 2; i++)
        if (a->dims[i] != b->dims[i]) return vi_fail(v, "batch dimension %d differs: a %s, b %s", i, vi_ss(a), vi_ss(b));
    int left = hlo_attr_bool(v->in, HK_LEFT_SIDE, 0);
    int64_t m = a->dims[a->rank - 1], bd = left ? b->dims[b->rank - 2] : b->dims[b->rank - 1];
    if (bd != m)
        return vi_fail(v, "with left_side=%s, b's %s dimension must be %lld (a is %s), got %lld", left ? "true" : "false",
                       left ? "second-minor" : "minor", (long long)m, vi_ss(a), (long long)bd);
    vi_copy(v->out, b);
    return VER_INFER_OK;
}

static ver_infer_status vi_batch_norm(vi *v)
{
    hlo_op op = (hlo_op)v->in->op;
    for (int k = 0; k < NOPS; k++) VI_TRY(vi_need_array(v, k, "an operand"));
    const hlo_shape *x = OPS(0);
    if (!vi_is_float(x->dtype)) return vi_fail(v, "the operand must be a float, got %s", vi_ss(x));
    const hlo_attr *fi, *ep;
    VI_TRY(vi_need_attr(v, HK_FEATURE_INDEX, &fi));
    VI_TRY(vi_need_attr(v, HK_EPSILON, &ep));
    if (fi->v.i < 0 || fi->v.i >= x->rank)
        return vi_fail(v, "feature_index=%lld out of range for %s", (long long)fi->v.i, vi_ss(x));
    int64_t f = x->dims[fi->v.i];
    /* training: scale, offset; inference: scale, offset, mean, variance; grad: scale, mean, variance, grad_output */
    int nvec = op == HLO_BATCH_NORM_GRAD ? 3 : NOPS - 1;
    for (int k = 1; k <= nvec; k++) {
        const hlo_shape *s = OPS(k);
        if (s->rank != 1 || s->dims[0] != f || s->dtype != x->dtype)
            return vi_fail(v, "operand %d must be %s[%lld] (the feature dimension), got %s", k, vi_tn(x->dtype), (long long)f,
                           vi_ss(s));
    }
    if (op == HLO_BATCH_NORM_GRAD && (!vi_dims_eq(OPS(4), x) || OPS(4)->dtype != x->dtype))
        return vi_fail(v, "grad_output %s must have the operand's shape %s", vi_ss(OPS(4)), vi_ss(x));
    if (op == HLO_BATCH_NORM_INFERENCE) {
        vi_copy(v->out, x);
        return VER_INFER_OK;
    }
    hlo_shape e[3];
    vi_set_array(&e[0], x->dtype, x->rank, x->dims, 0);
    vi_set_array(&e[1], x->dtype, 1, &f, 0);
    e[2] = e[1];
    return vi_tuple(v, v->out, 3, e);
}

static ver_infer_status vi_rng(vi *v)
{
    const hlo_shape *d = &v->in->shape;
    if (!hlo_shape_is_array(d)) return vi_fail(v, "the result must be an array");
    const char *dist = hlo_attr_str(v->in, HK_DISTRIBUTION);
    if (!dist) return vi_fail(v, "the required attribute distribution= (rng_uniform, rng_normal) is missing");
    if (NOPS != 2) return vi_fail(v, "takes 2 operands (a, b), got %d", NOPS);
    for (int k = 0; k < 2; k++)
        if (!hlo_shape_is_array(OPS(k)) || OPS(k)->rank != 0 || OPS(k)->dtype != d->dtype)
            return vi_fail(v, "operand %d must be a %s scalar, got %s", k, vi_tn(d->dtype), vi_ss(OPS(k)));
    vi_copy(v->out, d);
    return VER_INFER_GIVEN;
}

static ver_infer_status vi_rng_bit_generator(vi *v)
{
    VI_TRY(vi_need_array(v, 0, "the state"));
    const hlo_shape *d = &v->in->shape;
    if (!hlo_shape_is_tuple(d) || d->ntuple != 2)
        return vi_fail(v, "the result must be a tuple (new state, random values), got %s", vi_ss(d));
    if (!ver_shape_match(&d->tuple[0], OPS(0)))
        return vi_fail(v, "the new state %s must have the state's shape %s", vi_ss(&d->tuple[0]), vi_ss(OPS(0)));
    vi_copy(v->out, d);
    return VER_INFER_GIVEN;
}

/* ---- control flow and calls ---- */

static ver_infer_status vi_operand_shapes(vi *v, int first, int n, hlo_shape **out)
{
    *out = ut_arena_alloc(v->a, (size_t)(n > 0 ? n : 1) * sizeof(hlo_shape));
    if (!*out) return vi_fail(v, "out of memory");
    for (int k = 0; k < n; k++) (*out)[k] = *OPS(first + k);
    return VER_INFER_OK;
}

static ver_infer_status vi_call(vi *v)
{
    const hlo_comp *c;
    hlo_attr_key key = v->in->op == HLO_FUSION ? HK_CALLS : HK_TO_APPLY;
    VI_TRY(vi_need_comp(v, key, &c));
    hlo_shape *ps;
    VI_TRY(vi_operand_shapes(v, 0, NOPS, &ps));
    VI_TRY(vi_check_params(v, c, v->in->op == HLO_FUSION ? "fused" : "called", NOPS, ps, 0));
    vi_copy(v->out, &c->root->shape);
    return VER_INFER_OK;
}

static ver_infer_status vi_while(vi *v)
{
    const hlo_comp *cond, *body;
    VI_TRY(vi_need_comp(v, HK_CONDITION, &cond));
    VI_TRY(vi_need_comp(v, HK_BODY, &body));
    const hlo_shape *t = OPS(0);
    VI_TRY(vi_check_params(v, cond, "condition", 1, t, 0));
    VI_TRY(vi_check_params(v, body, "body", 1, t, 0));
    const hlo_shape *cr = &cond->root->shape, *br = &body->root->shape;
    if (!hlo_shape_is_array(cr) || cr->rank || cr->dtype != TPU_PRED)
        return vi_fail(v, "condition computation '%s' must return pred[], returns %s", cond->name, vi_ss(cr));
    if (!ver_shape_match(br, t))
        return vi_fail(v, "body computation '%s' returns %s but the loop state is %s (they must be the same)", body->name,
                       vi_ss(br), vi_ss(t));
    vi_copy(v->out, t);
    return VER_INFER_OK;
}

static ver_infer_status vi_conditional(vi *v)
{
    if (NOPS < 1) return vi_fail(v, "needs at least one operand (the branch selector)");
    VI_TRY(vi_need_array(v, 0, "the branch selector"));
    const hlo_shape *sel = OPS(0);
    if (sel->rank != 0 || (sel->dtype != TPU_PRED && sel->dtype != TPU_S32))
        return vi_fail(v, "the selector must be pred[] or s32[], got %s", vi_ss(sel));
    const hlo_comp *br[256];
    int nb = 0;
    if (sel->dtype == TPU_PRED) {
        const hlo_comp *t = vi_comp(v, HK_TRUE_COMPUTATION, 0), *f = vi_comp(v, HK_FALSE_COMPUTATION, 0);
        if (!t || !f) return vi_fail(v, "a pred selector needs true_computation= and false_computation=");
        br[nb++] = t;
        br[nb++] = f;
    } else {
        const hlo_attr *a = vi_attr(v, HK_BRANCH_COMPUTATIONS);
        if (!a) return vi_fail(v, "an s32 selector needs branch_computations={...}");
        if (a->v.comps.n < 1 || a->v.comps.n > 256) return vi_fail(v, "needs 1 to 256 branches, got %d", a->v.comps.n);
        for (int i = 0; i < a->v.comps.n; i++) br[nb++] = a->v.comps.v[i];
    }
    if (NOPS != nb + 1)
        return vi_fail(v, "has %d branches, so it takes %d operands (selector + one per branch), got %d", nb, nb + 1, NOPS);
    for (int i = 0; i < nb; i++) {
        VI_TRY(vi_check_params(v, br[i], "branch", 1, OPS(i + 1), 0));
        if (i && !ver_shape_match(&br[i]->root->shape, &br[0]->root->shape))
            return vi_fail(v, "branch '%s' returns %s but branch '%s' returns %s (all branches must agree)", br[i]->name,
                           vi_ss(&br[i]->root->shape), br[0]->name, vi_ss(&br[0]->root->shape));
    }
    vi_copy(v->out, &br[0]->root->shape);
    return VER_INFER_OK;
}

static ver_infer_status vi_scan(vi *v)
{
    const hlo_comp *c;
    VI_TRY(vi_need_comp(v, HK_TO_APPLY, &c));
    const hlo_attr *nc;
    VI_TRY(vi_need_attr(v, HK_NUM_CARRIES, &nc));
    if (nc->v.i < 0 || nc->v.i > NOPS) return vi_fail(v, "num_carries=%lld out of range for %d operands", (long long)nc->v.i, NOPS);
    if (c->nparams != NOPS)
        return vi_fail(v, "to_apply computation '%s' takes %d parameters, expected %d (inputs and carries)", c->name,
                       c->nparams, NOPS);
    /* the result layout of scan is not pinned down in the sources read: take the written shape */
    if (v->in->shape.dtype == TPU_INVALID) return vi_fail(v, "cannot infer the result of scan: write its shape");
    vi_copy(v->out, &v->in->shape);
    return VER_INFER_GIVEN;
}

/* ---- collectives ---- */

/* Participants per group (XLA's GetSubgroupSize): replica_groups' group size, or with no groups the replica
 * count, partition count or both, by the mode that channel_id / use_global_device_ids select. */
static ver_infer_status vi_group_size(vi *v, int64_t *size)
{
    const hlo_attr *g = vi_attr(v, HK_REPLICA_GROUPS);
    int has_channel = vi_attr(v, HK_CHANNEL_ID) != NULL;
    const hlo_attr *ug = vi_attr(v, HK_USE_GLOBAL_DEVICE_IDS);
    int global = ug && ug->v.b;
    int64_t rc = hlo_module_replica_count(v->m), np = hlo_module_num_partitions(v->m);
    int64_t gs = -1;
    hlo_op op = (hlo_op)v->in->op;
    /* only ops whose result size depends on the group size need uniform groups (XLA's CheckReplicaGroups) */
    int uniform = op == HLO_ALL_GATHER || op == HLO_ALL_GATHER_START || op == HLO_ALL_TO_ALL || op == HLO_REDUCE_SCATTER;
    if (g && g->kind == HA_RGROUPS) {
        const hlo_rgroups *r = g->v.rgroups;
        if (r->iota) gs = r->gdims[1];
        else if (r->ngroups) {
            gs = r->len[0];
            for (int i = 1; i < r->ngroups && uniform; i++)
                if (r->len[i] != gs)
                    return vi_fail(v, "replica groups have different sizes (%lld and %d): every group must be as large "
                                      "for this op", (long long)gs, r->len[i]);
        }
    }
    int partition_mode_only = op == HLO_ALL_TO_ALL || op == HLO_COLLECTIVE_PERMUTE || op == HLO_COLLECTIVE_BROADCAST ||
                              op == HLO_RAGGED_ALL_TO_ALL;
    if (!has_channel) {
        if (global) return vi_fail(v, "use_global_device_ids=true needs a channel_id");
        *size = gs >= 0 ? gs : rc;
    } else if (partition_mode_only || !ug) {
        *size = gs >= 0 ? gs : np;   /* cross-partition */
    } else if (!global) {
        vi_ovf = 0;
        *size = vi_mul(gs >= 0 ? gs : rc, np);   /* cross-replica-and-partition: replicas from all partitions */
        if (vi_ovf) return vi_fail(v, "the participant count overflows");
    } else {
        if (gs < 0) return vi_fail(v, "use_global_device_ids=true needs non-empty replica_groups");
        *size = gs;
    }
    if (*size < 1) *size = 1;
    return VER_INFER_OK;
}

/* all-reduce, collective-broadcast, all-reduce-start: operand shapes (a tuple for several). */
static ver_infer_status vi_same_as_operands(vi *v)
{
    if (NOPS < 1) return vi_fail(v, "needs at least one operand");
    if (NOPS == 1) {
        vi_copy(v->out, OPS(0));
        return VER_INFER_OK;
    }
    hlo_shape *ps;
    VI_TRY(vi_operand_shapes(v, 0, NOPS, &ps));
    return vi_tuple(v, v->out, NOPS, ps);
}

static ver_infer_status vi_all_reduce(vi *v)
{
    const hlo_comp *c;
    VI_TRY(vi_need_comp(v, HK_TO_APPLY, &c));
    for (int k = 0; k < NOPS; k++) {
        VI_TRY(vi_need_array(v, k, "an operand"));
        int acc[1] = {OPS(k)->dtype};
        VI_TRY(vi_reducer(v, c, "to_apply", 1, acc));
    }
    int64_t gs;
    VI_TRY(vi_group_size(v, &gs));
    VI_TRY(vi_same_as_operands(v));
    const hlo_shape *d = &v->in->shape;
    if (v->in->op == HLO_ALL_REDUCE_START && hlo_shape_is_tuple(d) && d->ntuple == 2 && !ver_shape_match(d, v->out) &&
        ver_shape_match(&d->tuple[0], v->out) && ver_shape_match(&d->tuple[1], v->out)) {
        /* older XLA wrote all-reduce-start as (operands, results) */
        hlo_shape e[2] = {*v->out, *v->out};
        return vi_tuple(v, v->out, 2, e);
    }
    return VER_INFER_OK;
}

/* all-gather (multiply dimension d by the group size) and reduce-scatter (divide it). */
static ver_infer_status vi_gather_scatter_dim(vi *v, int gather)
{
    if (NOPS < 1) return vi_fail(v, "needs at least one operand");
    int nd;
    const int64_t *dims;
    VI_TRY(vi_ints(v, HK_DIMENSIONS, 1, &nd, &dims));
    if (nd != 1) return vi_fail(v, "dimensions={d} must name exactly one dimension, got %d", nd);
    if (!gather) {
        const hlo_comp *c;
        VI_TRY(vi_need_comp(v, HK_TO_APPLY, &c));
        for (int k = 0; k < NOPS; k++) {
            VI_TRY(vi_need_array(v, k, "an operand"));
            int acc[1] = {OPS(k)->dtype};
            VI_TRY(vi_reducer(v, c, "to_apply", 1, acc));
        }
    }
    int64_t gs;
    VI_TRY(vi_group_size(v, &gs));
    hlo_shape *e = ut_arena_alloc(v->a, (size_t)NOPS * sizeof(hlo_shape));
    if (!e) return vi_fail(v, "out of memory");
    for (int k = 0; k < NOPS; k++) {
        VI_TRY(vi_need_array(v, k, "an operand"));
        const hlo_shape *x = OPS(k);
        int64_t d = dims[0];
        if (d < 0 || d >= x->rank) return vi_fail(v, "dimension %lld out of range for %s", (long long)d, vi_ss(x));
        vi_set_array(&e[k], x->dtype, x->rank, x->dims, x->dyn_mask);
        if (gather) {
            vi_ovf = 0;
            e[k].dims[d] = vi_mul(x->dims[d], gs);
            if (vi_ovf) return vi_fail(v, "the gathered size overflows");
        } else {
            if (x->dims[d] % gs)
                return vi_fail(v, "dimension %lld of %s (%lld) is not divisible by the %lld participants", (long long)d,
                               vi_ss(x), (long long)x->dims[d], (long long)gs);
            e[k].dims[d] = x->dims[d] / gs;
        }
    }
    if (NOPS == 1) {
        *v->out = e[0];
        return VER_INFER_OK;
    }
    return vi_tuple(v, v->out, NOPS, e);
}

static ver_infer_status vi_all_to_all(vi *v)
{
    if (NOPS < 1) return vi_fail(v, "needs at least one operand");
    int nd;
    const int64_t *dims;
    VI_TRY(vi_ints(v, HK_DIMENSIONS, 0, &nd, &dims));
    int64_t gs;
    VI_TRY(vi_group_size(v, &gs));
    if (nd > 1) return vi_fail(v, "dimensions={d} names at most one split dimension, got %d", nd);
    if (nd == 1) {
        if (NOPS != 1) return vi_fail(v, "with a split dimension it takes one operand, got %d", NOPS);
        VI_TRY(vi_need_array(v, 0, "the operand"));
        const hlo_shape *x = OPS(0);
        int64_t d = dims[0];
        if (d < 0 || d >= x->rank) return vi_fail(v, "split dimension %lld out of range for %s", (long long)d, vi_ss(x));
        if (x->dims[d] % gs)
            return vi_fail(v, "split dimension %lld of %s (%lld) is not divisible by the %lld participants", (long long)d,
                           vi_ss(x), (long long)x->dims[d], (long long)gs);
    }
    return vi_same_as_operands(v);
}

static ver_infer_status vi_collective_permute(vi *v)
{
    const hlo_attr *st = vi_attr(v, HK_SOURCE_TARGET_PAIRS);
    if (!st) return vi_fail(v, "the required attribute source_target_pairs={{src,dst},...} is missing");
    for (int i = 0; i < st->v.intss.n; i++)
        if (st->v.intss.len[i] != 2) return vi_fail(v, "source_target_pairs entry %d is not a {source,target} pair", i);
    const hlo_shape *res;
    if (NOPS == 1) res = OPS(0);
    else if (NOPS == 4) res = OPS(1);   /* input, output, input start, output start */
    else return vi_fail(v, "takes 1 operand (or 4 with slice_sizes), got %d", NOPS);
    if (v->in->op == HLO_COLLECTIVE_PERMUTE) {
        vi_copy(v->out, res);
        return VER_INFER_OK;
    }
    /* start: (operand, result, context...) as written, or the result alone (MHLO's exporter writes that) */
    const hlo_shape *d = &v->in->shape;
    if (hlo_shape_is_array(d)) {
        vi_copy(v->out, res);
        return VER_INFER_OK;
    }
    if (!hlo_shape_is_tuple(d) || d->ntuple < 2) return vi_fail(v, "the result must be a tuple (operand, result, ...), got %s", vi_ss(d));
    if (!ver_shape_match(&d->tuple[0], OPS(0)) || !ver_shape_match(&d->tuple[1], res))
        return vi_fail(v, "the result %s must start with the operand and result shapes %s, %s", vi_ss(d), vi_ss(OPS(0)), vi_ss(res));
    vi_copy(v->out, d);
    return VER_INFER_GIVEN;
}

static ver_infer_status vi_all_gather_start(vi *v)
{
    hlo_shape res;
    VI_TRY(vi_gather_scatter_dim(v, 1));
    res = *v->out;
    const hlo_shape *d = &v->in->shape;
    if (hlo_shape_is_array(d)) return VER_INFER_OK;   /* written as the gathered result alone (MHLO's exporter does) */
    if (!hlo_shape_is_tuple(d) || d->ntuple != 2)
        return vi_fail(v, "the result must be a tuple (operands, results), got %s", vi_ss(d));
    hlo_shape ops;
    if (NOPS == 1) ops = *OPS(0);
    else {
        hlo_shape *ps;
        VI_TRY(vi_operand_shapes(v, 0, NOPS, &ps));
        VI_TRY(vi_tuple(v, &ops, NOPS, ps));
    }
    hlo_shape e[2] = {ops, res};
    return vi_tuple(v, v->out, 2, e);
}

/* *-done: element `idx` of the start's tuple (or the operand itself for all-reduce-done). */
static ver_infer_status vi_done(vi *v, int idx)
{
    const hlo_shape *s = OPS(0);
    if (idx < 0) {
        vi_copy(v->out, s);
        return VER_INFER_OK;
    }
    if (!hlo_shape_is_tuple(s) || s->ntuple <= idx)
        return vi_fail(v, "the operand must be the tuple of its start op, got %s", vi_ss(s));
    vi_copy(v->out, &s->tuple[idx]);
    return VER_INFER_OK;
}

/* ---- async wrappers, copies, host transfers, tokens ---- */

static ver_infer_status vi_async_start(vi *v)
{
    const hlo_comp *c;
    VI_TRY(vi_need_comp(v, HK_CALLS, &c));
    hlo_shape *ps;
    VI_TRY(vi_operand_shapes(v, 0, NOPS, &ps));
    VI_TRY(vi_check_params(v, c, "async", NOPS, ps, 0));
    const hlo_shape *d = &v->in->shape;
    if (!hlo_shape_is_tuple(d) || d->ntuple < 2)
        return vi_fail(v, "the result must be a tuple ((operands), result, context...), got %s", vi_ss(d));
    hlo_shape ops;
    VI_TRY(vi_tuple(v, &ops, NOPS, ps));
    if (!ver_shape_match(&d->tuple[0], &ops))
        return vi_fail(v, "element 0 of the result %s must be the operand shapes %s", vi_ss(&d->tuple[0]), vi_ss(&ops));
    if (!ver_shape_match(&d->tuple[1], &c->root->shape))
        return vi_fail(v, "element 1 of the result %s must be what '%s' returns, %s", vi_ss(&d->tuple[1]), c->name,
                       vi_ss(&c->root->shape));
    vi_copy(v->out, d);
    return VER_INFER_GIVEN;
}

static ver_infer_status vi_copy_start(vi *v)
{
    const hlo_shape *x = OPS(0), *d = &v->in->shape;
    if (!hlo_shape_is_tuple(d) || d->ntuple < 2)
        return vi_fail(v, "the result must be a tuple (destination, source, context), got %s", vi_ss(d));
    if (!ver_shape_match(&d->tuple[0], x) || !ver_shape_match(&d->tuple[1], x))
        return vi_fail(v, "the result %s must hold the operand shape %s twice", vi_ss(d), vi_ss(x));
    vi_copy(v->out, d);
    return VER_INFER_GIVEN;
}

static int vi_is_token(const hlo_shape *s) { return s->dtype == TPU_TOKEN; }

static ver_infer_status vi_token(vi *v)
{
    for (int k = 0; k < NOPS; k++)
        if (!vi_is_token(OPS(k))) return vi_fail(v, "operand %d must be a token, got %s", k, vi_ss(OPS(k)));
    memset(v->out, 0, sizeof *v->out);
    v->out->dtype = TPU_TOKEN;
    return VER_INFER_OK;
}

static ver_infer_status vi_host(vi *v)
{
    hlo_op op = (hlo_op)v->in->op;
    const hlo_shape *d = &v->in->shape;
    hlo_shape e[3];
    switch (op) {
    case HLO_INFEED:
        if (!vi_is_token(OPS(0))) return vi_fail(v, "the operand must be a token, got %s", vi_ss(OPS(0)));
        if (!hlo_shape_is_tuple(d) || d->ntuple != 2 || !vi_is_token(&d->tuple[1]))
            return vi_fail(v, "the result must be a tuple (data, token[]), got %s", vi_ss(d));
        vi_copy(v->out, d);
        return VER_INFER_GIVEN;
    case HLO_OUTFEED: {
        if (!vi_is_token(OPS(1))) return vi_fail(v, "operand 1 must be a token, got %s", vi_ss(OPS(1)));
        const hlo_attr *os = vi_attr(v, HK_OUTFEED_SHAPE);
        if (os && !ver_shape_match(os->v.shape, OPS(0)))
            return vi_fail(v, "outfeed_shape %s differs from the data %s", vi_ss(os->v.shape), vi_ss(OPS(0)));
        memset(v->out, 0, sizeof *v->out);
        v->out->dtype = TPU_TOKEN;
        return VER_INFER_OK;
    }
    case HLO_SEND:
        if (!vi_is_token(OPS(1))) return vi_fail(v, "operand 1 must be a token, got %s", vi_ss(OPS(1)));
        e[0] = *OPS(0);
        vi_set_array(&e[1], TPU_U32, 0, NULL, 0);
        memset(&e[2], 0, sizeof e[2]);
        e[2].dtype = TPU_TOKEN;
        return vi_tuple(v, v->out, 3, e);
    case HLO_SEND_DONE:
        memset(v->out, 0, sizeof *v->out);
        v->out->dtype = TPU_TOKEN;
        return VER_INFER_OK;
    case HLO_RECV:
        if (!vi_is_token(OPS(0))) return vi_fail(v, "the operand must be a token, got %s", vi_ss(OPS(0)));
        if (!hlo_shape_is_tuple(d) || d->ntuple != 3 || !vi_is_token(&d->tuple[2]))
            return vi_fail(v, "the result must be a tuple (data, u32[], token[]), got %s", vi_ss(d));
        vi_copy(v->out, d);
        return VER_INFER_GIVEN;
    case HLO_RECV_DONE: {
        const hlo_shape *r = OPS(0);
        if (!hlo_shape_is_tuple(r) || r->ntuple != 3)
            return vi_fail(v, "the operand must be a recv (data, u32[], token[]), got %s", vi_ss(r));
        e[0] = r->tuple[0];
        e[1] = r->tuple[2];
        return vi_tuple(v, v->out, 2, e);
    }
    default:
        return vi_fail(v, "internal: not a host transfer");
    }
}

static ver_infer_status vi_dimension_size(vi *v)
{
    VI_TRY(vi_need_array(v, 0, "the operand"));
    const hlo_shape *x = OPS(0);
    int nd;
    const int64_t *d;
    VI_TRY(vi_ints(v, HK_DIMENSIONS, 1, &nd, &d));
    if (nd != 1 || d[0] < 0 || d[0] >= x->rank) return vi_fail(v, "dimensions={d} must name one dimension of %s", vi_ss(x));
    if (v->in->op == HLO_GET_DIMENSION_SIZE) {
        vi_set_array(v->out, TPU_S32, 0, NULL, 0);
        return VER_INFER_OK;
    }
    const hlo_shape *sz = OPS(1);
    if (!hlo_shape_is_array(sz) || sz->rank || sz->dtype != TPU_S32)
        return vi_fail(v, "the size must be s32[], got %s", vi_ss(sz));
    vi_set_array(v->out, x->dtype, x->rank, x->dims, (uint16_t)(x->dyn_mask | (1u << d[0])));
    return VER_INFER_OK;
}

static ver_infer_status vi_custom_call(vi *v)
{
    if (!hlo_attr_str(v->in, HK_CUSTOM_CALL_TARGET) && !vi_attr(v, HK_CUSTOM_CALL_TARGET))
        return vi_fail(v, "the required attribute custom_call_target=\"...\" is missing");
    const hlo_attr *olc = vi_attr(v, HK_OPERAND_LAYOUT_CONSTRAINTS);
    if (olc && olc->v.shapes.n != NOPS)
        return vi_fail(v, "operand_layout_constraints lists %d shapes for %d operands", olc->v.shapes.n, NOPS);
    for (int k = 0; olc && k < NOPS; k++)
        if (!ver_shape_match(&olc->v.shapes.v[k], OPS(k)))
            return vi_fail(v, "operand_layout_constraints shape %d %s differs from operand %s", k,
                           vi_ss(&olc->v.shapes.v[k]), vi_ss(OPS(k)));
    vi_copy(v->out, &v->in->shape);
    return VER_INFER_GIVEN;
}

/* ---- dispatch ---- */

/* The fewest operands a variadic op can have (its rule reads that many before counting them itself). */
static int vi_min_operands(hlo_op op)
{
    switch (op) {
    case HLO_SCATTER: return 3;
    case HLO_CONVOLUTION: case HLO_DYNAMIC_UPDATE_SLICE: case HLO_REDUCE: case HLO_REDUCE_WINDOW: case HLO_RNG:
        return 2;
    case HLO_ALL_GATHER: case HLO_ALL_GATHER_START: case HLO_ALL_REDUCE: case HLO_ALL_REDUCE_START:
    case HLO_ALL_TO_ALL: case HLO_ASYNC_UPDATE: case HLO_COLLECTIVE_BROADCAST: case HLO_COLLECTIVE_PERMUTE:
    case HLO_COLLECTIVE_PERMUTE_START: case HLO_COLLECTIVE_REDUCE: case HLO_CONCATENATE: case HLO_CONDITIONAL:
    case HLO_DYNAMIC_RESHAPE: case HLO_DYNAMIC_SLICE: case HLO_MAP: case HLO_REDUCE_SCATTER: case HLO_SORT:
        return 1;
    default: return 0;
    }
}

ver_infer_status ver_infer_shape(const hlo_module *m, const hlo_instr *in, ut_arena *arena, hlo_shape *out,
                                 char *msg, size_t msg_size)
{
    vi V = {m, in, arena, msg, msg_size, out};
    vi *v = &V;
    if (msg && msg_size) msg[0] = 0;
    memset(out, 0, sizeof *out);
    hlo_op op = (hlo_op)in->op;
    for (int k = 0; k < in->nops; k++)
        if (in->ops[k]->shape.dtype == TPU_INVALID)
            return vi_fail(v, "operand %d ('%s') has no known shape", k, in->ops[k]->name);
    int ar = hlo_op_arity(op), least = vi_min_operands(op);
    if (ar >= 0 && in->nops != ar)
        return vi_fail(v, "takes %d operand%s, got %d", ar, ar == 1 ? "" : "s", in->nops);
    if (in->nops < least)
        return vi_fail(v, "takes at least %d operand%s, got %d", least, least == 1 ? "" : "s", in->nops);
    switch (hlo_op_class(op)) {
    case HLO_CLASS_EW1:
        if (op == HLO_CONVERT) return vi_convert(v);
        return vi_unary(v);
    case HLO_CLASS_EW2: case HLO_CLASS_CMP: return vi_binary(v);
    case HLO_CLASS_EW3: return op == HLO_SELECT ? vi_select(v) : vi_clamp(v);
    default: break;
    }
    switch (op) {
    case HLO_PARAMETER:
    case HLO_CONSTANT:
        if (in->shape.dtype == TPU_INVALID) return vi_fail(v, "needs its shape written");
        vi_copy(out, &in->shape);
        return VER_INFER_GIVEN;
    case HLO_COPY: return vi_unary(v);
    case HLO_BITCAST: return vi_bitcast(v);
    case HLO_BITCAST_CONVERT: return vi_bitcast_convert(v);
    case HLO_RESHAPE: case HLO_DYNAMIC_RESHAPE: return vi_reshape(v);
    case HLO_BROADCAST: return vi_broadcast(v);
    case HLO_TRANSPOSE: return vi_transpose(v);
    case HLO_REVERSE: return vi_reverse(v);
    case HLO_SLICE: return vi_slice(v);
    case HLO_DYNAMIC_SLICE: return vi_dynamic_slice(v);
    case HLO_DYNAMIC_UPDATE_SLICE: return vi_dynamic_update_slice(v);
    case HLO_CONCATENATE: return vi_concatenate(v);
    case HLO_PAD: return vi_pad(v);
    case HLO_IOTA: return vi_iota(v);
    case HLO_GET_TUPLE_ELEMENT: return vi_gte(v);
    case HLO_TUPLE: return vi_tuple_op(v);
    case HLO_GATHER: return vi_gather(v);
    case HLO_SCATTER: return vi_scatter(v);
    case HLO_REDUCE: return vi_reduce(v);
    case HLO_REDUCE_WINDOW: return vi_reduce_window(v);
    case HLO_SELECT_AND_SCATTER: return vi_select_and_scatter(v);
    case HLO_MAP: return vi_map(v);
    case HLO_SORT: return vi_sort(v);
    case HLO_TOPK: return vi_topk(v);
    case HLO_DOT: case HLO_SCALED_DOT: return vi_dot(v);
    case HLO_RAGGED_DOT: return vi_ragged_dot(v);
    case HLO_CONVOLUTION: return vi_convolution(v);
    case HLO_FFT: return vi_fft(v);
    case HLO_CHOLESKY: return vi_cholesky(v);
    case HLO_TRIANGULAR_SOLVE: return vi_triangular_solve(v);
    case HLO_BATCH_NORM_TRAINING: case HLO_BATCH_NORM_INFERENCE: case HLO_BATCH_NORM_GRAD: return vi_batch_norm(v);
    case HLO_RNG: return vi_rng(v);
    case HLO_RNG_BIT_GENERATOR: return vi_rng_bit_generator(v);
    case HLO_RNG_GET_AND_UPDATE_STATE:
        if (!vi_attr(v, HK_DELTA)) return vi_fail(v, "the required attribute delta= is missing");
        vi_copy(out, &in->shape);
        return VER_INFER_GIVEN;
    case HLO_CALL: case HLO_FUSION: return vi_call(v);
    case HLO_WHILE: return vi_while(v);
    case HLO_CONDITIONAL: return vi_conditional(v);
    case HLO_SCAN: return vi_scan(v);
    case HLO_ALL_REDUCE: case HLO_ALL_REDUCE_START: return vi_all_reduce(v);
    case HLO_COLLECTIVE_REDUCE: return vi_all_reduce(v);
    case HLO_ALL_REDUCE_DONE: {
        /* the older (operands, results) start form gives its element 1 */
        const hlo_shape *x = OPS(0);
        int old = hlo_shape_is_tuple(x) && x->ntuple == 2 && ver_shape_match(&x->tuple[0], &x->tuple[1]) &&
                  hlo_shape_is_array(&x->tuple[0]);
        return vi_done(v, old ? 1 : -1);
    }
    case HLO_ALL_GATHER: return vi_gather_scatter_dim(v, 1);
    case HLO_ALL_GATHER_START: return vi_all_gather_start(v);
    case HLO_ALL_GATHER_DONE: return vi_done(v, hlo_shape_is_array(OPS(0)) ? -1 : 1);
    case HLO_REDUCE_SCATTER: return vi_gather_scatter_dim(v, 0);
    case HLO_ALL_TO_ALL: return vi_all_to_all(v);
    case HLO_RAGGED_ALL_TO_ALL:
        for (int k = 2; k < 6; k++)
            if (!hlo_shape_is_array(OPS(k)) || !vi_is_int(OPS(k)->dtype))
                return vi_fail(v, "offset/size operand %d must be an integer array, got %s", k, vi_ss(OPS(k)));
        vi_copy(out, OPS(1));
        return VER_INFER_OK;
    case HLO_COLLECTIVE_BROADCAST: return vi_same_as_operands(v);
    case HLO_COLLECTIVE_PERMUTE: case HLO_COLLECTIVE_PERMUTE_START: return vi_collective_permute(v);
    case HLO_COLLECTIVE_PERMUTE_DONE: return vi_done(v, hlo_shape_is_array(OPS(0)) ? -1 : 1);
    case HLO_REPLICA_ID: case HLO_PARTITION_ID:
        vi_set_array(out, TPU_U32, 0, NULL, 0);
        return VER_INFER_OK;
    case HLO_AFTER_ALL: return vi_token(v);
    case HLO_ADD_DEPENDENCY:
        if (!vi_is_token(OPS(1))) return vi_fail(v, "operand 1 must be a token, got %s", vi_ss(OPS(1)));
        vi_copy(out, OPS(0));
        return VER_INFER_OK;
    case HLO_OPT_BARRIER: case HLO_DOMAIN: case HLO_ASYNC_UPDATE:
        vi_copy(out, OPS(0));
        return VER_INFER_OK;
    case HLO_ASYNC_START: return vi_async_start(v);
    case HLO_ASYNC_DONE: return vi_done(v, 1);
    case HLO_COPY_START: return vi_copy_start(v);
    case HLO_COPY_DONE: return vi_done(v, 0);
    case HLO_INFEED: case HLO_OUTFEED: case HLO_SEND: case HLO_SEND_DONE: case HLO_RECV: case HLO_RECV_DONE:
        return vi_host(v);
    case HLO_GET_DIMENSION_SIZE: case HLO_SET_DIMENSION_SIZE: return vi_dimension_size(v);
    case HLO_CUSTOM_CALL: return vi_custom_call(v);
    default:
        /* shuffle and anything newer: take the written shape */
        if (in->shape.dtype == TPU_INVALID) return vi_fail(v, "cannot infer this opcode's shape: write it");
        vi_copy(out, &in->shape);
        return VER_INFER_GIVEN;
    }
}

/* A program the TPU compiler produced (it carries tiled layouts) is checked as XLA checks it after
 * optimization, with mixed precision allowed: its float-normalization pass leaves copies and selects whose
 * float types differ from their operands' (bf16 copies of f32 values, a bf16 select of f32 branches). */
int ver_mixed_precision(const hlo_module *m)
{
    for (int c = 0; c < m->ncomps; c++)
        for (int i = 0; i < m->comps[c]->ninstrs; i++) {
            const hlo_shape *s = &m->comps[c]->instrs[i]->shape;
            if (s->layout && s->layout->ntiles) return 1;
        }
    return 0;
}

int ver_shape_match_ignoring_fp(const hlo_shape *a, const hlo_shape *b)
{
    if (!vi_same_ignoring_fp(a->dtype, b->dtype)) return 0;
    if (hlo_shape_is_tuple(a)) {
        if (!hlo_shape_is_tuple(b) || a->ntuple != b->ntuple) return 0;
        for (int i = 0; i < a->ntuple; i++)
            if (!ver_shape_match_ignoring_fp(&a->tuple[i], &b->tuple[i])) return 0;
        return 1;
    }
    return vi_dims_eq(a, b);
}

int ver_shape_match(const hlo_shape *a, const hlo_shape *b)
{
    if (a->dtype != b->dtype) return 0;
    if (hlo_shape_is_tuple(a)) {
        if (a->ntuple != b->ntuple) return 0;
        for (int i = 0; i < a->ntuple; i++)
            if (!ver_shape_match(&a->tuple[i], &b->tuple[i])) return 0;
        return 1;
    }
    return vi_dims_eq(a, b);
}

/* ---- filling in omitted shapes ---- */

static tpu_status ver_fill_comp(tpu_ctx *ctx, hlo_module *m, hlo_comp *c, uint8_t *done)
{
    for (int i = 0; i < c->ninstrs; i++) {
        hlo_instr *in = c->instrs[i];
        if (!in->shape_omitted || in->shape.dtype != TPU_INVALID) continue;
        char msg[400];
        hlo_shape s;
        ver_infer_status st = ver_infer_shape(m, in, &m->arena, &s, msg, sizeof msg);
        if (st == VER_INFER_ERROR || s.dtype == TPU_INVALID) {
            char w[300];
            return ut_err(ctx, TPU_ERR_SHAPE, "%s: cannot infer the shape of '%s', which the text leaves out: %s",
                          hlo_where(m, in, w, sizeof w), in->name, msg[0] ? msg : "unknown reason");
        }
        in->shape = s;
    }
    done[c->id] = 1;
    return TPU_OK;
}

tpu_status ver_fill_shapes(tpu_ctx *ctx, hlo_module *m)
{
    int any = 0;
    for (int c = 0; c < m->ncomps && !any; c++)
        for (int i = 0; i < m->comps[c]->ninstrs && !any; i++) any = m->comps[c]->instrs[i]->shape_omitted;
    if (!any) return TPU_OK;
    /* callees first: post-order over the (acyclic) call graph, iteratively */
    int n = m->ncomps;
    uint8_t *done = ut_calloc((size_t)n + 1, 1);
    /* frames of (computation, instruction, callee of that instruction): each call edge is visited once */
    int *stack = ut_malloc((size_t)(n + 1) * 3 * sizeof(int));
    uint8_t *onstack = ut_calloc((size_t)n + 1, 1);
    tpu_status st = done && stack && onstack ? TPU_OK : ut_nomem(ctx);
    for (int r = 0; st == TPU_OK && r < n; r++) {
        if (done[r]) continue;
        int sp = 0;
        stack[sp++] = r;
        stack[sp++] = 0;
        stack[sp++] = 0;
        onstack[r] = 1;
        while (st == TPU_OK && sp) {
            hlo_comp *c = m->comps[stack[sp - 3]];
            int *i = &stack[sp - 2], *k = &stack[sp - 1];
            while (*i < c->ninstrs && *k >= c->instrs[*i]->ncalled) {
                (*i)++;
                *k = 0;
            }
            hlo_comp *next = *i < c->ninstrs ? c->instrs[*i]->called[(*k)++] : NULL;
            if (!next) {
                st = ver_fill_comp(ctx, m, c, done);
                onstack[c->id] = 0;
                sp -= 3;
            } else if (!done[next->id] && !onstack[next->id]) {
                onstack[next->id] = 1;
                stack[sp++] = next->id;
                stack[sp++] = 0;
                stack[sp++] = 0;
            }
        }
    }
    ut_free(done);
    ut_free(stack);
    ut_free(onstack);
    return st;
}
