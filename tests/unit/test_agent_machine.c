/* Unit tests for the agent's state machine (agent/machine.c) and, through agent_run(), for
 * the agent itself (agent.c, attempt.c, agent_ft.c, preflight.c): an in-process rendezvous
 * server on loopback (port 0), /bin/sh workers, a private temp directory per test. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent.h"
#include "log.h"
#include "machine.h"

/* ---- the transition function -------------------------------------------------------- */

static struct agent_step step(enum agent_state s, enum agent_event_kind k,
                              const struct agent_machine_ctx *c)
{
    struct agent_event ev = {.kind = k, .code = 42, .signum = SIGTERM};
    return agent_machine_next(s, &ev, c);
}

static void assert_step(struct agent_step st, enum agent_state want, unsigned actions)
{
    assert_false(st.ignored);
    assert_string_equal(agent_state_name(st.state), agent_state_name(want));
    assert_int_equal(st.actions, actions);
}

static void test_assign(void **state)
{
    struct agent_machine_ctx c = {0};
    (void)state;
    assert_step(step(AGENT_S_JOINING, AGENT_EV_ASSIGN, &c), AGENT_S_RUNNING,
                AGENT_ACT_START_WORKERS);
    c.preflight_due = 1;
    assert_step(step(AGENT_S_JOINING, AGENT_EV_ASSIGN, &c), AGENT_S_PREFLIGHT,
                AGENT_ACT_START_PREFLIGHT);
    c.preflight_due = 0;
    c.preflight_only = 1; /* a later round of `muster preflight` */
    assert_step(step(AGENT_S_JOINING, AGENT_EV_ASSIGN, &c), AGENT_S_DONE_WAIT,
                AGENT_ACT_REPORT_DONE);
    /* an old round's ASSIGN starts nothing */
    for (int s = AGENT_S_PREFLIGHT; s <= AGENT_S_FINISHED; s++)
        assert_true(step((enum agent_state)s, AGENT_EV_ASSIGN, &c).ignored);
}

static void test_worker_failed(void **state)
{
    struct agent_machine_ctx c = {.have_procs = 1};
    (void)state;
    assert_step(step(AGENT_S_RUNNING, AGENT_EV_WORKER_FAILED, &c), AGENT_S_FAILING,
                AGENT_ACT_STOP_WORKERS | AGENT_ACT_REPORT_FAILURE);
    /* a worker dying of our SIGTERM is no new failure */
    for (int s = 0; s <= AGENT_S_FINISHED; s++)
        if (s != AGENT_S_RUNNING)
            assert_true(step((enum agent_state)s, AGENT_EV_WORKER_FAILED, &c).ignored);
}

static void test_all_exited(void **state)
{
    struct agent_machine_ctx c = {0};
    (void)state;
    assert_step(step(AGENT_S_RUNNING, AGENT_EV_ALL_EXITED, &c), AGENT_S_DONE_WAIT,
                AGENT_ACT_REPORT_DONE);
    assert_step(step(AGENT_S_RESTARTING, AGENT_EV_ALL_EXITED, &c), AGENT_S_JOINING, AGENT_ACT_JOIN);
    assert_step(step(AGENT_S_STOPPING, AGENT_EV_ALL_EXITED, &c), AGENT_S_FINISHED,
                AGENT_ACT_FINISH);
    assert_true(step(AGENT_S_FAILING, AGENT_EV_ALL_EXITED, &c).ignored);
    assert_step(step(AGENT_S_PREFLIGHT, AGENT_EV_ALL_EXITED, &c), AGENT_S_RUNNING,
                AGENT_ACT_START_WORKERS);
    c.preflight_only = 1;
    assert_step(step(AGENT_S_PREFLIGHT, AGENT_EV_ALL_EXITED, &c), AGENT_S_DONE_WAIT,
                AGENT_ACT_REPORT_DONE);
    c.preflight_failed = 1;
    assert_step(step(AGENT_S_PREFLIGHT, AGENT_EV_ALL_EXITED, &c), AGENT_S_FAILING,
                AGENT_ACT_REPORT_PF_FAILURE);
    /* a node that joined a running job: it leaves with exit 4, the job goes on */
    c.preflight_only = 0;
    c.preflight_alone = 1;
    {
        struct agent_step st = step(AGENT_S_PREFLIGHT, AGENT_EV_ALL_EXITED, &c);
        assert_step(st, AGENT_S_FINISHED, AGENT_ACT_REPORT_PF_FAILURE | AGENT_ACT_FINISH);
        assert_true(st.set_exit_code);
        assert_int_equal(st.exit_code, AGENT_EXIT_PREFLIGHT);
    }
    c.preflight_failed = 0; /* passed: its workers start */
    assert_step(step(AGENT_S_PREFLIGHT, AGENT_EV_ALL_EXITED, &c), AGENT_S_RUNNING,
                AGENT_ACT_START_WORKERS);
}

