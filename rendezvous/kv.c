/* Key-value store of one job: see kv.h. Keys live in a chained hash table that doubles when it
 * gets full. A held request (a get waiting for its key, a barrier arrival) is on three indexes,
 * so that nothing walks all of them (every KV message walked a list of 200,000): the
 * list of its wait point (the waiters of one key, or the arrivals at one barrier, found by a hash
 * table), the list of its peer (a hash table of peers, for rdzv_kv_forget() and the per-peer
 * cap) and, with a deadline, a binary min-heap of deadlines. */
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

struct held;

/* Where requests wait: the gets of one key, or the arrivals at one barrier. Goes when its last
 * request goes. */
struct wait {
    struct wait *next; /* hash chain */
    enum held_kind kind;
    char *name;     /* key, or barrier name */
    uint32_t count; /* barrier: participants (the first arrival's count) */
    size_t n;       /* requests on the list; a barrier's arrivals */
    struct held *first;
};

/* The requests of one peer held in this store. */
struct kpeer {
    struct kpeer *next; /* hash chain */
    const void *peer;
    size_t n;
    struct held *first;
};

struct held {
    struct held *wprev, *wnext; /* on its wait's list */
    struct held *pprev, *pnext; /* on its peer's list */
    struct wait *w;
    struct kpeer *kp;
    void *peer;
    uint32_t req_id;
    int64_t deadline; /* -1: none, not in the heap */
    size_t heap_i;    /* its index in the heap when deadline >= 0 */
};

/* A chained hash table of waits or peers: buckets double when the count reaches them. */
struct table {
    void **b;
    size_t n_b, n;
};

struct rdzv_kv_store {
    struct rdzv_kv_limits lim;
    uint32_t round;
    rdzv_kv_reply_cb cb;
    void *ctx;
    struct entry **buckets;
    size_t n_buckets, n_keys, n_bytes;
    struct table waits[2]; /* by enum held_kind: a key and a barrier may share a name */
    struct table peers;
    struct held **heap; /* min-heap by deadline */
    size_t n_heap, cap_heap;
    size_t n_held;
    enum rdzv_kv_refusal refusal;       /* of the last LIMIT */
    const struct rdzv_kv_pool *refuser; /* the pool behind it, if a pool */
};

static uint64_t hash(const char *s)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */

    while (*s != '\0')
        h = (h ^ (uint8_t)*s++) * 1099511628211ULL;
    return h;
}

static uint64_t hash_ptr(const void *p)
{
    uint64_t h = (uint64_t)(uintptr_t)p;

    h ^= h >> 33; /* murmur3's finaliser: pointers differ mostly in their middle bits */
    h *= 0xff51afd7ed558ccdULL;
    return h ^ (h >> 33);
}

/* --- the store ------------------------------------------------------------------------------- */

static int table_init(struct table *t)
{
    t->n_b = 64;
    t->n = 0;
    t->b = calloc(t->n_b, sizeof(*t->b));
    return t->b == NULL ? -ENOMEM : 0;
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
    rdzv_kv_set_max_held(kv, kv->lim.max_held);
    if (kv->lim.max_held_per_peer == 0)
        kv->lim.max_held_per_peer = RDZV_KV_MAX_HELD_PER_PEER;
    kv->n_buckets = 64;
    kv->buckets = calloc(kv->n_buckets, sizeof(*kv->buckets));
    if (kv->buckets == NULL || table_init(&kv->waits[0]) < 0 || table_init(&kv->waits[1]) < 0 ||
        table_init(&kv->peers) < 0) {
        rdzv_kv_free(kv);
        return -ENOMEM;
    }
    kv->round = round;
    kv->cb = cb;
    kv->ctx = ctx;
    *out = kv;
    return 0;
}

