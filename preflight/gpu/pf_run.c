#include "log.h"
#include "pf_run.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <muster.h>

#include "pf_bench.h"
#include "pf_gpu.h"
#include "pf_kv.h"
#include "pf_report.h"
#include "pf_stage.h"
#include "clock.h"

int pf_fail(struct pf_run *run, int exit_code, int err, const char *fmt, ...)
{
    va_list ap;

    if (run->error[0] == '\0') {
        va_start(ap, fmt);
        vsnprintf(run->error, sizeof(run->error), fmt, ap);
        va_end(ap);
        if (run->error[0] == '\0')
            snprintf(run->error, sizeof(run->error), "unknown error");
        /* One line, whatever NCCL's last-error text contains. */
        for (char *c = run->error; *c; c++)
            if (*c == '\n' || *c == '\r' || *c == '\t')
                *c = ' ';
        run->exit_code = exit_code;
        mc_error("%s", run->error);
    }
    return err < 0 ? err : -EIO;
}

int pf_left_ms(double deadline_ms)
{
    double left = deadline_ms - mc_mono_ms_f();

    if (left <= 0)
        return 0;
    if (left >= (double)INT_MAX)
        return INT_MAX;
    return (int)left + 1; /* round up: 0 would turn a wait into a non-blocking look-up */
}

/* One device buffer of --max-bytes; when cudaMalloc fails, halve it down to --min-bytes. The
 * size each rank got is published (pf/mem) and all ranks sweep up to the smallest, so no two
 * ranks ever call an all-reduce with different counts (that would hang). */
static int alloc_buffer(struct pf_run *run)
{
    uint64_t size = run->opts.max_bytes, min = run->opts.min_bytes;
    cudaError_t ce;

    for (;;) {
        void *p = NULL;
        ce = cudaMalloc(&p, (size_t)size);
        if (ce == cudaSuccess) {
            run->dbuf = p;
            run->buf_bytes = size;
            break;
        }
        (void)cudaGetLastError(); /* an allocation failure is not sticky; clear it anyway */
        if (size <= min)
            return pf_fail(run, PFG_EXIT_START, -ENOMEM,
                           "cudaMalloc of %" PRIu64 " bytes on GPU %d (%s) failed: %s", size,
                           run->gpu.index, run->gpu.uuid, cudaGetErrorString(ce));
        size = (size / 2) & ~(uint64_t)3;
        if (size < min)
            size = min;
    }
    /* Defined contents: the sweep then sums zeros, never NaNs or denormals. */
    ce = cudaMemsetAsync(run->dbuf, 0, (size_t)run->buf_bytes, run->stream);
    if (ce == cudaSuccess)
        ce = cudaStreamSynchronize(run->stream);
    if (ce != cudaSuccess)
        return pf_fail(run, PFG_EXIT_START, -EIO, "cudaMemset on GPU %d failed: %s", run->gpu.index,
                       cudaGetErrorString(ce));
    return 0;
}

static int pick_device(struct pf_run *run, int *dev)
{
    int count = 0;
    cudaError_t ce = cudaGetDeviceCount(&count);
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");

    if (ce != cudaSuccess)
        return pf_fail(run, PFG_EXIT_START, -ENODEV, "CUDA cannot start: %s",
                       cudaGetErrorString(ce));
    if (count <= 0)
        return pf_fail(run, PFG_EXIT_START, -ENODEV,
                       "CUDA cannot start: no CUDA device is visible");
    /* Default LOCAL_RANK; but when the node process gave us exactly one GPU through
     * CUDA_VISIBLE_DEVICES, that one is ordinal 0 whatever our LOCAL_RANK. */
    *dev = run->opts.device >= 0 ? run->opts.device : count == 1 ? 0 : run->env.local_rank;
    if (*dev >= count)
        return pf_fail(run, run->opts.device >= 0 ? PFG_EXIT_USAGE : PFG_EXIT_START, -ENODEV,
                       "GPU %d does not exist: CUDA sees %d device(s) (CUDA_VISIBLE_DEVICES=%s)",
                       *dev, count, cvd ? cvd : "unset");
    return 0;
}

static int setup_gpu(struct pf_run *run)
{
    char err[512];
    int dev = 0, rc;
    cudaError_t ce;

    if ((rc = pick_device(run, &dev)) < 0)
        return rc;
    ce = cudaSetDevice(dev);
    if (ce != cudaSuccess)
        return pf_fail(run, PFG_EXIT_START, -EIO, "cudaSetDevice(%d) failed: %s", dev,
                       cudaGetErrorString(ce));
    if (pf_gpu_query(dev, &run->gpu, err, sizeof(err)) < 0)
        return pf_fail(run, PFG_EXIT_START, -EIO, "%s", err);
    run->have_gpu = 1;
    ce = cudaStreamCreateWithFlags(&run->stream, cudaStreamNonBlocking);
    if (ce != cudaSuccess)
        return pf_fail(run, PFG_EXIT_START, -EIO, "cudaStreamCreate on GPU %d failed: %s", dev,
                       cudaGetErrorString(ce));
    run->have_stream = 1;
    return alloc_buffer(run);
}

/* A "node" stage among this node's ranks first when there are several nodes with several GPUs
 * each (it separates a bad intra-node link from a bad network), then "all". The node's ranks
 * are RANK - LOCAL_RANK .. + LOCAL_WORLD_SIZE - 1, as the agent numbers them. */
static int run_stages(struct pf_run *run)
{
    const struct pf_env *e = &run->env;
    struct pf_stage_spec spec;
    char node_key[64];
    int rc;

    if (e->group_world > 1 && e->local_world > 1) {
        snprintf(node_key, sizeof(node_key), "pf/id/node/%d", e->group_rank);
        spec = (struct pf_stage_spec){"node", node_key, e->rank - e->local_rank, e->local_world,
                                      e->local_rank};
        rc = pf_stage_run(run, &spec, &run->stages[run->nstages++]);
        if (rc < 0)
            return rc;
    }
    spec = (struct pf_stage_spec){"all", "pf/id/all", 0, e->world, e->rank};
    return pf_stage_run(run, &spec, &run->stages[run->nstages++]);
}

static int connect_muster(struct pf_run *run)
{
    int rc = muster_connect(&run->m);

    if (rc < 0) {
        run->m = NULL;
        return pf_fail(run, PFG_EXIT_START, rc, "cannot connect to the muster server: %s",
                       muster_strerror(rc));
    }
    return 0;
}

int pf_allreduce_run(struct pf_run *run)
{
    int rc;

    if (gethostname(run->host, sizeof(run->host) - 1) < 0)
        snprintf(run->host, sizeof(run->host), "unknown");
    rc = connect_muster(run);
    if (rc == 0)
        rc = setup_gpu(run);
    if (rc == 0)
        rc = pf_kv_publish(run);
    if (rc == 0)
        rc = pf_kv_check_gpus(run);
    if (rc == 0)
        rc = run_stages(run);
    /* After the collectives, so no rank waits on another's GEMM */
    if (rc == 0)
        rc = pf_bench_run(run);
    if (rc < 0 && run->error[0] == '\0')
        pf_fail(run, PFG_EXIT_START, rc, "internal error: %s", strerror(-rc));
    pf_kv_report_error(run);
    if (pf_report_write(run) < 0 && run->exit_code == PFG_EXIT_OK)
        run->exit_code = PFG_EXIT_START;
    if (run->dbuf != NULL)
        cudaFree(run->dbuf);
    if (run->have_stream)
        cudaStreamDestroy(run->stream);
    muster_close(run->m);
    return run->exit_code;
}
