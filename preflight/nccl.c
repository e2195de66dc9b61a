/* Pre-flight stage 3: `muster-preflight allreduce`, one process per GPU of this node, then group
 * rank 0's node judges every rank's result and prints the bandwidth table. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "busbw.h"
#include "p2p.h"
#include "json.h"
#include "log.h"
#include "muster.h"
#include "node.h"
#include "node_priv.h"
#include "safefile.h"
#include "clock.h"

extern char **environ;

/* environ with RANK, LOCAL_RANK and ROLE_RANK of local rank i. Frees with free_env(). */
static char **rank_env(const struct pf_node *n, int i)
{
    size_t count = 0, k = 0;
    char **env;

    while (environ[count])
        count++;
    if ((env = calloc(count + 4, sizeof(*env))) == NULL)
        return NULL;
    for (size_t j = 0; j < count; j++)
        if (strncmp(environ[j], "RANK=", 5) && strncmp(environ[j], "LOCAL_RANK=", 11) &&
            strncmp(environ[j], "ROLE_RANK=", 10))
            env[k++] = strdup(environ[j]);
    if (asprintf(&env[k++], "RANK=%d", n->rank0 + i) < 0 ||
        asprintf(&env[k++], "LOCAL_RANK=%d", i) < 0 ||
        asprintf(&env[k++], "ROLE_RANK=%d", n->rank0 + i) < 0)
        env[k - 1] = NULL;
    return env;
}

static void free_env(char **env)
{
    for (size_t j = 0; env && env[j]; j++)
        free(env[j]);
    free(env);
}

/* Starts every local rank; waits for all of them until the deadline, then kills the rest. */
static void run_ranks(struct pf_node *n, const char *dir, int *codes)
{
    pid_t *pids = calloc((size_t)n->nproc, sizeof(*pids));
    char timeout[16];
    int left;

    snprintf(timeout, sizeof(timeout), "%d", n->timeout_ms);
    for (int i = 0; pids && i < n->nproc; i++) {
        char out[4200], **env = rank_env(n, i);
        char *argv[] = {(char *)n->bin,
                        "allreduce",
                        "--out",
                        out,
                        "--timeout-ms",
                        timeout,
                        n->max_bytes ? "--max-bytes" : NULL,
                        (char *)n->max_bytes,
                        NULL};
        snprintf(out, sizeof(out), "%s/rank%d.json", dir, n->rank0 + i);
        codes[i] = env ? posix_spawn(&pids[i], n->bin, NULL, NULL, argv, env) : ENOMEM;
        if (codes[i] != 0) {
            pf_say(MC_LOG_ERROR, "cannot start %s for rank %d: %s", n->bin, n->rank0 + i,
                   strerror(codes[i]));
            codes[i] = 127;
            pids[i] = 0;
        } else {
            codes[i] = -1;
        }
        free_env(env);
    }
    /* arrival and init each have the stage timeout inside muster-preflight; the sweep and
     * CUDA's start-up get a minute on top */
    double deadline = mc_mono_ms_f() + 2.0 * n->timeout_ms + 60000;
    do {
        left = 0;
        for (int i = 0; pids && i < n->nproc; i++) {
            int status;
            if (pids[i] <= 0)
                continue;
            if (waitpid(pids[i], &status, WNOHANG) == pids[i]) {
                codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                pids[i] = 0;
            } else {
                left++;
            }
        }
        if (left > 0)
            usleep(2000);
    } while (left > 0 && mc_mono_ms_f() < deadline);
    for (int i = 0; pids && i < n->nproc; i++) {
        if (pids[i] > 0) {
            kill(pids[i], SIGKILL);
            waitpid(pids[i], NULL, 0);
            codes[i] = -ETIMEDOUT;
        }
    }
    free(pids);
}

/* Rank i's result file, or a record saying why there is none. */
static json_t *rank_result(const struct pf_node *n, const char *dir, int i, int code)
{
    char path[4200], why[200];
    json_t *r;

    snprintf(path, sizeof(path), "%s/rank%d.json", dir, n->rank0 + i);
    r = json_load_file(path, 0, NULL);
    unlink(path);
    if (r != NULL)
        return r;
    if (code == -ETIMEDOUT)
        snprintf(why, sizeof(why), "muster-preflight did not finish in time and was killed");
    else if (code > 128)
        snprintf(why, sizeof(why), "muster-preflight was killed by signal %d", code - 128);
    else
        snprintf(why, sizeof(why), "muster-preflight exited with code %d and wrote no result",
                 code);
    return json_pack("{s:i, s:i, s:s, s:b, s:s, s:i}", "rank", n->rank0 + i, "local_rank", i,
                     "host", n->host, "ok", 0, "error", why, "exit", code);
}

