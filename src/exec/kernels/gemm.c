/* gemm.c — f32 matrix multiply with packing, cache blocking, AVX-512 / AVX2 / portable microkernels and
 * exe_par threads (gemm.h).
 *
 * Blocking (BLIS order): for each block of NC columns, for each block of KC along k: B's block is packed once
 * into NR-wide panels (k-major) and shared; then tasks (a block of MC rows x a group of panels) each pack their
 * MC x KC block of A into MR-tall panels and run the microkernel over every (MR x NR) tile. The microkernel
 * keeps its tile of C in registers for the whole KC loop and continues from what C holds after the first k
 * block, so every C element is the same FMA chain in k order as exe_gemm_ref computes.
 *
 * The avx512bf16 kernel is the same loop nest over bf16 pairs (KC 512 pairs of k: the same bytes per panel).
 *
 * Skinny products (64x4096x4096, 4096x64x4096) read their big operand from memory once, so packing it is
 * bound by memory: B is packed row by row when its rows are contiguous, the packers prefetch rows ahead,
 * and the tiles prefetch the next block of the streamed operand while they compute (gm_prefetch_plan); the
 * last row panel runs a kernel of its own height (M = 64 is 5 x 12 + 4); on several threads such a product
 * is split into one blocked product per thread (gm_run_packed).
 *
 * Measured with bench/gemm_bench (figures in bench/README.md). */
#include "gemm.h"
#include "exec/exec.h"
#include "exec/exe_par.h"

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define GM_X86 1
/* VDPBF16PS through target attributes: gcc >= 10, clang >= 9 */
#if ((defined(__clang__) && __clang_major__ >= 9) || (!defined(__clang__) && __GNUC__ >= 10)) && !defined(GM_NO_BF16)
#define GM_BF16 1
#endif
#endif

#ifndef GM_KC
#define GM_KC 256
#endif
#define GM_MAXT 64
#ifndef GM_MC512
#define GM_MC512 240
#endif
#ifndef GM_NC
#define GM_NC 3072
#endif
#ifndef GM_KC16
#define GM_KC16 512   /* bf16 pairs: the same bytes per panel as GM_KC f32 */
#endif

/* ---- operand conversion (the loaders of mxu.h, element by element) ---- */

static inline __attribute__((always_inline)) float gm_f32(float x, exe_mx_part part)
{
    return part == EXE_MX_HI ? exe_mx_hi(x) : part == EXE_MX_LO ? exe_mx_lo(x) : exe_mx_daz(x);
}

static inline __attribute__((always_inline)) float gm_get(const exe_gemm_src *s, int64_t off)
{
    if (s->dtype == TPU_BF16) return s->part == EXE_MX_LO ? 0.0f : exe_mx_daz(fp_bf16_to_f32_inline(((const uint16_t *)s->p)[off]));
    return gm_f32(((const float *)s->p)[off], s->part);
}

/* A 2-D block: dst[r * dld + c] = conv(src element (r0 + r, c0 + c)) for r < rows, c < cols, where element
 * (r, c) of the source is at off + r*rs + c*cs. The loop runs along whichever side is contiguous. pf != 0:
 * each row of contiguous elements also prefetches the same span pf elements on (the packers: GM_PF rows
 * ahead, past `rows` too, into the next panel's rows): a skinny product's packing streams its big operand
 * from memory once, and waiting on each row's lines in turn (short runs at a large stride, which the
 * hardware prefetcher does not follow) took a third of 64x4096x4096 and 4096x64x4096. Prefetches never
 * fault, wherever they point. */
#ifndef GM_PF
#define GM_PF 6   /* rows ahead, packing A (and B panel by panel) */
#endif
#ifndef GM_PFK
#define GM_PFK 2   /* B packed row by row (gm_pack_b_rows): rows ahead */
#endif
#define GM_BLOCK(CONV, T)                                                                           \
    do {                                                                                            \
        const T *p = (const T *)s->p + off;                                                         \
        if (cs == 1 || rs != 1) {                                                                   \
            for (int64_t r = 0; r < rows; r++) {                                                    \
                const T *q = p + r * rs;                                                            \
                float *d = dst + r * dld;                                                           \
                if (cs == 1 && pf)                                                                  \
                    for (int64_t c = 0; c < cols; c += 64 / (int64_t)sizeof(T))                     \
                        __builtin_prefetch(q + pf + c);                                             \
                if (cs == 1) for (int64_t c = 0; c < cols; c++) d[c] = CONV(q[c]);                  \
                else for (int64_t c = 0; c < cols; c++) d[c] = CONV(q[c * cs]);                     \
            }                                                                                       \
        } else {                                                                                    \
            for (int64_t c = 0; c < cols; c++) {                                                    \
                const T *q = p + c * cs;                                                            \
                for (int64_t r = 0; r < rows; r++) dst[r * dld + c] = CONV(q[r]);                   \
            }                                                                                       \
        }                                                                                           \
    } while (0)
#define GM_BF(x) exe_mx_daz(fp_bf16_to_f32_inline(x))
#define GM_ZERO(x) ((void)(x), 0.0f)

EXE_MX_CLONES
static void gm_load_block(float *dst, int64_t dld, const exe_gemm_src *s, int64_t off, int64_t rs, int64_t cs, int64_t rows,
                          int64_t cols, int64_t pf)
{
    if (s->dtype == TPU_BF16) {
        if (s->part == EXE_MX_LO) GM_BLOCK(GM_ZERO, uint16_t);
        else GM_BLOCK(GM_BF, uint16_t);
        return;
    }
    if (s->part == EXE_MX_HI) GM_BLOCK(exe_mx_hi, float);
    else if (s->part == EXE_MX_LO) GM_BLOCK(exe_mx_lo, float);
    else GM_BLOCK(exe_mx_daz, float);
}

/* A panel, row-major: rows [i0, i0+mr) x k [k0, k0+kc) -> dst[i*kc + k], rows >= mr zero. */
static void gm_pack_a(const exe_gemm_src *A, int64_t i0, int mr, int64_t k0, int64_t kc, float *dst, int MR)
{
    gm_load_block(dst, kc, A, i0 * A->rs + k0 * A->cs, A->rs, A->cs, mr, kc, GM_PF * A->rs);
    if (mr < MR) memset(dst + (int64_t)mr * kc, 0, (size_t)((MR - mr) * kc) * sizeof(float));
}

/* Panels p0 <= p < p1 of B's block (k [k0, k0+kc), cols from j0 + p*NR, nr = at most NR, to jend), k-major,
 * when B is contiguous along its columns: read row by row across all the panels (each row one run of
 * (p1-p0)*NR elements, which the hardware prefetcher follows) rather than panel by panel (NR elements per
 * row at B's row stride: every row a new page). dst: panel p at dst + p*kc*NR; columns past jend zero. */
static void gm_pack_b_rows(const exe_gemm_src *B, int64_t k0, int64_t kc, int64_t j0, int64_t jend, int64_t p0,
                           int64_t p1, float *dst, int NR)
{
    int64_t pw = kc * NR, full = UT_MIN(p1, (jend - j0) / NR);   /* panels p0 <= p < full are whole */
    for (int64_t k = 0; k < kc; k++) {
        int64_t off = (k0 + k) * B->rs + (j0 + p0 * NR) * B->cs;
        if (full > p0) gm_load_block(dst + p0 * pw + k * NR, pw, B, off, NR * B->cs, B->cs, full - p0, NR, GM_PFK * B->rs);
        for (int64_t p = UT_MAX(full, p0); p < p1; p++) {
            int64_t nr = UT_MIN((int64_t)NR, jend - (j0 + p * NR));
            float *d = dst + p * pw + k * NR;
            gm_load_block(d, NR, B, (k0 + k) * B->rs + (j0 + p * NR) * B->cs, B->rs, B->cs, 1, nr, GM_PFK * B->rs);
            memset(d + nr, 0, (size_t)(NR - nr) * sizeof(float));
        }
    }
}

/* B panel, k-major: k [k0, k0+kc) x cols [j0, j0+nr) -> dst[k*NR + j], cols >= nr zero. */
static void gm_pack_b(const exe_gemm_src *B, int64_t k0, int64_t kc, int64_t j0, int nr, float *dst, int NR)
{
    gm_load_block(dst, NR, B, k0 * B->rs + j0 * B->cs, B->rs, B->cs, kc, nr, GM_PF * B->rs);
    if (nr < NR)
        for (int64_t k = 0; k < kc; k++) memset(dst + k * NR + nr, 0, (size_t)(NR - nr) * sizeof(float));
}

/* ---- bf16 pair packing (the avx512bf16 kernel) ----
 * An operand is bf16-valued unless it is f32 read as is: bf16 widens exactly, and an f32 part HI or LO is a
 * bf16 value (mxu.h). Its packed panels hold 32-bit words of two bf16 along k: element k in the high half,
 * k+1 in the low half, because VDPBF16PS adds the high product first (then the low one), each add rounded
 * like an FMA: the chain stays c = fma(a_k, b_k, c) in k order. With odd kc the last word's low half is a
 * pad: -0 in A and +0 in B, whose product -0 leaves every accumulator (+0 and -0 included) as it is. */
static inline int gm_bf16_valued(const exe_gemm_src *s) { return !(s->dtype == TPU_F32 && s->part == EXE_MX_AS_IS); }

#ifdef GM_BF16

static inline __attribute__((always_inline)) uint32_t gm_h16(uint32_t u) { return (u & 0x7F80u) ? u : (u & 0x8000u); }
#define GM_P_HI(x) (exe_mx_bits(exe_mx_hi(x)) >> 16)
#define GM_P_LO(x) (exe_mx_bits(exe_mx_lo(x)) >> 16)
#define GM_P_BF(x) gm_h16(x)
#define GM_P_Z(x) ((void)(x), 0u)

/* dst[p * dld + w] = (bf16(k0 + 2p, w) << 16) | bf16(k0 + 2p + 1, w) for 2p < kc, w < W, where the operand
 * seen as k x w has element (k, w) at off + k*ks + w*ws (pad for k = kc). The loop runs along w when that
 * side is contiguous (or neither is), else along k. */
#define GM_PAIRS(CONV, T)                                                                             \
    do {                                                                                              \
        const T *s0 = (const T *)s->p + off;                                                          \
        int64_t np = kc / 2;                                                                          \
        if (ks != 1 || ws == 1) {                                                                     \
            for (int64_t q = 0; q < (kc + 1) / 2; q++) {                                              \
                const T *q0 = s0 + 2 * q * ks, *q1 = q0 + ks;                                         \
                uint32_t *d = dst + q * dld;                                                          \
                if (q == np) for (int64_t w = 0; w < W; w++) d[w] = ((uint32_t)CONV(q0[w * ws]) << 16) | pad; \
                else if (ws == 1) for (int64_t w = 0; w < W; w++) d[w] = ((uint32_t)CONV(q0[w]) << 16) | (uint32_t)CONV(q1[w]); \
                else for (int64_t w = 0; w < W; w++) d[w] = ((uint32_t)CONV(q0[w * ws]) << 16) | (uint32_t)CONV(q1[w * ws]); \
            }                                                                                         \
        } else {                                                                                      \
            for (int64_t w = 0; w < W; w++) {                                                         \
                const T *q0 = s0 + w * ws;                                                            \
                for (int64_t q = 0; q < np; q++)                                                      \
                    dst[q * dld + w] = ((uint32_t)CONV(q0[2 * q]) << 16) | (uint32_t)CONV(q0[2 * q + 1]); \
                if (kc & 1) dst[np * dld + w] = ((uint32_t)CONV(q0[2 * np]) << 16) | pad;             \
            }                                                                                         \
        }                                                                                             \
    } while (0)

