/* cmd_scalesim.c — `tpusim scalesim`: SCALE-Sim's command line (-c -t -i -p), SCALE-Sim's reports. */
#include "cli.h"
#include <stdio.h>
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
            "  -h, --help    this help\n"
            "\n"
            "exit status: 0 reports written, 1 simulation failed or unsupported feature, 2 bad usage or input\n");
}

int cmd_scalesim(int argc, char **argv)
{
    tpu_scalesim_opts o = tpu_scalesim_opts_default();
    o.out_dir = "./results";
    int quiet = 0, trace = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (cli_is_help(a)) {
            scalesim_help(stdout);
            return 0;
        }
        if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) { quiet = 1; continue; }
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
    if (!quiet) o.log = stdout;
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
    } else if (!quiet) {
        printf("%d layers in %.6f s (CPU %.6f s); reports in %s/\n", n, wall, cpu, dir);
    }
    tpu_free(dir);
    tpu_ctx_free(ctx);
    return rc;
}
