/* agent/store.c: PyTorch's TCPStore protocol, 1.13 and 2.2+ dialects, over real loopback
 * sockets. The clients are plain non-blocking sockets in the test's own thread: a request is
 * sent whole (or one byte at a time), then the private loop runs until the reply's bytes are
 * readable or the connection is closed (harness watchdog). */
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "store.h"

enum { V1 = 1, V2 = 2 };

/* Query bytes of each dialect (store.c's table), indexed by a test-local name. */
enum q {
    Q_SET,
    Q_CAS,
    Q_GET,
    Q_ADD,
    Q_CHECK,
    Q_WAIT,
    Q_NUM,
    Q_WATCH,
    Q_DEL,
    Q_APPEND,
    Q_MGET,
    Q_MSET,
    Q_CANCEL,
    Q_PING
};
static const int q_v1[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, -1, -1, -1, -1, -1};
static const int q_v2[] = {1, 2, 3, 4, 5, 6, 7, -1, 8, 9, 10, 11, 12, 13};

struct fx {
    uv_loop_t loop;
    struct harness h;
    struct agent_store *s;
    int dialect;
    int closed;
};

struct msg {
    unsigned char b[1 << 16];
    size_t n;
};

static void put(struct msg *m, const void *p, size_t n)
{
    assert_true(m->n + n <= sizeof(m->b));
    memcpy(m->b + m->n, p, n);
    m->n += n;
}

static void put_u64(struct msg *m, uint64_t v)
{
    put(m, &v, sizeof(v));
}

static void put_str(struct msg *m, const char *s)
{
    put_u64(m, strlen(s));
    put(m, s, strlen(s));
}

static void put_q(struct fx *f, struct msg *m, enum q q)
{
    int b = f->dialect == V1 ? q_v1[q] : q_v2[q];
    unsigned char c = (unsigned char)b;
    assert_true(b >= 0);
    put(m, &c, 1);
}

static void start(struct fx *f, const struct agent_store_limits *lim)
{
    assert_int_equal(agent_store_new(&f->loop, "127.0.0.1", 0, lim, &f->s), 0);
    assert_true(agent_store_port(f->s) > 0);
}

static int setup(void **state, int dialect)
{
    struct fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    harness_init(&f->h, &f->loop, 5000);
    f->dialect = dialect;
    start(f, NULL);
    *state = f;
    return 0;
}

static int setup_v1(void **state)
{
    return setup(state, V1);
}

static int setup_v2(void **state)
{
    return setup(state, V2);
}

static void on_closed(void *data)
{
    ((struct fx *)data)->closed = 1;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    if (f->s != NULL) {
        agent_store_close(f->s, on_closed, f);
        HARNESS_RUN_UNTIL(&f->h, f->closed);
    }
    harness_close(&f->h);
    harness_loop_close(&f->loop);
    free(f);
    return 0;
}

/* A connected client; a 2.x one has sent VALIDATE. */
static int client(struct fx *f)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)agent_store_port(f->s))};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    /* loopback: the kernel completes the handshake from the backlog, before any accept */
    assert_true(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 || errno == EINPROGRESS);
    if (f->dialect == V2) {
        static const unsigned char validate[] = {0x00, 0xCE, 0xF7, 0x85, 0x3C};
        harness_run_for(&f->h, 1);
        assert_int_equal(send(fd, validate, sizeof(validate), MSG_NOSIGNAL), 5);
    }
    return fd;
}

static void sendm(int fd, const struct msg *m)
{
    size_t at = 0;
    while (at < m->n) {
        ssize_t n = send(fd, m->b + at, m->n - at, MSG_NOSIGNAL);
        if (n < 0 && errno == EAGAIN)
            continue; /* the loop-back buffer is large: only the big frames of a test get here */
        assert_true(n > 0);
        at += (size_t)n;
    }
}

static int readable(int fd, size_t n)
{
    unsigned char buf[1 << 16];
    ssize_t got = recv(fd, buf, n < sizeof(buf) ? n : sizeof(buf), MSG_PEEK | MSG_DONTWAIT);
    return got >= 0 && (size_t)got >= n;
}

static int peer_closed(int fd)
{
    unsigned char c;
    ssize_t got = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return got == 0 || (got < 0 && errno != EAGAIN);
}

