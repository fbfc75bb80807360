/* scalesim_mem.c — one layer the way SCALE-Sim 3.0.0 simulates it (single_layer_sim.py and memory/).
 *
 * SCALE-Sim materialises three demand matrices (one row per cycle, one address per array lane) and walks
 * them row by row through a double-buffered SRAM model, one Python call per row and per address. We walk
 * the same rows in the same order, but the addresses come from the fold geometry of timing/systolic.h and
 * the operand address formulas of operand_matrix.py, and each buffer is a small state machine:
 *
 *   ss_rd_calc  read buffer in CALC mode (read_buffer_estimate_bw.py): never stalls; counts DRAM reads.
 *               Its set bookkeeping reduces to "epochs": an address is fetched again once 50 sets of
 *               floor(SRAM words / 100) distinct addresses have been seen since it was last fetched.
 *   ss_rd_user  read buffer in USER mode (read_buffer.py): the operand's prefetch matrix cut into sets of
 *               ceil(SRAM words / 100) addresses; a sliding window of sets is the active buffer; a miss
 *               slides it (a "prefetch") and may stall.
 *   ss_wbuf     the OFMAP write buffer (write_buffer.py), both modes: fills lines of `bandwidth` words,
 *               drains half the SRAM at a time, stalls when full while draining.
 *
 * The walk skips what cannot change a result: with no possible read stall (CALC mode, or USER mode with
 * both operands wholly in the active buffer) the OFMAP is served fold by fold from event to event
 * (ss_wb_fold) and the CALC read counters are replayed per repeated block (ss_calc_stream); operands that
 * cannot miss are not looked at at all. Only USER mode with misses walks every row and address.
 *
 * Oddities of SCALE-Sim that change the numbers are reproduced on purpose and marked "SCALE-Sim:" below;
 * docs/scalesim.md lists them. Where SCALE-Sim would crash we carry on and warn.
 */
#include "compat/scalesim.h"
#include "util/util.h"
#include <string.h>

static int64_t ss_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* ---------------------------------------------------------------------------------------------------------
 * Operand addresses (operand_matrix.py), relative to the operand's offset. The offsets only shift every
 * address of one operand, and each operand has its own buffer, so they never change a result.
 *   ifmap[p][k]  (p: output pixel, k: window element): address of the input element, or -1 where the
 *                window hangs off the IFMAP (SCALE-Sim pads nothing: those lanes idle)
 *   filter[k][n] = n * K + k
 * ------------------------------------------------------------------------------------------------------- */

typedef struct ss_ops {
    int64_t  H, W, P, K, N;
    int64_t  C, fh, fw, sh, sw, eh, ew;   /* channels, filter size, strides, output size */
    int64_t *p_base, *k_int;   /* ifmap[p][k] = p_base[p] + k_int[k] when in bounds */
    int32_t *p_row, *p_col;    /* top-left input row/col of output pixel p's window */
    int32_t *k_row, *k_col;    /* row/col of window element k inside the window */
    int64_t  ifmap_naddr, filter_naddr;
    bool     dense;            /* no window hangs off the IFMAP: every ifmap[p][k] is an address */
    bool     nodup;            /* windows do not overlap: no address appears twice in the ifmap matrix */
} ss_ops;

static void ss_ops_free(ss_ops *o)
{
    ut_free(o->p_base); ut_free(o->k_int);
    ut_free(o->p_row); ut_free(o->p_col);
    ut_free(o->k_row); ut_free(o->k_col);
}

static tpu_status ss_ops_init(tpu_ctx *ctx, const ss_layer *l, ss_ops *o)
{
    memset(o, 0, sizeof *o);
    int64_t eh = ss_cdiv(l->ifmap_h - l->filter_h + l->stride_h, l->stride_h);
    int64_t ew = ss_cdiv(l->ifmap_w - l->filter_w + l->stride_w, l->stride_w);
    o->H = l->ifmap_h;
    o->W = l->ifmap_w;
    o->P = eh * ew;
    o->K = l->filter_h * l->filter_w * l->channels;
    o->N = l->filters;
    int64_t hw, hwc, kn;
    if (__builtin_mul_overflow(l->ifmap_h, l->ifmap_w, &hw) || __builtin_mul_overflow(hw, l->channels, &hwc) ||
        __builtin_mul_overflow(o->K, o->N, &kn) || hwc > ((int64_t)1 << 32) || kn > ((int64_t)1 << 32) ||
        o->P > ((int64_t)1 << 31) || o->K > ((int64_t)1 << 31))
        return ut_err(ctx, TPU_ERR_UNSUPPORTED, "layer '%s' is too large to emulate (more than 2^32 IFMAP or filter "
                      "words)", l->name);
    o->ifmap_naddr = hwc;
    o->filter_naddr = kn;
    o->C = l->channels;
    o->fh = l->filter_h; o->fw = l->filter_w;
    o->sh = l->stride_h; o->sw = l->stride_w;
    o->eh = eh; o->ew = ew;
    o->p_base = ut_malloc((size_t)o->P * sizeof *o->p_base);
    o->p_row = ut_malloc((size_t)o->P * sizeof *o->p_row);
    o->p_col = ut_malloc((size_t)o->P * sizeof *o->p_col);
    o->k_int = ut_malloc((size_t)o->K * sizeof *o->k_int);
    o->k_row = ut_malloc((size_t)o->K * sizeof *o->k_row);
    o->k_col = ut_malloc((size_t)o->K * sizeof *o->k_col);
    if (!o->p_base || !o->p_row || !o->p_col || !o->k_int || !o->k_row || !o->k_col) {
        ss_ops_free(o);
        return ut_nomem(ctx);
    }
    int64_t C = l->channels;
    for (int64_t p = 0; p < o->P; p++) {
        int64_t r = (p / ew) * l->stride_h, c = (p % ew) * l->stride_w;
        o->p_row[p] = (int32_t)r;
        o->p_col[p] = (int32_t)c;
        o->p_base[p] = (r * o->W + c) * C;
    }
    for (int64_t k = 0; k < o->K; k++) {
        int64_t r = k / (l->filter_w * C), rem = k % (l->filter_w * C);
        int64_t c = rem / C, ch = rem % C;
        o->k_row[k] = (int32_t)r;
        o->k_col[k] = (int32_t)c;
        o->k_int[k] = (r * o->W + c) * C + ch;
    }
    o->dense = (eh - 1) * l->stride_h + l->filter_h <= o->H && (ew - 1) * l->stride_w + l->filter_w <= o->W;
    o->nodup = (l->stride_h >= l->filter_h || eh == 1) && (l->stride_w >= l->filter_w || ew == 1);
    return TPU_OK;
}

static inline bool ss_ifmap_valid(const ss_ops *o, int64_t p, int64_t k)
{
    return o->k_row[k] + o->p_row[p] < o->H && o->k_col[k] + o->p_col[p] < o->W;
}

static inline int64_t ss_ifmap(const ss_ops *o, int64_t p, int64_t k)
{
    if (o->k_row[k] + o->p_row[p] < o->H && o->k_col[k] + o->p_col[p] < o->W) return o->p_base[p] + o->k_int[k];
    return -1;
}

/* ---------------------------------------------------------------------------------------------------------
 * Demand rows: lane c of cycle t of a fold carries operand element (x, y), affine in (c, u) where u is the
 * data row (skewed streams) or tile row (block streams) of timing/systolic.h.
 * ------------------------------------------------------------------------------------------------------- */

typedef struct ss_lanemap {
    bool    ifmap;
    int64_t x0, xc, xu, y0, yc, yu;
} ss_lanemap;

static void ss_lanemaps(tim_dataflow df, const tim_array *arr, const tim_fold *f, ss_lanemap *im, ss_lanemap *fm)
{
    int64_t R = arr->rows, C = arr->cols, fr0 = f->fr * R, fc0 = f->fc * C;
    memset(im, 0, sizeof *im);
    memset(fm, 0, sizeof *fm);
    im->ifmap = true;
    switch (df) {
    case TIM_DF_OS:   /* ifmap[fr*R + c][u], filter[u][fc*C + c] */
        im->x0 = fr0; im->xc = 1; im->yu = 1;
        fm->xu = 1; fm->y0 = fc0; fm->yc = 1;
        break;
    case TIM_DF_WS:   /* ifmap[u][fr*R + c], filter[fr*R + row][fc*C + c] */
        im->xu = 1; im->y0 = fr0; im->yc = 1;
        fm->x0 = fr0; fm->xu = 1; fm->y0 = fc0; fm->yc = 1;
        break;
    case TIM_DF_IS:   /* ifmap[fc*C + c][fr*R + row], filter[fr*R + c][u] */
        im->x0 = fc0; im->xc = 1; im->y0 = fr0; im->yu = 1;
        fm->x0 = fr0; fm->xc = 1; fm->yu = 1;
        break;
    }
}

/* The valid addresses (not -1) of stream s at fold cycle t, in lane order; returns their count. Moving one
 * lane right moves (x, y) by (xc - xu, yc - yu) on a skewed stream (u drops by one), (xc, yc) on a block.
 * With `ebuf`, an IFMAP stream gives instead the operand element p * K + k of every busy lane. */
