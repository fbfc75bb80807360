/* model.h — the TPU timing model (design §6, docs/timing.md): for every op of a compiled program, the time
 * its matrix units, vector unit, HBM traffic and interconnect need on a chip, the larger of which is the
 * op's time (plus a fixed launch cost); then the step: ops in schedule order, loops times their trip
 * counts, plus the host's share (launch, infeed, input pipeline). Names start with tim_. */
#ifndef TPU_TIMING_MODEL_H
#define TPU_TIMING_MODEL_H

#include "compile/compile.h"
#include "timing/systolic.h"

typedef enum tim_bound {
    TIM_BOUND_COMPUTE,     /* matrix units (MXU) */
    TIM_BOUND_VECTOR,      /* vector unit (VPU): elementwise math, reductions, depthwise convs */
    TIM_BOUND_MEMORY,      /* HBM bandwidth */
    TIM_BOUND_COLLECTIVE,  /* inter-chip links (ICI) */
    TIM_BOUND_OVERHEAD,    /* fixed per-op launch cost */
    TIM_BOUND_HOST,        /* the host: program launch, infeed, input pipeline */
    TIM_BOUND_IDLE,        /* the device waiting for input */
    TIM_BOUND_COUNT
} tim_bound;

const char *tim_bound_name(tim_bound b);

/* One op of the program (a fusion, a single instruction, or a control op). */
typedef struct tim_op {
    const cmp_op    *op;
    const hlo_instr *root;
    int              depth;        /* 0: entry; 1+: inside loops / branches */
    double           count;        /* executions per step (loop trip counts multiplied) */
    /* per execution */
    double           flops;        /* useful floating-point operations (a multiply-add is 2) */
    double           mxu_flops;    /* of which on the MXU */
    double           mxu_passes;   /* bf16 passes the precision asks for (1, 3, 6) */
    double           mxu_s, vpu_s, hbm_s, ici_s, overhead_s;
    double           fill_s;       /* MXU ops: the transfers their pipeline cannot hide (its first loads, last store) */
    double           time_s;       /* max(mxu, vpu, hbm, ici) + fill + overhead */
    int64_t          hbm_bytes;    /* padded bytes read and written */
    int64_t          ici_bytes;
    double           mxu_util;     /* useful MXU flops / (time x device peak) */
    double           pad_waste;    /* fraction of MXU work spent on padding (0..1) */
    tim_bound        bound;
    int              fused_into;   /* > 0: a cheap producer the TPU compiler would duplicate into this many
                                    * consumer ops (it costs nothing of its own; its vector work is in theirs) */
    double           ici_bw_s;     /* collectives: ici_s without the per-hop latency (what combining keeps) */
    double           coll_bytes;   /* collectives: the bytes costed (operands, or an all-gather's result) */
    int              coll_n;       /* collectives: group size */
    int              combined;     /* collectives: joined the previous one's combined collective (its latency
                                    * paid once), as XLA's all-reduce / all-gather / reduce-scatter combiners do */
    int              trip_known;   /* control ops: trip count known (or observed) */
    double           trips;        /* while: iterations per execution */
} tim_op;

typedef struct tim_opts {
    int     steps;               /* steps simulated (trace and totals); default 1 */
    int     steps_per_exec;      /* steps per host round trip (Keras steps_per_execution); default 1 */
    double  input_rate;          /* samples/s the host pipeline delivers; 0 = unlimited */
    int64_t batch;               /* samples per step (for input_rate); 0 = guess from the first parameter */
    double  launch_s;            /* host cost of one program launch (round trip); default 30 us */
    int     infeed_args;         /* count argument bytes as host->device transfer every step (default 0:
                                  * arguments stay on the device, like variables) */
    const int64_t *trip_counts;  /* observed while trip counts by instruction (functional mode), or NULL */
    int     widen_groups;        /* > 1: a collective whose group is every one of the program's widen_groups
                                  * devices spans the whole slice instead (tpusim scale) */
} tim_opts;

typedef struct tim_result {
    const cmp_program *prog;
    chp_slice          slice;
    int                nops;
    tim_op            *ops;        /* every op of every plan reached, entry order, nested after their parent */
    /* per step, on one device */
    double             device_s;   /* sum of op times, less the collective time hidden behind compute */
    double             collective_hidden_s; /* collective time that ran beside compute (async collectives) */
    double             host_s;     /* host work not hidden (launch share, infeed, input wait) */
    double             idle_s;     /* device waiting for input */
    double             step_s;     /* device_s + host_s + idle_s */
    double             by_bound[TIM_BOUND_COUNT];
    double             flops, mxu_flops;
    int64_t            hbm_bytes, ici_bytes;
    double             peak_flops; /* per device */
    double             mxu_util;   /* mxu_flops / (step_s * peak) */
    double             flops_per_s;
    tim_bound          bound;      /* the dominant one */
    int                unknown_trips;  /* while loops whose trip count had to be assumed (1) */
    int64_t            batch;
    double             input_s;    /* host pipeline time per step */
} tim_result;

