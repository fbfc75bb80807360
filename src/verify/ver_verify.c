/* ver_verify.c — module verification: every declared shape against the inferred one, computation
 * signatures, the entry layout and the root. Each finding becomes a "shape" error in the report. */
#include "verify.h"

#include <string.h>

static const char *vv_ss(const hlo_shape *s, char *buf, size_t n)
{
    return s->dtype == TPU_INVALID ? "(unknown)" : hlo_shape_str(s, buf, n);
}

/* The first place where two shapes differ, for the message ("dimension 1 is 64, expected 32"). */
static void vv_diff(const hlo_shape *d, const hlo_shape *i, char *out, size_t n)
{
    out[0] = 0;
    if (d->dtype != i->dtype) {
        snprintf(out, n, "element type %s, expected %s", tpu_dtype_name((tpu_dtype)d->dtype), tpu_dtype_name((tpu_dtype)i->dtype));
        return;
    }
    if (hlo_shape_is_tuple(d)) {
        if (d->ntuple != i->ntuple) {
            snprintf(out, n, "%d tuple elements, expected %d", d->ntuple, i->ntuple);
            return;
        }
        for (int k = 0; k < d->ntuple; k++)
            if (!ver_shape_match(&d->tuple[k], &i->tuple[k])) {
                char sub[200];
                vv_diff(&d->tuple[k], &i->tuple[k], sub, sizeof sub);
                snprintf(out, n, "tuple element %d: %s", k, sub);
                return;
            }
        return;
    }
    if (d->rank != i->rank) {
        snprintf(out, n, "rank %d, expected %d", d->rank, i->rank);
        return;
    }
    for (int k = 0; k < d->rank; k++)
        if (d->dims[k] != i->dims[k]) {
            snprintf(out, n, "dimension %d is %lld, expected %lld", k, (long long)d->dims[k], (long long)i->dims[k]);
            return;
        }
}

/* Arrays larger than this (1 EiB, a million times any TPU's HBM) are refused, so every size the compiler and
 * executor compute from a shape (padded to tiles, times a trip count) stays far from int64 overflow. */
#define VV_MAX_ARRAY_BYTES ((int64_t)1 << 60)

/* The first array leaf of s whose size in bytes overflows or passes VV_MAX_ARRAY_BYTES, or NULL. */
static const hlo_shape *vv_too_large(const hlo_shape *s)
{
    if (hlo_shape_is_tuple(s)) {
        for (int i = 0; i < s->ntuple; i++) {
            const hlo_shape *t = vv_too_large(&s->tuple[i]);
            if (t) return t;
        }
        return NULL;
    }
    if (!hlo_shape_is_array(s)) return NULL;
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++) {
        if (s->dims[i] <= 0) return NULL;   /* empty (or '?': checked elsewhere) */
        if (__builtin_mul_overflow(n, s->dims[i], &n)) return s;
    }
    int64_t bytes;
    if (__builtin_mul_overflow(n, (int64_t)tpu_dtype_size((tpu_dtype)s->dtype), &bytes)) return s;
    return bytes > VV_MAX_ARRAY_BYTES ? s : NULL;
}