EXE_MX_CLONES
static void gm_load_pairs(uint32_t *dst, int64_t dld, const exe_gemm_src *s, int64_t off, int64_t ks, int64_t ws,
                          int64_t kc, int64_t W, uint32_t pad)
{
    if (s->dtype == TPU_BF16) {
        if (s->part == EXE_MX_LO) GM_PAIRS(GM_P_Z, uint16_t);
        else GM_PAIRS(GM_P_BF, uint16_t);
    } else if (s->part == EXE_MX_LO) {
        GM_PAIRS(GM_P_LO, float);
    } else {
        GM_PAIRS(GM_P_HI, float);   /* AS_IS never comes here */
    }
}

/* The same for an operand contiguous along k (ks 1: a row-major A, a transposed B) and at most 32 rows w,
 * with AVX-512: per row, 32 k at a time become 16 pair words in one register (the conversions of gm_get,
 * vectorised: bit for bit the scalar loop's), kept in a 32 x 16 block that is then transposed 16 x 16 with
 * shuffles into dst's rows of k pairs. The scalar loop wrote one 4-byte word per pair at a stride of dld
 * words (a third of the time of small products in loops, and of a convolution's transposed patch panel).
 * Pairs past the last full group of 16 are left to gm_load_pairs. Returns the pairs done. */
#define GM_R(i) _mm512_set1_epi32((int)(i))
__attribute__((target("avx512f,avx512bw"))) static inline __m512i gm_v_hi(__m512i u)
{
    __m512i r = _mm512_and_si512(_mm512_add_epi32(_mm512_add_epi32(u, GM_R(0x7FFF)), _mm512_and_si512(_mm512_srli_epi32(u, 16), GM_R(1))),
                                 GM_R(0xFFFF0000u));
    __m512i sign = _mm512_and_si512(u, GM_R(0x80000000u));
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, GM_R(0x7FFFFFFF)), GM_R(0x7F800000));
    r = _mm512_mask_or_epi32(r, nan, sign, GM_R(0x7FC00000));
    __mmask16 sub = _mm512_testn_epi32_mask(r, GM_R(0x7F800000));
    return _mm512_mask_and_epi32(r, sub, r, GM_R(0x80000000u));
}

/* exe_mx_lo: hi(daz(x) - hi(x)), 0 where hi(x) is inf or NaN */
__attribute__((target("avx512f,avx512bw"))) static inline __m512i gm_v_lo(__m512i u)
{
    __m512i h = gm_v_hi(u);
    __mmask16 den = _mm512_testn_epi32_mask(u, GM_R(0x7F800000));
    __m512i d = _mm512_mask_and_epi32(u, den, u, GM_R(0x80000000u));
    __m512i l = gm_v_hi(_mm512_castps_si512(_mm512_sub_ps(_mm512_castsi512_ps(d), _mm512_castsi512_ps(h))));
    __mmask16 inf = _mm512_cmpeq_epi32_mask(_mm512_and_si512(h, GM_R(0x7F800000)), GM_R(0x7F800000));
    return _mm512_maskz_mov_epi32((__mmask16)~inf, l);
}

/* 16 pair words (x[2q] << 16 | x[2q+1]) of 32 consecutive elements at q0: kind 0 f32 part HI, 1 f32 part
 * LO, 2 bf16 (part LO of bf16 data is zero: gm_load_pairs) */
__attribute__((target("avx512f,avx512bw"), always_inline)) static inline __m512i gm_v_pairs(int kind, const void *q0)
{
    if (kind == 2) {
        __m512i v = _mm512_loadu_si512(q0);
        __mmask32 sub = _mm512_testn_epi16_mask(v, _mm512_set1_epi16(0x7F80));
        v = _mm512_mask_mov_epi16(v, sub, _mm512_and_si512(v, _mm512_set1_epi16((short)0x8000)));
        return _mm512_rol_epi32(v, 16);   /* element 2q to the high half */
    }
    const float *f = q0;
    __m512i u0 = _mm512_loadu_si512(f), u1 = _mm512_loadu_si512(f + 16), r0, r1;
    if (kind == 1) r0 = gm_v_lo(u0), r1 = gm_v_lo(u1);
    else r0 = gm_v_hi(u0), r1 = gm_v_hi(u1);
    /* 16-bit lane 2q (low half of word q) = high half of element 2q+1 (lane 4q+3 of r0:r1), lane 2q+1 = 4q+1 */
    const __m512i idx = _mm512_set_epi16(61, 63, 57, 59, 53, 55, 49, 51, 45, 47, 41, 43, 37, 39, 33, 35, 29, 31, 25,
                                         27, 21, 23, 17, 19, 13, 15, 9, 11, 5, 7, 1, 3);
    return _mm512_permutex2var_epi16(r0, idx, r1);
}

/* 16 x 16 words: r[j] becomes column j of the rows r[0..15] */
__attribute__((target("avx512f"), always_inline)) static inline void gm_transpose16(__m512i *r)
{
    __m512i t[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    /* r[4b + c] now holds, in each 128-bit lane L, column 4L + c of rows 4b..4b+3 */
#pragma GCC unroll 16
    for (int c = 0; c < 4; c++) {
        t[c] = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x88);        /* lanes 0,2 of rows 0-3 | 0,2 of 4-7 */
        t[4 + c] = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xDD);    /* lanes 1,3 */
        t[8 + c] = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x88);
        t[12 + c] = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xDD);
    }
#pragma GCC unroll 16
    for (int c = 0; c < 4; c++) {
        r[c] = _mm512_shuffle_i32x4(t[c], t[8 + c], 0x88);          /* column c      (lane 0) */
        r[8 + c] = _mm512_shuffle_i32x4(t[c], t[8 + c], 0xDD);      /* column 8 + c  (lane 2) */
        r[4 + c] = _mm512_shuffle_i32x4(t[4 + c], t[12 + c], 0x88); /* column 4 + c  (lane 1) */
        r[12 + c] = _mm512_shuffle_i32x4(t[4 + c], t[12 + c], 0xDD);/* column 12 + c (lane 3) */
    }
}

/* One 16-row block (wn rows, the rest zero) of groups [0, ng) of one kind. */
__attribute__((target("avx512f,avx512bw"), always_inline)) static inline void gm_k1_block(int kind, uint32_t *dst, int64_t dld,
                                                                                        const char *p, size_t rstride,
                                                                                        size_t gstride, int64_t ng, int wn)
{
    __mmask16 m = (__mmask16)((1u << wn) - 1);
    for (int64_t g = 0; g < ng; g++, p += gstride, dst += 16 * dld) {
        __m512i r[16];
        if (wn == 16) {
#pragma GCC unroll 16
            for (int w = 0; w < 16; w++) r[w] = gm_v_pairs(kind, p + w * rstride);
        } else {
            for (int w = 0; w < 16; w++) r[w] = w < wn ? gm_v_pairs(kind, p + w * rstride) : _mm512_setzero_si512();
        }
        gm_transpose16(r);
#pragma GCC unroll 16
        for (int q = 0; q < 16; q++) _mm512_mask_storeu_epi32(dst + q * dld, m, r[q]);
    }
}

__attribute__((target("avx512f,avx512bw"))) static int64_t gm_load_pairs_k1(uint32_t *dst, int64_t dld,
                                                                           const exe_gemm_src *s, int64_t off,
                                                                           int64_t ws, int64_t kc, int64_t W)
{
    int kind = s->dtype == TPU_BF16 ? 2 : s->part == EXE_MX_LO ? 1 : 0;
    if (s->dtype == TPU_BF16 && s->part == EXE_MX_LO) return 0;   /* zeros: gm_load_pairs */
    size_t es = kind == 2 ? 2 : 4;
    int64_t ng = kc / 32;   /* groups of 16 pairs */
    if (W > 32 || ng == 0) return 0;
    for (int64_t w0 = 0; w0 < W; w0 += 16) {
        int wn = (int)UT_MIN((int64_t)16, W - w0);
        const char *p = (const char *)s->p + (size_t)(off + w0 * ws) * es;
        size_t rs = (size_t)ws * es, gs = 32 * es;
        if (kind == 0) gm_k1_block(0, dst + w0, dld, p, rs, gs, ng, wn);
        else if (kind == 1) gm_k1_block(1, dst + w0, dld, p, rs, gs, ng, wn);
        else gm_k1_block(2, dst + w0, dld, p, rs, gs, ng, wn);
    }
    return 16 * ng;
}

/* The same for an operand contiguous along w (ws 1: a row-major B, a transposed A) read as f32 part HI, 16 w
 * at a time: VCVTNE2PS2BF16 rounds two rows (k, k+1) to bf16 in one instruction and a word permutation
 * pairs them. It rounds normal numbers (inf included) to nearest even like exe_mx_hi but reads f32 subnormals
 * as zero (exe_mx_hi rounds the largest ones up to the smallest normal) and keeps NaN payloads, so a group
 * holding either takes the integer rounding of gm_v_hi instead: bit for bit gm_load_pairs. Returns the pairs
 * done (all whole pairs; an odd kc leaves the last one to gm_load_pairs). */
#ifndef GM_W1_AHEAD
#define GM_W1_AHEAD 4   /* pairs of rows prefetched ahead */
#endif
__attribute__((target("avx512f,avx512bw,avx512bf16"))) static int64_t gm_load_pairs_w1(uint32_t *dst, int64_t dld,
                                                                                      const exe_gemm_src *s, int64_t off,
                                                                                      int64_t ks, int64_t kc, int64_t W)
{
    if (s->dtype != TPU_F32 || s->part != EXE_MX_HI) return 0;
    const float *p = (const float *)s->p + off;
    /* 16-bit lane 2w: element w of the second row (low half of word w), lane 2w + 1: of the first */
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    int64_t np = kc / 2;
    for (int64_t q = 0; q < np; q++) {
        const float *r0 = p + 2 * q * ks, *r1 = r0 + ks;
        uint32_t *d = dst + q * dld;
        /* the rows are far apart (a row-major B: a whole row of N apart), each read for a panel's few lines:
         * the hardware prefetcher does not follow, and the loads waited on memory (60% of this loop) */
        if (q + GM_W1_AHEAD < np)
            for (int64_t w = 0; w < W; w += 16) {
                _mm_prefetch((const char *)(r0 + 2 * GM_W1_AHEAD * ks + w), _MM_HINT_T0);
                _mm_prefetch((const char *)(r1 + 2 * GM_W1_AHEAD * ks + w), _MM_HINT_T0);
            }
        for (int64_t w = 0; w < W; w += 16) {
            __mmask16 m = W - w >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (W - w)) - 1);
            __m512i a = _mm512_maskz_loadu_epi32(m, r0 + w), b = _mm512_maskz_loadu_epi32(m, r1 + w);
            __m512i ma = _mm512_and_si512(a, GM_R(0x7FFFFFFF)), mb = _mm512_and_si512(b, GM_R(0x7FFFFFFF));
            /* NaN (> inf) or subnormal (1 .. 0x7FFFFF: magnitude - 1 below 0x7FFFFF unsigned) */
            __mmask16 odd = _mm512_cmpgt_epu32_mask(ma, GM_R(0x7F800000)) | _mm512_cmpgt_epu32_mask(mb, GM_R(0x7F800000)) |
                            _mm512_cmplt_epu32_mask(_mm512_sub_epi32(ma, GM_R(1)), GM_R(0x7FFFFF)) |
                            _mm512_cmplt_epu32_mask(_mm512_sub_epi32(mb, GM_R(1)), GM_R(0x7FFFFF));
            __m512i v;
            if (odd & m)
                v = _mm512_or_si512(gm_v_hi(a), _mm512_srli_epi32(gm_v_hi(b), 16));
            else
                v = _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(_mm512_castsi512_ps(a), _mm512_castsi512_ps(b)));
            _mm512_mask_storeu_epi32(d + w, m, v);
        }
    }
    return np;
}

