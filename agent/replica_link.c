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
    for (struct agent_replica_link **p = &l->net->links; *p != NULL; p = &(*p)->next)
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
    l->owner = NULL;
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
    if (l->owner != NULL)
        l->net->cbs.failed(l->net->data, l, why);
    agent_replica_link_close(l);
}

static void on_tick(uv_timer_t *t)
{
    struct agent_replica_net *n = t->data;
    uint64_t now = uv_now(t->loop);
    struct agent_replica_link *l, *next;
    int left = 0;

    for (l = n->links; l != NULL; l = next) {
        next = l->next;
        if (l->closing || l->deadline_ms == 0)
            continue;
        /* (before its TLS starts a conn counts as a plaintext one, "done": not yet) */
        if (l->dialed && l->tls_started && rdzv_conn_handshake_done(&l->conn)) {
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

static struct agent_replica_link *link_new(struct agent_replica_net *n)
{
    struct agent_replica_link *l = calloc(1, sizeof(*l));

    if (l == NULL)
        return NULL;
    l->net = n;
    l->deadline_ms = uv_now(n->loop) + AGENT_REPLICA_LINK_SETUP_MS;
    l->next = n->links;
    n->links = l;
    if (!uv_is_active((uv_handle_t *)&n->tick))
        uv_timer_start(&n->tick, on_tick, TICK_MS, TICK_MS);
    return l;
}

/* --- messages ---------------------------------------------------------------------------- */

static void on_msg(struct rdzv_conn *c, const struct rdzv_msg *m)
{
    struct agent_replica_link *l = c->data;

    if (l->closing)
        return;
    if (l->owner == NULL) {
        /* a sender's connection that has not named its transfer yet: that comes first */
        if (m->type != RDZV_MSG_REPL_ACK || m->u.repl_ack.status != RDZV_REPL_PROGRESS ||
            m->u.repl_ack.offset != 0 ||
            l->net->cbs.named(l->net->data, l, m->u.repl_ack.xfer) != 0)
            agent_replica_link_close(l);
        else
            l->deadline_ms = 0;
        return;
    }
    l->net->cbs.msg(l->net->data, l, m);
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

static unsigned pending_count(const struct agent_replica_net *n)
{
    unsigned count = 0;

    for (const struct agent_replica_link *l = n->links; l != NULL; l = l->next)
        count += !l->closing && l->owner == NULL;
    return count;
}

static void on_connection(uv_stream_t *server, int status)
{
    struct agent_replica_net *n = server->data;
    struct agent_replica_link *l;
    int crowded = pending_count(n) >= AGENT_REPLICA_LINK_PENDING_MAX;

    if (status < 0 || (l = link_new(n)) == NULL)
        return;
    if (rdzv_conn_init(n->loop, &l->conn, on_msg, on_error, l) != 0) {
        agent_replica_link_close(l);
        return;
    }
    l->conn_open = 1;
    if (uv_accept(server, (uv_stream_t *)&l->conn.tcp) != 0 || crowded || n->serve_tls == NULL) {
        agent_replica_link_close(l); /* a crowd of silent connections waits its turn: closed */
        return;
    }
    rdzv_tls_hold(n->serve_tls);
    l->tls = n->serve_tls;
    if (rdzv_conn_start_tls(&l->conn, l->tls, 1) != 0)
        agent_replica_link_close(l);
}

static int listen_any(struct agent_replica_net *n)
{
    struct sockaddr_in6 a6;
    struct sockaddr_in a4;
    struct sockaddr_storage ss;
    int len = sizeof(ss), err, port = (int)n->bind_port;

    uv_tcp_init(n->loop, &n->listener);
    n->listener.data = n;
    n->listening = 1;
    /* the numeric address this node's JOIN names (--local-addr), which is where receivers
     * connect; else every address, v6 and v4 where the host has v6, else v4 only */
    if (uv_ip4_addr(n->bind_addr, port, &a4) == 0) {
        err = uv_tcp_bind(&n->listener, (struct sockaddr *)&a4, 0);
    } else if (uv_ip6_addr(n->bind_addr, port, &a6) == 0) {
        err = uv_tcp_bind(&n->listener, (struct sockaddr *)&a6, 0);
    } else {
        uv_ip6_addr("::", port, &a6);
        uv_ip4_addr("0.0.0.0", port, &a4);
        err = uv_tcp_bind(&n->listener, (struct sockaddr *)&a6, 0);
        if (err != 0)
            err = uv_tcp_bind(&n->listener, (struct sockaddr *)&a4, 0);
    }
    if (err == 0)
        err = uv_listen((uv_stream_t *)&n->listener, AGENT_REPLICA_LINK_PENDING_MAX, on_connection);
    if (err == 0)
        err = uv_tcp_getsockname(&n->listener, (struct sockaddr *)&ss, &len);
    if (err != 0)
        return err;
    n->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                             : ((struct sockaddr_in *)&ss)->sin_port);
    return 0;
}

int agent_replica_link_serve(struct agent_replica_net *n, const uint8_t key[32])
{
    struct rdzv_tls *tls;
    int rc;

    if (!n->listening && (rc = listen_any(n)) != 0)
        return rc;
    if (n->port == 0)
        return -EADDRNOTAVAIL; /* the socket failed before */
    if ((rc = link_tls(key, 1, &tls)) != 0)
        return rc;
    agent_replica_link_unserve(n); /* connections naming nothing were for the previous key */
    n->serve_tls = tls;
    return n->port;
}

void agent_replica_link_unserve(struct agent_replica_net *n)
{
    struct agent_replica_link *l, *next;

    for (l = n->links; l != NULL; l = next) {
        next = l->next;
        if (l->owner == NULL && l->tls == n->serve_tls)
            agent_replica_link_close(l); /* may free l */
    }
    rdzv_tls_free(n->serve_tls);
    n->serve_tls = NULL;
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
        hello.u.repl_ack.xfer = l->name;
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

int agent_replica_link_connect(struct agent_replica_net *n, const char *host, unsigned port,
                               const uint8_t key[32], uint32_t name, void *owner,
                               struct agent_replica_link **out)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct agent_replica_link *l = link_new(n);
    struct sockaddr_in6 a6;
    struct sockaddr_in a4;
    char service[8];
    int err;

    if (l == NULL)
        return -ENOMEM;
    l->owner = owner;
    l->dialed = 1;
    l->name = name;
    l->port = (uint16_t)port;
    if ((err = link_tls(key, 0, &l->tls)) != 0 ||
        (err = rdzv_conn_init(n->loop, &l->conn, on_msg, on_error, l)) != 0) {
        l->owner = NULL;
        agent_replica_link_close(l);
        return err;
    }
    l->conn_open = 1;
    if (uv_ip4_addr(host, (int)port, &a4) == 0) {
        err = connect_to(l, (struct sockaddr *)&a4);
    } else if (uv_ip6_addr(host, (int)port, &a6) == 0) {
        err = connect_to(l, (struct sockaddr *)&a6);
    } else {
        snprintf(service, sizeof(service), "%u", port);
        l->gai.data = l;
        err = uv_getaddrinfo(n->loop, &l->gai, gai_cb, host, service, &hints);
        l->gai_pending = err == 0;
    }
    if (err != 0) {
        l->owner = NULL;
        agent_replica_link_close(l);
        return err;
    }
    *out = l;
    return 0;
}

/* --- everything at once -------------------------------------------------------------------- */

void agent_replica_net_init(uv_loop_t *loop, struct agent_replica_net *n,
                            const struct agent_replica_link_cbs *cbs, void *data)
{
    memset(n, 0, sizeof(*n));
    n->loop = loop;
    n->cbs = *cbs;
    n->data = data;
    uv_timer_init(loop, &n->tick);
    n->tick.data = n;
}

void agent_replica_net_bind(struct agent_replica_net *n, const char *addr, unsigned port)
{
    snprintf(n->bind_addr, sizeof(n->bind_addr), "%s", addr != NULL ? addr : "");
    n->bind_port = port;
}

void agent_replica_net_close(struct agent_replica_net *n)
{
    struct agent_replica_link *l, *next;

    for (l = n->links; l != NULL; l = next) {
        next = l->next;
        agent_replica_link_close(l); /* may free l at once */
    }
    if (n->listening)
        uv_close((uv_handle_t *)&n->listener, NULL);
    n->listening = 0;
    rdzv_tls_free(n->serve_tls);
    n->serve_tls = NULL;
    uv_close((uv_handle_t *)&n->tick, NULL);
}
