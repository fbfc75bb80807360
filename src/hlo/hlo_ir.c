/* hlo_ir.c — opcode and attribute tables, shape helpers, attribute accessors, module equality. */
#include "hlo.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- opcode table ---- */
static const struct { const char *name; int arity; hlo_class cls; } hlo_ops[] = {
#define X(e, name, arity, cls) {name, arity, HLO_CLASS_##cls},
#include "hlo_ops.def"
#undef X
};
_Static_assert(sizeof hlo_ops / sizeof hlo_ops[0] == HLO_OP_COUNT, "opcode table out of sync");

const char *hlo_op_name(hlo_op op) { return op < HLO_OP_COUNT ? hlo_ops[op].name : "?"; }
int hlo_op_arity(hlo_op op) { return op < HLO_OP_COUNT ? hlo_ops[op].arity : -1; }
hlo_class hlo_op_class(hlo_op op) { return op < HLO_OP_COUNT ? hlo_ops[op].cls : HLO_CLASS_MISC; }

/* XLA's parser infers the result shape of these when it is not written (facts file §5.1). */
int hlo_op_shape_optional(hlo_op op)
{
    switch (op) {
    case HLO_ABS: case HLO_ACOS: case HLO_ACOSH: case HLO_ASIN: case HLO_ASINH: case HLO_ADD:
    case HLO_ADD_DEPENDENCY: case HLO_AFTER_ALL: case HLO_ATAN2: case HLO_ATANH: case HLO_BATCH_NORM_GRAD:
    case HLO_BATCH_NORM_INFERENCE: case HLO_BATCH_NORM_TRAINING: case HLO_BROADCAST: case HLO_CALL: case HLO_CEIL:
    case HLO_CHOLESKY: case HLO_CLAMP: case HLO_CLZ: case HLO_COMPARE: case HLO_COMPLEX: case HLO_CONCATENATE:
    case HLO_CONDITIONAL: case HLO_CONVOLUTION: case HLO_COPY: case HLO_COS: case HLO_COSH: case HLO_OPT_BARRIER:
    case HLO_DIVIDE: case HLO_DOMAIN: case HLO_DOT: case HLO_ERF: case HLO_EXP: case HLO_EXPM1: case HLO_FFT:
    case HLO_FLOOR: case HLO_GATHER: case HLO_GET_DIMENSION_SIZE: case HLO_SET_DIMENSION_SIZE:
    case HLO_GET_TUPLE_ELEMENT: case HLO_IMAG: case HLO_IS_FINITE: case HLO_LOG: case HLO_LOG1P: case HLO_LOGISTIC:
    case HLO_AND: case HLO_NOT: case HLO_OR: case HLO_XOR: case HLO_MAP: case HLO_MAXIMUM: case HLO_MINIMUM:
    case HLO_MULTIPLY: case HLO_NEGATE: case HLO_PAD: case HLO_PARTITION_ID: case HLO_POPCNT: case HLO_POWER:
    case HLO_RAGGED_DOT: case HLO_REAL: case HLO_REDUCE: case HLO_REMAINDER: case HLO_REPLICA_ID: case HLO_REVERSE:
    case HLO_ROUND_NEAREST_AFZ: case HLO_ROUND_NEAREST_EVEN: case HLO_RSQRT: case HLO_SCAN: case HLO_SCALED_DOT:
    case HLO_SCATTER: case HLO_SELECT: case HLO_SHIFT_LEFT: case HLO_SHIFT_RIGHT_ARITHMETIC:
    case HLO_SHIFT_RIGHT_LOGICAL: case HLO_SIGN: case HLO_SIN: case HLO_SINH: case HLO_SQRT: case HLO_CBRT:
    case HLO_REDUCE_WINDOW: case HLO_SELECT_AND_SCATTER: case HLO_SORT: case HLO_SUBTRACT: case HLO_TAN:
    case HLO_TANH: case HLO_TRANSPOSE: case HLO_TRIANGULAR_SOLVE: case HLO_TUPLE: case HLO_WHILE: case HLO_TOPK:
        return 1;
    default:
        return 0;
    }
}

