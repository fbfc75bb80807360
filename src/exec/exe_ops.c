/* exe_ops.c — what each elementwise HLO operation does to one element, for every dtype (XLA's semantics:
 * integer division by zero gives -1 and remainder by zero gives the dividend; shifts by >= the bit width
 * give 0 or the sign fill; float->int conversion saturates and maps NaN to 0; maximum/minimum propagate
 * NaN). Float math is done in double and rounded once to the element type, which for f32 + - * / sqrt is
 * exactly IEEE f32; bf16/f16 compute in f32 then round (design §4). These are the reference semantics: fast
 * kernels must agree with them. */
#include "exec.h"
#include "exe_ops.h"
#include "kernels/ew_math.h"
#include "util/fp.h"

#include <complex.h>
#include <math.h>
#include <string.h>

/* Arithmetic on the TPU and on XLA:CPU (which runs with FTZ/DAZ) treats f32-range subnormals as zero: f32,
 * bf16 (same exponent range) and f64 operands below the smallest normal read as signed zeros, and f32/bf16
 * results that small become zero. Data movement, negate/abs and conversions to narrower types keep the bits. */
static double exe_daz(tpu_dtype t, double v)
{
    double tiny = t == TPU_F64 ? 2.2250738585072014e-308 : 1.1754943508222875e-38;
    if ((t == TPU_F32 || t == TPU_BF16 || t == TPU_F64) && v != 0 && fabs(v) < tiny) return copysign(0.0, v);
    return v;
}

exe_scalar exe_scalar_load(tpu_dtype t, const void *base, int64_t i)
{
    exe_scalar s = {0, 0, 0};
    if (t == TPU_C64) {
        s.f = ((const float *)base)[2 * i];
        s.im = ((const float *)base)[2 * i + 1];
        return s;
    }
    if (t == TPU_C128) {
        s.f = ((const double *)base)[2 * i];
        s.im = ((const double *)base)[2 * i + 1];
        return s;
    }
    char k = tpu_dtype_kind(t);
    if (k == 'f' || k == 'c') s.f = exe_daz(t, ten_load_f64(t, base, i));
    else s.i = ten_load_i64(t, base, i);
    return s;
}

void exe_scalar_store(const exe_state *S, tpu_dtype t, void *base, int64_t i, exe_scalar v)
{
    if (t == TPU_C64) {
        ((float *)base)[2 * i] = (float)v.f;
        ((float *)base)[2 * i + 1] = (float)v.im;
        return;
    }
    if (t == TPU_C128) {
        ((double *)base)[2 * i] = v.f;
        ((double *)base)[2 * i + 1] = v.im;
        return;
    }
    char k = tpu_dtype_kind(t);
    if (k == 'f' || k == 'c') exe_store_float(S, t, base, i, v.f);
    else ten_store_i64(t, base, i, v.i);
}

int64_t exe_wrap_int(tpu_dtype t, int64_t v)
{
    int bits = tpu_dtype_bits(t);
    char k = tpu_dtype_kind(t);
    if (k == 'p') return v != 0;
    if (bits >= 64) return v;
    uint64_t u = (uint64_t)v & ((1ull << bits) - 1);
    if (k == 's' && (u >> (bits - 1))) u |= ~((1ull << bits) - 1);
    return (int64_t)u;
}

double exe_round_float(const exe_state *S, tpu_dtype t, double x)
{
    switch (t) {
    case TPU_F64: return exe_daz(t, x);
    case TPU_F32: return exe_daz(t, (double)(float)x);
    case TPU_BF16:
        /* computed in f32 (flushed), then rounded to bf16: both modes flush bf16 subnormal results */
        return fp_bf16_to_f32(fp_f32_to_bf16_ftz((float)exe_daz(TPU_F32, x)));
    case TPU_F16: return fp_f16_to_f32(fp_f32_to_f16((float)x));
    case TPU_C64: return (double)(float)x;
    case TPU_C128: return x;
    default: return fp_small_to_f64(t, fp_f64_to_small(t, x));
    }
}

exe_scalar exe_scalar_round(const exe_state *S, tpu_dtype t, exe_scalar v)
{
    char k = tpu_dtype_kind(t);
    if (k == 'f' || k == 'c') v.f = exe_round_float(S, t, v.f);
    else v.i = exe_wrap_int(t, v.i);
    return v;
}

