/* server.c — the gRPC server of `tpusim serve`, on gRPC's C core.
 *
 * One event thread polls the server's completion queue: it hands each new call to a pool of workers and runs
 * the session streams (OpenSession) itself. A worker serves one call at a time on the call's own
 * completion queue (plucked, every wait bounded by the client's deadline and the server's own limit), through
 * service.c's handlers. Calls are accepted only as fast as workers free up (2 x workers outstanding), so the
 * queue is bounded; gRPC keeps the rest waiting or refuses them.
 *
 * A session lives as long as its OpenSession stream: when the client cancels it, its connection breaks (the
 * process was killed), the session idles out or the server stops, the stream ends and the host frees what the
 * session held. Every call is checked for the token ("authorization: Bearer TOKEN") when the server has one. */
#include "net/net.h"
#include "tpusim.pb-c.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TN_OP_WAIT_S 120.0   /* the longest a call waits for the client's next message */

enum { TN_TAG_REQ = 1, TN_TAG_SESS_REQ, TN_TAG_SESS_RECV, TN_TAG_SESS_SENT, TN_TAG_SESS_CLOSED, TN_TAG_SESS_DONE, TN_TAG_SHUTDOWN };

typedef struct tn_tag {
    int   kind;
    void *obj;
} tn_tag;

/* A generic call: requested from the server, served by a worker on its own completion queue. */
typedef struct tn_slot {
    tn_tag                 tag;
    grpc_call             *call;
    grpc_call_details      details;
    grpc_metadata_array    md;
    grpc_completion_queue *cq;
    struct tn_slot        *next;   /* in the work queue */
} tn_slot;

/* A session stream (OpenSession), run by the event thread. */
typedef struct tn_sess_call {
    tn_tag              t_req, t_recv, t_sent, t_closed, t_done;
    grpc_call          *call;
    gpr_timespec        deadline;
    grpc_metadata_array md;
    grpc_byte_buffer   *in, *out;
    int                 cancelled;
    int                 pending;        /* batches in flight */
    char                id[TN_SESSION_ID_LEN + 1];
    char                why[160];       /* why the server ended it */
    struct tn_sess_call *next;          /* the server's list of open streams */
} tn_sess_call;

struct tn_server {
    tn_service            *svc;
    tn_server_opts         o;
    grpc_server           *server;
    grpc_completion_queue *cq;
    void                  *open_method;
    int                    port;
    char                   bearer[300];   /* "Bearer TOKEN", or "" */
    pthread_t              events, *workers;
    int                    nworkers, started_events;
    pthread_mutex_t        mu;
    pthread_cond_t         cv;
    tn_slot               *qhead, *qtail;
    int                    stopping;
    tn_sess_call          *streams;
    tn_tag                 t_shutdown;
    int64_t                calls;
};

/* ---- helpers ---- */

static gpr_timespec tn_in(double s)
{
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis((int64_t)(s * 1000), GPR_TIMESPAN));
}

static gpr_timespec tn_earlier(gpr_timespec a, gpr_timespec b)
{
    return gpr_time_cmp(gpr_convert_clock_type(a, GPR_CLOCK_MONOTONIC), b) < 0 ? gpr_convert_clock_type(a, GPR_CLOCK_MONOTONIC) : b;
}

/* Constant-time comparison of the call's authorization metadata with the server's. */
static int tn_authorized(tn_server *s, const grpc_metadata_array *md)
{
    if (!s->bearer[0]) return 1;
    size_t want = strlen(s->bearer);
    for (size_t i = 0; i < md->count; i++) {
        const grpc_slice *k = &md->metadata[i].key, *v = &md->metadata[i].value;
        if (GRPC_SLICE_LENGTH(*k) != 13 || memcmp(GRPC_SLICE_START_PTR(*k), "authorization", 13)) continue;
        if (GRPC_SLICE_LENGTH(*v) != want) return 0;
        unsigned diff = 0;
        for (size_t j = 0; j < want; j++) diff |= (unsigned)(GRPC_SLICE_START_PTR(*v)[j] ^ (uint8_t)s->bearer[j]);
        return diff == 0;
    }
    return 0;
}

static const char *tn_unauthorized_msg(void)
{
    return "UNAUTHENTICATED: this TPU host needs its token: set TPUSIM_TOKEN (sent as 'authorization: Bearer TOKEN')";
}

