/* compile.c — from a verified module to a cmp_program: fusion into ops, a schedule, the values that live in
 * HBM (with tiled, padded sizes), their aliasing and live ranges, and a heap assignment per plan.
 *
 * Fusion follows the TPU compiler's habits in simple, predictable rules:
 *   - elementwise ops, converts, broadcasts, reshapes, slices, pads, transposes... (the "fusible" ops) join
 *     the op of their users when all their users are in one op that accepts producers (loop and reduction
 *     ops take any fusible producer; dot/convolution ops take operand converts, bitcasts and broadcasts);
 *   - a dot or convolution whose only user is an elementwise op becomes the head of that op (output fusion:
 *     bias add, activation, scaling run in the MXU's epilogue);
 *   - everything else (gather, scatter, sort, collectives, custom-calls...) is an op of its own, and while,
 *     conditional and call run their computations as sub-plans.
 * Values inside an op never touch HBM; each op writes its root's result. */
#include "compile.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *cmp_op_kind_name(cmp_op_kind k)
{
    static const char *names[] = {"loop", "input", "output", "single", "control", "noop"};
    return (unsigned)k < sizeof names / sizeof names[0] ? names[k] : "?";
}

/* ---- sizes ---- */

/* a * b and a + b for sizes, saturating at INT64_MAX (shapes are user input; cmp_check_sizes bounds the
 * totals the planner adds up) */
