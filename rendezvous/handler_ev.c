/* Evidence of a failure or a hang, and `muster debug` (rendezvous/verdict.h, agent/evidence.h).
 *
 * A FAILED with RDZV_FAILURE_EVIDENCE does not restart the job at once: the server keeps it,
 * sends COLLECT to the round's other members, and decides once every rank's EVIDENCE is in
 * (or the sender's --evidence-timeout plus EV_SLACK_MS has passed): the verdict names the
 * culprit, whose node is charged with the failure (--exclude-after), and the RESTART or
 * JOB_FAILED carries its sentence. A DEBUG_REQ from an observer with the job's credential
 * sends COLLECT with a request number; the answer is a STATUS document of the ranks' stacks.
 * Agents' records are untrusted: a record is kept only for a rank of its sender's node. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "escape.h"
#include "handler.h"
#include "job.h"
#include "sjob.h"
#include "verdict.h"

#define EV_SLACK_MS 3000        /* beyond the agents' own bound: /proc, the network */
#define EV_DEFAULT_MS 5000      /* a COLLECT's bound when the sender gave none */
#define EV_MAX_MS 120000        /* the most a sender may ask for (--evidence-timeout's top) */
#define EV_DEBUG_EVERY_MS 10000 /* one `muster debug` collection per job this often */
#define EV_DEBUG_MAX_RANKS 256  /* ranks in one answer (it must fit one STATUS frame) */

/* The evidence of one round of one job. */
struct rdzv__evset {
    uint32_t round, req;
    size_t world;
    struct rdzv_evidence **rec; /* world entries, NULL: not in */
    size_t have;
    int collecting;            /* a failure waits for the verdict */
    struct rdzv_failure first; /* ... that one */
    struct peer *reporter;     /* ... its sender (NULL once gone) */
    struct peer *debug;        /* an observer waits for req's answer; NULL none */
    int32_t debug_rank;
    uint64_t deadline_ms; /* uv_now; 0 = none */
    uv_timer_t timer;
    int timer_open;
};

static void set_clear(struct rdzv__evset *s)
{
    for (size_t i = 0; i < s->world; i++)
        free(s->rec[i]);
    free(s->rec);
    s->rec = NULL;
    s->world = s->have = 0;
    s->collecting = 0;
    s->reporter = NULL;
    if (s->debug != NULL)
        s->debug->debug_slot = NULL;
    s->debug = NULL;
    s->deadline_ms = 0;
    if (s->timer_open)
        uv_timer_stop(&s->timer);
}

static void timer_closed(uv_handle_t *h)
{
    free((char *)h - offsetof(struct rdzv__evset, timer));
}

void rdzv__ev_free(struct sjob *sj)
{
    struct rdzv__evset *s = sj->ev;

    if (s == NULL)
        return;
    set_clear(s);
    sj->ev = NULL;
    if (s->timer_open)
        uv_close((uv_handle_t *)&s->timer, timer_closed);
    else
        free(s);
}

static void timer_cb(uv_timer_t *t);

/* The set for (round, req), emptied when it held another one. NULL without memory. */
static struct rdzv__evset *set_for(struct sjob *sj, uint32_t round, uint32_t req)
{
    struct rdzv__evset *s = sj->ev;

    if (s == NULL) {
        if ((s = calloc(1, sizeof(*s))) == NULL)
            return NULL;
        sj->ev = s;
        if (uv_timer_init(sj->srv->loop, &s->timer) == 0) {
            s->timer_open = 1;
            s->timer.data = sj;
        }
    }
    if (s->rec != NULL && s->round == round && s->req == req)
        return s;
    set_clear(s);
    s->round = round;
    s->req = req;
    s->world = sj->job->world_size;
    if (s->world > RDZV_VERDICT_RANKS_MAX)
        s->world = RDZV_VERDICT_RANKS_MAX;
    if ((s->rec = calloc(s->world ? s->world : 1, sizeof(*s->rec))) == NULL) {
        s->world = 0;
        return NULL;
    }
    return s;
}

/* The member index of p in the running round, -1 none. */
static int member_of(const struct sjob *sj, const struct peer *p)
{
    return rdzv_job_find(sj->job, p);
}

static void broadcast_collect(struct sjob *sj, const struct peer *except, uint32_t req,
                              uint32_t timeout_ms, const char *why)
{
    struct rdzv_msg m;

    rdzv_msg_init(&m, RDZV_MSG_COLLECT);
    m.u.collect.round = sj->job->round;
    m.u.collect.req = req;
    m.u.collect.timeout_ms = timeout_ms;
    snprintf(m.u.collect.why, sizeof(m.u.collect.why), "%.200s", why);
    mc_utf8_sanitize(m.u.collect.why);
    for (size_t i = 0; i < sj->job->n_members; i++)
        if (sj->job->members[i].peer != except)
            rdzv__send(sj->job->members[i].peer, &m);
}

