/* Server handlers over real loopback TCP with raw protocol clients (the codec and conn.c), on
 * a private loop: heartbeats and lost nodes, scale-up, REJOIN after a server restart, the
 * workers' KV store and STATUS. Nothing sleeps: each test runs the loop until a predicate over
 * the recorded messages holds, under a watchdog. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>
#include <uv.h>

#include "harness.h"
#include "msgfix.h"
#include "sendq.h"

#include "conn.h"
#include "cred.h"
#include "pfrec.h"
#include "server.h"
#include "tls.h"

#define TOKEN "handler-test-token"

#define NRAW 6
#define WATCHDOG_MS 10000

struct fixture;

/* One raw client: every message it received is counted by type; the last of each kept. */
struct raw {
    struct fixture *fx;
    struct rdzv_conn conn;
    uv_connect_t connect;
    uint8_t role;
    int open, welcomed, eof, closed;
    int auto_rejoin; /* answer RESTART with the JOIN again */
    struct rdzv_join join;
    int count[RDZV_MSG_TYPE_MAX_];
    uint64_t at[RDZV_MSG_TYPE_MAX_]; /* uv_now of the last one */
    struct rdzv_assign assign;
    struct rdzv_restart restart;
    struct rdzv_job_failed job_failed;
    struct rdzv_heartbeat heartbeat;
    struct rdzv_error error;
    uint32_t kv_status[16]; /* by req_id */
    char kv_value[16][32];
    char *status_json;
    char logs[4096]; /* LOGS received: "rank|text\n" per line */
    uint8_t logs_state;
    struct rdzv_repl_begin repl_begin; /* the last of each replica message */
    struct rdzv_repl_ack repl_ack;
    struct rdzv_ckpt_part ckpt_part; /* the last CKPT_PART */
    uint64_t repl_bytes;             /* REPL_DATA bytes received */
    int connected;
    struct sendq q; /* sent once connected: TLS starts only then */
};

struct fixture {
    uv_loop_t loop;
    uv_timer_t beat;
    struct harness h; /* watchdog, run_until */
    struct rdzv_server *srv;
    unsigned port;
    struct raw *raw[NRAW];
};

static struct fixture *gfx;
static struct rdzv_tls *g_tls;                       /* the clients' TLS configuration (TOKEN) */
static uint32_t g_keep_alive, g_hb_timeout, g_grace; /* for agent()'s JOINs */
static uint32_t g_join_flags;                        /* likewise */

/* pred(fx) holds, or the watchdog fails the test (harness.h) */
#define run_until(fx, pred) HARNESS_RUN_UNTIL(&(fx)->h, pred(fx))

static void send_msg(struct raw *r, const struct rdzv_msg *m)
{
    sendq_send(&r->q, &r->conn, r->connected, m);
}

static void record(struct raw *r, const struct rdzv_msg *m)
{
    r->count[m->type]++;
    r->at[m->type] = uv_now(&r->fx->loop);
    if (m->type == RDZV_MSG_ASSIGN)
        r->assign = m->u.assign;
    else if (m->type == RDZV_MSG_RESTART)
        r->restart = m->u.restart;
    else if (m->type == RDZV_MSG_JOB_FAILED)
        r->job_failed = m->u.job_failed;
    else if (m->type == RDZV_MSG_HEARTBEAT)
        r->heartbeat = m->u.heartbeat;
    else if (m->type == RDZV_MSG_ERROR)
        r->error = m->u.error;
    else if (m->type == RDZV_MSG_WELCOME)
        r->welcomed = 1;
    else if (m->type == RDZV_MSG_REPL_BEGIN)
        r->repl_begin = m->u.repl_begin;
    else if (m->type == RDZV_MSG_REPL_ACK)
        r->repl_ack = m->u.repl_ack;
    else if (m->type == RDZV_MSG_CKPT_PART)
        r->ckpt_part = m->u.ckpt_part;
    else if (m->type == RDZV_MSG_REPL_DATA)
        r->repl_bytes += m->u.repl_data.len;
    else if (m->type == RDZV_MSG_LOGS) {
        size_t n = strlen(r->logs);
        r->logs_state = m->u.log.state;
        for (uint32_t i = 0; i < m->u.log.count; i++) {
            const struct rdzv_log_line *ln = &m->u.log.lines[i];
            n += (size_t)snprintf(r->logs + n, sizeof(r->logs) - n, "%d|%.*s\n", (int)ln->rank,
                                  (int)ln->len, m->u.log.text + ln->off);
        }
    } else if (m->type == RDZV_MSG_STATUS) {
        free(r->status_json);
        r->status_json = strdup(m->u.status.json);
    } else if (m->type == RDZV_MSG_KV_REPLY && m->u.kv.req_id < 16) {
        r->kv_status[m->u.kv.req_id] = m->u.kv.status;
        snprintf(r->kv_value[m->u.kv.req_id], 32, "%.*s", (int)m->u.kv.value_len,
                 (const char *)m->u.kv.value);
    }
}

static void raw_msg_cb(struct rdzv_conn *conn, const struct rdzv_msg *m)
{
    struct raw *r = conn->data;

    record(r, m);
    if (m->type == RDZV_MSG_RESTART && r->auto_rejoin) {
        struct rdzv_msg *j = sendq_msg(RDZV_MSG_JOIN);

        j->u.join = r->join;
        send_msg(r, j);
    }
}

static void raw_closed_cb(struct rdzv_conn *conn)
{
    struct raw *r = conn->data;

    r->closed = 1;
}

static void raw_error_cb(struct rdzv_conn *conn, int err)
{
    struct raw *r = conn->data;

    r->eof = 1;
    (void)err;
    rdzv_conn_close(conn, 0, raw_closed_cb);
}

static void raw_connect_cb(uv_connect_t *req, int status)
{
    struct raw *r = req->data;

    assert_int_equal(status, 0);
    assert_int_equal(rdzv_conn_start_tls(&r->conn, g_tls, 0), 0);
    r->connected = 1;
    sendq_flush(&r->q, &r->conn);
}

/* A raw client of `role`, connected, HELLO sent (messages queue behind it). */
static struct raw *raw_new(struct fixture *fx, int i, uint8_t role)
{
    struct raw *r = fx->raw[i];
    struct sockaddr_in sin;
    struct rdzv_msg *h;

    if (r == NULL)
        r = fx->raw[i] = calloc(1, sizeof(*r));
    assert_non_null(r);
    assert_false(r->open && !r->closed);
    free(r->status_json);
    sendq_drop(&r->q);
    memset(r, 0, sizeof(*r));
    r->fx = fx;
    r->role = role;
    r->open = 1;
    assert_int_equal(uv_ip4_addr("127.0.0.1", (int)fx->port, &sin), 0);
    assert_int_equal(rdzv_conn_init(&fx->loop, &r->conn, raw_msg_cb, raw_error_cb, r), 0);
    r->connect.data = r;
    assert_int_equal(
        uv_tcp_connect(&r->connect, &r->conn.tcp, (struct sockaddr *)&sin, raw_connect_cb), 0);
    /* libuv queues writes behind the connect: HELLO goes first, then what the test sends */
    h = sendq_msg(RDZV_MSG_HELLO);
    h->u.hello.version = RDZV_PROTO_VERSION;
    h->u.hello.role = role;
    snprintf(h->u.hello.token, sizeof(h->u.hello.token), "%s", TOKEN);
    send_msg(r, h);
    return r;
}

/* Observer raw client i asks for job's STATUS (its answer lands in R(i)->status_json). */
static void observer_status(struct fixture *fx, int i, const char *job)
{
    struct rdzv_msg *m;

    raw_new(fx, i, RDZV_ROLE_OBSERVER);
    m = sendq_msg(RDZV_MSG_STATUS_REQ);
    snprintf(m->u.status_req.job_id, sizeof(m->u.status_req.job_id), "%s", job);
    send_msg(fx->raw[i], m);
}

/* A node id the server accepts (protocol 3): the commitment to a secret made from seed. */
static uint64_t test_node(uint8_t secret[32], uint64_t seed)
{
    memset(secret, 0, 32);
    memcpy(secret, &seed, sizeof(seed));
    return rdzv_node_id_of(secret);
}

static struct raw *agent(struct fixture *fx, int i, const char *job, unsigned min, unsigned max)
{
    struct raw *r = raw_new(fx, i, RDZV_ROLE_AGENT);
    struct rdzv_msg *m = sendq_msg(RDZV_MSG_JOIN);

    r->join = (struct rdzv_join){.min_nodes = min,
                                 .max_nodes = max,
                                 .nproc = 2,
                                 .master_port = 29500 + (unsigned)i,
                                 .max_restarts = 3,
                                 .last_call_ms = 100,
                                 .join_timeout_ms = 5000,
                                 .keep_alive_ms = g_keep_alive,
                                 .heartbeat_timeout_ms = g_hb_timeout,
                                 .reconnect_grace_ms = g_grace,
                                 .flags = g_join_flags};
    r->join.node_id = test_node(r->join.node_secret, 1000 + (unsigned)i);
    snprintf(r->join.job_id, sizeof(r->join.job_id), "%s", job);
    snprintf(r->join.host, sizeof(r->join.host), "host%d", i);
    snprintf(r->join.resume, sizeof(r->join.resume), "host%d-ckpt", i); /* differ per node */
    r->join.resume_step = 100 * i;
    r->auto_rejoin = 1;
    m->u.join = r->join;
    send_msg(r, m);
    return r;
}

