/* Credentials: who may do what on a rendezvous server (docs/SECURITY.md has the table).
 *
 * Everything derives from the server's secret S (its token file), through one master key
 * M = SHA-256(S), so the server keeps nothing per job and still knows every key after a restart:
 *
 *   kind      string form (token files, MUSTER_TOKEN)     TLS PSK identity   PSK
 *   server    S itself (any text without a prefix below)   "muster"           M
 *   job       muster-job-v1:SCOPE:HEX64                     "job:SCOPE"        HMAC(M, "muster
 * job\0" SCOPE) worker    muster-worker-v1:JOBID:HEX64                  "worker:JOBID"     HMAC(M,
 * "muster worker\0" JOBID) observer  muster-observer-v1:HEX64                      "observer"
 * HMAC(M, "muster observer")
 *
 * SCOPE is a job id, or a prefix ending in '*' ("team-a-*" admits every job id starting with
 * "team-a-"). The TLS handshake proves the key (a PSK handshake fails without it); the server
 * rederives the key from the identity in its PSK callback, so a credential cannot claim another
 * scope. What each kind may do is decided by rdzv_cred_may_*() below, in one place.
 *
 * Node identity is separate: an agent picks a random 32-byte node secret and its node id is the
 * first 8 bytes of SHA-256(secret), big-endian. Every JOIN and REJOIN carries the secret (inside
 * TLS, to the server only), so the node id that `muster status` shows is a commitment nobody
 * else can open. */
#ifndef MUSTER_RDZV_CRED_H
#define MUSTER_RDZV_CRED_H

#include <stddef.h>
#include <stdint.h>

#include "message.h"

#define RDZV_KEY_LEN 32
/* Longest string form: "muster-worker-v1:" + 128-byte id + ":" + 64 hex digits. */
#define RDZV_CRED_TEXT_MAX 224
#define RDZV_CRED_IDENTITY_MAX (8 + RDZV_ID_MAX)

enum rdzv_cred_kind {
    RDZV_CRED_NONE = 0,
    RDZV_CRED_SERVER,   /* the server's own secret: operators, standalone agents */
    RDZV_CRED_JOB,      /* a job or a family of jobs (prefix*): agents and `muster status` */
    RDZV_CRED_WORKER,   /* one job's workers: ATTACH and its KV store, nothing else */
    RDZV_CRED_OBSERVER, /* read-only: STATUS of every job */
    RDZV_CRED_CERT,     /* a client certificate that verified against the server's CA */
};

struct rdzv_cred {
    enum rdzv_cred_kind kind;
    char scope[RDZV_ID_MAX + 1];     /* job: the scope ("id" or "prefix*"); worker: the job id */
    unsigned char key[RDZV_KEY_LEN]; /* the PSK */
};

/* Parses a credential's string form (token file line or MUSTER_TOKEN). A string with one of the
 * prefixes above must be well formed; any other non-empty string is a server secret. Returns 0,
 * or -EINVAL with a one-line reason in err (never the key). */
int rdzv_cred_parse(const char *text, struct rdzv_cred *out, char *err, size_t errlen);

/* The master key M of a server secret. */
void rdzv_cred_master(const char *secret, unsigned char master[RDZV_KEY_LEN]);

/* Derives the credential of kind (JOB, WORKER or OBSERVER) and scope from the master key.
 * scope: JOB "id" or "prefix*"; WORKER the job id; OBSERVER ignored. Returns 0 or -EINVAL
 * (bad scope or kind). */
int rdzv_cred_derive(const unsigned char master[RDZV_KEY_LEN], enum rdzv_cred_kind kind,
                     const char *scope, struct rdzv_cred *out);

/* Writes the string form of c into buf (RDZV_CRED_TEXT_MAX + 1 bytes suffice). Returns 0 or
 * -EINVAL for a server or certificate credential (they have no string form of their own). */
int rdzv_cred_format(const struct rdzv_cred *c, char *buf, size_t len);

/* The string form of the credential of kind and scope (as rdzv_cred_derive) minted from the
 * server secret, into text (RDZV_CRED_TEXT_MAX + 1 bytes); the keys in between are wiped.
 * `muster token` and `muster run --http`. Returns 0 or -EINVAL. */
int rdzv_cred_mint(const char *secret, enum rdzv_cred_kind kind, const char *scope, char *text,
                   size_t len);

/* The TLS PSK identity of c into buf (RDZV_CRED_IDENTITY_MAX + 1 bytes). Returns its length. */
size_t rdzv_cred_identity(const struct rdzv_cred *c, char *buf, size_t len);

/* Server side: the credential a PSK identity claims, with its key derived from master. Returns
 * 0, or -EACCES for an identity that names no valid credential. */
int rdzv_cred_from_identity(const unsigned char master[RDZV_KEY_LEN], const unsigned char *id,
                            size_t id_len, struct rdzv_cred *out);

/* 1 when scope ("id" or "prefix*") covers job_id. */
int rdzv_cred_scope_covers(const char *scope, const char *job_id);

/* What a connection authenticated as c may do. Each returns 1 (allowed) or 0. */
int rdzv_cred_may_role(const struct rdzv_cred *c, unsigned role);        /* HELLO role */
int rdzv_cred_may_join(const struct rdzv_cred *c, const char *job_id);   /* JOIN, REJOIN */
int rdzv_cred_may_attach(const struct rdzv_cred *c, const char *job_id); /* ATTACH */
/* STATUS_REQ for job_id ("" = every job the credential covers). */
int rdzv_cred_may_status(const struct rdzv_cred *c, const char *job_id);

/* Node identity: a new random secret and its node id. Returns 0 or -EIO (no randomness). */
int rdzv_node_secret_new(unsigned char secret[RDZV_KEY_LEN], uint64_t *node_id);
/* The node id a secret commits to. */
uint64_t rdzv_node_id_of(const unsigned char secret[RDZV_KEY_LEN]);
/* 1 when secret opens node_id (compared in constant time). */
int rdzv_node_secret_ok(const unsigned char secret[RDZV_KEY_LEN], uint64_t node_id);

/* Constant-time comparison of n bytes: 1 when equal. */
int rdzv_cred_equal(const unsigned char *a, const unsigned char *b, size_t n);

/* Zeroes c's key (and the rest). Accepts NULL. */
void rdzv_cred_wipe(struct rdzv_cred *c);

#endif
