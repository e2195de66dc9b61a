/* agent/hang.c on a private loop: touches of the heartbeat files (real files, inotify) and
 * the timer armed at the earliest deadline. A rank that beat once and then went silent is
 * reported once, with how long it was silent; a rank that never beat is not watched; a disarmed
 * rank and another attempt's file are ignored; close removes the files and the directory.
 *
 * Time is a fake clock (fakeclock.h) the tests advance by hand: the loop runs only to deliver
 * the inotify events, so no test waits for a deadline and a loaded host cannot make a beating
 * rank look hung. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "fakeclock.h"
#include "hang.h"
#include "harness.h"

#define TIMEOUT_MS 1000
#define NRANKS 3

struct fixture {
    uv_loop_t loop;
    struct harness h;
    struct agent_hang hang;
    struct fake_clock clock;
    char tmp[128], dir[256];
    int hung[NRANKS];
    uint64_t silent_ms[NRANKS];
    int closed;
};

static void hang_cb(struct agent_hang *h, int local_rank, uint64_t silent_ms)
{
    struct fixture *fx = h->data;

    assert_true(local_rank >= 0 && local_rank < NRANKS);
    fx->hung[local_rank]++;
    fx->silent_ms[local_rank] = silent_ms;
}

static void closed_cb(void *data)
{
    struct fixture *fx = data;

    fx->closed++;
}

static int setup(void **state)
{
    static struct fixture fx;

    memset(&fx, 0, sizeof(fx));
    harness_init_tmp(&fx.h, &fx.loop, 10000, fx.tmp, sizeof(fx.tmp), "hang");
    snprintf(fx.dir, sizeof(fx.dir), "%s/hb", fx.tmp); /* created by init */
    assert_int_equal(agent_hang_init(&fx.loop, &fx.hang, fx.dir, NRANKS, TIMEOUT_MS, hang_cb, &fx),
                     0);
    fake_clock_init(&fx.clock, 1000000);
    fx.hang.clock = &fx.clock.clock;
    agent_hang_start(&fx.hang, 1);
    *state = &fx;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;
    struct stat st;

    agent_hang_close(&fx->hang, closed_cb);
    HARNESS_RUN_UNTIL(&fx->h, fx->closed == 1);
    assert_int_equal(stat(fx->dir, &st), -1); /* the files and the directory are gone */
    harness_close(&fx->h);
    harness_loop_close(&fx->loop);
    harness_rmtree(fx->tmp);
    return 0;
}

/* Touches rank's heartbeat file and runs the loop until the module has seen the touch at the
 * fake clock's now (inotify may deliver a touch as several events; any of them is the beat). */
static void touch(struct fixture *fx, unsigned attempt, int rank)
{
    char path[4096];

    agent_hang_file(&fx->hang, attempt, rank, path);
    harness_write_file(path, "beat\n");
}

static void beat(struct fixture *fx, int rank)
{
    touch(fx, fx->hang.attempt, rank);
    HARNESS_RUN_UNTIL(&fx->h, fx->hang.last_touch[rank] == fx->clock.now);
}

/* Lets fake time pass, delivering any file events that are pending first. */
static void pass(struct fixture *fx, uint64_t ms)
{
    uv_run(&fx->loop, UV_RUN_NOWAIT);
    fake_clock_advance(&fx->clock, ms);
}

static void test_silent_rank_reported(void **state)
{
    struct fixture *fx = *state;

    beat(fx, 0);
    uint64_t t0 = fx->clock.now;
    pass(fx, TIMEOUT_MS - 1);
    assert_int_equal(fx->hung[0], 0);
    pass(fx, 1); /* the deadline, to the millisecond */
    assert_int_equal(fx->hung[0], 1);
    assert_true(fx->silent_ms[0] >= TIMEOUT_MS);
    assert_true(fx->clock.now - t0 >= TIMEOUT_MS);
    /* once: it stays silent, nothing more is said; rank 1 never beat: not watched */
    pass(fx, TIMEOUT_MS + TIMEOUT_MS / 2);
    assert_int_equal(fx->hung[0], 1);
    assert_int_equal(fx->hung[1] + fx->hung[2], 0);
}

/* Beats keep a rank alive: the deadline moves with each touch. */
static void test_beating_rank_not_reported(void **state)
{
    struct fixture *fx = *state;

    beat(fx, 1);
    uint64_t until = fx->clock.now + 3 * TIMEOUT_MS;
    while (fx->clock.now < until) {
        pass(fx, TIMEOUT_MS / 8);
        beat(fx, 1);
    }
    assert_int_equal(fx->hung[1], 0);
    agent_hang_disarm(&fx->hang, 1); /* it exited: no more watching */
    pass(fx, TIMEOUT_MS + TIMEOUT_MS / 2);
    assert_int_equal(fx->hung[1], 0);
}

/* Another attempt's file, a name that is no heartbeat and a rank out of range are ignored; a
 * new attempt forgets the old touches. */
static void test_foreign_files_ignored(void **state)
{
    struct fixture *fx = *state;
    char path[4096];

    touch(fx, 7, 2);
    snprintf(path, sizeof(path), "%s/unrelated", fx->dir);
    harness_write_file(path, "x");
    snprintf(path, sizeof(path), "%s/heartbeat_1_%d", fx->dir, NRANKS);
    harness_write_file(path, "x");
    unlink(path);
    snprintf(path, sizeof(path), "%s/unrelated", fx->dir);
    unlink(path);
    beat(fx, 2);
    agent_hang_start(&fx->hang, 2); /* rank 2's beat belonged to attempt 1 */
    pass(fx, TIMEOUT_MS + TIMEOUT_MS / 2);
    assert_int_equal(fx->hung[2], 0);
    beat(fx, 2);
    pass(fx, TIMEOUT_MS);
    assert_int_equal(fx->hung[2], 1);
    snprintf(path, sizeof(path), "%s/heartbeat_7_2", fx->dir);
    unlink(path);
}

/* disarm(-1): every rank, also one that already beat */
static void test_disarm_all(void **state)
{
    struct fixture *fx = *state;

    beat(fx, 0);
    beat(fx, 1);
    agent_hang_disarm(&fx->hang, -1);
    pass(fx, TIMEOUT_MS + TIMEOUT_MS / 2);
    assert_int_equal(fx->hung[0] + fx->hung[1], 0);
}

static void test_init_errors(void **state)
{
    uv_loop_t loop;
    struct agent_hang h;
    char tmp[128], path[256], longdir[5000];

    assert_int_equal(uv_loop_init(&loop), 0);
    memset(longdir, 'a', sizeof(longdir) - 1);
    longdir[sizeof(longdir) - 1] = '\0';
    assert_int_equal(agent_hang_init(&loop, &h, longdir, 1, 100, hang_cb, NULL), -ENAMETOOLONG);
    harness_mkdtemp(tmp, sizeof(tmp), "hang");
    snprintf(path, sizeof(path), "%s/file", tmp);
    harness_write_file(path, "");
    snprintf(path, sizeof(path), "%s/file/hb", tmp); /* under a file: no directory */
    assert_int_equal(agent_hang_init(&loop, &h, path, 1, 100, hang_cb, NULL), -ENOTDIR);
    harness_loop_close(&loop);
    harness_rmtree(tmp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_silent_rank_reported, setup, teardown),
        cmocka_unit_test_setup_teardown(test_beating_rank_not_reported, setup, teardown),
        cmocka_unit_test_setup_teardown(test_foreign_files_ignored, setup, teardown),
        cmocka_unit_test_setup_teardown(test_disarm_all, setup, teardown),
        cmocka_unit_test(test_init_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