/* The health check before a restart round: due (this node's ranks failed or hung, it has
 * GPUs) between the workers' end and the JOIN; a failure leaves the job with exit 4. */
static void test_health(void **state)
{
    struct agent_machine_ctx c = {.health_due = 1};
    struct agent_step st;

    (void)state;
    assert_step(step(AGENT_S_RESTARTING, AGENT_EV_ALL_EXITED, &c), AGENT_S_HEALTH,
                AGENT_ACT_START_HEALTH);
    assert_step(step(AGENT_S_FAILING, AGENT_EV_RESTART, &c), AGENT_S_HEALTH,
                AGENT_ACT_START_HEALTH); /* the workers were gone before RESTART came */
    c.have_procs = 1;                    /* the check's processes run */
    assert_true(step(AGENT_S_HEALTH, AGENT_EV_RESTART, &c).ignored);
    assert_true(step(AGENT_S_HEALTH, AGENT_EV_WORKER_FAILED, &c).ignored);
    assert_true(step(AGENT_S_HEALTH, AGENT_EV_ASSIGN, &c).ignored);
    st = step(AGENT_S_HEALTH, AGENT_EV_JOB_FAILED, &c); /* the job ends meanwhile */
    assert_step(st, AGENT_S_STOPPING, AGENT_ACT_STOP_WORKERS);
    assert_int_equal(st.exit_code, 42);
    st = step(AGENT_S_HEALTH, AGENT_EV_SIGNAL, &c);
    assert_step(st, AGENT_S_STOPPING, AGENT_ACT_REPORT_SIGNAL | AGENT_ACT_STOP_WORKERS);
    c.have_procs = 0; /* ended: passed, then failed */
    assert_step(step(AGENT_S_HEALTH, AGENT_EV_ALL_EXITED, &c), AGENT_S_JOINING, AGENT_ACT_JOIN);
    c.health_failed = 1;
    st = step(AGENT_S_HEALTH, AGENT_EV_ALL_EXITED, &c);
    assert_step(st, AGENT_S_FINISHED, AGENT_ACT_REPORT_HEALTH_FAILURE | AGENT_ACT_FINISH);
    assert_true(st.set_exit_code);
    assert_int_equal(st.exit_code, AGENT_EXIT_PREFLIGHT);
    /* the report goes out before the handles close: actions run in the order of the bits */
    assert_true(AGENT_ACT_REPORT_HEALTH_FAILURE < AGENT_ACT_FINISH);
    c.health_due = 0; /* not due: straight to the JOIN, as before */
    assert_step(step(AGENT_S_RESTARTING, AGENT_EV_ALL_EXITED, &c), AGENT_S_JOINING, AGENT_ACT_JOIN);
    assert_string_equal(agent_state_name(AGENT_S_HEALTH), "HEALTH");
}

static void test_restart(void **state)
{
    struct agent_machine_ctx c = {.have_procs = 1};
    (void)state;
    assert_step(step(AGENT_S_RUNNING, AGENT_EV_RESTART, &c), AGENT_S_RESTARTING,
                AGENT_ACT_STOP_WORKERS);
    assert_step(step(AGENT_S_PREFLIGHT, AGENT_EV_RESTART, &c), AGENT_S_RESTARTING,
                AGENT_ACT_STOP_WORKERS);
    c.have_procs = 0;
    assert_step(step(AGENT_S_FAILING, AGENT_EV_RESTART, &c), AGENT_S_JOINING, AGENT_ACT_JOIN);
    assert_step(step(AGENT_S_DONE_WAIT, AGENT_EV_RESTART, &c), AGENT_S_JOINING, AGENT_ACT_JOIN);
    assert_true(step(AGENT_S_STOPPING, AGENT_EV_RESTART, &c).ignored);
    assert_true(step(AGENT_S_FINISHED, AGENT_EV_RESTART, &c).ignored);
}

