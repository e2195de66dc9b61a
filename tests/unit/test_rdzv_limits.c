/* Resource limits and job-scoped authorisation of the rendezvous server, over real loopback TCP
 * on a private loop: each bad client is refused with a logged reason and counted, while a good
 * two-node job on the same server finishes normally. Small limits make the timeouts quick;
 * nothing sleeps: the loop runs until a predicate holds, under a watchdog. */
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

#include "harness.h"
#include "sendq.h"

#include "conn.h"
#include "cred.h"
#include "server.h"
#include "server_priv.h"
#include "tls.h"

#define NRAW 8
#define WATCHDOG_MS 10000
#define TOKEN "limits-test-token"

struct fixture;

/* A protocol client (conn.c), or a bare TCP one (bare = 1) that only writes what it is told. */
struct raw {
    struct fixture *fx;
    struct rdzv_conn conn;
    uv_connect_t connect;
    uv_write_t write;
    uv_shutdown_t shutdown;
    uv_timer_t trickle; /* bare: one byte per tick */
    int bare, connected, closed;
    int plain;            /* a protocol client without TLS */
    struct rdzv_tls *tls; /* NULL: the fixture's (right token) */
    size_t trickled;      /* bytes of the slow ClientHello written */
    struct sendq q;       /* sent once connected: TLS starts only then */
    int count[RDZV_MSG_TYPE_MAX_];
    struct rdzv_error error;
};

struct fixture {
    uv_loop_t loop;
    struct harness h; /* watchdog, run_until */
    struct rdzv_server *srv;
    unsigned port;
    struct raw raw[NRAW];
    struct rdzv_tls *tls, *wrong_tls; /* client configurations: the token, another token */
    int rcvbuf; /* the next raw_connect_from() with an address: SO_RCVBUF, then 0 again */
    char log[32][512];
    int n_log;
};

#define R(i) (&fx->raw[i])
#define N(i, t) (fx->raw[i].count[RDZV_MSG_##t])
#define HITS(ev) (fx->srv->stats.events[SRV_EV_##ev])

/* pred(fx) holds, or the watchdog fails the test (harness.h) after explain() */
#define run_until(fx, pred) HARNESS_RUN_UNTIL(&(fx)->h, pred(fx))

/* A failed wait prints the server's log and every client's state. */
static void explain(void *data)
{
    struct fixture *fx = data;

    fprintf(stderr, "the server's log:\n");
    for (int i = 0; i < fx->n_log && i < 32; i++)
        fprintf(stderr, "  %s\n", fx->log[i]);
    for (int i = 0; i < NRAW; i++)
        if (R(i)->fx != NULL)
            fprintf(stderr, "  client %d: connected %d closed %d welcome %d error %u %s\n", i,
                    R(i)->connected, R(i)->closed, N(i, WELCOME), R(i)->error.code,
                    R(i)->error.text);
}

static void log_cb(void *data, enum mc_log_level level, const char *line)
{
    struct fixture *fx = data;

    (void)level;
    if (fx->n_log < 32)
        snprintf(fx->log[fx->n_log], sizeof(fx->log[0]), "%s", line);
    fx->n_log++;
}

/* Lines of the log holding every one of the NULL-terminated words. */
static int logged(struct fixture *fx, ...)
{
    int n = 0;

    for (int i = 0; i < fx->n_log && i < 32; i++) {
        va_list ap;
        const char *w;
        int all = 1;

        va_start(ap, fx);
        while ((w = va_arg(ap, const char *)) != NULL)
            all = all && strstr(fx->log[i], w) != NULL;
        va_end(ap);
        n += all;
    }
    return n;
}

/* --- raw clients ---------------------------------------------------------------------------- */
static void raw_msg_cb(struct rdzv_conn *conn, const struct rdzv_msg *m)
{
    struct raw *r = conn->data;

    r->count[m->type]++;
    if (m->type == RDZV_MSG_ERROR)
        r->error = m->u.error;
}

static void raw_closed_cb(struct rdzv_conn *conn)
{
    struct raw *r = conn->data;

    r->closed = 1;
}

static void raw_error_cb(struct rdzv_conn *conn, int err)
{
    (void)err;
    rdzv_conn_close(conn, 0, raw_closed_cb);
}

/* Bare clients read only to notice the server closing. */
static void bare_alloc_cb(uv_handle_t *h, size_t s, uv_buf_t *buf)
{
    static char sink[256];

    (void)h;
    (void)s;
    *buf = uv_buf_init(sink, sizeof(sink));
}

static void trickle_closed_cb(uv_handle_t *h)
{
    (void)h;
}

static void bare_read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    struct raw *r = ((struct rdzv_conn *)s->data)->data;

    (void)buf;
    if (n >= 0)
        return;
    uv_timer_stop(&r->trickle);
    rdzv_conn_close(&r->conn, 0, raw_closed_cb);
}

static void raw_connect_cb(uv_connect_t *req, int status)
{
    struct raw *r = req->data;

    if (status < 0) { /* refused: counts as closed */
        rdzv_conn_close(&r->conn, 0, raw_closed_cb);
        return;
    }
    r->connected = 1;
    if (r->bare)
        assert_int_equal(uv_read_start((uv_stream_t *)&r->conn.tcp, bare_alloc_cb, bare_read_cb),
                         0);
    else if (r->plain)
        assert_int_equal(rdzv_conn_start(&r->conn), 0);
    else
        assert_int_equal(rdzv_conn_start_tls(&r->conn, r->tls ? r->tls : r->fx->tls, 0), 0);
    sendq_flush(&r->q, &r->conn);
}

/* Each slot is used once per test: its timer stays open until teardown. from: the source
 * address to bind (any 127.x.y.z works on loopback), NULL for the kernel's choice. */