/* The same for bf16 data (not part LO: zeros), 16 w at a time: gm_h16 (a subnormal to signed zero) on
 * both rows, then row k to the high half of each word and row k+1 to the low half. */
__attribute__((target("avx512f,avx512bw"))) static int64_t gm_load_pairs_w1_bf16(uint32_t *dst, int64_t dld,
                                                                                const exe_gemm_src *s, int64_t off,
                                                                                int64_t ks, int64_t kc, int64_t W)
{
    if (s->dtype != TPU_BF16 || s->part == EXE_MX_LO) return 0;
    const uint16_t *p = (const uint16_t *)s->p + off;
    const __m512i ex = _mm512_set1_epi32(0x7F80), sg = _mm512_set1_epi32(0x8000);
    int64_t np = kc / 2;
    for (int64_t q = 0; q < np; q++) {
        const uint16_t *r0 = p + 2 * q * ks, *r1 = r0 + ks;
        uint32_t *d = dst + q * dld;
        if (q + GM_W1_AHEAD < np)   /* as gm_load_pairs_w1 */
            for (int64_t w = 0; w < W; w += 32) {
                _mm_prefetch((const char *)(r0 + 2 * GM_W1_AHEAD * ks + w), _MM_HINT_T0);
                _mm_prefetch((const char *)(r1 + 2 * GM_W1_AHEAD * ks + w), _MM_HINT_T0);
            }
        for (int64_t w = 0; w < W; w += 16) {
            __mmask16 m = W - w >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (W - w)) - 1);
            __m256i a16, b16;   /* (a 64-byte masked load for 32 bytes would touch the next line too) */
            if (m == 0xFFFF)
                a16 = _mm256_loadu_si256((const __m256i *)(r0 + w)), b16 = _mm256_loadu_si256((const __m256i *)(r1 + w));
            else
                a16 = _mm512_castsi512_si256(_mm512_maskz_loadu_epi16(m, r0 + w)),
                b16 = _mm512_castsi512_si256(_mm512_maskz_loadu_epi16(m, r1 + w));
            __m512i a = _mm512_cvtepu16_epi32(a16), b = _mm512_cvtepu16_epi32(b16);
            a = _mm512_mask_and_epi32(a, _mm512_testn_epi32_mask(a, ex), a, sg);
            b = _mm512_mask_and_epi32(b, _mm512_testn_epi32_mask(b, ex), b, sg);
            __m512i v = _mm512_or_si512(_mm512_slli_epi32(a, 16), b);
            _mm512_mask_storeu_epi32(d + w, m, v);
        }
    }
    return np;
}
#undef GM_R

static int64_t gm_load_pairs_w1_any(uint32_t *dst, int64_t dld, const exe_gemm_src *s, int64_t off, int64_t ks,
                                    int64_t kc, int64_t W)
{
    return s->dtype == TPU_BF16 ? gm_load_pairs_w1_bf16(dst, dld, s, off, ks, kc, W) : gm_load_pairs_w1(dst, dld, s, off, ks, kc, W);
}

/* A panel: rows [i0, i0+mr) x k [k0, k0+kc) -> dst[(k/2) * MR + i], rows >= mr zero. */
static void gm_pack_a16(const exe_gemm_src *A, int64_t i0, int mr, int64_t k0, int64_t kc, uint32_t *dst, int MR)
{
    int64_t off = i0 * A->rs + k0 * A->cs, done = A->cs == 1 && A->rs != 1 ? gm_load_pairs_k1(dst, MR, A, off, A->rs, kc, mr)
                                                 : A->rs == 1 ? gm_load_pairs_w1_any(dst, MR, A, off, A->cs, kc, mr) : 0;
    gm_load_pairs(dst + done * MR, MR, A, off + 2 * done * A->cs, A->cs, A->rs, kc - 2 * done, mr, 0x8000u);
    if (mr < MR)
        for (int64_t q = 0; q < (kc + 1) / 2; q++) memset(dst + q * MR + mr, 0, (size_t)(MR - mr) * sizeof(uint32_t));
}

/* B panel: k [k0, k0+kc) x cols [j0, j0+nr) -> dst[(k/2) * NR + j], cols >= nr zero. */
static void gm_pack_b16(const exe_gemm_src *B, int64_t k0, int64_t kc, int64_t j0, int nr, uint32_t *dst, int NR)
{
    int64_t off = k0 * B->rs + j0 * B->cs, done = B->rs == 1 && B->cs != 1 ? gm_load_pairs_k1(dst, NR, B, off, B->cs, kc, nr)
                                                 : B->cs == 1 ? gm_load_pairs_w1_any(dst, NR, B, off, B->rs, kc, nr) : 0;
    gm_load_pairs(dst + done * NR, NR, B, off + 2 * done * B->rs, B->rs, B->cs, kc - 2 * done, nr, 0u);
    if (nr < NR)
        for (int64_t q = 0; q < (kc + 1) / 2; q++) memset(dst + q * NR + nr, 0, (size_t)(NR - nr) * sizeof(uint32_t));
}
#endif

/* ---- microkernels: C[MR][NR] (ldc) = (load ? C : 0) + Ap·Bp over kc ---- */

/* Cn: the next tile's C (or NULL), prefetched during the k loop: C rows are far apart (often 4 KiB-aliased),
 * and loading them cold at the start of each tile cost a third of the speed. */
/* pf: source lines of the next block to prefetch during the k loop (NULL: none), line k < n at
 * p + (k / 16) * s + (k % 16) * 64: a skinny product's big operand streams from memory while the tiles
 * compute, instead of stalling its packing (gm_task). */
typedef struct gm_pf {
    const char *p;
    int64_t     s, n;
} gm_pf;
typedef void (*gm_kernel)(int64_t kc, const void *Ap, const void *Bp, float *C, int64_t ldc, int load,
                          const float *Cn, const gm_pf *pf);

static void gm_k_portable(int64_t kc, const void *Ap_, const void *Bp_, float *C, int64_t ldc, int load, const float *Cn,
                          const gm_pf *pf)
{
    const float *Ap = Ap_, *Bp = Bp_;
    (void)Cn, (void)pf;
    enum { MR = 4, NR = 16 };
    float c[MR][NR];
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) c[i][j] = load ? C[i * ldc + j] : 0.0f;
    for (int64_t k = 0; k < kc; k++, Bp += NR)
        for (int i = 0; i < MR; i++)
            for (int j = 0; j < NR; j++) c[i][j] = fmaf(Ap[i * kc + k], Bp[j], c[i][j]);
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) C[i * ldc + j] = c[i][j];
}

#ifdef GM_X86
__attribute__((target("avx2,fma"))) static void gm_k_avx2(int64_t kc, const void *Ap_, const void *Bp_, float *C,
                                                          int64_t ldc, int load, const float *Cn, const gm_pf *pf)
{
    const float *Ap = Ap_, *Bp = Bp_;
    (void)pf;
    __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
    if (load) {
        c00 = _mm256_loadu_ps(C), c01 = _mm256_loadu_ps(C + 8);
        c10 = _mm256_loadu_ps(C + ldc), c11 = _mm256_loadu_ps(C + ldc + 8);
        c20 = _mm256_loadu_ps(C + 2 * ldc), c21 = _mm256_loadu_ps(C + 2 * ldc + 8);
        c30 = _mm256_loadu_ps(C + 3 * ldc), c31 = _mm256_loadu_ps(C + 3 * ldc + 8);
        c40 = _mm256_loadu_ps(C + 4 * ldc), c41 = _mm256_loadu_ps(C + 4 * ldc + 8);
        c50 = _mm256_loadu_ps(C + 5 * ldc), c51 = _mm256_loadu_ps(C + 5 * ldc + 8);
    } else {
        c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = _mm256_setzero_ps();
    }
    const float *A0 = Ap, *A1 = Ap + kc, *A2 = Ap + 2 * kc, *A3 = Ap + 3 * kc, *A4 = Ap + 4 * kc, *A5 = Ap + 5 * kc;
    for (int64_t k = 0; k < kc; k++, Bp += 16) {
        if (Cn && k < 6) _mm_prefetch((const char *)(Cn + k * ldc), _MM_HINT_T0);
        __m256 b0 = _mm256_loadu_ps(Bp), b1 = _mm256_loadu_ps(Bp + 8), a;
        a = _mm256_broadcast_ss(A0 + k); c00 = _mm256_fmadd_ps(a, b0, c00); c01 = _mm256_fmadd_ps(a, b1, c01);
        a = _mm256_broadcast_ss(A1 + k); c10 = _mm256_fmadd_ps(a, b0, c10); c11 = _mm256_fmadd_ps(a, b1, c11);
        a = _mm256_broadcast_ss(A2 + k); c20 = _mm256_fmadd_ps(a, b0, c20); c21 = _mm256_fmadd_ps(a, b1, c21);
        a = _mm256_broadcast_ss(A3 + k); c30 = _mm256_fmadd_ps(a, b0, c30); c31 = _mm256_fmadd_ps(a, b1, c31);
        a = _mm256_broadcast_ss(A4 + k); c40 = _mm256_fmadd_ps(a, b0, c40); c41 = _mm256_fmadd_ps(a, b1, c41);
        a = _mm256_broadcast_ss(A5 + k); c50 = _mm256_fmadd_ps(a, b0, c50); c51 = _mm256_fmadd_ps(a, b1, c51);
    }
    _mm256_storeu_ps(C, c00), _mm256_storeu_ps(C + 8, c01);
    _mm256_storeu_ps(C + ldc, c10), _mm256_storeu_ps(C + ldc + 8, c11);
    _mm256_storeu_ps(C + 2 * ldc, c20), _mm256_storeu_ps(C + 2 * ldc + 8, c21);
    _mm256_storeu_ps(C + 3 * ldc, c30), _mm256_storeu_ps(C + 3 * ldc + 8, c31);
    _mm256_storeu_ps(C + 4 * ldc, c40), _mm256_storeu_ps(C + 4 * ldc + 8, c41);
    _mm256_storeu_ps(C + 5 * ldc, c50), _mm256_storeu_ps(C + 5 * ldc + 8, c51);
}

