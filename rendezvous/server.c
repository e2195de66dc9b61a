/* The rendezvous server on libuv. Connections (struct peer) speak the framed protocol through
 * rdzv_conn; each job id has a struct sjob that wraps the pure round logic (rdzv_job) with the
 * timer it needs. The job decides, this file only turns its events into messages. */
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "job.h"
#include "message.h"

struct sjob;

/* One accepted connection: an agent (later also workers and observers). */
struct peer {
    struct rdzv_conn conn; /* conn.data = this peer */
    struct rdzv_server *srv;
    struct peer *prev, *next;
    int welcomed; /* HELLO accepted */
    int closing;
    struct sjob *job; /* the job this connection joined; NULL before JOIN */
};

/* Server side of one job: the round logic plus its deadline timer. Private to this file. */
struct sjob {
    struct rdzv_server *srv;
    struct rdzv_job *job;
    uv_timer_t timer; /* timer.data = this sjob */
    struct sjob *prev, *next;
    unsigned npeers; /* connections with peer->job == this */
    int dropped;
};

struct rdzv_server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    char token[RDZV_TOKEN_MAX + 1]; /* zero padded: compared over its whole size */
    int has_token;
    unsigned port;
    struct peer *peers;
    struct sjob *jobs;
    unsigned handles; /* open libuv handles: listener, peers, job timers */
    int closing;
    void (*close_cb)(void *data);
    void *close_data;
};

static void peer_close(struct peer *p, int flush);
static void sjob_apply(struct sjob *sj, enum rdzv_job_event ev);

/* --- handles and lifetime ------------------------------------------------------------------- */
static void handle_closed(struct rdzv_server *srv)
{
    void (*cb)(void *data) = srv->close_cb;
    void *data = srv->close_data;

    srv->handles--;
    if (!srv->closing || srv->handles > 0)
        return;
    free(srv);
    if (cb != NULL)
        cb(data);
}

static void listener_closed_cb(uv_handle_t *handle)
{
    handle_closed(handle->data);
}

static void peer_closed_cb(struct rdzv_conn *conn)
{
    struct peer *p = conn->data;
    struct rdzv_server *srv = p->srv;

    if (p->prev != NULL)
        p->prev->next = p->next;
    else
        srv->peers = p->next;
    if (p->next != NULL)
        p->next->prev = p->prev;
    free(p);
    handle_closed(srv);
}

static void sjob_closed_cb(uv_handle_t *handle)
{
    struct sjob *sj = handle->data;
    struct rdzv_server *srv = sj->srv;

    rdzv_job_free(sj->job);
    free(sj);
    handle_closed(srv);
}

/* Unlinks at once, so that a JOIN arriving meanwhile creates a fresh job; frees on close. */
static void sjob_drop(struct sjob *sj)
{
    struct rdzv_server *srv = sj->srv;

    if (sj->dropped)
        return;
    sj->dropped = 1;
    if (sj->prev != NULL)
        sj->prev->next = sj->next;
    else
        srv->jobs = sj->next;
    if (sj->next != NULL)
        sj->next->prev = sj->prev;
    uv_close((uv_handle_t *)&sj->timer, sjob_closed_cb);
}

static struct sjob *sjob_find(struct rdzv_server *srv, const char *id)
{
    for (struct sjob *sj = srv->jobs; sj != NULL; sj = sj->next)
        if (strcmp(sj->job->id, id) == 0)
            return sj;
    return NULL;
}

static int sjob_new(struct rdzv_server *srv, const struct rdzv_join *j, struct sjob **out)
{
    struct sjob *sj = calloc(1, sizeof(*sj));
    int err;

    if (sj == NULL)
        return -ENOMEM;
    err = rdzv_job_new(j, &sj->job);
    if (err < 0) {
        free(sj);
        return err;
    }
    uv_timer_init(srv->loop, &sj->timer); /* cannot fail on unix */
    sj->timer.data = sj;
    sj->srv = srv;
    srv->handles++;
    sj->next = srv->jobs;
    if (srv->jobs != NULL)
        srv->jobs->prev = sj;
    srv->jobs = sj;
    *out = sj;
    return 0;
}

/* --- sending ---------------------------------------------------------------------------------
 * A failed send (out of memory, connection already broken) is not acted upon here: the broken
 * connection's read side reports it and the peer is treated as lost from there. */
static void send_msg(struct peer *p, const struct rdzv_msg *m)
{
    if (p != NULL && !p->closing)
        (void)rdzv_conn_send(&p->conn, m);
}

