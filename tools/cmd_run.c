/* cmd_run.c — `tpusim run`: execute an HLO program on the CPU with TPU numerics. */
#include "cli.h"

#include <cJSON.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static void run_usage(FILE *f)
{
    fprintf(f,
            "usage: tpusim run PROGRAM.hlo [IN0.npy IN1.npy ...] [options]\n"
            "\n"
            "Runs the entry computation of PROGRAM.hlo on the CPU the way a TPU computes it and prints a summary of\n"
            "the results. Inputs are given one .npy per entry parameter (in parameter order; a tuple parameter takes\n"
            "one .npy per leaf), or as an .npz, or generated.\n"
            "\n"
            "options:\n"
            "  --inputs FILE.npz      inputs from an archive: members arg0, arg1, ..., or named like the\n"
            "                         parameters (x or x.1 for parameter x.1; a member of the wrong shape or a\n"
            "                         parameter without a member is named in the error), or else in archive order\n"
            "  --random-inputs        deterministic random inputs: floats uniform in [-1,1), integers in [0,8)\n"
            "  --seed N               seed for --random-inputs (default 1)\n"
            "  --numerics tpu|exact   tpu (default): dot/convolution operands rounded to bf16 per their precision,\n"
            "                         f32 accumulation, bf16 subnormals flushed; exact: full f32 dots/convs like\n"
            "                         XLA:CPU at HIGHEST precision\n"
            "  --out DIR              write the results as DIR/out0.npy, DIR/out1.npy, ... (a tuple result is\n"
            "                         flattened in order)\n"
            "  --threads N            CPU threads (default: all cores)\n"
            "  --max-steps N          stop (exit 1) after running N instructions, loop iterations' included: a\n"
            "                         program from elsewhere whose while loop never ends cannot hang (default:\n"
            "                         no limit)\n"
            "  --timeout SECONDS      stop (exit 1) after this much wall time (default: no limit)\n"
            "  --json                 print a JSON object: the outputs' shapes, statistics and first values, times\n"
            "  --quiet                print nothing but errors\n"
            "\n"
            "several devices (docs/runtime.md):\n"
            "  --replicas N           run N replicas, each a device with its own replica-id, with collectives\n"
            "                         between them (a module naming replica_count / num_partitions runs on that\n"
            "                         many devices without this option; one naming neither runs N devices as\n"
            "                         partitions if it reads partition-id or has channel_id collectives)\n"
            "  --partitions P         devices = replicas x partitions\n"
            "  --chip SLICE           chip whose ICI links model the collectives' time (default v4)\n"
            "  inputs                 .npy files, --inputs FILE.npz members argK and --random-inputs give every\n"
            "                         device the same inputs; members argK_devD give device D its own (argK\n"
            "                         fills in for devices without one); --per-device-seeds gives device D the\n"
            "                         random inputs of seed SEED+D\n"
            "  outputs                --out DIR writes DIR/dev{D}/out{K}.npy; the summary shows device 0 and\n"
            "                         says whether every device got the same, then the collectives run and\n"
            "                         their modelled ICI time\n"
            "\n"
            "exit status: 0 ran, 1 the program failed to run (unsupported op, bad inputs), 2 bad command line or\n"
            "unreadable program.\n");
}

/* The parameter member k of an archive stands for: arg<i> (every member so named), else the parameter it is
 * named like (every member so named), else its position. */
static int run_member_param(const tpu_module *m, char **names, int nin, int k, int by)
{
    if (by == 0) {
        int i, len = 0;
        return sscanf(names[k], "arg%d%n", &i, &len) == 1 && !names[k][len] && i >= 0 ? i : -1;
    }
    return by == 1 ? cli_param_named(m, names[k]) : k;
}

/* Puts an .npz's members in parameter order (ins and names together); says which member is wrong, missing or
 * extra and returns 1 when they do not make up the parameters. */
