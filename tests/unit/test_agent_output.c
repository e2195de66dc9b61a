/* Unit tests for agent/output.c: raw bytes to the log file, "[rankN]: " lines and '\r' redraws
 * to the console, held partial lines, prefix templates, filter files.
 * The console is a pipe enlarged to 1 MiB, so the writes never block a test that reads only
 * afterwards; the log file is a temp file re-read by path. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "output.h"
#include "sink.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#define PIPE_SIZE (1024 * 1024)
#define RANK 3
#define PFX "[rank3]: "

struct fx {
    int pipe[2];
    char path[64];
    struct agent_output o;
    char *got; /* last console read, owned */
    size_t got_len;
    char *want, *buf; /* scratch, owned: freed in teardown even when an assertion fails */
};

static int setup(void **state)
{
    struct fx *fx = calloc(1, sizeof(*fx));
    if (fx == NULL)
        return -1;
    fx->pipe[0] = fx->pipe[1] = -1;
    if (pipe2(fx->pipe, O_CLOEXEC) != 0)
        goto fail;
    if (fcntl(fx->pipe[1], F_SETPIPE_SZ, PIPE_SIZE) < PIPE_SIZE)
        goto fail;
    if (fcntl(fx->pipe[0], F_SETFL, O_NONBLOCK) != 0)
        goto fail;
    snprintf(fx->path, sizeof(fx->path), "/tmp/muster-output-XXXXXX");
    int fd = mkstemp(fx->path);
    if (fd < 0)
        goto fail;
    agent_output_init(&fx->o, fx->pipe[1], fd, RANK);
    *state = fx;
    return 0;
fail:
    if (fx->pipe[0] >= 0)
        close(fx->pipe[0]);
    if (fx->pipe[1] >= 0)
        close(fx->pipe[1]);
    free(fx);
    return -1;
}

static int teardown(void **state)
{
    struct fx *fx = *state;
    agent_output_close(&fx->o);
    if (fx->pipe[0] >= 0)
        close(fx->pipe[0]);
    if (fx->pipe[1] >= 0)
        close(fx->pipe[1]);
    unlink(fx->path);
    free(fx->got);
    free(fx->want);
    free(fx->buf);
    free(fx);
    return 0;
}

