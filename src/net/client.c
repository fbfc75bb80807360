/* client.c — the client of a tpusim TPU host (gRPC C core): a channel to grpc://HOST:PORT, the session stream,
 * and calls with deadlines. Every call has its own completion queue, so threads may call at once. A server
 * that is gone makes calls fail with UNAVAILABLE (the connection breaks; keepalive pings find a silent one),
 * never hang past the deadline. */
#include "net/net.h"
#include "tpusim.pb-c.h"
#include "health.pb-c.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct tn_client {
    grpc_channel          *ch;
    char                   url[300];
    char                   bearer[300];
    char                   who[256];
    double                 timeout_s;
    struct tn_cc          *sess;     /* the session stream (its status arrives when the session ends) */
    char                   session[TN_SESSION_ID_LEN + 1];
};

/* gRPC's own log lines (a port in use, a refused connection) repeat what tpusim's errors say: shown only
 * with TPUSIM_GRPC_LOG=1. */
static void tn_grpc_log(gpr_log_func_args *a)
{
    const char *v = getenv("TPUSIM_GRPC_LOG");
    if (v && *v == '1') fprintf(stderr, "grpc: %s:%d: %s\n", a->file, a->line, a->message);
}

void tn_grpc_init(void)
{
    gpr_set_log_function(tn_grpc_log);
    grpc_init();
}

/* How long a call whose send or receive failed waits for the server's status before cancelling. */
#define TN_STATUS_GRACE_S 5.0

static gpr_timespec tn_in(double s)
{
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis((int64_t)(s * 1000), GPR_TIMESPAN));
}

static char *tn_read_pem(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = malloc(1 << 20);
    size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (buf) buf[n] = 0;
    return buf;
}

static grpc_channel_credentials *tn_channel_creds(const tn_url *u, const tn_client_opts *o, tn_err *e)
{
    const char *ca = o && o->tls_ca ? o->tls_ca : getenv("TPUSIM_TLS_CA");
    if (!u->tls && !(ca && *ca)) return grpc_insecure_credentials_create();
    char *pem = NULL;
    if (ca && *ca && !(pem = tn_read_pem(ca))) {
        tn_fail(e, TN_INVALID_ARGUMENT, "TPUSIM_TLS_CA=%s: cannot read it", ca);
        return NULL;
    }
    grpc_channel_credentials *cr = grpc_ssl_credentials_create(pem, NULL, NULL, NULL);
    free(pem);
    if (!cr) tn_fail(e, TN_INVALID_ARGUMENT, "TLS credentials could not be made (TPUSIM_TLS_CA)");
    return cr;
}

int tn_client_new(const char *url, const tn_client_opts *o, tn_client **out, tn_err *e)
{
    *out = NULL;
    tn_url u;
    if (tn_url_parse(url, &u, e)) return e->code;
    tn_client *c = calloc(1, sizeof *c);
    if (!c) return tn_fail(e, TN_RESOURCE_EXHAUSTED, "out of host memory");
    snprintf(c->url, sizeof c->url, "%s://%s", u.tls ? "grpcs" : "grpc", u.target);
    const char *tok = o && o->token ? o->token : getenv("TPUSIM_TOKEN");
    if (tok && *tok) snprintf(c->bearer, sizeof c->bearer, "Bearer %s", tok);
    const char *t = getenv("TPUSIM_RPC_TIMEOUT");
    c->timeout_s = o && o->timeout_s > 0 ? o->timeout_s : t && atof(t) > 0 ? atof(t) : 3600;
    char host[128] = "?";
    gethostname(host, sizeof host - 1);
    if (o && o->client) snprintf(c->who, sizeof c->who, "%s", o->client);
    else snprintf(c->who, sizeof c->who, "pid %d on %s", (int)getpid(), host);
    tn_grpc_init();
    grpc_channel_credentials *cr = tn_channel_creds(&u, o, e);
    if (!cr) {
        grpc_shutdown();
        free(c);
        return e->code;
    }
    grpc_arg args[4];
    args[0] = (grpc_arg){GRPC_ARG_INTEGER, GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, {.integer = TN_MAX_MESSAGE + 4096}};
    args[1] = (grpc_arg){GRPC_ARG_INTEGER, GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, {.integer = TN_MAX_MESSAGE + 4096}};
    args[2] = (grpc_arg){GRPC_ARG_INTEGER, GRPC_ARG_KEEPALIVE_TIME_MS, {.integer = 20000}};   /* a silent server */
    args[3] = (grpc_arg){GRPC_ARG_INTEGER, GRPC_ARG_KEEPALIVE_TIMEOUT_MS, {.integer = 10000}};
    grpc_channel_args ca = {4, args};
    c->ch = grpc_channel_create(u.target, cr, &ca);
    grpc_channel_credentials_release(cr);
    *out = c;
    return TN_OK;
}

