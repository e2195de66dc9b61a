/* The rendezvous server on libuv, its dispatcher: the listener, the admission of each new
 * connection (struct peer), and the dispatch of each decoded message to its handler once the
 * sender's role and job allow it; the server's life cycle and settings. Below it: the message
 * handlers (handler.h), the jobs (sjob.h) and the services they all use (service.h), called
 * downward only (docs/ARCHITECTURE.md "Layers"). */
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cred.h"
#include "escape.h"
#include "hslimit.h"
#include "log.h"
#include "handler.h"
#include "http.h"
#include "service.h"
#include "sjob.h"
#include "tls.h"

static void listener_closed_cb(uv_handle_t *handle)
{
    rdzv__handle_closed(handle->data);
}

static void fair_closed_cb(uv_handle_t *handle)
{
    struct rdzv_conn_fair *f = handle->data;

    rdzv__handle_closed((struct rdzv_server *)((char *)f - offsetof(struct rdzv_server, fair)));
}

/* --- TLS handshakes per source address (hslimit.h) --------------------------------- */
static void hs_configure(struct rdzv_server *srv)
{
    rdzv_hslimit_configure(srv->hslimit, srv->limits.handshakes_per_source,
                           srv->limits.handshake_rate, srv->limits.handshake_burst);
}

/* Evicts the victim of one list for a new connection; 0, or -ENOENT when none is idle. */
static int pre_evict(struct rdzv_server *srv, struct rdzv__source *src, int global)
{
    struct peer *v = rdzv__pre_victim(srv, src, global);

    if (v == NULL)
        return -ENOENT;
    if (global)
        rdzv__peer_event(v, SRV_EV_PREAUTH_EVICT,
                         "evicted: the oldest idle of %u unauthenticated connections (no "
                         "byte, or none for %u ms), for a new one",
                         srv->n_pre, PRE_IDLE_MS);
    else
        rdzv__peer_event(v, SRV_EV_PREAUTH_SRC_EVICT,
                         "evicted: the oldest idle of %u TLS handshakes in flight from its "
                         "network (no byte, or none for %u ms), for a new one",
                         srv->limits.handshakes_per_source, PRE_IDLE_MS);
    rdzv__peer_close(v, 0); /* unlinks it and (peer_release) ends its handshake count */
    rdzv__hs_end(v);        /* now: the new connection's rdzv_hslimit_begin is retried at once */
    return 0;
}

/* A member's connection went: the evidence being judged forgets it, the job decides. */
static void member_lost(struct sjob *sj, struct peer *p, const char *reason)
{
    rdzv__ev_member_gone(sj, p);
    rdzv__sjob_detach(sj, p, reason);
}

/* A job goes: its evidence with it; its log is kept a while (handler_log.c). */
static void job_dropped(struct sjob *sj)
{
    rdzv__ev_free(sj);
    rdzv__log_keep(sj);
}

/* --- dispatch ---------------------------------------------------------------------------- */

/* Which role may send which message; anything else is out of order. */
static int allowed(uint8_t role, uint8_t type)
{
    switch (type) {
    case RDZV_MSG_JOIN:
    case RDZV_MSG_FAILED:
    case RDZV_MSG_LEAVE:
    case RDZV_MSG_DONE:
    case RDZV_MSG_HEARTBEAT:
    case RDZV_MSG_REJOIN:
    case RDZV_MSG_CKPT:
    case RDZV_MSG_PREFLIGHT:
    case RDZV_MSG_REPL_BEGIN:
    case RDZV_MSG_REPL_DATA:
    case RDZV_MSG_REPL_ACK:
    case RDZV_MSG_EVIDENCE:
    case RDZV_MSG_TELEMETRY: /* nor report its node's GPUs */
    case RDZV_MSG_LOG:       /* a worker credential must not write its job's log */
    case RDZV_MSG_GOODPUT:   /* a worker credential must not rewrite its job's figures */
        return role == RDZV_ROLE_AGENT;
    case RDZV_MSG_DEBUG_REQ:
    case RDZV_MSG_LOGS_REQ:
        return role == RDZV_ROLE_OBSERVER;
    case RDZV_MSG_ATTACH:
    case RDZV_MSG_KV_PUT:
    case RDZV_MSG_KV_GET:
    case RDZV_MSG_BARRIER:
        return role == RDZV_ROLE_WORKER;
    case RDZV_MSG_STATUS_REQ:
        return 1; /* read-only: agents and workers may look too */
    default:
        return 0;
    }
}