static int64_t cmp_mul_sat(int64_t a, int64_t b)
{
    int64_t r;
    return a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

static int64_t cmp_add_sat(int64_t a, int64_t b)
{
    int64_t r;
    return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}

/* n rounded up to a multiple of m (m > 0), saturating */
static int64_t cmp_round_up_sat(int64_t n, int64_t m)
{
    if (n <= 0 || m <= 1) return n < 0 ? 0 : n;
    return cmp_mul_sat(n / m + (n % m != 0), m);
}

int64_t cmp_unpadded_bytes(const hlo_shape *s)
{
    if (!hlo_shape_is_array(s)) return 0;
    int bits = tpu_dtype_bits((tpu_dtype)s->dtype);
    int64_t b = cmp_mul_sat(hlo_shape_count(s), bits);
    return b == INT64_MAX ? b : (b + 7) / 8;
}

/* Bytes of an array with its layout. Tiles written in the layout (a program the TPU compiler produced)
 * are used as written; otherwise the chip's tiling rules apply to the layout's two most minor dimensions. */
int64_t cmp_padded_bytes(const chp_chip *chip, const hlo_shape *s)
{
    if (!hlo_shape_is_array(s)) return 0;
    int m2m[TPU_MAX_RANK];
    hlo_shape_m2m(s, m2m);
    const hlo_layout *l = s->layout;
    if (l && l->ntiles >= 1 && l->tiles[0].n >= 1 && l->tiles[0].n <= 2 && l->tiles[0].d[0] > 0 &&
        (l->tiles[0].n == 1 || l->tiles[0].d[1] > 0)) {
        const hlo_tile *t = &l->tiles[0];
        int bits = tpu_dtype_bits((tpu_dtype)s->dtype);
        int64_t elems = 1;
        if (s->rank == 0) {
            elems = t->d[t->n - 1];
        } else if (t->n == 1 || s->rank == 1) {
            /* a 1-D tile over the minor dimension */
            int64_t tm = t->d[t->n - 1];
            for (int i = 0; i < s->rank; i++)
                elems = cmp_mul_sat(elems, i == m2m[0] ? cmp_round_up_sat(s->dims[i], tm) : s->dims[i]);
        } else {
            for (int i = 0; i < s->rank; i++) {
                int64_t d = s->dims[i];
                if (i == m2m[0]) d = cmp_round_up_sat(d, t->d[1]);
                else if (i == m2m[1]) d = cmp_round_up_sat(d, t->d[0]);
                elems = cmp_mul_sat(elems, d);
            }
        }
        int64_t bytes = cmp_mul_sat(elems, bits);
        bytes = bytes == INT64_MAX ? bytes : (bytes + 7) / 8;
        int64_t minb = chip && chip->generation >= 5 ? 512 : 1024;
        return bytes < minb ? minb : bytes;
    }
    return chp_padded_bytes(chip, (tpu_dtype)s->dtype, s->rank, s->dims, m2m);
}

/* The most bytes the planner may add up (2 EiB). Every array leaf of every instruction counts with the most
 * padding any layout could give it; past the limit the program is refused here, so the sums of buffer
 * assignment (peaks, offsets, copies the compiler adds) cannot overflow. */
#define CMP_MAX_TOTAL_BYTES ((int64_t)1 << 61)

static int64_t cmp_leaf_bound(const chp_chip *chip, const hlo_shape *s)
{
    if (hlo_shape_is_tuple(s)) {
        int64_t b = 0;
        for (int i = 0; i < s->ntuple; i++) b = cmp_add_sat(b, cmp_leaf_bound(chip, &s->tuple[i]));
        return b;
    }
    if (!hlo_shape_is_array(s)) return 0;
    int64_t worst = cmp_mul_sat(cmp_unpadded_bytes(s), 4096), written = cmp_padded_bytes(chip, s);
    return cmp_add_sat(worst > written ? worst : written, 4096);
}

static tpu_status cmp_check_sizes(tpu_ctx *ctx, const hlo_module *m, const chp_chip *chip)
{
    int64_t total = 0;
    for (int ci = 0; ci < m->ncomps; ci++)
        for (int i = 0; i < m->comps[ci]->ninstrs; i++) {
            const hlo_instr *in = m->comps[ci]->instrs[i];
            total = cmp_add_sat(total, cmp_leaf_bound(chip, &in->shape));
            if (total > CMP_MAX_TOTAL_BYTES) {
                char w[300];
                return ut_err(ctx, TPU_ERR_UNSUPPORTED, "%s: the program's arrays add up to more than 2^61 bytes by '%s': "
                              "beyond what tpusim plans", hlo_where(m, in, w, sizeof w), in->name);
            }
        }
    return TPU_OK;
}

/* The layout the TPU compiler gives an unconstrained array: size-1 dimensions major-most and, among the
 * others, the pair of minor dimensions that pads least (ties keep the default order). Measured with the real
 * compiler for arguments, outputs and temporaries (tests/reference/libtpu_memory.md). */
static const hlo_layout *cmp_min_padding_layout(ut_arena *a, const chp_chip *chip, const hlo_shape *s)
{
    int r = s->rank;
    if (r < 2) return NULL;
    hlo_shape t = *s;
    hlo_layout l = {0};
    l.rank = r;
    /* the default, degenerate dims moved major-most */
    int order[TPU_MAX_RANK], n = 0;   /* minor to major */
    for (int d = r - 1; d >= 0; d--)
        if (s->dims[d] != 1) order[n++] = d;
    for (int d = r - 1; d >= 0; d--)
        if (s->dims[d] == 1) order[n++] = d;
    for (int i = 0; i < r; i++) l.m2m[i] = (int8_t)order[i];
    t.layout = &l;
    int64_t best = cmp_padded_bytes(chip, &t);
    int bmin = order[0], bsec = order[1];
    for (int mi = 0; mi < r; mi++) {
        if (s->dims[mi] == 1) continue;
        for (int se = 0; se < r; se++) {
            /* a size-1 second-minor dimension is a candidate too: v5e and later tile it T(1,128) (libtpu:
             * f32[1,1000,1,3] as {1,2,3,0:T(1,128)}, 12 KiB, not 16 KiB with 3 rows padded to 4) */
            if (se == mi) continue;
            hlo_layout c = {0};
            c.rank = r;
            int k = 0;
            c.m2m[k++] = (int8_t)mi;
            c.m2m[k++] = (int8_t)se;
            for (int i = 0; i < r; i++)
                if (order[i] != mi && order[i] != se) c.m2m[k++] = (int8_t)order[i];
            t.layout = &c;
            int64_t b = cmp_padded_bytes(chip, &t);
            if (b < best) {
                best = b;
                bmin = mi;
                bsec = se;
            }
        }
    }
    int def = bmin == r - 1 && bsec == r - 2;
    for (int i = 2; def && i < r; i++) def = order[i] == r - 1 - i;
    if (def) return NULL;   /* the default layout is already the best */
    hlo_layout *out = ut_arena_alloc(a, sizeof *out);
    if (!out) return NULL;
    out->rank = r;
    int k = 0;
    out->m2m[k++] = (int8_t)bmin;
    out->m2m[k++] = (int8_t)bsec;
    for (int i = 0; i < r; i++)
        if (order[i] != bmin && order[i] != bsec) out->m2m[k++] = (int8_t)order[i];
    return out;
}

/* ---- instruction classes for fusion ---- */

static int cmp_is_noop(const hlo_instr *in)
{
    switch ((hlo_op)in->op) {
    case HLO_PARAMETER: case HLO_TUPLE: case HLO_GET_TUPLE_ELEMENT: case HLO_BITCAST: case HLO_AFTER_ALL:
    case HLO_ADD_DEPENDENCY: case HLO_OPT_BARRIER: case HLO_DOMAIN: case HLO_REPLICA_ID: case HLO_PARTITION_ID:
        return 1;
    case HLO_CONSTANT: return in->shape.rank > 0 || !hlo_shape_is_array(&in->shape);   /* scalars fuse */
    case HLO_CUSTOM_CALL: {
        const char *t = hlo_attr_str(in, HK_CUSTOM_CALL_TARGET);
        return t && (!strcmp(t, "Sharding") || !strcmp(t, "SPMDFullToShardShape") || !strcmp(t, "SPMDShardToFullShape") ||
                     !strcmp(t, "LayoutConstraint") || !strcmp(t, "xla.sdy.FuncResultSharding"));
    }
    default: return 0;
    }
}

static int cmp_is_fusible(const hlo_instr *in)
{
    hlo_class c = hlo_op_class((hlo_op)in->op);
    if (!hlo_shape_is_array(&in->shape)) return 0;
    if (c == HLO_CLASS_EW1 || c == HLO_CLASS_EW2 || c == HLO_CLASS_EW3 || c == HLO_CLASS_CMP) return 1;
    switch ((hlo_op)in->op) {
    case HLO_BROADCAST: case HLO_RESHAPE: case HLO_TRANSPOSE: case HLO_SLICE: case HLO_DYNAMIC_SLICE: case HLO_PAD:
    case HLO_REVERSE: case HLO_CONCATENATE: case HLO_IOTA: case HLO_COPY:
        return 1;
    case HLO_CONSTANT: return in->shape.rank == 0;
    default: return 0;
    }
}

/* Producers the TPU compiler recomputes inside each consumer rather than write to HBM once: broadcasts, iotas,
 * reshapes, converts, slices and every elementwise op, the transcendental and divide ones included (libtpu's
 * optimized programs recompute exp(x - max) in both the softmax sum and the division fused into the next
 * matmul: tests/reference/hlo/long_attention_bf16.opt.hlo). */
static int cmp_is_cheap(const hlo_instr *in)
{
    switch ((hlo_op)in->op) {
    case HLO_BROADCAST: case HLO_IOTA: case HLO_RESHAPE: case HLO_CONVERT: case HLO_CONSTANT: case HLO_SLICE:
    case HLO_DYNAMIC_SLICE: case HLO_COPY:
        return 1;
    default: {
        hlo_class c = hlo_op_class((hlo_op)in->op);
        return c == HLO_CLASS_EW1 || c == HLO_CLASS_EW2 || c == HLO_CLASS_EW3 || c == HLO_CLASS_CMP;
    }
    }
}

/* Producers a dot/convolution op takes in: layout and type changes of its operands, and (on TPUs, whose
 * MXU ops fuse their operands' elementwise producers) any elementwise computation. */
static int cmp_fuses_into_mxu(const hlo_instr *in)
{
    switch ((hlo_op)in->op) {
    case HLO_CONVERT: case HLO_BROADCAST: case HLO_RESHAPE: case HLO_TRANSPOSE: case HLO_COPY: case HLO_CONSTANT:
        return 1;
    default: {
        hlo_class c = hlo_op_class((hlo_op)in->op);
        return c == HLO_CLASS_EW1 || c == HLO_CLASS_EW2 || c == HLO_CLASS_EW3 || c == HLO_CLASS_CMP;
    }
    }
}

static int cmp_is_control(const hlo_instr *in)
{
    return in->op == HLO_WHILE || in->op == HLO_CONDITIONAL || in->op == HLO_CALL;
}

static cmp_op_kind cmp_kind_of_fusion(const hlo_instr *in)
{
    const char *k = hlo_attr_str(in, HK_KIND);
    if (k && !strcmp(k, "kLoop")) return CMP_LOOP;
    if (k && !strcmp(k, "kInput")) return CMP_INPUT;
    if (k && !strcmp(k, "kOutput")) return CMP_OUTPUT;
    return CMP_SINGLE;
}

hlo_shape cmp_instr_shape(const cmp_program *p, const hlo_instr *in)
{
    hlo_shape s = in->shape;
    const hlo_comp *c = in->parent;
    if (!p->lay || !c || c->id < 0 || c->id >= p->m->ncomps || p->m->comps[c->id] != c) return s;
    const hlo_layout *l = p->lay[p->comp_base[c->id] + in->id];
    if (l && hlo_shape_is_array(&s) && l->rank == s.rank) s.layout = l;
    return s;
}

/* ---- the compile state ---- */

typedef struct cmp_state {
    tpu_ctx          *ctx;
    cmp_program      *p;
    const chp_chip   *chip;
    int              *comp_base;     /* global instruction number of each computation's first instruction */
    int               ninstr_total;
    int              *leaf_count;    /* per global instruction */
    int              *leaf_first;    /* per global instruction: index into leaf_val */
    int              *leaf_val;      /* value index of each leaf of each instruction, -1 if none */
    int               nleaf_total;
    int               nvalues, capvalues;
    int              *users_n;       /* users per global instruction */
    int             **users;
    uint8_t          *plan_done;     /* per computation: 0 no, 1 in progress, 2 done */
    const hlo_layout **lay;          /* assigned layout of each array-shaped instruction (NULL: as written) */
    int               auto_layout;   /* unoptimized program: unconstrained tuple leaves get min-padding layouts */
    int               compiled;      /* the TPU compiler's output (tiled layouts): no fusion of our own */
    uint8_t          *is_body;       /* per computation: some while loop's body */
} cmp_state;

static int cmp_gid(const cmp_state *C, const hlo_instr *in) { return C->comp_base[in->parent->id] + in->id; }

static int cmp_count_leaves(const hlo_shape *s)
{
    if (!hlo_shape_is_tuple(s)) return 1;
    int n = 0;
    for (int i = 0; i < s->ntuple; i++) n += cmp_count_leaves(&s->tuple[i]);
    return n;
}

/* The array shape of leaf k (depth first), or NULL if that leaf is a token. */
static const hlo_shape *cmp_leaf_shape(const hlo_shape *s, int *k)
{
    if (!hlo_shape_is_tuple(s)) {
        if ((*k)-- == 0) return s;
        return NULL;
    }
    for (int i = 0; i < s->ntuple; i++) {
        int before = *k;
        const hlo_shape *r = cmp_leaf_shape(&s->tuple[i], k);
        if (r || *k < 0) return r;
        (void)before;
    }
    return NULL;
}

/* First leaf index of tuple element `idx` of shape s. */
static int cmp_leaf_offset(const hlo_shape *s, int64_t idx)
{
    int off = 0;
    for (int64_t i = 0; i < idx && i < s->ntuple; i++) off += cmp_count_leaves(&s->tuple[i]);
    return off;
}

static int cmp_new_value(cmp_state *C, const hlo_instr *def, int leaf, const hlo_shape *s, cmp_value_kind kind)
{
    if (C->nvalues == C->capvalues) {
        int cap = C->capvalues ? C->capvalues * 2 : 1024;
        cmp_value *nv = ut_realloc(C->p->values, (size_t)cap * sizeof *nv);
        if (!nv) return -1;
        C->p->values = nv;
        C->capvalues = cap;
    }
    cmp_value *v = &C->p->values[C->nvalues];
    memset(v, 0, sizeof *v);
    v->def = def;
    v->leaf = leaf;
    v->shape = *s;
    v->unpadded = cmp_unpadded_bytes(s);
    v->padded = cmp_padded_bytes(C->chip, s);
    /* a compiled program's S(1) (VMEM) and S(2) (SMEM) buffers live on the core, not in HBM; S(3) is
     * v4's second HBM space and counts (libtpu's memory-usage reports) */
    if (s->layout && (s->layout->mem_space == 1 || s->layout->mem_space == 2)) v->padded = v->unpadded = 0;
    v->kind = kind;
    v->alias = -1;
    v->start = v->end = -1;
    v->comp = def->parent->id;
    v->offset = -1;
    return C->nvalues++;
}

/* Follows aliases to the value that owns the buffer. */
static int cmp_owner(const cmp_program *p, int v)
{
    while (v >= 0 && p->values[v].alias >= 0) v = p->values[v].alias;
    return v;
}

static int *cmp_leaves(cmp_state *C, const hlo_instr *in) { return &C->leaf_val[C->leaf_first[cmp_gid(C, in)]]; }

static int cmp_layout_is_default(const hlo_shape *s);
static int cmp_layout_free(const hlo_instr *in, const hlo_shape *s);

/* A value taken from the computation's parameter (possibly through get-tuple-element and bitcast). */
static int cmp_from_param(const hlo_instr *in)
{
    while (in->op == HLO_GET_TUPLE_ELEMENT || in->op == HLO_BITCAST) in = in->ops[0];
    return in->op == HLO_PARAMETER;
}

/* Defines a fresh value for array leaf k of `in` (0 only when out of memory). */
static int cmp_define_leaf(cmp_state *C, const hlo_instr *in, int k, cmp_value_kind kind)
{
    int kk = k;
    const hlo_shape *s = cmp_leaf_shape(&in->shape, &kk);
    if (!s || !hlo_shape_is_array(s)) return 1;
    hlo_shape tmp = *s;
    const hlo_layout *al = C->lay ? C->lay[cmp_gid(C, in)] : NULL;
    if (al && k == 0 && al->rank == tmp.rank) tmp.layout = al;
    else if (C->auto_layout && hlo_shape_is_tuple(&in->shape) && cmp_layout_free(in, &tmp)) {
        const hlo_layout *ml = cmp_min_padding_layout(&C->p->arena, C->chip, &tmp);
        if (ml) tmp.layout = ml;
    }
    int v = cmp_new_value(C, in, k, &tmp, kind);
    if (v < 0) return 0;
    cmp_leaves(C, in)[k] = v;
    return 1;
}

/* Defines a fresh value for every array leaf of `in`. */
static int cmp_define_all(cmp_state *C, const hlo_instr *in, cmp_value_kind kind)
{
    int n = C->leaf_count[cmp_gid(C, in)];
    for (int k = 0; k < n; k++)
        if (!cmp_define_leaf(C, in, k, kind)) return 0;
    return 1;
}

/* Makes every leaf of `in` an alias of the corresponding leaf of `src` (starting at src leaf `off`). */
static void cmp_alias_leaves(cmp_state *C, const hlo_instr *in, const hlo_instr *src, int off)
{
    int n = C->leaf_count[cmp_gid(C, in)];
    int *lv = cmp_leaves(C, in), *sv = cmp_leaves(C, src);
    for (int k = 0; k < n; k++) lv[k] = sv[off + k];
}

/* Asynchronous pairs share buffers (XLA's async semantics): a start's leading tuple element aliases its
 * operands (copy-start: element 1), and the done is the start's output buffer. Returns 1 when `r` was one
 * of them, 0 when not, -1 when out of memory. */
static int cmp_async_values(cmp_state *C, const hlo_instr *r)
{
    int n = C->leaf_count[cmp_gid(C, r)];
    int *lv = cmp_leaves(C, r);
    const hlo_instr *o = r->nops ? r->ops[0] : NULL;
    switch ((hlo_op)r->op) {
    case HLO_COPY_START: {   /* (destination, source, context) */
        if (!o || !hlo_shape_is_tuple(&r->shape) || r->shape.ntuple < 2) return 0;
        int src = cmp_leaf_offset(&r->shape, 1), ns = cmp_count_leaves(&r->shape.tuple[1]);
        for (int k = 0; k < n; k++) {
            if (k >= src && k < src + ns) lv[k] = cmp_leaves(C, o)[k - src];
            else if (!cmp_define_leaf(C, r, k, CMP_V_TEMP)) return -1;
        }
        return 1;
    }
    case HLO_ASYNC_START: case HLO_ALL_GATHER_START: case HLO_COLLECTIVE_PERMUTE_START: {
        /* ((operands...) or operand, outputs, context...) */
        if (!hlo_shape_is_tuple(&r->shape) || r->shape.ntuple < 2) return 0;
        int nin = cmp_count_leaves(&r->shape.tuple[0]), off = 0;
        for (int q = 0; q < r->nops && off < nin; q++) {
            int nl = C->leaf_count[cmp_gid(C, r->ops[q])];
            for (int l = 0; l < nl && off + l < nin; l++) lv[off + l] = cmp_leaves(C, r->ops[q])[l];
            off += nl;
        }
        if (off != nin) return 0;   /* not the layout this rule knows: fresh buffers */
        for (int k = nin; k < n; k++)
            if (!cmp_define_leaf(C, r, k, CMP_V_TEMP)) return -1;
        return 1;
    }
    case HLO_COPY_DONE: case HLO_ASYNC_DONE: case HLO_ALL_GATHER_DONE: case HLO_COLLECTIVE_PERMUTE_DONE:
    case HLO_ALL_REDUCE_DONE: case HLO_ASYNC_UPDATE: {
        if (!o) return 0;
        int off = 0;
        if (r->op != HLO_ASYNC_UPDATE && r->op != HLO_ALL_REDUCE_DONE && hlo_shape_is_tuple(&o->shape) &&
            !(hlo_shape_is_tuple(&r->shape) && r->shape.ntuple == o->shape.ntuple))
            off = cmp_leaf_offset(&o->shape, r->op == HLO_COPY_DONE ? 0 : 1);
        if (off + n > C->leaf_count[cmp_gid(C, o)]) return 0;
        cmp_alias_leaves(C, r, o, off);
        return 1;
    }
    default: return 0;
    }
}

int cmp_mxu_passes(const hlo_instr *in)
{
    int f32 = 0;
    for (int i = 0; i < in->nops && i < 2; i++)
        if (in->ops[i]->shape.dtype == TPU_F32) f32 = 1;
    if (!f32) return 1;
    const char *alg = hlo_attr_str(in, HK_ALGORITHM);
    if (alg) {
        if (strstr(alg, "_x3")) return 3;
        if (strstr(alg, "_x6")) return 6;
        if (strstr(alg, "_x9")) return 9;
        if (strstr(alg, "f32_f32_f32")) return 6;
        return 1;
    }
    const hlo_attr *a = hlo_attr_find(in, HK_OPERAND_PRECISION);
    int p = 1;
    for (int i = 0; a && a->kind == HA_IDENTS && i < a->v.idents.n; i++) {
        const char *v = a->v.idents.v[i];
        if (!strcmp(v, "highest") || !strcmp(v, "HIGHEST")) p = 6 > p ? 6 : p;
        else if (!strcmp(v, "high") || !strcmp(v, "HIGH")) p = 3 > p ? 3 : p;
    }
    return p;
}

/* The layouts a convolution wants, as (minor, second-minor) pairs: for its result, its input (activations:
 * the larger of batch and feature minor, the other second-minor, ties to feature) and its kernel (output
 * then input features; measured with libtpu). 0 when it has no dim_labels. */
static int cmp_conv_layouts(const hlo_instr *in, int out[2], int x[2], int k[2])
{
    const hlo_attr *dl = hlo_attr_find(in, HK_DIM_LABELS);
    if (!dl || dl->kind != HA_DIMLABELS || in->nops != 2) return 0;
    const hlo_dimlabels *d = dl->v.dimlabels;
    int of = d->out_feature, ob = d->out_batch, xf = d->in_feature, xb = d->in_batch;
    if (in->shape.dims[ob] > in->shape.dims[of]) { int t = of; of = ob; ob = t; }
    if (in->ops[0]->shape.dims[xb] > in->ops[0]->shape.dims[xf]) { int t = xf; xf = xb; xb = t; }
    out[0] = of; out[1] = ob;
    x[0] = xf; x[1] = xb;
    k[0] = d->k_out; k[1] = d->k_in;
    return 1;
}

/* ---- layout assignment ----
 * A program dumped after TPU compilation carries tiled layouts ({...:T(8,128)}): they are the truth and are
 * kept. Before compilation, every array is printed with the default layout and the TPU compiler chooses: it
 * keeps the default for most ops but gives convolutions the layouts the MXU wants — feature dimension
 * minor, batch second-minor for activations; output then input features minor for kernels — and
 * elementwise chains and batch-norm ops take their neighbours' layouts so no transposes are needed. Written
 * layouts that are not the default are honoured where XLA keeps them (cmp_layout_free). */

static int cmp_has_tiled_layouts(const hlo_module *m)
{
    for (int c = 0; c < m->ncomps; c++)
        for (int i = 0; i < m->comps[c]->ninstrs; i++) {
            const hlo_layout *l = m->comps[c]->instrs[i]->shape.layout;
            if (l && l->ntiles) return 1;
        }
    return 0;
}

static int cmp_layout_is_default(const hlo_shape *s)
{
    if (!s->layout) return 1;
    for (int i = 0; i < s->layout->rank; i++)
        if (s->layout->m2m[i] != s->rank - 1 - i) return 0;
    return 1;
}

/* Whether the compiler may choose the layout of `in` (shape `s`, one of its leaves). As in XLA's layout
 * assignment, only the entry computation's parameters and result, and ops that carry a mandatory layout
 * (custom-calls, infeed), keep a written layout: every other written layout (e.g. from a GPU dump) is
 * cleared and chosen again. */
static int cmp_layout_free(const hlo_instr *in, const hlo_shape *s)
{
    if (cmp_layout_is_default(s)) return 1;
    if (in->op == HLO_CUSTOM_CALL || in->op == HLO_INFEED) return 0;
    const hlo_comp *c = in->parent;
    if (!c || !c->is_entry) return 1;
    if (in->op == HLO_PARAMETER || in == c->root) return 0;
    if (c->root && c->root->op == HLO_TUPLE)
        for (int k = 0; k < c->root->nops; k++)
            if (c->root->ops[k] == in) return 0;
    return 1;
}

/* minor_to_major with `minor` first, `second` next, the remaining dims in default order. */
static hlo_layout *cmp_make_layout(ut_arena *a, int rank, int minor, int second)
{
    hlo_layout *l = ut_arena_alloc(a, sizeof *l);
    if (!l) return NULL;
    l->rank = rank;
    int n = 0;
    l->m2m[n++] = (int8_t)minor;
    if (second >= 0 && second != minor) l->m2m[n++] = (int8_t)second;
    for (int d = rank - 1; d >= 0; d--)
        if (d != minor && d != second) l->m2m[n++] = (int8_t)d;
    return l;
}

static int cmp_is_layout_transparent(const hlo_instr *in)
{
    hlo_class c = hlo_op_class((hlo_op)in->op);
    return c == HLO_CLASS_EW1 || c == HLO_CLASS_EW2 || c == HLO_CLASS_EW3 || c == HLO_CLASS_CMP || in->op == HLO_COPY;
}

static tpu_status cmp_assign_layouts(cmp_state *C)
{
    const hlo_module *m = C->p->m;
    C->lay = ut_calloc((size_t)C->ninstr_total + 1, sizeof *C->lay);
    if (!C->lay) return ut_nomem(C->ctx);
    if (cmp_has_tiled_layouts(m)) {
        C->compiled = 1;
        return TPU_OK;
    }
    ut_arena *a = &C->p->arena;
    uint8_t *fixed = ut_calloc((size_t)C->ninstr_total + 1, 1);
    if (!fixed) return ut_nomem(C->ctx);
    /* seeds: convolutions */
    for (int ci = 0; ci < m->ncomps; ci++) {
        const hlo_comp *c = m->comps[ci];
        for (int i = 0; i < c->ninstrs; i++) {
            const hlo_instr *in = c->instrs[i];
            int lo[2], lx[2], lk[2];
            if (in->op != HLO_CONVOLUTION || !cmp_conv_layouts(in, lo, lx, lk)) continue;
            struct { const hlo_instr *t; int minor, second; } seeds[3] = {
                {in, lo[0], lo[1]}, {in->ops[0], lx[0], lx[1]}, {in->ops[1], lk[0], lk[1]}};
            for (int sI = 0; sI < 3; sI++) {
                const hlo_instr *t = seeds[sI].t;
                int g = cmp_gid(C, t);
                if (!hlo_shape_is_array(&t->shape) || !cmp_layout_free(t, &t->shape) || fixed[g]) continue;
                /* an entry parameter keeps the layout that pads least; the compiler copies it into the
                 * convolution's layout (measured: f32[8,64,64,3] arrives {2,1,3,0}, a bf16 copy {0,3,2,1}) */
                if (t->op == HLO_PARAMETER && t->parent == m->entry) continue;
                hlo_layout *l = cmp_make_layout(a, t->shape.rank, seeds[sI].minor, seeds[sI].second);
                if (!l) {
                    ut_free(fixed);
                    return ut_nomem(C->ctx);
                }
                C->lay[g] = l;
                fixed[g] = 1;
            }
        }
    }
    /* propagate through elementwise ops and batch-norm, both directions, until nothing changes */
    for (int pass = 0, changed = 1; changed && pass < 16; pass++) {
        changed = 0;
        for (int ci = 0; ci < m->ncomps; ci++) {
            const hlo_comp *c = m->comps[ci];
            for (int i = 0; i < c->ninstrs; i++) {
                const hlo_instr *in = c->instrs[i];
                int g = cmp_gid(C, in);
                int bn = in->op == HLO_BATCH_NORM_TRAINING || in->op == HLO_BATCH_NORM_INFERENCE || in->op == HLO_BATCH_NORM_GRAD;
                if (!cmp_is_layout_transparent(in) && !bn) continue;
                int rank = bn ? in->ops[0]->shape.rank : in->shape.rank;
                /* forward: take an operand's assigned layout */
                if (!fixed[g] && (bn || cmp_layout_free(in, &in->shape))) {
                    for (int k = 0; k < in->nops; k++) {
                        int og = cmp_gid(C, in->ops[k]);
                        if (fixed[og] && C->lay[og] && C->lay[og]->rank == rank && in->ops[k]->shape.rank == rank) {
                            C->lay[g] = C->lay[og];
                            fixed[g] = 1;
                            changed = 1;
                            break;
                        }
                    }
                }
                /* backward: give this op's layout to unassigned same-rank operands that are elementwise */
                if (fixed[g] && C->lay[g]) {
                    for (int k = 0; k < in->nops; k++) {
                        const hlo_instr *o = in->ops[k];
                        int og = cmp_gid(C, o);
                        if (fixed[og] || o->shape.rank != C->lay[g]->rank || !cmp_layout_free(o, &o->shape)) continue;
                        /* entry parameters keep the layout that pads least (libtpu: depthwise_train's input
                         * f32[32,56,56,32] arrives W-minor, 28 MiB, though the residual add beside the
                         * convolutions reads it feature-minor) */
                        if (o->op == HLO_PARAMETER && o->parent == m->entry) continue;
                        if (!cmp_is_layout_transparent(o) && o->op != HLO_BROADCAST && o->op != HLO_PARAMETER) continue;
                        C->lay[og] = C->lay[g];
                        fixed[og] = 1;
                        changed = 1;
                    }
                }
            }
        }
    }
    /* everything else: the layout that pads least */
    for (int ci = 0; ci < m->ncomps; ci++) {
        const hlo_comp *c = m->comps[ci];
        for (int i = 0; i < c->ninstrs; i++) {
            const hlo_instr *in = c->instrs[i];
            int g = cmp_gid(C, in);
            if (fixed[g] || !hlo_shape_is_array(&in->shape) || !cmp_layout_free(in, &in->shape)) continue;
            C->lay[g] = cmp_min_padding_layout(a, C->chip, &in->shape);
        }
    }
    C->auto_layout = 1;
    ut_free(fixed);
    return TPU_OK;
}

/* Same dimensions and the same minor-to-major order. */
static int cmp_same_layout(const hlo_shape *a, const hlo_shape *b)
{
    if (a->rank != b->rank) return 0;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i]) return 0;
    if (!a->layout || !b->layout) return cmp_layout_is_default(a) && cmp_layout_is_default(b);
    for (int i = 0; i < a->rank; i++)
        if (a->layout->m2m[i] != b->layout->m2m[i]) return 0;
    return 1;
}

/* Whether op reads def's value only through elementwise instructions of its shape (so writing the result
 * over it element by element is safe). */
static int cmp_read_elementwise(const cmp_op *op, const hlo_instr *def, const uint8_t *dup)
{
    (void)dup;
    const hlo_instr *r = op->root;
    if (op->ninstrs == 1 && r->op == HLO_FUSION && r->ncalled == 1) {
        const hlo_comp *fc = r->called[0];
        int any = 0;
        for (int j = 0; j < r->nops; j++) {
            if (r->ops[j] != def) continue;
            for (int i = 0; i < fc->ninstrs; i++) {
                const hlo_instr *u = fc->instrs[i];
                for (int a = 0; a < u->nops; a++) {
                    if (u->ops[a]->op != HLO_PARAMETER || u->ops[a]->param_no != j) continue;
                    hlo_class uc = hlo_op_class((hlo_op)u->op);
                    if (!(uc == HLO_CLASS_EW1 || uc == HLO_CLASS_EW2 || uc == HLO_CLASS_EW3 || uc == HLO_CLASS_CMP) ||
                        u->shape.rank != def->shape.rank)
                        return 0;
                    any = 1;
                }
            }
        }
        return any;
    }
    int any = 0;
    for (int m = 0; m < op->ninstrs; m++) {
        const hlo_instr *u = op->instrs[m];
        for (int a = 0; a < u->nops; a++) {
            if (u->ops[a] != def) continue;
            hlo_class uc = hlo_op_class((hlo_op)u->op);
            if (!(uc == HLO_CLASS_EW1 || uc == HLO_CLASS_EW2 || uc == HLO_CLASS_EW3 || uc == HLO_CLASS_CMP) ||
                u->shape.rank != def->shape.rank)
                return 0;
            any = 1;
        }
    }
    return any;
}

