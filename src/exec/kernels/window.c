/* window.c — reduce-window (variadic) and select-and-scatter.
 *
 * reduce-window(inputs[N] of dims D, inits[N]) -> N arrays: per dimension the input is dilated by lhs_dilate
 * (holes between elements), padded by pad_lo/pad_hi, and a window of `size` taps spaced rhs_dilate apart
 * slides with `stride`; out = floor((padded - extent) / stride) + 1 where extent = (size-1)*rhs_dilate + 1.
 * Each output starts from the init values and folds in the window's taps in row-major window order,
 * acc = f(acc_0..N-1, x_0..N-1). Taps on padding or dilation holes are skipped (XLA:CPU's loop does the same:
 * padding behaves as the init value only when init is the reducer's identity).
 *
 * One exception, copied from XLA:CPU so results stay bit-identical: a reduce-window that is a scan (one
 * non-trivial window dim of the full length L > 16, stride 1, padded L-1 or L on one side: cumsum, cumprod,
 * cummax and their reverse/exclusive forms) is computed the way XLA's ReduceWindowRewriter (run to a fixed
 * point with base length 16) rewrites it: pad to a multiple of 16 with init, scan each tile of 16, scan the
 * tile totals exclusively (recursively when there are more than 16 tiles), then combine f(tile scan, carry).
 * This changes float rounding, and folds init in more than once (a no-op for identity inits).
 *
 * select-and-scatter(operand, source, init) -> operand-shaped: the output starts as init; for each source
 * element (row-major) the window over the operand (no dilation; taps on padding skipped) picks one element:
 * the first in-bounds tap is selected, and each later tap replaces it when select(selected, tap) is false
 * (so with GE the first maximum wins). source is then combined into that position with `scatter`. A window
 * with no in-bounds tap scatters nothing.
 */
#include "exec/exec.h"
#include "exec/exe_ops.h"
#include "exec/kernels/ref.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>
#include "exec/exe_par.h"

/* OpenMP threads for this run (tpu_run_opts.threads; 0 means all cores) */

#define WN_MAX 32   /* operands of a variadic reduce-window */

typedef struct wn_geom {
    int     rank;
    int64_t in[TPU_MAX_RANK], out[TPU_MAX_RANK];
    int64_t size[TPU_MAX_RANK], stride[TPU_MAX_RANK], lo[TPU_MAX_RANK], hi[TPU_MAX_RANK], ld[TPU_MAX_RANK], rd[TPU_MAX_RANK];
    int64_t taps;   /* window elements */
} wn_geom;

static tpu_status wn_geometry(exe_state *S, const hlo_instr *in, const tpu_tensor *x, int allow_dilation, wn_geom *w)
{
    memset(w, 0, sizeof *w);
    w->rank = x->rank;
    const hlo_attr *a = hlo_attr_find(in, HK_WINDOW);
    if (!a && x->rank > 0) return exe_fail(S, in, TPU_ERR_SHAPE, "window={...} is missing");
    const hlo_window *win = a ? a->v.window : NULL;
    if (win && win->rank != x->rank)
        return exe_fail(S, in, TPU_ERR_SHAPE, "window has %d dimensions for an operand of rank %d", win->rank, x->rank);
    w->taps = 1;
    for (int d = 0; d < x->rank; d++) {
        const hlo_window_dim *wd = &win->d[d];
        if (wd->size < 1 || wd->stride < 1 || wd->lhs_dilate < 1 || wd->rhs_dilate < 1)
            return exe_fail(S, in, TPU_ERR_SHAPE, "window dim %d: size, stride and dilations must be >= 1", d);
        if (wd->reversal) return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "window reversal is not supported here");
        if (!allow_dilation && (wd->lhs_dilate != 1 || wd->rhs_dilate != 1))
            return exe_fail(S, in, TPU_ERR_SHAPE, "select-and-scatter windows cannot be dilated (dim %d)", d);
        w->in[d] = x->dims[d];
        w->size[d] = wd->size;
        w->stride[d] = wd->stride;
        w->lo[d] = wd->pad_lo;
        w->hi[d] = wd->pad_hi;
        w->ld[d] = wd->lhs_dilate;
        w->rd[d] = wd->rhs_dilate;
        int64_t dil = x->dims[d] ? (x->dims[d] - 1) * wd->lhs_dilate + 1 : 0;
        int64_t padded = dil + wd->pad_lo + wd->pad_hi;
        int64_t ext = (wd->size - 1) * wd->rhs_dilate + 1;
        w->out[d] = padded < ext ? 0 : (padded - ext) / wd->stride + 1;
        w->taps *= wd->size;
    }
    return TPU_OK;
}

/* For each dim (but the last when skip_last: rwl_rows computes it), a table [out][size] of input coordinates
 * (-1: padding or a dilation hole). */
static int64_t *wn_tables2(const wn_geom *w, int64_t **tab, int skip_last)
{
    int64_t total = 0;
    int rank = w->rank - (skip_last ? 1 : 0);
    for (int d = 0; d < rank; d++) total += w->out[d] * w->size[d];
    int64_t *buf = ut_malloc((size_t)(total ? total : 1) * sizeof *buf);
    if (!buf) return NULL;
    int64_t *p = buf;
    for (int d = 0; d < rank; d++) {
        tab[d] = p;
        for (int64_t o = 0; o < w->out[d]; o++)
            for (int64_t k = 0; k < w->size[d]; k++) {
                int64_t pos = o * w->stride[d] + k * w->rd[d] - w->lo[d];
                int64_t c = -1;
                if (pos >= 0 && pos % w->ld[d] == 0 && pos / w->ld[d] < w->in[d]) c = pos / w->ld[d];
                *p++ = c;
            }
    }
    return buf;
}

static int64_t *wn_tables(const wn_geom *w, int64_t **tab) { return wn_tables2(w, tab, 0); }

static int wn_next(int64_t *pos, const int64_t *dims, int n)
{
    for (int i = n - 1; i >= 0; i--) {
        if (++pos[i] < dims[i]) return 1;
        pos[i] = 0;
    }
    return 0;
}

/* pos[0..n) = the output position of row-major index idx over w->out[0..n) */
static inline void wn_unravel(const wn_geom *w, int n, int64_t idx, int64_t *pos)
{
    for (int d = n - 1; d >= 0; d--) {
        pos[d] = idx % w->out[d];
        idx /= w->out[d];
    }
}

/* The input offset of tap k of output opos over dims [0, n) (tab: per dim, the input index of each
 * output x tap, -1 in padding); 0 when the tap falls in padding. */
static inline int wn_tap_base(int64_t *const *tab, const int64_t *istr, const wn_geom *w, int n, const int64_t *opos,
                              const int64_t *k, int64_t *base)
{
    int64_t b = 0;
    int ok = 1;
    for (int d = 0; d < n; d++) {
        int64_t c = tab[d][opos[d] * w->size[d] + k[d]];
        if (c < 0) ok = 0;
        b += c * istr[d];
    }
    *base = b;
    return ok;
}

static inline float wn_maxf(float x, float y)
{
    if (isnan(x) || isnan(y)) return NAN;
    return (x > y || (x == y && !signbit(x))) ? x : y;
}

static inline float wn_minf(float x, float y)
{
    if (isnan(x) || isnan(y)) return NAN;
    return (x < y || (x == y && signbit(x))) ? x : y;
}

/* The last dimension passes through the window untouched (size 1, stride 1, no padding or dilation): each
 * output row of F elements then folds whole input rows, F lanes at a time (NHWC pooling). */