static void raw_close(struct raw *r)
{
    if (r != NULL && r->open && !r->conn.closing)
        rdzv_conn_close(&r->conn, 0, raw_closed_cb);
}

static int setup(void **state)
{
    static struct fixture fx;

    memset(&fx, 0, sizeof(fx));
    gfx = &fx;
    g_keep_alive = g_hb_timeout = g_grace = 0;
    assert_int_equal(uv_loop_init(&fx.loop), 0);
    harness_init(&fx.h, &fx.loop, WATCHDOG_MS);
    assert_int_equal(uv_timer_init(&fx.loop, &fx.beat), 0);
    fx.beat.data = &fx;
    assert_int_equal(rdzv_server_new(&fx.loop, "127.0.0.1", 0, TOKEN, &fx.srv), 0);
    fx.port = rdzv_server_port(fx.srv);
    *state = &fx;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;

    for (int i = 0; i < NRAW; i++)
        raw_close(fx->raw[i]);
    rdzv_server_close(fx->srv, NULL, NULL);
    harness_close(&fx->h);
    uv_close((uv_handle_t *)&fx->beat, NULL);
    assert_int_equal(uv_run(&fx->loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&fx->loop), 0);
    for (int i = 0; i < NRAW; i++) {
        if (fx->raw[i] != NULL) {
            free(fx->raw[i]->status_json);
            sendq_drop(&fx->raw[i]->q);
        }
        free(fx->raw[i]);
    }
    return 0;
}

#define R(i) (gfx->raw[i])
#define N(i, type) (R(i)->count[RDZV_MSG_##type])

/* --- liveness ------------------------------------------------------------------------------ */
static void beat_cb(uv_timer_t *t)
{
    struct rdzv_msg *m = sendq_msg(RDZV_MSG_HEARTBEAT);

    (void)t;
    m->u.heartbeat.seq = 1;
    if (R(1)->open && !R(1)->conn.closing)
        send_msg(R(1), m);
}

static int both_assigned(struct fixture *fx)
{
    (void)fx;
    return N(0, ASSIGN) == 1 && N(1, ASSIGN) == 1;
}

static int echo_and_lost(struct fixture *fx)
{
    (void)fx;
    return N(0, HEARTBEAT) == 1 && N(1, RESTART) == 1 && R(0)->closed;
}

/* Node 0 echoes one heartbeat then goes silent; node 1 keeps beating. Node 0 is a lost node
 * within heartbeat_timeout + 100 ms, and the server closes its connection. */
static void test_heartbeat_timeout(void **state)
{
    struct fixture *fx = *state;
    struct rdzv_msg *m;
    uint64_t silent_from;

    g_keep_alive = 50;
    g_hb_timeout = 200;
    agent(fx, 0, "hb", 2, 2);
    agent(fx, 1, "hb", 2, 2);
    run_until(fx, both_assigned);
    m = sendq_msg(RDZV_MSG_HEARTBEAT);
    m->u.heartbeat = (struct rdzv_heartbeat){.round = 0, .seq = 77};
    send_msg(R(0), m);
    silent_from = uv_now(&fx->loop);
    uv_timer_start(&fx->beat, beat_cb, 50, 50);
    run_until(fx, echo_and_lost);
    uv_timer_stop(&fx->beat);
    assert_int_equal(R(0)->heartbeat.seq, 77);
    assert_string_equal(R(1)->restart.cause.text,
                        "lost node host0 (127.0.0.1): no heartbeat for 0.2 s");
    assert_int_equal(R(1)->restart.restart_count, 1);
    assert_int_equal(R(1)->restart.cause.rank, -1);
    assert_true(R(1)->at[RDZV_MSG_RESTART] - silent_from >= 200);
    assert_true(R(1)->at[RDZV_MSG_RESTART] - silent_from <= 300);
}

static int three_assigned(struct fixture *fx)
{
    (void)fx;
    return N(0, ASSIGN) == 1 && N(1, ASSIGN) == 1 && N(2, ASSIGN) == 1;
}

static int survivors_reassigned(struct fixture *fx)
{
    (void)fx;
    return N(0, ASSIGN) == 2 && N(2, ASSIGN) == 2;
}

/* 2:3 nodes; the node with group rank 1 closes: the two others restart and run as a round of
 * two, rank 0 where it was and rank 2 compacted into the gap. */
static void test_lost_by_close_ranks(void **state)
{
    struct fixture *fx = *state;
    int lost = -1;

    for (int i = 0; i < 3; i++)
        agent(fx, i, "lossy", 2, 3);
    run_until(fx, three_assigned);
    for (int i = 0; i < 3; i++)
        if (R(i)->assign.group_rank == 1)
            lost = i;
    raw_close(R(lost));
    gfx->raw[lost]->count[RDZV_MSG_ASSIGN] = 2; /* predicate over the survivors only */
    run_until(fx, survivors_reassigned);
    for (int i = 0; i < 3; i++) {
        if (i == lost)
            continue;
        assert_int_equal(R(i)->restart.restart_count, 1);
        assert_true(strstr(R(i)->restart.cause.text, ": connection closed") != NULL);
        assert_int_equal(R(i)->assign.group_world_size, 2);
        assert_int_equal(R(i)->assign.round, 1);
        assert_true(R(i)->assign.group_rank < 2);
    }
}

/* --- scale-up ------------------------------------------------------------------------------ */
static int one_assigned(struct fixture *fx)
{
    (void)fx;
    return N(0, ASSIGN) == 1;
}

static int scaled(struct fixture *fx)
{
    (void)fx;
    return N(0, ASSIGN) == 2 && N(1, ASSIGN) == 1;
}

static void test_scale_up(void **state)
{
    struct fixture *fx = *state;

    agent(fx, 0, "grow", 1, 3);
    run_until(fx, one_assigned);
    agent(fx, 1, "grow", 1, 3);
    run_until(fx, scaled);
    assert_int_equal(N(0, RESTART), 1);
    assert_int_equal(R(0)->restart.restart_count, 0);
    assert_string_equal(R(0)->restart.cause.text, "scale-up: host1 joined");
    assert_int_equal(R(0)->restart.cause.rank, -1);
    assert_int_equal(R(0)->restart.cause.exit_code, -1);
    assert_true(N(1, WAITING) >= 1);
    assert_int_equal(R(0)->assign.round, 1);
    assert_int_equal(R(0)->assign.restart_count, 0);
    /* host1's JOIN names a newer checkpoint (step 100 > 0): it takes rank 0 */
    assert_int_equal(R(0)->assign.group_rank, 1);
    assert_int_equal(R(1)->assign.group_rank, 0);
    assert_int_equal(R(1)->assign.world_size, 4);
}

static int pending_done(struct fixture *fx)
{
    (void)fx;
    return N(0, JOB_DONE) == 1 && N(1, JOB_DONE) == 1;
}

/* At max_nodes the joiner only waits; the job ending tells it too. */
static void test_scale_up_full(void **state)
{
    struct fixture *fx = *state;
    struct rdzv_msg *m;

    agent(fx, 0, "full", 1, 1);
    run_until(fx, one_assigned);
    agent(fx, 1, "full", 1, 1);
    HARNESS_RUN_UNTIL(&fx->h, N(1, WAITING) > 0);
    assert_int_equal(N(0, RESTART), 0);
    m = sendq_msg(RDZV_MSG_DONE);
    m->u.done.round = 0;
    send_msg(R(0), m);
    run_until(fx, pending_done);
    assert_int_equal(N(1, ASSIGN), 0);
}

/* --- server restart ------------------------------------------------------------------------ */
static int all_eof(struct fixture *fx)
{
    (void)fx;
    return R(0)->closed && R(1)->closed;
}

static void restart_server(struct fixture *fx)
{
    unsigned port = fx->port;

    rdzv_server_close(fx->srv, NULL, NULL);
    run_until(fx, all_eof);
    /* libuv binds with SO_REUSEADDR: the same port is free again at once */
    assert_int_equal(rdzv_server_new(&fx->loop, "127.0.0.1", port, TOKEN, &fx->srv), 0);
    assert_int_equal(rdzv_server_port(fx->srv), port);
}

static void rejoin(struct fixture *fx, int i, int done)
{
    struct rdzv_join j = R(i)->join;
    struct rdzv_assign a = R(i)->assign;
    struct raw *r = raw_new(fx, i, RDZV_ROLE_AGENT);
    struct rdzv_msg *m = sendq_msg(RDZV_MSG_REJOIN);

    r->join = j;
    r->assign = a;
    r->auto_rejoin = 1;
    m->u.rejoin = (struct rdzv_rejoin){.join = j, .running = 1, .done = (uint8_t)done, .assign = a};
    send_msg(r, m);
}

static int rejoined_and_done(struct fixture *fx)
{
    (void)fx;
    return N(0, REJOIN_OK) == 1 && N(1, REJOIN_OK) == 1 && N(0, JOB_DONE) == 1 &&
           N(1, JOB_DONE) == 1;
}

/* The server goes away while round 0 runs; a fresh server on the same port rebuilds the job
 * from the REJOINs (nobody restarts), and DONE still ends it. */
