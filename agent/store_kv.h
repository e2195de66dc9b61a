/* The agent store's keys and values (store.h): a hash table with a random seed, so a client
 * cannot aim its keys at one bucket. Not for other modules. */
#ifndef MUSTER_AGENT_STORE_KV_H
#define MUSTER_AGENT_STORE_KV_H

#include <stddef.h>
#include <stdint.h>

struct store_entry {
    struct store_entry *next;
    uint64_t hash;
    size_t klen, vlen;
    unsigned char *val; /* vlen bytes (never NULL) */
    unsigned char key[];
};

struct store_kv {
    struct store_entry **buckets;
    size_t nbuckets; /* a power of two */
    uint64_t seed;
    size_t keys, bytes;          /* entries, and bytes of their keys and values */
    size_t value_max, total_max; /* bounds checked by store_kv_put */
};

/* An empty table with these bounds. 0 or -ENOMEM. */
int store_kv_init(struct store_kv *kv, size_t value_max, size_t total_max);

/* The entry of key k (n bytes), or NULL. Valid until the next put or delete. */
struct store_entry *store_kv_get(struct store_kv *kv, const void *k, size_t n);

/* Sets key k to v, or with append to its old value followed by v (creating it when absent).
 * 0, -EFBIG (the value would pass value_max), -ENOSPC (the table would pass total_max) or
 * -ENOMEM; nothing changes on an error. */
int store_kv_put(struct store_kv *kv, const void *k, size_t kn, const void *v, size_t vn,
                 int append);

/* 1 when k was deleted, 0 when it was absent. */
int store_kv_del(struct store_kv *kv, const void *k, size_t n);

/* Frees every entry and the table; kv may be init'ed again. Accepts a cleared table. */
void store_kv_clear(struct store_kv *kv);

#endif
