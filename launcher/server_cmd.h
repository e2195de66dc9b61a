#ifndef MUSTER_LAUNCHER_SERVER_CMD_H
#define MUSTER_LAUNCHER_SERVER_CMD_H

/* `muster server [options]` (argv after "server"). Returns the process exit code. */
int launcher_server(int argc, char **argv);

#endif
