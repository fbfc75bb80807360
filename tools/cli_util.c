/* cli_util.c — option helpers shared by the subcommands. */
#include "cli.h"
#include <cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static uint64_t cli_max_input;   /* 0: the library's default */

tpu_ctx *cli_ctx_new(void)
{
    tpu_ctx *ctx = tpu_ctx_new();
    if (ctx && cli_max_input) tpu_ctx_set_input_limit(ctx, cli_max_input);
    /* StableHLO (.mlir, .mlirbc, jax.export files) through jaxlib in a child Python (TPUSIM_PYTHON) */
    if (ctx) tpu_ctx_set_converter(ctx, tpu_convert_with_python, NULL);
    return ctx;
}

int cli_take_global_options(int *argc, char **argv)
{
    int out = 0;
    for (int i = 0; i < *argc; i++) {
        const char *v = NULL;
        if (!strcmp(argv[i], "--max-input-size") && i + 1 < *argc) v = argv[++i];
        else if (!strncmp(argv[i], "--max-input-size=", 17)) v = argv[i] + 17;
        else if (!strcmp(argv[i], "--max-input-size")) {
            fprintf(stderr, "tpusim: option --max-input-size needs a value\n");
            return 0;
        } else {
            argv[out++] = argv[i];
            continue;
        }
        size_t n = strlen(v);
        int shift = 0;
        if (n > 1 && strchr("KMGT", v[n - 1])) shift = 10 * (int)(strchr("KMGT", v[n - 1]) - "KMGT" + 1);
        char num[32];
        snprintf(num, sizeof num, "%.*s", (int)(shift ? n - 1 : n), v);
        int64_t x;
        if (!cli_int("", "--max-input-size", num, 1, INT64_MAX >> shift, &x)) return 0;
        cli_max_input = (uint64_t)x << shift;
    }
    *argc = out;
    argv[out] = NULL;
    return 1;
}

int cli_is_help(const char *arg) { return !strcmp(arg, "--help") || !strcmp(arg, "-h"); }

const char *cli_opt_value(int argc, char **argv, int *i, const char *opt)
{
    size_t n = strlen(opt);
    const char *a = argv[*i];
    if (strncmp(a, opt, n) != 0) return NULL;
    if (a[n] == '=') return a + n + 1;
    if (a[n] != 0) return NULL;
    if (*i + 1 >= argc) {
        fprintf(stderr, "tpusim: option %s needs a value\n", opt);
        return NULL;
    }
    (*i)++;
    return argv[*i];
}

void cli_print_warnings(tpu_ctx *ctx)
{
    const char *w = tpu_warnings(ctx);
    if (*w) fputs(w, stderr);
    tpu_warnings_clear(ctx);
}

int cli_param_named(const tpu_module *m, const char *member)
{
    int np = tpu_module_num_params(m);
    size_t ml = strlen(member);
    for (int i = 0; i < np; i++) {
        const char *pn = tpu_module_param_name(m, i);
        if (!pn) continue;
        if (!strcmp(pn, member)) return i;
        /* "x" names "x.1": XLA numbers instruction names, jax's exports name parameters after the arguments */
        const char *dot = strrchr(pn, '.');
        if (dot && (size_t)(dot - pn) == ml && !strncmp(pn, member, ml) && dot[1] && strspn(dot + 1, "0123456789") == strlen(dot + 1))
            return i;
    }
    return -1;
}

/* "f32[8,16]" */
static void cli_shape_str(char *buf, size_t n, tpu_dtype dtype, int rank, const int64_t *dims)
{
    size_t l = (size_t)snprintf(buf, n, "%s[", tpu_dtype_name(dtype));
    for (int k = 0; k < rank && l + 24 < n; k++) l += (size_t)snprintf(buf + l, n - l, "%s%lld", k ? "," : "", (long long)dims[k]);
    if (l + 2 < n) snprintf(buf + l, n - l, "]");
}

