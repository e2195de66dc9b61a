/* muster-preflight's shared state: the options, the worker environment, this rank's GPU, the
 * libmuster connection, the device buffer and every stage's results. One `struct pf_run` lives
 * in allreduce_main(); the modules (pf_gpu, pf_kv, pf_stage, pf_report) borrow it. */
#ifndef MUSTER_PREFLIGHT_RUN_H
#define MUSTER_PREFLIGHT_RUN_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "health.h"

/* Exit codes: PFG_EXIT_* in common/exitcode.h (muster-preflight's own, not muster's; also in
 * muster_preflight.c's header comment and --help). */
#include "exitcode.h"

#define PF_MAX_SIZES 64 /* sweep entries; 1 B .. 2^64 by factor 2 still fits */
#define PF_HOST_MAX 256
#define PF_ERROR_MAX 2048

struct pf_opts {
    uint64_t min_bytes;
    uint64_t max_bytes;
    int iters;
    int warmup;
    int timeout_ms;
    int device;      /* -1: default (LOCAL_RANK, or 0 when CUDA sees one device) */
    const char *out; /* NULL: stdout */
};

struct pf_env {
    int rank, world;
    int local_rank, local_world;
    int group_rank, group_world;
};

struct pf_gpu {
    int index;     /* CUDA ordinal (after CUDA_VISIBLE_DEVICES) */
    char uuid[48]; /* GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx */
    char pci[32];  /* 0000:1b:00.0 */
    char name[256];
    uint64_t memory; /* totalGlobalMem, bytes */
    int cc_major, cc_minor;
};

struct pf_size_result {
    uint64_t bytes;
    double time_us;
    double algbw;
    double busbw;
};

struct pf_stage_result {
    const char *name; /* "node" or "all" (static) */
    int nranks;
    int init_done;
    double init_ms;
    const char *check; /* "ok", "failed" or "not run" (static) */
    int nsizes;
    struct pf_size_result sizes[PF_MAX_SIZES];
};

/* This GPU's throughput (pf_bench.c). A figure <= 0 was not measured. */
struct pf_bench {
    int ran;
    double gemm_tflops; /* bf16 in/out, FP32 compute, 2n^3 FLOP per call */
    int gemm_n, gemm_iters;
    double hbm_gbps; /* device-to-device copy, bytes read + bytes written per second */
    uint64_t hbm_bytes;
    int hbm_iters;
    double slow_factor;  /* test-only scaling (PF_SIMULATE_SLOW_ENV), 1 = none */
    double ms;           /* the whole measurement, cuBLAS loading and NVML included */
    char cublas[128];    /* the library loaded, or "" */
    char gemm_note[256]; /* why there is no GEMM figure, or "" */
};

struct pf_run {
    struct pf_opts opts;
    struct pf_env env;
    char host[PF_HOST_MAX];
    int have_gpu;
    struct pf_gpu gpu;
    struct muster *m;
    float *dbuf;        /* device buffer of buf_bytes */
    uint64_t buf_bytes; /* what this rank allocated */
    uint64_t max_bytes; /* the sweep's top: the smallest allocation of all ranks */
    int have_stream;
    cudaStream_t stream;
    struct pf_stage_result stages[2];
    int nstages;
    double start_ms;
    int exit_code;
    char error[PF_ERROR_MAX]; /* the first error; empty when none */
    char note[512];
    struct pf_bench bench;
    struct pf_health health;
};

/* Records the first error (later ones are dropped: the first is the cause) with its exit code
 * and prints it as one line "muster-preflight: error: ..." on stderr. Returns err (a negative
 * errno) so callers can write `return pf_fail(run, ...)`. */
int pf_fail(struct pf_run *run, int exit_code, int err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* `muster-preflight allreduce` after parsing: connects to muster, sets up the GPU, publishes
 * and checks every rank's GPU, runs the stages, writes the report, frees everything. Expects
 * run->opts and run->env filled and everything else zero. Returns the exit code. */
int pf_allreduce_run(struct pf_run *run);

/* Milliseconds left until deadline_ms (mc_mono_ms_f() scale), clamped to [0, INT_MAX]. */
int pf_left_ms(double deadline_ms);

#endif
