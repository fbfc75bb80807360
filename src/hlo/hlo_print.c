/* hlo_print.c — writes a module as HLO text in XLA's spelling; hlo_parse reads it back to the same module. */
#include "hlo.h"
#include "util/fp.h"
#include "util/tensor.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void hpr_string(ut_buf *b, const char *s)
{
    ut_buf_putc(b, '"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            ut_buf_putc(b, '\\');
            ut_buf_putc(b, (char)c);
        } else if (c == '\n') {
            ut_buf_puts(b, "\\n");
        } else if (c == '\t') {
            ut_buf_puts(b, "\\t");
        } else if (c < 0x20 || c == 0x7f) {
            ut_buf_printf(b, "\\x%02x", c);
        } else {
            ut_buf_putc(b, (char)c);
        }
    }
    ut_buf_putc(b, '"');
}

/* Shortest decimal that reads back (strtod) to the same double. */
static void hpr_double(ut_buf *b, double v)
{
    if (isnan(v)) { ut_buf_puts(b, signbit(v) ? "-nan" : "nan"); return; }
    if (isinf(v)) { ut_buf_puts(b, v < 0 ? "-inf" : "inf"); return; }
    char s[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(s, sizeof s, "%.*g", prec, v);
        if (strtod(s, NULL) == v) break;
    }
    ut_buf_puts(b, s);
}

/* Shortest decimal that converts back to the same bits of dtype t (element i of data). */
static void hpr_float_elem(ut_buf *b, tpu_dtype t, const void *data, int64_t i)
{
    if (t == TPU_F64) { hpr_double(b, ((const double *)data)[i]); return; }
    double v = ten_load_f64(t, data, i);
    if (isnan(v)) { ut_buf_puts(b, signbit(v) ? "-nan" : "nan"); return; }
    if (isinf(v)) { ut_buf_puts(b, v < 0 ? "-inf" : "inf"); return; }
    char s[40];
    if (t == TPU_F32) {
        float f = ((const float *)data)[i];
        for (int prec = 1; prec <= 9; prec++) {
            snprintf(s, sizeof s, "%.*g", prec, (double)f);
            if (strtof(s, NULL) == f) break;
        }
    } else {
        /* small floats: compare the re-rounded bits */
        unsigned char orig[8] = {0}, back[8] = {0};
        size_t es = tpu_dtype_size(t);
        memcpy(orig, (const unsigned char *)data + (size_t)i * es, es);
        for (int prec = 1; prec <= 17; prec++) {
            snprintf(s, sizeof s, "%.*g", prec, v);
            ten_store_f64(t, back, 0, strtod(s, NULL));
            if (!memcmp(orig, back, es)) break;
        }
    }
    ut_buf_puts(b, s);
}

static void hpr_elem(ut_buf *b, tpu_dtype t, const void *data, int64_t i)
{
    switch (tpu_dtype_kind(t)) {
    case 'p': ut_buf_puts(b, ((const uint8_t *)data)[i] ? "true" : "false"); break;
    case 's': ut_buf_printf(b, "%lld", (long long)ten_load_i64(t, data, i)); break;
    case 'u': ut_buf_printf(b, "%llu", (unsigned long long)ten_load_i64(t, data, i)); break;
    case 'c':
        ut_buf_putc(b, '(');
        if (t == TPU_C64) {
            hpr_double(b, ((const float *)data)[2 * i]);
            ut_buf_puts(b, ", ");
            hpr_double(b, ((const float *)data)[2 * i + 1]);
        } else {
            hpr_double(b, ((const double *)data)[2 * i]);
            ut_buf_puts(b, ", ");
            hpr_double(b, ((const double *)data)[2 * i + 1]);
        }
        ut_buf_putc(b, ')');
        break;
    default: hpr_float_elem(b, t, data, i); break;
    }
}

static void hpr_array(ut_buf *b, const hlo_literal *lit, int d, int64_t *pos)
{
    const hlo_shape *s = &lit->shape;
    if (d == s->rank) {
        hpr_elem(b, (tpu_dtype)s->dtype, lit->data, (*pos)++);
        return;
    }
    ut_buf_putc(b, '{');
    for (int64_t i = 0; i < s->dims[d]; i++) {
        if (i) ut_buf_puts(b, d + 1 == s->rank ? ", " : ", ");
        hpr_array(b, lit, d + 1, pos);
    }
    ut_buf_putc(b, '}');
}

