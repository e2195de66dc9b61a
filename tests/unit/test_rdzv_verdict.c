/* The culprit from every rank's evidence (rendezvous/verdict.c): pure, no sockets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "verdict.h"

static struct rdzv_evidence ev[8];
static const struct rdzv_evidence *ptr[8];
static struct rdzv_verdict v;

/* n ranks, 2 per host, all alive with Python stacks, none in a collective */
static void world(size_t n)
{
    memset(ev, 0, sizeof(ev));
    for (size_t r = 0; r < n; r++) {
        ev[r].rank = (int)r;
        ev[r].local_rank = (int)(r % 2);
        ev[r].flags = RDZV_EV_ALIVE | RDZV_EV_HOOKED;
        ev[r].fr_enqueued = ev[r].fr_started = ev[r].fr_completed = -1;
        ev[r].silent_ms = 61000;
        snprintf(ev[r].host, sizeof(ev[r].host), "node%zu", r / 2 + 1);
        ptr[r] = &ev[r];
    }
}

static void in(int r, const char *op, const char *where)
{
    snprintf(ev[r].op, sizeof(ev[r].op), "%s", op);
    snprintf(ev[r].where, sizeof(ev[r].where), "%s", where);
    snprintf(ev[r].innermost, sizeof(ev[r].innermost), "%s", where);
}

static void test_outside(void **state)
{
    (void)state;
    world(8);
    for (int r = 0; r < 8; r++)
        in(r, "all_reduce", "train.py:120 in step");
    in(5, "", "train.py:88 in load_batch");
    strcpy(ev[5].frames, "/w/train.py:88 in load_batch\n/w/train.py:130 in main\n");
    rdzv_verdict_make(ptr, 8, NULL, &v);
    assert_int_equal(v.culprit, 5);
    assert_int_equal(v.rule, 2);
    assert_string_equal(v.host, "node3");
    assert_string_equal(v.line, "rank 5 (node3, local_rank 1) never entered all_reduce; it is in "
                                "train.py:88 in load_batch; ranks 0\u20134, 6\u20137 waited in "
                                "all_reduce for 61 s");
    assert_non_null(strstr(v.block, "stack of rank 5 (main thread, most recent call first):\n"
                                    "  /w/train.py:88 in load_batch\n"));
}

static void test_flight_recorder(void **state)
{
    (void)state;
    world(4);
    for (int r = 0; r < 4; r++) {
        in(r, "", "train.py:50 in forward"); /* CUDA: nobody's main thread is in the call */
        ev[r].flags |= RDZV_EV_FR;
        ev[r].fr_enqueued = 1532;
        ev[r].fr_completed = 1531;
        strcpy(ev[r].fr_op, "all_reduce");
    }
    ev[2].fr_enqueued = 1531; /* never entered #1532 */
    ev[2].fr_op[0] = '\0';
    rdzv_verdict_make(ptr, 4, NULL, &v);
    assert_int_equal(v.culprit, 2);
    assert_int_equal(v.rule, 1);
    assert_non_null(strstr(v.line, "rank 2 (node2, local_rank 0) never entered all_reduce #1532"));
    assert_non_null(strstr(v.line, "ranks 0\u20131, 3 waited in it"));
}

static void test_mismatch(void **state)
{
    (void)state;
    world(4);
    for (int r = 0; r < 4; r++)
        in(r, "all_reduce", "t.py:9 in step");
    in(1, "broadcast", "t.py:11 in step");
    rdzv_verdict_make(ptr, 4, NULL, &v);
    assert_int_equal(v.culprit, 1);
    assert_int_equal(v.rule, 3);
    assert_non_null(strstr(v.line, "called broadcast where ranks 0, 2\u20133 called all_reduce"));
}

static void test_first_failure(void **state)
{
    struct rdzv_failure f = {.rank = 3, .local_rank = 1, .exit_code = 1};

    (void)state;
    world(4);
    for (int r = 0; r < 4; r++)
        in(r, "all_reduce", "t.py:9 in step");
    ev[3].flags = 0; /* it had exited */
    ev[3].op[0] = '\0';
    strcpy(f.host, "node2");
    strcpy(f.text, "KeyError: 'x'");
    rdzv_verdict_make(ptr, 4, &f, &v);
    assert_int_equal(v.culprit, 3);
    assert_int_equal(v.rule, 4);
    assert_string_equal(v.line, "rank 3 (node2, local_rank 1) failed first: it exited with code 1: "
                                "KeyError: 'x'; ranks 0\u20132 waited in all_reduce");
}

static void test_no_culprit(void **state)
{
    struct rdzv_failure f = {.rank = 0, .exit_code = -1};

    (void)state;
    world(4);
    for (int r = 0; r < 4; r++)
        in(r, "all_reduce", "t.py:9 in step");
    ptr[3] = NULL; /* its node sent nothing */
    strcpy(f.text, "hung");
    rdzv_verdict_make(ptr, 4, &f, &v); /* the reporter's rank 0 is alive: not "failed first" */
    assert_int_equal(v.culprit, -1);
    assert_non_null(strstr(v.line, "no culprit named: ranks 0\u20132 all wait in all_reduce"));
    /* nothing at all */
    rdzv_verdict_make(ptr, 0, NULL, &v);
    assert_int_equal(v.culprit, -1);
}

static void test_hostile_text(void **state)
{
    (void)state;
    world(2);
    in(0, "all_reduce", "t.py:9 in step");
    memset(ev[1].where, 'A', sizeof(ev[1].where) - 1); /* as long as a field may be */
    memset(ev[1].host, 'h', sizeof(ev[1].host) - 1);
    memset(ev[1].frames, 'f', sizeof(ev[1].frames) - 1);
    strcpy(ev[1].innermost, "\xff\xfe bad");
    rdzv_verdict_make(ptr, 2, NULL, &v);
    assert_int_equal(v.culprit, 1);
    assert_true(strlen(v.line) <= RDZV_TEXT_MAX);
    assert_true(strlen(v.block) < sizeof(v.block));
}

static void test_ranks_text(void **state)
{
    unsigned char pick[10] = {1, 1, 1, 0, 1, 0, 1, 1, 0, 1};
    char buf[64];

    (void)state;
    rdzv_verdict_ranks(pick, 10, buf, sizeof(buf));
    assert_string_equal(buf, "ranks 0\u20132, 4, 6\u20137, 9");
    memset(pick, 0, sizeof(pick));
    pick[4] = 1;
    rdzv_verdict_ranks(pick, 10, buf, sizeof(buf));
    assert_string_equal(buf, "rank 4");
    rdzv_verdict_ranks((unsigned char[3]){1, 1, 1}, 3, buf, 8); /* cut, still a string */
    assert_true(strlen(buf) < 8);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_outside),    cmocka_unit_test(test_flight_recorder),
        cmocka_unit_test(test_mismatch),   cmocka_unit_test(test_first_failure),
        cmocka_unit_test(test_no_culprit), cmocka_unit_test(test_hostile_text),
        cmocka_unit_test(test_ranks_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
