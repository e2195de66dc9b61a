/* rdzv_conn over TLS (rendezvous/tls.c + conn.c) on loopback TCP pairs and a private loop:
 * PSK handshake and frames both ways, a wrong token, plaintext and truncated handshakes, 60 KiB
 * frames (several TLS records: partial mbedtls_ssl_write), and certificate mode with a CA made
 * at run time by mbedTLS (good, other CA, expired, wrong host name). Nothing sleeps: the loop
 * runs until a predicate over callback counters holds, under a watchdog timer. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/pk.h>
#include <mbedtls/x509_crt.h>
#include <uv.h>

#include "harness.h"

#include "conn.h"
#include "cred.h"
#include "tls.h"

#define WATCHDOG_MS 10000
#define TOKEN "s3cret-token-value"

struct side {
    struct rdzv_conn conn;
    struct fixture *fx;
    int msgs, err, errors, closed, started;
    struct rdzv_msg last;
    char reason[160];
};

struct fixture {
    uv_loop_t loop;
    struct harness h; /* watchdog, run_until */
    struct side cli, srv;
    struct rdzv_tls *tc, *ts;
    int raw;  /* the other end of a side left plaintext, or -1 */
    int echo; /* the server side echoes every message back */
};

/* pred(fx) holds, or the watchdog fails the test (harness.h) */
#define run_until(fx, pred) HARNESS_RUN_UNTIL(&(fx)->h, pred(fx))

static void closed_cb(struct rdzv_conn *conn)
{
    struct side *s = conn->data;

    s->closed = 1;
}

static void msg_cb(struct rdzv_conn *conn, const struct rdzv_msg *m)
{
    struct side *s = conn->data;

    s->msgs++;
    s->last = *m;
    if (s == &s->fx->srv && s->fx->echo)
        assert_int_equal(rdzv_conn_send(conn, m), 0);
}

static void error_cb(struct rdzv_conn *conn, int err)
{
    struct side *s = conn->data;

    s->errors++;
    s->err = err;
    snprintf(s->reason, sizeof(s->reason), "%s", rdzv_conn_tls_error(conn));
    rdzv_conn_close(conn, 1, closed_cb);
}

/* A connected loopback TCP pair: fds[0] the client end, fds[1] the server end. */
static void tcp_pair(int fds[2])
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    int l = socket(AF_INET, SOCK_STREAM, 0);

    assert_true(l >= 0);
    assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(l, 1), 0);
    assert_int_equal(getsockname(l, (struct sockaddr *)&a, &alen), 0);
    fds[0] = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(connect(fds[0], (struct sockaddr *)&a, sizeof(a)), 0);
    fds[1] = accept(l, NULL, NULL);
    assert_true(fds[1] >= 0);
    close(l);
}

static void side_open(struct fixture *fx, struct side *s, int fd)
{
    s->fx = fx;
    assert_int_equal(rdzv_conn_init(&fx->loop, &s->conn, msg_cb, error_cb, s), 0);
    assert_int_equal(uv_tcp_open(&s->conn.tcp, fd), 0);
    s->started = 1;
}

static int setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof(*fx));

    assert_non_null(fx);
    assert_int_equal(uv_loop_init(&fx->loop), 0);
    harness_init(&fx->h, &fx->loop, WATCHDOG_MS);
    fx->raw = -1;
    *state = fx;
    return 0;
}

static int all_closed(struct fixture *fx)
{
    return (!fx->cli.started || fx->cli.closed) && (!fx->srv.started || fx->srv.closed);
}

static int teardown(void **state)
{
    struct fixture *fx = *state;

    if (fx->cli.started && !fx->cli.conn.closing)
        rdzv_conn_close(&fx->cli.conn, 0, closed_cb);
    if (fx->srv.started && !fx->srv.conn.closing)
        rdzv_conn_close(&fx->srv.conn, 0, closed_cb);
    run_until(fx, all_closed);
    if (fx->raw >= 0)
        close(fx->raw);
    harness_close(&fx->h);
    uv_run(&fx->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&fx->loop), 0);
    rdzv_tls_free(fx->tc);
    rdzv_tls_free(fx->ts);
    free(fx);
    return 0;
}