static grpc_byte_buffer *tn_bytes_to_bb(const uint8_t *buf, size_t len)
{
    grpc_slice sl = grpc_slice_from_copied_buffer((const char *)buf, len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    return bb;
}

/* ---- a worker's call (the tn_call of net.h) ---- */

struct tn_call {
    tn_server             *srv;
    grpc_call             *call;
    grpc_completion_queue *cq;
    gpr_timespec           deadline;   /* the client's */
    int                    sent_md;
    int                    failed;
    uint8_t               *buf;
    size_t                 cap;
};

/* Runs one batch and waits for it (bounded): 0 done, -1 failed or timed out (the call is then cancelled). */
static int tn_batch(tn_call *c, grpc_op *ops, size_t n)
{
    if (c->failed) return -1;
    int tag;
    if (grpc_call_start_batch(c->call, ops, n, &tag, NULL) != GRPC_CALL_OK) return c->failed = 1, -1;
    grpc_event ev = grpc_completion_queue_pluck(c->cq, &tag, tn_earlier(c->deadline, tn_in(TN_OP_WAIT_S)), NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT) {   /* cancel, then collect the batch (it completes promptly) */
        grpc_call_cancel_with_status(c->call, GRPC_STATUS_DEADLINE_EXCEEDED, "tpusim: the client stopped sending", NULL);
        ev = grpc_completion_queue_pluck(c->cq, &tag, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        c->failed = 1;
        return -1;
    }
    if (ev.type != GRPC_OP_COMPLETE || !ev.success) return c->failed = 1, -1;
    return 0;
}

int tn_call_recv(tn_call *c, const uint8_t **buf, size_t *len)
{
    grpc_byte_buffer *bb = NULL;
    grpc_op ops[2];
    size_t n = 0;
    memset(ops, 0, sizeof ops);
    if (!c->sent_md) {
        ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
        n++;
        c->sent_md = 1;
    }
    ops[n].op = GRPC_OP_RECV_MESSAGE;
    ops[n].data.recv_message.recv_message = &bb;
    n++;
    if (tn_batch(c, ops, n)) return -1;
    if (!bb) return 0;
    grpc_byte_buffer_reader r;
    int rc = 1;
    if (!grpc_byte_buffer_reader_init(&r, bb)) rc = -1;
    else {
        grpc_slice all = grpc_byte_buffer_reader_readall(&r);
        size_t k = GRPC_SLICE_LENGTH(all);
        if (k + 1 > c->cap) {
            uint8_t *nb = realloc(c->buf, k + 1);
            if (!nb) rc = -1;
            else c->buf = nb, c->cap = k + 1;
        }
        if (rc > 0) {
            memcpy(c->buf, GRPC_SLICE_START_PTR(all), k);
            *buf = c->buf;
            *len = k;
        }
        grpc_slice_unref(all);
        grpc_byte_buffer_reader_destroy(&r);
    }
    grpc_byte_buffer_destroy(bb);
    return rc;
}

int tn_call_send(tn_call *c, const ProtobufCMessage *msg)
{
    size_t len = 0;
    uint8_t *buf = tn_msg_pack(msg, &len);
    if (!buf) return -1;
    grpc_byte_buffer *bb = tn_bytes_to_bb(buf, len);
    free(buf);
    grpc_op ops[2];
    size_t n = 0;
    memset(ops, 0, sizeof ops);
    if (!c->sent_md) {
        ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
        n++;
        c->sent_md = 1;
    }
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n].data.send_message.send_message = bb;
    n++;
    int rc = tn_batch(c, ops, n);
    grpc_byte_buffer_destroy(bb);
    return rc;
}

/* The call's status. Long messages (a check report) are cut to what fits in the trailers. */
static void tn_call_finish(tn_call *c, int code, const char *msg)
{
    int cancelled = 0;
    char cut[6000];
    snprintf(cut, sizeof cut, "%s", msg ? msg : "");
    if (strlen(msg ? msg : "") >= sizeof cut) memcpy(cut + sizeof cut - 16, " ... (cut)", 11);
    grpc_slice details = grpc_slice_from_copied_string(cut);
    grpc_op ops[3];
    size_t n = 0;
    memset(ops, 0, sizeof ops);
    if (!c->sent_md) ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n++].data.recv_close_on_server.cancelled = &cancelled;
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = (grpc_status_code)code;
    ops[n++].data.send_status_from_server.status_details = &details;
    c->failed = 0;   /* the status goes out even after a failed receive */
    tn_batch(c, ops, n);
    grpc_slice_unref(details);
}