/* max_jobs_per_credential: checked before the server-wide cap, so that a team at
 * its own quota learns that, not that the server is full. Returns 1 when it may go on. */
static int admit_scope_job(struct peer *p)
{
    const struct rdzv__scope *s = p->scope;
    unsigned max = p->srv->limits.max_jobs_per_credential;

    if (s == NULL || s->jobs < max)
        return 1;
    rdzv__peer_event(p, SRV_EV_CRED_JOBS,
                     "JOIN for a new job while credential job:%s holds %u jobs", s->scope, s->jobs);
    rdzv__send_error(p, RDZV_ERR_PROTOCOL,
                     "credential job:%s holds %u jobs, its limit (muster server "
                     "--max-jobs-per-credential); try again when one of them has finished",
                     s->scope, s->jobs);
    return 0;
}

/* max_jobs: a JOIN or REJOIN that would create a job while max_jobs exist (or its credential's
 * scope holds max_jobs_per_credential) is refused here, before its handler, with a text saying
 * so. Returns 1 when it may go on. */
static int admit_job(struct peer *p, const char *job_id)
{
    struct rdzv_server *srv = p->srv;

    if (p->job != NULL || rdzv__sjob_find(srv, job_id) != NULL)
        return 1;
    if (!admit_scope_job(p))
        return 0;
    if (srv->n_jobs < srv->limits.max_jobs)
        return 1;
    rdzv__peer_event(p, SRV_EV_JOBS, "JOIN for a new job while %u jobs exist (limit %u)",
                     srv->n_jobs, srv->limits.max_jobs);
    rdzv__send_error(p, RDZV_ERR_PROTOCOL,
                     "server full: it holds %u jobs, its limit "
                     "(muster server --max-jobs); try again when a job has finished",
                     srv->n_jobs);
    return 0;
}

static void dispatch(struct peer *p, const struct rdzv_msg *m)
{
    switch (m->type) {
    case RDZV_MSG_JOIN:
        if (admit_job(p, m->u.join.job_id))
            rdzv__handle_join(p, &m->u.join);
        break;
    case RDZV_MSG_FAILED:
    case RDZV_MSG_LEAVE:
        rdzv__handle_failed(p, &m->u.failed, m->type == RDZV_MSG_LEAVE);
        break;
    case RDZV_MSG_DONE:
        rdzv__handle_done(p, m->u.done.round);
        break;
    case RDZV_MSG_HEARTBEAT:
        rdzv__handle_heartbeat(p, &m->u.heartbeat);
        break;
    case RDZV_MSG_REJOIN:
        if (admit_job(p, m->u.rejoin.join.job_id))
            rdzv__handle_rejoin(p, &m->u.rejoin);
        break;
    case RDZV_MSG_CKPT:
        rdzv__handle_ckpt(p, &m->u.ckpt);
        break;
    case RDZV_MSG_PREFLIGHT:
        rdzv__handle_preflight(p, &m->u.preflight);
        break;
    case RDZV_MSG_REPL_BEGIN:
        rdzv__handle_repl_begin(p, &m->u.repl_begin);
        break;
    case RDZV_MSG_REPL_DATA:
        rdzv__handle_repl_data(p, m);
        break;
    case RDZV_MSG_REPL_ACK:
        rdzv__handle_repl_ack(p, &m->u.repl_ack);
        break;
    case RDZV_MSG_GOODPUT:
        rdzv__handle_goodput(p, &m->u.goodput);
        break;
    case RDZV_MSG_ATTACH:
        rdzv__handle_attach(p, &m->u.attach);
        break;
    case RDZV_MSG_STATUS_REQ:
        rdzv__handle_status_req(p, &m->u.status_req);
        break;
    case RDZV_MSG_EVIDENCE:
        rdzv__handle_evidence(p, &m->u.evidence);
        break;
    case RDZV_MSG_DEBUG_REQ:
        rdzv__handle_debug_req(p, &m->u.debug_req);
        break;
    case RDZV_MSG_TELEMETRY:
        rdzv__handle_telemetry(p, &m->u.telemetry);
        break;
    case RDZV_MSG_LOG:
        rdzv__handle_log(p, &m->u.log);
        break;
    case RDZV_MSG_LOGS_REQ:
        rdzv__handle_logs_req(p, &m->u.logs_req);
        break;
    default: /* KV_PUT, KV_GET, BARRIER */
        rdzv__handle_kv(p, m);
        break;
    }
}