static void raw_connect_from(struct fixture *fx, int i, int bare, const char *from)
{
    struct raw *r = R(i);
    struct sockaddr_in sin, src;

    assert_null(r->fx);
    memset(r, 0, sizeof(*r));
    r->fx = fx;
    r->bare = bare;
    assert_int_equal(uv_ip4_addr("127.0.0.1", (int)fx->port, &sin), 0);
    assert_int_equal(rdzv_conn_init(&fx->loop, &r->conn, raw_msg_cb, raw_error_cb, r), 0);
    assert_int_equal(uv_timer_init(&fx->loop, &r->trickle), 0);
    r->trickle.data = r;
    r->connect.data = r;
    if (from != NULL) {
        assert_int_equal(uv_ip4_addr(from, 0, &src), 0);
        assert_int_equal(uv_tcp_bind(&r->conn.tcp, (struct sockaddr *)&src, 0), 0);
        if (fx->rcvbuf > 0)
            assert_int_equal(uv_recv_buffer_size((uv_handle_t *)&r->conn.tcp, &fx->rcvbuf), 0);
        fx->rcvbuf = 0;
    }
    assert_int_equal(
        uv_tcp_connect(&r->connect, &r->conn.tcp, (struct sockaddr *)&sin, raw_connect_cb), 0);
}

static void raw_connect(struct fixture *fx, int i, int bare)
{
    raw_connect_from(fx, i, bare, NULL);
}

static void send_msg(struct raw *r, const struct rdzv_msg *m)
{
    sendq_send(&r->q, &r->conn, r->connected, m);
}

static void hello(struct raw *r, uint8_t role, const char *token)
{
    struct rdzv_msg *h = sendq_msg(RDZV_MSG_HELLO);

    h->u.hello.version = RDZV_PROTO_VERSION;
    h->u.hello.role = role;
    snprintf(h->u.hello.token, sizeof(h->u.hello.token), "%s", token);
    send_msg(r, h);
}

/* A node id the server accepts (protocol 3): the commitment to a secret made from seed. */
static uint64_t test_node(uint8_t secret[32], uint64_t seed)
{
    memset(secret, 0, 32);
    memcpy(secret, &seed, sizeof(seed));
    return rdzv_node_id_of(secret);
}

static void join(struct raw *r, const char *job, unsigned nnodes, uint64_t node_id)
{
    struct rdzv_msg *m = sendq_msg(RDZV_MSG_JOIN);

    m->u.join = (struct rdzv_join){.min_nodes = nnodes,
                                   .max_nodes = nnodes,
                                   .nproc = 1,
                                   .master_port = 29500,
                                   .join_timeout_ms = 5000};
    m->u.join.node_id = test_node(m->u.join.node_secret, node_id);
    snprintf(m->u.join.job_id, sizeof(m->u.join.job_id), "%s", job);
    snprintf(m->u.join.host, sizeof(m->u.join.host), "host%llu", (unsigned long long)node_id);
    send_msg(r, m);
}

static void agent(struct fixture *fx, int i, const char *job, unsigned nnodes)
{
    raw_connect(fx, i, 0);
    hello(R(i), RDZV_ROLE_AGENT, TOKEN);
    join(R(i), job, nnodes, 100 + (unsigned)i);
}

static void attach_msg(struct raw *r, const char *job)
{
    struct rdzv_msg *m = sendq_msg(RDZV_MSG_ATTACH);

    snprintf(m->u.attach.job_id, sizeof(m->u.attach.job_id), "%s", job);
    send_msg(r, m);
}

static void worker(struct fixture *fx, int i, const char *job)
{
    raw_connect(fx, i, 0);
    hello(R(i), RDZV_ROLE_WORKER, TOKEN);
    attach_msg(R(i), job);
}

/* bytes must outlive the write (static or the test's frame). */
static void bare_write(struct raw *r, const void *bytes, size_t len)
{
    uv_buf_t b = uv_buf_init((char *)bytes, (unsigned)len);

    assert_int_equal(uv_write(&r->write, (uv_stream_t *)&r->conn.tcp, &b, 1, NULL), 0);
}

/* A slowloris client: the start of a TLS ClientHello record announcing 16 KiB, one byte per
 * tick (then zeros), so the record never completes. */
static void trickle_cb(uv_timer_t *t)
{
    static const uint8_t start[9] = {0x16, 0x03, 0x01, 0x40, 0x00, 0x01, 0x00, 0x3F, 0xFC};
    struct raw *r = t->data;
    uint8_t byte = r->trickled < sizeof(start) ? start[r->trickled] : 0;
    uv_buf_t b = uv_buf_init((char *)&byte, 1);

    if (r->connected && !r->conn.closing && uv_try_write((uv_stream_t *)&r->conn.tcp, &b, 1) == 1)
        r->trickled++;
}

static void raw_close(struct raw *r)
{
    if (r->fx == NULL)
        return;
    sendq_drop(&r->q);
    if (!uv_is_closing((uv_handle_t *)&r->trickle))
        uv_close((uv_handle_t *)&r->trickle, trickle_closed_cb);
    if (!r->conn.closing)
        rdzv_conn_close(&r->conn, 0, raw_closed_cb);
}

/* --- a good job alongside ------------------------------------------------------------------- */
/* Agents 0 and 1 run job "good" (2 nodes) to its end: both assigned, both DONE, JOB_DONE. */
static void good_start(struct fixture *fx)
{
    agent(fx, 0, "good", 2);
    agent(fx, 1, "good", 2);
}

