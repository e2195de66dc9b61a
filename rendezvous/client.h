/* Agent side of the rendezvous protocol: one TLS connection to a server (embedded or remote).
 *
 * Life cycle: rdzv_client_new() -> rdzv_client_join() (connects, HELLO, JOIN) -> callbacks
 * (waiting..., assign) -> report_failure()/report_done() -> restart / job_done / job_failed.
 * After a restart callback the agent stops its workers and calls rdzv_client_join() again on
 * the same connection. Every callback runs on the loop thread.
 *
 * Liveness: once a JOIN was sent the client sends HEARTBEAT every join.keep_alive_ms (the
 * server echoes it; rdzv_client_rtt_us() gives the last round trip), and treats a connection
 * on which nothing arrived for join.heartbeat_timeout_ms as broken (a cut-off host never sends
 * a FIN).
 *
 * Resuming: the agent fills join.resume/resume_step (the checkpoint IT would resume from)
 * before every rdzv_client_join(); ASSIGN carries group rank 0's choice for every node. A
 * reconnect re-sends the saved JOIN as it was; the server keeps the round's decision anyway.
 *
 * Reconnection: when an established connection (one that got WELCOME) breaks — closed, reset
 * or silent — but NOT when the server sent ERROR, the client calls disconnected_cb and
 * reconnects with exponential backoff (100 ms doubling to 2 s, +-20 % jitter) to the address
 * the first connection reached, for up to join.reconnect_grace_ms. After HELLO it re-registers:
 * REJOIN(saved JOIN, last ASSIGN, done flag) when the current round was assigned, a plain JOIN
 * when the JOIN was not answered by an ASSIGN yet, nothing when the agent has not re-joined
 * after a RESTART. Reports made while disconnected are queued and sent once the server answered
 * the REJOIN (REJOIN_OK, or RESTART which goes to restart_cb as usual); then reconnected_cb
 * runs. When the grace runs out, error_cb(UV_ETIMEDOUT, "rendezvous server unreachable for
 * N s"). The client never touches the agent's workers. */
#ifndef MUSTER_RDZV_CLIENT_H
#define MUSTER_RDZV_CLIENT_H

#include <stdint.h>
#include <uv.h>

#include "message.h"
#include "tls.h"

/* Defaults for the JOIN fields that are 0; the JOIN on the wire carries the effective values. */
#define RDZV_CLIENT_KEEP_ALIVE_MS 1000
#define RDZV_CLIENT_HEARTBEAT_TIMEOUT_MS 3000
#define RDZV_CLIENT_RECONNECT_GRACE_MS 60000

struct rdzv_client;

