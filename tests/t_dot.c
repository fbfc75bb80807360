/* t_dot.c — the dot kernel against its reference: random dimension-number placements and sizes, every
 * dtype family and mixed result types, the fast paths (in place, packed, transposed, batched, split), the
 * TPU numerics of f32 dots (DEFAULT = bf16-rounded operands, HIGH closer to f32 than DEFAULT, HIGHEST =
 * f32), thread-count independence, shape errors, and the kernel behind tpu_run. */
#include "mxu_test.h"
#include "util/fp.h"

#define DT_TEXT 4096

/* A dot with random placements of nb batch, nc contracting and nm/nn free dims, sizes from sz[]. Writes the
 * module text; returns K (the contraction length). */
static int64_t dt_random(mxt_rng *r, char *text, const char *lt, const char *rt, const char *ot, const char *extra,
                         const int64_t *sz, int nsz)
{
    int nb = (int)mxt_int(r, 0, 2), nc = (int)mxt_int(r, 0, 2), nm = (int)mxt_int(r, 0, 2), nn = (int)mxt_int(r, 0, 2);
    int64_t bd[2], cd[2], md[2], nd[2];
    int64_t K = 1;
    for (int i = 0; i < 2; i++) {
        bd[i] = sz[mxt_int(r, 0, nsz - 1)];
        cd[i] = sz[mxt_int(r, 0, nsz - 1)];
        md[i] = sz[mxt_int(r, 0, nsz - 1)];
        nd[i] = sz[mxt_int(r, 0, nsz - 1)];
    }
    for (int i = 0; i < nc; i++) K *= cd[i];
    /* roles: 0 batch, 1 contracting, 2 free; shuffled per operand */
    int lrole[6], lidx[6], rrole[6], ridx[6], ln = 0, rn = 0;
    for (int i = 0; i < nb; i++) lrole[ln] = 0, lidx[ln++] = i, rrole[rn] = 0, ridx[rn++] = i;
    for (int i = 0; i < nc; i++) lrole[ln] = 1, lidx[ln++] = i, rrole[rn] = 1, ridx[rn++] = i;
    for (int i = 0; i < nm; i++) lrole[ln] = 2, lidx[ln++] = i;
    for (int i = 0; i < nn; i++) rrole[rn] = 2, ridx[rn++] = i;
    for (int i = ln - 1; i > 0; i--) {
        int j = (int)mxt_int(r, 0, i), t = lrole[i], u = lidx[i];
        lrole[i] = lrole[j], lidx[i] = lidx[j], lrole[j] = t, lidx[j] = u;
    }
    for (int i = rn - 1; i > 0; i--) {
        int j = (int)mxt_int(r, 0, i), t = rrole[i], u = ridx[i];
        rrole[i] = rrole[j], ridx[i] = ridx[j], rrole[j] = t, ridx[j] = u;
    }
    char ls[128] = "", rs[128] = "", os[128] = "", lb[32] = "", rb[32] = "", lc[32] = "", rc[32] = "";
    int lbp[2], lcp[2], rbp[2], rcp[2];
    int64_t ofree_l[2], ofree_r[2];
    int nfl = 0, nfr = 0;
    for (int i = 0; i < ln; i++) {
        int64_t d = lrole[i] == 0 ? bd[lidx[i]] : lrole[i] == 1 ? cd[lidx[i]] : md[lidx[i]];
        snprintf(ls + strlen(ls), sizeof ls - strlen(ls), "%s%lld", i ? "," : "", (long long)d);
        if (lrole[i] == 0) lbp[lidx[i]] = i;
        if (lrole[i] == 1) lcp[lidx[i]] = i;
        if (lrole[i] == 2) ofree_l[nfl++] = d;
    }
    for (int i = 0; i < rn; i++) {
        int64_t d = rrole[i] == 0 ? bd[ridx[i]] : rrole[i] == 1 ? cd[ridx[i]] : nd[ridx[i]];
        snprintf(rs + strlen(rs), sizeof rs - strlen(rs), "%s%lld", i ? "," : "", (long long)d);
        if (rrole[i] == 0) rbp[ridx[i]] = i;
        if (rrole[i] == 1) rcp[ridx[i]] = i;
        if (rrole[i] == 2) ofree_r[nfr++] = d;
    }
    int on = 0;
    for (int i = 0; i < nb; i++) snprintf(os + strlen(os), sizeof os - strlen(os), "%s%lld", on++ ? "," : "", (long long)bd[i]);
    for (int i = 0; i < nfl; i++) snprintf(os + strlen(os), sizeof os - strlen(os), "%s%lld", on++ ? "," : "", (long long)ofree_l[i]);
    for (int i = 0; i < nfr; i++) snprintf(os + strlen(os), sizeof os - strlen(os), "%s%lld", on++ ? "," : "", (long long)ofree_r[i]);
    for (int i = 0; i < nb; i++) {
        snprintf(lb + strlen(lb), sizeof lb - strlen(lb), "%s%d", i ? "," : "", lbp[i]);
        snprintf(rb + strlen(rb), sizeof rb - strlen(rb), "%s%d", i ? "," : "", rbp[i]);
    }
    for (int i = 0; i < nc; i++) {
        snprintf(lc + strlen(lc), sizeof lc - strlen(lc), "%s%d", i ? "," : "", lcp[i]);
        snprintf(rc + strlen(rc), sizeof rc - strlen(rc), "%s%d", i ? "," : "", rcp[i]);
    }
    snprintf(text, DT_TEXT,
             "HloModule t\n\nENTRY e {\n  a = %s[%s] parameter(0)\n  b = %s[%s] parameter(1)\n"
             "  ROOT d = %s[%s] dot(a, b), lhs_batch_dims={%s}, lhs_contracting_dims={%s}, rhs_batch_dims={%s}, "
             "rhs_contracting_dims={%s}%s\n}\n",
             lt, ls, rt, rs, ot, os, lb, lc, rb, rc, extra);
    return K;
}

