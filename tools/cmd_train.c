/* cmd_train.c — `tpusim train`: trains a STEP_DIR (docs/step_dir.md) data-parallel on a simulated slice,
 * then says how fast it would run there; or the learning-rate finder (--lr-find). */
#include "cli.h"

#include <cJSON.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void train_usage(FILE *f)
{
    fprintf(f,
            "usage: tpusim train STEP_DIR --steps N [--slice v3-8] [--data DATA] [--steps-per-exec K]\n"
            "                    [--model-dir DIR] [--resume] [options]\n"
            "       tpusim train STEP_DIR --lr-find [--lr-min 1e-6] [--lr-max 1] [--steps 100] [--lr-out FILE.json]\n"
            "\n"
            "Trains the model in STEP_DIR (signature.json, step/grad/apply/eval.hlo, init_state.npz; see\n"
            "docs/step_dir.md) on a simulated TPU slice, data-parallel as PyTorch/XLA's xm.optimizer_step does:\n"
            "each replica (a device of the slice) runs grad.hlo on its shard of the global batch with TPU\n"
            "numerics, an all-reduce on the replicated runtime averages the gradients (its time from the ICI\n"
            "model), and apply.hlo updates the state, which stays on the device between steps. Batches come\n"
            "from a prefetching host pipeline whose measured rate feeds the timing model. At the end: the\n"
            "predicted step time on the slice, MXU utilization, the advisor's top pointers, and with\n"
            "--model-dir the profile (profile.html, trace.json) and memory viewer (memory.html).\n"
            "\n"
            "training:\n"
            "  --steps N              train until the step count reaches N (with --resume: the remaining steps);\n"
            "                         also the total of a one_cycle schedule whose spec leaves it null\n"
            "  --slice S              slice whose devices are the replicas (default v3-8: 8 replicas)\n"
            "  --cores 1|ALL          train on 1 device or on all of the slice's (default all), as on a real board;\n"
            "                         the linear scaling rule of the signature scales the learning rate\n"
            "  --steps-per-exec K     K steps per host call (Keras steps_per_execution): their metrics are\n"
            "                         reported together and the timing model pays the host launch once per K\n"
            "  --seed S               data order seed (default: the signature's data.seed)\n"
            "  --numerics tpu|exact   TPU numerics (bf16 MXU passes, default) or full f32\n"
            "data:\n"
            "  --data PATH            training set: a directory of .npz shards, a .tpuds file or a directory of\n"
            "                         them (default: the signature's data.train, relative to STEP_DIR)\n"
            "  --eval-data PATH|none  eval set (default: the signature's data.eval)\n"
            "  --cached               take the signature's data.cached sets (the packed .tpuds format)\n"
            "  --prefetch Q           batches the input pipeline prepares ahead (default 8)\n"
            "  --input-delay-ms D     extra host time per global batch: emulates a slow input pipeline (its\n"
            "                         measured rate drops and the report says when training is input-bound)\n"
            "  --input-rate R         samples/s to assume for the host pipeline instead of the measured rate\n"
            "evaluation, checkpoints, output:\n"
            "  --eval-every E         evaluate on the eval set every E steps (always at the end)\n"
            "  --model-dir DIR        write DIR/state.npz + progress.json (checkpoints, atomic), metrics.jsonl,\n"
            "                         profile.html, trace.json, memory.html\n"
            "  --save-every C         checkpoint every C steps (always at the end)\n"
            "  --resume               continue DIR's checkpoint exactly (same data order, same result)\n"
            "  --overwrite            start over in a DIR that holds a checkpoint, replacing it (without --resume\n"
            "                         or --overwrite, training into such a DIR is refused)\n"
            "  --log-every L          a progress line every L steps (default: 20 per run)\n"
            "  --no-progress          no progress bar even on a terminal (plain lines)\n"
            "  --quiet                no progress output at all\n"
            "  --json                 print the result as a JSON object (progress stays on stderr)\n"
            "learning-rate finder (docs/step_dir.md section 8):\n"
            "  --lr-find              from init_state, steps with the learning rate growing geometrically from\n"
            "                         --lr-min (1e-6) to --lr-max (1) over --steps (100); stops when the loss\n"
            "                         diverges; writes --lr-out (default STEP_DIR/lr_find.json) and beside it\n"
            "                         .jsonl and .svg, and prints the suggested rate\n"
            "  --lr-min X, --lr-max X, --lr-out FILE.json\n"
            "\n"
            "exit status: 0 done, 1 a program failed while training, 2 bad command line, STEP_DIR or data.\n");
}

static int train_num(const char *opt, const char *v, double lo, double *out) { return cli_num("train", opt, v, lo, 1e15, out); }

