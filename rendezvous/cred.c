/* Credentials: see cred.h. */
#include "cred.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include <mbedtls/md.h>
#include <mbedtls/platform_util.h>
#include <mbedtls/sha256.h>

#define PFX_JOB "muster-job-v1:"
#define PFX_WORKER "muster-worker-v1:"
#define PFX_OBSERVER "muster-observer-v1:"
#define ID_SERVER "muster"
#define ID_JOB "job:"
#define ID_WORKER "worker:"
#define ID_OBSERVER "observer"
#define HEX_LEN (2 * RDZV_KEY_LEN)

static int starts(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

int rdzv_cred_equal(const unsigned char *a, const unsigned char *b, size_t n)
{
    unsigned char diff = 0;

    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}

void rdzv_cred_wipe(struct rdzv_cred *c)
{
    if (c != NULL)
        mbedtls_platform_zeroize(c, sizeof(*c));
}

void rdzv_cred_master(const char *secret, unsigned char master[RDZV_KEY_LEN])
{
    (void)mbedtls_sha256_ret((const unsigned char *)secret, strlen(secret), master, 0);
}

/* A scope or job id on a credential: printable ASCII without blanks, at most RDZV_ID_MAX bytes;
 * a job scope may end in one '*'. The job id rules proper are checked where ids enter. */
static int scope_ok(const char *s, int allow_star)
{
    size_t n = strlen(s);

    if (n == 0 || n > RDZV_ID_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];

        if (ch <= 0x20 || ch >= 0x7f)
            return 0;
        if (ch == '*' && !(allow_star && i == n - 1 && n > 1))
            return 0;
    }
    return 1;
}

static void hmac(const unsigned char master[RDZV_KEY_LEN], const char *label, const char *scope,
                 unsigned char out[RDZV_KEY_LEN])
{
    unsigned char msg[64 + RDZV_ID_MAX + 2];
    size_t ll = strlen(label) + 1, sl = strlen(scope);

    memcpy(msg, label, ll); /* the label's NUL separates it from the scope */
    memcpy(msg + ll, scope, sl);
    (void)mbedtls_md_hmac(mbedtls_md_info_from_type(MBEDTLS_MD_SHA256), master, RDZV_KEY_LEN, msg,
                          ll + sl, out);
}

int rdzv_cred_derive(const unsigned char master[RDZV_KEY_LEN], enum rdzv_cred_kind kind,
                     const char *scope, struct rdzv_cred *out)
{
    memset(out, 0, sizeof(*out));
    switch (kind) {
    case RDZV_CRED_JOB:
        if (!scope_ok(scope, 1))
            return -EINVAL;
        hmac(master, "muster job", scope, out->key);
        break;
    case RDZV_CRED_WORKER:
        if (!scope_ok(scope, 0))
            return -EINVAL;
        hmac(master, "muster worker", scope, out->key);
        break;
    case RDZV_CRED_OBSERVER:
        scope = "";
        hmac(master, "muster observer", "", out->key);
        break;
    default:
        return -EINVAL;
    }
    out->kind = kind;
    snprintf(out->scope, sizeof(out->scope), "%s", scope);
    return 0;
}

static int unhex(const char *s, unsigned char *out, size_t n)
{
    for (size_t i = 0; i < 2 * n; i++) {
        char ch = s[i];
        int v = ch >= '0' && ch <= '9'   ? ch - '0'
                : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                         : -1;
        if (v < 0)
            return -EINVAL;
        if (i % 2 == 0)
            out[i / 2] = (unsigned char)(v << 4);
        else
            out[i / 2] |= (unsigned char)v;
    }
    return s[2 * n] == '\0' ? 0 : -EINVAL;
}

/* "SCOPE:HEX64" (job, worker) or "HEX64" (observer) after the prefix. */
static int parse_scoped(const char *rest, enum rdzv_cred_kind kind, struct rdzv_cred *out)
{
    const char *colon = strrchr(rest, ':');
    size_t sl;

    if (kind == RDZV_CRED_OBSERVER)
        return strlen(rest) == HEX_LEN ? unhex(rest, out->key, RDZV_KEY_LEN) : -EINVAL;
    if (colon == NULL || strlen(colon + 1) != HEX_LEN || (sl = (size_t)(colon - rest)) == 0 ||
        sl > RDZV_ID_MAX)
        return -EINVAL;
    memcpy(out->scope, rest, sl);
    out->scope[sl] = '\0';
    if (!scope_ok(out->scope, kind == RDZV_CRED_JOB))
        return -EINVAL;
    return unhex(colon + 1, out->key, RDZV_KEY_LEN);
}

