/* batchnorm.c — batch-norm-training, batch-norm-inference, batch-norm-grad, any feature_index.
 *
 * The formulas and their operation order are XLA's BatchNormExpander (what XLA:CPU runs), with N the
 * elements per feature and every operation rounded to the compute type (f32; f64 for f64 operands; bf16 and
 * f16 operands are upcast to f32 and the results rounded back):
 *   training:  mean = sum(x) / N, var = sum(x*x) / N - mean*mean (biased),
 *              y = ((x - mean) * rsqrt(var + eps)) * scale + offset           -> (y, mean, var)
 *   inference: k = scale * rsqrt(var + eps), y = x * k + (offset - mean * k)
 *   grad:      r = rsqrt(var + eps), xm = x - mean, sg = sum(g * xm), go = sum(g),
 *              gs = sg * r, gx = ((scale * r) / N) * ((g * N - go) - (sg * xm) / (var + eps)) -> (gx, gs, go)
 * A multiply feeding an add or subtract is one FMA, as XLA:CPU's LLVM code contracts it (with XLA's own
 * mean and variance, y of training and inference match XLA:CPU bit for bit, except that XLA's vectorised
 * rsqrt is sometimes an ulp off the correctly rounded one used here). Sums are accumulated in
 * f64 and rounded once; XLA:CPU sums in f32 in its own order, so mean/var/sums differ by a few ulps, and
 * grad_operand (a difference of nearly equal terms) by more.
 */
#include "exec/exec.h"
#include "exec/kernels/ref.h"

#include "exec/exe_par.h"

#include <math.h>
#include <string.h>

/* f32 loops with fmaf: clones with FMA instructions (fmaf is a library call on baseline x86-64) */
#define BN_CLONES EXE_VEC

typedef struct bn_geom {
    int64_t  c, outer, inner, n;   /* features; element (o, f, i) is at (o * c + f) * inner + i; n per feature */
    int      f64;                   /* compute in f64 */
    double   eps;
} bn_geom;

static inline double bn_r(const bn_geom *g, double x) { return g->f64 ? x : (double)(float)x; }
static inline double bn_rsqrt(const bn_geom *g, double x) { return bn_r(g, 1.0 / sqrt(x)); }
/* a * b + c rounded once: XLA:CPU's LLVM backend contracts a multiply feeding an add into an FMA */
static inline double bn_fma(const bn_geom *g, double a, double b, double c)
{
    return g->f64 ? fma(a, b, c) : (double)fmaf((float)a, (float)b, (float)c);
}

static tpu_status bn_check(exe_state *S, const hlo_instr *in, exe_value *const *ops, int nops, bn_geom *g)
{
    if (in->nops != nops) return exe_fail(S, in, TPU_ERR_SHAPE, "needs %d operands, got %d", nops, in->nops);
    for (int i = 0; i < nops; i++)
        if (!ops[i]->t) return exe_fail(S, in, TPU_ERR_SHAPE, "operand %d is not an array", i);
    const tpu_tensor *x = ops[0]->t;
    if (x->dtype != TPU_F32 && x->dtype != TPU_F64 && x->dtype != TPU_BF16 && x->dtype != TPU_F16)
        return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "operand type %s (f32, f64, bf16, f16 supported)", tpu_dtype_name(x->dtype));
    if (!hlo_attr_find(in, HK_FEATURE_INDEX)) return exe_fail(S, in, TPU_ERR_SHAPE, "feature_index= is missing");
    int64_t fi = hlo_attr_int(in, HK_FEATURE_INDEX, 0);
    if (x->rank < 1 || fi < 0 || fi >= x->rank)
        return exe_fail(S, in, TPU_ERR_SHAPE, "feature_index=%lld is not a dimension of the rank-%d operand", (long long)fi, x->rank);
    g->c = x->dims[fi];
    g->outer = g->inner = 1;
    for (int d = 0; d < fi; d++) g->outer *= x->dims[d];
    for (int d = (int)fi + 1; d < x->rank; d++) g->inner *= x->dims[d];
    g->n = g->outer * g->inner;
    g->f64 = x->dtype == TPU_F64;
    const hlo_attr *e = hlo_attr_find(in, HK_EPSILON);
    double eps = e ? (e->kind == HA_FLOAT ? e->v.f : (double)e->v.i) : 0.001;
    g->eps = bn_r(g, (double)(float)eps);   /* the attribute is an f32 */
    for (int i = 1; i < nops; i++) {
        const tpu_tensor *t = ops[i]->t;
        int is_full = (in->op == HLO_BATCH_NORM_GRAD && i == 4);   /* grad_output has the operand's shape */
        if (t->dtype != x->dtype)
            return exe_fail(S, in, TPU_ERR_SHAPE, "operand %d is %s but the input is %s", i, tpu_dtype_name(t->dtype), tpu_dtype_name(x->dtype));
        if (is_full ? (t->rank != x->rank || memcmp(t->dims, x->dims, sizeof(int64_t) * (size_t)x->rank)) : (t->rank != 1 || t->dims[0] != g->c))
            return exe_fail(S, in, TPU_ERR_SHAPE, "operand %d must be %s", i, is_full ? "shaped like the input" : "a vector of the feature count");
    }
    return TPU_OK;
}

