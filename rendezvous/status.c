/* Status document: see status.h. Everything is read from the live server structs; nothing is
 * cached, so the document is as fresh as the call. */
#include "status.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "cred.h"
#include "service.h"

static const char *job_state(const struct rdzv_job *job)
{
    switch (job->state) {
    case RDZV_JOB_FILLING:
        return "gathering";
    case RDZV_JOB_RUNNING:
        return job->rebuilding ? "recovering" : "running";
    default:
        return job->n_members > 0 && job->n_done == job->n_members ? "done" : "failed";
    }
}

static const char *node_state(const struct rdzv_job *job, const struct rdzv_job_member *m)
{
    if (job->state == RDZV_JOB_FILLING)
        return "joined";
    return m->done ? "done" : "running";
}

/* An integer NVML did not answer (-1) is null. */
static json_t *opt_int(int64_t v)
{
    return v < 0 ? json_null() : json_integer((json_int_t)v);
}

/* The node's latest TELEMETRY (handler_tel.c), as the dashboard reads it. */
static json_t *telemetry_json(const struct rdzv_telemetry *t)
{
    json_t *gpus = json_array();

    for (uint32_t i = 0; gpus != NULL && i < t->ngpus; i++) {
        const struct rdzv_tel_gpu *g = &t->gpus[i];
        json_t *procs = json_array();

        for (uint32_t k = 0; procs != NULL && k < g->nprocs; k++) {
            const struct rdzv_tel_proc *q = &g->procs[k];

            json_array_append_new(
                procs,
                json_pack("{s:I, s:o, s:o}", "pid", (json_int_t)q->pid, "rank", opt_int(q->rank),
                          "mem",
                          q->mem == UINT64_MAX ? json_null() : json_integer((json_int_t)q->mem)));
        }
        json_array_append_new(
            gpus, json_pack("{s:I, s:o, s:I, s:I, s:o, s:o, s:o, s:o, s:I, s:I, s:I, s:o}", "gpu",
                            (json_int_t)g->gpu, "util", opt_int(g->util), "mem_used",
                            (json_int_t)g->mem_used, "mem_total", (json_int_t)g->mem_total,
                            "sm_clock", opt_int(g->sm_clock), "mem_clock", opt_int(g->mem_clock),
                            "temp", opt_int(g->temp), "power_w",
                            g->power_mw < 0 ? json_null() : json_real(g->power_mw / 1000.0),
                            "throttle", (json_int_t)g->throttle, "xid", (json_int_t)g->xid, "ecc",
                            (json_int_t)g->ecc, "procs", procs));
    }
    return json_pack("{s:I, s:o}", "t_ms", (json_int_t)t->t_ms, "gpus", gpus);
}

/* One member or pending joiner; state == NULL derives it from the job. */
static json_t *node_json(struct rdzv_server *srv, const struct rdzv_job *job,
                         const struct rdzv_job_member *m, const char *state, int tel)
{
    const struct peer *p = m->peer;
    int placed = state == NULL && job->state != RDZV_JOB_FILLING;
    char id[17];

    snprintf(id, sizeof(id), "%016" PRIx64, m->node_id);
    return json_pack(
        "{s:s, s:s, s:s, s:o, s:I, s:o, s:s, s:o, s:o, s:o}", "host", m->host, "addr", m->addr,
        "node_id", id, "group_rank", placed ? json_integer(m->group_rank) : json_null(), "nproc",
        (json_int_t)m->nproc, "rank_offset", placed ? json_integer(m->rank_offset) : json_null(),
        "state", state ? state : node_state(job, m), "last_seen_ms_ago",
        p ? json_integer((json_int_t)(uv_now(srv->loop) - p->last_seen_ms)) : json_null(),
        "heartbeat_gap_max_ms", p ? json_integer((json_int_t)p->gap_max_ms) : json_null(),
        "telemetry", tel && p && p->tel ? telemetry_json(p->tel) : json_null());
}

static json_t *nodes_json(struct rdzv_server *srv, const struct rdzv_job *job, int tel)
{
    json_t *a = json_array();

    for (size_t i = 0; a != NULL && i < job->n_members; i++)
        json_array_append_new(a, node_json(srv, job, &job->members[i], NULL, tel));
    /* pending joiners: spares apart from nodes waiting to grow the job */
    for (size_t i = 0; a != NULL && i < job->n_pending; i++)
        json_array_append_new(a, node_json(srv, job, &job->pending[i],
                                           job->pending[i].spare ? "spare" : "waiting", 0));
    return a;
}

