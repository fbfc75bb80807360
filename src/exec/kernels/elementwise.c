/* elementwise.c — unary/binary elementwise ops, compare, select, clamp, convert, bitcast-convert,
 * reduce-precision and map.
 *
 * Each op has a generic path through exe_ops.c (any dtype, one element at a time: the reference semantics)
 * and f32 / bf16 fast loops for the hot ops that compute exactly the same values (same double-then-round
 * arithmetic), so the fast paths never change results. */
#include "exec/exec.h"
#include "exec/exe_ops.h"
#include "ew_block.h"
#include "util/fp.h"

#include <math.h>
#include <string.h>

#define EW_PAR_MIN 32768   /* below this, threads cost more than they give */

static int ew_threads(const exe_state *S) { return S->threads > 0 ? S->threads : 0; }

#define EW_FOR(S, n)                                                                              \
    _Pragma("omp parallel for schedule(static) if ((n) > EW_PAR_MIN) num_threads(ew_threads(S) ? ew_threads(S) : omp_get_max_threads())") \
    for (int64_t i = 0; i < (n); i++)

#include <omp.h>

/* ---- unary ---- */

#define EW_CHUNK 4096

/* f32 -> f32 for the ops whose fast form is exactly the reference (double math, one rounding); the block
 * loops live in ew_block.h, shared with the fused loops. */
static int ew_unary_f32(const exe_state *S, hlo_op op, const float *x, float *y, int64_t n)
{
    if (!ewb_unary_f32(op, x, y, 0)) return 0;
    int64_t nc = (n + EW_CHUNK - 1) / EW_CHUNK;
    EW_FOR(S, nc) ewb_unary_f32(op, x + i * EW_CHUNK, y + i * EW_CHUNK, n - i * EW_CHUNK < EW_CHUNK ? n - i * EW_CHUNK : EW_CHUNK);
    return 1;
}

EXE_KERNEL(exe_k_unary)
{
    const tpu_tensor *a = ops[0]->t;
    tpu_tensor *t;
    tpu_status st = exe_alloc(S, in, &t);
    if (st) return st;
    hlo_op op = (hlo_op)in->op;
    int64_t n = t->count;
    if (a->dtype == TPU_F32 && t->dtype == TPU_F32 && ew_unary_f32(S, op, a->data, t->data, n))
        return exe_out_array(S, t, out);
    tpu_dtype ta = a->dtype, tt = t->dtype;
    EW_FOR(S, n) {
        exe_scalar v = exe_scalar_unop(S, op, ta, exe_scalar_load(ta, a->data, i));
        exe_scalar_store(S, tt, t->data, i, v);
    }
    return exe_out_array(S, t, out);
}

/* ---- binary ---- */

#define ew_maxf ewb_maxf
#define ew_minf ewb_minf

static int ew_binary_f32(const exe_state *S, hlo_op op, const float *x, const float *y, float *z, int64_t n)
{
    if (!ewb_binary_f32(op, x, y, z, 0)) return 0;
    int64_t nc = (n + EW_CHUNK - 1) / EW_CHUNK;
    EW_FOR(S, nc) {
        int64_t o = i * EW_CHUNK, len = n - o < EW_CHUNK ? n - o : EW_CHUNK;
        ewb_binary_f32(op, x + o, y + o, z + o, len);
    }
    return 1;
}

static int ew_binary_bf16(const exe_state *S, hlo_op op, const uint16_t *x, const uint16_t *y, uint16_t *z, int64_t n)
{
#define EW_BF(expr)                                                                   \
    EW_FOR(S, n) {                                                                    \
        float a = fp_bf16_to_f32_inline(x[i]), b = fp_bf16_to_f32_inline(y[i]);       \
        float r = (expr);                                                             \
        z[i] = fp_f32_to_bf16_ftz(r);                                                 \
    }                                                                                 \
    return 1;
    switch (op) {
    case HLO_ADD: EW_BF(a + b)
    case HLO_SUBTRACT: EW_BF(a - b)
    case HLO_MULTIPLY: EW_BF(a * b)
    case HLO_DIVIDE: EW_BF(a / b)
    case HLO_MAXIMUM: EW_BF(ew_maxf(a, b))
    case HLO_MINIMUM: EW_BF(ew_minf(a, b))
    default: return 0;
    }
#undef EW_BF
}

