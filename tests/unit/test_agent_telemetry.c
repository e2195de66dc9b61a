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
        w[i] = (struct agent_telem_worker){
            .pid = 100 + i, .rank = 10 + i, .local_rank = i, .gpu = AGENT_TELEM_GPU_OWN};
}

static void on_mem(uint32_t gpu, int rank, uint64_t mem)
{
    struct rdzv_tel_gpu *g = &s.gpus[gpu];

    g->procs[g->nprocs++] =
        (struct rdzv_tel_proc){.pid = 500u + g->nprocs, .rank = rank, .mem = mem};
}

static void on(uint32_t gpu, int rank)
{
    on_mem(gpu, rank, 1);
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

/* Shared-GPU mode: tasks 0-3 given GPU 0 of an 8-GPU node (K = 4, the others unused), each
 * capped at a quarter of 80 GiB (cap_frac), or at MPS's pinned limit (cap_bytes). */
#define GiB (1ull << 30)
static void shared_node(void)
{
    node(8, 4);
    for (int i = 0; i < 4; i++) {
        w[i] = (struct agent_telem_worker){
            .pid = 100 + i, .rank = i, .local_rank = i, .gpu = 0, .cap_frac = 0.25};
        s.gpus[i].mem_total = 80 * GiB;
    }
    s.gpus[0].mem_total = 80 * GiB;
}

static void test_shared_gpu(void **state)
{
    (void)state;
    /* 4 tasks on their GPU 0 while 7 GPUs idle: where they belong, no LOCAL_RANK warning */
    shared_node();
    for (int i = 0; i < 4; i++)
        on_mem(0, i, 12 * GiB);
    assert_int_equal(findings(4, 3600000), 0);
    /* task 2 has no process on its GPU past the grace; a process on another GPU is not its */
    shared_node();
    on_mem(0, 0, GiB);
    on_mem(0, 1, GiB);
    on_mem(3, 2, GiB);
    on_mem(0, 3, GiB);
    assert_int_equal(findings(4, 59999), 0);
    assert_int_equal(findings(4, 60000), 1);
    assert_string_equal(f[0].key, "noproc:2");
    assert_string_equal(f[0].text, "GPU 0 of n1 has no process of task 2 after 60 s");
}

static void test_near_cap(void **state)
{
    (void)state;
    /* cap 20 GiB: 18.9 GiB (94.4 %) is fine, 19.1 GiB (95.0 %) is not; a child's memory counts */
    shared_node();
    on_mem(0, 0, 18 * GiB + 900 * (GiB >> 10));
    on_mem(0, 1, 19 * GiB);
    on_mem(0, 1, GiB / 10);
    on_mem(0, 2, 20 * GiB);
    on_mem(0, 3, UINT64_MAX); /* NVML could not say: no finding */
    assert_int_equal(findings(4, 0), 2);
    assert_string_equal(f[0].key, "cap:1");
    assert_string_equal(f[0].text, "task 1 (GPU 0 of n1) uses 19.1 GiB of its 20.0 GiB memory "
                                   "cap (95 %): it will fail to allocate more");
    assert_string_equal(f[1].key, "cap:2");
    /* MPS's pinned limit (cap_bytes) wins over the fraction */
    shared_node();
    w[0].cap_bytes = 10 * GiB;
    on_mem(0, 0, 9 * GiB + GiB / 2);
    assert_int_equal(findings(4, 0), 1);
    assert_string_equal(f[0].text, "task 0 (GPU 0 of n1) uses 9.5 GiB of its 10.0 GiB memory "
                                   "cap (95 %): it will fail to allocate more");
    /* no cap: nothing, however full */
    shared_node();
    w[0].cap_frac = 0;
    on_mem(0, 0, 80 * GiB);
    assert_int_equal(findings(4, 0), 0);
}

static void test_xid(void **state)
{
    (void)state;
    node(2, 2);
    on(0, 10);
    on(1, 11);
    s.gpus[1].xid = 79;
    s.gpus[0].xid = 12345; /* one this build has no words for */
    assert_int_equal(findings(2, 0), 2);
    assert_string_equal(f[0].key, "xid:0:12345");
    assert_string_equal(f[0].text, "GPU 0 of n1 reported Xid 12345 (see NVIDIA's Xid catalogue)");
    assert_string_equal(f[1].key, "xid:1:79");
    assert_string_equal(f[1].text, "GPU 1 of n1 reported Xid 79 (GPU has fallen off the bus)");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_healthy),    cmocka_unit_test(test_ignores_local_rank),
        cmocka_unit_test(test_no_process), cmocka_unit_test(test_throttled),
        cmocka_unit_test(test_shared_gpu), cmocka_unit_test(test_near_cap),
        cmocka_unit_test(test_xid),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
