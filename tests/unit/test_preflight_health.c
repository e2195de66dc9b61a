/* preflight/perf.c and preflight/health.c: the slow-GPU rule (10 % below the
 * median of the same model, floors, one GPU) and the NVML health rule. No GPU needed. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "health.h"
#include "perf.h"

#define H200 "NVIDIA H200"

static struct pf_perf gpu(int i, const char *model, double tflops, double hbm)
{
    static const char *const uuids[] = {"GPU-0", "GPU-1", "GPU-2", "GPU-3",
                                        "GPU-4", "GPU-5", "GPU-6", "GPU-7"};
    return (struct pf_perf){i < 4 ? "gpu-a" : "gpu-b", i % 4, uuids[i % 8], model, tflops, hbm};
}

static void test_median(void **state)
{
    const double odd[] = {3, 1, 2}, even[] = {4, 1, 3, 2};

    (void)state;
    assert_true(pf_perf_median(odd, 3) == 2.0);
    assert_true(pf_perf_median(even, 4) == 2.5);
    assert_true(pf_perf_median(odd, 0) == 0.0);
    assert_true(odd[0] == 3 && even[0] == 4); /* not sorted in place */
}

/* 8 H200s on two nodes, GPU 6 at 620 TFLOP/s (21.5 % below 790): named with node, index, UUID. */
static void test_slow_gemm_named(void **state)
{
    struct pf_perf g[8];
    struct pf_perf_limits lim = {0, 0};
    struct pf_perf_finding f[4];
    char line[512];

    (void)state;
    for (int i = 0; i < 8; i++)
        g[i] = gpu(i, H200, i == 6 ? 620.0 : 788.0 + i % 3, 4280.0);
    assert_int_equal(pf_perf_compare(g, 8, &lim, f, 4), 1);
    assert_int_equal(f[0].gpu, 6);
    assert_int_equal(f[0].metric, PF_PERF_GEMM);
    assert_int_equal(f[0].below_floor, 0);
    assert_int_equal(f[0].peers, 8);
    pf_perf_format(g, &f[0], line, sizeof(line));
    assert_non_null(strstr(line, "node gpu-b, GPU 2 (GPU-6): bf16 GEMM 620.0 TFLOP/s is "));
    assert_non_null(strstr(line, "% below the median 789.0 of 8 NVIDIA H200"));
}

/* Exactly at 10 % below is not slow; just past it is. HBM is judged on its own. */
static void test_threshold_and_hbm(void **state)
{
    struct pf_perf g[3] = {gpu(0, H200, 800, 4000), gpu(1, H200, 720, 4000),
                           gpu(2, H200, 800, 3590)};
    struct pf_perf_limits lim = {0, 0};
    struct pf_perf_finding f[4];

    (void)state;
    assert_int_equal(pf_perf_compare(g, 3, &lim, f, 4), 1); /* 720 = 0.9 * 800: not slow */
    assert_int_equal(f[0].gpu, 2);
    assert_int_equal(f[0].metric, PF_PERF_HBM);
    g[1].tflops = 719.9;
    assert_int_equal(pf_perf_compare(g, 3, &lim, f, 4), 2);
    assert_int_equal(f[0].gpu, 1);
    assert_int_equal(f[0].metric, PF_PERF_GEMM);
}

/* Models are compared only with themselves: an H100 among H200s is not slow. */
static void test_models_apart(void **state)
{
    struct pf_perf g[4] = {gpu(0, H200, 790, 4280), gpu(1, H200, 792, 4270),
                           gpu(2, "NVIDIA H100 80GB HBM3", 600, 3000),
                           gpu(3, "NVIDIA H100 80GB HBM3", 605, 3010)};
    struct pf_perf_limits lim = {0, 0};
    struct pf_perf_finding f[4];

    (void)state;
    assert_int_equal(pf_perf_compare(g, 4, &lim, f, 4), 0);
}

/* One GPU: no median, only the floors. Not measured (0) is never judged. */
static void test_one_gpu_floors(void **state)
{
    struct pf_perf g[1] = {gpu(0, H200, 400, 4280)};
    struct pf_perf_limits none = {0, 0}, floors = {700, 3800};
    struct pf_perf_finding f[4];
    char line[512];

    (void)state;
    assert_int_equal(pf_perf_compare(g, 1, &none, f, 4), 0);
    assert_int_equal(pf_perf_compare(g, 1, &floors, f, 4), 1);
    assert_int_equal(f[0].below_floor, 1);
    pf_perf_format(g, &f[0], line, sizeof(line));
    assert_string_equal(line, "node gpu-a, GPU 0 (GPU-0): bf16 GEMM 400.0 TFLOP/s is below "
                              "--preflight-min-tflops 700.0");
    g[0].tflops = 0; /* cuBLAS missing */
    g[0].hbm_gbps = 3000;
    assert_int_equal(pf_perf_compare(g, 1, &floors, f, 4), 1);
    assert_int_equal(f[0].metric, PF_PERF_HBM);
    pf_perf_format(g, &f[0], line, sizeof(line));
    assert_string_equal(line, "node gpu-a, GPU 0 (GPU-0): HBM copy 3000.0 GB/s (read+write) is "
                              "below --preflight-min-hbm-gbps 3800.0");
}

