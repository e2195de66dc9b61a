/* Unit tests for agent/shared.c (one task's environment, and whole runs of real /bin/sh tasks:
 * success, a task that fails restarting alone, a program that cannot run, a stop signal) and
 * agent/mps.c (the memory cap and the variables a worker gets when MPS is on; the daemon itself
 * is test_agent_mps.c). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent.h"
#include "harness.h"
#include "mps.h"
#include "shared.h"

static char *ids01[] = {"0", "1"};

/* The example: 2 GPUs, K = 3, F = 0.85. */
static struct agent_shared_options example(void)
{
    static char *argv[] = {"train.py", NULL};
    return (struct agent_shared_options){
        .run_id = "job7",
        .argv = argv,
        .gpu_ids = ids01,
        .ngpus = 2,
        .per_gpu = 3,
        .mem_fraction = 0.85,
        .max_restarts = 3,
        .shutdown_timeout_ms = 1000,
    };
}

static void assert_var(const struct agent_env *env, const char *key, const char *value)
{
    const char *v = agent_env_get(env, key);
    if (v == NULL)
        fail_msg("%s is not set", key);
    assert_string_equal(v, value);
}

static void test_task_env_example(void **state)
{
    (void)state;
    struct agent_shared_options o = example();
    static const char *const cvd[] = {"0", "0", "0", "1", "1", "1"};
    static const char *const gidx[] = {"0", "0", "0", "1", "1", "1"};
    char *parent[] = {"PATH=/usr/bin", "MUSTER_ENDPOINT=stale:1", NULL};

    for (unsigned t = 0; t < 6; t++) {
        struct agent_env env;
        char buf[32];
        agent_env_init(&env);
        assert_int_equal(
            agent_shared_task_env(&o, t, 30000 + t, t == 4 ? 2 : 0, "/logs/err.json", &env, parent),
            0);
        assert_var(&env, "CUDA_VISIBLE_DEVICES", cvd[t]);
        assert_var(&env, "MUSTER_GPU_INDEX", gidx[t]);
        snprintf(buf, sizeof(buf), "%u", t);
        assert_var(&env, "MUSTER_TASK_INDEX", buf);
        assert_var(&env, "MUSTER_TASK_COUNT", "6");
        assert_var(&env, "MUSTER_GPU_MEM_FRACTION", "0.2833");
        for (const char *const *k =
                 (const char *const[]){"RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", NULL};
             *k; k++)
            assert_var(&env, *k, "0");
        for (const char *const *k =
                 (const char *const[]){"WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE",
                                       "ROLE_WORLD_SIZE", NULL};
             *k; k++)
            assert_var(&env, *k, "1");
        assert_var(&env, "MASTER_ADDR", "127.0.0.1");
        snprintf(buf, sizeof(buf), "%u", 30000 + t);
        assert_var(&env, "MASTER_PORT", buf);
        assert_var(&env, "TORCHELASTIC_RESTART_COUNT", t == 4 ? "2" : "0");
        assert_var(&env, "TORCHELASTIC_RUN_ID", "job7");
        assert_var(&env, "TORCHELASTIC_ERROR_FILE", "/logs/err.json");
        assert_var(&env, "OMP_NUM_THREADS", "1");
        /* no rendezvous server: nothing for libmuster, and no MPS variables here */
        assert_null(agent_env_get(&env, "MUSTER_ENDPOINT"));
        assert_null(agent_env_get(&env, "MUSTER_BATCH_SIZE"));
        assert_null(agent_env_get(&env, "TORCHELASTIC_SIGNALS_TO_HANDLE"));
        assert_null(agent_env_get(&env, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"));
        agent_env_free(&env);
    }
}

static void test_task_env_optional(void **state)
{
    (void)state;
    struct agent_shared_options o = example();
    char *parent[] = {"OMP_NUM_THREADS=4", NULL};
    struct agent_env env;

    o.batch_size = "48";
    o.signals_to_handle = "SIGTERM,SIGUSR1";
    o.ngpus = 1;
    o.per_gpu = 4;
    o.mem_fraction = 0.9;
    agent_env_init(&env);
    assert_int_equal(agent_shared_task_env(&o, 3, 1234, 0, NULL, &env, parent), 0);
    assert_var(&env, "MUSTER_BATCH_SIZE", "48");
    assert_var(&env, "TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGTERM,SIGUSR1");
    assert_var(&env, "MUSTER_GPU_MEM_FRACTION", "0.2250");
    assert_var(&env, "MUSTER_TASK_COUNT", "4");
    assert_var(&env, "TORCHELASTIC_ERROR_FILE", "");
    assert_null(agent_env_get(&env, "OMP_NUM_THREADS")); /* the user's 4 is inherited */
    agent_env_free(&env);
}

static void test_mps_limit(void **state)
{
    (void)state;
    /* an H200 as cudaMemGetInfo reports it: 143155.9375 MiB * 0.85 / 4 = 30420.64 */
    assert_int_equal(agent_mps_limit_mib(150109880320ULL, 0.85, 4), 30420);
    /* 20 GiB * 0.85 = 17408 MiB exactly: 0.85 stored as 0.8499.. must not floor to 17407 */
    assert_int_equal(agent_mps_limit_mib(20ULL << 30, 0.85, 1), 17408);
    assert_int_equal(agent_mps_limit_mib(80ULL << 30, 1.0, 3), 27306);
    assert_int_equal(agent_mps_limit_mib(80ULL << 30, 0.85, 0), 0);
    assert_int_equal(agent_mps_limit_mib(1 << 20, 0.5, 1), 0);
}

static void test_mps_worker_env(void **state)
{
    (void)state;
    struct agent_shared_options o = example();
    char *ids[] = {"2", "GPU-8932f937-d72c"};
    struct agent_mps m;
    struct agent_env env;

    memset(&m, 0, sizeof(m));
    m.on = 1;
    m.limit_mib = 30420;
    snprintf(m.pipe_dir, sizeof(m.pipe_dir), "/tmp/x/pipe");
    snprintf(m.log_dir, sizeof(m.log_dir), "/tmp/x/log");
    o.gpu_ids = ids;
    for (unsigned t = 0; t < 6; t++) {
        agent_env_init(&env);
        assert_int_equal(agent_shared_task_env(&o, t, 1000, 0, "", &env, NULL), 0);
        assert_int_equal(agent_mps_worker_env(&m, &o, t, &env), 0);
        assert_var(&env, "CUDA_MPS_PIPE_DIRECTORY", "/tmp/x/pipe");
        assert_var(&env, "CUDA_MPS_LOG_DIRECTORY", "/tmp/x/log");
        assert_var(&env, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=30420M");
        /* the daemon sees "2,GPU-8932..": GPU 2 is its device 0; a UUID stays as it is */
        assert_var(&env, "CUDA_VISIBLE_DEVICES", t < 3 ? "0" : "GPU-8932f937-d72c");
        agent_env_free(&env);
    }
    m.on = 0; /* plain sharing: nothing added, nothing changed */
    agent_env_init(&env);
    assert_int_equal(agent_shared_task_env(&o, 0, 1000, 0, "", &env, NULL), 0);
    assert_int_equal(agent_mps_worker_env(&m, &o, 0, &env), 0);
    assert_var(&env, "CUDA_VISIBLE_DEVICES", "2");
    assert_null(agent_env_get(&env, "CUDA_MPS_PIPE_DIRECTORY"));
    agent_env_free(&env);
}

static void test_mps_off_and_stop_zeroed(void **state)
{
    (void)state;
    struct agent_shared_options o = example();
    struct agent_mps m;

    o.mps = AGENT_MPS_OFF;
    assert_int_equal(agent_mps_start(&m, &o), 0);
    assert_int_equal(m.on, 0);
    agent_mps_stop(&m);
    agent_mps_stop(&m); /* twice is fine */
    memset(&m, 0, sizeof(m));
    agent_mps_stop(&m);
}

/* --- agent_shared_run: 1 GPU, 2 tasks of `sh -c script` ----------------------------------- */
static char run_tmp[128];

static int run_setup(void **state)
{
    harness_mkdtemp(run_tmp, sizeof(run_tmp), "shared");
    setenv("RUN_DIR", run_tmp, 1);
    return 0;
}

static int run_teardown(void **state)
{
    unsetenv("RUN_DIR");
    harness_rmtree(run_tmp);
    return 0;
}

/* 1 GPU, 2 tasks of argv, nothing shown on the console. */
static struct agent_shared_options run_opts(char **argv, unsigned max_restarts, const char *log_dir)
{
    static unsigned char zero[2];

    return (struct agent_shared_options){.run_id = "unit",
                                         .argv = argv,
                                         .gpu_ids = ids01,
                                         .ngpus = 1,
                                         .per_gpu = 2,
                                         .mem_fraction = 1.0,
                                         .max_restarts = max_restarts,
                                         .shutdown_timeout_ms = 5000,
                                         .log_dir = log_dir,
                                         .redirect = zero,
                                         .tee = zero,
                                         .shown = zero};
}

static int run(const char *script, unsigned max_restarts, const char *log_dir)
{
    char *argv[] = {"/bin/sh", "-c", (char *)script, NULL};
    struct agent_shared_options o = run_opts(argv, max_restarts, log_dir);

    return agent_shared_run(&o);
}

/* How many times task i ran (each run appends a line to $RUN_DIR/runs.i). */
static int runs(int i)
{
    char path[256], text[256];
    int n = 0;

    snprintf(path, sizeof(path), "%s/runs.%d", run_tmp, i);
    if (harness_read_file(path, text, sizeof(text)) < 0)
        return 0;
    for (char *p = text; *p; p++)
        n += *p == '\n';
    return n;
}

#define COUNT_RUN "echo x >> \"$RUN_DIR/runs.$MUSTER_TASK_INDEX\"; "

static void test_run_all_succeed(void **state)
{
    assert_int_equal(run(COUNT_RUN "[ \"$MUSTER_TASK_COUNT\" = 2 ] && [ \"$RANK\" = 0 ]", 2, NULL),
                     0);
    assert_int_equal(runs(0), 1);
    assert_int_equal(runs(1), 1);
}

/* Task 1 fails every time: it restarts alone until its restarts are spent, then its code is
 * muster's; task 0 ran once. Its error file's message is read (log dir given). */
static void test_run_failing_task_restarts_alone(void **state)
{
    char logs[256];

    snprintf(logs, sizeof(logs), "%s/logs", run_tmp);
    assert_int_equal(run(COUNT_RUN "[ \"$MUSTER_TASK_INDEX\" = 0 ] && exit 0; "
                                   "echo '{\"message\": \"boom\"}' > \"$TORCHELASTIC_ERROR_FILE\"; "
                                   "exit 3",
                         2, logs),
                     3);
    assert_int_equal(runs(0), 1);
    assert_int_equal(runs(1), 3); /* the first run and 2 restarts */
}

/* Killed by a signal: 128 + the signal, like a shell says it. */
static void test_run_signalled_task(void **state)
{
    assert_int_equal(
        run(COUNT_RUN "[ \"$MUSTER_TASK_INDEX\" = 1 ] && kill -KILL $$; exit 0", 0, NULL), 128 + 9);
    assert_int_equal(runs(1), 1);
}

/* A program that cannot be executed counts as exit code 127, restarts included. */
static void test_run_cannot_execute(void **state)
{
    char *argv[] = {"/nonexistent/train", NULL};
    struct agent_shared_options o = run_opts(argv, 1, NULL);

    assert_int_equal(agent_shared_run(&o), 127);
    o.ngpus = 0; /* no task at all: a usage error */
    assert_int_equal(agent_shared_run(&o), AGENT_EXIT_USAGE);
}

/* SIGTERM to muster (here: sent by a task to its parent) stops every task: 128 + 15, and a
 * task ended by that signal is not restarted. */
static void test_run_stop_signal(void **state)
{
    /* task 0 signals once task 1 runs too */
    assert_int_equal(run(COUNT_RUN "if [ \"$MUSTER_TASK_INDEX\" = 0 ]; then "
                                   "while [ ! -s \"$RUN_DIR/runs.1\" ]; do :; done; "
                                   "kill -TERM $PPID; fi; exec sleep 30",
                         3, NULL),
                     128 + 15);
    assert_int_equal(runs(0), 1);
    assert_int_equal(runs(1), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_task_env_example),
        cmocka_unit_test(test_task_env_optional),
        cmocka_unit_test(test_mps_limit),
        cmocka_unit_test(test_mps_worker_env),
        cmocka_unit_test(test_mps_off_and_stop_zeroed),
        cmocka_unit_test_setup_teardown(test_run_all_succeed, run_setup, run_teardown),
        cmocka_unit_test_setup_teardown(test_run_failing_task_restarts_alone, run_setup,
                                        run_teardown),
        cmocka_unit_test_setup_teardown(test_run_signalled_task, run_setup, run_teardown),
        cmocka_unit_test_setup_teardown(test_run_cannot_execute, run_setup, run_teardown),
        cmocka_unit_test_setup_teardown(test_run_stop_signal, run_setup, run_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
