/* `muster preflight`: only the pre-flight checks, with `muster run`'s node/rdzv options. */
#ifndef MUSTER_LAUNCHER_PREFLIGHT_CMD_H
#define MUSTER_LAUNCHER_PREFLIGHT_CMD_H

/* argv[0] is the first option. Returns the process exit code. */
int launcher_preflight(int argc, char **argv);

#endif
