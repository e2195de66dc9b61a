/* Unit tests for agent/logfwd.c: worker bytes cut into lines ('\n', '\r', long lines, partial
 * lines at the stream's end, NULs), each rank capped apart (a flood does not push the others'
 * lines out), the bounded queue dropping the oldest and telling the server how many, batches
 * kept while the link is away or full. No loop: flushes are called. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "logfwd.h"
#include "message.h"

struct sink {
    int refuse;    /* send fails (away) */
    size_t unsent; /* what the link holds */
    int batches;
    uint64_t dropped; /* sum of LOG.dropped */
    char out[1 << 16];
    size_t len;
    int lines, per_rank[8];
};

static int sink_send(void *ctx, const struct rdzv_msg *m)
{
    struct sink *s = ctx;
    const struct rdzv_log *l = &m->u.log;
    static uint8_t buf[RDZV_HEADER_SIZE + RDZV_MAX_PAYLOAD];
    size_t len;

    if (s->refuse)
        return -1;
    assert_int_equal(m->type, RDZV_MSG_LOG);
    assert_int_equal(rdzv_msg_encode(m, buf, sizeof(buf), &len), 0); /* the wire takes it */
    s->batches++;
    s->dropped += l->dropped;
    for (uint32_t i = 0; i < l->count; i++) {
        const struct rdzv_log_line *ln = &l->lines[i];
        s->lines++;
        if (ln->rank >= 0 && ln->rank < 8)
            s->per_rank[ln->rank]++;
        if (s->len < sizeof(s->out) - 64)
            s->len += (size_t)snprintf(s->out + s->len, sizeof(s->out) - s->len, "%d%s|%.*s\n",
                                       (int)ln->rank, ln->stream ? "e" : "",
                                       (int)(ln->len > 40 ? 40 : ln->len), l->text + ln->off);
    }
    return 0;
}

static size_t sink_unsent(void *ctx)
{
    return ((struct sink *)ctx)->unsent;
}

static struct agent_logfwd *mk(struct sink *s, int n)
{
    struct agent_logfwd_io io = {.send = sink_send, .unsent = sink_unsent, .ctx = s};
    struct agent_logfwd *f = agent_logfwd_new(NULL, &io);

    assert_non_null(f);
    assert_int_equal(agent_logfwd_reset(f, n), 0);
    return f;
}

static void feed(struct agent_logfwd *f, int lr, int stream, const char *s)
{
    agent_logfwd_feed(f, lr, 10 + lr, stream, s, strlen(s), 1, 5000);
}

static void test_lines(void **state)
{
    static struct sink s;
    struct agent_logfwd *f;

    (void)state;
    memset(&s, 0, sizeof(s));
    f = mk(&s, 2);
    feed(f, 0, 0, "hello ");
    feed(f, 1, 1, "oops\n");
    feed(f, 0, 0, "world\n\nbar 1%\rbar 2%\r\nend");
    agent_logfwd_flush(f);
    /* the partial "end" waits; an empty line is a line, the '\n' after a '\r' is not */
    assert_string_equal(s.out, "11e|oops\n10|hello world\n10|\n10|bar 1%\n10|bar 2%\n");
    /* the stream ends: the partial line goes */
    agent_logfwd_feed(f, 0, 10, 0, NULL, 0, 2, 5001);
    agent_logfwd_flush(f);
    assert_string_equal(s.out + strlen(s.out) - 7, "10|end\n");
    /* a NUL cannot travel: shown as '?' */
    s.len = 0;
    agent_logfwd_feed(f, 1, 11, 0, "a\0b\n", 4, 3, 5002);
    agent_logfwd_flush(f);
    assert_string_equal(s.out, "11|a?b\n");
    agent_logfwd_close(f);
}

