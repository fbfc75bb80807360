/* dst_coll.c — the runtime's transport to the devices of other processes (rt_remote, runtime.h) over the MPI
 * transport (dst_net.c).
 *
 * A collective execution whose group has members in other processes: once its local members have arrived,
 * this process sends their operands (one message per other process of the group, keyed by the run, the
 * instruction, its execution number and the group's first member) and receives the other processes' members'
 * operands. Every process then holds every member's operands and computes its own members' results exactly
 * as a single process would (rt_coll.c: the same ring order), so the results are the same bit for bit. This
 * moves each operand to every process of its group — more bytes than a ring, the price of computing each
 * result in one place in the documented order.
 *
 * Payload: u32 count, then count entries {u32 member, u32 operand, i32 dtype (-1: a tuple), i32 rank,
 * i64 dims[TPU_MAX_RANK], u64 bytes}, then the entries' bytes in order. Every message carries the sender's
 * program fingerprint: processes that run different programs are told so at their first collective. */
#include "dist/dist.h"

#include <stdlib.h>
#include <string.h>

typedef struct dst_entry {
    uint32_t member, op;
    int32_t  dtype, rank;
    int64_t  dims[TPU_MAX_RANK];
    uint64_t bytes;
} dst_entry;

/* The local members' operands as one payload. */
static tpu_status dst_pack(tpu_ctx *ctx, const rt_xfer *x, ut_buf *b)
{
    int nops = x->in->nops;
    uint32_t count = 0;
    for (int i = 0; i < x->n; i++)
        if (x->ops[i]) count += (uint32_t)nops;
    ut_buf_put(b, (const char *)&count, sizeof count);
    for (int i = 0; i < x->n; i++) {
        if (!x->ops[i]) continue;
        for (int j = 0; j < nops; j++) {
            const tpu_tensor *t = x->ops[i][j]->t;
            dst_entry e = {(uint32_t)i, (uint32_t)j, t ? (int32_t)t->dtype : -1, t ? t->rank : 0, {0}, 0};
            if (t) {
                memcpy(e.dims, t->dims, sizeof e.dims);
                e.bytes = tpu_tensor_nbytes(t);
            }
            ut_buf_put(b, (const char *)&e, sizeof e);
        }
    }
    for (int i = 0; i < x->n; i++)
        for (int j = 0; x->ops[i] && j < nops; j++) {
            const tpu_tensor *t = x->ops[i][j]->t;
            if (t && tpu_tensor_nbytes(t)) ut_buf_put(b, (const char *)t->data, tpu_tensor_nbytes(t));
        }
    return b->failed ? ut_nomem(ctx) : TPU_OK;
}

/* One received entry as a value. */
static exe_value *dst_value(const dst_entry *e, const char *data)
{
    if (e->dtype < 0) return exe_value_tuple(NULL, 0);   /* a tuple operand: the collective reports it */
    tpu_tensor *t = ten_alloc_uninit((tpu_dtype)e->dtype, e->rank, e->dims);
    if (!t) return NULL;
    if (e->bytes) memcpy(t->data, data, (size_t)e->bytes);
    return exe_value_array(t);
}

/* Unpacks process q's message into remote[member][op], checking it against the group. */
static tpu_status dst_unpack(tpu_ctx *ctx, dst_sys *s, const rt_xfer *x, const dst_msg *m, exe_value ***remote)
{
    const char *what = x->in->name;
    int nops = x->in->nops;
    if (m->fp != s->fp)
        return ut_err(ctx, TPU_ERR_INVALID, "%s '%s': process %d runs another program (fingerprint %016llx; this "
                      "process's is %016llx): every process must run the same programs in the same order",
                      hlo_op_name((hlo_op)x->in->op), what, m->from, (unsigned long long)m->fp, (unsigned long long)s->fp);
    uint32_t count = 0;
    if (m->total < sizeof count) return ut_err(ctx, TPU_ERR_INTERNAL, "a short message from process %d", m->from);
    memcpy(&count, m->data, sizeof count);
    uint64_t off = sizeof count + (uint64_t)count * sizeof(dst_entry);
    if (off > m->total) return ut_err(ctx, TPU_ERR_INTERNAL, "a short message from process %d", m->from);
    for (uint32_t k = 0; k < count; k++) {
        dst_entry e;
        memcpy(&e, m->data + sizeof count + (size_t)k * sizeof e, sizeof e);
        int ok = e.member < (uint32_t)x->n && e.op < (uint32_t)nops && s->owner[x->members[e.member]] == m->from &&
                 !x->ops[e.member] && e.rank >= 0 && e.rank <= TPU_MAX_RANK && e.bytes <= m->total - off;
        if (!ok)
            return ut_err(ctx, TPU_ERR_INVALID, "'%s': process %d sent operands this process did not expect (the "
                          "processes disagree about the group: different programs or slices?)", what, m->from);
        if (!remote[e.member] && !(remote[e.member] = ut_calloc((size_t)nops, sizeof *remote[e.member])))
            return ut_nomem(ctx);
        if (remote[e.member][e.op]) return ut_err(ctx, TPU_ERR_INVALID, "'%s': process %d sent an operand twice", what, m->from);
        if (!(remote[e.member][e.op] = dst_value(&e, m->data + off))) return ut_nomem(ctx);
        off += e.bytes;
    }
    return TPU_OK;
}