void hlo_print_literal(ut_buf *b, const hlo_literal *lit)
{
    if (hlo_shape_is_tuple(&lit->shape)) {
        ut_buf_putc(b, '(');
        for (int i = 0; i < lit->ntuple; i++) {
            if (i) ut_buf_puts(b, ", ");
            hlo_print_literal(b, &lit->tuple[i]);
        }
        ut_buf_putc(b, ')');
        return;
    }
    if (!hlo_shape_is_array(&lit->shape)) return;
    if (lit->elided) { ut_buf_puts(b, "{...}"); return; }
    int64_t pos = 0;
    if (lit->shape.rank == 0) { hpr_elem(b, (tpu_dtype)lit->shape.dtype, lit->data, 0); return; }
    if (hlo_shape_count(&lit->shape) == 0) { ut_buf_puts(b, "{}"); return; }
    hpr_array(b, lit, 0, &pos);
}

static void hpr_ints(ut_buf *b, int n, const int64_t *v)
{
    ut_buf_putc(b, '{');
    for (int i = 0; i < n; i++) ut_buf_printf(b, "%s%lld", i ? "," : "", (long long)v[i]);
    ut_buf_putc(b, '}');
}

static void hpr_xlist(ut_buf *b, const char *key, const hlo_window *w, size_t off)
{
    ut_buf_printf(b, " %s=", key);
    for (int i = 0; i < w->rank; i++) {
        int64_t v = *(const int64_t *)((const char *)&w->d[i] + off);
        ut_buf_printf(b, "%s%lld", i ? "x" : "", (long long)v);
    }
}

static void hpr_window(ut_buf *b, const hlo_window *w)
{
    ut_buf_putc(b, '{');
    size_t len0 = b->len;
    int any_stride = 0, any_pad = 0, any_ld = 0, any_rd = 0, any_rev = 0;
    for (int i = 0; i < w->rank; i++) {
        any_stride |= w->d[i].stride != 1;
        any_pad |= w->d[i].pad_lo != 0 || w->d[i].pad_hi != 0;
        any_ld |= w->d[i].lhs_dilate != 1;
        any_rd |= w->d[i].rhs_dilate != 1;
        any_rev |= w->d[i].reversal != 0;
    }
    if (w->rank) hpr_xlist(b, "size", w, offsetof(hlo_window_dim, size));
    if (any_stride) hpr_xlist(b, "stride", w, offsetof(hlo_window_dim, stride));
    if (any_pad) {
        ut_buf_puts(b, " pad=");
        for (int i = 0; i < w->rank; i++)
            ut_buf_printf(b, "%s%lld_%lld", i ? "x" : "", (long long)w->d[i].pad_lo, (long long)w->d[i].pad_hi);
    }
    if (any_ld) hpr_xlist(b, "lhs_dilate", w, offsetof(hlo_window_dim, lhs_dilate));
    if (any_rd) hpr_xlist(b, "rhs_dilate", w, offsetof(hlo_window_dim, rhs_dilate));
    if (any_rev) {
        ut_buf_puts(b, " rhs_reversal=");
        for (int i = 0; i < w->rank; i++) ut_buf_printf(b, "%s%d", i ? "x" : "", w->d[i].reversal);
    }
    /* drop the space after '{' */
    if (!b->failed && b->len > len0 && b->data[len0] == ' ') {
        memmove(b->data + len0, b->data + len0 + 1, b->len - len0 - 1);
        b->len--;
        b->data[b->len] = 0;
    }
    ut_buf_putc(b, '}');
}

