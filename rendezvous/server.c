/* The rendezvous server on libuv: the listener, the connections (struct peer) and the dispatch
 * of each decoded message to its handler. Jobs live in sjob.c, message handlers in handler.c
 * (agents) and handler_kv.c (workers, observers). */
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
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
#include "server_priv.h"
#include "tls.h"

/* --- handles and lifetime ------------------------------------------------------------------- */
void srv_handle_closed(struct rdzv_server *srv)
{
    void (*cb)(void *data) = srv->close_cb;
    void *data = srv->close_data;

    srv->handles--;
    if (!srv->closing || srv->handles > 0)
        return;
    rdzv_tls_free(srv->tls); /* every connection is closed by now */
    rdzv_hslimit_free(srv->hslimit);
    srv_scopes_free(&srv->scopes); /* empty by now: every peer and job let go */
    free(srv);
    if (cb != NULL)
        cb(data);
}

static void listener_closed_cb(uv_handle_t *handle)
{
    srv_handle_closed(handle->data);
}

/* --- connections per source address ------------------------------------------------------ */

/* The source group of tcp as 16 bytes (IPv4 v4-mapped, so both listeners' forms agree): its
 * /24 or /64 (rdzv_hslimit_group: issue 26, one attacker rarely has one address only). Returns
 * 0 or a negative errno. */
static int source_key(const uv_tcp_t *tcp, uint8_t key[16])
{
    struct sockaddr_storage ss;
    int n = sizeof(ss), err = uv_tcp_getpeername(tcp, (struct sockaddr *)&ss, &n);

    if (err < 0)
        return err;
    memset(key, 0, 16);
    if (ss.ss_family == AF_INET) {
        key[10] = key[11] = 0xff;
        memcpy(key + 12, &((struct sockaddr_in *)&ss)->sin_addr, 4);
    } else if (ss.ss_family == AF_INET6) {
        memcpy(key, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
    } else {
        return UV_EAFNOSUPPORT;
    }
    rdzv_hslimit_group(key, key);
    return 0;
}

static struct srv_source **source_slot(struct rdzv_server *srv, const uint8_t key[16])
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    struct srv_source **pp;

    for (int i = 0; i < 16; i++)
        h = (h ^ key[i]) * 1099511628211ULL;
    pp = &srv->sources[h % SRV_SOURCE_BUCKETS];
    while (*pp != NULL && memcmp((*pp)->addr, key, 16) != 0)
        pp = &(*pp)->next;
    return pp;
}

/* Counts p against its source address. Returns 0, -EUSERS when the address has
 * max_connections_per_source open already (then p is not counted), or another negative errno
 * (no address, no memory: not counted either, the caller closes it too). */
static int source_add(struct peer *p)
{
    struct rdzv_server *srv = p->srv;
    struct srv_source **pp, *src;
    uint8_t key[16];
    int err = source_key(&p->conn.tcp, key);

    if (err < 0)
        return err;
    pp = source_slot(srv, key);
    src = *pp;
    if (src != NULL && src->n >= srv->limits.max_connections_per_source)
        return -EUSERS;
    if (src == NULL) {
        src = calloc(1, sizeof(*src));
        if (src == NULL)
            return -ENOMEM;
        memcpy(src->addr, key, 16);
        *pp = src;
    }
    src->n++;
    p->source = src;
    return 0;
}

static void source_remove(struct peer *p)
{
    struct srv_source *src = p->source, **pp;

    if (src == NULL || --src->n > 0)
        return;
    pp = source_slot(p->srv, src->addr);
    *pp = src->next;
    free(src);
}

/* --- TLS handshakes per source address (hslimit.h, issue 11) --------------------------------- */
static void hs_configure(struct rdzv_server *srv)
{
    rdzv_hslimit_configure(srv->hslimit, srv->limits.handshakes_per_source,
                           srv->limits.handshake_rate, srv->limits.handshake_burst);
}

/* p's handshake is over (its first message) or p is going: no longer in flight. */
static void hs_end(struct peer *p)
{
    if (!p->hs_counted)
        return;
    p->hs_counted = 0;
    rdzv_hslimit_end(p->srv->hslimit, p->hs_addr);
    if (p->conn.raw_in == 0) /* not a byte: no TLS work was done, the token is not spent */
        rdzv_hslimit_refund(p->srv->hslimit, p->hs_addr);
}

