/* The direct link of checkpoint replicas: see replica_link.h. */
#include "replica_link.h"

#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cred.h"
#include "tls.h"

#define LINK_SCOPE "replica" /* the PSK identity's scope: "job:replica" */
#define TICK_MS 250
#define STR_(x) #x
#define STR(x) STR_(x)

static void link_maybe_free(struct agent_replica_link *l);

/* --- life cycle of one link ----------------------------------------------------------------- */

static void unlist(struct agent_replica_link *l)
{
    for (struct agent_replica_link **p = &l->r->links; *p != NULL; p = &(*p)->next)
        if (*p == l) {
            *p = l->next;
            return;
        }
}

static void link_maybe_free(struct agent_replica_link *l)
{
    if (!l->closing || l->conn_open || l->gai_pending || l->connect_pending)
        return;
    unlist(l);
    rdzv_tls_free(l->tls);
    free(l);
}

static void conn_closed(struct rdzv_conn *c)
{
    struct agent_replica_link *l = c->data;

    l->conn_open = 0;
    link_maybe_free(l);
}

void agent_replica_link_close(struct agent_replica_link *l)
{
    if (l == NULL || l->closing)
        return;
    l->closing = 1;
    l->out = NULL;
    l->in = NULL;
    if (l->conn_open)
        rdzv_conn_close(&l->conn, 0, conn_closed);
    else
        link_maybe_free(l);
}

/* The link broke or was refused: its owner hears why (a bound link), then it closes. */
static void link_fail(struct agent_replica_link *l, const char *why)
{
    if (l->closing)
        return;
    if (l->out != NULL || l->in != NULL)
        agent_replica__link_failed(l->r, l, why);
    agent_replica_link_close(l);
}

static void on_tick(uv_timer_t *t)
{
    struct agent_replica *r = t->data;
    uint64_t now = uv_now(t->loop);
    struct agent_replica_link *l, *next;
    int left = 0;

    for (l = r->links; l != NULL; l = next) {
        next = l->next;
        if (l->closing || l->deadline_ms == 0)
            continue;
        /* (before its TLS starts a conn counts as a plaintext one, "done": not yet) */
        if (l->in != NULL && l->tls_started && rdzv_conn_handshake_done(&l->conn)) {
            l->deadline_ms = 0; /* the receiver's link is up */
            continue;
        }
        if (now >= l->deadline_ms)
            link_fail(l, "the link was not up within " STR(AGENT_REPLICA_LINK_SETUP_MS) " ms");
        else
            left = 1;
    }
    if (!left)
        uv_timer_stop(t);
}

static struct agent_replica_link *link_new(struct agent_replica *r)
{
    struct agent_replica_link *l = calloc(1, sizeof(*l));

    if (l == NULL)
        return NULL;
    l->r = r;
    l->deadline_ms = uv_now(r->loop) + AGENT_REPLICA_LINK_SETUP_MS;
    l->next = r->links;
    r->links = l;
    if (!uv_is_active((uv_handle_t *)&r->tick))
        uv_timer_start(&r->tick, on_tick, TICK_MS, TICK_MS);
    return l;
}

/* --- messages ---------------------------------------------------------------------------- */

static void on_msg(struct rdzv_conn *c, const struct rdzv_msg *m)
{
    struct agent_replica_link *l = c->data;

    if (l->closing)
        return;
    if (l->out == NULL && l->in == NULL) {
        /* a sender's connection that has not named its transfer yet: that comes first */
        if (m->type != RDZV_MSG_REPL_ACK || m->u.repl_ack.status != RDZV_REPL_PROGRESS ||
            m->u.repl_ack.offset != 0 ||
            agent_replica__link_named(l->r, l, m->u.repl_ack.xfer) != 0)
            agent_replica_link_close(l);
        else
            l->deadline_ms = 0;
        return;
    }
    agent_replica__link_msg(l->r, l, m);
}

static void on_error(struct rdzv_conn *c, int err)
{
    struct agent_replica_link *l = c->data;
    const char *tls = rdzv_conn_tls_error(c);
    char why[256];

    if (tls[0] != '\0')
        snprintf(why, sizeof(why), "%s", tls);
    else
        snprintf(why, sizeof(why), "%s",
                 err == UV_EOF            ? "the peer closed the link"
                 : err < -4095 || err > 0 ? "protocol error"
                                          : uv_strerror(err));
    link_fail(l, why);
}

