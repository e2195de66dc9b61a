/* The pure KV store: put/get/wait, barriers, deadlines, rounds, limits. Replies are recorded
 * by the callback; time is passed in. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "kv.h"

struct reply {
    void *peer;
    uint32_t req_id;
    enum rdzv_kv_status status;
    char value[64];
};

static struct reply replies[64];
static int n_replies;
static int peers[4];
static int many[1000];         /* peers of the flood tests */
static unsigned by_status[16]; /* replies by status, also past replies[] */
static uint32_t last_timeout;  /* req_id of the last TIMEOUT */

static void reply_cb(void *ctx, void *peer, uint32_t req_id, enum rdzv_kv_status status,
                     const uint8_t *value, uint32_t len)
{
    struct reply *r = &replies[n_replies < 64 ? n_replies : 63];

    n_replies++;
    by_status[status]++;
    if (status == RDZV_KV_TIMEOUT)
        last_timeout = req_id;
    (void)ctx;
    r->peer = peer;
    r->req_id = req_id;
    r->status = status;
    snprintf(r->value, sizeof(r->value), "%.*s", (int)len, value ? (const char *)value : "");
}

static struct rdzv_kv_store *store(size_t max_keys, size_t max_bytes)
{
    struct rdzv_kv_limits lim = {.max_keys = max_keys, .max_bytes = max_bytes};
    struct rdzv_kv_store *kv = NULL;

    n_replies = 0;
    memset(by_status, 0, sizeof(by_status));
    assert_int_equal(rdzv_kv_new(&lim, 0, reply_cb, NULL, &kv), 0);
    return kv;
}

static void put(struct rdzv_kv_store *kv, int peer, uint32_t req, const char *k, const char *v)
{
    assert_int_equal(rdzv_kv_put(kv, &peers[peer], req, k, (const uint8_t *)v, (uint32_t)strlen(v)),
                     0);
}

static void test_put_get_wait(void **state)
{
    struct rdzv_kv_store *kv = store(0, 0);

    (void)state;
    assert_int_equal(rdzv_kv_get(kv, &peers[1], 1, "k", 0, 0), 0);
    assert_int_equal(replies[0].status, RDZV_KV_NOT_FOUND);
    assert_int_equal(rdzv_kv_get(kv, &peers[1], 2, "k", 100, 0), 0);
    assert_int_equal(rdzv_kv_get(kv, &peers[2], 3, "k", 50, 0), 0);
    assert_int_equal(n_replies, 1); /* held */
    assert_int_equal(rdzv_kv_deadline(kv), 50);
    rdzv_kv_tick(kv, 49);
    assert_int_equal(n_replies, 1);
    rdzv_kv_tick(kv, 50);
    assert_int_equal(n_replies, 2);
    assert_int_equal(replies[1].status, RDZV_KV_TIMEOUT);
    assert_int_equal(replies[1].req_id, 3);
    put(kv, 0, 4, "k", "v1");
    assert_int_equal(n_replies, 4); /* PUT's OK, then the waiting GET */
    assert_int_equal(replies[2].req_id, 4);
    assert_int_equal(replies[3].req_id, 2);
    assert_string_equal(replies[3].value, "v1");
    put(kv, 0, 5, "k", "v22"); /* replace */
    assert_int_equal(rdzv_kv_get(kv, &peers[1], 6, "k", 0, 0), 0);
    assert_string_equal(replies[5].value, "v22");
    assert_int_equal(rdzv_kv_keys(kv), 1);
    assert_int_equal(rdzv_kv_bytes(kv), 4);
    assert_int_equal(rdzv_kv_deadline(kv), -1);
    rdzv_kv_free(kv);
}

