/* cmd_check.c — `tpusim check` (would a TPU compile this program?) and `tpusim print` (the canonical text). */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check_usage(FILE *f)
{
    fprintf(f,
            "usage: tpusim check PROGRAM.hlo [--chip GEN] [--split-input-file] [--json]\n"
            "\n"
            "Reports everything in PROGRAM.hlo that would stop the TPU compiler, or that runs differently from how\n"
            "it is written: shapes that do not verify, dynamic shapes, custom-calls a TPU cannot make, element\n"
            "types the chip lacks, host round trips, constants elided as {...}. Every problem is listed (not just\n"
            "the first) with file:line:col, the instruction, its op_name and source line when the metadata has\n"
            "them, and a one-line fix; then a one-line verdict. PROGRAM may be HLO text or an HloModuleProto in\n"
            "protobuf text or binary format (binary HloProto and HloSnapshot too, as XLA dumps them: *.hlo.pb).\n"
            "\n"
            "options:\n"
            "  --chip GEN            check against one TPU generation: v2, v3, v4, v5e, v5p, v6e or v7 (also\n"
            "                        v5litepod, trillium, tpu7x/ironwood; a slice suffix such as v5e-8 is ignored).\n"
            "                        Without it the generic TPU rules apply.\n"
            "  --split-input-file    the file holds several modules separated by lines '// -----'; check each\n"
            "  --json                print the report as a JSON object (with --split-input-file: an array of them)\n"
            "  -h, --help            this help\n"
            "\n"
            "exit status: 0 compatible (warnings and notes allowed), 1 not compatible, 2 the program cannot be read\n"
            "or parsed, or a bad command line.\n");
}

static void print_usage(FILE *f)
{
    fprintf(f,
            "usage: tpusim print PROGRAM.hlo [--split-input-file]\n"
            "\n"
            "Parses PROGRAM.hlo (HLO text, or an HloModuleProto in protobuf text or binary format) and prints it as\n"
            "canonical HLO text: every result shape written out (shapes the text left out are inferred), operand\n"
            "shapes, nested operand instructions and inline computation bodies made into named instructions and\n"
            "computations. The output parses back to the same module.\n"
            "\n"
            "options:\n"
            "  --split-input-file    the file holds several modules separated by lines '// -----'; print each,\n"
            "                        separated the same way\n"
            "  -h, --help            this help\n"
            "\n"
            "exit status: 0 printed, 2 the program cannot be read or parsed, or a bad command line.\n");
}

/* Loads one module or, with split, all of them. Returns 0 or the exit code 2 after printing why. */
static int check_load(tpu_ctx *ctx, const char *path, int split, tpu_module ***ms, int *n)
{
    tpu_status st;
    if (split) {
        st = tpu_module_load_split(ctx, path, ms, n);
    } else {
        *ms = malloc(sizeof **ms);
        if (!*ms) {
            fprintf(stderr, "tpusim: out of memory\n");
            return 2;
        }
        *n = 1;
        st = tpu_module_load(ctx, path, &(*ms)[0]);
        if (st) {
            free(*ms);
            *ms = NULL;
            *n = 0;
        }
    }
    cli_print_warnings(ctx);
    if (st) {
        fprintf(stderr, "tpusim: %s\n", tpu_errmsg(ctx));
        return 2;
    }
    return 0;
}

static void check_free(tpu_module **ms, int n, int split)
{
    if (split) {
        tpu_modules_free(ms, n);
        return;
    }
    for (int i = 0; i < n; i++) tpu_module_free(ms[i]);
    free(ms);
}

int cmd_check(int argc, char **argv)
{
    const char *path = NULL, *chip = NULL;
    int split = 0, json = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (cli_is_help(argv[i])) {
            check_usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--split-input-file")) {
            split = 1;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strncmp(argv[i], "--chip", 6) && (argv[i][6] == 0 || argv[i][6] == '=')) {
            if (!(v = cli_opt_value(argc, argv, &i, "--chip"))) return 2;
            chip = v;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "tpusim check: unknown option '%s'\n\n", argv[i]);
            check_usage(stderr);
            return 2;
        } else if (path) {
            fprintf(stderr, "tpusim check: one program at a time ('%s' and '%s')\n", path, argv[i]);
            return 2;
        } else {
            path = argv[i];
        }
    }
    if (!path) {
        check_usage(stderr);
        return 2;
    }
    tpu_ctx *ctx = cli_ctx_new();
    if (!ctx) {
        fprintf(stderr, "tpusim: out of memory\n");
        return 2;
    }
    tpu_module **ms = NULL;
    int n = 0;
    int rc = check_load(ctx, path, split, &ms, &n);
    if (!rc && json && split) printf("[\n");
    for (int i = 0; rc != 2 && i < n; i++) {
        tpu_report *r = NULL;
        if (tpu_check(ctx, ms[i], chip, &r)) {
            fprintf(stderr, "tpusim check: %s\n", tpu_errmsg(ctx));
            rc = 2;
            break;
        }
        if (json) {
            fputs(tpu_report_json(r), stdout);
            fputs(split && i + 1 < n ? ",\n" : "\n", stdout);
        } else {
            if (n > 1) printf("%s// module %d of %d\n", i ? "\n" : "", i + 1, n);
            fputs(tpu_report_text(r), stdout);
        }
        if (!tpu_report_compatible(r)) rc = 1;
        tpu_report_free(r);
    }
    if (rc != 2 && json && split) printf("]\n");
    check_free(ms, n, split);
    tpu_ctx_free(ctx);
    return rc;
}

int cmd_print(int argc, char **argv)
{
    const char *path = NULL;
    int split = 0;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            print_usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--split-input-file")) {
            split = 1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "tpusim print: unknown option '%s'\n\n", argv[i]);
            print_usage(stderr);
            return 2;
        } else if (path) {
            fprintf(stderr, "tpusim print: one program at a time ('%s' and '%s')\n", path, argv[i]);
            return 2;
        } else {
            path = argv[i];
        }
    }
    if (!path) {
        print_usage(stderr);
        return 2;
    }
    tpu_ctx *ctx = cli_ctx_new();
    if (!ctx) {
        fprintf(stderr, "tpusim: out of memory\n");
        return 2;
    }
    tpu_module **ms = NULL;
    int n = 0;
    int rc = check_load(ctx, path, split, &ms, &n);
    for (int i = 0; !rc && i < n; i++) {
        if (i) fputs("// -----\n\n", stdout);
        if (tpu_module_print(ctx, ms[i], stdout)) {
            fprintf(stderr, "tpusim print: %s\n", tpu_errmsg(ctx));
            rc = 2;
        }
    }
    check_free(ms, n, split);
    tpu_ctx_free(ctx);
    return rc;
}
