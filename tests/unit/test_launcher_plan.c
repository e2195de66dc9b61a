/* Unit tests for launcher/plan.c: the seed's batch-size rule, size parsing, the probe file. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "plan.h"

#define GiB LAUNCHER_PLAN_GIB
#define MiB LAUNCHER_PLAN_MIB

static double mem(const char *s)
{
    double v = -1.0;

    assert_int_equal(launcher_parse_mem(s, &v), 0);
    return v;
}

/* --- launcher_parse_mem ------------------------------------------------------------------- */

static void parse_units(void **state)
{
    (void)state;
    assert_true(mem("48GiB") == 48.0 * GiB);
    assert_true(mem("48G") == 48.0 * GiB);
    assert_true(mem("48g") == 48.0 * GiB);
    assert_true(mem("48 GiB") == 48.0 * GiB);
    assert_true(mem("4096MiB") == 4.0 * GiB);
    assert_true(mem("512M") == 512.0 * MiB);
    assert_true(mem("1.5T") == 1.5 * 1024.0 * GiB);
    assert_true(mem("2TiB") == 2048.0 * GiB);
    assert_true(mem("64KiB") == 65536.0);
    assert_true(mem("64k") == 65536.0);
    assert_true(mem("1000000") == 1000000.0);
    assert_true(mem("100B") == 100.0);
    assert_true(mem("0") == 0.0);
    assert_true(mem(".5G") == 0.5 * GiB);
    assert_true(mem("3.") == 3.0);
    assert_true(fabs(mem("0.04GiB") - 0.04 * GiB) < 1e-3);
}

static void parse_rejects_junk(void **state)
{
    static const char *bad[] = {
        "",
        " ",
        "-1",
        "-1G",
        "+1G",
        " 48G",
        "48G ",
        "48 ",
        "48  G",
        "G",
        ".",
        ".G",
        "48GB",
        "48MB",
        "48Gi",
        "48GiBs",
        "48X",
        "4 8G",
        "1e3",
        "0x10",
        "inf",
        "nan",
        "NaN",
        "infinity",
        "1..2",
        "1.2.3",
        "48G\n",
        "99999999999999999999999999T",
        "5000000T", /* above 2^62 bytes */
        "1"
        "00000000000000000000000000000000000000000000000000000000000000000000000000",
    };
    double v = 7.0;

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (launcher_parse_mem(bad[i], &v) != -EINVAL)
            fail_msg("accepted '%s'", bad[i]);
        assert_true(v == 7.0); /* untouched */
    }
    assert_int_equal(launcher_parse_mem(NULL, &v), -EINVAL);
    assert_true(mem("4096T") == 4096.0 * 1024.0 * GiB); /* 4 PiB is still fine */
}

/* --- launcher_plan_floor ------------------------------------------------------------------ */

static void tolerant_floor(void **state)
{
    (void)state;
    /* 0.3 / 0.1 computes to 2.9999999999999996 */
    volatile double a = 0.3, b = 0.1;
    double x = a / b;
    assert_true(x < 3.0);
    assert_true(floor(x) == 2.0);
    assert_true(launcher_plan_floor(x) == 3.0);
    assert_true(launcher_plan_floor(239.5) == 239.0);
    assert_true(launcher_plan_floor(239.999) == 239.0); /* a real shortfall is not forgiven */
    assert_true(launcher_plan_floor(0.0) == 0.0);
    assert_true(launcher_plan_floor(0.9999999999) == 1.0);
    assert_true(launcher_plan_floor(0.99) == 0.0);
    assert_true(launcher_plan_floor(192.0) == 192.0);
    assert_true(launcher_plan_floor(0.8 * 240) == 192.0);
    assert_true(launcher_plan_floor(1e6 - 0.5) == 1e6 - 1.0); /* batches stay far below 1e9 */
}

/* --- launcher_plan_compute ---------------------------------------------------------------- */

static struct launcher_plan_in seed_in(void)
{
    return (struct launcher_plan_in){.gpu_mem = mem("48GiB"),
                                     .static_mem = mem("4GiB"),
                                     .per_sample = mem("0.04GiB"),
                                     .safety = 0.85,
                                     .procs = 3};
}

