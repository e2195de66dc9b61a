/* Agent side of the rendezvous protocol: see client.h. One connection, opened by the first
 * rdzv_client_join(): resolve -> connect -> HELLO -> (WELCOME) -> the queued JOIN. */
#include "client.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"

enum client_state {
    CLIENT_IDLE = 0,   /* nothing sent yet */
    CLIENT_RESOLVING,  /* uv_getaddrinfo in flight */
    CLIENT_CONNECTING, /* uv_tcp_connect in flight */
    CLIENT_HELLO,      /* HELLO sent, waiting for WELCOME */
    CLIENT_READY,      /* WELCOME received */
    CLIENT_FAILED,     /* error_cb ran: no callback any more */
};

struct rdzv_client {
    uv_loop_t *loop;
    struct rdzv_conn conn; /* conn.data = this client */
    uv_getaddrinfo_t gai;
    uv_connect_t connect;
    const struct rdzv_client_cbs *cbs;
    void *data;
    char host[RDZV_HOST_MAX + 1];
    unsigned port;
    char token[RDZV_TOKEN_MAX + 1];

    enum client_state state;
    uint32_t server_error; /* code of the server's ERROR, 0 if none */
    struct rdzv_join join; /* queued until WELCOME */
    int join_queued;
    int gai_pending; /* the getaddrinfo callback still has to run */
    int connected;   /* the TCP connect succeeded */
    int closing, conn_closed;
    void (*close_cb)(void *data);
    void *close_data;
};

static void msg_cb(struct rdzv_conn *conn, const struct rdzv_msg *m);
static void conn_error_cb(struct rdzv_conn *conn, int err);

int rdzv_client_new(uv_loop_t *loop, const char *host, unsigned port, const char *token,
                    const struct rdzv_client_cbs *cbs, void *data, struct rdzv_client **out)
{
    struct rdzv_client *c;
    int err;

    if (host == NULL || strlen(host) > RDZV_HOST_MAX || port == 0 || port > 65535)
        return UV_EINVAL;
    if (token != NULL && strlen(token) > RDZV_TOKEN_MAX)
        return UV_EINVAL;
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return UV_ENOMEM;
    err = rdzv_conn_init(loop, &c->conn, msg_cb, conn_error_cb, c);
    if (err < 0) {
        free(c);
        return err;
    }
    c->loop = loop;
    c->cbs = cbs;
    c->data = data;
    snprintf(c->host, sizeof(c->host), "%s", host);
    c->port = port;
    snprintf(c->token, sizeof(c->token), "%s", token != NULL ? token : "");
    *out = c;
    return 0;
}

void *rdzv_client_data(const struct rdzv_client *c)
{
    return c->data;
}

uint32_t rdzv_client_server_error(const struct rdzv_client *c)
{
    return c->server_error;
}

/* The single exit to error_cb: at most once, and never after rdzv_client_close(). */
static void fail(struct rdzv_client *c, int err, const char *fmt, ...)
{
    char text[RDZV_TEXT_MAX + 64];
    va_list ap;

    if (c->closing || c->state == CLIENT_FAILED)
        return;
    c->state = CLIENT_FAILED;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (c->cbs->error_cb != NULL)
        c->cbs->error_cb(c, err, text);
}

/* The server's ERROR codes as errno values, so callers can test err without knowing the wire
 * codes (a join timeout is UV_ETIMEDOUT, like any other timeout). */
static int err_from_code(uint32_t code)
{
    switch (code) {
    case RDZV_ERR_VERSION:
        return -EPROTONOSUPPORT;
    case RDZV_ERR_AUTH:
        return -EACCES;
    case RDZV_ERR_TIMEOUT:
        return -ETIMEDOUT;
    case RDZV_ERR_MISMATCH:
        return -EINVAL;
    case RDZV_ERR_CLOSED:
        return -ESHUTDOWN;
    default:
        return -EPROTO;
    }
}

static int send_join(struct rdzv_client *c)
{
    struct rdzv_msg m = {.type = RDZV_MSG_JOIN};

    m.u.join = c->join;
    return rdzv_conn_send(&c->conn, &m);
}

