/* Round logic tests: pure, no sockets. Peers are fake pointers into `peers`. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "job.h"

static char peers[8]; /* &peers[i] is node i's connection */

static struct rdzv_join mkjoin(unsigned node, unsigned min, unsigned max, unsigned nproc)
{
    struct rdzv_join j = {.min_nodes = min,
                          .max_nodes = max,
                          .nproc = nproc,
                          .master_port = 29500 + node,
                          .max_restarts = 2,
                          .last_call_ms = 1000,
                          .join_timeout_ms = 10000,
                          .node_id = 100 + node};

    strcpy(j.job_id, "job");
    snprintf(j.host, sizeof(j.host), "node%u", node);
    return j;
}

static struct rdzv_job *new_job(unsigned min, unsigned max)
{
    struct rdzv_join j = mkjoin(0, min, max, 1);
    struct rdzv_job *job = NULL;

    assert_int_equal(rdzv_job_new(&j, &job), 0);
    return job;
}

static enum rdzv_job_event join(struct rdzv_job *job, unsigned node, unsigned nproc, uint64_t now)
{
    struct rdzv_join j = mkjoin(node, job->min_nodes, job->max_nodes, nproc);
    enum rdzv_job_event ev = RDZV_JOB_EV_NONE;
    char addr[32];

    snprintf(addr, sizeof(addr), "10.0.0.%u", node);
    assert_int_equal(rdzv_job_join(job, &j, addr, &peers[node], now, &ev), 0);
    return ev;
}

static const struct rdzv_job_member *member(struct rdzv_job *job, unsigned node)
{
    int i = rdzv_job_find(job, &peers[node]);

    assert_true(i >= 0);
    return &job->members[i];
}

static struct rdzv_failure failure(uint32_t round)
{
    struct rdzv_failure f = {.round = round, .rank = 3, .exit_code = 1};

    strcpy(f.text, "boom");
    return f;
}

static void test_validate(void **state)
{
    struct rdzv_join j = mkjoin(0, 2, 1, 1);
    struct rdzv_job *job = NULL;

    (void)state;
    assert_int_equal(rdzv_job_validate_join(&j), -EINVAL); /* min > max */
    j = mkjoin(0, 1, 1, 0);
    assert_int_equal(rdzv_job_validate_join(&j), -EINVAL); /* nproc 0 */
    j = mkjoin(0, 0, 1, 1);
    assert_int_equal(rdzv_job_new(&j, &job), -EINVAL);
    j = mkjoin(0, 1, 1, 1);
    j.job_id[0] = '\0';
    assert_int_equal(rdzv_job_validate_join(&j), -EINVAL);
    j = mkjoin(0, 1, 1, 1);
    assert_int_equal(rdzv_job_validate_join(&j), 0);
    job = new_job(1, 2);
    j = mkjoin(1, 1, 3, 1);
    assert_int_equal(rdzv_job_check(job, &j), -EINVAL);
    j = mkjoin(1, 1, 2, 4);
    assert_int_equal(rdzv_job_check(job, &j), 0);
    rdzv_job_free(job);
    rdzv_job_free(NULL);
}

