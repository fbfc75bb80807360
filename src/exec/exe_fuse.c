/* exe_fuse.c — fused elementwise loops: a chain of elementwise ops of one shape (with broadcasts and scalars
 * feeding it) runs as one pass over its output, block by block, with every intermediate held in a small
 * per-thread scratch block instead of a full array. Values are computed with the same block operations as
 * the unfused kernels (kernels/ew_block.h) or, for the rest, with the reference per-element semantics, so a
 * fused chain gives bit-for-bit the unfused results. TPUSIM_NO_FUSION=1 turns fusion off (for A/B checks).
 *
 * Members hold f32, bf16 (as f32 values), pred or s32; other types stay unfused. */
#include "exec.h"
#include "exe_fuse.h"
#include "exe_ops.h"
#include "kernels/ew_block.h"
#include "exe_par.h"

#include <stdatomic.h>

#include <stdlib.h>
#include <string.h>

#define FU_BLOCK 1024
#define FU_MAX_MEMBERS 256   /* a group holds a scratch block per member: a 100000-long chain is split, not one group */
#define PAR_T    64   /* threads a fused loop splits for at most */

enum { FU_F = 0, FU_P = 1, FU_I = 2 };   /* scratch classes: float, uint8 (pred), int32 */

static int fu_class(tpu_dtype t)
{
    switch (t) {
    case TPU_F32: case TPU_BF16: return FU_F;
    case TPU_PRED: return FU_P;
    case TPU_S32: return FU_I;
    default: return -1;
    }
}

static int fu_enabled = -1;

int exe_fusion_enabled(void)
{
    if (fu_enabled < 0) {
        const char *e = getenv("TPUSIM_NO_FUSION");
        fu_enabled = !(e && *e && strcmp(e, "0"));
    }
    return fu_enabled;
}

void exe_fusion_set(int on) { fu_enabled = on != 0; }

static int fu_same_dims(const hlo_shape *a, const hlo_shape *b)
{
    if (a->rank != b->rank) return 0;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i]) return 0;
    return 1;
}

/* An elementwise op that may be a member: array result of a supported type, operands of supported types. */
static int fu_elementwise(const hlo_instr *in)
{
    hlo_class c = hlo_op_class((hlo_op)in->op);
    if (!(c == HLO_CLASS_EW1 || c == HLO_CLASS_EW2 || c == HLO_CLASS_EW3 || c == HLO_CLASS_CMP)) return 0;
    if (in->op == HLO_REDUCE_PRECISION || in->op == HLO_STOCHASTIC_CONVERT || in->op == HLO_COMPLEX || in->op == HLO_REAL ||
        in->op == HLO_IMAG)
        return 0;
    if (!hlo_shape_is_array(&in->shape) || fu_class((tpu_dtype)in->shape.dtype) < 0 || in->shape.dyn_mask) return 0;
    for (int k = 0; k < in->nops; k++)
        if (!hlo_shape_is_array(&in->ops[k]->shape) || fu_class((tpu_dtype)in->ops[k]->shape.dtype) < 0) return 0;
    return 1;
}

void exe_fuse_free(exe_fgroup *g, int n)
{
    for (int i = 0; i < n; i++) {
        ut_free(g[i].members);
        ut_free(g[i].inputs);
    }
    ut_free(g);
}

/* Linear in the computation's size: users come from one CSR list, groups are bucketed once (a 100000-long
 * chain of adds plans in milliseconds). */