/* Below the floor and the median: one finding (the floor). More findings than cap: counted. */
static void test_floor_wins_and_cap(void **state)
{
    struct pf_perf g[4] = {gpu(0, H200, 790, 4280), gpu(1, H200, 300, 1000),
                           gpu(2, H200, 790, 4280), gpu(3, H200, 790, 4280)};
    struct pf_perf_limits lim = {700, 3800};
    struct pf_perf_finding f[1];

    (void)state;
    assert_int_equal(pf_perf_compare(g, 4, &lim, f, 1), 2);
    assert_int_equal(f[0].gpu, 1);
    assert_int_equal(f[0].below_floor, 1);
    assert_int_equal(pf_perf_compare(NULL, 1, &lim, f, 1), -EINVAL);
    assert_int_equal(pf_perf_compare(g, 4, NULL, f, 1), -EINVAL);
}

static struct pf_health healthy(void)
{
    return (struct pf_health){1,    1,    0,  0, 0, 0,  0,  PF_CLK_SW_POWER_CAP,
                              1980, 1980, 38, 5, 5, 16, 16, 1};
}

static void test_health_ok(void **state)
{
    struct pf_health h = healthy();
    struct pf_health_issue is[PF_HEALTH_MAX_ISSUES];
    char line[512];

    (void)state;
    assert_int_equal(pf_health_judge(&h, is, PF_HEALTH_MAX_ISSUES), 0);
    assert_int_equal(pf_health_worst(is, 0), -1);
    pf_health_summary(&h, line, sizeof(line));
    assert_string_equal(line, "ECC on, 0/0 uncorrected (now/life); rows: ok; clock events: "
                              "sw_power_cap; SM 1980/1980 MHz; 38 C; PCIe gen5 x16 (max gen5 "
                              "x16); persistence on");
}

static void test_health_failures(void **state)
{
    struct pf_health h = healthy();
    struct pf_health_issue is[PF_HEALTH_MAX_ISSUES];
    int n;

    (void)state;
    h.ecc_volatile_unc = 2;
    h.ecc_aggregate_unc = 5;
    h.remap_failure = 1;
    n = pf_health_judge(&h, is, PF_HEALTH_MAX_ISSUES);
    assert_int_equal(n, 2);
    assert_int_equal(pf_health_worst(is, n), PF_HEALTH_FAIL);
    assert_string_equal(is[0].text, "2 uncorrectable ECC error(s) since the driver loaded");
    assert_non_null(strstr(is[1].text, "row remapping failed"));
    /* only past errors and a pending remap: warnings */
    h = healthy();
    h.ecc_aggregate_unc = 1;
    h.remap_pending = 1;
    n = pf_health_judge(&h, is, PF_HEALTH_MAX_ISSUES);
    assert_int_equal(n, 2);
    assert_int_equal(pf_health_worst(is, n), PF_HEALTH_WARN);
}

static void test_health_throttle_pcie_notes(void **state)
{
    struct pf_health h = healthy();
    struct pf_health_issue is[PF_HEALTH_MAX_ISSUES];
    int n;

    (void)state;
    h.clock_events = PF_CLK_HW_SLOWDOWN | PF_CLK_HW_POWER_BRAKE | PF_CLK_SW_POWER_CAP;
    h.sm_mhz = 1200;
    h.temp_c = 91;
    h.pcie_width = 8;
    h.pcie_gen = 1;
    h.persistence = 0;
    n = pf_health_judge(&h, is, PF_HEALTH_MAX_ISSUES);
    assert_int_equal(n, 5);
    assert_string_equal(is[0].text,
                        "clocks held down by hw_slowdown+hw_power_brake (SM 1200 of 1980 MHz)");
    assert_int_equal(is[0].level, PF_HEALTH_WARN);
    assert_string_equal(is[1].text, "temperature 91 C before the job");
    assert_non_null(strstr(is[2].text, "PCIe link x8, the GPU can do x16"));
    assert_int_equal(is[3].level, PF_HEALTH_NOTE); /* gen drops when idle */
    assert_int_equal(is[4].level, PF_HEALTH_NOTE); /* persistence off */
    assert_int_equal(pf_health_worst(is, n), PF_HEALTH_WARN);
    /* the idle and power-cap reasons alone are no trouble */
    h = healthy();
    h.clock_events = PF_CLK_GPU_IDLE | PF_CLK_SW_POWER_CAP;
    assert_int_equal(pf_health_judge(&h, is, PF_HEALTH_MAX_ISSUES), 0);
}

