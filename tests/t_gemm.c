/* t_gemm.c — the executor's matrix multiply (src/exec/kernels/gemm.c) against exe_gemm_ref: every microkernel
 * (portable, avx2, avx512, avx512bf16, the ones this CPU has) bit for bit, OpenBLAS (default) within an f32
 * accumulation bound, on random shapes (odd sizes, several cache blocks along M, N and K), operand layouts
 * (row-/column-major, padded, both strided), dtypes (f32, bf16), parts (as is, hi, lo), accumulate 0/1 and
 * 1 or 2 threads; plus signed zeros with an odd K (the bf16 kernel's pad) and the kernel names. */
#include "test.h"
#include "exec/kernels/gemm.h"
#include "exec/kernels/mxu.h"
#include "util/fp.h"

#include <stdlib.h>

typedef struct gt_rng {
    uint64_t s;
} gt_rng;

static uint64_t gt_next(gt_rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int64_t gt_int(gt_rng *r, int64_t lo, int64_t hi) { return lo + (int64_t)(gt_next(r) % (uint64_t)(hi - lo + 1)); }

/* A normal f32 in about [-4, 4] with a full mantissa (so hi/lo parts and roundings all occur), 1 in 32 a
 * signed zero. */
static float gt_val(gt_rng *r)
{
    uint64_t z = gt_next(r);
    if ((z & 31) == 0) return (z & 32) ? -0.0f : 0.0f;
    uint32_t u = (uint32_t)((z >> 8) & 0x807FFFFFu) | ((uint32_t)(124 + (z >> 40) % 5) << 23);
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* One operand (rows x cols) in a buffer of its dtype with one of four layouts. */
typedef struct gt_op {
    exe_gemm_src s;
    void        *buf;
} gt_op;

static int gt_make(gt_rng *r, gt_op *o, int64_t rows, int64_t cols, int bf16, exe_mx_part part, int layout)
{
    int64_t rs, cs, n;
    switch (layout) {
    case 0: cs = 1, rs = cols, n = rows * cols; break;                                  /* row-major */
    case 1: rs = 1, cs = rows, n = rows * cols; break;                                  /* column-major */
    case 2: cs = 1, rs = cols + 3, n = rows * rs; break;                                /* padded rows */
    default: cs = 2, rs = 2 * cols + 1, n = rows * rs; break;                           /* both strided */
    }
    o->buf = malloc((size_t)n * (bf16 ? 2 : 4));
    if (!o->buf) return 0;
    for (int64_t i = 0; i < n; i++) {
        float x = gt_val(r);
        if (bf16) ((uint16_t *)o->buf)[i] = fp_f32_to_bf16_inline(x);
        else ((float *)o->buf)[i] = x;
    }
    o->s.p = o->buf;
    o->s.dtype = bf16 ? TPU_BF16 : TPU_F32;
    o->s.rs = rs;
    o->s.cs = cs;
    o->s.part = part;
    return 1;
}

/* The value gemm reads for element (r, c) (mxu.h's loaders). */
static double gt_get(const exe_gemm_src *s, int64_t r, int64_t c)
{
    int64_t off = r * s->rs + c * s->cs;
    if (s->dtype == TPU_BF16) return s->part == EXE_MX_LO ? 0.0 : exe_mx_daz(fp_bf16_to_f32_inline(((const uint16_t *)s->p)[off]));
    float x = ((const float *)s->p)[off];
    return s->part == EXE_MX_HI ? exe_mx_hi(x) : s->part == EXE_MX_LO ? exe_mx_lo(x) : exe_mx_daz(x);
}

static const char *const gt_kernels[] = {"portable", "avx2", "avx512", "avx512bf16", "openblas", NULL};
#define GT_NK ((int)(sizeof gt_kernels / sizeof gt_kernels[0]))

/* Is the kernel `name` what exe_gemm_force(name) gives on this CPU? (else the test skips it) */
static int gt_have(const char *name)
{
    exe_gemm_force(name);
    const char *got = exe_gemm_kernel_name();
    return name == NULL || !strcmp(got, name);
}

/* Runs one case with every kernel; returns the number of mismatching kernels. */
static int gt_case(gt_rng *r, int64_t M, int64_t N, int64_t K, const int *have, int verbose)
{
    static const exe_mx_part parts[] = {EXE_MX_AS_IS, EXE_MX_HI, EXE_MX_LO};
    int abf = (int)gt_int(r, 0, 1), bbf = (int)gt_int(r, 0, 1);
    /* mostly the parts a dot uses: hi (f32 DEFAULT), as is (bf16, exact mode) */
    exe_mx_part ap = parts[gt_int(r, 0, 5) % 3], bp = parts[gt_int(r, 0, 5) % 3];
    int al = (int)gt_int(r, 0, 3), bl = (int)gt_int(r, 0, 3), acc = (int)gt_int(r, 0, 1), th = (int)gt_int(r, 1, 2);
    int64_t ldc = N + gt_int(r, 0, 2);
    gt_op A, B;
    memset(&A, 0, sizeof A);
    memset(&B, 0, sizeof B);
    float *C0 = malloc((size_t)(M * ldc) * sizeof(float)), *Cr = malloc((size_t)(M * ldc) * sizeof(float));
    float *Ck = malloc((size_t)(M * ldc) * sizeof(float));
    double *bound = malloc((size_t)(M * N) * sizeof(double));
    int bad = 0;
    if (!C0 || !Cr || !Ck || !bound || !gt_make(r, &A, M, K, abf, ap, al) || !gt_make(r, &B, K, N, bbf, bp, bl)) {
        test_fail(__FILE__, __LINE__, "out of memory");
        bad = 1;
        goto done;
    }
    for (int64_t i = 0; i < M * ldc; i++) C0[i] = gt_val(r);
    memcpy(Cr, C0, (size_t)(M * ldc) * sizeof(float));
    exe_gemm_ref(M, N, K, &A.s, &B.s, Cr, ldc, acc);
    /* |error| of any f32 summation order <= (K + 1) u sum |terms| (u = 2^-24), doubled for slack */
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = acc ? fabs((double)C0[i * ldc + j]) : 0.0;
            for (int64_t k = 0; k < K; k++) s += fabs(gt_get(&A.s, i, k) * gt_get(&B.s, k, j));
            bound[i * N + j] = 2.0 * (double)(K + 1) * s * 0x1p-24 + 1e-30;
        }
    for (int kn = 0; kn < GT_NK; kn++) {
        if (!have[kn]) continue;
        const char *name = gt_kernels[kn];
        int exact = name && strcmp(name, "openblas");
        exe_gemm_force(name);
        memcpy(Ck, C0, (size_t)(M * ldc) * sizeof(float));
        exe_gemm(th, M, N, K, &A.s, &B.s, Ck, ldc, acc);
        int64_t nbad = 0, first = -1;
        for (int64_t i = 0; i < M; i++) {
            for (int64_t j = 0; j < N; j++) {
                float g = Ck[i * ldc + j], w = Cr[i * ldc + j];
                int ok = exact ? !memcmp(&g, &w, sizeof g) : fabs((double)g - (double)w) <= bound[i * N + j];
                if (!ok && nbad++ == 0) first = i * ldc + j;
            }
            /* the padding between rows is never written */
            for (int64_t j = N; j < ldc; j++)
                if (memcmp(&Ck[i * ldc + j], &C0[i * ldc + j], sizeof(float)) && nbad++ == 0) first = i * ldc + j;
        }
        if (nbad) {
            bad++;
            test_fail(__FILE__, __LINE__,
                      "%s: M=%lld N=%lld K=%lld A %s/%d layout %d, B %s/%d layout %d, acc %d, %d threads: %lld wrong, "
                      "first C[%lld][%lld] = %a, ref %a",
                      name ? name : "default", (long long)M, (long long)N, (long long)K, abf ? "bf16" : "f32", (int)ap,
                      al, bbf ? "bf16" : "f32", (int)bp, bl, acc, th, (long long)nbad, (long long)(first / ldc),
                      (long long)(first % ldc), (double)Ck[first], (double)Cr[first]);
        } else if (verbose) {
            printf("    ok %s M=%lld N=%lld K=%lld\n", name ? name : "default", (long long)M, (long long)N, (long long)K);
        }
    }
done:
    free(A.buf);
    free(B.buf);
    free(C0);
    free(Cr);
    free(Ck);
    free(bound);
    return bad;
}

TEST(gemm_kernels_vs_ref)
{
    int have[GT_NK];
    for (int k = 0; k < GT_NK; k++) have[k] = gt_have(gt_kernels[k]);
    REQUIRE(have[0] && have[GT_NK - 1] && have[GT_NK - 2]);
    printf("  gemm kernels on this CPU:");
    for (int k = 0; k < GT_NK; k++)
        if (have[k]) printf(" %s", gt_kernels[k] ? gt_kernels[k] : "default");
    printf("\n");
    gt_rng r = {20240611};
    /* small and odd sizes, tile and block edges (MR 4/6/12, NR 16/32, KC 256, bf16 KC 512, MC 64/120/240) */
    static const int64_t small[] = {1, 2, 3, 5, 7, 12, 13, 16, 17, 31, 33, 47, 64, 65, 97};
    static const int64_t mid[] = {100, 127, 129, 200, 241, 255, 257, 300};
    int fails = 0;
    for (int c = 0; c < 90 && fails < 5; c++) {
        int64_t d[3];
        for (int i = 0; i < 3; i++)
            d[i] = gt_int(&r, 0, 2) ? small[gt_int(&r, 0, 14)] : mid[gt_int(&r, 0, 7)];
        fails += gt_case(&r, d[0], d[1], d[2], have, 0) != 0;
    }
    /* several blocks along each dimension: K over both KCs, M over MC, N over NC (3072) */
    /* ... and few columns (a convolution's 6 output features, a matrix-vector product): run as C^T = B^T A^T */
    static const int64_t big[][3] = {{250, 70, 530}, {61, 45, 1031}, {490, 33, 77}, {7, 3100, 9}, {13, 3107, 40},
                                     {300, 6, 400}, {700, 1, 130}};
    for (int c = 0; c < 7; c++) fails += gt_case(&r, big[c][0], big[c][1], big[c][2], have, 0) != 0;
    CHECK_EQ_INT(fails, 0);
    exe_gemm_force(NULL);
    /* the default: the AVX-512 microkernels where the CPU has them (the bf16 one where it is faster), else OpenBLAS */
    CHECK(strncmp(exe_gemm_kernel_name(), "openblas", 8) == 0 || strncmp(exe_gemm_kernel_name(), "avx512", 6) == 0);
}

/* Skinny products (gemm.c's row-by-row B packing split over threads, its partial-row tiles of the AVX-512
 * kernel, prefetching packers): few rows with many columns and the reverse, M not a multiple of the tile
 * height, N with a partial last panel and over NC, K over KC (the tiles that prefetch the next block of B,
 * or of A; on 2 threads, the split into one product per thread); each shape 3 times (random layouts, parts, threads, accumulate), every microkernel bit for bit
 * with exe_gemm_ref. */
TEST(gemm_skinny_vs_ref)
{
    int have[GT_NK];
    for (int k = 0; k < GT_NK; k++) have[k] = gt_have(gt_kernels[k]);
    gt_rng r = {20261128};
    static const int64_t sh[][3] = {{64, 320, 300}, {64, 100, 520}, {5, 330, 260},  {11, 64, 513},  {100, 97, 600},
                                    {29, 3105, 270}, {257, 70, 300}, {64, 4100, 40}, {250, 64, 700}, {1, 300, 300},
                                    {23, 33, 257},  {247, 32, 100}, {300, 64, 512}, {490, 100, 260},
                                    {260, 33, 256}, {1000, 64, 300}, {1210, 33, 260}, {100, 1000, 100}};
    int fails = 0;
    for (int c = 0; c < (int)(sizeof sh / sizeof sh[0]); c++)
        for (int rep = 0; rep < 3; rep++) fails += gt_case(&r, sh[c][0], sh[c][1], sh[c][2], have, 0) != 0;
    CHECK_EQ_INT(fails, 0);
    exe_gemm_force(NULL);
}

/* Signed zeros through every microkernel, K odd and even: C = -0 accumulated with zero products keeps its sign
 * exactly as the FMA chain does (the bf16 kernel pads odd K with -0 * +0, which adds nothing). */
TEST(gemm_signed_zeros)
{
    for (int64_t K = 5; K <= 6; K++) {
        enum { M = 40, N = 40 };
        float A[M * 6], B[6 * N], Cr[M * N], Ck[M * N], C0[M * N];
        for (int i = 0; i < M * 6; i++) A[i] = (i % 3) ? -0.0f : 0.0f;
        for (int i = 0; i < 6 * N; i++) B[i] = (i % 5) ? 0.0f : -0.0f;
        for (int i = 0; i < M * N; i++) C0[i] = (i % 2) ? -0.0f : 0.0f;
        /* row i of A all -0 when i % 4 == 1 (then products are -0 * B) */
        for (int i = 0; i < M; i++)
            if (i % 4 == 1)
                for (int k = 0; k < K; k++) A[i * K + k] = -0.0f;
        exe_gemm_src a = {A, TPU_F32, K, 1, EXE_MX_HI}, b = {B, TPU_F32, N, 1, EXE_MX_HI};
        for (int acc = 0; acc <= 1; acc++) {
            memcpy(Cr, C0, sizeof Cr);
            exe_gemm_ref(M, N, K, &a, &b, Cr, N, acc);
            for (int kn = 0; kn < GT_NK; kn++) {
                /* OpenBLAS adds beta*C to its own sum: signs of zero are not part of its contract */
                if (!gt_kernels[kn] || !strcmp(gt_kernels[kn], "openblas") || !gt_have(gt_kernels[kn])) continue;
                memcpy(Ck, C0, sizeof Ck);
                exe_gemm(1, M, N, K, &a, &b, Ck, N, acc);
                int nbad = 0;
                for (int i = 0; i < M * N; i++) nbad += memcmp(&Ck[i], &Cr[i], sizeof(float)) != 0;
                CHECK_MSG(nbad == 0, "%s: K=%lld acc=%d: %d signs of zero differ", gt_kernels[kn] ? gt_kernels[kn] : "default",
                          (long long)K, acc, nbad);
            }
        }
    }
    exe_gemm_force(NULL);
}

/* Tiny products (what exe_gemm gives M*N*K < 4096: loop bodies' 8x8 dots): the register-blocked AVX-512
 * kernel and the stack-block one against exe_gemm_ref bit for bit, on every row-block edge (8, 4, 1 rows),
 * column widths on both sides of 16, all operand layouts, dtypes, parts, accumulate 0/1, signed zeros and
 * values whose products round (the hi/lo parts); C's padding columns stay as they were. */
TEST(gemm_tiny_vs_ref)
{
    gt_rng r = {9001};
    static const exe_mx_part parts[] = {EXE_MX_AS_IS, EXE_MX_HI, EXE_MX_LO};
    int ran[2] = {0, 0}, fails = 0;
    for (int c = 0; c < 400 && fails < 5; c++) {
        int64_t M = gt_int(&r, 1, 19), N = gt_int(&r, 1, 35), K = gt_int(&r, 1, 24);
        if (c < 4) M = N = K = 8;   /* the scan body's dot */
        int abf = (int)gt_int(&r, 0, 1), bbf = (int)gt_int(&r, 0, 1), acc = (int)gt_int(&r, 0, 1);
        exe_mx_part ap = parts[gt_int(&r, 0, 2)], bp = parts[gt_int(&r, 0, 2)];
        int64_t ldc = N + gt_int(&r, 0, 2);
        gt_op A, B;
        memset(&A, 0, sizeof A);
        memset(&B, 0, sizeof B);
        float *C0 = malloc((size_t)(M * ldc) * sizeof(float)), *Cr = malloc((size_t)(M * ldc) * sizeof(float));
        float *Ck = malloc((size_t)(M * ldc) * sizeof(float));
        REQUIRE(C0 && Cr && Ck && gt_make(&r, &A, M, K, abf, ap, (int)gt_int(&r, 0, 3)) &&
                gt_make(&r, &B, K, N, bbf, bp, (int)gt_int(&r, 0, 3)));
        for (int64_t i = 0; i < M * ldc; i++) C0[i] = gt_val(&r);
        memcpy(Cr, C0, (size_t)(M * ldc) * sizeof(float));
        exe_gemm_ref(M, N, K, &A.s, &B.s, Cr, ldc, acc);
        for (int which = 0; which < 3; which++) {
            memcpy(Ck, C0, (size_t)(M * ldc) * sizeof(float));
            if (which < 2 && !exe_gemm_tiny(which, M, N, K, &A.s, &B.s, Ck, ldc, acc)) continue;
            if (which == 2) exe_gemm(1, M, N, K, &A.s, &B.s, Ck, ldc, acc);
            else ran[which]++;
            int nbad = 0;
            for (int64_t i = 0; i < M * ldc; i++) nbad += memcmp(&Ck[i], &Cr[i], sizeof(float)) != 0;
            if (nbad) {
                fails++;
                test_fail(__FILE__, __LINE__, "%s: M=%lld N=%lld K=%lld acc %d parts %d/%d: %d of %lld differ",
                          which == 0 ? "tiny" : which == 1 ? "small" : "exe_gemm", (long long)M, (long long)N,
                          (long long)K, acc, (int)ap, (int)bp, nbad, (long long)(M * ldc));
            }
        }
        free(A.buf);
        free(B.buf);
        free(C0);
        free(Cr);
        free(Ck);
    }
    CHECK_EQ_INT(fails, 0);
    CHECK(ran[1] == 400);
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) CHECK(ran[0] == 400);   /* the fast kernel did run */
#endif
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* Partial sums at the subnormal boundary under FTZ/DAZ (as tpu_run runs): the microkernels, VDPBF16PS (which
 * flushes whatever the mode) included, still give exe_gemm_ref's bits. */
TEST(gemm_subnormal_sums_ftz_daz)
{
    enum { M = 29, N = 45, K = 37 };
    float A[M * K], B[K * N], C0[M * N], Cr[M * N], Ck[M * N];
    gt_rng r = {77};
    for (int i = 0; i < M * K; i++) A[i] = ldexpf(gt_val(&r), -63);
    for (int i = 0; i < K * N; i++) B[i] = ldexpf(gt_val(&r), -62);
    for (int i = 0; i < M * N; i++) C0[i] = ldexpf(gt_val(&r), -125 - (i % 3));   /* some subnormal */
    unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040);
    exe_gemm_src a = {A, TPU_F32, K, 1, EXE_MX_HI}, b = {B, TPU_F32, N, 1, EXE_MX_HI};
    int nsub = 0;
    for (int acc = 0; acc <= 1; acc++) {
        memcpy(Cr, C0, sizeof Cr);
        exe_gemm_ref(M, N, K, &a, &b, Cr, N, acc);
        for (int i = 0; i < M * N; i++) nsub += Cr[i] != 0 && fabsf(Cr[i]) < 0x1p-120f;
        for (int kn = 0; kn < GT_NK; kn++) {
            if (!gt_kernels[kn] || !strcmp(gt_kernels[kn], "openblas") || !gt_have(gt_kernels[kn])) continue;
            memcpy(Ck, C0, sizeof Ck);
            exe_gemm(1, M, N, K, &a, &b, Ck, N, acc);
            int nbad = 0;
            for (int i = 0; i < M * N; i++) nbad += memcmp(&Ck[i], &Cr[i], sizeof(float)) != 0;
            CHECK_MSG(nbad == 0, "%s: acc=%d: %d of %d differ under FTZ/DAZ", gt_kernels[kn], acc, nbad, M * N);
        }
    }
    _mm_setcsr(csr);
    CHECK(nsub > 0);   /* the sums do come near the subnormal range */
    exe_gemm_force(NULL);
}
#endif