static int exe_is_float(tpu_dtype t)
{
    char k = tpu_dtype_kind(t);
    return k == 'f' || k == 'c';
}

/* Total order on doubles: -NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN. */
static int64_t exe_total_key(double x)
{
    int64_t b;
    memcpy(&b, &x, sizeof b);
    /* negative values: flip the magnitude bits so larger magnitudes sort lower; -0 lands just below +0 */
    return b < 0 ? b ^ INT64_MAX : b;
}

int64_t exe_total_order_key(tpu_dtype t, const void *base, int64_t i)
{
    /* from the stored bits, never through a float register: the run's denormals-are-zero mode must not
     * make a subnormal equal to zero here (XLA compares the bit patterns too) */
    switch (tpu_dtype_bits(t)) {
    case 64: {
        int64_t b;
        memcpy(&b, (const char *)base + i * 8, 8);
        return b < 0 ? b ^ INT64_MAX : b;
    }
    case 32: {
        int32_t b;
        memcpy(&b, (const char *)base + i * 4, 4);
        return b < 0 ? b ^ INT32_MAX : b;
    }
    case 16: {
        int16_t b;
        memcpy(&b, (const char *)base + i * 2, 2);
        return b < 0 ? b ^ INT16_MAX : b;
    }
    default: {
        int8_t b = ((const int8_t *)base)[i];
        return b < 0 ? b ^ INT8_MAX : b;
    }
    }
}

int exe_scalar_compare(tpu_dtype t, exe_scalar a, exe_scalar b, const char *dir, const char *type)
{
    int c;   /* -1, 0, 1; 2 = unordered */
    if (tpu_dtype_kind(t) == 'c' && dir) {
        int eq = a.f == b.f && a.im == b.im;
        return dir[0] == 'E' ? eq : dir[0] == 'N' ? !eq : 0;
    }
    if (exe_is_float(t)) {
        if (type && !strcmp(type, "TOTALORDER")) {
            int64_t x = exe_total_key(a.f), y = exe_total_key(b.f);
            c = x < y ? -1 : x > y;
        } else if (isnan(a.f) || isnan(b.f)) {
            c = 2;
        } else {
            c = a.f < b.f ? -1 : a.f > b.f;
        }
    } else if (tpu_dtype_kind(t) == 'u' || tpu_dtype_kind(t) == 'p' || (type && !strcmp(type, "UNSIGNED"))) {
        uint64_t x = (uint64_t)a.i, y = (uint64_t)b.i;
        if (tpu_dtype_bits(t) < 64) {
            x &= (1ull << tpu_dtype_bits(t)) - 1;
            y &= (1ull << tpu_dtype_bits(t)) - 1;
        }
        c = x < y ? -1 : x > y;
    } else {
        c = a.i < b.i ? -1 : a.i > b.i;
    }
    if (!dir) return 0;
    if (dir[0] == 'E') return c == 0;
    if (dir[0] == 'N') return c != 0;
    if (c == 2) return 0;
    if (!strcmp(dir, "LT")) return c < 0;
    if (!strcmp(dir, "LE")) return c <= 0;
    if (!strcmp(dir, "GT")) return c > 0;
    if (!strcmp(dir, "GE")) return c >= 0;
    return 0;
}

static int exe_clz64(uint64_t x, int bits)
{
    if (bits < 64) x &= (1ull << bits) - 1;
    int n = 0;
    for (int i = bits - 1; i >= 0 && !((x >> i) & 1); i--) n++;
    return n;
}

static int exe_popcnt64(uint64_t x, int bits)
{
    if (bits < 64) x &= (1ull << bits) - 1;
    return __builtin_popcountll(x);
}

/* Integer power by squaring; negative exponents give 0 except for bases 1 and -1 (XLA's rule). */
static int64_t exe_ipow(int64_t b, int64_t e)
{
    if (e < 0) return b == 1 ? 1 : b == -1 ? ((e & 1) ? -1 : 1) : 0;
    uint64_t r = 1, x = (uint64_t)b;
    while (e) {
        if (e & 1) r *= x;
        x *= x;
        e >>= 1;
    }
    return (int64_t)r;
}