static int wn_last_is_lane(const wn_geom *w)
{
    int d = w->rank - 1;
    return d >= 0 && w->size[d] == 1 && w->stride[d] == 1 && w->lo[d] == 0 && w->hi[d] == 0 && w->ld[d] == 1 &&
           w->rd[d] == 1 && w->out[d] == w->in[d] && w->in[d] >= 8;
}

/* acc[j] = op(acc[j], x[j]), j < F, with wn_maxf/wn_minf's semantics written out branch-free here: calling
 * them (even inlined) leaves branches GCC does not vectorise (measured: 2x2 max pool 0.6 -> 10 ms) */
EXE_VEC
static void wn_fold_row(hlo_op op, float *acc, const float *x, int64_t F)
{
    switch (op) {
    case HLO_ADD:
        for (int64_t j = 0; j < F; j++) acc[j] += x[j];
        break;
    case HLO_MAXIMUM:
        for (int64_t j = 0; j < F; j++) {
            float a = acc[j], v = x[j];
            acc[j] = a != a || v != v ? NAN : (a > v || (a == v && !signbit(a))) ? a : v;
        }
        break;
    default:
        for (int64_t j = 0; j < F; j++) {
            float a = acc[j], v = x[j];
            acc[j] = a != a || v != v ? NAN : (a < v || (a == v && signbit(a))) ? a : v;
        }
        break;
    }
}

/* ---- reduce-window ---- */

typedef struct rw_plan {
    int                  n;
    const tpu_tensor    *x[WN_MAX];
    exe_scalar           init[WN_MAX];
    tpu_tensor          *res[WN_MAX];
    const exe_scalar_fn *fn;
    hlo_op               binop;
    wn_geom              w;
} rw_plan;

static void rw_free(rw_plan *p)
{
    for (int i = 0; i < p->n; i++) tpu_tensor_free(p->res[i]);
}

static tpu_status rw_setup(exe_state *S, const hlo_instr *in, exe_value *const *ops, rw_plan *p)
{
    memset(p, 0, sizeof *p);
    if (in->nops < 2 || in->nops % 2)
        return exe_fail(S, in, TPU_ERR_SHAPE, "needs N inputs and N init values, got %d operands", in->nops);
    int n = in->nops / 2;
    if (n > WN_MAX) return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "more than %d reduced operands", WN_MAX);
    p->n = n;
    for (int i = 0; i < n; i++) {
        p->x[i] = ops[i]->t;
        const tpu_tensor *iv = ops[n + i]->t;
        if (!p->x[i] || !iv || iv->count != 1)
            return exe_fail(S, in, TPU_ERR_SHAPE, "operand %d must be an array and init %d a scalar", i, i);
        if (iv->dtype != p->x[i]->dtype)
            return exe_fail(S, in, TPU_ERR_SHAPE, "init %d is %s but input %d is %s", i, tpu_dtype_name(iv->dtype), i,
                            tpu_dtype_name(p->x[i]->dtype));
        char k = tpu_dtype_kind(iv->dtype);
        if (k == 'o')
            return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "reducing %s elements is not supported", tpu_dtype_name(iv->dtype));
        if (p->x[i]->rank != p->x[0]->rank ||
            memcmp(p->x[i]->dims, p->x[0]->dims, sizeof(int64_t) * (size_t)p->x[0]->rank))
            return exe_fail(S, in, TPU_ERR_SHAPE, "all inputs must have the same dimensions");
        p->init[i] = exe_scalar_load(iv->dtype, iv->data, 0);
    }
    tpu_status st = wn_geometry(S, in, p->x[0], 1, &p->w);
    if (st) return st;
    if (in->ncalled != 1) return exe_fail(S, in, TPU_ERR_SHAPE, "needs to_apply=");
    if ((st = exe_scalar_fn_get(S, in->called[0], &p->fn))) return st;
    if (exe_scalar_fn_nparams(p->fn) != 2 * n || exe_scalar_fn_nresults(p->fn) != n)
        return exe_fail(S, in, TPU_ERR_SHAPE, "to_apply takes %d parameters and returns %d values; %d inputs need %d and %d",
                        exe_scalar_fn_nparams(p->fn), exe_scalar_fn_nresults(p->fn), n, 2 * n, n);
    p->binop = n == 1 ? exe_scalar_fn_binop(p->fn) : HLO_OP_COUNT;
    /* results, checked against the instruction's shape */
    for (int i = 0; i < n; i++) {
        const hlo_shape *s = n == 1 ? &in->shape : (hlo_shape_is_tuple(&in->shape) && in->shape.ntuple == n ? &in->shape.tuple[i] : NULL);
        int ok = s && hlo_shape_is_array(s) && s->dtype == p->x[i]->dtype && s->rank == p->w.rank;
        for (int d = 0; ok && d < p->w.rank; d++) ok = s->dims[d] == p->w.out[d];
        if (!ok) {
            char b[96], want[160];
            int len = snprintf(want, sizeof want, "%s[", tpu_dtype_name(p->x[i]->dtype));
            for (int d = 0; d < p->w.rank && len < (int)sizeof want - 24; d++)
                len += snprintf(want + len, sizeof want - (size_t)len, "%s%lld", d ? "," : "", (long long)p->w.out[d]);
            snprintf(want + len, sizeof want - (size_t)len, "]");
            rw_free(p);
            return exe_fail(S, in, TPU_ERR_SHAPE, "result shape %s does not match the window: result %d should be %s",
                            hlo_shape_str(&in->shape, b, sizeof b), i, want);
        }
        if ((st = exe_alloc_shape(S, s, &p->res[i]))) {
            rw_free(p);
            return st;
        }
    }
    return TPU_OK;
}

static tpu_status rw_result(exe_state *S, rw_plan *p, exe_value **out)
{
    exe_value *v[WN_MAX];
    int ok = 1;
    for (int i = 0; i < p->n; i++) {
        v[i] = exe_value_array(p->res[i]);
        p->res[i] = NULL;
        if (!v[i]) ok = 0;
    }
    if (!ok) {
        for (int i = 0; i < p->n; i++) exe_value_unref(v[i]);
        return ut_nomem(S->ctx);
    }
    *out = p->n == 1 ? v[0] : exe_value_tuple(v, p->n);
    return *out ? TPU_OK : ut_nomem(S->ctx);
}

/* ---- scans: XLA's two-level tree (see the header comment) ---- */

#define RW_SCAN_BASE 16   /* XLA's default xla_reduce_window_rewrite_base_length */

/* acc <- f(acc, x) for all n components. */
static void rw_fold(const exe_state *S, const rw_plan *p, exe_scalar *acc, const exe_scalar *x)
{
    if (p->binop != HLO_OP_COUNT) {
        acc[0] = exe_scalar_binop(S, p->binop, p->x[0]->dtype, acc[0], x[0]);
        return;
    }
    exe_scalar args[2 * WN_MAX];
    for (int i = 0; i < p->n; i++) {
        args[i] = acc[i];
        args[p->n + i] = x[i];
    }
    exe_scalar_fn_eval(p->fn, args, acc);
}

