/* rt_system.c — the system of devices: one thread per device, kept between runs; a run hands every device
 * its inputs, runs the module with the executor (exe_run) on all of them at once with the collectives of
 * rt_coll.c, and gathers outputs, the first failure and the statistics. The public tpu_system_* API. */
#include "runtime/runtime.h"
#include "verify/verify.h"

#include <ctype.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

struct tpu_system {
    rt_system        s;
    tpu_system_stats last;
};

void rt_fail_locked(rt_system *sys, int dev, tpu_status st, const char *fmt, ...)
{
    if (sys->fail_dev < 0) {
        char msg[2048];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        sys->fail_dev = dev;
        sys->fail_st = st ? st : TPU_ERR_INTERNAL;
        ut_free(sys->fail_msg);
        sys->fail_msg = ut_strdup(msg);
        if (sys->remote) {   /* the other processes stop too (a no-op when the failure came from them) */
            const rt_dev *f = rt_local(sys, dev);
            char full[2300];
            snprintf(full, sizeof full, "device %d (replica %lld, partition %lld): %s", dev,
                     f ? (long long)f->replica : -1LL, f ? (long long)f->partition : -1LL, msg);
            sys->remote->fail(sys->remote->user, full);
        }
    }
    sys->abort = 1;
    pthread_cond_broadcast(&sys->cv);
}

/* ---- one device's run ---- */

static void rt_dev_run(rt_dev *d)
{
    rt_system *sys = d->sys;
    exe_run_cfg cfg = {.replica_id = d->replica, .partition_id = d->partition, .coll = &sys->coll};
    tpu_run_opts o = sys->opts;
    if (sys->n > 1) o.threads = 1;   /* N devices share the host's cores: one thread each, no nested teams */
    o.replica_id = (int)d->replica;
    tpu_status st = exe_run(d->ctx, sys->m, &o, &cfg, d->inputs, d->ninputs, &d->outputs, &d->noutputs);
    pthread_mutex_lock(&sys->mu);
    d->st = st;
    d->finished = 1;
    sys->nlive--;
    if (st && !d->released) rt_fail_locked(sys, d->id, st, "%s", tpu_errmsg(d->ctx));
    pthread_cond_broadcast(&sys->cv);   /* devices waiting for this one learn that it will not come */
    pthread_mutex_unlock(&sys->mu);
}

static void *rt_thread(void *arg)
{
    rt_dev *d = arg;
    rt_system *sys = d->sys;
    omp_set_num_threads(1);   /* this thread's parallel regions (exe_run's FTZ setup) stay on it */
    pthread_mutex_lock(&sys->mu);
    for (;;) {
        while (!sys->quit && d->seen_job == sys->job) pthread_cond_wait(&sys->job_cv, &sys->mu);
        if (sys->quit) break;
        d->seen_job = sys->job;
        pthread_mutex_unlock(&sys->mu);
        rt_dev_run(d);
        pthread_mutex_lock(&sys->mu);
        sys->ndone++;
        pthread_cond_signal(&sys->done_cv);
    }
    pthread_mutex_unlock(&sys->mu);
    return NULL;
}

/* ---- the system ---- */

/* n devices with links of v4 chips: the documented v4 slice of n chips (one device per chip), else a ring. */
static tpu_status rt_default_slice(tpu_ctx *ctx, int n, chp_slice *out)
{
    const chp_chip *v4 = chp_generation_find("v4");
    if (!v4) return ut_err(ctx, TPU_ERR_INTERNAL, "no v4 chip in the chip table");
    if (n > 1 && chp_slice_make(NULL, v4, n, out) == TPU_OK && out->devices == n) return TPU_OK;
    tpu_status st = chp_slice_make(ctx, v4, 1, out);
    if (st || n == 1) return st;
    out->chips = n;
    out->cores = n * out->chip.cores_per_chip;
    out->devices = n;
    out->ndims = 1;
    out->dims[0] = n;
    out->dims[1] = out->dims[2] = 1;
    out->wrap[0] = true;
    snprintf(out->name, sizeof out->name, "%d x v4 (ring)", n);
    return TPU_OK;
}