static void good_finish(struct fixture *fx)
{
    HARNESS_RUN_UNTIL(&fx->h, N(0, ASSIGN) == 1 && N(1, ASSIGN) == 1);
    for (int i = 0; i < 2; i++) {
        struct rdzv_msg *m = sendq_msg(RDZV_MSG_DONE);

        m->u.done.round = 0;
        send_msg(R(i), m);
    }
    HARNESS_RUN_UNTIL(&fx->h, N(0, JOB_DONE) == 1 && N(1, JOB_DONE) == 1);
    assert_int_equal(N(0, ERROR) + N(1, ERROR), 0);
}

/* --- fixtures ------------------------------------------------------------------------------- */
static int setup(void **state)
{
    static struct fixture fx;
    struct rdzv_limits l = rdzv_limits_default();

    memset(&fx, 0, sizeof(fx));
    assert_int_equal(uv_loop_init(&fx.loop), 0);
    harness_init(&fx.h, &fx.loop, WATCHDOG_MS);
    fx.h.explain = explain;
    fx.h.data = &fx;
    assert_int_equal(rdzv_server_new(&fx.loop, "127.0.0.1", 0, TOKEN, &fx.srv), 0);
    l.max_connections = 6;
    /* Generous: TLS handshakes under ASan on a loaded 2-core host took over 300 ms, so the good
     * job's agents were cut. The two timeout tests set 300 ms once their good job is in. */
    l.handshake_ms = 3000;
    l.idle_ms = 3000;
    l.kv_max_keys = 2;
    rdzv_server_set_limits(fx.srv, &l);
    rdzv_server_set_log(fx.srv, log_cb, &fx);
    fx.port = rdzv_server_port(fx.srv);
    assert_int_equal(rdzv_tls_new(&(struct rdzv_tls_opts){.token = TOKEN}, 0, &fx.tls, NULL, 0), 0);
    assert_int_equal(
        rdzv_tls_new(&(struct rdzv_tls_opts){.token = "not-the-token"}, 0, &fx.wrong_tls, NULL, 0),
        0);
    *state = &fx;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;

    for (int i = 0; i < NRAW; i++)
        raw_close(R(i));
    rdzv_server_close(fx->srv, NULL, NULL);
    harness_close(&fx->h);
    assert_int_equal(uv_run(&fx->loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&fx->loop), 0);
    rdzv_tls_free(fx->tls);
    rdzv_tls_free(fx->wrong_tls);
    return 0;
}

/* --- tests ---------------------------------------------------------------------------------- */
/* Predicates of the older tests, which used to spin on UV_RUN_ONCE without a watchdog: a
 * refusal counted under another name then hung the test instead of failing it. */
static void connect_plain(struct fixture *fx, int i)
{
    raw_connect(fx, i, 0);
    R(i)->plain = 1;
}

/* A wrong token (the TLS PSK differs) and no token (a plaintext HELLO): the handshake fails,
 * the connection closes, counted and logged once for the address with the reason. */
static void test_bad_token(void **state)
{
    struct fixture *fx = *state;

    good_start(fx);
    raw_connect(fx, 2, 0);
    R(2)->tls = fx->wrong_tls;
    hello(R(2), RDZV_ROLE_AGENT, "not-the-token");
    connect_plain(fx, 3);
    hello(R(3), RDZV_ROLE_WORKER, "");
    HARNESS_RUN_UNTIL(&fx->h, R(2)->closed && R(3)->closed);
    assert_int_equal(N(2, WELCOME) + N(3, WELCOME), 0);
    HARNESS_RUN_UNTIL(&fx->h, HITS(AUTH_TLS) >= 2);
    assert_int_equal(logged(fx, "127.0.0.1", "tls_handshake", "TLS handshake failed", NULL), 1);
    good_finish(fx);
}

/* Plaintext frames (an oversized header, here) and a truncated TLS handshake: refused before
 * any frame is parsed. */
static void test_plaintext_and_truncated(void **state)
{
    struct fixture *fx = *state;
    static const uint8_t hdr[RDZV_HEADER_SIZE] = {
        0x4D, 0x53, 0x54, 0x52, RDZV_PROTO_VERSION, RDZV_MSG_HELLO, 0, 0, 0x7F, 0xFF, 0xFF, 0xFF};
    /* the first bytes of a TLS 1.2 ClientHello record, then the client goes away */
    static const uint8_t hello_start[9] = {0x16, 0x03, 0x01, 0x00, 0xC8, 0x01, 0x00, 0x00, 0xC4};

    good_start(fx);
    raw_connect(fx, 2, 1);
    raw_connect(fx, 3, 1);
    HARNESS_RUN_UNTIL(&fx->h, R(2)->connected && R(3)->connected);
    bare_write(R(2), hdr, sizeof(hdr));
    bare_write(R(3), hello_start, sizeof(hello_start));
    uv_shutdown(&R(3)->shutdown, (uv_stream_t *)&R(3)->conn.tcp, NULL);
    HARNESS_RUN_UNTIL(&fx->h, R(2)->closed && R(3)->closed);
    HARNESS_RUN_UNTIL(&fx->h, HITS(AUTH_TLS) >= 2);
    assert_int_equal(logged(fx, "tls_handshake", NULL), 1); /* once per address */
    assert_int_equal(fx->srv->stats.log_suppressed, 1);
    assert_int_equal(HITS(FRAME_SIZE), 0); /* never parsed as a frame */
    good_finish(fx);
}