struct rdzv_client_cbs {
    void (*waiting_cb)(struct rdzv_client *c, const struct rdzv_waiting *w);
    void (*assign_cb)(struct rdzv_client *c, const struct rdzv_assign *a);
    void (*restart_cb)(struct rdzv_client *c, const struct rdzv_restart *r);
    void (*job_done_cb)(struct rdzv_client *c);
    void (*job_failed_cb)(struct rdzv_client *c, const struct rdzv_job_failed *f);
    /* The connection is unusable: connect failure, server ERROR (code = enum rdzv_err, text
     * from the server), protocol violation, connection closed before WELCOME or after the job
     * finished, or the server unreachable for longer than the reconnect grace (UV_ETIMEDOUT).
     * `err` is a negative errno (UV_E*) or -EPROTO; text is a one-line reason. No other
     * callback follows.
     * A server ERROR maps to: TIMEOUT -> UV_ETIMEDOUT, AUTH -> UV_EACCES, VERSION ->
     * -EPROTONOSUPPORT, MISMATCH -> UV_EINVAL, CLOSED -> UV_ESHUTDOWN, others -> -EPROTO;
     * rdzv_client_server_error() gives the wire code itself. */
    void (*error_cb)(struct rdzv_client *c, int err, const char *text);
    /* Optional (NULL allowed). The established connection broke (why: one line, e.g.
     * "connection reset by peer"); the client is reconnecting. Runs once per outage. */
    void (*disconnected_cb)(struct rdzv_client *c, const char *why);
    /* Optional (NULL allowed). The outage is over: the server answered the REJOIN (before a
     * RESTART it answered with goes to restart_cb), or took the plain JOIN / nothing needed
     * re-registering. Queued reports have been sent. */
    void (*reconnected_cb)(struct rdzv_client *c);
    /* Optional (NULL allowed). The first connection could not be made (err: connection
     * refused, host unreachable, timed out...): the server is probably not up yet, and the
     * client keeps trying with backoff until the JOIN's join_timeout_ms (0: forever) has passed
     * since the first attempt, as torchrun does; then error_cb. waited_ms: since that first
     * attempt. Runs at every failed attempt. */
    void (*server_wait_cb)(struct rdzv_client *c, int err, uint64_t waited_ms);
    /* Optional (NULL allowed: replicas are refused). A checkpoint replica message relayed by
     * the server: REPL_BEGIN, REPL_DATA or REPL_ACK, or the server's CKPT_PART; m is borrowed
     * for the call. */
    void (*repl_cb)(struct rdzv_client *c, const struct rdzv_msg *m);
    /* Optional (NULL allowed: COLLECT is ignored). The server wants this node's evidence of
     * a round (agent/evidence.h); borrowed for the call. */
    void (*collect_cb)(struct rdzv_client *c, const struct rdzv_collect *col);
    /* Optional (NULL allowed: NOTICE is ignored). A warning the server found about the job, to
     * be shown once (its text is valid UTF-8 of up to RDZV_TEL_WARN_LEN bytes); borrowed. */
    void (*notice_cb)(struct rdzv_client *c, const char *text);
};

/* Allocates a client that speaks TLS in token mode: the token is the pre-shared key (tls.h) and
 * is also sent in HELLO. Borrows loop and cbs (must outlive the client); copies host and token.
 * Returns 0, UV_EINVAL (bad host/port, token NULL, "" or over RDZV_TOKEN_MAX), UV_ENOMEM or
 * rdzv_tls_new()'s errors; *out is set on success only. A server that refuses the token (or a
 * certificate) ends the client with error_cb(UV_EACCES); no reconnect retries that. */
int rdzv_client_new(uv_loop_t *loop, const char *host, unsigned port, const char *token,
                    const struct rdzv_client_cbs *cbs, void *data, struct rdzv_client **out);

/* Like rdzv_client_new, with any TLS configuration (certificate mode: cert/key/ca; the server
 * name defaults to host). o and its strings are borrowed for the call only; o->token, if any,
 * goes into HELLO. The files are read now; every reconnect reuses the configuration. */
/* A client of the server this process hosts, over an in-process channel (server.h
 * rdzv_server_connect_local): no TCP and no TLS, with the authority of the server's own key;
 * addr (copied; NULL: "127.0.0.1") is the address the agent stands for when its JOIN names
 * none. Reconnects (should the server drop it) open a new channel. srv must outlive the
 * client. Returns as rdzv_client_new. */
struct rdzv_server;
int rdzv_client_new_local(uv_loop_t *loop, struct rdzv_server *srv, const char *addr,
                          const struct rdzv_client_cbs *cbs, void *data, struct rdzv_client **out);

int rdzv_client_new_tls(uv_loop_t *loop, const char *host, unsigned port,
                        const struct rdzv_tls_opts *o, const struct rdzv_client_cbs *cbs,
                        void *data, struct rdzv_client **out);

/* Sends JOIN (connecting and sending HELLO first if not connected yet). Copies *join; its
 * keep_alive_ms, heartbeat_timeout_ms and reconnect_grace_ms are replaced by the defaults above
 * when 0. Returns 0 or a negative errno; on error no callback is called for this request.
 * UV_EALREADY: a JOIN is still queued behind the handshake; UV_ENOTCONN: the client failed or
 * is closing. While reconnecting, the JOIN is queued and sent after the new WELCOME.
 * Connection and handshake errors after a 0 return arrive through error_cb. */
int rdzv_client_join(struct rdzv_client *c, const struct rdzv_join *join);

