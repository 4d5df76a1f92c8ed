/* cmd_demo.c — `locks demo`. Not built yet: its issue is open. */
#include <stdio.h>

#include "cmds.h"

int cmd_demo(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "locks demo: not available in this build yet\n");
    return 2;
}
