/* A job's checkpoint records as the server shows them in STATUS: the newest RDZV_CKPTLOG_MAX
 * CKPT messages of the job, newest first, one record per name. Pure bookkeeping: the server
 * never reads checkpoint files; the agent of group rank 0 verified (or failed to verify) them.
 * Kept in memory only, so a restarted server shows the records reported after it came up. */
#ifndef MUSTER_RDZV_CKPTLOG_H
#define MUSTER_RDZV_CKPTLOG_H

#include <stddef.h>

#include "message.h"

#define RDZV_CKPTLOG_MAX 64
#define RDZV_CKPTLOG_REPLICAS 8 /* replica holders kept per record */

struct rdzv_ckptlog_rec {
    struct rdzv_ckpt ck;
    char host[RDZV_HOST_MAX + 1]; /* the node that recorded it; "" when only replicas told */
    unsigned n_replicas;
    char replicas[RDZV_CKPTLOG_REPLICAS][RDZV_HOST_MAX + 1]; /* hosts holding a verified copy */
};

struct rdzv_ckptlog {
    size_t n;
    struct rdzv_ckptlog_rec recs[RDZV_CKPTLOG_MAX]; /* recs[0] is the newest */
};

/* Allocates an empty log. Returns 0 or -ENOMEM; *out is set on success only. */
int rdzv_ckptlog_new(struct rdzv_ckptlog **out);

/* Frees the log. Accepts NULL. */
void rdzv_ckptlog_free(struct rdzv_ckptlog *log);

/* Records `ck` (copied) as the newest entry. "Newest" is arrival order, not step or time_ms:
 * the agent reports in the order it decided, and a record that turned bad must move to the
 * front even though its step is old. An older record with the same name is replaced; beyond
 * RDZV_CKPTLOG_MAX the oldest is dropped. Cannot fail. */
void rdzv_ckptlog_add(struct rdzv_ckptlog *log, const struct rdzv_ckpt *ck);

/* Like rdzv_ckptlog_add, also naming the host of the node that recorded it (copied; "" when not
 * known). The replicas an older record of the same name and checksum listed are kept. */
void rdzv_ckptlog_add_from(struct rdzv_ckptlog *log, const struct rdzv_ckpt *ck, const char *host);

/* A replica of ck (ck->holder: its host) verified: the holder is added to the record of the same
 * name and checksum (once; beyond RDZV_CKPTLOG_REPLICAS it is not listed). Without such a
 * record (a server restarted since, a record that fell off) one is added as the newest, with
 * host "". Cannot fail. */
void rdzv_ckptlog_add_replica(struct rdzv_ckptlog *log, const struct rdzv_ckpt *ck);

/* The replica ck->holder held of ck (same name and checksum) is gone (--keep-checkpoints pruned
 * it): the holder leaves that record's list. Nothing else changes. Cannot fail. */
void rdzv_ckptlog_drop_replica(struct rdzv_ckptlog *log, const struct rdzv_ckpt *ck);

#endif
