/* hlo_clone.c — a deep copy of a module into an arena of its own, for rewrites (compile/policy.c,
 * compile/inline.c) that edit the IR of a copy instead of printing the module and parsing it back. Every
 * pointer of the copy points into the copy: it outlives the source. Names start with hcl_. */
#include "hlo.h"

#include <assert.h>
#include <string.h>

typedef struct hcl {
    ut_arena  *a;
    hlo_comp **comps;    /* the copy's computations, by source computation id */
    int        failed;   /* an allocation failed: the copy is discarded */
} hcl;

static void *hcl_dup(hcl *C, const void *p, size_t n)
{
    if (!p || !n) return NULL;
    void *d = ut_arena_memdup(C->a, p, n);
    if (!d) C->failed = 1;
    return d;
}

static void *hcl_alloc(hcl *C, size_t n)
{
    void *d = ut_arena_alloc(C->a, n ? n : 1);
    if (!d) C->failed = 1;
    return d;
}

static const char *hcl_str(hcl *C, const char *s)
{
    if (!s) return NULL;
    char *d = ut_arena_strdup(C->a, s);
    if (!d) C->failed = 1;
    return d;
}

static const char **hcl_strs(hcl *C, const char *const *v, int n)
{
    if (!v) return NULL;
    const char **d = hcl_alloc(C, (size_t)n * sizeof *d);
    for (int i = 0; d && i < n; i++) d[i] = hcl_str(C, v[i]);
    return d;
}

static void hcl_shape(hcl *C, hlo_shape *dst, const hlo_shape *src)
{
    *dst = *src;
    if (src->layout) {
        hlo_layout *l = hcl_dup(C, src->layout, sizeof *l);
        if (l) l->extra = hcl_str(C, src->layout->extra);
        dst->layout = l;
    }
    if (src->tuple) {
        dst->tuple = hcl_alloc(C, (size_t)src->ntuple * sizeof *dst->tuple);
        for (int i = 0; dst->tuple && i < src->ntuple; i++) hcl_shape(C, &dst->tuple[i], &src->tuple[i]);
    }
}

static hlo_shape *hcl_shapes(hcl *C, const hlo_shape *src, int n)
{
    if (!src) return NULL;
    hlo_shape *d = hcl_alloc(C, (size_t)n * sizeof *d);
    for (int i = 0; d && i < n; i++) hcl_shape(C, &d[i], &src[i]);
    return d;
}

static void hcl_literal(hcl *C, hlo_literal *dst, const hlo_literal *src)
{
    *dst = *src;
    hcl_shape(C, &dst->shape, &src->shape);
    dst->data = hcl_dup(C, src->data, src->nbytes);
    if (src->tuple) {
        dst->tuple = hcl_alloc(C, (size_t)src->ntuple * sizeof *dst->tuple);
        for (int i = 0; dst->tuple && i < src->ntuple; i++) hcl_literal(C, &dst->tuple[i], &src->tuple[i]);
    }
}

static hlo_rgroups *hcl_rgroups(hcl *C, const hlo_rgroups *src)
{
    hlo_rgroups *g = hcl_dup(C, src, sizeof *g);
    if (!g || src->iota || !src->ngroups) return g;
    g->len = hcl_dup(C, src->len, (size_t)src->ngroups * sizeof *g->len);
    g->ids = hcl_alloc(C, (size_t)src->ngroups * sizeof *g->ids);
    for (int k = 0; g->ids && k < src->ngroups; k++) g->ids[k] = hcl_dup(C, src->ids[k], (size_t)src->len[k] * sizeof **g->ids);
    return g;
}

