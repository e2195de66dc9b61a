/* The one question muster asks nvidia-smi: how much memory a GPU has. Used by the shared-GPU
 * MPS cap (agent/mps.c) and by `muster plan` (launcher/plan_cmd.c), with one parser. */
#ifndef MUSTER_COMMON_GPUQUERY_H
#define MUSTER_COMMON_GPUQUERY_H

#include <stddef.h>
#include <stdint.h>

/* Runs `nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i gpu_id` (found on
 * PATH, with driver_dirs also in the driver's usual places: mc_proc_find) for up to timeout_ms
 * and sets *bytes.
 * Returns 0, or a negative errno with one line in why (may be NULL): -ENOENT (no nvidia-smi),
 * -ETIMEDOUT, -EIO (it failed: no such GPU, no driver), -EINVAL (an answer that is no size in
 * MiB, e.g. "[N/A]"), or what starting it returned. */
int mc_gpu_mem_query(const char *gpu_id, int driver_dirs, uint64_t timeout_ms, uint64_t *bytes,
                     char *why, size_t whylen);

/* Parses nvidia-smi's memory.total answer ("49140\n", MiB) into bytes. Returns 0 or -EINVAL. */
int mc_gpu_mem_parse(const char *out, uint64_t *bytes);

#endif
