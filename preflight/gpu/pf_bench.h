/* Per GPU throughput in muster-preflight (docs/PREFLIGHT.md "What runs"): bf16 GEMM through cuBLAS
 * (loaded at run time) and HBM bandwidth by a device-to-device copy, then NVML's health facts. */
#ifndef MUSTER_PREFLIGHT_BENCH_H
#define MUSTER_PREFLIGHT_BENCH_H

#include <library_types.h>

#include "pf_run.h"

/* The few cuBLAS entry points, by their exported (versioned) names. Types as cublas_api.h:
 * the handle is a pointer, enums are ints, cudaDataType comes from library_types.h. */
typedef void *cublas_handle;
struct cublas {
    void *lib;
    int (*create)(cublas_handle *);
    int (*destroy)(cublas_handle);
    int (*set_workspace)(cublas_handle, void *, size_t);
    int (*gemm_ex)(cublas_handle, int, int, int, int, int, const void *, const void *, cudaDataType,
                   int, const void *, cudaDataType, int, const void *, void *, cudaDataType, int,
                   int, int);
};
#define CUBLAS_OP_N_ 0
#define CUBLAS_COMPUTE_32F_ 68
#define CUBLAS_GEMM_DEFAULT_ (-1)

/* Loads cuBLAS (libcublas.so.13: the loader's path, then /usr/local/cuda) into *c (zeroed by
 * the caller); its file name into name. Returns 0, or -ENOENT with the reason in note. */
int pf_cublas_load(struct cublas *c, char *name, size_t cap, char *note, size_t ncap);

/* Test-only: MUSTER_PREFLIGHT_SIMULATE_SLOW=<gpu index>:<factor> scales the figures that GPU
 * measured by factor (0 < factor <= 1), so the "named as slow" path runs on a healthy host. */
#define PF_SIMULATE_SLOW_ENV "MUSTER_PREFLIGHT_SIMULATE_SLOW"

/* Measures run->gpu (current device, context up): GEMM, HBM copy, NVML. Fills run->bench and
 * run->health. cuBLAS or NVML missing is no error (said in run->bench.gemm_note / the NVML
 * summary); a CUDA error during the measurement is recorded with pf_fail (PFG_EXIT_CHECK) and
 * returned as a negative errno. */
int pf_bench_run(struct pf_run *run);

/* Parses PF_SIMULATE_SLOW_ENV's value "I:F"; returns F when I == index and 0 < F <= 1, else 1. */
double pf_bench_slow_factor(const char *value, int index);

#endif
