/* cmd_bench.c — `tpusim bench matmul`: the classic NxN matmul benchmark, repeated COUNT times, as a TPU
 * would run it (the timing model) beside what this host's CPU really does (tpu_run, measured).
 *
 * What is simulated: one device of the slice runs a while loop of COUNT matmuls C = A·B (the program is
 * printed with --print-program). warm = the modelled step: one program launch plus COUNT matmuls. cold adds
 * what a first call pays before that: copying A and B to the device over the host link (the chip table's
 * host bandwidth) and compiling the program. For the compile we use the time tpusim itself takes to verify,
 * compile and model this program, measured here: it does the work XLA's TPU compiler does (layouts, fusion,
 * buffer assignment) in a simpler way, so it is a lower bound on the real compile time, stated as such.
 *
 * What is measured: the host runs the single matmul with tpu_run (TPU numerics: one bf16 MXU pass per
 * product at default precision) --host-runs times; the best run gives the host's TFLOP/s and COUNT runs are
 * extrapolated from it, never run. */
#include "cli.h"

#include <cJSON.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void bench_usage(FILE *f)
{
    fprintf(f,
            "usage: tpusim bench matmul --chip SLICE [--n N] [--count COUNT] [options]\n"
            "\n"
            "The classic NxN matmul benchmark: C = A·B repeated COUNT times. Prints the simulated TPU TFLOP/s\n"
            "(one device of SLICE: warm, and cold with the input transfer and compile) beside the host CPU's real\n"
            "TFLOP/s for the same work, measured by running the matmul with TPU numerics.\n"
            "\n"
            "options:\n"
            "  --chip NAME        slice or generation (v2-8, v3-8, v4-8, v5e, ...); required\n"
            "  --n N              matrix size (default 8192)\n"
            "  --count COUNT      matmuls per call (default 100)\n"
            "  --dtype T          f32 (default) or bf16\n"
            "  --host-runs R      host runs of one matmul to measure (default 3 for N <= 2048, else 1);\n"
            "                     0 skips the host measurement\n"
            "  --print-program    print the simulated program (HLO) and exit\n"
            "  --json             print a JSON object (simulated and measured times and TFLOP/s)\n"
            "\n"
            "exit status: 0 done, 2 bad command line or a failure.\n");
}

/* HLO text of COUNT matmuls in a while loop (count > 0), or of one matmul (count == 0). */
static char *bench_program(int64_t n, const char *dt, int count)
{
    size_t cap = 4096;
    char *s = malloc(cap);
    if (!s) return NULL;
    if (count == 0) {
        snprintf(s, cap,
                 "HloModule bench_matmul_once\n\n"
                 "ENTRY main {\n"
                 "  a = %s[%lld,%lld]{1,0} parameter(0)\n"
                 "  b = %s[%lld,%lld]{1,0} parameter(1)\n"
                 "  ROOT c = %s[%lld,%lld]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                 "}\n",
                 dt, (long long)n, (long long)n, dt, (long long)n, (long long)n, dt, (long long)n, (long long)n);
        return s;
    }
    char t[64];
    snprintf(t, sizeof t, "%s[%lld,%lld]{1,0}", dt, (long long)n, (long long)n);
    snprintf(s, cap,
             "HloModule bench_matmul\n\n"
             "cond {\n"
             "  p = (s32[], %s, %s, %s) parameter(0)\n"
             "  i = s32[] get-tuple-element(p), index=0\n"
             "  k = s32[] constant(%d)\n"
             "  ROOT lt = pred[] compare(i, k), direction=LT\n"
             "}\n\n"
             "body {\n"
             "  p = (s32[], %s, %s, %s) parameter(0)\n"
             "  i = s32[] get-tuple-element(p), index=0\n"
             "  a = %s get-tuple-element(p), index=1\n"
             "  b = %s get-tuple-element(p), index=2\n"
             "  one = s32[] constant(1)\n"
             "  next = s32[] add(i, one)\n"
             "  c = %s dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
             "  ROOT r = (s32[], %s, %s, %s) tuple(next, a, b, c)\n"
             "}\n\n"
             "ENTRY main {\n"
             "  a = %s parameter(0)\n"
             "  b = %s parameter(1)\n"
             "  zero = s32[] constant(0)\n"
             "  c0 = %s broadcast(%s), dimensions={}\n"
             "  init = (s32[], %s, %s, %s) tuple(zero, a, b, c0)\n"
             "  w = (s32[], %s, %s, %s) while(init), condition=cond, body=body\n"
             "  ROOT c = %s get-tuple-element(w), index=3\n"
             "}\n",
             t, t, t, count, t, t, t, t, t, t, t, t, t, t, t, t, !strcmp(dt, "bf16") ? "bf16[] constant(0)" : "f32[] constant(0)",
             t, t, t, t, t, t, t);
    return s;
}