static void msg_cb(struct rdzv_conn *conn, const struct rdzv_msg *m)
{
    struct peer *p = conn->data;
    uint64_t now;

    if (p->send_err != 0)
        return; /* going at once (rdzv__send): no more work for it */
    now = uv_now(p->srv->loop);
    if (p->job != NULL && p->hb_timeout_ms > 0 && now - p->last_seen_ms > p->gap_max_ms)
        p->gap_max_ms = now - p->last_seen_ms;
    p->last_seen_ms = now;
    rdzv__hs_end(p); /* a message: the TLS handshake is over */
    if (!p->welcomed && m->type != RDZV_MSG_HELLO) {
        rdzv__peer_event(p, SRV_EV_PROTOCOL, "%s before HELLO", rdzv_msg_name(m->type));
        rdzv__send_error(p, RDZV_ERR_PROTOCOL, "expected HELLO first, got %s",
                         rdzv_msg_name(m->type));
        return;
    }
    if (m->type == RDZV_MSG_HELLO) {
        if (p->welcomed) {
            rdzv__peer_event(p, SRV_EV_PROTOCOL, "HELLO sent twice");
            rdzv__send_error(p, RDZV_ERR_PROTOCOL, "HELLO sent twice");
        } else {
            rdzv__handle_hello(p, &m->u.hello);
            if (p->welcomed)
                rdzv__pre_unlink(p); /* authenticated: out of the pre-authentication budget */
        }
        return;
    }
    if (!allowed(p->role, m->type)) {
        rdzv__peer_event(p, SRV_EV_PROTOCOL, "%s from a client of role %u", rdzv_msg_name(m->type),
                         p->role);
        rdzv__send_error(p, RDZV_ERR_PROTOCOL,
                         "%s is not a message for this server from a "
                         "client of role %u",
                         rdzv_msg_name(m->type), p->role);
        return;
    }
    dispatch(p, m);
}

/* The codec's verdict on a frame: counted, logged once per address, answered with ERROR. */
static void error_cb(struct rdzv_conn *conn, int err)
{
    struct peer *p = conn->data;

    /* No TLS channel yet: nothing can be said to the peer, only counted and logged. A peer
     * that connects and closes without a byte (a port probe) counts too. */
    if (!rdzv_conn_handshake_done(conn)) {
        const char *why = rdzv_conn_tls_error(conn);

        rdzv__peer_event(p, SRV_EV_AUTH_TLS, "TLS handshake failed: %s%s%s",
                         why[0] != '\0'  ? why
                         : err == UV_EOF ? "closed before the handshake finished"
                                         : uv_strerror(err),
                         p->srv->auth_hint[0] != '\0' ? "; " : "", p->srv->auth_hint);
        rdzv__peer_close(p, 0);
        return;
    }
    if (err == -EMSGSIZE) {
        rdzv__peer_event(p, SRV_EV_FRAME_SIZE, "frame header announces over %d bytes",
                         RDZV_MAX_PAYLOAD);
        rdzv__send_error(p, RDZV_ERR_PROTOCOL, "frame payload over %d bytes", RDZV_MAX_PAYLOAD);
        return;
    }
    if (err == -EPROTONOSUPPORT || err == -ENOTSUP || err == -EPROTO)
        rdzv__peer_event(p, SRV_EV_PROTOCOL, "%s",
                         err == -EPROTONOSUPPORT ? "frame version"
                         : err == -ENOTSUP       ? "unknown message type"
                         : conn->type == 0       ? "bad frame magic"
                                                 : "malformed payload");
    if (err == -EPROTONOSUPPORT)
        rdzv__send_error(p, RDZV_ERR_VERSION, "frame version not supported (server speaks %d)",
                         RDZV_PROTO_VERSION);
    else if (err == -ENOTSUP)
        rdzv__send_error(p, RDZV_ERR_UNKNOWN_TYPE, "unknown message type %u", conn->type);
    else if (err == -EPROTO && conn->type == 0)
        rdzv__send_error(p, RDZV_ERR_PROTOCOL, "bad frame header (magic)");
    else if (err == -EPROTO)
        rdzv__send_error(p, RDZV_ERR_PROTOCOL, "malformed %s payload", rdzv_msg_name(conn->type));
    else
        rdzv__peer_close(p, 0); /* EOF or a socket error: nobody to tell */
}

