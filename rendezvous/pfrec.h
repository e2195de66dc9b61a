/* The pre-flight results of a job's nodes, as their agents sent them (PREFLIGHT):
 * kept for /status, STATUS and /metrics only; the round logic never looks at them. One record
 * per node (by node id: a node checked again, e.g. after it left and joined, replaces its own),
 * at most RDZV_PFREC_MAX nodes a job. */
#ifndef MUSTER_RDZV_PFREC_H
#define MUSTER_RDZV_PFREC_H

#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "message.h"

#define RDZV_PFREC_MAX 1024u

struct rdzv_pfrec_node {
    uint64_t node_id;
    char host[RDZV_HOST_MAX + 1];
    uint64_t time_ms;          /* wall clock when received */
    struct rdzv_preflight *pf; /* malloc'd, only count GPUs used */
};

struct rdzv_pfrec {
    struct rdzv_pfrec_node *nodes;
    size_t n;
};

/* Checks a decoded PREFLIGHT beyond the codec: every string printable ASCII (no control
 * character, no byte >= 0x7f: they end up in metric labels and logs), GPU indices distinct
 * and below 1024, ok and joined 0 or 1. Returns NULL, or a text saying what is wrong. */
const char *rdzv_pfrec_check(const struct rdzv_preflight *pf);

/* Stores (a copy of) pf for the node; replaces that node's earlier record. Returns 0,
 * -ENOSPC when RDZV_PFREC_MAX other nodes are recorded, -ENOMEM. */
int rdzv_pfrec_put(struct rdzv_pfrec *r, uint64_t node_id, const char *host, uint64_t time_ms,
                   const struct rdzv_preflight *pf);
void rdzv_pfrec_clear(struct rdzv_pfrec *r);

/* The "preflight" array of a job's status: one object per node. */
json_t *rdzv_pfrec_json(const struct rdzv_pfrec *r);

/* Prometheus samples (without HELP/TYPE lines) of one job's records for the family `which`:
 * "gemm" (muster_preflight_gpu_gemm_tflops), "hbm" (muster_preflight_gpu_hbm_gbps), "level"
 * (muster_preflight_gpu_level: 0 ok, 1 warning, 2 failure), "p2p" (muster_preflight_p2p_min_gbps,
 * per node with pairs). Label values are escaped as the text format requires. */
void rdzv_pfrec_metrics(FILE *f, const char *job_id, const struct rdzv_pfrec *r, const char *which);

#endif
