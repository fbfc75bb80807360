/* t_ew_int.c — the block forms of the elementwise kernels and fused loops against the per-element reference
 * semantics of exe_ops.c: integer ops on 32- and 64-bit lanes (kernels/ew_int.h) over edge values (0, ±1,
 * the extremes, shift counts around the width, division by zero and INT_MIN / -1), the conversions between
 * pred, ints and f32 (NaN, infinities, out of range, subnormals), and the bf16 unary ops through f32
 * (ewb_unary_bf16_ok) over all 65536 bf16 inputs. */
#include "test.h"
#include "exec/exe_ops.h"
#include "exec/kernels/ew_block.h"
#include "exec/kernels/ew_int.h"

#include <stdlib.h>

#define EI_N 4096

static uint64_t ei_rng = 0x2545F4914F6CDD1Dull;
static uint64_t ei_rand(void)
{
    ei_rng ^= ei_rng << 13;
    ei_rng ^= ei_rng >> 7;
    ei_rng ^= ei_rng << 17;
    return ei_rng;
}

/* n values of dtype t (4 or 8 bytes): every pair of edge values first (slow: the edge index runs slower, for
 * the second operand), then random ones, a quarter of them small */
static void ei_fill(tpu_dtype t, void *p, int n, int slow)
{
    static const int64_t edge[] = {0, 1, -1, 2, -2, 7, 31, 32, 33, 63, 64, 65, 127, 128, 255, 256, INT32_MAX,
                                   INT32_MIN, (int64_t)INT32_MAX + 1, UINT32_MAX, INT64_MAX, INT64_MIN, -31, -32, -64};
    int ne = (int)(sizeof edge / sizeof edge[0]);
    for (int i = 0; i < n; i++) {
        uint64_t v = i < ne * ne ? (uint64_t)edge[(slow ? i / ne : i) % ne] : ei_rand();
        if (i >= ne * ne && (i & 3) == 0) v %= 70;
        if (tpu_dtype_size(t) == 4) ((uint32_t *)p)[i] = (uint32_t)v;
        else ((uint64_t *)p)[i] = v;
    }
}

EXE_VEC
static int ei_binary(hlo_op op, int uns, int es, const void *x, const void *y, void *z, int n)
{
    return es == 4 ? ewi_binary32(op, uns, x, y, z, n) : ewi_binary64(op, uns, x, y, z, n);
}

EXE_VEC
static int ei_binary_scalar(hlo_op op, const uint32_t *x, uint32_t y, uint32_t *z, int n)
{
    return ewi_binary32_scalar(op, x, y, z, n);
}

/* The scalar-operand forms (a broadcast constant in a fused loop) against the reference, with every edge value
 * (shift counts 31, 32, 33, ...) as the scalar, on either side for the ops that commute. */
TEST(ew_int_scalar_operand_matches_reference)
{
    static const tpu_dtype types[] = {TPU_S32, TPU_U32};
    static const hlo_op bin[] = {HLO_ADD, HLO_SUBTRACT, HLO_MULTIPLY, HLO_AND, HLO_OR, HLO_XOR, HLO_SHIFT_LEFT,
                                 HLO_SHIFT_RIGHT_LOGICAL, HLO_SHIFT_RIGHT_ARITHMETIC, HLO_MAXIMUM, HLO_DIVIDE};
    exe_state S;
    memset(&S, 0, sizeof S);
    uint32_t *x = malloc(EI_N * 4), *y = malloc(EI_N * 4), *z = malloc(EI_N * 4), *w = malloc(EI_N * 4);
    REQUIRE(x && y && z && w);
    int bad = 0, ran = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        tpu_dtype t = types[ti];
        ei_fill(t, x, EI_N, 0);
        ei_fill(t, y, EI_N, 0);
        for (size_t oi = 0; oi < sizeof bin / sizeof bin[0]; oi++)
            for (int j = 0; j < 40; j++)
                for (int side = 0; side < 2; side++) {
                    if (side && !ewi_commutes(bin[oi])) continue;
                    if (!ei_binary_scalar(bin[oi], x, y[j], z, EI_N)) continue;
                    ran++;
                    for (int i = 0; i < EI_N && bad < 10; i++) {
                        exe_scalar a = exe_scalar_load(t, x, i), b = exe_scalar_load(t, y, j);
                        exe_scalar r = side ? exe_scalar_binop(&S, bin[oi], t, b, a) : exe_scalar_binop(&S, bin[oi], t, a, b);
                        exe_scalar_store(&S, t, w, i, r);
                        if (z[i] != w[i]) {
                            bad++;
                            test_fail(__FILE__, __LINE__, "%s %s scalar %x%s element %d: fast %x, reference %x",
                                      hlo_op_name(bin[oi]), tpu_dtype_name(t), y[j], side ? " first" : "", i, z[i], w[i]);
                        }
                    }
                }
    }
    CHECK(ran >= 2 * 8 * 40);
    free(x);
    free(y);
    free(z);
    free(w);
}

