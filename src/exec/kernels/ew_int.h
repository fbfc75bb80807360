/* ew_int.h — elementwise integer operations on contiguous blocks of 32-bit and 64-bit lanes, shared by the
 * unfused kernels (elementwise.c) and the fused loops (exe_fuse.c). A lane holds the element's bit pattern
 * (s32 and u32 alike, s64 and u64 alike); `uns` says how to read it where signedness matters (max, min,
 * compare, divide, remainder, sign, abs). Every op gives exactly what exe_scalar_binop / exe_scalar_unop
 * (exe_ops.c, the reference) give: wrapping arithmetic, shifts by >= the width give 0 or the sign fill,
 * division by zero gives -1 (all ones) and remainder by zero the dividend, INT_MIN / -1 gives INT_MIN.
 * The threefry/philox chains of jax.random are made of these (add, xor, shifts, or, multiply). */
#ifndef TPU_EW_INT_H
#define TPU_EW_INT_H

#include "hlo/hlo.h"

#include <stdint.h>
#include <string.h>

#define EWI_INLINE static inline __attribute__((always_inline))

/* Does op have a block form here (binary: ewi_binary32/64, unary: ewi_unary32/64)? */
static inline int ewi_has_binary(hlo_op op)
{
    switch (op) {
    case HLO_ADD: case HLO_SUBTRACT: case HLO_MULTIPLY: case HLO_AND: case HLO_OR: case HLO_XOR: case HLO_SHIFT_LEFT:
    case HLO_SHIFT_RIGHT_LOGICAL: case HLO_SHIFT_RIGHT_ARITHMETIC: case HLO_MAXIMUM: case HLO_MINIMUM: case HLO_DIVIDE:
    case HLO_REMAINDER:
        return 1;
    default: return 0;
    }
}

static inline int ewi_has_unary(hlo_op op)
{
    return op == HLO_NOT || op == HLO_NEGATE || op == HLO_ABS || op == HLO_SIGN || op == HLO_POPCNT || op == HLO_CLZ;
}

/* z = op(x, y) on n lanes of 32 bits; returns 0 when op has no block form here (the caller falls back). */
EWI_INLINE int ewi_binary32(hlo_op op, int uns, const uint32_t *x, const uint32_t *y, uint32_t *z, int64_t n)
{
    const int32_t *sx = (const int32_t *)x, *sy = (const int32_t *)y;
    switch (op) {
    case HLO_ADD: for (int64_t i = 0; i < n; i++) z[i] = x[i] + y[i]; return 1;
    case HLO_SUBTRACT: for (int64_t i = 0; i < n; i++) z[i] = x[i] - y[i]; return 1;
    case HLO_MULTIPLY: for (int64_t i = 0; i < n; i++) z[i] = x[i] * y[i]; return 1;
    case HLO_AND: for (int64_t i = 0; i < n; i++) z[i] = x[i] & y[i]; return 1;
    case HLO_OR: for (int64_t i = 0; i < n; i++) z[i] = x[i] | y[i]; return 1;
    case HLO_XOR: for (int64_t i = 0; i < n; i++) z[i] = x[i] ^ y[i]; return 1;
    case HLO_SHIFT_LEFT: for (int64_t i = 0; i < n; i++) z[i] = y[i] >= 32 ? 0 : x[i] << (y[i] & 31); return 1;
    case HLO_SHIFT_RIGHT_LOGICAL:
        for (int64_t i = 0; i < n; i++) z[i] = y[i] >= 32 ? 0 : x[i] >> (y[i] & 31);
        return 1;
    case HLO_SHIFT_RIGHT_ARITHMETIC:
        /* unsigned types shift in their top bit too (the reference reads the lane as signed) */
        for (int64_t i = 0; i < n; i++) z[i] = (uint32_t)(sx[i] >> (y[i] >= 32 ? 31 : (y[i] & 31)));
        return 1;
    case HLO_MAXIMUM:
        if (uns) for (int64_t i = 0; i < n; i++) z[i] = x[i] > y[i] ? x[i] : y[i];
        else for (int64_t i = 0; i < n; i++) z[i] = (uint32_t)(sx[i] > sy[i] ? sx[i] : sy[i]);
        return 1;
    case HLO_MINIMUM:
        if (uns) for (int64_t i = 0; i < n; i++) z[i] = x[i] < y[i] ? x[i] : y[i];
        else for (int64_t i = 0; i < n; i++) z[i] = (uint32_t)(sx[i] < sy[i] ? sx[i] : sy[i]);
        return 1;
    case HLO_DIVIDE:
        if (uns) for (int64_t i = 0; i < n; i++) z[i] = y[i] ? x[i] / y[i] : 0xFFFFFFFFu;
        else
            for (int64_t i = 0; i < n; i++)
                z[i] = sy[i] == 0 ? 0xFFFFFFFFu : (sx[i] == INT32_MIN && sy[i] == -1) ? x[i] : (uint32_t)(sx[i] / sy[i]);
        return 1;
    case HLO_REMAINDER:
        if (uns) for (int64_t i = 0; i < n; i++) z[i] = y[i] ? x[i] % y[i] : x[i];
        else
            for (int64_t i = 0; i < n; i++)
                z[i] = sy[i] == 0 ? x[i] : (sx[i] == INT32_MIN && sy[i] == -1) ? 0 : (uint32_t)(sx[i] % sy[i]);
        return 1;
    default: return 0;
    }
}