/* Runs the root dot fast and reference on random operands and compares. Returns 1 when they agree. */
static int dt_check(tpu_ctx *ctx, mxt_rng *r, const char *text, int64_t K, tpu_numerics num, int threads)
{
    tpu_module *m = mxt_parse(ctx, text);
    if (!m) return 0;
    tpu_tensor *a, *b;
    mxt_operands(r, m, &a, &b);
    tpu_tensor *f = mxt_run(ctx, m, exe_k_dot, num, threads, a, b);
    if (!f) test_fail(__FILE__, __LINE__, "fast dot failed: %s\n%s", tpu_errmsg(ctx), text);
    tpu_tensor *g = mxt_run(ctx, m, exe_k_dot_ref, num, threads, a, b);
    if (!g) test_fail(__FILE__, __LINE__, "reference dot failed: %s\n%s", tpu_errmsg(ctx), text);
    int ok = 0;
    if (f && g) {
        tpu_dtype ot = g->dtype;
        int f64acc = ot == TPU_F64 || a->dtype == TPU_F64 || b->dtype == TPU_F64;
        double atol = (double)(K + 1) * (f64acc ? 1e-15 : 0x1p-20), rtol = 2 * mxt_eps(ot);
        ok = mxt_compare(__FILE__, __LINE__, text, f, g, atol, rtol);
    }
    tpu_tensor_free(a);
    tpu_tensor_free(b);
    tpu_tensor_free(f);
    tpu_tensor_free(g);
    tpu_module_free(m);
    return ok;
}

static const int64_t dt_small[] = {1, 2, 3, 4, 5, 7, 8, 13};

TEST(dot_random_f32_placements)
{
    tpu_ctx *ctx = tpu_ctx_new();
    mxt_rng r = {1};
    char text[DT_TEXT];
    const char *prec[] = {"", ", operand_precision={high,high}", ", operand_precision={highest,highest}",
                          ", operand_precision={default,high}", ", algorithm=dot_bf16_bf16_f32_x3"};
    int fails = 0;
    for (int i = 0; i < 240 && fails < 3; i++) {
        int64_t K = dt_random(&r, text, "f32", "f32", "f32", prec[i % 5], dt_small, 8);
        fails += !dt_check(ctx, &r, text, K, i % 3 == 2 ? TPU_NUMERICS_EXACT : TPU_NUMERICS_TPU, 0);
    }
    tpu_ctx_free(ctx);
}

TEST(dot_random_dtypes)
{
    tpu_ctx *ctx = tpu_ctx_new();
    mxt_rng r = {2};
    char text[DT_TEXT];
    static const char *types[][3] = {
        {"bf16", "bf16", "f32"}, {"bf16", "bf16", "bf16"}, {"f16", "f16", "f32"}, {"f16", "f16", "f16"},
        {"f64", "f64", "f64"}, {"bf16", "f32", "f32"}, {"f32", "bf16", "bf16"}, {"f32", "f32", "f64"},
        {"s8", "s8", "s32"}, {"s8", "s8", "s8"}, {"u8", "u8", "u32"}, {"s16", "s16", "s32"},
        {"s32", "s32", "s32"}, {"s64", "s64", "s64"}, {"u32", "u32", "u32"}, {"u64", "u64", "u64"},
        {"pred", "pred", "pred"}, {"s8", "s8", "f32"}, {"u16", "s8", "s64"}, {"f8e4m3fn", "f8e4m3fn", "f32"},
        {"f8e5m2", "bf16", "f32"}, {"s4", "s4", "s32"},
    };
    int n = (int)(sizeof types / sizeof types[0]), fails = 0;
    for (int i = 0; i < 8 * n && fails < 3; i++) {
        int64_t K = dt_random(&r, text, types[i % n][0], types[i % n][1], types[i % n][2], "", dt_small, 8);
        fails += !dt_check(ctx, &r, text, K, (i / n) % 2 ? TPU_NUMERICS_EXACT : TPU_NUMERICS_TPU, 0);
    }
    tpu_ctx_free(ctx);
}

