/* host.c — the device host behind `tpusim serve`: one simulated slice whose devices and HBM are shared by the
 * sessions of several clients. Each session holds buffers (a tensor on a device, charged to that device's HBM
 * with the TPU's tiled size) and executables (a checked, planned module); handles are unique on the host and
 * only the session that made an object can name it. HBM is enforced across sessions: an allocation beyond a
 * device's capacity fails with RESOURCE_EXHAUSTED naming the sessions that hold it. Closing a session (the
 * client said so, went away, or idled out) frees all it holds.
 *
 * Objects are reference-counted under the host's mutex: a table entry is one reference, a call using the
 * object another, so a buffer deleted (or a session closed) during a run is freed when the run lets go of it.
 * Runs themselves happen outside the mutex; replicated runs share a tpu_system per device count, one at a
 * time. Uses the public API only. */
#include "net/net.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

typedef struct tn_sess tn_sess;

typedef struct tn_buf {
    uint64_t    id;
    int         refs;
    tn_sess    *owner;       /* holds a reference on the session */
    int         device;
    tpu_dtype   dtype;
    int         rank;
    int64_t     dims[TPU_MAX_RANK];
    int64_t     hbm, host_bytes;
    tpu_tensor *t;
} tn_buf;

typedef struct tn_exe {
    uint64_t         id;
    int              refs;
    tn_sess         *owner;
    tpu_module      *m;
    char             name[128];
    int              R, P, *assign;
    tpu_numerics     num;
    int              nin, nout, *alias_of;
    int              ntok;          /* token outputs: the executor returns no tensor for them */
    tpu_memory_stats mem;
} tn_exe;

static int tn_output_is_token(const tpu_module *m, int i);

/* Handles in increasing order (ids come from one counter), found by binary search; deleted slots are NULL
 * until the table is compacted. */
typedef struct tn_slot {
    uint64_t id;
    void    *obj;
} tn_slot;
typedef struct tn_table {
    tn_slot *v;
    int64_t  n, cap, live;
} tn_table;

struct tn_sess {
    char      id[TN_SESSION_ID_LEN + 1];
    char      client[160];
    int       refs;          /* the host's list, each object, each call in progress */
    int       open;
    tn_table  bufs, exes;
    int64_t  *hbm;           /* per device */
    int       inflight;
    double    last_used;
};

/* Sessions that ended lately and why, for the error a late request gets. */
typedef struct tn_ended {
    char id[TN_SESSION_ID_LEN + 1];
    char why[160];
} tn_ended;

typedef struct tn_sys_slot {
    int         n;
    tpu_system *sys;
} tn_sys_slot;

struct tn_host {
    pthread_mutex_t  mu;
    tn_host_opts     o;
    tpu_ctx         *ctx;
    tpu_chip        *chip;
    char             slice[64];
    int              ndev;
    tpu_device_info *devs;
    int64_t         *in_use;
    int64_t          host_bytes, max_host_bytes;
    tn_sess        **sess;
    int              nsess;
    uint64_t         next_id;
    int              running;
    int64_t          executions, compiles, nbufs, nexes;
    pthread_mutex_t  run_mu;          /* one replicated run at a time (the systems are shared) */
    tn_sys_slot      systems[8];
    int              nsystems;
    tn_ended         ended[32];       /* a ring */
    int              nended;
};

/* ---- tables ---- */

static int tn_table_add(tn_table *t, uint64_t id, void *obj)
{
    if (t->n == t->cap) {
        int64_t cap = t->cap ? t->cap * 2 : 16;
        tn_slot *v = realloc(t->v, (size_t)cap * sizeof *v);
        if (!v) return -1;
        t->v = v, t->cap = cap;
    }
    t->v[t->n++] = (tn_slot){id, obj};
    t->live++;
    return 0;
}

