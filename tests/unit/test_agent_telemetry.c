/* Unit tests for agent/telemetry.c's findings (pure): each warning comes from its scenario and
 * not from a healthy one. Scenarios: 2 or 4 GPUs, 2 to 4 local workers, processes by rank. The
 * sampling itself runs against the fake NVML in integration.telemetry. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "telemetry.h"

static struct rdzv_telemetry s;
static struct agent_telem_worker w[4];
static struct agent_telem_finding f[8];

/* ngpus GPUs, nw workers of ranks 10.. (local ranks 0..), none on a GPU yet */
static void node(uint32_t ngpus, int nw)
{
    memset(&s, 0, sizeof(s));
    s.ngpus = ngpus;
    for (uint32_t i = 0; i < ngpus; i++)
        s.gpus[i] = (struct rdzv_tel_gpu){
            .gpu = i, .util = 50, .sm_clock = 1980, .temp = 60, .power_mw = 400000};
    for (int i = 0; i < nw; i++)
        w[i] = (struct agent_telem_worker){.pid = 100 + i, .rank = 10 + i, .local_rank = i};
}

static void on(uint32_t gpu, int rank)
{
    struct rdzv_tel_gpu *g = &s.gpus[gpu];

    g->procs[g->nprocs++] = (struct rdzv_tel_proc){.pid = 500u + g->nprocs, .rank = rank, .mem = 1};
}

static int findings(int nw, uint64_t ran_ms)
{
    return agent_telem_findings(&s, w, nw, "n1", ran_ms, 60000, f, 8);
}

static void test_healthy(void **state)
{
    (void)state;
    node(4, 4);
    for (int i = 0; i < 4; i++)
        on((uint32_t)i, 10 + i);
    on(0, -1); /* someone else's process: no rank, no finding */
    assert_int_equal(findings(4, 3600000), 0);
    node(8, 2); /* 2 workers on an 8-GPU node: GPUs 2-7 idle is fine */
    s.ngpus = 8;
    on(0, 10);
    on(1, 11);
    assert_int_equal(findings(2, 3600000), 0);
    node(1, 4); /* shared-GPU: 4 ranks on the node's only GPU */
    for (int i = 0; i < 4; i++)
        on(0, 10 + i);
    assert_int_equal(findings(4, 0), 0);
}

static void test_ignores_local_rank(void **state)
{
    (void)state;
    node(4, 4);
    for (int i = 0; i < 4; i++)
        on(0, 10 + i);
    on(0, 11); /* a second process of rank 11 (a child) counts once */
    assert_int_equal(findings(4, 0), 1);
    assert_string_equal(f[0].key, "shared:0");
    assert_string_equal(f[0].text, "ranks 10-13 all run on GPU 0 of n1 while 3 of its GPUs have "
                                   "none: the script ignores LOCAL_RANK");
    /* one rank alone on GPU 0 so far: nothing yet */
    node(2, 2);
    on(0, 10);
    assert_int_equal(findings(2, 0), 0);
    on(0, 11);
    assert_int_equal(findings(2, 0), 1);
    assert_string_equal(f[0].text, "ranks 10-11 all run on GPU 0 of n1 while another of its GPUs "
                                   "has none: the script ignores LOCAL_RANK");
}

static void test_no_process(void **state)
{
    (void)state;
    node(2, 2);
    on(0, 10);
    assert_int_equal(findings(2, 59999), 0); /* within the grace */
    assert_int_equal(findings(2, 60000), 1);
    assert_string_equal(f[0].key, "noproc:11");
    assert_string_equal(f[0].text,
                        "GPU 1 of n1 has no process of rank 11 (local rank 1) after 60 s");
    node(2, 2); /* a CPU job: no rank on any GPU, no finding */
    assert_int_equal(findings(2, 3600000), 0);
}

static void test_throttled(void **state)
{
    (void)state;
    node(2, 2);
    on(0, 10);
    on(1, 11);
    s.gpus[1].throttle = 0x1 | 0x8 | 0x20; /* idle (not worth a word), HW slowdown, SW thermal */
    s.gpus[1].sm_clock = 1100;
    s.gpus[1].temp = 91;
    s.gpus[1].power_mw = 180000;
    s.gpus[0].throttle = 0x1 | 0x2; /* idle, application clocks: no warning */
    assert_int_equal(findings(2, 0), 1);
    assert_string_equal(f[0].key, "throttle:1");
    assert_string_equal(f[0].text, "GPU 1 of n1 is throttled: HW slowdown, thermal (software) "
                                   "(SM clock 1100 MHz, 91 C, 180 W)");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_healthy),
        cmocka_unit_test(test_ignores_local_rank),
        cmocka_unit_test(test_no_process),
        cmocka_unit_test(test_throttled),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
