/* agent/replica_bulk.c on a private loop, both ends real or one end played by a raw peer on a
 * thread of the test. Checked: a copy on several streams arrives byte for byte (SENT and
 * RECEIVED, the writer's bytes in order); a connection to the sender's port with another key's
 * hello, or garbage, is closed and the copy still goes through; a receiver that reads but never
 * confirms gets at most a window from the sender, which reads no further from its file until
 * confirmations come; a sender that lies (an offset that is no chunk's, a short chunk, a chunk
 * past the size, the same chunk twice, an altered record, another key) is refused (REFUSED,
 * the writer gets nothing more), and a sender that goes away mid-copy is a FAILED, not a
 * REFUSED (the receiver asks for the relay then). */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>
#include <xxhash.h>

#include "harness.h"
#include "replica_bulk.h"
#include "replica_write.h"

#define CHUNK AGENT_REPLICA_BULK_CHUNK
#define REC(n) (AGENT_REPLICA_BULK_HDR + (n) + AGENT_REPLICA_BULK_TAG)
#define XFER 0x80000011u

struct mem { /* the writer's target: the bytes in memory */
    uint8_t *p;
    size_t n, cap;
};

static int mem_open(void *t, char *why, size_t len)
{
    (void)t;
    (void)why;
    (void)len;
    return 0;
}

static int mem_write(void *t, const uint8_t *p, size_t n, char *why, size_t len)
{
    struct mem *m = t;

    (void)why;
    (void)len;
    if (m->n + n > m->cap)
        return -ENOSPC;
    memcpy(m->p + m->n, p, n);
    m->n += n;
    return 0;
}

static int mem_finish(void *t, char *why, size_t len)
{
    (void)t;
    (void)why;
    (void)len;
    return 0;
}

static void mem_close(void *t, int kept)
{
    (void)t;
    (void)kept;
}

static const struct agent_replica_write_ops mem_ops = {
    .open = mem_open, .write = mem_write, .finish = mem_finish, .close = mem_close};

struct fixture {
    uv_loop_t loop;
    struct harness h;
    char tmp[128];
    uint8_t key[32];
    uint8_t *content;
    uint64_t size;
    int fd;
    struct mem mem;
    struct agent_replica_writer *wr;
    struct agent_replica_bulk *snd, *rcv;
    double bytes_per_ms; /* the sender's cap, 0: none */
    uv_timer_t tick;     /* wakes the loop: the raw peers' threads change what the tests wait for */
    int sent, received, snd_failed, rcv_failed, refused, written_done, write_failed;
    char why[256];
};

static void on_snd(void *data, enum agent_replica_bulk_event ev, const char *why)
{
    struct fixture *fx = data;

    if (ev == AGENT_REPLICA_BULK_SENT)
        fx->sent++;
    else
        fx->snd_failed++;
    (void)why;
}

static void on_rcv(void *data, enum agent_replica_bulk_event ev, const char *why)
{
    struct fixture *fx = data;

    if (ev == AGENT_REPLICA_BULK_RECEIVED) {
        fx->received++;
        agent_replica_writer_finish(fx->wr);
    } else {
        fx->rcv_failed += ev == AGENT_REPLICA_BULK_FAILED;
        fx->refused += ev == AGENT_REPLICA_BULK_REFUSED;
        snprintf(fx->why, sizeof(fx->why), "%s", why);
    }
}

static void on_written(void *data, enum agent_replica_write_event ev, const char *why)
{
    struct fixture *fx = data;

    (void)why;
    if (ev == AGENT_REPLICA_WRITE_DONE)
        fx->written_done++;
    else if (ev == AGENT_REPLICA_WRITE_FAILED)
        fx->write_failed++;
    else if (fx->snd != NULL) /* what the link's PROGRESS would carry */
        agent_replica_bulk_confirmed(fx->snd, agent_replica_writer_written(fx->wr));
}

/* size random bytes in a file of the fixture's directory (fx->fd) and in fx->content */
static void make_file(struct fixture *fx, uint64_t size)
{
    char path[256];

    fx->size = size;
    fx->content = malloc(size);
    assert_non_null(fx->content);
    for (uint64_t off = 0; off < size;) {
        ssize_t n = getrandom(fx->content + off, size - off, 0);

        assert_true(n > 0);
        off += (uint64_t)n;
    }
    snprintf(path, sizeof(path), "%s/ckpt", fx->tmp);
    fx->fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(fx->fd >= 0);
    assert_int_equal(write(fx->fd, fx->content, size), (ssize_t)size);
}

