/* The parsers of agent/evidence.c: faulthandler dumps and the Flight Recorder's JSON. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "evidence.h"

/* What Python 3.11's faulthandler wrote for a rank of torch 2.x in all_reduce, its
 * muster-evidence thread idle: two threads, the main one last. */
static const char two_threads[] =
    "Thread 0x00007f1111111111 (most recent call first):\n"
    "  File \"/usr/lib/python3.11/threading.py\", line 320 in wait\n"
    "  File \"/tmp/hook/sitecustomize.py\", line 51 in _muster_fr_loop\n"
    "\n"
    "Current thread 0x00007f2222222222 (most recent call first):\n"
    "  File \"/opt/venv/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py\", "
    "line 2501 in all_reduce\n"
    "  File \"/opt/venv/lib/python3.12/site-packages/torch/distributed/c10d_logger.py\", "
    "line 81 in wrapper\n"
    "  File \"/home/u/train.py\", line 120 in step\n"
    "  File \"/home/u/train.py\", line 140 in <module>\n";

static void test_stacks_main_thread(void **state)
{
    struct rdzv_evidence r = {0};

    (void)state;
    agent_evidence_parse_stacks(two_threads, 0x7f2222222222ul, &r);
    assert_true(r.flags & RDZV_EV_HOOKED);
    assert_string_equal(r.op, "all_reduce");
    assert_string_equal(r.where, "train.py:120 in step");
    assert_string_equal(r.innermost, "distributed_c10d.py:2501 in all_reduce");
    assert_non_null(strstr(r.frames, "/home/u/train.py:140 in <module>\n"));
    /* the other thread when asked for it: not in a collective */
    memset(&r, 0, sizeof(r));
    agent_evidence_parse_stacks(two_threads, 0x7f1111111111ul, &r);
    assert_string_equal(r.op, "");
    assert_string_equal(r.where, "sitecustomize.py:51 in _muster_fr_loop");
}

static void test_stacks_repeated_dump(void **state)
{
    /* two dumps appended (muster debug, then the hang): the newest counts */
    static const char twice[] = "Current thread 0x0000000000000abc (most recent call first):\n"
                                "  File \"/w/t.py\", line 5 in old\n"
                                "\n"
                                "Current thread 0x0000000000000abc (most recent call first):\n"
                                "  File \"/w/t.py\", line 9 in new\n";
    struct rdzv_evidence r = {0};

    (void)state;
    agent_evidence_parse_stacks(twice, 0xabc, &r);
    assert_string_equal(r.where, "t.py:9 in new");
}

static void test_stacks_loader_and_garbage(void **state)
{
    static const char loader[] =
        "Current thread 0x0000000000000001 (most recent call first):\n"
        "  File \"/usr/lib/python3.11/selectors.py\", line 415 in select\n"
        "  File \"/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py\", line 1120 in "
        "_try_get_data\n"
        "  File \"/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py\", line 628 in "
        "__next__\n"
        "  File \"/w/t.py\", line 54 in main\n";
    struct rdzv_evidence r = {0};

    (void)state;
    agent_evidence_parse_stacks(loader, 0, &r);
    assert_string_equal(r.op, "");
    assert_string_equal(r.where, "t.py:54 in main");
    assert_string_equal(r.innermost, "dataloader.py:628 in __next__, waiting for its DataLoader");
    /* not a dump at all, a truncated one, bytes that are not UTF-8: no crash, no stack */
    memset(&r, 0, sizeof(r));
    agent_evidence_parse_stacks("garbage\n\xff\xfe\n", 0, &r);
    assert_false(r.flags & RDZV_EV_HOOKED);
    memset(&r, 0, sizeof(r));
    agent_evidence_parse_stacks("Current thread 0x1 (most recent call first):\n  File \"/w/\xff", 0,
                                &r);
    assert_true(r.flags & RDZV_EV_HOOKED);
    assert_string_equal(r.innermost, "no Python frame");
}

static void test_flight_recorder(void **state)
{
    static const char doc[] =
        "{\"fr\": {\"version\": \"2.10\", \"pg_status\": {\"0\": {\"last_enqueued_collective\": "
        "1532, \"last_started_collective\": 1532, \"last_completed_collective\": 1531}, \"1\": "
        "{\"last_enqueued_collective\": 7}}, \"entries\": [{\"process_group\": [\"0\", "
        "\"default\"], "
        "\"collective_seq_id\": 1531, \"profiling_name\": \"nccl:all_gather\", \"state\": "
        "\"completed\"}, {\"process_group\": [\"0\", \"default\"], \"collective_seq_id\": 1532, "
        "\"profiling_name\": \"nccl:all_reduce\", \"state\": \"started\"}]}}";
    struct rdzv_evidence r = {0};

    (void)state;
    assert_int_equal(agent_evidence_parse_fr(doc, strlen(doc), &r), 0);
    assert_true(r.flags & RDZV_EV_FR);
    assert_int_equal(r.fr_enqueued, 1532);
    assert_int_equal(r.fr_completed, 1531);
    assert_string_equal(r.fr_op, "all_reduce");
    /* every collective completed: the newest names the one a rank behind never entered */
    static const char done[] =
        "{\"fr\": {\"pg_status\": {\"1\": {\"last_enqueued_collective\": 6}}, \"entries\": "
        "[{\"process_group\": [\"1\", \"\"], \"collective_seq_id\": 6, \"profiling_name\": "
        "\"nccl:all_reduce\", \"state\": \"completed\"}, {\"process_group\": [\"1\", \"\"], "
        "\"collective_seq_id\": 5, \"profiling_name\": \"nccl:broadcast\", \"state\": "
        "\"completed\"}]}}";
    memset(&r, 0, sizeof(r));
    assert_int_equal(agent_evidence_parse_fr(done, strlen(done), &r), 0);
    assert_int_equal(r.fr_enqueued, 6);
    assert_string_equal(r.fr_op, "all_reduce");
    /* PyTorch 2.11's shape (seen on the H200): pg_status by pg_id, the group's name "1" */
    static const char v211[] =
        "{\"fr\": {\"comm_lib_version\": \"2.28.9\", \"entries\": [{\"collective_seq_id\": 6, "
        "\"pg_id\": 0, \"process_group\": [\"1\", \"undefined\"], \"profiling_name\": "
        "\"nccl:all_reduce\", \"state\": \"completed\"}], \"pg_status\": {\"0\": "
        "{\"last_enqueued_collective\": 6, \"last_started_collective\": 6, "
        "\"last_completed_collective\": 6}}}}";
    memset(&r, 0, sizeof(r));
    assert_int_equal(agent_evidence_parse_fr(v211, strlen(v211), &r), 0);
    assert_string_equal(r.fr_op, "all_reduce");
    memset(&r, 0, sizeof(r));
    assert_int_equal(agent_evidence_parse_fr("{\"fr\": null, \"why\": \"gloo\"}", 27, &r), -22);
    assert_false(r.flags & RDZV_EV_FR);
    assert_int_equal(agent_evidence_parse_fr("{{{", 3, &r), -22);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stacks_main_thread),
        cmocka_unit_test(test_stacks_repeated_dump),
        cmocka_unit_test(test_stacks_loader_and_garbage),
        cmocka_unit_test(test_flight_recorder),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
