/* exe_fuse.c — fused elementwise loops: connected elementwise ops of one shape (with the broadcasts, dynamic
 * slices and small static moves feeding them: views, read through a planned index table) run as one pass over
 * the elements, block by block, every intermediate held in a small per-thread scratch block instead of a full
 * array. A group may have several outputs (a threefry round updates two
 * arrays from shared intermediates: the whole jax.random chain is one loop). Values are computed with the
 * same block operations as the unfused kernels (kernels/ew_block.h, ew_int.h) or, for the rest, with the
 * reference per-element semantics, so a fused chain gives bit-for-bit the unfused results.
 * TPUSIM_NO_FUSION=1 turns fusion off (for A/B checks).
 *
 * Members hold f32 and bf16 (as f32 values), pred, 32-bit and 64-bit integers; other types stay unfused. */
#include "exec.h"
#include "exe_fuse.h"
#include "exe_ops.h"
#include "kernels/ew_block.h"
#include "kernels/ew_int.h"
#include "kernels/stream.h"
#include "exe_par.h"

#include <stdatomic.h>

#include <stdlib.h>
#include <string.h>

#define FU_BLOCK       1024
#define FU_MIN_BLOCK   256    /* shortest block a long chain's L1 budget shrinks to */
#define FU_L1_BYTES    (24 << 10)   /* scratch a block may take (this CPU class's L1 data cache: 32-48 KiB) */
#define FU_LANE        8      /* scratch bytes per element of every slot (the widest class) */
#define FU_MAX_MEMBERS 256    /* a group holds a scratch block per member: longer chains are split */
#define PAR_T          64     /* threads a fused loop splits for at most */
/* A small group's scratch lives on the stack (a loop body's fused ops run thousands of times). */
#define FU_STACK_BYTES (24 << 10)
#define FU_STACK_SLOTS 128

enum { FU_F = 0, FU_P = 1, FU_I = 2, FU_L = 3 };   /* scratch classes: float, uint8 (pred), 32-bit, 64-bit int */

static int fu_class(tpu_dtype t)
{
    switch (t) {
    case TPU_F32: case TPU_BF16: return FU_F;
    case TPU_PRED: return FU_P;
    case TPU_S32: case TPU_U32: return FU_I;
    case TPU_S64: case TPU_U64: return FU_L;
    default: return -1;
    }
}

static size_t fu_esize(int cls) { return cls == FU_P ? 1 : cls == FU_L ? 8 : 4; }

/* The tensor's storage is the class's block layout (no conversion on the way in or out). */
static int fu_direct(tpu_dtype t) { return t != TPU_BF16 && fu_class(t) >= 0; }

static int fu_same_dims(const hlo_shape *a, const hlo_shape *b)
{
    if (a->rank != b->rank) return 0;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i]) return 0;
    return 1;
}

/* An elementwise op that may be a member: array result of a supported type, operands of supported types;
 * bitcast-convert between classes of one lane width (u32 <-> f32: jax's uniform floats). Scalars stay out
 * (a loop body's counters: the plain kernels are cheaper for one element). */
static int fu_elementwise(const hlo_instr *in)
{
    hlo_class c = hlo_op_class((hlo_op)in->op);
    int bc = in->op == HLO_BITCAST_CONVERT;
    if (!(c == HLO_CLASS_EW1 || c == HLO_CLASS_EW2 || c == HLO_CLASS_EW3 || c == HLO_CLASS_CMP || bc)) return 0;
    if (in->op == HLO_REDUCE_PRECISION || in->op == HLO_STOCHASTIC_CONVERT || in->op == HLO_COMPLEX || in->op == HLO_REAL ||
        in->op == HLO_IMAG)
        return 0;
    if (!hlo_shape_is_array(&in->shape) || fu_class((tpu_dtype)in->shape.dtype) < 0 || in->shape.dyn_mask) return 0;
    if (hlo_shape_count(&in->shape) < 2 || in->nops < 1 || in->nops > 3) return 0;
    for (int k = 0; k < in->nops; k++)
        if (!hlo_shape_is_array(&in->ops[k]->shape) || fu_class((tpu_dtype)in->ops[k]->shape.dtype) < 0) return 0;
    if (bc) {
        tpu_dtype a = (tpu_dtype)in->ops[0]->shape.dtype, b = (tpu_dtype)in->shape.dtype;
        if (!fu_direct(a) || !fu_direct(b) || fu_esize(fu_class(a)) != fu_esize(fu_class(b)) ||
            !fu_same_dims(&in->shape, &in->ops[0]->shape))
            return 0;
    }
    return 1;
}

/* A dynamic-slice with scalar starts (a loop body's window of a loop-invariant array, x[i*8:i*8+256]) whose
 * readers are all in groups is absorbed like a broadcast: each block copies its part of the window from the
 * operand, and the window itself is never materialised. The operand must differ in size from the window (a
 * same-size slice could read a member of the very group). Rank <= 2: a member records 3 operands. */
static int fu_ds_candidate(const hlo_instr *in)
{
    if (in->op != HLO_DYNAMIC_SLICE || !hlo_shape_is_array(&in->shape) || fu_class((tpu_dtype)in->shape.dtype) < 0 ||
        in->shape.dyn_mask || in->nctrl || in->shape.rank < 1 || in->shape.rank > 2 || in->nops != 1 + in->shape.rank)
        return 0;
    const hlo_shape *os = &in->ops[0]->shape;
    if (!hlo_shape_is_array(os) || os->dtype != in->shape.dtype || os->rank != in->shape.rank || os->dyn_mask ||
        hlo_shape_count(os) == hlo_shape_count(&in->shape))
        return 0;
    for (int k = 1; k < in->nops; k++) {
        const hlo_shape *ks = &in->ops[k]->shape;
        char kind = tpu_dtype_kind((tpu_dtype)ks->dtype);
        if (!hlo_shape_is_array(ks) || ks->rank != 0 || (kind != 's' && kind != 'u')) return 0;
    }
    return 1;
}

/* Members that read their input tensors themselves (not through the block loader): broadcasts, dynamic-slices,
 * views. */
static int fu_reads_tensors(const exe_fmember *m)
{
    return m->view || m->in->op == HLO_BROADCAST || m->in->op == HLO_DYNAMIC_SLICE;
}

/* ---- views: static moves read through an index map ----
 * A loop body's small groups read values that slices, reshapes and transposes rearrange first (jnp.outer(h[:8],
 * h[:8]): a slice under each broadcast). Each such move, materialised, costs an interpreter step and an array
 * per iteration; a view member instead reads the bottom of the chain through one table, element i of the view
 * being element bidx[i] of the bottom. Only small views (the table is planned once for every element). */
#define FU_VIEW_MAX 4096
#define FU_VIEW_RUN 16    /* runs of the bottom at least this long are copied as runs, not gathered */

/* A static move whose index map fu_view_index can compose: one array operand of the same element type, a
 * supported class, attributes that fit the shapes (checked here: an ill-formed one stays a kernel, which
 * reports it). */
static int fu_view_op(const hlo_instr *in)
{
    if (in->nops != 1 || in->nctrl || !hlo_shape_is_array(&in->shape) || in->shape.dyn_mask ||
        fu_class((tpu_dtype)in->shape.dtype) < 0)
        return 0;
    const hlo_shape *s = &in->shape, *x = &in->ops[0]->shape;
    if (!hlo_shape_is_array(x) || x->dyn_mask || x->dtype != s->dtype || hlo_shape_count(x) >= INT32_MAX) return 0;
    const int64_t *d;
    int nd;
    switch ((hlo_op)in->op) {
    case HLO_RESHAPE: return hlo_shape_count(x) == hlo_shape_count(s);
    case HLO_SLICE: {
        const hlo_attr *sa = hlo_attr_find(in, HK_SLICE);
        if (!sa || sa->kind != HA_SLICE || sa->v.slice->rank != x->rank || s->rank != x->rank) return 0;
        const hlo_slice *sl = sa->v.slice;
        for (int i = 0; i < x->rank; i++) {
            if (sl->stride[i] < 1 || sl->start[i] < 0 || sl->limit[i] > x->dims[i]) return 0;
            int64_t n = (sl->limit[i] - sl->start[i] + sl->stride[i] - 1) / sl->stride[i];
            if (n != s->dims[i] || (n > 0 && sl->start[i] >= x->dims[i])) return 0;
        }
        return 1;
    }
    case HLO_TRANSPOSE: {
        nd = hlo_attr_ints(in, HK_DIMENSIONS, &d);
        if (nd != s->rank || nd != x->rank) return 0;
        unsigned seen = 0;
        for (int k = 0; k < nd; k++) {
            if (d[k] < 0 || d[k] >= nd || (seen >> d[k] & 1) || x->dims[d[k]] != s->dims[k]) return 0;
            seen |= 1u << d[k];
        }
        return 1;
    }
    case HLO_BROADCAST: {
        nd = hlo_attr_ints(in, HK_DIMENSIONS, &d);
        if (nd != x->rank) return 0;
        unsigned seen = 0;
        for (int k = 0; k < nd; k++) {
            if (d[k] < 0 || d[k] >= s->rank || (seen >> d[k] & 1) || x->dims[k] != s->dims[d[k]]) return 0;
            seen |= 1u << d[k];
        }
        return 1;
    }
    case HLO_REVERSE: {
        nd = hlo_attr_ints(in, HK_DIMENSIONS, &d);
        if (s->rank != x->rank) return 0;
        for (int k = 0; k < s->rank; k++)
            if (x->dims[k] != s->dims[k]) return 0;
        for (int k = 0; k < nd; k++)
            if (d[k] < 0 || d[k] >= s->rank) return 0;
        return 1;
    }
    default: return 0;
    }
}

/* The element of `src` that element `lin` (row-major) of view y reads: down the chain of moves from y to src
 * one move at a time, as each move's kernel defines it. The naive map: it fills the tables, and reference runs
 * (EXE_REF_ELEMENTWISE) call it per element. */
static int64_t fu_view_index(const hlo_instr *y, const hlo_instr *src, int64_t lin)
{
    for (; y != src; y = y->ops[0]) {
        if (y->op == HLO_RESHAPE) continue;   /* row-major both sides: the same linear index */
        const hlo_shape *s = &y->shape, *x = &y->ops[0]->shape;
        int64_t oi[TPU_MAX_RANK], xi[TPU_MAX_RANK], rem = lin;
        for (int k = s->rank - 1; k >= 0; k--) {
            oi[k] = s->dims[k] ? rem % s->dims[k] : 0;
            rem = s->dims[k] ? rem / s->dims[k] : 0;
        }
        const int64_t *d;
        int nd = hlo_attr_ints(y, HK_DIMENSIONS, &d);
        switch ((hlo_op)y->op) {
        case HLO_SLICE: {
            const hlo_slice *sl = hlo_attr_find(y, HK_SLICE)->v.slice;
            for (int k = 0; k < x->rank; k++) xi[k] = sl->start[k] + oi[k] * sl->stride[k];
            break;
        }
        case HLO_TRANSPOSE:
            for (int k = 0; k < nd; k++) xi[d[k]] = oi[k];
            break;
        case HLO_BROADCAST:
            for (int k = 0; k < nd; k++) xi[k] = oi[d[k]];
            break;
        default:   /* HLO_REVERSE */
            for (int k = 0; k < x->rank; k++) xi[k] = oi[k];
            for (int k = 0; k < nd; k++) xi[d[k]] = x->dims[d[k]] - 1 - oi[d[k]];
            break;
        }
        lin = 0;
        for (int k = 0; k < x->rank; k++) lin = lin * x->dims[k] + xi[k];
    }
    return lin;
}

/* A view read by group members that need not be a plain broadcast (one absorbed as fu_absorbable says). */
static int fu_view_top(const hlo_instr *in)
{
    return in->op != HLO_BROADCAST && fu_view_op(in) && hlo_shape_count(&in->shape) <= FU_VIEW_MAX;
}