#define GM_ROW512(i)                                                          \
    a = _mm512_set1_ps(Ap[i * kc + k]);                                             \
    c##i##0 = _mm512_fmadd_ps(a, b0, c##i##0);                                \
    c##i##1 = _mm512_fmadd_ps(a, b1, c##i##1);
#define GM_LOAD512(i)                                                         \
    c##i##0 = load ? _mm512_loadu_ps(C + i * ldc) : _mm512_setzero_ps();      \
    c##i##1 = load ? _mm512_loadu_ps(C + i * ldc + 16) : _mm512_setzero_ps();
#define GM_STORE512(i)                                                        \
    _mm512_storeu_ps(C + i * ldc, c##i##0);                                   \
    _mm512_storeu_ps(C + i * ldc + 16, c##i##1);

__attribute__((target("avx512f"))) static void gm_k_avx512(int64_t kc, const void *Ap_, const void *Bp_, float *C,
                                                           int64_t ldc, int load, const float *Cn, const gm_pf *pf)
{
    const float *Ap = Ap_, *Bp = Bp_;
    (void)pf;
    __m512 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51, c60, c61, c70, c71, c80, c81, c90, c91;
    __m512 c100, c101, c110, c111;
    GM_LOAD512(0) GM_LOAD512(1) GM_LOAD512(2) GM_LOAD512(3) GM_LOAD512(4) GM_LOAD512(5)
    GM_LOAD512(6) GM_LOAD512(7) GM_LOAD512(8) GM_LOAD512(9) GM_LOAD512(10) GM_LOAD512(11)
    for (int64_t k = 0; k < kc; k++, Bp += 32) {
        if (Cn && k < 24) _mm_prefetch((const char *)(Cn + (k >> 1) * ldc + (k & 1) * 16), _MM_HINT_T0);
        __m512 b0 = _mm512_loadu_ps(Bp), b1 = _mm512_loadu_ps(Bp + 16), a;
        GM_ROW512(0) GM_ROW512(1) GM_ROW512(2) GM_ROW512(3) GM_ROW512(4) GM_ROW512(5)
        GM_ROW512(6) GM_ROW512(7) GM_ROW512(8) GM_ROW512(9) GM_ROW512(10) GM_ROW512(11)
    }
    GM_STORE512(0) GM_STORE512(1) GM_STORE512(2) GM_STORE512(3) GM_STORE512(4) GM_STORE512(5)
    GM_STORE512(6) GM_STORE512(7) GM_STORE512(8) GM_STORE512(9) GM_STORE512(10) GM_STORE512(11)
}

/* The same with pf's prefetches in the first pf->n (> 0) iterations: a second function (gm_impl.kpf), as a
 * test in gm_k_avx512, or a call from it, cost 7% of 4096x4096x64 (short tiles). */
__attribute__((target("avx512f"))) static void gm_k_avx512_pf(int64_t kc, const void *Ap_, const void *Bp_, float *C,
                                                              int64_t ldc, int load, const float *Cn, const gm_pf *pf)
{
    const float *Ap = Ap_, *Bp = Bp_;
    const char *pfp = pf->p;
    int64_t pfs = pf->s, pfn = UT_MIN(pf->n, kc), k = 0;
    __m512 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51, c60, c61, c70, c71, c80, c81, c90, c91;
    __m512 c100, c101, c110, c111;
    GM_LOAD512(0) GM_LOAD512(1) GM_LOAD512(2) GM_LOAD512(3) GM_LOAD512(4) GM_LOAD512(5)
    GM_LOAD512(6) GM_LOAD512(7) GM_LOAD512(8) GM_LOAD512(9) GM_LOAD512(10) GM_LOAD512(11)
#define GM_K512_STEP                                                                                   \
    if (Cn && k < 24) _mm_prefetch((const char *)(Cn + (k >> 1) * ldc + (k & 1) * 16), _MM_HINT_T0);  \
    __m512 b0 = _mm512_loadu_ps(Bp), b1 = _mm512_loadu_ps(Bp + 16), a;                                \
    GM_ROW512(0) GM_ROW512(1) GM_ROW512(2) GM_ROW512(3) GM_ROW512(4) GM_ROW512(5)                     \
    GM_ROW512(6) GM_ROW512(7) GM_ROW512(8) GM_ROW512(9) GM_ROW512(10) GM_ROW512(11)
    for (; k < pfn; k++, Bp += 32) {
        _mm_prefetch(pfp + (k >> 4) * pfs + (k & 15) * 64, _MM_HINT_T0);
        GM_K512_STEP
    }
    for (; k < kc; k++, Bp += 32) {
        GM_K512_STEP
    }
#undef GM_K512_STEP
    GM_STORE512(0) GM_STORE512(1) GM_STORE512(2) GM_STORE512(3) GM_STORE512(4) GM_STORE512(5)
    GM_STORE512(6) GM_STORE512(7) GM_STORE512(8) GM_STORE512(9) GM_STORE512(10) GM_STORE512(11)
}

/* The same tile with only the first R < 12 rows (the rows of a product's last panel: M = 64 is 5 x 12 + 4,
 * and the 12-row kernel spent an eighth of 64 x N x K on zero rows); each row's chains are the 12-row
 * kernel's. Instantiated per R (gm_k_avx512_rows), so the unused rows compile away. */
#define GM_ROWR(i) if (R > i) { GM_ROW512(i) }
#define GM_LOADR(i) if (R > i) { GM_LOAD512(i) }
#define GM_STORER(i) if (R > i) { GM_STORE512(i) }
__attribute__((target("avx512f"), always_inline)) static inline void gm_k_avx512_r(int R, int64_t kc, const float *Ap,
                                                                                  const float *Bp, float *C, int64_t ldc,
                                                                                  int load, const float *Cn,
                                                                                  const char *pfp, int64_t pfs,
                                                                                  int64_t pfn)
{
    __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00,
           c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00, c70 = c00, c71 = c00, c80 = c00,
           c81 = c00, c90 = c00, c91 = c00, c100 = c00, c101 = c00;
    GM_LOADR(0) GM_LOADR(1) GM_LOADR(2) GM_LOADR(3) GM_LOADR(4) GM_LOADR(5)
    GM_LOADR(6) GM_LOADR(7) GM_LOADR(8) GM_LOADR(9) GM_LOADR(10)
    for (int64_t k = 0; k < kc; k++, Bp += 32) {
        if (Cn && k < 2 * R) _mm_prefetch((const char *)(Cn + (k >> 1) * ldc + (k & 1) * 16), _MM_HINT_T0);
        if (k < pfn) _mm_prefetch(pfp + (k >> 4) * pfs + (k & 15) * 64, _MM_HINT_T0);
        __m512 b0 = _mm512_loadu_ps(Bp), b1 = _mm512_loadu_ps(Bp + 16), a;
        GM_ROWR(0) GM_ROWR(1) GM_ROWR(2) GM_ROWR(3) GM_ROWR(4) GM_ROWR(5)
        GM_ROWR(6) GM_ROWR(7) GM_ROWR(8) GM_ROWR(9) GM_ROWR(10)
    }
    GM_STORER(0) GM_STORER(1) GM_STORER(2) GM_STORER(3) GM_STORER(4) GM_STORER(5)
    GM_STORER(6) GM_STORER(7) GM_STORER(8) GM_STORER(9) GM_STORER(10)
}

/* A tile of mr < 12 rows and all 32 columns, straight into C. */
__attribute__((target("avx512f"))) static void gm_k_avx512_rows(int mr, int64_t kc, const void *Ap_, const void *Bp_,
                                                                float *C, int64_t ldc, int load, const float *Cn,
                                                                const gm_pf *pf)
{
    const float *Ap = Ap_, *Bp = Bp_;
    const char *pfp = pf ? pf->p : NULL;
    int64_t pfs = pf ? pf->s : 0, pfn = pf ? pf->n : 0;
    switch (mr) {
#define GM_RCASE(r) case r: gm_k_avx512_r(r, kc, Ap, Bp, C, ldc, load, Cn, pfp, pfs, pfn); break;
        GM_RCASE(1) GM_RCASE(2) GM_RCASE(3) GM_RCASE(4) GM_RCASE(5) GM_RCASE(6)
        GM_RCASE(7) GM_RCASE(8) GM_RCASE(9) GM_RCASE(10) GM_RCASE(11)
#undef GM_RCASE
    default: break;
    }
}

#ifdef GM_BF16
/* 12x32 tile with VDPBF16PS: per k pair one word of A per row (broadcast) and two zmm of B pairs; each
 * instruction does 32 exact bf16 products added in k order (above). Ap: (kc+1)/2 x 12 words, Bp: (kc+1)/2 x 32. */
#define GM_ROW16(i)                                                           \
    a = (__m512bh)_mm512_set1_epi32((int)A[i]);                               \
    c##i##0 = _mm512_dpbf16_ps(c##i##0, a, b0);                               \
    c##i##1 = _mm512_dpbf16_ps(c##i##1, a, b1);

__attribute__((target("avx512f,avx512bf16"))) static void gm_k_avx512bf16(int64_t kc, const void *Ap, const void *Bp,
                                                                          float *C, int64_t ldc, int load,
                                                                          const float *Cn, const gm_pf *pf)
{
    (void)pf;
    __m512 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51, c60, c61, c70, c71, c80, c81, c90, c91;
    __m512 c100, c101, c110, c111;
    GM_LOAD512(0) GM_LOAD512(1) GM_LOAD512(2) GM_LOAD512(3) GM_LOAD512(4) GM_LOAD512(5)
    GM_LOAD512(6) GM_LOAD512(7) GM_LOAD512(8) GM_LOAD512(9) GM_LOAD512(10) GM_LOAD512(11)
    const uint32_t *A = Ap;
    const uint32_t *B = Bp;
    int64_t np = (kc + 1) / 2;
    for (int64_t q = 0; q < np; q++, A += 12, B += 32) {
        if (Cn && q < 24) _mm_prefetch((const char *)(Cn + (q >> 1) * ldc + (q & 1) * 16), _MM_HINT_T0);
        __m512bh b0 = (__m512bh)_mm512_loadu_si512((const void *)B), b1 = (__m512bh)_mm512_loadu_si512((const void *)(B + 16)), a;
        GM_ROW16(0) GM_ROW16(1) GM_ROW16(2) GM_ROW16(3) GM_ROW16(4) GM_ROW16(5)
        GM_ROW16(6) GM_ROW16(7) GM_ROW16(8) GM_ROW16(9) GM_ROW16(10) GM_ROW16(11)
    }
    GM_STORE512(0) GM_STORE512(1) GM_STORE512(2) GM_STORE512(3) GM_STORE512(4) GM_STORE512(5)
    GM_STORE512(6) GM_STORE512(7) GM_STORE512(8) GM_STORE512(9) GM_STORE512(10) GM_STORE512(11)
}
#endif
#endif

/* ---- kernel choice ---- */

/* A tile of mr < MR rows and NR columns (NULL: the full kernel on a copy of the tile) */
typedef void (*gm_kernel_rows)(int mr, int64_t kc, const void *Ap, const void *Bp, float *C, int64_t ldc, int load,
                               const float *Cn, const gm_pf *pf);

typedef struct gm_impl {
    const char *name;
    gm_kernel   k;
    gm_kernel   kpf;   /* k with gm_pf prefetches (NULL: k ignores them) */
    gm_kernel_rows kr;
    int         MR, NR, MC, NC, KC;
    int         bf16;   /* packs bf16 pairs (bf16-valued operands only) */
} gm_impl;

/* f32 microkernels, best first */
static const gm_impl gm_impls[] = {
#ifdef GM_X86
    {"avx512", gm_k_avx512, gm_k_avx512_pf, gm_k_avx512_rows, 12, 32, GM_MC512, GM_NC, GM_KC, 0},
    {"avx2", gm_k_avx2, NULL, NULL, 6, 16, 120, GM_NC, GM_KC, 0},
#endif
    {"portable", gm_k_portable, NULL, NULL, 4, 16, 64, 2048, GM_KC, 0},
};
#define GM_NIMPL ((int)(sizeof gm_impls / sizeof gm_impls[0]))

#ifdef GM_BF16
static const gm_impl gm_impl_bf16 = {"avx512bf16", gm_k_avx512bf16, NULL, NULL, 12, 32, GM_MC512, GM_NC, GM_KC16, 1};
#endif

/* What exe_gemm_force set: default (OpenBLAS, the bf16 kernel for bf16-valued operands where it is faster),
 * OpenBLAS only, one f32 microkernel for everything, or the bf16 kernel (f32 operands: the best f32 one). */
enum { GM_DEFAULT, GM_BLAS, GM_MICRO, GM_MICRO_BF16 };
static _Atomic int gm_choice = -1;
static _Atomic int gm_mode = GM_DEFAULT;

static int gm_auto(void)
{
#ifdef GM_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return 0;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 1;
#endif
    return GM_NIMPL - 1;
}

#ifdef GM_BF16
static int gm_has_bf16(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
}
#endif

static const gm_impl *gm_pick(void)
{
    int c = atomic_load(&gm_choice);
    if (c < 0) {
        c = gm_auto();
        atomic_store(&gm_choice, c);
    }
    return &gm_impls[c];
}

#ifdef GM_BF16
/* Is the bf16 kernel faster than the f32 one on this CPU? Both compute the same bits (gemm.h), so this only
 * decides speed: their inner loops are timed once on the same flops (best of 5 rounds, ~0.3 ms in all).
 * Measured: VDPBF16PS issues at half the FMA rate on the Intel Xeons of bench/README.md (f32 wins), at 1.65x
 * it on AMD EPYC Zen 5 (bf16 wins, 2-3x on large products). */
static int gm_bf16_wins(void)
{
    static _Atomic int wins = -1;
    int w = atomic_load(&wins);
    if (w >= 0) return w;
    enum { KC = 256, REPS = 48 };
    float *buf = ut_calloc((size_t)(12 + 32) * KC + 12 * 32 + 64, sizeof(float));
    if (!buf) return 0;
    float *Ap = buf, *Bp = Ap + 12 * KC, *C = Bp + 32 * KC;
    double best[2] = {1e30, 1e30};
    for (int round = 0; round < 5; round++)
        for (int k = 0; k < 2; k++) {
            double t0 = ut_now();
            for (int r = 0; r < REPS; r++) {
                if (k) gm_k_avx512bf16(KC / 2, Ap, Bp, C, 32, 0, C, NULL);   /* KC/2 pairs: the same flops */
                else gm_k_avx512(KC, Ap, Bp, C, 32, 0, C, NULL);
            }
            double t = ut_now() - t0;
            if (t < best[k]) best[k] = t;
        }
    ut_free(buf);
    w = best[1] < 0.9 * best[0];
    atomic_store(&wins, w);
    return w;
}
#endif

/* The bf16 kernel for this product of bf16-valued operands, or NULL. Default mode on a CPU with AVX-512: the
 * microkernels do every product (bit for bit exe_gemm_ref's chains; faster than OpenBLAS on every shape
 * measured on AMD EPYC Zen 5, where OpenBLAS 0.3.21 falls back to older kernels, and within a few percent
 * on one Intel core, ahead on many), the bf16 one where it beats the f32 one on this CPU (gm_bf16_wins). */
static const gm_impl *gm_pick_bf16(int mode, const exe_gemm_src *A, const exe_gemm_src *B, int64_t M, int64_t N,
                                   int64_t K)
{
#ifdef GM_BF16
    static _Atomic int has = -1;
    int h = atomic_load(&has);
    if (h < 0) atomic_store(&has, h = gm_has_bf16());
    if (!h || !gm_bf16_valued(A) || !gm_bf16_valued(B)) return NULL;
    if (mode == GM_MICRO_BF16) return &gm_impl_bf16;
    if (mode != GM_DEFAULT || M * N * K < 4096) return NULL;
    return gm_bf16_wins() ? &gm_impl_bf16 : NULL;
#else
    (void)mode, (void)A, (void)B, (void)M, (void)N, (void)K;
    return NULL;
#endif
}

const char *exe_gemm_kernel_name(void)
{
    int m = atomic_load(&gm_mode);
    exe_gemm_src b = {NULL, TPU_BF16, 1, 1, EXE_MX_AS_IS};
    if (m == GM_MICRO_BF16 && gm_pick_bf16(m, &b, &b, 1, 1, 1)) return "avx512bf16";
    if (m == GM_DEFAULT && !strcmp(gm_pick()->name, "avx512")) return gm_pick_bf16(m, &b, &b, 16, 16, 16) ? "avx512+avx512bf16" : "avx512";
    return m == GM_DEFAULT ? "openblas"
           : m == GM_BLAS  ? "openblas"
                           : gm_pick()->name;
}

int exe_gemm_micro_default(void) { return atomic_load(&gm_mode) == GM_DEFAULT && !strcmp(gm_pick()->name, "avx512"); }

/* For tests: B's panel [k0, k0+kc) x [j0, j0+W) (W <= 32) packed in bf16 pairs by gm_pack_b16 (the AVX-512
 * packers) and by gm_load_pairs alone (the scalar reference): the words that differ, -1 without the kernel. */
int64_t exe_gemm_pairs_diff(const exe_gemm_src *B, int64_t k0, int64_t kc, int64_t j0, int W)
{
#ifdef GM_BF16
    if (!gm_has_bf16() || W > 32 || !gm_bf16_valued(B)) return -1;
    int64_t nw = (kc + 1) / 2 * 32, nbad = 0;
    uint32_t *f = ut_calloc((size_t)(2 * nw), sizeof(uint32_t)), *r = f + nw;
    if (!f) return -1;
    gm_pack_b16(B, k0, kc, j0, W, f, 32);
    gm_load_pairs(r, 32, B, k0 * B->rs + j0 * B->cs, B->rs, B->cs, kc, W, 0u);
    for (int64_t i = 0; i < nw; i++) nbad += f[i] != r[i];
    free(f);
    return nbad;
#else
    (void)B, (void)k0, (void)kc, (void)j0, (void)W;
    return -1;
#endif
}

void exe_gemm_force(const char *name)
{
    int c = gm_auto(), m = name == NULL ? GM_DEFAULT : GM_MICRO;
    if (name && !strcmp(name, "openblas")) m = GM_BLAS;
    if (name && !strcmp(name, "avx512bf16")) m = GM_MICRO_BF16;
    for (int i = 0; name && i < GM_NIMPL; i++)
        if (!strcmp(gm_impls[i].name, name) && i >= c) c = i;   /* never one the CPU lacks */
    atomic_store(&gm_choice, c);
    atomic_store(&gm_mode, m);
}

/* ---- the blocked product ---- */

typedef struct gm_job {
    const gm_impl      *I;
    const exe_gemm_src *A, *B;
    float              *C;
    int64_t             M, ldc;
    int64_t             jc, nc, pc, kc;
    int                 load;        /* continue from C */
    float              *Bp;          /* packed B block: panels of kc x NR */
    int64_t             npanels;
    int64_t             nic, ngr, gw;   /* tasks: row blocks x panel groups of gw panels */
    int                 pfa, pfb;    /* prefetch the next block of A / of B during the tiles (gm_task) */
    const char         *pfb_p;       /* the next B block: its first row, row stride, rows, lines per row */
    int64_t             pfb_rs, pfb_rows, pfb_lines;
    float             **Ap;          /* per thread: MC x kc */
    int64_t            *aib;         /* per thread: the row block its Ap holds in this pass (-1: none) */
    _Atomic int         nomem;
} gm_job;

/* 4-byte words per k step of a panel row: one f32, or half of a bf16 pair */
static inline int64_t gm_kw(const gm_impl *I, int64_t kc) { return I->bf16 ? (kc + 1) / 2 : kc; }

static void gm_pack_b_chunk(void *ctx, int64_t p0, int64_t p1, int tid)
{
    gm_job *J = ctx;
    const gm_impl *I = J->I;
    int64_t pw = gm_kw(I, J->kc) * I->NR;
    if (!I->bf16 && J->B->cs == 1) {
        gm_pack_b_rows(J->B, J->pc, J->kc, J->jc, J->jc + J->nc, p0, p1, J->Bp, I->NR);
        return;
    }
    for (int64_t p = p0; p < p1; p++) {
        int64_t j0 = p * I->NR;
        int nr = (int)UT_MIN((int64_t)I->NR, J->nc - j0);
#ifdef GM_BF16
        if (I->bf16) {
            gm_pack_b16(J->B, J->pc, J->kc, J->jc + j0, nr, (uint32_t *)(J->Bp + p * pw), I->NR);
            continue;
        }
#endif
        gm_pack_b(J->B, J->pc, J->kc, J->jc + j0, nr, J->Bp + p * pw, I->NR);
    }
    (void)tid;
}

/* What tile u of this task (tile v of the pass) prefetches: rows pfr0 + u * pfr of A (pfr at most, before
 * pfr1), or row v of B's next block (gm_prefetch_plan). NULL: nothing. */
static __attribute__((noinline)) const gm_pf *gm_tile_pf(const gm_job *J, gm_pf *pf, int64_t pfr0, int64_t pfr1,
                                                         int64_t pfr, int64_t u, int64_t v)
{
    if (pfr) {
        int64_t pr = pfr0 + u * pfr, es = J->A->dtype == TPU_BF16 ? 2 : 4;
        if (pr >= pfr1) return NULL;
        pf->p = (const char *)J->A->p + (pr * J->A->rs + J->pc * J->A->cs) * es;
        pf->s = J->A->rs * es;
        pf->n = UT_MIN(pfr, pfr1 - pr) * 16;
        return pf;
    }
    if (v >= J->pfb_rows) return NULL;
    pf->p = J->pfb_p + v * J->pfb_rs;
    pf->s = 1024;
    pf->n = UT_MIN(J->pfb_lines, J->kc);
    return pf;
}

/* One (row block, panel group) task: pack A's block, then every tile. */
static void gm_task(void *ctx, int64_t t0, int64_t t1, int tid)
{
    gm_job *J = ctx;
    const gm_impl *I = J->I;
    float *Ap = J->Ap[tid];
    float ct[12 * 32];   /* edge tiles */
    for (int64_t t = t0; t < t1; t++) {
        int64_t ib = t / J->ngr, g = t % J->ngr;
        int64_t i0 = ib * I->MC, mc = UT_MIN((int64_t)I->MC, J->M - i0);
        int64_t np = (mc + I->MR - 1) / I->MR;
        int64_t aw = gm_kw(I, J->kc) * I->MR, bw = gm_kw(I, J->kc) * I->NR;
        /* a thread's next task is often another panel group of the same row block (few row blocks: a
         * loop's skinny product): its packed A is still there */
        for (int64_t q = 0; q < np && J->aib[tid] != ib; q++) {
            int mr = (int)UT_MIN((int64_t)I->MR, mc - q * I->MR);
#ifdef GM_BF16
            if (I->bf16) {
                gm_pack_a16(J->A, i0 + q * I->MR, mr, J->pc, J->kc, (uint32_t *)(Ap + q * aw), I->MR);
                continue;
            }
#endif
            gm_pack_a(J->A, i0 + q * I->MR, mr, J->pc, J->kc, Ap + q * aw, I->MR);
        }
        J->aib[tid] = ib;
        int64_t p0 = g * J->gw, p1 = UT_MIN(J->npanels, p0 + J->gw);
        /* the next row block of A (this task's share of its rows), pfr rows per tile */
        int64_t pfr0 = 0, pfr1 = 0, pfr = 0;
        if (J->pfa && ib + 1 < J->nic) {
            int64_t n0 = (ib + 1) * I->MC, n1 = UT_MIN(J->M, n0 + I->MC), sh = (n1 - n0 + J->ngr - 1) / J->ngr;
            pfr0 = n0 + g * sh, pfr1 = UT_MIN(n1, pfr0 + sh);
            pfr = UT_MIN((int64_t)16, (pfr1 - pfr0 + (p1 - p0) * np - 1) / ((p1 - p0) * np));
        }
        for (int64_t p = p0; p < p1; p++) {
            int64_t j = J->jc + p * I->NR;
            int nr = (int)UT_MIN((int64_t)I->NR, J->jc + J->nc - j);
            const float *Bp = J->Bp + p * bw;
            for (int64_t q = 0; q < np; q++) {
                int64_t i = i0 + q * I->MR;
                int mr = (int)UT_MIN((int64_t)I->MR, mc - q * I->MR);
                float *C = J->C + i * J->ldc + j;
                /* the next full tile's C, to prefetch */
                const float *Cn = NULL;
                if (q + 1 < np && mc - (q + 1) * I->MR >= I->MR) Cn = C + I->MR * J->ldc;
                else if (q + 1 == np && p + 1 < p1 && nr == I->NR) Cn = J->C + i0 * J->ldc + j + I->NR;
                gm_pf pf = {NULL, 0, 0};
                const gm_pf *pfp = NULL;
                if (pfr || J->pfb) pfp = gm_tile_pf(J, &pf, pfr0, pfr1, pfr, (p - p0) * np + q, p * np + q);
                if (mr == I->MR && nr == I->NR) {
                    (pfp ? I->kpf : I->k)(J->kc, Ap + q * aw, Bp, C, J->ldc, J->load, Cn, pfp);
                    continue;
                }
                if (nr == I->NR && I->kr) {
                    I->kr(mr, J->kc, Ap + q * aw, Bp, C, J->ldc, J->load, Cn, pfp);
                    continue;
                }
                if (J->load)
                    for (int r = 0; r < mr; r++) memcpy(ct + r * I->NR, C + r * J->ldc, (size_t)nr * sizeof(float));
                I->k(J->kc, Ap + q * aw, Bp, ct, I->NR, J->load, NULL, NULL);
                for (int r = 0; r < mr; r++) memcpy(C + r * J->ldc, ct + r * I->NR, (size_t)nr * sizeof(float));
            }
        }
    }
}

/* (clones so that fmaf is one instruction, not a libm call: tiny products in loop bodies run here) */
EXE_VEC
void exe_gemm_ref(int64_t M, int64_t N, int64_t K, const exe_gemm_src *A, const exe_gemm_src *B, float *C, int64_t ldc,
                  int accumulate)
{
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            float c = accumulate ? C[i * ldc + j] : 0.0f;
            for (int64_t k = 0; k < K; k++) c = fmaf(gm_get(A, i * A->rs + k * A->cs), gm_get(B, k * B->rs + j * B->cs), c);
            C[i * ldc + j] = c;
        }
}

/* Tiny products (the dots of loop bodies, 8x8): each operand converted once into an f32 block on the stack
 * (B's rows padded with zeros to a multiple of 16 columns), then every C element the same FMA chain in k
 * order as exe_gemm_ref (so the same bits), 16 columns at a time in one register-held accumulator.
 * Returns 0 when an operand is larger than GM_SMALL elements. */
#define GM_SMALL 2048
EXE_VEC
static int gm_small(int64_t M, int64_t N, int64_t K, const exe_gemm_src *A, const exe_gemm_src *B, float *C, int64_t ldc,
                    int accumulate)
{
    int64_t Np = (N + 15) & ~(int64_t)15;
    if (M * K > GM_SMALL || K * Np > GM_SMALL) return 0;
    float a[GM_SMALL], b[GM_SMALL];
    /* the block loaders convert as gm_get does, with the type and part tested once, not per element */
    gm_load_block(a, K, A, 0, A->rs, A->cs, M, K, 0);
    gm_load_block(b, Np, B, 0, B->rs, B->cs, K, N, 0);
    if (Np > N)
        for (int64_t k = 0; k < K; k++) memset(b + k * Np + N, 0, (size_t)(Np - N) * sizeof(float));
    for (int64_t i = 0; i < M; i++) {
        float *c = C + i * ldc;
        for (int64_t j0 = 0; j0 < Np; j0 += 16) {
            int64_t w = N - j0 < 16 ? N - j0 : 16;
            float acc[16];
            for (int j = 0; j < 16; j++) acc[j] = accumulate && j < w ? c[j0 + j] : 0.0f;
            for (int64_t k = 0; k < K; k++) {
                float av = a[i * K + k];
                const float *bk = b + k * Np + j0;
                for (int j = 0; j < 16; j++) acc[j] = fmaf(av, bk[j], acc[j]);
            }
            for (int64_t j = 0; j < w; j++) c[j0 + j] = acc[j];
        }
    }
    return 1;
}

#ifdef GM_X86
/* gm_tiny's register blocks: R rows of C x 16 columns (mask m), each row one accumulator, per k one FMA per row
 * (R independent chains in flight, where gm_small runs one) */
#define GM_T_LOAD(r) __m512 c##r = acc ? _mm512_maskz_loadu_ps(m, C + (i + r) * ldc + j0) : _mm512_setzero_ps();
#define GM_T_FMA(r) c##r = _mm512_fmadd_ps(_mm512_set1_ps(a[(i + r) * K + k]), bk, c##r);
#define GM_T_STORE(r) _mm512_mask_storeu_ps(C + (i + r) * ldc + j0, m, c##r);
#define GM_T_ROWS(R, EACH)                                                                          \
    for (; i + R <= M; i += R) {                                                                    \
        EACH(GM_T_LOAD)                                                                             \
        for (int64_t k = 0; k < K; k++) {                                                           \
            __m512 bk = _mm512_maskz_loadu_ps(m, b + k * N + j0);                                   \
            EACH(GM_T_FMA)                                                                          \
        }                                                                                           \
        EACH(GM_T_STORE)                                                                            \
    }
#define GM_T_8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define GM_T_4(X) X(0) X(1) X(2) X(3)
#define GM_T_1(X) X(0)

/* a: M x K, b: K x N, both row-major f32 (converted) */
__attribute__((target("avx512f"))) static void gm_tiny512(int64_t M, int64_t N, int64_t K, const float *a, const float *b,
                                                          float *C, int64_t ldc, int acc)
{
    for (int64_t j0 = 0; j0 < N; j0 += 16) {
        __mmask16 m = (__mmask16)(N - j0 >= 16 ? 0xFFFFu : (1u << (N - j0)) - 1);
        int64_t i = 0;
        GM_T_ROWS(8, GM_T_8)
        GM_T_ROWS(4, GM_T_4)
        GM_T_ROWS(1, GM_T_1)
    }
}

#endif

/* A converted operand, rows x cols row-major: one flat loop when the source is contiguous. */
static void gm_tiny_load(float *dst, const exe_gemm_src *s, int64_t rows, int64_t cols)
{
    if (s->cs == 1 && s->rs == cols) gm_load_block(dst, rows * cols, s, 0, rows * cols, 1, 1, rows * cols, 0);
    else gm_load_block(dst, cols, s, 0, s->rs, s->cs, rows, cols, 0);
}

/* Tiny products on AVX-512 (the 8x8 dots of loop bodies): both operands converted once into f32 blocks on the
 * stack, then register blocks of 8, 4 and 1 rows (gm_tiny512), no packing. Every C element is the same FMA
 * chain in k order as exe_gemm_ref (same bits as gm_small and the microkernels). Returns 0 without AVX-512
 * or when an operand is larger than GM_SMALL elements. */
static int gm_tiny(int64_t M, int64_t N, int64_t K, const exe_gemm_src *A, const exe_gemm_src *B, float *C, int64_t ldc,
                   int accumulate)
{
#ifdef GM_X86
    if (M * K > GM_SMALL || K * N > GM_SMALL || !__builtin_cpu_supports("avx512f")) return 0;
    _Alignas(64) float a[GM_SMALL], b[GM_SMALL];
    gm_tiny_load(a, A, M, K);
    gm_tiny_load(b, B, K, N);
    gm_tiny512(M, N, K, a, b, C, ldc, accumulate);
    return 1;
#else
    (void)M, (void)N, (void)K, (void)A, (void)B, (void)C, (void)ldc, (void)accumulate;
    return 0;
#endif
}

int exe_gemm_tiny(int which, int64_t M, int64_t N, int64_t K, const exe_gemm_src *A, const exe_gemm_src *B, float *C,
                  int64_t ldc, int accumulate)
{
    if (M <= 0 || N <= 0 || K <= 0) return 0;
    return which == 0 ? gm_tiny(M, N, K, A, B, C, ldc, accumulate) : gm_small(M, N, K, A, B, C, ldc, accumulate);
}

/* ---- the OpenBLAS path ----
 * OpenBLAS's sgemm (its SkylakeX AVX-512 kernels) measured faster than the microkernels above for every f32
 * shape we tried but a few skinny ones (bench/gemm_bench: ~145-155 vs ~115-130 GFLOP/s on one core at 4096^3;
 * 2-4x at 32-128), so it does the large products: operands it can read as they are go straight in, others
 * (bf16, rounded or split parts, odd strides) are converted into f32 copies first. The product is split into
 * column (or row) blocks, a fixed number that does not depend on the thread count, one sgemm per block. */
typedef struct gm_blas_job {
    int          ta, tb;
    int64_t      M, N, K, lda, ldb, ldc;
    const float *A, *B;
    float       *C;
    int          split_n, nb, beta1;
} gm_blas_job;

static void gm_blas_chunk(void *ctx, int64_t b0, int64_t b1, int tid)
{
    const gm_blas_job *J = ctx;
    for (int64_t b = b0; b < b1; b++) {
        int64_t ext = J->split_n ? J->N : J->M, e0 = ext * b / J->nb, e1 = ext * (b + 1) / J->nb;
        if (e1 <= e0) continue;
        const float *A = J->A, *B = J->B;
        float *C = J->C;
        int64_t M = J->M, N = J->N;
        if (J->split_n) {
            B += J->tb ? e0 * J->ldb : e0;
            C += e0;
            N = e1 - e0;
        } else {
            A += J->ta ? e0 : e0 * J->lda;
            C += e0 * J->ldc;
            M = e1 - e0;
        }
        exe_mx_gemm_blas(0, J->ta, J->tb, M, N, J->K, A, J->lda, B, J->ldb, J->beta1, C, J->ldc);
    }
    (void)tid;
}

/* Can BLAS read this f32 operand (rows x cols) as it is? Sets *trans and *ld. */
static int gm_blas_direct(const exe_gemm_src *s, int64_t rows, int64_t cols, int *trans, int64_t *ld)
{
    if (s->dtype != TPU_F32 || s->part != EXE_MX_AS_IS) return 0;
    int64_t lim = (int64_t)1 << 30;
    if ((s->cs == 1 || cols == 1) && (rows == 1 || (s->rs >= cols && s->rs < lim))) {
        *trans = 0;
        *ld = rows == 1 ? UT_MAX(cols, (int64_t)1) : s->rs;
        return 1;
    }
    if ((s->rs == 1 || rows == 1) && (cols == 1 || (s->cs >= rows && s->cs < lim))) {
        *trans = 1;
        *ld = cols == 1 ? UT_MAX(rows, (int64_t)1) : s->cs;
        return 1;
    }
    return 0;
}

typedef struct gm_conv_job {
    const exe_gemm_src *s;
    float              *dst;
    int64_t             cols;
} gm_conv_job;

static void gm_conv_chunk(void *ctx, int64_t r0, int64_t r1, int tid)
{
    const gm_conv_job *J = ctx;
    gm_load_block(J->dst + r0 * J->cols, J->cols, J->s, r0 * J->s->rs, J->s->rs, J->s->cs, r1 - r0, J->cols, 0);
    (void)tid;
}


static int gm_blas(int nt, int64_t M, int64_t N, int64_t K, const exe_gemm_src *A, const exe_gemm_src *B, float *C,
                   int64_t ldc, int accumulate)
{
    gm_blas_job J;
    memset(&J, 0, sizeof J);
    float *ca = NULL, *cb = NULL;
    tpu_tensor *ha = NULL, *hb = NULL;
    J.M = M;
    J.N = N;
    J.K = K;
    J.C = C;
    J.ldc = ldc;
    J.beta1 = accumulate;
    if (gm_blas_direct(A, M, K, &J.ta, &J.lda)) {
        J.A = A->p;
    } else {
        ca = exe_scratch_alloc((size_t)(M * K) * sizeof(float), &ha);
        if (!ca) return 0;
        gm_conv_job cj = {A, ca, K};
        exe_par_for(M * K > 65536 ? nt : 1, M, UT_MAX((int64_t)1, 16384 / UT_MAX(K, (int64_t)1)), gm_conv_chunk, &cj);
        J.A = ca;
        J.lda = K;
    }
    if (gm_blas_direct(B, K, N, &J.tb, &J.ldb)) {
        J.B = B->p;
    } else {
        cb = exe_scratch_alloc((size_t)(K * N) * sizeof(float), &hb);
        if (!cb) {
            exe_scratch_free(ha);
            return 0;
        }
        gm_conv_job cj = {B, cb, N};
        exe_par_for(K * N > 65536 ? nt : 1, K, UT_MAX((int64_t)1, 16384 / UT_MAX(N, (int64_t)1)), gm_conv_chunk, &cj);
        J.B = cb;
        J.ldb = N;
    }
    J.split_n = N >= M;
    int64_t ext = J.split_n ? N : M;
    double flops = 2.0 * (double)M * (double)N * (double)K;
    /* every block repacks the other operand inside BLAS: few blocks, but enough for the threads of a big
     * product (the count follows the size only) */
    J.nb = flops < 4e6 ? 1 : (int)UT_MAX((int64_t)1, UT_MIN((int64_t)8, UT_MIN(ext / 256, (int64_t)(flops / 5e8) + 1)));
    /* a power of two, so 2, 4 or 8 threads share the blocks evenly (3 blocks on 2 threads left one thread
     * idle for a third of the product: 8.8 ms instead of 5.5 for 512x1024x1024) */
    while (J.nb & (J.nb - 1)) J.nb &= J.nb - 1;
    /* mid-size products (an LSTM step's 64x256x1024) are worth two threads: LSTM train step 80 -> 67 ms */
    if (J.nb == 1 && flops >= 1.6e7 && ext >= 512) J.nb = 2;
    exe_par_for(J.nb > 1 ? nt : 1, J.nb, 1, gm_blas_chunk, &J);
    exe_scratch_free(ha);
    exe_scratch_free(hb);
    return 1;
}

/* Where exe_gemm sends a product (the choice depends on the shape, the operands' dtypes and parts and the
 * mode, never on the thread count): *blas set: try OpenBLAS first; returns the packed microkernel to run (after
 * BLAS declines), or NULL for the tiny-product path. */
static const gm_impl *gm_route(int64_t M, int64_t N, int64_t K, const exe_gemm_src *A, const exe_gemm_src *B, int *blas)
{
    int mode = atomic_load(&gm_mode);
    const gm_impl *I = gm_pick_bf16(mode, A, B, M, N, K);
    /* operands OpenBLAS cannot read as they are (bf16, rounded or split parts): below 2 GFLOP the microkernel,
     * which converts while it packs, beats converting copies for sgemm (LSTM step in TPU numerics 87 -> 80 ms);
     * above, OpenBLAS's kernel wins (4096^3: 0.51 vs 0.57 s) */
    if (mode == GM_DEFAULT && !strcmp(gm_pick()->name, "avx512")) mode = GM_MICRO;   /* the microkernels (gm_pick_bf16) */
    if (mode == GM_DEFAULT && (double)M * (double)N * (double)K < 1e9 &&
        (A->dtype != TPU_F32 || A->part != EXE_MX_AS_IS || B->dtype != TPU_F32 || B->part != EXE_MX_AS_IS))
        mode = GM_MICRO;
    *blas = !I && (mode == GM_DEFAULT || mode == GM_BLAS) && M * N * K >= 512 && K >= 4 && M < INT32_MAX &&
            N < INT32_MAX && K < INT32_MAX;
    /* tiny products: packing costs more than it saves (same FMA chains either way) */
    if (M * N * K < 4096 || (M < 4 && N < 16)) return NULL;
    return I ? I : gm_pick();
}

/* Below this many multiply-adds a product runs on the calling thread: waking a worker costs microseconds, and
 * on a busy machine a preempted worker holds the whole product up (a GRU step's 32x384x128 took 26 us on one
 * thread, 58 us on two with the other core loaded). */
#define GM_SERIAL 4e6

/* The packed B blocks of a product, in the order the blocked loop uses them (for each NC column block, each
 * KC block): a loop's weights packed once (exe_gemm_bpack). */
struct exe_gemm_bpack {
    const gm_impl *I;
    exe_gemm_src   B;
    int64_t        N, K;
    float         *buf;
    size_t         bytes;
};

/* Floats of the packed block (jc, pc): npanels panels of kw(kc) x NR words. */
static int64_t gm_bblock_floats(const gm_impl *I, int64_t nc, int64_t kc)
{
    return (nc + I->NR - 1) / I->NR * I->NR * gm_kw(I, kc);
}

static void gm_run_packed(int nt, const gm_impl *I, int64_t M, int64_t N, int64_t K, const exe_gemm_src *A,
                          const exe_gemm_src *B, const exe_gemm_bpack *bp, float *C, int64_t ldc, int accumulate);

/* Share of the microkernel's tiles that holds real rows and columns. */
static double gm_fill(const gm_impl *I, int64_t M, int64_t N)
{
    return (double)M / (double)((M + I->MR - 1) / I->MR * I->MR) * (double)N / (double)((N + I->NR - 1) / I->NR * I->NR);
}

/* A product with few columns (a convolution's 6 output features, a matrix-vector product) fills a fraction of
 * each NR-wide tile; as C^T = B^T A^T its columns become rows, where the tile is narrower. */
static int gm_swap_wins(const gm_impl *I, int64_t M, int64_t N)
{
    return N < I->NR && gm_fill(I, N, M) > 1.3 * gm_fill(I, M, N);
}

/* C = A.B as T = B^T.A^T (T = C^T in scratch), then C = T^T: every element is the same FMA chain (the
 * products commute exactly), so the bits are gm_run_packed's. Returns 0 on no memory. */
static int gm_run_swapped(int nt, const gm_impl *I, int64_t M, int64_t N, int64_t K, const exe_gemm_src *A,
                          const exe_gemm_src *B, float *C, int64_t ldc, int accumulate)
{
    tpu_tensor *h = NULL;
    float *T = exe_scratch_alloc((size_t)(M * N) * sizeof(float) + 64, &h);
    if (!T) return 0;
    if (accumulate)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) T[j * M + i] = C[i * ldc + j];
    exe_gemm_src bt = *B, at = *A;
    bt.rs = B->cs, bt.cs = B->rs;
    at.rs = A->cs, at.cs = A->rs;
    gm_run_packed(nt, I, N, M, K, &bt, &at, NULL, T, M, accumulate);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) C[i * ldc + j] = T[j * M + i];
    exe_scratch_free(h);
    return 1;
}