static json_int_t count_pending(const struct rdzv_job *job, int spare)
{
    json_int_t n = 0;

    for (size_t i = 0; i < job->n_pending; i++)
        n += (job->pending[i].spare != 0) == spare;
    return n;
}

static json_t *ckpt_json(const struct rdzv_ckptlog_rec *rec, uint64_t wall_now)
{
    const struct rdzv_ckpt *ck = &rec->ck;
    json_t *reps = json_array();
    char sum[17];

    for (unsigned i = 0; reps != NULL && i < rec->n_replicas; i++)
        json_array_append_new(reps, json_string(rec->replicas[i]));
    snprintf(sum, sizeof(sum), "%016" PRIx64, ck->checksum);
    /* host: the node that recorded it; replicas: hosts holding a verified copy */
    /* age_s: the server's wall clock minus the agent's time_ms, floored at 0 (clocks differ) */
    return json_pack("{s:s, s:I, s:I, s:s, s:I, s:f, s:s, s:s, s:s, s:o*}", "name", ck->name,
                     "step", (json_int_t)ck->step, "size", (json_int_t)ck->size, "checksum", sum,
                     "time_ms", (json_int_t)ck->time_ms, "age_s",
                     wall_now > ck->time_ms ? (wall_now - ck->time_ms) / 1000.0 : 0.0, "state",
                     ck->verified_bad ? "bad" : "recorded", "reason", ck->reason, "host", rec->host,
                     "replicas", reps);
}

#define SHARDED_SHOWN 8 /* sharded checkpoints listed per job, newest steps first */

/* Who holds part k of (name, parts) among the members: their hosts; an empty part: "empty". */
static json_t *holders_json(const struct rdzv_job *job, const struct rdzv_parts *p,
                            const char *name, uint32_t parts, uint32_t k, int *held)
{
    json_t *a = json_array();

    *held = 0;
    for (size_t i = 0; a != NULL && i < p->n; i++) {
        const struct rdzv_part_rec *r = &p->recs[i];
        int m;

        if (r->part != k || r->parts != parts || strcmp(r->name, name) != 0)
            continue;
        if (r->empty) {
            *held = 1;
            json_array_append_new(a, json_string("empty"));
        } else if ((m = rdzv_job_find_node(job, r->holder)) >= 0) {
            *held = 1;
            json_array_append_new(a, json_string(job->members[m].host));
        }
    }
    return a;
}

/* A sharded job's checkpoints (parts.h): per step, which member holds which part, and whether
 * the members hold every part between them (what a new round would resume from). */
static json_t *sharded_json(const struct rdzv_job *job)
{
    const struct rdzv_parts *p = job->parts;
    const struct rdzv_part_rec *shown[SHARDED_SHOWN];
    size_t n = 0;
    json_t *a = json_array();

    if (a == NULL || !rdzv_parts_sharded(p))
        return a;
    /* the newest SHARDED_SHOWN candidates (a part 1 record names one), one per name and parts */
    for (size_t i = 0; i < p->n; i++) {
        const struct rdzv_part_rec *r = &p->recs[i];
        size_t at = n, dup = 0;

        if (r->part != 1)
            continue;
        for (size_t k = 0; k < n && !dup; k++)
            dup = shown[k]->parts == r->parts && strcmp(shown[k]->name, r->name) == 0;
        if (dup)
            continue;
        while (at > 0 && shown[at - 1]->step < r->step)
            at--;
        if (at >= SHARDED_SHOWN)
            continue;
        if (n < SHARDED_SHOWN)
            n++;
        memmove(&shown[at + 1], &shown[at], (n - 1 - at) * sizeof(shown[0]));
        shown[at] = r;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *parts = json_array();
        uint32_t held = 0;

        for (uint32_t k = 1; parts != NULL && k <= shown[i]->parts && k <= 64; k++) {
            int h;
            json_t *hosts = holders_json(job, p, shown[i]->name, shown[i]->parts, k, &h);
            held += (uint32_t)h;
            json_array_append_new(parts, json_pack("{s:I, s:o}", "part", (json_int_t)k, "held_by",
                                                   hosts ? hosts : json_array()));
        }
        for (uint32_t k = 65; k <= shown[i]->parts; k++) { /* counted, not listed */
            int h;
            json_decref(holders_json(job, p, shown[i]->name, shown[i]->parts, k, &h));
            held += (uint32_t)h;
        }
        json_array_append_new(a, json_pack("{s:s, s:I, s:I, s:I, s:b, s:o}", "name", shown[i]->name,
                                           "step", (json_int_t)shown[i]->step, "parts",
                                           (json_int_t)shown[i]->parts, "held", (json_int_t)held,
                                           "complete", held == shown[i]->parts, "by_part",
                                           parts ? parts : json_array()));
    }
    return a;
}

