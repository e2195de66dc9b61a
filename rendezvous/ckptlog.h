/* A job's checkpoint records as the server shows them in STATUS: the newest RDZV_CKPTLOG_MAX
 * CKPT messages of the job, newest first, one record per name. Pure bookkeeping: the server
 * never reads checkpoint files; the agent of group rank 0 verified (or failed to verify) them.
 * Kept in memory only, so a restarted server shows the records reported after it came up. */
#ifndef MUSTER_RDZV_CKPTLOG_H
#define MUSTER_RDZV_CKPTLOG_H

#include <stddef.h>

#include "message.h"

#define RDZV_CKPTLOG_MAX 64

struct rdzv_ckptlog {
    size_t n;
    struct rdzv_ckpt recs[RDZV_CKPTLOG_MAX]; /* recs[0] is the newest */
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

#endif