static void seed_example(void **state)
{
    struct launcher_plan_in in = seed_in();
    struct launcher_plan_out out;
    char err[256] = "", buf[32];

    (void)state;
    assert_int_equal(launcher_plan_compute(&in, &out, err, sizeof(err)), 0);
    assert_true(fabs(out.per_proc - 13.6 * GiB) < 1.0);
    assert_string_equal(launcher_plan_fmt_size(out.per_proc, buf, sizeof(buf)), "13.6 GiB");
    assert_int_equal(out.max_batch, 240);
    assert_int_equal(out.start_batch, 192);

    /* the same in plain GiB numbers, the way the seed writes it */
    in = (struct launcher_plan_in){
        .gpu_mem = 48, .static_mem = 4, .per_sample = 0.04, .safety = 0.85, .procs = 3};
    assert_int_equal(launcher_plan_compute(&in, &out, err, sizeof(err)), 0);
    assert_int_equal(out.max_batch, 240);
    assert_int_equal(out.start_batch, 192);
}

static void other_plans(void **state)
{
    struct launcher_plan_in in = seed_in();
    struct launcher_plan_out out;
    char err[256];

    (void)state;
    in.procs = 1; /* 40.8 GiB share: (40.8 - 4) / 0.04 = 920 */
    assert_int_equal(launcher_plan_compute(&in, &out, err, sizeof(err)), 0);
    assert_int_equal(out.max_batch, 920);
    assert_int_equal(out.start_batch, 736);
    in = seed_in();
    in.safety = 1.0; /* 16 GiB share: 12 / 0.04 = 300 */
    assert_int_equal(launcher_plan_compute(&in, &out, err, sizeof(err)), 0);
    assert_int_equal(out.max_batch, 300);
    assert_int_equal(out.start_batch, 240);
    in = seed_in();
    in.static_mem = 0.0;
    assert_int_equal(launcher_plan_compute(&in, &out, err, sizeof(err)), 0);
    assert_int_equal(out.max_batch, 340);
    /* 24 GiB x 0.85 / 0.01 GiB computes to 2039.9999999999998: a plain floor says 2039 */
    in = (struct launcher_plan_in){.gpu_mem = mem("24GiB"),
                                   .static_mem = 0.0,
                                   .per_sample = mem("0.01GiB"),
                                   .safety = 0.85,
                                   .procs = 1};
    assert_true(in.gpu_mem * in.safety / in.per_sample < 2040.0);
    assert_int_equal(launcher_plan_compute(&in, &out, err, sizeof(err)), 0);
    assert_int_equal(out.max_batch, 2040);
    assert_int_equal(out.start_batch, 1632);
    /* room for exactly one sample: the start is never 0 */
    in = seed_in();
    in.per_sample = 9.6 * GiB;
    assert_int_equal(launcher_plan_compute(&in, &out, err, sizeof(err)), 0);
    assert_int_equal(out.max_batch, 1);
    assert_int_equal(out.start_batch, 1);
}