static void tn_serve_slot(tn_server *s, tn_slot *sl)
{
    tn_call c = {.srv = s, .call = sl->call, .cq = sl->cq, .deadline = sl->details.deadline};
    tn_err e = {0};
    const grpc_slice *m = &sl->details.method;
    int method = tn_method_from_path((const char *)GRPC_SLICE_START_PTR(*m), GRPC_SLICE_LENGTH(*m));
    int code;
    if (!tn_authorized(s, &sl->md)) code = tn_fail(&e, TN_UNAUTHENTICATED, "%s", tn_unauthorized_msg());
    else if (method < 0 || method == TN_M_OPEN_SESSION)
        code = tn_fail(&e, TN_UNIMPLEMENTED, "%.*s: no such method on a tpusim TPU host", (int)GRPC_SLICE_LENGTH(*m),
                       (const char *)GRPC_SLICE_START_PTR(*m));
    else code = tn_service_handle(s->svc, (tn_method)method, &c, &e);
    if (code == TN_UNAUTHENTICATED || code == TN_UNIMPLEMENTED) {
        /* take the request off the stream before answering: a status sent while the client is still sending
           resets the stream, and the client may then see CANCELLED instead of it */
        const uint8_t *req;
        size_t len;
        tn_call_recv(&c, &req, &len);
    }
    tn_call_finish(&c, code, tn_err_msg(&e));
    tn_err_clear(&e);
    free(c.buf);
}

/* ---- slots and workers ---- */

static void tn_slot_free(tn_slot *sl)
{
    if (sl->call) grpc_call_unref(sl->call);
    grpc_call_details_destroy(&sl->details);
    grpc_metadata_array_destroy(&sl->md);
    grpc_completion_queue_shutdown(sl->cq);
    grpc_completion_queue_destroy(sl->cq);
    free(sl);
}

/* Asks the server for one more call (not once stopping). */
static void tn_post_slot(tn_server *s)
{
    tn_slot *sl = calloc(1, sizeof *sl);
    if (!sl) return;
    sl->tag.kind = TN_TAG_REQ;
    sl->tag.obj = sl;
    grpc_call_details_init(&sl->details);
    grpc_metadata_array_init(&sl->md);
    sl->cq = grpc_completion_queue_create_for_pluck(NULL);
    pthread_mutex_lock(&s->mu);
    int ok = !s->stopping &&
             grpc_server_request_call(s->server, &sl->call, &sl->details, &sl->md, sl->cq, s->cq, &sl->tag) == GRPC_CALL_OK;
    pthread_mutex_unlock(&s->mu);
    if (!ok) tn_slot_free(sl);
}

static void *tn_worker(void *arg)
{
    tn_server *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->qhead && !s->stopping) pthread_cond_wait(&s->cv, &s->mu);
        tn_slot *sl = s->qhead;
        if (sl) {
            s->qhead = sl->next;
            if (!s->qhead) s->qtail = NULL;
            s->calls++;
        }
        pthread_mutex_unlock(&s->mu);
        if (!sl) return NULL;   /* stopping, and nothing left */
        tn_serve_slot(s, sl);
        tn_slot_free(sl);
        tn_post_slot(s);
    }
}

/* ---- session streams (on the event thread) ---- */

static void tn_sess_post(tn_server *s)
{
    tn_sess_call *sc = calloc(1, sizeof *sc);
    if (!sc) return;
    sc->t_req = (tn_tag){TN_TAG_SESS_REQ, sc};
    sc->t_recv = (tn_tag){TN_TAG_SESS_RECV, sc};
    sc->t_sent = (tn_tag){TN_TAG_SESS_SENT, sc};
    sc->t_closed = (tn_tag){TN_TAG_SESS_CLOSED, sc};
    sc->t_done = (tn_tag){TN_TAG_SESS_DONE, sc};
    grpc_metadata_array_init(&sc->md);
    pthread_mutex_lock(&s->mu);
    int ok = !s->stopping && grpc_server_request_registered_call(s->server, s->open_method, &sc->call, &sc->deadline, &sc->md,
                                                                 NULL, s->cq, s->cq, &sc->t_req) == GRPC_CALL_OK;
    pthread_mutex_unlock(&s->mu);
    if (!ok) {
        grpc_metadata_array_destroy(&sc->md);
        free(sc);
    }
}

