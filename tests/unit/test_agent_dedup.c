/* Unit tests for agent/dedup.c (--dedup): merging, the window, per-rank order, rank lists.
 * The queue is pure: time is passed in and emitted lines are recorded as "RANKS|text". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dedup.h"

struct rec {
    char out[4096]; /* one "RANKS|prefix|text\n" per emitted line */
    size_t len;
    int lines;
};

static void emit(void *arg, int fd, const int *ranks, size_t n, const char *prefix,
                 const char *text, size_t len)
{
    struct rec *r = arg;
    char list[256];

    assert_true(fd == 1 || fd == 2);
    agent_dedup_ranks_fmt(ranks, n, list, sizeof(list));
    r->len += (size_t)snprintf(r->out + r->len, sizeof(r->out) - r->len, "%s%s|%s|%.*s\n",
                               fd == 2 ? "err:" : "", list, prefix, (int)len, text);
    r->lines++;
}

struct fx {
    struct rec rec;
    struct agent_dedup *d;
    uint64_t seq[8]; /* per rank: agent_dedup_add's cookie */
};

static int setup(void **state)
{
    struct fx *fx = calloc(1, sizeof(*fx));
    if (fx == NULL || agent_dedup_new(100, emit, &fx->rec, &fx->d) != 0) {
        free(fx);
        return -1;
    }
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fx *fx = *state;
    agent_dedup_free(fx->d);
    free(fx);
    return 0;
}

static void add_fd(struct fx *fx, int fd, int rank, const char *text, uint64_t now, int expected,
                   uint64_t *seq)
{
    char prefix[32];
    snprintf(prefix, sizeof(prefix), "[rank%d]: ", rank);
    assert_int_equal(
        agent_dedup_add(fx->d, fd, rank, prefix, text, strlen(text), now, expected, seq), 0);
}

static void add(struct fx *fx, int rank, const char *text, uint64_t now, int expected)
{
    add_fd(fx, 1, rank, text, now, expected, &fx->seq[rank]);
}

/* Everyone says it: one line, at once, with the compressed rank list. */
static void test_all_ranks_merge_at_once(void **state)
{
    struct fx *fx = *state;
    for (int r = 0; r < 4; r++)
        add(fx, r, "loss 0.5", 10, 4);
    assert_int_equal(fx->rec.lines, 1);
    assert_string_equal(fx->rec.out, "0-3|[rank0]: |loss 0.5\n");
    assert_int_equal(agent_dedup_deadline(fx->d), 0);
}

/* A line said by one rank waits at most the window and keeps that rank's own prefix. */
static void test_window(void **state)
{
    struct fx *fx = *state;
    add(fx, 2, "only me", 1000, 4);
    add(fx, 0, "and us", 1040, 4);
    add(fx, 1, "and us", 1050, 4);
    assert_int_equal(agent_dedup_deadline(fx->d), 1100);
    agent_dedup_flush_due(fx->d, 1099);
    assert_int_equal(fx->rec.lines, 0);
    agent_dedup_flush_due(fx->d, 1100);
    assert_string_equal(fx->rec.out, "2|[rank2]: |only me\n");
    agent_dedup_flush_due(fx->d, 1140);
    assert_string_equal(fx->rec.out, "2|[rank2]: |only me\n0-1|[rank0]: |and us\n");
    assert_int_equal(agent_dedup_deadline(fx->d), 0);
}

/* Rank-specific lines between common ones: the common ones still merge, and every rank's own
 * lines come out in its order. */
static void test_specific_lines_between(void **state)
{
    struct fx *fx = *state;
    for (int r = 0; r < 3; r++) {
        char mine[16];
        snprintf(mine, sizeof(mine), "mine %d", r);
        add(fx, r, "start", 5, 3);
        add(fx, r, mine, 5, 3);
        add(fx, r, "end", 5, 3);
    }
    agent_dedup_flush_due(fx->d, 1000);
    assert_string_equal(fx->rec.out, "0-2|[rank0]: |start\n"
                                     "0|[rank0]: |mine 0\n"
                                     "1|[rank1]: |mine 1\n"
                                     "2|[rank2]: |mine 2\n"
                                     "0-2|[rank0]: |end\n");
}

