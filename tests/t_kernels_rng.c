/* t_kernels_rng.c — the counter-based generators against published known answers, and the rng op's
 * distributions (moments, range, a chi-square of the histogram), determinism and independence. The bits of
 * rng-bit-generator are checked against XLA:CPU in t_kernels_golden.c. */
#include "test.h"
#include "exec/kernels/ref.h"

#include <stdlib.h>

TEST(kernels_rng_threefry_known_answers)
{
    /* Random123 kat_vectors, threefry2x32_20 */
    static const uint32_t kat[][6] = {
        {0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x6b200159, 0x99ba4efe},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x1cb996fc, 0xbb002be7},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xc4923a9c, 0x483df7a0},
    };
    for (int i = 0; i < 3; i++) {
        uint32_t out[2];
        /* vectors list (counter, key) */
        exe_threefry2x32(kat[i] + 2, kat[i], out);
        CHECK_MSG(out[0] == kat[i][4] && out[1] == kat[i][5], "threefry vector %d: %08x %08x", i, out[0], out[1]);
    }
}

TEST(kernels_rng_philox_known_answers)
{
    /* Random123 kat_vectors, philox4x32_10: counter[4], key[2], result[4] */
    static const uint32_t kat[][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        exe_philox4x32(kat[i] + 4, kat[i], out);
        CHECK_MSG(!memcmp(out, kat[i] + 6, sizeof out), "philox vector %d: %08x %08x %08x %08x", i, out[0], out[1], out[2], out[3]);
    }
}

/* Runs a module with no parameters; returns its outputs (NULL on failure, after failing the test). */
static tpu_tensor **rng_t_run(const char *text, int *nout)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    tpu_tensor **outs = NULL;
    *nout = 0;
    tpu_status st = tpu_module_parse(ctx, text, strlen(text), "rng.hlo", &m);
    if (!st) st = tpu_run(ctx, m, NULL, NULL, 0, &outs, nout);
    if (st) test_fail(__FILE__, __LINE__, "%s", tpu_errmsg(ctx));
    tpu_module_free(m);
    tpu_ctx_free(ctx);
    return st ? NULL : outs;
}

static const char *rng_t_module =
    "HloModule rng\n"
    "ENTRY main {\n"
    "  a = f32[] constant(2)\n"
    "  b = f32[] constant(5)\n"
    "  mu = f32[] constant(1)\n"
    "  sigma = f32[] constant(2)\n"
    "  lo = s32[] constant(-3)\n"
    "  hi = s32[] constant(7)\n"
    "  ad = f64[] constant(-1)\n"
    "  bd = f64[] constant(1)\n"
    "  u = f32[200,100] rng(a, b), distribution=rng_uniform\n"
    "  u2 = f32[200,100] rng(a, b), distribution=rng_uniform\n"
    "  n = f32[20000] rng(mu, sigma), distribution=rng_normal\n"
    "  i = s32[20000] rng(lo, hi), distribution=rng_uniform\n"
    "  d = f64[20001] rng(ad, bd), distribution=rng_uniform\n"
    "  ROOT t = (f32[200,100], f32[200,100], f32[20000], s32[20000], f64[20001]) tuple(u, u2, n, i, d)\n"
    "}\n";

static void rng_t_moments(const tpu_tensor *t, double *mean, double *var)
{
    int64_t n = tpu_tensor_count(t);
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) s += tpu_tensor_get_f64(t, i);
    *mean = s / (double)n;
    for (int64_t i = 0; i < n; i++) {
        double d = tpu_tensor_get_f64(t, i) - *mean;
        s2 += d * d;
    }
    *var = s2 / (double)(n - 1);
}

