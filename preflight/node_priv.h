/* State shared by the node process's files (node.c: KV helpers, verdicts, main; stages.c:
 * inventory and mesh; nccl.c: the per-GPU all-reduce). Not for other components. */
#ifndef MUSTER_PREFLIGHT_NODE_PRIV_H
#define MUSTER_PREFLIGHT_NODE_PRIV_H

#include <jansson.h>
#include <stddef.h>

#include "log.h"

struct muster;

struct pf_node {
    struct muster *m;
    int rank0, nproc, group_rank, gws, world; /* rank0: RANK of this node's local rank 0 */
    const char *master_addr;
    int master_port;
    char host[256];
    /* options */
    const char *bin;  /* muster-preflight, "" when not installed */
    int need_gpus;    /* workers here that need a GPU; 0 = CPU job */
    int timeout_ms;   /* per stage */
    double min_busbw; /* GB/s at the largest size, 0 = none */
    int allow_mixed;
    double min_tflops;        /* bf16 GEMM floor per GPU, 0 = none */
    double min_hbm_gbps;      /* HBM copy floor per GPU (read+write), 0 = none */
    int allow_slow;           /* slow GPUs warn instead of failing */
    const char *max_bytes;    /* NULL: muster-preflight's default */
    const char *report;       /* group rank 0: where the JSON report goes */
    const char *local_addr;   /* the address other nodes reach this one at, NULL: guess */
    const char *reason_file;  /* where the failure's one-line reason goes for the agent */
    const char *results_file; /* where this node's per-GPU results go for the agent */
    int joined;               /* a node that joined a running job: checked alone */
    /* results */
    json_t *report_json;
    json_t *own;       /* this node's NCCL-stage result (its ranks, "p2p"), NULL before */
    char reason[1024]; /* the failure, one line */
    double t0;
};

void pf_say(enum mc_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int pf_put(struct pf_node *n, const char *key, const char *value);
int pf_put_json(struct pf_node *n, const char *key, json_t *v);
int pf_get(struct pf_node *n, const char *key, int timeout_ms, char **out);
int pf_get_json(struct pf_node *n, const char *key, int timeout_ms, json_t **out);
void pf_node_host(struct pf_node *n, int g, char *out, size_t cap);
/* Publishes (group rank 0) or waits for (others) a stage's verdict. Returns 0 or
 * PF_EXIT_FAILED; on failure n->reason holds the one-line reason. */
int pf_verdict(struct pf_node *n, const char *stage, int ok, const char *reason);

/* stages.c / nccl.c: each returns 0 or PF_EXIT_FAILED (reason in n->reason) */
int pf_stage_inventory(struct pf_node *n);
int pf_stage_mesh(struct pf_node *n);
int pf_stage_nccl(struct pf_node *n);

/* gpuhealth.c, group rank 0: prints one line per node of nodes (the NCCL stage's
 * per-node results), names slow GPUs (against the model's median and the floors) and NVML's
 * findings; stores them in the report. Returns how many fail the pre-flight (the first one's
 * line in n->reason); slow GPUs warn only with allow_slow. */
int pf_judge_health(struct pf_node *n, json_t *nodes);

/* nccl.c: a `muster-preflight p2p` result as a matrix for p2p.h (borrowing from p2p); idx and
 * uuid hold PF_P2P_MAX_GPUS entries, g PF_P2P_MAX_GPUS^2. Returns the GPU count or -1. */
struct pf_p2p;
int pf_p2p_from_json(json_t *p2p, struct pf_p2p *m, int *idx, const char **uuid, double *g);

/* node.c: writes this node's results file for the agent (--results-file): {"ok", "joined",
 * "p2p": {"pairs", "min_gbps", "median_gbps", "level", "note"}, "gpus": [{"index", "uuid",
 * "model", "gemm_tflops", "hbm_gbps", "level", "note"}]}, each GPU with its worst finding of
 * findings (gpuhealth.c's list: "group_rank", "gpu" or "p2p"). */
void pf_write_results(struct pf_node *n, int code, json_t *findings);

#endif