/* The device count and slice of a spec: "N", "N:CHIP" or a slice name. */
static tpu_status rt_parse_spec(tpu_ctx *ctx, const char *devices, int *n, chp_slice *slice)
{
    if (!devices || !*devices)
        return ut_err(ctx, TPU_ERR_INVALID, "no devices given: a count (\"8\"), a slice (\"v3-8\") or \"N:CHIP\"");
    const char *p = devices;
    while (isdigit((unsigned char)*p)) p++;
    if (p > devices && (*p == 0 || *p == ':')) {
        long v = strtol(devices, NULL, 10);
        if (v < 1 || v > 4096)
            return ut_err(ctx, TPU_ERR_INVALID, "devices \"%s\": the count must be 1..4096", devices);
        *n = (int)v;
        return *p == ':' ? chp_slice_parse(ctx, p + 1, slice) : rt_default_slice(ctx, (int)v, slice);
    }
    tpu_status st = chp_slice_parse(ctx, devices, slice);
    if (st) return st;
    if (slice->devices < 1 || slice->devices > 4096)
        return ut_err(ctx, TPU_ERR_UNSUPPORTED, "%s has %d devices; the runtime runs 1..4096", devices, slice->devices);
    *n = slice->devices;
    return TPU_OK;
}

/* Devices, threads and contexts of a new system whose global devices are N, those of owner `self` local. */
static tpu_status rt_system_init(tpu_ctx *ctx, rt_system *sys, int N, const int *owner, int self)
{
    pthread_mutex_init(&sys->mu, NULL);
    pthread_cond_init(&sys->cv, NULL);
    pthread_cond_init(&sys->job_cv, NULL);
    pthread_cond_init(&sys->done_cv, NULL);
    sys->N = N;
    sys->fail_dev = -1;
    int n = 0;
    for (int g = 0; g < N; g++) n += !owner || owner[g] == self;
    if (n < 1) return ut_err(ctx, TPU_ERR_INVALID, "process %d runs none of the system's %d devices", self, N);
    sys->n = n;
    sys->devs = ut_calloc((size_t)n, sizeof *sys->devs);
    if (!sys->devs) return ut_nomem(ctx);
    if (owner) {
        if (!(sys->lid = ut_malloc((size_t)N * sizeof *sys->lid))) return ut_nomem(ctx);
        for (int g = 0, i = 0; g < N; g++) sys->lid[g] = owner[g] == self ? i++ : -1;
    }
    for (int g = 0, i = 0; g < N; g++) {
        if (owner && owner[g] != self) continue;
        rt_dev *d = &sys->devs[i++];
        d->sys = sys;
        d->id = g;
        if (!(d->ctx = tpu_ctx_new())) return ut_nomem(ctx);
    }
    /* one device of a one-process system runs on the caller's thread; otherwise every device has a thread */
    int threads = n > 1;   /* the executor sets up its tables under pthread_once: device threads may start together */
    for (int i = 0; threads && i < n; i++) {
        rt_dev *d = &sys->devs[i];
        if (pthread_create(&d->thread, NULL, rt_thread, d)) return ut_err(ctx, TPU_ERR_NOMEM, "cannot start the thread of device %d", d->id);
        d->started = 1;
    }
    return TPU_OK;
}

tpu_status rt_system_create(tpu_ctx *ctx, const char *devices, const int *owner, int self, const rt_remote *remote,
                            tpu_system **out)
{
    *out = NULL;
    int N = 0;
    chp_slice slice;
    tpu_status st = rt_parse_spec(ctx, devices, &N, &slice);
    tpu_system *ts = st ? NULL : ut_calloc(1, sizeof *ts);
    if (!st && !ts) st = ut_nomem(ctx);
    if (st) {   /* the system owns the transport from here on, also when it cannot be made */
        if (remote && remote->free) remote->free(remote->user);
        return st;
    }
    ts->s.slice = slice;
    ts->s.remote = remote;
    st = owner || !remote ? rt_system_init(ctx, &ts->s, N, owner, self)
                          : ut_err(ctx, TPU_ERR_INTERNAL, "a transport to other processes without an owner map");
    if (st) {
        tpu_system_free(ts);
        return st;
    }
    *out = ts;
    return TPU_OK;
}

