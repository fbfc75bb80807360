/* reduce.c — reduce (single and variadic, any reducer computation).
 *
 * Inputs are first arranged so the reduced dimensions are innermost (a strided copy, skipped when they
 * already are); then every output element folds one contiguous run. f32/f64 sums use a double accumulator
 * (closer to the exact sum than any fixed f32 order, which XLA does not promise either); max/min and the
 * generic reducer path follow the computation literally, rounding each step to its dtype.
 *
 * A bf16 or f16 sum whose reducer adds in that type is accumulated in f32 and rounded once (XLA widens such
 * reductions: the TPU's vector unit adds in f32, and jnp.sum upcasts the same way); element-by-element bf16
 * rounding would make 4096 ones sum to 256. Both numerics modes do this. */
#include "exec/exec.h"
#include "exec/exe_ops.h"
#include "exec/exe_par.h"
#include "exec/exe_fuse.h"
#include "ew_int.h"
#include "ew_block.h"
#include "ref.h"
#include "mxu.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

/* Copies `a` into buf so that kept dimensions come first (in order) and reduced ones last (in order), or
 * (red_first) the other way round. Returns a pointer to the arranged data (a->data itself when no move is
 * needed). */
/* Is a already laid out with the kept dims first and the reduced ones last (red_first 0), or the reverse? */
static int rd_in_order(const tpu_tensor *a, const uint8_t *is_red, int red_first)
{
    int last = -1;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < a->rank; i++)
            if (!is_red[i] == (pass == red_first) && a->dims[i] != 1) {
                if (i < last) return 0;
                last = i;
            }
    return 1;
}

static const void *rd_arrange2(const tpu_tensor *a, const uint8_t *is_red, int red_first, void **buf, int *moved)
{
    int perm[TPU_MAX_RANK], np = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < a->rank; i++)
            if (!is_red[i] == (pass == red_first)) perm[np++] = i;
    int identity = 1;
    for (int i = 0; i < a->rank; i++)
        if (perm[i] != i && a->dims[perm[i]] != 1) identity = 0;
    /* size-1 dims may move freely: check the order of the non-trivial ones only */
    if (!identity) {
        int last = -1;
        identity = 1;
        for (int i = 0; i < a->rank; i++) {
            if (a->dims[perm[i]] == 1) continue;
            if (perm[i] < last) identity = 0;
            last = perm[i];
        }
    }
    *moved = 0;
    if (identity) return a->data;
    *buf = ut_malloc(a->nbytes ? a->nbytes : 1);
    if (!*buf) return NULL;
    int64_t as[TPU_MAX_RANK], pd[TPU_MAX_RANK], ps[TPU_MAX_RANK], ss[TPU_MAX_RANK];
    exe_strides(a, as);
    for (int i = 0; i < a->rank; i++) {
        pd[i] = a->dims[perm[i]];
        ss[i] = as[perm[i]];
    }
    int64_t s = 1;
    for (int i = a->rank - 1; i >= 0; i--) {
        ps[i] = s;
        s *= pd[i];
    }
    exe_nd_copy(*buf, ps, a->data, ss, pd, a->rank, tpu_dtype_size(a->dtype));
    *moved = 1;
    return *buf;
}

static const void *rd_arrange(const tpu_tensor *a, const uint8_t *is_red, void **buf, int *moved)
{
    return rd_arrange2(a, is_red, 0, buf, moved);
}

/* The dims as [O][R][I] (kept, reduced, kept; size-1 dims ignored) when the reduced ones are one block. */
static int rd_view(const tpu_tensor *a, const uint8_t *is_red, int64_t *O, int64_t *R, int64_t *I)
{
    int64_t g[3] = {1, 1, 1};
    int stage = 0;   /* 0: leading kept, 1: reduced, 2: trailing kept */
    for (int i = 0; i < a->rank; i++) {
        if (a->dims[i] == 1) continue;
        if (is_red[i]) {
            if (stage == 2) return 0;
            stage = 1;
        } else if (stage == 1) {
            stage = 2;
        }
        g[stage] *= a->dims[i];
    }
    *O = g[0];
    *R = g[1];
    *I = g[2];
    return 1;
}

typedef struct rd_job {
    const void *x;
    void       *out;
    int64_t     O, R, I, cw, nc;
    int         is32;
    hlo_op      bop;
    double      init;
    int         ref;   /* EXE_REF_KERNELS: the float fold (rd_maxmin_f32_ref) */
} rd_job;

static inline double rd_ld(const rd_job *J, int64_t i)
{
    return J->is32 ? (double)((const float *)J->x)[i] : ((const double *)J->x)[i];
}

static inline void rd_st(const rd_job *J, int64_t o, double v)
{
    if (J->is32) ((float *)J->out)[o] = (float)v;
    else ((double *)J->out)[o] = v;
}

/* max/min steps as the reducer computes them (NaN wins, +0 > -0) */
static inline double rd_step(int is_max, double acc, double x)
{
    if (isnan(x) || isnan(acc)) return NAN;
    if (is_max ? (x > acc || (x == acc && !signbit(x))) : (x < acc || (x == acc && signbit(x)))) return x;
    return acc;
}

/* Sum of a contiguous run in double: 8 interleaved partial sums combined in a fixed tree, then the tail in
 * order (so sums vectorise; the order never depends on threads or blocking). */
EXE_MX_CLONES
static double rd_sum_f32(const float *x, int64_t n)
{
    double l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t m = n & ~(int64_t)7;
    for (int64_t r = 0; r < m; r += 8)
        for (int j = 0; j < 8; j++) l[j] += (double)x[r + j];
    double s = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
    for (int64_t r = m; r < n; r++) s += (double)x[r];
    return s;
}

EXE_MX_CLONES
static double rd_sum_f64(const double *x, int64_t n)
{
    double l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t m = n & ~(int64_t)7;
    for (int64_t r = 0; r < m; r += 8)
        for (int j = 0; j < 8; j++) l[j] += x[r + j];
    double s = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
    for (int64_t r = m; r < n; r++) s += x[r];
    return s;
}

/* f32 bits -> a signed key in the float order (-0 just below +0) and back: the map is its own inverse */
static inline __attribute__((always_inline)) int32_t rd_fkey(uint32_t u)
{
    return (int32_t)(u ^ ((uint32_t)((int32_t)u >> 31) & 0x7FFFFFFFu));
}

/* The same key with subnormals read as zero (DAZ: +-0), as XLA:CPU's max/min see them */
static inline __attribute__((always_inline)) int32_t rd_fkey_daz(uint32_t u)
{
    return rd_fkey((u & 0x7F800000u) ? u : u & 0x80000000u);
}

/* max/min of an f32 run: the ops are associative and commutative (NaN absorbs, +0 beats -0 in max and -0
 * beats +0 in min, subnormals read as zero), so the run folds in 64 lanes, branch-free. The reference of
 * rd_maxmin_f32 below (EXE_REF_KERNELS runs it). */
