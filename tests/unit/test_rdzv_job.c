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
    assert_int_equal(rdzv_job_join(job, &j, addr, addr, &peers[node], now, &ev), 0);
    return ev;
}

/* Nodes 0..n-1 (one process each) JOIN at time 0. */
static void join_n(struct rdzv_job *job, unsigned n)
{
    for (unsigned node = 0; node < n; node++)
        join(job, node, 1, 0);
}

/* A job of min..max nodes that nodes 0..n-1 (one process each) joined at time 0. */
static struct rdzv_job *joined_job(unsigned min, unsigned max, unsigned n)
{
    struct rdzv_job *job = new_job(min, max);

    join_n(job, n);
    return job;
}

/* node's connection closed at now_ms (wall time 0). */
static enum rdzv_job_event lose(struct rdzv_job *job, unsigned node, uint64_t now_ms)
{
    return rdzv_job_lost(job, &peers[node], "connection closed", now_ms, 0);
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

/* A script failure with signature sig in round r. */
static struct rdzv_failure sig_failure(uint32_t round, uint8_t cls, const char *sig)
{
    struct rdzv_failure f = failure(round);

    f.sig_class = cls;
    snprintf(f.sig, sizeof(f.sig), "%s", sig);
    return f;
}

/* Nodes 0 and 1 run round r; node `who` fails it with f. */
static enum rdzv_job_event fail_round(struct rdzv_job *job, unsigned who, struct rdzv_failure f)
{
    if (job->state == RDZV_JOB_FILLING)
        join_n(job, 2);
    assert_int_equal(job->state, RDZV_JOB_RUNNING);
    f.round = job->round;
    return rdzv_job_failed(job, &peers[who], &f, 0, 0);
}

/* --max-same-failure 2 (the default): the same script error in two attempts in a row ends the
 * job at once, not retryable, with restarts left; a different one, an infrastructure failure or
 * a newer checkpoint in between starts the count again. */
static void test_same_failure(void **state)
{
    static const char ke[] = "KeyError at train.py:88 in load_batch";
    struct rdzv_job *job = new_job(2, 2);

    (void)state;
    job->max_restarts = 50;
    assert_int_equal(job->max_same_failure, RDZV_SAME_FAILURE_DEFAULT);
    assert_int_equal(fail_round(job, 0, sig_failure(0, RDZV_SIG_SCRIPT, ke)), RDZV_JOB_EV_RESTART);
    /* another signature: a new run of one */
    assert_int_equal(
        fail_round(job, 1, sig_failure(0, RDZV_SIG_SCRIPT, "ValueError at a.py:1 in f")),
        RDZV_JOB_EV_RESTART);
    assert_int_equal(fail_round(job, 0, sig_failure(0, RDZV_SIG_SCRIPT, ke)), RDZV_JOB_EV_RESTART);
    /* a kill from outside, a lost node, a network error, no signature: each ends the run */
    assert_int_equal(fail_round(job, 0, sig_failure(0, RDZV_SIG_SIGNAL, "signal 9 (SIGKILL)")),
                     RDZV_JOB_EV_RESTART);
    assert_int_equal(fail_round(job, 0, sig_failure(0, RDZV_SIG_SCRIPT, ke)), RDZV_JOB_EV_RESTART);
    join_n(job, 2);
    assert_int_equal(lose(job, 1, 0), RDZV_JOB_EV_RESTART);
    assert_int_equal(job->cause.sig_class, RDZV_SIG_LOST);
    assert_int_equal(fail_round(job, 0, sig_failure(0, RDZV_SIG_SCRIPT, ke)), RDZV_JOB_EV_RESTART);
    assert_int_equal(fail_round(job, 0, failure(0)), RDZV_JOB_EV_RESTART); /* an older agent */
    assert_int_equal(fail_round(job, 0, sig_failure(0, RDZV_SIG_SCRIPT, ke)), RDZV_JOB_EV_RESTART);
    /* a newer checkpoint between two: progress, the count starts again */
    join_n(job, 2);
    rdzv_job_checkpoint(job, "ckpt_100.pt", 100);
    assert_int_equal(fail_round(job, 0, sig_failure(0, RDZV_SIG_SCRIPT, ke)), RDZV_JOB_EV_RESTART);
    /* an old checkpoint named again (a step not newer) is no progress */
    join_n(job, 2);
    rdzv_job_checkpoint(job, "ckpt_100.pt", 100);
    rdzv_job_checkpoint(job, "ckpt_50.pt", 50);
    /* a peer claiming the verdict itself has it cleared; the server's own is set */
    {
        struct rdzv_failure f = sig_failure(0, RDZV_SIG_SCRIPT, ke);
        uint32_t restarts = job->restart_count;
        f.flags = RDZV_FAILURE_NOT_RETRYABLE;
        assert_int_equal(fail_round(job, 1, f), RDZV_JOB_EV_FAILED);
        assert_int_equal(job->restart_count, restarts); /* no restart spent on it */
    }
    assert_int_equal(job->state, RDZV_JOB_FINISHED);
    assert_true(job->cause.flags & RDZV_FAILURE_NOT_RETRYABLE);
    assert_int_equal(job->same_count, 2);
    assert_string_equal(job->cause.sig, ke);
    rdzv_job_free(job);

    /* a peer's NOT_RETRYABLE on a first failure is not the server's verdict */
    job = new_job(2, 2);
    {
        struct rdzv_failure f = sig_failure(0, RDZV_SIG_SCRIPT, ke);
        f.flags = RDZV_FAILURE_NOT_RETRYABLE;
        assert_int_equal(fail_round(job, 1, f), RDZV_JOB_EV_RESTART);
        assert_false(job->cause.flags & RDZV_FAILURE_NOT_RETRYABLE);
    }
    rdzv_job_free(job);
}

/* OOM is limited like a script error; network errors, hangs and unknown classes never are; K
 * from the first JOIN (1 + K on the wire, 1 = off); stepless checkpoints count by name. */
static void test_same_failure_classes(void **state)
{
    struct rdzv_join j = mkjoin(0, 2, 2, 1);
    struct rdzv_job *job = NULL;

    (void)state;
    j.max_restarts = 20;
    j.same_failure = 1 + 3; /* --max-same-failure 3 */
    assert_int_equal(rdzv_job_new(&j, &job), 0);
    assert_int_equal(job->max_same_failure, 3);
    for (int i = 0; i < 4; i++)
        assert_int_equal(
            fail_round(job, 0, sig_failure(0, RDZV_SIG_NETWORK, "network: NCCL error")),
            RDZV_JOB_EV_RESTART);
    for (int i = 0; i < 4; i++)
        assert_int_equal(fail_round(job, 0, sig_failure(0, 99, "from a newer agent")),
                         RDZV_JOB_EV_RESTART);
    for (int i = 0; i < 4; i++)
        assert_int_equal(fail_round(job, 0, sig_failure(0, RDZV_SIG_HANG, "hang")),
                         RDZV_JOB_EV_RESTART);
    assert_int_equal(fail_round(job, 0, sig_failure(0, RDZV_SIG_OOM, "CUDA out of memory")),
                     RDZV_JOB_EV_RESTART);
    join_n(job, 2);
    rdzv_job_checkpoint(job, "latest", -1); /* a stepless name, new */
    assert_int_equal(fail_round(job, 0, sig_failure(0, RDZV_SIG_OOM, "CUDA out of memory")),
                     RDZV_JOB_EV_RESTART);
    join_n(job, 2);
    rdzv_job_checkpoint(job, "latest", -1); /* the same name again: no progress */
    assert_int_equal(fail_round(job, 0, sig_failure(0, RDZV_SIG_OOM, "CUDA out of memory")),
                     RDZV_JOB_EV_RESTART);
    assert_int_equal(fail_round(job, 1, sig_failure(0, RDZV_SIG_OOM, "CUDA out of memory")),
                     RDZV_JOB_EV_FAILED);
    assert_true(job->cause.flags & RDZV_FAILURE_NOT_RETRYABLE);
    rdzv_job_free(job);

    j.same_failure = 1; /* off */
    assert_int_equal(rdzv_job_new(&j, &job), 0);
    for (int i = 0; i < 20; i++)
        assert_int_equal(fail_round(job, 0, sig_failure(0, RDZV_SIG_SCRIPT, "KeyError")),
                         RDZV_JOB_EV_RESTART);
    assert_int_equal(fail_round(job, 0, sig_failure(0, RDZV_SIG_SCRIPT, "KeyError")),
                     RDZV_JOB_EV_FAILED); /* restarts spent: the worker's own code */
    assert_false(job->cause.flags & RDZV_FAILURE_NOT_RETRYABLE);
    rdzv_job_free(job);
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
    assert_int_equal(rdzv_job_tick(job, 1099, 0), RDZV_JOB_EV_NONE);
    assert_int_equal(join(job, 2, 1, 1050), RDZV_JOB_EV_WAITING); /* no new last call */
    assert_int_equal(rdzv_job_deadline(job), 1100);
    assert_int_equal(rdzv_job_tick(job, 1100, 0), RDZV_JOB_EV_ASSIGNED);
    assert_int_equal(job->n_members, 3);
    rdzv_job_free(job);
}

static void test_join_timeout(void **state)
{
    struct rdzv_job *job = new_job(2, 2);
    char text[256];

    (void)state;
    join(job, 0, 1, 0);
    assert_int_equal(rdzv_job_tick(job, 9999, 0), RDZV_JOB_EV_NONE);
    assert_int_equal(rdzv_job_tick(job, 10000, 0), RDZV_JOB_EV_TIMEOUT);
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
    assert_int_equal(rdzv_job_join(job, &j, "", "", &peers[0], 0, &ev), -EEXIST);
    assert_int_equal(rdzv_job_join(job, &j, "", "", &peers[5], 0, &ev), -EEXIST); /* node_id */
    join(job, 1, 1, 0);
    j = mkjoin(2, 1, 2, 1);
    /* the round runs full (max 2): a third node waits for a later round */
    assert_int_equal(rdzv_job_join(job, &j, "", "", &peers[2], 0, &ev), 0);
    assert_int_equal(ev, RDZV_JOB_EV_PENDING);
    assert_int_equal(job->n_pending, 1);
    assert_int_equal(rdzv_job_join(job, &j, "", "", &peers[2], 0, &ev), -EEXIST);
    assert_int_equal(rdzv_job_done(job, &peers[0], 0), RDZV_JOB_EV_NONE);
    assert_int_equal(rdzv_job_done(job, &peers[0], 0), RDZV_JOB_EV_NONE); /* twice: once */
    assert_int_equal(rdzv_job_done(job, &peers[1], 1), RDZV_JOB_EV_NONE); /* stale round */
    assert_int_equal(rdzv_job_done(job, &peers[1], 0), RDZV_JOB_EV_DONE);
    assert_int_equal(job->state, RDZV_JOB_FINISHED);
    assert_int_equal(rdzv_job_join(job, &j, "", "", &peers[2], 0, &ev), -ESHUTDOWN);
    rdzv_job_free(job);
}

/* Nodes keep their group rank across a restart even when they re-join in another order. */
static void test_restart_keeps_ranks(void **state)
{
    struct rdzv_job *job = joined_job(3, 3, 3);
    struct rdzv_failure f = failure(0);
    uint32_t rank[3];

    (void)state;
    for (unsigned n = 0; n < 3; n++)
        rank[n] = member(job, n)->group_rank;
    assert_int_equal(rdzv_job_failed(job, &peers[1], &f, 0, 0), RDZV_JOB_EV_RESTART);
    assert_int_equal(job->restart_count, 1);
    assert_int_equal(job->round, 1);
    assert_int_equal(job->n_members, 0);
    assert_int_equal(job->n_prev, 3); /* RESTART goes to all three, sender included */
    assert_string_equal(job->cause.text, "boom");
    assert_string_equal(job->cause.host, "node1"); /* filled from the member */
    /* later failures of the old round lose: the first one won */
    assert_int_equal(rdzv_job_failed(job, &peers[2], &f, 0, 0), RDZV_JOB_EV_NONE);
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
    struct rdzv_job *job = joined_job(2, 3, 3);

    (void)state;
    assert_int_equal(member(job, 2)->group_rank, 2);
    /* node 0 is lost: ranks 1 and 2 survive, node 3 joins first */
    assert_int_equal(lose(job, 0, 0), RDZV_JOB_EV_RESTART);
    assert_int_equal(job->n_prev, 2);
    assert_int_equal(job->cause.rank, -1);
    assert_string_equal(job->cause.text, "lost node node0 (10.0.0.0): connection closed");
    join(job, 3, 1, 0);
    join(job, 2, 1, 0);
    assert_int_equal(rdzv_job_tick(job, 1000, 0), RDZV_JOB_EV_ASSIGNED); /* last call over */
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
    join_n(job, 2);
    f = failure(0);
    assert_int_equal(rdzv_job_failed(job, &peers[0], &f, 0, 0), RDZV_JOB_EV_RESTART);
    join_n(job, 2);
    f = failure(0); /* stale: names round 0 while round 1 runs */
    assert_int_equal(rdzv_job_failed(job, &peers[1], &f, 0, 0), RDZV_JOB_EV_NONE);
    f = failure(1);
    strcpy(f.text, "root cause");
    assert_int_equal(rdzv_job_failed(job, &peers[1], &f, 0, 0), RDZV_JOB_EV_FAILED);
    assert_int_equal(job->state, RDZV_JOB_FINISHED);
    assert_int_equal(job->restart_count, 1);
    assert_string_equal(job->cause.text, "root cause");
    assert_int_equal(job->n_members, 2); /* JOB_FAILED goes to both */
    assert_int_equal(rdzv_job_failed(job, &peers[0], &f, 0, 0), RDZV_JOB_EV_NONE);
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
    assert_int_equal(rdzv_job_failed(job, &peers[1], &f, 1, 0), RDZV_JOB_EV_WAITING);
    assert_false(job->min_reached);
    assert_int_equal(rdzv_job_deadline(job), 10000);
    join(job, 1, 1, 20);
    join(job, 2, 1, 30);
    assert_int_equal(job->state, RDZV_JOB_RUNNING);
    /* leaving a running round: the leaver gets no RESTART, the others do */
    assert_int_equal(rdzv_job_failed(job, &peers[2], &f, 1, 0), RDZV_JOB_EV_RESTART);
    assert_int_equal(job->n_prev, 2);
    assert_ptr_not_equal(job->prev[0].peer, &peers[2]);
    assert_ptr_not_equal(job->prev[1].peer, &peers[2]);
    rdzv_job_free(job);
}

/* A node that sent DONE and hangs up is no failure; the others can still finish. */
static void test_lost_after_done(void **state)
{
    struct rdzv_job *job = joined_job(2, 2, 2);

    (void)state;
    assert_int_equal(rdzv_job_done(job, &peers[0], 0), RDZV_JOB_EV_NONE);
    assert_int_equal(lose(job, 0, 0), RDZV_JOB_EV_NONE);
    assert_int_equal(rdzv_job_done(job, &peers[1], 0), RDZV_JOB_EV_DONE);
    rdzv_job_free(job);
}

static void test_lost_while_filling(void **state)
{
    struct rdzv_job *job = new_job(2, 2);

    (void)state;
    join(job, 0, 1, 0);
    assert_int_equal(lose(job, 0, 0), RDZV_JOB_EV_WAITING);
    assert_int_equal(job->n_members, 0);
    assert_int_equal(rdzv_job_deadline(job), -1);
    assert_int_equal(lose(job, 1, 0), RDZV_JOB_EV_NONE); /* never joined */
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
    assert_int_equal(rdzv_job_tick(job, 10000, 0), RDZV_JOB_EV_ASSIGNED);
    assert_int_equal(job->world_size, 2);
    rdzv_job_free(job);
}

/* A JOIN while a round with room runs starts a new round without counting a restart; the
 * joiner is in it at once and the old members keep their ranks. */
static void test_scale_up(void **state)
{
    struct rdzv_job *job = new_job(1, 3);

    (void)state;
    job->last_call_ms = 0;
    assert_int_equal(join(job, 0, 2, 0), RDZV_JOB_EV_ASSIGNED);
    assert_int_equal(job->round, 0);
    assert_int_equal(join(job, 1, 2, 5), RDZV_JOB_EV_RESTART);
    assert_int_equal(job->restart_count, 0);
    assert_int_equal(job->round, 1);
    assert_string_equal(job->cause.text, "scale-up: node1 joined");
    assert_int_equal(job->cause.rank, -1);
    assert_int_equal(job->cause.exit_code, -1);
    assert_int_equal(job->cause.signal, 0);
    /* min 1 with no last call: node 1 alone closes the new round... */
    assert_int_equal(job->state, RDZV_JOB_RUNNING);
    assert_int_equal(job->n_members, 1);
    rdzv_job_free(job);

    job = new_job(2, 3);
    job->last_call_ms = 100;
    join_n(job, 2);
    assert_int_equal(rdzv_job_tick(job, 100, 0), RDZV_JOB_EV_ASSIGNED);
    assert_int_equal(join(job, 2, 1, 200), RDZV_JOB_EV_RESTART);
    assert_int_equal(job->state, RDZV_JOB_FILLING); /* ...with a last call, it waits */
    assert_int_equal(job->n_members, 1);
    assert_int_equal(job->n_prev, 2);
    join(job, 1, 1, 210);
    assert_int_equal(join(job, 0, 1, 220), RDZV_JOB_EV_ASSIGNED); /* max reached */
    assert_int_equal(member(job, 0)->group_rank, 0);
    assert_int_equal(member(job, 1)->group_rank, 1);
    assert_int_equal(member(job, 2)->group_rank, 2);
    assert_int_equal(job->restart_count, 0);
    rdzv_job_free(job);
}

/* A pending joiner enters the round after a failure, behind the survivors; a lost pending
 * joiner just disappears. */
static void test_pending_enters_next_round(void **state)
{
    struct rdzv_job *job = joined_job(2, 2, 2);
    struct rdzv_failure f = failure(0);

    (void)state;
    assert_int_equal(join(job, 2, 1, 0), RDZV_JOB_EV_PENDING);
    assert_int_equal(join(job, 3, 1, 0), RDZV_JOB_EV_PENDING);
    assert_int_equal(lose(job, 3, 0), RDZV_JOB_EV_NONE);
    assert_int_equal(job->n_pending, 1);
    /* node 1 is lost: node 0 survives, the one free place goes to node 2 */
    assert_int_equal(rdzv_job_lost(job, &peers[1], "no heartbeat for 0.2 s", 10, 0),
                     RDZV_JOB_EV_RESTART);
    assert_string_equal(job->cause.text, "lost node node1 (10.0.0.1): no heartbeat for 0.2 s");
    assert_int_equal(job->restart_count, 1);
    assert_int_equal(job->n_pending, 0);
    assert_int_equal(job->n_members, 1);
    assert_int_equal(join(job, 0, 1, 20), RDZV_JOB_EV_ASSIGNED);
    assert_int_equal(member(job, 0)->group_rank, 0); /* rank 0 stays where it was */
    assert_int_equal(member(job, 2)->group_rank, 1);
    (void)f;
    rdzv_job_free(job);
}

/* Four nodes, rank 1 lost, min 3: ranks 0 and 2 stay, rank 3 moves into the gap. */
static void test_rank_gaps_compact(void **state)
{
    struct rdzv_job *job = new_job(3, 4);

    (void)state;
    for (unsigned i = 0; i < 4; i++)
        join(job, i, 1, 0);
    assert_int_equal(lose(job, 1, 0), RDZV_JOB_EV_RESTART);
    join(job, 3, 1, 1);
    join(job, 2, 1, 2);
    join(job, 0, 1, 3);
    assert_int_equal(rdzv_job_tick(job, 1003, 0), RDZV_JOB_EV_ASSIGNED);
    assert_int_equal(member(job, 0)->group_rank, 0);
    assert_int_equal(member(job, 2)->group_rank, 2);
    assert_int_equal(member(job, 3)->group_rank, 1);
    assert_int_equal(member(job, 3)->rank_offset, 1);
    rdzv_job_free(job);
}

static struct rdzv_rejoin mkrejoin(unsigned node, uint32_t round, uint32_t rank, uint32_t n)
{
    struct rdzv_rejoin rj = {.join = mkjoin(node, 2, 3, 2), .running = 1};