int rdzv_cred_parse(const char *text, struct rdzv_cred *out, char *err, size_t errlen)
{
    static const struct {
        const char *prefix;
        enum rdzv_cred_kind kind;
        const char *form;
    } kinds[] = {
        {PFX_JOB, RDZV_CRED_JOB, PFX_JOB "SCOPE:64-hex-digits"},
        {PFX_WORKER, RDZV_CRED_WORKER, PFX_WORKER "JOBID:64-hex-digits"},
        {PFX_OBSERVER, RDZV_CRED_OBSERVER, PFX_OBSERVER "64-hex-digits"},
    };

    memset(out, 0, sizeof(*out));
    if (text == NULL || text[0] == '\0') {
        snprintf(err, errlen, "empty token");
        return -EINVAL;
    }
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        if (!starts(text, kinds[i].prefix))
            continue;
        out->kind = kinds[i].kind;
        if (parse_scoped(text + strlen(kinds[i].prefix), kinds[i].kind, out) == 0)
            return 0;
        rdzv_cred_wipe(out);
        snprintf(err, errlen, "malformed credential: expected %s", kinds[i].form);
        return -EINVAL;
    }
    if (strlen(text) > RDZV_TOKEN_MAX) {
        snprintf(err, errlen, "the token is %zu characters; at most %d", strlen(text),
                 RDZV_TOKEN_MAX);
        return -EINVAL;
    }
    out->kind = RDZV_CRED_SERVER;
    rdzv_cred_master(text, out->key);
    return 0;
}

int rdzv_cred_format(const struct rdzv_cred *c, char *buf, size_t len)
{
    char hex[HEX_LEN + 1];
    int n;

    for (size_t i = 0; i < RDZV_KEY_LEN; i++)
        snprintf(hex + 2 * i, 3, "%02x", c->key[i]);
    if (c->kind == RDZV_CRED_JOB)
        n = snprintf(buf, len, PFX_JOB "%s:%s", c->scope, hex);
    else if (c->kind == RDZV_CRED_WORKER)
        n = snprintf(buf, len, PFX_WORKER "%s:%s", c->scope, hex);
    else if (c->kind == RDZV_CRED_OBSERVER)
        n = snprintf(buf, len, PFX_OBSERVER "%s", hex);
    else
        n = -1;
    mbedtls_platform_zeroize(hex, sizeof(hex));
    return n < 0 || (size_t)n >= len ? -EINVAL : 0;
}

size_t rdzv_cred_identity(const struct rdzv_cred *c, char *buf, size_t len)
{
    int n;

    switch (c->kind) {
    case RDZV_CRED_JOB:
        n = snprintf(buf, len, ID_JOB "%s", c->scope);
        break;
    case RDZV_CRED_WORKER:
        n = snprintf(buf, len, ID_WORKER "%s", c->scope);
        break;
    case RDZV_CRED_OBSERVER:
        n = snprintf(buf, len, ID_OBSERVER);
        break;
    default:
        n = snprintf(buf, len, ID_SERVER);
        break;
    }
    return n < 0 ? 0 : (size_t)n < len ? (size_t)n : len - 1;
}

