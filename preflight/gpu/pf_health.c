/* `muster-preflight health`: the quick check of one GPU before a restart round
 * (docs/PREFLIGHT.md "Health check before a restart round"). The agent starts one per GPU, all at
 * once, on a node whose ranks failed or hung:
 *   1. the killed workers' GPU memory: NVML's compute processes of the GPU, polled until none is
 *      one of --pids (at most --drain-ms); one still there then fails the GPU;
 *   2. a short bf16 GEMM (n = 4096, all ones, 2 warm-ups and 10 timed calls, about 1.4 GFLOP
 *      each): every element of the result must be exactly n (a wrong one is silent corruption),
 *      any CUDA error fails (a GPU after an Xid 79 or 48 does not get this far);
 *   3. NVML health as the pre-flight judges it (preflight/health.c): uncorrected ECC errors since
 *      the driver loaded and a row-remap failure fail, the rest warns.
 * Not checked: Xid events (NVML reports them only to a listener registered before they happen);
 * their effects are what fails here. Everything is bounded by --timeout-ms on the agent's side
 * (it kills this process). */
#include "pf_health.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "clock.h"
#include "health.h"
#include "log.h"
#include "pf_bench.h"
#include "pf_gpu.h"
#include "pf_nvml.h"

#define QUICK_N 4096
#define QUICK_WARMUP 2
#define QUICK_ITERS 10
#define FILL_BLOCK (1u << 20)

struct check {
    int device;
    struct pf_gpu gpu;
    const char *reason_file;
    int failed;
    char line[1024]; /* the result line (stdout) */
};

/* One line "GPU I (UUID, PCI): text" to stderr and to the agent's reason file (appended: the
 * GPUs' checks share it; one write each, so lines do not mix). Returns PFG_EXIT_CHECK. */