static void start_writer(struct fixture *fx)
{
    fx->mem.cap = fx->size;
    fx->mem.p = malloc(fx->size);
    assert_non_null(fx->mem.p);
    assert_int_equal(agent_replica_writer_start(&fx->loop, &mem_ops, &fx->mem,
                                                XXH3_64bits(fx->content, fx->size),
                                                AGENT_REPLICA_BULK_WINDOW, on_written, fx, &fx->wr),
                     0);
}

static void on_tick(uv_timer_t *t)
{
    (void)t;
}

static int setup(void **state)
{
    static struct fixture fx;

    memset(&fx, 0, sizeof(fx));
    harness_init_tmp(&fx.h, &fx.loop, 30000, fx.tmp, sizeof(fx.tmp), "bulk");
    assert_int_equal(getrandom(fx.key, sizeof(fx.key), 0), (ssize_t)sizeof(fx.key));
    fx.fd = -1;
    uv_timer_init(&fx.loop, &fx.tick);
    uv_timer_start(&fx.tick, on_tick, 10, 10);
    *state = &fx;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;

    agent_replica_bulk_close(fx->snd);
    agent_replica_bulk_close(fx->rcv);
    agent_replica_writer_close(fx->wr);
    harness_run_for(&fx->h, 50); /* the closes' callbacks */
    uv_close((uv_handle_t *)&fx->tick, NULL);
    if (fx->fd >= 0)
        close(fx->fd);
    free(fx->content);
    free(fx->mem.p);
    harness_close(&fx->h);
    harness_loop_close(&fx->loop);
    harness_rmtree(fx->tmp);
    return 0;
}

static uint16_t serve(struct fixture *fx, unsigned streams, uint8_t salt[32])
{
    uint16_t port = 0;

    assert_int_equal(agent_replica_bulk_serve(&fx->loop, "127.0.0.1", 0, fx->key, XFER, streams,
                                              fx->size, fx->bytes_per_ms, fx->fd, NULL, on_snd, fx,
                                              &fx->snd, &port, salt),
                     0);
    assert_true(port != 0);
    return port;
}

static void fetch(struct fixture *fx, uint16_t port, const uint8_t salt[32], unsigned streams)
{
    start_writer(fx);
    assert_int_equal(agent_replica_bulk_fetch(&fx->loop, "127.0.0.1", port, fx->key, salt, XFER,
                                              streams, fx->size, fx->wr, on_rcv, fx, &fx->rcv),
                     0);
}

static void check_copy(struct fixture *fx)
{
    HARNESS_RUN_UNTIL(&fx->h, fx->written_done == 1 && fx->sent == 1);
    assert_int_equal(fx->received, 1);
    assert_int_equal(fx->snd_failed + fx->rcv_failed + fx->refused + fx->write_failed, 0);
    assert_int_equal(fx->mem.n, fx->size);
    assert_memory_equal(fx->mem.p, fx->content, fx->size);
}

static int raw_connect(uint16_t port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_true(s >= 0);
    assert_int_equal(connect(s, (struct sockaddr *)&a, sizeof(a)), 0);
    return s;
}

static void send_hello(int s, const uint8_t key[32], const uint8_t salt[32], uint32_t stream)
{
    uint8_t h[REC(0)];

    assert_int_equal(agent_replica_bulk_seal_for_test(key, salt, XFER,
                                                      AGENT_REPLICA_BULK_HELLO_BIT | stream, 0,
                                                      AGENT_REPLICA_BULK_HELLO, stream, NULL, 0, h),
                     0);
    assert_int_equal(send(s, h, sizeof(h), MSG_NOSIGNAL), (ssize_t)sizeof(h));
}

/* 1 if the peer closed s within ms (EOF or reset), 0 if it is still open */
static int closed_within(struct fixture *fx, int s, unsigned ms)
{
    struct timeval tv = {.tv_sec = 0, .tv_usec = 20000};
    uint8_t b[64];

    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    for (unsigned t = 0; t < ms; t += 20) {
        ssize_t n = recv(s, b, sizeof(b), MSG_DONTWAIT);

        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
            return 1;
        harness_run_for(&fx->h, 20);
    }
    return 0;
}

static void test_copy_on_three_streams(void **state)
{
    struct fixture *fx = *state;
    uint8_t salt[32];
    uint16_t port;

    make_file(fx, 9 * (uint64_t)CHUNK + 12345); /* the last chunk is short */
    port = serve(fx, 3, salt);
    fetch(fx, port, salt, 3);
    check_copy(fx);
}

