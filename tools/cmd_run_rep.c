/* cmd_run_rep.c — `tpusim run` on several devices (--replicas / --partitions, or a module compiled for more
 * than one device): every device runs the program with its own replica and partition id, collectives
 * between them; outputs per device. tools/cmd_run.c hands the command line over here. */
#include "cli.h"

#include <cJSON.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

enum { REP_MAXD = 4096 };

static int rep_mkdir_p(const char *dir)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0777) && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0777) && errno != EEXIST) return -1;
    return 0;
}

static void rep_summary(const tpu_tensor *t, const char *label)
{
    char shape[128];
    tpu_tensor_shape_str(t, shape, sizeof shape);
    int64_t n = tpu_tensor_count(t);
    double mn = INFINITY, mx = -INFINITY, sum = 0;
    int64_t nans = 0;
    for (int64_t k = 0; k < n; k++) {
        double v = tpu_tensor_get_f64(t, k);
        if (isnan(v)) {
            nans++;
            continue;
        }
        if (v < mn) mn = v;
        if (v > mx) mx = v;
        sum += v;
    }
    printf("  %-10s %-20s", label, shape);
    if (n == 0) {
        printf(" (empty)\n");
        return;
    }
    if (n == 1) {
        printf(" = %.8g\n", tpu_tensor_get_f64(t, 0));
        return;
    }
    printf(" min %-11.6g max %-11.6g mean %-11.6g", mn, mx, n > nans ? sum / (double)(n - nans) : NAN);
    if (nans) printf(" nan %lld", (long long)nans);
    printf(" [");
    for (int64_t k = 0; k < n && k < 3; k++) printf("%s%.5g", k ? ", " : "", tpu_tensor_get_f64(t, k));
    printf("%s]\n", n > 3 ? ", ..." : "");
}

static double rep_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int rep_same(const tpu_tensor *a, const tpu_tensor *b)
{
    if (tpu_tensor_dtype(a) != tpu_tensor_dtype(b) || tpu_tensor_nbytes(a) != tpu_tensor_nbytes(b)) return 0;
    return !memcmp(tpu_tensor_cdata(a), tpu_tensor_cdata(b), tpu_tensor_nbytes(a));
}

static int rep_find(char **names, int n, const char *want)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], want)) return i;
    return -1;
}

static int rep_positive(const char *opt, const char *v, int *out) { return cli_int32("run", opt, v, 1, REP_MAXD, out); }

