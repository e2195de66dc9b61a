/* Unit tests for rendezvous/cred.c: the credential forms, their derivation from the server's
 * secret, the PSK identities a server accepts, what each kind may do, and node secrets. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cred.h"

static unsigned char master[RDZV_KEY_LEN];

static int setup(void **state)
{
    (void)state;
    rdzv_cred_master("server-secret", master);
    return 0;
}

static void minted(enum rdzv_cred_kind kind, const char *scope, struct rdzv_cred *c, char *text)
{
    assert_int_equal(rdzv_cred_derive(master, kind, scope, c), 0);
    assert_int_equal(rdzv_cred_format(c, text, RDZV_CRED_TEXT_MAX + 1), 0);
}

/* What `muster token` prints parses back to the same kind, scope and key. */
static void test_format_parse_round_trip(void **state)
{
    static const struct {
        enum rdzv_cred_kind kind;
        const char *scope, *prefix;
    } cases[] = {{RDZV_CRED_JOB, "job42", "muster-job-v1:job42:"},
                 {RDZV_CRED_JOB, "team-a-*", "muster-job-v1:team-a-*:"},
                 {RDZV_CRED_JOB, "user@host:run", "muster-job-v1:user@host:run:"},
                 {RDZV_CRED_WORKER, "job42", "muster-worker-v1:job42:"},
                 {RDZV_CRED_OBSERVER, "", "muster-observer-v1:"}};
    char text[RDZV_CRED_TEXT_MAX + 1], err[256];
    struct rdzv_cred c, back;

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        minted(cases[i].kind, cases[i].scope, &c, text);
        assert_int_equal(strncmp(text, cases[i].prefix, strlen(cases[i].prefix)), 0);
        assert_int_equal(strlen(text), strlen(cases[i].prefix) + 64);
        assert_int_equal(rdzv_cred_parse(text, &back, err, sizeof(err)), 0);
        assert_int_equal(back.kind, cases[i].kind);
        assert_string_equal(back.scope, cases[i].scope);
        assert_memory_equal(back.key, c.key, RDZV_KEY_LEN);
    }
}

/* Each scope and kind has its own key: job A's key is not job B's, nor A's workers'. */
static void test_keys_differ(void **state)
{
    struct rdzv_cred a, b, wa, ob;
    unsigned char other[RDZV_KEY_LEN];

    (void)state;
    assert_int_equal(rdzv_cred_derive(master, RDZV_CRED_JOB, "A", &a), 0);
    assert_int_equal(rdzv_cred_derive(master, RDZV_CRED_JOB, "B", &b), 0);
    assert_int_equal(rdzv_cred_derive(master, RDZV_CRED_WORKER, "A", &wa), 0);
    assert_int_equal(rdzv_cred_derive(master, RDZV_CRED_OBSERVER, "", &ob), 0);
    assert_memory_not_equal(a.key, b.key, RDZV_KEY_LEN);
    assert_memory_not_equal(a.key, wa.key, RDZV_KEY_LEN);
    assert_memory_not_equal(a.key, ob.key, RDZV_KEY_LEN);
    assert_memory_not_equal(a.key, master, RDZV_KEY_LEN);
    rdzv_cred_master("another-secret", other);
    assert_int_equal(rdzv_cred_derive(other, RDZV_CRED_JOB, "A", &b), 0);
    assert_memory_not_equal(a.key, b.key, RDZV_KEY_LEN); /* a new secret revokes them all */
}

static void test_parse_refuses_malformed(void **state)
{
    static const char *const bad[] = {
        "",
        "muster-job-v1:",
        "muster-job-v1:job42",
        "muster-job-v1::0000000000000000000000000000000000000000000000000000000000000000",
        "muster-job-v1:job42:00",
        "muster-job-v1:job42:000000000000000000000000000000000000000000000000000000000000000g",
        "muster-job-v1:job 42:0000000000000000000000000000000000000000000000000000000000000000",
        "muster-job-v1:a*b:0000000000000000000000000000000000000000000000000000000000000000",
        "muster-job-v1:*:0000000000000000000000000000000000000000000000000000000000000000",
        "muster-worker-v1:job*:0000000000000000000000000000000000000000000000000000000000000000",
        "muster-observer-v1:job:0000000000000000000000000000000000000000000000000000000000000000",
    };
    struct rdzv_cred c;
    char err[256];

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        assert_int_equal(rdzv_cred_parse(bad[i], &c, err, sizeof(err)), -EINVAL);
        assert_true(err[0] != '\0');
        assert_null(strstr(err, "0000000000")); /* a key never reaches a message */
    }
}

/* Anything without a credential prefix is a server secret (any token muster server wrote). */
static void test_parse_server_secret(void **state)
{
    char text[300], err[256];
    unsigned char m[RDZV_KEY_LEN];
    struct rdzv_cred c;

    (void)state;
    assert_int_equal(rdzv_cred_parse("0123abcd", &c, err, sizeof(err)), 0);
    assert_int_equal(c.kind, RDZV_CRED_SERVER);
    rdzv_cred_master("0123abcd", m);
    assert_memory_equal(c.key, m, RDZV_KEY_LEN);
    memset(text, 'x', 257);
    text[257] = '\0';
    assert_int_equal(rdzv_cred_parse(text, &c, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "257 characters"));
}

