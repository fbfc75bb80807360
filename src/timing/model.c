/* model.c — the TPU timing model. Every constant comes from the chip table (src/chip/chip.c, each figure
 * with its source); the model itself is written down with its assumptions in docs/timing.md. Nothing here is
 * fitted to a benchmark. */
#include "model.h"
#include "util/tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *tim_bound_name(tim_bound b)
{
    static const char *n[] = {"compute", "vector", "memory", "collective", "overhead", "host", "idle"};
    return (unsigned)b < TIM_BOUND_COUNT ? n[b] : "?";
}

static int64_t tim_prod(const hlo_shape *s, const int64_t *dims, int n)
{
    int64_t p = 1;
    for (int i = 0; i < n; i++) p *= s->dims[dims[i]];
    return p;
}

static int64_t tim_ceil(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* ---- the MXU ---- */

/* The MXU peak of one device in FLOP/s from its structure: 2 x rows x cols x MXUs x clock. The published peak
 * (chp_device_peak_flops) is this figure rounded; utilizations use this one so a perfect GEMM reads 100%. */
/* The share of the MXU peak XLA's matmul code sustains on large GEMMs (chip table, from published sweeps). */
static double tim_mxu_eff(const chp_chip *chip)
{
    return chip->mxu_efficiency > 0 && chip->mxu_efficiency <= 1 ? chip->mxu_efficiency : 1;
}

double tim_mxu_peak_flops(const chp_chip *chip)
{
    return 2.0 * (double)chip->mxu_rows * (double)chip->mxu_cols * chip->mxus_per_core * chip->cores_per_device *
           chp_mxu_clock_hz(chip);
}

double tim_mxu_gemm_s(const chp_chip *chip, int64_t batch, int64_t M, int64_t N, int64_t K, double passes, double *pad_waste)
{
    if (pad_waste) *pad_waste = 0;
    if (batch <= 0 || M <= 0 || N <= 0 || K <= 0) return 0;
    /* the operand with fewer rows is held in the array as weights; the other streams through it, one row per
     * cycle, in groups of 8 rows (a vreg of 8 sublanes) */
    int64_t stream = M > N ? M : N, held = M > N ? N : M;
    int64_t stream_pad = tim_ceil(stream, 8) * 8;
    if (stream_pad > TIM_SYSTOLIC_MAX_DIM) stream_pad = TIM_SYSTOLIC_MAX_DIM;
    if (K > TIM_SYSTOLIC_MAX_DIM) K = TIM_SYSTOLIC_MAX_DIM;
    if (held > TIM_SYSTOLIC_MAX_DIM) held = TIM_SYSTOLIC_MAX_DIM;
    tim_array arr = {chip->mxu_rows, chip->mxu_cols};
    tim_systolic_result r;
    if (tim_systolic_gemm(&arr, stream_pad, held, K, TIM_DF_WS, &r) != TPU_OK) return 0;
    /* weight-stationary: each fold holds a K x held tile; loading the next tile (fill_cycles, one weight row
     * per cycle) overlaps the current pass (double-buffered weights), so a fold costs max(rows streamed,
     * weight load), plus one fill and drain per GEMM.
     * The compiler spreads the folds over the device's MXUs (and the cores of a megacore device). When there
     * are fewer folds than MXUs, or the last round would leave MXUs idle, it also splits the streamed rows:
     * k MXUs hold the same weight tile and each streams 1/k of the rows. Pick the k that finishes first. */
    int nmxu = chip->mxus_per_core * chip->cores_per_device;
    if (nmxu < 1) nmxu = 1;
    double units = (double)r.folds * (double)batch, fill = (double)r.fill_cycles, best = -1;
    for (int k = 1; k <= nmxu; k++) {
        double chunk = ceil((double)stream_pad / k / 8) * 8;
        double per = chunk > fill ? chunk : fill;
        double c = ceil(units * k / nmxu) * per;
        if (best < 0 || c < best) best = c;
        if (chunk <= fill) break;   /* more splitting only adds weight loads */
    }
    double cycles = best + fill + (double)r.drain_cycles;
    double clock = chp_mxu_clock_hz(chip);
    if (pad_waste) {
        /* padding alone: rows streamed in groups of 8, the held and contracting dimensions in whole tiles */
        double padded = (double)stream_pad * (double)tim_ceil(held, arr.cols) * (double)arr.cols *
                        (double)tim_ceil(K, arr.rows) * (double)arr.rows;
        double useful = (double)stream * (double)held * (double)K;
        *pad_waste = padded > 0 ? 1.0 - useful / padded : 0;
        if (*pad_waste < 0) *pad_waste = 0;
    }
    return clock > 0 ? cycles * passes / clock : 0;
}

/* bf16 passes the chip runs for a dot/convolution's precision (independent of tpusim's numerics mode). */
static double tim_passes(const hlo_instr *in) { return (double)cmp_mxu_passes(in); }

/* GEMM view of a dot: batch x [M,K]·[K,N]. */
static void tim_dot_dims(const hlo_instr *in, int64_t *B, int64_t *M, int64_t *N, int64_t *K)
{
    const hlo_shape *l = &in->ops[0]->shape, *r = &in->ops[1]->shape;
    const int64_t *lb, *lc, *rb, *rc;
    int nlb = hlo_attr_ints(in, HK_LHS_BATCH_DIMS, &lb), nlc = hlo_attr_ints(in, HK_LHS_CONTRACTING_DIMS, &lc);
    int nrb = hlo_attr_ints(in, HK_RHS_BATCH_DIMS, &rb), nrc = hlo_attr_ints(in, HK_RHS_CONTRACTING_DIMS, &rc);
    (void)nrb;
    (void)nrc;
    *B = tim_prod(l, lb, nlb);
    *K = tim_prod(l, lc, nlc);
    int64_t lall = hlo_shape_count(l), rall = hlo_shape_count(r);
    *M = *B && *K ? lall / (*B * *K) : 0;
    *N = *B && *K ? rall / (*B * *K) : 0;
}

/* Output position x window position pairs of one spatial dimension that land on a real input element (not
 * padding, not a hole of lhs dilation). */
static double tim_conv_valid_pairs(int64_t in, int64_t out, const hlo_window_dim *w)
{
    int64_t s = w->stride > 0 ? w->stride : 1, ld = w->lhs_dilate > 0 ? w->lhs_dilate : 1;
    int64_t rd = w->rhs_dilate > 0 ? w->rhs_dilate : 1, last = (in - 1) * ld;
    if (in <= 0 || out <= 0 || w->size <= 0) return 0;
    double n = 0;
    int exact = ld == 1 || (double)w->size * (double)out <= 4e6;   /* else the holes' share per tap */
    for (int64_t k = 0; k < w->size; k++) {
        int64_t c = k * rd - w->pad_lo;           /* position of output 0's tap k in the dilated input */
        /* outputs o with 0 <= o*s + c <= last */
        int64_t lo = c >= 0 ? 0 : (-c + s - 1) / s, hi = last - c < 0 ? -1 : (last - c) / s;
        if (hi > out - 1) hi = out - 1;
        if (hi < lo) continue;
        if (ld == 1) {
            n += (double)(hi - lo + 1);
        } else if (exact) {
            for (int64_t o = lo; o <= hi; o++) n += ((o * s + c) % ld) == 0;
        } else {
            n += (double)(hi - lo + 1) / (double)ld;
        }
        if (k >= (1 << 20)) {   /* absurd windows: extrapolate from the first million taps */
            n = n * (double)w->size / (double)(k + 1);
            break;
        }
    }
    return n;
}

/* GEMM view of a convolution: groups x [M,K]·[K,N] with M = output positions x batch. *valid: the share of
 * window taps that touch real input (padding and the holes of lhs dilation excluded), as XLA's cost analysis
 * counts FLOPs; the TPU's convolution emitter does not multiply the holes of a transposed convolution. */
static void tim_conv_dims(const hlo_instr *in, int64_t *B, int64_t *M, int64_t *N, int64_t *K, double *valid)
{
    *B = *M = *N = *K = 0;
    *valid = 1;
    const hlo_attr *dla = hlo_attr_find(in, HK_DIM_LABELS);
    if (!dla || dla->kind != HA_DIMLABELS) return;
    const hlo_dimlabels *d = dla->v.dimlabels;
    const hlo_shape *l = &in->ops[0]->shape, *k = &in->ops[1]->shape, *o = &in->shape;
    int64_t fg = hlo_attr_int(in, HK_FEATURE_GROUP_COUNT, 1), bg = hlo_attr_int(in, HK_BATCH_GROUP_COUNT, 1);
    if (fg < 1) fg = 1;
    if (bg < 1) bg = 1;
    const hlo_attr *wa = hlo_attr_find(in, HK_WINDOW);
    const hlo_window *w = wa && wa->kind == HA_WINDOW ? wa->v.window : NULL;
    int64_t out_pos = 1, win = 1;
    for (int i = 0; i < d->nspatial; i++) {
        int64_t op = o->dims[d->out_spatial[i]], ws = k->dims[d->k_spatial[i]];
        out_pos *= op;
        win *= ws;
        if (w && i < w->rank && op > 0 && ws > 0)
            *valid *= tim_conv_valid_pairs(l->dims[d->in_spatial[i]], op, &w->d[i]) / ((double)op * (double)ws);
    }
    int64_t groups = fg * bg;
    *B = groups;
    *M = o->dims[d->out_batch] * out_pos;
    *K = k->dims[d->k_in] * win;
    *N = o->dims[d->out_feature] / groups;
    if (*N < 1) *N = 1;
}

/* The GEMM view of an op's largest dot or convolution (nested fusions included): 1 and the dims, or 0. */
int tim_gemm_of(const tim_op *t, int64_t *B, int64_t *M, int64_t *N, int64_t *K)
{
    double best = 0;
    int found = 0;
    const hlo_instr *const *ins = (const hlo_instr *const *)t->op->instrs;
    int nins = t->op->ninstrs;
    for (int pass = 0; pass < 2 && !found; pass++) {
        for (int m = 0; m < nins; m++) {
            const hlo_instr *in = ins[m];
            if (in->op == HLO_FUSION && in->ncalled && pass == 1) {
                const hlo_comp *fc = in->called[0];
                for (int q = 0; q < fc->ninstrs; q++) {
                    const hlo_instr *f = fc->instrs[q];
                    if (f->op != HLO_DOT && f->op != HLO_CONVOLUTION) continue;
                    int64_t b, mm, n, k;
                    double valid = 1;
                    if (f->op == HLO_DOT) tim_dot_dims(f, &b, &mm, &n, &k);
                    else tim_conv_dims(f, &b, &mm, &n, &k, &valid);
                    double w = (double)b * (double)mm * (double)n * (double)k;
                    if (w > best) { best = w; *B = b; *M = mm; *N = n; *K = k; found = 1; }
                }
            }
            if (in->op != HLO_DOT && in->op != HLO_CONVOLUTION) continue;
            int64_t b, mm, n, k;
            double valid = 1;
            if (in->op == HLO_DOT) tim_dot_dims(in, &b, &mm, &n, &k);
            else tim_conv_dims(in, &b, &mm, &n, &k, &valid);
            double w = (double)b * (double)mm * (double)n * (double)k;
            if (w > best) { best = w; *B = b; *M = mm; *N = n; *K = k; found = 1; }
        }
    }
    return found;
}

/* ---- the vector unit ---- */

/* Vector-unit operations per output element (transcendentals go through longer sequences). */
static double tim_vpu_cost(const hlo_instr *in)
{
    switch ((hlo_op)in->op) {
    case HLO_EXP: case HLO_EXPM1: case HLO_LOG: case HLO_LOG1P: case HLO_LOGISTIC: case HLO_TANH: case HLO_ERF:
    case HLO_POWER: case HLO_ATAN2: case HLO_SIN: case HLO_COS: case HLO_TAN: case HLO_CBRT: case HLO_ACOS:
    case HLO_ASIN: case HLO_ATAN: case HLO_SINH: case HLO_COSH: case HLO_ACOSH: case HLO_ASINH: case HLO_ATANH:
        return 8;
    case HLO_RSQRT: case HLO_SQRT: case HLO_DIVIDE: case HLO_REMAINDER: return 4;
    case HLO_BROADCAST: case HLO_RESHAPE: case HLO_SLICE: case HLO_PAD: case HLO_CONCATENATE: case HLO_REVERSE:
    case HLO_DYNAMIC_SLICE: case HLO_BITCAST: case HLO_IOTA: case HLO_CONSTANT: case HLO_PARAMETER:
    case HLO_GET_TUPLE_ELEMENT: case HLO_TUPLE:
        return 0;
    case HLO_TRANSPOSE: return 1;
    case HLO_BATCH_NORM_TRAINING: case HLO_BATCH_NORM_GRAD: return 8;
    case HLO_BATCH_NORM_INFERENCE: return 4;
    case HLO_RNG_BIT_GENERATOR: case HLO_RNG: return 16;
    case HLO_DOT: case HLO_CONVOLUTION: return 0;   /* on the MXU */
    default: return 1;
    }
}

/* ---- the TPU's linear-algebra custom-calls ----
 * LuDecomposition, Qr, ProductOfElementaryHouseholderReflectors and Eigh run as blocked algorithms: a panel
 * of 128 columns factored on the vector unit, then the trailing matrix updated with matrix products on the MXU
 * at f32 precision (6 bf16 passes). FLOPs per matrix are the textbook counts (Golub & Van Loan, "Matrix
 * Computations", 4th ed.: LU 2/3 n^3 (m n k - (m+n) k^2/2 + k^3/3, k = min(m,n), doubled), Householder QR
 * 2 m n^2 - 2/3 n^3, forming Q (orgqr) 4 m n k - 2 (m+n) k^2 + 4/3 k^3, symmetric eigensolver with vectors
 * 9 n^3); the panel share is m x n x 128 multiply-adds. Returns 0 when `in` is not one of them. */
static int tim_linalg_flops(const hlo_instr *in, double *flops, double *panel)
{
    const char *t = in->op == HLO_CUSTOM_CALL ? hlo_attr_str(in, HK_CUSTOM_CALL_TARGET) : NULL;
    if (!t || in->nops < 1 || !hlo_shape_is_array(&in->ops[0]->shape) || in->ops[0]->shape.rank < 2) return 0;
    const hlo_shape *a = &in->ops[0]->shape;
    double m = (double)a->dims[a->rank - 2], n = (double)a->dims[a->rank - 1], k = m < n ? m : n;
    double batch = m * n > 0 ? (double)hlo_shape_count(a) / (m * n) : 0, f;
    if (!strcmp(t, "LuDecomposition")) {
        f = 2 * (m * n * k - (m + n) * k * k / 2 + k * k * k / 3);
    } else if (!strcmp(t, "Qr")) {
        f = 2 * m * n * k - 2.0 / 3.0 * k * k * k;
    } else if (!strcmp(t, "ProductOfElementaryHouseholderReflectors")) {
        const hlo_shape *tau = in->nops > 1 ? &in->ops[1]->shape : NULL;
        double r = tau && tau->rank ? (double)tau->dims[tau->rank - 1] : k;
        f = 4 * m * n * r - 2 * (m + n) * r * r + 4.0 / 3.0 * r * r * r;
    } else if (!strcmp(t, "Eigh")) {
        f = 9 * n * n * n;
    } else {
        return 0;
    }
    if (f < 0) f = 0;
    double p = 2 * m * n * (k < 128 ? k : 128);
    *flops = batch * f;
    *panel = batch * (p < f ? p : f);
    return 1;
}

typedef struct tim_state tim_state;

/* ---- collectives ---- */

static int64_t tim_group_size(const hlo_instr *in, int devices)
{
    const hlo_attr *a = hlo_attr_find(in, HK_REPLICA_GROUPS);
    if (!a || a->kind != HA_RGROUPS) return devices;
    const hlo_rgroups *g = a->v.rgroups;
    if (g->iota) return g->gdims[1];
    if (g->ngroups == 0) return devices;
    return g->len[0];
}

int tim_is_collective(hlo_op op)
{
    switch (op) {
    case HLO_ALL_REDUCE: case HLO_ALL_REDUCE_START: case HLO_ALL_GATHER: case HLO_ALL_GATHER_START:
    case HLO_REDUCE_SCATTER: case HLO_ALL_TO_ALL: case HLO_COLLECTIVE_PERMUTE: case HLO_COLLECTIVE_PERMUTE_START:
    case HLO_COLLECTIVE_BROADCAST: case HLO_RAGGED_ALL_TO_ALL:
        return 1;
    default: return 0;
    }
}

/* ---- while trip counts ---- */

static int tim_const_int(const hlo_instr *in, int64_t *v)
{
    while (in->op == HLO_CONVERT || in->op == HLO_COPY || in->op == HLO_BROADCAST || in->op == HLO_RESHAPE) in = in->ops[0];
    if (in->op != HLO_CONSTANT || !in->literal || in->literal->elided || !hlo_shape_is_array(&in->shape) ||
        hlo_shape_count(&in->shape) != 1)
        return 0;
    char k = tpu_dtype_kind((tpu_dtype)in->shape.dtype);
    if (k != 's' && k != 'u') return 0;
    *v = ten_load_i64((tpu_dtype)in->shape.dtype, in->literal->data, 0);
    return 1;
}

/* Index of the tuple element an instruction reads from a computation's parameter, or -1. */
static int tim_param_index(const hlo_instr *in)
{
    if (in->op == HLO_GET_TUPLE_ELEMENT && in->ops[0]->op == HLO_PARAMETER) return (int)hlo_attr_int(in, HK_INDEX, -1);
    return -1;
}

/* Through the no-op wrappers a compiled program puts around loop state (copies, bitcasts, converts). */
static const hlo_instr *tim_strip(const hlo_instr *x)
{
    while ((x->op == HLO_COPY || x->op == HLO_BITCAST || x->op == HLO_CONVERT || x->op == HLO_RESHAPE) && x->nops == 1)
        x = x->ops[0];
    return x;
}

/* The instruction computing x: a fusion's fused root (*fus = the fusion), or x itself (*fus = NULL). */
static const hlo_instr *tim_unfuse(const hlo_instr *x, const hlo_instr **fus)
{
    x = tim_strip(x);
    *fus = NULL;
    if (x->op == HLO_FUSION && x->ncalled == 1) {
        *fus = x;
        x = tim_strip(x->called[0]->root);
    }
    return x;
}

/* An operand seen from the loop computation: a fused parameter maps back to the fusion's operand. */
static const hlo_instr *tim_outer(const hlo_instr *x, const hlo_instr *fus)
{
    x = tim_strip(x);
    if (fus && x->op == HLO_PARAMETER && x->param_no >= 0 && x->param_no < fus->nops) x = tim_strip(fus->ops[x->param_no]);
    return x;
}

/* Loop state element idx is the same after the body (root element = the parameter's element idx). */
static int tim_state_invariant(const hlo_comp *body, int idx)
{
    const hlo_instr *r = body->root;
    return r->op == HLO_TUPLE && idx < r->nops && tim_param_index(tim_strip(r->ops[idx])) == idx;
}

/* A scalar integer fixed for the whole loop: a constant, or a state element the body never changes whose
 * initial value (in the while's operand tuple) is a constant. */
static int tim_loop_const(const hlo_instr *w, const hlo_comp *body, const hlo_instr *x, int64_t *v)
{
    x = tim_strip(x);
    if (tim_const_int(x, v)) return 1;
    int idx = tim_param_index(x);
    if (idx < 0 || !tim_state_invariant(body, idx)) return 0;
    const hlo_instr *init = tim_strip(w->ops[0]);
    return init->op == HLO_TUPLE && idx < init->nops && tim_const_int(tim_strip(init->ops[idx]), v);
}

static int tim_compare_trips(const hlo_instr *w, const hlo_comp *body, const hlo_instr *r, const hlo_instr *cf,
                             double *trips, int depth);

/* known_trip_count in backend_config, or the loop's own bounds: i = c0; while (i OP N) i += s, where c0, N
 * and s are constants or loop-invariant state, through the copies, converts and fusions of a compiled
 * program (whose backend_config may have been stripped). */
static int tim_trip_count(const hlo_instr *w, double *trips)
{
    const char *bc = hlo_attr_str(w, HK_BACKEND_CONFIG);
    if (bc) {
        const char *k = strstr(bc, "known_trip_count");
        if (k) {
            const char *n = strstr(k, "\"n\"");
            if (n) {
                n += 3;
                while (*n && (*n == ':' || *n == ' ' || *n == '"')) n++;
                double v = strtod(n, NULL);
                if (v >= 0) {
                    *trips = v;
                    return 1;
                }
            }
        }
    }
    const hlo_attr *ca = hlo_attr_find(w, HK_CONDITION), *ba = hlo_attr_find(w, HK_BODY);
    if (!ca || !ba || (ca->kind != HA_COMP && ca->kind != HA_COMPS) || (ba->kind != HA_COMP && ba->kind != HA_COMPS) ||
        !ca->v.comps.n || !ba->v.comps.n)
        return 0;
    const hlo_comp *cond = ca->v.comps.v[0], *body = ba->v.comps.v[0];
    const hlo_instr *cf, *r = tim_unfuse(cond->root, &cf);
    return tim_compare_trips(w, body, r, cf, trips, 0);
}

/* Trips of the loop `w` whose condition is `r` (in fusion cf, or NULL): a compare of the induction variable
 * with a bound, or an `and` of conditions (a loop that may stop early, like jax's QDWH iteration: its own
 * bound, the most it can run, is the count). */
static int tim_compare_trips(const hlo_instr *w, const hlo_comp *body, const hlo_instr *r, const hlo_instr *cf,
                             double *trips, int depth)
{
    if (r->op == HLO_AND && r->nops == 2 && depth < 8) {
        double a, b;
        int ka = tim_compare_trips(w, body, tim_outer(r->ops[0], NULL), cf, &a, depth + 1);
        int kb = tim_compare_trips(w, body, tim_outer(r->ops[1], NULL), cf, &b, depth + 1);
        if (ka && kb) *trips = a < b ? a : b;
        else if (ka) *trips = a;
        else if (kb) *trips = b;
        return ka || kb;
    }
    if (r->op != HLO_COMPARE || r->nops != 2) return 0;
    const char *dir = hlo_attr_str(r, HK_DIRECTION);
    const hlo_instr *lhs = tim_outer(r->ops[0], cf), *rhs = tim_outer(r->ops[1], cf);
    int idx = tim_param_index(lhs), flipped = 0;
    int64_t limit;
    if (idx < 0 || !tim_loop_const(w, body, rhs, &limit)) {
        idx = tim_param_index(rhs);
        if (idx < 0 || !tim_loop_const(w, body, lhs, &limit)) return 0;
        flipped = 1;
    }
    /* init value: element idx of the while's operand tuple */
    const hlo_instr *init = tim_strip(w->ops[0]);
    if (init->op != HLO_TUPLE || idx >= init->nops) return 0;
    int64_t c0;
    if (!tim_const_int(tim_strip(init->ops[idx]), &c0)) return 0;
    /* step: body root tuple element idx = add(element idx, loop constant), possibly fused */
    const hlo_instr *br = body->root;
    if (br->op != HLO_TUPLE || idx >= br->nops) return 0;
    const hlo_instr *uf, *upd = tim_unfuse(br->ops[idx], &uf);
    int64_t step;
    if (upd->op != HLO_ADD) return 0;
    const hlo_instr *u0 = tim_outer(upd->ops[0], uf), *u1 = tim_outer(upd->ops[1], uf);
    if (tim_param_index(u0) == idx && tim_loop_const(w, body, u1, &step)) {
    } else if (tim_param_index(u1) == idx && tim_loop_const(w, body, u0, &step)) {
    } else {
        return 0;
    }
    if (step == 0 || !dir) return 0;
    /* normalise to "i OP limit" */
    char d[3] = {dir[0], dir[1], 0};
    if (flipped) {
        if (!strcmp(d, "LT")) strcpy(d, "GT");
        else if (!strcmp(d, "GT")) strcpy(d, "LT");
        else if (!strcmp(d, "LE")) strcpy(d, "GE");
        else if (!strcmp(d, "GE")) strcpy(d, "LE");
    }
    double n;
    if (!strcmp(d, "LT") && step > 0) n = ceil((double)(limit - c0) / (double)step);
    else if (!strcmp(d, "LE") && step > 0) n = floor((double)(limit - c0) / (double)step) + 1;
    else if (!strcmp(d, "GT") && step < 0) n = ceil((double)(c0 - limit) / (double)-step);
    else if (!strcmp(d, "GE") && step < 0) n = floor((double)(c0 - limit) / (double)-step) + 1;
    else if (!strcmp(d, "NE")) n = (double)(limit - c0) / (double)step;
    else return 0;
    *trips = n < 0 ? 0 : n;
    return 1;
}

/* ---- one op ---- */

struct tim_state {
    tpu_ctx           *ctx;
    const cmp_program *p;
    const chp_slice   *slice;
    const tim_opts    *opts;
    tim_op            *ops;
    int               *inst;         /* per op: which walk of a plan it came from (sibling fusion stays inside one) */
    int                n, cap;
    int                ninst, inst_next; /* current walk, and the last walk id handed out */
    double            *wtrips;       /* per walk: the trip count of the loop whose body it is (0: not a body) */
    int                wcap;
    double             body_trips;   /* for the walk about to start */
    int                unknown_trips;
};

/* Elements an op's vector work touches: padded to whole (8,128) vregs, in the layout the compiler gave the
 * instruction (`in`, when `s` is its own array shape) rather than the one written in the text. */
static double tim_vpu_elems(const tim_state *T, const hlo_instr *in, const hlo_shape *s)
{
    const chp_chip *chip = &T->slice->chip;
    hlo_shape assigned;
    if (in && s == &in->shape && T->p) {
        assigned = cmp_instr_shape(T->p, in);
        s = &assigned;
    }
    if (!hlo_shape_is_array(s)) return 0;
    size_t es = tpu_dtype_size((tpu_dtype)s->dtype);
    if (!es) return 0;
    hlo_shape f32 = *s;
    f32.dtype = TPU_F32;   /* the VPU computes in 32-bit lanes whatever the storage type */
    return (double)cmp_padded_bytes(chip, &f32) / 4.0;
}

/* Padded bytes of an instruction's array result in its assigned layout. */
static int64_t tim_padded(const cmp_program *p, const hlo_instr *in)
{
    hlo_shape s = cmp_instr_shape(p, in);
    return cmp_padded_bytes(p->chip, &s);
}

/* A fusion whose root is a dynamic-update-slice of one of its parameters (through bitcasts) updates that
 * operand in place: the update it writes, and which parameter (*param). NULL when it is not such a fusion. */
static const hlo_instr *tim_fused_dus(const hlo_instr *fusion, int *param)
{
    if (fusion->op != HLO_FUSION || fusion->ncalled != 1) return NULL;
    const hlo_instr *r = fusion->called[0]->root;
    while (r->op == HLO_BITCAST && r->nops == 1) r = r->ops[0];
    if (r->op != HLO_DYNAMIC_UPDATE_SLICE || r->nops < 2) return NULL;
    const hlo_instr *a = r->ops[0];
    while (a->op == HLO_BITCAST && a->nops == 1) a = a->ops[0];
    if (a->op != HLO_PARAMETER) return NULL;
    *param = (int)a->param_no;
    return r->ops[1];
}

/* Bytes an op writes to its output value v: none for a buffer the compiler keeps in VMEM (MSA on v5e and
 * later), the update's window for an in-place dynamic-update-slice (also as a fusion's root), else all. */
static int64_t tim_write_bytes(const tim_state *T, const cmp_op *op, int v)
{
    const cmp_value *val = &T->p->values[v];
    if (val->vmem) return 0;
    int param;
    const hlo_instr *upd = tim_fused_dus(op->root, &param);
    if (upd) return tim_padded(T->p, upd);
    if (op->root->op == HLO_DYNAMIC_UPDATE_SLICE && op->root->nops > 1) return tim_padded(T->p, op->root->ops[1]);
    return val->padded;
}

/* Bytes an op reads from value v: nothing from VMEM, the whole buffer, unless every reader inside the op only
 * slices it or updates it in place. */
static int64_t tim_read_bytes(const tim_state *T, const cmp_op *op, int v)
{
    const cmp_value *val = &T->p->values[v];
    if (val->vmem) return 0;
    int64_t sliced = 0;
    int all_slicing = 1, readers = 0;
    for (int m = 0; m < op->ninstrs && all_slicing; m++) {
        const hlo_instr *in = op->instrs[m];
        for (int o = 0; o < in->nops; o++) {
            if (in->ops[o] != val->def) continue;
            readers++;
            int param;
            const hlo_instr *upd = tim_fused_dus(in, &param);
            if ((in->op == HLO_DYNAMIC_SLICE || in->op == HLO_SLICE || in->op == HLO_GATHER) && o == 0)
                sliced += tim_padded(T->p, in);
            else if (in->op == HLO_DYNAMIC_UPDATE_SLICE && o == 0)
                sliced += tim_padded(T->p, in->ops[1]);   /* in place: only the window */
            else if (upd && param == o)
                sliced += tim_padded(T->p, upd);          /* a fusion updating it in place */
            else
                all_slicing = 0;
        }
    }
    if (readers && all_slicing && sliced < val->padded) return sliced;
    return val->padded;
}

static double tim_fill_s(const chp_chip *chip, const tim_op *t);

static void tim_cost_op(const tim_state *T, const cmp_op *op, tim_op *t)
{
    const chp_chip *chip = &T->slice->chip;
    double vpu_rate = chp_vpu_ops(chip) * chip->cores_per_device;
    double bw = chip->hbm_bw * ((double)chip->cores_per_device / (double)(chip->cores_per_chip ? chip->cores_per_chip : 1));
    double vpu_ops = 0;
    t->mxu_passes = 1;
    for (int m = 0; m < op->ninstrs; m++) {
        const hlo_instr *in = op->instrs[m];
        hlo_op o = (hlo_op)in->op;
        if (o == HLO_DOT || o == HLO_CONVOLUTION) {
            int64_t B, M, N, K;
            double valid = 1;
            if (o == HLO_DOT) tim_dot_dims(in, &B, &M, &N, &K);
            else tim_conv_dims(in, &B, &M, &N, &K, &valid);
            if (valid < 1) {
                int64_t k2 = (int64_t)ceil((double)K * valid);
                K = k2 < 1 ? 1 : k2;
            }
            double passes = tim_passes(in), waste = 0;
            double macs = (double)B * (double)M * (double)N * (double)K;
            double mxu = tim_mxu_gemm_s(chip, B, M, N, K, passes, &waste) / tim_mxu_eff(chip);
            /* tiny-per-group convolutions (depthwise) run faster on the vector unit: the compiler picks */
            double vpu_alt = vpu_rate > 0 ? 2 * macs / vpu_rate : mxu;
            t->flops += 2 * macs;
            if (o == HLO_CONVOLUTION && vpu_alt < mxu) {
                vpu_ops += 2 * macs;
            } else {
                t->mxu_s += mxu;
                t->mxu_flops += 2 * macs;
                t->mxu_passes = passes;
                t->pad_waste = waste;
            }
            continue;
        }
        if (o == HLO_FUSION && in->ncalled) {
            /* an already-fused program (post-optimization dump): cost its body's instructions */
            const hlo_comp *fc = in->called[0];
            cmp_op sub = {0};
            sub.instrs = (const hlo_instr **)fc->instrs;
            sub.ninstrs = fc->ninstrs;
            sub.root = fc->root;
            tim_op st = {0};
            tim_cost_op(T, &sub, &st);
            t->mxu_s += st.mxu_s;
            t->mxu_flops += st.mxu_flops;
            t->flops += st.flops;
            vpu_ops += st.vpu_s * vpu_rate;
            if (st.mxu_flops > 0) {
                t->mxu_passes = st.mxu_passes;
                t->pad_waste = st.pad_waste;
            }
            continue;
        }
        double lf, lp;
        if (tim_linalg_flops(in, &lf, &lp)) {
            double mp = tim_mxu_peak_flops(chip);
            t->flops += lf;
            t->mxu_flops += lf - lp;
            t->mxu_s += mp > 0 ? (lf - lp) * 6 / mp / tim_mxu_eff(chip) : 0;
            vpu_ops += lp;
            continue;
        }
        double cost = tim_vpu_cost(in);
        if (cost <= 0) continue;
        double elems;
        if (o == HLO_REDUCE || o == HLO_REDUCE_WINDOW) {
            elems = 0;
            for (int k = 0; k < in->nops / 2; k++) elems += tim_vpu_elems(T, in->ops[k], &in->ops[k]->shape);
            if (o == HLO_REDUCE_WINDOW) {
                const hlo_attr *wa = hlo_attr_find(in, HK_WINDOW);
                double w = 1;
                for (int d = 0; wa && wa->kind == HA_WINDOW && d < wa->v.window->rank; d++) {
                    /* a window sliding by one over most of a dimension is a cumulative op (jax's cummax and
                     * cumsum lower to it): the compiler runs it as a prefix computation, log2(window) steps per
                     * element rather than window of them */
                    double sz = (double)wa->v.window->d[d].size;
                    int64_t dim = d < in->ops[0]->shape.rank ? in->ops[0]->shape.dims[d] : 0;
                    if (sz >= 64 && wa->v.window->d[d].stride == 1 && 2 * sz >= (double)dim) sz = ceil(log2(sz));
                    w *= sz;
                }
                elems = tim_vpu_elems(T, in, hlo_shape_is_tuple(&in->shape) ? &in->shape.tuple[0] : &in->shape) * w;
            }
        } else if (o == HLO_DYNAMIC_UPDATE_SLICE && in->nops > 1) {
            elems = tim_vpu_elems(T, in->ops[1], &in->ops[1]->shape);   /* writes its window only */
        } else if (o == HLO_SORT) {
            double n = (double)hlo_shape_count(&in->ops[0]->shape);
            elems = n * log2(n > 2 ? n : 2) * in->nops;
        } else if (o == HLO_SCATTER) {
            elems = 2 * tim_vpu_elems(T, in->ops[in->nops - 1], &in->ops[in->nops - 1]->shape);
        } else if (o == HLO_FFT) {
            double n = (double)hlo_shape_count(&in->shape);
            elems = 5 * n * log2(n > 2 ? n : 2);
        } else if (o == HLO_CHOLESKY || o == HLO_TRIANGULAR_SOLVE) {
            const hlo_shape *a = &in->ops[0]->shape;
            double nn = a->rank ? (double)a->dims[a->rank - 1] : 1;
            elems = (double)hlo_shape_count(a) * nn / 3;
        } else {
            const hlo_shape *s = hlo_shape_is_tuple(&in->shape) && in->shape.ntuple ? &in->shape.tuple[0] : &in->shape;
            elems = tim_vpu_elems(T, in, s);
        }
        vpu_ops += cost * elems;
        hlo_class c = hlo_op_class(o);
        if (c == HLO_CLASS_EW1 || c == HLO_CLASS_EW2 || c == HLO_CLASS_EW3 || o == HLO_REDUCE || o == HLO_REDUCE_WINDOW)
            t->flops += elems;
    }
    t->vpu_s = vpu_rate > 0 ? vpu_ops / vpu_rate : 0;
    /* HBM: values read from outside the op and written by it (padded bytes) */
    int64_t bytes = 0;
    for (int i = 0; i < op->nin; i++) bytes += tim_read_bytes(T, op, op->in[i]);
    for (int i = 0; i < op->nout; i++) bytes += tim_write_bytes(T, op, op->out[i]);
    t->hbm_bytes = bytes;
    t->hbm_s = bw > 0 ? (double)bytes / bw : 0;
    /* collectives */
    if (tim_is_collective((hlo_op)op->root->op)) {
        const hlo_instr *in = op->root;
        double b = 0;
        if (in->op == HLO_ALL_GATHER || in->op == HLO_ALL_GATHER_START) b = (double)cmp_padded_bytes(T->p->chip, hlo_shape_is_tuple(&in->shape) ? &in->shape.tuple[in->shape.ntuple - 1] : &in->shape);
        else
            for (int k = 0; k < in->nops; k++) b += (double)tim_padded(T->p, in->ops[k]);
        int64_t moved = 0;
        int nd = T->slice->devices > 0 ? T->slice->devices : 1, small[256];
        int *members = nd <= 256 ? small : ut_malloc((size_t)nd * sizeof *members);
        if (members) {
            int n = tim_coll_group(in, nd, T->opts ? T->opts->widen_groups : 0, members);
            tim_coll_cost cc;
            tim_collective_group_cost(T->slice, (hlo_op)in->op, members, n, b, &cc);
            t->ici_s = cc.time_s;
            t->ici_bw_s = cc.bw_s;
            t->coll_n = n;
            moved = cc.ici_bytes + cc.dcn_bytes;
            if (members != small) ut_free(members);
        } else {
            t->ici_s = tim_collective_s(T->slice, (hlo_op)in->op, tim_group_size(in, nd), b, &moved);
        }
        t->ici_bytes = moved;
        t->coll_bytes = b;
        if (!t->ici_bw_s) t->ici_bw_s = t->ici_s;
    }
    t->overhead_s = chip->op_overhead_s;
    t->fill_s = tim_fill_s(chip, t);
    tim_op_finish(chip, t);
}

/* An MXU op streams its operands through VMEM in a pipeline: compute overlaps the transfers except the first
 * loads and the last store. Their share falls as the transfers outgrow the VMEM working set the compiler's
 * kernels use (the scoped VMEM: the chip's VMEM less what memory-space assignment may take, 16-32 MiB):
 * exposed = min(compute, transfer) x W / (W + bytes). Small matmuls, whose operands fit a few working sets,
 * pay most of their transfer on top of their compute (Ironwood bf16 1024^3-4096^3 run at 30-77% of peak). */
static double tim_fill_s(const chp_chip *chip, const tim_op *t)
{
    if (t->mxu_s <= 0 || t->hbm_s <= 0 || t->hbm_bytes <= 0) return 0;
    double w = (double)(chip->vmem_bytes - chip->vmem_temp_bytes);
    if (w <= 0) w = (double)chip->vmem_bytes;
    double m = t->mxu_s < t->hbm_s ? t->mxu_s : t->hbm_s;
    return m * w / (w + (double)t->hbm_bytes);
}

/* The op's time: the largest of its unit times plus the pipeline fill and the launch cost; its bound; its MXU
 * utilization. */
void tim_op_finish(const chp_chip *chip, tim_op *t)
{
    double best = t->mxu_s;
    t->bound = TIM_BOUND_COMPUTE;
    if (t->vpu_s > best) { best = t->vpu_s; t->bound = TIM_BOUND_VECTOR; }
    if (t->hbm_s > best) { best = t->hbm_s; t->bound = TIM_BOUND_MEMORY; }
    if (t->ici_s > best) { best = t->ici_s; t->bound = TIM_BOUND_COLLECTIVE; }
    if (t->overhead_s > best) t->bound = TIM_BOUND_OVERHEAD;
    t->time_s = best + t->fill_s + t->overhead_s;
    double peak = tim_mxu_peak_flops(chip);
    t->mxu_util = t->time_s > 0 && peak > 0 ? t->mxu_flops / (t->time_s * peak) : 0;
}

static tim_op *tim_push(tim_state *T)
{
    if (T->n == T->cap) {   /* two arrays of one length: the count moves once both have grown */
        int cap_ops = T->cap, cap_inst = T->cap;
        tim_op *n = ut_grow(T->ops, sizeof *n, T->n, &cap_ops, 256);
        if (!n) return NULL;
        T->ops = n;
        int *in = ut_grow(T->inst, sizeof *in, T->n, &cap_inst, 256);
        if (!in) return NULL;
        T->inst = in;
        T->cap = cap_ops;
    }
    T->inst[T->n] = T->ninst;
    tim_op *t = &T->ops[T->n++];
    memset(t, 0, sizeof *t);
    return t;
}

/* Op executions the timeline of one step may list: sub-plans are walked once per call site, so calls that
 * fan out (f calls g twice, g calls h twice, ...) could list exponentially many. */
#define TIM_MAX_OPS 1000000

static tpu_status tim_walk(tim_state *T, const cmp_plan *plan, int depth, double count)
{
    if (depth > 64) return ut_err(T->ctx, TPU_ERR_UNSUPPORTED, "control flow nested more than 64 deep");
    if (T->n + plan->nops > TIM_MAX_OPS)
        return ut_err(T->ctx, TPU_ERR_UNSUPPORTED, "the step's timeline passes %d op executions at '%s' (computations "
                      "called from many places, each call walked once); tpusim stops there", TIM_MAX_OPS,
                      plan->comp ? plan->comp->name : "?");
    int inst = ++T->inst_next;
    if (inst >= T->wcap) {
        int cap = T->wcap ? 2 * T->wcap : 64;
        double *nw = ut_realloc(T->wtrips, (size_t)cap * sizeof *nw);
        if (!nw) return ut_nomem(T->ctx);
        T->wtrips = nw;
        T->wcap = cap;
    }
    T->wtrips[inst] = T->body_trips;
    T->body_trips = 0;
    for (int k = 0; k < plan->nops; k++) {
        T->ninst = inst;   /* ops after a nested plan belong to this walk again */
        const cmp_op *op = &plan->ops[k];
        if (op->kind == CMP_NOOP) continue;
        tim_op *t = tim_push(T);
        if (!t) return ut_nomem(T->ctx);
        t->op = op;
        t->root = op->root;
        t->depth = depth;
        t->count = count;
        if (op->kind != CMP_CONTROL) {
            tim_cost_op(T, op, t);
            continue;
        }
        /* control: its children carry the time */
        const hlo_instr *in = op->root;
        double trips = 1;
        int known = 1;
        if (in->op == HLO_WHILE) {
            known = 0;
            if (T->opts->trip_counts && T->opts->trip_counts[in->parent->id] >= 0) {
                /* trip_counts is indexed by a global instruction number the caller maps; see tim_model */
            }
            known = tim_trip_count(in, &trips);
            if (!known) {
                trips = 1;
                T->unknown_trips++;
            }
        }
        t->trips = trips;
        t->trip_known = known;
        t->bound = TIM_BOUND_OVERHEAD;
        int idx = (int)(t - T->ops);
        for (int s = 0; s < op->nsub; s++) {
            double c = count;
            if (in->op == HLO_WHILE) {
                const hlo_attr *ca = hlo_attr_find(in, HK_CONDITION);
                int is_cond = ca && ca->v.comps.v[0] == op->sub[s]->comp;
                c = count * (is_cond ? trips + 1 : trips);
                T->body_trips = is_cond ? 0 : trips;
            } else if (in->op == HLO_CONDITIONAL) {
                c = count / op->nsub;   /* branch unknown statically: each equally likely */
            }
            tpu_status st = tim_walk(T, op->sub[s], depth + 1, c);
            if (st) return st;
        }
        (void)idx;
    }
    return TPU_OK;
}

/* ---- fusion as the TPU compiler would finish it ----
 * The compile pipeline fuses conservatively: a producer joins its consumers' op only when they all are one
 * op, and each reduction is its own op. XLA goes further in two ways that decide most of the HBM traffic of
 * unoptimized programs (batch-norm chains, converts to f32):
 *   - duplication (xla/service/instruction_fusion.cc): a producer made only of cheap instructions (not
 *     IsExpensive: no exp/log/divide/rsqrt/reduce/dot...) is fused into each of its consumers when that does
 *     not raise memory traffic: it is "effectively at most unary" (one input as large as its output) or its
 *     inputs hold no more elements than its output; here additionally only when every consumer can take it;
 *   - sibling multi-output fusion (multi_output_fusion.cc): reductions that read the same operand and do not
 *     depend on each other run as one kernel, so the operand is read once.
 * tim_fuse applies both to the costs: a duplicated op has no HBM traffic or launch of its own, its
 * consumers read its inputs instead of its result and do its vector work; a sibling reduction does not
 * read again what another reduction of the same plan read. The compiled program (and the memory report)
 * are unchanged. Programs dumped after optimization (fusion instructions) are left as XLA fused them. */

static int tim_cheap(const hlo_instr *in)
{
    switch ((hlo_op)in->op) {
    case HLO_ADD: case HLO_AND: case HLO_BITCAST: case HLO_BITCAST_CONVERT: case HLO_BROADCAST: case HLO_CEIL:
    case HLO_CLAMP: case HLO_CLZ: case HLO_COMPARE: case HLO_COMPLEX: case HLO_CONCATENATE: case HLO_CONSTANT:
    case HLO_CONVERT: case HLO_COPY: case HLO_DYNAMIC_SLICE: case HLO_FLOOR: case HLO_GET_TUPLE_ELEMENT:
    case HLO_IMAG: case HLO_IOTA: case HLO_IS_FINITE: case HLO_MAXIMUM: case HLO_MINIMUM: case HLO_MULTIPLY:
    case HLO_NEGATE: case HLO_NOT: case HLO_OR: case HLO_XOR: case HLO_PAD: case HLO_POPCNT: case HLO_REAL:
    case HLO_REDUCE_PRECISION: case HLO_RESHAPE: case HLO_REVERSE: case HLO_ROUND_NEAREST_AFZ:
    case HLO_ROUND_NEAREST_EVEN: case HLO_SELECT: case HLO_SHIFT_LEFT: case HLO_SHIFT_RIGHT_ARITHMETIC:
    case HLO_SHIFT_RIGHT_LOGICAL: case HLO_SLICE: case HLO_SUBTRACT: case HLO_TRANSPOSE: case HLO_TUPLE:
    case HLO_PARAMETER:
        return 1;
    case HLO_ABS: case HLO_COS: case HLO_SIGN: case HLO_SIN: case HLO_TAN:   /* cheap for reals */
        return tpu_dtype_kind((tpu_dtype)in->shape.dtype) != 'c';
    default:
        return 0;
    }
}

/* Instructions a dot/convolution op takes as operand producers (the compile pipeline's rule). */
static int tim_mxu_operand(const hlo_instr *in)
{
    switch ((hlo_op)in->op) {
    case HLO_CONVERT: case HLO_BITCAST: case HLO_BROADCAST: case HLO_RESHAPE: case HLO_COPY: case HLO_CONSTANT:
        return 1;
    default:
        return 0;
    }
}

/* Rank without dimensions of size 1 (XLA's ShapeUtil::TrueRank). */
static int tim_true_rank(const hlo_shape *s)
{
    int r = 0;
    for (int i = 0; i < s->rank; i++) r += s->dims[i] != 1;
    return r;
}

#define TIM_SRC_MAX 32   /* effective inputs an op may gather through duplicated producers */

typedef struct tim_srcs {
    int n, nd;
    int v[TIM_SRC_MAX];
    uint8_t via[TIM_SRC_MAX];   /* 1: reached through a duplicated producer */
    int d[TIM_SRC_MAX];         /* the duplicated ops folded into this one (each computed once in it) */
} tim_srcs;

static int tim_dups_add(tim_srcs *s, int op)
{
    for (int i = 0; i < s->nd; i++)
        if (s->d[i] == op) return 1;
    if (s->nd == TIM_SRC_MAX) return 0;
    s->d[s->nd++] = op;
    return 1;
}

static int tim_srcs_add(tim_srcs *s, int v, int via)
{
    for (int i = 0; i < s->n; i++)
        if (s->v[i] == v) return 1;
    if (s->n == TIM_SRC_MAX) return 0;
    s->v[s->n] = v;
    s->via[s->n++] = (uint8_t)via;
    return 1;
}

/* ---- producers the compile pipeline recomputes in every consumer, and XLA does not ----
 * For the memory report the compile pipeline recomputes every cheap elementwise producer in each op that
 * reads it (its value is never written, as libtpu's buffers show). XLA duplicates a producer into several
 * consumers only when that does not raise memory traffic (instruction_fusion.cc, ComputeGloballyUnfusible:
 * it is "effectively at most unary" -- at most one operand of the output's rank that is not a broadcast, iota
 * or scalar constant -- or its operands hold no more elements than its output). A chain of binary ops
 * (a residual add, a batch-norm gradient) that fails the test is computed once: the first op of the walk that
 * reads it computes it and writes it beside its own result (a multi-output fusion), the others read it. So an
 * op reads what it reads directly and through recomputable producers, plus the results of such chains; it
 * does not re-read every chain's inputs. The program libtpu optimizes for ResNet-50 shows the same: no
 * fusion reads more than 5 activation-sized operands, where recomputing every chain gave convolutions 29. */

typedef struct tim_mat {
    const cmp_program *p;
    int     *base;      /* per computation id: number of its first instruction */
    int     *seen;      /* per instruction: the walk stamp that visited it */
    int     *member;    /* per instruction: stamp of the op it is a member of */
    int     *isdef;     /* per instruction: stamp of the op reading its value */
    int8_t  *mat;       /* per instruction: -1 undecided, 0 recomputed by each consumer, 1 computed once */
    int     *paid;      /* per instruction: the walk (T->inst) whose op computed it last, 0 none */
    int     *vof;       /* per instruction: a value it defines, or -1 */
    int8_t  *xvmem;     /* per instruction: -1 undecided, 1 a chain computed once from values in VMEM */
    uint8_t *users;     /* per instruction: how many instructions use it (2 = two or more) */
    int     *dseen;     /* per instruction: the decision (tim_is_mat) that visited it last */
    int      dnext;
    int     *vmark;     /* per value: stamp; vkind: 1 read by the op, 2 accounted through a chain it reads */
    uint8_t *vkind;
    int      stamp;
} tim_mat;

static int tim_gid(const tim_mat *M, const hlo_instr *in) { return M->base[in->parent->id] + in->id; }

/* The kinds the compile pipeline recomputes in consumers (cmp_is_cheap). */
static int tim_recomputable(const hlo_instr *in)
{
    switch ((hlo_op)in->op) {
    case HLO_BROADCAST: case HLO_IOTA: case HLO_RESHAPE: case HLO_CONVERT: case HLO_CONSTANT: case HLO_SLICE:
    case HLO_DYNAMIC_SLICE: case HLO_COPY:
        return 1;
    default: {
        hlo_class c = hlo_op_class((hlo_op)in->op);
        return c == HLO_CLASS_EW1 || c == HLO_CLASS_EW2 || c == HLO_CLASS_EW3 || c == HLO_CLASS_CMP;
    }
    }
}

/* XLA's test: may this producer be recomputed in each consumer without raising traffic? */
static int tim_dup_ok(const hlo_instr *x)
{
    if (!hlo_shape_is_array(&x->shape)) return 1;
    int out_rank = tim_true_rank(&x->shape), large = 0;
    double opnd = 0;
    for (int o = 0; o < x->nops; o++) {
        const hlo_instr *y = x->ops[o];
        int uniq = 1;
        for (int q = 0; q < o && uniq; q++) uniq = x->ops[q] != y;
        if (!uniq) continue;
        if (hlo_shape_is_array(&y->shape)) opnd += (double)hlo_shape_count(&y->shape);
        if (y->op == HLO_BROADCAST || y->op == HLO_IOTA) continue;
        if (y->op == HLO_CONSTANT && hlo_shape_is_array(&y->shape) && hlo_shape_count(&y->shape) == 1) continue;
        large += tim_true_rank(&y->shape) >= out_rank;
    }
    return large <= 1 || opnd <= (double)hlo_shape_count(&x->shape);
}

/* Does the chain x come from values the compiler keeps in VMEM only (on chips that keep temporaries there)?
 * Then its result stays in VMEM too: MSA places it as it placed its inputs. */
static int tim_chain_vmem(tim_mat *M, const hlo_instr *x, int depth)
{
    int g = tim_gid(M, x);
    if (M->xvmem[g] >= 0) return M->xvmem[g];
    int r = 1;
    for (int o = 0; o < x->nops && r; o++) {
        const hlo_instr *y = x->ops[o];
        int v = M->vof[tim_gid(M, y)];
        if (v >= 0) {
            const cmp_value *val = &M->p->values[v];
            r = val->vmem || (val->alias >= 0 && M->p->values[val->alias].vmem) || y->op == HLO_CONSTANT ||
                hlo_shape_count(&y->shape) <= 1;
        } else if (y->op == HLO_BROADCAST || y->op == HLO_IOTA || y->op == HLO_CONSTANT) {
            r = y->op != HLO_BROADCAST || depth >= 32 || tim_chain_vmem(M, y, depth + 1);
        } else {
            r = tim_recomputable(y) && depth < 32 && tim_chain_vmem(M, y, depth + 1);
        }
    }
    M->xvmem[g] = (int8_t)r;
    return r;
}

static int64_t tim_val_bytes(const tim_mat *M, int v)
{
    const cmp_value *val = &M->p->values[v];
    if (val->vmem || (val->alias >= 0 && M->p->values[val->alias].vmem)) return 0;
    return val->padded;
}

/* Bytes of x's result in HBM: none when the chain stays in VMEM. */
static int64_t tim_chain_bytes(tim_mat *M, const hlo_instr *x)
{
    if (M->p->chip->vmem_temp_bytes > 0 && tim_chain_vmem(M, x, 0)) return 0;
    hlo_shape sh = cmp_instr_shape(M->p, x);
    return cmp_padded_bytes(M->p->chip, &sh);
}

/* Is x, a producer the compile pipeline recomputes in its consumers, computed once? When XLA's test says
 * recomputing it may raise traffic (tim_dup_ok) and it does: the HBM bytes recomputing it reads (its inputs
 * through recomputed producers, each once; a producer computed once read as its result) exceed its result's. */
static int tim_is_mat(tim_mat *M, const hlo_instr *x, int depth)
{
    int g = tim_gid(M, x);
    if (M->mat[g] >= 0) return M->mat[g];
    M->mat[g] = 0;   /* while deciding (a cycle cannot occur in a DAG; guards deep recursion) */
    /* a producer with one user fuses into it (into the chain that user belongs to): nothing to duplicate */
    if (M->users[g] < 2 || tim_dup_ok(x) || depth > 48) return 0;
    const hlo_instr *stack[256];
    int ns = 0, sp = 0, stamp = ++M->dnext;   /* a nested decision takes stamps of its own */
    int64_t src = 0;
    for (int o = 0; o < x->nops && sp < 256; o++) stack[sp++] = x->ops[o];
    while (sp > 0) {
        const hlo_instr *y = stack[--sp];
        int gy = tim_gid(M, y);
        if (M->dseen[gy] == stamp) continue;
        if (ns++ == 256) break;   /* a bounded look: long chains are decided on their first 256 inputs */
        M->dseen[gy] = stamp;
        int v = M->vof[tim_gid(M, y)];
        if (v >= 0) {
            src += tim_val_bytes(M, v);
        } else if (tim_recomputable(y)) {
            if (tim_is_mat(M, y, depth + 1)) src += tim_chain_bytes(M, y);
            else for (int o = 0; o < y->nops && sp < 256; o++) stack[sp++] = y->ops[o];
        }
    }
    M->mat[g] = (int8_t)(src > tim_chain_bytes(M, x));
    return M->mat[g];
}

/* Walks what op i reads from the members' operands, through recomputed producers. Values of op->in reached
 * are marked (kind `vk`); a chain computed once (mat) is read (its padded bytes added to *bytes) or, when
 * no op of this walk computed it yet, computed here: its result written and its inputs read (walked on).
 * Returns 1 when the op reads such a chain. */
static int tim_mat_walk(tim_mat *M, const cmp_op *op, int inst, const hlo_instr *const *start, int nstart,
                        uint8_t vk, int64_t *bytes, const hlo_instr **defer, int *ndefer, int maxdefer)
{
    const hlo_instr *stack[512];
    int sp = 0, found = 0;
    for (int k = 0; k < nstart && sp < 512; k++) stack[sp++] = start[k];
    while (sp > 0) {
        const hlo_instr *x = stack[--sp];
        int g = tim_gid(M, x);
        if (M->seen[g] == M->stamp || M->member[g] == M->stamp) continue;
        M->seen[g] = M->stamp;
        if (M->isdef[g] == M->stamp || !tim_recomputable(x)) {
            for (int k = 0; k < op->nin; k++) {
                int v = op->in[k];
                if (M->p->values[v].def == x && (M->vmark[v] != M->stamp || M->vkind[v] > vk)) {
                    M->vmark[v] = M->stamp;
                    M->vkind[v] = vk;
                }
            }
            continue;
        }
        if (tim_is_mat(M, x, 0) && vk == 1) {
            found = 1;
            int64_t pb = tim_chain_bytes(M, x);
            *bytes += pb;   /* its result: written by the op computing it, read by the others */
            if (M->paid[g] != inst) {
                M->paid[g] = inst;
            } else {
                if (*ndefer < maxdefer) defer[(*ndefer)++] = x;
                continue;
            }
        }
        for (int o = 0; o < x->nops && sp < 512; o++) stack[sp++] = x->ops[o];
    }
    return found;
}

static tpu_status tim_fuse(tim_state *T)
{
    const cmp_program *p = T->p;
    const chp_chip *chip = &T->slice->chip;
    int nv = p->nvalues, n = T->n;
    if (!n || !nv) return TPU_OK;
    int *def = ut_malloc((size_t)nv * sizeof *def), *readers = ut_calloc((size_t)nv, sizeof *readers);
    int *charged = ut_malloc((size_t)nv * sizeof *charged);
    uint8_t *absorb = ut_malloc((size_t)nv), *dup = ut_calloc((size_t)n, 1);
    tim_srcs *src = ut_malloc((size_t)n * sizeof *src);
    if (!def || !readers || !charged || !absorb || !dup || !src) {
        ut_free(def); ut_free(readers); ut_free(charged); ut_free(absorb); ut_free(dup); ut_free(src);
        return ut_nomem(T->ctx);
    }
    for (int v = 0; v < nv; v++) {
        def[v] = -1;
        charged[v] = -1;
        absorb[v] = 1;
    }
    for (int i = 0; i < n; i++) {
        const cmp_op *op = T->ops[i].op;
        if (op->kind == CMP_CONTROL) continue;
        for (int k = 0; k < op->nout; k++) def[op->out[k]] = i;
    }
    /* who reads each value, and could every reader take its producer in? */
    for (int i = 0; i < n; i++) {
        const cmp_op *op = T->ops[i].op;
        for (int k = 0; k < op->nin; k++) {
            int v = op->in[k], d = def[v];
            readers[v]++;
            int ok = d >= 0 && (op->kind == CMP_LOOP || op->kind == CMP_INPUT || op->kind == CMP_OUTPUT) &&
                     T->inst[d] == T->inst[i];
            if (ok && op->kind == CMP_OUTPUT) {
                /* a dot/convolution takes only converts and the like as operands; its elementwise epilogue
                 * takes any cheap producer */
                int feeds_mxu = 0;
                for (int m = 0; m < op->ninstrs && !feeds_mxu; m++) {
                    const hlo_instr *in = op->instrs[m];
                    if (in->op != HLO_DOT && in->op != HLO_CONVOLUTION) continue;
                    for (int q = 0; q < in->nops; q++) feeds_mxu |= in->ops[q] == p->values[v].def;
                }
                for (int m = 0; feeds_mxu && m < T->ops[d].op->ninstrs && ok; m++) ok = tim_mxu_operand(T->ops[d].op->instrs[m]);
            }
            for (int m = 0; m < op->ninstrs && ok; m++) ok = op->instrs[m]->op != HLO_FUSION;
            if (!ok) absorb[v] = 0;
        }
    }
    /* what each op reads once the chains XLA computes once are (tim_mat_walk) */
    int64_t *extra = ut_calloc((size_t)n, sizeof *extra);
    int *inoff = ut_malloc((size_t)(n + 1) * sizeof *inoff), total_in = 0;
    for (int i = 0; i < n; i++) total_in += T->ops[i].op->nin;
    int *inl = ut_malloc((size_t)(total_in ? total_in : 1) * sizeof *inl);
    tim_mat M = {0};
    M.p = p;
    int ncomp = 0;
    for (int c = 0; c < p->m->ncomps; c++)
        if (p->m->comps[c]->id + 1 > ncomp) ncomp = p->m->comps[c]->id + 1;
    int64_t ng = 0;
    M.base = ut_malloc((size_t)(ncomp ? ncomp : 1) * sizeof *M.base);
    for (int c = 0; M.base && c < p->m->ncomps; c++) {
        M.base[p->m->comps[c]->id] = (int)ng;
        ng += p->m->comps[c]->ninstrs;
    }
    M.seen = ut_calloc((size_t)ng + 1, sizeof *M.seen);
    M.member = ut_calloc((size_t)ng + 1, sizeof *M.member);
    M.isdef = ut_calloc((size_t)ng + 1, sizeof *M.isdef);
    M.paid = ut_calloc((size_t)ng + 1, sizeof *M.paid);
    M.mat = ut_malloc((size_t)ng + 1);
    M.vof = ut_malloc(((size_t)ng + 1) * sizeof *M.vof);
    M.xvmem = ut_malloc((size_t)ng + 1);
    M.vmark = ut_calloc((size_t)nv, sizeof *M.vmark);
    M.vkind = ut_calloc((size_t)nv, 1);
    int mat_ok = extra && inoff && inl && M.base && M.seen && M.member && M.isdef && M.paid && M.mat && M.vmark && M.vkind;
    M.users = ut_calloc((size_t)ng + 1, 1);
    M.dseen = ut_calloc((size_t)ng + 1, sizeof *M.dseen);
    mat_ok = mat_ok && M.vof && M.xvmem && M.users && M.dseen;
    for (int c = 0; mat_ok && c < p->m->ncomps; c++) {
        const hlo_comp *hc = p->m->comps[c];
        for (int k = 0; k < hc->ninstrs; k++) {
            const hlo_instr *in = hc->instrs[k];
            for (int o = 0; o < in->nops; o++) {
                int uniq = 1;
                for (int q = 0; q < o && uniq; q++) uniq = in->ops[q] != in->ops[o];
                int g = tim_gid(&M, in->ops[o]);
                if (uniq && M.users[g] < 2) M.users[g]++;
            }
        }
    }
    if (mat_ok) {
        memset(M.mat, 0xff, (size_t)ng + 1);
        memset(M.xvmem, 0xff, (size_t)ng + 1);
        for (int64_t g = 0; g <= ng; g++) M.vof[g] = -1;
        for (int v = 0; v < nv; v++)
            if (p->values[v].def && M.vof[tim_gid(&M, p->values[v].def)] < 0) M.vof[tim_gid(&M, p->values[v].def)] = v;
    }
    for (int i = 0, cur = 0; i < n && mat_ok; i++) {
        const cmp_op *op = T->ops[i].op;
        inoff[i] = cur;
        inoff[i + 1] = cur;
        if (op->kind == CMP_CONTROL) continue;
        M.stamp++;
        for (int m = 0; m < op->ninstrs; m++) M.member[tim_gid(&M, op->instrs[m])] = M.stamp;
        for (int k = 0; k < op->nin; k++) M.isdef[tim_gid(&M, p->values[op->in[k]].def)] = M.stamp;
        const hlo_instr *defer[64];
        int nd = 0, found = 0;
        int64_t b = 0, unused = 0;
        for (int m = 0; m < op->ninstrs; m++)
            found |= tim_mat_walk(&M, op, T->inst[i], (const hlo_instr *const *)op->instrs[m]->ops, op->instrs[m]->nops,
                                  1, &b, defer, &nd, 64);
        for (int d = 0; d < nd && found; d++)
            tim_mat_walk(&M, op, T->inst[i], (const hlo_instr *const *)defer[d]->ops, defer[d]->nops, 2, &unused,
                         NULL, &nd, 0);
        for (int k = 0; k < op->nin; k++) {
            int v = op->in[k];
            if (found && M.vmark[v] == M.stamp && M.vkind[v] == 2) continue;   /* read through a chain's result */
            inl[cur++] = v;
        }
        inoff[i + 1] = cur;
        extra[i] = found ? b : -1;
    }
    if (!mat_ok) {   /* no memory for the walk: every op reads what the compile pipeline says */
        for (int i = 0, cur = 0; inoff && inl && i < n; i++) {
            inoff[i] = cur;
            for (int k = 0; k < T->ops[i].op->nin; k++) inl[cur++] = T->ops[i].op->in[k];
            inoff[i + 1] = cur;
            if (extra) extra[i] = -1;
        }
    }
    ut_free(M.base); ut_free(M.seen); ut_free(M.member); ut_free(M.isdef); ut_free(M.paid); ut_free(M.mat);
    ut_free(M.vmark); ut_free(M.vkind); ut_free(M.vof); ut_free(M.xvmem); ut_free(M.users); ut_free(M.dseen);
    if (!extra || !inoff || !inl) {
        ut_free(extra); ut_free(inoff); ut_free(inl);
        ut_free(def); ut_free(readers); ut_free(charged); ut_free(absorb); ut_free(dup); ut_free(src);
        return ut_nomem(T->ctx);
    }
    for (int i = 0; i < n; i++) {
        tim_op *t = &T->ops[i];
        const cmp_op *op = t->op;
        tim_srcs *s = &src[i];
        s->n = s->nd = 0;
        if (op->kind == CMP_CONTROL) continue;
        int full = 0, nin = inoff[i + 1] - inoff[i];
        const int *in = inl + inoff[i];
        for (int k = 0; k < nin && !full; k++) {
            int v = in[k], d = def[v];
            if (d >= 0 && dup[d]) {
                for (int j = 0; j < src[d].n && !full; j++) full = !tim_srcs_add(s, src[d].v[j], 1);
                for (int j = 0; j < src[d].nd && !full; j++) full = !tim_dups_add(s, src[d].d[j]);
                if (!full) full = !tim_dups_add(s, d);
            } else {
                full = !tim_srcs_add(s, v, 0);
            }
        }
        if (full) {   /* too many: read the op's own inputs (its producers stay materialized) */
            s->n = s->nd = 0;
            for (int k = 0; k < nin && k < TIM_SRC_MAX; k++) tim_srcs_add(s, in[k], 0);
            for (int k = 0; k < nin; k++) {
                int d = def[in[k]];
                if (d >= 0 && dup[d]) dup[d] = 2;   /* undone below: a reader needs it in HBM */
            }
        }
        /* duplicate this op into its consumers? (not one that reads or computes a chain computed once) */
        if (op->kind != CMP_LOOP || op->nout != 1 || full || extra[i] >= 0) continue;
        int v = op->out[0];
        const cmp_value *val = &p->values[v];
        if (val->kind != CMP_V_TEMP || val->alias >= 0 || readers[v] < 1 || !absorb[v]) continue;
        int cheap = 1;
        for (int m = 0; m < op->ninstrs && cheap; m++) cheap = tim_cheap(op->instrs[m]);
        if (!cheap) continue;
        int out_rank = tim_true_rank(&val->shape), large = 0;
        double in_elems = 0, out_elems = (double)hlo_shape_count(&val->shape);
        for (int j = 0; j < s->n; j++) {
            const hlo_shape *is = &p->values[s->v[j]].shape;
            in_elems += (double)hlo_shape_count(is);
            large += tim_true_rank(is) >= out_rank;
        }
        if (large <= 1 || in_elems <= out_elems) dup[i] = 1;
    }
    /* A producer some reader could not take after all (too many inputs) stays an op of its own. Rare; the
     * readers that did fold it in keep their estimate. */
    for (int i = 0; i < n; i++)
        if (dup[i] == 2) dup[i] = 0;
    /* traffic and work with the duplicated producers folded into their consumers: a consumer computes each
     * duplicated producer it absorbed once (a fusion computes a shared instruction once), so it does their
     * vector work */
    double *own_vpu = ut_malloc((size_t)n * sizeof *own_vpu);
    if (!own_vpu) {
        ut_free(extra); ut_free(inoff); ut_free(inl);
        ut_free(def); ut_free(readers); ut_free(charged); ut_free(absorb); ut_free(dup); ut_free(src);
        return ut_nomem(T->ctx);
    }
    for (int i = 0; i < n; i++) own_vpu[i] = T->ops[i].vpu_s;
    for (int i = 0; i < n; i++) {
        tim_op *t = &T->ops[i];
        const cmp_op *op = t->op;
        if (op->kind == CMP_CONTROL) continue;
        if (dup[i]) {
            t->fused_into = readers[op->out[0]];
            t->hbm_bytes = 0;
            t->hbm_s = t->mxu_s = t->overhead_s = 0;
            continue;
        }
        for (int j = 0; j < src[i].nd; j++)
            if (dup[src[i].d[j]]) t->vpu_s += own_vpu[src[i].d[j]];
        int fused = 0;
        for (int j = 0; j < src[i].n; j++) fused |= src[i].via[j];
        int sibling = op->kind == CMP_INPUT;
        for (int m = 0; m < op->ninstrs && sibling; m++) sibling = op->instrs[m]->op != HLO_FUSION;
        if (!fused && !sibling && extra[i] < 0) continue;
        int64_t bytes = extra[i] > 0 ? extra[i] : 0;
        for (int j = 0; j < src[i].n; j++) {
            int v = src[i].v[j];
            if (sibling) {
                int c = charged[v];
                int indep = c >= 0 && T->inst[c] == T->inst[i];
                /* a sibling: same walk of the same plan, and it does not read what the other one wrote */
                for (int k = 0; k < T->ops[c < 0 ? 0 : c].op->nout && indep; k++)
                    for (int q = 0; q < src[i].n && indep; q++) indep = src[i].v[q] != T->ops[c].op->out[k];
                if (indep) continue;
                charged[v] = i;
            }
            bytes += src[i].via[j] ? (p->values[v].vmem ? 0 : p->values[v].padded) : tim_read_bytes(T, op, v);
        }
        for (int k = 0; k < op->nout; k++) bytes += tim_write_bytes(T, op, op->out[k]);
        double bw = chip->hbm_bw * ((double)chip->cores_per_device / (double)(chip->cores_per_chip ? chip->cores_per_chip : 1));
        t->hbm_bytes = bytes;
        t->hbm_s = bw > 0 ? (double)bytes / bw : 0;
    }
    for (int i = 0; i < n; i++) {
        tim_op *t = &T->ops[i];
        if (t->op->kind == CMP_CONTROL) continue;
        if (dup[i]) {
            t->vpu_s = 0;
            tim_op_finish(chip, t);
            t->bound = TIM_BOUND_VECTOR;
        } else {
            tim_op_finish(chip, t);
        }
    }
    ut_free(own_vpu);
    ut_free(extra); ut_free(inoff); ut_free(inl);
    ut_free(def); ut_free(readers); ut_free(charged); ut_free(absorb); ut_free(dup); ut_free(src);
    return TPU_OK;
}

/* Samples per step: the leading dimension of the largest argument that is not donated state. */
static int64_t tim_guess_batch(const cmp_program *p)
{
    int64_t best = 0, bytes = 0;
    for (int v = 0; v < p->nvalues; v++) {
        const cmp_value *val = &p->values[v];
        if (val->kind != CMP_V_ARG || val->donated || val->shape.rank < 1) continue;
        if (val->padded > bytes) {
            bytes = val->padded;
            best = val->shape.dims[0];
        }
    }
    return best;
}

tpu_status tim_model(tpu_ctx *ctx, const cmp_program *p, const chp_slice *slice, const tim_opts *opts, tim_result **out)
{
    *out = NULL;
    tim_opts o = {0};
    if (opts) o = *opts;
    if (o.steps < 1) o.steps = 1;
    if (o.steps_per_exec < 1) o.steps_per_exec = 1;
    if (o.launch_s <= 0) o.launch_s = 30e-6;
    tim_result *r = ut_calloc(1, sizeof *r);
    if (!r) return ut_nomem(ctx);
    r->prog = p;
    r->slice = *slice;
    tim_state T = {0};
    T.ctx = ctx;
    T.p = p;
    T.slice = &r->slice;
    T.opts = &o;
    tpu_status st = tim_walk(&T, p->entry, 0, 1.0);
    if (!st) st = tim_fuse(&T);
    /* XLA combines small collectives first; then what hides behind compute (overlap.c) */
    if (!st) st = tim_overlap(ctx, p, &slice->chip, T.ops, T.inst, T.wtrips, T.n, T.inst_next + 1, &r->collective_hidden_s);
    ut_free(T.inst);
    ut_free(T.wtrips);
    if (st) {
        ut_free(T.ops);
        ut_free(r);
        return st;
    }
    r->ops = T.ops;
    r->nops = T.n;
    r->unknown_trips = T.unknown_trips;
    const chp_chip *chip = &slice->chip;
    for (int i = 0; i < r->nops; i++) {
        const tim_op *t = &r->ops[i];
        if (t->op->kind == CMP_CONTROL) continue;
        double s = t->time_s * t->count;
        r->device_s += s;
        r->by_bound[t->bound] += s;
        r->flops += t->flops * t->count;
        r->mxu_flops += t->mxu_flops * t->count;
        r->hbm_bytes += (int64_t)((double)t->hbm_bytes * t->count);
        r->ici_bytes += (int64_t)((double)t->ici_bytes * t->count);
    }
    /* the share of the collectives that ran beside compute is not step time */
    r->device_s -= r->collective_hidden_s;
    r->by_bound[TIM_BOUND_COLLECTIVE] -= r->collective_hidden_s;
    if (r->by_bound[TIM_BOUND_COLLECTIVE] < 0) r->by_bound[TIM_BOUND_COLLECTIVE] = 0;
    /* host: one launch per steps_per_exec steps; inputs that are not device-resident state cross PCIe */
    double launch = o.launch_s / o.steps_per_exec;
    double infeed_bytes = 0;
    if (o.infeed_args || hlo_module_attr(p->m, HK_INPUT_OUTPUT_ALIAS)) {
        for (int v = 0; v < p->nvalues; v++) {
            const cmp_value *val = &p->values[v];
            if (val->kind == CMP_V_ARG && !val->donated) infeed_bytes += (double)val->unpadded;
        }
    }
    double infeed_s = chip->host_bw > 0 ? infeed_bytes / chip->host_bw : 0;
    r->batch = o.batch > 0 ? o.batch : tim_guess_batch(p);
    r->input_s = o.input_rate > 0 && r->batch > 0 ? (double)r->batch / o.input_rate : 0;
    /* transfers and the input pipeline run beside the device (prefetch); the slowest of the three sets the
     * pace, and whatever the device is not computing is host time or idle time */
    double busy = r->device_s + launch;
    double step = busy;
    if (infeed_s > step) step = infeed_s;
    if (r->input_s > step) step = r->input_s;
    r->host_s = launch;
    r->idle_s = step - busy;
    r->step_s = step;
    r->by_bound[TIM_BOUND_HOST] += launch;
    r->by_bound[TIM_BOUND_IDLE] += r->idle_s;
    r->peak_flops = chp_device_peak_flops(chip);
    double mpeak = tim_mxu_peak_flops(chip);
    r->mxu_util = r->step_s > 0 && mpeak > 0 ? r->mxu_flops / (r->step_s * mpeak) : 0;
    r->flops_per_s = r->step_s > 0 ? r->flops / r->step_s : 0;
    r->bound = TIM_BOUND_COMPUTE;
    for (int b = 0; b < TIM_BOUND_COUNT; b++)
        if (r->by_bound[b] > r->by_bound[r->bound]) r->bound = (tim_bound)b;
    *out = r;
    return TPU_OK;
}

void tim_result_free(tim_result *r)
{
    if (!r) return;
    ut_free(r->ops);
    ut_free(r);
}