const char *tn_client_url(const tn_client *c) { return c->url; }
const char *tn_client_session(const tn_client *c) { return c->session; }

/* ---- one call ---- */

typedef struct tn_cc {
    tn_client             *c;
    grpc_call             *call;
    grpc_completion_queue *cq;
    gpr_timespec           deadline;
    grpc_metadata          auth;
    grpc_metadata_array    md, trailers;
    grpc_status_code       status;
    grpc_slice             details;
    int                    status_tag, got_md, closed, broken;
    int                    abort;     /* the client ends the call itself: cancel at once, no grace */
    int                    no_status; /* the status was never asked for: nothing to wait for */
} tn_cc;

static int tn_cc_wait(tn_cc *k, void *tag)
{
    grpc_event ev = grpc_completion_queue_pluck(k->cq, tag, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    return ev.type == GRPC_OP_COMPLETE && ev.success ? 0 : -1;
}

/* 1 when tag did not complete within seconds (it stays pending), else as tn_cc_wait. */
static int tn_cc_wait_for(tn_cc *k, void *tag, double seconds)
{
    grpc_event ev = grpc_completion_queue_pluck(k->cq, tag, tn_in(seconds), NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT) return 1;
    return ev.type == GRPC_OP_COMPLETE && ev.success ? 0 : -1;
}

/* Starts the call: its metadata goes out and the status is awaited from the start. */
static int tn_cc_start(tn_cc *k, tn_client *c, tn_method m, double timeout_s)
{
    memset(k, 0, sizeof *k);
    k->c = c;
    k->cq = grpc_completion_queue_create_for_pluck(NULL);
    k->deadline = tn_in(timeout_s > 0 ? timeout_s : c->timeout_s);
    grpc_slice method = grpc_slice_from_static_string(tn_method_path(m));
    k->call = grpc_channel_create_call(c->ch, NULL, GRPC_PROPAGATE_DEFAULTS, k->cq, method, NULL, k->deadline, NULL);
    grpc_metadata_array_init(&k->md);
    grpc_metadata_array_init(&k->trailers);
    grpc_op ops[2];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (c->bearer[0]) {
        k->auth.key = grpc_slice_from_static_string("authorization");
        k->auth.value = grpc_slice_from_static_string(c->bearer);
        ops[0].data.send_initial_metadata.count = 1;
        ops[0].data.send_initial_metadata.metadata = &k->auth;
    }
    ops[1].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[1].data.recv_status_on_client.trailing_metadata = &k->trailers;
    ops[1].data.recv_status_on_client.status = &k->status;
    ops[1].data.recv_status_on_client.status_details = &k->details;
    if (!k->call || grpc_call_start_batch(k->call, ops, 2, &k->status_tag, NULL) != GRPC_CALL_OK)
        return k->broken = k->no_status = 1, -1;
    return 0;
}

static int tn_cc_send(tn_cc *k, const ProtobufCMessage *msg, int close)
{
    if (k->broken) return -1;
    size_t len;
    uint8_t *buf = tn_msg_pack(msg, &len);
    if (!buf) return k->broken = 1, -1;
    grpc_slice sl = grpc_slice_from_copied_buffer((const char *)buf, len);
    free(buf);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    grpc_op ops[2];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_MESSAGE;
    ops[0].data.send_message.send_message = bb;
    if (close) ops[1].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT, k->closed = 1;
    int tag, rc = -1;
    if (grpc_call_start_batch(k->call, ops, close ? 2 : 1, &tag, NULL) == GRPC_CALL_OK) rc = tn_cc_wait(k, &tag);
    grpc_byte_buffer_destroy(bb);
    if (rc) k->broken = 1;
    return rc;
}

/* The next response message: 1 (bytes in a malloc'ed *buf), 0 none left, -1 failed. */
static int tn_cc_recv(tn_cc *k, uint8_t **buf, size_t *len)
{
    if (k->broken) return -1;
    grpc_byte_buffer *bb = NULL;
    grpc_op ops[2];
    memset(ops, 0, sizeof ops);
    size_t n = 0;
    if (!k->got_md) {
        ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
        ops[n++].data.recv_initial_metadata.recv_initial_metadata = &k->md;
        k->got_md = 1;
    }
    ops[n].op = GRPC_OP_RECV_MESSAGE;
    ops[n++].data.recv_message.recv_message = &bb;
    int tag;
    if (grpc_call_start_batch(k->call, ops, n, &tag, NULL) != GRPC_CALL_OK || tn_cc_wait(k, &tag)) return k->broken = 1, -1;
    if (!bb) return 0;
    grpc_byte_buffer_reader r;
    int rc = -1;
    if (grpc_byte_buffer_reader_init(&r, bb)) {
        grpc_slice all = grpc_byte_buffer_reader_readall(&r);
        *len = GRPC_SLICE_LENGTH(all);
        *buf = malloc(*len + 1);
        if (*buf) memcpy(*buf, GRPC_SLICE_START_PTR(all), *len), rc = 1;
        grpc_slice_unref(all);
        grpc_byte_buffer_reader_destroy(&r);
    }
    grpc_byte_buffer_destroy(bb);
    return rc;
}

/* Ends the call: its status, as *e when it is not OK. */
static int tn_cc_finish(tn_cc *k, tn_err *e)
{
    int code = TN_OK;
    if (k->call) {
        if (!k->closed && !k->broken) {
            grpc_op op;
            memset(&op, 0, sizeof op);
            op.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
            int tag;
            if (grpc_call_start_batch(k->call, &op, 1, &tag, NULL) == GRPC_CALL_OK) tn_cc_wait(k, &tag);
        }
        /* After a failed send or receive the status says why; it is usually on its way (the server answered
           before reading everything), and cancelling first would replace it by CANCELLED. Cancel only if it
           does not come within a grace period. */
        if (k->no_status) {
            grpc_call_cancel(k->call, NULL);
        } else if (k->abort || (k->broken && tn_cc_wait_for(k, &k->status_tag, TN_STATUS_GRACE_S) != 0)) {
            grpc_call_cancel(k->call, NULL);
            tn_cc_wait(k, &k->status_tag);
        } else if (!k->broken) {
            tn_cc_wait(k, &k->status_tag);
        }
        code = (int)k->status;
        if (code) {
            char *d = grpc_slice_to_c_string(k->details);
            tn_fail(e, code, "%s", code == TN_UNAVAILABLE ? "" : d);
            if (code == TN_UNAVAILABLE)
                tn_fail(e, code, "the TPU at %s is unavailable (%s): is `tpusim serve` running there?", k->c->url, d);
            else if (code == TN_DEADLINE_EXCEEDED && strstr(d, "Deadline"))
                tn_fail(e, code, "the TPU at %s did not answer in time (TPUSIM_RPC_TIMEOUT): %s", k->c->url, d);
            gpr_free(d);
        } else if (k->broken) {
            code = tn_fail(e, TN_INTERNAL, "the call to %s failed without a status", k->c->url);
        }
        grpc_call_unref(k->call);
    } else {
        code = tn_fail(e, TN_INTERNAL, "could not start a call to %s", k->c->url);
    }
    grpc_slice_unref(k->details);
    grpc_metadata_array_destroy(&k->md);
    grpc_metadata_array_destroy(&k->trailers);
    grpc_completion_queue_shutdown(k->cq);
    grpc_completion_queue_destroy(k->cq);
    return code;
}

/* ---- calls ---- */

int tn_client_unary(tn_client *c, tn_method m, const ProtobufCMessage *req, const void *resp_desc, ProtobufCMessage **resp,
                    double timeout_s, tn_err *e)
{
    *resp = NULL;
    tn_cc k;
    uint8_t *buf = NULL;
    size_t len = 0;
    int got = 0;
    if (!tn_cc_start(&k, c, m, timeout_s) && !tn_cc_send(&k, req, 1)) got = tn_cc_recv(&k, &buf, &len);
    int rc = tn_cc_finish(&k, e);
    if (!rc && got == 1) {
        *resp = protobuf_c_message_unpack(resp_desc, NULL, len, buf);
        if (!*resp) rc = tn_fail(e, TN_DATA_LOSS, "%s: the server's answer does not decode", tn_method_path(m));
    } else if (!rc) {
        rc = tn_fail(e, TN_DATA_LOSS, "%s: the server sent no answer", tn_method_path(m));
    }
    free(buf);
    return rc;
}

int tn_client_health(tn_client *c, double timeout_s, tn_err *e)
{
    Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    int rc = tn_client_unary(c, TN_M_HEALTH_CHECK, &req.base, &grpc__health__v1__health_check_response__descriptor, &resp,
                             timeout_s, e);
    if (!rc && ((Grpc__Health__V1__HealthCheckResponse *)resp)->status != GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING)
        rc = tn_fail(e, TN_UNAVAILABLE, "%s answers, but is not serving", c->url);
    tn_msg_free(resp);
    return rc;
}

int tn_client_put(tn_client *c, int device, tpu_dtype dt, int rank, const int64_t *dims, const void *data, size_t nbytes,
                  tn_buffer_info *info, tn_err *e)
{
    tn_cc k;
    Tpusim__V1__PutBufferRequest r = TPUSIM__V1__PUT_BUFFER_REQUEST__INIT;
    r.session = c->session;
    r.device = device;
    r.dtype = (char *)tpu_dtype_name(dt);
    r.dims = (int64_t *)dims;
    r.n_dims = (size_t)rank;
    r.total_bytes = (int64_t)nbytes;
    size_t off = nbytes < TN_CHUNK ? nbytes : TN_CHUNK;
    r.data.data = (uint8_t *)data;
    r.data.len = off;
    int fail = tn_cc_start(&k, c, TN_M_PUT_BUFFER, 0) || tn_cc_send(&k, &r.base, off == nbytes);
    while (!fail && off < nbytes) {
        Tpusim__V1__PutBufferRequest d = TPUSIM__V1__PUT_BUFFER_REQUEST__INIT;
        d.data.data = (uint8_t *)data + off;
        d.data.len = nbytes - off < TN_CHUNK ? nbytes - off : TN_CHUNK;
        off += d.data.len;
        fail = tn_cc_send(&k, &d.base, off == nbytes);
    }
    uint8_t *buf = NULL;
    size_t len = 0;
    int got = fail ? -1 : tn_cc_recv(&k, &buf, &len);
    int rc = tn_cc_finish(&k, e);
    Tpusim__V1__BufferInfo *bi = !rc && got == 1 ? tpusim__v1__buffer_info__unpack(NULL, len, buf) : NULL;
    free(buf);
    if (!rc && !bi) rc = tn_fail(e, TN_DATA_LOSS, "PutBuffer: no answer from the server");
    if (!rc) {
        info->id = bi->buffer;
        info->device = bi->device;
        info->dtype = dt;
        info->rank = rank;
        if (rank > 0) memcpy(info->dims, dims, (size_t)rank * sizeof *dims);   /* a scalar has no dims */
        info->hbm_bytes = bi->hbm_bytes;
    }
    tn_msg_free(bi ? &bi->base : NULL);
    return rc;
}

int tn_client_get(tn_client *c, uint64_t buffer, void *dst, size_t nbytes, tn_err *e)
{
    tn_cc k;
    Tpusim__V1__GetBufferRequest r = TPUSIM__V1__GET_BUFFER_REQUEST__INIT;
    r.session = c->session;
    r.buffer = buffer;
    int fail = tn_cc_start(&k, c, TN_M_GET_BUFFER, 0) || tn_cc_send(&k, &r.base, 1);
    size_t off = 0;
    int bad = 0;
    for (size_t msgs = 0; !fail && !bad; msgs++) {   /* bounded: every chunk carries data, then the stream ends */
        if (msgs > nbytes + 1) {
            bad = 1;
            break;
        }
        uint8_t *buf = NULL;
        size_t len = 0;
        int got = tn_cc_recv(&k, &buf, &len);
        if (got <= 0) {
            fail = got < 0;
            free(buf);
            break;
        }
        Tpusim__V1__BufferChunk *ch = tpusim__v1__buffer_chunk__unpack(NULL, len, buf);
        free(buf);
        if (!ch || ch->data.len > nbytes - off || (msgs == 0 && ch->total_bytes != (int64_t)nbytes) ||
            (msgs > 0 && ch->data.len == 0))
            bad = 1;
        else if (ch->data.len) memcpy((char *)dst + off, ch->data.data, ch->data.len), off += ch->data.len;
        tn_msg_free(ch ? &ch->base : NULL);
    }
    if (bad) k.broken = k.abort = 1;   /* tn_cc_finish cancels */
    int rc = tn_cc_finish(&k, e);
    if (bad || (!rc && off != nbytes))
        rc = tn_fail(e, TN_DATA_LOSS, "GetBuffer: buffer %llu came back as %zu bytes of a different size than the %zu expected",
                     (unsigned long long)buffer, off, nbytes);
    return rc;
}

/* ---- streams both ways ---- */

struct tn_stream {
    tn_cc k;
};

int tn_stream_open(tn_client *c, tn_method m, tn_stream **out, tn_err *e)
{
    *out = calloc(1, sizeof **out);
    if (!*out) return tn_fail(e, TN_RESOURCE_EXHAUSTED, "out of host memory");
    if (tn_cc_start(&(*out)->k, c, m, 0)) {
        int rc = tn_cc_finish(&(*out)->k, e);
        free(*out);
        *out = NULL;
        return rc ? rc : tn_fail(e, TN_INTERNAL, "could not start a call");
    }
    return TN_OK;
}

int tn_stream_send(tn_stream *s, const ProtobufCMessage *msg) { return tn_cc_send(&s->k, msg, 0); }

int tn_stream_recv(tn_stream *s, uint8_t **buf, size_t *len) { return tn_cc_recv(&s->k, buf, len); }

int tn_stream_finish(tn_stream *s, int cancel, tn_err *e)
{
    if (cancel) s->k.broken = s->k.abort = 1;
    int rc = tn_cc_finish(&s->k, e);
    free(s);
    return rc;
}

/* ---- the session stream ---- */

/* The first event of the stream, within the call timeout (at most a minute): 1 with bytes, else -1. */
static int tn_first_event(tn_cc *k, double timeout_s, uint8_t **buf, size_t *len)
{
    grpc_op ops[2];
    grpc_byte_buffer *bb = NULL;
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[0].data.recv_initial_metadata.recv_initial_metadata = &k->md;
    ops[1].op = GRPC_OP_RECV_MESSAGE;
    ops[1].data.recv_message.recv_message = &bb;
    int tag, got = -1;
    k->got_md = 1;
    if (grpc_call_start_batch(k->call, ops, 2, &tag, NULL) != GRPC_CALL_OK) return -1;
    grpc_event ev = grpc_completion_queue_pluck(k->cq, &tag, tn_in(timeout_s < 60 ? timeout_s : 60), NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT) {
        grpc_call_cancel(k->call, NULL);
        grpc_completion_queue_pluck(k->cq, &tag, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    } else if (ev.success && bb) {
        grpc_byte_buffer_reader rd;
        if (grpc_byte_buffer_reader_init(&rd, bb)) {
            grpc_slice all = grpc_byte_buffer_reader_readall(&rd);
            *len = GRPC_SLICE_LENGTH(all);
            *buf = malloc(*len + 1);
            if (*buf) memcpy(*buf, GRPC_SLICE_START_PTR(all), *len), got = 1;
            grpc_slice_unref(all);
            grpc_byte_buffer_reader_destroy(&rd);
        }
    }
    if (bb) grpc_byte_buffer_destroy(bb);
    return got;
}

int tn_client_open_session(tn_client *c, ProtobufCMessage **event, tn_err *e)
{
    if (event) *event = NULL;
    if (c->sess) return TN_OK;
    tn_cc *k = calloc(1, sizeof *k);   /* lives as long as the session: the status lands in it */
    if (!k) return tn_fail(e, TN_RESOURCE_EXHAUSTED, "out of host memory");
    Tpusim__V1__OpenSessionRequest r = TPUSIM__V1__OPEN_SESSION_REQUEST__INIT;
    r.client = c->who;
    uint8_t *buf = NULL;
    size_t len = 0;
    int got = -1;
    /* the stream stays open (no half-close): the server ends the session when it breaks */
    if (!tn_cc_start(k, c, TN_M_OPEN_SESSION, 1e7) && !tn_cc_send(k, &r.base, 0)) got = tn_first_event(k, c->timeout_s, &buf, &len);
    Tpusim__V1__SessionEvent *ev = got == 1 ? tpusim__v1__session_event__unpack(NULL, len, buf) : NULL;
    free(buf);
    if (!ev || strlen(ev->session) != TN_SESSION_ID_LEN) {
        tn_msg_free(ev ? &ev->base : NULL);
        k->broken = 1;
        k->abort = got == 1;   /* an answer that is no session: end the stream; else the status says why */
        int rc = tn_cc_finish(k, e);
        free(k);
        return rc ? rc : tn_fail(e, TN_DATA_LOSS, "OpenSession: %s sent no session", c->url);
    }
    memcpy(c->session, ev->session, TN_SESSION_ID_LEN + 1);
    c->sess = k;
    if (event) *event = &ev->base;
    else tn_msg_free(&ev->base);
    return TN_OK;
}

void tn_client_free(tn_client *c)
{
    if (!c) return;
    if (c->sess) {   /* ending the stream ends the session: the server frees what it held */
        tn_err e = {0};
        c->sess->broken = c->sess->abort = 1;
        tn_cc_finish(c->sess, &e);
        tn_err_clear(&e);
        free(c->sess);
    }
    grpc_channel_destroy(c->ch);
    grpc_shutdown();
    free(c);
}
