/* dst_net.c — the MPI transport: one thread owns MPI. It initializes MPI (MPI_THREAD_FUNNELED: every MPI
 * call is made by this thread), sends what the other threads post, receives whatever arrives into a table of
 * keyed messages that the other threads wait on, and at the end finalizes MPI, or aborts the job after a
 * failure.
 *
 * Wire format: a message is a header (dst_hdr, tag DST_TAG_HDR) followed by its payload in pieces of at most
 * DST_PIECE bytes (tag DST_TAG_DATA), all from the one MPI thread of the sender, so the pieces that follow a
 * header from one process are that header's (MPI keeps the order of messages between two processes on one
 * communicator). Messages are matched by (kind, key, sender), never by arrival order, so collectives of
 * different groups may be in flight at once in any order.
 *
 * Waiting: the thread polls (MPI_Iprobe, MPI_Testsome) and sleeps between polls when idle (20 us growing to
 * 1 ms), so a waiting process does not keep a core busy; a posted send wakes it at once.
 *
 * Failure: a process that fails sends DST_ABORT with its message to every other process; the first failure a
 * process learns of (its own, an abort received, a timeout) ends every wait with that message, and the
 * transport is unusable afterwards. A process that dies is noticed by mpirun, which ends the job. */
#include "dist/dist.h"

#include <errno.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DST_MAGIC 0x44555054u          /* "TPUD" */
#define DST_TAG_HDR 7101
#define DST_TAG_DATA 7102
#define DST_PIECE ((size_t)1 << 28)    /* 256 MiB: far below MPI's int count */

typedef struct dst_hdr {
    uint32_t magic, kind;
    uint64_t key[4];
    uint64_t fp, total;
    int32_t  from;
    uint32_t reserved;
} dst_hdr;

/* Bytes shared by the sends of one post (freed by the last). */
typedef struct dst_blob {
    int   refs;
    char *data;
} dst_blob;

typedef struct dst_send {
    struct dst_send *next;
    int              dest;
    dst_hdr          hdr;
    dst_blob        *blob;
    size_t           len;
    MPI_Request     *reqs;       /* the MPI thread's: the header's and the pieces' */
    int              nreq;
} dst_send;

struct dst_net {
    pthread_t       thread;
    int             started;
    pthread_mutex_t mu;
    pthread_cond_t  cv;          /* arrivals, failures, init: waiters sleep here */
    pthread_cond_t  wake;        /* the MPI thread's idle sleep */
    double          timeout_s;
    /* under mu */
    dst_send       *outq;        /* posted, not yet given to MPI */
    dst_msg        *inbox;       /* received (complete) */
    int             init_done;   /* 1 ok, -1 failed (init_msg) */
    char            init_msg[512];
    int             rank, size;
    int             quit;        /* 1: finalize, 2: abort */
    int             abort_code;  /* MPI_Abort's error code: the job's exit status */
    char           *failure;     /* the first failure, or NULL */
    /* the MPI thread's */
    MPI_Comm        comm;
    int             owns_mpi;    /* MPI_Init was ours: so is MPI_Finalize */
    dst_send       *active;      /* given to MPI, not complete */
};

void dst_msg_free(dst_msg *m)
{
    if (!m) return;
    ut_free(m->data);
    ut_free(m);
}

static void dst_blob_unref(dst_blob *b)
{
    if (b && --b->refs == 0) {
        ut_free(b->data);
        ut_free(b);
    }
}

/* ---- failures ---- */

/* Records the failure if it is the first. Mutex held. Returns 1 if it was. */
static int dst_fail_locked(dst_net *n, const char *msg)
{
    if (n->failure) return 0;
    n->failure = ut_strdup(msg ? msg : "failed");
    if (!n->failure) n->failure = ut_strdup("failed (no memory for the message)");
    pthread_cond_broadcast(&n->cv);
    return 1;
}

static void dst_post_locked(dst_net *n, dst_send *s)
{
    dst_send **p = &n->outq;
    while (*p) p = &(*p)->next;
    *p = s;
    pthread_cond_signal(&n->wake);
}

void dst_net_fail(dst_net *n, const char *fmt, ...)
{
    if (!n) return;
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&n->mu);
    if (dst_fail_locked(n, msg)) {
        /* tell the others: a small message, sent eagerly (it does not wait for them to receive it) */
        size_t len = strlen(msg);
        dst_blob *b = ut_calloc(1, sizeof *b);
        if (b && (b->data = ut_malloc(len + 1))) {
            memcpy(b->data, msg, len + 1);
            for (int q = 0; q < n->size; q++) {
                if (q == n->rank) continue;
                dst_send *s = ut_calloc(1, sizeof *s);
                if (!s) break;
                s->dest = q;
                s->hdr = (dst_hdr){DST_MAGIC, DST_ABORT, {0, 0, 0, 0}, 0, len, n->rank, 0};
                s->blob = b;
                s->len = len;
                b->refs++;
                dst_post_locked(n, s);
            }
        }
        if (b && !b->refs) {
            ut_free(b->data);
            ut_free(b);
        }
    }
    pthread_mutex_unlock(&n->mu);
}

