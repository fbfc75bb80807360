/* ew_block.h — elementwise operations on contiguous blocks of f32 values, shared by the elementwise kernels
 * (elementwise.c) and the fused elementwise loops (exe_fuse.c), so that a value computed inside a fusion is
 * bit-for-bit the value the unfused kernel computes. Transcendentals go through double and round once: exp,
 * tanh, logistic, log and log1p with the vectorisable forms of ew_math.h (the scalar reference in exe_ops.c
 * uses the same for f32), the others with libm. bf16 values are held as f32 and rounded after each op. */
#ifndef TPU_EW_BLOCK_H
#define TPU_EW_BLOCK_H

#include "exec/exec.h"
#include "util/fp.h"
#include "ew_math.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Subnormal operands read as zero in max/min (like XLA:CPU under DAZ). In f32 throughout (every comparison
 * of two floats is exact), so the loops vectorise. */
static inline __attribute__((always_inline)) float ewb_dazf(float x)
{
    return fabsf(x) < 1.17549435e-38f ? copysignf(0.0f, x) : x;
}
static inline double ewb_daz(float x) { return (double)ewb_dazf(x); }

/* f32 max/min as integer keys (the reductions' vector fold, reduce.c and exe_fuse.c): the bits of a value read
 * as zero when subnormal, negative ones' magnitude bits flipped, so that integer order is ewb_maxf/ewb_minf's
 * order on non-NaN values (-0 below +0); ewb_unkey maps a key back (NaNs are tracked apart). */
static inline __attribute__((always_inline)) int32_t ewb_key(float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    u = (u & 0x7f800000u) ? u : (u & 0x80000000u);
    int32_t k = (int32_t)u;
    return k ^ (int32_t)((uint32_t)(k >> 31) & 0x7fffffffu);
}
static inline float ewb_unkey(int32_t k)
{
    uint32_t u = (uint32_t)(k ^ (int32_t)((uint32_t)(k >> 31) & 0x7fffffffu));
    float v;
    memcpy(&v, &u, 4);
    return v;
}

static inline __attribute__((always_inline)) float ewb_maxf(float xf, float yf)
{
    float x = ewb_dazf(xf), y = ewb_dazf(yf);
    return x != x || y != y ? NAN : (x > y || (x == y && !signbit(x))) ? x : y;
}

static inline __attribute__((always_inline)) float ewb_minf(float xf, float yf)
{
    float x = ewb_dazf(xf), y = ewb_dazf(yf);
    return x != x || y != y ? NAN : (x < y || (x == y && signbit(x))) ? x : y;
}

/* y[i] = op(x[i]) for the unary ops with an f32 fast form; returns 0 if op has none. no-trapping-math here
 * too (not only in the EXE_VEC callers): this body is optimised on its own before it is inlined, and with
 * trapping math the selects of ew_math.h become branches the vectoriser can no longer if-convert. */
#if defined(__GNUC__) && !defined(__clang__)
#define EWB_NO_TRAP optimize("no-trapping-math")
#else
#define EWB_NO_TRAP /* clang has no optimize attribute */
#endif
static inline __attribute__((always_inline, EWB_NO_TRAP)) int ewb_unary_f32(hlo_op op, const float *x, float *y, int64_t n)
{
    switch (op) {
    case HLO_NEGATE: for (int64_t i = 0; i < n; i++) y[i] = -x[i]; return 1;
    case HLO_ABS: for (int64_t i = 0; i < n; i++) y[i] = fabsf(x[i]); return 1;
    case HLO_EXP: for (int64_t i = 0; i < n; i++) y[i] = ewm_expf(x[i]); return 1;
    case HLO_LOG: for (int64_t i = 0; i < n; i++) y[i] = ewm_logf(x[i]); return 1;
    case HLO_LOG1P: for (int64_t i = 0; i < n; i++) y[i] = ewm_log1pf(x[i]); return 1;
    case HLO_TANH: for (int64_t i = 0; i < n; i++) y[i] = ewm_tanhf(x[i]); return 1;
    /* sqrtf is the same correctly rounded value as (float)sqrt((double)x) (53 >= 2 * 24 + 2 bits) */
    case HLO_SQRT: for (int64_t i = 0; i < n; i++) y[i] = sqrtf(x[i]); return 1;
    case HLO_RSQRT: for (int64_t i = 0; i < n; i++) y[i] = (float)(1.0 / sqrt((double)x[i])); return 1;
    case HLO_LOGISTIC: for (int64_t i = 0; i < n; i++) y[i] = ewm_logisticf(x[i]); return 1;
    case HLO_FLOOR: for (int64_t i = 0; i < n; i++) y[i] = floorf(x[i]); return 1;
    case HLO_CEIL: for (int64_t i = 0; i < n; i++) y[i] = ceilf(x[i]); return 1;
    case HLO_ROUND_NEAREST_EVEN: for (int64_t i = 0; i < n; i++) y[i] = rintf(x[i]); return 1;
    case HLO_ROUND_NEAREST_AFZ: for (int64_t i = 0; i < n; i++) y[i] = roundf(x[i]); return 1;
    /* the rest as the reference computes them: libm in double, rounded once (a call per element, but
     * without the per-element interpreter around it) */
#define EWB_LIBM(OP, fn) case OP: for (int64_t i = 0; i < n; i++) y[i] = (float)fn((double)x[i]); return 1;
    EWB_LIBM(HLO_ERF, erf)
    EWB_LIBM(HLO_EXPM1, expm1)
    EWB_LIBM(HLO_SIN, sin)
    EWB_LIBM(HLO_COS, cos)
    EWB_LIBM(HLO_TAN, tan)
    EWB_LIBM(HLO_ATAN, atan)
    EWB_LIBM(HLO_CBRT, cbrt)
#undef EWB_LIBM
    default: return 0;
    }
}