static void test_small_copy_one_stream(void **state)
{
    struct fixture *fx = *state;
    uint8_t salt[32];
    uint16_t port;

    make_file(fx, 1000);
    port = serve(fx, 1, salt);
    fetch(fx, port, salt, 1);
    check_copy(fx);
}

/* --replicate-bandwidth's share: 8 MiB at 20 MB/s take at least ~0.37 s (the first chunk goes
 * at once), and arrive whole. */
static void test_capped(void **state)
{
    struct fixture *fx = *state;
    uint8_t salt[32];
    uint64_t t0;
    uint16_t port;

    make_file(fx, 8 * (uint64_t)CHUNK);
    fx->bytes_per_ms = 20000; /* 20 MB/s */
    t0 = uv_hrtime();
    port = serve(fx, 2, salt);
    fetch(fx, port, salt, 2);
    check_copy(fx);
    assert_true(uv_hrtime() - t0 >= 7ull * CHUNK * 1000000 / 20000 - 20000000ull);
}

/* Strangers on the sender's port: another key's hello, garbage, a hello naming a stream that
 * does not exist. Each is closed; the receiver's streams then get the copy. */
static void test_strangers_closed(void **state)
{
    struct fixture *fx = *state;
    uint8_t salt[32], other[32], garbage[REC(0)];
    uint16_t port;
    int s1, s2, s3;

    make_file(fx, 3 * (uint64_t)CHUNK);
    port = serve(fx, 2, salt);
    memcpy(other, fx->key, sizeof(other));
    other[0] ^= 1; /* another job's key */
    s1 = raw_connect(port);
    send_hello(s1, other, salt, 0);
    s2 = raw_connect(port);
    memset(garbage, 0x41, sizeof(garbage));
    assert_int_equal(send(s2, garbage, sizeof(garbage), MSG_NOSIGNAL), (ssize_t)sizeof(garbage));
    s3 = raw_connect(port);
    send_hello(s3, fx->key, salt, 5); /* the right key, a stream that is not offered */
    assert_true(closed_within(fx, s1, 3000));
    assert_true(closed_within(fx, s2, 3000));
    assert_true(closed_within(fx, s3, 3000));
    close(s1);
    close(s2);
    close(s3);
    fetch(fx, port, salt, 2);
    check_copy(fx);
}

/* A receiver of the right key that reads every record but confirms nothing: the sender takes
 * at most a window from its file and the socket carries no more; a confirmation lets it go on
 * by as much. */
struct reader {
    int s;
    uint64_t got; /* bytes of records read */
    int stop;
    pthread_mutex_t mu;
};

static void *read_all(void *arg)
{
    struct reader *r = arg;
    uint8_t *b = malloc(1 << 16);
    struct timeval tv = {.tv_sec = 0, .tv_usec = 50000};

    setsockopt(r->s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    for (;;) {
        ssize_t n = recv(r->s, b, 1 << 16, 0);
        int stop;

        pthread_mutex_lock(&r->mu);
        if (n > 0)
            r->got += (uint64_t)n;
        stop = r->stop || n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR);
        pthread_mutex_unlock(&r->mu);
        if (stop)
            break;
    }
    free(b);
    return NULL;
}

static uint64_t reader_got(struct reader *r)
{
    uint64_t n;

    pthread_mutex_lock(&r->mu);
    n = r->got;
    pthread_mutex_unlock(&r->mu);
    return n;
}

static void test_window_bounds_the_sender(void **state)
{
    struct fixture *fx = *state;
    const uint64_t window = AGENT_REPLICA_BULK_WINDOW, per = REC(CHUNK) - CHUNK;
    uint8_t salt[32];
    struct reader rd = {.mu = PTHREAD_MUTEX_INITIALIZER};
    pthread_t t;
    uint64_t got;
    uint16_t port;

    make_file(fx, 3 * window);
    port = serve(fx, 1, salt);
    rd.s = raw_connect(port);
    send_hello(rd.s, fx->key, salt, 0);
    assert_int_equal(pthread_create(&t, NULL, read_all, &rd), 0);
    HARNESS_RUN_UNTIL(&fx->h, reader_got(&rd) >= window);
    harness_run_for(&fx->h, 1000); /* room to go past it, if it would */
    got = reader_got(&rd);
    assert_true(got <= window + (window / CHUNK) * per);
    assert_true(agent_replica_bulk_taken(fx->snd) <= window);
    agent_replica_bulk_confirmed(fx->snd, 8 * (uint64_t)CHUNK); /* "written" */
    HARNESS_RUN_UNTIL(&fx->h, reader_got(&rd) >= window + 8 * (uint64_t)CHUNK);
    harness_run_for(&fx->h, 500);
    assert_true(agent_replica_bulk_taken(fx->snd) <= window + 8 * (uint64_t)CHUNK);
    agent_replica_bulk_confirmed(fx->snd, 10 * window); /* more than was sent: ignored */
    harness_run_for(&fx->h, 300);
    assert_true(agent_replica_bulk_taken(fx->snd) <= window + 8 * (uint64_t)CHUNK);
    pthread_mutex_lock(&rd.mu);
    rd.stop = 1;
    pthread_mutex_unlock(&rd.mu);
    pthread_join(t, NULL);
    close(rd.s);
}