EXE_KERNEL(exe_k_binary)
{
    const tpu_tensor *a = ops[0]->t, *b = ops[1]->t;
    if (a->count != b->count) return exe_fail(S, in, TPU_ERR_SHAPE, "operand sizes differ");
    tpu_tensor *t;
    tpu_status st = exe_alloc(S, in, &t);
    if (st) return st;
    hlo_op op = (hlo_op)in->op;
    int64_t n = t->count;
    if (a->dtype == TPU_F32 && b->dtype == TPU_F32 && t->dtype == TPU_F32 &&
        ew_binary_f32(S, op, a->data, b->data, t->data, n))
        return exe_out_array(S, t, out);
    if (a->dtype == TPU_BF16 && b->dtype == TPU_BF16 && t->dtype == TPU_BF16 &&
        ew_binary_bf16(S, op, a->data, b->data, t->data, n))
        return exe_out_array(S, t, out);
    tpu_dtype ta = a->dtype, tt = t->dtype;
    EW_FOR(S, n) {
        exe_scalar v = exe_scalar_binop(S, op, ta, exe_scalar_load(ta, a->data, i), exe_scalar_load(ta, b->data, i));
        exe_scalar_store(S, tt, t->data, i, v);
    }
    return exe_out_array(S, t, out);
}

/* ---- compare ---- */

EXE_KERNEL(exe_k_compare)
{
    const tpu_tensor *a = ops[0]->t, *b = ops[1]->t;
    const char *dir = hlo_attr_str(in, HK_DIRECTION), *type = hlo_attr_str(in, HK_TYPE);
    if (!dir) return exe_fail(S, in, TPU_ERR_SHAPE, "missing direction=");
    if (a->count != b->count) return exe_fail(S, in, TPU_ERR_SHAPE, "operand sizes differ");
    tpu_tensor *t;
    tpu_status st = exe_alloc(S, in, &t);
    if (st) return st;
    int64_t n = t->count;
    uint8_t *z = t->data;
    int total = type && !strcmp(type, "TOTALORDER");
    if (a->dtype == TPU_F32 && !total) {
        const float *x = a->data, *y = b->data;
        if (!strcmp(dir, "EQ")) { EW_FOR(S, n) z[i] = x[i] == y[i]; }
        else if (!strcmp(dir, "NE")) { EW_FOR(S, n) z[i] = x[i] != y[i]; }
        else if (!strcmp(dir, "LT")) { EW_FOR(S, n) z[i] = x[i] < y[i]; }
        else if (!strcmp(dir, "LE")) { EW_FOR(S, n) z[i] = x[i] <= y[i]; }
        else if (!strcmp(dir, "GT")) { EW_FOR(S, n) z[i] = x[i] > y[i]; }
        else if (!strcmp(dir, "GE")) { EW_FOR(S, n) z[i] = x[i] >= y[i]; }
        else { tpu_tensor_free(t); return exe_fail(S, in, TPU_ERR_SHAPE, "unknown direction %s", dir); }
        return exe_out_array(S, t, out);
    }
    tpu_dtype ta = a->dtype;
    if (total && (tpu_dtype_kind(ta) == 'f')) {
        int d = !strcmp(dir, "EQ") ? 0 : !strcmp(dir, "NE") ? 1 : !strcmp(dir, "LT") ? 2 : !strcmp(dir, "LE") ? 3
              : !strcmp(dir, "GT") ? 4 : 5;
        EW_FOR(S, n) {
            int64_t x = exe_total_order_key(ta, a->data, i), y = exe_total_order_key(ta, b->data, i);
            z[i] = (uint8_t)(d == 0 ? x == y : d == 1 ? x != y : d == 2 ? x < y : d == 3 ? x <= y : d == 4 ? x > y : x >= y);
        }
        return exe_out_array(S, t, out);
    }
    EW_FOR(S, n) z[i] = (uint8_t)exe_scalar_compare(ta, exe_scalar_load(ta, a->data, i), exe_scalar_load(ta, b->data, i), dir, type);
    return exe_out_array(S, t, out);
}

