/* The peer-to-peer bandwidth matrix of one node (docs/PREFLIGHT.md "What runs"): every ordered pair
 * of the node's GPUs timed with cudaMemcpyPeerAsync (muster-preflight p2p), judged here against the
 * median of the node's pairs and an optional floor. Pure C (no CUDA, no JSON), so the rule is
 * unit-tested on machines without a GPU, like perf.c. */
#ifndef MUSTER_PREFLIGHT_P2P_H
#define MUSTER_PREFLIGHT_P2P_H

#include <stddef.h>

/* A pair below this fraction of the node's median pair is "far below the others": pairs of a
 * healthy NVLink node are within a few %, while a PCIe path across sockets can lose a third;
 * a pair at less than half of its node's median is a degraded link, not topology. */
#define PF_P2P_OUTLIER 0.5
/* At most this many GPUs per node are judged (the matrix holds n * n figures). */
#define PF_P2P_MAX_GPUS 64

/* One node's matrix. Borrowed. gbps[src * n + dst] is the copy rate from GPU src to GPU dst
 * in GB/s (bytes copied / s, each byte counted once); the diagonal and figures <= 0 (not
 * measured) are never judged. */
struct pf_p2p {
    const char *host;
    int n;                   /* GPUs, 0..PF_P2P_MAX_GPUS */
    const int *index;        /* n CUDA indices, NULL: 0..n-1 */
    const char *const *uuid; /* n UUIDs, NULL or an entry NULL: "?" */
    const double *gbps;      /* n * n */
};

struct pf_p2p_finding {
    int src, dst;    /* positions 0..n-1 in the matrix */
    double value;    /* GB/s */
    double ref;      /* the floor, or the node's median */
    int below_floor; /* 1: below the floor; 0: below PF_P2P_OUTLIER x the median */
    int pairs;       /* measured pairs of the node (the median's sample) */
};

/* The median of the node's measured pairs (0 when none); *pairs gets their count. */
double pf_p2p_median(const struct pf_p2p *m, int *pairs);

/* Judges every measured pair src != dst: below min_gbps (> 0) is one finding; otherwise, when
 * the node has at least 2 measured pairs, below PF_P2P_OUTLIER x their median is one. Stores
 * up to cap findings in out (src-major order) and returns how many there are in all (may
 * exceed cap); -EINVAL for NULL arguments or n outside 0..PF_P2P_MAX_GPUS. With fewer than 2
 * GPUs there are no pairs: returns 0. */
int pf_p2p_compare(const struct pf_p2p *m, double min_gbps, struct pf_p2p_finding *out, size_t cap);

/* One line naming the node, both GPUs (index and UUID) and the figure, e.g.
 * "node gpu-a: P2P GPU 0 (GPU-1a..) -> GPU 3 (GPU-9f..) 21.4 GB/s is 83.6 % below the node's
 * median 130.5 GB/s of 56 pairs". Returns what snprintf returns. */
int pf_p2p_format(const struct pf_p2p *m, const struct pf_p2p_finding *f, char *out, size_t cap);

#endif
