/* One log for the whole job: agents' LOG batches go into their job's ring (logring.h), under
 * the job's and each rank's rate cap; `muster logs` reads them with LOGS_REQ (an observer with
 * the job's credential, the observer credential or the server's token). An agent may only
 * speak for the ranks its node holds in the current round: lines of other ranks are dropped and
 * the refusal counted; a connection that is not in a job gets ERROR. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"
#include "handler.h"
#include "logring.h"
#include "sjob.h"

static struct rdzv_logring *ring(struct sjob *sj)
{
    if (sj->logs == NULL)
        sj->logs = rdzv_logring_new(&sj->srv->log_limits);
    return sj->logs;
}

void rdzv__handle_log(struct peer *p, const struct rdzv_log *l)
{
    struct sjob *sj = p->job;
    struct rdzv_logring *r;
    uint64_t now;
    int me, foreign = -1;
    uint32_t lo = 0, hi = 0;

    if (sj == NULL) {
        rdzv__peer_event(p, SRV_EV_PROTOCOL, "LOG before JOIN");
        rdzv__send_error(p, RDZV_ERR_PROTOCOL,
                         "LOG before JOIN: only an agent in a job may send its ranks' lines");
        return;
    }
    if ((r = ring(sj)) == NULL)
        return; /* out of memory: the lines are display only */
    rdzv_logring_agent_dropped(r, l->dropped);
    me = rdzv_job_find(sj->job, p);
    if (me < 0 || sj->job->state != RDZV_JOB_RUNNING) {
        /* a spare, a node waiting for a round, or lines that overtook a restart: they belong to
         * no rank of the round now */
        sj->log_foreign += l->count;
        return;
    }
    lo = sj->job->members[me].rank_offset;
    hi = lo + sj->job->members[me].nproc;
    now = uv_now(p->srv->loop);
    for (uint32_t i = 0; i < l->count; i++) {
        const struct rdzv_log_line *ln = &l->lines[i];

        if ((uint32_t)ln->rank < lo || (uint32_t)ln->rank >= hi) {
            foreign = ln->rank;
            sj->log_foreign++;
            continue;
        }
        rdzv_logring_add(r, now, ln, l->text + ln->off);
    }
    if (foreign >= 0)
        rdzv__peer_event(p, SRV_EV_AUTH_JOB_SCOPE,
                         "LOG for rank %d of job %s from the node of ranks %u-%u: dropped", foreign,
                         sj->job->id, lo, hi - 1);
}

/* Forgets ended logs past RDZV_LOG_KEEP_MS, and beyond the newest keep ones. */
static void prune(struct rdzv_server *srv, unsigned keep)
{
    uint64_t now = uv_now(srv->loop);
    unsigned n = 0;

    for (struct rdzv__ended_log **pp = &srv->ended_logs; *pp != NULL;) {
        struct rdzv__ended_log *e = *pp;

        if (n++ < keep && now - e->at_ms < RDZV_LOG_KEEP_MS) {
            pp = &e->next;
            continue;
        }
        *pp = e->next;
        rdzv_logring_free(e->ring);
        free(e);
    }
}

void rdzv__log_keep(struct sjob *sj)
{
    struct rdzv_server *srv = sj->srv;
    struct rdzv__ended_log *e;

    if (sj->logs == NULL || srv->closing)
        return;
    prune(srv, RDZV_LOG_KEEP_JOBS - 1);
    if ((e = calloc(1, sizeof(*e))) == NULL)
        return;
    snprintf(e->id, sizeof(e->id), "%s", sj->job->id);
    e->world_size = sj->job->world_size;
    e->at_ms = uv_now(srv->loop);
    e->ring = sj->logs;
    sj->logs = NULL;
    e->next = srv->ended_logs;
    srv->ended_logs = e;
}

static struct rdzv__ended_log *ended(struct rdzv_server *srv, const char *id)
{
    prune(srv, RDZV_LOG_KEEP_JOBS);
    for (struct rdzv__ended_log *e = srv->ended_logs; e != NULL; e = e->next)
        if (strcmp(e->id, id) == 0)
            return e;
    return NULL;
}