static inline double bn_ld(const tpu_tensor *t, int64_t i) { return ten_load_f64(t->dtype, t->data, i); }

/* Allocates a tuple result's element k (or the array result when k < 0). */
static tpu_status bn_alloc(exe_state *S, const hlo_instr *in, int k, int64_t count, tpu_tensor **t)
{
    const hlo_shape *s = k < 0 ? &in->shape : (hlo_shape_is_tuple(&in->shape) && k < in->shape.ntuple ? &in->shape.tuple[k] : NULL);
    if (!s || !hlo_shape_is_array(s) || hlo_shape_count(s) != count)
        return exe_fail(S, in, TPU_ERR_SHAPE, "result %d has the wrong shape", k < 0 ? 0 : k);
    return exe_alloc_shape(S, s, t);
}

static tpu_status bn_tuple(exe_state *S, tpu_tensor **ts, int n, exe_value **out)
{
    exe_value *v[3];
    int ok = 1;
    for (int i = 0; i < n; i++)
        if (!(v[i] = exe_value_array(ts[i]))) ok = 0;
    if (!ok) {
        for (int i = 0; i < n; i++) exe_value_unref(v[i]);
        return ut_nomem(S->ctx);
    }
    *out = exe_value_tuple(v, n);
    return *out ? TPU_OK : ut_nomem(S->ctx);
}

static tpu_status bn_alloc_n(exe_state *S, const hlo_instr *in, const int64_t *counts, int n, tpu_tensor **ts)
{
    for (int i = 0; i < n; i++) {
        tpu_status st = bn_alloc(S, in, n == 1 ? -1 : i, counts[i], &ts[i]);
        if (st) {
            for (int k = 0; k < i; k++) tpu_tensor_free(ts[k]);
            return st;
        }
    }
    return TPU_OK;
}

/* Per-feature sums of f(element) in f64, walking the tensor in memory order. fast=0: feature by feature. */
typedef double (*bn_term)(const tpu_tensor *const *t, const double *pf, int64_t i, int64_t f, const bn_geom *g);

static double bn_term_x(const tpu_tensor *const *t, const double *pf, int64_t i, int64_t f, const bn_geom *g)
{
    (void)pf; (void)f; (void)g;
    return bn_ld(t[0], i);
}

static double bn_term_xx(const tpu_tensor *const *t, const double *pf, int64_t i, int64_t f, const bn_geom *g)
{
    (void)pf; (void)f;
    double x = bn_ld(t[0], i);
    return bn_r(g, x * x);
}