/* int8 dots: exe_gemm_s8 (VPDPBUSD where the CPU has it) against exe_gemm_s8_ref bit for bit, on odd shapes
 * (8-row and 32-column tile edges, K not a multiple of 4), row- and column-major operands, 1 and 2 threads,
 * values over all of [-128, 127] (extremes included), and one product whose sums wrap past 2^31. */
static int gt_s8_case(gt_rng *r, int64_t M, int64_t N, int64_t K, int extreme)
{
    int8_t *A = malloc((size_t)(M * K)), *B = malloc((size_t)(K * N));
    int64_t *amo = malloc((size_t)(M + K + K + N) * sizeof *amo), *ako = amo + M, *bko = ako + K, *bno = bko + K;
    int32_t *Cf = malloc((size_t)(M * N) * sizeof *Cf), *Cr = malloc((size_t)(M * N) * sizeof *Cr);
    int bad = 0;
    if (!A || !B || !amo || !Cf || !Cr) {
        test_fail(__FILE__, __LINE__, "out of memory");
        bad = 1;
        goto done;
    }
    for (int64_t i = 0; i < M * K; i++) A[i] = (int8_t)(extreme ? -128 : (int)(gt_next(r) & 255) - 128);
    for (int64_t i = 0; i < K * N; i++) B[i] = (int8_t)(extreme ? -128 : (int)(gt_next(r) & 255) - 128);
    int acm = (int)gt_int(r, 0, 1), bcm = (int)gt_int(r, 0, 1);   /* column-major A / B */
    for (int64_t i = 0; i < M; i++) amo[i] = acm ? i : i * K;
    for (int64_t k = 0; k < K; k++) ako[k] = acm ? k * M : k;
    for (int64_t k = 0; k < K; k++) bko[k] = bcm ? k : k * N;
    for (int64_t j = 0; j < N; j++) bno[j] = bcm ? j * K : j;
    exe_gemm_s8_ref(M, N, K, A, amo, ako, B, bko, bno, Cr);
    for (int th = 1; th <= 2; th++) {
        memset(Cf, 0x5A, (size_t)(M * N) * sizeof *Cf);
        exe_gemm_s8(th, M, N, K, A, amo, ako, B, bko, bno, Cf);
        if (memcmp(Cf, Cr, (size_t)(M * N) * sizeof *Cf)) {
            test_fail(__FILE__, __LINE__, "s8 gemm %lldx%lldx%lld (%d threads): differs from the reference", (long long)M,
                      (long long)N, (long long)K, th);
            bad = 1;
        }
    }
done:
    free(A);
    free(B);
    free(amo);
    free(Cf);
    free(Cr);
    return bad;
}

