/* libFuzzer target: launcher_slurm_defaults(), the SLURM_* variables of a job step (node lists,
 * GPU counts and lists, numbers). The input is split on NUL bytes into an environment array;
 * byte 0 selects a prefix so that the fuzzer need not invent variable names: entries are
 * prefixed with names[byte % N] followed by '=' unless they already contain '='. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "slurm.h"

static const char *const names[] = {
    "SLURM_NNODES",          "SLURM_JOB_NUM_NODES", "SLURM_JOB_ID",   "SLURM_JOBID",
    "SLURM_STEP_NODELIST",   "SLURM_JOB_NODELIST",  "SLURM_NODELIST", "SLURM_GPUS_PER_TASK",
    "SLURM_STEP_GPUS",       "SLURM_GPUS_ON_NODE",  "SLURM_JOB_GPUS", "SLURM_NODEID",
    "SLURM_NTASKS_PER_NODE",
};
#define NNAMES (sizeof(names) / sizeof(names[0]))
#define MAXVARS 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct launcher_slurm out;
    char *store = NULL;
    int n = 0;
    char **parts = fuzz_split(data, size, MAXVARS, &n, &store);
    char *env[MAXVARS + 1] = {NULL};
    int rc;

    if (parts == NULL)
        return 0;
    for (int i = 0; i < n; i++) {
        const char *p = parts[i];
        if (strchr(p, '=') != NULL || *p == '\0') {
            env[i] = strdup(p);
        } else { /* first byte names the variable, the rest is its value */
            size_t len = strlen(names[0]) + 32 + strlen(p);
            env[i] = malloc(len + 64);
            if (env[i] != NULL)
                snprintf(env[i], len + 64, "%s=%s", names[(uint8_t)p[0] % NNAMES], p + 1);
        }
        if (env[i] == NULL)
            goto out;
    }
    rc = launcher_slurm_defaults((const char *const *)env, &out);
    if (rc != 0 && rc != -EINVAL)
        abort();
    if (rc == -EINVAL && out.bad[0] == '\0')
        abort(); /* a malformed value must be named */
    if (memchr(out.rdzv_host, '\0', sizeof(out.rdzv_host)) == NULL ||
        memchr(out.rdzv_endpoint, '\0', sizeof(out.rdzv_endpoint)) == NULL ||
        memchr(out.job_id, '\0', sizeof(out.job_id)) == NULL ||
        memchr(out.bad, '\0', sizeof(out.bad)) == NULL)
        abort();
out:
    for (int i = 0; i < n; i++)
        free(env[i]);
    free(parts);
    free(store);
    return 0;
}
