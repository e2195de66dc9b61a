/* libFuzzer target: the credential parsers of rendezvous/cred.c, which take text from token
 * files and MUSTER_TOKEN (rdzv_cred_parse) and PSK identities from any peer before it is
 * authenticated (rdzv_cred_from_identity, run inside the server's TLS handshake).
 * Byte 0 picks the parser; the rest is its input. Contract checked:
 *  - parse: a job/worker/observer credential formats back to a string that parses to the same
 *    credential; a server secret keeps the SHA-256 of its text as key;
 *  - from_identity: an accepted identity is re-encoded byte for byte by rdzv_cred_identity, and
 *    its key is the derivation of its scope (so no identity can pick its own key);
 *  - scope_covers never reads past either string. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cred.h"
#include "fuzz_common.h"

static void check_parse(const char *text)
{
    struct rdzv_cred c, again;
    char out[RDZV_CRED_TEXT_MAX + 1], err[256];

    if (rdzv_cred_parse(text, &c, err, sizeof(err)) != 0)
        return;
    if (c.kind == RDZV_CRED_SERVER) {
        unsigned char m[RDZV_KEY_LEN];
        rdzv_cred_master(text, m);
        if (memcmp(m, c.key, sizeof(m)) != 0)
            abort();
        return;
    }
    if (rdzv_cred_format(&c, out, sizeof(out)) != 0 ||
        rdzv_cred_parse(out, &again, err, sizeof(err)) != 0 || again.kind != c.kind ||
        strcmp(again.scope, c.scope) != 0 || memcmp(again.key, c.key, sizeof(c.key)) != 0)
        abort();
}

static void check_identity(const uint8_t *id, size_t len)
{
    static const unsigned char master[RDZV_KEY_LEN] = {1, 2, 3};
    struct rdzv_cred c, d;
    char back[RDZV_CRED_IDENTITY_MAX + 1];

    if (rdzv_cred_from_identity(master, id, len, &c) != 0)
        return;
    if (rdzv_cred_identity(&c, back, sizeof(back)) != len || memcmp(back, id, len) != 0)
        abort();
    if (c.kind != RDZV_CRED_SERVER && (rdzv_cred_derive(master, c.kind, c.scope, &d) != 0 ||
                                       memcmp(d.key, c.key, sizeof(c.key)) != 0))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text;

    if (size < 1)
        return 0;
    if (data[0] & 1) {
        check_identity(data + 1, size - 1);
        return 0;
    }
    text = fuzz_strndup(data + 1, size - 1);
    if (text == NULL)
        return 0;
    check_parse(text);
    (void)rdzv_cred_scope_covers(text, "team-a-job1");
    free(text);
    return 0;
}