static void arm(struct rdzv__evset *s, struct sjob *sj, uint32_t timeout_ms)
{
    uint64_t ms = (uint64_t)(timeout_ms ? timeout_ms : EV_DEFAULT_MS) + EV_SLACK_MS;

    s->deadline_ms = uv_now(sj->srv->loop) + ms;
    if (s->timer_open)
        uv_timer_start(&s->timer, timer_cb, ms, 0);
}

/* ---- the verdict ------------------------------------------------------------------------ */

static void log_block(struct sjob *sj, const struct rdzv_verdict *v)
{
    const char *s = v->block;

    rdzv__log(sj->srv, "job %s round %u: root cause: %s", sj->job->id, sj->job->round, v->line);
    s += strcspn(s, "\n");
    while (*s == '\n') {
        size_t len;
        s++;
        len = strcspn(s, "\n");
        if (len > 0)
            rdzv__log(sj->srv, "job %s:   %.*s", sj->job->id, (int)len, s);
        s += len;
    }
}

/* Every rank is in, or the time is up: name the culprit and let the failure take its course. */
static void conclude(struct sjob *sj)
{
    struct rdzv__evset *s = sj->ev;
    struct rdzv_verdict *v = malloc(sizeof(*v));
    struct rdzv_failure cause = s->first;
    struct peer *reporter = s->reporter;
    void *who = reporter;
    int missing = (int)(s->world - s->have);

    if (v == NULL)
        return;
    s->collecting = 0;
    s->deadline_ms = 0;
    rdzv_verdict_make((const struct rdzv_evidence *const *)s->rec, s->world, &s->first, v);
    log_block(sj, v);
    if (missing > 0)
        rdzv__log(sj->srv, "job %s round %u: %d of %zu ranks sent no evidence in time", sj->job->id,
                  sj->job->round, missing, s->world);
    snprintf(sj->verdict, sizeof(sj->verdict), "%s", v->line);
    sj->verdict_culprit = v->culprit;
    sj->verdict_round = sj->job->round;
    cause.flags &= ~RDZV_FAILURE_EVIDENCE;
    if (v->culprit >= 0) {
        /* the culprit's node pays: the member whose ranks hold it */
        for (size_t i = 0; i < sj->job->n_members; i++) {
            const struct rdzv_job_member *m = &sj->job->members[i];
            if ((uint32_t)v->culprit >= m->rank_offset &&
                (uint32_t)v->culprit < m->rank_offset + m->nproc)
                who = m->peer;
        }
        cause.rank = v->culprit;
        cause.local_rank = v->local_rank;
        snprintf(cause.host, sizeof(cause.host), "%s", v->host);
        snprintf(cause.text, sizeof(cause.text), "%s", v->line);
    }
    free(v);
    set_clear(s);
    if (who == NULL || member_of(sj, who) < 0)
        who = reporter;
    if (who == NULL)
        return; /* the reporter went: its loss restarted the round already */
    rdzv__sjob_apply(sj, rdzv_job_failed(sj->job, who, &cause, 0, uv_now(sj->srv->loop)));
}

/* ---- muster debug ----------------------------------------------------------------------- */

static json_t *rec_json(const struct rdzv_evidence *e)
{
    json_t *o = json_object(), *frames = json_array();
    const char *s = e->frames;

    while (*s != '\0') {
        size_t len = strcspn(s, "\n");
        json_array_append_new(frames, json_stringn(s, len));
        s += len + (s[len] == '\n');
    }
    json_object_set_new(o, "rank", json_integer(e->rank));
    json_object_set_new(o, "local_rank", json_integer(e->local_rank));
    json_object_set_new(o, "host", json_string(e->host));
    json_object_set_new(o, "pid", json_integer(e->pid));
    json_object_set_new(o, "alive", json_boolean(e->flags & RDZV_EV_ALIVE));
    json_object_set_new(o, "python", json_boolean(e->flags & RDZV_EV_HOOKED));
    json_object_set_new(o, "collective", json_string(e->op));
    json_object_set_new(o, "where", json_string(e->where));
    json_object_set_new(o, "innermost", json_string(e->innermost));
    json_object_set_new(o, "native", json_string(e->native));
    json_object_set_new(o, "silent_s", json_real((double)e->silent_ms / 1000.0));
    if (e->flags & RDZV_EV_FR) {
        json_object_set_new(o, "fr_enqueued", json_integer(e->fr_enqueued));
        json_object_set_new(o, "fr_completed", json_integer(e->fr_completed));
        json_object_set_new(o, "fr_pending", json_string(e->fr_op));
    }
    json_object_set_new(o, "frames", frames);
    return o;
}

