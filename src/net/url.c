/* url.c — the addresses a TPU is reached at: grpc://HOST:PORT (Cloud TPU's convention), grpcs:// for TLS. */
#include "net/net.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int tn_url_parse(const char *url, tn_url *out, tn_err *e)
{
    memset(out, 0, sizeof *out);
    if (!url || !*url) return tn_fail(e, TN_INVALID_ARGUMENT, "empty TPU address (expected grpc://HOST:PORT)");
    const char *p = url;
    if (!strncmp(p, "grpc://", 7)) p += 7;
    else if (!strncmp(p, "grpcs://", 8)) p += 8, out->tls = 1;
    else if (strstr(p, "://"))
        return tn_fail(e, TN_INVALID_ARGUMENT, "'%s': unknown scheme (expected grpc://HOST:PORT or grpcs://HOST:PORT)", url);
    const char *host = p, *hend, *port = NULL;
    if (*p == '[') {   /* [::1]:8470 */
        hend = strchr(p, ']');
        if (!hend) return tn_fail(e, TN_INVALID_ARGUMENT, "'%s': unclosed '[' in the host", url);
        host = p + 1;
        if (hend[1] == ':') port = hend + 2;
        else if (hend[1] && hend[1] != '/') return tn_fail(e, TN_INVALID_ARGUMENT, "'%s': expected ':PORT' after ']'", url);
    } else {
        hend = p + strcspn(p, ":/");
        if (*hend == ':') port = hend + 1;
    }
    size_t hl = (size_t)(hend - host);
    if (hl == 0 || hl >= sizeof out->host) return tn_fail(e, TN_INVALID_ARGUMENT, "'%s': no host (expected grpc://HOST:PORT)", url);
    memcpy(out->host, host, hl);
    out->port = TN_DEFAULT_PORT;
    if (port) {
        char *end;
        long v = strtol(port, &end, 10);
        if (end == port || (*end && *end != '/') || v < 1 || v > 65535)
            return tn_fail(e, TN_INVALID_ARGUMENT, "'%s': the port must be a number from 1 to 65535", url);
        out->port = (int)v;
    }
    if (strchr(out->host, ':')) snprintf(out->target, sizeof out->target, "[%s]:%d", out->host, out->port);
    else snprintf(out->target, sizeof out->target, "%s:%d", out->host, out->port);
    return TN_OK;
}

int tn_is_loopback(const char *host)
{
    if (!strcasecmp(host, "localhost") || !strcmp(host, "::1") || !strcmp(host, "[::1]")) return 1;
    struct in_addr a;
    if (inet_pton(AF_INET, host, &a) == 1) return (ntohl(a.s_addr) >> 24) == 127;
    return 0;
}
