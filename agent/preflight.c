/* The agent's side of the pre-flight: one node process per node (the program the launcher
 * names in opts.pf.node_argv: `muster __preflight-node`), started like a worker (same
 * environment as local rank 0, its own process group, killed with the attempt). What follows
 * when it ends is agent.c's decision: this file reports the end through done_cb and calls
 * nothing in agent.c. The checks themselves live in preflight/. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "agent_priv.h"
#include "env.h"
#include "json.h"
#include "log.h"
#include "safefile.h"

extern char **environ;

/* muster-preflight: $MUSTER_PREFLIGHT_BIN, else next to the node program (the muster binary),
 * else on PATH; "" when there is none (CPU jobs do not need it; GPU jobs fail the inventory
 * stage). */
void agent__preflight_gpu_binary(const char *node_program, char *out, size_t cap)
{
    const char *env = getenv("MUSTER_PREFLIGHT_BIN"), *path = getenv("PATH");

    out[0] = '\0';
    if (env != NULL) {
        snprintf(out, cap, "%s", env);
        return;
    }
    {
        const char *self = node_program;
        const char *slash = strrchr(self, '/');
        if (slash != NULL) {
            snprintf(out, cap, "%.*s/muster-preflight", (int)(slash - self), self);
            if (access(out, X_OK) == 0)
                return;
        }
    }
    for (const char *p = path; p != NULL && *p != '\0';) {
        size_t len = strcspn(p, ":");
        snprintf(out, cap, "%.*s/muster-preflight", (int)len, p);
        if (len > 0 && access(out, X_OK) == 0)
            return;
        p += len + (p[len] == ':');
    }
    out[0] = '\0';
}

static void on_pf_exit(struct agent_group *g, struct agent_worker *w)
{
    struct agent *a = g->data;
    a->pf.code = w->term_signal ? 128 + w->term_signal : w->exit_status;
}

static void after_close(void *data)
{
    (void)data;
}

/* The node process writes its one-line failure reason (and its per-GPU results) into files
 * the agent made with mkstemp() (0600, a fresh name: no symlink planted in /tmp can redirect
 * the write). */
static int make_temp_file(char *path, size_t cap, const char *what)
{
    int fd;

    snprintf(path, cap, "%s/muster-pf-%s-XXXXXX", mc_tmpdir(), what);
    if ((fd = mkstemp(path)) < 0) {
        path[0] = '\0';
        return -errno;
    }
    close(fd);
    return 0;
}

static int make_reason_file(struct agent *a)
{
    return make_temp_file(a->pf.reason, sizeof(a->pf.reason), "reason");
}

static uint32_t scaled(json_t *o, const char *key)
{
    double v = mc_json_num(o, key, 0) * 1000.0;
    return v > 0 && v < 4e9 ? (uint32_t)v : 0;
}

/* Strings from the node process carry host names and texts from other nodes: anything the
 * server would refuse (a control character, a byte >= 0x7f) becomes '?', so that a node with
 * an odd name cannot get this agent's connection closed. */
static void copy_printable(char *dst, size_t cap, const char *src)
{
    size_t i = 0;

    for (; src != NULL && src[i] != '\0' && i + 1 < cap; i++)
        dst[i] = (unsigned char)src[i] < 0x20 || (unsigned char)src[i] >= 0x7f ? '?' : src[i];
    dst[i] = '\0';
}

static uint8_t level_of(json_t *o)
{
    const char *l = mc_json_str(o, "level", "ok");
    return strcmp(l, "failure") == 0   ? RDZV_PF_FAILURE
           : strcmp(l, "warning") == 0 ? RDZV_PF_WARNING
                                       : RDZV_PF_OK;
}

/* The node process's results file ({"ok", "joined", "p2p": {...}, "gpus": [...]}, node.c) as a
 * PREFLIGHT message; strings are cut to the protocol's sizes, GPUs past RDZV_PF_GPUS_MAX left
 * out. Returns 0, or -ENOENT when there is no usable file. */
