/* agent/group.c and agent/worker.c on a private loop with real workers (/bin/sh -c): exit
 * statuses and signals reported per worker and all_exited after the last, SIGTERM escalated to
 * SIGKILL after the timeout (and only for the worker that ignored it), workers' output through
 * the agent (prefixed) or straight into a file, a program that cannot run, a group closed
 * while its workers live, and a grandchild that left the workers' session (setsid) killed with
 * the group (proctree.h). Nothing sleeps: the loop runs until the callbacks counted what the
 * test waits for, under a watchdog. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "group.h"
#include "harness.h"
#include "proctree.h"
#include "spawn.h"

#define WATCHDOG_MS 20000
#define NW 3

extern char **environ;

struct fixture {
    uv_loop_t loop;
    struct harness h;
    struct agent_group *g;
    int console[2]; /* the workers' console: the agent writes, the test reads (non-blocking) */
    char seen[8192];
    size_t seen_len;
    int exits, all_exited, closed;
    int order[NW]; /* local ranks in the order they were reported */
    uint64_t all_exited_at;
};

static void exit_cb(struct agent_group *g, struct agent_worker *w)
{
    struct fixture *fx = g->data;

    assert_false(w->alive);
    assert_true(fx->exits < NW);
    fx->order[fx->exits++] = w->local_rank;
}

static void all_exited_cb(struct agent_group *g)
{
    struct fixture *fx = g->data;

    assert_int_equal(g->alive, 0);
    assert_int_equal(fx->all_exited, 0); /* once */
    fx->all_exited++;
    fx->all_exited_at = uv_now(&fx->loop);
}

static const struct agent_group_cbs cbs = {exit_cb, all_exited_cb, NULL};

static int setup(void **state)
{
    static struct fixture fx;

    memset(&fx, 0, sizeof(fx));
    assert_int_equal(uv_loop_init(&fx.loop), 0);
    harness_init(&fx.h, &fx.loop, WATCHDOG_MS);
    assert_int_equal(pipe2(fx.console, O_CLOEXEC), 0);
    assert_int_equal(fcntl(fx.console[0], F_SETFL, O_NONBLOCK), 0);
    assert_int_equal(agent_group_new(&fx.loop, NW, &cbs, &fx, &fx.g), 0);
    *state = &fx;
    return 0;
}

static void group_closed_cb(void *data)
{
    struct fixture *fx = data;

    fx->closed++;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;

    if (fx->g != NULL) {
        agent_group_close(fx->g, group_closed_cb, fx);
        HARNESS_RUN_UNTIL(&fx->h, fx->closed == 1);
    }
    harness_close(&fx->h);
    harness_loop_close(&fx->loop);
    close(fx->console[0]);
    close(fx->console[1]);
    return 0;
}

/* Worker i runs `sh -c script` with its output on the test's console. */
static int spawn_sh(struct fixture *fx, int i, int rank, const char *script)
{
    char *argv[] = {"/bin/sh", "-c", (char *)script, NULL};
    struct agent_worker_spec s = {.argv = argv,
                                  .env = environ,
                                  .console = {fx->console[1], fx->console[1]},
                                  .file = {-1, -1}};

    return agent_group_spawn(fx->g, i, rank, &s);
}

/* What reached the console so far contains text (read without blocking). */
static int console_has(struct fixture *fx, const char *text)
{
    ssize_t n;

    while ((n = read(fx->console[0], fx->seen + fx->seen_len,
                     sizeof(fx->seen) - 1 - fx->seen_len)) > 0)
        fx->seen_len += (size_t)n;
    fx->seen[fx->seen_len] = '\0';
    return strstr(fx->seen, text) != NULL;
}

/* Each worker's end is reported as it was: a code, a signal; all_exited comes after the last. */
static void test_exit_statuses(void **state)
{
    struct fixture *fx = *state;

    assert_int_equal(spawn_sh(fx, 0, 10, "exit 0"), 0);
    assert_int_equal(spawn_sh(fx, 1, 11, "exit 3"), 0);
    assert_int_equal(spawn_sh(fx, 2, 12, "kill -TERM $$"), 0);
    assert_int_equal(fx->g->alive, NW);
    HARNESS_RUN_UNTIL(&fx->h, fx->all_exited == 1);
    assert_int_equal(fx->exits, NW);
    int seen = 0;
    for (int i = 0; i < NW; i++)
        seen |= 1 << fx->order[i];
    assert_int_equal(seen, (1 << NW) - 1); /* each worker reported once */
    struct agent_worker *w = fx->g->workers;
    assert_int_equal(w[0].exit_status, 0);
    assert_int_equal(w[0].term_signal, 0);
    assert_int_equal(w[1].exit_status, 3);
    assert_int_equal(w[1].rank, 11);
    assert_int_equal(w[2].term_signal, SIGTERM);
    assert_int_equal(w[2].exit_status, 0);
    for (int i = 0; i < NW; i++) {
        assert_true(w[i].pid > 0);
        assert_true(w[i].exit_time_ms > 0);
        assert_false(w[i].alive);
    }
}

