/* systolic.h — the closed-form systolic-array model (tim_systolic_*).
 *
 * One model serves two masters: the MXU part of the TPU timing model (a weight-stationary array, design §6)
 * and the SCALE-Sim compatible layer mode (src/compat/scalesim*.c), so a GEMM gets the same compute cycles
 * in both. The model is SCALE-Sim's (v2/v3 "systolic_compute_{os,ws,is}"), derived in closed form from the
 * shapes of the demand matrices SCALE-Sim builds cycle by cycle; systolic.c documents each formula.
 *
 * Vocabulary. A GEMM C[M,N] = A[M,K] · B[K,N] (for a convolution: M = output pixels per filter,
 * N = filters, K = filter window R·S·C). SCALE-Sim calls A the "ifmap" operand, B the "filter" operand and
 * C the "ofmap". A dataflow maps two of (M, N, K) onto the array's rows and columns (Sr, Sc) and streams the
 * third through time (T):
 *
 *     dataflow            held in the PEs      Sr (array rows)   Sc (array cols)   T (streamed)
 *     os  output stat.    partial sums C        M                 N                 K
 *     ws  weight stat.    weights B             K                 N                 M
 *     is  input stat.     inputs A              K                 M                 N
 *
 * The work is cut into folds of at most rows x cols, ceil(Sr/rows) x ceil(Sc/cols) of them, run one after
 * the other (column folds outermost, as SCALE-Sim orders them).
 *
 * Example (the TPU timing model: one 128x128 weight-stationary MXU):
 *
 *     tim_array mxu = {128, 128};
 *     tim_systolic_result r;
 *     if (tim_systolic_gemm(&mxu, M, N, K, TIM_DF_WS, &r) == TPU_OK)
 *         cycles = r.cycles;          // == SCALE-Sim's "Total Cycles" for the same GEMM, no stalls
 */
#ifndef TPU_TIMING_SYSTOLIC_H
#define TPU_TIMING_SYSTOLIC_H

#include "tpusim.h"
#include <stdint.h>

typedef enum tim_dataflow { TIM_DF_OS = 0, TIM_DF_WS, TIM_DF_IS } tim_dataflow;

/* a / b correctly rounded to a double, like Python's int / int (SCALE-Sim's reports are Python floats). */
double tim_ratio(int64_t a, int64_t b);

/* "os", "ws", "is" */
const char *tim_dataflow_name(tim_dataflow df);

typedef struct tim_array {
    int64_t rows;   /* array height (SCALE-Sim ArrayHeight) */
    int64_t cols;   /* array width (SCALE-Sim ArrayWidth) */
} tim_array;

/* Largest M, N, K (and array side) the model accepts, so every product below fits in 64 bits. */
#define TIM_SYSTOLIC_MAX_DIM ((int64_t)1 << 31)

typedef struct tim_systolic_result {
    /* mapping */
    int64_t sr, sc, t;          /* spatial rows, spatial cols, streamed length (table above) */
    int64_t row_folds, col_folds, folds;
    /* time: every fold takes fold_cycles = fill_cycles + t + drain_cycles */
    int64_t fold_cycles;
    int64_t fill_cycles;        /* idle cycles before the first streamed element of a fold (weight or
                                   input load for ws/is; 0 for os) */
    int64_t drain_cycles;       /* skew and drain after the last streamed element */
    int64_t cycles;             /* compute cycles as SCALE-Sim reports them: folds * fold_cycles - 1
                                   (SCALE-Sim reports the index of the last cycle, not the count) */
    /* work and utilization (fractions in [0,1]) */
    int64_t macs;               /* M * N * K */
    double  utilization;        /* macs / ((cycles) * rows * cols); SCALE-Sim "Overall Util" / 100 */
    double  mapping_efficiency; /* mean over folds of used PEs / all PEs ("Mapping Efficiency" / 100) */
    double  compute_utilization;/* mean over folds of SCALE-Sim's per-fold compute utilization
                                   ("Compute Util" / 100; see systolic.c for its odd denominator) */
    /* SRAM accesses, counted the way SCALE-Sim counts them (see systolic.c) */
    int64_t ifmap_reads, filter_reads, ofmap_writes;
} tim_systolic_result;

/* The model for one GEMM C[M,N] = A[M,K] · B[K,N] on `arr` with dataflow `df`. TPU_ERR_INVALID if a
 * dimension is < 1 or > TIM_SYSTOLIC_MAX_DIM or the cycle count would overflow. */
tpu_status tim_systolic_gemm(const tim_array *arr, int64_t M, int64_t N, int64_t K, tim_dataflow df,
                             tim_systolic_result *out);

/* A convolution (no padding: SCALE-Sim's topology semantics) mapped onto the GEMM above:
 * M = Eh*Ew with Eh = ceil((H - R + stride_h) / stride_h) (same for W), N = filters, K = R*S*C. */
typedef struct tim_conv {
    int64_t ifmap_h, ifmap_w, filter_h, filter_w, channels, filters, stride_h, stride_w;
} tim_conv;
tpu_status tim_conv_to_gemm(const tim_conv *c, int64_t *M, int64_t *N, int64_t *K);
tpu_status tim_systolic_conv(const tim_array *arr, const tim_conv *c, tim_dataflow df, tim_systolic_result *out);

/* ---- Fold geometry: which cycle of a fold carries which operand (used by the SCALE-Sim emulation) ----
 *
 * Within a fold, cycle t (0 <= t < fold_cycles) feeds each operand edge of the array with at most `width`
 * elements, one per edge lane c. A stream is either
 *   skewed: lane c at cycle t carries data row u = t - c - pre of the fold's operand tile, when
 *           0 <= u < n and c < used (the classic systolic skew: lane c lags lane c-1 by one cycle); or
 *   block:  (skewed == 0) the tile is pushed in reversed, one row per cycle: cycle t < n carries tile
 *           row n-1-t when that row exists (n-1-t < used_rows), on lanes c < used.
 */
typedef struct tim_stream {
    int     skewed;
    int64_t pre;        /* skewed: idle cycles before data row 0 enters lane 0 */
    int64_t n;          /* skewed: data rows; block: tile height (cycles it takes) */
    int64_t used;       /* lanes carrying data */
    int64_t used_rows;  /* block: tile rows present (the others are idle) */
    int64_t width;      /* lanes on this edge */
} tim_stream;

typedef struct tim_fold {
    int64_t fr, fc;                 /* row fold, column fold */
    int64_t rows_used, cols_used;   /* PEs used: rows_used x cols_used */
    int64_t cycles;                 /* == fold_cycles */
    tim_stream ifmap, filter, ofmap;
} tim_fold;

/* Geometry of fold (fr, fc) of a GEMM already modelled in `r`. */
void tim_systolic_fold(const tim_array *arr, tim_dataflow df, const tim_systolic_result *r, int64_t fr,
                       int64_t fc, tim_fold *out);

/* Lanes of `s` active at cycle t: [*c0, *c1] (empty when *c0 > *c1). For a block stream this is
 * [0, used-1] when cycle t carries a tile row, else empty. */
void tim_stream_lanes(const tim_stream *s, int64_t t, int64_t *c0, int64_t *c1);

/* Cycles of a fold in which `s` carries anything: [*t0, *t1). */
void tim_stream_rows(const tim_stream *s, int64_t *t0, int64_t *t1);

#endif