/* Sends ERROR and closes after it was flushed: the protocol says the sender of ERROR closes. */
static void send_error(struct peer *p, uint32_t code, const char *fmt, ...)
{
    struct rdzv_msg m = {.type = RDZV_MSG_ERROR};
    va_list ap;

    m.u.error.code = code;
    va_start(ap, fmt);
    vsnprintf(m.u.error.text, sizeof(m.u.error.text), fmt, ap);
    va_end(ap);
    send_msg(p, &m);
    peer_close(p, 1);
}

/* --- job events -> messages ------------------------------------------------------------------ */
static void timer_cb(uv_timer_t *timer)
{
    struct sjob *sj = timer->data;

    sjob_apply(sj, rdzv_job_tick(sj->job, uv_now(sj->srv->loop)));
}

static void sjob_arm(struct sjob *sj)
{
    int64_t deadline = rdzv_job_deadline(sj->job);
    uint64_t now = uv_now(sj->srv->loop);

    if (deadline < 0) {
        uv_timer_stop(&sj->timer);
        return;
    }
    uv_timer_start(&sj->timer, timer_cb, (uint64_t)deadline > now ? deadline - now : 0, 0);
}

static void send_members(struct sjob *sj, const struct rdzv_msg *m)
{
    for (size_t i = 0; i < sj->job->n_members; i++)
        send_msg(sj->job->members[i].peer, m);
}

static void send_assign(struct sjob *sj)
{
    struct rdzv_msg m = {.type = RDZV_MSG_ASSIGN};

    for (size_t i = 0; i < sj->job->n_members; i++) {
        rdzv_job_assign(sj->job, i, &m.u.assign);
        send_msg(sj->job->members[i].peer, &m);
    }
}

static void send_restart(struct sjob *sj)
{
    struct rdzv_msg m = {.type = RDZV_MSG_RESTART};

    m.u.restart.restart_count = sj->job->restart_count;
    m.u.restart.cause = sj->job->cause;
    for (size_t i = 0; i < sj->job->n_prev; i++)
        send_msg(sj->job->prev[i].peer, &m);
}

/* Every connection of the job hears about the timeout, also one that has not re-joined after
 * a RESTART yet: the job is gone for all of them. */
static void sjob_timeout(struct sjob *sj)
{
    struct rdzv_server *srv = sj->srv;
    char text[RDZV_TEXT_MAX + 1];
    struct peer *p, *next;

    rdzv_job_timeout_text(sj->job, text, sizeof(text));
    for (p = srv->peers; p != NULL; p = next) {
        next = p->next; /* peer_close() unlinks only from its close callback, but be safe */
        if (p->job != sj)
            continue;
        p->job = NULL;
        sj->npeers--;
        send_error(p, RDZV_ERR_TIMEOUT, "%s", text);
    }
    sjob_drop(sj);
}

/* A job without connections has nothing left to tell anyone; dropping it lets the next JOIN
 * with that id start afresh (reconnecting to a live job is a later feature). */
static void sjob_apply(struct sjob *sj, enum rdzv_job_event ev)
{
    struct rdzv_msg m = {0};

    switch (ev) {
    case RDZV_JOB_EV_WAITING:
        m.type = RDZV_MSG_WAITING;
        rdzv_job_waiting(sj->job, uv_now(sj->srv->loop), &m.u.waiting);
        send_members(sj, &m);
        break;
    case RDZV_JOB_EV_ASSIGNED:
        send_assign(sj);
        break;
    case RDZV_JOB_EV_RESTART:
        send_restart(sj);
        break;
    case RDZV_JOB_EV_FAILED:
        m.type = RDZV_MSG_JOB_FAILED;
        m.u.job_failed.restarts = sj->job->restart_count;
        m.u.job_failed.cause = sj->job->cause;
        send_members(sj, &m);
        break;
    case RDZV_JOB_EV_DONE:
        m.type = RDZV_MSG_JOB_DONE;
        send_members(sj, &m);
        break;
    case RDZV_JOB_EV_TIMEOUT:
        sjob_timeout(sj);
        return;
    case RDZV_JOB_EV_NONE:
        break;
    }
    if (sj->npeers == 0)
        sjob_drop(sj);
    else
        sjob_arm(sj);
}

