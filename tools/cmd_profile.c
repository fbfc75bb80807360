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
            "  --input-time T         instead: the measured seconds the host pipeline takes per batch\n"
            "  --batch B              samples per step (default: leading dimension of the largest input)\n"
            "  --price P              price per chip-hour in dollars, for a cost per 1000 steps; with --compare\n"
            "                         also per generation or slice: --price v4=3.22,v5e=1.20,v3-8=2.00\n"
            "  --span-slice           collectives over every device the program was written for span the whole\n"
            "                         slice instead (a data-parallel step exported for 8 devices, timed on\n"
            "                         v3-256); groups left empty always span the slice\n"
            "  --compare S1,S2,...    what-if: the same per-device program on other slices (another generation\n"
            "                         or size): a table of step time, speed-up, bound and cost per 1000 steps\n"
            "  --top N                ops shown in the table (default 15)\n"
            "  --json                 print a JSON object (step_time_s, flops, mxu_utilization, hbm_bytes, bound,\n"
            "                         ops[{name, time_s, bound, ...}], ...)\n"
            "  --trace FILE           write a Chrome trace-event JSON timeline (open in ui.perfetto.dev)\n"
            "  --html FILE            write an HTML report with charts and the advisor's pointers\n"
            "  --tensorboard LOGDIR   write the profile for TensorBoard's profile plugin (XPlane):\n"
            "                         LOGDIR/plugins/profile/RUN/HOST.xplane.pb; then tensorboard --logdir LOGDIR\n"
            "  --run NAME             the run's name under LOGDIR (default: the time, as the profiler names runs)\n"
            "  --no-advice            don't print the advisor's pointers\n"
            "  --split-input-file     the file holds several modules separated by lines '// -----': profile\n"
            "                         each (--json prints an array; trace and report files get -1, -2 ...)\n"
            "\n"
            "exit status: 0 profiled, 1 the program does not verify, 2 bad command line or unreadable program.\n");
}

/* --price is a plain number, or "KEY=PRICE,KEY=PRICE,..." with non-empty keys; every price a number 0..1e6. */
static int profile_price_ok(const char *price)
{
    double d;
    if (!strchr(price, '=')) return cli_parse_num(price, strlen(price), &d) && d >= 0 && d <= 1e6;
    for (const char *s = price;;) {
        const char *comma = strchr(s, ','), *end = comma ? comma : s + strlen(s);
        const char *eq = memchr(s, '=', (size_t)(end - s));
        if (!eq || eq == s || !cli_parse_num(eq + 1, (size_t)(end - eq - 1), &d) || d < 0 || d > 1e6) return 0;
        if (!comma) return 1;
        s = comma + 1;
    }
}

typedef struct profile_out {
    int         json, top, advice;
    const char *trace, *html, *compare, *price, *tb, *run;
    double      input_time;
    int         index, count;   /* module index and count with --split-input-file (count 0: one module) */
} profile_out;

/* FILE.ext -> FILE-K.ext for module K of a split file (K > 0). */
static void profile_path(char *buf, size_t n, const char *path, int k)
{
    if (k <= 0) {
        snprintf(buf, n, "%s", path);
        return;
    }
    const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
    if (!dot || (slash && dot < slash)) dot = path + strlen(path);
    snprintf(buf, n, "%.*s-%d%s", (int)(dot - path), path, k, dot);
}

/* Says which files were written (on stderr: stdout may be JSON or a file given as "-"). */
static void profile_wrote(const char *path)
{
    if (strcmp(path, "-")) fprintf(stderr, "tpusim profile: wrote %s\n", path);
}

