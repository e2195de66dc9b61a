/* The key-value store of one job for its workers: put, get with wait, barrier. Pure: no I/O and
 * no libuv. Callers pass the monotonic time in ms; replies go out through one callback, called
 * synchronously from the function that decided them. The server arms a timer for
 * rdzv_kv_deadline() and calls rdzv_kv_tick() when it fires.
 *
 * Scope: one store per job, holding the keys of one round (rdzv_kv_round()). Requesters are
 * opaque `peer` pointers (the server's connections); a peer may have up to max_held_per_peer
 * requests held. No operation walks every held request: each costs O(log held) or the
 * requests it answers. */
#ifndef MUSTER_RDZV_KV_H
#define MUSTER_RDZV_KV_H

#include <stddef.h>
#include <stdint.h>

#include "kvpool.h"
#include "message.h"

#define RDZV_KV_MAX_KEYS 65536u       /* default key quota per job */
#define RDZV_KV_MAX_BYTES (64u << 20) /* default quota of key + value bytes per job */

/* What one key costs the shared pool beyond its key and value bytes: the entry, two heap
 * blocks and the bucket slot. Charging it makes a flood of empty values count too. */
#define RDZV_KV_KEY_OVERHEAD 64u

struct rdzv_kv_store;

/* Held requests (gets waiting for a key, barrier arrivals) of one job and of one of its
 * connections. A torch TCPStore client has at most a few waits in flight per process and
 * libmuster one per worker connection: 64 per connection is far above either, and the job's
 * RDZV_KV_MAX_HELD (plus what the caller adds per worker, rdzv_kv_set_max_held()) bounds a job
 * of many connections. Past them, a request that would wait gets LIMIT at once (200,000
 * held GETs of one job stalled the server for every job). */
#define RDZV_KV_MAX_HELD 4096u
#define RDZV_KV_MAX_HELD_PER_PEER 64u

struct rdzv_kv_limits {
    size_t max_keys;           /* 0 = RDZV_KV_MAX_KEYS */
    size_t max_bytes;          /* 0 = RDZV_KV_MAX_BYTES */
    struct rdzv_kv_pool *pool; /* borrowed; NULL: none */
    size_t max_held;           /* held requests of the store; 0 = RDZV_KV_MAX_HELD */
    size_t max_held_per_peer;  /* held requests of one peer; 0 = RDZV_KV_MAX_HELD_PER_PEER */
};

/* Why the store's last LIMIT reply was given (rdzv_kv_last_refusal()). */
enum rdzv_kv_refusal {
    RDZV_KV_REFUSED_NONE,
    RDZV_KV_REFUSED_QUOTA,      /* the store's own key or byte quota */
    RDZV_KV_REFUSED_POOL_BYTES, /* a pool's max_bytes */
    RDZV_KV_REFUSED_HELD_PEER,  /* the peer has max_held_per_peer requests held */
    RDZV_KV_REFUSED_HELD,       /* the store has max_held requests held */
    RDZV_KV_REFUSED_POOL_HELD,  /* a pool's max_held */
};

/* One reply for request req_id of peer. value/len only with RDZV_KV_OK for a get (else NULL,
 * 0); value is borrowed for the duration of the call. The callback must not call into the
 * store, except rdzv_kv_last_refusal() (to tell why a LIMIT). */
typedef void (*rdzv_kv_reply_cb)(void *ctx, void *peer, uint32_t req_id, enum rdzv_kv_status status,
                                 const uint8_t *value, uint32_t len);

/* Creates an empty store for round `round`. limits may be NULL (defaults); cb and ctx are
 * borrowed. Returns 0 or -ENOMEM; *out set on success only. */
int rdzv_kv_new(const struct rdzv_kv_limits *limits, uint32_t round, rdzv_kv_reply_cb cb, void *ctx,
                struct rdzv_kv_store **out);

/* Frees the store and every key. Held requests get no reply (call rdzv_kv_set_round() or
 * rdzv_kv_forget() first to answer them). Accepts NULL. */
void rdzv_kv_free(struct rdzv_kv_store *kv);

/* The round whose keys the store holds. */
uint32_t rdzv_kv_round(const struct rdzv_kv_store *kv);

/* Moves to another round: every held request gets STALE, every key is dropped. */
void rdzv_kv_set_round(struct rdzv_kv_store *kv, uint32_t round);

/* Stores key (copied; ≤ RDZV_KEY_MAX) = value (len ≤ RDZV_VALUE_MAX, copied), replacing an old
 * value. Replies OK (and answers every held get of the key), or LIMIT when the store's quota or
 * the pool's would be exceeded (the pool's: pool->refused grows by one before the reply). Returns
 * 0, -EINVAL (over-long key or value: no reply) or -ENOMEM (no reply). */
int rdzv_kv_put(struct rdzv_kv_store *kv, void *peer, uint32_t req_id, const char *key,
                const uint8_t *value, uint32_t len);

/* Replies OK with the value when key exists, NOT_FOUND when not and wait_ms == 0; otherwise
 * holds the request until a put of key (OK) or now_ms + wait_ms (TIMEOUT), or replies LIMIT
 * when holding it would go over a held-request limit. Returns 0 or -ENOMEM (no reply). */
int rdzv_kv_get(struct rdzv_kv_store *kv, void *peer, uint32_t req_id, const char *key,
                uint32_t wait_ms, uint64_t now_ms);

/* Arrives at barrier `name` of `count` participants (the first arrival's count decides; a
 * count of 0 or 1 completes at once). When count arrivals are held, all get OK together; an
 * arrival held past now_ms + wait_ms gets TIMEOUT and stops counting. wait_ms == 0 waits
 * without a deadline. An arrival that would have to wait over a held-request limit gets LIMIT
 * and does not count. Returns 0 or -ENOMEM (no reply). */
int rdzv_kv_barrier(struct rdzv_kv_store *kv, void *peer, uint32_t req_id, const char *name,
                    uint32_t count, uint32_t wait_ms, uint64_t now_ms);

/* Drops every request held for peer (its connection closed), without replies. Costs the
 * peer's held requests, not the store's. */
void rdzv_kv_forget(struct rdzv_kv_store *kv, const void *peer);

/* The earliest deadline of a held request (monotonic ms), or -1 for none. O(1): deadlines are
 * kept in a heap. */
int64_t rdzv_kv_deadline(const struct rdzv_kv_store *kv);

/* Answers TIMEOUT to every held request whose deadline is <= now_ms, O(log n) each. */
void rdzv_kv_tick(struct rdzv_kv_store *kv, uint64_t now_ms);

/* Replaces the store's max_held (0: RDZV_KV_MAX_HELD); requests already held stay. */
void rdzv_kv_set_max_held(struct rdzv_kv_store *kv, size_t max_held);

/* Why the last LIMIT reply was given, and the pool that refused it (*pool, may be NULL; set
 * to NULL unless a pool did). */
enum rdzv_kv_refusal rdzv_kv_last_refusal(const struct rdzv_kv_store *kv,
                                          const struct rdzv_kv_pool **pool);

/* Requests held now, of the store and of one peer. */
size_t rdzv_kv_held(const struct rdzv_kv_store *kv);
size_t rdzv_kv_held_of(const struct rdzv_kv_store *kv, const void *peer);

/* Keys held, and their key + value bytes. */
size_t rdzv_kv_keys(const struct rdzv_kv_store *kv);
size_t rdzv_kv_bytes(const struct rdzv_kv_store *kv);

#endif
