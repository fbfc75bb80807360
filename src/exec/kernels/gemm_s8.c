/* gemm_s8.c — int8 x int8 -> int32 matrix multiply (int8 dots), and its naive reference.
 *
 *   C[i][j] = sum over k < K of A(i, k) * B(k, j)  mod 2^32      i < M, j < N; C row-major, row stride N
 *
 * A(i, k) = A[amo[i] + ako[k]], B(k, j) = B[bko[k] + bno[j]]: element offset tables (dot.c's), so any layout
 * is read without a copy first. Integer sums are exact, and two's complement addition is arithmetic mod 2^32,
 * so every blocking, order and thread count gives the reference's bits: the exact sum wrapped to s32.
 *
 * The fast kernel (CPUs with AVX512_VNNI; gcc >= 10 / clang >= 9): VPDPBUSD multiplies unsigned by signed
 * bytes, four along k at a time into each 32-bit lane, so A is packed as A + 128 (unsigned) and the excess,
 * 128 * sum over k of B(k, j), is subtracted at the end. A is packed in blocks of 8 rows (4 bytes of k per
 * 32-bit word), B in panels of 32 columns ([k/4][32][4] bytes); K is padded to a multiple of 4 with zero
 * columns of B. The microkernel keeps 8 x 32 sums in 16 zmm registers. Panels of B are split over the
 * executor's threads. */
#include "exec/kernels/gemm.h"
#include "exec/exe_par.h"
#include "util/util.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__clang__) ? __clang_major__ >= 9 : __GNUC__ >= 10)
#define GS8_VNNI 1
#include <immintrin.h>
#endif

void exe_gemm_s8_ref(int64_t M, int64_t N, int64_t K, const int8_t *A, const int64_t *amo, const int64_t *ako,
                     const int8_t *B, const int64_t *bko, const int64_t *bno, int32_t *C)
{
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            int64_t s = 0;
            for (int64_t k = 0; k < K; k++) s += (int64_t)A[amo[i] + ako[k]] * (int64_t)B[bko[k] + bno[j]];
            C[i * N + j] = (int32_t)(uint32_t)(uint64_t)s;
        }
}

#ifdef GS8_VNNI

#define GS8_MR 8
#define GS8_NR 32

int exe_gemm_s8_available(void)
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vnni");
}

typedef struct gs8_job {
    int64_t        M, N, K4;    /* K4: K padded to a multiple of 4, over 4 */
    const uint8_t *Ap;          /* [M padded to 8 / 8][K4][8][4] */
    const int8_t  *A, *B;
    const int64_t *amo, *ako, *bko, *bno;
    int64_t        K;
    int32_t       *C;
    int            b_cols;      /* bno[j] == j: a row of B is contiguous (row-major B) */
} gs8_job;

/* Is off[i] == i for i < n (a contiguous run)? */
static int gs8_unit(const int64_t *off, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (off[i] != i) return 0;
    return 1;
}

/* A full panel of 32 contiguous columns of B: 4 rows of 32 bytes interleaved into [32][4] per k/4 with byte
 * and word unpacks (rows past K read as zeros) */
static void gs8_pack_panel_rows(const gs8_job *J, int64_t j0, uint8_t *Bp)
{
    static const int8_t zeros[32];
    for (int64_t k4 = 0; k4 < J->K4; k4++) {
        const int8_t *r[4];
        for (int q = 0; q < 4; q++) r[q] = 4 * k4 + q < J->K ? J->B + J->bko[4 * k4 + q] + j0 : zeros;
        for (int h = 0; h < 2; h++) {
            __m128i a = _mm_loadu_si128((const __m128i *)(r[0] + 16 * h)), b = _mm_loadu_si128((const __m128i *)(r[1] + 16 * h));
            __m128i c = _mm_loadu_si128((const __m128i *)(r[2] + 16 * h)), d = _mm_loadu_si128((const __m128i *)(r[3] + 16 * h));
            __m128i ablo = _mm_unpacklo_epi8(a, b), abhi = _mm_unpackhi_epi8(a, b);
            __m128i cdlo = _mm_unpacklo_epi8(c, d), cdhi = _mm_unpackhi_epi8(c, d);
            __m128i *o = (__m128i *)(Bp + k4 * 128 + h * 64);
            _mm_storeu_si128(o, _mm_unpacklo_epi16(ablo, cdlo));
            _mm_storeu_si128(o + 1, _mm_unpackhi_epi16(ablo, cdlo));
            _mm_storeu_si128(o + 2, _mm_unpacklo_epi16(abhi, cdhi));
            _mm_storeu_si128(o + 3, _mm_unpackhi_epi16(abhi, cdhi));
        }
    }
}

