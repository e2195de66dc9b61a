#include "node.h"

int preflight_node_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return 70;
}
