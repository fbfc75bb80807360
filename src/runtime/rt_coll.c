/* rt_coll.c — collectives between the devices of a system: the rendezvous of one collective execution and
 * the collectives themselves (docs/runtime.md).
 *
 * Rendezvous. The executor calls rt_collective for a collective instruction; the devices of its group meet
 * in a slot keyed by (instruction, execution number on each device, first member of the group): the same
 * instruction runs many times inside a while loop, and every device counts its own executions, so the k-th
 * execution on one device meets the k-th on the others. Each member publishes its operands and waits until
 * all have arrived; then each computes its own result reading the others' operands (never their reference
 * counts), and a closing barrier keeps every operand alive until all have read it. All waiting is under the
 * system's one mutex. A member that waits gives up with an error when any device failed (sys->abort), when a
 * member of its group finished its program without arriving, or when every running device is waiting for
 * others (a deadlock: devices took different paths) — so a run never hangs.
 *
 * Numerics (TPU): all-reduce is a ring reduce-scatter followed by an all-gather. The data of each operand
 * (row-major) is cut into n chunks of ceil(count/n) elements; chunk c is owned by member c and its partial
 * sum travels the ring in group order starting at the member after the owner, so element e of chunk c is
 *     acc = x[c+1]; acc = f(x[c+2], acc); ... ; acc = f(x[c], acc)          (indices mod n)
 * with every step rounded to the element type (bf16 partial sums are bf16 on the wire: each hop computes in
 * f32 and rounds, subnormals flushed). Member c computes chunk c once and every member copies it, so all
 * devices hold bit-identical results. reduce-scatter uses the same order for the block it keeps (its own
 * block: the ring ends at the owner). Integer sums wrap; max/min and other reducers follow the reducer
 * computation literally. */
#include "runtime/runtime.h"
#include "compile/compile.h"
#include "timing/model.h"
#include "util/fp.h"

#include <string.h>

struct rt_slot {
    rt_slot            *next;
    int64_t             instr, exec;  /* key: global instruction index, execution number, */
    int                 leader;       /* and the group's first device */
    int                 n;            /* members */
    int                 nlocal;       /* of which this process runs (the others are in other processes) */
    int                *lpos;         /* group ranks of the local members, in group order */
    int                 nops;
    int                 exchanging;   /* a local member is exchanging operands with the other processes */
    int                 all_local;    /* every local member has arrived (the waiting ones are not blocked) */
    exe_value        ***rops;         /* per member elsewhere: its operands as received (owned by the slot) */
    int                 arrived, refs, full, bad;
    int                 count;        /* barrier: members arrived at the current one */
    uint64_t            gen;          /* barrier generation */
    int                *members;      /* global device ids, group order */
    exe_value *const  **ops;          /* per member: its operands */
    tpu_tensor       ***res;          /* per member: its results (all-reduce shares chunks through them) */
};

int rt_kind(hlo_op op)
{
    switch (op) {
    case HLO_ALL_REDUCE: case HLO_ALL_REDUCE_START: return RT_K_ALL_REDUCE;
    case HLO_ALL_GATHER: case HLO_ALL_GATHER_START: return RT_K_ALL_GATHER;
    case HLO_REDUCE_SCATTER: return RT_K_REDUCE_SCATTER;
    case HLO_ALL_TO_ALL: return RT_K_ALL_TO_ALL;
    case HLO_COLLECTIVE_PERMUTE: case HLO_COLLECTIVE_PERMUTE_START: return RT_K_PERMUTE;
    case HLO_COLLECTIVE_BROADCAST: return RT_K_BROADCAST;
    default: return -1;
    }
}

static void rt_slot_free(rt_slot *s)
{
    if (!s) return;
    for (int i = 0; s->rops && i < s->n; i++) {
        for (int j = 0; s->rops[i] && j < s->nops; j++) exe_value_unref(s->rops[i][j]);
        ut_free(s->rops[i]);
    }
    ut_free(s->rops);
    ut_free(s->lpos);
    ut_free(s->members);
    ut_free(s->ops);
    ut_free(s->res);
    ut_free(s);
}

void rt_slots_free(rt_system *sys)
{
    while (sys->slots) {
        rt_slot *s = sys->slots;
        sys->slots = s->next;
        rt_slot_free(s);
    }
}

static void rt_slot_unref_locked(rt_system *sys, rt_slot *s)
{
    if (--s->refs > 0) return;
    for (rt_slot **p = &sys->slots; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
        }
    rt_slot_free(s);
}