EXE_MX_CLONES
static float rd_maxmin_f32_ref(const float *x, int64_t n, int is_max, float init)
{
    float l[64];
    for (int j = 0; j < 64; j++) l[j] = init;
    int64_t m = n & ~(int64_t)63;
    if (is_max)
        for (int64_t r = 0; r < m; r += 64)
            for (int j = 0; j < 64; j++) {
                float a = l[j], v = ewb_dazf(x[r + j]);
                l[j] = a != a || v != v ? NAN : (a > v || (a == v && !signbit(a))) ? a : v;
            }
    else
        for (int64_t r = 0; r < m; r += 64)
            for (int j = 0; j < 64; j++) {
                float a = l[j], v = ewb_dazf(x[r + j]);
                l[j] = a != a || v != v ? NAN : (a < v || (a == v && signbit(a))) ? a : v;
            }
    float acc = init;
    for (int j = 0; j < 64; j++) acc = is_max ? ewb_maxf(acc, l[j]) : ewb_minf(acc, l[j]);
    for (int64_t r = m; r < n; r++) acc = is_max ? ewb_maxf(acc, x[r]) : ewb_minf(acc, x[r]);
    return acc;
}

/* The same fold on integer keys (ewb_key), which vectorises to a max (or min) and an or per 16 floats (the
 * float fold above keeps its 64 lanes in memory); a NaN anywhere makes the result NaN, as the fold's does. */
EXE_MX_CLONES
static float rd_maxmin_f32(const float *x, int64_t n, int is_max, float init)
{
    int64_t m = n & ~(int64_t)15;
    float acc = init;
    if (m > 0) {
        int32_t l[16], nan[16];
        for (int j = 0; j < 16; j++) {
            l[j] = is_max ? INT32_MIN : INT32_MAX;
            nan[j] = 0;
        }
        if (is_max)
            for (int64_t r = 0; r < m; r += 16)
                for (int j = 0; j < 16; j++) {
                    int32_t k = ewb_key(x[r + j]);
                    nan[j] |= x[r + j] != x[r + j];
                    l[j] = k > l[j] ? k : l[j];
                }
        else
            for (int64_t r = 0; r < m; r += 16)
                for (int j = 0; j < 16; j++) {
                    int32_t k = ewb_key(x[r + j]);
                    nan[j] |= x[r + j] != x[r + j];
                    l[j] = k < l[j] ? k : l[j];
                }
        int32_t best = l[0], any = nan[0];
        for (int j = 1; j < 16; j++) {
            best = is_max ? (l[j] > best ? l[j] : best) : (l[j] < best ? l[j] : best);
            any |= nan[j];
        }
        float v = ewb_unkey(best);
        acc = is_max ? ewb_maxf(acc, any ? NAN : v) : ewb_minf(acc, any ? NAN : v);
    }
    for (int64_t r = m; r < n; r++) acc = is_max ? ewb_maxf(acc, x[r]) : ewb_minf(acc, x[r]);
    return acc;
}

static void rd_rows(void *ctx, int64_t o0, int64_t o1, int tid)
{
    const rd_job *J = ctx;
    for (int64_t o = o0; o < o1; o++) {
        double acc = J->init;
        if (J->bop == HLO_ADD) {
            double s = J->is32 ? rd_sum_f32((const float *)J->x + o * J->R, J->R) : rd_sum_f64((const double *)J->x + o * J->R, J->R);
            acc = J->R ? J->init + s : J->init;
        } else if (J->is32 && J->R >= 64) {
            acc = (J->ref ? rd_maxmin_f32_ref : rd_maxmin_f32)((const float *)J->x + o * J->R, J->R, J->bop == HLO_MAXIMUM,
                                                               ewb_dazf((float)J->init));
        } else {
            int is_max = J->bop == HLO_MAXIMUM;
            for (int64_t r = 0; r < J->R; r++) acc = rd_step(is_max, acc, rd_ld(J, o * J->R + r));
        }
        rd_st(J, o, acc);
    }
    (void)tid;
}

/* Few long f32 max/min rows (a convergence test's max |error| over a whole array): each row split into
 * chunks folded on the threads, then the chunks' results folded in order. The ops are associative,
 * commutative and idempotent (rd_maxmin_f32), and every chunk starts from init, so the value is the one
 * rd_rows computes for the whole row. */
#define RD_SPLIT_CH 16384   /* elements per chunk (a multiple of rd_maxmin_f32's 64 lanes) */
typedef struct rd_split {
    const rd_job *J;
    int64_t       nch;
    float        *part;   /* [O][nch] */
} rd_split;

static void rd_split_chunk(void *ctx, int64_t c0, int64_t c1, int tid)
{
    const rd_split *P = ctx;
    const rd_job *J = P->J;
    for (int64_t c = c0; c < c1; c++) {
        int64_t o = c / P->nch, r0 = c % P->nch * RD_SPLIT_CH, len = UT_MIN((int64_t)RD_SPLIT_CH, J->R - r0);
        P->part[c] = rd_maxmin_f32((const float *)J->x + o * J->R + r0, len, J->bop == HLO_MAXIMUM, ewb_dazf((float)J->init));
    }
    (void)tid;
}

/* Returns 0 when it did not apply (rd_rows then does the rows). */
static int rd_rows_split(exe_state *S, const rd_job *J)
{
    int nt = exe_par_threads(S->threads);
    if (!J->is32 || J->bop == HLO_ADD || nt < 2 || J->R < 4 * RD_SPLIT_CH || J->O >= nt) return 0;
    rd_split P = {J, (J->R + RD_SPLIT_CH - 1) / RD_SPLIT_CH, NULL};
    tpu_tensor *h;
    P.part = exe_scratch_alloc((size_t)(J->O * P.nch) * sizeof(float), &h);
    if (!P.part) return 0;
    exe_par_for(S->threads, J->O * P.nch, 1, rd_split_chunk, &P);
    for (int64_t o = 0; o < J->O; o++) {
        float acc = ewb_dazf((float)J->init);
        for (int64_t c = 0; c < P.nch; c++) {
            float v = P.part[o * P.nch + c];
            acc = J->bop == HLO_MAXIMUM ? ewb_maxf(acc, v) : ewb_minf(acc, v);
        }
        rd_st(J, o, acc);
    }
    exe_scratch_free(h);
    return 1;
}

/* Column reductions read a short run of each row, one row (often a page) apart: the hardware prefetchers
 * barely start on such runs, so the runs RD_PF_ROWS rows ahead are asked for explicitly (f32[8192,1024] over
 * its rows: 25-35% less time, measured). Prefetches change no value. */
#define RD_PF_ROWS 8
static inline void rd_prefetch_run(const char *p, int64_t bytes)
{
    for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b);
}

/* out[o][i] over r, for a block of columns i: each column's sum in r order, vectorised across columns */
EXE_MX_CLONES
static void rd_cols_block(const rd_job *J, int64_t o, int64_t i0, int64_t w, double *acc)
{
    for (int64_t i = 0; i < w; i++) acc[i] = J->bop == HLO_ADD ? 0.0 : J->init;
    const int is_max = J->bop == HLO_MAXIMUM;
    const size_t es = J->is32 ? 4 : 8;
    for (int64_t r = 0; r < J->R; r++) {
        int64_t base = (o * J->R + r) * J->I + i0;
        if (r + RD_PF_ROWS < J->R) rd_prefetch_run((const char *)J->x + (size_t)(base + RD_PF_ROWS * J->I) * es, w * (int64_t)es);
        if (J->bop == HLO_ADD) {
            if (J->is32) {
                const float *x = (const float *)J->x + base;
                for (int64_t i = 0; i < w; i++) acc[i] += (double)x[i];
            } else {
                const double *x = (const double *)J->x + base;
                for (int64_t i = 0; i < w; i++) acc[i] += x[i];
            }
        } else {
            for (int64_t i = 0; i < w; i++) acc[i] = rd_step(is_max, acc[i], rd_ld(J, base + i));
        }
    }
    for (int64_t i = 0; i < w; i++) {
        double v = J->bop == HLO_ADD ? (J->R ? J->init + acc[i] : J->init) : acc[i];
        rd_st(J, o * J->I + i0 + i, v);
    }
}

