/* service.c — the tpusim.v1.Tpu service and the health service: each method's request, decoded and validated
 * by decode.c, goes to the device host; the answer goes back as the method's response message. No gRPC here:
 * the server (server.c) hands each handler a call to receive and send messages on. */
#include "net/net.h"
#include "tpusim.pb-c.h"
#include "health.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One request message, decoded and validated. */
static ProtobufCMessage *tn_recv_req(tn_call *c, tn_method m, int first, tn_err *e)
{
    const uint8_t *buf;
    size_t len;
    int r = tn_call_recv(c, &buf, &len);
    if (r < 0) {
        tn_fail(e, TN_CANCELLED, "the client went away");
        return NULL;
    }
    if (r == 0) {
        tn_fail(e, TN_INVALID_ARGUMENT, "%s: no request message", tn_method_path(m));
        return NULL;
    }
    return tn_decode(m, buf, len, first, e);
}

static int tn_send(tn_call *c, const ProtobufCMessage *msg, tn_err *e)
{
    return tn_call_send(c, msg) ? tn_fail(e, TN_CANCELLED, "the client went away") : TN_OK;
}

/* ---- system info ---- */

static void tn_device_msg(tn_host *h, int d, Tpusim__V1__DeviceInfo *m, int32_t *coords)
{
    const tpu_device_info *in = tn_host_device(h, d);
    tpusim__v1__device_info__init(m);
    m->id = in->id;
    m->chip = in->chip;
    m->core_on_chip = in->core_on_chip;
    for (int k = 0; k < 3; k++) coords[k] = in->coords[k];
    m->coords = coords;
    m->n_coords = 3;
    m->host = in->host;
    m->cores = in->cores;
    m->hbm_bytes = in->hbm_bytes;
    m->hbm_in_use = tn_host_device_in_use(h, d);
    m->kind = (char *)in->kind;
}

/* Fills *si; the arrays it points to are malloc'ed in *mem (free it). */
static int tn_system_info(tn_service *svc, Tpusim__V1__SystemInfo *si, void **mem)
{
    tn_host *h = svc->host;
    int n = tn_host_num_devices(h);
    size_t need = (size_t)n * (sizeof(Tpusim__V1__DeviceInfo) + sizeof(Tpusim__V1__DeviceInfo *) + 3 * sizeof(int32_t));
    char *p = *mem = calloc(1, need);
    if (!p) return TN_RESOURCE_EXHAUSTED;
    Tpusim__V1__DeviceInfo *devs = (void *)p;
    Tpusim__V1__DeviceInfo **ptrs = (void *)(devs + n);
    int32_t *coords = (void *)(ptrs + n);
    for (int d = 0; d < n; d++) {
        tn_device_msg(h, d, &devs[d], coords + 3 * d);
        ptrs[d] = &devs[d];
    }
    tn_host_status st;
    tn_host_get_status(h, &st);
    tpusim__v1__system_info__init(si);
    si->slice = (char *)tn_host_slice(h);
    si->version = "tpusim " TPUSIM_VERSION;
    si->name = svc->name;
    si->num_cores = tpu_chip_num_cores(tn_host_chip(h));
    si->num_chips = tpu_chip_num_chips(tn_host_chip(h));
    si->num_hosts = tpu_chip_num_hosts(tn_host_chip(h));
    si->devices = ptrs;
    si->n_devices = (size_t)n;
    si->sessions = st.sessions;
    si->state = st.running ? "BUSY" : "READY";
    si->numerics = tn_host_numerics(h) == TPU_NUMERICS_EXACT ? "exact" : "tpu";
    si->chip_spec = (char *)tn_host_spec(h);
    return TN_OK;
}

static int tn_h_system_info(tn_service *svc, tn_call *c, tn_err *e)
{
    ProtobufCMessage *req = tn_recv_req(c, TN_M_SYSTEM_INFO, 1, e);
    if (!req) return e->code;
    tn_msg_free(req);
    Tpusim__V1__SystemInfo si;
    void *mem = NULL;
    int rc = tn_system_info(svc, &si, &mem) ? tn_fail(e, TN_RESOURCE_EXHAUSTED, "out of host memory") : tn_send(c, &si.base, e);
    free(mem);
    return rc;
}

