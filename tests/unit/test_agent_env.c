/* Unit tests for agent/env.c: the worker environment and its merge over the parent's. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "env.h"

struct fx {
    struct agent_env env, merged;
    struct agent_worker_info w;
};

static int setup(void **state)
{
    struct fx *fx = calloc(1, sizeof(*fx));
    if (fx == NULL)
        return -1;
    agent_env_init(&fx->env);
    agent_env_init(&fx->merged);
    fx->w = (struct agent_worker_info){
        .rank = 5,
        .local_rank = 1,
        .local_world_size = 4,
        .group_rank = 1,
        .group_world_size = 2,
        .role_rank = 6,
        .role_world_size = 8,
        .world_size = 9,
        .role = "trainer",
        .master_addr = "10.0.0.1",
        .master_port = 29511,
        .restart_count = 2,
        .max_restarts = 3,
        .run_id = "job42",
        .error_file = "/logs/job42/attempt_2/1/error.json",
    };
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fx *fx = *state;
    agent_env_free(&fx->env);
    agent_env_free(&fx->merged);
    free(fx);
    return 0;
}

/* Asserts env holds key=value exactly once. */
static void assert_var(const struct agent_env *env, const char *key, const char *value)
{
    const char *v = agent_env_get(env, key);
    if (v == NULL)
        print_error("%s is not set\n", key);
    assert_non_null(v);
    assert_string_equal(v, value);
    size_t kl = strlen(key), seen = 0;
    for (size_t i = 0; i < env->len; i++)
        if (strncmp(env->vars[i], key, kl) == 0 && env->vars[i][kl] == '=')
            seen++;
    assert_int_equal(seen, 1);
}

static void assert_terminated(const struct agent_env *env)
{
    assert_non_null(env->vars);
    assert_null(env->vars[env->len]);
    for (size_t i = 0; i < env->len; i++)
        assert_non_null(strchr(env->vars[i], '='));
}