/* A connection of job A naming job B: JOIN, ATTACH and STATUS_REQ are refused. */
static void test_other_job(void **state)
{
    struct fixture *fx = *state;
    struct rdzv_msg *m;

    good_start(fx);
    HARNESS_RUN_UNTIL(&fx->h, N(0, ASSIGN) == 1 && N(1, ASSIGN) == 1);
    agent(fx, 2, "a", 2);
    join(R(2), "good", 2, 7); /* then JOIN for another job on the same connection */
    worker(fx, 3, "good");
    m = sendq_msg(RDZV_MSG_ATTACH);
    snprintf(m->u.attach.job_id, sizeof(m->u.attach.job_id), "a");
    send_msg(R(3), m);
    worker(fx, 4, "good");
    m = sendq_msg(RDZV_MSG_STATUS_REQ);
    snprintf(m->u.status_req.job_id, sizeof(m->u.status_req.job_id), "a");
    send_msg(R(4), m);
    HARNESS_RUN_UNTIL(&fx->h, R(2)->closed && R(3)->closed);
    HARNESS_RUN_UNTIL(&fx->h, R(4)->closed);
    for (int i = 2; i <= 4; i++)
        assert_int_equal(R(i)->error.code, RDZV_ERR_PROTOCOL);
    assert_int_equal(N(3, ATTACH_OK), 1);
    assert_int_equal(N(4, STATUS), 0);
    assert_int_equal(HITS(AUTH_JOB_SCOPE), 3);
    /* logged once for the address: whichever of the three the server read first */
    assert_int_equal(logged(fx, "job_scope", "on a connection of job", NULL), 1);
    good_finish(fx);
}

/* Over max_connections (6 here) with every place authenticated: the next connection is closed
 * at once; the rest serve on. */
static void test_max_connections(void **state)
{
    struct fixture *fx = *state;

    good_start(fx);
    HARNESS_RUN_UNTIL(&fx->h, N(0, ASSIGN) == 1 && N(1, ASSIGN) == 1);
    for (int i = 2; i < 6; i++) {
        raw_connect(fx, i, 0);
        hello(R(i), RDZV_ROLE_OBSERVER, TOKEN);
    }
    HARNESS_RUN_UNTIL(&fx->h, N(2, WELCOME) + N(3, WELCOME) + N(4, WELCOME) + N(5, WELCOME) == 4);
    raw_connect(fx, 7, 1);
    HARNESS_RUN_UNTIL(&fx->h, R(7)->closed && HITS(CONNECTIONS) == 1);
    assert_int_equal(logged(fx, "connections", "6 connections open already", NULL), 1);
    good_finish(fx);
}

/* Over max_connections (6 here) with four places held by silent connections: the
 * next connection evicts the oldest silent one instead of being refused; the authenticated
 * ones are never touched. */
static void test_preauth_evict(void **state)
{
    struct fixture *fx = *state;

    good_start(fx);
    HARNESS_RUN_UNTIL(&fx->h, N(0, ASSIGN) == 1 && N(1, ASSIGN) == 1);
    raw_connect(fx, 2, 1);
    HARNESS_RUN_UNTIL(&fx->h, fx->srv->n_pre == 1); /* so that 2 is the oldest */
    for (int i = 3; i < 6; i++)
        raw_connect(fx, i, 1);
    HARNESS_RUN_UNTIL(&fx->h, fx->srv->n_peers == 6);
    raw_connect(fx, 7, 1);
    HARNESS_RUN_UNTIL(&fx->h, HITS(PREAUTH_EVICT) == 1 && R(2)->closed);
    assert_false(R(3)->closed || R(4)->closed || R(5)->closed);
    assert_int_equal(HITS(CONNECTIONS), 0);
    assert_int_equal(fx->srv->n_pre, 4);
    assert_int_equal(logged(fx, "preauth_evicted", "oldest idle", NULL), 1);
    good_finish(fx);
}

/* Slowloris: one client trickles bytes of a never-ending header, another sends nothing; both
 * are cut at the handshake deadline (300 ms here), however busy the first one looks. */
static void test_handshake_timeout(void **state)
{
    struct fixture *fx = *state;
    struct rdzv_limits l = fx->srv->limits;
    uint64_t t0;

    good_start(fx);
    HARNESS_RUN_UNTIL(
        &fx->h, N(0, ASSIGN) == 1 &&
                    N(1, ASSIGN) == 1); /* past their handshakes: the deadline no longer applies */
    l.handshake_ms = 300;
    rdzv_server_set_limits(fx->srv, &l);
    t0 = uv_now(&fx->loop);
    raw_connect(fx, 2, 1);
    uv_timer_start(&R(2)->trickle, trickle_cb, 25, 25); /* a whole HELLO would take > 0.5 s */
    raw_connect(fx, 3, 1);
    HARNESS_RUN_UNTIL(&fx->h, R(2)->closed && R(3)->closed);
    assert_true(uv_now(&fx->loop) - t0 >= 250);
    assert_true(R(2)->trickled > 3);
    assert_int_equal(HITS(HANDSHAKE_TIMEOUT), 2);
    assert_int_equal(logged(fx, "handshake_timeout", "within 300 ms", NULL), 1);
    good_finish(fx);
}

/* A welcomed observer that says nothing more is cut after idle_ms; an attached worker, silent
 * just as long, is in a job and stays. */
static void test_idle_timeout(void **state)
{
    struct fixture *fx = *state;
    struct rdzv_limits l = fx->srv->limits;

    good_start(fx);
    HARNESS_RUN_UNTIL(&fx->h, N(0, ASSIGN) == 1 &&
                                  N(1, ASSIGN) ==
                                      1); /* in a job: the idle deadline does not apply to them */
    l.idle_ms = 300;
    rdzv_server_set_limits(fx->srv, &l);
    worker(fx, 3, "good");
    raw_connect(fx, 2, 0);
    hello(R(2), RDZV_ROLE_OBSERVER, TOKEN);
    HARNESS_RUN_UNTIL(&fx->h, R(2)->closed);
    assert_int_equal(N(2, WELCOME), 1);
    assert_int_equal(HITS(IDLE_TIMEOUT), 1);
    raw_connect(fx, 4, 0); /* a second idle period: the worker outlives it too */
    hello(R(4), RDZV_ROLE_OBSERVER, TOKEN);
    HARNESS_RUN_UNTIL(&fx->h, R(4)->closed);
    assert_int_equal(HITS(IDLE_TIMEOUT), 2);
    assert_false(R(3)->closed);
    assert_int_equal(N(3, ATTACH_OK), 1);
    assert_int_equal(logged(fx, "idle_timeout", NULL), 1);
    good_finish(fx);
}

