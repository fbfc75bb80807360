/* mxu_test.h — helpers shared by t_dot.c and t_conv.c: parse a one-instruction module, make random operands,
 * run a kernel directly on them (fast or reference) and compare results with a tolerance, printing the worst
 * error on failure. */
#ifndef TPU_TESTS_MXU_TEST_H
#define TPU_TESTS_MXU_TEST_H

#include "test.h"
#include "exec/exec.h"
#include "hlo/hlo.h"
#include "util/tensor.h"

#include <stdarg.h>
#include <stdlib.h>

typedef struct mxt_rng {
    uint64_t s;
} mxt_rng;

static inline uint64_t mxt_next(mxt_rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform integer in [lo, hi]. */
static inline int64_t mxt_int(mxt_rng *r, int64_t lo, int64_t hi) { return lo + (int64_t)(mxt_next(r) % (uint64_t)(hi - lo + 1)); }

/* Random values of t's dtype: floats uniform in [-1, 1), integers over (most of) their range. */
static inline void mxt_fill(mxt_rng *r, tpu_tensor *t)
{
    char k = tpu_dtype_kind(t->dtype);
    for (int64_t i = 0; i < t->count; i++) {
        uint64_t z = mxt_next(r);
        if (k == 'f' || k == 'c') ten_store_f64(t->dtype, t->data, i, (double)(z >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
        else if (k == 'p') ((uint8_t *)t->data)[i] = (uint8_t)(z & 1);
        else ten_store_i64(t->dtype, t->data, i, (int64_t)z);   /* truncated to the type's width */
    }
}

/* Parses text (one module whose entry root is the instruction under test). */
static inline tpu_module *mxt_parse(tpu_ctx *ctx, const char *text)
{
    tpu_module *m = NULL;
    if (tpu_module_parse(ctx, text, strlen(text), "mxt.hlo", &m) != TPU_OK) {
        test_fail(__FILE__, __LINE__, "parse failed: %s\n%s", tpu_errmsg(ctx), text);
        return NULL;
    }
    return m;
}

/* Random operands for the root's two operands. */
static inline void mxt_operands(mxt_rng *r, const tpu_module *m, tpu_tensor **a, tpu_tensor **b)
{
    const hlo_instr *in = m->entry->root;
    const hlo_shape *sa = &in->ops[0]->shape, *sb = &in->ops[1]->shape;
    *a = ten_alloc((tpu_dtype)sa->dtype, sa->rank, sa->dims);
    *b = ten_alloc((tpu_dtype)sb->dtype, sb->rank, sb->dims);
    if (*a) mxt_fill(r, *a);
    if (*b) mxt_fill(r, *b);
}

/* Runs kernel k on the module's root with operands a, b (borrowed). Returns the result tensor (caller
 * frees) or NULL with the error message in ctx. */
static inline tpu_tensor *mxt_run(tpu_ctx *ctx, const tpu_module *m, exe_kernel k, tpu_numerics numerics, int threads,
                                  tpu_tensor *a, tpu_tensor *b)
{
    exe_state S;
    memset(&S, 0, sizeof S);
    S.ctx = ctx;
    S.m = m;
    S.numerics = numerics;
    S.threads = threads;
    exe_value *ops[2] = {exe_value_array(a), exe_value_array(b)};
    ops[0]->borrowed = ops[1]->borrowed = 1;
    exe_value *out = NULL;
    tpu_status st = k(&S, m->entry->root, ops, &out);
    exe_value_unref(ops[0]);
    exe_value_unref(ops[1]);
    if (st) return NULL;
    tpu_tensor *t = out->t;
    out->borrowed = 1;
    exe_value_unref(out);
    return t;
}

/* Worst error of got against want: |got - want| <= atol + rtol * |want| per element (integers: equal).
 * Returns 1 when within tolerance; otherwise reports what/where. */
static inline int mxt_compare(const char *file, int line, const char *what, const tpu_tensor *got, const tpu_tensor *want,
                              double atol, double rtol)
{
    if (!got || !want) {
        test_fail(file, line, "%s: missing result", what);
        return 0;
    }
    if (got->count != want->count || got->dtype != want->dtype) {
        test_fail(file, line, "%s: results differ in shape or dtype", what);
        return 0;
    }
    char k = tpu_dtype_kind(want->dtype);
    double max_abs = 0, max_rel = 0;
    int64_t bad = -1, nbad = 0;
    for (int64_t i = 0; i < want->count; i++) {
        if (k != 'f') {
            if (ten_load_i64(got->dtype, got->data, i) != ten_load_i64(want->dtype, want->data, i)) {
                if (bad < 0) bad = i;
                nbad++;
            }
            continue;
        }
        double g = ten_load_f64(got->dtype, got->data, i), w = ten_load_f64(want->dtype, want->data, i);
        double e = fabs(g - w);
        if (isnan(g) != isnan(w)) e = INFINITY;
        else if (isnan(g)) e = 0;
        if (e > max_abs) max_abs = e;
        if (w != 0 && e / fabs(w) > max_rel) max_rel = e / fabs(w);
        if (!(e <= atol + rtol * fabs(w))) {
            if (bad < 0) bad = i;
            nbad++;
        }
    }
    if (nbad) {
        if (k == 'f')
            test_fail(file, line, "%s: %lld of %lld elements off; max abs err %.3g, max rel err %.3g (atol %.3g rtol %.3g); "
                      "first at %lld: %.9g vs %.9g", what, (long long)nbad, (long long)want->count, max_abs, max_rel, atol,
                      rtol, (long long)bad, ten_load_f64(got->dtype, got->data, bad), ten_load_f64(want->dtype, want->data, bad));
        else
            test_fail(file, line, "%s: %lld of %lld elements differ; first at %lld: %lld vs %lld", what, (long long)nbad,
                      (long long)want->count, (long long)bad, (long long)ten_load_i64(got->dtype, got->data, bad),
                      (long long)ten_load_i64(want->dtype, want->data, bad));
        return 0;
    }
    return 1;
}

/* Relative rounding unit of a float result type (0 for integers). */
static inline double mxt_eps(tpu_dtype t)
{
    switch (t) {
    case TPU_F64: return 0x1p-52;
    case TPU_F32: return 0x1p-23;
    case TPU_BF16: return 0x1p-8;
    case TPU_F16: return 0x1p-10;
    default: return 0;
    }
}

/* Max |a - b| over all elements (as doubles). */
static inline double mxt_max_diff(const tpu_tensor *a, const tpu_tensor *b)
{
    double m = 0;
    for (int64_t i = 0; i < a->count; i++) {
        double e = fabs(ten_load_f64(a->dtype, a->data, i) - ten_load_f64(b->dtype, b->data, i));
        if (e > m || isnan(e)) m = isnan(e) ? INFINITY : e;
    }
    return m;
}

/* printf into a static buffer (one at a time) */
static inline const char *mxt_fmt(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline const char *mxt_fmt(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    return buf;
}

#endif