static void bench_fmt_time(char *b, size_t n, double s)
{
    if (s >= 1) snprintf(b, n, "%.3f s", s);
    else if (s >= 1e-3) snprintf(b, n, "%.3f ms", s * 1e3);
    else snprintf(b, n, "%.2f us", s * 1e6);
}

/* Text output, unless --json (then the object below holds the figures). */
#define BPRINTF(...) (json ? 0 : printf(__VA_ARGS__))

static int bench_matmul(int argc, char **argv)
{
    const char *chip = NULL, *dt = "f32";
    int64_t n = 8192;
    int count = 100, host_runs = -1, print = 0, json = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (cli_is_help(argv[i])) {
            bench_usage(stdout);
            return 0;
        } else if ((v = cli_opt_value(argc, argv, &i, "--chip"))) {
            chip = v;
        } else if ((v = cli_opt_value(argc, argv, &i, "--n"))) {
            if (!cli_int("bench matmul", "--n", v, 1, 1 << 20, &n)) return 2;
        } else if ((v = cli_opt_value(argc, argv, &i, "--count"))) {
            if (!cli_int32("bench matmul", "--count", v, 1, 1000000000, &count)) return 2;
        } else if ((v = cli_opt_value(argc, argv, &i, "--dtype"))) {
            if (strcmp(v, "f32") && strcmp(v, "bf16")) {
                fprintf(stderr, "tpusim bench matmul: --dtype must be f32 or bf16 ('%s')\n", v);
                return 2;
            }
            dt = v;
        } else if ((v = cli_opt_value(argc, argv, &i, "--host-runs"))) {
            if (!cli_int32("bench matmul", "--host-runs", v, 0, 1000, &host_runs)) return 2;
        } else if (!strcmp(argv[i], "--print-program")) {
            print = 1;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else {
            fprintf(stderr, "tpusim bench matmul: unknown argument '%s' (see tpusim bench matmul --help)\n", argv[i]);
            return 2;
        }
    }
    if (!chip && !print) {
        fprintf(stderr, "tpusim bench matmul: --chip is required (e.g. --chip v2-8)\n");
        bench_usage(stderr);
        return 2;
    }
    if (host_runs < 0) host_runs = n <= 2048 ? 3 : 1;
    char *text = bench_program(n, dt, count);
    if (!text) return 2;
    if (print) {
        fputs(text, stdout);
        free(text);
        return 0;
    }
    tpu_ctx *ctx = cli_ctx_new();
    tpu_module *m = NULL, *once = NULL;
    tpu_profile *p = NULL;
    tpu_chip *c = NULL;
    int rc = 0;
    double flops1 = 2.0 * (double)n * (double)n * (double)n, total = flops1 * count;
    if (!ctx) { free(text); return 2; }
    if (tpu_chip_get(ctx, chip, &c) != TPU_OK) {
        fprintf(stderr, "tpusim bench matmul: %s\n", tpu_errmsg(ctx));
        rc = 2;
        goto done;
    }
    /* the simulated TPU: compile (timed) and model */
    double t0 = cli_now();
    tpu_profile_opts o = tpu_profile_opts_default();
    o.chip = chip;
    if (tpu_module_parse(ctx, text, strlen(text), "bench_matmul.hlo", &m) != TPU_OK ||
        tpu_profile_program(ctx, m, &o, &p) != TPU_OK) {
        fprintf(stderr, "tpusim bench matmul: %s\n", tpu_errmsg(ctx));
        rc = 2;
        goto done;
    }
    double compile_s = cli_now() - t0;
    double warm = tpu_profile_step_time(p);
    int chips = tpu_chip_num_chips(c), devices = tpu_profile_devices(p);
    int64_t esize = !strcmp(dt, "bf16") ? 2 : 4;
    double host_bw = 0;
    {
        /* host link bytes/s per chip, from the chip table (docs/chips.md) via the chip's JSON description;
         * the profile's infeed model uses the same figure */
        char *cj = NULL;
        size_t len = 0;
        FILE *mf = open_memstream(&cj, &len);
        if (mf && tpu_chip_print(ctx, c, mf, 1) == TPU_OK) {
            fclose(mf);
            mf = NULL;
            const char *k = strstr(cj, "\"host_bw\"");
            if (k && (k = strchr(k, ':'))) {
                k += strspn(k + 1, " \t") + 1;
                if (!cli_parse_num(k, strcspn(k, ",}\n \t"), &host_bw)) host_bw = 0;
            }
        }
        if (mf) fclose(mf);
        free(cj);
    }
    double xfer = host_bw > 0 ? 2.0 * (double)(n * n * esize) / host_bw : 0;
    double cold = warm + compile_s + xfer;
    char tw[32], tc[32], tx[32], tk[32], tm[32];
    bench_fmt_time(tw, sizeof tw, warm);
    bench_fmt_time(tc, sizeof tc, cold);
    bench_fmt_time(tx, sizeof tx, xfer);
    bench_fmt_time(tk, sizeof tk, compile_s);
    bench_fmt_time(tm, sizeof tm, warm / count);
    BPRINTF("tpusim bench matmul: C = A·B with %s[%lld,%lld] operands, %d times (%.4g TFLOP of work)\n\n", dt, (long long)n,
           (long long)n, count, total / 1e12);
    BPRINTF("simulated %s, one device (the slice has %d chip%s, %d device%s; each would run its own copy):\n",
           tpu_chip_name(c), chips, chips == 1 ? "" : "s", devices, devices == 1 ? "" : "s");
    BPRINTF("  per matmul        %12s   %8.2f TFLOP/s\n", tm, warm > 0 ? flops1 * count / warm / 1e12 : 0);
    BPRINTF("  warm              %12s   %8.2f TFLOP/s   one launch + %d matmuls, modelled\n", tw,
           warm > 0 ? total / warm / 1e12 : 0, count);
    BPRINTF("  cold              %12s   %8.2f TFLOP/s   warm + compile + input copy:\n", tc, cold > 0 ? total / cold / 1e12 : 0);
    BPRINTF("                    compile %s (tpusim's own compile of this program, measured: a lower bound on\n"
           "                    XLA's); A and B to the device %s over the host link\n", tk, tx);
    BPRINTF("  MXU utilization   %11.1f%%   bound: %s\n", 100 * tpu_profile_mxu_utilization(p), tpu_profile_bound(p));
    cJSON *jo = json ? cJSON_CreateObject() : NULL;
    if (jo) {
        cJSON_AddStringToObject(jo, "chip", tpu_chip_name(c));
        cJSON_AddStringToObject(jo, "dtype", dt);
        cJSON_AddNumberToObject(jo, "n", (double)n);
        cJSON_AddNumberToObject(jo, "count", count);
        cJSON_AddNumberToObject(jo, "flops", total);
        cJSON_AddNumberToObject(jo, "warm_s", warm);
        cJSON_AddNumberToObject(jo, "cold_s", cold);
        cJSON_AddNumberToObject(jo, "compile_s", compile_s);
        cJSON_AddNumberToObject(jo, "input_copy_s", xfer);
        cJSON_AddNumberToObject(jo, "warm_tflops", warm > 0 ? total / warm / 1e12 : 0);
        cJSON_AddNumberToObject(jo, "cold_tflops", cold > 0 ? total / cold / 1e12 : 0);
        cJSON_AddNumberToObject(jo, "mxu_utilization", tpu_profile_mxu_utilization(p));
        cJSON_AddStringToObject(jo, "bound", tpu_profile_bound(p));
    }
    /* the host CPU, measured */
    if (host_runs > 0) {
        char *t1 = bench_program(n, dt, 0);
        tpu_tensor **in = NULL, **out = NULL;
        int nin = 0, nout = 0;
        double best = 0, first = 0;
        int ran = 0;
        if (!t1 || tpu_module_parse(ctx, t1, strlen(t1), "bench_matmul_once.hlo", &once) != TPU_OK ||
            tpu_random_inputs(ctx, once, 1, &in, &nin) != TPU_OK) {
            fprintf(stderr, "tpusim bench matmul: host run: %s\n", tpu_errmsg(ctx));
            rc = 2;
        } else {
            tpu_run_opts ro = tpu_run_opts_default();
            for (int r = 0; r < host_runs; r++) {
                double s = cli_now();
                cli_progress *pl = cli_progress_start("tpusim bench matmul: host run %d of %d", r + 1, host_runs);
                tpu_status hst = tpu_run(ctx, once, &ro, in, nin, &out, &nout);
                cli_progress_stop(pl);
                if (hst != TPU_OK) {
                    fprintf(stderr, "tpusim bench matmul: host run: %s\n", tpu_errmsg(ctx));
                    rc = 2;
                    break;
                }
                double e = cli_now() - s;
                for (int k = 0; k < nout; k++) tpu_tensor_free(out[k]);
                tpu_free(out);
                out = NULL;
                if (!ran || e < best) best = e;
                if (!ran) first = e;
                ran++;
            }
        }
        for (int k = 0; k < nin; k++) tpu_tensor_free(in[k]);
        tpu_free(in);
        free(t1);
        if (ran) {
            long threads = sysconf(_SC_NPROCESSORS_ONLN);
            char tb[32], te[32], tf[32];
            bench_fmt_time(tb, sizeof tb, best);
            bench_fmt_time(tf, sizeof tf, first);
            bench_fmt_time(te, sizeof te, best * count);
            BPRINTF("\nhost CPU (%ld hardware thread%s), measured: %d run%s of one matmul, first %s, best %s\n", threads,
                   threads == 1 ? "" : "s", ran, ran == 1 ? "" : "s", tf, tb);
            BPRINTF("  per matmul        %12s   %8.4f TFLOP/s   (tpu_run, TPU numerics)\n", tb, flops1 / best / 1e12);
            BPRINTF("  all %-13d %12s   %8.4f TFLOP/s   %d x the best run: extrapolated, not run\n", count, te,
                   flops1 / best / 1e12, count);
            if (warm > 0) BPRINTF("\nsimulated TPU device vs this CPU: %.3gx (warm), %.3gx (cold)\n", best * count / warm, best * count / cold);
            if (jo) {
                cJSON_AddNumberToObject(jo, "host_runs", ran);
                cJSON_AddNumberToObject(jo, "host_best_s", best);
                cJSON_AddNumberToObject(jo, "host_tflops", flops1 / best / 1e12);
                cJSON_AddNumberToObject(jo, "host_extrapolated_s", best * count);
            }
        }
    }
    if (json && cli_print_json(jo)) rc = 2;
done:
    free(text);
    tpu_profile_free(p);
    tpu_module_free(m);
    tpu_module_free(once);
    tpu_chip_free(c);
    tpu_ctx_free(ctx);
    return rc;
}

#undef BPRINTF

int cmd_bench(int argc, char **argv)
{
    if (argc < 2 || cli_is_help(argv[1])) {
        fprintf(argc < 2 ? stderr : stdout, "usage: tpusim bench matmul --chip SLICE [--n N] [--count COUNT]\n"
                                            "benchmarks: matmul (tpusim bench matmul --help)\n");
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "matmul")) return bench_matmul(argc - 1, argv + 1);
    fprintf(stderr, "tpusim bench: unknown benchmark '%s' (known: matmul)\n", argv[1]);
    return 2;
}
