/* The bulk data path of a checkpoint replica: see replica_bulk.h. */
#include "replica_bulk.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <poll.h>
#include <signal.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "replica_write.h"

#define HELLO_BIT AGENT_REPLICA_BULK_HELLO_BIT
#define SOCKBUF (4 << 20)

struct agent_replica_bulk {
    uv_loop_t *loop;
    uv_async_t async; /* the threads' news */
    uv_mutex_t mu;
    uv_cond_t cv;
    int sender;
    unsigned streams;
    uint32_t xfer;
    uint64_t size;
    uint8_t key[32]; /* the copy's AES-256-GCM key (derived), wiped when freed */
    agent_replica_bulk_cb cb;
    void *data;
    uint64_t setup_deadline_ns;
    double ns_per_byte; /* the cap: 0 none */
    uint64_t pace_ns;   /* under mu: when the next chunk may go */
    /* sender */
    int lfd;                      /* the listening socket */
    int fd;                       /* a file checkpoint (dup), -1 for a directory */
    struct agent_replica_src src; /* a directory checkpoint's stream (clone), under read_mu */
    uv_mutex_t read_mu;
    /* receiver */
    char host[256];
    unsigned port;
    uint8_t salt[32];
    /* under mu */
    struct agent_replica_writer *wr; /* receiver: NULL once closed */
    uint64_t next_off;               /* sender: the next chunk to take */
    uint64_t confirmed;              /* sender: written at the receiver */
    uint64_t delivered;              /* receiver: bytes handed to the writer, in order */
    unsigned claimed;                /* sender: streams whose hello was proved (bits) */
    int socks[AGENT_REPLICA_BULK_STREAMS_MAX];
    unsigned running; /* threads not yet ended */
    int stop;         /* closed or failed: every thread ends */
    int failed;
    int refused; /* receiver: the failure is the sender's lie */
    char why[256];
    int closed;  /* the loop let go: no callback, the async is closing */
    int refs;    /* threads + the loop's (dropped when the async closed) */
    int told;    /* the outcome went to the loop */
    int outcome; /* 0 running, 1 done, 2 failed */
    /* where the streams' time went, summed over them (agent_replica_bulk_times): sender read,
     * seal, send, waiting for the window; receiver receive, open, waiting for the chunks
     * before its own */
    uint64_t phase_ns[4];
};

struct thread_arg {
    struct agent_replica_bulk *b;
    unsigned index; /* receiver: the stream it opens; sender: an accepting thread's number */
};

unsigned agent_replica_bulk_streams(void)
{
    const char *env = getenv("MUSTER_REPLICATE_STREAMS");
    unsigned n;

    if (env != NULL && *env != '\0') {
        char *end;
        unsigned long v = strtoul(env, &end, 10);

        if (*end == '\0' && v <= AGENT_REPLICA_BULK_STREAMS_MAX)
            return (unsigned)v;
    }
    n = uv_available_parallelism() / 4;
    return n < 1 ? 1 : n > 4 ? 4 : n;
}

/* --- the cipher ------------------------------------------------------------------------------ */

static int derive(const uint8_t link_key[32], const uint8_t salt[32], uint32_t xfer,
                  uint8_t out[32])
{
    static const char label[] = "muster replica bulk v1";
    uint8_t info[sizeof(label) - 1 + 4];
    EVP_PKEY_CTX *k = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, NULL);
    size_t len = 32;
    int ok;

    memcpy(info, label, sizeof(label) - 1);
    for (int i = 0; i < 4; i++)
        info[sizeof(label) - 1 + i] = (uint8_t)(xfer >> (24 - 8 * i));
    ok = k != NULL && EVP_PKEY_derive_init(k) > 0 &&
         EVP_PKEY_CTX_set_hkdf_md(k, EVP_sha256()) > 0 &&
         EVP_PKEY_CTX_set1_hkdf_salt(k, salt, 32) > 0 &&
         EVP_PKEY_CTX_set1_hkdf_key(k, link_key, 32) > 0 &&
         EVP_PKEY_CTX_add1_hkdf_info(k, info, sizeof(info)) > 0 &&
         EVP_PKEY_derive(k, out, &len) > 0 && len == 32;
    EVP_PKEY_CTX_free(k);
    return ok ? 0 : -EIO;
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (24 - 8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) << 32 | get32(p + 4);
}

static void nonce(uint8_t iv[12], uint32_t stream, uint64_t seq)
{
    put32(iv, stream);
    put64(iv + 4, seq);
}