int tn_service_open_session(tn_service *svc, const uint8_t *buf, size_t len, char id[TN_SESSION_ID_LEN + 1],
                            uint8_t **event, size_t *event_len, tn_err *e)
{
    Tpusim__V1__OpenSessionRequest *r = (void *)tn_decode(TN_M_OPEN_SESSION, buf, len, 1, e);
    if (!r) return e->code;
    int rc = tn_host_session_open(svc->host, r->client, id, e);
    tn_msg_free(&r->base);
    if (rc) return rc;
    Tpusim__V1__SessionEvent ev = TPUSIM__V1__SESSION_EVENT__INIT;
    Tpusim__V1__SystemInfo si;
    void *mem = NULL;
    ev.session = id;
    ev.system = &si;
    ev.message = "session open";
    rc = tn_system_info(svc, &si, &mem);
    *event = rc ? NULL : tn_msg_pack(&ev.base, event_len);
    free(mem);
    if (!*event) {
        tn_host_session_close(svc->host, id, "out of memory");
        return tn_fail(e, TN_RESOURCE_EXHAUSTED, "out of host memory");
    }
    return TN_OK;
}

/* ---- compile ---- */

static int tn_h_compile(tn_service *svc, tn_call *c, tn_err *e)
{
    Tpusim__V1__CompileRequest *r = (void *)tn_recv_req(c, TN_M_COMPILE, 1, e);
    if (!r) return e->code;
    tn_compile_req cr = {.program = (const char *)r->program.data, .len = r->program.len, .replicas = r->num_replicas,
                         .partitions = r->num_partitions, .assignment = r->device_assignment,
                         .nassignment = (int)r->n_device_assignment,
                         .numerics = !strcmp(r->numerics, "tpu") ? 0 : !strcmp(r->numerics, "exact") ? 1 : -1};
    tn_compile_info info;
    int rc = tn_host_compile(svc->host, r->session, &cr, &info, e);
    tn_msg_free(&r->base);
    if (rc) return rc;
    Tpusim__V1__CompileResponse resp = TPUSIM__V1__COMPILE_RESPONSE__INIT;
    Tpusim__V1__MemoryStats ms = TPUSIM__V1__MEMORY_STATS__INIT;
    ms.argument_bytes = info.mem.argument_bytes, ms.output_bytes = info.mem.output_bytes;
    ms.alias_bytes = info.mem.alias_bytes, ms.temp_bytes = info.mem.temp_bytes, ms.peak_bytes = info.mem.peak_bytes;
    ms.unpadded_bytes = info.mem.unpadded_bytes, ms.capacity_bytes = info.mem.capacity_bytes;
    ms.reserved_bytes = info.mem.reserved_bytes;
    resp.executable = info.id;
    resp.name = info.name;
    resp.num_inputs = info.ninputs;
    resp.num_outputs = info.noutputs;
    resp.memory = &ms;
    return tn_send(c, &resp.base, e);
}

/* ---- buffers ---- */

static void tn_buffer_msg(const tn_buffer_info *in, Tpusim__V1__BufferInfo *m)
{
    tpusim__v1__buffer_info__init(m);
    m->buffer = in->id;
    m->device = in->device;
    m->dtype = (char *)tpu_dtype_name(in->dtype);
    m->dims = (int64_t *)in->dims;
    m->n_dims = (size_t)in->rank;
    m->hbm_bytes = in->hbm_bytes;
}

