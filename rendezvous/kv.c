/* Key-value store of one job: see kv.h. Keys live in a chained hash table that doubles when it
 * gets full; held requests (gets and barrier arrivals) in one list, scanned linearly: a job has
 * at most a few thousand workers waiting at once, and each put or tick touches them once. */
#include "kv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct entry {
    struct entry *next;
    char *key;
    uint8_t *value;
    uint32_t len;
};

enum held_kind { HELD_GET, HELD_BARRIER };

struct held {
    struct held *next;
    enum held_kind kind;
    void *peer;
    uint32_t req_id;
    int64_t deadline; /* -1: none */
    char *key;        /* key, or barrier name */
};

struct barrier {
    struct barrier *next;
    char *name;
    uint32_t count, arrived;
};

struct rdzv_kv_store {
    struct rdzv_kv_limits lim;
    uint32_t round;
    rdzv_kv_reply_cb cb;
    void *ctx;
    struct entry **buckets;
    size_t n_buckets, n_keys, n_bytes;
    struct held *held;
    struct barrier *barriers;
};

static uint64_t hash(const char *s)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */

    while (*s != '\0')
        h = (h ^ (uint8_t)*s++) * 1099511628211ULL;
    return h;
}

int rdzv_kv_new(const struct rdzv_kv_limits *limits, uint32_t round, rdzv_kv_reply_cb cb, void *ctx,
                struct rdzv_kv_store **out)
{
    struct rdzv_kv_store *kv = calloc(1, sizeof(*kv));

    if (kv == NULL)
        return -ENOMEM;
    if (limits != NULL)
        kv->lim = *limits;
    if (kv->lim.max_keys == 0)
        kv->lim.max_keys = RDZV_KV_MAX_KEYS;
    if (kv->lim.max_bytes == 0)
        kv->lim.max_bytes = RDZV_KV_MAX_BYTES;
    kv->n_buckets = 64;
    kv->buckets = calloc(kv->n_buckets, sizeof(*kv->buckets));
    if (kv->buckets == NULL) {
        free(kv);
        return -ENOMEM;
    }
    kv->round = round;
    kv->cb = cb;
    kv->ctx = ctx;
    *out = kv;
    return 0;
}

static void free_entry(struct entry *e)
{
    free(e->key);
    free(e->value);
    free(e);
}

/* The pool's charge for one key of klen bytes with a value of len bytes. */
static size_t charge(size_t klen, size_t len)
{
    return klen + len + RDZV_KV_KEY_OVERHEAD;
}

static void pool_sub(struct rdzv_kv_store *kv, size_t n)
{
    if (kv->lim.pool != NULL)
        kv->lim.pool->bytes -= n;
}

static void drop_keys(struct rdzv_kv_store *kv)
{
    pool_sub(kv, kv->n_bytes + kv->n_keys * RDZV_KV_KEY_OVERHEAD);
    for (size_t b = 0; b < kv->n_buckets; b++) {
        for (struct entry *e = kv->buckets[b], *next; e != NULL; e = next) {
            next = e->next;
            free_entry(e);
        }
        kv->buckets[b] = NULL;
    }
    kv->n_keys = kv->n_bytes = 0;
}

static void free_held(struct held *h)
{
    free(h->key);
    free(h);
}

static void drop_barriers(struct rdzv_kv_store *kv)
{
    for (struct barrier *b = kv->barriers, *next; b != NULL; b = next) {
        next = b->next;
        free(b->name);
        free(b);
    }
    kv->barriers = NULL;
}

void rdzv_kv_free(struct rdzv_kv_store *kv)
{
    if (kv == NULL)
        return;
    drop_keys(kv);
    for (struct held *h = kv->held, *next; h != NULL; h = next) {
        next = h->next;
        free_held(h);
    }
    drop_barriers(kv);
    free(kv->buckets);
    free(kv);
}

uint32_t rdzv_kv_round(const struct rdzv_kv_store *kv)
{
    return kv->round;
}

static void leave_barrier(struct rdzv_kv_store *kv, const char *name);

/* Unlinks every held request matching pred, one by one, replying `status` when reply is set.
 * With count_barriers a held BARRIER also leaves its barrier, so the counts stay right (a
 * request that expires or whose peer went); without, the barrier is being released whole. */
static void release(struct rdzv_kv_store *kv, int (*pred)(const struct held *, const void *),
                    const void *arg, enum rdzv_kv_status status, int reply, int count_barriers)
{
    struct held **pp = &kv->held;

    while (*pp != NULL) {
        struct held *h = *pp;

        if (!pred(h, arg)) {
            pp = &h->next;
            continue;
        }
        *pp = h->next;
        if (count_barriers && h->kind == HELD_BARRIER)
            leave_barrier(kv, h->key);
        if (reply)
            kv->cb(kv->ctx, h->peer, h->req_id, status, NULL, 0);
        free_held(h);
    }
}

