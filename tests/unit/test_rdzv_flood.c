/* A ClientHello flood against a real server on loopback: clients from 127.0.1.2
 * without any credential connect, send a ClientHello (X25519 or secp521r1 only, made by
 * mbedTLS at setup) and hang up, over and over, while two agents from 127.0.0.1 go through
 * HELLO / JOIN / ASSIGN and /metrics answers. Checks what is counted (the per-source handshake
 * limits, failed handshakes) and that a secp521r1-only hello is answered with an alert, not a
 * key. Everything runs on one private loop under a generous watchdog: no timing assertion. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <mbedtls/ssl.h>
#include <uv.h>

#include "harness.h"
#include "peer.h"

#include "conn.h"
#include "cred.h"
#include "server.h"
#include "server_priv.h"
#include "tls.h"

#define TOKEN "flood-test-token"
#define NFLOOD 16
#define WATCHDOG_MS 30000
#define FLOOD_HEAD_START_MS 300

struct fixture;

/* One unauthenticated client: connect from 127.0.1.2 (another /24 than the agents: limits
 * count per /24), ClientHello, hang up at the first byte
 * back (or the close), again until the flood stops. */
struct flooder {
    struct fixture *fx;
    uv_tcp_t tcp;
    uv_connect_t connect;
    uv_write_t write;
    int p521; /* sends the secp521r1-only hello */
    int open; /* tcp initialised and not yet closed */
};

struct agent {
    struct fixture *fx;
    struct rdzv_conn conn;
    uv_connect_t connect;
    int assigned, welcomed, errors, closed;
    uint64_t node;
};

/* A one-shot HTTP/1.0 GET, the response collected until the server closes. */
struct http_get {
    struct fixture *fx;
    uv_tcp_t tcp;
    uv_connect_t connect;
    uv_write_t write;
    char resp[65536];
    size_t len;
    int done;
};

struct fixture {
    uv_loop_t loop;
    uv_timer_t start;
    struct harness h; /* watchdog, run_until */
    struct rdzv_server *srv;
    unsigned port, http_port;
    struct rdzv_tls *tls;
    struct flooder fl[NFLOOD];
    int flooding;
    unsigned cycles;   /* flood connections made */
    unsigned answered; /* flood connections the server sent bytes to (a ServerHello) */
    struct agent ag[2];
    struct http_get http;
    uint8_t hello_x25519[2048], hello_p521[2048];
    size_t hello_x25519_len, hello_p521_len;
};

static struct fixture g_fx;

#define HITS(ev) (fx->srv->stats.events[SRV_EV_##ev])

/* pred(fx) holds, or the watchdog fails the test (harness.h) */
#define run_until(fx, pred) HARNESS_RUN_UNTIL(&(fx)->h, pred(fx))

/* --- ClientHellos made by an mbedTLS client that has no credential of this server --------- */
static size_t make_hello(mbedtls_ecp_group_id curve, uint8_t *out, size_t cap)
{
    size_t len = peer_client_hello(curve, out, cap);

    assert_true(len > 5 && out[0] == 0x16); /* a handshake record: the ClientHello */
    return len;
}

/* --- the flood ------------------------------------------------------------------------------ */
static void flood_connect(struct flooder *f);

static void flood_closed_cb(uv_handle_t *h)
{
    struct flooder *f = h->data;

    f->open = 0;
    if (f->fx->flooding)
        flood_connect(f);
}

static void flood_hangup(struct flooder *f)
{
    if (!uv_is_closing((uv_handle_t *)&f->tcp))
        uv_close((uv_handle_t *)&f->tcp, flood_closed_cb);
}

static void flood_alloc_cb(uv_handle_t *h, size_t s, uv_buf_t *buf)
{
    static char sink[4096];

    (void)h;
    (void)s;
    *buf = uv_buf_init(sink, sizeof(sink));
}