/* Is the reduce-window a scan XLA rewrites? Sets the dim, direction and exclusiveness. */
static int rw_is_scan(const rw_plan *p, int *dim, int *fwd, int *excl)
{
    const wn_geom *w = &p->w;
    int nt = 0;
    for (int d = 0; d < w->rank; d++)
        if (w->size[d] != 1 || w->stride[d] != 1 || w->lo[d] || w->hi[d] || w->ld[d] != 1 || w->rd[d] != 1) {
            nt++;
            *dim = d;
        }
    if (nt != 1) return 0;
    int d = *dim;
    int64_t L = w->in[d];
    if (L <= RW_SCAN_BASE || w->stride[d] != 1 || w->size[d] != L || w->ld[d] != 1 || w->rd[d] != 1) return 0;
    int f = (w->lo[d] == L - 1 || w->lo[d] == L) && w->hi[d] == 0;
    int r = (w->hi[d] == L - 1 || w->hi[d] == L) && w->lo[d] == 0;
    if (!f && !r) return 0;
    *fwd = f;
    *excl = f ? w->lo[d] == L : w->hi[d] == L;
    return 1;
}

/* out[n][L + excl] (component stride os) <- the scan of x[n][L] (component stride xs), as XLA computes it.
 * Returns 0, or -1 when out of memory. */
static int rw_scan(const exe_state *S, const rw_plan *p, const exe_scalar *x, int64_t xs, int64_t L, int fwd, int excl,
                   exe_scalar *out, int64_t os)
{
    int n = p->n;
    exe_scalar acc[WN_MAX], v[WN_MAX];
    if (L <= RW_SCAN_BASE) {
        /* the plain reduce-window: window L, padding L-1+excl on one side */
        int64_t plo = fwd ? L - 1 + excl : 0;
        for (int64_t k = 0; k < L + excl; k++) {
            for (int i = 0; i < n; i++) acc[i] = p->init[i];
            for (int64_t t = k - plo; t < k - plo + L; t++) {
                if (t < 0 || t >= L) continue;
                for (int i = 0; i < n; i++) v[i] = x[i * xs + t];
                rw_fold(S, p, acc, v);
            }
            for (int i = 0; i < n; i++) out[i * os + k] = acc[i];
        }
        return 0;
    }
    const int64_t B = RW_SCAN_BASE;
    int64_t P = (L + B - 1) / B * B, C = P / B;
    /* tile scans (inner), tile totals (col), their exclusive scan (carry, C + 1) */
    exe_scalar *inner = ut_malloc((size_t)n * (size_t)P * sizeof *inner);
    exe_scalar *col = ut_malloc((size_t)n * (size_t)C * sizeof *col);
    exe_scalar *carry = ut_malloc((size_t)n * (size_t)(C + 1) * sizeof *carry);
    int rc = -1;
    if (!inner || !col || !carry) goto done;
    for (int64_t c = 0; c < C; c++) {
        for (int64_t j = 0; j < B; j++) {
            for (int i = 0; i < n; i++) acc[i] = p->init[i];
            int64_t a = fwd ? 0 : j, b = fwd ? j : B - 1;
            for (int64_t t = a; t <= b; t++) {
                int64_t pos = c * B + t;
                for (int i = 0; i < n; i++) v[i] = pos < L ? x[i * xs + pos] : p->init[i];   /* padded with init */
                rw_fold(S, p, acc, v);
            }
            for (int i = 0; i < n; i++) inner[i * P + c * B + j] = acc[i];
        }
        for (int i = 0; i < n; i++) col[i * C + c] = inner[i * P + c * B + (fwd ? B - 1 : 0)];
    }
    if (rw_scan(S, p, col, C, C, fwd, 1, carry, C + 1)) goto done;
    for (int64_t k = 0; k < L; k++) {
        int64_t c = k / B, e = fwd ? c : c + 1;
        exe_scalar args[2 * WN_MAX], r[WN_MAX];
        for (int i = 0; i < n; i++) {
            args[i] = inner[i * P + k];
            args[n + i] = carry[i * (C + 1) + e];
        }
        if (p->binop != HLO_OP_COUNT) r[0] = exe_scalar_binop(S, p->binop, p->x[0]->dtype, args[0], args[1]);
        else exe_scalar_fn_eval(p->fn, args, r);
        for (int i = 0; i < n; i++) out[i * os + k + (excl && fwd)] = r[i];
    }
    if (excl)
        for (int i = 0; i < n; i++) out[i * os + (fwd ? 0 : L)] = p->init[i];
    rc = 0;
done:
    ut_free(inner);
    ut_free(col);
    ut_free(carry);
    return rc;
}

/* Runs a scan-shaped reduce-window row by row along dim d. */
static tpu_status rw_run_scan(exe_state *S, rw_plan *p, int d, int fwd, int excl)
{
    const wn_geom *w = &p->w;
    int n = p->n;
    int64_t L = w->in[d], Lo = L + excl, outer = 1, inner = 1;
    for (int k = 0; k < d; k++) outer *= w->in[k];
    for (int k = d + 1; k < w->rank; k++) inner *= w->in[k];
    exe_scalar *xb = ut_malloc((size_t)n * (size_t)L * sizeof *xb), *ob = ut_malloc((size_t)n * (size_t)Lo * sizeof *ob);
    tpu_status st = TPU_OK;
    if (!xb || !ob) st = ut_nomem(S->ctx);
    for (int64_t o = 0; !st && o < outer; o++)
        for (int64_t q = 0; !st && q < inner; q++) {
            for (int i = 0; i < n; i++)
                for (int64_t j = 0; j < L; j++) xb[i * L + j] = exe_scalar_load(p->x[i]->dtype, p->x[i]->data, (o * L + j) * inner + q);
            if (rw_scan(S, p, xb, L, L, fwd, excl, ob, Lo)) {
                st = ut_nomem(S->ctx);
                break;
            }
            for (int i = 0; i < n; i++)
                for (int64_t j = 0; j < Lo; j++) exe_scalar_store(S, p->res[i]->dtype, p->res[i]->data, (o * Lo + j) * inner + q, ob[i * Lo + j]);
        }
    ut_free(xb);
    ut_free(ob);
    return st;
}

/* ---- f32 scans with add, multiply, max or min: the same tree on f32 values (the reference computes each
 * step in double and rounds it to f32, which for these ops is the f32 operation), Q independent lanes at a
 * time ([t][q] layout), rows in parallel ---- */

typedef struct rws_f32 {
    hlo_op op;
    float  init;
    int64_t Q;
} rws_f32;

EXE_VEC
static void rws_op(hlo_op op, float *acc, const float *x, int64_t Q)
{
    switch (op) {
    case HLO_ADD: for (int64_t q = 0; q < Q; q++) acc[q] = acc[q] + x[q]; break;
    case HLO_MULTIPLY: for (int64_t q = 0; q < Q; q++) acc[q] = acc[q] * x[q]; break;
    /* wn_maxf and wn_minf written out, so that they vectorise in every clone */
    case HLO_MAXIMUM:
        for (int64_t q = 0; q < Q; q++) {
            float a = acc[q], b = x[q];
            acc[q] = a != a || b != b ? NAN : a > b || (a == b && !__builtin_signbit(a)) ? a : b;
        }
        break;
    default:
        for (int64_t q = 0; q < Q; q++) {
            float a = acc[q], b = x[q];
            acc[q] = a != a || b != b ? NAN : a < b || (a == b && __builtin_signbit(a)) ? a : b;
        }
        break;
    }
}

static void rws_fill(float *a, float v, int64_t Q)
{
    for (int64_t q = 0; q < Q; q++) a[q] = v;
}