/* The output value for entry result value v: v itself, or a copy of it (an OUTPUT value) when v's layout
 * is not the one that pads least; -1 when out of memory. */
static int cmp_output_copy(cmp_state *C, int v)
{
    cmp_program *p = C->p;
    hlo_shape s = p->values[v].shape;
    if (!hlo_shape_is_array(&s) || s.rank < 2 || !s.layout || s.layout->ntiles) return v;
    hlo_layout dl = {0};   /* NULL from cmp_min_padding_layout: the default layout pads least */
    dl.rank = s.rank;
    for (int i = 0; i < s.rank; i++) dl.m2m[i] = (int8_t)(s.rank - 1 - i);
    const hlo_layout *ml = cmp_min_padding_layout(&p->arena, C->chip, &s);
    if (!ml) ml = &dl;
    if (ml->m2m[0] == s.layout->m2m[0] && ml->m2m[1] == s.layout->m2m[1]) return v;
    s.layout = ml;
    if (ml == &dl) {
        hlo_layout *keep = ut_arena_alloc(&p->arena, sizeof *keep);
        if (!keep) return -1;
        *keep = dl;
        s.layout = keep;
    }
    if (cmp_padded_bytes(C->chip, &s) >= p->values[v].padded) return v;   /* no smaller: written in place */
    const hlo_instr *def = p->values[v].def;
    int o = cmp_new_value(C, def, p->values[v].leaf, &s, CMP_V_OUTPUT);
    if (o < 0) return -1;
    p->values[o].copy_of = def;
    return o;
}

static int cmp_on_mxu(const hlo_instr *u);

/* Operand copies of convolutions (see 5b in cmp_plan_comp). dup: the computation's duplicated producers. */
static tpu_status cmp_conv_operand_copies(cmp_state *C, cmp_plan *plan, const uint8_t *dup)
{
    cmp_program *p = C->p;
    const hlo_comp *c = plan->comp;
    int *copy_of = ut_malloc((size_t)(c->ninstrs ? c->ninstrs : 1) * sizeof(int));
    if (!copy_of) return ut_nomem(C->ctx);
    for (int i = 0; i < c->ninstrs; i++) copy_of[i] = -1;
    for (int k = 0; k < plan->nops; k++) {
        cmp_op *op = &plan->ops[k];
        if (op->kind == CMP_NOOP || op->kind == CMP_CONTROL) continue;
        for (int m = 0; m < op->ninstrs; m++) {
            const hlo_instr *cv = op->instrs[m];
            int lo[2], lr[2][2];
            if (cv->op != HLO_CONVOLUTION || !cmp_conv_layouts(cv, lo, lr[0], lr[1])) continue;
            for (int side = 0; side < 2; side++) {
                const hlo_instr *opnd = cv->ops[side], *x = opnd;
                /* through element-type changes fused into this op (or duplicated into it) */
                while ((x->op == HLO_CONVERT || x->op == HLO_COPY) && x->nops == 1) {
                    int member = dup[x->id];
                    for (int q = 0; q < op->ninstrs && !member; q++) member = op->instrs[q] == x;
                    if (!member) break;
                    x = x->ops[0];
                }
                if (x->op != HLO_PARAMETER || x->shape.rank != opnd->shape.rank || x->shape.rank < 2) continue;
                hlo_shape cur = cmp_instr_shape(p, x);
                int minor = lr[side][0], second = lr[side][1];
                if (cur.layout && cur.layout->m2m[0] == minor && cur.layout->m2m[1] == second) continue;
                if (!cur.layout && minor == x->shape.rank - 1 && second == x->shape.rank - 2) continue;
                {
                    /* the compiler chooses entry layouts: when the convolution's pads no more than the compact
                     * one, the parameter can arrive in it (conv_bn_relu_infer: 64 features, no copy;
                     * conv_small_features: 3 features, a bf16 copy) */
                    hlo_shape conv_l = x->shape;
                    conv_l.layout = cmp_make_layout(&p->arena, conv_l.rank, minor, second);
                    hlo_shape compact = x->shape;
                    compact.layout = cmp_min_padding_layout(&p->arena, C->chip, &x->shape);
                    /* read by one convolution only: converted on the fly (a bf16 copy pays off when several
                     * convolutions read it, e.g. the forward one and its kernel gradient: resnet_block_train) */
                    int readers = 0;
                    for (int q = 0; q < c->ninstrs; q++) {
                        const hlo_instr *u = c->instrs[q];
                        if (u->op != HLO_CONVOLUTION) continue;
                        for (int o = 0; o < u->nops && o < 2; o++) {
                            const hlo_instr *y = u->ops[o];
                            while ((y->op == HLO_CONVERT || y->op == HLO_COPY) && y->nops == 1) y = y->ops[0];
                            readers += y == x;
                        }
                    }
                    if (readers < 2 && conv_l.layout &&
                        cmp_padded_bytes(C->chip, &conv_l) <= cmp_padded_bytes(C->chip, &compact))
                        continue;
                }
                int v = copy_of[x->id];
                if (v < 0) {
                    hlo_shape s = opnd->shape;
                    s.layout = cmp_make_layout(&p->arena, s.rank, minor, second);
                    if (!s.layout) {
                        ut_free(copy_of);
                        return ut_nomem(C->ctx);
                    }
                    if (s.dtype == TPU_F32 && cmp_mxu_passes(cv) == 1 && cmp_on_mxu(cv)) s.dtype = TPU_BF16;
                    v = cmp_new_value(C, cv, 0, &s, CMP_V_TEMP);
                    if (v < 0) {
                        ut_free(copy_of);
                        return ut_nomem(C->ctx);
                    }
                    p->values[v].copy_of = x;
                    p->values[v].start = k;
                    copy_of[x->id] = v;
                }
                int dupv = 0;
                for (int q = 0; q < op->nin && !dupv; q++) dupv = op->in[q] == v;
                if (dupv) continue;
                int *nin = ut_arena_alloc(&p->arena, (size_t)(op->nin + 1) * sizeof(int));
                if (!nin) {
                    ut_free(copy_of);
                    return ut_nomem(C->ctx);
                }
                if (op->nin) memcpy(nin, op->in, (size_t)op->nin * sizeof(int));
                nin[op->nin++] = v;
                op->in = nin;
                if (p->values[v].end < k) p->values[v].end = k;
            }
        }
    }
    ut_free(copy_of);
    return TPU_OK;
}

/* A prefix scan: a reduce-window whose window spans its whole minor dimension (longer than one 128-lane
 * row), padded by size - 1 on one side, stride 1 (lax.cummax, cumsum). */
static int cmp_is_long_scan(const hlo_instr *t)
{
    if (t->op != HLO_REDUCE_WINDOW || t->nops != 2 || t->shape.rank < 2 || !hlo_shape_is_array(&t->shape)) return 0;
    const hlo_attr *wa = hlo_attr_find(t, HK_WINDOW);
    const hlo_window *w = wa && wa->kind == HA_WINDOW ? wa->v.window : NULL;
    int d = t->shape.rank - 1;
    if (!w || w->rank != t->shape.rank) return 0;
    int64_t n = t->ops[0]->shape.dims[d];
    const hlo_window_dim *x = &w->d[d];
    return n > 128 && x->size == n && (x->stride <= 1) && (x->pad_lo == n - 1 || x->pad_hi == n - 1);
}

/* TopK reads its operand with the sorted (last) dimension major: libtpu copies a row-major operand into that
 * layout first (topk: f32[1024,32000]{1,0} -> copy {0,1}, then the TopK custom-call), a temporary as large as
 * the operand for the length of the op. A long prefix scan along the minor dimension is computed in blocks
 * of 128 lanes with that dimension moved major the same way (reduce_window_rowmax: f32[1024,2048] cummax ->
 * copies to {0,1,2} of [1024,16,128], a two-level scan, and back): one operand-sized temporary too. */
static tpu_status cmp_topk_copies(cmp_state *C, cmp_plan *plan)
{
    cmp_program *p = C->p;
    for (int k = 0; k < plan->nops; k++) {
        cmp_op *op = &plan->ops[k];
        const hlo_instr *t = op->root;
        if (op->kind == CMP_NOOP) continue;
        if ((t->op != HLO_TOPK || t->nops != 1 || t->ops[0]->shape.rank < 2) && !cmp_is_long_scan(t)) continue;
        hlo_shape s = t->ops[0]->shape;
        s.layout = cmp_make_layout(&p->arena, s.rank, s.rank - 2, s.rank - 1);
        if (!s.layout) return ut_nomem(C->ctx);
        int v = cmp_new_value(C, t, 0, &s, CMP_V_TEMP);
        if (v < 0) return ut_nomem(C->ctx);
        p->values[v].copy_of = t->ops[0];
        p->values[v].start = p->values[v].end = k;
    }
    return TPU_OK;
}

/* ---- plans ---- */

static tpu_status cmp_plan_comp(cmp_state *C, const hlo_comp *c, cmp_plan **out);
static void cmp_apply_io_alias(cmp_state *C);

/* Sub-plans of a control instruction. */
static tpu_status cmp_control_subs(cmp_state *C, const hlo_instr *in, cmp_op *op)
{
    op->nsub = in->ncalled;
    op->sub = in->ncalled ? ut_arena_alloc(&C->p->arena, (size_t)in->ncalled * sizeof *op->sub) : NULL;
    if (in->ncalled && !op->sub) return ut_nomem(C->ctx);
    int64_t peak = 0;
    for (int k = 0; k < in->ncalled; k++) {
        tpu_status st = cmp_plan_comp(C, in->called[k], &op->sub[k]);
        if (st) return st;
        if (op->sub[k]->peak > peak) peak = op->sub[k]->peak;   /* body and condition run one at a time */
    }
    op->sub_peak = peak;
    return TPU_OK;
}

typedef struct cmp_buf {
    int     v;          /* value index, or -1 for a sub-plan reservation */
    int64_t size;
    int     start, end;
    int64_t offset;
} cmp_buf;

static int cmp_buf_cmp(const void *a, const void *b)
{
    const cmp_buf *x = a, *y = b;
    if (x->size != y->size) return x->size < y->size ? 1 : -1;
    if (x->start != y->start) return x->start - y->start;
    return x->v - y->v;
}

/* libtpu places every buffer of its HBM heap at an offset that is a multiple of 16 KiB (the buffer assignments
 * of the reference programs on v3, v5e and v6e, tests/reference/libtpu_memory.py): small buffers live at once
 * take 16 KiB each. */
#define CMP_HEAP_ALIGN 16384

/* cmp_buf.v of the block of a plan's tuple tables (cmp_tuple_tables): placed at any offset */
#define CMP_BUF_TABLES (-2)

/* Best fit by decreasing size (like XLA's heap simulator): each buffer goes to the lowest aligned offset where
 * it overlaps no placed buffer that is live at the same time. */
static tpu_status cmp_assign_heap(cmp_state *C, cmp_plan *plan, cmp_buf *bufs, int n)
{
    qsort(bufs, (size_t)n, sizeof *bufs, cmp_buf_cmp);
    cmp_buf **placed = ut_malloc((size_t)(n ? n : 1) * sizeof *placed);
    cmp_buf **conf = ut_malloc((size_t)(n ? n : 1) * sizeof *conf);
    if (!placed || !conf) {
        ut_free(placed);
        ut_free(conf);
        return ut_nomem(C->ctx);
    }
    int np = 0;
    int64_t peak = 0;
    for (int i = 0; i < n; i++) {
        cmp_buf *b = &bufs[i];
        int nc = 0;
        for (int k = 0; k < np; k++)
            if (placed[k]->start <= b->end && b->start <= placed[k]->end) conf[nc++] = placed[k];
        /* sort conflicts by offset (insertion sort: conflict sets are small) */
        for (int a = 1; a < nc; a++) {
            cmp_buf *x = conf[a];
            int j = a - 1;
            while (j >= 0 && conf[j]->offset > x->offset) {
                conf[j + 1] = conf[j];
                j--;
            }
            conf[j + 1] = x;
        }
        /* entry outputs are allocations of their own in libtpu, not heap buffers: no alignment */
        int out = b->v >= 0 && C->p->values[b->v].kind == CMP_V_OUTPUT;
        int64_t align = out || b->v == CMP_BUF_TABLES ? 1 : CMP_HEAP_ALIGN;
        int64_t best = -1, best_gap = INT64_MAX, cur = 0;
        for (int k = 0; k <= nc; k++) {
            int64_t next = k < nc ? conf[k]->offset : INT64_MAX;
            cur = cmp_round_up_sat(cur, align);
            if (next - cur >= b->size) {
                int64_t gap = next == INT64_MAX ? INT64_MAX - 1 : next - cur;
                if (gap < best_gap) {
                    best_gap = gap;
                    best = cur;
                }
            }
            if (k < nc && conf[k]->offset + conf[k]->size > cur) cur = conf[k]->offset + conf[k]->size;
        }
        b->offset = best < 0 ? cmp_round_up_sat(cur, align) : best;
        if (b->offset + b->size > peak) peak = b->offset + b->size;
        placed[np++] = b;
        if (b->v >= 0) C->p->values[b->v].offset = b->offset;
    }
    ut_free(placed);
    ut_free(conf);
    plan->peak = peak;
    return TPU_OK;
}

/* Memory-space assignment (XLA's MSA on v5e and later): temporaries go to VMEM while the VMEM they occupy at
 * every point of their live range stays within the chip's budget for them (chip->vmem_temp_bytes); what is
 * left is the HBM heap. Candidates are taken in MSA's order: its benefit of the buffer over the square root of
 * its size, then larger first (cmp_vmem_benefits). A temporary that only compute-bound matmuls write and read
 * comes after all others (MSA's benefit of it is negative): it takes what VMEM is left. Argument prefetches
 * compete with the temporaries (cmp_prefetch_cands); the cross-program prefetch holds its VMEM before any of
 * them (cmp_cross_program_prefetch). Entry outputs, loop state a sub-plan writes and sub-plan reservations stay in
 * HBM. Removes the chosen buffers from bufs (*n shrinks). */
typedef struct cmp_vcand {
    cmp_buf b;
    double  density;
    int     arg;        /* a prefetch: the entry argument copied into VMEM over b.start..b.end; else -1 */
    int     last;       /* only compute-bound ops touch it: a candidate after all others */
} cmp_vcand;

static int cmp_vcand_cmp(const void *x, const void *y)
{
    const cmp_vcand *a = x, *b = y;
    if (a->last != b->last) return a->last - b->last;
    if (a->density != b->density) return a->density < b->density ? 1 : -1;
    if (a->b.size != b->b.size) return a->b.size < b->b.size ? 1 : -1;
    if ((a->arg >= 0) != (b->arg >= 0)) return a->arg >= 0 ? -1 : 1;   /* prefetches first (cmp_prefetch_cands) */
    if (a->arg != b->arg) return a->arg - b->arg;
    return a->b.v - b->b.v;
}

/* Multiply-adds of the dots and convolutions an op runs (MXU passes included; nested calls not counted). */
static double cmp_op_macs(const cmp_op *op)
{
    double macs = 0;
    for (int m = 0; m < op->ninstrs; m++) {
        const hlo_instr *in = op->instrs[m];
        if ((in->op != HLO_DOT && in->op != HLO_CONVOLUTION) || in->nops < 2) continue;
        const hlo_shape *l = &in->ops[0]->shape, *k = &in->ops[1]->shape;
        double depth = 1;
        if (in->op == HLO_DOT) {
            const int64_t *lc;
            int nlc = hlo_attr_ints(in, HK_LHS_CONTRACTING_DIMS, &lc);
            for (int i = 0; i < nlc; i++)
                if (lc[i] >= 0 && lc[i] < l->rank) depth *= (double)l->dims[lc[i]];
        } else {
            const hlo_attr *dla = hlo_attr_find(in, HK_DIM_LABELS);
            if (!dla || dla->kind != HA_DIMLABELS) continue;
            int64_t of = k->dims[dla->v.dimlabels->k_out];
            depth = of > 0 ? (double)hlo_shape_count(k) / (double)of : 0;
        }
        macs += depth * (double)hlo_shape_count(&in->shape) * cmp_mxu_passes(in);
    }
    return macs;
}