static void test_rejoin_after_server_restart(void **state)
{
    struct fixture *fx = *state;
    struct rdzv_msg *m;

    agent(fx, 0, "phoenix", 2, 2);
    agent(fx, 1, "phoenix", 2, 2);
    run_until(fx, both_assigned);
    restart_server(fx);
    rejoin(fx, 0, 1); /* node 0 finished while the server was away */
    rejoin(fx, 1, 0);
    HARNESS_RUN_UNTIL(&fx->h, N(1, REJOIN_OK) > 0);
    m = sendq_msg(RDZV_MSG_DONE);
    m->u.done.round = 0;
    send_msg(R(1), m);
    run_until(fx, rejoined_and_done);
    assert_int_equal(N(0, RESTART) + N(1, RESTART), 0);
}

static int grace_restart(struct fixture *fx)
{
    (void)fx;
    return N(0, RESTART) == 1;
}

/* Only one of two members comes back: after the grace, the other is a lost node. */
static void test_rejoin_grace(void **state)
{
    struct fixture *fx = *state;
    uint64_t t0;

    g_grace = 200;
    agent(fx, 0, "grace", 2, 2);
    agent(fx, 1, "grace", 2, 2);
    run_until(fx, both_assigned);
    restart_server(fx);
    t0 = uv_now(&fx->loop);
    rejoin(fx, 0, 0);
    run_until(fx, grace_restart);
    assert_int_equal(N(0, REJOIN_OK), 1);
    assert_int_equal(R(0)->restart.restart_count, 1);
    assert_true(strstr(R(0)->restart.cause.text, "did not reconnect within 0.2 s") != NULL);
    assert_true(R(0)->at[RDZV_MSG_RESTART] - t0 >= 200);
}

static int stale_restart(struct fixture *fx)
{
    (void)fx;
    return N(2, RESTART) == 1;
}

/* A reconnect naming a round the (live) server already left gets RESTART. */
static void test_rejoin_stale_round(void **state)
{
    struct fixture *fx = *state;

    agent(fx, 0, "moved", 1, 2);
    run_until(fx, one_assigned);
    agent(fx, 1, "moved", 1, 2); /* scale-up: round 1 */
    run_until(fx, scaled);
    R(2) = calloc(1, sizeof(struct raw));
    R(2)->join = R(0)->join;
    R(2)->join.node_id = test_node(R(2)->join.node_secret, 999);
    R(2)->assign = R(0)->assign;
    R(2)->assign.round = 0;
    R(2)->open = 0;
    rejoin(fx, 2, 0);
    run_until(fx, stale_restart);
    assert_string_equal(R(2)->restart.cause.text, "round 0 ended while the node was away");
}

/* --- KV store ---------------------------------------------------------------------------- */
static struct raw *worker(struct fixture *fx, int i, const char *job, uint32_t round)
{
    struct raw *r = raw_new(fx, i, RDZV_ROLE_WORKER);
    struct rdzv_msg *m = sendq_msg(RDZV_MSG_ATTACH);

    snprintf(m->u.attach.job_id, sizeof(m->u.attach.job_id), "%s", job);
    m->u.attach.round = round;
    m->u.attach.rank = i;
    send_msg(r, m);
    return r;
}

/* send(r) from the two senders a member-only message must be refused from: R(3), a worker of
 * job, and R(4), an agent that never joined (no job to record for); then R(2), an observer,
 * asks for job's STATUS. */
static void refused_senders(struct fixture *fx, const char *job, void (*send)(struct raw *r))
{
    worker(fx, 3, job, 0);
    send(R(3));
    raw_new(fx, 4, RDZV_ROLE_AGENT);
    send(R(4));
    observer_status(fx, 2, job);
}

/* Sends R(i) a HEARTBEAT and waits for its echo: every message R(i) sent before it was
 * handled. */
static void handled(struct fixture *fx, int i)
{
    int n = N(i, HEARTBEAT);

    send_msg(R(i), sendq_msg(RDZV_MSG_HEARTBEAT));
    HARNESS_RUN_UNTIL(&fx->h, N(i, HEARTBEAT) > n);
}

static void kv(struct raw *r, uint8_t type, uint32_t req, const char *key, const char *value,
               uint32_t wait_ms, uint32_t count)
{
    struct rdzv_msg *m = sendq_msg(type);

    m->u.kv.req_id = req;
    m->u.kv.wait_ms = wait_ms;
    m->u.kv.count = count;
    snprintf(m->u.kv.key, sizeof(m->u.kv.key), "%s", key);
    m->u.kv.value_len = value ? (uint32_t)strlen(value) : 0;
    if (value)
        memcpy(m->u.kv.value, value, m->u.kv.value_len);
    send_msg(r, m);
}

static int replies(struct fixture *fx, int i, int n)
{
    (void)fx;
    return N(i, KV_REPLY) >= n;
}

static int w2_3(struct fixture *fx)
{
    return replies(fx, 2, 3) && replies(fx, 3, 1);
}
static int w3_4(struct fixture *fx)
{
    return replies(fx, 3, 3) && replies(fx, 2, 4);
}
static int w4_err(struct fixture *fx)
{
    (void)fx;
    return N(4, ERROR) == 1 && R(4)->closed;
}
static int w5_2(struct fixture *fx)
{
    return replies(fx, 5, 2);
}
static int stale_all(struct fixture *fx)
{
    return replies(fx, 2, 6) && replies(fx, 3, 4);
}

static void test_kv(void **state)
{
    struct fixture *fx = *state;
    struct rdzv_msg *m;

    agent(fx, 0, "kv", 1, 1);
    agent(fx, 1, "other", 1, 1);
    HARNESS_RUN_UNTIL(&fx->h, N(0, ASSIGN) + N(1, ASSIGN) >= 2);
    worker(fx, 2, "kv", 0);
    worker(fx, 3, "kv", 0);
    kv(R(3), RDZV_MSG_KV_GET, 1, "addr", NULL, 5000, 0); /* held */
    kv(R(2), RDZV_MSG_KV_PUT, 1, "addr", "10.0.0.1:5", 0, 0);
    kv(R(2), RDZV_MSG_KV_GET, 2, "nope", NULL, 0, 0);
    kv(R(2), RDZV_MSG_KV_GET, 3, "later", NULL, 30, 0);
    kv(R(2), RDZV_MSG_BARRIER, 4, "b", NULL, 5000, 2);
    run_until(fx, w2_3);
    assert_int_equal(N(3, ATTACH_OK), 1);
    assert_int_equal(R(2)->kv_status[1], RDZV_KV_OK);
    assert_int_equal(R(2)->kv_status[2], RDZV_KV_NOT_FOUND);
    assert_int_equal(R(2)->kv_status[3], RDZV_KV_TIMEOUT);
    assert_int_equal(R(3)->kv_status[1], RDZV_KV_OK);
    assert_string_equal(R(3)->kv_value[1], "10.0.0.1:5");
    kv(R(3), RDZV_MSG_KV_GET, 2, "addr", NULL, 0, 0);
    kv(R(3), RDZV_MSG_KV_GET, 3, "late", NULL, 5000, 0); /* held until the round ends */
    kv(R(3), RDZV_MSG_BARRIER, 4, "b", NULL, 5000, 0);
    run_until(fx, w3_4);
    assert_int_equal(R(2)->kv_status[4], RDZV_KV_OK);
    assert_int_equal(R(3)->kv_status[4], RDZV_KV_OK);
    assert_string_equal(R(3)->kv_value[2], "10.0.0.1:5");
    /* another job's worker sees nothing of "kv"; an unknown job is refused */
    worker(fx, 5, "other", 0);
    kv(R(5), RDZV_MSG_KV_GET, 1, "addr", NULL, 0, 0);
    kv(R(5), RDZV_MSG_KV_PUT, 2, "addr", "x", 0, 0);
    run_until(fx, w5_2);
    assert_int_equal(R(5)->kv_status[1], RDZV_KV_NOT_FOUND);
    worker(fx, 4, "nosuch", 0);
    run_until(fx, w4_err);
    assert_int_equal(R(4)->error.code, RDZV_ERR_CLOSED);
    /* the job restarts: the held get is STALE, so is a request naming round 0 */
    m = sendq_msg(RDZV_MSG_FAILED);
    m->u.failed = (struct rdzv_failure){.round = 0, .rank = 0, .exit_code = 1};
    send_msg(R(0), m);
    HARNESS_RUN_UNTIL(&fx->h, N(0, RESTART) > 0);
    kv(R(2), RDZV_MSG_KV_GET, 5, "addr", NULL, 0, 0);
    kv(R(2), RDZV_MSG_KV_PUT, 6, "addr", "y", 0, 0);
    run_until(fx, stale_all);
    assert_int_equal(R(3)->kv_status[3], RDZV_KV_STALE);
    assert_int_equal(R(2)->kv_status[5], RDZV_KV_STALE);
    assert_int_equal(R(2)->kv_status[6], RDZV_KV_STALE);
}

/* --- failure signatures -------------------------------------------------------------------- */
static void send_sig_failure(struct raw *r, uint32_t round, const char *sig)
{
    struct rdzv_msg *m = sendq_msg(RDZV_MSG_FAILED);

    m->u.failed = (struct rdzv_failure){.round = round,
                                        .rank = 0,
                                        .exit_code = 1,
                                        .sig_class = RDZV_SIG_SCRIPT,
                                        /* a lying agent claims the server's verdict */
                                        .flags = RDZV_FAILURE_NOT_RETRYABLE};
    snprintf(m->u.failed.sig, sizeof(m->u.failed.sig), "%s", sig);
    send_msg(r, m);
}

