/* libmuster against a real rendezvous server on loopback. The server and one agent (which
 * creates the job and its round) run on a private libuv loop in a thread; the test drives the
 * blocking library from the main thread and from helper threads that never assert (they store
 * results that the main thread checks). */
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
#include "kv.h"
#include "muster.h"
#include "server.h"

#define JOB "kvjob"
#define TOKEN "s3cret"

enum { CMD_NONE, CMD_FAIL_ROUND, CMD_STOP };

/* The server thread: server + the job's only agent. */
struct srv {
    uv_thread_t thread;
    uv_loop_t loop;
    uv_async_t async;
    uv_sem_t ready; /* posted when the agent got an ASSIGN (first round, then each restart) */
    struct rdzv_server *server;
    struct rdzv_client *agent;
    struct rdzv_join join;
    unsigned port;
    int start_err;
    uv_mutex_t lock;
    int cmd;        /* under lock */
    unsigned round; /* the agent's current round, written before posting ready */
    char endpoint[64];
};

static void agent_assign(struct rdzv_client *c, const struct rdzv_assign *a)
{
    struct srv *s = rdzv_client_data(c);

    s->round = a->round;
    uv_sem_post(&s->ready);
}

static void agent_restart(struct rdzv_client *c, const struct rdzv_restart *r)
{
    struct srv *s = rdzv_client_data(c);

    (void)r;
    rdzv_client_join(c, &s->join);
}

static void agent_error(struct rdzv_client *c, int err, const char *text)
{
    (void)c;
    fprintf(stderr, "test agent: rendezvous error %d: %s\n", err, text);
}

static const struct rdzv_client_cbs agent_cbs = {
    .assign_cb = agent_assign,
    .restart_cb = agent_restart,
    .error_cb = agent_error,
};

static void async_cb(uv_async_t *a)
{
    struct srv *s = a->data;
    struct rdzv_failure f = {.round = s->round, .rank = 0, .exit_code = 1};
    int cmd;

    uv_mutex_lock(&s->lock);
    cmd = s->cmd;
    s->cmd = CMD_NONE;
    uv_mutex_unlock(&s->lock);
    if (cmd == CMD_FAIL_ROUND) {
        snprintf(f.text, sizeof(f.text), "test failure");
        rdzv_client_report_failure(s->agent, &f, 0);
    } else if (cmd == CMD_STOP) {
        rdzv_client_close(s->agent, NULL, NULL);
        rdzv_server_close(s->server, NULL, NULL);
        uv_close((uv_handle_t *)&s->async, NULL);
    }
}

static int srv_start(struct srv *s)
{
    int err = rdzv_server_new(&s->loop, "127.0.0.1", 0, TOKEN, &s->server);

    if (err < 0)
        return err;
    s->port = rdzv_server_port(s->server);
    snprintf(s->endpoint, sizeof(s->endpoint), "127.0.0.1:%u", s->port);
    s->join = (struct rdzv_join){
        .min_nodes = 1, .max_nodes = 1, .nproc = 4, .max_restarts = 100, .last_call_ms = 10};
    s->join.node_secret[0] = 7; /* protocol 3: the id commits to the secret */
    s->join.node_id = rdzv_node_id_of(s->join.node_secret);
    snprintf(s->join.job_id, sizeof(s->join.job_id), JOB);
    snprintf(s->join.host, sizeof(s->join.host), "testhost");
    err = rdzv_client_new(&s->loop, "127.0.0.1", s->port, TOKEN, &agent_cbs, s, &s->agent);
    if (err == 0)
        err = rdzv_client_join(s->agent, &s->join);
    return err;
}

static void srv_thread(void *arg)
{
    struct srv *s = arg;

    s->start_err = srv_start(s);
    if (s->start_err < 0)
        uv_sem_post(&s->ready);
    uv_run(&s->loop, UV_RUN_DEFAULT);
}

static void srv_command(struct srv *s, int cmd)
{
    uv_mutex_lock(&s->lock);
    s->cmd = cmd;
    uv_mutex_unlock(&s->lock);
    uv_async_send(&s->async);
}