/* --- listener ------------------------------------------------------------------------------- */
static void refused_closed_cb(uv_handle_t *handle)
{
    struct rdzv_server *srv = handle->data;

    free(handle);
    rdzv__handle_closed(srv);
}

/* Over max_connections: the connection is accepted (or it would sit in the backlog and be
 * retried by the kernel) and closed at once, without reading a byte. */
static void refuse(struct rdzv_server *srv, uv_stream_t *listener)
{
    uv_tcp_t *tcp = malloc(sizeof(*tcp));
    char addr[INET6_ADDRSTRLEN];

    if (tcp == NULL || uv_tcp_init(srv->loop, tcp) < 0) {
        free(tcp);
        return;
    }
    tcp->data = srv;
    srv->handles++;
    if (uv_accept(listener, (uv_stream_t *)tcp) == 0) {
        rdzv__tcp_addr(tcp, addr, sizeof(addr));
        rdzv__event(srv, SRV_EV_CONNECTIONS, addr, "%u connections open already",
                    srv->n_peers - srv->n_closing);
    }
    uv_close((uv_handle_t *)tcp, refused_closed_cb);
}

/* Over max_connections_per_source, like over max_connections: closed before a byte is read,
 * so that one address (one token holder's machine, or a flood) cannot take every connection
 * and lock the other agents out. Returns 1 when p may go on. */
static int admit_source(struct peer *p)
{
    char addr[INET6_ADDRSTRLEN];
    int err = rdzv__source_add(p);

    if (err == -EUSERS) {
        rdzv__peer_addr(p, addr, sizeof(addr));
        rdzv__event(p->srv, SRV_EV_PER_SOURCE, addr, "%u connections open from this address",
                    p->srv->limits.max_connections_per_source);
    }
    if (err < 0)
        rdzv__peer_close(p, 0);
    return err == 0;
}

/* Over handshakes_per_source in flight or over handshake_rate: closed before any TLS work, so
 * that a flood of ClientHellos from one address gets a bounded share of the handshake threads
 * and of the CPU. Returns 1 when p may go on. */
static int admit_handshake(struct peer *p)
{
    struct rdzv_server *srv = p->srv;
    char addr[INET6_ADDRSTRLEN];
    int err = rdzv__source_key(&p->conn.tcp, p->hs_addr);

    if (err == 0)
        err = rdzv_hslimit_begin(srv->hslimit, p->hs_addr, uv_now(srv->loop));
    /* A full group evicts its oldest idle connection rather than refusing the new one (see the
     * pre-authentication pool above): the group may be an agent's own NAT or login node. */
    if (err == -EBUSY && pre_evict(srv, p->source, 0) == 0)
        err = rdzv_hslimit_begin(srv->hslimit, p->hs_addr, uv_now(srv->loop));
    if (err == 0) {
        p->hs_counted = 1;
        return 1;
    }
    rdzv__peer_addr(p, addr, sizeof(addr));
    if (err == -EAGAIN)
        rdzv__event(srv, SRV_EV_HS_RATE, addr, "over %u new TLS handshakes a second",
                    srv->limits.handshake_rate);
    else if (err == -EBUSY || err == -ENOMEM) /* -ENOMEM: the table is full of busy sources */
        rdzv__event(srv, SRV_EV_HS_IN_FLIGHT, addr, "%u TLS handshakes in flight from this address",
                    srv->limits.handshakes_per_source);
    rdzv__peer_close(p, 0);
    return 0;
}

