#include "run.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "ckptwatch.h"
#include "config.h"
#include "env.h"
#include "help.h"
#include "log.h"
#include "numa.h"
#include "options.h"
#include "plan_cmd.h"
#include "port.h"
#include "secret.h"
#include "shared.h"

extern char **environ;

/* --auto-batch's probe batch (MUSTER_PROBE_BATCH) */
#define LAUNCHER_AUTO_BATCH_PROBE 8

/* argv of one worker: [python -u [-m]] script args..., NULL-terminated. Borrows strings. */
static char **worker_argv(const struct launcher_config *cfg)
{
    char **v = calloc((size_t)cfg->script_argc + 5, sizeof(*v));
    int n = 0;

    if (v == NULL)
        return NULL;
    if (!cfg->no_python) {
        v[n++] = cfg->python_exec;
        v[n++] = "-u";
        if (cfg->module)
            v[n++] = "-m";
    }
    v[n++] = cfg->script;
    for (int i = 0; i < cfg->script_argc; i++)
        v[n++] = cfg->script_argv[i];
    return v;
}

static void print_command(char **argv)
{
    fputs("command:", stdout);
    for (; *argv; argv++) {
        /* quote what a shell would split, so the line can be pasted back */
        if (**argv == '\0' || strpbrk(*argv, " \t\n'\"\\$`*?;&|<>()") != NULL) {
            fputs(" '", stdout);
            for (const char *c = *argv; *c; c++)
                fputs(*c == '\'' ? "'\\''" : (char[]){*c, 0}, stdout);
            fputc('\'', stdout);
        } else {
            printf(" %s", *argv);
        }
    }
    fputc('\n', stdout);
}

/* --numa-binding: every worker's CPUs, planned before anything starts (numa.h); what it
 * found worth saying goes to out (stdout for --dry-run, as "# " lines). 0 or an exit code. */
static int numa_plan(const struct launcher_config *cfg, struct agent_numa *numa, FILE *out)
{
    const char *lead = out == stdout ? "# " : "muster: note: ";
    char err[LAUNCHER_ERR_MAX] = "";
    int rc;

    memset(numa, 0, sizeof(*numa));
    if (cfg->numa_binding[0] == '\0')
        return 0;
    rc = agent_numa_plan(cfg->numa_binding, cfg->nproc_per_node, getenv("CUDA_VISIBLE_DEVICES"),
                         getenv("MUSTER_SYSFS_ROOT"), numa, err, sizeof(err));
    if (rc != 0) {
        mc_error("%s", rc == -EINVAL ? err : strerror(-rc));
        return rc == -EINVAL ? AGENT_EXIT_USAGE : AGENT_EXIT_INTERNAL;
    }
    if (numa->nbind == 0)
        fprintf(out, "%s%s\n", lead, numa->why);
    else if (!numa->by_gpu)
        fprintf(out,
                "%s--numa-binding %s: not one GPU per worker, so the local ranks are spread "
                "over the %d NUMA nodes in blocks\n",
                lead, cfg->numa_binding, numa->nnodes);
    return 0;
}

static const char *endpoint_text(const struct launcher_config *cfg, char *buf, size_t len)
{
    if (cfg->rdzv_host == NULL)
        snprintf(buf, len, "127.0.0.1:0 (embedded, port chosen at start)");
    else
        snprintf(buf, len, "%s:%u", cfg->rdzv_host, cfg->rdzv_port);
    return buf;
}

/* Worker i's part of the --dry-run plan: its command, NUMA binding and environment. 0 or an
 * exit code. */
/* --restart-backoff, only when set (the plan of a run without it is unchanged) */
static void print_backoff(const struct launcher_config *cfg)
{
    if (cfg->restart.backoff_min_ms > 0)
        printf("restart_backoff=%.3g:%.3g (seconds, doubling, +-20 %% jitter)\n",
               cfg->restart.backoff_min_ms / 1000.0, cfg->restart.backoff_max_ms / 1000.0);
    if (cfg->restart.exclude_after > 0)
        printf("exclude_after=%u:%.0f (failures of one node : window in seconds)\n",
               (unsigned)cfg->restart.exclude_after,
               (cfg->restart.exclude_window_ms ? cfg->restart.exclude_window_ms : 3600000u) /
                   1000.0);
    if (cfg->restart.spare)
        printf("spare=1 (waits to replace a lost or excluded node)\n");
}