/* The job's key quota (2 here): the third key gets LIMIT, counted and logged. */
static void test_kv_quota(void **state)
{
    struct fixture *fx = *state;

    good_start(fx);
    HARNESS_RUN_UNTIL(&fx->h, N(0, ASSIGN) == 1 && N(1, ASSIGN) == 1);
    worker(fx, 3, "good");
    for (uint32_t k = 0; k < 3; k++) {
        struct rdzv_msg *m = sendq_msg(RDZV_MSG_KV_PUT);

        m->u.kv.req_id = k;
        snprintf(m->u.kv.key, sizeof(m->u.kv.key), "key%u", k);
        m->u.kv.value_len = 1;
        send_msg(R(3), m);
    }
    HARNESS_RUN_UNTIL(&fx->h, N(3, KV_REPLY) == 3);
    assert_int_equal(HITS(KV_QUOTA), 1);
    assert_int_equal(logged(fx, "kv_quota", NULL), 1);
    good_finish(fx);
}

/* --- every client bounded (docs/SECURITY.md "Limits and quotas of a shared server") ----------- */
static struct rdzv_limits *limits(struct fixture *fx)
{
    static struct rdzv_limits l;

    l = fx->srv->limits;
    return &l;
}

static void kv_req(struct raw *r, uint8_t type, uint32_t req_id, const char *key, uint32_t len)
{
    struct rdzv_msg *m = sendq_msg(type);

    m->u.kv.req_id = req_id;
    snprintf(m->u.kv.key, sizeof(m->u.kv.key), "%s", key);
    m->u.kv.value_len = len;
    memset(m->u.kv.value, 'v', len);
    send_msg(r, m);
}

static int hostile_gone(struct fixture *fx)
{
    for (struct peer *p = fx->srv->peers; p != NULL; p = p->next)
        if (p->conn.send_max == 512 * 1024 && p->role == RDZV_ROLE_WORKER && p->kvjob != NULL &&
            strcmp(p->kvjob->job->id, "evil") == 0)
            return 0;
    return 1;
}

/* A worker asks for a 60 KiB value over and over and never reads a reply: its unsent replies
 * reach send_queue_max (512 KiB here) and it is cut, counted and logged, while a worker of
 * another job that reads gets its own 60 KiB reply and the good job runs to its end. */
static void test_send_queue(void **state)
{
    struct fixture *fx = *state;
    struct rdzv_limits *l = limits(fx);

    l->max_connections = 8;
    l->kv_max_keys = 8;
    l->send_queue_max = 512 * 1024;
    rdzv_server_set_limits(fx->srv, l);
    good_start(fx);
    HARNESS_RUN_UNTIL(&fx->h, N(0, ASSIGN) == 1 && N(1, ASSIGN) == 1);
    agent(fx, 2, "evil", 2); /* the hostile worker's job: waiting for a second node */
    HARNESS_RUN_UNTIL(&fx->h, fx->srv->n_jobs == 2); /* before its worker's ATTACH */
    fx->rcvbuf = 64 * 1024; /* no autotuning (tcp_rmem may allow 32 MB): the server must hold it */
    raw_connect_from(fx, 3, 0, "127.0.0.1");
    hello(R(3), RDZV_ROLE_WORKER, TOKEN);
    attach_msg(R(3), "evil");
    worker(fx, 4, "good");
    HARNESS_RUN_UNTIL(&fx->h, N(3, ATTACH_OK) == 1 && N(4, ATTACH_OK) == 1);
    kv_req(R(3), RDZV_MSG_KV_PUT, 1, "big", RDZV_VALUE_MAX);
    kv_req(R(4), RDZV_MSG_KV_PUT, 1, "big", RDZV_VALUE_MAX);
    HARNESS_RUN_UNTIL(&fx->h, N(3, KV_REPLY) == 1 && N(4, KV_REPLY) == 1);
    assert_int_equal(uv_read_stop((uv_stream_t *)&R(3)->conn.tcp), 0); /* never reads again */
    for (uint32_t i = 0; i < 1000; i++) /* 60 MB of replies: far past the socket buffers */
        kv_req(R(3), RDZV_MSG_KV_GET, 2 + i, "big", 0);
    HARNESS_RUN_UNTIL(&fx->h, HITS(SEND_QUEUE) == 1);
    run_until(fx, hostile_gone);
    assert_int_equal(logged(fx, "send_queue", "bytes of replies unread", NULL), 1);
    kv_req(R(4), RDZV_MSG_KV_GET, 2, "big", 0);
    HARNESS_RUN_UNTIL(&fx->h, N(4, KV_REPLY) == 2);
    assert_false(R(4)->closed);
    assert_int_equal(N(2, ERROR), 0);
    good_finish(fx);
}

static struct peer *hostile; /* test_flush_timeout's, once it is closing */

static int hostile_closing(struct fixture *fx)
{
    for (struct peer *p = fx->srv->peers; p != NULL; p = p->next)
        if (p->role == RDZV_ROLE_WORKER && p->closing && rdzv_conn_unsent(&p->conn) > 0)
            hostile = p;
    return hostile != NULL;
}

