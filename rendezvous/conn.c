/* Framed connection: see conn.h. Reads exactly the bytes of the current frame part (header, then
 * payload) so that a frame boundary never falls inside a buffer and nothing needs copying. */
#include "conn.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <mbedtls/error.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/platform_util.h>
#include <mbedtls/ssl.h>
#include <mbedtls/ssl_internal.h> /* MBEDTLS_SSL_{IN,OUT}_BUFFER_LEN */
#include <mbedtls/x509.h>

#include "cred.h"
#include "tls.h"

struct rdzv_conn_tls {
    mbedtls_ssl_context ssl; /* first: conn_cred_sink finds the struct from it */
    struct rdzv_cred cred;   /* server: what the handshake proved (kind NONE until then) */
    int cert_mode;
    const uint8_t *in;     /* ciphertext mbedTLS reads: tls_in, or hs_in during a step */
    size_t in_len, in_off; /* its length, and how much mbedTLS took */
    uint8_t *pending;      /* plaintext frames sent before the handshake finished */
    size_t pending_len;
    int done;     /* handshake finished */
    int dead;     /* a fatal mbedTLS error: the context must not be used again */
    int cut;      /* the handshake ended because the connection did (closed, reset) */
    int notify;   /* close_notify sent */
    int trim_due; /* a record over a page passed: tls_trim when the buffers are empty again */
    uint64_t trimmed_ms; /* loop time of the last trim (TRIM_EVERY_MS) */
    char reason[192];
    /* Server handshakes run in libuv's thread pool, one step (mbedtls_ssl_handshake until it
     * wants more ciphertext) at a time: see "handshake steps off the loop" below. */
    struct rdzv_conn *conn; /* NULL once the conn closed while a step was queued or running */
    struct rdzv_tls *tls;   /* the shared configuration: held (rdzv_tls_hold) during a step */
    uv_loop_t *loop;
    int offload;    /* server side: handshake steps go to the pool */
    int busy;       /* a step is waiting or running: the loop must not touch ssl, hs_in, hs_out */
    int queued;     /* the step was given to uv_queue_work (else it waits in the FIFO) */
    int paused;     /* reading stopped for a step in the pool (resume_reading starts it) */
    int step_ret;   /* what the step's mbedtls_ssl_handshake returned */
    uint8_t *hs_in; /* ciphertext received for the next step */
    size_t hs_in_len;
    uint8_t *hs_out; /* records a step produced, written by the loop after it */
    size_t hs_out_len, hs_out_cap;
    uv_work_t work;
    struct rdzv_conn_tls *next_wait; /* the FIFO of steps not yet given to the pool */
};

/* Ciphertext from one read_cb. tls_pump() always drains it (mbedTLS is called until it wants
 * more) or abandons it with the connection, so one buffer per loop thread serves every
 * connection, as with `decoded`; only mbedTLS's own record buffers (~33 KiB, mostly trimmed:
 * tls_trim) are per conn. */
static _Thread_local uint8_t tls_in[65536];

/* Records written while one read's messages are handled are held here and written with one
 * send(2) after the read (tls_read): a peer's 64 KiB of requests used to cost one send(2) per
 * reply, half of the server's loop under a KV flood (integration.srv_kv_hold_flood). Only one
 * conn pumps at a time on a thread, so one buffer per thread; a reply to another conn, or a
 * record larger than the buffer, is written as before. */
static _Thread_local struct {
    struct rdzv_conn_tls *owner; /* the conn whose read is being handled, or NULL */
    size_t len;
    uint8_t buf[65536];
} cork;

/* The encoded frame lives right after the request; freed by write_cb. */
struct write_req {
    uv_write_t req; /* first: write_cb casts back */
    uint8_t data[];
};

int rdzv_conn_init(uv_loop_t *loop, struct rdzv_conn *conn, rdzv_conn_msg_cb msg_cb,
                   rdzv_conn_error_cb error_cb, void *data)
{
    int err;

    *conn = (struct rdzv_conn){.msg_cb = msg_cb, .error_cb = error_cb, .data = data};
    err = uv_tcp_init(loop, &conn->tcp);
    if (err < 0)
        return err;
    conn->tcp.data = conn;
    return 0;
}

static void alloc_cb(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
    struct rdzv_conn *conn = handle->data;

    (void)suggested;
    if (!conn->reading) {
        *buf = uv_buf_init(NULL, 0);
    } else if (conn->tls != NULL) {
        *buf = uv_buf_init((char *)tls_in, sizeof(tls_in));
    } else if (conn->payload == NULL) {
        *buf = uv_buf_init((char *)conn->hdr + conn->hdr_got, RDZV_HEADER_SIZE - conn->hdr_got);
    } else {
        *buf = uv_buf_init((char *)conn->payload + conn->payload_got,
                           conn->payload_len - conn->payload_got);
    }
}

/* Payload buffers of large frames (checkpoint replica chunks, KV values) are kept for the next
 * one: one spare per thread. Freeing a 60 KiB block and allocating the next came from mmap and
 * went back with munmap each time in `muster server` (rdzv_conn_tune_for_server), and each
 * munmap interrupts every CPU the process ran on to flush its TLB: 12 % of the server's CPU
 * while it relayed replicas. Large payloads all get the largest size, so the spare always fits. */
#define PAYLOAD_LARGE (16 * 1024)
/* The spare is thread-specific data, not _Thread_local: its destructor frees it when a thread
 * that ran a loop (libmuster's client thread) exits. */
static pthread_key_t payload_spare;
static pthread_once_t payload_spare_once = PTHREAD_ONCE_INIT;

static void payload_spare_key(void)
{
    (void)pthread_key_create(&payload_spare, free);
}

static uint8_t *payload_alloc(uint32_t len)
{
    uint8_t *p;

    if (len < PAYLOAD_LARGE)
        return malloc(len);
    (void)pthread_once(&payload_spare_once, payload_spare_key);
    if ((p = pthread_getspecific(payload_spare)) != NULL) {
        (void)pthread_setspecific(payload_spare, NULL);
        return p;
    }
    return malloc(RDZV_MAX_PAYLOAD);
}