static int64_t tn_table_find(const tn_table *t, uint64_t id)
{
    int64_t lo = 0, hi = t->n - 1;
    while (lo <= hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (t->v[mid].id == id) return t->v[mid].obj ? mid : -1;
        if (t->v[mid].id < id) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

static void *tn_table_take(tn_table *t, uint64_t id)
{
    int64_t i = tn_table_find(t, id);
    if (i < 0) return NULL;
    void *obj = t->v[i].obj;
    t->v[i].obj = NULL;
    t->live--;
    if (t->n > 2 * t->live + 64) {   /* compact */
        int64_t k = 0;
        for (int64_t j = 0; j < t->n; j++)
            if (t->v[j].obj) t->v[k++] = t->v[j];
        t->n = k;
    }
    return obj;
}

/* ---- reference counts (under h->mu) ---- */

static void tn_sess_unref(tn_sess *s)
{
    if (--s->refs > 0) return;
    free(s->bufs.v);
    free(s->exes.v);
    free(s->hbm);
    free(s);
}

static void tn_buf_unref(tn_host *h, tn_buf *b)
{
    if (--b->refs > 0) return;
    h->in_use[b->device] -= b->hbm;
    b->owner->hbm[b->device] -= b->hbm;
    h->host_bytes -= b->host_bytes;
    h->nbufs--;
    tpu_tensor_free(b->t);
    tn_sess_unref(b->owner);
    free(b);
}

static void tn_exe_unref(tn_host *h, tn_exe *x)
{
    if (--x->refs > 0) return;
    h->nexes--;
    tpu_module_free(x->m);
    free(x->assign);
    free(x->alias_of);
    tn_sess_unref(x->owner);
    free(x);
}

/* ---- the host ---- */

static int64_t tn_physical_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (int64_t)pages * size : (int64_t)8 << 30;
}

int tn_host_new(const tn_host_opts *o, tn_host **out, tn_err *e)
{
    *out = NULL;
    tn_host *h = calloc(1, sizeof *h);
    if (!h) return tn_fail(e, TN_RESOURCE_EXHAUSTED, "out of host memory");
    h->o = *o;
    if (h->o.max_sessions <= 0) h->o.max_sessions = 64;
    if (h->o.max_buffers <= 0) h->o.max_buffers = 1000000;
    if (h->o.max_executables <= 0) h->o.max_executables = 10000;
    h->max_host_bytes = tn_physical_memory() / 2;
    pthread_mutex_init(&h->mu, NULL);
    pthread_mutex_init(&h->run_mu, NULL);
    h->next_id = 1;
    h->ctx = tpu_ctx_new();
    int rc = TN_OK;
    if (!h->ctx) rc = tn_fail(e, TN_RESOURCE_EXHAUSTED, "out of host memory");
    tpu_status st = rc ? TPU_OK : tpu_chip_get(h->ctx, o->slice ? o->slice : "v3-8", &h->chip);
    if (st) rc = tn_fail_tpu(e, h->ctx, st, "--slice");
    if (!rc) {
        snprintf(h->slice, sizeof h->slice, "%s", tpu_chip_name(h->chip));
        h->ndev = tpu_chip_num_devices(h->chip);
        h->devs = calloc((size_t)h->ndev, sizeof *h->devs);
        h->in_use = calloc((size_t)h->ndev, sizeof *h->in_use);
        h->sess = calloc((size_t)h->o.max_sessions, sizeof *h->sess);
        if (!h->devs || !h->in_use || !h->sess) rc = tn_fail(e, TN_RESOURCE_EXHAUSTED, "out of host memory");
    }
    for (int d = 0; !rc && d < h->ndev; d++) {
        st = tpu_chip_device(h->ctx, h->chip, d, &h->devs[d]);
        if (st) rc = tn_fail_tpu(e, h->ctx, st, "--slice");
    }
    if (rc) {
        tn_host_free(h);
        return rc;
    }
    *out = h;
    return TN_OK;
}

static void tn_sess_drop(tn_host *h, tn_sess *s);

void tn_host_free(tn_host *h)
{
    if (!h) return;
    pthread_mutex_lock(&h->mu);
    while (h->nsess > 0) tn_sess_drop(h, h->sess[0]);
    pthread_mutex_unlock(&h->mu);
    for (int i = 0; i < h->nsystems; i++) tpu_system_free(h->systems[i].sys);
    free(h->sess);
    free(h->devs);
    free(h->in_use);
    tpu_chip_free(h->chip);
    tpu_ctx_free(h->ctx);
    pthread_mutex_destroy(&h->mu);
    pthread_mutex_destroy(&h->run_mu);
    free(h);
}

const char *tn_host_slice(const tn_host *h) { return h->slice; }
const char *tn_host_spec(const tn_host *h) { return h->o.slice ? h->o.slice : "v3-8"; }
int tn_host_num_devices(const tn_host *h) { return h->ndev; }
const tpu_chip *tn_host_chip(const tn_host *h) { return h->chip; }
const tpu_device_info *tn_host_device(const tn_host *h, int d) { return d >= 0 && d < h->ndev ? &h->devs[d] : NULL; }
tpu_numerics tn_host_numerics(const tn_host *h) { return h->o.numerics; }

void tn_host_get_status(tn_host *h, tn_host_status *st)
{
    memset(st, 0, sizeof *st);
    pthread_mutex_lock(&h->mu);
    st->sessions = h->nsess;
    st->running = h->running;
    for (int d = 0; d < h->ndev; d++) st->hbm_in_use += h->in_use[d], st->hbm_total += h->devs[d].hbm_bytes;
    st->buffers = h->nbufs;
    st->executables = h->nexes;
    st->executions = h->executions;
    st->compiles = h->compiles;
    pthread_mutex_unlock(&h->mu);
}

int64_t tn_host_device_in_use(tn_host *h, int d)
{
    pthread_mutex_lock(&h->mu);
    int64_t v = d >= 0 && d < h->ndev ? h->in_use[d] : 0;
    pthread_mutex_unlock(&h->mu);
    return v;
}

/* ---- sessions ---- */

int tn_host_session_open(tn_host *h, const char *client, char id[TN_SESSION_ID_LEN + 1], tn_err *e)
{
    unsigned char rnd[TN_SESSION_ID_LEN / 2];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) return tn_fail(e, TN_INTERNAL, "no random bytes for a session id");
    tn_sess *s = calloc(1, sizeof *s);
    int64_t *hbm = calloc((size_t)h->ndev, sizeof *hbm);
    if (!s || !hbm) {
        free(s);
        free(hbm);
        return tn_fail(e, TN_RESOURCE_EXHAUSTED, "out of host memory");
    }
    for (size_t i = 0; i < sizeof rnd; i++) snprintf(s->id + 2 * i, 3, "%02x", rnd[i]);
    snprintf(s->client, sizeof s->client, "%s", client && *client ? client : "unnamed client");
    s->hbm = hbm;
    s->refs = 1;
    s->open = 1;
    s->last_used = tn_now();
    pthread_mutex_lock(&h->mu);
    int full = h->nsess >= h->o.max_sessions;
    if (!full) h->sess[h->nsess++] = s;
    pthread_mutex_unlock(&h->mu);
    if (full) {
        tn_sess_unref(s);
        return tn_fail(e, TN_RESOURCE_EXHAUSTED, "the TPU host has %d sessions open, its limit (--max-sessions)", h->o.max_sessions);
    }
    memcpy(id, s->id, TN_SESSION_ID_LEN + 1);
    return TN_OK;
}

/* Removes s from the host's list and drops what it holds (under h->mu). */
static void tn_sess_drop(tn_host *h, tn_sess *s)
{
    for (int i = 0; i < h->nsess; i++)
        if (h->sess[i] == s) {
            h->sess[i] = h->sess[--h->nsess];
            break;
        }
    s->open = 0;
    for (int64_t i = 0; i < s->bufs.n; i++)
        if (s->bufs.v[i].obj) tn_buf_unref(h, s->bufs.v[i].obj);
    for (int64_t i = 0; i < s->exes.n; i++)
        if (s->exes.v[i].obj) tn_exe_unref(h, s->exes.v[i].obj);
    s->bufs.n = s->bufs.live = s->exes.n = s->exes.live = 0;
    tn_sess_unref(s);
}

static tn_sess *tn_sess_find(tn_host *h, const char *id)
{
    for (int i = 0; id && i < h->nsess; i++)
        if (!strcmp(h->sess[i]->id, id)) return h->sess[i];
    return NULL;
}

int tn_host_session_close(tn_host *h, const char *id, const char *why)
{
    pthread_mutex_lock(&h->mu);
    tn_sess *s = tn_sess_find(h, id);
    if (s) {
        tn_ended *en = &h->ended[h->nended++ % (int)(sizeof h->ended / sizeof h->ended[0])];
        snprintf(en->id, sizeof en->id, "%s", id);
        snprintf(en->why, sizeof en->why, "%s", why && *why ? why : "closed");
        tn_sess_drop(h, s);
    }
    pthread_mutex_unlock(&h->mu);
    return s != NULL;
}