/* Profiles one module and prints what was asked. Returns the exit code (0, 1 does not verify, 2 error). */
static int profile_one(tpu_ctx *ctx, const tpu_module *m, tpu_profile_opts o, const profile_out *po)
{
    tpu_profile *p = NULL;
    int rc = 0;
    if (po->count && !po->json)
        printf("%s== module %d of %d: %s ==\n", po->index ? "\n" : "", po->index + 1, po->count, tpu_module_name(m));
    tpu_status st = tpu_profile_program(ctx, m, &o, &p);
    if (!st && po->input_time > 0 && o.input_rate <= 0) {
        /* a measured time per batch: the rate follows from the batch the profile settled on */
        int64_t batch = tpu_profile_batch(p);
        if (batch > 0) {
            o.input_rate = (double)batch / po->input_time;
            tpu_profile_free(p);
            p = NULL;
            st = tpu_profile_program(ctx, m, &o, &p);
        }
    }
    if (st) {
        fprintf(stderr, "tpusim profile: %s\n", tpu_errmsg(ctx));
        if (po->json && po->count) printf("{\"module\": \"%s\", \"error\": \"does not profile\"}", tpu_module_name(m));
        return st == TPU_ERR_INVALID || st == TPU_ERR_IO || st == TPU_ERR_PARSE ? 2 : 1;
    }
    if (po->json) {
        const char *j = tpu_profile_json(p);
        if (!j) {
            fprintf(stderr, "tpusim profile: out of memory\n");
            tpu_profile_free(p);
            return 2;
        }
        printf(po->count ? "%s" : "%s\n", j);
    } else {
        fputs(tpu_profile_summary(p, po->top), stdout);
        if (po->advice) {
            const char *a = tpu_profile_advice(p);
            if (a) printf("\nadvice:\n%s", a);
        }
    }
    if (po->compare && !po->json) {
        char *table = NULL;
        if (tpu_profile_compare(ctx, m, &o, p, po->compare, po->price, &table) != TPU_OK) {
            fprintf(stderr, "tpusim profile: --compare %s\n", tpu_errmsg(ctx));
            rc = 2;
        }
        if (table) fputs(table, stdout);
        tpu_free(table);
    }
    char path[4096];
    if (po->trace) {
        profile_path(path, sizeof path, po->trace, po->index);
        if (tpu_profile_write_trace(ctx, p, path) != TPU_OK) {
            fprintf(stderr, "tpusim profile: %s\n", tpu_errmsg(ctx));
            rc = 2;
        } else {
            profile_wrote(path);
        }
    }
    if (po->html) {
        profile_path(path, sizeof path, po->html, po->index);
        if (tpu_profile_write_html(ctx, p, path) != TPU_OK) {
            fprintf(stderr, "tpusim profile: %s\n", tpu_errmsg(ctx));
            rc = 2;
        } else {
            profile_wrote(path);
        }
    }
    if (po->tb) {
        char run[256], *written = NULL;
        if (po->run) profile_path(run, sizeof run, po->run, po->index);
        else if (po->count) snprintf(run, sizeof run, "%s", tpu_module_name(m));   /* one run per module */
        if (tpu_profile_write_tensorboard(ctx, p, po->tb, po->run || po->count ? run : NULL, &written) != TPU_OK) {
            fprintf(stderr, "tpusim profile: --tensorboard: %s\n", tpu_errmsg(ctx));
            rc = 2;
        } else {
            profile_wrote(written);
        }
        tpu_free(written);
    }
    tpu_profile_free(p);
    return rc;
}

