/* Unit tests for agent/signature.c: classes, the last traceback's exception and innermost frame,
 * the stable text and hash; and agent/output.c's tail ring that feeds it. Real Python 3.11
 * tracebacks (source lines and ^^^^ markers included) as the interpreter prints them. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"
#include "output.h"
#include "signature.h"

static const char keyerror_tb[] = "step 998 loss 0.12\n"
                                  "Traceback (most recent call last):\n"
                                  "  File \"/home/u/run/train.py\", line 120, in <module>\n"
                                  "    main()\n"
                                  "  File \"/home/u/run/train.py\", line 101, in main\n"
                                  "    batch = load_batch(data, step)\n"
                                  "            ^^^^^^^^^^^^^^^^^^^^^^\n"
                                  "  File \"/home/u/run/train.py\", line 88, in load_batch\n"
                                  "    return data[step]\n"
                                  "           ~~~~^^^^^^\n"
                                  "KeyError: 1000\n";

static void derive(const char *err, const char *msg, int code, int sig, struct agent_signature *s)
{
    struct agent_sig_input in = {
        .exit_code = sig ? -1 : code, .signal = sig, .error_msg = msg, .err_tail = err};
    agent_signature_derive(&in, s);
}

static void test_keyerror(void **state)
{
    struct agent_signature s, t;
    (void)state;

    derive(keyerror_tb, NULL, 1, 0, &s);
    assert_int_equal(s.cls, RDZV_SIG_SCRIPT);
    assert_string_equal(s.exc, "KeyError");
    assert_string_equal(s.frame, "train.py:88 in load_batch");
    assert_string_equal(s.text, "KeyError at train.py:88 in load_batch");
    assert_true(rdzv_sig_retry_limited(s.cls));
    /* stable: another attempt (another step, another message, another path) signs the same */
    derive("step 5\nTraceback (most recent call last):\n"
           "  File \"/scratch/job2/train.py\", line 88, in load_batch\n"
           "    return data[step]\nKeyError: 2000\n",
           NULL, 1, 0, &t);
    assert_string_equal(t.text, s.text);
    assert_true(t.hash == s.hash);
    derive("Traceback (most recent call last):\n"
           "  File \"/x/train.py\", line 89, in load_batch\nKeyError: 1\n",
           NULL, 1, 0, &t);
    assert_string_not_equal(t.text, s.text);
    assert_false(t.hash == s.hash);
}

/* Chained exceptions, and a handled traceback printed earlier: the last one counts. */
static void test_last_traceback(void **state)
{
    char exc[AGENT_SIG_EXC_MAX], frame[AGENT_SIG_FRAME_MAX];
    static const char chained[] =
        "Traceback (most recent call last):\n"
        "  File \"a.py\", line 3, in f\n"
        "    x = d['k']\n"
        "KeyError: 'k'\n"
        "\n"
        "During handling of the above exception, another exception occurred:\n"
        "\n"
        "Traceback (most recent call last):\n"
        "  File \"a.py\", line 9, in <module>\n"
        "    f()\n"
        "  File \"a.py\", line 5, in f\n"
        "    raise ValueError('bad')\n"
        "ValueError: bad\n"
        "[W socket.cpp:601] some later log line\n";
    (void)state;

    assert_int_equal(agent_signature_traceback(chained, exc, sizeof(exc), frame, sizeof(frame)), 1);
    assert_string_equal(exc, "ValueError");
    assert_string_equal(frame, "a.py:5 in f");
    /* qualified names and exceptions without a message */
    assert_int_equal(agent_signature_traceback("Traceback (most recent call last):\n"
                                               "  File \"m.py\", line 1, in <module>\n"
                                               "StopIteration\n",
                                               exc, sizeof(exc), frame, sizeof(frame)),
                     1);
    assert_string_equal(exc, "StopIteration");
    assert_string_equal(frame, "m.py:1 in <module>");
    /* cut off before its exception line: the frame, no type */
    assert_int_equal(agent_signature_traceback("  File \"m.py\", line 7, in g\n    g()\n", exc,
                                               sizeof(exc), frame, sizeof(frame)),
                     1);
    assert_string_equal(exc, "");
    assert_string_equal(frame, "m.py:7 in g");
    assert_int_equal(
        agent_signature_traceback("no traceback here\n", exc, sizeof(exc), frame, sizeof(frame)),
        0);
    assert_string_equal(frame, "");
    assert_int_equal(agent_signature_traceback(NULL, exc, sizeof(exc), frame, sizeof(frame)), 0);
}

