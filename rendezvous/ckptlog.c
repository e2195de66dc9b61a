/* Checkpoint records of one job: see ckptlog.h. */
#include "ckptlog.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rdzv_ckptlog_new(struct rdzv_ckptlog **out)
{
    struct rdzv_ckptlog *log = calloc(1, sizeof(*log));

    if (log == NULL)
        return -ENOMEM;
    *out = log;
    return 0;
}

void rdzv_ckptlog_free(struct rdzv_ckptlog *log)
{
    free(log);
}

static int find(const struct rdzv_ckptlog *log, const char *name)
{
    for (size_t i = 0; i < log->n; i++)
        if (strcmp(log->recs[i].ck.name, name) == 0)
            return (int)i;
    return -1;
}

/* Moves a new record for ck to the front; returns it, with its replicas cleared. */
static struct rdzv_ckptlog_rec *push(struct rdzv_ckptlog *log, const struct rdzv_ckpt *ck)
{
    int old = find(log, ck->name);
    size_t end = log->n; /* recs[0..end) move down one place */

    if (old >= 0) {
        end = (size_t)old; /* the old record is overwritten by the shift */
        log->n--;
    } else if (end == RDZV_CKPTLOG_MAX) { /* full, no same name: the oldest falls off */
        end--;
        log->n--;
    }
    memmove(&log->recs[1], &log->recs[0], end * sizeof(log->recs[0]));
    memset(&log->recs[0], 0, sizeof(log->recs[0]));
    log->recs[0].ck = *ck;
    log->recs[0].ck.holder[0] = '\0';
    log->n++;
    return &log->recs[0];
}

void rdzv_ckptlog_add_from(struct rdzv_ckptlog *log, const struct rdzv_ckpt *ck, const char *host)
{
    struct rdzv_ckptlog_rec keep = {.n_replicas = 0};
    struct rdzv_ckptlog_rec *r;
    int old = find(log, ck->name);

    /* a replica that verified before the writer's record arrived stays listed */
    if (old >= 0 && log->recs[old].ck.checksum == ck->checksum)
        keep = log->recs[old];
    r = push(log, ck);
    snprintf(r->host, sizeof(r->host), "%s", host != NULL ? host : "");
    r->n_replicas = keep.n_replicas;
    memcpy(r->replicas, keep.replicas, sizeof(r->replicas));
}

void rdzv_ckptlog_add(struct rdzv_ckptlog *log, const struct rdzv_ckpt *ck)
{
    rdzv_ckptlog_add_from(log, ck, NULL);
}

void rdzv_ckptlog_drop_replica(struct rdzv_ckptlog *log, const struct rdzv_ckpt *ck)
{
    int i = find(log, ck->name);
    struct rdzv_ckptlog_rec *r;

    if (i < 0 || log->recs[i].ck.checksum != ck->checksum)
        return;
    r = &log->recs[i];
    for (unsigned k = 0; k < r->n_replicas; k++)
        if (strcmp(r->replicas[k], ck->holder) == 0) {
            memmove(&r->replicas[k], &r->replicas[k + 1],
                    (r->n_replicas - k - 1) * sizeof(r->replicas[0]));
            r->n_replicas--;
            return;
        }
}

void rdzv_ckptlog_add_replica(struct rdzv_ckptlog *log, const struct rdzv_ckpt *ck)
{
    int i = find(log, ck->name);
    struct rdzv_ckptlog_rec *r;

    if (i < 0 || log->recs[i].ck.checksum != ck->checksum || log->recs[i].ck.verified_bad)
        r = push(log, ck);
    else
        r = &log->recs[i];
    for (unsigned k = 0; k < r->n_replicas; k++)
        if (strcmp(r->replicas[k], ck->holder) == 0)
            return;
    if (r->n_replicas < RDZV_CKPTLOG_REPLICAS)
        snprintf(r->replicas[r->n_replicas++], sizeof(r->replicas[0]), "%s", ck->holder);
}
