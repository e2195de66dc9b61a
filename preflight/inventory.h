/* Pre-flight stage 1 (docs/PREFLIGHT.md "What runs"): the inventory consistency report.
 *
 * Every node's pre-flight sends a record with its inventory (what `muster-preflight inventory`
 * prints); the node of group rank 0 compares them here. A record is a JSON object:
 *   {"host": "nodeA", "group_rank": 0, "need_gpus": 2,
 *    "inventory": {"driver": "580.159.04", "cuda_driver": 13000, "cuda_runtime": 13000,
 *                  "nccl": 22809, "gpus": [{"index": 0, "uuid": "GPU-..", "pci": "..",
 *                  "name": "NVIDIA H200", "memory": 150109880320, "cc": "9.0"}, ...],
 *                  "error": "optional: why CUDA could not start"},
 *    "error": "optional: why the inventory is missing"}
 * Every field is untrusted: a missing or wrongly typed one shows as "?" and never crashes. */
#ifndef MUSTER_PREFLIGHT_INVENTORY_H
#define MUSTER_PREFLIGHT_INVENTORY_H

#include <stddef.h>

#include <jansson.h>

#define PF_INVENTORY_REASON_MAX 512

struct pf_inventory_verdict {
    int failed;    /* 1: the job must not start */
    int mixed;     /* 1: nodes (or the GPUs of one node) differ in at least one compared column */
    int nwarnings; /* differences let through by allow_mixed */
    char reason[PF_INVENTORY_REASON_MAX]; /* the first failure, one line; "" when !failed */
};

/* Compares n node records (borrowed; any order, sorted here by group rank; a NULL or non-object
 * entry is a malformed record).
 *
 * Fails the job (v->failed) when a node that needs GPUs (need_gpus > 0) has no usable inventory
 * or fewer GPUs than need_gpus, when group_rank or need_gpus is missing or two records claim one
 * group rank, and, unless allow_mixed, when the GPU model, GPU memory (exact bytes), driver,
 * CUDA driver/runtime or NCCL version differ between GPU nodes or between the GPUs of one node
 * (with allow_mixed those are counted in v->nwarnings). Nodes with need_gpus == 0 are CPU-only:
 * shown with "-" and not compared. The reference for "differs" is the first GPU node in group
 * rank order that has an inventory, normally group rank 0.
 *
 * On success *table is a malloc'd, NUL-terminated text (caller frees): a header, one line per
 * node, cells that differ from the reference marked with a trailing '*', a GPU count short of
 * need_gpus with '!', then one line per problem ("! " failure, "~ " warning). *summary is a new
 * reference:
 *   {"ok": bool, "mixed": bool, "reason": "..", "problems": [".."],
 *    "nodes": [{"group_rank", "host", "gpus", "need", "model", "memory", "driver",
 *               "cuda_driver", "cuda_runtime", "nccl", "differs": ["nccl", ..]}]}
 * with null for a value that is unknown or does not apply (a CPU-only node's inventory),
 * "model"/"memory" "mixed"/null when the GPUs of one node differ.
 *
 * Returns 0, -EINVAL (n == 0 or a NULL pointer argument) or -ENOMEM; on error *table and
 * *summary are NULL. */
int pf_inventory_compare(json_t *const *nodes, size_t n, int allow_mixed,
                         struct pf_inventory_verdict *v, char **table, json_t **summary);

#endif