static void tn_sess_free(tn_server *s, tn_sess_call *sc)
{
    pthread_mutex_lock(&s->mu);
    for (tn_sess_call **p = &s->streams; *p; p = &(*p)->next)
        if (*p == sc) {
            *p = sc->next;
            break;
        }
    pthread_mutex_unlock(&s->mu);
    if (sc->call) grpc_call_unref(sc->call);
    if (sc->in) grpc_byte_buffer_destroy(sc->in);
    if (sc->out) grpc_byte_buffer_destroy(sc->out);
    grpc_metadata_array_destroy(&sc->md);
    free(sc);
}

static void tn_sess_batch(tn_sess_call *sc, grpc_op *ops, size_t n, tn_tag *tag)
{
    if (grpc_call_start_batch(sc->call, ops, n, tag, NULL) == GRPC_CALL_OK) sc->pending++;
}

static void tn_sess_status(tn_sess_call *sc, int code, const char *msg)
{
    grpc_slice details = grpc_slice_from_copied_string(msg);
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    op.data.send_status_from_server.status = (grpc_status_code)code;
    op.data.send_status_from_server.status_details = &details;
    tn_sess_batch(sc, &op, 1, &sc->t_done);
    grpc_slice_unref(details);
}

/* The request arrived: open the host session, send the first event, and wait for the stream to end. */
static void tn_sess_open(tn_server *s, tn_sess_call *sc)
{
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &sc->cancelled;
    tn_sess_batch(sc, &op, 1, &sc->t_closed);
    tn_err e = {0};
    uint8_t *buf = NULL, *ev = NULL;
    size_t len = 0, evlen = 0;
    int code = TN_OK;
    if (!tn_authorized(s, &sc->md)) code = tn_fail(&e, TN_UNAUTHENTICATED, "%s", tn_unauthorized_msg());
    else if (!sc->in) code = tn_fail(&e, TN_INVALID_ARGUMENT, "OpenSession: no request message");
    if (!code) {
        grpc_byte_buffer_reader r;
        if (grpc_byte_buffer_reader_init(&r, sc->in)) {
            grpc_slice all = grpc_byte_buffer_reader_readall(&r);
            len = GRPC_SLICE_LENGTH(all);
            buf = malloc(len + 1);
            if (buf) memcpy(buf, GRPC_SLICE_START_PTR(all), len);
            grpc_slice_unref(all);
            grpc_byte_buffer_reader_destroy(&r);
        }
        code = buf ? tn_service_open_session(s->svc, buf, len, sc->id, &ev, &evlen, &e)
                   : tn_fail(&e, TN_RESOURCE_EXHAUSTED, "out of host memory");
    }
    free(buf);
    if (code) {
        grpc_call_cancel_with_status(sc->call, (grpc_status_code)code, tn_err_msg(&e), NULL);
        tn_err_clear(&e);
        return;
    }
    sc->out = tn_bytes_to_bb(ev, evlen);
    free(ev);
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_SEND_MESSAGE;
    op.data.send_message.send_message = sc->out;
    tn_sess_batch(sc, &op, 1, &sc->t_sent);
    pthread_mutex_lock(&s->mu);
    sc->next = s->streams;
    s->streams = sc;
    pthread_mutex_unlock(&s->mu);
}

static void tn_sess_event(tn_server *s, int kind, tn_sess_call *sc, int success)
{
    if (kind == TN_TAG_SESS_REQ) {
        tn_sess_post(s);   /* the next client */
        if (!success) {
            tn_sess_free(s, sc);
            return;
        }
        grpc_op ops[2];
        memset(ops, 0, sizeof ops);
        ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
        ops[1].op = GRPC_OP_RECV_MESSAGE;
        ops[1].data.recv_message.recv_message = &sc->in;
        tn_sess_batch(sc, ops, 2, &sc->t_recv);
        return;
    }
    sc->pending--;
    if (kind == TN_TAG_SESS_RECV) {
        if (success) tn_sess_open(s, sc);
        else grpc_call_cancel(sc->call, NULL);
    } else if (kind == TN_TAG_SESS_CLOSED) {   /* the client cancelled, went away, or the server ended it */
        if (sc->id[0]) tn_host_session_close(s->svc->host, sc->id, sc->why[0] ? sc->why : "its client closed it or went away");
        char msg[200];
        snprintf(msg, sizeof msg, "tpusim: the session ended: %s", sc->why[0] ? sc->why : "closed");
        tn_sess_status(sc, sc->why[0] ? TN_DEADLINE_EXCEEDED : TN_OK, msg);
    }
    if (sc->pending == 0) tn_sess_free(s, sc);
}

