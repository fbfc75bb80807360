/* gather_scatter.c — gather and (variadic) scatter with XLA's dimension numbers.
 *
 * gather(operand[R], start_indices[Ri]) -> out: every output index splits into batch dims (the output dims
 * not in offset_dims, in order, one per start_indices dim other than index_vector_dim) and offset dims (one per
 * operand dim that is neither collapsed nor an operand batching dim, in increasing order). The start vector
 * read at the batch position fills the operand dims named by start_index_map; operand_batching_dims take the
 * batch position's coordinate of the matching start_indices_batching_dims. Starts are clamped to
 * [0, dim - slice_size] so the slice is always in bounds. index_vector_dim == Ri means a trailing 1.
 *
 * scatter(operands[N], indices, updates[N]) -> N results: each update scatter position (the update dims not
 * in update_window_dims) reads a start vector exactly like gather; a window whose start is out of bounds
 * (start < 0 or start + window > dim in any operand dim) is skipped entirely, as XLA's scatter expander does.
 * Positions are applied in row-major order of the scatter dims (the whole window of one position, then the
 * next), each element combined as to_apply(current_0..N-1, update_0..N-1).
 */
#include "exec/exec.h"
#include "exec/exe_ops.h"
#include "exec/kernels/ref.h"
#include "exec/kernels/ew_block.h"
#include "exec/kernels/ew_int.h"

#include <string.h>
#include "exec/exe_par.h"

/* ---- dimension numbers ---- */

typedef struct gs_dims {
    int     rank, irank, urank, orank;      /* operand, indices, updates (scatter) or output (gather) */
    int     ivd;                            /* index_vector_dim */
    int     nvec;                           /* length of one start vector */
    int64_t map[TPU_MAX_RANK];              /* start_index_map / scatter_dims_to_operand_dims */
    int     nbatch;                         /* batch (scatter) dims: indices dims other than ivd */
    int     ibatch[TPU_MAX_RANK];           /* their indices dim */
    int     obatch[TPU_MAX_RANK];           /* their output (gather) / updates (scatter) dim */
    int     nwin;                           /* window dims */
    int     wop[TPU_MAX_RANK];              /* operand dim of window dim j */
    int     wout[TPU_MAX_RANK];             /* output / updates dim of window dim j */
    int     nob;                            /* operand batching dims */
    int     obd[TPU_MAX_RANK];              /* operand dim */
    int     obpos[TPU_MAX_RANK];            /* position k in ibatch[] of its indices batching dim */
    int64_t wsize[TPU_MAX_RANK];            /* per operand dim: slice / window size (1 on collapsed dims) */
} gs_dims;

static int gs_in(const int64_t *v, int n, int64_t x)
{
    for (int i = 0; i < n; i++)
        if (v[i] == x) return 1;
    return 0;
}

static int gs_sorted_unique(const int64_t *v, int n, int64_t lim)
{
    for (int i = 0; i < n; i++)
        if (v[i] < 0 || v[i] >= lim || (i && v[i] <= v[i - 1])) return 0;
    return 1;
}

/* Reads and checks the dimension numbers shared by gather and scatter. For gather: win = offset_dims,
 * collapsed = collapsed_slice_dims, sizes = slice_sizes. For scatter: win = update_window_dims, collapsed =
 * inserted_window_dims, sizes from the updates shape. */
