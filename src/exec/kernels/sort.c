/* sort.c — sort (any number of operands permuted together by a comparator) and topk.
 *
 * sort(ops[N] of dims D), dimensions={d}, to_apply=cmp: every 1-d row along d is reordered by the comparator
 * cmp(lhs_0, rhs_0, lhs_1, rhs_1, ...) -> "lhs goes before rhs", and every operand gets the same permutation.
 * XLA:CPU sorts with libstdc++'s std::stable_sort (is_stable=true) or std::sort (introsort: median-of-three
 * quicksort down to 16-element runs, heapsort past 2 log2 n levels, then insertion sort), and tpusim runs
 * the same algorithms step for step: ties of an unstable sort, and comparators that are not strict weak
 * orders (a FLOAT compare with NaNs), come out in XLA:CPU's order. The generic path evaluates the comparator per
 * comparison;
 * comparators that only order operand 0 by < or > (FLOAT or TOTALORDER compare, or JAX's form that first
 * maps -0 to +0 and every NaN to one NaN and then compares in TOTALORDER) turn each key into an unsigned
 * integer with the same order and sort (key, position) pairs, which gives the identical permutation. A FLOAT
 * comparison is not a strict weak order when NaNs are present, so rows with NaNs take the generic path.
 *
 * topk(x), k, largest: along the last dimension, the k largest (smallest) elements in total order (-NaN <
 * -inf < ... < -0 < +0 < ... < +inf < +NaN), ties broken by the lower index; outputs (values, s32 indices).
 * That is XLA's definition (a stable sort with a total-order comparator, then a slice).
 */
#include "exec/exec.h"
#include "exec/exe_par.h"
#include "exec/exe_ops.h"
#include "exec/kernels/ref.h"
#include "util/fp.h"

#include <math.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>

#define ST_MAX_OPS 32

/* ---- order-preserving integer keys ---- */

typedef enum { SK_NONE, SK_FLOAT, SK_TOTAL, SK_CANON_TOTAL, SK_INT } sk_mode;

/* Maps element i to an unsigned key whose unsigned order is the element order in `mode`. */
static uint64_t st_key(tpu_dtype t, const void *base, int64_t i, sk_mode mode)
{
    uint64_t bits;
    int nbits;
    switch (t) {
    case TPU_F32: {
        uint32_t u;
        memcpy(&u, (const char *)base + i * 4, 4);
        bits = u;
        nbits = 32;
        break;
    }
    case TPU_F64:
        memcpy(&bits, (const char *)base + i * 8, 8);
        nbits = 64;
        break;
    case TPU_BF16: {
        uint16_t h;
        memcpy(&h, (const char *)base + i * 2, 2);
        bits = (uint64_t)h << 16;   /* the f32 with the same value, without a float register */
        nbits = 32;
        break;
    }
    case TPU_F16: {
        float f = (float)ten_load_f64(t, base, i);   /* exact (f16 subnormals are f32 normals); keeps NaN sign */
        uint32_t u;
        memcpy(&u, &f, 4);
        bits = u;
        nbits = 32;
        break;
    }
    default: {
        /* integers: signed ones biased so the unsigned order is the signed order */
        int64_t v = ten_load_i64(t, base, i);
        if (tpu_dtype_kind(t) == 's') return (uint64_t)v ^ (1ull << 63);
        int b = tpu_dtype_bits(t);
        return b >= 64 ? (uint64_t)v : (uint64_t)v & ((1ull << b) - 1);
    }
    }
    uint64_t sign = 1ull << (nbits - 1), mask = nbits == 64 ? ~0ull : (1ull << nbits) - 1;
    uint64_t expo = nbits == 64 ? 0x7FF0000000000000ull : 0x7F800000ull;
    int is_nan = (bits & ~sign & mask) > expo;
    if (mode == SK_FLOAT || mode == SK_CANON_TOTAL) {
        /* -0 == +0, and subnormals compare as zero (XLA:CPU runs with denormals-are-zero) */
        if ((bits & expo) == 0) bits = 0;
        if (mode == SK_CANON_TOTAL && is_nan) bits = nbits == 64 ? 0x7FF8000000000000ull : 0x7FC00000ull;
    }
    /* sign-magnitude -> offset binary */
    return (bits & sign) ? (~bits & mask) : (bits | sign);
}

static int st_is_float(tpu_dtype t) { return t == TPU_F32 || t == TPU_F64 || t == TPU_BF16 || t == TPU_F16; }

static int st_row_has_nan(tpu_dtype t, const void *base, int64_t off, int64_t stride, int64_t n)
{
    for (int64_t j = 0; j < n; j++)
        if (isnan(ten_load_f64(t, base, off + j * stride))) return 1;
    return 0;
}

/* ---- comparator recognition ---- */