static int run_order_members(const tpu_module *m, const char *npz, tpu_tensor **ins, char **names, int nin)
{
    int np = tpu_module_num_params(m), by = 2;
    for (int rule = 0; rule < 2 && by == 2; rule++) {
        int all = nin > 0;
        for (int k = 0; k < nin && all; k++) all = run_member_param(m, names, nin, k, rule) >= 0;
        if (all) by = rule;
    }
    if (by == 2) return 0;   /* archive order; tpu_run checks count and shapes */
    tpu_tensor **t = calloc((size_t)(np ? np : 1), sizeof *t);
    char **nm = calloc((size_t)(np ? np : 1), sizeof *nm);
    int bad = !t || !nm;
    for (int k = 0; k < nin && !bad; k++) {
        int i = run_member_param(m, names, nin, k, by);
        if (i >= np) {
            fprintf(stderr, "tpusim run: %s: member '%s': %s takes %d parameter%s\n", npz, names[k], tpu_module_name(m),
                    np, np == 1 ? "" : "s");
            bad = 1;
        } else if (t[i]) {
            fprintf(stderr, "tpusim run: %s: members '%s' and '%s' both stand for parameter %d (%s)\n", npz, nm[i],
                    names[k], i, tpu_module_param_name(m, i));
            bad = 1;
        } else {
            t[i] = ins[k], nm[i] = names[k];
        }
    }
    for (int i = 0; i < np && !bad && nin == np; i++)
        if (!t[i]) bad = 1;
    if (!bad && nin != np) bad = 1;
    if (bad && t && nm && nin < np)
        for (int i = 0; i < np; i++)
            if (!t[i]) {
                fprintf(stderr, "tpusim run: %s has no member for parameter %d (%s; name a member '%s' or 'arg%d')\n", npz,
                        i, tpu_module_param_name(m, i), tpu_module_param_name(m, i), i);
                break;
            }
    if (!bad)
        for (int i = 0; i < np; i++) ins[i] = t[i], names[i] = nm[i];
    free(t);
    free(nm);
    return bad;
}

static int run_positive(const char *opt, const char *v, int *out)
{
    return cli_int32("run", opt, v, 1, CLI_MAX_DEVICES, out);
}

int cli_run_parse_args(int argc, char **argv, cli_run_args *a, int *help)
{
    memset(a, 0, sizeof *a);
    a->seed = 1;
    a->opts = tpu_run_opts_default();
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (help && cli_is_help(argv[i])) {
            *help = 1;
            return 0;
        } else if ((v = cli_opt_value(argc, argv, &i, "--inputs"))) {
            a->npz = v;
        } else if ((v = cli_opt_value(argc, argv, &i, "--out"))) {
            a->outdir = v;
        } else if ((v = cli_opt_value(argc, argv, &i, "--chip"))) {
            a->chip = v;
        } else if ((v = cli_opt_value(argc, argv, &i, "--replicas"))) {
            if (!run_positive("--replicas", v, &a->replicas)) return 2;
        } else if ((v = cli_opt_value(argc, argv, &i, "--partitions"))) {
            if (!run_positive("--partitions", v, &a->partitions)) return 2;
        } else if ((v = cli_opt_value(argc, argv, &i, "--seed"))) {
            if (!cli_u64("run", "--seed", v, &a->seed)) return 2;
        } else if ((v = cli_opt_value(argc, argv, &i, "--threads"))) {
            if (!cli_int32("run", "--threads", v, 0, 4096, &a->opts.threads)) return 2;
        } else if ((v = cli_opt_value(argc, argv, &i, "--max-steps"))) {
            if (!cli_int("run", "--max-steps", v, 1, INT64_MAX, &a->opts.max_steps)) return 2;
        } else if ((v = cli_opt_value(argc, argv, &i, "--timeout"))) {
            if (!cli_num("run", "--timeout", v, 1e-3, 1e9, &a->opts.max_seconds)) return 2;
        } else if ((v = cli_opt_value(argc, argv, &i, "--numerics"))) {
            if (!strcmp(v, "tpu")) a->opts.numerics = TPU_NUMERICS_TPU;
            else if (!strcmp(v, "exact")) a->opts.numerics = TPU_NUMERICS_EXACT;
            else { fprintf(stderr, "tpusim run: --numerics must be tpu or exact, got '%s'\n", v); return 2; }
        } else if (!strcmp(argv[i], "--random-inputs")) {
            a->random = 1;
        } else if (!strcmp(argv[i], "--per-device-seeds")) {
            a->vary = 1;
        } else if (!strcmp(argv[i], "--json")) {
            a->json = 1;
        } else if (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q")) {
            a->quiet = 1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "tpusim run: unknown option '%s' (see tpusim run --help)\n", argv[i]);
            return 2;
        } else if (!a->prog) {
            a->prog = argv[i];
        } else {
            if (a->nfiles == 1024) { fprintf(stderr, "tpusim run: too many input files\n"); return 2; }
            a->files[a->nfiles++] = argv[i];
        }
    }
    if ((a->npz != NULL) + (a->nfiles > 0) + a->random > 1) {
        fprintf(stderr, "tpusim run: give inputs one way: .npy files, --inputs FILE.npz or --random-inputs\n");
        return 2;
    }
    if (a->vary && !a->random) {
        fprintf(stderr, "tpusim run: --per-device-seeds goes with --random-inputs\n");
        return 2;
    }
    return 0;
}