hlo_op hlo_op_from_name(const char *s, size_t n)
{
    /* XLA sorts its list by enum name, not by text, so search linearly (136 short names) */
    for (int i = 0; i < HLO_OP_COUNT; i++) {
        const char *m = hlo_ops[i].name;
        if (m[0] == s[0] && strlen(m) == n && !memcmp(m, s, n)) return (hlo_op)i;
    }
    return HLO_OP_COUNT;
}

/* ---- attribute table ---- */
static const struct { const char *name; hlo_attr_kind kind; } hlo_attr_keys[] = {
#define X(e, name, kind) {name, HA_##kind},
#include "hlo_attrs.def"
#undef X
};
_Static_assert(sizeof hlo_attr_keys / sizeof hlo_attr_keys[0] == HK_COUNT, "attribute table out of sync");

const char *hlo_attr_key_name(hlo_attr_key k) { return k < HK_COUNT ? hlo_attr_keys[k].name : "?"; }
hlo_attr_kind hlo_attr_key_kind(hlo_attr_key k) { return k < HK_COUNT ? hlo_attr_keys[k].kind : HA_RAW; }

hlo_attr_key hlo_attr_key_from_name(const char *s, size_t n)
{
    for (int i = 0; i < HK_COUNT; i++) {
        const char *k = hlo_attr_keys[i].name;
        if (strlen(k) == n && memcmp(k, s, n) == 0) return (hlo_attr_key)i;
    }
    return HK_UNKNOWN;
}

/* ---- shapes ---- */
int64_t hlo_shape_count(const hlo_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++) {
        int64_t d = s->dims[i] < 0 ? 0 : s->dims[i];
        if (__builtin_mul_overflow(n, d, &n)) n = INT64_MAX;   /* absurd shapes saturate instead of wrapping */
    }
    return n;
}

int hlo_shape_is_static(const hlo_shape *s)
{
    if (hlo_shape_is_tuple(s)) {
        for (int i = 0; i < s->ntuple; i++)
            if (!hlo_shape_is_static(&s->tuple[i])) return 0;
        return 1;
    }
    return s->dyn_mask == 0;
}

int hlo_shape_same(const hlo_shape *a, const hlo_shape *b)
{
    if (a->dtype != b->dtype) return 0;
    if (hlo_shape_is_tuple(a)) {
        if (a->ntuple != b->ntuple) return 0;
        for (int i = 0; i < a->ntuple; i++)
            if (!hlo_shape_same(&a->tuple[i], &b->tuple[i])) return 0;
        return 1;
    }
    if (a->rank != b->rank || a->dyn_mask != b->dyn_mask) return 0;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i]) return 0;
    return 1;
}

int hlo_shape_compatible(const hlo_shape *a, const hlo_shape *b)
{
    if (a->dtype != b->dtype) return 0;
    if (hlo_shape_is_tuple(a)) {
        if (a->ntuple != b->ntuple) return 0;
        for (int i = 0; i < a->ntuple; i++)
            if (!hlo_shape_compatible(&a->tuple[i], &b->tuple[i])) return 0;
        return 1;
    }
    if (a->rank != b->rank) return 0;
    for (int i = 0; i < a->rank; i++) {
        int da = (a->dyn_mask >> i) & 1, db = (b->dyn_mask >> i) & 1;
        if (a->dims[i] == b->dims[i]) continue;
        if (a->dims[i] < 0 || b->dims[i] < 0) continue;   /* '?' matches anything */
        if (da && b->dims[i] <= a->dims[i]) continue;
        if (db && a->dims[i] <= b->dims[i]) continue;
        return 0;
    }
    return 1;
}

