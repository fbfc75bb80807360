/* cmd_profile.c — `tpusim profile`: predicted step time, utilization, op table, trace, report, advice. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void profile_usage(FILE *f)
{
    fprintf(f,
            "usage: tpusim profile PROGRAM.hlo --chip SLICE [options]\n"
            "\n"
            "Predicts how long one step of PROGRAM.hlo takes on one device of a TPU slice, and why: for every op\n"
            "the time of its matrix units (MXU), vector unit, HBM traffic and interconnect, the larger of which\n"
            "sets its time, plus a fixed launch cost; then the step with its loops and the host's share.\n"
            "The model works on shapes only (analytic), so programs far too large to run are profiled in well\n"
            "under a second. See docs/timing.md for the model and the sources of its constants.\n"
            "\n"
            "options:\n"
            "  --chip NAME            slice (v3-8, v4-8, v5litepod-8, ...), generation, or chip file (.json)\n"
            "  --analytic             shapes only (the default and, for now, the only mode)\n"
            "  --policy P             float32 (default) or mixed_bfloat16\n"
            "  --steps N              steps in the trace (default 1)\n"
            "  --steps-per-exec K     steps per host round trip (Keras steps_per_execution; default 1)\n"
            "  --input-rate R         samples per second the host input pipeline delivers; when the device\n"
            "                         consumes faster, the report says the step is input-bound and by how much\n"
            "  --batch B              samples per step (default: leading dimension of the largest input)\n"
            "  --price P              price per chip-hour in dollars, for a cost per 1000 steps\n"
            "  --top N                ops shown in the table (default 15)\n"
            "  --json                 print a JSON object (step_time_s, flops, mxu_utilization, hbm_bytes, bound,\n"
            "                         ops[{name, time_s, bound, ...}], ...)\n"
            "  --trace FILE           write a Chrome trace-event JSON timeline (open in ui.perfetto.dev)\n"
            "  --html FILE            write an HTML report with charts and the advisor's pointers\n"
            "  --no-advice            don't print the advisor's pointers\n"
            "\n"
            "exit status: 0 profiled, 1 the program does not verify, 2 bad command line or unreadable program.\n");
}

int cmd_profile(int argc, char **argv)
{
    const char *prog = NULL, *trace = NULL, *html = NULL;
    int json = 0, top = 15, advice = 1;
    tpu_profile_opts o;
    memset(&o, 0, sizeof o);
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (cli_is_help(argv[i])) {
            profile_usage(stdout);
            return 0;
        } else if ((v = cli_opt_value(argc, argv, &i, "--chip"))) {
            o.chip = v;
        } else if ((v = cli_opt_value(argc, argv, &i, "--policy"))) {
            o.policy = v;
        } else if ((v = cli_opt_value(argc, argv, &i, "--steps-per-exec"))) {
            o.steps_per_exec = atoi(v);
            if (o.steps_per_exec < 1) { fprintf(stderr, "tpusim profile: --steps-per-exec must be >= 1\n"); return 2; }
        } else if ((v = cli_opt_value(argc, argv, &i, "--steps"))) {
            o.steps = atoi(v);
            if (o.steps < 1) { fprintf(stderr, "tpusim profile: --steps must be >= 1\n"); return 2; }
        } else if ((v = cli_opt_value(argc, argv, &i, "--input-rate"))) {
            o.input_rate = atof(v);
            if (o.input_rate <= 0) { fprintf(stderr, "tpusim profile: --input-rate must be > 0 samples/s\n"); return 2; }
        } else if ((v = cli_opt_value(argc, argv, &i, "--batch"))) {
            o.batch = atoll(v);
        } else if ((v = cli_opt_value(argc, argv, &i, "--price"))) {
            o.price_per_chip_hour = atof(v);
        } else if ((v = cli_opt_value(argc, argv, &i, "--top"))) {
            top = atoi(v);
        } else if ((v = cli_opt_value(argc, argv, &i, "--trace"))) {
            trace = v;
        } else if ((v = cli_opt_value(argc, argv, &i, "--html"))) {
            html = v;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--analytic")) {
            /* the only mode */
        } else if (!strcmp(argv[i], "--no-advice")) {
            advice = 0;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "tpusim profile: unknown option '%s' (see tpusim profile --help)\n", argv[i]);
            return 2;
        } else if (!prog) {
            prog = argv[i];
        } else {
            fprintf(stderr, "tpusim profile: one program at a time ('%s' is extra)\n", argv[i]);
            return 2;
        }
    }
    if (!prog || !o.chip) {
        fprintf(stderr, "tpusim profile: %s\n", !prog ? "no program given" : "--chip is required (e.g. --chip v3-8)");
        profile_usage(stderr);
        return 2;
    }
    tpu_ctx *ctx = tpu_ctx_new();
    if (!ctx) return 2;
    tpu_module *m = NULL;
    tpu_profile *p = NULL;
    int rc = 0;
    if (tpu_module_load(ctx, prog, &m) != TPU_OK) {
        fprintf(stderr, "tpusim profile: %s\n", tpu_errmsg(ctx));
        rc = 2;
        goto done;
    }
    cli_print_warnings(ctx);
    tpu_status st = tpu_profile_program(ctx, m, &o, &p);
    if (st) {
        fprintf(stderr, "tpusim profile: %s\n", tpu_errmsg(ctx));
        rc = st == TPU_ERR_INVALID || st == TPU_ERR_IO || st == TPU_ERR_PARSE ? 2 : 1;
        goto done;
    }
    if (json) {
        const char *j = tpu_profile_json(p);
        if (!j) { fprintf(stderr, "tpusim profile: out of memory\n"); rc = 2; goto done; }
        printf("%s\n", j);
    } else {
        fputs(tpu_profile_summary(p, top), stdout);
        if (advice) {
            const char *a = tpu_profile_advice(p);
            if (a) printf("\nadvice:\n%s", a);
        }
    }
    if (trace && tpu_profile_write_trace(ctx, p, trace) != TPU_OK) {
        fprintf(stderr, "tpusim profile: %s\n", tpu_errmsg(ctx));
        rc = 2;
    }
    if (html && tpu_profile_write_html(ctx, p, html) != TPU_OK) {
        fprintf(stderr, "tpusim profile: %s\n", tpu_errmsg(ctx));
        rc = 2;
    }
done:
    tpu_profile_free(p);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
    return rc;
}
