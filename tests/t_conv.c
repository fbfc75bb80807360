/* t_conv.c — the convolution kernel against its reference: random dim_labels, windows (stride, negative and
 * asymmetric padding, lhs/rhs dilation, reversal), feature groups (depthwise included) and batch groups,
 * 0-3 spatial dims; the shapes of a MobileNetV2 train step in miniature (forward, input and weight
 * gradients); every dtype family; both fast paths (implicit GEMM with its orientations and split reductions,
 * direct); TPU numerics; thread-count independence; shape errors; the kernel behind tpu_run. */
#include "mxu_test.h"
#include "util/fp.h"

#define CT_TEXT 4096

/* Shuffles the characters of s. */
static void ct_shuffle(mxt_rng *r, char *s)
{
    for (int i = (int)strlen(s) - 1; i > 0; i--) {
        int j = (int)mxt_int(r, 0, i);
        char t = s[i];
        s[i] = s[j];
        s[j] = t;
    }
}

/* Appends to a string buffer. */
static void ct_cat(char *b, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void ct_cat(char *b, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t l = strlen(b);
    vsnprintf(b + l, n - l, fmt, ap);
    va_end(ap);
}

/* A random convolution (mode 0 plain, 1 feature groups, 2 depthwise, 3 batch groups). Writes the module
 * text; returns the products per output element, or 0 when the draw has an empty output (caller redraws). */
static int64_t ct_random(mxt_rng *r, char *text, const char *xt, const char *wt, const char *ot, const char *extra, int mode,
                         int ns)
{
    int64_t G = 1, BG = 1, Cig, Cout, Nout = mxt_int(r, 1, 3);
    /* output features per group both at most 4 (the direct path) and above (the GEMM path) */
    if (mode == 0) Cig = mxt_int(r, 1, 6), Cout = mxt_int(r, 1, 12);
    else if (mode == 1) G = mxt_int(r, 2, 3), Cig = mxt_int(r, 1, 4), Cout = G * mxt_int(r, 1, 7);
    else if (mode == 2) G = mxt_int(r, 2, 6), Cig = 1, Cout = G * mxt_int(r, 1, 2);
    else BG = mxt_int(r, 2, 4), Cig = mxt_int(r, 1, 4), Cout = BG * mxt_int(r, 1, 7);
    int64_t S[3], K[3], O[3], st[3], lo[3], hi[3], ld[3], rd[3], rev[3];
    int64_t ovol = 1;
    for (int i = 0; i < ns; i++) {
        S[i] = mxt_int(r, 1, ns == 3 ? 5 : 9);
        K[i] = mxt_int(r, 1, 4);
        st[i] = mxt_int(r, 1, 3);
        ld[i] = mxt_int(r, 0, 3) == 0 ? mxt_int(r, 2, 3) : 1;
        rd[i] = mxt_int(r, 0, 3) == 0 ? mxt_int(r, 2, 3) : 1;
        lo[i] = mxt_int(r, -2, 3);
        hi[i] = mxt_int(r, -2, 3);
        rev[i] = mxt_int(r, 0, 3) == 0;
        int64_t padded = (S[i] - 1) * ld[i] + 1 + lo[i] + hi[i], span = (K[i] - 1) * rd[i] + 1;
        O[i] = padded < span ? 0 : (padded - span) / st[i] + 1;
        ovol *= O[i];
    }
    if (ovol == 0) return 0;
    char xl[16] = "bf", wl[16] = "io", yl[16] = "bf";
    for (int i = 0; i < ns; i++) {
        ct_cat(xl, sizeof xl, "%d", i);
        ct_cat(wl, sizeof wl, "%d", i);
        ct_cat(yl, sizeof yl, "%d", i);
    }
    ct_shuffle(r, xl);
    ct_shuffle(r, wl);
    ct_shuffle(r, yl);
    char xs[128] = "", ws[128] = "", ys[128] = "";
    for (int p = 0; p < ns + 2; p++) {
        char c = xl[p];
        ct_cat(xs, sizeof xs, "%s%lld", p ? "," : "", (long long)(c == 'b' ? Nout * BG : c == 'f' ? Cig * G : S[c - '0']));
        c = wl[p];
        ct_cat(ws, sizeof ws, "%s%lld", p ? "," : "", (long long)(c == 'i' ? Cig : c == 'o' ? Cout : K[c - '0']));
        c = yl[p];
        ct_cat(ys, sizeof ys, "%s%lld", p ? "," : "", (long long)(c == 'b' ? Nout : c == 'f' ? Cout : O[c - '0']));
    }
    char win[512] = "";
    if (ns > 0) {
        const char *names[] = {"size", "stride", "pad", "lhs_dilate", "rhs_dilate", "rhs_reversal"};
        ct_cat(win, sizeof win, ", window={");
        for (int f = 0; f < 6; f++) {
            ct_cat(win, sizeof win, "%s%s=", f ? " " : "", names[f]);
            for (int i = 0; i < ns; i++) {
                if (i) ct_cat(win, sizeof win, "x");
                switch (f) {
                case 0: ct_cat(win, sizeof win, "%lld", (long long)K[i]); break;
                case 1: ct_cat(win, sizeof win, "%lld", (long long)st[i]); break;
                case 2: ct_cat(win, sizeof win, "%lld_%lld", (long long)lo[i], (long long)hi[i]); break;
                case 3: ct_cat(win, sizeof win, "%lld", (long long)ld[i]); break;
                case 4: ct_cat(win, sizeof win, "%lld", (long long)rd[i]); break;
                default: ct_cat(win, sizeof win, "%lld", (long long)rev[i]); break;
                }
            }
        }
        ct_cat(win, sizeof win, "}");
    }
    char groups[96] = "";
    if (G > 1) ct_cat(groups, sizeof groups, ", feature_group_count=%lld", (long long)G);
    if (BG > 1) ct_cat(groups, sizeof groups, ", batch_group_count=%lld", (long long)BG);
    snprintf(text, CT_TEXT,
             "HloModule t\n\nENTRY e {\n  x = %s[%s] parameter(0)\n  w = %s[%s] parameter(1)\n"
             "  ROOT c = %s[%s] convolution(x, w)%s, dim_labels=%s_%s->%s%s%s\n}\n",
             xt, xs, wt, ws, ot, ys, win, xl, wl, yl, groups, extra);
    int64_t kvol = 1;
    for (int i = 0; i < ns; i++) kvol *= K[i];
    return Cig * kvol;
}

/* Fast against reference on random operands; returns 1 when they agree. */
static int ct_check(tpu_ctx *ctx, mxt_rng *r, const char *text, int64_t K, tpu_numerics num, int threads)
{
    tpu_module *m = mxt_parse(ctx, text);
    if (!m) return 0;
    tpu_tensor *a, *b;
    mxt_operands(r, m, &a, &b);
    tpu_tensor *f = mxt_run(ctx, m, exe_k_convolution, num, threads, a, b);
    if (!f) test_fail(__FILE__, __LINE__, "fast convolution failed: %s\n%s", tpu_errmsg(ctx), text);
    tpu_tensor *g = mxt_run(ctx, m, exe_k_convolution_ref, num, threads, a, b);
    if (!g) test_fail(__FILE__, __LINE__, "reference convolution failed: %s\n%s", tpu_errmsg(ctx), text);
    int ok = 0;
    if (f && g) {
        tpu_dtype ot = g->dtype;
        int f64acc = ot == TPU_F64 || a->dtype == TPU_F64 || b->dtype == TPU_F64;
        ok = mxt_compare(__FILE__, __LINE__, text, f, g, (double)(K + 1) * (f64acc ? 1e-15 : 0x1p-20), 2 * mxt_eps(ot));
    }
    tpu_tensor_free(a);
    tpu_tensor_free(b);
    tpu_tensor_free(f);
    tpu_tensor_free(g);
    tpu_module_free(m);
    return ok;
}

static int ct_draw_and_check(tpu_ctx *ctx, mxt_rng *r, const char *xt, const char *wt, const char *ot, const char *extra,
                             int mode, int ns, tpu_numerics num)
{
    char text[CT_TEXT];
    int64_t K;
    while ((K = ct_random(r, text, xt, wt, ot, extra, mode, ns)) == 0) {}
    return ct_check(ctx, r, text, K, num, 0);
}

TEST(conv_random_windows_and_groups)
{
    tpu_ctx *ctx = tpu_ctx_new();
    mxt_rng r = {11};
    const char *prec[] = {"", ", operand_precision={high,high}", ", operand_precision={highest,highest}"};
    int fails = 0;
    for (int i = 0; i < 400 && fails < 3; i++) {
        int ns = (int)mxt_int(&r, 0, 9);
        ns = ns < 1 ? 0 : ns < 3 ? 1 : ns < 8 ? 2 : 3;
        fails += !ct_draw_and_check(ctx, &r, "f32", "f32", "f32", prec[i % 3], i % 4, ns,
                                    i % 5 == 4 ? TPU_NUMERICS_EXACT : TPU_NUMERICS_TPU);
    }
    tpu_ctx_free(ctx);
}

TEST(conv_random_dtypes)
{
    tpu_ctx *ctx = tpu_ctx_new();
    mxt_rng r = {12};
    static const char *types[][3] = {
        {"bf16", "bf16", "f32"}, {"bf16", "bf16", "bf16"}, {"f16", "f16", "f16"}, {"f16", "f16", "f32"},
        {"f64", "f64", "f64"}, {"f32", "bf16", "f32"}, {"s8", "s8", "s32"}, {"s8", "s8", "s8"},
        {"u8", "s8", "s32"}, {"s32", "s32", "s32"}, {"s64", "s64", "s64"}, {"s8", "s8", "f32"},
        {"pred", "pred", "pred"}, {"f8e4m3fn", "bf16", "f32"},
    };
    int n = (int)(sizeof types / sizeof types[0]), fails = 0;
    for (int i = 0; i < 6 * n && fails < 3; i++)
        fails += !ct_draw_and_check(ctx, &r, types[i % n][0], types[i % n][1], types[i % n][2], "", (i / n) % 4, 2,
                                    (i / n) % 2 ? TPU_NUMERICS_EXACT : TPU_NUMERICS_TPU);
    tpu_ctx_free(ctx);
}

/* MobileNetV2's convolution kinds at small sizes, plus shapes that reach every fast-path branch. */
static const struct { const char *body; int64_t k; } ct_cases[] = {
    /* forward: first layer, depthwise (x1, x2, strided), 1x1 */
    {"x = f32[2,3,17,17] parameter(0)\n w = f32[8,3,3,3] parameter(1)\n ROOT c = f32[2,8,9,9] convolution(x, w), "
     "window={size=3x3 stride=2x2 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01", 27},
    {"x = f32[2,8,10,10] parameter(0)\n w = f32[8,1,3,3] parameter(1)\n ROOT c = f32[2,8,10,10] convolution(x, w), "
     "window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01, feature_group_count=8", 9},
    {"x = f32[2,8,10,10] parameter(0)\n w = f32[16,1,3,3] parameter(1)\n ROOT c = f32[2,16,5,5] convolution(x, w), "
     "window={size=3x3 stride=2x2 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01, feature_group_count=8", 9},
    {"x = f32[2,16,9,9] parameter(0)\n w = f32[24,16,1,1] parameter(1)\n ROOT c = f32[2,24,9,9] convolution(x, w), "
     "window={size=1x1}, dim_labels=bf01_oi01->bf01", 16},
    /* input gradients: depthwise through lhs_dilate, 1x1 with a kernel in 01oi, first layer */
    {"x = f32[2,8,5,5] parameter(0)\n w = f32[3,3,8,1] parameter(1)\n ROOT c = f32[2,8,10,10] convolution(x, w), "
     "window={size=3x3 pad=1_2x1_2 lhs_dilate=2x2}, dim_labels=bf01_01oi->bf01, feature_group_count=8", 9},
    {"x = f32[2,24,9,9] parameter(0)\n w = f32[1,1,16,24] parameter(1)\n ROOT c = f32[2,16,9,9] convolution(x, w), "
     "window={size=1x1}, dim_labels=bf01_01oi->bf01", 24},
    {"x = f32[2,8,9,9] parameter(0)\n w = f32[3,3,3,8] parameter(1)\n ROOT c = f32[2,3,18,18] convolution(x, w), "
     "window={size=3x3 pad=1_2x1_2 lhs_dilate=2x2 rhs_reversal=1x1}, dim_labels=bf01_01oi->bf01", 72},
    /* weight gradients: 1x1, depthwise (batch groups, stride 1 and 2), first layer (rhs_dilate) */
    {"x = f32[4,6,7,7] parameter(0)\n w = f32[4,10,7,7] parameter(1)\n ROOT c = f32[1,1,6,10] convolution(x, w), "
     "window={size=7x7}, dim_labels=fb01_io01->01bf", 196},
    {"x = f32[4,6,8,8] parameter(0)\n w = f32[4,6,8,8] parameter(1)\n ROOT c = f32[3,3,1,6] convolution(x, w), "
     "window={size=8x8 pad=1_1x1_1}, dim_labels=fb01_io01->01bf, batch_group_count=6", 256},
    {"x = f32[4,6,8,8] parameter(0)\n w = f32[4,6,4,4] parameter(1)\n ROOT c = f32[3,3,1,6] convolution(x, w), "
     "window={size=4x4 pad=1_0x1_0 rhs_dilate=2x2}, dim_labels=fb01_io01->01bf, batch_group_count=6", 64},
    {"x = f32[4,3,8,8] parameter(0)\n w = f32[4,5,4,4] parameter(1)\n ROOT c = f32[3,3,3,5] convolution(x, w), "
     "window={size=4x4 pad=1_0x1_0 rhs_dilate=2x2}, dim_labels=fb01_io01->01bf", 64},
    /* a long reduction with few outputs: split into parts */
    {"x = f32[32,3,30,30] parameter(0)\n w = f32[32,5,28,28] parameter(1)\n ROOT c = f32[3,3,3,5] convolution(x, w), "
     "window={size=28x28}, dim_labels=fb01_io01->01bf", 32 * 784},
    /* several column chunks, NHWC, batch groups with several features each, grouped */
    {"x = f32[2,16,30,30] parameter(0)\n w = f32[16,16,3,3] parameter(1)\n ROOT c = f32[2,16,30,30] convolution(x, w), "
     "window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01", 144},
    {"x = f32[2,11,13,12] parameter(0)\n w = f32[3,2,12,7] parameter(1)\n ROOT c = f32[2,5,6,7] convolution(x, w), "
     "window={size=3x2 stride=2x2 pad=0_1x-1_0}, dim_labels=b01f_01io->b01f", 72},
    {"x = f32[12,9,6] parameter(0)\n w = f32[9,10,3] parameter(1)\n ROOT c = f32[6,10,6] convolution(x, w), "
     "window={size=3 pad=1_1}, dim_labels=bf0_io0->bf0, batch_group_count=2", 27},
    {"x = f32[3,12,10,10] parameter(0)\n w = f32[12,3,3,3] parameter(1)\n ROOT c = f32[3,12,10,10] convolution(x, w), "
     "window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01, feature_group_count=4", 27},
    /* 3-D, 1-D with a long kernel, 0-D (a dense layer) */
    {"x = f32[2,3,6,7,5] parameter(0)\n w = f32[6,3,3,2,3] parameter(1)\n ROOT c = f32[2,6,2,6,2] convolution(x, w), "
     "window={size=3x2x3 stride=2x1x1 pad=0_0x0_0x-1_0 rhs_dilate=1x1x1}, dim_labels=bf012_oi012->bf012", 54},
    {"x = f32[2,40,4] parameter(0)\n w = f32[30,4,6] parameter(1)\n ROOT c = f32[2,11,6] convolution(x, w), "
     "window={size=30}, dim_labels=b0f_0io->b0f", 120},
    {"x = f32[20,30] parameter(0)\n w = f32[30,25] parameter(1)\n ROOT c = f32[20,25] convolution(x, w), "
     "dim_labels=bf_io->bf", 30},
    /* empty reductions and empty results */
    {"x = f32[2,0,5,5] parameter(0)\n w = f32[6,0,3,3] parameter(1)\n ROOT c = f32[2,6,3,3] convolution(x, w), "
     "window={size=3x3}, dim_labels=bf01_oi01->bf01", 1},
    {"x = f32[2,0,5,5] parameter(0)\n w = f32[2,0,3,3] parameter(1)\n ROOT c = f32[2,2,3,3] convolution(x, w), "
     "window={size=3x3}, dim_labels=bf01_oi01->bf01", 1},
    {"x = f32[0,4,5,5] parameter(0)\n w = f32[6,4,3,3] parameter(1)\n ROOT c = f32[0,6,3,3] convolution(x, w), "
     "window={size=3x3}, dim_labels=bf01_oi01->bf01", 1},
    {"x = f32[2,4,5,5] parameter(0)\n w = f32[6,4,3,3] parameter(1)\n ROOT c = f32[2,6,0,3] convolution(x, w), "
     "window={size=3x3 pad=-2_-1x0_0}, dim_labels=bf01_oi01->bf01", 1},
    /* small integers through the f64 gemm, bf16 through the direct path */
    {"x = s8[2,6,9,9] parameter(0)\n w = s8[5,6,3,3] parameter(1)\n ROOT c = s32[2,5,9,9] convolution(x, w), "
     "window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01", 54},
    {"x = bf16[2,8,10,10] parameter(0)\n w = bf16[8,1,3,3] parameter(1)\n ROOT c = bf16[2,8,10,10] convolution(x, w), "
     "window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01, feature_group_count=8", 9},
};

TEST(conv_fast_paths)
{
    tpu_ctx *ctx = tpu_ctx_new();
    mxt_rng r = {13};
    char text[CT_TEXT];
    for (size_t i = 0; i < sizeof ct_cases / sizeof ct_cases[0]; i++)
        for (int mode = 0; mode < 3; mode++) {
            if (mode == 2 && ct_cases[i].k > 1000) continue;   /* keep the reference's time down */
            snprintf(text, sizeof text, "HloModule t\n\nENTRY e {\n %s%s\n}\n", ct_cases[i].body,
                     mode == 2 ? ", operand_precision={high,high}" : "");
            ct_check(ctx, &r, text, ct_cases[i].k, mode == 1 ? TPU_NUMERICS_EXACT : TPU_NUMERICS_TPU, 0);
        }
    tpu_ctx_free(ctx);
}

/* DEFAULT in TPU mode = exact-mode result on bf16-rounded operands (GEMM and direct paths); HIGH is closer
 * to the exact result than DEFAULT; HIGHEST closer still. */
TEST(conv_numerics)
{
    tpu_ctx *ctx = tpu_ctx_new();
    mxt_rng r = {14};
    const char *bodies[] = {ct_cases[0].body, ct_cases[1].body, ct_cases[8].body, ct_cases[12].body};
    for (int i = 0; i < 4; i++) {
        char text[4][CT_TEXT];
        const char *prec[] = {"", ", operand_precision={high,high}", ", operand_precision={highest,highest}", ""};
        for (int p = 0; p < 4; p++) snprintf(text[p], CT_TEXT, "HloModule t\nENTRY e {\n %s%s\n}\n", bodies[i], prec[p]);
        tpu_module *m[3];
        for (int p = 0; p < 3; p++) m[p] = mxt_parse(ctx, text[p]);
        if (!m[0] || !m[1] || !m[2]) continue;
        tpu_tensor *a, *b;
        mxt_operands(&r, m[0], &a, &b);
        tpu_tensor *ar = ten_clone(a), *br = ten_clone(b);
        for (int64_t k = 0; k < ar->count; k++) ((float *)ar->data)[k] = fp_round_bf16_ftz(((float *)a->data)[k]);
        for (int64_t k = 0; k < br->count; k++) ((float *)br->data)[k] = fp_round_bf16_ftz(((float *)b->data)[k]);
        tpu_tensor *def = mxt_run(ctx, m[0], exe_k_convolution, TPU_NUMERICS_TPU, 0, a, b);
        tpu_tensor *high = mxt_run(ctx, m[1], exe_k_convolution, TPU_NUMERICS_TPU, 0, a, b);
        tpu_tensor *highest = mxt_run(ctx, m[2], exe_k_convolution, TPU_NUMERICS_TPU, 0, a, b);
        tpu_tensor *rounded = mxt_run(ctx, m[0], exe_k_convolution, TPU_NUMERICS_EXACT, 0, ar, br);
        tpu_tensor *exact = mxt_run(ctx, m[0], exe_k_convolution_ref, TPU_NUMERICS_EXACT, 0, a, b);
        CHECK(def && high && highest && rounded && exact);
        if (def && high && highest && rounded && exact) {
            mxt_compare(__FILE__, __LINE__, "DEFAULT vs exact on bf16-rounded operands", def, rounded, 300 * 0x1p-23, 0);
            double e0 = mxt_max_diff(def, exact), e1 = mxt_max_diff(high, exact), e2 = mxt_max_diff(highest, exact);
            CHECK_MSG(e0 > 1e-4 && e1 < e0 / 50 && e2 <= e1 && e2 < 1e-5, "case %d: errors DEFAULT %g HIGH %g HIGHEST %g",
                      i, e0, e1, e2);
        }
        tpu_tensor *v[] = {a, b, ar, br, def, high, highest, rounded, exact};
        for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) tpu_tensor_free(v[k]);
        for (int p = 0; p < 3; p++) tpu_module_free(m[p]);
    }
    tpu_ctx_free(ctx);
}