static tpu_status dst_exchange(void *user, tpu_ctx *ctx, const rt_xfer *x, exe_value ***remote)
{
    dst_sys *s = user;
    tpu_dist *d = s->d;
    /* the other processes of the group, ascending */
    int *procs = ut_calloc((size_t)d->size, sizeof *procs), np = 0;
    if (!procs) return ut_nomem(ctx);
    for (int i = 0; i < x->n; i++) {
        int q = s->owner[x->members[i]];
        if (q != d->rank) procs[q] = 1;
    }
    for (int q = 0; q < d->size; q++)
        if (procs[q]) procs[np++] = q;
    ut_buf b;
    ut_buf_init(&b);
    tpu_status st = dst_pack(ctx, x, &b);
    if (!st) st = dst_net_send_many(ctx, d->net, procs, np, DST_COLL, x->key, s->fp, b.data, b.len);
    ut_buf_free(&b);
    char what[160];
    snprintf(what, sizeof what, "%s '%s'", hlo_op_name((hlo_op)x->in->op), x->in->name);
    for (int k = 0; !st && k < np; k++) {
        dst_msg *m = NULL;
        st = dst_net_wait(ctx, d->net, DST_COLL, x->key, procs[k], what, &m);
        if (!st) st = dst_unpack(ctx, s, x, m, remote);
        dst_msg_free(m);
    }
    ut_free(procs);
    if (st && !dst_net_failure(d->net)) dst_net_fail(d->net, "%s", tpu_errmsg(ctx));
    return st;
}

/* Runs are numbered per kind of system (its owner map), the same on every process. */
static tpu_status dst_run_begin(void *user, tpu_ctx *ctx, const hlo_module *m, uint64_t *run_key)
{
    dst_sys *s = user;
    tpu_dist *d = s->d;
    const char *f = dst_net_failure(d->net);
    if (f) return ut_err(ctx, TPU_ERR_INVALID, "the multi-process system is down: %s", f);
    s->fp = tpu_module_fingerprint(m);
    pthread_mutex_lock(&d->mu);
    int i = 0;
    while (i < d->nrun && d->run_sys[i] != s->sys_key) i++;
    if (i == d->nrun && d->nrun < (int)(sizeof d->run_sys / sizeof d->run_sys[0])) {
        d->run_sys[i] = s->sys_key;
        d->run_seq[i] = 0;
        d->nrun++;
    }
    uint64_t seq = i < d->nrun ? d->run_seq[i]++ : 0;
    pthread_mutex_unlock(&d->mu);
    if (i == (int)(sizeof d->run_sys / sizeof d->run_sys[0]))
        return ut_err(ctx, TPU_ERR_UNSUPPORTED, "more than %d different device sets span processes",
                      (int)(sizeof d->run_sys / sizeof d->run_sys[0]));
    *run_key = s->sys_key ^ (seq * 0x9E3779B97F4A7C15ULL + 1);
    return TPU_OK;
}

static void dst_fail_cb(void *user, const char *msg)
{
    dst_sys *s = user;
    dst_net_fail(s->d->net, "%s", msg);
}

static void dst_free_cb(void *user) { dst_sys_free(user); }

tpu_status dst_sys_new(tpu_ctx *ctx, tpu_dist *d, int N, const int *owner, dst_sys **out)
{
    *out = NULL;
    dst_sys *s = ut_calloc(1, sizeof *s);
    if (!s || !(s->owner = ut_malloc((size_t)N * sizeof *s->owner))) {
        ut_free(s);
        return ut_nomem(ctx);
    }
    memcpy(s->owner, owner, (size_t)N * sizeof *owner);
    s->d = d;
    s->N = N;
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)N;
    for (int g = 0; g < N; g++) h = (h ^ (uint64_t)(owner[g] + 1)) * 1099511628211ULL;
    s->sys_key = h;
    s->remote = (rt_remote){s, dst_run_begin, dst_exchange, dst_fail_cb, dst_free_cb};
    *out = s;
    return TPU_OK;
}

void dst_sys_free(dst_sys *s)
{
    if (!s) return;
    ut_free(s->owner);
    ut_free(s);
}