static int fu_bcast_candidate(const hlo_instr *in)
{
    return in->op == HLO_BROADCAST && hlo_shape_is_array(&in->shape) && fu_class((tpu_dtype)in->shape.dtype) >= 0 &&
           !in->shape.dyn_mask && in->nops == 1 && hlo_shape_is_array(&in->ops[0]->shape) &&
           in->ops[0]->shape.dtype == in->shape.dtype && in->nctrl == 0;
}

void exe_fuse_free(exe_fgroup *g, int n)
{
    for (int i = 0; i < n; i++) {
        for (int k = 0; g[i].members && k < g[i].nmembers; k++) ut_free(g[i].members[k].bidx);
        ut_free(g[i].members);
        ut_free(g[i].inputs);
        ut_free(g[i].outputs);
        ut_free(g[i].buf);
        ut_free(g[i].buf_es);
        ut_free(g[i].fixed);
        ut_free(g[i].in_moved);
        ut_free(g[i].lay_off);
    }
    ut_free(g);
}

/* ---- planning ----
 * One pass in topological order. An elementwise instruction joins (and merges) the groups of its operands
 * that are still open; a group closes as soon as anything outside it reads one of its members. So every
 * reader from outside comes after the group's last member, where the group runs, and no path leaves a group
 * and comes back into it. Linear in the computation's size (union-find). */

typedef struct fu_plan {
    int n;
    int *parent, *size, *closed;   /* provisional groups, by the id of the instruction that opened them */
    int *gid;                      /* provisional group of each instruction, or -1 */
    int *ustart, *users;           /* users of each instruction (CSR, live users only) */
    uint8_t *ctrl_user;            /* instruction is a control predecessor of something */
} fu_plan;

static int fu_find(fu_plan *P, int g)
{
    while (P->parent[g] != g) {
        P->parent[g] = P->parent[P->parent[g]];
        g = P->parent[g];
    }
    return g;
}

static int fu_group_of(fu_plan *P, int i) { return P->gid[i] >= 0 ? fu_find(P, P->gid[i]) : -1; }

static void fu_grow(fu_plan *P, const hlo_comp *c, int i)
{
    const hlo_instr *in = c->instrs[i];
    int g = -1;
    for (int k = 0; k < in->nops; k++) {
        int h = fu_group_of(P, in->ops[k]->id);
        if (h < 0 || h == g || P->closed[h] || !fu_same_dims(&in->ops[k]->shape, &in->shape)) continue;
        if (g < 0) {
            if (P->size[h] < FU_MAX_MEMBERS) g = h;
        } else if (P->size[g] + P->size[h] < FU_MAX_MEMBERS) {
            P->parent[h] = g;
            P->size[g] += P->size[h];
        }
    }
    if (g < 0) g = i;   /* opens its own group (parent[i] == i already) */
    P->gid[i] = g;
    P->size[g]++;
}

static void fu_close_readers(fu_plan *P, const hlo_instr *in)
{
    int mine = fu_group_of(P, in->id);
    for (int k = 0; k < in->nops; k++) {
        int h = fu_group_of(P, in->ops[k]->id);
        if (h >= 0 && h != mine) P->closed[h] = 1;
    }
    for (int k = 0; k < in->nctrl; k++) {
        int h = fu_group_of(P, in->ctrl[k]->id);
        if (h >= 0) P->closed[h] = 1;
    }
}

/* A reshape of a dynamic-slice that may be absorbed (lax.scan's xs[i]: a row, then the squeeze): the same
 * elements in the same (row-major) order, so the slice's member stands for the reshape as well. */
static int fu_ds_reshape(const hlo_instr *in)
{
    return in->op == HLO_RESHAPE && fu_view_top(in) && fu_ds_candidate(in->ops[0]);
}

/* A broadcast is absorbed when every reader is a member of a group of its dims (or, for a dynamic-slice, a
 * reshape read so: fu_ds_reshape): each group then computes it block by block and it is never materialised. */
static int fu_absorbable(fu_plan *P, const hlo_comp *c, int b)
{
    const hlo_instr *in = c->instrs[b];
    if (!(fu_bcast_candidate(in) || fu_ds_candidate(in) || fu_view_top(in)) || in == c->root || P->ctrl_user[b] ||
        P->ustart[b + 1] == P->ustart[b])
        return 0;
    for (int u = P->ustart[b]; u < P->ustart[b + 1]; u++) {
        int j = P->users[u];
        if (fu_ds_reshape(c->instrs[j]) && fu_absorbable(P, c, j)) continue;
        if (P->gid[j] < 0 || !fu_same_dims(&c->instrs[j]->shape, &in->shape)) return 0;
    }
    return 1;
}

/* Moves under an absorbed view, each read by nothing but the move above it, join the view (fu_build composes
 * their maps): they have no value either. */
static void fu_mark_chains(fu_plan *P, const hlo_comp *c, const uint8_t *live, int *group_of)
{
    for (int i = c->ninstrs - 1; i >= 0; i--) {
        const hlo_instr *t = c->instrs[i];
        if (group_of[i] != EXE_FUSE_ABSORBED || !fu_view_op(t) || hlo_shape_count(&t->shape) > FU_VIEW_MAX) continue;
        for (const hlo_instr *x = t->ops[0];; x = x->ops[0]) {
            int j = x->id;
            if (!live[j] || group_of[j] != EXE_FUSE_NONE || !fu_view_op(x) || x == c->root || P->ctrl_user[j] ||
                P->ustart[j + 1] - P->ustart[j] != 1)
                break;
            group_of[j] = EXE_FUSE_ABSORBED;
        }
    }
}

static void fu_plan_free(fu_plan *P)
{
    ut_free(P->parent);
    ut_free(P->size);
    ut_free(P->closed);
    ut_free(P->gid);
    ut_free(P->ustart);
    ut_free(P->users);
    ut_free(P->ctrl_user);
}

static tpu_status fu_plan_init(fu_plan *P, tpu_ctx *ctx, const hlo_comp *c, const uint8_t *live)
{
    int n = c->ninstrs;
    memset(P, 0, sizeof *P);
    P->n = n;
    int64_t ne = 0;
    for (int i = 0; i < n; i++) ne += c->instrs[i]->nops;
    size_t sn = (size_t)(n ? n : 1);
    P->parent = ut_malloc(sn * sizeof(int));
    P->size = ut_calloc(sn, sizeof(int));
    P->closed = ut_calloc(sn, sizeof(int));
    P->gid = ut_malloc(sn * sizeof(int));
    P->ustart = ut_calloc(sn + 1, sizeof(int));
    P->users = ut_malloc((size_t)(ne ? ne : 1) * sizeof(int));
    P->ctrl_user = ut_calloc(sn, 1);
    if (!P->parent || !P->size || !P->closed || !P->gid || !P->ustart || !P->users || !P->ctrl_user) {
        fu_plan_free(P);
        return ut_nomem(ctx);
    }
    for (int i = 0; i < n; i++) {
        P->parent[i] = i;
        P->gid[i] = -1;
        if (!live[i]) continue;
        const hlo_instr *in = c->instrs[i];
        for (int k = 0; k < in->nops; k++) P->ustart[in->ops[k]->id + 1]++;
        for (int k = 0; k < in->nctrl; k++) P->ctrl_user[in->ctrl[k]->id] = 1;
    }
    for (int i = 0; i < n; i++) P->ustart[i + 1] += P->ustart[i];
    int *fill = P->size;   /* zero; used as a cursor, then cleared */
    for (int i = 0; i < n; i++) {
        if (!live[i]) continue;
        const hlo_instr *in = c->instrs[i];
        for (int k = 0; k < in->nops; k++) {
            int o = in->ops[k]->id;
            P->users[P->ustart[o] + fill[o]++] = i;
        }
    }
    memset(P->size, 0, sn * sizeof(int));
    return TPU_OK;
}

/* Member k's precomputed attributes. */
static void fu_member_init(exe_fmember *m)
{
    const hlo_instr *I = m->in;
    tpu_dtype t0 = (tpu_dtype)(I->nops ? I->ops[0]->shape.dtype : I->shape.dtype);
    m->cls = (int8_t)fu_class((tpu_dtype)I->shape.dtype);
    m->dir = -1;
    m->uns = tpu_dtype_kind(t0) == 'u';
    m->total = 0;
    if (I->op == HLO_COMPARE) {
        const char *type = hlo_attr_str(I, HK_TYPE);
        m->dir = (int8_t)ewb_direction(hlo_attr_str(I, HK_DIRECTION));
        m->total = type && !strcmp(type, "TOTALORDER");
        if (type && !strcmp(type, "UNSIGNED")) m->uns = 1;
    }
}

/* Appends x as a member; its operands resolve to member slots or (new) input slots. src0: what operand 0
 * reads instead of x's (a view's chain bottom), or NULL. */
static exe_fmember *fu_add_member(exe_fgroup *G, const hlo_instr *x, int *slot, int *inslot, const hlo_instr *src0)
{
    exe_fmember *m = &G->members[G->nmembers];
    m->in = x;
    m->out = -1;
    for (int a = 0; a < x->nops && a < 3; a++) {
        const hlo_instr *o = a == 0 && src0 ? src0 : x->ops[a];
        if (slot[o->id] >= 0) {
            m->op[a] = slot[o->id];
            continue;
        }
        if (inslot[o->id] < 0) {
            inslot[o->id] = G->ninputs;
            G->inputs[G->ninputs++] = o;
        }
        m->op[a] = -1 - inslot[o->id];
    }
    fu_member_init(m);
    slot[x->id] = G->nmembers++;
    return m;
}

/* Builds group G from the instructions whose final group is g (ids in order[0..cnt)). slot/inslot: -1 on
 * entry, restored on exit. */
static tpu_status fu_build(fu_plan *P, const hlo_comp *c, const int *group_of, int g, const int *order, int cnt,
                           int *slot, int *inslot, exe_fgroup *G)
{
    /* absorbed broadcasts this group reads */
    int nb = 0;
    for (int q = 0; q < cnt; q++) {
        const hlo_instr *in = c->instrs[order[q]];
        for (int k = 0; k < in->nops; k++) {
            int o = in->ops[k]->id;
            if (group_of[o] == EXE_FUSE_ABSORBED && slot[o] == -1) {
                slot[o] = -2;
                nb++;
            }
        }
    }
    G->members = ut_calloc((size_t)(cnt + nb), sizeof *G->members);
    G->inputs = ut_calloc((size_t)(cnt + nb) * 3 + 1, sizeof *G->inputs);
    G->outputs = ut_calloc((size_t)cnt, sizeof *G->outputs);
    const hlo_instr **alias = ut_malloc((size_t)(nb + 1) * sizeof *alias);   /* reshapes named by a slice's member */
    int nalias = 0;
    if (!G->members || !G->inputs || !G->outputs || !alias) {
        ut_free(alias);
        return TPU_ERR_NOMEM;
    }
    /* the absorbed broadcasts first (slot -2 marks one not yet added), then the compute members */
    for (int q = 0; q < cnt; q++) {
        const hlo_instr *in = c->instrs[order[q]];
        for (int k = 0; k < in->nops; k++) {
            const hlo_instr *b = in->ops[k], *src = b->nops ? b->ops[0] : NULL;
            if (slot[b->id] != -2) continue;
            if (fu_ds_reshape(b) && group_of[src->id] == EXE_FUSE_ABSORBED) {   /* the slice's member, both names */
                if (slot[src->id] < 0) fu_add_member(G, src, slot, inslot, NULL);
                slot[b->id] = slot[src->id];
                alias[nalias++] = b;
                continue;
            }
            /* a view: a move other than a broadcast, or a broadcast over absorbed moves (fu_mark_chains) */
            int view = fu_view_top(b) || (b->op == HLO_BROADCAST && group_of[src->id] == EXE_FUSE_ABSORBED);
            while (view && src != b && group_of[src->id] == EXE_FUSE_ABSORBED) src = src->ops[0];
            exe_fmember *m = fu_add_member(G, b, slot, inslot, view ? src : NULL);
            if (!view) continue;
            int64_t nv = hlo_shape_count(&b->shape);
            m->view = 1;
            m->vsrc = src;
            m->bidx_n = hlo_shape_count(&src->shape);
            m->bidx = ut_malloc((size_t)(nv ? nv : 1) * sizeof *m->bidx);
            if (!m->bidx) return TPU_ERR_NOMEM;
            for (int64_t i = 0; i < nv; i++) {
                m->bidx[i] = (int32_t)fu_view_index(b, src, i);
                if (m->bidx[i] >= m->bspan) m->bspan = m->bidx[i] + 1;
            }
            /* runs: the longest r (dividing nv) such that only every r-th element may start a new run */
            int64_t r = 1, brk = 0;
            for (int64_t i = 1; i < nv && !brk; i++) brk = m->bidx[i] != m->bidx[i - 1] + 1 ? i : 0;
            if (!brk) r = nv;   /* one contiguous run of the bottom (a reshape, a slice of whole rows): in place */
            else if (nv % brk == 0) {
                r = brk;
                for (int64_t i = 1; i < nv && r > 1; i++)
                    if (i % r && m->bidx[i] != m->bidx[i - 1] + 1) r = 1;
            }
            m->view = (uint8_t)(r == nv ? 2 : 1);
            m->vrun = (int32_t)r;
        }
    }
    for (int q = 0; q < cnt; q++) {
        const hlo_instr *x = c->instrs[order[q]];
        exe_fmember *m = fu_add_member(G, x, slot, inslot, NULL);
        G->last = x;
        /* an output: the root, or read by anything outside the group */
        int outside = x == c->root || P->ctrl_user[x->id];
        for (int u = P->ustart[x->id]; u < P->ustart[x->id + 1] && !outside; u++) outside = group_of[P->users[u]] != g;
        if (outside) {
            m->out = G->noutputs;
            G->outputs[G->noutputs++] = x;
        }
    }
    for (int k = 0; k < G->nmembers; k++) slot[G->members[k].in->id] = -1;
    for (int k = 0; k < nalias; k++) slot[alias[k]->id] = -1;
    for (int q = 0; q < G->ninputs; q++) inslot[G->inputs[q]->id] = -1;
    ut_free(alias);
    return TPU_OK;
}

