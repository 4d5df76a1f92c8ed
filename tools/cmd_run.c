/* cmd_run.c — `locks run`. Not built yet: its issue is open. */
#include <stdio.h>

#include "cmds.h"

int cmd_run(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "locks run: not available in this build yet\n");
    return 2;
}
