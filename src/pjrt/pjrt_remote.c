/* pjrt_remote.c — the plugin's remote mode: with TPU_GRPC_URL=grpc://HOST:PORT (or TPU_NAME=NAME, resolved
 * through the registry as `tpusim resolve` does) the client is a session on a `tpusim serve` host, like a
 * framework on a Cloud TPU's network endpoint. The framework's program is lowered here (jaxlib's front end
 * and SPMD partitioner run in the framework's process, as before) and the per-device HLO goes to the host,
 * which checks it the way the TPU compiler would, plans its memory and keeps it; buffers are uploaded to the
 * host's devices and stay there; executions run there and their results stay there until the framework
 * reads them. What the framework asks about programs and buffers (shapes, shardings, memory and cost
 * analyses) is answered here from the same program, so the script runs unchanged either way.
 *
 * A host that goes away makes calls fail with UNAVAILABLE (a Python exception naming the address), never a
 * hang; ending the client ends the session, and the host frees what it held. */
#include "pjrt_internal.h"
#include "net/net.h"
#include "tpusim.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct pj_remote {
    tn_client *cli;
    char       url[320];
    char       name[128];
    char       where[480];
    char       slice[256];
} pj_remote;

static PJRT_Error *pj_remote_error(tn_err *e, const char *what)
{
    PJRT_Error *err = pj_error((PJRT_Error_Code)(e->code ? e->code : TN_INTERNAL), "%s%s%s", what ? what : "",
                               what ? ": " : "", tn_err_msg(e));
    tn_err_clear(e);
    return err;
}

/* TPU_GRPC_URL, else TPU_NAME resolved through the registry. */
static PJRT_Error *pj_remote_url(pj_remote *r)
{
    const char *url = getenv("TPU_GRPC_URL"), *name = getenv("TPU_NAME");
    if (name && *name) snprintf(r->name, sizeof r->name, "%s", name);
    if (url && *url) {
        snprintf(r->url, sizeof r->url, "%s", url);
        return NULL;
    }
    tn_err e = {0};
    if (tn_resolve(name, r->url, sizeof r->url, &e)) return pj_remote_error(&e, "TPU_NAME");
    return NULL;
}

PJRT_Error *pj_remote_open(PJRT_Client *c, const char **slice)
{
    const char *url = getenv("TPU_GRPC_URL"), *name = getenv("TPU_NAME");
    if (!(url && *url) && !(name && *name)) return NULL;   /* in-process */
    pj_remote *r = calloc(1, sizeof *r);
    if (!r) return pj_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "tpusim: out of host memory");
    PJRT_Error *err = pj_remote_url(r);
    tn_err e = {0};
    ProtobufCMessage *ev = NULL;
    char who[200];
    snprintf(who, sizeof who, "jax plugin, pid %d", (int)getpid());
    tn_client_opts o = {.client = getenv("TPUSIM_CLIENT_NAME") ? getenv("TPUSIM_CLIENT_NAME") : who};
    if (!err && (tn_client_new(r->url, &o, &r->cli, &e) || tn_client_open_session(r->cli, &ev, &e)))
        err = pj_remote_error(&e, r->url);
    if (!err) {
        const Tpusim__V1__SystemInfo *si = ((Tpusim__V1__SessionEvent *)ev)->system;
        /* the client describes the slice the host serves: by name, or by the host's chip file on this machine */
        tpu_chip *probe = NULL;
        const char *s = si ? si->slice : "";
        if (si && tpu_chip_get(c->ctx, s, &probe) != TPU_OK && *si->chip_spec) s = si->chip_spec;
        tpu_chip_free(probe);
        snprintf(r->slice, sizeof r->slice, "%s", s);
        snprintf(r->where, sizeof r->where, " at %s%s%s%s", tn_client_url(r->cli), r->name[0] ? " (TPU " : "", r->name,
                 r->name[0] ? ")" : "");
        *slice = r->slice;
    }
    tn_msg_free(ev);
    if (err) {
        tn_client_free(r->cli);
        free(r);
        return err;
    }
    c->remote = r;
    return NULL;
}

void pj_remote_close(PJRT_Client *c)
{
    if (!c->remote) return;
    tn_client_free(c->remote->cli);   /* ends the session: the host frees what it held */
    free(c->remote);
    c->remote = NULL;
}