static int any(const struct held *h, const void *arg)
{
    (void)h;
    (void)arg;
    return 1;
}

void rdzv_kv_set_round(struct rdzv_kv_store *kv, uint32_t round)
{
    release(kv, any, NULL, RDZV_KV_STALE, 1, 0);
    drop_barriers(kv);
    drop_keys(kv);
    kv->round = round;
}

static struct entry **lookup(struct rdzv_kv_store *kv, const char *key)
{
    struct entry **pp = &kv->buckets[hash(key) % kv->n_buckets];

    while (*pp != NULL && strcmp((*pp)->key, key) != 0)
        pp = &(*pp)->next;
    return pp;
}

/* Doubling keeps chains short; a failed allocation only leaves them longer. */
static void maybe_grow(struct rdzv_kv_store *kv)
{
    size_t n = kv->n_buckets * 2;
    struct entry **b;

    if (kv->n_keys < kv->n_buckets)
        return;
    b = calloc(n, sizeof(*b));
    if (b == NULL)
        return;
    for (size_t i = 0; i < kv->n_buckets; i++) {
        for (struct entry *e = kv->buckets[i], *next; e != NULL; e = next) {
            size_t h = hash(e->key) % n;

            next = e->next;
            e->next = b[h];
            b[h] = e;
        }
    }
    free(kv->buckets);
    kv->buckets = b;
    kv->n_buckets = n;
}

static int is_get_of(const struct held *h, const void *key)
{
    return h->kind == HELD_GET && strcmp(h->key, key) == 0;
}

/* Answers every held get of e's key with its value. */
static void wake_getters(struct rdzv_kv_store *kv, const struct entry *e)
{
    struct held **pp = &kv->held;

    while (*pp != NULL) {
        struct held *h = *pp;

        if (!is_get_of(h, e->key)) {
            pp = &h->next;
            continue;
        }
        *pp = h->next;
        kv->cb(kv->ctx, h->peer, h->req_id, RDZV_KV_OK, e->value, e->len);
        free_held(h);
    }
}

static int store(struct rdzv_kv_store *kv, struct entry **slot, const char *key,
                 const uint8_t *value, uint32_t len, struct entry **out)
{
    struct entry *e = *slot;
    uint8_t *copy = malloc(len ? len : 1);

    if (copy == NULL)
        return -ENOMEM;
    memcpy(copy, value, len);
    if (e == NULL) {
        e = calloc(1, sizeof(*e));
        if (e == NULL || (e->key = strdup(key)) == NULL) {
            free(e);
            free(copy);
            return -ENOMEM;
        }
        *slot = e;
        kv->n_keys++;
        kv->n_bytes += strlen(key);
        if (kv->lim.pool != NULL)
            kv->lim.pool->bytes += charge(strlen(key), 0);
    }
    kv->n_bytes = kv->n_bytes - e->len + len;
    if (kv->lim.pool != NULL)
        kv->lim.pool->bytes = kv->lim.pool->bytes - e->len + len;
    free(e->value);
    e->value = copy;
    e->len = len;
    *out = e;
    return 0;
}

/* Whether adding `add` bytes after freeing `freed` would take the pool over its maximum. */
static int pool_full(const struct rdzv_kv_pool *pool, size_t add, size_t freed)
{
    if (pool == NULL || pool->max_bytes == 0 || add <= freed)
        return 0;
    return pool->bytes + (add - freed) > pool->max_bytes;
}

int rdzv_kv_put(struct rdzv_kv_store *kv, void *peer, uint32_t req_id, const char *key,
                const uint8_t *value, uint32_t len)
{
    struct entry **slot, *e;
    size_t klen = strnlen(key, RDZV_KEY_MAX + 1), bytes;
    int err;

    if (klen > RDZV_KEY_MAX || len > RDZV_VALUE_MAX)
        return -EINVAL;
    slot = lookup(kv, key);
    bytes = kv->n_bytes + len + (*slot == NULL ? klen : 0) - (*slot ? (*slot)->len : 0);
    if ((*slot == NULL && kv->n_keys >= kv->lim.max_keys) || bytes > kv->lim.max_bytes) {
        kv->cb(kv->ctx, peer, req_id, RDZV_KV_LIMIT, NULL, 0);
        return 0;
    }
    if (pool_full(kv->lim.pool, *slot == NULL ? charge(klen, len) : len,
                  *slot != NULL ? (*slot)->len : 0)) {
        kv->lim.pool->refused++;
        kv->cb(kv->ctx, peer, req_id, RDZV_KV_LIMIT, NULL, 0);
        return 0;
    }
    err = store(kv, slot, key, value, len, &e);
    if (err < 0)
        return err;
    kv->cb(kv->ctx, peer, req_id, RDZV_KV_OK, NULL, 0);
    wake_getters(kv, e);
    maybe_grow(kv);
    return 0;
}