/* max reached: closes at once; rank offsets are prefix sums of nproc in group-rank order. */
static void test_full_round_prefix_sums(void **state)
{
    struct rdzv_job *job = new_job(3, 3);
    struct rdzv_assign a;
    struct rdzv_waiting w;

    (void)state;
    assert_int_equal(join(job, 0, 2, 0), RDZV_JOB_EV_WAITING);
    rdzv_job_waiting(job, 5, &w);
    assert_int_equal(w.joined, 1);
    assert_int_equal(w.last_call_ms_left, -1);
    assert_int_equal(w.join_ms_left, 9995);
    assert_int_equal(join(job, 1, 4, 10), RDZV_JOB_EV_WAITING);
    assert_int_equal(join(job, 2, 1, 20), RDZV_JOB_EV_ASSIGNED);
    assert_int_equal(job->state, RDZV_JOB_RUNNING);
    assert_int_equal(rdzv_job_deadline(job), -1);
    for (unsigned n = 0; n < 3; n++) {
        static const uint32_t offset[] = {0, 2, 6};

        rdzv_job_assign(job, (size_t)rdzv_job_find(job, &peers[n]), &a);
        assert_int_equal(a.round, 0);
        assert_int_equal(a.group_rank, n);
        assert_int_equal(a.group_world_size, 3);
        assert_int_equal(a.rank_offset, offset[n]);
        assert_int_equal(a.world_size, 7);
        assert_int_equal(a.restart_count, 0);
        assert_string_equal(a.master_addr, "10.0.0.0");
        assert_int_equal(a.master_port, 29500);
    }
    rdzv_job_free(job);
}

/* min reached: the last call runs from the min-th join, then the round closes. */
static void test_last_call(void **state)
{
    struct rdzv_job *job = new_job(2, 4);
    struct rdzv_waiting w;

    (void)state;
    join(job, 0, 1, 0);
    assert_int_equal(rdzv_job_deadline(job), 10000);
    join(job, 1, 1, 100);
    assert_int_equal(rdzv_job_deadline(job), 1100);
    rdzv_job_waiting(job, 600, &w);
    assert_int_equal(w.joined, 2);
    assert_int_equal(w.last_call_ms_left, 500);
    assert_int_equal(rdzv_job_tick(job, 1099), RDZV_JOB_EV_NONE);
    assert_int_equal(join(job, 2, 1, 1050), RDZV_JOB_EV_WAITING); /* no new last call */
    assert_int_equal(rdzv_job_deadline(job), 1100);
    assert_int_equal(rdzv_job_tick(job, 1100), RDZV_JOB_EV_ASSIGNED);
    assert_int_equal(job->n_members, 3);
    rdzv_job_free(job);
}

static void test_join_timeout(void **state)
{
    struct rdzv_job *job = new_job(2, 2);
    char text[256];

    (void)state;
    join(job, 0, 1, 0);
    assert_int_equal(rdzv_job_tick(job, 9999), RDZV_JOB_EV_NONE);
    assert_int_equal(rdzv_job_tick(job, 10000), RDZV_JOB_EV_TIMEOUT);
    rdzv_job_timeout_text(job, text, sizeof(text));
    assert_string_equal(text, "rendezvous of job job timed out after 10 s: 1 of 2 nodes "
                              "joined (need 2)");
    rdzv_job_free(job);
}

static void test_join_errors(void **state)
{
    struct rdzv_job *job = new_job(1, 2);
    struct rdzv_join j = mkjoin(0, 1, 2, 1);
    enum rdzv_job_event ev;

    (void)state;
    join(job, 0, 1, 0);
    assert_int_equal(rdzv_job_join(job, &j, "", &peers[0], 0, &ev), -EEXIST);
    assert_int_equal(rdzv_job_join(job, &j, "", &peers[5], 0, &ev), -EEXIST); /* node_id */
    join(job, 1, 1, 0);
    j = mkjoin(2, 1, 2, 1);
    assert_int_equal(rdzv_job_join(job, &j, "", &peers[2], 0, &ev), -EBUSY);
    assert_int_equal(rdzv_job_done(job, &peers[0], 0), RDZV_JOB_EV_NONE);
    assert_int_equal(rdzv_job_done(job, &peers[0], 0), RDZV_JOB_EV_NONE); /* twice: once */
    assert_int_equal(rdzv_job_done(job, &peers[1], 1), RDZV_JOB_EV_NONE); /* stale round */
    assert_int_equal(rdzv_job_done(job, &peers[1], 0), RDZV_JOB_EV_DONE);
    assert_int_equal(job->state, RDZV_JOB_FINISHED);
    assert_int_equal(rdzv_job_join(job, &j, "", &peers[2], 0, &ev), -ESHUTDOWN);
    rdzv_job_free(job);
}

