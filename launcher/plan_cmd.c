#include "plan_cmd.h"

#include <stdio.h>

int launcher_plan(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "muster: error: plan is not built yet\n");
    return 2;
}