/* The error a device returns when it stops because another one failed. Mutex held. */
static tpu_status rt_released(rt_system *sys, rt_dev *d, const hlo_instr *in)
{
    d->released = 1;
    return ut_err(d->ctx, sys->fail_st ? sys->fail_st : TPU_ERR_INVALID,
                  "stopped in %s '%s': device %d failed", hlo_op_name((hlo_op)in->op), in->name, sys->fail_dev);
}

static void rt_deadlock_locked(rt_system *sys, rt_dev *d)
{
    ut_buf b;
    ut_buf_init(&b);
    ut_buf_puts(&b, "deadlock: every running device waits in a collective the others never reach (the devices took "
                    "different paths through the program):");
    int shown = 0;
    for (int i = 0; i < sys->n; i++) {
        const rt_dev *o = &sys->devs[i];
        if (o->finished || !o->wait_in) continue;
        if (shown++ == 8) {
            ut_buf_puts(&b, " ...");
            break;
        }
        ut_buf_printf(&b, "%s device %d in %s '%s' (execution %lld)", shown > 1 ? ";" : "", o->id,
                      hlo_op_name((hlo_op)o->wait_in->op), o->wait_in->name, (long long)o->wait_exec + 1);
    }
    rt_fail_locked(sys, d->id, TPU_ERR_INVALID, "%s", b.data ? b.data : "deadlock");
    ut_buf_free(&b);
}

/* A new slot for this execution of a group (members in group order). NULL on no memory. */
static rt_slot *rt_slot_new(rt_system *sys, int64_t gidx, int64_t exec, const int *members, int n, int nops)
{
    rt_slot *s = ut_calloc(1, sizeof *s);
    if (s) {
        s->members = ut_malloc((size_t)n * sizeof *s->members);
        s->ops = ut_calloc((size_t)n, sizeof *s->ops);
        s->res = ut_calloc((size_t)n, sizeof *s->res);
        s->lpos = ut_malloc((size_t)n * sizeof *s->lpos);
    }
    if (!s || !s->members || !s->ops || !s->res || !s->lpos) {
        rt_slot_free(s);
        return NULL;
    }
    s->instr = gidx;
    s->exec = exec;
    s->leader = members[0];
    s->n = n;
    s->nops = nops;
    memcpy(s->members, members, (size_t)n * sizeof *members);
    for (int i = 0; i < n; i++)
        if (rt_local(sys, members[i])) s->lpos[s->nlocal++] = i;
    s->next = sys->slots;
    sys->slots = s;
    return s;
}

/* The last local member has arrived at a slot with members in other processes: hands the local operands to
 * the transport and takes the others'. Mutex held; released during the exchange. */
static tpu_status rt_exchange_locked(rt_system *sys, rt_dev *d, const hlo_instr *in, rt_slot *s)
{
    if (!(s->rops = ut_calloc((size_t)s->n, sizeof *s->rops))) return ut_nomem(d->ctx);
    rt_xfer x = {{sys->run_key, (uint64_t)s->instr, (uint64_t)s->exec, (uint64_t)s->leader}, in, s->n, s->members, s->ops};
    s->exchanging = 1;
    pthread_mutex_unlock(&sys->mu);
    tpu_status st = sys->remote->exchange(sys->remote->user, d->ctx, &x, s->rops);
    pthread_mutex_lock(&sys->mu);
    s->exchanging = 0;
    pthread_cond_broadcast(&sys->cv);
    for (int i = 0; !st && i < s->n; i++)
        if (!s->ops[i]) {
            if (!s->rops[i]) st = ut_err(d->ctx, TPU_ERR_INTERNAL, "the transport left member %d of the group without operands", i);
            else s->ops[i] = s->rops[i];
        }
    return st;
}