/* Larger products through every fast path: in place and packed operands, transposes, batched, split. */
TEST(dot_fast_paths)
{
    tpu_ctx *ctx = tpu_ctx_new();
    mxt_rng r = {3};
    char text[DT_TEXT];
    static const char *cases[] = {
        /* plain matmul, in place (exact) and packed (tpu) */
        "a = f32[150,200] parameter(0)\n b = f32[200,170] parameter(1)\n"
        " ROOT d = f32[150,170] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
        /* both transposed */
        "a = f32[120,90] parameter(0)\n b = f32[70,120] parameter(1)\n"
        " ROOT d = f32[90,70] dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={1}",
        /* tall-skinny: split by rows */
        "a = f32[700,64] parameter(0)\n b = f32[64,9] parameter(1)\n"
        " ROOT d = f32[700,9] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
        /* many small batches, batch dim in the middle */
        "a = f32[6,40,7] parameter(0)\n b = f32[40,7,5] parameter(1)\n"
        " ROOT d = f32[40,6,5] dot(a, b), lhs_batch_dims={1}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}",
        /* contraction over two non-adjacent dims (packed with offset tables) */
        "a = f32[5,30,6,20] parameter(0)\n b = f32[6,11,5] parameter(1)\n"
        " ROOT d = f32[30,20,11] dot(a, b), lhs_contracting_dims={0,2}, rhs_contracting_dims={2,0}",
        /* bf16 operands, f32 result, two batch dims */
        "a = bf16[3,4,33,65] parameter(0)\n b = bf16[3,4,65,31] parameter(1)\n"
        " ROOT d = f32[3,4,33,31] dot(a, b), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={2}",
        /* matrix-vector and vector-vector */
        "a = f32[300,257] parameter(0)\n b = f32[257] parameter(1)\n"
        " ROOT d = f32[300] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
        "a = f32[1000] parameter(0)\n b = f32[1000] parameter(1)\n"
        " ROOT d = f32[] dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={0}",
        /* outer product (no contraction) */
        "a = f32[17,3] parameter(0)\n b = f32[19] parameter(1)\n ROOT d = f32[17,3,19] dot(a, b)",
        /* wide integers: the 64-bit loop */
        "a = s32[3,20,30] parameter(0)\n b = s32[3,30,25] parameter(1)\n"
        " ROOT d = s32[3,20,25] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}",
        /* small integers: exact in f64 gemm */
        "a = s8[64,100] parameter(0)\n b = s8[100,48] parameter(1)\n"
        " ROOT d = s32[64,48] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
        "a = u8[40,70] parameter(0)\n b = u8[70,130] parameter(1)\n"
        " ROOT d = s32[40,130] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
        /* zero-size dims */
        "a = f32[0,5] parameter(0)\n b = f32[5,3] parameter(1)\n"
        " ROOT d = f32[0,3] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
        "a = f32[4,0] parameter(0)\n b = f32[0,3] parameter(1)\n"
        " ROOT d = f32[4,3] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
    };
    static const int64_t ks[] = {200, 120, 64, 7, 30, 65, 257, 1000, 1, 30, 100, 70, 5, 1};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int mode = 0; mode < 4; mode++) {
            const char *prec = mode == 2 ? ", operand_precision={high,high}" : "";
            tpu_numerics num = mode == 1 ? TPU_NUMERICS_EXACT : TPU_NUMERICS_TPU;
            snprintf(text, sizeof text, "HloModule t\n\nENTRY e {\n %s%s\n}\n", cases[i], prec);
            dt_check(ctx, &r, text, ks[i], num, mode == 3 ? 1 : 0);
        }
    }
    tpu_ctx_free(ctx);
}

/* Runs text's root dot with the fast kernel on given operands. */
static tpu_tensor *dt_fast(tpu_ctx *ctx, const char *text, tpu_numerics num, int threads, tpu_tensor *a, tpu_tensor *b,
                           exe_kernel k)
{
    tpu_module *m = mxt_parse(ctx, text);
    if (!m) return NULL;
    tpu_tensor *t = mxt_run(ctx, m, k, num, threads, a, b);
    if (!t) test_fail(__FILE__, __LINE__, "dot failed: %s", tpu_errmsg(ctx));
    tpu_module_free(m);
    return t;
}

static const char *dt_mm(char *buf, size_t n, const char *extra)
{
    return mxt_fmt(buf, n,
                   "HloModule t\nENTRY e {\n a = f32[48,256] parameter(0)\n b = f32[256,40] parameter(1)\n"
                   " ROOT d = f32[48,40] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}%s\n}\n", extra);
}

/* DEFAULT in TPU mode = exact f32 products of the bf16-rounded operands; exact mode ignores precision. */
TEST(dot_numerics_default_is_bf16)
{
    tpu_ctx *ctx = tpu_ctx_new();
    mxt_rng r = {4};
    int64_t da[2] = {48, 256}, db[2] = {256, 40};
    tpu_tensor *a = ten_alloc(TPU_F32, 2, da), *b = ten_alloc(TPU_F32, 2, db);
    mxt_fill(&r, a);
    mxt_fill(&r, b);
    tpu_tensor *ar = ten_clone(a), *br = ten_clone(b);
    for (int64_t i = 0; i < ar->count; i++) ((float *)ar->data)[i] = fp_round_bf16_ftz(((float *)a->data)[i]);
    for (int64_t i = 0; i < br->count; i++) ((float *)br->data)[i] = fp_round_bf16_ftz(((float *)b->data)[i]);
    char t1[512];
    tpu_tensor *tpu = dt_fast(ctx, dt_mm(t1, sizeof t1, ""), TPU_NUMERICS_TPU, 0, a, b, exe_k_dot);
    tpu_tensor *rounded = dt_fast(ctx, dt_mm(t1, sizeof t1, ""), TPU_NUMERICS_EXACT, 0, ar, br, exe_k_dot);
    tpu_tensor *exact = dt_fast(ctx, dt_mm(t1, sizeof t1, ""), TPU_NUMERICS_EXACT, 0, a, b, exe_k_dot);
    tpu_tensor *exact_def = dt_fast(ctx, dt_mm(t1, sizeof t1, ", operand_precision={default,default}"), TPU_NUMERICS_EXACT,
                                    0, a, b, exe_k_dot);
    if (tpu && rounded && exact && exact_def) {
        /* same exact products, f32 sums in possibly different orders */
        mxt_compare(__FILE__, __LINE__, "DEFAULT vs exact on bf16-rounded operands", tpu, rounded, 256 * 0x1p-23, 0);
        double d = mxt_max_diff(tpu, exact);
        CHECK_MSG(d > 1e-3, "DEFAULT should differ visibly from f32 (max diff %g)", d);
        CHECK_EQ_INT(mxt_max_diff(exact, exact_def) == 0, 1);
    }
    tpu_tensor *v[] = {a, b, ar, br, tpu, rounded, exact, exact_def};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) tpu_tensor_free(v[i]);
    tpu_ctx_free(ctx);
}

