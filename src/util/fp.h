/* fp.h — the small float formats tpusim stores and the TPU's rounding rules (design §4).
 *
 * bfloat16: round-to-nearest-even from f32, NaN kept quiet (sign kept, quiet bit set), and in TPU mode a
 * bf16 result whose magnitude is below the smallest normal (2^-126) is flushed to a signed zero.
 * f16: IEEE binary16, round-to-nearest-even, subnormals kept.
 * f8/f4 families follow the OCP / ml_dtypes definitions (fn = finite, no inf: overflow saturates to NaN as
 * in ml_dtypes' conversion; fnuz = no negative zero, single NaN at 0x80).
 *
 * NaN conventions (checked against ml_dtypes/numpy by tests/golden/make_fp_golden.py):
 *   - to bf16 and the f8 types: the format's canonical quiet NaN with the input's sign (bf16 0x7FC0|sign,
 *     as Eigen/ml_dtypes); fnuz types have only 0x80; f8e8m0fnu 0xFF.
 *   - to f16: quiet NaN keeping the sign and the top payload bits (numpy keeps a signaling NaN signaling;
 *     an IEEE convert quiets it, as we do).
 *   - f4e2m1fn has no NaN or inf: inf and overflow saturate to ±6 and, as in ml_dtypes, NaN becomes the bit
 *     pattern 0x8 (-0.0) and -NaN 0x0.
 *   - f8e8m0fnu has no zero and no sign: zero and negative inputs become NaN (0xFF).
 *   - widening (bf16/f16 -> f32) is exact and keeps NaN payloads; small floats -> f64 give the quiet NaN
 *     with the encoding's sign (0x80 of the fnuz types is negative, as in ml_dtypes).
 * From f64 every conversion rounds once. ml_dtypes' astype from float64 to bfloat16/float8 goes through f32
 * and so differs on values a hair off a tie; numpy's float64 -> float16 rounds once, as we do.
 */
#ifndef TPU_FP_H
#define TPU_FP_H

#include <stdint.h>
#include <stdbool.h>
#include <string.h>
#include "tpusim.h"

/* Inline forms of the two bf16 conversions for inner loops (same results as the functions below). */
static inline __attribute__((always_inline)) float fp_bf16_to_f32_inline(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static inline __attribute__((always_inline)) uint16_t fp_f32_to_bf16_inline(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)(((u >> 16) & 0x8000) | 0x7FC0);   /* quiet NaN, sign kept */
    u += 0x7FFFu + ((u >> 16) & 1);   /* round to nearest even; overflow carries into inf */
    return (uint16_t)(u >> 16);
}

/* RNE, then a zero exponent field (subnormal or zero) becomes signed zero: fp_f32_to_bf16_ftz inline */
static inline __attribute__((always_inline)) uint16_t fp_f32_to_bf16_ftz_inline(float x)
{
    uint16_t h = fp_f32_to_bf16_inline(x);
    return (h & 0x7F80) == 0 ? (uint16_t)(h & 0x8000) : h;
}

uint16_t fp_f32_to_bf16(float x);          /* RNE, subnormals kept (XLA:CPU's convert) */
uint16_t fp_f32_to_bf16_ftz(float x);      /* RNE, then subnormal results flushed to signed zero (TPU) */
float    fp_bf16_to_f32(uint16_t h);
/* x rounded to the nearest bf16 value and returned as f32 (the MXU's view of an f32 operand). */
float    fp_round_bf16(float x);
float    fp_round_bf16_ftz(float x);

uint16_t fp_f32_to_f16(float x);
uint16_t fp_f64_to_f16(double x);          /* rounds once from double (no double rounding) */
float    fp_f16_to_f32(uint16_t h);

/* Double rounding safe conversions from double for the 16-bit floats */
uint16_t fp_f64_to_bf16(double x);

/* 8-bit and 4-bit floats: t is one of the TPU_F8* / TPU_F4E2M1FN dtypes. Values are rounded to nearest
 * even; out-of-range values saturate or become NaN/inf as the format defines. */
uint8_t  fp_f64_to_small(tpu_dtype t, double x);
double   fp_small_to_f64(tpu_dtype t, uint8_t bits);

/* reduce-precision(x, exponent_bits, mantissa_bits) on an f32/f64 value, as XLA defines it
 * (round mantissa to nearest even, overflow to inf, underflow to zero, NaN kept). */
float    fp_reduce_precision_f32(float x, int exponent_bits, int mantissa_bits);
double   fp_reduce_precision_f64(double x, int exponent_bits, int mantissa_bits);

#endif