/* Is op(x, y) == op(y, x) for the ops ewi_binary32_scalar takes? */
static inline int ewi_commutes(hlo_op op)
{
    return op == HLO_ADD || op == HLO_MULTIPLY || op == HLO_AND || op == HLO_OR || op == HLO_XOR;
}

/* z = op(x, y) with the same y in every lane (ewi_binary32's results): add, subtract, multiply, and, or, xor
 * and the two unsigned-style shifts; returns 0 for the other ops. */
EWI_INLINE int ewi_binary32_scalar(hlo_op op, const uint32_t *x, uint32_t y, uint32_t *z, int64_t n)
{
    switch (op) {
    case HLO_ADD: for (int64_t i = 0; i < n; i++) z[i] = x[i] + y; return 1;
    case HLO_SUBTRACT: for (int64_t i = 0; i < n; i++) z[i] = x[i] - y; return 1;
    case HLO_MULTIPLY: for (int64_t i = 0; i < n; i++) z[i] = x[i] * y; return 1;
    case HLO_AND: for (int64_t i = 0; i < n; i++) z[i] = x[i] & y; return 1;
    case HLO_OR: for (int64_t i = 0; i < n; i++) z[i] = x[i] | y; return 1;
    case HLO_XOR: for (int64_t i = 0; i < n; i++) z[i] = x[i] ^ y; return 1;
    case HLO_SHIFT_LEFT:
        if (y >= 32) memset(z, 0, (size_t)n * sizeof *z);
        else for (int64_t i = 0; i < n; i++) z[i] = x[i] << y;
        return 1;
    case HLO_SHIFT_RIGHT_LOGICAL:
        if (y >= 32) memset(z, 0, (size_t)n * sizeof *z);
        else for (int64_t i = 0; i < n; i++) z[i] = x[i] >> y;
        return 1;
    default: return 0;
    }
}

/* Unsigned 32-bit divide (rem 0) or remainder (rem 1) of every lane by one divisor d, as ewi_binary32 gives
 * them (d == 0: all ones, or x). Division by an invariant integer through a multiply (Granlund & Montgomery
 * 1994, fig. 4.1): with l = ceil(log2 d) and m = floor(2^32 (2^l - d) / d) + 1, t = (m x) >> 32 and
 * q = (t + ((x - t) >> min(l, 1))) >> max(l - 1, 0) is floor(x / d) for every 32-bit x; vectorises where a
 * divide instruction per lane does not (jax's randint: x % span over the random bits). */