/* Complex elementwise ops: results of real, imag and abs are real (their result dtype is f32/f64). */
static exe_scalar exe_complex_unop(hlo_op op, tpu_dtype t, exe_scalar a)
{
    exe_scalar r = {0, 0, 0};
    double complex z = a.f + a.im * I, w;
    switch (op) {
    case HLO_REAL: r.f = a.f; return r;
    case HLO_IMAG: r.f = a.im; return r;
    case HLO_ABS: r.f = cabs(z); break;
    case HLO_NEGATE: w = -z; r.f = creal(w); r.im = cimag(w); break;
    case HLO_EXP: w = cexp(z); r.f = creal(w); r.im = cimag(w); break;
    case HLO_LOG: w = clog(z); r.f = creal(w); r.im = cimag(w); break;
    case HLO_SQRT: w = csqrt(z); r.f = creal(w); r.im = cimag(w); break;
    case HLO_RSQRT: w = 1.0 / csqrt(z); r.f = creal(w); r.im = cimag(w); break;
    case HLO_TANH: w = ctanh(z); r.f = creal(w); r.im = cimag(w); break;
    case HLO_SIN: w = csin(z); r.f = creal(w); r.im = cimag(w); break;
    case HLO_COS: w = ccos(z); r.f = creal(w); r.im = cimag(w); break;
    case HLO_SIGN: {
        double m = cabs(z);
        r.f = m ? a.f / m : 0;
        r.im = m ? a.im / m : 0;
        break;
    }
    case HLO_IS_FINITE: r.i = isfinite(a.f) && isfinite(a.im); return r;
    default: r.f = NAN; r.im = NAN; break;
    }
    if (t == TPU_C64) {
        r.f = (float)r.f;
        r.im = (float)r.im;
    }
    return r;
}

exe_scalar exe_scalar_unop(const exe_state *S, hlo_op op, tpu_dtype t, exe_scalar a)
{
    exe_scalar r = {0, 0, 0};
    if (tpu_dtype_kind(t) == 'c') return exe_complex_unop(op, t, a);
    if (exe_is_float(t)) {
        double x = a.f, y;
        int f32 = t == TPU_F32;   /* f32: the definitions the elementwise kernels and fused loops use */
        switch (op) {
        case HLO_ABS: y = fabs(x); break;
        case HLO_NEGATE: y = -x; break;
        case HLO_EXP: y = f32 ? ewm_expf((float)x) : exp(x); break;
        case HLO_EXPM1: y = expm1(x); break;
        case HLO_LOG: y = f32 ? ewm_logf((float)x) : log(x); break;
        case HLO_LOG1P: y = f32 ? ewm_log1pf((float)x) : log1p(x); break;
        case HLO_LOGISTIC: y = f32 ? ewm_logisticf((float)x) : 1.0 / (1.0 + exp(-x)); break;
        case HLO_TANH: y = f32 ? ewm_tanhf((float)x) : tanh(x); break;
        case HLO_SQRT: y = sqrt(x); break;
        case HLO_RSQRT: y = 1.0 / sqrt(x); break;
        case HLO_CBRT: y = cbrt(x); break;
        case HLO_SIN: y = sin(x); break;
        case HLO_COS: y = cos(x); break;
        case HLO_TAN: y = tan(x); break;
        case HLO_ASIN: y = asin(x); break;
        case HLO_ACOS: y = acos(x); break;
        case HLO_ATAN: y = atan(x); break;
        case HLO_SINH: y = sinh(x); break;
        case HLO_COSH: y = cosh(x); break;
        case HLO_ASINH: y = asinh(x); break;
        case HLO_ACOSH: y = acosh(x); break;
        case HLO_ATANH: y = atanh(x); break;
        case HLO_ERF: y = erf(x); break;
        case HLO_FLOOR: y = floor(x); break;
        case HLO_CEIL: y = ceil(x); break;
        case HLO_ROUND_NEAREST_AFZ: y = round(x); break;
        case HLO_ROUND_NEAREST_EVEN: y = nearbyint(x); break;
        case HLO_SIGN: y = isnan(x) ? x : x > 0 ? 1.0 : x < 0 ? -1.0 : x; break;
        case HLO_IS_FINITE: r.i = isfinite(x) != 0; return r;
        case HLO_REAL: y = x; break;
        case HLO_IMAG: y = 0; break;
        case HLO_NOT: y = x; break;   /* not defined on floats; verifier rejects */
        default: y = NAN; break;
        }
        r.f = exe_round_float(S, t, y);
        return r;
    }
    int bits = tpu_dtype_bits(t);
    uint64_t x = (uint64_t)a.i;
    switch (op) {
    case HLO_ABS: r.i = a.i < 0 && tpu_dtype_kind(t) != 'u' ? (int64_t)(0 - x) : a.i; break;   /* u64: identity */
    case HLO_NEGATE: r.i = (int64_t)(0 - x); break;
    case HLO_NOT: r.i = tpu_dtype_kind(t) == 'p' ? !a.i : (int64_t)~x; break;
    case HLO_SIGN: r.i = tpu_dtype_kind(t) == 'u' ? (x != 0) : (a.i > 0) - (a.i < 0); break;
    case HLO_CLZ: r.i = exe_clz64(x, bits); break;
    case HLO_POPCNT: r.i = exe_popcnt64(x, bits); break;
    case HLO_IS_FINITE: r.i = 1; return r;
    default: r.i = a.i; break;   /* float-only ops on ints are rejected by the verifier */
    }
    r.i = exe_wrap_int(t, r.i);
    return r;
}

