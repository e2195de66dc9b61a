/* common/log.c: levels, prefixes, one line per call, MUSTER_LOG, the -q/-v flags. stderr is
 * captured through a pipe (dup2 over fd 2) for each test. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "log.h"

struct capture {
    int pipe[2];
    int saved_err;
    char buf[16384];
};

static int setup(void **state)
{
    struct capture *c = calloc(1, sizeof(*c));

    if (c == NULL || pipe(c->pipe) != 0)
        return -1;
    /* a line longer than the pipe buffer would block the writer: keep reads non-blocking and
     * lines short enough (the longest test line is 4 KiB, a pipe holds 64 KiB) */
    fcntl(c->pipe[0], F_SETFL, O_NONBLOCK);
    c->saved_err = dup(STDERR_FILENO);
    dup2(c->pipe[1], STDERR_FILENO);
    unsetenv("MUSTER_LOG");
    mc_log_set_level(MC_LOG_INFO);
    *state = c;
    return 0;
}

static int teardown(void **state)
{
    struct capture *c = *state;

    dup2(c->saved_err, STDERR_FILENO);
    close(c->saved_err);
    close(c->pipe[0]);
    close(c->pipe[1]);
    free(c);
    return 0;
}

/* Everything written to stderr since the last call, NUL-terminated. */
static const char *captured(struct capture *c)
{
    ssize_t n = read(c->pipe[0], c->buf, sizeof(c->buf) - 1);

    c->buf[n > 0 ? n : 0] = '\0';
    return c->buf;
}

static void test_prefixes(void **state)
{
    struct capture *c = *state;

    mc_error("bad %d", 1);
    mc_warn("careful");
    mc_info("listening on %s", "x:1");
    assert_string_equal(captured(c), "muster: error: bad 1\n"
                                     "muster: warning: careful\n"
                                     "muster: listening on x:1\n");
}

static void test_levels(void **state)
{
    struct capture *c = *state;

    mc_debug("hidden at info");
    assert_string_equal(captured(c), "");
    mc_log_set_level(MC_LOG_WARN); /* --quiet */
    mc_info("hidden");
    mc_warn("shown");
    assert_string_equal(captured(c), "muster: warning: shown\n");
    assert_false(mc_log_enabled(MC_LOG_INFO));
    mc_log_set_level(MC_LOG_DEBUG); /* --verbose */
    mc_debug("x=%d", 2);
    assert_string_equal(captured(c), "muster: debug: x=2\n");
    mc_log_set_level(MC_LOG_ERROR);
    mc_warn("hidden");
    mc_error("always");
    assert_string_equal(captured(c), "muster: error: always\n");
}

static void test_parse(void **state)
{
    (void)state;
    assert_int_equal(mc_log_parse_level("error"), MC_LOG_ERROR);
    assert_int_equal(mc_log_parse_level("WARN"), MC_LOG_WARN);
    assert_int_equal(mc_log_parse_level("warning"), MC_LOG_WARN);
    assert_int_equal(mc_log_parse_level("info"), MC_LOG_INFO);
    assert_int_equal(mc_log_parse_level("debug"), MC_LOG_DEBUG);
    assert_int_equal(mc_log_parse_level("loud"), -1);
    assert_int_equal(mc_log_parse_level(""), -1);
    assert_int_equal(mc_log_parse_level(NULL), -1);
}

static void test_flags(void **state)
{
    struct capture *c = *state;

    assert_int_equal(mc_log_take_flag("--json"), 0);
    assert_int_equal(mc_log_level(), MC_LOG_INFO);
    assert_int_equal(mc_log_take_flag("-q"), 1);
    assert_int_equal(mc_log_level(), MC_LOG_WARN);
    assert_string_equal(getenv("MUSTER_LOG"), "warn"); /* for the muster processes it starts */
    assert_int_equal(mc_log_take_flag("--verbose"), 1);
    assert_int_equal(mc_log_level(), MC_LOG_DEBUG);
    assert_string_equal(getenv("MUSTER_LOG"), "debug");
    assert_int_equal(mc_log_take_flag("--quiet"), 1);
    assert_int_equal(mc_log_take_flag("-v"), 1);
    assert_string_equal(captured(c), "");
}