EWI_INLINE void ewi_divrem32_scalar(int rem, const uint32_t *x, uint32_t d, uint32_t *z, int64_t n)
{
    if (d == 0) {
        if (rem) memmove(z, x, (size_t)n * sizeof *z);
        else for (int64_t i = 0; i < n; i++) z[i] = 0xFFFFFFFFu;
        return;
    }
    int l = d == 1 ? 0 : 32 - __builtin_clz(d - 1);
    uint32_t m = (uint32_t)(((((uint64_t)1 << l) - d) << 32) / d + 1);
    int sh1 = l < 1 ? l : 1, sh2 = l > 1 ? l - 1 : 0;
    if (rem) {
        for (int64_t i = 0; i < n; i++) {
            uint32_t t = (uint32_t)(((uint64_t)x[i] * m) >> 32);
            z[i] = x[i] - ((t + ((x[i] - t) >> sh1)) >> sh2) * d;
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            uint32_t t = (uint32_t)(((uint64_t)x[i] * m) >> 32);
            z[i] = (t + ((x[i] - t) >> sh1)) >> sh2;
        }
    }
}

/* ewi_binary32_scalar on 64-bit lanes (ewi_binary64's results) */
EWI_INLINE int ewi_binary64_scalar(hlo_op op, const uint64_t *x, uint64_t y, uint64_t *z, int64_t n)
{
    switch (op) {
    case HLO_ADD: for (int64_t i = 0; i < n; i++) z[i] = x[i] + y; return 1;
    case HLO_SUBTRACT: for (int64_t i = 0; i < n; i++) z[i] = x[i] - y; return 1;
    case HLO_MULTIPLY: for (int64_t i = 0; i < n; i++) z[i] = x[i] * y; return 1;
    case HLO_AND: for (int64_t i = 0; i < n; i++) z[i] = x[i] & y; return 1;
    case HLO_OR: for (int64_t i = 0; i < n; i++) z[i] = x[i] | y; return 1;
    case HLO_XOR: for (int64_t i = 0; i < n; i++) z[i] = x[i] ^ y; return 1;
    case HLO_SHIFT_LEFT:
        if (y >= 64) memset(z, 0, (size_t)n * sizeof *z);
        else for (int64_t i = 0; i < n; i++) z[i] = x[i] << y;
        return 1;
    case HLO_SHIFT_RIGHT_LOGICAL:
        if (y >= 64) memset(z, 0, (size_t)n * sizeof *z);
        else for (int64_t i = 0; i < n; i++) z[i] = x[i] >> y;
        return 1;
    default: return 0;
    }
}

EWI_INLINE int ewi_binary64(hlo_op op, int uns, const uint64_t *x, const uint64_t *y, uint64_t *z, int64_t n)
{
    const int64_t *sx = (const int64_t *)x, *sy = (const int64_t *)y;
    switch (op) {
    case HLO_ADD: for (int64_t i = 0; i < n; i++) z[i] = x[i] + y[i]; return 1;
    case HLO_SUBTRACT: for (int64_t i = 0; i < n; i++) z[i] = x[i] - y[i]; return 1;
    case HLO_MULTIPLY: for (int64_t i = 0; i < n; i++) z[i] = x[i] * y[i]; return 1;
    case HLO_AND: for (int64_t i = 0; i < n; i++) z[i] = x[i] & y[i]; return 1;
    case HLO_OR: for (int64_t i = 0; i < n; i++) z[i] = x[i] | y[i]; return 1;
    case HLO_XOR: for (int64_t i = 0; i < n; i++) z[i] = x[i] ^ y[i]; return 1;
    case HLO_SHIFT_LEFT: for (int64_t i = 0; i < n; i++) z[i] = y[i] >= 64 ? 0 : x[i] << (y[i] & 63); return 1;
    case HLO_SHIFT_RIGHT_LOGICAL:
        for (int64_t i = 0; i < n; i++) z[i] = y[i] >= 64 ? 0 : x[i] >> (y[i] & 63);
        return 1;
    case HLO_SHIFT_RIGHT_ARITHMETIC:
        for (int64_t i = 0; i < n; i++) z[i] = (uint64_t)(sx[i] >> (y[i] >= 64 ? 63 : (y[i] & 63)));
        return 1;
    case HLO_MAXIMUM:
        if (uns) for (int64_t i = 0; i < n; i++) z[i] = x[i] > y[i] ? x[i] : y[i];
        else for (int64_t i = 0; i < n; i++) z[i] = (uint64_t)(sx[i] > sy[i] ? sx[i] : sy[i]);
        return 1;
    case HLO_MINIMUM:
        if (uns) for (int64_t i = 0; i < n; i++) z[i] = x[i] < y[i] ? x[i] : y[i];
        else for (int64_t i = 0; i < n; i++) z[i] = (uint64_t)(sx[i] < sy[i] ? sx[i] : sy[i]);
        return 1;
    case HLO_DIVIDE:
        if (uns) for (int64_t i = 0; i < n; i++) z[i] = y[i] ? x[i] / y[i] : UINT64_MAX;
        else
            for (int64_t i = 0; i < n; i++)
                z[i] = sy[i] == 0 ? UINT64_MAX : (sx[i] == INT64_MIN && sy[i] == -1) ? x[i] : (uint64_t)(sx[i] / sy[i]);
        return 1;
    case HLO_REMAINDER:
        if (uns) for (int64_t i = 0; i < n; i++) z[i] = y[i] ? x[i] % y[i] : x[i];
        else
            for (int64_t i = 0; i < n; i++)
                z[i] = sy[i] == 0 ? x[i] : (sx[i] == INT64_MIN && sy[i] == -1) ? 0 : (uint64_t)(sx[i] % sy[i]);
        return 1;
    default: return 0;
    }
}

