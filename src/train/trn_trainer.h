/* trn_trainer.h — the trainer handle, shared by trn_loop.c (the loop) and trn_report.c (the profile at the
 * end, the learning-rate finder). */
#ifndef TPU_TRN_TRAINER_H
#define TPU_TRN_TRAINER_H

#include "train/train.h"

struct tpu_trainer {
    tpu_train_opts o;            /* options (o.slice and o.model_dir are NULL: see slice, model_dir) */
    char          *slice;        /* the slice the replicas are on ("v3-8") */
    char          *model_dir;    /* NULL: nothing written */
    trn_sig       *sig;
    tpu_module    *prog[TRN_NPROG];
    tpu_module    *mean;         /* the generated all-reduce (mean) of gradients and statistics */
    tpu_system    *sys;          /* R devices; the threads stay between runs */
    int            R;            /* replicas */
    int            devices;      /* of the slice */
    tpu_dist      *dist;         /* several processes (NULL: one); each runs replicas [lo, hi) */
    int            lo, hi;
    uint64_t       seed;         /* data order */
    int            host_threads; /* OpenMP team for runs on the caller's thread (0: the default) */
    int64_t        step;         /* optimizer steps done */
    int64_t        saved_step;   /* the last checkpoint's */
    tpu_tensor   **state;        /* nstate tensors: one copy, every replica's (inputs are only read) */
    tpu_tensor   **hyp;          /* nhyper f32[] tensors, rewritten each step */
    tpu_tensor  ***in;           /* per device: input pointer lists (no tensors owned) */
    tpu_tensor  ***out;          /* per device: outputs of the last run */
    trn_dataset   *train, *eval;
    trn_pipe      *pipe;         /* while training */
    /* metrics */
    double        *msum;         /* this host call's sums */
    double        *mlast;        /* the last host call's means */
    double        *wsum;         /* the progress line's window */
    int64_t        wsteps, last_line;
    double        *evals;        /* the last evaluation's report values */
    int            has_eval_vals;
    FILE          *metrics;      /* model_dir/metrics.jsonl */
    char          *f_metrics;
    int            bar_open;     /* a progress bar line is on the terminal */
    double         last_draw;    /* when the bar was last drawn */
    /* time */
    double         t0;           /* wall clock at the start of this train call */
    int64_t        step0;
    double         wall_s;       /* seconds in steps (all train calls) */
    int64_t        steps_run;
    double         pipe_samples, pipe_busy_s, pipe_wait_s;   /* the input pipeline, all train calls */
    double         sim_prog_s;   /* predicted step.hlo time per step (launch share included) */
    double         ici_s;        /* the runtime's modelled all-reduce time of the last step */
    int64_t        ici_bytes;
    /* the learning-rate finder */
    int            lr_find;
    double         lr_find_value;
    /* the final report */
    tpu_profile   *prof;
    tpu_memory    *mem;
    char          *advice, *f_profile, *f_trace, *f_memory;
};

/* One training step on batch b (hypers of step b->step), state updated in place; the step's metrics
 * (combined over the replicas) go to metrics[nmetric]. */
tpu_status trn_run_step(tpu_ctx *ctx, tpu_trainer *tr, const trn_batch *b, double *metrics);
/* The predicted step time on the slice: step.hlo's with its launch share, plus the all-reduce's. */
double     trn_sim_step_s(const tpu_trainer *tr);

#endif
