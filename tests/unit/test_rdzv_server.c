/* Server + client over real loopback TCP on a private loop. Nothing sleeps: each test runs the
 * loop until a predicate over the callback counters holds, under a watchdog timer. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <uv.h>

#include "harness.h"

#include "client.h"
#include "conn.h"
#include "cred.h"
#include "server.h"

#define MAX_NODES 4
#define WATCHDOG_MS 10000

struct fixture;

struct node {
    struct fixture *fx;
    struct rdzv_client *c;
    struct rdzv_join join;
    /* behaviour */
    int fail_round;  /* report FAILED when assigned this round; -1: never */
    int close_round; /* close the client when assigned this round; -1: never */
    int done_on_assign;
    /* what happened */
    int waiting, assigned, restarts, job_done, job_failed, errors;
    uint32_t rank_in_round[4];
    struct rdzv_assign assign;
    struct rdzv_restart restart;
    struct rdzv_job_failed jf;
    int err;
    uint32_t server_err;
    char errtext[RDZV_TEXT_MAX + 64];
};

struct fixture {
    uv_loop_t loop;
    struct harness h; /* watchdog, run_until */
    struct rdzv_server *srv;
    unsigned port;
    struct node nodes[MAX_NODES];
    unsigned max_restarts, last_call_ms, join_timeout_ms; /* for start_node()'s JOINs */
};

/* pred(fx) holds, or the watchdog fails the test (harness.h) */
#define run_until(fx, pred) HARNESS_RUN_UNTIL(&(fx)->h, pred(fx))

/* --- client callbacks ---------------------------------------------------------------------- */
static struct node *node_of(struct rdzv_client *c)
{
    return rdzv_client_data(c);
}

static void waiting_cb(struct rdzv_client *c, const struct rdzv_waiting *w)
{
    struct node *n = node_of(c);

    assert_true(w->joined >= 1 && w->joined < w->max_nodes);
    n->waiting++;
}

static void assign_cb(struct rdzv_client *c, const struct rdzv_assign *a)
{
    struct node *n = node_of(c);
    struct rdzv_failure f = {.round = a->round, .rank = (int32_t)a->rank_offset, .exit_code = 1};

    n->assigned++;
    n->assign = *a;
    if (a->round < 4)
        n->rank_in_round[a->round] = a->group_rank;
    if ((int)a->round == n->fail_round) {
        snprintf(f.host, sizeof(f.host), "%s", n->join.host);
        snprintf(f.text, sizeof(f.text), "root cause on %s", n->join.host);
        assert_int_equal(rdzv_client_report_failure(c, &f, 0), 0);
    } else if ((int)a->round == n->close_round) {
        rdzv_client_close(c, NULL, NULL);
        n->c = NULL;
    } else if (n->done_on_assign) {
        assert_int_equal(rdzv_client_report_done(c, a->round), 0);
    }
}

static void restart_cb(struct rdzv_client *c, const struct rdzv_restart *r)
{
    struct node *n = node_of(c);

    n->restarts++;
    n->restart = *r;
    assert_int_equal(rdzv_client_join(c, &n->join), 0);
}

static void job_done_cb(struct rdzv_client *c)
{
    struct node *n = node_of(c);

    n->job_done++;
}

static void job_failed_cb(struct rdzv_client *c, const struct rdzv_job_failed *f)
{
    struct node *n = node_of(c);

    n->job_failed++;
    n->jf = *f;
}

static void error_cb(struct rdzv_client *c, int err, const char *text)
{
    struct node *n = node_of(c);

    n->errors++;
    n->err = err;
    n->server_err = rdzv_client_server_error(c);
    snprintf(n->errtext, sizeof(n->errtext), "%s", text);
}

static const struct rdzv_client_cbs cbs = {waiting_cb,    assign_cb, restart_cb, job_done_cb,
                                           job_failed_cb, error_cb,  NULL,       NULL,
                                           NULL,          NULL,      NULL,       NULL};

/* --- fixture ------------------------------------------------------------------------------- */
static int setup_token(void **state, const char *token)
{
    static struct fixture fx;

    memset(&fx, 0, sizeof(fx));
    assert_int_equal(uv_loop_init(&fx.loop), 0);
    harness_init(&fx.h, &fx.loop, WATCHDOG_MS);
    assert_int_equal(rdzv_server_new(&fx.loop, "127.0.0.1", 0, token, &fx.srv), 0);
    fx.port = rdzv_server_port(fx.srv);
    fx.max_restarts = 2;
    fx.last_call_ms = 1000;
    fx.join_timeout_ms = 5000;
    assert_true(fx.port > 0);
    *state = &fx;
    return 0;
}

