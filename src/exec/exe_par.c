/* exe_par.c — the executor's thread pool (exe_par.h).
 *
 * One job at a time. The job's chunk counter `next` packs (generation << 32 | next chunk); a thread claims a
 * chunk with a compare-and-swap that fails once the job has moved on, so a worker that wakes late can never
 * claim a chunk of a finished job, and the caller never waits for it. Before it rewrites the job fields the
 * caller closes the counter (chunk index CLOSED), so fields read together with an open counter are that
 * job's: a claim succeeds only while they are still in place. */
#include "exe_par.h"
#include "util/util.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PAR_PAUSE() _mm_pause()
#else
#define PAR_PAUSE() ((void)0)
#endif

#define PAR_MAXT   256
#define PAR_CLOSED 0xFFFFFFFFu
#define PAR_SPIN   1000    /* pause loops a worker spins for the next job before it sleeps (~40 us) */

typedef struct par_pool {
    pthread_mutex_t    busy;   /* held by the caller running a job */
    pthread_mutex_t    mu;     /* sleeping workers */
    pthread_cond_t     cv;
    int                nthreads;   /* including the caller */
    int                started;
    _Atomic uint64_t   next;       /* gen << 32 | next chunk (PAR_CLOSED: no job) */
    _Atomic int64_t    done;       /* chunks finished */
    _Atomic int        sleepers;
    /* the job (valid while `next` is open with its generation) */
    exe_par_fn         fn;
    void              *ctx;
    int64_t            n, grain, nchunks;
    int                maxt;
    unsigned           mxcsr;
} par_pool;

static par_pool par_P = {.busy = PTHREAD_MUTEX_INITIALIZER, .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER,
                         .next = PAR_CLOSED};
static pthread_once_t par_once = PTHREAD_ONCE_INIT;
static _Thread_local int par_in_chunk;   /* nested calls run serially */

static int par_count_cpus(void)
{
    int n = 0;
#ifdef CPU_COUNT
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
#endif
    if (n <= 0) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    const char *e = getenv("OMP_NUM_THREADS");
    if (e && atoi(e) > 0 && atoi(e) < n) n = atoi(e);
    if (n < 1) n = 1;
    return n > PAR_MAXT ? PAR_MAXT : n;
}

static void par_init(void) { par_P.nthreads = par_count_cpus(); }

int exe_par_max_threads(void)
{
    pthread_once(&par_once, par_init);
    return par_P.nthreads;
}

int exe_par_threads(int threads)
{
    int m = exe_par_max_threads();
    return threads > 0 ? (threads < m ? threads : m) : m;
}

static unsigned par_get_csr(void)
{
#if defined(__x86_64__) || defined(__i386__)
    return _mm_getcsr();
#else
    return 0;
#endif
}

static void par_set_csr(unsigned v)
{
#if defined(__x86_64__) || defined(__i386__)
    if (_mm_getcsr() != v) _mm_setcsr(v);
#else
    (void)v;
#endif
}

/* Claims and runs chunks of the job whose counter reads `v` as thread tid, until none are left or the job
 * changes. */
static void par_work(par_pool *P, uint64_t v, int tid)
{
    uint32_t gen = (uint32_t)(v >> 32);
    for (;;) {
        uint32_t idx = (uint32_t)v;
        if ((uint32_t)(v >> 32) != gen || idx == PAR_CLOSED) return;
        /* the fields: this job's while the counter still reads (gen, idx) at the claim */
        exe_par_fn fn = P->fn;
        void *ctx = P->ctx;
        int64_t n = P->n, grain = P->grain, nchunks = P->nchunks;
        int maxt = P->maxt;
        unsigned csr = P->mxcsr;
        if (tid >= maxt || (int64_t)idx >= nchunks) return;
        if (!atomic_compare_exchange_weak(&P->next, &v, v + 1)) continue;   /* v reloaded */
        int64_t i0 = (int64_t)idx * grain, i1 = i0 + grain < n ? i0 + grain : n;
        par_set_csr(csr);
        par_in_chunk = 1;
        fn(ctx, i0, i1, tid);
        par_in_chunk = 0;
        atomic_fetch_add(&P->done, 1);
        v = atomic_load(&P->next);
    }
}

static void *par_worker(void *arg)
{
    par_pool *P = &par_P;
    int tid = (int)(intptr_t)arg;
    uint32_t seen = 0;
    for (;;) {
        uint64_t v = atomic_load(&P->next);
        int spins = 0;
        while ((uint32_t)(v >> 32) == seen || (uint32_t)v == PAR_CLOSED) {
            if (++spins < PAR_SPIN) {
                PAR_PAUSE();
            } else {
                pthread_mutex_lock(&P->mu);
                atomic_fetch_add(&P->sleepers, 1);
                v = atomic_load(&P->next);
                while ((uint32_t)(v >> 32) == seen || (uint32_t)v == PAR_CLOSED) {
                    pthread_cond_wait(&P->cv, &P->mu);
                    v = atomic_load(&P->next);
                }
                atomic_fetch_sub(&P->sleepers, 1);
                pthread_mutex_unlock(&P->mu);
                break;
            }
            v = atomic_load(&P->next);
        }
        seen = (uint32_t)(v >> 32);
        par_work(P, v, tid);
    }
    return NULL;
}

static void par_start(par_pool *P)
{
    if (P->started) return;
    P->started = 1;
    for (int t = 1; t < P->nthreads; t++) {
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&th, &at, par_worker, (void *)(intptr_t)t)) {
            P->nthreads = t;   /* run with what we have */
            pthread_attr_destroy(&at);
            break;
        }
        pthread_attr_destroy(&at);
    }
}

static void par_serial(int64_t n, int64_t grain, exe_par_fn fn, void *ctx)
{
    for (int64_t i0 = 0; i0 < n; i0 += grain) fn(ctx, i0, i0 + grain < n ? i0 + grain : n, 0);
}

void exe_par_for(int threads, int64_t n, int64_t grain, exe_par_fn fn, void *ctx)
{
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int nt = exe_par_threads(threads);
    int64_t nchunks = (n + grain - 1) / grain;
    par_pool *P = &par_P;
    if (nt <= 1 || nchunks <= 1 || nchunks >= (int64_t)PAR_CLOSED || par_in_chunk || pthread_mutex_trylock(&P->busy)) {
        int was = par_in_chunk;
        par_in_chunk = 1;
        par_serial(n, grain, fn, ctx);
        par_in_chunk = was;
        return;
    }
    par_start(P);
    uint64_t v = atomic_load(&P->next);
    uint32_t gen = (uint32_t)(v >> 32) + 1;
    P->fn = fn;
    P->ctx = ctx;
    P->n = n;
    P->grain = grain;
    P->nchunks = nchunks;
    P->maxt = nt < P->nthreads ? nt : P->nthreads;
    P->mxcsr = par_get_csr();
    atomic_store(&P->done, 0);
    atomic_store(&P->next, (uint64_t)gen << 32);
    if (atomic_load(&P->sleepers) > 0) {
        pthread_mutex_lock(&P->mu);
        pthread_cond_broadcast(&P->cv);
        pthread_mutex_unlock(&P->mu);
    }
    par_work(P, (uint64_t)gen << 32, 0);
    /* wait for the chunks others started */
    for (int spins = 0; atomic_load(&P->done) < nchunks; spins++) {
        if (spins < 2000) PAR_PAUSE();
        else sched_yield();
    }
    atomic_store(&P->next, (uint64_t)gen << 32 | PAR_CLOSED);
    pthread_mutex_unlock(&P->busy);
}