TEST(gemm_s8_vs_ref)
{
    printf("  s8 gemm: %s\n", exe_gemm_s8_available() ? "avx512vnni" : "reference only");
    gt_rng r = {77};
    static const int64_t sz[] = {1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 65, 100, 129};
    int fails = 0;
    for (int c = 0; c < 60 && fails < 3; c++)
        fails += gt_s8_case(&r, sz[gt_int(&r, 0, 16)], sz[gt_int(&r, 0, 16)], sz[gt_int(&r, 0, 16)], 0);
    fails += gt_s8_case(&r, 70, 90, 1030, 0);
    fails += gt_s8_case(&r, 9, 33, 140000, 1);   /* 140000 * 2^14 > 2^31: the sums wrap */
    CHECK_EQ_INT(fails, 0);
}

/* A B packed once (exe_gemm_bpack, a loop's weights) gives exe_gemm's bits on every kernel, part and layout;
 * the pack is what is read (B changed after packing still gives the packed B's product), and a pack made for
 * another B or size is ignored. */
TEST(gemm_bpack_vs_gemm)
{
    gt_rng r = {4242};
    static const int64_t shapes[][3] = {{32, 384, 128}, {13, 70, 600}, {40, 3100, 9}, {5, 33, 17}, {300, 64, 257}, {2, 8, 5}};
    static const exe_mx_part parts[] = {EXE_MX_AS_IS, EXE_MX_HI, EXE_MX_LO};
    int made = 0;
    for (int kn = 0; kn < GT_NK; kn++) {
        if (!gt_have(gt_kernels[kn])) continue;
        exe_gemm_force(gt_kernels[kn]);
        for (int c = 0; c < 6; c++) {
            int64_t M = shapes[c][0], N = shapes[c][1], K = shapes[c][2];
            gt_op A, B;
            int bf = (int)gt_int(&r, 0, 1);
            exe_mx_part pa = parts[gt_int(&r, 0, 2)], pb = parts[gt_int(&r, 0, 2)];
            REQUIRE(gt_make(&r, &A, M, K, bf, pa, (int)gt_int(&r, 0, 3)) && gt_make(&r, &B, K, N, bf, pb, (int)gt_int(&r, 0, 3)));
            float *Cw = malloc((size_t)(M * N) * sizeof(float)), *Cg = malloc((size_t)(M * N) * sizeof(float));
            REQUIRE(Cw && Cg);
            int th = (int)gt_int(&r, 1, 2), acc = (int)gt_int(&r, 0, 1);
            for (int64_t i = 0; i < M * N; i++) Cw[i] = Cg[i] = gt_val(&r);
            exe_gemm(th, M, N, K, &A.s, &B.s, Cw, N, acc);
            exe_gemm_bpack *bp = exe_gemm_bpack_new(M, N, K, &A.s, &B.s);
            made += bp != NULL;
            /* B's data changes after packing: with the pack, the product is still the packed B's */
            size_t es = bf ? 2 : 4, nb = (size_t)(B.s.rs * (K - 1) + B.s.cs * (N - 1) + 1) * es;
            char *saved = malloc(nb);
            REQUIRE(saved);
            memcpy(saved, B.buf, nb);
            if (bp) memset(B.buf, 0, nb);
            exe_gemm_b(th, M, N, K, &A.s, &B.s, bp, Cg, N, acc);
            CHECK_MSG(!memcmp(Cw, Cg, (size_t)(M * N) * sizeof(float)), "%s: M=%lld N=%lld K=%lld: packed B differs",
                      gt_kernels[kn] ? gt_kernels[kn] : "default", (long long)M, (long long)N, (long long)K);
            /* a pack for another source is not used: the zeroed B gives zeros (acc 0) */
            float *Cz = calloc((size_t)(M * N), sizeof(float));
            REQUIRE(Cz);
            exe_gemm_bpack *bp2 = bp && K > 1 ? exe_gemm_bpack_new(M, N, K - 1, &A.s, &B.s) : NULL;
            exe_gemm_b(1, M, N, K, &A.s, &B.s, bp2, Cz, N, 0);
            int nz = 0;
            for (int64_t i = 0; bp2 && i < M * N; i++) nz += Cz[i] != 0;
            CHECK_MSG(nz == 0, "a pack made for other sizes was used (%d nonzero)", nz);
            exe_gemm_bpack_free(bp2);
            exe_gemm_bpack_free(bp);
            memcpy(B.buf, saved, nb);
            free(saved);
            free(Cz);
            free(Cw);
            free(Cg);
            free(A.buf);
            free(B.buf);
        }
    }
    exe_gemm_force(NULL);
    CHECK(made > 0);   /* at least the portable microkernel packs B */
}