static int st_is_const(const hlo_instr *x, double v, int want_nan)
{
    if (x->op != HLO_CONSTANT || !x->literal || x->literal->elided || x->shape.rank != 0) return 0;
    double c = ten_load_f64((tpu_dtype)x->shape.dtype, x->literal->data, 0);
    return want_nan ? isnan(c) : c == v;
}

static int st_is_cmp(const hlo_instr *x, const char *dir)
{
    const char *d = hlo_attr_str(x, HK_DIRECTION);
    return x->op == HLO_COMPARE && x->nops == 2 && d && !strcmp(d, dir);
}

/* Parameter number p if x is `p` (canon=0) or JAX's canonicalisation of p (canon=1):
 *   select(compare(p, p, NE), nan, select(compare(p, 0, EQ), 0, p)); else -1. */
static int st_param_of(const hlo_instr *x, int *canon)
{
    if (x->op == HLO_PARAMETER) {
        *canon = 0;
        return (int)x->param_no;
    }
    if (x->op != HLO_SELECT || x->nops != 3) return -1;
    const hlo_instr *ne = x->ops[0], *inner = x->ops[2];
    if (!st_is_cmp(ne, "NE") || ne->ops[0] != ne->ops[1] || ne->ops[0]->op != HLO_PARAMETER) return -1;
    const hlo_instr *p = ne->ops[0];
    if (!st_is_const(x->ops[1], 0, 1)) return -1;
    if (inner->op != HLO_SELECT || inner->nops != 3 || inner->ops[2] != p) return -1;
    const hlo_instr *eq = inner->ops[0];
    if (!st_is_cmp(eq, "EQ") || eq->ops[0] != p || !st_is_const(eq->ops[1], 0, 0) || !st_is_const(inner->ops[1], 0, 0))
        return -1;
    *canon = 1;
    return (int)p->param_no;
}

/* Does the comparator order by operand 0 alone with < or >? Sets the key mode and direction. */
static sk_mode st_fast_mode(const hlo_comp *c, tpu_dtype t, int *descending)
{
    const hlo_instr *r = c->root;
    if (r->op != HLO_COMPARE || r->nops != 2) return SK_NONE;
    const char *dir = hlo_attr_str(r, HK_DIRECTION), *type = hlo_attr_str(r, HK_TYPE);
    if (!dir || (strcmp(dir, "LT") && strcmp(dir, "GT"))) return SK_NONE;
    int ca, cb;
    int a = st_param_of(r->ops[0], &ca), b = st_param_of(r->ops[1], &cb);
    if (!((a == 0 && b == 1) || (a == 1 && b == 0)) || ca != cb) return SK_NONE;
    *descending = (a == 0) == !strcmp(dir, "GT");
    if (st_is_float(t)) {
        int total = type && !strcmp(type, "TOTALORDER");
        if (type && !total && strcmp(type, "FLOAT")) return SK_NONE;
        if (ca) return total ? SK_CANON_TOTAL : SK_NONE;
        return total ? SK_TOTAL : SK_FLOAT;
    }
    if (ca) return SK_NONE;
    char k = tpu_dtype_kind(t);
    if (k != 's' && k != 'u' && k != 'p') return SK_NONE;
    if (type && strcmp(type, k == 's' ? "SIGNED" : "UNSIGNED")) return SK_NONE;
    return SK_INT;
}

/* ---- sorting a permutation ---- */

typedef struct st_pair {
    uint64_t key;
    int64_t  pos;
} st_pair;

static int st_pair_cmp(const void *x, const void *y)
{
    const st_pair *a = x, *b = y;
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    return a->pos < b->pos ? -1 : a->pos > b->pos;
}

typedef struct st_gen {
    const exe_scalar_fn *fn;
    int                  n;
    exe_scalar          *vals;   /* n rows of len values */
    int64_t              len;
} st_gen;

static int st_less(const st_gen *g, int64_t i, int64_t j)
{
    exe_scalar args[2 * ST_MAX_OPS], r;
    for (int k = 0; k < g->n; k++) {
        args[2 * k] = g->vals[k * g->len + i];
        args[2 * k + 1] = g->vals[k * g->len + j];
    }
    exe_scalar_fn_eval(g->fn, args, &r);
    return r.i != 0;
}

/* ---- libstdc++'s std::sort, on a permutation (what XLA:CPU does for is_stable=false) ---- */

typedef struct st_cmp {
    int (*less)(const void *ctx, int64_t a, int64_t b);   /* element a goes before element b */
    const void *ctx;
} st_cmp;

#define ST_LESS(c, a, b) ((c)->less((c)->ctx, (a), (b)))

static void st_swap(int64_t *a, int64_t *b)
{
    int64_t t = *a;
    *a = *b;
    *b = t;
}