/* out[(L + excl) x Q] <- the scan of x[L x Q], as rw_scan computes it; tmp: scratch of rws_tmp_size(L) rows */
static void rws_scan(const rws_f32 *c, const float *x, int64_t L, int fwd, int excl, float *out, float *tmp)
{
    int64_t Q = c->Q;
    if (L <= RW_SCAN_BASE) {
        int64_t plo = fwd ? L - 1 + excl : 0;
        for (int64_t k = 0; k < L + excl; k++) {
            float *acc = out + k * Q;
            rws_fill(acc, c->init, Q);
            for (int64_t t = k - plo; t < k - plo + L; t++)
                if (t >= 0 && t < L) rws_op(c->op, acc, x + t * Q, Q);
        }
        return;
    }
    const int64_t B = RW_SCAN_BASE;
    int64_t P = (L + B - 1) / B * B, C = P / B;
    float *inner = tmp, *col = inner + P * Q, *carry = col + C * Q, *pad = carry + (C + 1) * Q, *rest = pad + Q;
    rws_fill(pad, c->init, Q);
    for (int64_t cc = 0; cc < C; cc++) {
        for (int64_t j = 0; j < B; j++) {
            float *acc = inner + (cc * B + j) * Q;
            int64_t a = fwd ? 0 : j, b = fwd ? j : B - 1;
            if (fwd && j > 0) {   /* the prefix fold of j taps is the fold of j-1 taps and one more */
                memcpy(acc, acc - Q, (size_t)Q * sizeof *acc);
                a = j;
            } else {
                rws_fill(acc, c->init, Q);
            }
            for (int64_t t = a; t <= b; t++) rws_op(c->op, acc, cc * B + t < L ? x + (cc * B + t) * Q : pad, Q);
        }
        memcpy(col + cc * Q, inner + (cc * B + (fwd ? B - 1 : 0)) * Q, (size_t)Q * sizeof *col);
    }
    rws_scan(c, col, C, fwd, 1, carry, rest);
    for (int64_t k = 0; k < L; k++) {
        int64_t e = fwd ? k / B : k / B + 1;
        float *o = out + (k + (excl && fwd)) * Q;
        memcpy(o, inner + k * Q, (size_t)Q * sizeof *o);
        rws_op(c->op, o, carry + e * Q, Q);
    }
    if (excl) rws_fill(out + (fwd ? 0 : L) * Q, c->init, Q);
}

/* rows of scratch rws_scan needs for length L (inner, col, carry, pad, then the recursion's) */
static int64_t rws_tmp_rows(int64_t L)
{
    if (L <= RW_SCAN_BASE) return 0;
    int64_t P = (L + RW_SCAN_BASE - 1) / RW_SCAN_BASE * RW_SCAN_BASE, C = P / RW_SCAN_BASE;
    return P + C + (C + 1) + 1 + rws_tmp_rows(C);
}

typedef struct rws_job {
    rws_f32      c;
    const float *x;
    float       *y;
    int64_t      L, Lo, inner, nq;   /* blocks of Q lanes along the inner dims */
    int64_t      outer;              /* rows: lanes across rows when inner == 1 (a scan along the minor dim) */
    int          fwd, excl, by_rows;
    _Atomic int  failed;
} rws_job;

static void rws_chunk(void *ctx, int64_t b0, int64_t b1, int tid)
{
    rws_job *J = ctx;
    int64_t Qmax = J->c.Q, L = J->L, Lo = J->Lo;
    float *buf = ut_malloc((size_t)(L + Lo + rws_tmp_rows(L)) * (size_t)Qmax * sizeof(float));
    if (!buf) {
        atomic_store(&J->failed, 1);
        return;
    }
    for (int64_t b = b0; b < b1; b++) {
        if (J->by_rows) {   /* Q rows at a time, transposed into [t][q]: the same tree per lane */
            int64_t o0 = b * Qmax;
            rws_f32 c = J->c;
            c.Q = UT_MIN(Qmax, J->outer - o0);
            float *xb = buf, *ob = xb + L * c.Q, *tmp = ob + Lo * c.Q;
            for (int64_t q = 0; q < c.Q; q++)
                for (int64_t t = 0; t < L; t++) xb[t * c.Q + q] = J->x[(o0 + q) * L + t];
            rws_scan(&c, xb, L, J->fwd, J->excl, ob, tmp);
            for (int64_t q = 0; q < c.Q; q++)
                for (int64_t k = 0; k < Lo; k++) J->y[(o0 + q) * Lo + k] = ob[k * c.Q + q];
            continue;
        }
        int64_t o = b / J->nq, q0 = b % J->nq * Qmax;
        rws_f32 c = J->c;
        c.Q = UT_MIN(Qmax, J->inner - q0);
        float *xb = buf, *ob = xb + L * c.Q, *tmp = ob + Lo * c.Q;
        for (int64_t t = 0; t < L; t++) memcpy(xb + t * c.Q, J->x + (o * L + t) * J->inner + q0, (size_t)c.Q * sizeof(float));
        rws_scan(&c, xb, L, J->fwd, J->excl, ob, tmp);
        for (int64_t k = 0; k < Lo; k++) memcpy(J->y + (o * Lo + k) * J->inner + q0, ob + k * c.Q, (size_t)c.Q * sizeof(float));
    }
    ut_free(buf);
    (void)tid;
}

/* The f32 form of rw_run_scan; returns 0 when it does not apply. */
static int rw_run_scan_f32(exe_state *S, rw_plan *p, int d, int fwd, int excl, tpu_status *st)
{
    const wn_geom *w = &p->w;
    if (p->n != 1 || p->x[0]->dtype != TPU_F32 ||
        !(p->binop == HLO_ADD || p->binop == HLO_MULTIPLY || p->binop == HLO_MAXIMUM || p->binop == HLO_MINIMUM))
        return 0;
    rws_job J;
    memset(&J, 0, sizeof J);
    J.c.op = p->binop;
    J.c.init = (float)p->init[0].f;
    J.x = p->x[0]->data;
    J.y = p->res[0]->data;
    J.L = w->in[d];
    J.Lo = J.L + excl;
    J.fwd = fwd;
    J.excl = excl;
    int64_t outer = 1;
    J.inner = 1;
    for (int k = 0; k < d; k++) outer *= w->in[k];
    for (int k = d + 1; k < w->rank; k++) J.inner *= w->in[k];
    J.outer = outer;
    J.by_rows = J.inner == 1 && outer > 1;
    J.c.Q = UT_MIN(J.by_rows ? outer : J.inner, (int64_t)(J.by_rows ? 16 : 64));
    J.nq = ((J.by_rows ? outer : J.inner) + J.c.Q - 1) / J.c.Q;
    exe_par_for(outer * J.inner * J.L > 65536 ? S->threads : 1, J.by_rows ? J.nq : outer * J.nq, 1, rws_chunk, &J);
    if (atomic_load(&J.failed)) *st = ut_nomem(S->ctx);
    return 1;
}

typedef struct rwl_job {
    exe_state     *S;
    const rw_plan *p;
    const wn_geom *w;
    int            R, n;
    int64_t      **tab;
    const int64_t *istr;
    int            fast;
} rwl_job;