/* The error file names the type when the tail holds no traceback (output only in a file). */
static void test_error_file_only(void **state)
{
    struct agent_signature s;
    struct agent_sig_input in = {.exit_code = 1,
                                 .error_msg = "KeyError: 'w'",
                                 .error_stack = "Traceback (most recent call last):\n"
                                                "  File \"/a/t.py\", line 4, in step\n"
                                                "    d['w']\nKeyError: 'w'\n"};
    (void)state;

    agent_signature_derive(&in, &s);
    assert_int_equal(s.cls, RDZV_SIG_SCRIPT);
    assert_string_equal(s.text, "KeyError at t.py:4 in step");
    in.error_stack = NULL;
    agent_signature_derive(&in, &s);
    assert_string_equal(s.text, "KeyError");
    assert_int_equal(s.cls, RDZV_SIG_SCRIPT);
}

static void test_oom(void **state)
{
    struct agent_signature s;
    (void)state;

    derive("Traceback (most recent call last):\n"
           "  File \"/w/model.py\", line 40, in forward\n"
           "    y = self.fc(x)\n"
           "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; "
           "79.15 GiB total capacity)\n",
           NULL, 1, 0, &s);
    assert_int_equal(s.cls, RDZV_SIG_OOM);
    assert_string_equal(s.text, "CUDA out of memory at model.py:40 in forward");
    assert_true(rdzv_sig_retry_limited(s.cls));
    derive("", "RuntimeError: CUDA out of memory. Tried to allocate", 1, 0, &s);
    assert_int_equal(s.cls, RDZV_SIG_OOM);
}

/* NCCL and gloo errors are the network's, even inside a Python traceback: they restart. */
static void test_network(void **state)
{
    static const char *const texts[] = {
        "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1269, "
        "unhandled system error, NCCL version 2.14.3\nncclSystemError: System call failed\n",
        "ncclRemoteError: A call failed possibly due to a network error or a remote process",
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by "
        "peer [10.0.0.2]:41231\n",
        "Traceback (most recent call last):\n  File \"t.py\", line 3, in step\n"
        "RuntimeError: [pair.cc:575] Read error [10.0.0.3]:5: Connection reset by peer\n",
    };
    struct agent_signature s;
    (void)state;

    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        derive(texts[i], NULL, 1, 0, &s);
        assert_int_equal(s.cls, RDZV_SIG_NETWORK);
        assert_false(rdzv_sig_retry_limited(s.cls));
        assert_non_null(strstr(s.text, "network: "));
    }
    derive(texts[2], NULL, 1, 0, &s);
    assert_string_equal(s.text, "network: Connection closed by peer"); /* no address in it */
}

/* A kill from outside restarts whatever the tail says; a crash signal is "other". */
static void test_signals(void **state)
{
    struct agent_signature s;
    (void)state;

    derive(keyerror_tb, NULL, 0, SIGKILL, &s);
    assert_int_equal(s.cls, RDZV_SIG_SIGNAL);
    assert_string_equal(s.text, "signal 9 (SIGKILL)");
    assert_false(rdzv_sig_retry_limited(s.cls));
    derive("", NULL, 0, SIGTERM, &s);
    assert_int_equal(s.cls, RDZV_SIG_SIGNAL);
    derive("Fatal Python error: Segmentation fault\n", NULL, 0, SIGSEGV, &s);
    assert_int_equal(s.cls, RDZV_SIG_OTHER);
    assert_string_equal(s.text, "signal 11 (SIGSEGV)");
    assert_false(rdzv_sig_retry_limited(s.cls));
    /* NCCL's watchdog aborts the process: SIGABRT with the network's text */
    derive("[E ProcessGroupNCCL.cpp:828] Watchdog caught collective operation timeout: ...\n", NULL,
           0, SIGABRT, &s);
    assert_int_equal(s.cls, RDZV_SIG_NETWORK);
}

static void test_other_and_hang(void **state)
{
    struct agent_signature s;
    struct agent_sig_input in = {.exit_code = -1, .signal = SIGKILL, .hang = 1};
    (void)state;

    derive("rank 0 failing with 3\n", NULL, 3, 0, &s);
    assert_int_equal(s.cls, RDZV_SIG_OTHER);
    assert_string_equal(s.text, "exit code 3");
    assert_false(rdzv_sig_retry_limited(s.cls)); /* a bare code says too little */
    derive(NULL, NULL, 1, 0, &s);
    assert_string_equal(s.text, "exit code 1");
    agent_signature_derive(&in, &s);
    assert_int_equal(s.cls, RDZV_SIG_HANG);
    assert_string_equal(s.text, "hang");
    assert_false(rdzv_sig_retry_limited(s.cls));
}