static tpu_status gs_setup(exe_state *S, const hlo_instr *in, const tpu_tensor *op, const tpu_tensor *idx,
                           const int64_t *odims, int orank, int is_scatter, gs_dims *g)
{
    memset(g, 0, sizeof *g);
    const int64_t *win, *col, *map, *obd, *ibd;
    hlo_attr_key kw = is_scatter ? HK_UPDATE_WINDOW_DIMS : HK_OFFSET_DIMS;
    hlo_attr_key kc = is_scatter ? HK_INSERTED_WINDOW_DIMS : HK_COLLAPSED_SLICE_DIMS;
    hlo_attr_key km = is_scatter ? HK_SCATTER_DIMS_TO_OPERAND_DIMS : HK_START_INDEX_MAP;
    hlo_attr_key kob = is_scatter ? HK_INPUT_BATCHING_DIMS : HK_OPERAND_BATCHING_DIMS;
    hlo_attr_key kib = is_scatter ? HK_SCATTER_INDICES_BATCHING_DIMS : HK_START_INDICES_BATCHING_DIMS;
    const char *nw = is_scatter ? "update_window_dims" : "offset_dims";
    const char *nc = is_scatter ? "inserted_window_dims" : "collapsed_slice_dims";
    const char *nm = is_scatter ? "scatter_dims_to_operand_dims" : "start_index_map";
    const char *nob = is_scatter ? "input_batching_dims" : "operand_batching_dims";
    const char *nib = is_scatter ? "scatter_indices_batching_dims" : "start_indices_batching_dims";
    int nwin = hlo_attr_ints(in, kw, &win);
    int ncol = hlo_attr_ints(in, kc, &col);
    int nmap = hlo_attr_ints(in, km, &map);
    int nobd = hlo_attr_ints(in, kob, &obd);
    int nibd = hlo_attr_ints(in, kib, &ibd);
    int R = op->rank, Ri = idx->rank;
    g->rank = R;
    g->irank = Ri;
    g->orank = g->urank = orank;
    if (!hlo_attr_find(in, HK_INDEX_VECTOR_DIM))
        return exe_fail(S, in, TPU_ERR_SHAPE, "index_vector_dim is missing");
    int64_t ivd = hlo_attr_int(in, HK_INDEX_VECTOR_DIM, Ri);
    if (ivd < 0 || ivd > Ri)
        return exe_fail(S, in, TPU_ERR_SHAPE, "index_vector_dim=%lld is outside [0, %d] for indices of rank %d",
                        (long long)ivd, Ri, Ri);
    g->ivd = (int)ivd;
    int64_t nvec = ivd == Ri ? 1 : idx->dims[ivd];
    if (nmap != nvec)
        return exe_fail(S, in, TPU_ERR_SHAPE, "%s has %d entries but each index vector has %lld", nm, nmap,
                        (long long)nvec);
    g->nvec = nmap;
    for (int k = 0; k < nmap; k++) {
        if (map[k] < 0 || map[k] >= R || gs_in(map, k, map[k]) || gs_in(obd, nobd, map[k]))
            return exe_fail(S, in, TPU_ERR_SHAPE, "%s entry %lld is out of range, repeated or a batching dim", nm,
                            (long long)map[k]);
        g->map[k] = map[k];
    }
    if (!gs_sorted_unique(col, ncol, R))
        return exe_fail(S, in, TPU_ERR_SHAPE, "%s must be sorted, unique and < %d", nc, R);
    if (nobd != nibd)
        return exe_fail(S, in, TPU_ERR_SHAPE, "%s has %d entries but %s has %d", nob, nobd, nib, nibd);
    if (!gs_sorted_unique(obd, nobd, R))
        return exe_fail(S, in, TPU_ERR_SHAPE, "%s must be sorted, unique and < %d", nob, R);
    for (int i = 0; i < ncol; i++)
        if (gs_in(obd, nobd, col[i]))
            return exe_fail(S, in, TPU_ERR_SHAPE, "dim %lld is both in %s and %s", (long long)col[i], nc, nob);
    if (nwin + ncol + nobd != R)
        return exe_fail(S, in, TPU_ERR_SHAPE, "%s (%d) + %s (%d) + %s (%d) must equal the operand rank %d", nw, nwin,
                        nc, ncol, nob, nobd, R);
    if (!gs_sorted_unique(win, nwin, orank))
        return exe_fail(S, in, TPU_ERR_SHAPE, "%s must be sorted, unique and < %d", nw, orank);
    /* batch dims: indices dims other than ivd <-> output/update dims not in win, both in order */
    int nb = 0;
    for (int d = 0; d < Ri; d++)
        if (d != g->ivd) g->ibatch[nb++] = d;
    g->nbatch = nb;
    if (nb + nwin != orank)
        return exe_fail(S, in, TPU_ERR_SHAPE, "%s rank %d != %d window dims + %d batch dims of the indices",
                        is_scatter ? "updates" : "result", orank, nwin, nb);
    int k = 0;
    for (int d = 0; d < orank; d++)
        if (!gs_in(win, nwin, d)) g->obatch[k++] = d;
    for (k = 0; k < nb; k++)
        if (odims[g->obatch[k]] != idx->dims[g->ibatch[k]])
            return exe_fail(S, in, TPU_ERR_SHAPE, "%s dim %d has size %lld but indices dim %d has %lld",
                            is_scatter ? "updates" : "result", g->obatch[k], (long long)odims[g->obatch[k]],
                            g->ibatch[k], (long long)idx->dims[g->ibatch[k]]);
    for (int i = 0; i < nobd; i++) {
        if (ibd[i] < 0 || ibd[i] >= Ri || ibd[i] == g->ivd || gs_in(ibd, i, ibd[i]))
            return exe_fail(S, in, TPU_ERR_SHAPE, "%s entry %lld is out of range, repeated or index_vector_dim", nib,
                            (long long)ibd[i]);
        g->obd[i] = (int)obd[i];
        for (k = 0; k < nb; k++)
            if (g->ibatch[k] == ibd[i]) g->obpos[i] = k;
        if (op->dims[obd[i]] != idx->dims[ibd[i]])
            return exe_fail(S, in, TPU_ERR_SHAPE, "batching dims %lld (operand, size %lld) and %lld (indices, size %lld) differ",
                            (long long)obd[i], (long long)op->dims[obd[i]], (long long)ibd[i], (long long)idx->dims[ibd[i]]);
    }
    g->nob = nobd;
    /* window dims: operand dims neither collapsed nor batching <-> win, in order */
    int j = 0;
    for (int d = 0; d < R; d++) {
        g->wsize[d] = 1;
        if (gs_in(col, ncol, d) || gs_in(obd, nobd, d)) continue;
        g->wop[j] = d;
        g->wout[j] = (int)win[j];
        j++;
    }
    g->nwin = nwin;
    if (!is_scatter) {
        const int64_t *ss;
        int nss = hlo_attr_ints(in, HK_SLICE_SIZES, &ss);
        if (nss != R) return exe_fail(S, in, TPU_ERR_SHAPE, "slice_sizes has %d entries for an operand of rank %d", nss, R);
        for (int d = 0; d < R; d++) {
            if (ss[d] < 0 || ss[d] > op->dims[d])
                return exe_fail(S, in, TPU_ERR_SHAPE, "slice_sizes[%d]=%lld is outside [0, %lld]", d, (long long)ss[d],
                                (long long)op->dims[d]);
            if ((gs_in(col, ncol, d) || gs_in(obd, nobd, d)) && ss[d] > 1)
                return exe_fail(S, in, TPU_ERR_SHAPE, "slice_sizes[%d]=%lld must be 1 on a collapsed or batching dim", d,
                                (long long)ss[d]);
            g->wsize[d] = ss[d];
        }
        for (j = 0; j < nwin; j++)
            if (odims[g->wout[j]] != ss[g->wop[j]])
                return exe_fail(S, in, TPU_ERR_SHAPE, "result dim %d has size %lld but slice_sizes[%d]=%lld", g->wout[j],
                                (long long)odims[g->wout[j]], g->wop[j], (long long)ss[g->wop[j]]);
    } else {
        for (j = 0; j < nwin; j++) {
            g->wsize[g->wop[j]] = odims[g->wout[j]];
            if (odims[g->wout[j]] > op->dims[g->wop[j]])
                return exe_fail(S, in, TPU_ERR_SHAPE, "update window dim %d (size %lld) exceeds operand dim %d (size %lld)",
                                g->wout[j], (long long)odims[g->wout[j]], g->wop[j], (long long)op->dims[g->wop[j]]);
        }
    }
    return TPU_OK;
}

/* The operand start of batch position `bpos` (coordinates over g->ibatch). Unclamped. */
static void gs_start(const gs_dims *g, const tpu_tensor *idx, const int64_t *istr, const int64_t *bpos, int64_t *start)
{
    int64_t off = 0;
    for (int k = 0; k < g->nbatch; k++) off += bpos[k] * istr[g->ibatch[k]];
    for (int d = 0; d < g->rank; d++) start[d] = 0;
    int64_t vstr = g->ivd < g->irank ? istr[g->ivd] : 0;
    for (int k = 0; k < g->nvec; k++) start[g->map[k]] = exe_index_value(idx, off + k * vstr);
    for (int i = 0; i < g->nob; i++) start[g->obd[i]] = bpos[g->obpos[i]];
}

static void gs_strides(int rank, const int64_t *dims, int64_t *str)
{
    int64_t s = 1;
    for (int i = rank - 1; i >= 0; i--) {
        str[i] = s;
        s *= dims[i];
    }
}

/* Advances an odometer over dims[n]; returns 0 when it wraps. */
static int gs_next(int64_t *pos, const int64_t *dims, int n)
{
    for (int i = n - 1; i >= 0; i--) {
        if (++pos[i] < dims[i]) return 1;
        pos[i] = 0;
    }
    return 0;
}

/* ---- gather ---- */

typedef struct gat_job {
    const gs_dims    *g;
    const tpu_tensor *op, *idx;
    tpu_tensor       *t;
    const int64_t    *istr, *ostr, *tstr, *bdims, *wd, *wds, *wss;
    size_t            es;
} gat_job;