/* buf: header, n bytes (sealed in place), tag. */
static int seal(EVP_CIPHER_CTX *c, uint32_t stream, uint64_t seq, uint8_t type, uint64_t offset,
                uint8_t *buf, uint32_t n)
{
    uint8_t iv[12];
    int len, ok;

    put32(buf, n);
    buf[4] = type;
    buf[5] = buf[6] = buf[7] = 0;
    put64(buf + 8, offset);
    nonce(iv, stream, seq);
    ok = EVP_EncryptInit_ex(c, NULL, NULL, NULL, iv) > 0 &&
         EVP_EncryptUpdate(c, NULL, &len, buf, AGENT_REPLICA_BULK_HDR) > 0 &&
         (n == 0 || EVP_EncryptUpdate(c, buf + AGENT_REPLICA_BULK_HDR, &len,
                                      buf + AGENT_REPLICA_BULK_HDR, (int)n) > 0) &&
         EVP_EncryptFinal_ex(c, buf + AGENT_REPLICA_BULK_HDR + n, &len) > 0 &&
         EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, AGENT_REPLICA_BULK_TAG,
                             buf + AGENT_REPLICA_BULK_HDR + n) > 0;
    return ok ? 0 : -EIO;
}

/* Opens a record: its header hdr, n sealed bytes at data (opened in place) and the tag after
 * them. 0, or -EBADMSG when the tag fails. */
static int open_rec(EVP_CIPHER_CTX *c, uint32_t stream, uint64_t seq, const uint8_t *hdr,
                    uint8_t *data, uint32_t n)
{
    uint8_t iv[12];
    int len;

    nonce(iv, stream, seq);
    if (EVP_DecryptInit_ex(c, NULL, NULL, NULL, iv) <= 0 ||
        EVP_DecryptUpdate(c, NULL, &len, hdr, AGENT_REPLICA_BULK_HDR) <= 0 ||
        (n > 0 && EVP_DecryptUpdate(c, data, &len, data, (int)n) <= 0) ||
        EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, AGENT_REPLICA_BULK_TAG, data + n) <= 0)
        return -EIO;
    return EVP_DecryptFinal_ex(c, data + n, &len) > 0 ? 0 : -EBADMSG;
}

static EVP_CIPHER_CTX *cipher(const uint8_t key[32], int enc)
{
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();

    if (c != NULL && (enc ? EVP_EncryptInit_ex(c, EVP_aes_256_gcm(), NULL, key, NULL)
                          : EVP_DecryptInit_ex(c, EVP_aes_256_gcm(), NULL, key, NULL)) <= 0) {
        EVP_CIPHER_CTX_free(c);
        c = NULL;
    }
    return c;
}

int agent_replica_bulk_seal_for_test(const uint8_t link_key[32], const uint8_t salt[32],
                                     uint32_t xfer, uint32_t stream, uint64_t seq, uint8_t type,
                                     uint64_t offset, const uint8_t *p, uint32_t n, uint8_t *buf)
{
    uint8_t key[32];
    EVP_CIPHER_CTX *c;
    int rc;

    if ((rc = derive(link_key, salt, xfer, key)) != 0)
        return rc;
    c = cipher(key, 1);
    memset(key, 0, sizeof(key));
    if (c == NULL)
        return -ENOMEM;
    if (n > 0)
        memcpy(buf + AGENT_REPLICA_BULK_HDR, p, n);
    rc = seal(c, stream, seq, type, offset, buf, n);
    EVP_CIPHER_CTX_free(c);
    return rc;
}

/* --- shared by both ends --------------------------------------------------------------------- */