/* counts up to 2^53: a step count that large is already years of training, and it stays exact in a double */
static int train_int(const char *opt, const char *v, long long lo, int64_t *out)
{
    return cli_int("train", opt, v, lo, (int64_t)1 << 53, out);
}

static void train_fmt_time(char *b, size_t n, double s)
{
    if (s >= 1) snprintf(b, n, "%.3f s", s);
    else if (s >= 1e-3) snprintf(b, n, "%.3f ms", s * 1e3);
    else snprintf(b, n, "%.1f us", s * 1e6);
}

/* The first `top` numbered pointers of the advice text ("1. ...", continuation lines indented). */
static void train_print_advice(const char *a, int top)
{
    int item = 0;
    while (a && *a) {
        const char *e = strchr(a, '\n');
        size_t len = e ? (size_t)(e - a) : strlen(a);
        if (a[0] >= '1' && a[0] <= '9') item++;
        if (item > top) break;
        if (item) printf("  %.*s\n", (int)len, a);
        a += len + (e ? 1 : 0);
    }
    if (!item) printf("  (none)\n");
}

/* An error of this process ("process R: " first when several run). */
static void train_err(const tpu_train_opts *o, const char *what, const char *msg)
{
    if (o->dist) fprintf(stderr, "tpusim train: process %d: %s%s\n", tpu_dist_rank(o->dist), what, msg);
    else fprintf(stderr, "tpusim train: %s%s\n", what, msg);
}

static void train_print_result(tpu_trainer *tr, const tpu_train_opts *o, const tpu_train_result *rr)
{
    const tpu_train_result r = *rr;
    char t1[32], t2[32], t3[32];
    printf("trained %lld steps on %s: %d replica%s, global batch %lld; %.1f steps/s on this host (%.2f s in steps)\n",
           (long long)r.steps, o->slice, r.replicas, r.replicas == 1 ? "" : "s", (long long)r.global_batch, r.steps_per_s,
           r.wall_s);
    if (o->dist) printf("processes: %d (mpirun), %d replicas each; collectives between them over MPI\n",
                        tpu_dist_size(o->dist), r.replicas / tpu_dist_size(o->dist));
    printf("final training loss %.4f", r.loss);
    const char *en;
    double ev;
    for (int k = 0; tpu_trainer_eval_result(tr, k, &en, &ev); k++) {
        if (!strcmp(en, "accuracy")) printf("%s test accuracy %.2f%%", k ? "," : ";", 100 * ev);
        else printf("%s test %s %.4g", k ? "," : ";", en, ev);
    }
    printf("\n");
    train_fmt_time(t1, sizeof t1, r.sim_step_s);
    train_fmt_time(t2, sizeof t2, r.sim_program_s);
    train_fmt_time(t3, sizeof t3, r.sim_allreduce_s);
    printf("predicted step time on %s: %s = device program %s (host launch once per %d step%s) + gradient all-reduce %s "
           "(ICI)\n", o->slice, t1, t2, o->steps_per_exec, o->steps_per_exec == 1 ? "" : "s", t3);
    printf("MXU utilization %.2f%%; bound: %s; input pipeline %.3g samples/s measured%s\n", 100 * r.mxu_utilization, r.bound,
           r.input_samples_per_s, r.input_bound ? " -- INPUT-BOUND: the TPU would wait for the host" : " (not input-bound)");
    printf("advice:\n");
    train_print_advice(r.advice, 3);
    if (r.metrics_jsonl) {
        printf("wrote %s, %s/state.npz", r.metrics_jsonl, o->model_dir);
        if (r.profile_html) printf(", %s", r.profile_html);
        if (r.trace_json) printf(", %s", r.trace_json);
        if (r.memory_html) printf(", %s", r.memory_html);
        printf("\n");
    }
}