/* Frees conn's payload buffer, if any (its length is still payload_len). */
static void payload_free(struct rdzv_conn *conn)
{
    int kept = 0;

    if (conn->payload != NULL && conn->payload_len >= PAYLOAD_LARGE &&
        pthread_getspecific(payload_spare) == NULL)
        kept = pthread_setspecific(payload_spare, conn->payload) == 0;
    if (!kept)
        free(conn->payload);
    conn->payload = NULL;
}

/* Reading ends for good; the owner hears about it once, unless it is closing anyway. */
static void stop(struct rdzv_conn *conn, int err)
{
    conn->reading = 0;
    uv_read_stop((uv_stream_t *)&conn->tcp);
    payload_free(conn);
    if (!conn->closing && conn->error_cb != NULL)
        conn->error_cb(conn, err);
}

/* Decoded messages are big (a KV value, a STATUS text: ~130 KiB) and live only during msg_cb;
 * one per thread serves every connection of that thread's loop. Embedding one per connection
 * cost the server ~65 KiB of RSS per agent (660 MB at 10,000 agents, bench/rdzv_bench.sh b). */
static _Thread_local struct rdzv_msg decoded;

static void dispatch(struct rdzv_conn *conn)
{
    int err = rdzv_msg_decode(conn->type, conn->payload, conn->payload_len, &decoded);

    payload_free(conn);
    conn->hdr_got = 0;
    if (err < 0) {
        stop(conn, err);
        return;
    }
    conn->burst++;
    conn->msg_cb(conn, &decoded);
}

/* A complete header: check the length before allocating anything for the payload. */
static void header_done(struct rdzv_conn *conn)
{
    int err;

    conn->type = 0; /* tells the owner that the header itself was bad */
    err = rdzv_header_decode(conn->hdr, &conn->type, &conn->payload_len);
    if (err < 0) {
        stop(conn, err);
        return;
    }
    if (conn->payload_len == 0) {
        dispatch(conn);
        return;
    }
    conn->payload = payload_alloc(conn->payload_len);
    if (conn->payload == NULL) {
        stop(conn, -ENOMEM);
        return;
    }
    conn->payload_got = 0;
}

/* n frame bytes arrived at the place frame_room() gave. */
static void consumed(struct rdzv_conn *conn, size_t n)
{
    conn->bytes_in += (uint64_t)n;
    if (conn->payload == NULL) {
        conn->hdr_got += (uint32_t)n;
        if (conn->hdr_got == RDZV_HEADER_SIZE)
            header_done(conn);
        return;
    }
    conn->payload_got += (uint32_t)n;
    if (conn->payload_got == conn->payload_len)
        dispatch(conn);
}

static void tls_read(struct rdzv_conn *conn, ssize_t nread);
static void read_cb(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf);

/* --- fair reading ----------------------------------------------------------------------------
 * libuv reads a readable socket up to 32 times in a row before it looks at the next, and one
 * read holds up to 64 KiB of messages: a peer with a backlog (a worker sending 12,500 KV_GETs at
 * once) kept the server's loop on its connection for seconds while other jobs' heartbeats
 * waited. So a conn of a server (rdzv_conn_set_fair) that has delivered RDZV_CONN_BURST
 * messages stops reading until the loop's next turn, after every other ready socket had its
 * turn; the idle handle keeps that turn from waiting in poll. A conn rarely sends that many in a
 * row: a heartbeat-only agent is never paused. */
static void fair_unlink(struct rdzv_conn *conn)
{
    if (!conn->deferred)
        return;
    if (conn->fair_prev != NULL)
        conn->fair_prev->fair_next = conn->fair_next;
    else
        conn->fair->head = conn->fair_next;
    if (conn->fair_next != NULL)
        conn->fair_next->fair_prev = conn->fair_prev;
    conn->fair_prev = conn->fair_next = NULL;
    conn->deferred = 0;
}

static void fair_resume(uv_idle_t *idle)
{
    struct rdzv_conn_fair *f = idle->data;
    struct rdzv_conn *conn;

    uv_idle_stop(idle);
    while ((conn = f->head) != NULL) {
        fair_unlink(conn);
        if (!conn->reading || conn->closing || (conn->tls != NULL && conn->tls->paused))
            continue;
        int err = uv_read_start((uv_stream_t *)&conn->tcp, alloc_cb, read_cb);

        if (err < 0)
            stop(conn, err);
    }
}

static void fair_defer(struct rdzv_conn *conn)
{
    conn->burst = 0;
    if (conn->deferred || !conn->reading || conn->closing ||
        (conn->tls != NULL && conn->tls->paused))
        return;
    uv_read_stop((uv_stream_t *)&conn->tcp); /* ends libuv's run of reads on this socket */
    conn->fair->deferrals++;
    conn->deferred = 1;
    conn->fair_prev = NULL;
    conn->fair_next = conn->fair->head;
    if (conn->fair->head != NULL)
        conn->fair->head->fair_prev = conn;
    conn->fair->head = conn;
    (void)uv_idle_start(&conn->fair->idle, fair_resume); /* no-op when active */
}

void rdzv_conn_fair_init(uv_loop_t *loop, struct rdzv_conn_fair *f)
{
    *f = (struct rdzv_conn_fair){0};
    uv_idle_init(loop, &f->idle); /* cannot fail on unix */
    f->idle.data = f;
}

void rdzv_conn_fair_close(struct rdzv_conn_fair *f, uv_close_cb cb)
{
    while (f->head != NULL)
        fair_unlink(f->head);
    uv_close((uv_handle_t *)&f->idle, cb);
}

void rdzv_conn_set_fair(struct rdzv_conn *conn, struct rdzv_conn_fair *f)
{
    conn->fair = f;
}