static int dry_run_worker(const struct launcher_config *cfg, char **argv,
                          const struct agent_numa *numa, int i, int group_rank, unsigned port)
{
    int world = cfg->nproc_per_node * cfg->max_nodes;
    struct agent_worker_info w = {
        .rank = group_rank * cfg->nproc_per_node + i,
        .local_rank = i,
        .local_world_size = cfg->nproc_per_node,
        .group_rank = group_rank,
        .group_world_size = cfg->max_nodes,
        .world_size = world,
        .role = cfg->role,
        .master_addr = cfg->local_addr ? cfg->local_addr : cfg->master_addr,
        .master_port = port,
        .max_restarts = cfg->restart.max_restarts,
        .run_id = cfg->rdzv_id,
        .checkpoint_dir = cfg->ckpt.dir,
        .virtual_local_rank = cfg->virtual_local_rank,
        .signals_to_handle = cfg->signals_to_handle,
        .agent_store = agent_env_agent_store_wanted(environ),
        .torch_version = cfg->torch_version,
        /* as the real run sets them, with what is known only at run time in <...> */
        .round = 1,
        .token = "<hidden>",
    };
    struct agent_env env;
    char error_file[4096] = "", endpoint[320], heartbeat[4096];

    w.role_rank = w.rank;
    w.role_world_size = world;
    if (cfg->log_dir == NULL || strcmp(cfg->log_dir, "/dev/null") != 0)
        snprintf(error_file, sizeof(error_file), "%s/%s/attempt_0/%d/error.json",
                 cfg->log_dir ? cfg->log_dir : "<private temporary directory>", cfg->rdzv_id, i);
    w.error_file = error_file;
    w.endpoint = endpoint_text(cfg, endpoint, sizeof(endpoint));
    if (cfg->ckpt.hang_timeout_ms > 0) {
        snprintf(heartbeat, sizeof(heartbeat), "<heartbeat directory>/heartbeat_0_%d", i);
        w.heartbeat_file = heartbeat;
    }
    agent_env_init(&env);
    if (agent_env_for_worker(&env, &w, environ) != 0) {
        agent_env_free(&env);
        return AGENT_EXIT_INTERNAL;
    }
    printf("\n[worker %d]\n", i);
    print_command(argv);
    if (numa->nbind > 0) {
        char bind[512];
        agent_numa_describe(numa, i, bind, sizeof(bind));
        printf("# numa_binding=%s: %s\n", cfg->numa_binding, bind);
    }
    fflush(stdout);
    int rc = agent_env_print(&env, stdout);
    agent_env_free(&env);
    return rc == 0 ? 0 : AGENT_EXIT_INTERNAL;
}

/* --checkpoint-dir and how entries count as complete; --resume-arg's additions. */
static void print_checkpoints(const struct launcher_config *cfg)
{
    if (cfg->ckpt.dir == NULL)
        return;
    printf("checkpoint_dir=%s\ncheckpoint_settle=%.2f s\n", cfg->ckpt.dir,
           (cfg->ckpt.settle_ms ? cfg->ckpt.settle_ms : AGENT_CKPTWATCH_SETTLE_MS) / 1000.0);
    if (cfg->ckpt.marker != NULL)
        printf("checkpoint_marker=%s\n", cfg->ckpt.marker);
    if (cfg->nresume_args == 0)
        return;
    printf("resume_args=");
    for (int i = 0; i < cfg->nresume_args; i++)
        printf("%s%s", i ? " " : "", cfg->resume_args[i]);
    printf("\n# resume_args are added to the command of an attempt that resumes, {} = the "
           "checkpoint's path\n");
}

/* The plan is what this node would do as group rank --node-rank with every node running
 * the same number of workers; a real rendezvous may decide otherwise, and says so. */