int tn_host_idle_sessions(tn_host *h, double idle_s, char (*ids)[TN_SESSION_ID_LEN + 1], int max)
{
    int n = 0;
    double now = tn_now();
    pthread_mutex_lock(&h->mu);
    for (int i = 0; i < h->nsess && n < max; i++)
        if (h->sess[i]->inflight == 0 && now - h->sess[i]->last_used > idle_s) memcpy(ids[n++], h->sess[i]->id, TN_SESSION_ID_LEN + 1);
    pthread_mutex_unlock(&h->mu);
    return n;
}

/* A call of session id begins: the session stays alive until tn_leave. */
static tn_sess *tn_enter(tn_host *h, const char *id, tn_err *e)
{
    pthread_mutex_lock(&h->mu);
    tn_sess *s = tn_sess_find(h, id);
    if (s) s->refs++, s->inflight++, s->last_used = tn_now();
    char why[160] = "";
    for (int i = 0; !s && id && i < (int)(sizeof h->ended / sizeof h->ended[0]); i++)
        if (!strcmp(h->ended[i].id, id)) snprintf(why, sizeof why, "%s", h->ended[i].why);
    pthread_mutex_unlock(&h->mu);
    if (!s && why[0])
        tn_fail(e, TN_NOT_FOUND, "session: session '%.8s...' has ended (%s): open a new one", id, why);
    else if (!s)
        tn_fail(e, TN_NOT_FOUND, "session: unknown session '%.8s...' (closed, expired after being idle, or opened on "
                "another server): open a new one", id && *id ? id : "");
    return s;
}

static void tn_leave(tn_host *h, tn_sess *s)
{
    pthread_mutex_lock(&h->mu);
    s->inflight--;
    s->last_used = tn_now();
    tn_sess_unref(s);
    pthread_mutex_unlock(&h->mu);
}

/* ---- HBM (under h->mu) ---- */

/* Who holds device d's HBM, largest first: "session 1a2b3c4d (python train.py, pid 12) 3.00G, ...". */
static void tn_holders(tn_host *h, int d, char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = 0;
    int used[64] = {0};
    for (int round = 0; round < 5 && round < h->nsess && k < n; round++) {
        int best = -1;
        for (int i = 0; i < h->nsess && i < 64; i++)
            if (!used[i] && h->sess[i]->hbm[d] > 0 && (best < 0 || h->sess[i]->hbm[d] > h->sess[best]->hbm[d])) best = i;
        if (best < 0) break;
        used[best] = 1;
        char b[32];
        tn_fmt_bytes(b, sizeof b, h->sess[best]->hbm[d]);
        k += (size_t)snprintf(buf + k, n - k, "%ssession %.8s (%s) %s", k ? ", " : "", h->sess[best]->id,
                              h->sess[best]->client, b);
    }
    if (!buf[0]) snprintf(buf, n, "buffers of closed sessions still in use by runs");
}

static int tn_hbm_reserve(tn_host *h, tn_sess *s, int d, int64_t bytes, int64_t host_bytes, const char *what, tn_err *e)
{
    int64_t limit = h->devs[d].hbm_bytes;
    if (bytes > limit - h->in_use[d]) {
        char need[32], used[32], cap[32], holders[768];
        tn_fmt_bytes(need, sizeof need, bytes);
        tn_fmt_bytes(used, sizeof used, h->in_use[d]);
        tn_fmt_bytes(cap, sizeof cap, limit);
        tn_holders(h, d, holders, sizeof holders);
        return tn_fail(e, TN_RESOURCE_EXHAUSTED,
                       "Out of memory while trying to allocate %s on TPU_%d for %s: %s of its %s HBM in use. Held by: %s",
                       need, d, what, used, cap, holders);
    }
    if (host_bytes > h->max_host_bytes - h->host_bytes) {
        char need[32], cap[32];
        tn_fmt_bytes(need, sizeof need, host_bytes);
        tn_fmt_bytes(cap, sizeof cap, h->max_host_bytes);
        return tn_fail(e, TN_RESOURCE_EXHAUSTED, "the TPU host's own memory (%s for simulated HBM) cannot hold %s more for %s",
                       cap, need, what);
    }
    h->in_use[d] += bytes;
    s->hbm[d] += bytes;
    h->host_bytes += host_bytes;
    return TN_OK;
}

/* A buffer object owning tensor t on device d, charged to s (under h->mu). t is freed on failure. */
static tn_buf *tn_buf_new(tn_host *h, tn_sess *s, int d, tpu_tensor *t, const char *what, tn_err *e)
{
    tn_buf *b = calloc(1, sizeof *b);
    if (!b) {
        tpu_tensor_free(t);
        tn_fail(e, TN_RESOURCE_EXHAUSTED, "out of host memory");
        return NULL;
    }
    b->dtype = tpu_tensor_dtype(t);
    b->rank = tpu_tensor_rank(t);
    memcpy(b->dims, tpu_tensor_dims(t), (size_t)b->rank * sizeof b->dims[0]);
    b->hbm = b->dtype == TPU_TOKEN ? 0 : tpu_chip_array_bytes(h->chip, b->dtype, b->rank, b->dims);
    b->host_bytes = (int64_t)tpu_tensor_nbytes(t);
    char shape[192];
    tpu_tensor_shape_str(t, shape, sizeof shape);
    if (b->hbm < 0 || tn_hbm_reserve(h, s, d, b->hbm < 0 ? 0 : b->hbm, b->host_bytes, what && *what ? what : shape, e)) {
        if (b->hbm < 0) tn_fail(e, TN_INVALID_ARGUMENT, "%s: the array's size overflows", shape);
        tpu_tensor_free(t);
        free(b);
        return NULL;
    }
    b->id = h->next_id++;
    b->refs = 1;
    b->owner = s;
    s->refs++;
    b->device = d;
    b->t = t;
    h->nbufs++;
    return b;
}

static void tn_buf_info(const tn_buf *b, tn_buffer_info *info)
{
    info->id = b->id;
    info->device = b->device;
    info->dtype = b->dtype;
    info->rank = b->rank;
    memcpy(info->dims, b->dims, sizeof info->dims);
    info->hbm_bytes = b->hbm;
}

/* ---- uploads ---- */

struct tn_put {
    tn_host *h;
    tn_sess *s;
    tn_buf  *b;
    int64_t  total, filled;
};

