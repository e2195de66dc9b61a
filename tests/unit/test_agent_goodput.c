/* agent/goodput.c on a fake clock (fakeclock.h): each phase of a clean run, a restart from a
 * checkpoint (work lost = the training after it, restart wait = the backoff left once the
 * workers were gone), a restart from nothing, from an unknown or older checkpoint, a clean end
 * without a sign of progress, a failed end, and the figures of an open phase. No real time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fakeclock.h"
#include "goodput.h"
#include "gprec.h"

#define T0 1000000
#define W0 1700000000000LL /* the wall clock at T0 */

struct fixture {
    struct fake_clock fc;
    struct agent_goodput g;
    struct rdzv_goodput out;
};

static int setup(void **state)
{
    static struct fixture fx;

    memset(&fx, 0, sizeof(fx));
    fake_clock_init(&fx.fc, T0);
    agent_goodput_init(&fx.g, NULL, &fx.fc.clock);
    *state = &fx;
    return 0;
}

static void at(struct fixture *fx, uint64_t ms)
{
    fake_clock_advance(&fx->fc, ms);
}

static int64_t wall(const struct fixture *fx)
{
    return W0 + (int64_t)(fx->fc.now - T0);
}

static const struct rdzv_goodput *get(struct fixture *fx)
{
    agent_goodput_get(&fx->g, &fx->out);
    assert_null(rdzv_goodput_check(&fx->out)); /* what the server accepts, always */
    return &fx->out;
}

/* JOIN 100 ms, start-up 500 ms, 2 s of training, 50 ms waiting for the others. */
static void test_clean_run(void **state)
{
    struct fixture *fx = *state;
    const struct rdzv_goodput *g;

    at(fx, 100);
    agent_goodput_resume(&fx->g, "", 0);
    agent_goodput_state(&fx->g, AGENT_S_RUNNING);
    at(fx, 500);
    assert_int_equal(agent_goodput_progress(&fx->g, wall(fx)), 1);
    at(fx, 1000);
    assert_int_equal(agent_goodput_progress(&fx->g, wall(fx)), 0); /* only the first one */
    g = get(fx);                                                   /* an open phase counts */
    assert_int_equal(g->phase_ms[RDZV_GP_TRAINING], 1000);
    at(fx, 1000);
    agent_goodput_state(&fx->g, AGENT_S_DONE_WAIT);
    at(fx, 50);
    agent_goodput_state(&fx->g, AGENT_S_FINISHED);
    at(fx, 5000); /* ended: time after FINISHED is nobody's */
    agent_goodput_state(&fx->g, AGENT_S_RUNNING);
    g = get(fx);
    assert_int_equal(g->phase_ms[RDZV_GP_RENDEZVOUS], 100);
    assert_int_equal(g->phase_ms[RDZV_GP_STARTUP], 500);
    assert_int_equal(g->phase_ms[RDZV_GP_TRAINING], 2000);
    assert_int_equal(g->phase_ms[RDZV_GP_STOPPING], 50);
    assert_int_equal(g->phase_ms[RDZV_GP_RESTART_WAIT], 0);
    assert_int_equal(g->wall_ms, 2650);
    assert_int_equal(g->lost_ms, 0);
    assert_true(rdzv_goodput_ratio(g) > 0.754 && rdzv_goodput_ratio(g) < 0.755);
}

/* Attempt 0 trains 1.5 s, its checkpoint c1 comes 1 s in: 0.5 s lost. RESTART holds the next
 * round 300 ms; the workers take 100 ms to go, so 200 ms of the JOINING are restart wait. */
static void fail_after_ckpt(struct fixture *fx)
{
    at(fx, 100);
    agent_goodput_state(&fx->g, AGENT_S_PREFLIGHT);
    at(fx, 70);
    agent_goodput_state(&fx->g, AGENT_S_RUNNING);
    at(fx, 200);
    agent_goodput_progress(&fx->g, wall(fx));
    at(fx, 1000);
    agent_goodput_checkpoint(&fx->g, "c1", wall(fx));
    at(fx, 500);
    agent_goodput_state(&fx->g, AGENT_S_FAILING);
    at(fx, 100);
    agent_goodput_restart(&fx->g, 300);
    agent_goodput_state(&fx->g, AGENT_S_RESTARTING);
    at(fx, 100);
    agent_goodput_state(&fx->g, AGENT_S_JOINING);
    at(fx, 400);
}

static void test_restart_from_checkpoint(void **state)
{
    struct fixture *fx = *state;
    const struct rdzv_goodput *g;

    fail_after_ckpt(fx);
    agent_goodput_resume(&fx->g, "c1", 1);
    agent_goodput_state(&fx->g, AGENT_S_RUNNING);
    at(fx, 300);
    agent_goodput_progress(&fx->g, wall(fx));
    at(fx, 1000);
    g = get(fx);
    assert_int_equal(g->round, 1);
    assert_int_equal(g->restarts, 1);
    assert_int_equal(g->phase_ms[RDZV_GP_RENDEZVOUS], 100 + 200);
    assert_int_equal(g->phase_ms[RDZV_GP_RESTART_WAIT], 200);
    assert_int_equal(g->phase_ms[RDZV_GP_PREFLIGHT], 70);
    assert_int_equal(g->phase_ms[RDZV_GP_STARTUP], 200 + 300);
    assert_int_equal(g->phase_ms[RDZV_GP_TRAINING], 1500 + 1000);
    assert_int_equal(g->phase_ms[RDZV_GP_STOPPING], 200);
    assert_int_equal(g->lost_ms, 500);
    /* a second ASSIGN (an old round's) must not count the lost work again */
    agent_goodput_resume(&fx->g, "c1", 1);
    assert_int_equal(get(fx)->lost_ms, 500);
}