const char *pj_remote_where(const PJRT_Client *c) { return c->remote ? c->remote->where : ""; }

/* ---- buffers ---- */

PJRT_Error *pj_remote_put(PJRT_Buffer *b, tpu_tensor *t)
{
    tn_err e = {0};
    tn_buffer_info info;
    pj_remote *r = b->dev->client->remote;
    int rc = tn_client_put(r->cli, b->dev->desc.info.id, tpu_tensor_dtype(t), tpu_tensor_rank(t), tpu_tensor_dims(t),
                           tpu_tensor_cdata(t), tpu_tensor_nbytes(t), &info, &e);
    tpu_tensor_free(t);
    if (rc) return pj_remote_error(&e, NULL);
    b->remote = info.id;
    return NULL;
}

PJRT_Error *pj_remote_fetch(const PJRT_Buffer *b, tpu_tensor **out)
{
    *out = NULL;
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_tensor *t = NULL;
    tpu_status st = ctx ? tpu_tensor_new(ctx, b->dtype, b->rank, b->dims, &t) : TPU_ERR_NOMEM;
    PJRT_Error *err = st ? pj_error_tpu(ctx, st, "ToHostBuffer") : NULL;
    tpu_ctx_free(ctx);
    if (err) return err;
    tn_err e = {0};
    if (tn_client_get(b->dev->client->remote->cli, b->remote, tpu_tensor_data(t), tpu_tensor_nbytes(t), &e)) {
        tpu_tensor_free(t);
        return pj_remote_error(&e, NULL);
    }
    *out = t;
    return NULL;
}

static void pj_remote_delete(pj_remote *r, const uint64_t *bufs, int nbufs, uint64_t exe)
{
    Tpusim__V1__DeleteRequest q = TPUSIM__V1__DELETE_REQUEST__INIT;
    q.session = (char *)tn_client_session(r->cli);
    q.buffers = (uint64_t *)bufs;
    q.n_buffers = (size_t)nbufs;
    q.executables = &exe;
    q.n_executables = exe ? 1 : 0;
    ProtobufCMessage *resp = NULL;
    tn_err e = {0};
    /* a failure (the host is gone) leaves nothing to free here: the host frees the session's objects */
    tn_client_unary(r->cli, TN_M_DELETE, &q.base, &tpusim__v1__delete_response__descriptor, &resp, 30, &e);
    tn_msg_free(resp);
    tn_err_clear(&e);
}

void pj_remote_delete_buffer(PJRT_Buffer *b)
{
    if (b->remote) pj_remote_delete(b->dev->client->remote, &b->remote, 1, 0);
    b->remote = 0;
}

/* ---- compile ---- */

PJRT_Error *pj_remote_compile(PJRT_Client *c, PJRT_Executable *e)
{
    Tpusim__V1__CompileRequest q = TPUSIM__V1__COMPILE_REQUEST__INIT;
    q.session = (char *)tn_client_session(c->remote->cli);
    q.format = "hlo";
    q.program.data = (uint8_t *)e->optimized_hlo;
    q.program.len = strlen(e->optimized_hlo);
    q.num_replicas = e->nreplicas;
    q.num_partitions = e->npartitions;
    q.device_assignment = e->assignment;
    q.n_device_assignment = (size_t)(e->nreplicas * e->npartitions);
    q.numerics = e->numerics == TPU_NUMERICS_EXACT ? "exact" : "tpu";
    ProtobufCMessage *resp = NULL;
    tn_err err = {0};
    if (tn_client_unary(c->remote->cli, TN_M_COMPILE, &q.base, &tpusim__v1__compile_response__descriptor, &resp, 0, &err))
        return pj_remote_error(&err, NULL);
    const Tpusim__V1__CompileResponse *r = (const void *)resp;
    e->remote = r->executable;
    if (r->memory) {
        const Tpusim__V1__MemoryStats *m = r->memory;
        e->mem = (tpu_memory_stats){m->argument_bytes, m->output_bytes, m->alias_bytes, m->temp_bytes, m->peak_bytes,
                                    m->unpadded_bytes, m->capacity_bytes, m->reserved_bytes};
    }
    PJRT_Error *bad = r->num_inputs != e->ninputs || r->num_outputs != e->noutputs
                          ? pj_error(PJRT_Error_Code_INTERNAL, "%s: the TPU host reads %d inputs and %d outputs, this client %d and %d",
                                     e->name, r->num_inputs, r->num_outputs, e->ninputs, e->noutputs)
                          : NULL;
    tn_msg_free(resp);
    return bad;
}

