/* decode.c — every request the server receives is decoded and validated here before anything touches the
 * device host: counts, sizes and ranges are checked, and errors name the request's field
 * ("CompileRequest.num_partitions: -2 ..."). This is the fuzz target's entry point (fuzz/fuzz_net.c). */
#include "net/net.h"
#include "tpusim.pb-c.h"
#include "health.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const tn_paths[TN_M_COUNT] = {
    [TN_M_OPEN_SESSION] = "/tpusim.v1.Tpu/OpenSession",   [TN_M_SYSTEM_INFO] = "/tpusim.v1.Tpu/GetSystemInfo",
    [TN_M_COMPILE] = "/tpusim.v1.Tpu/Compile",            [TN_M_PUT_BUFFER] = "/tpusim.v1.Tpu/PutBuffer",
    [TN_M_GET_BUFFER] = "/tpusim.v1.Tpu/GetBuffer",       [TN_M_EXECUTE] = "/tpusim.v1.Tpu/Execute",
    [TN_M_DELETE] = "/tpusim.v1.Tpu/Delete",              [TN_M_MEMORY_REPORT] = "/tpusim.v1.Tpu/MemoryReport",
    [TN_M_PROFILE_REPORT] = "/tpusim.v1.Tpu/ProfileReport", [TN_M_HEALTH_CHECK] = "/grpc.health.v1.Health/Check",
    [TN_M_HEALTH_WATCH] = "/grpc.health.v1.Health/Watch",     [TN_M_EXECUTE_STREAM] = "/tpusim.v1.Tpu/ExecuteStream",
};

static const ProtobufCMessageDescriptor *const tn_req_desc[TN_M_COUNT] = {
    [TN_M_OPEN_SESSION] = &tpusim__v1__open_session_request__descriptor,
    [TN_M_SYSTEM_INFO] = &tpusim__v1__system_info_request__descriptor,
    [TN_M_COMPILE] = &tpusim__v1__compile_request__descriptor,
    [TN_M_PUT_BUFFER] = &tpusim__v1__put_buffer_request__descriptor,
    [TN_M_GET_BUFFER] = &tpusim__v1__get_buffer_request__descriptor,
    [TN_M_EXECUTE] = &tpusim__v1__execute_request__descriptor,
    [TN_M_DELETE] = &tpusim__v1__delete_request__descriptor,
    [TN_M_MEMORY_REPORT] = &tpusim__v1__memory_report_request__descriptor,
    [TN_M_PROFILE_REPORT] = &tpusim__v1__profile_report_request__descriptor,
    [TN_M_HEALTH_CHECK] = &grpc__health__v1__health_check_request__descriptor,
    [TN_M_HEALTH_WATCH] = &grpc__health__v1__health_check_request__descriptor,
    [TN_M_EXECUTE_STREAM] = &tpusim__v1__execute_stream_request__descriptor,
};

int tn_method_from_path(const char *path, size_t len)
{
    for (int m = 0; m < TN_M_COUNT; m++)
        if (strlen(tn_paths[m]) == len && !memcmp(tn_paths[m], path, len)) return m;
    return -1;
}

const char *tn_method_path(tn_method m) { return m < TN_M_COUNT ? tn_paths[m] : "?"; }

void tn_msg_free(ProtobufCMessage *msg)
{
    if (msg) protobuf_c_message_free_unpacked(msg, NULL);
}

uint8_t *tn_msg_pack(const ProtobufCMessage *msg, size_t *len)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) return NULL;
    *len = protobuf_c_message_pack(msg, buf);
    return buf;
}

tpu_dtype tn_array_dtype(const char *name)
{
    if (!name) return TPU_INVALID;
    tpu_dtype t = tpu_dtype_from_name(name, strlen(name));
    char k = tpu_dtype_kind(t);
    return k == 'o' ? TPU_INVALID : t;
}