/* Rank 0 says x then y, rank 1 says y then x: merging both would reorder one of them. */
static void test_never_reorders(void **state)
{
    struct fx *fx = *state;
    add(fx, 0, "x", 0, 2);
    add(fx, 0, "y", 0, 2);
    add(fx, 1, "y", 0, 2); /* merges: y leaves with x before it */
    add(fx, 1, "x", 0, 2);
    agent_dedup_flush_due(fx->d, 1000);
    assert_string_equal(fx->rec.out, "0|[rank0]: |x\n0-1|[rank0]: |y\n1|[rank1]: |x\n");
}

/* A rank's stderr line queued after its stdout line does not pin that stdout line: the two
 * pipes never had an order between them. */
static void test_other_stream_does_not_block(void **state)
{
    struct fx *fx = *state;
    uint64_t err_seq[2] = {0, 0};
    add(fx, 1, "done", 0, 2);
    add_fd(fx, 2, 1, "warning 1", 0, 2, &err_seq[1]);
    add(fx, 0, "mine 0", 0, 2);
    add(fx, 0, "done", 0, 2); /* moves "done" behind "mine 0", past rank 1's stderr line */
    assert_string_equal(fx->rec.out, "err:1|[rank1]: |warning 1\n0|[rank0]: |mine 0\n"
                                     "0-1|[rank1]: |done\n");
}

/* The same text twice from one rank is two lines, never one. */
static void test_repeat_by_one_rank(void **state)
{
    struct fx *fx = *state;
    add(fx, 0, "tick", 0, 2);
    add(fx, 0, "tick", 0, 2);
    add(fx, 1, "tick", 0, 2);
    add(fx, 1, "tick", 0, 2);
    assert_string_equal(fx->rec.out, "0-1|[rank0]: |tick\n0-1|[rank0]: |tick\n");
}

/* flush_to: what a rank prints next (a progress redraw) comes after its queued lines. */
static void test_flush_to(void **state)
{
    struct fx *fx = *state;
    add(fx, 0, "a", 0, 4);
    add(fx, 1, "b", 0, 4);
    add(fx, 1, "c", 0, 4);
    agent_dedup_flush_to(fx->d, fx->seq[0]);
    assert_string_equal(fx->rec.out, "0|[rank0]: |a\n");
    agent_dedup_flush_to(fx->d, fx->seq[0]); /* gone: nothing */
    agent_dedup_flush_to(fx->d, 0);
    assert_int_equal(fx->rec.lines, 1);
    agent_dedup_flush_to(fx->d, fx->seq[1]);
    assert_int_equal(fx->rec.lines, 3);
}

/* Free prints what is still queued. */
static void test_free_flushes(void **state)
{
    struct fx *fx = *state;
    add(fx, 3, "bye", 0, 8);
    agent_dedup_free(fx->d);
    fx->d = NULL;
    assert_string_equal(fx->rec.out, "3|[rank3]: |bye\n");
}

static void test_ranks_fmt(void **state)
{
    (void)state;
    char buf[64];
    int a[] = {0, 1, 2, 3, 5}, b[] = {7}, c[] = {0, 2, 4}, d[] = {1, 2, 10, 11, 12, 20};
    assert_int_equal(agent_dedup_ranks_fmt(a, 5, buf, sizeof(buf)), 5);
    assert_string_equal(buf, "0-3,5");
    agent_dedup_ranks_fmt(b, 1, buf, sizeof(buf));
    assert_string_equal(buf, "7");
    agent_dedup_ranks_fmt(c, 3, buf, sizeof(buf));
    assert_string_equal(buf, "0,2,4");
    agent_dedup_ranks_fmt(d, 6, buf, sizeof(buf));
    assert_string_equal(buf, "1-2,10-12,20");
    /* too small: whole items only, and the length it needed */
    assert_int_equal(agent_dedup_ranks_fmt(d, 6, buf, 8), 12);
    assert_string_equal(buf, "1-2");
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_all_ranks_merge_at_once),
        T(test_window),
        T(test_specific_lines_between),
        T(test_never_reorders),
        T(test_repeat_by_one_rank),
        T(test_flush_to),
        T(test_free_flushes),
        T(test_ranks_fmt),
        T(test_other_stream_does_not_block),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