/* HBM bytes per second of one device (a megacore chip's cores share the chip's). */
static double cmp_device_hbm_bw(const chp_chip *chip)
{
    return chip->hbm_bw * ((double)chip->cores_per_device / (double)(chip->cores_per_chip ? chip->cores_per_chip : 1));
}

/* Seconds op spends on the MXU at the device's peak (0 without matmuls) and moving over HBM what it reads and
 * writes. */
static void cmp_op_times(cmp_state *C, const cmp_op *op, double *compute, double *memory)
{
    const chp_chip *chip = C->chip;
    double peak = chp_device_peak_flops(chip), bytes = 0, bw = cmp_device_hbm_bw(chip);
    *compute = op->kind == CMP_OUTPUT && peak > 0 ? 2 * cmp_op_macs(op) / peak : 0;
    for (int q = 0; q < op->nin; q++)
        if (op->in[q] >= 0 && op->in[q] < C->nvalues) bytes += (double)C->p->values[op->in[q]].padded;
    for (int q = 0; q < op->nout; q++)
        if (op->out[q] >= 0 && op->out[q] < C->nvalues) bytes += (double)C->p->values[op->out[q]].padded;
    *memory = bw > 0 ? bytes / bw : 0;
}

/* An op is compute-bound when its MXU time at the device's peak exceeds its HBM time: VMEM would not make it
 * faster (MSA's benefit of an alternate-memory buffer is the memory-boundedness of the ops that use it, negative
 * for a compute-bound one). The HBM time is that of everything the op reads and writes, as MSA's cost analysis
 * times a fusion: a matmul whose epilogue reads other full-size arrays (a GELU's backward reading the forward
 * activation) is memory-bound although its matmul alone is not. */
static int cmp_op_compute_bound(cmp_state *C, const cmp_op *op)
{
    double compute, memory;
    cmp_op_times(C, op, &compute, &memory);
    return compute > 0 && memory > 0 && compute > memory;
}

/* Whether op reads argument value v through the copy the compiler makes of it (a convolution's operand in its
 * layout: cmp_conv_operand_copies lists the copy beside the argument). */
static int cmp_op_reads_copy(const cmp_state *C, const cmp_op *op, int v)
{
    for (int q = 0; q < op->nin; q++) {
        int w = op->in[q];
        if (w >= 0 && w < C->nvalues && C->p->values[w].copy_of && C->p->values[w].copy_of == C->p->values[v].def)
            return 1;
    }
    return 0;
}

/* Prefetches (MSA's copy-start of an entry argument into VMEM before an op reads it): they hold VMEM that
 * temporaries then cannot have. A prefetch is only worth it when the copy hides behind the ops before the
 * reader, so it starts at the latest op from which they take at least as long as copying the argument over
 * HBM, and one that cannot hide (an argument the first ops read) is not made. Consecutive readers whose windows
 * meet share one. It competes with the temporaries by its argument's benefit (cmp_vmem_benefits) and goes first
 * among equals: embedding_train on v6e prefetches its 49 MiB table (in slices) for the update and writes the
 * scatter's zero table, of the same size and benefit (the scatter's updates and the update's read, against the
 * gather's rows and the update's read), to HBM. The cross-program prefetch's argument may have one too (mlp_infer_bf16:
 * libtpu's program holds two VMEM copies of w2). Appends to cand from *nc. */
static tpu_status cmp_prefetch_cands(cmp_state *C, cmp_plan *plan, cmp_vcand *cand, int *nc)
{
    cmp_program *p = C->p;
    double *before = ut_malloc((size_t)(plan->nops + 1) * sizeof *before);   /* op time of ops 0..k-1 */
    if (!before) return ut_nomem(C->ctx);
    before[0] = 0;
    for (int k = 0; k < plan->nops; k++) {
        double cpt, mem;
        cmp_op_times(C, &plan->ops[k], &cpt, &mem);
        before[k + 1] = before[k] + (cpt > mem ? cpt : mem);
    }
    /* parameters the compiler copies for a convolution (by instruction id): only their readers need
     * cmp_op_reads_copy */
    const hlo_comp *pc = plan->comp;
    char *copied = ut_calloc((size_t)pc->ninstrs + 1, 1);
    if (!copied) {
        ut_free(before);
        return ut_nomem(C->ctx);
    }
    for (int w = 0; w < C->nvalues; w++) {
        const hlo_instr *x = p->values[w].copy_of;
        if (x && x->parent == pc && x->id >= 0 && x->id < pc->ninstrs) copied[x->id] = 1;
    }
    double bw = cmp_device_hbm_bw(C->chip);
    for (int k = 0; k < plan->nops && bw > 0; k++) {
        const cmp_op *op = &plan->ops[k];
        for (int q = 0; q < op->nin; q++) {
            int v = op->in[q];
            if (v < 0 || v >= C->nvalues || p->values[v].kind != CMP_V_ARG) continue;
            const hlo_instr *d = p->values[v].def;
            int via_copy = d->parent == pc && d->id >= 0 && d->id < pc->ninstrs && copied[d->id];
            if (via_copy && cmp_op_reads_copy(C, op, v)) continue;
            double need = (double)p->values[v].padded / bw;
            if (p->values[v].padded <= 0 || before[k] < need) continue;
            int lo = 0, hi = k - 1;   /* the latest start j with before[k] - before[j] >= need */
            while (lo < hi) {
                int mid = (lo + hi + 1) / 2;
                if (before[k] - before[mid] >= need) lo = mid;
                else hi = mid - 1;
            }
            /* one copy serves consecutive readers whose windows meet (libtpu's layernorm_train.v6e: one
             * `copy-start` of the batch for all its readers) */
            int j = *nc - 1;
            while (j >= 0 && cand[j].arg >= 0 && cand[j].arg != v) j--;
            if (j >= 0 && cand[j].arg == v && lo <= cand[j].b.end) {
                cand[j].b.end = k;
                continue;
            }
            cmp_vcand *c = &cand[(*nc)++];
            memset(c, 0, sizeof *c);
            c->arg = v;
            c->b.v = -1;
            c->b.size = p->values[v].padded;
            c->b.start = lo;
            c->b.end = k;
        }
    }
    ut_free(copied);
    ut_free(before);
    return TPU_OK;
}

/* The cross-program prefetch (MSA's, ahead of its other allocations): the largest entry argument that only
 * dots read (as operands, through type and layout changes) is copied into VMEM while the previous run of the
 * program ends, and holds it until its last reader. The choice agrees with libtpu's `cross_program_prefetch`
 * on every reference program that has one and reads it through dots: mlp_infer_bf16's w2 (32 MiB: with it in
 * VMEM the 64 MiB hidden activations do not fit there), xent_vocab's vocabulary matrix, attention's input, the
 * train steps' batch. *arg: its value, or -1; *last: the last op reading it. */
static tpu_status cmp_cross_program_prefetch(cmp_state *C, cmp_plan *plan, int *arg, int *last)
{
    cmp_program *p = C->p;
    const hlo_comp *ec = plan->comp;
    *arg = *last = -1;
    if (!ec->is_entry) return TPU_OK;
    char *other = ut_calloc((size_t)ec->ninstrs + 1, 1);   /* read by something other than a dot's operand */
    if (!other) return ut_nomem(C->ctx);
    for (int i = ec->ninstrs - 1; i >= 0; i--) {   /* users before their operands */
        const hlo_instr *u = ec->instrs[i];
        if (u->is_root) other[u->id] = 1;
        for (int o = 0; o < u->nops; o++) {
            const hlo_instr *x = u->ops[o];
            if (x->parent != ec || x->id < 0 || x->id >= ec->ninstrs) continue;
            if (u->op == HLO_DOT && o < 2) continue;
            if (u->op == HLO_CONVERT || u->op == HLO_BITCAST || u->op == HLO_RESHAPE || u->op == HLO_COPY)
                other[x->id] |= other[u->id];
            else
                other[x->id] = 1;
        }
    }
    for (int v = 0; v < C->nvalues; v++) {
        const cmp_value *val = &p->values[v];
        const hlo_instr *d = val->def;
        if (val->kind != CMP_V_ARG || d->parent != ec || d->op != HLO_PARAMETER || d->id < 0 ||
            d->id >= ec->ninstrs || other[d->id] || !hlo_shape_is_array(&d->shape) ||
            val->padded > C->chip->vmem_temp_bytes)
            continue;
        if (*arg < 0 || val->padded > p->values[*arg].padded) *arg = v;
    }
    ut_free(other);
    for (int k = 0; k < plan->nops && *arg >= 0; k++)
        for (int q = 0; q < plan->ops[k].nin; q++)
            if (plan->ops[k].in[q] == *arg) *last = k;
    if (*last < 0) *arg = -1;
    return TPU_OK;
}

/* Tuple index tables (a tuple-shaped value's table of element addresses) in libtpu's HBM heap on the chips with
 * memory-space assignment: every buffer assignment dumped on v5e/v6e (rank1_degenerate, mlp_train, a small SGD
 * step) holds one per `copy-start` of an argument prefetched into VMEM and one per sort (a stable one becomes a
 * sort of the keys and an s32 iota), 512 B on v5e and 32 B on v6e (v5p, v7: not measured; taken as v5e, v6e),
 * each in a 16 KiB slot of its own that no other table reuses even where their live ranges do not meet. tpusim
 * gives a plan's n tables one block live over the whole plan: n - 1 slots and the last table, at any offset
 * (libtpu's heap starts its slots at an aligned base, and the entry outputs tpusim's heap holds beside them are
 * allocations outside libtpu's heap: odd_shapes_bf16's 849 KiB are its arguments, outputs and one table).
 * The arguments' `copy-start` count is one per argument prefetched (8 for the SGD step's 8 non-scalar arguments),
 * not one per tpusim prefetch window; a scalar argument is copied into scalar memory without a table. */
static int64_t cmp_tuple_table_bytes(const chp_chip *chip)
{
    return chip->generation >= 6 ? 32 : 512;
}

static cmp_buf cmp_tuple_tables(const cmp_state *C, const cmp_plan *plan, int n)
{
    int64_t bytes = (int64_t)(n - 1) * CMP_HEAP_ALIGN + cmp_tuple_table_bytes(C->chip);
    return (cmp_buf){CMP_BUF_TABLES, bytes, 0, plan->nops, 0};
}

/* Bytes of value v that op moves when it reads it (out = 0) or writes it (out = 1), as XLA's cost analysis
 * counts them: a gather or dynamic-slice reads of its operand only what it returns, a scatter or
 * dynamic-update-slice in place reads and writes only its updates (embedding_train: the table's rows). Other
 * readers and writers move the whole value, but a fill (a scalar broadcast) none: XLA fuses it into its reader,
 * libtpu's scatter writes the zero table it updates. */
static double cmp_use_bytes(cmp_state *C, const cmp_op *op, int v, int out)
{
    const cmp_value *val = &C->p->values[v];
    double whole = (double)val->padded, sum = 0;
    int any = 0;
    if (out && op->root->op == HLO_BROADCAST && op->root->nops == 1 && op->root->ops[0]->shape.rank == 0)
        return 0;   /* a fill: fused into its reader (embedding_train's zero table into the scatter) */
    for (int m = 0; m < op->ninstrs; m++) {
        const hlo_instr *in = op->instrs[m];
        if (out ? in != op->root : 1) {
            int reads = 0;
            for (int j = 0; j < in->nops && !out; j++) reads |= in->ops[j] == val->def;
            if (!reads) continue;
        }
        const hlo_shape *part = NULL;
        if ((in->op == HLO_GATHER || in->op == HLO_DYNAMIC_SLICE) && !out && in->nops > 0 && in->ops[0] == val->def)
            part = &in->shape;
        else if (in->op == HLO_DYNAMIC_UPDATE_SLICE && in->nops > 1 && (out || in->ops[0] == val->def))
            part = &in->ops[1]->shape;
        else if (in->op == HLO_SCATTER && in->nops == 3 && (out || in->ops[0] == val->def))
            part = &in->ops[2]->shape;
        if (!part || !hlo_shape_is_array(part)) return whole;
        sum += (double)cmp_padded_bytes(C->chip, part);
        any = 1;
    }
    return any && sum < whole ? sum : whole;
}

/* MSA's benefit of keeping each buffer in VMEM (ben, by value; a buffer's is its owner's): each use (the op
 * writing it, each op reading it) adds, for a memory-bound op, the HBM time of the bytes it moves of the
 * buffer; a compute-bound op's use is its memory time less its compute time, negative, and only counts while
 * the sum is not positive. Compiler copies of arguments count as written by a memory-bound op. */
static tpu_status cmp_vmem_benefits(cmp_state *C, const cmp_plan *plan, double *ben)
{
    cmp_program *p = C->p;
    double bw = cmp_device_hbm_bw(C->chip);
    if (bw <= 0) return TPU_OK;   /* no HBM figure: every benefit 0, candidates by size */
    char *seen = ut_calloc((size_t)C->nvalues + 1, 1);
    if (!seen) return ut_nomem(C->ctx);
    for (int v = 0; v < C->nvalues; v++)
        if (p->values[v].copy_of) {
            ben[v] = (double)p->values[v].padded / bw;
            seen[v] = 1;
        }
    for (int k = 0; k < plan->nops; k++) {
        const cmp_op *op = &plan->ops[k];
        double cpt, mem;
        cmp_op_times(C, op, &cpt, &mem);
        for (int io = 0; io < 2; io++) {
            int n = io ? op->nin : op->nout;
            for (int q = 0; q < n; q++) {
                int v = io ? op->in[q] : op->out[q];
                if (v < 0 || v >= C->nvalues) continue;
                int w = cmp_owner(p, v);
                if (!io && seen[w]) continue;   /* written in place: the buffer's first writer defines it */
                double u = mem > cpt ? cmp_use_bytes(C, op, v, !io) / bw : mem - cpt;
                if (!seen[w]) ben[w] = u;
                else if (ben[w] > 0 && u > 0) ben[w] += u;
                else if (u > ben[w]) ben[w] = u;
                seen[w] = 1;
            }
        }
    }
    ut_free(seen);
    return TPU_OK;
}

/* Adds to *ntables the tuple tables of the prefetches made. */
static tpu_status cmp_vmem_assign(cmp_state *C, cmp_plan *plan, cmp_buf *bufs, int *n, int *ntables)
{
    cmp_program *p = C->p;
    int np = plan->nops + 1;
    int64_t *used = ut_calloc((size_t)np * 2, sizeof *used), *tused = used ? used + np : NULL;
    double *ben = ut_calloc((size_t)C->nvalues + 1, sizeof *ben);   /* cmp_vmem_benefits */
    int nreads = 0;   /* room for one prefetch per read */
    for (int k = 0; k < plan->nops; k++) nreads += plan->ops[k].nin;
    cmp_vcand *cand = ut_malloc((size_t)(*n + nreads + 1) * sizeof *cand);
    if (!used || !ben || !cand) {
        ut_free(used);
        ut_free(ben);
        ut_free(cand);
        return ut_nomem(C->ctx);
    }
    /* membound[v]: 1 when ops write or read v, 3 when one of them is not compute-bound
     * (values no op lists, such as the compiler's copies of operands, count as memory-bound; only ops of
     * compute-bound matmuls touching v make it a candidate of last resort) */
    char *membound = ut_calloc((size_t)C->nvalues + 1, 1);
    if (!membound) {
        ut_free(used);
        ut_free(ben);
        ut_free(cand);
        return ut_nomem(C->ctx);
    }
    for (int k = 0; k < plan->nops; k++) {
        char mb = cmp_op_compute_bound(C, &plan->ops[k]) ? 1 : 3;
        for (int q = 0; q < plan->ops[k].nin; q++)
            if (plan->ops[k].in[q] >= 0 && plan->ops[k].in[q] < C->nvalues) membound[plan->ops[k].in[q]] |= mb;
        for (int q = 0; q < plan->ops[k].nout; q++)
            if (plan->ops[k].out[q] >= 0 && plan->ops[k].out[q] < C->nvalues) membound[plan->ops[k].out[q]] |= mb;
    }
    for (int i = 0; i < *n; i++) {
        cand[i].b = bufs[i];
        cand[i].arg = -1;
        cand[i].last = bufs[i].v >= 0 && membound[bufs[i].v] == 1;
    }
    int nc = *n, xarg, xlast;
    tpu_status st = cmp_cross_program_prefetch(C, plan, &xarg, &xlast);
    for (int q = 0; q <= xlast && q < np && xarg >= 0; q++) used[q] += p->values[xarg].padded;
    if (st == TPU_OK) st = cmp_prefetch_cands(C, plan, cand, &nc);
    if (st == TPU_OK) st = cmp_vmem_benefits(C, plan, ben);
    for (int i = 0; i < nc; i++) {   /* a prefetch: its argument's benefit */
        int v = cand[i].arg >= 0 ? cand[i].arg : cand[i].b.v;
        cand[i].density = v >= 0 && cand[i].b.size > 0 ? ben[v] / sqrt((double)cand[i].b.size) : 0;
    }
    qsort(cand, (size_t)nc, sizeof *cand, cmp_vcand_cmp);
    int keep = 0, ntab = 0;
    for (int i = 0; i < nc && st == TPU_OK; i++) {
        cmp_buf b = cand[i].b;
        int pre = cand[i].arg >= 0;
        int ok = pre || (b.v >= 0 && p->values[b.v].kind == CMP_V_TEMP && b.size > 0);
        for (int q = b.start; ok && q <= b.end && q < np; q++) ok = used[q] + b.size <= C->chip->vmem_temp_bytes;
        if (!ok) {
            if (!pre) bufs[keep++] = b;   /* a prefetch not made leaves its argument in HBM, where it is */
            continue;
        }
        for (int q = b.start; q <= b.end && q < np; q++) {
            used[q] += b.size;
            if (pre) continue;
            tused[q] += b.size;   /* the report's VMEM figure: temporaries only */
            if (tused[q] > plan->vmem_peak) plan->vmem_peak = tused[q];
        }
        if (!pre) p->values[b.v].vmem = 1;
        else if (p->values[cand[i].arg].shape.rank > 0 && !(membound[cand[i].arg] & 4)) {
            membound[cand[i].arg] |= 4;   /* one table per argument prefetched */
            ntab++;
        }
    }
    *n = keep;
    *ntables += ntab;
    ut_free(membound);
    ut_free(used);
    ut_free(ben);
    ut_free(cand);
    return st;
}