static int64_t ss_gather_e(const ss_ops *o, const tim_stream *s, const ss_lanemap *m, int64_t t, int64_t *buf,
                           int64_t *ebuf)
{
    int64_t c0, c1, n = 0;
    tim_stream_lanes(s, t, &c0, &c1);
    if (c0 > c1) return 0;
    int64_t u = s->skewed ? t - c0 - s->pre : s->n - 1 - t;
    int64_t x = m->x0 + m->xc * c0 + m->xu * u, y = m->y0 + m->yc * c0 + m->yu * u;
    int64_t dx = m->xc - (s->skewed ? m->xu : 0), dy = m->yc - (s->skewed ? m->yu : 0), cnt = c1 - c0 + 1;
    if (!m->ifmap) {
        int64_t a = y * o->K + x, da = dy * o->K + dx;
        for (int64_t i = 0; i < cnt; i++, a += da) buf[i] = a;
        return cnt;
    }
    if (ebuf) {   /* operand elements only, idle ones included */
        int64_t e = x * o->K + y, de = dx * o->K + dy;
        for (int64_t i = 0; i < cnt; i++, e += de) ebuf[i] = e;
        return cnt;
    }
    if (o->dense) {
        for (int64_t i = 0; i < cnt; i++, x += dx, y += dy) buf[i] = o->p_base[x] + o->k_int[y];
        return cnt;
    }
    for (int64_t i = 0; i < cnt; i++, x += dx, y += dy) {
        int64_t a = ss_ifmap(o, x, y);
        if (a >= 0) buf[n++] = a;
    }
    return n;
}

static int64_t ss_gather(const ss_ops *o, const tim_stream *s, const ss_lanemap *m, int64_t t, int64_t *buf)
{
    return ss_gather_e(o, s, m, t, buf, NULL);
}

/* ---------------------------------------------------------------------------------------------------------
 * CALC-mode read buffer (read_buffer_estimate_bw.py)
 *
 * SCALE-Sim groups new addresses into sets of `items` = floor(words/100); a set is "new" unless the address
 * is in the current set or a finished set of the active window. When the 50th set of a window finishes
 * (int(0.5*100) sets; later windows 100-50), the window moves past all of them, so from then on every
 * address counts as new again: epochs of 50*items distinct addresses. Each finished epoch is "prefetched"
 * over the time span of the previous one:
 *   epoch 1: over the ceil(50*items/10) cycles ending at first_request - 2 (bandwidth 10 words/cycle);
 *   epoch k: over [end of epoch k-2 + 1 (or first_request - 1), end of epoch k-1], bandwidth as needed;
 *   the last, unfinished epoch: over the span after epoch k-1, or, if no epoch ever finished, over the
 *   ceil(sets*items/10) cycles ending at cycle -2.
 * DRAM reads = total distinct-per-epoch addresses; the DRAM trace is those spans shifted by the port
 * latency (1).
 * ------------------------------------------------------------------------------------------------------- */

typedef struct ss_rd_calc {
    int64_t   items, sets_active, sets_prefetch, bw, latency;
    int64_t   count, ntrig;
    bool      seen;
    int64_t   first_req;
    int64_t   ls, le;         /* last prefetch span */
    int64_t   num_access;
    bool      has_trace;
    int64_t   tfirst, tlast;
    const char *bad;          /* why SCALE-Sim would crash, or NULL */
} ss_rd_calc;

static void ss_calc_init(ss_rd_calc *b, int64_t words)
{
    memset(b, 0, sizeof *b);
    b->items = words / 100;
    b->sets_active = 50;            /* int(0.5 * 100) */
    b->sets_prefetch = 100 - 50;
    b->bw = 10;                     /* SCALE-Sim: "The number 10 elems per cycle is arbitrary" */
    b->latency = 1;                 /* read_port */
    b->ls = -2;
    b->le = -1;
}

static void ss_calc_emit(ss_rd_calc *b, int64_t ls, int64_t le)
{
    if (le < ls) {
        if (le < ls - 1 && !b->bad) b->bad = "negative prefetch span";
        return;
    }
    if (!b->has_trace) {
        b->tfirst = ls + b->latency;
        b->has_trace = true;
    }
    b->tlast = le + b->latency;
}

static void ss_calc_trigger(ss_rd_calc *b, int64_t cycle)
{
    if (b->ntrig == 0) {
        b->le = b->first_req - 1 - b->latency;
        /* SCALE-Sim: the first fill is timed with the prefetch-window size */
        int64_t cyc = ss_cdiv(b->sets_prefetch * b->items, b->bw);
        b->ls = b->le - cyc + 1;
        ss_calc_emit(b, b->ls, b->le);
        b->num_access += b->sets_active * b->items;
    } else {
        if (b->le - b->ls + 1 <= 0 && !b->bad) b->bad = "two prefetch windows fill in the same cycle (division by zero)";
        ss_calc_emit(b, b->ls, b->le);
        b->num_access += b->sets_prefetch * b->items;
    }
    b->ntrig++;
    b->count = 0;
    b->ls = b->le + 1;
    b->le = cycle;
}

static void ss_calc_complete(ss_rd_calc *b)
{
    int64_t sets = b->count / b->items + (b->count % b->items ? 1 : 0);
    if (b->ntrig == 0) {
        int64_t cyc = ss_cdiv(sets * b->items, b->bw);
        b->le = -1 - b->latency;
        b->ls = b->le - cyc + 1;
    } else if (b->le - b->ls + 1 <= 0 && !b->bad) {
        b->bad = "the last prefetch window is empty (division by zero)";
    }
    ss_calc_emit(b, b->ls, b->le);
    b->num_access += b->count;
    if (!b->has_trace && !b->bad) b->bad = "no DRAM trace";
}

/* ---------------------------------------------------------------------------------------------------------
 * USER-mode read buffer (read_buffer.py)
 *
 * The operand's prefetch matrix (compute/systolic_compute_*.py: the folds stacked, rolled out along
 * anti-diagonals for the skewed operands) is flattened, and its addresses, -1 entries skipped, cut into
 * sets of eps = ceil(words/100) (duplicates count toward eps). The active buffer is the circular window of
 * sets [ws, we), nact = min(ceil(active/eps), sets) wide; a request for an address outside it slides the
 * window by npf sets (a prefetch of ceil(prefetch/bw) lines, each bw words, one per cycle) until it hits.
 * We index, for every address, the sorted list of sets that hold it (CSR), so a hit test is a search.
 * ------------------------------------------------------------------------------------------------------- */

typedef struct ss_pf {
    bool    ifmap, rolled;
    bool    b_is_fc, j_is_y;  /* a fold's block is its column (else row) fold; j is y (else x) */
    int64_t nblocks, blen, width;
    int64_t xb, xj, xc, X;   /* x = xb*b + xj*j + xc*c; -1 entry unless x < X */
    int64_t yb, yj, yc, Y;
} ss_pf;

/* Prefetch-matrix layout per dataflow and operand (create_{ifmap,filter}_prefetch_mat). Row b*blen + j,
 * column c, of a (nblocks*blen) x width matrix. */
static void ss_pf_layout(tim_dataflow df, const tim_array *arr, const tim_systolic_result *r, const ss_ops *o,
                         bool ifmap, ss_pf *pf)
{
    int64_t R = arr->rows, C = arr->cols;
    memset(pf, 0, sizeof *pf);
    pf->ifmap = ifmap;
    if (ifmap) { pf->X = o->P; pf->Y = o->K; } else { pf->X = o->K; pf->Y = o->N; }
    switch (df) {
    case TIM_DF_OS:
        pf->rolled = true;
        if (ifmap) { pf->nblocks = r->row_folds; pf->blen = o->K; pf->width = R; pf->xb = R; pf->xc = 1; pf->yj = 1;
                     pf->j_is_y = true; }
        else       { pf->nblocks = r->col_folds; pf->blen = o->K; pf->width = C; pf->xj = 1; pf->yb = C; pf->yc = 1;
                     pf->b_is_fc = true; }
        break;
    case TIM_DF_WS:
        if (ifmap) { pf->rolled = true; pf->nblocks = r->row_folds; pf->blen = o->P; pf->width = R;
                     pf->xj = 1; pf->yb = R; pf->yc = 1; }
        else       { pf->rolled = false; pf->nblocks = r->col_folds; pf->blen = o->K; pf->width = C;
                     pf->xj = 1; pf->yb = C; pf->yc = 1; pf->b_is_fc = true; }
        break;
    case TIM_DF_IS:
        if (ifmap) { pf->rolled = false; pf->nblocks = r->col_folds; pf->blen = o->K; pf->width = C;
                     pf->xb = C; pf->xc = 1; pf->yj = 1; pf->b_is_fc = true; pf->j_is_y = true; }
        else       { pf->rolled = true; pf->nblocks = r->row_folds; pf->blen = o->N; pf->width = R;
                     pf->xb = R; pf->xc = 1; pf->yj = 1; pf->j_is_y = true; }
        break;
    }
}

typedef struct ss_rd_user {
    int64_t  words, active, prefetch, bw, eps;
    int64_t  nsets, nact, npf, ws, we;
    const ss_ops *o;
    bool     plain;          /* no idle entry, no repeated address: positions follow in closed form */
    ss_pf    pf;             /* plain: the prefetch matrix layout */
    int64_t  pm, pr0, pul;   /* plain: matrix rows, first row of the last block, its used lanes */
    int32_t  *self;          /* overlapping IFMAP windows: the set of each operand element p * K + k (-1: none) */
    uint16_t *selfs;         /* the same in 16 bits when it fits (0xffff: none) */
    int32_t *set1;           /* instead of the CSR when no address occurs twice: its set, or -1 */
    uint16_t *set1s;         /* the same in 16 bits when there are fewer than 65535 sets (0xffff: none) */
    int64_t  fetch_lines, nl_act, nl_pf;
    bool     all_hit;        /* the active window holds every set: no request can miss */
    bool     started;
    int64_t  last_pf, num_access, tmin, tmax;
    const char *bad;
} ss_rd_user;