static void test_barrier(void **state)
{
    struct rdzv_kv_store *kv = store(0, 0);

    (void)state;
    assert_int_equal(rdzv_kv_barrier(kv, &peers[0], 1, "b", 3, 100, 0), 0);
    assert_int_equal(rdzv_kv_barrier(kv, &peers[1], 2, "b", 3, 10, 0), 0);
    rdzv_kv_tick(kv, 10); /* peer 1 gives up: it no longer counts */
    assert_int_equal(n_replies, 1);
    assert_int_equal(replies[0].status, RDZV_KV_TIMEOUT);
    assert_int_equal(rdzv_kv_barrier(kv, &peers[2], 3, "b", 3, 0, 20), 0);
    assert_int_equal(n_replies, 1);
    assert_int_equal(rdzv_kv_barrier(kv, &peers[3], 4, "b", 3, 0, 20), 0);
    assert_int_equal(n_replies, 4);
    for (int i = 1; i < 4; i++)
        assert_int_equal(replies[i].status, RDZV_KV_OK);
    /* the barrier is gone: the same name starts afresh */
    assert_int_equal(rdzv_kv_barrier(kv, &peers[0], 5, "b", 1, 0, 30), 0);
    assert_int_equal(replies[4].status, RDZV_KV_OK);
    /* a forgotten peer drops out of a barrier */
    assert_int_equal(rdzv_kv_barrier(kv, &peers[0], 6, "c", 2, 0, 30), 0);
    rdzv_kv_forget(kv, &peers[0]);
    assert_int_equal(rdzv_kv_barrier(kv, &peers[1], 7, "c", 2, 0, 30), 0);
    assert_int_equal(n_replies, 5);
    rdzv_kv_free(kv);
}

static void test_round_change_stale(void **state)
{
    struct rdzv_kv_store *kv = store(0, 0);

    (void)state;
    put(kv, 0, 1, "k", "v");
    assert_int_equal(rdzv_kv_get(kv, &peers[1], 2, "x", 1000, 0), 0);
    assert_int_equal(rdzv_kv_barrier(kv, &peers[2], 3, "b", 2, 1000, 0), 0);
    rdzv_kv_set_round(kv, 1);
    assert_int_equal(rdzv_kv_round(kv), 1);
    assert_int_equal(n_replies, 3);
    assert_int_equal(replies[1].status, RDZV_KV_STALE);
    assert_int_equal(replies[2].status, RDZV_KV_STALE);
    assert_int_equal(rdzv_kv_keys(kv), 0);
    assert_int_equal(rdzv_kv_get(kv, &peers[1], 4, "k", 0, 0), 0);
    assert_int_equal(replies[3].status, RDZV_KV_NOT_FOUND);
    rdzv_kv_free(kv);
}

static void test_limits(void **state)
{
    struct rdzv_kv_store *kv = store(2, 10);
    char key[RDZV_KEY_MAX + 2];

    (void)state;
    put(kv, 0, 1, "a", "1");
    put(kv, 0, 2, "b", "2");
    put(kv, 0, 3, "c", "3"); /* third key */
    assert_int_equal(replies[2].status, RDZV_KV_LIMIT);
    put(kv, 0, 4, "a", "12345678"); /* 1 + 8 + "b2" = 11 bytes > 10 */
    assert_int_equal(replies[3].status, RDZV_KV_LIMIT);
    put(kv, 0, 5, "a", "1234567"); /* exactly 10 */
    assert_int_equal(replies[4].status, RDZV_KV_OK);
    memset(key, 'k', sizeof(key) - 1);
    key[sizeof(key) - 1] = '\0';
    assert_int_equal(rdzv_kv_put(kv, &peers[0], 6, key, NULL, 0), -EINVAL);
    rdzv_kv_free(kv);
    rdzv_kv_free(NULL);
}

/* Two stores sharing one pool: the pool's cap holds across them (each key charged its bytes +
 * RDZV_KV_KEY_OVERHEAD), a refusal by the pool is counted in it, replacing a value or freeing
 * a store gives the bytes back. */
