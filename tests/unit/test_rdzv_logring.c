/* Unit tests for rendezvous/logring.c: the rate bucket, the job's ring (bounded, oldest out,
 * counted; read after N with --rank and --since), one rank's flood capped without costing the
 * others their lines, and --dedup's merging and rank lists. Time is passed in. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "logring.h"

static struct rdzv_log out; /* 54 KiB: not on the stack */

static int add(struct rdzv_logring *r, uint64_t now, int rank, const char *text)
{
    struct rdzv_log_line ln = {
        .rank = rank, .stream = 0, .time_ms = 1000 + now, .len = (uint32_t)strlen(text)};

    return rdzv_logring_add(r, now, &ln, text);
}

static void test_bucket(void **state)
{
    struct rdzv_bucket b = {0};
    int n = 0;

    (void)state;
    /* full at first: RDZV_LOG_BURST_S seconds of the rate */
    while (rdzv_bucket_take(&b, 1000, 10, 1 << 20, 1))
        n++;
    assert_int_equal(n, 10 * RDZV_LOG_BURST_S);
    /* 0.5 s later: 5 more lines */
    n = 0;
    while (rdzv_bucket_take(&b, 1500, 10, 1 << 20, 1))
        n++;
    assert_int_equal(n, 5);
    /* bytes cap: a line larger than what is left does not pass; a small one does */
    b = (struct rdzv_bucket){0};
    assert_true(rdzv_bucket_take(&b, 1, 1000, 100, 150));
    assert_false(rdzv_bucket_take(&b, 1, 1000, 100, 100));
    assert_true(rdzv_bucket_take(&b, 1, 1000, 100, 50));
    /* an hour idle refills to the burst only */
    n = 0;
    while (rdzv_bucket_take(&b, 3600001, 1000, 1 << 30, 1))
        n++;
    assert_int_equal(n, 1000 * RDZV_LOG_BURST_S);
}

static void test_ring_bounded(void **state)
{
    struct rdzv_logring_limits lim = {.ring_bytes = 10 * (RDZV_LOG_ENTRY_COST + 10),
                                      .lines_per_s = 1000000,
                                      .bytes_per_s = 1 << 30};
    struct rdzv_logring *r = rdzv_logring_new(&lim);
    struct rdzv_logring_stats st;
    struct rdzv_logs_req q = {.rank = -1};
    char t[16];

    (void)state;
    for (int i = 0; i < 25; i++) {
        snprintf(t, sizeof(t), "line %05d", i); /* 10 bytes */
        assert_int_equal(add(r, 1, 0, t), 0);
    }
    rdzv_logring_stats(r, &st);
    assert_int_equal(st.lines, 25);
    assert_int_equal(st.held, 10);
    assert_int_equal(st.dropped_ring, 15); /* the oldest went first */
    assert_true(st.held_bytes <= lim.ring_bytes);
    rdzv_logring_read(r, &q, &out);
    assert_int_equal(out.count, 10);
    assert_int_equal(out.lines[0].seq, 16);
    assert_memory_equal(out.text + out.lines[0].off, "line 00015", 10);
    assert_int_equal(out.next, 25);
    assert_int_equal(out.state & RDZV_LOGS_GAP, 0); /* from the start: no gap to tell */
    assert_int_equal(out.dropped, 15);
    /* after 3: lines 4..15 are gone, the reader is told */
    q.after = 3;
    rdzv_logring_read(r, &q, &out);
    assert_true(out.state & RDZV_LOGS_GAP);
    assert_int_equal(out.lines[0].seq, 16);
    /* after the newest: nothing, next unchanged */
    q.after = 25;
    rdzv_logring_read(r, &q, &out);
    assert_int_equal(out.count, 0);
    assert_int_equal(out.next, 25);
    assert_int_equal(out.state, 0);
    rdzv_logring_free(r);
}