static void test_long_line_split(void **state)
{
    static struct sink s;
    static char big[3 * RDZV_LOG_LINE_MAX + 11];
    struct agent_logfwd *f;

    (void)state;
    memset(&s, 0, sizeof(s));
    f = mk(&s, 1);
    memset(big, 'y', sizeof(big) - 1);
    big[sizeof(big) - 2] = '\n';
    feed(f, 0, 0, big);
    agent_logfwd_flush(f);
    assert_int_equal(s.lines, 4); /* 3 full parts and the rest */
    agent_logfwd_close(f);
}

/* Rank 0 prints 100,000 lines at once, rank 1 one line: rank 0 is capped at its share (the
 * rest dropped and counted), rank 1's line is there. */
static void test_flood_capped_per_rank(void **state)
{
    static struct sink s;
    struct agent_logfwd *f;
    struct agent_logfwd_stats st;

    (void)state;
    memset(&s, 0, sizeof(s));
    f = mk(&s, 2);
    for (int i = 0; i < 100000; i++)
        agent_logfwd_feed(f, 0, 0, 0, "flood flood flood flood\n", 24, 1, 1);
    agent_logfwd_feed(f, 1, 1, 0, "quiet\n", 6, 1, 1);
    agent_logfwd_flush(f);
    agent_logfwd_stats(f, &st);
    assert_int_equal(s.per_rank[1], 1);
    assert_true(s.per_rank[0] <= (int)(RDZV_LOG_RANK_LINES_PER_S * RDZV_LOG_BURST_S));
    assert_int_equal(st.dropped_rate, 100000 - s.per_rank[0]);
    assert_int_equal(s.dropped, st.dropped_rate); /* the server is told */
    assert_int_equal(st.queued, 0);
    agent_logfwd_close(f);
}

/* The link is away: lines wait in the queue, the oldest dropped past its bound and counted;
 * back: they go, with the count. A full link (unsent bytes) holds them too. */
static void test_queue_bounded_while_away(void **state)
{
    static struct sink s;
    struct agent_logfwd *f;
    struct agent_logfwd_stats st;
    char line[64];
    uint64_t t = 1;

    (void)state;
    memset(&s, 0, sizeof(s));
    s.refuse = 1;
    f = mk(&s, 8);
    /* 8 ranks x 1200 lines, slow enough for the caps (1 ms apart): 9600 > the queue's lines */
    for (int i = 0; i < 1200; i++, t += 2)
        for (int r = 0; r < 8; r++) {
            snprintf(line, sizeof(line), "r%d line %d\n", r, i);
            agent_logfwd_feed(f, r, r, 0, line, strlen(line), t, t);
        }
    agent_logfwd_flush(f);
    agent_logfwd_stats(f, &st);
    assert_int_equal(s.batches, 0);
    assert_int_equal(st.queued, AGENT_LOGFWD_QUEUE_LINES);
    assert_int_equal(st.dropped_queue, 8 * 1200 - AGENT_LOGFWD_QUEUE_LINES);
    assert_int_equal(st.dropped_rate, 0);
    /* a full link: still held */
    s.refuse = 0;
    s.unsent = AGENT_LOGFWD_UNSENT_MAX + 1;
    agent_logfwd_flush(f);
    assert_int_equal(s.batches, 0);
    s.unsent = 0;
    agent_logfwd_flush(f);
    assert_int_equal(s.lines, AGENT_LOGFWD_QUEUE_LINES);
    assert_true(s.batches >= (int)(AGENT_LOGFWD_QUEUE_LINES / RDZV_LOG_LINES_MAX));
    assert_int_equal(s.dropped, st.dropped_queue);
    /* the oldest went: the first line sent is the first one that fit */
    snprintf(line, sizeof(line), "0|r0 line %d\n", (8 * 1200 - AGENT_LOGFWD_QUEUE_LINES) / 8);
    assert_memory_equal(s.out, line, strlen(line));
    agent_logfwd_close(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lines),
        cmocka_unit_test(test_long_line_split),
        cmocka_unit_test(test_flood_capped_per_rank),
        cmocka_unit_test(test_queue_bounded_while_away),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
