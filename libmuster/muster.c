/* libmuster: see muster.h. Synchronous requests over one TCP socket. The socket is non-blocking
 * and every read and write first polls with the time left to the request's deadline, so no call
 * can hang longer than its deadline (a blocking socket could, in send() or recv()). Frames are
 * encoded and decoded by the rendezvous codec (message.c, compiled into the library). */
#include "muster.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <mbedtls/error.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509.h>

#include "message.h"
#include "tls.h"

struct muster {
    int fd;
    struct rdzv_tls *tls;    /* TLS 1.2 over fd: the token as PSK, or certificates */
    mbedtls_ssl_context ssl; /* BIO: the non-blocking fd; WANT_READ/WRITE -> poll */
    int ssl_init;
    int broken;      /* the first connection error; every later call returns it */
    uint32_t req_id; /* the last request's id: replies to abandoned requests are skipped */
    uint8_t buf[RDZV_HEADER_SIZE + RDZV_MAX_PAYLOAD];
    struct rdzv_msg msg; /* ~64 KiB each: on the heap with the handle, not on the stack */
    /* MUSTER_KV_PREFIX at muster_connect(): put before every key and barrier name. muster
     * sets it for the pre-flight of a node that joins a running job (docs/PREFLIGHT.md "Nodes that
     * join later"), so the checks of two such nodes of one round never meet in the round's store;
     * "" otherwise. */
    char prefix[MUSTER_KV_PREFIX_MAX + 1];
};

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for events on fd until deadline (monotonic ms; -1: none). */
static int wait_fd(int fd, short events, int64_t deadline)
{
    struct pollfd p = {.fd = fd, .events = events};
    int64_t left;
    int n;

    for (;;) {
        left = deadline < 0 ? -1 : deadline - now_ms();
        if (deadline >= 0 && left <= 0)
            return -ETIMEDOUT;
        n = poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left);
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return -errno;
    }
}

/* A deadline that passes in the middle of a frame leaves the stream out of step for good. */
static int cut(struct muster *m, int err, int partial)
{
    if (err == -ETIMEDOUT && partial)
        m->broken = -ECONNABORTED;
    return err;
}

/* mbedTLS errors become errnos in rdzv_tls_map_err (rendezvous/tls.c), as for muster itself. */
static int ssl_err(struct muster *m, int ret, int done)
{
    return rdzv_tls_map_err(&m->ssl, ret, done, NULL, 0);
}

/* BIO over the non-blocking socket; the callers poll on WANT_READ/WANT_WRITE. */
static int bio_send(void *ctx, const unsigned char *buf, size_t len)
{
    ssize_t n = send(*(int *)ctx, buf, len, MSG_NOSIGNAL); /* a closed peer must not kill us */

    if (n >= 0)
        return (int)n;
    if (errno == EAGAIN || errno == EINTR)
        return MBEDTLS_ERR_SSL_WANT_WRITE;
    return MBEDTLS_ERR_NET_SEND_FAILED;
}

static int bio_recv(void *ctx, unsigned char *buf, size_t len)
{
    ssize_t n = recv(*(int *)ctx, buf, len, 0);

    if (n >= 0)
        return (int)n; /* 0: the server closed the connection */
    if (errno == EAGAIN || errno == EINTR)
        return MBEDTLS_ERR_SSL_WANT_READ;
    return errno == ECONNRESET ? MBEDTLS_ERR_SSL_CONN_EOF : MBEDTLS_ERR_NET_RECV_FAILED;
}

/* mbedTLS asked to be called again once the socket is ready; ret is its WANT_* code. */
static int wait_ssl(struct muster *m, int ret, int64_t deadline)
{
    return wait_fd(m->fd, ret == MBEDTLS_ERR_SSL_WANT_WRITE ? POLLOUT : POLLIN, deadline);
}

static int is_want(int ret)
{
    return ret == MBEDTLS_ERR_SSL_WANT_READ || ret == MBEDTLS_ERR_SSL_WANT_WRITE;
}

static int tls_handshake(struct muster *m, int64_t deadline)
{
    int ret, err;

    while ((ret = mbedtls_ssl_handshake(&m->ssl)) != 0) {
        if (!is_want(ret))
            return ssl_err(m, ret, 0);
        if ((err = wait_ssl(m, ret, deadline)) < 0)
            return err;
    }
    return 0;
}

