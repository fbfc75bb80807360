/* dot.c — dot (XLA's DotGeneral) for every dtype and dimension-number placement.
 *
 *   out[b..., m..., n...] = sum over k... of lhs[b, m, k] * rhs[b, k, n]
 *   b: batch dims (lhs_batch_dims paired with rhs_batch_dims), m: lhs free dims in order, k: contracting
 *   dims (paired in order), n: rhs free dims in order. The result is [B][M][N] in row-major order.
 *
 * exe_k_dot: per batch, each operand is viewed as a matrix ([M][K], [K][N]). It is used in place when it
 * already is one (f32 or f64 that needs no rounding); otherwise it is packed — converted, flushed,
 * bf16-rounded or split (mxu.h) — in whichever orientation reads the source with the smaller stride, and
 * multiplied with BLAS gemm. A 3-pass (HIGH) f32 dot runs up to three gemms (hi·hi' + hi·lo' + lo·hi') into
 * one f32 accumulator. Many batches run in parallel; otherwise one product is split across threads by rows
 * or columns of the result. Wide integers (32/64-bit) use an exact 64-bit loop.
 * exe_k_dot_ref: the definition, one output element at a time, accumulating in double (with the same
 * operand rounding) or in 64-bit integers.
 */
#include "gemm.h"
#include "mxu.h"
#include "ref.h"
#include "exec/exe_ops.h"
#include "exec/exe_par.h"

#include <string.h>

/* One group of dimensions of one operand: sizes and strides (elements), outermost first. */
typedef struct dot_grp {
    int     n;
    int64_t d[TPU_MAX_RANK], s[TPU_MAX_RANK];
} dot_grp;

typedef struct dot_plan {
    dot_grp lb, rb;   /* batch dims: lhs strides, rhs strides */
    dot_grp lm;       /* lhs free dims */
    dot_grp lk, rk;   /* contracting dims: lhs strides, rhs strides */
    dot_grp rn;       /* rhs free dims */
    int64_t B, M, K, N;
} dot_plan;

static int64_t dot_count(const dot_grp *g)
{
    int64_t c = 1;
    for (int i = 0; i < g->n; i++) c *= g->d[i];
    return c;
}

static tpu_status dot_plan_make(exe_state *S, const hlo_instr *in, exe_value *const *ops, dot_plan *p)
{
    memset(p, 0, sizeof *p);
    if (in->nops != 2 || !ops[0] || !ops[1] || !ops[0]->t || !ops[1]->t)
        return exe_fail(S, in, TPU_ERR_SHAPE, "dot takes two array operands");
    if (!hlo_shape_is_array(&in->shape)) return exe_fail(S, in, TPU_ERR_SHAPE, "dot's result must be an array");
    if (hlo_attr_find(in, HK_SPARSITY) || hlo_attr_find(in, HK_LHS_RAGGED_DIMS))
        return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "sparse and ragged dots are not supported");
    const tpu_tensor *l = ops[0]->t, *r = ops[1]->t;
    const int64_t *lb, *rb, *lc, *rc;
    int nlb = hlo_attr_ints(in, HK_LHS_BATCH_DIMS, &lb), nrb = hlo_attr_ints(in, HK_RHS_BATCH_DIMS, &rb);
    int nlc = hlo_attr_ints(in, HK_LHS_CONTRACTING_DIMS, &lc), nrc = hlo_attr_ints(in, HK_RHS_CONTRACTING_DIMS, &rc);
    if (nlb != nrb)
        return exe_fail(S, in, TPU_ERR_SHAPE, "lhs_batch_dims has %d dimensions but rhs_batch_dims has %d", nlb, nrb);
    if (nlc != nrc)
        return exe_fail(S, in, TPU_ERR_SHAPE, "lhs_contracting_dims has %d dimensions but rhs_contracting_dims has %d",
                        nlc, nrc);
    int64_t ls[TPU_MAX_RANK], rs[TPU_MAX_RANK];
    exe_strides(l, ls);
    exe_strides(r, rs);
    uint8_t lused[TPU_MAX_RANK] = {0}, rused[TPU_MAX_RANK] = {0};
    struct { const char *name; const int64_t *v; int n; const tpu_tensor *t; uint8_t *used; } lists[4] = {
        {"lhs_batch_dims", lb, nlb, l, lused}, {"rhs_batch_dims", rb, nrb, r, rused},
        {"lhs_contracting_dims", lc, nlc, l, lused}, {"rhs_contracting_dims", rc, nrc, r, rused}};
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < lists[k].n; i++) {
            int64_t d = lists[k].v[i];
            if (d < 0 || d >= lists[k].t->rank)
                return exe_fail(S, in, TPU_ERR_SHAPE, "%s: dimension %lld is out of range for a rank-%d operand",
                                lists[k].name, (long long)d, lists[k].t->rank);
            if (lists[k].used[d])
                return exe_fail(S, in, TPU_ERR_SHAPE, "%s: dimension %lld is used twice", lists[k].name, (long long)d);
            lists[k].used[d] = 1;
        }
    for (int i = 0; i < nlb; i++) {
        if (l->dims[lb[i]] != r->dims[rb[i]])
            return exe_fail(S, in, TPU_ERR_SHAPE, "batch dimension %d has size %lld in lhs but %lld in rhs", i,
                            (long long)l->dims[lb[i]], (long long)r->dims[rb[i]]);
        p->lb.d[i] = p->rb.d[i] = l->dims[lb[i]];
        p->lb.s[i] = ls[lb[i]];
        p->rb.s[i] = rs[rb[i]];
    }
    p->lb.n = p->rb.n = nlb;
    for (int i = 0; i < nlc; i++) {
        if (l->dims[lc[i]] != r->dims[rc[i]])
            return exe_fail(S, in, TPU_ERR_SHAPE, "contracting dimension %d has size %lld in lhs but %lld in rhs", i,
                            (long long)l->dims[lc[i]], (long long)r->dims[rc[i]]);
        p->lk.d[i] = p->rk.d[i] = l->dims[lc[i]];
        p->lk.s[i] = ls[lc[i]];
        p->rk.s[i] = rs[rc[i]];
    }
    p->lk.n = p->rk.n = nlc;
    for (int i = 0; i < l->rank; i++)
        if (!lused[i]) {
            p->lm.d[p->lm.n] = l->dims[i];
            p->lm.s[p->lm.n++] = ls[i];
        }
    for (int i = 0; i < r->rank; i++)
        if (!rused[i]) {
            p->rn.d[p->rn.n] = r->dims[i];
            p->rn.s[p->rn.n++] = rs[i];
        }
    /* the result is batch, lhs free, rhs free */
    const hlo_shape *o = &in->shape;
    int ok = o->rank == p->lb.n + p->lm.n + p->rn.n;
    for (int i = 0, k = 0; ok && i < p->lb.n; i++) ok = o->dims[k++] == p->lb.d[i];
    for (int i = 0, k = p->lb.n; ok && i < p->lm.n; i++) ok = o->dims[k++] == p->lm.d[i];
    for (int i = 0, k = p->lb.n + p->lm.n; ok && i < p->rn.n; i++) ok = o->dims[k++] == p->rn.d[i];
    if (!ok) {
        char want[256], got[128];
        int w = 0;
        w += snprintf(want + w, sizeof want - (size_t)w, "[");
        const dot_grp *gs[3] = {&p->lb, &p->lm, &p->rn};
        int first = 1;
        for (int g = 0; g < 3; g++)
            for (int i = 0; i < gs[g]->n && w < (int)sizeof want - 24; i++, first = 0)
                w += snprintf(want + w, sizeof want - (size_t)w, "%s%lld", first ? "" : ",", (long long)gs[g]->d[i]);
        snprintf(want + w, sizeof want - (size_t)w, "]");
        return exe_fail(S, in, TPU_ERR_SHAPE, "result shape %s does not match the operands: expected dimensions %s",
                        hlo_shape_str(o, got, sizeof got), want);
    }
    p->B = dot_count(&p->lb);
    p->M = dot_count(&p->lm);
    p->K = dot_count(&p->lk);
    p->N = dot_count(&p->rn);
    return TPU_OK;
}