tpu_status tpu_system_new(tpu_ctx *ctx, const char *devices, tpu_system **out)
{
    return rt_system_create(ctx, devices, NULL, 0, NULL, out);
}

void tpu_system_free(tpu_system *ts)
{
    if (!ts) return;
    rt_system *sys = &ts->s;
    pthread_mutex_lock(&sys->mu);
    sys->quit = 1;
    pthread_cond_broadcast(&sys->job_cv);
    pthread_mutex_unlock(&sys->mu);
    for (int i = 0; sys->devs && i < sys->n; i++) {
        if (sys->devs[i].started) pthread_join(sys->devs[i].thread, NULL);
        tpu_ctx_free(sys->devs[i].ctx);
    }
    ut_free(sys->lid);
    if (sys->remote && sys->remote->free) sys->remote->free(sys->remote->user);
    pthread_mutex_destroy(&sys->mu);
    pthread_cond_destroy(&sys->cv);
    pthread_cond_destroy(&sys->job_cv);
    pthread_cond_destroy(&sys->done_cv);
    ut_free(sys->devs);
    ut_free(sys->fail_msg);
    ut_free(ts);
}

int tpu_system_num_devices(const tpu_system *ts) { return ts ? ts->s.N : 0; }
int tpu_system_is_local(const tpu_system *ts, int device) { return ts && rt_local((rt_system *)&ts->s, device) != NULL; }
const char *tpu_system_chip(const tpu_system *ts) { return ts ? ts->s.slice.name : ""; }

tpu_status tpu_system_set_split(tpu_ctx *ctx, tpu_system *ts, int replicas, int partitions)
{
    if (!ts) return ut_err(ctx, TPU_ERR_INVALID, "no system");
    if (replicas == 0 && partitions == 0) {
        ts->s.split_r = ts->s.split_p = 0;
        return TPU_OK;
    }
    if (replicas < 1 || partitions < 1 || (int64_t)replicas * partitions != ts->s.N)
        return ut_err(ctx, TPU_ERR_INVALID, "%d replica%s x %d partition%s is not the system's %d device%s", replicas,
                      replicas == 1 ? "" : "s", partitions, partitions == 1 ? "" : "s", ts->s.N, ts->s.N == 1 ? "" : "s");
    ts->s.split_r = replicas;
    ts->s.split_p = partitions;
    return TPU_OK;
}

int64_t tpu_module_replica_count(const tpu_module *m) { return m ? hlo_module_replica_count(m) : 1; }
int64_t tpu_module_num_partitions(const tpu_module *m) { return m ? hlo_module_num_partitions(m) : 1; }

/* SPMD programs (partition-id, or collectives with a channel_id) run as partitions; others as replicas. */
static int rt_looks_partitioned(const hlo_module *m)
{
    for (int c = 0; c < m->ncomps; c++)
        for (int i = 0; i < m->comps[c]->ninstrs; i++) {
            const hlo_instr *in = m->comps[c]->instrs[i];
            if (in->op == HLO_PARTITION_ID) return 1;
            if (rt_kind((hlo_op)in->op) >= 0 && hlo_attr_find(in, HK_CHANNEL_ID)) return 1;
        }
    return 0;
}

/* The module as the devices see it: when it does not name the system's replica_count and num_partitions,
 * a shallow copy whose header does (the executor reads the group size of empty replica_groups from them).
 * The copy shares everything else with m and must only be freed with rt_view_free. */