static void print_sizes(json_t *stage)
{
    json_t *s;
    size_t i;

    mc_log_cont(MC_LOG_INFO, "  %10s %12s %12s %12s", "size", "time", "algbw", "busbw");
    json_array_foreach(json_object_get(stage, "sizes"), i, s)
    {
        double bytes = mc_json_num(s, "bytes", 0);
        mc_log_cont(MC_LOG_INFO, "  %6.0f %s %9.1f us %7.1f GB/s %7.1f GB/s",
                    bytes >= 1 << 20 ? bytes / (1 << 20) : bytes / 1024,
                    bytes >= 1 << 20 ? "MiB" : "KiB", mc_json_num(s, "time_us", 0),
                    mc_json_num(s, "algbw", 0), mc_json_num(s, "busbw", 0));
    }
}

/* The "all" stage of a rank's result, or NULL. */
static json_t *stage_of(json_t *rank, const char *name)
{
    json_t *st;
    size_t i;
    json_array_foreach(json_object_get(rank, "stages"), i, st)
    {
        const char *s = mc_json_str(st, "stage", NULL);
        if (s && strcmp(s, name) == 0)
            return st;
    }
    return NULL;
}

static double last_busbw(json_t *stage, double *bytes)
{
    json_t *sizes = json_object_get(stage, "sizes");
    json_t *last = json_array_get(sizes, json_array_size(sizes) - 1);
    *bytes = mc_json_num(last, "bytes", 0);
    return mc_json_num(last, "busbw", 0);
}

/* One failed rank as a line naming node and GPU. */
static void describe_failure(json_t *r, char *out, size_t cap)
{
    json_t *gpu = json_object_get(r, "gpu");
    const char *host = mc_json_str(r, "host", NULL);
    const char *err = mc_json_str(r, "error", NULL);
    const char *uuid = mc_json_str(gpu, "uuid", NULL);
    const char *pci = mc_json_str(gpu, "pci", NULL);

    if (gpu != NULL && uuid != NULL)
        snprintf(out, cap, "rank %d on node %s, GPU %d (%s, %s): %s",
                 (int)mc_json_int(r, "rank", 0), host ? host : "?",
                 (int)mc_json_int(gpu, "index", 0), uuid, pci ? pci : "?", err ? err : "failed");
    else
        snprintf(out, cap, "rank %d on node %s: %s", (int)mc_json_int(r, "rank", 0),
                 host ? host : "?", err ? err : "failed");
}

/* The bandwidth table and --preflight-min-busbw. With one rank there is no bandwidth to
 * show or judge (it once printed algbw 1,173,488 GB/s and busbw 0.0, and any floor failed
 * every one-GPU job). Returns 1 when the floor fails (reason set), else 0. */
static int judge_bandwidth(struct pf_node *n, json_t *all)
{
    double bytes = 0, busbw = 0;

    if (n->world < 2) {
        mc_info("preflight: NCCL all-reduce over 1 rank: sum exact; no bandwidth figures (one "
                "rank moves no data)");
        json_object_set_new(n->report_json, "busbw_floor",
                            json_string(n->min_busbw > 0 ? "not applied: one rank" : "none"));
        if (n->min_busbw > 0)
            mc_info("preflight: --preflight-min-busbw %.1f not applied: it needs at least 2 ranks",
                    n->min_busbw);
        return 0;
    }
    busbw = last_busbw(all, &bytes);
    mc_info("preflight: NCCL all-reduce over %d ranks: sums exact on every rank, every GPU "
            "distinct",
            n->world);
    if (mc_log_enabled(MC_LOG_INFO)) /* the size table is part of that line */
        print_sizes(all);
    switch (pf_busbw_judge(n->world, busbw, n->min_busbw)) {
    case PF_BUSBW_BELOW:
        snprintf(n->reason, sizeof(n->reason),
                 "busbw %.1f GB/s at %.0f MiB is below "
                 "--preflight-min-busbw %.1f GB/s",
                 busbw, bytes / (1 << 20), n->min_busbw);
        json_object_set_new(n->report_json, "busbw_floor", json_string("failed"));
        return 1;
    case PF_BUSBW_OK:
        json_object_set_new(n->report_json, "busbw_floor", json_string("passed"));
        return 0;
    default:
        json_object_set_new(n->report_json, "busbw_floor", json_string("none"));
        return 0;
    }
}