tpu_status exe_fuse_plan(tpu_ctx *ctx, const hlo_comp *c, const uint8_t *live, int *group_of, exe_fgroup **out, int *nout)
{
    int n = c->ninstrs;
    *out = NULL;
    *nout = 0;
    for (int i = 0; i < n; i++) group_of[i] = -1;
    if (!exe_fusion_enabled()) return TPU_OK;
    int64_t nedges = 0;
    for (int i = 0; i < n; i++) nedges += c->instrs[i]->nops;
    /* user lists (CSR: users of i are user_list[ustart[i] .. ustart[i+1])), per-group counts, scratch */
    int *ustart = ut_calloc((size_t)n + 1, sizeof(int)), *user_list = ut_malloc((size_t)(nedges ? nedges : 1) * sizeof(int));
    int *root_of = ut_malloc((size_t)n * sizeof(int)), *final = ut_malloc((size_t)n * sizeof(int));
    int *gcount = ut_calloc((size_t)n + 1, sizeof(int)), *gstart = ut_calloc((size_t)n + 2, sizeof(int));
    int *order = ut_malloc((size_t)(n ? n : 1) * sizeof(int)), *slot = ut_malloc((size_t)(n ? n : 1) * sizeof(int));
    int *inslot = ut_malloc((size_t)(n ? n : 1) * sizeof(int)), *gsize = ut_calloc((size_t)n + 1, sizeof(int));
    exe_fgroup *groups = NULL;
    int nf = 0, ng = 0;
    tpu_status st = TPU_OK;
    if (!ustart || !user_list || !root_of || !final || !gcount || !gstart || !order || !slot || !inslot || !gsize) {
        st = ut_nomem(ctx);
        goto done;
    }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < c->instrs[i]->nops; k++) ustart[c->instrs[i]->ops[k]->id + 1]++;
    for (int i = 0; i < n; i++) ustart[i + 1] += ustart[i];
    for (int i = 0; i < n; i++) slot[i] = ustart[i];
    for (int i = 0; i < n; i++)
        for (int k = 0; k < c->instrs[i]->nops; k++) user_list[slot[c->instrs[i]->ops[k]->id]++] = i;
    /* consumers first: a member joins the group all its users are in */
    for (int i = n - 1; i >= 0; i--) {
        const hlo_instr *in = c->instrs[i];
        if (!live[i]) continue;
        int is_ew = fu_elementwise(in);
        int is_bc = in->op == HLO_BROADCAST && hlo_shape_is_array(&in->shape) && fu_class((tpu_dtype)in->shape.dtype) >= 0;
        if (!is_ew && !is_bc) continue;
        int g = -1, ok = in != c->root && ustart[i + 1] > ustart[i];
        for (int u = ustart[i]; ok && u < ustart[i + 1]; u++) {
            int gj = group_of[user_list[u]];
            if (gj < 0 || (g >= 0 && gj != g)) ok = 0;
            g = gj;
        }
        if (g < 0) ok = 0;
        /* members share the root's dims (broadcasts produce them from their smaller operand) */
        if (ok && !fu_same_dims(&in->shape, &c->instrs[root_of[g]]->shape)) ok = 0;
        if (ok && gsize[g] >= FU_MAX_MEMBERS) ok = 0;
        if (ok) {
            group_of[i] = g;
            gsize[g]++;
        } else if (is_ew) {
            g = ng++;
            root_of[g] = i;
            group_of[i] = g;
            gsize[g] = 1;
        }
    }
    /* keep groups with at least two compute members; dissolve the rest
     * (a single op with broadcast operands fuses too: the broadcasts are then never materialised) */
    int *compute = gcount, *bcast = gstart;   /* reused as counters, reset below */
    for (int i = 0; i < n; i++)
        if (group_of[i] >= 0) {
            if (c->instrs[i]->op != HLO_BROADCAST) compute[group_of[i]]++;
            else bcast[group_of[i]]++;
        }
    for (int g = 0; g < ng; g++) final[g] = compute[g] >= 2 || (compute[g] == 1 && bcast[g] >= 1) ? nf++ : -1;
    memset(gcount, 0, ((size_t)n + 1) * sizeof(int));
    memset(gstart, 0, ((size_t)n + 2) * sizeof(int));
    for (int i = 0; i < n; i++) {
        if (group_of[i] >= 0) group_of[i] = final[group_of[i]];
        if (group_of[i] >= 0) gcount[group_of[i]]++;
    }
    /* members of each group in topological order (a stable bucket sort) */
    for (int g = 0; g < nf; g++) gstart[g + 1] = gstart[g] + gcount[g];
    memset(gcount, 0, ((size_t)n + 1) * sizeof(int));
    for (int i = 0; i < n; i++)
        if (group_of[i] >= 0) order[gstart[group_of[i]] + gcount[group_of[i]]++] = i;
    groups = nf ? ut_calloc((size_t)nf, sizeof *groups) : NULL;
    if (nf && !groups) st = ut_nomem(ctx);
    for (int i = 0; i < n; i++) slot[i] = inslot[i] = -1;
    for (int g = 0; !st && g < nf; g++) {
        exe_fgroup *G = &groups[g];
        int cnt = gstart[g + 1] - gstart[g];
        G->members = ut_calloc((size_t)cnt, sizeof *G->members);
        G->inputs = ut_calloc((size_t)cnt * 3 + 1, sizeof *G->inputs);
        if (!G->members || !G->inputs) {
            st = ut_nomem(ctx);
            break;
        }
        /* operands resolved to member slots or input slots (slot/inslot are reset after the group) */
        for (int q = gstart[g]; q < gstart[g + 1]; q++) {
            const hlo_instr *in = c->instrs[order[q]];
            exe_fmember *m = &G->members[G->nmembers];
            m->in = in;
            for (int k = 0; k < in->nops && k < 3; k++) {
                const hlo_instr *o = in->ops[k];
                if (slot[o->id] >= 0) {
                    m->op[k] = slot[o->id];
                } else {
                    if (inslot[o->id] < 0) {
                        inslot[o->id] = G->ninputs;
                        G->inputs[G->ninputs++] = o;
                    }
                    m->op[k] = -1 - inslot[o->id];
                }
            }
            slot[in->id] = G->nmembers++;
            G->root = in;   /* the last member in topological order is the root */
        }
        for (int q = gstart[g]; q < gstart[g + 1]; q++) slot[order[q]] = -1;
        for (int q = 0; q < G->ninputs; q++) inslot[G->inputs[q]->id] = -1;
    }
