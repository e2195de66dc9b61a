/* One log for the whole job (docs/OUTPUT.md "One log for the job"): the pieces both ends use.
 *
 * - struct rdzv_bucket: a token bucket on lines and bytes per second (a rate cap: what does not
 *   fit is dropped by the caller and counted). The agent caps each of its ranks with one, the
 *   server each job and each rank of it.
 * - struct rdzv_logring: the server's per-job ring of recent lines, bounded in bytes (the
 *   oldest go first, counted), numbered 1, 2, ... so that a reader asks for "after N".
 * - rdzv_logs_dedup: `muster logs --dedup`, identical lines of several ranks as one
 *   ("[ranks 0-63]: loss 2.31").
 * No I/O and no loop: the callers give the time. */
#ifndef MUSTER_RDZV_LOGRING_H
#define MUSTER_RDZV_LOGRING_H

#include <stddef.h>
#include <stdint.h>

#include "message.h"

/* Defaults (docs/OUTPUT.md): a job's ring and caps; one rank may take at most a quarter of its
 * job's rate, so that one rank's flood leaves room for the others' lines. The agent caps each
 * of its ranks at the per-rank rate too, so that a flood is mostly dropped where it starts. */
#define RDZV_LOG_RING_BYTES (8u << 20)
/* Every job's ring together (ended jobs' kept ones included): a job credential holding 256
 * jobs must not take the server's memory with their logs. At the cap a job's new line pushes
 * out its own oldest ones, and is dropped when its ring is empty. */
#define RDZV_LOG_TOTAL_BYTES ((size_t)256 << 20)
#define RDZV_LOG_JOB_LINES_PER_S 4000u
#define RDZV_LOG_JOB_BYTES_PER_S (2u << 20)
#define RDZV_LOG_RANK_LINES_PER_S (RDZV_LOG_JOB_LINES_PER_S / 4)
#define RDZV_LOG_RANK_BYTES_PER_S (RDZV_LOG_JOB_BYTES_PER_S / 4)
#define RDZV_LOG_BURST_S 2         /* a bucket holds this many seconds of its rate */
#define RDZV_LOG_RANK_BUCKETS 4096 /* ranks r and r + 4096 share a per-rank bucket */
#define RDZV_LOG_ENTRY_COST 48     /* bytes a held line costs besides its text */
/* A LOGS answer looks at most this many held lines (a --rank filter skips the others). */
#define RDZV_LOG_SCAN_MAX 65536

struct rdzv_bucket {
    double lines, bytes; /* tokens left */
    uint64_t last_ms;    /* when they were last refilled; 0: full */
};

/* Returns 1 (and takes one line and len bytes) when a line of len bytes fits the rate at
 * now_ms (any monotonic ms clock), else 0: the line is to be dropped. */
int rdzv_bucket_take(struct rdzv_bucket *b, uint64_t now_ms, unsigned lines_per_s,
                     size_t bytes_per_s, size_t len);

struct rdzv_logring_limits {
    size_t ring_bytes;    /* 0: RDZV_LOG_RING_BYTES */
    unsigned lines_per_s; /* the job's rate; 0: RDZV_LOG_JOB_LINES_PER_S */
    size_t bytes_per_s;   /* 0: RDZV_LOG_JOB_BYTES_PER_S */
    /* the rings' shared budget: *pool_used is charged what this ring holds (NULL: none) */
    size_t *pool_used;
    size_t pool_max; /* 0: RDZV_LOG_TOTAL_BYTES */
};

struct rdzv_logring_stats {
    uint64_t lines, bytes;     /* lines (and their bytes) taken into the ring */
    uint64_t dropped_ring;     /* taken, then pushed out by newer ones before anyone asked... */
    uint64_t dropped_rate;     /* over the job's or a rank's rate: never taken */
    uint64_t dropped_agents;   /* the agents' own drops, as their LOGs said */
    uint64_t held, held_bytes; /* in the ring now */
};

struct rdzv_logring;

/* NULL when out of memory; l may be NULL (defaults). */
struct rdzv_logring *rdzv_logring_new(const struct rdzv_logring_limits *l);
void rdzv_logring_free(struct rdzv_logring *r);

/* Takes one line at now_ms (monotonic, for the caps): 0 kept, 1 dropped by a rate cap, -ENOMEM.
 * len is cut at RDZV_LOG_LINE_MAX. */
int rdzv_logring_add(struct rdzv_logring *r, uint64_t now_ms, const struct rdzv_log_line *ln,
                     const char *text);

/* Adds an agent's own drop count (LOG.dropped). */
void rdzv_logring_agent_dropped(struct rdzv_logring *r, uint64_t n);

/* Fills out (count, bytes, lines with seq, next, dropped, the MORE and GAP flags; not ENDED)
 * with the held lines numbered after q->after that match q->rank and q->since_ms, as many as
 * one message holds. */
void rdzv_logring_read(const struct rdzv_logring *r, const struct rdzv_logs_req *q,
                       struct rdzv_log *out);

void rdzv_logring_stats(const struct rdzv_logring *r, struct rdzv_logring_stats *s);

/* The newest lines: up to k of rank (-1: any rank), found among the newest RDZV_LOG_SCAN_MAX
 * held, given to fn oldest first (text is not NUL-terminated: len bytes). Returns how many. */
typedef void (*rdzv_logring_tail_fn)(void *ctx, uint64_t seq, uint64_t time_ms, int32_t rank,
                                     uint8_t stream, const char *text, size_t len);
size_t rdzv_logring_tail(const struct rdzv_logring *r, int32_t rank, size_t k,
                         rdzv_logring_tail_fn fn, void *ctx);

/* --dedup: prints the n lines of l (in order) through emit: a line that several ranks said
 * identically (same stream and text) comes once, with ranks "0-3,5" (emit's ranks; NULL for a
 * line of one rank, which keeps its rank). A rank joins an earlier identical line only when it
 * said nothing between the two (one rank's lines are never reordered), and only once. */
typedef void (*rdzv_logs_emit_fn)(void *ctx, const struct rdzv_log_line *ln, const char *text,
                                  const char *ranks);
int rdzv_logs_dedup(const struct rdzv_log *l, rdzv_logs_emit_fn emit, void *ctx);

/* Writes sorted, distinct ranks compressed into ranges ("0-3,5,7-8") to buf (always
 * terminated). Returns the length it needed, like snprintf. */
size_t rdzv_ranks_fmt(const int32_t *ranks, size_t n, char *buf, size_t len);

#endif