static void rd_cols(void *ctx, int64_t c0, int64_t c1, int tid)
{
    const rd_job *J = ctx;
    double acc[512];
    for (int64_t c = c0; c < c1; c++) {
        int64_t o = c / J->nc, i0 = c % J->nc * J->cw;
        rd_cols_block(J, o, i0, UT_MIN(J->cw, J->I - i0), acc);
    }
    (void)tid;
}

typedef struct rd_gen_job {
    exe_state           *S;
    const exe_scalar_fn *fn;
    int                  n;
    exe_value *const    *ops;
    const void         **src;
    tpu_tensor         **res;
    const tpu_dtype     *dt, *it;
    int64_t              inner;
} rd_gen_job;

static void rd_generic(void *ctx, int64_t o0, int64_t o1, int tid)
{
    const rd_gen_job *G = ctx;
    int n = G->n;
    for (int64_t o = o0; o < o1; o++) {
        exe_scalar args[64], acc[32];
        for (int k = 0; k < n; k++) acc[k] = exe_scalar_load(G->it[k], G->ops[n + k]->t->data, 0);
        for (int64_t r = 0; r < G->inner; r++) {
            for (int k = 0; k < n; k++) {
                args[k] = acc[k];
                args[n + k] = exe_scalar_load(G->dt[k], G->src[k], o * G->inner + r);
            }
            exe_scalar_fn_eval(G->fn, args, acc);
        }
        for (int k = 0; k < n; k++) exe_scalar_store(G->S, G->res[k]->dtype, G->res[k]->data, o, acc[k]);
    }
    (void)tid;
}

/* wide[i] = a[i] as f32 (bf16: the exact widening, in a vector loop) */
EXE_VEC
static void rd_widen(const tpu_tensor *a, float *wide)
{
    if (a->dtype == TPU_BF16) {
        const uint16_t *h = a->data;
        for (int64_t i = 0; i < a->count; i++) wide[i] = fp_bf16_to_f32_inline(h[i]);
        return;
    }
    for (int64_t i = 0; i < a->count; i++) wide[i] = (float)ten_load_f64(a->dtype, a->data, i);
}

/* A bf16 sum over leading dims with kept dims innermost ([O][R][I] view, I > 1: batch-norm statistics over
 * NHWC), read in place: for each column i, the same 8 partial double sums over r (r mod 8), combined in the
 * same tree, then the tail, as rd_sum_f32 on the widened, transposed run — so the same bits as the reference
 * path below, without the widened copy and the transpose. Columns go in blocks of at most RD_LP_W. */
#define RD_LP_W 64
typedef struct rd_lp_job {
    const uint16_t *x;
    float          *sums;
    int64_t         R, I, cw, nc;
} rd_lp_job;

EXE_MX_CLONES
static void rd_lp_block(const uint16_t *x, int64_t R, int64_t I, int64_t w, float *out)
{
    double l[8][RD_LP_W];
    for (int j = 0; j < 8; j++)
        for (int64_t i = 0; i < w; i++) l[j][i] = 0;
    int64_t m = R & ~(int64_t)7;
    for (int64_t r = 0; r < m; r += 8)
        for (int j = 0; j < 8; j++) {
            const uint16_t *row = x + (r + j) * I;
            if (r + j + RD_PF_ROWS < R) rd_prefetch_run((const char *)(row + RD_PF_ROWS * I), w * 2);
            double *lj = l[j];
            for (int64_t i = 0; i < w; i++) lj[i] += (double)fp_bf16_to_f32_inline(row[i]);
        }
    for (int64_t i = 0; i < w; i++) {
        double s = ((l[0][i] + l[1][i]) + (l[2][i] + l[3][i])) + ((l[4][i] + l[5][i]) + (l[6][i] + l[7][i]));
        for (int64_t r = m; r < R; r++) s += (double)fp_bf16_to_f32_inline(x[r * I + i]);
        out[i] = (float)(R ? 0.0 + s : 0.0);   /* rd_rows adds the (zero) init the same way */
    }
}

static void rd_lp_cols(void *ctx, int64_t c0, int64_t c1, int tid)
{
    const rd_lp_job *J = ctx;
    for (int64_t c = c0; c < c1; c++) {
        int64_t o = c / J->nc, i0 = c % J->nc * J->cw;
        rd_lp_block(J->x + o * J->R * J->I + i0, J->R, J->I, UT_MIN(J->cw, J->I - i0), J->sums + o * J->I + i0);
    }
    (void)tid;
}

/* The column path's sums into `sums` (outer values); 0 when it does not apply. */
static int rd_lp_in_place(exe_state *S, const tpu_tensor *a, const uint8_t *is_red, float *sums)
{
    int64_t O, R, I;
    if (a->dtype != TPU_BF16 || EXE_FORCE_REF(S) || !rd_view(a, is_red, &O, &R, &I) || I < 2) return 0;
    rd_lp_job J = {a->data, sums, R, I, RD_LP_W, 0};
    /* narrower blocks when there are few, so both halves of a small I can run on two threads */
    while (J.cw > 8 && O * ((I + J.cw - 1) / J.cw) < 4) J.cw /= 2;
    J.nc = (I + J.cw - 1) / J.cw;
    exe_par_for(O * R * I > 65536 && O * J.nc > 1 ? S->threads : 1, O * J.nc, 1, rd_lp_cols, &J);
    return 1;
}

/* A bf16/f16 sum accumulated in f32 (see the top of the file): the input widened to f32, summed by the f32
 * kernel, init added and rounded once to the result type. 1 when done, 0 when `in` is not such a sum. */