/* Offsets of every index of g (row-major order) into off[count]. */
static void dot_offsets(const dot_grp *g, int64_t *off)
{
    int64_t count = 1;
    off[0] = 0;
    for (int i = 0; i < g->n; i++) {
        int64_t d = g->d[i], s = g->s[i];
        for (int64_t c = count - 1; c >= 0; c--) {
            int64_t base = off[c];
            for (int64_t j = d - 1; j >= 0; j--) off[c * d + j] = base + j * s;
        }
        count *= d;
    }
}

/* Is the group one uniform stride (size-1 dims ignored)? Sets *stride (1 for a single element). */
static int dot_uniform(const dot_grp *g, int64_t *stride)
{
    int last = -1;
    *stride = 1;
    for (int i = 0; i < g->n; i++) {
        if (g->d[i] == 1) continue;
        if (last >= 0 && g->s[last] != g->s[i] * g->d[i]) return 0;
        last = i;
    }
    if (last >= 0) *stride = g->s[last];
    return 1;
}

/* Stride of the innermost non-trivial dim (0 for a single element). */
static int64_t dot_inner_stride(const dot_grp *g)
{
    for (int i = g->n - 1; i >= 0; i--)
        if (g->d[i] != 1) return g->s[i] < 0 ? -g->s[i] : g->s[i];
    return 0;
}

/* ---- reference ---- */

EXE_KERNEL(exe_k_dot_ref)
{
    dot_plan p;
    tpu_status st = dot_plan_make(S, in, ops, &p);
    if (st) return st;
    const tpu_tensor *l = ops[0]->t, *r = ops[1]->t;
    exe_mx_num nm;
    if ((st = exe_mx_numerics(S, in, l->dtype, r->dtype, (tpu_dtype)in->shape.dtype, p.K, &nm))) return st;
    tpu_tensor *t;
    if ((st = exe_alloc(S, in, &t))) return st;
    int64_t *tab = ut_malloc((size_t)(2 * p.B + p.M + 2 * p.K + p.N + 1) * sizeof *tab);
    if (!tab) {
        tpu_tensor_free(t);
        return ut_nomem(S->ctx);
    }
    int64_t *lbo = tab, *rbo = lbo + p.B, *lmo = rbo + p.B, *lko = lmo + p.M, *rko = lko + p.K, *rno = rko + p.K;
    dot_offsets(&p.lb, lbo);
    dot_offsets(&p.rb, rbo);
    dot_offsets(&p.lm, lmo);
    dot_offsets(&p.lk, lko);
    dot_offsets(&p.rk, rko);
    dot_offsets(&p.rn, rno);
    int integer = nm.acc == EXE_MX_I64 || nm.int_exact;
    tpu_dtype ot = t->dtype;
    for (int64_t b = 0; b < p.B; b++)
        for (int64_t m = 0; m < p.M; m++)
            for (int64_t n = 0; n < p.N; n++) {
                int64_t oi = (b * p.M + m) * p.N + n, lo = lbo[b] + lmo[m], ro = rbo[b] + rno[n];
                if (integer) {
                    uint64_t acc = 0;   /* wraps like the 64-bit hardware sum */
                    for (int64_t k = 0; k < p.K; k++)
                        acc += (uint64_t)ten_load_i64(l->dtype, l->data, lo + lko[k]) *
                               (uint64_t)ten_load_i64(r->dtype, r->data, ro + rko[k]);
                    ten_store_i64(ot, t->data, oi, exe_wrap_int(ot, (int64_t)acc));
                    continue;
                }
                double acc = 0;
                for (int term = 0; term < 3; term++) {
                    exe_mx_part pl, pr;
                    if (exe_mx_term_part(&nm, term, 0, &pl) || exe_mx_term_part(&nm, term, 1, &pr)) continue;
                    for (int64_t k = 0; k < p.K; k++)
                        acc += exe_mx_value(l->dtype, l->data, lo + lko[k], pl) * exe_mx_value(r->dtype, r->data, ro + rko[k], pr);
                }
                exe_mx_store(S, ot, t->data, oi, 1, &acc, 1, 1, 0);
            }
    ut_free(tab);
    return exe_out_array(S, t, out);
}

/* ---- fast kernel ---- */

/* One operand of one batch seen as a matrix rows x cols (lhs: M x K, rhs: K x N). */
typedef struct dot_mat {
    const tpu_tensor *t;
    size_t            esz;
    int64_t           rows, cols;
    const int64_t    *boff;          /* batch offsets */
    const int64_t    *roff, *coff;   /* offset tables */
    int               runi, cuni;    /* uniform strides rstr / cstr */
    int64_t           rstr, cstr;
    int               trans;         /* stored (packed or in place) as [cols][rows] */
    int               direct;        /* used in place */
    int64_t           ld;
    int               nbuf;          /* packed buffers needed (hi, lo) */
} dot_mat;

