/* cmd_eval.c — `locks eval`. Not built yet: its issue is open. */
#include <stdio.h>

#include "cmds.h"

int cmd_eval(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "locks eval: not available in this build yet\n");
    return 2;
}
