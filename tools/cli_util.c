/* cli_util.c — option helpers shared by the subcommands. */
#include "cli.h"
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        fprintf(stderr, "tpusim %s: %s wants an integer from %" PRId64 " to %" PRId64 ", got '%s'\n", cmd, opt, lo, hi, v);
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
