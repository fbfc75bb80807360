/* pjrt_execute.c — running an executable: on one device with tpu_run, on several (replicas x partitions,
 * with their collectives) with a tpu_system kept by the client. Arguments are checked against the program
 * before anything runs; donated arguments (input_output_alias, not listed as non-donatable) give their
 * buffers up after a successful run, as on the device. */
#include "pjrt_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static PJRT_Error *pj_nomem(void) { return pj_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "tpusim: out of host memory"); }

static void pj_shape_str(tpu_dtype t, int rank, const int64_t *dims, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "%s[", tpu_dtype_name(t));
    for (int i = 0; i < rank && k < n; i++) k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "", (long long)dims[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* Argument i of device d must be a live buffer on that device with the program's input shape. */
static PJRT_Error *pj_check_arg(const PJRT_Executable *e, const PJRT_Buffer *b, PJRT_Device *dev, int i)
{
    if (!b) return pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "%s: argument %d is missing", e->name, i);
    if (!pj_buffer_live(b))
        return pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "%s: argument %d was %s", e->name, i,
                        b->donated ? "donated to an earlier execution (its buffer was reused)" : "deleted");
    if (b->dev != dev)
        return pj_error(PJRT_Error_Code_INVALID_ARGUMENT,
                        "%s: argument %d is on TPU_%d but this execution runs on TPU_%d: the executable was compiled "
                        "for other devices (device_put the array, or compile for the devices it lives on)",
                        e->name, i, b->dev->desc.info.id, dev->desc.info.id);
    tpu_dtype t;
    int rank;
    int64_t dims[TPU_MAX_RANK];
    tpu_module_input_info(e->m, i, &t, &rank, dims);
    if (t == TPU_TOKEN) {   /* frameworks pass a token as an empty buffer (jax: pred[0]) */
        if (b->dtype == TPU_TOKEN || tpu_tensor_count(b->t) == 0) return NULL;
        return pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "%s: argument %d should be a token (an empty buffer)", e->name, i);
    }
    int same = t == b->dtype && rank == b->rank;
    for (int k = 0; same && k < rank; k++) same = dims[k] == b->dims[k];
    if (!same) {
        char want[160], got[160];
        pj_shape_str(t, rank, dims, want, sizeof want);
        pj_shape_str(b->dtype, b->rank, b->dims, got, sizeof got);
        return pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "%s: argument %d is %s, the program takes %s", e->name, i, got, want);
    }
    return NULL;
}

static int pj_donatable(const PJRT_ExecuteOptions *o, int64_t i)
{
    if (!o) return 1;
    for (size_t k = 0; o->non_donatable_input_indices && k < o->num_non_donatable_input_indices; k++)
        if (o->non_donatable_input_indices[k] == i) return 0;
    return 1;
}

/* A system of n devices for replicated runs, kept by the client (its threads stay between runs). */
static PJRT_Error *pj_system(PJRT_Client *c, int n, tpu_system **out)
{
    for (int i = 0; i < c->nsystems; i++)
        if (c->systems[i].ndev == n) return *out = c->systems[i].sys, NULL;
    char spec[96];
    if (n == c->ndev) snprintf(spec, sizeof spec, "%s", c->slice);
    else snprintf(spec, sizeof spec, "%d:%s", n, c->slice);
    tpu_system *sys = NULL;
    tpu_status st = tpu_system_new(c->ctx, spec, &sys);
    if (st) return pj_error_tpu(c->ctx, st, "tpusim: starting the simulated devices");
    if (c->nsystems == (int)(sizeof c->systems / sizeof c->systems[0])) {   /* forget the oldest */
        tpu_system_free(c->systems[0].sys);
        memmove(c->systems, c->systems + 1, sizeof c->systems - sizeof c->systems[0]);
        c->nsystems--;
    }
    c->systems[c->nsystems++] = (pj_system_slot){n, sys};
    *out = sys;
    return NULL;
}

/* ---- host transfers: the framework's send and recv callbacks of this execution ---- */

static PJRT_Error *pj_callback_error(PJRT_Error_Code code, const char *msg, size_t n)
{
    return pj_error(code, "%.*s", (int)n, msg ? msg : "");
}

static void pj_chunk_free(void *data, void *arg)
{
    (void)arg;
    free(data);
}