int agent__preflight_results(const char *path, uint32_t round, struct rdzv_preflight *pf)
{
    json_t *o = path[0] ? json_load_file(path, 0, NULL) : NULL, *p2p, *g;
    size_t i;

    memset(pf, 0, sizeof(*pf));
    if (!json_is_object(o)) {
        json_decref(o);
        return -ENOENT;
    }
    pf->round = round;
    pf->ok = json_is_true(json_object_get(o, "ok"));
    pf->joined = json_is_true(json_object_get(o, "joined"));
    p2p = json_object_get(o, "p2p");
    pf->p2p_pairs = (uint32_t)mc_json_int(p2p, "pairs", 0);
    pf->p2p_min_mbps = scaled(p2p, "min_gbps");
    pf->p2p_median_mbps = scaled(p2p, "median_gbps");
    pf->p2p_level = level_of(p2p);
    copy_printable(pf->p2p_note, sizeof(pf->p2p_note), mc_json_str(p2p, "note", ""));
    json_array_foreach(json_object_get(o, "gpus"), i, g)
    {
        struct rdzv_pf_gpu *d = &pf->gpus[pf->count];
        if (pf->count >= RDZV_PF_GPUS_MAX)
            break;
        d->index = (uint32_t)mc_json_int(g, "index", 0);
        copy_printable(d->uuid, sizeof(d->uuid), mc_json_str(g, "uuid", ""));
        copy_printable(d->model, sizeof(d->model), mc_json_str(g, "model", ""));
        d->gemm_gflops = scaled(g, "gemm_tflops");
        d->hbm_mbps = scaled(g, "hbm_gbps");
        d->level = level_of(g);
        copy_printable(d->note, sizeof(d->note), mc_json_str(g, "note", ""));
        pf->count++;
    }
    json_decref(o);
    return 0;
}

/* Sends this node's results to the server (/status, /metrics): best effort, the job goes on
 * without them. */
static void send_results(struct agent *a)
{
    static struct rdzv_preflight pf; /* ~30 KB: not on the stack */
    int rc;

    if (agent__preflight_results(a->pf.results, a->as.round, &pf) != 0 || a->client == NULL)
        return;
    if ((rc = rdzv_client_report_preflight(a->client, &pf)) != 0)
        mc_info("pre-flight: results not sent to the server (%s); they are in the report only",
                strerror(-rc));
}

void agent__preflight_failure(struct agent *a, struct rdzv_failure *f)
{
    char reason[RDZV_TEXT_MAX + 1] = "";
    FILE *f_in = NULL;
    struct timeval tv;

    memset(f, 0, sizeof(*f));
    f->round = a->as.round;
    f->rank = -1;
    f->local_rank = -1;
    f->exit_code = AGENT_EXIT_PREFLIGHT;
    f->flags = RDZV_FAILURE_FINAL;
    gettimeofday(&tv, NULL);
    f->time_ms = (uint64_t)tv.tv_sec * 1000 + (uint64_t)tv.tv_usec / 1000;
    snprintf(f->host, sizeof(f->host), "%s", a->host);
    if (a->pf.reason[0] != '\0' && (f_in = fopen(a->pf.reason, "r")) != NULL) {
        size_t n = fread(reason, 1, sizeof(reason) - 1, f_in);
        reason[n] = '\0';
        reason[strcspn(reason, "\n")] = '\0';
        fclose(f_in);
    }
    if (reason[0] != '\0')
        snprintf(f->text, sizeof(f->text), "pre-flight failed: %s", reason);
    else
        snprintf(f->text, sizeof(f->text), "pre-flight failed on %s (exit %d)", a->host,
                 a->pf.code);
}

/* The node process is gone: agent.c decides what follows (done_cb), then the reason file,
 * read by agent__preflight_failure() meanwhile, goes. */
static void on_pf_done(struct agent_group *g)
{
    struct agent *a = g->data;

    agent_group_close(g, after_close, a);
    a->group = NULL;
    send_results(a); /* before the workers start (done_cb) */
    if (a->pf.results[0] != '\0')
        unlink(a->pf.results);
    a->pf.results[0] = '\0';
    a->pf.done_cb(a);
    if (a->pf.reason[0] != '\0')
        unlink(a->pf.reason);
    a->pf.reason[0] = '\0';
}

