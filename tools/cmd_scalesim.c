/* cmd_scalesim.c — `tpusim scalesim`: SCALE-Sim's command line (-c -t -i -p), SCALE-Sim's reports. */
#include "cli.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void scalesim_help(FILE *f)
{
    fprintf(f,
            "usage: tpusim scalesim -c CONFIG.cfg [-t TOPOLOGY.csv] [-i conv|gemm] [-p OUTDIR] [-q]\n"
            "\n"
            "SCALE-Sim compatible layer mode: reads SCALE-Sim's config and topology files and writes\n"
            "OUTDIR/<run_name>/COMPUTE_REPORT.csv, BANDWIDTH_REPORT.csv and DETAILED_ACCESS_REPORT.csv with\n"
            "the columns and numbers SCALE-Sim 3.0.0 produces (see docs/scalesim.md).\n"
            "\n"
            "options (SCALE-Sim's spellings):\n"
            "  -c CONFIG     SCALE-Sim .cfg file, v2 or v3 ([general], [architecture_presets], [run_presets],\n"
            "                optional [layout], [sparsity], [network_presets]); unknown keys are ignored\n"
            "  -t TOPOLOGY   topology .csv; default: [network_presets] TopologyCsvLoc of the config\n"
            "  -i conv|gemm  topology rows: conv = name, IFMAP H, IFMAP W, filter H, filter W, channels,\n"
            "                filters, stride (default); gemm = name, M, N, K\n"
            "  -p OUTDIR     where the <run_name> report directory is created (default ./results)\n"
            "  -s Y|N        SCALE-Sim's trace switch; accepted, traces are not written\n"
            "  -l LAYOUT     SCALE-Sim's layout file; accepted and ignored (custom layouts are unsupported)\n"
            "  -q            quiet: no per-layer lines on stdout\n"
            "  --json        print a JSON object instead: layers, report directory, times and the compute\n"
            "                report's rows (one object per layer, keyed by its columns)\n"
            "  -h, --help    this help\n"
            "\n"
            "exit status: 0 reports written, 1 simulation failed or unsupported feature, 2 bad usage or input\n");
}

/* One CSV line's fields, trimmed, into fields[] (at most max); returns the count. Modifies line. */
static int scalesim_fields(char *line, char **fields, int max)
{
    int n = 0;
    for (char *save = NULL, *f = strtok_r(line, ",", &save); f && n < max; f = strtok_r(NULL, ",", &save)) {
        while (*f == ' ') f++;
        char *e = f + strlen(f);
        while (e > f && (e[-1] == ' ' || e[-1] == '\n' || e[-1] == '\r')) *--e = 0;
        if (*f) fields[n++] = f;
    }
    return n;
}

/* --json: the run and COMPUTE_REPORT.csv's rows as objects keyed by its header. */
static int scalesim_json(tpu_ctx *ctx, const char *dir, int layers, double wall, double cpu)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) return 2;
    cJSON_AddNumberToObject(o, "layers", layers);
    cJSON_AddStringToObject(o, "report_dir", dir);
    cJSON_AddNumberToObject(o, "wall_s", wall);
    cJSON_AddNumberToObject(o, "cpu_s", cpu);
    char path[4200];
    snprintf(path, sizeof path, "%s/COMPUTE_REPORT.csv", dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "tpusim scalesim: %s: cannot read\n", path);
        cJSON_Delete(o);
        return 2;
    }
    char head[4096], line[4096], *cols[64], *vals[64];
    int ncols = fgets(head, sizeof head, f) ? scalesim_fields(head, cols, 64) : 0;
    cJSON *rows = cJSON_AddArrayToObject(o, "compute_report");
    while (rows && fgets(line, sizeof line, f)) {
        int nv = scalesim_fields(line, vals, 64);
        cJSON *r = cJSON_CreateObject();
        for (int k = 0; r && k < nv && k < ncols; k++) {
            double d;
            if (cli_parse_num(vals[k], strlen(vals[k]), &d)) cJSON_AddNumberToObject(r, cols[k], d);
            else cJSON_AddStringToObject(r, cols[k], vals[k]);
        }
        cJSON_AddItemToArray(rows, r);
    }
    fclose(f);
    (void)ctx;
    return cli_print_json(o);
}