static void recv_n(struct fx *f, int fd, void *out, size_t n)
{
    if (n == 0)
        return; /* a 0-byte recv() says EAGAIN when nothing is queued */
    HARNESS_RUN_UNTIL(&f->h, readable(fd, n));
    assert_int_equal(recv(fd, out, n, MSG_DONTWAIT), (ssize_t)n);
}

static int64_t recv_i64(struct fx *f, int fd)
{
    int64_t v;
    recv_n(f, fd, &v, sizeof(v));
    return v;
}

static unsigned char recv_u8(struct fx *f, int fd)
{
    unsigned char v;
    recv_n(f, fd, &v, 1);
    return v;
}

/* A vector reply compared with want. */
static void expect_vec(struct fx *f, int fd, const char *want)
{
    uint64_t len;
    char buf[256];
    recv_n(f, fd, &len, sizeof(len));
    assert_int_equal(len, strlen(want));
    assert_true(len < sizeof(buf));
    recv_n(f, fd, buf, (size_t)len);
    buf[len] = '\0';
    assert_string_equal(buf, want);
}

static void expect_nothing(struct fx *f, int fd)
{
    harness_run_for(&f->h, 20);
    assert_false(readable(fd, 1));
    assert_false(peer_closed(fd));
}

static void expect_closed(struct fx *f, int fd)
{
    HARNESS_RUN_UNTIL(&f->h, peer_closed(fd));
    close(fd);
}

static void q_set(struct fx *f, int fd, const char *k, const char *v)
{
    struct msg m = {.n = 0};
    put_q(f, &m, Q_SET);
    put_str(&m, k);
    put_str(&m, v);
    sendm(fd, &m);
}

static void q_key(struct fx *f, int fd, enum q q, const char *k)
{
    struct msg m = {.n = 0};
    put_q(f, &m, q);
    put_str(&m, k);
    sendm(fd, &m);
}

static void q_keys(struct fx *f, int fd, enum q q, int n, const char *const *keys)
{
    struct msg m = {.n = 0};
    put_q(f, &m, q);
    put_u64(&m, (uint64_t)n);
    for (int i = 0; i < n; i++)
        put_str(&m, keys[i]);
    sendm(fd, &m);
}

static void q_add(struct fx *f, int fd, const char *k, int64_t d)
{
    struct msg m = {.n = 0};
    put_q(f, &m, Q_ADD);
    put_str(&m, k);
    put(&m, &d, sizeof(d));
    sendm(fd, &m);
}

static void q_cas(struct fx *f, int fd, const char *k, const char *x, const char *d)
{
    struct msg m = {.n = 0};
    put_q(f, &m, Q_CAS);
    put_str(&m, k);
    put_str(&m, x);
    put_str(&m, d);
    sendm(fd, &m);
}

static void q_bare(struct fx *f, int fd, enum q q)
{
    struct msg m = {.n = 0};
    put_q(f, &m, q);
    sendm(fd, &m);
}

/* ---- the queries both dialects share ---------------------------------------------------- */

static void test_common_queries(void **state)
{
    struct fx *f = *state;
    int fd = client(f);
    const char *ab[] = {"/a", "/b"};

    q_set(f, fd, "/a", "one");
    q_key(f, fd, Q_GET, "/a");
    expect_vec(f, fd, "one");
    q_key(f, fd, Q_GET, "/missing");
    expect_vec(f, fd, "");
    q_add(f, fd, "init/", 1);
    assert_int_equal(recv_i64(f, fd), 1);
    q_add(f, fd, "init/", 1);
    assert_int_equal(recv_i64(f, fd), 2);
    q_key(f, fd, Q_GET, "init/");
    expect_vec(f, fd, "2"); /* decimal ASCII, as PyTorch stores it */
    q_add(f, fd, "init/", -5);
    assert_int_equal(recv_i64(f, fd), -3);
    q_keys(f, fd, Q_CHECK, 2, ab);
    assert_int_equal(recv_u8(f, fd), 1); /* NOT_READY: /b is missing */
    q_set(f, fd, "/b", "");
    q_keys(f, fd, Q_CHECK, 2, ab);
    assert_int_equal(recv_u8(f, fd), 0); /* READY: an empty value exists */
    q_keys(f, fd, Q_WAIT, 2, ab);
    assert_int_equal(recv_u8(f, fd), 0); /* STOP_WAITING at once */
    q_bare(f, fd, Q_NUM);
    assert_int_equal(recv_i64(f, fd), 3);
    /* COMPARE_SET: absent + expected "" stores; absent + expected "x" does not; present */
    q_cas(f, fd, "/c", "", "first");
    expect_vec(f, fd, "first");
    q_cas(f, fd, "/d", "x", "y");
    expect_vec(f, fd, "x");
    q_cas(f, fd, "/c", "wrong", "z");
    expect_vec(f, fd, "first");
    q_cas(f, fd, "/c", "first", "second");
    expect_vec(f, fd, "second");
    q_key(f, fd, Q_DEL, "/c");
    assert_int_equal(recv_i64(f, fd), 1);
    q_key(f, fd, Q_DEL, "/c");
    assert_int_equal(recv_i64(f, fd), 0);
    q_bare(f, fd, Q_NUM);
    assert_int_equal(recv_i64(f, fd), 3);
    expect_nothing(f, fd); /* SET sent no reply anywhere */
    close(fd);
    assert_int_equal(agent_store_stats(f->s)->bad + agent_store_stats(f->s)->over_limit, 0);
    assert_int_equal(agent_store_stats(f->s)->dialect_seen, (unsigned)f->dialect);
}