static int fail(struct check *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(struct check *c, const char *fmt, ...)
{
    char text[768], line[1024];
    va_list ap;
    int fd, n;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    n = snprintf(line, sizeof(line), "GPU %d (%s, %s): %s\n", c->device,
                 c->gpu.uuid[0] ? c->gpu.uuid : "?", c->gpu.pci[0] ? c->gpu.pci : "?", text);
    if (n < 0 || n >= (int)sizeof(line)) { /* cut: still one whole line */
        n = (int)sizeof(line) - 1;
        line[n - 1] = '\n';
    }
    mc_error("health: %.*s", n - 1, line);
    if (c->reason_file != NULL &&
        (fd = open(c->reason_file, O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC)) >= 0) {
        if (write(fd, line, (size_t)n) != n)
            mc_warn("health: reason file %s: %s", c->reason_file, strerror(errno));
        close(fd);
    }
    c->failed = 1;
    return PFG_EXIT_CHECK;
}

static cudaError_t fill_ones(uint16_t *dev, size_t count)
{
    uint16_t *h = malloc(FILL_BLOCK * sizeof(*h));
    size_t have = count < FILL_BLOCK ? count : FILL_BLOCK;
    cudaError_t ce;

    if (h == NULL)
        return cudaErrorMemoryAllocation;
    for (size_t i = 0; i < have; i++)
        h[i] = pf_bf16_from_float(1.0f);
    ce = cudaMemcpy(dev, h, have * sizeof(*h), cudaMemcpyHostToDevice);
    free(h);
    while (ce == cudaSuccess && have < count) {
        size_t step = have < count - have ? have : count - have;
        ce = cudaMemcpy(dev + have, dev, step * sizeof(*dev), cudaMemcpyDeviceToDevice);
        have += step;
    }
    return ce;
}

/* The quick GEMM; *tflops 0 and note set when cuBLAS is missing (no failure: the other checks
 * still ran, as in the pre-flight). Returns 0 or PFG_EXIT_CHECK (said). */
static int quick_gemm(struct check *c, double *tflops, char *note, size_t ncap)
{
    static struct cublas cb; /* loaded once; kept (unloading races its teardown) */
    size_t count = (size_t)QUICK_N * QUICK_N, bytes = count * sizeof(uint16_t);
    const float alpha = 1.0f, beta = 0.0f;
    char name[128];
    uint16_t *a = NULL, *out = NULL, *host = NULL;
    cublas_handle h = NULL;
    cudaError_t ce = cudaSuccess;
    int crc = 0, rc = 0;
    long wrong;
    double t0 = 0;

    *tflops = 0;
    if (pf_cublas_load(&cb, name, sizeof(name), note, ncap) != 0)
        return 0;
    if ((ce = cudaMalloc((void **)&a, bytes)) != cudaSuccess ||
        (ce = cudaMalloc((void **)&out, bytes)) != cudaSuccess) {
        rc = fail(c, "cannot allocate %zu MiB for the GEMM: %s (memory still held?)",
                  2 * bytes >> 20, cudaGetErrorString(ce));
        goto out;
    }
    if ((ce = fill_ones(a, count)) != cudaSuccess || (crc = cb.create(&h)) != 0)
        goto out;
    for (int i = 0; i < QUICK_WARMUP + QUICK_ITERS && crc == 0 && ce == cudaSuccess; i++) {
        if (i == QUICK_WARMUP) {
            ce = cudaDeviceSynchronize();
            t0 = mc_mono_ms_f();
        }
        crc = cb.gemm_ex(h, CUBLAS_OP_N_, CUBLAS_OP_N_, QUICK_N, QUICK_N, QUICK_N, &alpha, a,
                         CUDA_R_16BF, QUICK_N, a, CUDA_R_16BF, QUICK_N, &beta, out, CUDA_R_16BF,
                         QUICK_N, CUBLAS_COMPUTE_32F_, CUBLAS_GEMM_DEFAULT_);
    }
    if (crc == 0 && ce == cudaSuccess && (ce = cudaDeviceSynchronize()) == cudaSuccess) {
        double sec = (mc_mono_ms_f() - t0) / 1e3;
        *tflops =
            sec > 0 ? 2.0 * QUICK_N * (double)QUICK_N * QUICK_N * QUICK_ITERS / sec / 1e12 : 0;
    }
    if (crc != 0 || ce != cudaSuccess)
        goto out;
    if ((host = malloc(bytes)) == NULL) {
        rc = fail(c, "no host memory for the GEMM's result");
        goto out;
    }
    if ((ce = cudaMemcpy(host, out, bytes, cudaMemcpyDeviceToHost)) != cudaSuccess)
        goto out;
    if ((wrong = pf_health_gemm_wrong(host, count, QUICK_N)) >= 0)
        rc = fail(c, "bf16 GEMM result wrong at [%ld][%ld]: %g, not %d (silent data corruption)",
                  wrong / QUICK_N, wrong % QUICK_N, (double)pf_bf16_to_float(host[wrong]), QUICK_N);
out:
    if (rc == 0 && crc != 0)
        rc = fail(c, "cuBLAS error %d in the GEMM", crc);
    if (rc == 0 && ce != cudaSuccess)
        rc = fail(c, "CUDA error in the GEMM: %s", cudaGetErrorString(ce));
    free(host);
    if (h != NULL)
        cb.destroy(h);
    cudaFree(out);
    cudaFree(a);
    return rc;
}

static int parse_num(const char *s, long lo, long hi, long *out)
{
    char *end = NULL;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
        return -EINVAL;
    *out = v;
    return 0;
}

static const char usage[] = "usage: muster-preflight health [--device N] [--drain-ms MS] "
                            "[--timeout-ms MS] [--pids P,P,...] [--reason-file FILE]";

int pf_health_main(int argc, char **argv)
{
    static int pids[PF_HEALTH_PIDS_MAX];
    struct check c = {.device = 0};
    long device = 0, drain_ms = 10000, timeout_ms = 30000, v;
    int npids = 0, rc = 0, ndev = 0;
    struct pf_health h;
    struct pf_health_issue is[PF_HEALTH_MAX_ISSUES];
    struct pf_drain d;
    char err[512], summary[512], note[256] = "", gemm[160], drained[160];
    const char *sim = getenv(PF_SIMULATE_HEALTH_FAIL_ENV);
    double t0 = mc_mono_ms_f(), tflops = 0;
    int nis;

    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL, *eq = strchr(o, '=');
        char name[32];

        if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0) {
            puts(usage);
            return PFG_EXIT_OK;
        }
        if (eq != NULL && eq - o < (long)sizeof(name)) {
            snprintf(name, sizeof(name), "%.*s", (int)(eq - o), o);
            o = name;
            val = eq + 1;
        } else if (val != NULL) {
            i++;
        }
        if (val == NULL) {
            mc_error("health: %s needs a value (%s)", o, usage);
            return PFG_EXIT_USAGE;
        }
        if (strcmp(o, "--device") == 0 && parse_num(val, 0, 1023, &v) == 0)
            device = v;
        else if (strcmp(o, "--drain-ms") == 0 && parse_num(val, 0, 3600000, &v) == 0)
            drain_ms = v;
        else if (strcmp(o, "--timeout-ms") == 0 && parse_num(val, 1, 3600000, &v) == 0)
            timeout_ms = v;
        else if (strcmp(o, "--pids") == 0 &&
                 (npids = pf_health_parse_pids(val, pids, PF_HEALTH_PIDS_MAX)) >= 0)
            ;
        else if (strcmp(o, "--reason-file") == 0 && val[0] != '\0')
            c.reason_file = val;
        else {
            mc_error("health: bad option or value: %s %s (%s)", o, val, usage);
            return PFG_EXIT_USAGE;
        }
    }
    (void)timeout_ms; /* the agent enforces it (kills this process); kept for symmetry */
    c.device = (int)device;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev <= c.device)
        return fail(&c, "CUDA does not see it (%d device%s visible)", ndev, ndev == 1 ? "" : "s");
    if (pf_gpu_query(c.device, &c.gpu, err, sizeof(err)) != 0)
        return fail(&c, "CUDA cannot query it: %s", err);
    /* 1. before this process's own context: the killed workers' memory */
    pf_nvml_wait_drain(c.gpu.uuid, c.gpu.pci, pids, npids, (int)drain_ms, &d);
    if (d.nvml && d.held_pid > 0)
        return fail(&c,
                    "killed worker pid %d still holds %.1f GiB of its memory after %.1f s "
                    "(--health-drain-timeout)",
                    d.held_pid, d.held_bytes == ~0ULL ? -1.0 : d.held_bytes / 1073741824.0,
                    d.waited_ms / 1000.0);
    /* 2. the GEMM, 3. NVML right after it (clocks under load, as the pre-flight) */
    if (cudaSetDevice(c.device) != cudaSuccess || cudaFree(NULL) != cudaSuccess)
        return fail(&c, "cannot create a CUDA context: %s", cudaGetErrorString(cudaGetLastError()));
    if ((rc = quick_gemm(&c, &tflops, note, sizeof(note))) != 0)
        return rc;
    pf_nvml_query(c.gpu.uuid, c.gpu.pci, &h);
    nis = pf_health_judge(&h, is, PF_HEALTH_MAX_ISSUES);
    if (nis > PF_HEALTH_MAX_ISSUES)
        nis = PF_HEALTH_MAX_ISSUES;
    for (int i = 0; i < nis; i++)
        if (is[i].level == PF_HEALTH_FAIL)
            return fail(&c, "NVML: %s", is[i].text);
    if (sim != NULL && parse_num(sim, 0, 1023, &v) == 0 && v == c.device)
        return fail(&c, "simulated failure (%s, test only)", PF_SIMULATE_HEALTH_FAIL_ENV);
    pf_health_summary(&h, summary, sizeof(summary));
    if (tflops > 0)
        snprintf(gemm, sizeof(gemm), "bf16 GEMM %d^3 x%d exact, %.1f TFLOP/s", QUICK_N, QUICK_ITERS,
                 tflops);
    else
        snprintf(gemm, sizeof(gemm), "%s", note);
    if (!d.nvml)
        snprintf(drained, sizeof(drained), "memory release not checked (NVML lists no processes)");
    else
        snprintf(drained, sizeof(drained), "%s after %.2f s, %.1f of %.1f GiB used",
                 npids == 0 ? "no killed worker to wait for"
                            : "the killed workers' memory released",
                 d.waited_ms / 1000.0, d.used / 1073741824.0, d.total / 1073741824.0);
    printf("muster-preflight: health: GPU %d (%s): ok in %.2f s: %s; %s; NVML: %s\n", c.device,
           c.gpu.uuid, (mc_mono_ms_f() - t0) / 1000.0, drained, gemm, summary);
    for (int i = 0; i < nis; i++)
        if (is[i].level == PF_HEALTH_WARN)
            printf("  ~ GPU %d (%s): %s\n", c.device, c.gpu.uuid, is[i].text);
    fflush(stdout);
    return PFG_EXIT_OK;
}
