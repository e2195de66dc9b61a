/* common/backoff.c: --restart-backoff parsing, the doubling sequence, its cap, the jitter
 * bounds and the reset after a healthy run. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "backoff.h"

static void test_parse(void **state)
{
    uint32_t lo = 1, hi = 1;

    (void)state;
    assert_int_equal(mc_backoff_parse("0.5:2", &lo, &hi), 0);
    assert_int_equal(lo, 500);
    assert_int_equal(hi, 2000);
    assert_int_equal(mc_backoff_parse("1", &lo, &hi), 0);
    assert_int_equal(lo, 1000);
    assert_int_equal(hi, MC_BACKOFF_DEFAULT_MAX_MS);
    assert_int_equal(mc_backoff_parse("90", &lo, &hi), 0);
    assert_int_equal(hi, 90000); /* MAX defaults to MIN when MIN is larger than 60 s */
    assert_int_equal(mc_backoff_parse("0", &lo, &hi), 0);
    assert_int_equal(lo, 0);
    assert_int_equal(hi, 0);
    assert_int_equal(mc_backoff_parse("2:2", &lo, &hi), 0);
    static const char *bad[] = {"",    ":",   "2:1", "-1", "1:-2", "x",    "1:x",    "1e3",
                                "inf", "nan", "1:",  ":2", "0:5",  "3601", "1:3601", "1::2"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (mc_backoff_parse(bad[i], &lo, &hi) != -EINVAL)
            fail_msg("'%s' was accepted", bad[i]);
}

static void test_sequence_and_cap(void **state)
{
    (void)state;
    assert_int_equal(mc_backoff_base_ms(500, 2000, 0), 500);
    assert_int_equal(mc_backoff_base_ms(500, 2000, 1), 1000);
    assert_int_equal(mc_backoff_base_ms(500, 2000, 2), 2000);
    assert_int_equal(mc_backoff_base_ms(500, 2000, 3), 2000);
    assert_int_equal(mc_backoff_base_ms(500, 2000, 1000), 2000); /* no overflow */
    assert_int_equal(mc_backoff_base_ms(3000, 3000, 5), 3000);
    assert_int_equal(mc_backoff_base_ms(0, 0, 3), 0);
}

static void test_jitter_bounds(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed < 200; seed++) {
        struct mc_backoff b = {.min_ms = 500, .max_ms = 2000, .rng = seed};
        static const uint32_t base[] = {500, 1000, 2000, 2000, 2000};

        for (size_t i = 0; i < sizeof(base) / sizeof(base[0]); i++) {
            uint32_t d = mc_backoff_next(&b, 10);

            if (d < base[i] * 8 / 10 || d > base[i] * 12 / 10)
                fail_msg("seed %llu step %zu: %u ms outside [0.8, 1.2] x %u",
                         (unsigned long long)seed, i, d, base[i]);
        }
    }
}

static void test_jitter_varies(void **state)
{
    struct mc_backoff b = {.min_ms = 1000, .max_ms = 1000, .rng = 42};
    uint32_t first = mc_backoff_next(&b, 0);
    int differs = 0;

    (void)state;
    for (int i = 0; i < 20; i++)
        differs |= mc_backoff_next(&b, 0) != first;
    assert_true(differs);
}

static void test_reset_after_healthy_run(void **state)
{
    struct mc_backoff b = {.min_ms = 500, .max_ms = 2000, .rng = 7};
    uint32_t d;

    (void)state;
    mc_backoff_next(&b, 100);
    mc_backoff_next(&b, 100);
    d = mc_backoff_next(&b, 100);
    assert_true(d >= 1600); /* third quick failure: 2 s +- 20 % */
    d = mc_backoff_next(&b, mc_backoff_healthy_ms(2000) - 1);
    assert_true(d >= 1600); /* not healthy yet */
    d = mc_backoff_next(&b, mc_backoff_healthy_ms(2000));
    assert_true(d >= 400 && d <= 600); /* healthy: back to MIN */
    assert_int_equal(mc_backoff_healthy_ms(2000), MC_BACKOFF_HEALTHY_MS);
    assert_int_equal(mc_backoff_healthy_ms(120000), 120000);
}

static void test_off(void **state)
{
    struct mc_backoff b = {0};

    (void)state;
    for (int i = 0; i < 5; i++)
        assert_int_equal(mc_backoff_next(&b, 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_sequence_and_cap),
        cmocka_unit_test(test_jitter_bounds),
        cmocka_unit_test(test_jitter_varies),
        cmocka_unit_test(test_reset_after_healthy_run),
        cmocka_unit_test(test_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