const char *dst_net_failure(dst_net *n)
{
    pthread_mutex_lock(&n->mu);
    const char *f = n->failure;
    pthread_mutex_unlock(&n->mu);
    return f;
}

/* ---- the MPI thread: sends ---- */

static void dst_start_send(dst_net *n, dst_send *s)
{
    int pieces = (int)((s->len + DST_PIECE - 1) / DST_PIECE);
    s->reqs = ut_calloc((size_t)pieces + 1, sizeof *s->reqs);
    if (!s->reqs) {
        pthread_mutex_lock(&n->mu);
        dst_fail_locked(n, "out of memory sending a message");
        pthread_mutex_unlock(&n->mu);
        return;
    }
    MPI_Isend(&s->hdr, (int)sizeof s->hdr, MPI_BYTE, s->dest, DST_TAG_HDR, n->comm, &s->reqs[s->nreq++]);
    for (size_t off = 0; off < s->len; off += DST_PIECE) {
        size_t k = s->len - off < DST_PIECE ? s->len - off : DST_PIECE;
        MPI_Isend(s->blob->data + off, (int)k, MPI_BYTE, s->dest, DST_TAG_DATA, n->comm, &s->reqs[s->nreq++]);
    }
}

static void dst_send_free(dst_send *s)
{
    ut_free(s->reqs);
    dst_blob_unref(s->blob);
    ut_free(s);
}

/* Gives new sends to MPI and retires the finished ones. Returns 1 if anything happened. */
static int dst_progress_sends(dst_net *n)
{
    pthread_mutex_lock(&n->mu);
    dst_send *fresh = n->outq;
    n->outq = NULL;
    pthread_mutex_unlock(&n->mu);
    int busy = fresh != NULL;
    while (fresh) {
        dst_send *s = fresh;
        fresh = s->next;
        s->next = n->active;
        n->active = s;
        dst_start_send(n, s);
    }
    for (dst_send **p = &n->active; *p;) {
        dst_send *s = *p;
        int done = 1;
        if (s->reqs) MPI_Testall(s->nreq, s->reqs, &done, MPI_STATUSES_IGNORE);
        if (done) {
            *p = s->next;
            dst_send_free(s);
            busy = 1;
        } else {
            p = &s->next;
        }
    }
    return busy;
}

/* ---- the MPI thread: receives ---- */

static tpu_status dst_recv_piece(dst_net *n, int src, char *dst, uint64_t room, uint64_t *got)
{
    MPI_Status stt;
    int count = 0;
    MPI_Probe(src, DST_TAG_DATA, n->comm, &stt);
    MPI_Get_count(&stt, MPI_BYTE, &count);
    if (count < 0 || (uint64_t)count > room) return TPU_ERR_INTERNAL;
    char *into = dst;
    if (!into && count && !(into = ut_malloc((size_t)count))) return TPU_ERR_NOMEM;
    MPI_Recv(into, count, MPI_BYTE, src, DST_TAG_DATA, n->comm, MPI_STATUS_IGNORE);
    if (!dst) ut_free(into);
    *got += (uint64_t)count;
    return TPU_OK;
}

/* Receives one message whose header is waiting, if any. Returns 1 if one arrived. */
static int dst_progress_recv(dst_net *n)
{
    int flag = 0;
    MPI_Status stt;
    MPI_Iprobe(MPI_ANY_SOURCE, DST_TAG_HDR, n->comm, &flag, &stt);
    if (!flag) return 0;
    dst_hdr h;
    int src = stt.MPI_SOURCE;
    MPI_Recv(&h, (int)sizeof h, MPI_BYTE, src, DST_TAG_HDR, n->comm, MPI_STATUS_IGNORE);
    char why[256] = "";
    dst_msg *m = ut_calloc(1, sizeof *m);
    if (h.magic != DST_MAGIC || h.from != src)
        snprintf(why, sizeof why, "a message from process %d is not tpusim's (magic %08x)", src, h.magic);
    else if (!m || (h.total && !(m->data = ut_malloc((size_t)h.total))))
        snprintf(why, sizeof why, "out of memory receiving %llu bytes from process %d", (unsigned long long)h.total, src);
    /* the pieces follow the header: take them even when they cannot be kept */
    uint64_t got = 0;
    while (!why[0] && got < h.total) {
        if (dst_recv_piece(n, src, m->data + got, h.total - got, &got))
            snprintf(why, sizeof why, "process %d sent more bytes than its header says", src);
    }
    if (why[0]) {
        dst_msg_free(m);
        pthread_mutex_lock(&n->mu);
        dst_fail_locked(n, why);
        pthread_mutex_unlock(&n->mu);
        return 1;
    }
    m->kind = h.kind;
    memcpy(m->key, h.key, sizeof m->key);
    m->from = src;
    m->fp = h.fp;
    m->total = m->got = h.total;
    pthread_mutex_lock(&n->mu);
    if (h.kind == DST_ABORT) {
        char msg[4200];
        snprintf(msg, sizeof msg, "process %d failed: %.*s", src, (int)h.total, m->data ? m->data : "");
        dst_fail_locked(n, msg);
        dst_msg_free(m);
    } else {
        m->next = n->inbox;
        n->inbox = m;
        pthread_cond_broadcast(&n->cv);
    }
    pthread_mutex_unlock(&n->mu);
    return 1;
}