/* The AVX-512 pair packers of the bf16 kernel: operands contiguous along k (a row-major A, a column-major B:
 * gm_load_pairs_k1, 32 k at a time and a 16 x 16 transpose) and along the other side (a column-major A, a
 * row-major B: gm_load_pairs_w1, VCVTNE2PS2BF16 for f32 part HI) still give exe_gemm_ref's bits, for f32
 * parts HI and LO and bf16 data, with rounding ties, f32 subnormals (the largest round up to the smallest
 * normal in exe_mx_hi, VCVTNE2PS2BF16 reads them as zero) and signed zeros among the values, K odd and even
 * over several groups of 32 plus a tail, and panels of fewer rows than the tile; bf16 data with bf16
 * subnormals also through gm_load_pairs_w1_bf16 (a row-major bf16 B, a column-major bf16 A). */
#if defined(__x86_64__) && defined(__GNUC__)
TEST(gemm_pairs_packed_along_k)
{
    if (!gt_have("avx512bf16")) {
        exe_gemm_force(NULL);
        return;
    }
    gt_rng r = {99};
    /* FTZ/DAZ as tpu_run runs (the bf16 kernel flushes subnormal partial sums whatever the mode) */
    unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040);
    static const int64_t shapes[][3] = {{13, 37, 70}, {40, 45, 96}, {5, 70, 33}, {29, 17, 65}};
    static const exe_mx_part parts[] = {EXE_MX_HI, EXE_MX_LO, EXE_MX_HI};
    for (int c = 0; c < 4; c++)
        for (int pa = 0; pa < 3; pa++)
            for (int bf = 0; bf < 2; bf++)
                for (int lay = 0; lay < 2; lay++) {
                int64_t M = shapes[c][0], N = shapes[c][1], K = shapes[c][2];
                gt_op A, B;
                REQUIRE(gt_make(&r, &A, M, K, bf, parts[pa], lay) && gt_make(&r, &B, K, N, bf, parts[(pa + 1) % 3], 1 - lay));
                /* ties (the bit below bf16 set, the rest zero), f32 subnormals (the largest ones too), signed zeros */
                for (int op = 0; op < 2 && !bf; op++) {
                    float *v = op ? (float *)B.buf : (float *)A.buf;
                    int64_t n = op ? K * N : M * K;
                    for (int64_t i = op; i < n; i += 3 + op) {
                        uint32_t u;
                        memcpy(&u, &v[i], 4);
                        u = (i % 9 == 0) ? (u & 0xFFFF0000u) | 0x8000u : (i % 9 == 3) ? (u & 0x807FFFFFu)
                          : (i % 9 == 6) ? 0x80000000u : (i % 9 == 7) ? 0x007FFFFFu : u;
                        memcpy(&v[i], &u, 4);
                    }
                }
                /* bf16 subnormals (read as signed zero) among bf16 data */
                for (int op = 0; op < 2 && bf; op++) {
                    uint16_t *v = op ? (uint16_t *)B.buf : (uint16_t *)A.buf;
                    int64_t n = op ? K * N : M * K;
                    for (int64_t i = op; i < n; i += 5 + op)
                        v[i] = (uint16_t)((i % 3 == 0 ? 0x0001u : i % 3 == 1 ? 0x007Fu : 0x0040u) | (i & 8 ? 0x8000u : 0));
                }
                /* row 0 of A all the largest subnormal against 2^60 in column 0 of B: exe_mx_hi makes the
                 * smallest normal of it, so C[0][0] = K * 2^-66, not 0 */
                for (int64_t k = 0; k < K && !bf && parts[pa] == EXE_MX_HI && parts[(pa + 1) % 3] == EXE_MX_HI; k++) {
                    uint32_t sub = 0x007FFFFFu;
                    memcpy(&((float *)A.buf)[k * A.s.cs], &sub, 4);
                    ((float *)B.buf)[k * B.s.rs] = 0x1p60f;
                }
                float *Cr = malloc((size_t)(M * N) * sizeof(float)), *Ck = malloc((size_t)(M * N) * sizeof(float));
                REQUIRE(Cr && Ck);
                exe_gemm_force(NULL);
                exe_gemm_ref(M, N, K, &A.s, &B.s, Cr, N, 0);
                exe_gemm_force("avx512bf16");
                exe_gemm(1, M, N, K, &A.s, &B.s, Ck, N, 0);
                int nbad = 0;
                for (int64_t i = 0; i < M * N; i++) nbad += memcmp(&Ck[i], &Cr[i], sizeof(float)) != 0;
                CHECK_MSG(nbad == 0, "M=%lld N=%lld K=%lld A part %d layout %d, %s: %d differ", (long long)M, (long long)N,
                          (long long)K, (int)parts[pa], lay, bf ? "bf16" : "f32", nbad);
                free(Cr);
                free(Ck);
                free(A.buf);
                free(B.buf);
            }
    _mm_setcsr(csr);
    exe_gemm_force(NULL);
}
#endif

