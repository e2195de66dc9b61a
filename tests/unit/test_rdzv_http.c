/* HTTP port: the request parser on its own, then real requests over loopback to a server on a
 * private loop (one request per connection, read until the server closes). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "harness.h"

#include "cred.h"
#include "http.h"
#include "server.h"
#include "server_priv.h"

static void test_parse(void **state)
{
    struct rdzv_http_req r;
    char big[RDZV_HTTP_HEAD_MAX + 16];

    (void)state;
    assert_int_equal(rdzv_http_parse("GET /metrics HTTP/1.0\r\n\r\n", 25, &r), 0);
    assert_string_equal(r.method, "GET");
    assert_string_equal(r.path, "/metrics");
    assert_int_equal(rdzv_http_parse("HEAD /status?x=1 HTTP/1.1\nHost: a\n\n", 35, &r), 0);
    assert_string_equal(r.method, "HEAD");
    assert_string_equal(r.path, "/status");
    assert_string_equal(r.query, "x=1");
    assert_int_equal(rdzv_http_parse("GET /metrics HTTP/1.0\r\n\r\n", 25, &r), 0);
    assert_string_equal(r.query, "");
    assert_int_equal(rdzv_http_parse("GET / HTTP/1.0\r\n", 16, &r), -EAGAIN);
    assert_int_equal(rdzv_http_parse("", 0, &r), -EAGAIN);
    assert_int_equal(rdzv_http_parse("GET / HTTP/2.0\r\n\r\n", 18, &r), -EINVAL);
    assert_int_equal(rdzv_http_parse("GET  / HTTP/1.0\r\n\r\n", 19, &r), -EINVAL);
    assert_int_equal(rdzv_http_parse("GET metrics HTTP/1.0\r\n\r\n", 24, &r), -EINVAL);
    assert_int_equal(rdzv_http_parse("GET /\r\n\r\n", 9, &r), -EINVAL);
    assert_int_equal(rdzv_http_parse("\r\n\r\n", 4, &r), -EINVAL);
    assert_int_equal(rdzv_http_parse("GETTTTTTTTTTTTTTTTTTT / HTTP/1.0\r\n\r\n", 36, &r), -EINVAL);
    memset(big, 'a', sizeof(big));
    assert_int_equal(rdzv_http_parse(big, RDZV_HTTP_HEAD_MAX, &r), -EMSGSIZE);
    assert_int_equal(rdzv_http_parse(big, 100, &r), -EAGAIN);
}

/* the query's values, %-decoded; bad escapes, NULs and values too long refused */
static void test_query(void **state)
{
    char v[8];

    (void)state;
    assert_int_equal(rdzv_http_query("job=a%2Db&rank=1&n=", "job", v, sizeof(v)), 0);
    assert_string_equal(v, "a-b");
    assert_int_equal(rdzv_http_query("job=a%2Db&rank=1&n=", "rank", v, sizeof(v)), 0);
    assert_string_equal(v, "1");
    assert_int_equal(rdzv_http_query("job=a%2Db&rank=1&n=", "n", v, sizeof(v)), 0);
    assert_string_equal(v, "");
    assert_int_equal(rdzv_http_query("jobs=x&job=y+z", "job", v, sizeof(v)), 0);
    assert_string_equal(v, "y z");
    assert_int_equal(rdzv_http_query("job=x", "jo", v, sizeof(v)), -ENOENT);
    assert_int_equal(rdzv_http_query("", "job", v, sizeof(v)), -ENOENT);
    assert_int_equal(rdzv_http_query("job=%4", "job", v, sizeof(v)), -EINVAL);
    assert_int_equal(rdzv_http_query("job=%4&n=1", "job", v, sizeof(v)), -EINVAL);
    assert_int_equal(rdzv_http_query("job=%zz", "job", v, sizeof(v)), -EINVAL);
    assert_int_equal(rdzv_http_query("job=a%00b", "job", v, sizeof(v)), -EINVAL);
    assert_int_equal(rdzv_http_query("job=12345678", "job", v, sizeof(v)), -EINVAL);
    assert_int_equal(rdzv_http_query("job=1234567", "job", v, sizeof(v)), 0);
}

/* --- loopback ------------------------------------------------------------------------------- */
struct fixture {
    uv_loop_t loop;
    struct harness h; /* watchdog */
    struct rdzv_server *srv;
    unsigned http_port;
};

struct client {
    uv_tcp_t tcp;
    uv_connect_t connect;
    uv_write_t write;
    const char *request;
    char reply[65536];
    size_t len;
    int closed;
};