static void psk(struct fixture *fx, const char *ctok, const char *stok)
{
    struct rdzv_tls_opts co = {.token = ctok}, so = {.token = stok};
    char err[256];

    assert_int_equal(rdzv_tls_new(&co, 0, &fx->tc, err, sizeof(err)), 0);
    assert_int_equal(rdzv_tls_new(&so, 1, &fx->ts, err, sizeof(err)), 0);
}

/* Both ends TLS over one loopback pair. */
static void start_both(struct fixture *fx)
{
    int fds[2];

    tcp_pair(fds);
    side_open(fx, &fx->cli, fds[0]);
    side_open(fx, &fx->srv, fds[1]);
    assert_int_equal(rdzv_conn_start_tls(&fx->srv.conn, fx->ts, 1), 0);
    assert_int_equal(rdzv_conn_start_tls(&fx->cli.conn, fx->tc, 0), 0);
}

static void hello(struct rdzv_msg *m, const char *token)
{
    memset(m, 0, sizeof(*m));
    m->type = RDZV_MSG_HELLO;
    m->u.hello.version = RDZV_PROTO_VERSION;
    snprintf(m->u.hello.token, sizeof(m->u.hello.token), "%s", token);
}

static int both_msg(struct fixture *fx)
{
    return fx->cli.msgs >= 1 && fx->srv.msgs >= 1;
}

static int both_err(struct fixture *fx)
{
    return fx->cli.errors && fx->srv.errors;
}

static int srv_err(struct fixture *fx)
{
    return fx->srv.errors;
}

static int cli_err(struct fixture *fx)
{
    return fx->cli.errors;
}

/* HELLO sent before the handshake finished is queued, then crosses; WELCOME comes back. */
/* The client sends HELLO with token; the server echoes it back; runs until both got a message. */
static void echo_hello(struct fixture *fx, const char *token)
{
    struct rdzv_msg m;

    hello(&m, token);
    assert_int_equal(rdzv_conn_send(&fx->cli.conn, &m), 0);
    fx->echo = 1;
    run_until(fx, both_msg);
}

static void test_psk_frames(void **state)
{
    struct fixture *fx = *state;

    psk(fx, TOKEN, TOKEN);
    start_both(fx);
    assert_false(rdzv_conn_handshake_done(&fx->cli.conn));
    echo_hello(fx, TOKEN);
    assert_int_equal(fx->srv.last.type, RDZV_MSG_HELLO);
    assert_string_equal(fx->srv.last.u.hello.token, TOKEN);
    assert_int_equal(fx->cli.last.type, RDZV_MSG_HELLO);
    assert_true(rdzv_conn_handshake_done(&fx->cli.conn));
    assert_true(rdzv_conn_handshake_done(&fx->srv.conn));
    assert_string_equal(rdzv_conn_tls_error(&fx->cli.conn), "");
    assert_int_equal(fx->cli.errors + fx->srv.errors, 0);
}

static void test_wrong_token(void **state)
{
    struct fixture *fx = *state;

    psk(fx, "not-the-token", TOKEN);
    start_both(fx);
    run_until(fx, both_err);
    assert_int_equal(fx->cli.err, -EACCES);
    assert_int_equal(fx->srv.err, -EACCES);
    assert_int_equal(fx->cli.msgs + fx->srv.msgs, 0);
    assert_true(fx->cli.reason[0] != '\0' && fx->srv.reason[0] != '\0');
    assert_null(strstr(fx->srv.reason, TOKEN));
    assert_null(strstr(fx->cli.reason, "not-the-token"));
}