/* The server derives the key of whatever identity is claimed: a claim is only as good as the
 * key behind it, and no identity maps to a key of the claimant's choosing. */
static void test_identity_round_trip(void **state)
{
    static const char *const ok[] = {"muster", "job:job42", "job:team-*", "worker:job42",
                                     "observer"};
    static const char *const bad[] = {
        "", "admin", "job:", "worker:", "worker:a*", "job:a b", "observer2", "job:*"};
    char back[RDZV_CRED_IDENTITY_MAX + 1];
    struct rdzv_cred c, d;

    (void)state;
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        assert_int_equal(
            rdzv_cred_from_identity(master, (const unsigned char *)ok[i], strlen(ok[i]), &c), 0);
        assert_int_equal(rdzv_cred_identity(&c, back, sizeof(back)), strlen(ok[i]));
        assert_string_equal(back, ok[i]);
        if (c.kind != RDZV_CRED_SERVER) {
            assert_int_equal(rdzv_cred_derive(master, c.kind, c.scope, &d), 0);
            assert_memory_equal(c.key, d.key, RDZV_KEY_LEN);
        }
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(
            rdzv_cred_from_identity(master, (const unsigned char *)bad[i], strlen(bad[i]), &c),
            -EACCES);
    assert_int_equal(rdzv_cred_from_identity(master, (const unsigned char *)"job:a\0b", 7, &c),
                     -EACCES);
}

/* docs/SECURITY.md's table, row by row. */
static void test_permissions(void **state)
{
    struct rdzv_cred srv = {.kind = RDZV_CRED_SERVER}, cert = {.kind = RDZV_CRED_CERT};
    struct rdzv_cred job, team, wrk, obs;

    (void)state;
    assert_int_equal(rdzv_cred_derive(master, RDZV_CRED_JOB, "A", &job), 0);
    assert_int_equal(rdzv_cred_derive(master, RDZV_CRED_JOB, "team-*", &team), 0);
    assert_int_equal(rdzv_cred_derive(master, RDZV_CRED_WORKER, "A", &wrk), 0);
    assert_int_equal(rdzv_cred_derive(master, RDZV_CRED_OBSERVER, "", &obs), 0);
    /* server secret and certificates: everything */
    assert_true(rdzv_cred_may_join(&srv, "anything") && rdzv_cred_may_join(&cert, "x"));
    assert_true(rdzv_cred_may_role(&srv, RDZV_ROLE_OBSERVER));
    /* job: its own job, nothing else; its workers' role too (same trust) */
    assert_true(rdzv_cred_may_join(&job, "A"));
    assert_false(rdzv_cred_may_join(&job, "B"));
    assert_false(rdzv_cred_may_join(&job, "AB"));
    assert_false(rdzv_cred_may_attach(&job, "B"));
    assert_true(rdzv_cred_may_status(&job, "A") && rdzv_cred_may_status(&job, ""));
    assert_false(rdzv_cred_may_status(&job, "B"));
    /* a team prefix */
    assert_true(rdzv_cred_may_join(&team, "team-x") && rdzv_cred_may_join(&team, "team-"));
    assert_false(rdzv_cred_may_join(&team, "team") || rdzv_cred_may_join(&team, "other"));
    /* worker: ATTACH to its own job only, no other role */
    assert_true(rdzv_cred_may_role(&wrk, RDZV_ROLE_WORKER));
    assert_false(rdzv_cred_may_role(&wrk, RDZV_ROLE_AGENT) ||
                 rdzv_cred_may_role(&wrk, RDZV_ROLE_OBSERVER));
    assert_true(rdzv_cred_may_attach(&wrk, "A"));
    assert_false(rdzv_cred_may_attach(&wrk, "B") || rdzv_cred_may_join(&wrk, "A"));
    /* observer: STATUS only */
    assert_true(rdzv_cred_may_role(&obs, RDZV_ROLE_OBSERVER) && rdzv_cred_may_status(&obs, "B"));
    assert_false(rdzv_cred_may_role(&obs, RDZV_ROLE_AGENT) ||
                 rdzv_cred_may_role(&obs, RDZV_ROLE_WORKER) || rdzv_cred_may_join(&obs, "A"));
}

/* A node id is a commitment: the secret opens it, nothing else does. */
static void test_node_secret(void **state)
{
    unsigned char s[RDZV_KEY_LEN], t[RDZV_KEY_LEN];
    uint64_t id, id2;

    (void)state;
    assert_int_equal(rdzv_node_secret_new(s, &id), 0);
    assert_int_equal(rdzv_node_secret_new(t, &id2), 0);
    assert_int_not_equal(id, id2);
    assert_true(rdzv_node_secret_ok(s, id));
    assert_false(rdzv_node_secret_ok(t, id));
    memset(t, 0, sizeof(t));
    assert_false(rdzv_node_secret_ok(t, id));
    s[31] ^= 1;
    assert_false(rdzv_node_secret_ok(s, id));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_parse_round_trip),
        cmocka_unit_test(test_keys_differ),
        cmocka_unit_test(test_parse_refuses_malformed),
        cmocka_unit_test(test_parse_server_secret),
        cmocka_unit_test(test_identity_round_trip),
        cmocka_unit_test(test_permissions),
        cmocka_unit_test(test_node_secret),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
