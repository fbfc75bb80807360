/* systolic.c — the closed-form systolic-array model (see systolic.h for the vocabulary).
 *
 * Derivation. SCALE-Sim (compute/systolic_compute_{os,ws,is}.py) builds, per fold, three "demand
 * matrices" with one row per cycle and one column per array edge lane, holding the address each lane
 * reads or writes at that cycle (-1: idle). Its memory model then walks those rows one per cycle, so the
 * compute time of a layer is the number of demand rows. With R x C the array and (Sr, Sc, T) the mapping
 * (systolic.h), the rows of one fold are:
 *
 *   os: operand A^T (T rows) and B (T rows) enter skewed: a lane-c element lags lane 0 by c cycles, which
 *       appends R-1 rows (A, over R lanes) or C-1 rows (B, over C lanes). SCALE-Sim pads A with C-1 idle
 *       rows and B with R-1 so the two agree: T + R-1 + C-1 rows. The outputs drain after the last
 *       operand: T-1 idle rows, then R rows of results, skewed over C lanes: T-1 + R + C-1 rows. So
 *           fold_cycles(os) = T + R + C - 2            (fill 0, drain R + C - 2)
 *   ws: the weight tile (R x C) is pushed in first, one row per cycle, reversed so the top row enters
 *       last (R cycles); then the M inputs stream skewed over R lanes with R-1 extra rows, and the psums
 *       leave skewed over C lanes: the input matrix is R idle + T + C-1 idle rows, skewed by R-1:
 *           fold_cycles(ws) = 2R + C + T - 2           (fill R, drain R + C - 2)
 *   is: the same with the roles of inputs and weights exchanged (the input tile is held):
 *           fold_cycles(is) = 2R + C + T - 2           (fill R, drain R + C - 2)
 *
 * Folds do not overlap (SCALE-Sim drains each fold before the next), so a layer takes
 * folds * fold_cycles demand rows. SCALE-Sim's "Total Cycles" is the largest cycle index its memory model
 * serves, i.e. one less than the number of rows when nothing stalls:
 *           cycles = ceil(Sr/R) * ceil(Sc/C) * fold_cycles - 1.
 * This reproduces every row of the LUT measured with SCALE-Sim (tests/t_scalesim.c).
 *
 * Utilization, as SCALE-Sim reports it:
 *   Overall Util     = macs / (cycles * R * C)
 *   Mapping Eff.     = mean over folds of rows_used * cols_used / (R * C)
 *   Compute Util     = mean over folds of rows_used * cols_used * T / (R * C * fc), where fc is the row count
 *                      of one of its fold matrices plus C - 1: os uses the output matrix, giving the true
 *                      fold_cycles; ws and is use the (already skewed) weight/input matrix, so C - 1 is
 *                      counted twice: fc = 2R + 2C + T - 3. We keep that oddity for compatibility.
 * The means are summed fold by fold in SCALE-Sim's order (column folds outermost) so the doubles agree
 * bit for bit; above TIM_EXACT_FOLDS folds a weighted sum is used instead (last-bit differences).
 *
 * SRAM accesses (SCALE-Sim's counters, including its quirks):
 *   os: ifmap_reads = col_folds * M * K, filter_reads = row_folds * K * N,
 *       ofmap_writes = M * N + folds * (R + C)     (it adds the padded tile's height + width per fold)
 *   ws: ifmap_reads = col_folds * M * K, filter_reads = K * N, ofmap_writes = row_folds * M * N
 *   is: ifmap_reads = M * K, filter_reads = col_folds * K * N, ofmap_writes = row_folds * M * N
 */
#include "timing/systolic.h"
#include <math.h>
#include <string.h>

#define TIM_EXACT_FOLDS ((int64_t)1 << 27)

const char *tim_dataflow_name(tim_dataflow df)
{
    switch (df) {
    case TIM_DF_OS: return "os";
    case TIM_DF_WS: return "ws";
    case TIM_DF_IS: return "is";
    }
    return "?";
}