int cli_npz_params_filter(void *user, const char *name, int index, tpu_dtype dtype, int rank, const int64_t *dims,
                          char *why, size_t why_size)
{
    const tpu_module *m = user;
    int np = tpu_module_num_params(m);
    int named = cli_param_named(m, name);
    if (named >= 0) {   /* a member named like a parameter must have that parameter's shape */
        tpu_dtype pt;
        int pr;
        int64_t pd[TPU_MAX_RANK];
        if (tpu_module_param_info(m, named, &pt, &pr, pd) != TPU_OK || pt == TPU_TUPLE) return 0;
        int same = pt == dtype && pr == rank;
        for (int k = 0; same && k < rank; k++) same = pd[k] == dims[k];
        if (same) return 0;
        char got[256], want[256];
        cli_shape_str(got, sizeof got, dtype, rank, dims);
        cli_shape_str(want, sizeof want, pt, pr, pd);
        snprintf(why, why_size, "%s, but parameter %d (%s) of %s is %s; nothing was read", got, named,
                 tpu_module_param_name(m, named), tpu_module_name(m), want);
        return 1;
    }
    char want[512] = "";
    size_t wl = 0;
    for (int i = 0; i < np; i++) {
        tpu_dtype pt;
        int pr;
        int64_t pd[TPU_MAX_RANK];
        if (tpu_module_param_info(m, i, &pt, &pr, pd) != TPU_OK || pt == TPU_TUPLE) return 0;
        int same = pt == dtype && pr == rank;
        for (int k = 0; same && k < rank; k++) same = pd[k] == dims[k];
        if (same) return 0;
        if (wl + 40 < sizeof want) {
            wl += (size_t)snprintf(want + wl, sizeof want - wl, "%s%s[", i ? ", " : "", tpu_dtype_name(pt));
            for (int k = 0; k < pr && wl + 24 < sizeof want; k++)
                wl += (size_t)snprintf(want + wl, sizeof want - wl, "%s%lld", k ? "," : "", (long long)pd[k]);
            if (wl + 2 < sizeof want) wl += (size_t)snprintf(want + wl, sizeof want - wl, "]");
        }
    }
    char got[256];
    size_t gl = (size_t)snprintf(got, sizeof got, "%s[", tpu_dtype_name(dtype));
    for (int k = 0; k < rank && gl + 24 < sizeof got; k++)
        gl += (size_t)snprintf(got + gl, sizeof got - gl, "%s%lld", k ? "," : "", (long long)dims[k]);
    if (gl + 2 < sizeof got) snprintf(got + gl, sizeof got - gl, "]");
    (void)name;
    (void)index;
    snprintf(why, why_size, "%s is not the shape of any parameter of %s (%s); nothing was read", got,
             tpu_module_name(m), np ? want : "it takes none");
    return 1;
}

/* Digits (with an optional leading '-') and nothing else: strtoll/strtoull alone accept leading spaces, a
 * '+', and (strtoull) a '-' that wraps around. */
static int cli_is_integer(const char *v, int allow_minus)
{
    const char *p = v;
    if (*p == '-' && allow_minus) p++;
    if (!isdigit((unsigned char)*p)) return 0;
    while (isdigit((unsigned char)*p)) p++;
    return *p == 0;
}

int cli_int(const char *cmd, const char *opt, const char *v, int64_t lo, int64_t hi, int64_t *out)
{
    errno = 0;
    long long x = cli_is_integer(v, lo < 0) ? strtoll(v, NULL, 10) : 0;
    if (!cli_is_integer(v, lo < 0) || errno == ERANGE || x < lo || x > hi) {
        fprintf(stderr, "tpusim%s%s: %s wants an integer from %" PRId64 " to %" PRId64 ", got '%s'\n", *cmd ? " " : "", cmd,
                opt, lo, hi, v);
        return 0;
    }
    *out = x;
    return 1;
}

int cli_int32(const char *cmd, const char *opt, const char *v, int lo, int hi, int *out)
{
    int64_t x;
    if (!cli_int(cmd, opt, v, lo, hi, &x)) return 0;
    *out = (int)x;
    return 1;
}

int cli_u64(const char *cmd, const char *opt, const char *v, uint64_t *out)
{
    errno = 0;
    unsigned long long x = cli_is_integer(v, 0) ? strtoull(v, NULL, 10) : 0;
    if (!cli_is_integer(v, 0) || errno == ERANGE) {
        fprintf(stderr, "tpusim %s: %s wants an integer from 0 to %" PRIu64 ", got '%s'\n", cmd, opt, UINT64_MAX, v);
        return 0;
    }
    *out = x;
    return 1;
}

int cli_parse_num(const char *v, size_t len, double *out)
{
    char buf[64];
    if (len == 0 || len >= sizeof buf) return 0;
    memcpy(buf, v, len);
    buf[len] = 0;
    /* a plain decimal: digits, one point, an exponent; no hex, inf or nan that strtod would take */
    for (size_t i = 0; i < len; i++)
        if (!strchr("0123456789.eE+-", buf[i])) return 0;
    if (!isdigit((unsigned char)buf[0]) && !(buf[0] == '-' || buf[0] == '.')) return 0;
    char *end;
    errno = 0;
    double d = strtod(buf, &end);
    if (*end || errno == ERANGE || !isfinite(d)) return 0;
    *out = d;
    return 1;
}

int cli_num(const char *cmd, const char *opt, const char *v, double lo, double hi, double *out)
{
    double d;
    if (!cli_parse_num(v, strlen(v), &d) || d < lo || d > hi) {
        fprintf(stderr, "tpusim %s: %s wants a number from %g to %g, got '%s'\n", cmd, opt, lo, hi, v);
        return 0;
    }
    *out = d;
    return 1;
}