static void test_job_end(void **state)
{
    struct agent_machine_ctx c = {.have_procs = 1};
    struct agent_step st;
    (void)state;
    st = step(AGENT_S_DONE_WAIT, AGENT_EV_JOB_DONE, &c);
    assert_step(st, AGENT_S_STOPPING, AGENT_ACT_STOP_WORKERS);
    assert_true(st.set_exit_code);
    assert_int_equal(st.exit_code, 0);
    c.have_procs = 0;
    st = step(AGENT_S_FAILING, AGENT_EV_JOB_FAILED, &c);
    assert_step(st, AGENT_S_FINISHED, AGENT_ACT_FINISH);
    assert_int_equal(st.exit_code, 42); /* the failing worker's own code */
    c.stop_signal = SIGTERM;            /* the signal's exit code stands */
    assert_true(step(AGENT_S_STOPPING, AGENT_EV_JOB_FAILED, &c).ignored);
    c.stop_signal = 0;
    st = step(AGENT_S_RUNNING, AGENT_EV_RDZV_ERROR, &c);
    assert_step(st, AGENT_S_FINISHED, AGENT_ACT_FINISH);
    assert_int_equal(st.exit_code, AGENT_EXIT_RDZV);
    assert_true(step(AGENT_S_STOPPING, AGENT_EV_RDZV_ERROR, &c).ignored);
}

static void test_signal(void **state)
{
    struct agent_machine_ctx c = {.have_procs = 1, .preempt_signal = SIGUSR1};
    struct agent_event ev = {.kind = AGENT_EV_SIGNAL, .signum = SIGUSR1};
    struct agent_step st;
    (void)state;
    st = agent_machine_next(AGENT_S_RUNNING, &ev, &c);
    /* pre-empted: requeue me, and no failure report (every node gets the signal) */
    assert_step(st, AGENT_S_STOPPING, AGENT_ACT_STOP_WORKERS);
    assert_int_equal(st.exit_code, AGENT_EXIT_REQUEUE);
    ev.signum = SIGTERM; /* any other signal stops this node: reported */
    st = agent_machine_next(AGENT_S_RUNNING, &ev, &c);
    assert_step(st, AGENT_S_STOPPING, AGENT_ACT_REPORT_SIGNAL | AGENT_ACT_STOP_WORKERS);
    assert_int_equal(st.exit_code, 128 + SIGTERM);
    c.have_procs = 0;
    st = agent_machine_next(AGENT_S_JOINING, &ev, &c);
    assert_step(st, AGENT_S_FINISHED, AGENT_ACT_FINISH);
    /* a second signal: no more grace */
    c.have_procs = 1;
    c.stop_signal = SIGTERM;
    st = agent_machine_next(AGENT_S_STOPPING, &ev, &c);
    assert_step(st, AGENT_S_STOPPING, AGENT_ACT_KILL_WORKERS);
    assert_false(st.set_exit_code);
    assert_int_equal(agent_signal_exit_code(SIGINT, 0), 130);
    assert_int_equal(agent_signal_exit_code(SIGUSR1, SIGUSR1), 75);
}

static void test_report_failed_and_fatal(void **state)
{
    struct agent_machine_ctx c = {.have_procs = 1};
    struct agent_step st;
    (void)state;
    st = step(AGENT_S_FAILING, AGENT_EV_REPORT_FAILED, &c);
    assert_step(st, AGENT_S_STOPPING, 0); /* the workers are stopping already */
    assert_int_equal(st.exit_code, 42);
    c.have_procs = 0;
    assert_step(step(AGENT_S_FAILING, AGENT_EV_REPORT_FAILED, &c), AGENT_S_FINISHED,
                AGENT_ACT_FINISH);
    for (int s = 0; s < AGENT_S_FINISHED; s++) {
        st = step((enum agent_state)s, AGENT_EV_FATAL, &c);
        assert_step(st, AGENT_S_FINISHED, AGENT_ACT_FINISH);
        assert_int_equal(st.exit_code, 42);
    }
    for (int k = AGENT_EV_ASSIGN; k <= AGENT_EV_FATAL; k++)
        assert_true(step(AGENT_S_FINISHED, (enum agent_event_kind)k, &c).ignored);
    assert_string_equal(agent_state_name((enum agent_state)99), "?");
}

