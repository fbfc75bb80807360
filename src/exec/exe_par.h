/* exe_par.h — the executor's thread pool: a parallel for over chunks that does not wait for threads that have
 * not started.
 *
 * Why not OpenMP: at the end of an OpenMP parallel region every thread of the team must arrive, so when another
 * process holds a core (a shared machine, a laptop doing other work) each region waits for a descheduled
 * thread — milliseconds per op, 60x slower on small ops. Here the caller takes chunks itself; workers join
 * when they wake and take what is left; the caller only waits for chunks that were actually started.
 *
 * Chunks are fixed by (n, grain), never by the thread count, so results do not depend on it. Workers run with
 * the caller's MXCSR (FTZ/DAZ). A call from inside a chunk, or from a second thread while the pool is busy,
 * runs serially in the calling thread (tid 0). */
#ifndef TPU_EXE_PAR_H
#define TPU_EXE_PAR_H

#include <stdint.h>

/* fn(ctx, i0, i1, tid): one chunk [i0, i1); tid in [0, threads) identifies the thread (per-thread scratch). */
typedef void (*exe_par_fn)(void *ctx, int64_t i0, int64_t i1, int tid);

/* Runs fn over [0, n) in chunks of `grain` (>= 1; the last one shorter) on at most `threads` threads (<= 0: all
 * of exe_par_max_threads()); returns when every chunk has run. */
void exe_par_for(int threads, int64_t n, int64_t grain, exe_par_fn fn, void *ctx);

/* Threads the pool can use: the machine's cores (OMP_NUM_THREADS, when set, caps it). */
int exe_par_max_threads(void);

/* The thread count a kernel should split for: `threads` if > 0, else exe_par_max_threads(). */
int exe_par_threads(int threads);

#endif
