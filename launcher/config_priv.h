/* Internals shared by the files of `muster run`'s parser (config.c: torchrun's flags and the
 * rendezvous; config_gpu.c: GPU modes and the pre-flight). Not for other components. */
#ifndef MUSTER_LAUNCHER_CONFIG_PRIV_H
#define MUSTER_LAUNCHER_CONFIG_PRIV_H

#include "config.h"
#include "slurm.h"

/* OPT_OPTIONAL: a flag that may carry "=VALUE" (--mps, --mps=auto); alone it holds "1" */
enum opt_kind { OPT_FLAG, OPT_VALUE, OPT_OPTIONAL };

enum opt_id {
    O_NNODES,
    O_NPROC,
    O_RDZV_BACKEND,
    O_RDZV_ENDPOINT,
    O_RDZV_ID,
    O_RDZV_CONF,
    O_STANDALONE,
    O_MAX_RESTARTS,
    O_MONITOR_INTERVAL,
    O_START_METHOD,
    O_EVENT_LOG_HANDLER,
    O_ROLE,
    O_MODULE,
    O_NO_PYTHON,
    O_RUN_PATH,
    O_LOG_DIR,
    O_REDIRECTS,
    O_TEE,
    O_LOCAL_RANKS_FILTER,
    O_NODE_RANK,
    O_MASTER_ADDR,
    O_MASTER_PORT,
    O_LOCAL_ADDR,
    O_SHUTDOWN_TIMEOUT,
    O_SIGNALS_TO_HANDLE,
    O_DRY_RUN,
    O_HELP,
    O_CHECKPOINT_DIR,
    O_KEEP_CHECKPOINTS,
    O_HANG_TIMEOUT,
    O_RESTART_BACKOFF,
    O_EXCLUDE_AFTER,
    O_SPARE,
    O_PREEMPT_SIGNAL,
    O_TOKEN_FILE,
    O_TLS_CERT,
    O_TLS_KEY,
    O_TLS_CA,
    O_NPROC_PER_GPU,
    O_GPU_MEM_FRACTION,
    O_GPU_MEM,
    O_MPS,
    O_AUTO_BATCH,
    O_PREFLIGHT,
    O_PREFLIGHT_MIN_BUSBW,
    O_PREFLIGHT_ALLOW_MIXED,
    O_PREFLIGHT_TIMEOUT,
    O_PREFLIGHT_MAX_BYTES,
    O_PREFLIGHT_MIN_TFLOPS,
    O_PREFLIGHT_MIN_HBM_GBPS,
    O_PREFLIGHT_ALLOW_SLOW, /* issue 15 */
    O_LOGS_SPECS,
    O_NUMA_BINDING,
    O_VIRTUAL_LOCAL_RANK, /* torchrun's, config_torchrun.c */
    O_DUP_STDOUT_FILTERS,
    O_DUP_STDERR_FILTERS,
    O_NO_PREFIX,
    O_DEDUP, /* output (config.c) */
    O_QUIET,
    O_VERBOSE, /* log level (common/log.h) */
    O_REPLICATE_CHECKPOINTS,
    O_REPLICATE_BANDWIDTH, /* issue 19 */
    O_REPLICATE_PORT,
    O_CHECKPOINT_SETTLE,
    O_CHECKPOINT_MARKER,
    O_RESUME_ARG, /* repeatable: each one appends to cfg->resume_args */
    O_COUNT_
};

struct parse {
    struct launcher_config *cfg;
    struct launcher_slurm slurm; /* backs the p->val strings taken from SLURM_* */
    char slurm_nnodes[16], slurm_nproc[16];
    const char *val[O_COUNT_]; /* raw values; flags hold "1" */
    const char *src[O_COUNT_]; /* "--name" or "PET_NAME", for error messages */
    char *err;
    size_t errlen;
};

int launcher__cfg_fail(struct parse *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Strict integer: the whole string, base 10, within [lo, hi]. 0 or -EINVAL. */
int launcher__cfg_parse_int(const char *s, long lo, long hi, long *out);
/* Seconds as a non-negative decimal ("30", "0.5") converted to milliseconds. 0 or -EINVAL. */
int launcher__cfg_parse_seconds_ms(const char *s, unsigned *ms);

/* "TERM", "SIGUSR1", "usr1" or a number. 0 or -EINVAL. */
int launcher__cfg_parse_signal(const char *v, int *sig);

/* config_torchrun.c: --rdzv-conf's keys (torchrun's and muster's). After parse_rdzv. Returns 0,
 * -EINVAL (reason in p->err) or -ENOMEM. */
int launcher__cfg_parse_rdzv_conf(struct parse *p);
/* config_torchrun.c: --signals-to-handle, --logs-specs, --numa-binding, --virtual-local-rank and
 * the notes for flags that do nothing in muster. After launcher__cfg_parse_gpu. 0 or
 * -EINVAL/-ENOMEM. */
int launcher__cfg_parse_torchrun(struct parse *p);

/* config_gpu.c: --nproc-per-gpu, --gpu-mem*, --mps, --auto-batch and --preflight*. Runs after
 * --nproc-per-node and --nnodes are known. Returns 0 or -EINVAL (reason in p->err). */
int launcher__cfg_parse_gpu(struct parse *p);

#endif
