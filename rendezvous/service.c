/* The services of the rendezvous server below its dispatcher (server.c) and its handlers
 * (handler*.c, sjob.c): replies, closing a connection and its liveness deadline, refusals
 * counted and logged once per address, the per-source and pre-authentication bookkeeping,
 * credential-scope quotas, the KV stores' replies. Calls nothing above it (service.h). */
#include "service.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "cred.h"
#include "escape.h"
#include "hslimit.h"
#include "log.h"
#include "tls.h"

/* --- handles and lifetime ------------------------------------------------------------------- */
void rdzv__handle_closed(struct rdzv_server *srv)
{
    void (*cb)(void *data) = srv->close_cb;
    void *data = srv->close_data;

    srv->handles--;
    if (!srv->closing || srv->handles > 0)
        return;
    rdzv_tls_free(srv->tls); /* every connection is closed by now */
    rdzv_hslimit_free(srv->hslimit);
    rdzv__scopes_free(&srv->scopes); /* empty by now: every peer and job let go */
    while (srv->ended_logs != NULL) {
        struct rdzv__ended_log *e = srv->ended_logs;
        srv->ended_logs = e->next;
        rdzv_logring_free(e->ring);
        free(e);
    }
    free(srv);
    if (cb != NULL)
        cb(data);
}

/* --- connections per source address ------------------------------------------------------ */

/* The source group of tcp as 16 bytes (IPv4 v4-mapped, so both listeners' forms agree): its
 * /24 or /64 (rdzv_hslimit_group: one attacker rarely has one address only). Returns
 * 0 or a negative errno. */
int rdzv__source_key(const uv_tcp_t *tcp, uint8_t key[16])
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

static struct rdzv__source **source_slot(struct rdzv_server *srv, const uint8_t key[16])
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    struct rdzv__source **pp;

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
int rdzv__source_add(struct peer *p)
{
    struct rdzv_server *srv = p->srv;
    struct rdzv__source **pp, *src;
    uint8_t key[16];
    int err = rdzv__source_key(&p->conn.tcp, key);

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
    struct rdzv__source *src = p->source, **pp;

    if (src == NULL || --src->n > 0)
        return;
    pp = source_slot(p->srv, src->addr);
    *pp = src->next;
    free(src);
}

/* p's handshake is over (its first message) or p is going: no longer in flight. */
void rdzv__hs_end(struct peer *p)
{
    if (!p->hs_counted)
        return;
    p->hs_counted = 0;
    rdzv_hslimit_end(p->srv->hslimit, p->hs_addr);
    if (p->conn.raw_in == 0) /* not a byte: no TLS work was done, the token is not spent */
        rdzv_hslimit_refund(p->srv->hslimit, p->hs_addr);
}