/* A new peer in the server's list, its conn initialised (not yet opened); NULL when out of
 * memory. */
static struct peer *new_peer(struct rdzv_server *srv)
{
    struct peer *p = calloc(1, sizeof(*p));

    if (p == NULL)
        return NULL;
    if (rdzv_conn_init(srv->loop, &p->conn, msg_cb, error_cb, p) < 0) {
        free(p);
        return NULL;
    }
    rdzv_conn_set_fair(&p->conn, &srv->fair);
    uv_timer_init(srv->loop, &p->timer); /* cannot fail on unix */
    p->timer.data = p;
    p->open = 2;
    p->srv = srv;
    p->accepted_ms = p->last_seen_ms = uv_now(srv->loop);
    srv->handles++;
    srv->n_peers++;
    p->next = srv->peers;
    if (srv->peers != NULL)
        srv->peers->prev = p;
    srv->peers = p;
    p->conn.send_max = srv->limits.send_queue_max;
    return p;
}

/* Connections that count against max_connections: not those already closing. */
static unsigned live_peers(const struct rdzv_server *srv)
{
    return srv->n_peers - srv->n_closing;
}

/* Room for p (admitted, not yet in the pool) in the pre-authentication pool and under
 * max_connections, evicting the oldest idle unauthenticated connection where needed. Returns 1
 * when p may go on (else it was closed). */
static int admit_preauth(struct peer *p)
{
    struct rdzv_server *srv = p->srv;
    char addr[INET6_ADDRSTRLEN];

    int full = srv->n_pre >= srv->limits.preauth_max;

    if (full && pre_evict(srv, NULL, 1) == 0)
        full = 0;
    if (!full && (live_peers(srv) <= srv->limits.max_connections || pre_evict(srv, NULL, 1) == 0))
        return 1;
    rdzv__peer_addr(p, addr, sizeof(addr));
    if (full)
        rdzv__event(srv, SRV_EV_CONNECTIONS, addr,
                    "%u unauthenticated connections, every one of them handshaking", srv->n_pre);
    else
        rdzv__event(srv, SRV_EV_CONNECTIONS, addr, "%u connections open already",
                    live_peers(srv) - 1);
    rdzv__peer_close(p, 0);
    return 0;
}

static void on_connection(uv_stream_t *listener, int status)
{
    struct rdzv_server *srv = listener->data;
    struct peer *p;

    if (status < 0 || srv->closing)
        return; /* e.g. EMFILE: the client retries; the listener stays up */
    /* every place authenticated: nothing to evict, refused before any allocation */
    if (live_peers(srv) >= srv->limits.max_connections && srv->n_pre == 0) {
        refuse(srv, listener);
        return;
    }
    if ((p = new_peer(srv)) == NULL)
        return;
    if (uv_accept(listener, (uv_stream_t *)&p->conn.tcp) < 0) {
        rdzv__peer_close(p, 0);
        return;
    }
    if (!admit_source(p) || !admit_handshake(p) || !admit_preauth(p))
        return;
    rdzv__pre_link(p);
    /* Every connection is TLS: the server has no plaintext path. */
    if (rdzv_conn_start_tls(&p->conn, srv->tls, 1) < 0) {
        rdzv__peer_close(p, 0);
        return;
    }
    rdzv__peer_arm(p);
}

