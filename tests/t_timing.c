/* t_timing.c — the timing model's invariants (docs/timing.md): time grows with work, padding shows, double-
 * buffered weight loads overlap (long streams: folds x rows; short streams: weight-load bound), the MXU
 * work is spread over every MXU of a device, precision passes, convolution taps, the fusion finish (cheap
 * producers duplicated, sibling reductions), loops times their trip counts, collectives grow with the
 * group, the step loop (steps per execution, input-bound detection), and the advisor's re-run gains. */
#include "test.h"
#include "compile/compile.h"
#include "profile/profile.h"
#include "timing/model.h"

#include <stdlib.h>
#include <string.h>

static tpu_module *parse(tpu_ctx *ctx, const char *text)
{
    tpu_module *m = NULL;
    if (tpu_module_parse(ctx, text, strlen(text), "test.hlo", &m) != TPU_OK) {
        test_fail(__FILE__, __LINE__, "parse: %s", tpu_errmsg(ctx));
        return NULL;
    }
    return m;
}

/* Profiles `text` on `chip` with options; NULL (and a failure) on error. */
static tpu_profile *prof_opts(tpu_ctx *ctx, const char *text, tpu_profile_opts o, tpu_module **mo)
{
    tpu_module *m = parse(ctx, text);
    if (!m) return NULL;
    tpu_profile *p = NULL;
    if (tpu_profile_program(ctx, m, &o, &p) != TPU_OK) {
        test_fail(__FILE__, __LINE__, "profile: %s", tpu_errmsg(ctx));
        tpu_module_free(m);
        return NULL;
    }
    *mo = m;
    return p;
}

/* Step time of `text` on `chip`, or -1. */
static double step_of(tpu_ctx *ctx, const char *text, const char *chip)
{
    tpu_profile_opts o = {0};
    o.chip = chip;
    tpu_module *m = NULL;
    tpu_profile *p = prof_opts(ctx, text, o, &m);
    if (!p) return -1;
    double s = tpu_profile_step_time(p);
    tpu_profile_free(p);
    tpu_module_free(m);
    return s;
}

/* "HloModule mm ENTRY { dot of [m,k] x [k,n] }" in `dt` with an optional precision. */
static char *dot_hlo(const char *dt, long m, long k, long n, const char *prec)
{
    char *s = malloc(1024);
    snprintf(s, 1024,
             "HloModule mm\nENTRY main {\n  a = %s[%ld,%ld]{1,0} parameter(0)\n  b = %s[%ld,%ld]{1,0} parameter(1)\n"
             "  ROOT c = %s[%ld,%ld]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}%s%s\n}\n",
             dt, m, k, dt, k, n, dt, m, n, prec ? ", operand_precision=" : "", prec ? prec : "");
    return s;
}

static const tim_op *first_mxu_op(const tpu_profile *p)
{
    const prf_profile *pp = (const prf_profile *)p;
    for (int i = 0; i < pp->tim->nops; i++)
        if (pp->tim->ops[i].mxu_flops > 0) return &pp->tim->ops[i];
    return NULL;
}

TEST(timing_grows_with_work)
{
    tpu_ctx *ctx = tpu_ctx_new();
    const char *chips[] = {"v2-8", "v3-8", "v4-8", "v5e-8", "v5p-8", "v6e-8", "v7"};
    for (size_t c = 0; c < sizeof chips / sizeof *chips; c++) {
        double prev = 0, prev_dev = 0;
        for (long m = 1024; m <= 16384; m *= 2) {
            char *h = dot_hlo("bf16", m, 4096, 4096, NULL);
            tpu_profile_opts o = {0};
            o.chip = chips[c];
            tpu_module *mod = NULL;
            tpu_profile *p = prof_opts(ctx, h, o, &mod);
            free(h);
            if (!p) continue;
            double s = tpu_profile_step_time(p), dev = ((const prf_profile *)p)->tim->device_s;
            CHECK_MSG(s > prev, "%s: [%ld,4096]x[4096,4096] takes %g s, not more than the half size (%g s)", chips[c], m, s, prev);
            /* compute bound at these sizes: doubling the work nearly doubles the device time */
            if (prev_dev > 0 && m >= 4096) CHECK_MSG(dev / prev_dev > 1.85 && dev / prev_dev < 2.05, "%s: ratio %g", chips[c], dev / prev_dev);
            prev = s;
            prev_dev = dev;
            tpu_profile_free(p);
            tpu_module_free(mod);
        }
    }
    tpu_ctx_free(ctx);
}

TEST(timing_big_matmul_reaches_peak)
{
    tpu_ctx *ctx = tpu_ctx_new();
    const char *chips[] = {"v2", "v3", "v4", "v5e", "v5p", "v6e", "v7"};
    for (size_t c = 0; c < sizeof chips / sizeof *chips; c++) {
        char *h = dot_hlo("bf16", 8192, 8192, 8192, NULL);
        tpu_profile_opts o = {0};
        o.chip = chips[c];
        tpu_module *m = NULL;
        tpu_profile *p = prof_opts(ctx, h, o, &m);
        free(h);
        if (!p) continue;
        /* the share of the peak XLA's matmul sustains on large GEMMs (published sweeps: chip mxu_efficiency), less
         * the pipeline's exposed first loads and last store and the host launch */
        double u = tpu_profile_mxu_utilization(p);
        const chp_chip *ch = chp_generation_find(chips[c]);
        double eff = ch && ch->mxu_efficiency > 0 ? ch->mxu_efficiency : 1;
        CHECK_MSG(u > 0.9 * eff && u <= eff, "%s: MXU utilization %g of an 8192^3 matmul (efficiency %g)", chips[c], u, eff);
        CHECK_EQ_STR(tpu_profile_bound(p), "compute");
        const tim_op *t = first_mxu_op(p);
        CHECK(t && t->mxu_util <= 1.0 && t->pad_waste == 0);
        tpu_profile_free(p);
        tpu_module_free(m);
    }
    tpu_ctx_free(ctx);
}

/* A 129-wide matmul pays for two 128-wide tiles in the held and contracted dimensions. */
TEST(timing_padding_costs_show)
{
    tpu_ctx *ctx = tpu_ctx_new();
    char *h128 = dot_hlo("bf16", 65536, 128, 128, NULL), *h129 = dot_hlo("bf16", 65536, 129, 129, NULL);
    tpu_profile_opts o = {0};
    o.chip = "v2";
    tpu_module *m1 = NULL, *m2 = NULL;
    tpu_profile *p1 = prof_opts(ctx, h128, o, &m1), *p2 = prof_opts(ctx, h129, o, &m2);
    REQUIRE(p1 && p2);
    const tim_op *a = first_mxu_op(p1), *b = first_mxu_op(p2);
    REQUIRE(a && b);
    CHECK_NEAR(a->pad_waste, 0, 1e-12);
    /* 129 x 129 useful of 256 x 256 issued */
    CHECK_NEAR(b->pad_waste, 1 - (129.0 * 129) / (256.0 * 256), 1e-9);
    CHECK_MSG(b->mxu_s / a->mxu_s > 3.9 && b->mxu_s / a->mxu_s < 4.1, "129 vs 128: MXU time ratio %g, want ~4", b->mxu_s / a->mxu_s);
    /* rows stream in groups of 8: 65537 rows cost a group more than 65536 */
    double w8 = 0, w9 = 0;
    chp_slice s;
    REQUIRE_OK(ctx, cmp_resolve_chip(ctx, "v2", &s));
    double t8 = tim_mxu_gemm_s(&s.chip, 1, 65536, 128, 128, 1, &w8), t9 = tim_mxu_gemm_s(&s.chip, 1, 65537, 128, 128, 1, &w9);
    CHECK(t9 > t8);
    CHECK(w9 > 0 && w8 == 0);
    /* the advisor names the op and the dimension */
    const char *adv = tpu_profile_advice(p2);
    REQUIRE(adv);
    CHECK_MSG(strstr(adv, "Padding wastes MXU passes") && strstr(adv, "129 is not a multiple of 128"), "advice: %s", adv);
    tpu_profile_free(p1);
    tpu_profile_free(p2);
    tpu_module_free(m1);
    tpu_module_free(m2);
    free(h128);
    free(h129);
    tpu_ctx_free(ctx);
}

