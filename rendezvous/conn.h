/* A framed rendezvous connection over TCP, shared by the server and the client.
 *
 * TLS: rdzv_conn_start_tls() runs every byte through an mbedtls_ssl_context owned by the conn
 * (uv read -> ciphertext buffer -> handshake / mbedtls_ssl_read through a memory BIO -> the
 * same frame parser; rdzv_conn_send -> mbedtls_ssl_write -> BIO -> uv_write of a copy).
 * A server conn's handshake runs in libuv's thread pool, one step per received flight, so
 * that unauthenticated ClientHellos cost the loop no key generation (conn.c "server handshake
 * steps off the loop"); the client side and every record after the handshake stay on the loop.
 *
 * Reading: a fixed 12-byte header buffer first; the payload buffer is allocated only after the
 * header's length passed the RDZV_MAX_PAYLOAD check. Each decoded message goes to msg_cb.
 * Writing: rdzv_conn_send() encodes into a heap buffer owned by the write request.
 * The struct is meant to be embedded in its owner (server peer, client); the owner frees its
 * memory only from the close callback. */
#ifndef MUSTER_RDZV_CONN_H
#define MUSTER_RDZV_CONN_H

#include <uv.h>

#include "message.h"

struct rdzv_conn;
struct rdzv_tls;
struct rdzv_conn_tls; /* conn.c's: the mbedtls_ssl_context and its buffers */

/* One decoded message; msg is only valid during the call. The callback may send and may close
 * the connection; once closed, no further msg_cb or error_cb runs. */
typedef void (*rdzv_conn_msg_cb)(struct rdzv_conn *conn, const struct rdzv_msg *msg);
/* Reading stopped for good: err is UV_EOF (peer closed), another UV_E* read error, or the codec's
 * -EPROTO (bad magic, payload), -EPROTONOSUPPORT (header version), -EMSGSIZE (length over the
 * limit) or -ENOTSUP (unknown message type). Runs at most once; the owner decides to close. */
typedef void (*rdzv_conn_error_cb)(struct rdzv_conn *conn, int err);
/* On a TLS connection err can also be -EACCES (authentication failed: wrong token, a
 * certificate that does not verify, the peer's alert saying so), -EPROTO (not TLS, a truncated
 * handshake, garbage), -ENOMEM; rdzv_conn_tls_error() then has a one-line reason. */
/* The handle is closed; the owner may free the memory holding the conn. */
typedef void (*rdzv_conn_close_cb)(struct rdzv_conn *conn);

struct rdzv_cred;
struct rdzv_conn {
    uv_tcp_t tcp;
    uv_shutdown_t shutdown;
    rdzv_conn_msg_cb msg_cb;
    rdzv_conn_error_cb error_cb;
    rdzv_conn_close_cb close_cb;
    void *data; /* the owner's */

    uint8_t hdr[RDZV_HEADER_SIZE];
    uint32_t hdr_got;
    uint8_t type;
    uint8_t *payload; /* NULL while reading a header */
    uint32_t payload_len, payload_got;

    uint64_t bytes_in, bytes_out; /* frame bytes read and queued for writing, for metrics */
    size_t send_max;              /* the owner's cap on unsent bytes (rdzv_conn_send); 0: none */
    int reading;                  /* rdzv_conn_start() succeeded and no error stopped it */
    int closing;                  /* rdzv_conn_close() was called */
    int shutting;                 /* a uv_shutdown is in flight */
    struct rdzv_conn_tls *tls;    /* NULL on a plaintext connection; freed before close_cb */
    /* An in-process channel (rdzv_conn_start_local): a socketpair inside one process, no TLS;
     * local_cred is what the server side grants it (NULL on the client side). */
    int local;
    struct rdzv_cred *local_cred;
    /* Socket bytes read, TLS records included, and the uv_now of the last: the server's
     * pre-authentication pool tells a handshake in progress from a silent or stalled connection
     * by them (bytes_in stays 0 until the handshake is over). */
    uint64_t raw_in, raw_in_ms;
    /* fair reading (rdzv_conn_set_fair): messages since the last pause, and the list of conns
     * paused until the loop's next turn */
    struct rdzv_conn_fair *fair;
    uint32_t burst;
    int deferred;
    struct rdzv_conn *fair_prev, *fair_next;
};

/* Messages a fair conn delivers before it lets the loop's other sockets go first. */
#define RDZV_CONN_BURST 128

/* A server's fair reading: its conns (rdzv_conn_set_fair) pause after RDZV_CONN_BURST messages
 * in a row until the loop's next turn, so that no peer's backlog holds the loop (conn.c "fair
 * reading"). Embedded in the server; uv_close_cb gets the idle handle, whose data is f. */
struct rdzv_conn_fair {
    uv_idle_t idle;
    struct rdzv_conn *head; /* paused conns */
    uint64_t deferrals;     /* pauses so far */
};
void rdzv_conn_fair_init(uv_loop_t *loop, struct rdzv_conn_fair *f);
/* Forgets the paused conns (each is closed or about to be) and closes the handle. */
void rdzv_conn_fair_close(struct rdzv_conn_fair *f, uv_close_cb cb);
/* Before rdzv_conn_start*: f must outlive conn. */
void rdzv_conn_set_fair(struct rdzv_conn *conn, struct rdzv_conn_fair *f);