static int hlo_layout_identical(const hlo_layout *a, const hlo_layout *b)
{
    if (!a || !b) return a == b;
    if (a->rank != b->rank || a->ntiles != b->ntiles || a->tail_pad != b->tail_pad ||
        a->elem_bits != b->elem_bits || a->mem_space != b->mem_space || a->index_type != b->index_type ||
        a->pointer_type != b->pointer_type)
        return 0;
    if (memcmp(a->m2m, b->m2m, (size_t)a->rank)) return 0;
    for (int t = 0; t < a->ntiles; t++) {
        if (a->tiles[t].n != b->tiles[t].n) return 0;
        for (int i = 0; i < a->tiles[t].n; i++)
            if (a->tiles[t].d[i] != b->tiles[t].d[i]) return 0;
    }
    if ((a->extra == NULL) != (b->extra == NULL)) return 0;
    return !a->extra || !strcmp(a->extra, b->extra);
}

int hlo_shape_identical(const hlo_shape *a, const hlo_shape *b)
{
    if (a->is_buffer != b->is_buffer) return 0;
    if (hlo_shape_is_tuple(a)) {
        if (a->dtype != b->dtype || a->ntuple != b->ntuple) return 0;
        for (int i = 0; i < a->ntuple; i++)
            if (!hlo_shape_identical(&a->tuple[i], &b->tuple[i])) return 0;
        return 1;
    }
    return hlo_shape_same(a, b) && hlo_layout_identical(a->layout, b->layout);
}

void hlo_shape_m2m(const hlo_shape *s, int *m2m)
{
    if (s->layout && s->layout->rank == s->rank) {
        for (int i = 0; i < s->rank; i++) m2m[i] = s->layout->m2m[i];
    } else {
        for (int i = 0; i < s->rank; i++) m2m[i] = s->rank - 1 - i;
    }
}

static void hlo_layout_print(ut_buf *b, const hlo_shape *s)
{
    const hlo_layout *l = s->layout;
    ut_buf_putc(b, '{');
    for (int i = 0; i < l->rank; i++) ut_buf_printf(b, "%s%d", i ? "," : "", l->m2m[i]);
    int colon = l->ntiles || l->tail_pad || l->elem_bits || l->mem_space || l->index_type || l->pointer_type ||
                l->extra;
    if (colon) ut_buf_putc(b, ':');
    /* XLA's order: D(...) T(...) L(...) #(...) *(...) E(...) S(...) SC(...) P(...) M(...); extra keeps D/SC/P/M
     * as written, printed where XLA would put the first of them that occurs (we keep it after S). */
    for (int t = 0; t < l->ntiles; t++) {
        if (t == 0) ut_buf_putc(b, 'T');
        ut_buf_putc(b, '(');
        for (int i = 0; i < l->tiles[t].n; i++) {
            int64_t d = l->tiles[t].d[i];
            if (i) ut_buf_putc(b, ',');
            if (d == HLO_TILE_COMBINE) ut_buf_putc(b, '*');
            else if (d == HLO_TILE_DYNAMIC) ut_buf_putc(b, '?');
            else ut_buf_printf(b, "%lld", (long long)d);
        }
        ut_buf_putc(b, ')');
    }
    if (l->tail_pad) ut_buf_printf(b, "L(%lld)", (long long)l->tail_pad);
    if (l->index_type) ut_buf_printf(b, "#(%s)", tpu_dtype_name((tpu_dtype)l->index_type));
    if (l->pointer_type) ut_buf_printf(b, "*(%s)", tpu_dtype_name((tpu_dtype)l->pointer_type));
    if (l->elem_bits) ut_buf_printf(b, "E(%d)", l->elem_bits);
    if (l->mem_space) ut_buf_printf(b, "S(%lld)", (long long)l->mem_space);
    if (l->extra) ut_buf_puts(b, l->extra);
    ut_buf_putc(b, '}');
}

void hlo_shape_print(ut_buf *b, const hlo_shape *s, int with_layout)
{
    if (s->is_buffer) ut_buf_puts(b, "b(");
    if (hlo_shape_is_tuple(s)) {
        ut_buf_putc(b, '(');
        for (int i = 0; i < s->ntuple; i++) {
            if (i) ut_buf_puts(b, ", ");
            hlo_shape_print(b, &s->tuple[i], with_layout);
        }
        ut_buf_putc(b, ')');
    } else {
        ut_buf_printf(b, "%s[", tpu_dtype_name((tpu_dtype)s->dtype));
        for (int i = 0; i < s->rank; i++) {
            if (i) ut_buf_putc(b, ',');
            if (s->dyn_mask & (1u << i)) {
                if (s->dims[i] < 0) ut_buf_putc(b, '?');
                else ut_buf_printf(b, "<=%lld", (long long)s->dims[i]);
            } else {
                ut_buf_printf(b, "%lld", (long long)s->dims[i]);
            }
        }
        ut_buf_putc(b, ']');
        if (with_layout && s->layout) hlo_layout_print(b, s);
    }
    if (s->is_buffer) ut_buf_putc(b, ')');
}