/* ---- scheduling ----
 * The order ops run in decides how many buffers are alive at once. Like XLA's default memory scheduler,
 * tpusim tries more than one order and keeps the one with the lower peak: the order of the text (post
 * order), and a greedy list schedule that, among the ops whose operands are ready, runs the one that frees
 * the most bytes net of what it allocates. */

static int64_t cmp_instr_bytes(cmp_state *C, const hlo_instr *in)
{
    int64_t b = 0;
    int n = C->leaf_count[cmp_gid(C, in)];
    for (int k = 0; k < n; k++) {
        int kk = k;
        const hlo_shape *s = cmp_leaf_shape(&in->shape, &kk);
        if (!s || !hlo_shape_is_array(s)) continue;
        hlo_shape t = *s;
        const hlo_layout *al = C->lay ? C->lay[cmp_gid(C, in)] : NULL;
        if (al && k == 0 && al->rank == t.rank) t.layout = al;
        b += cmp_padded_bytes(C->chip, &t);
    }
    return b;
}

/* Peak of live bytes when groups run in `order` (positions), with out[g] bytes made by g and freed after
 * its last reader. */
static int64_t cmp_order_peak(int ng, const int *order, const int64_t *out, const int *nreaders, int **readers_of,
                              int *remaining, const uint8_t *persist)
{
    int64_t live = 0, peak = 0;
    for (int g = 0; g < ng; g++) remaining[g] = nreaders[g];
    for (int k = 0; k < ng; k++) {
        int g = order[k];
        live += out[g];
        if (live > peak) peak = live;
        (void)readers_of;
        /* free producers whose last reader this is: handled by the caller-provided reverse lists */
        for (int q = 0; readers_of[g][q] >= 0; q++) {
            int h = readers_of[g][q];
            if (--remaining[h] == 0 && !persist[h]) live -= out[h];
        }
        if (nreaders[g] == 0 && !persist[g]) live -= out[g];
    }
    return peak;
}

/* The ops a member's operand comes from: its own op, or, through duplicated producers, their operands' ops.
 * seen[id] == stamp marks duplicated producers already walked for this member: chains of them that share
 * operands (an RNG's bit mixing) would otherwise be walked once per path, exponentially many. */
static int cmp_producer_groups(const hlo_instr *src, const int *group, const uint8_t *dup, int *seen, int stamp,
                               int *out, int n, int cap)
{
    if (!dup || !dup[src->id]) {
        for (int q = 0; q < n; q++)
            if (out[q] == group[src->id]) return n;
        if (n < cap) out[n++] = group[src->id];
        return n;
    }
    if (seen[src->id] == stamp) return n;
    seen[src->id] = stamp;
    for (int k = 0; k < src->nops; k++) n = cmp_producer_groups(src->ops[k], group, dup, seen, stamp, out, n, cap);
    return n;
}

static tpu_status cmp_schedule(cmp_state *C, const hlo_comp *c, const int *group, const int *root_of, const uint8_t *gkind,
                               int ng, int *pos_of_group, const uint8_t *dup)
{
    int n = c->ninstrs;
    tpu_status st = TPU_OK;
    int64_t *out = ut_calloc((size_t)ng + 1, sizeof *out);
    int *nreaders = ut_calloc((size_t)ng + 1, sizeof *nreaders);   /* distinct consumer groups of g's value */
    int *indeg = ut_calloc((size_t)ng + 1, sizeof *indeg);
    int **preds = ut_calloc((size_t)ng + 1, sizeof *preds);          /* producer groups of g, -1 terminated */
    int **succs = ut_calloc((size_t)ng + 1, sizeof *succs);          /* consumer groups of g, -1 terminated */
    int *npred = ut_calloc((size_t)ng + 1, sizeof *npred), *nsucc = ut_calloc((size_t)ng + 1, sizeof *nsucc);
    int *text = ut_malloc((size_t)(ng ? ng : 1) * sizeof *text), *list = ut_malloc((size_t)(ng ? ng : 1) * sizeof *list);
    int *remaining = ut_malloc((size_t)(ng ? ng : 1) * sizeof *remaining);
    uint8_t *persist = ut_calloc((size_t)ng + 1, 1), *done = ut_calloc((size_t)ng + 1, 1);
    int *ready = ut_malloc((size_t)(ng ? ng : 1) * sizeof *ready);
    int *walked = ut_calloc((size_t)n + 1, sizeof *walked), stamp = 0;
    if (!out || !nreaders || !indeg || !preds || !succs || !npred || !nsucc || !text || !list || !remaining || !persist ||
        !done || !ready || !walked) {
        st = ut_nomem(C->ctx);
        goto out;
    }
    /* group edges: a member's operand outside the group comes from that operand's group */
    for (int pass = 0; pass < 2 && !st; pass++) {
        for (int i = 0; i < n; i++) {
            const hlo_instr *in = c->instrs[i];
            int g = group[i];
            if (g < 0) continue;   /* duplicated producers belong to no op */
            int hs[64], nh = 0;
            stamp++;
            for (int k = 0; k < in->nops; k++) nh = cmp_producer_groups(in->ops[k], group, dup, walked, stamp, hs, nh, 64);
            for (int q = 0; q < nh; q++) {
                int h = hs[q];
                if (h == g || h < 0) continue;
                /* distinct pairs only */
                int seen = 0;
                if (pass == 1) {
                    for (int e = 0; e < npred[g] && !seen; e++) seen = preds[g][e] == h;
                    if (!seen) {
                        preds[g][npred[g]++] = h;
                        succs[h][nsucc[h]++] = g;
                    }
                } else {
                    npred[g]++;
                    nsucc[h]++;
                }
            }
        }
        if (pass == 0) {
            for (int g = 0; g < ng && !st; g++) {
                preds[g] = ut_malloc((size_t)(npred[g] + 1) * sizeof(int));
                succs[g] = ut_malloc((size_t)(nsucc[g] + 1) * sizeof(int));
                if (!preds[g] || !succs[g]) st = ut_nomem(C->ctx);
                npred[g] = nsucc[g] = 0;
            }
        }
    }
    if (st) goto out;
    for (int g = 0; g < ng; g++) {
        preds[g][npred[g]] = -1;
        succs[g][nsucc[g]] = -1;
        indeg[g] = npred[g];
        nreaders[g] = nsucc[g];
        const hlo_instr *r = c->instrs[root_of[g]];
        /* arguments, constants and aliasing no-ops take no schedule-dependent memory */
        if (gkind[g] == CMP_NOOP) out[g] = 0;
        else out[g] = cmp_instr_bytes(C, r);
        persist[g] = r == c->root;
    }
    /* the text order */
    {
        int pos = 0;
        for (int i = 0; i < n; i++)
            if (group[i] >= 0 && root_of[group[i]] == i) text[pos++] = group[i];
    }
    /* the greedy list schedule */
    {
        int nready = 0, k = 0;
        for (int g = 0; g < ng; g++) remaining[g] = nreaders[g];
        for (int g = 0; g < ng; g++)
            if (indeg[g] == 0) ready[nready++] = g;
        while (nready > 0) {
            int best = 0;
            int64_t best_score = INT64_MIN;
            for (int q = 0; q < nready; q++) {
                int g = ready[q];
                int64_t score = -out[g];
                for (int e = 0; preds[g][e] >= 0; e++) {
                    int h = preds[g][e];
                    if (remaining[h] == 1 && !persist[h]) score += out[h];
                }
                /* ties: the text order (the root's position) */
                if (score > best_score || (score == best_score && root_of[g] < root_of[ready[best]])) {
                    best_score = score;
                    best = q;
                }
            }
            int g = ready[best];
            ready[best] = ready[--nready];
            list[k++] = g;
            done[g] = 1;
            for (int e = 0; preds[g][e] >= 0; e++) remaining[preds[g][e]]--;
            for (int e = 0; succs[g][e] >= 0; e++)
                if (--indeg[succs[g][e]] == 0) ready[nready++] = succs[g][e];
        }
        if (k != ng) {
            st = ut_err(C->ctx, TPU_ERR_INTERNAL, "scheduling '%s' left %d ops unscheduled", c->name, ng - k);
            goto out;
        }
    }
    int64_t pt = cmp_order_peak(ng, text, out, nreaders, preds, remaining, persist);
    int64_t pl = cmp_order_peak(ng, list, out, nreaders, preds, remaining, persist);
    /* a scheduled program (the compiler's output, is_scheduled=true) runs in its text order */
    const int *use = pl < pt && !C->compiled ? list : text;
    for (int k = 0; k < ng; k++) pos_of_group[use[k]] = k;
out:
    for (int g = 0; preds && succs && g < ng; g++) {
        ut_free(preds[g]);
        ut_free(succs[g]);
    }
    ut_free(preds);
    ut_free(succs);
    ut_free(out);
    ut_free(nreaders);
    ut_free(indeg);
    ut_free(npred);
    ut_free(nsucc);
    ut_free(text);
    ut_free(list);
    ut_free(remaining);
    ut_free(persist);
    ut_free(done);
    ut_free(ready);
    ut_free(walked);
    return st;
}

/* Whether `def` (in computation c) is read by an op scheduled after op k, other than through `via`. */
static int cmp_read_after(cmp_state *C, const hlo_instr *def, const hlo_instr *via, int k, const int *group,
                          const int *pos_of_group, const uint8_t *dup, int depth)
{
    const hlo_comp *c = def->parent;
    int gi = cmp_gid(C, def);
    for (int u = 0; u < C->users_n[gi]; u++) {
        const hlo_instr *user = c->instrs[C->users[gi][u] - C->comp_base[c->id]];
        if (user == via) continue;
        if (dup[user->id]) {   /* recomputed in its consumers: they read def */
            if (depth < 8 && cmp_read_after(C, user, via, k, group, pos_of_group, dup, depth + 1)) return 1;
            continue;
        }
        if (group[user->id] >= 0 && pos_of_group[group[user->id]] > k) return 1;
    }
    return 0;
}

/* The working arrays of one computation's plan, indexed by instruction id (creation order) or op (group). */
typedef struct cmp_fusion {
    int       n;              /* instructions */
    int       ngroups;        /* ops, numbered by creation */
    int      *group;          /* op of each instruction; -1 when duplicated into its consumers */
    int      *root_of;        /* per op: root instruction id */
    uint8_t  *gkind;          /* per op: cmp_op_kind */
    int      *pos_of_group;   /* per op: its position in the schedule */
    uint8_t  *dup;            /* duplicated into its consumers: no op, no value */
    int     **effs;           /* per duplicated instruction: the ops it is recomputed in (neff of them) */
    int      *neff;
} cmp_fusion;

/* Whether every reader of `in`'s value, following it through the elementwise and layout instructions that
 * are recomputed in their consumers (dup) and selects fused into their reader, is a dot or convolution that
 * rounds its operands to bf16 (one MXU pass) or a comparison (a ReLU mask: the sign survives rounding). Then
 * the TPU compiler stores the value as bf16, the rounding the MXU does anyway (libtpu keeps f32 activations
 * saved for the backward pass as bf16: cnn_nhwc_train, transformer_train in tests/reference). */
/* Whether a dot or convolution runs on the MXU (rounding its operands to bf16 at one pass). Depthwise
 * convolutions (groups of fewer than 8 input features, or batch groups: their weight gradient) run on the
 * vector unit in f32, so their operands stay f32 (depthwise_train: libtpu keeps the 98 MiB expanded
 * activations f32). */
static int cmp_on_mxu(const hlo_instr *u)
{
    if (u->op == HLO_DOT) return 1;
    if (u->op != HLO_CONVOLUTION || u->nops < 2) return 0;
    int64_t fg = hlo_attr_int(u, HK_FEATURE_GROUP_COUNT, 1), bg = hlo_attr_int(u, HK_BATCH_GROUP_COUNT, 1);
    if (bg > 1) return 0;
    if (fg > 1) {
        const hlo_attr *dla = hlo_attr_find(u, HK_DIM_LABELS);
        if (dla && dla->kind == HA_DIMLABELS && u->ops[1]->shape.dims[dla->v.dimlabels->k_in] < 8) return 0;
    }
    return 1;
}

/* Whether a convolution dilates its input (a transposed convolution): libtpu writes its result as computed, f32,
 * with nothing fused into it, although its readers round it to bf16 (conv_transpose_train's first layer,
 * `fusion.11` on v3, v5e and v6e; the cause is not known). */
static int cmp_conv_lhs_dilated(const hlo_instr *in)
{
    const hlo_attr *wa = in->op == HLO_CONVOLUTION ? hlo_attr_find(in, HK_WINDOW) : NULL;
    const hlo_window *w = wa && wa->kind == HA_WINDOW ? wa->v.window : NULL;
    for (int i = 0; w && i < w->rank; i++)
        if (w->d[i].lhs_dilate > 1) return 1;
    return 0;
}

static int cmp_bf16_enough(cmp_state *C, const hlo_instr *in, const cmp_fusion *F, int depth)
{
    if (depth > 12 || in == in->parent->root || cmp_conv_lhs_dilated(in)) return 0;
    const hlo_comp *c = in->parent;
    int gi = cmp_gid(C, in), any = 0;
    for (int k = 0; k < C->users_n[gi]; k++) {
        const hlo_instr *u = c->instrs[C->users[gi][k] - C->comp_base[c->id]];
        any = 1;
        if (u->op == HLO_DOT || u->op == HLO_CONVOLUTION) {
            if (cmp_mxu_passes(u) != 1 || !cmp_on_mxu(u)) return 0;
            continue;
        }
        if (u->op == HLO_COMPARE) continue;
        hlo_class uc = hlo_op_class((hlo_op)u->op);
        int flows = uc == HLO_CLASS_EW1 || uc == HLO_CLASS_EW2 || uc == HLO_CLASS_EW3 || u->op == HLO_BROADCAST ||
                    u->op == HLO_RESHAPE || u->op == HLO_TRANSPOSE || u->op == HLO_SLICE || u->op == HLO_COPY;
        if (u->op == HLO_CONVERT && u->shape.dtype == TPU_BF16) continue;
        /* u recomputed in its consumers, or a select fused into the op that reads it (conv_transpose_train's
         * ReLU-gradient mask: libtpu fuses it into the convolution writing the gradient, stored as bf16) */
        int inside = F->dup[u->id] || (u->op == HLO_SELECT && F->group[u->id] >= 0 &&
                                       F->root_of[F->group[u->id]] != u->id);
        if (!flows || !inside || !cmp_bf16_enough(C, u, F, depth + 1)) return 0;
    }
    return any;
}

/* Whether a value the loop body reads (`x`, following slices, reshapes and copies) only ever reaches bf16:
 * converts to bf16 and dots/convolutions that round their operands to bf16 (one MXU pass). */
static int cmp_read_as_bf16(cmp_state *C, const hlo_instr *x, int depth)
{
    if (depth > 8) return 0;
    const hlo_comp *c = x->parent;
    int gi = cmp_gid(C, x), any = 0;
    for (int k = 0; k < C->users_n[gi]; k++) {
        const hlo_instr *u = c->instrs[C->users[gi][k] - C->comp_base[c->id]];
        if (u == c->root && u->op == HLO_TUPLE) continue;   /* passed through to the next iteration */
        any = 1;
        if (u->op == HLO_CONVERT && u->shape.dtype == TPU_BF16) continue;
        if ((u->op == HLO_DOT || u->op == HLO_CONVOLUTION) && cmp_mxu_passes(u) == 1 && cmp_on_mxu(u)) continue;
        if ((u->op == HLO_DYNAMIC_SLICE || u->op == HLO_SLICE || u->op == HLO_RESHAPE || u->op == HLO_BITCAST ||
             u->op == HLO_COPY || u->op == HLO_TRANSPOSE) && u->ops[0] == x && cmp_read_as_bf16(C, u, depth + 1))
            continue;
        return 0;
    }
    return any;
}

