/* rendezvous/hslimit.c: per-source handshakes in flight, the token bucket and its refill, the
 * bounded table that forgets idle sources. The clock is a parameter: no sleeping. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "hslimit.h"

static void addr(uint8_t a[16], unsigned n)
{
    memset(a, 0, 16);
    a[10] = a[11] = 0xff;
    a[12] = 10;
    a[13] = (uint8_t)(n >> 16);
    a[14] = (uint8_t)(n >> 8);
    a[15] = (uint8_t)n;
}

static int setup(void **state)
{
    struct rdzv_hslimit *l;

    if (rdzv_hslimit_new(64, &l) < 0)
        return -1;
    *state = l;
    return 0;
}

static int teardown(void **state)
{
    rdzv_hslimit_free(*state);
    return 0;
}

static void test_in_flight(void **state)
{
    struct rdzv_hslimit *l = *state;
    uint8_t a[16], b[16];

    addr(a, 1);
    addr(b, 2);
    rdzv_hslimit_configure(l, 3, 0, 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(rdzv_hslimit_begin(l, a, 0), 0);
    assert_int_equal(rdzv_hslimit_begin(l, a, 0), -EBUSY);
    assert_int_equal(rdzv_hslimit_begin(l, b, 0), 0); /* another address is not affected */
    assert_int_equal(rdzv_hslimit_in_flight(l, a), 3);
    rdzv_hslimit_end(l, a);
    assert_int_equal(rdzv_hslimit_begin(l, a, 0), 0);
    assert_int_equal(rdzv_hslimit_begin(l, a, 0), -EBUSY);
    rdzv_hslimit_end(l, b);
    rdzv_hslimit_end(l, b); /* one too many: ignored, never below 0 */
    assert_int_equal(rdzv_hslimit_in_flight(l, b), 0);
}

static void test_rate(void **state)
{
    struct rdzv_hslimit *l = *state;
    uint8_t a[16];
    uint64_t t = 1000;

    addr(a, 1);
    rdzv_hslimit_configure(l, 0, 10, 5); /* 10/s, burst 5 */
    for (int i = 0; i < 5; i++) {
        assert_int_equal(rdzv_hslimit_begin(l, a, t), 0);
        rdzv_hslimit_end(l, a);
    }
    assert_int_equal(rdzv_hslimit_begin(l, a, t), -EAGAIN); /* refused: takes no token */
    assert_int_equal(rdzv_hslimit_begin(l, a, t + 99), -EAGAIN);
    assert_int_equal(rdzv_hslimit_begin(l, a, t + 100), 0); /* 100 ms = one token at 10/s */
    assert_int_equal(rdzv_hslimit_begin(l, a, t + 100), -EAGAIN);
    /* a long pause refills only up to the burst */
    t += 100000;
    for (int i = 0; i < 5; i++)
        assert_int_equal(rdzv_hslimit_begin(l, a, t), 0);
    assert_int_equal(rdzv_hslimit_begin(l, a, t), -EAGAIN);
    /* a clock going backwards takes nothing and gives nothing */
    assert_int_equal(rdzv_hslimit_begin(l, a, t - 5000), -EAGAIN);
}

/* Thousands of addresses pass through a 64-source table: idle ones are forgotten, busy ones
 * kept with their counts, and a table full of busy sources refuses newcomers. */
static void test_bounded(void **state)
{
    struct rdzv_hslimit *l = *state;
    uint8_t a[16];

    rdzv_hslimit_configure(l, 2, 100, 1);
    for (unsigned i = 0; i < 5000; i++) {
        addr(a, i);
        assert_int_equal(rdzv_hslimit_begin(l, a, (uint64_t)i * 10), 0);
        rdzv_hslimit_end(l, a);
        assert_true(rdzv_hslimit_sources(l) <= 64);
    }
    /* 64 busy sources at one instant: the 65th has no room */
    for (unsigned i = 0; i < 64; i++) {
        addr(a, 100000 + i);
        assert_int_equal(rdzv_hslimit_begin(l, a, 100000), 0);
    }
    addr(a, 200000);
    assert_int_equal(rdzv_hslimit_begin(l, a, 100000), -ENOMEM);
    addr(a, 100007);
    assert_int_equal(rdzv_hslimit_in_flight(l, a), 1);
    /* once they finished and their buckets refilled (10 ms at 100/s), room again */
    for (unsigned i = 0; i < 64; i++) {
        addr(a, 100000 + i);
        rdzv_hslimit_end(l, a);
    }
    addr(a, 200000);
    assert_int_equal(rdzv_hslimit_begin(l, a, 100010), 0);
    assert_true(rdzv_hslimit_sources(l) <= 2);
}

