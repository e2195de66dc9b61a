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

static void reply_cb(void *ctx, void *peer, uint32_t req_id, enum rdzv_kv_status status,
                     const uint8_t *value, uint32_t len)
{
    struct reply *r = &replies[n_replies++];

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_get_wait),       cmocka_unit_test(test_barrier),
        cmocka_unit_test(test_round_change_stale), cmocka_unit_test(test_limits),
        cmocka_unit_test(test_many_keys),          cmocka_unit_test(test_pool),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
