/* pjrt_dist.c — the plugin on a slice spread over processes, one per simulated host, as on a pod:
 *
 *     mpirun -np 4 python train.py          # JAX_PLATFORMS=tpusim TPUSIM_SLICE=v3-32
 *
 * Each process sees the slice's devices (jax.devices(): 32) and runs its own (jax.local_devices(): 8, those of
 * its hosts); the collectives between devices of different processes travel over MPI (src/dist/). A process
 * learns that it is one of several from jax.distributed (PJRT_Client_Create's node_id and num_nodes options);
 * the processes must have been started by mpirun, since
 * MPI carries the data, and jax.distributed must be initialized (jaxlib's client of one process cannot hold
 * devices it does not address). jax's process index is node_id; the key-value store of
 * jax.distributed, when given, is used to check that every process simulates the same slice before MPI is
 * asked anything.
 *
 * An execution whose devices are all local runs as in one process (pjrt_execute.c). One whose devices span
 * processes runs on a system of all its devices of which this process runs its own (tpu_system_new_dist,
 * kept per owner map), each process feeding its devices' arguments; results are the same bit for bit as in
 * one process. Host callbacks (send/recv to the host) are refused in such executions. */
#include "pjrt_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct pj_dist_sys {
    int         n;
    int        *owner;     /* MPI rank of each logical device */
    tpu_system *sys;
} pj_dist_sys;

typedef struct pj_dist {
    tpu_dist    *d;
    int          nprocs;
    int         *rank_of;   /* process index -> MPI rank */
    pj_dist_sys  systems[8];
    int          nsystems;
} pj_dist;

static int64_t pj_int_option(const PJRT_Client_Create_Args *a, const char *name, int64_t dflt)
{
    for (size_t i = 0; a->create_options && i < a->num_options; i++) {
        const PJRT_NamedValue *v = &a->create_options[i];
        if (v->type == PJRT_NamedValue_kInt64 && v->name_size == strlen(name) && !memcmp(v->name, name, v->name_size))
            return v->int64_value;
    }
    return dflt;
}

static PJRT_Error *pj_kv_error(PJRT_Error_Code code, const char *msg, size_t n)
{
    return pj_error(code, "%.*s", (int)n, msg ? msg : "");
}

/* jax.distributed's key-value store: every process publishes the slice it simulates, then reads the others'. */
static PJRT_Error *pj_dist_kv_check(PJRT_Client *c, const PJRT_Client_Create_Args *a, int node, int nodes)
{
    if (!a->kv_put_callback || !a->kv_get_callback) return NULL;
    char key[64], val[128];
    snprintf(key, sizeof key, "tpusim:slice:%d", node);
    snprintf(val, sizeof val, "%s", c->slice);
    PJRT_CallbackError cb = pj_kv_error;
    PJRT_KeyValuePutCallback_Args pa = {.struct_size = sizeof pa, .key = key, .key_size = strlen(key), .value = val,
                                        .value_size = strlen(val), .callback_error = &cb, .user_arg = a->kv_put_user_arg};
    PJRT_Error *err = a->kv_put_callback(&pa);
    for (int q = 0; !err && q < nodes; q++) {
        if (q == node) continue;
        snprintf(key, sizeof key, "tpusim:slice:%d", q);
        PJRT_KeyValueGetCallback_Args ga = {.struct_size = sizeof ga, .key = key, .key_size = strlen(key),
                                            .timeout_in_ms = 300000, .callback_error = &cb, .user_arg = a->kv_get_user_arg};
        err = a->kv_get_callback(&ga);
        if (err) break;
        int same = ga.value_size == strlen(c->slice) && !memcmp(ga.value, c->slice, ga.value_size);
        if (!same)
            err = pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "tpusim: process %d simulates %.*s, this process (%d) %s: "
                           "TPUSIM_SLICE must be the same in every process", q, (int)ga.value_size, ga.value, node, c->slice);
        if (ga.value_deleter_callback) ga.value_deleter_callback(ga.value);
    }
    return err;
}