/* Everything written to the console so far (the pipe read end is non-blocking). */
static const char *console(struct fx *fx)
{
    size_t cap = 2 * PIPE_SIZE;
    free(fx->got);
    fx->got = malloc(cap + 1);
    assert_non_null(fx->got);
    fx->got_len = 0;
    for (;;) {
        ssize_t n = read(fx->pipe[0], fx->got + fx->got_len, cap - fx->got_len);
        if (n > 0) {
            fx->got_len += (size_t)n;
            continue;
        }
        assert_true(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
        break;
    }
    fx->got[fx->got_len] = '\0';
    return fx->got;
}

/* The log file's bytes, in fx->buf. */
static char *file_contents(struct fx *fx, size_t *len)
{
    FILE *f = fopen(fx->path, "rb");
    assert_non_null(f);
    free(fx->buf);
    char *buf = fx->buf = malloc(4 * AGENT_OUTPUT_LINE_MAX);
    assert_non_null(buf);
    *len = fread(buf, 1, 4 * AGENT_OUTPUT_LINE_MAX - 1, f);
    buf[*len] = '\0';
    fclose(f);
    return buf;
}

static void feed(struct fx *fx, const char *s)
{
    agent_output_feed(&fx->o, s, strlen(s));
}

static void test_one_line(void **state)
{
    struct fx *fx = *state;
    feed(fx, "hello\n");
    assert_string_equal(console(fx), PFX "hello\n");
}

static void test_partial_line_in_pieces(void **state)
{
    struct fx *fx = *state;
    feed(fx, "hel");
    assert_string_equal(console(fx), "");
    feed(fx, "lo wo");
    assert_string_equal(console(fx), "");
    feed(fx, "rld\n");
    assert_string_equal(console(fx), PFX "hello world\n");
}

static void test_several_lines_in_one_piece(void **state)
{
    struct fx *fx = *state;
    feed(fx, "a\nbb\n\nccc\n");
    assert_string_equal(console(fx), PFX "a\n" PFX "bb\n" PFX "\n" PFX "ccc\n");
}

static void test_pending_then_several_lines(void **state)
{
    struct fx *fx = *state;
    feed(fx, "x");
    feed(fx, "y\nz\nta");
    assert_string_equal(console(fx), PFX "xy\n" PFX "z\n");
    feed(fx, "il\n");
    assert_string_equal(console(fx), PFX "tail\n");
}

static void test_flush_adds_newline(void **state)
{
    struct fx *fx = *state;
    agent_output_flush(&fx->o); /* nothing pending: nothing written */
    assert_string_equal(console(fx), "");
    feed(fx, "done\nno newline");
    agent_output_flush(&fx->o);
    assert_string_equal(console(fx), PFX "done\n" PFX "no newline\n");
    agent_output_flush(&fx->o);
    assert_string_equal(console(fx), "");
    /* close flushes too */
    feed(fx, "last");
    agent_output_close(&fx->o);
    assert_string_equal(console(fx), PFX "last\n");
}

static void test_prefix_has_rank(void **state)
{
    struct fx *fx = *state;
    agent_output_close(&fx->o);
    agent_output_init(&fx->o, fx->pipe[1], -1, 12);
    feed(fx, "x\n");
    assert_string_equal(console(fx), "[rank12]: x\n");
}

/* PyTorch 2.x's own "[rank3]:" prefix is not doubled; another rank's, or text that
 * merely contains it, keeps ours. */
static void test_torch_prefix_not_doubled(void **state)
{
    struct fx *fx = *state;
    agent_output_close(&fx->o);
    agent_output_init(&fx->o, fx->pipe[1], -1, 3);
    feed(fx, "[rank3]:[W1202 05:00:00.000 ProcessGroupNCCL.cpp:1] Warning\n");
    assert_string_equal(console(fx),
                        "[rank3]:[W1202 05:00:00.000 ProcessGroupNCCL.cpp:1] Warning\n");
    feed(fx, "[rank30]: x\n[rank1]:y\nsee [rank3]:\n");
    assert_string_equal(console(fx),
                        "[rank3]: [rank30]: x\n[rank3]: [rank1]:y\n[rank3]: see [rank3]:\n");
}

/* '\r' ends an update too (progress bars): each redraw goes out at once with the prefix. */
static void test_carriage_return_updates(void **state)
{
    struct fx *fx = *state;
    feed(fx, "p1\r");
    assert_string_equal(console(fx), PFX "p1\r");
    feed(fx, "p2\rp3\r");
    assert_string_equal(console(fx), PFX "p2\r" PFX "p3\r");
    feed(fx, "\r"); /* a redraw that starts with '\r' (tqdm's way): nothing to show yet */
    assert_string_equal(console(fx), "");
    feed(fx, "done\n");
    assert_string_equal(console(fx), PFX "done\n");
}

/* Another worker writing while our redraw is on the console: ours is ended first, never
 * overwritten; the same for a partial line shown at close. */
static void test_other_worker_ends_our_line(void **state)
{
    struct fx *fx = *state;
    struct agent_output other;
    agent_output_init(&other, fx->pipe[1], -1, 4);
    feed(fx, "bar 10%\r");
    agent_output_feed(&other, "hello\n", 6);
    assert_string_equal(console(fx), PFX "bar 10%\r\n[rank4]: hello\n");
    feed(fx, "bar 20%\r");
    agent_output_close(&fx->o); /* a cut-short bar stays visible */
    agent_output_feed(&other, "bye\n", 4);
    agent_output_close(&other);
    assert_string_equal(console(fx), PFX "bar 20%\r\n[rank4]: bye\n");
}

/* With a loop, a partial line is shown after AGENT_OUTPUT_HOLD_MS; its rest follows without a
 * second prefix, unless another worker wrote in between. */
static void test_partial_line_shown_after_hold(void **state)
{
    struct fx *fx = *state;
    struct agent_output other;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    agent_output_configure(&fx->o, &loop, NULL, 0, 0);
    agent_output_init(&other, fx->pipe[1], -1, 4);
    agent_output_configure(&other, &loop, NULL, 1, 0);
    uint64_t start = uv_now(&loop);
    feed(fx, "epoch 1: ");
    assert_string_equal(console(fx), "");
    while (fx->o.shown == 0 && uv_now(&loop) - start < 5000)
        uv_run(&loop, UV_RUN_ONCE);
    assert_string_equal(console(fx), PFX "epoch 1: ");
    assert_true(uv_now(&loop) - start >= AGENT_OUTPUT_HOLD_MS);
    feed(fx, "ok\nepoch 2: ");
    assert_string_equal(console(fx), "ok\n");
    while (fx->o.shown == 0 && uv_now(&loop) - start < 10000)
        uv_run(&loop, UV_RUN_ONCE);
    agent_output_feed(&other, "interrupt\n", 10);
    feed(fx, "ok\n");
    assert_string_equal(console(fx), PFX "epoch 2: \n[rank4]: interrupt\n" PFX "ok\n");
    agent_output_close(&other);
    agent_output_close(&fx->o);
    uv_run(&loop, UV_RUN_DEFAULT); /* the shared timer closes with the last output */
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* A lone newline right after our cut line is not an extra empty line. */
static void test_cut_line_rest_is_only_newline(void **state)
{
    struct fx *fx = *state;
    struct agent_output other;
    agent_output_init(&other, fx->pipe[1], -1, 4);
    feed(fx, "bar\r");
    agent_output_feed(&other, "x\n", 2);
    feed(fx, "\n");
    agent_output_close(&other);
    assert_string_equal(console(fx), PFX "bar\r\n[rank4]: x\n");
}

static void test_prefix_template(void **state)
{
    (void)state;
    char buf[64];
    agent_output_prefix("[${role_name}${local_rank}]:", "trainer", 9, 1, buf, sizeof(buf));
    assert_string_equal(buf, "[trainer1]:");
    agent_output_prefix("$rank/$local_rank $$rank ${nope} $ranks $ $5 ${rank", "r", 12, 3, buf,
                        sizeof(buf));
    assert_string_equal(buf, "12/3 $rank ${nope} $ranks $ $5 ${rank");
    assert_int_equal(agent_output_prefix("${rank}${rank}${rank}", "r", 123456, 0, buf, 8), 7);
    assert_string_equal(buf, "1234561");
}

static void test_template_and_no_prefix_cfg(void **state)
{
    struct fx *fx = *state;
    struct agent_output_cfg cfg = {.prefix_template = "${role_name}:${rank}> ", .role = "w"};
    agent_output_close(&fx->o);
    agent_output_init(&fx->o, fx->pipe[1], -1, RANK);
    agent_output_configure(&fx->o, NULL, &cfg, 0, 0);
    feed(fx, "a\n");
    assert_string_equal(console(fx), "w:3> a\n");
    cfg = (struct agent_output_cfg){.prefix_template = "", .role = "w"};
    agent_output_close(&fx->o);
    agent_output_init(&fx->o, fx->pipe[1], -1, RANK);
    agent_output_configure(&fx->o, NULL, &cfg, 0, 0);
    feed(fx, "b\n");
    assert_string_equal(console(fx), PFX "b\n"); /* empty template: unset, as in torchrun */
    cfg.no_prefix = 1;
    agent_output_close(&fx->o);
    agent_output_init(&fx->o, fx->pipe[1], -1, RANK);
    agent_output_configure(&fx->o, NULL, &cfg, 0, 0);
    feed(fx, "c\rd\n");
    assert_string_equal(console(fx), "c\rd\n");
}

static void test_split_filters(void **state)
{
    (void)state;
    char **v;
    assert_int_equal(agent_output_split_filters("a,b,,c,,,d", &v), 0);
    assert_string_equal(v[0], "a");
    assert_string_equal(v[1], "b,c,");
    assert_string_equal(v[2], "d");
    assert_null(v[3]);
    free(v);
    assert_int_equal(agent_output_split_filters("", &v), 0);
    assert_null(v[0]);
    free(v);
    assert_int_equal(agent_output_split_filters(",x,,", &v), 0);
    assert_string_equal(v[0], "x,");
    assert_null(v[1]);
    free(v);
}

/* Lines containing any filter also go, with their prefix, to the filter file. */
static void test_filter_file(void **state)
{
    struct fx *fx = *state;
    const char *const filters[] = {"loss", "err,or", NULL};
    struct agent_output_cfg cfg = {.filters = {filters, NULL}, .filter_path = {fx->path, NULL}};
    agent_output_close(&fx->o);
    agent_output_init(&fx->o, fx->pipe[1], -1, RANK);
    agent_output_configure(&fx->o, NULL, &cfg, 0, 0);
    feed(fx, "step 1 loss 0.5\nnothing\nan err,or\rlo");
    feed(fx, "ss at end");
    agent_output_close(&fx->o);
    size_t len;
    assert_string_equal(file_contents(fx, &len),
                        PFX "step 1 loss 0.5\n" PFX "an err,or\n" PFX "loss at end\n");
}

/* Expected console text for a line of n 'a's (plus '\n') split at AGENT_OUTPUT_LINE_MAX. */
static char *split_expect(struct fx *fx, size_t n, size_t *len)
{
    size_t parts = n / AGENT_OUTPUT_LINE_MAX + 1;
    free(fx->want);
    char *e = fx->want = malloc(n + parts * (strlen(PFX) + 1) + 1), *p = e;
    assert_non_null(e);
    for (size_t left = n; left > 0 || p == e;) {
        size_t k = left < AGENT_OUTPUT_LINE_MAX ? left : AGENT_OUTPUT_LINE_MAX;
        memcpy(p, PFX, strlen(PFX));
        p += strlen(PFX);
        memset(p, 'a', k);
        p += k;
        *p++ = '\n';
        left -= k;
    }
    *p = '\0';
    *len = (size_t)(p - e);
    return e;
}

static void assert_console_is(struct fx *fx, const char *want, size_t want_len)
{
    console(fx);
    if (fx->got_len != want_len || memcmp(fx->got, want, want_len) != 0) {
        size_t lines = 0;
        for (size_t i = 0; i < fx->got_len; i++)
            lines += fx->got[i] == '\n';
        print_error("console has %zu bytes in %zu lines, expected %zu bytes\n", fx->got_len, lines,
                    want_len);
    }
    assert_int_equal(fx->got_len, want_len);
    assert_memory_equal(fx->got, want, want_len);
}

/* A line longer than the maximum, arriving in pieces: split, each part prefixed. */
static void test_long_line_in_pieces(void **state)
{
    struct fx *fx = *state;
    size_t n = AGENT_OUTPUT_LINE_MAX + 10, len;
    char *chunk = fx->buf = malloc(1000);
    assert_non_null(chunk);
    memset(chunk, 'a', 1000);
    for (size_t done = 0; done < n;) {
        size_t k = n - done < 1000 ? n - done : 1000;
        agent_output_feed(&fx->o, chunk, k);
        done += k;
    }
    feed(fx, "\n");
    char *want = split_expect(fx, n, &len);
    assert_console_is(fx, want, len);
}

/* The same line arriving in one read must be split the same way. */
static void test_long_line_in_one_piece(void **state)
{
    struct fx *fx = *state;
    size_t n = 2 * AGENT_OUTPUT_LINE_MAX + 10, len;
    char *line = fx->buf = malloc(n + 1);
    assert_non_null(line);
    memset(line, 'a', n);
    line[n] = '\n';
    agent_output_feed(&fx->o, line, n + 1);
    char *want = split_expect(fx, n, &len);
    assert_console_is(fx, want, len);
}

/* A long line without a newline: full parts go out at once, the rest on flush. */
static void test_long_partial_line_flushed(void **state)
{
    struct fx *fx = *state;
    size_t n = AGENT_OUTPUT_LINE_MAX + 5, len;
    char *line = fx->buf = malloc(n);
    assert_non_null(line);
    memset(line, 'a', n);
    agent_output_feed(&fx->o, line, n);
    char *want = split_expect(fx, AGENT_OUTPUT_LINE_MAX, &len);
    assert_console_is(fx, want, len);
    agent_output_flush(&fx->o);
    assert_string_equal(console(fx), PFX "aaaaa\n");
}

/* A line of exactly AGENT_OUTPUT_LINE_MAX characters is one console line, not that line plus
 * an empty "[rankN]: " line made of its newline. */
static void test_line_of_exactly_max(void **state)
{
    struct fx *fx = *state;
    size_t n = AGENT_OUTPUT_LINE_MAX, len;
    char *line = fx->buf = malloc(n);
    assert_non_null(line);
    memset(line, 'a', n);
    feed(fx, "a");
    agent_output_feed(&fx->o, line, n - 1);
    feed(fx, "\n");
    char *want = split_expect(fx, n, &len);
    assert_console_is(fx, want, len);
}

static void test_file_gets_raw_bytes(void **state)
{
    struct fx *fx = *state;
    static const char pieces[][16] = {"par", "tial\nline", "s\n\n", "no end"};
    char want[64] = "";
    for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++) {
        feed(fx, pieces[i]);
        strcat(want, pieces[i]);
    }
    agent_output_feed(&fx->o, "\0bin\r", 5);
    agent_output_close(&fx->o); /* closes the file; adds a newline on the console only */
    size_t len;
    char *got = file_contents(fx, &len);
    size_t wl = strlen(want);
    assert_int_equal(len, wl + 5);
    assert_memory_equal(got, want, wl);
    assert_memory_equal(got + wl, "\0bin\r", 5);
    console(fx);
    static const char cons[] = PFX "partial\n" PFX "lines\n" PFX "\n" PFX "no end\0bin\r\n";
    assert_int_equal(fx->got_len, sizeof(cons) - 1);
    assert_memory_equal(fx->got, cons, sizeof(cons) - 1);
}

static void test_no_console(void **state)
{
    struct fx *fx = *state;
    agent_output_close(&fx->o);
    int fd = open(fx->path, O_WRONLY | O_TRUNC | O_CLOEXEC);
    assert_true(fd >= 0);
    agent_output_init(&fx->o, -1, fd, 0);
    feed(fx, "one\ntwo");
    agent_output_flush(&fx->o);
    agent_output_close(&fx->o);
    assert_string_equal(console(fx), "");
    size_t len;
    char *got = file_contents(fx, &len);
    assert_string_equal(got, "one\ntwo");
}

static void test_no_file(void **state)
{
    struct fx *fx = *state;
    agent_output_close(&fx->o);
    agent_output_init(&fx->o, fx->pipe[1], -1, RANK);
    feed(fx, "only console\n");
    assert_string_equal(console(fx), PFX "only console\n");
}

/* The console reader going away turns console output off; the agent lives on. */
static void test_closed_console_epipe(void **state)
{
    struct fx *fx = *state;
    void (*old)(int) = signal(SIGPIPE, SIG_IGN);
    close(fx->pipe[0]);
    fx->pipe[0] = -1;
    feed(fx, "lost\n");
    assert_int_equal(fx->o.console_fd, -1);
    feed(fx, "still ");
    feed(fx, "logged\n");
    agent_output_close(&fx->o);
    signal(SIGPIPE, old);
    size_t len;
    char *got = file_contents(fx, &len);
    assert_string_equal(got, "lost\nstill logged\n");
}

static void test_write_all(void **state)
{
    struct fx *fx = *state;
    assert_int_equal(agent_write_all(fx->pipe[1], "abc", 3), 0);
    assert_int_equal(agent_write_all(fx->pipe[1], "", 0), 0);
    assert_string_equal(console(fx), "abc");
    void (*old)(int) = signal(SIGPIPE, SIG_IGN);
    close(fx->pipe[0]);
    fx->pipe[0] = -1;
    assert_int_equal(agent_write_all(fx->pipe[1], "x", 1), -EPIPE);
    signal(SIGPIPE, old);
    assert_int_equal(agent_write_all(-1, "x", 1), -EBADF);
}

/* Documented: close accepts a zeroed struct. Such a struct must not close fd 0. */
static void test_close_zeroed_struct(void **state)
{
    (void)state;
    struct agent_output z;
    int saved = dup(0);
    int null_fd = -1;
    if (saved < 0) { /* stdin closed: give fd 0 something for the test */
        null_fd = open("/dev/null", O_RDONLY);
        assert_int_equal(null_fd, 0);
    }
    memset(&z, 0, sizeof(z));
    agent_output_close(&z);
    int still_open = fcntl(0, F_GETFD) != -1;
    if (saved >= 0) {
        dup2(saved, 0);
        close(saved);
    } else if (still_open) {
        close(0);
    }
    if (!still_open)
        print_error("agent_output_close() on a zeroed struct closed fd 0\n");
    assert_true(still_open);
    agent_output_close(NULL);
}

/* ---- the asynchronous, bounded console (sink.h, agent_output_console_start) --------- */

#define BUDGET (64 * 1024)
#define SMALL_PIPE 4096

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The console's reader, a thread that reads only while `reading` is set: the test decides when
 * the console stalls. Everything read lands in buf (never asserts: it is not the test thread). */
struct reader {
    int fd;
    atomic_int reading, stop;
    char *buf;
    size_t len, cap;
    pthread_t t;
};

static void *reader_main(void *arg)
{
    struct reader *r = arg;
    while (!r->stop) {
        if (!r->reading || r->len == r->cap) {
            usleep(1000);
            continue;
        }
        ssize_t n = read(r->fd, r->buf + r->len, r->cap - r->len);
        if (n > 0)
            r->len += (size_t)n;
        else if (n == 0)
            break;
        else
            usleep(1000); /* EAGAIN: the read end is non-blocking */
    }
    return NULL;
}

/* The writer stuck in write() gets EPIPE and is done with the fd once its queue is empty:
 * only then may teardown close the write end. */
static void close_reader(struct fx *fx)
{
    close(fx->pipe[0]);
    fx->pipe[0] = -1;
    assert_int_equal(mc_sink_drain_all(5000) > 0, 1); /* the dropped bytes stay counted */
}

static void on_resume(struct agent_output *o, void *data)
{
    (void)o;
    (*(int *)data)++;
}

/* Feeds numbered lines until the output pauses; returns the next number. Fails the test when
 * far more than the budget goes in without a pause (the backpressure would be missing). */
static unsigned feed_until_paused(struct fx *fx, unsigned next)
{
    char line[32];
    size_t fed = 0;
    for (;;) {
        int n = snprintf(line, sizeof(line), "%08u\n", next++);
        fed += (size_t)n;
        if (agent_output_feed(&fx->o, line, (size_t)n))
            return next;
        assert_true(fed < 2 * BUDGET + 3 * SMALL_PIPE + 64 * 1024);
    }
}

static void watchdog_cb(uv_timer_t *t)
{
    *(int *)t->data = 1;
}

/* Runs loop until *counter reaches want; a 5 s watchdog timer fails the test (and keeps the
 * loop alive: the console's wake handle alone does not). */
static void run_until(uv_loop_t *loop, const int *counter, int want)
{
    uv_timer_t wd;
    int fired = 0;

    uv_timer_init(loop, &wd);
    wd.data = &fired;
    uv_timer_start(&wd, watchdog_cb, 5000, 0);
    while (*counter < want && !fired)
        uv_run(loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&wd, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
    assert_false(fired);
}

/* Over budget the output pauses (the caller stops reading the worker), it resumes only once
 * the reader drained the queue, and every line arrives once and in order. */
static void test_backpressure_order_nothing_lost(void **state)
{
    struct fx *fx = *state;
    struct reader r = {.fd = fx->pipe[0], .cap = 8 * 1024 * 1024};
    uv_loop_t loop;
    int resumed = 0;
    unsigned next = 0;

    assert_true(fcntl(fx->pipe[1], F_SETPIPE_SZ, SMALL_PIPE) >= SMALL_PIPE);
    assert_int_equal(uv_loop_init(&loop), 0);
    assert_int_equal(agent_output_console_start(&loop, BUDGET), 0);
    agent_output_configure(&fx->o, &loop, NULL, 0, 0);
    agent_output_on_resume(&fx->o, on_resume, &resumed);
    assert_non_null(r.buf = fx->want = malloc(r.cap));
    assert_int_equal(pthread_create(&r.t, NULL, reader_main, &r), 0);
    for (int round = 0; round < 3; round++) {
        r.reading = 0;
        next = feed_until_paused(fx, next);
        uv_run(&loop, UV_RUN_NOWAIT);
        usleep(20000);
        uv_run(&loop, UV_RUN_NOWAIT);
        assert_int_equal(resumed, round); /* nobody reads: no resume */
        r.reading = 1;
        run_until(&loop, &resumed, round + 1);
    }
    agent_output_close(&fx->o);
    assert_int_equal(agent_output_console_stop(5000), 0); /* all of it written */
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
    close(fx->pipe[1]);
    fx->pipe[1] = -1;
    pthread_join(r.t, NULL); /* EOF */
    size_t want_len = next * (strlen(PFX) + 9);
    assert_int_equal(r.len, want_len);
    char line[64];
    for (unsigned i = 0; i < next; i++) {
        snprintf(line, sizeof(line), PFX "%08u\n", i);
        assert_memory_equal(r.buf + i * (strlen(PFX) + 9), line, strlen(line));
    }
}

/* A console that never reads: the output pauses at the budget, the exit waits no longer than
 * its timeout and reports what was left; the agent's memory holds at most the hard limit. */
static void test_never_read_bounded(void **state)
{
    struct fx *fx = *state;
    uv_loop_t loop;
    int resumed = 0;

    assert_true(fcntl(fx->pipe[1], F_SETPIPE_SZ, SMALL_PIPE) >= SMALL_PIPE);
    assert_int_equal(uv_loop_init(&loop), 0);
    assert_int_equal(agent_output_console_start(&loop, BUDGET), 0);
    agent_output_configure(&fx->o, &loop, NULL, 0, 0);
    agent_output_on_resume(&fx->o, on_resume, &resumed);
    feed_until_paused(fx, 0);
    /* a caller that ignores the pause (drain_pipe after an exit) is cut at the hard limit */
    char chunk[1000];
    memset(chunk, 'z', sizeof(chunk) - 1);
    chunk[sizeof(chunk) - 1] = '\n';
    for (int i = 0; i < 10 * BUDGET * MC_SINK_HARD_FACTOR / (int)sizeof(chunk); i++)
        agent_output_feed(&fx->o, chunk, sizeof(chunk));
    agent_output_close(&fx->o);
    uint64_t t0 = mono_ms();
    uint64_t lost = agent_output_console_stop(300);
    uint64_t took = mono_ms() - t0;
    assert_true(took >= 250 && took < 1500);
    assert_true(lost >= 9 * BUDGET * MC_SINK_HARD_FACTOR); /* the refused part, counted */
    assert_int_equal(resumed, 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
    close_reader(fx);
}

/* The sink itself: refuses (and counts) beyond its hard limit, never blocks the caller, and
 * says "over" from the budget on. */
static void test_sink_hard_limit(void **state)
{
    struct fx *fx = *state;
    struct mc_sink *s;
    char block[4096];
    struct iovec iov = {.iov_base = block, .iov_len = sizeof(block)};
    int refused = 0;

    memset(block, 'q', sizeof(block));
    assert_true(fcntl(fx->pipe[1], F_SETPIPE_SZ, SMALL_PIPE) >= SMALL_PIPE);
    assert_int_equal(mc_sink_new(fx->pipe[1], 0, BUDGET, NULL, &s), 0);
    uint64_t t0 = mono_ms();
    for (int i = 0; i < 1000; i++)
        refused += mc_sink_writev(s, &iov, 1) == -ENOBUFS;
    assert_true(mono_ms() - t0 < 1000);
    assert_true(mc_sink_over(s));
    assert_true(mc_sink_queued(s) <= (size_t)BUDGET * MC_SINK_HARD_FACTOR);
    assert_true(refused >= 1000 - (BUDGET * MC_SINK_HARD_FACTOR + 2 * SMALL_PIPE) / 4096);
    mc_sink_close(s);
    close_reader(fx);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_one_line),
        T(test_partial_line_in_pieces),
        T(test_several_lines_in_one_piece),
        T(test_pending_then_several_lines),
        T(test_flush_adds_newline),
        T(test_prefix_has_rank),
        T(test_torch_prefix_not_doubled),
        T(test_long_line_in_pieces),
        T(test_long_line_in_one_piece),
        T(test_long_partial_line_flushed),
        T(test_line_of_exactly_max),
        T(test_file_gets_raw_bytes),
        T(test_no_console),
        T(test_no_file),
        T(test_closed_console_epipe),
        T(test_write_all),
        T(test_close_zeroed_struct),
        T(test_carriage_return_updates),
        T(test_other_worker_ends_our_line),
        T(test_partial_line_shown_after_hold),
        T(test_cut_line_rest_is_only_newline),
        T(test_prefix_template),
        T(test_template_and_no_prefix_cfg),
        T(test_split_filters),
        T(test_filter_file),
        T(test_backpressure_order_nothing_lost),
        T(test_never_read_bounded),
        T(test_sink_hard_limit),
    };
    signal(SIGPIPE, SIG_IGN); /* the sinks' writers see EPIPE when a test closes its reader */
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