/* A callback's error (made by pj_callback_error) as the run's error on ctx; the error is freed. */
static tpu_status pj_host_fail(tpu_ctx *ctx, PJRT_Error *e, const char *what, int64_t ch)
{
    const char *m;
    size_t n;
    m = ((pj_error_obj *)e)->msg;
    n = m ? strlen(m) : 0;
    tpu_status st = tpu_set_error(ctx, TPU_ERR_INVALID, "the host callback (%s, channel %lld) failed: %.*s", what,
                             (long long)ch, (int)n, m ? m : "");
    pj_error_free(e);
    return st;
}

tpu_status pj_host_send(void *user, tpu_ctx *ctx, int device, int64_t ch, const tpu_tensor *v)
{
    const pj_host *h = user;
    for (size_t i = 0; h->o && h->o->send_callbacks && device < h->ndev && i < h->o->num_send_ops; i++) {
        PJRT_SendCallbackInfo *cb = &h->o->send_callbacks[device][i];
        if (cb->channel_id != ch) continue;
        size_t n = tpu_tensor_nbytes(v);
        PJRT_Chunk chunk = {.data = malloc(n ? n : 1), .size = n, .deleter = pj_chunk_free};
        if (!chunk.data) return tpu_set_error(ctx, TPU_ERR_NOMEM, "out of host memory for a host transfer");
        memcpy(chunk.data, tpu_tensor_cdata(v), n);
        PJRT_CallbackError errfn = pj_callback_error;
        PJRT_Error *e = cb->send_callback(&chunk, &errfn, n, true, cb->user_arg);
        return e ? pj_host_fail(ctx, e, "send", ch) : TPU_OK;
    }
    return tpu_set_error(ctx, TPU_ERR_INVALID, "the program sends to the host on channel %lld, but the framework gave no "
                    "send callback for it", (long long)ch);
}