static int setup(void **state)
{
    return setup_token(state, "test-token");
}

static int setup_secret(void **state)
{
    return setup_token(state, "good-token");
}

static void server_closed_cb(void *data)
{
    (*(int *)data)++;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;
    int closed = 0;

    for (int i = 0; i < MAX_NODES; i++)
        rdzv_client_close(fx->nodes[i].c, NULL, NULL);
    rdzv_server_close(fx->srv, server_closed_cb, &closed);
    harness_close(&fx->h);
    assert_int_equal(uv_run(&fx->loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(closed, 1);
    assert_int_equal(uv_loop_close(&fx->loop), 0);
    return 0;
}

/* Node i of job `job` with nnodes min:max; client created with `token`, JOIN sent. */
static struct node *start_node(struct fixture *fx, int i, const char *job, unsigned min,
                               unsigned max, unsigned nproc, const char *token)
{
    struct node *n = &fx->nodes[i];

    n->fx = fx;
    n->fail_round = -1;
    n->close_round = -1;
    n->done_on_assign = 1;
    n->join = (struct rdzv_join){.min_nodes = min,
                                 .max_nodes = max,
                                 .nproc = nproc,
                                 .master_port = 29500 + (unsigned)i,
                                 .max_restarts = fx->max_restarts,
                                 .last_call_ms = fx->last_call_ms,
                                 .join_timeout_ms = fx->join_timeout_ms};
    n->join.node_secret[0] = (uint8_t)i; /* protocol 3: the id commits to the secret */
    n->join.node_id = rdzv_node_id_of(n->join.node_secret);
    snprintf(n->join.job_id, sizeof(n->join.job_id), "%s", job);
    snprintf(n->join.host, sizeof(n->join.host), "host%d", i);
    if (token == NULL)
        token = "test-token"; /* setup()'s */
    assert_int_equal(rdzv_client_new(&fx->loop, "127.0.0.1", fx->port, token, &cbs, n, &n->c), 0);
    assert_int_equal(rdzv_client_join(n->c, &n->join), 0);
    return n;
}

static int sum(struct fixture *fx, size_t off)
{
    int s = 0;

    for (int i = 0; i < MAX_NODES; i++)
        s += *(int *)((char *)&fx->nodes[i] + off);
    return s;
}
#define SUM(fx, field) sum((fx), offsetof(struct node, field))

/* --- rounds -------------------------------------------------------------------------------- */
static int one_done(struct fixture *fx)
{
    return SUM(fx, job_done) == 1;
}

static void test_one_node(void **state)
{
    struct fixture *fx = *state;
    struct node *n = start_node(fx, 0, "solo", 1, 1, 4, NULL);

    run_until(fx, one_done);
    assert_int_equal(n->assigned, 1);
    assert_int_equal(n->assign.round, 0);
    assert_int_equal(n->assign.group_rank, 0);
    assert_int_equal(n->assign.group_world_size, 1);
    assert_int_equal(n->assign.rank_offset, 0);
    assert_int_equal(n->assign.world_size, 4);
    assert_int_equal(n->assign.restart_count, 0);
    assert_string_equal(n->assign.master_addr, "127.0.0.1"); /* filled from the peer */
    assert_int_equal(n->assign.master_port, 29500);
    assert_int_equal(n->errors, 0);
}

static int three_done(struct fixture *fx)
{
    return SUM(fx, job_done) == 3;
}

static void test_three_nodes_prefix_sums(void **state)
{
    struct fixture *fx = *state;
    static const unsigned nproc[3] = {2, 3, 1};
    unsigned nproc_of_rank[3] = {0}, offset = 0;

    for (int i = 0; i < 3; i++)
        start_node(fx, i, "trio", 3, 3, nproc[i], NULL);
    run_until(fx, three_done);
    /* the first joiner hears "1 joined" at once; later counts are coalesced (one broadcast
     * per SJOB_WAITING_EVERY_MS) but every joiner hears one when it joins, unless its JOIN
     * closed the round: 2 or 3 WAITINGs, never one per member per join */
    assert_true(SUM(fx, waiting) >= 2 && SUM(fx, waiting) <= 3);
    for (int i = 0; i < 3; i++) {
        struct rdzv_assign *a = &fx->nodes[i].assign;

        assert_int_equal(a->group_world_size, 3);
        assert_int_equal(a->world_size, 6);
        assert_true(a->group_rank < 3);
        assert_int_equal(nproc_of_rank[a->group_rank], 0); /* ranks are distinct */
        nproc_of_rank[a->group_rank] = nproc[i];
    }
    for (unsigned r = 0; r < 3; r++) {
        for (int i = 0; i < 3; i++) {
            struct rdzv_assign *a = &fx->nodes[i].assign;

            if (a->group_rank == r)
                assert_int_equal(a->rank_offset, offset);
            if (a->group_rank == 0) /* master is group rank 0's port on every node */
                assert_int_equal(fx->nodes[0].assign.master_port, fx->nodes[i].join.master_port);
        }
        offset += nproc_of_rank[r];
    }
}

static int two_errors(struct fixture *fx)
{
    return SUM(fx, errors) == 2;
}

static void test_wrong_token(void **state)
{
    struct fixture *fx = *state;
    struct node *good, *bad, *none;

    good = start_node(fx, 0, "secure", 1, 1, 1, "good-token");
    bad = start_node(fx, 1, "secure2", 1, 1, 1, "bad-token");
    none = start_node(fx, 2, "secure3", 1, 1, 1, NULL);
    run_until(fx, one_done);
    (void)good;
    run_until(fx, two_errors);
    for (struct node *n = bad; n <= none; n++) {
        assert_int_equal(n->errors, 1);
        assert_int_equal(n->err, -EACCES);
        assert_int_equal(n->server_err, 0); /* refused in the TLS handshake: no ERROR */
        assert_int_equal(n->assigned, 0);
    }
    assert_int_equal(fx->nodes[0].errors, 0);
}

static int restarted_round_done(struct fixture *fx)
{
    return SUM(fx, job_done) == 3 && SUM(fx, assigned) == 6;
}

/* One failure: RESTART to all (sender included), everyone re-joins, same group ranks. */
static void test_restart(void **state)
{
    struct fixture *fx = *state;

    for (int i = 0; i < 3; i++)
        start_node(fx, i, "retry", 3, 3, 2, NULL);
    fx->nodes[1].fail_round = 0;
    run_until(fx, restarted_round_done);
    for (int i = 0; i < 3; i++) {
        struct node *n = &fx->nodes[i];

        assert_int_equal(n->restarts, 1);
        assert_int_equal(n->restart.restart_count, 1);
        assert_string_equal(n->restart.cause.text, "root cause on host1");
        assert_int_equal(n->assign.round, 1);
        assert_int_equal(n->assign.restart_count, 1);
        assert_int_equal(n->rank_in_round[1], n->rank_in_round[0]);
        assert_int_equal(n->job_done, 1);
        assert_int_equal(n->errors, 0);
    }
}

static int two_failed(struct fixture *fx)
{
    return SUM(fx, job_failed) == 2;
}

static void test_restarts_exhausted(void **state)
{
    struct fixture *fx = *state;

    fx->max_restarts = 0;
    for (int i = 0; i < 2; i++)
        start_node(fx, i, "doomed", 2, 2, 1, NULL);
    fx->nodes[0].fail_round = 0;
    fx->nodes[1].done_on_assign = 0;
    run_until(fx, two_failed);
    for (int i = 0; i < 2; i++) {
        struct node *n = &fx->nodes[i];

        assert_int_equal(n->restarts, 0);
        assert_int_equal(n->jf.restarts, 0);
        assert_int_equal(n->jf.cause.round, 0);
        assert_int_equal(n->jf.cause.exit_code, 1);
        assert_string_equal(n->jf.cause.text, "root cause on host0");
        assert_string_equal(n->jf.cause.host, "host0");
        assert_int_equal(n->job_done, 0);
    }
}

/* A member's connection closing mid-round is a lost node: the others restart without it. */
static int lost_restarted(struct fixture *fx)
{
    return fx->nodes[1].restarts == 1 && fx->nodes[2].restarts == 1;
}

static void test_lost_node(void **state)
{
    struct fixture *fx = *state;

    for (int i = 0; i < 3; i++)
        start_node(fx, i, "lossy", 2, 3, 1, NULL);
    fx->nodes[0].close_round = 0;
    fx->nodes[1].done_on_assign = 0;
    fx->nodes[2].done_on_assign = 0;
    run_until(fx, lost_restarted);
    assert_string_equal(fx->nodes[1].restart.cause.text,
                        "lost node host0 (127.0.0.1): connection closed");
    assert_int_equal(fx->nodes[1].restart.cause.rank, -1);
    assert_int_equal(fx->nodes[1].restart.cause.exit_code, -1);
    assert_int_equal(fx->nodes[0].restarts, 0);
}

static int isolated_settled(struct fixture *fx)
{
    return fx->nodes[0].job_done == 1 && fx->nodes[1].job_done == 1 &&
           fx->nodes[2].job_failed == 1 && fx->nodes[3].errors == 1;
}

/* Job "a" runs to the end while job "b" fails; a JOIN disagreeing with "a" gets MISMATCH. */
static void test_two_jobs_isolated(void **state)
{
    struct fixture *fx = *state;

    fx->max_restarts = 0;
    start_node(fx, 0, "a", 2, 2, 1, NULL);
    start_node(fx, 2, "b", 1, 1, 8, NULL);
    fx->nodes[2].fail_round = 0;
    start_node(fx, 1, "a", 2, 2, 1, NULL);
    start_node(fx, 3, "a", 2, 3, 1, NULL);
    run_until(fx, isolated_settled);
    assert_int_equal(fx->nodes[0].assign.world_size, 2);
    assert_int_equal(fx->nodes[2].assign.world_size, 8);
    assert_int_equal(fx->nodes[2].assign.group_rank, 0);
    assert_int_equal(fx->nodes[0].job_failed + fx->nodes[1].job_failed, 0);
    assert_int_equal(fx->nodes[2].job_done, 0);
    assert_int_equal(fx->nodes[3].server_err, RDZV_ERR_MISMATCH);
    assert_int_equal(fx->nodes[3].err, -EINVAL);
}

static int one_error(struct fixture *fx)
{
    return SUM(fx, errors) == 1;
}

/* Starts node 0 alone in job and runs the loop until done(fx). */
static struct node *alone(struct fixture *fx, const char *job, unsigned min, unsigned max,
                          unsigned nproc, int (*done)(struct fixture *))
{
    struct node *n = start_node(fx, 0, job, min, max, nproc, NULL);

    run_until(fx, done);
    return n;
}

static void test_join_timeout(void **state)
{
    struct fixture *fx = *state;
    struct node *n;

    fx->join_timeout_ms = 100;
    n = alone(fx, "lonely", 2, 2, 1, one_error);
    assert_true(n->waiting >= 1);
    assert_string_equal(n->errtext, "rendezvous of job lonely timed out after 0.1 s: 1 of 2 "
                                    "nodes joined (need 2)");
    assert_int_equal(n->err, -ETIMEDOUT);
    assert_int_equal(n->server_err, RDZV_ERR_TIMEOUT);
}

static void test_last_call(void **state)
{
    struct fixture *fx = *state;
    struct node *n;

    fx->last_call_ms = 50;
    n = alone(fx, "elastic", 1, 2, 3, one_done);
    assert_int_equal(n->assign.group_world_size, 1);
    assert_int_equal(n->assign.world_size, 3);
    assert_int_equal(n->waiting, 1); /* with last_call_ms_left counting down */
}

/* --- raw frames: the server answers ERROR, closes that connection and keeps serving ------- */
struct raw {
    struct rdzv_conn conn;
    uv_connect_t connect;
    uv_write_t write;
    uint8_t bytes[64];
    size_t len;
    int got_error, eof, closed;
    uint32_t code;
};

static int raw_settled_count;

static void raw_msg_cb(struct rdzv_conn *conn, const struct rdzv_msg *m)
{
    struct raw *r = conn->data;

    if (m->type == RDZV_MSG_ERROR) {
        r->got_error++;
        r->code = m->u.error.code;
    }
}

static void raw_closed_cb(struct rdzv_conn *conn)
{
    struct raw *r = conn->data;

    r->closed = 1;
    raw_settled_count++;
    uv_stop(conn->tcp.loop);
}

static void raw_error_cb(struct rdzv_conn *conn, int err)
{
    struct raw *r = conn->data;

    r->eof = err == UV_EOF;
    rdzv_conn_close(conn, 0, raw_closed_cb);
}

static void raw_connect_cb(uv_connect_t *req, int status)
{
    struct raw *r = req->data;
    uv_buf_t buf = uv_buf_init((char *)r->bytes, (unsigned)r->len);

    assert_int_equal(status, 0);
    assert_int_equal(rdzv_conn_start(&r->conn), 0);
    assert_int_equal(uv_write(&r->write, (uv_stream_t *)&r->conn.tcp, &buf, 1, NULL), 0);
}

/* Sends `bytes` in plaintext on a fresh connection; returns the ERROR code the server answered
 * with (0: closed without one, as every plaintext byte string is refused by TLS). */
static uint32_t raw_exchange(struct fixture *fx, const uint8_t *bytes, size_t len)
{
    struct raw r = {.len = len};
    struct sockaddr_in sin;

    memcpy(r.bytes, bytes, len);
    assert_int_equal(uv_ip4_addr("127.0.0.1", (int)fx->port, &sin), 0);
    assert_int_equal(rdzv_conn_init(&fx->loop, &r.conn, raw_msg_cb, raw_error_cb, &r), 0);
    r.connect.data = &r;
    assert_int_equal(
        uv_tcp_connect(&r.connect, &r.conn.tcp, (struct sockaddr *)&sin, raw_connect_cb), 0);
    HARNESS_RUN_UNTIL(&fx->h, r.closed);
    assert_true(r.eof); /* the server closed */
    return r.got_error ? r.code : 0;
}

static void test_garbage_frames(void **state)
{
    struct fixture *fx = *state;
    static const uint8_t garbage[12] = "GET / HTTP/1";
    static const uint8_t oversized[12] = {
        'M', 'S', 'T', 'R', RDZV_PROTO_VERSION, RDZV_MSG_HELLO, 0, 0, 0x10, 0, 0, 0};
    static const uint8_t old_version[12] = {'M', 'S', 'T', 'R', 99, RDZV_MSG_HELLO};
    static const uint8_t unknown_type[12] = {'M', 'S', 'T', 'R', RDZV_PROTO_VERSION, 99};
    uint8_t frame[64];
    struct rdzv_msg m = {.type = RDZV_MSG_DONE};
    size_t len;

    /* Plaintext to the TLS port: each closed by the handshake, no frame parsed. (Frames inside
     * TLS are checked by the codec tests and test_rdzv_tls.) */
    assert_int_equal(raw_exchange(fx, garbage, sizeof(garbage)), 0);
    assert_int_equal(raw_exchange(fx, oversized, sizeof(oversized)), 0);
    assert_int_equal(raw_exchange(fx, old_version, sizeof(old_version)), 0);
    assert_int_equal(raw_exchange(fx, unknown_type, sizeof(unknown_type)), 0);
    assert_int_equal(rdzv_msg_encode(&m, frame, sizeof(frame), &len), 0);
    assert_int_equal(raw_exchange(fx, frame, len), 0);
    m.type = RDZV_MSG_HELLO;
    m.u.hello.version = RDZV_PROTO_VERSION;
    assert_int_equal(rdzv_msg_encode(&m, frame, sizeof(frame), &len), 0);
    assert_int_equal(raw_exchange(fx, frame, len), 0);
    /* and the server still serves a whole job */
    start_node(fx, 0, "after-garbage", 1, 1, 1, NULL);
    run_until(fx, one_done);
}

/* --- client edge cases ---------------------------------------------------------------------- */
static void test_connection_refused(void **state)
{
    struct fixture *fx = *state;
    unsigned port = fx->port;
    struct node *n;

    /* a port nobody listens on: the server's, after closing it */
    rdzv_server_close(fx->srv, NULL, NULL);
    assert_int_equal(rdzv_server_new(&fx->loop, "127.0.0.1", 0, "test-token", &fx->srv), 0);
    fx->port = port;
    n = start_node(fx, 0, "nowhere", 1, 1, 1, NULL);
    run_until(fx, one_error);
    assert_int_equal(n->err, UV_ECONNREFUSED);
    assert_int_equal(n->server_err, 0);
    assert_int_equal(rdzv_client_join(n->c, &n->join), UV_ENOTCONN);
    assert_int_equal(rdzv_client_report_done(n->c, 0), UV_ENOTCONN);
}

static void closed_cb(void *data)
{
    (*(int *)data)++;
}

/* Closing right after join (resolving), and after a later join, frees without any callback. */
static void test_close_early(void **state)
{
    struct fixture *fx = *state;
    struct node *n = start_node(fx, 0, "early", 1, 1, 1, NULL);
    int closed = 0;

    assert_int_equal(rdzv_client_join(n->c, &n->join), UV_EALREADY);
    rdzv_client_close(n->c, closed_cb, &closed);
    n->c = NULL;
    HARNESS_RUN_UNTIL(&fx->h, closed > 0);
    assert_int_equal(n->errors + n->assigned + n->waiting, 0);
    /* the server never saw that JOIN: a new node creates the job with other nnodes */
    fx->last_call_ms = 0;
    start_node(fx, 1, "early", 1, 2, 1, NULL);
    run_until(fx, one_done);
    assert_int_equal(fx->nodes[1].assign.group_world_size, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_one_node, setup, teardown),
        cmocka_unit_test_setup_teardown(test_three_nodes_prefix_sums, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_token, setup_secret, teardown),
        cmocka_unit_test_setup_teardown(test_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restarts_exhausted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lost_node, setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_jobs_isolated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_join_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_last_call, setup, teardown),
        cmocka_unit_test_setup_teardown(test_garbage_frames, setup, teardown),
        cmocka_unit_test_setup_teardown(test_connection_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_early, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
