/* t_net.c — tpusim on the network (src/net): addresses, the request decoder, a server started in this process
 * on a free loopback port (stopped by each test) and its client: sessions, buffers in chunks, compile, execute,
 * donation, reports, HBM shared across sessions, tokens, idle expiry, the port in use; the registry and jobs
 * tables in a temporary TPUSIM_HOME. */
#include "test.h"
#include "net/net.h"
#include "tpusim.pb-c.h"

#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static const char *ADD_HLO =
    "HloModule add\n\nENTRY main {\n  x = f32[2,3] parameter(0)\n  y = f32[2,3] parameter(1)\n"
    "  ROOT s = f32[2,3] add(x, y)\n}\n";

static const char *DONATE_HLO =
    "HloModule inc, input_output_alias={ {}: (0, {}, may-alias) }\n\nENTRY main {\n  x = f32[4] parameter(0)\n"
    "  one = f32[] constant(1)\n  b = f32[4] broadcast(one), dimensions={}\n  ROOT s = f32[4] add(x, b)\n}\n";

typedef struct net_fixture {
    tn_host    *host;
    tn_service  svc;
    tn_server  *srv;
    char        url[64];
} net_fixture;

static int net_start(net_fixture *f, const char *slice, const char *token)
{
    memset(f, 0, sizeof *f);
    tn_err e = {0};
    tn_host_opts ho = {.slice = slice, .threads = 1};
    if (tn_host_new(&ho, &f->host, &e)) {
        test_fail(__FILE__, __LINE__, "host: %s", tn_err_msg(&e));
        tn_err_clear(&e);
        return -1;
    }
    f->svc.host = f->host;
    f->svc.chunk = 1000;   /* small chunks: downloads arrive in several messages */
    tn_server_opts so = {.port = 0, .token = token, .threads = 2};
    if (tn_server_start(&f->svc, &so, &f->srv, &e)) {
        test_fail(__FILE__, __LINE__, "server: %s", tn_err_msg(&e));
        tn_err_clear(&e);
        tn_host_free(f->host);
        return -1;
    }
    snprintf(f->url, sizeof f->url, "grpc://127.0.0.1:%d", tn_server_port(f->srv));
    return 0;
}

static void net_stop(net_fixture *f)
{
    tn_server_stop(f->srv);
    tn_host_free(f->host);
}

static tn_client *net_connect(net_fixture *f, const char *token, const char *who)
{
    tn_client *c = NULL;
    tn_err e = {0};
    tn_client_opts o = {.token = token ? token : "", .client = who, .timeout_s = 60};
    if (tn_client_new(f->url, &o, &c, &e) || tn_client_open_session(c, NULL, &e)) {
        test_fail(__FILE__, __LINE__, "connect %s: %s", f->url, tn_err_msg(&e));
        tn_err_clear(&e);
        tn_client_free(c);
        return NULL;
    }
    return c;
}

static uint64_t net_compile(tn_client *c, const char *hlo, tn_err *e)
{
    Tpusim__V1__CompileRequest r = TPUSIM__V1__COMPILE_REQUEST__INIT;
    r.session = (char *)tn_client_session(c);
    r.format = "hlo";
    r.program.data = (uint8_t *)hlo;
    r.program.len = strlen(hlo);
    ProtobufCMessage *resp = NULL;
    if (tn_client_unary(c, TN_M_COMPILE, &r.base, &tpusim__v1__compile_response__descriptor, &resp, 0, e)) return 0;
    uint64_t id = ((Tpusim__V1__CompileResponse *)resp)->executable;
    tn_msg_free(resp);
    return id;
}

static Tpusim__V1__ExecuteResponse *net_execute(tn_client *c, uint64_t exe, const uint64_t *args, size_t n, tn_err *e)
{
    Tpusim__V1__ExecuteRequest r = TPUSIM__V1__EXECUTE_REQUEST__INIT;
    Tpusim__V1__ArgumentList al = TPUSIM__V1__ARGUMENT_LIST__INIT, *alp = &al;
    al.buffers = (uint64_t *)args;
    al.n_buffers = n;
    r.session = (char *)tn_client_session(c);
    r.executable = exe;
    r.arguments = &alp;
    r.n_arguments = 1;
    ProtobufCMessage *resp = NULL;
    tn_client_unary(c, TN_M_EXECUTE, &r.base, &tpusim__v1__execute_response__descriptor, &resp, 0, e);
    return (Tpusim__V1__ExecuteResponse *)resp;
}

