/* t_fp.c — small float conversions and reduce-precision against golden values from numpy, ml_dtypes and
 * jax (tests/golden/make_fp_golden.py writes tests/golden/fp/; the layouts are described there). */
#include "test.h"
#include "util/fp.h"

#include <stdlib.h>
#include <zlib.h>

/* The small types in the order of SMALL in make_fp_golden.py. */
static const tpu_dtype fp_small_types[9] = {TPU_F8E5M2, TPU_F8E4M3FN, TPU_F8E4M3B11FNUZ, TPU_F8E5M2FNUZ,
                                            TPU_F8E4M3FNUZ, TPU_F8E4M3, TPU_F8E3M4, TPU_F4E2M1FN, TPU_F8E8M0FNU};
static const int fp_rp32[][2] = {{8, 7}, {5, 10}, {4, 3}, {5, 2}, {2, 1}, {1, 0}, {6, 4}, {8, 23}};
static const int fp_rp64[][2] = {{11, 52}, {8, 23}, {8, 7}, {5, 10}, {11, 20}, {3, 2}};

/* Reads tests/golden/fp/<name>.gz whole; NULL (and a test failure) if it is missing. */
static void *fp_golden(const char *name, size_t *len)
{
    char path[256];
    snprintf(path, sizeof path, "tests/golden/fp/%s.gz", name);
    gzFile g = gzopen(path, "rb");
    if (!g) {
        test_fail(__FILE__, __LINE__, "cannot open %s (run from the repository root)", path);
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    unsigned char *buf = malloc(cap);
    for (;;) {
        if (n == cap) buf = realloc(buf, cap *= 2);
        int r = gzread(g, buf + n, (unsigned)(cap - n));
        if (r <= 0) break;
        n += (size_t)r;
    }
    gzclose(g);
    *len = n;
    return buf;
}

static uint32_t fp_t_bits32(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static uint64_t fp_t_bits64(double x)
{
    uint64_t u;
    memcpy(&u, &x, 8);
    return u;
}

static float fp_t_f32(uint32_t u)
{
    float x;
    memcpy(&x, &u, 4);
    return x;
}

static int fp_t_f16_nan(uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x3FF); }

/* Equal bits, or both f16 NaNs of the same sign (numpy keeps signaling NaNs signaling; tpusim quiets). */
static int fp_t_f16_same(uint16_t a, uint16_t b)
{
    return a == b || (fp_t_f16_nan(a) && fp_t_f16_nan(b) && (a & 0x8000) == (b & 0x8000));
}

TEST(fp_bf16_to_f32_all_patterns)
{
    size_t n;
    uint32_t *want = fp_golden("bf16_to_f32.bin", &n);
    REQUIRE(want && n == 65536 * 4);
    for (uint32_t h = 0; h < 65536; h++) {
        CHECK_MSG(fp_t_bits32(fp_bf16_to_f32((uint16_t)h)) == want[h], "bf16 %04x -> %08x, want %08x", h,
                  fp_t_bits32(fp_bf16_to_f32((uint16_t)h)), want[h]);
        CHECK(fp_t_bits32(fp_bf16_to_f32_inline((uint16_t)h)) == want[h]);
        /* every non-NaN bf16 goes back to itself */
        float x = fp_bf16_to_f32((uint16_t)h);
        if (!isnan(x)) {
            CHECK(fp_f32_to_bf16(x) == h);
            CHECK(fp_f64_to_bf16(x) == h);
        }
    }
    free(want);
}

TEST(fp_f16_to_f32_all_patterns)
{
    size_t n;
    uint32_t *want = fp_golden("f16_to_f32.bin", &n);
    REQUIRE(want && n == 65536 * 4);
    for (uint32_t h = 0; h < 65536; h++) {
        float x = fp_f16_to_f32((uint16_t)h);
        CHECK_MSG(fp_t_bits32(x) == want[h], "f16 %04x -> %08x, want %08x", h, fp_t_bits32(x), want[h]);
        if (!isnan(x)) {
            CHECK(fp_f32_to_f16(x) == h);
            CHECK(fp_f64_to_f16(x) == h);
        }
    }
    free(want);
}

TEST(fp_small_to_f64_all_patterns)
{
    size_t n;
    uint32_t *want = fp_golden("small_to_f32.bin", &n);
    REQUIRE(want && n == 9 * 256 * 4);
    for (int k = 0; k < 9; k++) {
        tpu_dtype t = fp_small_types[k];
        for (int b = 0; b < 256; b++) {
            double v = fp_small_to_f64(t, (uint8_t)b);
            uint32_t got = fp_t_bits32((float)v);
            CHECK_MSG(got == want[k * 256 + b], "%s %02x -> %08x, want %08x", tpu_dtype_name(t), b, got,
                      want[k * 256 + b]);
            /* every value (other than NaN and fnuz's missing -0) encodes back to its own pattern */
            int pat = t == TPU_F4E2M1FN ? (b & 15) : b;
            if (!isnan(v) && (t == TPU_F4E2M1FN ? b < 16 : 1)) {
                uint8_t back = fp_f64_to_small(t, v);
                CHECK_MSG(back == pat, "%s %02x -> %g -> %02x", tpu_dtype_name(t), b, v, back);
            }
        }
    }
    free(want);
}

TEST(fp_f32_to_each_format_golden)
{
    size_t nin, nbf, nh, ns;
    float *x = fp_golden("f32_in.bin", &nin);
    uint16_t *bf = fp_golden("f32_bf16.bin", &nbf);
    uint16_t *h = fp_golden("f32_f16.bin", &nh);
    uint8_t *sm = fp_golden("f32_small.bin", &ns);
    size_t n = nin / 4;
    REQUIRE(x && bf && h && sm && n > 1000 && nbf == 2 * n && nh == 2 * n && ns == 9 * n);
    int bad_bf = 0, bad_h = 0, bad_s = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t b = fp_f32_to_bf16(x[i]);
        if (b != bf[i] || fp_f32_to_bf16_inline(x[i]) != bf[i] || fp_f64_to_bf16(x[i]) != bf[i]) {
            if (bad_bf++ < 5)
                test_fail(__FILE__, __LINE__, "bf16(%08x) = %04x, want %04x", fp_t_bits32(x[i]), b, bf[i]);
        }
        uint16_t hh = fp_f32_to_f16(x[i]);
        if (!fp_t_f16_same(hh, h[i]) && bad_h++ < 5)
            test_fail(__FILE__, __LINE__, "f16(%08x) = %04x, want %04x", fp_t_bits32(x[i]), hh, h[i]);
        for (int k = 0; k < 9; k++) {
            uint8_t s = fp_f64_to_small(fp_small_types[k], x[i]);
            if (s != sm[k * n + i] && bad_s++ < 5)
                test_fail(__FILE__, __LINE__, "%s(%08x) = %02x, want %02x", tpu_dtype_name(fp_small_types[k]),
                          fp_t_bits32(x[i]), s, sm[k * n + i]);
        }
    }
    CHECK_EQ_INT(bad_bf, 0);
    CHECK_EQ_INT(bad_h, 0);
    CHECK_EQ_INT(bad_s, 0);
    free(x), free(bf), free(h), free(sm);
}