static int setup(void **state)
{
    static struct fixture fx;

    memset(&fx, 0, sizeof(fx));
    assert_int_equal(uv_loop_init(&fx.loop), 0);
    harness_init(&fx.h, &fx.loop, 10000);
    assert_int_equal(rdzv_server_new(&fx.loop, "127.0.0.1", 0, "http-test-token", &fx.srv), 0);
    assert_int_equal(rdzv_server_http_listen(fx.srv, "127.0.0.1", 0, &fx.http_port), 0);
    assert_true(fx.http_port > 0);
    assert_int_equal(rdzv_server_http_listen(fx.srv, "127.0.0.1", 0, NULL), UV_EALREADY);
    *state = &fx;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;

    rdzv_server_close(fx->srv, NULL, NULL);
    harness_close(&fx->h);
    assert_int_equal(uv_run(&fx->loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&fx->loop), 0);
    return 0;
}

static void closed_cb(uv_handle_t *h)
{
    ((struct client *)h->data)->closed = 1;
}

static void alloc_cb(uv_handle_t *h, size_t s, uv_buf_t *buf)
{
    struct client *c = h->data;

    (void)s;
    *buf = uv_buf_init(c->reply + c->len, (unsigned)(sizeof(c->reply) - 1 - c->len));
}

static void read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    struct client *c = s->data;

    (void)buf;
    if (n > 0)
        c->len += (size_t)n;
    else if (n < 0)
        uv_close((uv_handle_t *)s, closed_cb);
}

static void connect_cb(uv_connect_t *req, int status)
{
    struct client *c = req->data;
    uv_buf_t buf = uv_buf_init((char *)c->request, (unsigned)strlen(c->request));

    assert_int_equal(status, 0);
    assert_int_equal(uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb), 0);
    assert_int_equal(uv_write(&c->write, (uv_stream_t *)&c->tcp, &buf, 1, NULL), 0);
}

/* Sends request to port, returns the whole reply (static; valid until the next call). */
static const char *send_to(struct fixture *fx, unsigned port, const char *request)
{
    static struct client c;
    struct sockaddr_in sin;

    memset(&c, 0, sizeof(c));
    c.request = request;
    c.tcp.data = &c;
    c.connect.data = &c;
    assert_int_equal(uv_ip4_addr("127.0.0.1", (int)port, &sin), 0);
    assert_int_equal(uv_tcp_init(&fx->loop, &c.tcp), 0);
    assert_int_equal(uv_tcp_connect(&c.connect, &c.tcp, (struct sockaddr *)&sin, connect_cb), 0);
    HARNESS_RUN_UNTIL(&fx->h, c.closed);
    assert_true(c.closed);
    c.reply[c.len] = '\0';
    return c.reply;
}

static const char *http(struct fixture *fx, const char *request)
{
    return send_to(fx, fx->http_port, request);
}

