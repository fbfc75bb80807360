/* exe_core.c — runtime values, result allocation, error messages, TPU numerics helpers. */
#include "exec.h"
#include "util/fp.h"

#include <stdarg.h>
#include <string.h>

exe_value *exe_value_array(tpu_tensor *t)
{
    exe_value *v = ut_calloc(1, sizeof *v);
    if (!v) {
        tpu_tensor_free(t);
        return NULL;
    }
    v->refs = 1;
    v->t = t;
    return v;
}

exe_value *exe_value_tuple(exe_value **elems, int n)
{
    exe_value *v = ut_calloc(1, sizeof *v);
    exe_value **e = n ? ut_malloc((size_t)n * sizeof *e) : NULL;
    if (!v || (n && !e)) {
        ut_free(v);
        ut_free(e);
        for (int i = 0; i < n; i++) exe_value_unref(elems[i]);
        return NULL;
    }
    v->refs = 1;
    v->ntuple = n;
    v->elems = e;
    for (int i = 0; i < n; i++) e[i] = elems[i];
    return v;
}

exe_value *exe_value_ref(exe_value *v)
{
    if (v) v->refs++;
    return v;
}

void exe_value_unref(exe_value *v)
{
    if (!v || --v->refs > 0) return;
    if (v->t && !v->borrowed) tpu_tensor_free(v->t);
    for (int i = 0; i < v->ntuple; i++) exe_value_unref(v->elems[i]);
    ut_free(v->elems);
    ut_free(v);
}

exe_value *exe_value_clone(const exe_value *v)
{
    if (v->t) {
        tpu_tensor *t = ten_clone(v->t);
        return t ? exe_value_array(t) : NULL;
    }
    exe_value **e = v->ntuple ? ut_malloc((size_t)v->ntuple * sizeof *e) : NULL;
    if (v->ntuple && !e) return NULL;
    for (int i = 0; i < v->ntuple; i++) {
        e[i] = exe_value_clone(v->elems[i]);
        if (!e[i]) {
            for (int k = 0; k < i; k++) exe_value_unref(e[k]);
            ut_free(e);
            return NULL;
        }
    }
    exe_value *r = exe_value_tuple(e, v->ntuple);
    ut_free(e);
    return r;
}

tpu_status exe_fail(exe_state *S, const hlo_instr *in, tpu_status st, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ut_err(S->ctx, st, "%s:%d:%d: %s '%s': %s", S->m && S->m->filename ? S->m->filename : "<hlo>", in->line,
                  in->col, hlo_op_name((hlo_op)in->op), in->name, msg);
}

tpu_status exe_alloc_shape(exe_state *S, const hlo_shape *s, tpu_tensor **t)
{
    if (!hlo_shape_is_array(s))
        return ut_err(S->ctx, TPU_ERR_INTERNAL, "exe_alloc_shape: not an array shape");
    if (s->dyn_mask)
        return ut_err(S->ctx, TPU_ERR_UNSUPPORTED, "dynamic shapes cannot be executed (the TPU needs static shapes)");
    *t = ten_alloc_uninit((tpu_dtype)s->dtype, s->rank, s->dims);
    if (!*t) {
        char b[128];
        return ut_err(S->ctx, TPU_ERR_NOMEM, "out of memory allocating %s (%.3g GB)", hlo_shape_str(s, b, sizeof b),
                      (double)hlo_shape_count(s) * (double)tpu_dtype_size((tpu_dtype)s->dtype) / 1e9);
    }
    return TPU_OK;
}

tpu_status exe_alloc(exe_state *S, const hlo_instr *in, tpu_tensor **t)
{
    if (!hlo_shape_is_array(&in->shape)) return exe_fail(S, in, TPU_ERR_INTERNAL, "result is not an array");
    tpu_status st = exe_alloc_shape(S, &in->shape, t);
    if (st) ut_err_prefix(S->ctx, "%s:%d:%d: %s", S->m->filename, in->line, in->col, in->name);
    return st;
}

tpu_status exe_out_array(exe_state *S, tpu_tensor *t, exe_value **out)
{
    *out = exe_value_array(t);
    return *out ? TPU_OK : ut_nomem(S->ctx);
}

void exe_strides(const tpu_tensor *t, int64_t *strides)
{
    int64_t s = 1;
    for (int i = t->rank - 1; i >= 0; i--) {
        strides[i] = s;
        s *= t->dims[i];
    }
}

/* ---- numerics ---- */

static int exe_precision_passes(const char *p)
{
    if (!strcmp(p, "high") || !strcmp(p, "HIGH")) return 3;
    if (!strcmp(p, "highest") || !strcmp(p, "HIGHEST")) return 0;
    return 1;   /* default */
}

int exe_mxu_passes(const exe_state *S, const hlo_instr *in)
{
    if (S->numerics == TPU_NUMERICS_EXACT) return 0;
    /* only f32 operands get rounded: bf16 operands are already MXU inputs, f64/ints are computed exactly */
    int any_f32 = 0;
    for (int i = 0; i < in->nops && i < 2; i++)
        if (in->ops[i]->shape.dtype == TPU_F32) any_f32 = 1;
    if (!any_f32) return 0;
    const char *alg = hlo_attr_str(in, HK_ALGORITHM);
    if (alg) {
        if (!strcmp(alg, "dot_bf16_bf16_f32") || !strcmp(alg, "dot_bf16_bf16_bf16")) return 1;
        if (!strcmp(alg, "dot_bf16_bf16_f32_x3")) return 3;
        return 0;   /* x6, x9, f32, tf32, f16, f8 algorithms: f32-accurate on the TPU */
    }
    const hlo_attr *a = hlo_attr_find(in, HK_OPERAND_PRECISION);
    if (!a || a->kind != HA_IDENTS || a->v.idents.n == 0) return 1;
    /* the more precise of the two operand precisions decides the pass count */
    int passes = 1;
    for (int i = 0; i < a->v.idents.n; i++) {
        int p = exe_precision_passes(a->v.idents.v[i]);
        if (p == 0) return 0;
        if (p > passes) passes = p;
    }
    return passes;
}

void exe_store_float(const exe_state *S, tpu_dtype t, void *base, int64_t i, double v)
{
    switch (t) {
    case TPU_F32: ((float *)base)[i] = (float)v; break;
    case TPU_F64: ((double *)base)[i] = v; break;
    case TPU_BF16:
        /* results are computed in f32 with subnormals flushed (TPU, and XLA:CPU's FTZ), then rounded */
        ((uint16_t *)base)[i] = fp_f32_to_bf16_ftz((float)v);
        break;
    case TPU_F16: ((uint16_t *)base)[i] = fp_f32_to_f16((float)v); break;
    default: ten_store_f64(t, base, i, v); break;
    }
}