static void rwl_chunk(void *ctx, int64_t o0, int64_t o1, int tid)
{
    const rwl_job *J = ctx;
    exe_state *S = J->S;
    const rw_plan *P = J->p;
    const wn_geom *w = J->w;
    int R = J->R, n = J->n, fast = J->fast;
    int64_t *const *tab = J->tab;
    const int64_t *istr = J->istr;
    (void)tid;
    for (int64_t o = o0; o < o1; o++) {
        int64_t opos[TPU_MAX_RANK];
        wn_unravel(w, R, o, opos);
        const int64_t *row[TPU_MAX_RANK];
        for (int d = 0; d < R; d++) row[d] = tab[d] + opos[d] * w->size[d];
        int64_t k[TPU_MAX_RANK] = {0};
        if (fast) {
            const float *x = (const float *)P->x[0]->data;
            float acc = (float)P->init[0].f;
            int64_t inner = R ? w->size[R - 1] : 1;
            for (int64_t t = 0; t < w->taps; t += inner) {
                int64_t base = 0;
                int ok = 1;
                for (int d = 0; d < R - 1; d++) {
                    int64_t c = row[d][k[d]];
                    if (c < 0) ok = 0;
                    base += c * istr[d];
                }
                if (ok && R == 0) acc = P->binop == HLO_ADD ? acc + x[0] : P->binop == HLO_MAXIMUM ? wn_maxf(acc, x[0]) : wn_minf(acc, x[0]);
                else if (ok) {
                    const int64_t *r = row[R - 1];
                    switch (P->binop) {
                    case HLO_ADD:
                        for (int64_t j = 0; j < inner; j++)
                            if (r[j] >= 0) acc += x[base + r[j]];
                        break;
                    case HLO_MAXIMUM:
                        for (int64_t j = 0; j < inner; j++)
                            if (r[j] >= 0) acc = wn_maxf(acc, x[base + r[j]]);
                        break;
                    default:
                        for (int64_t j = 0; j < inner; j++)
                            if (r[j] >= 0) acc = wn_minf(acc, x[base + r[j]]);
                        break;
                    }
                }
                wn_next(k, w->size, R - 1);
            }
            ((float *)P->res[0]->data)[o] = acc;
            continue;
        }
        exe_scalar acc[WN_MAX], args[2 * WN_MAX];
        for (int i = 0; i < n; i++) acc[i] = P->init[i];
        for (int64_t t = 0; t < w->taps; t++) {
            int64_t off = 0;
            int ok = 1;
            for (int d = 0; d < R; d++) {
                int64_t c = row[d][k[d]];
                if (c < 0) ok = 0;
                off += c * istr[d];
            }
            if (ok) {
                if (P->binop != HLO_OP_COUNT) {
                    acc[0] = exe_scalar_binop(S, P->binop, P->x[0]->dtype, acc[0], exe_scalar_load(P->x[0]->dtype, P->x[0]->data, off));
                } else {
                    for (int i = 0; i < n; i++) {
                        args[i] = acc[i];
                        args[n + i] = exe_scalar_load(P->x[i]->dtype, P->x[i]->data, off);
                    }
                    exe_scalar_fn_eval(P->fn, args, acc);
                }
            }
            wn_next(k, w->size, R);
        }
        for (int i = 0; i < n; i++) exe_scalar_store(S, P->res[i]->dtype, P->res[i]->data, o, acc[i]);
    }
}

/* The outputs [*oa, *ob] (of F) that tap offset off reads inside the input: 0 <= o*st + off < in */
static inline void wn_out_range(int64_t off, int64_t st, int64_t in, int64_t F, int64_t *oa, int64_t *ob)
{
    *oa = off >= 0 ? 0 : (-off + st - 1) / st;
    *ob = in - 1 - off < 0 ? -1 : (in - 1 - off) / st;
    if (*ob >= F) *ob = F - 1;
}

/* Output rows [r0, r1) (all dims but the last) of an f32 add/max/min window whose last dim has no lhs
 * dilation: every output of the row folds the same taps in the same order as rwl_chunk (outer taps in
 * row-major order, then the last dim's), but a tap is applied to the whole row at once (the outputs that see
 * it form one interval), so the loop runs along the row and vectorises. */
EXE_VEC
static void rwl_rows(void *ctx, int64_t r0, int64_t r1, int tid)
{
    const rwl_job *J = ctx;
    const rw_plan *P = J->p;
    const wn_geom *w = J->w;
    int R = J->R, L = R - 1;
    const float *x = (const float *)P->x[0]->data;
    float *y = (float *)P->res[0]->data;
    int64_t F = w->out[L], st = w->stride[L], rd = w->rd[L], lo = w->lo[L], in = w->in[L];
    (void)tid;
    for (int64_t row = r0; row < r1; row++) {
        float *acc = y + row * F;
        for (int64_t o = 0; o < F; o++) acc[o] = (float)P->init[0].f;
        int64_t opos[TPU_MAX_RANK];
        wn_unravel(w, L, row, opos);
        int64_t k[TPU_MAX_RANK] = {0}, outer_taps = w->taps / w->size[L];
        for (int64_t t = 0; t < outer_taps; t++, wn_next(k, w->size, L)) {
            int64_t base;
            int ok = wn_tap_base(J->tab, J->istr, w, L, opos, k, &base);
            if (!ok) continue;
            for (int64_t kl = 0; kl < w->size[L]; kl++) {
                int64_t off = kl * rd - lo, oa, ob;
                wn_out_range(off, st, in, F, &oa, &ob);
                const float *xs = x + base + off;
                switch (P->binop) {
                case HLO_ADD:
                    for (int64_t o = oa; o <= ob; o++) acc[o] += xs[o * st];
                    break;
                case HLO_MAXIMUM:
                    for (int64_t o = oa; o <= ob; o++) {
                        float a = acc[o], v = xs[o * st];
                        acc[o] = a != a || v != v ? NAN : (a > v || (a == v && !signbit(a))) ? a : v;
                    }
                    break;
                default:
                    for (int64_t o = oa; o <= ob; o++) {
                        float a = acc[o], v = xs[o * st];
                        acc[o] = a != a || v != v ? NAN : (a < v || (a == v && signbit(a))) ? a : v;
                    }
                    break;
                }
            }
        }
    }
}

/* acc[i] = op(acc[i], x[i]) for add / max / min, branch-free (wn_fold_row's semantics) */
#define RWL_FOLD(op, a_, v_)                                                                                   \
    do {                                                                                                       \
        float a = (a_), v = (v_);                                                                              \
        (a_) = (op) == HLO_ADD ? a + v                                                                         \
             : a != a || v != v ? NAN                                                                          \
             : (op) == HLO_MAXIMUM ? ((a > v || (a == v && !signbit(a))) ? a : v)                              \
                                   : ((a < v || (a == v && signbit(a))) ? a : v);                             \
    } while (0)

/* Output rows [r0, r1) of a window whose last dim passes through but is too narrow for the lane form
 * (C < 8 features, NHWC pooling of few channels): a row is every output along the last two dims (W, C), and
 * each tap of the second-to-last dim (W) is applied to the outputs that see it at once, as rwl_rows does
 * along one dim, so a row pays the per-tap cost once instead of once per W position. Each output folds the
 * same taps in the same order as rwl_chunk (row-major over the dims; the last has one tap). */