int cmd_profile(int argc, char **argv)
{
    const char *prog = NULL, *trace = NULL, *html = NULL, *price = NULL, *compare = NULL, *tb = NULL, *run = NULL;
    int json = 0, top = 15, advice = 1, split = 0;
    double input_time = 0;
    tpu_profile_opts o = tpu_profile_opts_default();
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (cli_is_help(argv[i])) {
            profile_usage(stdout);
            return 0;
        } else if ((v = cli_opt_value(argc, argv, &i, "--chip"))) {
            o.chip = v;
        } else if ((v = cli_opt_value(argc, argv, &i, "--policy"))) {
            o.policy = v;
        } else if (!strcmp(argv[i], "--span-slice")) {
            o.span_slice = 1;
        } else if ((v = cli_opt_value(argc, argv, &i, "--steps-per-exec"))) {
            if (!cli_int32("profile", "--steps-per-exec", v, 1, 1000000000, &o.steps_per_exec)) return 2;
        } else if ((v = cli_opt_value(argc, argv, &i, "--steps"))) {
            if (!cli_int32("profile", "--steps", v, 1, 1000000000, &o.steps)) return 2;
        } else if ((v = cli_opt_value(argc, argv, &i, "--input-rate"))) {
            if (!cli_num("profile", "--input-rate", v, 1e-9, 1e15, &o.input_rate)) return 2;   /* samples/s */
        } else if ((v = cli_opt_value(argc, argv, &i, "--input-time"))) {
            if (!cli_num("profile", "--input-time", v, 1e-12, 1e9, &input_time)) return 2;   /* seconds per batch */
        } else if ((v = cli_opt_value(argc, argv, &i, "--batch"))) {
            if (!cli_int("profile", "--batch", v, 1, (int64_t)1 << 53, &o.batch)) return 2;
        } else if ((v = cli_opt_value(argc, argv, &i, "--price"))) {
            price = v;
            if (!profile_price_ok(v)) {
                fprintf(stderr, "tpusim profile: --price wants dollars per chip-hour (e.g. 1.20) or GEN=PRICE,... with "
                                "prices from 0 to 1e6, got '%s'\n", v);
                return 2;
            }
            if (!strchr(v, '=')) cli_parse_num(v, strlen(v), &o.price_per_chip_hour);
        } else if ((v = cli_opt_value(argc, argv, &i, "--compare"))) {
            compare = v;
        } else if ((v = cli_opt_value(argc, argv, &i, "--top"))) {
            if (!cli_int32("profile", "--top", v, 1, 1000000, &top)) return 2;
        } else if ((v = cli_opt_value(argc, argv, &i, "--trace"))) {
            trace = v;
        } else if ((v = cli_opt_value(argc, argv, &i, "--html"))) {
            html = v;
        } else if ((v = cli_opt_value(argc, argv, &i, "--tensorboard"))) {
            tb = v;
        } else if ((v = cli_opt_value(argc, argv, &i, "--run"))) {
            run = v;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--analytic")) {
            /* the only mode */
        } else if (!strcmp(argv[i], "--no-advice")) {
            advice = 0;
        } else if (!strcmp(argv[i], "--split-input-file")) {
            split = 1;
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
    tpu_ctx *ctx = cli_ctx_new();
    if (!ctx) return 2;
    tpu_module **ms = NULL;
    int nm = 0, rc = 0;
    tpu_status lst;
    if (split) {
        lst = tpu_module_load_split(ctx, prog, &ms, &nm);
    } else {
        ms = malloc(sizeof *ms);
        nm = ms ? 1 : 0;
        lst = ms ? tpu_module_load(ctx, prog, &ms[0]) : TPU_ERR_NOMEM;
        if (lst) nm = 0;
    }
    if (lst != TPU_OK) {
        fprintf(stderr, "tpusim profile: %s\n", tpu_errmsg(ctx));
        free(ms);
        tpu_ctx_free(ctx);
        return 2;
    }
    cli_print_warnings(ctx);
    if (json && split) printf("[\n");
    for (int k = 0; k < nm; k++) {
        profile_out po = {json, top, advice, trace, html, compare, price, tb, run, input_time, k, split ? nm : 0};
        int r = profile_one(ctx, ms[k], o, &po);
        if (r > rc) rc = r;
        if (json && split && k + 1 < nm) printf(",\n");
    }
    if (json && split) printf("]\n");
    if (split) {
        tpu_modules_free(ms, nm);
    } else {
        for (int k = 0; k < nm; k++) tpu_module_free(ms[k]);
        free(ms);
    }
    tpu_ctx_free(ctx);
    return rc;
}
