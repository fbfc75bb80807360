/* elementwise.c — unary/binary elementwise ops, compare, select, clamp, convert, bitcast-convert,
 * reduce-precision and map.
 *
 * Each op has a generic path through exe_ops.c (any dtype, one element at a time: the reference semantics)
 * and f32 / bf16 fast loops for the hot ops that compute exactly the same values (same double-then-round
 * arithmetic), so the fast paths never change results. */
#include "exec/exec.h"
#include "exec/exe_ops.h"
#include "ew_block.h"
#include "ew_int.h"
#include "ref.h"
#include "stream.h"
#include "util/fp.h"
#include "exec/exe_par.h"

#include <math.h>
#include <string.h>

/* Tests set EXE_REF_ELEMENTWISE (exe_run_cfg.ref) to run the per-element reference loops instead of every
 * fast path below. */
#define EW_FAST (!(S->ref & EXE_REF_ELEMENTWISE))

#define EW_PAR_MIN 32768   /* below this, threads cost more than they give */

/* The per-element (reference-semantics) loops run serially; the fast f32/bf16 paths are split into chunks
 * over exe_par threads (ew_par). */
#define EW_FOR(S, n) for (int64_t i = 0; i < (n); i++)


/* The result buffer: an operand of the same element type and count that dies here and that nobody else holds
 * (every element is read before it is written, at its own index), else a fresh one. *own: the operand's
 * value when taken (then the result). */
static tpu_status ew_result(exe_state *S, const hlo_instr *in, tpu_tensor **t, exe_value **own)
{
    *own = NULL;
    const hlo_shape *s = &in->shape;
    for (int k = 0; k < in->nops && hlo_shape_is_array(s); k++) {
        exe_value *v = S->cur_vals && S->cur_in == in ? S->cur_vals[in->ops[k]->id] : NULL;
        if (!v || !v->t || v->t->dtype != (tpu_dtype)s->dtype || v->t->count != hlo_shape_count(s) || v->t->count < 2) continue;
        if ((*own = exe_take_unique(S, k))) {
            *t = (*own)->t;
            (*t)->rank = s->rank;
            for (int i = 0; i < s->rank; i++) (*t)->dims[i] = s->dims[i];
            return TPU_OK;
        }
    }
    return exe_alloc(S, in, t);
}

static tpu_status ew_out(exe_state *S, tpu_tensor *t, exe_value *own, exe_value **out)
{
    if (own) {
        *out = own;
        return TPU_OK;
    }
    return exe_out_array(S, t, out);
}

/* A fast path over [0, n): fn(job, i0, i1) on chunks of EW_CHUNK elements. */
typedef struct ew_job ew_job;
typedef void (*ew_range_fn)(const ew_job *J, int64_t i0, int64_t i1);
struct ew_job {
    ew_range_fn  fn;
    hlo_op       op;
    int          d;
    const void  *x, *y, *w;
    void        *z;
    int          sx, sw;   /* scalar operands (index 0) */
    int          uns, es;  /* integer ops: unsigned, element bytes (4 or 8); convert: from, to */
    tpu_dtype    from, to;
    int          stream;   /* the result is written with streaming stores (convert: ew_streamed) */
};

static void ew_chunk(void *ctx, int64_t i0, int64_t i1, int tid)
{
    const ew_job *J = ctx;
    J->fn(J, i0, i1);
    if (J->stream) exe_stream_fence();
    (void)tid;
}

static void ew_par(const exe_state *S, int64_t n, ew_job *J)
{
    exe_par_for(n > EW_PAR_MIN ? S->threads : 1, n, 8192, ew_chunk, J);
}

/* ---- unary ---- */


/* f32 -> f32 for the ops whose fast form is exactly the reference (double math, one rounding); the block
 * loops live in ew_block.h, shared with the fused loops. */
EXE_VEC
static void ew_unary_range(const ew_job *J, int64_t i0, int64_t i1)
{
    ewb_unary_f32(J->op, (const float *)J->x + i0, (float *)J->z + i0, i1 - i0);
}

