/* bf16 GEMM and HBM copy throughput of one GPU (docs/PREFLIGHT.md "What runs" for the method).
 *
 * cuBLAS is loaded with dlopen: the toolkit on the build host has no libcublas_static.a (only
 * libcublas.so.13 and the 540 MB libcublasLt.so.13), and linking the shared library would make
 * muster-preflight fail to start, inventory and all, on a GPU host without cuBLAS. Loaded at
 * run time, a missing cuBLAS costs only the GEMM figure, said so in the report. libcublas 13
 * needs no libcudart.so, so it shares our static runtime's context through the driver. */
#include "pf_bench.h"

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <library_types.h>

#include "pf_nvml.h"
#include "clock.h"

#define GEMM_N 8192
#define GEMM_WARMUP 5
#define GEMM_ITERS 20
#define HBM_BYTES (4ULL << 30) /* halved while cudaMalloc fails, down to HBM_MIN */
#define HBM_MIN (256ULL << 20)
#define HBM_WARMUP 2
#define HBM_ITERS 10
#define WORKSPACE (32u << 20)
#define RAND_BLOCK (1u << 20) /* bf16 elements generated on the host, then tiled on the GPU */

int pf_cublas_load(struct cublas *c, char *name, size_t cap, char *note, size_t ncap)
{
    static const char *const paths[] = {"libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.13",
                                        "/usr/local/cuda/targets/x86_64-linux/lib/libcublas.so.13"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]) && c->lib == NULL; i++) {
        c->lib = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
        if (c->lib != NULL)
            snprintf(name, cap, "%s", paths[i]);
    }
    if (c->lib == NULL) {
        snprintf(note, ncap, "cuBLAS not found (libcublas.so.13): GEMM not checked");
        return -ENOENT;
    }
    *(void **)&c->create = dlsym(c->lib, "cublasCreate_v2");
    *(void **)&c->destroy = dlsym(c->lib, "cublasDestroy_v2");
    *(void **)&c->set_workspace = dlsym(c->lib, "cublasSetWorkspace_v2");
    *(void **)&c->gemm_ex = dlsym(c->lib, "cublasGemmEx");
    if (!c->create || !c->destroy || !c->set_workspace || !c->gemm_ex) {
        snprintf(note, ncap, "%s lacks cublasCreate_v2/cublasGemmEx: GEMM not checked", name);
        return -ENOENT;
    }
    return 0;
}

static uint16_t rand_bf16(uint64_t *s)
{
    float f;
    uint32_t u;

    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    f = (float)((*s >> 11) & 0xffffff) / (float)0x800000 - 1.0f; /* [-1, 1) */
    memcpy(&u, &f, sizeof(u));
    return (uint16_t)(u >> 16);
}

/* n*n random bf16 in dev: RAND_BLOCK made on the host, then doubled by device copies. Random,
 * not zeros: zeros flatter the clocks (round2.md §8: 894 vs 788 TFLOP/s). */
static cudaError_t fill_random(uint16_t *dev, size_t count)
{
    uint16_t *h = malloc(RAND_BLOCK * sizeof(*h));
    uint64_t seed = 0x9e3779b97f4a7c15ULL;
    size_t have = count < RAND_BLOCK ? count : RAND_BLOCK;
    cudaError_t ce;

    if (h == NULL)
        return cudaErrorMemoryAllocation;
    for (size_t i = 0; i < have; i++)
        h[i] = rand_bf16(&seed);
    ce = cudaMemcpy(dev, h, have * sizeof(*h), cudaMemcpyHostToDevice);
    free(h);
    while (ce == cudaSuccess && have < count) {
        size_t step = have < count - have ? have : count - have;
        ce = cudaMemcpy(dev + have, dev, step * sizeof(*dev), cudaMemcpyDeviceToDevice);
        have += step;
    }
    return ce;
}

static cudaError_t gemm_calls(struct cublas *c, cublas_handle h, const uint16_t *a, uint16_t *out,
                              int calls, int *cublas_rc)
{
    const float alpha = 1.0f, beta = 0.0f;

    for (int i = 0; i < calls; i++) {
        /* C = A * A: A may be both inputs, cuBLAS only reads them */
        *cublas_rc = c->gemm_ex(h, CUBLAS_OP_N_, CUBLAS_OP_N_, GEMM_N, GEMM_N, GEMM_N, &alpha, a,
                                CUDA_R_16BF, GEMM_N, a, CUDA_R_16BF, GEMM_N, &beta, out,
                                CUDA_R_16BF, GEMM_N, CUBLAS_COMPUTE_32F_, CUBLAS_GEMM_DEFAULT_);
        if (*cublas_rc != 0)
            return cudaSuccess;
    }
    return cudaDeviceSynchronize(); /* the whole context: cuBLAS launches through its own runtime */
}