static double bn_term_g(const tpu_tensor *const *t, const double *pf, int64_t i, int64_t f, const bn_geom *g)
{
    (void)pf; (void)f; (void)g;
    return bn_ld(t[1], i);
}

/* g * (x - mean[f]) */
static double bn_term_gxm(const tpu_tensor *const *t, const double *pf, int64_t i, int64_t f, const bn_geom *g)
{
    return bn_r(g, bn_ld(t[1], i) * bn_r(g, bn_ld(t[0], i) - pf[f]));
}

static void bn_sums(const bn_geom *g, const tpu_tensor *const *t, const double *pf, bn_term term, double *sum, int fast)
{
    for (int64_t f = 0; f < g->c; f++) sum[f] = 0;
    if (fast) {
        for (int64_t o = 0; o < g->outer; o++)
            for (int64_t f = 0; f < g->c; f++) {
                int64_t base = (o * g->c + f) * g->inner;
                double s = 0;
                for (int64_t i = 0; i < g->inner; i++) s += term(t, pf, base + i, f, g);
                sum[f] += s;
            }
    } else {
        for (int64_t f = 0; f < g->c; f++)
            for (int64_t o = 0; o < g->outer; o++)
                for (int64_t i = 0; i < g->inner; i++) sum[f] += term(t, pf, (o * g->c + f) * g->inner + i, f, g);
    }
    for (int64_t f = 0; f < g->c; f++) sum[f] = bn_r(g, sum[f]);
}

/* ---- f32 fast paths ----
 * Same operations as the generic code (an f32 +, -, * or / computed in double and rounded to f32 is the f32
 * operation), written on floats so they vectorise, and split over exe_par threads. The per-feature sums are
 * accumulated in f64 over fixed blocks of the outer dimension (partial sums added in block order), so they
 * never depend on the thread count. */

typedef struct bn_f32_job {
    const bn_geom *g;
    const float   *x, *gy;       /* input, grad_output (grad) */
    const float   *mean, *rs;    /* per feature, f32 values */
    const float   *a, *b, *c2, *d;   /* per feature coefficients of the output loop */
    float         *y;
    double        *p1, *p2;      /* partial sums: [block][feature] */
    int64_t        ob;           /* outer rows per block */
    int64_t        nob;
    int            kind;         /* 0 training sums (x, x*x), 1 grad sums (g*(x-mean), g) */
    float          N;
} bn_f32_job;

BN_CLONES
static void bn_f32_sum_block(void *ctx, int64_t t0, int64_t t1, int tid)
{
    const bn_f32_job *J = ctx;
    const bn_geom *g = J->g;
    int64_t c = g->c, inner = g->inner;
    for (int64_t t = t0; t < t1; t++) {
        /* task: (block, feature) when rows are long, else a whole block with every feature */
        int64_t blk = inner >= 16 ? t / c : t, f0 = inner >= 16 ? t % c : 0, f1 = inner >= 16 ? f0 + 1 : c;
        int64_t o0 = blk * J->ob, o1 = UT_MIN(g->outer, o0 + J->ob);
        double *s1 = J->p1 + blk * c, *s2 = J->p2 + blk * c;
        for (int64_t f = f0; f < f1; f++) s1[f] = s2[f] = 0;
        for (int64_t o = o0; o < o1; o++)
            for (int64_t f = f0; f < f1; f++) {
                const float *x = J->x + (o * c + f) * inner;
                double a = 0, b = 0;
                if (J->kind == 0) {
                    for (int64_t i = 0; i < inner; i++) {
                        a += (double)x[i];
                        b += (double)(x[i] * x[i]);
                    }
                } else {
                    const float *gy = J->gy + (o * c + f) * inner;
                    float m = J->mean[f];
                    for (int64_t i = 0; i < inner; i++) {
                        a += (double)(gy[i] * (x[i] - m));
                        b += (double)gy[i];
                    }
                }
                s1[f] += a;
                s2[f] += b;
            }
    }
    (void)tid;
}