void rdzv__handle_logs_req(struct peer *p, const struct rdzv_logs_req *q)
{
    struct sjob *sj;
    struct rdzv__ended_log *old = NULL;
    struct rdzv_logring *r;
    uint32_t world;
    struct rdzv_msg *m;

    if (p->role != RDZV_ROLE_OBSERVER || p->cred.kind == RDZV_CRED_WORKER || q->job_id[0] == '\0' ||
        !rdzv_cred_may_status(&p->cred, q->job_id)) {
        rdzv__peer_event(p, SRV_EV_AUTH_JOB_SCOPE, "LOGS_REQ for job %s refused", q->job_id);
        rdzv__send_error(p, RDZV_ERR_AUTH,
                         "this credential may not read the log of job %s (an observer "
                         "connection with the job's credential or the server's token may)",
                         q->job_id);
        return;
    }
    if ((sj = rdzv__sjob_find(p->srv, q->job_id)) == NULL &&
        (old = ended(p->srv, q->job_id)) == NULL && !(q->flags & RDZV_LOGS_REQ_FOLLOW)) {
        rdzv__send_error(p, RDZV_ERR_CLOSED, "no job %s on this server", q->job_id);
        return;
    }
    r = sj != NULL ? sj->logs : old != NULL ? old->ring : NULL;
    world = sj != NULL ? sj->job->world_size : old != NULL ? old->world_size : 0;
    if (q->rank < -1 || (q->rank >= 0 && world > 0 && (uint32_t)q->rank >= world)) {
        rdzv__send_error(p, RDZV_ERR_PROTOCOL, "job %s has no rank %d (world size %u)", q->job_id,
                         q->rank, world);
        return;
    }
    if ((m = malloc(sizeof(*m))) == NULL) {
        rdzv__send_error(p, RDZV_ERR_PROTOCOL, "server out of memory");
        return;
    }
    rdzv_msg_init(m, RDZV_MSG_LOGS);
    if (r != NULL)
        rdzv_logring_read(r, q, &m->u.log);
    else
        m->u.log.next = q->after;
    if (old != NULL || (sj != NULL && sj->job->state == RDZV_JOB_FINISHED))
        m->u.log.state |= RDZV_LOGS_ENDED;
    else if (sj == NULL)
        m->u.log.state |= RDZV_LOGS_NONE; /* --follow of a job not started yet: waiting */
    rdzv__send(p, m);
    free(m);
}

/* --- the dashboard's tail (GET /logs) -------------------------------------------------------- */

static void tail_line(void *ctx, uint64_t seq, uint64_t time_ms, int32_t rank, uint8_t stream,
                      const char *text, size_t len)
{
    char line[RDZV_LOG_LINE_MAX + 1];

    memcpy(line, text, len);
    line[len] = '\0';
    mc_utf8_sanitize(line); /* JSON strings are UTF-8; a line's bytes need not be */
    json_array_append_new(ctx, json_pack("{s:I, s:I, s:i, s:s, s:s}", "seq", (json_int_t)seq,
                                         "time_ms", (json_int_t)time_ms, "rank", (int)rank,
                                         "stream", stream ? "stderr" : "stdout", "text", line));
}

char *rdzv__log_tail(struct rdzv_server *srv, const char *job_id, int32_t rank, size_t n,
                     int *status)
{
    struct sjob *sj = rdzv__sjob_find(srv, job_id);
    struct rdzv__ended_log *old = sj == NULL ? ended(srv, job_id) : NULL;
    struct rdzv_logring *r = sj != NULL ? sj->logs : old != NULL ? old->ring : NULL;
    uint32_t world = sj != NULL ? sj->job->world_size : old != NULL ? old->world_size : 0;
    struct rdzv_logring_stats st = {0};
    json_t *lines, *doc;
    char *text;

    *status = 200;
    if (sj == NULL && old == NULL) {
        *status = 404;
        return NULL;
    }
    if (rank < -1 || (rank >= 0 && world > 0 && (uint32_t)rank >= world)) {
        *status = 400;
        return NULL;
    }
    if ((lines = json_array()) == NULL)
        goto oom;
    if (r != NULL) {
        rdzv_logring_tail(r, rank, n, tail_line, lines);
        rdzv_logring_stats(r, &st);
    }
    doc = json_pack("{s:s, s:i, s:I, s:b, s:o}", "job", job_id, "rank", (int)rank, "dropped",
                    (json_int_t)(st.dropped_ring + st.dropped_rate + st.dropped_agents), "ended",
                    old != NULL || (sj != NULL && sj->job->state == RDZV_JOB_FINISHED), "lines",
                    lines);
    if (doc == NULL)
        goto oom;
    text = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    if (text == NULL)
        goto oom;
    return text;
oom:
    *status = 500;
    return NULL;
}