/* Joins (or opens) the slot of this execution and waits until every member has arrived. Mutex held. */
static tpu_status rt_join_locked(rt_system *sys, rt_dev *d, const hlo_instr *in, int64_t gidx, int64_t exec,
                                 const int *members, int n, int rank, exe_value *const *ops, rt_slot **out)
{
    *out = NULL;
    if (sys->abort) return rt_released(sys, d, in);
    rt_slot *s = sys->slots;
    while (s && !(s->instr == gidx && s->exec == exec && s->leader == members[0])) s = s->next;
    if (!s) {
        if (!(s = rt_slot_new(sys, gidx, exec, members, n, in->nops))) return ut_nomem(d->ctx);
    } else if (s->n != n || memcmp(s->members, members, (size_t)n * sizeof *members) || s->ops[rank]) {
        return ut_err(d->ctx, TPU_ERR_INTERNAL, "%s '%s': devices disagree about the group of execution %lld",
                      hlo_op_name((hlo_op)in->op), in->name, (long long)exec + 1);
    }
    s->ops[rank] = ops;
    s->arrived++;
    s->refs++;
    if (s->arrived == s->nlocal) {
        sys->nblocked -= s->nlocal - 1;   /* the members waiting for this slot are no longer blocked */
        s->all_local = 1;
        tpu_status st = s->nlocal < n ? rt_exchange_locked(sys, d, in, s) : TPU_OK;
        if (st) {
            rt_fail_locked(sys, d->id, st, "%s", tpu_errmsg(d->ctx));
            d->released = 1;   /* recorded above: its own return does not record it again */
            s->ops[rank] = NULL;
            s->arrived--;
            rt_slot_unref_locked(sys, s);
            return st;
        }
        s->full = 1;
        pthread_cond_broadcast(&sys->cv);
        *out = s;
        return TPU_OK;
    }
    sys->nblocked++;
    d->wait_in = in;
    d->wait_exec = exec;
    while (!s->full) {
        if (!sys->abort) {
            for (int i = 0; i < n && !sys->abort; i++) {
                const rt_dev *o = rt_local(sys, members[i]);
                if (o && !s->ops[i] && o->finished)
                    rt_fail_locked(sys, d->id, TPU_ERR_INVALID,
                                   "device %d waits in %s '%s' (execution %lld) for device %d, which %s without "
                                   "reaching it (the devices took different paths through the program)",
                                   d->id, hlo_op_name((hlo_op)in->op), in->name, (long long)exec + 1, o->id,
                                   o->st ? "failed" : "finished its program");
            }
            if (!sys->abort && sys->nblocked == sys->nlive) rt_deadlock_locked(sys, d);
        }
        /* a member exchanging with the other processes is reading our operands: wait for it to finish */
        if (sys->abort && !s->exchanging) {
            s->ops[rank] = NULL;
            s->arrived--;
            if (!s->all_local) sys->nblocked--;
            d->wait_in = NULL;
            rt_slot_unref_locked(sys, s);
            return rt_released(sys, d, in);
        }
        pthread_cond_wait(&sys->cv, &sys->mu);
    }
    d->wait_in = NULL;
    *out = s;
    return TPU_OK;
}

/* Barrier over the slot's members; ok == 0 marks the slot bad. Returns 1 if no member marked it bad. */
static int rt_sync(rt_system *sys, rt_slot *s, int ok)
{
    pthread_mutex_lock(&sys->mu);
    if (!ok) s->bad = 1;
    uint64_t gen = s->gen;
    if (++s->count == s->nlocal) {
        s->count = 0;
        s->gen++;
        pthread_cond_broadcast(&sys->cv);
    } else {
        while (s->gen == gen) pthread_cond_wait(&sys->cv, &sys->mu);
    }
    int good = !s->bad;
    pthread_mutex_unlock(&sys->mu);
    return good;
}

static void rt_leave(rt_system *sys, rt_slot *s)
{
    pthread_mutex_lock(&sys->mu);
    rt_slot_unref_locked(sys, s);
    pthread_mutex_unlock(&sys->mu);
}

/* ---- helpers ---- */

/* Product of dims before and after d. */
static void rt_around(const tpu_tensor *t, int d, int64_t *outer, int64_t *inner)
{
    *outer = *inner = 1;
    for (int i = 0; i < d; i++) *outer *= t->dims[i];
    for (int i = d + 1; i < t->rank; i++) *inner *= t->dims[i];
}

/* Every member's operand j is an array of the same type and shape as ours. */
static tpu_status rt_check_same(exe_state *S, const hlo_instr *in, const rt_slot *s, int rank, int j)
{
    const tpu_tensor *a = s->ops[rank][j]->t;
    if (!a) return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "operand %d is a tuple; collectives take arrays", j);
    for (int k = 0; k < s->n; k++) {
        const tpu_tensor *b = s->ops[k][j]->t;
        int same = b && b->dtype == a->dtype && b->rank == a->rank;
        for (int i = 0; same && i < a->rank; i++) same = a->dims[i] == b->dims[i];
        if (!same) {
            char x[96], y[96] = "a tuple";
            tpu_tensor_shape_str(a, x, sizeof x);
            if (b) tpu_tensor_shape_str(b, y, sizeof y);
            return exe_fail(S, in, TPU_ERR_SHAPE, "operand %d is %s on device %d but %s on device %d", j, x,
                            s->members[rank], y, s->members[k]);
        }
    }
    return TPU_OK;
}