/* bf16 -> bf16 a block at a time through f32 (bf16 values are exact in f32), rounded once */
EXE_VEC
static void ew_unary_bf16_range(const ew_job *J, int64_t i0, int64_t i1)
{
    float a[1024], b[1024];
    for (int64_t o = i0; o < i1; o += 1024) {
        int64_t len = i1 - o < 1024 ? i1 - o : 1024;
        const uint16_t *x = (const uint16_t *)J->x + o;
        uint16_t *z = (uint16_t *)J->z + o;
        for (int64_t i = 0; i < len; i++) a[i] = fp_bf16_to_f32_inline(x[i]);
        ewb_unary_bf16(J->op, a, b, len);
        for (int64_t i = 0; i < len; i++) z[i] = fp_f32_to_bf16_inline(b[i]);   /* exact: b holds bf16 values */
    }
}

static int ew_unary_f32(const exe_state *S, hlo_op op, const float *x, float *y, int64_t n)
{
    if (!ewb_unary_f32(op, x, y, 0)) return 0;
    ew_job J = {.fn = ew_unary_range, .op = op, .x = x, .z = y};
    ew_par(S, n, &J);
    return 1;
}

EXE_VEC
static void ew_unary_int_range(const ew_job *J, int64_t i0, int64_t i1)
{
    if (J->es == 4) ewi_unary32(J->op, J->uns, (const uint32_t *)J->x + i0, (uint32_t *)J->z + i0, i1 - i0);
    else ewi_unary64(J->op, J->uns, (const uint64_t *)J->x + i0, (uint64_t *)J->z + i0, i1 - i0);
}

/* 32- and 64-bit integer lanes (ew_int.h); bf16 through the f32 block form where that is the reference's
 * result (ewb_unary_bf16_ok) */
static int ew_unary_fast(const exe_state *S, hlo_op op, const tpu_tensor *a, tpu_tensor *t)
{
    int bits = tpu_dtype_bits(a->dtype), k = tpu_dtype_kind(a->dtype);
    if (a->dtype == t->dtype && (k == 's' || k == 'u') && (bits == 32 || bits == 64)) {
        if (!ewi_has_unary(op)) return 0;
        ew_job J = {.fn = ew_unary_int_range, .op = op, .x = a->data, .z = t->data, .uns = k == 'u', .es = bits / 8};
        ew_par(S, t->count, &J);
        return 1;
    }
    if (a->dtype == TPU_BF16 && t->dtype == TPU_BF16 && ewb_unary_bf16_ok(op)) {
        ew_job J = {.fn = ew_unary_bf16_range, .op = op, .x = a->data, .z = t->data};
        ew_par(S, t->count, &J);
        return 1;
    }
    return 0;
}

EXE_KERNEL(exe_k_unary)
{
    const tpu_tensor *a = ops[0]->t;
    tpu_tensor *t;
    exe_value *own;
    tpu_status st = ew_result(S, in, &t, &own);
    if (st) return st;
    hlo_op op = (hlo_op)in->op;
    int64_t n = t->count;
    if (EW_FAST && a->dtype == TPU_F32 && t->dtype == TPU_F32 && ew_unary_f32(S, op, a->data, t->data, n))
        return ew_out(S, t, own, out);
    if (EW_FAST && ew_unary_fast(S, op, a, t)) return ew_out(S, t, own, out);
    tpu_dtype ta = a->dtype, tt = t->dtype;
    EW_FOR(S, n) {
        exe_scalar v = exe_scalar_unop(S, op, ta, exe_scalar_load(ta, a->data, i));
        exe_scalar_store(S, tt, t->data, i, v);
    }
    return ew_out(S, t, own, out);
}

/* ---- binary ---- */

#define ew_maxf ewb_maxf
#define ew_minf ewb_minf

EXE_VEC
static void ew_binary_range(const ew_job *J, int64_t i0, int64_t i1)
{
    ewb_binary_f32(J->op, (const float *)J->x + i0, (const float *)J->y + i0, (float *)J->z + i0, i1 - i0);
}

static int ew_binary_f32(const exe_state *S, hlo_op op, const float *x, const float *y, float *z, int64_t n)
{
    if (!ewb_binary_f32(op, x, y, z, 0)) return 0;
    ew_job J = {.fn = ew_binary_range, .op = op, .x = x, .y = y, .z = z};
    ew_par(S, n, &J);
    return 1;
}

