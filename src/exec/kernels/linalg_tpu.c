/* linalg_tpu.c — the linear-algebra custom-calls that jax.numpy.linalg lowers to for TPUs (jax 0.10.2,
 * jax/_src/lax/linalg.py and jax/_src/tpu/linalg/eigh.py), on batches of f32/f64 matrices (the last two
 * dims; the leading ones are the batch). Contracts, as the TPU lowering emits them:
 *
 *   LuDecomposition(a[..., m, n]) -> (lu[..., m, n], pivots s32[..., min(m,n)], permutation s32[..., m])
 *       partial pivoting (the largest |a| of the column, the first on ties, as LAPACK ?getrf); lu holds U on
 *       and above the diagonal and the unit-lower L below it; pivots are 0-based (row i was swapped with row
 *       pivots[i]); permutation is iota(m) with those swaps applied (row i of P a is row permutation[i] of a).
 *       jnp.linalg.solve/inv/det/slogdet lower to it.
 *   Qr(a[..., m, n]) -> (a'[..., m, n], taus[..., min(m,n)])
 *       LAPACK ?geqrf: R on and above the diagonal, the Householder vectors (v[j] = 1 implied) below it;
 *       H_j = I - tau_j v v^T with beta = -sign(alpha) |(alpha, x)| (?larfg).
 *   ProductOfElementaryHouseholderReflectors(a[..., m, n], taus[..., k]) -> q[..., m, n]
 *       LAPACK ?orgqr: the first n columns of H_0 H_1 ... H_{k-1} (m >= n >= k). With Qr: jnp.linalg.qr,
 *       and svd's preconditioning.
 *   Eigh(a[..., n, n]), backend_config="lower,sort_eigenvalues,max_iter,tol" -> (v[..., n, n], w[..., n])
 *       symmetric eigendecomposition reading the lower (lower=1) or upper triangle: eigenvalues w, the
 *       eigenvectors as the columns of v (a v = v diag(w)). The TPU runs Jacobi sweeps (max_iter, tol);
 *       here eigenvalues come out ascending whatever sort_eigenvalues says (an order the TPU may also give).
 *       jnp.linalg.eigh and svd lower to it.
 *
 * Fast paths: LAPACK ?getrf, ?geqrf, ?orgqr and ?syevd from OpenBLAS in the element type (the matrices
 * transposed to LAPACK's column-major order and back). References: textbook algorithms in f64 (Doolittle with
 * partial pivoting, Householder reflections as ?larfg defines them, cyclic Jacobi rotations). Eigenvector
 * signs are not unique: fast and reference may differ by a sign per vector, as LAPACK and the TPU do. */
#include "exec/exec.h"
#include "exec/kernels/ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* LAPACK (Fortran interface, in OpenBLAS) */
extern void sgetrf_(const int *m, const int *n, float *a, const int *lda, int *ipiv, int *info);
extern void dgetrf_(const int *m, const int *n, double *a, const int *lda, int *ipiv, int *info);
extern void sgeqrf_(const int *m, const int *n, float *a, const int *lda, float *tau, float *work, const int *lwork,
                    int *info);
extern void dgeqrf_(const int *m, const int *n, double *a, const int *lda, double *tau, double *work, const int *lwork,
                    int *info);
extern void sorgqr_(const int *m, const int *n, const int *k, float *a, const int *lda, const float *tau, float *work,
                    const int *lwork, int *info);
extern void dorgqr_(const int *m, const int *n, const int *k, double *a, const int *lda, const double *tau, double *work,
                    const int *lwork, int *info);
extern void ssyevd_(const char *jobz, const char *uplo, const int *n, float *a, const int *lda, float *w, float *work,
                    const int *lwork, int *iwork, const int *liwork, int *info);
extern void dsyevd_(const char *jobz, const char *uplo, const int *n, double *a, const int *lda, double *w,
                    double *work, const int *lwork, int *iwork, const int *liwork, int *info);

/* ---- shared set-up ---- */