/* The process's resident set, in KiB (/proc/self/statm). */
static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, rss = 0;

    assert_non_null(f);
    assert_int_equal(fscanf(f, "%ld %ld", &size, &rss), 2);
    fclose(f);
    return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

/* A receiver of the right key that confirms as written every byte the sender took and reads
 * nothing (issue 30's "acks without reading"): the window no longer holds the sender back, the
 * sockets do. Its streams' threads wait on full sockets with a chunk each; the sender takes
 * from its file only what the kernel's buffers hold, and the process grows by well under 64 MB
 * for a 192 MiB copy. */
static void test_lying_receiver_bounded(void **state)
{
    struct fixture *fx = *state;
    uint8_t salt[32];
    int s[2];
    long rss0, grown;
    uint64_t taken;
    uint16_t port;

    make_file(fx, 192ull << 20);
    port = serve(fx, 2, salt);
    for (int i = 0; i < 2; i++) {
        s[i] = raw_connect(port);
        send_hello(s[i], fx->key, salt, (unsigned)i);
    }
    rss0 = rss_kib();
    for (int k = 0; k < 30; k++) {
        agent_replica_bulk_confirmed(fx->snd, agent_replica_bulk_taken(fx->snd));
        harness_run_for(&fx->h, 50);
    }
    taken = agent_replica_bulk_taken(fx->snd);
    grown = rss_kib() - rss0;
    print_message("lying receiver: the sender took %llu KiB of 196608, the process grew %ld KiB\n",
                  (unsigned long long)(taken >> 10), grown);
    assert_true(taken > 0);
    assert_true(taken < fx->size / 4); /* the full sockets stopped it */
    assert_true(grown < 64 * 1024);
    assert_int_equal(fx->sent, 0);
    for (int i = 0; i < 2; i++)
        close(s[i]);
}

/* A lying sender, played by the test: it takes the receiver's stream and sends one record. */
enum lie { BAD_OFFSET, SHORT_CHUNK, PAST_SIZE, TWICE, ALTERED, OTHER_KEY, GONE };

struct liar {
    int lfd;
    enum lie lie;
    uint8_t key[32], salt[32];
    uint64_t size;
};

static void send_record(int s, const uint8_t key[32], const uint8_t salt[32], uint64_t seq,
                        uint64_t off, uint32_t n, int alter)
{
    uint8_t *b = calloc(1, REC(n));
    uint8_t *p = calloc(1, n ? n : 1);

    assert_non_null(b);
    assert_non_null(p);
    assert_int_equal(agent_replica_bulk_seal_for_test(key, salt, XFER, 0, seq,
                                                      AGENT_REPLICA_BULK_DATA, off, p, n, b),
                     0);
    if (alter)
        b[AGENT_REPLICA_BULK_HDR + n / 2] ^= 0x80;
    (void)send(s, b, REC(n), MSG_NOSIGNAL);
    free(b);
    free(p);
}

