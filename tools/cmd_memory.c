/* cmd_memory.c — `tpusim memory` (the HBM report and viewer) and `tpusim compile` (fails like the TPU
 * compiler when the program does not fit). */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void memory_usage(FILE *f, const char *cmd)
{
    if (!strcmp(cmd, "compile")) {
        fprintf(f,
                "usage: tpusim compile PROGRAM.hlo --chip SLICE_OR_GEN [--policy mixed_bfloat16] [--json]\n"
                "\n"
                "Compiles PROGRAM.hlo for one core of the chip (layouts, (8,128) tiling, fusion, schedule, buffer\n"
                "assignment) and fails like the TPU compiler when it does not fit in HBM, printing the same\n"
                "out-of-memory report. On success prints a one-line summary.\n"
                "\n"
                "options:\n"
                "  --chip NAME        slice (v2-8, v3-8, v3-32, v4-8, v5p-128, v5litepod-16, v6e-8, ...), generation\n"
                "                     (v2 ... v7) or a chip file (.json, see docs/chips.md)\n"
                "  --policy P         float32 (as written, default) or mixed_bfloat16 (Keras' mixed policy)\n"
                "  --json             print the memory plan as a JSON object (as tpusim memory --json) instead\n"
                "\n"
                "exit status: 0 fits, 1 does not fit or does not verify, 2 bad command line or unreadable program.\n");
        return;
    }
    fprintf(f,
            "usage: tpusim memory PROGRAM.hlo --chip SLICE_OR_GEN [--policy P] [--json] [--svg FILE] [--html FILE]\n"
            "                     [--top N]\n"
            "\n"
            "Predicts the HBM one TensorCore (device) needs to run PROGRAM.hlo: arguments, outputs, temporaries,\n"
            "padding from the TPU's tiled layouts, fragmentation, and the largest allocations with the operation\n"
            "that made them.\n"
            "\n"
            "options:\n"
            "  --chip NAME        slice, generation or chip file (as for tpusim compile)\n"
            "  --policy P         float32 (default) or mixed_bfloat16: see what Keras' mixed policy would save\n"
            "  --json             print a JSON object instead of the text report\n"
            "  --svg FILE         write the memory viewer picture (live bytes across the program, the peak, the\n"
            "                     largest buffers)\n"
            "  --html FILE        write an HTML page with the picture and the report\n"
            "  --top N            number of largest allocations listed (default 10)\n"
            "\n"
            "exit status: 0 report printed (fits or not), 1 the program does not verify, 2 bad command line or\n"
            "unreadable program.\n");
}

static int memory_main(int argc, char **argv, int compile)
{
    const char *prog = NULL, *chip = NULL, *policy = NULL, *svg = NULL, *html = NULL;
    int json = 0, top = 10;
    const char *cmd = compile ? "compile" : "memory";
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (cli_is_help(argv[i])) {
            memory_usage(stdout, cmd);
            return 0;
        } else if ((v = cli_opt_value(argc, argv, &i, "--chip"))) {
            chip = v;
        } else if ((v = cli_opt_value(argc, argv, &i, "--policy"))) {
            policy = v;
        } else if (!compile && (v = cli_opt_value(argc, argv, &i, "--svg"))) {
            svg = v;
        } else if (!compile && (v = cli_opt_value(argc, argv, &i, "--html"))) {
            html = v;
        } else if (!compile && (v = cli_opt_value(argc, argv, &i, "--top"))) {
            if (!cli_int32(cmd, "--top", v, 1, 1000000, &top)) return 2;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "tpusim %s: unknown option '%s' (see tpusim %s --help)\n", cmd, argv[i], cmd);
            return 2;
        } else if (!prog) {
            prog = argv[i];
        } else {
            fprintf(stderr, "tpusim %s: one program at a time ('%s' is extra)\n", cmd, argv[i]);
            return 2;
        }
    }
    if (!prog || !chip) {
        if (!prog) fprintf(stderr, "tpusim %s: no program given\n", cmd);
        else fprintf(stderr, "tpusim %s: --chip is required (e.g. --chip v3-8)\n", cmd);
        memory_usage(stderr, cmd);
        return 2;
    }
    tpu_ctx *ctx = cli_ctx_new();
    if (!ctx) return 2;
    tpu_module *m = NULL;
    tpu_memory *mem = NULL;
    int rc = 0;
    if (tpu_module_load(ctx, prog, &m) != TPU_OK) {
        fprintf(stderr, "tpusim %s: %s\n", cmd, tpu_errmsg(ctx));
        rc = 2;
        goto done;
    }
    cli_print_warnings(ctx);
    tpu_memory_opts o = {chip, policy, top};
    tpu_status st = tpu_memory_plan(ctx, m, &o, &mem);
    if (st) {
        fprintf(stderr, "tpusim %s: %s\n", cmd, tpu_errmsg(ctx));
        rc = st == TPU_ERR_INVALID || st == TPU_ERR_IO || st == TPU_ERR_PARSE ? 2 : 1;
        goto done;
    }
    if (compile && json) {   /* the plan as memory --json prints it; the exit status says whether it compiled */
        const char *j = tpu_memory_json(mem);
        if (!j) {
            fprintf(stderr, "tpusim compile: out of memory\n");
            rc = 2;
        } else {
            printf("%s\n", j);
            rc = tpu_memory_fits(mem) ? 0 : 1;
        }
        goto done;
    }
    if (compile) {
        if (!tpu_memory_fits(mem)) {
            fprintf(stderr, "%s", tpu_memory_report(mem));
            rc = 1;
        } else {
            printf("%s: compiled for %s: uses %.2f GiB of %.2f GiB HBM per device\n", prog, chip,
                   (double)tpu_memory_peak_bytes(mem) / (1 << 30), (double)tpu_memory_capacity_bytes(mem) / (1 << 30));
        }
        goto done;
    }
    if (json) {
        const char *j = tpu_memory_json(mem);
        if (!j) {
            fprintf(stderr, "tpusim memory: out of memory\n");
            rc = 2;
            goto done;
        }
        printf("%s\n", j);
    } else {
        fputs(tpu_memory_report(mem), stdout);
    }
    if (svg && tpu_memory_write_svg(ctx, mem, svg) != TPU_OK) {
        fprintf(stderr, "tpusim memory: %s\n", tpu_errmsg(ctx));
        rc = 2;
    }
    if (html && tpu_memory_write_html(ctx, mem, html) != TPU_OK) {
        fprintf(stderr, "tpusim memory: %s\n", tpu_errmsg(ctx));
        rc = 2;
    }
    if ((svg || html) && !rc)   /* on stderr: stdout may hold the JSON or a file written to "-" */
        fprintf(stderr, "tpusim memory: wrote%s%s%s%s\n", svg ? " " : "", svg ? svg : "", html ? " " : "", html ? html : "");
done:
    tpu_memory_free(mem);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
    return rc;
}

int cmd_memory(int argc, char **argv) { return memory_main(argc, argv, 0); }
int cmd_compile(int argc, char **argv) { return memory_main(argc, argv, 1); }