static void flood_read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    struct flooder *f = s->data;

    (void)buf;
    f->fx->answered += n > 0;
    if (n != 0) /* the server's first bytes (its ServerHello: its key is made), or its close */
        flood_hangup(f);
}

static void flood_connect_cb(uv_connect_t *req, int status)
{
    struct flooder *f = req->data;
    const uint8_t *hello = f->p521 ? f->fx->hello_p521 : f->fx->hello_x25519;
    size_t len = f->p521 ? f->fx->hello_p521_len : f->fx->hello_x25519_len;
    uv_buf_t b = uv_buf_init((char *)hello, (unsigned)len);

    if (status < 0 || uv_write(&f->write, (uv_stream_t *)&f->tcp, &b, 1, NULL) < 0 ||
        uv_read_start((uv_stream_t *)&f->tcp, flood_alloc_cb, flood_read_cb) < 0)
        flood_hangup(f);
}

static void flood_connect(struct flooder *f)
{
    struct sockaddr_in dst, src;

    assert_int_equal(uv_ip4_addr("127.0.0.1", (int)f->fx->port, &dst), 0);
    assert_int_equal(uv_ip4_addr("127.0.1.2", 0, &src), 0);
    assert_int_equal(uv_tcp_init(&f->fx->loop, &f->tcp), 0);
    f->tcp.data = f;
    f->connect.data = f;
    f->open = 1;
    f->fx->cycles++;
    if (uv_tcp_bind(&f->tcp, (struct sockaddr *)&src, 0) < 0 ||
        uv_tcp_connect(&f->connect, &f->tcp, (struct sockaddr *)&dst, flood_connect_cb) < 0)
        flood_hangup(f);
}

static int flood_over(struct fixture *fx)
{
    for (int i = 0; i < NFLOOD; i++)
        if (fx->fl[i].open)
            return 0;
    return 1;
}

/* --- legitimate agents ---------------------------------------------------------------------- */
static void agent_msg_cb(struct rdzv_conn *conn, const struct rdzv_msg *m)
{
    struct agent *a = conn->data;

    a->welcomed += m->type == RDZV_MSG_WELCOME;
    a->assigned += m->type == RDZV_MSG_ASSIGN;
    a->errors += m->type == RDZV_MSG_ERROR;
}

static void agent_closed_cb(struct rdzv_conn *conn)
{
    struct agent *a = conn->data;

    a->closed = 1;
}

static void agent_error_cb(struct rdzv_conn *conn, int err)
{
    struct agent *a = conn->data;

    (void)err;
    a->errors++;
    rdzv_conn_close(conn, 0, agent_closed_cb);
}

static void agent_connect_cb(uv_connect_t *req, int status)
{
    struct agent *a = req->data;
    struct rdzv_msg m;

    assert_int_equal(status, 0);
    assert_int_equal(rdzv_conn_start_tls(&a->conn, a->fx->tls, 0), 0);
    memset(&m, 0, sizeof(m));
    m.type = RDZV_MSG_HELLO;
    m.u.hello.version = RDZV_PROTO_VERSION;
    m.u.hello.role = RDZV_ROLE_AGENT;
    snprintf(m.u.hello.token, sizeof(m.u.hello.token), "%s", TOKEN);
    assert_int_equal(rdzv_conn_send(&a->conn, &m), 0);
    memset(&m, 0, sizeof(m));
    m.type = RDZV_MSG_JOIN;
    m.u.join = (struct rdzv_join){
        .min_nodes = 2, .max_nodes = 2, .nproc = 1, .master_port = 29500, .join_timeout_ms = 20000};
    memset(m.u.join.node_secret, 0, sizeof(m.u.join.node_secret));
    memcpy(m.u.join.node_secret, &a->node, sizeof(a->node));
    m.u.join.node_id = rdzv_node_id_of(m.u.join.node_secret);
    snprintf(m.u.join.job_id, sizeof(m.u.join.job_id), "good");
    snprintf(m.u.join.host, sizeof(m.u.join.host), "host%llu", (unsigned long long)a->node);
    assert_int_equal(rdzv_conn_send(&a->conn, &m), 0);
}

