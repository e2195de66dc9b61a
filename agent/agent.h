/* The per-node agent: joins the rendezvous (hosting it in-process when asked), starts the
 * workers of each round, watches them and follows the server's restart / done / failed
 * decisions. One libuv loop; never touches CUDA. */
#ifndef MUSTER_AGENT_AGENT_H
#define MUSTER_AGENT_AGENT_H

/* Exit codes of the agent itself (a worker's own code is returned as is): muster's one table,
 * common/exitcode.h, under the agent's names. */
#include "exitcode.h"
#define AGENT_EXIT_USAGE MC_EXIT_USAGE
#define AGENT_EXIT_RDZV MC_EXIT_RDZV
#define AGENT_EXIT_PREFLIGHT MC_EXIT_PREFLIGHT
#define AGENT_EXIT_NO_GPU MC_EXIT_NO_GPU
#define AGENT_EXIT_NOT_RETRYABLE MC_EXIT_NOT_RETRYABLE
#define AGENT_EXIT_INTERNAL MC_EXIT_INTERNAL
#define AGENT_EXIT_REQUEUE MC_EXIT_REQUEUE

enum agent_host_mode {
    AGENT_HOST_NEVER,    /* connect to rdzv.host:rdzv.port */
    AGENT_HOST_ALWAYS,   /* run the server here on rdzv.host:rdzv.port (port 0: ephemeral) */
    AGENT_HOST_IF_LOCAL, /* host it when the address is this machine's and free, else connect */
};

struct agent_numa; /* numa.h */

/* The options are grouped by the part of the agent that reads them, so that the launcher fills
 * one struct per concern and the agent hands each part a pointer to its own struct. Every
 * pointer is borrowed for the whole agent_run(). */

/* Where the rendezvous is, how to reach it, and what this node asks of it. */
struct agent_rdzv_opts {
    const char *host;
    unsigned port;
    enum agent_host_mode host_mode;
    const char *token; /* the credential (TLS pre-shared key, cred.h); required unless tls_cert */
    /* said when the rendezvous refuses the token (usertoken.h), or NULL */
    const char *token_hint;
    /* the same, logged by a hosted server refusing a node */
    const char *token_hint_host;
    const char *tls_cert, *tls_key, *tls_ca; /* certificate mode, or all NULL */
    int no_forward_secrecy; /* --rdzv-conf forward_secrecy=0: plain-PSK suites (tls.h) */
    unsigned want_rank;     /* 0, or 1 + the group rank to ask for (static recipe's --node-rank) */
    unsigned min_nodes, max_nodes;
    unsigned join_timeout_ms, last_call_ms;
    unsigned keep_alive_ms, heartbeat_timeout_ms, reconnect_grace_ms;
    const char *local_addr; /* NULL: the server uses the address this agent connects from */
    const char *http_host;  /* --http: the hosted server's HTTP port on it (NULL: none) */
    unsigned http_port;
    unsigned master_port; /* 0: reserve a free port for every round */
};

/* --rdzv-backend static across nodes: no shared rendezvous. Ranks come from --node-rank and
 * MASTER_ADDR/PORT from the flags; the agent still runs a private server for its own restart
 * accounting, so restarts are per node (as torchrun's). */
struct agent_static_opts {
    int on;
    unsigned node_rank, nnodes;
    const char *master_addr;
    unsigned master_port;
};

/* What runs on this node: the workers and their environment. */
struct agent_worker_opts {
    char **argv; /* worker command, NULL-terminated */
    unsigned nproc;
    const char *role;
    const char *signals_to_handle; /* NULL or exported as TORCHELASTIC_SIGNALS_TO_HANDLE */
    int virtual_local_rank;        /* --virtual-local-rank (env.h) */
    const struct agent_numa *numa; /* --numa-binding: per local rank CPUs and memory; or NULL */
    int torch_version; /* the workers' PyTorch, 100 * major + minor; 0 unknown (torchver.h) */
};

/* Restarts, shutdown and the signals that stop the job. */
struct agent_restart_opts {
    unsigned max_restarts;
    /* --restart-backoff MIN[:MAX] in ms (common/backoff.h); 0: restart at once. Multi-node: sent
     * in JOIN, the server holds each new round; shared-GPU mode: per task, here. */
    unsigned backoff_min_ms, backoff_max_ms;
    /* --exclude-after N[:WINDOW], sent in JOIN: the server refuses a node that caused N
     * failures of the job within the window (ms; 0: one hour). 0: never */
    unsigned exclude_after, exclude_window_ms;
    /* --max-same-failure K, sent in JOIN: the server ends the job (exit 6, not retryable)
     * once K attempts in a row ended with the same retry-limited failure signature
     * (signature.h) and no newer checkpoint; 0: never */
    unsigned max_same_failure;
    /* --exclude-stragglers K, sent in JOIN: the server excludes a node whose GPU it named a
     * straggler K times (rendezvous/handler_tel.c); 0: never */
    unsigned exclude_stragglers;
    /* --spare, sent in JOIN (RDZV_JOIN_SPARE): wait to replace a lost or excluded node */
    int spare;
    unsigned shutdown_timeout_ms;
    int preempt_signal; /* 0 = none: this signal means "pre-empted", exit 75 */
    /* torchrun's --signals-to-handle: each stops the job, passed on to the workers (0 of
     * them: SIGTERM, SIGINT, SIGHUP, SIGQUIT, which are always handled) */
    const int *handle_signals;
    unsigned nhandle_signals;
};