/* sum1[f], sum2[f] over all (o, i) */
static tpu_status bn_f32_sums(exe_state *S, bn_f32_job *J, double *sum1, double *sum2)
{
    const bn_geom *g = J->g;
    int64_t row = g->c * g->inner;
    J->ob = UT_MAX((int64_t)1, (int64_t)65536 / UT_MAX(row, (int64_t)1));
    if (g->inner >= 16) J->ob = UT_MAX((int64_t)1, (int64_t)65536 / g->inner);
    J->nob = g->outer ? (g->outer + J->ob - 1) / J->ob : 0;
    double *p = ut_malloc((size_t)(2 * J->nob * g->c + 2) * sizeof *p);
    if (!p) return ut_nomem(S->ctx);
    J->p1 = p;
    J->p2 = p + J->nob * g->c;
    int64_t ntask = g->inner >= 16 ? J->nob * g->c : J->nob;
    exe_par_for(g->n * g->c > 65536 ? S->threads : 1, ntask, 1, bn_f32_sum_block, J);
    for (int64_t f = 0; f < g->c; f++) sum1[f] = sum2[f] = 0;
    for (int64_t b = 0; b < J->nob; b++)
        for (int64_t f = 0; f < g->c; f++) {
            sum1[f] += J->p1[b * g->c + f];
            sum2[f] += J->p2[b * g->c + f];
        }
    ut_free(p);
    return TPU_OK;
}

/* training: y = fma((x - mean) * rs, scale, offset); grad: gx = st * (fma(g, N, -go) - (sg * (x - mean)) / ve) */
BN_CLONES
static void bn_f32_out_rows(void *ctx, int64_t r0, int64_t r1, int tid)
{
    const bn_f32_job *J = ctx;
    int64_t c = J->g->c, inner = J->g->inner;
    for (int64_t r = r0; r < r1; r++) {
        int64_t f = r % c;
        const float *x = J->x + r * inner;
        float *y = J->y + r * inner;
        float m = J->mean[f];
        if (J->kind == 0) {
            float rs = J->rs[f], sc = J->a[f], of = J->b[f];
            for (int64_t i = 0; i < inner; i++) y[i] = fmaf((x[i] - m) * rs, sc, of);
        } else {
            const float *gy = J->gy + r * inner;
            float sg = J->a[f], ve = J->b[f], go = J->c2[f], st = J->d[f], N = J->N;
            for (int64_t i = 0; i < inner; i++) {
                float xm = x[i] - m;
                y[i] = st * (fmaf(gy[i], N, -go) - (sg * xm) / ve);
            }
        }
    }
    (void)tid;
}

static void bn_f32_out(exe_state *S, bn_f32_job *J)
{
    int64_t rows = J->g->outer * J->g->c;
    exe_par_for(J->g->n * J->g->c > 65536 ? S->threads : 1, rows, UT_MAX((int64_t)1, 16384 / UT_MAX(J->g->inner, (int64_t)1)),
                bn_f32_out_rows, J);
}

static tpu_status bn_training_f32(exe_state *S, const bn_geom *g, const tpu_tensor *x, const tpu_tensor *scale,
                                  const tpu_tensor *offset, tpu_tensor **ts)
{
    int64_t c = g->c ? g->c : 1;
    double *d = ut_malloc((size_t)c * 2 * sizeof *d);
    float *fv = ut_malloc((size_t)c * 2 * sizeof *fv);
    if (!d || !fv) {
        ut_free(d);
        ut_free(fv);
        return ut_nomem(S->ctx);
    }
    bn_f32_job J;
    memset(&J, 0, sizeof J);
    J.g = g;
    J.x = x->data;
    J.kind = 0;
    tpu_status st = bn_f32_sums(S, &J, d, d + c);
    if (!st) {
        float *mean = fv, *rs = fv + c;
        double N = bn_r(g, (double)g->n);
        for (int64_t f = 0; f < g->c; f++) {
            double m = bn_r(g, d[f] / N), sqm = bn_r(g, d[c + f] / N);
            double var = bn_fma(g, -m, m, sqm);
            mean[f] = (float)m;
            rs[f] = (float)bn_rsqrt(g, bn_r(g, var + g->eps));
            ((float *)ts[1]->data)[f] = (float)m;
            ((float *)ts[2]->data)[f] = (float)var;
        }
        J.mean = mean;
        J.rs = rs;
        J.a = scale->data;
        J.b = offset->data;
        J.y = ts[0]->data;
        bn_f32_out(S, &J);
    }
    ut_free(d);
    ut_free(fv);
    return st;
}