/* Trains, then reports (process 0 of several). Returns the exit status. */
/* The result as one JSON object (--json): what train_print_result says, for scripts. */
static int train_print_json(tpu_trainer *tr, const tpu_train_opts *o, const tpu_train_result *rr)
{
    const tpu_train_result r = *rr;
    cJSON *j = cJSON_CreateObject();
    if (j) {
        cJSON_AddStringToObject(j, "slice", o->slice);
        cJSON_AddNumberToObject(j, "steps", (double)r.steps);
        cJSON_AddNumberToObject(j, "replicas", r.replicas);
        cJSON_AddNumberToObject(j, "global_batch", (double)r.global_batch);
        cJSON_AddNumberToObject(j, "loss", r.loss);
        const char *en;
        double ev;
        cJSON *eo = cJSON_AddObjectToObject(j, "eval");
        for (int k = 0; eo && tpu_trainer_eval_result(tr, k, &en, &ev); k++) cJSON_AddNumberToObject(eo, en, ev);
        cJSON_AddNumberToObject(j, "wall_s", r.wall_s);
        cJSON_AddNumberToObject(j, "steps_per_s", r.steps_per_s);
        cJSON_AddNumberToObject(j, "sim_step_s", r.sim_step_s);
        cJSON_AddNumberToObject(j, "sim_program_s", r.sim_program_s);
        cJSON_AddNumberToObject(j, "sim_allreduce_s", r.sim_allreduce_s);
        cJSON_AddNumberToObject(j, "mxu_utilization", r.mxu_utilization);
        cJSON_AddStringToObject(j, "bound", r.bound ? r.bound : "");
        cJSON_AddNumberToObject(j, "input_samples_per_s", r.input_samples_per_s);
        cJSON_AddBoolToObject(j, "input_bound", r.input_bound);
        cJSON_AddStringToObject(j, "advice", r.advice ? r.advice : "");
        cJSON *files = cJSON_AddArrayToObject(j, "files");
        const char *fs[] = {r.metrics_jsonl, r.profile_html, r.trace_json, r.memory_html};
        for (int k = 0; files && k < 4; k++)
            if (fs[k]) cJSON_AddItemToArray(files, cJSON_CreateString(fs[k]));
    }
    return cli_print_json(j);
}

static int train_run(tpu_ctx *ctx, const char *dir, const tpu_train_opts *o, int json)
{
    int lead = !o->dist || tpu_dist_rank(o->dist) == 0;
    tpu_trainer *tr = NULL;
    tpu_status st = tpu_trainer_new(ctx, dir, o, &tr);
    if (st) {
        train_err(o, "", tpu_errmsg(ctx));
        return 2;
    }
    cli_print_warnings(ctx);
    int rc = 0;
    if (tpu_trainer_step(tr) >= o->steps) {
        if (lead)
            printf("nothing to do: %s's checkpoint is at step %lld of --steps %lld\n", o->model_dir ? o->model_dir : dir,
                   (long long)tpu_trainer_step(tr), (long long)o->steps);
        tpu_trainer_free(tr);
        return 0;
    }
    st = tpu_trainer_train(ctx, tr, 0);
    if (st) {
        train_err(o, "", tpu_errmsg(ctx));
        rc = st == TPU_ERR_INVALID || st == TPU_ERR_IO || st == TPU_ERR_PARSE ? 2 : 1;
    }
    tpu_train_result r;
    if (!rc && lead && tpu_trainer_finish(ctx, tr, &r) != TPU_OK) {
        train_err(o, "the report: ", tpu_errmsg(ctx));
        rc = 1;
    }
    if (!rc && lead) rc = json ? train_print_json(tr, o, &r) : (train_print_result(tr, o, &r), 0);
    tpu_trainer_free(tr);
    return rc;
}

int cmd_train(int argc, char **argv)
{
    tpu_train_opts o = tpu_train_opts_default();
    const char *dir = NULL, *lr_out = NULL;
    int lr_find = 0, quiet = 0, no_bar = 0, json = 0;
    double lr_min = 1e-6, lr_max = 1.0, d;
    int have_steps = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        const char *a = argv[i];
        static const char *const valued[] = {"--steps-per-exec", "--steps", "--slice", "--chip", "--cores", "--data",
                                             "--eval-data", "--model-dir", "--seed", "--eval-every", "--save-every",
                                             "--log-every", "--prefetch", "--numerics", "--input-delay-ms", "--input-rate",
                                             "--lr-min", "--lr-max", "--lr-out"};
        for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++)
            if (!strcmp(a, valued[k]) && i + 1 >= argc) {
                fprintf(stderr, "tpusim train: option %s needs a value\n", a);
                return 2;
            }