static void answer_debug(struct sjob *sj)
{
    struct rdzv__evset *s = sj->ev;
    struct peer *p = s->debug;
    json_t *doc = json_object(), *ranks = json_array(), *missing = json_array();
    struct rdzv_msg *m;
    char *text;
    size_t n = 0;

    s->debug = NULL;
    s->deadline_ms = 0;
    if (p == NULL)
        return;
    p->debug_slot = NULL;
    for (size_t r = 0; r < s->world; r++) {
        if (s->debug_rank >= 0 && (size_t)s->debug_rank != r)
            continue;
        if (s->rec[r] == NULL)
            json_array_append_new(missing, json_integer((json_int_t)r));
        else if (n++ < EV_DEBUG_MAX_RANKS)
            json_array_append_new(ranks, rec_json(s->rec[r]));
    }
    json_object_set_new(doc, "job", json_string(sj->job->id));
    json_object_set_new(doc, "round", json_integer(s->round));
    json_object_set_new(doc, "ranks", ranks);
    json_object_set_new(doc, "missing", missing);
    text = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    m = malloc(sizeof(*m));
    if (text == NULL || m == NULL || strlen(text) > sizeof(m->u.status.json)) {
        rdzv__send_error(p, RDZV_ERR_PROTOCOL,
                         "the evidence does not fit one answer; ask for "
                         "one rank (--rank)");
    } else {
        m->type = RDZV_MSG_STATUS;
        m->u.status.len = (uint32_t)strlen(text);
        memcpy(m->u.status.json, text, m->u.status.len);
        rdzv__send(p, m);
    }
    free(m);
    free(text);
}

/* Refuses with ERROR and returns 1 unless p may read job_id's evidence: an observer
 * connection with the server's token, the observer credential or the job's credential; never a
 * worker or an agent (agents have no use for it; a worker runs the job's code). */
static int refuse(struct peer *p, const char *job_id)
{
    if (p->role != RDZV_ROLE_OBSERVER || p->cred.kind == RDZV_CRED_WORKER ||
        !rdzv_cred_may_status(&p->cred, job_id) || job_id[0] == '\0') {
        rdzv__peer_event(p, SRV_EV_AUTH_JOB_SCOPE, "DEBUG_REQ for job %s refused", job_id);
        rdzv__send_error(p, RDZV_ERR_AUTH,
                         "this credential may not read the evidence of job %s (an observer "
                         "connection with the job's credential or the server's token may)",
                         job_id);
        return 1;
    }
    return 0;
}

void rdzv__handle_debug_req(struct peer *p, const struct rdzv_debug_req *r)
{
    struct sjob *sj;
    struct rdzv__evset *s;
    uint64_t now = uv_now(p->srv->loop);

    if (refuse(p, r->job_id))
        return;
    sj = rdzv__sjob_find(p->srv, r->job_id);
    if (sj == NULL || sj->job->state != RDZV_JOB_RUNNING) {
        rdzv__send_error(p, RDZV_ERR_PROTOCOL, "job %s is not running here", r->job_id);
        return;
    }
    if (r->rank < -1 || (r->rank >= 0 && (uint32_t)r->rank >= sj->job->world_size)) {
        rdzv__send_error(p, RDZV_ERR_PROTOCOL, "job %s has no rank %d (world size %u)", r->job_id,
                         r->rank, sj->job->world_size);
        return;
    }
    if ((sj->ev != NULL && (sj->ev->collecting || sj->ev->debug != NULL)) ||
        (sj->debug_last_ms != 0 && now - sj->debug_last_ms < EV_DEBUG_EVERY_MS)) {
        rdzv__peer_event(p, SRV_EV_PROTOCOL, "DEBUG_REQ for job %s too soon", r->job_id);
        rdzv__send_error(p, RDZV_ERR_PROTOCOL,
                         "job %s is busy with evidence, or was asked less than %d s ago; try "
                         "again in a few seconds",
                         r->job_id, EV_DEBUG_EVERY_MS / 1000);
        return;
    }
    sj->debug_last_ms = now;
    if ((s = set_for(sj, sj->job->round, (uint32_t)(now & 0x7fffffff) | 1u)) == NULL) {
        rdzv__send_error(p, RDZV_ERR_PROTOCOL, "server out of memory");
        return;
    }
    s->debug = p;
    s->debug_rank = r->rank;
    p->debug_slot = &s->debug;
    broadcast_collect(sj, NULL, s->req, EV_DEFAULT_MS, "muster debug");
    arm(s, sj, EV_DEFAULT_MS);
}

/* ---- agents' messages ------------------------------------------------------------------- */