/* Visits the prefetch matrix in SCALE-Sim's order and records each entry's set: by operand element (pass 1,
 * when addresses repeat) or by address (pass 2). ss_pf_walk returns the number of valid entries. */
typedef struct ss_pf_cursor {
    int64_t vi;     /* valid entries so far */
    int64_t set;    /* vi / eps, kept incrementally */
    int64_t left;   /* entries until the next set */
} ss_pf_cursor;

static inline void ss_pf_visit(const ss_ops *o, const ss_pf *pf, ss_rd_user *u, int pass, int64_t b, int64_t j,
                               int64_t c, ss_pf_cursor *cur)
{
    int64_t x = pf->xb * b + pf->xj * j + pf->xc * c, y = pf->yb * b + pf->yj * j + pf->yc * c;
    if (x >= pf->X || y >= pf->Y) return;   /* padding lane */
    if (pass == 1) {
        if (!ss_ifmap_valid(o, x, y)) return;
        if (u->selfs) u->selfs[x * o->K + y] = (uint16_t)cur->set;
        else u->self[x * o->K + y] = (int32_t)cur->set;
    } else {
        int64_t a = !pf->ifmap ? y * o->K + x : o->dense ? o->p_base[x] + o->k_int[y] : ss_ifmap(o, x, y);
        if (a < 0) return;
        if (u->set1s) u->set1s[a] = (uint16_t)cur->set;
        else u->set1[a] = (int32_t)cur->set;
    }
    cur->vi++;
    if (--cur->left == 0) {
        cur->set++;
        cur->left = u->eps;
    }
}

static int64_t ss_pf_walk(const ss_ops *o, const ss_pf *pf, ss_rd_user *u, int pass)
{
    int64_t M = pf->nblocks * pf->blen, Wd = pf->width;
    ss_pf_cursor cur = {0, 0, u->eps};
    if (!pf->rolled) {
        for (int64_t b = 0; b < pf->nblocks; b++)
            for (int64_t j = 0; j < pf->blen; j++)
                for (int64_t c = 0; c < Wd; c++) ss_pf_visit(o, pf, u, pass, b, j, c, &cur);
        return cur.vi;
    }
    /* anti-diagonal d: rows from min(d, M-1) down to max(0, d-Wd+1), column d - row */
    for (int64_t d = 0; d < M + Wd - 1; d++) {
        int64_t r = d < M - 1 ? d : M - 1, rlo = d - Wd + 1 > 0 ? d - Wd + 1 : 0;
        int64_t b = r / pf->blen, j = r % pf->blen;
        for (; r >= rlo; r--) {
            ss_pf_visit(o, pf, u, pass, b, j, d - r, &cur);
            if (--j < 0) { j = pf->blen - 1; b--; }
        }
    }
    return cur.vi;
}

/* Sum over i in [0, count) of clamp(x - i, 0, width). */
static int64_t ss_clamp_sum(int64_t x, int64_t count, int64_t width)
{
    int64_t sum = 0, full = x - width + 1;   /* i <= x - width contribute width */
    if (full > count) full = count;
    if (full > 0) sum += full * width;
    int64_t lo = x - width + 1 > 0 ? x - width + 1 : 0, hi = x < count ? x : count;   /* 0 < x - i < width */
    if (hi > lo) sum += (hi - lo) * x - (lo + hi - 1) * (hi - lo) / 2;
    return sum;
}

/* Position among the valid entries of the prefetch matrix of the entry at row r, column c (plain streams:
 * the only invalid entries are the padding rectangle rows [pr0, pm) x columns [pul, width)). */
static int64_t ss_user_pos(const ss_rd_user *u, int64_t r, int64_t c)
{
    int64_t M = u->pm, W = u->pf.width, R0 = u->pr0, ul = u->pul;
    if (!u->pf.rolled) return r * W + c - (r > R0 ? (r - R0) * (W - ul) : 0);
    /* anti-diagonals d = r + c in order, rows descending within one */
    int64_t d = r + c, pos = ss_clamp_sum(d, M, W) + ((d < M - 1 ? d : M - 1) - r);
    if (ul < W) {
        pos -= ss_clamp_sum(d - R0 - ul, M - R0, W - ul);   /* padding on earlier diagonals */
        int64_t lo = r + 1, hi = d - ul < M - 1 ? d - ul : M - 1;   /* padding earlier on this diagonal */
        if (lo < R0) lo = R0;
        if (lo < d - W + 1) lo = d - W + 1;
        if (hi >= lo) pos -= hi - lo + 1;
    }
    return pos;
}

static void ss_user_free(ss_rd_user *u)
{
    ut_free(u->self);
    ut_free(u->selfs);
    ut_free(u->set1);
    ut_free(u->set1s);
}

/* Valid entries of a prefetch matrix: each operand element appears once (padding lanes are -1), so this
 * is K*N for the filter and the number of in-bounds (p, k) pairs for the IFMAP. The in-bounds test splits
 * into a row part and a column part: count = C * #{(output row, filter row) in bounds} * #{(output col,
 * filter col) in bounds}. */
static int64_t ss_pf_valid(const ss_ops *o, const ss_layer *l, bool ifmap)
{
    if (!ifmap) return o->K * o->N;
    if (o->dense) return o->P * o->K;
    int64_t eh = ss_cdiv(l->ifmap_h - l->filter_h + l->stride_h, l->stride_h);
    int64_t ew = ss_cdiv(l->ifmap_w - l->filter_w + l->stride_w, l->stride_w);
    int64_t rows = 0, cols = 0;
    for (int64_t e = 0; e < eh; e++) {
        int64_t room = l->ifmap_h - e * l->stride_h;   /* SCALE-Sim's ceil() can start a window past the edge */
        rows += room <= 0 ? 0 : room < l->filter_h ? room : l->filter_h;
    }
    for (int64_t e = 0; e < ew; e++) {
        int64_t room = l->ifmap_w - e * l->stride_w;
        cols += room <= 0 ? 0 : room < l->filter_w ? room : l->filter_w;
    }
    return rows * cols * l->channels;
}

static tpu_status ss_user_init(tpu_ctx *ctx, ss_rd_user *u, const ss_ops *o, const ss_pf *pf, int64_t naddr,
                               int64_t words, int64_t bw, int64_t valid, bool single_known, bool plain)
{
    memset(u, 0, sizeof *u);
    u->words = words;
    u->active = ss_cdiv(words, 2);          /* int(math.ceil(words * 0.5)) */
    u->prefetch = words - u->active;
    u->bw = bw;
    u->eps = ss_cdiv(words, 100);
    int64_t ne;
    if (__builtin_mul_overflow(pf->nblocks * pf->blen, pf->width, &ne) || ne > ((int64_t)1 << 34) ||
        valid >= ((int64_t)1 << 31))
        return ut_err(ctx, TPU_ERR_UNSUPPORTED, "operand too large for the USER-mode emulation");
    u->fetch_lines = ss_cdiv(ne, bw);
    u->nsets = valid / u->eps + 1;   /* the last (possibly empty) set is kept */
    int64_t max_act = ss_cdiv(u->active, u->eps), max_pf = ss_cdiv(u->prefetch, u->eps);
    u->nact = u->nsets > max_act ? max_act : u->nsets;
    u->npf = u->nsets - u->nact > max_pf ? max_pf : u->nsets - u->nact;
    u->ws = 0;
    u->we = u->nact;   /* SCALE-Sim: no modulo for the first window */
    u->nl_act = ss_cdiv(u->active, bw);
    if (!(u->nl_act < u->fetch_lines)) u->nl_act = u->fetch_lines;
    u->nl_pf = ss_cdiv(u->prefetch, bw);
    u->all_hit = u->nact == u->nsets;
    if (u->all_hit) return TPU_OK;   /* no need to know where each address lives */
    if (plain) {
        /* Every entry is a distinct address except the padding lanes of the last block: an entry's set is
         * its position among the valid entries / eps, in closed form (ss_user_pos). */
        u->plain = true;
        u->pf = *pf;
        u->pm = pf->nblocks * pf->blen;
        u->pr0 = (pf->nblocks - 1) * pf->blen;
        for (u->pul = 0; u->pul < pf->width; u->pul++) {
            int64_t b = pf->nblocks - 1, c = u->pul;
            if (pf->xb * b + pf->xc * c >= pf->X || pf->yb * b + pf->yc * c >= pf->Y) break;
        }
        return TPU_OK;
    }
    if (single_known) {
        /* Filters and non-overlapping IFMAP windows: one set per address, one load per lookup (16-bit when
         * the set ids fit, which halves the memory traffic). */
        size_t isz = u->nsets < 0xffff ? sizeof *u->set1s : sizeof *u->set1;
        void *p = ut_malloc((size_t)(naddr ? naddr : 1) * isz);
        if (!p) return ut_nomem(ctx);
        memset(p, 0xff, (size_t)naddr * isz);
        if (isz == sizeof *u->set1s) u->set1s = p; else u->set1 = p;
        ss_pf_walk(o, pf, u, 2);
        return TPU_OK;
    }
    /* Overlapping conv windows: an address is in several (window, element) pairs. Record the set of every
     * pair; a lookup checks the pairs of the address, which follow from the conv geometry (ss_user_hit). */
    int64_t pk = o->P * o->K;
    size_t isz = u->nsets < 0xffff ? sizeof *u->selfs : sizeof *u->self;
    void *p = ut_malloc((size_t)(pk ? pk : 1) * isz);
    if (!p) return ut_nomem(ctx);
    memset(p, 0xff, (size_t)pk * isz);
    if (isz == sizeof *u->selfs) u->selfs = p; else u->self = p;
    u->o = o;
    int64_t v = ss_pf_walk(o, pf, u, 1);
    if (v != valid)
        return ut_err(ctx, TPU_ERR_INTERNAL, "prefetch matrix has %lld addresses, expected %lld", (long long)v,
                      (long long)valid);
    return TPU_OK;
}