/* A buffer of es bytes per element: a free one of that width, or a new one (always for a fixed slot: nothing
 * else may write its buffer). */
static int fu_buf_get(exe_fgroup *G, int *freel, int es, int fixed)
{
    for (int b = 0; b < G->nbuf && !fixed; b++)
        if (freel[b] && G->buf_es[b] == es) {
            freel[b] = 0;
            return b;
        }
    G->buf_es[G->nbuf] = (uint8_t)es;
    freel[G->nbuf] = 0;
    return G->nbuf++;
}

/* Assigns the group's slots to scratch buffers. What exe_fuse_run's blocks read from scratch: inputs that are
 * scalars (filled once, `fixed`) or bf16 (converted for the whole block), scalar broadcasts (fixed), every
 * other member from its computation to its last reader, outputs to the block's end. A member never shares a
 * buffer with its own operands (the block operations do not run in place). */
/* The slots member m reads: its operands; a rotate's shifted value and two counts; nothing for a folded shift. */
static int fu_reads(const exe_fmember *m, int *r)
{
    if (m->fold) return 0;
    if (m->rot || m->madd) {
        memcpy(r, m->rop, 3 * sizeof *r);
        return 3;
    }
    int n = m->in->nops < 3 ? m->in->nops : 3;
    for (int a = 0; a < n; a++) r[a] = m->op[a];
    return n;
}

/* Rotates (threefry's rotl: or(shift-left(x, l), shift-right-logical(x, 32 - l)) on 32-bit lanes, the shifts
 * read by nothing else) become one member: two fewer passes over the block per round. */
static tpu_status fu_plan_rotates(exe_fgroup *G)
{
    int nm = G->nmembers;
    int *readers = ut_calloc((size_t)nm + 1, sizeof(int));
    if (!readers) return TPU_ERR_NOMEM;
    for (int k = 0; k < nm; k++)
        for (int a = 0; a < G->members[k].in->nops && a < 3; a++)
            if (G->members[k].op[a] >= 0) readers[G->members[k].op[a]]++;
    for (int k = 0; k < nm; k++) {
        exe_fmember *m = &G->members[k];
        if (m->in->op != HLO_OR || m->cls != FU_I || m->op[0] < 0 || m->op[1] < 0 || m->op[0] == m->op[1]) continue;
        exe_fmember *a = &G->members[m->op[0]], *b = &G->members[m->op[1]];
        if (a->in->op == HLO_SHIFT_RIGHT_LOGICAL) {
            exe_fmember *t = a;
            a = b;
            b = t;
        }
        if (a->in->op != HLO_SHIFT_LEFT || b->in->op != HLO_SHIFT_RIGHT_LOGICAL || a->cls != FU_I || b->cls != FU_I ||
            a->op[0] != b->op[0] || a->out >= 0 || b->out >= 0 || readers[m->op[0]] != 1 || readers[m->op[1]] != 1 ||
            a->fold || b->fold || a->rot || b->rot)
            continue;
        m->rot = 1;
        m->rop[0] = a->op[0];
        m->rop[1] = a->op[1];
        m->rop[2] = b->op[1];
        a->fold = b->fold = 1;
    }
    /* f32 multiply-adds (polynomials, moment updates): the product, read by nothing else, folds into the add
     * or subtract; rounded after the multiply and after the add as before (C11 does not contract a*b+c) */
    for (int k = 0; k < nm; k++) {
        exe_fmember *m = &G->members[k];
        if ((m->in->op != HLO_ADD && m->in->op != HLO_SUBTRACT) || m->in->shape.dtype != TPU_F32 || m->rot || m->fold) continue;
        for (int side = 1; side >= 0; side--) {
            int o = m->op[side];
            if (o < 0 || m->op[!side] == o) continue;
            exe_fmember *p = &G->members[o];
            if (p->in->op != HLO_MULTIPLY || p->in->shape.dtype != TPU_F32 || p->in->ops[0]->shape.dtype != TPU_F32 ||
                p->out >= 0 || readers[o] != 1 || p->fold || p->rot || p->madd)
                continue;
            m->madd = (uint8_t)(side == 1 ? 1 : 2);
            m->rop[0] = m->op[!side];
            m->rop[1] = p->op[0];
            m->rop[2] = p->op[1];
            p->fold = 1;
            break;
        }
    }
    ut_free(readers);
    return TPU_OK;
}

static tpu_status fu_plan_bufs(exe_fgroup *G)
{
    int nm = G->nmembers, ni = G->ninputs, slots = nm + ni;
    int64_t n = hlo_shape_count(&G->last->shape);
    G->buf = ut_malloc((size_t)slots * sizeof(int));
    G->buf_es = ut_malloc((size_t)slots);
    G->fixed = ut_calloc((size_t)slots, 1);
    G->in_moved = ut_calloc((size_t)ni + 1, 1);
    int *last = ut_malloc((size_t)slots * sizeof(int)), *freel = ut_calloc((size_t)slots, sizeof(int));
    tpu_status st = TPU_OK;
    if (!G->buf || !G->buf_es || !G->fixed || !G->in_moved || !last || !freel) {
        st = TPU_ERR_NOMEM;
        goto out;
    }
    for (int k = 0; k < nm; k++)
        if (fu_reads_tensors(&G->members[k]) && G->members[k].op[0] < 0) G->in_moved[-1 - G->members[k].op[0]] = 1;
    G->nbuf = 0;
    int rd[3], nr;
    for (int k = 0; k < ni; k++) last[k] = 0;   /* here: input k is read by a member other than a broadcast */
    for (int k = 0; k < nm; k++) {
        nr = fu_reads(&G->members[k], rd);
        for (int a = 0; a < nr; a++)
            if (rd[a] < 0 && !fu_reads_tensors(&G->members[k])) last[-1 - rd[a]] = 1;
    }
    for (int q = 0; q < ni; q++) {
        const hlo_shape *s = &G->inputs[q]->shape;
        int64_t cnt = hlo_shape_count(s);
        int j = nm + q;
        G->buf[j] = -1;
        if (last[q] && (cnt == 1 || (cnt == n && !fu_direct((tpu_dtype)s->dtype)))) {
            G->fixed[j] = cnt == 1;
            G->buf[j] = fu_buf_get(G, freel, (int)fu_esize(fu_class((tpu_dtype)s->dtype)), 1);
        }
    }
    for (int k = 0; k < nm; k++) last[k] = G->members[k].out >= 0 ? nm : k;
    for (int k = 0; k < nm; k++) {
        nr = fu_reads(&G->members[k], rd);
        for (int a = 0; a < nr; a++)
            if (rd[a] >= 0 && last[rd[a]] < k) last[rd[a]] = k;
    }
    for (int k = 0; k < nm; k++) {
        const exe_fmember *m = &G->members[k];
        G->buf[k] = -1;
        if (m->fold) continue;
        G->fixed[k] = !m->view && m->in->op == HLO_BROADCAST &&
                      (m->in->shape.rank == 0 || hlo_shape_count(&m->in->ops[0]->shape) == 1);
        G->buf[k] = fu_buf_get(G, freel, (int)fu_esize(m->cls), G->fixed[k]);
        nr = fu_reads(m, rd);
        for (int a = 0; a < nr; a++) {
            int o = rd[a];
            if (o >= 0 && last[o] == k && !G->fixed[o] && !freel[G->buf[o]]) freel[G->buf[o]] = 1;
        }
    }
out:
    ut_free(last);
    ut_free(freel);
    return st;
}

/* Elements per block for a group of n elements: FU_BLOCK, shorter while the buffers would not fit in L1 (a
 * long chain); a one-block group's block is its elements. */
static int64_t fu_block_len(const exe_fgroup *G, int64_t n)
{
    int slots = G->nmembers + G->ninputs;
    size_t per = 0;   /* bytes per element a block touches (a fixed buffer is mostly read as one scalar) */
    for (int b = 0; b < G->nbuf; b++) per += G->buf_es[b];
    for (int j = 0; j < slots; j++)
        if (G->fixed[j] && G->buf[j] >= 0) per -= G->buf_es[G->buf[j]];
    int64_t L = FU_BLOCK;
    while (L > FU_MIN_BLOCK && (size_t)L * per > FU_L1_BYTES) L /= 2;
    return (n + L - 1) / L == 1 ? n : L;
}

/* Scratch offsets for blocks of L elements: buffers sized by class (a 32-bit block takes half the bytes of a
 * 64-bit one), 64-byte aligned. off[j]: slot j's buffer; off[slots]: the total. Returns non-zero on no memory. */
static int fu_offsets(const exe_fgroup *G, int64_t L, size_t *off)
{
    int slots = G->nmembers + G->ninputs;
    size_t boffv[FU_STACK_SLOTS + 1], *boff = G->nbuf <= FU_STACK_SLOTS ? boffv : ut_malloc((size_t)(G->nbuf + 1) * sizeof *boff);
    if (!boff) return 1;
    boff[0] = 0;
    for (int b = 0; b < G->nbuf; b++) boff[b + 1] = boff[b] + (((size_t)L * G->buf_es[b] + 63) & ~(size_t)63);
    for (int j = 0; j < slots; j++) off[j] = G->buf[j] >= 0 ? boff[G->buf[j]] : 0;
    off[slots] = boff[G->nbuf];
    if (boff != boffv) ut_free(boff);
    return 0;
}

/* A one-block group's broadcast of an array (not a scalar): the operand element each output element reads,
 * as fu_broadcast walks them (loop bodies run their small groups thousands of times). Returns non-zero on no
 * memory. */
