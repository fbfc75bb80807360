/* net.h — tpusim on the network: a simulated TPU host served over gRPC (tpusim serve), its client (the PJRT
 * plugin's remote mode, the CLI), TPU names in a registry and the job runner (SQLite under $TPUSIM_HOME).
 * Like the CLI and the plugin, this is a client of the public API (include/tpusim.h); only src/net/ and
 * src/pjrt/ know about gRPC. Names start with tn_.
 *
 *   tpusim.proto    the service and its messages (C generated at build time by protoc-c); health.proto: gRPC's
 *   err.c           errors with gRPC status codes; byte sizes; small helpers
 *   url.c           grpc://HOST:PORT, loopback addresses
 *   host.c          the device host: the slice's devices and HBM shared by sessions, buffers, executables, runs
 *   decode.c        every request decoded and validated before it reaches the host (errors name the field)
 *   service.c       one handler per method: decoded request -> host -> encoded response
 *   server.c        the gRPC server: threads, calls, the session streams, tokens, TLS, limits, expiry
 *   client.c        the gRPC client: a connection, a session, unary and streamed calls with deadlines
 *   registry.c      TPU names (name -> URL, state, heartbeat) and jobs (records, logs) in SQLite
 */
#ifndef TPU_NET_H
#define TPU_NET_H

