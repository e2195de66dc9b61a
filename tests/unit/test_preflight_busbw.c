/* preflight/busbw.c: nccl-tests' bandwidth formulas, the size sweep, size parsing and the
 * exactly-summable check data of muster-preflight. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "busbw.h"

#define MiB (1ULL << 20)
#define GiB (1ULL << 30)

static void assert_near(double got, double want, double tol)
{
    if (fabs(got - want) > tol)
        fail_msg("got %.6f, want %.6f (+- %g)", got, want, tol);
}

/* The measurement in the reference notes (§0): 1 GiB in 3.246 ms on 2 H200s = 330.8 GB/s. */
static void test_algbw_busbw(void **state)
{
    double alg = pf_algbw_gbps((double)GiB, 3.246e-3);

    assert_near(alg, 330.8, 0.05);
    assert_near(pf_busbw_allreduce(alg, 2), alg, 1e-9);     /* factor 2(n-1)/n = 1 */
    assert_near(pf_busbw_allreduce(100.0, 8), 175.0, 1e-9); /* 1.75 */
    assert_near(pf_busbw_allreduce(100.0, 4), 150.0, 1e-9);
    assert_near(pf_busbw_allreduce(100.0, 1), 0.0, 0); /* nccl-tests: factor 0 for one rank */
    assert_near(pf_busbw_allreduce(100.0, 0), 0.0, 0);
    assert_near(pf_algbw_gbps(1e9, 1.0), 1.0, 1e-12);
    assert_near(pf_algbw_gbps(1e9, 0), 0.0, 0); /* never inf */
    assert_near(pf_algbw_gbps(1e9, -1), 0.0, 0);
}

static void test_sweep_default(void **state)
{
    uint64_t s[64];
    int n = pf_size_sweep(1 * MiB, 256 * MiB, 4, s, 64);

    assert_int_equal(n, 5);
    assert_true(s[0] == 1 * MiB && s[1] == 4 * MiB && s[2] == 16 * MiB && s[3] == 64 * MiB &&
                s[4] == 256 * MiB);
}

static void test_sweep_max_not_power(void **state)
{
    uint64_t s[64];
    int n = pf_size_sweep(1 * MiB, 100 * MiB, 4, s, 64);

    assert_int_equal(n, 5);
    assert_true(s[3] == 64 * MiB && s[4] == 100 * MiB);
    n = pf_size_sweep(4096, 4096, 4, s, 64); /* min == max: one size */
    assert_int_equal(n, 1);
    assert_true(s[0] == 4096);
    n = pf_size_sweep(1, UINT64_MAX, 2, s, 64); /* 2^0 .. 2^63 + max = 65 entries */
    assert_int_equal(n, -ENOSPC);
    n = pf_size_sweep(2, UINT64_MAX, 2, s, 64); /* 2^1 .. 2^63, then UINT64_MAX */
    assert_int_equal(n, 64);
    assert_true(s[62] == (1ULL << 63) && s[63] == UINT64_MAX);
}

static void test_sweep_bad(void **state)
{
    uint64_t s[4];

    assert_int_equal(pf_size_sweep(0, 10, 4, s, 4), -EINVAL);
    assert_int_equal(pf_size_sweep(20, 10, 4, s, 4), -EINVAL);
    assert_int_equal(pf_size_sweep(1, 10, 1, s, 4), -EINVAL);
    assert_int_equal(pf_size_sweep(1, 10, 0, s, 4), -EINVAL);
    assert_int_equal(pf_size_sweep(1, 10, 4, NULL, 4), -EINVAL);
    assert_int_equal(pf_size_sweep(1, 1 << 20, 2, s, 4), -ENOSPC);
}

static void test_parse_units(void **state)
{
    static const struct {
        const char *s;
        uint64_t v;
    } t[] = {{"0", 0},
             {"4096", 4096},
             {"1K", 1024},
             {"1k", 1024},
             {"1KiB", 1024},
             {"1kib", 1024},
             {"16M", 16 * MiB},
             {"16MiB", 16 * MiB},
             {"256M", 256 * MiB},
             {"2G", 2 * GiB},
             {"2GiB", 2 * GiB},
             {"3gb", 3 * GiB},
             {"100B", 100},
             {"007", 7},
             {"18446744073709551615", UINT64_MAX},
             {"17179869183G", 17179869183ULL * GiB}};

    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        uint64_t v = 1;
        if (pf_parse_size(t[i].s, &v) != 0 || v != t[i].v)
            fail_msg("\"%s\": got %llu, want %llu", t[i].s, (unsigned long long)v,
                     (unsigned long long)t[i].v);
    }
}