static void read_cb(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct rdzv_conn *conn = stream->data;

    (void)buf;
    if (nread == 0 || !conn->reading)
        return;
    if (nread > 0) {
        conn->raw_in += (uint64_t)nread;
        conn->raw_in_ms = uv_now(stream->loop);
    }
    if (conn->tls != NULL) {
        tls_read(conn, nread);
    } else if (nread < 0) {
        stop(conn, (int)nread);
        return;
    } else {
        consumed(conn, (size_t)nread);
    }
    if (conn->fair != NULL && conn->burst >= RDZV_CONN_BURST)
        fair_defer(conn);
}

int rdzv_conn_start(struct rdzv_conn *conn)
{
    int err;

    /* Messages are small request/response pairs: Nagle would add up to 40 ms per exchange. */
    err = uv_tcp_nodelay(&conn->tcp, 1);
    if (err < 0)
        return err;
    err = uv_read_start((uv_stream_t *)&conn->tcp, alloc_cb, read_cb);
    if (err < 0)
        return err;
    conn->reading = 1;
    return 0;
}

static void write_cb(uv_write_t *req, int status)
{
    (void)status; /* a broken connection also fails the read side, which reports it */
    free((struct write_req *)req);
}

/* Writes len bytes, or queues a copy of what the socket did not take. The direct write first,
 * when nothing is queued: a uv_write, even one that completes at once, makes libuv re-arm the
 * socket's poll (one epoll_ctl each, ~10 per join in a 3,000-agent round: docs/BENCHMARKS.md).
 * send(2) rather than uv_try_write: MSG_NOSIGNAL, as a library must not raise SIGPIPE in a
 * process that did not ignore it. A broken connection is reported by the read side, as the
 * status of a queued write is not (write_cb). */
static int write_copy(struct rdzv_conn *conn, const uint8_t *data, size_t len)
{
    uv_stream_t *s = (uv_stream_t *)&conn->tcp;
    struct write_req *wr;
    uv_buf_t buf;
    uv_os_fd_t fd;
    ssize_t n;
    int err;

    if (uv_stream_get_write_queue_size(s) == 0 && uv_fileno((uv_handle_t *)s, &fd) == 0) {
        do
            n = send(fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        while (n < 0 && errno == EINTR);
        if (n == (ssize_t)len)
            return 0;
        if (n > 0) {
            data += n;
            len -= (size_t)n;
        } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOTCONN) {
            return 0; /* EPIPE, ECONNRESET...: the read side reports it */
        }
    }
    wr = malloc(sizeof(*wr) + len);
    if (wr == NULL)
        return -ENOMEM;
    memcpy(wr->data, data, len);
    buf = uv_buf_init((char *)wr->data, (unsigned)len);
    err = uv_write(&wr->req, s, &buf, 1, write_cb);
    if (err < 0)
        free(wr);
    return err;
}

/* --- TLS: a memory BIO between libuv and mbedTLS ------------------------------------------- */

/* A handshake step in the pool must not touch the socket (libuv handles belong to the loop
 * thread): it collects its records in hs_out, which the loop writes after the step. */
static int hs_out_append(struct rdzv_conn_tls *t, const unsigned char *buf, size_t len)
{
    uint8_t *grown;
    size_t cap = t->hs_out_cap ? t->hs_out_cap : 4096;

    while (cap < t->hs_out_len + len)
        cap *= 2;
    if (cap != t->hs_out_cap) {
        grown = realloc(t->hs_out, cap);
        if (grown == NULL)
            return MBEDTLS_ERR_NET_SEND_FAILED;
        t->hs_out = grown;
        t->hs_out_cap = cap;
    }
    memcpy(t->hs_out + t->hs_out_len, buf, len);
    t->hs_out_len += len;
    return (int)len;
}

/* Writes what t's records left in the cork (a conn that closed meanwhile: drops it, as its queue
 * would be); with keep, t stays the owner. Returns 0 or write_copy's error. */
static int uncork(struct rdzv_conn_tls *t, int keep)
{
    int err = 0;

    if (cork.owner != t)
        return 0;
    if (cork.len > 0 && t->conn != NULL && !uv_is_closing((uv_handle_t *)&t->conn->tcp))
        err = write_copy(t->conn, cork.buf, cork.len);
    cork.len = 0;
    if (!keep)
        cork.owner = NULL;
    return err;
}

/* Never WANT_WRITE: libuv queues without limit, as for plaintext sends. ctx is the conn's TLS
 * state, not the conn: a step still running when the conn closed must find only its own. */
static int bio_send(void *ctx, const unsigned char *buf, size_t len)
{
    struct rdzv_conn_tls *t = ctx;

    if (t->offload && !t->done)
        return hs_out_append(t, buf, len);
    if (t->conn == NULL || uv_is_closing((uv_handle_t *)&t->conn->tcp))
        return MBEDTLS_ERR_NET_SEND_FAILED;
    if (cork.owner == t) {
        if (cork.len + len > sizeof(cork.buf) && uncork(t, 1) < 0)
            return MBEDTLS_ERR_NET_SEND_FAILED;
        if (len <= sizeof(cork.buf)) {
            memcpy(cork.buf + cork.len, buf, len);
            cork.len += len;
            return (int)len;
        }
    }
    if (write_copy(t->conn, buf, len) < 0)
        return MBEDTLS_ERR_NET_SEND_FAILED;
    return (int)len;
}

static int bio_recv(void *ctx, unsigned char *buf, size_t len)
{
    struct rdzv_conn_tls *t = ctx;
    size_t n = t->in_len - t->in_off;

    if (n == 0)
        return MBEDTLS_ERR_SSL_WANT_READ;
    if (n > len)
        n = len;
    memcpy(buf, t->in + t->in_off, n);
    t->in_off += n;
    return (int)n;
}

/* mbedTLS errors become errnos and a reason in rdzv_tls_map_err (tls.c), shared with libmuster. */
static int map_tls_err(struct rdzv_conn_tls *t, int ret)
{
    return rdzv_tls_map_err(&t->ssl, ret, t->done, t->reason, sizeof(t->reason));
}