static void pj_stream_unref(PJRT_CopyToDeviceStream *s)
{
    pthread_mutex_lock(&s->mu);
    int last = --s->refs == 0;
    pthread_mutex_unlock(&s->mu);
    if (!last) return;
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

tpu_status pj_host_recv(void *user, tpu_ctx *ctx, int device, int64_t ch, tpu_tensor *v)
{
    const pj_host *h = user;
    for (size_t i = 0; h->o && h->o->recv_callbacks && device < h->ndev && i < h->o->num_recv_ops; i++) {
        PJRT_RecvCallbackInfo *cb = &h->o->recv_callbacks[device][i];
        if (cb->channel_id != ch) continue;
        PJRT_CopyToDeviceStream *s = calloc(1, sizeof *s);
        if (!s) return tpu_set_error(ctx, TPU_ERR_NOMEM, "out of host memory for a host transfer");
        pthread_mutex_init(&s->mu, NULL);
        pthread_cond_init(&s->cv, NULL);
        s->refs = 2;
        s->dst = tpu_tensor_data(v);
        s->total = (int64_t)tpu_tensor_nbytes(v);
        cb->recv_callback(s, cb->user_arg);
        /* the framework answers once the host function has run (it zero-fills the result if that failed,
         * and the send reported the failure already) */
        pthread_mutex_lock(&s->mu);
        while (s->current < s->total) pthread_cond_wait(&s->cv, &s->mu);
        s->dst = NULL;
        pthread_mutex_unlock(&s->mu);
        pj_stream_unref(s);
        return TPU_OK;
    }
    return tpu_set_error(ctx, TPU_ERR_INVALID, "the program receives from the host on channel %lld, but the framework gave "
                    "no recv callback for it", (long long)ch);
}

PJRT_Error *pjx_PJRT_CopyToDeviceStream_AddChunk(PJRT_CopyToDeviceStream_AddChunk_Args *a)
{
    PJ_NEED(a, PJRT_CopyToDeviceStream_AddChunk_Args, transfer_complete);
    PJRT_CopyToDeviceStream *s = a->stream;
    PJRT_Chunk *c = a->chunk;
    PJRT_Error *err = NULL;
    pthread_mutex_lock(&s->mu);
    if (!s->dst || (int64_t)c->size > s->total - s->current)
        err = pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "CopyToDeviceStream: a chunk of %zu bytes where %lld remain",
                       c->size, (long long)(s->total - s->current));
    else {
        memcpy(s->dst + s->current, c->data, c->size);
        s->current += (int64_t)c->size;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    if (c->deleter) c->deleter(c->data, c->deleter_arg);
    a->transfer_complete = pj_event_ready(err);
    return err;
}

PJRT_Error *pjx_PJRT_CopyToDeviceStream_Destroy(PJRT_CopyToDeviceStream_Destroy_Args *a)
{
    PJ_NEED(a, PJRT_CopyToDeviceStream_Destroy_Args, stream);
    if (a->stream) pj_stream_unref(a->stream);
    return NULL;
}

PJRT_Error *pjx_PJRT_CopyToDeviceStream_TotalBytes(PJRT_CopyToDeviceStream_TotalBytes_Args *a)
{
    PJ_NEED(a, PJRT_CopyToDeviceStream_TotalBytes_Args, total_bytes);
    a->total_bytes = a->stream->total;
    return NULL;
}

PJRT_Error *pjx_PJRT_CopyToDeviceStream_GranuleSize(PJRT_CopyToDeviceStream_GranuleSize_Args *a)
{
    PJ_NEED(a, PJRT_CopyToDeviceStream_GranuleSize_Args, granule_size_in_bytes);
    a->granule_size_in_bytes = a->stream->total > 0 ? a->stream->total : 1;
    return NULL;
}

PJRT_Error *pjx_PJRT_CopyToDeviceStream_CurrentBytes(PJRT_CopyToDeviceStream_CurrentBytes_Args *a)
{
    PJ_NEED(a, PJRT_CopyToDeviceStream_CurrentBytes_Args, current_bytes);
    pthread_mutex_lock(&a->stream->mu);
    a->current_bytes = a->stream->current;
    pthread_mutex_unlock(&a->stream->mu);
    return NULL;
}

/* Runs e on its n devices: ins[d] are device d's argument tensors; outs[d] receive its results. */
static PJRT_Error *pj_run(PJRT_Executable *e, int n, tpu_tensor ***ins, tpu_tensor ***outs, const PJRT_ExecuteOptions *xo)
{
    PJRT_Client *c = e->client;
    tpu_run_opts o = tpu_run_opts_default();
    o.numerics = e->numerics;
    o.threads = c->threads;
    o.max_steps = c->max_steps;
    o.max_seconds = c->max_seconds;
    pj_host host = {xo, n};
    tpu_host_io hio = {&host, pj_host_send, pj_host_recv};
    if (xo && (xo->num_send_ops || xo->num_recv_ops)) o.host = &hio;
    tpu_ctx *ctx = tpu_ctx_new();
    if (!ctx) return pj_nomem();
    PJRT_Error *err = NULL;
    int nout = 0;
    if (n == 1) {
        tpu_status st = tpu_run(ctx, e->m, &o, ins[0], e->ninputs, &outs[0], &nout);
        if (st) err = pj_error_tpu(ctx, st, e->name);
    } else {
        pthread_mutex_lock(&c->run_mu);
        tpu_system *sys = NULL;
        pthread_mutex_lock(&c->mu);
        err = pj_system(c, n, &sys);
        pthread_mutex_unlock(&c->mu);
        tpu_status st = TPU_OK;
        if (!err) st = tpu_system_set_split(ctx, sys, e->nreplicas, e->npartitions);
        if (!err && !st) st = tpu_system_run(ctx, sys, e->m, &o, (tpu_tensor **const *)ins, e->ninputs, outs, &nout);
        if (!err && st) err = pj_error_tpu(ctx, st, e->name);
        pthread_mutex_unlock(&c->run_mu);
    }
    if (!err && nout != e->noutputs - e->ntoken_outputs)   /* the executor returns no tensor for a token */
        err = pj_error(PJRT_Error_Code_INTERNAL, "%s: %d results where the program declares %d", e->name, nout,
                       e->noutputs - e->ntoken_outputs);
    tpu_ctx_free(ctx);
    return err;
}

/* A token output: an empty TOKEN buffer (what a framework passes back in as the next token). */
static PJRT_Error *pj_token(PJRT_Device *dev, PJRT_Buffer **out)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_tensor *t = NULL;
    int64_t zero = 0;
    /* no data: held as an empty array, reported as a TOKEN */
    tpu_status st = ctx ? tpu_tensor_new(ctx, TPU_PRED, 1, &zero, &t) : TPU_ERR_NOMEM;
    PJRT_Error *err = st ? pj_error_tpu(ctx, st, "token") : pj_buffer_wrap(dev, t, out);
    tpu_ctx_free(ctx);
    if (!err) {
        (*out)->dtype = TPU_TOKEN;
        (*out)->rank = 0;
    }
    return err;
}

/* Wraps device d's results as buffers, after its donated arguments gave their memory up. res holds the
 * executor's results, which have no entry for token outputs. */
