/* mxu.c — numerics, loaders, stores and the BLAS call shared by the dot and convolution kernels (mxu.h). */
#include "mxu.h"
#include "gemm.h"
#include "exec/exe_ops.h"
#include "exec/exe_par.h"

#include <cblas.h>
#include <float.h>
#include <string.h>

tpu_status exe_mx_numerics(exe_state *S, const hlo_instr *in, tpu_dtype lt, tpu_dtype rt, tpu_dtype ot, int64_t k_len,
                           exe_mx_num *nm)
{
    memset(nm, 0, sizeof *nm);
    char lk = tpu_dtype_kind(lt), rk = tpu_dtype_kind(rt), ok = tpu_dtype_kind(ot);
    if (lk == 'c' || rk == 'c' || ok == 'c')
        return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "complex operands (%s, %s -> %s) are not supported yet",
                        tpu_dtype_name(lt), tpu_dtype_name(rt), tpu_dtype_name(ot));
    if (lk == 'o' || rk == 'o' || ok == 'o')
        return exe_fail(S, in, TPU_ERR_SHAPE, "operands and result must be arrays of numbers");
    if (lt == TPU_F64 || rt == TPU_F64 || ot == TPU_F64) {
        nm->acc = EXE_MX_F64;
    } else if (lk == 'f' || rk == 'f' || ok == 'f') {
        nm->acc = EXE_MX_F32;
    } else {
        int lb = lk == 'p' ? 1 : tpu_dtype_bits(lt), rb = rk == 'p' ? 1 : tpu_dtype_bits(rt);
        /* |product| <= 2^(lb+rb): the f64 sum of k_len of them is exact below 2^53 */
        if (lb <= 16 && rb <= 16 && k_len < ((int64_t)1 << (53 - lb - rb))) {
            nm->acc = EXE_MX_F64;
            nm->int_exact = 1;
        } else {
            nm->acc = EXE_MX_I64;
        }
    }
    if (nm->acc != EXE_MX_I64 && !nm->int_exact) {
        nm->passes = exe_mxu_passes(S, in);
        nm->split[0] = nm->passes > 0 && lt == TPU_F32;
        nm->split[1] = nm->passes > 0 && rt == TPU_F32;
        if (!nm->split[0] && !nm->split[1]) nm->passes = 0;
    }
    nm->dbl = nm->acc == EXE_MX_F64;
    return TPU_OK;
}

int exe_mx_term_part(const exe_mx_num *nm, int term, int op, exe_mx_part *part)
{
    exe_mx_part hi = nm->split[op] ? EXE_MX_HI : EXE_MX_AS_IS;
    switch (term) {
    case 0: *part = hi; return 0;
    case 1:   /* hi * lo' */
        if (nm->passes != 3 || !nm->split[1]) return -1;
        *part = op == 0 ? hi : EXE_MX_LO;
        return 0;
    case 2:   /* lo * hi' */
        if (nm->passes != 3 || !nm->split[0]) return -1;
        *part = op == 0 ? EXE_MX_LO : hi;
        return 0;
    default: return -1;
    }
}

/* Loops written twice so the unit-stride case vectorises. */
#define MX_LOOP(expr_at)                                              \
    do {                                                              \
        if (stride == 1) {                                            \
            _Pragma("omp simd")                                       \
            for (int64_t j = 0; j < n; j++) d[j] = expr_at(j);        \
        } else                                                        \
            for (int64_t j = 0; j < n; j++) d[j] = expr_at(j * stride); \
    } while (0)

static inline double mx_daz64(double x) { return fabs(x) < DBL_MIN ? copysign(0.0, x) : x; }