static void test_worker_env_all_variables(void **state)
{
    struct fx *fx = *state;
    char *parent[] = {"PATH=/usr/bin", "HOME=/root", NULL};

    assert_int_equal(agent_env_for_worker(&fx->env, &fx->w, parent), 0);
    assert_var(&fx->env, "RANK", "5");
    assert_var(&fx->env, "LOCAL_RANK", "1");
    assert_var(&fx->env, "GROUP_RANK", "1");
    assert_var(&fx->env, "ROLE_RANK", "6");
    assert_var(&fx->env, "ROLE_NAME", "trainer");
    assert_var(&fx->env, "LOCAL_WORLD_SIZE", "4");
    assert_var(&fx->env, "WORLD_SIZE", "9");
    assert_var(&fx->env, "GROUP_WORLD_SIZE", "2");
    assert_var(&fx->env, "ROLE_WORLD_SIZE", "8");
    assert_var(&fx->env, "MASTER_ADDR", "10.0.0.1");
    assert_var(&fx->env, "MASTER_PORT", "29511");
    assert_var(&fx->env, "TORCHELASTIC_RESTART_COUNT", "2");
    assert_var(&fx->env, "TORCHELASTIC_MAX_RESTARTS", "3");
    assert_var(&fx->env, "TORCHELASTIC_RUN_ID", "job42");
    assert_var(&fx->env, "TORCHELASTIC_USE_AGENT_STORE", "False");
    assert_var(&fx->env, "TORCHELASTIC_ERROR_FILE", "/logs/job42/attempt_2/1/error.json");
    assert_var(&fx->env, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
    assert_var(&fx->env, "NCCL_ASYNC_ERROR_HANDLING", "1"); /* torch < 2.2's name */
    assert_var(&fx->env, "OMP_NUM_THREADS", "1");
    assert_var(&fx->env, "MUSTER_JOB_ID", "job42");
    assert_var(&fx->env, "MUSTER_RESTART_COUNT", "2");
    /* exactly these 21, and nothing from the parent */
    assert_int_equal(fx->env.len, 21);
    assert_null(agent_env_get(&fx->env, "PATH"));
    assert_null(agent_env_get(&fx->env, "HOME"));
    assert_terminated(&fx->env);
}

static void test_worker_env_null_parent_and_empty_error_file(void **state)
{
    struct fx *fx = *state;
    fx->w.error_file = "";
    fx->w.restart_count = 0;
    fx->w.rank = 0;
    assert_int_equal(agent_env_for_worker(&fx->env, &fx->w, NULL), 0);
    assert_var(&fx->env, "TORCHELASTIC_ERROR_FILE", "");
    assert_var(&fx->env, "RANK", "0");
    assert_var(&fx->env, "TORCHELASTIC_RESTART_COUNT", "0");
    assert_var(&fx->env, "MUSTER_RESTART_COUNT", "0");
    assert_var(&fx->env, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
    assert_var(&fx->env, "OMP_NUM_THREADS", "1");
}

static void test_omp_only_when_unset_and_several_local_workers(void **state)
{
    struct fx *fx = *state;
    char *with_omp[] = {"OMP_NUM_THREADS=8", NULL};
    char *prefix_only[] = {"OMP_NUM_THREADS_X=3", "XOMP_NUM_THREADS=2", NULL};

    assert_int_equal(agent_env_for_worker(&fx->env, &fx->w, with_omp), 0);
    assert_null(agent_env_get(&fx->env, "OMP_NUM_THREADS"));
    assert_int_equal(fx->env.len, 20);
    agent_env_free(&fx->env);

    fx->w.local_world_size = 1;
    assert_int_equal(agent_env_for_worker(&fx->env, &fx->w, NULL), 0);
    assert_null(agent_env_get(&fx->env, "OMP_NUM_THREADS"));
    assert_var(&fx->env, "LOCAL_WORLD_SIZE", "1");
    agent_env_free(&fx->env);

    /* a variable whose name merely starts with OMP_NUM_THREADS is not it */
    fx->w.local_world_size = 2;
    assert_int_equal(agent_env_for_worker(&fx->env, &fx->w, prefix_only), 0);
    assert_var(&fx->env, "OMP_NUM_THREADS", "1");
}

static void test_nccl_async_inherited(void **state)
{
    struct fx *fx = *state;
    char *parent0[] = {"TORCH_NCCL_ASYNC_ERROR_HANDLING=0", NULL};
    char *parent3[] = {"A=b", "TORCH_NCCL_ASYNC_ERROR_HANDLING=3", NULL};
    char *lookalike[] = {"TORCH_NCCL_ASYNC_ERROR_HANDLING_X=0", NULL};

    assert_int_equal(agent_env_for_worker(&fx->env, &fx->w, parent0), 0);
    assert_var(&fx->env, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "0");
    agent_env_free(&fx->env);
    assert_int_equal(agent_env_for_worker(&fx->env, &fx->w, parent3), 0);
    assert_var(&fx->env, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "3");
    agent_env_free(&fx->env);
    assert_int_equal(agent_env_for_worker(&fx->env, &fx->w, lookalike), 0);
    assert_var(&fx->env, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
}

/* NCCL_ASYNC_ERROR_HANDLING (read by torch < 2.2) follows TORCH_NCCL_ASYNC_ERROR_HANDLING,
 * inherited or "1"; one the agent has is left alone (the merge passes it on). */
static void test_nccl_async_old_name(void **state)
{
    struct fx *fx = *state;
    char *torch0[] = {"TORCH_NCCL_ASYNC_ERROR_HANDLING=0", NULL};
    char *old2[] = {"NCCL_ASYNC_ERROR_HANDLING=2", NULL};

    assert_int_equal(agent_env_for_worker(&fx->env, &fx->w, torch0), 0);
    assert_var(&fx->env, "NCCL_ASYNC_ERROR_HANDLING", "0");
    agent_env_free(&fx->env);
    assert_int_equal(agent_env_for_worker(&fx->env, &fx->w, old2), 0);
    assert_null(agent_env_get(&fx->env, "NCCL_ASYNC_ERROR_HANDLING"));
    assert_var(&fx->env, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
    assert_int_equal(agent_env_merge(&fx->env, old2, &fx->merged), 0);
    assert_var(&fx->merged, "NCCL_ASYNC_ERROR_HANDLING", "2");
    /* a PyTorch known to read the new name (2.2+) does not get the old one, whose
     * deprecation warning it prints in every process; 1.13 and an unknown version do */
    agent_env_free(&fx->env);
    fx->w.torch_version = 211;
    assert_int_equal(agent_env_for_worker(&fx->env, &fx->w, NULL), 0);
    assert_null(agent_env_get(&fx->env, "NCCL_ASYNC_ERROR_HANDLING"));
    assert_var(&fx->env, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
    agent_env_free(&fx->env);
    fx->w.torch_version = 113;
    assert_int_equal(agent_env_for_worker(&fx->env, &fx->w, NULL), 0);
    assert_var(&fx->env, "NCCL_ASYNC_ERROR_HANDLING", "1");
}

/* --virtual-local-rank: LOCAL_RANK 0 and the worker's own entry of the agent's list (blanks
 * around it dropped), GPU local_rank without one, -ERANGE past its end. */
static void test_virtual_local_rank(void **state)
{
    struct fx *fx = *state;
    char *cvd[] = {"CUDA_VISIBLE_DEVICES=4, GPU-abc ,7", NULL};
    char *short_cvd[] = {"CUDA_VISIBLE_DEVICES=4", NULL};

    fx->w.virtual_local_rank = 1;
    assert_int_equal(agent_env_for_worker(&fx->env, &fx->w, cvd), 0);
    assert_var(&fx->env, "LOCAL_RANK", "0");
    assert_var(&fx->env, "CUDA_VISIBLE_DEVICES", "GPU-abc");
    assert_var(&fx->env, "RANK", "5");
    agent_env_free(&fx->env);
    assert_int_equal(agent_env_for_worker(&fx->env, &fx->w, NULL), 0);
    assert_var(&fx->env, "CUDA_VISIBLE_DEVICES", "1");
    agent_env_free(&fx->env);
    assert_int_equal(agent_env_for_worker(&fx->env, &fx->w, short_cvd), -ERANGE);
    agent_env_free(&fx->env);
    fx->w.virtual_local_rank = 0;
    assert_int_equal(agent_env_for_worker(&fx->env, &fx->w, cvd), 0);
    assert_var(&fx->env, "LOCAL_RANK", "1");
    assert_null(agent_env_get(&fx->env, "CUDA_VISIBLE_DEVICES")); /* inherited by the merge */
}

static void test_worker_env_twice_replaces(void **state)
{
    struct fx *fx = *state;
    assert_int_equal(agent_env_for_worker(&fx->env, &fx->w, NULL), 0);
    fx->w.restart_count = 3;
    fx->w.rank = 7;
    assert_int_equal(agent_env_for_worker(&fx->env, &fx->w, NULL), 0);
    assert_int_equal(fx->env.len, 21);
    assert_var(&fx->env, "RANK", "7");
    assert_var(&fx->env, "TORCHELASTIC_RESTART_COUNT", "3");
    assert_var(&fx->env, "MUSTER_RESTART_COUNT", "3");
}

static void test_set_replaces(void **state)
{
    struct fx *fx = *state;
    struct agent_env *e = &fx->env;

    assert_null(agent_env_get(e, "A"));
    assert_int_equal(agent_env_set(e, "A", "1"), 0);
    assert_int_equal(agent_env_set(e, "AB", "2"), 0);
    assert_int_equal(agent_env_set(e, "A", "3"), 0);
    assert_int_equal(e->len, 2);
    assert_string_equal(e->vars[0], "A=3");
    assert_string_equal(e->vars[1], "AB=2");
    assert_terminated(e);
    assert_string_equal(agent_env_get(e, "A"), "3");
    assert_string_equal(agent_env_get(e, "AB"), "2");
    assert_null(agent_env_get(e, "ABC"));
    assert_null(agent_env_get(e, "B"));

    assert_int_equal(agent_env_set(e, "K", "x=y"), 0);
    assert_string_equal(agent_env_get(e, "K"), "x=y");
    assert_int_equal(agent_env_set(e, "E", ""), 0);
    assert_string_equal(agent_env_get(e, "E"), "");
    assert_int_equal(agent_env_setf(e, "AB", "%d-%s", 42, "z"), 0);
    assert_string_equal(agent_env_get(e, "AB"), "42-z");
    assert_int_equal(e->len, 4);
}

static void test_set_grows(void **state)
{
    struct fx *fx = *state;
    char key[32], val[32];
    for (int i = 0; i < 300; i++) {
        snprintf(key, sizeof(key), "K%d", i);
        assert_int_equal(agent_env_setf(&fx->env, key, "v%d", i * 7), 0);
    }
    assert_int_equal(fx->env.len, 300);
    assert_terminated(&fx->env);
    for (int i = 0; i < 300; i++) {
        snprintf(key, sizeof(key), "K%d", i);
        snprintf(val, sizeof(val), "v%d", i * 7);
        assert_string_equal(agent_env_get(&fx->env, key), val);
    }
}

static void test_free_is_idempotent(void **state)
{
    struct fx *fx = *state;
    agent_env_free(&fx->env);
    assert_int_equal(agent_env_set(&fx->env, "A", "1"), 0);
    agent_env_free(&fx->env);
    assert_null(fx->env.vars);
    assert_int_equal(fx->env.len, 0);
    agent_env_free(&fx->env);
    agent_env_free(NULL);
}

static void test_merge(void **state)
{
    struct fx *fx = *state;
    char *parent[] = {
        "PATH=/usr/bin", "RANK=99", "NOEQUALS", "EMPTY=", "HOME=/root", "MASTER_PORT=1", NULL};

    assert_int_equal(agent_env_set(&fx->env, "RANK", "0"), 0);
    assert_int_equal(agent_env_set(&fx->env, "MASTER_PORT", "29500"), 0);
    assert_int_equal(agent_env_set(&fx->env, "NEW", "x"), 0);
    assert_int_equal(agent_env_merge(&fx->env, parent, &fx->merged), 0);

    struct agent_env *m = &fx->merged;
    assert_int_equal(m->len, 6);
    assert_terminated(m);
    /* parent entries that env does not set come first, in order; then env's */
    assert_string_equal(m->vars[0], "PATH=/usr/bin");
    assert_string_equal(m->vars[1], "EMPTY=");
    assert_string_equal(m->vars[2], "HOME=/root");
    assert_string_equal(m->vars[3], "RANK=0");
    assert_string_equal(m->vars[4], "MASTER_PORT=29500");
    assert_string_equal(m->vars[5], "NEW=x");
    assert_var(m, "RANK", "0");
    assert_var(m, "MASTER_PORT", "29500");
    assert_null(agent_env_get(m, "NOEQUALS"));
    /* the result is a copy: env and parent are untouched */
    assert_int_equal(fx->env.len, 3);
    assert_string_equal(parent[1], "RANK=99");
    assert_ptr_not_equal(m->vars[3], fx->env.vars[0]);
}

static void test_merge_edge_cases(void **state)
{
    struct fx *fx = *state;
    char *parent[] = {"A=1", "B=2", NULL};

    /* empty env: the parent copied */
    assert_int_equal(agent_env_merge(&fx->env, parent, &fx->merged), 0);
    assert_int_equal(fx->merged.len, 2);
    assert_terminated(&fx->merged);
    assert_string_equal(fx->merged.vars[0], "A=1");
    assert_string_equal(fx->merged.vars[1], "B=2");
    agent_env_free(&fx->merged);

    /* NULL parent: env copied */
    assert_int_equal(agent_env_set(&fx->env, "C", "3"), 0);
    assert_int_equal(agent_env_merge(&fx->env, NULL, &fx->merged), 0);
    assert_int_equal(fx->merged.len, 1);
    assert_terminated(&fx->merged);
    assert_string_equal(fx->merged.vars[0], "C=3");
    agent_env_free(&fx->merged);

    /* a key that is a prefix of a parent key does not hide it */
    char *parent2[] = {"CC=4", "C=old", NULL};
    assert_int_equal(agent_env_merge(&fx->env, parent2, &fx->merged), 0);
    assert_int_equal(fx->merged.len, 2);
    assert_string_equal(fx->merged.vars[0], "CC=4");
    assert_string_equal(fx->merged.vars[1], "C=3");
}

static void test_merge_full_worker_env(void **state)
{
    struct fx *fx = *state;
    char *parent[] = {"PATH=/bin", "OMP_NUM_THREADS=4", "TORCH_NCCL_ASYNC_ERROR_HANDLING=0",
                      "WORLD_SIZE=1", NULL};
    assert_int_equal(agent_env_for_worker(&fx->env, &fx->w, parent), 0);
    assert_int_equal(agent_env_merge(&fx->env, parent, &fx->merged), 0);
    assert_terminated(&fx->merged);
    assert_var(&fx->merged, "PATH", "/bin");
    assert_var(&fx->merged, "OMP_NUM_THREADS", "4");
    assert_var(&fx->merged, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "0");
    assert_var(&fx->merged, "WORLD_SIZE", "9");
    assert_int_equal(fx->merged.len, 20 + 2);
}

/* The rendezvous endpoint (libmuster) and the fault-tolerance variables: exported when given,
 * absent when NULL or "". */
static void test_endpoint_and_ft_variables(void **state)
{
    struct fx *fx = *state;

    fx->w.endpoint = "[::1]:29400";
    fx->w.token = NULL;
    fx->w.round = 7;
    fx->w.checkpoint_dir = "/ck";
    fx->w.resume_from = "/ck/ckpt_5.pt";
    fx->w.heartbeat_file = "/hb/heartbeat_2_1";
    assert_int_equal(agent_env_for_worker(&fx->env, &fx->w, NULL), 0);
    assert_var(&fx->env, "MUSTER_ENDPOINT", "[::1]:29400");
    assert_var(&fx->env, "MUSTER_ROUND", "7");
    assert_var(&fx->env, "MUSTER_TOKEN", "");
    assert_var(&fx->env, "MUSTER_CHECKPOINT_DIR", "/ck");
    assert_var(&fx->env, "MUSTER_RESUME_FROM", "/ck/ckpt_5.pt");
    assert_var(&fx->env, "MUSTER_HEARTBEAT_FILE", "/hb/heartbeat_2_1");
    fx->w.endpoint = NULL;
    fx->w.resume_from = "";
    agent_env_free(&fx->env);
    agent_env_init(&fx->env);
    assert_int_equal(agent_env_for_worker(&fx->env, &fx->w, NULL), 0);
    assert_null(agent_env_get(&fx->env, "MUSTER_ENDPOINT"));
    assert_null(agent_env_get(&fx->env, "MUSTER_TOKEN"));
    assert_null(agent_env_get(&fx->env, "MUSTER_RESUME_FROM"));
    assert_var(&fx->env, "MUSTER_CHECKPOINT_DIR", "/ck");
}

/* True when the agent serves the store; TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (and
 * only "1", as torchrun compares) turns it off */
static void test_agent_store(void **state)
{
    struct fx *fx = *state;
    char *none[] = {"PATH=/usr/bin", NULL};
    char *off[] = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1", NULL};
    char *zero[] = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE=0", NULL};
    char *yes[] = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE=true", NULL};

    assert_true(agent_env_agent_store_wanted(none));
    assert_true(agent_env_agent_store_wanted(NULL));
    assert_false(agent_env_agent_store_wanted(off));
    assert_true(agent_env_agent_store_wanted(zero));
    assert_true(agent_env_agent_store_wanted(yes));
    fx->w.agent_store = 1;
    assert_int_equal(agent_env_for_worker(&fx->env, &fx->w, none), 0);
    assert_var(&fx->env, "TORCHELASTIC_USE_AGENT_STORE", "True");
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_worker_env_all_variables),
        T(test_agent_store),
        T(test_nccl_async_old_name),
        T(test_virtual_local_rank),
        T(test_worker_env_null_parent_and_empty_error_file),
        T(test_omp_only_when_unset_and_several_local_workers),
        T(test_nccl_async_inherited),
        T(test_worker_env_twice_replaces),
        T(test_set_replaces),
        T(test_set_grows),
        T(test_free_is_idempotent),
        T(test_merge),
        T(test_merge_edge_cases),
        T(test_merge_full_worker_env),
        T(test_endpoint_and_ft_variables),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
