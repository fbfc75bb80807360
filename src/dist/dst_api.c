/* dst_api.c — the public calls for several processes: the tpu_dist handle (MPI started, rank, size, host
 * exchanges, failure, end) and tpu_system_new_dist, a system of which this process runs its own devices. */
#include "dist/dist.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static int dst_env_int(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : 0;
}

int tpu_dist_launched(void)
{
    /* Open MPI's mpirun, MPICH's hydra and other PMI launchers */
    return dst_env_int("OMPI_COMM_WORLD_SIZE") > 1 || dst_env_int("PMI_SIZE") > 1 || dst_env_int("PMIX_SIZE") > 1;
}

tpu_status tpu_dist_new(tpu_ctx *ctx, tpu_dist **out)
{
    *out = NULL;
    double timeout = 300;
    const char *t = getenv("TPUSIM_DIST_TIMEOUT");
    if (t && *t) {
        char *end = NULL;
        timeout = strtod(t, &end);
        if (!end || *end || !(timeout > 0))
            return ut_err(ctx, TPU_ERR_INVALID, "TPUSIM_DIST_TIMEOUT=%s: give the wait in seconds (> 0)", t);
    }
    tpu_dist *d = ut_calloc(1, sizeof *d);
    if (!d) return ut_nomem(ctx);
    pthread_mutex_init(&d->mu, NULL);
    tpu_status st = dst_net_new(ctx, timeout, &d->net, &d->rank, &d->size);
    if (st) {
        pthread_mutex_destroy(&d->mu);
        ut_free(d);
        return st;
    }
    *out = d;
    return TPU_OK;
}

int tpu_dist_rank(const tpu_dist *d) { return d ? d->rank : 0; }
int tpu_dist_size(const tpu_dist *d) { return d ? d->size : 1; }

void tpu_dist_fail(tpu_dist *d, const char *msg)
{
    if (d) dst_net_fail(d->net, "%s", msg ? msg : "failed");
}

int tpu_dist_failed(tpu_dist *d, const char **msg)
{
    const char *f = d ? dst_net_failure(d->net) : NULL;
    if (msg) *msg = f;
    return f != NULL;
}

void tpu_dist_free(tpu_dist *d, int status)
{
    if (!d) return;
    dst_net_free(d->net, status);
    pthread_mutex_destroy(&d->mu);
    ut_free(d);
}

tpu_status tpu_dist_allgather(tpu_ctx *ctx, tpu_dist *d, const void *mine, size_t len, void *all)
{
    if (!d) {
        if (len) memcpy(all, mine, len);
        return TPU_OK;
    }
    pthread_mutex_lock(&d->mu);
    uint64_t key[4] = {++d->host_seq, (uint64_t)len, 0, 0};
    pthread_mutex_unlock(&d->mu);
    int *others = ut_malloc((size_t)d->size * sizeof *others), n = 0;
    if (!others) return ut_nomem(ctx);
    for (int q = 0; q < d->size; q++)
        if (q != d->rank) others[n++] = q;
    tpu_status st = dst_net_send_many(ctx, d->net, others, n, DST_HOST, key, 0, mine, len);
    ut_free(others);
    if (len) memcpy((char *)all + (size_t)d->rank * len, mine, len);
    for (int q = 0; !st && q < d->size; q++) {
        if (q == d->rank) continue;
        dst_msg *m = NULL;
        st = dst_net_wait(ctx, d->net, DST_HOST, key, q, "a host exchange", &m);
        if (!st && m->total != len)
            st = ut_err(ctx, TPU_ERR_INVALID, "process %d gave %llu bytes to a host exchange where this process gave %zu",
                        q, (unsigned long long)m->total, len);
        if (!st && len) memcpy((char *)all + (size_t)q * len, m->data, len);
        dst_msg_free(m);
    }
    return st;
}