static inline bool ss_user_in_window(const ss_rd_user *u, int64_t x)
{
    return u->ws < u->we ? x >= u->ws && x < u->we : x >= u->ws || x < u->we;
}

static inline int64_t ss_user_self(const ss_rd_user *u, int64_t e)
{
    if (u->selfs) {
        int64_t x = u->selfs[e];
        return x == 0xffff ? -1 : x;
    }
    return u->self[e];
}

/* Is address a in a set of the active window (circular [ws, we); ws == we: all sets)? */
static inline bool ss_user_hit(const ss_rd_user *u, int64_t a)
{
    if (u->set1s) {
        int64_t x = u->set1s[a];
        return x != 0xffff && ss_user_in_window(u, x);
    }
    if (u->set1) {
        int64_t x = u->set1[a];
        return x >= 0 && ss_user_in_window(u, x);
    }
    /* input pixel (h, w, ch) sits at row h - er*sh, column w - ec*sw of every window (er, ec) covering it */
    const ss_ops *o = u->o;
    int64_t ch = a % o->C, w = (a / o->C) % o->W, h = a / (o->C * o->W);
    int64_t er0 = h - o->fh + 1 > 0 ? (h - o->fh + o->sh) / o->sh : 0, er1 = h / o->sh;
    int64_t ec0 = w - o->fw + 1 > 0 ? (w - o->fw + o->sw) / o->sw : 0, ec1 = w / o->sw;
    if (er1 >= o->eh) er1 = o->eh - 1;
    if (ec1 >= o->ew) ec1 = o->ew - 1;
    for (int64_t er = er0; er <= er1; er++)
        for (int64_t ec = ec0; ec <= ec1; ec++) {
            int64_t pp = er * o->ew + ec, k = ((h - er * o->sh) * o->fw + (w - ec * o->sw)) * o->C + ch;
            int64_t x = ss_user_self(u, pp * o->K + k);
            if (x >= 0 && ss_user_in_window(u, x)) return true;
        }
    return false;
}

/* prefetch_active_buffer(), on the first row: lines at cycles ending just before it */
static void ss_user_start(ss_rd_user *u, int64_t cycle)
{
    if (u->started) return;
    u->started = true;
    u->num_access += u->nl_act * u->bw;
    u->tmin = cycle - u->nl_act;
    u->tmax = cycle - 1;
    u->last_pf = cycle - 1;
}

/* new_prefetch(): the window slides; the request waits for the prefetch (offset: see below). */
static inline void ss_user_prefetch(ss_rd_user *u, int64_t cycle, int64_t *off)
{
    u->ws = (u->ws + u->npf) % u->nsets;
    u->we = (u->ws + u->nact) % u->nsets;
    u->num_access += u->nl_pf * u->bw;
    u->last_pf += u->nl_pf + 1;
    u->tmax = u->last_pf;
    int64_t p = u->last_pf - (cycle + *off);
    /* SCALE-Sim: the offset moves by p whatever its sign, then by p again when p > 0 */
    *off += p;
    if (p > 0) *off += p;
}

/* One more new_prefetch() while a wanted set is not yet in the window; false (u->bad set) when it never
 * will be. */
static inline bool ss_user_slide(ss_rd_user *u, int64_t cycle, int64_t *off, int64_t *guard)
{
    if (++*guard > u->nsets + 2) {
        if (!u->bad) u->bad = "an address never enters the active buffer";
        return false;
    }
    ss_user_prefetch(u, cycle, off);
    return true;
}

/* Serves one demand row; returns the offset SCALE-Sim adds to the cycle (1 + stalls). The row is either n
 * addresses (a), or n operand elements (e, overlapping IFMAP windows) of which the idle ones (-1 in
 * SCALE-Sim's matrix: no set recorded) are skipped; *valid counts the requests. */
static int64_t ss_user_service(ss_rd_user *u, const int64_t *a, const int64_t *e, int64_t n, int64_t cycle,
                               int64_t *valid)
{
    ss_user_start(u, cycle);
    int64_t off = 1, nv = 0;   /* hit latency */
    for (int64_t i = 0; i < n; i++) {
        int64_t addr;
        if (e) {
            /* the element's own place in the prefetch order is where the window usually is */
            int64_t x = ss_user_self(u, e[i]);
            if (x < 0) continue;
            nv++;
            if (ss_user_in_window(u, x)) continue;
            const ss_ops *o = u->o;
            addr = o->p_base[e[i] / o->K] + o->k_int[e[i] % o->K];
        } else {
            nv++;
            addr = a[i];
        }
        for (int64_t guard = 0; !ss_user_hit(u, addr) && ss_user_slide(u, cycle, &off, &guard);) {}
    }
    *valid = nv;
    return off;
}

/* The same for n consecutive entries of a plain stream starting at position pos0: they fall in a few
 * consecutive sets, and within a set only the first entry can miss. */
static int64_t ss_user_service_run(ss_rd_user *u, int64_t pos0, int64_t n, int64_t cycle)
{
    ss_user_start(u, cycle);
    int64_t off = 1;
    if (n <= 0) return off;
    for (int64_t set = pos0 / u->eps, last = (pos0 + n - 1) / u->eps; set <= last; set++) {
        for (int64_t guard = 0; !ss_user_in_window(u, set) && ss_user_slide(u, cycle, &off, &guard);) {}
    }
    return off;
}

/* ---------------------------------------------------------------------------------------------------------
 * OFMAP write buffer (write_buffer.py)
 *
 * Words are packed into lines of `bw`; full lines collect in a cache that joins the drainable trace every
 * 1024 lines, or when a drain starts (which also flushes the partial line, padded with -1). A drain takes
 * the next ceil(drain/bw) trace lines, one per cycle, and frees n*bw words minus the -1 padding of its last
 * line only (SCALE-Sim: padding inside a chunk is counted as data). Drains start when the free space falls
 * below the active half and no drain is running; a write to a full buffer during a drain waits for it.
 * ------------------------------------------------------------------------------------------------------- */

typedef struct ss_wbuf {
    int64_t  total, active, drain, bw;
    int64_t  free_space, line_idx;
    int64_t  nlines, ntrace;
    int64_t *ppos, *pcnt;   /* partial lines: index and valid words, ascending */
    int64_t  np, pcap, pcur;
    int64_t  drain_line, drain_end;
    int64_t  num_access, first, last;
    bool     drained, nomem;
    const char *bad;
} ss_wbuf;

static void ss_wb_init(ss_wbuf *w, int64_t words, int64_t bw)
{
    memset(w, 0, sizeof *w);
    w->total = words;
    w->active = ss_cdiv(words, 2);
    w->drain = words - w->active;
    w->bw = bw;
    w->free_space = words;
}

static void ss_wb_bulk(ss_wbuf *w, int64_t m)
{
    w->free_space -= m;
    w->line_idx += m;
    int64_t full = w->line_idx / w->bw;
    w->line_idx %= w->bw;
    w->nlines += full;
    w->ntrace += (w->nlines - w->ntrace) / 1024 * 1024;   /* the cache joins the trace at 1024 lines */
}

static void ss_wb_force(ss_wbuf *w)
{
    if (w->line_idx) {
        if (w->np == w->pcap) {
            int64_t nc = w->pcap ? 2 * w->pcap : 64;
            int64_t *a = ut_realloc(w->ppos, (size_t)nc * sizeof *a);
            if (a) w->ppos = a;
            int64_t *b = a ? ut_realloc(w->pcnt, (size_t)nc * sizeof *b) : NULL;
            if (b) w->pcnt = b;
            if (!a || !b) {
                w->nomem = true;
                return;
            }
            w->pcap = nc;
        }
        w->ppos[w->np] = w->nlines;
        w->pcnt[w->np++] = w->line_idx;
        w->nlines++;
        w->line_idx = 0;
    }
    w->ntrace = w->nlines;
}

static int64_t ss_wb_drain(ss_wbuf *w, int64_t start)
{
    int64_t end = w->drain_line + ss_cdiv(w->drain, w->bw);
    if (end > w->ntrace) end = w->ntrace;
    int64_t n = end - w->drain_line;
    if (n <= 0) {
        if (!w->bad) w->bad = "an OFMAP drain with nothing to drain";
        return start;
    }
    while (w->pcur < w->np && w->ppos[w->pcur] < end - 1) w->pcur++;
    int64_t last_valid = w->pcur < w->np && w->ppos[w->pcur] == end - 1 ? w->pcnt[w->pcur] : w->bw;
    int64_t data = n * w->bw - (w->bw - last_valid);
    w->num_access += data;
    w->free_space += data;
    /* the trace spans min..max: the final drain may start before an earlier one ends */
    if (!w->drained || start < w->first) w->first = start;
    if (!w->drained || start + n - 1 > w->last) w->last = start + n - 1;
    w->drained = true;
    w->drain_line = end;
    return start + n - 1;   /* write port latency 0 */
}

