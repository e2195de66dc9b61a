/* Agent side of the rendezvous protocol: see client.h. One connection at a time, opened by the
 * first rdzv_client_join(): resolve -> connect -> HELLO -> (WELCOME) -> the queued JOIN. After an
 * established connection breaks: AWAY -> (backoff) -> connect -> HELLO -> REJOIN/JOIN, under a
 * grace timer that ends the outage with error_cb. */
#include "client.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "conn.h"
#include "server.h"
#include "tls.h"

#define BACKOFF_FIRST_MS 100
#define BACKOFF_MAX_MS 2000

enum client_state {
    CLIENT_IDLE = 0,   /* nothing sent yet */
    CLIENT_RESOLVING,  /* uv_getaddrinfo in flight */
    CLIENT_CONNECTING, /* uv_tcp_connect in flight */
    CLIENT_HELLO,      /* HELLO sent, waiting for WELCOME */
    CLIENT_READY,      /* WELCOME received */
    CLIENT_AWAY,       /* the connection broke: closing it, or waiting to retry */
    CLIENT_FAILED,     /* error_cb ran: no callback any more */
};

/* A report made while disconnected (FAILED, LEAVE, DONE or CKPT), sent after the REJOIN's
 * answer. */
struct pending {
    struct pending *next;
    uint8_t type;
    struct rdzv_failure f; /* FAILED/LEAVE; DONE uses f.round only */
    struct rdzv_ckpt ck;   /* CKPT */
};

struct rdzv_client {
    uv_loop_t *loop;
    struct rdzv_conn conn; /* conn.data = this client; re-initialised for every attempt */
    uv_getaddrinfo_t gai;
    uv_connect_t connect;
    uv_timer_t hb_timer;    /* sends HEARTBEAT every keep_alive_ms */
    uv_timer_t idle_timer;  /* nothing received for heartbeat_timeout_ms: the link is dead */
    uv_timer_t retry_timer; /* backoff between reconnect attempts */
    uv_timer_t grace_timer; /* the outage lasted reconnect_grace_ms: give up */
    const struct rdzv_client_cbs *cbs;
    void *data;
    char host[RDZV_HOST_MAX + 1];
    unsigned port;
    struct rdzv_tls *tls;         /* every connection, reconnects included; NULL when local */
    struct rdzv_server *local;    /* in-process channel to this server instead (new_local) */
    struct sockaddr_storage addr; /* what the first connection reached; reconnects reuse it */

    enum client_state state;
    uint32_t server_error; /* code of the server's ERROR, 0 if none */
    struct rdzv_join join; /* the newest JOIN, with the defaults filled in */
    int join_queued;       /* JOIN waits for WELCOME */
    int join_active;       /* a JOIN went out and no RESTART superseded it */
    int running, done;     /* ASSIGN for the active JOIN came / DONE was reported for it */
    struct rdzv_assign assign;
    int finished;          /* JOB_DONE or JOB_FAILED: no heartbeats, no reconnects */
    int welcomed;          /* some connection got WELCOME: breaks from now on mean reconnect */
    int away;              /* an outage is in progress (from the break until re-registered) */
    uint64_t first_try_ms; /* uv_now of the first connect attempt, 0 before it */
    int rejoin_wait;
    unsigned backoff_ms;
    uint64_t rng;
    struct pending *queue, **queue_tail;
    uint64_t hb_seq, hb_sent_ns;
    int64_t rtt_us;

    int gai_pending; /* the getaddrinfo callback still has to run */
    int conn_open;   /* conn was initialised and its close callback has not run */
    int connected;   /* the current TCP connect succeeded */
    int timers_open;
    int closing;
    void (*close_cb)(void *data);
    void *close_data;
    struct rdzv_msg out; /* scratch for sending: the union is ~64 KiB, too big for a stack */
};

static void msg_cb(struct rdzv_conn *conn, const struct rdzv_msg *m);
static void conn_error_cb(struct rdzv_conn *conn, int err);
static void conn_closed_cb(struct rdzv_conn *conn);
static void hb_cb(uv_timer_t *t);
static void idle_cb(uv_timer_t *t);
static void retry_cb(uv_timer_t *t);
static void grace_cb(uv_timer_t *t);
static void schedule_retry(struct rdzv_client *c);

