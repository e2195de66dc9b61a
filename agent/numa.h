/* --numa-binding: the CPUs, and the NUMA node whose memory comes first, of each local rank's
 * worker. Computed once from sysfs before any worker starts and applied by the child itself
 * between fork and exec (spawn.h), so the program's first thread already runs there and every
 * thread it starts inherits it (torchrun wraps the command in numactl instead).
 *
 * torchrun's modes (torch/numa/binding.py), local rank N bound after GPU N's NUMA node (the
 * node of its PCI device, /sys/bus/pci/devices/BDF/numa_node; GPUs in PCI order, as
 * nvidia-smi, through CUDA_VISIBLE_DEVICES when it holds indices):
 *   node          every CPU of that node
 *   socket        every CPU of the nodes in that node's socket
 *   exclusive     that node's physical cores divided among the GPUs on it (lowest GPU first
 *                 gets the extra core), with their hyper-threads
 *   core-complex  one last-level-cache domain of that node, a different one per GPU on it
 * CPUs are always within the agent's own affinity. With fewer GPUs than workers (or none,
 * which torchrun refuses) the local ranks are spread over the nodes in contiguous blocks
 * (ranks 0..k-1 on the first node...), the layout GPU numbering usually has. Memory: the
 * node is preferred (MPOL_PREFERRED), so a full node spills over instead of the OOM killer
 * that a strict bind would call; torchrun binds no memory at all.
 *
 * MUSTER_SYSFS_ROOT (tests) replaces /sys; no memory policy is set then, as the nodes it
 * describes need not exist. */
#ifndef MUSTER_AGENT_NUMA_H
#define MUSTER_AGENT_NUMA_H

#include <stddef.h>

#include "spawn.h"

struct agent_numa {
    int nnodes;                    /* NUMA nodes with CPUs this agent may use */
    int nbind;                     /* workers bound: nproc, or 0 when there is nothing to do */
    struct agent_spawn_bind *bind; /* nbind entries, by local rank */
    int by_gpu;                    /* 1: after the GPUs' nodes; 0: blocks of local ranks */
    char why[160];                 /* with nbind == 0: why nothing is bound */
};

/* Plans mode ("node", "socket", "exclusive", "core-complex") for nproc workers. cvd is the
 * agent's CUDA_VISIBLE_DEVICES or NULL; root is MUSTER_SYSFS_ROOT or NULL (/sys). With one
 * NUMA node *out has nbind 0 and a reason. Returns 0, -ENOMEM, or -EINVAL with the reason in
 * err (e.g. exclusive with fewer cores than GPUs on a node). */
int agent_numa_plan(const char *mode, int nproc, const char *cvd, const char *root,
                    struct agent_numa *out, char *err, size_t errlen);

/* Releases what plan allocated; accepts a zeroed struct. */
void agent_numa_free(struct agent_numa *n);

/* Writes "cpus 0-7,64-71, memory node 0" for local rank i into buf. */
void agent_numa_describe(const struct agent_numa *n, int i, char *buf, size_t len);

#endif