static int send_all(struct muster *m, const uint8_t *p, size_t len, int64_t deadline)
{
    int ret, err;

    while (len > 0) {
        ret = mbedtls_ssl_write(&m->ssl, p, len); /* may be partial: one record at a time */
        if (ret > 0) {
            p += ret;
            len -= (size_t)ret;
            continue;
        }
        if (!is_want(ret))
            return ssl_err(m, ret, 1);
        /* mbedTLS holds a half-sent record it must be asked to finish with the same
         * arguments: a deadline here leaves the stream unusable even before any byte went. */
        if ((err = wait_ssl(m, ret, deadline)) < 0)
            return cut(m, err, 1);
    }
    return 0;
}

static int recv_all(struct muster *m, uint8_t *p, size_t len, int64_t deadline)
{
    const uint8_t *start = p;
    int ret, err;

    while (len > 0) {
        ret = mbedtls_ssl_read(&m->ssl, p, len);
        if (ret > 0) {
            p += ret;
            len -= (size_t)ret;
            continue;
        }
        if (ret == 0)
            return -ECONNRESET; /* the server closed mid-conversation */
        if (!is_want(ret))
            return ssl_err(m, ret, 1);
        if ((err = wait_ssl(m, ret, deadline)) < 0)
            return cut(m, err, p != start);
    }
    return 0;
}

/* A broken stream cannot be resynchronised: remember the error for every later call. A
 * timeout leaves it usable (the late reply is skipped by its req_id). */
static int io_result(struct muster *m, int err)
{
    if (err < 0 && err != -ETIMEDOUT)
        m->broken = err;
    return err;
}

static int send_msg(struct muster *m, int64_t deadline)
{
    size_t len;
    int err = rdzv_msg_encode(&m->msg, m->buf, sizeof(m->buf), &len);

    if (err < 0)
        return err; /* caller-side limits were checked already; nothing was sent */
    return io_result(m, send_all(m, m->buf, len, deadline));
}

/* Reads one frame into m->msg. A server ERROR ends the connection (the server closes it). */
static int recv_msg(struct muster *m, int64_t deadline)
{
    uint8_t type;
    uint32_t len;
    int err;

    if ((err = recv_all(m, m->buf, RDZV_HEADER_SIZE, deadline)) < 0)
        return io_result(m, err);
    if ((err = rdzv_header_decode(m->buf, &type, &len)) < 0)
        return io_result(m, -EPROTO);
    if ((err = recv_all(m, m->buf, len, deadline)) < 0)
        return io_result(m, err == -ETIMEDOUT ? -ECONNABORTED : err); /* out of step */
    if ((err = rdzv_msg_decode(type, m->buf, len, &m->msg)) < 0)
        return io_result(m, -EPROTO);
    if (m->msg.type == RDZV_MSG_ERROR) {
        m->broken = rdzv_err_errno(m->msg.u.error.code); /* the server closes after ERROR */
        return m->broken;
    }
    return 0;
}

/* --- connecting ---------------------------------------------------------------------------- */
/* "host:port" or "[v6addr]:port" into host (cap bytes) and port. */
static int parse_endpoint(const char *ep, char *host, size_t cap, char *port, size_t pcap)
{
    const char *colon, *start = ep, *end;
    char *stop;
    unsigned long p;

    if (ep[0] == '[') {
        start = ep + 1;
        end = strchr(start, ']');
        if (end == NULL || end[1] != ':')
            return -EINVAL;
        colon = end + 1;
    } else {
        colon = strrchr(ep, ':');
        if (colon == NULL || memchr(ep, ':', (size_t)(colon - ep)) != NULL)
            return -EINVAL; /* a bare IPv6 address needs brackets */
        end = colon;
    }
    if (end == start || (size_t)(end - start) >= cap || strlen(colon + 1) >= pcap)
        return -EINVAL;
    errno = 0;
    p = strtoul(colon + 1, &stop, 10);
    if (colon[1] == '\0' || *stop != '\0' || errno != 0 || p == 0 || p > 65535)
        return -EINVAL;
    memcpy(host, start, (size_t)(end - start));
    host[end - start] = '\0';
    snprintf(port, pcap, "%lu", p);
    return 0;
}

