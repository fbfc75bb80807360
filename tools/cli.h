/* cli.h — subcommands of the tpusim program. Each lives in tools/cmd_<name>.c, uses only the public API
 * (include/tpusim.h), parses its own options, prints its own --help, and returns the process exit code. */
#ifndef TPU_CLI_H
#define TPU_CLI_H

#include "tpusim.h"

typedef int (*cli_cmd_fn)(int argc, char **argv);   /* argv[0] is the subcommand name */

int cmd_run(int argc, char **argv);
int cmd_run_replicated(int argc, char **argv);   /* tpusim run on several devices (cmd_run_rep.c) */
/* tpusim run's command line, one parser for one device and several (cmd_run.c): 0 with the options and
 * files, or 2 after saying what is wrong (a missing program is the caller's to report). With help not NULL, a
 * help option stops the parse with *help set; else it is an unknown option. */
enum { CLI_MAX_DEVICES = 4096 };
typedef struct cli_run_args {
    const char  *prog, *npz, *outdir, *chip;
    const char  *files[1024];
    int          nfiles, random, quiet, vary, replicas, partitions, json;
    uint64_t     seed;
    tpu_run_opts opts;
} cli_run_args;
int cli_run_parse_args(int argc, char **argv, cli_run_args *a, int *help);
int cmd_check(int argc, char **argv);
int cmd_print(int argc, char **argv);
int cmd_memory(int argc, char **argv);
int cmd_compile(int argc, char **argv);
int cmd_profile(int argc, char **argv);
int cmd_scalesim(int argc, char **argv);
int cmd_chips(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_scale(int argc, char **argv);
int cmd_serve(int argc, char **argv);     /* the network TPU: tools/cmd_serve.c, cmd_resolve.c, cmd_list.c, cmd_jobs.c */
int cmd_resolve(int argc, char **argv);
int cmd_list(int argc, char **argv);
int cmd_jobs(int argc, char **argv);

/* Shared helpers (tools/cli_util.c). */
/* A context with the process's settings: tpusim --max-input-size SIZE (anywhere on the command line) sets
 * every context's input limit (tpu_ctx_set_input_limit). */
tpu_ctx *cli_ctx_new(void);
/* Takes --max-input-size SIZE / --max-input-size=SIZE out of argv (SIZE: bytes, or with K, M, G, T: KiB ...).
 * Returns 0 after printing why if SIZE is not a size. */
int  cli_take_global_options(int *argc, char **argv);
int  cli_is_help(const char *arg);
/* For "--opt VALUE" and "--opt=VALUE": returns the value and advances *i, or NULL if argv[*i] is not opt. */
const char *cli_opt_value(int argc, char **argv, int *i, const char *opt);
void cli_print_warnings(tpu_ctx *ctx);

/* The one strict number parser for options: the whole value must be a decimal number within [lo, hi]
 * (no NaN or infinity, no overflow, no sign where lo >= 0, nothing before or after it). Otherwise it prints
 * "tpusim CMD: OPT wants ..." with the value and returns 0. */
int  cli_int(const char *cmd, const char *opt, const char *v, int64_t lo, int64_t hi, int64_t *out);
int  cli_int32(const char *cmd, const char *opt, const char *v, int lo, int hi, int *out);
int  cli_u64(const char *cmd, const char *opt, const char *v, uint64_t *out);
int  cli_num(const char *cmd, const char *opt, const char *v, double lo, double hi, double *out);
/* A tpu_npz_filter for a program's inputs (user: the tpu_module): a member must have the dtype and shape of one
 * of the entry's parameters (a module with tuple parameters takes any), so an archive is refused by its
 * headers before anything is inflated. */
int  cli_npz_params_filter(void *user, const char *name, int index, tpu_dtype dtype, int rank, const int64_t *dims,
                           char *why, size_t why_size);

/* The entry parameter an .npz member is named after ("x" or "x.1" for parameter x.1), or -1. */
int  cli_param_named(const tpu_module *m, const char *member);

/* The same check without a message (for values inside a list, e.g. --price v4=3.22): 1 if v is a number. */
int  cli_parse_num(const char *v, size_t len, double *out);

/* --json: one output tensor as {"name", "dtype", "shape", "min", "max", "mean", "nan_count", "first": [...]},
 * and printing (and freeing) a JSON value; cli_print_json returns 0, or 2 when out of memory. */
typedef struct cJSON cJSON;
cJSON *cli_tensor_json(const tpu_tensor *t, const char *name);
int    cli_print_json(cJSON *o);

/* One line on an output tensor, after the caller's label: its shape (a column shape_w wide), then its one
 * value, or min / max / mean (columns num_w wide), the NaN count and the first `show` values after `gap`. */
void cli_tensor_summary(const tpu_tensor *t, int shape_w, int num_w, int show, const char *gap);
/* Seconds on a monotonic clock (for durations). */
double cli_now(void);

/* Progress on stderr for work that may take a while: after 2 s, "WHAT ... N s" (redrawn on a terminal), and
 * "WHAT: done in N s" at the end if anything was said. NULL (out of memory) is a valid handle. */
typedef struct cli_progress cli_progress;
cli_progress *cli_progress_start(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
void cli_progress_stop(cli_progress *p);

#endif