/* One start component: s32 and s64 indices read directly (the common cases), others through the loader. */
static inline int64_t gs_index(const tpu_tensor *idx, int64_t i)
{
    if (idx->dtype == TPU_S32) return ((const int32_t *)idx->data)[i];
    if (idx->dtype == TPU_S64) return ((const int64_t *)idx->data)[i];
    return exe_index_value(idx, i);
}

/* Copies one window of `n` elements: a single element or one contiguous run without the general loop. */
static inline void gs_copy(void *dst, const void *src, size_t es, int64_t n)
{
    if (n == 1) {
        switch (es) {
        case 4: memcpy(dst, src, 4); return;
        case 2: memcpy(dst, src, 2); return;
        case 8: memcpy(dst, src, 8); return;
        default: memcpy(dst, src, es); return;
        }
    }
    memcpy(dst, src, (size_t)n * es);
}

/* One element of 4 bytes per position, s32 indices, one start component, at most one operand batching dim
 * and not on the innermost batch dim (take_along_axis along the minor dim, x[idx] of a vector): runs along
 * the innermost batch dim share one base offset. Returns 0 when it does not apply. */
static int gat_points1(const gat_job *J, int64_t b0, int64_t b1, int64_t hi, int64_t st)
{
    const gs_dims *g = J->g;
    if (g->nvec != 1 || g->nob > 1 || J->es != 4 || J->idx->dtype != TPU_S32 || g->nbatch < 1 ||
        (g->nob && g->obpos[0] == g->nbatch - 1))
        return 0;
    int64_t inner = J->bdims[g->nbatch - 1], bst = g->nob ? J->ostr[g->obd[0]] : 0, bdiv = 1;
    if (g->nob)
        for (int k = g->obpos[0] + 1; k < g->nbatch; k++) bdiv *= J->bdims[k];
    int64_t bdim = g->nob ? J->bdims[g->obpos[0]] : 1;
    const int32_t *ix = J->idx->data;
    const uint32_t *src = J->op->data;
    uint32_t *dst = J->t->data;
    /* take_along_axis over short contiguous rows read densely (most of a row's cache lines are hit): the next
     * row is streamed into the cache line by line while this one is gathered, instead of one random prefetch
     * per element */
    int64_t nl = (hi + 1) * 4 / 64;
    if (g->nob && st == 1 && (hi + 1) * 4 <= 65536 && inner * 4 >= nl && nl > 0) {
        for (int64_t b = b0; b < b1;) {
            int64_t row = b / inner, e = UT_MIN(b1, (row + 1) * inner), pos = b - row * inner;
            const uint32_t *base = src + b / bdiv % bdim * bst;
            const char *next = (const char *)(src + ((row + 1) * inner / bdiv % bdim) * bst);
            int more = e < b1 || (row + 1) * inner < J->t->count;
            /* line pf of the next row is due once (pf + 1) * inner <= (pos + 1) * nl: a running remainder
             * (acc = pos * nl - pf * inner) instead of a division per position (that division was 15% of the
             * gather) */
            int64_t pf = more ? pos * nl / inner : nl, acc = pos * nl - pf * inner;
            for (; b < e; b++) {
                for (acc += nl; acc >= inner && pf < nl; acc -= inner) __builtin_prefetch(next + pf++ * 64);
                int64_t s = ix[b];
                s = s < 0 ? 0 : s > hi ? hi : s;
                dst[b] = base[s];
            }
        }
        return 1;
    }
    for (int64_t b = b0; b < b1;) {
        int64_t e = UT_MIN(b1, (b / inner + 1) * inner);
        const uint32_t *base = src + (g->nob ? b / bdiv % bdim * bst : 0);
        for (; b < e; b++) {
            if (b + 32 < e) {   /* (prefetched 32 ahead: random reads within a long row miss the cache) */
                int64_t q = ix[b + 32];
                __builtin_prefetch(base + (q < 0 ? 0 : q > hi ? hi : q) * st);
            }
            int64_t s = ix[b];
            s = s < 0 ? 0 : s > hi ? hi : s;
            dst[b] = base[s * st];
        }
    }
    return 1;
}

/* Random reads across a large operand (x[pts[:, 0], pts[:, 1]]): 4-byte elements, s32 index vectors of nv
 * components, each read prefetched 64 positions ahead so that many misses are in flight. Inlined with nv a
 * constant, the offset computation unrolls (200000 reads from f32[1024,4096]: 0.47 ms instead of 0.83). */
static inline __attribute__((always_inline)) void gat_points_s32(const int32_t *ix, const uint32_t *src, uint32_t *dst,
                                                                 int64_t b0, int64_t b1, int nv, const int64_t *hi,
                                                                 const int64_t *st)
{
    for (int64_t b = b0; b < b1; b++) {
        int64_t off = 0, po = 0;
        if (b + 64 < b1) {
            for (int k = 0; k < nv; k++) {
                int64_t s = ix[(b + 64) * nv + k];
                po += (s < 0 ? 0 : s > hi[k] ? hi[k] : s) * st[k];
            }
            __builtin_prefetch(src + po);
        }
        for (int k = 0; k < nv; k++) {
            int64_t s = ix[b * nv + k];
            off += (s < 0 ? 0 : s > hi[k] ? hi[k] : s) * st[k];
        }
        dst[b] = src[off];
    }
}

/* Point gathers (one element per batch position, results in position order, index vectors innermost, no
 * batching dims: x[pts[:, 0], pts[:, 1]], embedding rows of one element): a loop simple enough that the CPU
 * keeps many of the (random) loads in flight. Returns 0 when the gather is not of that form. */