#include "tpusim.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- errors (err.c): gRPC's status codes, a malloc'ed message ---- */
enum {
    TN_OK = 0, TN_CANCELLED = 1, TN_UNKNOWN = 2, TN_INVALID_ARGUMENT = 3, TN_DEADLINE_EXCEEDED = 4,
    TN_NOT_FOUND = 5, TN_ALREADY_EXISTS = 6, TN_PERMISSION_DENIED = 7, TN_RESOURCE_EXHAUSTED = 8,
    TN_FAILED_PRECONDITION = 9, TN_ABORTED = 10, TN_OUT_OF_RANGE = 11, TN_UNIMPLEMENTED = 12, TN_INTERNAL = 13,
    TN_UNAVAILABLE = 14, TN_DATA_LOSS = 15, TN_UNAUTHENTICATED = 16
};
typedef struct tn_err {
    int   code;
    char *msg;     /* NULL when code is TN_OK (or when even the message could not be allocated) */
} tn_err;
/* Sets *e (replacing an earlier error) and returns code. */
int         tn_fail(tn_err *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A failed tpusim call's message, with the code that fits its status (OOM -> RESOURCE_EXHAUSTED ...). */
int         tn_fail_tpu(tn_err *e, tpu_ctx *ctx, tpu_status st, const char *prefix);
void        tn_err_clear(tn_err *e);
const char *tn_err_msg(const tn_err *e);          /* "" if none */
void        tn_fmt_bytes(char *buf, size_t n, int64_t b);   /* "1.50G", "12.00M", "512B" */
double      tn_now(void);                         /* monotonic seconds */
double      tn_wall(void);                        /* seconds since the epoch */

/* ---- addresses (url.c) ---- */
#define TN_DEFAULT_PORT 8470
typedef struct tn_url {
    char host[256];
    int  port;
    int  tls;          /* grpcs:// */
    char target[300];  /* "host:port" (IPv6 in brackets), what gRPC connects to */
} tn_url;
/* grpc://HOST:PORT, grpcs://HOST:PORT or HOST:PORT (port 8470 when left out). */
int  tn_url_parse(const char *url, tn_url *out, tn_err *e);
/* 127.0.0.0/8, ::1, localhost. */
int  tn_is_loopback(const char *host);

/* ---- the device host (host.c): sessions on one simulated slice ---- */
typedef struct tn_host tn_host;
typedef struct tn_host_opts {
    const char  *slice;                 /* "v3-8" */
    tpu_numerics numerics;              /* when a compile does not say */
    int          threads;               /* kernel threads of a one-device run (0: all cores) */
    int          max_sessions;          /* 0: 64 */
    int64_t      max_buffers;           /* per session; 0: 1,000,000 */
    int64_t      max_executables;       /* per session; 0: 10,000 */
    int64_t      max_steps;             /* every run's limits (tpu_run_opts; 0: none); a request may ask for less */
    double       max_seconds;
} tn_host_opts;

int         tn_host_new(const tn_host_opts *o, tn_host **out, tn_err *e);
void        tn_host_free(tn_host *h);
const char *tn_host_slice(const tn_host *h);
const char *tn_host_spec(const tn_host *h);   /* the slice as given (a chip file's path) */
int         tn_host_num_devices(const tn_host *h);
const tpu_chip *tn_host_chip(const tn_host *h);
const tpu_device_info *tn_host_device(const tn_host *h, int d);
tpu_numerics tn_host_numerics(const tn_host *h);

/* What the registry and `tpusim list` show. */
typedef struct tn_host_status {
    int     sessions;
    int     running;          /* executions in progress: BUSY when > 0 */
    int64_t hbm_in_use;       /* all devices */
    int64_t hbm_total;
    int64_t buffers, executables, executions, compiles;
} tn_host_status;
void        tn_host_get_status(tn_host *h, tn_host_status *st);
int64_t     tn_host_device_in_use(tn_host *h, int d);

/* A session's id is 32 hex characters (128 random bits): it names the session in every request. */
#define TN_SESSION_ID_LEN 32
int         tn_host_session_open(tn_host *h, const char *client, char id[TN_SESSION_ID_LEN + 1], tn_err *e);
/* Frees everything the session holds (runs in progress finish first and their results are dropped).
 * Returns 0 if there was no such session. */
int         tn_host_session_close(tn_host *h, const char *id, const char *why);
/* Up to max ids of sessions idle (no call in progress, none since) for more than idle_s seconds. */
int         tn_host_idle_sessions(tn_host *h, double idle_s, char (*ids)[TN_SESSION_ID_LEN + 1], int max);

/* A buffer being uploaded: its HBM is reserved when it starts; tn_host_put_finish makes it visible. */
typedef struct tn_put tn_put;
int         tn_host_put_begin(tn_host *h, const char *sess, int device, tpu_dtype dt, int rank, const int64_t *dims,
                              int64_t total_bytes, tn_put **out, tn_err *e);
int         tn_host_put_data(tn_put *p, const void *data, size_t n, tn_err *e);
/* Registers the buffer (all bytes must have arrived); *info gets its handle and sizes. The put is freed. */
typedef struct tn_buffer_info {
    uint64_t  id;
    int       device;
    tpu_dtype dtype;
    int       rank;
    int64_t   dims[TPU_MAX_RANK];
    int64_t   hbm_bytes;
} tn_buffer_info;
int         tn_host_put_finish(tn_put *p, tn_buffer_info *info, tn_err *e);
void        tn_host_put_abort(tn_put *p);       /* a client gone mid-transfer: frees the reservation */

/* A reference to a live buffer's data for a download; release it with tn_host_get_end. */
typedef struct tn_get tn_get;
int         tn_host_get_begin(tn_host *h, const char *sess, uint64_t buffer, tn_get **out, const void **data,
                              size_t *n, tn_err *e);
void        tn_host_get_end(tn_get *g);

typedef struct tn_compile_req {
    const char  *program;
    size_t       len;
    int          replicas, partitions;     /* 0: 1 */
    const int   *assignment;               /* replicas x partitions device ids, or NULL: 0..n-1 */
    int          nassignment;
    int          numerics;                 /* -1: the host's */
} tn_compile_req;
typedef struct tn_compile_info {
    uint64_t         id;
    char             name[128];
    int              ninputs, noutputs;
    tpu_memory_stats mem;
} tn_compile_info;
int         tn_host_compile(tn_host *h, const char *sess, const tn_compile_req *r, tn_compile_info *info, tn_err *e);

typedef struct tn_exec_req {
    uint64_t        executable;
    int             ndevices;              /* argument lists */
    int             nargs;                 /* per device */
    const uint64_t *args;                  /* ndevices x nargs handles */
    const int      *devices;               /* where to run, or NULL: as compiled */
    const int64_t  *non_donatable;
    int             nnon_donatable;
    const tpu_host_io *host;               /* host transfers (ExecuteStream), or NULL */
    int64_t         max_steps;             /* the client's limits (0: the host's) */
    double          max_seconds;
} tn_exec_req;
typedef struct tn_exec_result {
    int             ndevices, noutputs;
    tn_buffer_info *outputs;               /* ndevices x noutputs (malloc'ed) */
    int64_t        *donated;               /* inputs donated (malloc'ed) */
    int             ndonated;
    double          run_s;
} tn_exec_result;
int         tn_host_execute(tn_host *h, const char *sess, const tn_exec_req *r, tn_exec_result *res, tn_err *e);
void        tn_exec_result_free(tn_exec_result *r);

/* Deletes buffers and executables of the session; unknown handles are an error naming the first. */
int         tn_host_delete(tn_host *h, const char *sess, const uint64_t *bufs, int nbufs, const uint64_t *exes,
                           int nexes, int *deleted, tn_err *e);

/* The memory report: per device in use, per session what it holds (a table; the caller frees it). */
typedef struct tn_session_memory {
    char    id[TN_SESSION_ID_LEN + 1];
    char    client[160];
    int64_t buffers, executables;
    int64_t hbm[64];                       /* first 64 devices */
    double  idle_s;
} tn_session_memory;
int         tn_host_memory_report(tn_host *h, tn_session_memory **sessions, int *nsessions, char **text);

/* The timing model's profile of an executable (step time, bound, MXU use, summary text, advice, JSON). */
typedef struct tn_profile_info {
    double step_s, mxu_util;
    char   bound[32];
    char  *summary, *advice, *json;        /* malloc'ed */
} tn_profile_info;
int         tn_host_profile(tn_host *h, const char *sess, uint64_t exe, int top, tn_profile_info *out, tn_err *e);
void        tn_profile_info_free(tn_profile_info *p);


/* ---- the protocol: methods, limits, the request decoder (decode.c) ---- */
typedef struct ProtobufCMessage ProtobufCMessage;
typedef enum tn_method {
    TN_M_OPEN_SESSION, TN_M_SYSTEM_INFO, TN_M_COMPILE, TN_M_PUT_BUFFER, TN_M_GET_BUFFER, TN_M_EXECUTE, TN_M_DELETE,
    TN_M_MEMORY_REPORT, TN_M_PROFILE_REPORT, TN_M_HEALTH_CHECK, TN_M_HEALTH_WATCH, TN_M_EXECUTE_STREAM, TN_M_COUNT
} tn_method;
#define TN_MAX_MESSAGE   (64 << 20)   /* bytes of one message, either way */
#define TN_CHUNK         (4 << 20)    /* bytes of data per transfer message */
#define TN_MAX_LIST      100000       /* handles in one request */
#define TN_MAX_DEVICES   64           /* argument lists in one Execute */
/* "/tpusim.v1.Tpu/Compile" -> TN_M_COMPILE; -1 if unknown. */
int         tn_method_from_path(const char *path, size_t len);
const char *tn_method_path(tn_method m);
/* Decodes and validates one request message of method m (first: the first message of a PutBuffer stream).
 * Returns the protobuf-c message (free with tn_msg_free) or NULL with INVALID_ARGUMENT naming the field. */
ProtobufCMessage *tn_decode(tn_method m, const uint8_t *buf, size_t len, int first, tn_err *e);
void        tn_msg_free(ProtobufCMessage *msg);
/* Serializes a message into a malloc'ed buffer. */
uint8_t    *tn_msg_pack(const ProtobufCMessage *msg, size_t *len);
/* "f32" -> TPU_F32 for array element types; TPU_INVALID otherwise. */
tpu_dtype   tn_array_dtype(const char *name);
/* The session id must be TN_SESSION_ID_LEN hex characters. */
int         tn_check_session(const char *id, tn_err *e);

/* ---- the service (service.c): requests to the host, without gRPC ---- */
typedef struct tn_service {
    tn_host    *host;
    char        name[128];      /* the registered TPU name, or "" */
    int64_t     chunk;          /* bytes per GetBuffer chunk */
} tn_service;
/* A call in progress, as the server gives it to a handler: messages in and out (server.c). */
typedef struct tn_call tn_call;
/* The next request message: 1 (in *buf, *len; valid until the next call), 0 the client is done sending,
 * -1 the call failed (cancelled, deadline, client gone). */
int         tn_call_recv(tn_call *c, const uint8_t **buf, size_t *len);
int         tn_call_send(tn_call *c, const ProtobufCMessage *msg);   /* 0 or -1 */
/* Runs method m's handler on the call; returns the status code (message in *e). Not for OpenSession. */
int         tn_service_handle(tn_service *svc, tn_method m, tn_call *c, tn_err *e);
/* OpenSession: opens a host session for the request; *event gets the packed SessionEvent. */
int         tn_service_open_session(tn_service *svc, const uint8_t *req, size_t len, char id[TN_SESSION_ID_LEN + 1],
                                    uint8_t **event, size_t *event_len, tn_err *e);


/* grpc_init with gRPC's own log lines silenced (TPUSIM_GRPC_LOG=1 shows them) (client.c). */
void        tn_grpc_init(void);

/* ---- the server (server.c) ---- */
typedef struct tn_server tn_server;
typedef struct tn_server_opts {
    const char *bind;          /* NULL: 127.0.0.1; anything beyond loopback needs a token */
    int         port;          /* 0: a free port (tn_server_port says which) */
    const char *token;         /* every call must carry "authorization: Bearer TOKEN" (NULL: none) */
    const char *tls_cert, *tls_key;   /* PEM files: TLS (grpcs://) */
    int         threads;       /* workers serving calls (0: 4) */
} tn_server_opts;
/* Binds and starts serving svc (errors: the port in use, a non-loopback bind without a token, bad TLS files). */
int         tn_server_start(tn_service *svc, const tn_server_opts *o, tn_server **out, tn_err *e);
int         tn_server_port(const tn_server *s);
int64_t     tn_server_calls(tn_server *s);
/* Ends sessions idle for more than idle_s seconds (their streams get DEADLINE_EXCEEDED); returns how many. */
int         tn_server_expire_idle(tn_server *s, double idle_s);
/* Cancels every call, ends every session, joins the threads and frees the server. */
void        tn_server_stop(tn_server *s);

/* ---- the client (client.c) ---- */
typedef struct tn_client tn_client;
typedef struct tn_client_opts {
    const char *token;         /* NULL: TPUSIM_TOKEN */
    const char *tls_ca;        /* PEM roots for grpcs:// (NULL: TPUSIM_TLS_CA, else the system's) */
    double      timeout_s;     /* per call (0: TPUSIM_RPC_TIMEOUT, else 3600) */
    const char *client;        /* who we are, for the server's reports (NULL: program, pid, host) */
} tn_client_opts;
int         tn_client_new(const char *url, const tn_client_opts *o, tn_client **out, tn_err *e);
void        tn_client_free(tn_client *c);      /* ends the session (the server frees what it held) */
const char *tn_client_url(const tn_client *c);
/* gRPC's health Check within timeout_s: TN_OK when SERVING. */
int         tn_client_health(tn_client *c, double timeout_s, tn_err *e);
/* Opens the session (a stream kept open until tn_client_free); *event (if not NULL) gets the first
 * SessionEvent (free with tn_msg_free). */
int         tn_client_open_session(tn_client *c, ProtobufCMessage **event, tn_err *e);
const char *tn_client_session(const tn_client *c);
/* One request, one response (resp_desc: the response's descriptor; free *resp with tn_msg_free). */
int         tn_client_unary(tn_client *c, tn_method m, const ProtobufCMessage *req, const void *resp_desc,
                            ProtobufCMessage **resp, double timeout_s, tn_err *e);
/* Uploads an array to a device in chunks; *info gets the server's handle. */
int         tn_client_put(tn_client *c, int device, tpu_dtype dt, int rank, const int64_t *dims, const void *data,
                          size_t nbytes, tn_buffer_info *info, tn_err *e);
/* A call with messages both ways (ExecuteStream): send, receive (1 with a malloc'ed *buf, 0 at the end, -1
 * failed), then finish, which closes the client's side, waits for the status and frees the stream. */
typedef struct tn_stream tn_stream;
int         tn_stream_open(tn_client *c, tn_method m, tn_stream **out, tn_err *e);
int         tn_stream_send(tn_stream *s, const ProtobufCMessage *msg);
int         tn_stream_recv(tn_stream *s, uint8_t **buf, size_t *len);
int         tn_stream_finish(tn_stream *s, int cancel, tn_err *e);   /* cancel: end it now (a local failure) */
/* Downloads a buffer into dst (exactly nbytes). */
int         tn_client_get(tn_client *c, uint64_t buffer, void *dst, size_t nbytes, tn_err *e);


/* ---- TPU names and jobs (registry.c): SQLite at $TPUSIM_HOME/registry.db (default ~/.tpusim) ---- */
typedef struct tn_registry tn_registry;
int         tn_registry_open(const char *home, tn_registry **out, tn_err *e);   /* home NULL: $TPUSIM_HOME, ~/.tpusim */
void        tn_registry_close(tn_registry *r);
const char *tn_registry_home(const tn_registry *r);

#define TN_HEARTBEAT_S 2.0          /* a server's heartbeat; an entry 5 beats old is checked for health */
typedef struct tn_tpu_entry {
    char    name[128], url[300], slice[64], state[16], host[128];
    int     pid, clients;
    int64_t hbm_in_use, hbm_total;
    double  started, heartbeat;     /* seconds since the epoch */
} tn_tpu_entry;
/* Registers e->name -> e->url. A name held by a server that still answers is ALREADY_EXISTS (naming it); a
 * stale holder's entry is taken over (*replaced, if not NULL, says so). */
int         tn_registry_claim(tn_registry *r, const tn_tpu_entry *e, int *replaced, tn_err *err);
int         tn_registry_heartbeat(tn_registry *r, const tn_tpu_entry *e, tn_err *err);
void        tn_registry_release(tn_registry *r, const char *name, int pid);
int         tn_registry_lookup(tn_registry *r, const char *name, tn_tpu_entry *out, tn_err *err);
int         tn_registry_list(tn_registry *r, tn_tpu_entry **out, int *n, tn_err *err);
/* Whether the server at url answers gRPC's health check within timeout_s. */
int         tn_tpu_healthy(const char *url, double timeout_s, tn_err *err);
/* The state to show: the entry's own (READY/BUSY) when it answers, UNHEALTHY when not. */
const char *tn_tpu_state(const tn_tpu_entry *e, double timeout_s);
/* TPU_NAME -> URL the way the plugin, the CLI and the Python helper do it: the registry's entry, which must
 * answer its health check. */
int         tn_resolve(const char *name, char *url, size_t n, tn_err *err);

typedef struct tn_job {
    int64_t id;
    char    tpu[128], url[300], state[16];
    char   *command, *workdir, *data_dir, *model_dir, *artifacts_dir, *message;   /* malloc'ed */
    int     pid, exit_code;
    double  created, started, ended;
} tn_job;
void        tn_job_clear(tn_job *j);
int         tn_job_insert(tn_registry *r, tn_job *j, tn_err *err);       /* sets j->id */
int         tn_job_update(tn_registry *r, const tn_job *j, tn_err *err);   /* state, pid, exit, times, message, dirs */
int         tn_job_get(tn_registry *r, int64_t id, tn_job *out, tn_err *err);
int         tn_job_list(tn_registry *r, tn_job **out, int *n, tn_err *err);
int         tn_job_log_append(tn_registry *r, int64_t id, const char *stream, const char *line, size_t len, tn_err *err);
/* Log lines after seq (0: from the start) to f; *last gets the last seq written. */
int         tn_job_log_print(tn_registry *r, int64_t id, int64_t after, FILE *f, int64_t *last, tn_err *err);

#endif