int cmd_run_replicated(int argc, char **argv)
{
    const char *prog = NULL, *npz = NULL, *outdir = NULL, *chip = NULL;
    const char *files[1024];
    int nfiles = 0, random = 0, quiet = 0, vary = 0, replicas = 0, partitions = 0, json = 0;
    uint64_t seed = 1;
    tpu_run_opts opts = tpu_run_opts_default();
    for (int i = 1; i < argc; i++) {
        const char *v;
        if ((v = cli_opt_value(argc, argv, &i, "--inputs"))) {
            npz = v;
        } else if ((v = cli_opt_value(argc, argv, &i, "--out"))) {
            outdir = v;
        } else if ((v = cli_opt_value(argc, argv, &i, "--chip"))) {
            chip = v;
        } else if ((v = cli_opt_value(argc, argv, &i, "--replicas"))) {
            if (!rep_positive("--replicas", v, &replicas)) return 2;
        } else if ((v = cli_opt_value(argc, argv, &i, "--partitions"))) {
            if (!rep_positive("--partitions", v, &partitions)) return 2;
        } else if ((v = cli_opt_value(argc, argv, &i, "--seed"))) {
            if (!cli_u64("run", "--seed", v, &seed)) return 2;
        } else if ((v = cli_opt_value(argc, argv, &i, "--threads"))) {
            if (!cli_int32("run", "--threads", v, 0, 4096, &opts.threads)) return 2;
        } else if ((v = cli_opt_value(argc, argv, &i, "--max-steps"))) {
            if (!cli_int("run", "--max-steps", v, 1, INT64_MAX, &opts.max_steps)) return 2;
        } else if ((v = cli_opt_value(argc, argv, &i, "--timeout"))) {
            if (!cli_num("run", "--timeout", v, 1e-3, 1e9, &opts.max_seconds)) return 2;
        } else if ((v = cli_opt_value(argc, argv, &i, "--numerics"))) {
            if (!strcmp(v, "tpu")) opts.numerics = TPU_NUMERICS_TPU;
            else if (!strcmp(v, "exact")) opts.numerics = TPU_NUMERICS_EXACT;
            else { fprintf(stderr, "tpusim run: --numerics must be tpu or exact, got '%s'\n", v); return 2; }
        } else if (!strcmp(argv[i], "--random-inputs")) {
            random = 1;
        } else if (!strcmp(argv[i], "--per-device-seeds")) {
            vary = 1;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q")) {
            quiet = 1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "tpusim run: unknown option '%s' (see tpusim run --help)\n", argv[i]);
            return 2;
        } else if (!prog) {
            prog = argv[i];
        } else {
            if (nfiles == 1024) { fprintf(stderr, "tpusim run: too many input files\n"); return 2; }
            files[nfiles++] = argv[i];
        }
    }
    if (!prog) {
        fprintf(stderr, "tpusim run: no program given (see tpusim run --help)\n");
        return 2;
    }
    if ((npz != NULL) + (nfiles > 0) + random > 1) {
        fprintf(stderr, "tpusim run: give inputs one way: .npy files, --inputs FILE.npz or --random-inputs\n");
        return 2;
    }
    if (vary && !random) {
        fprintf(stderr, "tpusim run: --per-device-seeds goes with --random-inputs\n");
        return 2;
    }
    tpu_ctx *ctx = cli_ctx_new();
    if (!ctx) { fprintf(stderr, "tpusim run: out of memory\n"); return 2; }
    int rc = 0, n = 0, nin = 0, nout = 0, nnames = 0, nshared = 0;
    tpu_module *m = NULL;
    tpu_system *sys = NULL;
    tpu_tensor **shared = NULL;   /* inputs every device shares (.npy files, an .npz) */
    char **names = NULL;
    tpu_tensor ***ins = NULL, ***outs = NULL;   /* per device */
    int *own = NULL;                            /* ins[d] is device d's own array (random inputs) */
    double t0 = rep_now();
    if (tpu_module_load(ctx, prog, &m) != TPU_OK) {
        fprintf(stderr, "tpusim run: %s\n", tpu_errmsg(ctx));
        rc = 2;
        goto done;
    }
    cli_print_warnings(ctx);
    double t_parse = rep_now() - t0;
    /* devices: the module's counts when it names them, else the options */
    int64_t mr = tpu_module_replica_count(m), mp = tpu_module_num_partitions(m);
    int R = 0, P = 0;
    if (mr > 1 || mp > 1) {
        if ((replicas && replicas != mr) || (partitions && partitions != mp)) {
            if (replicas && !partitions && replicas == mr * mp) {
                /* --replicas N naming the device count of a partitioned module: fine */
            } else {
                fprintf(stderr, "tpusim run: %s is compiled for %lld replica%s x %lld partition%s (replica_count, "
                        "num_partitions in its header); --replicas/--partitions must agree or be left out\n",
                        prog, (long long)mr, mr == 1 ? "" : "s", (long long)mp, mp == 1 ? "" : "s");
                rc = 2;
                goto done;
            }
        }
        n = (int)(mr * mp);
    } else {
        n = (replicas ? replicas : 1) * (partitions ? partitions : 1);
        if (partitions) {
            R = replicas ? replicas : 1;
            P = partitions;
        }
    }
    if (n > REP_MAXD) {
        fprintf(stderr, "tpusim run: %d devices is more than %d\n", n, REP_MAXD);
        rc = 2;
        goto done;
    }
    char spec[512];
    if (chip) snprintf(spec, sizeof spec, "%d:%s", n, chip);
    else snprintf(spec, sizeof spec, "%d", n);
    if (tpu_system_new(ctx, spec, &sys) != TPU_OK || (R && tpu_system_set_split(ctx, sys, R, P) != TPU_OK)) {
        fprintf(stderr, "tpusim run: %s\n", tpu_errmsg(ctx));
        rc = 2;
        goto done;
    }
    ins = calloc((size_t)n, sizeof *ins);
    outs = calloc((size_t)n, sizeof *outs);
    own = calloc((size_t)n, sizeof *own);
    if (!ins || !outs || !own) { fprintf(stderr, "tpusim run: out of memory\n"); rc = 2; goto done; }
    tpu_status st = TPU_OK;
    if (random) {
        for (int d = 0; d < n && !st; d++) {
            if (d > 0 && !vary) {
                ins[d] = ins[0];
                continue;
            }
            int k = 0;
            st = tpu_random_inputs(ctx, m, seed + (vary ? (unsigned long long)d : 0), &ins[d], &k);
            if (!st) {
                own[d] = 1;
                nin = k;
            }
        }
    } else if (nfiles) {
        shared = calloc((size_t)nfiles, sizeof *shared);
        if (!shared) { fprintf(stderr, "tpusim run: out of memory\n"); rc = 2; goto done; }
        for (int i = 0; i < nfiles && !st; i++) {
            st = tpu_npy_load(ctx, files[i], &shared[i]);
            if (!st) nshared++;
        }
        nin = nshared;
        for (int d = 0; d < n; d++) ins[d] = shared;
    } else if (npz) {
        tpu_tensor **all = NULL;
        int nall = 0;
        st = tpu_npz_load_filtered(ctx, npz, cli_npz_params_filter, m, &all, &names, &nall);
        if (!st) {
            nnames = nall;
            nshared = nall;
            shared = all;
            /* members argK (every device) and argK_devD (device D); else archive order for every device */
            int named = 0, maxk = -1;
            for (int i = 0; i < nall; i++) {
                int k, dv, len = 0;
                if ((sscanf(names[i], "arg%d_dev%d%n", &k, &dv, &len) == 2 && !names[i][len]) ||
                    (sscanf(names[i], "arg%d%n", &k, &len) == 1 && !names[i][len])) {
                    named = 1;
                    if (k > maxk) maxk = k;
                }
            }
            if (!named) {
                nin = nall;
                for (int d = 0; d < n; d++) ins[d] = all;
            } else {
                nin = maxk + 1;
                for (int d = 0; d < n && rc == 0; d++) {
                    ins[d] = calloc((size_t)nin, sizeof **ins);
                    if (!ins[d]) { fprintf(stderr, "tpusim run: out of memory\n"); rc = 2; break; }
                    own[d] = 2;   /* our array of borrowed tensors */
                    for (int k = 0; k < nin; k++) {
                        char want[64];
                        snprintf(want, sizeof want, "arg%d_dev%d", k, d);
                        int at = rep_find(names, nall, want);
                        if (at < 0) {
                            snprintf(want, sizeof want, "arg%d", k);
                            at = rep_find(names, nall, want);
                        }
                        if (at < 0) {
                            fprintf(stderr, "tpusim run: %s has neither arg%d_dev%d nor arg%d (input %d of device %d)\n",
                                    npz, k, d, k, k, d);
                            rc = 2;
                            break;
                        }
                        ins[d][k] = all[at];
                    }
                }
                if (rc) goto done;
            }
        }
    } else if (tpu_module_num_params(m) > 0) {
        fprintf(stderr, "tpusim run: %s takes %d parameter%s: give .npy files, --inputs FILE.npz or --random-inputs\n",
                prog, tpu_module_num_params(m), tpu_module_num_params(m) == 1 ? "" : "s");
        rc = 2;
        goto done;
    }
    if (st) {
        fprintf(stderr, "tpusim run: %s\n", tpu_errmsg(ctx));
        rc = 2;
        goto done;
    }
    cli_progress *prog_line = cli_progress_start("tpusim run: running %s on %d devices", tpu_module_name(m), n);
    st = tpu_system_run(ctx, sys, m, &opts, ins, nin, outs, &nout);
    cli_progress_stop(prog_line);
    cli_print_warnings(ctx);
    if (st) {
        fprintf(stderr, "tpusim run: %s\n", tpu_errmsg(ctx));
        rc = 1;
        goto done;
    }
    tpu_system_stats s;
    tpu_system_last_stats(sys, &s);
    if (json) {
        cJSON *o = cJSON_CreateObject(), *devs = o ? cJSON_AddArrayToObject(o, "devices") : NULL;
        if (o) {
            cJSON_AddStringToObject(o, "program", prog);
            cJSON_AddStringToObject(o, "module", tpu_module_name(m));
            cJSON_AddStringToObject(o, "numerics", opts.numerics == TPU_NUMERICS_TPU ? "tpu" : "exact");
            cJSON_AddNumberToObject(o, "replicas", s.replicas);
            cJSON_AddNumberToObject(o, "partitions", s.partitions);
            cJSON_AddNumberToObject(o, "parse_s", t_parse);
            cJSON_AddNumberToObject(o, "run_s", s.run_s);
            cJSON_AddNumberToObject(o, "collectives", (double)s.collectives);
            cJSON_AddNumberToObject(o, "ici_s", s.ici_s);
            cJSON_AddNumberToObject(o, "ici_bytes", (double)s.ici_bytes);
        }
        for (int d = 0; devs && d < n; d++) {
            cJSON *dv = cJSON_CreateObject(), *arr = dv ? cJSON_AddArrayToObject(dv, "outputs") : NULL;
            if (dv) cJSON_AddNumberToObject(dv, "device", d);
            for (int i = 0; arr && i < nout; i++) {
                char name[32];
                snprintf(name, sizeof name, "out%d", i);
                cJSON_AddItemToArray(arr, cli_tensor_json(outs[d][i], name));
            }
            cJSON_AddItemToArray(devs, dv);
        }
        if (cli_print_json(o)) rc = 2;
    } else if (!quiet) {
        printf("%s: %d output%s on %d device%s (%d replica%s x %d partition%s), numerics %s, parse %.3f s, run %.3f s\n",
               prog, nout, nout == 1 ? "" : "s", n, n == 1 ? "" : "s", s.replicas, s.replicas == 1 ? "" : "s",
               s.partitions, s.partitions == 1 ? "" : "s", opts.numerics == TPU_NUMERICS_TPU ? "tpu" : "exact", t_parse,
               s.run_s);
        for (int i = 0; i < nout; i++) {
            if (i == 40 && nout > 44) {
                printf("  ... %d more\n", nout - 40);
                break;
            }
            int same = 1;
            for (int d = 1; d < n && same; d++) same = rep_same(outs[0][i], outs[d][i]);
            char label[48];
            if (same) {
                snprintf(label, sizeof label, "out%d", i);
                rep_summary(outs[0][i], label);
                if (n > 1) printf("  %-10s (the same on all %d devices)\n", "", n);
            } else {
                for (int d = 0; d < n; d++) {
                    if (d == 8 && n > 10) {
                        printf("  %-10s ... %d more devices\n", "", n - 8);
                        break;
                    }
                    snprintf(label, sizeof label, "out%d dev%d", i, d);
                    rep_summary(outs[d][i], label);
                }
            }
        }
        if (s.collectives) {
            printf("collectives per device: %lld (", (long long)s.collectives);
            const char *kn[6] = {"all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
                                 "collective-broadcast"};
            int64_t kc[6] = {s.all_reduce, s.all_gather, s.reduce_scatter, s.all_to_all, s.collective_permute,
                             s.collective_broadcast};
            int first = 1;
            for (int k = 0; k < 6; k++)
                if (kc[k]) {
                    printf("%s%lld %s", first ? "" : ", ", (long long)kc[k], kn[k]);
                    first = 0;
                }
            printf("); modelled ICI time %.3g us, %.3g MB sent per device (links of %s)\n", s.ici_s * 1e6,
                   (double)s.ici_bytes / 1e6, tpu_system_chip(sys));
        }
    }
    if (outdir) {
        int files_written = 0;
        for (int d = 0; d < n && rc == 0; d++) {
            char dir[4200];
            snprintf(dir, sizeof dir, "%s/dev%d", outdir, d);
            if (rep_mkdir_p(dir)) {
                fprintf(stderr, "tpusim run: cannot create %s: %s\n", dir, strerror(errno));
                rc = 2;
                break;
            }
            for (int i = 0; i < nout; i++) {
                char path[4300];
                snprintf(path, sizeof path, "%s/out%d.npy", dir, i);
                if (tpu_npy_save(ctx, path, outs[d][i]) != TPU_OK) {
                    fprintf(stderr, "tpusim run: %s\n", tpu_errmsg(ctx));
                    rc = 2;
                    break;
                }
                files_written++;
            }
        }
        if (!rc && !quiet && !json) printf("wrote %d file%s to %s/dev*/\n", files_written, files_written == 1 ? "" : "s", outdir);
    }
done:
    if (outs) tpu_system_outputs_free(outs, n, nout);
    for (int d = 0; ins && d < n; d++) {
        if (own[d] == 1) tpu_tensors_free(ins[d], nin);
        else if (own[d] == 2) free(ins[d]);
    }
    if (nfiles) {
        for (int i = 0; i < nshared; i++) tpu_tensor_free(shared[i]);
        free(shared);
    } else {
        tpu_tensors_free(shared, nshared);
    }
    tpu_names_free(names, nnames);
    free(ins);
    free(outs);
    free(own);
    tpu_system_free(sys);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
    return rc;
}