static void st_move_median_to_first(const st_cmp *c, int64_t *r, int64_t *a, int64_t *b, int64_t *d)
{
    if (ST_LESS(c, *a, *b)) {
        if (ST_LESS(c, *b, *d)) st_swap(r, b);
        else if (ST_LESS(c, *a, *d)) st_swap(r, d);
        else st_swap(r, a);
    } else if (ST_LESS(c, *a, *d)) st_swap(r, a);
    else if (ST_LESS(c, *b, *d)) st_swap(r, d);
    else st_swap(r, b);
}

/* libstdc++'s loops here are "unguarded": they stop at the pivot or the run's minimum only because the
 * comparator is a strict weak order. A user's comparator need not be one (direction=LE, always true), so each
 * loop also stops at the range's end; for a strict weak order the bound is never reached and the order is
 * libstdc++'s, step for step. */
static int64_t *st_unguarded_partition(const st_cmp *c, int64_t *first, int64_t *last, const int64_t *pivot)
{
    int64_t *const end = last;
    for (;;) {
        while (first < end && ST_LESS(c, *first, *pivot)) ++first;
        --last;
        while (last > pivot && ST_LESS(c, *pivot, *last)) --last;
        if (!(first < last)) return first;
        st_swap(first, last);
        ++first;
    }
}

static void st_adjust_heap(const st_cmp *c, int64_t *first, int64_t hole, int64_t len, int64_t value)
{
    int64_t top = hole, child = hole;
    while (child < (len - 1) / 2) {
        child = 2 * (child + 1);
        if (ST_LESS(c, first[child], first[child - 1])) child--;
        first[hole] = first[child];
        hole = child;
    }
    if ((len & 1) == 0 && child == (len - 2) / 2) {
        child = 2 * (child + 1);
        first[hole] = first[child - 1];
        hole = child - 1;
    }
    int64_t parent = (hole - 1) / 2;
    while (hole > top && ST_LESS(c, first[parent], value)) {
        first[hole] = first[parent];
        hole = parent;
        parent = (hole - 1) / 2;
    }
    first[hole] = value;
}

static void st_heap_sort(const st_cmp *c, int64_t *first, int64_t *last)
{
    int64_t len = last - first;
    if (len >= 2)
        for (int64_t parent = (len - 2) / 2;; parent--) {
            st_adjust_heap(c, first, parent, len, first[parent]);
            if (parent == 0) break;
        }
    while (last - first > 1) {
        --last;
        int64_t v = *last;
        *last = *first;
        st_adjust_heap(c, first, 0, last - first, v);
    }
}

static void st_introsort_loop(const st_cmp *c, int64_t *first, int64_t *last, int depth)
{
    while (last - first > 16) {
        if (depth == 0) {
            st_heap_sort(c, first, last);
            return;
        }
        depth--;
        int64_t *mid = first + (last - first) / 2;
        st_move_median_to_first(c, first, first + 1, mid, last - 1);
        int64_t *cut = st_unguarded_partition(c, first + 1, last, first);
        st_introsort_loop(c, cut, last, depth);
        last = cut;
    }
}

static void st_unguarded_linear_insert(const st_cmp *c, const int64_t *base, int64_t *last)
{
    int64_t v = *last;
    while (last > base && ST_LESS(c, v, last[-1])) {
        *last = last[-1];
        last--;
    }
    *last = v;
}

static void st_insertion_sort(const st_cmp *c, int64_t *first, int64_t *last)
{
    if (first == last) return;
    for (int64_t *i = first + 1; i != last; ++i) {
        if (ST_LESS(c, *i, *first)) {
            int64_t v = *i;
            memmove(first + 1, first, (size_t)(i - first) * sizeof *first);
            *first = v;
        } else {
            st_unguarded_linear_insert(c, first, i);
        }
    }
}

static void st_std_sort(const st_cmp *c, int64_t *perm, int64_t n)
{
    if (n < 2) return;
    int lg = 0;
    while ((n >> (lg + 1)) > 0) lg++;
    st_introsort_loop(c, perm, perm + n, 2 * lg);
    if (n > 16) {
        st_insertion_sort(c, perm, perm + 16);
        for (int64_t *i = perm + 16; i != perm + n; ++i) st_unguarded_linear_insert(c, perm, i);
    } else {
        st_insertion_sort(c, perm, perm + n);
    }
}

/* libstdc++'s std::stable_sort with its (n+1)/2 temporary buffer (what XLA:CPU does for is_stable=true).
 * Any stable sort gives the same order for a consistent comparator; this one also gives XLA:CPU's order for
 * comparators that are not strict weak orders (a FLOAT compare with NaNs). buf: (n + 1) / 2 entries. */
static int64_t *st_move_merge(const st_cmp *c, int64_t *f1, int64_t *l1, int64_t *f2, int64_t *l2, int64_t *out)
{
    while (f1 != l1 && f2 != l2) *out++ = ST_LESS(c, *f2, *f1) ? *f2++ : *f1++;
    while (f1 != l1) *out++ = *f1++;
    while (f2 != l2) *out++ = *f2++;
    return out;
}

