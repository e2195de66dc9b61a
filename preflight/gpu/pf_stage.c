#include "pf_stage.h"

#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
#include <muster.h>
#include <nccl.h>

#include "busbw.h"
#include "pf_kv.h"
#include "clock.h"

#define SWEEP_FACTOR 4

struct stage {
    struct pf_run *run;
    const struct pf_stage_spec *spec;
    struct pf_stage_result *st;
    ncclComm_t comm;
};

static double timeout_s(const struct stage *s)
{
    return s->run->opts.timeout_ms / 1000.0;
}

static int nccl_fail(struct stage *s, ncclResult_t rc, const char *what)
{
    /* ncclGetLastError may describe an earlier asynchronous error: still the best clue. */
    const char *last = ncclGetLastError(s->comm);

    if (last == NULL)
        last = "";
    return pf_fail(s->run, PFG_EXIT_CHECK, -EIO, "NCCL %s (stage %s) failed: %s%s%s", what,
                   s->spec->name, ncclGetErrorString(rc), *last ? ": " : "", last);
}

static int cuda_fail(struct stage *s, cudaError_t ce, const char *what, uint64_t bytes)
{
    return pf_fail(s->run, PFG_EXIT_CHECK, -EIO,
                   "CUDA error in %s (stage %s, %" PRIu64 " bytes): %s", what, s->spec->name, bytes,
                   cudaGetErrorString(ce));
}

static void sleep_1ms(void)
{
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
}

/* Polls a non-blocking operation (init, a launch that answered ncclInProgress, finalize) until
 * it leaves ncclInProgress. Returns 0, -ETIMEDOUT at the deadline (not recorded: the caller
 * names what is missing), or a recorded NCCL error. `nap` sleeps 1 ms between polls (init,
 * finalize); otherwise the poll only yields (launches, where sleeping would distort timings). */
static int poll_ready(struct stage *s, double deadline, int nap, const char *what)
{
    for (;;) {
        ncclResult_t state = ncclInProgress;
        ncclResult_t rc = ncclCommGetAsyncError(s->comm, &state);

        if (rc != ncclSuccess)
            return nccl_fail(s, rc, what);
        if (state == ncclSuccess)
            return 0;
        if (state != ncclInProgress)
            return nccl_fail(s, state, what);
        if (mc_mono_ms_f() >= deadline)
            return -ETIMEDOUT;
        if (nap)
            sleep_1ms();
        else
            sched_yield();
    }
}

/* nccl-tests' testStreamSynchronize: query the stream, and between queries the communicator's
 * asynchronous error, so a dead peer turns into an error or a timeout instead of a hang. */
static int wait_stream(struct stage *s, double deadline, const char *what, uint64_t bytes)
{
    for (;;) {
        cudaError_t ce = cudaStreamQuery(s->run->stream);
        ncclResult_t state = ncclSuccess, rc;

        if (ce == cudaSuccess)
            return 0;
        if (ce != cudaErrorNotReady)
            return cuda_fail(s, ce, what, bytes);
        rc = ncclCommGetAsyncError(s->comm, &state);
        if (rc != ncclSuccess)
            return nccl_fail(s, rc, what);
        if (state != ncclSuccess && state != ncclInProgress)
            return nccl_fail(s, state, what);
        if (mc_mono_ms_f() >= deadline)
            return pf_fail(s->run, PFG_EXIT_MISSING, -ETIMEDOUT,
                           "%s (stage %s, %" PRIu64 " bytes) did not complete within %g s", what,
                           s->spec->name, bytes, timeout_s(s));
        sched_yield();
    }
}

/* One in-place float sum over the first `count` floats of the device buffer. On a non-blocking
 * communicator the call may answer ncclInProgress (e.g. while NCCL connects peers lazily on
 * the first collective); then it must be polled to completion before the next NCCL call. */
static int launch(struct stage *s, size_t count, double deadline)
{
    ncclResult_t rc = ncclAllReduce(s->run->dbuf, s->run->dbuf, count, ncclFloat, ncclSum, s->comm,
                                    s->run->stream);
    int err;

    if (rc == ncclSuccess)
        return 0;
    if (rc != ncclInProgress)
        return nccl_fail(s, rc, "all-reduce");
    err = poll_ready(s, deadline, 0, "all-reduce");
    if (err == -ETIMEDOUT)
        return pf_fail(s->run, PFG_EXIT_MISSING, err,
                       "all-reduce launch (stage %s, %zu bytes) did not complete within %g s",
                       s->spec->name, count * sizeof(float), timeout_s(s));
    return err;
}

