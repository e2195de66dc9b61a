/* The in-process channel between an agent and the rendezvous server it hosts:
 * rdzv_server_connect_local + rdzv_client_new_local on a private loop. A local client joins
 * and is assigned with the address it stands for; it has the authority of the server's own key
 * (a job-keyed server's local client may join only that job); TCP clients with TLS still join
 * the same job beside it; the local client survives nothing TLS would refuse (a closed server
 * refuses new channels). Nothing sleeps: the loop runs until a predicate holds, under a
 * watchdog timer. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <uv.h>

#include "client.h"
#include "cred.h"
#include "harness.h"
#include "server.h"

#define WATCHDOG_MS 10000
#define SECRET "local-test-secret"

struct agent {
    struct rdzv_client *c;
    struct fixture *fx;
    int assigned, errors, err;
    struct rdzv_assign assign;
    char text[256];
};

struct fixture {
    uv_loop_t loop;
    struct harness h; /* watchdog, run_until */
    struct rdzv_server *srv;
    struct agent a[2];
};

/* pred(fx) holds, or the watchdog fails the test (harness.h) */
#define run_until(fx, pred) HARNESS_RUN_UNTIL(&(fx)->h, pred(fx))

static void assign_cb(struct rdzv_client *c, const struct rdzv_assign *as)
{
    struct agent *a = rdzv_client_data(c);

    a->assigned++;
    a->assign = *as;
}

static void error_cb(struct rdzv_client *c, int err, const char *text)
{
    struct agent *a = rdzv_client_data(c);

    a->errors++;
    a->err = err;
    snprintf(a->text, sizeof(a->text), "%s", text);
}

static void ignore_waiting(struct rdzv_client *c, const struct rdzv_waiting *w)
{
    (void)c;
    (void)w;
}

static void ignore_restart(struct rdzv_client *c, const struct rdzv_restart *r)
{
    (void)c;
    (void)r;
}

static void ignore_done(struct rdzv_client *c)
{
    (void)c;
}

static void ignore_failed(struct rdzv_client *c, const struct rdzv_job_failed *f)
{
    (void)c;
    (void)f;
}

static const struct rdzv_client_cbs cbs = {
    .waiting_cb = ignore_waiting,
    .assign_cb = assign_cb,
    .restart_cb = ignore_restart,
    .job_done_cb = ignore_done,
    .job_failed_cb = ignore_failed,
    .error_cb = error_cb,
};

static int setup_with(void **state, const char *server_token)
{
    struct fixture *fx = calloc(1, sizeof(*fx));

    assert_non_null(fx);
    assert_int_equal(uv_loop_init(&fx->loop), 0);
    harness_init(&fx->h, &fx->loop, WATCHDOG_MS);
    for (int i = 0; i < 2; i++)
        fx->a[i].fx = fx;
    assert_int_equal(rdzv_server_new(&fx->loop, "127.0.0.1", 0, server_token, &fx->srv), 0);
    *state = fx;
    return 0;
}

static int setup(void **state)
{
    return setup_with(state, SECRET);
}

static char job_token[RDZV_CRED_TEXT_MAX + 1];

/* A server keyed by the credential of job "mine" (an agent hosting its job's rendezvous). */
static int setup_job_keyed(void **state)
{
    unsigned char master[RDZV_KEY_LEN];
    struct rdzv_cred c;

    rdzv_cred_master(SECRET, master);
    assert_int_equal(rdzv_cred_derive(master, RDZV_CRED_JOB, "mine", &c), 0);
    assert_int_equal(rdzv_cred_format(&c, job_token, sizeof(job_token)), 0);
    return setup_with(state, job_token);
}

static int teardown(void **state)
{
    struct fixture *fx = *state;

    for (int i = 0; i < 2; i++)
        if (fx->a[i].c != NULL)
            rdzv_client_close(fx->a[i].c, NULL, NULL);
    rdzv_server_close(fx->srv, NULL, NULL);
    harness_close(&fx->h);
    harness_loop_close(&fx->loop);
    free(fx);
    return 0;
}