/* NVML missing: no issue, one clear line. Unknown facts (-1) are never judged. */
static void test_health_no_nvml(void **state)
{
    struct pf_health h = {0, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
    struct pf_health_issue is[2];
    char line[128], names[64];

    (void)state;
    assert_int_equal(pf_health_judge(&h, is, 2), 0);
    pf_health_summary(&h, line, sizeof(line));
    assert_string_equal(line, "NVML not found: health not checked");
    h.nvml = 1;
    assert_int_equal(pf_health_judge(&h, is, 2), 0);
    pf_health_clock_names(0, names, sizeof(names));
    assert_string_equal(names, "none");
}

/* muster-preflight health's pure parts: the pid list from the agent, which NVML process is a
 * killed worker, and the GEMM's exact check. */
static void test_parse_pids(void **state)
{
    int p[4];

    (void)state;
    assert_int_equal(pf_health_parse_pids("0", p, 4), 0);
    assert_int_equal(pf_health_parse_pids("12", p, 4), 1);
    assert_int_equal(p[0], 12);
    assert_int_equal(pf_health_parse_pids("1,22,333", p, 4), 3);
    assert_int_equal(p[2], 333);
    assert_int_equal(pf_health_parse_pids("", p, 4), -EINVAL);
    assert_int_equal(pf_health_parse_pids("1,,2", p, 4), -EINVAL);
    assert_int_equal(pf_health_parse_pids("1,", p, 4), -EINVAL);
    assert_int_equal(pf_health_parse_pids("-1", p, 4), -EINVAL);
    assert_int_equal(pf_health_parse_pids("1,0", p, 4), -EINVAL);
    assert_int_equal(pf_health_parse_pids("1 2", p, 4), -EINVAL);
    assert_int_equal(pf_health_parse_pids("99999999999", p, 4), -EINVAL);
    assert_int_equal(pf_health_parse_pids("1,2,3,4,5", p, 4), -EINVAL); /* more than cap */
    assert_int_equal(pf_health_parse_pids(NULL, p, 4), -EINVAL);
}

static void test_held_by(void **state)
{
    const struct pf_gpu_proc procs[] = {{500, 1ULL << 30}, {77, 2ULL << 30}, {9, ~0ULL}};
    const int pids[] = {10, 77}, none[] = {1, 2}, third[] = {9};

    (void)state;
    assert_int_equal(pf_health_held_by(procs, 3, pids, 2), 1);
    assert_int_equal(pf_health_held_by(procs, 3, none, 2), -1);
    assert_int_equal(pf_health_held_by(procs, 3, third, 1), 2);
    assert_int_equal(pf_health_held_by(procs, 0, pids, 2), -1);
    assert_int_equal(pf_health_held_by(procs, 3, pids, 0), -1);
}

static void test_gemm_check(void **state)
{
    unsigned short c[64];

    (void)state;
    for (int i = 0; i < 64; i++)
        c[i] = pf_bf16_from_float(4096.0f);
    assert_true(pf_bf16_to_float(c[0]) == 4096.0f);
    assert_int_equal(pf_health_gemm_wrong(c, 64, 4096), -1);
    c[37] = pf_bf16_from_float(4080.0f); /* one wrong element: a bit flip in the result */
    assert_int_equal(pf_health_gemm_wrong(c, 64, 4096), 37);
    assert_int_equal(pf_health_gemm_wrong(c, 64, 2048), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_median),
        cmocka_unit_test(test_slow_gemm_named),
        cmocka_unit_test(test_threshold_and_hbm),
        cmocka_unit_test(test_models_apart),
        cmocka_unit_test(test_one_gpu_floors),
        cmocka_unit_test(test_floor_wins_and_cap),
        cmocka_unit_test(test_health_ok),
        cmocka_unit_test(test_health_failures),
        cmocka_unit_test(test_health_throttle_pcie_notes),
        cmocka_unit_test(test_health_no_nvml),
        cmocka_unit_test(test_parse_pids),
        cmocka_unit_test(test_held_by),
        cmocka_unit_test(test_gemm_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
