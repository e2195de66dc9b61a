/* Sharded checkpoints (docs/FAULT_TOLERANCE.md "Sharded checkpoints"): which node holds which
 * part of which checkpoint, as the agents reported it (CKPT with a part), so that a new round
 * resumes from the newest checkpoint whose every part some member of the round holds. Pure
 * bookkeeping, like ckptlog.h: the server never reads a file. Kept in memory only: a restarted
 * server knows the parts reported after it came up. */
#ifndef MUSTER_RDZV_PARTS_H
#define MUSTER_RDZV_PARTS_H

#include <stddef.h>
#include <stdint.h>

#include "message.h"

#define RDZV_PARTS_RECS 1024 /* records per job; the oldest goes first beyond it */

struct rdzv_part_rec {
    char name[RDZV_CKPT_NAME_MAX + 1];
    int64_t step;
    uint64_t checksum;
    uint32_t part, parts; /* 1 + the group rank that wrote it, of parts nodes */
    uint64_t holder;      /* node id of the member holding it */
    int empty;            /* that node wrote nothing of this checkpoint */
    uint64_t seq;         /* arrival order */
};

struct rdzv_parts {
    size_t n, cap; /* recs[] grows up to RDZV_PARTS_RECS */
    uint64_t seq;
    struct rdzv_part_rec *recs;
};

/* Records that node `holder` holds ck's part (ck->part != 0; copied). The same part of the same
 * name held by the same node is replaced. *pp is allocated at the first record (free it with
 * rdzv_parts_free). Returns 0 or -ENOMEM (nothing recorded). */
int rdzv_parts_add(struct rdzv_parts **pp, const struct rdzv_ckpt *ck, uint64_t holder);

/* The part of ck->name that `holder` held (ck->part; 0: every part of that name it held) is
 * gone. Accepts a NULL p. */
void rdzv_parts_drop(struct rdzv_parts *p, const struct rdzv_ckpt *ck, uint64_t holder);

/* The parts count of rank 0's record `name` with that checksum held by any node (part 1), or
 * 0: a copy of it is part 1 of that many too. */
uint32_t rdzv_parts_whole(const struct rdzv_parts *p, const char *name, uint64_t checksum);

/* Whether the job writes sharded checkpoints: a node other than the writer of part 1 reported
 * a part with something in it. */
int rdzv_parts_sharded(const struct rdzv_parts *p);

/* The newest checkpoint (by step, then by the latest report) every part of which is held by a
 * node for which is_member(arg, node id) is true, or was empty: its name, step and parts count.
 * Returns 1 when there is one, 0 when none (or out of memory). is_member is called once per
 * record; the rest is linear in the records per candidate name (a member flooding reports costs
 * the round's close at most RDZV_PARTS_RECS^2 steps). */
int rdzv_parts_complete(const struct rdzv_parts *p, int (*is_member)(void *arg, uint64_t id),
                        void *arg, char *name, size_t namelen, int64_t *step, uint32_t *parts);

/* Frees p (NULL allowed). */
void rdzv_parts_free(struct rdzv_parts *p);

#endif