static uint64_t now_ns(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Under mu: tells the loop when something is to be told. */
static void tell_locked(struct agent_replica_bulk *b)
{
    if (!b->closed)
        uv_async_send(&b->async);
}

static void fail_locked(struct agent_replica_bulk *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void fail_locked(struct agent_replica_bulk *b, const char *fmt, ...)
{
    va_list ap;

    if (!b->failed && !b->stop) {
        va_start(ap, fmt);
        vsnprintf(b->why, sizeof(b->why), fmt, ap);
        va_end(ap);
        b->failed = 1;
    }
    b->stop = 1;
    for (unsigned i = 0; i < AGENT_REPLICA_BULK_STREAMS_MAX; i++)
        if (b->socks[i] >= 0)
            shutdown(b->socks[i], SHUT_RDWR); /* wakes the threads blocked on them */
    if (b->lfd >= 0)
        shutdown(b->lfd, SHUT_RDWR);
    uv_cond_broadcast(&b->cv);
    tell_locked(b);
}

static void free_bulk(struct agent_replica_bulk *b)
{
    if (b->lfd >= 0)
        close(b->lfd);
    if (b->fd >= 0)
        close(b->fd);
    agent_replica_src_close(&b->src);
    uv_mutex_destroy(&b->read_mu);
    uv_cond_destroy(&b->cv);
    uv_mutex_destroy(&b->mu);
    memset(b->key, 0, sizeof(b->key));
    free(b);
}

static void unref(struct agent_replica_bulk *b)
{
    int last;

    uv_mutex_lock(&b->mu);
    last = --b->refs == 0;
    uv_mutex_unlock(&b->mu);
    if (last)
        free_bulk(b);
}

/* A thread ends: the last one says how it all went. */
static void thread_end(struct agent_replica_bulk *b, int sock, unsigned slot)
{
    uv_mutex_lock(&b->mu);
    if (slot < AGENT_REPLICA_BULK_STREAMS_MAX && b->socks[slot] == sock)
        b->socks[slot] = -1;
    if (sock >= 0)
        close(sock);
    if (--b->running == 0 && !b->failed) {
        uint64_t got = b->sender ? b->next_off : b->delivered;

        if (got != b->size && !b->stop)
            fail_locked(b,
                        b->sender ? "the bulk streams ended at %" PRIu64 " of %" PRIu64 " bytes"
                                  : "the sender's bulk streams closed at %" PRIu64 " of %" PRIu64
                                    " bytes",
                        got, b->size);
        else if (got == b->size)
            tell_locked(b);
    }
    uv_mutex_unlock(&b->mu);
    unref(b);
}

static void on_async(uv_async_t *a)
{
    struct agent_replica_bulk *b = a->data;
    enum agent_replica_bulk_event ev;
    char why[sizeof(b->why)];
    int tell = 0;

    uv_mutex_lock(&b->mu);
    if (!b->told && !b->closed) {
        if (b->failed) {
            tell = 1;
            ev = b->refused ? AGENT_REPLICA_BULK_REFUSED : AGENT_REPLICA_BULK_FAILED;
        } else if (b->running == 0 && (b->sender ? b->next_off : b->delivered) == b->size) {
            tell = 1;
            ev = b->sender ? AGENT_REPLICA_BULK_SENT : AGENT_REPLICA_BULK_RECEIVED;
        } else if (!b->sender && b->delivered == b->size) {
            tell = 1; /* every byte is with the writer: its threads only wait for EOF now */
            ev = AGENT_REPLICA_BULK_RECEIVED;
        }
        b->told = tell;
        memcpy(why, b->why, sizeof(why));
    }
    uv_mutex_unlock(&b->mu);
    if (tell)
        b->cb(b->data, ev, why);
}

static void on_async_closed(uv_handle_t *h)
{
    unref(h->data);
}

void agent_replica_bulk_close(struct agent_replica_bulk *b)
{
    if (b == NULL)
        return;
    uv_mutex_lock(&b->mu);
    b->wr = NULL; /* not touched from here on: the threads feed it under mu */
    b->stop = 1;
    for (unsigned i = 0; i < AGENT_REPLICA_BULK_STREAMS_MAX; i++)
        if (b->socks[i] >= 0)
            shutdown(b->socks[i], SHUT_RDWR);
    if (b->lfd >= 0)
        shutdown(b->lfd, SHUT_RDWR);
    b->closed = 1;
    uv_cond_broadcast(&b->cv);
    uv_mutex_unlock(&b->mu);
    uv_close((uv_handle_t *)&b->async, on_async_closed);
}

/* All of n bytes, or -1 (errno set; ETIMEDOUT past the socket's timeouts). 0 at EOF before
 * the first byte when eof_ok. */
static int recv_all(int s, uint8_t *p, size_t n, int eof_ok)
{
    size_t got = 0;

    while (got < n) {
        ssize_t k = recv(s, p + got, n - got, 0);

        if (k == 0) {
            if (got == 0 && eof_ok)
                return 0;
            errno = EPIPE;
            return -1;
        }
        if (k < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                errno = ETIMEDOUT;
            return -1;
        }
        got += (size_t)k;
    }
    return 1;
}

static int send_all(int s, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t k = send(s, p, n, MSG_NOSIGNAL);

        if (k < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                errno = ETIMEDOUT;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* The agent's signals are loop events (uv_signal): the main thread takes them. */
static void block_signals(void)
{
    sigset_t all;

    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
}

static void tune(int s)
{
    int one = 1, buf = SOCKBUF;
    struct timeval tv = {.tv_sec = AGENT_REPLICA_BULK_STALL_MS / 1000};

    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(s, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
    setsockopt(s, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

static int start_threads(struct agent_replica_bulk *b, void *(*fn)(void *))
{
    for (unsigned i = 0; i < b->streams; i++) {
        struct thread_arg *a = malloc(sizeof(*a));
        pthread_t t;

        if (a == NULL)
            return -ENOMEM;
        a->b = b;
        a->index = i;
        uv_mutex_lock(&b->mu);
        b->running++;
        b->refs++;
        uv_mutex_unlock(&b->mu);
        if (pthread_create(&t, NULL, fn, a) != 0) {
            free(a);
            uv_mutex_lock(&b->mu);
            b->running--;
            b->refs--;
            fail_locked(b, "no thread for a bulk stream");
            uv_mutex_unlock(&b->mu);
            return -EAGAIN;
        }
        pthread_detach(t);
    }
    return 0;
}

static struct agent_replica_bulk *bulk_new(uv_loop_t *loop, int sender, unsigned streams,
                                           uint32_t xfer, uint64_t size, agent_replica_bulk_cb cb,
                                           void *data)
{
    struct agent_replica_bulk *b = calloc(1, sizeof(*b));

    if (b == NULL)
        return NULL;
    b->loop = loop;
    b->sender = sender;
    b->streams = streams < 1                                ? 1
                 : streams > AGENT_REPLICA_BULK_STREAMS_MAX ? AGENT_REPLICA_BULK_STREAMS_MAX
                                                            : streams;
    b->xfer = xfer;
    b->size = size;
    b->cb = cb;
    b->data = data;
    b->lfd = b->fd = -1;
    agent_replica_src_init(&b->src);
    for (unsigned i = 0; i < AGENT_REPLICA_BULK_STREAMS_MAX; i++)
        b->socks[i] = -1;
    b->refs = 1;
    b->setup_deadline_ns = now_ns() + (uint64_t)AGENT_REPLICA_BULK_SETUP_MS * 1000000u;
    if (uv_mutex_init(&b->mu) != 0 || uv_cond_init(&b->cv) != 0 ||
        uv_mutex_init(&b->read_mu) != 0 || uv_async_init(loop, &b->async, on_async) != 0) {
        free(b); /* never fails on Linux short of memory: the handles need no undoing then */
        return NULL;
    }
    b->async.data = b;
    return b;
}

/* --- the sender ------------------------------------------------------------------------------ */

/* A connection that proves the key with its hello, claiming a stream; -1 at the deadline or on
 * stop. */
static int accept_stream(struct agent_replica_bulk *b, EVP_CIPHER_CTX *open_c, unsigned *stream)
{
    uint8_t hello[AGENT_REPLICA_BULK_HDR + AGENT_REPLICA_BULK_TAG];

    for (;;) {
        uint64_t now = now_ns();
        struct pollfd p = {.fd = b->lfd, .events = POLLIN};
        int s, stop;
        uint32_t idx;

        uv_mutex_lock(&b->mu);
        stop = b->stop;
        uv_mutex_unlock(&b->mu);
        if (stop || now >= b->setup_deadline_ns)
            return -1;
        if (poll(&p, 1, (int)((b->setup_deadline_ns - now) / 1000000u) + 1) <= 0)
            continue;
        if ((s = accept4(b->lfd, NULL, NULL, SOCK_CLOEXEC)) < 0)
            continue; /* another thread took it, or the listener was shut down */
        {
            struct timeval tv = {.tv_sec = 1};

            setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)); /* a silent stranger */
        }
        if (recv_all(s, hello, sizeof(hello), 0) != 1 || get32(hello) != 0 ||
            hello[4] != AGENT_REPLICA_BULK_HELLO ||
            (idx = (uint32_t)get64(hello + 8)) >= b->streams ||
            open_rec(open_c, HELLO_BIT | idx, 0, hello, hello + AGENT_REPLICA_BULK_HDR, 0) != 0) {
            close(s); /* not a receiver of this copy: the next one */
            continue;
        }
        uv_mutex_lock(&b->mu);
        if (b->stop || (b->claimed & (1u << idx))) {
            uv_mutex_unlock(&b->mu);
            close(s);
            continue;
        }
        b->claimed |= 1u << idx;
        b->socks[idx] = s;
        uv_mutex_unlock(&b->mu);
        tune(s);
        *stream = idx;
        return s;
    }
}

static int read_chunk(struct agent_replica_bulk *b, uint8_t *p, uint32_t len, uint64_t off)
{
    int rc;

    if (b->fd >= 0) {
        ssize_t n = pread(b->fd, p, len, (off_t)off);

        return n == (ssize_t)len ? 0 : n < 0 ? -errno : -ESTALE;
    }
    uv_mutex_lock(&b->read_mu);
    rc = agent_replica_src_read(&b->src, p, len, off);
    uv_mutex_unlock(&b->read_mu);
    return rc;
}

static void *send_thread(void *arg)
{
    struct agent_replica_bulk *b = ((struct thread_arg *)arg)->b;
    uint8_t *buf =
        malloc(AGENT_REPLICA_BULK_HDR + AGENT_REPLICA_BULK_CHUNK + AGENT_REPLICA_BULK_TAG);
    EVP_CIPHER_CTX *enc = cipher(b->key, 1), *dec = cipher(b->key, 0);
    unsigned stream = AGENT_REPLICA_BULK_STREAMS_MAX;
    uint64_t seq = 1, t_read = 0, t_seal = 0, t_send = 0;
    int s = -1;

    free(arg);
    block_signals();
    if (buf == NULL || enc == NULL || dec == NULL) {
        uv_mutex_lock(&b->mu);
        fail_locked(b, "no memory for a bulk stream");
        uv_mutex_unlock(&b->mu);
        goto out;
    }
    if ((s = accept_stream(b, dec, &stream)) < 0) {
        uv_mutex_lock(&b->mu);
        fail_locked(b, "the receiver did not open its %u bulk streams within %d ms", b->streams,
                    AGENT_REPLICA_BULK_SETUP_MS);
        uv_mutex_unlock(&b->mu);
        goto out;
    }
    for (;;) {
        uint64_t off, limit = now_ns() + (uint64_t)AGENT_REPLICA_BULK_STALL_MS * 1000000u;
        uint64_t t0 = now_ns(), t1, t2, t3;
        uint32_t len;
        int rc;

        uv_mutex_lock(&b->mu);
        while (!b->stop && b->next_off < b->size &&
               b->next_off + AGENT_REPLICA_BULK_CHUNK - b->confirmed > AGENT_REPLICA_BULK_WINDOW) {
            if (now_ns() >= limit) {
                fail_locked(b, "the receiver confirmed nothing for %d s",
                            AGENT_REPLICA_BULK_STALL_MS / 1000);
                break;
            }
            uv_cond_timedwait(&b->cv, &b->mu, 100 * 1000000u);
        }
        if (b->stop || b->next_off >= b->size) {
            uv_mutex_unlock(&b->mu);
            break;
        }
        off = b->next_off;
        len = b->size - off < AGENT_REPLICA_BULK_CHUNK ? (uint32_t)(b->size - off)
                                                       : AGENT_REPLICA_BULK_CHUNK;
        b->next_off += len;
        if (b->ns_per_byte > 0) { /* --replicate-bandwidth: this chunk's turn */
            uint64_t due = b->pace_ns > now_ns() ? b->pace_ns : now_ns();

            b->pace_ns = due + (uint64_t)(b->ns_per_byte * len);
            while (!b->stop && now_ns() < due)
                uv_cond_timedwait(&b->cv, &b->mu, due - now_ns());
        }
        t1 = now_ns();
        b->phase_ns[3] += t1 - t0;
        uv_mutex_unlock(&b->mu);
        rc = read_chunk(b, buf + AGENT_REPLICA_BULK_HDR, len, off);
        t2 = now_ns();
        t_read += t2 - t1;
        if (rc == 0)
            rc = seal(enc, stream, seq++, AGENT_REPLICA_BULK_DATA, off, buf, len);
        t3 = now_ns();
        t_seal += t3 - t2;
        if (rc == 0)
            rc = send_all(s, buf, AGENT_REPLICA_BULK_HDR + len + AGENT_REPLICA_BULK_TAG);
        t_send += now_ns() - t3;
        if (rc != 0) {
            int err = errno;

            uv_mutex_lock(&b->mu);
            if (rc == -ESTALE)
                fail_locked(b, "the sender's file changed while it was read");
            else if (rc == -1)
                fail_locked(b, "bulk stream %u: %s", stream, strerror(err));
            else
                fail_locked(b, "bulk stream %u: %s", stream, strerror(-rc));
            uv_mutex_unlock(&b->mu);
            break;
        }
    }
out:
    /* before thread_end: SENT comes once every thread ended, with every thread's time in */
    uv_mutex_lock(&b->mu);
    b->phase_ns[0] += t_read, b->phase_ns[1] += t_seal, b->phase_ns[2] += t_send;
    uv_mutex_unlock(&b->mu);
    EVP_CIPHER_CTX_free(enc);
    EVP_CIPHER_CTX_free(dec);
    free(buf);
    thread_end(b, s, stream);
    return NULL;
}

static int listen_on(const char *addr, unsigned port, uint16_t *port_out)
{
    struct addrinfo hints = {.ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV,
                             .ai_socktype = SOCK_STREAM};
    struct addrinfo *ai = NULL;
    char ps[16];
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    int s = -1, one = 1, rc;

    snprintf(ps, sizeof(ps), "%u", port);
    if ((rc = getaddrinfo(addr != NULL && *addr ? addr : NULL, ps, &hints, &ai)) != 0) {
        hints.ai_flags &= ~AI_NUMERICHOST; /* a host name: every address, as the link does */
        if ((rc = getaddrinfo(NULL, ps, &hints, &ai)) != 0)
            return -EADDRNOTAVAIL;
    }
    s = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0 || setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(s, ai->ai_addr, ai->ai_addrlen) != 0 || listen(s, 16) != 0 ||
        getsockname(s, (struct sockaddr *)&ss, &sl) != 0) {
        rc = -errno;
        if (s >= 0)
            close(s);
        freeaddrinfo(ai);
        return rc;
    }
    freeaddrinfo(ai);
    *port_out = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                               : ((struct sockaddr_in *)&ss)->sin_port);
    return s;
}

int agent_replica_bulk_serve(uv_loop_t *loop, const char *bind_addr, unsigned port,
                             const uint8_t link_key[32], uint32_t xfer, unsigned streams,
                             uint64_t size, double bytes_per_ms, int fd,
                             const struct agent_replica_src *src, agent_replica_bulk_cb cb,
                             void *data, struct agent_replica_bulk **out, uint16_t *port_out,
                             uint8_t salt_out[32])
{
    struct agent_replica_bulk *b = bulk_new(loop, 1, streams, xfer, size, cb, data);
    int rc;

    if (b == NULL)
        return -ENOMEM;
    b->ns_per_byte = bytes_per_ms > 0 ? 1e6 / bytes_per_ms : 0;
    if (getrandom(salt_out, 32, 0) != 32 || derive(link_key, salt_out, xfer, b->key) != 0) {
        rc = -EIO;
        goto fail;
    }
    if (src != NULL && src->dirfd >= 0)
        rc = agent_replica_src_clone(&b->src, src);
    else
        rc = (b->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0 ? -errno : 0;
    if (rc != 0)
        goto fail;
    if ((b->lfd = listen_on(bind_addr, port, port_out)) < 0) {
        rc = b->lfd;
        b->lfd = -1;
        goto fail;
    }
    if ((rc = start_threads(b, send_thread)) != 0) {
        agent_replica_bulk_close(b);
        return rc;
    }
    *out = b;
    return 0;
fail:
    b->closed = 1;
    uv_close((uv_handle_t *)&b->async, on_async_closed);
    return rc;
}

void agent_replica_bulk_confirmed(struct agent_replica_bulk *b, uint64_t written)
{
    if (b == NULL)
        return;
    uv_mutex_lock(&b->mu);
    if (written > b->confirmed && written <= b->next_off) {
        b->confirmed = written;
        uv_cond_broadcast(&b->cv);
    }
    uv_mutex_unlock(&b->mu);
}

void agent_replica_bulk_times(struct agent_replica_bulk *b, char *out, size_t cap)
{
    uint64_t t[4];

    uv_mutex_lock(&b->mu);
    memcpy(t, b->phase_ns, sizeof(t));
    uv_mutex_unlock(&b->mu);
    if (b->sender)
        snprintf(out, cap,
                 "%u streams' threads: read %" PRIu64 ", seal %" PRIu64 ", send %" PRIu64
                 ", waiting for the window %" PRIu64 " ms",
                 b->streams, t[0] / 1000000, t[1] / 1000000, t[2] / 1000000, t[3] / 1000000);
    else
        snprintf(out, cap,
                 "%u streams' threads: receive %" PRIu64 ", open %" PRIu64
                 ", waiting for the chunks before %" PRIu64 " ms",
                 b->streams, t[0] / 1000000, t[1] / 1000000, t[2] / 1000000);
}

uint64_t agent_replica_bulk_taken(struct agent_replica_bulk *b)
{
    uint64_t n;

    uv_mutex_lock(&b->mu);
    n = b->next_off;
    uv_mutex_unlock(&b->mu);
    return n;
}

/* --- the receiver ---------------------------------------------------------------------------- */

static int dial(struct agent_replica_bulk *b)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *ai = NULL, *p;
    char ps[16];
    int s = -1;

    snprintf(ps, sizeof(ps), "%u", b->port);
    if (getaddrinfo(b->host, ps, &hints, &ai) != 0)
        return -1;
    for (p = ai; p != NULL && s < 0; p = p->ai_next) {
        uint64_t now = now_ns();
        struct pollfd pf;
        int err = 0;
        socklen_t el = sizeof(err);

        if ((s = socket(p->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) < 0)
            continue;
        if (connect(s, p->ai_addr, p->ai_addrlen) != 0 && errno != EINPROGRESS)
            goto next;
        pf = (struct pollfd){.fd = s, .events = POLLOUT};
        if (now >= b->setup_deadline_ns ||
            poll(&pf, 1, (int)((b->setup_deadline_ns - now) / 1000000u) + 1) != 1 ||
            getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0)
            goto next;
        fcntl(s, F_SETFL, fcntl(s, F_GETFL) & ~O_NONBLOCK);
        break;
    next:
        close(s);
        s = -1;
    }
    freeaddrinfo(ai);
    return s;
}

/* Hands the chunk at off (a buffer of agent_replica_writer_buf's) to the writer once every byte
 * before it is there: 0 (the writer took p), or -1 when the transfer ended (failed here, or
 * stopped; p is still the caller's). */
static int deliver(struct agent_replica_bulk *b, uint8_t *p, uint32_t len, uint64_t off,
                   uint64_t recv_ns, uint64_t open_ns)
{
    uint64_t t0 = now_ns(), limit = t0 + (uint64_t)AGENT_REPLICA_BULK_STALL_MS * 1000000u;
    int rc = -1;

    uv_mutex_lock(&b->mu);
    b->phase_ns[0] += recv_ns, b->phase_ns[1] += open_ns;
    while (!b->stop && b->delivered < off) {
        if (now_ns() >= limit) {
            fail_locked(b, "bulk chunk at offset %" PRIu64 " waited %d s for the ones before it",
                        off, AGENT_REPLICA_BULK_STALL_MS / 1000);
            break;
        }
        uv_cond_timedwait(&b->cv, &b->mu, 100 * 1000000u);
    }
    if (b->stop || b->wr == NULL) {
        /* ended meanwhile */
    } else if (b->delivered != off) {
        b->refused = !b->failed && !b->stop;
        fail_locked(b, "the sender sent the chunk at offset %" PRIu64 " twice", off);
    } else if ((rc = agent_replica_writer_feed(b->wr, p, len)) != 0) {
        if (rc == -ENOBUFS) {
            b->refused = !b->failed && !b->stop;
            fail_locked(b, "the sender went past its window");
        } else {
            fail_locked(b, "the writer: %s", strerror(-rc)); /* its own failure says more */
        }
        rc = -1;
    } else {
        b->delivered += len;
        b->phase_ns[2] += now_ns() - t0;
        uv_cond_broadcast(&b->cv);
        if (b->delivered == b->size)
            tell_locked(b);
    }
    uv_mutex_unlock(&b->mu);
    return rc;
}

static void *recv_thread(void *arg)
{
    struct agent_replica_bulk *b = ((struct thread_arg *)arg)->b;
    unsigned stream = ((struct thread_arg *)arg)->index;
    uint8_t hdr[AGENT_REPLICA_BULK_HDR], hello[AGENT_REPLICA_BULK_HDR + AGENT_REPLICA_BULK_TAG];
    uint8_t *data = NULL; /* the next chunk's buffer: the writer takes it, unsealed */
    EVP_CIPHER_CTX *enc = cipher(b->key, 1), *dec = cipher(b->key, 0);
    uint64_t seq = 1, last_end = 0;
    int s = -1, first = 1;

    free(arg);
    block_signals();
    if (enc == NULL || dec == NULL) {
        uv_mutex_lock(&b->mu);
        fail_locked(b, "no memory for a bulk stream");
        uv_mutex_unlock(&b->mu);
        goto out;
    }
    if ((s = dial(b)) < 0) {
        uv_mutex_lock(&b->mu);
        fail_locked(b, "bulk stream %u: cannot connect to port %u", stream, b->port);
        uv_mutex_unlock(&b->mu);
        goto out;
    }
    tune(s);
    uv_mutex_lock(&b->mu);
    if (b->stop) {
        uv_mutex_unlock(&b->mu);
        goto out;
    }
    b->socks[stream] = s;
    uv_mutex_unlock(&b->mu);
    if (seal(enc, HELLO_BIT | stream, 0, AGENT_REPLICA_BULK_HELLO, stream, hello, 0) != 0 ||
        send_all(s, hello, sizeof(hello)) != 0) {
        uv_mutex_lock(&b->mu);
        fail_locked(b, "bulk stream %u: the hello was not sent", stream);
        uv_mutex_unlock(&b->mu);
        goto out;
    }
    for (;;) {
        uint32_t len;
        uint64_t off, want, t0 = now_ns(), t1, t2;
        int got = recv_all(s, hdr, sizeof(hdr), 1);
        const char *bad = NULL;

        if (got == 0)
            break; /* the sender is done with this stream */
        if (got < 0) {
            int err = errno;

            uv_mutex_lock(&b->mu);
            fail_locked(b, "bulk stream %u: %s", stream, strerror(err));
            uv_mutex_unlock(&b->mu);
            break;
        }
        len = get32(hdr);
        off = get64(hdr + 8);
        want = off < b->size && b->size - off < AGENT_REPLICA_BULK_CHUNK ? b->size - off
                                                                         : AGENT_REPLICA_BULK_CHUNK;
        if (hdr[4] != AGENT_REPLICA_BULK_DATA)
            bad = "a record that is not data";
        else if (off >= b->size || off % AGENT_REPLICA_BULK_CHUNK != 0)
            bad = "an offset that is no chunk's";
        else if (len != want)
            bad = "a chunk of the wrong size";
        else if (!first && off < last_end)
            bad = "chunks out of order";
        if (bad == NULL && data == NULL &&
            (data = agent_replica_writer_buf(AGENT_REPLICA_BULK_CHUNK + AGENT_REPLICA_BULK_TAG)) ==
                NULL) {
            uv_mutex_lock(&b->mu);
            fail_locked(b, "no memory for a bulk chunk");
            uv_mutex_unlock(&b->mu);
            break;
        }
        if (bad == NULL && recv_all(s, data, len + AGENT_REPLICA_BULK_TAG, 0) != 1) {
            int err = errno; /* the transport, not a lie: the relay is asked */

            uv_mutex_lock(&b->mu);
            fail_locked(b, "bulk stream %u: %s in a record", stream, strerror(err));
            uv_mutex_unlock(&b->mu);
            break;
        }
        t1 = now_ns();
        if (bad == NULL && open_rec(dec, stream, seq++, hdr, data, len) != 0)
            bad = "a record that does not verify (wrong key, or altered)";
        t2 = now_ns();
        if (bad != NULL) {
            uv_mutex_lock(&b->mu);
            b->refused = !b->failed && !b->stop;
            fail_locked(b,
                        "bulk stream %u: the sender sent %s (%" PRIu32 " bytes at offset %" PRIu64
                        " of %" PRIu64 ")",
                        stream, bad, len, off, b->size);
            uv_mutex_unlock(&b->mu);
            break;
        }
        first = 0;
        last_end = off + len;
        if (deliver(b, data, len, off, t1 - t0, t2 - t1) != 0)
            break;
        data = NULL; /* the writer's now */
    }
out:
    agent_replica_writer_buf_free(data);
    EVP_CIPHER_CTX_free(enc);
    EVP_CIPHER_CTX_free(dec);
    thread_end(b, s, stream);
    return NULL;
}

int agent_replica_bulk_fetch(uv_loop_t *loop, const char *host, unsigned port,
                             const uint8_t link_key[32], const uint8_t salt[32], uint32_t xfer,
                             unsigned streams, uint64_t size, struct agent_replica_writer *wr,
                             agent_replica_bulk_cb cb, void *data, struct agent_replica_bulk **out)
{
    struct agent_replica_bulk *b;
    int rc;

    if (streams < 1 || streams > AGENT_REPLICA_BULK_STREAMS_MAX || port == 0 || port > 65535 ||
        size == 0)
        return -EINVAL;
    if ((b = bulk_new(loop, 0, streams, xfer, size, cb, data)) == NULL)
        return -ENOMEM;
    snprintf(b->host, sizeof(b->host), "%s", host);
    b->port = port;
    b->wr = wr;
    if (derive(link_key, salt, xfer, b->key) != 0) {
        b->closed = 1;
        uv_close((uv_handle_t *)&b->async, on_async_closed);
        return -EIO;
    }
    if ((rc = start_threads(b, recv_thread)) != 0) {
        agent_replica_bulk_close(b);
        return rc;
    }
    *out = b;
    return 0;
}
