/* Shared TLS configuration: see tls.h. */
#include "tls.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/error.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/entropy.h>
#include <mbedtls/pk.h>
#include <mbedtls/platform_util.h>
#include <mbedtls/sha256.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>

#include "cred.h"
#include "log.h"

struct rdzv_tls {
    mbedtls_entropy_context entropy;
    mbedtls_ctr_drbg_context drbg;
    mbedtls_ssl_config conf;
    mbedtls_x509_crt cert, ca;
    mbedtls_pk_context key;
    char *server_name; /* client, certificate mode */
    int cert_mode;
    /* server: the master key every credential derives from (cred.h), and where the PSK callback
     * reports which credential a handshake proved. */
    unsigned char master[RDZV_KEY_LEN];
    int has_master;
    /* a server keyed by a job credential (an agent hosting its job's rendezvous with a job
     * token): that job's agents prove the job key itself, and everything else derives from it */
    char job_scope[RDZV_ID_MAX + 1];
    rdzv_tls_cred_sink_cb cred_sink;
    /* A token-mode server sets up mbedTLS (entropy, DRBG, the configuration) only when its
     * first TLS connection comes (rdzv_tls_prepare): a standalone agent's own server may never
     * see one (its agent uses the in-process channel), and that set-up was ~0.5 MB of the
     * agent's resident memory. */
    int lazy;
    int require_fs;
    int bulk;      /* server: only psk_bulk_suites (a checkpoint replica link) */
    unsigned refs; /* the owner's, plus one per server handshake step in the pool (conn.c) */
    struct rdzv_tls_steps steps;
};

/* Only the two cheap curves: an unauthenticated ClientHello offering only secp521r1
 * made the server spend ~4.8 ms on a key it would throw away (X25519: ~1.2 ms), so a flood of
 * such hellos cost four times as much. With this list a hello that offers neither X25519 nor
 * P-256 fails in ServerHello, before any key generation. The list also bounds the curve of the
 * peer's end-entity certificate key (mbedTLS checks it against the same list): certificates
 * must have P-256 (or RSA) keys; CAs signing them may use any curve (docs/SECURITY.md). */
static const mbedtls_ecp_group_id preferred_curves[] = {
    MBEDTLS_ECP_DP_CURVE25519, MBEDTLS_ECP_DP_SECP256R1, MBEDTLS_ECP_DP_NONE};

/* Pre-shared-key suites, in two strengths (docs/SECURITY.md "Forward secrecy"):
 *  - ECDHE-PSK: forward secrecy, so a credential that leaks later does not decrypt recorded
 *    sessions; costs an X25519 key pair and a shared secret per side (~1.2 ms each here).
 *    2.28 has no ECDHE-PSK with AES-GCM; CBC-SHA256 (encrypt-then-MAC) is the fallback;
 *  - plain PSK: the same authentication and encryption, keys from the credential alone: no
 *    public-key arithmetic (~40x cheaper), no forward secrecy. For rendezvous at the scale of
 *    thousands of nodes (--rdzv-conf forward_secrecy=0).
 * A server lists ECDHE first and mbedTLS picks by the server's order, so a client offering
 * both gets forward secrecy; a client offering only plain PSK gets plain PSK unless the server
 * requires forward secrecy (muster server --require-forward-secrecy). */
#define PSK_FS_SUITES                                                                              \
    MBEDTLS_TLS_ECDHE_PSK_WITH_CHACHA20_POLY1305_SHA256,                                           \
        MBEDTLS_TLS_ECDHE_PSK_WITH_AES_128_CBC_SHA256
#define PSK_PLAIN_SUITES                                                                           \
    MBEDTLS_TLS_PSK_WITH_AES_128_GCM_SHA256, MBEDTLS_TLS_PSK_WITH_CHACHA20_POLY1305_SHA256
