/* Quotas per credential scope (docs/SECURITY.md "Limits and quotas of a shared server"): one team's
 * job credential ("teamA-*" or one job id) must not take every job slot or connection of a shared
 * server. Each scope that holds something has one struct rdzv__scope in the server's table, keyed
 * by the scope string, with what it holds and a reference count; it is freed when the last holder
 * lets go.
 *
 * Only job credentials have a scope. The server secret and client certificates are the
 * operators': they get only the server-wide caps (rdzv_limits), as do observers and workers
 * (workers are bounded per job: job_workers_*).
 *
 * Holders (one reference each): a connection that said HELLO with a job credential
 * (peer->scope, counted in connections until it closes) and a job created by such a connection
 * (sjob->scope, counted in jobs until the job is freed). A job is charged to the scope of the
 * credential that created it, even if another scope covering its id joins it later. */
#ifndef MUSTER_RDZV_SCOPE_H
#define MUSTER_RDZV_SCOPE_H

#include "cred.h"
#include "kv.h"

/* Buckets of the table: a power of two. More scopes than this only make chains longer. */
#define SRV_SCOPE_BUCKETS 1024u

struct rdzv__scope {
    struct rdzv__scope *next; /* in its bucket's chain */
    char scope[RDZV_ID_MAX + 1];
    unsigned jobs;        /* jobs created by this scope's credential and not yet freed */
    unsigned connections; /* open connections that said HELLO with it */
    unsigned refs;        /* holders: the above, and whoever else takes one; freed at 0 */
    /* Per-scope KV bytes and held requests: to be chained to the server's pool
     * (srv->kv_pool) by the KV work. Zeroed (no limit) and unused here. */
    struct rdzv_kv_pool kv;
};

struct rdzv__scopes {
    struct rdzv__scope *buckets[SRV_SCOPE_BUCKETS];
    unsigned n; /* scopes in the table */
};

/* The scope entry for `scope` (copied), created with zero counters if absent, with one more
 * reference taken. Returns 0 and sets *out, -EINVAL for a scope over RDZV_ID_MAX, or -ENOMEM. */
int rdzv__scope_get(struct rdzv__scopes *t, const char *scope, struct rdzv__scope **out);

/* Lets go of one reference to s (NULL: nothing); frees the entry when it was the last. */
void rdzv__scope_put(struct rdzv__scopes *t, struct rdzv__scope *s);

/* The entry for `scope`, or NULL; takes no reference. */
struct rdzv__scope *rdzv__scope_find(const struct rdzv__scopes *t, const char *scope);

/* Frees every entry (the server is going away; nobody holds them any more). */
void rdzv__scopes_free(struct rdzv__scopes *t);

#endif