/* corr[j] = 128 * (sum over k of the packed panel's column j), by VPDPBUSD with ones */
__attribute__((target("avx512f,avx512bw,avx512vnni")))
static void gs8_panel_corr(int64_t K4, const uint8_t *Bp, int32_t *corr)
{
    __m512i s0 = _mm512_setzero_si512(), s1 = s0, ones = _mm512_set1_epi8(1);
    for (int64_t k = 0; k < K4; k++) {
        s0 = _mm512_dpbusd_epi32(s0, ones, _mm512_loadu_si512(Bp + k * 128));
        s1 = _mm512_dpbusd_epi32(s1, ones, _mm512_loadu_si512(Bp + k * 128 + 64));
    }
    _mm512_storeu_si512(corr, _mm512_slli_epi32(s0, 7));
    _mm512_storeu_si512(corr + 16, _mm512_slli_epi32(s1, 7));
}

/* 8 rows x 32 columns over all of k; rows >= mr and columns >= nr are not stored. */
__attribute__((target("avx512f,avx512bw,avx512vnni")))
static void gs8_kernel(int64_t K4, const uint8_t *Ap, const uint8_t *Bp, const int32_t *corr, int32_t *C, int64_t ldc,
                       int mr, int nr)
{
    /* 16 named sums, so that they stay in registers */
    __m512i c00 = _mm512_setzero_si512(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00;
    __m512i c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00, c70 = c00, c71 = c00;
    for (int64_t k = 0; k < K4; k++) {
        __m512i b0 = _mm512_loadu_si512(Bp + k * 128), b1 = _mm512_loadu_si512(Bp + k * 128 + 64);
        const int32_t *a = (const int32_t *)(Ap + k * 32);
#define GS8_ROW(r)                                                                                       \
    do {                                                                                                 \
        __m512i av = _mm512_set1_epi32(a[r]);                                                            \
        c##r##0 = _mm512_dpbusd_epi32(c##r##0, av, b0);                                                  \
        c##r##1 = _mm512_dpbusd_epi32(c##r##1, av, b1);                                                  \
    } while (0)
        GS8_ROW(0);
        GS8_ROW(1);
        GS8_ROW(2);
        GS8_ROW(3);
        GS8_ROW(4);
        GS8_ROW(5);
        GS8_ROW(6);
        GS8_ROW(7);
#undef GS8_ROW
    }
    __m512i c[GS8_MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}, {c60, c61}, {c70, c71}};
    __m512i k0 = _mm512_loadu_si512(corr), k1 = _mm512_loadu_si512(corr + 16);
    __mmask16 m0 = nr >= 16 ? 0xFFFF : (__mmask16)((1u << nr) - 1);
    __mmask16 m1 = nr >= 32 ? 0xFFFF : nr <= 16 ? 0 : (__mmask16)((1u << (nr - 16)) - 1);
    for (int r = 0; r < mr; r++) {
        _mm512_mask_storeu_epi32(C + r * ldc, m0, _mm512_sub_epi32(c[r][0], k0));
        _mm512_mask_storeu_epi32(C + r * ldc + 16, m1, _mm512_sub_epi32(c[r][1], k1));
    }
}

