/* The direct link of checkpoint replicas (agent/replica.h): the sending agent serves the copy
 * on a TCP port of its own and each receiver connects there, so the chunks go agent to agent
 * and never through the rendezvous server (which only authorises the transfer and passes the
 * link's address and key in REPL_BEGIN).
 *
 * Trust: each checkpoint the sender offers gets a fresh random 32-byte key, sent to the server
 * and from there to the chosen receivers inside their TLS control connections and never written
 * anywhere; the link is TLS 1.2 with that key as pre-shared key (rendezvous/tls.h, identity
 * "job:replica", ChaCha20-Poly1305), so only the chosen receivers can finish a handshake; a
 * receiver then names its transfer (a REPL_ACK carrying the sender's transfer id, offset 0).
 * A connection that does neither within AGENT_REPLICA_LINK_SETUP_MS, sends anything else, or
 * comes beyond AGENT_REPLICA_LINK_PENDING_MAX waiting ones, is closed. A receiver that cannot
 * set its link up in time asks for the server's relay instead (REPL_ACK RELAY), so a firewall
 * or a flood on the port costs speed, never the copy.
 *
 * Layering: this is the transport (connections, framing, TLS, the set-up deadline and the crowd
 * limit) and knows nothing of transfers: a link carries an opaque owner, and the transfer
 * engine above (replica.c) hears of links only through the callbacks it registers here; it
 * calls downward, never the other way round (docs/ARCHITECTURE.md "Layers").
 * Everything runs on the agent's loop. */
#ifndef MUSTER_AGENT_REPLICA_LINK_H
#define MUSTER_AGENT_REPLICA_LINK_H

#include <stdint.h>
#include <uv.h>

#include "conn.h"
#include "message.h"

#define AGENT_REPLICA_LINK_SETUP_MS 5000  /* connect + handshake + naming the transfer */
#define AGENT_REPLICA_LINK_PENDING_MAX 16 /* accepted connections not yet naming a transfer */

struct agent_replica_link;
struct rdzv_tls;

/* What the transfer engine hears of its links (data: agent_replica_net_init's). */
struct agent_replica_link_cbs {
    /* Sender: accepted connection l proved the key and names transfer id name. Returns 0
     * once it bound l (l->owner: what l carries, set before it sends anything on l), -1
     * when no transfer waits for it (l is then closed). */
    int (*named)(void *data, struct agent_replica_link *l, uint32_t name);
    /* A message on a bound link (l->owner). */
    void (*msg)(void *data, struct agent_replica_link *l, const struct rdzv_msg *m);
    /* A bound or connecting link failed (why: one line); it is closed once this returns. */
    void (*failed)(void *data, struct agent_replica_link *l, const char *why);
};

struct agent_replica_link {
    struct rdzv_conn conn; /* data: this link */
    struct agent_replica_net *net;
    struct rdzv_tls *tls; /* held: the key's configuration */
    void *owner;          /* the engine's: what the link carries; NULL: not bound (yet) */
    int dialed;           /* receiver: this end connected (else it was accepted) */
    uint32_t name;        /* receiver: the transfer id it names once the key is proved */
    uint64_t deadline_ms; /* set-up must be done by then (loop time); 0: it is */
    uint16_t port;        /* receiver: the sender's port, for messages */
    int conn_open;        /* conn initialised and its close callback not yet run */
    int tls_started;      /* receiver: connected, the handshake under way or done */
    int closing;
    int gai_pending, connect_pending; /* a request whose callback has yet to run */
    uv_getaddrinfo_t gai;
    uv_connect_t connect;
    struct agent_replica_link *next; /* net->links */
};

struct agent_replica_net { /* one agent's links: the listening socket and every connection */
    uv_loop_t *loop;
    uv_tcp_t listener;
    int listening;
    uint16_t port;                    /* the listener's, 0 until it listens */
    struct rdzv_tls *serve_tls;       /* the key of the checkpoint being sent */
    struct agent_replica_link *links; /* every link not yet freed */
    uv_timer_t tick;                  /* set-up deadlines */
    char bind_addr[64];               /* listens there ("" every address) */
    unsigned bind_port;               /* --replicate-port; 0: ephemeral */
    struct agent_replica_link_cbs cbs;
    void *data;
};

/* Sets n up on loop (nothing listens yet); copies cbs. */
void agent_replica_net_init(uv_loop_t *loop, struct agent_replica_net *n,
                            const struct agent_replica_link_cbs *cbs, void *data);

/* Listens on addr (numeric; NULL, "" or a host name: every address), on port (0: ephemeral),
 * from the first serve on. */
void agent_replica_net_bind(struct agent_replica_net *n, const char *addr, unsigned port);

/* Sender: serves under a new key (connections of the previous one naming nothing are closed).
 * Opens the listening socket on first use. Returns the port, or a negative errno. */
int agent_replica_link_serve(struct agent_replica_net *n, const uint8_t key[32]);

/* Sender: the key is dropped and connections not naming a transfer are closed (the listening
 * socket stays, refusing everyone until the next serve). */
void agent_replica_link_unserve(struct agent_replica_net *n);

/* Receiver: connects to host:port under key and names transfer id name once the handshake
 * proved the key; the link is bound to owner. Returns 0 (*out: the link) or a negative errno
 * (nothing started). */
int agent_replica_link_connect(struct agent_replica_net *n, const char *host, unsigned port,
                               const uint8_t key[32], uint32_t name, void *owner,
                               struct agent_replica_link **out);

/* Sends one message on l. Returns 0 or a negative errno (the link is then useless). */
int agent_replica_link_send(struct agent_replica_link *l, const struct rdzv_msg *m);

/* Closes l (its owner lets go of it first: no callback comes for it any more). Accepts NULL. */
void agent_replica_link_close(struct agent_replica_link *l);

/* Closes every link, the listening socket and the timer (each link frees itself once its
 * handles closed; n must outlive them, as the loop's handles do). */
void agent_replica_net_close(struct agent_replica_net *n);

#endif