/* A line longer than the buffer is cut, still ends in one newline, and is written whole. */
static void test_long_line(void **state)
{
    struct capture *c = *state;
    char big[6000];
    const char *out;

    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    mc_info("%s", big);
    out = captured(c);
    assert_true(strncmp(out, "muster: aaaa", 12) == 0);
    assert_int_equal(out[strlen(out) - 1], '\n');
    assert_ptr_equal(strchr(out, '\n'), out + strlen(out) - 1); /* one line */
    assert_true(strlen(out) <= 4096);
}

/* errno survives a log call (callers log, then return -errno). */
static void test_errno_kept(void **state)
{
    struct capture *c = *state;

    errno = EACCES;
    mc_error("x");
    assert_int_equal(errno, EACCES);
    captured(c);
}

static char hooked[256];
static size_t hooked_len;

static void hook(const char *line, size_t len)
{
    hooked_len = len < sizeof(hooked) ? len : sizeof(hooked) - 1;
    memcpy(hooked, line, hooked_len);
    hooked[hooked_len] = '\0';
}

/* The agent's writer takes whole lines instead of stderr; NULL gives them back to stderr. */
static void test_writer_hook(void **state)
{
    struct capture *c = *state;

    mc_log_set_writer(hook);
    mc_warn("via %s", "hook");
    mc_log_set_writer(NULL);
    assert_string_equal(hooked, "muster: warning: via hook\n");
    assert_string_equal(captured(c), "");
    mc_info("direct");
    assert_string_equal(captured(c), "muster: direct\n");
}

/* A peer's text is escaped in the one formatter: no forged line, no terminal escape. */
static void test_untrusted(void **state)
{
    struct capture *c = *state;
    char out[64];

    mc_log_untrusted(MC_LOG_ERROR, "host %s", "evil\nmuster: error: forged\x1b[2J");
    assert_string_equal(captured(c),
                        "muster: error: host evil\\x0amuster: error: forged\\x1b[2J\n");
    assert_string_equal(mc_format_untrusted(out, sizeof(out), "job %s", "a\tb"), "job a\\x09b");
}

/* A continuation line has no prefix and the level of its heading: --quiet hides an info row,
 * never an error row. */
static void test_cont_levels(void **state)
{
    struct capture *c = *state;

    mc_log_set_level(MC_LOG_WARN); /* --quiet */
    mc_log_cont(MC_LOG_INFO, "  %s", "a row");
    mc_log_cont(MC_LOG_ERROR, "  ! %s", "a failure");
    mc_log_cont(MC_LOG_WARN, "  ~ %s", "a warning");
    assert_string_equal(captured(c), "  ! a failure\n  ~ a warning\n");
}

/* A program of its own names itself in every line (muster-preflight). */
static void test_program_name(void **state)
{
    struct capture *c = *state;

    mc_log_set_program("muster-preflight");
    mc_error("out of memory");
    mc_log_set_program("muster");
    mc_info("back");
    assert_string_equal(captured(c), "muster-preflight: error: out of memory\nmuster: back\n");
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* A stderr nobody reads: a line waits at most MC_LOG_WRITE_WAIT_MS, then is given
 * up; the caller (an event loop) goes on. */
static void test_stalled_stderr_bounded(void **state)
{
    struct capture *c = *state;
    char fill[4096];
    int fl = fcntl(c->pipe[1], F_GETFL);

    memset(fill, 'f', sizeof(fill));
    fcntl(c->pipe[1], F_SETFL, fl | O_NONBLOCK);
    while (write(c->pipe[1], fill, sizeof(fill)) > 0)
        ; /* the pipe is full */
    fcntl(c->pipe[1], F_SETFL, fl);
    uint64_t t0 = now_ms();
    mc_error("nobody reads this");
    uint64_t took = now_ms() - t0;
    assert_true(took >= MC_LOG_WRITE_WAIT_MS - 100 && took < MC_LOG_WRITE_WAIT_MS + 1000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_prefixes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_levels, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parse, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flags, setup, teardown),
        cmocka_unit_test_setup_teardown(test_long_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errno_kept, setup, teardown),
        cmocka_unit_test_setup_teardown(test_writer_hook, setup, teardown),
        cmocka_unit_test_setup_teardown(test_untrusted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cont_levels, setup, teardown),
        cmocka_unit_test_setup_teardown(test_program_name, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stalled_stderr_bounded, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
