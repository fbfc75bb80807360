/* cmd_list.c — tpusim list: the registered TPUs with their URL, slice, state (READY, BUSY, or UNHEALTHY when
 * the server does not answer its health check), clients and HBM in use. */
#include "cli.h"
#include "net/net.h"

#include "tpusim.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* tpusim list NAME --memory: the server's own memory report (HBM per device, what each session holds). */
static int list_memory(const char *name)
{
    tn_err e = {0};
    char url[320];
    tn_client *c = NULL;
    ProtobufCMessage *resp = NULL;
    Tpusim__V1__MemoryReportRequest r = TPUSIM__V1__MEMORY_REPORT_REQUEST__INIT;
    int rc = tn_resolve(name, url, sizeof url, &e);
    if (!rc) rc = tn_client_new(url, NULL, &c, &e);
    if (!rc) rc = tn_client_unary(c, TN_M_MEMORY_REPORT, &r.base, &tpusim__v1__memory_report_response__descriptor, &resp, 30, &e);
    if (rc) fprintf(stderr, "tpusim list: %s\n", tn_err_msg(&e));
    else printf("%s (%s)\n%s", name, url, ((Tpusim__V1__MemoryReportResponse *)resp)->text);
    tn_msg_free(resp);
    tn_client_free(c);
    tn_err_clear(&e);
    return rc ? 1 : 0;
}

int cmd_list(int argc, char **argv)
{
    int json = 0;
    const char *memory = NULL;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            printf("usage: tpusim list [--json]\n       tpusim list NAME --memory\n\n"
                   "The TPUs registered in $TPUSIM_HOME/registry.db (default ~/.tpusim) by `tpusim serve --name`:\n"
                   "name, URL, slice, state (READY, BUSY; UNHEALTHY when the server does not answer its health\n"
                   "check: it died or hangs), clients (open sessions), HBM in use of the slice's total, and the\n"
                   "age of the last heartbeat. NAME --memory asks that server for its memory report: HBM in use per\n"
                   "device and what each session (client) holds.\n");
            return 0;
        }
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--memory") && i > 1 && argv[i - 1][0] != '-') memory = argv[i - 1];
        else if (argv[i][0] != '-' && i + 1 < argc && !strcmp(argv[i + 1], "--memory")) continue;
        else return fprintf(stderr, "tpusim list: unexpected '%s' (tpusim list --help)\n", argv[i]), 2;
    }
    if (memory) return list_memory(memory);
    tn_err e = {0};
    tn_registry *r = NULL;
    tn_tpu_entry *t = NULL;
    int n = 0;
    if (tn_registry_open(NULL, &r, &e) || tn_registry_list(r, &t, &n, &e)) {
        fprintf(stderr, "tpusim list: %s\n", tn_err_msg(&e));
        tn_err_clear(&e);
        tn_registry_close(r);
        return 1;
    }
    if (json) printf("[");
    else printf("%-20s %-28s %-14s %-10s %7s %18s %10s\n", "NAME", "URL", "SLICE", "STATE", "CLIENTS", "HBM IN USE", "HEARTBEAT");
    double now = tn_wall();
    for (int i = 0; i < n; i++) {
        const char *state = tn_tpu_state(&t[i], 1.0);
        char used[32], total[32], hbm[72];
        tn_fmt_bytes(used, sizeof used, t[i].hbm_in_use);
        tn_fmt_bytes(total, sizeof total, t[i].hbm_total);
        snprintf(hbm, sizeof hbm, "%s/%s", used, total);
        if (json)
            printf("%s{\"name\": \"%s\", \"url\": \"%s\", \"slice\": \"%s\", \"state\": \"%s\", \"clients\": %d, \"hbm_in_use\": %lld, "
                   "\"hbm_total\": %lld, \"pid\": %d, \"host\": \"%s\", \"heartbeat_age_s\": %.1f}",
                   i ? ", " : "", t[i].name, t[i].url, t[i].slice, state, t[i].clients, (long long)t[i].hbm_in_use,
                   (long long)t[i].hbm_total, t[i].pid, t[i].host, now - t[i].heartbeat);
        else
            printf("%-20s %-28s %-14s %-10s %7d %18s %9.0fs\n", t[i].name, t[i].url, t[i].slice, state, t[i].clients, hbm,
                   now - t[i].heartbeat);
    }
    if (json) printf("]\n");
    else if (n == 0) printf("(no TPUs registered in %s; tpusim serve --name NAME registers one)\n", tn_registry_home(r));
    free(t);
    tn_registry_close(r);
    return 0;
}