/* Newest first, as the log keeps them. */
static json_t *ckpts_json(const struct rdzv_ckptlog *log)
{
    json_t *a = json_array();
    uint64_t wall_now = mc_wall_ms();

    for (size_t i = 0; a != NULL && log != NULL && i < log->n; i++)
        json_array_append_new(a, ckpt_json(&log->recs[i], wall_now));
    return a;
}

/* One round change of the history (service.h struct sjob_restart); verdict: the evidence's root
 * cause when it was made for this round, else NULL. */
static json_t *restart_json(struct rdzv_server *srv, const struct sjob_restart *r,
                            const char *verdict)
{
    const struct rdzv_failure *f = &r->cause;

    return json_pack("{s:I, s:I, s:b, s:b, s:f, s:I, s:s, s:I, s:I, s:I, s:I, s:s, s:s*, s:s*}",
                     "round", (json_int_t)f->round, "restart_count", (json_int_t)r->restart_count,
                     "counted", r->counted, "final", r->final, "age_s",
                     (uv_now(srv->loop) - r->at_ms) / 1000.0, "time_ms", (json_int_t)r->wall_ms,
                     "host", f->host, "rank", (json_int_t)f->rank, "local_rank",
                     (json_int_t)f->local_rank, "exit_code", (json_int_t)f->exit_code, "signal",
                     (json_int_t)f->signal, "text", f->text, "signature",
                     f->sig_class != RDZV_SIG_NONE ? f->sig : NULL, "root_cause", verdict);
}

/* The newest SJOB_RESTARTS_KEPT round changes, newest first. */
static json_t *restarts_json(struct rdzv_server *srv, const struct sjob *sj)
{
    json_t *a = json_array();
    uint32_t kept = sj->n_restarts < SJOB_RESTARTS_KEPT ? sj->n_restarts : SJOB_RESTARTS_KEPT;

    for (uint32_t i = 0; a != NULL && sj->restarts != NULL && i < kept; i++) {
        const struct sjob_restart *r = &sj->restarts[(sj->n_restarts - 1 - i) % SJOB_RESTARTS_KEPT];
        const char *v =
            sj->verdict[0] != '\0' && sj->verdict_round == r->cause.round ? sj->verdict : NULL;

        json_array_append_new(a, restart_json(srv, r, v));
    }
    return a;
}

static size_t count_excluded(const struct rdzv_job *job)
{
    size_t n = 0;

    for (size_t i = 0; i < job->n_nodes; i++)
        n += job->nodes[i].excluded != 0;
    return n;
}

/* The failure ledger: every node charged with a failure, excluded or not. */
static json_t *failures_json(const struct rdzv_job *job)
{
    json_t *a = json_array();

    for (size_t i = 0; a != NULL && i < job->n_nodes; i++) {
        const struct rdzv_job_node *n = &job->nodes[i];

        /* seen: the address the server saw, which the ledger is keyed by */
        json_array_append_new(a, json_pack("{s:s, s:s, s:s, s:I, s:b, s:s?}", "host", n->host,
                                           "addr", n->addr, "seen", n->seen, "failures",
                                           (json_int_t)n->failures, "excluded", n->excluded,
                                           "reason", n->excluded ? n->reason : NULL));
    }
    return a;
}

/* with_nodes: 2 everything, 1 the nodes without their telemetry, 0 no lists (see
 * rdzv_status_json) */