/* The one dimension of dimensions={d} (all-gather, reduce-scatter, all-to-all), checked against rank. */
static tpu_status rt_dim(exe_state *S, const hlo_instr *in, const tpu_tensor *t, int *d)
{
    const int64_t *v;
    int nv = hlo_attr_ints(in, HK_DIMENSIONS, &v);
    int64_t x = nv == 1 ? v[0] : hlo_attr_int(in, HK_SPLIT_DIMENSION, -1);
    if (nv > 1) return exe_fail(S, in, TPU_ERR_SHAPE, "needs one dimension in dimensions={...}, got %d", nv);
    if (x < 0 || x >= t->rank)
        return exe_fail(S, in, TPU_ERR_SHAPE, "dimension %lld is out of range for a rank-%d operand", (long long)x, t->rank);
    *d = (int)x;
    return TPU_OK;
}

/* Wraps results: one array (n == 1 and !tuple), or a tuple of them. Takes the tensors (freed on failure). */
static tpu_status rt_wrap(exe_state *S, tpu_tensor **ts, int n, int tuple, exe_value **out)
{
    *out = NULL;
    exe_value *small[16], **vs = n <= 16 ? small : ut_calloc((size_t)n, sizeof *vs);
    if (!vs) {
        for (int i = 0; i < n; i++) tpu_tensor_free(ts[i]);
        return ut_nomem(S->ctx);
    }
    for (int i = 0; i < n; i++) {
        if (!(vs[i] = exe_value_array(ts[i]))) {   /* exe_value_array freed ts[i] */
            for (int k = i + 1; k < n; k++) tpu_tensor_free(ts[k]);
            for (int k = 0; k < i; k++) exe_value_unref(vs[k]);
            if (vs != small) ut_free(vs);
            return ut_nomem(S->ctx);
        }
    }
    *out = !tuple && n == 1 ? vs[0] : exe_value_tuple(vs, n);   /* a failed tuple drops the elements */
    if (vs != small) ut_free(vs);
    return *out ? TPU_OK : ut_nomem(S->ctx);
}

/* ---- reduction in ring order ---- */

typedef struct rt_red {
    exe_state           *S;
    const exe_scalar_fn *fn;
    hlo_op               binop;
    tpu_dtype            dt;
} rt_red;

static tpu_status rt_red_init(exe_state *S, const hlo_instr *in, tpu_dtype dt, rt_red *r)
{
    if (in->ncalled < 1) return exe_fail(S, in, TPU_ERR_SHAPE, "needs to_apply=");
    tpu_status st = exe_scalar_fn_get(S, in->called[0], &r->fn);
    if (st) return st;
    if (exe_scalar_fn_nparams(r->fn) != 2 || exe_scalar_fn_nresults(r->fn) != 1)
        return exe_fail(S, in, TPU_ERR_SHAPE, "to_apply must take two scalars and return one");
    if (exe_scalar_fn_param_dtype(r->fn, 0) != dt || exe_scalar_fn_param_dtype(r->fn, 1) != dt)
        return exe_fail(S, in, TPU_ERR_SHAPE, "to_apply takes %s, the operand is %s",
                        tpu_dtype_name(exe_scalar_fn_param_dtype(r->fn, 0)), tpu_dtype_name(dt));
    r->S = S;
    r->binop = exe_scalar_fn_binop(r->fn);
    r->dt = dt;
    return TPU_OK;
}

/* dst[i] = the ring-order reduction of src[m][i] over m = first, first+1, ..., first+n-1 (mod n):
 * acc = src[first]; acc = f(src[next], acc) ... each step rounded to the element type. Runs on the device
 * thread, where exe_run has turned on flush-to-zero / denormals-are-zero like the TPU's vector unit. */