done:
    ut_free(ustart);
    ut_free(user_list);
    ut_free(root_of);
    ut_free(final);
    ut_free(gcount);
    ut_free(gstart);
    ut_free(order);
    ut_free(slot);
    ut_free(inslot);
    ut_free(gsize);
    if (st) {
        exe_fuse_free(groups, nf);
        return st;
    }
    *out = groups;
    *nout = nf;
    return TPU_OK;
}

/* ---- running a group ---- */

typedef struct fu_buf {
    int   cls;
    void *p;          /* points into scratch, or straight into an f32 input tensor */
} fu_buf;

/* Reads elements [o, o+len) of an external input (identity or scalar mapping) into a block. */
EXE_VEC
static void fu_load(const tpu_tensor *t, int64_t o, int len, int cls, void *scratch, fu_buf *b, int64_t n_out)
{
    int scalar = t->count == 1 && n_out != 1;
    b->cls = cls;
    if (cls == FU_F && t->dtype == TPU_F32 && !scalar) {
        b->p = (float *)t->data + o;
        return;
    }
    b->p = scratch;
    int64_t k0 = scalar ? 0 : o;
    switch (cls) {
    case FU_F:
        if (t->dtype == TPU_BF16) {
            const uint16_t *x = (const uint16_t *)t->data + k0;
            if (scalar) {
                float v = fp_bf16_to_f32_inline(x[0]);
                for (int i = 0; i < len; i++) ((float *)scratch)[i] = v;
            } else {
                for (int i = 0; i < len; i++) ((float *)scratch)[i] = fp_bf16_to_f32_inline(x[i]);
            }
        } else {
            float v = ((const float *)t->data)[0];
            for (int i = 0; i < len; i++) ((float *)scratch)[i] = v;
        }
        break;
    case FU_P:
        if (scalar) memset(scratch, ((const uint8_t *)t->data)[0], (size_t)len);
        else memcpy(scratch, (const uint8_t *)t->data + k0, (size_t)len);
        break;
    default:
        if (scalar) {
            int32_t v = ((const int32_t *)t->data)[0];
            for (int i = 0; i < len; i++) ((int32_t *)scratch)[i] = v;
        } else {
            memcpy(scratch, (const int32_t *)t->data + k0, (size_t)len * sizeof(int32_t));
        }
        break;
    }
}