static void agent_start(struct fixture *fx, struct agent *a, uint64_t node)
{
    struct sockaddr_in dst;

    a->fx = fx;
    a->node = node;
    assert_int_equal(uv_ip4_addr("127.0.0.1", (int)fx->port, &dst), 0);
    assert_int_equal(rdzv_conn_init(&fx->loop, &a->conn, agent_msg_cb, agent_error_cb, a), 0);
    a->connect.data = a;
    assert_int_equal(
        uv_tcp_connect(&a->connect, &a->conn.tcp, (struct sockaddr *)&dst, agent_connect_cb), 0);
}

static void agents_start_cb(uv_timer_t *t)
{
    struct fixture *fx = t->data;

    agent_start(fx, &fx->ag[0], 1);
    agent_start(fx, &fx->ag[1], 2);
}

/* --- HTTP /metrics ---------------------------------------------------------------------------- */
static void http_closed_cb(uv_handle_t *h)
{
    struct http_get *g = h->data;

    g->done = 1;
}

static void http_alloc_cb(uv_handle_t *h, size_t s, uv_buf_t *buf)
{
    struct http_get *g = h->data;

    (void)s;
    *buf = uv_buf_init(g->resp + g->len, (unsigned)(sizeof(g->resp) - 1 - g->len));
}

static void http_read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    struct http_get *g = s->data;

    (void)buf;
    if (n > 0) {
        g->len += (size_t)n;
        g->resp[g->len] = '\0';
    }
    if (n < 0 || g->len + 1 >= sizeof(g->resp))
        uv_close((uv_handle_t *)&g->tcp, http_closed_cb);
}

static void http_connect_cb(uv_connect_t *req, int status)
{
    static char get[] = "GET /metrics HTTP/1.0\r\n\r\n";
    struct http_get *g = req->data;
    uv_buf_t b = uv_buf_init(get, sizeof(get) - 1);

    assert_int_equal(status, 0);
    assert_int_equal(uv_write(&g->write, (uv_stream_t *)&g->tcp, &b, 1, NULL), 0);
    assert_int_equal(uv_read_start((uv_stream_t *)&g->tcp, http_alloc_cb, http_read_cb), 0);
}

static void http_get_metrics(struct fixture *fx)
{
    struct http_get *g = &fx->http;
    struct sockaddr_in dst;

    memset(g, 0, sizeof(*g));
    g->fx = fx;
    assert_int_equal(uv_ip4_addr("127.0.0.1", (int)fx->http_port, &dst), 0);
    assert_int_equal(uv_tcp_init(&fx->loop, &g->tcp), 0);
    g->tcp.data = g;
    g->connect.data = g;
    assert_int_equal(uv_tcp_connect(&g->connect, &g->tcp, (struct sockaddr *)&dst, http_connect_cb),
                     0);
}