static int64_t tim_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static int tim_bitlen(unsigned __int128 x)
{
    int n = 0;
    while (x) { n++; x >>= 1; }
    return n;
}

/* a / b rounded to nearest double (ties to even) from the exact quotient, like Python's int / int. */
double tim_ratio(int64_t a, int64_t b)
{
    if (b == 0) return a == 0 ? NAN : (a > 0 ? INFINITY : -INFINITY);
    int neg = (a < 0) != (b < 0);
    uint64_t ua = a < 0 ? (uint64_t)0 - (uint64_t)a : (uint64_t)a;
    uint64_t ub = b < 0 ? (uint64_t)0 - (uint64_t)b : (uint64_t)b;
    if (ua == 0) return neg ? -0.0 : 0.0;
    if (ua < ((uint64_t)1 << 53) && ub < ((uint64_t)1 << 53)) {
        double q = (double)ua / (double)ub;   /* both exact, so IEEE division rounds correctly */
        return neg ? -q : q;
    }
    /* Long division with at least 62 quotient bits, then round to 53 with a sticky bit. */
    int s = 127 - tim_bitlen(ua);
    unsigned __int128 num = (unsigned __int128)ua << s;
    unsigned __int128 q = num / ub;
    int sticky = (num % ub) != 0;
    int h = tim_bitlen(q) - 1;
    uint64_t m;
    if (h >= 63) {
        int sh = h - 63;
        if (sh && (q & (((unsigned __int128)1 << sh) - 1))) sticky = 1;
        m = (uint64_t)(q >> sh);
    } else {
        m = (uint64_t)(q << (63 - h));
    }
    uint64_t keep = m >> 11, rem = m & 0x7ff;
    if (rem > 0x400 || (rem == 0x400 && (sticky || (keep & 1)))) keep++;
    double r = ldexp((double)keep, h - 52 - s);
    return neg ? -r : r;
}

static int tim_mul(int64_t a, int64_t b, int64_t *out) { return !__builtin_mul_overflow(a, b, out); }

