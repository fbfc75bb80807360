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

static int tn_exec_send(tn_call *c, const tn_exec_result *res, tn_err *e)
{
    int n = res->ndevices, k = res->noutputs;
    Tpusim__V1__ExecuteResponse resp = TPUSIM__V1__EXECUTE_RESPONSE__INIT;
    Tpusim__V1__OutputList *lists = calloc((size_t)n + 1, sizeof *lists);
    Tpusim__V1__OutputList **lp = calloc((size_t)n + 1, sizeof *lp);
    Tpusim__V1__BufferInfo *bi = calloc((size_t)n * (size_t)k + 1, sizeof *bi);
    Tpusim__V1__BufferInfo **bp = calloc((size_t)n * (size_t)k + 1, sizeof *bp);
    int rc = !lists || !lp || !bi || !bp ? tn_fail(e, TN_RESOURCE_EXHAUSTED, "out of host memory") : TN_OK;
    for (int d = 0; !rc && d < n; d++) {
        tpusim__v1__output_list__init(&lists[d]);
        for (int i = 0; i < k; i++) {
            tn_buffer_msg(&res->outputs[d * k + i], &bi[d * k + i]);
            bp[d * k + i] = &bi[d * k + i];
        }
        lists[d].outputs = bp + (size_t)d * (size_t)k;
        lists[d].n_outputs = (size_t)k;
        lp[d] = &lists[d];
    }
    if (!rc) {
        resp.results = lp;
        resp.n_results = (size_t)n;
        resp.donated = res->donated;
        resp.n_donated = (size_t)res->ndonated;
        resp.run_seconds = res->run_s;
        rc = tn_send(c, &resp.base, e);
    }
    free(lists);
    free(lp);
    free(bi);
    free(bp);
    return rc;
}

static int tn_h_execute(tn_service *svc, tn_call *c, tn_err *e)
{
    Tpusim__V1__ExecuteRequest *r = (void *)tn_recv_req(c, TN_M_EXECUTE, 1, e);
    if (!r) return e->code;
    int n = (int)r->n_arguments, k = (int)r->arguments[0]->n_buffers;
    uint64_t *args = calloc((size_t)n * (size_t)k + 1, sizeof *args);
    int devs[TN_MAX_DEVICES];
    int rc = args ? TN_OK : tn_fail(e, TN_RESOURCE_EXHAUSTED, "out of host memory");
    for (int d = 0; !rc && d < n; d++) {
        memcpy(args + (size_t)d * (size_t)k, r->arguments[d]->buffers, (size_t)k * sizeof *args);
        if (r->n_devices) devs[d] = r->devices[d];
    }
    tn_exec_req xr = {.executable = r->executable, .ndevices = n, .nargs = k, .args = args,
                      .devices = r->n_devices ? devs : NULL, .non_donatable = r->non_donatable,
                      .nnon_donatable = (int)r->n_non_donatable};
    tn_exec_result res;
    if (!rc) rc = tn_host_execute(svc->host, r->session, &xr, &res, e);
    if (!rc) {
        rc = tn_exec_send(c, &res, e);
        if (rc) {   /* the client will never know these handles: drop them */
            int dropped;
            uint64_t *ids = malloc(((size_t)res.ndevices * (size_t)res.noutputs + 1) * sizeof *ids);
            for (int i = 0; ids && i < res.ndevices * res.noutputs; i++) ids[i] = res.outputs[i].id;
            if (ids) tn_host_delete(svc->host, r->session, ids, res.ndevices * res.noutputs, NULL, 0, &dropped, NULL);
            free(ids);
        }
        tn_exec_result_free(&res);
    }
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
