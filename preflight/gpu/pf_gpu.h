/* This machine's GPUs as the CUDA runtime sees them, and `muster-preflight inventory`. */
#ifndef MUSTER_PREFLIGHT_GPU_H
#define MUSTER_PREFLIGHT_GPU_H

#include <stddef.h>

#include "pf_run.h"

/* Fills *g for CUDA ordinal dev (name, NVIDIA-style UUID, lowercase PCI bus id, memory, compute
 * capability) without creating a context. Returns 0, or -EIO with the CUDA error text in
 * err (cap bytes). */
int pf_gpu_query(int dev, struct pf_gpu *g, char *err, size_t cap);

/* Formats 16 UUID bytes as nvidia-smi does: "GPU-" 8-4-4-4-12 lowercase hex. out needs 41 bytes. */
void pf_gpu_format_uuid(const unsigned char bytes[16], char *out, size_t cap);

/* The kernel driver version from /proc/driver/nvidia/version ("580.159.04"), or "" when it
 * cannot be read or parsed. */
void pf_driver_version(char *out, size_t cap);

/* `muster-preflight inventory`: prints one JSON object on stdout. Returns the exit code:
 * PFG_EXIT_OK, or PFG_EXIT_START when CUDA cannot start (the object then carries "error"). */
int pf_inventory_main(void);

#endif
