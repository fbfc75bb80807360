/* fp.c — conversions between f32/f64 and the small float formats, and XLA's reduce-precision.
 *
 * One generic encoder rounds an f64 straight to any of the formats (bf16, f16, the f8 family, f4e2m1fn,
 * e8m0) in integer arithmetic, so a double is rounded exactly once. The special values (NaN, inf,
 * overflow, zero) follow ml_dtypes' conversion code, which is what XLA:CPU and JAX use for these types.
 */
#include "fp.h"

#include <math.h>
#include <string.h>

/* How a format spends its top exponent and sign bit. */
enum {
    FP_IEEE,   /* top exponent holds inf (mantissa 0) and NaNs: bf16, f16, f8e5m2, f8e4m3, f8e3m4 */
    FP_FN,     /* finite: only S.1111.111 is NaN, overflow and inf become NaN: f8e4m3fn */
    FP_FNUZ,   /* finite, unsigned zero: 0x80 is the one NaN, no -0 */
    FP_F4,     /* f4e2m1fn: no NaN, no inf; overflow and inf saturate to ±6 */
    FP_E8M0    /* f8e8m0fnu: powers of two 2^-127..2^127, 0xFF NaN, no sign, no zero */
};

typedef struct fp_fmt {
    int ebits, mbits, bias, kind;
} fp_fmt;

static const fp_fmt fp_bf16 = {8, 7, 127, FP_IEEE};
static const fp_fmt fp_f16 = {5, 10, 15, FP_IEEE};

static const fp_fmt *fp_small_fmt(tpu_dtype t)
{
    static const fp_fmt e5m2 = {5, 2, 15, FP_IEEE}, e4m3fn = {4, 3, 7, FP_FN}, e4m3b11fnuz = {4, 3, 11, FP_FNUZ},
                        e5m2fnuz = {5, 2, 16, FP_FNUZ}, e4m3fnuz = {4, 3, 8, FP_FNUZ}, e4m3 = {4, 3, 7, FP_IEEE},
                        e3m4 = {3, 4, 3, FP_IEEE}, e2m1fn = {2, 1, 1, FP_F4}, e8m0fnu = {8, 0, 127, FP_E8M0};
    switch (t) {
    case TPU_F8E5M2: return &e5m2;
    case TPU_F8E4M3FN: return &e4m3fn;
    case TPU_F8E4M3B11FNUZ: return &e4m3b11fnuz;
    case TPU_F8E5M2FNUZ: return &e5m2fnuz;
    case TPU_F8E4M3FNUZ: return &e4m3fnuz;
    case TPU_F8E4M3: return &e4m3;
    case TPU_F8E3M4: return &e3m4;
    case TPU_F4E2M1FN: return &e2m1fn;
    case TPU_F8E8M0FNU: return &e8m0fnu;
    default: return NULL;
    }
}

