/* cmd_chips.c — `tpusim chips [--json] [NAME...]`: the table of TPU generations, or one chip or slice. */
#include "cli.h"
#include <stdio.h>
#include <string.h>

static void chips_help(FILE *f)
{
    fprintf(f,
            "usage: tpusim chips [--json] [NAME ...]\n"
            "\n"
            "Without NAME: the table of TPU generations tpusim models (cores, MXUs, peak FLOP/s, HBM, VMEM,\n"
            "ICI, chips per host, pod size). With NAME: that chip or slice in detail, with its derived figures\n"
            "(cores, HBM and peak FLOP/s of the slice) and the public sources of every figure.\n"
            "\n"
            "NAME is spelled the way Cloud TPU spells accelerator types:\n"
            "  v2-8, v3-32, v4-64, v5p-128, tpu7x-8     count TensorCores (v4-64 = 32 chips, 2x4x4)\n"
            "  v5litepod-16 (or v5e-16), v6e-8          count chips\n"
            "  v2, v3, v4, v5e, v5p, v6e, v7            a bare generation: one chip\n"
            "  FILE.json                                a hypothetical chip (see docs/chips.md)\n"
            "\n"
            "options:\n"
            "  --json       machine-readable output (the table is an array, a chip an object)\n"
            "  -h, --help   this help\n"
            "\n"
            "exit status: 0 ok, 2 unknown chip, bad size or bad chip file\n");
}

int cmd_chips(int argc, char **argv)
{
    int json = 0, nnames = 0;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            chips_help(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (argv[i][0] == '-' && argv[i][1] == '-') {
            fprintf(stderr, "tpusim chips: unknown option '%s' (see --help)\n", argv[i]);
            return 2;
        } else nnames++;
    }
    tpu_ctx *ctx = cli_ctx_new();
    if (!ctx) {
        fprintf(stderr, "tpusim chips: out of memory\n");
        return 1;
    }
    int rc = 0;
    if (!nnames) {
        if (tpu_chips_print(ctx, stdout, json) != TPU_OK) {
            fprintf(stderr, "tpusim chips: %s\n", tpu_errmsg(ctx));
            rc = 1;
        }
    } else {
        int shown = 0;
        if (json && nnames > 1) fputs("[\n", stdout);
        for (int i = 1; i < argc && rc == 0; i++) {
            if (!strcmp(argv[i], "--json")) continue;
            tpu_chip *c = NULL;
            tpu_status st = tpu_chip_get(ctx, argv[i], &c);
            cli_print_warnings(ctx);
            if (st != TPU_OK) {
                fprintf(stderr, "tpusim chips: %s\n", tpu_errmsg(ctx));
                rc = st == TPU_ERR_NOMEM ? 1 : 2;
                break;
            }
            if (shown++) fputs(json ? ",\n" : "\n", stdout);
            if (tpu_chip_print(ctx, c, stdout, json) != TPU_OK) {
                fprintf(stderr, "tpusim chips: %s\n", tpu_errmsg(ctx));
                rc = 1;
            }
            tpu_chip_free(c);
        }
        if (json && nnames > 1 && rc == 0) fputs("]\n", stdout);
    }
    tpu_ctx_free(ctx);
    return rc;
}
