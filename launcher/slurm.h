/* Slurm: defaults for `muster run` from the SLURM_* variables of a job step, and Slurm's
 * hostlist syntax (docs/SLURM.md). Flags given on the command line win; these fill only the rest.
 */
#ifndef MUSTER_LAUNCHER_SLURM_H
#define MUSTER_LAUNCHER_SLURM_H

#include <stddef.h>

/* A hostlist expanding to more hosts than this is refused (-E2BIG), before anything is
 * allocated: "n[0-999999999]" must not exhaust memory. */
#define LAUNCHER_HOSTLIST_MAX 65536
/* Longest host name produced, NUL included. */
#define LAUNCHER_HOST_MAX 256
/* The rendezvous port used with the first host of the node list (torchrun's default). */
#define LAUNCHER_SLURM_RDZV_PORT 29400

/* What the environment said; an absent value is -1 or "". */
struct launcher_slurm {
    int nnodes;                                /* SLURM_NNODES, else SLURM_JOB_NUM_NODES */
    char job_id[64];                           /* SLURM_JOB_ID, else SLURM_JOBID */
    char rdzv_host[LAUNCHER_HOST_MAX];         /* first host of the node list */
    char rdzv_endpoint[LAUNCHER_HOST_MAX + 8]; /* "HOST:29400" */
    const char *nodelist_var;                  /* which variable gave rdzv_host; NULL when none */
    int gpus;                                  /* GPUs given to this task */
    const char *gpus_var;                      /* which variable gave gpus; NULL when none */
    int node_rank;                             /* SLURM_NODEID */
    int ntasks_per_node;                       /* SLURM_NTASKS_PER_NODE */
    char bad[128];                             /* the first malformed "VAR=value", "" when none */
};

/* Expands a Slurm hostlist: comma-separated items, each literal text with any number of
 * bracket groups of comma-separated numbers and ranges, expanded as a cartesian product with
 * the first group varying slowest. Zero padding follows the lower bound's width:
 *   "node[01-04,07],gpu-a[1-2]" → node01 node02 node03 node04 node07 gpu-a1 gpu-a2
 *   "n[08-11]" → n08 n09 n10 n11      "rack1-n[1-2]-ib" → rack1-n1-ib rack1-n2-ib
 *   "r[1-2]n[1-2]" → r1n1 r1n2 r2n1 r2n2
 * Duplicates are kept, in order. On success *hosts is a new array of *n new strings (free it
 * with launcher_hostlist_free). Returns 0; -EINVAL for an empty list or item, unbalanced or
 * nested brackets, an empty group or range, a non-digit in a group, a reversed range, white
 * space, or a host longer than LAUNCHER_HOST_MAX - 1; -E2BIG above LAUNCHER_HOSTLIST_MAX
 * hosts; -ENOMEM. On error *hosts is NULL and *n 0. */
int launcher_hostlist_expand(const char *list, char ***hosts, size_t *n);

/* Frees what launcher_hostlist_expand returned; accepts NULL. */
void launcher_hostlist_free(char **hosts, size_t n);

/* Reads the Slurm variables from env (a NULL-terminated KEY=VALUE array such as environ;
 * borrowed; the first occurrence of a key counts; an empty value counts as absent) into out,
 * which is reset first: fields whose variables are absent stay -1 / "" / NULL.
 *
 *  nnodes      SLURM_NNODES (the step's), else SLURM_JOB_NUM_NODES
 *  job_id      SLURM_JOB_ID, else SLURM_JOBID (older Slurm)
 *  rdzv_*      first host of SLURM_STEP_NODELIST, else SLURM_JOB_NODELIST, else
 *              SLURM_NODELIST, port 29400. The step's list comes first because an `srun -N2`
 *              inside a larger allocation need not include the job's first node, and every
 *              agent of the step reads the same list.
 *  gpus        the first present of, most specific first:
 *              SLURM_GPUS_PER_TASK (a count, "2" or "a100:2": this task's share),
 *              SLURM_STEP_GPUS (a list of GPU indices of the step on this node: its length),
 *              SLURM_GPUS_ON_NODE (a count on this node),
 *              SLURM_JOB_GPUS (a list of the job's GPU indices on this node: its length).
 *              A list is "0,1,2" or with ranges "0-3,6"; a count may be 0 (no GPUs).
 *              SLURM_GPUS_PER_TASK may also name several types: "a100:1,v100:1" → 2.
 *  node_rank   SLURM_NODEID
 *  ntasks_per_node  SLURM_NTASKS_PER_NODE
 *
 * A malformed value leaves its field absent, the lower-precedence variables are not consulted
 * for it, and it is named in out->bad. Returns 0, or -EINVAL when some value was malformed
 * (everything well-formed is still filled in; the caller decides whether to warn or stop). */
int launcher_slurm_defaults(const char *const *env, struct launcher_slurm *out);

#endif