int cmd_scalesim(int argc, char **argv)
{
    tpu_scalesim_opts o = tpu_scalesim_opts_default();
    o.out_dir = "./results";
    int quiet = 0, trace = 0, json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (cli_is_help(a)) {
            scalesim_help(stdout);
            return 0;
        }
        if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) { quiet = 1; continue; }
        if (!strcmp(a, "--json")) { json = 1; continue; }
        if ((v = cli_opt_value(argc, argv, &i, "-c"))) { o.config_path = v; continue; }
        if ((v = cli_opt_value(argc, argv, &i, "-t"))) { o.topology_path = v; continue; }
        if ((v = cli_opt_value(argc, argv, &i, "-p"))) { o.out_dir = v; continue; }
        if ((v = cli_opt_value(argc, argv, &i, "-l"))) continue;
        if ((v = cli_opt_value(argc, argv, &i, "-s"))) {
            if (strcmp(v, "Y") && strcmp(v, "N")) {
                fprintf(stderr, "tpusim scalesim: -s takes Y or N, not '%s'\n", v);
                return 2;
            }
            trace = !strcmp(v, "Y");
            continue;
        }
        if ((v = cli_opt_value(argc, argv, &i, "-i"))) {
            if (!strcmp(v, "gemm")) o.gemm = 1;
            else if (!strcmp(v, "conv")) o.gemm = 0;
            else {
                fprintf(stderr, "tpusim scalesim: -i takes conv or gemm, not '%s'\n", v);
                return 2;
            }
            continue;
        }
        if (i < argc && (!strcmp(a, "-c") || !strcmp(a, "-t") || !strcmp(a, "-p") || !strcmp(a, "-i") ||
                         !strcmp(a, "-s") || !strcmp(a, "-l")))
            return 2;   /* cli_opt_value said the value is missing */
        fprintf(stderr, "tpusim scalesim: unknown option '%s' (see --help)\n", a);
        return 2;
    }
    if (!o.config_path) {
        fprintf(stderr, "tpusim scalesim: -c CONFIG is required (see --help)\n");
        return 2;
    }
    if (trace) fprintf(stderr, "tpusim scalesim: note: -s Y accepted, but SRAM/DRAM traces are not written\n");
    if (!quiet && !json) o.log = stdout;
    tpu_ctx *ctx = cli_ctx_new();
    if (!ctx) {
        fprintf(stderr, "tpusim scalesim: out of memory\n");
        return 1;
    }
    char *dir = NULL;
    int n = 0;
    struct timespec w0, w1;
    clock_gettime(CLOCK_MONOTONIC, &w0);
    /* CPU time of this thread: the simulation is single-threaded, and idle library thread pools (BLAS)
     * would otherwise add their spinning. */
    struct timespec c0, c1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    tpu_status st = tpu_scalesim_run(ctx, &o, &dir, &n);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    double cpu = (double)(c1.tv_sec - c0.tv_sec) + 1e-9 * (double)(c1.tv_nsec - c0.tv_nsec);
    clock_gettime(CLOCK_MONOTONIC, &w1);
    double wall = (double)(w1.tv_sec - w0.tv_sec) + 1e-9 * (double)(w1.tv_nsec - w0.tv_nsec);
    cli_print_warnings(ctx);
    int rc = 0;
    if (st != TPU_OK) {
        fprintf(stderr, "tpusim scalesim: %s\n", tpu_errmsg(ctx));
        rc = st == TPU_ERR_PARSE || st == TPU_ERR_IO || st == TPU_ERR_INVALID ? 2 : 1;
    } else if (json) {
        rc = scalesim_json(ctx, dir, n, wall, cpu);
    } else if (!quiet) {
        printf("%d layers in %.6f s (CPU %.6f s); reports in %s/\n", n, wall, cpu, dir);
    }
    tpu_free(dir);
    tpu_ctx_free(ctx);
    return rc;
}