/* --- connections ------------------------------------------------------------------------------ */
static uint64_t wall_ms(void)
{
    uv_timeval64_t tv;

    if (uv_gettimeofday(&tv) < 0)
        return 0;
    return (uint64_t)tv.tv_sec * 1000 + (uint64_t)tv.tv_usec / 1000;
}

/* A member connection going away mid-round is a lost node: the job decides what follows. */
static void peer_close(struct peer *p, int flush)
{
    struct sjob *sj = p->job;

    if (p->closing)
        return;
    p->closing = 1;
    if (sj != NULL && !p->srv->closing) {
        p->job = NULL;
        sj->npeers--;
        sjob_apply(sj, rdzv_job_lost(sj->job, p, wall_ms()));
    }
    rdzv_conn_close(&p->conn, flush, peer_closed_cb);
}

/* The address the connection came from, without port; IPv6 without brackets, and an IPv4
 * client of a dual-stack listener ("::ffff:10.0.0.1") as plain IPv4 so peers can use it. */
static void peer_addr(struct peer *p, char *buf, size_t len)
{
    struct sockaddr_storage ss;
    int n = sizeof(ss);

    buf[0] = '\0';
    if (uv_tcp_getpeername(&p->conn.tcp, (struct sockaddr *)&ss, &n) < 0)
        return;
    if (ss.ss_family == AF_INET) {
        uv_ip4_name((struct sockaddr_in *)&ss, buf, len);
    } else if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;

        if (IN6_IS_ADDR_V4MAPPED(&sin6->sin6_addr))
            inet_ntop(AF_INET, &sin6->sin6_addr.s6_addr[12], buf, (socklen_t)len);
        else
            uv_ip6_name(sin6, buf, len);
    }
}

/* --- message handlers: one per message type ------------------------------------------------- */

/* Constant time over the whole buffer, so that the reply time says nothing about how many
 * leading bytes of a guessed token were right. Both buffers are zero padded by the codec. */
static int token_ok(const struct rdzv_server *srv, const char *got)
{
    unsigned char diff = 0;

    if (!srv->has_token)
        return 1;
    for (size_t i = 0; i < sizeof(srv->token); i++)
        diff |= (unsigned char)(srv->token[i] ^ got[i]);
    return diff == 0;
}

static void on_hello(struct peer *p, const struct rdzv_hello *h)
{
    struct rdzv_msg m = {.type = RDZV_MSG_WELCOME};

    if (h->version != RDZV_PROTO_VERSION) {
        send_error(p, RDZV_ERR_VERSION,
                   "protocol version %" PRIu32 " not supported (server "
                   "speaks %d)",
                   h->version, RDZV_PROTO_VERSION);
        return;
    }
    if (!token_ok(p->srv, h->token)) {
        send_error(p, RDZV_ERR_AUTH, "authentication failed: wrong or missing token");
        return;
    }
    p->welcomed = 1;
    send_msg(p, &m);
}

/* Finds or creates the job a JOIN names, or answers with an ERROR (then returns NULL). */
static struct sjob *join_target(struct peer *p, const struct rdzv_join *j)
{
    struct sjob *sj = p->job;

    if (sj != NULL && strcmp(sj->job->id, j->job_id) != 0) {
        send_error(p, RDZV_ERR_PROTOCOL, "this connection already joined job %s", sj->job->id);
        return NULL;
    }
    if (sj == NULL)
        sj = sjob_find(p->srv, j->job_id);
    if (sj == NULL) {
        if (sjob_new(p->srv, j, &sj) < 0)
            send_error(p, RDZV_ERR_PROTOCOL, "server out of memory");
        return sj;
    }
    if (rdzv_job_check(sj->job, j) < 0) {
        send_error(p, RDZV_ERR_MISMATCH,
                   "job %s has nnodes %" PRIu32 ":%" PRIu32 ", this node "
                   "asked for %" PRIu32 ":%" PRIu32,
                   sj->job->id, sj->job->min_nodes, sj->job->max_nodes, j->min_nodes, j->max_nodes);
        return NULL;
    }
    return sj;
}

static void join_error(struct peer *p, struct sjob *sj, int err, const struct rdzv_join *j)
{
    const struct rdzv_job *job = sj->job;

    if (err == -ESHUTDOWN)
        send_error(p, RDZV_ERR_CLOSED, "job %s already finished", job->id);
    else if (err == -EBUSY)
        send_error(p, RDZV_ERR_CLOSED,
                   "round %" PRIu32 " of job %s is running; joining a "
                   "running job is not supported",
                   job->round, job->id);
    else if (err == -EEXIST)
        send_error(p, RDZV_ERR_PROTOCOL,
                   "node %016" PRIx64 " already joined round %" PRIu32 " of job %s", j->node_id,
                   job->round, job->id);
    else
        send_error(p, RDZV_ERR_PROTOCOL, "join failed: %s", strerror(-err));
}

