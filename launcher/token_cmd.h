#ifndef MUSTER_LAUNCHER_TOKEN_CMD_H
#define MUSTER_LAUNCHER_TOKEN_CMD_H

/* `muster token ...` (argv without "muster token"): mints a job or read-only credential from
 * the server's secret. Returns the exit code: 0, 1 (output file), 2 (usage, secret). */
int launcher_token(int argc, char **argv);

#endif