/* --- fixture ---------------------------------------------------------------------------------- */
static int setup(void **state)
{
    struct fixture *fx = &g_fx;
    struct rdzv_limits l = rdzv_limits_default();

    memset(fx, 0, sizeof(*fx));
    fx->hello_x25519_len =
        make_hello(MBEDTLS_ECP_DP_CURVE25519, fx->hello_x25519, sizeof(fx->hello_x25519));
    fx->hello_p521_len =
        make_hello(MBEDTLS_ECP_DP_SECP521R1, fx->hello_p521, sizeof(fx->hello_p521));
    assert_int_equal(uv_loop_init(&fx->loop), 0);
    harness_init(&fx->h, &fx->loop, WATCHDOG_MS);
    assert_int_equal(uv_timer_init(&fx->loop, &fx->start), 0);
    fx->start.data = fx;
    assert_int_equal(rdzv_server_new(&fx->loop, "127.0.0.1", 0, TOKEN, &fx->srv), 0);
    /* small limits, so that the flood meets them within the test's few seconds */
    l.handshakes_per_source = 4;
    l.handshake_rate = 50;
    l.handshake_burst = 20;
    rdzv_server_set_limits(fx->srv, &l);
    rdzv_server_set_log(fx->srv, NULL, NULL);
    fx->port = rdzv_server_port(fx->srv);
    assert_int_equal(rdzv_server_http_listen(fx->srv, "127.0.0.1", 0, &fx->http_port), 0);
    assert_int_equal(rdzv_tls_new(&(struct rdzv_tls_opts){.token = TOKEN}, 0, &fx->tls, NULL, 0),
                     0);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;

    fx->flooding = 0;
    for (int i = 0; i < NFLOOD; i++)
        if (fx->fl[i].open)
            flood_hangup(&fx->fl[i]);
    for (int i = 0; i < 2; i++)
        if (fx->ag[i].fx != NULL && !fx->ag[i].conn.closing)
            rdzv_conn_close(&fx->ag[i].conn, 0, agent_closed_cb);
    /* the server closes with handshake steps possibly still in the pool: they return to a
     * closed conn and free its TLS state then (ASan checks that path) */
    rdzv_server_close(fx->srv, NULL, NULL);
    harness_close(&fx->h);
    uv_close((uv_handle_t *)&fx->start, NULL);
    assert_int_equal(uv_run(&fx->loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&fx->loop), 0);
    rdzv_tls_free(fx->tls);
    return 0;
}

/* --- tests ------------------------------------------------------------------------------------ */
static int agents_assigned(struct fixture *fx)
{
    return fx->ag[0].assigned == 1 && fx->ag[1].assigned == 1;
}

static int metrics_done(struct fixture *fx)
{
    return fx->http.done;
}

static int flood_hits(struct fixture *fx)
{
    return HITS(HS_RATE) + HITS(HS_IN_FLIGHT) > 0 && HITS(AUTH_TLS) > 0;
}

/* The flood runs for a head start, then two agents join job "good" (2 nodes) through it and
 * both get ASSIGN; /metrics answers during the flood and shows the refusals. */
static void test_flood(void **state)
{
    struct fixture *fx = *state;

    fx->flooding = 1;
    for (int i = 0; i < NFLOOD; i++) {
        fx->fl[i].fx = fx;
        fx->fl[i].p521 = i % 2;
        flood_connect(&fx->fl[i]);
    }
    uv_timer_start(&fx->start, agents_start_cb, FLOOD_HEAD_START_MS, 0);
    run_until(fx, agents_assigned);
    assert_int_equal(fx->ag[0].errors + fx->ag[1].errors, 0);
    http_get_metrics(fx);
    run_until(fx, metrics_done);
    assert_non_null(strstr(fx->http.resp, "200"));
    run_until(fx, flood_hits);
    fx->flooding = 0;
    run_until(fx, flood_over);
    assert_non_null(strstr(fx->http.resp, "muster_limit_hits_total{limit=\"handshake_rate\"}"));
    assert_non_null(
        strstr(fx->http.resp, "muster_limit_hits_total{limit=\"handshakes_in_flight\"}"));
    print_message("flood: %u connections from 127.0.1.2; refused over the rate %llu, over the "
                  "handshakes in flight %llu; failed handshakes %llu\n",
                  fx->cycles, (unsigned long long)HITS(HS_RATE),
                  (unsigned long long)HITS(HS_IN_FLIGHT), (unsigned long long)HITS(AUTH_TLS));
    assert_true(fx->cycles > NFLOOD);
}

/* A hello offering only secp521r1: mbedTLS 2.28 still answers with a ServerHello (its suite
 * check accepts any curve it knows), then finds no common curve when it would make its key and
 * fails there (no alert: the server just closes). Returns 1 when the records in buf are whole
 * and hold no ServerKeyExchange (handshake type 12): no key was made. */
