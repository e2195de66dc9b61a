/* A framed rendezvous connection over TCP, shared by the server and the client.
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

/* One decoded message; msg is only valid during the call. The callback may send and may close
 * the connection; once closed, no further msg_cb or error_cb runs. */
typedef void (*rdzv_conn_msg_cb)(struct rdzv_conn *conn, const struct rdzv_msg *msg);
/* Reading stopped for good: err is UV_EOF (peer closed), another UV_E* read error, or the codec's
 * -EPROTO (bad magic, payload), -EPROTONOSUPPORT (header version), -EMSGSIZE (length over the
 * limit) or -ENOTSUP (unknown message type). Runs at most once; the owner decides to close. */
typedef void (*rdzv_conn_error_cb)(struct rdzv_conn *conn, int err);
/* The handle is closed; the owner may free the memory holding the conn. */
typedef void (*rdzv_conn_close_cb)(struct rdzv_conn *conn);

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
    int reading;  /* rdzv_conn_start() succeeded and no error stopped it */
    int closing;  /* rdzv_conn_close() was called */
    int shutting; /* a uv_shutdown is in flight */
};

/* Initialises conn and its TCP handle on loop. Borrows the callbacks and data. Returns 0 or a
 * UV_E* error; on error nothing needs closing. After success, rdzv_conn_close() must be called
 * exactly as for any libuv handle, even if the connection was never used. */
int rdzv_conn_init(uv_loop_t *loop, struct rdzv_conn *conn, rdzv_conn_msg_cb msg_cb,
                   rdzv_conn_error_cb error_cb, void *data);

/* Starts framed reading on a connected handle (after uv_accept or a connect callback) and sets
 * TCP_NODELAY. Returns 0 or a UV_E* error (then no callback runs; close the conn). */
int rdzv_conn_start(struct rdzv_conn *conn);

/* Encodes msg (borrowed) and queues it for writing. Returns 0, -ENOTCONN once closing, the
 * codec's -EINVAL, -ENOMEM, or a uv_write error. Write failures later are not reported here:
 * they show up as a read error. */
int rdzv_conn_send(struct rdzv_conn *conn, const struct rdzv_msg *msg);

/* Stops reading and closes. With flush, queued writes are sent first (uv_shutdown), so an ERROR
 * sent just before reaches the peer. Calling it again (e.g. without flush, to hurry a
 * flushing close) is allowed; close_cb is the one given first and runs once. */
void rdzv_conn_close(struct rdzv_conn *conn, int flush, rdzv_conn_close_cb close_cb);

#endif