static void rt_reduce(const rt_red *r, void *dst, const void *const *src, int n, int first, int64_t len)
{
    size_t es = tpu_dtype_size(r->dt);
    if (len <= 0) return;
    memcpy(dst, src[first], (size_t)len * es);
    for (int k = 1; k < n; k++) {
        const void *x = src[(first + k) % n];
        if (r->binop == HLO_ADD && r->dt == TPU_F32) {
            float *a = dst;
            const float *b = x;
            for (int64_t i = 0; i < len; i++) a[i] = b[i] + a[i];
        } else if (r->binop == HLO_ADD && r->dt == TPU_BF16) {
            uint16_t *a = dst;
            const uint16_t *b = x;
            for (int64_t i = 0; i < len; i++)
                a[i] = fp_f32_to_bf16_ftz(fp_bf16_to_f32_inline(b[i]) + fp_bf16_to_f32_inline(a[i]));
        } else if (r->binop == HLO_ADD && (r->dt == TPU_S32 || r->dt == TPU_U32)) {
            uint32_t *a = dst;
            const uint32_t *b = x;
            for (int64_t i = 0; i < len; i++) a[i] = b[i] + a[i];
        } else {
            for (int64_t i = 0; i < len; i++) {
                exe_scalar args[2] = {exe_scalar_load(r->dt, x, i), exe_scalar_load(r->dt, dst, i)}, res;
                exe_scalar_fn_eval(r->fn, args, &res);
                exe_scalar_store(r->S, r->dt, dst, i, res);
            }
        }
    }
}

/* ---- the collectives ---- */

/* Member `rank` reduces the chunks c with c % nlocal == its place among the local members (every chunk in one
 * process: chunk c on member c), each over all members in ring order; then every local member copies the
 * chunks the others reduced. Who reduces a chunk does not change its bits: the order is the ring's. */
static tpu_status rt_all_reduce(rt_system *sys, exe_state *S, const hlo_instr *in, rt_slot *s, int rank,
                                exe_value **out)
{
    rt_dev *d = rt_local(sys, s->members[rank]);
    int nops = in->nops, n = s->n, me = 0;
    while (s->lpos[me] != rank) me++;
    tpu_tensor **res = ut_calloc((size_t)nops, sizeof *res);
    const void *small[64], **src = n <= 64 ? small : ut_malloc((size_t)n * sizeof *src);
    tpu_status st = res && src ? TPU_OK : ut_nomem(S->ctx);
    for (int j = 0; !st && j < nops; j++) {
        const tpu_tensor *a = s->ops[rank][j]->t;
        rt_red red;
        st = rt_check_same(S, in, s, rank, j);
        if (!st) st = rt_red_init(S, in, a->dtype, &red);
        if (!st && !(res[j] = ten_alloc_uninit(a->dtype, a->rank, a->dims))) st = ut_nomem(S->ctx);
        if (st) break;
        /* chunk c: the ring's partial sum starts at member c+1 and ends at member c */
        int64_t cs = (a->count + n - 1) / n;
        size_t es = tpu_dtype_size(a->dtype);
        for (int c = me; c < n; c += s->nlocal) {
            int64_t lo = UT_MIN(a->count, cs * c), hi = UT_MIN(a->count, lo + cs);
            for (int k = 0; k < n; k++) src[k] = (const char *)s->ops[k][j]->t->data + (size_t)lo * es;
            rt_reduce(&red, (char *)res[j]->data + (size_t)lo * es, src, n, (c + 1) % n, hi - lo);
        }
    }
    if (src != small) ut_free(src);
    s->res[rank] = res;
    if (rt_sync(sys, s, st == TPU_OK)) {
        /* every chunk is done: copy those the other local members reduced (the all-gather half of the ring) */
        for (int j = 0; j < nops; j++) {
            tpu_tensor *t = res[j];
            int64_t cs = (t->count + n - 1) / n;
            size_t es = tpu_dtype_size(t->dtype);
            for (int c = 0; c < n; c++) {
                int by = s->lpos[c % s->nlocal];
                int64_t lo = UT_MIN(t->count, cs * c), hi = UT_MIN(t->count, lo + cs);
                if (by != rank && hi > lo)
                    memcpy((char *)t->data + (size_t)lo * es, (const char *)s->res[by][j]->data + (size_t)lo * es,
                           (size_t)(hi - lo) * es);
            }
        }
        rt_sync(sys, s, 1);   /* nobody reads our chunks any more */
    } else if (!st) {
        pthread_mutex_lock(&sys->mu);
        d->released = 1;
        pthread_mutex_unlock(&sys->mu);
        st = exe_fail(S, in, TPU_ERR_INVALID, "another device of the group failed in this collective");
    }
    if (st) {
        for (int j = 0; res && j < nops; j++) tpu_tensor_free(res[j]);
        ut_free(res);
        return st;
    }
    st = rt_wrap(S, res, nops, 0, out);
    ut_free(res);
    return st;
}