int ver_verify_module(tpu_ctx *ctx, const hlo_module *m, ver_report *r)
{
    (void)ctx;
    int before = r->nerrors;
    ut_arena scratch;
    ut_arena_init(&scratch);
    char msg[600], a[200], b[200], diff[300];
    int mixed = ver_mixed_precision(m);
    for (int ci = 0; ci < m->ncomps; ci++) {
        const hlo_comp *c = m->comps[ci];
        for (int i = 0; i < c->ninstrs; i++) {
            const hlo_instr *in = c->instrs[i];
            const hlo_shape *big = vv_too_large(&in->shape);
            if (big) {
                ver_report_add(r, m, in, VER_ERROR, "shape", "split the array, or fix its dimensions",
                               "%s: %s is too large: more than 2^60 bytes, beyond what tpusim (or any TPU) addresses",
                               hlo_op_name((hlo_op)in->op), vv_ss(big, a, sizeof a));
                continue;
            }
            hlo_shape inf;
            ver_infer_status st = ver_infer_shape(m, in, &scratch, &inf, msg, sizeof msg);
            if (st == VER_INFER_ERROR) {
                ver_report_add(r, m, in, VER_ERROR, "shape", NULL, "%s", msg);
                continue;
            }
            if (!ver_shape_match(&in->shape, &inf) && !(mixed && ver_shape_match_ignoring_fp(&in->shape, &inf))) {
                vv_diff(&in->shape, &inf, diff, sizeof diff);
                ver_report_add(r, m, in, VER_ERROR, "shape", "write the shape the operands give, or fix the operands",
                               "%s: declared shape %s differs from the shape its operands give, %s (%s)",
                               hlo_op_name((hlo_op)in->op), vv_ss(&in->shape, a, sizeof a), vv_ss(&inf, b, sizeof b), diff);
            }
        }
        /* a written signature's result must match the root (XLA checks only the result) */
        if (c->has_sig && !ver_shape_match(&c->sig_result, &c->root->shape))
            ver_report_add(r, m, c->root, VER_ERROR, "shape", "make the signature after '->' match the ROOT instruction",
                           "computation '%s' says it returns %s but its root '%s' is %s", c->name,
                           vv_ss(&c->sig_result, a, sizeof a), c->root->name, vv_ss(&c->root->shape, b, sizeof b));
    }
    /* entry_computation_layout must describe the entry's parameters and result */
    const hlo_attr *el = hlo_module_attr(m, HK_ENTRY_COMPUTATION_LAYOUT);
    if (el && el->kind == HA_PROGSHAPE && m->entry) {
        const hlo_comp *e = m->entry;
        if (el->v.prog.n != e->nparams) {
            ver_report_add(r, m, NULL, VER_ERROR, "shape", "make entry_computation_layout list one shape per parameter",
                           "entry_computation_layout lists %d parameters but the entry computation '%s' has %d",
                           el->v.prog.n, e->name, e->nparams);
        } else {
            for (int k = 0; k < e->nparams; k++)
                if (!ver_shape_match(&el->v.prog.params[k], &e->params[k]->shape))
                    ver_report_add(r, m, e->params[k], VER_ERROR, "shape", "make entry_computation_layout match the parameter",
                                   "entry_computation_layout gives parameter %d as %s but '%s' is %s", k,
                                   vv_ss(&el->v.prog.params[k], a, sizeof a), e->params[k]->name,
                                   vv_ss(&e->params[k]->shape, b, sizeof b));
            if (!ver_shape_match(el->v.prog.result, &e->root->shape))
                ver_report_add(r, m, e->root, VER_ERROR, "shape", "make entry_computation_layout's result match the ROOT",
                               "entry_computation_layout gives the result as %s but the root '%s' is %s",
                               vv_ss(el->v.prog.result, a, sizeof a), e->root->name, vv_ss(&e->root->shape, b, sizeof b));
        }
    }
    ut_arena_free(&scratch);
    return r->nerrors - before;
}

tpu_status tpu_module_verify(tpu_ctx *ctx, const tpu_module *m) { return ver_require(ctx, m); }

/* Computations calling each other (call, while, conditional, fusion, to_apply ...) at most this deep. Valid HLO
 * may nest deeper, but the passes that follow calls (inlining, planning, running) recurse once per level, so a
 * program 100000 calls deep is refused here instead of overflowing the stack (the executor's own limit on
 * nested calls at run time is 200 too). */
#define VER_MAX_CALL_DEPTH 200

/* The deepest chain of computations calling each other from the entry (1: the entry calls nothing), or -1
 * when out of memory. Iterative: frames of (computation, instruction, callee of that instruction). */