int rdzv_server_connect_local(struct rdzv_server *srv, const char *addr, uv_os_sock_t *fd)
{
    struct rdzv_cred cred;
    struct peer *p;
    int fds[2], err;

    if (srv->closing)
        return UV_ECANCELED;
    if (rdzv_tls_own_cred(srv->tls, &cred) < 0)
        return UV_EINVAL;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) < 0) {
        err = -errno;
        rdzv_cred_wipe(&cred);
        return err;
    }
    if ((p = new_peer(srv)) == NULL) {
        rdzv_cred_wipe(&cred);
        close(fds[0]);
        close(fds[1]);
        return UV_ENOMEM;
    }
    p->local_addr = strdup(addr != NULL ? addr : "127.0.0.1");
    if (p->local_addr == NULL) {
        close(fds[0]);
        err = UV_ENOMEM;
    } else {
        err = rdzv_conn_start_local(&p->conn, fds[0], &cred);
    }
    rdzv_cred_wipe(&cred);
    if (err < 0) {
        close(fds[1]);
        rdzv__peer_close(p, 0);
        return err;
    }
    rdzv__peer_arm(p);
    *fd = fds[1];
    return 0;
}

/* The listener over an already-built TLS configuration (taken over: freed with the server,
 * also on failure). */
static int server_start(uv_loop_t *loop, const char *host, unsigned port, struct rdzv_tls *tls,
                        const char *token, struct rdzv_server **out)
{
    struct rdzv_server *srv = NULL;
    struct sockaddr_storage ss;
    int err;

    err = rdzv_server_resolve(loop, host, port, &ss); /* before any handle: nothing to undo */
    if (err < 0 || (srv = calloc(1, sizeof(*srv))) == NULL) {
        rdzv_tls_free(tls);
        return err < 0 ? err : UV_ENOMEM;
    }
    srv->loop = loop;
    srv->tls = tls;
    srv->member_lost = member_lost;
    srv->job_dropped = job_dropped;
    srv->start_ms = uv_now(loop);
    srv->limits = rdzv_limits_default();
    srv->log_limits.pool_used = &srv->log_pool_used; /* the rest: logring.h's defaults */
    srv->kv_pool.max_bytes = srv->limits.kv_max_total_bytes;
    srv->kv_pool.max_held = srv->limits.kv_max_held_total;
    if (rdzv_hslimit_new(RDZV_LIMIT_MAX_CONNECTIONS, &srv->hslimit) < 0) {
        rdzv_tls_free(tls);
        free(srv);
        return UV_ENOMEM;
    }
    hs_configure(srv);
    if (token != NULL && token[0] != '\0') {
        memcpy(srv->token, token, strlen(token));
        srv->has_token = 1;
    }
    uv_tcp_init(loop, &srv->listener); /* cannot fail on unix */
    srv->listener.data = srv;
    rdzv_conn_fair_init(loop, &srv->fair);
    srv->handles = 2; /* the listener and the fair-reading handle */
    err = rdzv_server_listen_tcp(&srv->listener, &ss, on_connection, &srv->port);
    if (err < 0)
        rdzv_server_close(srv, NULL, NULL); /* memory goes back once the loop runs */
    else
        *out = srv;
    return err;
}

int rdzv_server_new_tls(uv_loop_t *loop, const char *host, unsigned port,
                        const struct rdzv_tls_opts *opts, struct rdzv_server **out)
{
    struct rdzv_tls *tls = NULL;
    char why[256];
    int err;

    if (opts->token != NULL && strlen(opts->token) > RDZV_TOKEN_MAX)
        return UV_EINVAL;
    err = rdzv_tls_new(opts, 1, &tls, why, sizeof(why));
    if (err < 0) {
        mc_error("server: TLS setup failed: %s", why);
        return err;
    }
    return server_start(loop, host, port, tls, opts->token, out);
}

int rdzv_server_new(uv_loop_t *loop, const char *host, unsigned port, const char *token,
                    struct rdzv_server **out)
{
    struct rdzv_tls_opts o = {.token = token};

    if (token == NULL || token[0] == '\0')
        return UV_EINVAL;
    return rdzv_server_new_tls(loop, host, port, &o, out);
}