const char *hlo_shape_str(const hlo_shape *s, char *buf, size_t size)
{
    ut_buf b;
    ut_buf_init(&b);
    hlo_shape_print(&b, s, 1);
    if (size) {
        size_t n = b.failed || !b.data ? 0 : b.len;
        if (n >= size) n = size - 1;
        if (n) memcpy(buf, b.data, n);
        buf[n] = 0;
        if (b.len >= size && size > 4) memcpy(buf + size - 4, "...", 4);
    }
    ut_buf_free(&b);
    return buf;
}

/* ---- attribute accessors ---- */
const hlo_attr *hlo_attr_find(const hlo_instr *in, hlo_attr_key k)
{
    for (int i = 0; i < in->nattrs; i++)
        if (in->attrs[i].key == k) return &in->attrs[i];
    return NULL;
}

const hlo_attr *hlo_module_attr(const hlo_module *m, hlo_attr_key k)
{
    for (int i = 0; i < m->nattrs; i++)
        if (m->attrs[i].key == k) return &m->attrs[i];
    return NULL;
}

int64_t hlo_attr_int(const hlo_instr *in, hlo_attr_key k, int64_t dflt)
{
    const hlo_attr *a = hlo_attr_find(in, k);
    return a && a->kind == HA_INT ? a->v.i : dflt;
}

int hlo_attr_bool(const hlo_instr *in, hlo_attr_key k, int dflt)
{
    const hlo_attr *a = hlo_attr_find(in, k);
    return a && a->kind == HA_BOOL ? a->v.b : dflt;
}

const char *hlo_attr_str(const hlo_instr *in, hlo_attr_key k)
{
    const hlo_attr *a = hlo_attr_find(in, k);
    if (!a) return NULL;
    return a->kind == HA_STR || a->kind == HA_IDENT || a->kind == HA_RAW ? a->v.s : NULL;
}

int hlo_attr_ints(const hlo_instr *in, hlo_attr_key k, const int64_t **v)
{
    const hlo_attr *a = hlo_attr_find(in, k);
    if (!a || a->kind != HA_INTS) {
        *v = NULL;
        return 0;
    }
    *v = a->v.ints.v;
    return a->v.ints.n;
}

const char *hlo_meta(const hlo_instr *in, const char *key)
{
    const hlo_attr *a = hlo_attr_find(in, HK_METADATA);
    if (!a || a->kind != HA_KV) return NULL;
    for (int i = 0; i < a->v.kv.n; i++)
        if (!strcmp(a->v.kv.v[i].key, key)) return a->v.kv.v[i].val;
    return NULL;
}

int64_t hlo_module_replica_count(const hlo_module *m)
{
    const hlo_attr *a = hlo_module_attr(m, HK_REPLICA_COUNT);
    return a && a->kind == HA_INT && a->v.i > 0 ? a->v.i : 1;
}

int64_t hlo_module_num_partitions(const hlo_module *m)
{
    const hlo_attr *a = hlo_module_attr(m, HK_NUM_PARTITIONS);
    return a && a->kind == HA_INT && a->v.i > 0 ? a->v.i : 1;
}

int hlo_frame_source(const hlo_module *m, int64_t frame_id, const char **file, int64_t *line)
{
    const hlo_frames *f = m ? m->frames : NULL;
    if (!f || frame_id < 1 || frame_id > f->nframes) return 0;
    int64_t loc = f->frames[frame_id - 1].loc_id;
    if (loc < 1 || loc > f->nlocs) return 0;
    const hlo_file_loc *l = &f->locs[loc - 1];
    if (l->file_id < 1 || l->file_id > f->nfiles) return 0;
    *file = f->files[l->file_id - 1];
    *line = l->line;
    return 1;
}