EWI_INLINE int ewi_unary32(hlo_op op, int uns, const uint32_t *x, uint32_t *z, int64_t n)
{
    const int32_t *sx = (const int32_t *)x;
    switch (op) {
    case HLO_NOT: for (int64_t i = 0; i < n; i++) z[i] = ~x[i]; return 1;
    case HLO_NEGATE: for (int64_t i = 0; i < n; i++) z[i] = 0u - x[i]; return 1;
    case HLO_ABS:
        if (uns) for (int64_t i = 0; i < n; i++) z[i] = x[i];
        else for (int64_t i = 0; i < n; i++) z[i] = sx[i] < 0 ? 0u - x[i] : x[i];
        return 1;
    case HLO_SIGN:
        if (uns) for (int64_t i = 0; i < n; i++) z[i] = x[i] != 0;
        else for (int64_t i = 0; i < n; i++) z[i] = (uint32_t)((sx[i] > 0) - (sx[i] < 0));
        return 1;
    case HLO_POPCNT: for (int64_t i = 0; i < n; i++) z[i] = (uint32_t)__builtin_popcount(x[i]); return 1;
    case HLO_CLZ: for (int64_t i = 0; i < n; i++) z[i] = x[i] ? (uint32_t)__builtin_clz(x[i]) : 32u; return 1;
    default: return 0;
    }
}

EWI_INLINE int ewi_unary64(hlo_op op, int uns, const uint64_t *x, uint64_t *z, int64_t n)
{
    const int64_t *sx = (const int64_t *)x;
    switch (op) {
    case HLO_NOT: for (int64_t i = 0; i < n; i++) z[i] = ~x[i]; return 1;
    case HLO_NEGATE: for (int64_t i = 0; i < n; i++) z[i] = 0u - x[i]; return 1;
    case HLO_ABS:
        if (uns) for (int64_t i = 0; i < n; i++) z[i] = x[i];
        else for (int64_t i = 0; i < n; i++) z[i] = sx[i] < 0 ? 0u - x[i] : x[i];
        return 1;
    case HLO_SIGN:
        if (uns) for (int64_t i = 0; i < n; i++) z[i] = x[i] != 0;
        else for (int64_t i = 0; i < n; i++) z[i] = (uint64_t)(int64_t)((sx[i] > 0) - (sx[i] < 0));
        return 1;
    case HLO_POPCNT: for (int64_t i = 0; i < n; i++) z[i] = (uint64_t)__builtin_popcountll(x[i]); return 1;
    case HLO_CLZ: for (int64_t i = 0; i < n; i++) z[i] = x[i] ? (uint64_t)__builtin_clzll(x[i]) : 64u; return 1;
    default: return 0;
    }
}