static void hpr_attr_value(ut_buf *b, const hlo_attr *a)
{
    switch ((hlo_attr_kind)a->kind) {
    case HA_INT: ut_buf_printf(b, "%lld", (long long)a->v.i); break;
    case HA_BOOL: ut_buf_puts(b, a->v.b ? "true" : "false"); break;
    case HA_FLOAT: hpr_double(b, a->v.f); break;
    case HA_STR: hpr_string(b, a->v.s); break;
    case HA_IDENT: case HA_RAW: ut_buf_puts(b, a->v.s); break;
    case HA_INTS: hpr_ints(b, a->v.ints.n, a->v.ints.v); break;
    case HA_INTSS:
        ut_buf_putc(b, '{');
        for (int i = 0; i < a->v.intss.n; i++) {
            if (i) ut_buf_putc(b, ',');
            hpr_ints(b, a->v.intss.len[i], a->v.intss.v[i]);
        }
        ut_buf_putc(b, '}');
        break;
    case HA_IDENTS:
        ut_buf_putc(b, '{');
        for (int i = 0; i < a->v.idents.n; i++) ut_buf_printf(b, "%s%s", i ? "," : "", a->v.idents.v[i]);
        ut_buf_putc(b, '}');
        break;
    case HA_NAMES:
        ut_buf_putc(b, '{');
        for (int i = 0; i < a->v.idents.n; i++) ut_buf_printf(b, "%s%%%s", i ? ", " : "", a->v.idents.v[i]);
        ut_buf_putc(b, '}');
        break;
    case HA_COMP: ut_buf_printf(b, "%%%s", a->v.comps.names[0]); break;
    case HA_COMPS:
        if (a->v.comps.n == 1 && a->key == HK_CALLS) {
            ut_buf_printf(b, "%%%s", a->v.comps.names[0]);
            break;
        }
        ut_buf_putc(b, '{');
        for (int i = 0; i < a->v.comps.n; i++) ut_buf_printf(b, "%s%%%s", i ? ", " : "", a->v.comps.names[i]);
        ut_buf_putc(b, '}');
        break;
    case HA_WINDOW: hpr_window(b, a->v.window); break;
    case HA_SLICE: {
        const hlo_slice *s = a->v.slice;
        ut_buf_putc(b, '{');
        for (int i = 0; i < s->rank; i++) {
            ut_buf_printf(b, "%s[%lld:%lld", i ? ", " : "", (long long)s->start[i], (long long)s->limit[i]);
            if (s->stride[i] != 1) ut_buf_printf(b, ":%lld", (long long)s->stride[i]);
            ut_buf_putc(b, ']');
        }
        ut_buf_putc(b, '}');
        break;
    }
    case HA_PADDING: {
        const hlo_padding *p = a->v.padding;
        for (int i = 0; i < p->rank; i++) {
            ut_buf_printf(b, "%s%lld_%lld", i ? "x" : "", (long long)p->lo[i], (long long)p->hi[i]);
            if (p->interior[i]) ut_buf_printf(b, "_%lld", (long long)p->interior[i]);
        }
        break;
    }
    case HA_DIMLABELS: ut_buf_puts(b, a->v.dimlabels->text); break;
    case HA_RGROUPS: {
        const hlo_rgroups *g = a->v.rgroups;
        if (g->iota) {
            ut_buf_printf(b, "[%lld,%lld]<=[", (long long)g->gdims[0], (long long)g->gdims[1]);
            for (int i = 0; i < g->nreshape; i++) ut_buf_printf(b, "%s%lld", i ? "," : "", (long long)g->reshape[i]);
            ut_buf_putc(b, ']');
            if (g->nperm) {
                ut_buf_puts(b, "T(");
                for (int i = 0; i < g->nperm; i++) ut_buf_printf(b, "%s%d", i ? "," : "", g->perm[i]);
                ut_buf_putc(b, ')');
            }
        } else {
            ut_buf_putc(b, '{');
            for (int i = 0; i < g->ngroups; i++) {
                if (i) ut_buf_putc(b, ',');
                hpr_ints(b, g->len[i], g->ids[i]);
            }
            ut_buf_putc(b, '}');
        }
        break;
    }
    case HA_KV:
        ut_buf_putc(b, '{');
        for (int i = 0; i < a->v.kv.n; i++) {
            if (i) ut_buf_puts(b, a->v.kv.sep == ',' ? "," : " ");
            ut_buf_printf(b, "%s=", a->v.kv.v[i].key);
            if (a->v.kv.v[i].is_str) hpr_string(b, a->v.kv.v[i].val);
            else ut_buf_puts(b, a->v.kv.v[i].val);
        }
        ut_buf_putc(b, '}');
        break;
    case HA_SHAPE: hlo_shape_print(b, a->v.shape, 1); break;
    case HA_SHAPES:
        ut_buf_putc(b, '{');
        for (int i = 0; i < a->v.shapes.n; i++) {
            if (i) ut_buf_puts(b, ", ");
            hlo_shape_print(b, &a->v.shapes.v[i], 1);
        }
        ut_buf_putc(b, '}');
        break;
    case HA_PROGSHAPE:
        ut_buf_puts(b, "{(");
        for (int i = 0; i < a->v.prog.n; i++) {
            if (i) ut_buf_puts(b, ", ");
            hlo_shape_print(b, &a->v.prog.params[i], 1);
        }
        ut_buf_puts(b, ")->");
        hlo_shape_print(b, a->v.prog.result, 1);
        ut_buf_putc(b, '}');
        break;
    case HA_ALIAS:
        ut_buf_puts(b, "{ ");
        for (int i = 0; i < a->v.alias.n; i++) {
            const hlo_alias_entry *e = &a->v.alias.v[i];
            if (i) ut_buf_puts(b, ", ");
            hpr_ints(b, e->nout, e->out);
            ut_buf_printf(b, ": (%lld, ", (long long)e->param);
            hpr_ints(b, e->nparam_idx, e->param_idx);
            if (e->kind) ut_buf_puts(b, e->kind == 1 ? ", may-alias" : ", must-alias");
            ut_buf_putc(b, ')');
        }
        ut_buf_puts(b, " }");
        break;
    }
}

static void hpr_attrs(ut_buf *b, int n, const hlo_attr *attrs)
{
    for (int i = 0; i < n; i++) {
        ut_buf_printf(b, ", %s=", attrs[i].name);
        hpr_attr_value(b, &attrs[i]);
    }
}