static tpu_status rt_view(tpu_ctx *ctx, const hlo_module *m, int R, int P, const hlo_module **out)
{
    *out = m;
    if (hlo_module_replica_count(m) == R && hlo_module_num_partitions(m) == P) return TPU_OK;
    hlo_module *v = ut_malloc(sizeof *v);
    hlo_attr *attrs = ut_calloc((size_t)m->nattrs + 2, sizeof *attrs);
    if (!v || !attrs) {
        ut_free(v);
        ut_free(attrs);
        return ut_nomem(ctx);
    }
    *v = *m;
    v->exec_plans = NULL;   /* the view's own (rt_view_free frees them): it is freed before m */
    /* group sizes, and so collective shapes, depend on the counts: verified again, unless these counts did */
    v->verified = __atomic_load_n(&m->verified_split, __ATOMIC_ACQUIRE) == ((int64_t)R << 32 | P) ? 1 : 0;
    int n = 0;
    for (int i = 0; i < m->nattrs; i++)
        if (m->attrs[i].key != HK_REPLICA_COUNT && m->attrs[i].key != HK_NUM_PARTITIONS) attrs[n++] = m->attrs[i];
    attrs[n].key = HK_REPLICA_COUNT;
    attrs[n].kind = HA_INT;
    attrs[n].name = "replica_count";
    attrs[n++].v.i = R;
    attrs[n].key = HK_NUM_PARTITIONS;
    attrs[n].kind = HA_INT;
    attrs[n].name = "num_partitions";
    attrs[n++].v.i = P;
    v->attrs = attrs;
    v->nattrs = n;
    *out = v;
    return TPU_OK;
}

static void rt_view_free(const hlo_module *view, const hlo_module *m)
{
    if (view == m || !view) return;
    if (view->exec_plans && view->exec_plans_free) view->exec_plans_free(view->exec_plans);
    ut_free(view->attrs);
    ut_free((hlo_module *)view);
}

void tpu_system_outputs_free(tpu_tensor ***outputs, int ndevices, int noutputs)
{
    for (int d = 0; outputs && d < ndevices; d++) {
        tpu_tensors_free(outputs[d], noutputs);
        outputs[d] = NULL;
    }
}

void tpu_system_last_stats(const tpu_system *ts, tpu_system_stats *out)
{
    if (ts) *out = ts->last;
    else memset(out, 0, sizeof *out);
}

/* Copies a device's warnings to the caller's context. */
static void rt_copy_warnings(tpu_ctx *ctx, tpu_ctx *from)
{
    const char *w = tpu_warnings(from);
    while (w && *w) {
        const char *e = strchr(w, '\n');
        size_t len = e ? (size_t)(e - w) : strlen(w);
        if (len) ut_warn(ctx, "%.*s", (int)len, w);
        w += len + (e ? 1 : 0);
    }
    tpu_warnings_clear(from);
}

/* Replicas x partitions of a run of m on N devices. */
static tpu_status rt_split(tpu_ctx *ctx, const rt_system *sys, const tpu_module *m, int *R, int *P)
{
    int N = sys->N;
    int64_t mr = hlo_module_replica_count(m), mp = hlo_module_num_partitions(m);
    if (mr > 1 || mp > 1) {
        if (mr * mp != N)
            return ut_err(ctx, TPU_ERR_INVALID, "'%s' is compiled for %lld device%s (replica_count=%lld, num_partitions=%lld); "
                          "the system has %d", m->name ? m->name : "module", (long long)(mr * mp), mr * mp == 1 ? "" : "s",
                          (long long)mr, (long long)mp, N);
        *R = (int)mr;
        *P = (int)mp;
    } else if (sys->split_r) {
        *R = sys->split_r;
        *P = sys->split_p;
    } else if (rt_looks_partitioned(m)) {
        *R = 1;
        *P = N;
    } else {
        *R = N;
        *P = 1;
    }
    return TPU_OK;
}