int tn_host_put_begin(tn_host *h, const char *sid, int device, tpu_dtype dt, int rank, const int64_t *dims,
                      int64_t total, tn_put **out, tn_err *e)
{
    *out = NULL;
    if (device < 0 || device >= h->ndev)
        return tn_fail(e, TN_INVALID_ARGUMENT, "device: %d is not a device of the %s (0..%d)", device, h->slice, h->ndev - 1);
    tn_put *p = calloc(1, sizeof *p);
    if (!p) return tn_fail(e, TN_RESOURCE_EXHAUSTED, "out of host memory");
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_tensor *t = NULL;
    tpu_status st = ctx ? tpu_tensor_new(ctx, dt, rank, dims, &t) : TPU_ERR_NOMEM;
    int rc = st ? tn_fail_tpu(e, ctx, st, "dims") : TN_OK;
    tpu_ctx_free(ctx);
    if (!rc && (int64_t)tpu_tensor_nbytes(t) != total)
        rc = tn_fail(e, TN_INVALID_ARGUMENT, "total_bytes: %lld, but a %s array of these dims holds %zu bytes",
                     (long long)total, tpu_dtype_name(dt), tpu_tensor_nbytes(t));
    tn_sess *s = rc ? NULL : tn_enter(h, sid, e);
    if (!rc && !s) rc = e->code;
    if (!rc) {
        pthread_mutex_lock(&h->mu);
        p->b = tn_buf_new(h, s, device, t, NULL, e);
        t = NULL;
        if (!p->b) rc = e->code;
        pthread_mutex_unlock(&h->mu);
    }
    if (rc) {
        tpu_tensor_free(t);
        if (s) tn_leave(h, s);
        free(p);
        return rc;
    }
    p->h = h, p->s = s, p->total = total;
    *out = p;
    return TN_OK;
}

int tn_host_put_data(tn_put *p, const void *data, size_t n, tn_err *e)
{
    if ((int64_t)n > p->total - p->filled)
        return tn_fail(e, TN_INVALID_ARGUMENT, "data: %zu more bytes where %lld of total_bytes %lld remain", n,
                       (long long)(p->total - p->filled), (long long)p->total);
    if (n) memcpy((char *)tpu_tensor_data(p->b->t) + p->filled, data, n);
    p->filled += (int64_t)n;
    return TN_OK;
}

void tn_host_put_abort(tn_put *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->h->mu);
    tn_buf_unref(p->h, p->b);
    pthread_mutex_unlock(&p->h->mu);
    tn_leave(p->h, p->s);
    free(p);
}

int tn_host_put_finish(tn_put *p, tn_buffer_info *info, tn_err *e)
{
    tn_host *h = p->h;
    int rc = TN_OK;
    if (p->filled != p->total)
        rc = tn_fail(e, TN_INVALID_ARGUMENT, "data: the stream ended after %lld of total_bytes %lld", (long long)p->filled,
                     (long long)p->total);
    pthread_mutex_lock(&h->mu);
    if (!rc && !p->s->open) rc = tn_fail(e, TN_NOT_FOUND, "session: closed during the transfer");
    if (!rc && p->s->bufs.live >= h->o.max_buffers)
        rc = tn_fail(e, TN_RESOURCE_EXHAUSTED, "the session holds %lld buffers, the server's limit per session",
                     (long long)h->o.max_buffers);
    if (!rc && tn_table_add(&p->s->bufs, p->b->id, p->b)) rc = tn_fail(e, TN_RESOURCE_EXHAUSTED, "out of host memory");
    if (!rc) tn_buf_info(p->b, info);
    else tn_buf_unref(h, p->b);
    pthread_mutex_unlock(&h->mu);
    tn_leave(h, p->s);
    free(p);
    return rc;
}

/* ---- downloads ---- */

struct tn_get {
    tn_host *h;
    tn_sess *s;
    tn_buf  *b;
};

int tn_host_get_begin(tn_host *h, const char *sid, uint64_t id, tn_get **out, const void **data, size_t *n, tn_err *e)
{
    *out = NULL;
    tn_get *g = calloc(1, sizeof *g);
    if (!g) return tn_fail(e, TN_RESOURCE_EXHAUSTED, "out of host memory");
    tn_sess *s = tn_enter(h, sid, e);
    if (!s) {
        free(g);
        return e->code;
    }
    pthread_mutex_lock(&h->mu);
    int64_t i = tn_table_find(&s->bufs, id);
    tn_buf *b = i >= 0 ? s->bufs.v[i].obj : NULL;
    if (b) b->refs++;
    pthread_mutex_unlock(&h->mu);
    if (!b) {
        tn_leave(h, s);
        free(g);
        return tn_fail(e, TN_NOT_FOUND, "buffer: no buffer %llu in this session (deleted, donated to a run, or never made)",
                       (unsigned long long)id);
    }
    g->h = h, g->s = s, g->b = b;
    *data = tpu_tensor_cdata(b->t);
    *n = tpu_tensor_nbytes(b->t);
    *out = g;
    return TN_OK;
}

void tn_host_get_end(tn_get *g)
{
    if (!g) return;
    pthread_mutex_lock(&g->h->mu);
    tn_buf_unref(g->h, g->b);
    pthread_mutex_unlock(&g->h->mu);
    tn_leave(g->h, g->s);
    free(g);
}

/* ---- delete ---- */

int tn_host_delete(tn_host *h, const char *sid, const uint64_t *bufs, int nbufs, const uint64_t *exes, int nexes,
                   int *deleted, tn_err *e)
{
    *deleted = 0;
    tn_sess *s = tn_enter(h, sid, e);
    if (!s) return e->code;
    int rc = TN_OK;
    pthread_mutex_lock(&h->mu);
    for (int i = 0; i < nbufs; i++) {
        tn_buf *b = tn_table_take(&s->bufs, bufs[i]);
        if (b) tn_buf_unref(h, b), (*deleted)++;
        else if (!rc) rc = tn_fail(e, TN_NOT_FOUND, "buffers[%d]: no buffer %llu in this session", i, (unsigned long long)bufs[i]);
    }
    for (int i = 0; i < nexes; i++) {
        tn_exe *x = tn_table_take(&s->exes, exes[i]);
        if (x) tn_exe_unref(h, x), (*deleted)++;
        else if (!rc) rc = tn_fail(e, TN_NOT_FOUND, "executables[%d]: no executable %llu in this session", i, (unsigned long long)exes[i]);
    }
    pthread_mutex_unlock(&h->mu);
    tn_leave(h, s);
    return rc;
}