/* The unary ops whose f32 block form, rounded to bf16, is the reference's bf16 result (libm in double, then
 * f32, then bf16) for every one of the 65536 bf16 inputs (tests/t_ew_int.c checks them all). */
static inline int ewb_unary_bf16_ok(hlo_op op)
{
    switch (op) {
    case HLO_NEGATE: case HLO_ABS: case HLO_EXP: case HLO_LOG: case HLO_LOG1P: case HLO_TANH: case HLO_SQRT:
    case HLO_RSQRT: case HLO_LOGISTIC: case HLO_FLOOR: case HLO_CEIL: case HLO_ROUND_NEAREST_EVEN:
    case HLO_ROUND_NEAREST_AFZ: case HLO_ERF: case HLO_EXPM1: case HLO_SIN: case HLO_COS: case HLO_TAN: case HLO_ATAN:
    case HLO_CBRT:
        return 1;
    default: return 0;
    }
}

/* x rounded to bf16 (nearest even, NaN -> quiet NaN with its sign, a zero exponent field -> signed zero) and
 * back to f32, on 32-bit lanes: the same bits as ewb_round_bf16_ftz_ref, without narrowing to 16-bit lanes
 * and widening again (that pack/unpack was half the time of a rounded bf16 member in bert_fwd_bf16). */
static inline __attribute__((always_inline)) float ewb_round_bf16_ftz(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;   /* a carry out of the mantissa gives inf */
    r = (u & 0x7FFFFFFFu) > 0x7F800000u ? ((u & 0x80000000u) | 0x7FC00000u) : r;
    r = (r & 0x7F800000u) ? r : (r & 0x80000000u);
    float y;
    memcpy(&y, &r, sizeof y);
    return y;
}

/* the reference: through the 16-bit storage form */
static inline float ewb_round_bf16_ftz_ref(float x)
{
    return fp_bf16_to_f32_inline(fp_f32_to_bf16_ftz_inline(x));
}

/* y = op(x) for bf16 values held as f32 (ewb_unary_bf16_ok ops): subnormal inputs read as zero, each result
 * rounded to bf16 (subnormals flushed). x and y may be the same block. */
static inline __attribute__((always_inline, EWB_NO_TRAP)) void ewb_unary_bf16(hlo_op op, const float *x, float *y, int64_t n)
{
    float t[1024];
    for (int64_t o = 0; o < n; o += 1024) {
        int64_t len = n - o < 1024 ? n - o : 1024;
        for (int64_t i = 0; i < len; i++) t[i] = ewb_dazf(x[o + i]);
        ewb_unary_f32(op, t, y + o, len);
        for (int64_t i = 0; i < len; i++) y[o + i] = ewb_round_bf16_ftz(y[o + i]);
    }
}