TEST(net_url_and_loopback)
{
    tn_url u;
    tn_err e = {0};
    CHECK_EQ_INT(tn_url_parse("grpc://10.0.0.5:8470", &u, &e), TN_OK);
    CHECK_EQ_STR(u.target, "10.0.0.5:8470");
    CHECK_EQ_INT(tn_url_parse("grpcs://[::1]:9", &u, &e), TN_OK);
    CHECK_EQ_STR(u.target, "[::1]:9");
    CHECK(u.tls);
    CHECK_EQ_INT(tn_url_parse("localhost", &u, &e), TN_OK);
    CHECK_EQ_INT(u.port, 8470);
    CHECK_EQ_INT(tn_url_parse("http://x:1", &u, &e), TN_INVALID_ARGUMENT);
    CHECK(strstr(tn_err_msg(&e), "unknown scheme"));
    CHECK_EQ_INT(tn_url_parse("grpc://x:70000", &u, &e), TN_INVALID_ARGUMENT);
    CHECK(strstr(tn_err_msg(&e), "port"));
    CHECK_EQ_INT(tn_url_parse("grpc://:5", &u, &e), TN_INVALID_ARGUMENT);
    CHECK(tn_is_loopback("127.0.0.1") && tn_is_loopback("127.9.8.7") && tn_is_loopback("::1") && tn_is_loopback("localhost"));
    CHECK(!tn_is_loopback("0.0.0.0") && !tn_is_loopback("10.1.2.3") && !tn_is_loopback("example.com"));
    tn_err_clear(&e);
}

/* Encodes msg and runs it through the decoder of method m. */
static int net_decode_code(tn_method m, const ProtobufCMessage *msg, int first, tn_err *e)
{
    size_t len;
    uint8_t *buf = tn_msg_pack(msg, &len);
    ProtobufCMessage *got = tn_decode(m, buf, len, first, e);
    free(buf);
    int code = got ? TN_OK : e->code;
    tn_msg_free(got);
    return code;
}

