/* A job's goodput on the server: the last GOODPUT (message.h struct rdzv_goodput) of the node
 * holding group rank 0, checked before it is kept, and shown in STATUS and /metrics. Pure: no
 * loop, no sockets. The figures are an agent's word, display only: nothing is decided on them. */
#ifndef MUSTER_RDZV_GPREC_H
#define MUSTER_RDZV_GPREC_H

#include <jansson.h>
#include <stdio.h>

#include "message.h"

/* The phase's name as /metrics and STATUS spell it ("rendezvous" ... "restart_wait"), or "?". */
const char *rdzv_goodput_phase_name(int phase);

/* NULL when g may be kept, else why not (one line, no newline): a figure over RDZV_GP_MAX_MS,
 * wall_ms that is not the sum of the phases, lost_ms over training_ms. */
const char *rdzv_goodput_check(const struct rdzv_goodput *g);

/* (training - lost) / wall, in [0, 1]; 0 while wall is 0. */
double rdzv_goodput_ratio(const struct rdzv_goodput *g);

/* {"host", "round", "restarts", "wall_s", "seconds": {phase: s...}, "lost_s", "ratio"}; NULL
 * when out of memory. host is borrowed. */
json_t *rdzv_goodput_json(const struct rdzv_goodput *g, const char *host);

/* The samples of muster_job_seconds{job,phase} (the phases, then phase="lost" and "wall") or of
 * muster_job_goodput_ratio{job} (ratio = 1) for one job; the job id is escaped as a label. */
void rdzv_goodput_metrics(FILE *f, const char *job_id, const struct rdzv_goodput *g, int ratio);

#endif