static int gm_same_src(const exe_gemm_src *a, const exe_gemm_src *b)
{
    return a->p == b->p && a->dtype == b->dtype && a->rs == b->rs && a->cs == b->cs && a->part == b->part;
}

void exe_gemm_b(int threads, int64_t M, int64_t N, int64_t K, const exe_gemm_src *A, const exe_gemm_src *B,
                const exe_gemm_bpack *bp, float *C, int64_t ldc, int accumulate)
{
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        if (!accumulate)
            for (int64_t i = 0; i < M; i++) memset(C + i * ldc, 0, (size_t)N * sizeof(float));
        return;
    }
    int nt = exe_par_threads(threads);
    if (nt > GM_MAXT) nt = GM_MAXT;
    if ((double)M * (double)N * (double)K < GM_SERIAL) nt = 1;
    /* tiny products on AVX-512 CPUs go to gm_tiny whatever the kernel choice but OpenBLAS: straight there (a
     * loop body runs thousands) */
    if (M * N * K < 4096 && atomic_load(&gm_mode) != GM_BLAS && gm_tiny(M, N, K, A, B, C, ldc, accumulate)) return;
    int blas;
    const gm_impl *I = gm_route(M, N, K, A, B, &blas);
    if (blas && gm_blas(nt, M, N, K, A, B, C, ldc, accumulate)) return;
    if (!I) {
        if (!gm_tiny(M, N, K, A, B, C, ldc, accumulate) && !gm_small(M, N, K, A, B, C, ldc, accumulate))
            exe_gemm_ref(M, N, K, A, B, C, ldc, accumulate);
        return;
    }
    /* a packed B made for this very product (same kernel, sizes and source) stands in for packing it */
    if (bp && (bp->I != I || bp->N != N || bp->K != K || !gm_same_src(&bp->B, B))) bp = NULL;
    if (!bp && gm_swap_wins(I, M, N) && gm_run_swapped(nt, I, M, N, K, A, B, C, ldc, accumulate)) return;
    gm_run_packed(nt, I, M, N, K, A, B, bp, C, ldc, accumulate);
}