TEST(net_decoder_names_the_field)
{
    tn_err e = {0};
    const char sid[] = "0123456789abcdef0123456789abcdef";
    Tpusim__V1__CompileRequest c = TPUSIM__V1__COMPILE_REQUEST__INIT;
    c.session = (char *)sid;
    c.format = "hlo";
    c.program.data = (uint8_t *)"x";
    c.program.len = 1;
    CHECK_EQ_INT(net_decode_code(TN_M_COMPILE, &c.base, 1, &e), TN_OK);
    c.num_partitions = -2;
    CHECK_EQ_INT(net_decode_code(TN_M_COMPILE, &c.base, 1, &e), TN_INVALID_ARGUMENT);
    CHECK(strstr(tn_err_msg(&e), "CompileRequest.num_replicas/num_partitions"));
    c.num_partitions = 0;
    c.format = "tensorflow";
    CHECK_EQ_INT(net_decode_code(TN_M_COMPILE, &c.base, 1, &e), TN_INVALID_ARGUMENT);
    CHECK(strstr(tn_err_msg(&e), "CompileRequest.format"));
    c.format = "hlo";
    c.session = "not-a-session";
    CHECK_EQ_INT(net_decode_code(TN_M_COMPILE, &c.base, 1, &e), TN_INVALID_ARGUMENT);
    CHECK(strstr(tn_err_msg(&e), "CompileRequest.session"));
    Tpusim__V1__PutBufferRequest p = TPUSIM__V1__PUT_BUFFER_REQUEST__INIT;
    int64_t dims[2] = {2, -3};
    p.session = (char *)sid;
    p.dtype = "f33";
    CHECK_EQ_INT(net_decode_code(TN_M_PUT_BUFFER, &p.base, 1, &e), TN_INVALID_ARGUMENT);
    CHECK(strstr(tn_err_msg(&e), "PutBufferRequest.dtype"));
    p.dtype = "f32";
    p.dims = dims;
    p.n_dims = 2;
    CHECK_EQ_INT(net_decode_code(TN_M_PUT_BUFFER, &p.base, 1, &e), TN_INVALID_ARGUMENT);
    CHECK(strstr(tn_err_msg(&e), "PutBufferRequest.dims[1]"));
    CHECK_EQ_INT(net_decode_code(TN_M_PUT_BUFFER, &p.base, 0, &e), TN_INVALID_ARGUMENT);   /* header fields later on */
    CHECK(strstr(tn_err_msg(&e), "only in the first message"));
    Tpusim__V1__ExecuteRequest x = TPUSIM__V1__EXECUTE_REQUEST__INIT;
    x.session = (char *)sid;
    x.executable = 5;
    CHECK_EQ_INT(net_decode_code(TN_M_EXECUTE, &x.base, 1, &e), TN_INVALID_ARGUMENT);
    CHECK(strstr(tn_err_msg(&e), "ExecuteRequest.arguments"));
    const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x12};
    CHECK(tn_decode(TN_M_COMPILE, junk, sizeof junk, 1, &e) == NULL);
    CHECK(strstr(tn_err_msg(&e), "do not decode"));
    /* a field numbered 0 (protobuf-c keeps it as an unknown field) is refused at any depth: here inside the
     * ExecuteRequest of an ExecuteStreamRequest, after a valid session, executable and argument list */
    uint8_t nested[64], *q = nested;
    *q++ = 0x0a, *q++ = 0;                    /* ExecuteStreamRequest.execute, length below */
    *q++ = 0x0a, *q++ = 32;                   /* ExecuteRequest.session */
    memcpy(q, sid, 32), q += 32;
    *q++ = 0x10, *q++ = 1;                    /* executable 1 */
    *q++ = 0x1a, *q++ = 0;                    /* arguments: one empty list */
    const uint8_t field0[] = {0x81, 0x00, 0, 0x60, 0x40, 0, 2, 0x50, 0x90, 2};   /* field 0, fixed64 */
    memcpy(q, field0, sizeof field0), q += sizeof field0;
    nested[1] = (uint8_t)(q - nested - 2);
    CHECK(tn_decode(TN_M_EXECUTE_STREAM, nested, (size_t)(nested[1] + 2), 1, &e) == NULL);
    CHECK(strstr(tn_err_msg(&e), "field numbered 0"));
    nested[1] -= sizeof field0;                /* without it the same request decodes */
    ProtobufCMessage *ok = tn_decode(TN_M_EXECUTE_STREAM, nested, (size_t)(nested[1] + 2), 1, &e);
    CHECK(ok != NULL);
    tn_msg_free(ok);
    CHECK_EQ_INT(tn_method_from_path("/tpusim.v1.Tpu/Execute", 22), TN_M_EXECUTE);
    CHECK_EQ_INT(tn_method_from_path("/tpusim.v1.Tpu/Nope", 19), -1);
    tn_err_clear(&e);
}