/* One call: its matrices as f64 row-major scratch, its results allocated. */
typedef struct lt_call {
    const tpu_tensor *a, *b;     /* operand(s) */
    tpu_tensor       *res[3];    /* results (tuple elements, or res[0] alone) */
    int               nres;
    int64_t           m, n, k, batch;
    double           *x, *y;     /* scratch: one matrix each (m*n, and m*n or n*n) */
    double           *v;         /* scratch vector (max(m,n)) */
} lt_call;

static void lt_free(lt_call *c, int keep_results)
{
    for (int i = 0; i < c->nres && !keep_results; i++) tpu_tensor_free(c->res[i]);
    ut_free(c->x);
    ut_free(c->y);
    ut_free(c->v);
}

static inline double lt_get(const tpu_tensor *t, int64_t i)
{
    return t->dtype == TPU_F32 ? (double)((const float *)t->data)[i] : ((const double *)t->data)[i];
}

static inline void lt_set(tpu_tensor *t, int64_t i, double v)
{
    if (t->dtype == TPU_F32) ((float *)t->data)[i] = (float)v;
    else ((double *)t->data)[i] = v;
}

static inline void lt_seti(tpu_tensor *t, int64_t i, int64_t v) { ((int32_t *)t->data)[i] = (int32_t)v; }

/* Checks the operand (f32/f64, rank >= 2), allocates the results from the instruction's shape (a tuple of
 * nres arrays, or one array) and the scratch. */
static tpu_status lt_setup(exe_state *S, const hlo_instr *in, exe_value *const *ops, int nops, int nres, lt_call *c,
                           const char *what)
{
    memset(c, 0, sizeof *c);
    if (in->nops != nops) return exe_fail(S, in, TPU_ERR_SHAPE, "%s takes %d operand%s", what, nops, nops > 1 ? "s" : "");
    for (int i = 0; i < nops; i++)
        if (!ops[i]->t) return exe_fail(S, in, TPU_ERR_SHAPE, "%s: operand %d is not an array", what, i);
    c->a = ops[0]->t;
    c->b = nops > 1 ? ops[1]->t : NULL;
    if (c->a->dtype != TPU_F32 && c->a->dtype != TPU_F64)
        return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "%s of %s: only f32 and f64 are supported", what,
                        tpu_dtype_name(c->a->dtype));
    if (c->a->rank < 2) return exe_fail(S, in, TPU_ERR_SHAPE, "%s needs matrices [..., m, n]", what);
    c->m = c->a->dims[c->a->rank - 2];
    c->n = c->a->dims[c->a->rank - 1];
    /* the scratch holds one matrix in f64 at a time: up to 2^24 elements (a 4096 x 4096 matrix, 128 MiB) */
    if (c->m > (1 << 24) || c->n > (1 << 24) || c->m * c->n > (1 << 24) || c->n * c->n > (1 << 24))
        return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "%s of %lldx%lld matrices is too large (at most 2^24 elements)",
                        what, (long long)c->m, (long long)c->n);
    c->batch = c->m * c->n > 0 ? c->a->count / (c->m * c->n) : 0;
    int tuple = hlo_shape_is_tuple(&in->shape);
    if ((nres > 1 && (!tuple || in->shape.ntuple != nres)) || (nres == 1 && tuple))
        return exe_fail(S, in, TPU_ERR_SHAPE, "%s returns %d array%s", what, nres, nres > 1 ? "s" : "");
    c->nres = nres;
    for (int i = 0; i < nres; i++) {
        tpu_status st = exe_alloc_shape(S, tuple ? &in->shape.tuple[i] : &in->shape, &c->res[i]);
        if (st) {
            c->nres = i;
            lt_free(c, 0);
            return st;
        }
    }
    int64_t cells = UT_MAX(UT_MAX(c->m * c->n, c->n * c->n), (int64_t)1);   /* an m x n or n x n matrix */
    c->x = ut_malloc((size_t)cells * sizeof *c->x);
    c->y = ut_malloc((size_t)cells * sizeof *c->y);
    c->v = ut_malloc((size_t)UT_MAX(UT_MAX(c->m, c->n), (int64_t)1) * sizeof *c->v);
    if (!c->x || !c->y || !c->v) {
        lt_free(c, 0);
        return ut_nomem(S->ctx);
    }
    return TPU_OK;
}