static void test_get_metrics(void **state)
{
    struct fixture *fx = *state;
    const char *r = http(fx, "GET /metrics HTTP/1.0\r\n\r\n");

    assert_true(strncmp(r, "HTTP/1.0 200 OK\r\n", 17) == 0);
    assert_non_null(strstr(r, "Content-Type: text/plain; version=0.0.4"));
    assert_non_null(strstr(r, "\n# TYPE muster_jobs gauge\nmuster_jobs 0\n"));
    assert_non_null(strstr(r, "\nmuster_connections 0\n"));
    assert_non_null(strstr(r, "\nmuster_heartbeat_lateness_seconds 0\n"));
    assert_non_null(strstr(r, "# TYPE muster_restarts_total counter\n"));
    assert_non_null(strstr(r, "\nmuster_http_requests_total 1\n"));
    /* within RDZV_HTTP_CACHE_MS: the same snapshot (a request rate cannot make the
     * loop rebuild the document for each) */
    r = http(fx, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_non_null(strstr(r, "\nmuster_http_requests_total 1\n"));
    usleep((RDZV_HTTP_CACHE_MS + 50) * 1000);
    r = http(fx, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_non_null(strstr(r, "\nmuster_http_requests_total 3\n"));
    assert_non_null(strstr(r, "\nmuster_preauth_connections_limit 4096\n"));
    assert_non_null(strstr(r, "\nmuster_http_connections_limit 256\n"));
}

static void test_header(void **state)
{
    const char *h =
        "GET / HTTP/1.0\r\nHost: a\r\nauthorization:  Bearer xyz \r\n\r\nX-After: 1\r\n";
    char v[16];

    (void)state;
    assert_int_equal(rdzv_http_header(h, strlen(h), "Authorization", v, sizeof(v)), 0);
    assert_string_equal(v, "Bearer xyz");
    assert_int_equal(rdzv_http_header(h, strlen(h), "Host", v, sizeof(v)), 0);
    assert_string_equal(v, "a");
    assert_int_equal(rdzv_http_header(h, strlen(h), "X-After", v, sizeof(v)), -ENOENT);
    assert_int_equal(rdzv_http_header(h, strlen(h), "Authorization", v, 5), -EMSGSIZE);
    assert_int_equal(rdzv_http_header(h, 20, "Host", v, sizeof(v)), -ENOENT); /* incomplete */
}

/* Refusals are counted by kind, every series present from the start. */
static void test_metrics_refusals(void **state)
{
    struct fixture *fx = *state;
    const char *r;

    send_to(fx, rdzv_server_port(fx->srv), "GET /metrics HTTP/1.0\r\n\r\n"); /* not TLS */
    r = http(fx, "GET /metrics HTTP/1.0\r\n\r\n");
    assert_non_null(strstr(r, "# TYPE muster_limit_hits_total counter\n"));
    assert_non_null(strstr(r, "\nmuster_limit_hits_total{limit=\"connections\"} 0\n"));
    assert_non_null(strstr(r, "\nmuster_limit_hits_total{limit=\"handshake_timeout\"} 0\n"));
    assert_non_null(strstr(r, "\nmuster_limit_hits_total{limit=\"idle_timeout\"} 0\n"));
    assert_non_null(strstr(r, "\nmuster_limit_hits_total{limit=\"frame_size\"} 0\n"));
    assert_non_null(strstr(r, "\nmuster_limit_hits_total{limit=\"kv_quota\"} 0\n"));
    assert_non_null(strstr(r, "\nmuster_limit_hits_total{limit=\"send_queue\"} 0\n"));
    assert_non_null(strstr(r, "\nmuster_limit_hits_total{limit=\"connections_per_source\"} 0\n"));
    assert_non_null(strstr(r, "\nmuster_limit_hits_total{limit=\"jobs\"} 0\n"));
    assert_non_null(strstr(r, "\nmuster_limit_hits_total{limit=\"job_workers\"} 0\n"));
    assert_non_null(strstr(r, "\nmuster_limit_hits_total{limit=\"kv_total\"} 0\n"));
    assert_non_null(strstr(r, "\nmuster_kv_bytes 0\n"));
    assert_non_null(strstr(r, "\nmuster_kv_bytes_limit 1073741824\n"));
    assert_non_null(strstr(r, "\nmuster_jobs_limit 4096\n"));
    assert_non_null(strstr(r, "\nmuster_auth_failures_total{reason=\"job_scope\"} 0\n"));
    assert_non_null(strstr(r, "\nmuster_auth_failures_total{reason=\"tls_handshake\"} 1\n"));
    assert_non_null(strstr(r, "\nmuster_protocol_errors_total{reason=\"protocol\"} 0\n"));
}

static void test_other_paths(void **state)
{
    struct fixture *fx = *state;
    const char *r;

    rdzv_server_set_http_public_status(fx->srv, 1);
    r = http(fx, "GET /status HTTP/1.0\r\n\r\n");
    assert_true(strncmp(r, "HTTP/1.0 200 OK\r\n", 17) == 0);
    assert_non_null(strstr(r, "application/json"));
    assert_non_null(strstr(r, "\"jobs\":[]"));
    assert_non_null(strstr(r, "\"time_ms\":"));
    r = http(fx, "GET / HTTP/1.0\r\n\r\n");
    assert_non_null(strstr(r, "<script src=\"/app.js\" defer></script>"));
    r = http(fx, "HEAD / HTTP/1.0\r\n\r\n");
    assert_true(strncmp(r, "HTTP/1.0 200 OK\r\n", 17) == 0);
    assert_null(strstr(r, "<script"));
    assert_true(strncmp(http(fx, "POST /metrics HTTP/1.0\r\n\r\n"), "HTTP/1.0 405", 12) == 0);
    assert_true(strncmp(http(fx, "GET /nope HTTP/1.0\r\n\r\n"), "HTTP/1.0 404", 12) == 0);
    assert_true(strncmp(http(fx, "hello\r\n\r\n"), "HTTP/1.0 400", 12) == 0);
}

/* The dashboard's files: public, each with its type, the CSP, nosniff and no caching. */
static void test_dashboard_assets(void **state)
{
    struct fixture *fx = *state;
    static const char *const paths[][2] = {
        {"/", "text/html; charset=utf-8"},
        {"/index.html", "text/html; charset=utf-8"},
        {"/app.js", "text/javascript; charset=utf-8"},
        {"/style.css", "text/css; charset=utf-8"},
        {"/favicon.svg", "image/svg+xml"},
    };
    char req[128], want[128];
    const char *r;

    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\n\r\n", paths[i][0]);
        r = http(fx, req);
        assert_true(strncmp(r, "HTTP/1.0 200 OK\r\n", 17) == 0);
        snprintf(want, sizeof(want), "\r\nContent-Type: %s\r\n", paths[i][1]);
        assert_non_null(strstr(r, want));
        assert_non_null(strstr(r, "\r\nContent-Security-Policy: " RDZV_HTTP_CSP "\r\n"));
        assert_non_null(strstr(r, "\r\nX-Content-Type-Options: nosniff\r\n"));
        assert_non_null(strstr(r, "\r\nCache-Control: no-store\r\n"));
    }
    assert_null(strstr(RDZV_HTTP_CSP, "unsafe"));
    assert_non_null(strstr(RDZV_HTTP_CSP, "default-src 'self'"));
    r = http(fx, "GET /app.js HTTP/1.0\r\n\r\n");
    assert_non_null(strstr(r, "fetch('/status'"));
    assert_true(strncmp(http(fx, "GET /app.js/ HTTP/1.0\r\n\r\n"), "HTTP/1.0 404", 12) == 0);
    assert_true(strncmp(http(fx, "GET /../app.js HTTP/1.0\r\n\r\n"), "HTTP/1.0 404", 12) == 0);
}

/* /status shows hosts and addresses: only with the observer credential (or the server's
 * secret) in "Authorization: Bearer", unless made public; the dashboard's files are public. */
static void test_status_auth(void **state)
{
    struct fixture *fx = *state;
    unsigned char master[RDZV_KEY_LEN];
    struct rdzv_cred obs, job;
    char text[RDZV_CRED_TEXT_MAX + 1], req[512];
    const char *r;

    r = http(fx, "GET /status HTTP/1.0\r\n\r\n");
    assert_true(strncmp(r, "HTTP/1.0 401 Unauthorized\r\n", 27) == 0);
    assert_non_null(strstr(r, "muster token --read-only"));
    assert_null(strstr(r, "\"jobs\""));
    assert_true(strncmp(http(fx, "GET / HTTP/1.0\r\n\r\n"), "HTTP/1.0 200", 12) == 0);
    assert_true(strncmp(http(fx, "GET /app.js HTTP/1.0\r\n\r\n"), "HTTP/1.0 200", 12) == 0);
    assert_true(strncmp(http(fx, "GET /metrics HTTP/1.0\r\n\r\n"), "HTTP/1.0 200", 12) == 0);
    rdzv_cred_master("http-test-token", master);
    assert_int_equal(rdzv_cred_derive(master, RDZV_CRED_OBSERVER, NULL, &obs), 0);
    assert_int_equal(rdzv_cred_format(&obs, text, sizeof(text)), 0);
    snprintf(req, sizeof(req), "GET /status HTTP/1.0\r\nAuthorization: Bearer %s\r\n\r\n", text);
    r = http(fx, req);
    assert_true(strncmp(r, "HTTP/1.0 200 OK\r\n", 17) == 0);
    assert_non_null(strstr(r, "\"jobs\":[]"));
    r = http(fx, "GET /status HTTP/1.0\r\nAuthorization: Bearer http-test-token\r\n\r\n");
    assert_true(strncmp(r, "HTTP/1.0 200 OK\r\n", 17) == 0);
    /* a job credential is not an observer's; a wrong secret neither */
    assert_int_equal(rdzv_cred_derive(master, RDZV_CRED_JOB, "j", &job), 0);
    assert_int_equal(rdzv_cred_format(&job, text, sizeof(text)), 0);
    snprintf(req, sizeof(req), "GET /status HTTP/1.0\r\nAuthorization: Bearer %s\r\n\r\n", text);
    assert_true(strncmp(http(fx, req), "HTTP/1.0 401", 12) == 0);
    r = http(fx, "GET /status HTTP/1.0\r\nAuthorization: Bearer other-token\r\n\r\n");
    assert_true(strncmp(r, "HTTP/1.0 401", 12) == 0);
    assert_true(fx->srv->stats.events[SRV_EV_HTTP_STATUS_AUTH] == 3); /* / is not counted */
    rdzv_server_set_http_public_status(fx->srv, 1);
    assert_true(strncmp(http(fx, "GET /status HTTP/1.0\r\n\r\n"), "HTTP/1.0 200", 12) == 0);
}

static void open_connect_cb(uv_connect_t *req, int status)
{
    struct client *c = req->data;

    assert_int_equal(status, 0);
    assert_int_equal(uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb), 0);
}