/* bf16 op bf16 -> bf16 a block at a time through f32, rounded once (the same values as the fused loops) */
EXE_VEC
static void ew_binary_bf16_range(const ew_job *J, int64_t i0, int64_t i1)
{
    float a[1024], b[1024], c[1024];
    for (int64_t o = i0; o < i1; o += 1024) {
        int64_t len = i1 - o < 1024 ? i1 - o : 1024;
        const uint16_t *x = (const uint16_t *)J->x + o, *y = (const uint16_t *)J->y + o;
        uint16_t *z = (uint16_t *)J->z + o;
        for (int64_t i = 0; i < len; i++) {
            a[i] = fp_bf16_to_f32_inline(x[i]);
            b[i] = fp_bf16_to_f32_inline(y[i]);
        }
        ewb_binary_f32(J->op, a, b, c, len);
        for (int64_t i = 0; i < len; i++) z[i] = fp_f32_to_bf16_ftz_inline(c[i]);
    }
}

static int ew_binary_bf16(const exe_state *S, hlo_op op, const uint16_t *x, const uint16_t *y, uint16_t *z, int64_t n)
{
    if (op == HLO_POWER || !ewb_binary_f32(op, NULL, NULL, NULL, 0)) return 0;
    ew_job J = {.fn = ew_binary_bf16_range, .op = op, .x = x, .y = y, .z = z};
    ew_par(S, n, &J);
    return 1;
}

EXE_VEC
static void ew_binary_int_range(const ew_job *J, int64_t i0, int64_t i1)
{
    if (J->es == 4)
        ewi_binary32(J->op, J->uns, (const uint32_t *)J->x + i0, (const uint32_t *)J->y + i0, (uint32_t *)J->z + i0, i1 - i0);
    else
        ewi_binary64(J->op, J->uns, (const uint64_t *)J->x + i0, (const uint64_t *)J->y + i0, (uint64_t *)J->z + i0, i1 - i0);
}

static int ew_binary_int(const exe_state *S, hlo_op op, const tpu_tensor *a, const tpu_tensor *b, tpu_tensor *t)
{
    int bits = tpu_dtype_bits(a->dtype), k = tpu_dtype_kind(a->dtype);
    if (a->dtype != t->dtype || b->dtype != t->dtype || !(k == 's' || k == 'u') || !(bits == 32 || bits == 64)) return 0;
    if (!ewi_has_binary(op)) return 0;
    ew_job J = {.fn = ew_binary_int_range, .op = op, .x = a->data, .y = b->data, .z = t->data, .uns = k == 'u',
                .es = bits / 8};
    ew_par(S, t->count, &J);
    return 1;
}

EXE_KERNEL(exe_k_binary)
{
    const tpu_tensor *a = ops[0]->t, *b = ops[1]->t;
    if (a->count != b->count) return exe_fail(S, in, TPU_ERR_SHAPE, "operand sizes differ");
    tpu_tensor *t;
    exe_value *own;
    tpu_status st = ew_result(S, in, &t, &own);
    if (st) return st;
    hlo_op op = (hlo_op)in->op;
    int64_t n = t->count;
    if (EW_FAST && a->dtype == TPU_F32 && b->dtype == TPU_F32 && t->dtype == TPU_F32 &&
        ew_binary_f32(S, op, a->data, b->data, t->data, n))
        return ew_out(S, t, own, out);
    if (EW_FAST && a->dtype == TPU_BF16 && b->dtype == TPU_BF16 && t->dtype == TPU_BF16 &&
        ew_binary_bf16(S, op, a->data, b->data, t->data, n))
        return ew_out(S, t, own, out);
    if (EW_FAST && ew_binary_int(S, op, a, b, t)) return ew_out(S, t, own, out);
    tpu_dtype ta = a->dtype, tt = t->dtype;
    EW_FOR(S, n) {
        exe_scalar v = exe_scalar_binop(S, op, ta, exe_scalar_load(ta, a->data, i), exe_scalar_load(ta, b->data, i));
        exe_scalar_store(S, tt, t->data, i, v);
    }
    return ew_out(S, t, own, out);
}

/* ---- compare ---- */