/* Initialises conn and its TCP handle on loop. Borrows the callbacks and data. Returns 0 or a
 * UV_E* error; on error nothing needs closing. After success, rdzv_conn_close() must be called
 * exactly as for any libuv handle, even if the connection was never used. */
int rdzv_conn_init(uv_loop_t *loop, struct rdzv_conn *conn, rdzv_conn_msg_cb msg_cb,
                   rdzv_conn_error_cb error_cb, void *data);

/* Starts framed reading on a connected handle (after uv_accept or a connect callback) and sets
 * TCP_NODELAY. Returns 0 or a UV_E* error (then no callback runs; close the conn). */
int rdzv_conn_start(struct rdzv_conn *conn);

/* Like rdzv_conn_start, but TLS (server side when is_server) with the shared configuration tls
 * (borrowed: it must outlive the conn, but a server conn closed during a handshake step holds
 * its own reference until the step returns: rdzv_tls_free may come first). A client starts its
 * handshake at once. Messages sent before the handshake finished are queued and sent after it
 * (dropped if the conn closes first). Handshake failures arrive through error_cb (see there).
 * Returns 0, -ENOMEM, -EPROTO (mbedTLS refused the setup) or a UV_E* error; then no callback runs;
 * close the conn. */
int rdzv_conn_start_tls(struct rdzv_conn *conn, struct rdzv_tls *tls, int is_server);

/* 1 once the TLS handshake completed, 0 before or after a failure; 1 on a plaintext conn.
 * Meaningful until the close callback (the TLS state is freed just before it). */
int rdzv_conn_handshake_done(const struct rdzv_conn *conn);

/* Server side: the credential the peer's TLS handshake proved (cred.h), copied to *out:
 * RDZV_CRED_CERT for a verified client certificate. Returns 0, or -ENOTCONN before the
 * handshake finished or on a plaintext conn, -EACCES when no credential is known. */
struct rdzv_cred;
int rdzv_conn_cred(const struct rdzv_conn *conn, struct rdzv_cred *out);

/* The one-line reason of the last TLS failure ("" when none, also on a plaintext conn). Never
 * contains the token. Valid until the close callback. */
const char *rdzv_conn_tls_error(const struct rdzv_conn *conn);

/* Whether the TLS handshake ended because the connection did (closed or reset by the peer)
 * rather than by a TLS error: a client may retry that one. */
int rdzv_conn_tls_cut(const struct rdzv_conn *conn);

/* The TLS suite the handshake agreed on (e.g. "TLS-PSK-WITH-AES-128-GCM-SHA256"), or "" before
 * the handshake finished and on a plaintext conn. Static storage. */
const char *rdzv_conn_tls_suite(const struct rdzv_conn *conn);

/* Prepares a process whose main work is a rendezvous server with many connections (`muster
 * server`), before the server starts:
 * - sizes libuv's thread pool for the TLS handshake steps that run there: one thread per core
 *   plus two for file work, unless UV_THREADPOOL_SIZE is set already (libuv reads it once);
 * - has glibc give blocks of 16 KiB and more (mbedTLS's two ~16.7 KiB record buffers per
 *   connection) their own mapping: calloc then neither clears nor touches their pages, so
 *   the ~32 KiB per connection cost only the pages records use, with no trim (tls_trim).
 * Process-wide (mallopt): not for a process that hosts a server beside other work. */
void rdzv_conn_tune_for_server(void);

/* Starts an in-process channel on fd (one end of a socketpair made by the same process: the
 * rendezvous server an agent hosts and that agent's client; rendezvous/server.h
 * rdzv_server_connect_local): no TLS, no TCP options; cred (copied; NULL on the client end) is
 * what rdzv_conn_cred reports, as a handshake would have proved it. Returns 0 or a UV_E* error
 * (then close the conn). fd is the conn's from the call on, on every path: on an error it is
 * closed here or by closing the conn. */
int rdzv_conn_start_local(struct rdzv_conn *conn, uv_os_sock_t fd, const struct rdzv_cred *cred);

/* Encodes msg (borrowed) and queues it for writing. Returns 0, -ENOTCONN once closing, the
 * codec's -EINVAL, -ENOMEM, -EPIPE (the TLS context failed), -ENOBUFS (nothing queued: with
 * send_max set, the bytes not yet taken by the socket, TLS records and frames held for the
 * handshake included, would pass it; a frame is always queued when nothing is), or a
 * uv_write error. Write failures later are not reported here: they show up as a read error. */
int rdzv_conn_send(struct rdzv_conn *conn, const struct rdzv_msg *msg);

/* Bytes queued for the peer and not yet taken by the socket (uv_stream_get_write_queue_size,
 * TLS records included), plus frames held until the TLS handshake finishes. */
size_t rdzv_conn_unsent(const struct rdzv_conn *conn);

/* Stops reading and closes; a TLS conn whose handshake finished sends close_notify first. With
 * flush, queued writes are sent first (uv_shutdown), so an ERROR
 * sent just before reaches the peer. Calling it again (e.g. without flush, to hurry a
 * flushing close) is allowed; close_cb is the one given first and runs once. */
void rdzv_conn_close(struct rdzv_conn *conn, int flush, rdzv_conn_close_cb close_cb);

#endif