static void expect_error(struct launcher_plan_in in, const char *reason)
{
    struct launcher_plan_out out = {.max_batch = -7};
    char err[256] = "";

    assert_int_equal(launcher_plan_compute(&in, &out, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, reason);
    assert_int_equal(out.max_batch, -7); /* untouched */
    assert_null(strchr(err, '\n'));
}

static void impossible_plans(void **state)
{
    struct launcher_plan_in in;

    (void)state;
    in = seed_in(), in.procs = 0;
    expect_error(in, "the number of processes must be at least 1");
    in = seed_in(), in.safety = 0.0;
    expect_error(in, "safety factor 0 is not in (0, 1]");
    in = seed_in(), in.safety = 1.2;
    expect_error(in, "safety factor 1.2 is not in (0, 1]");
    in = seed_in(), in.safety = NAN;
    expect_error(in, "safety factor nan is not in (0, 1]");
    in = seed_in(), in.per_sample = 0.0;
    expect_error(in, "per-sample memory must be above zero");
    in = seed_in(), in.per_sample = -1.0;
    expect_error(in, "per-sample memory must be above zero");
    in = seed_in(), in.gpu_mem = 0.0;
    expect_error(in, "GPU memory must be above zero");
    in = seed_in(), in.static_mem = -GiB;
    expect_error(in, "static memory must not be negative");
    in = seed_in(), in.static_mem = 20 * GiB;
    expect_error(in, "static memory 20.0 GiB does not fit in the 13.6 GiB share of each of 3 "
                     "processes on a 48.0 GiB GPU");
    in = seed_in(), in.static_mem = 13.6 * GiB; /* exactly the share: nothing left */
    expect_error(in, "static memory 13.6 GiB does not fit in the 13.6 GiB share of each of 3 "
                     "processes on a 48.0 GiB GPU");
    in = seed_in(), in.static_mem = 50 * GiB, in.procs = 1;
    expect_error(in, "static memory 50.0 GiB does not fit in the 40.8 GiB share of the only "
                     "process on a 48.0 GiB GPU");
    in = seed_in(), in.static_mem = 13 * GiB, in.per_sample = GiB;
    expect_error(in, "max batch is 0: the 13.6 GiB share less 13.0 GiB static memory leaves "
                     "614.4 MiB, one sample needs 1.0 GiB");
    in = seed_in(), in.per_sample = 1e-6;
    expect_error(in, "max batch 1.03e+16 is absurd: per-sample memory 0 B is too small");
}

static void error_buffer_small_or_absent(void **state)
{
    struct launcher_plan_in in = seed_in();
    struct launcher_plan_out out;
    char err[8];

    (void)state;
    in.procs = 0;
    assert_int_equal(launcher_plan_compute(&in, &out, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "the num"); /* truncated, terminated */
    assert_int_equal(launcher_plan_compute(&in, &out, NULL, 0), -EINVAL);
}

static void fmt_size(void **state)
{
    char b[32];

    (void)state;
    assert_string_equal(launcher_plan_fmt_size(48.0 * GiB, b, sizeof(b)), "48.0 GiB");
    assert_string_equal(launcher_plan_fmt_size(0.04 * GiB, b, sizeof(b)), "41.0 MiB");
    assert_string_equal(launcher_plan_fmt_size(512.0 * MiB, b, sizeof(b)), "512.0 MiB");
    assert_string_equal(launcher_plan_fmt_size(1536.0, b, sizeof(b)), "1.5 KiB");
    assert_string_equal(launcher_plan_fmt_size(100.0, b, sizeof(b)), "100 B");
}

/* --- launcher_plan_from_probe ------------------------------------------------------------- */

static void probe_ok(void **state)
{
    struct launcher_plan_probe p;
    char err[256] = "";

    (void)state;
    /* 4 GiB static, 8 samples of 40 MiB on top */
    assert_int_equal(launcher_plan_from_probe("{\"static_bytes\": 4294967296, \"peak_bytes\": "
                                              "4630511616, \"batch\": 8}",
                                              &p, err, sizeof(err)),
                     0);
    assert_true(p.static_bytes == 4.0 * GiB);
    assert_int_equal(p.batch, 8);
    assert_true(p.per_sample == 40.0 * MiB);
    assert_true(p.total_bytes == 0.0);
    assert_int_equal(launcher_plan_from_probe("{\"static_bytes\": 1.5e9, \"peak_bytes\": 2.5e9, "
                                              "\"batch\": 4, \"total_bytes\": 51539607552, "
                                              "\"extra\": \"ignored\"}",
                                              &p, err, sizeof(err)),
                     0);
    assert_true(p.per_sample == 2.5e8);
    assert_true(p.total_bytes == 48.0 * GiB);
}

static void expect_probe_error(const char *json, const char *reason)
{
    struct launcher_plan_probe p = {.batch = -7};
    char err[256] = "";

    if (launcher_plan_from_probe(json, &p, err, sizeof(err)) != -EINVAL)
        fail_msg("accepted %s", json);
    if (strncmp(err, reason, strlen(reason)) != 0)
        fail_msg("for %s: reason '%s', expected '%s...'", json, err, reason);
    assert_int_equal(p.batch, -7);
}

static void probe_errors(void **state)
{
    (void)state;
    expect_probe_error("", "probe file is not JSON");
    expect_probe_error("{\"static_bytes\": 1", "probe file is not JSON");
    expect_probe_error("[1, 2]", "probe file is not a JSON object");
    expect_probe_error("{\"peak_bytes\": 2, \"batch\": 1}", "probe file lacks \"static_bytes\"");
    expect_probe_error("{\"static_bytes\": 1, \"batch\": 1}", "probe file lacks \"peak_bytes\"");
    expect_probe_error("{\"static_bytes\": 1, \"peak_bytes\": 2}", "probe file lacks \"batch\"");
    expect_probe_error("{\"static_bytes\": \"1\", \"peak_bytes\": 2, \"batch\": 1}",
                       "probe file: \"static_bytes\" is not a number");
    expect_probe_error("{\"static_bytes\": -1, \"peak_bytes\": 2, \"batch\": 1}",
                       "probe file: \"static_bytes\" is negative");
    expect_probe_error("{\"static_bytes\": 1, \"peak_bytes\": 2, \"batch\": 0}",
                       "probe file: \"batch\" must be an integer of at least 1");
    expect_probe_error("{\"static_bytes\": 1, \"peak_bytes\": 2, \"batch\": 2.5}",
                       "probe file: \"batch\" must be an integer of at least 1");
    expect_probe_error("{\"static_bytes\": 1, \"peak_bytes\": 2, \"batch\": true}",
                       "probe file: \"batch\" must be an integer of at least 1");
    expect_probe_error("{\"static_bytes\": 2048, \"peak_bytes\": 1024, \"batch\": 1}",
                       "probe file: peak memory 1.0 KiB is not above static memory 2.0 KiB");
    expect_probe_error("{\"static_bytes\": 5, \"peak_bytes\": 5, \"batch\": 1}",
                       "probe file: peak memory 5 B is not above static memory 5 B");
    expect_probe_error("{\"static_bytes\": 1, \"peak_bytes\": 2, \"batch\": 1, "
                       "\"total_bytes\": 2}",
                       "probe file: total_bytes is not above peak_bytes");
    expect_probe_error("{\"static_bytes\": 1, \"static_bytes\": 1, \"peak_bytes\": 2, "
                       "\"batch\": 1}",
                       "probe file is not JSON");
}

/* The probe's figures feed the rule: the seed's numbers measured by a probe at batch 8. */
static void probe_then_plan(void **state)
{
    struct launcher_plan_probe p;
    struct launcher_plan_in in;
    struct launcher_plan_out out;
    char json[256], err[256];

    (void)state;
    snprintf(json, sizeof(json),
             "{\"static_bytes\": %.0f, \"peak_bytes\": %.0f, \"batch\": 8, "
             "\"total_bytes\": %.0f}",
             4.0 * GiB, 4.0 * GiB + 8 * 0.04 * GiB, 48.0 * GiB);
    assert_int_equal(launcher_plan_from_probe(json, &p, err, sizeof(err)), 0);
    in = (struct launcher_plan_in){.gpu_mem = p.total_bytes,
                                   .static_mem = p.static_bytes,
                                   .per_sample = p.per_sample,
                                   .safety = 0.85,
                                   .procs = 3};
    assert_int_equal(launcher_plan_compute(&in, &out, err, sizeof(err)), 0);
    assert_int_equal(out.max_batch, 240);
    assert_int_equal(out.start_batch, 192);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parse_units),
        cmocka_unit_test(parse_rejects_junk),
        cmocka_unit_test(tolerant_floor),
        cmocka_unit_test(seed_example),
        cmocka_unit_test(other_plans),
        cmocka_unit_test(impossible_plans),
        cmocka_unit_test(error_buffer_small_or_absent),
        cmocka_unit_test(fmt_size),
        cmocka_unit_test(probe_ok),
        cmocka_unit_test(probe_errors),
        cmocka_unit_test(probe_then_plan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