/* --- the pre-authentication pool (issue 26) --------------------------------------------------
 * Every TCP connection from accept until its HELLO is accepted is on two lists: the server's
 * (srv->pre_head, at most limits.preauth_max long) and its source group's (at most
 * handshakes_per_source, hslimit.c). A new connection over either bound evicts an idle one of
 * that list instead of being refused. Refusing the new one (what the per-source
 * handshakes_in_flight limit did) let 128 silent connections from an address, or 16,384 from 130
 * addresses, lock every real agent out for as long as the flood was held open. Now:
 *  - idle is "waiting for the client": not a byte since accept, or none for PRE_IDLE_MS (a real
 *    client answers each TLS flight within a round trip). A silent connection is the first to
 *    go, whatever else the pool holds; a slowloris holds a place for PRE_IDLE_MS at most;
 *  - a real client sends its ClientHello at once and is done in milliseconds: never idle;
 *  - when no connection of the list is idle, the list is real TLS work in progress (a
 *    ClientHello flood): then the new connection is refused as before, so that the TLS work of a
 *    group stays bounded (handshakes_per_source at once, handshake_rate a second);
 *  - authenticated connections are on no list: the pool is a fraction of max_connections, so
 *    unauthenticated connections can never take the places of agents and workers.
 * The lists are in accept order; a look that finds a busy connection moves it to the tail, so a
 * flood of evictions looks at each connection about once (O(1) amortised). */
#define PRE_IDLE_MS 500

static void pre_link(struct peer *p)
{
    struct rdzv_server *srv = p->srv;
    struct srv_source *src = p->source;

    p->in_pre = 1;
    p->pre_prev = srv->pre_tail;
    p->pre_next = NULL;
    if (srv->pre_tail != NULL)
        srv->pre_tail->pre_next = p;
    else
        srv->pre_head = p;
    srv->pre_tail = p;
    srv->n_pre++;
    p->spre_prev = src->pre_tail;
    p->spre_next = NULL;
    if (src->pre_tail != NULL)
        src->pre_tail->spre_next = p;
    else
        src->pre_head = p;
    src->pre_tail = p;
}

static void pre_unlink_global(struct peer *p)
{
    struct rdzv_server *srv = p->srv;

    if (p->pre_prev != NULL)
        p->pre_prev->pre_next = p->pre_next;
    else
        srv->pre_head = p->pre_next;
    if (p->pre_next != NULL)
        p->pre_next->pre_prev = p->pre_prev;
    else
        srv->pre_tail = p->pre_prev;
    p->pre_prev = p->pre_next = NULL;
}

static void pre_unlink_source(struct peer *p)
{
    struct srv_source *src = p->source;

    if (p->spre_prev != NULL)
        p->spre_prev->spre_next = p->spre_next;
    else
        src->pre_head = p->spre_next;
    if (p->spre_next != NULL)
        p->spre_next->spre_prev = p->spre_prev;
    else
        src->pre_tail = p->spre_prev;
    p->spre_prev = p->spre_next = NULL;
}

/* p is authenticated or going: out of both lists. */
static void pre_unlink(struct peer *p)
{
    if (!p->in_pre)
        return;
    p->in_pre = 0;
    p->srv->n_pre--;
    pre_unlink_global(p);
    pre_unlink_source(p);
}

/* Moves p to the tail of one list (the server's when global, else its source's): it made
 * progress, so it is the newest as far as idleness goes. */
static void pre_requeue(struct peer *p, int global)
{
    if (global) {
        pre_unlink_global(p);
        p->pre_prev = p->srv->pre_tail;
        if (p->srv->pre_tail != NULL)
            p->srv->pre_tail->pre_next = p;
        else
            p->srv->pre_head = p;
        p->srv->pre_tail = p;
        return;
    }
    pre_unlink_source(p);
    p->spre_prev = p->source->pre_tail;
    if (p->source->pre_tail != NULL)
        p->source->pre_tail->spre_next = p;
    else
        p->source->pre_head = p;
    p->source->pre_tail = p;
}

static int pre_idle(const struct peer *p, uint64_t now)
{
    return p->conn.raw_in == 0 || now - p->conn.raw_in_ms >= PRE_IDLE_MS;
}

/* The oldest idle connection of the server's list (global) or of src's; NULL when none is. */
static struct peer *pre_victim(struct rdzv_server *srv, struct srv_source *src, int global)
{
    unsigned looks = global ? srv->n_pre : srv->limits.handshakes_per_source + 1;
    uint64_t now = uv_now(srv->loop);

    for (unsigned i = 0; i < looks; i++) {
        struct peer *v = global ? srv->pre_head : src->pre_head;

        if (v == NULL || pre_idle(v, now))
            return v;
        pre_requeue(v, global);
    }
    return NULL;
}