/* Nodes keep their group rank across a restart even when they re-join in another order. */
static void test_restart_keeps_ranks(void **state)
{
    struct rdzv_job *job = new_job(3, 3);
    struct rdzv_failure f = failure(0);
    uint32_t rank[3];

    (void)state;
    join(job, 0, 1, 0);
    join(job, 1, 1, 0);
    join(job, 2, 1, 0);
    for (unsigned n = 0; n < 3; n++)
        rank[n] = member(job, n)->group_rank;
    assert_int_equal(rdzv_job_failed(job, &peers[1], &f, 0), RDZV_JOB_EV_RESTART);
    assert_int_equal(job->restart_count, 1);
    assert_int_equal(job->round, 1);
    assert_int_equal(job->n_members, 0);
    assert_int_equal(job->n_prev, 3); /* RESTART goes to all three, sender included */
    assert_string_equal(job->cause.text, "boom");
    assert_string_equal(job->cause.host, "node1"); /* filled from the member */
    /* later failures of the old round lose: the first one won */
    assert_int_equal(rdzv_job_failed(job, &peers[2], &f, 0), RDZV_JOB_EV_NONE);
    join(job, 2, 1, 50);
    join(job, 0, 1, 60);
    assert_int_equal(join(job, 1, 1, 70), RDZV_JOB_EV_ASSIGNED);
    for (unsigned n = 0; n < 3; n++) {
        struct rdzv_assign a;

        assert_int_equal(member(job, n)->group_rank, rank[n]);
        rdzv_job_assign(job, (size_t)rdzv_job_find(job, &peers[n]), &a);
        assert_int_equal(a.round, 1);
        assert_int_equal(a.restart_count, 1);
    }
    rdzv_job_free(job);
}

/* A replacement node takes the gap; a kept rank beyond the new world size is given up. */
static void test_ranks_fill_gaps(void **state)
{
    struct rdzv_job *job = new_job(2, 3);

    (void)state;
    join(job, 0, 1, 0);
    join(job, 1, 1, 0);
    join(job, 2, 1, 0);
    assert_int_equal(member(job, 2)->group_rank, 2);
    /* node 0 is lost: ranks 1 and 2 survive, node 3 joins first */
    assert_int_equal(rdzv_job_lost(job, &peers[0], 0), RDZV_JOB_EV_RESTART);
    assert_int_equal(job->n_prev, 2);
    assert_int_equal(job->cause.rank, -1);
    assert_string_equal(job->cause.text, "lost node node0: connection closed");
    join(job, 3, 1, 0);
    join(job, 2, 1, 0);
    assert_int_equal(rdzv_job_tick(job, 1000), RDZV_JOB_EV_ASSIGNED); /* last call over */
    /* node 2 had rank 2 >= world size 2: it gives it up and takes the gap after node 3 */
    assert_int_equal(member(job, 3)->group_rank, 0);
    assert_int_equal(member(job, 2)->group_rank, 1);
    rdzv_job_free(job);
}

static void test_restarts_exhausted(void **state)
{
    struct rdzv_job *job = new_job(2, 2);
    struct rdzv_failure f;

    (void)state;
    job->max_restarts = 1;
    join(job, 0, 1, 0);
    join(job, 1, 1, 0);
    f = failure(0);
    assert_int_equal(rdzv_job_failed(job, &peers[0], &f, 0), RDZV_JOB_EV_RESTART);
    join(job, 0, 1, 0);
    join(job, 1, 1, 0);
    f = failure(0); /* stale: names round 0 while round 1 runs */
    assert_int_equal(rdzv_job_failed(job, &peers[1], &f, 0), RDZV_JOB_EV_NONE);
    f = failure(1);
    strcpy(f.text, "root cause");
    assert_int_equal(rdzv_job_failed(job, &peers[1], &f, 0), RDZV_JOB_EV_FAILED);
    assert_int_equal(job->state, RDZV_JOB_FINISHED);
    assert_int_equal(job->restart_count, 1);
    assert_string_equal(job->cause.text, "root cause");
    assert_int_equal(job->n_members, 2); /* JOB_FAILED goes to both */
    assert_int_equal(rdzv_job_failed(job, &peers[0], &f, 0), RDZV_JOB_EV_NONE);
    rdzv_job_free(job);
}