/* Errors against an f64 reference: HIGH (bf16x3) is far closer than DEFAULT, HIGHEST is f32-accurate. */
TEST(dot_numerics_precision_order)
{
    tpu_ctx *ctx = tpu_ctx_new();
    mxt_rng r = {5};
    int64_t da[2] = {48, 256}, db[2] = {256, 40};
    tpu_tensor *a = ten_alloc(TPU_F32, 2, da), *b = ten_alloc(TPU_F32, 2, db);
    mxt_fill(&r, a);
    mxt_fill(&r, b);
    char t1[512];
    /* f64 reference: the reference kernel in exact mode sums exact products in double */
    tpu_module *m = mxt_parse(ctx, dt_mm(t1, sizeof t1, ""));
    REQUIRE(m);
    double *ref = malloc(48 * 40 * sizeof *ref);
    for (int i = 0; i < 48; i++)
        for (int j = 0; j < 40; j++) {
            double s = 0;
            for (int k = 0; k < 256; k++) s += (double)((float *)a->data)[i * 256 + k] * ((float *)b->data)[k * 40 + j];
            ref[i * 40 + j] = s;
        }
    tpu_module_free(m);
    const char *prec[] = {"", ", operand_precision={high,high}", ", operand_precision={highest,highest}",
                          ", algorithm=dot_bf16_bf16_f32_x3", ", algorithm=dot_bf16_bf16_f32"};
    double err[5];
    for (int p = 0; p < 5; p++) {
        tpu_tensor *f = dt_fast(ctx, dt_mm(t1, sizeof t1, prec[p]), TPU_NUMERICS_TPU, 0, a, b, exe_k_dot);
        tpu_tensor *g = dt_fast(ctx, dt_mm(t1, sizeof t1, prec[p]), TPU_NUMERICS_TPU, 0, a, b, exe_k_dot_ref);
        err[p] = INFINITY;
        if (f && g) {
            err[p] = 0;
            for (int64_t i = 0; i < f->count; i++) err[p] = fmax(err[p], fabs(((float *)f->data)[i] - ref[i]));
            /* the reference kernel with the same numerics agrees with the fast one */
            mxt_compare(__FILE__, __LINE__, prec[p], f, g, 256 * 0x1p-22, 0);
        }
        tpu_tensor_free(f);
        tpu_tensor_free(g);
    }
    CHECK_MSG(err[0] > 1e-3 && err[0] < 0.1, "DEFAULT error %g", err[0]);
    CHECK_MSG(err[1] < err[0] / 100, "HIGH error %g should be far below DEFAULT's %g", err[1], err[0]);
    CHECK_MSG(err[2] < 1e-5 && err[2] <= err[1], "HIGHEST error %g (HIGH %g)", err[2], err[1]);
    CHECK_MSG(err[3] == err[1], "bf16_x3 algorithm error %g vs HIGH %g", err[3], err[1]);
    CHECK_MSG(err[4] == err[0], "bf16 algorithm error %g vs DEFAULT %g", err[4], err[0]);
    free(ref);
    tpu_tensor_free(a);
    tpu_tensor_free(b);
    tpu_ctx_free(ctx);
}

TEST(dot_threads_do_not_change_results)
{
    tpu_ctx *ctx = tpu_ctx_new();
    mxt_rng r = {6};
    const char *texts[] = {
        "HloModule t\nENTRY e {\n a = f32[300,200] parameter(0)\n b = f32[200,260] parameter(1)\n"
        " ROOT d = f32[300,260] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, operand_precision={high,high}\n}\n",
        "HloModule t\nENTRY e {\n a = f32[16,20,30] parameter(0)\n b = f32[16,30,10] parameter(1)\n"
        " ROOT d = f32[16,20,10] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}\n}\n",
    };
    for (int i = 0; i < 2; i++) {
        tpu_module *m = mxt_parse(ctx, texts[i]);
        REQUIRE(m);
        tpu_tensor *a, *b;
        mxt_operands(&r, m, &a, &b);
        tpu_tensor *x1 = mxt_run(ctx, m, exe_k_dot, TPU_NUMERICS_TPU, 1, a, b);
        tpu_tensor *x2 = mxt_run(ctx, m, exe_k_dot, TPU_NUMERICS_TPU, 2, a, b);
        tpu_tensor *x3 = mxt_run(ctx, m, exe_k_dot, TPU_NUMERICS_TPU, 3, a, b);
        CHECK(x1 && x2 && x3);
        if (x1 && x2 && x3) {
            CHECK(memcmp(x1->data, x2->data, x1->nbytes) == 0);
            CHECK(memcmp(x1->data, x3->data, x1->nbytes) == 0);
        }
        tpu_tensor *v[] = {a, b, x1, x2, x3};
        for (int k = 0; k < 5; k++) tpu_tensor_free(v[k]);
        tpu_module_free(m);
    }
    tpu_ctx_free(ctx);
}