static void test_read_filters_and_more(void **state)
{
    struct rdzv_logring_limits lim = {.lines_per_s = 1000000, .bytes_per_s = 1 << 30};
    struct rdzv_logring *r = rdzv_logring_new(&lim);
    struct rdzv_logs_req q = {.rank = 2};
    char t[32];
    uint64_t seen = 0;
    int rounds = 0;

    (void)state;
    for (int i = 0; i < 2000; i++) {
        snprintf(t, sizeof(t), "r%d i%d", i % 4, i);
        assert_int_equal(add(r, (uint64_t)i, i % 4, t), 0);
    }
    /* --rank 2: only its lines, in order, over several answers (MORE) */
    do {
        rdzv_logring_read(r, &q, &out);
        for (uint32_t i = 0; i < out.count; i++) {
            assert_int_equal(out.lines[i].rank, 2);
            assert_true(out.lines[i].seq > q.after);
            seen++;
        }
        q.after = out.next;
        rounds++;
    } while (out.state & RDZV_LOGS_MORE);
    assert_int_equal(seen, 500);
    assert_true(rounds >= 2); /* 500 lines do not fit one answer of RDZV_LOG_LINES_MAX */
    /* --since: the lines' own time (1000 + i here) */
    q = (struct rdzv_logs_req){.rank = -1, .since_ms = 1000 + 1990};
    rdzv_logring_read(r, &q, &out);
    assert_int_equal(out.count, 10);
    assert_int_equal(out.lines[0].time_ms, 1000 + 1990);
    rdzv_logring_free(r);
}

/* One rank floods (as fast as it can), three print a line each 100 ms: the flood is capped
 * (dropped, counted) and every line of the others is kept. */
static void test_flood_does_not_cost_others(void **state)
{
    struct rdzv_logring *r = rdzv_logring_new(NULL);
    struct rdzv_logring_stats st;
    struct rdzv_logs_req q = {.rank = 1};
    char big[200];
    int quiet = 0, got = 0;

    (void)state;
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    for (uint64_t ms = 1; ms <= 10000; ms++) {
        for (int k = 0; k < 500; k++) /* 500 lines / ms: 100 MB/s */
            add(r, ms, 0, big);
        if (ms % 100 == 0)
            for (int rank = 1; rank <= 3; rank++, quiet++)
                assert_int_equal(add(r, ms, rank, "loss 2.31"), 0);
    }
    rdzv_logring_stats(r, &st);
    /* rank 0 got at most its share: a quarter of the job's rate, plus the burst */
    assert_true(st.lines - (uint64_t)quiet <=
                (RDZV_LOG_RANK_LINES_PER_S * (10 + RDZV_LOG_BURST_S)) + 1);
    assert_true(st.dropped_rate > 4000000);
    assert_int_equal(st.lines + st.dropped_rate, 10000 * 500 + (uint64_t)quiet);
    do {
        rdzv_logring_read(r, &q, &out);
        got += (int)out.count;
        q.after = out.next;
    } while (out.state & RDZV_LOGS_MORE);
    assert_int_equal(got, 100); /* every line of rank 1 */
    rdzv_logring_free(r);
}

/* Two jobs share a budget of 20 lines' worth: the second job's lines push out its own oldest
 * ones, never the first job's; a job whose ring is empty at the cap drops the new line; freeing
 * a ring gives its bytes back. */
static void test_pool(void **state)
{
    size_t used = 0, cost = RDZV_LOG_ENTRY_COST + 10;
    struct rdzv_logring_limits lim = {
        .lines_per_s = 1000000, .bytes_per_s = 1 << 30, .pool_used = &used, .pool_max = 20 * cost};
    struct rdzv_logring *a = rdzv_logring_new(&lim), *b = rdzv_logring_new(&lim), *c;
    struct rdzv_logring_stats st;

    (void)state;
    for (int i = 0; i < 15; i++)
        assert_int_equal(add(a, 1, 0, "0123456789"), 0);
    for (int i = 0; i < 15; i++)
        assert_int_equal(add(b, 1, 0, "0123456789"), 0);
    assert_int_equal(used, 20 * cost);
    rdzv_logring_stats(a, &st);
    assert_int_equal(st.held, 15); /* a kept all of its lines */
    rdzv_logring_stats(b, &st);
    assert_int_equal(st.held, 5);
    assert_int_equal(st.dropped_ring, 10);
    c = rdzv_logring_new(&lim);
    assert_int_equal(add(c, 1, 0, "0123456789"), 1); /* nothing of its own to push out */
    rdzv_logring_free(b);
    assert_int_equal(used, 15 * cost);
    assert_int_equal(add(c, 1, 0, "0123456789"), 0);
    rdzv_logring_free(a);
    rdzv_logring_free(c);
    assert_int_equal(used, 0);
}