static void test_leave(void **state)
{
    struct rdzv_job *job = new_job(2, 3);
    struct rdzv_failure f = failure(0);

    (void)state;
    join(job, 0, 1, 0);
    join(job, 1, 1, 10);
    assert_true(job->min_reached);
    /* leaving a filling round: just removed, and the last call stops */
    assert_int_equal(rdzv_job_failed(job, &peers[1], &f, 1), RDZV_JOB_EV_WAITING);
    assert_false(job->min_reached);
    assert_int_equal(rdzv_job_deadline(job), 10000);
    join(job, 1, 1, 20);
    join(job, 2, 1, 30);
    assert_int_equal(job->state, RDZV_JOB_RUNNING);
    /* leaving a running round: the leaver gets no RESTART, the others do */
    assert_int_equal(rdzv_job_failed(job, &peers[2], &f, 1), RDZV_JOB_EV_RESTART);
    assert_int_equal(job->n_prev, 2);
    assert_ptr_not_equal(job->prev[0].peer, &peers[2]);
    assert_ptr_not_equal(job->prev[1].peer, &peers[2]);
    rdzv_job_free(job);
}

/* A node that sent DONE and hangs up is no failure; the others can still finish. */
static void test_lost_after_done(void **state)
{
    struct rdzv_job *job = new_job(2, 2);

    (void)state;
    join(job, 0, 1, 0);
    join(job, 1, 1, 0);
    assert_int_equal(rdzv_job_done(job, &peers[0], 0), RDZV_JOB_EV_NONE);
    assert_int_equal(rdzv_job_lost(job, &peers[0], 0), RDZV_JOB_EV_NONE);
    assert_int_equal(rdzv_job_done(job, &peers[1], 0), RDZV_JOB_EV_DONE);
    rdzv_job_free(job);
}

static void test_lost_while_filling(void **state)
{
    struct rdzv_job *job = new_job(2, 2);

    (void)state;
    join(job, 0, 1, 0);
    assert_int_equal(rdzv_job_lost(job, &peers[0], 0), RDZV_JOB_EV_WAITING);
    assert_int_equal(job->n_members, 0);
    assert_int_equal(rdzv_job_deadline(job), -1);
    assert_int_equal(rdzv_job_lost(job, &peers[1], 0), RDZV_JOB_EV_NONE); /* never joined */
    rdzv_job_free(job);
}

/* Reaching min but not the end of the last call by the join deadline: run with what joined. */
static void test_timeout_with_min_closes(void **state)
{
    struct rdzv_job *job = new_job(1, 3);

    (void)state;
    job->last_call_ms = 60000;
    join(job, 0, 2, 0);
    assert_int_equal(rdzv_job_deadline(job), 10000);
    assert_int_equal(rdzv_job_tick(job, 10000), RDZV_JOB_EV_ASSIGNED);
    assert_int_equal(job->world_size, 2);
    rdzv_job_free(job);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_full_round_prefix_sums),
        cmocka_unit_test(test_last_call),
        cmocka_unit_test(test_join_timeout),
        cmocka_unit_test(test_join_errors),
        cmocka_unit_test(test_restart_keeps_ranks),
        cmocka_unit_test(test_ranks_fill_gaps),
        cmocka_unit_test(test_restarts_exhausted),
        cmocka_unit_test(test_leave),
        cmocka_unit_test(test_lost_after_done),
        cmocka_unit_test(test_lost_while_filling),
        cmocka_unit_test(test_timeout_with_min_closes),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