/* A header (with perhaps the first data), then data chunks until total_bytes have arrived. */
static int tn_h_put(tn_service *svc, tn_call *c, tn_err *e)
{
    Tpusim__V1__PutBufferRequest *r = (void *)tn_recv_req(c, TN_M_PUT_BUFFER, 1, e);
    if (!r) return e->code;
    tn_put *p = NULL;
    int rc = tn_host_put_begin(svc->host, r->session, r->device, tn_array_dtype(r->dtype), (int)r->n_dims, r->dims,
                               r->total_bytes, &p, e);
    if (!rc) rc = tn_host_put_data(p, r->data.data, r->data.len, e);
    tn_msg_free(&r->base);
    /* at most one message per chunk of the array, and one more for the end */
    for (int64_t msgs = 0; !rc; msgs++) {
        const uint8_t *buf;
        size_t len;
        int got = tn_call_recv(c, &buf, &len);
        if (got < 0) rc = tn_fail(e, TN_CANCELLED, "PutBuffer: the client went away mid-transfer");
        if (got <= 0) break;
        Tpusim__V1__PutBufferRequest *d = (void *)tn_decode(TN_M_PUT_BUFFER, buf, len, 0, e);
        if (!d) rc = e->code;
        else if (d->data.len == 0) rc = tn_fail(e, TN_INVALID_ARGUMENT, "PutBufferRequest.data: an empty chunk (message %lld)", (long long)msgs + 1);
        else rc = tn_host_put_data(p, d->data.data, d->data.len, e);
        tn_msg_free(d ? &d->base : NULL);
    }
    if (rc) {
        tn_host_put_abort(p);
        return rc;
    }
    tn_buffer_info info;
    rc = tn_host_put_finish(p, &info, e);
    if (rc) return rc;
    Tpusim__V1__BufferInfo m;
    tn_buffer_msg(&info, &m);
    return tn_send(c, &m.base, e);
}

static int tn_h_get(tn_service *svc, tn_call *c, tn_err *e)
{
    Tpusim__V1__GetBufferRequest *r = (void *)tn_recv_req(c, TN_M_GET_BUFFER, 1, e);
    if (!r) return e->code;
    int64_t chunk = r->max_chunk > 0 ? r->max_chunk : svc->chunk > 0 ? svc->chunk : TN_CHUNK;
    tn_get *g = NULL;
    const void *data;
    size_t n;
    int rc = tn_host_get_begin(svc->host, r->session, r->buffer, &g, &data, &n, e);
    tn_msg_free(&r->base);
    if (rc) return rc;
    size_t off = 0;
    do {   /* one message even for an empty array */
        size_t k = n - off < (size_t)chunk ? n - off : (size_t)chunk;
        Tpusim__V1__BufferChunk m = TPUSIM__V1__BUFFER_CHUNK__INIT;
        m.total_bytes = off == 0 ? (int64_t)n : 0;
        m.data.data = (uint8_t *)data + off;
        m.data.len = k;
        rc = tn_send(c, &m.base, e);
        off += k;
    } while (!rc && off < n);
    tn_host_get_end(g);
    return rc;
}

/* ---- execute ---- */

typedef struct tn_exec_msg {
    Tpusim__V1__ExecuteResponse resp;
    Tpusim__V1__OutputList     *lists, **lp;
    Tpusim__V1__BufferInfo     *bi, **bp;
} tn_exec_msg;

static void tn_exec_msg_free(tn_exec_msg *m)
{
    free(m->lists);
    free(m->lp);
    free(m->bi);
    free(m->bp);
}

/* The ExecuteResponse of a run (pointing into res). */
static int tn_exec_msg_make(const tn_exec_result *res, tn_exec_msg *m)
{
    int n = res->ndevices, k = res->noutputs;
    memset(m, 0, sizeof *m);
    tpusim__v1__execute_response__init(&m->resp);
    m->lists = calloc((size_t)n + 1, sizeof *m->lists);
    m->lp = calloc((size_t)n + 1, sizeof *m->lp);
    m->bi = calloc((size_t)n * (size_t)k + 1, sizeof *m->bi);
    m->bp = calloc((size_t)n * (size_t)k + 1, sizeof *m->bp);
    if (!m->lists || !m->lp || !m->bi || !m->bp) return tn_exec_msg_free(m), -1;
    for (int d = 0; d < n; d++) {
        tpusim__v1__output_list__init(&m->lists[d]);
        for (int i = 0; i < k; i++) {
            tn_buffer_msg(&res->outputs[d * k + i], &m->bi[d * k + i]);
            m->bp[d * k + i] = &m->bi[d * k + i];
        }
        m->lists[d].outputs = m->bp + (size_t)d * (size_t)k;
        m->lists[d].n_outputs = (size_t)k;
        m->lp[d] = &m->lists[d];
    }
    m->resp.results = m->lp;
    m->resp.n_results = (size_t)n;
    m->resp.donated = res->donated;
    m->resp.n_donated = (size_t)res->ndonated;
    m->resp.run_seconds = res->run_s;
    return 0;
}