/* ---- the event thread ---- */

static void *tn_events(void *arg)
{
    tn_server *s = arg;
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN) return NULL;
        if (ev.type != GRPC_OP_COMPLETE) continue;
        tn_tag *t = ev.tag;
        if (t->kind == TN_TAG_SHUTDOWN) {
            grpc_completion_queue_shutdown(s->cq);
        } else if (t->kind == TN_TAG_REQ) {
            tn_slot *sl = t->obj;
            if (!ev.success) {
                tn_slot_free(sl);
                continue;
            }
            pthread_mutex_lock(&s->mu);
            if (s->qtail) s->qtail->next = sl;
            else s->qhead = sl;
            s->qtail = sl;
            pthread_cond_signal(&s->cv);
            pthread_mutex_unlock(&s->mu);
        } else {
            tn_sess_event(s, t->kind, t->obj, ev.success);
        }
    }
}

/* ---- start, housekeeping, stop ---- */

static char *tn_read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = malloc(1 << 20);
    size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (buf) buf[n] = 0;
    return buf;
}

static grpc_server_credentials *tn_server_creds(const tn_server_opts *o, tn_err *e)
{
    if (!o->tls_cert && !o->tls_key) return grpc_insecure_server_credentials_create();
    if (!o->tls_cert || !o->tls_key) {
        tn_fail(e, TN_INVALID_ARGUMENT, "--tls-cert and --tls-key go together");
        return NULL;
    }
    char *cert = tn_read_file(o->tls_cert), *key = tn_read_file(o->tls_key);
    grpc_server_credentials *cr = NULL;
    if (!cert || !key) tn_fail(e, TN_INVALID_ARGUMENT, "%s: cannot read it", !cert ? o->tls_cert : o->tls_key);
    else if (!strstr(cert, "-----BEGIN") || !strstr(key, "-----BEGIN"))
        tn_fail(e, TN_INVALID_ARGUMENT, "%s: not a PEM file", !strstr(cert, "-----BEGIN") ? o->tls_cert : o->tls_key);
    else {
        grpc_ssl_pem_key_cert_pair pair = {key, cert};
        cr = grpc_ssl_server_credentials_create(NULL, &pair, 1, 0, NULL);
        if (!cr) tn_fail(e, TN_INVALID_ARGUMENT, "--tls-cert/--tls-key: gRPC refused them");
    }
    free(cert);
    free(key);
    return cr;
}

static int tn_server_bind(tn_server *s, tn_err *e)
{
    grpc_arg args[6];
    args[0] = (grpc_arg){GRPC_ARG_INTEGER, GRPC_ARG_ALLOW_REUSEPORT, {.integer = 0}};   /* a port in use is an error */
    args[1] = (grpc_arg){GRPC_ARG_INTEGER, GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, {.integer = TN_MAX_MESSAGE + 4096}};
    args[2] = (grpc_arg){GRPC_ARG_INTEGER, GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, {.integer = TN_MAX_MESSAGE + 4096}};
    args[3] = (grpc_arg){GRPC_ARG_INTEGER, GRPC_ARG_KEEPALIVE_TIME_MS, {.integer = 20000}};   /* dead clients */
    args[4] = (grpc_arg){GRPC_ARG_INTEGER, GRPC_ARG_KEEPALIVE_TIMEOUT_MS, {.integer = 10000}};
    args[5] = (grpc_arg){GRPC_ARG_INTEGER, GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, {.integer = 5000}};
    grpc_channel_args ca = {6, args};
    s->server = grpc_server_create(&ca, NULL);
    s->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(s->server, s->cq, NULL);
    s->open_method = grpc_server_register_method(s->server, tn_method_path(TN_M_OPEN_SESSION), NULL,
                                                 GRPC_SRM_PAYLOAD_NONE, 0);
    grpc_server_credentials *cr = tn_server_creds(&s->o, e);
    if (!cr) return e->code;
    char addr[300];
    const char *b = s->o.bind && *s->o.bind ? s->o.bind : "127.0.0.1";
    if (strchr(b, ':')) snprintf(addr, sizeof addr, "[%s]:%d", b, s->o.port);
    else snprintf(addr, sizeof addr, "%s:%d", b, s->o.port);
    s->port = grpc_server_add_http2_port(s->server, addr, cr);
    grpc_server_credentials_release(cr);
    if (s->port <= 0)
        return tn_fail(e, TN_UNAVAILABLE, "cannot listen on %s: the port is in use (another tpusim serve?) or the address "
                       "is not this machine's", addr);
    return TN_OK;
}

