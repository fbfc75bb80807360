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

/* The inputs of every device: ins[d] (nin tensors) is shared (.npy files, an .npz), device d's own random
 * inputs (own[d] 1), or our array of tensors borrowed from `shared` (own[d] 2). */
typedef struct rep_inputs {
    tpu_tensor  **shared;
    int           nshared, from_files;
    char        **names;     /* .npz member names */
    int           nnames;
    tpu_tensor ***ins;
    int          *own;
    int           n, nin;
} rep_inputs;

/* The devices: the module's counts when it names them, else the options (*R, *P: an explicit split, 0 for
 * none). 0, or 2 after saying what is wrong. */
static int rep_devices(const cli_run_args *a, const tpu_module *m, int *n, int *R, int *P)
{
    int64_t mr = tpu_module_replica_count(m), mp = tpu_module_num_partitions(m);
    *R = *P = 0;
    if (mr > 1 || mp > 1) {
        /* --replicas N naming the device count of a partitioned module is fine */
        int agree = !(a->replicas && a->replicas != mr) && !(a->partitions && a->partitions != mp);
        if (!agree && !(a->replicas && !a->partitions && a->replicas == mr * mp)) {
            fprintf(stderr, "tpusim run: %s is compiled for %lld replica%s x %lld partition%s (replica_count, "
                    "num_partitions in its header); --replicas/--partitions must agree or be left out\n",
                    a->prog, (long long)mr, mr == 1 ? "" : "s", (long long)mp, mp == 1 ? "" : "s");
            return 2;
        }
        *n = (int)(mr * mp);
    } else {
        *n = (a->replicas ? a->replicas : 1) * (a->partitions ? a->partitions : 1);
        if (a->partitions) {
            *R = a->replicas ? a->replicas : 1;
            *P = a->partitions;
        }
    }
    if (*n > CLI_MAX_DEVICES) {
        fprintf(stderr, "tpusim run: %d devices is more than %d\n", *n, CLI_MAX_DEVICES);
        return 2;
    }
    return 0;
}

/* --inputs FILE.npz: members argK (every device) and argK_devD (device D); else archive order for every
 * device. 0, or 2 after saying what is wrong. */
static int rep_npz_inputs(tpu_ctx *ctx, const cli_run_args *a, const tpu_module *m, rep_inputs *I)
{
    tpu_tensor **all = NULL;
    int nall = 0;
    if (tpu_npz_load_filtered(ctx, a->npz, cli_npz_params_filter, (void *)m, &all, &I->names, &nall) != TPU_OK) {
        fprintf(stderr, "tpusim run: %s\n", tpu_errmsg(ctx));
        return 2;
    }
    I->nnames = I->nshared = nall;
    I->shared = all;
    int named = 0, maxk = -1;
    for (int i = 0; i < nall; i++) {
        int k, dv, len = 0;
        if ((sscanf(I->names[i], "arg%d_dev%d%n", &k, &dv, &len) == 2 && !I->names[i][len]) ||
            (sscanf(I->names[i], "arg%d%n", &k, &len) == 1 && !I->names[i][len])) {
            named = 1;
            if (k > maxk) maxk = k;
        }
    }
    I->nin = named ? maxk + 1 : nall;
    for (int d = 0; d < I->n; d++) {
        if (!named) {
            I->ins[d] = all;
            continue;
        }
        I->ins[d] = calloc((size_t)I->nin, sizeof **I->ins);
        if (!I->ins[d]) { fprintf(stderr, "tpusim run: out of memory\n"); return 2; }
        I->own[d] = 2;
        for (int k = 0; k < I->nin; k++) {
            char want[64];
            snprintf(want, sizeof want, "arg%d_dev%d", k, d);
            int at = rep_find(I->names, nall, want);
            if (at < 0) {
                snprintf(want, sizeof want, "arg%d", k);
                at = rep_find(I->names, nall, want);
            }
            if (at < 0) {
                fprintf(stderr, "tpusim run: %s has neither arg%d_dev%d nor arg%d (input %d of device %d)\n", a->npz, k,
                        d, k, k, d);
                return 2;
            }
            I->ins[d][k] = all[at];
        }
    }
    return 0;
}

/* Every device's inputs, one of three ways (or none for a program without parameters). 0, or 2 after saying
 * what is wrong. */