static uint64_t fp_f64_bits(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static double fp_bits_f64(uint64_t u)
{
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static uint32_t fp_f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float fp_bits_f32(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Largest finite encoding (without sign) of a format. */
static uint32_t fp_max_finite(const fp_fmt *f)
{
    uint32_t all = (1u << (f->ebits + f->mbits)) - 1;
    switch (f->kind) {
    case FP_IEEE: return all - (1u << f->mbits);          /* the all-ones exponent is inf/NaN */
    case FP_FN: return all - 1;                             /* S.1111.111 is NaN */
    case FP_E8M0: return 0xFE;
    default: return all;                                    /* FNUZ (0x80 is the NaN), F4 */
    }
}

/* The encoding of an infinite (or overflowing) value with the given sign. */
static uint32_t fp_enc_inf(const fp_fmt *f, uint32_t sign)
{
    uint32_t sbit = sign << (f->ebits + f->mbits);
    switch (f->kind) {
    case FP_IEEE: return sbit | (((1u << f->ebits) - 1) << f->mbits);
    case FP_FN: return sbit | ((1u << (f->ebits + f->mbits)) - 1);
    case FP_FNUZ: return 0x80;
    case FP_F4: return sbit | fp_max_finite(f);   /* ml_dtypes' "infinity" of f4e2m1fn is its max, 6 */
    default: return 0xFF;                         /* E8M0 */
    }
}

/* The encoding of a NaN with the given sign (ml_dtypes' quiet_NaN, negated for a negative input). */
static uint32_t fp_enc_nan(const fp_fmt *f, uint32_t sign)
{
    uint32_t sbit = sign << (f->ebits + f->mbits);
    switch (f->kind) {
    case FP_IEEE: return sbit | (((1u << f->ebits) - 1) << f->mbits) | (1u << (f->mbits - 1));
    case FP_FN: return sbit | ((1u << (f->ebits + f->mbits)) - 1);
    case FP_FNUZ: return 0x80;
    /* f4e2m1fn has no NaN; ml_dtypes' quiet_NaN is the bit pattern 0x8 (-0) and a negative NaN negates it */
    case FP_F4: return sign ? 0x0 : 0x8;
    default: return 0xFF;
    }
}

/* Rounds x to the format, to nearest even, in one step from the exact double value. */
static uint32_t fp_encode(const fp_fmt *f, double x)
{
    uint64_t u = fp_f64_bits(x);
    uint32_t sign = (uint32_t)(u >> 63);
    int dexp = (int)((u >> 52) & 0x7FF);
    uint64_t dman = u & (((uint64_t)1 << 52) - 1);
    if (dexp == 0x7FF) return dman ? fp_enc_nan(f, sign) : fp_enc_inf(f, sign);
    if (dexp == 0 && dman == 0) {
        if (f->kind == FP_E8M0) return 0xFF;   /* no zero: ml_dtypes gives NaN */
        if (f->kind == FP_FNUZ) return 0;
        return sign << (f->ebits + f->mbits);
    }
    if (f->kind == FP_E8M0 && sign) return 0xFF;   /* unsigned format */

    /* |x| = M * 2^(e - 52) with M in [2^52, 2^53): e is the unbiased exponent of x */
    uint64_t M;
    int e;
    if (dexp) {
        M = dman | ((uint64_t)1 << 52);
        e = dexp - 1023;
    } else {
        int lz = __builtin_clzll(dman) - 11;   /* shift that brings the top bit to bit 52 */
        M = dman << lz;
        e = -1022 - lz;
    }
    int emin = 1 - f->bias;                    /* exponent of the smallest normal (and of subnormals) */
    int qe = (e > emin ? e : emin) - f->mbits; /* exponent of one unit in the last place of the result */
    int s = qe - (e - 52);                     /* bits of M dropped, >= 52 - mbits > 0 */
    uint64_t N;
    if (s > 54) {
        N = 0;                                 /* below a quarter of the smallest step: rounds to zero */
    } else {
        uint64_t half = (uint64_t)1 << (s - 1), rest = M & (((uint64_t)1 << s) - 1);
        N = M >> s;
        if (rest > half || (rest == half && (N & 1))) N++;
    }
    /* Exponent and mantissa fields added as integers: a carry out of the mantissa bumps the exponent. */
    int64_t bits = (int64_t)N + (e >= emin ? (int64_t)(e - emin) << f->mbits : 0);
    if (bits > (int64_t)fp_max_finite(f)) return fp_enc_inf(f, sign);
    if (f->kind == FP_E8M0) return (uint32_t)bits;
    if (bits == 0 && f->kind == FP_FNUZ) return 0;
    return (sign << (f->ebits + f->mbits)) | (uint32_t)bits;
}

/* Exact value of an encoding. NaNs come back as the quiet NaN with the encoding's sign (as ml_dtypes). */
static double fp_decode(const fp_fmt *f, uint32_t bits)
{
    int nb = f->ebits + f->mbits;
    uint32_t sign = f->kind == FP_E8M0 ? 0 : (bits >> nb) & 1;
    uint32_t mag = bits & ((1u << nb) - 1);
    uint32_t emax = (1u << f->ebits) - 1;
    uint32_t ef = mag >> f->mbits, mf = mag & ((1u << f->mbits) - 1);
    double v;
    switch (f->kind) {
    case FP_E8M0:
        if (mag == 0xFF) return NAN;
        return ldexp(1.0, (int)mag - 127);
    case FP_IEEE:
        if (ef == emax) {
            v = mf ? NAN : INFINITY;
            return sign ? -v : v;
        }
        break;
    case FP_FN:
        if (mag == (1u << nb) - 1) return sign ? -NAN : NAN;
        break;
    case FP_FNUZ:
        if ((bits & 0xFF) == 0x80) return -NAN;
        break;
    default: break;
    }
    if (ef == 0) v = ldexp((double)mf, 1 - f->bias - f->mbits);
    else v = ldexp((double)((1u << f->mbits) | mf), (int)ef - f->bias - f->mbits);
    return sign ? -v : v;
}

/* ---- bfloat16 ---- */

uint16_t fp_f32_to_bf16(float x) { return fp_f32_to_bf16_inline(x); }

uint16_t fp_f32_to_bf16_ftz(float x)
{
    uint16_t h = fp_f32_to_bf16_inline(x);
    if ((h & 0x7F80) == 0) h &= 0x8000;   /* zero exponent field: subnormal (or zero) -> signed zero */
    return h;
}

float fp_bf16_to_f32(uint16_t h) { return fp_bf16_to_f32_inline(h); }
float fp_round_bf16(float x) { return fp_bf16_to_f32_inline(fp_f32_to_bf16_inline(x)); }
float fp_round_bf16_ftz(float x) { return fp_bf16_to_f32_inline(fp_f32_to_bf16_ftz(x)); }

uint16_t fp_f64_to_bf16(double x)
{
    if (isnan(x)) return signbit(x) ? 0xFFC0 : 0x7FC0;
    return (uint16_t)fp_encode(&fp_bf16, x);
}

/* ---- f16 ---- */

uint16_t fp_f64_to_f16(double x)
{
    if (isnan(x)) {
        /* quiet NaN, sign and the top payload bits kept (as an IEEE convert does) */
        uint64_t u = fp_f64_bits(x);
        return (uint16_t)(((u >> 48) & 0x8000) | 0x7E00 | ((u >> 42) & 0x1FF));
    }
    return (uint16_t)fp_encode(&fp_f16, x);
}

/* f32 -> f64 is exact, so this still rounds once. */
uint16_t fp_f32_to_f16(float x) { return fp_f64_to_f16((double)x); }

float fp_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
    if (e == 0x1F) return fp_bits_f32(sign | 0x7F800000u | (m << 13));   /* inf, NaN with its payload */
    if (e == 0) {
        float v = (float)m * 0x1p-24f;   /* exact: subnormal f16 values are small integers times 2^-24 */
        return sign ? -v : v;
    }
    return fp_bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

/* ---- 8- and 4-bit floats ---- */

uint8_t fp_f64_to_small(tpu_dtype t, double x)
{
    const fp_fmt *f = fp_small_fmt(t);
    return f ? (uint8_t)fp_encode(f, x) : 0;
}

double fp_small_to_f64(tpu_dtype t, uint8_t bits)
{
    const fp_fmt *f = fp_small_fmt(t);
    if (!f) return NAN;
    if (f->kind == FP_F4) bits &= 0xF;   /* stored one per byte in the low nibble */
    return fp_decode(f, bits);
}

/* ---- reduce-precision ----
 * As XLA:CPU computes it: round the mantissa to nearest even (a carry may bump the exponent), then force
 * exponents above the reduced range to inf and those at or below the reduced minimum normal exponent to
 * zero (reduced-format subnormals flush), keeping the sign. A NaN input comes back unchanged, payload and
 * all, whatever the bit counts. exponent_bits below 1 are treated as 1 and mantissa_bits below 0 as 0. */

float fp_reduce_precision_f32(float x, int exponent_bits, int mantissa_bits)
{
    if (isnan(x)) return x;
    if (exponent_bits < 1) exponent_bits = 1;
    if (mantissa_bits < 0) mantissa_bits = 0;
    uint32_t v = fp_f32_bits(x);
    if (mantissa_bits < 23) {
        int drop = 23 - mantissa_bits;
        uint32_t last = 1u << drop;
        uint32_t bias = ((last >> 1) - 1) + ((v & last) >> drop);
        v = (v + bias) & ~(last - 1);
    }
    if (exponent_bits < 8) {
        uint32_t exp = v & 0x7F800000u, sbit = v & 0x80000000u;
        uint32_t rbias = (1u << (exponent_bits - 1)) - 1;
        if (exp > ((127u + rbias) << 23)) v = sbit | 0x7F800000u;
        else if (exp <= ((127u - rbias) << 23)) v = sbit;
    }
    return fp_bits_f32(v);
}

double fp_reduce_precision_f64(double x, int exponent_bits, int mantissa_bits)
{
    if (isnan(x)) return x;
    if (exponent_bits < 1) exponent_bits = 1;
    if (mantissa_bits < 0) mantissa_bits = 0;
    uint64_t v = fp_f64_bits(x);
    if (mantissa_bits < 52) {
        int drop = 52 - mantissa_bits;
        uint64_t last = (uint64_t)1 << drop;
        uint64_t bias = ((last >> 1) - 1) + ((v & last) >> drop);
        v = (v + bias) & ~(last - 1);
    }
    if (exponent_bits < 11) {
        const uint64_t emask = (uint64_t)0x7FF << 52;
        uint64_t exp = v & emask, sbit = v & ((uint64_t)1 << 63);
        uint64_t rbias = ((uint64_t)1 << (exponent_bits - 1)) - 1;
        if (exp > ((1023u + rbias) << 52)) v = sbit | emask;
        else if (exp <= ((1023u - rbias) << 52)) v = sbit;
    }
    return fp_bits_f64(v);
}