/* Weight-stationary with double-buffered weights: a fold costs max(rows streamed, weight load) cycles. */
TEST(timing_double_buffered_weight_loads)
{
    tpu_ctx *ctx = tpu_ctx_new();
    chp_slice s;
    REQUIRE_OK(ctx, cmp_resolve_chip(ctx, "v2", &s));   /* one MXU per device: no splitting */
    const chp_chip *c = &s.chip;
    double clk = chp_mxu_clock_hz(c), R = c->mxu_rows, C = c->mxu_cols;
    /* long streams: folds x rows, plus one fill (R) and drain (R + C - 2) */
    double t = tim_mxu_gemm_s(c, 1, 8192, 512, 512, 1, NULL);
    double folds = (512 / R) * (512 / C);
    CHECK_NEAR(t * clk, folds * 8192 + R + (R + C - 2), 1e-6);
    /* the weight loads hide behind the stream: the same as if weights were free */
    CHECK_NEAR(t * clk - (R + R + C - 2), folds * 8192, 1e-6);
    /* short streams: weight-load bound, 8 and 64 rows cost the same R cycles per fold */
    double t8 = tim_mxu_gemm_s(c, 1, 8, 512, 512, 1, NULL), t64 = tim_mxu_gemm_s(c, 1, 64, 512, 512, 1, NULL);
    double t128 = tim_mxu_gemm_s(c, 1, 128, 512, 512, 1, NULL), t256 = tim_mxu_gemm_s(c, 1, 256, 512, 512, 1, NULL);
    CHECK_NEAR(t8, t64, 1e-15);
    CHECK_NEAR(t8, t128, 1e-15);
    CHECK_NEAR(t8 * clk, folds * R + R + R + C - 2, 1e-6);
    CHECK(t256 > t128);
    CHECK_NEAR(t256 * clk - (2 * R + C - 2), 2 * (t128 * clk - (2 * R + C - 2)), 1e-6);
    /* passes multiply the time */
    CHECK_NEAR(tim_mxu_gemm_s(c, 1, 8192, 512, 512, 6, NULL), 6 * t, 1e-12);
    tpu_ctx_free(ctx);
}

/* The work is spread over every MXU of the device, splitting the stream when there are few weight tiles. */
TEST(timing_mxus_share_the_work)
{
    tpu_ctx *ctx = tpu_ctx_new();
    chp_slice v2, v4;
    REQUIRE_OK(ctx, cmp_resolve_chip(ctx, "v2", &v2));
    REQUIRE_OK(ctx, cmp_resolve_chip(ctx, "v4", &v4));   /* a megacore device: 2 cores x 4 MXUs */
    /* one 128x128 weight tile, a million rows: 8 MXUs take 1/8 of the rows each */
    double one = tim_mxu_gemm_s(&v2.chip, 1, 1 << 20, 128, 128, 1, NULL) * chp_mxu_clock_hz(&v2.chip);
    double eight = tim_mxu_gemm_s(&v4.chip, 1, 1 << 20, 128, 128, 1, NULL) * chp_mxu_clock_hz(&v4.chip);
    CHECK_MSG(one / eight > 7.9 && one / eight < 8.1, "cycles on 1 MXU %g vs 8 MXUs %g", one, eight);
    /* utilization of a long, full-tile GEMM on 8 MXUs stays near 1 */
    double flops = 2.0 * (1 << 20) * 128 * 128;
    double u = flops / (tim_mxu_gemm_s(&v4.chip, 1, 1 << 20, 128, 128, 1, NULL) * tim_mxu_peak_flops(&v4.chip));
    CHECK_MSG(u > 0.99 && u <= 1.0, "utilization %g", u);
    tpu_ctx_free(ctx);
}

TEST(timing_precision_passes)
{
    tpu_ctx *ctx = tpu_ctx_new();
    char *d = dot_hlo("f32", 8192, 8192, 8192, NULL), *hi = dot_hlo("f32", 8192, 8192, 8192, "{highest, highest}");
    char *h3 = dot_hlo("f32", 8192, 8192, 8192, "{high, high}");
    double sd = step_of(ctx, d, "v3"), sh = step_of(ctx, hi, "v3"), s3 = step_of(ctx, h3, "v3");
    CHECK_MSG(sh / sd > 5.5 && sh / sd < 6.1, "HIGHEST vs DEFAULT: %g", sh / sd);
    CHECK_MSG(s3 / sd > 2.7 && s3 / sd < 3.1, "HIGH vs DEFAULT: %g", s3 / sd);
    free(d);
    free(hi);
    free(h3);
    tpu_ctx_free(ctx);
}

/* A transposed convolution (lhs dilation) multiplies only real inputs: about 1/4 of the window taps. */
TEST(timing_conv_counts_real_taps)
{
    tpu_ctx *ctx = tpu_ctx_new();
    const char *plain =
        "HloModule c\nENTRY main {\n  x = bf16[8,64,64,128]{3,2,1,0} parameter(0)\n  w = bf16[3,3,128,128]{3,2,1,0} parameter(1)\n"
        "  ROOT y = bf16[8,64,64,128]{3,2,1,0} convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f\n}\n";
    const char *dilated =
        "HloModule c\nENTRY main {\n  x = bf16[8,32,32,128]{3,2,1,0} parameter(0)\n  w = bf16[3,3,128,128]{3,2,1,0} parameter(1)\n"
        "  ROOT y = bf16[8,64,64,128]{3,2,1,0} convolution(x, w), window={size=3x3 pad=1_2x1_2 lhs_dilate=2x2}, dim_labels=b01f_01io->b01f\n}\n";
    tpu_profile_opts o = {0};
    o.chip = "v3";
    tpu_module *m1 = NULL, *m2 = NULL;
    tpu_profile *p1 = prof_opts(ctx, plain, o, &m1), *p2 = prof_opts(ctx, dilated, o, &m2);
    REQUIRE(p1 && p2);
    const tim_op *a = first_mxu_op(p1), *b = first_mxu_op(p2);
    REQUIRE(a && b);
    /* the plain conv: every tap but the zero padding at the border (62/64 of rows and columns see 3 taps) */
    double full = 2.0 * 8 * 64 * 64 * 128 * 128 * 9;
    CHECK_MSG(a->flops < full && a->flops > 0.95 * full, "plain conv FLOPs %g of %g", a->flops, full);
    CHECK_MSG(b->flops > 0.2 * full && b->flops < 0.3 * full, "dilated conv FLOPs %g of %g", b->flops, full);
    CHECK(b->mxu_s < 0.4 * a->mxu_s);
    tpu_profile_free(p1);
    tpu_profile_free(p2);
    tpu_module_free(m1);
    tpu_module_free(m2);
    tpu_ctx_free(ctx);
}