/* SIGTERM to `muster server` with an HTTP connection open: closing the server closes the HTTP
 * listener and its connections together; the listener's close callback freed the port's state
 * while each connection's close callback still used it (libuv runs close callbacks newest
 * first). ASan reported a heap use-after-free here; the test also runs in the sanitize build.
 * Two connections: one that sent half a request, one that sent nothing. */
static void test_close_with_open_connection(void **state)
{
    struct fixture *fx = *state;
    static struct client c[2];
    struct sockaddr_in sin;
    uv_buf_t half = uv_buf_init("GET /metr", 9);

    memset(c, 0, sizeof(c));
    assert_int_equal(uv_ip4_addr("127.0.0.1", (int)fx->http_port, &sin), 0);
    for (int i = 0; i < 2; i++) {
        c[i].tcp.data = c[i].connect.data = &c[i];
        assert_int_equal(uv_tcp_init(&fx->loop, &c[i].tcp), 0);
        assert_int_equal(
            uv_tcp_connect(&c[i].connect, &c[i].tcp, (struct sockaddr *)&sin, open_connect_cb), 0);
    }
    HARNESS_RUN_UNTIL(&fx->h, fx->srv->handles >= 5); /* until the server accepted both */
    assert_int_equal(uv_write(&c[0].write, (uv_stream_t *)&c[0].tcp, &half, 1, NULL), 0);
    for (int i = 0; i < 20; i++)
        uv_run(&fx->loop, UV_RUN_NOWAIT); /* the server reads the half request */
    /* listener, fair-reading idle handle, HTTP listener, two HTTP connections */
    assert_int_equal(fx->srv->handles, 5);
    rdzv_server_close(fx->srv, NULL, NULL);
    fx->srv = NULL;
    HARNESS_RUN_UNTIL(&fx->h, c[0].closed && c[1].closed);
    assert_true(c[0].closed && c[1].closed); /* the server closed them */
}