/* ---- compile ---- */

static int tn_exe_assign(tn_host *h, tn_exe *x, const tn_compile_req *r, tn_err *e)
{
    int n = x->R * x->P;
    if (n > h->ndev)
        return tn_fail(e, TN_INVALID_ARGUMENT, "num_replicas x num_partitions: %d x %d = %d devices; the %s has %d", x->R,
                       x->P, n, h->slice, h->ndev);
    if (r->nassignment && r->nassignment != n)
        return tn_fail(e, TN_INVALID_ARGUMENT, "device_assignment: %d devices for %d replicas x %d partitions", r->nassignment,
                       x->R, x->P);
    x->assign = calloc((size_t)n, sizeof *x->assign);
    if (!x->assign) return tn_fail(e, TN_RESOURCE_EXHAUSTED, "out of host memory");
    for (int i = 0; i < n; i++) {
        int d = r->nassignment ? r->assignment[i] : i;
        if (d < 0 || d >= h->ndev) return tn_fail(e, TN_INVALID_ARGUMENT, "device_assignment[%d]: %d is not a device of the %s", i, d, h->slice);
        for (int k = 0; k < i; k++)
            if (x->assign[k] == d) return tn_fail(e, TN_INVALID_ARGUMENT, "device_assignment[%d]: device %d is assigned twice", i, d);
        x->assign[i] = d;
    }
    return TN_OK;
}

/* What the TPU compiler would refuse (tpusim check), what tpusim cannot run, and the out-of-memory report. */
static int tn_exe_check(tn_host *h, tpu_ctx *ctx, tn_exe *x, tn_err *e)
{
    tpu_report *rep = NULL;
    tpu_status st = tpu_check(ctx, x->m, h->slice, &rep);
    if (st) return tn_fail_tpu(e, ctx, st, "tpusim: checking the program");
    int rc = tpu_report_compatible(rep) ? TN_OK
             : tn_fail(e, TN_INVALID_ARGUMENT, "tpusim: %s would not compile for the simulated %s:\n%s", x->name, h->slice,
                       tpu_report_text(rep));
    tpu_report_free(rep);
    if (rc) return rc;
    st = tpu_module_runnable(ctx, x->m);
    if (st) return tn_fail_tpu(e, ctx, st, "tpusim cannot run this program");
    tpu_memory_opts mo = {.chip = h->slice, .top = 5};
    tpu_memory *mem = NULL;
    st = tpu_memory_plan(ctx, x->m, &mo, &mem);
    if (st) return tn_fail_tpu(e, ctx, st, "tpusim: planning the program's memory");
    tpu_memory_get_stats(mem, &x->mem);
    if (!tpu_memory_fits(mem))
        rc = tn_fail(e, TN_RESOURCE_EXHAUSTED, "XLA:TPU compile permanent error. %s", tpu_memory_report(mem));
    tpu_memory_free(mem);
    return rc;
}

static int tn_exe_build(tn_host *h, tpu_ctx *ctx, const tn_compile_req *r, tn_exe *x, tn_err *e)
{
    tpu_status st = tpu_module_parse(ctx, r->program, r->len, "program", &x->m);
    if (st) return tn_fail_tpu(e, ctx, st, "program");
    snprintf(x->name, sizeof x->name, "%s", tpu_module_name(x->m) ? tpu_module_name(x->m) : "program");
    x->R = r->replicas > 0 ? r->replicas : 1;
    x->P = r->partitions > 0 ? r->partitions : 1;
    int64_t mr = tpu_module_replica_count(x->m), mp = tpu_module_num_partitions(x->m);
    if ((mr > 1 && mr != x->R) || (mp > 1 && mp != x->P))
        return tn_fail(e, TN_INVALID_ARGUMENT, "num_replicas, num_partitions: %s says replica_count=%lld num_partitions=%lld; "
                       "the request asks for %d x %d", x->name, (long long)mr, (long long)mp, x->R, x->P);
    x->num = r->numerics == 0 ? TPU_NUMERICS_TPU : r->numerics == 1 ? TPU_NUMERICS_EXACT : h->o.numerics;
    x->nin = tpu_module_num_inputs(x->m);
    x->nout = tpu_module_num_outputs(x->m);
    x->alias_of = calloc((size_t)x->nout + 1, sizeof *x->alias_of);
    if (!x->alias_of) return tn_fail(e, TN_RESOURCE_EXHAUSTED, "out of host memory");
    for (int i = 0; i < x->nout; i++) x->alias_of[i] = tpu_module_output_alias(x->m, i, NULL);
    for (int i = 0; i < x->nout; i++) x->ntok += tn_output_is_token(x->m, i);
    int rc = tn_exe_assign(h, x, r, e);
    return rc ? rc : tn_exe_check(h, ctx, x, e);
}

int tn_host_compile(tn_host *h, const char *sid, const tn_compile_req *r, tn_compile_info *info, tn_err *e)
{
    tn_sess *s = tn_enter(h, sid, e);
    if (!s) return e->code;
    tn_exe *x = calloc(1, sizeof *x);
    tpu_ctx *ctx = tpu_ctx_new();
    int rc = !x || !ctx ? tn_fail(e, TN_RESOURCE_EXHAUSTED, "out of host memory") : tn_exe_build(h, ctx, r, x, e);
    tpu_ctx_free(ctx);
    pthread_mutex_lock(&h->mu);
    if (!rc && s->exes.live >= h->o.max_executables)
        rc = tn_fail(e, TN_RESOURCE_EXHAUSTED, "the session holds %lld executables, the server's limit per session",
                     (long long)h->o.max_executables);
    if (!rc) {
        x->id = h->next_id++;
        x->refs = 1;
        x->owner = s;
        s->refs++;
        h->nexes++;
        h->compiles++;
        if (tn_table_add(&s->exes, x->id, x)) {
            tn_exe_unref(h, x);
            rc = tn_fail(e, TN_RESOURCE_EXHAUSTED, "out of host memory");
        } else {
            info->id = x->id;
            snprintf(info->name, sizeof info->name, "%s", x->name);
            info->ninputs = x->nin, info->noutputs = x->nout, info->mem = x->mem;
        }
        x = NULL;
    }
    pthread_mutex_unlock(&h->mu);
    if (x) {
        tpu_module_free(x->m);
        free(x->assign);
        free(x->alias_of);
        free(x);
    }
    tn_leave(h, s);
    return rc;
}

