/* cmd_resolve.c — tpusim resolve NAME: the URL a TPU name stands for (TPU_NAME -> TPU_GRPC_URL), as the
 * plugin and the Python helper resolve it: the registry's entry, which must answer its health check. */
#include "cli.h"
#include "net/net.h"

#include <stdio.h>
#include <string.h>

int cmd_resolve(int argc, char **argv)
{
    const char *name = NULL;
    int nocheck = 0;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            printf("usage: tpusim resolve NAME [--no-check]\n\n"
                   "Prints the URL (grpc://HOST:PORT) registered for TPU NAME in $TPUSIM_HOME/registry.db (default\n"
                   "~/.tpusim). Exit 1 if the name is unknown or its server does not answer (UNHEALTHY); --no-check\n"
                   "prints the registered URL without asking the server.\n");
            return 0;
        }
        if (!strcmp(argv[i], "--no-check")) nocheck = 1;
        else if (argv[i][0] == '-' || name) return fprintf(stderr, "tpusim resolve: unexpected '%s' (tpusim resolve --help)\n", argv[i]), 2;
        else name = argv[i];
    }
    if (!name) return fprintf(stderr, "usage: tpusim resolve NAME\n"), 2;
    tn_err e = {0};
    char url[320];
    int rc;
    if (nocheck) {
        tn_registry *r = NULL;
        tn_tpu_entry t;
        rc = tn_registry_open(NULL, &r, &e);
        if (!rc) rc = tn_registry_lookup(r, name, &t, &e);
        if (!rc) snprintf(url, sizeof url, "%s", t.url);
        tn_registry_close(r);
    } else {
        rc = tn_resolve(name, url, sizeof url, &e);
    }
    if (rc) fprintf(stderr, "tpusim resolve: %s\n", tn_err_msg(&e));
    else printf("%s\n", url);
    tn_err_clear(&e);
    return rc ? 1 : 0;
}