/* A hostile signature (control bytes, an escape sequence, the longest text) is the server's to
 * compare and pass on, nothing more: the first FAILED restarts despite the flag its sender set,
 * a CKPT of a newer checkpoint starts the count again, and the same text twice in a row after
 * that ends the job not retryable, with the text in JOB_FAILED to every member unchanged. */
static void test_same_failure_hostile(void **state)
{
    struct fixture *fx = *state;
    char sig[RDZV_SIG_MAX + 1];
    struct rdzv_msg *m;

    memset(sig, 'A', RDZV_SIG_MAX);
    memcpy(sig, "KeyError\n\x1b[2Jmuster: job done\r", 31);
    sig[RDZV_SIG_MAX] = '\0';
    agent(fx, 0, "sig", 2, 2);
    agent(fx, 1, "sig", 2, 2);
    HARNESS_RUN_UNTIL(&fx->h, N(0, ASSIGN) == 1 && N(1, ASSIGN) == 1);
    send_sig_failure(R(0), 0, sig);
    HARNESS_RUN_UNTIL(&fx->h, N(0, ASSIGN) == 2 && N(1, ASSIGN) == 2);
    assert_int_equal(N(1, JOB_FAILED), 0);
    /* group rank 0 records a newer checkpoint: progress */
    m = sendq_msg(RDZV_MSG_CKPT);
    snprintf(m->u.ckpt.name, sizeof(m->u.ckpt.name), "ckpt_200.pt");
    m->u.ckpt.step = 200;
    send_msg(R(0), m);
    send_sig_failure(R(0), 1, sig); /* after the CKPT on the same connection */
    HARNESS_RUN_UNTIL(&fx->h, N(0, ASSIGN) == 3 && N(1, ASSIGN) == 3);
    assert_int_equal(N(0, JOB_FAILED), 0);
    send_sig_failure(R(0), 2, sig);
    HARNESS_RUN_UNTIL(&fx->h, N(0, JOB_FAILED) == 1 && N(1, JOB_FAILED) == 1);
    assert_int_equal(R(1)->job_failed.restarts, 2); /* of max_restarts 3 */
    assert_true(R(1)->job_failed.cause.flags & RDZV_FAILURE_NOT_RETRYABLE);
    assert_int_equal(R(1)->job_failed.cause.sig_class, RDZV_SIG_SCRIPT);
    assert_string_equal(R(1)->job_failed.cause.sig, sig);
}

/* --- STATUS ------------------------------------------------------------------------------- */
static int got_status(struct fixture *fx)
{
    (void)fx;
    return N(2, STATUS) == 1;
}

static void test_status(void **state)
{
    struct fixture *fx = *state;
    json_t *doc, *jobs, *job, *node;
    json_error_t jerr;

    agent(fx, 0, "seen", 2, 2);
    agent(fx, 1, "seen", 2, 2);
    agent(fx, 3, "unseen", 2, 2);
    run_until(fx, both_assigned);
    observer_status(fx, 2, "seen");
    run_until(fx, got_status);
    doc = json_loads(R(2)->status_json, 0, &jerr);
    assert_non_null(doc);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(doc, "server"), "jobs")),
                     2);
    jobs = json_object_get(doc, "jobs");
    assert_int_equal(json_array_size(jobs), 1); /* filtered */
    job = json_array_get(jobs, 0);
    assert_string_equal(json_string_value(json_object_get(job, "id")), "seen");
    assert_string_equal(json_string_value(json_object_get(job, "state")), "running");
    assert_int_equal(json_integer_value(json_object_get(job, "world_size")), 4);
    assert_int_equal(json_array_size(json_object_get(job, "nodes")), 2);
    node = json_array_get(json_object_get(job, "nodes"), 0);
    assert_string_equal(json_string_value(json_object_get(node, "addr")), "127.0.0.1");
    assert_string_equal(json_string_value(json_object_get(node, "state")), "running");
    assert_true(json_is_integer(json_object_get(node, "last_seen_ms_ago")));
    assert_null(json_object_get(doc, "truncated"));
    json_decref(doc);
}

/* --- CKPT -------------------------------------------------------------------------------- */
static void ckpt(struct raw *r, const char *name, int bad)
{
    struct rdzv_msg *m = sendq_msg(RDZV_MSG_CKPT);

    snprintf(m->u.ckpt.name, sizeof(m->u.ckpt.name), "%s", name);
    m->u.ckpt.step = atoi(name + 1);
    m->u.ckpt.size = 4096;
    m->u.ckpt.checksum = 0xabcULL;
    m->u.ckpt.time_ms = 1700000000000ULL;
    m->u.ckpt.verified_bad = (uint8_t)bad;
    if (bad)
        strcpy(m->u.ckpt.reason, "checksum mismatch");
    send_msg(r, m);
}

static void ckpt_s99(struct raw *r)
{
    ckpt(r, "s99", 0);
}

static int ckpt_sent(struct fixture *fx)
{
    (void)fx;
    return N(0, HEARTBEAT) == 1 && N(2, STATUS) == 1 && N(3, ERROR) == 1 && N(4, ERROR) == 1 &&
           R(3)->closed && R(4)->closed;
}

static const char *ckpt_field(json_t *list, size_t i, const char *key)
{
    return json_string_value(json_object_get(json_array_get(list, i), key));
}

/* Every ASSIGN carries the resume point of the node with group rank 0; CKPT records show up in
 * STATUS newest first, one per name, at most 64; a worker or a not-joined agent is refused. */
static void test_ckpt_status(void **state)
{
    struct fixture *fx = *state;
    json_t *doc, *list;
    json_error_t jerr;
    char name[16];
    int r0;

    agent(fx, 0, "ck", 2, 2);
    agent(fx, 1, "ck", 2, 2);
    run_until(fx, both_assigned);
    r0 = R(0)->assign.group_rank == 0 ? 0 : 1;
    snprintf(name, sizeof(name), "host%d-ckpt", r0);
    for (int i = 0; i < 2; i++) {
        assert_string_equal(R(i)->assign.resume, name);
        assert_int_equal(R(i)->assign.resume_step, 100 * r0);
    }
    for (int i = 0; i < 66; i++) {
        snprintf(name, sizeof(name), "s%02d", i);
        ckpt(R(0), name, 0);
    }
    ckpt(R(0), "s10", 1); /* found bad at pick time: replaces its record, moves to the front */
    handled(fx, 0);       /* the CKPTs before it */
    refused_senders(fx, "ck", ckpt_s99);
    run_until(fx, ckpt_sent);
    assert_int_equal(R(3)->error.code, RDZV_ERR_PROTOCOL);
    assert_int_equal(R(4)->error.code, RDZV_ERR_PROTOCOL);
    doc = json_loads(R(2)->status_json, 0, &jerr);
    assert_non_null(doc);
    list = json_object_get(json_array_get(json_object_get(doc, "jobs"), 0), "checkpoints");
    assert_int_equal(json_array_size(list), 64); /* s00 and s01 fell off */
    assert_string_equal(ckpt_field(list, 0, "name"), "s10");
    assert_string_equal(ckpt_field(list, 0, "state"), "bad");
    assert_string_equal(ckpt_field(list, 0, "reason"), "checksum mismatch");
    assert_string_equal(ckpt_field(list, 1, "name"), "s65");
    assert_string_equal(ckpt_field(list, 1, "state"), "recorded");
    assert_string_equal(ckpt_field(list, 1, "reason"), "");
    assert_string_equal(ckpt_field(list, 1, "checksum"), "0000000000000abc");
    assert_int_equal(json_integer_value(json_object_get(json_array_get(list, 1), "step")), 65);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(list, 1), "size")), 4096);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(list, 1), "time_ms")),
                     1700000000000LL);
    assert_string_equal(ckpt_field(list, 63, "name"), "s02");
    for (size_t i = 0; i < 64; i++) /* s99 from the refused senders is nowhere */
        assert_string_not_equal(ckpt_field(list, i, "name"), "s99");
    json_decref(doc);
}

/* --- GOODPUT --------------------------------------------------------------------------------- */
static void goodput(struct raw *r, uint64_t train_ms, uint64_t lost_ms)
{
    struct rdzv_msg *m = sendq_msg(RDZV_MSG_GOODPUT);

    m->u.goodput.round = 0;
    m->u.goodput.phase_ms[RDZV_GP_RENDEZVOUS] = 100;
    m->u.goodput.phase_ms[RDZV_GP_TRAINING] = train_ms;
    m->u.goodput.wall_ms = 100 + train_ms;
    m->u.goodput.lost_ms = lost_ms;
    send_msg(r, m);
}

static void goodput_plausible(struct raw *r)
{
    goodput(r, 999000, 0);
}

static int gp_refused(struct fixture *fx)
{
    (void)fx;
    return N(2, STATUS) == 1 && N(3, ERROR) == 1 && N(4, ERROR) == 1 && R(3)->closed &&
           R(4)->closed;
}

/* The job shows the GOODPUT of the node holding group rank 0; the other member's is dropped
 * without a word, a worker's and a not-joined agent's are refused, and so is a lie from rank 0
 * itself (more lost than trained: ERROR PROTOCOL, closed), which changes nothing kept. */
