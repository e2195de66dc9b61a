#ifndef MUSTER_LAUNCHER_STATUS_CMD_H
#define MUSTER_LAUNCHER_STATUS_CMD_H

/* `muster status --rdzv-endpoint HOST:PORT [--rdzv-id ID] [--json]` (argv after "status"):
 * asks the server for its jobs and prints them. Returns the process exit code. */
int launcher_status(int argc, char **argv);

#endif