/* Serves `count` writes at `cycle`; returns the cycle SCALE-Sim reports for the row (cycle + stalls). */
static int64_t ss_wb_service(ss_wbuf *w, int64_t count, int64_t cycle)
{
    int64_t cur = cycle;
    while (count > 0) {
        if (cur < w->drain_end) {
            int64_t safe = w->free_space - 1;   /* writes that leave the buffer with room */
            if (safe > 0) {
                int64_t m = safe < count ? safe : count;
                ss_wb_bulk(w, m);
                count -= m;
                continue;
            }
            ss_wb_bulk(w, 1);
            count--;
            cur = w->drain_end;   /* full while draining: wait for the drain */
        } else {
            int64_t safe = w->free_space - w->active;
            if (safe > 0) {
                int64_t m = safe < count ? safe : count;
                ss_wb_bulk(w, m);
                count -= m;
                continue;
            }
            ss_wb_bulk(w, 1);
            count--;
            ss_wb_force(w);
            w->drain_end = ss_wb_drain(w, cur);
        }
    }
    return cur;
}

static void ss_wb_empty_all(ss_wbuf *w, int64_t cycle)
{
    ss_wb_force(w);
    while (w->drain_line < w->ntrace) {
        int64_t before = w->drain_line;
        w->drain_end = ss_wb_drain(w, cycle);
        cycle = w->drain_end + 1;
        if (w->drain_line == before) break;
    }
    if (!w->drained && !w->bad) w->bad = "no OFMAP DRAM trace";
}

/* ---------------------------------------------------------------------------------------------------------
 * CALC-mode read streams without walking every address
 *
 * In CALC mode reads never stall, so a read stream only has to be replayed for its DRAM counters, and its
 * epochs depend only on the order of addresses. Each stream is a sequence of groups; a group is one block of
 * folds repeated `reps` times (same addresses, same order), and different groups share no address:
 *   os ifmap, ws ifmap, is filter: 1 group, block = the row folds of column fold 0, reps = column folds
 *   os filter: one group per column fold, block = one fold, reps = row folds
 *   ws filter, is ifmap: 1 group, block = every fold, reps = 1 (each element is read once)
 * Within a group, an epoch starting at position s ends at f(s) = the first e with E distinct addresses in
 * [s, e]; f(s + P) = f(s) + P for a block of P addresses, and f is non-decreasing, so one two-pointer sweep
 * over two copies of the block gives f on [0, P) and the epoch chain then jumps from trigger to trigger.
 * Cost: O(addresses in the blocks) instead of O(all SRAM reads).
 * ------------------------------------------------------------------------------------------------------- */

typedef struct ss_block {
    uint32_t *a;              /* the block's valid addresses in stream order */
    int64_t   n, cap;
    int64_t  *rrow, *rcum;    /* rows holding addresses: row (from the block's start), addresses before it */
    int64_t   nr, rcap;
} ss_block;

static bool ss_block_push_row(ss_block *b, int64_t row, const int64_t *a, int64_t n)
{
    if (a && b->n + n > b->cap) {
        int64_t nc = b->cap ? b->cap : 1024;
        while (nc < b->n + n) nc *= 2;
        uint32_t *x = ut_realloc(b->a, (size_t)nc * sizeof *x);
        if (!x) return false;
        b->a = x;
        b->cap = nc;
    }
    if (b->nr == b->rcap) {
        int64_t nc = b->rcap ? 2 * b->rcap : 1024;
        int64_t *r = ut_realloc(b->rrow, (size_t)nc * sizeof *r);
        if (r) b->rrow = r;
        int64_t *c = r ? ut_realloc(b->rcum, (size_t)nc * sizeof *c) : NULL;
        if (c) b->rcum = c;
        if (!r || !c) return false;
        b->rcap = nc;
    }
    b->rrow[b->nr] = row;
    b->rcum[b->nr++] = b->n;
    if (a)
        for (int64_t i = 0; i < n; i++) b->a[b->n++] = (uint32_t)a[i];
    else
        b->n += n;   /* counting only */
    return true;
}

/* Row (from the block's start) of the address at position pos. */
static int64_t ss_block_row(const ss_block *b, int64_t pos)
{
    int64_t lo = 0, hi = b->nr - 1;
    while (lo < hi) {
        int64_t m = lo + (hi - lo + 1) / 2;
        if (b->rcum[m] <= pos) lo = m; else hi = m - 1;
    }
    return b->rrow[lo];
}

/* Stall bookkeeping of the row walk: cycle of row = row + stalls added by earlier rows. */
typedef struct ss_stalls {
    int64_t *row, *cum;   /* after row[i], the total stall is cum[i] */
    int64_t  n, cap;
} ss_stalls;

static bool ss_stalls_add(ss_stalls *s, int64_t row, int64_t cum)
{
    if (s->n == s->cap) {
        int64_t nc = s->cap ? 2 * s->cap : 64;
        int64_t *r = ut_realloc(s->row, (size_t)nc * sizeof *r);
        if (r) s->row = r;
        int64_t *c = r ? ut_realloc(s->cum, (size_t)nc * sizeof *c) : NULL;
        if (c) s->cum = c;
        if (!r || !c) return false;
        s->cap = nc;
    }
    s->row[s->n] = row;
    s->cum[s->n++] = cum;
    return true;
}

static int64_t ss_cycle_of_row(const ss_stalls *s, int64_t row)
{
    int64_t lo = 0, hi = s->n;   /* first event with event row >= row */
    while (lo < hi) {
        int64_t m = lo + (hi - lo) / 2;
        if (s->row[m] < row) lo = m + 1; else hi = m;
    }
    return row + (lo ? s->cum[lo - 1] : 0);
}

typedef struct ss_calc_job {
    const ss_ops          *o;
    const tim_array       *arr;
    tim_dataflow           df;
    const tim_systolic_result *sys;
    bool                   ifmap;
    const ss_stalls       *stalls;
    int64_t                naddr;
    int64_t                sram_first_row, sram_last_row;   /* out: rows of the first and last address */
} ss_calc_job;

/* Distinct addresses among n positions from `start` of the periodic block (stamps: generation `gen`). */
static int64_t ss_window_distinct(const ss_block *b, uint32_t *stamp, uint32_t gen, int64_t start, int64_t n)
{
    int64_t d = 0, P = b->n, i = start % P;
    for (int64_t k = 0; k < n; k++) {
        uint32_t a = b->a[i];
        if (stamp[a] != gen) { stamp[a] = gen; d++; }
        if (++i == P) i = 0;
    }
    return d;
}