/* dst[0..n) <- src elements at off + j*st (st 0: one value repeated), converted to the block's class */
EXE_VEC
static void fu_run(void *dst, int cls, const tpu_tensor *src, int64_t off, int64_t st, int64_t n)
{
    switch (cls) {
    case FU_F:
        if (src->dtype == TPU_BF16) {
            const uint16_t *x = (const uint16_t *)src->data + off;
            if (st == 0) {
                float v = fp_bf16_to_f32_inline(x[0]);
                for (int64_t j = 0; j < n; j++) ((float *)dst)[j] = v;
            } else {
                for (int64_t j = 0; j < n; j++) ((float *)dst)[j] = fp_bf16_to_f32_inline(x[j * st]);
            }
        } else {
            const float *x = (const float *)src->data + off;
            if (st == 0) {
                float v = x[0];
                for (int64_t j = 0; j < n; j++) ((float *)dst)[j] = v;
            } else if (st == 1) {
                memcpy(dst, x, (size_t)n * sizeof(float));
            } else {
                for (int64_t j = 0; j < n; j++) ((float *)dst)[j] = x[j * st];
            }
        }
        break;
    case FU_P: {
        const uint8_t *x = (const uint8_t *)src->data + off;
        if (st == 0) memset(dst, x[0], (size_t)n);
        else for (int64_t j = 0; j < n; j++) ((uint8_t *)dst)[j] = x[j * st];
        break;
    }
    default: {
        const int32_t *x = (const int32_t *)src->data + off;
        for (int64_t j = 0; j < n; j++) ((int32_t *)dst)[j] = x[j * st];
        break;
    }
    }
}

/* Broadcast member: gathers its operand's elements for output elements [o, o+len), a run along the
 * innermost output dim at a time (a copy, a fill or a strided gather). */
