/* peer: the shared connection and TLS helpers of the hostile clients (peer.h). */
#include "peer.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/net_sockets.h>

static uint8_t frame[RDZV_HEADER_SIZE + RDZV_MAX_PAYLOAD];

static int sock_send(void *ctx, const unsigned char *p, size_t n)
{
    ssize_t w = send(*(int *)ctx, p, n, MSG_NOSIGNAL);

    return w < 0 ? MBEDTLS_ERR_NET_SEND_FAILED : (int)w;
}

static int sock_recv(void *ctx, unsigned char *p, size_t n)
{
    ssize_t r = recv(*(int *)ctx, p, n, 0);

    return r < 0 ? MBEDTLS_ERR_NET_RECV_FAILED : (int)r;
}

/* IPv4 only: enough for other "machines" on loopback (127.0.0.2, ...). */
static int bind_from(int fd, int family, const char *from)
{
    struct sockaddr_in sin = {.sin_family = AF_INET};

    if (from == NULL || *from == '\0')
        return 0;
    if (family != AF_INET || inet_pton(AF_INET, from, &sin.sin_addr) != 1)
        return -1;
    return bind(fd, (struct sockaddr *)&sin, sizeof(sin));
}

int peer_connect(const char *endpoint, const char *from)
{
    char host[256], *colon;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    int fd = -1;

    snprintf(host, sizeof(host), "%s", endpoint);
    colon = strrchr(host, ':');
    if (colon == NULL)
        return -1;
    *colon = '\0';
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0)
        return -1;
    fd = socket(ai->ai_family, SOCK_STREAM, 0);
    if (fd >= 0 && (bind_from(fd, ai->ai_family, from) != 0 ||
                    connect(fd, ai->ai_addr, ai->ai_addrlen) != 0)) {
        close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    return fd;
}

const char *peer_open(struct peer_conn *p, struct rdzv_tls *tls, const char *endpoint,
                      const char *from, int timeout_s)
{
    struct timeval tv = {.tv_sec = timeout_s};
    int rc;

    mbedtls_ssl_init(&p->ssl);
    if ((p->fd = peer_connect(endpoint, from)) < 0)
        return "cannot connect";
    setsockopt(p->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (mbedtls_ssl_setup(&p->ssl, rdzv_tls_conf(tls)) != 0)
        return "TLS setup";
    mbedtls_ssl_set_bio(&p->ssl, &p->fd, sock_send, sock_recv, NULL);
    while ((rc = mbedtls_ssl_handshake(&p->ssl)) != 0)
        if (rc != MBEDTLS_ERR_SSL_WANT_READ && rc != MBEDTLS_ERR_SSL_WANT_WRITE)
            return "TLS handshake refused";
    return NULL;
}

void peer_close(struct peer_conn *p)
{
    if (p->fd >= 0) {
        mbedtls_ssl_close_notify(&p->ssl);
        close(p->fd);
        p->fd = -1;
    }
    mbedtls_ssl_free(&p->ssl);
}

uint8_t *peer_encode(const struct rdzv_msg *m, size_t *len)
{
    return rdzv_msg_encode(m, frame, sizeof(frame), len) < 0 ? NULL : frame;
}

int peer_write(struct peer_conn *p, const uint8_t *b, size_t len)
{
    size_t off = 0;

    while (off < len) {
        int w = mbedtls_ssl_write(&p->ssl, b + off, len - off);

        if (w <= 0)
            return -1;
        off += (size_t)w;
    }
    return 0;
}

int peer_put(struct peer_conn *p, const struct rdzv_msg *m)
{
    size_t len;
    uint8_t *b = peer_encode(m, &len);

    return b == NULL ? -1 : peer_write(p, b, len);
}

static int read_all(struct peer_conn *p, uint8_t *b, size_t n)
{
    while (n > 0) {
        int r = mbedtls_ssl_read(&p->ssl, b, n);

        if (r <= 0)
            return -1;
        b += r;
        n -= (size_t)r;
    }
    return 0;
}

int peer_get(struct peer_conn *p, struct rdzv_msg *m)
{
    uint8_t type;
    uint32_t len;

    if (read_all(p, frame, RDZV_HEADER_SIZE) < 0 || rdzv_header_decode(frame, &type, &len) < 0 ||
        read_all(p, frame, len) < 0 || rdzv_msg_decode(type, frame, len, m) < 0)
        return -1;
    return 0;
}

/* --- a ClientHello without a credential of the server ------------------------------------ */
struct capture {
    uint8_t *buf;
    size_t cap, len;
};

static int capture_send(void *ctx, const unsigned char *buf, size_t len)
{
    struct capture *c = ctx;

    if (c->len + len > c->cap)
        return MBEDTLS_ERR_SSL_ALLOC_FAILED;
    memcpy(c->buf + c->len, buf, len);
    c->len += len;
    return (int)len;
}

/* Nothing ever arrives: the handshake stops after the first flight. */
static int capture_recv(void *ctx, unsigned char *buf, size_t len)
{
    (void)ctx;
    (void)buf;
    (void)len;
    return MBEDTLS_ERR_SSL_WANT_READ;
}

size_t peer_client_hello(mbedtls_ecp_group_id curve, uint8_t *out, size_t cap)
{
    static const int suites[] = {MBEDTLS_TLS_ECDHE_PSK_WITH_CHACHA20_POLY1305_SHA256,
                                 MBEDTLS_TLS_ECDHE_PSK_WITH_AES_128_CBC_SHA256, 0};
    const mbedtls_ecp_group_id curves[] = {curve, MBEDTLS_ECP_DP_NONE};
    static const unsigned char key[32], id[] = "muster";
    struct capture c = {out, cap, 0};
    mbedtls_entropy_context ent;
    mbedtls_ctr_drbg_context drbg;
    mbedtls_ssl_config conf;
    mbedtls_ssl_context ssl;
    size_t got = 0;

    mbedtls_entropy_init(&ent);
    mbedtls_ctr_drbg_init(&drbg);
    mbedtls_ssl_config_init(&conf);
    mbedtls_ssl_init(&ssl);
    if (mbedtls_ctr_drbg_seed(&drbg, mbedtls_entropy_func, &ent, NULL, 0) != 0 ||
        mbedtls_ssl_config_defaults(&conf, MBEDTLS_SSL_IS_CLIENT, MBEDTLS_SSL_TRANSPORT_STREAM,
                                    MBEDTLS_SSL_PRESET_DEFAULT) != 0)
        goto out;
    mbedtls_ssl_conf_rng(&conf, mbedtls_ctr_drbg_random, &drbg);
    mbedtls_ssl_conf_min_version(&conf, MBEDTLS_SSL_MAJOR_VERSION_3, MBEDTLS_SSL_MINOR_VERSION_3);
    mbedtls_ssl_conf_ciphersuites(&conf, suites);
    mbedtls_ssl_conf_curves(&conf, curves);
    if (mbedtls_ssl_conf_psk(&conf, key, sizeof(key), id, sizeof(id) - 1) != 0 ||
        mbedtls_ssl_setup(&ssl, &conf) != 0)
        goto out;
    mbedtls_ssl_set_bio(&ssl, &c, capture_send, capture_recv, NULL);
    if (mbedtls_ssl_handshake(&ssl) == MBEDTLS_ERR_SSL_WANT_READ && c.len > 0)
        got = c.len;
out:
    mbedtls_ssl_free(&ssl);
    mbedtls_ssl_config_free(&conf);
    mbedtls_ctr_drbg_free(&drbg);
    mbedtls_entropy_free(&ent);
    return got;
}
