/* rdzv_client liveness and reconnection over real loopback TCP on a private loop: heartbeats,
 * a silent server, a server restarted on the same port, a server gone past the grace, and a
 * failure reported while disconnected. Nothing sleeps: each test runs the loop until a
 * predicate over the callback counters holds, under a watchdog timer. */
#include <arpa/inet.h>
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

#include "client.h"
#include "conn.h"
#include "cred.h"
#include "server.h"
#include "status.h"
#include "tls.h"

#define WATCHDOG_MS 10000
#define TOKEN "client-test-token" /* the TLS pre-shared key */

struct fixture {
    uv_loop_t loop;
    struct harness h; /* watchdog, run_until */
    struct rdzv_server *srv;
    unsigned port;
    int server_closed;  /* gone_later_cb */
    int restart_server; /* start a new server on the same port once the old one closed */
    int fail_while_away;
    int ckpt_while_away;
    /* the one agent */
    struct rdzv_client *c;
    struct rdzv_join join;
    int waiting, assigned, restarts, job_done, job_failed, errors, disconnected, reconnected;
    int server_waits; /* server_wait_cb: the first connection was refused */
    int want;         /* assigned_n, restarted_n */
    struct rdzv_assign assign;
    struct rdzv_job_failed jf;
    int err;
    char errtext[RDZV_TEXT_MAX + 64];
    char why[256];
    uint64_t last_msg_ms, disconnected_ms;
    /* the fake server of test_silent_server */
    uv_tcp_t listener;
    struct rdzv_conn *fake[8];
    int nfake, fake_hellos;
    struct rdzv_tls *fake_tls; /* it speaks TLS with TOKEN like the real server */
};

/* pred(fx) holds, or the watchdog fails the test (harness.h) */
#define run_until(fx, pred) HARNESS_RUN_UNTIL(&(fx)->h, pred(fx))

/* Lets the loop run for ms: what must NOT happen meanwhile is asserted afterwards. */
#define run_for(fx, ms) harness_run_for(&(fx)->h, ms)

/* --- client callbacks ---------------------------------------------------------------------- */
static void waiting_cb(struct rdzv_client *c, const struct rdzv_waiting *w)
{
    struct fixture *fx = rdzv_client_data(c);

    fx->waiting++;
}

static void assign_cb(struct rdzv_client *c, const struct rdzv_assign *a)
{
    struct fixture *fx = rdzv_client_data(c);

    fx->assigned++;
    fx->assign = *a;
    fx->last_msg_ms = uv_now(&fx->loop);
}

static void restart_cb(struct rdzv_client *c, const struct rdzv_restart *r)
{
    struct fixture *fx = rdzv_client_data(c);

    fx->restarts++;
}

static void job_done_cb(struct rdzv_client *c)
{
    struct fixture *fx = rdzv_client_data(c);

    fx->job_done++;
}

static void job_failed_cb(struct rdzv_client *c, const struct rdzv_job_failed *f)
{
    struct fixture *fx = rdzv_client_data(c);

    fx->job_failed++;
    fx->jf = *f;
}

static void error_cb(struct rdzv_client *c, int err, const char *text)
{
    struct fixture *fx = rdzv_client_data(c);

    fx->errors++;
    fx->err = err;
    snprintf(fx->errtext, sizeof(fx->errtext), "%s", text);
}

static void disconnected_cb(struct rdzv_client *c, const char *why)
{
    struct fixture *fx = rdzv_client_data(c);
    struct rdzv_failure f = {.round = fx->assign.round, .rank = 0, .exit_code = 3};

    fx->disconnected++;
    fx->disconnected_ms = uv_now(&fx->loop);
    snprintf(fx->why, sizeof(fx->why), "%s", why);
    if (fx->fail_while_away) {
        snprintf(f.text, sizeof(f.text), "boom while away");
        assert_int_equal(rdzv_client_report_failure(c, &f, 0), 0);
    }
    if (fx->ckpt_while_away) {
        struct rdzv_ckpt ck = {.step = 7, .size = 10, .checksum = 0x1234};

        snprintf(ck.name, sizeof(ck.name), "step-7");
        assert_int_equal(rdzv_client_report_ckpt(c, &ck), 0); /* queued */
    }
}

static void reconnected_cb(struct rdzv_client *c)
{
    struct fixture *fx = rdzv_client_data(c);

    fx->reconnected++;
}

