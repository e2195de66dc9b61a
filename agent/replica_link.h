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
 * Internal to replica.c: everything runs on the agent's loop. */
#ifndef MUSTER_AGENT_REPLICA_LINK_H
#define MUSTER_AGENT_REPLICA_LINK_H

#include <stdint.h>

#include "conn.h"
#include "replica.h"

#define AGENT_REPLICA_LINK_SETUP_MS 5000  /* connect + handshake + naming the transfer */
#define AGENT_REPLICA_LINK_PENDING_MAX 16 /* accepted connections not yet naming a transfer */

struct agent_replica_link {
    struct rdzv_conn conn; /* data: this link */
    struct agent_replica *r;
    struct rdzv_tls *tls;          /* held: the key's configuration */
    struct agent_replica_out *out; /* sender: the receiver it serves, once named */
    struct agent_replica_in *in;   /* receiver: the copy it carries */
    uint64_t deadline_ms;          /* set-up must be done by then (loop time); 0: it is */
    uint16_t port;                 /* receiver: the sender's port, for messages */
    int conn_open;                 /* conn initialised and its close callback not yet run */
    int tls_started;               /* receiver: connected, the handshake under way or done */
    int closing;
    int gai_pending, connect_pending; /* a request whose callback has yet to run */
    uv_getaddrinfo_t gai;
    uv_connect_t connect;
    struct agent_replica_link *next; /* r->links */
};

/* Sender: serves this checkpoint's copies under a new key (connections of the previous one are
 * closed). Opens the listening socket on first use (every address, an ephemeral port). Returns
 * the port, or a negative errno: then the copies go through the relay. */
int agent_replica_link_serve(struct agent_replica *r, const uint8_t key[32]);

/* Sender: every copy ended: the key is dropped and connections not naming a copy are closed
 * (the listening socket stays, refusing everyone until the next checkpoint). */
void agent_replica_link_unserve(struct agent_replica *r);

/* Receiver: connects to the sender of in as b names it (host, port, key) and names the transfer
 * once the handshake is done. Returns 0 or a negative errno (nothing started). */
int agent_replica_link_connect(struct agent_replica *r, struct agent_replica_in *in,
                               const struct rdzv_repl_begin *b);

/* Sends one message on l. Returns 0 or a negative errno (the link is then useless). */
int agent_replica_link_send(struct agent_replica_link *l, const struct rdzv_msg *m);

/* Closes l (its owner, an out or an in, lets go of it first). Accepts NULL. */
void agent_replica_link_close(struct agent_replica_link *l);

/* Closes every link and the listening socket (each frees itself once its handles closed). */
void agent_replica_link_shutdown(struct agent_replica *r);

/* --- what the links call in replica.c ------------------------------------------------------- */

/* Sender: connection l proved the key and names the sender's transfer id; returns 0 when it
 * was bound to that transfer's receiver, -1 (l is then closed) when no transfer waits for it. */
int agent_replica__link_named(struct agent_replica *r, struct agent_replica_link *l, uint32_t xfer);
/* A message on a bound link (the out or in it belongs to: l->out or l->in). */
void agent_replica__link_msg(struct agent_replica *r, struct agent_replica_link *l,
                             const struct rdzv_msg *m);
/* A bound or connecting link failed (why: one line); it is being closed. */
void agent_replica__link_failed(struct agent_replica *r, struct agent_replica_link *l,
                                const char *why);

#endif