int agent_replica_link_send(struct agent_replica_link *l, const struct rdzv_msg *m)
{
    if (l->closing)
        return -ENOTCONN;
    return rdzv_conn_send(&l->conn, m);
}

/* A TLS configuration keyed by key: the identity "job:replica" (rendezvous/cred.h string form,
 * so tls.c parses it like any job credential). */
static int link_tls(const uint8_t key[32], int is_server, struct rdzv_tls **out)
{
    struct rdzv_cred c = {.kind = RDZV_CRED_JOB, .scope = LINK_SCOPE};
    char text[RDZV_CRED_TEXT_MAX + 1], err[160];
    struct rdzv_tls_opts o = {.token = text, .no_forward_secrecy = 1, .bulk = 1};
    int rc;

    memcpy(c.key, key, sizeof(c.key));
    rc = rdzv_cred_format(&c, text, sizeof(text));
    rdzv_cred_wipe(&c);
    if (rc == 0)
        rc = rdzv_tls_new(&o, is_server, out, err, sizeof(err));
    memset(text, 0, sizeof(text));
    return rc;
}

/* --- sender: the listening socket --------------------------------------------------------- */

static unsigned pending_count(const struct agent_replica *r)
{
    unsigned n = 0;

    for (const struct agent_replica_link *l = r->links; l != NULL; l = l->next)
        n += !l->closing && l->out == NULL && l->in == NULL;
    return n;
}

static void on_connection(uv_stream_t *server, int status)
{
    struct agent_replica *r = server->data;
    struct agent_replica_link *l;
    int crowded = pending_count(r) >= AGENT_REPLICA_LINK_PENDING_MAX;

    if (status < 0 || (l = link_new(r)) == NULL)
        return;
    if (rdzv_conn_init(r->loop, &l->conn, on_msg, on_error, l) != 0) {
        agent_replica_link_close(l);
        return;
    }
    l->conn_open = 1;
    if (uv_accept(server, (uv_stream_t *)&l->conn.tcp) != 0 || crowded || r->serve_tls == NULL) {
        agent_replica_link_close(l); /* a crowd of silent connections waits its turn: closed */
        return;
    }
    rdzv_tls_hold(r->serve_tls);
    l->tls = r->serve_tls;
    if (rdzv_conn_start_tls(&l->conn, l->tls, 1) != 0)
        agent_replica_link_close(l);
}

static int listen_any(struct agent_replica *r)
{
    struct sockaddr_in6 a6;
    struct sockaddr_in a4;
    struct sockaddr_storage ss;
    int n = sizeof(ss), err, port = (int)r->bind_port;

    uv_tcp_init(r->loop, &r->listener);
    r->listener.data = r;
    r->listening = 1;
    /* the numeric address this node's JOIN names (--local-addr), which is where receivers
     * connect; else every address, v6 and v4 where the host has v6, else v4 only */
    if (uv_ip4_addr(r->bind_addr, port, &a4) == 0) {
        err = uv_tcp_bind(&r->listener, (struct sockaddr *)&a4, 0);
    } else if (uv_ip6_addr(r->bind_addr, port, &a6) == 0) {
        err = uv_tcp_bind(&r->listener, (struct sockaddr *)&a6, 0);
    } else {
        uv_ip6_addr("::", port, &a6);
        uv_ip4_addr("0.0.0.0", port, &a4);
        err = uv_tcp_bind(&r->listener, (struct sockaddr *)&a6, 0);
        if (err != 0)
            err = uv_tcp_bind(&r->listener, (struct sockaddr *)&a4, 0);
    }
    if (err == 0)
        err = uv_listen((uv_stream_t *)&r->listener, AGENT_REPLICA_LINK_PENDING_MAX, on_connection);
    if (err == 0)
        err = uv_tcp_getsockname(&r->listener, (struct sockaddr *)&ss, &n);
    if (err != 0)
        return err;
    r->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                             : ((struct sockaddr_in *)&ss)->sin_port);
    return 0;
}

int agent_replica_link_serve(struct agent_replica *r, const uint8_t key[32])
{
    struct rdzv_tls *tls;
    int rc;

    if (!r->listening && (rc = listen_any(r)) != 0)
        return rc;
    if (r->port == 0)
        return -EADDRNOTAVAIL; /* the socket failed before */
    if ((rc = link_tls(key, 1, &tls)) != 0)
        return rc;
    agent_replica_link_unserve(r); /* connections naming nothing were for the previous key */
    r->serve_tls = tls;
    return r->port;
}

