/* cmd_serve.c — tpusim serve: a simulated TPU host on the network (gRPC at grpc://HOST:8470), owning a slice's
 * devices and their HBM, shared by the sessions of several clients; optionally registered under a name. */
#include "cli.h"
#include "net/net.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t serve_stop;

/* Stopping waits for runs in progress, which cannot be interrupted: after 10 s the process exits anyway
 * (its name is released first; sessions die with the process). */
static void *serve_watchdog(void *arg)
{
    (void)arg;
    sleep(10);
    fprintf(stderr, "tpusim serve: runs still in progress after 10 s; exiting without waiting for them\n");
    _exit(0);
    return NULL;
}

static void serve_on_signal(int sig)
{
    (void)sig;
    serve_stop = 1;
}

static void serve_usage(FILE *f)
{
    fprintf(f,
            "usage: tpusim serve [--slice v3-8] [--name NAME] [--port 8470] [--bind 127.0.0.1] [options]\n\n"
            "Serves a simulated TPU slice over gRPC (the protocol: src/net/tpusim.proto), like a Cloud TPU at\n"
            "grpc://IP:8470. JAX code reaches it unchanged through the plugin: TPU_NAME=NAME or\n"
            "TPU_GRPC_URL=grpc://HOST:PORT with JAX_PLATFORMS=tpusim. Stops on SIGINT/SIGTERM.\n\n"
            "  --slice S           the slice (default v3-8; v4-8, v5litepod-16, a chip file ...)\n"
            "  --name NAME         register NAME -> grpc://HOST:PORT in $TPUSIM_HOME/registry.db (default ~/.tpusim)\n"
            "  --port N            TCP port (default 8470; 0: a free one, printed)\n"
            "  --bind ADDR         address to listen on (default 127.0.0.1); beyond loopback a token is required\n"
            "  --token T           every call must carry it (also TPUSIM_TOKEN); clients set TPUSIM_TOKEN\n"
            "  --tls-cert F --tls-key F   serve TLS (grpcs://); clients set TPUSIM_TLS_CA to the CA or cert\n"
            "  --numerics tpu|exact       default numerics of programs that do not ask (default tpu)\n"
            "  --idle-timeout S    end sessions idle for S seconds, freeing their HBM (default 3600)\n"
            "  --threads N         calls served at once (default 4)\n"
            "  --max-sessions N    sessions open at once (default 64)\n"
            "  --max-seconds S     stop by itself after S seconds (default: run until stopped)\n"
            "  --run-timeout S     stop any one execution after S seconds (default 3600; 0: none); a client may ask\n"
            "                      for less (TPUSIM_TIMEOUT)\n"
            "  --run-max-steps N   stop any one execution after N instructions (default: none; TPUSIM_MAX_STEPS)\n"
            "  --quiet             no log lines on stderr\n"
            "The first line on stdout is the URL served.\n");
}

typedef struct serve_opts {
    tn_host_opts   host;
    tn_server_opts srv;
    const char    *name;
    double         idle_s, max_s;
    int            quiet;
} serve_opts;