static int connect_one(const struct addrinfo *ai, int64_t deadline, int *fdp)
{
    int fd, err = 0, one = 1;
    socklen_t len = sizeof(err);

    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0)
        return -errno;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        err = errno == EINPROGRESS ? wait_fd(fd, POLLOUT, deadline) : -errno;
        if (err == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0)
            err = -err;
    }
    if (err < 0) {
        close(fd);
        return err;
    }
    /* Requests are small and answered one by one: Nagle would add up to 40 ms to each. */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    *fdp = fd;
    return 0;
}

static int tcp_connect(const char *endpoint, int64_t deadline, int *fdp)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    char host[RDZV_HOST_MAX + 1], port[8];
    int err;

    if ((err = parse_endpoint(endpoint, host, sizeof(host), port, sizeof(port))) < 0)
        return err;
    err = getaddrinfo(host, port, &hints, &res);
    if (err != 0)
        return err == EAI_SYSTEM ? -errno : err == EAI_MEMORY ? -ENOMEM : -EHOSTUNREACH;
    err = -EHOSTUNREACH;
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        err = connect_one(ai, deadline, fdp);
        if (err == 0 || err == -ETIMEDOUT)
            break;
    }
    freeaddrinfo(res);
    return err;
}

/* Sends m->msg and reads the next frame, which must be of type `want`. */
static int exchange(struct muster *m, uint8_t want, int64_t deadline)
{
    int err = send_msg(m, deadline);

    if (err == 0)
        err = recv_msg(m, deadline);
    if (err == 0 && m->msg.type != want)
        err = io_result(m, -EPROTO);
    return err;
}

static int handshake(struct muster *m, const char *token, const char *job_id, unsigned round,
                     int rank, int64_t deadline)
{
    int err;

    memset(&m->msg.u.hello, 0, sizeof(m->msg.u.hello));
    m->msg.type = RDZV_MSG_HELLO;
    m->msg.u.hello.version = RDZV_PROTO_VERSION;
    m->msg.u.hello.role = RDZV_ROLE_WORKER;
    (void)token; /* protocol 3: the TLS credential speaks; HELLO.token stays empty */
    if ((err = exchange(m, RDZV_MSG_WELCOME, deadline)) < 0)
        return err;
    memset(&m->msg.u.attach, 0, sizeof(m->msg.u.attach));
    m->msg.type = RDZV_MSG_ATTACH;
    snprintf(m->msg.u.attach.job_id, sizeof(m->msg.u.attach.job_id), "%s", job_id);
    m->msg.u.attach.round = round;
    m->msg.u.attach.rank = rank;
    return exchange(m, RDZV_MSG_ATTACH_OK, deadline);
}

/* Token mode (the worker credential muster run hands its workers, or any credential of
 * cred.h) unless MUSTER_TLS_CERT/KEY/CA name certificates and the token is not a worker
 * credential; the server's certificate must carry the endpoint's host name. */
static int tls_setup(struct muster *m, const char *endpoint, const char *token)
{
    struct rdzv_tls_opts o = {.token = token};
    char host[RDZV_HOST_MAX + 1], port[8], why[256];
    int ret;

    o.cert_file = getenv("MUSTER_TLS_CERT");
    if (strncmp(token, "muster-worker-v1:", 17) == 0)
        o.cert_file = NULL;
    if (o.cert_file != NULL && o.cert_file[0] != '\0') {
        o.key_file = getenv("MUSTER_TLS_KEY");
        o.ca_file = getenv("MUSTER_TLS_CA");
        if ((ret = parse_endpoint(endpoint, host, sizeof(host), port, sizeof(port))) < 0)
            return ret;
        o.server_name = host;
    } else {
        o.cert_file = NULL;
    }
    if ((ret = rdzv_tls_new(&o, 0, &m->tls, why, sizeof(why))) < 0)
        return ret;
    mbedtls_ssl_init(&m->ssl);
    m->ssl_init = 1;
    ret = mbedtls_ssl_setup(&m->ssl, rdzv_tls_conf(m->tls));
    if (ret == 0 && rdzv_tls_server_name(m->tls) != NULL)
        ret = mbedtls_ssl_set_hostname(&m->ssl, rdzv_tls_server_name(m->tls));
    if (ret != 0)
        return ssl_err(m, ret, 0);
    mbedtls_ssl_set_bio(&m->ssl, &m->fd, bio_send, bio_recv, NULL);
    return 0;
}