/* The value of one attribute: whatever its kind points to is copied; computations map to the copy's. */
static void hcl_attr_value(hcl *C, hlo_attr *d, const hlo_attr *s)
{
    switch ((hlo_attr_kind)s->kind) {
    case HA_INT: case HA_BOOL: case HA_FLOAT: break;
    case HA_STR: case HA_IDENT: case HA_RAW: d->v.s = hcl_str(C, s->v.s); break;
    case HA_INTS: d->v.ints.v = hcl_dup(C, s->v.ints.v, (size_t)s->v.ints.n * sizeof *s->v.ints.v); break;
    case HA_INTSS:
        d->v.intss.len = hcl_dup(C, s->v.intss.len, (size_t)s->v.intss.n * sizeof *s->v.intss.len);
        d->v.intss.v = s->v.intss.v ? hcl_alloc(C, (size_t)s->v.intss.n * sizeof *d->v.intss.v) : NULL;
        for (int k = 0; d->v.intss.v && k < s->v.intss.n; k++)
            d->v.intss.v[k] = hcl_dup(C, s->v.intss.v[k], (size_t)s->v.intss.len[k] * sizeof **s->v.intss.v);
        break;
    case HA_IDENTS: case HA_NAMES: d->v.idents.v = hcl_strs(C, s->v.idents.v, s->v.idents.n); break;
    case HA_COMP: case HA_COMPS:
        d->v.comps.names = hcl_strs(C, s->v.comps.names, s->v.comps.n);
        d->v.comps.v = s->v.comps.v ? hcl_alloc(C, (size_t)s->v.comps.n * sizeof *d->v.comps.v) : NULL;
        for (int k = 0; d->v.comps.v && k < s->v.comps.n; k++)
            d->v.comps.v[k] = s->v.comps.v[k] ? C->comps[s->v.comps.v[k]->id] : NULL;
        break;
    case HA_WINDOW: d->v.window = hcl_dup(C, s->v.window, sizeof *s->v.window); break;
    case HA_SLICE: d->v.slice = hcl_dup(C, s->v.slice, sizeof *s->v.slice); break;
    case HA_PADDING: d->v.padding = hcl_dup(C, s->v.padding, sizeof *s->v.padding); break;
    case HA_DIMLABELS:
        d->v.dimlabels = hcl_dup(C, s->v.dimlabels, sizeof *s->v.dimlabels);
        if (d->v.dimlabels) d->v.dimlabels->text = hcl_str(C, s->v.dimlabels->text);
        break;
    case HA_RGROUPS: d->v.rgroups = s->v.rgroups ? hcl_rgroups(C, s->v.rgroups) : NULL; break;
    case HA_KV:
        d->v.kv.v = hcl_dup(C, s->v.kv.v, (size_t)s->v.kv.n * sizeof *s->v.kv.v);
        for (int k = 0; d->v.kv.v && k < s->v.kv.n; k++) {
            d->v.kv.v[k].key = hcl_str(C, s->v.kv.v[k].key);
            d->v.kv.v[k].val = hcl_str(C, s->v.kv.v[k].val);
        }
        break;
    case HA_SHAPE: d->v.shape = hcl_shapes(C, s->v.shape, 1); break;
    case HA_SHAPES: d->v.shapes.v = hcl_shapes(C, s->v.shapes.v, s->v.shapes.n); break;
    case HA_PROGSHAPE:
        d->v.prog.params = hcl_shapes(C, s->v.prog.params, s->v.prog.n);
        d->v.prog.result = hcl_shapes(C, s->v.prog.result, 1);
        break;
    case HA_ALIAS: d->v.alias.v = hcl_dup(C, s->v.alias.v, (size_t)s->v.alias.n * sizeof *s->v.alias.v); break;
    }
}

static hlo_attr *hcl_attrs(hcl *C, const hlo_attr *src, int n)
{
    if (!src || !n) return NULL;
    hlo_attr *d = hcl_dup(C, src, (size_t)n * sizeof *d);
    for (int i = 0; d && i < n; i++) {
        d[i].name = hcl_str(C, src[i].name);
        hcl_attr_value(C, &d[i], &src[i]);
    }
    return d;
}

/* The copy of instruction x of the source (in the copy's computation of the same id). */
static hlo_instr *hcl_map(hcl *C, const hlo_instr *x)
{
    assert(x->parent && x->parent->instrs[x->id] == x);   /* ids index their computation (the rewrites keep it) */
    return C->comps[x->parent->id]->instrs[x->id];
}

static hlo_instr **hcl_instr_list(hcl *C, hlo_instr *const *v, int n)
{
    if (!v || !n) return NULL;
    hlo_instr **d = hcl_alloc(C, (size_t)n * sizeof *d);
    for (int i = 0; d && i < n; i++) d[i] = hcl_map(C, v[i]);
    return d;
}

/* Everything of instruction d (a copy of s's fields) that points elsewhere: its operands, called computations
 * and control predecessors map to the copy's. */
