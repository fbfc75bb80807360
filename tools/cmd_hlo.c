/* cmd_hlo.c — `tpusim run`, `tpusim check`, `tpusim print` (being built: the parser lands first). */
#include "cli.h"
#include <stdio.h>

int cmd_run(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "tpusim run: not built yet\n"); return 2; }
int cmd_check(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "tpusim check: not built yet\n"); return 2; }
int cmd_print(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "tpusim print: not built yet\n"); return 2; }