EXE_VEC
static void rwl_lane_rows(void *ctx, int64_t r0, int64_t r1, int tid)
{
    const rwl_job *J = ctx;
    const rw_plan *P = J->p;
    const wn_geom *w = J->w;
    int L = J->R - 2;
    const float *x = (const float *)P->x[0]->data;
    float *y = (float *)P->res[0]->data, init = (float)P->init[0].f;
    hlo_op op = P->binop;
    int64_t C = w->in[L + 1], F = w->out[L], st = w->stride[L], rd = w->rd[L], lo = w->lo[L], in = w->in[L];
    (void)tid;
    for (int64_t row = r0; row < r1; row++) {
        float *acc = y + row * F * C;
        for (int64_t o = 0; o < F * C; o++) acc[o] = init;
        int64_t opos[TPU_MAX_RANK];
        wn_unravel(w, L, row, opos);
        int64_t k[TPU_MAX_RANK] = {0}, outer_taps = w->taps / w->size[L];
        for (int64_t t = 0; t < outer_taps; t++, wn_next(k, w->size, L)) {
            int64_t base;
            int ok = wn_tap_base(J->tab, J->istr, w, L, opos, k, &base);
            if (!ok) continue;
            for (int64_t kl = 0; kl < w->size[L]; kl++) {
                int64_t off = kl * rd - lo, oa, ob;
                wn_out_range(off, st, in, F, &oa, &ob);
                if (oa > ob) continue;
                const float *xs = x + base + off * C;
                float *ac = acc + oa * C;
                if (st == 1) {   /* one run of (ob - oa + 1) * C values */
                    const float *xr = xs + oa * C;
                    int64_t n = (ob - oa + 1) * C;
                    if (op == HLO_ADD)
                        for (int64_t i = 0; i < n; i++) RWL_FOLD(HLO_ADD, ac[i], xr[i]);
                    else if (op == HLO_MAXIMUM)
                        for (int64_t i = 0; i < n; i++) RWL_FOLD(HLO_MAXIMUM, ac[i], xr[i]);
                    else
                        for (int64_t i = 0; i < n; i++) RWL_FOLD(HLO_MINIMUM, ac[i], xr[i]);
                    continue;
                }
                for (int64_t o = oa; o <= ob; o++, ac += C) {
                    const float *xr = xs + o * st * C;
                    if (op == HLO_ADD)
                        for (int64_t c = 0; c < C; c++) RWL_FOLD(HLO_ADD, ac[c], xr[c]);
                    else if (op == HLO_MAXIMUM)
                        for (int64_t c = 0; c < C; c++) RWL_FOLD(HLO_MAXIMUM, ac[c], xr[c]);
                    else
                        for (int64_t c = 0; c < C; c++) RWL_FOLD(HLO_MINIMUM, ac[c], xr[c]);
                }
            }
        }
    }
}

/* Output rows [r0, r1) of the lane form (wn_last_is_lane): the same taps in the same order as rwl_chunk. */
static void rwl_lanes_chunk(void *ctx, int64_t r0, int64_t r1, int tid)
{
    const rwl_job *J = ctx;
    const rw_plan *P = J->p;
    const wn_geom *w = J->w;
    int R1 = J->R - 1;
    int64_t F = w->out[R1];
    const float *x = (const float *)P->x[0]->data;
    float *res = (float *)P->res[0]->data, init = (float)P->init[0].f;
    (void)tid;
    for (int64_t o = r0; o < r1; o++) {
        int64_t opos[TPU_MAX_RANK], k[TPU_MAX_RANK] = {0};
        wn_unravel(w, R1, o, opos);
        float *acc = res + o * F;
        for (int64_t j = 0; j < F; j++) acc[j] = init;
        for (int64_t t = 0; t < w->taps; t++, wn_next(k, w->size, R1)) {
            int64_t base;
            int ok = wn_tap_base(J->tab, J->istr, w, R1, opos, k, &base);
            if (ok) wn_fold_row(P->binop, acc, x + base, F);
        }
    }
}

EXE_KERNEL(exe_k_reduce_window)
{
    if (EXE_FORCE_REF(S)) return exe_k_reduce_window_ref(S, in, ops, out);
    rw_plan p;
    tpu_status st = rw_setup(S, in, ops, &p);
    if (st) return st;
    int sd, sfwd, sexcl;
    if (rw_is_scan(&p, &sd, &sfwd, &sexcl)) {
        if (!rw_run_scan_f32(S, &p, sd, sfwd, sexcl, &st)) st = rw_run_scan(S, &p, sd, sfwd, sexcl);
        if (st) {
            rw_free(&p);
            return st;
        }
        return rw_result(S, &p, out);
    }
    const wn_geom *w = &p.w;
    int R = w->rank, n = p.n;
    int fast = n == 1 && p.x[0]->dtype == TPU_F32 && (p.binop == HLO_ADD || p.binop == HLO_MAXIMUM || p.binop == HLO_MINIMUM);
    int e = R - 1;   /* last dim passed through but narrower than the lane form takes: rwl_lane_rows */
    int lane_rows = fast && R >= 2 && w->size[e] == 1 && w->stride[e] == 1 && w->lo[e] == 0 && w->hi[e] == 0 &&
                    w->ld[e] == 1 && w->rd[e] == 1 && w->out[e] == w->in[e] && w->in[e] > 0 && !wn_last_is_lane(w) &&
                    w->ld[e - 1] == 1;
    int by_rows = fast && R >= 1 && !wn_last_is_lane(w) && w->ld[R - 1] == 1 && !lane_rows;
    int64_t *tab[TPU_MAX_RANK];
    int64_t *buf = wn_tables2(w, tab, by_rows);
    if (!buf) {
        rw_free(&p);
        return ut_nomem(S->ctx);
    }
    int64_t istr[TPU_MAX_RANK], s = 1, nout = p.res[0]->count;
    for (int d = R - 1; d >= 0; d--) {
        istr[d] = s;
        s *= w->in[d];
    }
    rwl_job J = {S, &p, w, R, n, tab, istr, fast};
    if (lane_rows && w->out[R - 2] > 0) {
        int64_t F = w->out[R - 2] * w->out[R - 1];
        exe_par_for(nout * w->taps > 65536 ? S->threads : 1, nout / F, UT_MAX((int64_t)1, 65536 / UT_MAX(w->taps * F, (int64_t)1)),
                    rwl_lane_rows, &J);
    } else if (by_rows && w->out[R - 1] > 0) {
        int64_t F = w->out[R - 1];
        exe_par_for(nout * w->taps > 65536 ? S->threads : 1, nout / F, UT_MAX((int64_t)1, 65536 / UT_MAX(w->taps * F, (int64_t)1)),
                    rwl_rows, &J);
    } else if (fast && wn_last_is_lane(w)) {
        int64_t F = w->out[R - 1], rows = nout / F;
        exe_par_for(nout * w->taps > 65536 ? S->threads : 1, rows,
                    UT_MAX((int64_t)1, 16384 / UT_MAX(w->taps * F, (int64_t)1)), rwl_lanes_chunk, &J);
    } else {
        exe_par_for(nout * w->taps > 65536 ? S->threads : 1, nout, UT_MAX((int64_t)1, 16384 / UT_MAX(w->taps, (int64_t)1)),
                    rwl_chunk, &J);
    }
    ut_free(buf);
    return rw_result(S, &p, out);
}

