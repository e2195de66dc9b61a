/* peer: what the hostile clients in tests/peers/ share, so that none of them writes its own
 * copy: a blocking TCP connection (optionally from a chosen source address), the rendezvous
 * protocol's TLS over it with framed messages, and the first flight of a TLS client that holds no
 * credential of the server (a ClientHello to replay in floods).
 *
 * Tools are single-threaded: peer_put and peer_get share one frame buffer. */
#ifndef MUSTER_PEER_H
#define MUSTER_PEER_H

#include <stddef.h>
#include <stdint.h>

#include <mbedtls/ecp.h>
#include <mbedtls/ssl.h>

#include "message.h"
#include "tls.h"

struct peer_conn {
    int fd;
    mbedtls_ssl_context ssl;
};

/* A connected TCP socket to HOST:PORT (the last colon splits), bound first to the IPv4 source
 * address `from` when it is not NULL or empty; -1 on any failure. */
int peer_connect(const char *endpoint, const char *from);

/* peer_connect, then a receive timeout of timeout_s (a test never hangs on a silent server) and
 * the TLS handshake with tls's configuration (borrowed; it must outlive p). NULL, or why not.
 * p->fd is -1 until it connected; peer_close releases what was set up either way. */
const char *peer_open(struct peer_conn *p, struct rdzv_tls *tls, const char *endpoint,
                      const char *from, int timeout_s);

/* close_notify, the TLS context and the socket; a peer that never opened is fine. */
void peer_close(struct peer_conn *p);

/* m encoded into the shared frame buffer: the frame and its length in *len; NULL when it does
 * not encode. The frame stays valid until the next peer_encode or peer_get. */
uint8_t *peer_encode(const struct rdzv_msg *m, size_t *len);

/* All of b over TLS: 0, or -1 when the connection failed. */
int peer_write(struct peer_conn *p, const uint8_t *b, size_t len);

/* peer_encode + peer_write: 0 or -1. */
int peer_put(struct peer_conn *p, const struct rdzv_msg *m);

/* The next message into *m: 0, or -1 when the connection ended or the frame does not decode. */
int peer_get(struct peer_conn *p, struct rdzv_msg *m);

/* The first flight of an mbedTLS TLS 1.2 client offering only the ECDHE-PSK suites and curve,
 * with a PSK the server does not know, into out (cap bytes): its length, or 0 on failure. */
size_t peer_client_hello(mbedtls_ecp_group_id curve, uint8_t *out, size_t cap);

#endif
