/* cli.h — subcommands of the tpusim program. Each lives in tools/cmd_<name>.c, uses only the public API
 * (include/tpusim.h), parses its own options, prints its own --help, and returns the process exit code. */
#ifndef TPU_CLI_H
#define TPU_CLI_H

#include "tpusim.h"

typedef int (*cli_cmd_fn)(int argc, char **argv);   /* argv[0] is the subcommand name */

int cmd_run(int argc, char **argv);
int cmd_run_replicated(int argc, char **argv);   /* tpusim run on several devices (cmd_run_rep.c) */
int cmd_check(int argc, char **argv);
int cmd_print(int argc, char **argv);
int cmd_memory(int argc, char **argv);
int cmd_compile(int argc, char **argv);
int cmd_profile(int argc, char **argv);
int cmd_scalesim(int argc, char **argv);
int cmd_chips(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_serve(int argc, char **argv);     /* the network TPU: tools/cmd_serve.c, cmd_resolve.c, cmd_list.c, cmd_jobs.c */
int cmd_resolve(int argc, char **argv);
int cmd_list(int argc, char **argv);
int cmd_jobs(int argc, char **argv);

/* Shared helpers (tools/cli_util.c). */
int  cli_is_help(const char *arg);
/* For "--opt VALUE" and "--opt=VALUE": returns the value and advances *i, or NULL if argv[*i] is not opt. */
const char *cli_opt_value(int argc, char **argv, int *i, const char *opt);
void cli_print_warnings(tpu_ctx *ctx);

#endif