static int open_conn(struct rdzv_client *c)
{
    int err = rdzv_conn_init(c->loop, &c->conn, msg_cb, conn_error_cb, c);

    if (err == 0) {
        c->conn_open = 1;
        c->connected = 0;
    }
    return err;
}

static int client_new(uv_loop_t *loop, const char *host, unsigned port,
                      const struct rdzv_tls_opts *o, const struct rdzv_client_cbs *cbs, void *data,
                      struct rdzv_client **out)
{
    struct rdzv_tls_opts opts = o != NULL ? *o : (struct rdzv_tls_opts){0};
    struct rdzv_client *c;
    uv_timer_t *timers[4];
    char why[256];
    int err;

    if (host == NULL || strlen(host) > RDZV_HOST_MAX || port == 0 || port > 65535)
        return UV_EINVAL;
    if (o != NULL && o->token != NULL && strlen(o->token) > RDZV_TOKEN_MAX)
        return UV_EINVAL;
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return UV_ENOMEM;
    c->loop = loop;
    if (opts.cert_file != NULL && opts.server_name == NULL)
        opts.server_name = host; /* the certificate must name what we connect to */
    err = o != NULL ? rdzv_tls_new(&opts, 0, &c->tls, why, sizeof(why)) : 0;
    if (err == 0)
        err = open_conn(c);
    if (err < 0) {
        rdzv_tls_free(c->tls);
        free(c);
        return err;
    }
    timers[0] = &c->hb_timer;
    timers[1] = &c->idle_timer;
    timers[2] = &c->retry_timer;
    timers[3] = &c->grace_timer;
    for (int i = 0; i < 4; i++) {
        uv_timer_init(loop, timers[i]); /* cannot fail: it only links the handle */
        timers[i]->data = c;
        c->timers_open++;
    }
    c->cbs = cbs;
    c->data = data;
    snprintf(c->host, sizeof(c->host), "%s", host);
    c->port = port;
    c->queue_tail = &c->queue;
    c->rtt_us = -1;
    c->rng = uv_hrtime() ^ (uint64_t)(uintptr_t)c;
    *out = c;
    return 0;
}

int rdzv_client_new(uv_loop_t *loop, const char *host, unsigned port, const char *token,
                    const struct rdzv_client_cbs *cbs, void *data, struct rdzv_client **out)
{
    struct rdzv_tls_opts o = {.token = token};

    if (token == NULL || token[0] == '\0')
        return UV_EINVAL;
    return client_new(loop, host, port, &o, cbs, data, out);
}

int rdzv_client_new_local(uv_loop_t *loop, struct rdzv_server *srv, const char *addr,
                          const struct rdzv_client_cbs *cbs, void *data, struct rdzv_client **out)
{
    int err;

    if (srv == NULL)
        return UV_EINVAL;
    err = client_new(loop, addr != NULL ? addr : "127.0.0.1", rdzv_server_port(srv), NULL, cbs,
                     data, out);
    if (err == 0)
        (*out)->local = srv;
    return err;
}

int rdzv_client_new_tls(uv_loop_t *loop, const char *host, unsigned port,
                        const struct rdzv_tls_opts *o, const struct rdzv_client_cbs *cbs,
                        void *data, struct rdzv_client **out)
{
    if (o == NULL)
        return UV_EINVAL;
    return client_new(loop, host, port, o, cbs, data, out);
}

void *rdzv_client_data(const struct rdzv_client *c)
{
    return c->data;
}

uint32_t rdzv_client_server_error(const struct rdzv_client *c)
{
    return c->server_error;
}

int64_t rdzv_client_rtt_us(const struct rdzv_client *c)
{
    return c->rtt_us;
}

static void stop_timers(struct rdzv_client *c)
{
    uv_timer_stop(&c->hb_timer);
    uv_timer_stop(&c->idle_timer);
    uv_timer_stop(&c->retry_timer);
    uv_timer_stop(&c->grace_timer);
}

/* The single exit to error_cb: at most once, and never after rdzv_client_close(). */
static void fail(struct rdzv_client *c, int err, const char *fmt, ...)
{
    char text[RDZV_TEXT_MAX + 64];
    va_list ap;

    if (c->closing || c->state == CLIENT_FAILED)
        return;
    c->state = CLIENT_FAILED;
    stop_timers(c);
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (c->cbs->error_cb != NULL)
        c->cbs->error_cb(c, err, text);
}