TEST(conv_threads_do_not_change_results)
{
    tpu_ctx *ctx = tpu_ctx_new();
    mxt_rng r = {15};
    int which[] = {11, 12, 1, 8};
    for (int i = 0; i < 4; i++) {
        char text[CT_TEXT];
        snprintf(text, sizeof text, "HloModule t\nENTRY e {\n %s\n}\n", ct_cases[which[i]].body);
        tpu_module *m = mxt_parse(ctx, text);
        REQUIRE(m);
        tpu_tensor *a, *b;
        mxt_operands(&r, m, &a, &b);
        tpu_tensor *x[3];
        for (int t = 0; t < 3; t++) x[t] = mxt_run(ctx, m, exe_k_convolution, TPU_NUMERICS_TPU, t + 1, a, b);
        CHECK(x[0] && x[1] && x[2]);
        if (x[0] && x[1] && x[2]) {
            CHECK_MSG(memcmp(x[0]->data, x[1]->data, x[0]->nbytes) == 0, "case %d: 1 vs 2 threads", which[i]);
            CHECK_MSG(memcmp(x[0]->data, x[2]->data, x[0]->nbytes) == 0, "case %d: 1 vs 3 threads", which[i]);
        }
        for (int t = 0; t < 3; t++) tpu_tensor_free(x[t]);
        tpu_tensor_free(a);
        tpu_tensor_free(b);
        tpu_module_free(m);
    }
    tpu_ctx_free(ctx);
}

