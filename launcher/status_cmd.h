#ifndef MUSTER_LAUNCHER_STATUS_CMD_H
#define MUSTER_LAUNCHER_STATUS_CMD_H

/* `muster status --rdzv-endpoint HOST:PORT [--rdzv-id ID] [--json]` (argv after "status"):
 * asks the server for its jobs and prints them. Returns the process exit code. */
int launcher_status(int argc, char **argv);

/* `muster debug --rdzv-endpoint HOST:PORT --rdzv-id ID [--rank R] [--json]`: asks for a
 * running job's evidence (every rank's stack) and prints it. Returns the exit code. */
int launcher_debug(int argc, char **argv);

/* `muster logs --rdzv-endpoint HOST:PORT --rdzv-id ID [--follow] [--rank R] [--since T]
 * [--dedup]`: prints the job's one log (LOGS_REQ). Returns the exit code. */
int launcher_logs(int argc, char **argv);

#endif
