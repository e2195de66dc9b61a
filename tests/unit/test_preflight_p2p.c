/* preflight/p2p.c: the peer-to-peer matrix rule. A pair far below the node's other
 * pairs is named with node, both GPUs' indices and UUIDs and its figure; one GPU has no pairs;
 * unmeasured pairs and the diagonal are never judged. No GPU needed. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "p2p.h"

static const char *const uuids[] = {"GPU-a0", "GPU-a1", "GPU-a2", "GPU-a3"};
static const int idx[] = {0, 1, 2, 3};

/* 4 GPUs at ~390 GB/s (NVLink), the pair 1 -> 3 at 40 GB/s: named, once, in that direction. */
static void test_slow_pair_named(void **state)
{
    double g[16];
    struct pf_p2p m = {"gpu-a", 4, idx, uuids, g};
    struct pf_p2p_finding f[4];
    char line[512];
    int pairs = 0;

    (void)state;
    for (int i = 0; i < 16; i++)
        g[i] = i / 4 == i % 4 ? 0 : 388.0 + i % 3;
    g[1 * 4 + 3] = 40.0;
    assert_int_equal(pf_p2p_compare(&m, 0, f, 4), 1);
    assert_int_equal(f[0].src, 1);
    assert_int_equal(f[0].dst, 3);
    assert_int_equal(f[0].below_floor, 0);
    assert_int_equal(f[0].pairs, 12);
    assert_true(pf_p2p_median(&m, &pairs) > 380 && pairs == 12);
    pf_p2p_format(&m, &f[0], line, sizeof(line));
    assert_non_null(strstr(line, "node gpu-a: P2P GPU 1 (GPU-a1) -> GPU 3 (GPU-a3) 40.0 GB/s is "));
    assert_non_null(strstr(line, "% below the node's median"));
    assert_non_null(strstr(line, "of 12 pairs"));
}

/* A healthy matrix with the usual spread (PCIe across sockets: a third lower) names nothing;
 * exactly half the median is not "far below", just under it is. */
static void test_threshold(void **state)
{
    double g[4] = {0, 100.0, 50.0, 0};
    struct pf_p2p m = {"n", 2, NULL, NULL, g};
    struct pf_p2p_finding f[2];

    (void)state;
    /* median of {100, 50} is 75: 50 is 33 % below, not an outlier */
    assert_int_equal(pf_p2p_compare(&m, 0, f, 2), 0);
    g[2] = 37.5; /* median 68.75, half 34.4: still fine */
    assert_int_equal(pf_p2p_compare(&m, 0, f, 2), 0);
    {
        double h[9] = {0, 100, 100, 100, 0, 100, 100, 50, 0}; /* median 100; 50 = exactly half */
        struct pf_p2p m3 = {"n", 3, NULL, NULL, h};
        assert_int_equal(pf_p2p_compare(&m3, 0, f, 2), 0);
        h[7] = 49.9;
        assert_int_equal(pf_p2p_compare(&m3, 0, f, 2), 1);
        assert_int_equal(f[0].src, 2);
        assert_int_equal(f[0].dst, 1);
    }
}

/* The floor names every pair under it, outliers or not; counts past cap are still counted. */
static void test_floor_and_cap(void **state)
{
    double g[9] = {0, 20, 20, 20, 0, 20, 20, 20, 0};
    struct pf_p2p m = {"pcie-box", 3, NULL, NULL, g};
    struct pf_p2p_finding f[2];
    char line[256];

    (void)state;
    assert_int_equal(pf_p2p_compare(&m, 0, f, 2), 0);
    assert_int_equal(pf_p2p_compare(&m, 25.0, f, 2), 6);
    assert_int_equal(f[0].below_floor, 1);
    assert_true(f[0].ref == 25.0);
    pf_p2p_format(&m, &f[0], line, sizeof(line));
    assert_string_equal(line, "node pcie-box: P2P GPU 0 (?) -> GPU 1 (?) 20.0 GB/s is below the "
                              "floor 25.0 GB/s");
}

/* One GPU: no pairs, nothing judged, no median; unmeasured pairs (<= 0) are ignored. */
static void test_one_gpu_and_unmeasured(void **state)
{
    double one[1] = {0}, g[9] = {0, 300, -1, 300, 0, 0, 300, 300, 0};
    struct pf_p2p m1 = {"solo", 1, NULL, NULL, one}, m3 = {"n", 3, NULL, NULL, g};
    struct pf_p2p_finding f[4];
    int pairs = -1;

    (void)state;
    assert_int_equal(pf_p2p_compare(&m1, 100.0, f, 4), 0);
    assert_true(pf_p2p_median(&m1, &pairs) == 0 && pairs == 0);
    assert_int_equal(pf_p2p_compare(&m3, 0, f, 4), 0);
    assert_true(pf_p2p_median(&m3, &pairs) == 300 && pairs == 4);
}

static void test_bad_args(void **state)
{
    double g[4] = {0};
    struct pf_p2p big = {"n", PF_P2P_MAX_GPUS + 1, NULL, NULL, g},
                  none = {"n", 2, NULL, NULL, NULL};
    struct pf_p2p ok = {"n", 2, NULL, NULL, g};
    struct pf_p2p_finding f[1];

    (void)state;
    assert_int_equal(pf_p2p_compare(NULL, 0, f, 1), -EINVAL);
    assert_int_equal(pf_p2p_compare(&big, 0, f, 1), -EINVAL);
    assert_int_equal(pf_p2p_compare(&none, 0, f, 1), -EINVAL);
    assert_int_equal(pf_p2p_compare(&ok, 0, NULL, 1), -EINVAL);
    assert_int_equal(pf_p2p_compare(&ok, 0, NULL, 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slow_pair_named), cmocka_unit_test(test_threshold),
        cmocka_unit_test(test_floor_and_cap),   cmocka_unit_test(test_one_gpu_and_unmeasured),
        cmocka_unit_test(test_bad_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