static int gat_points(const gat_job *J, int64_t b0, int64_t b1)
{
    const gs_dims *g = J->g;
    const tpu_tensor *op = J->op, *idx = J->idx;
    if (g->nob > 4 || g->nwin || g->nvec > 4 || (g->ivd != g->irank - 1 && g->ivd != g->irank) ||
        (idx->dtype != TPU_S32 && idx->dtype != TPU_S64))
        return 0;
    for (int d = 0; d < g->rank; d++)
        if (g->wsize[d] != 1) return 0;
    int64_t hi[4] = {0}, st[4] = {0};
    int nv = g->nvec;
    for (int k = 0; k < nv; k++) {
        hi[k] = op->dims[g->map[k]] - 1;
        st[k] = J->ostr[g->map[k]];
    }
    size_t es = J->es;
    char *dst = J->t->data;
    const char *src = op->data;
    if (gat_points1(J, b0, b1, hi[0], st[0])) return 1;
    /* operand batching dims (take_along_axis) read the batch position's coordinates: an odometer */
    int64_t bpos[TPU_MAX_RANK], rem = b0, bst[4] = {0};
    for (int k = g->nbatch - 1; k >= 0; k--) {
        bpos[k] = rem % J->bdims[k];
        rem /= J->bdims[k];
    }
    for (int i = 0; i < g->nob; i++) bst[i] = J->ostr[g->obd[i]];
    if (!g->nob && idx->dtype == TPU_S32 && es == 4) {
        /* the vector length as a constant where it is a common one: the offset is a few instructions */
        if (nv == 2) gat_points_s32(idx->data, op->data, J->t->data, b0, b1, 2, hi, st);
        else if (nv == 3) gat_points_s32(idx->data, op->data, J->t->data, b0, b1, 3, hi, st);
        else gat_points_s32(idx->data, op->data, J->t->data, b0, b1, nv, hi, st);
        return 1;
    }
    for (int64_t b = b0; b < b1; b++, g->nob ? gs_next(bpos, J->bdims, g->nbatch) : 0) {
        int64_t off = 0;
        for (int i = 0; i < g->nob; i++) off += bpos[g->obpos[i]] * bst[i];
        for (int k = 0; k < nv; k++) {
            int64_t s = idx->dtype == TPU_S32 ? ((const int32_t *)idx->data)[b * nv + k] : ((const int64_t *)idx->data)[b * nv + k];
            s = s < 0 ? 0 : s > hi[k] ? hi[k] : s;
            off += s * st[k];
        }
        gs_copy(dst + b * (int64_t)es, src + off * (int64_t)es, es, 1);
    }
    return 1;
}

/* Copies n rows of RB bytes: dst row b <- src row clamp(idx[b * is], 0, hi), each at its own stride. Rows of
 * 256 bytes and more (embedding rows from a large table) are prefetched 4 rows ahead. */
#define GAT_ROWS_LOOP(IT, RB)                                                                            \
    for (int64_t b = b0; b < b1; b++) {                                                                  \
        if ((RB) >= 256 && b + 4 < b1) {                                                                 \
            int64_t q = ((const IT *)ix)[(b + 4) * is];                                                  \
            const char *pf = src + (q < 0 ? 0 : q > hi ? hi : q) * sstep;                                \
            for (size_t l = 0; l < (RB); l += 64) __builtin_prefetch(pf + l);                            \
        }                                                                                                \
        int64_t s = ((const IT *)ix)[b * is];                                                            \
        s = s < 0 ? 0 : s > hi ? hi : s;                                                                 \
        memcpy(dst + b * dstep, src + s * sstep, RB);                                                    \
    }

#define GAT_ROWS_SIZES(IT)                                                                               \
    switch (rb) {                                                                                        \
    case 4: GAT_ROWS_LOOP(IT, 4) break;                                                                  \
    case 8: GAT_ROWS_LOOP(IT, 8) break;                                                                  \
    case 16: GAT_ROWS_LOOP(IT, 16) break;                                                                \
    case 32: GAT_ROWS_LOOP(IT, 32) break;                                                                \
    case 64: GAT_ROWS_LOOP(IT, 64) break;                                                                \
    default: GAT_ROWS_LOOP(IT, rb) break;                                                                \
    }

/* Row gathers (embedding lookups, x[idx] of whole rows: one start component, no operand batching dims, a
 * window that is one contiguous run in operand and result, batch dims that flatten into one, in indices and in
 * the result: ids of shape [batch, bag]): one fixed-size copy per row. Returns 0 when the gather is not of that
 * form. */
static int gat_rows(const gat_job *J, int64_t b0, int64_t b1, int run, int64_t wcount)
{
    const gs_dims *g = J->g;
    const tpu_tensor *idx = J->idx;
    if (!run || g->nbatch < 1 || g->nob || g->nvec != 1 || (idx->dtype != TPU_S32 && idx->dtype != TPU_S64)) return 0;
    for (int d = 0; d < g->rank; d++)
        if (d != g->map[0] && g->wsize[d] != J->op->dims[d]) return 0;   /* other dims start at 0 */
    int nb = g->nbatch;
    for (int k = 0; k + 1 < nb; k++)   /* position b = flat index over the batch dims, at b * step in both */
        if (J->istr[g->ibatch[k]] != J->istr[g->ibatch[k + 1]] * J->bdims[k + 1] ||
            J->tstr[g->obatch[k]] != J->tstr[g->obatch[k + 1]] * J->bdims[k + 1])
            return 0;
    int64_t hi = J->op->dims[g->map[0]] - g->wsize[g->map[0]], is = J->istr[g->ibatch[nb - 1]];
    int64_t sstep = J->ostr[g->map[0]] * (int64_t)J->es, dstep = J->tstr[g->obatch[nb - 1]] * (int64_t)J->es;
    size_t rb = (size_t)wcount * J->es;
    char *dst = J->t->data;
    const char *src = J->op->data;
    const void *ix = idx->data;
    if (idx->dtype == TPU_S32) {
        GAT_ROWS_SIZES(int32_t)
    } else {
        GAT_ROWS_SIZES(int64_t)
    }
    return 1;
}

static void gat_chunk(void *ctx, int64_t b0, int64_t b1, int tid)
{
    const gat_job *J = ctx;
    const gs_dims *gp = J->g;
    const tpu_tensor *op = J->op, *idx = J->idx;
    tpu_tensor *t = J->t;
    const int64_t *istr = J->istr, *ostr = J->ostr, *tstr = J->tstr, *bdims = J->bdims, *wd = J->wd, *wds = J->wds, *wss = J->wss;
    size_t es = J->es;
    (void)tid;
    if (gat_points(J, b0, b1)) return;
    /* a window that is one contiguous run in both operand and result (or a single element): one copy */
    int64_t wcount = 1;
    for (int j = 0; j < gp->nwin; j++) wcount *= wd[j];
    int run = wcount == 1 || (gp->nwin >= 1 && wss[gp->nwin - 1] == 1 && wds[gp->nwin - 1] == 1 && wcount == wd[gp->nwin - 1]);
    if (gat_rows(J, b0, b1, run, wcount)) return;
    int64_t vstr = gp->ivd < gp->irank ? istr[gp->ivd] : 0, bpos[TPU_MAX_RANK], rem = b0;
    for (int k = gp->nbatch - 1; k >= 0; k--) {
        bpos[k] = rem % bdims[k];
        rem /= bdims[k];
    }
    for (int64_t b = b0; b < b1; b++, gs_next(bpos, bdims, gp->nbatch)) {
        int64_t doff = 0, soff = 0, ioff = 0, start[TPU_MAX_RANK] = {0};
        for (int k = 0; k < gp->nbatch; k++) {
            doff += bpos[k] * tstr[gp->obatch[k]];
            ioff += bpos[k] * istr[gp->ibatch[k]];
        }
        for (int k = 0; k < gp->nvec; k++) start[gp->map[k]] = gs_index(idx, ioff + k * vstr);
        for (int i = 0; i < gp->nob; i++) start[gp->obd[i]] = bpos[gp->obpos[i]];
        for (int d = 0; d < gp->rank; d++) {
            int64_t hi = op->dims[d] - gp->wsize[d];
            int64_t s = start[d] > hi ? hi : start[d];
            if (s < 0) s = 0;
            soff += s * ostr[d];
        }
        char *dst = (char *)t->data + doff * (int64_t)es;
        const char *src = (const char *)op->data + soff * (int64_t)es;
        if (run) gs_copy(dst, src, es, wcount);
        else exe_nd_copy(dst, wds, src, wss, wd, gp->nwin, es);
    }
}