/* Results the client will never know about (it went away): dropped. */
static void tn_exec_drop(tn_service *svc, const char *session, const tn_exec_result *res)
{
    int dropped, n = res->ndevices * res->noutputs;
    uint64_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
    for (int i = 0; ids && i < n; i++) ids[i] = res->outputs[i].id;
    if (ids) tn_host_delete(svc->host, session, ids, n, NULL, 0, &dropped, NULL);
    free(ids);
}

/* The request's handles as the host takes them (args: malloc'ed). */
static int tn_exec_unpack(const Tpusim__V1__ExecuteRequest *r, tn_exec_req *xr, uint64_t **args, int *devs, tn_err *e)
{
    int n = (int)r->n_arguments, k = (int)r->arguments[0]->n_buffers;
    *args = calloc((size_t)n * (size_t)k + 1, sizeof **args);
    if (!*args) return tn_fail(e, TN_RESOURCE_EXHAUSTED, "out of host memory");
    for (int d = 0; d < n; d++) {
        if (k) memcpy(*args + (size_t)d * (size_t)k, r->arguments[d]->buffers, (size_t)k * sizeof **args);
        if (r->n_devices) devs[d] = r->devices[d];
    }
    *xr = (tn_exec_req){.executable = r->executable, .ndevices = n, .nargs = k, .args = *args,
                        .devices = r->n_devices ? devs : NULL, .non_donatable = r->non_donatable,
                        .nnon_donatable = (int)r->n_non_donatable, .max_steps = r->max_steps, .max_seconds = r->max_seconds};
    return TN_OK;
}

static int tn_h_execute(tn_service *svc, tn_call *c, tn_err *e)
{
    Tpusim__V1__ExecuteRequest *r = (void *)tn_recv_req(c, TN_M_EXECUTE, 1, e);
    if (!r) return e->code;
    uint64_t *args = NULL;
    int devs[TN_MAX_DEVICES];
    tn_exec_req xr;
    tn_exec_result res;
    int rc = tn_exec_unpack(r, &xr, &args, devs, e);
    if (!rc) rc = tn_host_execute(svc->host, r->session, &xr, &res, e);
    if (!rc) {
        tn_exec_msg m;
        rc = tn_exec_msg_make(&res, &m) ? tn_fail(e, TN_RESOURCE_EXHAUSTED, "out of host memory") : tn_send(c, &m.resp.base, e);
        if (rc) tn_exec_drop(svc, r->session, &res);
        tn_exec_msg_free(&m);
        tn_exec_result_free(&res);
    }
    free(args);
    tn_msg_free(&r->base);
    return rc;
}

/* ---- execute with host transfers: the run on its own thread, this one reading the client's answers ---- */

#define TN_XS_PENDING 64

typedef struct tn_xs {
    tn_service     *svc;
    tn_call        *c;
    const char     *session;
    tn_exec_req     xr;
    tn_exec_result  res;
    int             rc;
    tn_err          e;
    pthread_mutex_t send_mu;     /* one event at a time */
    pthread_mutex_t mu;          /* the answers below */
    pthread_cond_t  cv;
    int             gone;        /* no more answers will come */
    Tpusim__V1__ExecuteStreamRequest *answers[TN_XS_PENDING];
    int             nanswers;
} tn_xs;

