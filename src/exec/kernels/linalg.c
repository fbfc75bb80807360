/* linalg.c — cholesky and triangular-solve on batches of f32/f64 matrices (the last two dims).
 *
 * cholesky(a[..., n, n]), lower: reads only the lower (lower=true) or upper triangle of each matrix and
 * returns L (a = L L^T, zeros above the diagonal) or U (a = U^T U, zeros below). Like XLA:CPU (its
 * CholeskyExpander): when a pivot's square root is NaN (the matrix is not positive definite) that whole
 * matrix of the batch is NaN; other matrices of the batch are unaffected. (A zero pivot is not NaN, so it
 * only poisons the matrix through the NaNs it causes further down, as in XLA.)
 *
 * triangular-solve(a[..., k, k], b[..., m, n]), left_side, lower, unit_diagonal, transpose_a: solves
 * op(a) x = b (left) or x op(a) = b (right) with op = identity, transpose or adjoint (= transpose for real
 * types); only the named triangle of a is read, and its diagonal is taken as 1 when unit_diagonal.
 *
 * Fast paths: LAPACK ?potrf and BLAS ?trsm from OpenBLAS, in the element type. References: textbook
 * substitution in f64. Results agree with XLA:CPU (blocked algorithms in the element type) to rounding.
 */
#include "exec/exec.h"
#include "exec/kernels/ref.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

/* LAPACK (Fortran interface, in OpenBLAS) */
extern void spotrf_(const char *uplo, const int *n, float *a, const int *lda, int *info);
extern void dpotrf_(const char *uplo, const int *n, double *a, const int *lda, int *info);

static tpu_status la_check_type(exe_state *S, const hlo_instr *in, const tpu_tensor *t, const char *what)
{
    if (t->dtype != TPU_F32 && t->dtype != TPU_F64)
        return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "%s of type %s: only f32 and f64 are supported", what, tpu_dtype_name(t->dtype));
    return TPU_OK;
}

static inline double la_get(const tpu_tensor *t, int64_t i)
{
    return t->dtype == TPU_F32 ? (double)((const float *)t->data)[i] : ((const double *)t->data)[i];
}

static inline void la_set(tpu_tensor *t, int64_t i, double v)
{
    if (t->dtype == TPU_F32) ((float *)t->data)[i] = (float)v;
    else ((double *)t->data)[i] = v;
}

/* ---- cholesky ---- */

static tpu_status ch_setup(exe_state *S, const hlo_instr *in, exe_value *const *ops, tpu_tensor **t, int64_t *n,
                           int64_t *batch)
{
    if (in->nops != 1 || !ops[0]->t) return exe_fail(S, in, TPU_ERR_SHAPE, "needs one array operand");
    const tpu_tensor *a = ops[0]->t;
    tpu_status st = la_check_type(S, in, a, "cholesky");
    if (st) return st;
    if (a->rank < 2 || a->dims[a->rank - 1] != a->dims[a->rank - 2])
        return exe_fail(S, in, TPU_ERR_SHAPE, "operand must be square matrices [..., n, n]");
    if (!hlo_shape_is_array(&in->shape) || in->shape.dtype != a->dtype || hlo_shape_count(&in->shape) != a->count)
        return exe_fail(S, in, TPU_ERR_SHAPE, "result must have the operand's shape");
    *n = a->dims[a->rank - 1];
    if (*n > 1 << 20) return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "matrices of %lld rows are too large", (long long)*n);
    *batch = *n ? a->count / (*n * *n) : 0;
    return exe_alloc(S, in, t);
}

/* Matrix b of `a` into `t` by the definition (XLA's unblocked order), in f64, for the lower factor of the
 * lower (lower=1) or transposed upper triangle. */
static void ch_ref_one(const tpu_tensor *a, tpu_tensor *t, int64_t b, int64_t n, int lower, double *L)
{
    int64_t off = b * n * n;
    /* element (i, j) of the lower-triangle view of a */
#define CH_A(i, j) la_get(a, off + (lower ? (i) * n + (j) : (j) * n + (i)))
    int bad = 0;
    for (int64_t j = 0; j < n; j++) {
        double s = CH_A(j, j);
        for (int64_t k = 0; k < j; k++) s -= L[j * n + k] * L[j * n + k];
        double d = sqrt(s);
        if (isnan(d)) bad = 1;
        L[j * n + j] = d;
        for (int64_t i = j + 1; i < n; i++) {
            double v = CH_A(i, j);
            for (int64_t k = 0; k < j; k++) v -= L[i * n + k] * L[j * n + k];
            L[i * n + j] = v / d;
        }
        for (int64_t i = 0; i < j; i++) L[i * n + j] = 0;
    }
#undef CH_A
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            double v = bad ? NAN : L[i * n + j];
            la_set(t, off + (lower ? i * n + j : j * n + i), v);
        }
}