#define CERT_SUITES                                                                                \
    MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,                                               \
        MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,                                           \
        MBEDTLS_TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,                                     \
        MBEDTLS_TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,                                             \
        MBEDTLS_TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,                                             \
        MBEDTLS_TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256

static const int psk_fs_suites[] = {PSK_FS_SUITES, 0};
static const int psk_plain_suites[] = {PSK_PLAIN_SUITES, 0};
static const int psk_any_suites[] = {PSK_FS_SUITES, PSK_PLAIN_SUITES, 0};
/* Bulk transfers (checkpoint replicas): mbedTLS 2.28 seals ~450 MB/s with ChaCha20-Poly1305
 * and ~270 MB/s with AES-128-GCM on one core here (its GCM is per block even with AES-NI). */
static const int psk_bulk_suites[] = {MBEDTLS_TLS_PSK_WITH_CHACHA20_POLY1305_SHA256, 0};
static const int cert_suites[] = {CERT_SUITES, 0};
/* A certificate-mode server also speaks PSK, for workers: they hold a worker credential, never
 * a certificate (worker code is untrusted). */
static const int cert_and_psk_fs_suites[] = {CERT_SUITES, PSK_FS_SUITES, 0};
static const int cert_and_psk_any_suites[] = {CERT_SUITES, PSK_FS_SUITES, PSK_PLAIN_SUITES, 0};

/* mbedTLS reports every unreadable file as FILE_IO_ERROR; ask the OS which it was. */
static int check_readable(const char *what, const char *path, char *err, size_t errlen)
{
    if (access(path, R_OK) == 0)
        return 0;
    int e = errno == ENOENT ? -ENOENT : -EACCES;

    snprintf(err, errlen, "cannot read the TLS %s %s: %s", what, path, strerror(-e));
    return e;
}

static int load_certs(struct rdzv_tls *t, const struct rdzv_tls_opts *o, char *err, size_t errlen)
{
    int ret;

    if ((ret = check_readable("certificate", o->cert_file, err, errlen)) < 0 ||
        (ret = check_readable("key", o->key_file, err, errlen)) < 0 ||
        (ret = check_readable("CA", o->ca_file, err, errlen)) < 0)
        return ret;
    if (mbedtls_x509_crt_parse_file(&t->cert, o->cert_file) != 0) {
        snprintf(err, errlen, "%s: not a PEM certificate chain", o->cert_file);
        return -EBADMSG;
    }
    if (mbedtls_pk_parse_keyfile(&t->key, o->key_file, NULL) != 0) {
        snprintf(err, errlen, "%s: not an unencrypted PEM private key", o->key_file);
        return -EBADMSG;
    }
    if (mbedtls_x509_crt_parse_file(&t->ca, o->ca_file) != 0) {
        snprintf(err, errlen, "%s: not a PEM CA certificate", o->ca_file);
        return -EBADMSG;
    }
    if (mbedtls_pk_check_pair(&t->cert.pk, &t->key) != 0) {
        snprintf(err, errlen, "%s does not match the certificate %s", o->key_file, o->cert_file);
        return -EBADMSG;
    }
    mbedtls_ssl_conf_ca_chain(&t->conf, &t->ca, NULL);
    if (mbedtls_ssl_conf_own_cert(&t->conf, &t->cert, &t->key) != 0) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    /* The server demands a client certificate too (mutual TLS). */
    mbedtls_ssl_conf_authmode(&t->conf, MBEDTLS_SSL_VERIFY_REQUIRED);
    mbedtls_ssl_conf_ciphersuites(&t->conf, cert_suites);
    return 0;
}

/* Client: the PSK and identity of the credential in token (cred.h string form: a server secret,
 * a job, worker or observer credential). The token itself never sits in mbedTLS's memory. */
