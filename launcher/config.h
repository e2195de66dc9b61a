/* `muster run` options: torchrun's flags (both --dash-case and --under_score spellings, each
 * also read from PET_<NAME>) plus muster's own. Parsing only: no I/O besides stat() checks. */
#ifndef MUSTER_LAUNCHER_CONFIG_H
#define MUSTER_LAUNCHER_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "agent.h"

#define LAUNCHER_ERR_MAX 512

enum launcher_backend { LAUNCHER_BACKEND_MUSTER, LAUNCHER_BACKEND_C10D, LAUNCHER_BACKEND_STATIC };

/* Per-local-rank stream selection for --redirects / --tee: bit 1 stdout, bit 2 stderr. */
struct launcher_std_spec {
    int all; /* value for ranks not in the map; -1 when only a map was given */
    int map_len;
    int map_rank[64];
    int map_val[64];
};

struct launcher_config {
    /* nodes and rendezvous */
    int min_nodes, max_nodes; /* --nnodes N or MIN:MAX */
    int nproc_per_node;       /* resolved number (cpu/gpu/auto already counted) */
    char nproc_spec[16];      /* as given: "4", "cpu", "gpu", "auto" */
    enum launcher_backend backend;
    char *rdzv_endpoint; /* "host:port" or NULL */
    char *rdzv_host;     /* parsed from endpoint (brackets stripped for IPv6) */
    unsigned rdzv_port;
    char *rdzv_id;   /* job id; random uuid for --standalone */
    char *http_host; /* --http: the hosted server's HTTP port (NULL: none) */
    unsigned http_port;
    int standalone;
    /* --rdzv-conf, milliseconds */
    unsigned join_timeout_ms, last_call_timeout_ms, close_timeout_ms;
    unsigned heartbeat_timeout_ms, keep_alive_interval_ms;
    unsigned reconnect_grace_ms; /* how long agents wait for a restarted server */
    /* supervision: the agent's own struct (agent.h), filled in place by the parser: max_restarts,
     * --restart-backoff's backoff_min_ms/backoff_max_ms (0: at once), --exclude-after's
     * exclude_after/exclude_window_ms, spare, shutdown_timeout_ms, preempt_signal (0: none;
     * SIGTERM under Slurm) and handle_signals (pointing at the array below). */
    struct agent_restart_opts restart;
    double monitor_interval; /* accepted and ignored: muster is event-driven */
    char *role;              /* default "default" */
    /* static backend */
    int static_recipe; /* torchrun's static recipe across nodes: node rank 0 hosts
                          the rendezvous on MASTER_ADDR:MASTER_PORT+1 */
    int node_rank;
    char *master_addr;
    int master_port; /* 0 = not given */
    char *local_addr;
    /* what to run */
    int module; /* -m */
    int no_python;
    int run_path;      /* --run-path: accepted, runs like a script */
    char *python_exec; /* PYTHON_EXEC or "python3", resolved to a path unless --no-python */
    int torch_version; /* the workers' PyTorch as 100 * major + minor, 0 unknown (torchver.h) */
    char *script;      /* training script, module or binary */
    int script_argc;
    char **script_argv; /* borrowed from argv */
    /* output */
    char *log_dir; /* NULL: a private temporary directory */
    struct launcher_std_spec redirects, tee;
    int *local_ranks_filter; /* NULL = all */
    int local_ranks_filter_len;
    char **dup_filters[2]; /* --duplicate-std{out,err}-filters, NULL-terminated; NULL: none */
    char *prefix_template; /* TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE; NULL: "[rankN]: " */
    int no_prefix;         /* --no-prefix */
    unsigned dedup_ms;     /* --dedup[=MS] window; 0: off */
    /* muster's own */
    int dry_run;
    int log_level;    /* -q/--quiet: MC_LOG_WARN, -v/--verbose: MC_LOG_DEBUG (applied), else 0 */
    int help;         /* -h/--help seen: nothing else was checked */
    char *token;      /* --token-file or MUSTER_TOKEN; never printed; secret.h region */
    char *token_file; /* --token-file */
    char *token_hint; /* with the per-user token (usertoken.h): what to say when
                         the nodes' tokens differ; NULL otherwise */
    char *token_hint_host;             /* the same, for the node hosting the rendezvous */
    char *tls_cert, *tls_key, *tls_ca; /* certificate mode: all three or none */
    char *signals_to_handle;           /* exported as TORCHELASTIC_SIGNALS_TO_HANDLE */
    /* torchrun's remaining flags and --rdzv-conf keys (config_torchrun.c) */
    int handle_signals[32]; /* --signals-to-handle: stopped on, passed to the workers */
    int nhandle_signals;
    int rdzv_is_host;              /* --rdzv-conf is_host: -1 unset (decide), 0 never, 1 host */
    int rdzv_no_forward_secrecy;   /* --rdzv-conf forward_secrecy=0: plain-PSK suites */
    unsigned rdzv_read_timeout_ms; /* --rdzv-conf read_timeout (60 s) */
    char numa_binding[16];         /* --numa-binding mode, "" off */
    int virtual_local_rank;        /* LOCAL_RANK=0 and one GPU in CUDA_VISIBLE_DEVICES each */
    char notes[1024];              /* warnings and notes for stderr, one per line */
    /* fault tolerance */
    /* The agent's own struct (agent.h), filled in place by the parser and handed over as is:
     * dir, keep, hang_timeout_ms, replicate, replicate_mbps, replicate_port, settle_ms (0: the
     * default), marker, and resume_args (below's, once parsed). dir and marker are strdup'd. */
    struct agent_ckpt_opts ckpt;
    char **resume_args; /* --resume-arg TEMPLATEs in order, NULL-terminated, or NULL; owned */
    int nresume_args;
    int slurm; /* SLURM_* supplied defaults: inside an allocation */
    /* GPUs (config_gpu.c) */
    int gpus_visible;  /* NVIDIA GPUs this node's workers would see */
    int nproc_per_gpu; /* --nproc-per-gpu K: shared-GPU mode when > 0 */
    char **gpu_ids;    /* shared-GPU mode: CUDA_VISIBLE_DEVICES entries in use */
    int ngpu_ids;
    double gpu_mem_fraction; /* F, default 0.85 */
    double gpu_mem_bytes;    /* --gpu-mem, 0 = ask the GPU */
    int mps;                 /* 0 off, 1 on, 2 auto */
    int auto_batch;
    /* pre-flight */
    /* pre-flight: the agent's own struct (agent.h), filled in place by the parser: on (auto
     * already decided), only (set by `muster preflight`: no workers), the floors, timeout_ms and
     * max_bytes (as given, checked, strdup'd; NULL = muster-preflight's default). run.c adds
     * need_gpus and node_argv. */
    struct agent_preflight_opts pf;
    struct agent_health_opts health; /* --health-* (mode: config_gpu.c; ngpus: run.c) */
    int preflight_skipped; /* auto chose off on a node with GPUs (more workers than GPUs) */
};

/* Parses `muster run` arguments (argv[0] is the first option, not the program name) with env
 * lookups through getenv(). Fills *cfg (call launcher_config_free later even on error).
 * Returns 0, or -EINVAL with a one-line reason in err (no trailing newline). */
int launcher_config_parse(int argc, char **argv, struct launcher_config *cfg, char *err,
                          size_t errlen);

/* Releases what parse allocated. Accepts a zeroed or half-filled config. */
void launcher_config_free(struct launcher_config *cfg);

/* Returns the stream bits (1 stdout, 2 stderr) spec selects for local_rank. */
int launcher_std_for_rank(const struct launcher_std_spec *spec, int local_rank);

/* Returns 1 when local_rank's console output is shown (--local-ranks-filter). */
int launcher_rank_shown(const struct launcher_config *cfg, int local_rank);

/* Prints cfg->notes (flags accepted that do nothing, unknown --rdzv-conf keys) to f, each line
 * as "muster: LINE". */
void launcher_config_print_notes(const struct launcher_config *cfg, FILE *f);

#endif