int rdzv_cred_from_identity(const unsigned char master[RDZV_KEY_LEN], const unsigned char *id,
                            size_t id_len, struct rdzv_cred *out)
{
    char s[RDZV_CRED_IDENTITY_MAX + 1];

    memset(out, 0, sizeof(*out));
    if (id_len == 0 || id_len > RDZV_CRED_IDENTITY_MAX || memchr(id, '\0', id_len) != NULL)
        return -EACCES;
    memcpy(s, id, id_len);
    s[id_len] = '\0';
    if (strcmp(s, ID_SERVER) == 0) {
        out->kind = RDZV_CRED_SERVER;
        memcpy(out->key, master, RDZV_KEY_LEN);
        return 0;
    }
    if (starts(s, ID_JOB))
        return rdzv_cred_derive(master, RDZV_CRED_JOB, s + strlen(ID_JOB), out) ? -EACCES : 0;
    if (starts(s, ID_WORKER))
        return rdzv_cred_derive(master, RDZV_CRED_WORKER, s + strlen(ID_WORKER), out) ? -EACCES : 0;
    if (strcmp(s, ID_OBSERVER) == 0)
        return rdzv_cred_derive(master, RDZV_CRED_OBSERVER, "", out) ? -EACCES : 0;
    return -EACCES;
}

int rdzv_cred_scope_covers(const char *scope, const char *job_id)
{
    size_t n = strlen(scope);

    if (n > 0 && scope[n - 1] == '*')
        return strncmp(scope, job_id, n - 1) == 0;
    return strcmp(scope, job_id) == 0;
}

static int all_powerful(const struct rdzv_cred *c)
{
    return c->kind == RDZV_CRED_SERVER || c->kind == RDZV_CRED_CERT;
}

int rdzv_cred_may_role(const struct rdzv_cred *c, unsigned role)
{
    switch (c->kind) {
    case RDZV_CRED_SERVER:
    case RDZV_CRED_CERT:
    case RDZV_CRED_JOB:
        return role == RDZV_ROLE_AGENT || role == RDZV_ROLE_WORKER || role == RDZV_ROLE_OBSERVER;
    case RDZV_CRED_WORKER:
        return role == RDZV_ROLE_WORKER;
    case RDZV_CRED_OBSERVER:
        return role == RDZV_ROLE_OBSERVER;
    default:
        return 0;
    }
}

int rdzv_cred_may_join(const struct rdzv_cred *c, const char *job_id)
{
    return all_powerful(c) ||
           (c->kind == RDZV_CRED_JOB && rdzv_cred_scope_covers(c->scope, job_id));
}

int rdzv_cred_may_attach(const struct rdzv_cred *c, const char *job_id)
{
    if (c->kind == RDZV_CRED_WORKER)
        return strcmp(c->scope, job_id) == 0;
    return rdzv_cred_may_join(c, job_id);
}

int rdzv_cred_may_status(const struct rdzv_cred *c, const char *job_id)
{
    if (all_powerful(c) || c->kind == RDZV_CRED_OBSERVER)
        return 1;
    if (c->kind != RDZV_CRED_JOB)
        return 0;
    return job_id[0] == '\0' || rdzv_cred_scope_covers(c->scope, job_id);
}

uint64_t rdzv_node_id_of(const unsigned char secret[RDZV_KEY_LEN])
{
    unsigned char h[32];
    uint64_t id = 0;

    (void)mbedtls_sha256_ret(secret, RDZV_KEY_LEN, h, 0);
    for (int i = 0; i < 8; i++)
        id = id << 8 | h[i];
    return id;
}

int rdzv_node_secret_ok(const unsigned char secret[RDZV_KEY_LEN], uint64_t node_id)
{
    uint64_t got = rdzv_node_id_of(secret);

    return (got ^ node_id) == 0;
}

int rdzv_node_secret_new(unsigned char secret[RDZV_KEY_LEN], uint64_t *node_id)
{
    size_t got = 0;

    while (got < RDZV_KEY_LEN) {
        ssize_t n = getrandom(secret + got, RDZV_KEY_LEN - got, 0);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -EIO;
        got += (size_t)n;
    }
    *node_id = rdzv_node_id_of(secret);
    return 0;
}

int rdzv_cred_mint(const char *secret, enum rdzv_cred_kind kind, const char *scope, char *text,
                   size_t len)
{
    unsigned char master[RDZV_KEY_LEN];
    struct rdzv_cred c = {0};
    int rc;

    rdzv_cred_master(secret, master);
    rc = rdzv_cred_derive(master, kind, scope, &c);
    if (rc == 0)
        rc = rdzv_cred_format(&c, text, len);
    mbedtls_platform_zeroize(master, sizeof(master));
    rdzv_cred_wipe(&c);
    return rc;
}