static int set_client_psk(struct rdzv_tls *t, const struct rdzv_tls_opts *o, char *err,
                          size_t errlen)
{
    char id[RDZV_CRED_IDENTITY_MAX + 1];
    struct rdzv_cred c;
    int ret = rdzv_cred_parse(o->token, &c, err, errlen);

    if (ret < 0)
        return ret;
    size_t idlen = rdzv_cred_identity(&c, id, sizeof(id));

    ret = mbedtls_ssl_conf_psk(&t->conf, c.key, sizeof(c.key), (const unsigned char *)id, idlen);
    rdzv_cred_wipe(&c);
    if (ret != 0) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    mbedtls_ssl_conf_ciphersuites(&t->conf, o->bulk                 ? psk_bulk_suites
                                            : o->no_forward_secrecy ? psk_plain_suites
                                                                    : psk_fs_suites);
    return 0;
}

/* Server: derives the key of whatever credential the identity names (cred.h), so a peer proves
 * that credential by finishing the handshake; an identity that names none is refused at once.
 * Only hashing happens here: no state is kept, and it is safe from any thread. */
static int psk_cb(void *p, mbedtls_ssl_context *ssl, const unsigned char *id, size_t len)
{
    struct rdzv_tls *t = p;
    struct rdzv_cred c;
    int ret;

    if (t->job_scope[0] != '\0' && len == 4 + strlen(t->job_scope) && memcmp(id, "job:", 4) == 0 &&
        memcmp(id + 4, t->job_scope, len - 4) == 0) {
        c = (struct rdzv_cred){.kind = RDZV_CRED_JOB};
        memcpy(c.scope, t->job_scope, sizeof(c.scope));
        memcpy(c.key, t->master, sizeof(c.key));
    } else if ((t->job_scope[0] != '\0' && len == 6 && memcmp(id, "muster", 6) == 0) ||
               (t->job_scope[0] != '\0' && len > 4 && memcmp(id, "job:", 4) == 0) ||
               rdzv_cred_from_identity(t->master, id, len, &c) < 0) {
        return -1;
    }
    ret = mbedtls_ssl_set_hs_psk(ssl, c.key, sizeof(c.key));
    if (ret == 0 && t->cred_sink != NULL)
        t->cred_sink(ssl, &c);
    rdzv_cred_wipe(&c);
    return ret == 0 ? 0 : -1;
}

/* Server: the master key from the server's secret; a certificate-mode server without one makes
 * a random one (worker credentials then change when the server restarts). */
static int set_server_psk(struct rdzv_tls *t, const struct rdzv_tls_opts *o, char *err,
                          size_t errlen)
{
    const char *secret = o->token;
    struct rdzv_cred c;

    if (secret != NULL && secret[0] != '\0') {
        if (rdzv_cred_parse(secret, &c, err, errlen) < 0)
            return -EINVAL;
        if (c.kind == RDZV_CRED_JOB) {
            memcpy(t->master, c.key, sizeof(t->master));
            memcpy(t->job_scope, c.scope, sizeof(t->job_scope));
        } else if (c.kind == RDZV_CRED_SERVER) {
            rdzv_cred_master(secret, t->master);
        } else {
            rdzv_cred_wipe(&c);
            snprintf(err, errlen, "a worker or read-only credential cannot key a server");
            return -EINVAL;
        }
        rdzv_cred_wipe(&c);
    } else if (mbedtls_ctr_drbg_random(&t->drbg, t->master, sizeof(t->master)) != 0) {
        snprintf(err, errlen, "cannot draw a random key");
        return -EIO;
    }
    t->has_master = 1;
    t->require_fs = o->require_forward_secrecy;
    t->bulk = o->bulk;
    return 0;
}

/* The server's PSK side of the configuration: the callback and the suites. */
static void conf_server_psk(struct rdzv_tls *t)
{
    mbedtls_ssl_conf_psk_cb(&t->conf, psk_cb, t);
    if (t->bulk) /* no ECDHE: a peer without the key costs no key generation either */
        mbedtls_ssl_conf_ciphersuites(&t->conf, psk_bulk_suites);
    else if (t->cert_mode)
        mbedtls_ssl_conf_ciphersuites(&t->conf, t->require_fs ? cert_and_psk_fs_suites
                                                              : cert_and_psk_any_suites);
    else
        mbedtls_ssl_conf_ciphersuites(&t->conf, t->require_fs ? psk_fs_suites : psk_any_suites);
}