EXE_KERNEL(exe_k_gather)
{
    if (EXE_FORCE_REF(S)) return exe_k_gather_ref(S, in, ops, out);
    const tpu_tensor *op = ops[0]->t, *idx = ops[1]->t;
    if (!op || !idx) return exe_fail(S, in, TPU_ERR_SHAPE, "operands must be arrays");
    if (tpu_dtype_kind(idx->dtype) != 's' && tpu_dtype_kind(idx->dtype) != 'u')
        return exe_fail(S, in, TPU_ERR_SHAPE, "start indices must be integers, not %s", tpu_dtype_name(idx->dtype));
    if (!hlo_shape_is_array(&in->shape) || in->shape.dtype != op->dtype)
        return exe_fail(S, in, TPU_ERR_SHAPE, "result must be an array of the operand's type");
    gs_dims g;
    tpu_status st = gs_setup(S, in, op, idx, in->shape.dims, in->shape.rank, 0, &g);
    if (st) return st;
    tpu_tensor *t;
    if ((st = exe_alloc(S, in, &t))) return st;
    if (t->count == 0) return exe_out_array(S, t, out);
    int64_t ostr[TPU_MAX_RANK], istr[TPU_MAX_RANK], tstr[TPU_MAX_RANK];
    gs_strides(op->rank, op->dims, ostr);
    gs_strides(idx->rank, idx->dims, istr);
    gs_strides(t->rank, t->dims, tstr);
    int64_t bdims[TPU_MAX_RANK], nbpos = 1;
    for (int k = 0; k < g.nbatch; k++) nbpos *= bdims[k] = idx->dims[g.ibatch[k]];
    int64_t wd[TPU_MAX_RANK], wds[TPU_MAX_RANK], wss[TPU_MAX_RANK];
    for (int j = 0; j < g.nwin; j++) {
        wd[j] = g.wsize[g.wop[j]];
        wds[j] = tstr[g.wout[j]];
        wss[j] = ostr[g.wop[j]];
    }
    size_t es = tpu_dtype_size(op->dtype);
    gat_job J = {&g, op, idx, t, istr, ostr, tstr, bdims, wd, wds, wss, es};
    /* chunks of at least 256 positions, about 8 per thread: the point gathers' prefetches run 32-64 positions
     * ahead within a chunk, so each chunk start waits on its first reads */
    int nt = nbpos > 1024 ? exe_par_threads(S->threads) : 1;
    int64_t grain = UT_MAX((int64_t)256, UT_MIN((int64_t)16384, nbpos / (8 * (int64_t)nt)));
    exe_par_for(nt, nbpos, grain, gat_chunk, &J);
    return exe_out_array(S, t, out);
}

/* Reference: every output element computed from its own index. */
EXE_KERNEL(exe_k_gather_ref)
{
    const tpu_tensor *op = ops[0]->t, *idx = ops[1]->t;
    gs_dims g;
    tpu_status st = gs_setup(S, in, op, idx, in->shape.dims, in->shape.rank, 0, &g);
    if (st) return st;
    tpu_tensor *t;
    if ((st = exe_alloc(S, in, &t))) return st;
    int64_t ostr[TPU_MAX_RANK], istr[TPU_MAX_RANK];
    gs_strides(op->rank, op->dims, ostr);
    gs_strides(idx->rank, idx->dims, istr);
    size_t es = tpu_dtype_size(op->dtype);
    int64_t pos[TPU_MAX_RANK] = {0};
    for (int64_t o = 0; o < t->count; o++) {
        int64_t bpos[TPU_MAX_RANK], start[TPU_MAX_RANK], src = 0;
        for (int k = 0; k < g.nbatch; k++) bpos[k] = pos[g.obatch[k]];
        gs_start(&g, idx, istr, bpos, start);
        for (int d = 0; d < g.rank; d++) {
            int64_t s = start[d];
            if (s > op->dims[d] - g.wsize[d]) s = op->dims[d] - g.wsize[d];
            if (s < 0) s = 0;
            for (int j = 0; j < g.nwin; j++)
                if (g.wop[j] == d) s += pos[g.wout[j]];
            src += s * ostr[d];
        }
        memcpy((char *)t->data + o * (int64_t)es, (const char *)op->data + src * (int64_t)es, es);
        gs_next(pos, t->dims, t->rank);
    }
    return exe_out_array(S, t, out);
}

/* ---- scatter ---- */

typedef enum { SC_GENERIC, SC_REPLACE, SC_BINOP } sc_kind;

typedef struct sc_plan {
    int                  n;             /* operands */
    const tpu_tensor    *ops[32], *upd[32], *idx;
    tpu_tensor          *res[32];
    const exe_scalar_fn *fn;
    sc_kind              kind;
    hlo_op               binop;
    gs_dims              g;
} sc_plan;

/* Is the combiner "return the updates" (root = parameter N+i, or a tuple of parameters N..2N-1 in order)? */
static int sc_is_replace(const hlo_comp *c, int n)
{
    const hlo_instr *r = c->root;
    if (n == 1) return r->op == HLO_PARAMETER && r->param_no == 1;
    if (r->op != HLO_TUPLE || r->nops != n) return 0;
    for (int i = 0; i < n; i++)
        if (r->ops[i]->op != HLO_PARAMETER || r->ops[i]->param_no != n + i) return 0;
    return 1;
}