static void test_pool(void **state)
{
    struct rdzv_kv_pool pool = {.max_bytes = 2 * (2 + RDZV_KV_KEY_OVERHEAD) + 1};
    struct rdzv_kv_limits lim = {.pool = &pool};
    struct rdzv_kv_store *a = NULL, *b = NULL;

    (void)state;
    n_replies = 0;
    assert_int_equal(rdzv_kv_new(&lim, 0, reply_cb, NULL, &a), 0);
    assert_int_equal(rdzv_kv_new(&lim, 0, reply_cb, NULL, &b), 0);
    put(a, 0, 1, "a", "1");
    put(b, 1, 2, "b", "2");
    assert_int_equal(pool.bytes, 2 * (2 + RDZV_KV_KEY_OVERHEAD));
    put(b, 1, 3, "c", ""); /* a third key does not fit in either store */
    assert_int_equal(replies[2].status, RDZV_KV_LIMIT);
    assert_int_equal(pool.refused, 1);
    put(a, 0, 4, "a", "12"); /* one byte more: exactly the cap */
    assert_int_equal(replies[3].status, RDZV_KV_OK);
    put(b, 1, 5, "b", "23"); /* one more: over */
    assert_int_equal(replies[4].status, RDZV_KV_LIMIT);
    assert_int_equal(pool.refused, 2);
    rdzv_kv_set_round(a, 1); /* drops a's key */
    assert_int_equal(pool.bytes, 2 + RDZV_KV_KEY_OVERHEAD);
    put(b, 1, 6, "c", "3");
    assert_int_equal(replies[5].status, RDZV_KV_OK);
    rdzv_kv_free(b);
    assert_int_equal(pool.bytes, 0);
    rdzv_kv_free(a);
}

/* Many keys: the table grows and every key is still found. */
static void test_many_keys(void **state)
{
    struct rdzv_kv_store *kv = store(0, 0);
    char k[16];

    (void)state;
    for (int i = 0; i < 5000; i++) {
        snprintf(k, sizeof(k), "key%d", i);
        n_replies = 0;
        put(kv, 0, 1, k, k);
    }
    for (int i = 0; i < 5000; i += 499) {
        snprintf(k, sizeof(k), "key%d", i);
        n_replies = 0;
        assert_int_equal(rdzv_kv_get(kv, &peers[0], 1, k, 0, 0), 0);
        assert_string_equal(replies[0].value, k);
    }
    assert_int_equal(rdzv_kv_keys(kv), 5000);
    rdzv_kv_free(kv);
}

static struct rdzv_kv_store *held_store(size_t max_held, size_t per_peer, struct rdzv_kv_pool *pool)
{
    struct rdzv_kv_limits lim = {.pool = pool, .max_held = max_held, .max_held_per_peer = per_peer};
    struct rdzv_kv_store *kv = NULL;

    n_replies = 0;
    memset(by_status, 0, sizeof(by_status));
    assert_int_equal(rdzv_kv_new(&lim, 0, reply_cb, NULL, &kv), 0);
    return kv;
}

/* One connection sends 10x its cap of waiting GETs: the cap is held, the rest get LIMIT at
 * once, named HELD_PEER; other peers still wait, and a put answers the held ones. */
static void test_held_per_peer(void **state)
{
    struct rdzv_kv_store *kv = held_store(0, 4, NULL);
    const struct rdzv_kv_pool *pool = &(struct rdzv_kv_pool){0};

    (void)state;
    for (uint32_t i = 0; i < 40; i++)
        assert_int_equal(rdzv_kv_get(kv, &peers[0], i, "k", 1000, 0), 0);
    assert_int_equal(rdzv_kv_held_of(kv, &peers[0]), 4);
    assert_int_equal(by_status[RDZV_KV_LIMIT], 36);
    assert_int_equal(rdzv_kv_last_refusal(kv, &pool), RDZV_KV_REFUSED_HELD_PEER);
    assert_null(pool);
    assert_int_equal(rdzv_kv_get(kv, &peers[1], 99, "k", 1000, 0), 0);
    assert_int_equal(rdzv_kv_held(kv), 5);
    put(kv, 2, 100, "k", "v");
    assert_int_equal(by_status[RDZV_KV_OK], 6); /* the put and the five held */
    assert_int_equal(rdzv_kv_held(kv), 0);
    assert_int_equal(rdzv_kv_deadline(kv), -1);
    for (uint32_t i = 0; i < 40; i++) /* the peer's room is back */
        assert_int_equal(rdzv_kv_get(kv, &peers[0], i, "other", 1000, 0), 0);
    assert_int_equal(rdzv_kv_held_of(kv, &peers[0]), 4);
    rdzv_kv_forget(kv, &peers[0]);
    assert_int_equal(rdzv_kv_held(kv), 0);
    rdzv_kv_free(kv);
}