static void test_parse_bad(void **state)
{
    static const char *bad[] = {"",
                                "M",
                                "-1",
                                "+1",
                                " 1",
                                "1 ",
                                "1.5M",
                                "1T",
                                "1Mi",
                                "1MiBs",
                                "0x10",
                                "1e6",
                                "K1",
                                "1KK",
                                "18446744073709551616",
                                "17179869184G",
                                "99999999999999999999999"};
    uint64_t v = 42;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (pf_parse_size(bad[i], &v) != -EINVAL)
            fail_msg("\"%s\" was accepted", bad[i]);
    }
    assert_true(v == 42); /* untouched on error */
    assert_int_equal(pf_parse_size(NULL, &v), -EINVAL);
}

/* The all-reduce check must be exact: summing every rank's value in float, in any order, gives
 * pf_check_expected(), and the values differ per rank for the sizes muster runs. */
static void check_exact(int n)
{
    for (size_t i = 0; i < 14; i++) {
        float fwd = 0, bwd = 0;
        for (int r = 0; r < n; r++)
            fwd += pf_check_value(r, n, i);
        for (int r = n - 1; r >= 0; r--)
            bwd += pf_check_value(r, n, i);
        if (fwd != pf_check_expected(n, i) || bwd != pf_check_expected(n, i))
            fail_msg("n=%d i=%zu: sums %.1f/%.1f, expected %.1f", n, i, (double)fwd, (double)bwd,
                     (double)pf_check_expected(n, i));
    }
}

static void test_check_values(void **state)
{
    static const int ns[] = {1, 2, 3, 8, 16, 64, 1000, 2048, 2300, 5000, 100000};

    for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++)
        check_exact(ns[k]);
    assert_true(pf_check_value(0, 2, 0) == 1.0f && pf_check_value(1, 2, 0) == 2.0f);
    assert_true(pf_check_value(1, 2, 3) == 2.0f + 3 * 1024.0f);
    assert_true(pf_check_expected(2, 3) == 3.0f + 2 * 3 * 1024.0f);
    assert_true(pf_check_expected(8, 6) == 36.0f + 8 * 6 * 1024.0f);
    assert_true(pf_check_value(0, 1024, 0) != pf_check_value(1023, 1024, 0));
}

/* One rank moves no data, so a busbw floor is not applied (it failed every one-GPU
 * job); from 2 ranks on it is. */
static void test_busbw_floor_ranks(void **state)
{
    (void)state;
    assert_int_equal(pf_busbw_judge(1, 0.0, 1.0), PF_BUSBW_ONE_RANK);
    assert_int_equal(pf_busbw_judge(0, 0.0, 1.0), PF_BUSBW_ONE_RANK);
    assert_int_equal(pf_busbw_judge(1, 0.0, 0.0), PF_BUSBW_NO_FLOOR);
    assert_int_equal(pf_busbw_judge(2, 299.4, 0.0), PF_BUSBW_NO_FLOOR);
    assert_int_equal(pf_busbw_judge(2, 299.4, 250.0), PF_BUSBW_OK);
    assert_int_equal(pf_busbw_judge(2, 250.0, 250.0), PF_BUSBW_OK);
    assert_int_equal(pf_busbw_judge(2, 100.0, 250.0), PF_BUSBW_BELOW);
    assert_int_equal(pf_busbw_judge(8, 0.0, 1.0), PF_BUSBW_BELOW);
    assert_int_equal(pf_busbw_judge(2, 100.0, -1.0), PF_BUSBW_NO_FLOOR);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_algbw_busbw),         cmocka_unit_test(test_sweep_default),
        cmocka_unit_test(test_sweep_max_not_power), cmocka_unit_test(test_sweep_bad),
        cmocka_unit_test(test_parse_units),         cmocka_unit_test(test_parse_bad),
        cmocka_unit_test(test_check_values),        cmocka_unit_test(test_busbw_floor_ranks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