/* Inputs for one device (.npy files, an .npz, random, or none for a program without parameters); *from_files:
 * ins is our array of tensors. 0, or 2 after saying what is wrong. */
static int run_load_inputs(tpu_ctx *ctx, const cli_run_args *a, const tpu_module *m, tpu_tensor ***ins, int *nin,
                           char ***names, int *nnames, int *from_files)
{
    tpu_status st = TPU_OK;
    if (a->random) {
        st = tpu_random_inputs(ctx, m, a->seed, ins, nin);
    } else if (a->npz) {
        st = tpu_npz_load_filtered(ctx, a->npz, cli_npz_params_filter, (void *)m, ins, names, nin);
        *nnames = *nin;
        if (!st && run_order_members(m, a->npz, *ins, *names, *nin)) return 2;
    } else if (a->nfiles) {
        *from_files = 1;
        *ins = calloc((size_t)a->nfiles, sizeof **ins);
        if (!*ins) { fprintf(stderr, "tpusim run: out of memory\n"); return 2; }
        for (int i = 0; i < a->nfiles && !st; i++) {
            st = tpu_npy_load(ctx, a->files[i], &(*ins)[i]);
            if (!st) (*nin)++;
        }
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

/* --json: the run's numbers and its outputs (with their files under --out). 0, or 2 when out of memory. */
static int run_print_json(const cli_run_args *a, const tpu_module *m, double t_parse, double t_run, tpu_tensor **outs,
                          int nout)
{
    cJSON *o = cJSON_CreateObject(), *arr = o ? cJSON_AddArrayToObject(o, "outputs") : NULL;
    if (o) {
        cJSON_AddStringToObject(o, "program", a->prog);
        cJSON_AddStringToObject(o, "module", tpu_module_name(m));
        cJSON_AddStringToObject(o, "numerics", a->opts.numerics == TPU_NUMERICS_TPU ? "tpu" : "exact");
        cJSON_AddNumberToObject(o, "parse_s", t_parse);
        cJSON_AddNumberToObject(o, "run_s", t_run);
    }
    for (int i = 0; arr && i < nout; i++) {
        char name[32];
        snprintf(name, sizeof name, "out%d", i);
        cJSON *e = cli_tensor_json(outs[i], name);
        if (e && a->outdir) {
            char path[4200];
            snprintf(path, sizeof path, "%s/out%d.npy", a->outdir, i);
            cJSON_AddStringToObject(e, "file", path);
        }
        cJSON_AddItemToArray(arr, e);
    }
    return cli_print_json(o) ? 2 : 0;
}

static void run_print_text(const cli_run_args *a, double t_parse, double t_run, tpu_tensor **outs, int nout)
{
    printf("%s: %d output%s (numerics %s), parse %.3f s, run %.3f s\n", a->prog, nout, nout == 1 ? "" : "s",
           a->opts.numerics == TPU_NUMERICS_TPU ? "tpu" : "exact", t_parse, t_run);
    for (int i = 0; i < nout; i++) {
        if (i == 40 && nout > 44) {
            printf("  ... %d more\n", nout - 40);
            break;
        }
        printf("  out%-3d ", i);
        cli_tensor_summary(outs[i], 24, 12, 4, "  ");
    }
}

/* --out DIR: DIR/outI.npy. 0, or 2 after saying what failed. */
static int run_write_outputs(tpu_ctx *ctx, const cli_run_args *a, tpu_tensor **outs, int nout)
{
    if (tpu_mkdirs(NULL, a->outdir, 0777)) {
        fprintf(stderr, "tpusim run: cannot create %s: %s\n", a->outdir, strerror(errno));
        return 2;
    }
    for (int i = 0; i < nout; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/out%d.npy", a->outdir, i);
        if (tpu_npy_save(ctx, path, outs[i]) != TPU_OK) {
            fprintf(stderr, "tpusim run: %s\n", tpu_errmsg(ctx));
            return 2;
        }
    }
    if (!a->quiet && !a->json) printf("wrote %d file%s to %s/\n", nout, nout == 1 ? "" : "s", a->outdir);
    return 0;
}

int cmd_run(int argc, char **argv)
{
    for (int i = 1; i < argc && !cli_is_help(argv[i]); i++)   /* several devices: cmd_run_rep.c */
        if (!strncmp(argv[i], "--replicas", 10) || !strncmp(argv[i], "--partitions", 12) ||
            !strncmp(argv[i], "--chip", 6) || !strcmp(argv[i], "--per-device-seeds"))
            return cmd_run_replicated(argc, argv);
    cli_run_args a;
    int help = 0, rc = cli_run_parse_args(argc, argv, &a, &help);
    if (rc) return rc;
    if (help) {
        run_usage(stdout);
        return 0;
    }
    if (!a.prog) {
        run_usage(stderr);
        return 2;
    }
    tpu_ctx *ctx = cli_ctx_new();
    if (!ctx) { fprintf(stderr, "tpusim run: out of memory\n"); return 2; }
    tpu_module *m = NULL;
    tpu_tensor **ins = NULL, **outs = NULL;
    char **names = NULL;
    int nin = 0, nout = 0, nnames = 0, from_files = 0;
    double t0 = cli_now();
    if (tpu_module_load(ctx, a.prog, &m) != TPU_OK) {
        fprintf(stderr, "tpusim run: %s\n", tpu_errmsg(ctx));
        rc = 2;
        goto done;
    }
    cli_print_warnings(ctx);
    if (tpu_module_verify(ctx, m) != TPU_OK) {   /* before any input is read for it */
        fprintf(stderr, "tpusim run: %s\n", tpu_errmsg(ctx));
        rc = 1;
        goto done;
    }
    if (tpu_module_replica_count(m) * tpu_module_num_partitions(m) > 1) {   /* compiled for several devices */
        tpu_module_free(m);
        tpu_ctx_free(ctx);
        return cmd_run_replicated(argc, argv);
    }
    double t_parse = cli_now() - t0;
    if ((rc = run_load_inputs(ctx, &a, m, &ins, &nin, &names, &nnames, &from_files))) goto done;
    double t1 = cli_now();
    cli_progress *prog_line = cli_progress_start("tpusim run: running %s", tpu_module_name(m));
    tpu_status st = tpu_run(ctx, m, &a.opts, ins, nin, &outs, &nout);
    cli_progress_stop(prog_line);
    double t_run = cli_now() - t1;
    if (st) {
        fprintf(stderr, "tpusim run: %s\n", tpu_errmsg(ctx));
        rc = 1;
        goto done;
    }
    if (a.json) rc = run_print_json(&a, m, t_parse, t_run, outs, nout);
    else if (!a.quiet) run_print_text(&a, t_parse, t_run, outs, nout);
    if (a.outdir && !rc) rc = run_write_outputs(ctx, &a, outs, nout);
done:
    if (from_files) {
        for (int i = 0; i < nin; i++) tpu_tensor_free(ins[i]);
        free(ins);
    } else {
        tpu_tensors_free(ins, nin);
    }
    tpu_names_free(names, nnames);
    tpu_tensors_free(outs, nout);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
    return rc;
}