static json_t *job_json(struct rdzv_server *srv, const struct sjob *sj, int with_nodes)
{
    const struct rdzv_job *job = sj->job;
    json_t *o =
        json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I}", "id", job->id, "state",
                  job_state(job), "round", (json_int_t)job->round, "restart_count",
                  (json_int_t)job->restart_count, "max_restarts", (json_int_t)job->max_restarts,
                  "min_nodes", (json_int_t)job->min_nodes, "max_nodes", (json_int_t)job->max_nodes,
                  "world_size", (json_int_t)(job->state == RDZV_JOB_FILLING ? 0 : job->world_size));

    /* The running round's resume point (group rank 0's pick), null before a round closed. */
    if (o != NULL && job->state != RDZV_JOB_FILLING) {
        json_object_set_new(o, "resume", job->resume[0] ? json_string(job->resume) : json_null());
        json_object_set_new(o, "resume_step", json_integer(job->resume_step));
        json_object_set_new(o, "resume_parts", json_integer(job->resume_parts));
    }
    if (o != NULL && with_nodes) {
        json_object_set_new(o, "nodes", nodes_json(srv, job, with_nodes > 1));
        json_object_set_new(o, "checkpoints", ckpts_json(sj->ckpts));
        json_object_set_new(o, "sharded", sharded_json(job));
        json_object_set_new(o, "restarts", restarts_json(srv, sj));
        json_object_set_new(o, "restarts_seen", json_integer(sj->n_restarts));
        json_object_set_new(o, "node_failures", failures_json(job));
        json_object_set_new(o, "preflight", rdzv_pfrec_json(&sj->pfrec));
    }
    if (o != NULL) {
        json_t *w = json_array();

        for (unsigned i = 0; w != NULL && i < sj->n_warnings; i++)
            json_array_append_new(w, json_string(sj->warnings[i]));
        json_object_set_new(o, "warnings", w);
    }
    /* where the job's time went, as the node of group rank 0 last reported it (gprec.h) */
    if (o != NULL)
        json_object_set_new(o, "goodput",
                            sj->have_gp ? rdzv_goodput_json(&sj->gp, sj->gp_host) : json_null());
    if (o != NULL) {
        json_object_set_new(o, "exclude_after", json_integer(job->exclude_after));
        json_object_set_new(o, "excluded", json_integer((json_int_t)count_excluded(job)));
        json_object_set_new(o, "spares", json_integer(count_pending(job, 1)));
        json_object_set_new(o, "waiting", json_integer(count_pending(job, 0)));
        /* the last failure's or hang's verdict (rendezvous/verdict.h), null before one */
        if (sj->verdict[0] != '\0')
            json_object_set_new(o, "evidence",
                                json_pack("{s:I, s:I, s:s}", "round", (json_int_t)sj->verdict_round,
                                          "culprit", (json_int_t)sj->verdict_culprit, "root_cause",
                                          sj->verdict));
        else
            json_object_set_new(o, "evidence", json_null());
    }
    return o;
}

static json_t *doc_json(struct rdzv_server *srv, const char *job_id, int with_nodes)
{
    json_t *jobs = json_array();
    json_t *doc;

    for (struct sjob *sj = srv->jobs; jobs != NULL && sj != NULL; sj = sj->next)
        if (job_id == NULL || job_id[0] == '\0' || rdzv_cred_scope_covers(job_id, sj->job->id))
            json_array_append_new(jobs, job_json(srv, sj, with_nodes));
    doc = json_pack("{s:{s:f, s:I, s:I, s:I}, s:o}", "server", "uptime_s",
                    (uv_now(srv->loop) - srv->start_ms) / 1000.0, "time_ms",
                    (json_int_t)mc_wall_ms(), "connections", (json_int_t)srv->n_peers, "jobs",
                    (json_int_t)srv->n_jobs, "jobs", jobs);
    if (doc != NULL && !with_nodes)
        json_object_set_new(doc, "truncated", json_true());
    if (doc != NULL && with_nodes == 1)
        json_object_set_new(doc, "telemetry_truncated", json_true());
    return doc;
}

int rdzv_status_json(struct rdzv_server *srv, const char *job_id, char *buf, size_t cap,
                     size_t *len)
{
    /* what does not fit goes: first the nodes' telemetry (large, and only a display), then the
     * lists */
    for (int with_nodes = 2; with_nodes >= 0; with_nodes--) {
        json_t *doc = doc_json(srv, job_id, with_nodes);
        size_t n;

        if (doc == NULL)
            return -ENOMEM;
        n = json_dumpb(doc, buf, cap, JSON_COMPACT | JSON_REAL_PRECISION(6));
        json_decref(doc);
        if (n == 0)
            return -ENOMEM;
        if (n < cap) {
            buf[n] = '\0';
            *len = n;
            return 0;
        }
    }
    return -EMSGSIZE;
}