static void server_wait_cb(struct rdzv_client *c, int err, uint64_t waited_ms)
{
    struct fixture *fx = rdzv_client_data(c);

    (void)waited_ms;
    fx->err = err;
    fx->server_waits++;
}

static const struct rdzv_client_cbs cbs = {
    .server_wait_cb = server_wait_cb,
    .waiting_cb = waiting_cb,
    .assign_cb = assign_cb,
    .restart_cb = restart_cb,
    .job_done_cb = job_done_cb,
    .job_failed_cb = job_failed_cb,
    .error_cb = error_cb,
    .disconnected_cb = disconnected_cb,
    .reconnected_cb = reconnected_cb,
};

/* --- fixture ------------------------------------------------------------------------------- */
static int setup(void **state)
{
    static struct fixture fx;

    memset(&fx, 0, sizeof(fx));
    assert_int_equal(uv_loop_init(&fx.loop), 0);
    harness_init(&fx.h, &fx.loop, WATCHDOG_MS);
    assert_int_equal(rdzv_server_new(&fx.loop, "127.0.0.1", 0, TOKEN, &fx.srv), 0);
    fx.port = rdzv_server_port(fx.srv);
    assert_true(fx.port > 0);
    fx.join = (struct rdzv_join){.min_nodes = 1,
                                 .max_nodes = 1,
                                 .nproc = 2,
                                 .master_port = 29500,
                                 .max_restarts = 0,
                                 .last_call_ms = 100,
                                 .join_timeout_ms = 5000,
                                 .keep_alive_ms = 20,
                                 .heartbeat_timeout_ms = 300,
                                 .reconnect_grace_ms = 5000};
    fx.join.node_secret[0] = 42; /* protocol 3: the id commits to the secret */
    fx.join.node_id = rdzv_node_id_of(fx.join.node_secret);
    snprintf(fx.join.job_id, sizeof(fx.join.job_id), "job");
    snprintf(fx.join.host, sizeof(fx.join.host), "host0");
    *state = &fx;
    return 0;
}

static void count_closed_cb(void *data)
{
    (*(int *)data)++;
}

static void fake_closed_cb(struct rdzv_conn *conn)
{
    free(conn);
}

