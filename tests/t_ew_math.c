/* t_ew_math.c — the vectorisable f32 transcendentals of src/exec/kernels/ew_math.h against their libm
 * references ((float)libm((double)x)): at most 1 ulp apart everywhere, special cases bit-identical, and the
 * fraction of inputs where they differ (the reference is the correctly rounded value but for a few inputs in
 * 10^9) stays tiny. Inputs: random bit patterns over the whole f32 range, dense sweeps of the interesting
 * ranges (near 0, subnormals, overflow/underflow and saturation thresholds), and the specials. The block
 * loop used by the kernels (ewb_unary_f32, compiled as vectorised clones) must match the scalar functions
 * bit for bit. Set EWM_VERBOSE=1 to print the measured figures. */
#include "test.h"
#include "exec/kernels/ew_block.h"

#include <stdlib.h>

typedef struct ewm_fn {
    const char *name;
    hlo_op      op;
    float (*fast)(float);
    float (*ref)(float);
} ewm_fn;

static float f_exp(float x) { return ewm_expf(x); }
static float f_tanh(float x) { return ewm_tanhf(x); }
static float f_logistic(float x) { return ewm_logisticf(x); }
static float f_log(float x) { return ewm_logf(x); }
static float f_log1p(float x) { return ewm_log1pf(x); }

static const ewm_fn ewm_fns[] = {
    {"exp", HLO_EXP, f_exp, ewm_expf_ref},
    {"tanh", HLO_TANH, f_tanh, ewm_tanhf_ref},
    {"logistic", HLO_LOGISTIC, f_logistic, ewm_logisticf_ref},
    {"log", HLO_LOG, f_log, ewm_logf_ref},
    {"log1p", HLO_LOG1P, f_log1p, ewm_log1pf_ref},
};

static uint32_t ewm_u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float ewm_f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* position on the ordered line of floats (-0 and +0 one apart) */
static int64_t ewm_ord(float f)
{
    uint32_t u = ewm_u(f);
    return u >> 31 ? -(int64_t)(u & 0x7fffffffu) - 1 : (int64_t)u;
}

EXE_VEC
static void ewm_block(hlo_op op, const float *x, float *y, int64_t n)
{
    ewb_unary_f32(op, x, y, n);
}

static uint64_t ewm_rng = 0x9E3779B97F4A7C15ull;
static uint32_t ewm_rand(void)
{
    ewm_rng ^= ewm_rng << 13;
    ewm_rng ^= ewm_rng >> 7;
    ewm_rng ^= ewm_rng << 17;
    return (uint32_t)(ewm_rng >> 16);
}

/* the inputs: specials, sweeps of [lo, hi] (every float in it when few, else evenly spaced in ordered
 * position), random bit patterns */
static float *ewm_inputs(int64_t *count)
{
    static const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1.0f, -1.0f, 0x1p-149f, -0x1p-149f,
                                     0x1p-126f, -0x1p-126f, 0x1.fffffcp-127f, 3.4028235e38f, -3.4028235e38f,
                                     88.72283f, 88.722839f, -87.33654f, -103.27893f, -103.97208f, -104.0f, 9.0109f,
                                     -9.0109f, 0x1p-12f, 2.0f, 0.5f, 0x1.6a09e6p-1f, 0x1.6a09e8p-1f};
    static const float sweeps[][2] = {
        {-1.0f, 1.0f},            /* near 0 (every float) */
        {-0x1p-120f, 0x1p-120f},  /* subnormals and the smallest normals */
        {-12.0f, 12.0f},          /* tanh's and logistic's live range */
        {80.0f, 100.0f},          /* exp overflow */
        {-110.0f, -80.0f},        /* exp / logistic underflow, f32 subnormal results */
        {0.5f, 2.0f},             /* log near 1 */
        {-1.0f, -0.5f},           /* log1p near -1 */
        {-200.0f, 200.0f},
    };
    const int64_t per_sweep = 1 << 20, nrand = 1 << 21;
    int64_t ns = (int64_t)(sizeof specials / sizeof *specials), nsw = (int64_t)(sizeof sweeps / sizeof *sweeps);
    int64_t n = ns + nsw * per_sweep + nrand;
    float *x = malloc((size_t)n * sizeof *x);
    int64_t k = 0;
    for (int64_t i = 0; i < ns; i++) x[k++] = specials[i];
    for (int64_t s = 0; s < nsw; s++) {
        int64_t a = ewm_ord(sweeps[s][0]), b = ewm_ord(sweeps[s][1]);
        for (int64_t i = 0; i < per_sweep; i++) {
            int64_t o = a + (b - a) * i / (per_sweep - 1);
            x[k++] = o < 0 ? ewm_f((uint32_t)(-(o + 1)) | 0x80000000u) : ewm_f((uint32_t)o);
        }
    }
    for (int64_t i = 0; i < nrand; i++) x[k++] = ewm_f(ewm_rand());
    *count = k;
    return x;
}