static void test_v1_watch_and_callback_connection(void **state)
{
    struct fx *f = *state;
    int fd = client(f), cb = client(f); /* 1.13's TCPCallbackClient: connects, says nothing */

    q_key(f, cb, Q_WATCH, "/w");
    assert_int_equal(recv_u8(f, cb), 3); /* KEY_CALLBACK_REGISTERED */
    q_set(f, fd, "/w", "v");
    q_key(f, fd, Q_GET, "/w");
    expect_vec(f, fd, "v");
    int silent = client(f);
    expect_nothing(f, silent); /* kept open, never closed for silence */
    assert_int_equal(agent_store_stats(f->s)->conns, 3);
    close(fd);
    close(cb);
    close(silent);
}

static void test_v2_only_queries(void **state)
{
    struct fx *f = *state;
    int fd = client(f);
    const char *abc[] = {"/a", "/b", "/none"};
    struct msg m = {.n = 0};
    uint32_t nonce = 0x01020304, echo;

    q_set(f, fd, "/a", "x");
    q_key(f, fd, Q_APPEND, "/a"); /* no: APPEND carries a value */
    put_str(&m, "yz");            /* ...which follows here, in its own send */
    sendm(fd, &m);
    q_key(f, fd, Q_GET, "/a");
    expect_vec(f, fd, "xyz");
    m.n = 0;
    put_q(f, &m, Q_MSET);
    put_u64(&m, 2);
    put_str(&m, "/b");
    put_str(&m, "bee");
    put_str(&m, "/c");
    put_str(&m, "sea");
    sendm(fd, &m);
    q_keys(f, fd, Q_MGET, 3, abc);
    expect_vec(f, fd, "xyz");
    expect_vec(f, fd, "bee");
    expect_vec(f, fd, "");
    m.n = 0;
    put_q(f, &m, Q_PING);
    put(&m, &nonce, sizeof(nonce));
    sendm(fd, &m);
    recv_n(f, fd, &echo, sizeof(echo));
    assert_int_equal(echo, nonce);
    q_key(f, fd, Q_APPEND, "/new");
    m.n = 0;
    put_str(&m, "fresh"); /* APPEND creates */
    sendm(fd, &m);
    q_key(f, fd, Q_GET, "/new");
    expect_vec(f, fd, "fresh");
    close(fd);
}

/* Every request of a session sent one byte at a time, the loop running between bytes. */
static void test_one_byte_at_a_time(void **state)
{
    struct fx *f = *state;
    int fd = client(f);
    struct msg m = {.n = 0};
    const char *k[] = {"/k"};
    int64_t one = 1, r;

    put_q(f, &m, Q_SET);
    put_str(&m, "/k");
    put_str(&m, "value");
    put_q(f, &m, Q_ADD);
    put_str(&m, "init/");
    put(&m, &one, sizeof(one));
    put_q(f, &m, Q_WAIT);
    put_u64(&m, 1);
    put_str(&m, k[0]);
    put_q(f, &m, Q_GET);
    put_str(&m, "/k");
    for (size_t i = 0; i < m.n; i++) {
        assert_int_equal(send(fd, m.b + i, 1, MSG_NOSIGNAL), 1);
        harness_run_for(&f->h, 0);
    }
    r = recv_i64(f, fd);
    assert_int_equal(r, 1);
    assert_int_equal(recv_u8(f, fd), 0);
    expect_vec(f, fd, "value");
    close(fd);
}

