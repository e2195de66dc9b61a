/* The culprit of a failure or a hang, named from every rank's evidence (EVIDENCE messages,
 * agent/evidence.h). Pure: no loop, no sockets; the server (sjob.c) gathers the evidence and
 * charges the culprit's node instead of the node that reported first.
 *
 * The rules, first match wins:
 *   1. Flight Recorder: where ranks report the default group's sequence numbers and some
 *      enqueued fewer collectives than the others, the one that enqueued fewest never entered
 *      the next one ("rank 5 ... never entered all_reduce #1532").
 *   2. Stacks: some ranks' main threads wait in a collective, others are in none: the lowest
 *      of the others is the culprit, the first sentence names its script frame.
 *   3. Mismatched collectives: every rank is in one, but not all in the same: the lowest rank
 *      of the smaller side.
 *   4. The first failure: the rank that exited first (it was not alive when the evidence was
 *      taken), the others waiting for it.
 * Otherwise no culprit is named (culprit -1: the reporter is charged, as without evidence). */
#ifndef MUSTER_RDZV_VERDICT_H
#define MUSTER_RDZV_VERDICT_H

#include <stddef.h>

#include "message.h"

#define RDZV_VERDICT_BLOCK_MAX 4096
#define RDZV_VERDICT_RANKS_MAX 16384 /* ranks looked at; a larger world is judged on these */

struct rdzv_verdict {
    int culprit;                  /* its global rank, -1: none named */
    int rule;                     /* 1..4 above, 0: none */
    char host[RDZV_HOST_MAX + 1]; /* the culprit's node */
    int local_rank;
    char line[RDZV_TEXT_MAX + 1];       /* one line: the root cause (UTF-8) */
    char block[RDZV_VERDICT_BLOCK_MAX]; /* the line, then the culprit's stack, several lines */
};

/* ev[r]: rank r's evidence or NULL (missing), r < n. first: the failure reported first (its
 * rank -1 when it was no worker's); may be NULL. */
void rdzv_verdict_make(const struct rdzv_evidence *const *ev, size_t n,
                       const struct rdzv_failure *first, struct rdzv_verdict *v);

/* "ranks 0–4, 6–7" ("rank 3" for one) for the ranks r < n with pick(r) set, at most len bytes. */
void rdzv_verdict_ranks(const unsigned char *pick, size_t n, char *buf, size_t len);

#endif
