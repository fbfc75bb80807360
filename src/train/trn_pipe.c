/* trn_pipe.c — the host input pipeline: a prefetch thread builds each step's batches (every replica's shard
 * of the global batch, docs/step_dir.md section 3) into a bounded queue while the devices run the previous
 * steps, as tf.data's prefetch or a PyTorch DataLoader does. Its real throughput (samples per second of
 * producer CPU time, waits on a full queue excluded) is what the timing model gets as the input rate. */
#include "train/train.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void trn_batch_free(trn_batch *b)
{
    if (!b) return;
    if (b->t) tpu_tensors_free(b->t, b->ntensors);
    ut_free(b);
}

tpu_status trn_make_batch(tpu_ctx *ctx, const trn_pipe_cfg *c, int64_t t, const int64_t *order, trn_batch **out)
{
    *out = NULL;
    const trn_sig *s = c->sig;
    const trn_dataset *d = c->data;
    int64_t B = s->B, G = B * c->R, per_epoch = d->n / G;
    trn_batch *b = ut_calloc(1, sizeof *b);
    if (!b) return ut_nomem(ctx);
    b->step = t;
    b->epoch = t / per_epoch;
    b->ntensors = c->R * s->nbatch;
    b->t = ut_calloc((size_t)b->ntensors, sizeof *b->t);
    if (!b->t) {
        ut_free(b);
        return ut_nomem(ctx);
    }
    int64_t base = (t % per_epoch) * G;
    int lo = c->hi > c->lo ? c->lo : 0, hi = c->hi > c->lo ? c->hi : c->R;
    for (int r = lo; r < hi; r++)
        for (int j = 0; j < s->nbatch; j++) {
            const trn_entry *e = &s->batch[j];
            tpu_tensor *x = ten_alloc_uninit(e->dtype, e->rank, e->dims);
            if (!x) {
                trn_batch_free(b);
                return ut_nomem(ctx);
            }
            b->t[r * s->nbatch + j] = x;
            int a = trn_data_find(d, e->source);
            size_t eb = d->arr[a].ex_bytes;
            uint8_t *dst = x->data;
            for (int64_t i = 0; i < B; i++) trn_data_copy(d, a, order[base + r * B + i], dst + (size_t)i * eb);
        }
    *out = b;
    return TPU_OK;
}

struct trn_pipe {
    trn_pipe_cfg    cfg;
    pthread_t       thread;
    int             started;
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    trn_batch     **q;          /* ring of depth entries */
    int             head, count;
    int             quit;
    int64_t         next_step;  /* the consumer's next step */
    tpu_status      st;         /* the producer's failure */
    char           *msg;
    /* statistics */
    double          busy_s, wait_s;
    int64_t         made;
};

static void trn_sleep(double s)
{
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts)) {}
}

/* CPU seconds of the calling thread: the pipeline's own work, not the time the simulated devices (which
 * share this host's cores) keep it waiting for a core. */
static double trn_thread_cpu(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)) return ut_now();
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *trn_producer(void *arg)
{
    trn_pipe *p = arg;
    tpu_ctx *ctx = tpu_ctx_new();
    const trn_pipe_cfg *c = &p->cfg;
    int64_t n = c->data->n, per_epoch = n / (c->sig->B * c->R), epoch = -1;
    int64_t *order = ut_malloc((size_t)(n ? n : 1) * sizeof *order);
    tpu_status st = ctx && order ? TPU_OK : TPU_ERR_NOMEM;
    for (int64_t t = c->start; !st && t < c->end; t++) {
        pthread_mutex_lock(&p->mu);
        while (!p->quit && p->count == c->depth) pthread_cond_wait(&p->cv, &p->mu);
        int quit = p->quit;
        pthread_mutex_unlock(&p->mu);
        if (quit) break;
        double t0 = trn_thread_cpu();
        if (t / per_epoch != epoch) {
            epoch = t / per_epoch;
            trn_epoch_order(n, c->seed, epoch, c->shuffle, order);
        }
        trn_batch *b = NULL;
        st = trn_make_batch(ctx, c, t, order, &b);
        double dt = trn_thread_cpu() - t0 + c->delay_s;   /* the emulated delay counts as work */
        trn_sleep(c->delay_s);
        pthread_mutex_lock(&p->mu);
        p->busy_s += dt;
        if (!st) {
            p->q[(p->head + p->count) % c->depth] = b;
            p->count++;
            p->made++;
        }
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    pthread_mutex_lock(&p->mu);
    if (st) {
        p->st = st;
        p->msg = ut_strdup(ctx ? tpu_errmsg(ctx) : "out of memory");
    }
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    ut_free(order);
    tpu_ctx_free(ctx);
    return NULL;
}

tpu_status trn_pipe_start(tpu_ctx *ctx, const trn_pipe_cfg *cfg, trn_pipe **out)
{
    *out = NULL;
    trn_pipe *p = ut_calloc(1, sizeof *p);
    if (!p) return ut_nomem(ctx);
    p->cfg = *cfg;
    if (p->cfg.depth < 1) p->cfg.depth = 1;
    p->next_step = cfg->start;
    p->q = ut_calloc((size_t)p->cfg.depth, sizeof *p->q);
    if (!p->q) {
        ut_free(p);
        return ut_nomem(ctx);
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (cfg->end > cfg->start) {
        if (pthread_create(&p->thread, NULL, trn_producer, p)) {
            trn_pipe_free(p);
            return ut_err(ctx, TPU_ERR_NOMEM, "cannot start the input pipeline's thread");
        }
        p->started = 1;
    }
    *out = p;
    return TPU_OK;
}

tpu_status trn_pipe_next(tpu_ctx *ctx, trn_pipe *p, trn_batch **out)
{
    *out = NULL;
    if (p->next_step >= p->cfg.end)
        return ut_err(ctx, TPU_ERR_INTERNAL, "input pipeline: step %lld is past its end %lld", (long long)p->next_step,
                      (long long)p->cfg.end);
    double t0 = ut_now();
    pthread_mutex_lock(&p->mu);
    while (!p->count && !p->st) pthread_cond_wait(&p->cv, &p->mu);
    tpu_status st = TPU_OK;
    if (p->count) {
        *out = p->q[p->head];
        p->q[p->head] = NULL;
        p->head = (p->head + 1) % p->cfg.depth;
        p->count--;
        p->next_step++;
        pthread_cond_broadcast(&p->cv);
    } else {
        st = ut_err(ctx, p->st, "input pipeline: %s", p->msg ? p->msg : "failed");
    }
    p->wait_s += ut_now() - t0;
    pthread_mutex_unlock(&p->mu);
    return st;
}

void trn_pipe_stats(trn_pipe *p, double *samples_per_s, double *wait_s, int64_t *made)
{
    pthread_mutex_lock(&p->mu);
    double samples = (double)p->made * (double)(p->cfg.sig->B * p->cfg.R);
    if (samples_per_s) *samples_per_s = p->busy_s > 0 ? samples / p->busy_s : 0;
    if (wait_s) *wait_s = p->wait_s;
    if (made) *made = p->made;
    pthread_mutex_unlock(&p->mu);
}

void trn_pipe_free(trn_pipe *p)
{
    if (!p) return;
    if (p->started) {
        pthread_mutex_lock(&p->mu);
        p->quit = 1;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->thread, NULL);
    }
    for (int i = 0; i < p->count; i++) trn_batch_free(p->q[(p->head + i) % p->cfg.depth]);
    ut_free(p->q);
    ut_free(p->msg);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    ut_free(p);
}