tpu_status tpu_dist_agree(tpu_ctx *ctx, tpu_dist *d, const char *what, const char *value)
{
    if (!d || d->size == 1) return TPU_OK;
    char mine[256] = {0};
    snprintf(mine, sizeof mine, "%s", value ? value : "");
    char *all = ut_malloc((size_t)d->size * sizeof mine);
    if (!all) return ut_nomem(ctx);
    tpu_status st = tpu_dist_allgather(ctx, d, mine, sizeof mine, all);
    for (int q = 0; !st && q < d->size; q++) {
        const char *v = all + (size_t)q * sizeof mine;
        if (strncmp(v, all, sizeof mine))
            st = ut_err(ctx, TPU_ERR_INVALID, "the processes disagree about the %s: process 0 has '%.255s', process %d "
                        "'%.255s' (every process must be started with the same command)", what, all, q, v);
    }
    ut_free(all);
    return st;
}

/* The devices of a spec and how many per host ("v3-32": 32, 8; "16" or "16:v4": 16, 16 / processes). */
static tpu_status dst_spec(tpu_ctx *ctx, const char *devices, int nproc, int *N, int *per_host, int *hosts)
{
    const char *p = devices ? devices : "";
    while (isdigit((unsigned char)*p)) p++;
    if (p > devices && (*p == 0 || *p == ':')) {
        *N = atoi(devices);
        *hosts = nproc;
        if (*N < 1 || *N % nproc)
            return ut_err(ctx, TPU_ERR_INVALID, "%d devices do not split evenly over %d processes", *N, nproc);
        *per_host = *N / nproc;
        return TPU_OK;
    }
    chp_slice sl;
    tpu_status st = chp_slice_parse(ctx, devices, &sl);
    if (st) return st;
    *N = sl.devices;
    *hosts = sl.hosts > 0 ? sl.hosts : 1;
    *per_host = sl.devices / *hosts;
    if (*hosts % nproc)
        return ut_err(ctx, TPU_ERR_INVALID, "%s has %d host%s (%d devices each): run it on a number of processes that "
                      "divides %d (mpirun -np %d: one per host), not %d", sl.name, *hosts, *hosts == 1 ? "" : "s",
                      *per_host, *hosts, *hosts, nproc);
    return TPU_OK;
}

tpu_status tpu_system_new_dist(tpu_ctx *ctx, const char *devices, tpu_dist *d, const int *owner, tpu_system **out)
{
    *out = NULL;
    if (!d) return tpu_system_new(ctx, devices, out);
    int N = 0, per_host = 0, hosts = 0;
    tpu_status st = dst_spec(ctx, devices, owner ? 1 : d->size, &N, &per_host, &hosts);
    int *own = st ? NULL : ut_malloc((size_t)N * sizeof *own);
    if (!st && !own) st = ut_nomem(ctx);
    /* by default each process runs a block of whole hosts */
    int per_proc = hosts / (owner ? 1 : d->size) * per_host;
    for (int g = 0; !st && g < N; g++) {
        own[g] = owner ? owner[g] : g / per_proc;
        if (own[g] < 0 || own[g] >= d->size)
            st = ut_err(ctx, TPU_ERR_INVALID, "device %d belongs to process %d; there are %d processes", g, own[g], d->size);
    }
    /* every process must be making the same system */
    char desc[256];
    uint64_t h = 1469598103934665603ULL;
    for (int g = 0; !st && g < N; g++) h = (h ^ (uint64_t)(own[g] + 1)) * 1099511628211ULL;
    snprintf(desc, sizeof desc, "%s (%d devices, owner map %016llx)", devices, N, (unsigned long long)h);
    if (!st) st = tpu_dist_agree(ctx, d, "slice", desc);
    dst_sys *s = NULL;
    if (!st) st = dst_sys_new(ctx, d, N, own, &s);
    if (!st) st = rt_system_create(ctx, devices, own, d->rank, &s->remote, out);
    ut_free(own);
    return st;
}
