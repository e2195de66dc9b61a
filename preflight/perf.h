/* GPU throughput compared across a job (docs/PREFLIGHT.md "What runs"): every GPU's bf16 GEMM
 * TFLOP/s and HBM copy GB/s against the median of the GPUs of the same model and against the floors
 * given by flags. Pure C (no CUDA, no JSON), so the rule is unit-tested on machines without a GPU.
 */
#ifndef MUSTER_PREFLIGHT_PERF_H
#define MUSTER_PREFLIGHT_PERF_H

#include <stddef.h>

/* A GPU more than this fraction below its model's median is slow. */
#define PF_PERF_OUTLIER 0.10

/* One GPU's figures. Borrowed strings. */
struct pf_perf {
    const char *host;
    int index;
    const char *uuid;
    const char *model;
    double tflops; /* bf16 GEMM, TFLOP/s; <= 0: not measured (never judged) */
    double
        hbm_gbps; /* device-to-device copy, GB/s with read and write counted; <= 0: not measured */
};

struct pf_perf_limits {
    double min_tflops;   /* --preflight-min-tflops, 0: none */
    double min_hbm_gbps; /* --preflight-min-hbm-gbps, 0: none */
};

enum pf_perf_metric { PF_PERF_GEMM = 0, PF_PERF_HBM = 1 };

struct pf_perf_finding {
    size_t gpu; /* index into the array given to pf_perf_compare */
    enum pf_perf_metric metric;
    double value;
    double ref;      /* the floor, or the model's median */
    int below_floor; /* 1: below the floor; 0: more than 10 % below the median */
    int peers;       /* GPUs of the model with this figure (the median's sample) */
};

/* Median of v[0..n) (the mean of the middle two for even n), 0 for n == 0. Does not modify v;
 * n at most 65536 (returns 0 beyond). */
double pf_perf_median(const double *v, size_t n);

/* The rule of every throughput judgement (GPU figures here, P2P pairs in p2p.c): a measured
 * figure v is a finding when below floor (> 0: a flag was given); otherwise when it has at least
 * 2 peers and is below keep x their median med. Returns 1 and sets *ref (the floor or the
 * median) and *below_floor; 0 when v is fine. */
int pf_figure_slow(double v, double floor, double med, int peers, double keep, double *ref,
                   int *below_floor);

/* Judges every GPU of g[0..n): per metric, a measured figure below its floor is one finding;
 * otherwise, when at least 2 GPUs of the same model (exact name) have the figure, one more than
 * PF_PERF_OUTLIER below their median is one. With one GPU only the floors apply. Stores up to
 * cap findings in out (GPU order, GEMM before HBM) and returns how many there are in all (may
 * exceed cap), or -EINVAL for NULL arguments. */
int pf_perf_compare(const struct pf_perf *g, size_t n, const struct pf_perf_limits *lim,
                    struct pf_perf_finding *out, size_t cap);

/* One line naming the GPU (node, index, UUID) and its figure, e.g.
 * "node gpu-a, GPU 3 (GPU-1234...): bf16 GEMM 612.0 TFLOP/s is 22.5 % below the median 790.0
 * TFLOP/s of 8 NVIDIA H200". Returns what snprintf returns. */
int pf_perf_format(const struct pf_perf *g, const struct pf_perf_finding *f, char *out, size_t cap);

#endif