static void test_goodput_status(void **state)
{
    struct fixture *fx = *state;
    json_t *doc, *g;
    json_error_t jerr;
    char host[16];
    int r0, other;

    agent(fx, 0, "gp", 2, 2);
    agent(fx, 1, "gp", 2, 2);
    run_until(fx, both_assigned);
    r0 = R(0)->assign.group_rank == 0 ? 0 : 1;
    other = 1 - r0;
    goodput(R(r0), 2500, 500);
    goodput_plausible(R(other));
    handled(fx, r0);
    handled(fx, other);
    refused_senders(fx, "gp", goodput_plausible);
    run_until(fx, gp_refused);
    assert_non_null(strstr(R(3)->error.text, "GOODPUT"));
    assert_non_null(strstr(R(4)->error.text, "before JOIN"));
    assert_false(R(other)->closed);
    doc = json_loads(R(2)->status_json, 0, &jerr);
    assert_non_null(doc);
    g = json_object_get(json_array_get(json_object_get(doc, "jobs"), 0), "goodput");
    snprintf(host, sizeof(host), "host%d", r0);
    assert_string_equal(json_string_value(json_object_get(g, "host")), host);
    assert_true(json_real_value(json_object_get(json_object_get(g, "seconds"), "training")) == 2.5);
    assert_true(json_real_value(json_object_get(g, "lost_s")) == 0.5);
    assert_true(json_real_value(json_object_get(g, "wall_s")) == 2.6);
    assert_true(json_real_value(json_object_get(g, "ratio")) > 0.769 &&
                json_real_value(json_object_get(g, "ratio")) < 0.77);
    json_decref(doc);

    goodput(R(r0), 1000, 1001);
    HARNESS_RUN_UNTIL(&fx->h, R(r0)->closed);
    assert_int_equal(R(r0)->error.code, RDZV_ERR_PROTOCOL);
    assert_string_equal(R(r0)->error.text, "GOODPUT refused: lost_ms over training_ms");
}

/* --- the job's log ------------------------------------------------------------------------------
 */
static void log_line(struct raw *r, int32_t rank, const char *text)
{
    struct rdzv_msg *m = sendq_msg(RDZV_MSG_LOG);
    struct rdzv_log *l = &m->u.log;
    size_t n = strlen(text);

    l->lines[0] = (struct rdzv_log_line){.rank = rank, .time_ms = 1, .len = (uint32_t)n};
    memcpy(l->text, text, n);
    l->bytes = (uint32_t)n;
    l->count = 1;
    l->dropped = 3;
    send_msg(r, m);
}

static void logs_req(struct fixture *fx, int i, uint8_t role, const char *job, int32_t rank)
{
    struct rdzv_msg *m;

    raw_new(fx, i, role);
    m = sendq_msg(RDZV_MSG_LOGS_REQ);
    snprintf(m->u.logs_req.job_id, sizeof(m->u.logs_req.job_id), "%s", job);
    m->u.logs_req.rank = rank;
    send_msg(fx->raw[i], m);
}

static int logs_answered(struct fixture *fx)
{
    (void)fx;
    return N(2, LOGS) == 1 && N(3, ERROR) == 1 && N(4, ERROR) == 1 && N(5, LOGS) == 1;
}

/* A member's lines of its own ranks are the job's log; a line it sends for another node's rank
 * is dropped; LOG from an agent that never joined is refused (closed), so is LOGS_REQ from a
 * worker; an observer reads the lines (--rank filters), the member's connection stays. */
static void test_log(void **state)
{
    struct fixture *fx = *state;
    char want[128];
    int a, b;

    agent(fx, 0, "lg", 2, 2);
    agent(fx, 1, "lg", 2, 2);
    run_until(fx, both_assigned);
    a = (int)R(0)->assign.rank_offset; /* node 0's ranks a, a+1; node 1's b, b+1 */
    b = (int)R(1)->assign.rank_offset;
    log_line(R(0), a, "mine");
    log_line(R(0), b, "theirs"); /* another node's rank: dropped */
    log_line(R(1), b + 1, "node 1 says");
    handled(fx, 0);
    handled(fx, 1);
    raw_new(fx, 4, RDZV_ROLE_AGENT); /* no JOIN */
    log_line(R(4), 0, "forged");
    logs_req(fx, 3, RDZV_ROLE_WORKER, "lg", -1);
    logs_req(fx, 2, RDZV_ROLE_OBSERVER, "lg", -1);
    logs_req(fx, 5, RDZV_ROLE_OBSERVER, "lg", b + 1);
    run_until(fx, logs_answered);
    snprintf(want, sizeof(want), "%d|mine\n%d|node 1 says\n", a, b + 1);
    assert_string_equal(R(2)->logs, want);
    snprintf(want, sizeof(want), "%d|node 1 says\n", b + 1);
    assert_string_equal(R(5)->logs, want);
    assert_int_equal(R(2)->logs_state, 0);
    assert_non_null(strstr(R(4)->error.text, "LOG before JOIN"));
    assert_int_equal(R(3)->error.code, RDZV_ERR_PROTOCOL); /* a worker may not ask */
    assert_false(R(0)->closed);
    assert_false(R(1)->closed);
    /* an unknown job: ERROR CLOSED; a rank outside the world: ERROR PROTOCOL */
    HARNESS_RUN_UNTIL(&fx->h, R(3)->closed && R(4)->closed);
    logs_req(fx, 3, RDZV_ROLE_OBSERVER, "nosuch", -1);
    logs_req(fx, 4, RDZV_ROLE_OBSERVER, "lg", 4);
    HARNESS_RUN_UNTIL(&fx->h, N(3, ERROR) == 1 && N(4, ERROR) == 1);
    assert_int_equal(R(3)->error.code, RDZV_ERR_CLOSED);
    assert_non_null(strstr(R(4)->error.text, "has no rank 4"));
}

/* --- TELEMETRY ---------------------------------------------------------------------------- */
static void telemetry(struct raw *r, const char *warn2)
{
    struct rdzv_msg *m = sendq_msg(RDZV_MSG_TELEMETRY);

    msgfix_telemetry(&m->u.telemetry); /* 2 GPUs, ranks 0 and 1 on GPU 0, one warning */
    if (warn2 != NULL) {
        snprintf(m->u.telemetry.warn[1], sizeof(m->u.telemetry.warn[1]), "%s", warn2);
        m->u.telemetry.nwarn = 2;
    }
    send_msg(r, m);
}

static void telemetry_forged(struct raw *r)
{
    telemetry(r, "forged");
}

static int tel_other_assigned(struct fixture *fx)
{
    (void)fx;
    return N(5, ASSIGN) == 1;
}

static int tel_refused(struct fixture *fx)
{
    (void)fx;
    return N(2, STATUS) == 1 && N(3, ERROR) == 1 && N(4, ERROR) == 1 && R(3)->closed &&
           R(4)->closed;
}

static json_t *node_of(json_t *job, const char *host)
{
    json_t *nodes = json_object_get(job, "nodes");

    for (size_t i = 0; i < json_array_size(nodes); i++)
        if (strcmp(json_string_value(json_object_get(json_array_get(nodes, i), "host")), host) == 0)
            return json_array_get(nodes, i);
    return NULL;
}

/* A member's TELEMETRY is its node's in STATUS (the message names no node), the latest one
 * kept; the job's warnings are each kept once and at most SJOB_WARN_MAX however many a member
 * floods; another job's agent cannot add to this job's; a worker and an agent that never
 * joined are refused (ERROR PROTOCOL, closed) and recorded nowhere. */
static void test_telemetry_status(void **state)
{
    struct fixture *fx = *state;
    json_t *doc, *job, *n0, *g0, *g1, *warn;
    json_error_t jerr;
    char flood[32];

    agent(fx, 0, "tl", 2, 2);
    agent(fx, 1, "tl", 2, 2);
    run_until(fx, both_assigned);
    agent(fx, 5, "other", 1, 1);
    run_until(fx, tel_other_assigned);
    telemetry(R(5), "forged"); /* its own job's: not tl's */
    telemetry(R(0), NULL);
    telemetry(R(0), NULL); /* again: replaces the node's sample, the warning is there once */
    for (int i = 0; i < 40; i++) {
        snprintf(flood, sizeof(flood), "flood %d", i);
        telemetry(R(1), flood);
    }
    handled(fx, 0);
    handled(fx, 1);
    handled(fx, 5);
    refused_senders(fx, "tl", telemetry_forged);
    run_until(fx, tel_refused);
    assert_int_equal(R(3)->error.code, RDZV_ERR_PROTOCOL);
    assert_non_null(strstr(R(3)->error.text, "TELEMETRY is not a message"));
    assert_int_equal(R(4)->error.code, RDZV_ERR_PROTOCOL);
    assert_non_null(strstr(R(4)->error.text, "TELEMETRY before JOIN"));
    assert_false(R(0)->closed);
    assert_false(R(1)->closed);
    doc = json_loads(R(2)->status_json, 0, &jerr);
    assert_non_null(doc);
    job = json_array_get(json_object_get(doc, "jobs"), 0);
    assert_string_equal(json_string_value(json_object_get(job, "id")), "tl");
    n0 = json_object_get(node_of(job, "host0"), "telemetry");
    assert_non_null(n0);
    assert_int_equal(json_integer_value(json_object_get(n0, "t_ms")), 1700000000123ll);
    assert_int_equal(json_array_size(json_object_get(n0, "gpus")), 2);
    g0 = json_array_get(json_object_get(n0, "gpus"), 0);
    g1 = json_array_get(json_object_get(n0, "gpus"), 1);
    assert_int_equal(json_integer_value(json_object_get(g0, "util")), 97);
    assert_int_equal(json_integer_value(json_object_get(g0, "mem_used")), 30ll << 30);
    assert_int_equal(json_array_size(json_object_get(g0, "procs")), 3);
    assert_int_equal(json_integer_value(
                         json_object_get(json_array_get(json_object_get(g0, "procs"), 1), "rank")),
                     1);
    assert_true(
        json_is_null(json_object_get(json_array_get(json_object_get(g0, "procs"), 2), "rank")));
    assert_true(
        json_is_null(json_object_get(json_array_get(json_object_get(g0, "procs"), 2), "mem")));
    assert_int_equal(json_integer_value(json_object_get(g1, "throttle")), 0x44);
    assert_true(json_real_value(json_object_get(g1, "power_w")) == 180.0);
    assert_int_equal(json_integer_value(json_object_get(g1, "xid")), 79);
    assert_non_null(json_object_get(json_object_get(node_of(job, "host1"), "telemetry"), "gpus"));
    warn = json_object_get(job, "warnings");
    assert_int_equal(json_array_size(warn), 32); /* 41 distinct, SJOB_WARN_MAX kept */
    assert_string_equal(json_string_value(json_array_get(warn, 0)),
                        "ranks 0-1 all run on GPU 0 of node1: the script ignores LOCAL_RANK");
    assert_string_equal(json_string_value(json_array_get(warn, 1)), "flood 0");
    for (size_t i = 0; i < json_array_size(warn); i++)
        assert_null(strstr(json_string_value(json_array_get(warn, i)), "forged"));
    json_decref(doc);
}

