/* The agent's TCPStore: group rank 0's agent serves the key-value store that
 * PyTorch's own c10d TCPStore client speaks to, on MASTER_ADDR:MASTER_PORT, as torchrun's
 * rank-0 agent does (TORCHELASTIC_USE_AGENT_STORE=True). Every worker is then a client, so
 * no worker can take the store away from the others by exiting first (the SIGABRT of
 * "terminate called without an active exception" at the end of good runs), and no worker
 * waits in the client's connect retry for rank 0 to open it.
 *
 * Two dialects, told apart by a connection's first bytes: PyTorch 1.13 (byte 0 is SET) and
 * 2.2+ (every connection starts with VALIDATE: 00 CE F7 85 3C). Requests are parsed
 * incrementally on the agent's loop; nothing blocks. The wire format is documented at the top
 * of store.c.
 *
 * No authentication, as torchrun's: whoever reaches MASTER_ADDR:MASTER_PORT can read and
 * write the workers' keys (docs/SECURITY.md). Every resource a client can use is bounded; a
 * client over a bound is disconnected, counted, and the first of each kind is logged.
 *
 * The process must ignore SIGPIPE (agent.c does): libuv writes without MSG_NOSIGNAL, and a
 * reply to a client that left would otherwise kill the agent. */
#ifndef MUSTER_AGENT_STORE_H
#define MUSTER_AGENT_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define AGENT_STORE_KEY_MAX (8u << 10)          /* as PyTorch 2.6's libuv backend */
#define AGENT_STORE_VALUE_MAX (8u << 20)        /* idem */
#define AGENT_STORE_KEYS_MAX (128u << 10)       /* keys in one CHECK/WAIT/MULTI_* request */
#define AGENT_STORE_REQUEST_MAX (64u << 20)     /* bytes of one request */
#define AGENT_STORE_TOTAL_MAX ((size_t)1 << 30) /* bytes of all keys and values */
#define AGENT_STORE_CONNS_MAX 16384u            /* 1.13 opens 2 per worker process */
#define AGENT_STORE_WAITS_MAX 16u               /* held WAITs of one connection */
#define AGENT_STORE_UNSENT_MAX (64u << 20)      /* replies a client has not read yet */

/* Bounds; agent_store_limits_default() fills PyTorch-compatible ones (the macros above). */
struct agent_store_limits {
    size_t key_max, value_max, keys_max, request_max, total_max, unsent_max;
    unsigned conns_max, waits_max;
};

/* What the store did, for tests and its closing line. */
struct agent_store_stats {
    uint64_t accepted;     /* connections accepted (including those refused over the cap) */
    uint64_t refused;      /* closed at once: too many connections */
    uint64_t over_limit;   /* closed: a key, value, request, total, wait or unsent bound */
    uint64_t bad;          /* closed: unknown query, bad magic, malformed request */
    uint64_t requests;     /* requests served */
    unsigned conns;        /* open now */
    unsigned waits;        /* WAITs held now */
    size_t bytes;          /* bytes of keys and values stored now */
    size_t keys;           /* keys stored now */
    unsigned dialect_seen; /* bit 0: a 1.13 client, bit 1: a 2.x client */
};

struct agent_store;

void agent_store_limits_default(struct agent_store_limits *l);

/* Starts a store listening on host:port (port 0: an ephemeral one, see agent_store_port).
 * host is MASTER_ADDR as the workers get it: a numeric address is bound as is; a name, or an
 * address this machine does not have (a NAT in front of it), falls back to the wildcard, and
 * the fallback is logged. lim may be NULL (defaults; copied). Returns 0 and sets *out, or a
 * negative errno (UV_EADDRINUSE...) with nothing left open. */
int agent_store_new(uv_loop_t *loop, const char *host, unsigned port,
                    const struct agent_store_limits *lim, struct agent_store **out);

/* The port it listens on. */
unsigned agent_store_port(const struct agent_store *s);

/* Borrowed view of the counters (keys and bytes as of this call), valid until the close
 * callback. */
const struct agent_store_stats *agent_store_stats(struct agent_store *s);

/* Drops every key, held WAIT and connection, stops listening (the port is free again when
 * this returns: a store for the next attempt may bind it at once), logs one line of what was
 * refused if anything was, and frees s once every handle closed; then done(data) if not NULL.
 * Accepts NULL (done is then not called). */
void agent_store_close(struct agent_store *s, void (*done)(void *data), void *data);

#endif