tpu_status tim_systolic_gemm(const tim_array *arr, int64_t M, int64_t N, int64_t K, tim_dataflow df,
                             tim_systolic_result *out)
{
    memset(out, 0, sizeof *out);
    if (!arr || arr->rows < 1 || arr->cols < 1 || arr->rows > TIM_SYSTOLIC_MAX_DIM ||
        arr->cols > TIM_SYSTOLIC_MAX_DIM || M < 1 || N < 1 || K < 1 || M > TIM_SYSTOLIC_MAX_DIM ||
        N > TIM_SYSTOLIC_MAX_DIM || K > TIM_SYSTOLIC_MAX_DIM || (unsigned)df > TIM_DF_IS)
        return TPU_ERR_INVALID;
    int64_t R = arr->rows, C = arr->cols;
    switch (df) {
    case TIM_DF_OS: out->sr = M; out->sc = N; out->t = K; break;
    case TIM_DF_WS: out->sr = K; out->sc = N; out->t = M; break;
    case TIM_DF_IS: out->sr = K; out->sc = M; out->t = N; break;
    }
    int64_t T = out->t;
    out->row_folds = tim_ceil_div(out->sr, R);
    out->col_folds = tim_ceil_div(out->sc, C);
    if (!tim_mul(out->row_folds, out->col_folds, &out->folds)) return TPU_ERR_INVALID;
    if (df == TIM_DF_OS) {
        out->fill_cycles = 0;
        out->drain_cycles = R + C - 2;
    } else {
        out->fill_cycles = R;
        out->drain_cycles = R + C - 2;
    }
    out->fold_cycles = out->fill_cycles + T + out->drain_cycles;
    int64_t rows_total, mn, macs;
    if (!tim_mul(out->folds, out->fold_cycles, &rows_total)) return TPU_ERR_INVALID;
    out->cycles = rows_total - 1;
    if (!tim_mul(M, N, &mn) || !tim_mul(mn, K, &macs)) return TPU_ERR_INVALID;
    out->macs = macs;
    int64_t pes = R * C;   /* both <= 2^31 */
    int64_t denom;
    if (out->cycles > 0 && tim_mul(out->cycles, pes, &denom))
        out->utilization = tim_ratio(macs, denom);
    else
        out->utilization = out->cycles > 0 ? (double)macs / ((double)out->cycles * (double)pes) : 0.0;

    /* Per-fold means in SCALE-Sim's order: for fc: for fr. Only the last row/column fold is partial. */
    int64_t last_rows = out->sr - (out->row_folds - 1) * R, last_cols = out->sc - (out->col_folds - 1) * C;
    int64_t fc_den = df == TIM_DF_OS ? out->fold_cycles : 2 * R + 2 * C + T - 3;
    double me[2][2], cu[2][2];   /* [row fold is last][col fold is last] */
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            int64_t used = (a ? last_rows : R) * (b ? last_cols : C), num, den;
            me[a][b] = tim_ratio(used, pes);
            if (tim_mul(used, T, &num) && tim_mul(pes, fc_den, &den))
                cu[a][b] = tim_ratio(num, den);
            else
                cu[a][b] = (double)used * (double)T / ((double)pes * (double)fc_den);
        }
    if (out->folds <= TIM_EXACT_FOLDS) {
        double sme = 0, scu = 0;
        for (int64_t fc = 0; fc < out->col_folds; fc++) {
            int b = fc == out->col_folds - 1;
            for (int64_t fr = 0; fr < out->row_folds; fr++) {
                int a = fr == out->row_folds - 1;
                sme += me[a][b];
                scu += cu[a][b];
            }
        }
        out->mapping_efficiency = sme / (double)out->folds;
        out->compute_utilization = scu / (double)out->folds;
    } else {
        double nr = (double)(out->row_folds - 1), nc = (double)(out->col_folds - 1);
        out->mapping_efficiency =
            (nr * nc * me[0][0] + nc * me[1][0] + nr * me[0][1] + me[1][1]) / (double)out->folds;
        out->compute_utilization =
            (nr * nc * cu[0][0] + nc * cu[1][0] + nr * cu[0][1] + cu[1][1]) / (double)out->folds;
    }

    /* SRAM access counters (header comment). Products of dims <= 2^31 and folds: checked. */
    int64_t mk, kn, x;
    if (!tim_mul(M, K, &mk) || !tim_mul(K, N, &kn)) return TPU_ERR_INVALID;
    switch (df) {
    case TIM_DF_OS:
        if (!tim_mul(out->col_folds, mk, &out->ifmap_reads) || !tim_mul(out->row_folds, kn, &out->filter_reads) ||
            !tim_mul(out->folds, R + C, &x) || __builtin_add_overflow(mn, x, &out->ofmap_writes))
            return TPU_ERR_INVALID;
        break;
    case TIM_DF_WS:
        out->filter_reads = kn;
        if (!tim_mul(out->col_folds, mk, &out->ifmap_reads) || !tim_mul(out->row_folds, mn, &out->ofmap_writes))
            return TPU_ERR_INVALID;
        break;
    case TIM_DF_IS:
        out->ifmap_reads = mk;
        if (!tim_mul(out->col_folds, kn, &out->filter_reads) || !tim_mul(out->row_folds, mn, &out->ofmap_writes))
            return TPU_ERR_INVALID;
        break;
    }
    return TPU_OK;
}