/* Reference: the definition, tap by tap, through the generic evaluator. */
EXE_KERNEL(exe_k_reduce_window_ref)
{
    rw_plan p;
    tpu_status st = rw_setup(S, in, ops, &p);
    if (st) return st;
    int sd, sfwd, sexcl;
    p.binop = HLO_OP_COUNT;   /* everything through the evaluator */
    if (rw_is_scan(&p, &sd, &sfwd, &sexcl)) {
        if ((st = rw_run_scan(S, &p, sd, sfwd, sexcl))) {
            rw_free(&p);
            return st;
        }
        return rw_result(S, &p, out);
    }
    const wn_geom *w = &p.w;
    int R = w->rank, n = p.n;
    int64_t opos[TPU_MAX_RANK] = {0};
    for (int64_t o = 0; o < p.res[0]->count; o++) {
        exe_scalar acc[WN_MAX], args[2 * WN_MAX];
        for (int i = 0; i < n; i++) acc[i] = p.init[i];
        int64_t k[TPU_MAX_RANK] = {0};
        for (int64_t t = 0; t < w->taps; t++) {
            int64_t off = 0;
            int ok = 1;
            for (int d = 0; d < R; d++) {
                int64_t pos = opos[d] * w->stride[d] + k[d] * w->rd[d] - w->lo[d];
                if (pos < 0 || pos % w->ld[d] || pos / w->ld[d] >= w->in[d]) ok = 0;
                else off = off * w->in[d] + pos / w->ld[d];
            }
            if (ok) {
                for (int i = 0; i < n; i++) {
                    args[i] = acc[i];
                    args[n + i] = exe_scalar_load(p.x[i]->dtype, p.x[i]->data, off);
                }
                exe_scalar_fn_eval(p.fn, args, acc);
            }
            wn_next(k, w->size, R);
        }
        for (int i = 0; i < n; i++) exe_scalar_store(S, p.res[i]->dtype, p.res[i]->data, o, acc[i]);
        wn_next(opos, w->out, R);
    }
    return rw_result(S, &p, out);
}

/* ---- select-and-scatter ---- */

typedef struct ss_plan {
    const tpu_tensor    *x, *src;
    exe_scalar           init;
    const exe_scalar_fn *sel, *sca;
    hlo_op               sca_op;
    int                  sel_ge;   /* select is compare(p0, p1) GE (1) or GT (2) on floats: fast path */
    wn_geom              w;
} ss_plan;

static const hlo_comp *ss_comp(const hlo_instr *in, hlo_attr_key k)
{
    const hlo_attr *a = hlo_attr_find(in, k);
    return a && (a->kind == HA_COMP || a->kind == HA_COMPS) && a->v.comps.n == 1 ? a->v.comps.v[0] : NULL;
}

static int ss_select_kind(const hlo_comp *c, tpu_dtype t)
{
    const hlo_instr *r = c->root;
    if (t != TPU_F32 || r->op != HLO_COMPARE || r->nops != 2 || r->ops[0]->op != HLO_PARAMETER ||
        r->ops[1]->op != HLO_PARAMETER || r->ops[0]->param_no != 0 || r->ops[1]->param_no != 1)
        return 0;
    const char *dir = hlo_attr_str(r, HK_DIRECTION), *type = hlo_attr_str(r, HK_TYPE);
    if (type && strcmp(type, "FLOAT")) return 0;
    if (dir && !strcmp(dir, "GE")) return 1;
    if (dir && !strcmp(dir, "GT")) return 2;
    return 0;
}

static tpu_status ss_setup(exe_state *S, const hlo_instr *in, exe_value *const *ops, ss_plan *p)
{
    memset(p, 0, sizeof *p);
    if (in->nops != 3) return exe_fail(S, in, TPU_ERR_SHAPE, "needs operand, source and init value, got %d operands", in->nops);
    p->x = ops[0]->t;
    p->src = ops[1]->t;
    const tpu_tensor *iv = ops[2]->t;
    if (!p->x || !p->src || !iv || iv->count != 1)
        return exe_fail(S, in, TPU_ERR_SHAPE, "operand and source must be arrays and init a scalar");
    char k = tpu_dtype_kind(p->x->dtype);
    if (k == 'c' || k == 'o' || tpu_dtype_kind(p->src->dtype) == 'c')
        return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "%s elements are not supported", tpu_dtype_name(p->x->dtype));
    if (iv->dtype != p->src->dtype)
        return exe_fail(S, in, TPU_ERR_SHAPE, "init is %s but source is %s", tpu_dtype_name(iv->dtype), tpu_dtype_name(p->src->dtype));
    if (!hlo_shape_is_array(&in->shape) || in->shape.dtype != p->src->dtype || in->shape.rank != p->x->rank ||
        memcmp(in->shape.dims, p->x->dims, sizeof(int64_t) * (size_t)p->x->rank))
        return exe_fail(S, in, TPU_ERR_SHAPE, "result must have the operand's dimensions and the source's type");
    p->init = exe_scalar_load(iv->dtype, iv->data, 0);
    tpu_status st = wn_geometry(S, in, p->x, 0, &p->w);
    if (st) return st;
    if (p->src->rank != p->x->rank)
        return exe_fail(S, in, TPU_ERR_SHAPE, "source rank %d != operand rank %d", p->src->rank, p->x->rank);
    for (int d = 0; d < p->x->rank; d++)
        if (p->src->dims[d] != p->w.out[d])
            return exe_fail(S, in, TPU_ERR_SHAPE, "source dim %d is %lld but the window gives %lld", d,
                            (long long)p->src->dims[d], (long long)p->w.out[d]);
    const hlo_comp *cs = ss_comp(in, HK_SELECT), *cc = ss_comp(in, HK_SCATTER);
    if (!cs || !cc) return exe_fail(S, in, TPU_ERR_SHAPE, "needs select= and scatter= computations");
    if ((st = exe_scalar_fn_get(S, cs, &p->sel)) || (st = exe_scalar_fn_get(S, cc, &p->sca))) return st;
    if (exe_scalar_fn_nparams(p->sel) != 2 || exe_scalar_fn_nresults(p->sel) != 1 || exe_scalar_fn_nparams(p->sca) != 2 ||
        exe_scalar_fn_nresults(p->sca) != 1)
        return exe_fail(S, in, TPU_ERR_SHAPE, "select and scatter must take two scalars and return one");
    p->sca_op = exe_scalar_fn_binop(p->sca);
    p->sel_ge = ss_select_kind(cs, p->x->dtype);
    return TPU_OK;
}

static tpu_status ss_init_out(exe_state *S, const hlo_instr *in, const ss_plan *p, tpu_tensor **t)
{
    tpu_status st = exe_alloc(S, in, t);
    if (st) return st;
    for (int64_t i = 0; i < (*t)->count; i++) exe_scalar_store(S, (*t)->dtype, (*t)->data, i, p->init);
    return TPU_OK;
}

static void ss_scatter(const exe_state *S, const ss_plan *p, tpu_tensor *t, int64_t at, int64_t si)
{
    if (p->sca_op == HLO_ADD && t->dtype == TPU_F32) {
        ((float *)t->data)[at] += ((const float *)p->src->data)[si];
        return;
    }
    exe_scalar a[2] = {exe_scalar_load(t->dtype, t->data, at), exe_scalar_load(p->src->dtype, p->src->data, si)}, r;
    if (p->sca_op != HLO_OP_COUNT) r = exe_scalar_binop(S, p->sca_op, t->dtype, a[0], a[1]);
    else exe_scalar_fn_eval(p->sca, a, &r);
    exe_scalar_store(S, t->dtype, t->data, at, r);
}

typedef struct sel_job {
    exe_state     *S;
    const ss_plan *p;
    const wn_geom *w;
    int            R;
    int64_t      **tab;
    const int64_t *istr;
    tpu_dtype      xt;
    int64_t        per;
    tpu_tensor    *t;
    int            lanes;   /* wn_last_is_lane, f32 GE/GT select, f32 add scatter */
} sel_job;