EXE_VEC
static void ew_compare_range(const ew_job *J, int64_t i0, int64_t i1)
{
    ewb_compare_f32(J->d, (const float *)J->x + i0, (const float *)J->y + i0, (uint8_t *)J->z + i0, i1 - i0);
}

EXE_VEC
static void ew_compare_int_range(const ew_job *J, int64_t i0, int64_t i1)
{
    if (J->es == 4)
        ewi_compare32(J->d, J->uns, (const uint32_t *)J->x + i0, (const uint32_t *)J->y + i0, (uint8_t *)J->z + i0, i1 - i0);
    else
        ewi_compare64(J->d, J->uns, (const uint64_t *)J->x + i0, (const uint64_t *)J->y + i0, (uint8_t *)J->z + i0, i1 - i0);
}

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
    if (EW_FAST && a->dtype == TPU_F32 && !total) {
        int d = ewb_direction(dir);
        if (strcmp(dir, "EQ") && strcmp(dir, "NE") && strcmp(dir, "LT") && strcmp(dir, "LE") && strcmp(dir, "GT") &&
            strcmp(dir, "GE")) {
            tpu_tensor_free(t);
            return exe_fail(S, in, TPU_ERR_SHAPE, "unknown direction %s", dir);
        }
        ew_job J = {.fn = ew_compare_range, .d = d, .x = a->data, .y = b->data, .z = z};
        ew_par(S, n, &J);
        return exe_out_array(S, t, out);
    }
    tpu_dtype ta = a->dtype;
    int bits = tpu_dtype_bits(ta), kind = tpu_dtype_kind(ta), di = ewb_direction(dir);
    if (EW_FAST && (kind == 's' || kind == 'u') && (bits == 32 || bits == 64) && di >= 0) {
        ew_job J = {.fn = ew_compare_int_range, .d = di, .x = a->data, .y = b->data, .z = z, .es = bits / 8,
                    .uns = kind == 'u' || (type && !strcmp(type, "UNSIGNED"))};
        ew_par(S, n, &J);
        return exe_out_array(S, t, out);
    }
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

EXE_VEC
static void ew_select_range(const ew_job *J, int64_t i0, int64_t i1)
{
    const uint32_t *x = J->x, *y = J->y;
    const uint8_t *pp = J->w;
    uint32_t *z = J->z;
    if (J->sw) {
        const uint32_t *s = pp[0] ? x : y;
        for (int64_t i = i0; i < i1; i++) z[i] = s[i];
    } else {
        for (int64_t i = i0; i < i1; i++) z[i] = pp[i] ? x[i] : y[i];
    }
}

EXE_VEC
static void ew_clamp_range(const ew_job *J, int64_t i0, int64_t i1)
{
    const float *l = J->x, *v = J->y, *h = J->w;
    float *z = J->z;
    for (int64_t i = i0; i < i1; i++) z[i] = ew_minf(ew_maxf(v[i], l[J->sx ? 0 : i]), h[J->sw ? 0 : i]);
}

EXE_KERNEL(exe_k_select)
{
    const tpu_tensor *p = ops[0]->t, *a = ops[1]->t, *b = ops[2]->t;
    if (!p || !a || !b) return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "select on tuples");
    tpu_tensor *t;
    exe_value *own;
    tpu_status st = ew_result(S, in, &t, &own);
    if (st) return st;
    int64_t n = t->count;
    size_t es = tpu_dtype_size(t->dtype);
    const uint8_t *pp = p->data;
    int scalar_pred = p->count == 1 && n != 1;
    if (es == 4) {
        ew_job J = {.fn = ew_select_range, .x = a->data, .y = b->data, .w = pp, .z = t->data, .sw = scalar_pred};
        ew_par(S, n, &J);
    } else if (es == 8) {
        const uint64_t *x = a->data, *y = b->data;
        uint64_t *z = t->data;
        EW_FOR(S, n) z[i] = pp[scalar_pred ? 0 : i] ? x[i] : y[i];
    } else if (es == 1) {
        const uint8_t *x = a->data, *y = b->data;
        uint8_t *z = t->data;
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
    return ew_out(S, t, own, out);
}

