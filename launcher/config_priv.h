/* Internals shared by the files of `muster run`'s parser (options.c: the table and its generic
 * parsers; config.c: torchrun's flags, the rendezvous and validate(); config_gpu.c: GPU modes
 * and the pre-flight). Not for other components. */
#ifndef MUSTER_LAUNCHER_CONFIG_PRIV_H
#define MUSTER_LAUNCHER_CONFIG_PRIV_H

#include "config.h"
#include "options.h"
#include "slurm.h"

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

/* config_torchrun.c: the defaults of --rdzv-conf's keys given in seconds. */
void launcher__cfg_rdzv_conf_defaults(struct launcher_config *cfg);
/* config_torchrun.c: --rdzv-conf's keys (torchrun's and muster's). After parse_rdzv. Returns 0,
 * -EINVAL (reason in p->err) or -ENOMEM. */
int launcher__cfg_parse_rdzv_conf(struct parse *p);
/* config_torchrun.c: --signals-to-handle, --logs-specs, --numa-binding, --virtual-local-rank and
 * the notes for flags that do nothing in muster. After launcher__cfg_plan_gpu. 0 or
 * -EINVAL/-ENOMEM. */
int launcher__cfg_parse_torchrun(struct parse *p);

/* config_gpu.c: --gpu-mem and --mps, and how many GPUs this node's workers see. Returns 0 or
 * -EINVAL (reason in p->err). */
int launcher__cfg_parse_gpu(struct parse *p);
/* config_gpu.c, after validate(): the GPUs shared-GPU mode spreads its workers over and
 * --preflight (auto decided). Returns 0, -EINVAL (reason in p->err) or -ENOMEM. */
int launcher__cfg_plan_gpu(struct parse *p);

#endif