static void on_join(struct peer *p, const struct rdzv_join *j)
{
    enum rdzv_job_event ev = RDZV_JOB_EV_NONE;
    char addr[RDZV_HOST_MAX + 1];
    struct sjob *sj;
    int err;

    if (rdzv_job_validate_join(j) < 0) {
        send_error(p, RDZV_ERR_PROTOCOL,
                   "invalid JOIN: need a job id, 1 <= min_nodes <= "
                   "max_nodes <= %u, 1 <= nproc <= %u, port <= 65535",
                   RDZV_JOB_MAX_NODES, RDZV_JOB_MAX_NPROC);
        return;
    }
    sj = join_target(p, j);
    if (sj == NULL)
        return;
    snprintf(addr, sizeof(addr), "%s", j->addr);
    if (addr[0] == '\0')
        peer_addr(p, addr, sizeof(addr));
    err = rdzv_job_join(sj->job, j, addr, p, uv_now(p->srv->loop), &ev);
    if (err < 0) {
        join_error(p, sj, err, j); /* closes p, which may have dropped the job already */
        if (sj->npeers == 0)
            sjob_drop(sj); /* e.g. created for this very JOIN */
        return;
    }
    if (p->job == NULL) {
        p->job = sj;
        sj->npeers++;
    }
    sjob_apply(sj, ev);
}

static void on_failed(struct peer *p, const struct rdzv_failure *f, int leaving)
{
    if (p->job == NULL)
        return; /* never joined: nothing to fail */
    sjob_apply(p->job, rdzv_job_failed(p->job->job, p, f, leaving));
}

static void on_done(struct peer *p, uint32_t round)
{
    if (p->job == NULL)
        return;
    sjob_apply(p->job, rdzv_job_done(p->job->job, p, round));
}

static void msg_cb(struct rdzv_conn *conn, const struct rdzv_msg *m)
{
    struct peer *p = conn->data;

    if (!p->welcomed && m->type != RDZV_MSG_HELLO) {
        send_error(p, RDZV_ERR_PROTOCOL, "expected HELLO first, got %s", rdzv_msg_name(m->type));
        return;
    }
    switch (m->type) {
    case RDZV_MSG_HELLO:
        if (p->welcomed)
            send_error(p, RDZV_ERR_PROTOCOL, "HELLO sent twice");
        else
            on_hello(p, &m->u.hello);
        break;
    case RDZV_MSG_JOIN:
        on_join(p, &m->u.join);
        break;
    case RDZV_MSG_FAILED:
    case RDZV_MSG_LEAVE:
        on_failed(p, &m->u.failed, m->type == RDZV_MSG_LEAVE);
        break;
    case RDZV_MSG_DONE:
        on_done(p, m->u.done.round);
        break;
    default:
        send_error(p, RDZV_ERR_PROTOCOL, "%s is not a client message", rdzv_msg_name(m->type));
        break;
    }
}

static void error_cb(struct rdzv_conn *conn, int err)
{
    struct peer *p = conn->data;

    if (err == -EPROTONOSUPPORT)
        send_error(p, RDZV_ERR_VERSION, "frame version not supported (server speaks %d)",
                   RDZV_PROTO_VERSION);
    else if (err == -EMSGSIZE)
        send_error(p, RDZV_ERR_PROTOCOL, "frame payload over %d bytes", RDZV_MAX_PAYLOAD);
    else if (err == -ENOTSUP)
        send_error(p, RDZV_ERR_UNKNOWN_TYPE, "unknown message type %u", conn->type);
    else if (err == -EPROTO && conn->type == 0)
        send_error(p, RDZV_ERR_PROTOCOL, "bad frame header (magic)");
    else if (err == -EPROTO)
        send_error(p, RDZV_ERR_PROTOCOL, "malformed %s payload", rdzv_msg_name(conn->type));
    else
        peer_close(p, 0); /* EOF or a socket error: nobody to tell */
}