/* Result element i must hold `want` elements of dtype dt. */
static tpu_status lt_expect(exe_state *S, const hlo_instr *in, const lt_call *c, int i, tpu_dtype dt, int64_t want,
                            const char *what)
{
    if (c->res[i]->dtype != dt || c->res[i]->count != want)
        return exe_fail(S, in, TPU_ERR_SHAPE, "%s result %d must be %s with %lld elements, got %s with %lld", what, i,
                        tpu_dtype_name(dt), (long long)want, tpu_dtype_name(c->res[i]->dtype),
                        (long long)c->res[i]->count);
    return TPU_OK;
}

static tpu_status lt_finish(exe_state *S, lt_call *c, exe_value **out)
{
    if (c->nres == 1) {
        tpu_tensor *t = c->res[0];
        lt_free(c, 1);
        return exe_out_array(S, t, out);
    }
    exe_value *vals[3] = {0};
    for (int i = 0; i < c->nres; i++) {
        vals[i] = exe_value_array(c->res[i]);
        if (!vals[i]) {
            for (int j = 0; j < i; j++) exe_value_unref(vals[j]);
            for (int j = i + 1; j < c->nres; j++) tpu_tensor_free(c->res[j]);
            lt_free(c, 1);
            return ut_nomem(S->ctx);
        }
    }
    lt_free(c, 1);
    *out = exe_value_tuple(vals, c->nres);
    return *out ? TPU_OK : ut_nomem(S->ctx);
}

/* Matrix b of t ([rows, cols] row-major) into x as f64, transposed when col_major (LAPACK's order). */
static void lt_load(const tpu_tensor *t, int64_t b, int64_t rows, int64_t cols, double *x, int col_major)
{
    int64_t off = b * rows * cols;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) x[col_major ? j * rows + i : i * cols + j] = lt_get(t, off + i * cols + j);
}

static void lt_store(tpu_tensor *t, int64_t b, int64_t rows, int64_t cols, const double *x, int col_major)
{
    int64_t off = b * rows * cols;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) lt_set(t, off + i * cols + j, x[col_major ? j * rows + i : i * cols + j]);
}

/* LAPACK in the element type: a column-major copy of one f64 matrix, converted. */
typedef struct lt_lapack {
    int    f32;
    void  *a, *tau, *work;
    int   *iwork;
} lt_lapack;

static void *lt_typed(int f32, const double *x, int64_t n)
{
    void *p = ut_malloc((size_t)UT_MAX(n, (int64_t)1) * (f32 ? sizeof(float) : sizeof(double)));
    if (p && x)
        for (int64_t i = 0; i < n; i++) {
            if (f32) ((float *)p)[i] = (float)x[i];
            else ((double *)p)[i] = x[i];
        }
    return p;
}

static void lt_untyped(int f32, const void *p, double *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) x[i] = f32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

/* ---- LuDecomposition ---- */

static tpu_status lu_setup(exe_state *S, const hlo_instr *in, exe_value *const *ops, lt_call *c)
{
    tpu_status st = lt_setup(S, in, ops, 1, 3, c, "LuDecomposition");
    if (st) return st;
    int64_t k = UT_MIN(c->m, c->n);
    c->k = k;
    if ((st = lt_expect(S, in, c, 0, c->a->dtype, c->a->count, "LuDecomposition")) ||
        (st = lt_expect(S, in, c, 1, TPU_S32, c->batch * k, "LuDecomposition")) ||
        (st = lt_expect(S, in, c, 2, TPU_S32, c->batch * c->m, "LuDecomposition")))
        lt_free(c, 0);
    return st;
}