static void st_merge_sort_loop(const st_cmp *c, int64_t *first, int64_t *last, int64_t *out, int64_t step)
{
    int64_t two = 2 * step;
    while (last - first >= two) {
        out = st_move_merge(c, first, first + step, first + step, first + two, out);
        first += two;
    }
    if (last - first < step) step = last - first;
    st_move_merge(c, first, first + step, first + step, last, out);
}

static void st_merge_sort_with_buffer(const st_cmp *c, int64_t *first, int64_t *last, int64_t *buf)
{
    int64_t len = last - first, step = 7;
    int64_t *f = first;
    for (; last - f >= step; f += step) st_insertion_sort(c, f, f + step);
    st_insertion_sort(c, f, last);
    while (step < len) {
        st_merge_sort_loop(c, first, last, buf, step);
        step *= 2;
        st_merge_sort_loop(c, buf, buf + len, first, step);
        step *= 2;
    }
}

static void st_std_stable_sort(const st_cmp *c, int64_t *perm, int64_t n, int64_t *buf)
{
    if (n < 2) return;
    int64_t len1 = (n + 1) / 2, len2 = n - len1;
    int64_t *mid = perm + len1, *last = perm + n;
    st_merge_sort_with_buffer(c, perm, mid, buf);
    st_merge_sort_with_buffer(c, mid, last, buf);
    if (len1 <= len2) {
        /* forward: the first half from the buffer */
        memcpy(buf, perm, (size_t)len1 * sizeof *buf);
        int64_t *f1 = buf, *l1 = buf + len1, *f2 = mid, *out = perm;
        while (f1 != l1 && f2 != last) *out++ = ST_LESS(c, *f2, *f1) ? *f2++ : *f1++;
        while (f1 != l1) *out++ = *f1++;
        return;
    }
    /* backward: the second half from the buffer */
    memcpy(buf, mid, (size_t)len2 * sizeof *buf);
    int64_t *f1 = perm, *l1 = mid, *f2 = buf, *l2 = buf + len2, *res = last;
    if (f2 == l2) return;
    --l1;
    --l2;
    for (;;) {
        if (ST_LESS(c, *l2, *l1)) {
            *--res = *l1;
            if (f1 == l1) {
                ++l2;
                while (l2 != f2) *--res = *--l2;
                return;
            }
            --l1;
        } else {
            *--res = *l2;
            if (f2 == l2) return;
            --l2;
        }
    }
}

static int st_less_gen(const void *ctx, int64_t a, int64_t b) { return st_less((const st_gen *)ctx, a, b); }

static int st_less_key(const void *ctx, int64_t a, int64_t b)
{
    const uint64_t *k = ctx;
    return k[a] < k[b];
}

/* ---- sort ---- */

typedef struct st_plan {
    int                  n, dim;
    const tpu_tensor    *x[ST_MAX_OPS];
    tpu_tensor          *res[ST_MAX_OPS];
    const exe_scalar_fn *fn;
    sk_mode              mode;
    int                  desc, stable;
    int64_t              len, stride, rows;
} st_plan;

static void st_free(st_plan *p)
{
    for (int i = 0; i < p->n; i++) tpu_tensor_free(p->res[i]);
}