EXE_MX_CLONES
void exe_mx_load(void *dst, int dbl, const void *src, tpu_dtype t, int64_t stride, int64_t n, exe_mx_part part)
{
    if (!dbl) {
        float *d = dst;
        if (t == TPU_F32) {
            const float *s = src;
#define AT_AS(i) exe_mx_daz(s[i])
#define AT_HI(i) exe_mx_hi(s[i])
#define AT_LO(i) exe_mx_lo(s[i])
            if (part == EXE_MX_AS_IS) MX_LOOP(AT_AS);
            else if (part == EXE_MX_HI) MX_LOOP(AT_HI);
            else MX_LOOP(AT_LO);
            return;
        }
        if (part == EXE_MX_LO) {
            memset(d, 0, (size_t)n * sizeof *d);
            return;
        }
        if (t == TPU_BF16) {
            const uint16_t *s = src;
#define AT_BF(i) exe_mx_daz(fp_bf16_to_f32_inline(s[i]))
            MX_LOOP(AT_BF);
            return;
        }
        if (t == TPU_F16) {
            const uint16_t *s = src;
#define AT_F16(i) fp_f16_to_f32(s[i])
            MX_LOOP(AT_F16);
            return;
        }
        /* small integers (int8 matmuls), and s32 rounded once as through double */
        if (t == TPU_S8) {
            const int8_t *s = src;
#define AT_S8(i) (float)s[i]
            MX_LOOP(AT_S8);
            return;
        }
        if (t == TPU_U8) {
            const uint8_t *s = src;
#define AT_U8(i) (float)s[i]
            MX_LOOP(AT_U8);
            return;
        }
        if (t == TPU_S32) {
            const int32_t *s = src;
#define AT_S32(i) (float)s[i]
            MX_LOOP(AT_S32);
            return;
        }
        for (int64_t j = 0; j < n; j++) d[j] = (float)exe_mx_value(t, src, j * stride, part);
        return;
    }
    double *d = dst;
    if (t == TPU_F64) {
        const double *s = src;
#define AT_D(i) mx_daz64(s[i])
        MX_LOOP(AT_D);
        return;
    }
    for (int64_t j = 0; j < n; j++) d[j] = exe_mx_value(t, src, j * stride, part);
}

EXE_MX_CLONES
void exe_mx_load_tab(void *dst, int dbl, const void *src, tpu_dtype t, const int64_t *off, int64_t n, exe_mx_part part)
{
    if (!dbl && t == TPU_F32) {
        float *d = dst;
        const float *s = src;
        if (part == EXE_MX_AS_IS)
            for (int64_t j = 0; j < n; j++) d[j] = exe_mx_daz(s[off[j]]);
        else if (part == EXE_MX_HI)
            for (int64_t j = 0; j < n; j++) d[j] = exe_mx_hi(s[off[j]]);
        else
            for (int64_t j = 0; j < n; j++) d[j] = exe_mx_lo(s[off[j]]);
        return;
    }
    if (!dbl && t == TPU_BF16) {
        float *d = dst;
        const uint16_t *s = src;
        for (int64_t j = 0; j < n; j++) d[j] = part == EXE_MX_LO ? 0.0f : exe_mx_daz(fp_bf16_to_f32_inline(s[off[j]]));
        return;
    }
    if (!dbl) {
        float *d = dst;
        for (int64_t j = 0; j < n; j++) d[j] = (float)exe_mx_value(t, src, off[j], part);
    } else {
        double *d = dst;
        for (int64_t j = 0; j < n; j++) d[j] = exe_mx_value(t, src, off[j], part);
    }
}

double exe_mx_value(tpu_dtype t, const void *base, int64_t i, exe_mx_part part)
{
    if (t == TPU_F32) {
        float x = ((const float *)base)[i];
        return part == EXE_MX_HI ? exe_mx_hi(x) : part == EXE_MX_LO ? exe_mx_lo(x) : exe_mx_daz(x);
    }
    if (part == EXE_MX_LO) return 0.0;
    double v = ten_load_f64(t, base, i);
    if (t == TPU_BF16 && fabs(v) < FLT_MIN) v = copysign(0.0, v);
    if (t == TPU_F64) v = mx_daz64(v);
    return v;
}

/* One element: a float accumulator rounded once to t (f32-range results flushed), or an exact integer. */
static void mx_store1(const exe_state *S, tpu_dtype t, void *out, int64_t i, double v, int int_result)
{
    char k = tpu_dtype_kind(t);
    if (k == 'f') {
        if (t == TPU_F64) v = mx_daz64(v);
        else if (t == TPU_F32 || t == TPU_BF16) v = exe_mx_daz((float)v);
        exe_store_float(S, t, out, i, v);
    } else if (int_result) {
        ten_store_i64(t, out, i, exe_wrap_int(t, (int64_t)v));
    } else {
        ten_store_f64(t, out, i, v);   /* float -> integer: XLA's saturating convert */
    }
}