/* Hostile text: an over-long path and function, a frame with no line number, garbage. The text
 * always fits RDZV_SIG_MAX and is never empty. */
static void test_hostile_text(void **state)
{
    char *big = malloc(3 * AGENT_OUTPUT_TAIL);
    struct agent_signature s;
    size_t n = 0;
    (void)state;

    assert_non_null(big);
    n += (size_t)sprintf(big + n, "Traceback (most recent call last):\n  File \"/");
    memset(big + n, 'd', 400);
    n += 400;
    n += (size_t)sprintf(big + n, ".py\", line 99999999999999999999, in ");
    memset(big + n, 'f', 400);
    n += 400;
    n += (size_t)sprintf(big + n, "\n");
    memset(big + n, 'E', 300);
    n += 300;
    n += (size_t)sprintf(big + n, ": x\n");
    derive(big, NULL, 1, 0, &s);
    assert_int_equal(s.cls, RDZV_SIG_SCRIPT);
    assert_true(strlen(s.text) > 0 && strlen(s.text) <= RDZV_SIG_MAX);
    derive("  File \"\n  File \"x\", line\n  File \"x\", line 1, in\nX:\n", NULL, 1, 0, &s);
    assert_true(strlen(s.text) > 0 && strlen(s.text) <= RDZV_SIG_MAX);
    free(big);
}

/* ---- agent_output_tail --------------------------------------------------------------- */

static void test_tail_ring(void **state)
{
    static struct agent_output o;
    char buf[AGENT_OUTPUT_TAIL + 16], line[64];
    size_t n;
    (void)state;

    agent_output_init(&o, -1, -1, 0);
    assert_int_equal(agent_output_tail(&o, buf, sizeof(buf)), 0);
    assert_string_equal(buf, "");
    assert_int_equal(agent_output_tail(&o, buf, 0), 0);
    agent_output_feed(&o, "one\ntwo\n", 8);
    assert_int_equal(agent_output_tail(&o, buf, sizeof(buf)), 8);
    assert_string_equal(buf, "one\ntwo\n");
    /* a small buffer: the last bytes, starting after the cut line */
    n = agent_output_tail(&o, buf, 7);
    assert_string_equal(buf, "two\n");
    assert_int_equal(n, 4);
    /* a line longer than the buffer: its last bytes rather than nothing */
    agent_output_feed(&o, "abcdefghij", 10);
    assert_int_equal(agent_output_tail(&o, buf, 5), 4);
    assert_string_equal(buf, "ghij");
    /* wrap many times over, in odd-sized pieces: the ring holds the newest bytes in order */
    for (int i = 0; i < 5000; i++) {
        int len = snprintf(line, sizeof(line), "line %d\n", i);
        agent_output_feed(&o, line, (size_t)len);
    }
    n = agent_output_tail(&o, buf, sizeof(buf));
    assert_true(n <= AGENT_OUTPUT_TAIL && n > AGENT_OUTPUT_TAIL - 16);
    assert_memory_equal(buf, "line ", 5); /* starts at a line boundary */
    assert_string_equal(buf + n - 10, "line 4999\n");
    /* one write bigger than the ring */
    {
        char *big = malloc(3 * AGENT_OUTPUT_TAIL);
        assert_non_null(big);
        memset(big, 'x', 3 * AGENT_OUTPUT_TAIL);
        memcpy(big + 3 * AGENT_OUTPUT_TAIL - 5, "\nend\n", 5);
        agent_output_feed(&o, big, 3 * AGENT_OUTPUT_TAIL);
        free(big);
    }
    assert_int_equal(agent_output_tail(&o, buf, sizeof(buf)), 4);
    assert_string_equal(buf, "end\n");
    /* kept after close: the failure reads it once the worker's pipes are gone */
    agent_output_close(&o);
    assert_int_equal(agent_output_tail(&o, buf, sizeof(buf)), 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keyerror),        cmocka_unit_test(test_last_traceback),
        cmocka_unit_test(test_error_file_only), cmocka_unit_test(test_oom),
        cmocka_unit_test(test_network),         cmocka_unit_test(test_signals),
        cmocka_unit_test(test_other_and_hang),  cmocka_unit_test(test_hostile_text),
        cmocka_unit_test(test_tail_ring),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