#define FU_BIDX_MAX 4096
static int fu_plan_bidx(exe_fmember *m, int64_t n)
{
    const hlo_shape *s = &m->in->shape, *ss = m->in->nops == 1 ? &m->in->ops[0]->shape : NULL;
    if (m->view || m->in->op != HLO_BROADCAST || !ss || !hlo_shape_is_array(ss) || ss->dyn_mask || s->dyn_mask || s->rank == 0 ||
        hlo_shape_count(ss) <= 1 || hlo_shape_count(s) != n)
        return 0;
    int64_t ostride[TPU_MAX_RANK], sstride[TPU_MAX_RANK] = {0}, srcs[TPU_MAX_RANK], acc = 1;
    for (int d = s->rank - 1; d >= 0; d--) {
        ostride[d] = acc;
        acc *= s->dims[d];
    }
    acc = 1;
    for (int d = ss->rank - 1; d >= 0; d--) {
        srcs[d] = acc;
        acc *= ss->dims[d];
    }
    const int64_t *bd;
    int nbd = hlo_attr_ints(m->in, HK_DIMENSIONS, &bd);
    for (int i = 0; i < nbd && i < ss->rank; i++)
        if (bd[i] >= 0 && bd[i] < s->rank) sstride[bd[i]] = srcs[i];
    m->bidx = ut_malloc((size_t)n * sizeof *m->bidx);
    if (!m->bidx) return 1;
    for (int64_t i = 0; i < n; i++) {
        int64_t off = 0;
        for (int d = 0; d < s->rank; d++) off += (i / ostride[d]) % s->dims[d] * sstride[d];
        m->bidx[i] = (int32_t)off;
        if (off >= m->bspan) m->bspan = off + 1;
    }
    m->bidx_n = hlo_shape_count(ss);
    return 0;
}

/* The layout a group's shapes fix, worked out once (a loop body's groups run thousands of times). Returns
 * non-zero on no memory. */
static int fu_plan_layout(exe_fgroup *G)
{
    if (G->last->shape.dyn_mask) return 0;   /* (exe_fuse_run works it out) */
    G->lay_n = hlo_shape_count(&G->last->shape);
    G->lay_blk = fu_block_len(G, G->lay_n);
    G->lay_off = ut_malloc((size_t)(G->nmembers + G->ninputs + 1) * sizeof *G->lay_off);
    if (!G->lay_off || fu_offsets(G, G->lay_blk, G->lay_off)) return 1;
    for (int k = 0; k < G->nmembers && G->lay_blk == G->lay_n && G->lay_n <= FU_BIDX_MAX; k++)
        if (fu_plan_bidx(&G->members[k], G->lay_n)) return 1;
    return 0;
}