EXE_VEC
static int ei_unary(hlo_op op, int uns, int es, const void *x, void *z, int n)
{
    return es == 4 ? ewi_unary32(op, uns, x, z, n) : ewi_unary64(op, uns, x, z, n);
}

TEST(ew_int_binary_unary_compare_match_reference)
{
    static const tpu_dtype types[] = {TPU_S32, TPU_U32, TPU_S64, TPU_U64};
    static const hlo_op bin[] = {HLO_ADD, HLO_SUBTRACT, HLO_MULTIPLY, HLO_AND, HLO_OR, HLO_XOR, HLO_SHIFT_LEFT,
                                 HLO_SHIFT_RIGHT_LOGICAL, HLO_SHIFT_RIGHT_ARITHMETIC, HLO_MAXIMUM, HLO_MINIMUM,
                                 HLO_DIVIDE, HLO_REMAINDER};
    static const hlo_op un[] = {HLO_NOT, HLO_NEGATE, HLO_ABS, HLO_SIGN, HLO_POPCNT, HLO_CLZ};
    exe_state S;
    memset(&S, 0, sizeof S);
    uint64_t *x = malloc(EI_N * 8), *y = malloc(EI_N * 8), *z = malloc(EI_N * 8), *w = malloc(EI_N * 8);
    uint8_t *p = malloc(EI_N);
    REQUIRE(x && y && z && w && p);
    int bad = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        tpu_dtype t = types[ti];
        int es = (int)tpu_dtype_size(t), uns = tpu_dtype_kind(t) == 'u';
        ei_fill(t, x, EI_N, 0);
        ei_fill(t, y, EI_N, 1);
        for (size_t oi = 0; oi < sizeof bin / sizeof bin[0]; oi++) {
            REQUIRE(ei_binary(bin[oi], uns, es, x, y, z, EI_N));
            for (int i = 0; i < EI_N && bad < 10; i++) {
                exe_scalar r = exe_scalar_binop(&S, bin[oi], t, exe_scalar_load(t, x, i), exe_scalar_load(t, y, i));
                exe_scalar_store(&S, t, w, i, r);
                if (memcmp((char *)z + i * es, (char *)w + i * es, (size_t)es)) {
                    bad++;
                    test_fail(__FILE__, __LINE__, "%s %s element %d: fast %llx, reference %llx", hlo_op_name(bin[oi]),
                              tpu_dtype_name(t), i, (unsigned long long)exe_scalar_load(t, z, i).i,
                              (unsigned long long)r.i);
                }
            }
        }
        for (size_t oi = 0; oi < sizeof un / sizeof un[0]; oi++) {
            REQUIRE(ei_unary(un[oi], uns, es, x, z, EI_N));
            for (int i = 0; i < EI_N && bad < 10; i++) {
                exe_scalar r = exe_scalar_unop(&S, un[oi], t, exe_scalar_load(t, x, i));
                exe_scalar_store(&S, t, w, i, r);
                if (memcmp((char *)z + i * es, (char *)w + i * es, (size_t)es)) {
                    bad++;
                    test_fail(__FILE__, __LINE__, "%s %s element %d differs", hlo_op_name(un[oi]), tpu_dtype_name(t), i);
                }
            }
        }
        static const char *const dirs[] = {"EQ", "NE", "LT", "LE", "GT", "GE"};
        for (int d = 0; d < 6; d++)
            for (int ty = 0; ty < 2; ty++) {   /* the dtype's own order, then type=UNSIGNED */
                int u = uns || ty;
                if (es == 4) ewi_compare32(d, u, (const uint32_t *)x, (const uint32_t *)y, p, EI_N);
                else ewi_compare64(d, u, x, y, p, EI_N);
                for (int i = 0; i < EI_N && bad < 10; i++) {
                    int r = exe_scalar_compare(t, exe_scalar_load(t, x, i), exe_scalar_load(t, y, i), dirs[d],
                                               ty ? "UNSIGNED" : NULL);
                    if (p[i] != r) {
                        bad++;
                        test_fail(__FILE__, __LINE__, "compare %s %s element %d differs", dirs[d], tpu_dtype_name(t), i);
                    }
                }
            }
    }
    free(x);
    free(y);
    free(z);
    free(w);
    free(p);
}