TEST(conv_shape_errors)
{
    tpu_ctx *ctx = tpu_ctx_new();
    mxt_rng r = {16};
    static const struct { const char *body, *msg; } cases[] = {
        {"x = f32[1,2,5,5] parameter(0)\n w = f32[3,2,3,3] parameter(1)\n ROOT c = f32[1,3,3,3] convolution(x, w), "
         "window={size=2x3}, dim_labels=bf01_oi01->bf01", "window size 2 in spatial dimension 0 differs from the kernel's 3"},
        {"x = f32[1,2,5,5] parameter(0)\n w = f32[3,2,3,3] parameter(1)\n ROOT c = f32[1,3,4,3] convolution(x, w), "
         "window={size=3x3}, dim_labels=bf01_oi01->bf01", "output spatial dimension 0 should have size 3, not 4"},
        {"x = f32[1,4,5,5] parameter(0)\n w = f32[3,2,3,3] parameter(1)\n ROOT c = f32[1,3,3,3] convolution(x, w), "
         "window={size=3x3}, dim_labels=bf01_oi01->bf01", "input has 4 features but the kernel takes 2 x feature_group_count 1"},
        {"x = f32[1,4,5,5] parameter(0)\n w = f32[3,2,3,3] parameter(1)\n ROOT c = f32[1,3,3,3] convolution(x, w), "
         "window={size=3x3}, dim_labels=bf01_oi01->bf01, feature_group_count=2", "must divide by feature_group_count"},
        {"x = f32[3,2,5,5] parameter(0)\n w = f32[4,2,3,3] parameter(1)\n ROOT c = f32[1,4,3,3] convolution(x, w), "
         "window={size=3x3}, dim_labels=bf01_oi01->bf01, batch_group_count=2", "input batch (3) must divide by batch_group_count (2)"},
        {"x = f32[1,2,5,5] parameter(0)\n w = f32[3,2,3,3] parameter(1)\n ROOT c = f32[1,3,3,3] convolution(x, w), "
         "window={size=3x3 stride=0x1}, dim_labels=bf01_oi01->bf01", "must be >= 1"},
        {"x = f32[1,2,5] parameter(0)\n w = f32[3,2,3,3] parameter(1)\n ROOT c = f32[1,3,3] convolution(x, w), "
         "window={size=3}, dim_labels=bf0_oi0->bf0", "ranks are 3, 4 -> 3"},
        {"x = f32[1,2,5,5] parameter(0)\n w = f32[3,2,3,3] parameter(1)\n ROOT c = f32[1,3,3,3] convolution(x, w), "
         "window={size=3}, dim_labels=bf01_oi01->bf01", "window has 1 dimensions"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[1024];
        snprintf(text, sizeof text, "HloModule t\nENTRY e {\n %s\n}\n", cases[i].body);
        tpu_module *m = mxt_parse(ctx, text);
        if (!m) continue;
        tpu_tensor *a, *b;
        mxt_operands(&r, m, &a, &b);
        for (int k = 0; k < 2; k++) {
            tpu_tensor *t = mxt_run(ctx, m, k ? exe_k_convolution_ref : exe_k_convolution, TPU_NUMERICS_TPU, 0, a, b);
            CHECK(t == NULL);
            tpu_tensor_free(t);
            CHECK_MSG(strstr(tpu_errmsg(ctx), cases[i].msg) != NULL, "message '%s' lacks '%s'", tpu_errmsg(ctx), cases[i].msg);
        }
        tpu_tensor_free(a);
        tpu_tensor_free(b);
        tpu_module_free(m);
    }
    tpu_ctx_free(ctx);
}

TEST(conv_through_tpu_run)
{
    tpu_ctx *ctx = tpu_ctx_new();
    char text[CT_TEXT];
    snprintf(text, sizeof text, "HloModule t\nENTRY e {\n %s\n}\n", ct_cases[1].body);
    tpu_module *m = mxt_parse(ctx, text);
    REQUIRE(m);
    tpu_tensor **in = NULL, **out = NULL;
    int nin = 0, nout = 0;
    REQUIRE_OK(ctx, tpu_random_inputs(ctx, m, 3, &in, &nin));
    tpu_run_opts o = tpu_run_opts_default();
    CHECK_OK(ctx, tpu_run(ctx, m, &o, in, nin, &out, &nout));
    if (nout == 1) {
        tpu_tensor *g = mxt_run(ctx, m, exe_k_convolution_ref, TPU_NUMERICS_TPU, 0, in[0], in[1]);
        mxt_compare(__FILE__, __LINE__, "tpu_run convolution", out[0], g, 10 * 0x1p-22, 0);
        tpu_tensor_free(g);
    }
    tpu_tensors_free(in, nin);
    tpu_tensors_free(out, nout);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* The channels-last path (features innermost in input and result, f32: Col[col][(k, ci)] runs of input
 * features, the product written straight into the result): random NHWC convolutions with any kernel layout,
 * windows, groups and batch groups, in every numerics; and the shapes that reach each of its branches —
 * several images per chunk, an image split into pieces, one output pixel, a reduction in several chunks. */
static void ct_nhwc(char *text, mxt_rng *r, int64_t N, int64_t S0, int64_t S1, int64_t Cig, int64_t Cout, int64_t G,
                    int64_t BG, int64_t K0, int64_t K1, const char *win, const char *extra)
{
    char wl[8] = "01io", ws[64] = "";
    ct_shuffle(r, wl);
    for (int p = 0; p < 4; p++)
        ct_cat(ws, sizeof ws, "%s%lld", p ? "," : "", (long long)(wl[p] == 'i' ? Cig : wl[p] == 'o' ? Cout : wl[p] == '0' ? K0 : K1));
    /* (the result shape is left out: the parser infers it) */
    snprintf(text, CT_TEXT,
             "HloModule t\n\nENTRY e {\n  x = f32[%lld,%lld,%lld,%lld] parameter(0)\n  w = f32[%s] parameter(1)\n"
             "  ROOT c = convolution(x, w), window={%s}, dim_labels=b01f_%s->b01f%s%s%s\n}\n",
             (long long)(N * BG), (long long)S0, (long long)S1, (long long)(Cig * G), ws, win, wl,
             G > 1 ? ", feature_group_count=" : "", "", extra);
    if (G > 1) {
        char *p = strstr(text, ", feature_group_count=");
        char tail[256];
        snprintf(tail, sizeof tail, "%lld%s\n}\n", (long long)G, extra);
        snprintf(p + strlen(", feature_group_count="), CT_TEXT - (size_t)(p - text) - 24, "%s", tail);
    }
    if (BG > 1) {
        char *p = strstr(text, "\n}\n");
        char tail[128];
        snprintf(tail, sizeof tail, ", batch_group_count=%lld\n}\n", (long long)BG);
        snprintf(p, CT_TEXT - (size_t)(p - text), "%s", tail);
    }
}

TEST(conv_channels_last_path)
{
    tpu_ctx *ctx = tpu_ctx_new();
    mxt_rng r = {21};
    const char *prec[] = {"", ", operand_precision={high,high}", ", operand_precision={highest,highest}"};
    char text[CT_TEXT];
    int fails = 0;
    /* fixed shapes for each branch */
    static const struct { int64_t N, S0, S1, Cig, Cout, K0, K1; const char *win; } fixed[] = {
        {70, 3, 3, 7, 9, 3, 3, "size=3x3 pad=1_1x1_1"},                       /* several images per chunk */
        {70, 3, 3, 7, 9, 3, 3, "size=3x3"},                                   /* ... of one output pixel each */
        {1, 40, 40, 6, 10, 3, 3, "size=3x3 pad=1_1x1_1"},                     /* an image in pieces */
        {5, 3, 3, 5, 6, 3, 3, "size=3x3"},                                    /* one output pixel */
        {8, 12, 12, 300, 8, 3, 3, "size=3x3 pad=1_1x1_1"},                    /* reduction in chunks */
        {2, 9, 9, 5, 7, 3, 3, "size=3x3 stride=2x2 pad=0_2x1_0 lhs_dilate=2x1 rhs_dilate=1x2 rhs_reversal=1x0"},
    };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0] && fails < 3; i++)
        for (int md = 0; md < 3; md++) {
            ct_nhwc(text, &r, fixed[i].N, fixed[i].S0, fixed[i].S1, fixed[i].Cig, fixed[i].Cout, 1, 1, fixed[i].K0,
                    fixed[i].K1, fixed[i].win, prec[md]);
            fails += !ct_check(ctx, &r, text, fixed[i].Cig * fixed[i].K0 * fixed[i].K1,
                               md == 2 ? TPU_NUMERICS_EXACT : TPU_NUMERICS_TPU, 0);
        }
    for (int i = 0; i < 120 && fails < 3; i++) {
        int64_t G = mxt_int(&r, 0, 3) == 0 ? mxt_int(&r, 2, 3) : 1, BG = G == 1 && mxt_int(&r, 0, 4) == 0 ? 2 : 1;
        int64_t Cig = mxt_int(&r, 2, 9), Cout = (G > 1 ? G : BG) * mxt_int(&r, 5, 9);
        int64_t S0 = mxt_int(&r, 1, 9), S1 = mxt_int(&r, 1, 9), K0 = mxt_int(&r, 1, 3), K1 = mxt_int(&r, 1, 3);
        int64_t st0 = mxt_int(&r, 1, 2), st1 = mxt_int(&r, 1, 2), ld0 = mxt_int(&r, 1, 2), rd1 = mxt_int(&r, 1, 2);
        int64_t lo0 = mxt_int(&r, -1, 2), hi0 = mxt_int(&r, -1, 2), lo1 = mxt_int(&r, 0, 2), hi1 = mxt_int(&r, 0, 2);
        int64_t pad0 = (S0 - 1) * ld0 + 1 + lo0 + hi0, pad1 = S1 + lo1 + hi1;
        if (pad0 < K0 || pad1 < (K1 - 1) * rd1 + 1) continue;
        char win[160];
        snprintf(win, sizeof win, "size=%lldx%lld stride=%lldx%lld pad=%lld_%lldx%lld_%lld lhs_dilate=%lldx1 rhs_dilate=1x%lld rhs_reversal=%dx0",
                 (long long)K0, (long long)K1, (long long)st0, (long long)st1, (long long)lo0, (long long)hi0, (long long)lo1,
                 (long long)hi1, (long long)ld0, (long long)rd1, (int)(i % 2));
        ct_nhwc(text, &r, mxt_int(&r, 1, 4), S0, S1, Cig, Cout, G, BG, K0, K1, win, prec[i % 3]);
        fails += !ct_check(ctx, &r, text, Cig * K0 * K1, i % 4 == 3 ? TPU_NUMERICS_EXACT : TPU_NUMERICS_TPU, 0);
    }
    tpu_ctx_free(ctx);
}

