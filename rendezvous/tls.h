/* TLS 1.2 for every control connection (mbedTLS 2.28), in one of two modes:
 *  - token (pre-shared key): a client's credential (cred.h: the server's secret, or a job,
 *    worker or observer credential derived from it) is the PSK, its kind and scope the PSK
 *    identity; the server derives the key of the identity from its secret. ECDHE-PSK suites
 *    (forward secrecy) unless a client asks for plain PSK ones (no public-key work: for
 *    rendezvous of thousands of nodes); either way a passive observer learns nothing and a peer
 *    without the key cannot finish the handshake;
 *  - certificates: --tls-cert/--tls-key/--tls-ca, peer verification required on both sides
 *    (the server verifies client certificates), host name checked by clients.
 * One struct rdzv_tls (an mbedtls_ssl_config with its DRBG and keys) is shared by all the
 * connections of a server or a client; each rdzv_conn owns its mbedtls_ssl_context.
 * mbedTLS errors are mapped to negative errnos here only (rdzv_tls_map_err; STYLE.md rule 3). */
#ifndef MUSTER_RDZV_TLS_H
#define MUSTER_RDZV_TLS_H

#include <stddef.h>

struct rdzv_tls_opts {
    const char *token;           /* token (PSK) mode when set and cert_file is NULL. Client: a
                                    credential's string form (cred.h). Server: its secret, also in
                                    certificate mode (where workers still use PSK); NULL there = a
                                    random one */
    const char *cert_file;       /* certificate mode: this side's certificate chain (PEM) */
    const char *key_file;        /* its private key (PEM) */
    const char *ca_file;         /* the CA that signs the peers' certificates (PEM) */
    const char *server_name;     /* client, certificate mode: the name the server's certificate
                                    must carry (the host of --rdzv-endpoint) */
    int no_forward_secrecy;      /* client, token mode: offer plain PSK suites only */
    int require_forward_secrecy; /* server: refuse plain PSK suites */
    int bulk;                    /* token mode: only plain PSK with ChaCha20-Poly1305,
                                    mbedTLS 2.28's fastest cipher here (checkpoint replica
                                    links: agent/replica_link.c); a server then does no
                                    public-key work for anyone */
};

struct rdzv_tls;

/* Builds a shared configuration. Returns 0, -EINVAL (no token and no certificate, or a
 * half-given certificate set), -ENOENT/-EACCES for unreadable files, -EBADMSG for files that
 * do not parse, -ENOMEM; a one-line reason is written to err (never the token). */
int rdzv_tls_new(const struct rdzv_tls_opts *o, int is_server, struct rdzv_tls **out, char *err,
                 size_t errlen);

/* Drops a reference to the configuration (rdzv_tls_new gives the caller one) and frees it with
 * the last; every connection using it must be closed first, except that a server handshake
 * step still in the thread pool (conn.c) holds its own reference until it returns to the
 * loop. Accepts NULL. */
void rdzv_tls_free(struct rdzv_tls *t);

/* conn.c's queue of server handshake steps waiting for the thread pool, and how many are
 * there (conn.c "server handshake steps off the loop"); kept here because a configuration
 * belongs to one server and so to one loop. Loop thread only. */
struct rdzv_tls_steps {
    void *head, *tail; /* struct rdzv_conn_tls (conn.c), linked through its next_wait */
    unsigned running;
};
struct rdzv_tls_steps *rdzv_tls_steps(struct rdzv_tls *t);

/* Takes another reference, dropped by rdzv_tls_free. References are counted without locks:
 * take and drop them on one thread (the loop's). */
void rdzv_tls_hold(struct rdzv_tls *t);

/* Finishes a token-mode server's configuration, deferred by rdzv_tls_new until a connection
 * needs it (entropy, DRBG, mbedTLS configuration); a no-op afterwards and for every other kind.
 * Loop thread only (conn.c calls it before each connection's set-up). Returns 0, or -EIO/-ENOMEM
 * after one line on stderr. */
int rdzv_tls_prepare(struct rdzv_tls *t);

/* For conn.c (and libmuster), which set up one mbedtls_ssl_context per connection: the shared
 * configuration (borrowed, lives as long as t), and the name a client in certificate mode must
 * check with mbedtls_ssl_set_hostname (NULL for a server or in token mode). */
struct mbedtls_ssl_config;
const struct mbedtls_ssl_config *rdzv_tls_conf(const struct rdzv_tls *t);
const char *rdzv_tls_server_name(const struct rdzv_tls *t);

/* 1 in certificate mode. */
int rdzv_tls_cert_mode(const struct rdzv_tls *t);

/* Server: the credential its own key is (what a peer proving that key holds): a server secret,
 * or for a server keyed by a job credential that job credential. For the in-process channel of
 * the agent that hosts the server (server.h rdzv_server_connect_local). Returns 0, or -ENOKEY
 * for a client or a server without a key. */
struct rdzv_cred;
int rdzv_tls_own_cred(const struct rdzv_tls *t, struct rdzv_cred *out);

/* Server: the master key credentials derive from (cred.h); NULL for a client. Borrowed. */
const unsigned char *rdzv_tls_master(const struct rdzv_tls *t);

/* Server: called from inside a handshake (possibly on another thread than the loop, so it must
 * only store) with the credential that the peer's PSK identity names, once its key is set. */
struct mbedtls_ssl_context;
typedef void (*rdzv_tls_cred_sink_cb)(struct mbedtls_ssl_context *ssl, const struct rdzv_cred *c);
void rdzv_tls_set_cred_sink(struct rdzv_tls *t, rdzv_tls_cred_sink_cb sink);

struct mbedtls_ssl_context;

/* Maps a fatal mbedTLS error ret of ssl (done: after the handshake) to a negative errno, with a
 * one-line reason (len bytes; reason may be NULL): -EACCES (the peer refused our token or
 * certificate, or we refused its: fatal auth alert, failed verification, bad MAC during the
 * handshake, unknown PSK identity), -ENOMEM, -ECONNRESET (the peer closed), -EPIPE (sending
 * failed), else -EPROTO.
 * Used by conn.c (the server and agents) and libmuster, so both name a failure alike. */
int rdzv_tls_map_err(const struct mbedtls_ssl_context *ssl, int ret, int done, char *reason,
                     size_t len);

#endif