static int records_no_key(const uint8_t *buf, size_t len)
{
    for (size_t off = 0; off + 5 <= len;) {
        size_t rlen = (size_t)buf[off + 3] << 8 | buf[off + 4];

        if (off + 5 + rlen > len)
            return 0;
        if (buf[off] == 22 && rlen > 0 && buf[off + 5] == 12)
            return 0; /* a ServerKeyExchange: a key was made */
        off += 5 + rlen;
    }
    return 1;
}

struct one_shot {
    uint8_t got[4096];
    size_t len;
    int closed;
};

static void shot_alloc_cb(uv_handle_t *h, size_t s, uv_buf_t *buf)
{
    struct one_shot *o = ((uv_tcp_t *)h)->data;

    (void)s;
    *buf = uv_buf_init((char *)o->got + o->len, (unsigned)(sizeof(o->got) - o->len));
}

static void shot_closed_cb(uv_handle_t *h)
{
    struct one_shot *o = h->data;

    o->closed = 1;
}

static void shot_read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    struct one_shot *o = s->data;

    (void)buf;
    if (n > 0)
        o->len += (size_t)n;
    if ((n < 0 || o->len == sizeof(o->got)) && !uv_is_closing((uv_handle_t *)s))
        uv_close((uv_handle_t *)s, shot_closed_cb);
}

static uv_tcp_t shot_tcp;
static uv_connect_t shot_connect;
static uv_write_t shot_write;
static struct one_shot shot;

static void shot_connect_cb(uv_connect_t *req, int status)
{
    uv_buf_t b = uv_buf_init((char *)g_fx.hello_p521, (unsigned)g_fx.hello_p521_len);

    (void)req;
    assert_int_equal(status, 0);
    assert_int_equal(uv_write(&shot_write, (uv_stream_t *)&shot_tcp, &b, 1, NULL), 0);
    assert_int_equal(uv_read_start((uv_stream_t *)&shot_tcp, shot_alloc_cb, shot_read_cb), 0);
}

static int shot_closed(struct fixture *fx)
{
    (void)fx;
    return shot.closed;
}

static void test_p521_only(void **state)
{
    struct fixture *fx = *state;
    struct sockaddr_in dst;

    memset(&shot, 0, sizeof(shot));
    assert_int_equal(uv_ip4_addr("127.0.0.1", (int)fx->port, &dst), 0);
    assert_int_equal(uv_tcp_init(&fx->loop, &shot_tcp), 0);
    shot_tcp.data = &shot;
    assert_int_equal(
        uv_tcp_connect(&shot_connect, &shot_tcp, (struct sockaddr *)&dst, shot_connect_cb), 0);
    run_until(fx, shot_closed);
    assert_true(shot.len > 0 && records_no_key(shot.got, shot.len));
    assert_int_equal(HITS(AUTH_TLS), 1);
}

static int some_answered(struct fixture *fx)
{
    return fx->answered > 0;
}

/* The server closes while handshake steps are in the pool or waiting for it: 16 hellos at once,
 * the server closed as soon as the first is answered (the others are still being worked on).
 * Each step returns to a closed conn and frees its TLS state then, the last one the server's
 * TLS configuration too; ASan (CI) checks for a use after free or a leak. */
static void test_close_mid_handshake(void **state)
{
    struct fixture *fx = *state;
    struct rdzv_limits l = rdzv_limits_default();

    rdzv_server_set_limits(fx->srv, &l); /* no refusals: every hello gets a step */
    for (int i = 0; i < NFLOOD; i++) {
        fx->fl[i].fx = fx;
        flood_connect(&fx->fl[i]);
    }
    run_until(fx, some_answered);
    rdzv_server_close(fx->srv, NULL, NULL);
    fx->srv = NULL;
    run_until(fx, flood_over);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_p521_only, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flood, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_mid_handshake, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