void hlo_print_instr(ut_buf *b, const hlo_instr *in)
{
    ut_buf_printf(b, "%s%%%s = ", in->is_root ? "ROOT " : "", in->name);
    /* a shape left out of the text and not inferred (hlo_parse alone) stays out */
    if (in->shape.dtype != TPU_INVALID) {
        hlo_shape_print(b, &in->shape, 1);
        ut_buf_putc(b, ' ');
    }
    ut_buf_printf(b, "%s(", hlo_op_name((hlo_op)in->op));
    if (in->op == HLO_CONSTANT && in->literal) {
        hlo_print_literal(b, in->literal);
    } else if (in->op == HLO_PARAMETER) {
        ut_buf_printf(b, "%lld", (long long)in->param_no);
    } else {
        for (int i = 0; i < in->nops; i++) {
            if (i) ut_buf_puts(b, ", ");
            if (i && i % 5 == 0) ut_buf_printf(b, "/*index=%d*/", i);   /* as XLA marks every fifth operand */
            if (in->ops[i]->shape.dtype != TPU_INVALID) {
                hlo_shape_print(b, &in->ops[i]->shape, 1);
                ut_buf_putc(b, ' ');
            }
            ut_buf_printf(b, "%%%s", in->ops[i]->name);
        }
    }
    ut_buf_putc(b, ')');
    hpr_attrs(b, in->nattrs, in->attrs);
}

static void hpr_comp(ut_buf *b, const hlo_comp *c)
{
    ut_buf_printf(b, "%s%%%s", c->is_entry ? "ENTRY " : "", c->name);
    if (c->root->shape.dtype != TPU_INVALID) {
        ut_buf_puts(b, " (");
        for (int i = 0; i < c->nparams; i++) {
            ut_buf_printf(b, "%s%s: ", i ? ", " : "", c->params[i]->name);
            hlo_shape_print(b, &c->params[i]->shape, 0);
        }
        ut_buf_puts(b, ") -> ");
        hlo_shape_print(b, &c->root->shape, 0);
    }
    ut_buf_puts(b, " {\n");
    for (int i = 0; i < c->ninstrs; i++) {
        ut_buf_puts(b, "  ");
        hlo_print_instr(b, c->instrs[i]);
        ut_buf_putc(b, '\n');
    }
    ut_buf_putc(b, '}');
    hpr_attrs(b, c->nattrs, c->attrs);   /* XLA: "}, execution_thread=..." */
    ut_buf_putc(b, '\n');
}

/* FileNames / FunctionNames / FileLocations / StackFrames, one entry a line, labels counting from 1. */
static void hpr_frames(ut_buf *b, const hlo_frames *f)
{
    if (f->nfiles) ut_buf_puts(b, "FileNames\n");
    for (int i = 0; i < f->nfiles; i++) {
        ut_buf_printf(b, "%d ", i + 1);
        hpr_string(b, f->files[i]);
        ut_buf_putc(b, '\n');
    }
    if (f->nfuncs) ut_buf_puts(b, "FunctionNames\n");
    for (int i = 0; i < f->nfuncs; i++) {
        ut_buf_printf(b, "%d ", i + 1);
        hpr_string(b, f->funcs[i]);
        ut_buf_putc(b, '\n');
    }
    if (f->nlocs) ut_buf_puts(b, "FileLocations\n");
    for (int i = 0; i < f->nlocs; i++) {
        const hlo_file_loc *l = &f->locs[i];
        ut_buf_printf(b, "%d {file_name_id=%lld function_name_id=%lld line=%lld end_line=%lld column=%lld end_column=%lld}\n",
                      i + 1, (long long)l->file_id, (long long)l->func_id, (long long)l->line, (long long)l->end_line,
                      (long long)l->column, (long long)l->end_column);
    }
    if (f->nframes) ut_buf_puts(b, "StackFrames\n");
    for (int i = 0; i < f->nframes; i++)
        ut_buf_printf(b, "%d {file_location_id=%lld parent_frame_id=%lld}\n", i + 1, (long long)f->frames[i].loc_id,
                      (long long)f->frames[i].parent_id + 1);   /* as XLA prints it */
    ut_buf_putc(b, '\n');
}

void hlo_print_module(ut_buf *b, const hlo_module *m)
{
    ut_buf_printf(b, "HloModule %s", m->name);
    hpr_attrs(b, m->nattrs, m->attrs);
    ut_buf_puts(b, "\n\n");
    if (m->frames) hpr_frames(b, m->frames);
    for (int i = 0; i < m->ncomps; i++) {
        hpr_comp(b, m->comps[i]);
        ut_buf_putc(b, '\n');
    }
}