static void test_ranks_fmt(void **state)
{
    int32_t a[] = {0, 1, 2, 3, 5, 7, 8};
    char buf[64];

    (void)state;
    assert_int_equal(rdzv_ranks_fmt(a, 7, buf, sizeof(buf)), strlen("0-3,5,7-8"));
    assert_string_equal(buf, "0-3,5,7-8");
    rdzv_ranks_fmt(a, 1, buf, sizeof(buf));
    assert_string_equal(buf, "0");
    /* too small: terminated, the length needed returned */
    assert_int_equal(rdzv_ranks_fmt(a, 7, buf, 4), strlen("0-3,5,7-8"));
    assert_true(strlen(buf) < 4);
}

struct rec {
    char out[8192];
    size_t len;
};

static void rec_emit(void *ctx, const struct rdzv_log_line *ln, const char *text, const char *ranks)
{
    struct rec *r = ctx;
    char one[16];

    snprintf(one, sizeof(one), "%d", (int)ln->rank);
    r->len += (size_t)snprintf(r->out + r->len, sizeof(r->out) - r->len, "[%s%s]%s%.*s\n",
                               ranks ? "ranks " : "rank", ranks ? ranks : one,
                               ln->stream ? "err:" : "", (int)ln->len, text);
}

static void put(struct rdzv_log *l, int rank, int stream, const char *text)
{
    size_t n = strlen(text);

    l->lines[l->count++] = (struct rdzv_log_line){
        .rank = rank, .stream = (uint8_t)stream, .off = l->bytes, .len = (uint32_t)n};
    memcpy(l->text + l->bytes, text, n);
    l->bytes += (uint32_t)n;
}

static void test_dedup(void **state)
{
    static struct rdzv_log l;
    struct rec rec = {0};

    (void)state;
    /* 64 ranks say the same loss: one line */
    for (int r = 0; r < 64; r++)
        put(&l, r, 0, "loss 2.31");
    assert_int_equal(rdzv_logs_dedup(&l, rec_emit, &rec), 0);
    assert_string_equal(rec.out, "[ranks 0-63]loss 2.31\n");

    /* per-rank order kept: rank 1 said "a" after "b", so its "a" cannot join rank 0's "a",
     * which came before its "b"; a rank said twice is two lines; stderr apart; one rank's
     * line keeps its rank */
    memset(&l, 0, sizeof(l));
    memset(&rec, 0, sizeof(rec));
    put(&l, 0, 0, "a");
    put(&l, 1, 0, "b");
    put(&l, 1, 0, "a");
    put(&l, 2, 0, "a");
    put(&l, 2, 0, "a");
    put(&l, 3, 1, "a");
    put(&l, 5, 0, "b");
    assert_int_equal(rdzv_logs_dedup(&l, rec_emit, &rec), 0);
    assert_string_equal(rec.out, "[ranks 0,2]a\n"
                                 "[ranks 1,5]b\n"
                                 "[ranks 1-2]a\n"
                                 "[rank3]err:a\n");
    /* nothing in: nothing out */
    memset(&l, 0, sizeof(l));
    memset(&rec, 0, sizeof(rec));
    assert_int_equal(rdzv_logs_dedup(&l, rec_emit, &rec), 0);
    assert_int_equal(rec.len, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bucket),
        cmocka_unit_test(test_ring_bounded),
        cmocka_unit_test(test_read_filters_and_more),
        cmocka_unit_test(test_flood_does_not_cost_others),
        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_ranks_fmt),
        cmocka_unit_test(test_dedup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