/* --- listener ------------------------------------------------------------------------------- */
static void on_connection(uv_stream_t *listener, int status)
{
    struct rdzv_server *srv = listener->data;
    struct peer *p;

    if (status < 0 || srv->closing)
        return; /* e.g. EMFILE: the client retries; the listener stays up */
    p = calloc(1, sizeof(*p));
    if (p == NULL)
        return;
    if (rdzv_conn_init(srv->loop, &p->conn, msg_cb, error_cb, p) < 0) {
        free(p);
        return;
    }
    p->srv = srv;
    srv->handles++;
    p->next = srv->peers;
    if (srv->peers != NULL)
        srv->peers->prev = p;
    srv->peers = p;
    if (uv_accept(listener, (uv_stream_t *)&p->conn.tcp) < 0 || rdzv_conn_start(&p->conn) < 0)
        peer_close(p, 0);
}

/* Numeric addresses directly; names (e.g. "localhost") through a synchronous getaddrinfo, which
 * is fine once at start-up. */
static int resolve(uv_loop_t *loop, const char *host, unsigned port, struct sockaddr_storage *ss)
{
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    uv_getaddrinfo_t req;

    if (host == NULL || host[0] == '\0')
        host = "0.0.0.0";
    if (port > 65535)
        return UV_EINVAL;
    if (uv_ip4_addr(host, (int)port, (struct sockaddr_in *)ss) == 0)
        return 0;
    if (uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)ss) == 0)
        return 0;
    if (uv_getaddrinfo(loop, &req, NULL, host, NULL, &hints) < 0)
        return UV_EINVAL;
    memcpy(ss, req.addrinfo->ai_addr, req.addrinfo->ai_addrlen);
    uv_freeaddrinfo(req.addrinfo);
    if (ss->ss_family == AF_INET)
        ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
    return 0;
}

static int listen_on(struct rdzv_server *srv, struct sockaddr_storage *ss)
{
    int n = sizeof(*ss);
    int err;

    err = uv_tcp_bind(&srv->listener, (struct sockaddr *)ss, 0);
    if (err < 0)
        return err;
    err = uv_listen((uv_stream_t *)&srv->listener, 128, on_connection);
    if (err < 0)
        return err;
    err = uv_tcp_getsockname(&srv->listener, (struct sockaddr *)ss, &n);
    if (err < 0)
        return err;
    srv->port = ntohs(ss->ss_family == AF_INET ? ((struct sockaddr_in *)ss)->sin_port
                                               : ((struct sockaddr_in6 *)ss)->sin6_port);
    return 0;
}

int rdzv_server_new(uv_loop_t *loop, const char *host, unsigned port, const char *token,
                    struct rdzv_server **out)
{
    struct rdzv_server *srv = NULL;
    struct sockaddr_storage ss;
    int err;

    if (token != NULL && strlen(token) > RDZV_TOKEN_MAX)
        return UV_EINVAL;
    err = resolve(loop, host, port, &ss); /* before any handle exists: nothing to undo */
    if (err < 0)
        return err;
    srv = calloc(1, sizeof(*srv));
    if (srv == NULL)
        return UV_ENOMEM;
    srv->loop = loop;
    if (token != NULL && token[0] != '\0') {
        memcpy(srv->token, token, strlen(token));
        srv->has_token = 1;
    }
    err = uv_tcp_init(loop, &srv->listener);
    if (err < 0) {
        free(srv);
        return err;
    }
    srv->listener.data = srv;
    srv->handles = 1;
    err = listen_on(srv, &ss);
    if (err < 0)
        goto out;
    *out = srv;
out:
    if (err < 0)
        rdzv_server_close(srv, NULL, NULL); /* memory goes back once the loop runs */
    return err;
}

unsigned rdzv_server_port(const struct rdzv_server *s)
{
    return s->port;
}

/* Closing the server is not a failure of anyone's job: peers are closed without running the
 * lost-node logic (peer_close checks srv->closing). */
void rdzv_server_close(struct rdzv_server *s, void (*close_cb)(void *data), void *data)
{
    if (s == NULL || s->closing)
        return;
    s->closing = 1;
    s->close_cb = close_cb;
    s->close_data = data;
    for (struct sjob *sj = s->jobs, *next; sj != NULL; sj = next) {
        next = sj->next;
        sjob_drop(sj);
    }
    for (struct peer *p = s->peers; p != NULL; p = p->next) {
        p->job = NULL;
        peer_close(p, 0);
        rdzv_conn_close(&p->conn, 0, peer_closed_cb); /* hurry a flushing close */
    }
    uv_close((uv_handle_t *)&s->listener, listener_closed_cb);
}