static tpu_status sc_setup(exe_state *S, const hlo_instr *in, exe_value *const *ops, sc_plan *p)
{
    memset(p, 0, sizeof *p);
    if (in->nops < 3 || in->nops % 2 == 0)
        return exe_fail(S, in, TPU_ERR_SHAPE, "needs N operands, indices and N updates (an odd count >= 3), got %d", in->nops);
    int n = (in->nops - 1) / 2;
    if (n > 32) return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "more than 32 scattered operands");
    p->n = n;
    p->idx = ops[n]->t;
    if (!p->idx) return exe_fail(S, in, TPU_ERR_SHAPE, "indices must be an array");
    if (tpu_dtype_kind(p->idx->dtype) != 's' && tpu_dtype_kind(p->idx->dtype) != 'u')
        return exe_fail(S, in, TPU_ERR_SHAPE, "indices must be integers, not %s", tpu_dtype_name(p->idx->dtype));
    for (int i = 0; i < n; i++) {
        p->ops[i] = ops[i]->t;
        p->upd[i] = ops[n + 1 + i]->t;
        if (!p->ops[i] || !p->upd[i]) return exe_fail(S, in, TPU_ERR_SHAPE, "operands and updates must be arrays");
        if (p->upd[i]->dtype != p->ops[i]->dtype)
            return exe_fail(S, in, TPU_ERR_SHAPE, "updates %d are %s but operand %d is %s", i, tpu_dtype_name(p->upd[i]->dtype),
                            i, tpu_dtype_name(p->ops[i]->dtype));
        if (p->ops[i]->rank != p->ops[0]->rank || memcmp(p->ops[i]->dims, p->ops[0]->dims, sizeof(int64_t) * (size_t)p->ops[0]->rank) ||
            p->upd[i]->rank != p->upd[0]->rank || memcmp(p->upd[i]->dims, p->upd[0]->dims, sizeof(int64_t) * (size_t)p->upd[0]->rank))
            return exe_fail(S, in, TPU_ERR_SHAPE, "all operands (and all updates) must have the same dimensions");
    }
    tpu_status st = gs_setup(S, in, p->ops[0], p->idx, p->upd[0]->dims, p->upd[0]->rank, 1, &p->g);
    if (st) return st;
    if (in->ncalled != 1) return exe_fail(S, in, TPU_ERR_SHAPE, "needs to_apply=");
    if ((st = exe_scalar_fn_get(S, in->called[0], &p->fn))) return st;
    if (exe_scalar_fn_nparams(p->fn) != 2 * n || exe_scalar_fn_nresults(p->fn) != n)
        return exe_fail(S, in, TPU_ERR_SHAPE, "to_apply takes %d parameters and returns %d values; scatter of %d operands needs %d and %d",
                        exe_scalar_fn_nparams(p->fn), exe_scalar_fn_nresults(p->fn), n, 2 * n, n);
    p->kind = SC_GENERIC;
    if (sc_is_replace(in->called[0], n)) p->kind = SC_REPLACE;
    else if (n == 1 && (p->binop = exe_scalar_fn_binop(p->fn)) != HLO_OP_COUNT) p->kind = SC_BINOP;
    return TPU_OK;
}

/* The result value: one array, or a tuple of N arrays. Takes ownership of p->res. */
static tpu_status sc_result(exe_state *S, sc_plan *p, exe_value **out)
{
    exe_value *v[32];
    int ok = 1;
    for (int i = 0; i < p->n; i++) {
        v[i] = exe_value_array(p->res[i]);
        p->res[i] = NULL;
        if (!v[i]) ok = 0;
    }
    if (!ok) {
        for (int i = 0; i < p->n; i++) exe_value_unref(v[i]);
        return ut_nomem(S->ctx);
    }
    if (p->n == 1) {
        *out = v[0];
        return TPU_OK;
    }
    *out = exe_value_tuple(v, p->n);
    return *out ? TPU_OK : ut_nomem(S->ctx);
}

static void sc_free(sc_plan *p)
{
    for (int i = 0; i < p->n; i++) tpu_tensor_free(p->res[i]);
}

/* The results start as copies of the operands; an operand that dies here and that nobody else holds is
 * updated in place instead (its value's tensor moves to the result). */
static tpu_status sc_take_or_clone(exe_state *S, const hlo_instr *in, sc_plan *p)
{
    for (int i = 0; i < p->n; i++) {
        exe_value *v = exe_take_unique(S, i);
        if (!v) continue;
        p->res[i] = v->t;
        v->t = NULL;
        v->borrowed = 1;
        exe_value_unref(v);
    }
    for (int i = 0; i < p->n; i++) {
        if (p->res[i]) continue;
        p->res[i] = ten_clone(p->ops[i]);
        if (!p->res[i]) {
            sc_free(p);
            return exe_fail(S, in, TPU_ERR_NOMEM, "out of memory copying operand %d", i);
        }
    }
    return TPU_OK;
}

static tpu_status sc_clone(exe_state *S, const hlo_instr *in, sc_plan *p)
{
    for (int i = 0; i < p->n; i++) {
        p->res[i] = ten_clone(p->ops[i]);
        if (!p->res[i]) {
            sc_free(p);
            return exe_fail(S, in, TPU_ERR_NOMEM, "out of memory copying operand %d", i);
        }
    }
    return TPU_OK;
}

/* Combines update element u into result element r of every operand. */
static inline void sc_combine(const exe_state *S, const sc_plan *p, int64_t r, int64_t u)
{
    if (p->kind == SC_REPLACE) {
        for (int i = 0; i < p->n; i++) {
            size_t es = tpu_dtype_size(p->res[i]->dtype);
            memcpy((char *)p->res[i]->data + r * (int64_t)es, (const char *)p->upd[i]->data + u * (int64_t)es, es);
        }
        return;
    }
    tpu_dtype t = p->res[0]->dtype;
    if (p->kind == SC_BINOP) {
        if (t == TPU_F32 && p->binop == HLO_ADD) {
            ((float *)p->res[0]->data)[r] += ((const float *)p->upd[0]->data)[u];
            return;
        }
        if (t == TPU_S32 && p->binop == HLO_ADD) {
            int32_t *x = &((int32_t *)p->res[0]->data)[r];
            *x = (int32_t)((uint32_t)*x + (uint32_t)((const int32_t *)p->upd[0]->data)[u]);
            return;
        }
        if (t == TPU_F32 && (p->binop == HLO_MAXIMUM || p->binop == HLO_MINIMUM)) {
            float *x = &((float *)p->res[0]->data)[r], v = ((const float *)p->upd[0]->data)[u];
            *x = p->binop == HLO_MAXIMUM ? ewb_maxf(*x, v) : ewb_minf(*x, v);
            return;
        }
        int bits = tpu_dtype_bits(t), kind = tpu_dtype_kind(t);
        if ((kind == 's' || kind == 'u') && (bits == 32 || bits == 64)) {
            char *x = (char *)p->res[0]->data + r * (bits / 8);
            const char *v = (const char *)p->upd[0]->data + u * (bits / 8);
            if (bits == 32 ? ewi_binary32(p->binop, kind == 'u', (const uint32_t *)x, (const uint32_t *)v, (uint32_t *)x, 1)
                           : ewi_binary64(p->binop, kind == 'u', (const uint64_t *)x, (const uint64_t *)v, (uint64_t *)x, 1))
                return;
        }
        exe_scalar a = exe_scalar_load(t, p->res[0]->data, r), b = exe_scalar_load(t, p->upd[0]->data, u);
        exe_scalar_store(S, t, p->res[0]->data, r, exe_scalar_binop(S, p->binop, t, a, b));
        return;
    }
    exe_scalar args[64], res[32];
    for (int i = 0; i < p->n; i++) {
        args[i] = exe_scalar_load(p->res[i]->dtype, p->res[i]->data, r);
        args[p->n + i] = exe_scalar_load(p->upd[i]->dtype, p->upd[i]->data, u);
    }
    exe_scalar_fn_eval(p->fn, args, res);
    for (int i = 0; i < p->n; i++) exe_scalar_store(S, p->res[i]->dtype, p->res[i]->data, r, res[i]);
}