/* These inputs sit a hair off the ties of each format: rounding through f32 first gets them wrong. */
TEST(fp_f64_rounds_once_golden)
{
    size_t nin, nbf, nh, ns;
    double *x = fp_golden("f64_in.bin", &nin);
    uint16_t *bf = fp_golden("f64_bf16.bin", &nbf);
    uint16_t *h = fp_golden("f64_f16.bin", &nh);
    uint8_t *sm = fp_golden("f64_small.bin", &ns);
    size_t n = nin / 8;
    REQUIRE(x && bf && h && sm && n > 1000 && nbf == 2 * n && nh == 2 * n && ns == 9 * n);
    int bad = 0, differs_via_f32 = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t b = fp_f64_to_bf16(x[i]);
        if (b != bf[i] && bad++ < 5)
            test_fail(__FILE__, __LINE__, "bf16(%a) = %04x, want %04x", x[i], b, bf[i]);
        if (fp_f32_to_bf16((float)x[i]) != bf[i]) differs_via_f32++;
        uint16_t hh = fp_f64_to_f16(x[i]);
        if (!fp_t_f16_same(hh, h[i]) && bad++ < 5)
            test_fail(__FILE__, __LINE__, "f16(%a) = %04x, want %04x", x[i], hh, h[i]);
        for (int k = 0; k < 9; k++) {
            uint8_t s = fp_f64_to_small(fp_small_types[k], x[i]);
            if (s != sm[k * n + i] && bad++ < 5)
                test_fail(__FILE__, __LINE__, "%s(%a) = %02x, want %02x", tpu_dtype_name(fp_small_types[k]), x[i],
                          s, sm[k * n + i]);
        }
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(differs_via_f32 > 50);   /* the inputs really do catch double rounding */
    free(x), free(bf), free(h), free(sm);
}