EXE_VEC
static int ei_convert(tpu_dtype a, tpu_dtype b, const void *x, void *z, int n) { return ewi_convert(a, b, x, z, n); }

TEST(ew_int_convert_matches_reference)
{
    static const tpu_dtype types[] = {TPU_PRED, TPU_S32, TPU_U32, TPU_S64, TPU_U64, TPU_F32, TPU_S8, TPU_U8, TPU_S16, TPU_U16};
    static const float fv[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -0.5f, 1.5f, -1.5f, 2147483520.0f, 2147483648.0f,
                               -2147483648.0f, -2147483904.0f, 4294967040.0f, 4294967296.0f, 9.2233715e18f,
                               9.223372e18f, -9.223372e18f, 1.8446743e19f, 1.8446744e19f, 1e30f, -1e30f, INFINITY,
                               -INFINITY, NAN, -NAN, 1e-40f, -1e-40f, 1.17549435e-38f, 3.0e-39f};
    exe_state S;
    memset(&S, 0, sizeof S);
    uint64_t x[EI_N], z[EI_N], w[EI_N];
    int bad = 0;
    for (size_t a = 0; a < sizeof types / sizeof types[0]; a++)
        for (size_t b = 0; b < sizeof types / sizeof types[0]; b++) {
            tpu_dtype from = types[a], to = types[b];
            if (from == to) continue;
            if (from == TPU_F32) {
                for (int i = 0; i < EI_N; i++) {
                    float f = i < (int)(sizeof fv / sizeof fv[0]) ? fv[i] : (float)((int64_t)ei_rand() >> (ei_rand() % 64));
                    ((float *)x)[i] = f;
                }
            } else if (from == TPU_PRED) {
                for (int i = 0; i < EI_N; i++) ((uint8_t *)x)[i] = (uint8_t)(i & 1);
            } else if (tpu_dtype_size(from) < 4) {
                for (int i = 0; i < EI_N; i++) ten_store_i64(from, x, i, (int64_t)ei_rand());
            } else {
                ei_fill(from, x, EI_N, 0);
            }
            if (!ei_convert(from, to, x, z, EI_N)) continue;   /* no block form for the pair */
            size_t es = tpu_dtype_size(to);
            for (int i = 0; i < EI_N && bad < 10; i++) {
                exe_scalar r = exe_scalar_convert(&S, from, to, exe_scalar_load(from, x, i));
                exe_scalar_store(&S, to, w, i, r);
                int same = !memcmp((char *)z + i * es, (char *)w + i * es, es);
                if (to == TPU_F32 && !same) same = isnan(((float *)z)[i]) && isnan(((float *)w)[i]);
                if (!same) {
                    bad++;
                    test_fail(__FILE__, __LINE__, "convert %s -> %s element %d differs", tpu_dtype_name(from),
                              tpu_dtype_name(to), i);
                }
            }
        }
}

EXE_VEC
static void ei_bf16_unary(hlo_op op, const float *x, float *y, int n)
{
    ewb_unary_bf16(op, x, y, n);
}