/* Panels [p0, p1) of 32 columns: pack the panel (and 128 * its column sums), then every 8-row block of A. */
static void gs8_panels(void *ctx, int64_t p0, int64_t p1, int tid)
{
    const gs8_job *J = ctx;
    (void)tid;
    size_t bsz = (size_t)J->K4 * 128;
    uint8_t *Bp = ut_malloc(bsz + 64);
    int32_t corr[GS8_NR];
    if (!Bp) {   /* no memory for the panel: the reference's sums, column by column */
        for (int64_t j = p0 * GS8_NR; j < J->N && j < p1 * GS8_NR; j++)
            for (int64_t i = 0; i < J->M; i++) {
                int64_t s = 0;
                for (int64_t k = 0; k < J->K; k++) s += (int64_t)J->A[J->amo[i] + J->ako[k]] * (int64_t)J->B[J->bko[k] + J->bno[j]];
                J->C[i * J->N + j] = (int32_t)(uint32_t)(uint64_t)s;
            }
        return;
    }
    for (int64_t p = p0; p < p1; p++) {
        int64_t j0 = p * GS8_NR;
        int nr = (int)(J->N - j0 < GS8_NR ? J->N - j0 : GS8_NR);
        if (J->b_cols && nr == GS8_NR) {
            gs8_pack_panel_rows(J, j0, Bp);
            gs8_panel_corr(J->K4, Bp, corr);
        } else {
            memset(Bp, 0, bsz);
            int32_t sum[GS8_NR] = {0};
            for (int64_t k = 0; k < J->K; k++) {   /* along rows of B: row-major B reads 32 bytes at a time */
                const int8_t *row = J->B + J->bko[k];
                uint8_t *d = Bp + (k >> 2) * 128 + (k & 3);
                for (int jj = 0; jj < nr; jj++) {
                    int8_t v = row[J->bno[j0 + jj]];
                    d[jj * 4] = (uint8_t)v;
                    sum[jj] += v;
                }
            }
            for (int jj = 0; jj < GS8_NR; jj++) corr[jj] = (int32_t)((uint32_t)sum[jj] * 128u);
        }
        for (int64_t i0 = 0; i0 < J->M; i0 += GS8_MR) {
            int mr = (int)(J->M - i0 < GS8_MR ? J->M - i0 : GS8_MR);
            gs8_kernel(J->K4, J->Ap + i0 / GS8_MR * J->K4 * 32, Bp, corr, J->C + i0 * J->N + j0, J->N, mr, nr);
        }
    }
    ut_free(Bp);
}

/* Returns 0 when out of memory (C untouched). */
static int gs8_run(int threads, int64_t M, int64_t N, int64_t K, const int8_t *A, const int64_t *amo, const int64_t *ako,
                   const int8_t *B, const int64_t *bko, const int64_t *bno, int32_t *C)
{
    int64_t K4 = (K + 3) / 4, Mb = (M + GS8_MR - 1) / GS8_MR;
    uint8_t *Ap = ut_malloc((size_t)(Mb * K4 * 32) + 64);
    if (!Ap) return 0;
    /* A + 128 as unsigned bytes: [row block][k / 4][8 rows][4]; padding (rows past M, k past K) 128, i.e. 0 */
    memset(Ap, 128, (size_t)(Mb * K4 * 32));
    int a_rows = gs8_unit(ako, K);   /* row-major A: 4 bytes of a row at a time */
    for (int64_t i = 0; i < M; i++) {
        uint8_t *blk = Ap + i / GS8_MR * K4 * 32 + (i % GS8_MR) * 4;
        const int8_t *row = A + amo[i];
        int64_t k = 0;
        if (a_rows)
            for (; k + 4 <= K; k += 4) {
                uint32_t w;
                memcpy(&w, row + k, 4);
                w ^= 0x80808080u;
                memcpy(blk + k * 8, &w, 4);
            }
        for (; k < K; k++) blk[(k >> 2) * 32 + (k & 3)] = (uint8_t)(row[ako[k]] ^ 0x80);
    }
    gs8_job J = {M, N, K4, Ap, A, B, amo, ako, bko, bno, K, C, gs8_unit(bno, N)};
    int64_t np = (N + GS8_NR - 1) / GS8_NR;
    exe_par_for((double)M * (double)N * (double)K > 2e6 ? threads : 1, np, 1, gs8_panels, &J);
    ut_free(Ap);
    return 1;
}

void exe_gemm_s8(int threads, int64_t M, int64_t N, int64_t K, const int8_t *A, const int64_t *amo, const int64_t *ako,
                 const int8_t *B, const int64_t *bko, const int64_t *bno, int32_t *C)
{
    if (M <= 0 || N <= 0) return;
    if (K <= 0 || !exe_gemm_s8_available() || !gs8_run(threads, M, N, K, A, amo, ako, B, bko, bno, C))
        exe_gemm_s8_ref(M, N, K, A, amo, ako, B, bko, bno, C);
}

#else

int exe_gemm_s8_available(void) { return 0; }

void exe_gemm_s8(int threads, int64_t M, int64_t N, int64_t K, const int8_t *A, const int64_t *amo, const int64_t *ako,
                 const int8_t *B, const int64_t *bko, const int64_t *bno, int32_t *C)
{
    (void)threads;
    exe_gemm_s8_ref(M, N, K, A, amo, ako, B, bko, bno, C);
}

#endif