static int check_opts(const struct rdzv_tls_opts *o, char *err, size_t errlen)
{
    int certs = (o->cert_file != NULL) + (o->key_file != NULL) + (o->ca_file != NULL);

    if (certs != 0 && certs != 3) {
        snprintf(err, errlen, "certificate mode needs a certificate, a key and a CA together");
        return -EINVAL;
    }
    if (certs == 0 && (o->token == NULL || o->token[0] == '\0')) {
        snprintf(err, errlen, "TLS needs a token or a certificate");
        return -EINVAL;
    }
    return 0;
}

/* The DRBG and the parts of the configuration every mode shares. */
static int setup_conf(struct rdzv_tls *t, int is_server, char *err, size_t errlen)
{
    static const char pers[] = "muster-rdzv-tls";
    int ret;

    ret = mbedtls_ctr_drbg_seed(&t->drbg, mbedtls_entropy_func, &t->entropy,
                                (const unsigned char *)pers, sizeof(pers) - 1);
    if (ret != 0) {
        snprintf(err, errlen, "cannot seed the random generator (-0x%04x)", (unsigned)-ret);
        return -EIO;
    }
    ret = mbedtls_ssl_config_defaults(&t->conf,
                                      is_server ? MBEDTLS_SSL_IS_SERVER : MBEDTLS_SSL_IS_CLIENT,
                                      MBEDTLS_SSL_TRANSPORT_STREAM, MBEDTLS_SSL_PRESET_DEFAULT);
    if (ret != 0) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    mbedtls_ssl_conf_rng(&t->conf, mbedtls_ctr_drbg_random, &t->drbg);
    /* 2.28 has no TLS 1.3 and TLS 1.0/1.1 are broken: exactly 1.2. */
    mbedtls_ssl_conf_min_version(&t->conf, MBEDTLS_SSL_MAJOR_VERSION_3,
                                 MBEDTLS_SSL_MINOR_VERSION_3);
    mbedtls_ssl_conf_max_version(&t->conf, MBEDTLS_SSL_MAJOR_VERSION_3,
                                 MBEDTLS_SSL_MINOR_VERSION_3);
    mbedtls_ssl_conf_renegotiation(&t->conf, MBEDTLS_SSL_RENEGOTIATION_DISABLED);
    /* X25519 first: mbedTLS 2.28's default order starts with secp521r1, which made one
     * handshake cost ~9 ms of server CPU here, so that a burst of 1,000 connections could not
     * finish inside the 5 s handshake limit (bench/rdzv_bench.sh e). */
    mbedtls_ssl_conf_curves(&t->conf, preferred_curves);
    return 0;
}

static int setup(struct rdzv_tls *t, const struct rdzv_tls_opts *o, int is_server, char *err,
                 size_t errlen)
{
    int ret;

    if (is_server && o->cert_file == NULL) {
        t->lazy = 1; /* rdzv_tls_prepare does the rest */
        return set_server_psk(t, o, err, errlen);
    }
    ret = setup_conf(t, is_server, err, errlen);
    if (ret < 0)
        return ret;
    if (o->cert_file != NULL) {
        t->cert_mode = 1;
        ret = load_certs(t, o, err, errlen);
        if (ret == 0 && is_server && (ret = set_server_psk(t, o, err, errlen)) == 0)
            conf_server_psk(t);
        if (ret == 0 && !is_server && o->server_name != NULL) {
            t->server_name = strdup(o->server_name);
            if (t->server_name == NULL)
                ret = -ENOMEM;
        }
        return ret;
    }
    return set_client_psk(t, o, err, errlen);
}