TEST(ew_math_within_1ulp)
{
    int64_t n;
    float *x = ewm_inputs(&n);
    float *y = malloc((size_t)n * sizeof *y);
    int verbose = getenv("EWM_VERBOSE") != NULL;
    for (size_t f = 0; f < sizeof ewm_fns / sizeof *ewm_fns; f++) {
        const ewm_fn *F = &ewm_fns[f];
        ewm_block(F->op, x, y, n);
        int64_t differ = 0, over = 0, vec_mismatch = 0, special_mismatch = 0;
        float worst = 0;
        for (int64_t i = 0; i < n; i++) {
            float fast = F->fast(x[i]), ref = F->ref(x[i]);
            if (ewm_u(fast) != ewm_u(y[i])) vec_mismatch++;
            if (ewm_u(fast) == ewm_u(ref)) continue;
            if (fast != fast || ref != ref || isinf(fast) || isinf(ref) || fast == 0 || ref == 0) {
                /* NaN, infinities and zeros (the specials, overflow, underflow) must be exactly those of
                 * the reference, except for a 1-ulp step between 0 and the smallest subnormal */
                if (!(fast == fast && ref == ref && !isinf(fast) && !isinf(ref) && llabs(ewm_ord(fast) - ewm_ord(ref)) <= 1)) {
                    if (special_mismatch++ < 5)
                        test_fail(__FILE__, __LINE__, "%s(%a): %a (0x%08x), reference %a (0x%08x)", F->name, x[i],
                                  fast, ewm_u(fast), ref, ewm_u(ref));
                    continue;
                }
            }
            differ++;
            if (llabs(ewm_ord(fast) - ewm_ord(ref)) > 1 && over++ < 5)
                test_fail(__FILE__, __LINE__, "%s(%a): %a, reference %a: more than 1 ulp apart", F->name, x[i], fast, ref);
            worst = differ == 1 ? x[i] : worst;
        }
        CHECK_MSG(vec_mismatch == 0, "%s: the block loop differs from the scalar function on %lld inputs", F->name,
                  (long long)vec_mismatch);
        CHECK_MSG(over == 0, "%s: %lld inputs more than 1 ulp from the reference", F->name, (long long)over);
        /* the reference is correctly rounded (but for ~1e-9 of inputs), so this is the measured fraction of
         * not correctly rounded results: none expected at this count (a handful over all 2^32 inputs) */
        CHECK_MSG(differ <= n / 1000000, "%s: %lld of %lld inputs differ from the reference", F->name, (long long)differ,
                  (long long)n);
        if (verbose)
            printf("  %-9s %lld inputs, %lld (%.2e) 1 ulp from (float)libm, first %a\n", F->name, (long long)n,
                   (long long)differ, (double)differ / (double)n, worst);
    }
    free(x);
    free(y);
}

TEST(ew_math_specials)
{
    CHECK(ewm_u(ewm_tanhf(0.0f)) == 0u && ewm_u(ewm_tanhf(-0.0f)) == 0x80000000u);
    CHECK(ewm_tanhf(INFINITY) == 1.0f && ewm_tanhf(-INFINITY) == -1.0f && ewm_tanhf(10.0f) == 1.0f);
    CHECK(ewm_tanhf(0x1p-149f) == 0x1p-149f && ewm_tanhf(-0x1p-30f) == -0x1p-30f);
    CHECK(ewm_expf(-INFINITY) == 0.0f && ewm_expf(INFINITY) == INFINITY && ewm_expf(89.0f) == INFINITY);
    CHECK(ewm_expf(0.0f) == 1.0f && ewm_expf(-103.5f) > 0.0f && ewm_expf(-104.0f) == 0.0f);
    CHECK(ewm_logisticf(INFINITY) == 1.0f && ewm_logisticf(-INFINITY) == 0.0f && ewm_logisticf(0.0f) == 0.5f);
    CHECK(ewm_logisticf(-100.0f) > 0.0f && ewm_logisticf(-100.0f) == ewm_logisticf_ref(-100.0f));
    CHECK(ewm_logf(1.0f) == 0.0f && ewm_logf(0.0f) == -INFINITY && ewm_logf(-0.0f) == -INFINITY);
    CHECK(ewm_u(ewm_logf(-1.0f)) == ewm_u(ewm_logf_ref(-1.0f)) && ewm_logf(INFINITY) == INFINITY);
    CHECK(ewm_log1pf(-1.0f) == -INFINITY && ewm_log1pf(0x1p-149f) == 0x1p-149f && ewm_u(ewm_log1pf(-0.0f)) == 0x80000000u);
    CHECK(ewm_u(ewm_log1pf(-2.0f)) == ewm_u(ewm_log1pf_ref(-2.0f)) && ewm_log1pf(INFINITY) == INFINITY);
    float nans[] = {NAN, -NAN};
    for (int i = 0; i < 2; i++) {
        CHECK(ewm_u(ewm_expf(nans[i])) == ewm_u(ewm_expf_ref(nans[i])));
        CHECK(ewm_u(ewm_tanhf(nans[i])) == ewm_u(ewm_tanhf_ref(nans[i])));
        CHECK(ewm_u(ewm_logisticf(nans[i])) == ewm_u(ewm_logisticf_ref(nans[i])));
        CHECK(ewm_u(ewm_logf(nans[i])) == ewm_u(ewm_logf_ref(nans[i])));
        CHECK(ewm_u(ewm_log1pf(nans[i])) == ewm_u(ewm_log1pf_ref(nans[i])));
    }
}