/* Pivots (0-based) of matrix b into the results, and the permutation they make. */
static void lu_store_pivots(lt_call *c, int64_t b, const int *piv)
{
    int64_t m = c->m, k = c->k;
    int32_t *perm = (int32_t *)c->res[2]->data + b * m;
    for (int64_t i = 0; i < m; i++) perm[i] = (int32_t)i;
    for (int64_t i = 0; i < k; i++) {
        lt_seti(c->res[1], b * k + i, piv[i]);
        int32_t t = perm[i];
        perm[i] = perm[piv[i]];
        perm[piv[i]] = t;
    }
}

/* Doolittle elimination with partial pivoting on x[m][n] (f64, row-major), in place. */
static void lu_ref_one(double *x, int64_t m, int64_t n, int *piv)
{
    for (int64_t j = 0; j < UT_MIN(m, n); j++) {
        int64_t p = j;
        for (int64_t i = j + 1; i < m; i++)
            if (fabs(x[i * n + j]) > fabs(x[p * n + j])) p = i;
        piv[j] = (int)p;
        if (p != j)
            for (int64_t q = 0; q < n; q++) {
                double t = x[j * n + q];
                x[j * n + q] = x[p * n + q];
                x[p * n + q] = t;
            }
        double d = x[j * n + j];
        if (d == 0) continue;   /* singular: this column's multipliers stay as they are (LAPACK's info > 0) */
        for (int64_t i = j + 1; i < m; i++) {
            double l = x[i * n + j] / d;
            x[i * n + j] = l;
            for (int64_t q = j + 1; q < n; q++) x[i * n + q] -= l * x[j * n + q];
        }
    }
}

EXE_KERNEL(exe_k_lu_ref)
{
    lt_call c;
    tpu_status st = lu_setup(S, in, ops, &c);
    if (st) return st;
    int *piv = ut_malloc((size_t)UT_MAX(c.k, (int64_t)1) * sizeof *piv);
    if (!piv) {
        lt_free(&c, 0);
        return ut_nomem(S->ctx);
    }
    for (int64_t b = 0; b < c.batch; b++) {
        lt_load(c.a, b, c.m, c.n, c.x, 0);
        lu_ref_one(c.x, c.m, c.n, piv);
        lt_store(c.res[0], b, c.m, c.n, c.x, 0);
        lu_store_pivots(&c, b, piv);
    }
    ut_free(piv);
    return lt_finish(S, &c, out);
}

EXE_KERNEL(exe_k_lu)
{
    if (EXE_FORCE_REF(S)) return exe_k_lu_ref(S, in, ops, out);
    lt_call c;
    tpu_status st = lu_setup(S, in, ops, &c);
    if (st) return st;
    int f32 = c.a->dtype == TPU_F32, mi = (int)c.m, ni = (int)c.n, info = 0;
    int *piv = ut_malloc((size_t)UT_MAX(c.k, (int64_t)1) * sizeof *piv);
    void *a = lt_typed(f32, NULL, c.m * c.n);
    if (!piv || !a) {
        ut_free(piv);
        ut_free(a);
        lt_free(&c, 0);
        return ut_nomem(S->ctx);
    }
    for (int64_t b = 0; b < c.batch; b++) {
        lt_load(c.a, b, c.m, c.n, c.x, 1);
        for (int64_t i = 0; i < c.m * c.n; i++) {
            if (f32) ((float *)a)[i] = (float)c.x[i];
            else ((double *)a)[i] = c.x[i];
        }
        if (f32) sgetrf_(&mi, &ni, a, &mi, piv, &info);
        else dgetrf_(&mi, &ni, a, &mi, piv, &info);
        lt_untyped(f32, a, c.x, c.m * c.n);
        for (int64_t i = 0; i < c.k; i++) piv[i] -= 1;   /* LAPACK's are 1-based */
        lt_store(c.res[0], b, c.m, c.n, c.x, 1);
        lu_store_pivots(&c, b, piv);
    }
    ut_free(piv);
    ut_free(a);
    return lt_finish(S, &c, out);
}

