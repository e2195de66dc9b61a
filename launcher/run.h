#ifndef MUSTER_LAUNCHER_RUN_H
#define MUSTER_LAUNCHER_RUN_H

/* `muster run`: parses argv (after the "run" word), then prints the plan (--dry-run) or hands
 * the job to the agent. Returns the process exit code. */
int launcher_run(int argc, char **argv);

struct launcher_config;
/* Runs the agent for an already parsed configuration (used by `muster preflight`). */
int launcher_run_parsed(struct launcher_config *cfg);

#endif