static int rd_low_precision_sum(exe_state *S, const tpu_tensor *a, const tpu_tensor *init, const uint8_t *is_red,
                                int64_t outer, int64_t inner, tpu_tensor *res, tpu_status *st)
{
    if ((a->dtype != TPU_BF16 && a->dtype != TPU_F16) || res->dtype != a->dtype || init->dtype != a->dtype) return 0;
    float *sums = ut_malloc((size_t)(outer ? outer : 1) * sizeof *sums);
    if (sums && rd_lp_in_place(S, a, is_red, sums)) {
        double i0 = ten_load_f64(init->dtype, init->data, 0);
        for (int64_t o = 0; o < outer; o++) exe_store_float(S, res->dtype, res->data, o, (double)(float)(i0 + sums[o]));
        ut_free(sums);
        return 1;
    }
    float *wide = ut_malloc((size_t)(a->count ? a->count : 1) * sizeof *wide);
    if (!wide || !sums) {
        ut_free(wide);
        ut_free(sums);
        *st = ut_nomem(S->ctx);
        return 1;
    }
    tpu_tensor w = *a;   /* the same dims and strides, as f32 */
    w.dtype = TPU_F32;
    w.data = wide;
    w.nbytes = (size_t)a->count * sizeof(float);
    rd_widen(a, wide);
    void *buf = NULL;
    int moved;
    const void *src = rd_arrange(&w, is_red, &buf, &moved);
    if (!src) {
        *st = ut_nomem(S->ctx);
    } else {
        rd_job J;
        memset(&J, 0, sizeof J);
        J.is32 = 1;
        J.bop = HLO_ADD;
        J.init = 0;
        J.x = src;
        J.out = sums;
        J.O = outer;
        J.R = inner;
        J.I = 1;
        exe_par_for(outer * inner > 65536 && outer > 1 ? S->threads : 1, outer,
                    UT_MAX((int64_t)1, 32768 / UT_MAX(inner, (int64_t)1)), rd_rows, &J);
        double i0 = ten_load_f64(init->dtype, init->data, 0);
        for (int64_t o = 0; o < outer; o++) exe_store_float(S, res->dtype, res->data, o, (double)(float)(i0 + sums[o]));
    }
    ut_free(buf);
    ut_free(wide);
    ut_free(sums);
    return 1;
}

/* ---- integers: add, multiply, and, or, xor, max, min give one result whatever the order (wrapping
 * arithmetic is associative and commutative), so runs fold in lanes and chunks combine in any order ---- */

static int rd_int_ok(const tpu_tensor *a, hlo_op op)
{
    int k = tpu_dtype_kind(a->dtype), bits = tpu_dtype_bits(a->dtype);
    return (k == 's' || k == 'u') && (bits == 32 || bits == 64) &&
           (op == HLO_ADD || op == HLO_MULTIPLY || op == HLO_AND || op == HLO_OR || op == HLO_XOR || op == HLO_MAXIMUM ||
            op == HLO_MINIMUM);
}

typedef struct rd_ijob {
    const char *x;
    uint64_t   *part;     /* [O][nch] partial results */
    int64_t     R, nch, ch;
    int         es, uns;
    hlo_op      op;
} rd_ijob;

#define RD_LANES 256

/* *acc <- *acc op x[0] op ... op x[n-1] (any order: the ops are exact); long runs in RD_LANES lanes */
EXE_VEC
static void rd_int_fold(hlo_op op, int uns, int es, const char *x, int64_t n, uint64_t *acc)
{
#define RD_OP(a, b, z, len)                                                                        \
    (es == 4 ? ewi_binary32(op, uns, (const uint32_t *)(a), (const uint32_t *)(b), (uint32_t *)(z), len) \
             : ewi_binary64(op, uns, (const uint64_t *)(a), (const uint64_t *)(b), (uint64_t *)(z), len))
    int64_t i = 0;
    if (n >= 2 * RD_LANES) {
        uint64_t lanes[RD_LANES];
        memcpy(lanes, x, RD_LANES * (size_t)es);
        for (i = RD_LANES; i + RD_LANES <= n; i += RD_LANES) RD_OP(lanes, x + i * es, lanes, RD_LANES);
        for (int j = 0; j < RD_LANES; j++) RD_OP(acc, (const char *)lanes + j * es, acc, 1);
    }
    for (; i < n; i++) RD_OP(acc, x + i * es, acc, 1);
#undef RD_OP
}

static void rd_int_chunk(void *ctx, int64_t c0, int64_t c1, int tid)
{
    const rd_ijob *J = ctx;
    for (int64_t c = c0; c < c1; c++) {
        int64_t o = c / J->nch, r0 = c % J->nch * J->ch, len = UT_MIN(J->ch, J->R - r0);
        uint64_t *acc = &J->part[c];
        memcpy(acc, J->x + (o * J->R + r0) * J->es, (size_t)J->es);
        rd_int_fold(J->op, J->uns, J->es, J->x + (o * J->R + r0 + 1) * J->es, len - 1, acc);
    }
    (void)tid;
}

/* out[o] = init op x[o][0] op x[o][1] ... ; x arranged [O][R] */
static tpu_status rd_int(exe_state *S, hlo_op op, const tpu_tensor *a, const void *x, const tpu_tensor *init, tpu_tensor *res,
                         int64_t O, int64_t R)
{
    int es = (int)tpu_dtype_size(a->dtype), uns = tpu_dtype_kind(a->dtype) == 'u';
    int nt = exe_par_threads(S->threads);
    rd_ijob J = {x, NULL, R, 1, R, es, uns, op};
    if (R > 65536 && O < 4 * nt) {   /* few long rows: split them */
        J.ch = UT_MAX((int64_t)65536, R / (8 * nt));
        J.nch = (R + J.ch - 1) / J.ch;
    }
    J.part = ut_calloc((size_t)(O * J.nch + 1), sizeof(uint64_t));
    if (!J.part) return ut_nomem(S->ctx);
    if (R > 0) exe_par_for(O * R > 65536 ? S->threads : 1, O * J.nch, UT_MAX((int64_t)1, 65536 / UT_MAX(J.ch, (int64_t)1)),
                           rd_int_chunk, &J);
    for (int64_t o = 0; o < O; o++) {
        uint64_t acc = 0;
        memcpy(&acc, init->data, (size_t)es);
        for (int64_t c = 0; R > 0 && c < J.nch; c++) {
            uint64_t p = J.part[o * J.nch + c];
            rd_int_fold(op, uns, es, (const char *)&p, 1, &acc);
        }
        memcpy((char *)res->data + o * es, &acc, (size_t)es);
    }
    ut_free(J.part);
    return TPU_OK;
}

/* ---- any reducer with a block form (exe_vfn): many outputs fold in step, one lane each, every lane the
 * reference's fold in r order (argmin/argmax, bf16 sums rounded at each step, ...) ---- */

#define RD_W 256   /* lanes per tile */

typedef struct rd_vjob {
    exe_state        *S;
    const exe_vfn    *vf;
    int               n;
    const char      **x;       /* input k: element (r, o) at x[k] + (r * xr[k] + o * xo[k]) elements */
    const int64_t    *xr, *xo;  /* arranged [R][O] (xr O, xo 1), or read in place from [O][R] (xr 1, xo R) */
    const tpu_tensor *const *init;
    tpu_tensor      **res;
    int64_t           O, R;
    _Atomic int       failed;
} rd_vjob;

/* lanes of input k at (r, o0..o0+w): straight from x, or gathered along o (an input read in place), or
 * widened from bf16, into buf */
static void *rd_vlanes(const rd_vjob *J, int k, int64_t r, int64_t o0, int w, char *buf)
{
    const tpu_tensor *t = J->res[k];   /* inputs and results share dtypes (checked by the caller) */
    size_t es = tpu_dtype_size(t->dtype);
    int64_t xo = J->xo[k];
    const char *p = J->x[k] + (size_t)(r * J->xr[k] + o0 * xo) * es;
    if (t->dtype == TPU_BF16) {
        for (int i = 0; i < w; i++) ((float *)buf)[i] = fp_bf16_to_f32_inline(((const uint16_t *)p)[i * xo]);
        return buf;
    }
    if (xo == 1) return (void *)p;
    if (es == 4)
        for (int i = 0; i < w; i++) ((uint32_t *)buf)[i] = ((const uint32_t *)p)[i * xo];
    else if (es == 8)
        for (int i = 0; i < w; i++) ((uint64_t *)buf)[i] = ((const uint64_t *)p)[i * xo];
    else
        for (int i = 0; i < w; i++) memcpy(buf + (size_t)i * es, p + (size_t)i * xo * es, es);
    return buf;
}