/* Evicts the victim of one list for a new connection; 0, or -ENOENT when none is idle. */
static int pre_evict(struct rdzv_server *srv, struct srv_source *src, int global)
{
    struct peer *v = pre_victim(srv, src, global);

    if (v == NULL)
        return -ENOENT;
    if (global)
        srv_peer_event(v, SRV_EV_PREAUTH_EVICT,
                       "evicted: the oldest idle of %u unauthenticated connections (no "
                       "byte, or none for %u ms), for a new one",
                       srv->n_pre, PRE_IDLE_MS);
    else
        srv_peer_event(v, SRV_EV_PREAUTH_SRC_EVICT,
                       "evicted: the oldest idle of %u TLS handshakes in flight from its "
                       "network (no byte, or none for %u ms), for a new one",
                       srv->limits.handshakes_per_source, PRE_IDLE_MS);
    srv_peer_close(v, 0); /* unlinks it and (peer_release) ends its handshake count */
    hs_end(v);            /* now: the new connection's rdzv_hslimit_begin is retried at once */
    return 0;
}

/* A peer owns two handles (the TCP connection and the heartbeat timer): freed after both. */
static void peer_release(struct peer *p)
{
    struct rdzv_server *srv = p->srv;

    if (--p->open > 0)
        return;
    if (p->closing)
        srv->n_closing--;
    source_remove(p);
    hs_end(p);
    srv->stats.bytes_received_total += p->conn.bytes_in;
    srv->stats.bytes_sent_total += p->conn.bytes_out;
    if (p->prev != NULL)
        p->prev->next = p->next;
    else
        srv->peers = p->next;
    if (p->next != NULL)
        p->next->prev = p->prev;
    srv->n_peers--;
    if (p->scope != NULL)
        p->scope->connections--;
    srv_scope_put(&srv->scopes, p->scope);
    free(p->local_addr);
    free(p);
    srv_handle_closed(srv);
}

static void timer_closed_cb(uv_handle_t *handle);

/* The connection is closed; a timer still bounding its flush (peer_lose) goes too. */
static void peer_closed_cb(struct rdzv_conn *conn)
{
    struct peer *p = conn->data;

    if (!uv_is_closing((uv_handle_t *)&p->timer))
        uv_close((uv_handle_t *)&p->timer, timer_closed_cb);
    peer_release(p);
}

static void timer_closed_cb(uv_handle_t *handle)
{
    peer_release(handle->data);
}

/* --- sending ---------------------------------------------------------------------------------
 * A failed send closes the peer: over send_queue_max (-ENOBUFS) it stopped reading, and every
 * reply it asks for would stay in this process's memory (a client asking for a 60 KiB value
 * over and over without reading grew the server without bound); out of memory or a broken TLS
 * context, nothing more can reach it. The close is not done here but from the peer's timer at
 * once: srv_send runs inside job broadcasts and KV store callbacks, which must not see a member
 * leave or the store change under them. Later sends and messages of that peer are dropped. */
void srv_send(struct peer *p, const struct rdzv_msg *m)
{
    int err;

    if (p == NULL || p->closing || p->send_err != 0)
        return;
    err = rdzv_conn_send(&p->conn, m);
    if (err == 0 || err == -EINVAL) /* -EINVAL: this server built a bad message; not the peer's */
        return;
    p->send_err = err;
    srv_peer_arm(p);
}

/* Sends ERROR and closes after it was flushed: the protocol says the sender of ERROR closes. */
void srv_send_error(struct peer *p, uint32_t code, const char *fmt, ...)
{
    struct rdzv_msg m;

    rdzv_msg_init(&m, RDZV_MSG_ERROR);
    va_list ap;

    m.u.error.code = code;
    va_start(ap, fmt);
    vsnprintf(m.u.error.text, sizeof(m.u.error.text), fmt, ap);
    va_end(ap);
    srv_send(p, &m);
    srv_peer_close(p, 1);
}

/* --- closing and liveness ------------------------------------------------------------------- */

/* A member connection going away mid-round is a lost node (`reason` says how); the job decides
 * what follows. Its worker requests are forgotten. */
/* A flushing close waits for the queued bytes to reach the socket; a peer that does not read
 * would hold it open (and its up to send_queue_max bytes) for ever: cut it after
 * SRV_CLOSE_FLUSH_MS. */
static void flush_timeout_cb(uv_timer_t *t)
{
    struct peer *p = t->data;

    rdzv_conn_close(&p->conn, 0, peer_closed_cb); /* peer_closed_cb closes the timer */
}

static void peer_lose(struct peer *p, int flush, const char *reason)
{
    if (p->closing)
        return;
    p->closing = 1;
    p->srv->n_closing++;
    pre_unlink(p);
    if (p->job != NULL && !p->srv->closing)
        rdzv__sjob_detach(p->job, p, reason);
    if (p->kvjob != NULL && p->kvjob->kv != NULL)
        rdzv_kv_forget(p->kvjob->kv, p);
    if (p->kvjob != NULL)
        p->kvjob->nworkers--;
    p->kvjob = NULL;
    uv_timer_stop(&p->timer);
    if (flush && !uv_is_closing((uv_handle_t *)&p->timer))
        uv_timer_start(&p->timer, flush_timeout_cb, SRV_CLOSE_FLUSH_MS, 0);
    else if (!uv_is_closing((uv_handle_t *)&p->timer))
        uv_close((uv_handle_t *)&p->timer, timer_closed_cb);
    rdzv_conn_close(&p->conn, flush, peer_closed_cb);
}