static tpu_status ss_calc_stream(tpu_ctx *ctx, ss_rd_calc *rb, ss_calc_job *job)
{
    const tim_systolic_result *sys = job->sys;
    int64_t L = sys->fold_cycles, ngroups = 1, reps, bfolds;
    bool os_filter = job->df == TIM_DF_OS && !job->ifmap;
    bool once = (job->df == TIM_DF_WS && !job->ifmap) || (job->df == TIM_DF_IS && job->ifmap);
    if (os_filter) { ngroups = sys->col_folds; bfolds = 1; reps = sys->row_folds; }
    else if (once) { bfolds = sys->folds; reps = 1; }
    else { bfolds = sys->row_folds; reps = sys->col_folds; }
    int64_t rows_per_block = bfolds * L;
    /* Filters, and IFMAPs whose windows neither overlap nor hang off the edge (GEMMs), have no repeated
     * address and no idle lane inside a block: every window of up to P addresses is all new, and epochs
     * are exactly E addresses long. */
    bool plain = !job->ifmap || (job->o->dense && job->o->nodup);

    ss_block blk;
    memset(&blk, 0, sizeof blk);
    int64_t lanes = job->arr->rows > job->arr->cols ? job->arr->rows : job->arr->cols;
    int64_t *buf = ut_malloc((size_t)lanes * sizeof *buf);
    bool direct = !plain && reps <= 3;   /* see below */
    uint32_t *stamp = plain ? NULL : ut_calloc((size_t)job->naddr, sizeof *stamp);
    uint32_t *cnt = plain || direct ? NULL : ut_calloc((size_t)job->naddr, sizeof *cnt);
    uint32_t *f = NULL;
    uint32_t gen = 0;
    tpu_status st = TPU_OK;
    if (!buf || (!plain && !stamp) || (!plain && !direct && !cnt)) { st = ut_nomem(ctx); goto done; }
    job->sram_first_row = job->sram_last_row = -1;

    if (direct) {
        /* Few repeats: replaying the stream address by address is cheaper than the two-pointer sweep. */
        ++gen;
        int64_t E = (rb->ntrig ? rb->sets_prefetch : rb->sets_active) * rb->items;
        for (int64_t g = 0; g < ngroups; g++)
            for (int64_t r = 0; r < reps; r++)
                for (int64_t fi = 0; fi < bfolds; fi++) {
                    int64_t fr, fc;
                    if (os_filter) { fr = 0; fc = g; }
                    else if (once) { fc = fi / sys->row_folds; fr = fi % sys->row_folds; }
                    else { fr = fi; fc = 0; }
                    tim_fold fold;
                    ss_lanemap im, fm;
                    tim_systolic_fold(job->arr, job->df, sys, fr, fc, &fold);
                    ss_lanemaps(job->df, job->arr, &fold, &im, &fm);
                    const tim_stream *s = job->ifmap ? &fold.ifmap : &fold.filter;
                    int64_t t0, t1;
                    tim_stream_rows(s, &t0, &t1);
                    for (int64_t t = t0; t < t1; t++) {
                        int64_t n = ss_gather(job->o, s, job->ifmap ? &im : &fm, t, buf);
                        if (!n) continue;
                        int64_t row = (os_filter ? g * sys->row_folds * L : 0) + r * rows_per_block + fi * L + t;
                        if (!rb->seen) {
                            rb->seen = true;
                            rb->first_req = ss_cycle_of_row(job->stalls, row);
                            job->sram_first_row = row;
                        }
                        job->sram_last_row = row;
                        for (int64_t i = 0; i < n; i++) {
                            uint32_t *sp = &stamp[buf[i]];
                            if (*sp == gen) continue;
                            *sp = gen;
                            if (++rb->count == E) {
                                ss_calc_trigger(rb, ss_cycle_of_row(job->stalls, row));
                                ++gen;
                                E = rb->sets_prefetch * rb->items;
                            }
                        }
                    }
                }
        goto done;
    }

    for (int64_t g = 0; g < ngroups; g++) {
        /* build the block */
        blk.n = blk.nr = 0;
        for (int64_t fi = 0; fi < bfolds; fi++) {
            int64_t fr, fc;
            if (os_filter) { fr = 0; fc = g; }
            else if (once) { fc = fi / sys->row_folds; fr = fi % sys->row_folds; }
            else { fr = fi; fc = 0; }
            tim_fold fold;
            ss_lanemap im, fm;
            tim_systolic_fold(job->arr, job->df, sys, fr, fc, &fold);
            ss_lanemaps(job->df, job->arr, &fold, &im, &fm);
            const tim_stream *s = job->ifmap ? &fold.ifmap : &fold.filter;
            const ss_lanemap *m = job->ifmap ? &im : &fm;
            int64_t t0, t1;
            tim_stream_rows(s, &t0, &t1);
            for (int64_t t = t0; t < t1; t++) {
                int64_t n, c0, c1;
                if (plain) {
                    tim_stream_lanes(s, t, &c0, &c1);
                    n = c1 >= c0 ? c1 - c0 + 1 : 0;
                } else {
                    n = ss_gather(job->o, s, m, t, buf);
                }
                if (n && !ss_block_push_row(&blk, fi * L + t, plain ? NULL : buf, n)) { st = ut_nomem(ctx); goto done; }
            }
        }
        int64_t P = blk.n;
        if (!P) continue;
        int64_t gbase = os_filter ? g * sys->row_folds * L : 0;
#define SS_ROW_AT(pos) (gbase + ((pos) / P) * rows_per_block + ss_block_row(&blk, (pos) % P))
#define SS_CYCLE_AT(pos) ss_cycle_of_row(job->stalls, SS_ROW_AT(pos))
        if (!rb->seen) {
            rb->seen = true;
            rb->first_req = SS_CYCLE_AT(0);
            job->sram_first_row = SS_ROW_AT(0);
        }
        job->sram_last_row = SS_ROW_AT(reps * P - 1);
        int64_t Lg = reps * P, pos = 0;
        int64_t E = (rb->ntrig ? rb->sets_prefetch : rb->sets_active) * rb->items;
        if (plain) {
            if (rb->count > 0) {
                int64_t need = E - rb->count;
                if (P < need) {
                    rb->count += P;
                    continue;
                }
                ss_calc_trigger(rb, SS_CYCLE_AT(need - 1));
                pos = need;
                E = rb->sets_prefetch * rb->items;
            }
            if (P < E) {
                rb->count = Lg - pos >= P ? P : Lg - pos;
                continue;
            }
            for (; pos + E - 1 < Lg; pos += E) ss_calc_trigger(rb, SS_CYCLE_AT(pos + E - 1));
            rb->count = Lg - pos;
            continue;
        }
        int64_t D = ss_window_distinct(&blk, stamp, ++gen, 0, P);
        if (rb->count > 0) {
            /* an epoch continues from the previous group (whose addresses are all different) */
            int64_t need = E - rb->count;
            if (D < need) {
                rb->count += D;
                continue;
            }
            int64_t e = 0, d = 0;
            ++gen;
            for (;; e++) {
                uint32_t a = blk.a[e];
                if (stamp[a] != gen) { stamp[a] = gen; if (++d == need) break; }
            }
            ss_calc_trigger(rb, SS_CYCLE_AT(e));
            pos = e + 1;
            E = rb->sets_prefetch * rb->items;
        }
        if (D < E) {
            rb->count = Lg - pos >= P ? D : ss_window_distinct(&blk, stamp, ++gen, pos, Lg - pos);
            continue;
        }
        /* f(s) for s in [0, P): two pointers over the block repeated */
        ut_free(f);
        f = ut_malloc((size_t)P * sizeof *f);
        if (!f) { st = ut_nomem(ctx); goto done; }
        {
            int64_t e = -1, ei = -1, d = 0;   /* ei = e mod P */
            for (int64_t s0 = 0; s0 < P; s0++) {
                while (d < E) {
                    e++;
                    if (++ei == P) ei = 0;
                    if (cnt[blk.a[ei]]++ == 0) d++;
                }
                f[s0] = (uint32_t)(e - s0);
                if (--cnt[blk.a[s0]] == 0) d--;
            }
            for (int64_t k = P; k <= e; k++) cnt[blk.a[k % P]]--;   /* leave cnt all zero */
        }
        while (pos < Lg) {
            int64_t e = pos + f[pos % P];
            if (e >= Lg) break;
            ss_calc_trigger(rb, SS_CYCLE_AT(e));
            pos = e + 1;
        }
        rb->count = pos < Lg ? ss_window_distinct(&blk, stamp, ++gen, pos, Lg - pos) : 0;
#undef SS_ROW_AT
#undef SS_CYCLE_AT
    }
done:
    ut_free(buf);
    ut_free(stamp);
    ut_free(cnt);
    ut_free(f);
    ut_free(blk.a);
    ut_free(blk.rrow);
    ut_free(blk.rcum);
    return st;
}

/* ---------------------------------------------------------------------------------------------------------
 * The layer
 * ------------------------------------------------------------------------------------------------------- */

typedef struct ss_sram_span {
    bool    seen;
    int64_t start, stop;
} ss_sram_span;

static inline void ss_span(ss_sram_span *s, int64_t cyc)
{
    if (!s->seen) {
        s->seen = true;
        s->start = cyc;
    }
    s->stop = cyc;
}

/* Addresses a skewed stream carries in fold rows [0, t): lane c is busy for rows [pre + c, pre + c + n). */
static int64_t ss_stream_prefix(const tim_stream *s, int64_t t)
{
    int64_t x = t - s->pre, n = s->n, used = s->used, sum = 0;
    int64_t full = x - n + 1;   /* lanes c <= x - n are done */
    if (full > used) full = used;
    if (full > 0) sum += full * n;
    int64_t lo = x - n + 1 > 0 ? x - n + 1 : 0, hi = x < used ? x : used;   /* lanes in flight: [lo, hi) */
    if (hi > lo) sum += (hi - lo) * x - (lo + hi - 1) * (hi - lo) / 2;
    return sum;
}

/* CALC mode: the OFMAP side of one fold (rows row0 .. row0+L-1), jumping from event to event. Between
 * events (a drain starts, or a write finds the buffer full while draining) rows only store words, so their
 * writes are added in bulk; the row holding an event is served word by word. */
static bool ss_wb_fold(ss_wbuf *wb, const tim_stream *os, int64_t L, int64_t row0, int64_t *stalls,
                       ss_stalls *stl, ss_sram_span *so)
{
    int64_t busy_lo = os->pre, busy_hi = os->pre + os->n + os->used - 2;   /* rows with writes */
    int64_t t = 0;
    while (t < L) {
        int64_t cyc = row0 + t + *stalls, end = L, budget;
        if (cyc < wb->drain_end) {
            int64_t td = t + (wb->drain_end - cyc);
            if (td < end) end = td;
            budget = wb->free_space - 1;          /* a write that leaves 0 words free stalls */
        } else {
            budget = wb->free_space - wb->active; /* a write that leaves less than `active` drains */
        }
        /* Only a write is an event: with the buffer already below `active` (a drain ended without freeing
         * enough), rows without writes still pass untouched, and the event is the next row that writes. */
        if (budget < 0) budget = 0;
        int64_t st0 = ss_stream_prefix(os, t), w = ss_stream_prefix(os, end) - st0;
        int64_t stop = end;
        if (w > budget) {
            int64_t lo = t, hi = end - 1;         /* first row whose writes exceed the budget */
            while (lo < hi) {
                int64_t m = lo + (hi - lo) / 2;
                if (ss_stream_prefix(os, m + 1) - st0 > budget) hi = m; else lo = m + 1;
            }
            stop = lo;
            w = ss_stream_prefix(os, stop) - st0;
        }
        if (w > 0) {
            ss_wb_bulk(wb, w);
            int64_t a = t > busy_lo ? t : busy_lo, b = stop - 1 < busy_hi ? stop - 1 : busy_hi;
            if (a <= b) {
                ss_span(so, row0 + a + *stalls);
                ss_span(so, row0 + b + *stalls);
            }
        }
        t = stop;
        if (stop == end) continue;
        /* the event row */
        int64_t n = ss_stream_prefix(os, t + 1) - ss_stream_prefix(os, t);
        int64_t c = row0 + t + *stalls, oo = ss_wb_service(wb, n, c);
        ss_span(so, oo);
        if (oo > c) {
            *stalls += oo - c;
            if (!ss_stalls_add(stl, row0 + t, *stalls)) return false;
        }
        t++;
    }
    return true;
}

/* A demand row of a plain USER-mode stream: its lanes hold consecutive entries of the prefetch matrix (one
 * anti-diagonal of a rolled matrix, one row of a block), so the row is a run of positions. */