static int teardown(void **state)
{
    struct fixture *fx = *state;
    int closed = 0, want = 1;

    rdzv_client_close(fx->c, count_closed_cb, &closed);
    if (fx->srv != NULL) {
        rdzv_server_close(fx->srv, count_closed_cb, &closed);
        want++;
    }
    for (int i = 0; i < fx->nfake; i++)
        rdzv_conn_close(fx->fake[i], 0, fake_closed_cb);
    if (uv_is_active((uv_handle_t *)&fx->listener))
        uv_close((uv_handle_t *)&fx->listener, NULL);
    harness_close(&fx->h);
    assert_int_equal(uv_run(&fx->loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(closed, want);
    assert_int_equal(uv_loop_close(&fx->loop), 0);
    rdzv_tls_free(fx->fake_tls); /* after its conns closed */
    return 0;
}

static void start_client(struct fixture *fx)
{
    assert_int_equal(rdzv_client_new(&fx->loop, "127.0.0.1", fx->port, TOKEN, &cbs, fx, &fx->c), 0);
    assert_int_equal(rdzv_client_join(fx->c, &fx->join), 0);
}

/* The old server is gone (all its handles closed): maybe bring up a new one on its port. */
static void server_gone_cb(void *data)
{
    struct fixture *fx = data;

    if (fx->restart_server)
        assert_int_equal(rdzv_server_new(&fx->loop, "127.0.0.1", fx->port, TOKEN, &fx->srv), 0);
}

static void kill_server(struct fixture *fx)
{
    rdzv_server_close(fx->srv, server_gone_cb, fx);
    fx->srv = NULL;
}

static int assigned(struct fixture *fx)
{
    return fx->assigned == 1;
}

/* --- tests --------------------------------------------------------------------------------- */
/* The server echoes HEARTBEATs: the RTT is measured and 15 keep-alive periods of an idle,
 * running round (2.5 heartbeat timeouts) pass without an outage. */
static void test_heartbeat_rtt(void **state)
{
    struct fixture *fx = *state;

    start_client(fx);
    assert_int_equal(rdzv_client_rtt_us(fx->c), -1);
    run_until(fx, assigned);
    run_for(fx, 750); /* heartbeats call no callback: look afterwards */
    assert_true(rdzv_client_rtt_us(fx->c) >= 0);
    assert_true(rdzv_client_rtt_us(fx->c) < 1000000);
    assert_int_equal(fx->disconnected, 0);
    assert_int_equal(fx->errors, 0);
    assert_int_equal(fx->restarts, 0);
}

static int reconnected(struct fixture *fx)
{
    return fx->reconnected == 1;
}

static int job_done(struct fixture *fx)
{
    return fx->job_done == 1;
}

/* Server killed and started again on the same port: the client reconnects, REJOINs, and the
 * rebuilt job finishes when the agent reports DONE, with no restart and no error. */
static void test_server_restart_rejoin(void **state)
{
    struct fixture *fx = *state;

    start_client(fx);
    run_until(fx, assigned);
    fx->restart_server = 1;
    kill_server(fx);
    run_until(fx, reconnected);
    assert_int_equal(fx->disconnected, 1);
    assert_string_equal(fx->why, "connection closed");
    assert_int_equal(rdzv_client_report_done(fx->c, fx->assign.round), 0);
    run_until(fx, job_done);
    assert_int_equal(fx->assigned, 1);
    assert_int_equal(fx->restarts, 0);
    assert_int_equal(fx->errors, 0);
    assert_int_equal(fx->job_failed, 0);
}

static int errored(struct fixture *fx)
{
    return fx->errors == 1;
}

/* No server comes back: error_cb once, UV_ETIMEDOUT, after the grace and not much later. */
static void test_grace_expires(void **state)
{
    struct fixture *fx = *state;
    uint64_t elapsed;

    fx->join.reconnect_grace_ms = 400;
    start_client(fx);
    run_until(fx, assigned);
    kill_server(fx);
    run_until(fx, errored);
    elapsed = uv_now(&fx->loop) - fx->disconnected_ms;
    assert_int_equal(fx->err, UV_ETIMEDOUT);
    assert_string_equal(fx->errtext, "rendezvous server unreachable for 400 ms");
    assert_true(elapsed >= 390 && elapsed < 1000);
    assert_int_equal(fx->disconnected, 1);
    assert_int_equal(fx->reconnected, 0);
    run_for(fx, 300);
    assert_int_equal(fx->errors, 1);
    assert_int_equal(fx->restarts, 0);
}

/* CKPT reported during an outage reaches the restarted server after the REJOIN (before the
 * DONE that follows it); the rebuilt job keeps the round's resume point. */
static void test_ckpt_while_away(void **state)
{
    struct fixture *fx = *state;
    struct rdzv_ckpt bad = {.step = 1};
    static char json[RDZV_STATUS_MAX + 1];
    size_t len;

    snprintf(fx->join.resume, sizeof(fx->join.resume), "step-5");
    fx->join.resume_step = 5;
    start_client(fx);
    run_until(fx, assigned);
    assert_string_equal(fx->assign.resume, "step-5");
    assert_int_equal(fx->assign.resume_step, 5);
    snprintf(bad.name, sizeof(bad.name), "../step-1");
    assert_int_equal(rdzv_client_report_ckpt(fx->c, &bad), UV_EINVAL);
    bad.name[0] = '\0';
    assert_int_equal(rdzv_client_report_ckpt(fx->c, &bad), UV_EINVAL);
    fx->restart_server = 1;
    fx->ckpt_while_away = 1;
    kill_server(fx);
    run_until(fx, reconnected);
    assert_int_equal(rdzv_client_report_done(fx->c, fx->assign.round), 0);
    run_until(fx, job_done);
    assert_int_equal(rdzv_status_json(fx->srv, "job", json, sizeof(json), &len), 0);
    assert_non_null(strstr(json, "\"checkpoints\":[{\"name\":\"step-7\""));
    assert_non_null(strstr(json, "\"checksum\":\"0000000000001234\""));
    assert_non_null(strstr(json, "\"resume\":\"step-5\""));
    assert_int_equal(fx->errors, 0);
}

static int job_failed(struct fixture *fx)
{
    return fx->job_failed == 1;
}

static int assigned_n(struct fixture *fx)
{
    return fx->assigned == fx->want;
}

static int restarted_n(struct fixture *fx)
{
    return fx->restarts == fx->want;
}

/* The status document's restart history (the dashboard's): 18 failures in 18 rounds; the newest
 * SJOB_RESTARTS_KEPT (16) are listed newest first with their causes, all 18 counted; the last
 * FAILED with no restart left is listed as final. */
static void test_restart_history(void **state)
{
    struct fixture *fx = *state;
    static char json[RDZV_STATUS_MAX + 1];
    json_t *doc, *job, *list, *r;
    size_t len;

    fx->join.max_restarts = 18;
    start_client(fx);
    for (int i = 0; i < 19; i++) {
        struct rdzv_failure f = {.round = 0, .rank = 1, .local_rank = 1, .exit_code = i + 1};

        fx->want = i + 1;
        run_until(fx, assigned_n);
        f.round = fx->assign.round;
        snprintf(f.text, sizeof(f.text), "boom %d", i);
        assert_int_equal(rdzv_client_report_failure(fx->c, &f, 0), 0);
        if (i == 18)
            break;
        run_until(fx, restarted_n);
        assert_int_equal(rdzv_client_join(fx->c, &fx->join), 0);
    }
    run_until(fx, job_failed);
    assert_int_equal(rdzv_status_json(fx->srv, "job", json, sizeof(json), &len), 0);
    doc = json_loads(json, 0, NULL);
    assert_non_null(doc);
    assert_true(json_integer_value(json_object_get(json_object_get(doc, "server"), "time_ms")) >
                1600000000000);
    job = json_array_get(json_object_get(doc, "jobs"), 0);
    assert_non_null(job);
    assert_int_equal(json_integer_value(json_object_get(job, "restarts_seen")), 19);
    list = json_object_get(job, "restarts");
    assert_int_equal(json_array_size(list), 16);
    r = json_array_get(list, 0); /* the newest: the FAILED that ended the job */
    assert_string_equal(json_string_value(json_object_get(r, "text")), "boom 18");
    assert_int_equal(json_integer_value(json_object_get(r, "round")), 18);
    assert_int_equal(json_integer_value(json_object_get(r, "exit_code")), 19);
    assert_true(json_is_true(json_object_get(r, "final")));
    assert_true(json_is_false(json_object_get(r, "counted")));
    r = json_array_get(list, 1);
    assert_string_equal(json_string_value(json_object_get(r, "text")), "boom 17");
    assert_int_equal(json_integer_value(json_object_get(r, "restart_count")), 18);
    assert_true(json_is_true(json_object_get(r, "counted")));
    assert_true(json_is_false(json_object_get(r, "final")));
    assert_int_equal(json_integer_value(json_object_get(r, "rank")), 1);
    assert_string_equal(json_string_value(json_object_get(r, "host")), "host0");
    assert_true(json_real_value(json_object_get(r, "age_s")) >= 0);
    assert_null(json_object_get(r, "root_cause")); /* no evidence was collected */
    r = json_array_get(list, 15);                  /* the oldest kept: boom 0 .. boom 2 fell off */
    assert_string_equal(json_string_value(json_object_get(r, "text")), "boom 3");
    assert_int_equal(json_integer_value(json_object_get(r, "round")), 3);
    json_decref(doc);
    assert_int_equal(fx->errors, 0);
}

/* A worker failure reported during the outage reaches the restarted server after the REJOIN:
 * with no restarts left the job fails with that very cause. */
static void test_failure_while_away(void **state)
{
    struct fixture *fx = *state;

    start_client(fx);
    run_until(fx, assigned);
    fx->restart_server = 1;
    fx->fail_while_away = 1;
    kill_server(fx);
    run_until(fx, job_failed);
    assert_int_equal(fx->reconnected, 1);
    assert_string_equal(fx->jf.cause.text, "boom while away");
    assert_int_equal(fx->jf.cause.exit_code, 3);
    assert_int_equal(fx->errors, 0);
}

/* --- a fake server that goes silent after ASSIGN: a host cut off without FIN ---------------- */
static void fake_msg_cb(struct rdzv_conn *conn, const struct rdzv_msg *m)
{
    struct fixture *fx = conn->data;
    static struct rdzv_msg out; /* ~64 KiB: not on the stack */

    memset(&out, 0, sizeof(out));
    if (m->type == RDZV_MSG_HELLO) {
        fx->fake_hellos++;
        out.type = RDZV_MSG_WELCOME;
    } else if (m->type == RDZV_MSG_JOIN) {
        out.type = RDZV_MSG_ASSIGN;
        out.u.assign = (struct rdzv_assign){.group_world_size = 1, .world_size = 2};
        snprintf(out.u.assign.master_addr, sizeof(out.u.assign.master_addr), "127.0.0.1");
    } else {
        return; /* HEARTBEAT, REJOIN: never answered */
    }
    assert_int_equal(rdzv_conn_send(conn, &out), 0);
}

static void fake_error_cb(struct rdzv_conn *conn, int err)
{
    (void)conn;
    (void)err; /* the client went away; teardown closes the conn */
}

static void fake_accept_cb(uv_stream_t *listener, int status)
{
    struct fixture *fx = listener->data;
    struct rdzv_conn *conn = malloc(sizeof(*conn));

    assert_int_equal(status, 0);
    assert_non_null(conn);
    assert_true(fx->nfake < 8);
    assert_int_equal(rdzv_conn_init(&fx->loop, conn, fake_msg_cb, fake_error_cb, fx), 0);
    fx->fake[fx->nfake++] = conn;
    assert_int_equal(uv_accept(listener, (uv_stream_t *)&conn->tcp), 0);
    assert_int_equal(rdzv_conn_start_tls(conn, fx->fake_tls, 1), 0);
}

static void start_fake_server(struct fixture *fx)
{
    struct rdzv_tls_opts o = {.token = TOKEN};
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    char err[256];

    assert_int_equal(rdzv_tls_new(&o, 1, &fx->fake_tls, err, sizeof(err)), 0);
    rdzv_server_close(fx->srv, NULL, NULL);
    fx->srv = NULL;
    assert_int_equal(uv_tcp_init(&fx->loop, &fx->listener), 0);
    fx->listener.data = fx;
    assert_int_equal(uv_ip4_addr("127.0.0.1", 0, (struct sockaddr_in *)&ss), 0);
    assert_int_equal(uv_tcp_bind(&fx->listener, (struct sockaddr *)&ss, 0), 0);
    assert_int_equal(uv_listen((uv_stream_t *)&fx->listener, 8, fake_accept_cb), 0);
    assert_int_equal(uv_tcp_getsockname(&fx->listener, (struct sockaddr *)&ss, &len), 0);
    fx->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

static int disconnected_and_back(struct fixture *fx)
{
    return fx->disconnected == 1 && fx->fake_hellos >= 2;
}

/* Nothing arrives for heartbeat_timeout_ms although the TCP connection stays up: the client
 * declares the link dead within the timeout (+ a timer tick) and reconnects. */
static void test_silent_server(void **state)
{
    struct fixture *fx = *state;
    uint64_t silent;

    start_fake_server(fx);
    start_client(fx);
    run_until(fx, assigned);
    run_until(fx, disconnected_and_back);
    silent = fx->disconnected_ms - fx->last_msg_ms;
    assert_true(silent >= 290 && silent < 500);
    assert_string_equal(fx->why, "no message from the server for 300 ms");
    assert_int_equal(fx->errors, 0);
    assert_int_equal(rdzv_client_rtt_us(fx->c), -1);
}

/* Before the first WELCOME a refused connection is retried until the join timeout, then it is
 * an error (not an outage). */
static void test_refused_is_error(void **state)
{
    struct fixture *fx = *state;

    fx->port = 1; /* nothing listens on a privileged port in the test environment */
    fx->join.join_timeout_ms = 600;
    start_client(fx);
    run_until(fx, errored);
    assert_int_equal(fx->err, UV_ECONNREFUSED);
    assert_true(fx->server_waits >= 2); /* 100 ms backoff, doubling: several tries in 600 ms */
    assert_int_equal(fx->disconnected, 0);
}

static int server_gone(struct fixture *fx)
{
    return fx->server_closed; /* set by gone_later_cb below */
}

static void gone_later_cb(void *data)
{
    struct fixture *fx = data;

    fx->server_closed = 1;
}

/* torchrun's start order: a node started before the node that hosts the rendezvous keeps
 * trying and joins once the server is up. */
static void test_server_starts_late(void **state)
{
    struct fixture *fx = *state;

    rdzv_server_close(fx->srv, gone_later_cb, fx);
    fx->srv = NULL;
    run_until(fx, server_gone);
    start_client(fx);
    run_for(fx, 700);
    assert_true(fx->server_waits >= 1);
    assert_int_equal(fx->errors, 0);
    assert_int_equal(rdzv_server_new(&fx->loop, "127.0.0.1", fx->port, TOKEN, &fx->srv), 0);
    run_until(fx, assigned);
    assert_int_equal(fx->errors, 0);
    assert_int_equal(fx->disconnected, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_heartbeat_rtt, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_restart_rejoin, setup, teardown),
        cmocka_unit_test_setup_teardown(test_grace_expires, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ckpt_while_away, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failure_while_away, setup, teardown),
        cmocka_unit_test_setup_teardown(test_silent_server, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refused_is_error, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_starts_late, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restart_history, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