void pj_remote_delete_executable(PJRT_Executable *e)
{
    if (e->remote && e->client->remote) pj_remote_delete(e->client->remote, NULL, 0, e->remote);
    e->remote = 0;
}

/* ---- execute ---- */

/* The request's argument lists (handles per device), devices and non-donatable inputs; freed by the caller. */
static PJRT_Error *pj_remote_request(PJRT_LoadedExecutable_Execute_Args *a, PJRT_Device *const *devs, int n,
                                     Tpusim__V1__ExecuteRequest *q, Tpusim__V1__ArgumentList *lists,
                                     Tpusim__V1__ArgumentList **lp, uint64_t *ids, int32_t *dev_ids)
{
    PJRT_Executable *e = a->executable->exe;
    for (int d = 0; d < n; d++) {
        tpusim__v1__argument_list__init(&lists[d]);
        for (int i = 0; i < e->ninputs; i++) ids[d * e->ninputs + i] = a->argument_lists[d][i]->remote;
        lists[d].buffers = ids + (size_t)d * (size_t)e->ninputs;
        lists[d].n_buffers = (size_t)e->ninputs;
        lp[d] = &lists[d];
        dev_ids[d] = devs[d]->desc.info.id;
    }
    q->session = (char *)tn_client_session(e->client->remote->cli);
    q->executable = e->remote;
    q->arguments = lp;
    q->n_arguments = (size_t)n;
    q->devices = dev_ids;
    q->n_devices = (size_t)n;
    q->max_steps = e->client->max_steps;       /* TPUSIM_MAX_STEPS / TPUSIM_TIMEOUT travel with the run */
    q->max_seconds = e->client->max_seconds;
    const PJRT_ExecuteOptions *o = a->options;
    if (o && o->non_donatable_input_indices) {
        q->non_donatable = (int64_t *)o->non_donatable_input_indices;
        q->n_non_donatable = o->num_non_donatable_input_indices;
    }
    return NULL;
}

/* A buffer for a result that lives on the host (charged to this client's view of the device's HBM). */
static PJRT_Error *pj_remote_result(PJRT_Device *dev, const Tpusim__V1__BufferInfo *bi, PJRT_Buffer **out)
{
    *out = NULL;
    tpu_dtype t = tn_array_dtype(bi->dtype);
    if (t == TPU_INVALID || bi->n_dims > TPU_MAX_RANK)
        return pj_error(PJRT_Error_Code_DATA_LOSS, "the TPU host returned a result of type '%s' rank %zu", bi->dtype, bi->n_dims);
    PJRT_Buffer *b = calloc(1, sizeof *b);
    if (!b) return pj_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "tpusim: out of host memory");
    b->dev = dev;
    b->dtype = t;
    b->rank = (int)bi->n_dims;
    if (bi->n_dims) memcpy(b->dims, bi->dims, bi->n_dims * sizeof b->dims[0]);   /* a scalar has no dims */
    b->hbm_bytes = bi->hbm_bytes;
    PJRT_Error *err = pj_hbm_alloc(dev, b->hbm_bytes, NULL);
    if (err) {
        free(b);
        return err;
    }
    b->remote = bi->buffer;
    *out = b;
    return NULL;
}

