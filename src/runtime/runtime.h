/* runtime.h — the replicated runtime: a system of N devices (replicas x partitions) that run one module,
 * each device a thread running the executor (exe_run) with its own replica and partition id, and the
 * collectives between them (docs/runtime.md). Names start with rt_.
 *
 *   rt_system.c   the system: device threads kept between runs, a run, errors, statistics, public API
 *   rt_groups.c   who takes part in a collective: replica_groups (explicit, empty, iota), channel_id and
 *                 use_global_device_ids as XLA defines them (CollectiveOpGroupMode)
 *   rt_coll.c     the rendezvous of one collective execution and the collectives themselves, in TPU numerics
 *
 * Threads: each device runs in its own thread; the collectives meet under one mutex per system. A device
 * that fails releases every other device with an error; devices that can never meet (one finished, or all
 * wait in different collectives) are detected and reported, so a run never hangs.
 *
 * Several processes. A system may be one process's part of a larger one (src/dist/, over MPI): it runs the
 * devices the owner map gives this process, and a collective whose group has members elsewhere meets its
 * local members here, then hands their operands to the transport (rt_remote), which returns the other
 * members' operands; each local member then computes its result from all of them exactly as in one process,
 * so the results are the same bit for bit. Nothing here knows how the bytes travel. */
#ifndef TPU_RUNTIME_H
#define TPU_RUNTIME_H

#include "chip/chip.h"
#include "exec/exec.h"

#include <pthread.h>

/* ---- groups (rt_groups.c) ---- */

/* XLA's CollectiveOpGroupMode: what the ids in replica_groups (or source_target_pairs) name. */
typedef enum rt_mode {
    RT_CROSS_REPLICA,                 /* no channel_id: replica ids; each partition on its own */
    RT_CROSS_PARTITION,               /* channel_id, no use_global_device_ids attribute: partition ids */
    RT_CROSS_REPLICA_AND_PARTITION,   /* channel_id, use_global_device_ids=false: replica ids, all partitions */
    RT_FLATTENED_ID                   /* channel_id, use_global_device_ids=true: replica * P + partition */
} rt_mode;

const char *rt_mode_name(rt_mode m);
/* The group mode of a collective instruction. */
rt_mode rt_group_mode(const hlo_instr *in);

/* The devices (global ids: replica * partitions + partition) that take part with device `dev` in the
 * collective `in` on a system of R replicas x P partitions, in group order (the order of all-gather's
 * pieces and of the ring). members has room for R*P entries; *rank gets dev's place. Errors (ids out of
 * range, a device in two groups or in none, malformed iota groups) name the instruction. For
 * collective-permute the group is every device the pairs may name (all replicas or all partitions). */
tpu_status rt_group_members(tpu_ctx *ctx, const hlo_module *m, const hlo_instr *in, int R, int P, int dev,
                            int *members, int *n, int *rank);

/* ---- devices in other processes (implemented by src/dist/) ---- */

/* One execution of a collective whose group spans processes, as the transport sees it. */
typedef struct rt_xfer {
    uint64_t               key[4];    /* the same on every process: run, instruction, execution, group leader */
    const hlo_instr       *in;
    int                    n;         /* members, group order */
    const int             *members;   /* global device ids */
    exe_value *const *const *ops;     /* per member: its in->nops operands, NULL for members elsewhere */
} rt_xfer;

typedef struct rt_remote {
    void      *user;
    /* Called at the start of every run with the module: returns the key every process's run shares (runs of
     * a system are numbered alike everywhere) and may check the program; an error stops the run. */
    tpu_status (*run_begin)(void *user, tpu_ctx *ctx, const hlo_module *m, uint64_t *run_key);
    /* Sends the local members' operands to the processes of the other members and fills remote[i] (members
     * that are not local) with in->nops values each (new references: the runtime drops them). Blocks until
     * everything is received and every send is done; errors name the process. */
    tpu_status (*exchange)(void *user, tpu_ctx *ctx, const rt_xfer *x, exe_value ***remote);
    /* This process's run failed (the first failure, message): the transport tells the others. */
    void       (*fail)(void *user, const char *msg);
    /* The system is freed: so is user. */
    void       (*free)(void *user);
} rt_remote;

/* ---- the system (rt_system.c) ---- */

