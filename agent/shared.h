/* Shared-GPU mode (--nproc-per-gpu K): K independent single-rank workers on each GPU in use.
 * Every worker is its own world (RANK 0, WORLD_SIZE 1, its own MASTER_PORT: NCCL forbids two
 * ranks of one communicator on one GPU), sees only its GPU (CUDA_VISIBLE_DEVICES), gets
 * MUSTER_TASK_INDEX/MUSTER_TASK_COUNT and MUSTER_GPU_MEM_FRACTION = F/K, and with MPS a hard
 * cap CUDA_MPS_PINNED_DEVICE_MEM_LIMIT. A failed worker restarts alone; the others go on.
 * No rendezvous: one node, one libuv loop, never touches CUDA. */
#ifndef MUSTER_AGENT_SHARED_H
#define MUSTER_AGENT_SHARED_H

#include <stdint.h>

#include "env.h"

enum agent_mps_mode { AGENT_MPS_OFF, AGENT_MPS_ON, AGENT_MPS_AUTO };

struct agent_shared_options {
    const char *run_id;
    char **argv;    /* worker command, NULL-terminated; borrowed */
    char **gpu_ids; /* CUDA_VISIBLE_DEVICES entries of the GPUs in use ("0", "GPU-..") */
    unsigned ngpus;
    unsigned per_gpu;       /* K */
    double mem_fraction;    /* F, (0, 1]; each worker gets F / K */
    uint64_t gpu_mem_bytes; /* memory of one GPU; 0 = ask nvidia-smi when MPS needs it */
    enum agent_mps_mode mps;
    unsigned max_restarts; /* per worker */
    /* --restart-backoff MIN:MAX in ms, per task (common/backoff.h); 0: restart at once */
    unsigned backoff_min_ms, backoff_max_ms;
    unsigned shutdown_timeout_ms;
    const char *log_dir; /* as agent_options: NULL private, "/dev/null" none, or a path */
    const unsigned char *redirect, *tee,
        *shown;             /* per task (ngpus * K entries), as agent_options */
    const char *batch_size; /* exported as MUSTER_BATCH_SIZE, or NULL */
    const char *signals_to_handle;
    unsigned telemetry_ms; /* --gpu-telemetry period; 0: off (agent/telemetry.h) */
};

/* Task i's variables (RANK 0 ... MUSTER_TASK_INDEX, CUDA_VISIBLE_DEVICES, fraction; not the
 * MPS ones) for a worker on master_port with restart_count restarts; shared by --dry-run.
 * Returns 0 or -ENOMEM. */
int agent_shared_task_env(const struct agent_shared_options *o, unsigned task, unsigned master_port,
                          unsigned restart_count, const char *error_file, struct agent_env *env,
                          char *const *parent);

/* Runs the tasks until every one has ended (succeeded, or failed after its restarts). Returns
 * 0 when all succeeded, else the first finally failed task's exit code (128+signal when
 * killed), 128+sig when stopped by a signal, or an AGENT_EXIT_* code. Borrows o. */
int agent_shared_run(const struct agent_shared_options *o);

#endif