static tpu_status bn_grad_f32(exe_state *S, const bn_geom *g, const tpu_tensor *x, const tpu_tensor *scale,
                              const tpu_tensor *meant, const tpu_tensor *vart, const tpu_tensor *gy, tpu_tensor **ts)
{
    int64_t c = g->c ? g->c : 1;
    double *d = ut_malloc((size_t)c * 2 * sizeof *d);
    float *fv = ut_malloc((size_t)c * 5 * sizeof *fv);
    if (!d || !fv) {
        ut_free(d);
        ut_free(fv);
        return ut_nomem(S->ctx);
    }
    float *mean = fv, *ve = fv + c, *r = fv + 2 * c, *stf = fv + 3 * c, *sgf = fv + 4 * c;
    double N = bn_r(g, (double)g->n);
    for (int64_t f = 0; f < g->c; f++) {
        mean[f] = ((const float *)meant->data)[f];
        ve[f] = (float)bn_r(g, (double)((const float *)vart->data)[f] + g->eps);
        r[f] = (float)bn_rsqrt(g, ve[f]);
        stf[f] = (float)bn_r(g, bn_r(g, (double)((const float *)scale->data)[f] * r[f]) / N);
    }
    bn_f32_job J;
    memset(&J, 0, sizeof J);
    J.g = g;
    J.x = x->data;
    J.gy = gy->data;
    J.mean = mean;
    J.kind = 1;
    tpu_status st = bn_f32_sums(S, &J, d, d + c);
    if (!st) {
        float *go = ut_malloc((size_t)c * sizeof *go);
        if (!go) st = ut_nomem(S->ctx);
        for (int64_t f = 0; !st && f < g->c; f++) {
            sgf[f] = (float)bn_r(g, d[f]);
            go[f] = (float)bn_r(g, d[c + f]);
            ((float *)ts[1]->data)[f] = (float)bn_r(g, (double)sgf[f] * r[f]);
            ((float *)ts[2]->data)[f] = go[f];
        }
        if (!st) {
            J.a = sgf;
            J.b = ve;
            J.c2 = go;
            J.d = stf;
            J.N = (float)N;
            J.y = ts[0]->data;
            bn_f32_out(S, &J);
        }
        ut_free(go);
    }
    ut_free(d);
    ut_free(fv);
    return st;
}

/* ---- training ---- */