TEST(net_session_buffers_compile_execute)
{
    net_fixture f;
    if (net_start(&f, "v3-8", NULL)) return;
    tn_client *c = net_connect(&f, NULL, "t_net roundtrip");
    tn_err e = {0};
    if (!c) goto out;
    CHECK_EQ_INT(tn_client_health(c, 10, &e), TN_OK);
    float x[6] = {1, 2, 3, 4, 5, 6}, y[6] = {10, 20, 30, 40, 50, 60}, got[6] = {0};
    int64_t dims[2] = {2, 3};
    tn_buffer_info bx, by;
    CHECK_EQ_INT(tn_client_put(c, 3, TPU_F32, 2, dims, x, sizeof x, &bx, &e), TN_OK);
    CHECK_EQ_INT(tn_client_put(c, 3, TPU_F32, 2, dims, y, sizeof y, &by, &e), TN_OK);
    CHECK_EQ_INT(bx.hbm_bytes, tpu_chip_array_bytes(tn_host_chip(f.host), TPU_F32, 2, dims));   /* tiled (8,128): 4 KiB */
    CHECK_EQ_INT(tn_host_device_in_use(f.host, 3), 2 * bx.hbm_bytes);
    uint64_t exe = net_compile(c, ADD_HLO, &e);
    REQUIRE(exe != 0);
    uint64_t args[2] = {bx.id, by.id};
    /* compiled for device 0, the arguments are on device 3: refused, naming the argument */
    Tpusim__V1__ExecuteResponse *r = net_execute(c, exe, args, 2, &e);
    CHECK(r == NULL && e.code == TN_INVALID_ARGUMENT && strstr(tn_err_msg(&e), "arguments[0].buffers[0]: on TPU_3"));
    tn_msg_free(r ? &r->base : NULL);
    float big[3000];
    for (int i = 0; i < 3000; i++) big[i] = (float)i;
    int64_t bd[1] = {3000};
    tn_buffer_info bb;
    CHECK_EQ_INT(tn_client_put(c, 0, TPU_F32, 1, bd, big, sizeof big, &bb, &e), TN_OK);
    float back[3000] = {0};
    CHECK_EQ_INT(tn_client_get(c, bb.id, back, sizeof back, &e), TN_OK);   /* 12 chunks of 1000 bytes */
    CHECK(!memcmp(back, big, sizeof big));
    CHECK_EQ_INT(tn_client_put(c, 0, TPU_F32, 2, dims, x, sizeof x, &bx, &e), TN_OK);
    CHECK_EQ_INT(tn_client_put(c, 0, TPU_F32, 2, dims, y, sizeof y, &by, &e), TN_OK);
    args[0] = bx.id, args[1] = by.id;
    r = net_execute(c, exe, args, 2, &e);
    REQUIRE(r != NULL);
    CHECK_EQ_INT(r->n_results, 1);
    CHECK_EQ_INT(r->results[0]->n_outputs, 1);
    uint64_t out = r->results[0]->outputs[0]->buffer;
    tn_msg_free(&r->base);
    CHECK_EQ_INT(tn_client_get(c, out, got, sizeof got, &e), TN_OK);
    for (int i = 0; i < 6; i++) CHECK_NEAR(got[i], x[i] + y[i], 0);
    CHECK_EQ_INT(tn_client_get(c, out, got, 8, &e), TN_DATA_LOSS);   /* the wrong size is an error, not an overflow */
    CHECK_EQ_INT(tn_client_get(c, 987654, got, sizeof got, &e), TN_NOT_FOUND);
    CHECK(strstr(tn_err_msg(&e), "no buffer 987654"));
    tn_client_free(c);
out:
    tn_err_clear(&e);
    net_stop(&f);
}

TEST(net_donation_compile_errors_reports)
{
    net_fixture f;
    if (net_start(&f, "v3-8", NULL)) return;
    tn_client *c = net_connect(&f, NULL, "t_net donation");
    tn_err e = {0};
    if (!c) goto out;
    float v[4] = {1, 2, 3, 4}, got[4];
    int64_t d4[1] = {4};
    tn_buffer_info b;
    CHECK_EQ_INT(tn_client_put(c, 0, TPU_F32, 1, d4, v, sizeof v, &b, &e), TN_OK);
    uint64_t exe = net_compile(c, DONATE_HLO, &e);
    REQUIRE(exe != 0);
    Tpusim__V1__ExecuteResponse *r = net_execute(c, exe, &b.id, 1, &e);
    REQUIRE(r != NULL);
    CHECK_EQ_INT(r->n_donated, 1);
    uint64_t out = r->results[0]->outputs[0]->buffer;
    tn_msg_free(&r->base);
    CHECK_EQ_INT(tn_client_get(c, b.id, got, sizeof got, &e), TN_NOT_FOUND);   /* donated: gone */
    CHECK_EQ_INT(tn_client_get(c, out, got, sizeof got, &e), TN_OK);
    CHECK_NEAR(got[3], 5, 0);
    /* a program the TPU compiler refuses, and one that is not HLO */
    CHECK_EQ_INT(net_compile(c, "HloModule m\nENTRY e { ROOT p = f32[?] parameter(0) }", &e), 0);
    CHECK(e.code == TN_INVALID_ARGUMENT || e.code == TN_UNIMPLEMENTED);
    CHECK_EQ_INT(net_compile(c, "not hlo at all", &e), 0);
    CHECK_EQ_INT(e.code, TN_INVALID_ARGUMENT);
    CHECK(strstr(tn_err_msg(&e), "program"));
    /* the memory report names the session's client */
    Tpusim__V1__MemoryReportRequest mr = TPUSIM__V1__MEMORY_REPORT_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    CHECK_EQ_INT(tn_client_unary(c, TN_M_MEMORY_REPORT, &mr.base, &tpusim__v1__memory_report_response__descriptor, &resp, 0, &e), TN_OK);
    if (resp) {
        Tpusim__V1__MemoryReportResponse *m = (void *)resp;
        CHECK_EQ_INT(m->n_sessions, 1);
        CHECK(strstr(m->text, "t_net donation") != NULL);
        CHECK_EQ_INT(m->n_devices, 8);
    }
    tn_msg_free(resp);
    Tpusim__V1__ProfileReportRequest pr = TPUSIM__V1__PROFILE_REPORT_REQUEST__INIT;
    pr.session = (char *)tn_client_session(c);
    pr.executable = exe;
    resp = NULL;
    CHECK_EQ_INT(tn_client_unary(c, TN_M_PROFILE_REPORT, &pr.base, &tpusim__v1__profile_report_response__descriptor, &resp, 0, &e), TN_OK);
    if (resp) CHECK(((Tpusim__V1__ProfileReportResponse *)resp)->step_seconds > 0);
    tn_msg_free(resp);
    tn_client_free(c);
out:
    tn_err_clear(&e);
    net_stop(&f);
}

