/* The quota that many KV stores share (kv.h): bytes and held requests, in a chain of pools
 * (a credential scope's under the server's). Pure: no I/O, no libuv. */
#ifndef MUSTER_RDZV_KVPOOL_H
#define MUSTER_RDZV_KVPOOL_H

#include <stddef.h>
#include <stdint.h>

/* A quota shared by many stores (the server's jobs; later, one per credential scope under the
 * server's): bytes (key + value + RDZV_KV_KEY_OVERHEAD per key) and held requests. A pool may
 * have a parent: a store's charge applies to its pool and every pool up the chain, and is
 * refused when any of them would go over its maximum (that pool counts the refusal). Owned by
 * the caller; every store and child pool using it must be gone before it. Zero-initialise. */
struct rdzv_kv_pool {
    struct rdzv_kv_pool *parent; /* borrowed; NULL: a root */
    size_t bytes;                /* of every store charging this pool or a child of it */
    size_t max_bytes;            /* 0: no limit */
    size_t held;                 /* held requests, likewise */
    size_t max_held;             /* 0: no limit */
    uint64_t refused;            /* charges of bytes refused by this pool's max_bytes */
    uint64_t held_refused;       /* holds refused by this pool's max_held */
};

/* Charges `bytes` and `held` to pool and each of its parents, all or none: returns 0, or
 * -ENOSPC when one of them would go over its maximum; then nothing is charged, that pool's
 * refused (bytes) or held_refused (held) grows by one and *full (may be NULL) points at it.
 * pool NULL: 0. */
int rdzv_kv_pool_charge(struct rdzv_kv_pool *pool, size_t bytes, size_t held,
                        struct rdzv_kv_pool **full);

/* Gives back what rdzv_kv_pool_charge() took, to pool and each of its parents. NULL: nothing. */
void rdzv_kv_pool_refund(struct rdzv_kv_pool *pool, size_t bytes, size_t held);

#endif