int rdzv_tls_prepare(struct rdzv_tls *t)
{
    char err[160];
    int ret;

    if (!t->lazy)
        return 0;
    ret = setup_conf(t, 1, err, sizeof(err));
    if (ret < 0) {
        mc_error("server: TLS setup failed: %s", err);
        return ret;
    }
    conf_server_psk(t);
    t->lazy = 0;
    return 0;
}

int rdzv_tls_new(const struct rdzv_tls_opts *o, int is_server, struct rdzv_tls **out, char *err,
                 size_t errlen)
{
    struct rdzv_tls *t = NULL;
    int ret;

    *out = NULL;
    ret = check_opts(o, err, errlen);
    if (ret < 0)
        return ret;
    t = calloc(1, sizeof(*t));
    if (t == NULL) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    mbedtls_entropy_init(&t->entropy);
    mbedtls_ctr_drbg_init(&t->drbg);
    mbedtls_ssl_config_init(&t->conf);
    mbedtls_x509_crt_init(&t->cert);
    mbedtls_x509_crt_init(&t->ca);
    mbedtls_pk_init(&t->key);
    t->refs = 1;
    ret = setup(t, o, is_server, err, errlen);
    if (ret < 0) {
        rdzv_tls_free(t);
        return ret;
    }
    *out = t;
    return 0;
}

struct rdzv_tls_steps *rdzv_tls_steps(struct rdzv_tls *t)
{
    return &t->steps;
}

void rdzv_tls_hold(struct rdzv_tls *t)
{
    t->refs++;
}

void rdzv_tls_free(struct rdzv_tls *t)
{
    if (t == NULL || --t->refs > 0)
        return;
    mbedtls_ssl_config_free(&t->conf); /* zeroises the PSK */
    mbedtls_platform_zeroize(t->master, sizeof(t->master));
    mbedtls_pk_free(&t->key);
    mbedtls_x509_crt_free(&t->ca);
    mbedtls_x509_crt_free(&t->cert);
    mbedtls_ctr_drbg_free(&t->drbg);
    mbedtls_entropy_free(&t->entropy);
    free(t->server_name);
    free(t);
}

const struct mbedtls_ssl_config *rdzv_tls_conf(const struct rdzv_tls *t)
{
    return &t->conf;
}

const char *rdzv_tls_server_name(const struct rdzv_tls *t)
{
    return t->server_name;
}

int rdzv_tls_cert_mode(const struct rdzv_tls *t)
{
    return t->cert_mode;
}

int rdzv_tls_own_cred(const struct rdzv_tls *t, struct rdzv_cred *out)
{
    memset(out, 0, sizeof(*out));
    if (!t->has_master)
        return -ENOKEY;
    out->kind = t->job_scope[0] != '\0' ? RDZV_CRED_JOB : RDZV_CRED_SERVER;
    memcpy(out->scope, t->job_scope, sizeof(out->scope));
    memcpy(out->key, t->master, sizeof(out->key));
    return 0;
}

const unsigned char *rdzv_tls_master(const struct rdzv_tls *t)
{
    return t->has_master ? t->master : NULL;
}

void rdzv_tls_set_cred_sink(struct rdzv_tls *t, rdzv_tls_cred_sink_cb sink)
{
    /* Called for every new server conn while steps of others may read it on pool threads:
     * written only when it changes (once), so that those reads never race a write. */
    if (t->cred_sink != sink)
        t->cred_sink = sink;
}