/* XLA's copy insertion for a while loop (op k): every leaf of the loop state is a buffer the body may
 * overwrite, so a leaf whose initial value is an argument or constant, appears twice in the state, is still
 * read after the loop, or was never materialized (a broadcast recomputed in its consumers) gets a buffer
 * of its own, allocated when the loop starts. 0 when out of memory. */
static int cmp_while_copies(cmp_state *C, const hlo_instr *w, int k, const int *group, const int *pos_of_group,
                            const uint8_t *dup)
{
    cmp_program *p = C->p;
    const hlo_instr *init = w->ops[0];
    int n = C->leaf_count[cmp_gid(C, w)];
    int *lv = cmp_leaves(C, w);
    const hlo_attr *ba = hlo_attr_find(w, HK_BODY);
    const hlo_instr *broot = ba && ba->v.comps.n ? ba->v.comps.v[0]->root : NULL;
    for (int l = 0; l < n; l++) {
        int v = lv[l] >= 0 ? cmp_owner(p, lv[l]) : -1, copy = v < 0;
        if (!copy && broot && broot->op == HLO_TUPLE && l < broot->nops && hlo_shape_is_tuple(&w->shape) &&
            w->shape.ntuple == broot->nops && cmp_leaf_offset(&w->shape, l) == l) {
            /* a state element the body passes through unchanged (loop-invariant weights) is only read: it
             * shares its initial value's buffer */
            const hlo_instr *e = broot->ops[l];
            while ((e->op == HLO_BITCAST || e->op == HLO_COPY) && e->nops == 1) e = e->ops[0];
            if (e->op == HLO_GET_TUPLE_ELEMENT && e->ops[0]->op == HLO_PARAMETER && hlo_attr_int(e, HK_INDEX, -1) == l) {
                /* ... unless the body only reads it as bf16 (f32 weights cast per layer): the compiler hoists the
                 * convert and the loop carries a bf16 copy (libtpu: transformer_remat_train's stacked weights,
                 * dus_loop's bf16 w) */
                const hlo_comp *body = ba->v.comps.v[0];
                const hlo_shape *ls = &w->shape.tuple[l];
                int bf16 = hlo_shape_is_array(ls) && ls->dtype == TPU_F32;
                for (int i = 0; i < body->ninstrs && bf16; i++) {
                    const hlo_instr *g = body->instrs[i];
                    if (g->op == HLO_GET_TUPLE_ELEMENT && g->ops[0]->op == HLO_PARAMETER && hlo_attr_int(g, HK_INDEX, -1) == l)
                        bf16 = cmp_read_as_bf16(C, g, 0);
                }
                if (!bf16) continue;
                hlo_shape hs = *ls;
                hs.dtype = TPU_BF16;
                int nv = cmp_new_value(C, w, l, &hs, CMP_V_TEMP);
                if (nv < 0) return 0;
                p->values[nv].start = k;
                lv[l] = nv;
                continue;
            }
        }
        if (!copy) {
            const cmp_value *val = &p->values[v];
            copy = val->kind == CMP_V_ARG || val->kind == CMP_V_CONST || val->kind == CMP_V_CALLER;
            for (int q = 0; q < l && !copy; q++) copy = lv[q] >= 0 && cmp_owner(p, lv[q]) == v;
            if (!copy && val->def->parent == w->parent) {
                const hlo_instr *via = init->op == HLO_TUPLE ? init : w;
                copy = cmp_read_after(C, val->def, via, k, group, pos_of_group, dup, 0);
            }
        }
        if (!copy) continue;
        int kk = l;
        const hlo_shape *s = cmp_leaf_shape(&w->shape, &kk);
        if (!s || !hlo_shape_is_array(s)) continue;
        int nv = cmp_new_value(C, w, l, s, CMP_V_TEMP);
        if (nv < 0) return 0;
        p->values[nv].start = k;
        lv[l] = nv;
    }
    return 1;
}

static tpu_status cmp_fusion_init(cmp_state *C, cmp_fusion *F, int n)
{
    memset(F, 0, sizeof *F);
    F->n = n;
    F->group = ut_malloc((size_t)n * sizeof *F->group);
    F->root_of = ut_malloc((size_t)n * sizeof *F->root_of);
    F->gkind = ut_malloc((size_t)n);
    F->pos_of_group = ut_malloc((size_t)n * sizeof *F->pos_of_group);
    F->dup = ut_calloc((size_t)n, 1);
    F->effs = ut_calloc((size_t)n, sizeof *F->effs);
    F->neff = ut_calloc((size_t)n, sizeof *F->neff);
    if (!F->group || !F->root_of || !F->gkind || !F->pos_of_group || !F->dup || !F->effs || !F->neff)
        return ut_nomem(C->ctx);
    return TPU_OK;
}

static void cmp_fusion_free(cmp_fusion *F)
{
    for (int i = 0; F->effs && i < F->n; i++) ut_free(F->effs[i]);
    ut_free(F->effs);
    ut_free(F->neff);
    ut_free(F->dup);
    ut_free(F->group);
    ut_free(F->root_of);
    ut_free(F->gkind);
    ut_free(F->pos_of_group);
}

static int cmp_new_group(cmp_fusion *F, cmp_op_kind kind)
{
    int g = F->ngroups++;
    F->gkind[g] = (uint8_t)kind;
    return g;
}

static int cmp_op_has(const cmp_op *op, const hlo_instr *in)
{
    for (int q = 0; q < op->ninstrs; q++)
        if (op->instrs[q] == in) return 1;
    return 0;
}

/* The ops that in's value flows into, through duplicated producers: ug[0..return), at most 64 (*overflow
 * when there are more). */
static int cmp_user_groups(const cmp_state *C, const hlo_comp *c, const cmp_fusion *F, const hlo_instr *in,
                           int ug[64], int *overflow)
{
    int gi = cmp_gid(C, in), nug = 0;
    *overflow = 0;
    for (int k = 0; k < C->users_n[gi] && !*overflow; k++) {
        int uid = C->users[gi][k] - C->comp_base[c->id];
        int cnt = F->dup[uid] ? F->neff[uid] : 1;
        for (int e = 0; e < cnt; e++) {
            int g2 = F->dup[uid] ? F->effs[uid][e] : F->group[uid];
            int seen = 0;
            for (int q = 0; q < nug && !seen; q++) seen = ug[q] == g2;
            if (seen) continue;
            if (nug == 64) {
                *overflow = 1;
                break;
            }
            ug[nug++] = g2;
        }
    }
    return nug;
}

/* Arrays of in's element count that in's elementwise chain reads (through fusible producers; broadcasts
 * bring small arrays and end the walk): what recomputing in in each consumer would read again. At most 8. */
static int cmp_full_size_sources(const hlo_instr *in)
{
    const hlo_instr *stack[64], *seen[64];
    int sp = 0, nseen = 0, nf = 0;
    int64_t n = hlo_shape_count(&in->shape);
    stack[sp++] = in;
    while (sp > 0 && nf < 8) {
        const hlo_instr *x = stack[--sp];
        for (int o = 0; o < x->nops && nf < 8; o++) {
            const hlo_instr *y = x->ops[o];
            int dup = 0;
            for (int q = 0; q < nseen && !dup; q++) dup = seen[q] == y;
            if (dup || nseen == 64) continue;
            seen[nseen++] = y;
            if (!hlo_shape_is_array(&y->shape) || y->op == HLO_BROADCAST || y->op == HLO_IOTA || y->op == HLO_CONSTANT)
                continue;
            if (cmp_is_fusible(y) && hlo_shape_count(&y->shape) == n) {
                if (sp < 64) stack[sp++] = y;
                continue;
            }
            if (hlo_shape_count(&y->shape) == n) nf++;
        }
    }
    return nf;
}

/* The columns a dot computes per element of its operand x: the product of the other operand's dimensions
 * that are neither batch nor contracting (attention's dS·K: the head size). 0 when x is not an operand. */
static int64_t cmp_dot_free_width(const hlo_instr *dot, const hlo_instr *x)
{
    if (dot->nops < 2 || (dot->ops[0] != x && dot->ops[1] != x)) return 0;
    int o = dot->ops[0] == x ? 1 : 0;   /* the other operand */
    const hlo_shape *s = &dot->ops[o]->shape;
    const int64_t *cd, *bd;
    int nc = hlo_attr_ints(dot, o ? HK_RHS_CONTRACTING_DIMS : HK_LHS_CONTRACTING_DIMS, &cd);
    int nb = hlo_attr_ints(dot, o ? HK_RHS_BATCH_DIMS : HK_LHS_BATCH_DIMS, &bd);
    int64_t w = 1;
    for (int d = 0; d < s->rank; d++) {
        int skip = 0;
        for (int i = 0; i < nc && !skip; i++) skip = cd[i] == d;
        for (int i = 0; i < nb && !skip; i++) skip = bd[i] == d;
        if (!skip) w = cmp_mul_sat(w, s->dims[d]);
    }
    return w;
}

/* The op of a fusible instruction or a dot/convolution (instruction i), whose users are placed already: the
 * op of its users when they share one that takes producers; the op of its single elementwise user for a
 * dot (output fusion); -1 when it is cheap and duplicated into each of its users' ops; -2 when out of
 * memory; else a new op. */
static int cmp_fuse_into_users(cmp_state *C, const hlo_comp *c, cmp_fusion *F, int i)
{
    const hlo_instr *in = c->instrs[i];
    int gi = cmp_gid(C, in), nu = C->users_n[gi];
    int ug[64], overflow;
    int nug = cmp_user_groups(C, c, F, in, ug, &overflow);
    int same = nu > 0 && nug == 1 && !overflow;
    int all_accept = nu > 0 && nug > 0 && !overflow && in != c->root;
    for (int q = 0; q < nug && all_accept; q++)
        all_accept = F->gkind[ug[q]] == CMP_LOOP || F->gkind[ug[q]] == CMP_INPUT ||
                     (F->gkind[ug[q]] == CMP_OUTPUT && cmp_fuses_into_mxu(in));
    if (in->op == HLO_DOT || in->op == HLO_CONVOLUTION) {
        /* output fusion: the dot heads its single elementwise user's loop op */
        /* (several users are fine when all of them are elementwise members of that one op: the dY·W2ᵀ of a
         * GELU's backward joins the loop writing dh, read by the GELU' terms) */
        if (same && F->gkind[ug[0]] == CMP_LOOP) {
            int ok = 1;
            for (int k = 0; k < nu && ok; k++) {
                const hlo_instr *u = c->instrs[C->users[gi][k] - C->comp_base[c->id]];
                hlo_class uc = hlo_op_class((hlo_op)u->op);
                ok = (uc == HLO_CLASS_EW1 || uc == HLO_CLASS_EW2 || uc == HLO_CLASS_EW3) && u->shape.rank == in->shape.rank;
            }
            if (ok) {
                F->gkind[ug[0]] = CMP_OUTPUT;
                return ug[0];
            }
        }
        /* a dot whose users all belong to reductions (through their elementwise producers) is computed in the
         * first of them, a multi-output output fusion: libtpu fuses layernorm's dY·Wᵀ into the two column sums
         * that are its only readers (layernorm_train). The other reductions read it there, from no buffer. */
        if (in != c->root && nug > 0 && !overflow) {
            int ok = 1;
            for (int q = 0; q < nug && ok; q++) ok = F->gkind[ug[q]] == CMP_INPUT;
            if (ok) {
                F->gkind[ug[0]] = CMP_OUTPUT;
                return ug[0];
            }
        }
        return cmp_new_group(F, CMP_OUTPUT);
    }
    if (same && all_accept) return ug[0];
    /* An elementwise value that two or more dots read, and that combines two or more full-size arrays, is
     * written once rather than recomputed in each matmul (each would read those arrays again): libtpu
     * materializes attention's dS = f(S, dP), read by the dQ and dK matmuls, on v3, v4 and v6e, but
     * recomputes a GELU of one array in the forward and the weight-gradient matmuls. v5e recomputes both
     * (chip->mxu_recompute_operands 1). v6e (2) recomputes it only where every reading matmul computes at
     * least an MXU's width of columns per element (the vector work of the recompute then hides under the
     * matmul): dS·K with heads of 64 or 128 on its 256-wide MXU is written once, a SwiGLU product or
     * cross-entropy's dlogits (widths of the model dimension) recomputed. */
    hlo_class ic = hlo_op_class((hlo_op)in->op);
    if (all_accept && (ic == HLO_CLASS_EW1 || ic == HLO_CLASS_EW2 || ic == HLO_CLASS_EW3)) {
        int dot_users = 0;
        int64_t width = INT64_MAX;   /* the narrowest reading matmul's columns per element of `in` */
        for (int k = 0; k < nu; k++) {
            const hlo_instr *u = c->instrs[C->users[gi][k] - C->comp_base[c->id]];
            if (u->op != HLO_DOT) continue;
            dot_users++;
            int64_t w = cmp_dot_free_width(u, in);
            if (w < width) width = w;
        }
        int once = C->chip->mxu_recompute_operands == 0 ||
                   (C->chip->mxu_recompute_operands == 2 && width < C->chip->mxu_cols);
        if (dot_users >= 2 && once && cmp_full_size_sources(in) >= 2) return cmp_new_group(F, CMP_LOOP);
    }
    if (all_accept && cmp_is_cheap(in)) {
        F->effs[i] = ut_malloc((size_t)nug * sizeof(int));
        if (!F->effs[i]) return -2;
        F->dup[i] = 1;
        memcpy(F->effs[i], ug, (size_t)nug * sizeof(int));
        F->neff[i] = nug;
        return -1;
    }
    return cmp_new_group(F, CMP_LOOP);
}

/* The op of instruction i (see cmp_fuse). */
static int cmp_fuse_one(cmp_state *C, const hlo_comp *c, cmp_fusion *F, int i)
{
    const hlo_instr *in = c->instrs[i];
    int mxu = in->op == HLO_DOT || in->op == HLO_CONVOLUTION;
    if (cmp_is_noop(in)) return cmp_new_group(F, CMP_NOOP);
    if (in->op == HLO_FUSION) return cmp_new_group(F, cmp_kind_of_fusion(in));
    if (cmp_is_control(in)) return cmp_new_group(F, CMP_CONTROL);
    /* a program the TPU compiler produced is fused already: what stands alone stays alone */
    if (C->compiled && (cmp_is_fusible(in) || mxu)) return cmp_new_group(F, mxu ? CMP_OUTPUT : CMP_LOOP);
    if (cmp_is_fusible(in) || mxu) return cmp_fuse_into_users(C, c, F, i);
    if (in->op == HLO_REDUCE || in->op == HLO_REDUCE_WINDOW) return cmp_new_group(F, CMP_INPUT);
    return cmp_new_group(F, CMP_SINGLE);
}

/* 1. Fusion, consumers first: each instruction joins an op or starts one (its root). A cheap producer whose
 * users sit in several ops that take producers is duplicated into each (dup[i], group -1): it is recomputed
 * there and never written to HBM. */
static tpu_status cmp_fuse(cmp_state *C, const hlo_comp *c, cmp_fusion *F)
{
    for (int i = F->n - 1; i >= 0; i--) {
        int before = F->ngroups;
        int g = cmp_fuse_one(C, c, F, i);
        if (g == -2) return ut_nomem(C->ctx);
        F->group[i] = g;
        if (g >= 0 && F->ngroups > before) F->root_of[g] = i;   /* the member that creates an op is its root */
    }
    return TPU_OK;
}

/* 2. The plan's ops in schedule order, each with its members. */
static tpu_status cmp_plan_ops(cmp_state *C, const hlo_comp *c, cmp_fusion *F, cmp_plan **out)
{
    cmp_program *p = C->p;
    int ngroups = F->ngroups;
    cmp_plan *plan = ut_arena_alloc(&p->arena, sizeof *plan);
    if (!plan) return ut_nomem(C->ctx);
    plan->comp = c;
    plan->nops = ngroups;
    plan->ops = ut_arena_alloc(&p->arena, (size_t)(ngroups ? ngroups : 1) * sizeof *plan->ops);
    if (!plan->ops) return ut_nomem(C->ctx);
    tpu_status st = cmp_schedule(C, c, F->group, F->root_of, F->gkind, ngroups, F->pos_of_group, F->dup);
    if (st) return st;
    int *count = ut_calloc((size_t)ngroups + 1, sizeof *count);
    if (!count) return ut_nomem(C->ctx);
    for (int i = 0; i < F->n; i++)
        if (F->group[i] >= 0) count[F->pos_of_group[F->group[i]]]++;
    for (int g = 0; g < ngroups && !st; g++) {
        cmp_op *op = &plan->ops[F->pos_of_group[g]];
        op->kind = (cmp_op_kind)F->gkind[g];
        op->root = c->instrs[F->root_of[g]];
        op->instrs = ut_arena_alloc(&p->arena, (size_t)count[F->pos_of_group[g]] * sizeof *op->instrs);
        if (!op->instrs) st = ut_nomem(C->ctx);
    }
    for (int i = 0; i < F->n && !st; i++) {
        if (F->group[i] < 0) continue;
        cmp_op *op = &plan->ops[F->pos_of_group[F->group[i]]];
        op->instrs[op->ninstrs++] = c->instrs[i];
    }
    ut_free(count);
    *out = plan;
    return st;
}