/* ---- progress on stderr for work that takes a while ---- */

struct cli_progress {
    pthread_t       th;
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    int             done, said;
    char            what[256];
    double          t0;
};

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Says nothing for the first 2 s, then how long it has been running: redrawn in place every second on a
 * terminal, a line every 10 s otherwise (a log file). */
static void *cli_progress_main(void *arg)
{
    cli_progress *p = arg;
    int tty = isatty(2);
    double next = 2.0;
    pthread_mutex_lock(&p->mu);
    while (!p->done) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        double wait = next - (cli_now() - p->t0);
        if (wait > 0) {
            until.tv_sec += (time_t)wait;
            until.tv_nsec += (long)((wait - (double)(time_t)wait) * 1e9);
            if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
            pthread_cond_timedwait(&p->cv, &p->mu, &until);
            continue;
        }
        fprintf(stderr, tty ? "\r%s ... %.0f s " : "%s ... %.0f s\n", p->what, cli_now() - p->t0);
        fflush(stderr);
        p->said = 1;
        next += tty ? 1.0 : 10.0;
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

cli_progress *cli_progress_start(const char *fmt, ...)
{
    cli_progress *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->what, sizeof p->what, fmt, ap);
    va_end(ap);
    p->t0 = cli_now();
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (pthread_create(&p->th, NULL, cli_progress_main, p)) {
        free(p);
        return NULL;
    }
    return p;
}

void cli_progress_stop(cli_progress *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->done = 1;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->th, NULL);
    if (p->said) fprintf(stderr, "%s%s: done in %.1f s\n", isatty(2) ? "\r" : "", p->what, cli_now() - p->t0);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
}

/* ---- JSON ---- */

cJSON *cli_tensor_json(const tpu_tensor *t, const char *name)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "name", name);
    cJSON_AddStringToObject(o, "dtype", tpu_dtype_name(tpu_tensor_dtype(t)));
    cJSON *shape = cJSON_AddArrayToObject(o, "shape");
    for (int k = 0; shape && k < tpu_tensor_rank(t); k++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)tpu_tensor_dims(t)[k]));
    int64_t n = tpu_tensor_count(t), nans = 0;
    double mn = INFINITY, mx = -INFINITY, sum = 0;
    for (int64_t k = 0; k < n; k++) {
        double v = tpu_tensor_get_f64(t, k);
        if (isnan(v)) {
            nans++;
            continue;
        }
        mn = v < mn ? v : mn, mx = v > mx ? v : mx, sum += v;
    }
    if (n > nans && isfinite(mn) && isfinite(mx) && isfinite(sum)) {
        cJSON_AddNumberToObject(o, "min", mn);
        cJSON_AddNumberToObject(o, "max", mx);
        cJSON_AddNumberToObject(o, "mean", sum / (double)(n - nans));
    }
    cJSON_AddNumberToObject(o, "nan_count", (double)nans);
    cJSON *first = cJSON_AddArrayToObject(o, "first");
    for (int64_t k = 0; first && k < n && k < 8; k++) {
        double v = tpu_tensor_get_f64(t, k);
        cJSON_AddItemToArray(first, isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull());   /* JSON has no NaN */
    }
    return o;
}

int cli_print_json(cJSON *o)
{
    char *s = o ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    if (!s) {
        fprintf(stderr, "tpusim: out of memory\n");
        return 2;
    }
    printf("%s\n", s);
    cJSON_free(s);
    return 0;
}

void cli_tensor_summary(const tpu_tensor *t, int shape_w, int num_w, int show, const char *gap)
{
    char shape[128];
    tpu_tensor_shape_str(t, shape, sizeof shape);
    int64_t n = tpu_tensor_count(t);
    double mn = INFINITY, mx = -INFINITY, sum = 0;
    int64_t nans = 0;
    for (int64_t k = 0; k < n; k++) {
        double v = tpu_tensor_get_f64(t, k);
        if (isnan(v)) {
            nans++;
            continue;
        }
        if (v < mn) mn = v;
        if (v > mx) mx = v;
        sum += v;
    }
    printf("%-*s", shape_w, shape);
    if (n == 0) {
        printf(" (empty)\n");
        return;
    }
    if (n == 1) {
        printf(" = %.8g\n", tpu_tensor_get_f64(t, 0));
        return;
    }
    printf(" min %-*.6g max %-*.6g mean %-*.6g", num_w, mn, num_w, mx, num_w, n > nans ? sum / (double)(n - nans) : NAN);
    if (nans) printf(" nan %lld", (long long)nans);
    printf("%s[", gap);
    for (int64_t k = 0; k < n && k < show; k++) printf("%s%.5g", k ? ", " : "", tpu_tensor_get_f64(t, k));
    printf("%s]\n", n > show ? ", ..." : "");
}