/* Restarted by every message: a host that was cut off sends neither data nor FIN. */
static void arm_idle(struct rdzv_client *c)
{
    if (!c->finished)
        uv_timer_start(&c->idle_timer, idle_cb, c->join.heartbeat_timeout_ms, 0);
}

static int send_join(struct rdzv_client *c)
{
    c->out.type = RDZV_MSG_JOIN;
    c->out.u.join = c->join;
    c->join_active = 1;
    c->running = 0;
    c->done = 0;
    if (!uv_is_active((uv_handle_t *)&c->hb_timer))
        uv_timer_start(&c->hb_timer, hb_cb, c->join.keep_alive_ms, c->join.keep_alive_ms);
    return rdzv_conn_send(&c->conn, &c->out);
}

static int send_report(struct rdzv_client *c, const struct pending *p)
{
    c->out.type = p->type;
    if (p->type == RDZV_MSG_DONE)
        c->out.u.done.round = p->f.round;
    else if (p->type == RDZV_MSG_CKPT)
        c->out.u.ckpt = p->ck;
    else
        c->out.u.failed = p->f;
    return rdzv_conn_send(&c->conn, &c->out);
}

/* --- connecting ----------------------------------------------------------------------------- */
static void maybe_free(struct rdzv_client *c)
{
    void (*cb)(void *data) = c->close_cb;
    void *data = c->close_data;
    struct pending *p;

    if (c->conn_open || c->gai_pending || c->timers_open > 0)
        return;
    while ((p = c->queue) != NULL) {
        c->queue = p->next;
        free(p);
    }
    rdzv_tls_free(c->tls); /* after the conn's close: it borrowed the configuration */
    free(c);
    if (cb != NULL)
        cb(data);
}

/* The first connection failed in a way that a server still starting explains: try again with
 * backoff until the join timeout, as torchrun does, so that the order in which nodes start does
 * not matter. Returns 1 when a retry is scheduled. */
static int first_retry(struct rdzv_client *c, int err)
{
    uint64_t waited = uv_now(c->loop) + 1 - c->first_try_ms;

    if (err != UV_ECONNREFUSED && err != UV_ETIMEDOUT && err != UV_EHOSTUNREACH &&
        err != UV_ENETUNREACH && err != UV_ECONNRESET && err != UV_ECONNABORTED && err != UV_EOF &&
        err != UV_EPIPE)
        return 0;
    if (c->join.join_timeout_ms != 0 && waited >= c->join.join_timeout_ms)
        return 0;
    uv_timer_stop(&c->idle_timer);
    c->state = CLIENT_AWAY; /* not an outage (c->away stays 0): conn_closed_cb retries */
    if (c->backoff_ms == 0)
        c->backoff_ms = BACKOFF_FIRST_MS;
    if (c->cbs->server_wait_cb != NULL)
        c->cbs->server_wait_cb(c, err, waited);
    if (c->state != CLIENT_AWAY || c->closing) /* the callback closed the client */
        return 1;
    if (c->conn_open)
        rdzv_conn_close(&c->conn, 0, conn_closed_cb);
    else
        schedule_retry(c);
    return 1;
}

static void connected(struct rdzv_client *c, int err);

static void connect_cb(uv_connect_t *req, int status)
{
    struct rdzv_client *c = req->data;
    int err = status;

    /* UV_ECANCELED from uv_close(): the client is closing, or the attempt was abandoned. */
    if (c->closing || c->state != CLIENT_CONNECTING)
        return;
    if (err == 0) {
        c->connected = 1;
        err = rdzv_conn_start_tls(&c->conn, c->tls, 0); /* HELLO waits for the handshake */
    }
    connected(c, err);
}

/* The connection is up (err 0; TLS started) or could not be: HELLO, or the failure. */
static void connected(struct rdzv_client *c, int err)
{
    if (err == 0) {
        c->out.type = RDZV_MSG_HELLO;
        c->out.u.hello.version = RDZV_PROTO_VERSION;
        c->out.u.hello.role = RDZV_ROLE_AGENT;
        memset(c->out.u.hello.token, 0, sizeof(c->out.u.hello.token)); /* protocol 3: the
                                                   TLS credential speaks, HELLO.token is unused */
        err = rdzv_conn_send(&c->conn, &c->out);
    }
    if (err == 0) {
        c->state = CLIENT_HELLO;
        return;
    }
    if (c->welcomed)
        conn_error_cb(&c->conn, err);
    else if (!first_retry(c, err))
        fail(c, err, "cannot connect to rendezvous %s:%u: %s", c->host, c->port, uv_strerror(err));
}