static void rd_vtile(void *ctx, int64_t t0, int64_t t1, int tid)
{
    rd_vjob *J = ctx;
    int n = J->n;
    size_t lane = RD_W * 8;
    char *mem = ut_malloc(exe_vfn_scratch_bytes(J->vf) + lane * (size_t)(3 * n));
    if (!mem) {
        atomic_store(&J->failed, 1);
        return;
    }
    char *acc[2] = {mem, mem + lane * (size_t)n}, *xb = mem + 2 * lane * (size_t)n, *scratch = mem + 3 * lane * (size_t)n;
    for (int64_t tile = t0; tile < t1; tile++) {
        int64_t o0 = tile * RD_W;
        int w = (int)UT_MIN((int64_t)RD_W, J->O - o0), cur = 0;
        void *args[64], *outs[32];
        for (int k = 0; k < n; k++) {   /* every lane starts from the init value */
            int lb = exe_vfn_lane_bytes(J->res[k]->dtype);
            uint64_t v = 0;
            if (J->init[k]->dtype == TPU_BF16) {
                float f = fp_bf16_to_f32_inline(((const uint16_t *)J->init[k]->data)[0]);
                memcpy(&v, &f, 4);
            } else {
                memcpy(&v, J->init[k]->data, (size_t)lb);
            }
            char *a = acc[0] + lane * k;   /* (typed fills: a memcpy of run-time size per lane is a libc call) */
            if (lb == 1) memset(a, (int)(uint8_t)v, (size_t)w);
            else if (lb == 4) for (int i = 0; i < w; i++) ((uint32_t *)a)[i] = (uint32_t)v;
            else if (lb == 8) for (int i = 0; i < w; i++) ((uint64_t *)a)[i] = v;
            else for (int i = 0; i < w; i++) memcpy(a + (size_t)i * lb, &v, (size_t)lb);
        }
        for (int64_t r = 0; r < J->R; r++) {
            for (int k = 0; k < n; k++) {
                args[k] = acc[cur] + lane * k;
                args[n + k] = rd_vlanes(J, k, r, o0, w, xb + lane * k);
                outs[k] = acc[!cur] + lane * k;
            }
            exe_vfn_eval(J->S, J->vf, args, outs, w, scratch);
            cur = !cur;
        }
        for (int k = 0; k < n; k++) {
            tpu_tensor *t = J->res[k];
            const char *a = acc[cur] + lane * k;
            if (t->dtype == TPU_BF16)
                for (int i = 0; i < w; i++) ((uint16_t *)t->data)[o0 + i] = fp_f32_to_bf16_inline(((const float *)a)[i]);
            else
                memcpy((char *)t->data + (size_t)o0 * tpu_dtype_size(t->dtype), a, (size_t)w * tpu_dtype_size(t->dtype));
        }
    }
    ut_free(mem);
    (void)tid;
}

/* Returns 1 when done through lanes (st set on failure), 0 when the reducer or types have no block form. */
static int rd_vfn(exe_state *S, const exe_scalar_fn *fn, exe_value *const *ops, int n, const uint8_t *is_red,
                  tpu_tensor **res, int64_t O, int64_t R, tpu_status *st)
{
    const exe_vfn *vf = exe_scalar_fn_vfn(fn);
    if (!vf || n > 8 || O < 16) return 0;
    for (int k = 0; k < n; k++) {
        tpu_dtype t = ops[k]->t->dtype;
        if (!exe_vfn_lane_bytes(t) || t != ops[n + k]->t->dtype || t != res[k]->dtype ||
            exe_scalar_fn_param_dtype(fn, k) != t || exe_scalar_fn_param_dtype(fn, n + k) != t)
            return 0;
    }
    void *bufs[8] = {0};
    const char *x[8];
    int64_t xr[8], xo[8];
    const tpu_tensor *init[8];
    for (int k = 0; k < n && !*st; k++) {
        int moved;
        init[k] = ops[n + k]->t;
        /* already [O][R] (a reduction over the minor dims: argmin over rows): read in place, the lanes of a
         * tile gathered along o (the tile's rows stay in cache), rather than transposed whole first */
        if (rd_in_order(ops[k]->t, is_red, 0)) {
            x[k] = ops[k]->t->data;
            xr[k] = 1;
            xo[k] = R;
            continue;
        }
        x[k] = rd_arrange2(ops[k]->t, is_red, 1, &bufs[k], &moved);
        xr[k] = O;
        xo[k] = 1;
        if (!x[k]) *st = ut_nomem(S->ctx);
    }
    if (!*st) {
        rd_vjob J = {S, vf, n, x, xr, xo, init, res, O, R, 0};
        int64_t tiles = (O + RD_W - 1) / RD_W;
        exe_par_for(O * R > 16384 ? S->threads : 1, tiles, 1, rd_vtile, &J);
        if (atomic_load(&J.failed)) *st = ut_nomem(S->ctx);
    }
    for (int k = 0; k < n; k++) ut_free(bufs[k]);
    return 1;
}

/* ---- a reduce over dims of size 1 whose init is the reducer's identity: a copy ----
 * (take_along_axis' bounds check reduces pred[..., 1] with and/true.) Only pred and integer types: for
 * floats, f(init, x) is not x for every x (-0 + 0 = +0, max flushes subnormals and canonicalises NaNs). */
static int rd_identity_init(hlo_op op, const tpu_tensor *init)
{
    tpu_dtype t = init->dtype;
    char k = tpu_dtype_kind(t);
    int bits = tpu_dtype_bits(t);
    if (k != 'p' && k != 's' && k != 'u') return 0;
    int64_t v = ten_load_i64(t, init->data, 0);
    int64_t smin = bits >= 64 ? INT64_MIN : -((int64_t)1 << (bits - 1)), smax = bits >= 64 ? INT64_MAX : ((int64_t)1 << (bits - 1)) - 1;
    int64_t all = k == 'p' ? 1 : -1;   /* all bits set, as ten_load_i64 reads it (unsigned: sign-extended or not) */
    switch (op) {
    case HLO_AND: return k == 'p' ? v == 1 : (v == all || (k == 'u' && (uint64_t)v == (bits >= 64 ? UINT64_MAX : ((uint64_t)1 << bits) - 1)));
    case HLO_OR: case HLO_XOR: return v == 0;
    case HLO_ADD: return k != 'p' && v == 0;
    case HLO_MULTIPLY: return k != 'p' && v == 1;
    case HLO_MAXIMUM: return k == 'p' || k == 'u' ? v == 0 : v == smin;
    case HLO_MINIMUM:
        if (k == 'p') return v == 1;
        if (k == 'u') return (uint64_t)v == (bits >= 64 ? UINT64_MAX : ((uint64_t)1 << bits) - 1) || v == all;
        return v == smax;
    default: return 0;
    }
}