static void dot_mat_init(dot_mat *m, const tpu_tensor *t, const dot_grp *rg, const dot_grp *cg, const int64_t *boff,
                         const int64_t *roff, const int64_t *coff, const exe_mx_num *nm, int op)
{
    memset(m, 0, sizeof *m);
    m->t = t;
    m->esz = tpu_dtype_size(t->dtype);
    m->rows = dot_count(rg);
    m->cols = dot_count(cg);
    m->boff = boff;
    m->roff = roff;
    m->coff = coff;
    m->runi = dot_uniform(rg, &m->rstr);
    m->cuni = dot_uniform(cg, &m->cstr);
    /* pack so the inner loop reads the smaller stride */
    m->trans = dot_inner_stride(cg) > dot_inner_stride(rg);
    int native = nm->dbl ? t->dtype == TPU_F64 : t->dtype == TPU_F32;
    if (native && !nm->split[op] && m->runi && m->cuni) {
        int64_t big = (int64_t)1 << 30;
        if (m->cstr == 1) {
            int64_t ld = m->rows > 1 ? m->rstr : UT_MAX(m->cols, 1);
            if (ld >= m->cols && ld < big) {
                m->direct = 1;
                m->trans = 0;
                m->ld = ld;
            }
        }
        if (!m->direct && m->rstr == 1) {
            int64_t ld = m->cols > 1 ? m->cstr : UT_MAX(m->rows, 1);
            if (ld >= m->rows && ld < big) {
                m->direct = 1;
                m->trans = 1;
                m->ld = ld;
            }
        }
    }
    if (!m->direct) m->ld = m->trans ? m->rows : m->cols;
    m->nbuf = m->direct ? 0 : (nm->split[op] && nm->passes == 3) ? 2 : 1;
}

typedef struct dot_pack_job {
    const dot_mat *m;
    const char    *base;
    void          *dst;
    int            dbl;
    exe_mx_part    part;
} dot_pack_job;

static void dot_pack_rows(void *ctx, int64_t o0, int64_t o1, int tid)
{
    const dot_pack_job *J = ctx;
    const dot_mat *m = J->m;
    size_t es = J->dbl ? 8 : 4;
    int64_t inner = m->trans ? m->rows : m->cols;
    const int64_t *ooff = m->trans ? m->coff : m->roff, *ioff = m->trans ? m->roff : m->coff;
    int iuni = m->trans ? m->runi : m->cuni;
    int64_t istr = m->trans ? m->rstr : m->cstr;
    for (int64_t o = o0; o < o1; o++) {
        const char *src = J->base + (size_t)ooff[o] * m->esz;
        void *d = (char *)J->dst + (size_t)(o * inner) * es;
        if (iuni) exe_mx_load(d, J->dbl, src, m->t->dtype, istr, inner, J->part);
        else exe_mx_load_tab(d, J->dbl, src, m->t->dtype, ioff, inner, J->part);
    }
    (void)tid;
}

/* Packs batch b of the operand into dst (nthr threads). */
static void dot_pack(const dot_mat *m, int64_t b, void *dst, int dbl, exe_mx_part part, int nthr)
{
    dot_pack_job J = {m, (const char *)m->t->data + (size_t)m->boff[b] * m->esz, dst, dbl, part};
    int64_t outer = m->trans ? m->cols : m->rows, inner = m->trans ? m->rows : m->cols;
    int64_t grain = UT_MAX((int64_t)1, 16384 / UT_MAX(inner, (int64_t)1));
    exe_par_for(nthr > 1 && outer * inner > 65536 ? nthr : 1, outer, grain, dot_pack_rows, &J);
}

/* Pointer to batch b of an operand used in place. */
static const void *dot_direct_ptr(const dot_mat *m, int64_t b)
{
    return (const char *)m->t->data + (size_t)m->boff[b] * m->esz;
}

typedef struct dot_ctx {
    exe_state        *S;
    const dot_plan   *p;
    const exe_mx_num *nm;
    dot_mat           A, B;
    tpu_tensor       *out;
    int               out_direct;   /* result dtype is the accumulator's: gemm writes into it */
    size_t            es;
} dot_ctx;

/* Per-thread buffers: packed A (hi, lo), packed B (hi, lo), C when the result needs converting. */
typedef struct dot_ws {
    void *a[2], *b[2], *c;
} dot_ws;

static size_t dot_ws_size(const dot_ctx *c)
{
    const dot_plan *p = c->p;
    size_t n = (size_t)c->A.nbuf * (size_t)(p->M * p->K) + (size_t)c->B.nbuf * (size_t)(p->K * p->N) +
               (c->out_direct ? 0 : (size_t)(p->M * p->N));
    return n * c->es;
}

static void dot_ws_carve(const dot_ctx *c, char *mem, dot_ws *w)
{
    const dot_plan *p = c->p;
    memset(w, 0, sizeof *w);
    for (int i = 0; i < c->A.nbuf; i++, mem += (size_t)(p->M * p->K) * c->es) w->a[i] = mem;
    for (int i = 0; i < c->B.nbuf; i++, mem += (size_t)(p->K * p->N) * c->es) w->b[i] = mem;
    if (!c->out_direct) w->c = mem;
}

/* Packs both operands of batch b into w (the parts each term needs). */
static void dot_pack_batch(const dot_ctx *c, int64_t b, dot_ws *w, int nthr)
{
    const dot_mat *ms[2] = {&c->A, &c->B};
    for (int op = 0; op < 2; op++) {
        const dot_mat *m = ms[op];
        if (m->direct) continue;
        void **bufs = op == 0 ? w->a : w->b;
        exe_mx_part hi = c->nm->split[op] ? EXE_MX_HI : EXE_MX_AS_IS;
        dot_pack(m, b, bufs[0], c->nm->dbl, hi, nthr);
        if (m->nbuf == 2) dot_pack(m, b, bufs[1], c->nm->dbl, EXE_MX_LO, nthr);
    }
}

/* C[i0:i1, j0:j1] of batch b (operands already packed into w). */
static void dot_gemm_block(const dot_ctx *c, int64_t b, const dot_ws *w, int64_t i0, int64_t i1, int64_t j0, int64_t j1)
{
    const dot_plan *p = c->p;
    size_t es = c->es;
    char *C = c->out_direct ? (char *)c->out->data + (size_t)(b * p->M * p->N) * es : (char *)w->c;
    int beta1 = 0;
    for (int term = 0; term < 3; term++) {
        exe_mx_part pa, pb;
        if (exe_mx_term_part(c->nm, term, 0, &pa) || exe_mx_term_part(c->nm, term, 1, &pb)) continue;
        const char *A = c->A.direct ? dot_direct_ptr(&c->A, b) : w->a[pa == EXE_MX_LO ? 1 : 0];
        const char *B = c->B.direct ? dot_direct_ptr(&c->B, b) : w->b[pb == EXE_MX_LO ? 1 : 0];
        size_t ea = c->A.direct ? c->A.esz : es, eb = c->B.direct ? c->B.esz : es;
        /* A is [M][K] (or [K][M]); B is [K][N] (or [N][K]) */
        const char *Ab = A + (size_t)(c->A.trans ? i0 : i0 * c->A.ld) * ea;
        const char *Bb = B + (size_t)(c->B.trans ? j0 * c->B.ld : j0) * eb;
        exe_mx_gemm(c->nm->dbl, c->A.trans, c->B.trans, i1 - i0, j1 - j0, p->K, Ab, c->A.ld, Bb, c->B.ld, beta1,
                    C + (size_t)(i0 * p->N + j0) * es, p->N);
        beta1 = 1;
    }
}