struct rdzv_limits rdzv_limits_default(void)
{
    return (struct rdzv_limits){
        .max_connections = RDZV_LIMIT_MAX_CONNECTIONS,
        .max_connections_per_source = RDZV_LIMIT_MAX_CONNECTIONS_PER_SOURCE,
        .handshake_ms = RDZV_LIMIT_HANDSHAKE_MS,
        .idle_ms = RDZV_LIMIT_IDLE_MS,
        .kv_max_keys = RDZV_KV_MAX_KEYS,
        .kv_max_bytes = RDZV_KV_MAX_BYTES,
        .kv_max_total_bytes = RDZV_LIMIT_KV_MAX_TOTAL_BYTES,
        .max_jobs = RDZV_LIMIT_MAX_JOBS,
        .send_queue_max = RDZV_LIMIT_SEND_QUEUE_MAX,
        .job_workers_per_proc = RDZV_LIMIT_JOB_WORKERS_PER_PROC,
        .job_workers_slack = RDZV_LIMIT_JOB_WORKERS_SLACK,
        .handshakes_per_source = RDZV_LIMIT_HANDSHAKES_PER_SOURCE,
        .handshake_rate = RDZV_LIMIT_HANDSHAKE_RATE,
        .handshake_burst = RDZV_LIMIT_HANDSHAKE_BURST,
        .kv_max_held_per_conn = RDZV_KV_MAX_HELD_PER_PEER,
        .kv_max_held_per_job = RDZV_KV_MAX_HELD,
        .kv_held_per_worker = RDZV_LIMIT_KV_HELD_PER_WORKER,
        .kv_max_held_total = RDZV_LIMIT_KV_MAX_HELD_TOTAL,
        .max_jobs_per_credential = RDZV_LIMIT_MAX_JOBS_PER_CREDENTIAL,
        .max_connections_per_credential = RDZV_LIMIT_MAX_CONNECTIONS_PER_CREDENTIAL,
        .kv_max_bytes_per_credential = RDZV_LIMIT_KV_MAX_BYTES_PER_CREDENTIAL,
        .kv_max_held_per_credential = RDZV_LIMIT_KV_MAX_HELD_PER_CREDENTIAL,
        .preauth_max = RDZV_LIMIT_PREAUTH_MAX,
        .first_byte_ms = RDZV_LIMIT_FIRST_BYTE_MS,
        .http_max_connections = RDZV_LIMIT_HTTP_MAX_CONNECTIONS,
        .log_ring_bytes = RDZV_LOG_RING_BYTES,
        .log_lines_per_sec = RDZV_LOG_JOB_LINES_PER_S,
        .log_bytes_per_sec = RDZV_LOG_JOB_BYTES_PER_S,
        .log_max_total_bytes = RDZV_LOG_TOTAL_BYTES};
}

void rdzv_server_set_limits(struct rdzv_server *s, const struct rdzv_limits *limits)
{
    struct rdzv_limits d = rdzv_limits_default(), l = *limits;

    l.max_connections = l.max_connections ? l.max_connections : d.max_connections;
    l.handshake_ms = l.handshake_ms ? l.handshake_ms : d.handshake_ms;
    l.idle_ms = l.idle_ms ? l.idle_ms : d.idle_ms;
    l.kv_max_keys = l.kv_max_keys ? l.kv_max_keys : d.kv_max_keys;
    l.kv_max_bytes = l.kv_max_bytes ? l.kv_max_bytes : d.kv_max_bytes;
#define DEFAULT_IF_0(f) l.f = l.f ? l.f : d.f
    DEFAULT_IF_0(max_connections_per_source);
    DEFAULT_IF_0(kv_max_total_bytes);
    DEFAULT_IF_0(max_jobs);
    DEFAULT_IF_0(send_queue_max);
    DEFAULT_IF_0(job_workers_per_proc);
    DEFAULT_IF_0(job_workers_slack);
    DEFAULT_IF_0(handshakes_per_source);
    DEFAULT_IF_0(handshake_rate);
    DEFAULT_IF_0(handshake_burst);
    DEFAULT_IF_0(kv_max_held_per_conn);
    DEFAULT_IF_0(kv_max_held_per_job);
    DEFAULT_IF_0(kv_held_per_worker);
    DEFAULT_IF_0(kv_max_held_total);
    DEFAULT_IF_0(max_jobs_per_credential);
    DEFAULT_IF_0(max_connections_per_credential);
    DEFAULT_IF_0(kv_max_bytes_per_credential);
    DEFAULT_IF_0(kv_max_held_per_credential);
    DEFAULT_IF_0(preauth_max);
    DEFAULT_IF_0(first_byte_ms);
    DEFAULT_IF_0(http_max_connections);
    DEFAULT_IF_0(log_ring_bytes);
    DEFAULT_IF_0(log_lines_per_sec);
    DEFAULT_IF_0(log_bytes_per_sec);
    DEFAULT_IF_0(log_max_total_bytes);
#undef DEFAULT_IF_0
    /* the pool is what unauthenticated connections may take; the rest stays the agents' */
    if (l.preauth_max > l.max_connections)
        l.preauth_max = l.max_connections;
    s->limits = l;
    s->log_limits = (struct rdzv_logring_limits){.ring_bytes = l.log_ring_bytes,
                                                 .lines_per_s = l.log_lines_per_sec,
                                                 .bytes_per_s = l.log_bytes_per_sec,
                                                 .pool_used = &s->log_pool_used,
                                                 .pool_max = l.log_max_total_bytes};
    s->kv_pool.max_bytes = l.kv_max_total_bytes;
    s->kv_pool.max_held = l.kv_max_held_total;
    hs_configure(s);
}