static tpu_status st_setup(exe_state *S, const hlo_instr *in, exe_value *const *ops, st_plan *p)
{
    memset(p, 0, sizeof *p);
    int n = in->nops;
    if (n < 1 || n > ST_MAX_OPS) return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "sort of %d operands (1 to %d supported)", n, ST_MAX_OPS);
    p->n = n;
    for (int i = 0; i < n; i++) {
        p->x[i] = ops[i]->t;
        if (!p->x[i]) return exe_fail(S, in, TPU_ERR_SHAPE, "operand %d is not an array", i);
        if (p->x[i]->rank != p->x[0]->rank || memcmp(p->x[i]->dims, p->x[0]->dims, sizeof(int64_t) * (size_t)p->x[0]->rank))
            return exe_fail(S, in, TPU_ERR_SHAPE, "all operands must have the same dimensions");
        char k = tpu_dtype_kind(p->x[i]->dtype);
        if (k == 'o') return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "sorting %s elements is not supported", tpu_dtype_name(p->x[i]->dtype));
    }
    const int64_t *dv;
    int nd = hlo_attr_ints(in, HK_DIMENSIONS, &dv);
    int rank = p->x[0]->rank;
    if (nd != 1 || dv[0] < 0 || dv[0] >= (rank ? rank : 1))
        return exe_fail(S, in, TPU_ERR_SHAPE, "dimensions={d} must name one dimension of the rank-%d operands", rank);
    p->dim = (int)dv[0];
    if (in->ncalled != 1) return exe_fail(S, in, TPU_ERR_SHAPE, "needs to_apply=");
    tpu_status st = exe_scalar_fn_get(S, in->called[0], &p->fn);
    if (st) return st;
    if (exe_scalar_fn_nparams(p->fn) != 2 * n || exe_scalar_fn_nresults(p->fn) != 1)
        return exe_fail(S, in, TPU_ERR_SHAPE, "the comparator takes %d parameters; %d operands need %d", exe_scalar_fn_nparams(p->fn), n, 2 * n);
    for (int i = 0; i < 2 * n; i++)
        if (exe_scalar_fn_param_dtype(p->fn, i) != p->x[i / 2]->dtype)
            return exe_fail(S, in, TPU_ERR_SHAPE, "comparator parameter %d is %s but operand %d is %s", i,
                            tpu_dtype_name(exe_scalar_fn_param_dtype(p->fn, i)), i / 2, tpu_dtype_name(p->x[i / 2]->dtype));
    p->mode = st_fast_mode(in->called[0], p->x[0]->dtype, &p->desc);
    p->stable = hlo_attr_bool(in, HK_IS_STABLE, 0);
    p->len = rank ? p->x[0]->dims[p->dim] : 1;
    p->stride = 1;
    for (int d = p->dim + 1; d < rank; d++) p->stride *= p->x[0]->dims[d];
    p->rows = p->len ? p->x[0]->count / p->len : 0;
    for (int i = 0; i < n; i++) {
        const hlo_shape *s = n == 1 ? &in->shape : (hlo_shape_is_tuple(&in->shape) && in->shape.ntuple == n ? &in->shape.tuple[i] : NULL);
        if (!s || !hlo_shape_is_array(s) || s->dtype != p->x[i]->dtype || hlo_shape_count(s) != p->x[i]->count) {
            st_free(p);
            return exe_fail(S, in, TPU_ERR_SHAPE, "result %d must have operand %d's shape", i, i);
        }
        if ((st = exe_alloc_shape(S, s, &p->res[i]))) {
            st_free(p);
            return st;
        }
    }
    return TPU_OK;
}

/* Writes row r of every operand permuted by perm. */
static void st_permute(st_plan *p, int64_t r, const int64_t *perm)
{
    int64_t base = (r / p->stride) * p->len * p->stride + r % p->stride;
    for (int i = 0; i < p->n; i++) {
        size_t es = tpu_dtype_size(p->x[i]->dtype);
        const char *src = (const char *)p->x[i]->data;
        char *dst = (char *)p->res[i]->data;
        for (int64_t j = 0; j < p->len; j++)
            memcpy(dst + (base + j * p->stride) * (int64_t)es, src + (base + perm[j] * p->stride) * (int64_t)es, es);
    }
}