static void test_restart_from_nothing(void **state)
{
    struct fixture *fx = *state;

    fail_after_ckpt(fx);
    agent_goodput_resume(&fx->g, "", 1); /* the checkpoint did not verify */
    assert_int_equal(get(fx)->lost_ms, 1500);
}

static void test_restart_from_unknown(void **state)
{
    struct fixture *fx = *state;

    fail_after_ckpt(fx);
    agent_goodput_resume(&fx->g, "written-elsewhere", 1);
    assert_int_equal(get(fx)->lost_ms, 1500);
}

/* A checkpoint from before the failed attempt's training: all of it is lost; the same name
 * written again later counts at its newest time. */
static void test_restart_from_older(void **state)
{
    struct fixture *fx = *state;

    agent_goodput_checkpoint(&fx->g, "old", wall(fx) - 100000);
    agent_goodput_checkpoint(&fx->g, "latest", wall(fx) - 100000);
    fail_after_ckpt(fx);
    agent_goodput_resume(&fx->g, "old", 1);
    assert_int_equal(get(fx)->lost_ms, 1500);

    setup(state);
    fx = *state;
    agent_goodput_checkpoint(&fx->g, "latest", wall(fx) - 100000);
    for (int i = 0; i < AGENT_GP_CKPTS - 1; i++) /* the ring keeps the newest */
        agent_goodput_checkpoint(&fx->g, "other", wall(fx));
    fail_after_ckpt(fx);
    agent_goodput_checkpoint(&fx->g, "latest", wall(fx) - 500 - 100 - 100 - 400);
    agent_goodput_resume(&fx->g, "latest", 1); /* == c1's time */
    assert_int_equal(get(fx)->lost_ms, 500);
}

/* No stdout line, no checkpoint, but every worker exited 0: the run was training. */
static void test_clean_end_without_progress(void **state)
{
    struct fixture *fx = *state;
    const struct rdzv_goodput *g;

    agent_goodput_state(&fx->g, AGENT_S_RUNNING);
    at(fx, 3000);
    agent_goodput_state(&fx->g, AGENT_S_DONE_WAIT);
    g = get(fx);
    assert_int_equal(g->phase_ms[RDZV_GP_STARTUP], 0);
    assert_int_equal(g->phase_ms[RDZV_GP_TRAINING], 3000);
    /* then another node fails: the attempt's start on the wall clock is unknown, all lost */
    agent_goodput_restart(&fx->g, 0);
    agent_goodput_state(&fx->g, AGENT_S_JOINING);
    at(fx, 10);
    agent_goodput_resume(&fx->g, "", 1);
    assert_int_equal(get(fx)->lost_ms, 3000);
}

/* The job fails for good 1.5 s into training, its newest checkpoint 1 s in. An attempt that
 * died in start-up loses nothing (it trained nothing). */
static void test_failed_end(void **state)
{
    struct fixture *fx = *state;

    agent_goodput_state(&fx->g, AGENT_S_RUNNING);
    agent_goodput_progress(&fx->g, wall(fx));
    at(fx, 1000);
    agent_goodput_checkpoint(&fx->g, "c1", wall(fx));
    at(fx, 500);
    agent_goodput_failed(&fx->g); /* JOB_FAILED while the workers still run */
    agent_goodput_state(&fx->g, AGENT_S_STOPPING);
    assert_int_equal(get(fx)->lost_ms, 500);

    setup(state);
    fx = *state;
    agent_goodput_state(&fx->g, AGENT_S_RUNNING);
    at(fx, 800);
    agent_goodput_state(&fx->g, AGENT_S_FAILING);
    agent_goodput_failed(&fx->g);
    assert_int_equal(get(fx)->phase_ms[RDZV_GP_STARTUP], 800);
    assert_int_equal(get(fx)->lost_ms, 0);
}

/* The table: one line per phase, then work lost and the ratio. */
static void test_print(void **state)
{
    struct fixture *fx = *state;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    fail_after_ckpt(fx);
    agent_goodput_print(f, get(fx));
    fclose(f);
    assert_non_null(strstr(text, "muster:   training            1.5 s "));
    assert_non_null(strstr(text, "muster:   restart_wait        0.2 s "));
    assert_non_null(strstr(text, "muster:   work lost           0.0 s "));
    assert_non_null(strstr(text, "goodput ratio 0.607"));
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_clean_run, setup),
        cmocka_unit_test_setup(test_restart_from_checkpoint, setup),
        cmocka_unit_test_setup(test_restart_from_nothing, setup),
        cmocka_unit_test_setup(test_restart_from_unknown, setup),
        cmocka_unit_test_setup(test_restart_from_older, setup),
        cmocka_unit_test_setup(test_clean_end_without_progress, setup),
        cmocka_unit_test_setup(test_failed_end, setup),
        cmocka_unit_test_setup(test_print, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