tpu_status exe_fuse_plan(tpu_ctx *ctx, const hlo_comp *c, int enabled, const uint8_t *live, int *group_of, exe_fgroup **out, int *nout)
{
    int n = c->ninstrs;
    *out = NULL;
    *nout = 0;
    for (int i = 0; i < n; i++) group_of[i] = EXE_FUSE_NONE;
    if (!enabled || n == 0) return TPU_OK;
    fu_plan P;
    tpu_status st = fu_plan_init(&P, ctx, c, live);
    if (st) return st;
    for (int i = 0; i < n; i++) {
        if (!live[i]) continue;
        if (fu_elementwise(c->instrs[i])) fu_grow(&P, c, i);
        fu_close_readers(&P, c->instrs[i]);
    }
    for (int i = 0; i < n; i++) P.gid[i] = fu_group_of(&P, i);
    /* compute members and absorbable broadcasts read per group; keep groups of two compute members, or of one
     * that reads a broadcast it absorbs (the broadcast is then never materialised) */
    /* (a plain reshape does not count: its kernel makes a view without a copy, so a lone op reading one gains
     * nothing from a group; one over a dynamic-slice or another move does) */
    int *compute = P.size, *bcasts = P.closed, *final = P.parent;
    memset(compute, 0, (size_t)n * sizeof(int));
    memset(bcasts, 0, (size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) {
        if (P.gid[i] < 0) continue;
        compute[P.gid[i]]++;
        const hlo_instr *in = c->instrs[i];
        for (int k = 0; k < in->nops; k++) {
            const hlo_instr *o = in->ops[k];
            int plain = o->op == HLO_RESHAPE && o->nops == 1 && !fu_ds_reshape(o) && !fu_view_op(o->ops[0]);
            if (!plain && fu_absorbable(&P, c, o->id)) bcasts[P.gid[i]]++;
        }
    }
    int nf = 0;
    for (int g = 0; g < n; g++) final[g] = compute[g] >= 2 || (compute[g] == 1 && bcasts[g] > 0) ? nf++ : -1;
    for (int i = 0; i < n; i++) group_of[i] = P.gid[i] >= 0 ? final[P.gid[i]] : EXE_FUSE_NONE;
    for (int i = 0; i < n; i++) P.gid[i] = group_of[i];
    for (int i = 0; i < n; i++)
        if (live[i] && fu_absorbable(&P, c, i)) group_of[i] = EXE_FUSE_ABSORBED;
    fu_mark_chains(&P, c, live, group_of);
    /* members of each group in topological order (bucket sort), then each group built */
    int *start = ut_calloc((size_t)nf + 2, sizeof(int)), *order = ut_malloc((size_t)n * sizeof(int));
    int *slot = ut_malloc((size_t)n * sizeof(int)), *inslot = ut_malloc((size_t)n * sizeof(int));
    exe_fgroup *groups = nf ? ut_calloc((size_t)nf, sizeof *groups) : NULL;
    if (!start || !order || !slot || !inslot || (nf && !groups)) st = ut_nomem(ctx);
    if (!st) {
        for (int i = 0; i < n; i++)
            if (group_of[i] >= 0) start[group_of[i] + 2]++;
        for (int g = 0; g < nf; g++) start[g + 2] += start[g + 1];
        for (int i = 0; i < n; i++) {
            if (group_of[i] >= 0) order[start[group_of[i] + 1]++] = i;
            slot[i] = inslot[i] = -1;
        }
        for (int g = 0; g < nf && !st; g++)
            if (fu_build(&P, c, group_of, g, order + start[g], start[g + 1] - start[g], slot, inslot, &groups[g]) ||
                fu_plan_rotates(&groups[g]) || fu_plan_bufs(&groups[g]) || fu_plan_layout(&groups[g]))
                st = ut_nomem(ctx);
    }
    ut_free(start);
    ut_free(order);
    ut_free(slot);
    ut_free(inslot);
    fu_plan_free(&P);
    if (st) {
        exe_fuse_free(groups, nf);
        for (int i = 0; i < n; i++) group_of[i] = EXE_FUSE_NONE;
        return st;
    }
    *out = groups;
    *nout = nf;
    return TPU_OK;
}

/* ---- running a group ---- */

typedef struct fu_buf {
    int   cls;
    int   splat;      /* every element holds the same value (a scalar broadcast): integer ops take it as a scalar */
    void *p;          /* points into scratch, or straight into a tensor whose storage is the class's */
} fu_buf;

/* Reads elements [o, o+len) of an external input (identity or scalar mapping) into a block. */
EXE_VEC
static void fu_load(const tpu_tensor *t, int64_t o, int len, int cls, void *scratch, fu_buf *b, int64_t n_out)
{
    int scalar = t->count == 1 && n_out != 1;
    size_t es = fu_esize(cls);
    b->cls = cls;
    b->splat = scalar;
    if (fu_direct(t->dtype) && !scalar) {
        b->p = (char *)t->data + (size_t)o * es;
        return;
    }
    b->p = scratch;
    if (t->dtype == TPU_BF16) {
        const uint16_t *x = (const uint16_t *)t->data + (scalar ? 0 : o);
        float *z = scratch;
        if (scalar) {
            float v = fp_bf16_to_f32_inline(x[0]);
            for (int i = 0; i < len; i++) z[i] = v;
        } else {
            for (int i = 0; i < len; i++) z[i] = fp_bf16_to_f32_inline(x[i]);
        }
        return;
    }
    switch (es) {   /* a scalar repeated */
    case 1: memset(scratch, ((const uint8_t *)t->data)[0], (size_t)len); break;
    case 4: {
        uint32_t v = ((const uint32_t *)t->data)[0];
        for (int i = 0; i < len; i++) ((uint32_t *)scratch)[i] = v;
        break;
    }
    default: {
        uint64_t v = ((const uint64_t *)t->data)[0];
        for (int i = 0; i < len; i++) ((uint64_t *)scratch)[i] = v;
        break;
    }
    }
}

/* dst[0..n) <- src elements at off + j*st (st 0: one value repeated), in the block's class */
EXE_VEC
static void fu_run(void *dst, int cls, const tpu_tensor *src, int64_t off, int64_t st, int64_t n)
{
    if (src->dtype == TPU_BF16) {
        const uint16_t *x = (const uint16_t *)src->data + off;
        float *z = dst;
        if (st == 0) {
            float v = fp_bf16_to_f32_inline(x[0]);
            for (int64_t j = 0; j < n; j++) z[j] = v;
        } else {
            for (int64_t j = 0; j < n; j++) z[j] = fp_bf16_to_f32_inline(x[j * st]);
        }
        return;
    }
    size_t es = fu_esize(cls);
    if (st == 1) {
        memcpy(dst, (const char *)src->data + (size_t)off * es, (size_t)n * es);
        return;
    }
    switch (es) {
    case 1: {
        const uint8_t *x = (const uint8_t *)src->data + off;
        if (st == 0) memset(dst, x[0], (size_t)n);
        else for (int64_t j = 0; j < n; j++) ((uint8_t *)dst)[j] = x[j * st];
        break;
    }
    case 4: {
        const uint32_t *x = (const uint32_t *)src->data + off;
        uint32_t *z = dst;
        if (st == 0) {
            uint32_t v = x[0];
            for (int64_t j = 0; j < n; j++) z[j] = v;
        } else {
            for (int64_t j = 0; j < n; j++) z[j] = x[j * st];
        }
        break;
    }
    default: {
        const uint64_t *x = (const uint64_t *)src->data + off;
        uint64_t *z = dst;
        if (st == 0) {
            uint64_t v = x[0];
            for (int64_t j = 0; j < n; j++) z[j] = v;
        } else {
            for (int64_t j = 0; j < n; j++) z[j] = x[j * st];
        }
        break;
    }
    }
}

/* Broadcast member: gathers its operand's elements for output elements [o, o+len), a run along the
 * innermost output dim at a time (a copy, a fill or a strided gather). */
static void fu_broadcast(const hlo_instr *in, const tpu_tensor *src, int64_t o, int len, int cls, void *dst)
{
    const hlo_shape *s = &in->shape;
    size_t es = fu_esize(cls);
    if (s->rank == 0 || src->count == 1) {
        fu_run(dst, cls, src, 0, 0, len);
        return;
    }
    int64_t ostride[TPU_MAX_RANK], sstride[TPU_MAX_RANK] = {0}, srcs[TPU_MAX_RANK];
    int64_t acc = 1;
    for (int d = s->rank - 1; d >= 0; d--) {
        ostride[d] = acc;
        acc *= s->dims[d];
    }
    exe_strides(src, srcs);
    const int64_t *bd;
    int nbd = hlo_attr_ints(in, HK_DIMENSIONS, &bd);
    for (int i = 0; i < nbd && i < src->rank; i++) sstride[bd[i]] = srcs[i];
    int64_t idx[TPU_MAX_RANK], rem = o, off = 0;
    for (int d = 0; d < s->rank; d++) {
        idx[d] = rem / ostride[d];
        rem %= ostride[d];
        off += idx[d] * sstride[d];
    }
    int last = s->rank - 1;
    int64_t L = s->dims[last], sl = sstride[last];
    for (int i = 0; i < len;) {
        int64_t run = UT_MIN(L - idx[last], (int64_t)(len - i));
        fu_run((char *)dst + (size_t)i * es, cls, src, off, sl, run);
        i += (int)run;
        off += run * sl;
        idx[last] += run;
        if (idx[last] < L) continue;
        /* carry into the outer dims */
        off -= sl * L;
        idx[last] = 0;
        for (int d = last - 1; d >= 0; d--) {
            off += sstride[d];
            if (++idx[d] < s->dims[d]) break;
            off -= sstride[d] * s->dims[d];
            idx[d] = 0;
        }
    }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SANITIZE_ADDRESS__)
#include <immintrin.h>
/* 32-bit elements, 16 at a time with VPGATHERDD: GCC keeps the plain loop scalar for a small group's 64
 * elements (its cost model), where it was a tenth of a scan step's time */
__attribute__((target("avx512f"))) static void fu_gather32_512(uint32_t *z, const uint32_t *x, const int32_t *idx, int len)
{
    int i = 0;
    for (; i + 16 <= len; i += 16)
        _mm512_storeu_si512((void *)(z + i), _mm512_i32gather_epi32(_mm512_loadu_si512((const void *)(idx + i)), (const void *)x, 4));
    for (; i < len; i++) z[i] = x[idx[i]];
}

/* The same when every index is below span <= 32 (a small vector broadcast, jnp.outer's rows and columns): the
 * source in two registers, 16 outputs per VPERMI2D, a fraction of a gather's cost */
__attribute__((target("avx512f"))) static void fu_permute32_512(uint32_t *z, const uint32_t *x, const int32_t *idx, int len,
                                                                int span)
{
    __mmask16 lo = (__mmask16)(span >= 16 ? 0xFFFFu : (1u << span) - 1);
    __mmask16 hi = (__mmask16)(span <= 16 ? 0u : span >= 32 ? 0xFFFFu : (1u << (span - 16)) - 1);
    __m512i a = _mm512_maskz_loadu_epi32(lo, x), b = _mm512_maskz_loadu_epi32(hi, x + 16);   /* no fault where masked */
    int i = 0;
    for (; i + 16 <= len; i += 16)
        _mm512_storeu_si512((void *)(z + i), _mm512_permutex2var_epi32(a, _mm512_loadu_si512((const void *)(idx + i)), b));
    for (; i < len; i++) z[i] = x[idx[i]];
}

#define FU_GATHER512 1
#endif

/* dst[i] <- src[idx[i]] for i < len, elements of the block's class (not bf16); span: every index is below it */
EXE_VEC
static void fu_gather(void *dst, int cls, const void *src, const int32_t *restrict idx, int len, int64_t span)
{
#ifdef FU_GATHER512
    if (fu_esize(cls) == 4 && __builtin_cpu_supports("avx512f")) {
        if (span <= 32) fu_permute32_512(dst, src, idx, len, (int)span);
        else fu_gather32_512(dst, src, idx, len);
        return;
    }
#else
    (void)span;
#endif
    switch (fu_esize(cls)) {
    case 1: {
        uint8_t *restrict z = dst;
        const uint8_t *restrict x = src;
        for (int i = 0; i < len; i++) z[i] = x[idx[i]];
        break;
    }
    case 4: {
        uint32_t *restrict z = dst;
        const uint32_t *restrict x = src;
        for (int i = 0; i < len; i++) z[i] = x[idx[i]];
        break;
    }
    default: {
        uint64_t *restrict z = dst;
        const uint64_t *restrict x = src;
        for (int i = 0; i < len; i++) z[i] = x[idx[i]];
        break;
    }
    }
}

/* A broadcast member's elements [o, o+len): through its planned table when it has one (fu_plan_bidx) and the
 * operand is the array the plan saw, else fu_broadcast (which the tests compare it with: EXE_REF_ELEMENTWISE). */
static void fu_bcast_member(const exe_state *S, const exe_fmember *m, const tpu_tensor *src, int64_t o, int len, int cls,
                            void *dst)
{
    if (m->bidx && src->count == m->bidx_n && src->dtype != TPU_BF16 && !(S->ref & EXE_REF_ELEMENTWISE))
        fu_gather(dst, cls, src->data, m->bidx + o, len, m->bspan);
    else
        fu_broadcast(m->in, src, o, len, cls, dst);
}

/* A view member's elements [o, o+len) into b: through its table (fu_view_index's map, planned once) when the
 * bottom is the array the plan saw, a contiguous run of it read in place (b->p points into it); else (bf16,
 * and reference runs: EXE_REF_ELEMENTWISE) element by element through fu_view_index itself into scratch. */
static void fu_view_member(const exe_state *S, const exe_fmember *m, const tpu_tensor *src, int64_t o, int len, fu_buf *b)
{
    size_t es = fu_esize(m->cls);
    if (src->dtype != TPU_BF16 && src->dtype == (tpu_dtype)m->vsrc->shape.dtype && !(S->ref & EXE_REF_ELEMENTWISE)) {
        if (m->view == 2) {
            b->p = (char *)src->data + (size_t)(m->bidx[0] + o) * es;
        } else if (m->vrun >= FU_VIEW_RUN) {   /* column blocks of a matrix: a copy per row, as the slice kernel */
            for (int64_t i = o, e; i < o + len; i = e) {
                e = UT_MIN((i / m->vrun + 1) * m->vrun, o + len);
                memcpy((char *)b->p + (size_t)(i - o) * es, (const char *)src->data + (size_t)m->bidx[i] * es, (size_t)(e - i) * es);
            }
        } else {
            fu_gather(b->p, m->cls, src->data, m->bidx + o, len, m->bspan);
        }
        return;
    }
    for (int i = 0; i < len; i++) fu_run((char *)b->p + (size_t)i * es, m->cls, src, fu_view_index(m->in, m->vsrc, o + i), 0, 1);
}

/* Dynamic-slice member: output elements [o, o+len) of the window, copied from the operand a run along the
 * innermost dim at a time; starts clamped so the window stays inside the operand, as the kernel clamps them. */
static void fu_dslice(const exe_fmember *m, exe_value *const *inputs, int64_t o, int len, void *dst)
{
    const hlo_shape *s = &m->in->shape;
    const tpu_tensor *src = inputs[-1 - m->op[0]]->t;
    int R = s->rank;
    int64_t start[2] = {0, 0}, sstr[2] = {1, 1}, idx[2] = {0, 0};
    if (R == 2) sstr[0] = src->dims[1];
    for (int d = 0; d < R; d++) {
        int64_t v = exe_index_value(inputs[-1 - m->op[1 + d]]->t, 0), hi = src->dims[d] - s->dims[d];
        start[d] = v > hi ? hi : v < 0 ? 0 : v;
    }
    size_t es = fu_esize(m->cls);
    int64_t L = s->dims[R - 1], rem = o;
    for (int d = R - 1; d >= 0; d--) {
        idx[d] = rem % s->dims[d];
        rem /= s->dims[d];
    }
    for (int i = 0; i < len;) {
        int64_t run = UT_MIN(L - idx[R - 1], (int64_t)(len - i)), off = 0;
        for (int d = 0; d < R; d++) off += (start[d] + idx[d]) * sstr[d];
        fu_run((char *)dst + (size_t)i * es, m->cls, src, off, 1, run);
        i += (int)run;
        idx[R - 1] += run;
        if (idx[R - 1] == L && R == 2) {
            idx[1] = 0;
            idx[0]++;
        }
    }
}

/* Element i of a block as the reference reads an element of dtype t. */
static exe_scalar fu_get(const fu_buf *b, tpu_dtype t, int i)
{
    exe_scalar v = {0, 0, 0};
    switch (b->cls) {
    case FU_F: v = exe_scalar_load(TPU_F32, b->p, i); break;   /* DAZ like the unfused reference */
    case FU_P: v.i = ((const uint8_t *)b->p)[i]; break;
    case FU_I: {
        uint32_t u = ((const uint32_t *)b->p)[i];
        v.i = tpu_dtype_kind(t) == 'u' ? (int64_t)u : (int64_t)(int32_t)u;
        break;
    }
    default: v.i = ((const int64_t *)b->p)[i]; break;
    }
    return v;
}

static void fu_put(fu_buf *b, int i, exe_scalar v)
{
    switch (b->cls) {
    case FU_F: ((float *)b->p)[i] = (float)v.f; break;
    case FU_P: ((uint8_t *)b->p)[i] = (uint8_t)(v.i != 0); break;
    case FU_I: ((uint32_t *)b->p)[i] = (uint32_t)v.i; break;
    default: ((int64_t *)b->p)[i] = v.i; break;
    }
}

/* The reference semantics, element by element: what every member falls back to. */
static void fu_member_ref(const exe_state *S, const exe_fmember *m, fu_buf *out, fu_buf *const *in, int len)
{
    const hlo_instr *I = m->in;
    hlo_op op = (hlo_op)I->op;
    tpu_dtype t = (tpu_dtype)I->shape.dtype, t0 = (tpu_dtype)I->ops[0]->shape.dtype;
    hlo_class c = hlo_op_class(op);
    const char *dir = NULL, *type = NULL;
    if (op == HLO_COMPARE) {
        dir = hlo_attr_str(I, HK_DIRECTION);
        type = hlo_attr_str(I, HK_TYPE);
    }
    for (int i = 0; i < len; i++) {
        exe_scalar r;
        if (op == HLO_COMPARE) {
            if (m->total && in[0]->cls == FU_F) {
                int64_t x = exe_total_order_key(TPU_F32, in[0]->p, i), y = exe_total_order_key(TPU_F32, in[1]->p, i);
                int d = m->dir;
                r.i = d == 0 ? x == y : d == 1 ? x != y : d == 2 ? x < y : d == 3 ? x <= y : d == 4 ? x > y : x >= y;
            } else {
                r.i = exe_scalar_compare(t0, fu_get(in[0], t0, i), fu_get(in[1], t0, i), dir, type);
            }
        } else if (op == HLO_CONVERT) {
            r = exe_scalar_convert(S, t0, t, fu_get(in[0], t0, i));
        } else if (op == HLO_SELECT) {
            r = fu_get(in[1], t, i);
            if (!((const uint8_t *)in[0]->p)[i]) r = fu_get(in[2], t, i);
        } else if (op == HLO_CLAMP) {
            exe_scalar mx = exe_scalar_binop(S, HLO_MAXIMUM, t, fu_get(in[1], t, i), fu_get(in[0], t, i));
            r = exe_scalar_binop(S, HLO_MINIMUM, t, mx, fu_get(in[2], t, i));
        } else if (c == HLO_CLASS_EW1) {
            r = exe_scalar_unop(S, op, t0, fu_get(in[0], t0, i));
        } else {
            r = exe_scalar_binop(S, op, t0, fu_get(in[0], t0, i), fu_get(in[1], t0, i));
        }
        fu_put(out, i, r);
    }
}

/* convert with a block form; returns 0 for the rest */
EXE_VEC
static int fu_convert(const exe_state *S, tpu_dtype t0, tpu_dtype t, const fu_buf *a, fu_buf *out, int len)
{
    int c0 = a->cls, c1 = out->cls;
    if (t0 == t || (t0 == TPU_BF16 && t == TPU_F32) || (c0 == c1 && c0 != FU_F && fu_esize(c0) == fu_esize(c1))) {
        memcpy(out->p, a->p, (size_t)len * fu_esize(c1));   /* same bits (s32 <-> u32, s64 <-> u64) */
        return 1;
    }
    if (t0 == TPU_F32 && t == TPU_BF16) {
        const float *x = a->p;
        float *z = out->p;
        if (S->numerics == TPU_NUMERICS_TPU)
            for (int i = 0; i < len; i++) z[i] = ewb_round_bf16_ftz(x[i]);
        else
            for (int i = 0; i < len; i++) z[i] = fp_bf16_to_f32_inline(fp_f32_to_bf16_inline(x[i]));
        return 1;
    }
    if (c0 == FU_L && c1 == FU_I) {   /* 64 -> 32 bits keeps the low half (jax's iota split; ewi_convert's loop
                                       * for it does not vectorise) */
        const uint64_t *x = a->p;
        uint32_t *z = out->p;
        for (int i = 0; i < len; i++) z[i] = (uint32_t)x[i];
        return 1;
    }
    if (fu_direct(t0) && fu_direct(t)) return ewi_convert(t0, t, a->p, out->p, len);
    if (t == TPU_BF16 && fu_direct(t0) && ewi_convert(t0, TPU_F32, a->p, out->p, len)) {
        ewb_round_bf16(out->p, len);   /* through f32, as the reference rounds */
        return 1;
    }
    if (t0 == TPU_BF16 && fu_direct(t)) return ewi_convert(TPU_F32, t, a->p, out->p, len);
    return 0;
}

/* f32 (and bf16 as f32, rounded after each op) members with a block form; returns 0 for the rest */
EXE_VEC
static int fu_member_f(const exe_state *S, const exe_fmember *m, fu_buf *out, fu_buf *const *in, int len)
{
    const hlo_instr *I = m->in;
    hlo_op op = (hlo_op)I->op;
    tpu_dtype t = (tpu_dtype)I->shape.dtype, t0 = (tpu_dtype)I->ops[0]->shape.dtype;
    hlo_class c = hlo_op_class(op);
    if (t0 != t || (t != TPU_F32 && t != TPU_BF16)) return 0;
    int bf = t == TPU_BF16;
    if (op == HLO_CLAMP && !bf) {
        const float *lo = in[0]->p, *x = in[1]->p, *hi = in[2]->p;
        float *z = out->p;
        for (int i = 0; i < len; i++) z[i] = ewb_minf(ewb_maxf(x[i], lo[i]), hi[i]);
        return 1;
    }
    if (c == HLO_CLASS_EW1 && ewb_unary_f32(op, in[0]->p, out->p, 0) && (!bf || ewb_unary_bf16_ok(op))) {
        if (bf) ewb_unary_bf16(op, in[0]->p, out->p, len);
        else ewb_unary_f32(op, in[0]->p, out->p, len);
        return 1;
    }
    if (c == HLO_CLASS_EW2 && ewb_binary_f32(op, in[0]->p, in[1]->p, out->p, 0) && !(bf && op == HLO_POWER)) {
        /* a scalar broadcast operand (constants of a polynomial, epsilons, learning rates) read once */
        int sl = in[0]->splat && !in[1]->splat, sr = in[1]->splat && !in[0]->splat;
        if (!(sl || sr) || !ewb_binary_f32_scalar(op, in[sl]->p, ((const float *)in[sr]->p)[0], out->p, len, sl))
            ewb_binary_f32(op, in[0]->p, in[1]->p, out->p, len);
        if (bf) ewb_round_bf16(out->p, len);
        return 1;
    }
    (void)S;
    return 0;
}

/* 32/64-bit integer members with a block form; returns 0 for the rest */
EXE_VEC
static int fu_member_int(const exe_fmember *m, fu_buf *out, fu_buf *const *in, int len)
{
    const hlo_instr *I = m->in;
    hlo_op op = (hlo_op)I->op;
    hlo_class c = hlo_op_class(op);
    if (in[0]->cls != m->cls) return 0;
    if (m->cls == FU_I) {
        /* an unsigned divide or remainder by a broadcast scalar: through a multiply (randint's x % span) */
        if ((op == HLO_REMAINDER || op == HLO_DIVIDE) && m->uns && in[1]->splat && !in[0]->splat) {
            ewi_divrem32_scalar(op == HLO_REMAINDER, in[0]->p, ((const uint32_t *)in[1]->p)[0], out->p, len);
            return 1;
        }
        /* a scalar operand (a broadcast constant: hash and RNG chains) is read once, shifts by it are uniform */
        if (c == HLO_CLASS_EW2 && in[1]->splat && !in[0]->splat &&
            ewi_binary32_scalar(op, in[0]->p, ((const uint32_t *)in[1]->p)[0], out->p, len))
            return 1;
        if (c == HLO_CLASS_EW2 && in[0]->splat && !in[1]->splat && ewi_commutes(op) &&
            ewi_binary32_scalar(op, in[1]->p, ((const uint32_t *)in[0]->p)[0], out->p, len))
            return 1;
        if (c == HLO_CLASS_EW2) return ewi_binary32(op, m->uns, in[0]->p, in[1]->p, out->p, len);
        if (c == HLO_CLASS_EW1) return ewi_unary32(op, m->uns, in[0]->p, out->p, len);
    } else {
        if (c == HLO_CLASS_EW2 && in[1]->splat && !in[0]->splat &&
            ewi_binary64_scalar(op, in[0]->p, ((const uint64_t *)in[1]->p)[0], out->p, len))
            return 1;
        if (c == HLO_CLASS_EW2 && in[0]->splat && !in[1]->splat && ewi_commutes(op) &&
            ewi_binary64_scalar(op, in[1]->p, ((const uint64_t *)in[0]->p)[0], out->p, len))
            return 1;
        if (c == HLO_CLASS_EW2) return ewi_binary64(op, m->uns, in[0]->p, in[1]->p, out->p, len);
        if (c == HLO_CLASS_EW1) return ewi_unary64(op, m->uns, in[0]->p, out->p, len);
    }
    return 0;
}

EXE_VEC
static int fu_compare(const exe_fmember *m, fu_buf *out, fu_buf *const *in, int len)
{
    tpu_dtype t0 = (tpu_dtype)m->in->ops[0]->shape.dtype;
    if (m->dir < 0 || m->total) return 0;
    switch (in[0]->cls) {
    case FU_F:
        if (t0 != TPU_F32 && t0 != TPU_BF16) return 0;
        if (in[1]->splat && !in[0]->splat) ewb_compare_f32_sy(m->dir, in[0]->p, ((const float *)in[1]->p)[0], out->p, len);
        else ewb_compare_f32(m->dir, in[0]->p, in[1]->p, out->p, len);
        return 1;
    case FU_I:
        if (in[1]->splat && !in[0]->splat) ewi_compare32_sy(m->dir, m->uns, in[0]->p, ((const uint32_t *)in[1]->p)[0], out->p, len);
        else ewi_compare32(m->dir, m->uns, in[0]->p, in[1]->p, out->p, len);
        return 1;
    case FU_L: ewi_compare64(m->dir, m->uns, in[0]->p, in[1]->p, out->p, len); return 1;
    default: return 0;
    }
}

EXE_VEC
static int fu_select(fu_buf *out, fu_buf *const *in, int len)
{
    const uint8_t *p = in[0]->p;
    switch (fu_esize(out->cls)) {
    case 1: {
        const uint8_t *x = in[1]->p, *y = in[2]->p;
        uint8_t *z = out->p;
        for (int i = 0; i < len; i++) z[i] = p[i] ? x[i] : y[i];
        return 1;
    }
    case 4: {
        const uint32_t *x = in[1]->p, *y = in[2]->p;
        uint32_t *z = out->p;
        /* broadcast scalar choices (erf_inv's two coefficient sets) read once */
        if (in[1]->splat && in[2]->splat) {
            const uint32_t a = x[0], b = y[0];
            for (int i = 0; i < len; i++) z[i] = p[i] ? a : b;
        } else if (in[2]->splat) {
            const uint32_t b = y[0];
            for (int i = 0; i < len; i++) z[i] = p[i] ? x[i] : b;
        } else if (in[1]->splat) {
            const uint32_t a = x[0];
            for (int i = 0; i < len; i++) z[i] = p[i] ? a : y[i];
        } else {
            for (int i = 0; i < len; i++) z[i] = p[i] ? x[i] : y[i];
        }
        return 1;
    }
    default: {
        const uint64_t *x = in[1]->p, *y = in[2]->p;
        uint64_t *z = out->p;
        for (int i = 0; i < len; i++) z[i] = p[i] ? x[i] : y[i];
        return 1;
    }
    }
}

/* A rotate: (x << l) | (x >> r) with each shift as ewi_binary32 gives it (a count >= 32 gives 0); counts that
 * are broadcast scalars (threefry's) make it one uniform shift pair. in: x, l, r. */
EXE_VEC
static void fu_rotate(fu_buf *out, fu_buf *const *in, int len)
{
    const uint32_t *x = in[0]->p, *l = in[1]->p, *r = in[2]->p;
    uint32_t *z = out->p;
    if (in[1]->splat && in[2]->splat) {
        uint32_t sl = l[0], sr = r[0];
        if (sl < 32 && sr < 32) for (int i = 0; i < len; i++) z[i] = (x[i] << sl) | (x[i] >> sr);
        else if (sl < 32) for (int i = 0; i < len; i++) z[i] = x[i] << sl;
        else if (sr < 32) for (int i = 0; i < len; i++) z[i] = x[i] >> sr;
        else memset(z, 0, (size_t)len * sizeof *z);
        return;
    }
    for (int i = 0; i < len; i++) z[i] = (l[i] >= 32 ? 0 : x[i] << (l[i] & 31)) | (r[i] >= 32 ? 0 : x[i] >> (r[i] & 31));
}

/* x + p*q, x - p*q, p*q + x or p*q - x (pfirst) on f32 lanes: the product rounded, then the sum, operands in
 * their order (each lane exactly what the multiply and the add give apart). in: x, p, q. */
EXE_VEC
static void fu_muladd(fu_buf *out, int sub, int pfirst, fu_buf *const *in, int len)
{
    const float *x = in[0]->p, *p = in[1]->p, *q = in[2]->p;
    float *z = out->p;
    if (!sub && !pfirst) for (int i = 0; i < len; i++) { float t = p[i] * q[i]; z[i] = x[i] + t; }
    else if (!sub) for (int i = 0; i < len; i++) { float t = p[i] * q[i]; z[i] = t + x[i]; }
    else if (!pfirst) for (int i = 0; i < len; i++) { float t = p[i] * q[i]; z[i] = x[i] - t; }
    else for (int i = 0; i < len; i++) { float t = p[i] * q[i]; z[i] = t - x[i]; }
}

/* Computes member m for one block. */
EXE_VEC
static void fu_member(const exe_state *S, const exe_fmember *m, fu_buf *out, fu_buf *const *in, int len)
{
    const hlo_instr *I = m->in;
    hlo_op op = (hlo_op)I->op;
    tpu_dtype t = (tpu_dtype)I->shape.dtype, t0 = (tpu_dtype)I->ops[0]->shape.dtype;
    int done = 0;
    if (op == HLO_COMPARE) done = fu_compare(m, out, in, len);
    else if (op == HLO_SELECT && in[1]->cls == out->cls && in[2]->cls == out->cls) done = fu_select(out, in, len);
    else if (op == HLO_CONVERT) done = fu_convert(S, t0, t, in[0], out, len);
    else if (op == HLO_BITCAST_CONVERT) {
        memcpy(out->p, in[0]->p, (size_t)len * fu_esize(out->cls));
        done = 1;
    } else if (out->cls == FU_P && t == TPU_PRED && in[0]->cls == FU_P &&
               (op == HLO_AND || op == HLO_OR || op == HLO_XOR || op == HLO_NOT)) {
        const uint8_t *x = in[0]->p, *y = op == HLO_NOT ? NULL : in[1]->p;
        uint8_t *z = out->p;
        switch (op) {
        case HLO_AND: for (int i = 0; i < len; i++) z[i] = (uint8_t)(x[i] & y[i]); break;
        case HLO_OR: for (int i = 0; i < len; i++) z[i] = (uint8_t)(x[i] | y[i]); break;
        case HLO_XOR: for (int i = 0; i < len; i++) z[i] = (uint8_t)(x[i] ^ y[i]); break;
        default: for (int i = 0; i < len; i++) z[i] = (uint8_t)!x[i]; break;
        }
        done = 1;
    } else if (out->cls == FU_F) {
        done = fu_member_f(S, m, out, in, len);
    } else if (out->cls == FU_I || out->cls == FU_L) {
        done = fu_member_int(m, out, in, len);
    }
    if (!done) fu_member_ref(S, m, out, in, len);
}

typedef struct fu_job {
    exe_state        *S;
    const exe_fgroup *G;
    exe_value *const *inputs;
    tpu_tensor      **outs;      /* by output index */
    int64_t           n;
    const size_t     *off;       /* byte offset of each scratch slot (members, then inputs; then the total) */
    char            **scratch;   /* per thread: one block per member and per input */
    fu_buf          **mb;
    int               lazy;            /* scratch[tid] made by the thread when it first runs a chunk */
    char             *stack_scratch;   /* a one-block group: on the caller's stack */
    fu_buf           *stack_mb;
    int64_t           blk;       /* elements per block (the buffers' capacity) */
    const int        *reuse;     /* per output: the input it is written into, or -1 */
    const uint8_t    *direct;    /* per member: fu_writes_direct */
    const uint8_t    *stream;    /* per output: written with streaming stores (fu_streamed) */
    int               any_stream;
    uint8_t           filled[PAR_T];   /* per thread: its scratch's fixed slots hold their values */
    _Atomic int       failed;
} fu_job;

/* Output k's block (in the member's scratch) to its tensor; `stream`: with streaming stores (the bf16 form
 * made in a small buffer first). */
EXE_VEC
static void fu_store(tpu_tensor *t, const fu_buf *b, int64_t o, int len, int stream)
{
    if (t->dtype == TPU_BF16) {
        const float *x = b->p;
        uint16_t tmp[FU_BLOCK], *z = stream && len <= FU_BLOCK ? tmp : (uint16_t *)t->data + o;
        for (int i = 0; i < len; i++) z[i] = fp_f32_to_bf16_inline(x[i]);
        if (z == tmp) exe_stream_copy((uint16_t *)t->data + o, tmp, (size_t)len * sizeof *tmp);
        return;
    }
    size_t es = fu_esize(b->cls);
    if (stream) exe_stream_copy((char *)t->data + (size_t)o * es, b->p, (size_t)len * es);
    else memcpy((char *)t->data + (size_t)o * es, b->p, (size_t)len * es);
}

/* Is output tensor t written with streaming stores? When it is far larger than the caches (most of its
 * lines would be gone before the next op reads them: layernorm_gelu_train's f32[16,512,1024] results, 9%
 * less CPU time; only the results of a run, 0%) and not received in place (an input's lines are in the
 * cache already). Not in reference runs: they keep the plain stores. */
static int fu_streamed(const exe_state *S, const tpu_tensor *t, int reused)
{
    return !reused && !(S->ref & (EXE_REF_KERNELS | EXE_REF_ELEMENTWISE)) && t->nbytes >= EXE_STREAM_MIN_BYTES && exe_stream_ok();
}

/* Does member k write its block straight into its output tensor (whose storage is the block's)? The last
 * member always can; another output only into a tensor of its own (one that receives an input in place
 * would be written before later members read that input). */
static int fu_writes_direct(const fu_job *J, int k)
{
    const exe_fmember *m = &J->G->members[k];
    return m->out >= 0 && fu_direct(J->outs[m->out]->dtype) && (k == J->G->nmembers - 1 || J->reuse[m->out] < 0) &&
           !J->stream[m->out];   /* a streamed output goes through the block (its stores leave from there) */
}

static void fu_block(fu_job *J, char *scratch, fu_buf *mb, int64_t o, int len, int fill)
{
    const exe_fgroup *G = J->G;
    exe_value *const *inputs = J->inputs;
    int nm = G->nmembers, ni = G->ninputs;
    const size_t *off = J->off;
    fu_buf *ib = mb + nm;
    for (int q = 0; q < ni; q++) {
        const tpu_tensor *it = inputs[q]->t;
        int cls = fu_class(it->dtype);
        /* an input that only feeds broadcast or view members is read by them, not element by element (one
         * needing conversion but given no buffer is one of those, whatever its size) */
        if ((it->count != J->n || !fu_direct(it->dtype)) && G->buf[nm + q] < 0) {
            ib[q].cls = cls;
            ib[q].splat = 0;
            ib[q].p = NULL;
            continue;
        }
        if (G->fixed[nm + q] && !fill) {   /* a scalar, repeated in its buffer by an earlier block */
            ib[q].cls = cls;
            ib[q].splat = 1;
            ib[q].p = scratch + off[nm + q];
            continue;
        }
        if (G->fixed[nm + q]) fu_load(it, 0, (int)J->blk, cls, scratch + off[nm + q], &ib[q], J->n);
        else fu_load(it, o, len, cls, scratch + off[nm + q], &ib[q], J->n);
    }
    for (int k = 0; k < nm; k++) {
        const exe_fmember *m = &G->members[k];
        mb[k].cls = m->cls;
        mb[k].splat = 0;
        mb[k].p = scratch + off[k];
        /* the last member writes straight into its result when the block's storage is the result's */
        int direct = J->direct[k];
        if (direct) mb[k].p = (char *)J->outs[m->out]->data + (size_t)o * fu_esize(m->cls);
        if (m->view) {
            fu_view_member(J->S, m, inputs[-1 - m->op[0]]->t, o, len, &mb[k]);
            continue;
        }
        if (m->in->op == HLO_BROADCAST) {
            const tpu_tensor *src = inputs[-1 - m->op[0]]->t;
            mb[k].splat = m->in->shape.rank == 0 || src->count == 1;   /* (fu_broadcast's first case) */
            if (!G->fixed[k] || direct) fu_bcast_member(J->S, m, src, o, len, m->cls, mb[k].p);
            else if (fill) fu_broadcast(m->in, src, 0, (int)J->blk, m->cls, mb[k].p);
            continue;
        }
        if (m->in->op == HLO_DYNAMIC_SLICE) {
            fu_dslice(m, inputs, o, len, mb[k].p);
            continue;
        }
        if (m->fold) continue;   /* computed inside the rotate that reads it */
        fu_buf *ops[3] = {NULL, NULL, NULL};
        if (m->rot || m->madd) {
            for (int a = 0; a < 3; a++) ops[a] = m->rop[a] >= 0 ? &mb[m->rop[a]] : &ib[-1 - m->rop[a]];
            if (m->rot) fu_rotate(&mb[k], ops, len);
            else fu_muladd(&mb[k], m->in->op == HLO_SUBTRACT, m->madd == 2, ops, len);
            continue;
        }
        for (int a = 0; a < m->in->nops && a < 3; a++) ops[a] = m->op[a] >= 0 ? &mb[m->op[a]] : &ib[-1 - m->op[a]];
        fu_member(J->S, m, &mb[k], ops, len);
    }
    /* the other outputs leave after every member has read its inputs (an input may receive an output) */
    for (int k = 0; k < nm; k++) {
        const exe_fmember *m = &G->members[k];
        if (m->out < 0 || J->direct[k]) continue;
        fu_store(J->outs[m->out], &mb[k], o, len, J->stream[m->out]);
    }
}

static void fu_chunk(void *ctx, int64_t b0, int64_t b1, int tid)
{
    fu_job *J = ctx;
    char *scratch = J->stack_scratch;
    fu_buf *mb = J->stack_mb;
    if (!scratch) {
        if (J->lazy && !J->scratch[tid]) {   /* (workers have no pool: malloc) */
            J->scratch[tid] = ut_malloc(J->off[J->G->nmembers + J->G->ninputs] + 64);
            J->mb[tid] = ut_malloc(sizeof(fu_buf) * (size_t)(J->G->nmembers + J->G->ninputs));
        }
        scratch = J->scratch[tid];
        mb = J->mb[tid];
    }
    if (!scratch || !mb) {
        atomic_store(&J->failed, 1);
        return;
    }
    for (int64_t blk = b0; blk < b1; blk++) {
        int64_t o = blk * J->blk;
        fu_block(J, scratch, mb, o, (int)(J->n - o < J->blk ? J->n - o : J->blk), !J->filled[tid]);
        J->filled[tid] = 1;
    }
    if (J->any_stream) exe_stream_fence();
}

/* A one-block group of planned layout (n elements, scratch on the stack), run by the calling thread: what
 * exe_fuse_run's general path does for it, without the job's thread and scratch set-up. */
static void fu_one_block(exe_state *S, const exe_fgroup *G, exe_value *const *inputs, tpu_tensor **outs, const int *reuse,
                         char *scratch, fu_buf *mb)
{
    fu_job J;
    memset(&J, 0, sizeof J);
    J.S = S;
    J.G = G;
    J.inputs = inputs;
    J.outs = outs;
    J.n = G->lay_n;
    J.off = G->lay_off;
    J.blk = G->lay_blk;
    J.reuse = reuse;
    /* one block is far below the streaming size: no output streams (the caller keeps nmembers <= FU_STACK_SLOTS);
     * fu_writes_direct without them, inline (a loop body runs this thousands of times) */
    static const uint8_t no_stream[64];
    uint8_t direct[FU_STACK_SLOTS];
    J.stream = no_stream;
    for (int k = 0, last = G->nmembers - 1; k <= last; k++) {
        const exe_fmember *m = &G->members[k];
        direct[k] = m->out >= 0 && fu_direct(outs[m->out]->dtype) && (k == last || reuse[m->out] < 0);
    }
    J.direct = direct;
    fu_block(&J, scratch, mb, 0, (int)G->lay_n, 1);
}

int exe_fuse_can_reuse(const exe_fgroup *G, int k, int q, const tpu_tensor *t)
{
    const hlo_shape *rs = &G->outputs[k]->shape;
    return t && !G->in_moved[q] && t->dtype == (tpu_dtype)rs->dtype && t->count == hlo_shape_count(rs) && t->count >= 2;
}


tpu_status exe_fuse_run(exe_state *S, const exe_fgroup *G, exe_value *const *inputs, const int *reuse, exe_value **outs)
{
    _Alignas(64) char stack_scratch[FU_STACK_BYTES];
    fu_buf stack_mb[FU_STACK_SLOTS];
    tpu_tensor *tv[64], **t = G->noutputs <= 64 ? tv : ut_calloc((size_t)G->noutputs, sizeof *t);
    tpu_status st = TPU_OK;
    if (!t) return ut_nomem(S->ctx);
    int no = 0;
    for (int q = 0; q < G->ninputs; q++)
        if (!inputs[q] || !inputs[q]->t) {
            st = exe_fail(S, G->last, TPU_ERR_INTERNAL, "fused input %d is not an array", q);
            goto done;
        }
    for (int k = 0; k < G->nmembers; k++)   /* a view's table and map hold for the bottom's planned size only */
        if (G->members[k].view && inputs[-1 - G->members[k].op[0]]->t->count != G->members[k].bidx_n) {
            st = exe_fail(S, G->members[k].in, TPU_ERR_INTERNAL, "fused view's operand is not of its planned size");
            goto done;
        }
    /* in place: block by block every element is read before an output is written (identity-mapped input) */
    for (; no < G->noutputs; no++) {
        const hlo_shape *rs = &G->outputs[no]->shape;
        if (reuse[no] >= 0) {
            t[no] = inputs[reuse[no]]->t;
            t[no]->rank = rs->rank;
            for (int i = 0; i < rs->rank; i++) t[no]->dims[i] = rs->dims[i];
        } else if ((st = exe_alloc(S, G->outputs[no], &t[no]))) {
            goto done;
        }
    }
    int64_t n = G->lay_off ? G->lay_n : hlo_shape_count(&G->last->shape);
    int slots = G->nmembers + G->ninputs;
    if (G->lay_off && G->lay_blk == n && n <= FU_BLOCK && slots <= FU_STACK_SLOTS && G->lay_off[slots] <= FU_STACK_BYTES &&
        !(S->ref & EXE_REF_ELEMENTWISE)) {
        fu_one_block(S, G, inputs, t, reuse, stack_scratch, stack_mb);   /* a loop body's small group */
        goto done;
    }
    int64_t L = G->lay_off ? G->lay_blk : fu_block_len(G, n);
    int64_t nblocks = (n + L - 1) / L;
    int nt = n >= 8 * FU_BLOCK ? exe_par_threads(S->threads) : 1;
    if (nt > PAR_T) nt = PAR_T;
    fu_job J;
    memset(&J, 0, sizeof J);
    J.S = S;
    J.G = G;
    J.inputs = inputs;
    J.outs = t;
    J.n = n;
    char *scr[PAR_T];
    fu_buf *mbs[PAR_T];
    memset(scr, 0, (size_t)nt * sizeof *scr);   /* chunks run with tid < nt */
    memset(mbs, 0, (size_t)nt * sizeof *mbs);
    J.scratch = scr;
    J.mb = mbs;
    /* off[j]: slot j's buffer; off[slots]: the total (fu_offsets) */
    size_t offv[FU_STACK_SLOTS + 1], *off = G->lay_off ? G->lay_off : slots <= FU_STACK_SLOTS ? offv
                                                                       : ut_malloc((size_t)(slots + 1) * sizeof *off);
    if (!off || (!G->lay_off && fu_offsets(G, L, off))) {
        if (off != offv && off != G->lay_off) ut_free(off);
        st = ut_nomem(S->ctx);
        goto done;
    }
    J.off = off;
    J.blk = L;
    J.reuse = reuse;
    /* per output: streamed; per member: writes its result in place (both fixed for the whole run) */
    uint8_t flagv[FU_STACK_SLOTS + 64], *flags = G->nmembers + G->noutputs <= FU_STACK_SLOTS + 64 ? flagv
                                                 : ut_malloc((size_t)(G->nmembers + G->noutputs));
    if (!flags) {
        if (off != offv && off != G->lay_off) ut_free(off);
        st = ut_nomem(S->ctx);
        goto done;
    }
    for (int k = 0; k < G->noutputs; k++) {
        flags[G->nmembers + k] = (uint8_t)fu_streamed(S, t[k], reuse[k] >= 0);
        J.any_stream |= flags[G->nmembers + k];
    }
    J.stream = flags + G->nmembers;
    for (int k = 0; k < G->nmembers; k++) flags[k] = (uint8_t)fu_writes_direct(&J, k);
    J.direct = flags;
    if (nblocks == 1 && slots <= FU_STACK_SLOTS && off[slots] <= FU_STACK_BYTES) {
        J.stack_scratch = stack_scratch;
        J.stack_mb = stack_mb;
    }
    /* every thread's scratch from the run's pool, taken here (workers have no pool): a fresh malloc of this
     * size per call is mapped and faulted in page by page each time. Past 16 MiB for all threads (a wide
     * group on many cores) only the threads that run a chunk make theirs, with malloc. */
    tpu_tensor *hs[PAR_T], *hm[PAR_T];
    memset(hs, 0, (size_t)nt * sizeof *hs);
    memset(hm, 0, (size_t)nt * sizeof *hm);
    J.lazy = !J.stack_scratch && (double)(off[slots] + 64) * nt > (double)(16 << 20);
    for (int i = 0; i < nt && !J.stack_scratch && !J.lazy; i++) {
        scr[i] = exe_scratch_alloc(off[slots] + 64, &hs[i]);
        mbs[i] = exe_scratch_alloc(sizeof(fu_buf) * (size_t)slots, &hm[i]);
    }
    int64_t grain = nt > 1 ? UT_MAX((int64_t)1, nblocks / (8 * nt)) : nblocks;
    exe_par_for(nt, nblocks, grain, fu_chunk, &J);
    for (int i = 0; i < nt; i++) {
        if (J.lazy) {
            ut_free(scr[i]);
            ut_free(mbs[i]);
        }
        exe_scratch_free(hs[i]);
        exe_scratch_free(hm[i]);
    }
    if (atomic_load(&J.failed)) st = ut_nomem(S->ctx);
    if (off != offv && off != G->lay_off) ut_free(off);
    if (flags != flagv) ut_free(flags);
done:
    for (int k = 0; k < G->noutputs; k++) {
        if (st || k >= no) {
            if (k < no && reuse[k] < 0) exe_tensor_release(t[k]);
            outs[k] = NULL;
            continue;
        }
        if (reuse[k] >= 0) {
            outs[k] = exe_value_ref(inputs[reuse[k]]);
        } else if (exe_out_array(S, t[k], &outs[k])) {
            st = TPU_ERR_NOMEM;
        }
    }
    if (st) {
        for (int k = 0; k < G->noutputs; k++) {
            exe_value_unref(outs[k]);
            outs[k] = NULL;
        }
    }
    if (t != tv) ut_free(t);
    return st;
}

/* ---- scalar computations on many lanes at once ----
 * A reducer or combiner (parameters and results scalars, body elementwise) run over `len` independent
 * argument sets with the fused loops' block operations: a reduce folds many outputs in step, one lane each,
 * each lane exactly the reference's fold. */

struct exe_vfn {
    exe_fgroup  G;         /* members: the body's elementwise instructions; inputs: parameters and constants */
    int         nparams, nres;
    int        *in_param;  /* per input: its parameter number, or -1 for a constant */
    void      **consts;    /* per input: a constant's value in FU_BLOCK lanes (NULL for parameters) */
    int        *res_slot;  /* per result: >= 0 member slot, < 0 input slot -1-s */
    uint8_t    *res_cls;
};

void exe_vfn_free(exe_vfn *f)
{
    if (!f) return;
    for (int q = 0; q < f->G.ninputs; q++) ut_free(f->consts ? f->consts[q] : NULL);
    ut_free(f->consts);
    ut_free(f->in_param);
    ut_free(f->res_slot);
    ut_free(f->res_cls);
    ut_free(f->G.members);
    ut_free(f->G.inputs);
    ut_free(f);
}

int exe_vfn_lane_bytes(tpu_dtype t) { return fu_class(t) < 0 ? 0 : (int)fu_esize(fu_class(t)); }

static int fu_scalar_ok(const hlo_shape *s) { return hlo_shape_is_array(s) && s->rank == 0 && fu_class((tpu_dtype)s->dtype) >= 0; }

/* A constant replicated over FU_BLOCK lanes of its class. */
static void *fu_const_lanes(const hlo_instr *in)
{
    tpu_dtype t = (tpu_dtype)in->shape.dtype;
    size_t es = fu_esize(fu_class(t));
    char *p = ut_malloc(FU_BLOCK * es);
    if (!p || !in->literal || in->literal->elided || in->literal->nbytes < tpu_dtype_size(t)) {
        ut_free(p);
        return NULL;
    }
    uint64_t v = 0;
    if (t == TPU_BF16) {
        float f = fp_bf16_to_f32_inline(((const uint16_t *)in->literal->data)[0]);
        memcpy(&v, &f, 4);
    } else {
        memcpy(&v, in->literal->data, es);
    }
    for (int i = 0; i < FU_BLOCK; i++) memcpy(p + (size_t)i * es, &v, es);
    return p;
}

static exe_vfn *fu_vfn_fail(exe_vfn *f)
{
    exe_vfn_free(f);
    return NULL;
}

exe_vfn *exe_vfn_build(const hlo_comp *c)
{
    int n = c->ninstrs;
    exe_vfn *f = ut_calloc(1, sizeof *f);
    int *slot = ut_malloc((size_t)n * sizeof(int)), *inslot = ut_malloc((size_t)n * sizeof(int));
    if (!f || !slot || !inslot) goto fail;
    f->G.members = ut_calloc((size_t)n, sizeof *f->G.members);
    f->G.inputs = ut_calloc((size_t)n * 3 + 1, sizeof *f->G.inputs);
    if (!f->G.members || !f->G.inputs) goto fail;
    for (int i = 0; i < n; i++) slot[i] = inslot[i] = -1;
    f->nparams = c->nparams;
    for (int i = 0; i < n; i++) {
        const hlo_instr *in = c->instrs[i];
        if (in->op == HLO_PARAMETER || in->op == HLO_CONSTANT) {
            if (!fu_scalar_ok(&in->shape)) goto fail;
            continue;
        }
        if (in->op == HLO_TUPLE && in == c->root) continue;
        if (!fu_scalar_ok(&in->shape)) goto fail;
        for (int k = 0; k < in->nops; k++)
            if (!fu_scalar_ok(&in->ops[k]->shape)) goto fail;
        hlo_class cl = hlo_op_class((hlo_op)in->op);
        if (!(cl == HLO_CLASS_EW1 || cl == HLO_CLASS_EW2 || cl == HLO_CLASS_EW3 || cl == HLO_CLASS_CMP) ||
            in->op == HLO_REDUCE_PRECISION || in->op == HLO_STOCHASTIC_CONVERT || in->op == HLO_COMPLEX ||
            in->op == HLO_REAL || in->op == HLO_IMAG || in->nops < 1 || in->nops > 3)
            goto fail;
        fu_add_member(&f->G, in, slot, inslot, NULL);
        f->G.last = in;
    }
    /* the inputs the members read: parameters (lanes from the caller) and constants (replicated here) */
    f->in_param = ut_malloc((size_t)(f->G.ninputs + 1) * sizeof(int));
    f->consts = ut_calloc((size_t)f->G.ninputs + 1, sizeof(void *));
    if (!f->in_param || !f->consts) goto fail;
    for (int q = 0; q < f->G.ninputs; q++) {
        const hlo_instr *x = f->G.inputs[q];
        f->in_param[q] = x->op == HLO_PARAMETER ? (int)x->param_no : -1;
        if (x->op != HLO_PARAMETER && !(f->consts[q] = fu_const_lanes(x))) goto fail;
    }
    const hlo_instr *R = c->root;
    f->nres = R->op == HLO_TUPLE ? R->nops : 1;
    f->res_slot = ut_malloc((size_t)(f->nres + 1) * sizeof(int));
    f->res_cls = ut_malloc((size_t)f->nres + 1);
    if (!f->res_slot || !f->res_cls) goto fail;
    for (int k = 0; k < f->nres; k++) {
        const hlo_instr *x = R->op == HLO_TUPLE ? R->ops[k] : R;
        f->res_cls[k] = (uint8_t)fu_class((tpu_dtype)x->shape.dtype);
        if (slot[x->id] >= 0) {
            f->res_slot[k] = slot[x->id];
        } else {   /* a parameter or constant passed straight through: an input of its own */
            if (inslot[x->id] < 0) goto fail;   /* (only read ones are inputs: keep it simple, fall back) */
            f->res_slot[k] = -1 - inslot[x->id];
        }
    }
    ut_free(slot);
    ut_free(inslot);
    return f;
fail:
    ut_free(slot);
    ut_free(inslot);
    return fu_vfn_fail(f);
}

size_t exe_vfn_scratch_bytes(const exe_vfn *f) { return (size_t)(f->G.nmembers + f->G.ninputs) * (FU_BLOCK * FU_LANE + sizeof(fu_buf)); }

void exe_vfn_eval(const exe_state *S, const exe_vfn *f, void *const *args, void *const *res, int len, void *scratch)
{
    int nm = f->G.nmembers, ni = f->G.ninputs;
    fu_buf *mb = scratch, *ib = mb + nm;
    char *lanes = (char *)(mb + nm + ni);
    for (int q = 0; q < ni; q++) {
        ib[q].cls = fu_class((tpu_dtype)f->G.inputs[q]->shape.dtype);
        ib[q].splat = 0;
        ib[q].p = f->in_param[q] >= 0 ? args[f->in_param[q]] : f->consts[q];
    }
    for (int k = 0; k < nm; k++) {
        const exe_fmember *m = &f->G.members[k];
        mb[k].cls = m->cls;
        mb[k].splat = 0;
        mb[k].p = lanes + (size_t)k * FU_BLOCK * FU_LANE;
        fu_buf *ops[3] = {NULL, NULL, NULL};
        for (int a = 0; a < m->in->nops && a < 3; a++) ops[a] = m->op[a] >= 0 ? &mb[m->op[a]] : &ib[-1 - m->op[a]];
        fu_member(S, m, &mb[k], ops, len);
    }
    for (int k = 0; k < f->nres; k++) {
        const fu_buf *b = f->res_slot[k] >= 0 ? &mb[f->res_slot[k]] : &ib[-1 - f->res_slot[k]];
        memmove(res[k], b->p, (size_t)len * fu_esize(f->res_cls[k]));
    }
}