/* --- PREFLIGHT -------------------------------------------------------------------------------- */
static void preflight(struct raw *r, const char *uuid0, uint32_t index1)
{
    struct rdzv_msg *m = sendq_msg(RDZV_MSG_PREFLIGHT);
    struct rdzv_preflight *pf = &m->u.preflight;

    msgfix_preflight(pf); /* P2P at WARNING 39.0 GB/s, GPU 1 slow (FAILURE, 474 TFLOP/s) */
    pf->round = 0;        /* this job's first round, from a member: not a node that joined later */
    pf->joined = 0;
    snprintf(pf->gpus[0].uuid, sizeof(pf->gpus[0].uuid), "%s", uuid0);
    pf->gpus[1].index = index1;
    send_msg(r, m);
}

/* A PREFLIGHT whose GPU 0 is named after the sender (GPU-3333 from R(3), GPU-4444 from R(4)). */
static void preflight_of(struct raw *r)
{
    preflight(r, r == R(3) ? "GPU-3333" : "GPU-4444", 1);
}

static int pf_refused(struct fixture *fx)
{
    (void)fx;
    return N(0, HEARTBEAT) == 1 && N(2, STATUS) == 1 && N(3, ERROR) == 1 && N(4, ERROR) == 1 &&
           N(1, ERROR) == 1 && R(1)->closed && R(3)->closed && R(4)->closed;
}

/* A member's PREFLIGHT shows up in STATUS under its own host (the message names none), per GPU
 * with figures and levels; a worker, an agent that never joined, a control character in a
 * string and a GPU index given twice are refused (ERROR PROTOCOL, closed) and not recorded. */
static void test_preflight_status(void **state)
{
    struct fixture *fx = *state;
    json_t *doc, *list, *node, *gpu;
    json_error_t jerr;
    int r0;

    agent(fx, 0, "pf", 2, 2);
    agent(fx, 1, "pf", 2, 2);
    run_until(fx, both_assigned);
    r0 = 0;
    preflight(R(0), "GPU-0000", 1);
    preflight(R(0), "GPU-0000", 1);    /* again: replaces its record, no second node */
    handled(fx, 0);                    /* the PREFLIGHTs before it */
    preflight(R(1), "GPU-\x1b[2J", 1); /* a terminal escape in a UUID */
    refused_senders(fx, "pf", preflight_of);
    run_until(fx, pf_refused);
    assert_int_equal(R(1)->error.code, RDZV_ERR_PROTOCOL);
    assert_non_null(strstr(R(1)->error.text, "control character"));
    assert_int_equal(R(3)->error.code, RDZV_ERR_PROTOCOL);
    assert_non_null(strstr(R(3)->error.text, "PREFLIGHT is not a message"));
    assert_int_equal(R(4)->error.code, RDZV_ERR_PROTOCOL);
    assert_non_null(strstr(R(4)->error.text, "before JOIN"));
    doc = json_loads(R(2)->status_json, 0, &jerr);
    assert_non_null(doc);
    list = json_object_get(json_array_get(json_object_get(doc, "jobs"), 0), "preflight");
    assert_int_equal(json_array_size(list), 1); /* R(1)'s was refused, R(0)'s replaced */
    node = json_array_get(list, 0);
    assert_string_equal(json_string_value(json_object_get(node, "host")), "host0");
    assert_true(json_is_true(json_object_get(node, "ok")));
    assert_true(json_is_false(json_object_get(node, "joined")));
    assert_int_equal(json_integer_value(json_object_get(json_object_get(node, "p2p"), "pairs")), 2);
    assert_string_equal(json_string_value(json_object_get(json_object_get(node, "p2p"), "level")),
                        "warning");
    assert_true(json_real_value(json_object_get(json_object_get(node, "p2p"), "min_gbps")) == 39.0);
    assert_int_equal(json_array_size(json_object_get(node, "gpus")), 2);
    gpu = json_array_get(json_object_get(node, "gpus"), 1);
    assert_int_equal(json_integer_value(json_object_get(gpu, "index")), 1);
    assert_string_equal(json_string_value(json_object_get(gpu, "uuid")), "GPU-1111");
    assert_string_equal(json_string_value(json_object_get(gpu, "model")), "NVIDIA H200");
    assert_true(json_real_value(json_object_get(gpu, "gemm_tflops")) == 474.0);
    assert_true(json_real_value(json_object_get(gpu, "hbm_gbps")) == 4280.0);
    assert_string_equal(json_string_value(json_object_get(gpu, "level")), "failure");
    assert_non_null(strstr(json_string_value(json_object_get(gpu, "note")), "is slow"));
    json_decref(doc);
    (void)r0;
}

static int dup_refused(struct fixture *fx)
{
    (void)fx;
    return N(0, ERROR) == 1 && R(0)->closed;
}

static void test_preflight_duplicate_gpu(void **state)
{
    struct fixture *fx = *state;

    agent(fx, 0, "pfd", 2, 2);
    agent(fx, 1, "pfd", 2, 2);
    run_until(fx, both_assigned);
    preflight(R(0), "GPU-0000", 0); /* index 0 twice */
    run_until(fx, dup_refused);
    assert_non_null(strstr(R(0)->error.text, "GPU index twice"));
}

/* The /metrics samples: one per measured GPU and figure (an unmeasured one has none, not a
 * fake 0), the level of every GPU, the slowest P2P pair per node; label values escaped. */
static void test_preflight_metrics(void **state)
{
    static struct rdzv_preflight pf;
    struct rdzv_pfrec rec = {0};
    char *text = NULL;
    size_t len = 0;
    FILE *f;

    (void)state;
    pf.count = 2;
    pf.p2p_pairs = 2;
    pf.p2p_min_mbps = 390500;
    pf.gpus[0] = (struct rdzv_pf_gpu){.index = 0, .gemm_gflops = 790100, .hbm_mbps = 4280000};
    strcpy(pf.gpus[0].uuid, "GPU-0");
    pf.gpus[1] = (struct rdzv_pf_gpu){.index = 3, .level = RDZV_PF_FAILURE};
    strcpy(pf.gpus[1].uuid, "GPU-\"3\\");
    assert_null(rdzv_pfrec_check(&pf));
    assert_int_equal(rdzv_pfrec_put(&rec, 7, "node-a", 1, &pf), 0);
    assert_int_equal(rdzv_pfrec_put(&rec, 7, "node-a", 2, &pf), 0);
    assert_int_equal(rec.n, 1);
    assert_non_null(f = open_memstream(&text, &len));
    rdzv_pfrec_metrics(f, "job\"1", &rec, "gemm");
    rdzv_pfrec_metrics(f, "job\"1", &rec, "hbm");
    rdzv_pfrec_metrics(f, "job\"1", &rec, "level");
    rdzv_pfrec_metrics(f, "job\"1", &rec, "p2p");
    fclose(f);
    assert_string_equal(
        text, "muster_preflight_gpu_gemm_tflops{job=\"job\\\"1\",host=\"node-a\",gpu=\"0\","
              "uuid=\"GPU-0\"} 790.1\n"
              "muster_preflight_gpu_hbm_gbps{job=\"job\\\"1\",host=\"node-a\",gpu=\"0\","
              "uuid=\"GPU-0\"} 4280\n"
              "muster_preflight_gpu_level{job=\"job\\\"1\",host=\"node-a\",gpu=\"0\","
              "uuid=\"GPU-0\"} 0\n"
              "muster_preflight_gpu_level{job=\"job\\\"1\",host=\"node-a\",gpu=\"3\","
              "uuid=\"GPU-\\\"3\\\\\"} 2\n"
              "muster_preflight_p2p_min_gbps{job=\"job\\\"1\",host=\"node-a\"} 390.5\n");
    free(text);
    /* hostile content the codec lets through: refused before it is stored */
    pf.count = RDZV_PF_GPUS_MAX + 1;
    assert_non_null(rdzv_pfrec_check(&pf));
    pf.count = 2;
    pf.gpus[1].index = 1024;
    assert_non_null(rdzv_pfrec_check(&pf));
    pf.gpus[1].index = 3;
    pf.gpus[0].model[0] = (char)0xc3; /* non-ASCII */
    assert_non_null(rdzv_pfrec_check(&pf));
    pf.gpus[0].model[0] = '\0';
    pf.ok = 2;
    assert_non_null(rdzv_pfrec_check(&pf));
    rdzv_pfrec_clear(&rec);
}