static tpu_status rt_reduce_scatter(exe_state *S, const hlo_instr *in, rt_slot *s, int rank, tpu_tensor **res)
{
    int n = s->n;
    for (int j = 0; j < in->nops; j++) {
        const tpu_tensor *a = s->ops[rank][j]->t;
        rt_red red;
        int d;
        tpu_status st = rt_check_same(S, in, s, rank, j);
        if (!st) st = rt_dim(S, in, a, &d);
        if (!st) st = rt_red_init(S, in, a->dtype, &red);
        if (st) return st;
        if (a->dims[d] % n)
            return exe_fail(S, in, TPU_ERR_SHAPE, "dimension %d (size %lld) does not split into %d equal blocks", d,
                            (long long)a->dims[d], n);
        int64_t dims[TPU_MAX_RANK], outer, inner, blk = a->dims[d] / n;
        memcpy(dims, a->dims, sizeof dims);
        dims[d] = blk;
        if (!(res[j] = ten_alloc_uninit(a->dtype, a->rank, dims))) return ut_nomem(S->ctx);
        rt_around(a, d, &outer, &inner);
        size_t es = tpu_dtype_size(a->dtype);
        const void *small[64], **src = n <= 64 ? small : ut_malloc((size_t)n * sizeof *src);
        if (!src) return ut_nomem(S->ctx);
        for (int64_t o = 0; o < outer; o++) {
            for (int k = 0; k < n; k++)
                src[k] = (const char *)s->ops[k][j]->t->data + (size_t)((o * a->dims[d] + rank * blk) * inner) * es;
            rt_reduce(&red, (char *)res[j]->data + (size_t)(o * blk * inner) * es, src, n, (rank + 1) % n, blk * inner);
        }
        if (src != small) ut_free(src);
    }
    return TPU_OK;
}

static tpu_status rt_all_gather(exe_state *S, const hlo_instr *in, rt_slot *s, int rank, tpu_tensor **res)
{
    int n = s->n;
    for (int j = 0; j < in->nops; j++) {
        const tpu_tensor *a = s->ops[rank][j]->t;
        int d;
        tpu_status st = rt_check_same(S, in, s, rank, j);
        if (!st) st = rt_dim(S, in, a, &d);
        if (st) return st;
        int64_t dims[TPU_MAX_RANK], outer, inner;
        memcpy(dims, a->dims, sizeof dims);
        dims[d] *= n;
        if (!(res[j] = ten_alloc_uninit(a->dtype, a->rank, dims))) return ut_nomem(S->ctx);
        rt_around(a, d, &outer, &inner);
        size_t run = (size_t)(a->dims[d] * inner) * tpu_dtype_size(a->dtype);
        char *dst = res[j]->data;
        for (int64_t o = 0; o < outer; o++)
            for (int k = 0; k < n; k++, dst += run)
                if (run) memcpy(dst, (const char *)s->ops[k][j]->t->data + (size_t)o * run, run);
    }
    return TPU_OK;
}

static tpu_status rt_all_to_all(exe_state *S, const hlo_instr *in, rt_slot *s, int rank, tpu_tensor **res)
{
    int n = s->n;
    const int64_t *dv;
    int split = hlo_attr_ints(in, HK_DIMENSIONS, &dv) > 0 || hlo_attr_find(in, HK_SPLIT_DIMENSION);
    if (!split) {
        /* tuple form: operand k goes to member k; result k comes from member k */
        if (in->nops != n)
            return exe_fail(S, in, TPU_ERR_SHAPE, "the tuple form needs one operand per device of the group (%d), got %d",
                            n, in->nops);
        for (int k = 0; k < n; k++) {
            const tpu_tensor *b = s->ops[k][rank]->t;
            if (!b) return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "operand %d is a tuple; collectives take arrays", rank);
            if (!(res[k] = ten_clone(b))) return ut_nomem(S->ctx);
        }
        return TPU_OK;
    }
    for (int j = 0; j < in->nops; j++) {
        const tpu_tensor *a = s->ops[rank][j]->t;
        int d;
        tpu_status st = rt_check_same(S, in, s, rank, j);
        if (!st) st = rt_dim(S, in, a, &d);
        if (st) return st;
        if (a->dims[d] % n)
            return exe_fail(S, in, TPU_ERR_SHAPE, "dimension %d (size %lld) does not split into %d equal blocks", d,
                            (long long)a->dims[d], n);
        int64_t outer, inner, blk = a->dims[d] / n;
        if (!(res[j] = ten_alloc_uninit(a->dtype, a->rank, a->dims))) return ut_nomem(S->ctx);
        rt_around(a, d, &outer, &inner);
        size_t es = tpu_dtype_size(a->dtype), run = (size_t)(blk * inner) * es;
        for (int64_t o = 0; o < outer; o++)
            for (int k = 0; k < n; k++)
                if (run)
                    memcpy((char *)res[j]->data + (size_t)((o * a->dims[d] + k * blk) * inner) * es,
                           (const char *)s->ops[k][j]->t->data + (size_t)((o * a->dims[d] + rank * blk) * inner) * es, run);
    }
    return TPU_OK;
}