/* The weight-gradient path (conv.c conv_wgrad: NHWC activations x as f01b, the output gradient as i01o, dW
 * as 01bf) against the general implicit GEMM it replaces, bit for bit, on 1 and 3 threads — plain, stride-2
 * (rhs dilation) and 1x1-projection gradients, split reductions (ksplit), every precision and both numerics
 * modes — and against the reference on the small ones. */
TEST(conv_weight_grad_path)
{
    tpu_ctx *ctx = tpu_ctx_new();
    mxt_rng r = {22};
    static const struct { int64_t N, H, C, Ho, Co, K; const char *win; int ref; } cs[] = {
        {4, 8, 5, 8, 6, 3, "size=8x8 pad=1_1x1_1", 1},
        {4, 8, 5, 4, 6, 3, "size=4x4 pad=0_1x0_1 rhs_dilate=2x2", 1},
        {4, 8, 5, 4, 6, 1, "size=4x4 pad=0_-1x0_-1 rhs_dilate=2x2", 1},
        {3, 7, 33, 7, 40, 3, "size=7x7 pad=1_1x1_1", 1},
        {32, 32, 8, 32, 8, 3, "size=32x32 pad=1_1x1_1", 0},       /* reduction split into parts */
        {16, 16, 24, 16, 20, 3, "size=16x16 pad=1_1x1_1", 0},
        /* batch 1 and 6 (Nout: runs of 1 and 6 values; conv.c cwg_gather16), LeNet's two layers, padding,
         * and lhs dilation (the run gather) */
        {16, 28, 1, 24, 6, 5, "size=24x24", 0},
        {16, 12, 6, 8, 16, 5, "size=8x8", 0},
        {4, 9, 1, 9, 3, 3, "size=9x9 pad=1_1x1_1", 1},
        {3, 7, 2, 7, 5, 3, "size=7x7 stride=2x1 pad=2_2x0_2", 1},
        {4, 8, 2, 15, 3, 1, "size=15x15 lhs_dilate=2x2", 1},
    };
    const char *dts[] = {"bf16", "f32"};
    const char *prec[] = {"", ", operand_precision={high,high}", ", operand_precision={highest,highest}"};
    char text[CT_TEXT];
    int fails = 0;
    for (size_t i = 0; i < sizeof cs / sizeof cs[0] && fails < 3; i++)
        for (int d = 0; d < 2; d++)
            for (int md = 0; md < 4; md++) {
                if (d == 0 && md > 0 && md < 3) continue;   /* precision only splits f32 */
                const char *dt = dts[d];
                snprintf(text, sizeof text,
                         "HloModule t\n\nENTRY e {\n  x = %s[%lld,%lld,%lld,%lld] parameter(0)\n"
                         "  w = %s[%lld,%lld,%lld,%lld] parameter(1)\n"
                         "  ROOT c = %s[%lld,%lld,%lld,%lld] convolution(x, w), window={%s}, dim_labels=f01b_i01o->01bf%s\n}\n",
                         dt, (long long)cs[i].N, (long long)cs[i].H, (long long)cs[i].H, (long long)cs[i].C, dt,
                         (long long)cs[i].N, (long long)cs[i].Ho, (long long)cs[i].Ho, (long long)cs[i].Co, dt,
                         (long long)cs[i].K, (long long)cs[i].K, (long long)cs[i].C, (long long)cs[i].Co, cs[i].win,
                         md < 3 ? prec[md] : "");
                tpu_numerics num = md == 3 ? TPU_NUMERICS_EXACT : TPU_NUMERICS_TPU;
                tpu_module *m = mxt_parse(ctx, text);
                REQUIRE(m);
                tpu_tensor *a, *b;
                mxt_operands(&r, m, &a, &b);
                tpu_tensor *g = mxt_run(ctx, m, exe_k_convolution_gemm, num, 1, a, b);
                for (int th = 1; th <= 3 && g; th += 2) {
                    tpu_tensor *f = mxt_run(ctx, m, exe_k_convolution, num, th, a, b);
                    CHECK(f != NULL);
                    if (f && memcmp(f->data, g->data, g->nbytes)) {
                        test_fail(__FILE__, __LINE__, "weight-gradient path != general path (%d threads):\n%s", th, text);
                        fails++;
                    }
                    tpu_tensor_free(f);
                }
                CHECK(g != NULL);
                tpu_tensor_free(g);
                tpu_tensor_free(a);
                tpu_tensor_free(b);
                tpu_module_free(m);
                if (cs[i].ref && md == 0) fails += !ct_check(ctx, &r, text, cs[i].N * cs[i].Ho * cs[i].Ho, num, 0);
            }
    tpu_ctx_free(ctx);
}