/* ---- the agent, in process ---------------------------------------------------------- */

struct fx {
    char dir[64];
    char script[512];
    char count[128]; /* one line per worker start */
    char ckpt[128];
    char *argv[4];
    unsigned char flags[3][4];
    struct agent_options o;
};

static int setup(void **state)
{
    struct fx *fx = calloc(1, sizeof(*fx));
    static int n;

    if (fx == NULL)
        return -1;
    snprintf(fx->dir, sizeof(fx->dir), "/tmp/muster-test-machine-XXXXXX");
    if (mkdtemp(fx->dir) == NULL)
        return -1;
    snprintf(fx->count, sizeof(fx->count), "%s/count", fx->dir);
    snprintf(fx->ckpt, sizeof(fx->ckpt), "%s/ckpt", fx->dir);
    fx->argv[0] = "/bin/sh";
    fx->argv[1] = "-c";
    fx->argv[2] = fx->script;
    fx->o.run_id = n++ % 2 ? "unit-machine-a" : "unit-machine-b";
    fx->o.rdzv = (struct agent_rdzv_opts){.host = "127.0.0.1",
                                          .host_mode = AGENT_HOST_ALWAYS,
                                          .token = "0123456789abcdef0123456789abcdef",
                                          .min_nodes = 1,
                                          .max_nodes = 1,
                                          .join_timeout_ms = 20000,
                                          .keep_alive_ms = 1000,
                                          .heartbeat_timeout_ms = 3000,
                                          .reconnect_grace_ms = 5000};
    fx->o.work = (struct agent_worker_opts){.argv = fx->argv, .nproc = 1, .role = "default"};
    fx->o.restart = (struct agent_restart_opts){.shutdown_timeout_ms = 2000};
    fx->o.out = (struct agent_output_opts){
        .redirect = fx->flags[0], .tee = fx->flags[1], .shown = fx->flags[2]};
    *state = fx;
    alarm(50); /* a watchdog: a stuck agent fails the test instead of the whole run */
    return 0;
}

static int teardown(void **state)
{
    struct fx *fx = *state;
    char cmd[128];

    alarm(0);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", fx->dir);
    if (system(cmd) != 0)
        return -1;
    free(fx);
    return 0;
}

static int lines(const char *path)
{
    FILE *f = fopen(path, "r");
    int n = 0, ch;

    if (f == NULL)
        return 0;
    while ((ch = fgetc(f)) != EOF)
        n += ch == '\n';
    fclose(f);
    return n;
}

static void test_run_ok(void **state)
{
    struct fx *fx = *state;

    fx->o.work.nproc = 2;
    snprintf(fx->script, sizeof(fx->script), "echo $RANK >> %s; exit 0", fx->count);
    assert_int_equal(agent_run(&fx->o), 0);
    assert_int_equal(lines(fx->count), 2);
}

/* The server's restart budget: max_restarts restarts, then the worker's own exit code. */
static void test_run_restarts_exhausted(void **state)
{
    struct fx *fx = *state;

    fx->o.restart.max_restarts = 2;
    snprintf(fx->script, sizeof(fx->script), "echo x >> %s; exit 3", fx->count);
    assert_int_equal(agent_run(&fx->o), 3);
    assert_int_equal(lines(fx->count), 3);
}

/* A checkpoint written by attempt 0 is MUSTER_RESUME_FROM of attempt 1. */
static void test_run_resume(void **state)
{
    struct fx *fx = *state;

    assert_int_equal(mkdir(fx->ckpt, 0700), 0);
    fx->o.ckpt.dir = fx->ckpt;
    fx->o.restart.max_restarts = 1;
    snprintf(fx->script, sizeof(fx->script),
             "echo \"$MUSTER_RESUME_FROM\" >> %s; [ -n \"$MUSTER_RESUME_FROM\" ] && exit 0; "
             "echo data > \"$MUSTER_CHECKPOINT_DIR/.t\" && "
             "mv \"$MUSTER_CHECKPOINT_DIR/.t\" \"$MUSTER_CHECKPOINT_DIR/step_10.pt\"; exit 1",
             fx->count);
    assert_int_equal(agent_run(&fx->o), 0);
    assert_int_equal(lines(fx->count), 2);
}