void rdzv_kv_set_max_held(struct rdzv_kv_store *kv, size_t max_held)
{
    kv->lim.max_held = max_held ? max_held : RDZV_KV_MAX_HELD;
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

static void drop_keys(struct rdzv_kv_store *kv)
{
    rdzv_kv_pool_refund(kv->lim.pool, kv->n_bytes + kv->n_keys * RDZV_KV_KEY_OVERHEAD, 0);
    for (size_t b = 0; b < kv->n_buckets; b++) {
        for (struct entry *e = kv->buckets[b], *next; e != NULL; e = next) {
            next = e->next;
            free_entry(e);
        }
        kv->buckets[b] = NULL;
    }
    kv->n_keys = kv->n_bytes = 0;
}

static void release_all(struct rdzv_kv_store *kv, enum rdzv_kv_status status, int reply);

void rdzv_kv_free(struct rdzv_kv_store *kv)
{
    if (kv == NULL)
        return;
    release_all(kv, RDZV_KV_STALE, 0);
    if (kv->buckets != NULL)
        drop_keys(kv);
    free(kv->waits[0].b);
    free(kv->waits[1].b);
    free(kv->peers.b);
    free(kv->heap);
    free(kv->buckets);
    free(kv);
}

uint32_t rdzv_kv_round(const struct rdzv_kv_store *kv)
{
    return kv->round;
}

/* --- the deadline heap ----------------------------------------------------------------------- */

static int earlier(const struct held *a, const struct held *b)
{
    return a->deadline < b->deadline;
}

static void heap_set(struct rdzv_kv_store *kv, size_t i, struct held *h)
{
    kv->heap[i] = h;
    h->heap_i = i;
}

static void sift_up(struct rdzv_kv_store *kv, size_t i)
{
    struct held *h = kv->heap[i];

    while (i > 0 && earlier(h, kv->heap[(i - 1) / 2])) {
        heap_set(kv, i, kv->heap[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    heap_set(kv, i, h);
}

static void sift_down(struct rdzv_kv_store *kv, size_t i)
{
    struct held *h = kv->heap[i];

    for (;;) {
        size_t c = 2 * i + 1;

        if (c >= kv->n_heap)
            break;
        if (c + 1 < kv->n_heap && earlier(kv->heap[c + 1], kv->heap[c]))
            c++;
        if (!earlier(kv->heap[c], h))
            break;
        heap_set(kv, i, kv->heap[c]);
        i = c;
    }
    heap_set(kv, i, h);
}

/* Room for one more, so that linking a request cannot fail half-way. */
static int heap_reserve(struct rdzv_kv_store *kv)
{
    size_t cap = kv->cap_heap ? kv->cap_heap * 2 : 64;
    struct held **n;

    if (kv->n_heap < kv->cap_heap)
        return 0;
    n = realloc(kv->heap, cap * sizeof(*n));
    if (n == NULL)
        return -ENOMEM;
    kv->heap = n;
    kv->cap_heap = cap;
    return 0;
}

static void heap_push(struct rdzv_kv_store *kv, struct held *h)
{
    heap_set(kv, kv->n_heap++, h);
    sift_up(kv, h->heap_i);
}

static void heap_remove(struct rdzv_kv_store *kv, struct held *h)
{
    size_t i = h->heap_i;
    struct held *last = kv->heap[--kv->n_heap];

    if (i == kv->n_heap)
        return;
    heap_set(kv, i, last);
    sift_up(kv, i);
    sift_down(kv, last->heap_i);
}

/* --- wait points and peers ------------------------------------------------------------------- */

/* Doubles t's buckets when it is full; a failed allocation only leaves the chains longer. */
static void table_grow(struct table *t, uint64_t (*key_hash)(const void *),
                       void **(*next_of)(void *))
{
    size_t n = t->n_b * 2;
    void **b;

    if (t->n < t->n_b || (b = calloc(n, sizeof(*b))) == NULL)
        return;
    for (size_t i = 0; i < t->n_b; i++) {
        for (void *e = t->b[i], *next; e != NULL; e = next) {
            size_t h = key_hash(e) % n;

            next = *next_of(e);
            *next_of(e) = b[h];
            b[h] = e;
        }
    }
    free(t->b);
    t->b = b;
    t->n_b = n;
}

static uint64_t wait_hash(const void *w)
{
    return hash(((const struct wait *)w)->name);
}

static void **wait_next(void *w)
{
    return (void **)&((struct wait *)w)->next;
}

static uint64_t kpeer_hash(const void *kp)
{
    return hash_ptr(((const struct kpeer *)kp)->peer);
}

static void **kpeer_next(void *kp)
{
    return (void **)&((struct kpeer *)kp)->next;
}

static struct wait **find_wait(struct rdzv_kv_store *kv, enum held_kind kind, const char *name)
{
    struct table *t = &kv->waits[kind];
    struct wait **pp = (struct wait **)&t->b[hash(name) % t->n_b];

    while (*pp != NULL && strcmp((*pp)->name, name) != 0)
        pp = &(*pp)->next;
    return pp;
}

static struct kpeer **find_kpeer(struct rdzv_kv_store *kv, const void *peer)
{
    struct kpeer **pp = (struct kpeer **)&kv->peers.b[hash_ptr(peer) % kv->peers.n_b];

    while (*pp != NULL && (*pp)->peer != peer)
        pp = &(*pp)->next;
    return pp;
}

/* The wait point of kind and name, made when new; NULL: out of memory. */
static struct wait *get_wait(struct rdzv_kv_store *kv, enum held_kind kind, const char *name,
                             uint32_t count)
{
    struct wait **pp = find_wait(kv, kind, name), *w = *pp;

    if (w != NULL)
        return w;
    w = calloc(1, sizeof(*w));
    if (w == NULL || (w->name = strdup(name)) == NULL) {
        free(w);
        return NULL;
    }
    w->kind = kind;
    w->count = count;
    *pp = w;
    kv->waits[kind].n++;
    table_grow(&kv->waits[kind], wait_hash, wait_next);
    return w;
}

/* Frees w once nobody waits at it. */
static void put_wait(struct rdzv_kv_store *kv, struct wait *w)
{
    struct wait **pp;

    if (w->first != NULL)
        return;
    pp = find_wait(kv, w->kind, w->name);
    *pp = w->next;
    kv->waits[w->kind].n--;
    free(w->name);
    free(w);
}

static struct kpeer *get_kpeer(struct rdzv_kv_store *kv, const void *peer)
{
    struct kpeer **pp = find_kpeer(kv, peer), *kp = *pp;

    if (kp != NULL)
        return kp;
    kp = calloc(1, sizeof(*kp));
    if (kp == NULL)
        return NULL;
    kp->peer = peer;
    *pp = kp;
    kv->peers.n++;
    table_grow(&kv->peers, kpeer_hash, kpeer_next);
    return kp;
}

static void put_kpeer(struct rdzv_kv_store *kv, struct kpeer *kp)
{
    struct kpeer **pp;

    if (kp->first != NULL)
        return;
    pp = find_kpeer(kv, kp->peer);
    *pp = kp->next;
    kv->peers.n--;
    free(kp);
}

/* --- holding and releasing ------------------------------------------------------------------- */

/* Refuses with LIMIT for `why` (and the pool behind it). */
static void refuse(struct rdzv_kv_store *kv, void *peer, uint32_t req_id, enum rdzv_kv_refusal why,
                   const struct rdzv_kv_pool *pool)
{
    kv->refusal = why;
    kv->refuser = pool;
    kv->cb(kv->ctx, peer, req_id, RDZV_KV_LIMIT, NULL, 0);
}

/* Whether peer may hold one more request: else replies LIMIT and returns 0. Charges the pool
 * chain's held count on success. */
static int may_hold(struct rdzv_kv_store *kv, void *peer, uint32_t req_id)
{
    struct kpeer *kp = *find_kpeer(kv, peer);
    struct rdzv_kv_pool *full = NULL;

    if (kp != NULL && kp->n >= kv->lim.max_held_per_peer) {
        refuse(kv, peer, req_id, RDZV_KV_REFUSED_HELD_PEER, NULL);
        return 0;
    }
    if (kv->n_held >= kv->lim.max_held) {
        refuse(kv, peer, req_id, RDZV_KV_REFUSED_HELD, NULL);
        return 0;
    }
    if (rdzv_kv_pool_charge(kv->lim.pool, 0, 1, &full) < 0) {
        refuse(kv, peer, req_id, RDZV_KV_REFUSED_POOL_HELD, full);
        return 0;
    }
    return 1;
}

/* Links a request held at w (made by the caller, freed here when empty on failure). The held
 * count was charged by may_hold(). Returns 0 or -ENOMEM (then charged back). */
static int hold(struct rdzv_kv_store *kv, struct wait *w, void *peer, uint32_t req_id,
                int64_t deadline)
{
    struct held *h = calloc(1, sizeof(*h));
    struct kpeer *kp = h != NULL ? get_kpeer(kv, peer) : NULL;

    if (kp == NULL || (deadline >= 0 && heap_reserve(kv) < 0)) {
        if (kp != NULL)
            put_kpeer(kv, kp);
        free(h);
        put_wait(kv, w);
        rdzv_kv_pool_refund(kv->lim.pool, 0, 1);
        return -ENOMEM;
    }
    h->peer = peer;
    h->req_id = req_id;
    h->deadline = deadline;
    h->w = w;
    h->wnext = w->first;
    if (w->first != NULL)
        w->first->wprev = h;
    w->first = h;
    w->n++;
    h->kp = kp;
    h->pnext = kp->first;
    if (kp->first != NULL)
        kp->first->pprev = h;
    kp->first = h;
    kp->n++;
    if (deadline >= 0)
        heap_push(kv, h);
    kv->n_held++;
    return 0;
}

/* Unlinks and frees h; its wait and peer entries stay (put_wait/put_kpeer free them): the
 * caller may still be walking them. */
static void unhold(struct rdzv_kv_store *kv, struct held *h)
{
    struct wait *w = h->w;
    struct kpeer *kp = h->kp;

    if (h->wprev != NULL)
        h->wprev->wnext = h->wnext;
    else
        w->first = h->wnext;
    if (h->wnext != NULL)
        h->wnext->wprev = h->wprev;
    w->n--;
    if (h->pprev != NULL)
        h->pprev->pnext = h->pnext;
    else
        kp->first = h->pnext;
    if (h->pnext != NULL)
        h->pnext->pprev = h->pprev;
    kp->n--;
    if (h->deadline >= 0)
        heap_remove(kv, h);
    kv->n_held--;
    rdzv_kv_pool_refund(kv->lim.pool, 0, 1);
    free(h);
}

/* Answers one held request and lets it go, with the wait point and peer entry it leaves
 * empty. */
static void answer(struct rdzv_kv_store *kv, struct held *h, enum rdzv_kv_status status,
                   const uint8_t *value, uint32_t len, int reply)
{
    struct wait *w = h->w;
    struct kpeer *kp = h->kp;

    if (reply)
        kv->cb(kv->ctx, h->peer, h->req_id, status, value, len);
    unhold(kv, h);
    put_kpeer(kv, kp);
    put_wait(kv, w);
}

/* Every request held at w, one by one (answer() frees w with the last). */
static void answer_wait(struct rdzv_kv_store *kv, struct wait *w, enum rdzv_kv_status status,
                        const uint8_t *value, uint32_t len)
{
    size_t n = w->n;

    for (size_t i = 0; i < n; i++)
        answer(kv, w->first, status, value, len, 1);
}

/* Every held request: each wait point of either table, emptied. Once per round. */
static void release_all(struct rdzv_kv_store *kv, enum rdzv_kv_status status, int reply)
{
    for (int k = 0; k < 2; k++) {
        struct table *t = &kv->waits[k];

        for (size_t b = 0; t->b != NULL && b < t->n_b; b++) {
            while (t->b[b] != NULL) {
                struct wait *w = t->b[b];
                size_t n = w->n;

                for (size_t i = 0; i < n; i++)
                    answer(kv, w->first, status, NULL, 0, reply);
            }
        }
    }
}

void rdzv_kv_set_round(struct rdzv_kv_store *kv, uint32_t round)
{
    release_all(kv, RDZV_KV_STALE, 1);
    drop_keys(kv);
    kv->round = round;
}

/* --- keys ------------------------------------------------------------------------------------ */

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

/* Answers every held get of e's key with its value. */
static void wake_getters(struct rdzv_kv_store *kv, const struct entry *e)
{
    struct wait *w = *find_wait(kv, HELD_GET, e->key);

    if (w != NULL)
        answer_wait(kv, w, RDZV_KV_OK, e->value, e->len);
}

/* Stores the value; the pool was charged by the caller. */
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
    }
    kv->n_bytes = kv->n_bytes - e->len + len;
    free(e->value);
    e->value = copy;
    e->len = len;
    *out = e;
    return 0;
}

/* The pool chain's part of a put: what the new value adds beyond what the old one frees is
 * charged (and may be refused); what it frees is given back after the store. */
static int put_charge(struct rdzv_kv_store *kv, size_t add, size_t freed,
                      struct rdzv_kv_pool **full)
{
    return add > freed ? rdzv_kv_pool_charge(kv->lim.pool, add - freed, 0, full) : 0;
}

int rdzv_kv_put(struct rdzv_kv_store *kv, void *peer, uint32_t req_id, const char *key,
                const uint8_t *value, uint32_t len)
{
    struct rdzv_kv_pool *full = NULL;
    struct entry **slot, *e;
    size_t klen = strnlen(key, RDZV_KEY_MAX + 1), bytes, add, freed;
    int err;

    if (klen > RDZV_KEY_MAX || len > RDZV_VALUE_MAX)
        return -EINVAL;
    slot = lookup(kv, key);
    bytes = kv->n_bytes + len + (*slot == NULL ? klen : 0) - (*slot ? (*slot)->len : 0);
    if ((*slot == NULL && kv->n_keys >= kv->lim.max_keys) || bytes > kv->lim.max_bytes) {
        refuse(kv, peer, req_id, RDZV_KV_REFUSED_QUOTA, NULL);
        return 0;
    }
    add = *slot == NULL ? charge(klen, len) : len;
    freed = *slot != NULL ? (*slot)->len : 0;
    if (put_charge(kv, add, freed, &full) < 0) {
        refuse(kv, peer, req_id, RDZV_KV_REFUSED_POOL_BYTES, full);
        return 0;
    }
    err = store(kv, slot, key, value, len, &e);
    if (err < 0) {
        rdzv_kv_pool_refund(kv->lim.pool, add > freed ? add - freed : 0, 0);
        return err;
    }
    if (freed > add)
        rdzv_kv_pool_refund(kv->lim.pool, freed - add, 0);
    kv->cb(kv->ctx, peer, req_id, RDZV_KV_OK, NULL, 0);
    wake_getters(kv, e);
    maybe_grow(kv);
    return 0;
}

int rdzv_kv_get(struct rdzv_kv_store *kv, void *peer, uint32_t req_id, const char *key,
                uint32_t wait_ms, uint64_t now_ms)
{
    struct entry *e = *lookup(kv, key);
    struct wait *w;

    if (e != NULL) {
        kv->cb(kv->ctx, peer, req_id, RDZV_KV_OK, e->value, e->len);
        return 0;
    }
    if (wait_ms == 0) {
        kv->cb(kv->ctx, peer, req_id, RDZV_KV_NOT_FOUND, NULL, 0);
        return 0;
    }
    if (!may_hold(kv, peer, req_id))
        return 0;
    w = get_wait(kv, HELD_GET, key, 0);
    if (w == NULL) {
        rdzv_kv_pool_refund(kv->lim.pool, 0, 1);
        return -ENOMEM;
    }
    return hold(kv, w, peer, req_id, (int64_t)(now_ms + wait_ms));
}

/* --- barriers -------------------------------------------------------------------------------- */

/* The arrival completes the barrier: everyone held there and the arrival itself get OK, and
 * the barrier goes (the same name starts afresh). */
static void complete(struct rdzv_kv_store *kv, struct wait *w, void *peer, uint32_t req_id)
{
    kv->cb(kv->ctx, peer, req_id, RDZV_KV_OK, NULL, 0);
    if (w != NULL)
        answer_wait(kv, w, RDZV_KV_OK, NULL, 0);
}

int rdzv_kv_barrier(struct rdzv_kv_store *kv, void *peer, uint32_t req_id, const char *name,
                    uint32_t count, uint32_t wait_ms, uint64_t now_ms)
{
    struct wait *w = *find_wait(kv, HELD_BARRIER, name);
    uint32_t need = w != NULL ? w->count : count;

    if ((w != NULL ? w->n : 0) + 1 >= need) {
        complete(kv, w, peer, req_id);
        return 0;
    }
    if (!may_hold(kv, peer, req_id))
        return 0;
    w = get_wait(kv, HELD_BARRIER, name, count);
    if (w == NULL) {
        rdzv_kv_pool_refund(kv->lim.pool, 0, 1);
        return -ENOMEM;
    }
    return hold(kv, w, peer, req_id, wait_ms ? (int64_t)(now_ms + wait_ms) : -1);
}

/* --- peers and deadlines --------------------------------------------------------------------- */

void rdzv_kv_forget(struct rdzv_kv_store *kv, const void *peer)
{
    struct kpeer *kp = *find_kpeer(kv, peer);
    size_t n = kp != NULL ? kp->n : 0;

    for (size_t i = 0; i < n; i++)
        answer(kv, kp->first, RDZV_KV_TIMEOUT, NULL, 0, 0);
}

void rdzv_kv_tick(struct rdzv_kv_store *kv, uint64_t now_ms)
{
    while (kv->n_heap > 0 && kv->heap[0]->deadline <= (int64_t)now_ms)
        answer(kv, kv->heap[0], RDZV_KV_TIMEOUT, NULL, 0, 1);
}

int64_t rdzv_kv_deadline(const struct rdzv_kv_store *kv)
{
    return kv->n_heap > 0 ? kv->heap[0]->deadline : -1;
}

enum rdzv_kv_refusal rdzv_kv_last_refusal(const struct rdzv_kv_store *kv,
                                          const struct rdzv_kv_pool **pool)
{
    if (pool != NULL)
        *pool = kv->refuser;
    return kv->refusal;
}

size_t rdzv_kv_held(const struct rdzv_kv_store *kv)
{
    return kv->n_held;
}

size_t rdzv_kv_held_of(const struct rdzv_kv_store *kv, const void *peer)
{
    struct kpeer *kp = *find_kpeer((struct rdzv_kv_store *)kv, peer);

    return kp != NULL ? kp->n : 0;
}

size_t rdzv_kv_keys(const struct rdzv_kv_store *kv)
{
    return kv->n_keys;
}

size_t rdzv_kv_bytes(const struct rdzv_kv_store *kv)
{
    return kv->n_bytes;
}