/* Returns 1 when done: one input, every reduced dim of size 1, an identity init. */
static int rd_size1_copy(const exe_scalar_fn *fn, exe_value *const *ops, int n, int64_t inner, tpu_tensor *res)
{
    const tpu_tensor *a = ops[0]->t;
    if (n != 1 || inner != 1 || res->dtype != a->dtype || ops[1]->t->dtype != a->dtype || res->count != a->count ||
        exe_scalar_fn_param_dtype(fn, 0) != a->dtype || exe_scalar_fn_param_dtype(fn, 1) != a->dtype ||
        !rd_identity_init(exe_scalar_fn_binop(fn), ops[1]->t))
        return 0;
    if (a->nbytes) memcpy(res->data, a->data, a->nbytes);   /* (size-1 dims: the element order is the same) */
    return 1;
}

/* ---- argmin / argmax: jnp.argmin's variadic reduce of (f32 values, s32 indices) ----
 * The reducer, with a = (p0, p1) the accumulator and b = (p2, p3) the next element:
 *   c = compare(p0, p2, LT) or compare(p0, p0, NE)          (GT for argmax: a better or a NaN)
 *   v = select(c, p0, p2)
 *   i = select(c or (compare(p0, p2, EQ) and compare(p1, p3, LT)), p1, p3)
 * Folded in r order from the init, that is: the first NaN (value and index) if any; else the best value m
 * with the smallest index among the elements equal to m (the init counting as one), the value taken from the
 * last element equal to m, which is m itself unless m is zero (+0 == -0). Rows with a NaN or m == 0 take the
 * literal fold (in double, as the reference evaluates the reducer); the others two vector passes. */

static const hlo_instr *rd_arg_param(const hlo_instr *x, int k)
{
    return x->op == HLO_PARAMETER && x->param_no == k ? x : NULL;
}

/* compare(pa, pb, dir) with a plain (or absent) comparison type */
static int rd_arg_cmp(const hlo_instr *x, int a, int b, const char *dir, const char *type)
{
    if (x->op != HLO_COMPARE || x->nops != 2 || !rd_arg_param(x->ops[0], a) || !rd_arg_param(x->ops[1], b)) return 0;
    const char *d = hlo_attr_str(x, HK_DIRECTION), *t = hlo_attr_str(x, HK_TYPE);
    return d && !strcmp(d, dir) && (!t || !strcmp(t, type));
}

/* x = op(p, q) (or, and): its two operands, for the callers to try in either order */
static int rd_arg_pair(const hlo_instr *x, hlo_op op, const hlo_instr **p, const hlo_instr **q)
{
    if (x->op != op || x->nops != 2) return 0;
    *p = x->ops[0];
    *q = x->ops[1];
    return 1;
}

/* c = or(compare(p0, p2, dir), compare(p0, p0, NE)) in either order */
static int rd_arg_better(const hlo_instr *c, const char *dir)
{
    const hlo_instr *u, *v;
    if (!rd_arg_pair(c, HLO_OR, &u, &v)) return 0;
    return (rd_arg_cmp(u, 0, 2, dir, "FLOAT") && rd_arg_cmp(v, 0, 0, "NE", "FLOAT")) ||
           (rd_arg_cmp(v, 0, 2, dir, "FLOAT") && rd_arg_cmp(u, 0, 0, "NE", "FLOAT"));
}

/* 1: argmin, 2: argmax, 0: some other reducer */
static int rd_arg_kind(const hlo_comp *c)
{
    const hlo_instr *r = c->root;
    if (c->nparams != 4 || r->op != HLO_TUPLE || r->nops != 2) return 0;
    const hlo_instr *sv = r->ops[0], *si = r->ops[1];
    if (sv->op != HLO_SELECT || sv->nops != 3 || !rd_arg_param(sv->ops[1], 0) || !rd_arg_param(sv->ops[2], 2)) return 0;
    if (si->op != HLO_SELECT || si->nops != 3 || !rd_arg_param(si->ops[1], 1) || !rd_arg_param(si->ops[2], 3)) return 0;
    int kind = rd_arg_better(sv->ops[0], "LT") ? 1 : rd_arg_better(sv->ops[0], "GT") ? 2 : 0;
    if (!kind) return 0;
    const char *dir = kind == 1 ? "LT" : "GT";
    /* index condition: or(c', and(eq, lt)) with c' the value condition (the same instruction or an equal one) */
    const hlo_instr *u, *v, *e, *l;
    if (!rd_arg_pair(si->ops[0], HLO_OR, &u, &v)) return 0;
    if (!(u == sv->ops[0] || rd_arg_better(u, dir))) {
        const hlo_instr *t = u;
        u = v;
        v = t;
        if (!(u == sv->ops[0] || rd_arg_better(u, dir))) return 0;
    }
    if (!rd_arg_pair(v, HLO_AND, &e, &l)) return 0;
    if (!(rd_arg_cmp(e, 0, 2, "EQ", "FLOAT") && rd_arg_cmp(l, 1, 3, "LT", "SIGNED")) &&
        !(rd_arg_cmp(l, 0, 2, "EQ", "FLOAT") && rd_arg_cmp(e, 1, 3, "LT", "SIGNED")))
        return 0;
    return kind;
}

typedef struct rd_arg_job {
    const float   *x;
    const int32_t *ix;
    float         *ov;
    int32_t       *oi;
    int64_t        R;
    int            is_max;
    float          iv;
    int32_t        ii;
    int            iota;   /* the indices are the position along the reduced dim: ix not read (NULL) */
} rd_arg_job;

/* The literal fold of one row (the reference's steps; values through double as the scalar evaluator holds
 * them, which quiets a signalling NaN and, under DAZ, reads subnormals as zero) */
static void rd_arg_fold(const rd_arg_job *J, const float *x, const int32_t *ix, float *ov, int32_t *oi)
{
    double av = (double)J->iv;
    int32_t ai = J->ii;
    for (int64_t r = 0; r < J->R; r++) {
        double bv = (double)x[r];
        int c = (J->is_max ? av > bv : av < bv) || av != av;
        int32_t bi = ix ? ix[r] : (int32_t)r;
        int ci = c || (av == bv && ai < bi);
        av = c ? av : bv;
        ai = ci ? ai : bi;
    }
    *ov = (float)av;
    *oi = ai;
}

/* rows [o0, o1): the best value's key (subnormals as zero, as the compares see them under DAZ) and a NaN flag
 * in one integer pass, the smallest index among the elements equal to it in a second */