static int connect_addr(struct rdzv_client *c, const struct sockaddr *sa, size_t len)
{
    int err;

    memcpy(&c->addr, sa, len);
    if (c->first_try_ms == 0)
        c->first_try_ms = uv_now(c->loop) + 1; /* + 1: never 0 */
    c->connect.data = c;
    err = uv_tcp_connect(&c->connect, &c->conn.tcp, (struct sockaddr *)&c->addr, connect_cb);
    if (err == 0) {
        c->state = CLIENT_CONNECTING;
        arm_idle(c); /* bounds the whole handshake, as a silent server would hang it */
    }
    return err;
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
    if (err == 0)
        err = connect_addr(c, res->ai_addr, res->ai_addrlen);
    uv_freeaddrinfo(res);
    if (err < 0)
        fail(c, err, "cannot reach rendezvous %s:%u: %s", c->host, c->port, uv_strerror(err));
}

/* The in-process channel to the server this process hosts: no TCP, no TLS; the HELLO goes at
 * once. Returns 0, or an error for start_connect's caller. */
static int connect_local(struct rdzv_client *c)
{
    uv_os_sock_t fd;
    int err = rdzv_server_connect_local(c->local, c->host, &fd);

    if (err < 0)
        return err;
    if (c->first_try_ms == 0)
        c->first_try_ms = uv_now(c->loop) + 1;
    err = rdzv_conn_start_local(&c->conn, fd, NULL);
    if (err < 0)
        return err;
    c->connected = 1;
    c->state = CLIENT_CONNECTING;
    arm_idle(c);
    connected(c, 0);
    return 0;
}

static int start_connect(struct rdzv_client *c)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct sockaddr_in in4;
    struct sockaddr_in6 in6;
    char port[8];
    int err;

    if (c->local != NULL)
        return connect_local(c);
    /* A numeric address needs no resolver: skipping uv_getaddrinfo also spares starting
     * libuv's thread pool, a millisecond of a standalone job's start-up. */
    if (uv_ip4_addr(c->host, (int)c->port, &in4) == 0)
        return connect_addr(c, (struct sockaddr *)&in4, sizeof(in4));
    if (uv_ip6_addr(c->host, (int)c->port, &in6) == 0)
        return connect_addr(c, (struct sockaddr *)&in6, sizeof(in6));
    snprintf(port, sizeof(port), "%u", c->port);
    c->gai.data = c;
    err = uv_getaddrinfo(c->loop, &c->gai, gai_cb, c->host, port, &hints);
    if (err < 0)
        return err;
    c->gai_pending = 1;
    c->state = CLIENT_RESOLVING;
    return 0;
}

/* --- outage and reconnection ------------------------------------------------------------------ */
static void schedule_retry(struct rdzv_client *c)
{
    uint64_t delay;

    /* xorshift64: jitter only needs to keep a crowd of agents from reconnecting in step. */
    c->rng ^= c->rng << 13;
    c->rng ^= c->rng >> 7;
    c->rng ^= c->rng << 17;
    delay = c->backoff_ms * (80 + c->rng % 41) / 100; /* +-20 % */
    c->backoff_ms = c->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : c->backoff_ms * 2;
    uv_timer_start(&c->retry_timer, retry_cb, delay, 0);
}

/* The connection (established or a reconnect attempt) is gone: close it and retry once the
 * handle is closed, because the next attempt re-initialises the same embedded conn. */
static void lose(struct rdzv_client *c, const char *why)
{
    int first = !c->away;

    if (c->closing || c->state == CLIENT_FAILED)
        return;
    if (first) {
        c->away = 1;
        c->backoff_ms = BACKOFF_FIRST_MS;
        uv_timer_start(&c->grace_timer, grace_cb, c->join.reconnect_grace_ms, 0);
    }
    c->state = CLIENT_AWAY;
    c->rejoin_wait = 0;
    uv_timer_stop(&c->hb_timer);
    uv_timer_stop(&c->idle_timer);
    if (c->conn_open)
        rdzv_conn_close(&c->conn, 0, conn_closed_cb); /* retries from conn_closed_cb */
    else
        schedule_retry(c);
    if (first && c->cbs->disconnected_cb != NULL)
        c->cbs->disconnected_cb(c, why);
}