/* Over http_max_connections the oldest idle connection goes for the new one: silent
 * connections cannot keep the port from answering. */
static void test_connection_cap(void **state)
{
    struct fixture *fx = *state;
    static struct client c[8];
    struct rdzv_limits l = {.http_max_connections = 4};
    struct sockaddr_in sin;
    const char *r;

    rdzv_server_set_limits(fx->srv, &l);
    memset(c, 0, sizeof(c));
    assert_int_equal(uv_ip4_addr("127.0.0.1", (int)fx->http_port, &sin), 0);
    for (int i = 0; i < 8; i++) {
        c[i].tcp.data = c[i].connect.data = &c[i];
        assert_int_equal(uv_tcp_init(&fx->loop, &c[i].tcp), 0);
        assert_int_equal(
            uv_tcp_connect(&c[i].connect, &c[i].tcp, (struct sockaddr *)&sin, open_connect_cb), 0);
    }
    HARNESS_RUN_UNTIL(&fx->h, fx->srv->stats.events[SRV_EV_HTTP_CONNECTIONS] >= 4);
    HARNESS_RUN_UNTIL(&fx->h, c[0].closed && c[3].closed); /* the oldest went */
    r = http(fx, "GET /metrics HTTP/1.0\r\n\r\n");
    assert_true(strncmp(r, "HTTP/1.0 200 OK\r\n", 17) == 0);
    assert_non_null(strstr(r, "\nmuster_limit_hits_total{limit=\"http_connections\"} 5\n"));
    assert_false(c[7].closed); /* the newest silent one is still open */
    for (int i = 0; i < 8; i++)
        if (!c[i].closed)
            uv_close((uv_handle_t *)&c[i].tcp, closed_cb);
    HARNESS_RUN_UNTIL(&fx->h, c[7].closed);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_query),
        cmocka_unit_test(test_header),
        cmocka_unit_test_setup_teardown(test_status_auth, setup, teardown),
        cmocka_unit_test_setup_teardown(test_connection_cap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_get_metrics, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_paths, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dashboard_assets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metrics_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_with_open_connection, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