/* Every local device's state for a new run; inputs are indexed by global device id. */
static tpu_status rt_prepare_devs(tpu_ctx *ctx, rt_system *sys, int P, tpu_tensor **const *inputs, int ninputs, int64_t total)
{
    for (int i = 0; i < sys->n; i++) {
        rt_dev *dv = &sys->devs[i];
        ut_free(dv->exec_count);
        dv->exec_count = ut_calloc((size_t)(total ? total : 1), sizeof *dv->exec_count);
        if (!dv->exec_count) return ut_nomem(ctx);
        dv->replica = dv->id / P;
        dv->partition = dv->id % P;
        dv->inputs = ninputs ? (inputs[dv->id] ? inputs[dv->id] : inputs[0]) : NULL;
        if (ninputs && !dv->inputs) return ut_err(ctx, TPU_ERR_INVALID, "no inputs for device %d (and none for device 0)", dv->id);
        dv->ninputs = ninputs;
        dv->outputs = NULL;
        dv->noutputs = 0;
        dv->st = TPU_OK;
        dv->finished = dv->released = 0;
        dv->wait_in = NULL;
        dv->ncoll = dv->ici_bytes = 0;
        dv->ici_s = 0;
        memset(dv->by_kind, 0, sizeof dv->by_kind);
        tpu_warnings_clear(dv->ctx);
    }
    return TPU_OK;
}

/* Runs the prepared devices to the end; the first failure (if any) as the caller's error. */
static tpu_status rt_run_devs(tpu_ctx *ctx, rt_system *sys)
{
    int n = sys->n;
    if (n == 1) {
        rt_dev_run(&sys->devs[0]);
    } else {
        pthread_mutex_lock(&sys->mu);
        sys->job++;
        pthread_cond_broadcast(&sys->job_cv);
        while (sys->ndone < n) pthread_cond_wait(&sys->done_cv, &sys->mu);
        pthread_mutex_unlock(&sys->mu);
    }
    rt_copy_warnings(ctx, sys->devs[0].ctx);
    tpu_status st = TPU_OK;
    if (sys->fail_dev >= 0) {
        const rt_dev *f = rt_local(sys, sys->fail_dev);
        st = ut_err(ctx, sys->fail_st, "device %d (replica %lld, partition %lld): %s", sys->fail_dev,
                    f ? (long long)f->replica : -1LL, f ? (long long)f->partition : -1LL,
                    sys->fail_msg ? sys->fail_msg : "failed");
    }
    for (int d = 0; d < n && !st; d++)
        if (sys->devs[d].noutputs != sys->devs[0].noutputs)
            st = ut_err(ctx, TPU_ERR_INTERNAL, "device %d returned %d outputs, device %d %d", sys->devs[d].id,
                        sys->devs[d].noutputs, sys->devs[0].id, sys->devs[0].noutputs);
    return st;
}

/* The statistics of the local device with the most modelled ICI time. */
static void rt_stats(const rt_system *sys, tpu_system_stats *L)
{
    const rt_dev *busy = &sys->devs[0];
    for (int d = 1; d < sys->n; d++)
        if (sys->devs[d].ici_s > busy->ici_s) busy = &sys->devs[d];
    L->collectives = busy->ncoll;
    L->all_reduce = busy->by_kind[RT_K_ALL_REDUCE];
    L->all_gather = busy->by_kind[RT_K_ALL_GATHER];
    L->reduce_scatter = busy->by_kind[RT_K_REDUCE_SCATTER];
    L->all_to_all = busy->by_kind[RT_K_ALL_TO_ALL];
    L->collective_permute = busy->by_kind[RT_K_PERMUTE];
    L->collective_broadcast = busy->by_kind[RT_K_BROADCAST];
    L->ici_bytes = busy->ici_bytes;
    L->ici_s = busy->ici_s;
}

/* A run that fails before its devices start: in a system spread over processes the others would wait for
 * this one's collectives, so they are told. Returns st. */