static void retry_cb(uv_timer_t *t)
{
    struct rdzv_client *c = t->data;
    int err;

    if (c->state != CLIENT_AWAY)
        return;
    err = open_conn(c);
    if (err < 0) {
        schedule_retry(c);
        return;
    }
    err = connect_addr(c, (struct sockaddr *)&c->addr,
                       c->addr.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                     : sizeof(struct sockaddr_in));
    if (err < 0)
        lose(c, uv_strerror(err));
}

static void grace_cb(uv_timer_t *t)
{
    struct rdzv_client *c = t->data;
    unsigned ms = c->join.reconnect_grace_ms;

    if (!c->away)
        return;
    if (ms % 1000 == 0)
        fail(c, UV_ETIMEDOUT, "rendezvous server unreachable for %u s", ms / 1000);
    else
        fail(c, UV_ETIMEDOUT, "rendezvous server unreachable for %u ms", ms);
}

static void idle_cb(uv_timer_t *t)
{
    struct rdzv_client *c = t->data;
    char why[96];

    snprintf(why, sizeof(why), "no message from the server for %u ms",
             c->join.heartbeat_timeout_ms);
    if (c->welcomed && !c->finished)
        lose(c, why);
    else if (c->welcomed)
        fail(c, UV_ETIMEDOUT, "rendezvous %s:%u: %s", c->host, c->port, why);
    else if (!first_retry(c, UV_ETIMEDOUT)) /* a host still booting, a link down: silence,
                                             * then retry, until the join timeout */
        fail(c, UV_ETIMEDOUT,
             "rendezvous %s:%u: no answer within the join timeout (%.0f s): is the host up and "
             "reachable from here, and is muster listening there?",
             c->host, c->port, c->join.join_timeout_ms / 1000.0);
}

static void hb_cb(uv_timer_t *t)
{
    struct rdzv_client *c = t->data;

    if (c->state != CLIENT_READY || c->finished)
        return;
    c->out.type = RDZV_MSG_HEARTBEAT;
    c->out.u.heartbeat.round = c->assign.round;
    c->out.u.heartbeat.seq = ++c->hb_seq;
    c->hb_sent_ns = mc_mono_ns();
    /* A failed write shows up as a read error or, on a dead link, as silence. */
    (void)rdzv_conn_send(&c->conn, &c->out);
}

static void flush_queue(struct rdzv_client *c)
{
    struct pending *p;

    while ((p = c->queue) != NULL) {
        c->queue = p->next;
        if (c->state == CLIENT_READY)
            (void)send_report(c, p); /* a failure here is a new outage */
        free(p);
    }
    c->queue_tail = &c->queue;
}

/* Re-registered (or nothing needed it): reports queued during the outage go out now. */
static void end_outage(struct rdzv_client *c)
{
    c->away = 0;
    c->rejoin_wait = 0;
    uv_timer_stop(&c->grace_timer);
    flush_queue(c);
    if (c->cbs->reconnected_cb != NULL)
        c->cbs->reconnected_cb(c);
}

static void reregister(struct rdzv_client *c)
{
    int err = 0;

    if (c->join_queued) { /* the agent re-joined after a RESTART while we were away */
        c->join_queued = 0;
        err = send_join(c);
    } else if (c->join_active && c->running) {
        c->out.type = RDZV_MSG_REJOIN;
        c->out.u.rejoin = (struct rdzv_rejoin){
            .join = c->join, .running = 1, .done = (uint8_t)c->done, .assign = c->assign};
        err = rdzv_conn_send(&c->conn, &c->out);
        if (err == 0) {
            c->rejoin_wait = 1;
            uv_timer_start(&c->hb_timer, hb_cb, c->join.keep_alive_ms, c->join.keep_alive_ms);
            return;
        }
    } else if (c->join_active) {
        err = send_join(c); /* the round was still filling: simply join again */
    }
    if (err < 0) {
        lose(c, uv_strerror(err));
        return;
    }
    if (c->join_active)
        uv_timer_start(&c->hb_timer, hb_cb, c->join.keep_alive_ms, c->join.keep_alive_ms);
    end_outage(c);
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
    if (c->join.keep_alive_ms == 0)
        c->join.keep_alive_ms = RDZV_CLIENT_KEEP_ALIVE_MS;
    if (c->join.heartbeat_timeout_ms == 0)
        c->join.heartbeat_timeout_ms = RDZV_CLIENT_HEARTBEAT_TIMEOUT_MS;
    if (c->join.reconnect_grace_ms == 0)
        c->join.reconnect_grace_ms = RDZV_CLIENT_RECONNECT_GRACE_MS;
    if (c->state == CLIENT_READY)
        return send_join(c);
    c->join_queued = 1;
    if (c->state != CLIENT_IDLE)
        return 0; /* sent after WELCOME, also after a reconnect's WELCOME */
    err = start_connect(c);
    if (err < 0)
        c->join_queued = 0;
    return err;
}