static void hcl_instr(hcl *C, hlo_comp *parent, hlo_instr *d, const hlo_instr *s)
{
    d->name = hcl_str(C, s->name);
    hcl_shape(C, &d->shape, &s->shape);
    d->ops = hcl_instr_list(C, s->ops, s->nops);
    d->attrs = hcl_attrs(C, s->attrs, s->nattrs);
    if (s->literal) {
        d->literal = hcl_alloc(C, sizeof *d->literal);
        if (d->literal) hcl_literal(C, d->literal, s->literal);
    }
    d->called = s->called && s->ncalled ? hcl_alloc(C, (size_t)s->ncalled * sizeof *d->called) : NULL;
    for (int k = 0; d->called && k < s->ncalled; k++) d->called[k] = C->comps[s->called[k]->id];
    d->ctrl = hcl_instr_list(C, s->ctrl, s->nctrl);
    d->parent = parent;
    d->op_names = hcl_strs(C, s->op_names, s->nops);
    d->op_typed = hcl_dup(C, s->op_typed, (size_t)s->nops);
}

/* Computation shells and their instruction shells first (so operands can be mapped), then the contents. */
static void hcl_comps(hcl *C, hlo_module *d, const hlo_module *s)
{
    for (int c = 0; c < s->ncomps; c++) {
        const hlo_comp *sc = s->comps[c];
        assert(sc->id == c);
        hlo_comp *dc = hcl_dup(C, sc, sizeof *dc);
        C->comps[c] = d->comps[c] = dc;
        if (!dc) return;
        dc->instrs = hcl_alloc(C, (size_t)sc->ninstrs * sizeof *dc->instrs);
        for (int i = 0; dc->instrs && i < sc->ninstrs; i++) dc->instrs[i] = hcl_dup(C, sc->instrs[i], sizeof **dc->instrs);
        if (C->failed) return;
    }
    for (int c = 0; c < s->ncomps && !C->failed; c++) {
        const hlo_comp *sc = s->comps[c];
        hlo_comp *dc = C->comps[c];
        dc->name = hcl_str(C, sc->name);
        for (int i = 0; i < sc->ninstrs; i++) hcl_instr(C, dc, dc->instrs[i], sc->instrs[i]);
        dc->root = sc->root ? hcl_map(C, sc->root) : NULL;
        dc->params = hcl_instr_list(C, sc->params, sc->nparams);
        hcl_shape(C, &dc->sig_result, &sc->sig_result);
        dc->attrs = hcl_attrs(C, sc->attrs, sc->nattrs);
    }
}

static hlo_frames *hcl_frames(hcl *C, const hlo_frames *s)
{
    hlo_frames *f = hcl_dup(C, s, sizeof *f);
    if (!f) return NULL;
    f->files = hcl_strs(C, s->files, s->nfiles);
    f->funcs = hcl_strs(C, s->funcs, s->nfuncs);
    f->locs = hcl_dup(C, s->locs, (size_t)s->nlocs * sizeof *s->locs);
    f->frames = hcl_dup(C, s->frames, (size_t)s->nframes * sizeof *s->frames);
    return f;
}

tpu_status hlo_module_clone(tpu_ctx *ctx, const hlo_module *src, hlo_module **out)
{
    *out = NULL;
    hlo_module *d = ut_calloc(1, sizeof *d);
    if (!d) return ut_nomem(ctx);
    ut_arena_init(&d->arena);
    hcl C = {&d->arena, NULL, 0};
    C.comps = hcl_alloc(&C, (size_t)src->ncomps * sizeof *C.comps);
    d->name = hcl_str(&C, src->name);
    d->filename = hcl_str(&C, src->filename);
    d->has_header = src->has_header;
    d->ncomps = src->ncomps;
    d->comps = hcl_alloc(&C, (size_t)src->ncomps * sizeof *d->comps);
    if (!C.failed) hcl_comps(&C, d, src);
    d->nattrs = src->nattrs;
    if (!C.failed) d->attrs = hcl_attrs(&C, src->attrs, src->nattrs);
    d->entry = !C.failed && src->entry ? C.comps[src->entry->id] : NULL;
    d->ninstrs = src->ninstrs;
    d->frames = src->frames ? hcl_frames(&C, src->frames) : NULL;
    d->from_proto = src->from_proto;
    /* verified, verified_split and fingerprint start at 0: the copy is there to be edited */
    if (C.failed) {
        hlo_module_free(d);
        return ut_nomem(ctx);
    }
    *out = d;
    return TPU_OK;
}

void hlo_module_renumber(hlo_module *m)
{
    m->ninstrs = 0;
    for (int c = 0; c < m->ncomps; c++) {
        hlo_comp *comp = m->comps[c];
        comp->id = c;
        for (int i = 0; i < comp->ninstrs; i++) {
            comp->instrs[i]->id = i;
            comp->instrs[i]->parent = comp;
        }
        m->ninstrs += comp->ninstrs;
    }
}