exe_scalar exe_scalar_binop(const exe_state *S, hlo_op op, tpu_dtype t, exe_scalar a, exe_scalar b)
{
    exe_scalar r = {0, 0, 0};
    if (tpu_dtype_kind(t) == 'c') {
        double complex x = a.f + a.im * I, y = b.f + b.im * I, z;
        switch (op) {
        case HLO_ADD: z = x + y; break;
        case HLO_SUBTRACT: z = x - y; break;
        case HLO_MULTIPLY: z = x * y; break;
        case HLO_DIVIDE: z = x / y; break;
        case HLO_POWER: z = cpow(x, y); break;
        default: z = NAN; break;
        }
        r.f = creal(z);
        r.im = cimag(z);
        if (t == TPU_C64) {
            r.f = (float)r.f;
            r.im = (float)r.im;
        }
        return r;
    }
    if (op == HLO_COMPLEX) {
        /* complex(re, im): operands are real of type t; the result is complex */
        r.f = a.f;
        r.im = b.f;
        return r;
    }
    if (exe_is_float(t)) {
        double x = a.f, y = b.f, z;
        switch (op) {
        case HLO_ADD: z = x + y; break;
        case HLO_SUBTRACT: z = x - y; break;
        case HLO_MULTIPLY: z = x * y; break;
        case HLO_DIVIDE: z = x / y; break;
        case HLO_REMAINDER: z = fmod(x, y); break;
        case HLO_MAXIMUM: z = isnan(x) || isnan(y) ? NAN : (x > y || (x == y && !signbit(x))) ? x : y; break;
        case HLO_MINIMUM: z = isnan(x) || isnan(y) ? NAN : (x < y || (x == y && signbit(x))) ? x : y; break;
        case HLO_POWER: z = pow(x, y); break;
        case HLO_ATAN2: z = atan2(x, y); break;
        case HLO_COMPLEX: z = x; break;
        default: z = NAN; break;
        }
        r.f = exe_round_float(S, t, z);
        return r;
    }
    int bits = tpu_dtype_bits(t);
    int is_unsigned = tpu_dtype_kind(t) == 'u' || tpu_dtype_kind(t) == 'p';
    uint64_t ux = (uint64_t)a.i, uy = (uint64_t)b.i;
    if (is_unsigned && bits < 64) {
        ux &= (1ull << bits) - 1;
        uy &= (1ull << bits) - 1;
    }
    int64_t x = a.i, y = b.i;
    int64_t smin = bits >= 64 ? INT64_MIN : -((int64_t)1 << (bits - 1));
    switch (op) {
    case HLO_ADD: r.i = (int64_t)(ux + uy); break;
    case HLO_SUBTRACT: r.i = (int64_t)(ux - uy); break;
    case HLO_MULTIPLY: r.i = (int64_t)(ux * uy); break;
    case HLO_DIVIDE:
        if (is_unsigned) r.i = uy == 0 ? -1 : (int64_t)(ux / uy);
        else if (y == 0) r.i = -1;
        else if (x == smin && y == -1) r.i = smin;
        else r.i = x / y;
        break;
    case HLO_REMAINDER:
        if (is_unsigned) r.i = uy == 0 ? (int64_t)ux : (int64_t)(ux % uy);
        else if (y == 0) r.i = x;
        else if (x == smin && y == -1) r.i = 0;
        else r.i = x % y;
        break;
    case HLO_MAXIMUM: r.i = is_unsigned ? (int64_t)(ux > uy ? ux : uy) : (x > y ? x : y); break;
    case HLO_MINIMUM: r.i = is_unsigned ? (int64_t)(ux < uy ? ux : uy) : (x < y ? x : y); break;
    case HLO_AND: r.i = (int64_t)(ux & uy); break;
    case HLO_OR: r.i = (int64_t)(ux | uy); break;
    case HLO_XOR: r.i = (int64_t)(ux ^ uy); break;
    case HLO_SHIFT_LEFT: r.i = uy >= (uint64_t)bits ? 0 : (int64_t)(ux << uy); break;
    case HLO_SHIFT_RIGHT_LOGICAL: {
        uint64_t m = bits < 64 ? ux & ((1ull << bits) - 1) : ux;
        r.i = uy >= (uint64_t)bits ? 0 : (int64_t)(m >> uy);
        break;
    }
    case HLO_SHIFT_RIGHT_ARITHMETIC:
        if (is_unsigned) {
            /* arithmetic shift on unsigned types shifts in the top bit of the element */
            int64_t sx = exe_wrap_int(bits == 8 ? TPU_S8 : bits == 16 ? TPU_S16 : bits == 32 ? TPU_S32 : TPU_S64, (int64_t)ux);
            r.i = uy >= (uint64_t)bits ? (sx < 0 ? -1 : 0) : sx >> uy;
        } else {
            r.i = uy >= (uint64_t)bits ? (x < 0 ? -1 : 0) : x >> uy;
        }
        break;
    case HLO_POWER: r.i = exe_ipow(x, y); break;
    case HLO_MULHI: {
        if (is_unsigned) {
            unsigned __int128 p = (unsigned __int128)ux * uy;
            r.i = (int64_t)(uint64_t)(p >> bits);
        } else {
            __int128 p = (__int128)x * y;
            r.i = (int64_t)(p >> bits);
        }
        break;
    }
    default: r.i = 0; break;
    }
    r.i = exe_wrap_int(t, r.i);
    return r;
}