static int serve_parse(int argc, char **argv, serve_opts *o)
{
    const char *v;
    o->host.slice = "v3-8";
    o->srv.port = TN_DEFAULT_PORT;
    o->srv.token = getenv("TPUSIM_TOKEN");
    o->idle_s = 3600;   /* a notebook left alone for a coffee keeps its arrays */
    o->host.max_seconds = 3600;   /* a program whose loop never ends cannot hold a worker for ever */
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) return serve_usage(stdout), -1;
        if ((v = cli_opt_value(argc, argv, &i, "--slice"))) o->host.slice = v;
        else if ((v = cli_opt_value(argc, argv, &i, "--name"))) o->name = v;
        else if ((v = cli_opt_value(argc, argv, &i, "--port"))) {
            char *end;
            long p = strtol(v, &end, 10);
            if (*end || end == v || p < 0 || p > 65535) return fprintf(stderr, "tpusim serve: --port %s: 0 to 65535\n", v), 2;
            o->srv.port = (int)p;
        }
        else if ((v = cli_opt_value(argc, argv, &i, "--bind"))) o->srv.bind = v;
        else if ((v = cli_opt_value(argc, argv, &i, "--token"))) o->srv.token = v;
        else if ((v = cli_opt_value(argc, argv, &i, "--tls-cert"))) o->srv.tls_cert = v;
        else if ((v = cli_opt_value(argc, argv, &i, "--tls-key"))) o->srv.tls_key = v;
        else if ((v = cli_opt_value(argc, argv, &i, "--idle-timeout"))) o->idle_s = atof(v);
        else if ((v = cli_opt_value(argc, argv, &i, "--threads"))) o->srv.threads = atoi(v);
        else if ((v = cli_opt_value(argc, argv, &i, "--max-sessions"))) o->host.max_sessions = atoi(v);
        else if ((v = cli_opt_value(argc, argv, &i, "--max-seconds"))) o->max_s = atof(v);
        else if ((v = cli_opt_value(argc, argv, &i, "--run-timeout"))) o->host.max_seconds = atof(v);
        else if ((v = cli_opt_value(argc, argv, &i, "--run-max-steps"))) o->host.max_steps = atoll(v);
        else if ((v = cli_opt_value(argc, argv, &i, "--numerics"))) {
            if (strcmp(v, "tpu") && strcmp(v, "exact")) return fprintf(stderr, "tpusim serve: --numerics %s: tpu or exact\n", v), 2;
            o->host.numerics = !strcmp(v, "exact") ? TPU_NUMERICS_EXACT : TPU_NUMERICS_TPU;
        } else if (!strcmp(argv[i], "--quiet")) o->quiet = 1;
        else return fprintf(stderr, "tpusim serve: unknown option '%s' (tpusim serve --help)\n", argv[i]), 2;
    }
    if (o->idle_s <= 0) return fprintf(stderr, "tpusim serve: --idle-timeout must be positive seconds\n"), 2;
    if (o->name && (!*o->name || strlen(o->name) > 100 || strspn(o->name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") != strlen(o->name)))
        return fprintf(stderr, "tpusim serve: --name '%s': letters, digits, '-', '_' and '.' (at most 100)\n", o->name), 2;
    return 0;
}

/* The URL clients use: the bound address, or this machine's name when bound to every interface. */
static void serve_url(const serve_opts *o, int port, char *url, size_t n)
{
    const char *b = o->srv.bind && *o->srv.bind ? o->srv.bind : "127.0.0.1";
    char host[256];
    if (!strcmp(b, "0.0.0.0") || !strcmp(b, "::")) {
        if (gethostname(host, sizeof host - 1)) snprintf(host, sizeof host, "localhost");
        b = host;
    }
    const char *scheme = o->srv.tls_cert ? "grpcs" : "grpc";
    if (strchr(b, ':')) snprintf(url, n, "%s://[%s]:%d", scheme, b, port);
    else snprintf(url, n, "%s://%s:%d", scheme, b, port);
}

static void serve_entry(const serve_opts *o, tn_host *h, const char *url, double started, tn_tpu_entry *t)
{
    tn_host_status st;
    tn_host_get_status(h, &st);
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", o->name);
    snprintf(t->url, sizeof t->url, "%s", url);
    snprintf(t->slice, sizeof t->slice, "%s", tn_host_slice(h));
    snprintf(t->state, sizeof t->state, "%s", st.running ? "BUSY" : "READY");
    gethostname(t->host, sizeof t->host - 1);
    t->pid = (int)getpid();
    t->clients = st.sessions;
    t->hbm_in_use = st.hbm_in_use;
    t->hbm_total = st.hbm_total;
    t->started = started;
    t->heartbeat = tn_wall();
}

/* Until a signal (or --max-seconds): heartbeats into the registry, idle sessions expired. */
static void serve_loop(const serve_opts *o, tn_host *h, tn_server *srv, tn_registry *reg, const char *url)
{
    int lost = 0;   /* another server took the name over: stop heartbeating (said once) */
    double t0 = tn_now(), started = tn_wall(), beat = 0;
    while (!serve_stop && (o->max_s <= 0 || tn_now() - t0 < o->max_s)) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
        if (tn_now() - beat < TN_HEARTBEAT_S) continue;
        beat = tn_now();
        int n = tn_server_expire_idle(srv, o->idle_s);
        if (n && !o->quiet) fprintf(stderr, "tpusim serve: %d idle session%s ended (--idle-timeout %.0f s)\n", n, n == 1 ? "" : "s", o->idle_s);
        if (!reg || lost) continue;
        tn_tpu_entry t;
        serve_entry(o, h, url, started, &t);
        tn_err e = {0};
        int rc = tn_registry_heartbeat(reg, &t, &e);
        if (rc && !o->quiet) fprintf(stderr, "tpusim serve: heartbeat: %s%s\n", tn_err_msg(&e), rc == TN_ALREADY_EXISTS ? "; still serving at this URL" : "");
        lost = rc == TN_ALREADY_EXISTS;
        tn_err_clear(&e);
    }
}

static int serve_register(const serve_opts *o, tn_host *h, const char *url, tn_registry **reg)
{
    tn_err e = {0};
    tn_tpu_entry t;
    int replaced = 0;
    serve_entry(o, h, url, tn_wall(), &t);
    int rc = tn_registry_open(NULL, reg, &e);
    if (!rc) rc = tn_registry_claim(*reg, &t, &replaced, &e);
    if (rc) fprintf(stderr, "tpusim serve: %s\n", tn_err_msg(&e));
    else if (!o->quiet)
        fprintf(stderr, "tpusim serve: registered %s -> %s in %s/registry.db%s\n", o->name, url, tn_registry_home(*reg),
                replaced ? " (replacing a stale entry whose server no longer answers)" : "");
    tn_err_clear(&e);
    return rc;
}

int cmd_serve(int argc, char **argv)
{
    serve_opts o = {0};
    int rc = serve_parse(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    tn_err e = {0};
    tn_host *h = NULL;
    tn_server *srv = NULL;
    tn_registry *reg = NULL;
    if (tn_host_new(&o.host, &h, &e)) {
        fprintf(stderr, "tpusim serve: %s\n", tn_err_msg(&e));
        tn_err_clear(&e);
        return 2;
    }
    tn_service svc = {.host = h, .chunk = TN_CHUNK};
    snprintf(svc.name, sizeof svc.name, "%s", o.name ? o.name : "");
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = serve_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (tn_server_start(&svc, &o.srv, &srv, &e)) {
        fprintf(stderr, "tpusim serve: %s\n", tn_err_msg(&e));
        tn_err_clear(&e);
        tn_host_free(h);
        return 1;
    }
    char url[320];
    serve_url(&o, tn_server_port(srv), url, sizeof url);
    if (o.name && serve_register(&o, h, url, &reg)) rc = 1;
    if (!rc) {
        printf("%s\n", url);
        fflush(stdout);
        if (!o.quiet)
            fprintf(stderr, "tpusim serve: TPU %s (simulated, %d devices) at %s%s%s%s\n", tn_host_slice(h),
                    tn_host_num_devices(h), url, o.name ? " as " : "", o.name ? o.name : "", o.srv.token ? ", token required" : "");
        if (!o.quiet && o.srv.bind && !tn_is_loopback(o.srv.bind) && !o.srv.tls_cert)
            fprintf(stderr, "tpusim serve: warning: without TLS the token crosses the network in clear (--tls-cert/--tls-key)\n");
        serve_loop(&o, h, srv, reg, url);
        if (!o.quiet) fprintf(stderr, "tpusim serve: stopping (%lld calls served)\n", (long long)tn_server_calls(srv));
    }
    if (reg && !rc) tn_registry_release(reg, o.name, (int)getpid());
    pthread_t wd;
    if (!rc) pthread_create(&wd, NULL, serve_watchdog, NULL);
    tn_server_stop(srv);
    tn_registry_close(reg);
    tn_host_free(h);
    return rc;
}