/* Sends now, queues while an outage lasts, refuses before the first WELCOME. `r` is copied. */
static int report(struct rdzv_client *c, const struct pending *r)
{
    struct pending *p;

    if (c->closing || c->state == CLIENT_FAILED)
        return UV_ENOTCONN;
    if (r->type == RDZV_MSG_DONE && c->running && r->f.round == c->assign.round)
        c->done = 1; /* a REJOIN must tell a restarted server */
    if (c->state == CLIENT_READY && !c->away)
        return send_report(c, r);
    if (!c->away)
        return UV_ENOTCONN;
    p = malloc(sizeof(*p));
    if (p == NULL)
        return UV_ENOMEM;
    *p = *r;
    p->next = NULL;
    *c->queue_tail = p;
    c->queue_tail = &p->next;
    return 0;
}

int rdzv_client_report_failure(struct rdzv_client *c, const struct rdzv_failure *f, int leaving)
{
    struct pending r = {.type = leaving ? RDZV_MSG_LEAVE : RDZV_MSG_FAILED, .f = *f};

    return report(c, &r);
}

int rdzv_client_report_done(struct rdzv_client *c, uint32_t round)
{
    struct pending r = {.type = RDZV_MSG_DONE, .f.round = round};

    return report(c, &r);
}

int rdzv_client_report_ckpt(struct rdzv_client *c, const struct rdzv_ckpt *ck)
{
    if (ck->name[0] == '\0' || !rdzv_ckpt_name_ok(ck->name) ||
        strnlen(ck->reason, RDZV_TEXT_MAX + 1) > RDZV_TEXT_MAX)
        return UV_EINVAL; /* refused here, not when a queued copy fails to encode later */
    struct pending r = {.type = RDZV_MSG_CKPT, .ck = *ck};

    return report(c, &r);
}

int rdzv_client_report_preflight(struct rdzv_client *c, const struct rdzv_preflight *pf)
{
    if (pf->count > RDZV_PF_GPUS_MAX)
        return UV_EINVAL;
    if (c->closing || c->state != CLIENT_READY || c->away)
        return UV_ENOTCONN;
    c->out.type = RDZV_MSG_PREFLIGHT;
    c->out.u.preflight = *pf;
    return rdzv_conn_send(&c->conn, &c->out);
}

int rdzv_client_report_goodput(struct rdzv_client *c, const struct rdzv_goodput *g)
{
    if (c->closing || c->state != CLIENT_READY || c->away)
        return UV_ENOTCONN; /* display only: the next one carries the same totals and more */
    c->out.type = RDZV_MSG_GOODPUT;
    c->out.u.goodput = *g;
    return rdzv_conn_send(&c->conn, &c->out);
}

int rdzv_client_send_repl(struct rdzv_client *c, const struct rdzv_msg *m)
{
    if (m->type != RDZV_MSG_REPL_BEGIN && m->type != RDZV_MSG_REPL_DATA &&
        m->type != RDZV_MSG_REPL_ACK)
        return UV_EINVAL;
    if (c->closing || c->state != CLIENT_READY || c->away)
        return UV_ENOTCONN;
    return rdzv_conn_send(&c->conn, m);
}

int rdzv_client_send_evidence(struct rdzv_client *c, const struct rdzv_evidence *e)
{
    struct rdzv_msg *m;
    int rc;

    if (c->closing || c->state != CLIENT_READY || c->away)
        return UV_ENOTCONN;
    if ((m = malloc(sizeof(*m))) == NULL) /* c->out may hold a report being queued */
        return UV_ENOMEM;
    rdzv_msg_init(m, RDZV_MSG_EVIDENCE);
    m->u.evidence = *e;
    rc = rdzv_conn_send(&c->conn, m);
    free(m);
    return rc;
}

