/* inline.c — call inlining before compiling for a chip. JAX lowers every jitted sub-function to a `call`;
 * the TPU compiler inlines them all before fusion and buffer assignment, so a call's result is not a
 * separate buffer. Edits a clone of the module (hlo_module_clone): each callee's instructions are cloned into
 * the caller with names prefixed by the call's; the result is verified. */
#include "compile.h"
#include "policy.h"

#include <stdlib.h>
#include <string.h>

static hlo_instr *inl_clone(ut_arena *a, const hlo_instr *src, hlo_comp *parent, const char *prefix)
{
    hlo_instr *c = ut_arena_alloc(a, sizeof *c);
    if (!c) return NULL;
    *c = *src;
    c->parent = parent;
    c->is_root = 0;
    size_t n = strlen(prefix) + strlen(src->name) + 2;
    char *name = ut_arena_alloc(a, n);
    if (!name) return NULL;
    snprintf(name, n, "%s.%s", prefix, src->name);
    c->name = name;
    if (src->nops) {
        c->ops = ut_arena_alloc(a, (size_t)src->nops * sizeof *c->ops);
        if (!c->ops) return NULL;
        memcpy(c->ops, src->ops, (size_t)src->nops * sizeof *c->ops);
    }
    c->nctrl = 0;   /* control edges inside the callee are dropped: they order nothing after inlining */
    c->ctrl = NULL;
    /* attributes naming instructions (control-predecessors) would dangle: drop them */
    if (c->nattrs) {
        hlo_attr *at = ut_arena_alloc(a, (size_t)c->nattrs * sizeof *at);
        if (!at) return NULL;
        int k = 0;
        for (int i = 0; i < src->nattrs; i++)
            if (src->attrs[i].key != HK_CONTROL_PREDECESSORS) at[k++] = src->attrs[i];
        c->attrs = at;
        c->nattrs = k;
    }
    return c;
}

/* The instructions a computation is rewritten into, and how many clones the whole inlining may still make: a
 * DAG of calls (f calls g twice, g calls h twice, ...) inlines to exponentially many instructions, so past a
 * budget the module is compiled with its calls as sub-plans instead. */
typedef struct inl_out {
    hlo_instr **v;
    int         n, cap;
    int64_t     budget;
    int         over;   /* the budget ran out */
} inl_out;

static int inl_push(inl_out *o, hlo_instr *in)
{
    if (o->budget-- <= 0) {
        o->over = 1;
        return 0;
    }
    hlo_instr **v = ut_grow(o->v, sizeof *v, o->n, &o->cap, 256);
    if (!v) return 0;
    o->v = v;
    o->v[o->n++] = in;
    return 1;
}

static int inl_is_call(const hlo_instr *in)
{
    return in->op == HLO_CALL && in->ncalled == 1 && !hlo_attr_bool(in, HK_IS_COMPOSITE, 0);
}

/* Clones callee's instructions into c for one call (its arguments args), expanding the calls inside the
 * callee the same way (recursion depth: the call depth, which ver_require bounds). Returns what replaces the
 * call (the cloned root, or an argument when the callee returns a parameter), NULL on failure. */
static hlo_instr *inl_expand(hlo_module *m, hlo_comp *c, const hlo_comp *callee, hlo_instr *const *args,
                             const char *call_name, int *counter, inl_out *o)
{
    hlo_instr **map = ut_calloc((size_t)callee->ninstrs + 1, sizeof *map);
    if (!map) return NULL;
    char prefix[192];
    snprintf(prefix, sizeof prefix, "%.120s.i%d", call_name, (*counter)++);
    hlo_instr *res = NULL;
    int ok = 1;
    for (int j = 0; ok && j < callee->ninstrs; j++) {
        const hlo_instr *ci = callee->instrs[j];
        if (ci->op == HLO_PARAMETER) {
            map[j] = args[ci->param_no];
            continue;
        }
        if (inl_is_call(ci)) {
            hlo_instr **av = ut_malloc((size_t)(ci->nops ? ci->nops : 1) * sizeof *av);   /* not on the stack */
            if (!av) {
                ok = 0;
                break;
            }
            for (int k = 0; k < ci->nops; k++) av[k] = map[ci->ops[k]->id];
            char nested[256];
            snprintf(nested, sizeof nested, "%s.%s", prefix, ci->name);
            map[j] = inl_expand(m, c, ci->called[0], av, nested, counter, o);
            ut_free(av);
            ok = map[j] != NULL;
            continue;
        }
        hlo_instr *cl = inl_clone(&m->arena, ci, c, prefix);
        if (!cl) {
            ok = 0;
            break;
        }
        for (int k = 0; k < cl->nops; k++) cl->ops[k] = map[ci->ops[k]->id];
        map[j] = cl;
        ok = inl_push(o, cl);
    }
    if (ok) res = map[callee->root->id];
    ut_free(map);
    return res;
}