static int complete(const struct rdzv__evset *s)
{
    if (s->debug != NULL && s->debug_rank >= 0)
        return (size_t)s->debug_rank < s->world && s->rec[s->debug_rank] != NULL;
    return s->have >= s->world;
}

static void progress(struct sjob *sj)
{
    struct rdzv__evset *s = sj->ev;

    if (s == NULL || !complete(s))
        return;
    if (s->collecting)
        conclude(sj);
    else if (s->debug != NULL)
        answer_debug(sj);
}

void rdzv__handle_evidence(struct peer *p, const struct rdzv_evidence *e)
{
    struct sjob *sj = p->job;
    const struct rdzv_job_member *m;
    struct rdzv__evset *s;
    int i;

    if (sj == NULL || sj->job->state != RDZV_JOB_RUNNING || e->round != sj->job->round)
        return; /* late: the round it is about is over */
    if ((i = member_of(sj, p)) < 0)
        return;
    m = &sj->job->members[i];
    if (e->rank < 0 || (uint32_t)e->rank < m->rank_offset ||
        (uint32_t)e->rank >= m->rank_offset + m->nproc) {
        rdzv__peer_event(p, SRV_EV_PROTOCOL, "EVIDENCE for rank %d, not one of this node's",
                         e->rank);
        return; /* a node speaks for its own ranks only */
    }
    s = sj->ev;
    if (s != NULL && (s->collecting || s->debug != NULL) &&
        (s->round != e->round || s->req != e->req))
        return; /* another collection is under way */
    if ((s = set_for(sj, e->round, e->req)) == NULL || (size_t)e->rank >= s->world)
        return;
    if (s->rec[e->rank] == NULL) {
        if ((s->rec[e->rank] = malloc(sizeof(*e))) == NULL)
            return;
        s->have++;
    }
    *s->rec[e->rank] = *e;
    snprintf(s->rec[e->rank]->host, sizeof(s->rec[e->rank]->host), "%s", m->host);
    progress(sj);
}

int rdzv__ev_failed(struct peer *p, const struct rdzv_failure *f)
{
    struct sjob *sj = p->job;
    struct rdzv__evset *s = sj->ev;
    uint32_t timeout_ms = EV_DEFAULT_MS;
    char why[RDZV_EV_WHY_MAX + 1];

    if (!(f->flags & RDZV_FAILURE_EVIDENCE) || (f->flags & RDZV_FAILURE_FINAL) ||
        sj->job->state != RDZV_JOB_RUNNING || f->round != sj->job->round || member_of(sj, p) < 0)
        return 0;
    if (s != NULL && s->collecting && s->round == f->round)
        return 1; /* the first failure of the round is being judged: this one is evidence */
    if (s != NULL && s->debug != NULL) {
        struct peer *obs = s->debug;
        s->debug = NULL;
        obs->debug_slot = NULL;
        rdzv__send_error(obs, RDZV_ERR_PROTOCOL, "job %s failed while its evidence was taken",
                         sj->job->id);
    }
    if ((s = set_for(sj, f->round, 0)) == NULL)
        return 0;
    for (size_t r = 0; r < s->world; r++)
        if (s->rec[r] != NULL && s->rec[r]->timeout_ms > 0) {
            timeout_ms = s->rec[r]->timeout_ms;
            break;
        }
    if (timeout_ms > EV_MAX_MS) /* an agent's word: it must not hold its job's restart for ever */
        timeout_ms = EV_MAX_MS;
    s->collecting = 1;
    s->first = *f;
    if (s->first.host[0] == '\0')
        snprintf(s->first.host, sizeof(s->first.host), "%s",
                 sj->job->members[member_of(sj, p)].host);
    s->reporter = p;
    snprintf(why, sizeof(why), "rank %d on %.100s: %.120s", f->rank, s->first.host, f->text);
    broadcast_collect(sj, p, 0, timeout_ms, why);
    arm(s, sj, timeout_ms);
    progress(sj); /* a one-node job has every rank's already */
    return 1;
}

void rdzv__ev_member_gone(struct sjob *sj, struct peer *p)
{
    struct rdzv__evset *s = sj->ev;

    if (s != NULL && s->reporter == p)
        s->reporter = NULL;
}

static void timer_cb(uv_timer_t *t)
{
    struct sjob *sj = t->data;
    struct rdzv__evset *s = sj->ev;

    if (s == NULL || s->deadline_ms == 0)
        return;
    if (s->collecting) {
        if (sj->job->state == RDZV_JOB_RUNNING && s->round == sj->job->round)
            conclude(sj);
        else
            set_clear(s); /* the round ended otherwise (a lost node) */
    } else if (s->debug != NULL) {
        answer_debug(sj);
    }
}