static int hostile_closed(struct fixture *fx)
{
    for (struct peer *p = fx->srv->peers; p != NULL; p = p->next)
        if (p == hostile)
            return 0;
    return 1;
}

/* A flushing close (ERROR, then close once it is sent) of a peer that does not read: it used
 * to wait for ever, holding the connection and its queued replies; it is cut after
 * SRV_CLOSE_FLUSH_MS. */
static void test_flush_timeout(void **state)
{
    struct fixture *fx = *state;
    struct rdzv_limits *l = limits(fx);
    uint64_t t0;

    l->send_queue_max = 64u << 20; /* not this limit */
    rdzv_server_set_limits(fx->srv, l);
    good_start(fx);
    HARNESS_RUN_UNTIL(&fx->h, N(0, ASSIGN) == 1 && N(1, ASSIGN) == 1);
    fx->rcvbuf = 64 * 1024;
    raw_connect_from(fx, 3, 0, "127.0.0.1");
    hello(R(3), RDZV_ROLE_WORKER, TOKEN);
    attach_msg(R(3), "good");
    worker(fx, 4, "good");
    HARNESS_RUN_UNTIL(&fx->h, N(3, ATTACH_OK) == 1 && N(4, ATTACH_OK) == 1);
    kv_req(R(4), RDZV_MSG_KV_PUT, 1, "big", RDZV_VALUE_MAX);
    HARNESS_RUN_UNTIL(&fx->h, N(4, KV_REPLY) == 1);
    assert_int_equal(uv_read_stop((uv_stream_t *)&R(3)->conn.tcp), 0);
    for (uint32_t i = 0; i < 200; i++) /* 12 MB of replies: more than the sockets hold */
        kv_req(R(3), RDZV_MSG_KV_GET, 2 + i, "big", 0);
    attach_msg(R(3), "good"); /* a second ATTACH: ERROR PROTOCOL, then a flushing close */
    hostile = NULL;
    uv_update_time(&fx->loop);
    t0 = uv_now(&fx->loop); /* before the close: the loop may see it late on a busy host */
    run_until(fx, hostile_closing);
    run_until(fx, hostile_closed);
    assert_true(uv_now(&fx->loop) - t0 >= SRV_CLOSE_FLUSH_MS - 50);
    assert_int_equal(HITS(SEND_QUEUE), 0);
    good_finish(fx);
}

/* The KV bytes of all jobs together (kv_max_total_bytes, 100,000 here): one job's 60 KiB value
 * fits, a second job's is refused with LIMIT although its own quota has room; when the first
 * job ends its bytes come back and the second job's put succeeds. */
static void test_kv_total(void **state)
{
    struct fixture *fx = *state;
    struct rdzv_limits *l = limits(fx);

    l->kv_max_total_bytes = 100000;
    rdzv_server_set_limits(fx->srv, l);
    good_start(fx);
    HARNESS_RUN_UNTIL(&fx->h, N(0, ASSIGN) == 1 && N(1, ASSIGN) == 1);
    agent(fx, 2, "b", 2);
    HARNESS_RUN_UNTIL(&fx->h, fx->srv->n_jobs == 2);
    worker(fx, 3, "good");
    worker(fx, 4, "b");
    HARNESS_RUN_UNTIL(&fx->h, N(3, ATTACH_OK) == 1 && N(4, ATTACH_OK) == 1);
    kv_req(R(3), RDZV_MSG_KV_PUT, 1, "k", RDZV_VALUE_MAX);
    HARNESS_RUN_UNTIL(&fx->h, N(3, KV_REPLY) == 1);
    assert_int_equal(R(3)->count[RDZV_MSG_KV_REPLY], 1);
    kv_req(R(4), RDZV_MSG_KV_PUT, 1, "k", RDZV_VALUE_MAX);
    HARNESS_RUN_UNTIL(&fx->h, N(4, KV_REPLY) == 1);
    assert_int_equal(fx->srv->kv_pool.bytes, 1 + RDZV_VALUE_MAX + RDZV_KV_KEY_OVERHEAD);
    assert_int_equal(HITS(KV_TOTAL), 1);
    assert_int_equal(HITS(KV_QUOTA), 0);
    assert_int_equal(logged(fx, "kv_total", "for all jobs", NULL), 1);
    good_finish(fx);
    raw_close(R(0)); /* its agents go: the job is dropped, and its KV bytes go back */
    raw_close(R(1));
    HARNESS_RUN_UNTIL(&fx->h, fx->srv->kv_pool.bytes == 0);
    kv_req(R(4), RDZV_MSG_KV_PUT, 2, "k", RDZV_VALUE_MAX);
    HARNESS_RUN_UNTIL(&fx->h, N(4, KV_REPLY) == 2);
    assert_int_equal(HITS(KV_TOTAL), 1);
}

/* max_jobs (2 here): a JOIN that would create a third job gets ERROR saying the server is full;
 * a JOIN for a job that exists still gets in. */
static void test_max_jobs(void **state)
{
    struct fixture *fx = *state;
    struct rdzv_limits *l = limits(fx);

    l->max_jobs = 2;
    rdzv_server_set_limits(fx->srv, l);
    good_start(fx);
    HARNESS_RUN_UNTIL(&fx->h, N(0, ASSIGN) == 1 && N(1, ASSIGN) == 1);
    agent(fx, 2, "b", 3);
    HARNESS_RUN_UNTIL(&fx->h, fx->srv->n_jobs == 2);
    agent(fx, 3, "c", 2);
    agent(fx, 4, "b", 3);
    HARNESS_RUN_UNTIL(&fx->h, R(3)->closed && N(4, WAITING) >= 1);
    assert_int_equal(R(3)->error.code, RDZV_ERR_PROTOCOL);
    assert_non_null(strstr(R(3)->error.text, "server full"));
    assert_int_equal(N(4, ERROR), 0);
    assert_int_equal(fx->srv->n_jobs, 2);
    assert_int_equal(HITS(JOBS), 1);
    assert_int_equal(logged(fx, "jobs", "while 2 jobs exist", NULL), 1);
    good_finish(fx);
}