static int group_setup(void **state)
{
    static struct srv s;

    memset(&s, 0, sizeof(s));
    assert_int_equal(uv_loop_init(&s.loop), 0);
    assert_int_equal(uv_async_init(&s.loop, &s.async, async_cb), 0);
    s.async.data = &s;
    assert_int_equal(uv_sem_init(&s.ready, 0), 0);
    assert_int_equal(uv_mutex_init(&s.lock), 0);
    assert_int_equal(uv_thread_create(&s.thread, srv_thread, &s), 0);
    uv_sem_wait(&s.ready);
    assert_int_equal(s.start_err, 0);
    *state = &s;
    return 0;
}

static int group_teardown(void **state)
{
    struct srv *s = *state;

    srv_command(s, CMD_STOP);
    uv_thread_join(&s->thread);
    assert_int_equal(uv_loop_close(&s->loop), 0);
    uv_sem_destroy(&s->ready);
    uv_mutex_destroy(&s->lock);
    return 0;
}

static struct muster *attach(struct srv *s, int rank)
{
    struct muster *m = NULL;

    assert_int_equal(muster_connect_to(s->endpoint, TOKEN, JOB, s->round, rank, &m), 0);
    assert_non_null(m);
    return m;
}

/* --- tests --------------------------------------------------------------------------------- */
static void test_put_get(void **state)
{
    struct srv *s = *state;
    struct muster *m = attach(s, 0);
    char buf[16];
    size_t len = 0;

    assert_int_equal(muster_kv_put(m, "pg/a", "hello", 5), 0);
    assert_int_equal(muster_kv_get(m, "pg/a", buf, sizeof(buf), &len, 0), 0);
    assert_int_equal(len, 5);
    assert_memory_equal(buf, "hello", 5);
    assert_int_equal(muster_kv_put(m, "pg/a", "bye", 3), 0); /* replaces */
    assert_int_equal(muster_kv_get(m, "pg/a", buf, sizeof(buf), &len, 0), 0);
    assert_int_equal(len, 3);
    assert_int_equal(muster_kv_get(m, "pg/a", buf, 2, &len, 0), -ENOBUFS);
    assert_int_equal(len, 3);
    assert_int_equal(muster_kv_put(m, "pg/empty", NULL, 0), 0);
    assert_int_equal(muster_kv_get(m, "pg/empty", buf, sizeof(buf), &len, 0), 0);
    assert_int_equal(len, 0);
    assert_int_equal(muster_kv_get(m, "pg/missing", buf, sizeof(buf), &len, 0), -ENOENT);
    assert_int_equal(muster_kv_get(m, "pg/missing", buf, sizeof(buf), &len, 50), -ETIMEDOUT);
    /* the connection is still usable after a server-side timeout */
    assert_int_equal(muster_kv_get(m, "pg/a", buf, sizeof(buf), &len, 0), 0);
    muster_close(m);
}

static void test_big_value(void **state)
{
    struct srv *s = *state;
    struct muster *m = attach(s, 0);
    static unsigned char v[MUSTER_VALUE_MAX], back[MUSTER_VALUE_MAX];
    size_t len = 0;

    for (size_t i = 0; i < sizeof(v); i++)
        v[i] = (unsigned char)(i * 7 + 3);
    assert_int_equal(muster_kv_put(m, "big", v, sizeof(v)), 0);
    assert_int_equal(muster_kv_get(m, "big", back, sizeof(back), &len, 0), 0);
    assert_int_equal(len, sizeof(v));
    assert_memory_equal(back, v, sizeof(v));
    assert_int_equal(muster_kv_put(m, "big", v, sizeof(v) + 1), -EINVAL);
    muster_close(m);
}

