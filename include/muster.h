/* libmuster: the worker-side client of a muster rendezvous server.
 *
 * A training worker started by `muster run` finds the server in its environment
 * (MUSTER_ENDPOINT, MUSTER_TOKEN, MUSTER_JOB_ID, MUSTER_ROUND, RANK) and uses it as a small
 * key-value store with waits and barriers, scoped to its job and round: e.g. rank 0 puts the
 * NCCL unique id and every other rank gets it with a wait. When the round ends (a restart),
 * requests answer -ESTALE: the worker is about to be replaced.
 *
 * Every call is blocking, with a deadline; no threads, no event loop, no signals (SIGPIPE is
 * avoided per send). One `struct muster` is one TCP connection; it is not thread-safe: use one
 * per thread. Every fallible function returns 0 or a negative errno; muster_strerror() turns
 * one into text. */
#ifndef MUSTER_H
#define MUSTER_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define MUSTER_API __attribute__((visibility("default")))
#else
#define MUSTER_API
#endif

/* Limits of the protocol (rendezvous/message.h): longer keys or values are -EINVAL. */
#define MUSTER_KEY_MAX 512           /* bytes of a key or barrier name, without a NUL */
#define MUSTER_VALUE_MAX (60 * 1024) /* bytes of a value */
#define MUSTER_KV_PREFIX_MAX 64      /* bytes of MUSTER_KV_PREFIX (see muster_connect) */

/* How long connecting (TCP + handshake) may take, and how long any request may wait for the
 * server beyond its own timeout. */
#define MUSTER_CONNECT_TIMEOUT_MS 5000

struct muster;

/* Connects with the settings `muster run` gives every worker: MUSTER_ENDPOINT ("host:port",
 * "[v6addr]:port"), MUSTER_TOKEN (required, unless certificates are given), MUSTER_JOB_ID,
 * MUSTER_ROUND and RANK. Certificate mode instead of the token's pre-shared key:
 * MUSTER_TLS_CERT, MUSTER_TLS_KEY and MUSTER_TLS_CA (PEM files; the server's certificate must
 * name the endpoint's host). MUSTER_KV_PREFIX (at most MUSTER_KV_PREFIX_MAX bytes), when set,
 * is put before every key and barrier name of this handle (and counts against MUSTER_KEY_MAX);
 * muster sets it for the pre-flight of a node that joins a running job, workers never get it.
 * Returns 0 and sets *out (free with muster_close()), -ENOENT when MUSTER_ENDPOINT is unset,
 * -EINVAL when another variable is missing or malformed, or an error of muster_connect_to(). */
MUSTER_API int muster_connect(struct muster **out);

/* Connects to endpoint ("host:port" or "[v6addr]:port"; host may be a name) with token and
 * attaches to job_id's round `round` as global rank `rank`: TCP connect, TLS 1.2 handshake (the
 * token is the pre-shared key; or certificates, see muster_connect), HELLO (role worker) ->
 * WELCOME -> ATTACH -> ATTACH_OK, all within MUSTER_CONNECT_TIMEOUT_MS. Borrows the strings.
 * Returns 0 and sets *out, or: -EINVAL (bad endpoint, no token (NULL or "") and no
 * certificates, over-long token or job id, rank < 0), -ENOENT/-EACCES/-EBADMSG (certificate
 * files), -ETIMEDOUT, -ECONNREFUSED and other connect errors, -EACCES (wrong token or
 * certificate), -ECONNRESET (closed during the handshake),
 * -ESHUTDOWN (unknown or finished job), -EPROTO (the server broke the protocol),
 * -EPROTONOSUPPORT (protocol version), -ENOMEM. A round that is no longer current is not an
 * error here: the first request answers -ESTALE. */
MUSTER_API int muster_connect_to(const char *endpoint, const char *token, const char *job_id,
                                 unsigned round, int rank, struct muster **out);

/* Stores value (len bytes, borrowed, may be binary) under key, replacing an older value, and
 * wakes every muster_kv_get() waiting for it. Returns 0, -EINVAL (key empty or over
 * MUSTER_KEY_MAX or holding a NUL, len over MUSTER_VALUE_MAX), -ENOSPC (the job's key or byte
 * quota is used up), -ESTALE (the round is over), -ETIMEDOUT (no answer within
 * MUSTER_CONNECT_TIMEOUT_MS), -EPIPE/-ECONNRESET/-EPROTO/-ECONNABORTED or the errno of a server
 * ERROR (the connection is unusable; every later call returns the same error). */
MUSTER_API int muster_kv_put(struct muster *m, const char *key, const void *value, size_t len);

/* Reads key's value into buf (cap bytes) and sets *len to its length, waiting up to timeout_ms
 * for the key to appear (0: do not wait; negative: -EINVAL). Returns 0, -ENOENT (timeout_ms 0
 * and no such key), -ETIMEDOUT (still missing after timeout_ms), -ENOBUFS (cap too small; *len
 * is set to the size needed and buf is untouched), -ESTALE, -EINVAL, or a connection error as
 * muster_kv_put(). */
MUSTER_API int muster_kv_get(struct muster *m, const char *key, void *buf, size_t cap, size_t *len,
                             int timeout_ms);

/* Waits until `count` participants of this job and round entered the barrier `name` (the
 * first arrival's count decides), for at most timeout_ms (0: no deadline; negative: -EINVAL).
 * Returns 0, -ETIMEDOUT (this caller no longer counts), -ESTALE, -EINVAL (count 0, bad name),
 * or a connection error as muster_kv_put(). Give every barrier of a round its own name. */
MUSTER_API int muster_barrier(struct muster *m, const char *name, unsigned count, int timeout_ms);

/* A static one-line description of err (negative or positive errno). Never NULL. */
MUSTER_API const char *muster_strerror(int err);

/* Closes the connection and frees m. Accepts NULL. */
MUSTER_API void muster_close(struct muster *m);

#ifdef __cplusplus
}
#endif

#endif