    rj.join.reconnect_grace_ms = 500;
    rj.join.max_restarts = 10;
    rj.assign = (struct rdzv_assign){.round = round,
                                     .group_rank = rank,
                                     .group_world_size = n,
                                     .rank_offset = 2 * rank,
                                     .world_size = 2 * n,
                                     .restart_count = 4,
                                     .master_addr = "10.0.0.9",
                                     .master_port = 29500};
    return rj;
}

/* A fresh job adopts the round of the REJOINs; all members back = an ordinary running round. */
static void test_rejoin_rebuild(void **state)
{
    struct rdzv_rejoin rj = mkrejoin(0, 7, 1, 2);
    struct rdzv_job *job = NULL;
    enum rdzv_job_event ev;
    void *old;

    (void)state;
    assert_int_equal(rdzv_job_new(&rj.join, &job), 0);
    assert_int_equal(rdzv_job_rejoin(job, &rj, "10.0.0.0", "10.0.0.0", &peers[0], 100, &old, &ev),
                     0);
    assert_null(old);
    assert_int_equal(ev, RDZV_JOB_EV_NONE);
    assert_int_equal(job->state, RDZV_JOB_RUNNING);
    assert_int_equal(job->round, 7);
    assert_int_equal(job->restart_count, 4);
    assert_true(job->rebuilding);
    assert_int_equal(rdzv_job_deadline(job), 600);
    assert_int_equal(rdzv_job_done(job, &peers[0], 7), RDZV_JOB_EV_NONE); /* rank 0 missing */
    rj = mkrejoin(1, 6, 0, 2);                                            /* an older round */
    assert_int_equal(rdzv_job_rejoin(job, &rj, "", "", &peers[1], 100, &old, &ev), -ESTALE);
    rj = mkrejoin(1, 7, 1, 2); /* rank taken */
    assert_int_equal(rdzv_job_rejoin(job, &rj, "", "", &peers[1], 100, &old, &ev), -ESTALE);
    rj = mkrejoin(1, 7, 0, 2);
    rj.done = 1;
    assert_int_equal(rdzv_job_rejoin(job, &rj, "10.0.0.1", "10.0.0.1", &peers[1], 100, &old, &ev),
                     0);
    assert_int_equal(ev, RDZV_JOB_EV_DONE); /* node 0 was done already, node 1 just said so */
    rdzv_job_free(job);
}

/* A member that reconnects to a live job in the same round is re-attached; the grace expiring
 * with a member missing is a lost node. */
static void test_rejoin_reattach_and_grace(void **state)
{
    struct rdzv_rejoin rj = mkrejoin(0, 0, 0, 3);
    struct rdzv_job *job = NULL;
    enum rdzv_job_event ev;
    void *old;

    (void)state;
    assert_int_equal(rdzv_job_new(&rj.join, &job), 0);
    assert_int_equal(rdzv_job_rejoin(job, &rj, "", "", &peers[0], 0, &old, &ev), 0);
    rj = mkrejoin(1, 0, 1, 3);
    assert_int_equal(rdzv_job_rejoin(job, &rj, "", "", &peers[1], 0, &old, &ev), 0);
    assert_int_equal(rdzv_job_rejoin(job, &rj, "", "", &peers[5], 10, &old, &ev), 0);
    assert_ptr_equal(old, &peers[1]);
    assert_int_equal(rdzv_job_find(job, &peers[5]), 1);
    assert_int_equal(rdzv_job_tick(job, 499, 0), RDZV_JOB_EV_NONE);
    assert_int_equal(rdzv_job_tick(job, 500, 0), RDZV_JOB_EV_RESTART);
    assert_string_equal(job->cause.text,
                        "lost node with group rank 2: did not reconnect within 0.5 s");
    assert_int_equal(job->restart_count, 5);
    assert_int_equal(job->round, 1);
    assert_int_equal(job->n_prev, 2);
    rj = mkrejoin(2, 0, 2, 3); /* too late: the job moved on */
    assert_int_equal(rdzv_job_rejoin(job, &rj, "", "", &peers[2], 600, &old, &ev), -ESTALE);
    rdzv_job_free(job);
}

/* JOIN of `node` that would resume from "<name>" (step); "" = none. */
static enum rdzv_job_event join_resume(struct rdzv_job *job, unsigned node, const char *name,
                                       int64_t step, uint64_t now)
{
    struct rdzv_join j = mkjoin(node, job->min_nodes, job->max_nodes, 1);
    enum rdzv_job_event ev = RDZV_JOB_EV_NONE;

    snprintf(j.resume, sizeof(j.resume), "%s", name);
    j.resume_step = step;
    assert_int_equal(rdzv_job_join(job, &j, "10.0.0.1", "10.0.0.1", &peers[node], now, &ev), 0);
    return ev;
}

/* Nodes 0..n-1 JOIN at now, all resuming from "<name>" (step). */
static void join_resume_all(struct rdzv_job *job, unsigned n, const char *name, int64_t step,
                            uint64_t now)
{
    for (unsigned node = 0; node < n; node++)
        join_resume(job, node, name, step, now);
}

/* Every member's ASSIGN names the same resume point. */
static void assert_all_resume(struct rdzv_job *job, const char *name, int64_t step)
{
    assert_int_equal(job->state, RDZV_JOB_RUNNING);
    for (size_t i = 0; i < job->n_members; i++) {
        struct rdzv_assign a;

        rdzv_job_assign(job, i, &a);
        assert_string_equal(a.resume, name);
        assert_int_equal(a.resume_step, step);
    }
}

/* node (its node id 100 + node) holds part `part` of `parts` of name (step); empty: it wrote
 * nothing of it. */
static void hold_part(struct rdzv_job *job, unsigned node, const char *name, int64_t step,
                      uint32_t part, uint32_t parts, int empty)
{
    struct rdzv_ckpt ck = {.step = step, .part = part, .parts = parts, .checksum = 7 + part};

    snprintf(ck.name, sizeof(ck.name), "%s", name);
    ck.part_flags = empty ? RDZV_CKPT_PART_EMPTY : 0;
    assert_int_equal(rdzv_parts_add(&job->parts, &ck, 100 + node), 0);
}

/* A sharded checkpoint: the new round resumes from the newest step whose every part its members
 * hold between them, not from rank 0's pick, and ASSIGN says of how many parts; a step whose
 * lost node's part has no copy on a member is no checkpoint; none complete: from scratch;
 * dropped parts no longer count; only empty parts elsewhere is no sharded job at all. */
static void test_resume_sharded(void **state)
{
    struct rdzv_job *job = new_job(2, 3);
    struct rdzv_assign a;
    struct rdzv_ckpt drop = {.part = 0};

    (void)state;
    join_resume_all(job, 3, "", -1, 0);
    /* step-10: parts 1 (node 0), 2 (node 1), 3 (node 2) and node 2's copy on node 0 */
    hold_part(job, 0, "step-10", 10, 1, 3, 0);
    hold_part(job, 1, "step-10", 10, 2, 3, 0);
    hold_part(job, 2, "step-10", 10, 3, 3, 0);
    hold_part(job, 0, "step-10", 10, 3, 3, 0);
    /* step-20: node 2's part has no copy yet */
    hold_part(job, 0, "step-20", 20, 1, 3, 0);
    hold_part(job, 1, "step-20", 20, 2, 3, 0);
    hold_part(job, 2, "step-20", 20, 3, 3, 0);
    assert_int_equal(lose(job, 2, 0), RDZV_JOB_EV_RESTART);
    join_resume(job, 0, "step-20", 20, 10); /* rank 0's own pick: its part of step-20 */
    join_resume(job, 1, "", -1, 20);
    assert_int_equal(rdzv_job_tick(job, 1020, 0), RDZV_JOB_EV_ASSIGNED);
    assert_all_resume(job, "step-10", 10);
    rdzv_job_assign(job, 0, &a);
    assert_int_equal(a.resume_parts, 3);

    /* node 0's copy of node 2's part pruned: nothing complete among nodes 0 and 1 */
    snprintf(drop.name, sizeof(drop.name), "step-10");
    drop.part = 3;
    rdzv_parts_drop(job->parts, &drop, 100);
    assert_int_equal(lose(job, 1, 30), RDZV_JOB_EV_RESTART);
    join_resume(job, 0, "step-20", 20, 40);
    join_resume(job, 1, "", -1, 50);
    assert_int_equal(rdzv_job_tick(job, 3000, 0), RDZV_JOB_EV_ASSIGNED);
    assert_all_resume(job, "", -1);
    rdzv_job_assign(job, 0, &a);
    assert_int_equal(a.resume_parts, 0);
    rdzv_job_free(job);

    /* parts that are all empty but rank 0's: a rank-0-only job, rank 0's pick as before */
    job = new_job(2, 3);
    join_resume_all(job, 3, "", -1, 0);
    hold_part(job, 0, "ckpt.pt", -1, 1, 3, 0);
    hold_part(job, 1, "ckpt.pt", -1, 2, 3, 1);
    hold_part(job, 2, "ckpt.pt", -1, 3, 3, 1);
    assert_int_equal(rdzv_parts_sharded(job->parts), 0);
    assert_int_equal(lose(job, 2, 0), RDZV_JOB_EV_RESTART);
    join_resume(job, 0, "ckpt.pt", -1, 10);
    join_resume(job, 1, "", -1, 20);
    assert_int_equal(rdzv_job_tick(job, 1020, 0), RDZV_JOB_EV_ASSIGNED);
    assert_all_resume(job, "ckpt.pt", -1);
    rdzv_job_assign(job, 0, &a);
    assert_int_equal(a.resume_parts, 0);
    rdzv_job_free(job);
}

/* A member flooding part reports: the table keeps the newest RDZV_PARTS_RECS (the oldest go),
 * and a round still closes on what is complete. */
static void test_parts_flood_bounded(void **state)
{
    struct rdzv_job *job = new_job(2, 2);
    struct rdzv_ckpt ck = {.step = 1, .part = 2, .parts = RDZV_PARTS_MAX};
    struct rdzv_assign a;

    (void)state;
    join_resume_all(job, 2, "", -1, 0);
    for (unsigned i = 0; i < RDZV_PARTS_RECS + 500; i++) {
        snprintf(ck.name, sizeof(ck.name), "junk-%u", i);
        assert_int_equal(rdzv_parts_add(&job->parts, &ck, 101), 0);
    }
    assert_int_equal(job->parts->n, RDZV_PARTS_RECS);
    for (size_t i = 0; i < job->parts->n; i++) /* the first ones went */
        assert_string_not_equal(job->parts->recs[i].name, "junk-0");
    hold_part(job, 0, "step-9", 9, 1, 2, 0);
    hold_part(job, 1, "step-9", 9, 2, 2, 0);
    assert_int_equal(job->parts->n, RDZV_PARTS_RECS);
    assert_int_equal(lose(job, 1, 0), RDZV_JOB_EV_RESTART);
    join_resume(job, 0, "", -1, 10);
    assert_int_equal(join_resume(job, 1, "", -1, 20), RDZV_JOB_EV_ASSIGNED); /* max: at once */
    assert_all_resume(job, "step-9", 9);
    rdzv_job_assign(job, 0, &a);
    assert_int_equal(a.resume_parts, 2);
    rdzv_job_free(job);
}

/* Three nodes would resume from different checkpoints: all get group rank 0's. */
static void test_resume_from_rank0(void **state)
{
    struct rdzv_job *job = new_job(3, 3);

    (void)state;
    join_resume(job, 1, "step-30", 30, 0); /* first to join: group rank 0 */
    join_resume(job, 0, "step-10", 10, 0);
    assert_int_equal(join_resume(job, 2, "", -1, 0), RDZV_JOB_EV_ASSIGNED);
    assert_int_equal(member(job, 1)->group_rank, 0);
    assert_all_resume(job, "step-30", 30);
    rdzv_job_free(job);
}

/* A node other than rank 0 is lost: rank 0 keeps its rank when no node resumes from a newer
 * checkpoint, and its NEW choice decides (it may have found its newest one corrupt since). */
static void test_resume_rank0_survives(void **state)
{
    struct rdzv_job *job = new_job(2, 3);

    (void)state;
    join_resume_all(job, 3, "step-10", 10, 0);
    assert_all_resume(job, "step-10", 10);
    assert_int_equal(lose(job, 2, 0), RDZV_JOB_EV_RESTART);
    join_resume(job, 1, "step-05", 5, 10); /* joins first, but node 0 keeps rank 0 */
    join_resume(job, 0, "step-05", 5, 20);
    assert_int_equal(rdzv_job_tick(job, 1020, 0), RDZV_JOB_EV_ASSIGNED);
    assert_int_equal(member(job, 0)->group_rank, 0);
    assert_all_resume(job, "step-05", 5);
    rdzv_job_free(job);
}

/* A node resuming from a strictly newer checkpoint (a replica) takes group rank 0
 * from the node that held it; the old rank 0 fills a gap. */
static void test_resume_newest_takes_rank0(void **state)
{
    struct rdzv_job *job = new_job(2, 3);

    (void)state;
    join_resume(job, 0, "step-10", 10, 0);
    join_resume(job, 1, "", -1, 0);
    join_resume(job, 2, "", -1, 0);
    assert_int_equal(member(job, 0)->group_rank, 0);
    assert_int_equal(lose(job, 1, 0), RDZV_JOB_EV_RESTART);
    join_resume(job, 0, "step-10", 10, 10);
    join_resume(job, 2, "step-20", 20, 20); /* a replica of a newer one */
    assert_int_equal(rdzv_job_tick(job, 1020, 0), RDZV_JOB_EV_ASSIGNED);
    assert_int_equal(member(job, 2)->group_rank, 0);
    assert_int_equal(member(job, 0)->group_rank, 1);
    assert_all_resume(job, "step-20", 20);
    rdzv_job_free(job);
}

/* The rank-0 node is lost: the surviving node with the newest checkpoint becomes rank 0 (its
 * sticky rank 1 notwithstanding), so the round resumes from a checkpoint it holds. */
static void test_resume_rank0_lost(void **state)
{
    struct rdzv_job *job = new_job(2, 3);

    (void)state;
    join_resume_all(job, 3, "step-10", 10, 0);
    assert_int_equal(lose(job, 0, 0), RDZV_JOB_EV_RESTART);
    join_resume(job, 1, "step-10", 10, 10);
    join_resume(job, 2, "", -1, 20);
    assert_int_equal(rdzv_job_tick(job, 1020, 0), RDZV_JOB_EV_ASSIGNED);
    assert_int_equal(member(job, 1)->group_rank, 0);
    assert_int_equal(member(job, 2)->group_rank, 1);
    assert_all_resume(job, "step-10", 10);
    rdzv_job_free(job);
}

/* A job rebuilt after a server restart keeps the resume point of the round it adopted, not
 * what a member's (saved, older) JOIN said. */
static void test_resume_rejoin_keeps_round(void **state)
{
    struct rdzv_rejoin rj = mkrejoin(0, 3, 1, 2);
    struct rdzv_job *job = NULL;
    enum rdzv_job_event ev;
    void *old;

    (void)state;
    strcpy(rj.join.resume, "step-99");
    rj.join.resume_step = 99;
    strcpy(rj.assign.resume, "step-50");
    rj.assign.resume_step = 50;
    assert_int_equal(rdzv_job_new(&rj.join, &job), 0);
    assert_int_equal(rdzv_job_rejoin(job, &rj, "10.0.0.0", "10.0.0.0", &peers[0], 0, &old, &ev), 0);
    rj = mkrejoin(1, 3, 0, 2);
    strcpy(rj.assign.resume, "step-50");
    rj.assign.resume_step = 50;
    assert_int_equal(rdzv_job_rejoin(job, &rj, "10.0.0.1", "10.0.0.1", &peers[1], 0, &old, &ev), 0);
    assert_false(job->rebuilding);
    assert_all_resume(job, "step-50", 50);
    rdzv_job_free(job);
}

/* --restart-backoff: the server holds the next round's ASSIGN for the delay, even
 * when every node re-joined at once; the delays double and a healthy round resets them. */
static void test_restart_backoff_holds_round(void **state)
{
    struct rdzv_join j = mkjoin(0, 2, 2, 1);
    struct rdzv_job *job = NULL;
    struct rdzv_failure f;
    uint64_t t = 1000;
    static const uint32_t base[] = {500, 1000, 2000};

    (void)state;
    j.backoff_min_ms = 500;
    j.backoff_max_ms = 2000;
    j.max_restarts = 5;
    assert_int_equal(rdzv_job_new(&j, &job), 0);
    join(job, 0, 1, t);
    assert_int_equal(join(job, 1, 1, t), RDZV_JOB_EV_ASSIGNED);
    for (uint32_t r = 0; r < 3; r++) {
        f = failure(job->round);
        assert_int_equal(rdzv_job_failed(job, &peers[0], &f, 0, t + 10), RDZV_JOB_EV_RESTART);
        t += 10;
        assert_in_range(job->restart_delay_ms, base[r] * 8 / 10, base[r] * 12 / 10);
        assert_int_equal(join(job, 0, 1, t), RDZV_JOB_EV_WAITING);
        assert_int_equal(join(job, 1, 1, t), RDZV_JOB_EV_WAITING); /* full, but held */
        assert_int_equal(rdzv_job_deadline(job), (int64_t)(t + job->restart_delay_ms));
        {
            struct rdzv_waiting w;

            rdzv_job_waiting(job, t, &w); /* the progress line counts down the hold */
            assert_int_equal(w.last_call_ms_left, (int32_t)job->restart_delay_ms);
        }
        assert_int_equal(rdzv_job_tick(job, t + job->restart_delay_ms - 1, 0), RDZV_JOB_EV_NONE);
        t += job->restart_delay_ms;
        assert_int_equal(rdzv_job_tick(job, t, 0), RDZV_JOB_EV_ASSIGNED);
    }
    /* a round that ran for the healthy interval: the next delay is MIN again */
    t += mc_backoff_healthy_ms(2000);
    f = failure(job->round);
    assert_int_equal(rdzv_job_failed(job, &peers[1], &f, 0, t), RDZV_JOB_EV_RESTART);
    assert_in_range(job->restart_delay_ms, 400, 600);
    rdzv_job_free(job);
}

/* Without --restart-backoff nothing changes: the round closes with its last JOIN. */
static void test_no_backoff_no_hold(void **state)
{
    struct rdzv_job *job = joined_job(2, 2, 2);
    struct rdzv_failure f;

    (void)state;
    f = failure(0);
    assert_int_equal(rdzv_job_failed(job, &peers[0], &f, 0, 5), RDZV_JOB_EV_RESTART);
    assert_int_equal(job->restart_delay_ms, 0);
    join(job, 0, 1, 5);
    assert_int_equal(join(job, 1, 1, 5), RDZV_JOB_EV_ASSIGNED);
    rdzv_job_free(job);
}

/* --exclude-after: the node whose rank failed first is charged; its N-th failure
 * within the window excludes it (its JOINs get -EPERM, with a reason), a LEAVE and re-JOIN does
 * not reset its count, and an elastic job goes on without it. */
static void test_exclude_after(void **state)
{
    struct rdzv_join j = mkjoin(0, 2, 3, 1);
    struct rdzv_job *job = NULL;
    struct rdzv_failure f;
    enum rdzv_job_event ev;
    const struct rdzv_job_node *bad;
    uint64_t t = 100;

    (void)state;
    j.max_restarts = 10;
    j.exclude_after = 2;
    j.exclude_window_ms = 10000;
    assert_int_equal(rdzv_job_new(&j, &job), 0);
    join(job, 0, 1, t);
    join(job, 1, 1, t);
    assert_int_equal(join(job, 2, 1, t), RDZV_JOB_EV_ASSIGNED);
    /* node 2 fails: charged once */
    f = failure(job->round);
    assert_int_equal(rdzv_job_failed(job, &peers[2], &f, 0, t), RDZV_JOB_EV_RESTART);
    assert_null(rdzv_job_excluded(job, "node2", "10.0.0.2", "10.0.0.2"));
    /* it leaves and joins again: its count stays */
    assert_int_equal(rdzv_job_failed(job, &peers[2], &f, 1, t), RDZV_JOB_EV_NONE);
    join(job, 0, 1, t);
    join(job, 1, 1, t);
    assert_int_equal(join(job, 2, 1, t), RDZV_JOB_EV_ASSIGNED);
    /* a lost node is a failure of that node too: the second one excludes it */
    t += 50;
    assert_int_equal(lose(job, 2, t), RDZV_JOB_EV_RESTART);
    bad = rdzv_job_excluded(job, "node2", "10.0.0.2", "10.0.0.2");
    assert_non_null(bad);
    assert_int_equal(bad->failures, 2);
    assert_non_null(strstr(bad->reason, "caused 2 failures within 10 s"));
    assert_non_null(strstr(bad->reason, "lost node node2"));
    {
        struct rdzv_join j2 = mkjoin(2, 2, 3, 1);

        assert_int_equal(rdzv_job_join(job, &j2, "10.0.0.2", "10.0.0.2", &peers[2], t, &ev),
                         -EPERM);
    }
    /* the same host name at another address is another node */
    assert_null(rdzv_job_excluded(job, "node2", "10.0.0.9", "10.0.0.9"));
    /* a JOIN that claims node2's host and addr from another machine is another node,
     * and node2 restarted as a new agent process (new node id) on its machine is still out */
    assert_null(rdzv_job_excluded(job, "node2", "10.0.0.2", "10.0.0.66"));
    {
        struct rdzv_join j3 = mkjoin(2, 2, 3, 1);

        j3.node_id = 0x5eed;
        assert_int_equal(rdzv_job_join(job, &j3, "10.0.0.2", "10.0.0.2", &peers[2], t, &ev),
                         -EPERM);
    }
    /* the others go on: min 2 */
    join(job, 0, 1, t);
    assert_int_equal(join(job, 1, 1, t), RDZV_JOB_EV_WAITING);
    assert_int_equal(rdzv_job_tick(job, t + 1000, 0), RDZV_JOB_EV_ASSIGNED); /* last call */
    assert_int_equal(job->world_size, 2);
    assert_int_equal(job->restart_count, 2); /* the leave did not change the budget */
    rdzv_job_free(job);
}

/* Failures spread wider than the window never exclude; without --exclude-after they are only
 * counted. */
static void test_exclude_window(void **state)
{
    struct rdzv_join j = mkjoin(0, 1, 1, 1);
    struct rdzv_job *job = NULL;
    struct rdzv_failure f;
    uint64_t t = 0;

    (void)state;
    j.max_restarts = 10;
    j.exclude_after = 2;
    j.exclude_window_ms = 1000;
    j.last_call_ms = 0;
    assert_int_equal(rdzv_job_new(&j, &job), 0);
    for (int k = 0; k < 4; k++) {
        assert_int_equal(join(job, 0, 1, t), RDZV_JOB_EV_ASSIGNED);
        f = failure(job->round);
        assert_int_equal(rdzv_job_failed(job, &peers[0], &f, 0, t), RDZV_JOB_EV_RESTART);
        t += 1500;
    }
    assert_null(rdzv_job_excluded(job, "node0", "10.0.0.0", "10.0.0.0"));
    assert_int_equal(job->nodes[0].failures, 4);
    rdzv_job_free(job);
}

/* --- hot spares ------------------------------------------------------------------------------- */

static enum rdzv_job_event join_spare(struct rdzv_job *job, unsigned node, uint64_t now)
{
    struct rdzv_join j = mkjoin(node, job->min_nodes, job->max_nodes, 1);
    enum rdzv_job_event ev = RDZV_JOB_EV_NONE;
    char addr[32];