static void *lie(void *arg)
{
    struct liar *l = arg;
    uint8_t hello[REC(0)], other[32];
    int s = accept(l->lfd, NULL, NULL);
    size_t got = 0;

    if (s < 0)
        return NULL;
    while (got < sizeof(hello)) {
        ssize_t n = recv(s, hello + got, sizeof(hello) - got, 0);

        if (n <= 0)
            break;
        got += (size_t)n;
    }
    memcpy(other, l->key, sizeof(other));
    other[31] ^= 1;
    switch (l->lie) {
    case BAD_OFFSET:
        send_record(s, l->key, l->salt, 1, 12345, CHUNK, 0);
        break;
    case SHORT_CHUNK:
        send_record(s, l->key, l->salt, 1, 0, CHUNK / 2, 0);
        break;
    case PAST_SIZE:
        send_record(s, l->key, l->salt, 1, 4 * (uint64_t)CHUNK, CHUNK, 0);
        break;
    case TWICE:
        send_record(s, l->key, l->salt, 1, 0, CHUNK, 0);
        send_record(s, l->key, l->salt, 2, 0, CHUNK, 0);
        break;
    case ALTERED:
        send_record(s, l->key, l->salt, 1, 0, CHUNK, 1);
        break;
    case OTHER_KEY:
        send_record(s, other, l->salt, 1, 0, CHUNK, 0);
        break;
    case GONE:
        send_record(s, l->key, l->salt, 1, 0, CHUNK, 0);
        break;
    }
    usleep(200 * 1000);
    close(s);
    return NULL;
}

static void test_lying_sender_refused(void **state)
{
    struct fixture *fx = *state;
    static const char *const want[] = {
        [BAD_OFFSET] = "an offset that is no chunk's",
        [SHORT_CHUNK] = "a chunk of the wrong size",
        [PAST_SIZE] = "an offset that is no chunk's",
        [TWICE] = "chunks out of order",
        [ALTERED] = "does not verify",
        [OTHER_KEY] = "does not verify",
        [GONE] = "closed at",
    };

    make_file(fx, 3 * (uint64_t)CHUNK);
    for (int i = BAD_OFFSET; i <= GONE; i++) {
        struct sockaddr_in a = {.sin_family = AF_INET};
        socklen_t al = sizeof(a);
        struct liar l = {.lie = (enum lie)i, .size = fx->size};
        pthread_t t;

        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        l.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_true(l.lfd >= 0);
        assert_int_equal(bind(l.lfd, (struct sockaddr *)&a, sizeof(a)), 0);
        assert_int_equal(listen(l.lfd, 4), 0);
        assert_int_equal(getsockname(l.lfd, (struct sockaddr *)&a, &al), 0);
        memcpy(l.key, fx->key, sizeof(l.key));
        assert_int_equal(getrandom(l.salt, sizeof(l.salt), 0), (ssize_t)sizeof(l.salt));
        assert_int_equal(pthread_create(&t, NULL, lie, &l), 0);
        fx->refused = fx->rcv_failed = fx->received = 0;
        fx->why[0] = '\0';
        fx->mem.n = 0;
        free(fx->mem.p);
        fx->mem.p = NULL;
        fetch(fx, ntohs(a.sin_port), l.salt, 1);
        HARNESS_RUN_UNTIL(&fx->h, fx->refused + fx->rcv_failed > 0);
        if (strstr(fx->why, want[i]) == NULL)
            fail_msg("lie %d: \"%s\" does not say \"%s\"", i, fx->why, want[i]);
        if (i == GONE) {
            assert_int_equal(fx->rcv_failed, 1); /* the transport: the relay is asked */
            assert_int_equal(fx->refused, 0);
            assert_int_equal(fx->mem.n % CHUNK, 0);
        } else {
            assert_int_equal(fx->refused, 1);
            assert_int_equal(fx->rcv_failed, 0);
        }
        assert_int_equal(fx->received, 0);
        agent_replica_bulk_close(fx->rcv);
        fx->rcv = NULL;
        harness_run_for(&fx->h, 100);
        if (i != TWICE && i != GONE)
            assert_int_equal(fx->mem.n, 0); /* nothing of a refused record was written */
        agent_replica_writer_close(fx->wr);
        fx->wr = NULL;
        pthread_join(t, NULL);
        close(l.lfd);
    }
}

/* A receiver that does not come: the sender fails after its set-up time, and says so. */
static void test_receiver_never_comes(void **state)
{
    struct fixture *fx = *state;
    uint8_t salt[32];

    make_file(fx, 2 * (uint64_t)CHUNK);
    (void)serve(fx, 2, salt);
    HARNESS_RUN_UNTIL(&fx->h, fx->snd_failed == 1);
    assert_int_equal(fx->sent, 0);
}

#define BULK_TEST(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        BULK_TEST(test_copy_on_three_streams),
        BULK_TEST(test_small_copy_one_stream),
        BULK_TEST(test_capped),
        BULK_TEST(test_strangers_closed),
        BULK_TEST(test_window_bounds_the_sender),
        BULK_TEST(test_lying_sender_refused),
        BULK_TEST(test_lying_receiver_bounded),
        BULK_TEST(test_receiver_never_comes),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