/* --- connecting ----------------------------------------------------------------------------- */
static void maybe_free(struct rdzv_client *c)
{
    void (*cb)(void *data) = c->close_cb;
    void *data = c->close_data;

    if (!c->conn_closed || c->gai_pending)
        return;
    free(c);
    if (cb != NULL)
        cb(data);
}

static void connect_cb(uv_connect_t *req, int status)
{
    struct rdzv_client *c = req->data;
    struct rdzv_msg m = {.type = RDZV_MSG_HELLO};
    int err = status;

    if (c->closing)
        return; /* UV_ECANCELED from uv_close() */
    if (err == 0) {
        c->connected = 1;
        err = rdzv_conn_start(&c->conn);
    }
    if (err < 0) {
        fail(c, err, "cannot connect to rendezvous %s:%u: %s", c->host, c->port, uv_strerror(err));
        return;
    }
    m.u.hello.version = RDZV_PROTO_VERSION;
    m.u.hello.role = RDZV_ROLE_AGENT;
    memcpy(m.u.hello.token, c->token, sizeof(c->token));
    err = rdzv_conn_send(&c->conn, &m);
    if (err < 0) {
        fail(c, err, "cannot send HELLO: %s", uv_strerror(err));
        return;
    }
    c->state = CLIENT_HELLO;
}

static void gai_cb(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    struct rdzv_client *c = req->data;
    int err = status;

    c->gai_pending = 0;
    if (c->closing) {
        uv_freeaddrinfo(res);
        maybe_free(c);
        return;
    }
    /* The first address only: an agent's endpoint names one server. */
    c->connect.data = c;
    if (err == 0)
        err = uv_tcp_connect(&c->connect, &c->conn.tcp, res->ai_addr, connect_cb);
    uv_freeaddrinfo(res);
    if (err < 0) {
        fail(c, err, "cannot reach rendezvous %s:%u: %s", c->host, c->port, uv_strerror(err));
        return;
    }
    c->state = CLIENT_CONNECTING;
}

static int start_connect(struct rdzv_client *c)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct sockaddr_storage addr;
    char port[8];
    int err;

    /* A numeric address needs no resolver: skipping uv_getaddrinfo also spares starting
     * libuv's thread pool, a millisecond of a standalone job's start-up. */
    if (uv_ip4_addr(c->host, (int)c->port, (struct sockaddr_in *)&addr) == 0 ||
        uv_ip6_addr(c->host, (int)c->port, (struct sockaddr_in6 *)&addr) == 0) {
        c->connect.data = c;
        err = uv_tcp_connect(&c->connect, &c->conn.tcp, (struct sockaddr *)&addr, connect_cb);
        if (err == 0)
            c->state = CLIENT_CONNECTING;
        return err;
    }
    snprintf(port, sizeof(port), "%u", c->port);
    c->gai.data = c;
    err = uv_getaddrinfo(c->loop, &c->gai, gai_cb, c->host, port, &hints);
    if (err < 0)
        return err;
    c->gai_pending = 1;
    c->state = CLIENT_RESOLVING;
    return 0;
}

/* --- requests ------------------------------------------------------------------------------- */
int rdzv_client_join(struct rdzv_client *c, const struct rdzv_join *join)
{
    int err;

    if (c->closing || c->state == CLIENT_FAILED)
        return UV_ENOTCONN;
    if (c->join_queued)
        return UV_EALREADY;
    c->join = *join;
    if (c->state == CLIENT_READY)
        return send_join(c);
    c->join_queued = 1;
    if (c->state != CLIENT_IDLE)
        return 0;
    err = start_connect(c);
    if (err < 0)
        c->join_queued = 0;
    return err;
}

int rdzv_client_report_failure(struct rdzv_client *c, const struct rdzv_failure *f, int leaving)
{
    struct rdzv_msg m = {.type = leaving ? RDZV_MSG_LEAVE : RDZV_MSG_FAILED};

    if (c->closing || c->state != CLIENT_READY)
        return UV_ENOTCONN;
    m.u.failed = *f;
    return rdzv_conn_send(&c->conn, &m);
}

int rdzv_client_report_done(struct rdzv_client *c, uint32_t round)
{
    struct rdzv_msg m = {.type = RDZV_MSG_DONE};

    if (c->closing || c->state != CLIENT_READY)
        return UV_ENOTCONN;
    m.u.done.round = round;
    return rdzv_conn_send(&c->conn, &m);
}