static tpu_status st_result(exe_state *S, st_plan *p, exe_value **out)
{
    exe_value *v[ST_MAX_OPS];
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

/* Sorts row r generically (comparator per comparison). vals: n*len scratch, perm/tmp: len. */
static void st_row_generic(st_plan *p, int64_t r, exe_scalar *vals, int64_t *perm, int64_t *tmp)
{
    int64_t base = (r / p->stride) * p->len * p->stride + r % p->stride;
    for (int i = 0; i < p->n; i++)
        for (int64_t j = 0; j < p->len; j++)
            vals[i * p->len + j] = exe_scalar_load(p->x[i]->dtype, p->x[i]->data, base + j * p->stride);
    for (int64_t j = 0; j < p->len; j++) perm[j] = j;
    st_gen g = {p->fn, p->n, vals, p->len};
    st_cmp c = {st_less_gen, &g};
    if (p->stable) st_std_stable_sort(&c, perm, p->len, tmp);
    else st_std_sort(&c, perm, p->len);
}

EXE_KERNEL(exe_k_sort)
{
    if (EXE_FORCE_REF(S)) return exe_k_sort_ref(S, in, ops, out);
    st_plan p;
    tpu_status st = st_setup(S, in, ops, &p);
    if (st) return st;
    int64_t L = p.len;
    int64_t *perm = ut_malloc((size_t)(L ? L : 1) * 2 * sizeof *perm);
    /* stable: (key, position) pairs; unstable: keys by position (in the same allocation) */
    st_pair *pairs = ut_malloc((size_t)(L ? L : 1) * sizeof *pairs);
    exe_scalar *vals = p.mode == SK_NONE || p.mode == SK_FLOAT ? ut_malloc((size_t)(L ? L : 1) * (size_t)p.n * sizeof *vals) : NULL;
    if (!perm || !pairs || ((p.mode == SK_NONE || p.mode == SK_FLOAT) && !vals)) {
        ut_free(perm);
        ut_free(pairs);
        ut_free(vals);
        st_free(&p);
        return ut_nomem(S->ctx);
    }
    tpu_dtype kt = p.x[0]->dtype;
    for (int64_t r = 0; r < p.rows; r++) {
        int64_t base = (r / p.stride) * L * p.stride + r % p.stride;
        int fast = p.mode != SK_NONE && !(p.mode == SK_FLOAT && st_row_has_nan(kt, p.x[0]->data, base, p.stride, L));
        if (fast && p.stable) {
            for (int64_t j = 0; j < L; j++) {
                uint64_t k = st_key(kt, p.x[0]->data, base + j * p.stride, p.mode);
                pairs[j].key = p.desc ? ~k : k;
                pairs[j].pos = j;
            }
            qsort(pairs, (size_t)L, sizeof *pairs, st_pair_cmp);
            for (int64_t j = 0; j < L; j++) perm[j] = pairs[j].pos;
        } else if (fast) {
            uint64_t *keys = (uint64_t *)pairs;
            for (int64_t j = 0; j < L; j++) {
                uint64_t k = st_key(kt, p.x[0]->data, base + j * p.stride, p.mode);
                keys[j] = p.desc ? ~k : k;
                perm[j] = j;
            }
            st_cmp c = {st_less_key, keys};
            st_std_sort(&c, perm, L);
        } else {
            st_row_generic(&p, r, vals, perm, perm + L);
        }
        st_permute(&p, r, perm);
    }
    ut_free(perm);
    ut_free(pairs);
    ut_free(vals);
    return st_result(S, &p, out);
}

/* Reference: every row through the comparator (no key transform). */
EXE_KERNEL(exe_k_sort_ref)
{
    st_plan p;
    tpu_status st = st_setup(S, in, ops, &p);
    if (st) return st;
    int64_t L = p.len;
    int64_t *perm = ut_malloc((size_t)(L ? L : 1) * 2 * sizeof *perm);
    exe_scalar *vals = ut_malloc((size_t)(L ? L : 1) * (size_t)p.n * sizeof *vals);
    if (!perm || !vals) {
        ut_free(perm);
        ut_free(vals);
        st_free(&p);
        return ut_nomem(S->ctx);
    }
    st_gen g = {p.fn, p.n, vals, L};
    for (int64_t r = 0; r < p.rows; r++) {
        int64_t base = (r / p.stride) * L * p.stride + r % p.stride;
        for (int i = 0; i < p.n; i++)
            for (int64_t j = 0; j < L; j++) vals[i * L + j] = exe_scalar_load(p.x[i]->dtype, p.x[i]->data, base + j * p.stride);
        /* the algorithms are the specification here (XLA:CPU's std::stable_sort / std::sort); what the
         * reference checks is the fast kernel's key transform against the comparator itself */
        for (int64_t i = 0; i < L; i++) perm[i] = i;
        st_cmp c = {st_less_gen, &g};
        if (p.stable) st_std_stable_sort(&c, perm, L, perm + L);
        else st_std_sort(&c, perm, L);
        st_permute(&p, r, perm);
    }
    ut_free(perm);
    ut_free(vals);
    return st_result(S, &p, out);
}

/* ---- topk ---- */

typedef struct tk_plan {
    const tpu_tensor *x;
    tpu_tensor       *vals, *idx;
    int64_t           k, len, rows;
    int               largest;
} tk_plan;

static tpu_status tk_setup(exe_state *S, const hlo_instr *in, exe_value *const *ops, tk_plan *p)
{
    memset(p, 0, sizeof *p);
    if (in->nops != 1 || !ops[0]->t) return exe_fail(S, in, TPU_ERR_SHAPE, "needs one array operand");
    p->x = ops[0]->t;
    char kind = tpu_dtype_kind(p->x->dtype);
    if (p->x->rank < 1) return exe_fail(S, in, TPU_ERR_SHAPE, "operand must have rank >= 1");
    if (kind == 'c' || kind == 'o' || (kind == 'f' && !st_is_float(p->x->dtype) && p->x->dtype != TPU_F64))
        return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "topk of %s elements is not supported", tpu_dtype_name(p->x->dtype));
    if (!hlo_attr_find(in, HK_K)) return exe_fail(S, in, TPU_ERR_SHAPE, "k= is missing");
    p->k = hlo_attr_int(in, HK_K, 0);
    p->largest = hlo_attr_bool(in, HK_LARGEST, 1);
    p->len = p->x->dims[p->x->rank - 1];
    if (p->k < 0 || p->k > p->len)
        return exe_fail(S, in, TPU_ERR_SHAPE, "k=%lld is outside [0, %lld]", (long long)p->k, (long long)p->len);
    p->rows = p->len ? p->x->count / p->len : 0;
    const hlo_shape *s = &in->shape;
    if (!hlo_shape_is_tuple(s) || s->ntuple != 2 || !hlo_shape_is_array(&s->tuple[0]) || s->tuple[1].dtype != TPU_S32 ||
        s->tuple[0].dtype != p->x->dtype || s->tuple[0].rank != p->x->rank || s->tuple[1].rank != p->x->rank ||
        s->tuple[0].dims[p->x->rank - 1] != p->k || s->tuple[1].dims[p->x->rank - 1] != p->k)
        return exe_fail(S, in, TPU_ERR_SHAPE, "result must be (values[..., k], s32[..., k])");
    tpu_status st = exe_alloc_shape(S, &s->tuple[0], &p->vals);
    if (st) return st;
    if ((st = exe_alloc_shape(S, &s->tuple[1], &p->idx))) {
        tpu_tensor_free(p->vals);
        return st;
    }
    return TPU_OK;
}