/* ---- execute ---- */

/* A replicated run's devices: a tpu_system per device count, kept (under h->run_mu). */
static tpu_system *tn_system(tn_host *h, tpu_ctx *ctx, int n)
{
    for (int i = 0; i < h->nsystems; i++)
        if (h->systems[i].n == n) return h->systems[i].sys;
    char spec[96];
    if (n == h->ndev) snprintf(spec, sizeof spec, "%s", h->slice);
    else snprintf(spec, sizeof spec, "%d:%s", n, h->slice);
    tpu_system *sys = NULL;
    if (tpu_system_new(ctx, spec, &sys)) return NULL;
    if (h->nsystems == (int)(sizeof h->systems / sizeof h->systems[0])) {
        tpu_system_free(h->systems[0].sys);
        memmove(h->systems, h->systems + 1, sizeof h->systems - sizeof h->systems[0]);
        h->nsystems--;
    }
    h->systems[h->nsystems++] = (tn_sys_slot){n, sys};
    return sys;
}

/* An execution's state: the executable and argument buffers it holds references on. */
static int tn_output_is_token(const tpu_module *m, int i)
{
    tpu_dtype t = TPU_INVALID;
    int rank;
    int64_t dims[TPU_MAX_RANK];
    return tpu_module_output_info(m, i, &t, &rank, dims) == TPU_OK && t == TPU_TOKEN;
}

/* A token result: an empty array, which the client reports as a token and passes back in as one. */
static int tn_token_tensor(tpu_tensor **out)
{
    tpu_ctx *ctx = tpu_ctx_new();
    int64_t zero = 0;
    tpu_status st = ctx ? tpu_tensor_new(ctx, TPU_PRED, 1, &zero, out) : TPU_ERR_NOMEM;
    tpu_ctx_free(ctx);
    return st != TPU_OK;
}

typedef struct tn_run {
    tn_host      *h;
    tn_sess      *s;
    tn_exe       *x;
    int           n;            /* devices */
    int           devs[64];
    tn_buf      **args;         /* n x nin */
    tpu_tensor ***ins, ***outs;  /* outs: n x nres, the executor's results */
    int           nres;
} tn_run;

/* Looks up the executable and arguments and takes references (under h->mu). */
static int tn_run_lookup(tn_run *run, const tn_exec_req *r, tn_err *e)
{
    tn_sess *s = run->s;
    int64_t i = tn_table_find(&s->exes, r->executable);
    if (i < 0) return tn_fail(e, TN_NOT_FOUND, "executable: no executable %llu in this session", (unsigned long long)r->executable);
    tn_exe *x = run->x = s->exes.v[i].obj;
    x->refs++;
    int n = x->R * x->P;
    if (r->ndevices != n)
        return tn_fail(e, TN_INVALID_ARGUMENT, "arguments: %d argument lists; %s runs on %d device%s", r->ndevices, x->name, n,
                       n == 1 ? "" : "s");
    if (r->nargs != x->nin)
        return tn_fail(e, TN_INVALID_ARGUMENT, "arguments[0].buffers: %d buffers; %s takes %d", r->nargs, x->name, x->nin);
    run->n = n;
    for (int d = 0; d < n; d++) run->devs[d] = r->devices ? r->devices[d] : x->assign[d];
    for (int d = 0; d < n; d++)
        for (int k = 0; k < r->nargs; k++) {
            int64_t j = tn_table_find(&s->bufs, r->args[d * r->nargs + k]);
            if (j < 0)
                return tn_fail(e, TN_NOT_FOUND, "arguments[%d].buffers[%d]: no buffer %llu in this session (deleted, donated to "
                               "an earlier run, or never made)", d, k, (unsigned long long)r->args[d * r->nargs + k]);
            tn_buf *b = run->args[d * x->nin + k] = s->bufs.v[j].obj;
            b->refs++;
        }
    return TN_OK;
}

/* Every argument on its run's device with the program's input shape. */
static int tn_run_check(tn_run *run, const tn_exec_req *r, tn_err *e)
{
    tn_host *h = run->h;
    tn_exe *x = run->x;
    for (int d = 0; d < run->n; d++) {
        if (run->devs[d] < 0 || run->devs[d] >= h->ndev)
            return tn_fail(e, TN_INVALID_ARGUMENT, "devices[%d]: %d is not a device of the %s", d, run->devs[d], h->slice);
        for (int k = 0; k < d; k++)
            if (run->devs[k] == run->devs[d]) return tn_fail(e, TN_INVALID_ARGUMENT, "devices[%d]: device %d twice", d, run->devs[d]);
        for (int k = 0; k < x->nin; k++) {
            tn_buf *b = run->args[d * x->nin + k];
            tpu_dtype t;
            int rank;
            int64_t dims[TPU_MAX_RANK];
            tpu_module_input_info(x->m, k, &t, &rank, dims);
            /* frameworks pass a token as an empty array (jax: pred[0]) */
            int same = t == TPU_TOKEN ? tpu_tensor_count(b->t) == 0 : t == b->dtype && rank == b->rank;
            for (int q = 0; same && t != TPU_TOKEN && q < rank; q++) same = dims[q] == b->dims[q];
            if (b->device != run->devs[d])
                return tn_fail(e, TN_INVALID_ARGUMENT, "arguments[%d].buffers[%d]: on TPU_%d, but this run's device %d is TPU_%d",
                               d, k, b->device, d, run->devs[d]);
            if (!same) {
                char got[192];
                tpu_tensor_shape_str(b->t, got, sizeof got);
                return tn_fail(e, TN_INVALID_ARGUMENT, "arguments[%d].buffers[%d]: %s is not the shape %s takes as input %d",
                               d, k, got, x->name, k);
            }
        }
    }
    (void)r;
    return TN_OK;
}

/* The tighter of two limits, 0 meaning none. */
static double tn_tighter(double a, double b) { return a <= 0 ? b : b <= 0 ? a : a < b ? a : b; }