/* fp_f32_to_bf16_ftz_inline with selects for its branches, so a loop of it vectorises */
static inline __attribute__((always_inline)) uint16_t mx_bf16_ftz_sel(float x)
{
    uint32_t u = exe_mx_bits(x);
    uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1)) >> 16;
    r = (u & 0x7FFFFFFFu) > 0x7F800000u ? ((u >> 16) & 0x8000u) | 0x7FC0u : r;
    r = (r & 0x7F80u) == 0 ? r & 0x8000u : r;
    return (uint16_t)r;
}

EXE_MX_CLONES
void exe_mx_store(const exe_state *S, tpu_dtype t, void *out, int64_t i0, int64_t stride, const void *src, int dbl,
                  int64_t n, int int_result)
{
    if (!dbl) {
        const float *s = src;
        if (t == TPU_F32) {
            float *o = (float *)out + i0;
            if (stride == 1) {
                #pragma omp simd
                for (int64_t j = 0; j < n; j++) o[j] = exe_mx_daz(s[j]);
            } else
                for (int64_t j = 0; j < n; j++) o[j * stride] = exe_mx_daz(s[j]);
            return;
        }
        if (t == TPU_BF16) {
            uint16_t *o = (uint16_t *)out + i0;
            if (stride == 1) {   /* the same body without the stride: it vectorises (a bf16 dot's result rows) */
                #pragma omp simd
                for (int64_t j = 0; j < n; j++) o[j] = mx_bf16_ftz_sel(exe_mx_daz(s[j]));
                return;
            }
            for (int64_t j = 0; j < n; j++) {
                uint16_t h = fp_f32_to_bf16_inline(exe_mx_daz(s[j]));
                if ((h & 0x7F80) == 0) h &= 0x8000;
                o[j * stride] = h;
            }
            return;
        }
        if (t == TPU_S32 && int_result) {   /* (integer dots: values in range convert as they are) */
            int32_t *o = (int32_t *)out + i0;
            for (int64_t j = 0; j < n; j++) {
                float v = s[j];
                if (v >= -2147483648.0f && v < 2147483648.0f) o[j * stride] = (int32_t)v;
                else mx_store1(S, t, out, i0 + j * stride, v, int_result);
            }
            return;
        }
        for (int64_t j = 0; j < n; j++) mx_store1(S, t, out, i0 + j * stride, s[j], int_result);
        return;
    }
    const double *s = src;
    if (t == TPU_F64) {
        double *o = (double *)out + i0;
        for (int64_t j = 0; j < n; j++) o[j * stride] = mx_daz64(s[j]);
        return;
    }
    for (int64_t j = 0; j < n; j++) mx_store1(S, t, out, i0 + j * stride, s[j], int_result);
}

void exe_mx_gemm(int dbl, int ta, int tb, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda, const void *B,
                 int64_t ldb, int beta1, void *C, int64_t ldc)
{
    if (!dbl && exe_gemm_micro_default() && M > 0 && N > 0) {
        /* f32 on an AVX-512 CPU: the microkernels (gemm.h), one thread (the callers split the work) */
        exe_gemm_src a = {A, TPU_F32, ta ? 1 : lda, ta ? lda : 1, EXE_MX_AS_IS};
        exe_gemm_src b = {B, TPU_F32, tb ? 1 : ldb, tb ? ldb : 1, EXE_MX_AS_IS};
        exe_gemm(1, M, N, K, &a, &b, C, ldc, beta1);
        return;
    }
    exe_mx_gemm_blas(dbl, ta, tb, M, N, K, A, lda, B, ldb, beta1, C, ldc);
}

void exe_mx_gemm_blas(int dbl, int ta, int tb, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda, const void *B,
                      int64_t ldb, int beta1, void *C, int64_t ldc)
{
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        if (!beta1)
            for (int64_t i = 0; i < M; i++) memset((char *)C + (size_t)(i * ldc) * (dbl ? 8 : 4), 0, (size_t)N * (dbl ? 8 : 4));
        return;
    }
    if (dbl)
        cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K,
                    1.0, A, (int)lda, B, (int)ldb, beta1 ? 1.0 : 0.0, C, (int)ldc);
    else
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K,
                    1.0f, A, (int)lda, B, (int)ldb, beta1 ? 1.0f : 0.0f, C, (int)ldc);
}

int exe_mx_threads(const exe_state *S)
{
    int n = exe_par_threads(S->threads);
    /* BLAS runs inside our OpenMP tasks, one thread each */
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
    return n < 1 ? 1 : n;
}