void exe_gemm(int threads, int64_t M, int64_t N, int64_t K, const exe_gemm_src *A, const exe_gemm_src *B, float *C,
              int64_t ldc, int accumulate)
{
    exe_gemm_b(threads, M, N, K, A, B, NULL, C, ldc, accumulate);
}

exe_gemm_bpack *exe_gemm_bpack_new(int64_t M, int64_t N, int64_t K, const exe_gemm_src *A, const exe_gemm_src *B)
{
    int blas;
    const gm_impl *I = M > 0 && N > 0 && K > 0 ? gm_route(M, N, K, A, B, &blas) : NULL;
    if (!I || blas || gm_swap_wins(I, M, N)) return NULL;
    size_t floats = 0;
    for (int64_t jc = 0; jc < N; jc += I->NC)
        for (int64_t pc = 0; pc < K; pc += I->KC)
            floats += (size_t)gm_bblock_floats(I, UT_MIN((int64_t)I->NC, N - jc), UT_MIN((int64_t)I->KC, K - pc));
    exe_gemm_bpack *bp = ut_calloc(1, sizeof *bp);
    if (!bp || !(bp->buf = ut_malloc(floats * sizeof(float) + 64))) {
        ut_free(bp);
        return NULL;
    }
    bp->I = I;
    bp->B = *B;
    bp->N = N;
    bp->K = K;
    bp->bytes = floats * sizeof(float);
    gm_job J;
    memset(&J, 0, sizeof J);
    J.I = I;
    J.B = B;
    float *dst = bp->buf;
    for (int64_t jc = 0; jc < N; jc += I->NC)
        for (int64_t pc = 0; pc < K; pc += I->KC) {
            J.jc = jc, J.nc = UT_MIN((int64_t)I->NC, N - jc), J.pc = pc, J.kc = UT_MIN((int64_t)I->KC, K - pc);
            J.npanels = (J.nc + I->NR - 1) / I->NR;
            J.Bp = dst;
            gm_pack_b_chunk(&J, 0, J.npanels, 0);
            dst += gm_bblock_floats(I, J.nc, J.kc);
        }
    return bp;
}