/* Donated arguments gave their buffers up on the host; results become buffers here. */
static PJRT_Error *pj_remote_results(PJRT_LoadedExecutable_Execute_Args *a, PJRT_Device *const *devs, int n,
                                     const Tpusim__V1__ExecuteResponse *r)
{
    PJRT_Executable *e = a->executable->exe;
    if ((int)r->n_results != n)
        return pj_error(PJRT_Error_Code_DATA_LOSS, "%s: the TPU host returned results for %zu devices, not %d", e->name, r->n_results, n);
    for (int d = 0; d < n; d++)
        if ((int)r->results[d]->n_outputs != e->noutputs)
            return pj_error(PJRT_Error_Code_DATA_LOSS, "%s: %zu results from the TPU host, the program has %d", e->name,
                            r->results[d]->n_outputs, e->noutputs);
    for (size_t k = 0; k < r->n_donated; k++)
        for (int d = 0; d < n && r->donated[k] >= 0 && r->donated[k] < e->ninputs; d++) {
            PJRT_Buffer *b = a->argument_lists[d][r->donated[k]];
            b->remote = 0;   /* already gone on the host */
            pj_hbm_free(b->dev, b->hbm_bytes);
            b->deleted = b->donated = 1;
        }
    PJRT_Error *err = NULL;
    for (int d = 0; d < n; d++)
        for (int i = 0; i < e->noutputs; i++) {
            PJRT_Buffer **slot = &a->output_lists[d][i];
            *slot = NULL;
            if (!err) err = pj_remote_result(devs[d], r->results[d]->outputs[i], slot);
            if (!err && e->out_types[i] == PJRT_Buffer_Type_TOKEN) {   /* the host holds a token as an empty array */
                (*slot)->dtype = TPU_TOKEN;
                (*slot)->rank = 0;
            }
        }
    for (int d = 0; err && d < n; d++)   /* all or nothing */
        for (int i = 0; i < e->noutputs; i++)
            if (a->output_lists[d][i]) {
                pj_buffer_release(a->output_lists[d][i]);
                free(a->output_lists[d][i]);
                a->output_lists[d][i] = NULL;
            }
    return err;
}

/* ---- execute with host transfers (ExecuteStream) ---- */

/* One transfer the TPU host streamed back: a send handed to the framework's callback, a recv answered with
 * what the framework's callback filled in. A callback's failure is kept in cb_err: the run goes on (the
 * framework zero-fills a failed recv, as in-process) and fails at the end with it. */
static PJRT_Error *pj_remote_transfer(tn_stream *s, pj_host *host, const Tpusim__V1__HostTransfer *t, int recv, char *cb_err,
                                      size_t cb_n)
{
    tpu_dtype dt = tn_array_dtype(t->dtype);
    if (dt == TPU_INVALID || t->n_dims > TPU_MAX_RANK)
        return pj_error(PJRT_Error_Code_DATA_LOSS, "the TPU host streamed a transfer of type '%s' rank %zu", t->dtype, t->n_dims);
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_tensor *v = NULL;
    tpu_status st = ctx ? tpu_tensor_new(ctx, dt, (int)t->n_dims, t->dims, &v) : TPU_ERR_NOMEM;
    PJRT_Error *err = st ? pj_error_tpu(ctx, st, "host transfer") : NULL;
    if (!err && !recv && t->data.len != tpu_tensor_nbytes(v))
        err = pj_error(PJRT_Error_Code_DATA_LOSS, "a host send of %zu bytes for an array of %zu", t->data.len, tpu_tensor_nbytes(v));
    if (!err) {
        if (!recv && t->data.len) memcpy(tpu_tensor_data(v), t->data.data, t->data.len);
        st = recv ? pj_host_recv(host, ctx, t->device, t->channel, v) : pj_host_send(host, ctx, t->device, t->channel, v);
        if (st && !cb_err[0]) snprintf(cb_err, cb_n, "%s", tpu_errmsg(ctx));
    }
    if (!err && recv) {
        Tpusim__V1__HostData hd = TPUSIM__V1__HOST_DATA__INIT;
        Tpusim__V1__ExecuteStreamRequest q = TPUSIM__V1__EXECUTE_STREAM_REQUEST__INIT;
        hd.device = t->device;
        hd.channel = t->channel;
        hd.data.data = tpu_tensor_data(v);
        hd.data.len = tpu_tensor_nbytes(v);
        q.host_data = &hd;
        if (tn_stream_send(s, &q.base)) err = pj_error(PJRT_Error_Code_UNAVAILABLE, "the TPU host went away during a host transfer");
    }
    tpu_tensor_free(v);
    tpu_ctx_free(ctx);
    return err;
}