/* ---- the MPI thread ---- */

static void dst_idle(dst_net *n, long us)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += us * 1000;
    while (ts.tv_nsec >= 1000000000L) {
        ts.tv_nsec -= 1000000000L;
        ts.tv_sec++;
    }
    pthread_mutex_lock(&n->mu);
    if (!n->outq && !n->quit) pthread_cond_timedwait(&n->wake, &n->mu, &ts);
    pthread_mutex_unlock(&n->mu);
}

static int dst_mpi_init(dst_net *n)
{
    int inited = 0, prov = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &prov) != MPI_SUCCESS) {
            snprintf(n->init_msg, sizeof n->init_msg, "MPI_Init_thread failed");
            return -1;
        }
        n->owns_mpi = 1;
    } else {
        MPI_Query_thread(&prov);
        if (prov != MPI_THREAD_MULTIPLE) {
            snprintf(n->init_msg, sizeof n->init_msg, "MPI is already initialized by this program with thread level %d; "
                     "tpusim's transport thread needs MPI_THREAD_MULTIPLE (%d)", prov, MPI_THREAD_MULTIPLE);
            return -1;
        }
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &n->comm);
    MPI_Comm_set_errhandler(n->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(n->comm, &n->rank);
    MPI_Comm_size(n->comm, &n->size);
    return 1;
}

/* After a failure: gives the abort messages two seconds to reach the others (so that they can say why they
 * stop), then ends the job. */
static void dst_abort_job(dst_net *n)
{
    double until = ut_now() + 2.0;
    while (ut_now() < until) {
        dst_progress_recv(n);
        dst_progress_sends(n);
        dst_idle(n, 1000);
    }
    MPI_Abort(MPI_COMM_WORLD, n->abort_code > 0 ? n->abort_code : 1);
}

static void *dst_thread(void *arg)
{
    dst_net *n = arg;
    int ok = dst_mpi_init(n);
    pthread_mutex_lock(&n->mu);
    n->init_done = ok;
    pthread_cond_broadcast(&n->cv);
    pthread_mutex_unlock(&n->mu);
    if (ok < 0) return NULL;
    long idle = 0;
    for (;;) {
        int busy = dst_progress_sends(n);
        busy |= dst_progress_recv(n);
        pthread_mutex_lock(&n->mu);
        int quit = n->quit, pending = n->outq != NULL;
        pthread_mutex_unlock(&n->mu);
        if (quit == 2) dst_abort_job(n);   /* does not return */
        if (quit == 1 && !pending && !n->active) break;
        if (busy) {
            idle = 0;
        } else {
            idle = idle ? (idle * 2 > 1000 ? 1000 : idle * 2) : 20;
            dst_idle(n, idle);
        }
    }
    MPI_Comm_free(&n->comm);
    if (n->owns_mpi) MPI_Finalize();
    return NULL;
}

/* ---- the other threads' side ---- */

tpu_status dst_net_new(tpu_ctx *ctx, double timeout_s, dst_net **out, int *rank, int *size)
{
    *out = NULL;
    dst_net *n = ut_calloc(1, sizeof *n);
    if (!n) return ut_nomem(ctx);
    n->timeout_s = timeout_s;
    pthread_mutex_init(&n->mu, NULL);
    pthread_cond_init(&n->cv, NULL);
    pthread_cond_init(&n->wake, NULL);
    if (pthread_create(&n->thread, NULL, dst_thread, n)) {
        dst_net_free(n, 0);
        return ut_err(ctx, TPU_ERR_NOMEM, "cannot start the MPI thread");
    }
    n->started = 1;
    pthread_mutex_lock(&n->mu);
    while (!n->init_done) pthread_cond_wait(&n->cv, &n->mu);
    pthread_mutex_unlock(&n->mu);
    if (n->init_done < 0) {
        tpu_status st = ut_err(ctx, TPU_ERR_INVALID, "MPI: %s", n->init_msg);
        dst_net_free(n, 0);
        return st;
    }
    *rank = n->rank;
    *size = n->size;
    *out = n;
    return TPU_OK;
}