static tpu_status rt_permute(exe_state *S, const hlo_instr *in, rt_slot *s, int rank, tpu_tensor **res)
{
    const hlo_attr *a = hlo_attr_find(in, HK_SOURCE_TARGET_PAIRS);
    int src = -1;
    uint8_t small[256] = {0}, *targeted = s->n <= 256 ? small : ut_calloc((size_t)s->n, 1);
    if (!targeted) return ut_nomem(S->ctx);
    tpu_status st = TPU_OK;
    for (int i = 0; a && a->kind == HA_INTSS && i < a->v.intss.n && !st; i++) {
        const int64_t *p = a->v.intss.v[i];
        if (a->v.intss.len[i] != 2) st = exe_fail(S, in, TPU_ERR_SHAPE, "source_target_pairs entry %d is not a pair", i);
        else if (p[0] < 0 || p[0] >= s->n || p[1] < 0 || p[1] >= s->n)
            st = exe_fail(S, in, TPU_ERR_INVALID, "source_target_pairs name {%lld,%lld}; the %s ids are 0..%d",
                          (long long)p[0], (long long)p[1], rt_mode_name(rt_group_mode(in)), s->n - 1);
        else if (targeted[p[1]]) st = exe_fail(S, in, TPU_ERR_INVALID, "device id %lld is the target of two pairs", (long long)p[1]);
        else {
            targeted[p[1]] = 1;
            if (p[1] == rank) src = (int)p[0];
        }
    }
    if (targeted != small) ut_free(targeted);
    for (int j = 0; !st && j < in->nops; j++) {
        const tpu_tensor *x = s->ops[rank][j]->t;
        if (!x || (src >= 0 && !s->ops[src][j]->t)) {
            st = exe_fail(S, in, TPU_ERR_UNSUPPORTED,
                          "the in-place form (input/output buffers with start indices) is not supported");
            break;
        }
        res[j] = src >= 0 ? ten_clone(s->ops[src][j]->t) : ten_alloc(x->dtype, x->rank, x->dims);
        if (!res[j]) st = ut_nomem(S->ctx);
    }
    return st;
}

static tpu_status rt_broadcast(exe_state *S, const hlo_instr *in, rt_slot *s, int rank, tpu_tensor **res)
{
    for (int j = 0; j < in->nops; j++) {
        tpu_status st = rt_check_same(S, in, s, rank, j);
        if (st) return st;
        if (!(res[j] = ten_clone(s->ops[0][j]->t))) return ut_nomem(S->ctx);   /* the group's first device sends */
    }
    return TPU_OK;
}

/* Padded bytes of every array in a shape (tuples summed). */
static double rt_shape_bytes(const chp_chip *chip, const hlo_shape *s)
{
    if (hlo_shape_is_tuple(s)) {
        double b = 0;
        for (int i = 0; i < s->ntuple; i++) b += rt_shape_bytes(chip, &s->tuple[i]);
        return b;
    }
    return hlo_shape_is_array(s) ? (double)cmp_padded_bytes(chip, s) : 0;
}

/* Counts the collective and its modelled ICI time (the same cost the timing model gives the op). */
static void rt_account(rt_system *sys, rt_dev *d, const hlo_instr *in, int kind, const int *members, int n)
{
    const chp_chip *chip = &sys->slice.chip;
    double bytes = 0;
    if (kind == RT_K_ALL_GATHER) {
        const hlo_shape *s = &in->shape;
        if (in->op == HLO_ALL_GATHER_START && hlo_shape_is_tuple(s) && s->ntuple >= 2) s = &s->tuple[s->ntuple - 1];
        bytes = rt_shape_bytes(chip, s);
    } else {
        for (int k = 0; k < in->nops; k++) bytes += rt_shape_bytes(chip, &in->ops[k]->shape);
    }
    int64_t moved = 0;
    double t = n <= sys->slice.devices ? tim_collective_group_s(&sys->slice, (hlo_op)in->op, members, n, bytes, &moved)
                                       : tim_collective_s(&sys->slice, (hlo_op)in->op, n, bytes, &moved);
    d->ncoll++;
    d->by_kind[kind]++;
    d->ici_bytes += moved;
    d->ici_s += t;
}