/* Group rank 0: every node's ranks; prints the table and checks --preflight-min-busbw. */
static int judge_nccl(struct pf_node *n, json_t *mine)
{
    json_t *nodes = json_array(), *rank0 = NULL;
    int bad = 0, rc = 0;
    char key[64];

    json_array_append(nodes, mine);
    for (int g = 1; g < n->gws && rc == 0; g++) {
        json_t *res = NULL;
        snprintf(key, sizeof(key), "pf/nccl/%d", g);
        if ((rc = pf_get_json(n, key, 2 * n->timeout_ms + 70000, &res)) != 0) {
            char host[256];
            pf_node_host(n, g, host, sizeof(host));
            snprintf(n->reason, sizeof(n->reason),
                     "node %s (group rank %d) sent no NCCL "
                     "results: %s",
                     host, g, muster_strerror(rc));
            bad++;
        } else {
            json_array_append_new(nodes, res);
        }
    }
    json_t *node, *r;
    size_t i, j;
    json_array_foreach(nodes, i, node)
    {
        json_array_foreach(json_object_get(node, "ranks"), j, r)
        {
            if (mc_json_int(r, "rank", 0) == 0)
                rank0 = r;
            if (json_is_true(json_object_get(r, "ok")))
                continue;
            char line[1024];
            describe_failure(r, line, sizeof(line));
            mc_log_cont(MC_LOG_ERROR, "  ! %s", line);
            if (bad++ == 0)
                snprintf(n->reason, sizeof(n->reason), "%s", line);
        }
    }
    json_t *all = rank0 ? stage_of(rank0, "all") : NULL;
    if (bad == 0 && all != NULL) {
        bad += judge_bandwidth(n, all);
        bad += pf_judge_health(n, nodes);
    } else if (bad == 0) {
        snprintf(n->reason, sizeof(n->reason), "no result from rank 0");
        bad++;
    }
    json_object_set_new(n->report_json, "nccl", nodes);
    /* every node's per-GPU findings, for the other nodes' results files (node.c): put before
     * the verdict, so a node that read the verdict finds them */
    json_t *found = json_object_get(json_object_get(n->report_json, "gpu_health"), "findings");
    if (found != NULL)
        pf_put_json(n, "pf/findings", found);
    if (bad)
        pf_say(MC_LOG_ERROR, "failed at the NCCL stage: %s", n->reason);
    return pf_verdict(n, "nccl", bad == 0, n->reason);
}

/* Fills m (borrowing from p2p's JSON) from {"gpus": [{"index", "uuid"}], "gbps": [[...]]};
 * returns its GPU count, or -1 when malformed. g needs PF_P2P_MAX_GPUS^2 doubles. */
int pf_p2p_from_json(json_t *p2p, struct pf_p2p *m, int *idx, const char **uuid, double *g)
{
    json_t *gpus = json_object_get(p2p, "gpus"), *rows = json_object_get(p2p, "gbps"), *v;
    size_t n = json_array_size(gpus), i, j;

    if (n > PF_P2P_MAX_GPUS || json_array_size(rows) != n)
        return -1;
    for (i = 0; i < n; i++) {
        json_t *row = json_array_get(rows, i);
        idx[i] = (int)mc_json_int(json_array_get(gpus, i), "index", (long long)i);
        uuid[i] = mc_json_str(json_array_get(gpus, i), "uuid", NULL);
        if (json_array_size(row) != n)
            return -1;
        json_array_foreach(row, j, v) g[i * n + j] = json_is_number(v) ? json_number_value(v) : 0;
    }
    *m = (struct pf_p2p){NULL, (int)n, idx, uuid, g};
    return (int)n;
}

/* The node's peer-to-peer matrix (docs/PREFLIGHT.md "What runs"): `muster-preflight p2p` over the
 * GPUs of local ranks 0..nproc-1, after the all-reduce (the GPUs are idle then). The result gets
 * this node's summary ("pairs", "min_gbps", "median_gbps"); with one GPU there is nothing to
 * measure:
 * {"skipped": ...}, no figures. */