/* compare with direction d (0 EQ, 1 NE, 2 LT, 3 LE, 4 GT, 5 GE), signed or unsigned */
#define EWI_CMP(T, x, y, z, n, d)                                                  \
    switch (d) {                                                                  \
    case 0: for (int64_t i = 0; i < n; i++) z[i] = (T)x[i] == (T)y[i]; break;    \
    case 1: for (int64_t i = 0; i < n; i++) z[i] = (T)x[i] != (T)y[i]; break;    \
    case 2: for (int64_t i = 0; i < n; i++) z[i] = (T)x[i] < (T)y[i]; break;     \
    case 3: for (int64_t i = 0; i < n; i++) z[i] = (T)x[i] <= (T)y[i]; break;    \
    case 4: for (int64_t i = 0; i < n; i++) z[i] = (T)x[i] > (T)y[i]; break;     \
    default: for (int64_t i = 0; i < n; i++) z[i] = (T)x[i] >= (T)y[i]; break;   \
    }

EWI_INLINE void ewi_compare32(int d, int uns, const uint32_t *x, const uint32_t *y, uint8_t *z, int64_t n)
{
    if (uns) {
        EWI_CMP(uint32_t, x, y, z, n, d)
    } else {
        EWI_CMP(int32_t, x, y, z, n, d)
    }
}

/* ewi_compare32 with y the same in every lane */
EWI_INLINE void ewi_compare32_sy(int d, int uns, const uint32_t *x, uint32_t b, uint8_t *z, int64_t n)
{
    const int32_t *sx = (const int32_t *)x;
    const int32_t sb = (int32_t)b;
#define EWI_CMP_SY(X, B)                                                          \
    switch (d) {                                                                  \
    case 0: for (int64_t i = 0; i < n; i++) z[i] = X[i] == B; break;             \
    case 1: for (int64_t i = 0; i < n; i++) z[i] = X[i] != B; break;             \
    case 2: for (int64_t i = 0; i < n; i++) z[i] = X[i] < B; break;              \
    case 3: for (int64_t i = 0; i < n; i++) z[i] = X[i] <= B; break;             \
    case 4: for (int64_t i = 0; i < n; i++) z[i] = X[i] > B; break;              \
    default: for (int64_t i = 0; i < n; i++) z[i] = X[i] >= B; break;            \
    }
    if (uns) {
        EWI_CMP_SY(x, b)
    } else {
        EWI_CMP_SY(sx, sb)
    }
#undef EWI_CMP_SY
}

EWI_INLINE void ewi_compare64(int d, int uns, const uint64_t *x, const uint64_t *y, uint8_t *z, int64_t n)
{
    if (uns) {
        EWI_CMP(uint64_t, x, y, z, n, d)
    } else {
        EWI_CMP(int64_t, x, y, z, n, d)
    }
}

/* convert between pred, s32, u32, s64, u64 and f32 in their storage layouts, as exe_scalar_convert does:
 * integers wrap (narrowing keeps the low bits), go to f32 through double (exact from 32 bits, rounded twice
 * from 64), pred reads 0/1; f32 to integers is NaN -> 0, saturating, truncating (the bounds compared in f32,
 * where they are exact: 2^31 - 1 rounds up to 2^31), f32 subnormals read as zero. Returns 0 for other pairs. */
#define EWI_CONV(TF, TT, expr)                                              \
    do {                                                                    \
        const TF *a = (const TF *)x;                                        \
        TT *b = (TT *)z;                                                    \
        for (int64_t i = 0; i < n; i++) b[i] = (TT)(expr);                  \
        return 1;                                                           \
    } while (0)