static int gemm(struct pf_run *run, struct cublas *c)
{
    struct pf_bench *b = &run->bench;
    size_t bytes = (size_t)GEMM_N * GEMM_N * sizeof(uint16_t);
    void *a = NULL, *out = NULL, *ws = NULL;
    cublas_handle h = NULL;
    int crc = 0, rc = 0;
    cudaError_t ce;
    double t0;

    ce = cudaMalloc(&a, bytes);
    if (ce == cudaSuccess)
        ce = cudaMalloc(&out, bytes);
    if (ce == cudaSuccess)
        ce = cudaMalloc(&ws, WORKSPACE);
    if (ce == cudaSuccess)
        ce = fill_random(a, (size_t)GEMM_N * GEMM_N);
    if (ce != cudaSuccess)
        goto out;
    if ((crc = c->create(&h)) != 0 || (crc = c->set_workspace(h, ws, WORKSPACE)) != 0)
        goto out;
    ce = gemm_calls(c, h, a, out, GEMM_WARMUP, &crc);
    if (ce != cudaSuccess || crc != 0)
        goto out;
    t0 = mc_mono_ms_f();
    ce = gemm_calls(c, h, a, out, GEMM_ITERS, &crc);
    if (ce == cudaSuccess && crc == 0) {
        double sec = (mc_mono_ms_f() - t0) / 1e3, flop = 2.0 * GEMM_N * (double)GEMM_N * GEMM_N;
        b->gemm_tflops = sec > 0 ? flop * GEMM_ITERS / sec / 1e12 : 0;
        b->gemm_n = GEMM_N;
        b->gemm_iters = GEMM_ITERS;
    }
out:
    if (crc != 0)
        snprintf(b->gemm_note, sizeof(b->gemm_note), "cuBLAS error %d: GEMM not checked", crc);
    if (ce != cudaSuccess)
        rc = pf_fail(run, PFG_EXIT_CHECK, -EIO, "CUDA error in the GEMM check on GPU %d (%s): %s",
                     run->gpu.index, run->gpu.uuid, cudaGetErrorString(ce));
    if (h != NULL)
        c->destroy(h);
    cudaFree(ws);
    cudaFree(out);
    cudaFree(a);
    return rc;
}

static cudaError_t copies(struct pf_run *run, void *dst, const void *src, uint64_t bytes, int n)
{
    cudaError_t ce = cudaSuccess;

    for (int i = 0; i < n && ce == cudaSuccess; i++)
        ce = cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyDeviceToDevice, run->stream);
    return ce == cudaSuccess ? cudaStreamSynchronize(run->stream) : ce;
}

static int hbm(struct pf_run *run)
{
    struct pf_bench *b = &run->bench;
    uint64_t bytes = HBM_BYTES;
    void *src = NULL, *dst = NULL;
    cudaError_t ce;
    double t0;

    for (;;) {
        if (cudaMalloc(&src, (size_t)bytes) == cudaSuccess &&
            cudaMalloc(&dst, (size_t)bytes) == cudaSuccess)
            break;
        (void)cudaGetLastError();
        cudaFree(src);
        src = NULL;
        if ((bytes /= 2) < HBM_MIN)
            return 0; /* no room: no figure (hbm_gbps stays 0) */
    }
    /* The contents do not matter to a copy; no fill. */
    ce = copies(run, dst, src, bytes, HBM_WARMUP);
    t0 = mc_mono_ms_f();
    if (ce == cudaSuccess)
        ce = copies(run, dst, src, bytes, HBM_ITERS);
    if (ce == cudaSuccess) {
        double sec = (mc_mono_ms_f() - t0) / 1e3;
        b->hbm_gbps = sec > 0 ? 2.0 * (double)bytes * HBM_ITERS / sec / 1e9 : 0;
        b->hbm_bytes = bytes;
        b->hbm_iters = HBM_ITERS;
    }
    cudaFree(dst);
    cudaFree(src);
    if (ce != cudaSuccess)
        return pf_fail(run, PFG_EXIT_CHECK, -EIO,
                       "CUDA error in the HBM copy check on GPU %d "
                       "(%s): %s",
                       run->gpu.index, run->gpu.uuid, cudaGetErrorString(ce));
    return 0;
}

double pf_bench_slow_factor(const char *value, int index)
{
    char *end = NULL;
    long i;
    double f;

    if (value == NULL || *value == '\0')
        return 1.0;
    i = strtol(value, &end, 10);
    if (end == value || *end != ':' || i != index)
        return 1.0;
    value = end + 1;
    f = strtod(value, &end);
    if (end == value || *end != '\0' || !(f > 0) || f > 1)
        return 1.0;
    return f;
}

int pf_bench_run(struct pf_run *run)
{
    struct pf_bench *b = &run->bench;
    struct cublas c = {0};
    double t0 = mc_mono_ms_f();
    int rc = 0;

    b->ran = 1;
    b->slow_factor = pf_bench_slow_factor(getenv(PF_SIMULATE_SLOW_ENV), run->gpu.index);
    if (pf_cublas_load(&c, b->cublas, sizeof(b->cublas), b->gemm_note, sizeof(b->gemm_note)) == 0)
        rc = gemm(run, &c);
    /* NVML right after the GEMM: the clocks and clock events of a GPU under load */
    pf_nvml_query(run->gpu.uuid, run->gpu.pci, &run->health);
    if (rc == 0)
        rc = hbm(run);
    b->gemm_tflops *= b->slow_factor;
    b->hbm_gbps *= b->slow_factor;
    /* c.lib stays loaded: unloading cuBLAS at exit races its own teardown for nothing */
    b->ms = mc_mono_ms_f() - t0;
    return rc;
}