/* A plaintext muster client talking to a TLS endpoint. */
static void test_plaintext_hello(void **state)
{
    struct fixture *fx = *state;
    uint8_t buf[512];
    struct rdzv_msg m;
    size_t len;
    int fds[2];

    psk(fx, TOKEN, TOKEN);
    tcp_pair(fds);
    fx->raw = fds[0];
    side_open(fx, &fx->srv, fds[1]);
    assert_int_equal(rdzv_conn_start_tls(&fx->srv.conn, fx->ts, 1), 0);
    hello(&m, TOKEN);
    assert_int_equal(rdzv_msg_encode(&m, buf, sizeof(buf), &len), 0);
    assert_int_equal(write(fx->raw, buf, len), (ssize_t)len);
    run_until(fx, srv_err);
    assert_int_equal(fx->srv.err, -EPROTO);
    assert_int_equal(fx->srv.msgs, 0);
    assert_true(fx->srv.reason[0] != '\0');
}

/* The client's first record header, then the peer hangs up: each side gets a clean -EPROTO. */
static void test_truncated_handshake(void **state)
{
    struct fixture *fx = *state;
    static const uint8_t partial[] = {0x16, 0x03, 0x01, 0x00, 0x80, 0x01, 0x00};
    int fds[2];

    psk(fx, TOKEN, TOKEN);
    tcp_pair(fds);
    side_open(fx, &fx->srv, fds[1]);
    assert_int_equal(rdzv_conn_start_tls(&fx->srv.conn, fx->ts, 1), 0);
    assert_int_equal(write(fds[0], partial, sizeof(partial)), (ssize_t)sizeof(partial));
    close(fds[0]);
    run_until(fx, srv_err);
    assert_int_equal(fx->srv.err, -EPROTO);
    assert_non_null(strstr(fx->srv.reason, "closed"));
}

static void test_truncated_server(void **state)
{
    struct fixture *fx = *state;
    int fds[2];

    psk(fx, TOKEN, TOKEN);
    tcp_pair(fds);
    side_open(fx, &fx->cli, fds[0]);
    assert_int_equal(rdzv_conn_start_tls(&fx->cli.conn, fx->tc, 0), 0);
    shutdown(fds[1], SHUT_WR); /* the "server" goes away without a word */
    fx->raw = fds[1];
    run_until(fx, cli_err);
    assert_int_equal(fx->cli.err, -EPROTO);
    assert_non_null(strstr(fx->cli.reason, "handshake"));
}

static int echoed(struct fixture *fx)
{
    return fx->cli.msgs >= 20;
}

/* 60 KiB KV values span four TLS records each: mbedtls_ssl_write returns partial counts. */
static void test_large_frames(void **state)
{
    struct fixture *fx = *state;
    static struct rdzv_msg m;
    int i;

    psk(fx, TOKEN, TOKEN);
    start_both(fx);
    fx->echo = 1;
    memset(&m, 0, sizeof(m));
    m.type = RDZV_MSG_KV_PUT;
    snprintf(m.u.kv.key, sizeof(m.u.kv.key), "big");
    m.u.kv.value_len = RDZV_VALUE_MAX;
    for (i = 0; i < 20; i++) {
        m.u.kv.req_id = (uint32_t)i;
        for (uint32_t j = 0; j < m.u.kv.value_len; j++)
            m.u.kv.value[j] = (uint8_t)(j * 31 + (uint32_t)i);
        assert_int_equal(rdzv_conn_send(&fx->cli.conn, &m), 0);
    }
    run_until(fx, echoed);
    assert_int_equal(fx->cli.last.type, RDZV_MSG_KV_PUT);
    assert_int_equal(fx->cli.last.u.kv.req_id, 19);
    assert_int_equal(fx->cli.last.u.kv.value_len, RDZV_VALUE_MAX);
    assert_memory_equal(fx->cli.last.u.kv.value, m.u.kv.value, RDZV_VALUE_MAX);
    assert_int_equal(fx->srv.msgs, 20);
    assert_true(fx->cli.conn.bytes_in > 20u * RDZV_VALUE_MAX);
}