const char *hlo_where(const hlo_module *m, const hlo_instr *in, char *buf, size_t size)
{
    if (in->line > 0) snprintf(buf, size, "%s:%d:%d", m && m->filename ? m->filename : "<hlo>", in->line, in->col);
    else snprintf(buf, size, "%s (added by tpusim)", m && m->filename ? m->filename : "<hlo>");
    return buf;
}

/* ---- equality (the round-trip test) ---- */

#define HLO_DIFF(...)                                                   \
    do {                                                                \
        if (why) snprintf(why, why_size, __VA_ARGS__);                  \
        return 0;                                                       \
    } while (0)

static int hlo_literal_equal(const hlo_literal *a, const hlo_literal *b)
{
    if (a->elided != b->elided || a->ntuple != b->ntuple || !hlo_shape_same(&a->shape, &b->shape)) return 0;
    for (int i = 0; i < a->ntuple; i++)
        if (!hlo_literal_equal(&a->tuple[i], &b->tuple[i])) return 0;
    if (a->nbytes != b->nbytes) return 0;
    if (!a->nbytes) return 1;
    if (memcmp(a->data, b->data, a->nbytes) == 0) return 1;
    /* NaNs may differ in payload only */
    if (a->shape.dtype == TPU_F32 || a->shape.dtype == TPU_F64) {
        int64_t n = hlo_shape_count(&a->shape);
        for (int64_t i = 0; i < n; i++) {
            double x = a->shape.dtype == TPU_F32 ? ((float *)a->data)[i] : ((double *)a->data)[i];
            double y = b->shape.dtype == TPU_F32 ? ((float *)b->data)[i] : ((double *)b->data)[i];
            if (!(x == y || (isnan(x) && isnan(y)))) return 0;
        }
        return 1;
    }
    return 0;
}