EXE_KERNEL(exe_k_clamp)
{
    const tpu_tensor *lo = ops[0]->t, *x = ops[1]->t, *hi = ops[2]->t;
    tpu_tensor *t;
    exe_value *own;
    tpu_status st = ew_result(S, in, &t, &own);
    if (st) return st;
    int64_t n = t->count;
    int slo = lo->count == 1, shi = hi->count == 1;
    tpu_dtype dt = t->dtype;
    if (EW_FAST && dt == TPU_F32) {
        ew_job J = {.fn = ew_clamp_range, .x = lo->data, .y = x->data, .w = hi->data, .z = t->data, .sx = slo, .sw = shi};
        ew_par(S, n, &J);
        return ew_out(S, t, own, out);
    }
    EW_FOR(S, n) {
        exe_scalar m = exe_scalar_binop(S, HLO_MAXIMUM, dt, exe_scalar_load(dt, x->data, i),
                                        exe_scalar_load(dt, lo->data, slo ? 0 : i));
        exe_scalar_store(S, dt, t->data, i, exe_scalar_binop(S, HLO_MINIMUM, dt, m, exe_scalar_load(dt, hi->data, shi ? 0 : i)));
    }
    return ew_out(S, t, own, out);
}

/* ---- convert, bitcast-convert, reduce-precision ---- */

/* d: 0 bf16 -> f32, 1 f32 -> bf16 (subnormal results flushed, TPU mode), 2 f32 -> bf16 (plain RNE) */
EXE_VEC
static void ew_convert_plain(int d, const void *xv, void *zv, int64_t i0, int64_t i1)
{
    if (d == 0) {
        const uint16_t *x = xv;
        float *z = zv;
        for (int64_t i = i0; i < i1; i++) z[i] = fp_bf16_to_f32_inline(x[i]);
    } else {
        const float *x = xv;
        uint16_t *z = zv;
        if (d == 1) for (int64_t i = i0; i < i1; i++) z[i] = fp_f32_to_bf16_ftz_inline(x[i]);   /* vectorises */
        else for (int64_t i = i0; i < i1; i++) z[i] = fp_f32_to_bf16_inline(x[i]);
    }
}

/* a streamed result is converted a block at a time into a buffer that stays in L1, then streamed out */
static void ew_convert_range(const ew_job *J, int64_t i0, int64_t i1)
{
    if (!J->stream) {
        ew_convert_plain(J->d, J->x, J->z, i0, i1);
        return;
    }
    _Alignas(64) float buf[1024];
    size_t fs = J->d == 0 ? 2 : 4, ts = J->d == 0 ? 4 : 2;
    for (int64_t o = i0; o < i1; o += 1024) {
        int64_t len = i1 - o < 1024 ? i1 - o : 1024;
        ew_convert_plain(J->d, (const char *)J->x + (size_t)o * fs, buf, 0, len);
        exe_stream_copy((char *)J->z + (size_t)o * ts, buf, (size_t)len * ts);
    }
}

EXE_VEC
static void ew_convert_int_range(const ew_job *J, int64_t i0, int64_t i1)
{
    size_t fs = tpu_dtype_size(J->from), ts = tpu_dtype_size(J->to);
    ewi_convert(J->from, J->to, (const char *)J->x + (size_t)i0 * fs, (char *)J->z + (size_t)i0 * ts, i1 - i0);
}

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
    if (EW_FAST && ((from == TPU_F32 && to == TPU_BF16) || (from == TPU_BF16 && to == TPU_F32))) {
        ew_job J = {.fn = ew_convert_range, .d = from == TPU_F32 ? (S->numerics == TPU_NUMERICS_TPU ? 1 : 2) : 0,
                    .x = a->data, .z = t->data, .stream = t->nbytes >= EXE_STREAM_MIN_BYTES && exe_stream_ok()};
        ew_par(S, n, &J);
        return exe_out_array(S, t, out);
    }
    if (EW_FAST && ewi_convert(from, to, NULL, NULL, 0)) {   /* pred, 32/64-bit ints, f32 (ew_int.h) */
        ew_job J = {.fn = ew_convert_int_range, .from = from, .to = to, .x = a->data, .z = t->data};
        ew_par(S, n, &J);
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