static void test_wait_woken_by_set(void **state)
{
    struct fx *f = *state;
    int waiter = client(f), setter = client(f);
    const char *keys[] = {"/x", "/y"};

    q_keys(f, waiter, Q_WAIT, 2, keys);
    expect_nothing(f, waiter);
    assert_int_equal(agent_store_stats(f->s)->waits, 1);
    q_set(f, setter, "/x", "1");
    expect_nothing(f, waiter); /* one of two */
    q_add(f, setter, "/y", 7);
    assert_int_equal(recv_i64(f, setter), 7);
    assert_int_equal(recv_u8(f, waiter), 0); /* STOP_WAITING */
    assert_int_equal(agent_store_stats(f->s)->waits, 0);
    close(waiter);
    close(setter);
}

static void test_v2_cancel_wait(void **state)
{
    struct fx *f = *state;
    int fd = client(f), other = client(f);
    const char *keys[] = {"/never"};

    q_keys(f, fd, Q_WAIT, 1, keys);
    expect_nothing(f, fd);
    q_bare(f, fd, Q_CANCEL);
    assert_int_equal(recv_u8(f, fd), 1); /* WAIT_CANCELED */
    assert_int_equal(agent_store_stats(f->s)->waits, 0);
    q_set(f, other, "/never", "late");
    expect_nothing(f, fd);         /* the cancelled WAIT is not answered after all */
    q_key(f, fd, Q_GET, "/never"); /* and the stream is still in step */
    expect_vec(f, fd, "late");
    close(fd);
    close(other);
}

/* A client leaving with a WAIT held: the waiter goes with it, a later SET touches nothing. */
static void test_wait_then_leave(void **state)
{
    struct fx *f = *state;
    int fd = client(f), other = client(f);
    const char *keys[] = {"/gone"};

    q_keys(f, fd, Q_WAIT, 1, keys);
    HARNESS_RUN_UNTIL(&f->h, agent_store_stats(f->s)->waits == 1);
    close(fd);
    HARNESS_RUN_UNTIL(&f->h, agent_store_stats(f->s)->waits == 0);
    q_set(f, other, "/gone", "x");
    q_key(f, other, Q_GET, "/gone");
    expect_vec(f, other, "x");
    close(other);
}

/* ---- limits: each 10 times, each closes the connection and is counted ----------------- */

static void test_oversized_key_and_value(void **state)
{
    struct fx *f = *state;
    int keep = client(f);

    for (int i = 0; i < 10; i++) {
        int fd = client(f);
        struct msg m = {.n = 0};
        put_q(f, &m, Q_SET);
        if (i % 2 == 0) {
            put_u64(&m, AGENT_STORE_KEY_MAX + 1); /* closed before the bytes come */
        } else {
            put_str(&m, "/k");
            put_u64(&m, AGENT_STORE_VALUE_MAX + 1);
        }
        sendm(fd, &m);
        expect_closed(f, fd);
    }
    assert_int_equal(agent_store_stats(f->s)->over_limit, 10);
    q_set(f, keep, "/still", "here"); /* the others go on */
    q_key(f, keep, Q_GET, "/still");
    expect_vec(f, keep, "here");
    close(keep);
}

static void test_huge_length(void **state)
{
    struct fx *f = *state;
    for (int i = 0; i < 10; i++) {
        int fd = client(f);
        struct msg m = {.n = 0};
        put_q(f, &m, Q_GET);
        put_u64(&m, (uint64_t)1 << 63);
        sendm(fd, &m);
        expect_closed(f, fd);
    }
    assert_int_equal(agent_store_stats(f->s)->over_limit, 10);
    assert_int_equal(agent_store_stats(f->s)->conns, 0);
}

