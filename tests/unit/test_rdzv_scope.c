/* The credential scope table (rendezvous/scope.h): one entry per scope string,
 * shared by its holders, gone with the last reference; lookups stay right when chains collide. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "scope.h"

static struct rdzv__scopes table;

static int teardown(void **state)
{
    (void)state;
    rdzv__scopes_free(&table);
    assert_int_equal(table.n, 0);
    return 0;
}

static void test_refcount(void **state)
{
    struct rdzv__scope *a = NULL, *a2 = NULL, *b = NULL;

    (void)state;
    assert_null(rdzv__scope_find(&table, "teamA-*"));
    assert_int_equal(rdzv__scope_get(&table, "teamA-*", &a), 0);
    assert_int_equal(rdzv__scope_get(&table, "teamA-*", &a2), 0);
    assert_ptr_equal(a, a2);
    assert_int_equal(a->refs, 2);
    assert_int_equal(a->jobs + a->connections, 0);
    assert_int_equal(rdzv__scope_get(&table, "teamA-x", &b), 0); /* another scope, not a prefix */
    assert_ptr_not_equal(a, b);
    assert_int_equal(table.n, 2);
    rdzv__scope_put(&table, a);
    assert_ptr_equal(rdzv__scope_find(&table, "teamA-*"), a2);
    rdzv__scope_put(&table, a2); /* the last one: freed */
    assert_null(rdzv__scope_find(&table, "teamA-*"));
    assert_int_equal(table.n, 1);
    rdzv__scope_put(&table, NULL);
    rdzv__scope_put(&table, b);
    assert_int_equal(table.n, 0);
}

/* More scopes than buckets: every one is found, and removing some keeps the others. */
static void test_many(void **state)
{
    enum { N = 3 * SRV_SCOPE_BUCKETS };
    static struct rdzv__scope *s[N];
    char name[32];

    (void)state;
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof(name), "team-%d-*", i);
        assert_int_equal(rdzv__scope_get(&table, name, &s[i]), 0);
    }
    assert_int_equal(table.n, N);
    for (int i = 0; i < N; i += 2)
        rdzv__scope_put(&table, s[i]);
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof(name), "team-%d-*", i);
        assert_ptr_equal(rdzv__scope_find(&table, name), i % 2 ? s[i] : NULL);
    }
    assert_int_equal(table.n, N / 2);
}

static void test_too_long(void **state)
{
    char name[RDZV_ID_MAX + 2];
    struct rdzv__scope *s = NULL;

    (void)state;
    memset(name, 'a', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    assert_int_equal(rdzv__scope_get(&table, name, &s), -EINVAL);
    assert_null(s);
    name[RDZV_ID_MAX] = '\0';
    assert_int_equal(rdzv__scope_get(&table, name, &s), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_refcount, teardown),
        cmocka_unit_test_teardown(test_many, teardown),
        cmocka_unit_test_teardown(test_too_long, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