int tn_check_session(const char *id, tn_err *e)
{
    size_t n = id ? strlen(id) : 0;
    int ok = n == TN_SESSION_ID_LEN;
    for (size_t i = 0; ok && i < n; i++) ok = (id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f');
    if (ok) return TN_OK;
    if (n == 0) return tn_fail(e, TN_INVALID_ARGUMENT, "session: missing (open one with OpenSession)");
    return tn_fail(e, TN_INVALID_ARGUMENT, "session: not a session id (%d hex digits)", TN_SESSION_ID_LEN);
}

/* ---- per request ---- */

static int tn_v_compile(const Tpusim__V1__CompileRequest *r, tn_err *e)
{
    const char *pre = "CompileRequest.";
    if (tn_check_session(r->session, e)) return tn_fail(e, TN_INVALID_ARGUMENT, "%s%s", pre, tn_err_msg(e));
    if (*r->format && strcmp(r->format, "hlo") && strcmp(r->format, "hlo_text") && strcmp(r->format, "hlo_proto"))
        return tn_fail(e, TN_INVALID_ARGUMENT, "%sformat: '%.40s' (expected \"hlo\": HLO text or a binary HloModuleProto)", pre, r->format);
    if (r->program.len == 0) return tn_fail(e, TN_INVALID_ARGUMENT, "%sprogram: empty", pre);
    if (r->num_replicas < 0 || r->num_replicas > 4096 || r->num_partitions < 0 || r->num_partitions > 4096)
        return tn_fail(e, TN_INVALID_ARGUMENT, "%snum_replicas/num_partitions: %d x %d (each 0 to 4096)", pre, r->num_replicas,
                       r->num_partitions);
    int64_t n = (int64_t)(r->num_replicas ? r->num_replicas : 1) * (r->num_partitions ? r->num_partitions : 1);
    if (n > TN_MAX_DEVICES) return tn_fail(e, TN_INVALID_ARGUMENT, "%snum_replicas x num_partitions: %lld devices (at most %d)", pre, (long long)n, TN_MAX_DEVICES);
    if (r->n_device_assignment && (int64_t)r->n_device_assignment != n)
        return tn_fail(e, TN_INVALID_ARGUMENT, "%sdevice_assignment: %zu entries for %lld devices", pre, r->n_device_assignment, (long long)n);
    if (*r->numerics && strcmp(r->numerics, "tpu") && strcmp(r->numerics, "exact"))
        return tn_fail(e, TN_INVALID_ARGUMENT, "%snumerics: '%.20s' (expected tpu, exact or empty)", pre, r->numerics);
    return TN_OK;
}

static int tn_v_put(const Tpusim__V1__PutBufferRequest *r, int first, tn_err *e)
{
    const char *pre = "PutBufferRequest.";
    if (r->data.len > (size_t)TN_CHUNK * 4)
        return tn_fail(e, TN_INVALID_ARGUMENT, "%sdata: a chunk of %zu bytes (at most %d)", pre, r->data.len, TN_CHUNK * 4);
    if (!first) {
        if (*r->session || *r->dtype || r->n_dims || r->total_bytes || r->device)
            return tn_fail(e, TN_INVALID_ARGUMENT, "%ssession/device/dtype/dims/total_bytes: only in the first message of the stream", pre);
        return TN_OK;
    }
    if (tn_check_session(r->session, e)) return tn_fail(e, TN_INVALID_ARGUMENT, "%s%s", pre, tn_err_msg(e));
    if (r->device < 0 || r->device >= 4096) return tn_fail(e, TN_INVALID_ARGUMENT, "%sdevice: %d", pre, r->device);
    if (tn_array_dtype(r->dtype) == TPU_INVALID)
        return tn_fail(e, TN_INVALID_ARGUMENT, "%sdtype: '%.20s' is not an array element type (f32, bf16, s32, pred ...)", pre, r->dtype);
    if (r->n_dims > TPU_MAX_RANK) return tn_fail(e, TN_INVALID_ARGUMENT, "%sdims: rank %zu (at most %d)", pre, r->n_dims, TPU_MAX_RANK);
    int64_t count = 1;
    for (size_t k = 0; k < r->n_dims; k++) {
        if (r->dims[k] < 0) return tn_fail(e, TN_INVALID_ARGUMENT, "%sdims[%zu]: %lld", pre, k, (long long)r->dims[k]);
        if (r->dims[k] > 0 && count > ((int64_t)1 << 40) / r->dims[k])
            return tn_fail(e, TN_INVALID_ARGUMENT, "%sdims: more than 2^40 elements", pre);
        count *= r->dims[k];
    }
    if (r->total_bytes < 0 || r->total_bytes > ((int64_t)1 << 42))
        return tn_fail(e, TN_INVALID_ARGUMENT, "%stotal_bytes: %lld", pre, (long long)r->total_bytes);
    if ((int64_t)r->data.len > r->total_bytes)
        return tn_fail(e, TN_INVALID_ARGUMENT, "%sdata: %zu bytes for total_bytes %lld", pre, r->data.len, (long long)r->total_bytes);
    return TN_OK;
}

static int tn_v_execute(const Tpusim__V1__ExecuteRequest *r, tn_err *e)
{
    const char *pre = "ExecuteRequest.";
    if (tn_check_session(r->session, e)) return tn_fail(e, TN_INVALID_ARGUMENT, "%s%s", pre, tn_err_msg(e));
    if (!r->executable) return tn_fail(e, TN_INVALID_ARGUMENT, "%sexecutable: missing", pre);
    if (r->n_arguments < 1 || r->n_arguments > TN_MAX_DEVICES)
        return tn_fail(e, TN_INVALID_ARGUMENT, "%sarguments: %zu lists (1 to %d, one per device)", pre, r->n_arguments, TN_MAX_DEVICES);
    for (size_t d = 0; d < r->n_arguments; d++) {
        if (!r->arguments[d]) return tn_fail(e, TN_INVALID_ARGUMENT, "%sarguments[%zu]: missing", pre, d);
        size_t n = r->arguments[d]->n_buffers;
        if (n > TN_MAX_LIST) return tn_fail(e, TN_INVALID_ARGUMENT, "%sarguments[%zu].buffers: %zu (at most %d)", pre, d, n, TN_MAX_LIST);
        if (n != r->arguments[0]->n_buffers)
            return tn_fail(e, TN_INVALID_ARGUMENT, "%sarguments[%zu].buffers: %zu buffers, arguments[0] has %zu", pre, d, n,
                           r->arguments[0]->n_buffers);
    }
    if (r->n_non_donatable > TN_MAX_LIST) return tn_fail(e, TN_INVALID_ARGUMENT, "%snon_donatable: %zu entries", pre, r->n_non_donatable);
    for (size_t i = 0; i < r->n_non_donatable; i++)
        if (r->non_donatable[i] < 0) return tn_fail(e, TN_INVALID_ARGUMENT, "%snon_donatable[%zu]: %lld", pre, i, (long long)r->non_donatable[i]);
    if (r->max_steps < 0 || !(r->max_seconds >= 0))
        return tn_fail(e, TN_INVALID_ARGUMENT, "%smax_steps/max_seconds: %lld / %g (0: no limit of the client's)", pre,
                       (long long)r->max_steps, r->max_seconds);
    if (r->n_devices && r->n_devices != r->n_arguments)
        return tn_fail(e, TN_INVALID_ARGUMENT, "%sdevices: %zu for %zu argument lists", pre, r->n_devices, r->n_arguments);
    return TN_OK;
}

/* The first message carries the ExecuteRequest; later ones answer the run's recvs. */
static int tn_v_execute_stream(const Tpusim__V1__ExecuteStreamRequest *r, int first, tn_err *e)
{
    if (first) {
        if (!r->execute || r->host_data)
            return tn_fail(e, TN_INVALID_ARGUMENT, "ExecuteStreamRequest.execute: the first message must be the ExecuteRequest alone");
        return tn_v_execute(r->execute, e);
    }
    if (r->execute || !r->host_data)
        return tn_fail(e, TN_INVALID_ARGUMENT, "ExecuteStreamRequest.host_data: after the first message, only host data");
    if (r->host_data->device < 0 || r->host_data->device >= TN_MAX_DEVICES)
        return tn_fail(e, TN_INVALID_ARGUMENT, "ExecuteStreamRequest.host_data.device: %d", r->host_data->device);
    return TN_OK;
}

static int tn_v_session_opt(const char *sess, const char *pre, tn_err *e)
{
    if (!*sess || !tn_check_session(sess, e)) return TN_OK;
    return tn_fail(e, TN_INVALID_ARGUMENT, "%s%s", pre, tn_err_msg(e));
}

static int tn_validate(tn_method m, const ProtobufCMessage *msg, int first, tn_err *e)
{
    switch (m) {
    case TN_M_OPEN_SESSION: {
        const Tpusim__V1__OpenSessionRequest *r = (const void *)msg;
        if (strlen(r->client) > 1024) return tn_fail(e, TN_INVALID_ARGUMENT, "OpenSessionRequest.client: longer than 1024 bytes");
        return TN_OK;
    }
    case TN_M_SYSTEM_INFO: return tn_v_session_opt(((const Tpusim__V1__SystemInfoRequest *)msg)->session, "SystemInfoRequest.", e);
    case TN_M_MEMORY_REPORT: return tn_v_session_opt(((const Tpusim__V1__MemoryReportRequest *)msg)->session, "MemoryReportRequest.", e);
    case TN_M_COMPILE: return tn_v_compile((const void *)msg, e);
    case TN_M_PUT_BUFFER: return tn_v_put((const void *)msg, first, e);
    case TN_M_EXECUTE: return tn_v_execute((const void *)msg, e);
    case TN_M_EXECUTE_STREAM: return tn_v_execute_stream((const void *)msg, first, e);
    case TN_M_GET_BUFFER: {
        const Tpusim__V1__GetBufferRequest *r = (const void *)msg;
        if (tn_check_session(r->session, e)) return tn_fail(e, TN_INVALID_ARGUMENT, "GetBufferRequest.%s", tn_err_msg(e));
        if (!r->buffer) return tn_fail(e, TN_INVALID_ARGUMENT, "GetBufferRequest.buffer: missing");
        if (r->max_chunk < 0 || r->max_chunk > TN_CHUNK * 4)
            return tn_fail(e, TN_INVALID_ARGUMENT, "GetBufferRequest.max_chunk: %lld (0 to %d)", (long long)r->max_chunk, TN_CHUNK * 4);
        return TN_OK;
    }
    case TN_M_DELETE: {
        const Tpusim__V1__DeleteRequest *r = (const void *)msg;
        if (tn_check_session(r->session, e)) return tn_fail(e, TN_INVALID_ARGUMENT, "DeleteRequest.%s", tn_err_msg(e));
        if (r->n_buffers > TN_MAX_LIST || r->n_executables > TN_MAX_LIST)
            return tn_fail(e, TN_INVALID_ARGUMENT, "DeleteRequest.buffers/executables: more than %d handles", TN_MAX_LIST);
        return TN_OK;
    }
    case TN_M_PROFILE_REPORT: {
        const Tpusim__V1__ProfileReportRequest *r = (const void *)msg;
        if (tn_check_session(r->session, e)) return tn_fail(e, TN_INVALID_ARGUMENT, "ProfileReportRequest.%s", tn_err_msg(e));
        if (!r->executable) return tn_fail(e, TN_INVALID_ARGUMENT, "ProfileReportRequest.executable: missing");
        if (r->top < 0 || r->top > 1000) return tn_fail(e, TN_INVALID_ARGUMENT, "ProfileReportRequest.top: %d (0 to 1000)", r->top);
        return TN_OK;
    }
    case TN_M_HEALTH_CHECK:
    case TN_M_HEALTH_WATCH:
        if (strlen(((const Grpc__Health__V1__HealthCheckRequest *)msg)->service) > 256)
            return tn_fail(e, TN_INVALID_ARGUMENT, "HealthCheckRequest.service: longer than 256 bytes");
        return TN_OK;
    case TN_M_COUNT: break;
    }
    return tn_fail(e, TN_UNIMPLEMENTED, "unknown method");
}

/* protobuf-c accepts a field numbered 0 (which the wire format does not allow) as an unknown field and would
 * write it back in a form it then refuses; such a request is malformed, at any depth. The schema has no
 * recursive messages, so the depth stays that of the schema. */
static int tn_has_field0(const ProtobufCMessage *msg, int depth)
{
    if (!msg || depth > 16) return 0;
    for (unsigned i = 0; i < msg->n_unknown_fields; i++)
        if (msg->unknown_fields[i].tag == 0) return 1;
    const ProtobufCMessageDescriptor *d = msg->descriptor;
    for (unsigned f = 0; f < d->n_fields; f++) {
        const ProtobufCFieldDescriptor *fd = &d->fields[f];
        if (fd->type != PROTOBUF_C_TYPE_MESSAGE) continue;
        if ((fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
            *(const uint32_t *)((const char *)msg + fd->quantifier_offset) != fd->id)
            continue;   /* another member of its oneof holds the storage */
        const char *base = (const char *)msg + fd->offset;
        if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)((const char *)msg + fd->quantifier_offset);
            ProtobufCMessage *const *sub = *(ProtobufCMessage *const *const *)base;
            for (size_t k = 0; k < n; k++)
                if (tn_has_field0(sub[k], depth + 1)) return 1;
        } else if (tn_has_field0(*(ProtobufCMessage *const *)base, depth + 1)) {
            return 1;
        }
    }
    return 0;
}