/* Log files and console output (output.h). */
struct agent_output_opts {
    const char *log_dir;           /* NULL: a private directory, removed at exit */
    int logs_disabled;             /* --log-dir /dev/null */
    const unsigned char *redirect; /* per local rank: bit 1 stdout, bit 2 stderr to file only */
    const unsigned char *tee;      /* per local rank: to file and console */
    const unsigned char *shown;    /* per local rank: 1 = console output wanted */
    const char *prefix_template;   /* TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE; NULL: "[rankN]: " */
    int no_prefix;                 /* --no-prefix */
    unsigned dedup_ms;             /* --dedup window; 0: off */
    const char *const *dup_filters[2]; /* --duplicate-std{out,err}-filters; NULL: none */
};

/* Fault tolerance (docs/FAULT_TOLERANCE.md): the checkpoint registry and hang detection. */
struct agent_ckpt_opts {
    const char *dir;              /* NULL: no checkpoint registry */
    unsigned keep;                /* 0 = keep all */
    unsigned hang_timeout_ms;     /* 0 = no hang detection */
    unsigned evidence_timeout_ms; /* --evidence-timeout: 0 = no evidence (agent/evidence.h) */
    unsigned replicate;           /* --replicate-checkpoints R: copies on other nodes; 0 = off */
    double replicate_mbps;        /* --replicate-bandwidth in MB/s; 0 = no cap */
    unsigned replicate_port;      /* --replicate-port: the direct link's port; 0 = ephemeral */
    unsigned settle_ms;           /* --checkpoint-settle; 0: AGENT_CKPTWATCH_SETTLE_MS */
    const char *marker;           /* --checkpoint-marker: a directory is complete with it; NULL */
    /* --resume-arg: appended to the worker's arguments when it resumes, "{}" replaced by the
     * checkpoint's path; NULL-terminated, or NULL */
    const char *const *resume_args;
};

/* Pre-flight (docs/PREFLIGHT.md): checks before the first attempt's workers start. */
struct agent_preflight_opts {
    int on;             /* 1: run the checks */
    int only;           /* `muster preflight`: no workers, exit after the checks */
    unsigned need_gpus; /* workers on this node that need a GPU (0: CPU job) */
    unsigned timeout_ms;
    double min_busbw; /* GB/s, 0 = no floor */
    int allow_mixed;
    const char *max_bytes; /* NULL: muster-preflight's default */
    double min_tflops;     /* per-GPU bf16 GEMM floor, 0 = none */
    double min_hbm_gbps;   /* per-GPU HBM copy floor, 0 = none */
    int allow_slow;        /* slow GPUs warn instead of failing */
    /* The node program and its first arguments, NULL-terminated: the launcher sets
     * {"/proc/self/exe", "__preflight-node", NULL}; the agent appends the check options. Needed
     * when on is set. */
    const char *const *node_argv;
};

/* The health check before a restart round (docs/PREFLIGHT.md "Health check before a restart
 * round"): muster-preflight health, one per GPU, on a node whose ranks failed or hung. */
enum agent_health_mode {
    AGENT_HEALTH_AUTO = 0, /* on a node with GPUs whose ranks failed or hung (default) */
    AGENT_HEALTH_OFF,
    AGENT_HEALTH_ALWAYS, /* on every node with GPUs, at every restart round */
};

struct agent_health_opts {
    int mode;              /* enum agent_health_mode */
    unsigned ngpus;        /* GPUs to check: 0 = a CPU job, the check is skipped */
    unsigned timeout_ms;   /* the whole check, drain included; then it is killed and fails */
    unsigned drain_ms;     /* at most this long for the killed workers' GPU memory */
    unsigned telemetry_ms; /* --gpu-telemetry: NVML sample period (telemetry.h); 0 = off */
};

struct agent_options {
    const char *run_id;
    struct agent_rdzv_opts rdzv;
    struct agent_static_opts static_ranks;
    struct agent_worker_opts work;
    struct agent_restart_opts restart;
    struct agent_output_opts out;
    struct agent_ckpt_opts ckpt;
    struct agent_preflight_opts pf;
    struct agent_health_opts health;
};

/* Runs the job on this node until it ends. Borrows opts. Returns the process exit code. */
int agent_run(const struct agent_options *opts);

#endif