static int dry_run(const struct launcher_config *cfg, char **argv)
{
    static const char *backends[] = {"muster", "c10d", "static"};
    int group_rank = cfg->max_nodes > 1 ? cfg->node_rank : 0;
    int world = cfg->nproc_per_node * cfg->max_nodes;
    unsigned port = (unsigned)cfg->master_port;
    char ep[300];
    int fd;
    struct agent_numa numa;

    if (port == 0 && cfg->backend == LAUNCHER_BACKEND_STATIC && cfg->max_nodes > 1)
        port = 29500; /* every node must agree: torchrun's default */
    if (port == 0 && agent_port_reserve(&fd, &port) == 0)
        close(fd); /* a port that is free now, to show a realistic plan */
    printf("run_id=%s\nrdzv_backend=%s\nrdzv_endpoint=%s\nnnodes=%d:%d\nnproc_per_node=%d\n"
           "world_size=%d\nmax_restarts=%u\n",
           cfg->rdzv_id, backends[cfg->backend], endpoint_text(cfg, ep, sizeof(ep)), cfg->min_nodes,
           cfg->max_nodes, cfg->nproc_per_node, world, cfg->restart.max_restarts);
    print_backoff(cfg);
    if (cfg->torch_version > 0)
        printf("# the workers' PyTorch: %d.%d (found beside %s)\n", cfg->torch_version / 100,
               cfg->torch_version % 100, cfg->python_exec);
    if (cfg->max_nodes > 1)
        printf("# ranks assume group rank %d and %d workers on every node; the rendezvous "
               "decides\n",
               group_rank, cfg->nproc_per_node);
    printf("preflight=%s\n", cfg->pf.on ? "on" : "off");
    print_checkpoints(cfg);
    launcher__opt_print_changed(cfg, stdout);
    printf("# MASTER_PORT is reserved again when the job starts\n");
    if ((fd = numa_plan(cfg, &numa, stdout)) != 0)
        return fd;
    for (int i = 0; i < cfg->nproc_per_node; i++)
        if ((fd = dry_run_worker(cfg, argv, &numa, i, group_rank, port)) != 0)
            return fd;
    agent_numa_free(&numa);
    return fflush(stdout) == 0 ? 0 : AGENT_EXIT_INTERNAL;
}

/* Per-task console/file flags for shared-GPU mode (task index = "local rank"). Returns a
 * calloc'd block of 3 * n bytes or NULL. */
static unsigned char *std_flags(const struct launcher_config *cfg, int n)
{
    unsigned char *flags = calloc((size_t)n * 3, 1);
    if (flags == NULL)
        return NULL;
    for (int i = 0; i < n; i++) {
        flags[i] = (unsigned char)launcher_std_for_rank(&cfg->redirects, i);
        flags[n + i] = (unsigned char)launcher_std_for_rank(&cfg->tee, i);
        flags[2 * n + i] = (unsigned char)launcher_rank_shown(cfg, i);
    }
    return flags;
}

static void shared_options(const struct launcher_config *cfg, char **argv,
                           const unsigned char *flags, struct agent_shared_options *o)
{
    int n = cfg->nproc_per_node;

    memset(o, 0, sizeof(*o));
    o->run_id = cfg->rdzv_id;
    o->argv = argv;
    o->gpu_ids = cfg->gpu_ids;
    o->ngpus = (unsigned)cfg->ngpu_ids;
    o->per_gpu = (unsigned)cfg->nproc_per_gpu;
    o->mem_fraction = cfg->gpu_mem_fraction;
    o->gpu_mem_bytes = (uint64_t)cfg->gpu_mem_bytes;
    o->mps = cfg->mps == 1 ? AGENT_MPS_ON : cfg->mps == 2 ? AGENT_MPS_AUTO : AGENT_MPS_OFF;
    o->max_restarts = cfg->restart.max_restarts;
    o->backoff_min_ms = cfg->restart.backoff_min_ms;
    o->backoff_max_ms = cfg->restart.backoff_max_ms;
    o->shutdown_timeout_ms = cfg->restart.shutdown_timeout_ms;
    o->log_dir = cfg->log_dir;
    o->redirect = flags;
    o->tee = flags + n;
    o->shown = flags + 2 * n;
    o->signals_to_handle = cfg->signals_to_handle;
    o->telemetry_ms = cfg->health.telemetry_ms;
}