size_t exe_gemm_bpack_bytes(const exe_gemm_bpack *bp) { return bp ? bp->bytes : 0; }

void exe_gemm_bpack_free(exe_gemm_bpack *bp)
{
    if (!bp) return;
    ut_free(bp->buf);
    ut_free(bp);
}

/* Which operand the tiles of this pass prefetch the next block of (gm_pf): the one each element of which is
 * used least, from memory that it streams once. B's when one row block uses it (M <= MC: B's elements are
 * reused M times, and packing it waited on memory: 64x4096x4096), A's when the columns fit a few panels
 * (N <= 4 NR) and its packed rows are 16 lines (KC 256 f32). Sources contiguous along the side packed
 * only; not the bf16 kernel, nor a B packed beforehand. */
static void gm_prefetch_plan(gm_job *J, const gm_impl *I, int64_t N, int64_t K, int bpacked)
{
    const exe_gemm_src *A = J->A, *B = J->B;
    J->pfa = I->kpf && J->nic > 1 && J->npanels <= 4 && A->cs == 1 &&
             J->kc * (A->dtype == TPU_BF16 ? 2 : 4) == 1024;
    J->pfb = 0;
    if (!I->kpf || bpacked || J->nic != 1 || B->cs != 1) return;
    int64_t jn = J->jc, kn = J->pc + J->kc, nn = J->nc;   /* the next block: (jn, kn), nn columns */
    if (kn >= K) jn = J->jc + J->nc, kn = 0, nn = UT_MIN((int64_t)I->NC, N - jn);
    if (jn >= N) return;
    int64_t es = B->dtype == TPU_BF16 ? 2 : 4;
    J->pfb = 1;
    J->pfb_p = (const char *)B->p + (kn * B->rs + jn) * es;
    J->pfb_rs = B->rs * es;
    J->pfb_rows = UT_MIN((int64_t)I->KC, K - kn);
    J->pfb_lines = (nn * es + 63) / 64 + 1;
}

