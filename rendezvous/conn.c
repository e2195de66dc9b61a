/* Framed connection: see conn.h. Reads exactly the bytes of the current frame part (header, then
 * payload) so that a frame boundary never falls inside a buffer and nothing needs copying. */
#include "conn.h"

#include <errno.h>
#include <stdlib.h>

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
    } else if (conn->payload == NULL) {
        *buf = uv_buf_init((char *)conn->hdr + conn->hdr_got, RDZV_HEADER_SIZE - conn->hdr_got);
    } else {
        *buf = uv_buf_init((char *)conn->payload + conn->payload_got,
                           conn->payload_len - conn->payload_got);
    }
}

/* Reading ends for good; the owner hears about it once, unless it is closing anyway. */
static void stop(struct rdzv_conn *conn, int err)
{
    conn->reading = 0;
    uv_read_stop((uv_stream_t *)&conn->tcp);
    free(conn->payload);
    conn->payload = NULL;
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

    free(conn->payload);
    conn->payload = NULL;
    conn->hdr_got = 0;
    if (err < 0) {
        stop(conn, err);
        return;
    }
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
    conn->payload = malloc(conn->payload_len);
    if (conn->payload == NULL) {
        stop(conn, -ENOMEM);
        return;
    }
    conn->payload_got = 0;
}

static void read_cb(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct rdzv_conn *conn = stream->data;

    (void)buf;
    if (nread == 0 || !conn->reading)
        return;
    if (nread < 0) {
        stop(conn, (int)nread);
        return;
    }
    conn->bytes_in += (uint64_t)nread;
    if (conn->payload == NULL) {
        conn->hdr_got += (uint32_t)nread;
        if (conn->hdr_got == RDZV_HEADER_SIZE)
            header_done(conn);
        return;
    }
    conn->payload_got += (uint32_t)nread;
    if (conn->payload_got == conn->payload_len)
        dispatch(conn);
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

int rdzv_conn_send(struct rdzv_conn *conn, const struct rdzv_msg *msg)
{
    struct write_req *wr, *shrunk;
    size_t len;
    uv_buf_t buf;
    int err;

    if (conn->closing)
        return -ENOTCONN;
    wr = malloc(sizeof(*wr) + RDZV_HEADER_SIZE + RDZV_MAX_PAYLOAD);
    if (wr == NULL)
        return -ENOMEM;
    err = rdzv_msg_encode(msg, wr->data, RDZV_HEADER_SIZE + RDZV_MAX_PAYLOAD, &len);
    if (err < 0)
        goto out;
    shrunk = realloc(wr, sizeof(*wr) + len); /* frames are small; don't hold 64 KiB each */
    if (shrunk != NULL)
        wr = shrunk;
    buf = uv_buf_init((char *)wr->data, (unsigned)len);
    err = uv_write(&wr->req, (uv_stream_t *)&conn->tcp, &buf, 1, write_cb);
    if (err == 0) {
        wr = NULL; /* write_cb frees it */
        conn->bytes_out += len;
    }
out:
    free(wr);
    return err;
}

static void closed_cb(uv_handle_t *handle)
{
    struct rdzv_conn *conn = handle->data;

    free(conn->payload);
    conn->payload = NULL;
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
    if (flush && conn->shutting)
        return;
    /* uv_shutdown fails (UV_ENOTCONN) on a handle that never connected: close it at once. */
    if (flush && uv_shutdown(&conn->shutdown, (uv_stream_t *)&conn->tcp, shutdown_cb) == 0) {
        conn->shutting = 1;
        return;
    }
    uv_close((uv_handle_t *)&conn->tcp, closed_cb);
}