static int rep_load_inputs(tpu_ctx *ctx, const cli_run_args *a, const tpu_module *m, rep_inputs *I)
{
    I->ins = calloc((size_t)I->n, sizeof *I->ins);
    I->own = calloc((size_t)I->n, sizeof *I->own);
    if (!I->ins || !I->own) { fprintf(stderr, "tpusim run: out of memory\n"); return 2; }
    if (a->npz) return rep_npz_inputs(ctx, a, m, I);
    tpu_status st = TPU_OK;
    if (a->random) {
        for (int d = 0; d < I->n && !st; d++) {
            if (d > 0 && !a->vary) {
                I->ins[d] = I->ins[0];
                continue;
            }
            int k = 0;
            st = tpu_random_inputs(ctx, m, a->seed + (a->vary ? (unsigned long long)d : 0), &I->ins[d], &k);
            if (!st) {
                I->own[d] = 1;
                I->nin = k;
            }
        }
    } else if (a->nfiles) {
        I->from_files = 1;
        I->shared = calloc((size_t)a->nfiles, sizeof *I->shared);
        if (!I->shared) { fprintf(stderr, "tpusim run: out of memory\n"); return 2; }
        for (int i = 0; i < a->nfiles && !st; i++) {
            st = tpu_npy_load(ctx, a->files[i], &I->shared[i]);
            if (!st) I->nshared++;
        }
        I->nin = I->nshared;
        for (int d = 0; d < I->n; d++) I->ins[d] = I->shared;
    } else if (tpu_module_num_params(m) > 0) {
        fprintf(stderr, "tpusim run: %s takes %d parameter%s: give .npy files, --inputs FILE.npz or --random-inputs\n",
                a->prog, tpu_module_num_params(m), tpu_module_num_params(m) == 1 ? "" : "s");
        return 2;
    }
    if (st) {
        fprintf(stderr, "tpusim run: %s\n", tpu_errmsg(ctx));
        return 2;
    }
    return 0;
}

static void rep_inputs_free(rep_inputs *I)
{
    for (int d = 0; I->ins && d < I->n; d++) {
        if (I->own[d] == 1) tpu_tensors_free(I->ins[d], I->nin);
        else if (I->own[d] == 2) free(I->ins[d]);
    }
    if (I->from_files) {
        for (int i = 0; i < I->nshared; i++) tpu_tensor_free(I->shared[i]);
        free(I->shared);
    } else {
        tpu_tensors_free(I->shared, I->nshared);
    }
    tpu_names_free(I->names, I->nnames);
    free(I->ins);
    free(I->own);
}