static tpu_status tk_result(exe_state *S, tk_plan *p, exe_value **out)
{
    exe_value *v[2] = {exe_value_array(p->vals), exe_value_array(p->idx)};
    if (!v[0] || !v[1]) {
        exe_value_unref(v[0]);
        exe_value_unref(v[1]);
        return ut_nomem(S->ctx);
    }
    *out = exe_value_tuple(v, 2);
    return *out ? TPU_OK : ut_nomem(S->ctx);
}

static void tk_store(tk_plan *p, int64_t r, int64_t j, int64_t pos)
{
    size_t es = tpu_dtype_size(p->x->dtype);
    memcpy((char *)p->vals->data + (r * p->k + j) * (int64_t)es, (const char *)p->x->data + (r * p->len + pos) * (int64_t)es, es);
    ((int32_t *)p->idx->data)[r * p->k + j] = (int32_t)pos;
}

/* (key, pos) pairs are ordered strictly (ties by position), so the k best are one definite set and order */
static inline int tk_less(const st_pair *a, const st_pair *b)
{
    return a->key != b->key ? a->key < b->key : a->pos < b->pos;
}

/* heap[0..n) a max-heap by tk_less: the root is the worst of the best k so far */
static void tk_sift_down(st_pair *h, int64_t n, int64_t i)
{
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && tk_less(&h[m], &h[l])) m = l;
        if (r < n && tk_less(&h[m], &h[r])) m = r;
        if (m == i) return;
        st_pair t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

typedef struct tk_job {
    tk_plan    *p;
    sk_mode     mode;
    _Atomic int failed;
} tk_job;

/* The k best of each row in one pass: a candidate enters only when it beats the heap's worst (most of a long
 * row is one comparison), then the k are sorted. */
static void tk_rows(void *ctx, int64_t r0, int64_t r1, int tid)
{
    tk_job *J = ctx;
    tk_plan *p = J->p;
    st_pair *h = ut_malloc((size_t)(p->k ? p->k : 1) * sizeof *h);
    if (!h) {
        atomic_store(&J->failed, 1);
        return;
    }
    for (int64_t r = r0; r < r1; r++) {
        int64_t n = 0;
        for (int64_t j = 0; j < p->len && p->k > 0; j++) {
            uint64_t key = st_key(p->x->dtype, p->x->data, r * p->len + j, J->mode);
            st_pair c = {p->largest ? ~key : key, j};
            if (n < p->k) {
                h[n++] = c;
                if (n == p->k)
                    for (int64_t i = n / 2 - 1; i >= 0; i--) tk_sift_down(h, n, i);
            } else if (tk_less(&c, &h[0])) {
                h[0] = c;
                tk_sift_down(h, n, 0);
            }
        }
        qsort(h, (size_t)n, sizeof *h, st_pair_cmp);
        for (int64_t j = 0; j < p->k; j++) tk_store(p, r, j, h[j].pos);
    }
    ut_free(h);
    (void)tid;
}

/* f32 key of st_key(SK_TOTAL) as 32 bits: sign-magnitude -> offset binary (NaNs by their bits) */
static inline __attribute__((always_inline)) uint32_t tk_key32(uint32_t b)
{
    return (b & 0x80000000u) ? ~b : b | 0x80000000u;
}

/* Which of u[0..TK_BLK) beat the threshold key (strictly: later positions lose ties)? hit[i] = 0 or 1; returns
 * whether any does. */
#define TK_BLK 32
static inline __attribute__((always_inline)) int tk_block_hits(const uint32_t *u, uint32_t thr, int largest, uint8_t *hit)
{
    int any = 0;
    if (largest)
        for (int i = 0; i < TK_BLK; i++) any |= hit[i] = tk_key32(u[i]) > thr;
    else
        for (int i = 0; i < TK_BLK; i++) any |= hit[i] = tk_key32(u[i]) < thr;
    return any;
}

/* tk_rows for f32 rows: the same heap and order, with blocks of TK_BLK elements that cannot enter (all but a
 * few hundred of a long row once the heap holds good candidates) rejected by one vector test against the
 * heap's worst key instead of a key and a comparison per element. */