/* Which process runs each device: the slice's hosts in blocks, process p the p-th block. */
static PJRT_Error *pj_dist_assign(PJRT_Client *c, int nprocs, int self)
{
    int hosts = 0;
    for (int i = 0; i < c->ndev; i++)
        if (c->devs[i].desc.info.host + 1 > hosts) hosts = c->devs[i].desc.info.host + 1;
    if (hosts % nprocs)
        return pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "tpusim: %s has %d host%s; run it on a number of processes that "
                        "divides %d (mpirun -np %d: one per host), not %d", c->slice, hosts, hosts == 1 ? "" : "s", hosts,
                        hosts, nprocs);
    int per = hosts / nprocs;
    c->naddr = 0;
    for (int i = 0; i < c->ndev; i++) {
        PJRT_DeviceDescription *d = &c->devs[i].desc;
        d->process = d->info.host / per;
        d->local_id = d->process == self ? c->naddr++ : -1;
        snprintf(d->to_string, sizeof d->to_string, "TpuDevice(id=%d, process_index=%d, coords=(%d,%d,%d), core_on_chip=%d)",
                 d->info.id, d->process, d->info.coords[0], d->info.coords[1], d->info.coords[2], d->info.core_on_chip);
    }
    c->addr_list = calloc((size_t)c->naddr + 1, sizeof *c->addr_list);
    c->addr_mems = calloc((size_t)c->naddr + 1, sizeof *c->addr_mems);
    if (!c->addr_list || !c->addr_mems) return pj_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "tpusim: out of host memory");
    for (int i = 0, k = 0; i < c->ndev; i++)
        if (c->devs[i].desc.process == self) {
            c->addr_list[k] = &c->devs[i];
            c->addr_mems[k++] = &c->devs[i].mem.base;
        }
    c->process_index = self;
    return NULL;
}

/* A process that exits without destroying its client still ends MPI cleanly (mpirun counts a process that
 * exits without MPI_Finalize as failed). */
static pthread_mutex_t pj_dist_mu = PTHREAD_MUTEX_INITIALIZER;
static pj_dist *pj_dist_live[4];
static int pj_dist_nlive, pj_dist_atexit_set;

static void pj_dist_end(pj_dist *pd)
{
    if (!pd->d) return;
    tpu_dist_free(pd->d, tpu_dist_failed(pd->d, NULL) ? 1 : 0);   /* after a failure: MPI_Abort ends the job */
    pd->d = NULL;
}

static void pj_dist_atexit(void)
{
    pthread_mutex_lock(&pj_dist_mu);
    for (int i = 0; i < pj_dist_nlive; i++) pj_dist_end(pj_dist_live[i]);
    pj_dist_nlive = 0;
    pthread_mutex_unlock(&pj_dist_mu);
}

static void pj_dist_track(pj_dist *pd, int alive)
{
    pthread_mutex_lock(&pj_dist_mu);
    if (alive) {
        if (!pj_dist_atexit_set) pj_dist_atexit_set = atexit(pj_dist_atexit) == 0;
        if (pj_dist_nlive < (int)(sizeof pj_dist_live / sizeof pj_dist_live[0])) pj_dist_live[pj_dist_nlive++] = pd;
    } else {
        for (int i = 0; i < pj_dist_nlive; i++)
            if (pj_dist_live[i] == pd) pj_dist_live[i] = pj_dist_live[--pj_dist_nlive];
        pj_dist_end(pd);
    }
    pthread_mutex_unlock(&pj_dist_mu);
}

/* A failure while the client is made: said here (the job may end before jax prints it) and to the others. */
static PJRT_Error *pj_dist_init_failed(PJRT_Client *c, PJRT_Error *err)
{
    const char *m = err ? ((pj_error_obj *)err)->msg : "failed";
    fprintf(stderr, "tpusim: process %d: %s\n", tpu_dist_rank(c->dist->d), m ? m : "failed");
    tpu_dist_fail(c->dist->d, m);
    return err;
}