/* Inconsistent dimension numbers are reported, not run. */
TEST(dot_shape_errors)
{
    tpu_ctx *ctx = tpu_ctx_new();
    mxt_rng r = {7};
    static const struct { const char *body, *msg; } cases[] = {
        {"a = f32[4,5] parameter(0)\n b = f32[6,3] parameter(1)\n ROOT d = f32[4,3] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
         "contracting dimension 0 has size 5 in lhs but 6 in rhs"},
        {"a = f32[4,5] parameter(0)\n b = f32[5,3] parameter(1)\n ROOT d = f32[4,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
         "expected dimensions [4,3]"},
        {"a = f32[4,5] parameter(0)\n b = f32[5,3] parameter(1)\n ROOT d = f32[4,3] dot(a, b), lhs_contracting_dims={2}, rhs_contracting_dims={0}",
         "out of range"},
        {"a = f32[4,5] parameter(0)\n b = f32[5,3] parameter(1)\n ROOT d = f32[3] dot(a, b), lhs_contracting_dims={1,1}, rhs_contracting_dims={0,1}",
         "used twice"},
        {"a = f32[2,4,5] parameter(0)\n b = f32[3,5,3] parameter(1)\n ROOT d = f32[2,4,3] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}",
         "batch dimension 0 has size 2 in lhs but 3 in rhs"},
        {"a = f32[4,5] parameter(0)\n b = f32[5,3] parameter(1)\n ROOT d = f32[4,3] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, rhs_batch_dims={1}",
         "lhs_batch_dims has 0 dimensions but rhs_batch_dims has 1"},
        {"a = c64[4,5] parameter(0)\n b = c64[5,3] parameter(1)\n ROOT d = c64[4,3] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
         "complex"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[1024];
        snprintf(text, sizeof text, "HloModule t\nENTRY e {\n %s\n}\n", cases[i].body);
        tpu_module *m = mxt_parse(ctx, text);
        if (!m) continue;
        tpu_tensor *a, *b;
        mxt_operands(&r, m, &a, &b);
        for (int k = 0; k < 2; k++) {
            tpu_tensor *t = mxt_run(ctx, m, k ? exe_k_dot_ref : exe_k_dot, TPU_NUMERICS_TPU, 0, a, b);
            CHECK(t == NULL);
            tpu_tensor_free(t);
            CHECK_MSG(strstr(tpu_errmsg(ctx), cases[i].msg) != NULL, "message '%s' lacks '%s'", tpu_errmsg(ctx), cases[i].msg);
            CHECK_MSG(strstr(tpu_errmsg(ctx), "mxt.hlo:") != NULL, "message '%s' lacks the location", tpu_errmsg(ctx));
        }
        tpu_tensor_free(a);
        tpu_tensor_free(b);
        tpu_module_free(m);
    }
    tpu_ctx_free(ctx);
}

/* The interpreter dispatches dot to this kernel. */
TEST(dot_through_tpu_run)
{
    tpu_ctx *ctx = tpu_ctx_new();
    const char *text = "HloModule t\nENTRY e {\n a = bf16[8,16] parameter(0)\n b = bf16[16,4] parameter(1)\n"
                       " ROOT d = f32[8,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
    tpu_module *m = mxt_parse(ctx, text);
    REQUIRE(m);
    tpu_tensor **in = NULL, **out = NULL;
    int nin = 0, nout = 0;
    REQUIRE_OK(ctx, tpu_random_inputs(ctx, m, 9, &in, &nin));
    tpu_run_opts o = tpu_run_opts_default();
    CHECK_OK(ctx, tpu_run(ctx, m, &o, in, nin, &out, &nout));
    if (nout == 1) {
        tpu_tensor *g = mxt_run(ctx, m, exe_k_dot_ref, TPU_NUMERICS_TPU, 0, in[0], in[1]);
        mxt_compare(__FILE__, __LINE__, "tpu_run dot", out[0], g, 16 * 0x1p-22, 0);
        tpu_tensor_free(g);
    }
    tpu_tensors_free(in, nin);
    tpu_tensors_free(out, nout);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* f32 subnormal operands read as zero (FTZ/DAZ, as on the TPU and XLA:CPU), in both modes, in place or
 * packed. */
TEST(dot_subnormals_are_zero)
{
    tpu_ctx *ctx = tpu_ctx_new();
    const char *text = "HloModule t\nENTRY e {\n a = f32[2,3] parameter(0)\n b = f32[3,2] parameter(1)\n"
                       " ROOT d = f32[2,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
    tpu_module *m = mxt_parse(ctx, text);
    REQUIRE(m);
    int64_t da[2] = {2, 3}, db[2] = {3, 2};
    tpu_tensor *a = ten_alloc(TPU_F32, 2, da), *b = ten_alloc(TPU_F32, 2, db);
    for (int i = 0; i < 6; i++) {
        ((float *)a->data)[i] = 1e-40f;   /* subnormal */
        ((float *)b->data)[i] = 1e30f;
    }
    for (int mode = 0; mode < 2; mode++) {
        tpu_run_opts o = tpu_run_opts_default();
        o.numerics = mode ? TPU_NUMERICS_EXACT : TPU_NUMERICS_TPU;
        tpu_tensor *in[2] = {a, b}, **out = NULL;
        int nout = 0;
        CHECK_OK(ctx, tpu_run(ctx, m, &o, in, 2, &out, &nout));
        for (int i = 0; nout == 1 && i < 4; i++) CHECK_NEAR(((float *)out[0]->data)[i], 0.0, 0);
        tpu_tensors_free(out, nout);
        tpu_tensor *r = mxt_run(ctx, m, exe_k_dot_ref, o.numerics, 0, a, b);
        for (int i = 0; r && i < 4; i++) CHECK_NEAR(((float *)r->data)[i], 0.0, 0);
        tpu_tensor_free(r);
    }
    tpu_tensor_free(a);
    tpu_tensor_free(b);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* A dot read only by a transpose to (batch, rhs free, lhs free) writes the transposed result itself (the
 * swapped product); the same dot with a second reader is computed plainly and transposed. Both agree, in
 * both numerics modes, for plain, batched and multi-free-dimension dots; a transpose of another order is
 * left alone. */
TEST(dot_transposed_result_written_directly)
{
    static const char *cases[][4] = {
        /* lhs, rhs, dot dims + result, transpose result + dims */
        {"f32[37,53]", "f32[53,29]", "f32[37,29] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
         "f32[29,37] transpose(d), dimensions={1,0}"},
        {"f32[300,64]", "f32[300,200]", "f32[64,200] dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={0}",
         "f32[200,64] transpose(d), dimensions={1,0}"},
        {"bf16[3,17,40]", "bf16[3,40,9]",
         "bf16[3,17,9] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}",
         "bf16[3,9,17] transpose(d), dimensions={0,2,1}"},
        {"f32[4,5,30]", "f32[30,6,7]", "f32[4,5,6,7] dot(a, b), lhs_contracting_dims={2}, rhs_contracting_dims={0}",
         "f32[6,7,4,5] transpose(d), dimensions={2,3,0,1}"},
        {"f32[4,5,30]", "f32[30,6,7]", "f32[4,5,6,7] dot(a, b), lhs_contracting_dims={2}, rhs_contracting_dims={0}",
         "f32[7,6,4,5] transpose(d), dimensions={3,2,0,1}"},   /* not the swap: runs as a transpose */
    };
    tpu_ctx *ctx = tpu_ctx_new();
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char t1[1024], t2[1024];
        snprintf(t1, sizeof t1, "HloModule t\nENTRY e {\n a = %s parameter(0)\n b = %s parameter(1)\n d = %s\n ROOT t = %s\n}\n",
                 cases[c][0], cases[c][1], cases[c][2], cases[c][3]);
        snprintf(t2, sizeof t2,
                 "HloModule t\nENTRY e {\n a = %s parameter(0)\n b = %s parameter(1)\n d = %s\n t = %s\n ROOT r = tuple(t, d)\n}\n",
                 cases[c][0], cases[c][1], cases[c][2], cases[c][3]);
        tpu_module *m1 = mxt_parse(ctx, t1), *m2 = mxt_parse(ctx, t2);
        tpu_tensor **in = NULL;
        int nin = 0;
        if (!m1 || !m2 || tpu_random_inputs(ctx, m1, 3, &in, &nin) != TPU_OK) {
            test_fail(__FILE__, __LINE__, "case %zu: %s", c, tpu_errmsg(ctx));
        } else {
            for (int md = 0; md < 2; md++) {
                tpu_run_opts o = tpu_run_opts_default();
                o.numerics = md ? TPU_NUMERICS_EXACT : TPU_NUMERICS_TPU;
                tpu_tensor **o1 = NULL, **o2 = NULL;
                int n1 = 0, n2 = 0;
                CHECK_OK(ctx, tpu_run(ctx, m1, &o, in, nin, &o1, &n1));
                CHECK_OK(ctx, tpu_run(ctx, m2, &o, in, nin, &o2, &n2));
                if (n1 == 1 && n2 == 2) {
                    char what[64];
                    const int64_t *d1 = tpu_tensor_dims(o1[0]), *d2 = tpu_tensor_dims(o2[0]);
                    CHECK(tpu_tensor_rank(o1[0]) == tpu_tensor_rank(o2[0]));
                    for (int k = 0; k < tpu_tensor_rank(o1[0]) && k < tpu_tensor_rank(o2[0]); k++) CHECK(d1[k] == d2[k]);
                    /* the same products; only BLAS's blocking (which differs between CPUs: Zen and Skylake
                     * kernels split k differently) may change the summation order: up to k ulps of the result */
                    mxt_compare(__FILE__, __LINE__, mxt_fmt(what, sizeof what, "case %zu mode %d", c, md), o1[0], o2[0],
                                64 * 0x1p-24, 300 * 0x1p-24);
                }
                if (o1) tpu_tensors_free(o1, n1);
                if (o2) tpu_tensors_free(o2, n2);
            }
        }
        if (in) tpu_tensors_free(in, nin);
        tpu_module_free(m1);
        tpu_module_free(m2);
    }
    tpu_ctx_free(ctx);
}

/* Runs the one-output program `text` on random inputs (seed) with the fast kernels and with the reference ones
 * (EXE_REF_KERNELS), in both numerics modes, on 1 to max_threads threads: the bits must match (`what` says what
 * differed) and the result's sum of magnitudes must exceed min_sum (not all zeros) and not be NaN. */
static void dot_loop_fast_vs_ref(const char *text, int seed, int max_threads, double min_sum, const char *what)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = mxt_parse(ctx, text);
    REQUIRE(m);
    tpu_tensor **in = NULL;
    int nin = 0;
    REQUIRE_OK(ctx, tpu_random_inputs(ctx, m, seed, &in, &nin));
    for (int md = 0; md < 2; md++)
        for (int th = 1; th <= max_threads; th++) {
            tpu_tensor **out[2] = {NULL, NULL};
            int nout[2] = {0, 0};
            for (int ref = 0; ref < 2; ref++) {
                tpu_run_opts o = tpu_run_opts_default();
                o.numerics = md ? TPU_NUMERICS_EXACT : TPU_NUMERICS_TPU;
                if (max_threads > 1) o.threads = th;
                exe_run_cfg cfg = {.ref = ref ? EXE_REF_KERNELS : 0};
                CHECK_OK(ctx, exe_run(ctx, m, &o, &cfg, in, nin, &out[ref], &nout[ref]));
            }
            if (nout[0] == 1 && nout[1] == 1) {
                CHECK_MSG(!memcmp(tpu_tensor_cdata(out[0][0]), tpu_tensor_cdata(out[1][0]), tpu_tensor_nbytes(out[0][0])),
                          "mode %d, %d threads: %s", md, th, what);
                double sum = 0;
                for (int64_t i = 0; i < tpu_tensor_count(out[0][0]); i++) sum += fabs(tpu_tensor_get_f64(out[0][0], i));
                CHECK_MSG(sum > min_sum && sum == sum, "sum %g", sum);
            }
            for (int ref = 0; ref < 2; ref++) tpu_tensors_free(out[ref], nout[ref]);
        }
    tpu_tensors_free(in, nin);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* A while loop's weights are packed once (dot.c's loop cache): the loop gives the same bits as the run that
 * packs B at every product (EXE_REF_KERNELS turns the cache off), in both modes and on 1 and 2 threads. The
 * body has an invariant B read as is (w), the same one read transposed (rhs contracting dim 1) and through a
 * dot whose result is transposed (the operands swap roles), and a B updated every iteration (v, in place
 * when nobody holds it), whose pack must never be reused stale. */
TEST(dot_loop_weights_packed_once)
{
    static const char *text =
        "HloModule loopw\n"
        "cond {\n p = (s32[], f32[32,64], f32[64,96], f32[96,64]) parameter(0)\n i = s32[] get-tuple-element(p), index=0\n"
        " n = s32[] constant(7)\n ROOT lt = pred[] compare(i, n), direction=LT\n}\n"
        "body {\n p = (s32[], f32[32,64], f32[64,96], f32[96,64]) parameter(0)\n i = s32[] get-tuple-element(p), index=0\n"
        " h = f32[32,64] get-tuple-element(p), index=1\n w = f32[64,96] get-tuple-element(p), index=2\n"
        " v = f32[96,64] get-tuple-element(p), index=3\n one = s32[] constant(1)\n i1 = s32[] add(i, one)\n"
        " d = f32[32,96] dot(h, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n t = f32[32,96] tanh(d)\n"
        " e = f32[32,64] dot(t, v), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        " g = f32[32,64] dot(t, w), lhs_contracting_dims={1}, rhs_contracting_dims={1}\n"
        " q = f32[96,32] dot(w, h), lhs_contracting_dims={0}, rhs_contracting_dims={1}\n"
        " qt = f32[32,96] transpose(q), dimensions={1,0}\n"
        " f = f32[32,64] dot(qt, v), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        " s = f32[32,64] add(e, g)\n s2 = f32[32,64] add(s, f)\n h2 = f32[32,64] tanh(s2)\n"
        " c = f32[] constant(0.75)\n cb = f32[96,64] broadcast(c), dimensions={}\n v2 = f32[96,64] multiply(v, cb)\n"
        " ROOT r = (s32[], f32[32,64], f32[64,96], f32[96,64]) tuple(i1, h2, w, v2)\n}\n"
        "ENTRY e {\n h0 = f32[32,64] parameter(0)\n w = f32[64,96] parameter(1)\n v = f32[96,64] parameter(2)\n"
        " z = s32[] constant(0)\n t = (s32[], f32[32,64], f32[64,96], f32[96,64]) tuple(z, h0, w, v)\n"
        " l = (s32[], f32[32,64], f32[64,96], f32[96,64]) while(t), condition=cond, body=body\n"
        " ROOT h = f32[32,64] get-tuple-element(l), index=1\n}\n";
    dot_loop_fast_vs_ref(text, 5, 2, 1.0, "the loop with packed weights differs from packing every time");
}

/* Dots inside a loop keep their plans for the run (dot.c dot_prepare_cached, an open-addressing table that
 * grows past 16 plans): 30 distinct dots — plain, transposed-result (operands swapped), batched, bf16, int8,
 * f64 and integer — run 3 times give the same bits as the run that builds every plan afresh
 * (EXE_REF_KERNELS), in both modes. */
TEST(dot_loop_plans_cached)
{
    char text[16384];
    int w = 0;
    w += snprintf(text + w, sizeof text - (size_t)w,
                  "HloModule plans\nadd {\n x = f32[] parameter(0)\n y = f32[] parameter(1)\n ROOT s = f32[] add(x, y)\n}\n"
                  "cond {\n p = (s32[], f32[16,24]) parameter(0)\n i = s32[] get-tuple-element(p), index=0\n"
                  " n = s32[] constant(3)\n ROOT lt = pred[] compare(i, n), direction=LT\n}\n"
                  "body {\n p = (s32[], f32[16,24]) parameter(0)\n i = s32[] get-tuple-element(p), index=0\n"
                  " h = f32[16,24] get-tuple-element(p), index=1\n one = s32[] constant(1)\n i1 = s32[] add(i, one)\n"
                  " hb = bf16[16,24] convert(h)\n h8 = s8[16,24] convert(h)\n hd = f64[16,24] convert(h)\n"
                  " h3 = f32[4,4,24] reshape(h)\n acc0 = f32[16,24] multiply(h, h)\n");
    for (int k = 0; k < 6; k++) {
        w += snprintf(text + w, sizeof text - (size_t)w,
                      " a%d = f32[24,24] dot(h, h), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
                      " b%d = f32[16,24] dot(h, a%d), lhs_contracting_dims={1}, rhs_contracting_dims={%d}\n"
                      " c%d = f32[16,16] dot(h, h), lhs_contracting_dims={1}, rhs_contracting_dims={1}\n"
                      " ct%d = f32[16,16] transpose(c%d), dimensions={1,0}\n",
                      k, k, k, k % 2, k, k, k);
        w += snprintf(text + w, sizeof text - (size_t)w,
                      " e%d = %s dot(%s, %s), %s\n", k,
                      k % 3 == 0 ? "f32[4,4,4]" : k % 3 == 1 ? "f32[16,16]" : "s32[16,16]",
                      k % 3 == 0 ? "h3" : k % 3 == 1 ? "hb" : "h8", k % 3 == 0 ? "h3" : k % 3 == 1 ? "hb" : "h8",
                      k % 3 == 0 ? "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={2}"
                                 : "lhs_contracting_dims={1}, rhs_contracting_dims={1}");
        if (k % 3 == 0)   /* the batched dot's sum, spread */
            w += snprintf(text + w, sizeof text - (size_t)w,
                          " z%d = f32[] constant(0)\n er%d = f32[] reduce(e%d, z%d), dimensions={0,1,2}, to_apply=add\n"
                          " u%d = f32[16,24] broadcast(er%d), dimensions={}\n", k, k, k, k, k, k);
        else
            w += snprintf(text + w, sizeof text - (size_t)w,
                          " ef%d = f32[16,16] convert(e%d)\n u%d = f32[16,24] dot(ef%d, h), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n",
                          k, k, k, k);
        w += snprintf(text + w, sizeof text - (size_t)w,
                      " s%d = f32[16,24] dot(ct%d, b%d), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                      " sv%d = f32[16,24] add(s%d, u%d)\n"
                      " t%d = f32[16,24] tanh(sv%d)\n acc%d = f32[16,24] add(acc%d, t%d)\n",
                      k, k, k, k, k, k, k, k, k + 1, k, k);
    }
    w += snprintf(text + w, sizeof text - (size_t)w,
                  " dd = f64[16,16] dot(hd, hd), lhs_contracting_dims={1}, rhs_contracting_dims={1}\n"
                  " ddf = f32[16,16] convert(dd)\n d2 = f32[16,24] dot(ddf, acc6), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                  " sc = f32[] constant(0.001)\n scb = f32[16,24] broadcast(sc), dimensions={}\n d3 = f32[16,24] multiply(d2, scb)\n"
                  " h2a = f32[16,24] tanh(d3)\n hh = f32[16,24] tanh(h)\n h2 = f32[16,24] add(h2a, hh)\n ROOT r = (s32[], f32[16,24]) tuple(i1, h2)\n}\n"
                  "ENTRY e {\n h0 = f32[16,24] parameter(0)\n z = s32[] constant(0)\n t = (s32[], f32[16,24]) tuple(z, h0)\n"
                  " l = (s32[], f32[16,24]) while(t), condition=cond, body=body\n ROOT h = f32[16,24] get-tuple-element(l), index=1\n}\n");
    REQUIRE(w < (int)sizeof text - 16);
    dot_loop_fast_vs_ref(text, 8, 1, 0.5, "the loop with cached plans differs from building them every time");
}

/* Small f32 dots inside a loop decode their attributes once (dot.c dot_tiny_memo, 16 slots mapped by
 * instruction): 24 distinct tiny dots — every pair of contracting dims, default, high and highest precision,
 * so slots are shared and a mixed-up entry would give other terms — run 3 times give the same bits as the
 * general path (EXE_REF_KERNELS), in both modes. */
TEST(dot_loop_tiny_memo)
{
    static const char *prec[3] = {"", ", operand_precision={high,high}", ", operand_precision={highest,highest}"};
    char text[16384];
    int w = 0;
    w += snprintf(text + w, sizeof text - (size_t)w,
                  "HloModule tiny\ncond {\n p = (s32[], f32[8,8]) parameter(0)\n i = s32[] get-tuple-element(p), index=0\n"
                  " n = s32[] constant(3)\n ROOT lt = pred[] compare(i, n), direction=LT\n}\n"
                  "body {\n p = (s32[], f32[8,8]) parameter(0)\n i = s32[] get-tuple-element(p), index=0\n"
                  " h = f32[8,8] get-tuple-element(p), index=1\n one = s32[] constant(1)\n i1 = s32[] add(i, one)\n"
                  " acc0 = f32[8,8] multiply(h, h)\n");
    for (int k = 0; k < 24; k++)
        w += snprintf(text + w, sizeof text - (size_t)w,
                      " d%d = f32[8,8] dot(h, acc%d), lhs_contracting_dims={%d}, rhs_contracting_dims={%d}%s\n"
                      " t%d = f32[8,8] tanh(d%d)\n acc%d = f32[8,8] add(acc%d, t%d)\n",
                      k, k, (k >> 1) & 1, k & 1, prec[(k / 4) % 3], k, k, k + 1, k, k);
    w += snprintf(text + w, sizeof text - (size_t)w,
                  " ROOT r = (s32[], f32[8,8]) tuple(i1, acc24)\n}\n"
                  "ENTRY e {\n h0 = f32[8,8] parameter(0)\n z = s32[] constant(0)\n t = (s32[], f32[8,8]) tuple(z, h0)\n"
                  " l = (s32[], f32[8,8]) while(t), condition=cond, body=body\n ROOT h = f32[8,8] get-tuple-element(l), index=1\n}\n");
    REQUIRE(w < (int)sizeof text - 16);
    dot_loop_fast_vs_ref(text, 9, 1, 0.5, "the loop's tiny dots differ from the general path");
}