/* A fatal mbedTLS error: the context is finished (no close_notify), reading stops. */
static void tls_fail(struct rdzv_conn *conn, int ret)
{
    conn->tls->dead = 1;
    stop(conn, map_tls_err(conn->tls, ret));
}

/* --- record buffers -------------------------------------------------------------------------
 * Debian's mbedTLS 2.28 gives every context two record buffers of ~16.7 KiB (it is built
 * without MBEDTLS_SSL_VARIABLE_BUFFER_LENGTH), calloc touches all of them, and a rendezvous
 * record is rarely over a few hundred bytes: 10,000 connections held ~330 MB of buffers that
 * were almost all zeros. So once the handshake is over (calloc and the handshake
 * touched them) and after any larger record, while both buffers hold nothing in flight, the whole
 * pages inside them go back to the kernel (MADV_DONTNEED: they read as zeros when touched
 * again). The first TRIM_KEEP bytes stay: the record sequence counters (in_ctr, out_ctr) and
 * headers live there. Loop thread only, never during a handshake step. */
#define TRIM_KEEP 256
/* A connection carrying bulk (checkpoint replicas: 60 KiB chunks back to back) would
 * otherwise trim after every read, and each madvise interrupts every CPU the process ran on to
 * flush its TLB; so at most one trim per connection this often. A connection that went quiet
 * holds its pages until the next read (a heartbeat) after the interval. */
#define TRIM_EVERY_MS 1000

static void trim_range(unsigned char *buf, size_t len)
{
    static uintptr_t page;

    if (page == 0)
        page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)buf + TRIM_KEEP + page - 1) & ~(page - 1);
    uintptr_t hi = ((uintptr_t)buf + len) & ~(page - 1);

    unsigned char vec[8]; /* a record buffer spans at most 6 pages */
    size_t pages = (hi - lo) / page, i;

    if (buf == NULL || hi <= lo)
        return;
    /* Pages never touched (a buffer fresh from mmap: rdzv_conn_tune_for_server) need nothing:
     * madvise would flush the TLB of every CPU this process ran on, an interrupt each, ~25 %
     * of a join's server CPU on a 2-core VM; mincore costs none. */
    if (pages <= sizeof(vec) && mincore((void *)lo, hi - lo, vec) == 0) {
        for (i = 0; i < pages && !(vec[i] & 1); i++)
            ;
        if (i == pages)
            return;
    }
    (void)madvise((void *)lo, hi - lo, MADV_DONTNEED); /* only an optimisation */
}

static void tls_trim(struct rdzv_conn_tls *t)
{
    if (t->busy || t->ssl.in_left != 0 || t->ssl.out_left != 0 || t->ssl.in_offt != NULL)
        return;
    trim_range(t->ssl.in_buf, MBEDTLS_SSL_IN_BUFFER_LEN);
    trim_range(t->ssl.out_buf, MBEDTLS_SSL_OUT_BUFFER_LEN);
    t->trim_due = 0;
    t->trimmed_ms = uv_now(t->loop);
}

/* Returns 0 or an mbedTLS error. The BIO takes everything, so only records over the maximum
 * fragment make mbedtls_ssl_write return less than asked: loop over those partial writes. */
static int tls_write_all(struct rdzv_conn_tls *t, const uint8_t *p, size_t len)
{
    if (len > TRIM_KEEP)
        t->trim_due = 1;
    while (len > 0) {
        int ret = mbedtls_ssl_write(&t->ssl, p, len);

        if (ret < 0)
            return ret; /* WANT_* cannot happen (no renegotiation, BIO never blocks) */
        p += ret;
        len -= (size_t)ret;
    }
    return 0;
}

static int handshake_over(struct rdzv_conn *conn);

/* Returns 1 when the handshake finished (queued frames sent), 0 to wait, -1 after a failure. */
static int tls_handshake(struct rdzv_conn *conn)
{
    struct rdzv_conn_tls *t = conn->tls;
    int ret = mbedtls_ssl_handshake(&t->ssl);

    if (ret == MBEDTLS_ERR_SSL_WANT_READ || ret == MBEDTLS_ERR_SSL_WANT_WRITE)
        return 0;
    if (ret != 0) {
        tls_fail(conn, ret);
        return -1;
    }
    return handshake_over(conn);
}

/* The handshake finished: frames sent meanwhile go now, after the handshake's last records.
 * Returns 1, or -1 after a failure (reported). */
static int handshake_over(struct rdzv_conn *conn)
{
    struct rdzv_conn_tls *t = conn->tls;
    int ret;

    t->done = 1;
    t->trim_due = 1; /* the handshake's records */
    if (t->pending != NULL) {
        ret = tls_write_all(t, t->pending, t->pending_len);
        mbedtls_platform_zeroize(t->pending, t->pending_len);
        free(t->pending);
        t->pending = NULL;
        t->pending_len = 0;
        if (ret < 0) {
            tls_fail(conn, ret);
            return -1;
        }
    }
    return 1;
}

/* Feeds the ciphertext of one read to mbedTLS and the plaintext to the frame parser. Reads
 * exactly the current frame part, as the plaintext path does; records hold more, which
 * mbedTLS keeps until the next mbedtls_ssl_read, so loop until it wants more ciphertext. */
static void tls_pump(struct rdzv_conn *conn)
{
    struct rdzv_conn_tls *t = conn->tls;
    uint8_t *dst;
    size_t room;
    int ret;

    if (!t->done && tls_handshake(conn) <= 0)
        return;
    while (conn->reading) {
        if (conn->payload == NULL) {
            dst = conn->hdr + conn->hdr_got;
            room = RDZV_HEADER_SIZE - conn->hdr_got;
        } else {
            dst = conn->payload + conn->payload_got;
            room = conn->payload_len - conn->payload_got;
        }
        ret = mbedtls_ssl_read(&t->ssl, dst, room);
        if (ret == MBEDTLS_ERR_SSL_WANT_READ || ret == MBEDTLS_ERR_SSL_WANT_WRITE) {
            if (t->trim_due && uv_now(t->loop) - t->trimmed_ms >= TRIM_EVERY_MS)
                tls_trim(t);
            return;
        }
        if (t->ssl.in_msglen > TRIM_KEEP)
            t->trim_due = 1;
        if (ret == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY || ret == 0) {
            stop(conn, UV_EOF);
            return;
        }
        if (ret < 0) {
            tls_fail(conn, ret);
            return;
        }
        consumed(conn, (size_t)ret);
    }
}