/* exe_mx_store of a bf16 result, contiguous (the vectorised loop of selects) and strided (the scalar loop),
 * against fp_f32_to_bf16_ftz of the flushed value: rounding ties both ways, carries into the exponent and
 * into inf, NaNs (payloads, both signs), f32 and bf16 subnormals, signed zeros, at every length and offset
 * up to a few vectors (the loop's head and tail). */
TEST(gemm_store_bf16_vs_ref)
{
    enum { N = 300 };
    static const uint32_t special[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807FFFFFu, 0x00800000u, 0x80808000u,
                                       0x007FFFFFu, 0x3F808000u, 0x3F818000u, 0x3F807FFFu, 0xBF80FFFFu, 0x7F7FFFFFu,
                                       0xFF7F8000u, 0x7F800000u, 0xFF800000u, 0x7F800001u, 0xFFC12345u, 0x7FFFFFFFu,
                                       0x00FF8000u, 0x80FFFFFFu, 0x0080FFFFu, 0x3F800000u};
    enum { NS = sizeof special / sizeof special[0] };
    gt_rng r = {7};
    float src[N];
    uint16_t want[N], got[N + 8], gs[2 * N];
    for (int i = 0; i < N; i++) {
        uint32_t u = (i % 3 == 0) ? special[(i / 3) % NS] : (uint32_t)gt_next(&r);
        if (i % 3 == 1) u = (u & 0xFFFF0000u) | ((i & 4) ? 0x8000u : 0x7FFFu);   /* ties and near-ties */
        memcpy(&src[i], &u, 4);
        uint32_t d = (u & 0x7F800000u) ? u : (u & 0x80000000u);   /* the flush of exe_mx_daz */
        float f;
        memcpy(&f, &d, 4);
        want[i] = fp_f32_to_bf16_ftz(f);
    }
    int nbad = 0;
    for (int64_t i0 = 0; i0 < 4; i0++)
        for (int64_t n = 0; n + i0 <= N; n += (n < 80 ? 1 : 37)) {
            memset(got, 0xAB, sizeof got);
            exe_mx_store(NULL, TPU_BF16, got, i0, 1, src + i0, 0, n, 0);
            for (int64_t j = 0; j < n; j++) nbad += got[i0 + j] != want[i0 + j];
            nbad += n + i0 < N + 8 && got[n + i0] != 0xABAB;   /* nothing past the end */
        }
    exe_mx_store(NULL, TPU_BF16, gs, 0, 2, src, 0, N, 0);
    for (int j = 0; j < N; j++) nbad += gs[2 * j] != want[j];
    CHECK_MSG(nbad == 0, "%d bf16 stores differ from fp_f32_to_bf16_ftz", nbad);
}

