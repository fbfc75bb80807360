/* mxu.h — what the matrix-unit kernels (dot.c, conv.c) share: how a dot/convolution accumulates (design §4),
 * operand loaders that convert, flush and split f32 operands into bf16 parts while they pack, the BLAS call,
 * and stores that round the accumulator once to the result type. Internal to src/exec/kernels; names start
 * with exe_mx_.
 *
 * Numerics of one dot/convolution:
 *   - acc F64: any operand or the result is f64 (XLA upcasts the operands to the result type).
 *   - acc F32: otherwise, any float operand or a float result. f32 operands in TPU mode are rounded to bf16
 *     (1 pass) or split into bf16 hi + lo (3 passes: hi*hi' + hi*lo' + lo*hi'); bf16, f16 and the f8 types
 *     widen exactly, so every product is exact in f32 and only the f32 accumulation rounds.
 *   - integers: exact 64-bit accumulation wrapped to the result type. Operands of <= 16 bits take the f64
 *     BLAS path when the sum provably stays below 2^53 (int_exact), wider ones a 64-bit integer loop.
 *   - f32-range subnormal operands read as zero and subnormal f32/bf16 results become zero (FTZ/DAZ, as on
 *     the TPU and XLA:CPU).
 */
#ifndef TPU_EXEC_KERNELS_MXU_H
#define TPU_EXEC_KERNELS_MXU_H

#include "exec/exec.h"
#include "util/fp.h"

#include <math.h>

typedef enum exe_mx_acc { EXE_MX_F32, EXE_MX_F64, EXE_MX_I64 } exe_mx_acc;

/* Which part of an f32 operand a loader takes (other dtypes: AS_IS and HI give the value, LO gives 0). */
typedef enum exe_mx_part { EXE_MX_AS_IS, EXE_MX_HI, EXE_MX_LO } exe_mx_part;

typedef struct exe_mx_num {
    exe_mx_acc acc;
    int        passes;      /* 0 (full precision), 1 or 3; only for float accumulation */
    int        split[2];    /* operand i is f32 and passes > 0: read it through HI (and LO) */
    int        int_exact;   /* integer operands accumulated exactly in f64: the result is an integer */
    int        dbl;         /* the float accumulator is double (acc F64 or int_exact) */
} exe_mx_num;

/* Decides the numerics of a dot/convolution with operand dtypes lt, rt, result ot; k_len is the number of
 * products summed per output element (bounds the integer sums). Errors on complex operands. */
tpu_status exe_mx_numerics(exe_state *S, const hlo_instr *in, tpu_dtype lt, tpu_dtype rt, tpu_dtype ot, int64_t k_len,
                           exe_mx_num *nm);

/* The part of operand `op` to read for gemm term t (0: hi*hi', 1: hi*lo', 2: lo*hi'), or -1 when the term is
 * zero (no split). Term 0 always exists. */
int exe_mx_term_part(const exe_mx_num *nm, int term, int op, exe_mx_part *part);

/* dst[j] = part(src[j * stride]) for j < n, as float (or double when dbl); src points at element 0. */
void exe_mx_load(void *dst, int dbl, const void *src, tpu_dtype t, int64_t stride, int64_t n, exe_mx_part part);
/* dst[j] = part(src[off[j]]) */
void exe_mx_load_tab(void *dst, int dbl, const void *src, tpu_dtype t, const int64_t *off, int64_t n, exe_mx_part part);
/* Stores n accumulated values (float, or double when dbl) into out (dtype t) at i0 + j * stride, rounding
 * once to t. int_result: the values are exact integers (wrap to t) rather than floats (convert to t). */
void exe_mx_store(const exe_state *S, tpu_dtype t, void *out, int64_t i0, int64_t stride, const void *src, int dbl,
                  int64_t n, int int_result);

/* The value of one operand element as the matrix unit sees it, in double: flushed, and an f32 operand
 * rounded (part HI) or its low part (LO). For reference kernels. */
double exe_mx_value(tpu_dtype t, const void *base, int64_t i, exe_mx_part part);

/* Row-major C[M][N] = beta*C + A·B with A [M][K] (or [K][M] when ta) and B [K][N] (or [N][K] when tb);
 * float or double. Sizes must fit in an int (the caller blocks). Runs single-threaded BLAS: the kernels
 * parallelise with OpenMP themselves, so every thread runs under the interpreter's FTZ/DAZ mode. */
void exe_mx_gemm(int dbl, int ta, int tb, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda, const void *B,
                 int64_t ldb, int beta1, void *C, int64_t ldc);
/* The same, always through BLAS (f32 products go to the gemm.h microkernels by default on AVX-512 CPUs). */
void exe_mx_gemm_blas(int dbl, int ta, int tb, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                      const void *B, int64_t ldb, int beta1, void *C, int64_t ldc);

/* Threads to use (S->threads, or all of OpenMP's). */
int exe_mx_threads(const exe_state *S);

/* Hot loops are compiled for AVX-512, AVX2 and baseline x86-64 and picked at load time. -std=c11 keeps
 * floating-point contraction off, so every clone rounds each multiply and add the same way. */
#define EXE_MX_CLONES EXE_VEC

/* Inline flush / bf16 parts of an f32 value, branch-free so packing loops vectorise (same results as
 * fp_round_bf16_ftz: round to nearest even, NaN -> quiet NaN with the sign, bf16 subnormals -> signed zero). */
static inline __attribute__((always_inline)) uint32_t exe_mx_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}
static inline __attribute__((always_inline)) float exe_mx_float(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}
static inline __attribute__((always_inline)) float exe_mx_daz(float x)
{
    uint32_t u = exe_mx_bits(x);
    return exe_mx_float((u & 0x7F800000u) ? u : (u & 0x80000000u));
}
static inline __attribute__((always_inline)) float exe_mx_hi(float x)
{
    uint32_t u = exe_mx_bits(x);
    uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    r = (u & 0x7FFFFFFFu) > 0x7F800000u ? ((u & 0x80000000u) | 0x7FC00000u) : r;
    r = (r & 0x7F800000u) ? r : (r & 0x80000000u);
    return exe_mx_float(r);
}
/* x - hi(x) rounded the same way; 0 when hi(x) is inf or NaN */
static inline __attribute__((always_inline)) float exe_mx_lo(float x)
{
    float h = exe_mx_hi(x);
    float l = exe_mx_hi(exe_mx_daz(x) - h);
    return (exe_mx_bits(h) & 0x7F800000u) == 0x7F800000u ? 0.0f : l;
}

#endif