static int hold(struct rdzv_kv_store *kv, enum held_kind kind, void *peer, uint32_t req_id,
                const char *key, int64_t deadline)
{
    struct held *h = calloc(1, sizeof(*h));

    if (h == NULL || (h->key = strdup(key)) == NULL) {
        free(h);
        return -ENOMEM;
    }
    h->kind = kind;
    h->peer = peer;
    h->req_id = req_id;
    h->deadline = deadline;
    h->next = kv->held;
    kv->held = h;
    return 0;
}

int rdzv_kv_get(struct rdzv_kv_store *kv, void *peer, uint32_t req_id, const char *key,
                uint32_t wait_ms, uint64_t now_ms)
{
    struct entry *e = *lookup(kv, key);

    if (e != NULL) {
        kv->cb(kv->ctx, peer, req_id, RDZV_KV_OK, e->value, e->len);
        return 0;
    }
    if (wait_ms == 0) {
        kv->cb(kv->ctx, peer, req_id, RDZV_KV_NOT_FOUND, NULL, 0);
        return 0;
    }
    return hold(kv, HELD_GET, peer, req_id, key, (int64_t)(now_ms + wait_ms));
}

static struct barrier **find_barrier(struct rdzv_kv_store *kv, const char *name)
{
    struct barrier **pp = &kv->barriers;

    while (*pp != NULL && strcmp((*pp)->name, name) != 0)
        pp = &(*pp)->next;
    return pp;
}

static int is_arrival_at(const struct held *h, const void *name)
{
    return h->kind == HELD_BARRIER && strcmp(h->key, name) == 0;
}

static void unlink_barrier(struct barrier **pp)
{
    struct barrier *b = *pp;

    *pp = b->next;
    free(b->name);
    free(b);
}

int rdzv_kv_barrier(struct rdzv_kv_store *kv, void *peer, uint32_t req_id, const char *name,
                    uint32_t count, uint32_t wait_ms, uint64_t now_ms)
{
    struct barrier **pp = find_barrier(kv, name), *b = *pp;
    int err;

    if (b == NULL) {
        b = calloc(1, sizeof(*b));
        if (b == NULL || (b->name = strdup(name)) == NULL) {
            free(b);
            return -ENOMEM;
        }
        b->count = count;
        b->next = kv->barriers;
        kv->barriers = b;
        pp = &kv->barriers;
    }
    err = hold(kv, HELD_BARRIER, peer, req_id, name, wait_ms ? (int64_t)(now_ms + wait_ms) : -1);
    if (err < 0)
        return err;
    if (++b->arrived < b->count)
        return 0;
    unlink_barrier(pp);
    release(kv, is_arrival_at, name, RDZV_KV_OK, 1, 0);
    return 0;
}

static int is_of_peer(const struct held *h, const void *peer)
{
    return h->peer == peer;
}

/* One arrival fewer at barrier `name`; the barrier goes when nobody waits at it. */
static void leave_barrier(struct rdzv_kv_store *kv, const char *name)
{
    struct barrier **pp = find_barrier(kv, name);

    if (*pp != NULL && --(*pp)->arrived == 0)
        unlink_barrier(pp);
}

void rdzv_kv_forget(struct rdzv_kv_store *kv, const void *peer)
{
    release(kv, is_of_peer, peer, RDZV_KV_TIMEOUT, 0, 1);
}

static int is_due(const struct held *h, const void *now)
{
    return h->deadline >= 0 && h->deadline <= *(const int64_t *)now;
}

void rdzv_kv_tick(struct rdzv_kv_store *kv, uint64_t now_ms)
{
    int64_t now = (int64_t)now_ms;

    release(kv, is_due, &now, RDZV_KV_TIMEOUT, 1, 1);
}

int64_t rdzv_kv_deadline(const struct rdzv_kv_store *kv)
{
    int64_t d = -1;

    for (const struct held *h = kv->held; h != NULL; h = h->next)
        if (h->deadline >= 0 && (d < 0 || h->deadline < d))
            d = h->deadline;
    return d;
}

size_t rdzv_kv_keys(const struct rdzv_kv_store *kv)
{
    return kv->n_keys;
}

size_t rdzv_kv_bytes(const struct rdzv_kv_store *kv)
{
    return kv->n_bytes;
}