static void test_bad_args(void **state)
{
    struct srv *s = *state;
    struct muster *m = attach(s, 0), *x = NULL;
    static char key[MUSTER_KEY_MAX + 2];
    char buf[4];
    size_t len;

    memset(key, 'k', MUSTER_KEY_MAX + 1);
    assert_int_equal(muster_kv_put(m, key, "v", 1), -EINVAL);
    assert_int_equal(muster_kv_put(m, "", "v", 1), -EINVAL);
    assert_int_equal(muster_kv_get(m, "k", buf, sizeof(buf), &len, -1), -EINVAL);
    assert_int_equal(muster_barrier(m, "b", 0, 10), -EINVAL);
    key[MUSTER_KEY_MAX] = '\0'; /* exactly the limit is fine */
    assert_int_equal(muster_kv_put(m, key, "v", 1), 0);
    muster_close(m);
    assert_int_equal(muster_connect_to("127.0.0.1", TOKEN, JOB, 0, 0, &x), -EINVAL);
    assert_int_equal(muster_connect_to("::1:80", TOKEN, JOB, 0, 0, &x), -EINVAL);
    assert_int_equal(muster_connect_to("[::1]", TOKEN, JOB, 0, 0, &x), -EINVAL);
    assert_int_equal(muster_connect_to("127.0.0.1:0", TOKEN, JOB, 0, 0, &x), -EINVAL);
    assert_int_equal(muster_connect_to("127.0.0.1:70000", TOKEN, JOB, 0, 0, &x), -EINVAL);
    assert_int_equal(muster_connect_to(s->endpoint, TOKEN, "", 0, 0, &x), -EINVAL);
    assert_int_equal(muster_connect_to(s->endpoint, TOKEN, JOB, 0, -1, &x), -EINVAL);
    assert_null(x);
    muster_close(NULL);
}

static void test_connect_errors(void **state)
{
    struct srv *s = *state;
    struct muster *x = NULL;

    assert_int_equal(muster_connect_to(s->endpoint, "wrong", JOB, 0, 0, &x), -EACCES);
    assert_int_equal(muster_connect_to(s->endpoint, NULL, JOB, 0, 0, &x), -EINVAL); /* TLS PSK */
    assert_int_equal(muster_connect_to(s->endpoint, "", JOB, 0, 0, &x), -EINVAL);
    assert_int_equal(muster_connect_to(s->endpoint, TOKEN, "nosuchjob", 0, 0, &x), -ESHUTDOWN);
    /* port 1: nothing listens there in the test environment */
    assert_int_equal(muster_connect_to("127.0.0.1:1", TOKEN, JOB, 0, 0, &x), -ECONNREFUSED);
    assert_null(x);
    assert_string_equal(muster_strerror(-ESTALE),
                        "the round is over: this worker is being replaced");
    assert_non_null(muster_strerror(-12345));
}