int muster_connect_to(const char *endpoint, const char *token, const char *job_id, unsigned round,
                      int rank, struct muster **out)
{
    int64_t deadline = now_ms() + MUSTER_CONNECT_TIMEOUT_MS;
    struct muster *m = NULL;
    int err;

    if (token == NULL)
        token = "";
    if (endpoint == NULL || job_id == NULL || job_id[0] == '\0' || rank < 0 ||
        strlen(token) > RDZV_TOKEN_MAX || strlen(job_id) > RDZV_ID_MAX || out == NULL)
        return -EINVAL;
    m = calloc(1, sizeof(*m));
    if (m == NULL)
        return -ENOMEM;
    m->fd = -1;
    err = tls_setup(m, endpoint, token);
    if (err == 0)
        err = tcp_connect(endpoint, deadline, &m->fd);
    if (err == 0)
        err = tls_handshake(m, deadline);
    if (err == 0)
        err = handshake(m, token, job_id, round, rank, deadline);
    if (err < 0) {
        muster_close(m);
        return err;
    }
    *out = m;
    return 0;
}

/* Parses an environment variable holding a decimal number in [0, max]. */
static int env_number(const char *name, unsigned long max, unsigned long *v)
{
    const char *s = getenv(name);
    char *end;

    if (s == NULL || *s == '\0')
        return -EINVAL;
    errno = 0;
    *v = strtoul(s, &end, 10);
    if (*end != '\0' || errno != 0 || *v > max || s[0] == '-')
        return -EINVAL;
    return 0;
}

int muster_connect(struct muster **out)
{
    const char *endpoint = getenv("MUSTER_ENDPOINT");
    const char *job_id = getenv("MUSTER_JOB_ID");
    unsigned long round, rank;

    if (endpoint == NULL || endpoint[0] == '\0')
        return -ENOENT;
    const char *prefix = getenv("MUSTER_KV_PREFIX");
    int rc;

    if (job_id == NULL || env_number("MUSTER_ROUND", UINT32_MAX, &round) < 0 ||
        env_number("RANK", INT_MAX, &rank) < 0 ||
        (prefix != NULL && strlen(prefix) > MUSTER_KV_PREFIX_MAX))
        return -EINVAL;
    rc = muster_connect_to(endpoint, getenv("MUSTER_TOKEN"), job_id, (unsigned)round, (int)rank,
                           out);
    if (rc == 0 && prefix != NULL)
        snprintf((*out)->prefix, sizeof((*out)->prefix), "%s", prefix);
    return rc;
}

void muster_close(struct muster *m)
{
    if (m == NULL)
        return;
    if (m->fd >= 0 && m->broken == 0 && m->ssl_init)
        (void)mbedtls_ssl_close_notify(&m->ssl); /* best effort, never waits */
    if (m->fd >= 0)
        close(m->fd);
    if (m->ssl_init)
        mbedtls_ssl_free(&m->ssl);
    rdzv_tls_free(m->tls);
    free(m);
}

/* --- requests ------------------------------------------------------------------------------ */
static int status_err(uint8_t status)
{
    switch (status) {
    case RDZV_KV_OK:
        return 0;
    case RDZV_KV_NOT_FOUND:
        return -ENOENT;
    case RDZV_KV_TIMEOUT:
        return -ETIMEDOUT;
    case RDZV_KV_STALE:
        return -ESTALE;
    case RDZV_KV_LIMIT:
        return -ENOSPC;
    default:
        return -EPROTO;
    }
}

/* Sends the request in m->msg (type and kv fields filled in) and waits for its KV_REPLY: the
 * server may hold it wait_ms, the network gets MUSTER_CONNECT_TIMEOUT_MS more. wait_ms 0 with
 * `forever`: no deadline (a barrier without a timeout). */
