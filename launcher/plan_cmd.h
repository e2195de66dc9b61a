/* `muster plan`: the batch-size planner for shared-GPU runs. */
#ifndef MUSTER_LAUNCHER_PLAN_CMD_H
#define MUSTER_LAUNCHER_PLAN_CMD_H

/* argv[0] is the first option. Returns the process exit code. */
int launcher_plan(int argc, char **argv);

#endif