int rdzv_client_send_log(struct rdzv_client *c, const struct rdzv_msg *m)
{
    if (m->type != RDZV_MSG_LOG)
        return UV_EINVAL;
    if (c->closing || c->state != CLIENT_READY || c->away)
        return UV_ENOTCONN;
    return rdzv_conn_send(&c->conn, m);
}

int rdzv_client_send_telemetry(struct rdzv_client *c, const struct rdzv_msg *m)
{
    if (m->type != RDZV_MSG_TELEMETRY)
        return UV_EINVAL;
    if (c->closing || c->state != CLIENT_READY || c->away)
        return UV_ENOTCONN;
    return rdzv_conn_send(&c->conn, m);
}

size_t rdzv_client_unsent(const struct rdzv_client *c)
{
    return c->conn_open ? rdzv_conn_unsent(&c->conn) : 0;
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
    c->welcomed = 1;
    if (c->away) {
        reregister(c);
        return;
    }
    if (!c->join_queued)
        return;
    c->join_queued = 0;
    err = send_join(c);
    if (err < 0)
        fail(c, err, "cannot send JOIN: %s", uv_strerror(err));
}

/* The state a REJOIN reports must follow what the server told us. */
static void track_job_msg(struct rdzv_client *c, const struct rdzv_msg *m)
{
    switch (m->type) {
    case RDZV_MSG_ASSIGN:
        c->assign = m->u.assign;
        memset(c->assign.worker_key, 0, sizeof(c->assign.worker_key)); /* REJOIN's copy */
        c->running = 1;
        c->done = 0;
        break;
    case RDZV_MSG_RESTART:
        c->join_active = 0; /* workers stop; the agent JOINs again when they did */
        c->running = 0;
        break;
    case RDZV_MSG_JOB_DONE:
    case RDZV_MSG_JOB_FAILED:
        c->finished = 1;
        uv_timer_stop(&c->hb_timer);
        uv_timer_stop(&c->idle_timer);
        break;
    default:
        break;
    }
}

