/* `muster-preflight p2p`: see pf_p2p.h. Plain C against the CUDA runtime, no kernels. */
#include "log.h"
#include "pf_p2p.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <jansson.h>

#include "exitcode.h"
#include "pf_gpu.h"
#include "safefile.h"

#define P2P_MAX_GPUS 64
#define P2P_BYTES (256ULL << 20) /* per copy; halved while cudaMalloc fails */
#define P2P_MIN_BYTES (16ULL << 20)
#define P2P_WARMUP 2
#define P2P_ITERS 10

double pf_p2p_slow_factor(const char *value, int src, int dst)
{
    int s, d, used = 0;
    double f;

    if (value == NULL || sscanf(value, "%d:%d:%lf%n", &s, &d, &f, &used) != 3 ||
        value[used] != '\0' || s != src || d != dst || !(f > 0 && f <= 1))
        return 1;
    return f;
}

struct p2p {
    int n;
    uint64_t bytes;
    void *buf[P2P_MAX_GPUS];
    cudaStream_t stream[P2P_MAX_GPUS];
    double gbps[P2P_MAX_GPUS][P2P_MAX_GPUS];
    int access[P2P_MAX_GPUS][P2P_MAX_GPUS];
    char error[512];
};

static int cuda_err(struct p2p *p, const char *what, int a, int b, cudaError_t ce)
{
    if (ce == cudaSuccess)
        return 0;
    snprintf(p->error, sizeof(p->error), "%s (GPU %d -> GPU %d): %s", what, a, b,
             cudaGetErrorString(ce));
    return -EIO;
}

/* One buffer and one stream per device, the same size on all, peer access where possible. */
static int setup(struct p2p *p)
{
    cudaError_t ce;

    for (p->bytes = P2P_BYTES;; p->bytes /= 2) {
        int ok = 1;
        for (int i = 0; i < p->n && ok; i++) {
            if (cudaSetDevice(i) != cudaSuccess || cudaMalloc(&p->buf[i], p->bytes) != cudaSuccess)
                ok = 0;
        }
        if (ok)
            break;
        (void)cudaGetLastError();
        for (int i = 0; i < p->n; i++) {
            if (p->buf[i] != NULL) {
                cudaSetDevice(i);
                cudaFree(p->buf[i]);
                p->buf[i] = NULL;
            }
        }
        if (p->bytes / 2 < P2P_MIN_BYTES) {
            snprintf(p->error, sizeof(p->error), "cannot allocate %llu bytes on every GPU",
                     (unsigned long long)P2P_MIN_BYTES);
            return -ENOMEM;
        }
    }
    for (int i = 0; i < p->n; i++) {
        cudaSetDevice(i);
        if ((ce = cudaStreamCreateWithFlags(&p->stream[i], cudaStreamNonBlocking)) != cudaSuccess)
            return cuda_err(p, "cudaStreamCreate", i, i, ce);
        for (int j = 0; j < p->n; j++) {
            int can = 0;
            if (i == j || cudaDeviceCanAccessPeer(&can, i, j) != cudaSuccess || !can)
                continue;
            ce = cudaDeviceEnablePeerAccess(j, 0);
            if (ce == cudaErrorPeerAccessAlreadyEnabled)
                ce = cudaSuccess;
            (void)cudaGetLastError();
            p->access[i][j] = ce == cudaSuccess;
        }
    }
    return 0;
}

static cudaError_t copies(struct p2p *p, int s, int d, int n)
{
    cudaError_t ce = cudaSuccess;

    for (int k = 0; k < n && ce == cudaSuccess; k++)
        ce = cudaMemcpyPeerAsync(p->buf[d], d, p->buf[s], s, (size_t)p->bytes, p->stream[s]);
    return ce;
}

/* s -> d, timed with events on the source's stream. */
static int measure(struct p2p *p, int s, int d)
{
    cudaEvent_t start = NULL, stop = NULL;
    cudaError_t ce;
    float ms = 0;

    cudaSetDevice(s);
    if ((ce = cudaEventCreate(&start)) == cudaSuccess)
        ce = cudaEventCreate(&stop);
    if (ce == cudaSuccess)
        ce = copies(p, s, d, P2P_WARMUP);
    if (ce == cudaSuccess)
        ce = cudaEventRecord(start, p->stream[s]);
    if (ce == cudaSuccess)
        ce = copies(p, s, d, P2P_ITERS);
    if (ce == cudaSuccess)
        ce = cudaEventRecord(stop, p->stream[s]);
    if (ce == cudaSuccess)
        ce = cudaEventSynchronize(stop);
    if (ce == cudaSuccess)
        ce = cudaEventElapsedTime(&ms, start, stop);
    if (start != NULL)
        cudaEventDestroy(start);
    if (stop != NULL)
        cudaEventDestroy(stop);
    if (ce != cudaSuccess)
        return cuda_err(p, "cudaMemcpyPeerAsync", s, d, ce);
    p->gbps[s][d] = ms > 0 ? (double)p->bytes * P2P_ITERS / (ms / 1e3) / 1e9 : 0;
    p->gbps[s][d] *= pf_p2p_slow_factor(getenv(PF_SIMULATE_SLOW_P2P_ENV), s, d);
    return 0;
}