tpu_status dst_net_send_many(tpu_ctx *ctx, dst_net *n, const int *dests, int ndests, uint32_t kind, const uint64_t key[4],
                             uint64_t fp, const void *data, size_t len)
{
    dst_blob *b = ut_calloc(1, sizeof *b);
    if (!b || (len && !(b->data = ut_malloc(len)))) {
        ut_free(b);
        return ut_nomem(ctx);
    }
    if (len) memcpy(b->data, data, len);
    dst_send **ss = ut_calloc((size_t)(ndests ? ndests : 1), sizeof *ss);
    tpu_status st = ss ? TPU_OK : ut_nomem(ctx);
    for (int i = 0; !st && i < ndests; i++) {
        if (!(ss[i] = ut_calloc(1, sizeof *ss[i]))) st = ut_nomem(ctx);
        else {
            ss[i]->dest = dests[i];
            ss[i]->hdr = (dst_hdr){DST_MAGIC, kind, {key[0], key[1], key[2], key[3]}, fp, len, n->rank, 0};
            ss[i]->blob = b;
            ss[i]->len = len;
        }
    }
    pthread_mutex_lock(&n->mu);
    if (!st && n->failure) st = ut_err(ctx, TPU_ERR_INVALID, "%s", n->failure);
    for (int i = 0; !st && i < ndests; i++) {
        b->refs++;
        dst_post_locked(n, ss[i]);
    }
    pthread_mutex_unlock(&n->mu);
    if (st) {
        for (int i = 0; ss && i < ndests; i++) ut_free(ss[i]);
        if (!b->refs) {
            ut_free(b->data);
            ut_free(b);
        }
    }
    ut_free(ss);
    return st;
}

tpu_status dst_net_wait(tpu_ctx *ctx, dst_net *n, uint32_t kind, const uint64_t key[4], int from, const char *what,
                        dst_msg **out)
{
    *out = NULL;
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += (time_t)n->timeout_s;
    dl.tv_nsec += (long)((n->timeout_s - (double)(time_t)n->timeout_s) * 1e9);
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_nsec -= 1000000000L;
        dl.tv_sec++;
    }
    tpu_status st = TPU_OK;
    pthread_mutex_lock(&n->mu);
    for (;;) {
        dst_msg **p = &n->inbox;
        while (*p && !((*p)->kind == kind && (*p)->from == from && !memcmp((*p)->key, key, sizeof (*p)->key))) p = &(*p)->next;
        if (*p) {
            *out = *p;
            *p = (*p)->next;
            break;
        }
        if (n->failure) {
            st = ut_err(ctx, TPU_ERR_INVALID, "%s", n->failure);
            break;
        }
        if (pthread_cond_timedwait(&n->cv, &n->mu, &dl) == ETIMEDOUT) {
            char msg[1024];
            snprintf(msg, sizeof msg, "process %d waited %g s for process %d (%s): it died, hangs or runs another program "
                     "(TPUSIM_DIST_TIMEOUT sets the wait)", n->rank, n->timeout_s, from, what);
            /* recorded (if first) and sent to the others; the loop then returns it */
            pthread_mutex_unlock(&n->mu);
            dst_net_fail(n, "%s", msg);
            pthread_mutex_lock(&n->mu);
        }
    }
    pthread_mutex_unlock(&n->mu);
    return st;
}

void dst_net_free(dst_net *n, int failed)
{
    if (!n) return;
    if (n->started) {
        pthread_mutex_lock(&n->mu);
        n->quit = failed || n->failure ? 2 : 1;
        n->abort_code = failed;
        pthread_cond_signal(&n->wake);
        pthread_mutex_unlock(&n->mu);
        pthread_join(n->thread, NULL);
    }
    while (n->inbox) {
        dst_msg *m = n->inbox;
        n->inbox = m->next;
        dst_msg_free(m);
    }
    while (n->outq) {
        dst_send *s = n->outq;
        n->outq = s->next;
        dst_send_free(s);
    }
    while (n->active) {
        dst_send *s = n->active;
        n->active = s->next;
        dst_send_free(s);
    }
    ut_free(n->failure);
    pthread_mutex_destroy(&n->mu);
    pthread_cond_destroy(&n->cv);
    pthread_cond_destroy(&n->wake);
    ut_free(n);
}