TEST(fp_reduce_precision_golden)
{
    size_t nin, nr, nin64, nr64;
    uint32_t *x = fp_golden("f32_in.bin", &nin);
    uint32_t *r = fp_golden("f32_rp.bin", &nr);
    uint64_t *x64 = fp_golden("f64_in.bin", &nin64);
    uint64_t *r64 = fp_golden("f64_rp.bin", &nr64);
    size_t n = nin / 4, n64 = nin64 / 8;
    REQUIRE(x && r && x64 && r64);
    REQUIRE(nr == sizeof fp_rp32 / sizeof fp_rp32[0] * nin && nr64 == sizeof fp_rp64 / sizeof fp_rp64[0] * nin64);
    int bad = 0;
    for (size_t c = 0; c < sizeof fp_rp32 / sizeof fp_rp32[0]; c++)
        for (size_t i = 0; i < n; i++) {
            uint32_t got = fp_t_bits32(fp_reduce_precision_f32(fp_t_f32(x[i]), fp_rp32[c][0], fp_rp32[c][1]));
            if (got != r[c * n + i] && bad++ < 5)
                test_fail(__FILE__, __LINE__, "reduce_precision(%08x, %d, %d) = %08x, want %08x", x[i], fp_rp32[c][0],
                          fp_rp32[c][1], got, r[c * n + i]);
        }
    for (size_t c = 0; c < sizeof fp_rp64 / sizeof fp_rp64[0]; c++)
        for (size_t i = 0; i < n64; i++) {
            double v;
            memcpy(&v, &x64[i], 8);
            uint64_t got = fp_t_bits64(fp_reduce_precision_f64(v, fp_rp64[c][0], fp_rp64[c][1]));
            if (got != r64[c * n64 + i] && bad++ < 5)
                test_fail(__FILE__, __LINE__, "reduce_precision(%a, %d, %d) = %016llx, want %016llx", v,
                          fp_rp64[c][0], fp_rp64[c][1], (unsigned long long)got, (unsigned long long)r64[c * n64 + i]);
        }
    CHECK_EQ_INT(bad, 0);
    free(x), free(r), free(x64), free(r64);
}

TEST(fp_bf16_ftz_flushes_subnormal_results)
{
    /* 2^-127 is a bf16 subnormal: kept by the plain convert, flushed (sign kept) by the TPU's */
    CHECK_EQ_INT(fp_f32_to_bf16(0x1p-127f), 0x0040);
    CHECK_EQ_INT(fp_f32_to_bf16_ftz(0x1p-127f), 0x0000);
    CHECK_EQ_INT(fp_f32_to_bf16_ftz(-0x1p-127f), 0x8000);
    CHECK_EQ_INT(fp_f32_to_bf16_ftz(-0x1p-140f), 0x8000);
    CHECK_EQ_INT(fp_f32_to_bf16_ftz(fp_t_f32(1)), 0x0000);   /* f32 subnormal input */
    /* just below 2^-126 but rounding up to it: the result is normal and stays */
    CHECK_EQ_INT(fp_f32_to_bf16_ftz(fp_t_f32(0x007FFFFF)), 0x0080);
    CHECK_EQ_INT(fp_f32_to_bf16_ftz(0x1p-126f), 0x0080);
    CHECK_EQ_INT(fp_f32_to_bf16_ftz(-0.0f), 0x8000);
    CHECK_EQ_INT(fp_f32_to_bf16_ftz(INFINITY), 0x7F80);
    CHECK_EQ_INT(fp_f32_to_bf16_ftz(fp_t_f32(0xFF800001)), 0xFFC0);   /* signaling NaN -> quiet, sign kept */
    CHECK_EQ_INT(fp_f32_to_bf16(fp_t_f32(0x7FA00000)), 0x7FC0);
    CHECK(fp_t_bits32(fp_round_bf16_ftz(0x1p-130f)) == 0);
    CHECK(fp_t_bits32(fp_round_bf16_ftz(-0x1p-130f)) == 0x80000000u);
    CHECK(fp_round_bf16(0x1p-130f) == 0x1p-130f);
    CHECK(fp_round_bf16(1.00390625f) == 1.0f);          /* tie 1 + 2^-8 -> even (1.0) */
    CHECK(fp_round_bf16(1.01171875f) == 1.015625f);     /* tie 1 + 3*2^-8 -> even (1 + 2^-6) */
    CHECK(isinf(fp_round_bf16(3.4028235e38f)));          /* f32 max rounds up past bf16 max */
    /* away from the subnormal range ftz changes nothing */
    size_t n;
    float *x = fp_golden("f32_in.bin", &n);
    REQUIRE(x);
    for (size_t i = 0; i < n / 4; i++) {
        uint16_t a = fp_f32_to_bf16(x[i]), b = fp_f32_to_bf16_ftz(x[i]);
        if ((a & 0x7F80) != 0) CHECK(a == b);
        else CHECK(b == (a & 0x8000));
        CHECK(fp_t_bits32(fp_round_bf16(x[i])) == fp_t_bits32(fp_bf16_to_f32(a)));
    }
    free(x);
}