static PJRT_Error *pj_outputs(PJRT_Executable *e, PJRT_Device *dev, tpu_tensor **res, PJRT_Buffer **out)
{
    PJRT_Error *err = NULL;
    for (int i = 0, r = 0; i < e->noutputs; i++) {
        out[i] = NULL;
        if (e->out_types[i] == PJRT_Buffer_Type_TOKEN) {
            if (!err) err = pj_token(dev, &out[i]);
            continue;
        }
        if (err) {
            tpu_tensor_free(res[r]);
        } else {
            err = pj_buffer_wrap(dev, res[r], &out[i]);
            if (err) out[i] = NULL;
        }
        res[r++] = NULL;
    }
    if (err)
        for (int i = 0; i < e->noutputs; i++)
            if (out[i]) {
                pj_buffer_release(out[i]);
                free(out[i]);
                out[i] = NULL;
            }
    return err;
}

static void pj_donate(PJRT_Executable *e, const PJRT_ExecuteOptions *o, PJRT_Buffer *const *args)
{
    for (int i = 0; i < e->noutputs; i++) {
        int k = e->alias_of[i];
        if (k < 0 || !pj_donatable(o, k) || !args[k] || args[k]->deleted) continue;
        pj_buffer_release(args[k]);
        args[k]->deleted = args[k]->donated = 1;
    }
}

PJRT_Error *pj_execute(PJRT_LoadedExecutable_Execute_Args *a)
{
    PJRT_LoadedExecutable *le = a->executable;
    PJRT_Executable *e = le->exe;
    if (le->deleted) return pj_error(PJRT_Error_Code_FAILED_PRECONDITION, "%s: the executable was deleted", e->name);
    int n = (int)a->num_devices;
    PJRT_Device *const *devs = le->devices;
    PJRT_Device *one[1];
    if (a->execute_device) {   /* a portable run on the device the caller names */
        if (le->ndevices != 1 || n != 1)
            return pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "%s: runs on %d devices, cannot run on one named device", e->name, le->ndevices);
        one[0] = a->execute_device;
        devs = one;
    } else if (n != le->ndevices) {
        return pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "%s: compiled for %d device%s, executed with arguments for %d",
                        e->name, le->ndevices, le->ndevices == 1 ? "" : "s", n);
    }
    if ((int)a->num_args != e->ninputs)
        return pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "%s takes %d argument%s, got %zu", e->name, e->ninputs,
                        e->ninputs == 1 ? "" : "s", a->num_args);
    for (int d = 0; d < n; d++)
        for (int i = 0; i < e->ninputs; i++) {
            PJRT_Error *err = pj_check_arg(e, a->argument_lists[d][i], devs[d], i);
            if (err) return err;
        }
    if (e->client->remote) return pj_remote_execute(a, devs, n);
    tpu_tensor ***ins = calloc((size_t)n, sizeof *ins), ***outs = calloc((size_t)n, sizeof *outs);
    tpu_tensor **flat = calloc((size_t)n * (size_t)(e->ninputs + 1), sizeof *flat);
    PJRT_Error *err = !ins || !outs || !flat ? pj_nomem() : NULL;
    for (int d = 0; !err && d < n; d++) {
        ins[d] = flat + (size_t)d * (size_t)(e->ninputs + 1);
        for (int i = 0; i < e->ninputs; i++) ins[d][i] = a->argument_lists[d][i]->t;
    }
    if (!err) err = pj_dist_spans(le) ? pj_dist_run(le, ins, outs, a->options) : pj_run(e, n, ins, outs, a->options);
    if (!err) {
        for (int d = 0; d < n; d++) pj_donate(e, a->options, a->argument_lists[d]);
        int made = 0;
        for (; made < n && !err; made++) err = pj_outputs(e, devs[made], outs[made], a->output_lists[made]);
        for (int d = 0; err && d < made - 1; d++)   /* the devices before the one that failed */
            for (int i = 0; i < e->noutputs; i++) {
                pj_buffer_release(a->output_lists[d][i]);
                free(a->output_lists[d][i]);
                a->output_lists[d][i] = NULL;
            }
        for (int d = 0; !err && d < n && a->device_complete_events; d++) a->device_complete_events[d] = pj_event_ready(NULL);
    }
    if (n == 1) tpu_tensors_free(outs ? outs[0] : NULL, outs && outs[0] ? e->noutputs : 0);
    else if (outs) tpu_system_outputs_free(outs, n, e->noutputs);
    free(ins);
    free(outs);
    free(flat);
    if (!err) pj_report_execution(e->client, e);
    return err;
}
