/* cmd_run.c — `tpusim run` (being built). */
#include "cli.h"
#include <stdio.h>

int cmd_run(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "tpusim run: not built yet\n"); return 2; }