static tpu_status tn_xs_event(tn_xs *x, tpu_ctx *ctx, int device, int64_t ch, const tpu_tensor *v, int recv)
{
    Tpusim__V1__HostTransfer t = TPUSIM__V1__HOST_TRANSFER__INIT;
    Tpusim__V1__ExecuteStreamEvent ev = TPUSIM__V1__EXECUTE_STREAM_EVENT__INIT;
    t.device = device;
    t.channel = ch;
    t.dtype = (char *)tpu_dtype_name(tpu_tensor_dtype(v));
    t.dims = (int64_t *)tpu_tensor_dims(v);
    t.n_dims = (size_t)tpu_tensor_rank(v);
    if (!recv) t.data.data = (uint8_t *)tpu_tensor_cdata(v), t.data.len = tpu_tensor_nbytes(v);
    if (recv) ev.recv = &t;
    else ev.send = &t;
    pthread_mutex_lock(&x->send_mu);
    int fail = tn_call_send(x->c, &ev.base);
    pthread_mutex_unlock(&x->send_mu);
    return fail ? tpu_set_error(ctx, TPU_ERR_IO, "the client went away during a host transfer (channel %lld)", (long long)ch) : TPU_OK;
}

static tpu_status tn_xs_send(void *user, tpu_ctx *ctx, int device, int64_t ch, const tpu_tensor *v)
{
    return tn_xs_event(user, ctx, device, ch, v, 0);
}

/* Asks the client for a recv's array and waits for its answer (matched by device and channel). */
static tpu_status tn_xs_recv(void *user, tpu_ctx *ctx, int device, int64_t ch, tpu_tensor *v)
{
    tn_xs *x = user;
    tpu_status st = tn_xs_event(x, ctx, device, ch, v, 1);
    if (st) return st;
    Tpusim__V1__ExecuteStreamRequest *a = NULL;
    pthread_mutex_lock(&x->mu);
    for (;;) {
        for (int i = 0; !a && i < x->nanswers; i++)
            if (x->answers[i]->host_data->device == device && x->answers[i]->host_data->channel == ch) {
                a = x->answers[i];
                x->answers[i] = x->answers[--x->nanswers];
            }
        if (a || x->gone) break;
        pthread_cond_wait(&x->cv, &x->mu);
    }
    pthread_mutex_unlock(&x->mu);
    if (!a) return tpu_set_error(ctx, TPU_ERR_IO, "the client went away before answering a host recv (channel %lld)", (long long)ch);
    size_t want = tpu_tensor_nbytes(v);
    if (a->host_data->data.len != want) st = tpu_set_error(ctx, TPU_ERR_INVALID, "ExecuteStreamRequest.host_data.data: %zu bytes for "
                                                           "a recv of %zu (channel %lld)", a->host_data->data.len, want, (long long)ch);
    else if (want) memcpy(tpu_tensor_data(v), a->host_data->data.data, want);
    tn_msg_free(&a->base);
    return st;
}

static void *tn_xs_run(void *arg)
{
    tn_xs *x = arg;
    tpu_host_io io = {x, tn_xs_send, tn_xs_recv};
    x->xr.host = &io;
    x->rc = tn_host_execute(x->svc->host, x->session, &x->xr, &x->res, &x->e);
    Tpusim__V1__ExecuteStreamEvent ev = TPUSIM__V1__EXECUTE_STREAM_EVENT__INIT;
    tn_exec_msg m;
    int made = !x->rc && !tn_exec_msg_make(&x->res, &m);
    ev.finished = 1;
    if (made) ev.result = &m.resp;
    pthread_mutex_lock(&x->send_mu);
    int fail = tn_call_send(x->c, &ev.base);
    pthread_mutex_unlock(&x->send_mu);
    if (!x->rc && (fail || !made)) {
        tn_exec_drop(x->svc, x->session, &x->res);
        x->rc = tn_fail(&x->e, made ? TN_CANCELLED : TN_RESOURCE_EXHAUSTED, made ? "the client went away" : "out of host memory");
    }
    if (made) tn_exec_msg_free(&m);
    if (!x->rc) tn_exec_result_free(&x->res);
    return NULL;
}