EXE_VEC
static void rd_arg_rows(void *ctx, int64_t o0, int64_t o1, int tid)
{
    const rd_arg_job *J = ctx;
    int64_t R = J->R;
    float iv = (float)(double)J->iv;   /* (the reference holds the init as a double: DAZ reads it as zero) */
    for (int64_t o = o0; o < o1; o++) {
        const uint32_t *u = (const uint32_t *)J->x + o * R;
        const int32_t *ix = J->iota ? NULL : J->ix + o * R;
        int32_t k = J->is_max ? INT32_MIN : INT32_MAX;
        int nan = 0;
        if (J->is_max)
            for (int64_t r = 0; r < R; r++) {
                int32_t v = rd_fkey_daz(u[r]);
                k = v > k ? v : k;
                nan |= (u[r] & 0x7FFFFFFFu) > 0x7F800000u;
            }
        else
            for (int64_t r = 0; r < R; r++) {
                int32_t v = rd_fkey_daz(u[r]);
                k = v < k ? v : k;
                nan |= (u[r] & 0x7FFFFFFFu) > 0x7F800000u;
            }
        uint32_t mb = (uint32_t)rd_fkey((uint32_t)k);
        float m;
        memcpy(&m, &mb, 4);
        if (nan || R == 0 || k == 0 || k == -1 || iv != iv) {   /* (keys 0 and -1: +0 and -0) */
            rd_arg_fold(J, J->x + o * R, ix, &J->ov[o], &J->oi[o]);
            continue;
        }
        if (J->is_max ? iv > m : iv < m) {   /* the init is never displaced */
            J->ov[o] = iv;
            J->oi[o] = J->ii;
            continue;
        }
        /* m is a normal number or an infinity: equal values have its bits */
        int32_t best = INT32_MAX;
        if (ix)
            for (int64_t r = 0; r < R; r++) {
                int32_t eq = -(int32_t)(u[r] == mb), c = (ix[r] & eq) | (INT32_MAX & ~eq);   /* (no branch: vectorises) */
                best = c < best ? c : best;
            }
        else
            for (int32_t r = 0; r < (int32_t)R; r++) {
                int32_t eq = -(int32_t)(u[r] == mb), c = (r & eq) | (INT32_MAX & ~eq);
                best = c < best ? c : best;
            }
        if (iv == m && J->ii < best) best = J->ii;
        J->ov[o] = m;
        J->oi[o] = best;
    }
    (void)tid;
}

/* Is x (the index operand's instruction) an s32 iota, or a broadcast of one, along the one reduced dim of size > 1
 * of a? Then index r is r itself (jnp.argmin's broadcast iota: a [65536, 256] array the kernel need not read). */
static int rd_arg_is_iota(const hlo_instr *x, const uint8_t *is_red, const tpu_tensor *a)
{
    int64_t d = -1;
    if (x->op == HLO_IOTA) {
        d = hlo_attr_int(x, HK_IOTA_DIMENSION, -1);
    } else if (x->op == HLO_BROADCAST && x->nops == 1 && x->ops[0]->op == HLO_IOTA) {
        const int64_t *bd;
        int nb = hlo_attr_ints(x, HK_DIMENSIONS, &bd);
        int64_t e = hlo_attr_int(x->ops[0], HK_IOTA_DIMENSION, -1);
        if (e < 0 || e >= nb || nb != x->ops[0]->shape.rank) return 0;
        d = bd[e];
    }
    if (x->shape.dtype != TPU_S32 || x->shape.rank != a->rank || d < 0 || d >= a->rank || !is_red[d]) return 0;
    for (int i = 0; i < a->rank; i++)
        if (x->shape.dims[i] != a->dims[i] || (is_red[i] && a->dims[i] > 1 && i != d)) return 0;
    return a->dims[d] <= INT32_MAX;
}

/* Returns 1 when done (st set on failure), 0 when the reduce is not an f32/s32 argmin or argmax. */
static int rd_argminmax(exe_state *S, const hlo_instr *in, const exe_scalar_fn *fn, exe_value *const *ops, int n,
                        const uint8_t *is_red, tpu_tensor **res, int64_t O, int64_t R, tpu_status *st)
{
    const hlo_comp *c = in->called[0];
    if (n != 2 || ops[0]->t->dtype != TPU_F32 || ops[1]->t->dtype != TPU_S32 || ops[2]->t->dtype != TPU_F32 ||
        ops[3]->t->dtype != TPU_S32 || res[0]->dtype != TPU_F32 || res[1]->dtype != TPU_S32 ||
        exe_scalar_fn_param_dtype(fn, 0) != TPU_F32 || exe_scalar_fn_param_dtype(fn, 1) != TPU_S32 ||
        exe_scalar_fn_param_dtype(fn, 2) != TPU_F32 || exe_scalar_fn_param_dtype(fn, 3) != TPU_S32)
        return 0;
    int kind = rd_arg_kind(c);
    if (!kind) return 0;
    void *bufs[2] = {0};
    int moved;
    int iota = rd_arg_is_iota(in->ops[1], is_red, ops[0]->t);
    const void *x = rd_arrange(ops[0]->t, is_red, &bufs[0], &moved);
    const void *ix = iota ? NULL : rd_arrange(ops[1]->t, is_red, &bufs[1], &moved);
    if (!x || (!ix && !iota)) {
        *st = ut_nomem(S->ctx);
    } else {
        rd_arg_job J = {x, ix, res[0]->data, res[1]->data, R, kind == 2, ((const float *)ops[2]->t->data)[0],
                        ((const int32_t *)ops[3]->t->data)[0], iota};
        exe_par_for(O * R > 65536 ? S->threads : 1, O, UT_MAX((int64_t)1, 16384 / UT_MAX(R, (int64_t)1)), rd_arg_rows, &J);
    }
    ut_free(bufs[0]);
    ut_free(bufs[1]);
    return 1;
}

/* The f32 sum of a whole array to one element (a loop body's sum of a small vector, thousands of times): the
 * value rd_rows gives (init + rd_sum_f32 in double, rounded once), without the job, arrangement and
 * thread set-up that cost more than a 64-element sum. Returns 0 when the reduce is not of that kind. */
static int rd_sum_all_f32(exe_state *S, const hlo_instr *in, const exe_scalar_fn *fn, const tpu_tensor *a,
                          const tpu_tensor *init, int64_t n, exe_value **out, tpu_status *st)
{
    if (a->dtype != TPU_F32 || !init || init->dtype != TPU_F32 || exe_scalar_fn_binop(fn) != HLO_ADD ||
        hlo_shape_is_tuple(&in->shape) || in->shape.dtype != TPU_F32)
        return 0;
    tpu_tensor *t;
    if ((*st = exe_alloc_shape(S, &in->shape, &t))) return 1;
    if (t->count != 1) {
        tpu_tensor_free(t);
        return 0;
    }
    double i0 = ((const float *)init->data)[0];
    ((float *)t->data)[0] = (float)(n ? i0 + rd_sum_f32((const float *)a->data, n) : i0);
    *st = exe_out_array(S, t, out);
    return 1;
}