/* Converts rows [i0, i1) of batch b's C into the result. */
static void dot_store_rows(const dot_ctx *c, int64_t b, const dot_ws *w, int64_t i0, int64_t i1)
{
    if (c->out_direct) return;
    const dot_plan *p = c->p;
    for (int64_t i = i0; i < i1; i++)
        exe_mx_store(c->S, c->out->dtype, c->out->data, (b * p->M + i) * p->N, 1, (char *)w->c + (size_t)(i * p->N) * c->es,
                     c->nm->dbl, p->N, c->nm->int_exact);
}

/* Exact integer dot: operands widened to int64 ([B][M][K] and [B][N][K]), 64-bit wrapping sums. */
typedef struct dot_int_job {
    const dot_plan *p;
    const void     *a, *bt;   /* [B][M][K] and [B][N][K], widened to 64 bits (or 32: narrow) */
    int             narrow;
    tpu_tensor     *t;
} dot_int_job;

/* Results of at most 32 bits take the 32-bit wrapping sum: wrapped to the result it is the 64-bit sum wrapped
 * to it (both are the exact sum modulo 2^32 first), and 32-bit lanes vectorise. */
EXE_VEC
static void dot_int_rows(void *ctx, int64_t r0, int64_t r1, int tid)
{
    const dot_int_job *J = ctx;
    const dot_plan *p = J->p;
    int64_t K = p->K;
    int64_t bm = r0;
    /* four rows of the same batch at a time share each column's loads (a row of B^T is K elements) */
    for (; J->narrow && bm + 4 <= r1 && bm / p->M == (bm + 3) / p->M; bm += 4)
        for (int64_t n = 0; n < p->N; n++) {
            const uint32_t *ar = (const uint32_t *)J->a + bm * K, *br = (const uint32_t *)J->bt + (bm / p->M * p->N + n) * K;
            uint32_t c0 = 0, c1 = 0, c2 = 0, c3 = 0;
            for (int64_t k = 0; k < K; k++) {
                uint32_t b = br[k];
                c0 += ar[k] * b;
                c1 += ar[K + k] * b;
                c2 += ar[2 * K + k] * b;
                c3 += ar[3 * K + k] * b;
            }
            uint32_t c[4] = {c0, c1, c2, c3};
            for (int i = 0; i < 4; i++)
                ten_store_i64(J->t->dtype, J->t->data, (bm + i) * p->N + n, exe_wrap_int(J->t->dtype, (int32_t)c[i]));
        }
    for (; bm < r1; bm++)
        for (int64_t n = 0; n < p->N; n++) {
            int64_t v;
            if (J->narrow) {
                const uint32_t *ar = (const uint32_t *)J->a + bm * K, *br = (const uint32_t *)J->bt + (bm / p->M * p->N + n) * K;
                uint32_t acc = 0;
                for (int64_t k = 0; k < K; k++) acc += ar[k] * br[k];
                v = (int32_t)acc;
            } else {
                const uint64_t *ar = (const uint64_t *)J->a + bm * K, *br = (const uint64_t *)J->bt + (bm / p->M * p->N + n) * K;
                uint64_t acc = 0;
                for (int64_t k = 0; k < K; k++) acc += ar[k] * br[k];
                v = (int64_t)acc;
            }
            ten_store_i64(J->t->dtype, J->t->data, bm * p->N + n, exe_wrap_int(J->t->dtype, v));
        }
    (void)tid;
}

/* Exact integer dot: operands widened ([B][M][K] and [B][N][K]), wrapping sums. */
static tpu_status dot_int(exe_state *S, const dot_plan *p, const tpu_tensor *l, const tpu_tensor *r, const int64_t *tabs,
                          tpu_tensor *t, int nt)
{
    const int64_t *lbo = tabs, *rbo = lbo + p->B, *lmo = rbo + p->B, *lko = lmo + p->M, *rko = lko + p->K, *rno = rko + p->K;
    int narrow = tpu_dtype_bits(t->dtype) <= 32;
    size_t es = narrow ? 4 : 8;
    char *a = ut_malloc((size_t)(p->B * p->M * p->K + 1) * es), *bt = ut_malloc((size_t)(p->B * p->N * p->K + 1) * es);
    if (!a || !bt) {
        ut_free(a);
        ut_free(bt);
        return ut_nomem(S->ctx);
    }
    for (int side = 0; side < 2; side++) {
        const tpu_tensor *x = side ? r : l;
        const int64_t *bo = side ? rbo : lbo, *fo = side ? rno : lmo, *ko = side ? rko : lko;
        int64_t F = side ? p->N : p->M;
        char *dst = side ? bt : a;
        for (int64_t bf = 0; bf < p->B * F; bf++)
            for (int64_t k = 0; k < p->K; k++) {
                int64_t v = ten_load_i64(x->dtype, x->data, bo[bf / F] + fo[bf % F] + ko[k]);
                if (narrow) ((uint32_t *)dst)[bf * p->K + k] = (uint32_t)v;
                else ((int64_t *)dst)[bf * p->K + k] = v;
            }
    }
    dot_int_job J = {p, a, bt, narrow, t};
    exe_par_for(p->B * p->M * p->N * p->K > 65536 ? nt : 1, p->B * p->M, UT_MAX((int64_t)1, 65536 / UT_MAX(p->N * p->K, (int64_t)1)),
                dot_int_rows, &J);
    ut_free(a);
    ut_free(bt);
    return TPU_OK;
}

/* ---- a loop's weights packed once ----
 * A dot inside a while loop whose B operand is the same value at every iteration (the loop's weights) packs
 * it for exe_gemm once: an execution notes its B value; when the next execution of the instruction gets the
 * same value again, B is packed and the pack kept with a reference to the value. That reference keeps the
 * data as it was packed: nothing updates in place a value that someone else holds (exe_take_unique), and the
 * buffer cannot be freed and reused while it is held. A later execution with that very value uses the pack;
 * another value drops it (and after two such misses the instruction stops trying). The packs and references
 * go when the loop that made them ends (exe_dot_cache_drop from the while kernel). */
#define DOT_CACHE_MAX   32
#define DOT_CACHE_BYTES ((size_t)64 << 20)

typedef struct dot_cache_ent {
    const hlo_instr *in;
    int              term;
    int              depth;    /* loop depth it was made at */
    int              misses;
    uintptr_t        seen;     /* the last execution's B value (not held: its address, only compared) */
    exe_value       *pin;      /* the packed value, held */
    exe_gemm_bpack  *bp;
} dot_cache_ent;

/* A dot's plan inside loops, made by its first execution in the run (the operands' shapes are the
 * instruction's, so the plan, numerics and offset tables stay valid): open addressing on the instruction. */
