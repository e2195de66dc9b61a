/* agent/progress.c on a private loop, its stderr captured in a file: in a log (no terminal) a
 * line per count change and none for a repeat, the last-call countdown rounded up; on a
 * terminal one line redrawn each second and ended with a newline when the round closes. Time
 * is a fake clock (fakeclock.h) the tests advance by hand: no test waits for the timer. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "fakeclock.h"
#include "harness.h"
#include "progress.h"

struct fixture {
    uv_loop_t loop;
    struct harness h;
    struct agent_progress p;
    struct fake_clock clock;
    char tmp[128], path[256];
    int saved_stderr;
    char text[8192];
};

static int setup(void **state)
{
    static struct fixture fx;

    memset(&fx, 0, sizeof(fx));
    harness_init_tmp(&fx.h, &fx.loop, 10000, fx.tmp, sizeof(fx.tmp), "progress");
    snprintf(fx.path, sizeof(fx.path), "%s/stderr", fx.tmp);
    int fd = open(fx.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    fflush(stderr);
    fx.saved_stderr = dup(STDERR_FILENO);
    assert_true(fx.saved_stderr >= 0);
    assert_int_equal(dup2(fd, STDERR_FILENO), STDERR_FILENO);
    close(fd);
    agent_progress_init(&fx.loop, &fx.p, "job7");
    fake_clock_init(&fx.clock, 1000000);
    fx.p.clock = &fx.clock.clock;
    assert_int_equal(fx.p.tty, 0); /* a file */
    *state = &fx;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;

    agent_progress_close(&fx->p, NULL);
    harness_close(&fx->h);
    harness_loop_close(&fx->loop);
    fflush(stderr);
    dup2(fx->saved_stderr, STDERR_FILENO);
    close(fx->saved_stderr);
    harness_rmtree(fx->tmp);
    return 0;
}

/* What progress wrote so far. */
static const char *written(struct fixture *fx)
{
    fflush(stderr);
    assert_true(harness_read_file(fx->path, fx->text, sizeof(fx->text)) >= 0);
    return fx->text;
}

static int lines(const char *s)
{
    int n = 0;

    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static void test_log_lines(void **state)
{
    struct fixture *fx = *state;
    struct rdzv_waiting w = {
        .joined = 1, .min_nodes = 2, .max_nodes = 4, .last_call_ms_left = -1, .join_ms_left = -1};

    agent_progress_update(&fx->p, &w);
    assert_string_equal(written(fx), "muster: rendezvous job7: 1/4 nodes\n");
    agent_progress_update(&fx->p, &w);    /* same count: nothing new in a log */
    fake_clock_advance(&fx->clock, 1100); /* a tick: still nothing (every 10 s only) */
    assert_int_equal(lines(written(fx)), 1);
    w.joined = 2;
    w.last_call_ms_left = 2500;
    agent_progress_update(&fx->p, &w);
    assert_non_null(strstr(written(fx), "muster: rendezvous job7: 2/4 nodes, last call in 3 s\n"));
    agent_progress_stop(&fx->p);
    agent_progress_stop(&fx->p); /* twice: nothing */
    assert_int_equal(lines(written(fx)), 2);
    assert_false(fake_clock_armed(&fx->clock, &fx->p.timer));
}

/* In a log the same count is written again every 10 s (and not sooner), so a long wait shows. */
static void test_log_repeats_every_10s(void **state)
{
    struct fixture *fx = *state;
    struct rdzv_waiting w = {
        .joined = 1, .min_nodes = 2, .max_nodes = 4, .last_call_ms_left = -1, .join_ms_left = -1};

    agent_progress_update(&fx->p, &w);
    fake_clock_advance(&fx->clock, 9999);
    assert_int_equal(lines(written(fx)), 1);
    fake_clock_advance(&fx->clock, 1); /* the tick at 10 s */
    assert_string_equal(written(fx), "muster: rendezvous job7: 1/4 nodes\n"
                                     "muster: rendezvous job7: 1/4 nodes\n");
    agent_progress_stop(&fx->p);
}

/* On a terminal: \r and erase, redrawn by the timer with the countdown running down, ended
 * with one newline. */
static void test_terminal_redraw(void **state)
{
    struct fixture *fx = *state;
    struct rdzv_waiting w = {
        .joined = 3, .min_nodes = 4, .max_nodes = 4, .last_call_ms_left = 5500, .join_ms_left = -1};

    fx->p.tty = 1;
    agent_progress_update(&fx->p, &w);
    assert_string_equal(written(fx),
                        "\r\033[Kmuster: rendezvous job7: 3/4 nodes, last call in 6 s");
    /* a redraw by the timer a second later: the countdown went down */
    fake_clock_advance(&fx->clock, 1000);
    HARNESS_RUN_UNTIL(&fx->h, strstr(written(fx), "s\r\033[K") != NULL);
    const char *last = strrchr(fx->text, '\r');
    int left = -1;
    assert_int_equal(
        sscanf(last, "\r\033[Kmuster: rendezvous job7: 3/4 nodes, last call in %d s", &left), 1);
    assert_true(left >= 0 && left < 6);
    assert_int_equal(left, 5); /* 4.5 s left, rounded up */
    w.last_call_ms_left = 0;   /* over: 0 s, never negative */
    agent_progress_update(&fx->p, &w);
    assert_non_null(strstr(written(fx), "nodes, last call in 0 s"));
    assert_int_equal(lines(written(fx)), 0);
    agent_progress_stop(&fx->p);
    assert_int_equal(lines(written(fx)), 1);
    size_t len = strlen(fx->text);
    assert_int_equal(fx->text[len - 1], '\n');
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_log_lines, setup, teardown),
        cmocka_unit_test_setup_teardown(test_log_repeats_every_10s, setup, teardown),
        cmocka_unit_test_setup_teardown(test_terminal_redraw, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