/* ---- Qr (geqrf) ---- */

static tpu_status qr_setup(exe_state *S, const hlo_instr *in, exe_value *const *ops, lt_call *c)
{
    tpu_status st = lt_setup(S, in, ops, 1, 2, c, "Qr");
    if (st) return st;
    c->k = UT_MIN(c->m, c->n);
    if ((st = lt_expect(S, in, c, 0, c->a->dtype, c->a->count, "Qr")) ||
        (st = lt_expect(S, in, c, 1, c->a->dtype, c->batch * c->k, "Qr")))
        lt_free(c, 0);
    return st;
}

/* Householder QR of x[m][n] (row-major, f64) in place, LAPACK's convention; taus out. */
static void qr_ref_one(double *x, int64_t m, int64_t n, double *tau)
{
    for (int64_t j = 0; j < UT_MIN(m, n); j++) {
        double alpha = x[j * n + j], xn = 0;
        for (int64_t i = j + 1; i < m; i++) xn = hypot(xn, x[i * n + j]);
        if (xn == 0) {   /* ?larfg: H = I */
            tau[j] = 0;
            continue;
        }
        double beta = -copysign(hypot(alpha, xn), alpha);
        tau[j] = (beta - alpha) / beta;
        for (int64_t i = j + 1; i < m; i++) x[i * n + j] /= alpha - beta;
        x[j * n + j] = beta;
        /* the remaining columns: c -= tau v (v^T c), v = (1, x[j+1:, j]) */
        for (int64_t q = j + 1; q < n; q++) {
            double s = x[j * n + q];
            for (int64_t i = j + 1; i < m; i++) s += x[i * n + j] * x[i * n + q];
            s *= tau[j];
            x[j * n + q] -= s;
            for (int64_t i = j + 1; i < m; i++) x[i * n + q] -= s * x[i * n + j];
        }
    }
}

EXE_KERNEL(exe_k_qr_ref)
{
    lt_call c;
    tpu_status st = qr_setup(S, in, ops, &c);
    if (st) return st;
    for (int64_t b = 0; b < c.batch; b++) {
        lt_load(c.a, b, c.m, c.n, c.x, 0);
        qr_ref_one(c.x, c.m, c.n, c.v);
        lt_store(c.res[0], b, c.m, c.n, c.x, 0);
        for (int64_t i = 0; i < c.k; i++) lt_set(c.res[1], b * c.k + i, c.v[i]);
    }
    return lt_finish(S, &c, out);
}

EXE_KERNEL(exe_k_qr)
{
    if (EXE_FORCE_REF(S)) return exe_k_qr_ref(S, in, ops, out);
    lt_call c;
    tpu_status st = qr_setup(S, in, ops, &c);
    if (st) return st;
    int f32 = c.a->dtype == TPU_F32, mi = (int)c.m, ni = (int)c.n, info = 0, lwork = (int)UT_MAX(c.n * 64, (int64_t)1);
    void *a = lt_typed(f32, NULL, c.m * c.n), *tau = lt_typed(f32, NULL, c.k), *work = lt_typed(f32, NULL, lwork);
    if (!a || !tau || !work) {
        st = ut_nomem(S->ctx);
        goto done;
    }
    for (int64_t b = 0; b < c.batch; b++) {
        lt_load(c.a, b, c.m, c.n, c.x, 1);
        for (int64_t i = 0; i < c.m * c.n; i++) {
            if (f32) ((float *)a)[i] = (float)c.x[i];
            else ((double *)a)[i] = c.x[i];
        }
        if (f32) sgeqrf_(&mi, &ni, a, &mi, tau, work, &lwork, &info);
        else dgeqrf_(&mi, &ni, a, &mi, tau, work, &lwork, &info);
        lt_untyped(f32, a, c.x, c.m * c.n);
        lt_untyped(f32, tau, c.v, c.k);
        lt_store(c.res[0], b, c.m, c.n, c.x, 1);
        for (int64_t i = 0; i < c.k; i++) lt_set(c.res[1], b * c.k + i, c.v[i]);
    }
done:
    ut_free(a);
    ut_free(tau);
    ut_free(work);
    if (st) {
        lt_free(&c, 0);
        return st;
    }
    return lt_finish(S, &c, out);
}

