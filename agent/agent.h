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
#define AGENT_EXIT_INTERNAL MC_EXIT_INTERNAL
#define AGENT_EXIT_REQUEUE MC_EXIT_REQUEUE

enum agent_host_mode {
    AGENT_HOST_NEVER,    /* connect to rdzv_host:rdzv_port */
    AGENT_HOST_ALWAYS,   /* run the server here on rdzv_host:rdzv_port (port 0: ephemeral) */
    AGENT_HOST_IF_LOCAL, /* host it when the address is this machine's and free, else connect */
};

struct agent_numa; /* numa.h */

struct agent_options {
    const char *run_id;
    const char *rdzv_host;
    unsigned rdzv_port;
    enum agent_host_mode host_mode;
    const char *token;  /* the credential (TLS pre-shared key, cred.h); required unless tls_cert */
    unsigned want_rank; /* 0, or 1 + the group rank to ask for (static recipe's --node-rank) */
    /* said when the rendezvous refuses the token (usertoken.h), or NULL */
    const char *token_hint;
    /* the same, logged by a hosted server refusing a node */
    const char *token_hint_host;
    const char *tls_cert, *tls_key, *tls_ca; /* certificate mode, or all NULL */
    unsigned min_nodes, max_nodes;
    unsigned nproc;
    unsigned max_restarts;
    unsigned join_timeout_ms, last_call_ms, shutdown_timeout_ms;
    unsigned keep_alive_ms, heartbeat_timeout_ms, reconnect_grace_ms;
    const char *role;
    const char *local_addr;        /* NULL: the server uses the address this agent connects from */
    unsigned master_port;          /* 0: reserve a free port for every round */
    char **argv;                   /* worker command, NULL-terminated */
    const char *log_dir;           /* NULL: a private directory, removed at exit */
    int logs_disabled;             /* --log-dir /dev/null */
    const unsigned char *redirect; /* per local rank: bit 1 stdout, bit 2 stderr to file only */
    const unsigned char *tee;      /* per local rank: to file and console */
    const unsigned char *shown;    /* per local rank: 1 = console output wanted */
    const char *signals_to_handle; /* NULL or exported as TORCHELASTIC_SIGNALS_TO_HANDLE */
    /* torchrun's --signals-to-handle: each stops the job, passed on to the workers (0 of
     * them: SIGTERM, SIGINT, SIGHUP, SIGQUIT, which are always handled) */
    const int *handle_signals;
    unsigned nhandle_signals;
    int virtual_local_rank;        /* --virtual-local-rank (env.h) */
    const struct agent_numa *numa; /* --numa-binding: per local rank CPUs and memory; or NULL */
    /* console output (output.h) */
    const char *prefix_template; /* TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE; NULL: "[rankN]: " */
    int no_prefix;               /* --no-prefix */
    unsigned dedup_ms;           /* --dedup window; 0: off */
    const char *const *dup_filters[2]; /* --duplicate-std{out,err}-filters; NULL: none */
    /* --rdzv-backend static across nodes: no shared rendezvous. Ranks come from
     * --node-rank and MASTER_ADDR/PORT from the flags; the agent still runs a private
     * server for its own restart accounting, so restarts are per node (as torchrun's). */
    /* fault tolerance (issue 5) */
    const char *checkpoint_dir; /* NULL: no checkpoint registry */
    unsigned keep_checkpoints;  /* 0 = keep all */
    unsigned hang_timeout_ms;   /* 0 = no hang detection */
    int preempt_signal;         /* 0 = none: this signal means "pre-empted", exit 75 */
    int static_ranks;
    unsigned static_node_rank, static_nnodes;
    const char *static_master_addr;
    unsigned static_master_port;
    /* pre-flight (issue 6): checks before the first attempt's workers start */
    int preflight;                /* 1: run the checks */
    int preflight_only;           /* `muster preflight`: no workers, exit after the checks */
    unsigned preflight_need_gpus; /* workers on this node that need a GPU (0: CPU job) */
    unsigned preflight_timeout_ms;
    double preflight_min_busbw; /* GB/s, 0 = no floor */
    int preflight_allow_mixed;
    const char *preflight_max_bytes; /* NULL: muster-preflight's default */
    double preflight_min_tflops;     /* per-GPU bf16 GEMM floor, 0 = none (issue 15) */
    double preflight_min_hbm_gbps;   /* per-GPU HBM copy floor, 0 = none */
    int preflight_allow_slow;        /* slow GPUs warn instead of failing */
};

/* Runs the job on this node until it ends. Borrows opts. Returns the process exit code. */
int agent_run(const struct agent_options *opts);

#endif