/* handshakes_per_source (2 here) counts per /24, and a new connection over it evicts the
 * oldest idle one of that /24 instead of being refused (128 silent connections from
 * a NAT refused every agent behind it); other /24s are not touched. */
static void test_preauth_source_evict(void **state)
{
    struct fixture *fx = *state;
    struct rdzv_limits *l = limits(fx);

    l->handshakes_per_source = 2;
    rdzv_server_set_limits(fx->srv, l);
    good_start(fx);
    HARNESS_RUN_UNTIL(&fx->h, N(0, ASSIGN) == 1 && N(1, ASSIGN) == 1);
    raw_connect_from(fx, 2, 1, "127.0.2.5");
    HARNESS_RUN_UNTIL(&fx->h, fx->srv->n_pre == 1); /* so that 2 is the oldest */
    raw_connect_from(fx, 3, 1, "127.0.2.6");
    HARNESS_RUN_UNTIL(&fx->h, fx->srv->n_pre == 2);
    raw_connect_from(fx, 5, 1, "127.0.3.5"); /* another /24: its own budget */
    raw_connect_from(fx, 4, 0, "127.0.2.7"); /* same /24 as 2 and 3: the third */
    hello(R(4), RDZV_ROLE_OBSERVER, TOKEN);
    HARNESS_RUN_UNTIL(&fx->h, HITS(PREAUTH_SRC_EVICT) == 1 && R(2)->closed);
    HARNESS_RUN_UNTIL(&fx->h, N(4, WELCOME) == 1);
    assert_false(R(3)->closed || R(5)->closed);
    assert_int_equal(HITS(HS_IN_FLIGHT), 0);
    assert_int_equal(logged(fx, "127.0.2.5", "preauth_source_evicted", NULL), 1);
    good_finish(fx);
}

/* Descriptors: limits that do not fit RLIMIT_NOFILE are lowered, and said so. */
static void test_fit_fds(void **state)
{
    struct rdzv_limits l = {0};
    char why[256] = "";

    (void)state;
    assert_int_equal(rdzv_limits_fit_fds(&l, 1 << 20, why, sizeof(why)), 0);
    assert_int_equal(l.max_connections, 0); /* untouched: the defaults fit */
    assert_int_equal(rdzv_limits_fit_fds(&l, 4096, why, sizeof(why)), 1);
    assert_int_equal(l.http_max_connections, 256); /* (4096 - 64) / 8 = 504: 256 stays */
    assert_int_equal(l.max_connections, 4096 - 64 - 256);
    assert_int_equal(l.preauth_max, (4096 - 64 - 256) / 4);
    assert_non_null(strstr(why, "4096 file descriptors"));
    l = (struct rdzv_limits){0};
    assert_int_equal(rdzv_limits_fit_fds(&l, 1024, why, sizeof(why)), 1);
    assert_int_equal(l.http_max_connections, (1024 - 64) / 8);
    assert_int_equal(l.max_connections, 1024 - 64 - (1024 - 64) / 8);
    assert_int_equal(rdzv_limits_fit_fds(&l, 100, NULL, 0), -EMFILE);
}

/* max_connections_per_source (3 here, of 16): a flood from 127.0.0.1 gets three connections
 * (the good job's two among them), the rest are closed at once, while a client from
 * 127.0.1.2 (another /24: the limit counts per /24) still gets in. */
static void test_per_source(void **state)
{
    struct fixture *fx = *state;
    struct rdzv_limits *l = limits(fx);

    l->max_connections = 16;
    l->max_connections_per_source = 3;
    rdzv_server_set_limits(fx->srv, l);
    good_start(fx);
    HARNESS_RUN_UNTIL(&fx->h, N(0, ASSIGN) == 1 && N(1, ASSIGN) == 1);
    for (int i = 2; i < 6; i++)
        raw_connect_from(fx, i, 1, "127.0.0.1");
    raw_connect_from(fx, 6, 0, "127.0.1.2");
    hello(R(6), RDZV_ROLE_OBSERVER, TOKEN);
    HARNESS_RUN_UNTIL(&fx->h, R(3)->closed && R(4)->closed && R(5)->closed && N(6, WELCOME) == 1);
    assert_false(R(2)->closed);
    assert_int_equal(HITS(PER_SOURCE), 3);
    assert_int_equal(HITS(CONNECTIONS), 0);
    assert_int_equal(logged(fx, "127.0.0.1", "connections_per_source", NULL), 1);
    assert_int_equal(fx->srv->n_peers, 4);
    good_finish(fx);
}

/* Worker connections count against their job: job_workers_per_proc 1 x world 2 + slack 1 = 3
 * for the good job. The fourth ATTACH is refused; once a worker goes, another gets in. */