static int get_id(struct stage *s, ncclUniqueId *id)
{
    struct pf_run *run = s->run;
    char desc[600];
    size_t len = 0;
    int rc;

    if (s->spec->my_rank == 0) {
        ncclResult_t nr = ncclGetUniqueId(id);
        if (nr != ncclSuccess)
            return pf_fail(run, PFG_EXIT_START, -EIO, "ncclGetUniqueId (stage %s) failed: %s",
                           s->spec->name, ncclGetErrorString(nr));
        rc = muster_kv_put(run->m, s->spec->id_key, id, sizeof(*id));
        if (rc < 0)
            return pf_fail(run, PFG_EXIT_START, rc, "muster KV put %s: %s", s->spec->id_key,
                           muster_strerror(rc));
        return 0;
    }
    rc = pf_kv_get_until(run, s->spec->id_key, id, sizeof(*id), &len,
                         mc_mono_ms_f() + run->opts.timeout_ms);
    if (rc == -ETIMEDOUT || rc == -ENOENT) {
        pf_kv_rank_desc(run, s->spec->first, desc, sizeof(desc));
        return pf_fail(run, PFG_EXIT_MISSING, -ETIMEDOUT,
                       "%s did not publish the NCCL id of stage %s within %g s", desc,
                       s->spec->name, timeout_s(s));
    }
    if (rc < 0)
        return rc;
    if (len != sizeof(*id))
        return pf_fail(run, PFG_EXIT_START, -EPROTO, "%s holds %zu bytes, not an NCCL id (%zu)",
                       s->spec->id_key, len, sizeof(*id));
    return 0;
}

static int put_stage_flag(struct stage *s, const char *what)
{
    char key[96];

    snprintf(key, sizeof(key), "pf/%s/%s/%d", what, s->spec->name, s->run->env.rank);
    return pf_kv_put_text(s->run, key, "1");
}

static int init_timeout(struct stage *s)
{
    char prefix[64], ready[1536], started[1536];
    const struct pf_stage_spec *sp = s->spec;
    int nready, nstart;

    snprintf(prefix, sizeof(prefix), "pf/ready/%s", sp->name);
    nready = pf_kv_list_missing(s->run, prefix, sp->first, sp->nranks, s->run->env.rank, ready,
                                sizeof(ready));
    snprintf(prefix, sizeof(prefix), "pf/init/%s", sp->name);
    nstart = pf_kv_list_missing(s->run, prefix, sp->first, sp->nranks, s->run->env.rank, started,
                                sizeof(started));
    return pf_fail(s->run, PFG_EXIT_MISSING, -ETIMEDOUT,
                   "NCCL init (stage %s) timed out after %g s; not ready: %s%s%s", sp->name,
                   timeout_s(s), nready ? ready : "none besides this rank",
                   nstart ? "; init not started: " : "", nstart ? started : "");
}

static int init_comm(struct stage *s, const ncclUniqueId *id)
{
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    double t0, deadline;
    ncclResult_t nr;
    int rc;

    cfg.blocking = 0;
    if ((rc = put_stage_flag(s, "init")) < 0)
        return rc;
    t0 = mc_mono_ms_f();
    deadline = t0 + s->run->opts.timeout_ms;
    nr = ncclCommInitRankConfig(&s->comm, s->spec->nranks, *id, s->spec->my_rank, &cfg);
    if (nr != ncclSuccess && nr != ncclInProgress)
        return nccl_fail(s, nr, "init");
    rc = poll_ready(s, deadline, 1, "init");
    if (rc == -ETIMEDOUT)
        return init_timeout(s);
    if (rc < 0)
        return rc;
    s->st->init_ms = mc_mono_ms_f() - t0;
    s->st->init_done = 1;
    return put_stage_flag(s, "ready");
}

/* Compares every element; names the first wrong one and counts them all. */
static int compare(struct stage *s, const float *h, size_t count)
{
    size_t wrong = 0, first = 0;

    for (size_t i = 0; i < count; i++) {
        if (h[i] != pf_check_expected(s->spec->nranks, i)) {
            if (wrong++ == 0)
                first = i;
        }
    }
    if (wrong == 0)
        return 0;
    return pf_fail(s->run, PFG_EXIT_CHECK, -EBADMSG,
                   "all-reduce result wrong on rank %d (stage %s, %d ranks): element %zu is %.9g, "
                   "expected %.9g (%zu of %zu elements wrong)",
                   s->run->env.rank, s->spec->name, s->spec->nranks, first, (double)h[first],
                   (double)pf_check_expected(s->spec->nranks, first), wrong, count);
}

static int check_sum(struct stage *s)
{
    struct pf_run *run = s->run;
    size_t count = (size_t)(run->opts.min_bytes / sizeof(float)), bytes = count * sizeof(float);
    float *h = malloc(bytes);
    double deadline = mc_mono_ms_f() + run->opts.timeout_ms;
    cudaError_t ce;
    int rc;

    if (h == NULL)
        return pf_fail(run, PFG_EXIT_START, -ENOMEM, "out of memory (%zu bytes)", bytes);
    for (size_t i = 0; i < count; i++)
        h[i] = pf_check_value(s->spec->my_rank, s->spec->nranks, i);
    ce = cudaMemcpyAsync(run->dbuf, h, bytes, cudaMemcpyHostToDevice, run->stream);
    if (ce != cudaSuccess) {
        rc = cuda_fail(s, ce, "copy to the GPU", bytes);
        goto out;
    }
    if ((rc = wait_stream(s, deadline, "copy to the GPU", bytes)) < 0)
        goto out;
    if ((rc = launch(s, count, deadline)) < 0)
        goto out;
    if ((rc = wait_stream(s, deadline, "checked all-reduce", bytes)) < 0)
        goto out;
    memset(h, 0xff, bytes); /* NaN everywhere: a copy that did not happen cannot pass */
    /* Only after the all-reduce completed: a pageable copy back blocks until it is done. */
    ce = cudaMemcpyAsync(h, run->dbuf, bytes, cudaMemcpyDeviceToHost, run->stream);
    if (ce != cudaSuccess) {
        rc = cuda_fail(s, ce, "copy from the GPU", bytes);
        goto out;
    }
    if ((rc = wait_stream(s, deadline, "copy from the GPU", bytes)) < 0)
        goto out;
    rc = compare(s, h, count);
out:
    free(h);
    return rc;
}