int rdzv_limits_fit_fds(struct rdzv_limits *l, unsigned long nofile, char *why, size_t len)
{
    struct rdzv_limits d = rdzv_limits_default();
    unsigned long conns = l->max_connections ? l->max_connections : d.max_connections;
    unsigned long http = l->http_max_connections ? l->http_max_connections : d.http_max_connections;
    unsigned long pre = l->preauth_max ? l->preauth_max : d.preauth_max, avail;

    if (nofile >= conns + http + RDZV_FD_MARGIN)
        return 0;
    if (nofile < RDZV_FD_MARGIN + 64)
        return -EMFILE;
    avail = nofile - RDZV_FD_MARGIN;
    http = http < avail / 8 ? http : avail / 8;
    conns = conns < avail - http ? conns : avail - http;
    pre = pre < conns / 4 ? pre : conns / 4;
    if (why != NULL)
        snprintf(why, len,
                 "%lu file descriptors (RLIMIT_NOFILE): lowered --max-connections to %lu, "
                 "--max-preauth to %lu and --http-max-connections to %lu",
                 nofile, conns, pre, http);
    l->max_connections = (unsigned)conns;
    l->http_max_connections = (unsigned)http;
    l->preauth_max = (unsigned)pre;
    return 1;
}

void rdzv_server_set_http_public_status(struct rdzv_server *s, int on)
{
    s->http_public_status = on;
}

void rdzv_server_set_auth_hint(struct rdzv_server *s, const char *hint)
{
    snprintf(s->auth_hint, sizeof(s->auth_hint), "%s", hint != NULL ? hint : "");
}

void rdzv_server_set_log(struct rdzv_server *s, rdzv_server_log_cb cb, void *data)
{
    s->log_cb = cb;
    s->log_data = data;
}

unsigned rdzv_server_port(const struct rdzv_server *s)
{
    return s->port;
}

/* Closing the server is not a failure of anyone's job: peers are closed without running the
 * lost-node logic (peer_lose checks srv->closing). */
void rdzv_server_close(struct rdzv_server *s, void (*close_cb)(void *data), void *data)
{
    if (s == NULL || s->closing)
        return;
    s->closing = 1;
    s->close_cb = close_cb;
    s->close_data = data;
    for (struct sjob *sj = s->jobs, *next; sj != NULL; sj = next) {
        next = sj->next;
        rdzv__sjob_drop(sj);
    }
    for (struct peer *p = s->peers; p != NULL; p = p->next) {
        p->job = NULL;
        rdzv__peer_close_now(p);
    }
    if (s->http != NULL)
        rdzv__http_close(s->http);
    rdzv_conn_fair_close(&s->fair, fair_closed_cb);
    uv_close((uv_handle_t *)&s->listener, listener_closed_cb);
}