static const struct agent_group_cbs pf_cbs = {.exit_cb = on_pf_exit, .all_exited_cb = on_pf_done};

/* At most this many words of opts.pf.node_argv are used. */
#define PF_NODE_ARGV_MAX 4

/* argv of the node process: opts.pf.node_argv, then the checks' options; strings point into
 * bufs (kept by the caller). */
static void node_argv(struct agent *a, char **argv, char bufs[][PATH_MAX])
{
    const struct agent_preflight_opts *o = &a->o->pf;
    int k = 0;

    for (; k < PF_NODE_ARGV_MAX && o->node_argv[k] != NULL; k++)
        argv[k] = (char *)o->node_argv[k];
    snprintf(bufs[1], PATH_MAX, "--need-gpus=%u", o->need_gpus);
    argv[k++] = bufs[1];
    snprintf(bufs[2], PATH_MAX, "--timeout-ms=%u", o->timeout_ms);
    argv[k++] = bufs[2];
    snprintf(bufs[3], PATH_MAX, "--min-busbw=%g", o->min_busbw);
    argv[k++] = bufs[3];
    agent__preflight_gpu_binary(o->node_argv[0], bufs[5], PATH_MAX);
    snprintf(bufs[4], PATH_MAX, "--bin=%.4000s", bufs[5]);
    argv[k++] = bufs[4];
    /* a joining node's report has a name of its own: it must not replace round 0's report
     * (a log directory on a shared file system, or nodes sharing a host) */
    if (a->pf.joined)
        snprintf(bufs[13], PATH_MAX, "-join-r%u-g%u", a->as.round, a->as.group_rank);
    else
        bufs[13][0] = '\0';
    if (a->logdir.base[0] != '\0' && !a->logdir.flat)
        snprintf(bufs[6], PATH_MAX, "--report=%.4000s/preflight%s.json", a->logdir.base, bufs[13]);
    else
        snprintf(bufs[6], PATH_MAX, "--report=%.3800s/muster-%s-preflight%s.json", mc_tmpdir(),
                 a->o->run_id, bufs[13]);
    argv[k++] = bufs[6];
    if (o->allow_mixed)
        argv[k++] = "--allow-mixed";
    if (o->max_bytes != NULL) {
        snprintf(bufs[7], PATH_MAX, "--max-bytes=%.64s", o->max_bytes);
        argv[k++] = bufs[7];
    }
    if (a->o->rdzv.local_addr != NULL) {
        snprintf(bufs[8], PATH_MAX, "--local-addr=%.255s", a->o->rdzv.local_addr);
        argv[k++] = bufs[8];
    }
    if (a->pf.reason[0] != '\0') {
        snprintf(bufs[9], PATH_MAX, "--reason-file=%.4000s", a->pf.reason);
        argv[k++] = bufs[9];
    }
    /* per-GPU floors and --preflight-allow-slow */
    snprintf(bufs[10], PATH_MAX, "--min-tflops=%g", o->min_tflops);
    argv[k++] = bufs[10];
    snprintf(bufs[11], PATH_MAX, "--min-hbm-gbps=%g", o->min_hbm_gbps);
    argv[k++] = bufs[11];
    if (o->allow_slow)
        argv[k++] = "--allow-slow";
    if (a->pf.results[0] != '\0') {
        snprintf(bufs[12], PATH_MAX, "--results-file=%.4000s", a->pf.results);
        argv[k++] = bufs[12];
    }
    if (a->pf.joined)
        argv[k++] = "--joined";
    argv[k] = NULL;
}