static void test_run_preempt(void **state)
{
    struct fx *fx = *state;

    fx->o.restart.preempt_signal = SIGUSR1;
    fx->o.restart.max_restarts = 3; /* pre-emption is no failure to restart from */
    snprintf(fx->script, sizeof(fx->script), "kill -USR1 %d; exec sleep 20", (int)getpid());
    assert_int_equal(agent_run(&fx->o), AGENT_EXIT_REQUEUE);
}

static void test_run_spawn_failure(void **state)
{
    struct fx *fx = *state;

    fx->argv[0] = "/nonexistent/muster-test-program";
    fx->o.work.nproc = 2;
    assert_int_equal(agent_run(&fx->o), 127);
}

static void test_run_hang(void **state)
{
    struct fx *fx = *state;

    fx->o.ckpt.hang_timeout_ms = 300;
    snprintf(fx->script, sizeof(fx->script), "touch \"$MUSTER_HEARTBEAT_FILE\"; exec sleep 20");
    assert_int_equal(agent_run(&fx->o), 1);
}

static void test_run_preflight(void **state)
{
    struct fx *fx = *state;
    const char *node[] = {"/bin/sh", "-c", "exit 0", "pf", NULL};

    fx->o.pf.on = 1;
    fx->o.pf.node_argv = node;
    snprintf(fx->script, sizeof(fx->script), "echo x >> %s", fx->count);
    assert_int_equal(agent_run(&fx->o), 0);
    assert_int_equal(lines(fx->count), 1);
}

static void test_run_preflight_fails(void **state)
{
    struct fx *fx = *state;
    const char *node[] = {"/bin/sh", "-c", "exit 1", "pf", NULL};

    fx->o.pf.on = 1;
    fx->o.pf.node_argv = node;
    fx->o.restart.max_restarts = 3; /* a failed pre-flight is final */
    snprintf(fx->script, sizeof(fx->script), "echo x >> %s", fx->count);
    assert_int_equal(agent_run(&fx->o), AGENT_EXIT_PREFLIGHT);
    assert_int_equal(lines(fx->count), 0);
}

static void test_run_preflight_only(void **state)
{
    struct fx *fx = *state;
    const char *node[] = {"/bin/sh", "-c", "exit 0", "pf", NULL};

    fx->o.pf.on = 1;
    fx->o.pf.only = 1;
    fx->o.pf.node_argv = node;
    snprintf(fx->script, sizeof(fx->script), "echo x >> %s", fx->count);
    assert_int_equal(agent_run(&fx->o), 0);
    assert_int_equal(lines(fx->count), 0);
}

/* Nobody listens: the join timeout ends the wait with the rendezvous exit code. */
static void test_run_no_server(void **state)
{
    struct fx *fx = *state;

    fx->o.rdzv.host_mode = AGENT_HOST_NEVER;
    fx->o.rdzv.port = 1; /* refused on loopback */
    fx->o.rdzv.join_timeout_ms = 1500;
    snprintf(fx->script, sizeof(fx->script), "exit 0");
    assert_int_equal(agent_run(&fx->o), AGENT_EXIT_RDZV);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_assign),
        cmocka_unit_test(test_worker_failed),
        cmocka_unit_test(test_all_exited),
        cmocka_unit_test(test_restart),
        cmocka_unit_test(test_health),
        cmocka_unit_test(test_job_end),
        cmocka_unit_test(test_signal),
        cmocka_unit_test(test_report_failed_and_fatal),
        cmocka_unit_test_setup_teardown(test_run_ok, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_restarts_exhausted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_resume, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_preempt, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_spawn_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_hang, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_preflight, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_preflight_fails, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_preflight_only, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_no_server, setup, teardown),
    };
    mc_log_set_level(MC_LOG_WARN); /* the agent's info lines would drown cmocka's */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