static void test_connect_env(void **state)
{
    struct srv *s = *state;
    struct muster *m = NULL;
    char round[16];

    unsetenv("MUSTER_ENDPOINT");
    assert_int_equal(muster_connect(&m), -ENOENT);
    setenv("MUSTER_ENDPOINT", s->endpoint, 1);
    setenv("MUSTER_TOKEN", TOKEN, 1);
    setenv("MUSTER_JOB_ID", JOB, 1);
    unsetenv("MUSTER_ROUND");
    setenv("RANK", "3", 1);
    assert_int_equal(muster_connect(&m), -EINVAL);
    setenv("MUSTER_ROUND", "x1", 1);
    assert_int_equal(muster_connect(&m), -EINVAL);
    snprintf(round, sizeof(round), "%u", s->round);
    setenv("MUSTER_ROUND", round, 1);
    setenv("RANK", "-1", 1);
    assert_int_equal(muster_connect(&m), -EINVAL);
    setenv("RANK", "3", 1);
    assert_null(m);
    assert_int_equal(muster_connect(&m), 0);
    assert_int_equal(muster_kv_put(m, "env/ok", "1", 1), 0);
    muster_close(m);
    /* MUSTER_KV_PREFIX (a joining node's pre-flight): every key and barrier name
     * of the handle gets it; other handles see the prefixed key; it counts against the key
     * limit, and one longer than MUSTER_KV_PREFIX_MAX is refused */
    {
        char buf[8], longkey[MUSTER_KEY_MAX + 1], longpfx[MUSTER_KV_PREFIX_MAX + 2];
        size_t len = 0;
        struct muster *plain = attach(s, 0);

        setenv("MUSTER_KV_PREFIX", "pfj/2/", 1);
        assert_int_equal(muster_connect(&m), 0);
        assert_int_equal(muster_kv_put(m, "pf/x", "7", 1), 0);
        assert_int_equal(muster_kv_get(m, "pf/x", buf, sizeof(buf), &len, 0), 0);
        assert_int_equal(muster_kv_get(plain, "pfj/2/pf/x", buf, sizeof(buf), &len, 0), 0);
        assert_memory_equal(buf, "7", 1);
        assert_int_equal(muster_kv_get(plain, "pf/x", buf, sizeof(buf), &len, 0), -ENOENT);
        assert_int_equal(muster_barrier(m, "pf/b", 1, 1000), 0);
        memset(longkey, 'k', MUSTER_KEY_MAX);
        longkey[MUSTER_KEY_MAX] = '\0';
        assert_int_equal(muster_kv_put(plain, longkey, "1", 1), 0);
        assert_int_equal(muster_kv_put(m, longkey, "1", 1), -EINVAL);
        muster_close(m);
        muster_close(plain);
        memset(longpfx, 'p', sizeof(longpfx) - 1);
        longpfx[sizeof(longpfx) - 1] = '\0';
        setenv("MUSTER_KV_PREFIX", longpfx, 1);
        m = NULL;
        assert_int_equal(muster_connect(&m), -EINVAL);
        assert_null(m);
        unsetenv("MUSTER_KV_PREFIX");
    }
    setenv("MUSTER_ENDPOINT", "[::1]:1", 1); /* IPv6 form parses; nothing listens */
    m = NULL;
    assert_true(muster_connect(&m) < 0);
    assert_null(m);
}

/* --- several ranks at once: helper threads ------------------------------------------------- */

/* The server thread's KV gets, seen through the linker (-Wl,--wrap=rdzv_kv_get, set in
 * CMakeLists.txt): test_get_waits puts only once the server holds every getter's request, so
 * a put that came first (which would pass the test without testing the wait) cannot happen. */
int __real_rdzv_kv_get(struct rdzv_kv_store *kv, void *peer, uint32_t req_id, const char *key,
                       uint32_t wait_ms, uint64_t now_ms);

static uv_mutex_t g_get_lock;
static uv_cond_t g_get_cond;
static int g_gets_waiting; /* gets of "wait/id" the server received, under g_get_lock */

int __wrap_rdzv_kv_get(struct rdzv_kv_store *kv, void *peer, uint32_t req_id, const char *key,
                       uint32_t wait_ms, uint64_t now_ms);
int __wrap_rdzv_kv_get(struct rdzv_kv_store *kv, void *peer, uint32_t req_id, const char *key,
                       uint32_t wait_ms, uint64_t now_ms)
{
    int rc = __real_rdzv_kv_get(kv, peer, req_id, key, wait_ms, now_ms);

    if (strcmp(key, "wait/id") == 0) {
        uv_mutex_lock(&g_get_lock);
        g_gets_waiting++;
        uv_cond_signal(&g_get_cond);
        uv_mutex_unlock(&g_get_lock);
    }
    return rc;
}

/* Waits (10 s at most) until the server received n gets of "wait/id". Returns whether it did. */
static int gets_received(int n)
{
    uint64_t deadline = uv_hrtime() + 10 * 1000000000ull;
    int ok;

    uv_mutex_lock(&g_get_lock);
    while (g_gets_waiting < n && uv_hrtime() < deadline)
        uv_cond_timedwait(&g_get_cond, &g_get_lock, 100 * 1000000ull);
    ok = g_gets_waiting >= n;
    uv_mutex_unlock(&g_get_lock);
    return ok;
}
struct rank_job {
    struct srv *s;
    int rank, world, err;
    char got[32];
    size_t len;
    uv_thread_t thread;
};