/* --- incoming ------------------------------------------------------------------------------- */
static void on_welcome(struct rdzv_client *c)
{
    int err;

    if (c->state != CLIENT_HELLO) {
        fail(c, -EPROTO, "unexpected WELCOME from the server");
        return;
    }
    c->state = CLIENT_READY;
    if (!c->join_queued)
        return;
    c->join_queued = 0;
    err = send_join(c);
    if (err < 0)
        fail(c, err, "cannot send JOIN: %s", uv_strerror(err));
}

/* Callbacks may call rdzv_client_close(); nothing here touches c after calling one. */
static void on_job_msg(struct rdzv_client *c, const struct rdzv_msg *m)
{
    const struct rdzv_client_cbs *cbs = c->cbs;

    switch (m->type) {
    case RDZV_MSG_WAITING:
        if (cbs->waiting_cb != NULL)
            cbs->waiting_cb(c, &m->u.waiting);
        break;
    case RDZV_MSG_ASSIGN:
        if (cbs->assign_cb != NULL)
            cbs->assign_cb(c, &m->u.assign);
        break;
    case RDZV_MSG_RESTART:
        if (cbs->restart_cb != NULL)
            cbs->restart_cb(c, &m->u.restart);
        break;
    case RDZV_MSG_JOB_DONE:
        if (cbs->job_done_cb != NULL)
            cbs->job_done_cb(c);
        break;
    case RDZV_MSG_JOB_FAILED:
        if (cbs->job_failed_cb != NULL)
            cbs->job_failed_cb(c, &m->u.job_failed);
        break;
    default:
        break;
    }
}

static void msg_cb(struct rdzv_conn *conn, const struct rdzv_msg *m)
{
    struct rdzv_client *c = conn->data;

    if (c->closing || c->state == CLIENT_FAILED)
        return;
    switch (m->type) {
    case RDZV_MSG_WELCOME:
        on_welcome(c);
        break;
    case RDZV_MSG_ERROR:
        c->server_error = m->u.error.code;
        fail(c, err_from_code(m->u.error.code), "%s", m->u.error.text);
        break;
    case RDZV_MSG_WAITING:
    case RDZV_MSG_ASSIGN:
    case RDZV_MSG_RESTART:
    case RDZV_MSG_JOB_DONE:
    case RDZV_MSG_JOB_FAILED:
        if (c->state == CLIENT_READY)
            on_job_msg(c, m);
        else
            fail(c, -EPROTO, "%s from the server before WELCOME", rdzv_msg_name(m->type));
        break;
    default:
        fail(c, -EPROTO, "unexpected %s from the server", rdzv_msg_name(m->type));
        break;
    }
}

static void conn_error_cb(struct rdzv_conn *conn, int err)
{
    struct rdzv_client *c = conn->data;

    if (err == UV_EOF)
        fail(c, err, "rendezvous %s:%u closed the connection", c->host, c->port);
    else if (err == -EPROTO || err == -EPROTONOSUPPORT || err == -EMSGSIZE || err == -ENOTSUP)
        fail(c, -EPROTO, "bad frame from rendezvous %s:%u: %s", c->host, c->port, strerror(-err));
    else
        fail(c, err, "rendezvous %s:%u: %s", c->host, c->port, uv_strerror(err));
}

/* --- closing -------------------------------------------------------------------------------- */
static void conn_closed_cb(struct rdzv_conn *conn)
{
    struct rdzv_client *c = conn->data;

    c->conn_closed = 1;
    maybe_free(c);
}

void rdzv_client_close(struct rdzv_client *c, void (*close_cb)(void *data), void *data)
{
    if (c == NULL || c->closing)
        return;
    c->closing = 1;
    c->close_cb = close_cb;
    c->close_data = data;
    if (c->gai_pending)
        uv_cancel((uv_req_t *)&c->gai); /* may be too late; gai_cb then sees closing */
    /* Flushing needs a connected stream: a shutdown queued behind a pending connect could
     * wait forever. */
    rdzv_conn_close(&c->conn, c->connected, conn_closed_cb);
}
