/* cmd_scale.c — `tpusim scale`: one per-device program on slices of several sizes (weak or strong scaling),
 * with a GPU comparison: a table, JSON, and an SVG/HTML chart (docs/pods.md). */
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void scale_usage(FILE *f)
{
    fprintf(f,
            "usage: tpusim scale PROGRAM.hlo --slices S1,S2,... [--per-core-batch b | --global-batch B]\n"
            "                    [--dataset-size N --epochs E] [--price K=P,...] [--gpus V100,A100,H100] [options]\n"
            "\n"
            "Times one device's step of PROGRAM.hlo on each slice with tpusim's timing model, its collectives\n"
            "spanning the slice on its torus (docs/timing.md), and prints a scaling table: step time, its\n"
            "collective share, samples/s, speed-up and efficiency against the smallest slice, time to train and\n"
            "cost; beside them the same program on a server of GPUs (a roofline per op from published peaks).\n"
            "\n"
            "options:\n"
            "  --slices S1,S2,...     slices (v2-8,v2-32,v2-128,v2-256,v2-512; v3-..., v4-..., 2xv5p-256 ...)\n"
            "  --per-core-batch b     weak scaling: b samples per device per step (default: the program's batch)\n"
            "  --global-batch B       strong scaling: B samples per step over each slice; the per-device batch is\n"
            "                         B / devices, so PROGRAM needs {b} in its name (step_b{b}.hlo), one file\n"
            "                         per per-device batch\n"
            "  --dataset-size N       samples per epoch, with --epochs E: steps and time to train\n"
            "  --epochs E\n"
            "  --price K=P,...        dollars per chip-hour by slice or generation and per GPU-hour by GPU name\n"
            "                         (v2=1.50,V100=2.48; a plain number: every TPU): cost per run (per 1000 steps\n"
            "                         without --dataset-size)\n"
            "  --gpus G1,G2|none      GPUs to compare (default V100,A100,H100), --gpu-count N per server (8)\n"
            "  --keep-groups          collectives keep their replica groups (default: a group of every device the\n"
            "                         program was written for spans the slice)\n"
            "  --json                 print JSON instead of the table\n"
            "  --svg FILE, --html FILE  the chart (and with --html the table) for a browser\n"
            "\n"
            "exit status: 0 done, 2 bad command line, program or slice.\n");
}

static int scale_num(const char *opt, const char *v, double lo, double *out)
{
    char *end;
    double d = strtod(v, &end);
    if (!*v || *end || !(d >= lo) || !isfinite(d)) {
        fprintf(stderr, "tpusim scale: %s wants a number >= %g ('%s')\n", opt, lo, v);
        return 0;
    }
    *out = d;
    return 1;
}

int cmd_scale(int argc, char **argv)
{
    tpu_scale_opts o;
    memset(&o, 0, sizeof o);
    const char *svg = NULL, *html = NULL;
    int json = 0;
    double d;
    for (int i = 1; i < argc; i++) {
        const char *v, *a = argv[i];
        if (cli_is_help(a)) {
            scale_usage(stdout);
            return 0;
        } else if ((v = cli_opt_value(argc, argv, &i, "--slices"))) {
            o.slices = v;
        } else if ((v = cli_opt_value(argc, argv, &i, "--per-core-batch"))) {
            if (!scale_num(a, v, 1, &d)) return 2;
            o.per_core_batch = (int64_t)d;
        } else if ((v = cli_opt_value(argc, argv, &i, "--global-batch"))) {
            if (!scale_num(a, v, 1, &d)) return 2;
            o.global_batch = (int64_t)d;
        } else if ((v = cli_opt_value(argc, argv, &i, "--dataset-size"))) {
            if (!scale_num(a, v, 1, &o.dataset_size)) return 2;
        } else if ((v = cli_opt_value(argc, argv, &i, "--epochs"))) {
            if (!scale_num(a, v, 1e-9, &o.epochs)) return 2;
        } else if ((v = cli_opt_value(argc, argv, &i, "--price"))) {
            o.prices = v;
        } else if ((v = cli_opt_value(argc, argv, &i, "--gpus"))) {
            o.gpus = v;
        } else if ((v = cli_opt_value(argc, argv, &i, "--gpu-count"))) {
            if (!scale_num(a, v, 1, &d)) return 2;
            o.gpu_count = (int)(d > 4096 ? 4096 : d);
        } else if (!strcmp(a, "--keep-groups")) {
            o.span_slice = -1;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if ((v = cli_opt_value(argc, argv, &i, "--svg"))) {
            svg = v;
        } else if ((v = cli_opt_value(argc, argv, &i, "--html"))) {
            html = v;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "tpusim scale: unknown option or missing value '%s' (see tpusim scale --help)\n", a);
            return 2;
        } else if (!o.program) {
            o.program = a;
        } else {
            fprintf(stderr, "tpusim scale: one program at a time ('%s' is extra)\n", a);
            return 2;
        }
    }
    if (!o.program || !o.slices) {
        fprintf(stderr, "tpusim scale: %s\n\n", !o.program ? "no program given" : "--slices is required (e.g. v2-8,v2-32)");
        scale_usage(stderr);
        return 2;
    }
    if ((o.dataset_size > 0) != (o.epochs > 0)) {
        fprintf(stderr, "tpusim scale: --dataset-size and --epochs go together\n");
        return 2;
    }
    tpu_ctx *ctx = tpu_ctx_new();
    if (!ctx) return 2;
    tpu_scale *s = NULL;
    int rc = 0;
    if (tpu_scale_run(ctx, &o, &s) != TPU_OK) {
        fprintf(stderr, "tpusim scale: %s\n", tpu_errmsg(ctx));
        rc = 2;
    }
    if (!rc) fputs(json ? tpu_scale_json(s) : tpu_scale_table(s), stdout);
    if (!rc && svg && tpu_scale_write_svg(ctx, s, svg)) rc = 2;
    if (!rc && html && tpu_scale_write_html(ctx, s, html)) rc = 2;
    if (rc == 2 && s) fprintf(stderr, "tpusim scale: %s\n", tpu_errmsg(ctx));
    if (!rc && !json && (svg || html))
        printf("wrote %s%s%s\n", svg ? svg : "", svg && html ? ", " : "", html ? html : "");
    tpu_scale_free(s);
    tpu_ctx_free(ctx);
    return rc;
}