void agent_replica_link_unserve(struct agent_replica *r)
{
    struct agent_replica_link *l, *next;

    for (l = r->links; l != NULL; l = next) {
        next = l->next;
        if (l->out == NULL && l->in == NULL && l->tls == r->serve_tls)
            agent_replica_link_close(l); /* may free l */
    }
    rdzv_tls_free(r->serve_tls);
    r->serve_tls = NULL;
}

/* --- receiver: connecting ------------------------------------------------------------------ */

static void connect_cb(uv_connect_t *req, int status)
{
    struct agent_replica_link *l = req->data;
    struct rdzv_msg hello;
    char why[160];
    int err = status;

    l->connect_pending = 0;
    if (l->closing) {
        link_maybe_free(l);
        return;
    }
    if (err == 0)
        err = rdzv_conn_start_tls(&l->conn, l->tls, 0);
    l->tls_started = err == 0;
    if (err == 0) {
        /* names the transfer; queued until the handshake proved the key */
        rdzv_msg_init(&hello, RDZV_MSG_REPL_ACK);
        hello.u.repl_ack.xfer = l->in->link_id;
        hello.u.repl_ack.status = RDZV_REPL_PROGRESS;
        err = rdzv_conn_send(&l->conn, &hello);
    }
    if (err != 0) {
        snprintf(why, sizeof(why), "cannot connect to port %u: %s", l->port,
                 err < -4095 || err > 0 ? strerror(-err) : uv_strerror(err));
        link_fail(l, why);
    }
}

static int connect_to(struct agent_replica_link *l, const struct sockaddr *sa)
{
    int err;

    l->connect.data = l;
    err = uv_tcp_connect(&l->connect, &l->conn.tcp, sa, connect_cb);
    if (err == 0)
        l->connect_pending = 1;
    return err;
}

static void gai_cb(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    struct agent_replica_link *l = req->data;
    char why[320];
    int err = status;

    l->gai_pending = 0;
    if (!l->closing && err == 0)
        err = connect_to(l, res->ai_addr);
    uv_freeaddrinfo(res);
    if (l->closing) {
        link_maybe_free(l);
    } else if (err != 0) {
        snprintf(why, sizeof(why), "cannot reach the sender: %s", uv_strerror(err));
        link_fail(l, why);
    }
}

int agent_replica_link_connect(struct agent_replica *r, struct agent_replica_in *in,
                               const struct rdzv_repl_begin *b)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct agent_replica_link *l = link_new(r);
    struct sockaddr_in6 a6;
    struct sockaddr_in a4;
    char port[8];
    int err;

    if (l == NULL)
        return -ENOMEM;
    l->in = in;
    l->port = (uint16_t)b->port;
    if ((err = link_tls(b->key, 0, &l->tls)) != 0 ||
        (err = rdzv_conn_init(r->loop, &l->conn, on_msg, on_error, l)) != 0) {
        l->in = NULL;
        agent_replica_link_close(l);
        return err;
    }
    l->conn_open = 1;
    if (uv_ip4_addr(b->host, (int)b->port, &a4) == 0) {
        err = connect_to(l, (struct sockaddr *)&a4);
    } else if (uv_ip6_addr(b->host, (int)b->port, &a6) == 0) {
        err = connect_to(l, (struct sockaddr *)&a6);
    } else {
        snprintf(port, sizeof(port), "%u", (unsigned)b->port);
        l->gai.data = l;
        err = uv_getaddrinfo(r->loop, &l->gai, gai_cb, b->host, port, &hints);
        l->gai_pending = err == 0;
    }
    if (err != 0) {
        l->in = NULL;
        agent_replica_link_close(l);
        return err;
    }
    in->link = l;
    return 0;
}

/* --- everything at once -------------------------------------------------------------------- */

void agent_replica_link_shutdown(struct agent_replica *r)
{
    struct agent_replica_link *l, *next;

    for (l = r->links; l != NULL; l = next) {
        next = l->next;
        agent_replica_link_close(l); /* may free l at once */
    }
    if (r->listening)
        uv_close((uv_handle_t *)&r->listener, NULL);
    r->listening = 0;
    rdzv_tls_free(r->serve_tls);
    r->serve_tls = NULL;
}
