/* train.h — `tpusim train`: a STEP_DIR (docs/step_dir.md) trained data-parallel on the replicated runtime
 * (docs/runtime.md), the way xm.optimizer_step does it: every replica runs grad.hlo on its shard of the
 * global batch, the gradients are averaged by an all-reduce that the runtime executes (so the ICI model
 * times it), and apply.hlo runs once on the averaged gradients. Names start with trn_.
 *
 *   trn_sig.c     signature.json (cJSON) and its checks against the programs and init_state.npz
 *   trn_data.c    datasets: .npz shards and the cached .tpuds format (memory-mapped), the epoch order
 *   trn_pipe.c    the host input pipeline: a prefetch thread with a bounded queue, its measured rate
 *   trn_sched.c   hyper schedules (constant, step, one_cycle) and the learning-rate scaling rule
 *   trn_loop.c    the trainer: steps, all-reduce, apply, eval, checkpoints, metrics.jsonl, progress
 *   trn_report.c  the profile, memory viewer and advice at the end; the learning-rate finder
 */
#ifndef TPU_TRAIN_H
#define TPU_TRAIN_H

#include "util/tensor.h"

/* ---- the signature (trn_sig.c) ---- */

enum { TRN_PARAM, TRN_STAT, TRN_OPT, TRN_COUNTER };                 /* state roles */
enum { TRN_STEP, TRN_GRAD, TRN_APPLY, TRN_EVAL, TRN_NPROG };        /* programs */
enum { TRN_SCHED_CONSTANT, TRN_SCHED_STEP, TRN_SCHED_ONE_CYCLE };   /* schedule kinds */

#define TRN_MAX_EX_RANK 6   /* dimensions of one example in a .tpuds file */

typedef struct trn_entry {
    char     *name;
    tpu_dtype dtype;
    int       rank;
    int64_t   dims[TPU_MAX_RANK];   /* full shape (batch inputs: dims[0] is the per-replica batch) */
    int       role;                 /* state: TRN_PARAM ... */
    char     *source;               /* batch inputs: the dataset array; NULL for the "@mask" input */
} trn_entry;

typedef struct trn_sched {
    int     kind;
    double  value;                            /* constant */
    double  initial, gamma;                   /* step */
    int64_t step_size;
    double  max_lr, pct_start, div_factor, final_div_factor;   /* one_cycle */
    int64_t total_steps;                      /* one_cycle: -1 = the trainer's --steps */
    int     cos;                              /* one_cycle anneal: 1 cos, 0 linear */
} trn_sched;

typedef struct trn_hyper {
    char     *name;
    double    dflt;      /* the nominal value */
    trn_sched sched;
    int       scaled;    /* named by lr_scaling.hypers */
} trn_hyper;

typedef struct trn_metric {
    char     *name;
    tpu_dtype dtype;
    int       sum;       /* combine: 1 sum, 0 mean */
} trn_metric;

typedef struct trn_ratio {
    char *name;
    int   num, den;      /* indices into the eval metrics */
} trn_ratio;

typedef struct trn_sig {
    char       *dir;            /* STEP_DIR as given */
    char       *path;           /* STEP_DIR/signature.json, for messages */
    char       *name;
    char       *prog[TRN_NPROG];   /* program paths (joined with dir), NULL when absent */
    char       *init_state;     /* path, NULL: shapes only */
    int64_t     B;              /* per_replica_batch */
    int         nstate, nparam, nstat;
    trn_entry  *state;
    int        *param_idx, *stat_idx;   /* state indices of the param / stat entries, in order */
    int         nbatch;
    trn_entry  *batch;
    int         nhyper;
    trn_hyper  *hyper;
    int         nmetric;
    trn_metric *metric;
    int         loss_idx;       /* the loss_metric among metrics */
    /* eval (has_eval: the signature has an eval section and an eval program) */
    int         has_eval;
    int64_t     E;
    int         nebatch, nemetric, nreport;
    trn_entry  *ebatch;
    trn_metric *emetric;
    trn_ratio  *report;
    /* lr_scaling */
    int         lr_linear;      /* rule "linear" */
    int         ref_replicas;
    int         lr_hyper;       /* the finder's hyper: lr_scaling.hypers[0], else "learning_rate"; -1 none */
    /* data hints, joined with dir; NULL when absent */
    char       *data_train, *data_eval, *cached_train, *cached_eval;
    int         shuffle;
    uint64_t    seed;
} trn_sig;

extern const char *const trn_prog_kind[TRN_NPROG];   /* "step", "grad", "apply", "eval" */

/* Reads and checks STEP_DIR/signature.json. Errors name the file and the key ("state[3].dtype"). */
tpu_status trn_sig_load(tpu_ctx *ctx, const char *dir, trn_sig **out);
void       trn_sig_free(trn_sig *s);
/* Checks a program's parameters and results against section 2 of docs/step_dir.md. */
tpu_status trn_sig_check_program(tpu_ctx *ctx, const trn_sig *s, int kind, const tpu_module *m);
/* Loads the state from an .npz (init_state or a checkpoint): one member per state entry, matched by name,
 * dtype and shape checked. *state gets nstate tensors in signature order. */