TEST(fp_special_values_by_format)
{
    /* f16: overflow to inf at the tie 65520, NaN quieted with its sign and top payload */
    CHECK_EQ_INT(fp_f32_to_f16(65519.0f), 0x7BFF);
    CHECK_EQ_INT(fp_f32_to_f16(65520.0f), 0x7C00);
    CHECK_EQ_INT(fp_f32_to_f16(fp_t_f32(0x7F800001)), 0x7E00);
    CHECK_EQ_INT(fp_f32_to_f16(fp_t_f32(0xFFA00000)), 0xFF00);
    CHECK_EQ_INT(fp_f64_to_f16(0x1p-25), 0x0000);                 /* tie to even: zero */
    CHECK_EQ_INT(fp_f64_to_f16(0x1p-25 + 0x1p-60), 0x0001);       /* a hair above: rounds up */
    /* f8e4m3fn: no inf; 464 is the tie between 448 (max, even) and 480 (the NaN pattern); above it: NaN */
    CHECK_EQ_INT(fp_f64_to_small(TPU_F8E4M3FN, 464.0), 0x7E);
    CHECK_EQ_INT(fp_f64_to_small(TPU_F8E4M3FN, 464.0001), 0x7F);
    CHECK_EQ_INT(fp_f64_to_small(TPU_F8E4M3FN, -INFINITY), 0xFF);
    /* fnuz: no -0, one NaN */
    CHECK_EQ_INT(fp_f64_to_small(TPU_F8E4M3FNUZ, -0.0), 0x00);
    CHECK_EQ_INT(fp_f64_to_small(TPU_F8E4M3FNUZ, -1e-10), 0x00);
    CHECK_EQ_INT(fp_f64_to_small(TPU_F8E5M2FNUZ, NAN), 0x80);
    CHECK(isnan(fp_small_to_f64(TPU_F8E4M3B11FNUZ, 0x80)));
    /* f4e2m1fn saturates; NaN becomes the pattern 0x8 as in ml_dtypes */
    CHECK_EQ_INT(fp_f64_to_small(TPU_F4E2M1FN, 100.0), 0x7);
    CHECK_EQ_INT(fp_f64_to_small(TPU_F4E2M1FN, -INFINITY), 0xF);
    CHECK_EQ_INT(fp_f64_to_small(TPU_F4E2M1FN, NAN), 0x8);
    CHECK(fp_small_to_f64(TPU_F4E2M1FN, 0x7) == 6.0);
    CHECK(fp_small_to_f64(TPU_F4E2M1FN, 0xF1) == 0.5);   /* only the low nibble counts */
    /* e8m0: powers of two only, no zero, no sign */
    CHECK_EQ_INT(fp_f64_to_small(TPU_F8E8M0FNU, 1.0), 0x7F);
    CHECK_EQ_INT(fp_f64_to_small(TPU_F8E8M0FNU, 1.5), 0x80);   /* tie -> even mantissa: 2 */
    CHECK_EQ_INT(fp_f64_to_small(TPU_F8E8M0FNU, 0.0), 0xFF);
    CHECK_EQ_INT(fp_f64_to_small(TPU_F8E8M0FNU, -2.0), 0xFF);
    CHECK(fp_small_to_f64(TPU_F8E8M0FNU, 0) == 0x1p-127);
    /* e5m2 keeps inf */
    CHECK_EQ_INT(fp_f64_to_small(TPU_F8E5M2, 1e6), 0x7C);
    CHECK_EQ_INT(fp_f64_to_small(TPU_F8E5M2, 57344.0), 0x7B);
    /* not a small type */
    CHECK(isnan(fp_small_to_f64(TPU_F32, 0)));
}

TEST(fp_reduce_precision_edges)
{
    /* with 8 exponent bits the range is f32's: only the mantissa is rounded */
    CHECK(fp_reduce_precision_f32(1.00390625f, 8, 7) == 1.0f);
    CHECK(fp_reduce_precision_f32(0x1p-127f, 8, 7) == 0x1p-127f);   /* exponent_bits 8: no range change */
    CHECK(fp_reduce_precision_f32(0x1p-15f, 5, 10) == 0.0f);        /* below f16's min normal: zero */
    CHECK(fp_reduce_precision_f32(70000.0f, 5, 10) == INFINITY);
    CHECK(fp_t_bits32(fp_reduce_precision_f32(-0x1p-20f, 5, 10)) == 0x80000000u);
    CHECK(fp_t_bits32(fp_reduce_precision_f32(fp_t_f32(0x7FA00001), 5, 0)) == 0x7FA00001u);   /* NaN as is */
    CHECK(fp_reduce_precision_f64(1.0 + 0x1p-30, 11, 23) == 1.0);
    CHECK(fp_reduce_precision_f64(1.0 + 0x1p-23 + 0x1p-24, 11, 23) == 1.0 + 0x1p-22);
    CHECK(fp_reduce_precision_f32(3.0f, 0, 5) == fp_reduce_precision_f32(3.0f, 1, 5));   /* clamped */
}
