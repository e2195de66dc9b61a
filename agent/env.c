#include "env.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void agent_env_init(struct agent_env *env)
{
    env->vars = NULL;
    env->len = 0;
    env->cap = 0;
}

void agent_env_free(struct agent_env *env)
{
    if (env == NULL)
        return;
    for (size_t i = 0; i < env->len; i++)
        free(env->vars[i]);
    free(env->vars);
    agent_env_init(env);
}

static size_t key_len(const char *kv)
{
    const char *eq = strchr(kv, '=');
    return eq ? (size_t)(eq - kv) : strlen(kv);
}

static long find(const struct agent_env *env, const char *key, size_t klen)
{
    for (size_t i = 0; i < env->len; i++)
        if (key_len(env->vars[i]) == klen && memcmp(env->vars[i], key, klen) == 0)
            return (long)i;
    return -1;
}

/* Takes ownership of kv. Keeps the array NULL-terminated so it can go to uv_spawn as is. */
static int put(struct agent_env *env, char *kv)
{
    long at = find(env, kv, key_len(kv));
    if (at >= 0) {
        free(env->vars[at]);
        env->vars[at] = kv;
        return 0;
    }
    if (env->len + 2 > env->cap) {
        size_t cap = env->cap ? env->cap * 2 : 64;
        char **v = realloc(env->vars, cap * sizeof(*v));
        if (v == NULL) {
            free(kv);
            return -ENOMEM;
        }
        env->vars = v;
        env->cap = cap;
    }
    env->vars[env->len++] = kv;
    env->vars[env->len] = NULL;
    return 0;
}

int agent_env_set(struct agent_env *env, const char *key, const char *value)
{
    size_t kl = strlen(key), vl = strlen(value);
    char *kv = malloc(kl + vl + 2);
    if (kv == NULL)
        return -ENOMEM;
    memcpy(kv, key, kl);
    kv[kl] = '=';
    memcpy(kv + kl + 1, value, vl + 1);
    return put(env, kv);
}

int agent_env_setf(struct agent_env *env, const char *key, const char *fmt, ...)
{
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(buf))
        return -EINVAL;
    return agent_env_set(env, key, buf);
}

const char *agent_env_get(const struct agent_env *env, const char *key)
{
    long at = find(env, key, strlen(key));
    return at >= 0 ? env->vars[at] + strlen(key) + 1 : NULL;
}

static const char *parent_get(char *const *parent, const char *key)
{
    size_t kl = strlen(key);
    for (; parent && *parent; parent++)
        if (strncmp(*parent, key, kl) == 0 && (*parent)[kl] == '=')
            return *parent + kl + 1;
    return NULL;
}

int agent_env_agent_store_wanted(char *const *parent)
{
    const char *v = parent_get(parent, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE");
    return v == NULL || strcmp(v, "1") != 0; /* torchrun compares with "1" exactly */
}

/* --virtual-local-rank: the worker sees its one GPU as device 0. Entry local_rank of the
 * agent's list, as written (torchrun strips blanks around it), else GPU local_rank. */
static int set_virtual_gpu(struct agent_env *env, const struct agent_worker_info *w,
                           char *const *parent)
{
    const char *cvd = parent_get(parent, "CUDA_VISIBLE_DEVICES"), *s = cvd;
    size_t len;

    if (cvd == NULL)
        return agent_env_setf(env, "CUDA_VISIBLE_DEVICES", "%d", w->local_rank) ? -ENOMEM : 0;
    for (int i = 0; i < w->local_rank; i++)
        if ((s = strchr(s, ',')) == NULL)
            return -ERANGE;
        else
            s++;
    len = strcspn(s, ",");
    while (len > 0 && (*s == ' ' || *s == '\t'))
        s++, len--;
    while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '\t'))
        len--;
    return agent_env_setf(env, "CUDA_VISIBLE_DEVICES", "%.*s", (int)len, s) ? -ENOMEM : 0;
}