static void test_too_many_connections(void **state)
{
    struct fx *f = *state;
    struct agent_store_limits lim;
    int fds[4];

    agent_store_close(f->s, NULL, NULL);
    agent_store_limits_default(&lim);
    lim.conns_max = 4;
    start(f, &lim);
    for (int i = 0; i < 4; i++)
        fds[i] = client(f);
    HARNESS_RUN_UNTIL(&f->h, agent_store_stats(f->s)->conns == 4);
    for (int i = 0; i < 10; i++)
        expect_closed(f, client(f));
    assert_int_equal(agent_store_stats(f->s)->refused, 10);
    close(fds[0]); /* room again */
    HARNESS_RUN_UNTIL(&f->h, agent_store_stats(f->s)->conns == 3);
    int fd = client(f);
    q_set(f, fd, "/ok", "1");
    q_key(f, fd, Q_GET, "/ok");
    expect_vec(f, fd, "1");
    close(fd);
    for (int i = 1; i < 4; i++)
        close(fds[i]);
}

static void test_too_many_waits(void **state)
{
    struct fx *f = *state;
    for (int i = 0; i < 10; i++) {
        int fd = client(f);
        for (unsigned w = 0; w <= AGENT_STORE_WAITS_MAX; w++) {
            const char *keys[] = {"/never"};
            q_keys(f, fd, Q_WAIT, 1, keys);
        }
        expect_closed(f, fd);
    }
    assert_int_equal(agent_store_stats(f->s)->over_limit, 10);
    HARNESS_RUN_UNTIL(&f->h, agent_store_stats(f->s)->waits == 0);
}

static void test_total_bytes(void **state)
{
    struct fx *f = *state;
    struct agent_store_limits lim;

    agent_store_close(f->s, NULL, NULL);
    agent_store_limits_default(&lim);
    lim.total_max = 100;
    start(f, &lim);
    for (int i = 0; i < 10; i++) {
        int fd = client(f);
        q_set(f, fd, "/big",
              "0123456789012345678901234567890123456789012345678901234567890123"
              "456789012345678901234567890123456789");
        expect_closed(f, fd);
    }
    assert_int_equal(agent_store_stats(f->s)->over_limit, 10);
    assert_int_equal(agent_store_stats(f->s)->bytes, 0);
}

static void test_garbage_first_bytes(void **state)
{
    struct fx *f = *state;
    static const char *const garbage[] = {"GET / HTTP/1.1\r\n\r\n", "\x16\x03\x01\x02\x00",
                                          "\xff\xff\xff\xff", "\x00\x01\x02\x03\x04\x05"};
    static const size_t len[] = {18, 5, 4, 6};

    for (int i = 0; i < 10; i++) {
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)agent_store_port(f->s))};
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        assert_true(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 || errno == EINPROGRESS);
        harness_run_for(&f->h, 1);
        if (i % 4 == 3) {
            /* 00 + not the magic: a 1.13 SET of a 0x0403020100-byte key: over the bound */
            assert_int_equal(send(fd, garbage[3], len[3], MSG_NOSIGNAL), (ssize_t)len[3]);
            unsigned char rest[8] = {0};
            assert_int_equal(send(fd, rest, 3, MSG_NOSIGNAL), 3);
        } else {
            assert_int_equal(send(fd, garbage[i % 4], len[i % 4], MSG_NOSIGNAL),
                             (ssize_t)len[i % 4]);
        }
        expect_closed(f, fd);
    }
    assert_int_equal(agent_store_stats(f->s)->bad + agent_store_stats(f->s)->over_limit, 10);
}

static void test_v2_bad_validate(void **state)
{
    struct fx *f = *state;
    int fd = client(f);
    struct msg m = {.n = 0};
    uint32_t wrong = 0x12345678;
    unsigned char z = 0;

    put(&m, &z, 1); /* VALIDATE again, with the wrong magic */
    put(&m, &wrong, sizeof(wrong));
    sendm(fd, &m);
    expect_closed(f, fd);
    assert_int_equal(agent_store_stats(f->s)->bad, 1);
}

/* A new attempt's store on the same port has none of the old one's keys or connections. */
static void test_reopen_same_port(void **state)
{
    struct fx *f = *state;
    unsigned port = agent_store_port(f->s);
    int old = client(f), fd;

    q_set(f, old, "/stale", "nccl-id");
    q_key(f, old, Q_GET, "/stale");
    expect_vec(f, old, "nccl-id");
    agent_store_close(f->s, NULL, NULL);
    assert_int_equal(agent_store_new(&f->loop, "127.0.0.1", port, NULL, &f->s), 0);
    assert_int_equal(agent_store_port(f->s), port);
    expect_closed(f, old);
    fd = client(f);
    q_key(f, fd, Q_GET, "/stale");
    expect_vec(f, fd, "");
    q_bare(f, fd, Q_NUM);
    assert_int_equal(recv_i64(f, fd), 0);
    close(fd);
}