/* ---- ProductOfElementaryHouseholderReflectors (orgqr) ---- */

static tpu_status hp_setup(exe_state *S, const hlo_instr *in, exe_value *const *ops, lt_call *c)
{
    const char *what = "ProductOfElementaryHouseholderReflectors";
    tpu_status st = lt_setup(S, in, ops, 2, 1, c, what);
    if (st) return st;
    c->k = c->b->rank ? c->b->dims[c->b->rank - 1] : 0;
    if (c->b->dtype != c->a->dtype || c->k > c->n || c->n > c->m || c->b->count != c->batch * c->k) {
        lt_free(c, 0);
        return exe_fail(S, in, TPU_ERR_SHAPE, "%s needs a[..., m, n] with m >= n and taus[..., k] of its type, k <= n",
                        what);
    }
    if ((st = lt_expect(S, in, c, 0, c->a->dtype, c->a->count, what))) lt_free(c, 0);
    return st;
}

/* q[m][n] = the first n columns of H_0 ... H_{k-1}, the reflectors below the diagonal of a[m][n]. */
static void hp_ref_one(const double *a, const double *tau, int64_t m, int64_t n, int64_t k, double *q)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) q[i * n + j] = i == j;
    for (int64_t r = k - 1; r >= 0; r--)   /* q <- H_r q, which touches rows r.. only */
        for (int64_t j = 0; j < n; j++) {
            double s = q[r * n + j];
            for (int64_t i = r + 1; i < m; i++) s += a[i * n + r] * q[i * n + j];
            s *= tau[r];
            q[r * n + j] -= s;
            for (int64_t i = r + 1; i < m; i++) q[i * n + j] -= s * a[i * n + r];
        }
}

EXE_KERNEL(exe_k_householder_product_ref)
{
    lt_call c;
    tpu_status st = hp_setup(S, in, ops, &c);
    if (st) return st;
    for (int64_t b = 0; b < c.batch; b++) {
        lt_load(c.a, b, c.m, c.n, c.x, 0);
        for (int64_t i = 0; i < c.k; i++) c.v[i] = lt_get(c.b, b * c.k + i);
        hp_ref_one(c.x, c.v, c.m, c.n, c.k, c.y);
        lt_store(c.res[0], b, c.m, c.n, c.y, 0);
    }
    return lt_finish(S, &c, out);
}

EXE_KERNEL(exe_k_householder_product)
{
    if (EXE_FORCE_REF(S)) return exe_k_householder_product_ref(S, in, ops, out);
    lt_call c;
    tpu_status st = hp_setup(S, in, ops, &c);
    if (st) return st;
    int f32 = c.a->dtype == TPU_F32, mi = (int)c.m, ni = (int)c.n, ki = (int)c.k, info = 0;
    int lwork = (int)UT_MAX(c.n * 64, (int64_t)1);
    void *a = lt_typed(f32, NULL, c.m * c.n), *tau = lt_typed(f32, NULL, c.k), *work = lt_typed(f32, NULL, lwork);
    if (!a || !tau || !work) {
        st = ut_nomem(S->ctx);
        goto done;
    }
    for (int64_t b = 0; b < c.batch; b++) {
        if (c.m * c.n == 0) break;
        lt_load(c.a, b, c.m, c.n, c.x, 1);
        for (int64_t i = 0; i < c.m * c.n; i++) {
            if (f32) ((float *)a)[i] = (float)c.x[i];
            else ((double *)a)[i] = c.x[i];
        }
        for (int64_t i = 0; i < c.k; i++) {
            if (f32) ((float *)tau)[i] = (float)lt_get(c.b, b * c.k + i);
            else ((double *)tau)[i] = lt_get(c.b, b * c.k + i);
        }
        if (f32) sorgqr_(&mi, &ni, &ki, a, &mi, tau, work, &lwork, &info);
        else dorgqr_(&mi, &ni, &ki, a, &mi, tau, work, &lwork, &info);
        lt_untyped(f32, a, c.x, c.m * c.n);
        lt_store(c.res[0], b, c.m, c.n, c.x, 1);
    }
done:
    ut_free(a);
    ut_free(tau);
    ut_free(work);
    if (st) {
        lt_free(&c, 0);
        return st;
    }
    return lt_finish(S, &c, out);
}

