#ifndef MUSTER_LAUNCHER_RUN_H
#define MUSTER_LAUNCHER_RUN_H

/* `muster run`: parses argv (after the "run" word), then prints the plan (--dry-run) or hands
 * the job to the agent. Returns the process exit code. */
int launcher_run(int argc, char **argv);

/* `muster __worker PPID CMD...`: the exec wrapper every worker starts through. Arms
 * PR_SET_PDEATHSIG so that the worker dies with the agent even when the agent is SIGKILLed,
 * then exec's CMD. Returns only on failure (exit code 127, like a shell). */
int launcher_exec_worker(int argc, char **argv);

#endif
