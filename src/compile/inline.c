/* inline.c — call inlining before compiling for a chip. JAX lowers every jitted sub-function to a `call`;
 * the TPU compiler inlines them all before fusion and buffer assignment, so a call's result is not a
 * separate buffer. Works on a copy (print -> parse), clones each callee's instructions into the caller with
 * names prefixed by the call's, then prints and parses the result so it is an ordinary module. */
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

/* Inlines every call in computation c (recursively: callees are inlined first). Returns 0 on no memory. */
static int inl_comp(hlo_module *m, hlo_comp *c, uint8_t *done, int *counter)
{
    if (done[c->id]) return 1;
    done[c->id] = 1;
    int any = 0;
    for (int i = 0; i < c->ninstrs; i++) {
        hlo_instr *in = c->instrs[i];
        if (in->op == HLO_CALL && in->ncalled == 1 && !hlo_attr_bool(in, HK_IS_COMPOSITE, 0)) {
            if (!inl_comp(m, in->called[0], done, counter)) return 0;
            any = 1;
        }
    }
    if (!any) return 1;
    /* build the new instruction list */
    int cap = c->ninstrs;
    for (int i = 0; i < c->ninstrs; i++)
        if (c->instrs[i]->op == HLO_CALL && c->instrs[i]->ncalled == 1) cap += c->instrs[i]->called[0]->ninstrs;
    hlo_instr **out = ut_arena_alloc(&m->arena, (size_t)cap * sizeof *out);
    /* replacement of each original instruction (the call's inlined root) */
    hlo_instr **repl = ut_calloc((size_t)c->ninstrs, sizeof *repl);
    if (!out || !repl) {
        ut_free(repl);
        return 0;
    }
    int n = 0;
    for (int i = 0; i < c->ninstrs; i++) {
        hlo_instr *in = c->instrs[i];
        /* operands that were calls read the inlined roots */
        for (int k = 0; k < in->nops; k++)
            if (in->ops[k]->parent == c && repl[in->ops[k]->id]) in->ops[k] = repl[in->ops[k]->id];
        if (!(in->op == HLO_CALL && in->ncalled == 1 && !hlo_attr_bool(in, HK_IS_COMPOSITE, 0))) {
            out[n++] = in;
            continue;
        }
        const hlo_comp *callee = in->called[0];
        hlo_instr **map = ut_calloc((size_t)callee->ninstrs, sizeof *map);
        if (!map) {
            ut_free(repl);
            return 0;
        }
        char prefix[192];
        snprintf(prefix, sizeof prefix, "%.120s.i%d", in->name, (*counter)++);
        for (int j = 0; j < callee->ninstrs; j++) {
            const hlo_instr *ci = callee->instrs[j];
            if (ci->op == HLO_PARAMETER) {
                map[j] = in->ops[ci->param_no];
                continue;
            }
            hlo_instr *cl = inl_clone(&m->arena, ci, c, prefix);
            if (!cl) {
                ut_free(map);
                ut_free(repl);
                return 0;
            }
            for (int k = 0; k < cl->nops; k++) cl->ops[k] = map[ci->ops[k]->id];
            map[j] = cl;
            out[n++] = cl;
        }
        hlo_instr *root = map[callee->root->id];
        repl[i] = root;
        if (in->is_root) {
            if (root->parent != c || root->op == HLO_PARAMETER) {
                /* the call returned a parameter unchanged: keep a copy so the computation has a root */
                hlo_instr *cp = inl_clone(&m->arena, in, c, prefix);
                if (!cp) {
                    ut_free(map);
                    ut_free(repl);
                    return 0;
                }
                cp->op = HLO_COPY;
                cp->nops = 1;
                cp->ops[0] = root;
                cp->nattrs = 0;
                cp->ncalled = 0;
                root = cp;
                out[n++] = cp;
            }
            root->is_root = 1;
            c->root = root;
        }
        ut_free(map);
    }
    ut_free(repl);
    c->instrs = out;
    c->ninstrs = n;
    for (int i = 0; i < n; i++) c->instrs[i]->id = i;
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

tpu_status cmp_inline_calls(tpu_ctx *ctx, const hlo_module *m, hlo_module **out)
{
    *out = NULL;
    ut_buf b;
    ut_buf_init(&b);
    hlo_print_module(&b, m);
    if (b.failed) {
        ut_buf_free(&b);
        return ut_nomem(ctx);
    }
    hlo_module *c = NULL;
    tpu_status st = hlo_parse(ctx, b.data, b.len, m->filename, 0, &c);
    ut_buf_free(&b);
    if (st) return st;
    uint8_t *done = ut_calloc((size_t)c->ncomps, 1);
    int counter = 0;
    int ok = done != NULL;
    for (int i = 0; ok && i < c->ncomps; i++) ok = inl_comp(c, c->comps[i], done, &counter);
    for (int i = 0; ok && counter && i < c->ncomps; i++) ok = inl_forward_tuples(c->comps[i]);
    ut_free(done);
    if (!ok) {
        hlo_module_free(c);
        return ut_nomem(ctx);
    }
    if (!counter) {
        *out = c;
        return TPU_OK;
    }
    /* print and parse: drops the now-unused callees' references and renumbers everything */
    ut_buf_init(&b);
    hlo_print_module(&b, c);
    hlo_module *r = NULL;
    if (b.failed) st = ut_nomem(ctx);
    else st = hlo_parse(ctx, b.data, b.len, m->filename, 0, &r);
    if (st == TPU_ERR_PARSE) ut_err_prefix(ctx, "internal: inlining calls produced unparsable text");
    ut_buf_free(&b);
    hlo_module_free(c);
    if (st) return st;
    *out = r;
    return TPU_OK;
}