static int tn_run_exec(tn_run *run, const tn_exec_req *r, tn_err *e)
{
    tn_host *h = run->h;
    tn_exe *x = run->x;
    int n = run->n, nout = 0;
    for (int d = 0; d < n; d++)
        for (int k = 0; k < x->nin; k++) run->ins[d][k] = run->args[d * x->nin + k]->t;
    tpu_run_opts o = tpu_run_opts_default();
    o.numerics = x->num;
    o.threads = h->o.threads;
    o.host = r->host;
    o.max_steps = (int64_t)tn_tighter((double)h->o.max_steps, (double)r->max_steps);
    o.max_seconds = tn_tighter(h->o.max_seconds, r->max_seconds);
    tpu_ctx *ctx = tpu_ctx_new();
    if (!ctx) return tn_fail(e, TN_RESOURCE_EXHAUSTED, "out of host memory");
    tpu_status st;
    if (n == 1) {
        st = tpu_run(ctx, x->m, &o, run->ins[0], x->nin, &run->outs[0], &nout);
    } else {
        pthread_mutex_lock(&h->run_mu);
        tpu_system *sys = tn_system(h, ctx, n);
        st = sys ? tpu_system_set_split(ctx, sys, x->R, x->P) : TPU_ERR_NOMEM;
        if (sys && !st) st = tpu_system_run(ctx, sys, x->m, &o, (tpu_tensor **const *)run->ins, x->nin, run->outs, &nout);
        pthread_mutex_unlock(&h->run_mu);
    }
    int rc = st ? tn_fail_tpu(e, ctx, st, x->name) : TN_OK;
    if (!st) run->nres = nout;
    if (!rc && nout != x->nout - x->ntok)
        rc = tn_fail(e, TN_INTERNAL, "%s: %d results where the program declares %d", x->name, nout, x->nout - x->ntok);
    tpu_ctx_free(ctx);
    return rc;
}

static int tn_donatable(const tn_exec_req *r, int64_t k)
{
    for (int i = 0; i < r->nnon_donatable; i++)
        if (r->non_donatable[i] == k) return 0;
    return 1;
}

/* After a run (under h->mu): donated arguments leave the session, results become buffers. */
static int tn_run_results(tn_run *run, const tn_exec_req *r, tn_exec_result *res, tn_err *e)
{
    tn_host *h = run->h;
    tn_exe *x = run->x;
    tn_sess *s = run->s;
    if (!s->open) return tn_fail(e, TN_NOT_FOUND, "session: closed during the run; its results were dropped");
    for (int i = 0; i < x->nout; i++) {
        int k = x->alias_of[i];
        if (k < 0 || !tn_donatable(r, k)) continue;
        res->donated[res->ndonated++] = k;
        for (int d = 0; d < run->n; d++) {
            tn_buf *b = tn_table_take(&s->bufs, run->args[d * x->nin + k]->id);
            if (b) tn_buf_unref(h, b);
        }
    }
    for (int i = 0; i < run->n * x->nin; i++) tn_buf_unref(h, run->args[i]);   /* the run's own references */
    memset(run->args, 0, (size_t)run->n * (size_t)x->nin * sizeof *run->args);
    int rc = TN_OK;
    for (int d = 0; d < run->n; d++)
        for (int i = 0, k = 0; i < x->nout; i++) {
            tpu_tensor *t = NULL;
            if (tn_output_is_token(x->m, i)) {
                if (!rc && tn_token_tensor(&t)) rc = tn_fail(e, TN_RESOURCE_EXHAUSTED, "out of host memory");
            } else {
                t = run->outs[d][k];
                run->outs[d][k++] = NULL;
            }
            if (rc) {
                tpu_tensor_free(t);
                continue;
            }
            char what[160];
            snprintf(what, sizeof what, "output %d of %s", i, x->name);
            tn_buf *b = tn_buf_new(h, s, run->devs[d], t, what, e);
            if (!b || tn_table_add(&s->bufs, b->id, b)) {
                if (b) tn_buf_unref(h, b);
                rc = e->code ? e->code : tn_fail(e, TN_RESOURCE_EXHAUSTED, "out of host memory");
                continue;
            }
            tn_buf_info(b, &res->outputs[d * x->nout + i]);
        }
    for (int q = 0; rc && q < run->n * x->nout; q++) {   /* all or nothing */
        tn_buf *b = res->outputs[q].id ? tn_table_take(&s->bufs, res->outputs[q].id) : NULL;
        if (b) tn_buf_unref(h, b);
    }
    return rc;
}

static void tn_run_free(tn_run *run)
{
    tn_host *h = run->h;
    int nin = run->x ? run->x->nin : 0;
    pthread_mutex_lock(&h->mu);
    for (int i = 0; run->args && i < run->n * nin; i++)
        if (run->args[i]) tn_buf_unref(h, run->args[i]);
    if (run->x) tn_exe_unref(h, run->x);
    pthread_mutex_unlock(&h->mu);
    tpu_system_outputs_free(run->outs, run->n, run->nres);   /* what the results did not take over */
    free(run->args);
    free(run->ins ? run->ins[0] : NULL);
    free(run->ins);
    free(run->outs);
}

static int tn_run_alloc(tn_run *run, const tn_exec_req *r, tn_err *e)
{
    int n = r->ndevices > 0 ? r->ndevices : 1;
    run->args = calloc((size_t)n * (size_t)(r->nargs + 1), sizeof *run->args);
    run->ins = calloc((size_t)n, sizeof *run->ins);
    run->outs = calloc((size_t)n, sizeof *run->outs);
    tpu_tensor **flat = calloc((size_t)n * (size_t)(r->nargs + 1), sizeof *flat);
    if (!run->args || !run->ins || !run->outs || !flat) {
        free(flat);
        return tn_fail(e, TN_RESOURCE_EXHAUSTED, "out of host memory");
    }
    for (int d = 0; d < n; d++) run->ins[d] = flat + (size_t)d * (size_t)(r->nargs + 1);
    return TN_OK;
}