tpu_status trn_sig_load_state(tpu_ctx *ctx, const trn_sig *s, const char *npz, tpu_tensor ***state);
/* "f32[64,128]" of an entry's shape, or of its per-example shape when from = 1. */
void       trn_shape_str(tpu_dtype dt, int rank, const int64_t *dims, char *buf, size_t n);

/* ---- schedules (trn_sched.c) ---- */

/* The schedule's value at 0-based optimizer step t in double precision; `total` is --steps for a
 * one_cycle without total_steps. NAN when one_cycle has no total (or total < 2). */
double     trn_sched_value(const trn_sched *s, int64_t t, int64_t total);
/* The scale factor the linear scaling rule gives R replicas (1 with rule none). */
double     trn_lr_scale(const trn_sig *s, int R);
/* The value fed to hyper h at step t: schedule x scale (if scaled), rounded to f32 once. */
float      trn_hyper_value(const trn_sig *s, int h, int64_t t, int64_t total, int R);

/* ---- datasets (trn_data.c) ---- */

typedef struct trn_array {
    char     *name;
    tpu_dtype dtype;
    int       rank;                  /* of one example */
    int64_t   dims[TPU_MAX_RANK];
    size_t    ex_bytes;              /* bytes of one example */
} trn_array;

typedef struct trn_part trn_part;

typedef struct trn_dataset {
    char      *path;
    int        cached;    /* .tpuds files (else .npz shards) */
    int        narr;
    trn_array *arr;
    int64_t    n;         /* examples */
    int        nparts;
    trn_part  *parts;
} trn_dataset;

/* Opens a dataset: a directory of .npz shards, a .tpuds file, or a directory of .tpuds files. The .npz
 * shards are read into memory; .tpuds files are memory-mapped. Every problem names the file and the field. */
tpu_status trn_data_open(tpu_ctx *ctx, const char *path, trn_dataset **out);
void       trn_data_free(trn_dataset *d);
int        trn_data_find(const trn_dataset *d, const char *name);
/* Checks that every input's source exists with the input's dtype and per-example shape, and that the
 * dataset has at least min_n examples. `what`: "batch input" / "eval input". */
tpu_status trn_data_check(tpu_ctx *ctx, const trn_dataset *d, const trn_entry *in, int nin, int64_t min_n,
                          const char *what);
/* Copies example i of array a to dst (ex_bytes bytes). */
void       trn_data_copy(const trn_dataset *d, int a, int64_t i, void *dst);
/* The order of epoch e (docs/step_dir.md 6.3): identity without shuffle, else splitmix64 Fisher-Yates. */
void       trn_epoch_order(int64_t n, uint64_t seed, int64_t epoch, int shuffle, int64_t *order);

/* ---- the input pipeline (trn_pipe.c) ---- */

/* One step's input: every replica's batch tensors, replica-major (t[r * nbatch + j]). */
typedef struct trn_batch {
    int64_t      step, epoch;
    int          ntensors;
    tpu_tensor **t;
} trn_batch;

void trn_batch_free(trn_batch *b);

typedef struct trn_pipe trn_pipe;

typedef struct trn_pipe_cfg {
    const trn_dataset *data;
    const trn_sig     *sig;
    int                R;
    uint64_t           seed;
    int                shuffle;
    int64_t            start, end;     /* steps [start, end) */
    int                depth;          /* queue capacity in steps */
    double             delay_s;        /* extra host work per batch (a slow input pipeline, for what-ifs) */
    int                lo, hi;         /* the replicas this process feeds (0, 0: all); others' shards stay NULL */
} trn_pipe_cfg;

/* Starts the prefetch thread. The dataset and signature must outlive the pipe. */
tpu_status trn_pipe_start(tpu_ctx *ctx, const trn_pipe_cfg *cfg, trn_pipe **out);
/* The next step's batch, in step order (waits for the producer). */
tpu_status trn_pipe_next(tpu_ctx *ctx, trn_pipe *p, trn_batch **out);
/* Samples per second the producer delivers while busy (its real throughput), the seconds the consumer
 * waited for it, and the batches made so far. */
void       trn_pipe_stats(trn_pipe *p, double *samples_per_s, double *wait_s, int64_t *made);
void       trn_pipe_free(trn_pipe *p);
/* Builds step t's batch synchronously (the producer's work; the finder and tests use it directly). */
tpu_status trn_make_batch(tpu_ctx *ctx, const trn_pipe_cfg *cfg, int64_t t, const int64_t *order, trn_batch **out);

/* ---- checkpoints (trn_loop.c) ---- */

/* Writes path atomically: data to path.tmp, fsync, rename, fsync the directory. */
tpu_status trn_write_atomic(tpu_ctx *ctx, const char *path, const void *data, size_t len);

#endif