typedef struct dot_cached {
    const hlo_instr *in;       /* NULL: free slot */
    int              swapped;  /* made for the transposed result (exe_state.cur_dot_out) */
    int              lrank, rrank;
    int64_t          ldims[TPU_MAX_RANK], rdims[TPU_MAX_RANK];
    tpu_dtype        lt, rt;
    dot_plan         p;
    exe_mx_num       nm;
    int64_t         *tab;
} dot_cached;

/* dot_tiny's decoding of one dot's attributes (ok 0: not of its kind), kept for a loop's thousands of calls */
typedef struct dot_tiny_memo {
    const hlo_instr *in;
    int              ok, lc, rc;
    exe_mx_num       nm;
} dot_tiny_memo;
#define DOT_TINY_MEMO 16   /* direct-mapped by instruction: a collision only decodes again */

struct exe_dot_cache {
    dot_tiny_memo tiny[DOT_TINY_MEMO];
    int           n;
    size_t        bytes;
    dot_cache_ent e[DOT_CACHE_MAX];
    dot_cached   *plans;
    int           nplans, capplans;   /* capplans: a power of two */
};

static void dot_cache_unpin(struct exe_dot_cache *dc, dot_cache_ent *e)
{
    dc->bytes -= exe_gemm_bpack_bytes(e->bp);
    exe_gemm_bpack_free(e->bp);
    exe_value_unref(e->pin);
    e->bp = NULL;
    e->pin = NULL;
}

void exe_dot_cache_drop(exe_state *S, int depth)
{
    struct exe_dot_cache *dc = S->dot_cache;
    if (!dc) return;
    int k = 0;
    for (int i = 0; i < dc->n; i++) {
        if (dc->e[i].depth > depth) dot_cache_unpin(dc, &dc->e[i]);
        else dc->e[k++] = dc->e[i];
    }
    dc->n = k;
    if (depth < 0) {
        for (int i = 0; i < dc->capplans; i++) ut_free(dc->plans[i].tab);
        ut_free(dc->plans);
        ut_free(dc);
        S->dot_cache = NULL;
    }
}

/* The pack of B (value v) for term `term` of dot `in`, or NULL (pack as usual). */
static const exe_gemm_bpack *dot_cache_get(exe_state *S, const hlo_instr *in, int term, exe_value *v, int64_t M, int64_t N,
                                           int64_t K, const exe_gemm_src *A, const exe_gemm_src *B)
{
    if (!S->dot_cache && !(S->dot_cache = ut_calloc(1, sizeof *S->dot_cache))) return NULL;
    struct exe_dot_cache *dc = S->dot_cache;
    dot_cache_ent *e = NULL;
    for (int i = 0; i < dc->n && !e; i++)
        if (dc->e[i].in == in && dc->e[i].term == term) e = &dc->e[i];
    if (!e) {
        if (dc->n == DOT_CACHE_MAX) return NULL;
        e = &dc->e[dc->n++];
        memset(e, 0, sizeof *e);
        e->in = in;
        e->term = term;
        e->depth = S->loop_depth;
        e->seen = (uintptr_t)v;
        return NULL;
    }
    if (e->pin == v) return e->bp;
    if (e->pin) {
        dot_cache_unpin(dc, e);   /* not the loop's weights after all */
        e->misses++;
    }
    if (e->seen != (uintptr_t)v || e->misses >= 2) {
        e->seen = (uintptr_t)v;
        return NULL;
    }
    exe_gemm_bpack *bp = exe_gemm_bpack_new(M, N, K, A, B);
    if (!bp) return NULL;
    if (dc->bytes + exe_gemm_bpack_bytes(bp) > DOT_CACHE_BYTES) {
        exe_gemm_bpack_free(bp);
        return NULL;
    }
    dc->bytes += exe_gemm_bpack_bytes(bp);
    e->bp = bp;
    e->pin = exe_value_ref(v);
    return bp;
}

/* ---- f32 accumulation: exe_gemm on the operands as they lie (or packed when their dims do not merge) ---- */

typedef struct dot_f32_ctx {
    exe_state        *S;
    const dot_plan   *p;
    const exe_mx_num *nm;
    dot_mat           A, B;
    int               packA, packB;   /* the operand's dims are not one uniform stride: pack it (f32) */
    tpu_tensor       *out;
    int               out_f32;
    float           **ws;             /* per thread: packed A, packed B, C */
    size_t            wsz;
    int               inner_threads;
    const hlo_instr  *in;
    exe_value        *bval;           /* B's value, when its pack may be kept (a loop's weights), else NULL */
} dot_f32_ctx;

/* gemm source of operand m for batch b: in place, or the packed copy in buf */
static exe_gemm_src dot_src(const dot_mat *m, int64_t b, int packed, const float *buf, exe_mx_part part)
{
    exe_gemm_src g;
    g.part = part;
    if (packed) {
        g.p = buf;
        g.dtype = TPU_F32;
        g.rs = m->trans ? 1 : m->cols;
        g.cs = m->trans ? m->rows : 1;
    } else {
        g.p = (const char *)m->t->data + (size_t)m->boff[b] * m->esz;
        g.dtype = m->t->dtype;
        g.rs = m->rstr;
        g.cs = m->cstr;
    }
    return g;
}

static void dot_f32_batch(const dot_f32_ctx *c, int64_t b, int tid, int threads)
{
    const dot_plan *p = c->p;
    float *w = c->ws[tid];
    float *pa = w, *pb = pa + (c->packA ? p->M * p->K : 0), *ct = pb + (c->packB ? p->K * p->N : 0);
    if (c->packA) dot_pack(&c->A, b, pa, 0, EXE_MX_AS_IS, threads);
    if (c->packB) dot_pack(&c->B, b, pb, 0, EXE_MX_AS_IS, threads);
    float *C = c->out_f32 ? (float *)c->out->data + b * p->M * p->N : ct;
    int acc = 0;
    for (int term = 0; term < 3; term++) {
        exe_mx_part pl, pr;
        if (exe_mx_term_part(c->nm, term, 0, &pl) || exe_mx_term_part(c->nm, term, 1, &pr)) continue;
        exe_gemm_src ga = dot_src(&c->A, b, c->packA, pa, pl), gb = dot_src(&c->B, b, c->packB, pb, pr);
        const exe_gemm_bpack *bp = c->bval ? dot_cache_get(c->S, c->in, term, c->bval, p->M, p->N, p->K, &ga, &gb) : NULL;
        exe_gemm_b(threads, p->M, p->N, p->K, &ga, &gb, bp, C, p->N, acc);
        acc = 1;
    }
    if (!c->out_f32)
        exe_mx_store(c->S, c->out->dtype, c->out->data, b * p->M * p->N, 1, ct, 0, p->M * p->N, c->nm->int_exact);
}