/* The blocked loop on nt threads with packing buffers Bp (B's block, unless bp) and Aps[nt]. */
static void gm_blocked(int nt, const gm_impl *I, int64_t M, int64_t N, int64_t K, const exe_gemm_src *A,
                       const exe_gemm_src *B, const exe_gemm_bpack *bp, float *C, int64_t ldc, int accumulate,
                       float *Bp, float **Aps)
{
    gm_job J;
    memset(&J, 0, sizeof J);
    J.I = I;
    J.A = A;
    J.B = B;
    J.C = C;
    J.M = M;
    J.ldc = ldc;
    J.Ap = Aps;
    int64_t aib[GM_MAXT];
    J.aib = aib;
    J.nic = (M + I->MC - 1) / I->MC;
    float *bnext = Bp;
    for (int64_t jc = 0; jc < N; jc += I->NC) {
        J.jc = jc;
        J.nc = UT_MIN((int64_t)I->NC, N - jc);
        J.npanels = (J.nc + I->NR - 1) / I->NR;
        /* enough tasks for the threads: split the panels into groups when there are few row blocks */
        J.ngr = 1;
        if (nt > 1 && J.nic < 4 * nt) J.ngr = UT_MIN(J.npanels, (4 * nt + J.nic - 1) / J.nic);
        J.gw = (J.npanels + J.ngr - 1) / J.ngr;
        J.ngr = (J.npanels + J.gw - 1) / J.gw;
        for (int64_t pc = 0; pc < K; pc += I->KC) {
            J.pc = pc;
            J.kc = UT_MIN((int64_t)I->KC, K - pc);
            J.load = accumulate || pc > 0;
            if (bp) {
                J.Bp = bnext;
                bnext += gm_bblock_floats(I, J.nc, J.kc);
            } else {
                J.Bp = Bp;
                exe_par_for(J.npanels * J.kc * I->NR > 65536 ? nt : 1, J.npanels, UT_MAX((int64_t)1, J.npanels / (4 * nt)),
                            gm_pack_b_chunk, &J);
            }
            gm_prefetch_plan(&J, I, N, K, bp != NULL);
            for (int i = 0; i < nt; i++) aib[i] = -1;   /* a new k block: every Ap is stale */
            exe_par_for(nt, J.nic * J.ngr, 1, gm_task, &J);
        }
    }
}

/* A skinny product split into nt independent ones along its long side, each with its own buffers. */
typedef struct gm_split {
    const gm_impl      *I;
    const exe_gemm_src *A, *B;
    float              *C;
    int64_t             M, N, K, ldc, step;   /* rows (bycols 0) or columns per part */
    int                 accumulate, bycols;
    float             **Bps, **Aps;
} gm_split;

static void gm_split_chunk(void *ctx, int64_t c0, int64_t c1, int tid)
{
    const gm_split *S = ctx;
    (void)tid;
    for (int64_t c = c0; c < c1; c++) {
        exe_gemm_src a = *S->A, b = *S->B;
        int64_t lo = c * S->step, n = UT_MIN(S->step, (S->bycols ? S->N : S->M) - lo);
        if (n <= 0) continue;
        if (S->bycols) {
            b.p = (const char *)b.p + lo * b.cs * (b.dtype == TPU_BF16 ? 2 : 4);
            gm_blocked(1, S->I, S->M, n, S->K, &a, &b, NULL, S->C + lo, S->ldc, S->accumulate, S->Bps[c], S->Aps + c);
        } else {
            a.p = (const char *)a.p + lo * a.rs * (a.dtype == TPU_BF16 ? 2 : 4);
            gm_blocked(1, S->I, n, S->N, S->K, &a, &b, NULL, S->C + lo * S->ldc, S->ldc, S->accumulate, S->Bps[c],
                       S->Aps + c);
        }
    }
}

/* The blocked product on microkernel I; B's blocks from bp when given. On several threads, a product with
 * one row block (M <= MC) and many columns runs as one product per thread on a share of the columns, and
 * one with few columns (N <= 4 NR) and many rows as one per thread on a share of the rows: no barrier per
 * block (two per KC x NC block otherwise), which on a shared machine cost 64x4096x4096 a third of its
 * 2-thread time (each C element is the same chain either way). */
static void gm_run_packed(int nt, const gm_impl *I, int64_t M, int64_t N, int64_t K, const exe_gemm_src *A,
                          const exe_gemm_src *B, const exe_gemm_bpack *bp, float *C, int64_t ldc, int accumulate)
{
    int bycols = M <= I->MC && N >= 4 * nt * I->NR, byrows = N <= 4 * I->NR && M >= 2 * nt * I->MC;
    int split = nt > 1 && !bp && (bycols || byrows);
    int nb = split ? nt : 1;
    int64_t step = 0;
    if (split) {
        int64_t unit = bycols ? I->NR : I->MR, len = bycols ? N : M;
        step = ((len + nt - 1) / nt + unit - 1) / unit * unit;
    }
    int64_t ncmax = UT_MIN(split && bycols ? step : N, (int64_t)I->NC);
    int64_t pmax = (ncmax + I->NR - 1) / I->NR;
    /* packing buffers from the run's pool: a loop's GEMMs would otherwise have malloc return their pages to
     * the kernel and fault them back in at every call (2000 page faults a GRU step) */
    tpu_tensor *hB[GM_MAXT], *hA[GM_MAXT];
    float *Bps[GM_MAXT], *Aps[GM_MAXT];
    memset(Bps, 0, sizeof Bps);
    memset(Aps, 0, sizeof Aps);
    memset(hB, 0, sizeof hB);
    memset(hA, 0, sizeof hA);
    int ok = 1;
    if (bp) Bps[0] = bp->buf;
    else
        for (int i = 0; i < nb && ok; i++)
            ok = (Bps[i] = exe_scratch_alloc((size_t)(pmax * I->NR * gm_kw(I, I->KC)) * sizeof(float) + 64, &hB[i])) != NULL;
    for (int i = 0; i < nt && ok; i++)
        ok = (Aps[i] = exe_scratch_alloc((size_t)(I->MC * gm_kw(I, I->KC)) * sizeof(float) + 64, &hA[i])) != NULL;
    if (!ok) {
        /* no memory for the packed blocks: the reference computes the same values */
        exe_gemm_ref(M, N, K, A, B, C, ldc, accumulate);
    } else if (split) {
        gm_split S = {I, A, B, C, M, N, K, ldc, step, accumulate, bycols, Bps, Aps};
        exe_par_for(nt, nt, 1, gm_split_chunk, &S);
    } else {
        gm_blocked(nt, I, M, N, K, A, B, bp, C, ldc, accumulate, Bps[0], Aps);
    }
    for (int i = 0; i < GM_MAXT; i++) {
        exe_scratch_free(hA[i]);
        exe_scratch_free(hB[i]);
    }
}
