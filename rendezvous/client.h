/* Agent side of the rendezvous protocol: one TCP connection to a server (embedded or remote).
 *
 * Life cycle: rdzv_client_new() -> rdzv_client_join() (connects, HELLO, JOIN) -> callbacks
 * (waiting..., assign) -> report_failure()/report_done() -> restart / job_done / job_failed.
 * After a restart callback the agent stops its workers and calls rdzv_client_join() again on
 * the same connection. Every callback runs on the loop thread. */
#ifndef MUSTER_RDZV_CLIENT_H
#define MUSTER_RDZV_CLIENT_H

#include <uv.h>

#include "message.h"

struct rdzv_client;

struct rdzv_client_cbs {
    void (*waiting_cb)(struct rdzv_client *c, const struct rdzv_waiting *w);
    void (*assign_cb)(struct rdzv_client *c, const struct rdzv_assign *a);
    void (*restart_cb)(struct rdzv_client *c, const struct rdzv_restart *r);
    void (*job_done_cb)(struct rdzv_client *c);
    void (*job_failed_cb)(struct rdzv_client *c, const struct rdzv_job_failed *f);
    /* The connection is unusable: connect failure, server ERROR (code = enum rdzv_err, text
     * from the server), protocol violation or connection closed. `err` is a negative errno
     * (UV_E*) or -EPROTO; text is a one-line reason. No other callback follows.
     * A server ERROR maps to: TIMEOUT -> UV_ETIMEDOUT, AUTH -> UV_EACCES, VERSION ->
     * -EPROTONOSUPPORT, MISMATCH -> UV_EINVAL, CLOSED -> UV_ESHUTDOWN, others -> -EPROTO;
     * rdzv_client_server_error() gives the wire code itself. */
    void (*error_cb)(struct rdzv_client *c, int err, const char *text);
};

/* Allocates a client. Borrows loop and cbs (must outlive the client); copies host and token
 * (token may be NULL or ""). Returns 0 or a negative errno; *out is set on success only. */
int rdzv_client_new(uv_loop_t *loop, const char *host, unsigned port, const char *token,
                    const struct rdzv_client_cbs *cbs, void *data, struct rdzv_client **out);

/* Sends JOIN (connecting and sending HELLO first if not connected yet). Copies *join.
 * Returns 0 or a negative errno; on error no callback is called for this request.
 * UV_EALREADY: a JOIN is still queued behind the handshake; UV_ENOTCONN: the client failed or
 * is closing. Connection and handshake errors after a 0 return arrive through error_cb. */
int rdzv_client_join(struct rdzv_client *c, const struct rdzv_join *join);

/* Reports a local worker failure (FAILED) or the agent leaving (LEAVE when leaving != 0).
 * Borrows f. Returns 0, UV_ENOTCONN before WELCOME or after a failure, or a send error. */
int rdzv_client_report_failure(struct rdzv_client *c, const struct rdzv_failure *f, int leaving);

/* Reports that every local worker of `round` exited 0 (DONE). Returns as report_failure. */
int rdzv_client_report_done(struct rdzv_client *c, uint32_t round);

/* The `data` pointer given to rdzv_client_new(). */
void *rdzv_client_data(const struct rdzv_client *c);

/* The code (enum rdzv_err) of the ERROR the server sent, or 0 when the failure was local or
 * no error happened. Meaningful inside and after error_cb. */
uint32_t rdzv_client_server_error(const struct rdzv_client *c);

/* Closes the connection (pending writes are flushed first when possible) and frees the client
 * from the last close callback; close_cb (may be NULL) runs after that. Accepts NULL. No
 * rdzv_client_cbs callback runs after this call. */
void rdzv_client_close(struct rdzv_client *c, void (*close_cb)(void *data), void *data);

#endif