/* Callbacks may call rdzv_client_close(); nothing here touches c after calling one. */
static void on_job_msg(struct rdzv_client *c, const struct rdzv_msg *m)
{
    const struct rdzv_client_cbs *cbs = c->cbs;

    track_job_msg(c, m);
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

static void on_heartbeat(struct rdzv_client *c, const struct rdzv_heartbeat *hb)
{
    /* Only the newest: an older echo would pair with the wrong send time. */
    if (hb->seq == c->hb_seq && c->hb_sent_ns != 0)
        c->rtt_us = (int64_t)((mc_mono_ns() - c->hb_sent_ns) / 1000);
}

/* Any answer to a REJOIN ends the outage; end_outage's callback may close the client. */
static void on_server_msg(struct rdzv_client *c, const struct rdzv_msg *m)
{
    if (c->state != CLIENT_READY) {
        fail(c, -EPROTO, "%s from the server before WELCOME", rdzv_msg_name(m->type));
        return;
    }
    if (c->rejoin_wait) {
        if (m->type == RDZV_MSG_RESTART)
            track_job_msg(c, m); /* the flushed reports must not look current */
        end_outage(c);
        if (c->closing || c->state == CLIENT_FAILED)
            return;
    }
    if (m->type != RDZV_MSG_REJOIN_OK)
        on_job_msg(c, m);
}

static void msg_cb(struct rdzv_conn *conn, const struct rdzv_msg *m)
{
    struct rdzv_client *c = conn->data;

    if (c->closing || c->state == CLIENT_FAILED || c->state == CLIENT_AWAY)
        return;
    arm_idle(c);
    switch (m->type) {
    case RDZV_MSG_WELCOME:
        on_welcome(c);
        break;
    case RDZV_MSG_ERROR:
        c->server_error = m->u.error.code;
        fail(c, rdzv_err_errno(m->u.error.code), "%s", m->u.error.text);
        break;
    case RDZV_MSG_HEARTBEAT:
        on_heartbeat(c, &m->u.heartbeat);
        break;
    case RDZV_MSG_REJOIN_OK:
    case RDZV_MSG_WAITING:
    case RDZV_MSG_ASSIGN:
    case RDZV_MSG_RESTART:
    case RDZV_MSG_JOB_DONE:
    case RDZV_MSG_JOB_FAILED:
        on_server_msg(c, m);
        break;
    case RDZV_MSG_COLLECT:
        if (c->state == CLIENT_READY && c->cbs->collect_cb != NULL)
            c->cbs->collect_cb(c, &m->u.collect);
        break;
    case RDZV_MSG_NOTICE:
        if (c->cbs->notice_cb != NULL)
            c->cbs->notice_cb(c, m->u.notice.text);
        break;
    case RDZV_MSG_REPL_BEGIN:
    case RDZV_MSG_REPL_DATA:
    case RDZV_MSG_REPL_ACK:
    case RDZV_MSG_CKPT_PART:
        if (c->state == CLIENT_READY && c->cbs->repl_cb != NULL)
            c->cbs->repl_cb(c, m);
        break;
    default:
        fail(c, -EPROTO, "unexpected %s from the server", rdzv_msg_name(m->type));
        break;
    }
}

/* Transport errors on an established connection start an outage; a bad frame does not, since
 * reconnecting to a server that speaks garbage would only repeat it. */
static void conn_error_cb(struct rdzv_conn *conn, int err)
{
    struct rdzv_client *c = conn->data;
    int bad_frame =
        err == -EPROTO || err == -EPROTONOSUPPORT || err == -EMSGSIZE || err == -ENOTSUP;

    const char *tls_why = rdzv_conn_tls_error(conn);

    /* A refused token or certificate will not get better by reconnecting. Other TLS failures
     * of a reconnect (a server restarting, its handshake timeout) are part of the outage. */
    if (err == -EACCES)
        fail(c, UV_EACCES, "rendezvous %s:%u: %s", c->host, c->port, tls_why);
    else if (!c->welcomed && ((tls_why[0] == '\0' && !bad_frame) || rdzv_conn_tls_cut(conn)) &&
             first_retry(c, rdzv_conn_tls_cut(conn) && err == -EPROTO ? UV_EOF : err))
        return; /* closed before HELLO was answered (a server at its handshake limit, a proxy
                 * starting): like a refused connection, retried until the join timeout */
    else if (tls_why[0] != '\0' && c->welcomed && !c->finished)
        lose(c, tls_why);
    else if (tls_why[0] != '\0')
        fail(c, err, "rendezvous %s:%u: %s", c->host, c->port, tls_why);
    else if (bad_frame)
        fail(c, -EPROTO, "bad frame from rendezvous %s:%u: %s", c->host, c->port, strerror(-err));
    else if (c->welcomed && !c->finished)
        lose(c, err == UV_EOF ? "connection closed" : uv_strerror(err));
    else if (err == UV_EOF)
        fail(c, err, "rendezvous %s:%u closed the connection", c->host, c->port);
    else
        fail(c, err, "rendezvous %s:%u: %s", c->host, c->port, uv_strerror(err));
}

/* --- closing -------------------------------------------------------------------------------- */
static void conn_closed_cb(struct rdzv_conn *conn)
{
    struct rdzv_client *c = conn->data;

    c->conn_open = 0;
    if (c->closing)
        maybe_free(c);
    else if (c->state == CLIENT_AWAY)
        schedule_retry(c);
}

static void timer_closed_cb(uv_handle_t *h)
{
    struct rdzv_client *c = h->data;

    c->timers_open--;
    maybe_free(c);
}

void rdzv_client_close(struct rdzv_client *c, void (*close_cb)(void *data), void *data)
{
    if (c == NULL || c->closing)
        return;
    c->closing = 1;
    c->close_cb = close_cb;
    c->close_data = data;
    uv_close((uv_handle_t *)&c->hb_timer, timer_closed_cb);
    uv_close((uv_handle_t *)&c->idle_timer, timer_closed_cb);
    uv_close((uv_handle_t *)&c->retry_timer, timer_closed_cb);
    uv_close((uv_handle_t *)&c->grace_timer, timer_closed_cb);
    if (c->gai_pending)
        uv_cancel((uv_req_t *)&c->gai); /* may be too late; gai_cb then sees closing */
    /* Flushing needs a connected stream: a shutdown queued behind a pending connect could
     * wait forever. A conn already closing (an outage) closes without flush anyway. */
    if (c->conn_open)
        rdzv_conn_close(&c->conn, c->connected, conn_closed_cb);
}