int tn_server_start(tn_service *svc, const tn_server_opts *o, tn_server **out, tn_err *e)
{
    *out = NULL;
    const char *b = o->bind && *o->bind ? o->bind : "127.0.0.1";
    if (!tn_is_loopback(b) && !(o->token && *o->token))
        return tn_fail(e, TN_PERMISSION_DENIED, "--bind %s: binding beyond this machine's loopback needs a token (--token "
                       "or TPUSIM_TOKEN); clients then set TPUSIM_TOKEN", b);
    if (o->token && (strlen(o->token) < 8 || strlen(o->token) > 256))
        return tn_fail(e, TN_INVALID_ARGUMENT, "--token: 8 to 256 characters");
    tn_server *s = calloc(1, sizeof *s);
    if (!s) return tn_fail(e, TN_RESOURCE_EXHAUSTED, "out of host memory");
    s->svc = svc;
    s->o = *o;
    s->nworkers = o->threads > 0 ? o->threads : 4;
    if (o->token && *o->token) snprintf(s->bearer, sizeof s->bearer, "Bearer %s", o->token);
    s->t_shutdown.kind = TN_TAG_SHUTDOWN;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    tn_grpc_init();
    int rc = tn_server_bind(s, e);
    if (rc) {
        if (s->server) grpc_server_destroy(s->server);
        grpc_completion_queue_shutdown(s->cq);
        while (grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type != GRPC_QUEUE_SHUTDOWN) {}
        grpc_completion_queue_destroy(s->cq);
        grpc_shutdown();
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        free(s);
        return rc;
    }
    grpc_server_start(s->server);
    s->workers = calloc((size_t)s->nworkers, sizeof *s->workers);
    for (int i = 0; i < 2 * s->nworkers; i++) tn_post_slot(s);
    for (int i = 0; i < 4; i++) tn_sess_post(s);
    s->started_events = !pthread_create(&s->events, NULL, tn_events, s);
    for (int i = 0; s->workers && i < s->nworkers; i++) pthread_create(&s->workers[i], NULL, tn_worker, s);
    *out = s;
    return TN_OK;
}

int tn_server_port(const tn_server *s) { return s->port; }

int64_t tn_server_calls(tn_server *s)
{
    pthread_mutex_lock(&s->mu);
    int64_t n = s->calls;
    pthread_mutex_unlock(&s->mu);
    return n;
}

int tn_server_expire_idle(tn_server *s, double idle_s)
{
    char ids[16][TN_SESSION_ID_LEN + 1];
    int n = tn_host_idle_sessions(s->svc->host, idle_s, ids, 16);
    for (int i = 0; i < n; i++) {
        int found = 0;
        pthread_mutex_lock(&s->mu);
        for (tn_sess_call *sc = s->streams; sc; sc = sc->next)
            if (!strcmp(sc->id, ids[i])) {
                snprintf(sc->why, sizeof sc->why, "it expired after %.0f s idle; what it held was freed", idle_s);
                grpc_call_cancel_with_status(sc->call, GRPC_STATUS_DEADLINE_EXCEEDED, sc->why, NULL);
                found = 1;
            }
        pthread_mutex_unlock(&s->mu);
        if (!found) tn_host_session_close(s->svc->host, ids[i], "it expired, idle");
    }
    return n;
}

void tn_server_stop(tn_server *s)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    grpc_server_shutdown_and_notify(s->server, s->cq, &s->t_shutdown);
    grpc_server_cancel_all_calls(s->server);
    for (int i = 0; s->workers && i < s->nworkers; i++) pthread_join(s->workers[i], NULL);
    if (s->started_events) pthread_join(s->events, NULL);
    while (s->qhead) {   /* calls that arrived after the workers left */
        tn_slot *sl = s->qhead;
        s->qhead = sl->next;
        tn_slot_free(sl);
    }
    grpc_server_destroy(s->server);
    grpc_completion_queue_destroy(s->cq);
    grpc_shutdown();
    free(s->workers);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}