EXE_KERNEL(exe_k_cholesky)
{
    if (EXE_FORCE_REF(S)) return exe_k_cholesky_ref(S, in, ops, out);
    tpu_tensor *t;
    int64_t n, batch;
    tpu_status st = ch_setup(S, in, ops, &t, &n, &batch);
    if (st) return st;
    const tpu_tensor *a = ops[0]->t;
    int lower = hlo_attr_bool(in, HK_LOWER, 0);
    double *L = ut_malloc((size_t)(n ? n * n : 1) * sizeof *L);
    if (!L) {
        tpu_tensor_free(t);
        return ut_nomem(S->ctx);
    }
    memcpy(t->data, a->data, a->nbytes);
    int ni = (int)n, info = 0;
    /* the row-major lower triangle is LAPACK's (column-major) upper one, and vice versa */
    const char *uplo = lower ? "U" : "L";
    size_t es = tpu_dtype_size(a->dtype);
    for (int64_t b = 0; b < batch; b++) {
        char *m = (char *)t->data + b * n * n * (int64_t)es;
        if (n == 0) break;
        if (a->dtype == TPU_F32) spotrf_(uplo, &ni, (float *)m, &ni, &info);
        else dpotrf_(uplo, &ni, (double *)m, &ni, &info);
        if (info != 0) {
            ch_ref_one(a, t, b, n, lower, L);   /* not positive definite: XLA's exact NaN behaviour */
            continue;
        }
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = i + 1; j < n; j++) la_set(t, b * n * n + (lower ? i * n + j : j * n + i), 0);
    }
    ut_free(L);
    return exe_out_array(S, t, out);
}

EXE_KERNEL(exe_k_cholesky_ref)
{
    tpu_tensor *t;
    int64_t n, batch;
    tpu_status st = ch_setup(S, in, ops, &t, &n, &batch);
    if (st) return st;
    double *L = ut_malloc((size_t)(n ? n * n : 1) * sizeof *L);
    if (!L) {
        tpu_tensor_free(t);
        return ut_nomem(S->ctx);
    }
    int lower = hlo_attr_bool(in, HK_LOWER, 0);
    for (int64_t b = 0; b < batch; b++) ch_ref_one(ops[0]->t, t, b, n, lower, L);
    ut_free(L);
    return exe_out_array(S, t, out);
}

/* ---- triangular-solve ---- */

typedef struct ts_plan {
    const tpu_tensor *a, *b;
    tpu_tensor       *x;
    int               left, lower, unit, trans;
    int64_t           k, m, n, batch;
} ts_plan;

static tpu_status ts_setup(exe_state *S, const hlo_instr *in, exe_value *const *ops, ts_plan *p)
{
    memset(p, 0, sizeof *p);
    if (in->nops != 2 || !ops[0]->t || !ops[1]->t) return exe_fail(S, in, TPU_ERR_SHAPE, "needs two array operands (a, b)");
    p->a = ops[0]->t;
    p->b = ops[1]->t;
    tpu_status st = la_check_type(S, in, p->a, "triangular-solve");
    if (st) return st;
    if (p->b->dtype != p->a->dtype) return exe_fail(S, in, TPU_ERR_SHAPE, "a and b must have the same type");
    int r = p->a->rank;
    if (r < 2 || p->b->rank != r || p->a->dims[r - 1] != p->a->dims[r - 2])
        return exe_fail(S, in, TPU_ERR_SHAPE, "a must be square matrices [..., k, k] and b [..., m, n] of the same rank");
    for (int d = 0; d < r - 2; d++)
        if (p->a->dims[d] != p->b->dims[d]) return exe_fail(S, in, TPU_ERR_SHAPE, "batch dim %d differs between a and b", d);
    p->left = hlo_attr_bool(in, HK_LEFT_SIDE, 0);
    p->lower = hlo_attr_bool(in, HK_LOWER, 0);
    p->unit = hlo_attr_bool(in, HK_UNIT_DIAGONAL, 0);
    const char *tr = hlo_attr_str(in, HK_TRANSPOSE_A);
    if (!tr || !strcmp(tr, "NO_TRANSPOSE")) p->trans = 0;
    else if (!strcmp(tr, "TRANSPOSE") || !strcmp(tr, "ADJOINT")) p->trans = 1;
    else return exe_fail(S, in, TPU_ERR_SHAPE, "transpose_a=%s is not NO_TRANSPOSE, TRANSPOSE or ADJOINT", tr);
    p->k = p->a->dims[r - 1];
    p->m = p->b->dims[r - 2];
    p->n = p->b->dims[r - 1];
    if ((p->left ? p->m : p->n) != p->k)
        return exe_fail(S, in, TPU_ERR_SHAPE, "a is %lldx%lld but b's %s dim is %lld", (long long)p->k, (long long)p->k,
                        p->left ? "row" : "column", (long long)(p->left ? p->m : p->n));
    if (p->k > 1 << 20 || p->m > 1 << 30 || p->n > 1 << 30) return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "matrices too large");
    p->batch = p->m > 0 && p->n > 0 ? p->b->count / (p->m * p->n) : 0;
    if (!hlo_shape_is_array(&in->shape) || in->shape.dtype != p->b->dtype || hlo_shape_count(&in->shape) != p->b->count)
        return exe_fail(S, in, TPU_ERR_SHAPE, "result must have b's shape");
    if ((st = exe_alloc(S, in, &p->x))) return st;
    memcpy(p->x->data, p->b->data, p->b->nbytes);
    return TPU_OK;
}