enum { RT_K_ALL_REDUCE, RT_K_ALL_GATHER, RT_K_REDUCE_SCATTER, RT_K_ALL_TO_ALL, RT_K_PERMUTE, RT_K_BROADCAST,
       RT_K_COUNT };

typedef struct rt_slot rt_slot;
typedef struct rt_system rt_system;

/* One device: a thread and its state. Fields under "run" belong to the current run. */
typedef struct rt_dev {
    rt_system  *sys;
    int         id;             /* global device id */
    pthread_t   thread;
    int         started;        /* thread created */
    uint64_t    seen_job;       /* last job taken */
    tpu_ctx    *ctx;            /* this device's messages (a tpu_ctx is not shared between threads) */
    /* run */
    int64_t     replica, partition;
    tpu_tensor *const *inputs;
    int         ninputs;
    tpu_tensor **outputs;
    int         noutputs;
    tpu_status  st;
    int         finished;       /* its program returned */
    int         released;       /* an error returned because another device failed (not its own) */
    int64_t    *exec_count;     /* executions so far of each instruction (global index) */
    const hlo_instr *wait_in;   /* collective it waits in (for deadlock messages), or NULL */
    int64_t     wait_exec;
    /* statistics of the run */
    int64_t     ncoll, by_kind[RT_K_COUNT], ici_bytes;
    double      ici_s;
} rt_dev;

struct rt_system {
    int              n;            /* devices run by this process (threads) */
    int              N;            /* devices of the whole system: n unless it spans processes */
    int             *lid;          /* global device id -> index in devs, -1: another process's (NULL: n == N) */
    const rt_remote *remote;       /* the transport to the other processes' devices, or NULL */
    uint64_t         run_key;      /* this run's key (rt_remote.run_begin) */
    chp_slice        slice;        /* chip and links the collectives' time is modelled on */
    int              split_r, split_p;   /* tpu_system_set_split (0: automatic) */
    rt_dev          *devs;
    pthread_mutex_t  mu;           /* guards everything below and the slots */
    pthread_cond_t   cv;           /* collectives: arrivals, barriers, failures */
    pthread_cond_t   job_cv;       /* a new job (or quit) for the device threads */
    pthread_cond_t   done_cv;      /* a device finished its job */
    uint64_t         job;          /* job number */
    int              ndone;
    int              quit;
    /* the current run */
    const hlo_module *m;           /* the module the devices run (a view with replica_count/num_partitions) */
    tpu_run_opts     opts;
    int              R, P;
    int64_t         *comp_base;    /* global instruction index of each computation's first instruction */
    exe_collectives  coll;
    int              nlive;        /* devices still running their program */
    int              nblocked;     /* devices waiting for others to arrive at a collective */
    int              abort;        /* a device failed: everyone stops at its next collective */
    int              fail_dev;     /* the first device that failed, -1 if none */
    tpu_status       fail_st;
    char            *fail_msg;
    rt_slot         *slots;        /* collectives in progress */
};

/* A system of `devices` (tpu_system_new's spec) of which this process runs those with owner[d] == self;
 * owner == NULL: all of them (remote is then NULL). The system owns remote->user (remote->free), also when
 * it cannot be made. */
tpu_status rt_system_create(tpu_ctx *ctx, const char *devices, const int *owner, int self, const rt_remote *remote,
                            struct tpu_system **out);
/* The device of global id g run here, or NULL. */
static inline rt_dev *rt_local(rt_system *sys, int g)
{
    int i = sys->lid ? (g >= 0 && g < sys->N ? sys->lid[g] : -1) : (g >= 0 && g < sys->n ? g : -1);
    return i >= 0 ? &sys->devs[i] : NULL;
}

/* Records the first failure (device dev, status, message) and releases every waiting device. Mutex held. */
void rt_fail_locked(rt_system *sys, int dev, tpu_status st, const char *fmt, ...) UT_PRINTF(4, 5);

/* ---- collectives (rt_coll.c) ---- */

/* exe_collectives.run: user is the rt_system. */
tpu_status rt_collective(void *user, exe_state *S, const hlo_instr *in, exe_value *const *ops, exe_value **out);
/* Frees slots left by an aborted run. Mutex not needed (no device runs). */
void       rt_slots_free(rt_system *sys);
/* The kind (RT_K_*) of a collective opcode, or -1. */
int        rt_kind(hlo_op op);

#endif