static tpu_status bn_training(exe_state *S, const hlo_instr *in, exe_value *const *ops, exe_value **out, int fast)
{
    bn_geom g;
    tpu_status st = bn_check(S, in, ops, 3, &g);
    if (st) return st;
    const tpu_tensor *x = ops[0]->t, *scale = ops[1]->t, *offset = ops[2]->t;
    tpu_tensor *ts[3];
    int64_t counts[3] = {x->count, g.c, g.c};
    if ((st = bn_alloc_n(S, in, counts, 3, ts))) return st;
    if (fast && x->dtype == TPU_F32 && ts[0]->dtype == TPU_F32 && ts[1]->dtype == TPU_F32 && ts[2]->dtype == TPU_F32) {
        st = bn_training_f32(S, &g, x, scale, offset, ts);
        if (st) {
            for (int i = 0; i < 3; i++) tpu_tensor_free(ts[i]);
            return st;
        }
        return bn_tuple(S, ts, 3, out);
    }
    double *buf = ut_malloc((size_t)(g.c ? g.c : 1) * 4 * sizeof *buf);
    if (!buf) {
        for (int i = 0; i < 3; i++) tpu_tensor_free(ts[i]);
        return ut_nomem(S->ctx);
    }
    double *mean = buf, *var = buf + g.c, *rs = buf + 2 * g.c, *sq = buf + 3 * g.c;
    const tpu_tensor *tx[1] = {x};
    bn_sums(&g, tx, NULL, bn_term_x, mean, fast);
    bn_sums(&g, tx, NULL, bn_term_xx, sq, fast);
    double N = bn_r(&g, (double)g.n);
    for (int64_t f = 0; f < g.c; f++) {
        mean[f] = bn_r(&g, mean[f] / N);
        double sqm = bn_r(&g, sq[f] / N);
        var[f] = bn_fma(&g, -mean[f], mean[f], sqm);
        rs[f] = bn_rsqrt(&g, bn_r(&g, var[f] + g.eps));
        exe_store_float(S, ts[1]->dtype, ts[1]->data, f, mean[f]);
        exe_store_float(S, ts[2]->dtype, ts[2]->data, f, var[f]);
    }
    for (int64_t o = 0; o < g.outer; o++)
        for (int64_t f = 0; f < g.c; f++) {
            double sc = bn_ld(scale, f), of = bn_ld(offset, f);
            for (int64_t i = 0; i < g.inner; i++) {
                int64_t k = (o * g.c + f) * g.inner + i;
                double t = bn_r(&g, bn_r(&g, bn_ld(x, k) - mean[f]) * rs[f]);
                exe_store_float(S, ts[0]->dtype, ts[0]->data, k, bn_fma(&g, t, sc, of));
            }
        }
    ut_free(buf);
    return bn_tuple(S, ts, 3, out);
}

EXE_KERNEL(exe_k_batch_norm_training)
{
    if (EXE_FORCE_REF(S)) return exe_k_batch_norm_training_ref(S, in, ops, out);
    return bn_training(S, in, ops, out, 1);
}

EXE_KERNEL(exe_k_batch_norm_training_ref) { return bn_training(S, in, ops, out, 0); }

/* ---- inference ---- */

static tpu_status bn_inference(exe_state *S, const hlo_instr *in, exe_value *const *ops, exe_value **out, int fast)
{
    bn_geom g;
    tpu_status st = bn_check(S, in, ops, 5, &g);
    if (st) return st;
    const tpu_tensor *x = ops[0]->t;
    tpu_tensor *t;
    int64_t cnt = x->count;
    if ((st = bn_alloc_n(S, in, &cnt, 1, &t))) return st;
    double *buf = ut_malloc((size_t)(g.c ? g.c : 1) * 2 * sizeof *buf);
    if (!buf) {
        tpu_tensor_free(t);
        return ut_nomem(S->ctx);
    }
    double *k = buf, *sh = buf + g.c;
    for (int64_t f = 0; f < g.c; f++) {
        double sc = bn_ld(ops[1]->t, f), of = bn_ld(ops[2]->t, f), mu = bn_ld(ops[3]->t, f), va = bn_ld(ops[4]->t, f);
        k[f] = bn_r(&g, sc * bn_rsqrt(&g, bn_r(&g, va + g.eps)));
        sh[f] = bn_fma(&g, -mu, k[f], of);
    }
    for (int64_t o = 0; o < g.outer; o++)
        for (int64_t f = 0; f < g.c; f++)
            for (int64_t i = 0; i < g.inner; i++) {
                int64_t e = (o * g.c + f) * g.inner + i;
                exe_store_float(S, t->dtype, t->data, e, bn_fma(&g, bn_ld(x, e), k[f], sh[f]));
            }
    ut_free(buf);
    return exe_out_array(S, t, out);
}