/* 4. Values of an op of no work: arguments, constants, and the buffers that tuples and views pass on. */
static tpu_status cmp_values_noop(cmp_state *C, const cmp_op *op, int is_entry)
{
    for (int m = 0; m < op->ninstrs; m++) {
        const hlo_instr *in = op->instrs[m];
        switch ((hlo_op)in->op) {
        case HLO_PARAMETER:
            if (is_entry && !cmp_define_all(C, in, CMP_V_ARG)) return ut_nomem(C->ctx);
            break;   /* sub-plan parameters live in the caller's buffers */
        case HLO_CONSTANT:
            if (!cmp_define_all(C, in, CMP_V_CONST)) return ut_nomem(C->ctx);
            break;
        case HLO_GET_TUPLE_ELEMENT:
            cmp_alias_leaves(C, in, in->ops[0], cmp_leaf_offset(&in->ops[0]->shape, hlo_attr_int(in, HK_INDEX, 0)));
            break;
        case HLO_TUPLE: {
            int off = 0;
            for (int o = 0; o < in->nops; o++) {
                int nl = C->leaf_count[cmp_gid(C, in->ops[o])];
                int *dst = cmp_leaves(C, in) + off, *src = cmp_leaves(C, in->ops[o]);
                for (int l = 0; l < nl; l++) dst[l] = src[l];
                off += nl;
            }
            break;
        }
        case HLO_REPLICA_ID: case HLO_PARTITION_ID: case HLO_AFTER_ALL:
            break;
        default:   /* bitcast, opt-barrier, domain, add-dependency, sharding custom-calls: same buffer */
            if (in->nops) cmp_alias_leaves(C, in, in->ops[0], 0);
            break;
        }
    }
    return TPU_OK;
}

/* Whether leaf value src is a temporary of at least s's padded size (that an op may take over). */
static int cmp_temp_fits(const cmp_state *C, int src, const hlo_shape *s)
{
    const cmp_program *p = C->p;
    return src >= 0 && p->values[cmp_owner(p, src)].kind == CMP_V_TEMP &&
           p->values[cmp_owner(p, src)].padded >= cmp_padded_bytes(C->chip, s);
}

/* A fusion whose root is a dynamic-update-slice of one of its parameters updates that operand in place
 * (XLA's can-share-buffer rule); so does one whose root is a scatter (an embedding gradient's scatter-add
 * into the zero table, embedding_grad.opt.hlo). 1 when r's values are placed, 0 when not, -1 out of memory. */
static int cmp_fusion_in_place(cmp_state *C, const hlo_instr *r, int is_entry)
{
    if (r->op != HLO_FUSION || r->ncalled != 1 || !hlo_shape_is_array(&r->shape)) return 0;
    const hlo_instr *fr = r->called[0]->root;
    while (fr->op == HLO_BITCAST && fr->nops == 1) fr = fr->ops[0];
    if (!(fr->op == HLO_DYNAMIC_UPDATE_SLICE || fr->op == HLO_SCATTER) || fr->nops < 1 ||
        fr->ops[0]->op != HLO_PARAMETER || fr->ops[0]->param_no >= r->nops)
        return 0;
    const hlo_instr *opnd = r->ops[fr->ops[0]->param_no];
    int gi = cmp_gid(C, opnd);
    int src = cmp_leaves(C, opnd)[0];
    if (C->users_n[gi] == 1 && src < 0 && !is_entry && cmp_from_param(opnd))
        /* updating the loop state (or an argument of the sub-plan) in place: the caller's buffer */
        return cmp_define_all(C, r, CMP_V_CALLER) ? 1 : -1;
    if (C->users_n[gi] == 1 && cmp_temp_fits(C, src, &r->shape)) {
        cmp_alias_leaves(C, r, opnd, 0);
        return 1;
    }
    return 0;
}

/* A scatter updates its operand in place when nothing else reads it (XLA's buffer sharing): a scatter-add
 * into a broadcast zero table (an embedding gradient) takes one table, not two. 1 when placed, else 0. */
static int cmp_scatter_in_place(cmp_state *C, const hlo_instr *r)
{
    if (r->op != HLO_SCATTER || C->compiled || !hlo_shape_is_array(&r->shape) || r->nops < 3) return 0;
    int gi = cmp_gid(C, r->ops[0]);
    int src = cmp_leaves(C, r->ops[0])[0];
    if (C->users_n[gi] != 1 || !cmp_temp_fits(C, src, &r->shape)) return 0;
    cmp_alias_leaves(C, r, r->ops[0], 0);
    return 1;
}

/* A dynamic-update-slice (op k's root, also as the root of a fusion) updates in place when its operand comes
 * from outside the op and nothing else reads it afterwards. 1 when placed, 0 when not, -1 out of memory. */
static int cmp_dus_in_place(cmp_state *C, const hlo_comp *c, const cmp_fusion *F, const cmp_op *op, int k,
                            int is_entry)
{
    const hlo_instr *r = op->root;
    if (r->op != HLO_DYNAMIC_UPDATE_SLICE) return 0;
    cmp_program *p = C->p;
    int gi = cmp_gid(C, r->ops[0]);
    int src = cmp_leaves(C, r->ops[0])[0];
    if (cmp_op_has(op, r->ops[0])) return 0;
    /* other readers scheduled before this op do not stop the update in place (XLA orders them) */
    for (int u = 0; u < C->users_n[gi]; u++) {
        const hlo_instr *user = c->instrs[C->users[gi][u] - C->comp_base[c->id]];
        if (user == r || cmp_op_has(op, user)) continue;
        if (!(F->group[user->id] >= 0 && F->pos_of_group[F->group[user->id]] < k)) return 0;
    }
    if (src < 0 && !is_entry && cmp_from_param(r->ops[0])) return cmp_define_all(C, r, CMP_V_CALLER) ? 1 : -1;
    if (src >= 0 && p->values[cmp_owner(p, src)].kind == CMP_V_TEMP) {
        cmp_alias_leaves(C, r, r->ops[0], 0);
        return 1;
    }
    return 0;
}

/* A multi-output fusion: each output that is a dynamic-update-slice of a parameter updates that operand's
 * buffer in place. */
static void cmp_multi_output_in_place(cmp_state *C, const hlo_instr *r, int is_entry)
{
    if (r->op != HLO_FUSION || r->ncalled != 1 || !hlo_shape_is_tuple(&r->shape)) return;
    cmp_program *p = C->p;
    const hlo_instr *fr = r->called[0]->root;
    int *lv = cmp_leaves(C, r);
    for (int e = 0; fr->op == HLO_TUPLE && e < fr->nops && e < C->leaf_count[cmp_gid(C, r)]; e++) {
        const hlo_instr *d = fr->ops[e];
        while (d->op == HLO_BITCAST && d->nops == 1) d = d->ops[0];
        if (d->op != HLO_DYNAMIC_UPDATE_SLICE || d->ops[0]->op != HLO_PARAMETER || d->ops[0]->param_no >= r->nops)
            continue;
        if (!hlo_shape_is_array(&r->shape.tuple[e])) continue;
        const hlo_instr *opnd = r->ops[d->ops[0]->param_no];
        int src = cmp_leaves(C, opnd)[0];
        if (C->users_n[cmp_gid(C, opnd)] != 1 || lv[e] < 0) continue;
        if (src < 0 && !is_entry && cmp_from_param(opnd)) p->values[lv[e]].kind = CMP_V_CALLER;
        else if (src >= 0 && p->values[cmp_owner(p, src)].kind == CMP_V_TEMP) p->values[lv[e]].alias = cmp_owner(p, src);
    }
}

/* 4. Values of an op that computes (op k): in place over an operand where XLA shares the buffer, else new
 * temporaries (stored as bf16 where every reader rounds to bf16 anyway). */
static tpu_status cmp_values_op(cmp_state *C, const hlo_comp *c, const cmp_fusion *F, const cmp_op *op, int k,
                                int is_entry)
{
    const hlo_instr *r = op->root;
    int placed = cmp_async_values(C, r);
    if (!placed) placed = cmp_fusion_in_place(C, r, is_entry);
    if (!placed) placed = cmp_scatter_in_place(C, r);
    if (!placed) placed = cmp_dus_in_place(C, c, F, op, k, is_entry);
    if (placed < 0) return ut_nomem(C->ctx);
    if (placed) return TPU_OK;
    if (!cmp_define_all(C, r, CMP_V_TEMP)) return ut_nomem(C->ctx);
    if (!C->compiled && hlo_shape_is_array(&r->shape) && r->shape.dtype == TPU_F32 && cmp_bf16_enough(C, r, F, 0)) {
        cmp_value *v = &C->p->values[cmp_leaves(C, r)[0]];
        v->shape.dtype = TPU_BF16;
        v->unpadded = cmp_unpadded_bytes(&v->shape);
        v->padded = cmp_padded_bytes(C->chip, &v->shape);
    }
    cmp_multi_output_in_place(C, r, is_entry);
    return TPU_OK;
}

/* 4. The values each op defines, in schedule order. */
static tpu_status cmp_plan_values(cmp_state *C, const hlo_comp *c, const cmp_fusion *F, cmp_plan *plan, int is_entry)
{
    for (int k = 0; k < plan->nops; k++) {
        const cmp_op *op = &plan->ops[k];
        const hlo_instr *r = op->root;
        tpu_status st = TPU_OK;
        if (op->kind == CMP_NOOP) {
            st = cmp_values_noop(C, op, is_entry);
        } else if (op->kind == CMP_CONTROL && r->op == HLO_WHILE) {
            cmp_alias_leaves(C, r, r->ops[0], 0);   /* the loop state is updated in place */
            if (!C->compiled && !cmp_while_copies(C, r, k, F->group, F->pos_of_group, F->dup)) st = ut_nomem(C->ctx);
        } else if (op->kind == CMP_CONTROL) {
            if (!cmp_define_all(C, r, CMP_V_TEMP)) st = ut_nomem(C->ctx);
        } else {
            st = cmp_values_op(C, c, F, op, k, is_entry);
        }
        if (st) return st;
    }
    if (is_entry) cmp_apply_io_alias(C);
    return TPU_OK;
}

/* Scratch of cmp_plan_io, sized by the computation. */
typedef struct cmp_io_scratch {
    int               *walked, stamp;   /* per instruction: the last walk that visited it */
    int               *op_of;           /* per instruction: its op, -1 for none */
    int               *seen_v;          /* per value: the last op that read it */
    const hlo_instr  **srcs;            /* the instructions an op reads */
} cmp_io_scratch;

/* The instructions op reads, looking through duplicated producers to what they read, each once:
 * S->srcs[0..return). A walk visits each instruction once (stamps): chains of duplicated producers that
 * share operands would otherwise be walked once per path. */
static int cmp_op_sources(const cmp_fusion *F, const cmp_op *op, cmp_io_scratch *S)
{
    int ns = 0;
    S->stamp++;
    for (int m = 0; m < op->ninstrs; m++) {
        const hlo_instr *stack[256];
        int sp = 0;
        for (int o = 0; o < op->instrs[m]->nops && sp < 256; o++) stack[sp++] = op->instrs[m]->ops[o];
        while (sp > 0) {
            const hlo_instr *src = stack[--sp];
            if (S->walked[src->id] == S->stamp) continue;
            S->walked[src->id] = S->stamp;
            if (F->dup[src->id]) {
                for (int o = 0; o < src->nops && sp < 256; o++) stack[sp++] = src->ops[o];
                continue;
            }
            S->srcs[ns++] = src;
        }
    }
    return ns;
}

/* 5. Op k's inputs and outputs (owners), and the live ranges they extend. */
static tpu_status cmp_op_io(cmp_state *C, const hlo_comp *c, const cmp_fusion *F, cmp_plan *plan, int k,
                            cmp_io_scratch *S)
{
    cmp_program *p = C->p;
    cmp_op *op = &plan->ops[k];
    int ns = cmp_op_sources(F, op, S), cap = 0;
    for (int s = 0; s < ns; s++) cap += C->leaf_count[cmp_gid(C, S->srcs[s])];
    op->in = ut_arena_alloc(&p->arena, (size_t)(cap ? cap : 1) * sizeof(int));
    int nl = C->leaf_count[cmp_gid(C, op->root)];
    op->out = ut_arena_alloc(&p->arena, (size_t)(nl ? nl : 1) * sizeof(int));
    if (!op->in || !op->out) return ut_nomem(C->ctx);
    int nin = 0;
    for (int s = 0; s < ns; s++) {
        const hlo_instr *src = S->srcs[s];
        if (src->parent == c && S->op_of[src->id] == k) continue;   /* inside the op */
        int nsl = C->leaf_count[cmp_gid(C, src)];
        int *sv = cmp_leaves(C, src);
        for (int l = 0; l < nsl; l++) {
            int v = cmp_owner(p, sv[l]);
            if (v < 0) continue;
            if (v < C->nvalues && S->seen_v[v] == k) continue;   /* read already */
            if (nin == cap) break;
            if (v < C->nvalues) S->seen_v[v] = k;
            op->in[nin++] = v;
            if (p->values[v].comp == c->id && k > p->values[v].end) p->values[v].end = k;
        }
    }
    op->nin = nin;
    int *rv = cmp_leaves(C, op->root);
    for (int l = 0; l < nl; l++) {
        int v = cmp_owner(p, rv[l]);
        if (v < 0) continue;
        op->out[op->nout++] = v;
        if (p->values[v].start < 0) p->values[v].start = k;
        if (p->values[v].end < k) p->values[v].end = k;
    }
    return TPU_OK;
}

/* 5. Every op's inputs and outputs and the live ranges. Which op an instruction belongs to, and which values
 * an op already reads, are looked up in tables, so an op of many members or inputs costs no more than its
 * size. */
static tpu_status cmp_plan_io(cmp_state *C, const hlo_comp *c, const cmp_fusion *F, cmp_plan *plan)
{
    int n = F->n;
    cmp_io_scratch S = {0};
    S.walked = ut_calloc((size_t)n + 1, sizeof *S.walked);
    S.op_of = ut_malloc((size_t)(n ? n : 1) * sizeof(int));
    S.seen_v = ut_malloc((size_t)(C->nvalues + 1) * sizeof(int));
    S.srcs = ut_malloc((size_t)(n + 1) * sizeof *S.srcs);
    tpu_status st = TPU_OK;
    if (!S.walked || !S.op_of || !S.seen_v || !S.srcs) st = ut_nomem(C->ctx);
    for (int i = 0; !st && i < n; i++) S.op_of[i] = -1;
    for (int v = 0; !st && v <= C->nvalues; v++) S.seen_v[v] = -1;
    for (int k = 0; !st && k < plan->nops; k++)
        for (int m = 0; m < plan->ops[k].ninstrs; m++) S.op_of[plan->ops[k].instrs[m]->id] = k;
    for (int k = 0; !st && k < plan->nops; k++)
        if (plan->ops[k].kind != CMP_NOOP) st = cmp_op_io(C, c, F, plan, k, &S);
    ut_free(S.walked);
    ut_free(S.op_of);
    ut_free(S.seen_v);
    ut_free(S.srcs);
    return st;
}

/* 5c. In place: an elementwise op writes its result over an operand of the same shape that it reads for the
 * last time (XLA's buffer sharing between an elementwise user and its operand). */
static void cmp_share_elementwise(cmp_state *C, const hlo_comp *c, const cmp_fusion *F, cmp_plan *plan)
{
    cmp_program *p = C->p;
    for (int k = 0; k < plan->nops; k++) {
        cmp_op *op = &plan->ops[k];
        if (op->kind != CMP_LOOP || op->nout != 1) continue;
        cmp_value *o = &p->values[op->out[0]];
        if (o->kind != CMP_V_TEMP || o->start != k || o->comp != c->id) continue;
        for (int q = 0; q < op->nin; q++) {
            cmp_value *val = &p->values[op->in[q]];
            if (val->kind != CMP_V_TEMP || val->comp != c->id || val->end != k || val->start >= k || val->copy_of ||
                val->padded != o->padded || !cmp_same_layout(&val->shape, &o->shape) ||
                !cmp_read_elementwise(op, val->def, F->dup))
                continue;
            val->end = k - 1;
            break;
        }
    }
}