/* ---- select, clamp ---- */

EXE_KERNEL(exe_k_select)
{
    const tpu_tensor *p = ops[0]->t, *a = ops[1]->t, *b = ops[2]->t;
    if (!p || !a || !b) return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "select on tuples");
    tpu_tensor *t;
    tpu_status st = exe_alloc(S, in, &t);
    if (st) return st;
    int64_t n = t->count;
    size_t es = tpu_dtype_size(t->dtype);
    const uint8_t *pp = p->data;
    int scalar_pred = p->count == 1 && n != 1;
    if (es == 4) {
        const uint32_t *x = a->data, *y = b->data;
        uint32_t *z = t->data;
        EW_FOR(S, n) z[i] = pp[scalar_pred ? 0 : i] ? x[i] : y[i];
    } else if (es == 2) {
        const uint16_t *x = a->data, *y = b->data;
        uint16_t *z = t->data;
        EW_FOR(S, n) z[i] = pp[scalar_pred ? 0 : i] ? x[i] : y[i];
    } else {
        const char *x = a->data, *y = b->data;
        char *z = t->data;
        EW_FOR(S, n) memcpy(z + i * es, (pp[scalar_pred ? 0 : i] ? x : y) + i * es, es);
    }
    return exe_out_array(S, t, out);
}

EXE_KERNEL(exe_k_clamp)
{
    const tpu_tensor *lo = ops[0]->t, *x = ops[1]->t, *hi = ops[2]->t;
    tpu_tensor *t;
    tpu_status st = exe_alloc(S, in, &t);
    if (st) return st;
    int64_t n = t->count;
    int slo = lo->count == 1, shi = hi->count == 1;
    tpu_dtype dt = t->dtype;
    if (dt == TPU_F32) {
        const float *l = lo->data, *v = x->data, *h = hi->data;
        float *z = t->data;
        EW_FOR(S, n) z[i] = ew_minf(ew_maxf(v[i], l[slo ? 0 : i]), h[shi ? 0 : i]);
        return exe_out_array(S, t, out);
    }
    EW_FOR(S, n) {
        exe_scalar m = exe_scalar_binop(S, HLO_MAXIMUM, dt, exe_scalar_load(dt, x->data, i),
                                        exe_scalar_load(dt, lo->data, slo ? 0 : i));
        exe_scalar_store(S, dt, t->data, i, exe_scalar_binop(S, HLO_MINIMUM, dt, m, exe_scalar_load(dt, hi->data, shi ? 0 : i)));
    }
    return exe_out_array(S, t, out);
}

/* ---- convert, bitcast-convert, reduce-precision ---- */

EXE_KERNEL(exe_k_convert)
{
    const tpu_tensor *a = ops[0]->t;
    tpu_tensor *t;
    tpu_status st = exe_alloc(S, in, &t);
    if (st) return st;
    int64_t n = t->count;
    tpu_dtype from = a->dtype, to = t->dtype;
    if (from == to) {
        memcpy(t->data, a->data, t->nbytes);
        return exe_out_array(S, t, out);
    }
    if (from == TPU_F32 && to == TPU_BF16) {
        const float *x = a->data;
        uint16_t *z = t->data;
        if (S->numerics == TPU_NUMERICS_TPU) { EW_FOR(S, n) z[i] = fp_f32_to_bf16_ftz(x[i]); }
        else { EW_FOR(S, n) z[i] = fp_f32_to_bf16_inline(x[i]); }
        return exe_out_array(S, t, out);
    }
    if (from == TPU_BF16 && to == TPU_F32) {
        const uint16_t *x = a->data;
        float *z = t->data;
        EW_FOR(S, n) z[i] = fp_bf16_to_f32_inline(x[i]);
        return exe_out_array(S, t, out);
    }
    if (from == TPU_S32 && to == TPU_F32) {
        const int32_t *x = a->data;
        float *z = t->data;
        EW_FOR(S, n) z[i] = (float)x[i];
        return exe_out_array(S, t, out);
    }
    EW_FOR(S, n) exe_scalar_store(S, to, t->data, i, exe_scalar_convert(S, from, to, exe_scalar_load(from, a->data, i)));
    return exe_out_array(S, t, out);
}