void srv_peer_close(struct peer *p, int flush)
{
    peer_lose(p, flush, "connection closed");
}

/* The deadline that applies to p now, by state, or 0 for none:
 *  - before HELLO is accepted: accept + handshake_ms, however many bytes trickle in (a
 *    slowloris client sending one byte a second never gets further);
 *  - in a job as an agent that promised heartbeats: last message + its heartbeat timeout;
 *  - in a job otherwise (old agents, attached workers): none. A worker keeps its connection for
 *    the whole run and may be silent for hours between barriers; its job's end drops it.
 *  - in no job (observers, not yet joined, job gone): last message + idle_ms;
 *  - a send failed (srv_send): now, whatever the state. */
static uint64_t peer_deadline(const struct peer *p, enum srv_event *why)
{
    const struct rdzv_limits *l = &p->srv->limits;

    if (p->send_err != 0) { /* now (1: 0 would mean none) */
        *why = SRV_EV_SEND_QUEUE;
        return 1;
    }
    if (!p->welcomed && p->local_addr == NULL && p->conn.raw_in == 0 &&
        l->first_byte_ms < l->handshake_ms) {
        *why = SRV_EV_FIRST_BYTE; /* bytes since: the timer moves on to the handshake's */
        return p->accepted_ms + l->first_byte_ms;
    }
    if (!p->welcomed) {
        *why = SRV_EV_HANDSHAKE_TIMEOUT;
        return p->accepted_ms + l->handshake_ms;
    }
    *why = SRV_EV_COUNT_; /* a lost agent, not a refusal */
    if (p->job != NULL)
        return p->hb_timeout_ms > 0 ? p->last_seen_ms + p->hb_timeout_ms : 0;
    if (p->kvjob != NULL)
        return 0;
    *why = SRV_EV_IDLE_TIMEOUT;
    return p->last_seen_ms + l->idle_ms;
}

/* srv_send failed earlier: the peer goes now (an agent in a job is a lost node). */
static void peer_send_failed(struct peer *p)
{
    char reason[96];

    if (p->send_err == -ENOBUFS) {
        srv_peer_event(p, SRV_EV_SEND_QUEUE, "over %zu bytes of replies unread",
                       p->srv->limits.send_queue_max);
        snprintf(reason, sizeof(reason), "it stopped reading (over %zu bytes unsent)",
                 p->srv->limits.send_queue_max);
    } else {
        snprintf(reason, sizeof(reason), "sending to it failed: %s", strerror(-p->send_err));
    }
    peer_lose(p, 0, reason);
}

/* Fires at the deadline computed when armed; a message since then only moves the deadline, so
 * busy peers cost no timer operation per message. */
static void timer_cb(uv_timer_t *t)
{
    struct peer *p = t->data;
    uint64_t now = uv_now(p->srv->loop);
    enum srv_event why;
    uint64_t deadline = peer_deadline(p, &why);
    char reason[64];

    if (deadline == 0 || p->closing)
        return;
    if (now < deadline) {
        uv_timer_start(&p->timer, timer_cb, deadline - now, 0);
        return;
    }
    if (why == SRV_EV_SEND_QUEUE) {
        peer_send_failed(p);
    } else if (why == SRV_EV_HANDSHAKE_TIMEOUT) {
        srv_peer_event(p, why, "no HELLO accepted within %u ms of connecting",
                       p->srv->limits.handshake_ms);
        srv_peer_close(p, 0);
    } else if (why == SRV_EV_FIRST_BYTE) {
        srv_peer_event(p, why, "not a byte within %u ms of connecting",
                       p->srv->limits.first_byte_ms);
        srv_peer_close(p, 0);
    } else if (why == SRV_EV_IDLE_TIMEOUT) {
        srv_peer_event(p, why, "silent for %u ms while in no job", p->srv->limits.idle_ms);
        srv_peer_close(p, 0);
    } else {
        snprintf(reason, sizeof(reason), "no heartbeat for %.1f s", p->hb_timeout_ms / 1000.0);
        peer_lose(p, 0, reason);
    }
}

/* (Re)arms the timer for the state p is in now; called on every change of state. */
void srv_peer_arm(struct peer *p)
{
    enum srv_event why;
    uint64_t deadline, now;

    if (p->closing)
        return;
    deadline = peer_deadline(p, &why);
    now = uv_now(p->srv->loop);
    if (deadline == 0)
        uv_timer_stop(&p->timer);
    else
        uv_timer_start(&p->timer, timer_cb, deadline > now ? deadline - now : 0, 0);
}