/* The node process's torchrun variables: those of local rank 0. */
static void node_info(const struct agent *a, struct agent_worker_info *w)
{
    const struct agent_options *o = a->o;

    memset(w, 0, sizeof(*w));
    w->rank = (int)a->as.rank_offset;
    w->local_world_size = (int)o->work.nproc;
    w->group_rank = (int)a->as.group_rank;
    w->group_world_size = (int)a->as.group_world_size;
    w->role_rank = w->rank;
    w->world_size = w->role_world_size = (int)a->as.world_size;
    w->role = o->work.role;
    w->master_addr = a->as.master_addr;
    w->master_port = a->as.master_port;
    w->max_restarts = o->restart.max_restarts;
    w->run_id = o->run_id;
    w->error_file = "";
    w->endpoint = a->endpoint;
    w->token = a->worker_cred;
    w->round = a->as.round;
    if (o->static_ranks.on || a->pf.joined) {
        /* --rdzv-backend static across nodes: this node's private server is the only store,
         * so the checks cover this node alone (as one node of nproc ranks). A node that joined
         * a running job (docs/PREFLIGHT.md "Nodes that join later") is checked alone too: the
         * round's other nodes run workers, not checks; its keys get a prefix of its own
         * (MUSTER_KV_PREFIX, spawn_node_process) so that two nodes joining in one round never meet.
         */
        w->rank = w->role_rank = w->group_rank = 0;
        w->group_world_size = 1;
        w->world_size = w->role_world_size = (int)o->work.nproc;
    }
}

static int spawn_node_process(struct agent *a)
{
    static char bufs[14][PATH_MAX];
    char *argv[PF_NODE_ARGV_MAX + 16];
    struct agent_worker_spec spec = {.argv = argv, .console = {-1, -1}, .file = {-1, -1}};
    struct agent_worker_info w;
    struct agent_env full;
    int rc;

    if (a->o->pf.node_argv == NULL || a->o->pf.node_argv[0] == NULL)
        return -EINVAL;
    if ((rc = make_reason_file(a)) != 0)
        mc_info("pre-flight: no reason file (%s); a failure will be reported without it",
                strerror(-rc));
    if ((rc = make_temp_file(a->pf.results, sizeof(a->pf.results), "results")) != 0)
        mc_info("pre-flight: no results file (%s); the server will not show them", strerror(-rc));
    node_argv(a, argv, bufs);
    node_info(a, &w);
    agent_env_init(&full);
    rc = agent_env_build(&w, environ, &full);
    if (rc == 0 && a->pf.joined)
        rc = agent_env_setf(&full, "MUSTER_KV_PREFIX", "pfj/%u/", a->as.group_rank);
    /* its report goes straight to the agent's own stdout/stderr, without rank prefixes */
    spec.file[0] = dup(1);
    spec.file[1] = dup(2);
    spec.env = full.vars;
    if (rc == 0)
        rc = agent_group_spawn(a->group, 0, w.rank, &spec);
    else
        for (int i = 0; i < 2; i++)
            if (spec.file[i] >= 0)
                close(spec.file[i]);
    agent_env_free(&full);
    return rc;
}

int agent__preflight_start(struct agent *a, void (*done_cb)(struct agent *a))
{
    const struct rdzv_assign *as = &a->as;
    int rc = agent_group_new(&a->loop, 1, &pf_cbs, a, &a->group);

    if (rc != 0)
        return rc;
    a->pf.done_cb = done_cb;
    a->pf.code = 0;
    a->pf.joined = !a->o->static_ranks.on && as->round > 0;
    if (a->pf.joined)
        mc_info("pre-flight: this node joined the running job in round %u (group rank %u): "
                "checking its own GPUs before its workers start%s",
                as->round, as->group_rank,
                a->o->pf.need_gpus ? " (inventory, NCCL over its GPUs, GPU health, P2P)"
                                   : " (no GPU: inventory)");
    else if (a->o->static_ranks.on)
        mc_info("pre-flight: static backend across nodes, so this node is checked alone");
    else if (as->group_rank == 0)
        mc_info("pre-flight: %u node%s, %u rank%s%s", as->group_world_size,
                as->group_world_size == 1 ? "" : "s", as->world_size,
                as->world_size == 1 ? "" : "s",
                a->o->pf.need_gpus ? " (inventory, TCP mesh, NCCL, GPU health, P2P)"
                                   : " (no GPU: inventory and TCP mesh)");
    if ((rc = spawn_node_process(a)) != 0) {
        mc_error("cannot start the pre-flight: %s", strerror(-rc));
        a->pf.code = AGENT_EXIT_PREFLIGHT;
        on_pf_done(a->group);
    }
    return 0;
}
