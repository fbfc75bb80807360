/* net_bench.c — load test of `tpusim serve`: N concurrent clients, each with its own session, run M steps
 * (an Execute of a small program, the result read back, the result deleted) against a server started as a
 * child process on a free loopback port, and the same program run in-process with tpu_run. Reports requests/s,
 * p50/p99 latency of each, failed requests (the run fails unless 0), and the server's memory before and after:
 * HBM in use, buffers and executables (must be equal) and its resident set (VmRSS, for information).
 * Bounded: N x M steps, each call under a deadline; the server is stopped at the end.
 *   make bench-net    or    build/release/net_bench --clients 8 --execs 200 [--server build/release/tpusim] */
#include "net/net.h"
#include "tpusim.pb-c.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *BENCH_HLO =
    "HloModule step\n\nENTRY main {\n  x = f32[8,128] parameter(0)\n  w = f32[128,128] parameter(1)\n"
    "  d = f32[8,128] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
    "  ROOT t = f32[8,128] tanh(d)\n}\n";

typedef struct bench_client {
    const char *url;
    int         execs;
    double     *lat;        /* per step, seconds */
    int         failed;
    char        err[512];
} bench_client;

static int bench_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double bench_pct(double *v, int n, double p)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp);
    int i = (int)(p * (n - 1) + 0.5);
    return n ? v[i] : 0;
}

/* One step: execute, read the result back, delete it. */
static int bench_step(tn_client *c, uint64_t exe, const uint64_t *args, float *out, tn_err *e)
{
    Tpusim__V1__ExecuteRequest r = TPUSIM__V1__EXECUTE_REQUEST__INIT;
    Tpusim__V1__ArgumentList al = TPUSIM__V1__ARGUMENT_LIST__INIT, *alp = &al;
    al.buffers = (uint64_t *)args;
    al.n_buffers = 2;
    r.session = (char *)tn_client_session(c);
    r.executable = exe;
    r.arguments = &alp;
    r.n_arguments = 1;
    ProtobufCMessage *resp = NULL;
    if (tn_client_unary(c, TN_M_EXECUTE, &r.base, &tpusim__v1__execute_response__descriptor, &resp, 60, e)) return -1;
    uint64_t id = ((Tpusim__V1__ExecuteResponse *)resp)->results[0]->outputs[0]->buffer;
    tn_msg_free(resp);
    if (tn_client_get(c, id, out, 8 * 128 * sizeof(float), e)) return -1;
    Tpusim__V1__DeleteRequest d = TPUSIM__V1__DELETE_REQUEST__INIT;
    d.session = (char *)tn_client_session(c);
    d.buffers = &id;
    d.n_buffers = 1;
    resp = NULL;
    int rc = tn_client_unary(c, TN_M_DELETE, &d.base, &tpusim__v1__delete_response__descriptor, &resp, 60, e);
    tn_msg_free(resp);
    return rc ? -1 : 0;
}

static uint64_t bench_compile(tn_client *c, tn_err *e)
{
    Tpusim__V1__CompileRequest r = TPUSIM__V1__COMPILE_REQUEST__INIT;
    r.session = (char *)tn_client_session(c);
    r.format = "hlo";
    r.program.data = (uint8_t *)BENCH_HLO;
    r.program.len = strlen(BENCH_HLO);
    ProtobufCMessage *resp = NULL;
    if (tn_client_unary(c, TN_M_COMPILE, &r.base, &tpusim__v1__compile_response__descriptor, &resp, 60, e)) return 0;
    uint64_t id = ((Tpusim__V1__CompileResponse *)resp)->executable;
    tn_msg_free(resp);
    return id;
}