/* nccl-tests' BenchTime: `warmup` untimed launches, then `iters` back-to-back launches timed by
 * CLOCK_MONOTONIC around launch and completion; time per all-reduce = elapsed / iters. */
static int time_size(struct stage *s, uint64_t size, struct pf_size_result *res)
{
    struct pf_run *run = s->run;
    size_t count = (size_t)(size / sizeof(float));
    uint64_t bytes = (uint64_t)count * sizeof(float);
    double deadline = mc_mono_ms_f() + run->opts.timeout_ms, t0, sec;
    int rc;

    for (int w = 0; w < run->opts.warmup; w++)
        if ((rc = launch(s, count, deadline)) < 0)
            return rc;
    if ((rc = wait_stream(s, deadline, "warm-up all-reduce", bytes)) < 0)
        return rc;
    t0 = mc_mono_ms_f();
    deadline = t0 + run->opts.timeout_ms;
    for (int i = 0; i < run->opts.iters; i++)
        if ((rc = launch(s, count, deadline)) < 0)
            return rc;
    if ((rc = wait_stream(s, deadline, "timed all-reduce", bytes)) < 0)
        return rc;
    sec = (mc_mono_ms_f() - t0) / 1000.0 / run->opts.iters;
    res->bytes = bytes;
    res->time_us = sec * 1e6;
    res->algbw = pf_algbw_gbps((double)bytes, sec);
    res->busbw = pf_busbw_allreduce(res->algbw, s->spec->nranks);
    return 0;
}

static int sweep(struct stage *s)
{
    struct pf_run *run = s->run;
    uint64_t sizes[PF_MAX_SIZES];
    int n = pf_size_sweep(run->opts.min_bytes, run->max_bytes, SWEEP_FACTOR, sizes, PF_MAX_SIZES);

    if (n < 0)
        return pf_fail(run, PFG_EXIT_USAGE, n, "bad size range %" PRIu64 " .. %" PRIu64,
                       run->opts.min_bytes, run->max_bytes);
    for (int k = 0; k < n; k++) {
        int rc = time_size(s, sizes[k], &s->st->sizes[k]);
        if (rc < 0)
            return rc;
        s->st->nsizes = k + 1;
    }
    return 0;
}

/* ncclCommFinalize is collective and non-blocking here: poll it, then destroy is local. */
static int finalize(struct stage *s)
{
    ncclResult_t nr = ncclCommFinalize(s->comm);
    ncclComm_t comm;
    int rc;

    if (nr != ncclSuccess && nr != ncclInProgress)
        return nccl_fail(s, nr, "finalize");
    rc = poll_ready(s, mc_mono_ms_f() + s->run->opts.timeout_ms, 1, "finalize");
    if (rc == -ETIMEDOUT)
        return pf_fail(s->run, PFG_EXIT_MISSING, rc,
                       "NCCL finalize (stage %s) did not complete within %g s", s->spec->name,
                       timeout_s(s));
    if (rc < 0)
        return rc;
    comm = s->comm;
    s->comm = NULL; /* destroyed, never aborted, whatever destroy answers */
    nr = ncclCommDestroy(comm);
    if (nr != ncclSuccess && nr != ncclInProgress)
        return nccl_fail(s, nr, "destroy");
    return 0;
}

int pf_stage_run(struct pf_run *run, const struct pf_stage_spec *spec, struct pf_stage_result *st)
{
    struct stage s = {run, spec, st, NULL};
    ncclUniqueId id;
    int rc;

    memset(st, 0, sizeof(*st));
    st->name = spec->name;
    st->nranks = spec->nranks;
    st->check = "not run";
    if ((rc = get_id(&s, &id)) < 0)
        goto out;
    if ((rc = init_comm(&s, &id)) < 0)
        goto out;
    st->check = "failed";
    if ((rc = check_sum(&s)) < 0)
        goto out;
    st->check = "ok";
    /* One rank moves no data: a sweep would time a local copy and report an algbw of
     * millions of GB/s and a busbw of 0. The sum is still checked above. */
    if (spec->nranks > 1 && (rc = sweep(&s)) < 0)
        goto out;
    rc = finalize(&s);
out:
    /* The documented way out of any failure: abort, which also ends a pending init. */
    if (s.comm != NULL)
        ncclCommAbort(s.comm);
    return rc;
}
