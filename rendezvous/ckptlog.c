/* Checkpoint records of one job: see ckptlog.h. */
#include "ckptlog.h"

#include <errno.h>
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

void rdzv_ckptlog_add(struct rdzv_ckptlog *log, const struct rdzv_ckpt *ck)
{
    size_t end = log->n; /* recs[0..end) move down one place */

    for (size_t i = 0; i < log->n; i++) {
        if (strcmp(log->recs[i].name, ck->name) == 0) {
            end = i; /* the old record is overwritten by the shift */
            log->n--;
            break;
        }
    }
    if (end == RDZV_CKPTLOG_MAX) { /* full, no same name: the oldest falls off */
        end--;
        log->n--;
    }
    memmove(&log->recs[1], &log->recs[0], end * sizeof(log->recs[0]));
    log->recs[0] = *ck;
    log->n++;
}
