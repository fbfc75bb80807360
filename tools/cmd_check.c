/* cmd_check.c — `tpusim check` and `tpusim print` (being built). */
#include "cli.h"
#include <stdio.h>

int cmd_check(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "tpusim check: not built yet\n"); return 2; }
int cmd_print(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "tpusim print: not built yet\n"); return 2; }