/* Reads the client's answers until it closes its side (after the finished event) or goes away. */
static void tn_xs_read(tn_xs *x)
{
    for (;;) {
        const uint8_t *buf;
        size_t len;
        if (tn_call_recv(x->c, &buf, &len) <= 0) break;
        tn_err de = {0};
        Tpusim__V1__ExecuteStreamRequest *a = (void *)tn_decode(TN_M_EXECUTE_STREAM, buf, len, 0, &de);
        tn_err_clear(&de);
        pthread_mutex_lock(&x->mu);
        int full = x->nanswers == TN_XS_PENDING;
        if (a && !full) x->answers[x->nanswers++] = a;
        pthread_cond_broadcast(&x->cv);
        pthread_mutex_unlock(&x->mu);
        if (!a || full) {   /* a client that breaks the protocol gets no more answers in */
            tn_msg_free(a ? &a->base : NULL);
            break;
        }
    }
    pthread_mutex_lock(&x->mu);
    x->gone = 1;
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
}

static int tn_h_execute_stream(tn_service *svc, tn_call *c, tn_err *e)
{
    Tpusim__V1__ExecuteStreamRequest *r = (void *)tn_recv_req(c, TN_M_EXECUTE_STREAM, 1, e);
    if (!r) return e->code;
    tn_xs x = {.svc = svc, .c = c, .session = r->execute->session};
    uint64_t *args = NULL;
    int devs[TN_MAX_DEVICES];
    int rc = tn_exec_unpack(r->execute, &x.xr, &args, devs, e);
    pthread_t th;
    pthread_mutex_init(&x.send_mu, NULL);
    pthread_mutex_init(&x.mu, NULL);
    pthread_cond_init(&x.cv, NULL);
    if (!rc && pthread_create(&th, NULL, tn_xs_run, &x)) rc = tn_fail(e, TN_RESOURCE_EXHAUSTED, "no thread for the run");
    if (!rc) {
        tn_xs_read(&x);
        pthread_join(th, NULL);
        rc = x.rc ? tn_fail(e, x.rc, "%s", tn_err_msg(&x.e)) : TN_OK;
    }
    for (int i = 0; i < x.nanswers; i++) tn_msg_free(&x.answers[i]->base);
    tn_err_clear(&x.e);
    pthread_mutex_destroy(&x.send_mu);
    pthread_mutex_destroy(&x.mu);
    pthread_cond_destroy(&x.cv);
    free(args);
    tn_msg_free(&r->base);
    return rc;
}

/* ---- delete, reports, health ---- */

static int tn_h_delete(tn_service *svc, tn_call *c, tn_err *e)
{
    Tpusim__V1__DeleteRequest *r = (void *)tn_recv_req(c, TN_M_DELETE, 1, e);
    if (!r) return e->code;
    int deleted = 0;
    int rc = tn_host_delete(svc->host, r->session, r->buffers, (int)r->n_buffers, r->executables, (int)r->n_executables,
                            &deleted, e);
    tn_msg_free(&r->base);
    if (rc) return rc;
    Tpusim__V1__DeleteResponse resp = TPUSIM__V1__DELETE_RESPONSE__INIT;
    resp.deleted = deleted;
    return tn_send(c, &resp.base, e);
}