EXE_VEC
static void tk_rows_f32(void *ctx, int64_t r0, int64_t r1, int tid)
{
    tk_job *J = ctx;
    tk_plan *p = J->p;
    int64_t k = p->k, len = p->len;
    int largest = p->largest;
    st_pair *h = ut_malloc((size_t)(k ? k : 1) * sizeof *h);
    if (!h) {
        atomic_store(&J->failed, 1);
        return;
    }
    for (int64_t r = r0; r < r1; r++) {
        const uint32_t *u = (const uint32_t *)p->x->data + r * len;
        int64_t n = 0, j = 0;
        for (; j < len && n < k; j++) {
            uint64_t key = tk_key32(u[j]);
            h[n++] = (st_pair){largest ? ~key : key, j};
        }
        for (int64_t i = n / 2 - 1; i >= 0; i--) tk_sift_down(h, n, i);
        while (j < len && k > 0) {
            uint32_t thr = (uint32_t)(largest ? ~h[0].key : h[0].key);
            if (j + TK_BLK <= len) {
                /* only the elements that beat the threshold at the block's start can enter (it only rises):
                 * the set bytes of hit[], a word at a time */
                _Alignas(8) uint8_t hit[TK_BLK];
                if (tk_block_hits(u + j, thr, largest, hit))
                    for (int w = 0; w < TK_BLK / 8; w++) {
                        uint64_t m;
                        memcpy(&m, hit + 8 * w, 8);
                        for (; m; m &= m - 1) {
                            int64_t jj = j + 8 * w + __builtin_ctzll(m) / 8;
                            uint64_t key = tk_key32(u[jj]);
                            st_pair c = {largest ? ~key : key, jj};
                            if (tk_less(&c, &h[0])) {
                                h[0] = c;
                                tk_sift_down(h, n, 0);
                            }
                        }
                    }
                j += TK_BLK;
                continue;
            }
            for (int64_t e = UT_MIN(len, j + TK_BLK); j < e; j++) {
                uint64_t key = tk_key32(u[j]);
                st_pair c = {largest ? ~key : key, j};
                if (tk_less(&c, &h[0])) {
                    h[0] = c;
                    tk_sift_down(h, n, 0);
                }
            }
        }
        qsort(h, (size_t)n, sizeof *h, st_pair_cmp);
        for (int64_t i = 0; i < k; i++) tk_store(p, r, i, h[i].pos);
    }
    ut_free(h);
    (void)tid;
}

EXE_KERNEL(exe_k_topk)
{
    if (EXE_FORCE_REF(S)) return exe_k_topk_ref(S, in, ops, out);
    tk_plan p;
    tpu_status st = tk_setup(S, in, ops, &p);
    if (st) return st;
    tk_job J = {&p, st_is_float(p.x->dtype) ? SK_TOTAL : SK_INT, 0};
    exe_par_for(p.rows * p.len > 65536 ? S->threads : 1, p.rows, UT_MAX((int64_t)1, 65536 / UT_MAX(p.len, (int64_t)1)),
                p.x->dtype == TPU_F32 ? tk_rows_f32 : tk_rows, &J);
    if (atomic_load(&J.failed)) {
        tpu_tensor_free(p.vals);
        tpu_tensor_free(p.idx);
        return ut_nomem(S->ctx);
    }
    return tk_result(S, &p, out);
}

/* Reference: k passes of "best remaining element" with exe_scalar_compare in TOTALORDER. */
EXE_KERNEL(exe_k_topk_ref)
{
    tk_plan p;
    tpu_status st = tk_setup(S, in, ops, &p);
    if (st) return st;
    uint8_t *used = ut_calloc((size_t)(p.len ? p.len : 1), 1);
    if (!used) {
        tpu_tensor_free(p.vals);
        tpu_tensor_free(p.idx);
        return ut_nomem(S->ctx);
    }
    tpu_dtype t = p.x->dtype;
    const char *type = st_is_float(t) ? "TOTALORDER" : NULL;
    for (int64_t r = 0; r < p.rows; r++) {
        memset(used, 0, (size_t)p.len);
        for (int64_t j = 0; j < p.k; j++) {
            int64_t best = -1;
            for (int64_t c = 0; c < p.len; c++) {
                if (used[c]) continue;
                if (best < 0) {
                    best = c;
                    continue;
                }
                exe_scalar a = exe_scalar_load(t, p.x->data, r * p.len + c), b = exe_scalar_load(t, p.x->data, r * p.len + best);
                if (exe_scalar_compare(t, a, b, p.largest ? "GT" : "LT", type)) best = c;
            }
            used[best] = 1;
            tk_store(&p, r, j, best);
        }
    }
    ut_free(used);
    return tk_result(S, &p, out);
}