static inline __attribute__((always_inline)) int ewb_binary_f32(hlo_op op, const float *x, const float *y, float *z, int64_t n)
{
    switch (op) {
    case HLO_ADD: for (int64_t i = 0; i < n; i++) z[i] = x[i] + y[i]; return 1;
    case HLO_SUBTRACT: for (int64_t i = 0; i < n; i++) z[i] = x[i] - y[i]; return 1;
    case HLO_MULTIPLY: for (int64_t i = 0; i < n; i++) z[i] = x[i] * y[i]; return 1;
    case HLO_DIVIDE: for (int64_t i = 0; i < n; i++) z[i] = x[i] / y[i]; return 1;
    case HLO_MAXIMUM: for (int64_t i = 0; i < n; i++) z[i] = ewb_maxf(x[i], y[i]); return 1;
    case HLO_MINIMUM: for (int64_t i = 0; i < n; i++) z[i] = ewb_minf(x[i], y[i]); return 1;
    case HLO_POWER: for (int64_t i = 0; i < n; i++) z[i] = (float)pow((double)x[i], (double)y[i]); return 1;
    default: return 0;
    }
}

/* z[i] = x[i] op c (left 0) or c op x[i] (left 1): ewb_binary_f32 with one operand a scalar broadcast, the
 * same arithmetic per element with one stream fewer to read. Returns 0 if op has no block form. */
static inline __attribute__((always_inline)) int ewb_binary_f32_scalar(hlo_op op, const float *x, float c, float *z, int64_t n,
                                                                      int left)
{
#define EWB_SC(EXPR_R, EXPR_L)                                   \
    do {                                                         \
        if (left) for (int64_t i = 0; i < n; i++) z[i] = EXPR_L; \
        else for (int64_t i = 0; i < n; i++) z[i] = EXPR_R;      \
    } while (0)
    switch (op) {
    case HLO_ADD: EWB_SC(x[i] + c, c + x[i]); return 1;
    case HLO_SUBTRACT: EWB_SC(x[i] - c, c - x[i]); return 1;
    case HLO_MULTIPLY: EWB_SC(x[i] * c, c * x[i]); return 1;
    case HLO_DIVIDE: EWB_SC(x[i] / c, c / x[i]); return 1;
    case HLO_MAXIMUM: EWB_SC(ewb_maxf(x[i], c), ewb_maxf(c, x[i])); return 1;
    case HLO_MINIMUM: EWB_SC(ewb_minf(x[i], c), ewb_minf(c, x[i])); return 1;
    default: return 0;
    }
#undef EWB_SC
}

/* Round each value to bf16 (computed in f32, subnormal results flushed, design §4) and back to f32. */
static inline __attribute__((always_inline)) void ewb_round_bf16(float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = ewb_round_bf16_ftz(y[i]);
}

/* compare with direction d (0 EQ, 1 NE, 2 LT, 3 LE, 4 GT, 5 GE) on f32 (not TOTALORDER) */
static inline __attribute__((always_inline)) void ewb_compare_f32(int d, const float *x, const float *y, uint8_t *z, int64_t n)
{
    switch (d) {
    case 0: for (int64_t i = 0; i < n; i++) z[i] = x[i] == y[i]; break;
    case 1: for (int64_t i = 0; i < n; i++) z[i] = x[i] != y[i]; break;
    case 2: for (int64_t i = 0; i < n; i++) z[i] = x[i] < y[i]; break;
    case 3: for (int64_t i = 0; i < n; i++) z[i] = x[i] <= y[i]; break;
    case 4: for (int64_t i = 0; i < n; i++) z[i] = x[i] > y[i]; break;
    default: for (int64_t i = 0; i < n; i++) z[i] = x[i] >= y[i]; break;
    }
}

/* ewb_compare_f32 with y the same in every lane (y[0]) */
static inline __attribute__((always_inline)) void ewb_compare_f32_sy(int d, const float *x, float b, uint8_t *z, int64_t n)
{
    switch (d) {
    case 0: for (int64_t i = 0; i < n; i++) z[i] = x[i] == b; break;
    case 1: for (int64_t i = 0; i < n; i++) z[i] = x[i] != b; break;
    case 2: for (int64_t i = 0; i < n; i++) z[i] = x[i] < b; break;
    case 3: for (int64_t i = 0; i < n; i++) z[i] = x[i] <= b; break;
    case 4: for (int64_t i = 0; i < n; i++) z[i] = x[i] > b; break;
    default: for (int64_t i = 0; i < n; i++) z[i] = x[i] >= b; break;
    }
}

static inline int ewb_direction(const char *dir)
{
    if (!dir) return -1;
    if (dir[0] == 'E') return 0;
    if (dir[0] == 'N') return 1;
    if (dir[0] == 'L') return dir[1] == 'T' ? 2 : 3;
    if (dir[0] == 'G') return dir[1] == 'T' ? 4 : 5;
    return -1;
}

#endif
