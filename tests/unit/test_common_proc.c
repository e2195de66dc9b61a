/* common/proc.c: a helper program run to its end: capture, exit status, the deadline (TERM,
 * then KILL to the group), a missing program, and the nvidia-smi answer parser (gpuquery.c). */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "clock.h"
#include "gpuquery.h"
#include "proc.h"

static void test_capture(void **state)
{
    char *argv[] = {"sh", "-c", "echo hello; echo err >&2; exit 3", NULL};
    struct mc_proc_opts o = {.argv = argv, .stdio = {-1, -1, -1}, .capture = 1};
    struct mc_proc_result r;

    (void)state;
    assert_int_equal(mc_proc_run(&o, &r), 0);
    assert_string_equal(r.out, "hello\n");
    assert_true(WIFEXITED(r.status));
    assert_int_equal(mc_proc_exit_code(r.status), 3);
    assert_false(r.timed_out);
    mc_proc_result_free(&r);
}

/* Output past capture_max is read and dropped: the child never blocks on a full pipe. */
static void test_capture_limit(void **state)
{
    char *argv[] = {"sh", "-c", "head -c 200000 /dev/zero | tr '\\0' x", NULL};
    struct mc_proc_opts o = {
        .argv = argv, .stdio = {-1, -1, -1}, .capture = 1, .capture_max = 10, .timeout_ms = 10000};
    struct mc_proc_result r;

    (void)state;
    assert_int_equal(mc_proc_run(&o, &r), 0);
    assert_int_equal(r.out_len, 10);
    assert_string_equal(r.out, "xxxxxxxxxx");
    assert_int_equal(mc_proc_exit_code(r.status), 0);
    assert_false(r.timed_out);
    mc_proc_result_free(&r);
}

/* SIGTERM first; a child that ignores it gets SIGKILL grace_ms later. */
static void test_deadline(void **state)
{
    char *term[] = {"sleep", "10", NULL};
    char *stubborn[] = {"sh", "-c", "trap '' TERM; sleep 10 & wait; sleep 10", NULL};
    struct mc_proc_opts o = {
        .argv = term, .stdio = {-1, -1, -1}, .timeout_ms = 100, .grace_ms = 200};
    struct mc_proc_result r;
    uint64_t t0 = mc_mono_ms();

    (void)state;
    assert_int_equal(mc_proc_run(&o, &r), 0);
    assert_true(r.timed_out);
    assert_true(WIFSIGNALED(r.status));
    assert_int_equal(WTERMSIG(r.status), SIGTERM);
    mc_proc_result_free(&r);
    o.argv = stubborn;
    assert_int_equal(mc_proc_run(&o, &r), 0);
    assert_true(r.timed_out);
    assert_int_equal(WTERMSIG(r.status), SIGKILL);
    assert_true(mc_mono_ms() - t0 < 5000);
    mc_proc_result_free(&r);
}

static void test_missing(void **state)
{
    char *argv[] = {"/nonexistent/muster-no-such-program", NULL};
    char *onpath[] = {"muster-no-such-program-on-path", NULL};
    struct mc_proc_opts o = {.argv = argv, .stdio = {-1, -1, -1}, .capture = 1};
    struct mc_proc_result r;
    char path[256];

    (void)state;
    assert_int_equal(mc_proc_run(&o, &r), -ENOENT);
    mc_proc_result_free(&r);
    o.argv = onpath;
    assert_int_equal(mc_proc_run(&o, &r), -ENOENT);
    mc_proc_result_free(&r);
    assert_int_equal(mc_proc_find("muster-no-such-program-on-path", 1, path, sizeof(path)),
                     -ENOENT);
    assert_string_equal(path, "");
    assert_int_equal(mc_proc_find("sh", 0, path, sizeof(path)), 0);
    assert_non_null(strstr(path, "/sh"));
}

static void test_gpu_mem_parse(void **state)
{
    uint64_t b = 0;

    (void)state;
    assert_int_equal(mc_gpu_mem_parse("49140\n", &b), 0);
    assert_int_equal(b, 49140ull << 20);
    assert_int_equal(mc_gpu_mem_parse(" 143156 \r\n", &b), 0);
    assert_int_equal(b, 143156ull << 20);
    assert_int_equal(mc_gpu_mem_parse("80", &b), 0);
    assert_int_equal(mc_gpu_mem_parse("[N/A]\n", &b), -EINVAL);
    assert_int_equal(mc_gpu_mem_parse("0\n", &b), -EINVAL);
    assert_int_equal(mc_gpu_mem_parse("12 MiB\n", &b), -EINVAL);
    assert_int_equal(mc_gpu_mem_parse("", &b), -EINVAL);
    assert_int_equal(mc_gpu_mem_parse("NVIDIA-SMI has failed", &b), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capture),       cmocka_unit_test(test_capture_limit),
        cmocka_unit_test(test_deadline),      cmocka_unit_test(test_missing),
        cmocka_unit_test(test_gpu_mem_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
