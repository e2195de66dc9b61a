/* Worker environment: torchrun's variables plus muster's, built as an ordered KEY=VALUE list
 * and merged over the agent's own environment for spawning. */
#ifndef MUSTER_AGENT_ENV_H
#define MUSTER_AGENT_ENV_H

#include <stddef.h>
#include <stdio.h>

struct agent_env {
    char **vars; /* "KEY=VALUE" strings, owned; NULL-terminated once non-empty */
    size_t len, cap;
};

/* What one worker is: everything its environment is computed from. Strings are borrowed. */
struct agent_worker_info {
    int rank, local_rank, local_world_size;
    int group_rank, group_world_size;
    int role_rank, role_world_size;
    int world_size;
    const char *role;
    const char *master_addr;
    unsigned master_port;
    unsigned restart_count, max_restarts;
    const char *run_id;
    const char *error_file; /* "" when logs are disabled */
    /* for libmuster (muster.h): how workers reach the rendezvous server's KV store */
    const char *endpoint; /* "host:port" ("[v6]:port"), NULL: not exported */
    const char *token;    /* exported with the endpoint; NULL: "" */
    unsigned round;
    /* fault tolerance (each NULL or "": not exported) */
    const char *checkpoint_dir; /* MUSTER_CHECKPOINT_DIR */
    const char *resume_from;    /* MUSTER_RESUME_FROM: the checkpoint to resume from */
    const char *resume_parts;   /* MUSTER_RESUME_PARTS: its parts on this node (sharded) */
    const char *heartbeat_file; /* MUSTER_HEARTBEAT_FILE (--hang-timeout) */
    /* --signals-to-handle: TORCHELASTIC_SIGNALS_TO_HANDLE (NULL: not exported) */
    const char *signals_to_handle;
    /* --virtual-local-rank: LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES = entry local_rank of the
     * agent's CUDA_VISIBLE_DEVICES (or local_rank itself when it is unset), as torchrun */
    int virtual_local_rank;
    /* TORCHELASTIC_USE_AGENT_STORE=True: group rank 0's agent serves the TCPStore on
     * MASTER_PORT (agent/store.h) and every worker is a client; 0: worker rank 0 hosts it (the
     * shared-GPU mode, TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1) */
    int agent_store;
    int torch_version; /* 100 * major + minor of the workers' PyTorch; 0 unknown */
};

/* Whether the job uses the agent's TCPStore: 1 unless the agent's environment `parent` has
 * TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, torchrun's switch back to rank 0 hosting it. */
int agent_env_agent_store_wanted(char *const *parent);

void agent_env_init(struct agent_env *env);
void agent_env_free(struct agent_env *env);

/* Sets KEY=VALUE, replacing an earlier KEY. Returns 0 or -ENOMEM. */
int agent_env_set(struct agent_env *env, const char *key, const char *value);
int agent_env_setf(struct agent_env *env, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Returns KEY's value in env, or NULL. */
const char *agent_env_get(const struct agent_env *env, const char *key);

/* Fills env with the variables muster sets for one worker (torchrun's set, then MUSTER_*).
 * `parent` is the agent's environment (e.g. environ): inherited values such as
 * TORCH_NCCL_ASYNC_ERROR_HANDLING and OMP_NUM_THREADS are honoured; NCCL_ASYNC_ERROR_HANDLING
 * (the name torch before 2.2 reads) follows TORCH_NCCL_ASYNC_ERROR_HANDLING unless set.
 * Returns 0, -ENOMEM, or -ERANGE when virtual_local_rank finds no CUDA_VISIBLE_DEVICES entry
 * for the worker. */
int agent_env_for_worker(struct agent_env *env, const struct agent_worker_info *w,
                         char *const *parent);

/* Builds the full environment for spawning: every entry of `parent` whose key env does not
 * set, then env's entries. The result is a new env the caller frees. Returns 0 or -ENOMEM. */
int agent_env_merge(const struct agent_env *env, char *const *parent, struct agent_env *out);

/* The one builder of what a worker (or the pre-flight node, which runs as one) is started
 * with: agent_env_for_worker, then agent_env_merge over parent. *full is initialised here
 * and freed by the caller, also on failure. Returns 0, -ENOMEM or -ERANGE (as above). */
int agent_env_build(const struct agent_worker_info *w, char *const *parent, struct agent_env *full);

/* Prints env's entries one "KEY=VALUE" a line, as --dry-run shows a worker's variables:
 * MUSTER_TOKEN's value (a credential) as "<hidden>". Returns 0 or -EIO. */
int agent_env_print(const struct agent_env *env, FILE *out);

#endif