/* --- server handshake steps off the loop ------------------------------------------------------
 * Before a peer has proved anything, its ClientHello costs the server an ECDHE key generation
 * (and a signature in certificate mode): ~1.2 ms with X25519. Done on the loop, ~500 hellos a
 * second from anyone stopped heartbeats, rounds and /metrics. So a server conn runs
 * each handshake step in libuv's thread pool: the loop appends the ciphertext to hs_in, stops
 * reading and queues the step; the step runs mbedtls_ssl_handshake until it wants more, its
 * records collected in hs_out; back on the loop, step_done writes them, then reads again,
 * fails the conn, or (handshake over) sends the held frames and hands leftover ciphertext to
 * the record path, which stays on the loop like the client side. Reading is stopped while a
 * step is out, so one mbedtls_ssl_context is never used by two threads. Shared between
 * threads: the configuration (read-only), the DRBG (mbedTLS locks it), the PSK callback (no
 * state; writes only this conn's cred); mbedTLS's ECDSA and ECDH work on their own copies of a
 * key's group, and RSA keys lock themselves.
 *
 * At most HS_STEPS_RUNNING steps are in the pool at once (one per core, leaving two pool
 * threads free; at least 2); the others wait in a FIFO here: the pool (4 threads unless
 * UV_THREADPOOL_SIZE says otherwise; `muster server` sets it to cores + 2) also runs every
 * uv_fs_* and getaddrinfo of the process, which must not queue behind a flood. The FIFO and the
 * count are the server's (its rdzv_tls: one server, one loop), not the thread's: two servers run in
 * turn on one thread would otherwise wait on steps whose loop is not running. */
/* Pool threads kept free of handshake steps for libuv's file and DNS work. */
#define HS_POOL_SPARE 2

/* mbedTLS's record buffers are over this: from mmap, they are zero pages never touched */
#define FRESH_BUF_MIN (16 * 1024)
/* mappings glibc may make for them (and any other block over FRESH_BUF_MIN), well below the
 * kernel's vm.max_map_count (65530 by default); beyond it, blocks come from the heap again */
#define FRESH_BUF_MAPS 32768

void rdzv_conn_tune_for_server(void)
{
    char n[16];

    if (getenv("UV_THREADPOOL_SIZE") == NULL) {
        snprintf(n, sizeof(n), "%u", uv_available_parallelism() + HS_POOL_SPARE);
        setenv("UV_THREADPOOL_SIZE", n, 0);
    }
    (void)mallopt(M_MMAP_THRESHOLD, FRESH_BUF_MIN);
    (void)mallopt(M_MMAP_MAX, FRESH_BUF_MAPS);
    /* the heap grows by exactly what is asked, so its top rarely has room for a record buffer
     * (one served from there would be cleared, and so touched, by calloc) */
    (void)mallopt(M_TOP_PAD, 0);
}

static unsigned hs_steps_running(void)
{
    static unsigned n;

    if (n == 0) {
        const char *e = getenv("UV_THREADPOOL_SIZE");
        long pool = e != NULL ? strtol(e, NULL, 10) : 4; /* libuv's own default and limits */
        unsigned cpus = uv_available_parallelism();

        pool = pool < 1 ? 1 : pool > 1024 ? 1024 : pool;
        n = pool - HS_POOL_SPARE < (long)cpus ? (unsigned)(pool - HS_POOL_SPARE) : cpus;
        if (n < 2)
            n = 2;
    }
    return n;
}
#define HS_STEPS_RUNNING hs_steps_running()

static void tls_destroy(struct rdzv_conn_tls *t)
{
    mbedtls_ssl_free(&t->ssl);
    if (t->pending != NULL)
        mbedtls_platform_zeroize(t->pending, t->pending_len);
    free(t->pending);
    free(t->hs_in); /* ciphertext only */
    free(t->hs_out);
    rdzv_cred_wipe(&t->cred);
    free(t);
}

/* A step whose conn closed meanwhile: the state, then the hold on the configuration (which
 * mbedtls_ssl_free still reads). */
static void step_orphan_free(struct rdzv_conn_tls *t)
{
    struct rdzv_tls *tls = t->tls;

    tls_destroy(t);
    rdzv_tls_free(tls);
}

/* In the pool: touches only t (the bio callbacks see t, not the conn). */
static void step_work(uv_work_t *req)
{
    struct rdzv_conn_tls *t = req->data;

    t->in = t->hs_in;
    t->in_len = t->hs_in_len;
    t->in_off = 0;
    t->step_ret = mbedtls_ssl_handshake(&t->ssl);
}

static void step_done(uv_work_t *req, int status);

/* Gives waiting steps of tls's server to the pool while fewer than HS_STEPS_RUNNING are there. */
static void steps_start(struct rdzv_tls *tls)
{
    struct rdzv_tls_steps *q = rdzv_tls_steps(tls);

    rdzv_tls_hold(tls); /* an orphan freed below may hold the last other reference */
    while (q->running < HS_STEPS_RUNNING && q->head != NULL) {
        struct rdzv_conn_tls *t = q->head;

        q->head = t->next_wait;
        if (q->head == NULL)
            q->tail = NULL;
        t->next_wait = NULL;
        if (t->conn == NULL) { /* closed while waiting */
            step_orphan_free(t);
            continue;
        }
        t->work.data = t;
        (void)uv_queue_work(t->loop, &t->work, step_work, step_done); /* fails only on NULL */
        t->queued = 1;
        q->running++;
    }
    rdzv_tls_free(tls);
}