/* Polls (bounded in count) until device d's HBM in use is `want`: sessions end asynchronously. */
static int net_wait_hbm(tn_host *h, int d, int64_t want)
{
    for (int i = 0; i < 500; i++) {
        if (tn_host_device_in_use(h, d) == want) return 1;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

TEST(net_hbm_is_shared_and_freed_with_the_session)
{
    const char *chip = "build/t_net_tiny_hbm.json";   /* a v5e with 1 MiB of HBM */
    FILE *cf = fopen(chip, "w");
    REQUIRE(cf != NULL);
    fprintf(cf, "{\"name\": \"tiny\", \"base\": \"v5e\", \"hbm_gib\": 0.0009765625, \"hbm_reserved_mib\": 0}\n");
    fclose(cf);
    net_fixture f;
    if (net_start(&f, chip, NULL)) return;
    tn_client *a = net_connect(&f, NULL, "alice's train.py"), *b = net_connect(&f, NULL, "bob's eval.py");
    tn_err e = {0};
    static float data[160 * 1024];   /* 640 KiB */
    int64_t dims[1] = {160 * 1024};
    tn_buffer_info ba, bb;
    if (!a || !b) goto out;
    CHECK_EQ_INT(tn_client_put(a, 0, TPU_F32, 1, dims, data, sizeof data, &ba, &e), TN_OK);
    CHECK_EQ_INT(tn_client_put(b, 0, TPU_F32, 1, dims, data, sizeof data, &bb, &e), TN_RESOURCE_EXHAUSTED);
    CHECK_MSG(strstr(tn_err_msg(&e), "alice's train.py") != NULL, "holder not named: %s", tn_err_msg(&e));
    CHECK(strstr(tn_err_msg(&e), "Out of memory while trying to allocate") != NULL);
    /* alice goes away: her session ends and her HBM is freed; bob's allocation then fits */
    tn_client_free(a);
    a = NULL;
    CHECK(net_wait_hbm(f.host, 0, 0));
    CHECK_EQ_INT(tn_client_put(b, 0, TPU_F32, 1, dims, data, sizeof data, &bb, &e), TN_OK);
    /* idle sessions expire: bob's (idle now) ends, his HBM is freed and his session is unknown after */
    CHECK_EQ_INT(tn_server_expire_idle(f.srv, 0.0), 1);
    CHECK(net_wait_hbm(f.host, 0, 0));
    CHECK_EQ_INT(tn_client_put(b, 0, TPU_F32, 1, dims, data, 64, &bb, &e), TN_INVALID_ARGUMENT);   /* sizes disagree */
    int64_t one[1] = {16};
    CHECK_EQ_INT(tn_client_put(b, 0, TPU_F32, 1, one, data, 64, &bb, &e), TN_NOT_FOUND);
    CHECK_MSG(strstr(tn_err_msg(&e), "has ended (it expired after 0 s idle") != NULL, "%s", tn_err_msg(&e));
out:
    tn_client_free(a);
    tn_client_free(b);
    tn_err_clear(&e);
    net_stop(&f);
}

TEST(net_token_bind_and_port_checks)
{
    net_fixture f;
    if (net_start(&f, "v3-8", "s3cret-token")) return;
    tn_client *c = NULL;
    tn_err e = {0};
    tn_client_opts o = {.token = "", .timeout_s = 30};
    CHECK_EQ_INT(tn_client_new(f.url, &o, &c, &e), TN_OK);
    CHECK_EQ_INT(tn_client_open_session(c, NULL, &e), TN_UNAUTHENTICATED);
    CHECK(strstr(tn_err_msg(&e), "TPUSIM_TOKEN"));
    int rc = tn_client_health(c, 10, &e);
    CHECK_MSG(rc == TN_UNAUTHENTICATED, "health without a token: %d (%s)", rc, tn_err_msg(&e));
    tn_client_free(c);
    o.token = "wrong-token!";
    c = NULL;
    CHECK_EQ_INT(tn_client_new(f.url, &o, &c, &e), TN_OK);
    rc = tn_client_health(c, 10, &e);
    CHECK_MSG(rc == TN_UNAUTHENTICATED, "health with a wrong token: %d (%s)", rc, tn_err_msg(&e));
    tn_client_free(c);
    tn_client *ok = net_connect(&f, "s3cret-token", "with token");
    CHECK(ok != NULL);
    tn_client_free(ok);
    /* a second server on the same port */
    tn_server *dup = NULL;
    tn_server_opts so = {.port = tn_server_port(f.srv)};
    CHECK_EQ_INT(tn_server_start(&f.svc, &so, &dup, &e), TN_UNAVAILABLE);
    CHECK(strstr(tn_err_msg(&e), "in use"));
    /* beyond loopback without a token: refused before binding */
    so.port = 0;
    so.bind = "0.0.0.0";
    CHECK_EQ_INT(tn_server_start(&f.svc, &so, &dup, &e), TN_PERMISSION_DENIED);
    CHECK(strstr(tn_err_msg(&e), "needs a token"));
    /* a server that is not there */
    c = NULL;
    o.token = NULL;
    CHECK_EQ_INT(tn_client_new("grpc://127.0.0.1:1", &o, &c, &e), TN_OK);
    CHECK_EQ_INT(tn_client_health(c, 5, &e), TN_UNAVAILABLE);
    CHECK(strstr(tn_err_msg(&e), "is `tpusim serve` running"));
    tn_client_free(c);
    tn_err_clear(&e);
    net_stop(&f);
}

TEST(net_registry_names_and_jobs)
{
    char home[] = "/tmp/tpusim-t_net-XXXXXX";
    REQUIRE(mkdtemp(home) != NULL);
    tn_registry *r = NULL;
    tn_err e = {0};
    REQUIRE(tn_registry_open(home, &r, &e) == TN_OK);
    net_fixture f;
    if (net_start(&f, "v3-8", NULL)) {
        tn_registry_close(r);
        return;
    }
    tn_tpu_entry t = {.pid = 1234, .heartbeat = tn_wall()};
    snprintf(t.name, sizeof t.name, "my-tpu");
    snprintf(t.url, sizeof t.url, "%s", f.url);
    snprintf(t.state, sizeof t.state, "READY");
    int replaced = 0;
    CHECK_EQ_INT(tn_registry_claim(r, &t, &replaced, &e), TN_OK);
    /* a second server claiming the name while the first answers is refused */
    tn_tpu_entry other = t;
    snprintf(other.url, sizeof other.url, "grpc://127.0.0.1:1");
    other.pid = 99;
    CHECK_EQ_INT(tn_registry_claim(r, &other, &replaced, &e), TN_ALREADY_EXISTS);
    CHECK(strstr(tn_err_msg(&e), "is running"));
    tn_tpu_entry got;
    CHECK_EQ_INT(tn_registry_lookup(r, "my-tpu", &got, &e), TN_OK);
    CHECK_EQ_STR(got.url, f.url);
    CHECK_EQ_STR(tn_tpu_state(&got, 5), "READY");
    CHECK_EQ_INT(tn_registry_lookup(r, "nope", &got, &e), TN_NOT_FOUND);
    net_stop(&f);
    /* the server is gone: its entry is stale, shown UNHEALTHY, and a new server may take the name */
    CHECK_EQ_STR(tn_tpu_state(&got, 2), "UNHEALTHY");
    CHECK_EQ_INT(tn_registry_claim(r, &other, &replaced, &e), TN_OK);
    CHECK(replaced);
    t.clients = 3;
    CHECK_EQ_INT(tn_registry_heartbeat(r, &t, &e), TN_ALREADY_EXISTS);   /* the old server learns it lost the name */
    tn_job j = {0};
    snprintf(j.tpu, sizeof j.tpu, "my-tpu");
    j.command = strdup("echo hi");
    snprintf(j.state, sizeof j.state, "PENDING");
    CHECK_EQ_INT(tn_job_insert(r, &j, &e), TN_OK);
    CHECK(j.id > 0);
    CHECK_EQ_INT(tn_job_log_append(r, j.id, "stdout", "line one", 8, &e), TN_OK);
    CHECK_EQ_INT(tn_job_log_append(r, j.id, "stderr", "line two", 8, &e), TN_OK);
    int64_t last = 0;
    FILE *mem = tmpfile();
    CHECK_EQ_INT(tn_job_log_print(r, j.id, 0, mem, &last, &e), TN_OK);
    CHECK_EQ_INT(last, 2);
    CHECK_EQ_INT(ftell(mem), 18);
    fclose(mem);
    tn_job k;
    CHECK_EQ_INT(tn_job_get(r, j.id, &k, &e), TN_OK);
    CHECK_EQ_STR(k.command, "echo hi");
    tn_job_clear(&k);
    tn_job_clear(&j);
    tn_registry_close(r);
    tn_err_clear(&e);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", home);
    CHECK_EQ_INT(system(cmd), 0);
}

static const char *HOST_IO_HLO =
    "HloModule cb\nENTRY e {\n  x = f32[4] parameter(0)\n  t = token[] after-all()\n"
    "  s = (f32[4], u32[], token[]) send(x, t), channel_id=2, is_host_transfer=true\n"
    "  sd = token[] send-done(s), channel_id=2, is_host_transfer=true\n"
    "  r = (f32[4], u32[], token[]) recv(sd), channel_id=3, is_host_transfer=true\n"
    "  rd = (f32[4], token[]) recv-done(r), channel_id=3, is_host_transfer=true\n"
    "  v = f32[4] get-tuple-element(rd), index=0\n  ROOT y = f32[4] add(v, x)\n}\n";

/* One ExecuteStream of HOST_IO_HLO answering the recv with `answer` (n floats); returns the call's status,
 * *out the result's handle. */
static int net_stream_run(tn_client *c, uint64_t exe, uint64_t arg, const float *answer, size_t n, float *sent,
                          uint64_t *out, tn_err *e)
{
    Tpusim__V1__ExecuteRequest x = TPUSIM__V1__EXECUTE_REQUEST__INIT;
    Tpusim__V1__ArgumentList al = TPUSIM__V1__ARGUMENT_LIST__INIT, *alp = &al;
    al.buffers = &arg;
    al.n_buffers = 1;
    x.session = (char *)tn_client_session(c);
    x.executable = exe;
    x.arguments = &alp;
    x.n_arguments = 1;
    Tpusim__V1__ExecuteStreamRequest q = TPUSIM__V1__EXECUTE_STREAM_REQUEST__INIT;
    q.execute = &x;
    tn_stream *s = NULL;
    if (tn_stream_open(c, TN_M_EXECUTE_STREAM, &s, e)) return e->code;
    int fail = tn_stream_send(s, &q.base);
    for (int i = 0; !fail && i < 8; i++) {   /* a send, a recv, the end */
        uint8_t *buf = NULL;
        size_t len = 0;
        if (tn_stream_recv(s, &buf, &len) <= 0) break;
        Tpusim__V1__ExecuteStreamEvent *ev = tpusim__v1__execute_stream_event__unpack(NULL, len, buf);
        free(buf);
        if (!ev) break;
        if (ev->send && ev->send->channel == 2 && ev->send->data.len == 16) memcpy(sent, ev->send->data.data, 16);
        if (ev->recv) {
            Tpusim__V1__HostData hd = TPUSIM__V1__HOST_DATA__INIT;
            Tpusim__V1__ExecuteStreamRequest a = TPUSIM__V1__EXECUTE_STREAM_REQUEST__INIT;
            hd.device = ev->recv->device;
            hd.channel = ev->recv->channel;
            hd.data.data = (uint8_t *)answer;
            hd.data.len = n * sizeof(float);
            a.host_data = &hd;
            fail = tn_stream_send(s, &a.base);
        }
        int done = ev->finished;
        if (done && ev->result && ev->result->n_results == 1) *out = ev->result->results[0]->outputs[0]->buffer;
        tn_msg_free(&ev->base);
        if (done) break;
    }
    return tn_stream_finish(s, 0, e);
}

TEST(net_execute_stream_serves_host_transfers)
{
    net_fixture f;
    if (net_start(&f, "v3-8", NULL)) return;
    tn_client *c = net_connect(&f, NULL, "t_net host transfers");
    tn_err e = {0};
    if (!c) goto out;
    float x[4] = {1, 2, 3, 4}, answer[4] = {10, 20, 30, 40}, sent[4] = {0}, got[4] = {0};
    int64_t d4[1] = {4};
    tn_buffer_info b;
    CHECK_EQ_INT(tn_client_put(c, 0, TPU_F32, 1, d4, x, sizeof x, &b, &e), TN_OK);
    uint64_t exe = net_compile(c, HOST_IO_HLO, &e), res = 0;
    REQUIRE(exe != 0);
    CHECK_EQ_INT(net_stream_run(c, exe, b.id, answer, 4, sent, &res, &e), TN_OK);
    CHECK(!memcmp(sent, x, sizeof x));   /* the program's send reached the client */
    REQUIRE(res != 0);
    CHECK_EQ_INT(tn_client_get(c, res, got, sizeof got, &e), TN_OK);
    for (int i = 0; i < 4; i++) CHECK_NEAR(got[i], answer[i] + x[i], 0);
    /* an answer of the wrong size fails the run, naming the field */
    res = 0;
    CHECK_EQ_INT(net_stream_run(c, exe, b.id, answer, 3, sent, &res, &e), TN_INVALID_ARGUMENT);
    CHECK(strstr(tn_err_msg(&e), "host_data.data: 12 bytes") != NULL);
    CHECK_EQ_INT(res, 0);
    /* the plain Execute of such a program fails cleanly (no host to talk to) */
    Tpusim__V1__ExecuteResponse *r = net_execute(c, exe, &b.id, 1, &e);
    CHECK(r == NULL && e.code != TN_OK);
    tn_msg_free(r ? &r->base : NULL);
    tn_client_free(c);
out:
    tn_err_clear(&e);
    net_stop(&f);
}

TEST(net_runs_are_bounded)
{
    const char *endless = "HloModule loop\n\ncond {\n  p = s32[] parameter(0)\n  ROOT t = pred[] constant(true)\n}\n\n"
                          "body {\n  p = s32[] parameter(0)\n  one = s32[] constant(1)\n  ROOT a = s32[] add(p, one)\n}\n\n"
                          "ENTRY e {\n  x = s32[] parameter(0)\n  ROOT w = s32[] while(x), condition=cond, body=body\n}\n";
    net_fixture f;
    if (net_start(&f, "v3-8", NULL)) return;
    tn_client *c = net_connect(&f, NULL, "t_net endless");
    tn_err e = {0};
    if (!c) goto out;
    int32_t zero = 0;
    tn_buffer_info b;
    CHECK_EQ_INT(tn_client_put(c, 0, TPU_S32, 0, NULL, &zero, sizeof zero, &b, &e), TN_OK);
    uint64_t exe = net_compile(c, endless, &e);
    REQUIRE(exe != 0);
    /* the client's limit (TPUSIM_MAX_STEPS in the plugin) travels with the request */
    Tpusim__V1__ExecuteRequest r = TPUSIM__V1__EXECUTE_REQUEST__INIT;
    Tpusim__V1__ArgumentList al = TPUSIM__V1__ARGUMENT_LIST__INIT, *alp = &al;
    al.buffers = &b.id;
    al.n_buffers = 1;
    r.session = (char *)tn_client_session(c);
    r.executable = exe;
    r.arguments = &alp;
    r.n_arguments = 1;
    r.max_steps = 5000;
    ProtobufCMessage *resp = NULL;
    CHECK_EQ_INT(tn_client_unary(c, TN_M_EXECUTE, &r.base, &tpusim__v1__execute_response__descriptor, &resp, 0, &e),
                 TN_RESOURCE_EXHAUSTED);
    CHECK_MSG(strstr(tn_err_msg(&e), "5000") != NULL, "%s", tn_err_msg(&e));
    tn_msg_free(resp);
    r.max_steps = -1;
    CHECK_EQ_INT(tn_client_unary(c, TN_M_EXECUTE, &r.base, &tpusim__v1__execute_response__descriptor, &resp, 0, &e),
                 TN_INVALID_ARGUMENT);
    CHECK(strstr(tn_err_msg(&e), "ExecuteRequest.max_steps") != NULL);
    /* the session still works */
    int32_t back = 7;
    CHECK_EQ_INT(tn_client_get(c, b.id, &back, sizeof back, &e), TN_OK);
    CHECK_EQ_INT(back, 0);
    tn_client_free(c);
out:
    tn_err_clear(&e);
    net_stop(&f);
}