/* --- checkpoint replicas ---------------------------------------------------------------------- */
#define CH RDZV_REPL_CHUNK_MAX
#define X(n) (RDZV_REPL_XFER_SENDER | (n)) /* a sender's transfer id */

static void repl_begin(struct raw *r, uint32_t xfer, uint32_t rank, uint64_t size)
{
    struct rdzv_msg *m = sendq_msg(RDZV_MSG_REPL_BEGIN);

    m->u.repl_begin = (struct rdzv_repl_begin){
        .xfer = xfer, .round = r->assign.round, .rank = rank, .step = 5, .size = size};
    strcpy(m->u.repl_begin.name, "ckpt_5.pt");
    send_msg(r, m);
}

static void repl_data(struct raw *r, uint32_t xfer, uint64_t off, uint32_t len)
{
    struct rdzv_msg *m = sendq_msg(RDZV_MSG_REPL_DATA);

    m->u.repl_data.xfer = xfer;
    m->u.repl_data.offset = off;
    m->u.repl_data.len = len;
    memset(m->u.repl_data.data, 0x42, len);
    send_msg(r, m);
}

static void repl_ack(struct raw *r, uint32_t xfer, uint64_t off, uint8_t status)
{
    struct rdzv_msg *m = sendq_msg(RDZV_MSG_REPL_ACK);

    m->u.repl_ack = (struct rdzv_repl_ack){.xfer = xfer, .offset = off, .status = status};
    send_msg(r, m);
}

static int g_s, g_d;   /* the raw index of group rank 0 (sender) and of rank 1 */
static int g_want;     /* REPL_ACKs the sender must have had */
static uint64_t g_got; /* REPL_DATA bytes the receiver must have had */

static int repl_acks(struct fixture *fx)
{
    (void)fx;
    return N(g_s, REPL_ACK) == g_want;
}

static int repl_relayed(struct fixture *fx)
{
    (void)fx;
    return R(g_d)->repl_bytes == g_got && N(g_d, REPL_BEGIN) >= 1;
}

static void two_agents(struct fixture *fx, const char *job)
{
    agent(fx, 0, job, 2, 2);
    agent(fx, 1, job, 2, 2);
    run_until(fx, both_assigned);
    g_s = R(0)->assign.group_rank == 0 ? 0 : 1;
    g_d = 1 - g_s;
}

/* Relayed in order and inside the window; a chunk past the window, out of order or past the
 * announced size, or an acknowledgement of bytes never relayed, ends the transfer for both. */
static void test_repl_window_offsets(void **state)
{
    struct fixture *fx = *state;

    two_agents(fx, "rp");
    repl_begin(R(g_s), X(1), 1, 20 * (uint64_t)CH);
    for (int i = 0; i < 8; i++) /* exactly one window */
        repl_data(R(g_s), X(1), (uint64_t)i * CH, CH);
    g_got = 8 * (uint64_t)CH;
    run_until(fx, repl_relayed);
    assert_int_equal(R(g_d)->repl_begin.rank, 0); /* the receiver learns the sender's rank */
    assert_int_equal(R(g_d)->repl_begin.xfer & RDZV_REPL_XFER_SENDER, 0);
    assert_string_equal(R(g_d)->repl_begin.name, "ckpt_5.pt");
    repl_data(R(g_s), X(1), 8 * (uint64_t)CH, CH); /* no ACK yet: over the window */
    g_want = 1;
    run_until(fx, repl_acks);
    assert_int_equal(R(g_s)->repl_ack.status, RDZV_REPL_ABORT);
    assert_string_equal(R(g_s)->repl_ack.text, "sender ran past the flow-control window");

    repl_begin(R(g_s), X(2), 1, 1000);
    repl_data(R(g_s), X(2), 100, 100); /* not the next byte */
    g_want = 2;
    run_until(fx, repl_acks);
    assert_non_null(strstr(R(g_s)->repl_ack.text, "expected offset 0 of 1000"));
    repl_begin(R(g_s), X(3), 1, 1000);
    repl_data(R(g_s), X(3), 0, 1001); /* past the announced size */
    g_want = 3;
    run_until(fx, repl_acks);
    assert_non_null(strstr(R(g_s)->repl_ack.text, "refused"));
    repl_begin(R(g_s), X(4), 1, 1000);
    repl_data(R(g_s), X(4), 0, 500);
    g_got += 500;
    run_until(fx, repl_relayed);
    repl_ack(R(g_d), R(g_d)->repl_begin.xfer, 900, RDZV_REPL_PROGRESS); /* never relayed */
    g_want = 4;
    run_until(fx, repl_acks);
    assert_string_equal(R(g_s)->repl_ack.text, "acknowledgement outside the bytes relayed");
    repl_begin(R(g_s), 5, 1, 1000); /* not a sender's id */
    g_want = 5;
    run_until(fx, repl_acks);
    assert_non_null(strstr(R(g_s)->repl_ack.text, "top bit"));
    assert_int_equal(R(g_d)->repl_bytes, g_got); /* nothing refused reached the receiver */
}

static int hostile_done(struct fixture *fx)
{
    (void)fx;
    return N(2, REPL_ACK) == 4 && N(g_d, REPL_ACK) == 1 && N(3, ERROR) == 1 && R(3)->closed &&
           N(4, ERROR) == 1 && R(4)->closed;
}

/* Another job's agent, the receiver itself, a worker and an agent that never joined cannot
 * start, feed, acknowledge or read a transfer of job "rp". */
static void test_repl_hostile(void **state)
{
    struct fixture *fx = *state;
    uint32_t sid;

    two_agents(fx, "rp");
    agent(fx, 2, "other", 1, 1);
    HARNESS_RUN_UNTIL(&fx->h, N(2, ASSIGN) == 1);
    repl_begin(R(g_s), X(1), 1, 10 * (uint64_t)CH);
    repl_data(R(g_s), X(1), 0, CH);
    g_got = CH;
    run_until(fx, repl_relayed);
    sid = R(g_d)->repl_begin.xfer;
    repl_begin(R(2), X(1), 1, 100);          /* rank 1 of ITS job: there is none */
    repl_begin(R(2), X(2), 0, 100);          /* itself */
    repl_data(R(2), sid, CH, CH);            /* a guess of the server's id */
    repl_data(R(2), X(1), CH, CH);           /* the sender's id, from another connection */
    repl_ack(R(2), sid, CH, RDZV_REPL_DONE); /* not its transfer: ignored */
    repl_data(R(g_d), X(1), CH, CH);         /* the receiver cannot feed it either */
    worker(fx, 3, "rp", 0);
    repl_data(R(3), sid, CH, CH);
    raw_new(fx, 4, RDZV_ROLE_AGENT); /* never joined */
    repl_begin(R(4), X(1), 1, 100);
    run_until(fx, hostile_done);
    assert_int_equal(R(3)->error.code, RDZV_ERR_PROTOCOL);
    assert_int_equal(R(4)->error.code, RDZV_ERR_PROTOCOL);
    assert_int_equal(R(g_d)->repl_ack.status, RDZV_REPL_ABORT); /* its own DATA, refused */
    assert_int_equal(N(g_s, REPL_ACK), 0);                      /* nothing forged reached it */
    assert_int_equal(N(2, REPL_DATA) + N(2, REPL_BEGIN), 0);    /* nor leaked elsewhere */
    assert_int_equal(R(g_d)->repl_bytes, CH);
    /* the real transfer goes on */
    repl_data(R(g_s), X(1), CH, CH);
    g_got = 2 * (uint64_t)CH;
    run_until(fx, repl_relayed);
    repl_ack(R(g_d), sid, 2 * (uint64_t)CH, RDZV_REPL_PROGRESS);
    g_want = 1;
    run_until(fx, repl_acks);
    assert_int_equal(R(g_s)->repl_ack.xfer, X(1));
    assert_int_equal(R(g_s)->repl_ack.offset, 2 * (uint64_t)CH);
}

static void repl_begin_direct(struct raw *r, uint32_t xfer, uint64_t size)
{
    struct rdzv_msg *m = sendq_msg(RDZV_MSG_REPL_BEGIN);

    m->u.repl_begin = (struct rdzv_repl_begin){.xfer = xfer,
                                               .round = r->assign.round,
                                               .rank = 1,
                                               .step = 5,
                                               .size = size,
                                               .port = 4242,
                                               .link = xfer,
                                               .mode = 0600};
    memset(m->u.repl_begin.key, 0x3c, sizeof(m->u.repl_begin.key));
    strcpy(m->u.repl_begin.name, "ckpt_5.pt");
    strcpy(m->u.repl_begin.host, "attacker.example"); /* the server names the sender's address */
    send_msg(r, m);
}