    j.flags = RDZV_JOIN_SPARE;
    snprintf(addr, sizeof(addr), "10.0.0.%u", node);
    assert_int_equal(rdzv_job_join(job, &j, addr, addr, &peers[node], now, &ev), 0);
    return ev;
}

static struct rdzv_job *new_job_with(unsigned min, unsigned max, unsigned max_restarts,
                                     unsigned exclude_after)
{
    struct rdzv_join j = mkjoin(0, min, max, 1);
    struct rdzv_job *job = NULL;

    j.max_restarts = max_restarts;
    j.exclude_after = exclude_after;
    assert_int_equal(rdzv_job_new(&j, &job), 0);
    return job;
}

/* A spare never fills a free place of a filling round by itself and does not count toward min:
 * it waits in pending[] while round 0 fills, closes and runs; unknown JOIN flags are refused. */
static void test_spare_waits(void **state)
{
    struct rdzv_job *job = new_job(2, 2);
    struct rdzv_join j = mkjoin(0, 2, 2, 1);

    (void)state;
    j.flags = 4;
    assert_int_equal(rdzv_job_validate_join(&j), -EINVAL);
    j.flags = RDZV_JOIN_SPARE;
    assert_int_equal(rdzv_job_validate_join(&j), 0);
    assert_int_equal(join_spare(job, 5, 0), RDZV_JOB_EV_PENDING);
    assert_int_equal(job->n_members, 0);
    assert_int_equal(job->n_pending, 1);
    assert_int_equal(rdzv_job_deadline(job), -1); /* no round deadline runs for a spare */
    assert_int_equal(join(job, 0, 1, 10), RDZV_JOB_EV_WAITING);
    assert_false(job->min_reached);
    assert_int_equal(join(job, 1, 1, 20), RDZV_JOB_EV_ASSIGNED);
    assert_int_equal(job->n_members, 2);
    assert_int_equal(job->n_pending, 1);
    assert_true(job->pending[0].spare);
    assert_int_equal(rdzv_job_find(job, &peers[5]), -1);
    rdzv_job_free(job);
}

/* A spare joining a running elastic job with room starts no scale-up round. */
static void test_spare_no_scale_up(void **state)
{
    struct rdzv_job *job = new_job(1, 3);

    (void)state;
    job->last_call_ms = 0;
    assert_int_equal(join(job, 0, 1, 0), RDZV_JOB_EV_ASSIGNED);
    assert_int_equal(join_spare(job, 5, 10), RDZV_JOB_EV_PENDING);
    assert_int_equal(job->state, RDZV_JOB_RUNNING);
    assert_int_equal(job->round, 0);
    assert_int_equal(job->restart_count, 0);
    assert_int_equal(job->n_members, 1);
    rdzv_job_free(job);
}

/* --nnodes 2 with a spare: the lost node's place goes to the spare as the round opens, the
 * survivor keeps group rank 0, the spare gets the lost node's rank 1, the world keeps its size;
 * the round closes as soon as the survivor is back (no join timeout), one restart counted. */
static void test_spare_replaces_lost(void **state)
{
    struct rdzv_job *job = new_job(2, 2);

    (void)state;
    join(job, 0, 2, 0);
    join(job, 1, 2, 0);
    join_spare(job, 5, 0);
    assert_int_equal(member(job, 1)->group_rank, 1);
    assert_int_equal(lose(job, 1, 100), RDZV_JOB_EV_RESTART);
    assert_int_equal(job->restart_count, 1);
    assert_int_equal(job->n_pending, 0);
    assert_int_equal(job->n_members, 1); /* the spare is in at once */
    assert_int_equal(join(job, 0, 2, 150), RDZV_JOB_EV_ASSIGNED);
    assert_int_equal(member(job, 0)->group_rank, 0);
    assert_int_equal(member(job, 5)->group_rank, 1);
    assert_int_equal(member(job, 5)->rank_offset, 2);
    assert_int_equal(job->world_size, 3); /* nproc 2 + the spare's 1 */
    assert_int_equal(job->restart_count, 1);
    rdzv_job_free(job);
}

/* --exclude-after 1: the failing node is excluded and its place is free at once, although it is
 * still connected (it gets RESTART and is refused when it joins again). */
static void test_spare_replaces_excluded(void **state)
{
    struct rdzv_job *job = new_job_with(2, 2, 5, 1);
    struct rdzv_join j = mkjoin(1, 2, 2, 1);
    struct rdzv_failure f = failure(0);
    struct rdzv_assign a;
    enum rdzv_job_event ev;

    (void)state;
    join_n(job, 2);
    join_spare(job, 5, 0);
    assert_int_equal(rdzv_job_failed(job, &peers[1], &f, 0, 50), RDZV_JOB_EV_RESTART);
    assert_non_null(rdzv_job_excluded(job, "node1", "10.0.0.1", "10.0.0.1"));
    assert_int_equal(job->n_prev, 2); /* RESTART reaches the excluded node too */
    assert_int_equal(job->n_members, 1);
    assert_int_equal(rdzv_job_join(job, &j, "10.0.0.1", "10.0.0.1", &peers[1], 60, &ev), -EPERM);
    assert_int_equal(join(job, 0, 1, 70), RDZV_JOB_EV_ASSIGNED);
    rdzv_job_assign(job, (size_t)rdzv_job_find(job, &peers[5]), &a);
    assert_int_equal(a.group_rank, 1);
    assert_int_equal(a.group_world_size, 2);
    assert_int_equal(a.restart_count, 1);
    assert_int_equal(member(job, 0)->group_rank, 0);
    rdzv_job_free(job);
}

/* rdzv_job_exclude (--exclude-stragglers): a running member is excluded without failing; the
 * round restarts with the text naming it, it gets RESTART and is refused when it joins again,
 * the spare takes its place. Not running, or no member: nothing happens. */
static void test_exclude_member(void **state)
{
    struct rdzv_job *job = new_job_with(2, 2, 5, 0);
    struct rdzv_join j = mkjoin(1, 2, 2, 1);
    const struct rdzv_job_node *n;
    struct rdzv_assign a;
    enum rdzv_job_event ev;

    (void)state;
    assert_int_equal(rdzv_job_exclude(job, &peers[0], "slow", 10, 0), RDZV_JOB_EV_NONE);
    join_n(job, 2);
    join_spare(job, 5, 0);
    assert_int_equal(rdzv_job_exclude(job, &peers[7], "slow", 20, 0), RDZV_JOB_EV_NONE);
    assert_int_equal(rdzv_job_exclude(job, &peers[1], "a straggler 3 times", 30, 12345),
                     RDZV_JOB_EV_RESTART);
    assert_string_equal(job->cause.text, "node node1 (10.0.0.1) excluded: a straggler 3 times");
    assert_int_equal(job->cause.time_ms, 12345);
    assert_int_equal(job->restart_count, 1);
    assert_non_null(n = rdzv_job_excluded(job, "node1", "10.0.0.1", "10.0.0.1"));
    assert_string_equal(n->reason, "a straggler 3 times");
    assert_int_equal(job->n_prev, 2); /* RESTART reaches the excluded node too */
    assert_int_equal(rdzv_job_join(job, &j, "10.0.0.1", "10.0.0.1", &peers[1], 40, &ev), -EPERM);
    assert_int_equal(join(job, 0, 1, 50), RDZV_JOB_EV_ASSIGNED);
    rdzv_job_assign(job, (size_t)rdzv_job_find(job, &peers[5]), &a);
    assert_int_equal(a.group_rank, 1);
    rdzv_job_free(job);
}

/* A failure that excludes nobody keeps every place for its node: the spare waits. When a
 * previous member's connection then goes away before it joined again, the spare takes its
 * place and its group rank. */
static void test_spare_after_prev_lost_while_filling(void **state)
{
    struct rdzv_job *job = new_job(3, 3);
    struct rdzv_failure f = failure(0);

    (void)state;
    join_n(job, 3);
    join_spare(job, 5, 0);
    assert_int_equal(rdzv_job_failed(job, &peers[0], &f, 0, 10), RDZV_JOB_EV_RESTART);
    assert_int_equal(job->n_members, 0);
    assert_int_equal(job->n_pending, 1);
    assert_int_equal(join(job, 0, 1, 20), RDZV_JOB_EV_WAITING);
    assert_int_equal(join(job, 1, 1, 30), RDZV_JOB_EV_WAITING);
    assert_int_equal(rdzv_job_lost(job, &peers[2], "no heartbeat for 3.0 s", 40, 0),
                     RDZV_JOB_EV_ASSIGNED);
    assert_int_equal(member(job, 5)->group_rank, 2);
    assert_int_equal(member(job, 0)->group_rank, 0);
    assert_int_equal(job->restart_count, 1); /* a loss while filling is no second restart */
    rdzv_job_free(job);
}

/* A member that joined the filling round again and then leaves (LEAVE) frees its place too; so
 * does a LEAVE of one that had not joined again yet. */
static void test_spare_after_leave_while_filling(void **state)
{
    struct rdzv_job *job = new_job(3, 3);
    struct rdzv_failure f = failure(0);

    (void)state;
    join_n(job, 3);
    join_spare(job, 5, 0);
    join_spare(job, 6, 0);
    assert_int_equal(rdzv_job_failed(job, &peers[0], &f, 0, 10), RDZV_JOB_EV_RESTART);
    assert_int_equal(join(job, 1, 1, 20), RDZV_JOB_EV_WAITING);
    assert_int_equal(rdzv_job_failed(job, &peers[1], &f, 1, 30), RDZV_JOB_EV_WAITING);
    assert_int_equal(job->n_pending, 1);
    assert_int_equal(rdzv_job_find(job, &peers[5]), 0);
    assert_int_equal(rdzv_job_failed(job, &peers[2], &f, 1, 40), RDZV_JOB_EV_WAITING);
    assert_int_equal(job->n_pending, 0);
    assert_int_equal(join(job, 0, 1, 50), RDZV_JOB_EV_ASSIGNED);
    assert_int_equal(member(job, 0)->group_rank, 0);
    rdzv_job_free(job);
}

/* A spare that arrives while a round fills short of a lost node takes the place at once. */
static void test_spare_arrives_late(void **state)
{
    struct rdzv_job *job = joined_job(2, 2, 2);

    (void)state;
    assert_int_equal(lose(job, 0, 10), RDZV_JOB_EV_RESTART);
    assert_int_equal(join(job, 1, 1, 20), RDZV_JOB_EV_WAITING);
    assert_int_equal(join_spare(job, 5, 30), RDZV_JOB_EV_ASSIGNED);
    assert_int_equal(member(job, 1)->group_rank, 1);
    assert_int_equal(member(job, 5)->group_rank, 0); /* rank 0's node was the lost one */
    rdzv_job_free(job);
}

/* A promoted spare's JOINs still carry the flag: after the next restart it joins as the member
 * it now is, keeping its rank, instead of waiting as a spare again. */
static void test_spare_rejoins_as_member(void **state)
{
    struct rdzv_job *job = joined_job(2, 2, 2);
    struct rdzv_failure f;

    (void)state;
    join_spare(job, 5, 0);
    lose(job, 1, 10);
    assert_int_equal(join(job, 0, 1, 20), RDZV_JOB_EV_ASSIGNED);
    f = failure(job->round);
    assert_int_equal(rdzv_job_failed(job, &peers[0], &f, 0, 30), RDZV_JOB_EV_RESTART);
    assert_int_equal(join_spare(job, 5, 40), RDZV_JOB_EV_WAITING);
    assert_int_equal(join(job, 0, 1, 50), RDZV_JOB_EV_ASSIGNED);
    assert_int_equal(member(job, 5)->group_rank, 1);
    assert_int_equal(job->restart_count, 2);
    rdzv_job_free(job);
}

/* Spares keep the world at the size it ran with, not at max: an elastic job of 3 (max 4) that
 * loses one node takes one of its two spares. */
static void test_spare_keeps_size_elastic(void **state)
{
    struct rdzv_job *job = new_job(2, 4);

    (void)state;
    join_n(job, 3);
    assert_int_equal(rdzv_job_tick(job, 1000, 0), RDZV_JOB_EV_ASSIGNED);
    join_spare(job, 5, 1100);
    join_spare(job, 6, 1100);
    assert_int_equal(lose(job, 1, 1200), RDZV_JOB_EV_RESTART);
    assert_int_equal(job->n_members, 1);
    assert_int_equal(job->n_pending, 1);
    assert_int_equal(job->pending[0].node_id, 106);
    join(job, 0, 1, 1210);
    assert_int_equal(join(job, 2, 1, 1220), RDZV_JOB_EV_WAITING);
    assert_int_equal(rdzv_job_tick(job, 2220, 0), RDZV_JOB_EV_ASSIGNED); /* last call */
    assert_int_equal(job->n_members, 3);
    assert_int_equal(member(job, 5)->group_rank, 1);
    rdzv_job_free(job);
}

/* Server restart: a spare whose JOIN reaches the new server first (creating the job) does not
 * keep the members from rebuilding their round; a member that does not come back within the
 * grace is lost, and the spare takes its place and rank. */
static void test_spare_across_server_restart(void **state)
{
    struct rdzv_rejoin rj = mkrejoin(0, 3, 0, 2);
    struct rdzv_job *job = NULL;
    enum rdzv_job_event ev;
    void *old;

    (void)state;
    rj.join.flags = RDZV_JOIN_SPARE;
    rj.join.node_id = 105;
    assert_int_equal(rdzv_job_new(&rj.join, &job), 0);
    assert_int_equal(join_spare(job, 5, 0), RDZV_JOB_EV_PENDING);
    rj = mkrejoin(0, 3, 0, 2);
    assert_int_equal(rdzv_job_rejoin(job, &rj, "10.0.0.0", "10.0.0.0", &peers[0], 10, &old, &ev),
                     0);
    assert_int_equal(job->state, RDZV_JOB_RUNNING);
    assert_true(job->rebuilding);
    assert_int_equal(job->n_pending, 1);
    /* rank 1 never comes back */
    assert_int_equal(rdzv_job_tick(job, 10 + job->reconnect_grace_ms, 0), RDZV_JOB_EV_RESTART);
    assert_int_equal(job->n_members, 1);                         /* the spare, at once */
    assert_int_equal(join(job, 0, 1, 600), RDZV_JOB_EV_WAITING); /* min 2 of max 3 */
    assert_int_equal(rdzv_job_tick(job, 1600, 0), RDZV_JOB_EV_ASSIGNED);
    assert_int_equal(member(job, 0)->group_rank, 0);
    assert_int_equal(member(job, 5)->group_rank, 1);
    rdzv_job_free(job);
}

/* Restarts are counted per job: a node that leaves and joins again (new connection, even as a
 * spare) does not reset the budget; a spare taking a place costs only the one restart of the
 * loss; the budget still ends the job. */
static void test_restart_budget_survives_leave_and_spares(void **state)
{
    struct rdzv_job *job = new_job_with(2, 2, 2, 0);
    struct rdzv_failure f;

    (void)state;
    join_n(job, 2);
    f = failure(0);
    assert_int_equal(rdzv_job_failed(job, &peers[1], &f, 0, 10), RDZV_JOB_EV_RESTART);
    /* node 1 leaves the filling round and comes back on another connection */
    assert_int_equal(rdzv_job_failed(job, &peers[1], &f, 1, 20), RDZV_JOB_EV_NONE);
    {
        struct rdzv_join j = mkjoin(1, 2, 2, 1);
        enum rdzv_job_event ev;

        assert_int_equal(rdzv_job_join(job, &j, "10.0.0.1", "10.0.0.1", &peers[7], 30, &ev), 0);
    }
    assert_int_equal(join(job, 0, 1, 40), RDZV_JOB_EV_ASSIGNED);
    assert_int_equal(job->restart_count, 1);
    join_spare(job, 5, 50);
    assert_int_equal(job->restart_count, 1);
    assert_int_equal(lose(job, 7, 60), RDZV_JOB_EV_RESTART);
    assert_int_equal(job->restart_count, 2);
    assert_int_equal(join(job, 0, 1, 70), RDZV_JOB_EV_ASSIGNED);
    f = failure(job->round);
    assert_int_equal(rdzv_job_failed(job, &peers[5], &f, 0, 80), RDZV_JOB_EV_FAILED);
    assert_int_equal(job->restart_count, 2);
    rdzv_job_free(job);
}

/* pending[] is bounded (max_nodes + RDZV_JOB_PENDING_SLACK), and a big
 * job's restart keeps every node's group rank through the prev[] index. */
static void test_pending_bounded_and_prev_index(void **state)
{
    static char many[300];
    enum rdzv_job_event ev;
    struct rdzv_job *job = new_job(1, 1);
    struct rdzv_job *big;
    struct rdzv_join j = mkjoin(0, 1, 1, 1);

    (void)state;
    assert_int_equal(rdzv_job_join(job, &j, "a", "a", &many[0], 0, &ev), 0);
    assert_int_equal(ev, RDZV_JOB_EV_ASSIGNED);
    j.flags = RDZV_JOIN_SPARE;
    for (unsigned i = 1; i <= 1 + RDZV_JOB_PENDING_SLACK; i++) {
        j.node_id = 1000 + i;
        assert_int_equal(rdzv_job_join(job, &j, "a", "a", &many[i], 0, &ev), 0);
    }
    j.node_id = 5000;
    assert_int_equal(rdzv_job_join(job, &j, "a", "a", &many[200], 0, &ev), -ENOSPC);
    rdzv_job_free(job);

    /* 200 nodes, then one fails: all 199 others keep their ranks in round 1 */
    j = mkjoin(0, 200, 200, 1);
    j.last_call_ms = 0;
    assert_int_equal(rdzv_job_new(&j, &big), 0);
    for (unsigned i = 0; i < 200; i++) {
        j.node_id = 7000 + 13 * (uint64_t)i;
        assert_int_equal(rdzv_job_join(big, &j, "a", "a", &many[i], 0, &ev), 0);
    }
    assert_int_equal(ev, RDZV_JOB_EV_ASSIGNED);
    uint32_t rank_of[200];

    for (unsigned i = 0; i < 200; i++)
        rank_of[i] = big->members[i].group_rank;
    struct rdzv_failure f = {.round = 0, .rank = 0, .exit_code = 1};

    assert_int_equal(rdzv_job_failed(big, &many[0], &f, 0, 10), RDZV_JOB_EV_RESTART);
    for (unsigned i = 199; i >= 1; i--) { /* the other order: ranks must come from prev[] */
        j.node_id = 7000 + 13 * (uint64_t)i;
        assert_int_equal(rdzv_job_join(big, &j, "a", "a", &many[i], 20, &ev), 0);
    }
    j.node_id = 7000;
    assert_int_equal(rdzv_job_join(big, &j, "a", "a", &many[0], 20000, &ev), 0);
    assert_int_equal(rdzv_job_tick(big, 20000, 0), RDZV_JOB_EV_NONE);
    assert_int_equal(big->state, RDZV_JOB_RUNNING);
    for (unsigned i = 0; i < 200; i++) {
        int k = rdzv_job_find(big, &many[i]);

        assert_true(k >= 0);
        assert_int_equal(big->members[k].group_rank, rank_of[i]);
    }
    rdzv_job_free(big);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scale_up),
        cmocka_unit_test(test_pending_enters_next_round),
        cmocka_unit_test(test_rank_gaps_compact),
        cmocka_unit_test(test_rejoin_rebuild),
        cmocka_unit_test(test_rejoin_reattach_and_grace),
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_full_round_prefix_sums),
        cmocka_unit_test(test_last_call),
        cmocka_unit_test(test_join_timeout),
        cmocka_unit_test(test_join_errors),
        cmocka_unit_test(test_restart_keeps_ranks),
        cmocka_unit_test(test_ranks_fill_gaps),
        cmocka_unit_test(test_restarts_exhausted),
        cmocka_unit_test(test_same_failure),
        cmocka_unit_test(test_same_failure_classes),
        cmocka_unit_test(test_leave),
        cmocka_unit_test(test_lost_after_done),
        cmocka_unit_test(test_lost_while_filling),
        cmocka_unit_test(test_timeout_with_min_closes),
        cmocka_unit_test(test_resume_from_rank0),
        cmocka_unit_test(test_resume_sharded),
        cmocka_unit_test(test_parts_flood_bounded),
        cmocka_unit_test(test_resume_rank0_survives),
        cmocka_unit_test(test_resume_rank0_lost),
        cmocka_unit_test(test_resume_newest_takes_rank0),
        cmocka_unit_test(test_resume_rejoin_keeps_round),
        cmocka_unit_test(test_restart_backoff_holds_round),
        cmocka_unit_test(test_no_backoff_no_hold),
        cmocka_unit_test(test_exclude_after),
        cmocka_unit_test(test_exclude_window),
        cmocka_unit_test(test_spare_waits),
        cmocka_unit_test(test_spare_no_scale_up),
        cmocka_unit_test(test_spare_replaces_lost),
        cmocka_unit_test(test_spare_replaces_excluded),
        cmocka_unit_test(test_exclude_member),
        cmocka_unit_test(test_spare_after_prev_lost_while_filling),
        cmocka_unit_test(test_spare_after_leave_while_filling),
        cmocka_unit_test(test_spare_arrives_late),
        cmocka_unit_test(test_spare_rejoins_as_member),
        cmocka_unit_test(test_spare_keeps_size_elastic),
        cmocka_unit_test(test_restart_budget_survives_leave_and_spares),
        cmocka_unit_test(test_spare_across_server_restart),
        cmocka_unit_test(test_pending_bounded_and_prev_index),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