/* agent_group_stop(SIGTERM, timeout): a worker that ignores SIGTERM is SIGKILLed once the
 * timeout passed, one that honours it ends by SIGTERM. */
static void test_term_then_kill(void **state)
{
    struct fixture *fx = *state;
    const unsigned timeout_ms = 500;

    /* SIG_IGN survives exec: sleep ignores SIGTERM too */
    assert_int_equal(spawn_sh(fx, 0, 0, "trap '' TERM; echo deaf; exec sleep 30"), 0);
    assert_int_equal(spawn_sh(fx, 1, 1, "echo polite; exec sleep 30"), 0);
    HARNESS_RUN_UNTIL(&fx->h, console_has(fx, "deaf") && console_has(fx, "polite"));
    uint64_t t0 = uv_now(&fx->loop);
    agent_group_stop(fx->g, SIGTERM, timeout_ms);
    agent_group_stop(fx->g, SIGTERM, timeout_ms); /* again: forwards, does not re-arm */
    HARNESS_RUN_UNTIL(&fx->h, fx->all_exited == 1);
    assert_int_equal(fx->g->workers[1].term_signal, SIGTERM);
    assert_int_equal(fx->g->workers[0].term_signal, SIGKILL);
    assert_true(fx->all_exited_at - t0 >= timeout_ms - 10); /* not before the timeout */
}

/* SIGKILL needs no escalation: every worker ends by it at once. */
static void test_stop_kill(void **state)
{
    struct fixture *fx = *state;

    for (int i = 0; i < NW; i++)
        assert_int_equal(spawn_sh(fx, i, i, "trap '' TERM; exec sleep 30"), 0);
    agent_group_stop(fx->g, SIGKILL, 60000);
    HARNESS_RUN_UNTIL(&fx->h, fx->all_exited == 1);
    for (int i = 0; i < NW; i++)
        assert_int_equal(fx->g->workers[i].term_signal, SIGKILL);
}

/* Output through the agent carries the rank prefix; the last lines of a worker that exits at
 * once are not lost (drained at the exit). */
static void test_output_prefixed(void **state)
{
    struct fixture *fx = *state;

    assert_int_equal(spawn_sh(fx, 0, 7, "echo hello; echo oops >&2; exit 1"), 0);
    HARNESS_RUN_UNTIL(&fx->h, fx->exits == 1);
    assert_true(console_has(fx, "[rank7]: hello\n"));
    assert_true(console_has(fx, "[rank7]: oops\n"));
    assert_int_equal(fx->g->workers[0].exit_status, 1);
}

/* A worker whose child keeps its stdout open is reaped before its pipe ends: what it wrote is
 * read at the exit (drained), not lost. */
static void test_output_drained_at_exit(void **state)
{
    struct fixture *fx = *state;

    assert_int_equal(spawn_sh(fx, 0, 4, "sleep 30 & echo last-words; exit 5"), 0);
    HARNESS_RUN_UNTIL(&fx->h, fx->exits == 1);
    assert_int_equal(fx->g->workers[0].exit_status, 5);
    assert_false(fx->g->workers[0].pipe_open[0]); /* closed at the exit, the sleeper aside */
    assert_true(console_has(fx, "[rank4]: last-words\n"));
}

/* A binding that cannot be applied (a CPU this host lacks) does not stop the worker. */
static void test_bind_failure_not_fatal(void **state)
{
    struct fixture *fx = *state;
    struct agent_spawn_bind b = {.mem_node = -1};
    char *argv[] = {"/bin/sh", "-c", "exit 0", NULL};

    CPU_ZERO(&b.cpus);
    CPU_SET(CPU_SETSIZE - 1, &b.cpus);
    struct agent_worker_spec s = {
        .argv = argv, .env = environ, .console = {-1, -1}, .file = {-1, -1}, .bind = &b};
    assert_int_equal(agent_group_spawn(fx->g, 0, 0, &s), 0);
    HARNESS_RUN_UNTIL(&fx->h, fx->all_exited == 1);
    assert_int_equal(fx->g->workers[0].exit_status, 0);
}