static void *bench_client_run(void *arg)
{
    bench_client *b = arg;
    tn_client *c = NULL;
    tn_err e = {0};
    static float x[8 * 128], w[128 * 128];
    float out[8 * 128];
    int64_t dx[2] = {8, 128}, dw[2] = {128, 128};
    tn_buffer_info bx, bw;
    tn_client_opts o = {.client = "net_bench", .timeout_s = 60};
    uint64_t exe = 0;
    if (tn_client_new(b->url, &o, &c, &e) || tn_client_open_session(c, NULL, &e) ||
        tn_client_put(c, 0, TPU_F32, 2, dx, x, sizeof x, &bx, &e) || tn_client_put(c, 0, TPU_F32, 2, dw, w, sizeof w, &bw, &e) ||
        !(exe = bench_compile(c, &e))) {
        b->failed = b->execs;
        snprintf(b->err, sizeof b->err, "%s", tn_err_msg(&e));
    }
    uint64_t args[2] = {bx.id, bw.id};
    for (int i = 0; exe && i < b->execs; i++) {
        double t0 = tn_now();
        if (bench_step(c, exe, args, out, &e)) {
            b->failed++;
            snprintf(b->err, sizeof b->err, "%s", tn_err_msg(&e));
        }
        b->lat[i] = tn_now() - t0;
    }
    tn_client_free(c);   /* ends the session: the server frees its buffers and executable */
    tn_err_clear(&e);
    return NULL;
}

/* ---- the server as a child process ---- */

typedef struct bench_server {
    pid_t pid;
    char  url[128];
} bench_server;