/* --dry-run of shared-GPU mode: every task's environment, one port per task. */
static int dry_run_shared(const struct launcher_config *cfg, char **argv)
{
    struct agent_shared_options o;
    unsigned char *flags = std_flags(cfg, cfg->nproc_per_node);
    int rc = 0;

    if (flags == NULL)
        return AGENT_EXIT_INTERNAL;
    shared_options(cfg, argv, flags, &o);
    printf("run_id=%s\nmode=shared-gpu\ngpus=%d\nnproc_per_gpu=%d\nworkers=%d\n"
           "gpu_mem_fraction=%.4f\nmps=%s\nmax_restarts=%u (per worker)\n",
           cfg->rdzv_id, cfg->ngpu_ids, cfg->nproc_per_gpu, cfg->nproc_per_node,
           cfg->gpu_mem_fraction,
           cfg->mps == 1   ? "on"
           : cfg->mps == 2 ? "auto"
                           : "off",
           cfg->restart.max_restarts);
    print_backoff(cfg);
    launcher__opt_print_changed(cfg, stdout);
    if (cfg->auto_batch)
        printf("# --auto-batch: a probe run at batch %d plans MUSTER_BATCH_SIZE at start\n",
               LAUNCHER_AUTO_BATCH_PROBE);
    if (cfg->mps)
        printf("# --mps: MPS renumbers the daemon's GPUs from 0, so numeric CUDA_VISIBLE_DEVICES "
               "become positions in the list; each worker also gets CUDA_MPS_* (pipe directory, "
               "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT)\n");
    for (int i = 0; rc == 0 && i < cfg->nproc_per_node; i++) {
        struct agent_env env;
        unsigned port = 0;
        int fd;
        if (agent_port_reserve(&fd, &port) == 0)
            close(fd);
        agent_env_init(&env);
        if (agent_shared_task_env(&o, (unsigned)i, port, 0, "", &env, environ) != 0)
            rc = AGENT_EXIT_INTERNAL;
        printf("\n[worker %d]\n", i);
        print_command(argv);
        for (size_t k = 0; rc == 0 && k < env.len; k++)
            printf("%s\n", env.vars[k]);
        agent_env_free(&env);
    }
    free(flags);
    return rc == 0 && fflush(stdout) == 0 ? 0 : AGENT_EXIT_INTERNAL;
}

static int run_shared(const struct launcher_config *cfg, char **argv)
{
    struct agent_shared_options o;
    unsigned char *flags = std_flags(cfg, cfg->nproc_per_node);
    char batch_s[24];
    long batch;
    int rc;

    if (flags == NULL)
        return AGENT_EXIT_INTERNAL;
    shared_options(cfg, argv, flags, &o);
    if (cfg->auto_batch) {
        rc = launcher_plan_auto_batch(argv, cfg->gpu_ids[0], (unsigned)cfg->nproc_per_gpu,
                                      cfg->gpu_mem_fraction, cfg->gpu_mem_bytes,
                                      LAUNCHER_AUTO_BATCH_PROBE, &batch);
        if (rc != 0) {
            free(flags);
            return rc;
        }
        snprintf(batch_s, sizeof(batch_s), "%ld", batch);
        o.batch_size = batch_s;
    }
    rc = agent_shared_run(&o);
    free(flags);
    return rc;
}

static enum agent_host_mode host_mode(const struct launcher_config *cfg)
{
    if (cfg->rdzv_host == NULL)
        return AGENT_HOST_ALWAYS; /* --standalone, or one node with no endpoint */
    if (cfg->rdzv_is_host >= 0)   /* --rdzv-conf is_host, as torchrun's c10d backend */
        return cfg->rdzv_is_host ? AGENT_HOST_ALWAYS : AGENT_HOST_NEVER;
    return AGENT_HOST_IF_LOCAL;
}

/* 32 hex digits from the kernel's random source. */
static int random_token(char *buf, size_t len)
{
    unsigned char b[16];
    if (len < 2 * sizeof(b) + 1 || getentropy(b, sizeof(b)) != 0)
        return -EIO;
    for (size_t i = 0; i < sizeof(b); i++)
        snprintf(buf + 2 * i, 3, "%02x", b[i]);
    explicit_bzero(b, sizeof(b));
    return 0;
}

/* Where the rendezvous is and what this node asks of it; token is set by run_agent. */
static void rdzv_opts(const struct launcher_config *cfg, struct agent_rdzv_opts *r)
{
    *r = (struct agent_rdzv_opts){
        .host = cfg->rdzv_host ? cfg->rdzv_host : "127.0.0.1",
        .port = cfg->rdzv_host ? cfg->rdzv_port : 0,
        .host_mode = host_mode(cfg),
        .token = cfg->token,
        .token_hint = cfg->token_hint,
        .token_hint_host = cfg->token_hint_host,
        .http_host = cfg->http_host,
        .http_port = cfg->http_port,
        .tls_cert = cfg->tls_cert,
        .tls_key = cfg->tls_key,
        .tls_ca = cfg->tls_ca,
        .no_forward_secrecy = cfg->rdzv_no_forward_secrecy,
        .min_nodes = (unsigned)cfg->min_nodes,
        .max_nodes = (unsigned)cfg->max_nodes,
        .join_timeout_ms = cfg->join_timeout_ms,
        .last_call_ms = cfg->last_call_timeout_ms,
        .keep_alive_ms = cfg->keep_alive_interval_ms,
        .heartbeat_timeout_ms = cfg->heartbeat_timeout_ms,
        .reconnect_grace_ms = cfg->reconnect_grace_ms,
        .local_addr = cfg->local_addr,
        .master_port = (unsigned)cfg->master_port, /* 0: a free port, reserved per round */
    };
    if (r->local_addr == NULL && cfg->rdzv_host == NULL && cfg->max_nodes <= 1 && !cfg->standalone)
        r->local_addr = cfg->master_addr; /* torchrun's static default: --master-addr as given */
}

