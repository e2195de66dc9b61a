/* The pre-flight's node process: `muster __preflight-node`, started by the agent of every node
 * once the first round is assigned, with the environment of the node's local rank 0 (RANK,
 * GROUP_RANK, GROUP_WORLD_SIZE, MASTER_ADDR/PORT, libmuster's MUSTER_*). It runs the stages in
 * order, each ending with a verdict that group rank 0's node publishes in the round's KV store:
 *   1. inventory (`muster-preflight inventory` on this node, compared across nodes),
 *   2. TCP mesh (every node reaches every other node and MASTER_ADDR:MASTER_PORT),
 *   3. NCCL (`muster-preflight allreduce`, one per GPU: unique GPUs, exact sums, busbw).
 * A stage that fails stops the rest on every node. Group rank 0's node prints the report and
 * writes it as JSON. Never touches CUDA itself. */
#ifndef MUSTER_PREFLIGHT_NODE_H
#define MUSTER_PREFLIGHT_NODE_H

/* Exit codes: muster's own (common/exitcode.h), the same numbers for the same meanings. */
#include "exitcode.h"
#define PF_EXIT_OK MC_EXIT_OK
#define PF_EXIT_FAILED MC_EXIT_PREFLIGHT /* a check failed (this node's or another's) */
#define PF_EXIT_NO_GPU MC_EXIT_NO_GPU    /* GPUs are needed but none (or no muster-preflight) */
#define PF_EXIT_USAGE MC_EXIT_USAGE
#define PF_EXIT_INTERNAL MC_EXIT_INTERNAL

/* argv[0] is the first option. Returns one of the codes above. */
int preflight_node_main(int argc, char **argv);

#endif