static tpu_status sc_check_types(exe_state *S, const hlo_instr *in, const sc_plan *p)
{
    for (int i = 0; i < p->n; i++) {
        char k = tpu_dtype_kind(p->ops[i]->dtype);
        if (p->kind != SC_REPLACE && k == 'o')
            return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "combining %s elements with a computation is not supported",
                            tpu_dtype_name(p->ops[i]->dtype));
        if (p->kind != SC_REPLACE && exe_scalar_fn_param_dtype(p->fn, i) != p->ops[i]->dtype)
            return exe_fail(S, in, TPU_ERR_SHAPE, "to_apply parameter %d is %s but operand %d is %s", i,
                            tpu_dtype_name(exe_scalar_fn_param_dtype(p->fn, i)), i, tpu_dtype_name(p->ops[i]->dtype));
    }
    return TPU_OK;
}

/* Row scatters (segment sums and maxima, x.at[idx].add(rows): one index per position, no operand batching
 * dims, whole rows of the operand's minor dims, updates laid out [positions..., row]) with an f32 add, max or min
 * or an s32 add: one tight loop per row, positions in order as the reference applies them. Out-of-bounds
 * positions are skipped. Part p of nparts applies only the positions that land in its share of the result's
 * rows (every element still takes its updates in position order). Returns 0 when the scatter is not of that
 * form. */
typedef struct sc_rows_job {
    const void *ix, *upd;
    void       *res;
    int         idx64, nparts;
    int64_t     is, nb, rl, rows;   /* index stride, positions, row length, result rows */
    tpu_dtype   t;
    hlo_op      op;
} sc_rows_job;

/* RL: the row length as a constant where it is a common small one (the loop over a row then vectorises
 * without a remainder) */
#define SC_ROWS_LOOP(IT, T, EXPR, RL)                                                                    \
    for (int64_t b = 0; b < nb; b++) {                                                                   \
        if ((RL) * sizeof(T) >= 256 && b + 4 < nb) {   /* long rows of a large result: prefetched */     \
            int64_t q = ((const IT *)ix)[(b + 4) * is];                                                  \
            if ((uint64_t)(q - lo) < (uint64_t)(up - lo))                                                \
                for (size_t l = 0; l < (RL) * sizeof(T); l += 64) __builtin_prefetch((char *)((T *)res + q * (RL)) + l, 1); \
        }                                                                                                \
        int64_t s = ((const IT *)ix)[b * is];                                                            \
        if ((uint64_t)(s - lo) >= (uint64_t)(up - lo)) continue;                                         \
        T *r = (T *)res + s * (RL);                                                                      \
        const T *u = (const T *)upd + b * (RL);                                                          \
        _Pragma("omp simd") for (int64_t i = 0; i < (RL); i++) r[i] = EXPR;   /* (never overlapping) */ \
    }

#define SC_ROWS_RL(IT, T, EXPR)                                                                          \
    switch (rl) {                                                                                        \
    case 1: SC_ROWS_LOOP(IT, T, EXPR, 1) break;                                                          \
    case 4: SC_ROWS_LOOP(IT, T, EXPR, 4) break;                                                          \
    case 8: SC_ROWS_LOOP(IT, T, EXPR, 8) break;                                                          \
    case 16: SC_ROWS_LOOP(IT, T, EXPR, 16) break;                                                        \
    default: SC_ROWS_LOOP(IT, T, EXPR, rl) break;                                                        \
    }

#define SC_ROWS_OPS(IT)                                                                                  \
    if (t == TPU_S32) {                                                                                  \
        SC_ROWS_RL(IT, uint32_t, r[i] + u[i])                                                            \
    } else if (op == HLO_ADD) {                                                                          \
        SC_ROWS_RL(IT, float, r[i] + u[i])                                                               \
    } else if (op == HLO_MAXIMUM) {                                                                      \
        SC_ROWS_RL(IT, float, ewb_maxf(r[i], u[i]))                                                      \
    } else {                                                                                             \
        SC_ROWS_RL(IT, float, ewb_minf(r[i], u[i]))                                                      \
    }

/* Parts [p0, p1): part p applies the positions that land in result rows [rows * p / nparts, rows * (p+1) / nparts).
 * (EXE_VEC: a row of run-time length vectorises only with the dynamic cost model.) */
EXE_VEC
static void sc_rows_part(void *ctx, int64_t p0, int64_t p1, int tid)
{
    const sc_rows_job *J = ctx;
    const void *ix = J->ix, *upd = J->upd;
    void *res = J->res;
    int64_t is = J->is, nb = J->nb, rl = J->rl;
    tpu_dtype t = J->t;
    hlo_op op = J->op;
    (void)tid;
    for (int64_t p = p0; p < p1; p++) {
        int64_t lo = J->rows * p / J->nparts, up = J->rows * (p + 1) / J->nparts;
        if (J->idx64) {
            SC_ROWS_OPS(int64_t)
        } else {
            SC_ROWS_OPS(int32_t)
        }
    }
}

static int sc_rows(exe_state *S, const sc_plan *p, const int64_t *istr)
{
    const gs_dims *g = &p->g;
    const tpu_tensor *o = p->ops[0], *idx = p->idx;
    tpu_dtype t = o->dtype;
    hlo_op op = p->binop;
    if (p->n != 1 || p->kind != SC_BINOP || g->nbatch < 1 || g->nob || g->nvec != 1 || g->map[0] != 0 ||
        g->wsize[0] != 1 || (idx->dtype != TPU_S32 && idx->dtype != TPU_S64) ||
        !((t == TPU_F32 && (op == HLO_ADD || op == HLO_MAXIMUM || op == HLO_MINIMUM)) || (t == TPU_S32 && op == HLO_ADD)))
        return 0;
    /* positions: the leading dims of indices and updates, in order (so position b is at b in both) */
    int64_t nb = 1;
    for (int k = 0; k < g->nbatch; k++) {
        if (g->obatch[k] != k || g->ibatch[k] != k) return 0;
        nb *= idx->dims[k];
    }
    int64_t rl = 1;
    for (int d = 1; d < o->rank; d++) {
        if (g->wsize[d] != o->dims[d]) return 0;
        rl *= o->dims[d];
    }
    for (int j = 1; j < g->nwin; j++)
        if (g->wout[j] <= g->wout[j - 1]) return 0;
    if (p->upd[0]->count != nb * rl) return 0;
    sc_rows_job J = {idx->data, p->upd[0]->data, p->res[0]->data, idx->dtype == TPU_S64, 1, istr[g->ibatch[g->nbatch - 1]],
                     nb, rl, o->dims[0], t, op};
    /* one part: splitting the rows between threads was measured slower on 2 cores (each part's skip of the
     * other parts' positions is a branch mispredicted half the time) */
    (void)S;
    sc_rows_part(&J, 0, 1, 0);
    return 1;
}