/* The static recipe and the static backend adjust the rendezvous options they share. */
static void static_opts(const struct launcher_config *cfg, struct agent_rdzv_opts *r,
                        struct agent_static_opts *st)
{
    memset(st, 0, sizeof(*st));
    if (cfg->static_recipe) { /* config.c parse_static_recipe(): rank 0 hosts, ranks follow */
        r->want_rank = (unsigned)cfg->node_rank + 1;
        r->host_mode = cfg->node_rank == 0 ? AGENT_HOST_ALWAYS : AGENT_HOST_NEVER;
        if (cfg->node_rank == 0 && r->local_addr == NULL)
            r->local_addr = cfg->master_addr; /* MASTER_ADDR as given, to every node */
    } else if (cfg->backend == LAUNCHER_BACKEND_STATIC && cfg->rdzv_host == NULL) {
        r->local_addr = cfg->master_addr; /* one node: it is the master */
        r->master_port = (unsigned)cfg->master_port;
        if (cfg->max_nodes > 1) {
            r->min_nodes = r->max_nodes = 1; /* the private server knows only this node */
            st->on = 1;
            st->node_rank = (unsigned)cfg->node_rank;
            st->nnodes = (unsigned)cfg->max_nodes;
            st->master_addr = cfg->master_addr;
            st->master_port = cfg->master_port ? (unsigned)cfg->master_port : 29500;
        }
    }
}

static void output_opts(const struct launcher_config *cfg, const unsigned char *flags,
                        struct agent_output_opts *out)
{
    int n = cfg->nproc_per_node;

    *out = (struct agent_output_opts){
        .logs_disabled = cfg->log_dir != NULL && strcmp(cfg->log_dir, "/dev/null") == 0,
        .redirect = flags,
        .tee = flags + n,
        .shown = flags + 2 * n,
        .prefix_template = cfg->prefix_template,
        .no_prefix = cfg->no_prefix,
        .dedup_ms = cfg->dedup_ms,
    };
    out->log_dir = out->logs_disabled ? NULL : cfg->log_dir;
    for (int s = 0; s < 2; s++)
        out->dup_filters[s] = (const char *const *)cfg->dup_filters[s];
}

/* The pre-flight node program is this muster binary's hidden __preflight-node command
 * (main.c): the agent library is told so instead of assuming it. */
static void preflight_opts(const struct launcher_config *cfg, const char *const *node_argv,
                           struct agent_preflight_opts *pf)
{
    int n = cfg->nproc_per_node;

    *pf = cfg->pf; /* parsed in place (options.def) */
    pf->need_gpus = cfg->gpus_visible > 0 && strcmp(cfg->nproc_spec, "cpu") != 0 ? (unsigned)n : 0;
    pf->node_argv = node_argv;
    if (cfg->preflight_skipped)
        mc_info("pre-flight skipped: %d workers but %d GPUs, so not one GPU per worker "
                "(--preflight on checks anyway)",
                n, cfg->gpus_visible);
}

/* The agent's options from the parsed command line. Borrows cfg, argv, flags, numa and
 * node_argv for as long as o is used. */