static int64_t ss_user_plain_row(ss_rd_user *u, const tim_fold *f, const tim_stream *s, const ss_lanemap *m, int64_t t,
                                 int64_t cycle, int64_t *n)
{
    int64_t c0, c1;
    tim_stream_lanes(s, t, &c0, &c1);
    *n = c0 <= c1 ? c1 - c0 + 1 : 0;
    if (!*n) {
        ss_user_start(u, cycle);
        return 1;
    }
    int64_t uu = s->skewed ? t - c0 - s->pre : s->n - 1 - t;
    int64_t x = m->x0 + m->xc * c0 + m->xu * uu, y = m->y0 + m->yc * c0 + m->yu * uu;
    int64_t b = u->pf.b_is_fc ? f->fc : f->fr, j = u->pf.j_is_y ? y : x;
    return ss_user_service_run(u, ss_user_pos(u, b * u->pf.blen + j, c0), *n, cycle);
}

/* First and last demand rows (global) in which an operand requests anything, or -1. */
static void ss_stream_span_rows(const ss_ops *o, const tim_array *arr, tim_dataflow df, const tim_systolic_result *sys,
                                bool ifmap, int64_t *buf, int64_t *first, int64_t *last)
{
    *first = *last = -1;
    int64_t L = sys->fold_cycles;
    for (int pass = 0; pass < 2; pass++)
        for (int64_t i = 0; i < sys->folds; i++) {
            int64_t fi = pass == 0 ? i : sys->folds - 1 - i;   /* fold index in walk order */
            tim_fold f;
            ss_lanemap im, fm;
            tim_systolic_fold(arr, df, sys, fi % sys->row_folds, fi / sys->row_folds, &f);
            ss_lanemaps(df, arr, &f, &im, &fm);
            const tim_stream *s = ifmap ? &f.ifmap : &f.filter;
            int64_t t0, t1, hit = -1;
            tim_stream_rows(s, &t0, &t1);
            for (int64_t k = 0; k < t1 - t0 && hit < 0; k++) {
                int64_t t = pass == 0 ? t0 + k : t1 - 1 - k;
                if (ss_gather(o, s, ifmap ? &im : &fm, t, buf)) hit = t;
            }
            if (hit >= 0) {
                *(pass == 0 ? first : last) = fi * L + hit;
                break;
            }
        }
}

/* One layer's simulation: the array, its folds, the operand address streams and the three buffers, and
 * where the walk over demand rows stands. */
typedef struct ss_sim {
    tpu_ctx             *ctx;
    const ss_config     *cfg;
    const ss_layer      *layer;
    tim_array            arr;
    tim_systolic_result  sys;
    ss_ops               o;
    ss_rd_calc           ci, cf;   /* CALC mode reads (ifmap, filter) */
    ss_rd_user           ui, uf;   /* USER mode reads */
    ss_wbuf              wb;       /* the OFMAP write buffer */
    ss_stalls            stl;      /* cumulative stalls by row */
    int64_t             *buf, *ebuf;   /* one row's addresses (lanes) */
    bool                 fast;     /* no read can stall: only the OFMAP decides the timing */
    bool                 keep_stalls;
    int64_t              row, stalls, last_of;
    ss_sram_span         si, sf, so;
} ss_sim;

static tpu_status ss_sim_supported(tpu_ctx *ctx, const ss_config *cfg)
{
    if (cfg->ramulator)
        return ut_err(ctx, TPU_ERR_UNSUPPORTED, "UseRamulatorTrace = True is not supported (it needs Ramulator's "
                      "per-request latency files)");
    if (cfg->sparsity)
        return ut_err(ctx, TPU_ERR_UNSUPPORTED, "SparsitySupport = true is not supported");
    if (cfg->ifmap_custom_layout || cfg->filter_custom_layout)
        return ut_err(ctx, TPU_ERR_UNSUPPORTED, "IfmapCustomLayout/FilterCustomLayout = True is not supported");
    return TPU_OK;
}

/* The SRAM fill bandwidths and the OFMAP drain: CALC's fixed ones (single_layer_sim.py), or SCALE-Sim 3's
 * from [layout] and Bandwidth in USER mode. */
static tpu_status ss_sim_bandwidths(tpu_ctx *ctx, const ss_config *cfg, int64_t *ifmap_bw, int64_t *filter_bw,
                                    int64_t *ofmap_bw)
{
    *ifmap_bw = 10, *filter_bw = 10, *ofmap_bw = cfg->array_cols;
    if (!cfg->user_bw) return TPU_OK;
    *ifmap_bw = cfg->ifmap_bank_bw;
    *filter_bw = cfg->filter_bank_bw;
    *ofmap_bw = cfg->bandwidth[0];
    if (*ifmap_bw % cfg->ifmap_bank_num || *filter_bw % cfg->filter_bank_num)
        return ut_err(ctx, TPU_ERR_INVALID, "USER mode: IfmapSRAMBankBandwidth (%lld) and FilterSRAMBankBandwidth "
                      "(%lld) must be multiples of IfmapSRAMBankNum (%lld) and FilterSRAMBankNum (%lld)",
                      (long long)*ifmap_bw, (long long)*filter_bw, (long long)cfg->ifmap_bank_num,
                      (long long)cfg->filter_bank_num);
    return TPU_OK;
}

/* The folds, the operand streams and the buffers of one layer (S zeroed by the caller; ss_sim_free after). */
static tpu_status ss_sim_init(ss_sim *S, tpu_ctx *ctx, const ss_config *cfg, const ss_layer *layer)
{
    S->ctx = ctx;
    S->cfg = cfg;
    S->layer = layer;
    S->arr = (tim_array){cfg->array_rows, cfg->array_cols};
    tim_conv cv = {layer->ifmap_h, layer->ifmap_w, layer->filter_h, layer->filter_w,
                   layer->channels, layer->filters, layer->stride_h, layer->stride_w};
    if (tim_systolic_conv(&S->arr, &cv, cfg->df, &S->sys) != TPU_OK)
        return ut_err(ctx, TPU_ERR_INVALID, "layer '%s' (line %d): dimensions out of range", layer->name, layer->line);
    int64_t ifmap_bw, filter_bw, ofmap_bw;
    tpu_status st = ss_sim_bandwidths(ctx, cfg, &ifmap_bw, &filter_bw, &ofmap_bw);
    if (st) return st;
    int64_t iwords = cfg->ifmap_kb * 1024, fwords = cfg->filter_kb * 1024, owords = cfg->ofmap_kb * 1024;
    if ((st = ss_ops_init(ctx, layer, &S->o)) != TPU_OK) {
        memset(&S->o, 0, sizeof S->o);   /* ss_ops_init freed what it had */
        return st;
    }
    ss_wb_init(&S->wb, owords, ofmap_bw);
    int64_t lanes = S->arr.rows > S->arr.cols ? S->arr.rows : S->arr.cols;
    S->buf = ut_malloc((size_t)lanes * sizeof *S->buf);
    S->ebuf = ut_malloc((size_t)lanes * sizeof *S->ebuf);
    if (!S->buf || !S->ebuf) return ut_nomem(ctx);
    if (!cfg->user_bw) {
        ss_calc_init(&S->ci, iwords);
        ss_calc_init(&S->cf, fwords);
    } else {
        ss_pf pi, pfl;
        const ss_ops *o = &S->o;
        ss_pf_layout(cfg->df, &S->arr, &S->sys, o, true, &pi);
        ss_pf_layout(cfg->df, &S->arr, &S->sys, o, false, &pfl);
        if ((st = ss_user_init(ctx, &S->ui, o, &pi, o->ifmap_naddr, iwords, ifmap_bw, ss_pf_valid(o, layer, true),
                               o->nodup, o->nodup && o->dense)) ||
            (st = ss_user_init(ctx, &S->uf, o, &pfl, o->filter_naddr, fwords, filter_bw, ss_pf_valid(o, layer, false),
                               true, true)))
            return st;
        ss_user_start(&S->ui, 0);   /* row 0 is served at cycle 0 */
        ss_user_start(&S->uf, 0);
    }
    /* Without possible read stalls (CALC mode, or USER mode with both operands wholly in the active
     * buffer) only the OFMAP decides the timing, and it is walked fold by fold. */
    S->fast = !cfg->user_bw || (S->ui.all_hit && S->uf.all_hit);
    S->keep_stalls = !cfg->user_bw || S->ui.all_hit || S->uf.all_hit;
    return TPU_OK;
}

/* One demand row t of fold f in USER mode with reads that may stall: the stall of the row is the largest of
 * the ifmap, filter and ofmap stalls. */