/* Queues a step over hs_in; conn's reading pauses until it returns. */
static void step_queue(struct rdzv_conn *conn)
{
    struct rdzv_conn_tls *t = conn->tls;

    uv_read_stop((uv_stream_t *)&conn->tcp);
    t->paused = 1;
    t->busy = 1;
    t->queued = 0;
    rdzv_tls_hold(t->tls); /* the server may close, and free it, while the step runs */
    struct rdzv_tls_steps *q = rdzv_tls_steps(t->tls);

    if (q->tail != NULL)
        ((struct rdzv_conn_tls *)q->tail)->next_wait = t;
    else
        q->head = t;
    q->tail = t;
    steps_start(t->tls);
}

/* Whether the handshake's next step is cheap enough for the loop: everything but the public-key
 * work. With a plain-PSK suite (no forward secrecy) no step does any: the whole handshake is a
 * few hashes, far less than the trip through the pool (a wake-up and two context switches,
 * ~30 % of the server's CPU per join on a 2-core VM: docs/BENCHMARKS.md). With ECDHE-PSK the
 * server's key exchange (ephemeral key) and the client's (shared secret) go to the pool, and
 * in certificate mode every step does, as before: a hello from anyone costs the loop only its
 * parsing. The suite is known once the ClientHello is parsed. */
static int step_cheap(const struct rdzv_conn_tls *t)
{
    const mbedtls_ssl_handshake_params *hs = t->ssl.handshake;

    if (t->cert_mode)
        return 0;
    switch (t->ssl.state) {
    case MBEDTLS_SSL_SERVER_KEY_EXCHANGE:
    case MBEDTLS_SSL_CLIENT_KEY_EXCHANGE:
        return hs != NULL && hs->ciphersuite_info != NULL &&
               hs->ciphersuite_info->key_exchange == MBEDTLS_KEY_EXCHANGE_PSK;
    default:
        return 1;
    }
}

static void step_finish(struct rdzv_conn *conn);

/* Reading again after a step in the pool; steps run on the loop never stopped it (a stop and a
 * start cost two epoll_ctl calls). Returns 0 or a UV_E* error. */
static int resume_reading(struct rdzv_conn *conn)
{
    if (!conn->tls->paused)
        return 0;
    conn->tls->paused = 0;
    return uv_read_start((uv_stream_t *)&conn->tcp, alloc_cb, read_cb);
}

/* Hands hs_in to the handshake: cheap steps run here, on the loop, until one wants more
 * ciphertext, fails, ends the handshake or is not cheap (then the rest goes to the pool). */
static void hs_next(struct rdzv_conn *conn)
{
    struct rdzv_conn_tls *t = conn->tls;
    int ret;

    if (!step_cheap(t)) {
        step_queue(conn);
        return;
    }
    t->in = t->hs_in;
    t->in_len = t->hs_in_len;
    t->in_off = 0;
    do
        ret = mbedtls_ssl_handshake_step(&t->ssl);
    while (ret == 0 && t->ssl.state != MBEDTLS_SSL_HANDSHAKE_OVER && step_cheap(t));
    t->step_ret = ret;
    step_finish(conn);
}

/* Ciphertext of one read during a server handshake: kept for the next step. */
static void hs_received(struct rdzv_conn *conn, size_t n)
{
    struct rdzv_conn_tls *t = conn->tls;
    uint8_t *grown = realloc(t->hs_in, t->hs_in_len + n);

    if (grown == NULL) {
        t->dead = 1;
        snprintf(t->reason, sizeof(t->reason), "TLS handshake: out of memory");
        stop(conn, -ENOMEM);
        return;
    }
    memcpy(grown + t->hs_in_len, tls_in, n);
    t->hs_in = grown;
    t->hs_in_len += n;
    hs_next(conn);
}

/* The handshake is over on a server conn: reading resumes on the loop, and ciphertext that
 * came after the client's Finished goes through the record path. */
static void hs_finished(struct rdzv_conn *conn)
{
    struct rdzv_conn_tls *t = conn->tls;
    int err;

    free(t->hs_out);
    t->hs_out = NULL;
    t->hs_out_cap = 0;
    if (handshake_over(conn) < 0)
        return;
    err = resume_reading(conn);
    if (err < 0) {
        stop(conn, err);
        return;
    }
    if (t->hs_in_len > 0) {
        t->in = t->hs_in;
        t->in_len = t->hs_in_len;
        t->in_off = 0;
        tls_pump(conn); /* may close conn: t lives until its close callback */
        t->in_len = t->in_off = 0;
    }
    free(t->hs_in);
    t->hs_in = NULL;
    t->hs_in_len = 0;
}

/* Back on the loop with a step's result: its records out, then wait, fail or finish. */
static void step_finish(struct rdzv_conn *conn)
{
    struct rdzv_conn_tls *t = conn->tls;
    int ret = t->step_ret, err;
    size_t used = t->in_off, left = t->hs_in_len - t->in_off;

    /* Unsent records end the handshake, unless it failed anyway (then they were an alert). */
    if (t->hs_out_len > 0 && (uv_is_closing((uv_handle_t *)&conn->tcp) ||
                              write_copy(conn, t->hs_out, t->hs_out_len) < 0))
        ret = ret == 0 || ret == MBEDTLS_ERR_SSL_WANT_READ ? MBEDTLS_ERR_NET_SEND_FAILED : ret;
    t->hs_out_len = 0;
    if (left > 0)
        memmove(t->hs_in, t->hs_in + t->in_off, left);
    t->hs_in_len = left;
    t->in_len = t->in_off = 0;
    if (!conn->reading)
        return; /* closing, or stopped: nothing more to do with it */
    if (ret == MBEDTLS_ERR_SSL_WANT_READ || ret == MBEDTLS_ERR_SSL_WANT_WRITE) {
        err = resume_reading(conn);
        if (err < 0)
            stop(conn, err);
        else if (left > 0 && used > 0)
            hs_next(conn); /* more records came with the last read */
        return;
    }
    if (ret != 0) {
        tls_fail(conn, ret);
        return;
    }
    if (t->ssl.state != MBEDTLS_SSL_HANDSHAKE_OVER) {
        hs_next(conn); /* cheap steps stopped before a costly one */
        return;
    }
    hs_finished(conn);
}

