/* The node's share of the job's one log (docs/OUTPUT.md "One log for the job"): the workers'
 * output, cut into lines (at '\n' or '\r'), goes to the rendezvous server in LOG batches over
 * the agent's connection.
 *
 * - Each rank is capped at RDZV_LOG_RANK_LINES_PER_S lines and RDZV_LOG_RANK_BYTES_PER_S bytes
 *   a second (logring.h): a rank printing 100 MB/s loses its excess here, counted, and never
 *   crowds out the other ranks' lines in the queue or on the link.
 * - The queue is bounded (AGENT_LOGFWD_QUEUE_BYTES, AGENT_LOGFWD_QUEUE_LINES): when full the
 *   oldest lines go first, counted; the counts travel in the next LOG (dropped).
 * - A batch leaves every AGENT_LOGFWD_EVERY_MS, or at once when AGENT_LOGFWD_BATCH_BYTES are
 *   queued; never while the connection holds more than AGENT_LOGFWD_UNSENT_MAX unsent bytes
 *   (a slow link: lines wait in the bounded queue) or is away (reconnecting).
 * Nothing here blocks: rdzv_client_send_log queues on the connection. */
#ifndef MUSTER_AGENT_LOGFWD_H
#define MUSTER_AGENT_LOGFWD_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "logring.h"

#define AGENT_LOGFWD_EVERY_MS 150
#define AGENT_LOGFWD_BATCH_BYTES (32 * 1024)
#define AGENT_LOGFWD_QUEUE_BYTES (1u << 20)
#define AGENT_LOGFWD_QUEUE_LINES 8192u
#define AGENT_LOGFWD_UNSENT_MAX (256 * 1024)
#define AGENT_LOGFWD_PARTIAL_MS 500 /* a partial line held this long goes as it is */

struct rdzv_client;
struct rdzv_msg;

/* send: how a batch leaves (rdzv_client_send_log in the agent; a test's own); returns 0 when it
 * was taken, else it is kept and tried again. unsent: the bytes the link still holds (NULL:
 * none). */
struct agent_logfwd_io {
    int (*send)(void *ctx, const struct rdzv_msg *m);
    size_t (*unsent)(void *ctx);
    void *ctx;
};

struct agent_logfwd_stats {
    uint64_t lines_sent, batches;
    uint64_t dropped_rate;  /* over a rank's cap */
    uint64_t dropped_queue; /* pushed out of the full queue */
    uint64_t queued, queued_bytes;
};

struct agent_logfwd;

/* Returns NULL when out of memory. loop NULL: no timer (tests call agent_logfwd_flush). */
struct agent_logfwd *agent_logfwd_new(uv_loop_t *loop, const struct agent_logfwd_io *io);

/* A new attempt with n local workers: partial lines and caps start afresh (queued lines stay).
 * Returns 0 or -ENOMEM. */
int agent_logfwd_reset(struct agent_logfwd *f, int n);

/* Bytes of local worker local_rank (global rank) on stream (0 stdout, 1 stderr) at now_ms
 * (monotonic, for the caps) and wall_ms (the lines' time); n == 0: the stream ended (a partial
 * line goes as it is). */
void agent_logfwd_feed(struct agent_logfwd *f, int local_rank, int rank, int stream,
                       const char *data, size_t n, uint64_t now_ms, uint64_t wall_ms);

/* Sends what is queued, as many batches as the link takes now (before DONE or FAILED, so the
 * job's last lines reach the server before the job ends). */
void agent_logfwd_flush(struct agent_logfwd *f);

void agent_logfwd_stats(const struct agent_logfwd *f, struct agent_logfwd_stats *s);

/* Stops the timer and frees f once it is closed (run the loop); without a loop at once. */
void agent_logfwd_close(struct agent_logfwd *f);

#endif