static int bench_server_start(const char *bin, bench_server *s)
{
    int fd[2];
    if (pipe(fd)) return -1;
    s->pid = fork();
    if (s->pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        execl(bin, bin, "serve", "--port", "0", "--quiet", "--max-seconds", "900", "--threads", "4", (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    FILE *f = fdopen(fd[0], "r");
    int ok = f && fgets(s->url, sizeof s->url, f) != NULL;
    if (f) fclose(f);
    s->url[strcspn(s->url, "\n")] = 0;
    return ok && !strncmp(s->url, "grpc://", 7) ? 0 : -1;
}

static void bench_server_stop(bench_server *s)
{
    kill(s->pid, SIGTERM);
    int st;
    waitpid(s->pid, &st, 0);
}

static long bench_rss_kib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kib = atol(line + 6);
    if (f) fclose(f);
    return kib;
}

/* The server's own account: HBM in use, sessions, buffers and executables held. */
static void bench_server_memory(const char *url, int64_t *hbm, int64_t *sessions, int64_t *bufs, int64_t *exes)
{
    tn_client *c = NULL;
    tn_err e = {0};
    *hbm = *sessions = *bufs = *exes = -1;
    if (tn_client_new(url, NULL, &c, &e)) return;
    Tpusim__V1__MemoryReportRequest r = TPUSIM__V1__MEMORY_REPORT_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    if (!tn_client_unary(c, TN_M_MEMORY_REPORT, &r.base, &tpusim__v1__memory_report_response__descriptor, &resp, 30, &e)) {
        Tpusim__V1__MemoryReportResponse *m = (void *)resp;
        *hbm = *bufs = *exes = 0;
        *sessions = (int64_t)m->n_sessions;
        for (size_t d = 0; d < m->n_devices; d++) *hbm += m->devices[d]->hbm_in_use;
        for (size_t i = 0; i < m->n_sessions; i++) *bufs += m->sessions[i]->buffers, *exes += m->sessions[i]->executables;
    }
    tn_msg_free(resp);
    tn_client_free(c);
    tn_err_clear(&e);
}

/* ---- in-process: the same step with tpu_run ---- */

static void bench_local(int execs, double *lat)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    tpu_tensor *in[2] = {NULL, NULL};
    int64_t dx[2] = {8, 128}, dw[2] = {128, 128};
    tpu_module_parse(ctx, BENCH_HLO, strlen(BENCH_HLO), "bench", &m);
    tpu_tensor_new(ctx, TPU_F32, 2, dx, &in[0]);
    tpu_tensor_new(ctx, TPU_F32, 2, dw, &in[1]);
    tpu_run_opts o = tpu_run_opts_default();
    o.threads = 1;
    for (int i = 0; i < execs; i++) {
        double t0 = tn_now();
        tpu_tensor **out = NULL;
        int nout = 0;
        tpu_run(ctx, m, &o, in, 2, &out, &nout);
        tpu_tensors_free(out, nout);
        lat[i] = tn_now() - t0;
    }
    tpu_tensor_free(in[0]);
    tpu_tensor_free(in[1]);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* Runs n clients x execs steps; returns failures; *wall gets the wall time, lat all latencies. */
static int bench_round(const char *url, int n, int execs, double *lat, double *wall)
{
    bench_client *cl = calloc((size_t)n, sizeof *cl);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    double t0 = tn_now();
    for (int i = 0; i < n; i++) {
        cl[i] = (bench_client){.url = url, .execs = execs, .lat = lat + (size_t)i * (size_t)execs};
        pthread_create(&th[i], NULL, bench_client_run, &cl[i]);
    }
    int failed = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        failed += cl[i].failed;
        if (cl[i].failed) fprintf(stderr, "net_bench: client %d: %d failed: %s\n", i, cl[i].failed, cl[i].err);
    }
    *wall = tn_now() - t0;
    free(cl);
    free(th);
    return failed;
}

int main(int argc, char **argv)
{
    int n = 8, execs = 200;
    const char *bin = "build/release/tpusim";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--clients")) n = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--execs")) execs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--server")) bin = argv[i + 1];
    }
    if (n < 1 || n > 64 || execs < 1 || execs > 100000) return fprintf(stderr, "net_bench: 1..64 clients, 1..100000 execs\n"), 2;
    signal(SIGPIPE, SIG_IGN);
    bench_server s;
    if (bench_server_start(bin, &s)) return fprintf(stderr, "net_bench: %s serve did not start\n", bin), 1;
    double *lat = calloc((size_t)n * (size_t)execs, sizeof *lat), wall;
    bench_round(s.url, 2, 20, lat, &wall);   /* warm-up: threads, pools, the program's first run */
    int64_t h0, s0, b0, x0, h1, s1, b1, x1;
    bench_server_memory(s.url, &h0, &s0, &b0, &x0);
    long rss0 = bench_rss_kib(s.pid);
    int failed = bench_round(s.url, n, execs, lat, &wall);
    int total = n * execs;
    double p50 = bench_pct(lat, total, 0.50), p99 = bench_pct(lat, total, 0.99);
    for (int i = 0; i < 100; i++) {   /* sessions end asynchronously after their clients close (bounded) */
        bench_server_memory(s.url, &h1, &s1, &b1, &x1);
        if (s1 == 0) break;
        usleep(20000);
    }
    long rss1 = bench_rss_kib(s.pid);
    bench_server_stop(&s);
    double *loc = calloc((size_t)execs, sizeof *loc);
    double t0 = tn_now();
    bench_local(execs, loc);
    double lwall = tn_now() - t0;
    printf("tpusim serve load test: %d clients x %d steps (Execute f32[8,128]x[128,128] + tanh, GetBuffer, Delete)\n", n, execs);
    printf("  network   %8.0f steps/s  %8.0f requests/s  p50 %7.3f ms  p99 %7.3f ms  failed %d\n", total / wall,
           3 * total / wall, p50 * 1e3, p99 * 1e3, failed);
    printf("  in-process%8.0f steps/s (1 thread, tpu_run)           p50 %7.3f ms  p99 %7.3f ms\n", execs / lwall,
           bench_pct(loc, execs, 0.5) * 1e3, bench_pct(loc, execs, 0.99) * 1e3);
    printf("  server before: HBM in use %lld B, sessions %lld, buffers %lld, executables %lld, VmRSS %ld KiB\n",
           (long long)h0, (long long)s0, (long long)b0, (long long)x0, rss0);
    printf("  server after:  HBM in use %lld B, sessions %lld, buffers %lld, executables %lld, VmRSS %ld KiB\n",
           (long long)h1, (long long)s1, (long long)b1, (long long)x1, rss1);
    int same = h0 == h1 && s0 == s1 && b0 == b1 && x0 == x1;
    printf("  %s\n", failed == 0 && same ? "OK: 0 failed requests, the server's memory after equals before"
                                         : "FAILED: failed requests, or the server holds memory it held not before");
    free(lat);
    free(loc);
    return failed == 0 && same ? 0 : 1;
}