/* A direct link: the server passes port, link, key and mode on, names the sender's own
 * address, relays no chunk of it, accepts the receiver's DONE at the announced size, and
 * switches to relaying when the receiver asks, once. */
static void test_repl_direct_link(void **state)
{
    struct fixture *fx = *state;

    two_agents(fx, "rd");
    repl_begin_direct(R(g_s), X(1), 10 * (uint64_t)CH);
    HARNESS_RUN_UNTIL(&fx->h, N(g_d, REPL_BEGIN) == 1);
    assert_int_equal(R(g_d)->repl_begin.port, 4242);
    assert_int_equal(R(g_d)->repl_begin.link, X(1));
    assert_int_equal(R(g_d)->repl_begin.key[31], 0x3c);
    assert_int_equal(R(g_d)->repl_begin.mode, 0600); /* the original's, for the receiver */
    assert_string_equal(R(g_d)->repl_begin.host, "127.0.0.1"); /* where the sender came from */
    repl_data(R(g_s), X(1), 0, CH); /* a chunk of a direct transfer through the server */
    g_want = 1;
    run_until(fx, repl_acks);
    assert_string_equal(R(g_s)->repl_ack.text, "chunk relayed for a transfer on a direct link");
    assert_int_equal(R(g_d)->repl_bytes, 0);

    repl_begin_direct(R(g_s), X(2), 10 * (uint64_t)CH);
    HARNESS_RUN_UNTIL(&fx->h, N(g_d, REPL_BEGIN) == 2);
    repl_ack(R(g_d), R(g_d)->repl_begin.xfer, 10 * (uint64_t)CH, RDZV_REPL_DONE);
    g_want = 2;
    run_until(fx, repl_acks);
    assert_int_equal(R(g_s)->repl_ack.status, RDZV_REPL_DONE);
    assert_int_equal(R(g_s)->repl_ack.xfer, X(2));

    repl_begin_direct(R(g_s), X(3), 2 * (uint64_t)CH);
    HARNESS_RUN_UNTIL(&fx->h, N(g_d, REPL_BEGIN) == 3);
    repl_ack(R(g_d), R(g_d)->repl_begin.xfer, 0, RDZV_REPL_RELAY);
    g_want = 3;
    run_until(fx, repl_acks);
    assert_int_equal(R(g_s)->repl_ack.status, RDZV_REPL_RELAY);
    repl_data(R(g_s), X(3), 0, CH); /* relayed now */
    g_got = CH;
    run_until(fx, repl_relayed);
    repl_ack(R(g_d), R(g_d)->repl_begin.xfer, 0, RDZV_REPL_RELAY);
    g_want = 4; /* the second RELAY ends it: an ABORT to each side */
    run_until(fx, repl_acks);
    assert_string_equal(R(g_s)->repl_ack.text, "relay asked for twice");
}

static void ckpt_held(struct raw *r, const char *name, int gone)
{
    struct rdzv_msg *m = sendq_msg(RDZV_MSG_CKPT);

    snprintf(m->u.ckpt.name, sizeof(m->u.ckpt.name), "%s", name);
    m->u.ckpt.step = 5;
    m->u.ckpt.size = 4096;
    m->u.ckpt.checksum = 0xabcULL;
    m->u.ckpt.verified_bad = (uint8_t)gone;
    strcpy(m->u.ckpt.reason, gone ? "pruned (--keep-checkpoints)" : "");
    strcpy(m->u.ckpt.holder, "anyone"); /* the server names the node this connection joined as */
    send_msg(r, m);
}

/* STATUS's replica list of checkpoint s5, as JSON text. */
static char *replicas_of_s5(struct fixture *fx, int observer, int want)
{
    struct rdzv_msg *m = sendq_msg(RDZV_MSG_STATUS_REQ);
    json_t *doc, *list;
    json_error_t jerr;
    char *text;

    strcpy(m->u.status_req.job_id, "kp");
    send_msg(R(observer), m);
    HARNESS_RUN_UNTIL(&fx->h, N(observer, STATUS) == want);
    doc = json_loads(R(observer)->status_json, 0, &jerr);
    assert_non_null(doc);
    list = json_object_get(json_array_get(json_object_get(doc, "jobs"), 0), "checkpoints");
    assert_string_equal(ckpt_field(list, 0, "name"), "s5");
    text = json_dumps(json_object_get(json_array_get(list, 0), "replicas"), JSON_COMPACT);
    json_decref(doc);
    return text;
}

/* A replica the holder pruned (CKPT with the holder, verified_bad) leaves the list `muster
 * status` shows; the record the writer made stays. */
static void test_ckpt_replica_pruned(void **state)
{
    struct fixture *fx = *state;
    char *text, want[32];

    two_agents(fx, "kp");
    ckpt(R(g_s), "s5", 0);
    ckpt_held(R(g_d), "s5", 0);
    raw_new(fx, 2, RDZV_ROLE_OBSERVER);
    text = replicas_of_s5(fx, 2, 1);
    snprintf(want, sizeof(want), "[\"host%d\"]", g_d); /* the receiver's JOIN host */
    assert_string_equal(text, want);
    free(text);
    ckpt_held(R(g_d), "s5", 1);
    text = replicas_of_s5(fx, 2, 2);
    assert_string_equal(text, "[]");
    free(text);
}

static int parts_told(struct fixture *fx)
{
    (void)fx;
    return N(0, CKPT_PART) + N(1, CKPT_PART) >= 1 && N(3, ERROR) == 1;
}

static void send_ckpt(struct raw *r, const char *name, int64_t step)
{
    struct rdzv_msg *m = sendq_msg(RDZV_MSG_CKPT);

    snprintf(m->u.ckpt.name, sizeof(m->u.ckpt.name), "%s", name);
    m->u.ckpt.step = step;
    m->u.ckpt.size = 4096;
    m->u.ckpt.checksum = 0x1234;
    send_msg(r, m);
}

/* Sharded checkpoints: rank 0's own record tells every other member that records parts
 * (JOIN's RDZV_JOIN_PARTS) to record its part, with its own part number; a member without the
 * flag (an older agent) is told nothing, nor is anyone told of another member's record; a
 * CKPT_PART from an agent is refused (ERROR PROTOCOL, closed). */
static void test_ckpt_parts(void **state)
{
    struct fixture *fx = *state;
    struct rdzv_msg *m;
    int r0 = -1;

    g_join_flags = RDZV_JOIN_PARTS;
    agent(fx, 0, "sh", 3, 3);
    agent(fx, 1, "sh", 3, 3);
    g_join_flags = 0;
    agent(fx, 2, "sh", 3, 3);
    run_until(fx, three_assigned);
    for (int i = 0; i < 3; i++)
        if (R(i)->assign.group_rank == 0)
            r0 = i;
    assert_true(r0 >= 0);
    for (int i = 0; i < 3; i++)
        if (i != r0)
            send_ckpt(R(i), "step-3", 3); /* not rank 0's: nobody is told */
    send_ckpt(R(r0), "step-5", 5);
    raw_new(fx, 3, RDZV_ROLE_AGENT);
    m = sendq_msg(RDZV_MSG_CKPT_PART);
    snprintf(m->u.ckpt_part.name, sizeof(m->u.ckpt_part.name), "step-5");
    m->u.ckpt_part.part = 1;
    m->u.ckpt_part.parts = 1;
    send_msg(R(3), m);
    for (int i = 0; i < 3; i++)
        handled(fx, i);
    run_until(fx, parts_told);
    for (int i = 0; i < 2; i++) {
        if (i == r0) {
            assert_int_equal(N(i, CKPT_PART), 0);
            continue;
        }
        assert_int_equal(N(i, CKPT_PART), 1);
        assert_string_equal(R(i)->ckpt_part.name, "step-5");
        assert_int_equal(R(i)->ckpt_part.step, 5);
        assert_int_equal(R(i)->ckpt_part.parts, 3);
        assert_int_equal(R(i)->ckpt_part.part, R(i)->assign.group_rank + 1);
        assert_int_equal(R(i)->ckpt_part.round, R(i)->assign.round);
    }
    assert_int_equal(N(2, CKPT_PART), 0); /* no flag */
    assert_int_equal(R(3)->error.code, RDZV_ERR_PROTOCOL);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_heartbeat_timeout),
        T(test_lost_by_close_ranks),
        T(test_same_failure_hostile),
        T(test_scale_up),
        T(test_scale_up_full),
        T(test_rejoin_after_server_restart),
        T(test_rejoin_grace),
        T(test_rejoin_stale_round),
        T(test_kv),
        T(test_status),
        T(test_ckpt_status),
        T(test_goodput_status),
        T(test_log),
        T(test_telemetry_status),
        T(test_preflight_status),
        T(test_preflight_duplicate_gpu),
        cmocka_unit_test(test_preflight_metrics),
        T(test_repl_window_offsets),
        T(test_repl_hostile),
        T(test_repl_direct_link),
        T(test_ckpt_replica_pruned),
        T(test_ckpt_parts),
    };
#undef T

    int rc;

    if (rdzv_tls_new(&(struct rdzv_tls_opts){.token = TOKEN}, 0, &g_tls, NULL, 0) < 0)
        return 1;
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    rdzv_tls_free(g_tls);
    return rc;
}