/* Many connections of one job send 10x the store's cap, GETs and BARRIER arrivals of distinct
 * names: the store holds its cap, the rest get LIMIT (HELD); a barrier arrival that completes
 * its barrier needs no room and still gets OK. */
static void test_held_per_store(void **state)
{
    struct rdzv_kv_store *kv = held_store(50, 0, NULL);
    char name[32];

    (void)state;
    for (uint32_t i = 0; i < 500; i++) {
        snprintf(name, sizeof(name), "n%u", i);
        if (i % 2)
            assert_int_equal(rdzv_kv_get(kv, &many[i], i, name, 1000, 0), 0);
        else
            assert_int_equal(rdzv_kv_barrier(kv, &many[i], i, name, 2, 1000, 0), 0);
    }
    assert_int_equal(rdzv_kv_held(kv), 50);
    assert_int_equal(by_status[RDZV_KV_LIMIT], 450);
    assert_int_equal(rdzv_kv_last_refusal(kv, NULL), RDZV_KV_REFUSED_HELD);
    assert_int_equal(rdzv_kv_barrier(kv, &many[999], 7, "n0", 2, 1000, 0), 0); /* completes n0 */
    assert_int_equal(by_status[RDZV_KV_OK], 2);
    assert_int_equal(rdzv_kv_held(kv), 49);
    rdzv_kv_set_max_held(kv, 60); /* the job gained workers */
    for (uint32_t i = 0; i < 20; i++)
        assert_int_equal(rdzv_kv_get(kv, &many[500 + i], i, "late", 1000, 0), 0);
    assert_int_equal(rdzv_kv_held(kv), 60);
    rdzv_kv_tick(kv, 1000);
    assert_int_equal(rdzv_kv_held(kv), 0);
    assert_int_equal(by_status[RDZV_KV_TIMEOUT], 60);
    rdzv_kv_free(kv);
}

/* A chain of pools: a child (a credential scope's quota) under the server's root. A store's
 * bytes and holds are charged to both; the pool that is full refuses and counts it; freeing
 * gives everything back to every pool of the chain. Also 10x the child's held cap. */