/* No console: the worker writes its log file itself, unprefixed; the file passes to it. */
static void test_output_file(void **state)
{
    struct fixture *fx = *state;
    char dir[128], path[256], buf[256];
    char *argv[] = {"/bin/sh", "-c", "echo into-file", NULL};

    harness_mkdtemp(dir, sizeof(dir), "group");
    snprintf(path, sizeof(path), "%s/out.log", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    struct agent_worker_spec s = {
        .argv = argv, .env = environ, .console = {-1, -1}, .file = {fd, -1}};
    assert_int_equal(agent_group_spawn(fx->g, 0, 0, &s), 0);
    assert_int_equal(fcntl(fd, F_GETFD), -1); /* the worker owns it now */
    HARNESS_RUN_UNTIL(&fx->h, fx->all_exited == 1);
    assert_int_equal(harness_read_file(path, buf, sizeof(buf)), 10);
    assert_string_equal(buf, "into-file\n");
    assert_false(console_has(fx, "into-file"));
    harness_rmtree(dir);
}

/* A program that cannot run: the errno, no worker alive, its file closed, nothing reported. */
static void test_spawn_failure(void **state)
{
    struct fixture *fx = *state;
    char *argv[] = {"/nonexistent/worker", NULL};
    int fds[2];

    assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
    struct agent_worker_spec s = {
        .argv = argv, .env = environ, .console = {fx->console[1], -1}, .file = {-1, fds[1]}};
    assert_int_equal(agent_group_spawn(fx->g, 0, 0, &s), -ENOENT);
    assert_int_equal(fx->g->alive, 0);
    assert_int_equal(fx->g->workers[0].pid, 0);
    assert_int_equal(fcntl(fds[1], F_GETFD), -1);
    close(fds[0]);
    agent_worker_kill(&fx->g->workers[0], SIGKILL); /* never started: nothing to signal */
    assert_int_equal(fx->exits, 0);
}

/* Closing with live workers kills them; the group frees itself and calls back once. */
static void test_close_live(void **state)
{
    struct fixture *fx = *state;

    for (int i = 0; i < NW; i++)
        assert_int_equal(spawn_sh(fx, i, i, "echo up; exec sleep 30"), 0);
    HARNESS_RUN_UNTIL(&fx->h, console_has(fx, "up"));
    agent_group_close(fx->g, group_closed_cb, fx);
    fx->g = NULL;
    HARNESS_RUN_UNTIL(&fx->h, fx->closed == 1);
    assert_int_equal(fx->exits, 0); /* nobody listens once closing */
}

/* A grandchild that left the worker's session (setsid) escapes kill(-pgid); the group's close
 * kills it too (cgroup.kill, or the /proc scan of the fallback). */
static void test_escaped_grandchild(void **state)
{
    struct fixture *fx = *state;
    char dir[128], path[256], buf[32];

    harness_mkdtemp(dir, sizeof(dir), "group");
    snprintf(path, sizeof(path), "%s/pid", dir);
    char script[1400];
    snprintf(script, sizeof(script),
             "setsid sh -c 'echo $$ > %s.tmp; mv %s.tmp %s; exec sleep 30' "
             "</dev/null >/dev/null 2>&1 & while [ ! -s %s ]; do :; done; echo escaped; exit 0",
             path, path, path, path);
    assert_int_equal(spawn_sh(fx, 0, 0, script), 0);
    HARNESS_RUN_UNTIL(&fx->h, fx->all_exited == 1);
    assert_true(console_has(fx, "escaped"));
    assert_true(harness_read_file(path, buf, sizeof(buf)) > 0);
    pid_t gc = (pid_t)atoi(buf);
    assert_true(gc > 1);
    assert_int_equal(kill(gc, 0), 0); /* outlived its worker */
    agent_group_close(fx->g, group_closed_cb, fx);
    fx->g = NULL;
    HARNESS_RUN_UNTIL(&fx->h, fx->closed == 1);
    /* gone, or a zombie of whoever adopted it: either way not running */
    char stat[64], text[256];
    snprintf(stat, sizeof(stat), "/proc/%d/stat", (int)gc);
    if (harness_read_file(stat, text, sizeof(text)) > 0) {
        char *p = strrchr(text, ')');
        assert_non_null(p);
        assert_true(p[2] == 'Z' || p[2] == 'X');
        waitpid(gc, NULL, WNOHANG); /* ours if this process adopted it */
    }
    harness_rmtree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_exit_statuses, setup, teardown),
        cmocka_unit_test_setup_teardown(test_term_then_kill, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_kill, setup, teardown),
        cmocka_unit_test_setup_teardown(test_output_prefixed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_output_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_output_drained_at_exit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bind_failure_not_fatal, setup, teardown),
        cmocka_unit_test_setup_teardown(test_spawn_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_live, setup, teardown),
        cmocka_unit_test_setup_teardown(test_escaped_grandchild, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);

    fprintf(stderr, "process trees: %s\n", agent_proctree_describe());
    agent_proctree_stop();
    return rc;
}