static void dot_f32_chunk(void *ctx, int64_t b0, int64_t b1, int tid)
{
    const dot_f32_ctx *c = ctx;
    for (int64_t b = b0; b < b1; b++) dot_f32_batch(c, b, tid, 1);
}

static int dot_gemm_ok(const dot_mat *m) { return m->runi && m->cuni && (m->t->dtype == TPU_F32 || m->t->dtype == TPU_BF16); }

static tpu_status dot_f32(exe_state *S, const hlo_instr *in, const dot_plan *p, const exe_mx_num *nm, const tpu_tensor *l,
                          const tpu_tensor *r, exe_value *rval, const int64_t *tab, tpu_tensor *t, int nt)
{
    const int64_t *lbo = tab, *rbo = lbo + p->B, *lmo = rbo + p->B, *lko = lmo + p->M, *rko = lko + p->K, *rno = rko + p->K;
    dot_f32_ctx c;
    memset(&c, 0, sizeof c);
    c.S = S;
    c.p = p;
    c.nm = nm;
    c.out = t;
    c.out_f32 = t->dtype == TPU_F32;
    dot_mat_init(&c.A, l, &p->lm, &p->lk, lbo, lmo, lko, nm, 0);
    dot_mat_init(&c.B, r, &p->rk, &p->rn, rbo, rko, rno, nm, 1);
    c.packA = !dot_gemm_ok(&c.A);
    c.packB = !dot_gemm_ok(&c.B);
    c.in = in;
    /* one product read in place inside a loop: B may be the loop's weights (not in runs asking for the
     * reference kernels: tests compare a program run with and without the packs kept) */
    c.bval = S->loop_depth > 0 && p->B == 1 && !c.packB && !(S->ref & EXE_REF_KERNELS) ? rval : NULL;
    /* many independent batches: one per thread at a time; otherwise each product uses all threads (the choice
     * does not depend on the thread count, so neither do the results) */
    double flops = 2.0 * (double)p->M * (double)p->N * (double)p->K;
    int by_batch = p->B > 1 && (p->B >= 8 || flops < 4e6);
    int nws = by_batch ? (int)UT_MIN((int64_t)nt, p->B) : 1;
    c.wsz = (size_t)((c.packA ? p->M * p->K : 0) + (c.packB ? p->K * p->N : 0) + (c.out_f32 ? 0 : p->M * p->N)) + 16;
    float *wsp[64];
    tpu_tensor *wsh[64];
    if (nws > 64) nws = 64;
    memset(wsp, 0, sizeof wsp);
    for (int i = 0; i < nws; i++)
        if (!(wsp[i] = exe_scratch_alloc(c.wsz * sizeof(float), &wsh[i]))) {
            for (int k = 0; k < i; k++) exe_scratch_free(wsh[k]);
            return ut_nomem(S->ctx);
        }
    c.ws = wsp;
    if (by_batch) {
        exe_par_for(flops * (double)p->B > 1e5 ? nws : 1, p->B, 1, dot_f32_chunk, &c);
    } else {
        for (int64_t b = 0; b < p->B; b++) dot_f32_batch(&c, b, 0, nt);
    }
    for (int i = 0; i < nws; i++) exe_scratch_free(wsh[i]);
    return TPU_OK;
}

/* s8 x s8 -> s32, batch by batch, through exe_gemm_s8 (VPDPBUSD) */
static void dot_s8(const dot_plan *p, const tpu_tensor *l, const tpu_tensor *r, const int64_t *tab, tpu_tensor *t, int nt)
{
    const int64_t *lbo = tab, *rbo = lbo + p->B, *lmo = rbo + p->B, *lko = lmo + p->M, *rko = lko + p->K, *rno = rko + p->K;
    for (int64_t b = 0; b < p->B; b++)
        exe_gemm_s8(nt, p->M, p->N, p->K, (const int8_t *)l->data + lbo[b], lmo, lko, (const int8_t *)r->data + rbo[b], rko, rno,
                    (int32_t *)t->data + b * p->M * p->N);
}

/* Largest magnitude of an element of a small integer (or pred) dtype; 0 for the others. */
static double dot_int_max(tpu_dtype t)
{
    switch (t) {
    case TPU_PRED: return 1;
    case TPU_S8: return 128;
    case TPU_U8: return 255;
    case TPU_S16: return 32768;
    case TPU_U16: return 65535;
    default: return 0;
    }
}

/* A small f32 matrix product [M,K] x [K,N] (either operand may be stored transposed), as a loop body runs
 * thousands of: straight to exe_gemm with the operands in place, the same terms dot_f32_batch hands it
 * (so the same values), without the general path's plan, offset tables and workspace. Returns 0 when the
 * dot is not of that kind (the general path then runs it). */
/* dot_tiny's attributes of `in`: the contracting dims (*lc, *rc, each 0 or 1, no batch dims) and its numerics
 * for f32 operands (they do not depend on the contracted length, which matters for integers only). Returns 1,
 * 0 when the dot is not of dot_tiny's kind, -1 on an error (*st). */
static int dot_tiny_decode(exe_state *S, const hlo_instr *in, int *lc, int *rc, exe_mx_num *nm, tpu_status *st)
{
    if (in->nattrs > 8 || hlo_attr_find(in, HK_SPARSITY) || hlo_attr_find(in, HK_LHS_RAGGED_DIMS)) return 0;
    const int64_t *lb, *l, *r;
    if (hlo_attr_ints(in, HK_LHS_BATCH_DIMS, &lb) || hlo_attr_ints(in, HK_RHS_BATCH_DIMS, &lb) ||
        hlo_attr_ints(in, HK_LHS_CONTRACTING_DIMS, &l) != 1 || hlo_attr_ints(in, HK_RHS_CONTRACTING_DIMS, &r) != 1 ||
        (l[0] != 0 && l[0] != 1) || (r[0] != 0 && r[0] != 1))
        return 0;
    if ((*st = exe_mx_numerics(S, in, TPU_F32, TPU_F32, TPU_F32, 1, nm))) return -1;
    if (nm->dbl || nm->int_exact || nm->acc == EXE_MX_I64) return 0;
    *lc = (int)l[0], *rc = (int)r[0];
    return 1;
}

/* A small f32 matrix product [M,K] x [K,N] (either operand may be stored transposed), as a loop body runs
 * thousands of: straight to exe_gemm with the operands in place, the same terms dot_f32_batch hands it
 * (so the same values), without the general path's plan, offset tables and workspace; inside a loop its
 * attributes are decoded once (dot_tiny_memo). Returns 0 when the dot is not of that kind (the general path
 * then runs it). */