static json_t *run_p2p(struct pf_node *n, const char *dir)
{
    static double g[PF_P2P_MAX_GPUS * PF_P2P_MAX_GPUS];
    int idx[PF_P2P_MAX_GPUS], status = 0, pairs = 0;
    const char *uuid[PF_P2P_MAX_GPUS];
    char out[4200], devices[16], why[300];
    struct pf_p2p m;
    json_t *r;
    pid_t pid;

    if (n->nproc < 2)
        return json_pack("{s:s}", "skipped", "one GPU: no peer-to-peer pairs to measure");
    snprintf(out, sizeof(out), "%s/p2p.json", dir);
    snprintf(devices, sizeof(devices), "%d", n->nproc);
    char *argv[] = {(char *)n->bin, "p2p", "--devices", devices, "--out", out, NULL};
    if ((status = posix_spawn(&pid, n->bin, NULL, NULL, argv, environ)) != 0)
        return json_pack("{s:s}", "error", strerror(status));
    double deadline = mc_mono_ms_f() + n->timeout_ms + 30000.0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (mc_mono_ms_f() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            unlink(out);
            return json_pack("{s:s}", "error", "muster-preflight p2p did not finish in time");
        }
        usleep(2000);
    }
    r = json_load_file(out, 0, NULL);
    unlink(out);
    if (r != NULL && (json_object_get(r, "error") || json_object_get(r, "skipped")) &&
        !json_object_get(r, "gbps"))
        return r; /* muster-preflight says why there is no matrix */
    if (r == NULL || pf_p2p_from_json(r, &m, idx, uuid, g) < 0) {
        json_decref(r);
        snprintf(why, sizeof(why), "muster-preflight p2p exited with %d and wrote no matrix",
                 WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
        return json_pack("{s:s}", "error", why);
    }
    double med = pf_p2p_median(&m, &pairs), min = 0;
    for (int s = 0; s < m.n; s++)
        for (int d = 0; d < m.n; d++)
            if (s != d && g[s * m.n + d] > 0 && (min == 0 || g[s * m.n + d] < min))
                min = g[s * m.n + d];
    json_object_set_new(r, "pairs", json_integer(pairs));
    json_object_set_new(r, "min_gbps", json_real(min));
    json_object_set_new(r, "median_gbps", json_real(med));
    return r;
}

/* Results travel through the KV store (60 KiB a value): keep the per-size tables of global
 * rank 0 only when the whole node record would not fit. */
static int put_node_result(struct pf_node *n, json_t *res)
{
    char key[64], *s = json_dumps(res, JSON_COMPACT);
    json_t *r;
    size_t i;

    if (s != NULL && strlen(s) > MUSTER_VALUE_MAX) {
        json_array_foreach(json_object_get(res, "ranks"), i, r) if (mc_json_int(r, "rank", 0) != 0)
            json_object_del(r, "stages");
        free(s);
        s = json_dumps(res, JSON_COMPACT);
    }
    snprintf(key, sizeof(key), "pf/nccl/%d", n->group_rank);
    int rc = s ? pf_put(n, key, s) : -ENOMEM;
    free(s);
    return rc;
}

int pf_stage_nccl(struct pf_node *n)
{
    char dir[4096];
    int *codes = calloc((size_t)n->nproc, sizeof(*codes)), rc;
    json_t *res =
        json_pack("{s:i, s:s, s:[]}", "group_rank", n->group_rank, "host", n->host, "ranks");

    snprintf(dir, sizeof(dir), "%.4000s/muster-pf-XXXXXX", mc_tmpdir());
    if (codes == NULL || res == NULL || mkdtemp(dir) == NULL) {
        free(codes);
        json_decref(res);
        snprintf(n->reason, sizeof(n->reason), "node %s: cannot prepare the NCCL stage: %s",
                 n->host, strerror(errno));
        return pf_verdict(n, "nccl", 0, n->reason);
    }
    run_ranks(n, dir, codes);
    for (int i = 0; i < n->nproc; i++)
        json_array_append_new(json_object_get(res, "ranks"), rank_result(n, dir, i, codes[i]));
    if (n->need_gpus > 0)
        json_object_set_new(res, "p2p", run_p2p(n, dir));
    rmdir(dir);
    free(codes);
    json_decref(n->own);
    n->own = json_incref(res); /* this node's figures, for its results file (node.c) */
    if (n->group_rank == 0) {
        rc = judge_nccl(n, res);
    } else {
        rc = put_node_result(n, res) != 0 ? PF_EXIT_FAILED : pf_verdict(n, "nccl", 0, NULL);
    }
    json_decref(res);
    return rc;
}