static int ver_call_depth(const hlo_module *m, const hlo_comp **deepest)
{
    int n = m->ncomps, best = 0;
    int *depth = ut_calloc((size_t)n + 1, sizeof(int)), *stack = ut_malloc(((size_t)n + 1) * 3 * sizeof(int));
    if (!depth || !stack) {
        ut_free(depth);
        ut_free(stack);
        return -1;
    }
    int sp = 0;
    stack[sp++] = m->entry->id;
    stack[sp++] = 0;
    stack[sp++] = 0;
    depth[m->entry->id] = -1;   /* on the stack */
    while (sp) {
        const hlo_comp *c = m->comps[stack[sp - 3]];
        int *i = &stack[sp - 2], *k = &stack[sp - 1];
        while (*i < c->ninstrs && *k >= c->instrs[*i]->ncalled) {
            (*i)++;
            *k = 0;
        }
        if (*i == c->ninstrs) {   /* done: one more than its deepest callee */
            int d = 1;
            for (int q = 0; q < c->ninstrs; q++)
                for (int r = 0; r < c->instrs[q]->ncalled; r++)
                    if (depth[c->instrs[q]->called[r]->id] + 1 > d) d = depth[c->instrs[q]->called[r]->id] + 1;
            depth[c->id] = d;
            sp -= 3;
            continue;
        }
        const hlo_comp *next = c->instrs[*i]->called[(*k)++];
        if (depth[next->id] == 0) {   /* not seen (the parser refuses cycles, so -1 is never met again) */
            depth[next->id] = -1;
            stack[sp++] = next->id;
            stack[sp++] = 0;
            stack[sp++] = 0;
        }
    }
    best = depth[m->entry->id];
    if (deepest) {
        /* follow the deepest path down for the message */
        const hlo_comp *c = m->entry;
        for (;;) {
            const hlo_comp *nx = NULL;
            for (int q = 0; q < c->ninstrs && !nx; q++)
                for (int r = 0; r < c->instrs[q]->ncalled && !nx; r++)
                    if (depth[c->instrs[q]->called[r]->id] == depth[c->id] - 1) nx = c->instrs[q]->called[r];
            if (!nx) break;
            c = nx;
        }
        *deepest = c;
    }
    ut_free(depth);
    ut_free(stack);
    return best;
}

tpu_status ver_require(tpu_ctx *ctx, const hlo_module *m)
{
    if (!m || !m->entry) return ut_err(ctx, TPU_ERR_INVALID, "no module (or a module without an entry computation)");
    if (__atomic_load_n(&m->verified, __ATOMIC_ACQUIRE) > 0) return TPU_OK;
    const hlo_comp *deep = NULL;
    int depth = ver_call_depth(m, &deep);
    if (depth < 0) return ut_nomem(ctx);
    if (depth > VER_MAX_CALL_DEPTH) {
        char w[300] = "";
        if (deep && deep->root) hlo_where(m, deep->root, w, sizeof w);
        return ut_err(ctx, TPU_ERR_UNSUPPORTED, "%s: computations call each other %d deep (down to '%s' at %s); tpusim "
                      "runs and plans at most %d levels", m->filename ? m->filename : m->name, depth,
                      deep ? deep->name : "?", w, VER_MAX_CALL_DEPTH);
    }
    ver_report *r = ver_report_new(m->name, NULL);
    if (!r) return ut_nomem(ctx);
    int nerr = ver_verify_module(ctx, m, r);
    tpu_status st = TPU_OK;
    if (r->oom) {
        st = ut_err(ctx, TPU_ERR_NOMEM, "out of memory while verifying %s", m->filename ? m->filename : m->name);
    } else if (nerr > 0) {
        ut_buf b;
        ut_buf_init(&b);
        int shown = 0;
        for (int i = 0; i < r->nproblems && shown < 5; i++) {
            const ver_problem *p = &r->problems[i];
            if (p->sev != VER_ERROR) continue;
            ut_buf_printf(&b, "\n  %s: %s%s%s", p->where ? p->where : "?", p->instr && *p->instr ? p->instr : "",
                          p->instr && *p->instr ? ": " : "", p->msg);
            shown++;
        }
        if (nerr > shown) ut_buf_printf(&b, "\n  ... and %d more (tpusim check lists them all)", nerr - shown);
        st = ut_err(ctx, TPU_ERR_SHAPE, "%s does not verify (%d error%s):%s",
                    m->filename ? m->filename : m->name, nerr, nerr == 1 ? "" : "s", b.failed || !b.data ? "" : b.data);
        ut_buf_free(&b);
    }
    if (st != TPU_ERR_NOMEM) __atomic_store_n(&((hlo_module *)m)->verified, st ? -1 : 1, __ATOMIC_RELEASE);
    tpu_report_free(r);
    return st;
}