EXE_KERNEL(exe_k_triangular_solve)
{
    if (EXE_FORCE_REF(S)) return exe_k_triangular_solve_ref(S, in, ops, out);
    ts_plan p;
    tpu_status st = ts_setup(S, in, ops, &p);
    if (st) return st;
    enum CBLAS_SIDE side = p.left ? CblasLeft : CblasRight;
    enum CBLAS_UPLO uplo = p.lower ? CblasLower : CblasUpper;
    enum CBLAS_TRANSPOSE tr = p.trans ? CblasTrans : CblasNoTrans;
    enum CBLAS_DIAG diag = p.unit ? CblasUnit : CblasNonUnit;
    int M = (int)p.m, N = (int)p.n, K = (int)p.k;
    for (int64_t b = 0; b < p.batch && p.k; b++) {
        if (p.a->dtype == TPU_F32)
            cblas_strsm(CblasRowMajor, side, uplo, tr, diag, M, N, 1.0f, (const float *)p.a->data + b * p.k * p.k, K,
                        (float *)p.x->data + b * p.m * p.n, N);
        else
            cblas_dtrsm(CblasRowMajor, side, uplo, tr, diag, M, N, 1.0, (const double *)p.a->data + b * p.k * p.k, K,
                        (double *)p.x->data + b * p.m * p.n, N);
    }
    return exe_out_array(S, p.x, out);
}

/* Reference: substitution in f64, one right-hand side (column for left, row for right) at a time. */
EXE_KERNEL(exe_k_triangular_solve_ref)
{
    ts_plan p;
    tpu_status st = ts_setup(S, in, ops, &p);
    if (st) return st;
    int64_t k = p.k;
    double *y = ut_malloc((size_t)(k ? k : 1) * sizeof *y);
    if (!y) {
        tpu_tensor_free(p.x);
        return ut_nomem(S->ctx);
    }
    for (int64_t b = 0; b < p.batch; b++) {
        int64_t ao = b * k * k, bo = b * p.m * p.n;
        /* op(a) as an explicit triangle: T(i, j) of the matrix we solve with, y = T^-1 rhs (left) */
        /* right side x op(a) = b  <=>  op(a)^T x^T = b^T: solve with T = op(a)^T */
        int tt = p.left ? p.trans : !p.trans;           /* T = a^T ? */
        int tlow = tt ? !p.lower : p.lower;             /* is T lower triangular */
        int64_t nrhs = p.left ? p.n : p.m;
        for (int64_t r = 0; r < nrhs; r++) {
            for (int64_t i = 0; i < k; i++) y[i] = la_get(p.b, bo + (p.left ? i * p.n + r : r * p.n + i));
            for (int64_t s = 0; s < k; s++) {
                int64_t i = tlow ? s : k - 1 - s;
                double v = y[i];
                for (int64_t s2 = 0; s2 < s; s2++) {
                    int64_t j = tlow ? s2 : k - 1 - s2;
                    double tij = la_get(p.a, ao + (tt ? j * k + i : i * k + j));
                    v -= tij * y[j];
                }
                if (!p.unit) v /= la_get(p.a, ao + i * k + i);
                y[i] = v;
            }
            for (int64_t i = 0; i < k; i++) la_set(p.x, bo + (p.left ? i * p.n + r : r * p.n + i), y[i]);
        }
    }
    ut_free(y);
    return exe_out_array(S, p.x, out);
}
