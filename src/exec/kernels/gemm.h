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
 * split over exe_par threads (serially when called from a thread-pool chunk).
 *
 * By default the products go to OpenBLAS's sgemm (faster on every shape measured, see gemm.c), with
 * operands it cannot read directly converted first; then each element is an f32 accumulation in OpenBLAS's
 * order (with bf16-valued operands still exactly "bf16 products, f32 accumulation"). exe_gemm_force pins a
 * microkernel instead (tests compare them with exe_gemm_ref bit for bit). */
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

/* What runs: "openblas" (default) or the microkernel "avx512", "avx2" or "portable"; exe_gemm_force("portable")
 * etc. pins a microkernel (the best the CPU has when it lacks the one named), NULL restores the default. */
const char *exe_gemm_kernel_name(void);
void        exe_gemm_force(const char *name);

/* Naive reference: the same FMA chain per element, one element at a time (for tests). */
void exe_gemm_ref(int64_t M, int64_t N, int64_t K, const exe_gemm_src *A, const exe_gemm_src *B, float *C, int64_t ldc,
                  int accumulate);

#endif
