/* cli_util.c — option helpers shared by the subcommands. */
#include "cli.h"
#include <stdio.h>
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