static void test_pool_chain(void **state)
{
    struct rdzv_kv_pool root = {.max_bytes = 1000, .max_held = 30};
    struct rdzv_kv_pool child = {.parent = &root, .max_bytes = 200, .max_held = 10};
    struct rdzv_kv_store *a = held_store(0, 1000, &child), *b = NULL;
    struct rdzv_kv_limits lb = {.pool = &root, .max_held_per_peer = 1000};
    const struct rdzv_kv_pool *who = NULL;
    char v[200];

    (void)state;
    assert_int_equal(rdzv_kv_new(&lb, 0, reply_cb, NULL, &b), 0);
    for (uint32_t i = 0; i < 100; i++)
        assert_int_equal(rdzv_kv_get(a, &peers[0], i, "k", 1000, 0), 0);
    assert_int_equal(child.held, 10);
    assert_int_equal(root.held, 10);
    assert_int_equal(child.held_refused, 90);
    assert_int_equal(root.held_refused, 0);
    assert_int_equal(rdzv_kv_last_refusal(a, &who), RDZV_KV_REFUSED_POOL_HELD);
    assert_ptr_equal(who, &child);
    for (uint32_t i = 0; i < 30; i++) /* the root has 20 left, for b (no child) */
        assert_int_equal(rdzv_kv_get(b, &peers[1], i, "k", 1000, 0), 0);
    assert_int_equal(root.held, 30);
    assert_int_equal(root.held_refused, 10);
    assert_int_equal(rdzv_kv_last_refusal(b, &who), RDZV_KV_REFUSED_POOL_HELD);
    assert_ptr_equal(who, &root);
    /* bytes: the child's cap first, then the root's */
    memset(v, 'x', sizeof(v));
    assert_int_equal(rdzv_kv_put(a, &peers[0], 1, "big", (const uint8_t *)v, 150), 0);
    assert_int_equal(rdzv_kv_last_refusal(a, &who), RDZV_KV_REFUSED_POOL_BYTES);
    assert_ptr_equal(who, &child);
    assert_int_equal(child.refused, 1);
    put(a, 0, 2, "k", "v"); /* answers a's 10 held GETs: their holds go back up the chain */
    assert_int_equal(child.held, 0);
    assert_int_equal(root.held, 20);
    assert_int_equal(child.bytes, 2 + RDZV_KV_KEY_OVERHEAD);
    assert_int_equal(root.bytes, 2 + RDZV_KV_KEY_OVERHEAD);
    assert_int_equal(rdzv_kv_put(b, &peers[1], 3, "huge", (const uint8_t *)v, 200), 0);
    assert_int_equal(rdzv_kv_put(b, &peers[1], 4, "huge2", (const uint8_t *)v, 200), 0);
    assert_int_equal(rdzv_kv_put(b, &peers[1], 5, "huge3", (const uint8_t *)v, 200), 0);
    assert_int_equal(rdzv_kv_put(b, &peers[1], 6, "huge4", (const uint8_t *)v, 200), 0);
    assert_int_equal(rdzv_kv_last_refusal(b, &who), RDZV_KV_REFUSED_POOL_BYTES);
    assert_ptr_equal(who, &root);
    assert_int_equal(root.refused, 1);
    rdzv_kv_free(a);
    assert_int_equal(child.bytes, 0);
    assert_int_equal(child.held, 0);
    rdzv_kv_free(b);
    assert_int_equal(root.bytes, 0);
    assert_int_equal(root.held, 0);
}

/* 200,000 held requests (a worker's flood of KV_GETs, caps raised): deadlines come out of the heap
 * in order, forget costs only the peer's, and nothing is left. Also times one message with them all
 * held, against a store holding none. */
static void test_held_heap(void **state)
{
    struct rdzv_kv_store *kv = held_store(300000, 300000, NULL);
    uint32_t n = 200000, expired = 0;
    char key[32];

    (void)state;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t wait = 1 + (uint32_t)((i * 2654435761u) % 100000u); /* scattered deadlines */

        snprintf(key, sizeof(key), "k%u", i % 5000);
        assert_int_equal(rdzv_kv_get(kv, &many[i % 1000], wait, key, wait, 0), 0);
    }
    assert_int_equal(rdzv_kv_held(kv), n);
    assert_int_equal(rdzv_kv_deadline(kv), 1);
    rdzv_kv_forget(kv, &many[0]);
    assert_int_equal(rdzv_kv_held(kv), n - n / 1000);
    for (uint64_t t = 0; t <= 100000; t += 997) {
        unsigned before = by_status[RDZV_KV_TIMEOUT];

        rdzv_kv_tick(kv, t);
        if (by_status[RDZV_KV_TIMEOUT] > before)
            assert_true(last_timeout <= t); /* req_id == wait_ms: nothing expired early */
        assert_true(rdzv_kv_deadline(kv) < 0 || rdzv_kv_deadline(kv) > (int64_t)t);
        expired = by_status[RDZV_KV_TIMEOUT];
    }
    rdzv_kv_tick(kv, 100001);
    expired = by_status[RDZV_KV_TIMEOUT];
    assert_int_equal(expired, n - n / 1000);
    assert_int_equal(rdzv_kv_held(kv), 0);
    rdzv_kv_free(kv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_get_wait),       cmocka_unit_test(test_barrier),
        cmocka_unit_test(test_round_change_stale), cmocka_unit_test(test_limits),
        cmocka_unit_test(test_many_keys),          cmocka_unit_test(test_pool),
        cmocka_unit_test(test_held_per_peer),      cmocka_unit_test(test_held_per_store),
        cmocka_unit_test(test_pool_chain),         cmocka_unit_test(test_held_heap),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
