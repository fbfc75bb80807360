/* tpusim.c — the command-line program: a table of subcommands over the public API. */
#include "cli.h"
#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    cli_cmd_fn  fn;
    const char *summary;
} cli_cmds[] = {
    {"run", cmd_run, "run an HLO program on the CPU with TPU numerics; write results as .npy"},
    {"check", cmd_check, "report what would stop a program from compiling for a TPU (exit 0 ok, 1 no, 2 bad input)"},
    {"memory", cmd_memory, "will it fit? HBM per device with TPU tiling, the largest allocations, a viewer"},
    {"compile", cmd_compile, "compile for a chip; fails like the TPU compiler when HBM runs out"},
    {"profile", cmd_profile, "how fast would it run? step time, MXU use, op table, trace, HTML report, advice"},
    {"scale", cmd_scale, "one program on slices of several sizes: scaling table and chart, time to train, cost, GPUs"},
    {"print", cmd_print, "parse an HLO program and print it back (canonical form)"},
    {"scalesim", cmd_scalesim, "SCALE-Sim compatible layer mode: its .cfg and topology .csv in, its reports out"},
    {"chips", cmd_chips, "the TPU generations modelled, or one chip or slice (v3-8, v5litepod-16, file.json)"},
    {"bench", cmd_bench, "the classic NxN matmul benchmark: simulated TPU TFLOP/s beside this CPU's, measured"},
    {"train", cmd_train, "train a STEP_DIR data-parallel on a simulated slice (v3-8); predicted step time, profile"},
    {"serve", cmd_serve, "a TPU on the network: serve a simulated slice over gRPC (grpc://HOST:8470), optionally named"},
    {"resolve", cmd_resolve, "print the URL of a named TPU (TPU_NAME -> TPU_GRPC_URL)"},
    {"list", cmd_list, "the named TPUs: URL, slice, state (READY/BUSY/UNHEALTHY), clients, HBM in use"},
    {"jobs", cmd_jobs, "run and manage jobs on a named TPU: create, list, logs, stop, artifacts"},
};

static void cli_usage(FILE *f)
{
    fprintf(f, "tpusim %s — a software TPU: run, check and model XLA HLO programs.\n\n", TPUSIM_VERSION);
    fprintf(f, "usage: tpusim COMMAND [options]   (tpusim COMMAND --help for each)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof cli_cmds / sizeof cli_cmds[0]; i++)
        fprintf(f, "  %-10s %s\n", cli_cmds[i].name, cli_cmds[i].summary);
    fprintf(f, "\nA PROGRAM may be HLO text, an HloModuleProto in protobuf text format, or a binary HloModuleProto,\n"
               "HloProto or HloSnapshot (XLA's *.hlo.pb dumps, what PyTorch/XLA hands a PJRT plugin); or StableHLO:\n"
               "MLIR text (jax's lowered.as_text(), .mlir), bytecode (.mlirbc) or a jax.export file, read through\n"
               "jaxlib's converter in $TPUSIM_PYTHON (default python3; pip install jax==0.10.2). '-' is standard\n"
               "input for a PROGRAM and standard output for a file written.\n");
    fprintf(f, "\noption for every command:\n"
               "  --max-input-size SIZE  the largest input read into memory: a program or config file, one .npy,\n"
               "                         one .npz member once inflated (default 4G; SIZE in bytes or with K, M, G, T)\n");
    fprintf(f, "\nSee README.md for a 5-minute tour.\n");
}

int main(int argc, char **argv)
{
    if (!cli_take_global_options(&argc, argv)) return 2;
    if (argc < 2 || cli_is_help(argv[1])) {
        cli_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("tpusim %s\n", TPUSIM_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof cli_cmds / sizeof cli_cmds[0]; i++)
        if (!strcmp(argv[1], cli_cmds[i].name)) return cli_cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "tpusim: unknown command '%s'\n\n", argv[1]);
    cli_usage(stderr);
    return 2;
}