static int hlo_attr_equal(const hlo_attr *a, const hlo_attr *b)
{
    if (a->key != b->key || a->kind != b->kind || strcmp(a->name, b->name)) return 0;
    switch ((hlo_attr_kind)a->kind) {
    case HA_INT: return a->v.i == b->v.i;
    case HA_BOOL: return a->v.b == b->v.b;
    case HA_FLOAT: return a->v.f == b->v.f || (isnan(a->v.f) && isnan(b->v.f));
    case HA_STR: case HA_IDENT: case HA_RAW: return !strcmp(a->v.s, b->v.s);
    case HA_INTS:
        return a->v.ints.n == b->v.ints.n &&
               (!a->v.ints.n || !memcmp(a->v.ints.v, b->v.ints.v, (size_t)a->v.ints.n * sizeof(int64_t)));
    case HA_INTSS:
        if (a->v.intss.n != b->v.intss.n) return 0;
        for (int i = 0; i < a->v.intss.n; i++) {
            if (a->v.intss.len[i] != b->v.intss.len[i]) return 0;
            if (a->v.intss.len[i] &&
                memcmp(a->v.intss.v[i], b->v.intss.v[i], (size_t)a->v.intss.len[i] * sizeof(int64_t)))
                return 0;
        }
        return 1;
    case HA_IDENTS: case HA_NAMES:
        if (a->v.idents.n != b->v.idents.n) return 0;
        for (int i = 0; i < a->v.idents.n; i++)
            if (strcmp(a->v.idents.v[i], b->v.idents.v[i])) return 0;
        return 1;
    case HA_COMP: case HA_COMPS:
        if (a->v.comps.n != b->v.comps.n) return 0;
        for (int i = 0; i < a->v.comps.n; i++)
            if (strcmp(a->v.comps.names[i], b->v.comps.names[i])) return 0;
        return 1;
    case HA_WINDOW: {
        const hlo_window *x = a->v.window, *y = b->v.window;
        if (x->rank != y->rank) return 0;
        for (int i = 0; i < x->rank; i++)
            if (memcmp(&x->d[i], &y->d[i], offsetof(hlo_window_dim, reversal)) || x->d[i].reversal != y->d[i].reversal)
                return 0;
        return 1;
    }
    case HA_SLICE: {
        const hlo_slice *x = a->v.slice, *y = b->v.slice;
        if (x->rank != y->rank) return 0;
        for (int i = 0; i < x->rank; i++)
            if (x->start[i] != y->start[i] || x->limit[i] != y->limit[i] || x->stride[i] != y->stride[i]) return 0;
        return 1;
    }
    case HA_PADDING: {
        const hlo_padding *x = a->v.padding, *y = b->v.padding;
        if (x->rank != y->rank) return 0;
        for (int i = 0; i < x->rank; i++)
            if (x->lo[i] != y->lo[i] || x->hi[i] != y->hi[i] || x->interior[i] != y->interior[i]) return 0;
        return 1;
    }
    case HA_DIMLABELS: return !strcmp(a->v.dimlabels->text, b->v.dimlabels->text);
    case HA_RGROUPS: {
        const hlo_rgroups *x = a->v.rgroups, *y = b->v.rgroups;
        if (x->iota != y->iota) return 0;
        if (x->iota) {
            if (x->gdims[0] != y->gdims[0] || x->gdims[1] != y->gdims[1] || x->nreshape != y->nreshape ||
                x->nperm != y->nperm)
                return 0;
            for (int i = 0; i < x->nreshape; i++)
                if (x->reshape[i] != y->reshape[i]) return 0;
            for (int i = 0; i < x->nperm; i++)
                if (x->perm[i] != y->perm[i]) return 0;
            return 1;
        }
        if (x->ngroups != y->ngroups) return 0;
        for (int g = 0; g < x->ngroups; g++) {
            if (x->len[g] != y->len[g]) return 0;
            for (int i = 0; i < x->len[g]; i++)
                if (x->ids[g][i] != y->ids[g][i]) return 0;
        }
        return 1;
    }
    case HA_KV:
        if (a->v.kv.n != b->v.kv.n) return 0;
        for (int i = 0; i < a->v.kv.n; i++)
            if (strcmp(a->v.kv.v[i].key, b->v.kv.v[i].key) || strcmp(a->v.kv.v[i].val, b->v.kv.v[i].val) ||
                a->v.kv.v[i].is_str != b->v.kv.v[i].is_str)
                return 0;
        return 1;
    case HA_SHAPE: return hlo_shape_identical(a->v.shape, b->v.shape);
    case HA_SHAPES:
        if (a->v.shapes.n != b->v.shapes.n) return 0;
        for (int i = 0; i < a->v.shapes.n; i++)
            if (!hlo_shape_identical(&a->v.shapes.v[i], &b->v.shapes.v[i])) return 0;
        return 1;
    case HA_PROGSHAPE:
        if (a->v.prog.n != b->v.prog.n || !hlo_shape_identical(a->v.prog.result, b->v.prog.result)) return 0;
        for (int i = 0; i < a->v.prog.n; i++)
            if (!hlo_shape_identical(&a->v.prog.params[i], &b->v.prog.params[i])) return 0;
        return 1;
    case HA_ALIAS:
        if (a->v.alias.n != b->v.alias.n) return 0;
        for (int i = 0; i < a->v.alias.n; i++) {
            const hlo_alias_entry *x = &a->v.alias.v[i], *y = &b->v.alias.v[i];
            if (x->nout != y->nout || x->param != y->param || x->nparam_idx != y->nparam_idx || x->kind != y->kind)
                return 0;
            for (int j = 0; j < x->nout; j++)
                if (x->out[j] != y->out[j]) return 0;
            for (int j = 0; j < x->nparam_idx; j++)
                if (x->param_idx[j] != y->param_idx[j]) return 0;
        }
        return 1;
    }
    return 0;
}