#define OPT(name) ((v = cli_opt_value(argc, argv, &i, name)) != NULL)
        if (cli_is_help(a)) {
            train_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--resume")) {
            o.resume = 1;
        } else if (!strcmp(a, "--overwrite")) {
            o.overwrite = 1;
        } else if (!strcmp(a, "--cached")) {
            o.cached = 1;
        } else if (!strcmp(a, "--lr-find")) {
            lr_find = 1;
        } else if (!strcmp(a, "--quiet")) {
            quiet = 1;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--no-progress")) {
            no_bar = 1;
        } else if (OPT("--steps-per-exec")) {
            if (!cli_int32("train", "--steps-per-exec", v, 1, 1000000, &o.steps_per_exec)) return 2;
        } else if (OPT("--steps")) {
            if (!train_int("--steps", v, 1, &o.steps)) return 2;
            have_steps = 1;
        } else if (OPT("--slice") || OPT("--chip")) {
            o.slice = v;
        } else if (OPT("--cores")) {
            if (!cli_int32("train", "--cores", v, 1, 100000, &o.cores)) return 2;
        } else if (OPT("--data")) {
            o.data = v;
        } else if (OPT("--eval-data")) {
            o.eval_data = v;
        } else if (OPT("--model-dir")) {
            o.model_dir = v;
        } else if (OPT("--seed")) {
            if (!train_int("--seed", v, 0, &o.seed)) return 2;
        } else if (OPT("--eval-every")) {
            if (!train_int("--eval-every", v, 0, &o.eval_every)) return 2;
        } else if (OPT("--save-every")) {
            if (!train_int("--save-every", v, 0, &o.save_every)) return 2;
        } else if (OPT("--log-every")) {
            if (!train_int("--log-every", v, 0, &o.log_every)) return 2;
        } else if (OPT("--prefetch")) {
            if (!cli_int32("train", "--prefetch", v, 1, 4096, &o.prefetch)) return 2;
        } else if (OPT("--numerics")) {
            if (!strcmp(v, "tpu")) o.numerics = TPU_NUMERICS_TPU;
            else if (!strcmp(v, "exact")) o.numerics = TPU_NUMERICS_EXACT;
            else {
                fprintf(stderr, "tpusim train: --numerics is tpu or exact ('%s')\n", v);
                return 2;
            }
        } else if (OPT("--input-delay-ms")) {
            if (!train_num("--input-delay-ms", v, 0, &d)) return 2;
            o.input_delay_s = d / 1000;
        } else if (OPT("--input-rate")) {
            if (!train_num("--input-rate", v, 1e-9, &d)) return 2;
            o.input_rate = d;
        } else if (OPT("--lr-min")) {
            if (!train_num("--lr-min", v, 1e-30, &lr_min)) return 2;
        } else if (OPT("--lr-max")) {
            if (!train_num("--lr-max", v, 1e-30, &lr_max)) return 2;
        } else if (OPT("--lr-out")) {
            lr_out = v;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "tpusim train: unknown option '%s' (see tpusim train --help)\n", a);
            return 2;
        } else if (!dir) {
            dir = a;
        } else {
            fprintf(stderr, "tpusim train: one STEP_DIR at a time ('%s' is extra)\n", a);
            return 2;
        }
#undef OPT
    }
    if (!dir) {
        fprintf(stderr, "tpusim train: no STEP_DIR given\n\n");
        train_usage(stderr);
        return 2;
    }
    if (!lr_find && !have_steps) {
        fprintf(stderr, "tpusim train: --steps N is required (e.g. --steps 165)\n");
        return 2;
    }
    if (o.resume && o.overwrite) {
        fprintf(stderr, "tpusim train: give --resume (continue the checkpoint) or --overwrite (start over), not both\n");
        return 2;
    }
    o.log = quiet ? NULL : stderr;
    o.progress_bar = !quiet && !no_bar && isatty(fileno(stderr));
    tpu_ctx *ctx = cli_ctx_new();
    if (!ctx) return 2;
    int rc = 0;
    if (lr_find && tpu_dist_launched()) {
        fprintf(stderr, "tpusim train: --lr-find runs in one process, not under mpirun\n");
        tpu_ctx_free(ctx);
        return 2;
    }
    if (lr_find) {
        char buf[4096];
        if (!lr_out) {
            snprintf(buf, sizeof buf, "%s/lr_find.json", dir);
            lr_out = buf;
        }
        double sug = 0;
        tpu_status st = tpu_train_lr_find(ctx, dir, &o, lr_min, lr_max, lr_out, &sug);
        if (st) {
            fprintf(stderr, "tpusim train: %s\n", tpu_errmsg(ctx));
            rc = st == TPU_ERR_INVALID || st == TPU_ERR_IO || st == TPU_ERR_PARSE ? 2 : 1;
        } else if (sug > 0) {
            printf("suggested learning rate: %.3g\n", sug);
        }
        tpu_ctx_free(ctx);
        return rc;
    }
    tpu_dist *dist = NULL;
    if (tpu_dist_launched()) {   /* mpirun: this process is one host of the slice */
        if (tpu_dist_new(ctx, &dist)) {
            fprintf(stderr, "tpusim train: %s\n", tpu_errmsg(ctx));
            tpu_ctx_free(ctx);
            return 2;
        }
        o.dist = dist;
        if (tpu_dist_rank(dist) != 0) {   /* process 0 logs and reports */
            o.log = NULL;
            o.progress_bar = 0;
        }
    }
    rc = train_run(ctx, dir, &o, json);
    tpu_dist_free(dist, rc);   /* after a failure: MPI_Abort(rc), so that no process waits for this one */
    tpu_ctx_free(ctx);
    return rc;
}