EXE_VEC
static void sel_take(int ge, float *cur, int64_t *selb, const float *x, int64_t base, int64_t F)
{
    for (int64_t j = 0; j < F; j++) {
        float c = cur[j], v = x[j];
        int keep = ge == 1 ? c >= v : c > v;   /* select(cur, v) holds: the current one stays */
        cur[j] = keep ? c : v;
        selb[j] = keep ? selb[j] : base;
    }
}

/* Source rows [r0, r1) of the lane form: per lane the same selection and scatter order as sel_chunk. */
static int sel_lanes(const sel_job *J, int64_t r0, int64_t r1)
{
    const ss_plan *P = J->p;
    const wn_geom *w = J->w;
    int R1 = J->R - 1;
    int64_t F = w->out[R1];
    float *cur = ut_malloc((size_t)F * sizeof *cur);
    int64_t *selb = ut_malloc((size_t)F * sizeof *selb);
    if (!cur || !selb) {
        ut_free(cur);
        ut_free(selb);
        return 0;
    }
    const float *x = (const float *)P->x->data, *src = (const float *)P->src->data;
    float *out = (float *)J->t->data;
    for (int64_t o = r0; o < r1; o++) {
        int64_t opos[TPU_MAX_RANK], k[TPU_MAX_RANK] = {0};
        wn_unravel(w, R1, o, opos);
        int have = 0;
        for (int64_t t = 0; t < w->taps; t++, wn_next(k, w->size, R1)) {
            int64_t base;
            int ok = wn_tap_base(J->tab, J->istr, w, R1, opos, k, &base);
            if (!ok) continue;
            if (!have) {
                memcpy(cur, x + base, (size_t)F * sizeof *cur);
                for (int64_t j = 0; j < F; j++) selb[j] = base;
                have = 1;
            } else {
                sel_take(P->sel_ge, cur, selb, x + base, base, F);
            }
        }
        if (have)
            for (int64_t j = 0; j < F; j++) out[selb[j] + j] += src[o * F + j];
    }
    ut_free(cur);
    ut_free(selb);
    return 1;
}

static void sel_chunk(void *ctx, int64_t b0, int64_t b1, int tid)
{
    const sel_job *J = ctx;
    exe_state *S = J->S;
    const ss_plan *P = J->p;
    const wn_geom *w = J->w;
    int R = J->R;
    int64_t *const *tab = J->tab;
    const int64_t *istr = J->istr;
    tpu_dtype xt = J->xt;
    int64_t per = J->per;
    tpu_tensor *t = J->t;
    (void)tid;
    if (J->lanes) {
        int64_t F = w->out[R - 1];
        if (sel_lanes(J, b0 * per / F, b1 * per / F)) return;
    }
    for (int64_t bb = b0; bb < b1; bb++) {
    int64_t opos[TPU_MAX_RANK], rem = bb * per;
    for (int d = R - 1; d >= 0; d--) {
        opos[d] = rem % w->out[d];
        rem /= w->out[d];
    }
    for (int64_t o = bb * per; o < (bb + 1) * per; o++, wn_next(opos, w->out, R)) {
        int64_t k[TPU_MAX_RANK] = {0}, sel = -1;
        exe_scalar cur = {0, 0, 0};
        float curf = 0;
        for (int64_t tp = 0; tp < w->taps; tp++, wn_next(k, w->size, R)) {
            int64_t off = 0;
            int ok = 1;
            for (int d = 0; d < R; d++) {
                int64_t c = tab[d][opos[d] * w->size[d] + k[d]];
                if (c < 0) ok = 0;
                off += c * istr[d];
            }
            if (!ok) continue;
            if (P->sel_ge) {
                float v = ((const float *)P->x->data)[off];
                /* keep the current one while select(cur, v) holds */
                if (sel >= 0 && (P->sel_ge == 1 ? curf >= v : curf > v)) continue;
                curf = v;
                sel = off;
                continue;
            }
            exe_scalar v = exe_scalar_load(xt, P->x->data, off);
            if (sel >= 0) {
                exe_scalar a[2] = {cur, v}, r;
                exe_scalar_fn_eval(P->sel, a, &r);
                if (r.i) continue;
            }
            cur = v;
            sel = off;
        }
        if (sel >= 0) ss_scatter(S, P, t, sel, o);
    }
    }
}

EXE_KERNEL(exe_k_select_and_scatter)
{
    if (EXE_FORCE_REF(S)) return exe_k_select_and_scatter_ref(S, in, ops, out);
    ss_plan p;
    tpu_status st = ss_setup(S, in, ops, &p);
    if (st) return st;
    tpu_tensor *t;
    if ((st = ss_init_out(S, in, &p, &t))) return st;
    const wn_geom *w = &p.w;
    int R = w->rank;
    int64_t *tab[TPU_MAX_RANK];
    int64_t *buf = wn_tables(w, tab);
    if (!buf) {
        tpu_tensor_free(t);
        return ut_nomem(S->ctx);
    }
    int64_t istr[TPU_MAX_RANK], s = 1;
    for (int d = R - 1; d >= 0; d--) {
        istr[d] = s;
        s *= w->in[d];
    }
    tpu_dtype xt = p.x->dtype;
    /* source slices along a leading dim whose window is trivial touch disjoint parts of the output, so they
     * can run in parallel with the same result as the serial row-major order */
    int64_t nb = R > 0 && w->size[0] == 1 && w->stride[0] == 1 && w->lo[0] == 0 && w->hi[0] == 0 ? w->out[0] : 1;
    int64_t per = nb ? p.src->count / nb : 0;
    int lanes = wn_last_is_lane(w) && p.sel_ge && p.sca_op == HLO_ADD && t->dtype == TPU_F32 && xt == TPU_F32;
    sel_job J = {S, &p, w, R, tab, istr, xt, per, t, lanes};
    exe_par_for(nb > 1 && p.src->count * w->taps > 65536 ? S->threads : 1, nb, 1, sel_chunk, &J);
    ut_free(buf);
    return exe_out_array(S, t, out);
}

/* Reference: the definition with the generic evaluator for both computations. */
EXE_KERNEL(exe_k_select_and_scatter_ref)
{
    ss_plan p;
    tpu_status st = ss_setup(S, in, ops, &p);
    if (st) return st;
    p.sca_op = HLO_OP_COUNT;
    tpu_tensor *t;
    if ((st = ss_init_out(S, in, &p, &t))) return st;
    const wn_geom *w = &p.w;
    int R = w->rank;
    int64_t opos[TPU_MAX_RANK] = {0};
    for (int64_t o = 0; o < p.src->count; o++, wn_next(opos, w->out, R)) {
        int64_t k[TPU_MAX_RANK] = {0}, sel = -1;
        exe_scalar cur = {0, 0, 0};
        for (int64_t tp = 0; tp < w->taps; tp++, wn_next(k, w->size, R)) {
            int64_t off = 0;
            int ok = 1;
            for (int d = 0; d < R; d++) {
                int64_t pos = opos[d] * w->stride[d] + k[d] - w->lo[d];
                if (pos < 0 || pos >= w->in[d]) ok = 0;
                off = off * w->in[d] + pos;
            }
            if (!ok) continue;
            exe_scalar v = exe_scalar_load(p.x->dtype, p.x->data, off);
            if (sel >= 0) {
                exe_scalar a[2] = {cur, v}, r;
                exe_scalar_fn_eval(p.sel, a, &r);
                if (r.i) continue;
            }
            cur = v;
            sel = off;
        }
        if (sel >= 0) ss_scatter(S, &p, t, sel, o);
    }
    return exe_out_array(S, t, out);
}