tpu_status rt_collective(void *user, exe_state *S, const hlo_instr *in, exe_value *const *ops, exe_value **out)
{
    rt_system *sys = user;
    *out = NULL;
    int kind = rt_kind((hlo_op)in->op);
    if (kind < 0) return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "not a collective the runtime knows");
    int64_t dev64 = S->replica_id * sys->P + S->partition_id;
    if (S->replica_id < 0 || S->replica_id >= sys->R || S->partition_id < 0 || S->partition_id >= sys->P)
        return exe_fail(S, in, TPU_ERR_INTERNAL, "device (replica %lld, partition %lld) is not in the system",
                        (long long)S->replica_id, (long long)S->partition_id);
    rt_dev *d = rt_local(sys, (int)dev64);
    if (!d) return exe_fail(S, in, TPU_ERR_INTERNAL, "device %lld does not run in this process", (long long)dev64);
    int small[64], *members = sys->N <= 64 ? small : ut_malloc((size_t)sys->N * sizeof *members);
    if (!members) return ut_nomem(S->ctx);
    int n = 0, rank = -1;
    tpu_status st = rt_group_members(S->ctx, S->m, in, sys->R, sys->P, d->id, members, &n, &rank);
    if (st) {
        if (members != small) ut_free(members);
        return st;
    }
    int64_t gidx = sys->comp_base[in->parent->id] + in->id;
    int64_t exec = d->exec_count[gidx]++;
    rt_account(sys, d, in, kind, members, n);
    rt_slot *s = NULL;
    pthread_mutex_lock(&sys->mu);
    st = rt_join_locked(sys, d, in, gidx, exec, members, n, rank, ops, &s);
    pthread_mutex_unlock(&sys->mu);
    if (members != small) ut_free(members);
    if (st) return st;
    if (kind == RT_K_ALL_REDUCE) {
        st = rt_all_reduce(sys, S, in, s, rank, out);
        rt_leave(sys, s);
        return st;
    }
    int nres = kind == RT_K_ALL_TO_ALL && in->nops == n && !hlo_attr_find(in, HK_DIMENSIONS) &&
               !hlo_attr_find(in, HK_SPLIT_DIMENSION) ? n : in->nops;
    tpu_tensor **res = ut_calloc((size_t)(nres ? nres : 1), sizeof *res);
    if (!res) st = ut_nomem(S->ctx);
    else if (kind == RT_K_REDUCE_SCATTER) st = rt_reduce_scatter(S, in, s, rank, res);
    else if (kind == RT_K_ALL_GATHER) st = rt_all_gather(S, in, s, rank, res);
    else if (kind == RT_K_ALL_TO_ALL) st = rt_all_to_all(S, in, s, rank, res);
    else if (kind == RT_K_PERMUTE) st = rt_permute(S, in, s, rank, res);
    else st = rt_broadcast(S, in, s, rank, res);
    rt_sync(sys, s, 1);   /* every member has read every operand it needs */
    rt_leave(sys, s);
    if (st) {
        for (int j = 0; res && j < nres; j++) tpu_tensor_free(res[j]);
        ut_free(res);
        return st;
    }
    exe_value *v = NULL;
    st = rt_wrap(S, res, nres, kind == RT_K_ALL_TO_ALL && nres > 1, &v);
    ut_free(res);
    if (st) return st;
    if (in->op == HLO_ALL_GATHER_START) {
        /* (operand(s), result(s)): all-gather-done takes the last element */
        exe_value *e[2];
        if (in->nops == 1) {
            e[0] = exe_value_ref(ops[0]);
        } else {
            for (int i = 0; i < in->nops; i++) exe_value_ref(ops[i]);
            e[0] = exe_value_tuple((exe_value **)ops, in->nops);
        }
        if (!e[0]) {
            exe_value_unref(v);
            return ut_nomem(S->ctx);
        }
        e[1] = v;
        if (!(*out = exe_value_tuple(e, 2))) return ut_nomem(S->ctx);
        return TPU_OK;
    }
    *out = v;
    return TPU_OK;
}
