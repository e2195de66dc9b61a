/* A private NVIDIA MPS control daemon for shared-GPU mode (--mps): found on PATH, started with
 * its own pipe and log directories and only the GPUs in use, stopped ("quit" on its control
 * program's stdin) on every exit path muster takes. Workers are pointed at it through
 * CUDA_MPS_PIPE_DIRECTORY and capped with CUDA_MPS_PINNED_DEVICE_MEM_LIMIT.
 *
 * Limitation: if muster itself is SIGKILLed, no exit path runs and the daemon (which
 * daemonizes away from muster, so PR_SET_PDEATHSIG cannot reach it) stays, with its run
 * directory. Stop it by hand: CUDA_MPS_PIPE_DIRECTORY=<dir>/pipe nvidia-cuda-mps-control
 * with "quit" on stdin, the directory being the one named in muster's "MPS daemon started"
 * line. Its workers are gone (they die with muster through PR_SET_PDEATHSIG). */
#ifndef MUSTER_AGENT_MPS_H
#define MUSTER_AGENT_MPS_H

#include <limits.h>
#include <stdint.h>

#include "env.h"
#include "shared.h"

#define AGENT_MPS_CONTROL "nvidia-cuda-mps-control"
#define AGENT_MPS_STOP_TIMEOUT_MS 10000 /* "quit", then the daemon's exit; then SIGKILL */

struct agent_mps {
    int on;                 /* a daemon of ours runs: workers get the MPS variables */
    char control[PATH_MAX]; /* the control program's absolute path */
    char dir[PATH_MAX];     /* run directory with pipe/ and log/; "" none */
    char pipe_dir[PATH_MAX];
    char log_dir[PATH_MAX];
    uint64_t limit_mib;   /* each worker's CUDA_MPS_PINNED_DEVICE_MEM_LIMIT in MiB */
    struct agent_env env; /* the daemon's (and its control commands') additions */
};

/* floor(gpu_mem_bytes * fraction / per_gpu / 2^20): one worker's share in MiB. 0 for
 * per_gpu 0. Exact for every byte count a GPU has (computed in long double). */
uint64_t agent_mps_limit_mib(uint64_t gpu_mem_bytes, double fraction, unsigned per_gpu);

/* Does what o->mps asks. OFF: nothing. ON and AUTO: find the control program, learn the GPU
 * memory (o->gpu_mem_bytes or nvidia-smi), start the daemon. m->on says whether workers
 * get the MPS variables. Returns 0 (AUTO falls back to plain sharing with one warning), or,
 * for ON, the exit code muster should return (AGENT_EXIT_USAGE: no control program or
 * unknown GPU memory; AGENT_EXIT_INTERNAL: the daemon did not start), the reason logged.
 * Nothing is left running or on disk when it returns non-zero. Borrows o. */
int agent_mps_start(struct agent_mps *m, const struct agent_shared_options *o);

/* Sets worker `task`'s MPS variables over what agent_shared_task_env() set: the pipe and log
 * directories, the memory cap for device 0, and CUDA_VISIBLE_DEVICES as the daemon numbers
 * GPUs (see mps.c). Nothing when m->on is 0. Returns 0 or -ENOMEM. */
int agent_mps_worker_env(const struct agent_mps *m, const struct agent_shared_options *o,
                         unsigned task, struct agent_env *env);

/* Stops the daemon (bounded by AGENT_MPS_STOP_TIMEOUT_MS) and removes the run directory;
 * logs one line. Blocks muster's stop signals meanwhile so that a Ctrl-C cannot cut it short.
 * Safe to call twice and on a zeroed or never-started struct. */
void agent_mps_stop(struct agent_mps *m);

#endif