static void agent_opts(const struct launcher_config *cfg, char **argv, const unsigned char *flags,
                       const struct agent_numa *numa, const char *const *node_argv,
                       struct agent_options *o)
{
    memset(o, 0, sizeof(*o));
    o->run_id = cfg->rdzv_id;
    rdzv_opts(cfg, &o->rdzv);
    static_opts(cfg, &o->rdzv, &o->static_ranks);
    o->work = (struct agent_worker_opts){.argv = argv,
                                         .nproc = (unsigned)cfg->nproc_per_node,
                                         .role = cfg->role,
                                         .signals_to_handle = cfg->signals_to_handle,
                                         .virtual_local_rank = cfg->virtual_local_rank,
                                         .numa = numa->nbind > 0 ? numa : NULL,
                                         .torch_version = cfg->torch_version};
    o->restart = cfg->restart; /* parsed in place (options.def) */
    output_opts(cfg, flags, &o->out);
    o->ckpt = cfg->ckpt; /* parsed in place (options.def) */
    preflight_opts(cfg, node_argv, &o->pf);
    o->health = cfg->health; /* mode and timeouts parsed in place (options.def) */
    /* the GPUs the workers use: shared-GPU mode's list, else one per worker as far as there are
     * GPUs; none for --nproc-per-node cpu */
    if (cfg->nproc_per_gpu > 0)
        o->health.ngpus = (unsigned)cfg->ngpu_ids;
    else if (cfg->gpus_visible > 0 && strcmp(cfg->nproc_spec, "cpu") != 0)
        o->health.ngpus = (unsigned)(cfg->nproc_per_node < cfg->gpus_visible ? cfg->nproc_per_node
                                                                             : cfg->gpus_visible);
}

static int run_agent(const struct launcher_config *cfg, char **argv)
{
    char *token = NULL; /* a single node's own token, in a secret region (secret.h) */
    unsigned char *flags = std_flags(cfg, cfg->nproc_per_node);
    char self[PATH_MAX] = "/proc/self/exe";
    const char *node_argv[] = {self, "__preflight-node", NULL};
    struct agent_options o;
    struct agent_numa numa;
    ssize_t len;
    int rc;

    if (flags == NULL)
        return AGENT_EXIT_INTERNAL;
    if ((rc = numa_plan(cfg, &numa, stderr)) != 0) {
        free(flags);
        return rc;
    }
    /* the real path, as the pre-flight finds muster-preflight next to it */
    if ((len = readlink("/proc/self/exe", self, sizeof(self) - 1)) > 0)
        self[len] = '\0';
    agent_opts(cfg, argv, flags, &numa, node_argv, &o);
    if (o.rdzv.token == NULL && o.rdzv.tls_cert == NULL && cfg->max_nodes <= 1) {
        /* one node, so its server is its own: only this job's agent and workers
         * (MUSTER_TOKEN) learn the token, which keys the TLS of every connection. A shared
         * server needs the shared token (config.c refuses multi-node jobs without one). */
        if (launcher_secret_alloc(33, &token) != 0 || random_token(token, 33) != 0) {
            launcher_secret_free(token);
            agent_numa_free(&numa);
            free(flags);
            return AGENT_EXIT_INTERNAL;
        }
        o.rdzv.token = token;
    }
    rc = agent_run(&o);
    agent_numa_free(&numa);
    launcher_secret_free(token);
    free(flags);
    return rc;
}

int launcher_run_parsed(struct launcher_config *cfg)
{
    char **wargv = worker_argv(cfg);
    int rc;

    if (wargv == NULL)
        return AGENT_EXIT_INTERNAL;
    rc = run_agent(cfg, wargv);
    free(wargv);
    return rc;
}

int launcher_run(int argc, char **argv)
{
    struct launcher_config cfg;
    char err[LAUNCHER_ERR_MAX];
    char **wargv = NULL;
    int rc;

    launcher_secret_protect_process(); /* the agent holds the job's token (and MUSTER_TOKEN) */
    if (argc == 1 && strcmp(argv[0], "--help-markdown") == 0) { /* the README's table */
        launcher_print_run_markdown();
        return 0;
    }
    if (launcher_config_parse(argc, argv, &cfg, err, sizeof(err)) != 0) {
        mc_error("%s", err);
        launcher_config_free(&cfg);
        return AGENT_EXIT_USAGE;
    }
    if (cfg.help) {
        launcher_print_run_help();
        launcher_config_free(&cfg);
        return 0;
    }
    launcher_config_print_notes(&cfg, stderr);
    if ((wargv = worker_argv(&cfg)) == NULL)
        rc = AGENT_EXIT_INTERNAL;
    else if (cfg.dry_run)
        rc = cfg.nproc_per_gpu > 0 ? dry_run_shared(&cfg, wargv) : dry_run(&cfg, wargv);
    else
        rc = cfg.nproc_per_gpu > 0 ? run_shared(&cfg, wargv) : run_agent(&cfg, wargv);
    free(wargv);
    launcher_config_free(&cfg);
    return rc;
}