/* --- the pre-authentication pool (docs/SECURITY.md "Limits and quotas of a shared server") --
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

void rdzv__pre_link(struct peer *p)
{
    struct rdzv_server *srv = p->srv;
    struct rdzv__source *src = p->source;

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
    struct rdzv__source *src = p->source;

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
void rdzv__pre_unlink(struct peer *p)
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
struct peer *rdzv__pre_victim(struct rdzv_server *srv, struct rdzv__source *src, int global)
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

/* A peer owns two handles (the TCP connection and the heartbeat timer): freed after both. */
static void peer_release(struct peer *p)
{
    struct rdzv_server *srv = p->srv;

    if (--p->open > 0)
        return;
    if (p->closing)
        srv->n_closing--;
    source_remove(p);
    rdzv__hs_end(p);
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
    rdzv__scope_put(&srv->scopes, p->scope);
    free(p->local_addr);
    free(p->tel);
    free(p->tel_judge);
    free(p);
    rdzv__handle_closed(srv);
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
 * once: rdzv__send runs inside job broadcasts and KV store callbacks, which must not see a member
 * leave or the store change under them. Later sends and messages of that peer are dropped. */
void rdzv__send(struct peer *p, const struct rdzv_msg *m)
{
    int err;

    if (p == NULL || p->closing || p->send_err != 0)
        return;
    err = rdzv_conn_send(&p->conn, m);
    if (err == 0 || err == -EINVAL) /* -EINVAL: this server built a bad message; not the peer's */
        return;
    p->send_err = err;
    rdzv__peer_arm(p);
}

/* Sends ERROR and closes after it was flushed: the protocol says the sender of ERROR closes. */
void rdzv__send_error(struct peer *p, uint32_t code, const char *fmt, ...)
{
    struct rdzv_msg m;

    rdzv_msg_init(&m, RDZV_MSG_ERROR);
    va_list ap;

    m.u.error.code = code;
    va_start(ap, fmt);
    vsnprintf(m.u.error.text, sizeof(m.u.error.text), fmt, ap);
    va_end(ap);
    rdzv__send(p, &m);
    rdzv__peer_close(p, 1);
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
    rdzv__pre_unlink(p);
    if (p->debug_slot != NULL) /* a `muster debug` answer waits for it: no one to send it to */
        *p->debug_slot = NULL;
    p->debug_slot = NULL;
    if (p->job != NULL && !p->srv->closing)
        p->srv->member_lost(p->job, p, reason); /* the job layer decides what follows */
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

void rdzv__peer_close(struct peer *p, int flush)
{
    peer_lose(p, flush, "connection closed");
}

/* The server closes: p goes without a flush, even one already under way. */
void rdzv__peer_close_now(struct peer *p)
{
    rdzv__peer_close(p, 0);
    rdzv_conn_close(&p->conn, 0, peer_closed_cb); /* hurry a flushing close */
}

/* The deadline that applies to p now, by state, or 0 for none:
 *  - before HELLO is accepted: accept + handshake_ms, however many bytes trickle in (a
 *    slowloris client sending one byte a second never gets further);
 *  - in a job as an agent that promised heartbeats: last message + its heartbeat timeout;
 *  - in a job otherwise (old agents, attached workers): none. A worker keeps its connection for
 *    the whole run and may be silent for hours between barriers; its job's end drops it.
 *  - in no job (observers, not yet joined, job gone): last message + idle_ms;
 *  - a send failed (rdzv__send): now, whatever the state. */
static uint64_t peer_deadline(const struct peer *p, enum rdzv__event *why)
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

/* rdzv__send failed earlier: the peer goes now (an agent in a job is a lost node). */
static void peer_send_failed(struct peer *p)
{
    char reason[96];

    if (p->send_err == -ENOBUFS) {
        rdzv__peer_event(p, SRV_EV_SEND_QUEUE, "over %zu bytes of replies unread",
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
    enum rdzv__event why;
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
        rdzv__peer_event(p, why, "no HELLO accepted within %u ms of connecting",
                         p->srv->limits.handshake_ms);
        rdzv__peer_close(p, 0);
    } else if (why == SRV_EV_FIRST_BYTE) {
        rdzv__peer_event(p, why, "not a byte within %u ms of connecting",
                         p->srv->limits.first_byte_ms);
        rdzv__peer_close(p, 0);
    } else if (why == SRV_EV_IDLE_TIMEOUT) {
        rdzv__peer_event(p, why, "silent for %u ms while in no job", p->srv->limits.idle_ms);
        rdzv__peer_close(p, 0);
    } else {
        snprintf(reason, sizeof(reason), "no heartbeat for %.1f s", p->hb_timeout_ms / 1000.0);
        peer_lose(p, 0, reason);
    }
}

/* (Re)arms the timer for the state p is in now; called on every change of state. */
void rdzv__peer_arm(struct peer *p)
{
    enum rdzv__event why;
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
void rdzv__peer_heartbeat_start(struct peer *p, const struct rdzv_join *j)
{
    if (j->keep_alive_ms > 0) {
        p->hb_timeout_ms =
            j->heartbeat_timeout_ms ? j->heartbeat_timeout_ms : RDZV_JOB_HEARTBEAT_TIMEOUT_MS;
        p->keep_alive_ms = j->keep_alive_ms;
    }
    p->gap_max_ms = 0;
    rdzv__peer_arm(p);
}

/* The address the connection came from, without port; IPv6 without brackets, and an IPv4
 * client of a dual-stack listener ("::ffff:10.0.0.1") as plain IPv4 so peers can use it. */
void rdzv__tcp_addr(const uv_tcp_t *tcp, char *buf, size_t len)
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

void rdzv__peer_addr(struct peer *p, char *buf, size_t len)
{
    if (p->local_addr != NULL)
        snprintf(buf, len, "%s", p->local_addr);
    else
        rdzv__tcp_addr(&p->conn.tcp, buf, len);
}

/* --- refusals: counted, logged once per peer address --------------------------------------- */
void rdzv__event_metric(enum rdzv__event ev, const char **family, const char **label)
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
void rdzv__log(struct rdzv_server *srv, const char *fmt, ...)
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
static int log_first(struct rdzv_server *srv, enum rdzv__event ev, const char *addr)
{
    struct rdzv__logged *e = NULL;

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

static void event_va(struct rdzv_server *srv, enum rdzv__event ev, const char *addr,
                     const char *fmt, va_list ap)
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
    rdzv__event_metric(ev, &family, &label);
    rdzv__log(srv, "refused %s: %s: %s (counted in %s; not logged again for this address)", addr,
              label, text, family);
}

void rdzv__event(struct rdzv_server *srv, enum rdzv__event ev, const char *addr, const char *fmt,
                 ...)
{
    va_list ap;

    va_start(ap, fmt);
    event_va(srv, ev, addr, fmt, ap);
    va_end(ap);
}

/* A KV_REPLY LIMIT (rdzv__kv_reply): over the job's own quota, or over the server's total when
 * the shared pool refused it just now. */
void rdzv__kv_limit_event(struct peer *p)
{
    struct rdzv_server *srv = p->srv;

    if (srv->kv_pool.refused != srv->kv_pool_refused) {
        srv->kv_pool_refused = srv->kv_pool.refused;
        rdzv__peer_event(p, SRV_EV_KV_TOTAL,
                         "KV_PUT over the %zu bytes of KV data the server "
                         "holds for all jobs",
                         srv->limits.kv_max_total_bytes);
        return;
    }
    rdzv__peer_event(p, SRV_EV_KV_QUOTA, "KV_PUT over the job's quota of keys or bytes");
}

void rdzv__peer_event(struct peer *p, enum rdzv__event ev, const char *fmt, ...)
{
    char addr[INET6_ADDRSTRLEN];
    va_list ap;

    /* A flood repeats one refusal per message: 200,000 KV_GETs over the cap spent 15 % of the
     * server's loop in getpeername and formatting the address only to find it logged already. */
    if ((unsigned)ev < 64 && (p->ev_seen & (UINT64_C(1) << ev)) != 0) {
        p->srv->stats.events[ev]++;
        p->srv->stats.log_suppressed++;
        return;
    }
    if ((unsigned)ev < 64)
        p->ev_seen |= UINT64_C(1) << ev;
    rdzv__peer_addr(p, addr, sizeof(addr));
    va_start(ap, fmt);
    event_va(p->srv, ev, addr, fmt, ap);
    va_end(ap);
}

/* --- KV replies ------------------------------------------------------------------------- */

/* A KV_REPLY LIMIT: which limit, from the store that gave it (p's job's). Held-request limits
 * are counted here; quotas of keys and bytes by rdzv__kv_limit_event(). */
static void kv_limit_event(struct peer *p)
{
    const struct rdzv_limits *l = &p->srv->limits;
    enum rdzv_kv_refusal why = RDZV_KV_REFUSED_QUOTA;
    const struct rdzv_kv_pool *pool = NULL;

    if (p->kvjob != NULL)
        why = rdzv_kv_last_refusal(p->kvjob->kv, &pool);
    /* a team's own pool (scope.h) refused: its share, not the server's, is full */
    if ((why == RDZV_KV_REFUSED_POOL_HELD || why == RDZV_KV_REFUSED_POOL_BYTES) &&
        p->kvjob->scope != NULL && pool == &p->kvjob->scope->kv) {
        rdzv__peer_event(p, SRV_EV_CRED_KV,
                         "KV request over the %s of credential job:%s (%zu bytes, %zu held)",
                         why == RDZV_KV_REFUSED_POOL_HELD ? "waiting requests" : "KV bytes",
                         p->kvjob->scope->scope, pool->max_bytes, pool->max_held);
        return;
    }
    switch (why) {
    case RDZV_KV_REFUSED_HELD_PEER:
        rdzv__peer_event(p, SRV_EV_KV_HELD_CONN,
                         "KV request held over the %u waiting requests of one connection",
                         l->kv_max_held_per_conn);
        break;
    case RDZV_KV_REFUSED_HELD:
        rdzv__peer_event(p, SRV_EV_KV_HELD_JOB,
                         "KV request held over the %zu waiting requests of job %s",
                         rdzv_kv_held(p->kvjob->kv), p->kvjob->job->id);
        break;
    case RDZV_KV_REFUSED_POOL_HELD:
        rdzv__peer_event(p, SRV_EV_KV_HELD_TOTAL,
                         "KV request held over the %u waiting requests of all jobs",
                         l->kv_max_held_total);
        break;
    default:
        rdzv__kv_limit_event(p);
        break;
    }
}

/* The store's reply callback (ctx = the server): one KV_REPLY. The message is static because
 * it is ~130 KB; replies are never sent from within another reply. */
void rdzv__kv_reply(void *ctx, void *peer, uint32_t req_id, enum rdzv_kv_status status,
                    const uint8_t *value, uint32_t len)
{
    static struct rdzv_msg m;

    (void)ctx;
    if (status == RDZV_KV_LIMIT)
        kv_limit_event(peer);
    m.type = RDZV_MSG_KV_REPLY;
    m.u.kv.req_id = req_id;
    m.u.kv.wait_ms = 0;
    m.u.kv.count = 0;
    m.u.kv.status = (uint8_t)status;
    m.u.kv.key[0] = '\0';
    m.u.kv.value_len = len;
    if (len > 0)
        memcpy(m.u.kv.value, value, len);
    rdzv__send(peer, &m);
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

/* --- quotas per job credential scope (scope.h) ----------------------------------- */

/* At HELLO: a job credential's connection is charged to its scope, or refused over
 * max_connections_per_credential (then answered and closed). Returns 1 when it may go on. */
int rdzv__scope_admit_peer(struct peer *p)
{
    struct rdzv_server *srv = p->srv;
    struct rdzv__scope *s;

    if (p->cred.kind != RDZV_CRED_JOB || p->scope != NULL)
        return 1; /* operators, observers and workers: only the server-wide caps */
    if (rdzv__scope_get(&srv->scopes, p->cred.scope, &s) < 0) {
        rdzv__send_error(p, RDZV_ERR_PROTOCOL, "server out of memory");
        return 0;
    }
    if (s->connections >= srv->limits.max_connections_per_credential) {
        rdzv__peer_event(p, SRV_EV_CRED_CONNECTIONS,
                         "HELLO while credential job:%s holds %u connections", s->scope,
                         s->connections);
        rdzv__send_error(p, RDZV_ERR_PROTOCOL,
                         "credential job:%s holds %u connections, its limit (muster server "
                         "--max-connections-per-credential)",
                         s->scope, s->connections);
        rdzv__scope_put(&srv->scopes, s);
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
void rdzv__scope_charge_job(struct sjob *sj, struct rdzv__scope *s)
{
    if (s == NULL || sj->scope != NULL)
        return;
    sj->scope = s;
    sj->scope->refs++;
    sj->scope->jobs++;
}
