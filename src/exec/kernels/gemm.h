/* gemm.h — the executor's own f32 matrix multiply (gemm.c), used by dot.c and conv.c.
 *
 *   C[i][j] (+)= sum over k < K of A(i, k) * B(k, j)      i < M, j < N; C row-major with row stride ldc
 *
 * A and B are read through strides (any transposition, no copy first) and converted while they are packed:
 * f32 as is / bf16-rounded (hi) / the bf16 low part (lo), or bf16 widened (mxu.h's parts), subnormals read as
 * zero. Each C element is one chain of fused multiply-adds in k order, c = fma(a_k, b_k, c) from c = 0 (or the
 * C it was given), whatever the blocking and the thread count, so results never depend on either. With
 * bf16-valued operands every product is exact and the chain is exactly "f32 accumulation" (docs/numerics.md).
 *
 * Microkernels: AVX-512 (12x32), AVX2+FMA (6x16), portable C (4x16), picked by the CPU at run time; blocked
 * for the caches (BLIS-style: packed B block shared by all threads, packed A block per thread); the work is
 * split over exe_par threads (serially when called from a thread-pool chunk, and for products under 4M
 * multiply-adds). A product with fewer columns than the tile width runs as C^T = B^T A^T when that fills
 * the tiles better (same chains: the products commute exactly). A loop's B can be packed once
 * (exe_gemm_bpack).
 *
 * avx512bf16 (12x32, VDPBF16PS; CPUs with AVX512_BF16, chosen at run time, compiled by gcc >= 10 / clang >= 9)
 * takes bf16-valued operands — bf16 data, or f32 read through part HI or LO — packed as pairs along k:
 * element k in the high half of each 32-bit word, k+1 in the low half. VDPBF16PS adds the high product
 * first, then the low one, each add rounded to nearest even like an FMA (the products are exact), so each C
 * element is the same chain in k order: bit for bit exe_gemm_ref's result. Odd K is padded with -0 (A) times
 * +0 (B), a -0 product that leaves any sum, signed zeros included, as it is. The instruction itself always
 * reads subnormal inputs (the accumulator included) as zero and flushes subnormal results to zero, whatever
 * MXCSR says: it differs from exe_gemm_ref only when a partial sum (or the C it accumulates into) is an f32
 * subnormal, which exe_gemm_ref keeps unless FTZ/DAZ is on — and tpu_run runs with FTZ/DAZ on, where the
 * FMA chains flush alike. NaN payloads are not compared.
 *
 * Default on CPUs with AVX-512: the microkernels do every product (each C element exactly exe_gemm_ref's chain,
 * so results are the same on every such CPU and thread count), the bf16 one for bf16-valued operands when a
 * one-time timing of the two inner loops (gemm.c: gm_bf16_wins) says VDPBF16PS is faster on this CPU than
 * the FMAs: both give the same bits, so the choice only decides speed (Intel Xeon, bench/README.md:
 * VDPBF16PS at half the FMA rate, the f32 kernel; AMD EPYC Zen 5: 1.65x the FMA rate, the bf16 kernel).
 * Measured on Zen 5, where OpenBLAS 0.3.21 runs older kernels, the microkernels are 1.7-2x OpenBLAS's sgemm;
 * on one Intel core they were within a few percent of it, and ahead on 16 threads (bench/README.md).
 * Without AVX-512 the products go to OpenBLAS's sgemm, with operands it cannot read directly converted first
 * (each element an f32 accumulation in OpenBLAS's order; with bf16-valued operands still exactly "bf16
 * products, f32 accumulation"), and products under 1 GFLOP whose operands need converting go to the f32
 * microkernel, which converts while it packs. exe_mx_gemm (mxu.h) follows the same default.
 * exe_gemm_force pins a kernel instead (tests compare the microkernels with exe_gemm_ref bit for bit). */
#ifndef TPU_EXEC_KERNELS_GEMM_H
#define TPU_EXEC_KERNELS_GEMM_H

#include "mxu.h"

/* One operand: element (r, c) is at p + r*rs + c*cs (elements of dtype F32 or BF16), read as `part`. */
typedef struct exe_gemm_src {
    const void *p;
    tpu_dtype   dtype;
    int64_t     rs, cs;
    exe_mx_part part;
} exe_gemm_src;