static tpu_status rt_early_fail(rt_system *sys, tpu_ctx *ctx, tpu_status st)
{
    if (sys->remote) sys->remote->fail(sys->remote->user, tpu_errmsg(ctx));
    return st;
}

tpu_status tpu_system_run(tpu_ctx *ctx, tpu_system *ts, const tpu_module *m, const tpu_run_opts *opts,
                          tpu_tensor **const *inputs, int ninputs, tpu_tensor ***outputs, int *noutputs)
{
    if (noutputs) *noutputs = 0;
    if (!ts || !m || !outputs || !noutputs)
        return ut_err(ctx, TPU_ERR_INVALID, "tpu_system_run needs a system, a module, outputs and noutputs");
    rt_system *sys = &ts->s;
    int n = sys->n;
    for (int d = 0; d < sys->N; d++) outputs[d] = NULL;
    if (ninputs < 0 || (ninputs > 0 && !inputs))
        return ut_err(ctx, TPU_ERR_INVALID, "%d inputs per device but no input arrays", ninputs);
    int R = 1, P = 1;
    tpu_status st = rt_split(ctx, sys, m, &R, &P);
    if (st) return rt_early_fail(sys, ctx, st);
    tpu_system_stats *L = &ts->last;
    memset(L, 0, sizeof *L);
    L->devices = sys->N;
    L->replicas = R;
    L->partitions = P;
    double t0 = ut_now();
    /* the run's state */
    const hlo_module *view = NULL;
    st = rt_view(ctx, m, R, P, &view);
    if (st) return rt_early_fail(sys, ctx, st);
    /* nothing runs that does not verify (with the counts the devices will see) */
    if ((st = ver_require(ctx, view))) {
        rt_view_free(view, m);
        return rt_early_fail(sys, ctx, st);
    }
    if (view != m) __atomic_store_n(&((hlo_module *)m)->verified_split, (int64_t)R << 32 | P, __ATOMIC_RELEASE);
    int64_t total = 0;
    sys->comp_base = ut_calloc((size_t)(m->ncomps ? m->ncomps : 1), sizeof *sys->comp_base);
    for (int c = 0; sys->comp_base && c < m->ncomps; c++) {
        sys->comp_base[c] = total;
        total += m->comps[c]->ninstrs;
    }
    if (!sys->comp_base) st = ut_nomem(ctx);
    if (!st) st = rt_prepare_devs(ctx, sys, P, inputs, ninputs, total);
    if (!st && sys->remote) st = sys->remote->run_begin(sys->remote->user, ctx, m, &sys->run_key);
    if (st) rt_early_fail(sys, ctx, st);
    if (!st) {
        sys->m = view;
        sys->opts = opts ? *opts : tpu_run_opts_default();
        sys->R = R;
        sys->P = P;
        sys->coll.user = sys;
        sys->coll.num_replicas = R;
        sys->coll.num_partitions = P;
        sys->coll.run = rt_collective;
        sys->nlive = n;
        sys->nblocked = 0;
        sys->abort = 0;
        sys->fail_dev = -1;
        sys->fail_st = TPU_OK;
        ut_free(sys->fail_msg);
        sys->fail_msg = NULL;
        sys->ndone = 0;
        st = rt_run_devs(ctx, sys);
        if (!st) rt_stats(sys, L);
    }
    for (int d = 0; d < n; d++) {
        rt_dev *dv = &sys->devs[d];
        if (st) tpu_tensors_free(dv->outputs, dv->noutputs);
        else outputs[dv->id] = dv->outputs;
        dv->outputs = NULL;
        dv->inputs = NULL;
        ut_free(dv->exec_count);
        dv->exec_count = NULL;
    }
    if (!st) *noutputs = sys->devs[0].noutputs;
    rt_slots_free(sys);
    ut_free(sys->comp_base);
    sys->comp_base = NULL;
    sys->m = NULL;
    rt_view_free(view, m);
    L->run_s = ut_now() - t0;
    return st;
}