/* Limits count per /24 (IPv4, v4-mapped) and /64 (IPv6). */
static void test_group(void **state)
{
    uint8_t a[16], b[16], g[16], h[16];
    struct rdzv_hslimit *l = *state;

    addr(a, 0x010203); /* 10.1.2.3 */
    addr(b, 0x0102fe); /* 10.1.2.254: same /24 */
    rdzv_hslimit_group(a, g);
    rdzv_hslimit_group(b, h);
    assert_memory_equal(g, h, 16);
    assert_int_equal(g[15], 0);
    assert_int_equal(g[14], 2);
    assert_int_equal(g[10], 0xff); /* still v4-mapped */
    addr(b, 0x010303);             /* 10.1.3.3: another /24 */
    rdzv_hslimit_group(b, h);
    assert_memory_not_equal(g, h, 16);
    /* IPv6: 2001:db8:0:1::5 and 2001:db8:0:1:ffff::9 share a /64; 2001:db8:0:2::5 does not */
    memset(a, 0, 16);
    a[0] = 0x20, a[1] = 0x01, a[2] = 0x0d, a[3] = 0xb8, a[7] = 1, a[15] = 5;
    memcpy(b, a, 16);
    b[8] = b[9] = 0xff, b[15] = 9;
    rdzv_hslimit_group(a, g);
    rdzv_hslimit_group(b, h);
    assert_memory_equal(g, h, 16);
    for (int i = 8; i < 16; i++)
        assert_int_equal(g[i], 0);
    b[7] = 2;
    rdzv_hslimit_group(b, h);
    assert_memory_not_equal(g, h, 16);
    rdzv_hslimit_group(a, a); /* in place */
    assert_memory_equal(a, g, 16);
    /* grouped keys share one budget */
    addr(a, 0x010203);
    addr(b, 0x010204);
    rdzv_hslimit_group(a, a);
    rdzv_hslimit_group(b, b);
    rdzv_hslimit_configure(l, 2, 0, 0);
    assert_int_equal(rdzv_hslimit_begin(l, a, 0), 0);
    assert_int_equal(rdzv_hslimit_begin(l, b, 0), 0);
    assert_int_equal(rdzv_hslimit_begin(l, a, 0), -EBUSY);
}

/* A connection that closed without a byte gives its token back: silent floods do
 * not empty the bucket of their /24. */
static void test_refund(void **state)
{
    struct rdzv_hslimit *l = *state;
    uint8_t a[16];

    addr(a, 1);
    rdzv_hslimit_configure(l, 0, 10, 2);
    assert_int_equal(rdzv_hslimit_begin(l, a, 0), 0);
    assert_int_equal(rdzv_hslimit_begin(l, a, 0), 0);
    assert_int_equal(rdzv_hslimit_begin(l, a, 0), -EAGAIN);
    rdzv_hslimit_end(l, a);
    rdzv_hslimit_refund(l, a);
    rdzv_hslimit_refund(l, a);
    rdzv_hslimit_refund(l, a); /* never over the burst */
    assert_int_equal(rdzv_hslimit_begin(l, a, 0), 0);
    assert_int_equal(rdzv_hslimit_begin(l, a, 0), 0);
    assert_int_equal(rdzv_hslimit_begin(l, a, 0), -EAGAIN);
}

static void test_no_limits(void **state)
{
    struct rdzv_hslimit *l = *state;
    uint8_t a[16];

    addr(a, 9);
    rdzv_hslimit_configure(l, 0, 0, 0);
    for (int i = 0; i < 10000; i++)
        assert_int_equal(rdzv_hslimit_begin(l, a, 0), 0);
    assert_int_equal(rdzv_hslimit_in_flight(l, a), 10000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_in_flight, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_group, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refund, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