EXE_KERNEL(exe_k_scatter)
{
    if (EXE_FORCE_REF(S)) return exe_k_scatter_ref(S, in, ops, out);
    sc_plan p;
    tpu_status st = sc_setup(S, in, ops, &p);
    if (st || (st = sc_check_types(S, in, &p)) || (st = sc_take_or_clone(S, in, &p))) return st;
    const gs_dims *g = &p.g;
    const tpu_tensor *op = p.ops[0], *up = p.upd[0];
    int64_t ostr[TPU_MAX_RANK], istr[TPU_MAX_RANK], ustr[TPU_MAX_RANK];
    gs_strides(op->rank, op->dims, ostr);
    gs_strides(p.idx->rank, p.idx->dims, istr);
    gs_strides(up->rank, up->dims, ustr);
    int64_t vstr = g->ivd < g->irank ? istr[g->ivd] : 0;
    int64_t bdims[TPU_MAX_RANK], nbpos = 1, wd[TPU_MAX_RANK], nwel = 1;
    for (int k = 0; k < g->nbatch; k++) nbpos *= bdims[k] = p.idx->dims[g->ibatch[k]];
    for (int j = 0; j < g->nwin; j++) nwel *= wd[j] = up->dims[g->wout[j]];
    if (up->count == 0 || sc_rows(S, &p, istr)) return sc_result(S, &p, out);
    int64_t bpos[TPU_MAX_RANK] = {0};
    for (int64_t b = 0; b < nbpos; b++, gs_next(bpos, bdims, g->nbatch)) {
        int64_t start[TPU_MAX_RANK] = {0}, roff = 0, uoff = 0, ioff = 0;
        for (int k = 0; k < g->nbatch; k++) ioff += bpos[k] * istr[g->ibatch[k]];
        for (int k = 0; k < g->nvec; k++) start[g->map[k]] = gs_index(p.idx, ioff + k * vstr);
        for (int i = 0; i < g->nob; i++) start[g->obd[i]] = bpos[g->obpos[i]];
        int ok = 1;
        for (int d = 0; d < g->rank; d++) {
            if (start[d] < 0 || start[d] > op->dims[d] - g->wsize[d]) ok = 0;
            roff += start[d] * ostr[d];
        }
        if (!ok) continue;   /* the whole window is dropped */
        for (int k = 0; k < g->nbatch; k++) uoff += bpos[k] * ustr[g->obatch[k]];
        /* one window: innermost window dim as a plain loop */
        int64_t wpos[TPU_MAX_RANK] = {0};
        int nw = g->nwin;
        int64_t inner = nw ? wd[nw - 1] : 1;
        int64_t rs = nw ? ostr[g->wop[nw - 1]] : 0, us = nw ? ustr[g->wout[nw - 1]] : 0;
        for (int64_t e = 0; e < nwel; e += inner) {
            int64_t r = roff, u = uoff;
            for (int j = 0; j < nw - 1; j++) {
                r += wpos[j] * ostr[g->wop[j]];
                u += wpos[j] * ustr[g->wout[j]];
            }
            if (p.kind == SC_BINOP && op->dtype == TPU_F32 && p.binop == HLO_ADD) {
                float *rd = (float *)p.res[0]->data;
                const float *ud = (const float *)up->data;
                for (int64_t i = 0; i < inner; i++) rd[r + i * rs] += ud[u + i * us];
            } else {
                for (int64_t i = 0; i < inner; i++) sc_combine(S, &p, r + i * rs, u + i * us);
            }
            gs_next(wpos, wd, nw - 1);
        }
    }
    return sc_result(S, &p, out);
}

/* Reference: walks every update element, scatter positions outermost (the order XLA applies them). */
EXE_KERNEL(exe_k_scatter_ref)
{
    sc_plan p;
    tpu_status st = sc_setup(S, in, ops, &p);
    if (st || (st = sc_check_types(S, in, &p)) || (st = sc_clone(S, in, &p))) return st;
    p.kind = sc_is_replace(in->called[0], p.n) ? SC_REPLACE : SC_GENERIC;   /* no arithmetic fast path */
    const gs_dims *g = &p.g;
    const tpu_tensor *op = p.ops[0], *up = p.upd[0];
    int64_t ostr[TPU_MAX_RANK], istr[TPU_MAX_RANK], ustr[TPU_MAX_RANK];
    gs_strides(op->rank, op->dims, ostr);
    gs_strides(p.idx->rank, p.idx->dims, istr);
    gs_strides(up->rank, up->dims, ustr);
    int64_t bdims[TPU_MAX_RANK], nbpos = 1, wd[TPU_MAX_RANK], nwel = 1;
    for (int k = 0; k < g->nbatch; k++) nbpos *= bdims[k] = p.idx->dims[g->ibatch[k]];
    for (int j = 0; j < g->nwin; j++) nwel *= wd[j] = up->dims[g->wout[j]];
    for (int64_t b = 0; b < nbpos && up->count; b++) {
        int64_t bpos[TPU_MAX_RANK], rem = b;
        for (int k = g->nbatch - 1; k >= 0; k--) {
            bpos[k] = rem % bdims[k];
            rem /= bdims[k];
        }
        for (int64_t e = 0; e < nwel; e++) {
            int64_t wpos[TPU_MAX_RANK], upos[TPU_MAX_RANK], rem2 = e;
            for (int j = g->nwin - 1; j >= 0; j--) {
                wpos[j] = rem2 % wd[j];
                rem2 /= wd[j];
            }
            int64_t start[TPU_MAX_RANK];
            gs_start(g, p.idx, istr, bpos, start);
            int ok = 1;
            int64_t r = 0, u = 0;
            for (int d = 0; d < g->rank; d++) {
                int64_t x = start[d];
                if (x < 0 || x + g->wsize[d] > op->dims[d]) ok = 0;
                for (int j = 0; j < g->nwin; j++)
                    if (g->wop[j] == d) x += wpos[j];
                r += x * ostr[d];
            }
            for (int k = 0; k < g->nbatch; k++) upos[g->obatch[k]] = bpos[k];
            for (int j = 0; j < g->nwin; j++) upos[g->wout[j]] = wpos[j];
            for (int d = 0; d < up->rank; d++) u += upos[d] * ustr[d];
            if (ok) sc_combine(S, &p, r, u);
        }
    }
    return sc_result(S, &p, out);
}