int tn_host_execute(tn_host *h, const char *sid, const tn_exec_req *r, tn_exec_result *res, tn_err *e)
{
    memset(res, 0, sizeof *res);
    if (r->ndevices < 1 || r->ndevices > 64 || r->nargs < 0)
        return tn_fail(e, TN_INVALID_ARGUMENT, "arguments: %d argument lists (1 to 64, one per device)", r->ndevices);
    tn_run run = {.h = h};
    run.s = tn_enter(h, sid, e);
    if (!run.s) return e->code;
    int rc = tn_run_alloc(&run, r, e);
    if (!rc) {
        pthread_mutex_lock(&h->mu);
        rc = tn_run_lookup(&run, r, e);
        if (!rc) rc = tn_run_check(&run, r, e);
        if (!rc) h->running++;
        pthread_mutex_unlock(&h->mu);
    }
    if (!rc) {
        double t0 = tn_now();
        rc = tn_run_exec(&run, r, e);
        res->run_s = tn_now() - t0;
        res->ndevices = run.n, res->noutputs = run.x->nout;
        res->outputs = calloc((size_t)run.n * (size_t)run.x->nout + 1, sizeof *res->outputs);
        res->donated = calloc((size_t)run.x->nout + 1, sizeof *res->donated);
        if (!rc && (!res->outputs || !res->donated)) rc = tn_fail(e, TN_RESOURCE_EXHAUSTED, "out of host memory");
        pthread_mutex_lock(&h->mu);
        h->running--;
        h->executions++;
        if (!rc) rc = tn_run_results(&run, r, res, e);
        pthread_mutex_unlock(&h->mu);
    }
    tn_run_free(&run);
    tn_leave(h, run.s);
    if (rc) tn_exec_result_free(res);
    return rc;
}

void tn_exec_result_free(tn_exec_result *r)
{
    free(r->outputs);
    free(r->donated);
    memset(r, 0, sizeof *r);
}

/* ---- reports ---- */

static char *tn_report_text(tn_host *h, const tn_session_memory *sm, int ns)
{
    size_t cap = 4096 + (size_t)h->ndev * 96 + (size_t)ns * 320, k = 0;
    char *t = malloc(cap);
    if (!t) return NULL;
    char b1[32], b2[32];
    k += (size_t)snprintf(t + k, cap - k, "TPU %s (simulated): %d devices\n%-8s %12s %12s\n", h->slice, h->ndev, "device",
                          "HBM in use", "of");
    for (int d = 0; d < h->ndev; d++) {
        tn_fmt_bytes(b1, sizeof b1, h->in_use[d]);
        tn_fmt_bytes(b2, sizeof b2, h->devs[d].hbm_bytes);
        k += (size_t)snprintf(t + k, cap - k, "TPU_%-4d %12s %12s\n", d, b1, b2);
    }
    k += (size_t)snprintf(t + k, cap - k, "%d session%s\n", ns, ns == 1 ? "" : "s");
    if (ns) k += (size_t)snprintf(t + k, cap - k, "%-9s %-40s %8s %11s %10s %8s\n", "session", "client", "buffers", "executables", "HBM", "idle");
    for (int i = 0; i < ns && k < cap; i++) {
        int64_t tot = 0;
        for (int d = 0; d < h->ndev && d < 64; d++) tot += sm[i].hbm[d];
        tn_fmt_bytes(b1, sizeof b1, tot);
        k += (size_t)snprintf(t + k, cap - k, "%-9.8s %-40.40s %8lld %11lld %10s %7.1fs\n", sm[i].id, sm[i].client,
                              (long long)sm[i].buffers, (long long)sm[i].executables, b1, sm[i].idle_s);
    }
    return t;
}

int tn_host_memory_report(tn_host *h, tn_session_memory **sessions, int *nsessions, char **text)
{
    pthread_mutex_lock(&h->mu);
    int ns = h->nsess;
    tn_session_memory *sm = calloc((size_t)ns + 1, sizeof *sm);
    double now = tn_now();
    for (int i = 0; sm && i < ns; i++) {
        tn_sess *s = h->sess[i];
        memcpy(sm[i].id, s->id, sizeof sm[i].id);
        snprintf(sm[i].client, sizeof sm[i].client, "%s", s->client);
        sm[i].buffers = s->bufs.live;
        sm[i].executables = s->exes.live;
        for (int d = 0; d < h->ndev && d < 64; d++) sm[i].hbm[d] = s->hbm[d];
        sm[i].idle_s = s->inflight ? 0 : now - s->last_used;
    }
    char *t = sm ? tn_report_text(h, sm, ns) : NULL;
    pthread_mutex_unlock(&h->mu);
    if (!sm || !t) {
        free(sm);
        free(t);
        return TN_RESOURCE_EXHAUSTED;
    }
    *sessions = sm, *nsessions = ns;
    if (text) *text = t;
    else free(t);
    return TN_OK;
}

int tn_host_profile(tn_host *h, const char *sid, uint64_t id, int top, tn_profile_info *out, tn_err *e)
{
    memset(out, 0, sizeof *out);
    tn_sess *s = tn_enter(h, sid, e);
    if (!s) return e->code;
    pthread_mutex_lock(&h->mu);
    int64_t i = tn_table_find(&s->exes, id);
    tn_exe *x = i >= 0 ? s->exes.v[i].obj : NULL;
    if (x) x->refs++;
    pthread_mutex_unlock(&h->mu);
    int rc = x ? TN_OK : tn_fail(e, TN_NOT_FOUND, "executable: no executable %llu in this session", (unsigned long long)id);
    tpu_ctx *ctx = rc ? NULL : tpu_ctx_new();
    tpu_profile *p = NULL;
    if (!rc) {
        tpu_profile_opts po = {.chip = h->slice, .steps = 1, .steps_per_exec = 1};
        tpu_status st = ctx ? tpu_profile_program(ctx, x->m, &po, &p) : TPU_ERR_NOMEM;
        if (st) rc = tn_fail_tpu(e, ctx, st, "tpusim: profiling the program");
    }
    if (!rc) {
        out->step_s = tpu_profile_step_time(p);
        out->mxu_util = tpu_profile_mxu_utilization(p);
        snprintf(out->bound, sizeof out->bound, "%s", tpu_profile_bound(p));
        out->summary = strdup(tpu_profile_summary(p, top > 0 ? top : 15));
        out->advice = strdup(tpu_profile_advice(p));
        out->json = strdup(tpu_profile_json(p));
        if (!out->summary || !out->advice || !out->json) rc = tn_fail(e, TN_RESOURCE_EXHAUSTED, "out of host memory");
    }
    tpu_profile_free(p);
    tpu_ctx_free(ctx);
    if (x) {
        pthread_mutex_lock(&h->mu);
        tn_exe_unref(h, x);
        pthread_mutex_unlock(&h->mu);
    }
    tn_leave(h, s);
    if (rc) tn_profile_info_free(out);
    return rc;
}

void tn_profile_info_free(tn_profile_info *p)
{
    free(p->summary);
    free(p->advice);
    free(p->json);
    p->summary = p->advice = p->json = NULL;
}