tpu_status tim_model(tpu_ctx *ctx, const cmp_program *p, const chp_slice *slice, const tim_opts *opts, tim_result **out);
void       tim_result_free(tim_result *r);

/* ---- inside the model ---- */
int  tim_is_collective(hlo_op op);
/* An op's time from its unit times: the largest plus pipeline fill and launch; its bound and MXU utilization. */
void tim_op_finish(const chp_chip *chip, tim_op *t);
/* Combines the collectives of each walk (walk[i]: which walk of a plan op i came from, 0..nwalks-1) as XLA's
 * combiners do, then schedules each walk's dataflow on the core and the ICI (a loop body's, trips[w] >= 2, in
 * its steady state): *hidden gets the collective time per step that ran beside compute (overlap.c,
 * docs/timing.md "Overlap"). */
tpu_status tim_overlap(tpu_ctx *ctx, const cmp_program *p, const chp_chip *chip, tim_op *ops, const int *walk,
                       const double *trips, int n, int nwalks, double *hidden);

/* ---- collectives on the topology (coll.c) ---- */

/* Where a collective's group lies: chips spanned per torus dimension, whether each closes into a ring, the
 * devices of one chip it takes, the slices of a multislice. */
typedef struct tim_coll_geom {
    int  n;              /* devices */
    int  size[3];        /* distinct chip positions along x, y, z */
    bool ring[3];        /* that dimension wraps around over the group's whole span */
    int  cores;          /* devices per chip in the group */
    int  slices;         /* slices spanned (the data-center network between them) */
} tim_coll_geom;

typedef struct tim_coll_cost {
    double  time_s, ici_s, dcn_s;    /* total, and its ICI (on-chip included) and data-center network parts */
    double  bw_s;                    /* the total without per-hop latency (bandwidth only) */
    int64_t ici_bytes, dcn_bytes;    /* bytes one device sends */
    int     hops;                    /* ICI hops of the longest path (latency) */
} tim_coll_cost;

/* The geometry of the group `members` (device ids of the slice; NULL: devices 0..n-1). */
void   tim_coll_geometry(const chp_slice *sl, const int *members, int n, tim_coll_geom *g);
/* The time of collective op moving `bytes` (padded: operands, or the all-gather's result) in that group. */
void   tim_coll_cost_of(const chp_slice *sl, hlo_op op, const tim_coll_geom *g, double bytes, tim_coll_cost *c);
/* The first group of instruction `in` as device ids (members has room for `devices`): its replica_groups'
 * (explicit or iota; ids taken as device ids), every device when empty; with widen > 1 a group of all of
 * 0..widen-1 becomes every device. Returns the count. */
int    tim_coll_group(const hlo_instr *in, int devices, int widen, int *members);
/* Modelled time of one collective among `members` (NULL: the first n devices); *moved gets the bytes one
 * device sends (ICI and DCN). The timing model uses it per op; the replicated runtime (src/runtime/) per
 * collective it executes. */
double tim_collective_group_s(const chp_slice *sl, hlo_op op, const int *members, int n, double bytes, int64_t *moved);
/* Same, with the full cost. */
void   tim_collective_group_cost(const chp_slice *sl, hlo_op op, const int *members, int n, double bytes, tim_coll_cost *c);
double tim_collective_s(const chp_slice *sl, hlo_op op, int64_t n, double bytes, int64_t *moved);

/* ---- the same program on GPUs (gpu.c): a roofline per op from published peaks ---- */
typedef struct tim_gpu {
    const char *name;
    double      tensor_flops;   /* dense bf16/fp16 tensor-core FLOP/s */
    double      vector_flops;   /* fp32 FLOP/s outside the tensor cores */
    double      hbm_bw;         /* bytes/s */
    double      link_bw;        /* NVLink bytes/s per GPU, one way */
    double      hbm_bytes;
    const char *source;
} tim_gpu;
const tim_gpu *tim_gpu_find(const char *name);   /* "V100", "A100", "H100" (any case); NULL if unknown */
int            tim_gpu_count_known(void);
const tim_gpu *tim_gpu_at(int i);
/* One step of r's program on each of n GPUs of one NVLink server; *coll_s gets its collectives' share. */
double         tim_gpu_step_s(const tim_result *r, const tim_gpu *g, int n, double *coll_s);

/* The MXU model for one GEMM (batch x [M,K]·[K,N]) at `passes` bf16 passes on one device of `chip`:
 * seconds, and the fraction of MXU work lost to padding the shapes to the array (rows to 8, the held and
 * contracting dimensions to whole tiles). Shares tim_systolic_gemm with SCALE-Sim mode. */
double tim_mxu_gemm_s(const chp_chip *chip, int64_t batch, int64_t M, int64_t N, int64_t K, double passes, double *pad_waste);
/* The GEMM view (batch x [M,K]·[K,N]) of an op's largest dot or convolution: 1 and the dims, or 0 if none. */
int    tim_gemm_of(const tim_op *t, int64_t *B, int64_t *M, int64_t *N, int64_t *K);
/* 2 x rows x cols x MXUs x clock of one device: the peak MXU utilization is measured against. */
double tim_mxu_peak_flops(const chp_chip *chip);

#endif