EXE_KERNEL(exe_k_reduce)
{
    int n = in->nops / 2;
    if (n < 1 || in->nops != 2 * n || in->ncalled != 1) return exe_fail(S, in, TPU_ERR_SHAPE, "needs N inputs, N inits and to_apply");
    if (n > 32) return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "reduce over more than 32 inputs");
    const int64_t *rd;
    int nrd = hlo_attr_ints(in, HK_DIMENSIONS, &rd);
    const tpu_tensor *a0 = ops[0]->t;
    if (!a0) return exe_fail(S, in, TPU_ERR_SHAPE, "operand is a tuple");
    uint8_t is_red[TPU_MAX_RANK] = {0};
    for (int i = 0; i < nrd; i++) {
        if (rd[i] < 0 || rd[i] >= a0->rank || is_red[rd[i]])
            return exe_fail(S, in, TPU_ERR_SHAPE, "bad reduce dimension %lld", (long long)rd[i]);
        is_red[rd[i]] = 1;
    }
    int64_t inner = 1, outer = 1;
    for (int i = 0; i < a0->rank; i++) {
        if (is_red[i]) inner *= a0->dims[i];
        else outer *= a0->dims[i];
    }
    const exe_scalar_fn *fn;
    tpu_status st = exe_scalar_fn_get(S, in->called[0], &fn);
    if (st) return st;
    if (exe_scalar_fn_nparams(fn) != 2 * n || exe_scalar_fn_nresults(fn) != n)
        return exe_fail(S, in, TPU_ERR_SHAPE, "to_apply must take %d and return %d values", 2 * n, n);
    if (n == 1 && outer == 1 && !EXE_FORCE_REF(S) && rd_sum_all_f32(S, in, fn, a0, ops[1]->t, inner, out, &st)) return st;

    /* results */
    tpu_tensor *res[32];
    exe_value *vals[32];
    const void *src[32];
    void *bufs[32];
    for (int k = 0; k < n; k++) {   /* (only the first n are used: clearing all 32 of each cost a 64-element sum's time) */
        res[k] = NULL;
        vals[k] = NULL;
        src[k] = NULL;
        bufs[k] = NULL;
    }
    for (int k = 0; k < n && !st; k++) {
        const hlo_shape *rs = hlo_shape_is_tuple(&in->shape) ? &in->shape.tuple[k] : &in->shape;
        st = exe_alloc_shape(S, rs, &res[k]);
        if (st) break;
        if (ops[k]->t->count != a0->count) {
            st = exe_fail(S, in, TPU_ERR_SHAPE, "inputs differ in size");
            break;
        }
        if (res[k]->count != outer) {
            st = exe_fail(S, in, TPU_ERR_SHAPE, "result %d has %lld elements, expected %lld", k, (long long)res[k]->count,
                          (long long)outer);
            break;
        }
    }
    hlo_op bop = exe_scalar_fn_binop(fn);
    /* a bf16/f16 sum is accumulated in f32 as XLA does, not step by step in lanes */
    int lowsum = !st && n == 1 && bop == HLO_ADD && (a0->dtype == TPU_BF16 || a0->dtype == TPU_F16) &&
                 res[0]->dtype == a0->dtype && ops[1]->t->dtype == a0->dtype;
    int argm = !st && !EXE_FORCE_REF(S) && (rd_size1_copy(fn, ops, n, inner, res[0]) ||
                                            rd_argminmax(S, in, fn, ops, n, is_red, res, outer, inner, &st));
    int lanes = !st && !argm && !lowsum && !EXE_FORCE_REF(S) && !(n == 1 && (a0->dtype == TPU_F32 || a0->dtype == TPU_F64)) && !(n == 1 && rd_int_ok(a0, bop)) &&
                rd_vfn(S, fn, ops, n, is_red, res, outer, inner, &st);
    for (int k = 0; k < n && !st && !lanes && !lowsum && !argm; k++) {
        int moved;
        int64_t vo, vr, vi;
        if (n == 1 && (a0->dtype == TPU_F32 || a0->dtype == TPU_F64) && rd_view(a0, is_red, &vo, &vr, &vi))
            src[k] = a0->data;   /* reduced over a middle block: read in place (rd_cols) */
        else
            src[k] = rd_arrange(ops[k]->t, is_red, &bufs[k], &moved);
        if (!src[k]) st = ut_nomem(S->ctx);
    }
    if (lanes || argm) {
        /* done through lanes (rd_vfn), as a copy or as an argmin/argmax */
    } else if (lowsum && rd_low_precision_sum(S, a0, ops[1]->t, is_red, outer, inner, res[0], &st)) {
        /* done: accumulated in f32 */
    } else if (!st && n == 1 && (a0->dtype == TPU_F32 || a0->dtype == TPU_F64) && res[0]->dtype == a0->dtype &&
        (bop == HLO_ADD || bop == HLO_MAXIMUM || bop == HLO_MINIMUM)) {
        rd_job J;
        memset(&J, 0, sizeof J);
        J.is32 = a0->dtype == TPU_F32;
        J.bop = bop;
        J.ref = EXE_FORCE_REF(S);
        J.init = ten_load_f64(a0->dtype, ops[1]->t->data, 0);
        J.out = res[0]->data;
        if (src[0] == a0->data && rd_view(a0, is_red, &J.O, &J.R, &J.I)) {
            J.x = a0->data;
        } else {
            J.x = src[0];
            J.O = outer;
            J.R = inner;
            J.I = 1;
        }
        /* chunks over outer rows (whole rows), or over columns of a [R][I] block */
        if (J.I == 1 && !EXE_FORCE_REF(S) && rd_rows_split(S, &J)) {
            /* done: long rows split across the threads */
        } else if (J.I == 1) {
            exe_par_for(outer * inner > 65536 && J.O > 1 ? S->threads : 1, J.O, UT_MAX((int64_t)1, 32768 / UT_MAX(J.R, (int64_t)1)),
                        rd_rows, &J);
        } else {
            J.cw = 512;   /* each column sums in r order whatever the blocks: narrower ones when few, for threads */
            while (J.cw > 16 && J.O * ((J.I + J.cw - 1) / J.cw) < 4) J.cw /= 2;
            J.nc = (J.I + J.cw - 1) / J.cw;
            exe_par_for(outer * inner > 65536 && J.O * J.nc > 1 ? S->threads : 1, J.O * J.nc, 1, rd_cols, &J);
        }
    } else if (!st && !EXE_FORCE_REF(S) && n == 1 && rd_int_ok(a0, bop) && res[0]->dtype == a0->dtype && ops[1]->t->dtype == a0->dtype) {
        st = rd_int(S, bop, a0, src[0], ops[1]->t, res[0], outer, inner);
    } else if (!st) {
        tpu_dtype dt[32], it[32];
        for (int k = 0; k < n; k++) {
            dt[k] = ops[k]->t->dtype;
            it[k] = ops[n + k]->t->dtype;
        }
        rd_gen_job G = {S, fn, n, ops, src, res, dt, it, inner};
        exe_par_for(outer * inner > 16384 && outer > 1 ? S->threads : 1, outer, UT_MAX((int64_t)1, 4096 / UT_MAX(inner, (int64_t)1)),
                    rd_generic, &G);
    }
    for (int k = 0; k < n; k++) ut_free(bufs[k]);
    if (st) {
        for (int k = 0; k < n; k++) tpu_tensor_free(res[k]);
        return st;
    }
    if (!hlo_shape_is_tuple(&in->shape)) return exe_out_array(S, res[0], out);
    for (int k = 0; k < n; k++) {
        vals[k] = exe_value_array(res[k]);
        if (!vals[k]) {
            for (int j = 0; j < k; j++) exe_value_unref(vals[j]);
            for (int j = k + 1; j < n; j++) tpu_tensor_free(res[j]);
            return ut_nomem(S->ctx);
        }
    }
    *out = exe_value_tuple(vals, n);
    return *out ? TPU_OK : ut_nomem(S->ctx);
}