/* Inlines every call in computation c, and the calls inside the callees. Returns 0 on no memory or when the
 * budget ran out (o->over). */
static int inl_comp(hlo_module *m, hlo_comp *c, int *counter, inl_out *o)
{
    int any = 0;
    for (int i = 0; i < c->ninstrs && !any; i++) any = inl_is_call(c->instrs[i]);
    if (!any) return 1;
    o->n = 0;
    /* replacement of each original instruction (the call's inlined root) */
    hlo_instr **repl = ut_calloc((size_t)c->ninstrs, sizeof *repl);
    if (!repl) return 0;
    int ok = 1;
    for (int i = 0; ok && i < c->ninstrs; i++) {
        hlo_instr *in = c->instrs[i];
        /* operands that were calls read the inlined roots */
        for (int k = 0; k < in->nops; k++)
            if (in->ops[k]->parent == c && repl[in->ops[k]->id]) in->ops[k] = repl[in->ops[k]->id];
        if (!inl_is_call(in)) {
            ok = inl_push(o, in);
            continue;
        }
        hlo_instr *root = inl_expand(m, c, in->called[0], in->ops, in->name, counter, o);
        if (!root) {
            ok = 0;
            break;
        }
        repl[i] = root;
        if (in->is_root) {
            if (root->parent != c || root->op == HLO_PARAMETER) {
                /* the call returned a parameter unchanged: keep a copy so the computation has a root */
                char prefix[192];
                snprintf(prefix, sizeof prefix, "%.120s.i%d", in->name, (*counter)++);
                hlo_instr *cp = inl_clone(&m->arena, in, c, prefix);
                if (!cp) {
                    ok = 0;
                    break;
                }
                cp->op = HLO_COPY;
                cp->nops = 1;
                cp->ops[0] = root;
                cp->nattrs = 0;
                cp->ncalled = 0;
                root = cp;
                if (!(ok = inl_push(o, cp))) break;
            }
            root->is_root = 1;
            c->root = root;
        }
    }
    ut_free(repl);
    if (!ok) return 0;
    hlo_instr **out = ut_arena_alloc(&m->arena, (size_t)o->n * sizeof *out);
    if (!out) return 0;
    memcpy(out, o->v, (size_t)o->n * sizeof *out);
    c->instrs = out;
    c->ninstrs = o->n;
    for (int i = 0; i < o->n; i++) c->instrs[i]->id = i;
    return 1;
}

/* get-tuple-element(tuple(a, b, ...), index=i) reads a, b, ... directly (XLA's tuple simplification): the
 * tuples an inlined call returned then leave no trace, so what flows out of a call fuses like any value. */
static int inl_forward_tuples(hlo_comp *c)
{
    int any = 0;
    for (int i = 0; i < c->ninstrs; i++) {
        hlo_instr *in = c->instrs[i];
        for (int k = 0; k < in->nops; k++) {
            const hlo_instr *o = in->ops[k];
            int guard = 0;
            while (o->op == HLO_GET_TUPLE_ELEMENT && o->nops == 1 && o->ops[0]->op == HLO_TUPLE && guard++ < 64) {
                int64_t idx = hlo_attr_int(o, HK_INDEX, -1);
                if (idx < 0 || idx >= o->ops[0]->nops) break;
                o = o->ops[0]->ops[idx];
            }
            if (o != in->ops[k]) {
                in->ops[k] = (hlo_instr *)o;
                any = 1;
            }
        }
    }
    if (!any) return 1;
    /* drop the tuples and get-tuple-elements nothing reads any more (a dead tuple would still count as a
     * reader of its elements) */
    int *uses = ut_calloc((size_t)c->ninstrs + 1, sizeof *uses);
    if (!uses) return 0;
    for (int i = 0; i < c->ninstrs; i++)
        for (int k = 0; k < c->instrs[i]->nops; k++)
            if (c->instrs[i]->ops[k]->parent == c) uses[c->instrs[i]->ops[k]->id]++;
    for (int i = c->ninstrs - 1; i >= 0; i--) {   /* users come after their operands */
        hlo_instr *in = c->instrs[i];
        if (uses[i] || in == c->root || in->is_root || in->nctrl ||
            (in->op != HLO_TUPLE && in->op != HLO_GET_TUPLE_ELEMENT))
            continue;
        uses[i] = -1;
        for (int k = 0; k < in->nops; k++)
            if (in->ops[k]->parent == c) uses[in->ops[k]->id]--;
    }
    int n = 0;
    for (int i = 0; i < c->ninstrs; i++)
        if (uses[i] >= 0) c->instrs[n++] = c->instrs[i];
    c->ninstrs = n;
    for (int i = 0; i < n; i++) c->instrs[i]->id = i;
    ut_free(uses);
    return 1;
}