tpu_status tim_conv_to_gemm(const tim_conv *c, int64_t *M, int64_t *N, int64_t *K)
{
    const int64_t lim = TIM_SYSTOLIC_MAX_DIM;
    if (c->ifmap_h < 1 || c->ifmap_w < 1 || c->filter_h < 1 || c->filter_w < 1 || c->channels < 1 ||
        c->filters < 1 || c->stride_h < 1 || c->stride_w < 1 || c->ifmap_h > lim || c->ifmap_w > lim ||
        c->filter_h > c->ifmap_h || c->filter_w > c->ifmap_w || c->channels > lim || c->filters > lim ||
        c->stride_h > lim || c->stride_w > lim)
        return TPU_ERR_INVALID;
    /* SCALE-Sim: ceil((H - R + stride) / stride) — a valid (unpadded) convolution. */
    int64_t eh = tim_ceil_div(c->ifmap_h - c->filter_h + c->stride_h, c->stride_h);
    int64_t ew = tim_ceil_div(c->ifmap_w - c->filter_w + c->stride_w, c->stride_w);
    int64_t m, rs, k;
    if (!tim_mul(eh, ew, &m) || !tim_mul(c->filter_h, c->filter_w, &rs) || !tim_mul(rs, c->channels, &k) ||
        m > lim || k > lim)
        return TPU_ERR_INVALID;
    *M = m;
    *N = c->filters;
    *K = k;
    return TPU_OK;
}

tpu_status tim_systolic_conv(const tim_array *arr, const tim_conv *c, tim_dataflow df, tim_systolic_result *out)
{
    int64_t M, N, K;
    tpu_status st = tim_conv_to_gemm(c, &M, &N, &K);
    if (st != TPU_OK) {
        memset(out, 0, sizeof *out);
        return st;
    }
    return tim_systolic_gemm(arr, M, N, K, df, out);
}

static tim_stream tim_skewed(int64_t pre, int64_t n, int64_t used, int64_t width)
{
    tim_stream s = {1, pre, n, used, 0, width};
    return s;
}

static tim_stream tim_block(int64_t height, int64_t used_rows, int64_t used, int64_t width)
{
    tim_stream s = {0, 0, height, used, used_rows, width};
    return s;
}

void tim_systolic_fold(const tim_array *arr, tim_dataflow df, const tim_systolic_result *r, int64_t fr,
                       int64_t fc, tim_fold *out)
{
    int64_t R = arr->rows, C = arr->cols, T = r->t;
    memset(out, 0, sizeof *out);
    out->fr = fr;
    out->fc = fc;
    out->rows_used = r->sr - fr * R < R ? r->sr - fr * R : R;
    out->cols_used = r->sc - fc * C < C ? r->sc - fc * C : C;
    out->cycles = r->fold_cycles;
    int64_t ru = out->rows_used, cu = out->cols_used;
    switch (df) {
    case TIM_DF_OS:
        out->ifmap = tim_skewed(0, T, ru, R);
        out->filter = tim_skewed(0, T, cu, C);
        /* T-1 idle rows, then the R x C result tile flipped (idle rows of a partial tile come first). */
        out->ofmap = tim_skewed(T - 1 + (R - ru), ru, cu, C);
        break;
    case TIM_DF_WS:
        out->ifmap = tim_skewed(R, T, ru, R);
        out->filter = tim_block(R, ru, cu, C);
        out->ofmap = tim_skewed(2 * R - 1, T, cu, C);
        break;
    case TIM_DF_IS:
        out->ifmap = tim_block(R, ru, cu, C);
        out->filter = tim_skewed(R, T, ru, R);
        out->ofmap = tim_skewed(2 * R - 1, T, cu, C);
        break;
    }
}

void tim_stream_lanes(const tim_stream *s, int64_t t, int64_t *c0, int64_t *c1)
{
    if (s->skewed) {
        /* need 0 <= t - c - pre < n and 0 <= c < used */
        int64_t lo = t - s->pre - s->n + 1, hi = t - s->pre;
        *c0 = lo > 0 ? lo : 0;
        *c1 = hi < s->used - 1 ? hi : s->used - 1;
    } else if (t < s->n && s->n - 1 - t < s->used_rows) {
        *c0 = 0;
        *c1 = s->used - 1;
    } else {
        *c0 = 1;
        *c1 = 0;
    }
}

void tim_stream_rows(const tim_stream *s, int64_t *t0, int64_t *t1)
{
    if (s->skewed) {
        *t0 = s->pre;
        *t1 = s->pre + s->n + s->used - 1;
    } else {
        *t0 = s->n - s->used_rows;
        *t1 = s->n;
    }
    if (s->used < 1 || s->n < 1) *t1 = *t0;
}