/* Channels-last convolutions whose patches the fast path gathers as bf16 (conv.c conv_gctx.col16: bf16 data,
 * and f32 data split into bf16 parts in TPU mode) against the general path's f32 patches
 * (exe_k_convolution_gemm), bit for bit on 1 and 3 threads in both numerics modes, on random NHWC windows;
 * and a few against the reference. */
TEST(conv_bf16_patches_path)
{
    tpu_ctx *ctx = tpu_ctx_new();
    mxt_rng r = {23};
    char text[CT_TEXT];
    int fails = 0;
    for (int i = 0; i < 40 && fails < 3; i++) {
        int64_t Cig = mxt_int(&r, 2, 40), Cout = mxt_int(&r, 5, 40);
        int64_t S0 = mxt_int(&r, 1, 12), S1 = mxt_int(&r, 1, 12), K0 = mxt_int(&r, 1, 3), K1 = mxt_int(&r, 1, 3);
        int64_t st = mxt_int(&r, 1, 2), ld = mxt_int(&r, 0, 3) == 0 ? 2 : 1, lo = mxt_int(&r, 0, 2), hi = mxt_int(&r, -1, 2);
        if ((S0 - 1) * ld + 1 + lo + hi < K0 || (S1 - 1) * ld + 1 + lo + hi < K1) continue;
        char win[160];
        snprintf(win, sizeof win, "size=%lldx%lld stride=%lldx%lld pad=%lld_%lldx%lld_%lld lhs_dilate=%lldx%lld",
                 (long long)K0, (long long)K1, (long long)st, (long long)st, (long long)lo, (long long)hi, (long long)lo,
                 (long long)hi, (long long)ld, (long long)ld);
        /* even draws: every operand bf16; odd ones: f32 at each precision (split into bf16 parts in TPU mode) */
        const char *prec[] = {"", ", operand_precision={high,high}", ", operand_precision={highest,highest}"};
        ct_nhwc(text, &r, mxt_int(&r, 1, 40), S0, S1, Cig, Cout, 1, 1, K0, K1, win, i % 2 ? prec[i / 2 % 3] : "");
        for (char *p; i % 2 == 0 && (p = strstr(text, "f32[")) != NULL;) {
            memmove(p + 1, p, strlen(p) + 1);
            memcpy(p, "bf16", 4);
        }
        tpu_numerics num = i % 3 == 2 ? TPU_NUMERICS_EXACT : TPU_NUMERICS_TPU;
        tpu_module *m = mxt_parse(ctx, text);
        REQUIRE(m);
        tpu_tensor *a, *b;
        mxt_operands(&r, m, &a, &b);
        tpu_tensor *g = mxt_run(ctx, m, exe_k_convolution_gemm, num, 1, a, b);
        CHECK(g != NULL);
        for (int th = 1; th <= 3 && g; th += 2) {
            tpu_tensor *f = mxt_run(ctx, m, exe_k_convolution, num, th, a, b);
            CHECK(f != NULL);
            if (f && memcmp(f->data, g->data, g->nbytes)) {
                test_fail(__FILE__, __LINE__, "bf16 patches != f32 patches (%d threads):\n%s", th, text);
                fails++;
            }
            tpu_tensor_free(f);
        }
        tpu_tensor_free(g);
        tpu_tensor_free(a);
        tpu_tensor_free(b);
        tpu_module_free(m);
        if (i < 8) fails += !ct_check(ctx, &r, text, Cig * K0 * K1, num, 0);
    }
    tpu_ctx_free(ctx);
}