/* C (+)= A·B: A is M x K, B is K x N. accumulate: add to C (else C is overwritten). threads <= 0: all. */
void exe_gemm(int threads, int64_t M, int64_t N, int64_t K, const exe_gemm_src *A, const exe_gemm_src *B, float *C,
              int64_t ldc, int accumulate);

/* B packed once for many products with the same B (a loop's weights): the panels exe_gemm would pack for a
 * product of these sizes and operands (A: its dtype and part decide the kernel). NULL when that product does
 * not pack B (OpenBLAS, tiny products) or on no memory. exe_gemm_b runs exe_gemm with such a pack; one made
 * for another kernel, size or source is ignored (B packed as usual), so it never changes a result. The caller
 * keeps B's data unchanged while the pack is in use. */
typedef struct exe_gemm_bpack exe_gemm_bpack;
exe_gemm_bpack *exe_gemm_bpack_new(int64_t M, int64_t N, int64_t K, const exe_gemm_src *A, const exe_gemm_src *B);
void            exe_gemm_bpack_free(exe_gemm_bpack *bp);
size_t          exe_gemm_bpack_bytes(const exe_gemm_bpack *bp);
void exe_gemm_b(int threads, int64_t M, int64_t N, int64_t K, const exe_gemm_src *A, const exe_gemm_src *B,
                const exe_gemm_bpack *bp, float *C, int64_t ldc, int accumulate);

/* What runs: "openblas" by default ("openblas+avx512bf16" where the CPU has the bf16 kernel for the shapes
 * above), or a pinned one. exe_gemm_force("avx512" / "avx2" / "portable") pins that f32 microkernel for every
 * product (the best the CPU has when it lacks the one named); "avx512bf16" pins the bf16 kernel for
 * bf16-valued operands (others, or a CPU without it: the best f32 microkernel); "openblas" sends every product
 * to OpenBLAS (no bf16 kernel); NULL restores the default. Not thread-safe against running products. */
const char *exe_gemm_kernel_name(void);
/* Does the default run f32 products on the microkernels (AVX-512 CPUs) rather than OpenBLAS? */
int         exe_gemm_micro_default(void);
void        exe_gemm_force(const char *name);
/* For tests: words of a B panel where the AVX-512 bf16 pair packers and the scalar one differ (-1: none here). */
int64_t     exe_gemm_pairs_diff(const exe_gemm_src *B, int64_t k0, int64_t kc, int64_t j0, int W);

/* The kernels of tiny products (M*N*K < 4096, what exe_gemm gives them; tests): which 0 the register-blocked
 * AVX-512 one (gm_tiny), 1 the stack-block one (gm_small); each returns 0 when it does not take the product
 * (no AVX-512, an operand over 2048 elements). Both give exe_gemm_ref's bits. */
int  exe_gemm_tiny(int which, int64_t M, int64_t N, int64_t K, const exe_gemm_src *A, const exe_gemm_src *B, float *C,
                   int64_t ldc, int accumulate);

/* Naive reference: the same FMA chain per element, one element at a time (for tests). */
void exe_gemm_ref(int64_t M, int64_t N, int64_t K, const exe_gemm_src *A, const exe_gemm_src *B, float *C, int64_t ldc,
                  int accumulate);

/* int8 dots (gemm_s8.c): C[i * N + j] = sum over k of A[amo[i] + ako[k]] * B[bko[k] + bno[j]], wrapped to s32
 * (exact: the same bits whatever the kernel or thread count). VPDPBUSD on CPUs with AVX512_VNNI
 * (exe_gemm_s8_available), else the reference; exe_gemm_s8_ref is the naive loop the tests compare with. */
int  exe_gemm_s8_available(void);
void exe_gemm_s8(int threads, int64_t M, int64_t N, int64_t K, const int8_t *A, const int64_t *amo, const int64_t *ako,
                 const int8_t *B, const int64_t *bko, const int64_t *bno, int32_t *C);
void exe_gemm_s8_ref(int64_t M, int64_t N, int64_t K, const int8_t *A, const int64_t *amo, const int64_t *ako,
                     const int8_t *B, const int64_t *bko, const int64_t *bno, int32_t *C);

#endif