exe_scalar exe_scalar_convert(const exe_state *S, tpu_dtype from, tpu_dtype to, exe_scalar a)
{
    exe_scalar r = {0, 0, 0};
    int ff = exe_is_float(from), tf = exe_is_float(to);
    if (ff && tf) {
        r.f = exe_round_float(S, to, a.f);
        if (tpu_dtype_kind(to) == 'c' && tpu_dtype_kind(from) == 'c') r.im = exe_round_float(S, to, a.im);
    } else if (!ff && tf) {
        double v = tpu_dtype_kind(from) == 'u' && tpu_dtype_bits(from) == 64 ? (double)(uint64_t)a.i : (double)a.i;
        r.f = exe_round_float(S, to, v);
    } else if (ff && !tf) {
        /* saturating, NaN -> 0, truncation toward zero */
        double v = a.f;
        char k = tpu_dtype_kind(to);
        int bits = tpu_dtype_bits(to);
        if (k == 'p') {
            r.i = v != 0;
        } else if (isnan(v)) {
            r.i = 0;
        } else if (k == 'u') {
            double hi = bits >= 64 ? 18446744073709551615.0 : (double)((1ull << bits) - 1);
            r.i = v <= 0 ? 0 : v >= hi ? (int64_t)(bits >= 64 ? UINT64_MAX : (1ull << bits) - 1) : (int64_t)(uint64_t)v;
        } else {
            double lo = bits >= 64 ? -9223372036854775808.0 : -(double)(1ull << (bits - 1));
            double hi = bits >= 64 ? 9223372036854775807.0 : (double)((1ull << (bits - 1)) - 1);
            r.i = v <= lo ? (bits >= 64 ? INT64_MIN : (int64_t)lo) : v >= hi ? (bits >= 64 ? INT64_MAX : (int64_t)hi) : (int64_t)v;
        }
    } else {
        r.i = tpu_dtype_kind(to) == 'p' ? a.i != 0 : exe_wrap_int(to, a.i);
        if (tpu_dtype_kind(from) == 'p') r.i = a.i != 0;
    }
    return r;
}