EXE_KERNEL(exe_k_bitcast_convert)
{
    const tpu_tensor *a = ops[0]->t;
    tpu_tensor *t;
    tpu_status st = exe_alloc(S, in, &t);
    if (st) return st;
    /* same bytes in row-major order: different widths add/remove a minor dimension, which is exactly the
     * little-endian byte order of the contiguous buffer */
    if (t->nbytes != a->nbytes || tpu_dtype_bits(a->dtype) < 8 || tpu_dtype_bits(t->dtype) < 8 || a->dtype == TPU_PRED ||
        t->dtype == TPU_PRED) {
        tpu_tensor_free(t);
        return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "bitcast-convert between %s and %s", tpu_dtype_name(a->dtype),
                        tpu_dtype_name(in->shape.dtype));
    }
    memcpy(t->data, a->data, t->nbytes);
    return exe_out_array(S, t, out);
}

EXE_KERNEL(exe_k_reduce_precision)
{
    const tpu_tensor *a = ops[0]->t;
    int eb = (int)hlo_attr_int(in, HK_EXPONENT_BITS, -1), mb = (int)hlo_attr_int(in, HK_MANTISSA_BITS, -1);
    if (eb < 1 || mb < 0) return exe_fail(S, in, TPU_ERR_SHAPE, "needs exponent_bits >= 1 and mantissa_bits >= 0");
    tpu_tensor *t;
    tpu_status st = exe_alloc(S, in, &t);
    if (st) return st;
    int64_t n = t->count;
    tpu_dtype dt = t->dtype;
    if (dt == TPU_F32) {
        const float *x = a->data;
        float *z = t->data;
        EW_FOR(S, n) z[i] = fp_reduce_precision_f32(x[i], eb, mb);
    } else if (dt == TPU_F64) {
        const double *x = a->data;
        double *z = t->data;
        EW_FOR(S, n) z[i] = fp_reduce_precision_f64(x[i], eb, mb);
    } else {
        EW_FOR(S, n) exe_store_float(S, dt, t->data, i, fp_reduce_precision_f32((float)ten_load_f64(dt, a->data, i), eb, mb));
    }
    return exe_out_array(S, t, out);
}

/* ---- map ---- */

EXE_KERNEL(exe_k_map)
{
    if (in->ncalled != 1) return exe_fail(S, in, TPU_ERR_SHAPE, "needs to_apply=");
    const exe_scalar_fn *fn;
    tpu_status st = exe_scalar_fn_get(S, in->called[0], &fn);
    if (st) return st;
    if (exe_scalar_fn_nparams(fn) != in->nops || exe_scalar_fn_nresults(fn) != 1)
        return exe_fail(S, in, TPU_ERR_SHAPE, "to_apply takes %d parameters for %d operands", exe_scalar_fn_nparams(fn), in->nops);
    tpu_tensor *t;
    st = exe_alloc(S, in, &t);
    if (st) return st;
    int64_t n = t->count;
    int k = in->nops;
    if (k > 64) {
        tpu_tensor_free(t);
        return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "map over more than 64 operands");
    }
    EW_FOR(S, n) {
        exe_scalar args[64], r;
        for (int j = 0; j < k; j++) args[j] = exe_scalar_load(ops[j]->t->dtype, ops[j]->t->data, i);
        exe_scalar_fn_eval(fn, args, &r);
        exe_scalar_store(S, t->dtype, t->data, i, r);
    }
    return exe_out_array(S, t, out);
}