/* Runs q on the host, serving its host transfers; *fin gets the finished event (with the result). */
static PJRT_Error *pj_remote_execute_stream(PJRT_LoadedExecutable_Execute_Args *a, int n, Tpusim__V1__ExecuteRequest *q,
                                            Tpusim__V1__ExecuteStreamEvent **fin)
{
    PJRT_Executable *e = a->executable->exe;
    pj_host host = {a->options, n};
    tn_stream *s = NULL;
    tn_err te = {0};
    *fin = NULL;
    if (tn_stream_open(e->client->remote->cli, TN_M_EXECUTE_STREAM, &s, &te)) return pj_remote_error(&te, NULL);
    Tpusim__V1__ExecuteStreamRequest first = TPUSIM__V1__EXECUTE_STREAM_REQUEST__INIT;
    first.execute = q;
    PJRT_Error *err = NULL;
    char cb_err[2048] = "";
    for (int got = tn_stream_send(s, &first.base) ? -1 : 1; got > 0 && !err && !*fin;) {   /* each transfer, then the end */
        uint8_t *buf = NULL;
        size_t len = 0;
        if ((got = tn_stream_recv(s, &buf, &len)) <= 0) break;
        Tpusim__V1__ExecuteStreamEvent *ev = tpusim__v1__execute_stream_event__unpack(NULL, len, buf);
        free(buf);
        if (!ev) err = pj_error(PJRT_Error_Code_DATA_LOSS, "%s: an event from the TPU host does not decode", e->name);
        else if (ev->finished) *fin = ev, ev = NULL;
        else if (ev->send || ev->recv) err = pj_remote_transfer(s, &host, ev->send ? ev->send : ev->recv, !ev->send, cb_err, sizeof cb_err);
        tn_msg_free(ev ? &ev->base : NULL);
    }
    int rc = tn_stream_finish(s, err != NULL, &te);
    if (!err && rc) err = pj_remote_error(&te, NULL);
    tn_err_clear(&te);
    if (!err && (!*fin || !(*fin)->result)) err = pj_error(PJRT_Error_Code_DATA_LOSS, "%s: the TPU host ended the run without its results", e->name);
    if (!err && cb_err[0]) {   /* as in-process: the run's error is the callback's */
        const Tpusim__V1__ExecuteResponse *r = (*fin)->result;
        for (size_t d = 0; d < r->n_results; d++)
            for (size_t i = 0; i < r->results[d]->n_outputs; i++)
                pj_remote_delete(e->client->remote, &r->results[d]->outputs[i]->buffer, 1, 0);
        err = pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "%s: %s", e->name, cb_err);
    }
    if (err && *fin) {
        tn_msg_free(&(*fin)->base);
        *fin = NULL;
    }
    return err;
}

PJRT_Error *pj_remote_execute(PJRT_LoadedExecutable_Execute_Args *a, PJRT_Device *const *devs, int n)
{
    PJRT_Executable *e = a->executable->exe;
    const PJRT_ExecuteOptions *o = a->options;
    int host_io = o && (o->num_send_ops || o->num_recv_ops);
    Tpusim__V1__ExecuteRequest q = TPUSIM__V1__EXECUTE_REQUEST__INIT;
    Tpusim__V1__ArgumentList *lists = calloc((size_t)n, sizeof *lists);
    Tpusim__V1__ArgumentList **lp = calloc((size_t)n, sizeof *lp);
    uint64_t *ids = calloc((size_t)n * (size_t)(e->ninputs + 1), sizeof *ids);
    int32_t *dev_ids = calloc((size_t)n, sizeof *dev_ids);
    PJRT_Error *err = !lists || !lp || !ids || !dev_ids ? pj_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "tpusim: out of host memory")
                                                        : pj_remote_request(a, devs, n, &q, lists, lp, ids, dev_ids);
    ProtobufCMessage *resp = NULL;
    Tpusim__V1__ExecuteStreamEvent *fin = NULL;
    tn_err te = {0};
    if (!err && host_io) err = pj_remote_execute_stream(a, n, &q, &fin);
    else if (!err && tn_client_unary(e->client->remote->cli, TN_M_EXECUTE, &q.base, &tpusim__v1__execute_response__descriptor,
                                     &resp, 0, &te))
        err = pj_remote_error(&te, NULL);
    if (!err) err = pj_remote_results(a, devs, n, fin ? fin->result : (const void *)resp);
    tn_msg_free(fin ? &fin->base : NULL);
    for (int d = 0; !err && d < n && a->device_complete_events; d++) a->device_complete_events[d] = pj_event_ready(NULL);
    tn_msg_free(resp);
    free(lists);
    free(lp);
    free(ids);
    free(dev_ids);
    if (!err) pj_report_execution(e->client, e);
    return err;
}