/* One frame there and back; returns when the echo is in. */
static int echo_in(struct fixture *fx)
{
    return fx->cli.msgs >= fx->srv.msgs && fx->srv.msgs > 0 && fx->cli.last.u.kv.req_id == 77;
}

static void echo_one(struct fixture *fx, uint32_t len, uint8_t seed)
{
    static struct rdzv_msg m;
    int before = fx->cli.msgs;

    memset(&m, 0, sizeof(m));
    m.type = RDZV_MSG_KV_PUT;
    snprintf(m.u.kv.key, sizeof(m.u.kv.key), "k%u", len);
    m.u.kv.value_len = len;
    for (uint32_t j = 0; j < len; j++)
        m.u.kv.value[j] = (uint8_t)(j * 7 + seed);
    m.u.kv.req_id = 77;
    fx->cli.last.u.kv.req_id = 0;
    assert_int_equal(rdzv_conn_send(&fx->cli.conn, &m), 0);
    run_until(fx, echo_in);
    assert_int_equal(fx->cli.msgs, before + 1);
    assert_int_equal(fx->cli.last.u.kv.value_len, len);
    assert_memory_equal(fx->cli.last.u.kv.value, m.u.kv.value, len);
}

/* Between records the pages inside mbedTLS's record buffers go back to the kernel (conn.c
 * tls_trim): large and small records alternating in both directions still decrypt and
 * authenticate (the sequence counters at the start of the buffers survive). */
static void test_trimmed_buffers(void **state)
{
    struct fixture *fx = *state;

    psk(fx, TOKEN, TOKEN);
    start_both(fx);
    fx->echo = 1;
    echo_one(fx, 10, 1);
    echo_one(fx, RDZV_VALUE_MAX, 2);
    echo_one(fx, 10, 3);
    echo_one(fx, 5000, 4);
    echo_one(fx, RDZV_VALUE_MAX, 5);
    echo_one(fx, 1, 6);
    assert_int_equal(fx->cli.errors + fx->srv.errors, 0);
}

static void tls_pair(struct fixture *fx, struct rdzv_tls_opts *co, struct rdzv_tls_opts *so)
{
    char err[256];

    assert_int_equal(rdzv_tls_new(co, 0, &fx->tc, err, sizeof(err)), 0);
    assert_int_equal(rdzv_tls_new(so, 1, &fx->ts, err, sizeof(err)), 0);
}

/* Ends set up from co and so fail the handshake on both sides: no message passes. */
static void expect_no_session(struct fixture *fx, struct rdzv_tls_opts *co,
                              struct rdzv_tls_opts *so)
{
    tls_pair(fx, co, so);
    start_both(fx);
    run_until(fx, both_err);
    assert_int_equal(fx->cli.msgs + fx->srv.msgs, 0);
}

/* A default client gets forward secrecy (ECDHE-PSK) from a default server. */
static void test_suite_default_ecdhe(void **state)
{
    struct fixture *fx = *state;
    struct rdzv_tls_opts co = {.token = TOKEN}, so = {.token = TOKEN};

    tls_pair(fx, &co, &so);
    start_both(fx);
    fx->echo = 1;
    echo_one(fx, 10, 1);
    assert_non_null(strstr(rdzv_conn_tls_suite(&fx->cli.conn), "TLS-ECDHE-PSK-WITH-"));
    assert_string_equal(rdzv_conn_tls_suite(&fx->cli.conn), rdzv_conn_tls_suite(&fx->srv.conn));
}

/* forward_secrecy=0: plain PSK, the same authentication, no key exchange. */
static void test_suite_plain_psk(void **state)
{
    struct fixture *fx = *state;
    struct rdzv_tls_opts co = {.token = TOKEN, .no_forward_secrecy = 1}, so = {.token = TOKEN};

    tls_pair(fx, &co, &so);
    start_both(fx);
    fx->echo = 1;
    echo_one(fx, 10, 1);
    assert_non_null(strstr(rdzv_conn_tls_suite(&fx->srv.conn), "TLS-PSK-WITH-"));
}