/* --json: the run's numbers and every device's outputs. 0, or 2 when out of memory. */
static int rep_print_json(const cli_run_args *a, const tpu_module *m, const tpu_system_stats *s, double t_parse,
                          tpu_tensor ***outs, int n, int nout)
{
    cJSON *o = cJSON_CreateObject(), *devs = o ? cJSON_AddArrayToObject(o, "devices") : NULL;
    if (o) {
        cJSON_AddStringToObject(o, "program", a->prog);
        cJSON_AddStringToObject(o, "module", tpu_module_name(m));
        cJSON_AddStringToObject(o, "numerics", a->opts.numerics == TPU_NUMERICS_TPU ? "tpu" : "exact");
        cJSON_AddNumberToObject(o, "replicas", s->replicas);
        cJSON_AddNumberToObject(o, "partitions", s->partitions);
        cJSON_AddNumberToObject(o, "parse_s", t_parse);
        cJSON_AddNumberToObject(o, "run_s", s->run_s);
        cJSON_AddNumberToObject(o, "collectives", (double)s->collectives);
        cJSON_AddNumberToObject(o, "ici_s", s->ici_s);
        cJSON_AddNumberToObject(o, "ici_bytes", (double)s->ici_bytes);
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
    return cli_print_json(o) ? 2 : 0;
}

static void rep_summary(const tpu_tensor *t, const char *label)
{
    printf("  %-10s ", label);
    cli_tensor_summary(t, 20, 11, 3, " ");
}

/* One output: once when every device has the same, else per device (the first 8 of many). */
static void rep_print_output(tpu_tensor ***outs, int n, int i)
{
    int same = 1;
    for (int d = 1; d < n && same; d++) same = rep_same(outs[0][i], outs[d][i]);
    char label[48];
    if (same) {
        snprintf(label, sizeof label, "out%d", i);
        rep_summary(outs[0][i], label);
        if (n > 1) printf("  %-10s (the same on all %d devices)\n", "", n);
        return;
    }
    for (int d = 0; d < n; d++) {
        if (d == 8 && n > 10) {
            printf("  %-10s ... %d more devices\n", "", n - 8);
            break;
        }
        snprintf(label, sizeof label, "out%d dev%d", i, d);
        rep_summary(outs[d][i], label);
    }
}

static void rep_print_collectives(const tpu_system_stats *s, const tpu_system *sys)
{
    printf("collectives per device: %lld (", (long long)s->collectives);
    const char *kn[6] = {"all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
                         "collective-broadcast"};
    int64_t kc[6] = {s->all_reduce, s->all_gather, s->reduce_scatter, s->all_to_all, s->collective_permute,
                     s->collective_broadcast};
    int first = 1;
    for (int k = 0; k < 6; k++)
        if (kc[k]) {
            printf("%s%lld %s", first ? "" : ", ", (long long)kc[k], kn[k]);
            first = 0;
        }
    printf("); modelled ICI time %.3g us, %.3g MB sent per device (links of %s)\n", s->ici_s * 1e6,
           (double)s->ici_bytes / 1e6, tpu_system_chip(sys));
}

static void rep_print_text(const cli_run_args *a, const tpu_system_stats *s, const tpu_system *sys, double t_parse,
                           tpu_tensor ***outs, int n, int nout)
{
    printf("%s: %d output%s on %d device%s (%d replica%s x %d partition%s), numerics %s, parse %.3f s, run %.3f s\n",
           a->prog, nout, nout == 1 ? "" : "s", n, n == 1 ? "" : "s", s->replicas, s->replicas == 1 ? "" : "s",
           s->partitions, s->partitions == 1 ? "" : "s", a->opts.numerics == TPU_NUMERICS_TPU ? "tpu" : "exact", t_parse,
           s->run_s);
    for (int i = 0; i < nout; i++) {
        if (i == 40 && nout > 44) {
            printf("  ... %d more\n", nout - 40);
            break;
        }
        rep_print_output(outs, n, i);
    }
    if (s->collectives) rep_print_collectives(s, sys);
}

/* --out DIR: DIR/devD/outI.npy. 0, or 2 after saying what failed. */
static int rep_write_outputs(tpu_ctx *ctx, const cli_run_args *a, tpu_tensor ***outs, int n, int nout)
{
    int files_written = 0;
    for (int d = 0; d < n; d++) {
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/dev%d", a->outdir, d);
        if (tpu_mkdirs(NULL, dir, 0777)) {
            fprintf(stderr, "tpusim run: cannot create %s: %s\n", dir, strerror(errno));
            return 2;
        }
        for (int i = 0; i < nout; i++) {
            char path[4300];
            snprintf(path, sizeof path, "%s/out%d.npy", dir, i);
            if (tpu_npy_save(ctx, path, outs[d][i]) != TPU_OK) {
                fprintf(stderr, "tpusim run: %s\n", tpu_errmsg(ctx));
                return 2;
            }
            files_written++;
        }
    }
    if (!a->quiet && !a->json) printf("wrote %d file%s to %s/dev*/\n", files_written, files_written == 1 ? "" : "s", a->outdir);
    return 0;
}

int cmd_run_replicated(int argc, char **argv)
{
    cli_run_args a;
    int rc = cli_run_parse_args(argc, argv, &a, NULL);
    if (rc) return rc;
    if (!a.prog) {
        fprintf(stderr, "tpusim run: no program given (see tpusim run --help)\n");
        return 2;
    }
    tpu_ctx *ctx = cli_ctx_new();
    if (!ctx) { fprintf(stderr, "tpusim run: out of memory\n"); return 2; }
    tpu_module *m = NULL;
    tpu_system *sys = NULL;
    rep_inputs I = {0};
    tpu_tensor ***outs = NULL;
    int R = 0, P = 0, nout = 0;
    double t0 = cli_now();
    if (tpu_module_load(ctx, a.prog, &m) != TPU_OK) {
        fprintf(stderr, "tpusim run: %s\n", tpu_errmsg(ctx));
        rc = 2;
        goto done;
    }
    cli_print_warnings(ctx);
    double t_parse = cli_now() - t0;
    if ((rc = rep_devices(&a, m, &I.n, &R, &P))) goto done;
    char spec[512];
    if (a.chip) snprintf(spec, sizeof spec, "%d:%s", I.n, a.chip);
    else snprintf(spec, sizeof spec, "%d", I.n);
    if (tpu_system_new(ctx, spec, &sys) != TPU_OK || (R && tpu_system_set_split(ctx, sys, R, P) != TPU_OK)) {
        fprintf(stderr, "tpusim run: %s\n", tpu_errmsg(ctx));
        rc = 2;
        goto done;
    }
    if ((rc = rep_load_inputs(ctx, &a, m, &I))) goto done;
    outs = calloc((size_t)I.n, sizeof *outs);
    if (!outs) { fprintf(stderr, "tpusim run: out of memory\n"); rc = 2; goto done; }
    cli_progress *prog_line = cli_progress_start("tpusim run: running %s on %d devices", tpu_module_name(m), I.n);
    tpu_status st = tpu_system_run(ctx, sys, m, &a.opts, I.ins, I.nin, outs, &nout);
    cli_progress_stop(prog_line);
    cli_print_warnings(ctx);
    if (st) {
        fprintf(stderr, "tpusim run: %s\n", tpu_errmsg(ctx));
        rc = 1;
        goto done;
    }
    tpu_system_stats s;
    tpu_system_last_stats(sys, &s);
    if (a.json) rc = rep_print_json(&a, m, &s, t_parse, outs, I.n, nout);
    else if (!a.quiet) rep_print_text(&a, &s, sys, t_parse, outs, I.n, nout);
    if (a.outdir && !rc) rc = rep_write_outputs(ctx, &a, outs, I.n, nout);
done:
    if (outs) tpu_system_outputs_free(outs, I.n, nout);
    free(outs);
    rep_inputs_free(&I);
    tpu_system_free(sys);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
    return rc;
}
