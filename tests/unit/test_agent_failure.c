/* Unit tests for agent/failure.c: torchelastic error files, exit codes and the root-cause
 * summary. Error files are written into a private temp directory. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "failure.h"

struct fx {
    char dir[64];
    char path[128]; /* dir/error.json, written by write_file */
    char text[RDZV_TEXT_MAX + 1];
    struct rdzv_failure f;
    char *out; /* summary text from open_memstream */
    size_t out_len;
};

static int setup(void **state)
{
    struct fx *fx = calloc(1, sizeof(*fx));
    if (fx == NULL)
        return -1;
    harness_mkdtemp(fx->dir, sizeof(fx->dir), "failure");
    snprintf(fx->path, sizeof(fx->path), "%s/error.json", fx->dir);
    fx->f = (struct rdzv_failure){.round = 1,
                                  .rank = 1,
                                  .local_rank = 1,
                                  .exit_code = 7,
                                  .signal = 0,
                                  .time_ms = 1700000000123ull};
    snprintf(fx->f.host, sizeof(fx->f.host), "node-a");
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fx *fx = *state;
    unlink(fx->path);
    rmdir(fx->dir);
    free(fx->out);
    free(fx);
    return 0;
}

static void write_file(struct fx *fx, const char *content)
{
    FILE *f = fopen(fx->path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(content, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

static int read_message(struct fx *fx, const char *content)
{
    write_file(fx, content);
    memset(fx->text, 'x', sizeof(fx->text) - 1);
    fx->text[sizeof(fx->text) - 1] = '\0';
    return agent_error_file_message(fx->path, fx->text, sizeof(fx->text));
}

/* ---- error files ----------------------------------------------------------------------------- */

static void test_torchelastic_format(void **state)
{
    struct fx *fx = *state;
    assert_int_equal(
        read_message(fx, "{\"message\": {\"message\": \"ValueError: boom\\nTraceback (most recent "
                         "call last):\\n  File \\\"train.py\\\", line 3\", \"extraInfo\": "
                         "{\"py_callstack\": \"Traceback ...\", \"timestamp\": \"1700000000\"}}}"),
        0);
    assert_string_equal(fx->text, "ValueError: boom");
}

static void test_plain_message(void **state)
{
    struct fx *fx = *state;
    assert_int_equal(read_message(fx, "{\"message\": \"plain\"}\n"), 0);
    assert_string_equal(fx->text, "plain");
    assert_int_equal(read_message(fx, "{\"message\": \"\"}"), 0);
    assert_string_equal(fx->text, "");
    assert_int_equal(read_message(fx, "{\"message\": \"caf\\u00e9 \\u2603\"}"), 0);
    assert_string_equal(fx->text, "caf\xc3\xa9 \xe2\x98\x83");
}

static void test_missing_file(void **state)
{
    struct fx *fx = *state;
    strcpy(fx->text, "stale");
    assert_int_equal(agent_error_file_message(fx->path, fx->text, sizeof(fx->text)), -ENOENT);
    assert_string_equal(fx->text, "");
    strcpy(fx->text, "stale");
    assert_int_equal(agent_error_file_message("", fx->text, sizeof(fx->text)), -ENOENT);
    assert_string_equal(fx->text, "");
    assert_int_equal(agent_error_file_message(NULL, fx->text, sizeof(fx->text)), -ENOENT);
    assert_string_equal(fx->text, "");
}

/* Each of docs (NULL-terminated) is refused with -EINVAL and leaves no message behind. */
static void assert_no_message(struct fx *fx, const char *const *docs)
{
    for (; *docs != NULL; docs++) {
        assert_int_equal(read_message(fx, *docs), -EINVAL);
        assert_string_equal(fx->text, "");
    }
}

static void test_invalid_json(void **state)
{
    static const char *const docs[] = {"{not json", "{\"message\": \"unterminated",
                                       "Traceback (most recent call last):\n", NULL};
    assert_no_message(*state, docs);
}

/* The file exists but a crashed worker left it empty: it holds no message (-EINVAL), it is
 * not missing (-ENOENT). */
static void test_empty_file(void **state)
{
    struct fx *fx = *state;
    int rc = read_message(fx, "");
    if (rc != -EINVAL)
        print_error("empty error file: got %d, expected -EINVAL (%d)\n", rc, -EINVAL);
    assert_int_equal(rc, -EINVAL);
    assert_string_equal(fx->text, "");
}

static void test_no_message(void **state)
{
    static const char *const docs[] = {"{\"other\": \"x\"}",
                                       "{}",
                                       "{\"message\": 5}",
                                       "{\"message\": null}",
                                       "{\"message\": {\"extraInfo\": {}}}",
                                       "{\"message\": {\"message\": [\"x\"]}}",
                                       "[\"message\"]",
                                       NULL};
    assert_no_message(*state, docs);
}

static void test_message_truncated(void **state)
{
    struct fx *fx = *state;
    char small[8];
    write_file(fx, "{\"message\": \"abcdefghijkl\\nsecond\"}");
    assert_int_equal(agent_error_file_message(fx->path, small, sizeof(small)), 0);
    assert_string_equal(small, "abcdefg");
    write_file(fx, "{\"message\": \"abc\\ndefghijkl\"}");
    assert_int_equal(agent_error_file_message(fx->path, small, sizeof(small)), 0);
    assert_string_equal(small, "abc");
}

/* ---- exit codes and descriptions ------------------------------------------------------------ */

static void test_exit_code(void **state)
{
    /* exit code, signal -> the launcher's exit code: a code above 255 or -1 (none) gives 1, a
     * signal gives 128 + it */
    static const struct {
        int exit_code, signal, want;
    } cases[] = {{7, 0, 7},  {255, 0, 255}, {1, 0, 1},     {256, 0, 1}, {300, 0, 1},
                 {-1, 0, 1}, {-1, 9, 137},  {-1, 15, 143}, {-1, 6, 134}};
    struct fx *fx = *state;
    struct rdzv_failure *f = &fx->f;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        f->exit_code = cases[i].exit_code;
        f->signal = cases[i].signal;
        assert_int_equal(agent_failure_exit_code(f), cases[i].want);
    }
}

static void test_describe(void **state)
{
    struct fx *fx = *state;
    char buf[256];

    fx->f.exit_code = 3;
    agent_failure_describe(&fx->f, buf, sizeof(buf));
    assert_string_equal(buf, "exited with code 3");

    fx->f.exit_code = -1;
    fx->f.signal = 9;
    agent_failure_describe(&fx->f, buf, sizeof(buf));
    assert_string_equal(buf, "was killed by signal 9 (SIGKILL)");
    fx->f.signal = 11;
    agent_failure_describe(&fx->f, buf, sizeof(buf));
    assert_string_equal(buf, "was killed by signal 11 (SIGSEGV)");

    /* not a worker (rank -1): the reason text */
    fx->f.signal = 0;
    fx->f.rank = -1;
    snprintf(fx->f.text, sizeof(fx->f.text), "node node-b stopped sending heartbeats");
    agent_failure_describe(&fx->f, buf, sizeof(buf));
    assert_string_equal(buf, "node node-b stopped sending heartbeats");

    /* a short buffer stays NUL-terminated */
    char small[8];
    fx->f.rank = 0;
    fx->f.exit_code = 3;
    agent_failure_describe(&fx->f, small, sizeof(small));
    assert_string_equal(small, "exited ");
}

/* ---- the summary ---------------------------------------------------------------------------- */

static const char *summary(struct fx *fx, const char *run_id, unsigned restarts,
                           const char *error_file)
{
    free(fx->out);
    fx->out = NULL;
    FILE *m = open_memstream(&fx->out, &fx->out_len);
    assert_non_null(m);
    agent_failure_print_summary(m, run_id, restarts, &fx->f, error_file);
    assert_int_equal(fclose(m), 0);
    return fx->out;
}

static void assert_has(const char *text, const char *needle)
{
    if (strstr(text, needle) == NULL)
        print_error("missing \"%s\" in:\n%s", needle, text);
    assert_non_null(strstr(text, needle));
}

static void test_summary_exit_code(void **state)
{
    struct fx *fx = *state;
    snprintf(fx->f.text, sizeof(fx->f.text), "ValueError: boom");
    const char *s = summary(fx, "job42", 2, "/logs/job42/1/error.json");
    assert_string_equal(s, "muster: job job42 failed after 2 restart(s)\n"
                           "muster: root cause (first observed failure):\n"
                           "muster:   rank       : 1 (local_rank 1)\n"
                           "muster:   host       : node-a\n"
                           "muster:   exit code  : 7\n"
                           "muster:   time       : 2023-11-14T22:13:20Z\n"
                           "muster:   error file : /logs/job42/1/error.json\n"
                           "muster:   message    : ValueError: boom\n");
    assert_has(s, "root cause");
    assert_null(strstr(s, "signal"));
}

static void test_summary_signal(void **state)
{
    struct fx *fx = *state;
    fx->f.rank = 3;
    fx->f.local_rank = 0;
    fx->f.exit_code = -1;
    fx->f.signal = 9;
    fx->f.time_ms = 0;
    const char *s = summary(fx, "j", 0, "");
    assert_has(s, "muster: job j failed after 0 restart(s)\n");
    assert_has(s, "root cause");
    assert_has(s, "muster:   rank       : 3 (local_rank 0)\n");
    assert_has(s, "muster:   signal     : 9 (SIGKILL)\n");
    assert_has(s, "muster:   time       : 1970-01-01T00:00:00Z\n");
    assert_null(strstr(s, "exit code"));
    assert_null(strstr(s, "error file"));
    /* no error file message: the hint about @record */
    assert_has(s, "muster:   message    : none (decorate the entry point with "
                  "torch.distributed.elastic.multiprocessing.errors.record");
}

/* The summary of a failure that no worker rank had (rank -1): host, time and message only; the
 * failure happened at 2023-11-14T22:13:20Z and the job had 1 restart. */
static void assert_node_summary(struct fx *fx, const char *host, const char *message)
{
    char want[1024];

    snprintf(want, sizeof(want),
             "muster: job job failed after 1 restart(s)\n"
             "muster: root cause (first observed failure):\n"
             "muster:   host       : %s\n"
             "muster:   time       : 2023-11-14T22:13:20Z\n"
             "muster:   message    : %s\n",
             host, message);
    assert_string_equal(summary(fx, "job", 1, NULL), want);
}

static void test_summary_not_a_worker(void **state)
{
    struct fx *fx = *state;
    fx->f.rank = -1;
    fx->f.local_rank = -1;
    fx->f.exit_code = 0;
    snprintf(fx->f.host, sizeof(fx->f.host), "node-b");
    snprintf(fx->f.text, sizeof(fx->f.text), "lost node node-b");
    assert_node_summary(fx, "node-b", "lost node node-b");
}

/* Host and text come from other nodes: a newline cannot forge a summary line, an ESC sequence
 * cannot reach the terminal, invalid UTF-8 is shown as bytes. */
static void test_summary_escaped(void **state)
{
    struct fx *fx = *state;
    char buf[256];

    fx->f.rank = -1;
    snprintf(fx->f.host, sizeof(fx->f.host), "evil\nmuster:   host       : trusted\x1b[2J");
    snprintf(fx->f.text, sizeof(fx->f.text), "lost\r\nmuster: job done \xff\xc3\xa9");
    assert_node_summary(fx, "evil\\x0amuster:   host       : trusted\\x1b[2J",
                        "lost\\x0d\\x0amuster: job done \\xff\xc3\xa9");
    agent_failure_describe(&fx->f, buf, sizeof(buf));
    assert_string_equal(buf, "lost\\x0d\\x0amuster: job done \\xff\xc3\xa9");
}

/* The error file's call stack for the signature: its last bytes (the innermost frames). */
static void test_callstack(void **state)
{
    struct fx *fx = *state;
    char stack[32];

    write_file(fx, "{\"message\": {\"message\": \"KeyError: 'k'\", \"extraInfo\": "
                   "{\"py_callstack\": \"Traceback (most recent call last):\\n  File "
                   "\\\"/a/t.py\\\", line 4, in step\\nKeyError: 'k'\\n\"}}}");
    assert_int_equal(
        agent_error_file_read(fx->path, fx->text, sizeof(fx->text), stack, sizeof(stack)), 0);
    assert_string_equal(fx->text, "KeyError: 'k'");
    assert_string_equal(stack, " line 4, in step\nKeyError: 'k'\n"); /* the last 31 */
    /* no extraInfo, or a plain message: no stack */
    write_file(fx, "{\"message\": \"boom\"}");
    assert_int_equal(
        agent_error_file_read(fx->path, fx->text, sizeof(fx->text), stack, sizeof(stack)), 0);
    assert_string_equal(stack, "");
}

/* The server's verdict: exit 6 and one line naming the signature, escaped (a worker's text). */
static void test_not_retryable(void **state)
{
    struct fx *fx = *state;
    char *text = NULL;
    size_t len = 0;
    FILE *m;

    fx->f.sig_class = RDZV_SIG_SCRIPT;
    snprintf(fx->f.sig, sizeof(fx->f.sig), "KeyError\nmuster: job done\x1b[2J");
    assert_int_equal(agent_failure_job_exit_code(&fx->f), 7); /* the worker's, without the flag */
    fx->f.flags = RDZV_FAILURE_NOT_RETRYABLE;
    assert_int_equal(agent_failure_job_exit_code(&fx->f), 6);
    m = open_memstream(&text, &len);
    assert_non_null(m);
    agent_failure_print_not_retryable(m, &fx->f, 2);
    assert_int_equal(fclose(m), 0);
    assert_string_equal(text, "muster: not retrying: the same failure (KeyError\\x0amuster: job "
                              "done\\x1b[2J) ended 2 attempts in a row with no newer checkpoint "
                              "(--max-same-failure 2); exit 6\n");
    free(text);
    assert_has(summary(fx, "job", 1, NULL),
               "muster:   signature  : KeyError\\x0amuster: job done\\x1b[2J (script)\n");
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_torchelastic_format), T(test_plain_message),  T(test_missing_file),
        T(test_invalid_json),        T(test_empty_file),     T(test_no_message),
        T(test_message_truncated),   T(test_exit_code),      T(test_describe),
        T(test_summary_exit_code),   T(test_summary_signal), T(test_summary_not_a_worker),
        T(test_summary_escaped),     T(test_callstack),      T(test_not_retryable),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