/* Cheap producers (a widening convert) are fused into each consumer; sibling reductions read once. */
TEST(timing_fusion_finish)
{
    tpu_ctx *ctx = tpu_ctx_new();
    const char *hlo =
        "HloModule bn\n"
        "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
        "ENTRY main {\n"
        "  x = bf16[256,1024,128]{2,1,0} parameter(0)\n"
        "  xf = f32[256,1024,128]{2,1,0} convert(x)\n"
        "  z = f32[] constant(0)\n"
        "  s1 = f32[128]{0} reduce(xf, z), dimensions={0,1}, to_apply=add\n"
        "  sq = f32[256,1024,128]{2,1,0} multiply(xf, xf)\n"
        "  s2 = f32[128]{0} reduce(sq, z), dimensions={0,1}, to_apply=add\n"
        "  ROOT t = (f32[128]{0}, f32[128]{0}) tuple(s1, s2)\n"
        "}\n";
    tpu_profile_opts o = {0};
    o.chip = "v4";
    tpu_module *m = NULL;
    tpu_profile *p = prof_opts(ctx, hlo, o, &m);
    REQUIRE(p);
    const prf_profile *pp = (const prf_profile *)p;
    int64_t x_bytes = 256LL * 1024 * 128 * 2;
    int dup = 0;
    for (int i = 0; i < pp->tim->nops; i++)
        if (pp->tim->ops[i].fused_into > 0) {
            dup++;
            CHECK_EQ_INT(pp->tim->ops[i].hbm_bytes, 0);
            CHECK_NEAR(pp->tim->ops[i].time_s, 0, 0);
        }
    /* the f32 convert is fused into both consumers (by the compile pipeline or by the model's finish):
     * no op that costs anything writes it */
    for (int i = 0; i < pp->tim->nops; i++) {
        const tim_op *t = &pp->tim->ops[i];
        if (t->fused_into > 0 || t->op->kind == CMP_CONTROL) continue;
        for (int k = 0; k < t->op->nout; k++)
            CHECK_MSG(pp->prog->values[t->op->out[k]].shape.dtype != TPU_F32 || pp->prog->values[t->op->out[k]].shape.rank != 3,
                      "op %s writes the f32 copy of x", t->root->name);
    }
    (void)dup;
    /* x (bf16) read once by the two sibling reductions, plus two tiny outputs */
    CHECK_MSG(pp->tim->hbm_bytes >= x_bytes && pp->tim->hbm_bytes < x_bytes + 65536, "HBM bytes %lld, x is %lld",
              (long long)pp->tim->hbm_bytes, (long long)x_bytes);
    tpu_profile_free(p);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* A chain of binary adds (a residual sum) read by three ops: the compile pipeline recomputes it in each (its
 * memory report), XLA computes it once (instruction_fusion.cc: not "effectively at most unary", operands larger
 * than the result), so the step reads the four inputs once and the sum three times, not the inputs three times. */
TEST(timing_binary_chain_computed_once)
{
    tpu_ctx *ctx = tpu_ctx_new();
    const char *hlo =
        "HloModule res\n"
        "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
        "ENTRY main {\n"
        "  a = bf16[2048,1024]{1,0} parameter(0)\n  b = bf16[2048,1024]{1,0} parameter(1)\n"
        "  c = bf16[2048,1024]{1,0} parameter(2)\n  d = bf16[2048,1024]{1,0} parameter(3)\n"
        "  w = bf16[1024,1024]{1,0} parameter(4)\n"
        "  ab = bf16[2048,1024]{1,0} add(a, b)\n  abc = bf16[2048,1024]{1,0} add(ab, c)\n"
        "  s = bf16[2048,1024]{1,0} add(abc, d)\n"
        "  y1 = bf16[2048,1024]{1,0} dot(s, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "  y2 = bf16[1024,1024]{1,0} dot(s, a), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
        "  sf = f32[2048,1024]{1,0} convert(s)\n  z = f32[] constant(0)\n"
        "  r = f32[1024]{0} reduce(sf, z), dimensions={0}, to_apply=add\n"
        "  ROOT t = (bf16[2048,1024]{1,0}, bf16[1024,1024]{1,0}, f32[1024]{0}) tuple(y1, y2, r)\n"
        "}\n";
    tpu_profile_opts o = {0};
    o.chip = "v3";
    tpu_module *m = NULL;
    tpu_profile *p = prof_opts(ctx, hlo, o, &m);
    REQUIRE(p);
    const prf_profile *pp = (const prf_profile *)p;
    double n = 2048.0 * 1024 * 2, wb = 1024.0 * 1024 * 2;
    /* the inputs once, the sum written once and read by the two other readers, a again (y2), w, the outputs;
     * or, when the compile pipeline writes the sum in its own fusion (the memory rule for a value two matmuls
     * read), read by all three: one more read of it. Either way not the inputs three times. */
    double want = 4 * n + n + 2 * n + n + wb + n + wb + 4096, own_fusion = want + n;
    double got = (double)pp->tim->hbm_bytes;
    CHECK_MSG(got <= own_fusion * 1.02 && got >= 0.98 * want, "HBM bytes %.4g, want %.4g..%.4g (recomputing the sum in "
              "every reader: %.4g)", got, want, own_fusion, 3 * 4 * n + n + wb + n + wb + 4096);
    tpu_profile_free(p);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

static const char *loop_hlo =
    "HloModule loop\n"
    "cond { p = (s32[], bf16[4096,4096]{1,0}) parameter(0)\n i = s32[] get-tuple-element(p), index=0\n"
    " n = s32[] constant(10)\n ROOT lt = pred[] compare(i, n), direction=LT }\n"
    "body { p = (s32[], bf16[4096,4096]{1,0}) parameter(0)\n i = s32[] get-tuple-element(p), index=0\n"
    " a = bf16[4096,4096]{1,0} get-tuple-element(p), index=1\n one = s32[] constant(1)\n j = s32[] add(i, one)\n"
    " c = bf16[4096,4096]{1,0} dot(a, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
    " ROOT r = (s32[], bf16[4096,4096]{1,0}) tuple(j, c) }\n"
    "ENTRY main { a = bf16[4096,4096]{1,0} parameter(0)\n z = s32[] constant(0)\n"
    " t = (s32[], bf16[4096,4096]{1,0}) tuple(z, a)\n"
    " w = (s32[], bf16[4096,4096]{1,0}) while(t), condition=cond, body=body\n"
    " ROOT o = bf16[4096,4096]{1,0} get-tuple-element(w), index=1 }\n";

TEST(timing_while_trip_counts)
{
    tpu_ctx *ctx = tpu_ctx_new();
    char *one = dot_hlo("bf16", 4096, 4096, 4096, NULL);
    double s1 = step_of(ctx, one, "v3"), s10 = step_of(ctx, loop_hlo, "v3");
    CHECK_MSG(s10 / s1 > 9.5 && s10 / s1 < 10.5, "10 trips: %g x one matmul", s10 / s1);
    tpu_profile_opts o = {0};
    o.chip = "v3";
    tpu_module *m = NULL;
    tpu_profile *p = prof_opts(ctx, loop_hlo, o, &m);
    REQUIRE(p);
    const prf_profile *pp = (const prf_profile *)p;
    int found = 0;
    for (int i = 0; i < pp->tim->nops; i++) {
        const tim_op *t = &pp->tim->ops[i];
        if (t->root->op == HLO_WHILE) {
            found = 1;
            CHECK(t->trip_known);
            CHECK_NEAR(t->trips, 10, 0);
        }
        if (t->root->op == HLO_DOT) CHECK_NEAR(t->count, 10, 0);
    }
    CHECK(found);
    CHECK_EQ_INT(pp->tim->unknown_trips, 0);
    tpu_profile_free(p);
    tpu_module_free(m);
    free(one);
    tpu_ctx_free(ctx);
}

/* Loops as a compiler's optimized program writes them, without backend_config: the counter starts from a
 * copied constant, the step is loop-invariant state, the increment is fused, and the condition may stop early
 * (and(converged, i < 7): its own bound, 7, is the count). */
static const char *loop_compiled_hlo =
    "HloModule w\n"
    "inc { p0 = s32[] parameter(0)\n p1 = s32[] parameter(1)\n ROOT a = s32[] add(p0, p1) }\n"
    "body { t = (s32[], f32[1024,1024], s32[], pred[]) parameter(0)\n i = s32[] get-tuple-element(t), index=0\n"
    " x = f32[1024,1024] get-tuple-element(t), index=1\n s = s32[] get-tuple-element(t), index=2\n"
    " f = pred[] get-tuple-element(t), index=3\n"
    " y = f32[1024,1024] dot(x, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
    " n = s32[] fusion(i, s), kind=kLoop, calls=inc\n"
    " ROOT r = (s32[], f32[1024,1024], s32[], pred[]) tuple(n, y, s, f) }\n"
    "cond { t = (s32[], f32[1024,1024], s32[], pred[]) parameter(0)\n i = s32[] get-tuple-element(t), index=0\n"
    " f = pred[] get-tuple-element(t), index=3\n k = s32[] constant(7)\n"
    " lt = pred[] compare(i, k), direction=LT\n ROOT a = pred[] and(f, lt) }\n"
    "ENTRY main { x = f32[1024,1024] parameter(0)\n z = s32[] constant(0)\n c = s32[] copy(z)\n"
    " one = s32[] constant(1)\n go = pred[] constant(true)\n"
    " t = (s32[], f32[1024,1024], s32[], pred[]) tuple(c, x, one, go)\n"
    " w = (s32[], f32[1024,1024], s32[], pred[]) while(t), condition=cond, body=body\n"
    " ROOT o = f32[1024,1024] get-tuple-element(w), index=1 }\n";

TEST(timing_while_trip_counts_without_backend_config)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_profile_opts o = {0};
    o.chip = "v5e";
    tpu_module *m = NULL;
    tpu_profile *p = prof_opts(ctx, loop_compiled_hlo, o, &m);
    REQUIRE(p);
    const prf_profile *pp = (const prf_profile *)p;
    int found = 0;
    for (int i = 0; i < pp->tim->nops; i++) {
        const tim_op *t = &pp->tim->ops[i];
        if (t->root->op == HLO_WHILE) {
            found = 1;
            CHECK(t->trip_known);
            CHECK_NEAR(t->trips, 7, 0);
        }
        if (t->root->op == HLO_DOT) CHECK_NEAR(t->count, 7, 0);
    }
    CHECK(found);
    CHECK_EQ_INT(pp->tim->unknown_trips, 0);
    tpu_profile_free(p);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

static char *allreduce_hlo(int group)
{
    char *s = malloc(2048), groups[512] = "";
    size_t n = 0;
    for (int g = 0; g < 32 / group; g++) {
        n += (size_t)snprintf(groups + n, sizeof groups - n, "%s{", g ? "," : "");
        for (int k = 0; k < group; k++) n += (size_t)snprintf(groups + n, sizeof groups - n, "%s%d", k ? "," : "", g * group + k);
        n += (size_t)snprintf(groups + n, sizeof groups - n, "}");
    }
    snprintf(s, 2048,
             "HloModule ar\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
             "ENTRY main { x = f32[4096,1024]{1,0} parameter(0)\n"
             " ROOT y = f32[4096,1024]{1,0} all-reduce(x), replica_groups={%s}, to_apply=add }\n",
             groups);
    return s;
}

/* Profiles of an all-reduce in groups of 2..32 on v3-32 (4x4 chips, 2 cores each, no wraparound): the bytes
 * one device sends are the ring's 2 (n-1)/n of the operand; the time follows the group's place on the torus
 * (docs/timing.md): a group that spans a second dimension gets that dimension's links too. */
TEST(timing_collectives_in_groups)
{
    tpu_ctx *ctx = tpu_ctx_new();
    double t[33] = {0};
    for (int g = 2; g <= 32; g *= 2) {
        char *h = allreduce_hlo(g);
        tpu_profile_opts o = {0};
        o.chip = "v3-32";
        tpu_module *m = NULL;
        tpu_profile *p = prof_opts(ctx, h, o, &m);
        free(h);
        if (!p) continue;
        if (g == 32) CHECK_EQ_STR(tpu_profile_bound(p), "collective");
        const prf_profile *pp = (const prf_profile *)p;
        for (int i = 0; i < pp->tim->nops; i++) t[g] += pp->tim->ops[i].ici_s;
        double bytes = 4096.0 * 1024 * 4;
        CHECK_NEAR((double)pp->tim->ici_bytes, 2.0 * (g - 1) / g * bytes, 2);
        tpu_profile_free(p);
        tpu_module_free(m);
    }
    /* 2: the two cores of one chip (on-chip only); 4 and 8: a line of 2 and 4 chips along x; 16: 4x2 chips;
     * 32: 4x4 chips */
    CHECK_MSG(t[2] < t[4] && t[4] < t[8], "along one line: %g %g %g s", t[2], t[4], t[8]);
    CHECK_MSG(t[16] < t[8], "a second dimension adds links: 16 devices %g s, 8 devices %g s", t[16], t[8]);
    CHECK_MSG(t[32] > t[16], "4x4 vs 4x2 chips: %g s vs %g s", t[32], t[16]);
    tpu_ctx_free(ctx);
}

/* The model's formulas (docs/timing.md "Collectives") on the real topologies, against the chip table. */
TEST(timing_collectives_follow_the_topology)
{
    tpu_ctx *ctx = tpu_ctx_new();
    chp_slice pod, half, line4, ms;
    REQUIRE_OK(ctx, chp_slice_parse(ctx, "v2-512", &pod));     /* 16x16 chips, wraparound both ways */
    REQUIRE_OK(ctx, chp_slice_parse(ctx, "v2-256", &half));    /* 8x16: the 16 side wraps around, the 8 does not */
    REQUIRE_OK(ctx, chp_slice_parse(ctx, "v4-32", &line4));    /* 2x2x4: a mesh, no wraparound */
    REQUIRE_OK(ctx, chp_slice_parse(ctx, "2xv5p-128", &ms));   /* two 4x4x4 cubes over the data-center network */
    CHECK(pod.wrap[0] && pod.wrap[1] && !half.wrap[0] && half.wrap[1]);
    tim_coll_geom g;
    tim_coll_cost c;
    double V = 100e6, link = pod.chip.ici_link_bw, hbm_core = pod.chip.hbm_bw / 2;
    /* the full v2 pod: 2 rings of 16, both directions, then the two cores of each chip */
    tim_coll_geometry(&pod, NULL, pod.devices, &g);
    CHECK(g.size[0] == 16 && g.size[1] == 16 && g.ring[0] && g.ring[1] && g.cores == 2 && g.slices == 1);
    tim_coll_cost_of(&pod, HLO_ALL_REDUCE, &g, V, &c);
    double want = 2 * (V * 255 / 256 / (2 * 2 * link) + V * 0.5 / hbm_core);
    CHECK_NEAR(c.time_s, want, want * 1e-9);
    CHECK_EQ_INT(c.hops, 16);
    /* half a pod: a line of 8 (one way) and a ring of 16 (both ways): slower for the same bytes */
    tim_coll_geometry(&half, NULL, half.devices, &g);
    CHECK(!g.ring[0] && g.ring[1]);
    tim_coll_cost_of(&half, HLO_ALL_REDUCE, &g, V, &c);
    want = 2 * (V * 127 / 128 / (3 * link) + V * 0.5 / hbm_core);
    CHECK_NEAR(c.time_s, want, want * 1e-9);
    CHECK_EQ_INT(c.hops, 7 + 8);
    /* kinds on the pod's rings: all-gather = half an all-reduce; all-to-all a quarter of an all-gather */
    tim_coll_geometry(&pod, NULL, pod.devices, &g);
    tim_coll_cost ar, ag, a2a, cp;
    tim_coll_cost_of(&pod, HLO_ALL_REDUCE, &g, V, &ar);
    tim_coll_cost_of(&pod, HLO_ALL_GATHER, &g, V, &ag);
    tim_coll_cost_of(&pod, HLO_ALL_TO_ALL, &g, V, &a2a);
    tim_coll_cost_of(&pod, HLO_COLLECTIVE_PERMUTE, &g, V, &cp);
    CHECK_NEAR(ag.time_s * 2, ar.time_s, ar.time_s * 1e-9);
    CHECK_NEAR(a2a.time_s * 4, ag.time_s, ag.time_s * 1e-9);
    CHECK_NEAR(cp.time_s, V / link + 1e-6, 1e-12);
    /* small messages are latency-bound: 1 us per hop of the longest path, twice for an all-reduce */
    tim_coll_cost_of(&pod, HLO_ALL_REDUCE, &g, 64, &c);
    CHECK_NEAR(c.time_s, 2 * 16e-6 + 2 * 64 * 0.5 / hbm_core, 1e-12);
    /* a group along one side of a v4 mesh: 4 chips in a line */
    int col[4] = {0, 4, 8, 12};   /* 2x2x4: x,y steps of 1 and 2; chips 0,4,8,12 share x=y=0 */
    tim_coll_geometry(&line4, col, 4, &g);
    CHECK(g.size[0] == 1 && g.size[1] == 1 && g.size[2] == 4 && !g.ring[2] && g.cores == 1);
    tim_coll_cost_of(&line4, HLO_ALL_GATHER, &g, V, &c);
    CHECK_NEAR(c.time_s, V * 3 / 4 / line4.chip.ici_link_bw, 1e-12);
    /* multislice: the data-center network on the in-slice shard, each chip's share of its host's link */
    tim_coll_geometry(&ms, NULL, ms.devices, &g);
    CHECK(g.slices == 2 && g.size[0] == 4 && g.ring[0] && g.ring[1] && g.ring[2]);
    tim_coll_cost_of(&ms, HLO_ALL_REDUCE, &g, V, &c);
    double dcn_chip = ms.chip.dcn_host_bw / ms.chip.chips_per_host_multi;
    CHECK_NEAR(c.dcn_s, 2 * (V / 64) * 0.5 / dcn_chip, 1e-12);
    CHECK(c.dcn_s > 0 && c.time_s > c.ici_s);
    chp_slice one;
    REQUIRE_OK(ctx, chp_slice_parse(ctx, "v5p-256", &one));
    tim_coll_geometry(&one, NULL, one.devices, &g);
    tim_coll_cost ones;
    tim_coll_cost_of(&one, HLO_ALL_REDUCE, &g, V, &ones);
    CHECK_MSG(c.time_s > ones.time_s, "two slices over DCN (%g s) should be slower than one slice of as many chips (%g s)",
              c.time_s, ones.time_s);
    /* slices that cannot be joined, and a nonsense count */
    CHECK(chp_slice_parse(ctx, "2xv3-32", &one) == TPU_ERR_INVALID);
    CHECK(strstr(tpu_errmsg(ctx), "Multislice runs on v4 and later") != NULL);
    CHECK(chp_slice_parse(ctx, "0xv4-8", &one) == TPU_ERR_INVALID);
    tpu_ctx_free(ctx);
}

/* A tiny program is launch-bound; steps per execution pay the round trip once per K steps. */
TEST(timing_steps_per_exec_amortises_launches)
{
    tpu_ctx *ctx = tpu_ctx_new();
    char *h = dot_hlo("bf16", 128, 128, 128, NULL);
    tpu_profile_opts o = {0};
    o.chip = "v4-8";
    tpu_module *m1 = NULL, *m2 = NULL;
    tpu_profile *p1 = prof_opts(ctx, h, o, &m1);
    o.steps_per_exec = 32;
    tpu_profile *p32 = prof_opts(ctx, h, o, &m2);
    REQUIRE(p1 && p32);
    const prf_profile *a = (const prf_profile *)p1, *b = (const prf_profile *)p32;
    double launch = a->topts.launch_s > 0 ? a->topts.launch_s : 30e-6;
    CHECK_NEAR(a->tim->host_s, launch, 1e-12);
    CHECK_NEAR(b->tim->host_s, launch / 32, 1e-12);
    CHECK_NEAR(tpu_profile_step_time(p1) - tpu_profile_step_time(p32), launch * 31 / 32, 1e-12);
    CHECK_EQ_STR(tpu_profile_bound(p1), "host");
    /* the advisor predicts the K=32 step by re-running the model */
    const char *adv = tpu_profile_advice(p1);
    REQUIRE(adv);
    CHECK_MSG(strstr(adv, "steps_per_execution") && strstr(adv, "Predicted"), "advice: %s", adv);
    char want[64];
    snprintf(want, sizeof want, "%.3g us instead", tpu_profile_step_time(p32) * 1e6);
    CHECK_MSG(strstr(adv, want), "advice should predict %s: %s", want, adv);
    tpu_profile_free(p1);
    tpu_profile_free(p32);
    tpu_module_free(m1);
    tpu_module_free(m2);
    free(h);
    tpu_ctx_free(ctx);
}

/* When the host delivers fewer samples per second than the device consumes, the device idles. */
TEST(timing_input_bound_detection)
{
    tpu_ctx *ctx = tpu_ctx_new();
    char *h = dot_hlo("bf16", 4096, 4096, 4096, NULL);
    tpu_profile_opts o = {0};
    o.chip = "v3-8";
    o.batch = 4096;
    tpu_module *m0 = NULL, *m1 = NULL, *m2 = NULL;
    tpu_profile *p0 = prof_opts(ctx, h, o, &m0);
    REQUIRE(p0);
    double dev = tpu_profile_step_time(p0);   /* no input limit */
    double consume = 4096 / dev;              /* samples/s the device takes */
    o.input_rate = consume * 4;               /* fast host: not input-bound */
    tpu_profile *fast = prof_opts(ctx, h, o, &m1);
    o.input_rate = consume / 4;               /* slow host: the device waits 3/4 of the step */
    tpu_profile *slow = prof_opts(ctx, h, o, &m2);
    REQUIRE(fast && slow);
    CHECK_NEAR(tpu_profile_step_time(fast), dev, 1e-12);
    CHECK(strcmp(tpu_profile_bound(fast), "idle"));
    CHECK_NEAR(tpu_profile_step_time(slow), 4 * dev, 1e-9 * dev);
    CHECK_EQ_STR(tpu_profile_bound(slow), "idle");
    const prf_profile *ps = (const prf_profile *)slow;
    CHECK_NEAR(ps->tim->idle_s / ps->tim->step_s, 0.75, 1e-9);
    CHECK(strstr(tpu_profile_summary(slow, 5), "INPUT-BOUND") != NULL);
    const char *j = tpu_profile_json(slow);
    CHECK(j && strstr(j, "\"input_bound\":\ttrue"));
    const char *adv = tpu_profile_advice(slow);
    CHECK(adv && strstr(adv, "input pipeline is the bottleneck") && strstr(adv, "(4.00x faster)"));
    tpu_profile_free(p0);
    tpu_profile_free(fast);
    tpu_profile_free(slow);
    tpu_module_free(m0);
    tpu_module_free(m1);
    tpu_module_free(m2);
    free(h);
    tpu_ctx_free(ctx);
}

/* The mixed_bfloat16 advice comes from profiling the rewritten program. */
TEST(timing_advice_mixed_bfloat16)
{
    tpu_ctx *ctx = tpu_ctx_new();
    char *h = dot_hlo("f32", 8192, 8192, 8192, "{highest, highest}");
    tpu_profile_opts o = {0};
    o.chip = "v5e";
    tpu_module *m = NULL, *m2 = NULL;
    tpu_profile *p = prof_opts(ctx, h, o, &m);
    REQUIRE(p);
    o.policy = "mixed_bfloat16";
    tpu_profile *q = prof_opts(ctx, h, o, &m2);
    REQUIRE(q);
    CHECK(tpu_profile_step_time(q) < tpu_profile_step_time(p) / 3);
    const char *adv = tpu_profile_advice(p);
    REQUIRE(adv);
    char want[64];
    snprintf(want, sizeof want, "step %.3g ms instead", tpu_profile_step_time(q) * 1e3);
    CHECK_MSG(strstr(adv, "mixed bfloat16") && strstr(adv, want), "want '%s' in: %s", want, adv);
    tpu_profile_free(p);
    tpu_profile_free(q);
    tpu_module_free(m);
    tpu_module_free(m2);
    free(h);
    tpu_ctx_free(ctx);
}

/* Bad options are errors that name the problem. */
TEST(timing_bad_chip)
{
    tpu_ctx *ctx = tpu_ctx_new();
    char *h = dot_hlo("bf16", 8, 8, 8, NULL);
    tpu_module *m = parse(ctx, h);
    REQUIRE(m);
    tpu_profile_opts o = {0};
    o.chip = "v9-8";
    tpu_profile *p = NULL;
    CHECK(tpu_profile_program(ctx, m, &o, &p) != TPU_OK);
    CHECK(p == NULL);
    CHECK(strstr(tpu_errmsg(ctx), "v9") != NULL);
    tpu_module_free(m);
    free(h);
    tpu_ctx_free(ctx);
}

/* Programs dumped after optimization: fusion instructions are costed as XLA fused them (their bodies' dots,
 * one op's traffic), without tpusim's own fusion finish. */
TEST(timing_optimized_fusions)
{
    tpu_ctx *ctx = tpu_ctx_new();
    const char *hlo =
        "HloModule opt\n"
        "fused_dot {\n"
        "  p0 = bf16[2048,1024]{1,0} parameter(0)\n"
        "  p1 = bf16[1024,1024]{1,0} parameter(1)\n"
        "  d = f32[2048,1024]{1,0} dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "  ROOT c = bf16[2048,1024]{1,0} convert(d)\n"
        "}\n"
        "fused_relu {\n"
        "  q = bf16[2048,1024]{1,0} parameter(0)\n"
        "  z = bf16[] constant(0)\n"
        "  zb = bf16[2048,1024]{1,0} broadcast(z), dimensions={}\n"
        "  ROOT r = bf16[2048,1024]{1,0} maximum(q, zb)\n"
        "}\n"
        "ENTRY main {\n"
        "  x = bf16[2048,1024]{1,0} parameter(0)\n"
        "  w = bf16[1024,1024]{1,0} parameter(1)\n"
        "  f = bf16[2048,1024]{1,0} fusion(x, w), kind=kOutput, calls=fused_dot\n"
        "  ROOT g = bf16[2048,1024]{1,0} fusion(f), kind=kLoop, calls=fused_relu\n"
        "}\n";
    tpu_profile_opts o = {0};
    o.chip = "v4";
    tpu_module *m = NULL;
    tpu_profile *p = prof_opts(ctx, hlo, o, &m);
    REQUIRE(p);
    const prf_profile *pp = (const prf_profile *)p;
    CHECK_NEAR(pp->tim->flops, 2.0 * 2048 * 1024 * 1024 + 2048.0 * 1024, 2048.0 * 1024);
    int fusions = 0;
    for (int i = 0; i < pp->tim->nops; i++) {
        const tim_op *t = &pp->tim->ops[i];
        if (t->root->op != HLO_FUSION) continue;
        fusions++;
        CHECK_EQ_INT(t->fused_into, 0);   /* XLA's fusion decisions stand */
        CHECK(t->hbm_bytes > 0 && t->time_s > 0);
    }
    CHECK_EQ_INT(fusions, 2);
    tpu_profile_free(p);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* A transcendental chain on an array whose dimensions are all small: whatever layout the compiler picks,
 * its two minor dimensions (5,5) fill 25 of the 1024 slots of an (8,128) register. (An f32[65536,3] chain
 * would not do: the compiler lays it out with the 65536 minor.) */
TEST(timing_advice_vector_lanes)
{
    tpu_ctx *ctx = tpu_ctx_new();
    char hlo[4096];
#define VL_SHAPE "f32[5,5,5,5,5,5,5]"
    size_t n = (size_t)snprintf(hlo, sizeof hlo, "HloModule v\nENTRY main {\n  x0 = " VL_SHAPE " parameter(0)\n");
    for (int i = 1; i <= 12; i++)
        n += (size_t)snprintf(hlo + n, sizeof hlo - n, "  x%d = " VL_SHAPE " exponential(x%d)\n", i, i - 1);
    snprintf(hlo + n, sizeof hlo - n, "  ROOT y = " VL_SHAPE " negate(x12)\n}\n");
#undef VL_SHAPE
    tpu_profile_opts o = {0};
    o.chip = "v5e";
    tpu_module *m = NULL;
    tpu_profile *p = prof_opts(ctx, hlo, o, &m);
    REQUIRE(p);
    CHECK_EQ_STR(tpu_profile_bound(p), "vector");
    const char *adv = tpu_profile_advice(p);
    REQUIRE(adv);
    CHECK_MSG(strstr(adv, "computes padding lanes") && strstr(adv, "uses 2.4% of its lanes"), "advice: %s", adv);
    tpu_profile_free(p);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* The TPU's linear-algebra custom-calls are timed by their textbook FLOPs (LU 2/3 n^3, QR 4/3 n^3 for a
 * square matrix, Q from its reflectors 4/3 n^3, eigh 9 n^3): trailing updates on the MXU at f32 precision, the
 * 128-column panels on the vector unit (n^2 work per panel column): doubling n costs between 4x (panels; a little
 * less with the pipeline's exposed transfers) and 8x (MXU updates). */
TEST(timing_linalg_custom_calls)
{
    static const struct { const char *target, *result; double per_n3; } cc[] = {
        {"LuDecomposition", "(f32[%d,%d], s32[%d], s32[%d])", 2.0 / 3.0},
        {"Qr", "(f32[%d,%d], f32[%d])", 4.0 / 3.0},
        {"Eigh", "(f32[%d,%d], f32[%d])", 9.0},
    };
    tpu_ctx *ctx = tpu_ctx_new();
    for (size_t c = 0; c < sizeof cc / sizeof *cc; c++) {
        double prev = 0;
        for (int n = 1024; n <= 8192; n *= 2) {
            char res[128], h[512];
            snprintf(res, sizeof res, cc[c].result, n, n, n, n);
            snprintf(h, sizeof h, "HloModule la\nENTRY e {\n  a = f32[%d,%d] parameter(0)\n  ROOT r = %s custom-call(a), "
                     "custom_call_target=\"%s\"\n}\n", n, n, res, cc[c].target);
            tpu_profile_opts o = {0};
            o.chip = "v5e";
            tpu_module *m = NULL;
            tpu_profile *p = prof_opts(ctx, h, o, &m);
            if (!p) continue;
            const tim_op *t = first_mxu_op(p);
            double n3 = (double)n * n * n;
            CHECK_MSG(t && fabs(t->flops / (cc[c].per_n3 * n3) - 1) < 0.01, "%s %d: %g FLOPs", cc[c].target, n,
                      t ? t->flops : -1);
            double s = t ? t->time_s - t->overhead_s : 0;
            if (prev > 0) CHECK_MSG(s > 3.5 * prev && s < 8.5 * prev, "%s: %d^3 takes %g s, half the size %g s",
                                    cc[c].target, n, s, prev);
            prev = s;
            tpu_profile_free(p);
            tpu_module_free(m);
        }
    }
    tpu_ctx_free(ctx);
}

/* A reduce-window sliding by one over (almost) a whole row is a cumulative op (jax's cummax): the compiler runs
 * it as a prefix computation, log2(window) steps per element, not window of them (a 2047-wide window over rows
 * of 2048 costs about 11/3 of a 3-wide one, not 682x). */
TEST(timing_cumulative_reduce_window)
{
    static const char *fmt =
        "HloModule rw\nmax { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT m = f32[] maximum(a, b) }\n"
        "ENTRY e {\n  x = f32[1024,2048] parameter(0)\n  c = f32[] constant(-inf)\n"
        "  ROOT r = f32[1024,2048] reduce-window(x, c), window={size=1x%d pad=0_0x%d_0}, to_apply=max\n}\n";
    tpu_ctx *ctx = tpu_ctx_new();
    double vpu[2] = {0, 0};
    int widths[2] = {3, 2047};
    for (int k = 0; k < 2; k++) {
        char h[512];
        snprintf(h, sizeof h, fmt, widths[k], widths[k] - 1);
        tpu_profile_opts o = {0};
        o.chip = "v5e";
        tpu_module *m = NULL;
        tpu_profile *p = prof_opts(ctx, h, o, &m);
        if (!p) continue;
        const prf_profile *pp = (const prf_profile *)p;
        for (int i = 0; i < pp->tim->nops; i++)
            if (pp->tim->ops[i].root->op == HLO_REDUCE_WINDOW) vpu[k] = pp->tim->ops[i].vpu_s;
        tpu_profile_free(p);
        tpu_module_free(m);
    }
    CHECK_MSG(vpu[0] > 0 && vpu[1] > 2 * vpu[0] && vpu[1] < 6 * vpu[0], "window 3: %g s, window 2047: %g s", vpu[0], vpu[1]);
    tpu_ctx_free(ctx);
}

/* A compiled program's fusion whose root is a dynamic-update-slice of one of its parameters updates that buffer
 * in place: it reads and writes the window (and what the update needs), not the whole buffer. */
TEST(timing_fused_dynamic_update_slice_in_place)
{
    static const char *h =
        "HloModule d, is_scheduled=true\n"
        "f { b = f32[4096,1024]{1,0:T(8,128)} parameter(0)\n u = f32[64,1024]{1,0:T(8,128)} parameter(1)\n"
        " i = s32[]{:T(256)} parameter(2)\n z = s32[]{:T(256)} constant(0)\n"
        " t = f32[64,1024]{1,0:T(8,128)} tanh(u)\n"
        " ROOT r = f32[4096,1024]{1,0:T(8,128)} dynamic-update-slice(b, t, i, z) }\n"
        "ENTRY e {\n  b = f32[4096,1024]{1,0:T(8,128)} parameter(0)\n  u = f32[64,1024]{1,0:T(8,128)} parameter(1)\n"
        "  i = s32[]{:T(256)} parameter(2)\n"
        "  ROOT r = f32[4096,1024]{1,0:T(8,128)} fusion(b, u, i), kind=kLoop, calls=f\n}\n";
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_profile_opts o = {0};
    o.chip = "v5e";
    tpu_module *m = NULL;
    tpu_profile *p = prof_opts(ctx, h, o, &m);
    REQUIRE(p);
    const prf_profile *pp = (const prf_profile *)p;
    int64_t bytes = -1;
    for (int i = 0; i < pp->tim->nops; i++)
        if (pp->tim->ops[i].root->op == HLO_FUSION) bytes = pp->tim->ops[i].hbm_bytes;
    /* the update read (256 KiB), the window read in place and written (256 KiB each), the index: under 1 MiB,
     * where the whole buffer read and written would be 32 MiB */
    CHECK_MSG(bytes > 0 && bytes < (1 << 20), "the fusion moves %lld bytes", (long long)bytes);
    tpu_profile_free(p);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* ---- overlap of collectives with compute (docs/timing.md "Overlap", src/timing/overlap.c) ---- */

#define OVL_HEAD "HloModule ovl, replica_count=8\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"

/* The model of `text` on v5e-8 (8 devices, all-reduces over all of them); NULL on failure. */
static tpu_profile *ovl_prof(tpu_ctx *ctx, const char *text, tpu_module **m)
{
    tpu_profile_opts o = {0};
    o.chip = "v5e-8";
    return prof_opts(ctx, text, o, m);
}

/* Time of the op whose root is `name` (one execution), or -1. */
static double ovl_op_s(const tpu_profile *p, const char *name)
{
    const tim_result *r = ((const prf_profile *)p)->tim;
    for (int i = 0; i < r->nops; i++)
        if (!strcmp(r->ops[i].root->name, name)) return r->ops[i].time_s;
    return -1;
}

static double ovl_sum_s(const tpu_profile *p)
{
    const tim_result *r = ((const prf_profile *)p)->tim;
    double s = 0;
    for (int i = 0; i < r->nops; i++)
        if (r->ops[i].op->kind != CMP_CONTROL) s += r->ops[i].time_s * r->ops[i].count;
    return s;
}

/* A collective the next op needs, fed by the op before it: nothing runs beside it. */
TEST(timing_overlap_dependent_collective_hides_nothing)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    tpu_profile *p = ovl_prof(ctx, OVL_HEAD
        "ENTRY main { x = f32[1024,1024]{1,0} parameter(0)\n w = f32[1024,1024]{1,0} parameter(1)\n"
        " d = f32[1024,1024]{1,0} dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        " ar = f32[1024,1024]{1,0} all-reduce(d), replica_groups={}, to_apply=add\n"
        " ROOT e = f32[1024,1024]{1,0} dot(ar, w), lhs_contracting_dims={1}, rhs_contracting_dims={0} }\n", &m);
    REQUIRE(p);
    const tim_result *r = ((const prf_profile *)p)->tim;
    CHECK(ovl_op_s(p, "ar") > 0 && ovl_op_s(p, "d") > 0);
    CHECK_NEAR(r->collective_hidden_s, 0, 0);
    CHECK_NEAR(r->device_s, ovl_sum_s(p), 1e-12);
    tpu_profile_free(p);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* An all-reduce beside matmuls that neither feed it nor read it hides up to their time; a matmul that feeds
 * it or waits for it does not count, and each matmul's time serves one collective. */
TEST(timing_overlap_beside_independent_matmuls)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    /* one small all-reduce beside two matmuls: hidden entirely */
    tpu_profile *p = ovl_prof(ctx, OVL_HEAD
        "ENTRY main { g = f32[256,1024]{1,0} parameter(0)\n x = f32[2048,2048]{1,0} parameter(1)\n"
        " ar = f32[256,1024]{1,0} all-reduce(g), replica_groups={}, to_apply=add\n"
        " m1 = f32[2048,2048]{1,0} dot(x, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        " m2 = f32[2048,2048]{1,0} dot(m1, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        " ROOT t = (f32[256,1024]{1,0}, f32[2048,2048]{1,0}) tuple(ar, m2) }\n", &m);
    REQUIRE(p);
    double ar = ovl_op_s(p, "ar"), mm = ovl_op_s(p, "m1") + ovl_op_s(p, "m2");
    CHECK_MSG(ar > 0 && ar < mm, "all-reduce %g s, matmuls %g s", ar, mm);
    CHECK_NEAR(((const prf_profile *)p)->tim->collective_hidden_s, ar, 1e-12);
    tpu_profile_free(p);
    tpu_module_free(m);
    /* a large all-reduce beside one matmul (and one that waits for it): hidden up to that matmul's time */
    p = ovl_prof(ctx, OVL_HEAD
        "ENTRY main { g = f32[8192,2048]{1,0} parameter(0)\n x = f32[1024,1024]{1,0} parameter(1)\n"
        " ar = f32[8192,2048]{1,0} all-reduce(g), replica_groups={}, to_apply=add\n"
        " m1 = f32[1024,1024]{1,0} dot(x, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        " s = f32[1024,2048]{1,0} slice(ar), slice={[0:1024], [0:2048]}\n"
        " m2 = f32[1024,2048]{1,0} dot(m1, s), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        " ROOT t = (f32[8192,2048]{1,0}, f32[1024,2048]{1,0}) tuple(ar, m2) }\n", &m);
    REQUIRE(p);
    ar = ovl_op_s(p, "ar");
    mm = ovl_op_s(p, "m1");
    CHECK_MSG(ar > mm && mm > 0, "all-reduce %g s, matmul %g s", ar, mm);
    CHECK_NEAR(((const prf_profile *)p)->tim->collective_hidden_s, mm, 1e-12);
    tpu_profile_free(p);
    tpu_module_free(m);
    /* two all-reduces (different groups: not combined) beside one matmul share its time */
    p = ovl_prof(ctx, OVL_HEAD
        "ENTRY main { g = f32[2048,1024]{1,0} parameter(0)\n x = f32[4096,1024]{1,0} parameter(1)\n"
        " y = f32[1024,4096]{1,0} parameter(2)\n"
        " a1 = f32[2048,1024]{1,0} all-reduce(g), replica_groups={{0,1,2,3},{4,5,6,7}}, to_apply=add\n"
        " a2 = f32[2048,1024]{1,0} all-reduce(g), replica_groups={{0,1},{2,3},{4,5},{6,7}}, to_apply=add\n"
        " m1 = f32[4096,4096]{1,0} dot(x, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        " ROOT t = (f32[2048,1024]{1,0}, f32[2048,1024]{1,0}, f32[4096,4096]{1,0}) tuple(a1, a2, m1) }\n", &m);
    REQUIRE(p);
    double a1 = ovl_op_s(p, "a1"), a2 = ovl_op_s(p, "a2");
    mm = ovl_op_s(p, "m1");
    CHECK_MSG(a1 < mm && a2 < mm && a1 + a2 > mm, "all-reduces %g and %g s, matmul %g s", a1, a2, mm);
    CHECK_NEAR(((const prf_profile *)p)->tim->collective_hidden_s, mm, 1e-12);
    tpu_profile_free(p);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* Combining joins independent all-reduces only: one that reads another's result stays apart (a combined
 * collective starts when all its operands are ready, which would be after itself). */
TEST(timing_combine_only_independent_collectives)
{
    tpu_ctx *ctx = tpu_ctx_new();
    const char *indep = OVL_HEAD
        "ENTRY main { g = f32[256,256]{1,0} parameter(0)\n h = f32[256,256]{1,0} parameter(1)\n"
        " a1 = f32[256,256]{1,0} all-reduce(g), replica_groups={}, to_apply=add\n"
        " a2 = f32[256,256]{1,0} all-reduce(h), replica_groups={}, to_apply=add\n"
        " ROOT t = (f32[256,256]{1,0}, f32[256,256]{1,0}) tuple(a1, a2) }\n";
    const char *dep = OVL_HEAD
        "ENTRY main { g = f32[256,256]{1,0} parameter(0)\n h = f32[256,256]{1,0} parameter(1)\n"
        " a1 = f32[256,256]{1,0} all-reduce(g), replica_groups={}, to_apply=add\n"
        " s = f32[256,256]{1,0} multiply(a1, h)\n"
        " a2 = f32[256,256]{1,0} all-reduce(s), replica_groups={}, to_apply=add\n"
        " ROOT t = (f32[256,256]{1,0}, f32[256,256]{1,0}) tuple(a1, a2) }\n";
    const char *texts[2] = {indep, dep};
    for (int k = 0; k < 2; k++) {
        tpu_module *m = NULL;
        tpu_profile *p = ovl_prof(ctx, texts[k], &m);
        if (!p) continue;
        const tim_result *r = ((const prf_profile *)p)->tim;
        int combined = 0, n = 0;
        for (int i = 0; i < r->nops; i++) {
            if (r->ops[i].root->op != HLO_ALL_REDUCE) continue;
            n++;
            combined += r->ops[i].combined;
        }
        CHECK_EQ_INT(n, 2);
        CHECK_MSG(combined == (k == 0), "%s: %d combined", k ? "dependent" : "independent", combined);
        tpu_profile_free(p);
        tpu_module_free(m);
    }
    tpu_ctx_free(ctx);
}

/* A scan over layers (8 trips): each iteration all-gathers its layer's weights (a dynamic-slice of the
 * stacked weights by the counter) and multiplies the carried activation by them. Within one iteration the
 * matmul waits for the gather; in the loop's steady state the next iteration's gather runs under this
 * iteration's matmul (XLA's collective pipeliner): all but the first hide (the first only behind the counter's
 * increment). An all-reduce of the carried activation instead (each iteration's input is the previous one's
 * output) hides only behind the ops that do not touch the activation: the counter and the weights' copy. */
static const char *ovl_scan_hlo(int gather_weights)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, OVL_HEAD
        "cond { p = (s32[], f32[8192,512]{1,0}, f32[8,64,512]{2,1,0}) parameter(0)\n"
        " i = s32[] get-tuple-element(p), index=0\n n = s32[] constant(8)\n"
        " ROOT c = pred[] compare(i, n), direction=LT }\n"
        "body { p = (s32[], f32[8192,512]{1,0}, f32[8,64,512]{2,1,0}) parameter(0)\n"
        " i = s32[] get-tuple-element(p), index=0\n x = f32[8192,512]{1,0} get-tuple-element(p), index=1\n"
        " ws = f32[8,64,512]{2,1,0} get-tuple-element(p), index=2\n z = s32[] constant(0)\n"
        " s = f32[1,64,512]{2,1,0} dynamic-slice(ws, i, z, z), dynamic_slice_sizes={1,64,512}\n"
        " r = f32[64,512]{1,0} reshape(s)\n"
        "%s"
        " y = f32[8192,512]{1,0} dot(%s, g), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        " one = s32[] constant(1)\n i2 = s32[] add(i, one)\n"
        " ROOT t = (s32[], f32[8192,512]{1,0}, f32[8,64,512]{2,1,0}) tuple(i2, y, ws) }\n"
        "ENTRY main { x = f32[8192,512]{1,0} parameter(0)\n ws = f32[8,64,512]{2,1,0} parameter(1)\n"
        " z = s32[] constant(0)\n"
        " t = (s32[], f32[8192,512]{1,0}, f32[8,64,512]{2,1,0}) tuple(z, x, ws)\n"
        " w = (s32[], f32[8192,512]{1,0}, f32[8,64,512]{2,1,0}) while(t), condition=cond, body=body\n"
        " ROOT y = f32[8192,512]{1,0} get-tuple-element(w), index=1 }\n",
        gather_weights ? " g = f32[512,512]{1,0} all-gather(r), dimensions={0}, replica_groups={}\n"
                       : " g = f32[512,512]{1,0} concatenate(r, r, r, r, r, r, r, r), dimensions={0}\n"
                         " ax = f32[8192,512]{1,0} all-reduce(x), replica_groups={}, to_apply=add\n",
        gather_weights ? "x" : "ax");
    return buf;
}

TEST(timing_overlap_loop_steady_state)
{
    tpu_ctx *ctx = tpu_ctx_new();
    for (int k = 0; k < 2; k++) {
        tpu_module *m = NULL;
        tpu_profile *p = ovl_prof(ctx, ovl_scan_hlo(k == 0), &m);
        if (!p) continue;
        const tim_result *r = ((const prf_profile *)p)->tim;
        double coll = 0, other = 0;
        for (int i = 0; i < r->nops; i++) {
            const tim_op *t = &r->ops[i];
            if (t->op->kind == CMP_CONTROL || strcmp(t->root->parent->name, "body")) continue;
            if (t->root->op == HLO_ALL_GATHER || t->root->op == HLO_ALL_REDUCE) coll += t->time_s;
            else other += t->time_s;
            CHECK_NEAR(t->count, 8, 0);
        }
        double inc = ovl_op_s(p, "i2"), copy = ovl_op_s(p, "g");
        CHECK_MSG(coll > 0 && inc > 0 && inc < coll, "%g s of collectives, %g s of other ops per iteration", coll, other);
        if (k == 0) {
            CHECK(coll < other);
            CHECK_NEAR(r->collective_hidden_s, 7 * coll + inc, 1e-9 * coll);
        } else {
            CHECK_NEAR(r->collective_hidden_s, 8 * (inc + copy), 1e-9 * coll);
        }
        tpu_profile_free(p);
        tpu_module_free(m);
    }
    tpu_ctx_free(ctx);
}
