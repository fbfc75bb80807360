/* dist.h — a simulated slice spread over several processes, one per simulated host, with MPI (docs/pods.md).
 * Names start with dst_.
 *
 *   dst_net.c    the transport: one thread owns MPI (init, every send and receive, finalize or abort); the
 *                others post keyed messages to it and wait for keyed messages from it, with a timeout and
 *                with the failure of any process ending every wait
 *   dst_coll.c   the runtime's rt_remote over it: a collective's local operands packed and sent to the
 *                processes of the other members, theirs received, checked and unpacked
 *   dst_api.c    the public tpu_dist_* calls and tpu_system_new_dist
 *
 * Nothing outside this directory includes mpi.h; nothing below src/dist knows that MPI exists. */
#ifndef TPU_DIST_H
#define TPU_DIST_H

#include "runtime/runtime.h"

enum { DST_COLL = 1, DST_HOST, DST_ABORT };   /* message kinds */

/* A message as the transport delivers it: its kind, key and sender, and the payload. */
typedef struct dst_msg {
    struct dst_msg *next;
    uint32_t        kind;
    uint64_t        key[4];
    int             from;
    uint64_t        fp;          /* DST_COLL: the sender's program fingerprint */
    char           *data;        /* total bytes (ut_malloc'ed, NULL when total is 0) */
    uint64_t        total, got;
} dst_msg;

typedef struct dst_net dst_net;

/* Starts the MPI thread and MPI; *rank and *size from MPI_COMM_WORLD. timeout_s bounds every wait. */
tpu_status dst_net_new(tpu_ctx *ctx, double timeout_s, dst_net **out, int *rank, int *size);
/* Sends `len` bytes (copied: the caller may reuse its buffer at once) to the processes dests, one copy of
 * the bytes. */
tpu_status dst_net_send_many(tpu_ctx *ctx, dst_net *n, const int *dests, int ndests, uint32_t kind, const uint64_t key[4],
                             uint64_t fp, const void *data, size_t len);
/* Waits for the message (kind, key) from process `from` and takes it (free with dst_msg_free). `what` names
 * the wait in the timeout's message. Fails at once when a process failed (the message names it). */
tpu_status dst_net_wait(tpu_ctx *ctx, dst_net *n, uint32_t kind, const uint64_t key[4], int from, const char *what,
                        dst_msg **out);
void       dst_msg_free(dst_msg *m);
/* Records a failure (the first one only) and tells every other process; every wait here ends with it. */
void       dst_net_fail(dst_net *n, const char *fmt, ...) UT_PRINTF(2, 3);
/* The failure, or NULL. */
const char *dst_net_failure(dst_net *n);
/* Ends the MPI thread: MPI_Finalize, or MPI_Abort (ending the job) after a failure; failed > 0 is the abort's
 * error code (mpirun's exit status). */
void       dst_net_free(dst_net *n, int failed);

/* ---- the public handle (dst_api.c) ---- */
struct tpu_dist {
    dst_net  *net;
    int       rank, size;
    uint64_t  host_seq;          /* host messages (allgather) so far: the key of the next */
    uint64_t  run_seq[64];       /* runs so far of each kind of system, by hash of its owner map */
    uint64_t  run_sys[64];
    int       nrun;
    pthread_mutex_t mu;          /* run_seq */
};

/* The runtime's transport for a system whose devices are spread by owner (N entries) over d's processes. */
typedef struct dst_sys {
    rt_remote  remote;
    tpu_dist  *d;
    int        N;
    int       *owner;
    uint64_t   sys_key;          /* hash of N and the owner map: the same on every process */
    uint64_t   fp;               /* the current run's program fingerprint */
} dst_sys;

tpu_status dst_sys_new(tpu_ctx *ctx, tpu_dist *d, int N, const int *owner, dst_sys **out);
void       dst_sys_free(dst_sys *s);

#endif