EWI_INLINE int ewi_convert_from_f32(tpu_dtype to, const float *a, void *z, int64_t n)
{
    switch (to) {
    case TPU_PRED: {
        uint8_t *b = z;
        for (int64_t i = 0; i < n; i++) b[i] = !(a[i] > -1.17549435e-38f && a[i] < 1.17549435e-38f);   /* NaN: true */
        return 1;
    }
    case TPU_S32: {
        int32_t *b = z;
        for (int64_t i = 0; i < n; i++)
            b[i] = a[i] != a[i] ? 0 : a[i] <= -2147483648.0f ? INT32_MIN : a[i] >= 2147483648.0f ? INT32_MAX : (int32_t)a[i];
        return 1;
    }
    case TPU_U32: {
        uint32_t *b = z;
        for (int64_t i = 0; i < n; i++)
            b[i] = a[i] != a[i] || a[i] <= 0 ? 0 : a[i] >= 4294967296.0f ? UINT32_MAX : (uint32_t)a[i];
        return 1;
    }
#define EWI_F2N(T, lo, hi)                                                                           \
    do {                                                                                             \
        T *b = z;                                                                                    \
        for (int64_t i = 0; i < n; i++) b[i] = (T)(a[i] != a[i] ? 0 : a[i] <= lo ? lo : a[i] >= hi ? hi : (int)a[i]); \
        return 1;                                                                                    \
    } while (0)
    case TPU_S8: EWI_F2N(int8_t, -128, 127);
    case TPU_U8: EWI_F2N(uint8_t, 0, 255);
    case TPU_S16: EWI_F2N(int16_t, -32768, 32767);
    case TPU_U16: EWI_F2N(uint16_t, 0, 65535);
#undef EWI_F2N
    case TPU_S64: {
        int64_t *b = z;
        for (int64_t i = 0; i < n; i++)
            b[i] = a[i] != a[i] ? 0 : a[i] <= -9223372036854775808.0f ? INT64_MIN : a[i] >= 9223372036854775808.0f ? INT64_MAX
                   : (int64_t)a[i];
        return 1;
    }
    case TPU_U64: {
        uint64_t *b = z;
        for (int64_t i = 0; i < n; i++)
            b[i] = a[i] != a[i] || a[i] <= 0 ? 0 : a[i] >= 18446744073709551616.0f ? UINT64_MAX : (uint64_t)a[i];
        return 1;
    }
    default: return 0;
    }
}

EWI_INLINE int ewi_convert(tpu_dtype from, tpu_dtype to, const void *x, void *z, int64_t n)
{
    if (from == TPU_F32) return ewi_convert_from_f32(to, x, z, n);
#define EWI_TO(TF, W)                                                                  \
    switch (to) {                                                                      \
    case TPU_PRED: EWI_CONV(TF, uint8_t, a[i] != 0);                                   \
    case TPU_S32: EWI_CONV(TF, int32_t, (uint32_t)a[i]);                               \
    case TPU_U32: EWI_CONV(TF, uint32_t, a[i]);                                        \
    case TPU_S64: EWI_CONV(TF, int64_t, (W)a[i]);                                      \
    case TPU_U64: EWI_CONV(TF, uint64_t, (W)a[i]);                                     \
    case TPU_F32: EWI_CONV(TF, float, (float)(double)a[i]);                            \
    default: return 0;                                                                 \
    }
    if (from == TPU_PRED && to != TPU_F32) {   /* pred reads as 0 or 1 */
        switch (to) {
        case TPU_S32: case TPU_U32: EWI_CONV(uint8_t, uint32_t, a[i] != 0);
        case TPU_S64: case TPU_U64: EWI_CONV(uint8_t, uint64_t, a[i] != 0);
        default: return 0;
        }
    }
    if (to == TPU_F32) {   /* the narrow integers: exact in f32 */
        switch (from) {
        case TPU_S8: EWI_CONV(int8_t, float, (float)a[i]);
        case TPU_U8: EWI_CONV(uint8_t, float, (float)a[i]);
        case TPU_S16: EWI_CONV(int16_t, float, (float)a[i]);
        case TPU_U16: EWI_CONV(uint16_t, float, (float)a[i]);
        default: break;
        }
    }
    switch (from) {
    case TPU_PRED: EWI_TO(uint8_t, uint64_t)
    case TPU_S32: EWI_TO(int32_t, int64_t)
    case TPU_U32: EWI_TO(uint32_t, uint64_t)
    case TPU_S64: EWI_TO(int64_t, int64_t)
    case TPU_U64: EWI_TO(uint64_t, uint64_t)
    default: return 0;
    }
#undef EWI_TO
}

#endif