static void join(struct agent *a, const char *job, unsigned nodes, const char *addr, int seed)
{
    struct rdzv_join j;

    memset(&j, 0, sizeof(j));
    snprintf(j.job_id, sizeof(j.job_id), "%s", job);
    j.min_nodes = j.max_nodes = nodes;
    j.nproc = 1;
    snprintf(j.host, sizeof(j.host), "node%d", seed);
    snprintf(j.addr, sizeof(j.addr), "%s", addr);
    j.master_port = 29500;
    j.join_timeout_ms = 10000;
    j.node_secret[0] = (uint8_t)seed;
    j.node_id = rdzv_node_id_of(j.node_secret);
    assert_int_equal(rdzv_client_join(a->c, &j), 0);
}

static int first_assigned(struct fixture *fx)
{
    return fx->a[0].assigned > 0 || fx->a[0].errors > 0;
}

static int both_assigned(struct fixture *fx)
{
    return (fx->a[0].assigned > 0 || fx->a[0].errors > 0) &&
           (fx->a[1].assigned > 0 || fx->a[1].errors > 0);
}

/* Alone: assigned through the channel; the JOIN named no address, so the node stands for the
 * address the channel was opened with (what its TCP connection would have shown). */
static void test_local_join(void **state)
{
    struct fixture *fx = *state;

    assert_int_equal(
        rdzv_client_new_local(&fx->loop, fx->srv, "10.1.2.3", &cbs, &fx->a[0], &fx->a[0].c), 0);
    join(&fx->a[0], "solo", 1, "", 1);
    run_until(fx, first_assigned);
    assert_int_equal(fx->a[0].errors, 0);
    assert_int_equal(fx->a[0].assign.group_world_size, 1);
    assert_string_equal(fx->a[0].assign.master_addr, "10.1.2.3");
}

/* The local agent and a TLS agent form one job of two. */
static void test_local_and_tls(void **state)
{
    struct fixture *fx = *state;

    assert_int_equal(
        rdzv_client_new_local(&fx->loop, fx->srv, "127.0.0.1", &cbs, &fx->a[0], &fx->a[0].c), 0);
    assert_int_equal(rdzv_client_new(&fx->loop, "127.0.0.1", rdzv_server_port(fx->srv), SECRET,
                                     &cbs, &fx->a[1], &fx->a[1].c),
                     0);
    join(&fx->a[0], "pair", 2, "", 1);
    join(&fx->a[1], "pair", 2, "", 2);
    run_until(fx, both_assigned);
    assert_int_equal(fx->a[0].errors + fx->a[1].errors, 0);
    assert_int_equal(fx->a[0].assign.group_world_size, 2);
    assert_int_not_equal(fx->a[0].assign.group_rank, fx->a[1].assign.group_rank);
    assert_string_equal(fx->a[0].assign.master_addr, fx->a[1].assign.master_addr);
}

/* A job-keyed server's channel carries that job's credential: its own job joins, another
 * job id is refused as it would be over TLS with the same credential. */
static void test_local_job_scope(void **state)
{
    struct fixture *fx = *state;

    assert_int_equal(rdzv_client_new_local(&fx->loop, fx->srv, NULL, &cbs, &fx->a[0], &fx->a[0].c),
                     0);
    assert_int_equal(rdzv_client_new_local(&fx->loop, fx->srv, NULL, &cbs, &fx->a[1], &fx->a[1].c),
                     0);
    join(&fx->a[0], "mine", 1, "", 1);
    join(&fx->a[1], "theirs", 1, "", 2);
    run_until(fx, both_assigned);
    assert_int_equal(fx->a[0].errors, 0);
    assert_int_equal(fx->a[0].assigned, 1);
    assert_int_equal(fx->a[1].assigned, 0);
    assert_int_equal(fx->a[1].err, UV_EACCES);
}

/* A closing server opens no new channel. */
static void test_local_closed_server(void **state)
{
    struct fixture *fx = *state;
    uv_os_sock_t fd;

    rdzv_server_close(fx->srv, NULL, NULL);
    assert_int_equal(rdzv_server_connect_local(fx->srv, NULL, &fd), UV_ECANCELED);
    uv_run(&fx->loop, UV_RUN_DEFAULT);
    assert_int_equal(rdzv_server_new(&fx->loop, "127.0.0.1", 0, SECRET, &fx->srv), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_local_join, setup, teardown),
        cmocka_unit_test_setup_teardown(test_local_and_tls, setup, teardown),
        cmocka_unit_test_setup_teardown(test_local_job_scope, setup_job_keyed, teardown),
        cmocka_unit_test_setup_teardown(test_local_closed_server, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