/* Random streams, each after a valid first query byte half of the time (so the handlers, not
 * only the dialect check, meet garbage): the store outlives them all and still serves. Run it
 * under valgrind for the parsers' memory safety. */
static void test_random_streams(void **state)
{
    struct fx *f = *state;
    unsigned seed = 27;

    for (int i = 0; i < 300; i++) {
        int fd = client(f);
        struct msg m = {.n = 0};
        size_t n = (size_t)(rand_r(&seed) % 300);
        if (i % 2 == 0) { /* a query byte of the dialect */
            unsigned char q = (unsigned char)(rand_r(&seed) % (f->dialect == V1 ? 9 : 14));
            put(&m, &q, 1);
        }
        for (size_t b = 0; b < n; b++) {
            unsigned char c = (unsigned char)rand_r(&seed);
            /* small lengths now and then, so that some fields complete */
            if (rand_r(&seed) % 4 == 0)
                c = (unsigned char)(rand_r(&seed) % 8);
            put(&m, &c, 1);
        }
        send(fd, m.b, m.n, MSG_NOSIGNAL);
        harness_run_for(&f->h, 0);
        close(fd);
    }
    HARNESS_RUN_UNTIL(&f->h, agent_store_stats(f->s)->conns == 0);
    assert_true(agent_store_stats(f->s)->requests > 0); /* some garbage was well-formed */
    assert_true(agent_store_stats(f->s)->bad + agent_store_stats(f->s)->over_limit > 0);
    int fd = client(f);
    q_set(f, fd, "/after", "ok");
    q_key(f, fd, Q_GET, "/after");
    expect_vec(f, fd, "ok");
    close(fd);
}

/* MASTER_ADDR as a name, or an address a NAT forwards (not this machine's): the wildcard. */
static void test_bind_fallback(void **state)
{
    struct fx *f = *state;
    static const char *const hosts[] = {"localhost", "192.0.2.1", ""};

    for (int i = 0; i < 3; i++) {
        agent_store_close(f->s, NULL, NULL);
        assert_int_equal(agent_store_new(&f->loop, hosts[i], 0, NULL, &f->s), 0);
        int fd = client(f); /* on 127.0.0.1 */
        q_set(f, fd, "/k", hosts[i]);
        q_key(f, fd, Q_GET, "/k");
        expect_vec(f, fd, hosts[i]);
        close(fd);
    }
}

/* A port another program listens on: an error, nothing left open. */
static void test_port_in_use(void **state)
{
    struct fx *f = *state;
    struct agent_store *s2 = NULL;

    assert_int_equal(agent_store_new(&f->loop, "127.0.0.1", agent_store_port(f->s), NULL, &s2),
                     UV_EADDRINUSE);
    assert_null(s2);
}

#define BOTH(t)                                                                                    \
    cmocka_unit_test_setup_teardown(t, setup_v1, teardown),                                        \
        cmocka_unit_test_setup_teardown(t, setup_v2, teardown)
#define ONLY(t, s) cmocka_unit_test_setup_teardown(t, s, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        BOTH(test_common_queries),
        ONLY(test_v1_watch_and_callback_connection, setup_v1),
        ONLY(test_v2_only_queries, setup_v2),
        BOTH(test_one_byte_at_a_time),
        BOTH(test_wait_woken_by_set),
        ONLY(test_v2_cancel_wait, setup_v2),
        BOTH(test_wait_then_leave),
        BOTH(test_oversized_key_and_value),
        BOTH(test_huge_length),
        BOTH(test_too_many_connections),
        BOTH(test_too_many_waits),
        BOTH(test_total_bytes),
        ONLY(test_garbage_first_bytes, setup_v1),
        ONLY(test_v2_bad_validate, setup_v2),
        BOTH(test_reopen_same_port),
        BOTH(test_random_streams),
        ONLY(test_bind_fallback, setup_v1),
        ONLY(test_port_in_use, setup_v1),
    };
    signal(SIGPIPE, SIG_IGN); /* as the agent (agent.c): a reply to a client gone is EPIPE */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