EXE_KERNEL(exe_k_batch_norm_inference)
{
    if (EXE_FORCE_REF(S)) return exe_k_batch_norm_inference_ref(S, in, ops, out);
    return bn_inference(S, in, ops, out, 1);
}

EXE_KERNEL(exe_k_batch_norm_inference_ref) { return bn_inference(S, in, ops, out, 0); }

/* ---- grad ---- */

static tpu_status bn_grad(exe_state *S, const hlo_instr *in, exe_value *const *ops, exe_value **out, int fast)
{
    bn_geom g;
    tpu_status st = bn_check(S, in, ops, 5, &g);
    if (st) return st;
    const tpu_tensor *x = ops[0]->t, *scale = ops[1]->t, *meant = ops[2]->t, *vart = ops[3]->t, *gy = ops[4]->t;
    tpu_tensor *ts[3];
    int64_t counts[3] = {x->count, g.c, g.c};
    if ((st = bn_alloc_n(S, in, counts, 3, ts))) return st;
    if (fast && x->dtype == TPU_F32 && ts[0]->dtype == TPU_F32 && ts[1]->dtype == TPU_F32 && ts[2]->dtype == TPU_F32) {
        st = bn_grad_f32(S, &g, x, scale, meant, vart, gy, ts);
        if (st) {
            for (int i = 0; i < 3; i++) tpu_tensor_free(ts[i]);
            return st;
        }
        return bn_tuple(S, ts, 3, out);
    }
    double *buf = ut_malloc((size_t)(g.c ? g.c : 1) * 6 * sizeof *buf);
    if (!buf) {
        for (int i = 0; i < 3; i++) tpu_tensor_free(ts[i]);
        return ut_nomem(S->ctx);
    }
    double *mean = buf, *sg = buf + g.c, *go = buf + 2 * g.c, *ve = buf + 3 * g.c, *r = buf + 4 * g.c, *st_ = buf + 5 * g.c;
    double N = bn_r(&g, (double)g.n);
    for (int64_t f = 0; f < g.c; f++) {
        mean[f] = bn_ld(meant, f);
        ve[f] = bn_r(&g, bn_ld(vart, f) + g.eps);
        r[f] = bn_rsqrt(&g, ve[f]);
        st_[f] = bn_r(&g, bn_r(&g, bn_ld(scale, f) * r[f]) / N);
    }
    const tpu_tensor *tx[2] = {x, gy};
    bn_sums(&g, tx, mean, bn_term_gxm, sg, fast);
    bn_sums(&g, tx, NULL, bn_term_g, go, fast);
    for (int64_t f = 0; f < g.c; f++) {
        exe_store_float(S, ts[1]->dtype, ts[1]->data, f, bn_r(&g, sg[f] * r[f]));
        exe_store_float(S, ts[2]->dtype, ts[2]->data, f, go[f]);
    }
    for (int64_t o = 0; o < g.outer; o++)
        for (int64_t f = 0; f < g.c; f++)
            for (int64_t i = 0; i < g.inner; i++) {
                int64_t e = (o * g.c + f) * g.inner + i;
                double xm = bn_r(&g, bn_ld(x, e) - mean[f]);
                double i5 = bn_r(&g, bn_r(&g, sg[f] * xm) / ve[f]);
                double i6 = bn_r(&g, bn_fma(&g, bn_ld(gy, e), N, -go[f]) - i5);
                exe_store_float(S, ts[0]->dtype, ts[0]->data, e, bn_r(&g, st_[f] * i6));
            }
    ut_free(buf);
    return bn_tuple(S, ts, 3, out);
}

EXE_KERNEL(exe_k_batch_norm_grad)
{
    if (EXE_FORCE_REF(S)) return exe_k_batch_norm_grad_ref(S, in, ops, out);
    return bn_grad(S, in, ops, out, 1);
}

EXE_KERNEL(exe_k_batch_norm_grad_ref) { return bn_grad(S, in, ops, out, 0); }