/* Alerts a peer sends when it could not authenticate us (or would not let us in). */
static int alert_is_auth(unsigned a)
{
    switch (a) {
    case MBEDTLS_SSL_ALERT_MSG_BAD_RECORD_MAC:
    case MBEDTLS_SSL_ALERT_MSG_NO_CERT:
    case MBEDTLS_SSL_ALERT_MSG_BAD_CERT:
    case MBEDTLS_SSL_ALERT_MSG_UNSUPPORTED_CERT:
    case MBEDTLS_SSL_ALERT_MSG_CERT_REVOKED:
    case MBEDTLS_SSL_ALERT_MSG_CERT_EXPIRED:
    case MBEDTLS_SSL_ALERT_MSG_CERT_UNKNOWN:
    case MBEDTLS_SSL_ALERT_MSG_UNKNOWN_CA:
    case MBEDTLS_SSL_ALERT_MSG_ACCESS_DENIED:
    case MBEDTLS_SSL_ALERT_MSG_DECRYPT_ERROR:
    case MBEDTLS_SSL_ALERT_MSG_UNKNOWN_PSK_IDENTITY:
        return 1;
    }
    return 0;
}

/* The one place mbedTLS errors become errnos (STYLE.md rule 3), for conn.c and libmuster. */
int rdzv_tls_map_err(const mbedtls_ssl_context *ssl, int ret, int done, char *reason, size_t len)
{
    const char *stage = done ? "TLS" : "TLS handshake";
    char detail[96], dummy[8];

    if (reason == NULL) {
        reason = dummy;
        len = sizeof(dummy);
    }
    switch (ret) {
    case MBEDTLS_ERR_SSL_FATAL_ALERT_MESSAGE: {
        unsigned a = ssl->in_msg[1]; /* the alert record mbedTLS just parsed */

        /* handshake_failure is what mbedTLS sends when no cipher suite is shared (a server
         * with --require-forward-secrecy and a plain-PSK client, a token client against a
         * certificate-only server): a setting to change, not a refused token. A
         * wrong token shows as bad_record_mac or unknown_psk_identity. */
        if (a == MBEDTLS_SSL_ALERT_MSG_HANDSHAKE_FAILURE) {
            snprintf(reason, len,
                     "%s: the peer sent fatal alert %u (handshake_failure: no cipher suite in "
                     "common; does one side require forward secrecy or certificates?)",
                     stage, a);
            return -EPROTO;
        }
        snprintf(reason, len, "%s: the peer sent fatal alert %u%s", stage, a,
                 alert_is_auth(a) ? " (it did not accept our token or certificate)" : "");
        return alert_is_auth(a) ? -EACCES : -EPROTO;
    }
    case MBEDTLS_ERR_X509_CERT_VERIFY_FAILED:
        mbedtls_x509_crt_verify_info(detail, sizeof(detail), "",
                                     mbedtls_ssl_get_verify_result(ssl));
        detail[strcspn(detail, "\n")] = '\0';
        snprintf(reason, len, "%s: peer certificate rejected: %s", stage, detail);
        return -EACCES;
    case MBEDTLS_ERR_SSL_INVALID_MAC:
        if (done)
            break; /* a damaged record of an authenticated connection: a protocol error */
        snprintf(reason, len, "%s: bad record MAC (wrong token or key)", stage);
        return -EACCES;
    case MBEDTLS_ERR_SSL_UNKNOWN_IDENTITY:
    case MBEDTLS_ERR_SSL_NO_CLIENT_CERTIFICATE:
    case MBEDTLS_ERR_SSL_PEER_VERIFY_FAILED:
        mbedtls_strerror(ret, detail, sizeof(detail));
        snprintf(reason, len, "%s: %s", stage, detail);
        return -EACCES;
    case MBEDTLS_ERR_SSL_ALLOC_FAILED:
        snprintf(reason, len, "%s: out of memory", stage);
        return -ENOMEM;
    case MBEDTLS_ERR_SSL_CONN_EOF:
    case MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY:
        snprintf(reason, len, "%s: the peer closed the connection", stage);
        return -ECONNRESET;
    case MBEDTLS_ERR_NET_SEND_FAILED:
        snprintf(reason, len, "%s: sending failed (the connection is gone)", stage);
        return -EPIPE;
    }
    mbedtls_strerror(ret, detail, sizeof(detail));
    snprintf(reason, len, "%s: %s", stage, detail);
    return -EPROTO;
}