static int dot_tiny(exe_state *S, const hlo_instr *in, const tpu_tensor *l, const tpu_tensor *r, exe_value **out,
                    tpu_status *st)
{
    if (S->cur_dot_out || l->dtype != TPU_F32 || r->dtype != TPU_F32 || in->shape.dtype != TPU_F32 || l->rank != 2 ||
        r->rank != 2 || in->shape.rank != 2)
        return 0;
    dot_tiny_memo *mm = NULL;
    if (S->loop_depth > 0 && !(S->ref & EXE_REF_KERNELS) &&
        (S->dot_cache || (S->dot_cache = ut_calloc(1, sizeof *S->dot_cache))))
        mm = &S->dot_cache->tiny[(((uint64_t)(uintptr_t)in >> 4) * 0x9E3779B97F4A7C15ull) >> 60];
    int lc = 0, rc = 0, ok;
    exe_mx_num nm;
    if (mm && mm->in == in) {
        ok = mm->ok, lc = mm->lc, rc = mm->rc, nm = mm->nm;
    } else {
        if ((ok = dot_tiny_decode(S, in, &lc, &rc, &nm, st)) < 0) return 1;
        if (mm) mm->in = in, mm->ok = ok, mm->lc = lc, mm->rc = rc, mm->nm = nm;
    }
    if (!ok) return 0;
    int64_t M = l->dims[1 - lc], K = l->dims[lc], N = r->dims[1 - rc];
    if (r->dims[rc] != K || M < 1 || N < 1 || K < 1 || M * N * K >= 4096 || in->shape.dims[0] != M || in->shape.dims[1] != N)
        return 0;
    tpu_tensor *t;
    if ((*st = exe_alloc(S, in, &t))) return 1;
    int acc = 0;
    for (int term = 0; term < 3; term++) {
        exe_mx_part pl, pr;
        if (exe_mx_term_part(&nm, term, 0, &pl) || exe_mx_term_part(&nm, term, 1, &pr)) continue;
        exe_gemm_src ga = {l->data, TPU_F32, lc == 1 ? K : 1, lc == 1 ? 1 : M, pl};
        exe_gemm_src gb = {r->data, TPU_F32, rc == 0 ? N : 1, rc == 0 ? 1 : K, pr};
        exe_gemm(1, M, N, K, &ga, &gb, (float *)t->data, N, acc);
        acc = 1;
    }
    *st = exe_out_array(S, t, out);
    return 1;
}

/* The plan of dot `in` on these operands (roles exchanged when swapped), its numerics and offset tables
 * (*tab: the caller frees it when *own). */
static tpu_status dot_prepare(exe_state *S, const hlo_instr *in, exe_value *const *ops, int swapped, dot_plan *pp,
                              exe_mx_num *nmp, int64_t **tabp)
{
    dot_plan p;
    tpu_status st = dot_plan_make(S, in, ops, &p);
    if (st) return st;
    const tpu_tensor *l = ops[0]->t, *r = ops[1]->t;
    if (swapped) {
        /* out^T[b][n][m] = sum_k r[b,k,n] l[b,m,k]: the product with the operands' roles exchanged */
        dot_plan q = p;
        q.lb = p.rb, q.rb = p.lb, q.lm = p.rn, q.lk = p.rk, q.rk = p.lk, q.rn = p.lm, q.M = p.N, q.N = p.M;
        p = q;
        const tpu_tensor *x = l;
        l = r;
        r = x;
    }
    exe_mx_num nm;
    if ((st = exe_mx_numerics(S, in, l->dtype, r->dtype, (tpu_dtype)in->shape.dtype, p.K, &nm))) return st;
    /* small integers whose every partial sum is an integer of magnitude <= 2^24 (int8 matmuls of K <= 1024):
     * f32 holds each exactly, so the f32 GEMM gives the exact sum in any order */
    if (nm.int_exact && nm.dbl && dot_int_max(l->dtype) * dot_int_max(r->dtype) * (double)p.K <= 16777216.0) {
        nm.acc = EXE_MX_F32;
        nm.dbl = 0;
    }
    if (p.M >= INT32_MAX || p.N >= INT32_MAX || p.K >= INT32_MAX)
        return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "a matrix dimension of 2^31 or more is not supported");
    int64_t *tab = ut_malloc((size_t)(2 * p.B + p.M + 2 * p.K + p.N + 1) * sizeof *tab);
    if (!tab) return ut_nomem(S->ctx);
    int64_t *lbo = tab, *rbo = lbo + p.B, *lmo = rbo + p.B, *lko = lmo + p.M, *rko = lko + p.K, *rno = rko + p.K;
    dot_offsets(&p.lb, lbo);
    dot_offsets(&p.rb, rbo);
    dot_offsets(&p.lm, lmo);
    dot_offsets(&p.lk, lko);
    dot_offsets(&p.rk, rko);
    dot_offsets(&p.rn, rno);
    *pp = p;
    *nmp = nm;
    *tabp = tab;
    return TPU_OK;
}

/* Is c the plan of dot `in` on operands l, r? */
static int dot_cached_fits(const dot_cached *c, const hlo_instr *in, int swapped, const tpu_tensor *l, const tpu_tensor *r)
{
    return c->in == in && c->swapped == swapped && c->lt == l->dtype && c->rt == r->dtype && c->lrank == l->rank &&
           c->rrank == r->rank && !memcmp(c->ldims, l->dims, (size_t)l->rank * sizeof(int64_t)) &&
           !memcmp(c->rdims, r->dims, (size_t)r->rank * sizeof(int64_t));
}

/* dot_prepare through the run's plans: a dot inside a loop builds its plan once (its offset tables and
 * attribute checks were a few percent of a loop of small dots); elsewhere, and in runs asking for the
 * reference kernels (tests compare the two), each execution builds it (*own). */
