/* The agent store's hash table (store_kv.h). */
#include "store_kv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <xxhash.h>

static uint64_t khash(const struct store_kv *kv, const void *k, size_t n)
{
    return XXH3_64bits_withSeed(k, n, kv->seed);
}

static struct store_entry **kv_slot(struct store_kv *kv, const void *k, size_t n, uint64_t h)
{
    struct store_entry **e = &kv->buckets[h & (kv->nbuckets - 1)];
    while (*e != NULL && !((*e)->hash == h && (*e)->klen == n && memcmp((*e)->key, k, n) == 0))
        e = &(*e)->next;
    return e;
}

int store_kv_init(struct store_kv *kv, size_t value_max, size_t total_max)
{
    *kv = (struct store_kv){.nbuckets = 64, .value_max = value_max, .total_max = total_max};
    if (getrandom(&kv->seed, sizeof(kv->seed), 0) != sizeof(kv->seed))
        kv->seed = (uint64_t)(uintptr_t)kv ^ 0x9E3779B97F4A7C15u; /* no entropy yet: still varies */
    kv->buckets = calloc(kv->nbuckets, sizeof(*kv->buckets));
    return kv->buckets == NULL ? -ENOMEM : 0;
}

struct store_entry *store_kv_get(struct store_kv *kv, const void *k, size_t n)
{
    return *kv_slot(kv, k, n, khash(kv, k, n));
}

static void kv_grow(struct store_kv *kv)
{
    size_t nb = kv->nbuckets * 2;
    struct store_entry **b = calloc(nb, sizeof(*b));
    if (b == NULL)
        return;
    for (size_t i = 0; i < kv->nbuckets; i++)
        for (struct store_entry *e = kv->buckets[i], *next; e != NULL; e = next) {
            next = e->next;
            e->next = b[e->hash & (nb - 1)];
            b[e->hash & (nb - 1)] = e;
        }
    free(kv->buckets);
    kv->buckets = b;
    kv->nbuckets = nb;
}

int store_kv_put(struct store_kv *kv, const void *k, size_t kn, const void *v, size_t vn,
                 int append)
{
    uint64_t h = khash(kv, k, kn);
    struct store_entry **slot = kv_slot(kv, k, kn, h), *e = *slot;
    size_t old = e ? e->vlen : 0, keep = append ? old : 0;
    unsigned char *val;

    if (keep + vn > kv->value_max)
        return -EFBIG;
    if (kv->bytes - old + keep + vn + (e ? 0 : kn) > kv->total_max)
        return -ENOSPC;
    if ((val = malloc(keep + vn + 1)) == NULL)
        return -ENOMEM;
    if (keep)
        memcpy(val, e->val, keep);
    memcpy(val + keep, v, vn);
    if (e == NULL) {
        if ((e = malloc(sizeof(*e) + kn)) == NULL) {
            free(val);
            return -ENOMEM;
        }
        *e = (struct store_entry){.hash = h, .klen = kn};
        memcpy(e->key, k, kn);
        *slot = e;
        kv->keys++;
        kv->bytes += kn;
    } else {
        free(e->val);
    }
    kv->bytes += keep + vn - old;
    e->val = val;
    e->vlen = keep + vn;
    if (kv->keys > kv->nbuckets)
        kv_grow(kv); /* out of memory: longer chains, still correct */
    return 0;
}

int store_kv_del(struct store_kv *kv, const void *k, size_t n)
{
    struct store_entry **slot = kv_slot(kv, k, n, khash(kv, k, n)), *e = *slot;
    if (e == NULL)
        return 0;
    *slot = e->next;
    kv->keys--;
    kv->bytes -= e->klen + e->vlen;
    free(e->val);
    free(e);
    return 1;
}

void store_kv_clear(struct store_kv *kv)
{
    for (size_t i = 0; i < kv->nbuckets; i++)
        for (struct store_entry *e = kv->buckets[i], *next; e != NULL; e = next) {
            next = e->next;
            free(e->val);
            free(e);
        }
    free(kv->buckets);
    kv->buckets = NULL;
    kv->nbuckets = 0;
    kv->keys = 0;
    kv->bytes = 0;
}