static void step_done(uv_work_t *req, int status)
{
    struct rdzv_conn_tls *t = req->data;
    struct rdzv_tls *tls = t->tls;

    /* status is UV_ECANCELED only for a conn that closed (tls_free) */
    (void)status;
    rdzv_tls_hold(tls); /* until the next steps started: t's hold may go with t */
    rdzv_tls_steps(tls)->running--;
    t->busy = 0;
    t->queued = 0;
    if (t->conn == NULL) {
        step_orphan_free(t);
    } else {
        rdzv_tls_free(tls); /* the step's hold; the conn's owner keeps its own */
        step_finish(t->conn);
    }
    steps_start(tls);
    rdzv_tls_free(tls);
}

static void tls_read(struct rdzv_conn *conn, ssize_t nread)
{
    struct rdzv_conn_tls *t = conn->tls;

    if (nread < 0 && !t->done) {
        /* A truncated handshake: a port scanner, a plaintext peer that gave up, a crash. */
        t->dead = 1;
        t->cut = 1;
        snprintf(t->reason, sizeof(t->reason), "TLS handshake: %s",
                 nread == UV_EOF ? "connection closed by the peer" : uv_strerror((int)nread));
        stop(conn, nread == UV_EOF ? -EPROTO : (int)nread);
        return;
    }
    if (nread < 0) {
        stop(conn, (int)nread);
        return;
    }
    if (t->offload && !t->done) {
        hs_received(conn, (size_t)nread);
        return;
    }
    t->in = tls_in;
    t->in_len = (size_t)nread;
    t->in_off = 0;
    cork.owner = t; /* NULL before: uncork() below and rdzv_conn_close() always clear it */
    cork.len = 0;
    tls_pump(conn);
    if (uncork(t, 0) < 0)
        t->dead = 1;           /* as a failed write in tls_send: the read side reports it */
    t->in_len = t->in_off = 0; /* drained, or abandoned with the connection */
}

/* rdzv_conn_send's TLS path. Returns 0 or a negative errno. */
static int tls_send(struct rdzv_conn *conn, const uint8_t *frame, size_t len)
{
    struct rdzv_conn_tls *t = conn->tls;
    uint8_t *grown;
    int ret;

    if (!t->done) {
        grown = realloc(t->pending, t->pending_len + len);
        if (grown == NULL)
            return -ENOMEM;
        memcpy(grown + t->pending_len, frame, len);
        t->pending = grown;
        t->pending_len += len;
        return 0;
    }
    ret = tls_write_all(t, frame, len);
    if (ret < 0) {
        t->dead = 1; /* mbedTLS: a failed write ends the context; the read side reports it */
        return ret == MBEDTLS_ERR_SSL_ALLOC_FAILED ? -ENOMEM : -EPIPE;
    }
    return 0;
}

static void tls_close_notify(struct rdzv_conn *conn)
{
    struct rdzv_conn_tls *t = conn->tls;

    if (t == NULL || !t->done || t->dead || t->notify)
        return;
    t->notify = 1;
    (void)mbedtls_ssl_close_notify(&t->ssl); /* best effort: the peer may be gone */
}

/* The conn is closing: its TLS state goes now, or when the step holding it returns (the
 * pool thread may be inside mbedtls_ssl_handshake on it: freeing it here was the race). */
static void tls_free(struct rdzv_conn *conn)
{
    struct rdzv_conn_tls *t = conn->tls;

    if (t == NULL)
        return;
    conn->tls = NULL;
    t->conn = NULL;
    if (!t->busy) {
        tls_destroy(t);
        return;
    }
    if (t->queued)
        (void)uv_cancel((uv_req_t *)&t->work); /* only if no thread took it yet */
}

/* The PSK callback (tls.c) names the credential the peer is proving; it is the connection's
 * only once the handshake finishes (rdzv_conn_cred). */
static void conn_cred_sink(mbedtls_ssl_context *ssl, const struct rdzv_cred *c)
{
    struct rdzv_conn_tls *t = (struct rdzv_conn_tls *)(void *)ssl;

    t->cred = *c;
}

int rdzv_conn_start_tls(struct rdzv_conn *conn, struct rdzv_tls *tls, int is_server)
{
    const char *name = rdzv_tls_server_name(tls);
    struct rdzv_conn_tls *t;
    int ret;

    ret = rdzv_tls_prepare(tls);
    if (ret < 0)
        return ret;
    t = calloc(1, sizeof(*t));
    if (t == NULL)
        return -ENOMEM;
    mbedtls_ssl_init(&t->ssl);
    conn->tls = t; /* closed_cb frees it from here on */
    ret = mbedtls_ssl_setup(&t->ssl, rdzv_tls_conf(tls));
    if (ret == 0 && !is_server && name != NULL)
        ret = mbedtls_ssl_set_hostname(&t->ssl, name);
    if (ret != 0)
        return ret == MBEDTLS_ERR_SSL_ALLOC_FAILED ? -ENOMEM : -EPROTO;
    t->conn = conn;
    t->tls = tls;
    t->loop = conn->tcp.loop;
    t->offload = is_server;
    mbedtls_ssl_set_bio(&t->ssl, t, bio_send, bio_recv, NULL);
    t->cert_mode = rdzv_tls_cert_mode(tls);
    if (is_server)
        rdzv_tls_set_cred_sink(tls, conn_cred_sink);
    ret = rdzv_conn_start(conn);
    if (ret < 0 || is_server)
        return ret;
    ret = mbedtls_ssl_handshake(&t->ssl); /* the ClientHello */
    if (ret == MBEDTLS_ERR_SSL_WANT_READ || ret == MBEDTLS_ERR_SSL_WANT_WRITE)
        return 0;
    t->dead = 1;
    conn->reading = 0;
    uv_read_stop((uv_stream_t *)&conn->tcp);
    return map_tls_err(t, ret);
}