static int hlo_instr_equal(const hlo_instr *a, const hlo_instr *b, char *why, size_t why_size)
{
    if (strcmp(a->name, b->name)) HLO_DIFF("instruction name %s vs %s", a->name, b->name);
    if (a->op != b->op) HLO_DIFF("%s: opcode %s vs %s", a->name, hlo_op_name(a->op), hlo_op_name(b->op));
    if (a->is_root != b->is_root) HLO_DIFF("%s: ROOT differs", a->name);
    if (!hlo_shape_identical(&a->shape, &b->shape)) HLO_DIFF("%s: shape differs", a->name);
    if (a->nops != b->nops) HLO_DIFF("%s: operand count %d vs %d", a->name, a->nops, b->nops);
    for (int i = 0; i < a->nops; i++)
        if (strcmp(a->ops[i]->name, b->ops[i]->name)) HLO_DIFF("%s: operand %d differs", a->name, i);
    if (a->op == HLO_PARAMETER && a->param_no != b->param_no) HLO_DIFF("%s: parameter number differs", a->name);
    if ((a->literal == NULL) != (b->literal == NULL) ||
        (a->literal && !hlo_literal_equal(a->literal, b->literal)))
        HLO_DIFF("%s: literal differs", a->name);
    if (a->nattrs != b->nattrs) HLO_DIFF("%s: attribute count %d vs %d", a->name, a->nattrs, b->nattrs);
    for (int i = 0; i < a->nattrs; i++)
        if (!hlo_attr_equal(&a->attrs[i], &b->attrs[i])) HLO_DIFF("%s: attribute %s differs", a->name, a->attrs[i].name);
    return 1;
}

static int hlo_frames_equal(const hlo_frames *a, const hlo_frames *b)
{
    if (!a || !b) return a == b;
    if (a->nfiles != b->nfiles || a->nfuncs != b->nfuncs || a->nlocs != b->nlocs || a->nframes != b->nframes) return 0;
    for (int i = 0; i < a->nfiles; i++)
        if (strcmp(a->files[i], b->files[i])) return 0;
    for (int i = 0; i < a->nfuncs; i++)
        if (strcmp(a->funcs[i], b->funcs[i])) return 0;
    for (int i = 0; i < a->nlocs; i++)
        if (memcmp(&a->locs[i], &b->locs[i], sizeof a->locs[i])) return 0;
    for (int i = 0; i < a->nframes; i++)
        if (memcmp(&a->frames[i], &b->frames[i], sizeof a->frames[i])) return 0;
    return 1;
}

int hlo_module_equal(const hlo_module *a, const hlo_module *b, char *why, size_t why_size)
{
    if (strcmp(a->name, b->name)) HLO_DIFF("module name %s vs %s", a->name, b->name);
    if (!hlo_frames_equal(a->frames, b->frames)) HLO_DIFF("stack-frame index differs");
    if (a->nattrs != b->nattrs) HLO_DIFF("module attribute count %d vs %d", a->nattrs, b->nattrs);
    for (int i = 0; i < a->nattrs; i++)
        if (!hlo_attr_equal(&a->attrs[i], &b->attrs[i])) HLO_DIFF("module attribute %s differs", a->attrs[i].name);
    if (a->ncomps != b->ncomps) HLO_DIFF("computation count %d vs %d", a->ncomps, b->ncomps);
    for (int c = 0; c < a->ncomps; c++) {
        const hlo_comp *x = a->comps[c], *y = b->comps[c];
        if (strcmp(x->name, y->name)) HLO_DIFF("computation %s vs %s", x->name, y->name);
        if (x->is_entry != y->is_entry) HLO_DIFF("%s: ENTRY differs", x->name);
        if (x->ninstrs != y->ninstrs) HLO_DIFF("%s: instruction count %d vs %d", x->name, x->ninstrs, y->ninstrs);
        if (x->nattrs != y->nattrs) HLO_DIFF("%s: attribute count differs", x->name);
        for (int i = 0; i < x->nattrs; i++)
            if (!hlo_attr_equal(&x->attrs[i], &y->attrs[i])) HLO_DIFF("%s: attribute %s differs", x->name, x->attrs[i].name);
        for (int i = 0; i < x->ninstrs; i++)
            if (!hlo_instr_equal(x->instrs[i], y->instrs[i], why, why_size)) return 0;
    }
    return 1;
}