TEST(kernels_rng_distributions)
{
    int n = 0;
    tpu_tensor **o = rng_t_run(rng_t_module, &n);
    REQUIRE(o && n == 5);
    double mean, var;
    /* uniform [2, 5): mean 3.5, variance 9/12; 20000 samples: sd of the mean ~0.006 */
    rng_t_moments(o[0], &mean, &var);
    CHECK_NEAR(mean, 3.5, 0.03);
    CHECK_NEAR(var, 0.75, 0.03);
    double mn = 1e9, mx = -1e9;
    for (int64_t i = 0; i < tpu_tensor_count(o[0]); i++) {
        double v = tpu_tensor_get_f64(o[0], i);
        mn = v < mn ? v : mn;
        mx = v > mx ? v : mx;
    }
    CHECK(mn >= 2 && mx < 5 && mn < 2.01 && mx > 4.99);
    /* chi-square of 20 bins (19 degrees of freedom: 99.9% quantile 43.8) */
    int64_t bins[20] = {0};
    for (int64_t i = 0; i < tpu_tensor_count(o[0]); i++) bins[(int)((tpu_tensor_get_f64(o[0], i) - 2) / 3 * 20)]++;
    double chi = 0, e = tpu_tensor_count(o[0]) / 20.0;
    for (int k = 0; k < 20; k++) chi += (bins[k] - e) * (bins[k] - e) / e;
    CHECK_MSG(chi < 43.8, "uniform chi-square %g", chi);
    /* a second rng instruction gives different numbers */
    CHECK(memcmp(tpu_tensor_cdata(o[0]), tpu_tensor_cdata(o[1]), tpu_tensor_nbytes(o[0])));
    /* normal(1, 2) */
    rng_t_moments(o[2], &mean, &var);
    CHECK_NEAR(mean, 1.0, 0.06);
    CHECK_NEAR(var, 4.0, 0.2);
    int64_t within1 = 0;
    for (int64_t i = 0; i < tpu_tensor_count(o[2]); i++) within1 += fabs(tpu_tensor_get_f64(o[2], i) - 1) < 2;
    CHECK_NEAR((double)within1 / (double)tpu_tensor_count(o[2]), 0.6827, 0.015);
    /* integers in [-3, 7): every value, roughly equally often */
    int64_t cnt[10] = {0};
    int bad = 0;
    for (int64_t i = 0; i < tpu_tensor_count(o[3]); i++) {
        double v = tpu_tensor_get_f64(o[3], i);
        if (v < -3 || v >= 7) bad++;
        else cnt[(int)v + 3]++;
    }
    CHECK_EQ_INT(bad, 0);
    chi = 0;
    e = tpu_tensor_count(o[3]) / 10.0;
    for (int k = 0; k < 10; k++) chi += (cnt[k] - e) * (cnt[k] - e) / e;
    CHECK_MSG(chi < 27.9, "integer chi-square %g", chi);   /* 9 dof, 99.9% */
    /* f64 in [-1, 1) */
    rng_t_moments(o[4], &mean, &var);
    CHECK_NEAR(mean, 0.0, 0.03);
    CHECK_NEAR(var, 1.0 / 3.0, 0.02);
    /* the same program run again gives the same numbers */
    int n2 = 0;
    tpu_tensor **o2 = rng_t_run(rng_t_module, &n2);
    REQUIRE(o2 && n2 == 5);
    for (int k = 0; k < 5; k++)
        CHECK(!memcmp(tpu_tensor_cdata(o[k]), tpu_tensor_cdata(o2[k]), tpu_tensor_nbytes(o[k])));
    tpu_tensors_free(o2, n2);
    tpu_tensors_free(o, n);
}

/* rng inside a while loop: every iteration draws new numbers. */
TEST(kernels_rng_loop_iterations_differ)
{
    static const char *text =
        "HloModule loop\n"
        "cond {\n"
        "  p = (s32[], f32[4,3]) parameter(0)\n"
        "  i = s32[] get-tuple-element(p), index=0\n"
        "  n = s32[] constant(3)\n"
        "  ROOT c = pred[] compare(i, n), direction=LT\n"
        "}\n"
        "body {\n"
        "  p = (s32[], f32[4,3]) parameter(0)\n"
        "  i = s32[] get-tuple-element(p), index=0\n"
        "  one = s32[] constant(1)\n"
        "  j = s32[] add(i, one)\n"
        "  a = f32[] constant(0)\n"
        "  b = f32[] constant(1)\n"
        "  r = f32[4] rng(a, b), distribution=rng_uniform\n"
        "  x = f32[4,3] get-tuple-element(p), index=1\n"
        "  r2 = f32[4,1] reshape(r)\n"
        "  z = s32[] constant(0)\n"
        "  x2 = f32[4,3] dynamic-update-slice(x, r2, z, i)\n"
        "  ROOT t = (s32[], f32[4,3]) tuple(j, x2)\n"
        "}\n"
        "ENTRY main {\n"
        "  i0 = s32[] constant(0)\n"
        "  x0 = f32[4,3] constant({{0,0,0},{0,0,0},{0,0,0},{0,0,0}})\n"
        "  t0 = (s32[], f32[4,3]) tuple(i0, x0)\n"
        "  w = (s32[], f32[4,3]) while(t0), condition=cond, body=body\n"
        "  ROOT x = f32[4,3] get-tuple-element(w), index=1\n"
        "}\n";
    int n = 0;
    tpu_tensor **o = rng_t_run(text, &n);
    REQUIRE(o && n == 1);
    const float *x = tpu_tensor_cdata(o[0]);
    for (int r = 0; r < 4; r++) {
        CHECK(x[r * 3] != x[r * 3 + 1] && x[r * 3 + 1] != x[r * 3 + 2] && x[r * 3] != x[r * 3 + 2]);
        for (int c = 0; c < 3; c++) CHECK(x[r * 3 + c] >= 0 && x[r * 3 + c] < 1);
    }
    tpu_tensors_free(o, n);
}

TEST(kernels_rng_errors)
{
    static const char *text =
        "HloModule bad\n"
        "ENTRY main {\n"
        "  a = f32[] constant(0)\n"
        "  b = f32[] constant(1)\n"
        "  ROOT r = f32[4] rng(a, b), distribution=rng_bogus\n"
        "}\n";
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    tpu_tensor **outs = NULL;
    int n = 0;
    tpu_status st = tpu_module_parse(ctx, text, strlen(text), "bad.hlo", &m);
    if (!st) {
        st = tpu_run(ctx, m, NULL, NULL, 0, &outs, &n);
        CHECK(st != TPU_OK);
        CHECK(strstr(tpu_errmsg(ctx), "distribution") != NULL);
    }
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}