static tpu_status ss_sim_row(ss_sim *S, const tim_fold *f, const ss_lanemap *im, const ss_lanemap *fm, int64_t t)
{
    ss_rd_user *ui = &S->ui, *uf = &S->uf;
    int64_t cycle = S->row + S->stalls, oi = 1, of = 1, n;
    if (!ui->all_hit && ui->plain) {
        oi = ss_user_plain_row(ui, f, &f->ifmap, im, t, cycle, &n);
        if (n) ss_span(&S->si, cycle + oi);
    } else if (!ui->all_hit) {
        bool pairs = ui->self || ui->selfs;
        n = ss_gather_e(&S->o, &f->ifmap, im, t, S->buf, pairs ? S->ebuf : NULL);
        oi = ss_user_service(ui, S->buf, pairs ? S->ebuf : NULL, n, cycle, &n);
        if (n) ss_span(&S->si, cycle + oi);
    }
    if (!uf->all_hit && uf->plain) {
        of = ss_user_plain_row(uf, f, &f->filter, fm, t, cycle, &n);
        if (n) ss_span(&S->sf, cycle + of);
    } else if (!uf->all_hit) {
        n = ss_gather(&S->o, &f->filter, fm, t, S->buf);
        of = ss_user_service(uf, S->buf, NULL, n, cycle, &n);
        if (n) ss_span(&S->sf, cycle + of);
    }
    int64_t c0, c1;
    tim_stream_lanes(&f->ofmap, t, &c0, &c1);
    int64_t oo = ss_wb_service(&S->wb, c0 <= c1 ? c1 - c0 + 1 : 0, cycle);
    if (c0 <= c1) ss_span(&S->so, oo);
    int64_t s = oi - 1;
    if (of - 1 > s) s = of - 1;
    if (oo - cycle > s) s = oo - cycle;
    if (s) {
        S->stalls += s;
        if (S->keep_stalls && !ss_stalls_add(&S->stl, S->row, S->stalls)) return ut_nomem(S->ctx);
    }
    S->last_of = oo;
    return TPU_OK;
}

/* The walk over demand rows (double_buffered_scratchpad.service_memory_requests). In CALC mode reads never
 * stall, so the walk serves only the OFMAP and the reads are replayed afterwards (ss_calc_stream). */
static tpu_status ss_sim_walk(ss_sim *S)
{
    const ss_config *cfg = S->cfg;
    for (int64_t fc = 0; fc < S->sys.col_folds; fc++)
        for (int64_t fr = 0; fr < S->sys.row_folds; fr++) {
            tim_fold f;
            ss_lanemap im, fm;
            tim_systolic_fold(&S->arr, cfg->df, &S->sys, fr, fc, &f);
            if (S->fast) {
                if (!ss_wb_fold(&S->wb, &f.ofmap, f.cycles, S->row, &S->stalls, &S->stl, &S->so)) return ut_nomem(S->ctx);
                S->row += f.cycles;
                continue;
            }
            ss_lanemaps(cfg->df, &S->arr, &f, &im, &fm);
            for (int64_t t = 0; t < f.cycles; t++, S->row++) {
                tpu_status st = ss_sim_row(S, &f, &im, &fm, t);
                if (st) return st;
            }
        }
    /* A row's OFMAP cycle is at most the next row's cycle, so the last row's is the largest. Without read
     * stalls that is the last row plus every stall. */
    if (S->fast) S->last_of = S->row - 1 + S->stalls;
    return TPU_OK;
}

/* The reads that did not go through the walk: SRAM spans of operands wholly in the active buffer (served
 * after the hit latency), CALC mode's replayed streams; then the OFMAP buffer drained. */
static tpu_status ss_sim_reads(ss_sim *S)
{
    const ss_config *cfg = S->cfg;
    for (int k = 0; cfg->user_bw && k < 2; k++) {
        if (!(k == 0 ? S->ui.all_hit : S->uf.all_hit)) continue;
        int64_t r0, r1;
        ss_stream_span_rows(&S->o, &S->arr, cfg->df, &S->sys, k == 0, S->buf, &r0, &r1);
        ss_sram_span *sp = k == 0 ? &S->si : &S->sf;
        if (r0 >= 0) {
            ss_span(sp, ss_cycle_of_row(&S->stl, r0) + 1);
            ss_span(sp, ss_cycle_of_row(&S->stl, r1) + 1);
        }
    }
    if (!cfg->user_bw) {
        tpu_status st;
        ss_calc_job job = {&S->o, &S->arr, cfg->df, &S->sys, true, &S->stl, S->o.ifmap_naddr, -1, -1};
        if ((st = ss_calc_stream(S->ctx, &S->ci, &job)) != TPU_OK) return st;
        if (job.sram_first_row >= 0) {
            S->si.start = ss_cycle_of_row(&S->stl, job.sram_first_row) + 1;   /* hit latency */
            S->si.stop = ss_cycle_of_row(&S->stl, job.sram_last_row) + 1;
        }
        job.ifmap = false;
        job.naddr = S->o.filter_naddr;
        if ((st = ss_calc_stream(S->ctx, &S->cf, &job)) != TPU_OK) return st;
        if (job.sram_first_row >= 0) {
            S->sf.start = ss_cycle_of_row(&S->stl, job.sram_first_row) + 1;
            S->sf.stop = ss_cycle_of_row(&S->stl, job.sram_last_row) + 1;
        }
        ss_calc_complete(&S->ci);
        ss_calc_complete(&S->cf);
    }
    ss_wb_empty_all(&S->wb, S->last_of);
    return S->wb.nomem ? ut_nomem(S->ctx) : TPU_OK;
}

/* SCALE-Sim's report columns from the walk. */
static tpu_status ss_sim_result(const ss_sim *S, ss_layer_result *out)
{
    const ss_config *cfg = S->cfg;
    const tim_systolic_result *sys = &S->sys;
    int64_t total = S->last_of;
    out->total_cycles = total;
    out->stall_cycles = S->stalls;
    if (cfg->user_bw) {
        out->ifmap_dram_start = S->ui.tmin; out->ifmap_dram_stop = S->ui.tmax; out->ifmap_dram_reads = S->ui.num_access;
        out->filter_dram_start = S->uf.tmin; out->filter_dram_stop = S->uf.tmax; out->filter_dram_reads = S->uf.num_access;
    } else {
        out->ifmap_dram_start = S->ci.tfirst; out->ifmap_dram_stop = S->ci.tlast; out->ifmap_dram_reads = S->ci.num_access;
        out->filter_dram_start = S->cf.tfirst; out->filter_dram_stop = S->cf.tlast; out->filter_dram_reads = S->cf.num_access;
    }
    out->ofmap_dram_start = S->wb.first;
    out->ofmap_dram_stop = S->wb.last;
    out->ofmap_dram_writes = S->wb.num_access;
    out->ifmap_sram_start = S->si.start; out->ifmap_sram_stop = S->si.stop; out->ifmap_sram_reads = sys->ifmap_reads;
    out->filter_sram_start = S->sf.start; out->filter_sram_stop = S->sf.stop; out->filter_sram_reads = sys->filter_reads;
    out->ofmap_sram_start = S->so.start; out->ofmap_sram_stop = S->so.stop; out->ofmap_sram_writes = sys->ofmap_writes;
    int64_t dstart = out->ifmap_dram_start < out->filter_dram_start ? out->ifmap_dram_start : out->filter_dram_start;
    out->overall_cycles = out->ofmap_dram_stop - dstart;
    if (total <= 0)
        return ut_err(S->ctx, TPU_ERR_UNSUPPORTED, "layer '%s' (line %d) takes 0 cycles on this array; SCALE-Sim divides "
                      "by its cycle count", S->layer->name, S->layer->line);
    int64_t pes = S->arr.rows * S->arr.cols, num, den;
    if (!__builtin_mul_overflow(sys->macs, (int64_t)100, &num) && !__builtin_mul_overflow(total, pes, &den))
        out->overall_util = tim_ratio(num, den);
    else
        out->overall_util = (double)sys->macs * 100.0 / ((double)total * (double)pes);
    out->mapping_eff = sys->mapping_efficiency * 100;
    out->compute_util = sys->compute_utilization * 100;
    out->ifmap_sram_bw = tim_ratio(sys->ifmap_reads, total);
    out->filter_sram_bw = tim_ratio(sys->filter_reads, total);
    out->ofmap_sram_bw = tim_ratio(sys->ofmap_writes, total);
    /* SCALE-Sim divides an int by a numpy float here: the count is converted first */
    out->ifmap_dram_bw = (double)out->ifmap_dram_reads / (double)(out->ifmap_dram_stop - out->ifmap_dram_start + 1);
    out->filter_dram_bw = (double)out->filter_dram_reads / (double)(out->filter_dram_stop - out->filter_dram_start + 1);
    out->ofmap_dram_bw = (double)out->ofmap_dram_writes / (double)(out->ofmap_dram_stop - out->ofmap_dram_start + 1);
    return TPU_OK;
}

static void ss_sim_free(ss_sim *S)
{
    ut_free(S->buf);
    ut_free(S->ebuf);
    ut_free(S->stl.row);
    ut_free(S->stl.cum);
    ss_user_free(&S->ui);
    ss_user_free(&S->uf);
    ut_free(S->wb.ppos);
    ut_free(S->wb.pcnt);
    ss_ops_free(&S->o);
}

tpu_status ss_simulate_layer(tpu_ctx *ctx, const ss_config *cfg, const ss_layer *layer, ss_layer_result *out)
{
    memset(out, 0, sizeof *out);
    tpu_status st = ss_sim_supported(ctx, cfg);
    if (st) return st;
    ss_sim *S = ut_calloc(1, sizeof *S);
    if (!S) return ut_nomem(ctx);
    st = ss_sim_init(S, ctx, cfg, layer);
    if (!st) out->sys = S->sys;
    if (!st) st = ss_sim_walk(S);
    if (!st) st = ss_sim_reads(S);
    if (!st) st = ss_sim_result(S, out);
    const char *bad = S->ci.bad ? S->ci.bad : S->cf.bad ? S->cf.bad : S->ui.bad ? S->ui.bad : S->uf.bad ? S->uf.bad : S->wb.bad;
    if (!st && bad)
        ut_warn(ctx, "layer '%s' (line %d): SCALE-Sim 3.0.0 would fail on this layer (%s); tpusim's figures carry on "
                "its model", layer->name, layer->line, bad);
    ss_sim_free(S);
    ut_free(S);
    return st;
}