static tpu_status dot_prepare_cached(exe_state *S, const hlo_instr *in, exe_value *const *ops, int swapped, dot_plan *p,
                                     exe_mx_num *nm, int64_t **tab, int *own)
{
    *own = 1;
    if (S->loop_depth <= 0 || (S->ref & EXE_REF_KERNELS) || in->nops != 2 || !ops[0] || !ops[1] || !ops[0]->t || !ops[1]->t ||
        (!S->dot_cache && !(S->dot_cache = ut_calloc(1, sizeof *S->dot_cache))))
        return dot_prepare(S, in, ops, swapped, p, nm, tab);
    struct exe_dot_cache *dc = S->dot_cache;
    const tpu_tensor *l = ops[0]->t, *r = ops[1]->t;
    uint64_t h = ((uint64_t)(uintptr_t)in >> 4) * 0x9E3779B97F4A7C15ull + (uint64_t)swapped;
    int mask = dc->capplans - 1;
    for (int i = 0; dc->capplans && i <= mask; i++) {
        dot_cached *c = &dc->plans[(int)((h >> 40) + (uint64_t)i) & mask];
        if (!c->in) break;
        if (dot_cached_fits(c, in, swapped, l, r)) {
            *p = c->p, *nm = c->nm, *tab = c->tab, *own = 0;
            return TPU_OK;
        }
    }
    tpu_status st = dot_prepare(S, in, ops, swapped, p, nm, tab);
    if (st || l->rank > TPU_MAX_RANK || r->rank > TPU_MAX_RANK) return st;
    if (2 * (dc->nplans + 1) > dc->capplans) {   /* grow (rehash) at half full */
        int cap = dc->capplans ? 2 * dc->capplans : 32;
        dot_cached *v = ut_calloc((size_t)cap, sizeof *v);
        if (!v) return TPU_OK;   /* (the plan is used once, uncached) */
        for (int i = 0; i < dc->capplans; i++) {
            dot_cached *c = &dc->plans[i];
            if (!c->in) continue;
            uint64_t g = ((uint64_t)(uintptr_t)c->in >> 4) * 0x9E3779B97F4A7C15ull + (uint64_t)c->swapped;
            int k = (int)(g >> 40) & (cap - 1);
            while (v[k].in) k = (k + 1) & (cap - 1);
            v[k] = *c;
        }
        ut_free(dc->plans);
        dc->plans = v;
        dc->capplans = cap;
        mask = cap - 1;
    }
    int k = (int)(h >> 40) & mask;
    while (dc->plans[k].in) k = (k + 1) & mask;
    dot_cached *c = &dc->plans[k];
    c->in = in, c->swapped = swapped, c->lt = l->dtype, c->rt = r->dtype, c->lrank = l->rank, c->rrank = r->rank;
    memcpy(c->ldims, l->dims, (size_t)l->rank * sizeof(int64_t));
    memcpy(c->rdims, r->dims, (size_t)r->rank * sizeof(int64_t));
    c->p = *p, c->nm = *nm, c->tab = *tab;
    dc->nplans++;
    *own = 0;
    return TPU_OK;
}

EXE_KERNEL(exe_k_dot)
{
    if (in->nops == 2 && ops[0]->t && ops[1]->t && hlo_shape_is_array(&in->shape) && !EXE_FORCE_REF(S)) {
        tpu_status st = TPU_OK;
        if (dot_tiny(S, in, ops[0]->t, ops[1]->t, out, &st)) return st;
    }
    dot_plan p;
    exe_mx_num nm;
    int64_t *tab;
    int own;
    const hlo_shape *tshape = S->cur_dot_out;
    tpu_status st = dot_prepare_cached(S, in, ops, tshape != NULL, &p, &nm, &tab, &own);
    if (st) return st;
    const tpu_tensor *l = tshape ? ops[1]->t : ops[0]->t, *r = tshape ? ops[0]->t : ops[1]->t;
    tpu_tensor *t;
    if ((st = tshape ? exe_alloc_shape(S, tshape, &t) : exe_alloc(S, in, &t))) {
        if (own) ut_free(tab);
        return st;
    }
    int nt = exe_mx_threads(S);
    if (t->count == 0) {
        if (own) ut_free(tab);
        return exe_out_array(S, t, out);
    }
    if ((double)t->count * (double)p.K < 1e5) nt = 1;   /* not worth waking threads */
    int64_t *lbo = tab, *rbo = lbo + p.B, *lmo = rbo + p.B, *lko = lmo + p.M, *rko = lko + p.K, *rno = rko + p.K;
    if (l->dtype == TPU_S8 && r->dtype == TPU_S8 && t->dtype == TPU_S32 && exe_gemm_s8_available()) {
        dot_s8(&p, l, r, tab, t, nt);   /* int8 dots: exact, wrapped like every integer sum */
        if (own) ut_free(tab);
        return exe_out_array(S, t, out);
    }
    if (nm.acc == EXE_MX_I64) {
        st = dot_int(S, &p, l, r, tab, t, nt);
        if (own) ut_free(tab);
        if (st) {
            tpu_tensor_free(t);
            return st;
        }
        return exe_out_array(S, t, out);
    }
    if (!nm.dbl) {
        st = dot_f32(S, in, &p, &nm, l, r, tshape ? ops[0] : ops[1], tab, t, nt);
        if (own) ut_free(tab);
        if (st) {
            tpu_tensor_free(t);
            return st;
        }
        return exe_out_array(S, t, out);
    }
    dot_ctx c;
    memset(&c, 0, sizeof c);
    c.S = S;
    c.p = &p;
    c.nm = &nm;
    c.out = t;
    c.es = nm.dbl ? 8 : 4;
    c.out_direct = !nm.int_exact && t->dtype == (nm.dbl ? TPU_F64 : TPU_F32);
    dot_mat_init(&c.A, l, &p.lm, &p.lk, lbo, lmo, lko, &nm, 0);
    dot_mat_init(&c.B, r, &p.rk, &p.rn, rbo, rko, rno, &nm, 1);
    /* many independent batches: one per thread at a time; otherwise split each product across threads (the
     * choice does not depend on the thread count, so neither do the results) */
    double flops = 2.0 * (double)p.M * (double)p.N * (double)p.K;
    int by_batch = p.B > 1 && (p.B >= 8 || flops < 4e6);
    size_t wsz = dot_ws_size(&c);
    char *mem = ut_malloc(wsz + 64);
    if (!mem) {
        if (own) ut_free(tab);
        tpu_tensor_free(t);
        return ut_nomem(S->ctx);
    }
    /* (f64 and exact small-integer dots: serial — rare, and BLAS dgemm per block is fast enough) */
    if (by_batch) {
        dot_ws w;
        dot_ws_carve(&c, mem, &w);
        for (int64_t b = 0; b < p.B; b++) {
            dot_pack_batch(&c, b, &w, 1);
            dot_gemm_block(&c, b, &w, 0, p.M, 0, p.N);
            dot_store_rows(&c, b, &w, 0, p.M);
        }
    } else {
        dot_ws w;
        dot_ws_carve(&c, mem, &w);
        /* split the larger of M and N into blocks of at least 128; the split does not depend on the thread
         * count, since BLAS may sum differently for other block shapes */
        int split_n = p.N >= p.M;
        int64_t ext = split_n ? p.N : p.M;
        int nb = flops < 2e6 ? 1 : (int)UT_MIN((int64_t)16, UT_MAX((int64_t)1, ext / 128));
        for (int64_t b = 0; b < p.B; b++) {
            dot_pack_batch(&c, b, &w, nt);
            for (int k = 0; k < nb; k++) {
                int64_t e0 = ext * k / nb, e1 = ext * (k + 1) / nb;
                if (split_n) {
                    dot_gemm_block(&c, b, &w, 0, p.M, e0, e1);
                } else {
                    dot_gemm_block(&c, b, &w, e0, e1, 0, p.N);
                }
            }
            for (int64_t i = 0; i < p.M; i++) dot_store_rows(&c, b, &w, i, i + 1);
        }
    }
    ut_free(mem);
    if (own) ut_free(tab);
    return exe_out_array(S, t, out);
}