/* Reports a local worker failure (FAILED) or the agent leaving (LEAVE when leaving != 0).
 * Borrows f. Returns 0, UV_ENOTCONN before WELCOME or after a failure, UV_ENOMEM, or a send
 * error. While reconnecting the report is queued (0) and sent after the REJOIN is answered. */
int rdzv_client_report_failure(struct rdzv_client *c, const struct rdzv_failure *f, int leaving);

/* Reports that every local worker of `round` exited 0 (DONE). Returns as report_failure. */
int rdzv_client_report_done(struct rdzv_client *c, uint32_t round);

/* Reports one checkpoint (CKPT; the agent of group rank 0 sends one per checkpoint it recorded,
 * and one with verified_bad = 1 and a reason per checkpoint it found missing or altered when it
 * picked the resume point). Borrows ck. No reply. Returns 0, UV_EINVAL when ck->name is "",
 * contains '/', is "." or "..", or name/reason are over RDZV_CKPT_NAME_MAX/RDZV_TEXT_MAX,
 * UV_ENOTCONN before WELCOME or after a failure, UV_ENOMEM, or a send error. While
 * reconnecting the report is queued (0) and sent after the REJOIN is answered, in order with
 * FAILED/DONE reports. The server refuses CKPT (ERROR PROTOCOL) before this agent's JOIN. */
int rdzv_client_report_ckpt(struct rdzv_client *c, const struct rdzv_ckpt *ck);

/* Reports where this agent's time went (GOODPUT: cumulative, so one lost on a broken
 * connection is made good by the next). 0, UV_ENOTCONN while not connected, or the send's
 * error. No reply. */
int rdzv_client_report_goodput(struct rdzv_client *c, const struct rdzv_goodput *g);

/* Reports this node's pre-flight results (PREFLIGHT; the agent sends one when its
 * pre-flight node process has ended). Borrows pf. No reply. For STATUS and /metrics only, so
 * never queued: UV_ENOTCONN while the connection is away (the results are then not shown),
 * UV_EINVAL for more than RDZV_PF_GPUS_MAX GPUs or an over-long string. The server refuses it
 * (ERROR PROTOCOL) before this agent's JOIN, from a node outside the round, and for strings
 * with control characters. */
int rdzv_client_report_preflight(struct rdzv_client *c, const struct rdzv_preflight *pf);

/* Sends one checkpoint replica message (REPL_BEGIN, REPL_DATA or REPL_ACK; borrowed). Never
 * queued across an outage: a replica in flight is abandoned then and the server forgets it.
 * Returns 0, UV_EINVAL for another type or a message the codec refuses, UV_ENOTCONN while not
 * connected (or reconnecting), or a send error. */
int rdzv_client_send_repl(struct rdzv_client *c, const struct rdzv_msg *m);

/* Sends one rank's evidence (EVIDENCE; copied). Not queued while the server is away: evidence
 * is of the moment. Returns 0, UV_ENOTCONN, UV_ENOMEM or the connection's error. */
int rdzv_client_send_evidence(struct rdzv_client *c, const struct rdzv_evidence *e);

/* Sends one batch of this node's ranks' output lines (LOG; m borrowed, type RDZV_MSG_LOG). Not
 * queued while the server is away: the caller keeps its lines (agent/logfwd.h). Returns 0,
 * UV_EINVAL for another type, UV_ENOTCONN, or the connection's error. */
int rdzv_client_send_log(struct rdzv_client *c, const struct rdzv_msg *m);

/* Sends one TELEMETRY of this node's GPUs (m borrowed). Not queued while the server is away:
 * the next sample follows. Returns 0, UV_EINVAL for another type, UV_ENOTCONN, or the
 * connection's error. */
int rdzv_client_send_telemetry(struct rdzv_client *c, const struct rdzv_msg *m);

/* Bytes handed to rdzv_client_send_repl and friends that the socket has not taken yet. */
size_t rdzv_client_unsent(const struct rdzv_client *c);

/* The round trip time of the newest echoed HEARTBEAT in microseconds, or -1 before the first
 * echo. */
int64_t rdzv_client_rtt_us(const struct rdzv_client *c);

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
