/* Chained KV quotas: see kvpool.h. A chain is a few pools long (scope, server), so charging
 * walks it twice: once to check every pool, once to charge them all. */
#include "kvpool.h"

#include <errno.h>

static int over(size_t have, size_t add, size_t max)
{
    return max != 0 && add > 0 && (have > max || add > max - have);
}

int rdzv_kv_pool_charge(struct rdzv_kv_pool *pool, size_t bytes, size_t held,
                        struct rdzv_kv_pool **full)
{
    for (struct rdzv_kv_pool *p = pool; p != NULL; p = p->parent) {
        if (over(p->bytes, bytes, p->max_bytes) || over(p->held, held, p->max_held)) {
            if (over(p->bytes, bytes, p->max_bytes))
                p->refused++;
            else
                p->held_refused++;
            if (full != NULL)
                *full = p;
            return -ENOSPC;
        }
    }
    for (struct rdzv_kv_pool *p = pool; p != NULL; p = p->parent) {
        p->bytes += bytes;
        p->held += held;
    }
    return 0;
}

void rdzv_kv_pool_refund(struct rdzv_kv_pool *pool, size_t bytes, size_t held)
{
    for (struct rdzv_kv_pool *p = pool; p != NULL; p = p->parent) {
        p->bytes -= bytes;
        p->held -= held;
    }
}