static void fu_broadcast(const hlo_instr *in, const tpu_tensor *src, int64_t o, int len, int cls, void *dst)
{
    const hlo_shape *s = &in->shape;
    size_t es = cls == FU_P ? 1 : 4;
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

static exe_scalar fu_get(const fu_buf *b, tpu_dtype t, int i)
{
    exe_scalar v = {0, 0, 0};
    if (b->cls == FU_F) v = exe_scalar_load(TPU_F32, b->p, i);   /* DAZ like the unfused reference */
    else if (b->cls == FU_P) v.i = ((const uint8_t *)b->p)[i];
    else v.i = ((const int32_t *)b->p)[i];
    (void)t;
    return v;
}

static void fu_put(fu_buf *b, int i, exe_scalar v)
{
    if (b->cls == FU_F) ((float *)b->p)[i] = (float)v.f;
    else if (b->cls == FU_P) ((uint8_t *)b->p)[i] = (uint8_t)(v.i != 0);
    else ((int32_t *)b->p)[i] = (int32_t)v.i;
}

/* Computes member m for one block. */
EXE_VEC
static void fu_member(const exe_state *S, const exe_fmember *m, fu_buf *out, fu_buf *const *in, int len)
{
    const hlo_instr *I = m->in;
    hlo_op op = (hlo_op)I->op;
    tpu_dtype t = (tpu_dtype)I->shape.dtype;
    tpu_dtype t0 = I->nops ? (tpu_dtype)I->ops[0]->shape.dtype : t;
    hlo_class c = hlo_op_class(op);
    if (op == HLO_COMPARE) {
        const char *dir = hlo_attr_str(I, HK_DIRECTION), *type = hlo_attr_str(I, HK_TYPE);
        int total = type && !strcmp(type, "TOTALORDER");
        if (in[0]->cls == FU_F && !total && t0 == TPU_F32) {
            ewb_compare_f32(ewb_direction(dir), in[0]->p, in[1]->p, out->p, len);
            return;
        }
        if (in[0]->cls == FU_I && t0 == TPU_S32 && (!type || !strcmp(type, "SIGNED")) && ewb_direction(dir) >= 0) {
            const int32_t *x = in[0]->p, *y = in[1]->p;
            uint8_t *z = out->p;
            switch (ewb_direction(dir)) {
            case 0: for (int i = 0; i < len; i++) z[i] = x[i] == y[i]; break;
            case 1: for (int i = 0; i < len; i++) z[i] = x[i] != y[i]; break;
            case 2: for (int i = 0; i < len; i++) z[i] = x[i] < y[i]; break;
            case 3: for (int i = 0; i < len; i++) z[i] = x[i] <= y[i]; break;
            case 4: for (int i = 0; i < len; i++) z[i] = x[i] > y[i]; break;
            default: for (int i = 0; i < len; i++) z[i] = x[i] >= y[i]; break;
            }
            return;
        }
        for (int i = 0; i < len; i++) {
            int r;
            if (total && in[0]->cls == FU_F) {
                int64_t x = exe_total_order_key(TPU_F32, in[0]->p, i), y = exe_total_order_key(TPU_F32, in[1]->p, i);
                int d = ewb_direction(dir);
                r = d == 0 ? x == y : d == 1 ? x != y : d == 2 ? x < y : d == 3 ? x <= y : d == 4 ? x > y : x >= y;
            } else {
                r = exe_scalar_compare(t0, fu_get(in[0], t0, i), fu_get(in[1], t0, i), dir, type);
            }
            ((uint8_t *)out->p)[i] = (uint8_t)r;
        }
        return;
    }
    if (op == HLO_SELECT) {
        const uint8_t *p = in[0]->p;
        const int sc = 0;   /* scalar operands arrive replicated over the block */
        if (out->cls == FU_F) {
            const float *x = in[1]->p, *y = in[2]->p;
            float *z = out->p;
            for (int i = 0; i < len; i++) z[i] = p[sc ? 0 : i] ? x[i] : y[i];
        } else if (out->cls == FU_I) {
            const int32_t *x = in[1]->p, *y = in[2]->p;
            int32_t *z = out->p;
            for (int i = 0; i < len; i++) z[i] = p[i] ? x[i] : y[i];
        } else {
            const uint8_t *x = in[1]->p, *y = in[2]->p;
            uint8_t *z = out->p;
            for (int i = 0; i < len; i++) z[i] = p[i] ? x[i] : y[i];
        }
        (void)sc;
        return;
    }
    /* pred logic and s32 arithmetic (wrapping, as the 64-bit reference wrapped to 32 bits) */
    if (out->cls == FU_P && t == TPU_PRED && (op == HLO_AND || op == HLO_OR || op == HLO_XOR || op == HLO_NOT)) {
        const uint8_t *x = in[0]->p, *y = op == HLO_NOT ? NULL : in[1]->p;
        uint8_t *z = out->p;
        switch (op) {
        case HLO_AND: for (int i = 0; i < len; i++) z[i] = (uint8_t)(x[i] & y[i]); break;
        case HLO_OR: for (int i = 0; i < len; i++) z[i] = (uint8_t)(x[i] | y[i]); break;
        case HLO_XOR: for (int i = 0; i < len; i++) z[i] = (uint8_t)(x[i] ^ y[i]); break;
        default: for (int i = 0; i < len; i++) z[i] = (uint8_t)!x[i]; break;
        }
        return;
    }
    if (out->cls == FU_I && t == TPU_S32 && t0 == TPU_S32 && c == HLO_CLASS_EW2 &&
        (op == HLO_ADD || op == HLO_SUBTRACT || op == HLO_MULTIPLY || op == HLO_AND || op == HLO_OR || op == HLO_XOR ||
         op == HLO_MAXIMUM || op == HLO_MINIMUM)) {
        const uint32_t *x = in[0]->p, *y = in[1]->p;
        uint32_t *z = out->p;
        switch (op) {
        case HLO_ADD: for (int i = 0; i < len; i++) z[i] = x[i] + y[i]; break;
        case HLO_SUBTRACT: for (int i = 0; i < len; i++) z[i] = x[i] - y[i]; break;
        case HLO_MULTIPLY: for (int i = 0; i < len; i++) z[i] = x[i] * y[i]; break;
        case HLO_AND: for (int i = 0; i < len; i++) z[i] = x[i] & y[i]; break;
        case HLO_OR: for (int i = 0; i < len; i++) z[i] = x[i] | y[i]; break;
        case HLO_XOR: for (int i = 0; i < len; i++) z[i] = x[i] ^ y[i]; break;
        case HLO_MAXIMUM: for (int i = 0; i < len; i++) z[i] = (int32_t)x[i] > (int32_t)y[i] ? x[i] : y[i]; break;
        default: for (int i = 0; i < len; i++) z[i] = (int32_t)x[i] < (int32_t)y[i] ? x[i] : y[i]; break;
        }
        return;
    }
    if (op == HLO_CLAMP && out->cls == FU_F && t == TPU_F32) {
        const float *lo = in[0]->p, *x = in[1]->p, *hi = in[2]->p;
        float *z = out->p;
        for (int i = 0; i < len; i++) z[i] = ewb_minf(ewb_maxf(x[i], lo[i]), hi[i]);
        return;
    }
    if (op == HLO_CONVERT) {
        if (t0 == TPU_F32 && t == TPU_BF16) {
            const float *x = in[0]->p;
            float *z = out->p;
            if (S->numerics == TPU_NUMERICS_TPU)
                for (int i = 0; i < len; i++) z[i] = fp_bf16_to_f32_inline(fp_f32_to_bf16_ftz(x[i]));
            else
                for (int i = 0; i < len; i++) z[i] = fp_bf16_to_f32_inline(fp_f32_to_bf16_inline(x[i]));
            return;
        }
        if ((t0 == TPU_BF16 && t == TPU_F32) || t0 == t) {
            if (out->cls == FU_F) memcpy(out->p, in[0]->p, (size_t)len * sizeof(float));
            else for (int i = 0; i < len; i++) fu_put(out, i, fu_get(in[0], t0, i));
            return;
        }
        if (t0 == TPU_S32 && t == TPU_F32) {
            const int32_t *x = in[0]->p;
            float *z = out->p;
            for (int i = 0; i < len; i++) z[i] = (float)x[i];
            return;
        }
        for (int i = 0; i < len; i++) {
            exe_scalar r = exe_scalar_convert(S, t0, t, fu_get(in[0], t0, i));
            if (out->cls == FU_F) ((float *)out->p)[i] = (float)r.f;
            else fu_put(out, i, r);
        }
        return;
    }
    if (c == HLO_CLASS_EW1 && out->cls == FU_F && t == TPU_F32 && t0 == TPU_F32 && ewb_unary_f32(op, in[0]->p, out->p, len)) return;
    if (c == HLO_CLASS_EW2 && out->cls == FU_F && t0 == TPU_F32 && t == TPU_F32 && ewb_binary_f32(op, in[0]->p, in[1]->p, out->p, len))
        return;
    if (c == HLO_CLASS_EW2 && out->cls == FU_F && t0 == TPU_BF16 && t == TPU_BF16 && ewb_binary_f32(op, in[0]->p, in[1]->p, out->p, 0) &&
        op != HLO_POWER) {
        ewb_binary_f32(op, in[0]->p, in[1]->p, out->p, len);
        ewb_round_bf16(out->p, len);
        return;
    }
    /* reference semantics, element by element */
    for (int i = 0; i < len; i++) {
        exe_scalar r;
        if (c == HLO_CLASS_EW1) {
            r = exe_scalar_unop(S, op, t0, fu_get(in[0], t0, i));
        } else if (op == HLO_CLAMP) {
            exe_scalar mx = exe_scalar_binop(S, HLO_MAXIMUM, t, fu_get(in[1], t, i), fu_get(in[0], t, i));
            r = exe_scalar_binop(S, HLO_MINIMUM, t, mx, fu_get(in[2], t, i));
        } else {
            r = exe_scalar_binop(S, op, t0, fu_get(in[0], t0, i), fu_get(in[1], t0, i));
        }
        if (out->cls == FU_F) ((float *)out->p)[i] = (float)r.f;
        else fu_put(out, i, r);
    }
}

typedef struct fu_job {
    exe_state        *S;
    const exe_fgroup *G;
    exe_value *const *inputs;
    tpu_tensor       *t;
    int64_t           n;
    char            **scratch;   /* per thread: one block per member and per input */
    fu_buf          **mb;
    _Atomic int       failed;
} fu_job;

static void fu_chunk(void *ctx, int64_t b0, int64_t b1, int tid)
{
    fu_job *J = ctx;
    const exe_fgroup *G = J->G;
    exe_value *const *inputs = J->inputs;
    tpu_tensor *t = J->t;
    int nm = G->nmembers, ni = G->ninputs;
    size_t per = FU_BLOCK * sizeof(float);
    if (!J->scratch[tid]) {
        J->scratch[tid] = ut_malloc(per * (size_t)(nm + ni) + 64);
        J->mb[tid] = ut_malloc(sizeof(fu_buf) * (size_t)(nm + ni));
    }
    char *scratch = J->scratch[tid];
    fu_buf *mb = J->mb[tid];
    if (!scratch || !mb) {
        atomic_store(&J->failed, 1);
        return;
    }
    for (int64_t blk = b0; blk < b1; blk++) {
        int64_t o = blk * FU_BLOCK;
        int len = (int)(J->n - o < FU_BLOCK ? J->n - o : FU_BLOCK);
        fu_buf *ib = mb + nm;
        for (int q = 0; q < ni; q++) {
            const tpu_tensor *it = inputs[q]->t;
            int cls = fu_class(it->dtype);
            /* an input that only feeds broadcast members is read by fu_broadcast, not element by element */
            if (it->count != J->n && it->count != 1) {
                ib[q].cls = cls;
                ib[q].p = NULL;
                continue;
            }
            fu_load(it, o, len, cls, scratch + per * (size_t)(nm + q), &ib[q], J->n);
        }
        for (int k = 0; k < nm; k++) {
            const exe_fmember *m = &G->members[k];
            mb[k].cls = fu_class((tpu_dtype)m->in->shape.dtype);
            mb[k].p = scratch + per * (size_t)k;
            /* the root writes straight into the result when the block's storage is the result's */
            if (k == nm - 1 && t->dtype != TPU_BF16) mb[k].p = (char *)t->data + (size_t)o * tpu_dtype_size(t->dtype);
            if (m->in->op == HLO_BROADCAST) {
                int src = -1 - m->op[0];
                fu_broadcast(m->in, inputs[src]->t, o, len, mb[k].cls, mb[k].p);
                continue;
            }
            fu_buf *ops[3] = {NULL, NULL, NULL};
            for (int a = 0; a < m->in->nops && a < 3; a++) ops[a] = m->op[a] >= 0 ? &mb[m->op[a]] : &ib[-1 - m->op[a]];
            fu_member(J->S, m, &mb[k], ops, len);
        }
        /* a bf16 root's block to the result */
        if (t->dtype == TPU_BF16) {
            const fu_buf *r = &mb[nm - 1];
            for (int i = 0; i < len; i++) ((uint16_t *)t->data)[o + i] = fp_f32_to_bf16_inline(((const float *)r->p)[i]);
        }
    }
}

int exe_fuse_can_reuse(const exe_fgroup *G, int q, const tpu_tensor *t)
{
    const hlo_shape *rs = &G->root->shape;
    if (!t || t->dtype != (tpu_dtype)rs->dtype || t->count != hlo_shape_count(rs) || t->count < 2) return 0;
    for (int k = 0; k < G->nmembers; k++)
        if (G->members[k].in->op == HLO_BROADCAST && G->members[k].op[0] == -1 - q) return 0;
    return 1;
}

tpu_status exe_fuse_run(exe_state *S, const exe_fgroup *G, exe_value *const *inputs, int reuse, exe_value **out)
{
    const hlo_instr *R = G->root;
    tpu_tensor *t;
    tpu_status st = TPU_OK;
    /* in place: block by block each element is read before the root writes it (identity-mapped input) */
    if (reuse >= 0) {
        t = inputs[reuse]->t;
        t->rank = R->shape.rank;
        for (int i = 0; i < R->shape.rank; i++) t->dims[i] = R->shape.dims[i];
    } else if ((st = exe_alloc(S, R, &t))) {
        return st;
    }
    int64_t n = t->count;
    int ni = G->ninputs;
    for (int q = 0; q < ni; q++)
        if (!inputs[q] || !inputs[q]->t) {
            if (reuse < 0) tpu_tensor_free(t);
            return exe_fail(S, R, TPU_ERR_INTERNAL, "fused input %d is not an array", q);
        }
    int64_t nblocks = (n + FU_BLOCK - 1) / FU_BLOCK;
    int nt = nblocks >= 8 ? exe_par_threads(S->threads) : 1;
    fu_job J;
    memset(&J, 0, sizeof J);
    J.S = S;
    J.G = G;
    J.inputs = inputs;
    J.t = t;
    J.n = n;
    char *scr[PAR_T];
    fu_buf *mbs[PAR_T];
    memset(scr, 0, sizeof scr);
    memset(mbs, 0, sizeof mbs);
    J.scratch = scr;
    J.mb = mbs;
    if (nt > PAR_T) nt = PAR_T;
    int64_t grain = nt > 1 ? UT_MAX((int64_t)1, nblocks / (8 * nt)) : nblocks;
    exe_par_for(nt, nblocks, grain, fu_chunk, &J);
    for (int i = 0; i < PAR_T; i++) {
        ut_free(scr[i]);
        ut_free(mbs[i]);
    }
    if (atomic_load(&J.failed)) {
        if (reuse < 0) tpu_tensor_free(t);
        return ut_nomem(S->ctx);
    }
    if (reuse >= 0) {
        *out = exe_value_ref(inputs[reuse]);
        return TPU_OK;
    }
    return exe_out_array(S, t, out);
}
