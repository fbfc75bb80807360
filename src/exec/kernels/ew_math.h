/* ew_math.h — f32 transcendentals (exp, tanh, logistic, log, log1p) for the elementwise kernels, the fused
 * loops (both through ew_block.h) and the scalar reference (exe_ops.c), so every path computes the same bits.
 *
 * Each function evaluates in double with range reduction and a polynomial (relative error about 1e-15,
 * measured; no table, no branch: the loops that call them auto-vectorise, and every clone computes the same
 * values since only IEEE +, -, *, / and bit operations are used, with no contraction) and rounds once to f32.
 * The result is within 1 ulp of the true value and is the correctly rounded f32 for all but a handful of
 * the 2^32 inputs (tests/t_ew_math.c checks both against the libm references ewm_*_ref below, which are the
 * previous definitions). Special cases are those of (float)libm((double)x): NaN in -> the quiet NaN, invalid
 * (log of a negative) -> -NaN, overflow -> inf, f32 subnormal results rounded as (float) rounds them. */
#ifndef TPU_EW_MATH_H
#define TPU_EW_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define EWM_INLINE static inline __attribute__((always_inline))

EWM_INLINE uint64_t ewm_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}
EWM_INLINE double ewm_double(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

/* y = k ln2 + r with |r| <= ln2/2 (+ rounding), returns 2^k; needs |y| < 700. r is y - k ln2 to ~2^-60
 * absolute (Cody-Waite: k*EWM_LN2_HI and its difference with y are exact). */
#define EWM_LN2_HI 0x1.62e42fee00000p-1
#define EWM_LN2_LO 0x1.a39ef35793c76p-33
EWM_INLINE double ewm_reduce(double y, double *r)
{
    const double shift = 0x1.8p52;
    double t = y * 0x1.71547652b82fep0 + shift;   /* round(y / ln2) in the low mantissa bits */
    double k = t - shift;
    *r = (y - k * EWM_LN2_HI) - k * EWM_LN2_LO;
    return ewm_double((ewm_bits(t) << 52) + ((uint64_t)1023 << 52));
}

/* expm1(r) for |r| <= 0.35: Taylor to r^12/12! (truncation below 2^-49 relative). */
EWM_INLINE double ewm_expm1_poly(double r)
{
    double p = 1.0 / 479001600;                     /* 1/12! */
    p = 1.0 / 39916800 + r * p;                     /* 1/11! */
    p = 1.0 / 3628800 + r * p;
    p = 1.0 / 362880 + r * p;
    p = 1.0 / 40320 + r * p;
    p = 1.0 / 5040 + r * p;
    p = 1.0 / 720 + r * p;
    p = 1.0 / 120 + r * p;
    p = 1.0 / 24 + r * p;
    p = 1.0 / 6 + r * p;
    p = 0.5 + r * p;
    return r + (r * r) * p;
}

/* exp(y) for |y| < 700 */
EWM_INLINE double ewm_exp_d(double y)
{
    double r, s = ewm_reduce(y, &r);
    return s + s * ewm_expm1_poly(r);
}

/* expm1(y) for 0 <= y < 700 (relative accuracy near 0: k = 0 gives the polynomial itself) */
EWM_INLINE double ewm_expm1_d(double y)
{
    double r, s = ewm_reduce(y, &r);
    return s * ewm_expm1_poly(r) + (s - 1.0);
}

/* log(u) for positive normal double u (callers substitute 1 for the other inputs). u = 2^k z with z in
 * [sqrt(1/2), sqrt(2)); log z = 2 atanh(s), s = (z-1)/(z+1), |s| <= 0.1716: series to s^19 (truncation
 * below 2^-50 relative). */
EWM_INLINE double ewm_log_d(double u)
{
    const uint64_t off = 0x3FE6A09E667F3BCDull;   /* sqrt(1/2) */
    uint64_t ix = ewm_bits(u);
    uint64_t tmp = ix - off + (1ull << 63);        /* (k + 2048) << 52 in the top 12 bits */
    uint64_t kb = tmp >> 52;
    double k = ewm_double(kb | 0x4330000000000000ull) - (0x1p52 + 2048);
    double z = ewm_double(ix - (tmp & 0xFFF0000000000000ull) + (1ull << 63));
    double f = z - 1.0;                            /* exact */
    double s = f / (2.0 + f), w = s * s;
    double p = 1.0 / 19;
    p = 1.0 / 17 + w * p;
    p = 1.0 / 15 + w * p;
    p = 1.0 / 13 + w * p;
    p = 1.0 / 11 + w * p;
    p = 1.0 / 9 + w * p;
    p = 1.0 / 7 + w * p;
    p = 1.0 / 5 + w * p;
    p = 1.0 / 3 + w * p;
    double lz = 2.0 * s + (2.0 * s) * (w * p);
    return k * 0x1.62e42fefa39efp-1 + lz;
}

/* ---- the f32 functions ---- */

EWM_INLINE float ewm_expf(float xf)
{
    double x = xf;
    double y = x > 100.0 ? 100.0 : x;   /* exp(100) overflows f32, exp(-200) underflows; NaN stays NaN */
    y = y < -200.0 ? -200.0 : y;
    float r = (float)ewm_exp_d(y);
    return xf != xf ? xf + xf : r;
}

/* tanh(|x|) = e / (e + 2), e = expm1(2|x|): no cancellation anywhere, sign restored; tanh(±0) = ±0. */
EWM_INLINE float ewm_tanhf(float xf)
{
    double x = xf, a = fabs(x);
    a = a > 20.0 ? 20.0 : a;            /* tanh(20) is 1 in double */
    double e = ewm_expm1_d(2.0 * a);
    float r = (float)copysign(e / (e + 2.0), x);
    return xf != xf ? xf + xf : r;
}

EWM_INLINE float ewm_logisticf(float xf)
{
    double y = -(double)xf;
    y = y > 200.0 ? 200.0 : y;
    y = y < -200.0 ? -200.0 : y;
    float r = (float)(1.0 / (1.0 + ewm_exp_d(y)));
    return xf != xf ? -xf + -xf : r;   /* the reference negates x first */
}

EWM_INLINE float ewm_logf(float xf)
{
    double x = xf;
    int ok = x > 0.0 && x < INFINITY;
    float r = (float)ewm_log_d(ok ? x : 1.0);
    r = ok ? r : x == 0.0 ? -INFINITY : x == INFINITY ? INFINITY : -NAN;
    return xf != xf ? xf + xf : r;
}

/* log1p(x) = log(u) + c/u with u = 1 + x rounded and c its rounding error (TwoSum, exact). */
EWM_INLINE float ewm_log1pf(float xf)
{
    double x = xf, u = 1.0 + x;
    double bb = u - x, c = (x - (u - bb)) + (1.0 - bb);
    int ok = u > 0.0 && u < INFINITY;
    double us = ok ? u : 1.0;
    float r = (float)(ewm_log_d(us) + c / us);
    r = ok ? r : u == 0.0 ? -INFINITY : x == INFINITY ? INFINITY : -NAN;
    return xf != xf || xf == 0.0f ? xf + xf : r;   /* log1p(-0) = -0 */
}

/* ---- references: the previous definitions, libm in double rounded once ---- */

static inline float ewm_expf_ref(float x) { return (float)exp((double)x); }
static inline float ewm_tanhf_ref(float x) { return (float)tanh((double)x); }
static inline float ewm_logisticf_ref(float x) { return (float)(1.0 / (1.0 + exp(-(double)x))); }
static inline float ewm_logf_ref(float x) { return (float)log((double)x); }
static inline float ewm_log1pf_ref(float x) { return (float)log1p((double)x); }

#endif