/* ---- Eigh ---- */

static tpu_status eh_setup(exe_state *S, const hlo_instr *in, exe_value *const *ops, lt_call *c, int *lower)
{
    tpu_status st = lt_setup(S, in, ops, 1, 2, c, "Eigh");
    if (st) return st;
    if (c->m != c->n) {
        lt_free(c, 0);
        return exe_fail(S, in, TPU_ERR_SHAPE, "Eigh needs square matrices [..., n, n]");
    }
    if ((st = lt_expect(S, in, c, 0, c->a->dtype, c->a->count, "Eigh")) ||
        (st = lt_expect(S, in, c, 1, c->a->dtype, c->batch * c->n, "Eigh"))) {
        lt_free(c, 0);
        return st;
    }
    /* backend_config "lower,sort_eigenvalues,max_iter,tol" (jax's _eigh_tpu_lowering); absent: lower */
    const char *cfg = hlo_attr_str(in, HK_BACKEND_CONFIG);
    while (cfg && (*cfg == '"' || *cfg == ' ')) cfg++;   /* the raw attribute keeps its quotes */
    *lower = cfg && *cfg >= '0' && *cfg <= '9' ? atoi(cfg) != 0 : 1;
    return TPU_OK;
}

/* The symmetric matrix b of a (its named triangle mirrored) into x[n][n]. */
static void eh_load(const tpu_tensor *a, int64_t b, int64_t n, int lower, double *x)
{
    lt_load(a, b, n, n, x, 0);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = i + 1; j < n; j++) {
            if (lower) x[i * n + j] = x[j * n + i];
            else x[j * n + i] = x[i * n + j];
        }
}

/* Eigenvalues w ascending with their vectors (columns of v) reordered alike. */
static void eh_sort(double *w, double *v, int64_t n)
{
    for (int64_t i = 1; i < n; i++)
        for (int64_t j = i; j > 0 && w[j] < w[j - 1]; j--) {
            double t = w[j];
            w[j] = w[j - 1];
            w[j - 1] = t;
            for (int64_t r = 0; r < n; r++) {
                t = v[r * n + j];
                v[r * n + j] = v[r * n + j - 1];
                v[r * n + j - 1] = t;
            }
        }
}

/* Cyclic Jacobi on the symmetric x[n][n] (destroyed): w eigenvalues, v[n][n] eigenvectors as columns. */
static void eh_ref_one(double *x, int64_t n, double *w, double *v)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) v[i * n + j] = i == j;
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0, tot = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < n; j++) {
                tot += x[i * n + j] * x[i * n + j];
                if (i != j) off += x[i * n + j] * x[i * n + j];
            }
        if (off <= 1e-30 * tot || off == 0) break;
        for (int64_t p = 0; p < n; p++)
            for (int64_t q = p + 1; q < n; q++) {
                double apq = x[p * n + q];
                if (apq == 0) continue;
                /* the rotation that zeroes x[p][q] (Golub & Van Loan, sym.schur2) */
                double tau = (x[q * n + q] - x[p * n + p]) / (2 * apq);
                double t = copysign(1.0, tau) / (fabs(tau) + sqrt(1 + tau * tau));
                double cs = 1 / sqrt(1 + t * t), sn = t * cs;
                for (int64_t k = 0; k < n; k++) {   /* x <- x J (columns p, q) */
                    double xp = x[k * n + p], xq = x[k * n + q];
                    x[k * n + p] = cs * xp - sn * xq;
                    x[k * n + q] = sn * xp + cs * xq;
                }
                for (int64_t k = 0; k < n; k++) {   /* x <- J^T x (rows p, q) */
                    double xp = x[p * n + k], xq = x[q * n + k];
                    x[p * n + k] = cs * xp - sn * xq;
                    x[q * n + k] = sn * xp + cs * xq;
                }
                for (int64_t k = 0; k < n; k++) {   /* v <- v J */
                    double vp = v[k * n + p], vq = v[k * n + q];
                    v[k * n + p] = cs * vp - sn * vq;
                    v[k * n + q] = sn * vp + cs * vq;
                }
            }
    }
    for (int64_t i = 0; i < n; i++) w[i] = x[i * n + i];
    eh_sort(w, v, n);
}