static void test_job_workers(void **state)
{
    struct fixture *fx = *state;
    struct rdzv_limits *l = limits(fx);

    l->max_connections = 16;
    l->job_workers_per_proc = 1;
    l->job_workers_slack = 1;
    rdzv_server_set_limits(fx->srv, l);
    good_start(fx);
    HARNESS_RUN_UNTIL(&fx->h, N(0, ASSIGN) == 1 && N(1, ASSIGN) == 1);
    for (int i = 2; i < 5; i++)
        worker(fx, i, "good");
    HARNESS_RUN_UNTIL(&fx->h, N(2, ATTACH_OK) + N(3, ATTACH_OK) + N(4, ATTACH_OK) == 3);
    worker(fx, 5, "good");
    HARNESS_RUN_UNTIL(&fx->h,
                      N(2, ATTACH_OK) + N(3, ATTACH_OK) + N(4, ATTACH_OK) == 3 && R(5)->closed);
    assert_int_equal(R(5)->error.code, RDZV_ERR_PROTOCOL);
    assert_non_null(strstr(R(5)->error.text, "has 3 worker connections already"));
    assert_int_equal(HITS(JOB_WORKERS), 1);
    assert_int_equal(logged(fx, "job_workers", "worker connections of job good", NULL), 1);
    raw_close(R(2));
    HARNESS_RUN_UNTIL(&fx->h, fx->srv->jobs->nworkers == 2);
    worker(fx, 6, "good");
    HARNESS_RUN_UNTIL(&fx->h, N(6, ATTACH_OK) == 1);
    good_finish(fx);
}

/* Peer-supplied text in a log line (here a job id of a refused ATTACH) is escaped: a newline
 * cannot forge a line, an ESC sequence cannot reach the operator's terminal. */
static void test_log_escaped(void **state)
{
    struct fixture *fx = *state;

    good_start(fx);
    HARNESS_RUN_UNTIL(&fx->h, N(0, ASSIGN) == 1 && N(1, ASSIGN) == 1);
    worker(fx, 3, "good");
    attach_msg(R(3), "x\nmuster: server: forged\x1b[2J");
    HARNESS_RUN_UNTIL(&fx->h, R(3)->closed);
    assert_int_equal(HITS(AUTH_JOB_SCOPE) + HITS(PROTOCOL), 1);
    assert_int_equal(logged(fx, "ATTACH to job x\\x0amuster: server: forged\\x1b[2J", NULL), 1);
    for (int i = 0; i < fx->n_log && i < 32; i++)
        assert_null(strpbrk(fx->log[i], "\n\x1b"));
    good_finish(fx);
}

static void kv_gets(struct raw *r, int n)
{
    char key[16];

    for (int k = 0; k < n; k++) {
        snprintf(key, sizeof(key), "never%d", k);
        struct rdzv_msg *m = sendq_msg(RDZV_MSG_KV_GET);

        m->u.kv.req_id = (uint32_t)k;
        m->u.kv.wait_ms = 60000;
        snprintf(m->u.kv.key, sizeof(m->u.kv.key), "%s", key);
        send_msg(r, m);
    }
}

/* Held KV requests: 10x the per-connection cap (4 here) from one worker: 4 held,
 * 36 LIMIT (kv_held_per_conn); a second worker meets the job's cap (5 + 1 per attached worker:
 * 7) after 3: 37 LIMIT (kv_held_per_job). Then that worker asks for its own job's status: ERROR
 * AUTH (item 6), and its close gives its holds back. The good job runs on. */
static void test_kv_held(void **state)
{
    struct fixture *fx = *state;
    struct rdzv_limits *l = limits(fx);

    l->kv_max_held_per_conn = 4;
    l->kv_max_held_per_job = 5;
    l->kv_held_per_worker = 1;
    rdzv_server_set_limits(fx->srv, l);
    good_start(fx);
    HARNESS_RUN_UNTIL(&fx->h, N(0, ASSIGN) == 1 && N(1, ASSIGN) == 1);
    worker(fx, 3, "good");
    worker(fx, 4, "good");
    HARNESS_RUN_UNTIL(&fx->h, N(3, ATTACH_OK) == 1 && N(4, ATTACH_OK) == 1);
    kv_gets(R(3), 40);
    HARNESS_RUN_UNTIL(&fx->h, N(3, KV_REPLY) == 36);
    assert_int_equal(HITS(KV_HELD_CONN), 36);
    kv_gets(R(4), 40);
    HARNESS_RUN_UNTIL(&fx->h, N(4, KV_REPLY) == 37);
    assert_int_equal(HITS(KV_HELD_JOB), 37);
    assert_int_equal(HITS(KV_HELD_CONN), 36);
    assert_int_equal(rdzv_kv_held(rdzv__sjob_find(fx->srv, "good")->kv), 7);
    assert_int_equal(fx->srv->kv_pool.held, 7);
    assert_int_equal(logged(fx, "kv_held_per_conn", NULL), 1);
    send_msg(R(4), sendq_msg(RDZV_MSG_STATUS_REQ));
    HARNESS_RUN_UNTIL(&fx->h, R(4)->closed);
    assert_int_equal(R(4)->error.code, RDZV_ERR_AUTH);
    assert_non_null(strstr(R(4)->error.text, "workers may not read status"));
    assert_int_equal(N(4, STATUS), 0);
    assert_int_equal(HITS(AUTH_JOB_SCOPE), 1);
    assert_int_equal(fx->srv->kv_pool.held, 4);
    good_finish(fx);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_bad_token),
        T(test_plaintext_and_truncated),
        T(test_other_job),
        T(test_max_connections),
        T(test_handshake_timeout),
        T(test_idle_timeout),
        T(test_kv_quota),
        T(test_send_queue),
        T(test_kv_total),
        T(test_flush_timeout),
        T(test_max_jobs),
        T(test_per_source),
        T(test_job_workers),
        T(test_log_escaped),
        T(test_kv_held),
        T(test_preauth_evict),
        T(test_preauth_source_evict),
        cmocka_unit_test(test_fit_fds),
    };
#undef T

    return cmocka_run_group_tests(tests, NULL, NULL);
}
