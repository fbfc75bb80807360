/* reduce.c — reduce (single and variadic, any reducer computation).
 *
 * Inputs are first arranged so the reduced dimensions are innermost (a strided copy, skipped when they
 * already are); then every output element folds one contiguous run. f32/f64 sums use a double accumulator
 * (closer to the exact sum than any fixed f32 order, which XLA does not promise either); max/min and the
 * generic reducer path follow the computation literally, rounding each step to its dtype. */
#include "exec/exec.h"
#include "exec/exe_ops.h"

#include <math.h>
#include <string.h>

/* Copies `a` into buf so that kept dimensions come first (in order) and reduced ones last (in order).
 * Returns a pointer to the arranged data (a->data itself when no move is needed). */
static const void *rd_arrange(const tpu_tensor *a, const uint8_t *is_red, void **buf, int *moved)
{
    int perm[TPU_MAX_RANK], np = 0;
    for (int i = 0; i < a->rank; i++)
        if (!is_red[i]) perm[np++] = i;
    for (int i = 0; i < a->rank; i++)
        if (is_red[i]) perm[np++] = i;
    int identity = 1;
    for (int i = 0; i < a->rank; i++)
        if (perm[i] != i && a->dims[perm[i]] != 1) identity = 0;
    /* size-1 dims may move freely: check the order of the non-trivial ones only */
    if (!identity) {
        int last = -1;
        identity = 1;
        for (int i = 0; i < a->rank; i++) {
            if (a->dims[perm[i]] == 1) continue;
            if (perm[i] < last) identity = 0;
            last = perm[i];
        }
    }
    *moved = 0;
    if (identity) return a->data;
    *buf = ut_malloc(a->nbytes ? a->nbytes : 1);
    if (!*buf) return NULL;
    int64_t as[TPU_MAX_RANK], pd[TPU_MAX_RANK], ps[TPU_MAX_RANK], ss[TPU_MAX_RANK];
    exe_strides(a, as);
    for (int i = 0; i < a->rank; i++) {
        pd[i] = a->dims[perm[i]];
        ss[i] = as[perm[i]];
    }
    int64_t s = 1;
    for (int i = a->rank - 1; i >= 0; i--) {
        ps[i] = s;
        s *= pd[i];
    }
    exe_nd_copy(*buf, ps, a->data, ss, pd, a->rank, tpu_dtype_size(a->dtype));
    *moved = 1;
    return *buf;
}

