/* muster: thin main. Picks the command and hands over to the launcher. */
#include <stdio.h>
#include <string.h>

#include "help.h"
#include "node.h"
#include "plan_cmd.h"
#include "preflight_cmd.h"
#include "run.h"
#include "server_cmd.h"
#include "status_cmd.h"
#include "token_cmd.h"
#include "version.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        launcher_print_main_usage();
        return 2;
    }
    if (strcmp(argv[1], "run") == 0)
        return launcher_run(argc - 2, argv + 2);
    if (strcmp(argv[1], "server") == 0)
        return launcher_server(argc - 2, argv + 2);
    if (strcmp(argv[1], "status") == 0)
        return launcher_status(argc - 2, argv + 2);
    if (strcmp(argv[1], "debug") == 0)
        return launcher_debug(argc - 2, argv + 2);
    if (strcmp(argv[1], "logs") == 0)
        return launcher_logs(argc - 2, argv + 2);
    if (strcmp(argv[1], "preflight") == 0)
        return launcher_preflight(argc - 2, argv + 2);
    if (strcmp(argv[1], "token") == 0)
        return launcher_token(argc - 2, argv + 2);
    if (strcmp(argv[1], "plan") == 0)
        return launcher_plan(argc - 2, argv + 2);
    if (strcmp(argv[1], "__preflight-node") == 0) /* internal: started by the agent */
        return preflight_node_main(argc - 2, argv + 2);
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "help") == 0) {
        launcher_print_main_help();
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0 ||
        strcmp(argv[1], "version") == 0) {
        launcher_print_version(stdout);
        return 0;
    }
    fprintf(stderr, "muster: error: unknown command '%s' (see 'muster --help')\n", argv[1]);
    return 2;
}
