/* err.c — errors with gRPC status codes, byte sizes, clocks. */
#include "net/net.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int tn_fail(tn_err *e, int code, const char *fmt, ...)
{
    if (!e) return code;
    /* the new message is made before the old one is freed: it may be one of the arguments */
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *msg = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (msg) {
        va_start(ap, fmt);
        vsnprintf(msg, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    free(e->msg);
    e->msg = msg;
    e->code = code;
    return code;
}

int tn_fail_tpu(tn_err *e, tpu_ctx *ctx, tpu_status st, const char *prefix)
{
    int code = TN_INTERNAL;
    switch (st) {
    case TPU_OK: code = TN_OK; break;
    case TPU_ERR_NOMEM: case TPU_ERR_OOM: code = TN_RESOURCE_EXHAUSTED; break;
    case TPU_ERR_IO: code = TN_UNAVAILABLE; break;
    case TPU_ERR_PARSE: case TPU_ERR_INVALID: case TPU_ERR_SHAPE: code = TN_INVALID_ARGUMENT; break;
    case TPU_ERR_UNSUPPORTED: case TPU_ERR_UNRUNNABLE: code = TN_UNIMPLEMENTED; break;
    case TPU_ERR_LIMIT: code = TN_RESOURCE_EXHAUSTED; break;   /* a step or time limit, an input too large */
    case TPU_ERR_INTERNAL: code = TN_INTERNAL; break;
    }
    const char *m = ctx ? tpu_errmsg(ctx) : "";
    return tn_fail(e, code, "%s%s%s", prefix ? prefix : "", prefix && *m ? ": " : "", m);
}

void tn_err_clear(tn_err *e)
{
    if (!e) return;
    free(e->msg);
    e->msg = NULL;
    e->code = TN_OK;
}

const char *tn_err_msg(const tn_err *e) { return e && e->msg ? e->msg : ""; }

void tn_fmt_bytes(char *buf, size_t n, int64_t b)
{
    double v = (double)b;
    if (v >= 1024.0 * 1024 * 1024) snprintf(buf, n, "%.2fG", v / (1024.0 * 1024 * 1024));
    else if (v >= 1024.0 * 1024) snprintf(buf, n, "%.2fM", v / (1024.0 * 1024));
    else if (v >= 1024.0) snprintf(buf, n, "%.2fK", v / 1024.0);
    else snprintf(buf, n, "%lldB", (long long)b);
}

double tn_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double tn_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