/* Values reaching the computation's result live to the end; entry results are outputs. */
static tpu_status cmp_result_ranges(cmp_state *C, const hlo_comp *c, cmp_plan *plan, int is_entry)
{
    cmp_program *p = C->p;
    int body_of_while = !is_entry && C->is_body[c->id];
    int nl = C->leaf_count[cmp_gid(C, c->root)];
    int *rv = cmp_leaves(C, c->root);
    for (int l = 0; l < nl; l++) {
        int v = cmp_owner(p, rv[l]);
        if (v < 0) continue;
        if (is_entry && C->auto_layout && p->values[v].kind == CMP_V_TEMP) {
            /* a result computed in a convolution's layout is copied into the layout that pads least, which the
             * compiler gives the program's results (measured: conv+relu f32[8,64,64,8] in {3,0,2,1} 16M,
             * copied to an output {2,3,1,0} 2M) */
            int o = cmp_output_copy(C, v);
            if (o < 0) return ut_nomem(C->ctx);
            if (o != v) {
                p->values[o].start = p->values[v].start < 0 ? 0 : p->values[v].start;
                p->values[o].end = plan->nops;
                continue;
            }
        }
        if (p->values[v].comp == c->id) p->values[v].end = plan->nops;
        if (is_entry && p->values[v].kind == CMP_V_TEMP) p->values[v].kind = CMP_V_OUTPUT;
        /* the compiler's copy insertion has made a loop body's results safe to write straight into the loop
         * state (the caller's buffer) */
        if (C->compiled && body_of_while && p->values[v].kind == CMP_V_TEMP && p->values[v].comp == c->id)
            p->values[v].kind = CMP_V_CALLER;
    }
    return TPU_OK;
}

/* The plan's peak of live bytes (padded and unpadded) and where it is, for fragmentation and the viewer. */
static tpu_status cmp_live_peak(cmp_state *C, cmp_plan *plan, const cmp_buf *bufs, int nb)
{
    const cmp_program *p = C->p;
    int np = plan->nops + 1;
    int64_t *live = ut_calloc((size_t)np, sizeof *live), *live_u = ut_calloc((size_t)np, sizeof *live_u);
    if (!live || !live_u) {
        ut_free(live);
        ut_free(live_u);
        return ut_nomem(C->ctx);
    }
    for (int i = 0; i < nb; i++) {
        int64_t un = bufs[i].v >= 0 ? p->values[bufs[i].v].unpadded : bufs[i].size;
        for (int q = bufs[i].start; q <= bufs[i].end && q < np; q++) {
            live[q] += bufs[i].size;
            live_u[q] += un;
        }
    }
    for (int q = 0; q < np; q++)
        if (live[q] > plan->peak_live) {
            plan->peak_live = live[q];
            plan->peak_live_unpadded = live_u[q];
            plan->peak_pos = q;
        }
    ut_free(live);
    ut_free(live_u);
    return TPU_OK;
}

/* A sort whose result libtpu makes a tuple (several operands, or a stable sort, which it gives an iota of
 * indices): it takes a tuple table (cmp_tuple_tables). */
static int cmp_op_sorts(const cmp_op *op)
{
    for (int m = 0; m < op->ninstrs; m++) {
        const hlo_instr *in = op->instrs[m];
        if (in->op == HLO_SORT && (in->nops > 1 || hlo_attr_bool(in, HK_IS_STABLE, 0))) return 1;
    }
    return 0;
}

/* 6. Heap: this plan's temps and outputs (values from first_value on), plus the sub-plans' peaks while
 * control ops run. */
static tpu_status cmp_plan_heap(cmp_state *C, const hlo_comp *c, cmp_plan *plan, int first_value)
{
    cmp_program *p = C->p;
    int nb = 0;
    for (int v = first_value; v < C->nvalues; v++) {
        cmp_value *val = &p->values[v];
        if (val->alias >= 0 || val->comp != c->id) continue;
        if (val->kind == CMP_V_TEMP || val->kind == CMP_V_OUTPUT) nb++;
    }
    int msa = !C->compiled && C->chip->vmem_temp_bytes > 0, ntab = 0;
    for (int k = 0; k < plan->nops; k++)
        if (plan->ops[k].kind == CMP_CONTROL && plan->ops[k].sub_peak > 0) nb++;
    cmp_buf *bufs = ut_calloc((size_t)nb + 1, sizeof *bufs);   /* and the tables' block */
    if (!bufs) return ut_nomem(C->ctx);
    int b = 0;
    for (int v = first_value; v < C->nvalues; v++) {
        cmp_value *val = &p->values[v];
        if (val->alias >= 0 || val->comp != c->id) continue;
        if (val->kind != CMP_V_TEMP && val->kind != CMP_V_OUTPUT) continue;
        if (val->start < 0) val->start = val->end < 0 ? 0 : val->end;   /* defined but never placed: keep a slot */
        if (val->end < val->start) val->end = val->start;
        bufs[b++] = (cmp_buf){v, val->padded, val->start, val->end, 0};
    }
    for (int k = 0; k < plan->nops; k++)
        if (plan->ops[k].kind == CMP_CONTROL && plan->ops[k].sub_peak > 0)
            bufs[b++] = (cmp_buf){-1, plan->ops[k].sub_peak, k, k, 0};
    tpu_status st = TPU_OK;
    if (msa) st = cmp_vmem_assign(C, plan, bufs, &nb, &ntab);
    for (int k = 0; k < plan->nops && msa; k++) ntab += cmp_op_sorts(&plan->ops[k]);
    if (ntab > 0) bufs[nb++] = cmp_tuple_tables(C, plan, ntab);
    if (!st) st = cmp_assign_heap(C, plan, bufs, nb);
    if (!st) st = cmp_live_peak(C, plan, bufs, nb);
    ut_free(bufs);
    return st;
}

/* The plan of computation c, made once: fusion, schedule, sub-plans, values, live ranges, heap. */
static tpu_status cmp_plan_comp(cmp_state *C, const hlo_comp *c, cmp_plan **out)
{
    cmp_program *p = C->p;
    if (C->plan_done[c->id] == 2) {
        *out = p->plans[c->id];
        return TPU_OK;
    }
    if (C->plan_done[c->id] == 1) return ut_err(C->ctx, TPU_ERR_SHAPE, "computation '%s' calls itself", c->name);
    C->plan_done[c->id] = 1;
    int is_entry = c == p->m->entry;
    cmp_fusion F;
    cmp_plan *plan = NULL;
    tpu_status st = cmp_fusion_init(C, &F, c->ninstrs);
    if (!st) st = cmp_fuse(C, c, &F);                        /* 1. fusion */
    if (!st) st = cmp_plan_ops(C, c, &F, &plan);             /* 2. schedule */
    /* 3. sub-plans first (their peaks are needed for this plan's heap) */
    for (int k = 0; !st && k < plan->nops; k++)
        if (plan->ops[k].kind == CMP_CONTROL) st = cmp_control_subs(C, plan->ops[k].root, &plan->ops[k]);
    int first_value = C->nvalues;
    if (!st) st = cmp_plan_values(C, c, &F, plan, is_entry); /* 4. values */
    if (!st) st = cmp_plan_io(C, c, &F, plan);               /* 5. op inputs/outputs and live ranges */
    if (!st) cmp_share_elementwise(C, c, &F, plan);
    /* 5b. an entry parameter read by a convolution keeps its own layout: the compiler copies it once into
     * the convolution's layout (bf16 when the MXU rounds it anyway), a temporary live across its readers */
    if (!st && is_entry && C->auto_layout) st = cmp_conv_operand_copies(C, plan, F.dup);
    if (!st && C->auto_layout) st = cmp_topk_copies(C, plan);
    if (!st) st = cmp_result_ranges(C, c, plan, is_entry);
    if (!st) st = cmp_plan_heap(C, c, plan, first_value);    /* 6. heap */
    cmp_fusion_free(&F);
    if (st) return st;
    p->plans[c->id] = plan;
    p->ops_total += plan->nops;
    C->plan_done[c->id] = 2;
    *out = plan;
    return TPU_OK;
}

/* input_output_alias: entry outputs that reuse a donated argument's buffer. */
static void cmp_apply_io_alias(cmp_state *C)
{
    cmp_program *p = C->p;
    const hlo_attr *a = hlo_module_attr(p->m, HK_INPUT_OUTPUT_ALIAS);
    if (!a || a->kind != HA_ALIAS) return;
    const hlo_comp *e = p->m->entry;
    int *rv = cmp_leaves(C, e->root);
    int nrl = C->leaf_count[cmp_gid(C, e->root)];
    for (int i = 0; i < a->v.alias.n; i++) {
        const hlo_alias_entry *en = &a->v.alias.v[i];
        if (en->param < 0 || en->param >= e->nparams) continue;
        /* output leaf from the index path (one level deep covers tuple results) */
        int ol = en->nout ? cmp_leaf_offset(&e->root->shape, en->out[0]) : 0;
        const hlo_instr *pin = e->params[en->param];
        int pl = en->nparam_idx ? cmp_leaf_offset(&pin->shape, en->param_idx[0]) : 0;
        if (ol >= nrl || pl >= C->leaf_count[cmp_gid(C, pin)]) continue;
        int ov = cmp_owner(p, rv[ol]), pv = cmp_leaves(C, pin)[pl];
        if (ov < 0 || pv < 0 || ov == pv) continue;
        p->values[pv].donated = 1;
        /* the output is written into the donated argument's buffer: it takes no program memory */
        if (p->values[ov].kind == CMP_V_TEMP && p->values[ov].padded <= p->values[pv].padded) p->values[ov].alias = pv;
    }
}

/* XLA gives every scalar of a computation called by an op that is not fused (sort's comparator, the reducer
 * of a reduce-window, scatter or select-and-scatter) a thread-local allocation of the smallest size, 1 KiB on
 * v2-v4 and 512 B later (libtpu's buffer assignments: 37 of them, 47 KiB, in rank1_degenerate). */
static int64_t cmp_thread_local_bytes(const hlo_module *m, const chp_chip *chip)
{
    int64_t n = 0;
    for (int ci = 0; ci < m->ncomps; ci++) {
        const hlo_comp *c = m->comps[ci];
        for (int i = 0; i < c->ninstrs; i++) {
            const hlo_instr *in = c->instrs[i];
            if (in->op != HLO_SORT && in->op != HLO_REDUCE_WINDOW && in->op != HLO_SCATTER &&
                in->op != HLO_SELECT_AND_SCATTER)
                continue;
            for (int k = 0; k < in->ncalled; k++) n += in->called[k]->ninstrs;
        }
    }
    return n * (chip && chip->generation >= 5 ? 512 : 1024);
}

tpu_status cmp_compile(tpu_ctx *ctx, const hlo_module *m, const chp_chip *chip, const cmp_opts *opts, cmp_program **out)
{
    (void)opts;
    *out = NULL;
    cmp_program *p = ut_calloc(1, sizeof *p);
    if (!p) return ut_nomem(ctx);
    ut_arena_init(&p->arena);
    p->m = m;
    p->chip = chip;
    cmp_state C;
    memset(&C, 0, sizeof C);
    C.ctx = ctx;
    C.p = p;
    C.chip = chip;
    tpu_status st = cmp_check_sizes(ctx, m, chip);
    if (st) goto done;
    C.comp_base = ut_calloc((size_t)m->ncomps + 1, sizeof *C.comp_base);
    p->plans = ut_calloc((size_t)m->ncomps, sizeof *p->plans);
    C.plan_done = ut_calloc((size_t)m->ncomps, 1);
    if (!C.comp_base || !p->plans || !C.plan_done) {
        st = ut_nomem(ctx);
        goto done;
    }
    p->nplans = m->ncomps;
    for (int i = 0; i < m->ncomps; i++) C.comp_base[i + 1] = C.comp_base[i] + m->comps[i]->ninstrs;
    C.ninstr_total = C.comp_base[m->ncomps];
    C.leaf_count = ut_calloc((size_t)C.ninstr_total + 1, sizeof(int));
    C.leaf_first = ut_calloc((size_t)C.ninstr_total + 1, sizeof(int));
    C.users_n = ut_calloc((size_t)C.ninstr_total + 1, sizeof(int));
    C.users = ut_calloc((size_t)C.ninstr_total + 1, sizeof(int *));
    if (!C.leaf_count || !C.leaf_first || !C.users_n || !C.users) {
        st = ut_nomem(ctx);
        goto done;
    }
    for (int ci = 0; ci < m->ncomps; ci++) {
        const hlo_comp *c = m->comps[ci];
        for (int i = 0; i < c->ninstrs; i++) {
            int g = C.comp_base[ci] + i;
            C.leaf_count[g] = cmp_count_leaves(&c->instrs[i]->shape);
            C.leaf_first[g] = C.nleaf_total;
            C.nleaf_total += C.leaf_count[g];
            for (int o = 0; o < c->instrs[i]->nops; o++) C.users_n[C.comp_base[ci] + c->instrs[i]->ops[o]->id]++;
        }
    }
    C.leaf_val = ut_malloc((size_t)(C.nleaf_total ? C.nleaf_total : 1) * sizeof(int));
    if (!C.leaf_val) {
        st = ut_nomem(ctx);
        goto done;
    }
    for (int i = 0; i < C.nleaf_total; i++) C.leaf_val[i] = -1;
    /* user lists (an instruction using an operand twice counts twice: fine for "all users in one op") */
    {
        int *fill = ut_calloc((size_t)C.ninstr_total + 1, sizeof(int));
        if (!fill) {
            st = ut_nomem(ctx);
            goto done;
        }
        for (int g = 0; g < C.ninstr_total && !st; g++) {
            C.users[g] = ut_malloc((size_t)(C.users_n[g] ? C.users_n[g] : 1) * sizeof(int));
            if (!C.users[g]) st = ut_nomem(ctx);
        }
        for (int ci = 0; ci < m->ncomps && !st; ci++) {
            const hlo_comp *c = m->comps[ci];
            for (int i = 0; i < c->ninstrs; i++)
                for (int o = 0; o < c->instrs[i]->nops; o++) {
                    int g = C.comp_base[ci] + c->instrs[i]->ops[o]->id;
                    C.users[g][fill[g]++] = C.comp_base[ci] + i;
                }
        }
        ut_free(fill);
        if (st) goto done;
    }
    /* which computations are while bodies (a plan asks for its own computation: one pass, not one per plan) */
    if (!(C.is_body = ut_calloc((size_t)m->ncomps + 1, 1))) {
        st = ut_nomem(ctx);
        goto done;
    }
    for (int ci = 0; ci < m->ncomps; ci++)
        for (int i = 0; i < m->comps[ci]->ninstrs; i++) {
            const hlo_instr *w = m->comps[ci]->instrs[i];
            const hlo_attr *ba = w->op == HLO_WHILE ? hlo_attr_find(w, HK_BODY) : NULL;
            if (ba && ba->v.comps.n > 0 && ba->v.comps.v[0]) C.is_body[ba->v.comps.v[0]->id] = 1;
        }
    st = cmp_assign_layouts(&C);
    if (st) goto done;
    st = cmp_plan_comp(&C, m->entry, &p->entry);
    if (st) goto done;
    p->nvalues = C.nvalues;
    /* totals */
    for (int v = 0; v < p->nvalues; v++) {
        cmp_value *val = &p->values[v];
        if (val->alias >= 0) continue;
        if (val->kind == CMP_V_ARG) {
            p->args_padded += val->padded;
            p->args_unpadded += val->unpadded;
        } else if (val->kind == CMP_V_OUTPUT) {
            p->outputs_padded += val->padded;
            p->outputs_unpadded += val->unpadded;
        } else if (val->kind == CMP_V_CONST) {
            p->consts_padded += val->padded;
        }
    }
    p->temp_peak = p->entry->peak;
    p->thread_local = cmp_thread_local_bytes(m, chip);
    for (int ci = 0; ci < m->ncomps; ci++)
        if (p->plans[ci])
            for (int k = 0; k < p->plans[ci]->nops; k++) p->fused_instrs += p->plans[ci]->ops[k].ninstrs;
done:
    if (C.users)
        for (int g = 0; g < C.ninstr_total; g++) ut_free(C.users[g]);
    ut_free(C.users);
    ut_free(C.users_n);
    ut_free(C.leaf_count);
    ut_free(C.leaf_first);
    ut_free(C.leaf_val);
    ut_free(C.plan_done);
    ut_free(C.is_body);
    p->comp_base = C.comp_base;   /* kept: the timing model asks for assigned layouts */
    p->lay = C.lay;
    if (st) {
        cmp_program_free(p);
        return st;
    }
    *out = p;
    return TPU_OK;
}

void cmp_program_free(cmp_program *p)
{
    if (!p) return;
    ut_free(p->values);
    ut_free(p->comp_base);
    ut_free(p->lay);
    ut_free(p->plans);
    ut_arena_free(&p->arena);
    ut_free(p);
}