EXE_KERNEL(exe_k_reduce)
{
    int n = in->nops / 2;
    if (n < 1 || in->nops != 2 * n || in->ncalled != 1) return exe_fail(S, in, TPU_ERR_SHAPE, "needs N inputs, N inits and to_apply");
    if (n > 32) return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "reduce over more than 32 inputs");
    const int64_t *rd;
    int nrd = hlo_attr_ints(in, HK_DIMENSIONS, &rd);
    const tpu_tensor *a0 = ops[0]->t;
    if (!a0) return exe_fail(S, in, TPU_ERR_SHAPE, "operand is a tuple");
    uint8_t is_red[TPU_MAX_RANK] = {0};
    for (int i = 0; i < nrd; i++) {
        if (rd[i] < 0 || rd[i] >= a0->rank || is_red[rd[i]])
            return exe_fail(S, in, TPU_ERR_SHAPE, "bad reduce dimension %lld", (long long)rd[i]);
        is_red[rd[i]] = 1;
    }
    int64_t inner = 1, outer = 1;
    for (int i = 0; i < a0->rank; i++) {
        if (is_red[i]) inner *= a0->dims[i];
        else outer *= a0->dims[i];
    }
    const exe_scalar_fn *fn;
    tpu_status st = exe_scalar_fn_get(S, in->called[0], &fn);
    if (st) return st;
    if (exe_scalar_fn_nparams(fn) != 2 * n || exe_scalar_fn_nresults(fn) != n)
        return exe_fail(S, in, TPU_ERR_SHAPE, "to_apply must take %d and return %d values", 2 * n, n);

    /* results */
    tpu_tensor *res[32] = {0};
    exe_value *vals[32] = {0};
    const void *src[32] = {0};
    void *bufs[32] = {0};
    for (int k = 0; k < n && !st; k++) {
        const hlo_shape *rs = hlo_shape_is_tuple(&in->shape) ? &in->shape.tuple[k] : &in->shape;
        st = exe_alloc_shape(S, rs, &res[k]);
        if (st) break;
        if (ops[k]->t->count != a0->count) {
            st = exe_fail(S, in, TPU_ERR_SHAPE, "inputs differ in size");
            break;
        }
        if (res[k]->count != outer) {
            st = exe_fail(S, in, TPU_ERR_SHAPE, "result %d has %lld elements, expected %lld", k, (long long)res[k]->count,
                          (long long)outer);
            break;
        }
        int moved;
        src[k] = rd_arrange(ops[k]->t, is_red, &bufs[k], &moved);
        if (!src[k]) st = ut_nomem(S->ctx);
    }
    hlo_op bop = exe_scalar_fn_binop(fn);
    if (!st && n == 1 && (a0->dtype == TPU_F32 || a0->dtype == TPU_F64) && res[0]->dtype == a0->dtype &&
        (bop == HLO_ADD || bop == HLO_MAXIMUM || bop == HLO_MINIMUM)) {
        int is32 = a0->dtype == TPU_F32;
        double init = ten_load_f64(a0->dtype, ops[1]->t->data, 0);
        #pragma omp parallel for schedule(static) if (outer * inner > 65536 && outer > 1)
        for (int64_t o = 0; o < outer; o++) {
            double acc = init;
            if (bop == HLO_ADD) {
                double s = 0;
                if (is32) {
                    const float *x = (const float *)src[0] + o * inner;
                    for (int64_t r = 0; r < inner; r++) s += x[r];
                } else {
                    const double *x = (const double *)src[0] + o * inner;
                    for (int64_t r = 0; r < inner; r++) s += x[r];
                }
                acc = inner ? init + s : init;
            } else {
                int is_max = bop == HLO_MAXIMUM;
                for (int64_t r = 0; r < inner; r++) {
                    double x = is32 ? ((const float *)src[0])[o * inner + r] : ((const double *)src[0])[o * inner + r];
                    if (isnan(x) || isnan(acc)) acc = NAN;
                    else if (is_max ? (x > acc || (x == acc && !signbit(x))) : (x < acc || (x == acc && signbit(x)))) acc = x;
                }
            }
            if (is32) ((float *)res[0]->data)[o] = (float)acc;
            else ((double *)res[0]->data)[o] = acc;
        }
    } else if (!st) {
        tpu_dtype dt[32], it[32];
        for (int k = 0; k < n; k++) {
            dt[k] = ops[k]->t->dtype;
            it[k] = ops[n + k]->t->dtype;
        }
        #pragma omp parallel for schedule(static) if (outer * inner > 16384 && outer > 1)
        for (int64_t o = 0; o < outer; o++) {
            exe_scalar args[64], acc[32];
            for (int k = 0; k < n; k++) acc[k] = exe_scalar_load(it[k], ops[n + k]->t->data, 0);
            for (int64_t r = 0; r < inner; r++) {
                for (int k = 0; k < n; k++) {
                    args[k] = acc[k];
                    args[n + k] = exe_scalar_load(dt[k], src[k], o * inner + r);
                }
                exe_scalar_fn_eval(fn, args, acc);
            }
            for (int k = 0; k < n; k++) exe_scalar_store(S, res[k]->dtype, res[k]->data, o, acc[k]);
        }
    }
    for (int k = 0; k < n; k++) ut_free(bufs[k]);
    if (st) {
        for (int k = 0; k < n; k++) tpu_tensor_free(res[k]);
        return st;
    }
    if (!hlo_shape_is_tuple(&in->shape)) return exe_out_array(S, res[0], out);
    for (int k = 0; k < n; k++) {
        vals[k] = exe_value_array(res[k]);
        if (!vals[k]) {
            for (int j = 0; j < k; j++) exe_value_unref(vals[j]);
            for (int j = k + 1; j < n; j++) tpu_tensor_free(res[j]);
            return ut_nomem(S->ctx);
        }
    }
    *out = exe_value_tuple(vals, n);
    return *out ? TPU_OK : ut_nomem(S->ctx);
}