PJRT_Error *pj_dist_client_init(PJRT_Client *c, const PJRT_Client_Create_Args *a)
{
    int nodes = (int)pj_int_option(a, "num_nodes", 1), node = (int)pj_int_option(a, "node_id", 0);
    if (nodes <= 1 && !tpu_dist_launched()) return NULL;   /* one process */
    if (nodes <= 1)   /* jaxlib's client of one process crashes on devices it cannot address: say what to do */
        return pj_error(PJRT_Error_Code_FAILED_PRECONDITION, "tpusim: this process is one of several started by mpirun, "
                        "but jax.distributed is not initialized: call jax.distributed.initialize() before using jax "
                        "(it reads Open MPI's environment), so that each process is one host of the slice");
    if (!tpu_dist_launched())
        return pj_error(PJRT_Error_Code_FAILED_PRECONDITION, "tpusim: jax.distributed runs %d processes, but tpusim's "
                        "devices talk over MPI: start the processes with mpirun (mpirun -np %d python script.py)", nodes, nodes);
    pj_dist *pd = calloc(1, sizeof *pd);
    if (!pd) return pj_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "tpusim: out of host memory");
    c->dist = pd;
    if (tpu_dist_new(c->ctx, &pd->d)) return pj_error_tpu(c->ctx, TPU_ERR_INVALID, "tpusim: starting MPI");
    pj_dist_track(pd, 1);
    PJRT_Error *err = NULL;
    int size = tpu_dist_size(pd->d);
    if (nodes != size)
        return pj_dist_init_failed(c, pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "tpusim: jax.distributed has %d "
                                               "processes, mpirun started %d", nodes, size));
    if ((err = pj_dist_kv_check(c, a, node, nodes))) return pj_dist_init_failed(c, err);
    /* process index -> MPI rank */
    int32_t mine = node, *all = calloc((size_t)size, sizeof *all);
    pd->rank_of = calloc((size_t)size, sizeof *pd->rank_of);
    if (!all || !pd->rank_of) {
        free(all);
        return pj_dist_init_failed(c, pj_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "tpusim: out of host memory"));
    }
    tpu_status st = tpu_dist_allgather(c->ctx, pd->d, &mine, sizeof mine, all);
    for (int r = 0; !st && r < size; r++) {
        if (all[r] < 0 || all[r] >= size) st = tpu_set_error(c->ctx, TPU_ERR_INVALID, "process %d has index %d", r, all[r]);
        else pd->rank_of[all[r]] = r;
    }
    free(all);
    if (!st) st = tpu_dist_agree(c->ctx, pd->d, "slice (TPUSIM_SLICE)", c->slice);
    if (st) return pj_dist_init_failed(c, pj_error_tpu(c->ctx, st, "tpusim"));
    pd->nprocs = size;
    if ((err = pj_dist_assign(c, size, node))) return pj_dist_init_failed(c, err);
    return NULL;
}

void pj_dist_client_free(PJRT_Client *c)
{
    pj_dist *pd = c->dist;
    if (!pd) return;
    for (int i = 0; i < pd->nsystems; i++) {
        tpu_system_free(pd->systems[i].sys);
        free(pd->systems[i].owner);
    }
    if (c->addr_list != c->dev_list) free(c->addr_list);
    if (c->addr_mems != c->mem_list) free(c->addr_mems);
    c->addr_list = c->dev_list;
    c->addr_mems = c->mem_list;
    pj_dist_track(pd, 0);   /* MPI ends here (MPI_Abort after a failure) */
    free(pd->rank_of);
    free(pd);
    c->dist = NULL;
}

void pj_dist_addressable(PJRT_Client *c, PJRT_LoadedExecutable *le)
{
    if (!c->dist) return;
    int k = 0;
    for (int i = 0; i < le->ndevices; i++)
        if (le->devices[i]->desc.process == c->process_index) {
            le->devices[k] = le->devices[i];
            le->logical[k++] = le->logical[i];
        }
    le->ndevices = k;
}

int pj_dist_spans(const PJRT_LoadedExecutable *le)
{
    const PJRT_Executable *e = le->exe;
    return e->client->dist && le->ndevices < e->nreplicas * e->npartitions;
}

/* The system of the executable's devices by owner (MPI rank), kept by the client. Under the client's mutex. */
static PJRT_Error *pj_dist_system(PJRT_Client *c, const int *owner, int n, tpu_system **out)
{
    pj_dist *pd = c->dist;
    for (int i = 0; i < pd->nsystems; i++)
        if (pd->systems[i].n == n && !memcmp(pd->systems[i].owner, owner, (size_t)n * sizeof *owner))
            return *out = pd->systems[i].sys, NULL;
    if (pd->nsystems == (int)(sizeof pd->systems / sizeof pd->systems[0]))
        return pj_error(PJRT_Error_Code_UNIMPLEMENTED, "tpusim: more than %d device sets span processes",
                        (int)(sizeof pd->systems / sizeof pd->systems[0]));
    char spec[96];
    snprintf(spec, sizeof spec, "%d:%s", n, c->slice);
    pj_dist_sys *s = &pd->systems[pd->nsystems];
    if (!(s->owner = malloc((size_t)n * sizeof *owner))) return pj_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "tpusim: out of host memory");
    memcpy(s->owner, owner, (size_t)n * sizeof *owner);
    tpu_status st = tpu_system_new_dist(c->ctx, spec, pd->d, owner, &s->sys);
    if (st) {
        free(s->owner);
        return pj_error_tpu(c->ctx, st, "tpusim: starting the simulated devices of several processes");
    }
    s->n = n;
    pd->nsystems++;
    *out = s->sys;
    return NULL;
}