EXE_KERNEL(exe_k_eigh_ref)
{
    lt_call c;
    int lower;
    tpu_status st = eh_setup(S, in, ops, &c, &lower);
    if (st) return st;
    for (int64_t b = 0; b < c.batch; b++) {
        eh_load(c.a, b, c.n, lower, c.x);
        eh_ref_one(c.x, c.n, c.v, c.y);
        lt_store(c.res[0], b, c.n, c.n, c.y, 0);
        for (int64_t i = 0; i < c.n; i++) lt_set(c.res[1], b * c.n + i, c.v[i]);
    }
    return lt_finish(S, &c, out);
}

EXE_KERNEL(exe_k_eigh)
{
    if (EXE_FORCE_REF(S)) return exe_k_eigh_ref(S, in, ops, out);
    lt_call c;
    int lower;
    tpu_status st = eh_setup(S, in, ops, &c, &lower);
    if (st) return st;
    int f32 = c.a->dtype == TPU_F32, ni = (int)c.n, info = 0;
    int lwork = (int)(1 + 6 * c.n + 2 * c.n * c.n), liwork = (int)(3 + 5 * c.n);
    void *a = lt_typed(f32, NULL, c.n * c.n), *w = lt_typed(f32, NULL, c.n), *work = lt_typed(f32, NULL, lwork);
    int *iwork = ut_malloc((size_t)liwork * sizeof *iwork);
    if (!a || !w || !work || !iwork) {
        st = ut_nomem(S->ctx);
        goto done;
    }
    for (int64_t b = 0; b < c.batch; b++) {
        if (c.n == 0) break;
        eh_load(c.a, b, c.n, lower, c.x);   /* symmetric: row- and column-major alike */
        for (int64_t i = 0; i < c.n * c.n; i++) {
            if (f32) ((float *)a)[i] = (float)c.x[i];
            else ((double *)a)[i] = c.x[i];
        }
        if (f32) ssyevd_("V", "L", &ni, a, &ni, w, work, &lwork, iwork, &liwork, &info);
        else dsyevd_("V", "L", &ni, a, &ni, w, work, &lwork, iwork, &liwork, &info);
        if (info != 0) {   /* no convergence: the reference's answer */
            eh_ref_one(c.x, c.n, c.v, c.y);
        } else {
            lt_untyped(f32, a, c.x, c.n * c.n);   /* column j is vector j: transpose into row-major v */
            for (int64_t i = 0; i < c.n; i++)
                for (int64_t j = 0; j < c.n; j++) c.y[i * c.n + j] = c.x[j * c.n + i];
            lt_untyped(f32, w, c.v, c.n);
        }
        lt_store(c.res[0], b, c.n, c.n, c.y, 0);
        for (int64_t i = 0; i < c.n; i++) lt_set(c.res[1], b * c.n + i, c.v[i]);
    }
done:
    ut_free(a);
    ut_free(w);
    ut_free(work);
    ut_free(iwork);
    if (st) {
        lt_free(&c, 0);
        return st;
    }
    return lt_finish(S, &c, out);
}