static void getter_thread(void *arg)
{
    struct rank_job *j = arg;
    struct muster *m = NULL;

    j->err = muster_connect_to(j->s->endpoint, TOKEN, JOB, j->s->round, j->rank, &m);
    if (j->err == 0)
        j->err = muster_kv_get(m, "wait/id", j->got, sizeof(j->got), &j->len, 5000);
    muster_close(m);
}

/* Getters wait for a key that is put later: all of them get it. */
static void test_get_waits(void **state)
{
    struct srv *s = *state;
    struct rank_job jobs[3];
    struct muster *m = attach(s, 0);

    assert_int_equal(uv_mutex_init(&g_get_lock), 0);
    assert_int_equal(uv_cond_init(&g_get_cond), 0);
    g_gets_waiting = 0;
    for (int i = 0; i < 3; i++) {
        jobs[i] = (struct rank_job){.s = s, .rank = i + 1, .err = 1};
        assert_int_equal(uv_thread_create(&jobs[i].thread, getter_thread, &jobs[i]), 0);
    }
    /* the key does not exist yet, so each get the server received is held there */
    assert_true(gets_received(3));
    assert_int_equal(muster_kv_put(m, "wait/id", "unique-id", 9), 0);
    for (int i = 0; i < 3; i++) {
        uv_thread_join(&jobs[i].thread);
        assert_int_equal(jobs[i].err, 0);
        assert_int_equal(jobs[i].len, 9);
        assert_memory_equal(jobs[i].got, "unique-id", 9);
    }
    assert_int_equal(g_gets_waiting, 3); /* held, not asked again after the put */
    uv_cond_destroy(&g_get_cond);
    uv_mutex_destroy(&g_get_lock);
    muster_close(m);
}

static void barrier_thread(void *arg)
{
    struct rank_job *j = arg;
    struct muster *m = NULL;

    j->err = muster_connect_to(j->s->endpoint, TOKEN, JOB, j->s->round, j->rank, &m);
    if (j->err == 0)
        j->err = muster_barrier(m, "bar/all", (unsigned)j->world, 5000);
    muster_close(m);
}

static void test_barrier(void **state)
{
    struct srv *s = *state;
    struct rank_job jobs[4];
    struct muster *m = attach(s, 0);

    for (int i = 0; i < 4; i++) {
        jobs[i] = (struct rank_job){.s = s, .rank = i, .world = 4, .err = 1};
        assert_int_equal(uv_thread_create(&jobs[i].thread, barrier_thread, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        uv_thread_join(&jobs[i].thread);
        assert_int_equal(jobs[i].err, 0);
    }
    /* one of two never comes */
    assert_int_equal(muster_barrier(m, "bar/lonely", 2, 100), -ETIMEDOUT);
    muster_close(m);
}

/* The job restarts: a worker of the old round gets -ESTALE, one of the new round works. */
static void test_stale_round(void **state)
{
    struct srv *s = *state;
    struct muster *old = attach(s, 0), *cur;
    unsigned first = s->round;
    char buf[8];
    size_t len;

    assert_int_equal(muster_kv_put(old, "stale/k", "v", 1), 0);
    srv_command(s, CMD_FAIL_ROUND);
    uv_sem_wait(&s->ready); /* the agent got the next round's ASSIGN */
    assert_int_equal(s->round, first + 1);
    assert_int_equal(muster_kv_get(old, "stale/k", buf, sizeof(buf), &len, 0), -ESTALE);
    muster_close(old);
    cur = attach(s, 0);
    assert_int_equal(muster_kv_get(cur, "stale/k", buf, sizeof(buf), &len, 0), -ENOENT);
    muster_close(cur);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_get),     cmocka_unit_test(test_big_value),
        cmocka_unit_test(test_bad_args),    cmocka_unit_test(test_connect_errors),
        cmocka_unit_test(test_connect_env), cmocka_unit_test(test_get_waits),
        cmocka_unit_test(test_barrier),     cmocka_unit_test(test_stale_round),
    };

    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