TEST(ew_bf16_unary_through_f32_matches_reference_on_every_input)
{
    static const hlo_op ops[] = {HLO_NEGATE, HLO_ABS, HLO_EXP, HLO_LOG, HLO_LOG1P, HLO_TANH, HLO_SQRT, HLO_RSQRT,
                                 HLO_LOGISTIC, HLO_FLOOR, HLO_CEIL, HLO_SIN, HLO_ERF, HLO_ROUND_NEAREST_EVEN,
                                 HLO_ROUND_NEAREST_AFZ, HLO_EXPM1, HLO_COS, HLO_TAN, HLO_ATAN, HLO_CBRT};
    exe_state S;
    memset(&S, 0, sizeof S);
    float *x = malloc(65536 * sizeof(float)), *y = malloc(65536 * sizeof(float));
    REQUIRE(x && y);
    for (int i = 0; i < 65536; i++) x[i] = fp_bf16_to_f32_inline((uint16_t)i);
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        if (!ewb_unary_bf16_ok(ops[k])) continue;
        ei_bf16_unary(ops[k], x, y, 65536);
        int bad = 0;
        for (int i = 0; i < 65536; i++) {
            exe_scalar r = exe_scalar_unop(&S, ops[k], TPU_BF16, exe_scalar_load(TPU_BF16, (uint16_t[]){(uint16_t)i}, 0));
            uint16_t want = fp_f32_to_bf16_ftz((float)r.f), got = fp_f32_to_bf16_inline(y[i]);
            if (want != got && !(isnan(r.f) && isnan(y[i])) && bad++ < 3)
                test_fail(__FILE__, __LINE__, "%s(bf16 %04x): block form %04x, reference %04x", hlo_op_name(ops[k]), i, got,
                          want);
        }
    }
    free(x);
    free(y);
}

/* The unsigned divide and remainder by one divisor (a multiply instead of a divide per lane) against the
 * reference per element: divisors 0, 1, powers of two and their neighbours, the extremes, and random ones
 * (small and large); dividends at the edges (0, 1, d - 1, d, d + 1, multiples, 2^32 - 1) and random. */
TEST(ew_int_divrem_by_scalar_matches_reference)
{
    uint32_t ds[200];
    int nd = 0;
    ds[nd++] = 0;
    for (int b = 0; b < 32; b++) {
        uint32_t p = 1u << b;
        ds[nd++] = p;
        ds[nd++] = p + 1;
        if (p > 2) ds[nd++] = p - 1;
    }
    ds[nd++] = 0xFFFFFFFFu;
    ds[nd++] = 0xFFFFFFFEu;
    ds[nd++] = 1000;
    ds[nd++] = 641;
    ds[nd++] = 6700417;
    for (; nd < 200; nd++) ds[nd] = (uint32_t)(ei_rand() >> (nd % 2 ? 32 : 48));
    static uint32_t x[EI_N], z[EI_N];
    exe_state S;
    memset(&S, 0, sizeof S);
    int bad = 0;
    for (int k = 0; k < nd && bad < 5; k++) {
        uint32_t d = ds[k];
        static const uint32_t ex[] = {0, 1, 2, 0x7FFFFFFFu, 0x80000000u, 0x80000001u, 0xFFFFFFFEu, 0xFFFFFFFFu};
        int n = 0;
        for (size_t e = 0; e < sizeof ex / sizeof ex[0]; e++) x[n++] = ex[e];
        for (uint32_t j = 1; j < 40; j++) {   /* around multiples of d */
            uint64_t q = d ? (uint64_t)0xFFFFFFFFu / d : 0, mq = d ? (uint64_t)d * (q * j / 40) : j;
            x[n++] = (uint32_t)mq;
            x[n++] = (uint32_t)(mq - 1);
            x[n++] = (uint32_t)(mq + 1);
            x[n++] = (uint32_t)(mq + d - 1);
        }
        while (n < EI_N) x[n++] = (uint32_t)ei_rand();
        for (int rem = 0; rem < 2; rem++) {
            ewi_divrem32_scalar(rem, x, d, z, EI_N);
            for (int i = 0; i < EI_N && bad < 5; i++) {
                exe_scalar a = {0, (int64_t)x[i], 0}, b = {0, (int64_t)d, 0};
                uint32_t want = (uint32_t)exe_scalar_binop(&S, rem ? HLO_REMAINDER : HLO_DIVIDE, TPU_U32, a, b).i;
                if (z[i] != want) {
                    test_fail(__FILE__, __LINE__, "%s %u by %u: %u, reference %u", rem ? "remainder" : "divide", x[i], d, z[i], want);
                    bad++;
                }
            }
        }
    }
}