PJRT_Error *pj_dist_run(PJRT_LoadedExecutable *le, tpu_tensor ***ins, tpu_tensor ***outs, const PJRT_ExecuteOptions *xo)
{
    PJRT_Executable *e = le->exe;
    PJRT_Client *c = e->client;
    int R = e->nreplicas, P = e->npartitions, n = R * P;
    if (xo && (xo->num_send_ops || xo->num_recv_ops))
        return pj_error(PJRT_Error_Code_UNIMPLEMENTED, "%s: host callbacks in a program whose devices span processes are "
                        "not supported by tpusim yet", e->name);
    int *owner = calloc((size_t)n, sizeof *owner);
    tpu_tensor ***gin = calloc((size_t)n, sizeof *gin), ***gout = calloc((size_t)n, sizeof *gout);
    tpu_ctx *ctx = tpu_ctx_new();
    PJRT_Error *err = owner && gin && gout && ctx ? NULL : pj_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "tpusim: out of host memory");
    for (int i = 0; !err && i < n; i++) owner[i] = c->dist->rank_of[c->devs[e->assignment[i]].desc.process];
    for (int k = 0; !err && k < le->ndevices; k++) gin[le->logical[k].replica * P + le->logical[k].partition] = ins[k];
    tpu_run_opts o = tpu_run_opts_default();
    o.numerics = e->numerics;
    o.threads = c->threads;
    int nout = 0;
    pthread_mutex_lock(&c->run_mu);
    tpu_system *sys = NULL;
    if (!err) {
        pthread_mutex_lock(&c->mu);
        err = pj_dist_system(c, owner, n, &sys);
        pthread_mutex_unlock(&c->mu);
    }
    tpu_status st = TPU_OK;
    if (!err) st = tpu_system_set_split(ctx, sys, R, P);
    if (!err && !st) st = tpu_system_run(ctx, sys, e->m, &o, (tpu_tensor **const *)gin, e->ninputs, gout, &nout);
    if (!err && st) err = pj_error_tpu(ctx, st, e->name);
    pthread_mutex_unlock(&c->run_mu);
    if (!err && nout != e->noutputs)
        err = pj_error(PJRT_Error_Code_INTERNAL, "%s: %d results where the program declares %d", e->name, nout, e->noutputs);
    for (int k = 0; !err && k < le->ndevices; k++) {
        int i = le->logical[k].replica * P + le->logical[k].partition;
        outs[k] = gout[i];
        gout[i] = NULL;
    }
    if (gout) tpu_system_outputs_free(gout, n, nout);
    free(owner);
    free(gin);
    free(gout);
    tpu_ctx_free(ctx);
    return err;
}

/* jax.distributed's coordination service tells every client how the processes are doing (it calls this when
 * the set changes). A process in error stops this process's multi-process work with the service's message;
 * processes that disconnect after finishing are not errors. */
PJRT_Error *pjx_PJRT_Client_UpdateGlobalProcessInfo(PJRT_Client_UpdateGlobalProcessInfo_Args *a)
{
    PJ_NEED(a, PJRT_Client_UpdateGlobalProcessInfo_Args, num_process_infos);
    pj_dist *pd = a->client->dist;
    for (size_t i = 0; pd && pd->d && i < a->num_process_infos; i++) {
        const PJRT_ProcessInfo *p = &a->process_infos[i];
        if (p->state != PJRT_ProcessState_kError || p->task_id == a->client->process_index) continue;
        char msg[512];
        snprintf(msg, sizeof msg, "jax.distributed reports process %d in error (code %d): %.*s", p->task_id, p->error_code,
                 (int)(p->error_message ? p->error_message_size : 0), p->error_message ? p->error_message : "");
        tpu_dist_fail(pd->d, msg);
    }
    return NULL;
}