static int tn_h_memory(tn_service *svc, tn_call *c, tn_err *e)
{
    ProtobufCMessage *req = tn_recv_req(c, TN_M_MEMORY_REPORT, 1, e);
    if (!req) return e->code;
    tn_msg_free(req);
    tn_session_memory *sm = NULL;
    int ns = 0, nd = tn_host_num_devices(svc->host);
    char *text = NULL;
    Tpusim__V1__SystemInfo si;
    void *mem = NULL;
    if (tn_host_memory_report(svc->host, &sm, &ns, &text) || tn_system_info(svc, &si, &mem)) {
        free(sm);
        free(text);
        return tn_fail(e, TN_RESOURCE_EXHAUSTED, "out of host memory");
    }
    Tpusim__V1__SessionMemory *ms = calloc((size_t)ns + 1, sizeof *ms);
    Tpusim__V1__SessionMemory **mp = calloc((size_t)ns + 1, sizeof *mp);
    int rc = !ms || !mp ? tn_fail(e, TN_RESOURCE_EXHAUSTED, "out of host memory") : TN_OK;
    for (int i = 0; !rc && i < ns; i++) {
        tpusim__v1__session_memory__init(&ms[i]);
        sm[i].id[8] = 0;   /* the id names the session to its client only: a prefix is shown */
        ms[i].session = sm[i].id;
        ms[i].client = sm[i].client;
        ms[i].buffers = sm[i].buffers;
        ms[i].executables = sm[i].executables;
        ms[i].hbm_bytes = sm[i].hbm;
        ms[i].n_hbm_bytes = (size_t)(nd < 64 ? nd : 64);
        ms[i].idle_seconds = sm[i].idle_s;
        mp[i] = &ms[i];
    }
    if (!rc) {
        Tpusim__V1__MemoryReportResponse resp = TPUSIM__V1__MEMORY_REPORT_RESPONSE__INIT;
        resp.devices = si.devices;
        resp.n_devices = si.n_devices;
        resp.sessions = mp;
        resp.n_sessions = (size_t)ns;
        resp.text = text;
        rc = tn_send(c, &resp.base, e);
    }
    free(ms);
    free(mp);
    free(sm);
    free(text);
    free(mem);
    return rc;
}

static int tn_h_profile(tn_service *svc, tn_call *c, tn_err *e)
{
    Tpusim__V1__ProfileReportRequest *r = (void *)tn_recv_req(c, TN_M_PROFILE_REPORT, 1, e);
    if (!r) return e->code;
    tn_profile_info p;
    int rc = tn_host_profile(svc->host, r->session, r->executable, r->top, &p, e);
    tn_msg_free(&r->base);
    if (rc) return rc;
    Tpusim__V1__ProfileReportResponse resp = TPUSIM__V1__PROFILE_REPORT_RESPONSE__INIT;
    resp.step_seconds = p.step_s;
    resp.mxu_utilization = p.mxu_util;
    resp.bound = p.bound;
    resp.summary = p.summary;
    resp.advice = p.advice;
    resp.json = p.json;
    rc = tn_send(c, &resp.base, e);
    tn_profile_info_free(&p);
    return rc;
}

static int tn_h_health(tn_service *svc, tn_method m, tn_call *c, tn_err *e)
{
    (void)svc;
    Grpc__Health__V1__HealthCheckRequest *r = (void *)tn_recv_req(c, m, 1, e);
    if (!r) return e->code;
    int known = !*r->service || !strcmp(r->service, "tpusim.v1.Tpu");
    tn_msg_free(&r->base);
    if (!known) return tn_fail(e, TN_NOT_FOUND, "HealthCheckRequest.service: unknown service (this server has \"\" and tpusim.v1.Tpu)");
    Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    resp.status = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
    /* Watch: the status once; the server's state does not change while it serves */
    return tn_send(c, &resp.base, e);
}

int tn_service_handle(tn_service *svc, tn_method m, tn_call *c, tn_err *e)
{
    switch (m) {
    case TN_M_SYSTEM_INFO: return tn_h_system_info(svc, c, e);
    case TN_M_COMPILE: return tn_h_compile(svc, c, e);
    case TN_M_PUT_BUFFER: return tn_h_put(svc, c, e);
    case TN_M_GET_BUFFER: return tn_h_get(svc, c, e);
    case TN_M_EXECUTE: return tn_h_execute(svc, c, e);
    case TN_M_EXECUTE_STREAM: return tn_h_execute_stream(svc, c, e);
    case TN_M_DELETE: return tn_h_delete(svc, c, e);
    case TN_M_MEMORY_REPORT: return tn_h_memory(svc, c, e);
    case TN_M_PROFILE_REPORT: return tn_h_profile(svc, c, e);
    case TN_M_HEALTH_CHECK:
    case TN_M_HEALTH_WATCH: return tn_h_health(svc, m, c, e);
    case TN_M_OPEN_SESSION:
    case TN_M_COUNT: break;
    }
    return tn_fail(e, TN_UNIMPLEMENTED, "%s: not served here", tn_method_path(m));
}