/* Inlines the calls of every computation that runs by itself (the entry, loop bodies, branches...): a callee
 * reached only through calls is expanded where it is called, so a chain of nested calls costs its size.
 * *counter: calls inlined. Returns 0 on no memory, or with *over set when the budget ran out. */
static int inl_module(hlo_module *c, int *counter, int *over)
{
    uint8_t *root = ut_calloc((size_t)c->ncomps + 1, 1);
    if (!root) return 0;
    inl_out o = {NULL, 0, 0, 4 * (int64_t)c->ninstrs + 100000, 0};
    root[c->entry->id] = 1;
    for (int i = 0; i < c->ncomps; i++)
        for (int k = 0; k < c->comps[i]->ninstrs; k++) {
            const hlo_instr *in = c->comps[i]->instrs[k];
            if (inl_is_call(in)) continue;
            for (int q = 0; q < in->ncalled; q++) root[in->called[q]->id] = 1;
        }
    int ok = 1;
    for (int i = 0; ok && i < c->ncomps; i++)
        if (root[i]) ok = inl_comp(c, c->comps[i], counter, &o);
    for (int i = 0; ok && *counter && i < c->ncomps; i++) ok = inl_forward_tuples(c->comps[i]);
    ut_free(root);
    ut_free(o.v);
    *over = o.over;
    return ok;
}

tpu_status cmp_inline_calls(tpu_ctx *ctx, const hlo_module *m, hlo_module **out)
{
    *out = NULL;
    hlo_module *c = NULL;
    tpu_status st = hlo_module_clone(ctx, m, &c);
    if (st) return st;
    int counter = 0, over = 0;
    if (!inl_module(c, &counter, &over)) {
        hlo_module_free(c);
        if (!over) return ut_nomem(ctx);
        /* too many instructions once inlined: the calls stay calls (compiled as sub-plans) */
        return hlo_module_clone(ctx, m, out);
    }
    if (counter) st = cmp_rewrite_done(ctx, c, "inlining calls");
    if (st) {
        hlo_module_free(c);
        return st;
    }
    *out = c;
    return TPU_OK;
}

/* An instruction that passes its operand's elements on unchanged in row-major order: a reshape, or a
 * broadcast that adds no dimension (dimensions={0,1,...}), of the same element type. */
static const hlo_instr *inl_move_source(const hlo_instr *in)
{
    if (in->nops != 1 || !hlo_shape_is_array(&in->shape) || in->shape.dyn_mask) return NULL;
    const hlo_instr *x = in->ops[0];
    if (!hlo_shape_is_array(&x->shape) || x->shape.dtype != in->shape.dtype || x->shape.dyn_mask) return NULL;
    if (in->op == HLO_RESHAPE) return x;
    if (in->op != HLO_BROADCAST || x->shape.rank != in->shape.rank) return NULL;
    const int64_t *d;
    int nd = hlo_attr_ints(in, HK_DIMENSIONS, &d);
    if (nd != in->shape.rank) return NULL;
    for (int k = 0; k < nd; k++)
        if (d[k] != k || x->shape.dims[k] != in->shape.dims[k]) return NULL;
    return x;
}

void cmp_forward_moves(hlo_module *m)
{
    for (int c = 0; c < m->ncomps; c++) {
        hlo_comp *comp = m->comps[c];
        for (int i = 0; i < comp->ninstrs; i++) {
            hlo_instr *in = comp->instrs[i];
            for (int k = 0; k < in->nops; k++) {
                const hlo_instr *o = in->ops[k], *best = o, *x = o;
                if (!inl_move_source(o)) continue;
                /* down the chain of moves: the deepest value with exactly o's shape */
                for (int guard = 0; (x = inl_move_source(x)) && guard < 64; guard++)
                    if (hlo_shape_same(&x->shape, &o->shape)) best = x;
                in->ops[k] = (hlo_instr *)best;
            }
        }
    }
}