int agent_env_for_worker(struct agent_env *env, const struct agent_worker_info *w,
                         char *const *parent)
{
    const char *nccl = parent_get(parent, "TORCH_NCCL_ASYNC_ERROR_HANDLING");
    int rc = 0;

    rc |= agent_env_setf(env, "RANK", "%d", w->rank);
    rc |= agent_env_setf(env, "LOCAL_RANK", "%d", w->local_rank);
    rc |= agent_env_setf(env, "GROUP_RANK", "%d", w->group_rank);
    rc |= agent_env_setf(env, "ROLE_RANK", "%d", w->role_rank);
    rc |= agent_env_set(env, "ROLE_NAME", w->role);
    rc |= agent_env_setf(env, "LOCAL_WORLD_SIZE", "%d", w->local_world_size);
    rc |= agent_env_setf(env, "WORLD_SIZE", "%d", w->world_size);
    rc |= agent_env_setf(env, "GROUP_WORLD_SIZE", "%d", w->group_world_size);
    rc |= agent_env_setf(env, "ROLE_WORLD_SIZE", "%d", w->role_world_size);
    rc |= agent_env_set(env, "MASTER_ADDR", w->master_addr);
    rc |= agent_env_setf(env, "MASTER_PORT", "%u", w->master_port);
    rc |= agent_env_setf(env, "TORCHELASTIC_RESTART_COUNT", "%u", w->restart_count);
    rc |= agent_env_setf(env, "TORCHELASTIC_MAX_RESTARTS", "%u", w->max_restarts);
    rc |= agent_env_set(env, "TORCHELASTIC_RUN_ID", w->run_id);
    /* True: every worker is a client of the agent's store, so rank 0 leaving first takes it
     * from no one; False: rank 0's init_process_group creates it */
    rc |= agent_env_set(env, "TORCHELASTIC_USE_AGENT_STORE", w->agent_store ? "True" : "False");
    rc |= agent_env_set(env, "TORCHELASTIC_ERROR_FILE", w->error_file);
    rc |= agent_env_set(env, "TORCH_NCCL_ASYNC_ERROR_HANDLING", nccl ? nccl : "1");
    /* torch < 2.2 reads only the old name (and defaults it off); 2.2+ reads the new one and
     * warns in every process when the old one is set (twice per worker), so the old
     * name goes only where the workers' PyTorch is older or unknown (launcher/torchver.h) */
    if (parent_get(parent, "NCCL_ASYNC_ERROR_HANDLING") == NULL &&
        (w->torch_version == 0 || w->torch_version < 202))
        rc |= agent_env_set(env, "NCCL_ASYNC_ERROR_HANDLING", nccl ? nccl : "1");
    if (parent_get(parent, "OMP_NUM_THREADS") == NULL && w->local_world_size > 1)
        rc |= agent_env_set(env, "OMP_NUM_THREADS", "1");
    rc |= agent_env_set(env, "MUSTER_JOB_ID", w->run_id);
    rc |= agent_env_setf(env, "MUSTER_RESTART_COUNT", "%u", w->restart_count);
    if (w->endpoint != NULL) {
        /* the token goes with the endpoint, empty when the server wants none: a worker never
         * sees a stale token inherited from elsewhere */
        rc |= agent_env_set(env, "MUSTER_ENDPOINT", w->endpoint);
        rc |= agent_env_setf(env, "MUSTER_ROUND", "%u", w->round);
        rc |= agent_env_set(env, "MUSTER_TOKEN", w->token ? w->token : "");
    }
    if (w->checkpoint_dir != NULL && w->checkpoint_dir[0] != '\0')
        rc |= agent_env_set(env, "MUSTER_CHECKPOINT_DIR", w->checkpoint_dir);
    if (w->resume_from != NULL && w->resume_from[0] != '\0')
        rc |= agent_env_set(env, "MUSTER_RESUME_FROM", w->resume_from);
    if (w->resume_parts != NULL && w->resume_parts[0] != '\0')
        rc |= agent_env_set(env, "MUSTER_RESUME_PARTS", w->resume_parts);
    if (w->heartbeat_file != NULL && w->heartbeat_file[0] != '\0')
        rc |= agent_env_set(env, "MUSTER_HEARTBEAT_FILE", w->heartbeat_file);
    if (w->signals_to_handle != NULL)
        rc |= agent_env_set(env, "TORCHELASTIC_SIGNALS_TO_HANDLE", w->signals_to_handle);
    if (rc == 0 && w->virtual_local_rank) {
        rc = agent_env_set(env, "LOCAL_RANK", "0");
        return rc ? -ENOMEM : set_virtual_gpu(env, w, parent);
    }
    return rc ? -ENOMEM : 0;
}

int agent_env_merge(const struct agent_env *env, char *const *parent, struct agent_env *out)
{
    agent_env_init(out);
    for (; parent && *parent; parent++) {
        if (strchr(*parent, '=') == NULL || find(env, *parent, key_len(*parent)) >= 0)
            continue;
        char *kv = strdup(*parent);
        if (kv == NULL || put(out, kv) != 0)
            goto fail;
    }
    for (size_t i = 0; i < env->len; i++) {
        char *kv = strdup(env->vars[i]);
        if (kv == NULL || put(out, kv) != 0)
            goto fail;
    }
    return 0;
fail:
    agent_env_free(out);
    return -ENOMEM;
}

int agent_env_build(const struct agent_worker_info *w, char *const *parent, struct agent_env *full)
{
    struct agent_env env;
    int rc;

    agent_env_init(&env);
    agent_env_init(full);
    rc = agent_env_for_worker(&env, w, parent);
    if (rc == 0)
        rc = agent_env_merge(&env, parent, full);
    agent_env_free(&env);
    return rc;
}

int agent_env_print(const struct agent_env *env, FILE *out)
{
    static const char token[] = "MUSTER_TOKEN=";

    for (size_t k = 0; k < env->len; k++)
        fprintf(out, "%s\n",
                strncmp(env->vars[k], token, sizeof(token) - 1) == 0 ? "MUSTER_TOKEN=<hidden>"
                                                                     : env->vars[k]);
    return ferror(out) ? -EIO : 0;
}
