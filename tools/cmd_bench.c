/* cmd_bench.c — `locks bench`. Not built yet: its issue is open. */
#include <stdio.h>

#include "cmds.h"

int cmd_bench(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "locks bench: not available in this build yet\n");
    return 2;
}