/* Old agents send keep_alive_ms = 0 and no heartbeats: for them only a closed connection
 * counts, or every job longer than 3 s would be torn down. */
void srv_peer_heartbeat_start(struct peer *p, const struct rdzv_join *j)
{
    if (j->keep_alive_ms > 0) {
        p->hb_timeout_ms =
            j->heartbeat_timeout_ms ? j->heartbeat_timeout_ms : RDZV_JOB_HEARTBEAT_TIMEOUT_MS;
        p->keep_alive_ms = j->keep_alive_ms;
    }
    p->gap_max_ms = 0;
    srv_peer_arm(p);
}

/* The address the connection came from, without port; IPv6 without brackets, and an IPv4
 * client of a dual-stack listener ("::ffff:10.0.0.1") as plain IPv4 so peers can use it. */
void srv_tcp_addr(const uv_tcp_t *tcp, char *buf, size_t len)
{
    struct sockaddr_storage ss;
    int n = sizeof(ss);

    buf[0] = '\0';
    if (uv_tcp_getpeername(tcp, (struct sockaddr *)&ss, &n) < 0)
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

void srv_peer_addr(struct peer *p, char *buf, size_t len)
{
    if (p->local_addr != NULL)
        snprintf(buf, len, "%s", p->local_addr);
    else
        srv_tcp_addr(&p->conn.tcp, buf, len);
}

/* --- refusals: counted, logged once per peer address --------------------------------------- */
void srv_event_metric(enum srv_event ev, const char **family, const char **label)
{
    static const char *const labels[SRV_EV_COUNT_] = {
        [SRV_EV_CONNECTIONS] = "connections",
        [SRV_EV_HANDSHAKE_TIMEOUT] = "handshake_timeout",
        [SRV_EV_IDLE_TIMEOUT] = "idle_timeout",
        [SRV_EV_FRAME_SIZE] = "frame_size",
        [SRV_EV_KV_HELD_CONN] = "kv_held_per_conn",
        [SRV_EV_KV_HELD_JOB] = "kv_held_per_job",
        [SRV_EV_KV_HELD_TOTAL] = "kv_held_total",
        [SRV_EV_PREAUTH_EVICT] = "preauth_evicted",
        [SRV_EV_PREAUTH_SRC_EVICT] = "preauth_source_evicted",
        [SRV_EV_FIRST_BYTE] = "first_byte_timeout",
        [SRV_EV_HTTP_CONNECTIONS] = "http_connections",
        [SRV_EV_HTTP_STATUS_AUTH] = "http_status_unauthorized",
        [SRV_EV_PER_SOURCE] = "connections_per_source",
        [SRV_EV_SEND_QUEUE] = "send_queue",
        [SRV_EV_JOBS] = "jobs",
        [SRV_EV_JOB_WORKERS] = "job_workers",
        [SRV_EV_KV_TOTAL] = "kv_total",
        [SRV_EV_KV_QUOTA] = "kv_quota",
        [SRV_EV_HS_RATE] = "handshake_rate",
        [SRV_EV_HS_IN_FLIGHT] = "handshakes_in_flight",
        [SRV_EV_CRED_JOBS] = "jobs_per_credential",
        [SRV_EV_CRED_CONNECTIONS] = "connections_per_credential",
        [SRV_EV_CRED_KV] = "kv_per_credential",
        [SRV_EV_AUTH_TOKEN] = "token",
        [SRV_EV_AUTH_JOB_SCOPE] = "job_scope",
        [SRV_EV_AUTH_TLS] = "tls_handshake",
        [SRV_EV_AUTH_NODE] = "node_secret",
        [SRV_EV_PROTOCOL] = "protocol",
    };

    if (ev <= SRV_EV_KV_QUOTA)
        *family = "muster_limit_hits_total";
    else if (ev <= SRV_EV_AUTH_NODE)
        *family = "muster_auth_failures_total";
    else
        *family = "muster_protocol_errors_total";
    *label = labels[ev];
}

/* Lines carry what peers chose (host names, job ids, failure texts): the whole line is escaped
 * (common/escape.h), so a newline in a job id cannot forge a log line nor ESC sequences reach
 * the operator's terminal. The server's own words have no control bytes or backslashes. */
void srv_log(struct rdzv_server *srv, const char *fmt, ...)
{
    char line[1024], safe[MC_ESCAPE_SIZE(sizeof(line))];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    (void)mc_escape(line, safe, sizeof(safe)); /* cannot be cut: sized for the worst case */
    if (srv->log_cb != NULL)
        srv->log_cb(srv->log_data, MC_LOG_INFO, safe);
    else
        mc_info("server: %s", safe);
}

/* Whether ev from addr is to be logged: the first time per address and kind only. */
static int log_first(struct rdzv_server *srv, enum srv_event ev, const char *addr)
{
    struct srv_logged *e = NULL;

    for (unsigned i = 0; i < SRV_LOG_PEERS && e == NULL; i++)
        if (strcmp(srv->logged[i].addr, addr) == 0)
            e = &srv->logged[i];
    if (e == NULL) {
        e = &srv->logged[srv->logged_next];
        srv->logged_next = (srv->logged_next + 1) % SRV_LOG_PEERS;
        snprintf(e->addr, sizeof(e->addr), "%s", addr);
        e->events = 0;
    }
    if (e->events & (1u << ev))
        return 0;
    e->events |= 1u << ev;
    return 1;
}

static void event_va(struct rdzv_server *srv, enum srv_event ev, const char *addr, const char *fmt,
                     va_list ap)
{
    const char *family, *label;
    char text[640];

    srv->stats.events[ev]++;
    if (addr[0] == '\0')
        addr = "?"; /* already gone: getpeername failed */
    if (!log_first(srv, ev, addr)) {
        srv->stats.log_suppressed++;
        return;
    }
    vsnprintf(text, sizeof(text), fmt, ap);
    srv_event_metric(ev, &family, &label);
    srv_log(srv, "refused %s: %s: %s (counted in %s; not logged again for this address)", addr,
            label, text, family);
}

void srv_event(struct rdzv_server *srv, enum srv_event ev, const char *addr, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    event_va(srv, ev, addr, fmt, ap);
    va_end(ap);
}

/* A KV_REPLY LIMIT (rdzv__sjob_kv_reply): over the job's own quota, or over the server's total when
 * the shared pool refused it just now. */
void srv_kv_limit_event(struct peer *p)
{
    struct rdzv_server *srv = p->srv;

    if (srv->kv_pool.refused != srv->kv_pool_refused) {
        srv->kv_pool_refused = srv->kv_pool.refused;
        srv_peer_event(p, SRV_EV_KV_TOTAL,
                       "KV_PUT over the %zu bytes of KV data the server "
                       "holds for all jobs",
                       srv->limits.kv_max_total_bytes);
        return;
    }
    srv_peer_event(p, SRV_EV_KV_QUOTA, "KV_PUT over the job's quota of keys or bytes");
}

void srv_peer_event(struct peer *p, enum srv_event ev, const char *fmt, ...)
{
    char addr[INET6_ADDRSTRLEN];
    va_list ap;

    srv_peer_addr(p, addr, sizeof(addr));
    va_start(ap, fmt);
    event_va(p->srv, ev, addr, fmt, ap);
    va_end(ap);
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
        return role == RDZV_ROLE_AGENT;
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

/* max_jobs_per_credential (issue 26): checked before the server-wide cap, so that a team at
 * its own quota learns that, not that the server is full. Returns 1 when it may go on. */
static int admit_scope_job(struct peer *p)
{
    const struct srv_scope *s = p->scope;
    unsigned max = p->srv->limits.max_jobs_per_credential;

    if (s == NULL || s->jobs < max)
        return 1;
    srv_peer_event(p, SRV_EV_CRED_JOBS, "JOIN for a new job while credential job:%s holds %u jobs",
                   s->scope, s->jobs);
    srv_send_error(p, RDZV_ERR_PROTOCOL,
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
    srv_peer_event(p, SRV_EV_JOBS, "JOIN for a new job while %u jobs exist (limit %u)", srv->n_jobs,
                   srv->limits.max_jobs);
    srv_send_error(p, RDZV_ERR_PROTOCOL,
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
    case RDZV_MSG_ATTACH:
        rdzv__handle_attach(p, &m->u.attach);
        break;
    case RDZV_MSG_STATUS_REQ:
        rdzv__handle_status_req(p, &m->u.status_req);
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
        return; /* going at once (srv_send): no more work for it */
    now = uv_now(p->srv->loop);
    if (p->job != NULL && p->hb_timeout_ms > 0 && now - p->last_seen_ms > p->gap_max_ms)
        p->gap_max_ms = now - p->last_seen_ms;
    p->last_seen_ms = now;
    hs_end(p); /* a message: the TLS handshake is over */
    if (!p->welcomed && m->type != RDZV_MSG_HELLO) {
        srv_peer_event(p, SRV_EV_PROTOCOL, "%s before HELLO", rdzv_msg_name(m->type));
        srv_send_error(p, RDZV_ERR_PROTOCOL, "expected HELLO first, got %s",
                       rdzv_msg_name(m->type));
        return;
    }
    if (m->type == RDZV_MSG_HELLO) {
        if (p->welcomed) {
            srv_peer_event(p, SRV_EV_PROTOCOL, "HELLO sent twice");
            srv_send_error(p, RDZV_ERR_PROTOCOL, "HELLO sent twice");
        } else {
            rdzv__handle_hello(p, &m->u.hello);
            if (p->welcomed)
                pre_unlink(p); /* authenticated: out of the pre-authentication budget */
        }
        return;
    }
    if (!allowed(p->role, m->type)) {
        srv_peer_event(p, SRV_EV_PROTOCOL, "%s from a client of role %u", rdzv_msg_name(m->type),
                       p->role);
        srv_send_error(p, RDZV_ERR_PROTOCOL,
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

        srv_peer_event(p, SRV_EV_AUTH_TLS, "TLS handshake failed: %s%s%s",
                       why[0] != '\0'  ? why
                       : err == UV_EOF ? "closed before the handshake finished"
                                       : uv_strerror(err),
                       p->srv->auth_hint[0] != '\0' ? "; " : "", p->srv->auth_hint);
        srv_peer_close(p, 0);
        return;
    }
    if (err == -EMSGSIZE) {
        srv_peer_event(p, SRV_EV_FRAME_SIZE, "frame header announces over %d bytes",
                       RDZV_MAX_PAYLOAD);
        srv_send_error(p, RDZV_ERR_PROTOCOL, "frame payload over %d bytes", RDZV_MAX_PAYLOAD);
        return;
    }
    if (err == -EPROTONOSUPPORT || err == -ENOTSUP || err == -EPROTO)
        srv_peer_event(p, SRV_EV_PROTOCOL, "%s",
                       err == -EPROTONOSUPPORT ? "frame version"
                       : err == -ENOTSUP       ? "unknown message type"
                       : conn->type == 0       ? "bad frame magic"
                                               : "malformed payload");
    if (err == -EPROTONOSUPPORT)
        srv_send_error(p, RDZV_ERR_VERSION, "frame version not supported (server speaks %d)",
                       RDZV_PROTO_VERSION);
    else if (err == -ENOTSUP)
        srv_send_error(p, RDZV_ERR_UNKNOWN_TYPE, "unknown message type %u", conn->type);
    else if (err == -EPROTO && conn->type == 0)
        srv_send_error(p, RDZV_ERR_PROTOCOL, "bad frame header (magic)");
    else if (err == -EPROTO)
        srv_send_error(p, RDZV_ERR_PROTOCOL, "malformed %s payload", rdzv_msg_name(conn->type));
    else
        srv_peer_close(p, 0); /* EOF or a socket error: nobody to tell */
}

/* --- listener ------------------------------------------------------------------------------- */
static void refused_closed_cb(uv_handle_t *handle)
{
    struct rdzv_server *srv = handle->data;

    free(handle);
    srv_handle_closed(srv);
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
        srv_tcp_addr(tcp, addr, sizeof(addr));
        srv_event(srv, SRV_EV_CONNECTIONS, addr, "%u connections open already",
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
    int err = source_add(p);

    if (err == -EUSERS) {
        srv_peer_addr(p, addr, sizeof(addr));
        srv_event(p->srv, SRV_EV_PER_SOURCE, addr, "%u connections open from this address",
                  p->srv->limits.max_connections_per_source);
    }
    if (err < 0)
        srv_peer_close(p, 0);
    return err == 0;
}

/* Over handshakes_per_source in flight or over handshake_rate: closed before any TLS work, so
 * that a flood of ClientHellos from one address gets a bounded share of the handshake threads
 * and of the CPU. Returns 1 when p may go on. */
static int admit_handshake(struct peer *p)
{
    struct rdzv_server *srv = p->srv;
    char addr[INET6_ADDRSTRLEN];
    int err = source_key(&p->conn.tcp, p->hs_addr);

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
    srv_peer_addr(p, addr, sizeof(addr));
    if (err == -EAGAIN)
        srv_event(srv, SRV_EV_HS_RATE, addr, "over %u new TLS handshakes a second",
                  srv->limits.handshake_rate);
    else if (err == -EBUSY || err == -ENOMEM) /* -ENOMEM: the table is full of busy sources */
        srv_event(srv, SRV_EV_HS_IN_FLIGHT, addr, "%u TLS handshakes in flight from this address",
                  srv->limits.handshakes_per_source);
    srv_peer_close(p, 0);
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
    srv_peer_addr(p, addr, sizeof(addr));
    if (full)
        srv_event(srv, SRV_EV_CONNECTIONS, addr,
                  "%u unauthenticated connections, every one of them handshaking", srv->n_pre);
    else
        srv_event(srv, SRV_EV_CONNECTIONS, addr, "%u connections open already",
                  live_peers(srv) - 1);
    srv_peer_close(p, 0);
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
        srv_peer_close(p, 0);
        return;
    }
    if (!admit_source(p) || !admit_handshake(p) || !admit_preauth(p))
        return;
    pre_link(p);
    /* Every connection is TLS: the server has no plaintext path. */
    if (rdzv_conn_start_tls(&p->conn, srv->tls, 1) < 0) {
        srv_peer_close(p, 0);
        return;
    }
    srv_peer_arm(p);
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
        srv_peer_close(p, 0);
        return err;
    }
    srv_peer_arm(p);
    *fd = fds[1];
    return 0;
}

/* Numeric addresses directly; names (e.g. "localhost") through a synchronous getaddrinfo, which
 * is fine once at start-up. */
int rdzv_server_resolve(uv_loop_t *loop, const char *host, unsigned port,
                        struct sockaddr_storage *ss)
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

int rdzv_server_listen_tcp(uv_tcp_t *tcp, struct sockaddr_storage *ss, uv_connection_cb cb,
                           unsigned *bound)
{
    int n = sizeof(*ss);
    int err;

    err = uv_tcp_bind(tcp, (struct sockaddr *)ss, 0);
    if (err < 0)
        return err;
    /* a large backlog (the kernel caps it at net.core.somaxconn): with 128, a burst of
     * thousands of agents overflowed the SYN queue and their connects were retried after 1,
     * 3, 7 s, which made 10,000 agents take 1.6 to 20 s (bench/rdzv_bench.sh b) */
    err = uv_listen((uv_stream_t *)tcp, RDZV_LISTEN_BACKLOG, cb);
    if (err < 0)
        return err;
    err = uv_tcp_getsockname(tcp, (struct sockaddr *)ss, &n);
    if (err < 0)
        return err;
    *bound = ntohs(ss->ss_family == AF_INET ? ((struct sockaddr_in *)ss)->sin_port
                                            : ((struct sockaddr_in6 *)ss)->sin6_port);
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
    srv->start_ms = uv_now(loop);
    srv->limits = rdzv_limits_default();
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
    srv->handles = 1;
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

/* --- quotas per job credential scope (issue 26, scope.h) ----------------------------------- */

/* At HELLO: a job credential's connection is charged to its scope, or refused over
 * max_connections_per_credential (then answered and closed). Returns 1 when it may go on. */
int srv_scope_admit_peer(struct peer *p)
{
    struct rdzv_server *srv = p->srv;
    struct srv_scope *s;

    if (p->cred.kind != RDZV_CRED_JOB || p->scope != NULL)
        return 1; /* operators, observers and workers: only the server-wide caps */
    if (srv_scope_get(&srv->scopes, p->cred.scope, &s) < 0) {
        srv_send_error(p, RDZV_ERR_PROTOCOL, "server out of memory");
        return 0;
    }
    if (s->connections >= srv->limits.max_connections_per_credential) {
        srv_peer_event(p, SRV_EV_CRED_CONNECTIONS,
                       "HELLO while credential job:%s holds %u connections", s->scope,
                       s->connections);
        srv_send_error(p, RDZV_ERR_PROTOCOL,
                       "credential job:%s holds %u connections, its limit (muster server "
                       "--max-connections-per-credential)",
                       s->scope, s->connections);
        srv_scope_put(&srv->scopes, s);
        return 0;
    }
    s->connections++;
    p->scope = s;
    /* its jobs' KV stores charge this pool first, then the server's (kvpool.h) */
    s->kv.parent = &srv->kv_pool;
    s->kv.max_bytes = srv->limits.kv_max_bytes_per_credential;
    s->kv.max_held = srv->limits.kv_max_held_per_credential;
    return 1;
}

/* A job created with scope s (its creator's, or NULL) is charged to it until the job is freed
 * (sjob.c): a job slot, and its KV store draws on the scope's pool. */
void srv_scope_charge_job(struct sjob *sj, struct srv_scope *s)
{
    if (s == NULL || sj->scope != NULL)
        return;
    sj->scope = s;
    sj->scope->refs++;
    sj->scope->jobs++;
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
        .http_max_connections = RDZV_LIMIT_HTTP_MAX_CONNECTIONS};
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
#undef DEFAULT_IF_0
    /* the pool is what unauthenticated connections may take; the rest stays the agents' */
    if (l.preauth_max > l.max_connections)
        l.preauth_max = l.max_connections;
    s->limits = l;
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
        srv_peer_close(p, 0);
        rdzv_conn_close(&p->conn, 0, peer_closed_cb); /* hurry a flushing close */
    }
    if (s->http != NULL)
        rdzv__http_close(s->http);
    uv_close((uv_handle_t *)&s->listener, listener_closed_cb);
}