/* ...and still needs the key: a plain-PSK client with the wrong token is refused. */
static void test_suite_plain_psk_wrong_token(void **state)
{
    struct fixture *fx = *state;
    struct rdzv_tls_opts co = {.token = "not-the-token", .no_forward_secrecy = 1};
    struct rdzv_tls_opts so = {.token = TOKEN};

    expect_no_session(fx, &co, &so);
}

/* A server that requires forward secrecy refuses a plain-PSK-only client. */
static void test_suite_fs_required(void **state)
{
    struct fixture *fx = *state;
    struct rdzv_tls_opts co = {.token = TOKEN, .no_forward_secrecy = 1};
    struct rdzv_tls_opts so = {.token = TOKEN, .require_forward_secrecy = 1};

    expect_no_session(fx, &co, &so);
    assert_true(fx->srv.reason[0] != '\0');
}

static void test_opts(void **state)
{
    struct rdzv_tls_opts o = {0};
    struct rdzv_tls *t = NULL;
    char err[256];

    (void)state;
    assert_int_equal(rdzv_tls_new(&o, 0, &t, err, sizeof(err)), -EINVAL);
    o.token = "";
    assert_int_equal(rdzv_tls_new(&o, 1, &t, err, sizeof(err)), -EINVAL);
    o.cert_file = "/nonexistent/cert.pem";
    assert_int_equal(rdzv_tls_new(&o, 1, &t, err, sizeof(err)), -EINVAL); /* half a set */
    o.key_file = o.ca_file = "/nonexistent/x.pem";
    assert_int_equal(rdzv_tls_new(&o, 1, &t, err, sizeof(err)), -ENOENT);
    assert_null(t);
    rdzv_tls_free(NULL);
}

/* --- certificate mode: a throw-away PKI made by mbedTLS at run time ------------------------ */

static char pki[64]; /* mkdtemp directory: ca1, ca2, srv, srv_old (expired), cli, cli2 (CA 2) */

static const char *pem(const char *name, const char *kind)
{
    static char paths[8][128];
    static int next;
    char *p = paths[next++ % 8];

    snprintf(p, 128, "%s/%s.%s.pem", pki, name, kind);
    return p;
}

