/* `muster plan`: the batch-size planner for shared-GPU runs. */
#ifndef MUSTER_LAUNCHER_PLAN_CMD_H
#define MUSTER_LAUNCHER_PLAN_CMD_H

/* argv[0] is the first option. Returns the process exit code. */
int launcher_plan(int argc, char **argv);

/* `muster run --nproc-per-gpu K --auto-batch`: runs argv once as a probe on GPU gpu_id (its
 * environment: MUSTER_PROBE_FILE, MUSTER_PROBE_BATCH=probe_batch, MUSTER_GPU_MEM_FRACTION=F/K,
 * CUDA_VISIBLE_DEVICES=gpu_id), plans for procs processes with safety F on gpu_mem bytes (0:
 * the probe's total_bytes, then nvidia-smi) and sets *batch to the starting batch (80 % of the
 * maximum). Prints one line on stderr. Returns 0 or `muster plan`'s exit code (error printed). */
int launcher_plan_auto_batch(char **argv, const char *gpu_id, unsigned procs, double safety,
                             double gpu_mem, unsigned probe_batch, long *batch);

#endif
