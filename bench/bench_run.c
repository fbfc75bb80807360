/* bench_run.c — times tpu_run on one program, for bench/run_bench.py.
 *
 *   bench_run PROGRAM.hlo (--inputs FILE.npz | --random-inputs) [--numerics tpu|exact] [--reps N]
 *             [--warmup N] [--threads N] [--serve]
 *
 * Parses the program and reads the inputs once, runs it --warmup times untimed, then --reps times, and prints
 * one JSON line: {"wall": [...], "cpu": [...], "parse": s} — wall seconds and process CPU seconds (all
 * threads) of each timed run. Only tpu_run is timed: not parsing, input reading or freeing the outputs.
 *
 * --serve: after loading, prints {"ready": 1, "parse": s} and then answers each line of stdin, "tpu N" or
 * "exact N", with {"wall": [...], "cpu": [...]} for N runs in that mode ("quit" or end of input stops). The
 * process stays warm between requests the way the PJRT plugin's does, so run_bench.py interleaves these
 * runs with XLA:CPU's.
 * Build: see bench/README.md (run_bench.py builds it). */
#include "tpusim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double br_clock(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The --serve loop: one request per stdin line, one JSON line back. Returns non-zero on a failed run. */
static int br_serve(tpu_ctx *ctx, tpu_module *m, const tpu_run_opts *base, tpu_tensor **ins, int nin, double parse)
{
    printf("{\"ready\": 1, \"parse\": %.4f}\n", parse);
    fflush(stdout);
    char line[256], mode[32];
    while (fgets(line, sizeof line, stdin)) {
        int n = 1;
        if (sscanf(line, "%31s %d", mode, &n) < 1 || !strcmp(mode, "quit")) break;
        tpu_run_opts o = *base;
        o.numerics = !strcmp(mode, "exact") ? TPU_NUMERICS_EXACT : TPU_NUMERICS_TPU;
        printf("{\"wall\": [");
        double cpu[256];
        if (n > 256) n = 256;
        for (int r = 0; r < n; r++) {
            tpu_tensor **outs = NULL;
            int nout = 0;
            double w0 = br_clock(CLOCK_MONOTONIC), c0 = br_clock(CLOCK_PROCESS_CPUTIME_ID);
            if (tpu_run(ctx, m, &o, ins, nin, &outs, &nout)) {
                fprintf(stderr, "bench_run: %s\n", tpu_errmsg(ctx));
                return 1;
            }
            double w = br_clock(CLOCK_MONOTONIC) - w0;
            cpu[r] = br_clock(CLOCK_PROCESS_CPUTIME_ID) - c0;
            tpu_tensors_free(outs, nout);
            printf("%s%.6f", r ? ", " : "", w);
        }
        printf("], \"cpu\": [");
        for (int r = 0; r < n; r++) printf("%s%.6f", r ? ", " : "", cpu[r]);
        printf("]}\n");
        fflush(stdout);
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *prog = NULL, *npz = NULL;
    int random = 0, reps = 3, warmup = 1, serve = 0;
    tpu_run_opts opts = tpu_run_opts_default();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--inputs") && v) npz = argv[++i];
        else if (!strcmp(a, "--random-inputs")) random = 1;
        else if (!strcmp(a, "--serve")) serve = 1;
        else if (!strcmp(a, "--reps") && v) reps = atoi(argv[++i]);
        else if (!strcmp(a, "--warmup") && v) warmup = atoi(argv[++i]);
        else if (!strcmp(a, "--threads") && v) opts.threads = atoi(argv[++i]);
        else if (!strcmp(a, "--numerics") && v) {
            i++;
            if (!strcmp(v, "tpu")) opts.numerics = TPU_NUMERICS_TPU;
            else if (!strcmp(v, "exact")) opts.numerics = TPU_NUMERICS_EXACT;
            else { fprintf(stderr, "bench_run: --numerics tpu|exact\n"); return 2; }
        } else if (a[0] != '-' && !prog) prog = a;
        else { fprintf(stderr, "bench_run: bad argument '%s'\n", a); return 2; }
    }
    if (!prog || (!npz && !random)) {
        fprintf(stderr, "usage: bench_run PROGRAM.hlo (--inputs FILE.npz | --random-inputs) [--numerics tpu|exact] "
                        "[--reps N] [--warmup N] [--threads N]\n");
        return 2;
    }
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    tpu_tensor **ins = NULL;
    char **names = NULL;
    int nin = 0;
    double t0 = br_clock(CLOCK_MONOTONIC);
    if (tpu_module_load(ctx, prog, &m)) goto fail;
    double parse = br_clock(CLOCK_MONOTONIC) - t0;
    if (random) {
        if (tpu_random_inputs(ctx, m, 1, &ins, &nin)) goto fail;
    } else {
        tpu_tensor **raw;
        if (tpu_npz_load(ctx, npz, &raw, &names, &nin)) goto fail;
        /* members arg0, arg1, ... in parameter order */
        ins = calloc((size_t)(nin ? nin : 1), sizeof *ins);
        for (int i = 0; i < nin; i++) {
            char want[32];
            snprintf(want, sizeof want, "arg%d", i);
            for (int k = 0; k < nin; k++)
                if (!strcmp(names[k], want)) ins[i] = raw[k];
            if (!ins[i]) {
                fprintf(stderr, "bench_run: %s has no member %s\n", npz, want);
                return 1;
            }
        }
        free(raw);
    }
    if (serve) return br_serve(ctx, m, &opts, ins, nin, parse) ? 1 : 0;
    printf("{\"parse\": %.4f, \"wall\": [", parse);
    for (int r = 0; r < warmup + reps; r++) {
        tpu_tensor **outs = NULL;
        int nout = 0;
        double w0 = br_clock(CLOCK_MONOTONIC), c0 = br_clock(CLOCK_PROCESS_CPUTIME_ID);
        if (tpu_run(ctx, m, &opts, ins, nin, &outs, &nout)) goto fail;
        double w = br_clock(CLOCK_MONOTONIC) - w0, c = br_clock(CLOCK_PROCESS_CPUTIME_ID) - c0;
        tpu_tensors_free(outs, nout);
        if (r >= warmup) {
            static double cpu[1024];
            static int nc;
            printf("%s%.5f", r > warmup ? ", " : "", w);
            if (nc < 1024) cpu[nc++] = c;
            if (r == warmup + reps - 1) {
                printf("], \"cpu\": [");
                for (int k = 0; k < nc; k++) printf("%s%.5f", k ? ", " : "", cpu[k]);
                printf("]}\n");
            }
        }
        fflush(stdout);
    }
    tpu_tensors_free(ins, nin);
    tpu_names_free(names, nin);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
    return 0;
fail:
    fprintf(stderr, "bench_run: %s\n", tpu_errmsg(ctx));
    return 1;
}