static void teardown(struct p2p *p)
{
    for (int i = 0; i < p->n; i++) {
        cudaSetDevice(i);
        if (p->stream[i] != NULL)
            cudaStreamDestroy(p->stream[i]);
        cudaFree(p->buf[i]);
    }
}

static json_t *matrix_json(struct p2p *p, int want_access)
{
    json_t *rows = json_array();

    for (int s = 0; s < p->n; s++) {
        json_t *row = json_array();
        for (int d = 0; d < p->n; d++)
            json_array_append_new(row, want_access ? json_integer(p->access[s][d])
                                                   : json_real(s == d ? 0 : p->gbps[s][d]));
        json_array_append_new(rows, row);
    }
    return rows;
}

static int emit(json_t *o, const char *out)
{
    char *text = json_dumps(o, JSON_COMPACT);
    int rc = 0;

    if (text == NULL)
        return PFG_EXIT_START;
    if (out != NULL)
        rc = mc_file_replace(out, text, strlen(text), 0600);
    else
        puts(text);
    free(text);
    if (rc != 0) {
        mc_error("cannot write %s: %s", out, strerror(-rc));
        return PFG_EXIT_START;
    }
    return PFG_EXIT_OK;
}

static int usage(const char *what)
{
    mc_error("p2p: %s (see muster-preflight --help)", what);
    return PFG_EXIT_USAGE;
}

int pf_p2p_main(int argc, char **argv)
{
    static struct p2p p; /* ~65 KB of figures: not on the stack */
    const char *out = NULL;
    int count = 0, want = -1, rc = 0;
    json_t *o, *gpus = json_array();
    cudaError_t ce;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--out") == 0 && i + 1 < argc && argv[i + 1][0] != '\0')
            out = argv[++i];
        else if (strcmp(argv[i], "--devices") == 0 && i + 1 < argc)
            want = atoi(argv[++i]);
        else
            return usage("expected [--devices N] [--out FILE]");
    }
    if ((ce = cudaGetDeviceCount(&count)) != cudaSuccess) {
        mc_error("cudaGetDeviceCount: %s", cudaGetErrorString(ce));
        return PFG_EXIT_START;
    }
    p.n = want >= 0 && want < count ? want : count;
    if (p.n > P2P_MAX_GPUS)
        p.n = P2P_MAX_GPUS;
    for (int i = 0; i < p.n; i++) {
        struct pf_gpu g;
        char err[256];
        if (pf_gpu_query(i, &g, err, sizeof(err)) == 0)
            json_array_append_new(
                gpus, json_pack("{s:i, s:s, s:s}", "index", i, "uuid", g.uuid, "pci", g.pci));
        else
            json_array_append_new(gpus, json_pack("{s:i, s:s}", "index", i, "uuid", "?"));
    }
    o = json_pack("{s:o}", "gpus", gpus);
    if (p.n < 2) {
        json_object_set_new(o, "skipped", json_string("fewer than 2 GPUs: no peer-to-peer pairs"));
        rc = emit(o, out);
        json_decref(o);
        return rc;
    }
    rc = setup(&p);
    for (int s = 0; rc == 0 && s < p.n; s++)
        for (int d = 0; rc == 0 && d < p.n; d++)
            if (s != d)
                rc = measure(&p, s, d);
    teardown(&p);
    json_object_set_new(o, "bytes", json_integer((json_int_t)p.bytes));
    json_object_set_new(o, "iters", json_integer(P2P_ITERS));
    json_object_set_new(o, "warmup", json_integer(P2P_WARMUP));
    json_object_set_new(o, "gbps", matrix_json(&p, 0));
    json_object_set_new(o, "peer_access", matrix_json(&p, 1));
    if (getenv(PF_SIMULATE_SLOW_P2P_ENV) != NULL)
        json_object_set_new(o, "simulated_slow", json_string(getenv(PF_SIMULATE_SLOW_P2P_ENV)));
    if (rc != 0) {
        json_object_set_new(o, "error", json_string(p.error));
        json_object_del(o, "gbps"); /* no partial matrix: the node says why there is none */
        mc_error("%s", p.error);
    }
    int erc = emit(o, out);
    json_decref(o);
    return rc != 0 ? PFG_EXIT_CHECK : erc;
}