ProtobufCMessage *tn_decode(tn_method m, const uint8_t *buf, size_t len, int first, tn_err *e)
{
    if ((unsigned)m >= TN_M_COUNT) {
        tn_fail(e, TN_UNIMPLEMENTED, "unknown method");
        return NULL;
    }
    const ProtobufCMessageDescriptor *d = tn_req_desc[m];
    if (len > TN_MAX_MESSAGE) {
        tn_fail(e, TN_RESOURCE_EXHAUSTED, "%s: a message of %zu bytes (at most %d)", d->short_name, len, TN_MAX_MESSAGE);
        return NULL;
    }
    ProtobufCMessage *msg = protobuf_c_message_unpack(d, NULL, len, buf);
    if (!msg) {
        tn_fail(e, TN_INVALID_ARGUMENT, "%s: %zu bytes that do not decode as one (a malformed or foreign message)", d->short_name, len);
        return NULL;
    }
    if (tn_has_field0(msg, 0)) {
        tn_fail(e, TN_INVALID_ARGUMENT, "%s: a field numbered 0 (not valid protobuf; a malformed message)", d->short_name);
        tn_msg_free(msg);
        return NULL;
    }
    if (tn_validate(m, msg, first, e)) {
        tn_msg_free(msg);
        return NULL;
    }
    return msg;
}