/* The AVX-512 pair packers of B (gm_load_pairs_k1, _w1, _w1_bf16) word for word against the scalar one on
 * the raw panels, where a flush the kernel would repeat anyway (bf16 subnormals read as zero) still shows:
 * bf16 data and f32 parts HI and LO, row- and column-major, with subnormals, ties, NaNs and signed zeros,
 * odd and even kc, panels of 32, 17 and 5 columns at offsets. */
TEST(gemm_pairs_packers_vs_scalar)
{
    gt_rng r = {5};
    static const exe_mx_part parts[] = {EXE_MX_HI, EXE_MX_LO, EXE_MX_AS_IS};
    static const int64_t kcs[] = {70, 33, 96, 2};
    static const int ws[] = {32, 17, 5};
    int ran = 0;
    for (int bf = 0; bf < 2; bf++)
        for (int pa = 0; pa < 3; pa++)
            for (int lay = 0; lay < 2; lay++) {
                if (!bf && parts[pa] == EXE_MX_AS_IS) continue;   /* not bf16-valued: no pairs */
                enum { K = 110, N = 70 };
                gt_op B;
                REQUIRE(gt_make(&r, &B, K, N, bf, parts[pa], lay));
                for (int64_t i = 0; i < K * N; i += 3) {
                    if (bf) {
                        ((uint16_t *)B.buf)[i] = (uint16_t)((i % 4 == 0 ? 0x0001u : i % 4 == 1 ? 0x007Fu : i % 4 == 2 ? 0x7FC1u : 0x0000u) |
                                                            (i & 8 ? 0x8000u : 0));
                    } else {
                        uint32_t u;
                        memcpy(&u, &((float *)B.buf)[i], 4);
                        u = i % 4 == 0 ? (u & 0xFFFF0000u) | 0x8000u : i % 4 == 1 ? (u & 0x807FFFFFu)
                          : i % 4 == 2 ? 0xFFC01234u : 0x80000000u;
                        memcpy(&((float *)B.buf)[i], &u, 4);
                    }
                }
                for (int a = 0; a < 4; a++)
                    for (int b = 0; b < 3; b++) {
                        int64_t k0 = (a * 7) % (K - kcs[a]), j0 = (b * 11) % (N - ws[b]);
                        int64_t d = exe_gemm_pairs_diff(&B.s, k0, kcs[a], j0, ws[b]);
                        if (d < 0) continue;
                        ran++;
                        CHECK_MSG(d == 0, "%s part %d layout %d kc %lld W %d: %lld words differ", bf ? "bf16" : "f32",
                                  (int)parts[pa], lay, (long long)kcs[a], ws[b], (long long)d);
                    }
                free(B.buf);
            }
    CHECK(ran > 0 || !gt_have("avx512bf16"));
}