static void write_file(const char *path, const unsigned char *buf)
{
    FILE *f = fopen(path, "w");

    assert_non_null(f);
    assert_int_equal(fputs((const char *)buf, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

static void gen_key(mbedtls_pk_context *k, mbedtls_ctr_drbg_context *drbg, const char *name)
{
    unsigned char buf[2048];

    mbedtls_pk_init(k);
    assert_int_equal(mbedtls_pk_setup(k, mbedtls_pk_info_from_type(MBEDTLS_PK_ECKEY)), 0);
    assert_int_equal(mbedtls_ecp_gen_key(MBEDTLS_ECP_DP_SECP256R1, mbedtls_pk_ec(*k),
                                         mbedtls_ctr_drbg_random, drbg),
                     0);
    assert_int_equal(mbedtls_pk_write_key_pem(k, buf, sizeof(buf)), 0);
    write_file(pem(name, "key"), buf);
}

struct crt_spec {
    const char *name, *subject, *issuer, *not_before, *not_after;
    mbedtls_pk_context *key, *issuer_key;
    int is_ca, serial;
};

static void gen_crt(const struct crt_spec *c, mbedtls_ctr_drbg_context *drbg)
{
    mbedtls_x509write_cert w;
    unsigned char buf[4096];
    mbedtls_mpi serial;

    mbedtls_x509write_crt_init(&w);
    mbedtls_mpi_init(&serial);
    mbedtls_x509write_crt_set_version(&w, MBEDTLS_X509_CRT_VERSION_3);
    mbedtls_x509write_crt_set_md_alg(&w, MBEDTLS_MD_SHA256);
    mbedtls_x509write_crt_set_subject_key(&w, c->key);
    mbedtls_x509write_crt_set_issuer_key(&w, c->issuer_key);
    assert_int_equal(mbedtls_x509write_crt_set_subject_name(&w, c->subject), 0);
    assert_int_equal(mbedtls_x509write_crt_set_issuer_name(&w, c->issuer), 0);
    assert_int_equal(mbedtls_mpi_lset(&serial, c->serial), 0);
    assert_int_equal(mbedtls_x509write_crt_set_serial(&w, &serial), 0);
    assert_int_equal(mbedtls_x509write_crt_set_validity(&w, c->not_before, c->not_after), 0);
    assert_int_equal(mbedtls_x509write_crt_set_basic_constraints(&w, c->is_ca, -1), 0);
    assert_int_equal(mbedtls_x509write_crt_pem(&w, buf, sizeof(buf), mbedtls_ctr_drbg_random, drbg),
                     0);
    write_file(pem(c->name, "crt"), buf);
    mbedtls_mpi_free(&serial);
    mbedtls_x509write_crt_free(&w);
}

static int pki_setup(void **state)
{
    mbedtls_entropy_context ent;
    mbedtls_ctr_drbg_context drbg;
    mbedtls_pk_context ca1, ca2, srv, cli, cli2;
    const char *now = "20200101000000", *later = "20991231235959";

    (void)state;
    snprintf(pki, sizeof(pki), "/tmp/muster-tls-XXXXXX");
    assert_non_null(mkdtemp(pki));
    mbedtls_entropy_init(&ent);
    mbedtls_ctr_drbg_init(&drbg);
    assert_int_equal(mbedtls_ctr_drbg_seed(&drbg, mbedtls_entropy_func, &ent, NULL, 0), 0);
    gen_key(&ca1, &drbg, "ca1");
    gen_key(&ca2, &drbg, "ca2");
    gen_key(&srv, &drbg, "srv");
    gen_key(&cli, &drbg, "cli");
    gen_key(&cli2, &drbg, "cli2");
    const struct crt_spec specs[] = {
        {"ca1", "CN=muster test CA 1", "CN=muster test CA 1", now, later, &ca1, &ca1, 1, 1},
        {"ca2", "CN=muster test CA 2", "CN=muster test CA 2", now, later, &ca2, &ca2, 1, 2},
        {"srv", "CN=localhost", "CN=muster test CA 1", now, later, &srv, &ca1, 0, 3},
        {"srv_old", "CN=localhost", "CN=muster test CA 1", "20000101000000", "20010101000000", &srv,
         &ca1, 0, 4},
        {"cli", "CN=agent", "CN=muster test CA 1", now, later, &cli, &ca1, 0, 5},
        {"cli2", "CN=agent", "CN=muster test CA 2", now, later, &cli2, &ca2, 0, 6},
    };
    for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++)
        gen_crt(&specs[i], &drbg);
    assert_int_equal(symlink("srv.key.pem", pem("srv_old", "key")), 0);
    mbedtls_pk_free(&ca1);
    mbedtls_pk_free(&ca2);
    mbedtls_pk_free(&srv);
    mbedtls_pk_free(&cli);
    mbedtls_pk_free(&cli2);
    mbedtls_ctr_drbg_free(&drbg);
    mbedtls_entropy_free(&ent);
    return 0;
}

static int pki_teardown(void **state)
{
    static const char *names[] = {"ca1", "ca2", "srv", "srv_old", "cli", "cli2"};

    (void)state;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        unlink(pem(names[i], "key"));
        unlink(pem(names[i], "crt"));
    }
    return rmdir(pki);
}

/* Client cert `cli`, server cert `srv`, both trusting ca1, the client checking `name`. */
static void certs(struct fixture *fx, const char *cli, const char *srv, const char *name)
{
    struct rdzv_tls_opts co = {.cert_file = pem(cli, "crt"),
                               .key_file = pem(cli, "key"),
                               .ca_file = pem("ca1", "crt"),
                               .server_name = name};
    struct rdzv_tls_opts so = {
        .cert_file = pem(srv, "crt"), .key_file = pem(srv, "key"), .ca_file = pem("ca1", "crt")};
    char err[256];

    assert_int_equal(rdzv_tls_new(&co, 0, &fx->tc, err, sizeof(err)), 0);
    assert_int_equal(rdzv_tls_new(&so, 1, &fx->ts, err, sizeof(err)), 0);
}

static void test_cert_good(void **state)
{
    struct fixture *fx = *state;

    certs(fx, "cli", "srv", "localhost");
    start_both(fx);
    echo_hello(fx, "");
    assert_int_equal(fx->cli.last.type, RDZV_MSG_HELLO);
    assert_int_equal(fx->cli.errors + fx->srv.errors, 0);
}

/* Every refusal ends both sides with -EACCES: the refusing side from its own check, the other
 * from the alert. */
static void expect_refused(struct fixture *fx, const char *cli_reason, const char *srv_reason)
{
    start_both(fx);
    run_until(fx, both_err);
    assert_int_equal(fx->cli.err, -EACCES);
    assert_int_equal(fx->srv.err, -EACCES);
    assert_int_equal(fx->cli.msgs + fx->srv.msgs, 0);
    if (cli_reason != NULL)
        assert_non_null(strstr(fx->cli.reason, cli_reason));
    if (srv_reason != NULL)
        assert_non_null(strstr(fx->srv.reason, srv_reason));
}

static void test_cert_other_ca(void **state)
{
    certs(*state, "cli2", "srv", "localhost");
    expect_refused(*state, "alert", "not correctly signed");
}

static void test_cert_expired(void **state)
{
    certs(*state, "cli", "srv_old", "localhost");
    expect_refused(*state, "expired", "alert");
}

static void test_cert_wrong_host(void **state)
{
    certs(*state, "cli", "srv", "rdzv.example.org");
    expect_refused(*state, "CN", "alert");
}

/* A token client against a certificate server: no common suite, nothing is accepted. */
static void test_mode_mismatch(void **state)
{
    struct fixture *fx = *state;
    struct rdzv_tls_opts co = {.token = TOKEN};
    struct rdzv_tls_opts so = {.cert_file = pem("srv", "crt"),
                               .key_file = pem("srv", "key"),
                               .ca_file = pem("ca1", "crt")};

    expect_no_session(fx, &co, &so);
    assert_true(fx->cli.err == -EACCES || fx->cli.err == -EPROTO);
}

/* A plain-PSK client against a server that requires forward secrecy: no suite in common. The
 * client must say so, not that its token was refused ("fatal alert 40 ... did not accept our
 * token" sent users hunting for a token problem). */
static void test_fs_mismatch_not_token(void **state)
{
    struct fixture *fx = *state;
    struct rdzv_tls_opts co = {.token = TOKEN, .no_forward_secrecy = 1};
    struct rdzv_tls_opts so = {.token = TOKEN, .require_forward_secrecy = 1};

    expect_no_session(fx, &co, &so);
    assert_int_equal(fx->cli.err, -EPROTO);
    assert_non_null(strstr(fx->cli.reason, "no cipher suite in common"));
    assert_null(strstr(fx->cli.reason, "token"));
}

/* One exchange with credential text `cred` against a server keyed by `secret` (certificate
 * mode when with_cert): the server side must report the credential kind and scope. */
static void cred_exchange(struct fixture *fx, const char *cred, const char *secret, int with_cert,
                          enum rdzv_cred_kind kind, const char *scope)
{
    struct rdzv_tls_opts co = {.token = cred};
    struct rdzv_tls_opts so = {.token = secret};
    struct rdzv_cred got;
    char err[256];

    if (with_cert) {
        so.cert_file = pem("srv", "crt");
        so.key_file = pem("srv", "key");
        so.ca_file = pem("ca1", "crt");
    }
    assert_int_equal(rdzv_tls_new(&co, 0, &fx->tc, err, sizeof(err)), 0);
    assert_int_equal(rdzv_tls_new(&so, 1, &fx->ts, err, sizeof(err)), 0);
    start_both(fx);
    echo_hello(fx, "");
    assert_int_equal(rdzv_conn_cred(&fx->srv.conn, &got), 0);
    assert_int_equal(got.kind, kind);
    assert_string_equal(got.scope, scope);
}

static void minted(const char *secret, enum rdzv_cred_kind kind, const char *scope, char *text)
{
    unsigned char master[RDZV_KEY_LEN];
    struct rdzv_cred c;

    rdzv_cred_master(secret, master);
    assert_int_equal(rdzv_cred_derive(master, kind, scope, &c), 0);
    assert_int_equal(rdzv_cred_format(&c, text, RDZV_CRED_TEXT_MAX + 1), 0);
}

/* The PSK identity names the credential, and the server derives its key. */
static void test_psk_job_credential(void **state)
{
    char text[RDZV_CRED_TEXT_MAX + 1];

    minted(TOKEN, RDZV_CRED_JOB, "team-*", text);
    cred_exchange(*state, text, TOKEN, 0, RDZV_CRED_JOB, "team-*");
}

static void test_psk_server_secret(void **state)
{
    cred_exchange(*state, TOKEN, TOKEN, 0, RDZV_CRED_SERVER, "");
}

/* A job credential minted from another secret claims a scope it holds no key for. */
static void test_psk_forged_credential(void **state)
{
    struct fixture *fx = *state;
    char text[RDZV_CRED_TEXT_MAX + 1];
    struct rdzv_tls_opts so = {.token = TOKEN}, co = {.token = text};

    minted("some-other-secret", RDZV_CRED_JOB, "victim", text);
    expect_no_session(fx, &co, &so);
    assert_int_equal(fx->srv.err, -EACCES);
}

/* Certificate mode: workers hold a worker credential, not the node's certificate, and the
 * server speaks PSK for them; a client certificate counts as RDZV_CRED_CERT. */
static void test_cert_server_worker_psk(void **state)
{
    char text[RDZV_CRED_TEXT_MAX + 1];

    minted(TOKEN, RDZV_CRED_WORKER, "job42", text);
    cred_exchange(*state, text, TOKEN, 1, RDZV_CRED_WORKER, "job42");
}

static void test_cert_client_cred(void **state)
{
    struct fixture *fx = *state;
    struct rdzv_cred got;

    certs(fx, "cli", "srv", "localhost");
    start_both(fx);
    echo_hello(fx, "");
    assert_int_equal(rdzv_conn_cred(&fx->srv.conn, &got), 0);
    assert_int_equal(got.kind, RDZV_CRED_CERT);
}

/* every test but test_opts runs on the fixture */
#define TLS_TEST(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        TLS_TEST(test_psk_job_credential),
        TLS_TEST(test_psk_server_secret),
        TLS_TEST(test_psk_forged_credential),
        TLS_TEST(test_cert_server_worker_psk),
        TLS_TEST(test_cert_client_cred),
        cmocka_unit_test(test_opts),
        TLS_TEST(test_psk_frames),
        TLS_TEST(test_wrong_token),
        TLS_TEST(test_plaintext_hello),
        TLS_TEST(test_truncated_handshake),
        TLS_TEST(test_truncated_server),
        TLS_TEST(test_large_frames),
        TLS_TEST(test_trimmed_buffers),
        TLS_TEST(test_suite_default_ecdhe),
        TLS_TEST(test_suite_plain_psk),
        TLS_TEST(test_suite_plain_psk_wrong_token),
        TLS_TEST(test_suite_fs_required),
        TLS_TEST(test_cert_good),
        TLS_TEST(test_cert_other_ca),
        TLS_TEST(test_cert_expired),
        TLS_TEST(test_cert_wrong_host),
        TLS_TEST(test_mode_mismatch),
        TLS_TEST(test_fs_mismatch_not_token),
    };

    return cmocka_run_group_tests(tests, pki_setup, pki_teardown);
}