int rdzv_conn_handshake_done(const struct rdzv_conn *conn)
{
    return conn->tls == NULL || (conn->tls->done && !conn->tls->dead);
}

int rdzv_conn_start_local(struct rdzv_conn *conn, uv_os_sock_t fd, const struct rdzv_cred *cred)
{
    int err = uv_tcp_open(&conn->tcp, fd);

    if (err < 0) {
        close(fd); /* the handle did not take it: the fd is ours on every path */
        return err;
    }
    conn->local = 1;
    if (cred != NULL) {
        conn->local_cred = malloc(sizeof(*conn->local_cred));
        if (conn->local_cred == NULL)
            return UV_ENOMEM;
        *conn->local_cred = *cred;
    }
    err = uv_read_start((uv_stream_t *)&conn->tcp, alloc_cb, read_cb);
    if (err < 0)
        return err;
    conn->reading = 1;
    return 0;
}

int rdzv_conn_cred(const struct rdzv_conn *conn, struct rdzv_cred *out)
{
    memset(out, 0, sizeof(*out));
    if (conn->local) {
        if (conn->local_cred == NULL)
            return -EACCES;
        *out = *conn->local_cred;
        return 0;
    }
    if (conn->tls == NULL || !rdzv_conn_handshake_done(conn))
        return -ENOTCONN;
    if (conn->tls->cred.kind != RDZV_CRED_NONE)
        *out = conn->tls->cred;
    else if (conn->tls->cert_mode)
        out->kind = RDZV_CRED_CERT; /* no PSK: the client's certificate verified */
    else
        return -EACCES;
    return 0;
}

int rdzv_conn_tls_cut(const struct rdzv_conn *conn)
{
    return conn->tls != NULL && conn->tls->cut;
}

const char *rdzv_conn_tls_error(const struct rdzv_conn *conn)
{
    return conn->tls != NULL ? conn->tls->reason : "";
}

const char *rdzv_conn_tls_suite(const struct rdzv_conn *conn)
{
    if (!rdzv_conn_handshake_done(conn) || conn->tls == NULL)
        return "";
    return mbedtls_ssl_get_ciphersuite(&conn->tls->ssl);
}

size_t rdzv_conn_unsent(const struct rdzv_conn *conn)
{
    size_t n = uv_stream_get_write_queue_size((const uv_stream_t *)&conn->tcp);

    if (conn->tls == NULL)
        return n;
    return n + conn->tls->pending_len + (cork.owner == conn->tls ? cork.len : 0);
}

/* The cap on unsent bytes (STYLE.md "Every client bounded", like Redis's output buffer
 * limits): a peer that stops reading while asking for replies would otherwise grow this
 * process by every reply. The frame is refused before it is queued, so the queue never passes
 * send_max, except by one frame sent into an empty queue (or a frame larger than the cap could
 * never be sent). */
static int over_send_max(const struct rdzv_conn *conn, size_t len)
{
    size_t unsent;

    if (conn->send_max == 0)
        return 0;
    unsent = rdzv_conn_unsent(conn);
    return unsent > 0 && unsent + len > conn->send_max;
}

int rdzv_conn_send(struct rdzv_conn *conn, const struct rdzv_msg *msg)
{
    /* Frames are encoded here, then copied: into mbedTLS's record (TLS), or written (plaintext:
     * only what the socket did not take is copied, write_copy). One buffer per loop thread, as
     * tls_in: a 64 KiB block per send came from mmap once malloc was tuned for servers
     * (rdzv_conn_tune_for_server). */
    static _Thread_local uint8_t frame[RDZV_HEADER_SIZE + RDZV_MAX_PAYLOAD];
    size_t len;
    int err;

    if (conn->closing || (conn->tls != NULL && conn->tls->dead))
        return -ENOTCONN;
    err = rdzv_msg_encode(msg, frame, sizeof(frame), &len);
    if (err < 0)
        return err;
    if (over_send_max(conn, len))
        return -ENOBUFS;
    err = conn->tls != NULL ? tls_send(conn, frame, len) : write_copy(conn, frame, len);
    if (err == 0)
        conn->bytes_out += len;
    return err;
}

static void closed_cb(uv_handle_t *handle)
{
    struct rdzv_conn *conn = handle->data;

    payload_free(conn);
    tls_free(conn);
    if (conn->local_cred != NULL) {
        rdzv_cred_wipe(conn->local_cred);
        free(conn->local_cred);
        conn->local_cred = NULL;
    }
    if (conn->close_cb != NULL)
        conn->close_cb(conn);
}

static void shutdown_cb(uv_shutdown_t *req, int status)
{
    struct rdzv_conn *conn = req->handle->data;

    (void)status;
    conn->shutting = 0;
    /* uv_close() during the shutdown cancels it and lands here while already closing. */
    if (!uv_is_closing((uv_handle_t *)&conn->tcp))
        uv_close((uv_handle_t *)&conn->tcp, closed_cb);
}

void rdzv_conn_close(struct rdzv_conn *conn, int flush, rdzv_conn_close_cb close_cb)
{
    if (!conn->closing) {
        conn->closing = 1;
        conn->close_cb = close_cb;
    }
    if (uv_is_closing((uv_handle_t *)&conn->tcp))
        return;
    if (conn->reading) {
        conn->reading = 0;
        uv_read_stop((uv_stream_t *)&conn->tcp);
    }
    fair_unlink(conn);
    tls_close_notify(conn);
    if (conn->tls != NULL)
        (void)uncork(conn->tls, 0); /* the replies held so far, close_notify last, then shutdown */
    if (flush && conn->shutting)
        return;
    /* uv_shutdown fails (UV_ENOTCONN) on a handle that never connected: close it at once. */
    if (flush && uv_shutdown(&conn->shutdown, (uv_stream_t *)&conn->tcp, shutdown_cb) == 0) {
        conn->shutting = 1;
        return;
    }
    uv_close((uv_handle_t *)&conn->tcp, closed_cb);
}
