#include "preflight_cmd.h"

#include <stdio.h>

int launcher_preflight(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "muster: error: preflight is not built yet\n");
    return 2;
}