static int request(struct muster *m, uint32_t wait_ms, int forever)
{
    int64_t deadline = forever ? -1 : now_ms() + wait_ms + MUSTER_CONNECT_TIMEOUT_MS;
    int err;

    if (m->broken)
        return m->broken;
    m->msg.u.kv.req_id = ++m->req_id;
    m->msg.u.kv.wait_ms = wait_ms;
    if ((err = send_msg(m, deadline)) < 0)
        return err;
    for (;;) {
        if ((err = recv_msg(m, deadline)) < 0)
            return err;
        if (m->msg.type != RDZV_MSG_KV_REPLY)
            return io_result(m, -EPROTO);
        if (m->msg.u.kv.req_id == m->req_id)
            return status_err(m->msg.u.kv.status);
        /* a reply to an earlier request that timed out on our side: skip it */
    }
}

/* m may be NULL (then the caller refuses anyway); the prefix counts against RDZV_KEY_MAX. */
static int check_key(const struct muster *m, const char *key)
{
    size_t n;

    if (key == NULL)
        return -EINVAL;
    n = strlen(key);
    return n == 0 || n + (m ? strlen(m->prefix) : 0) > RDZV_KEY_MAX ? -EINVAL : 0;
}

/* Prepares m->msg as a kv request of type with key (after the handle's prefix). */
static void kv_msg(struct muster *m, uint8_t type, const char *key)
{
    m->msg.type = type;
    m->msg.u.kv.count = 0;
    m->msg.u.kv.status = 0;
    m->msg.u.kv.value_len = 0;
    snprintf(m->msg.u.kv.key, sizeof(m->msg.u.kv.key), "%s%s", m->prefix, key);
}

int muster_kv_put(struct muster *m, const char *key, const void *value, size_t len)
{
    if (m == NULL || check_key(m, key) < 0 || len > RDZV_VALUE_MAX || (value == NULL && len > 0))
        return -EINVAL;
    kv_msg(m, RDZV_MSG_KV_PUT, key);
    if (len > 0)
        memcpy(m->msg.u.kv.value, value, len);
    m->msg.u.kv.value_len = (uint32_t)len;
    return request(m, 0, 0);
}

int muster_kv_get(struct muster *m, const char *key, void *buf, size_t cap, size_t *len,
                  int timeout_ms)
{
    int err;

    if (m == NULL || check_key(m, key) < 0 || timeout_ms < 0 || len == NULL ||
        (buf == NULL && cap > 0))
        return -EINVAL;
    kv_msg(m, RDZV_MSG_KV_GET, key);
    if ((err = request(m, (uint32_t)timeout_ms, 0)) < 0)
        return err;
    *len = m->msg.u.kv.value_len;
    if (*len > cap)
        return -ENOBUFS;
    if (*len > 0)
        memcpy(buf, m->msg.u.kv.value, *len);
    return 0;
}

int muster_barrier(struct muster *m, const char *name, unsigned count, int timeout_ms)
{
    if (m == NULL || check_key(m, name) < 0 || count == 0 || timeout_ms < 0)
        return -EINVAL;
    kv_msg(m, RDZV_MSG_BARRIER, name);
    m->msg.u.kv.count = count;
    return request(m, (uint32_t)timeout_ms, timeout_ms == 0);
}

const char *muster_strerror(int err)
{
    switch (err < 0 ? -err : err) {
    case 0:
        return "success";
    case ENOENT:
        return "no such key (or MUSTER_ENDPOINT is not set)";
    case ETIMEDOUT:
        return "timed out";
    case ESTALE:
        return "the round is over: this worker is being replaced";
    case ENOBUFS:
        return "buffer too small for the value";
    case ENOSPC:
        return "the job's key-value quota is used up";
    case EINVAL:
        return "invalid argument (or a missing MUSTER_* variable)";
    case EACCES:
        return "the rendezvous server refused the token";
    case ESHUTDOWN:
        return "the job is unknown to the server or already finished";
    case EPROTO:
        return "rendezvous protocol error";
    case ECONNABORTED:
        return "connection out of step after a timeout inside a frame; reconnect";
    case EPROTONOSUPPORT:
        return "rendezvous protocol version not supported by the server";
    default:
        return strerror(err < 0 ? -err : err);
    }
}
