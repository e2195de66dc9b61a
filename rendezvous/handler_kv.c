/* Worker messages (ATTACH, KV_PUT, KV_GET, BARRIER) and the observer's STATUS_REQ. A worker
 * connection is bound to one job by ATTACH and can never name another: that is the whole of
 * the isolation between jobs. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handler.h"
#include "sjob.h"
#include "status.h"

void rdzv__handle_attach(struct peer *p, const struct rdzv_attach *a)
{
    struct rdzv_msg m;

    rdzv_msg_init(&m, RDZV_MSG_ATTACH_OK);
    struct sjob *sj = rdzv__sjob_find(p->srv, a->job_id);

    if (!p->attached && !rdzv_cred_may_attach(&p->cred, a->job_id)) {
        rdzv__peer_event(p, SRV_EV_AUTH_JOB_SCOPE,
                         "ATTACH to job %s outside the credential's "
                         "scope",
                         a->job_id);
        rdzv__send_error(p, RDZV_ERR_AUTH, "this credential does not admit job %s", a->job_id);
        return;
    }
    if (p->attached) {
        if (p->kvjob != NULL && strcmp(p->kvjob->job->id, a->job_id) != 0)
            rdzv__peer_event(p, SRV_EV_AUTH_JOB_SCOPE, "ATTACH to job %s on a connection of job %s",
                             a->job_id, p->kvjob->job->id);
        else
            rdzv__peer_event(p, SRV_EV_PROTOCOL, "ATTACH sent twice");
        rdzv__send_error(p, RDZV_ERR_PROTOCOL, "this connection is already attached");
        return;
    }
    if (sj == NULL || sj->job->state == RDZV_JOB_FINISHED) {
        rdzv__send_error(p, RDZV_ERR_CLOSED, "job %s is %s", a->job_id,
                         sj == NULL ? "unknown" : "finished");
        return;
    }
    if (!rdzv__sjob_worker_admit(sj, p)) /* the job's cap on worker connections */
        return;
    p->kvjob = sj;
    p->attached = 1;
    p->kv_round = a->round;
    rdzv__peer_arm(p); /* in a job now: no idle deadline */
    rdzv__send(p, &m);
}

static int kv_call(struct peer *p, struct sjob *sj, const struct rdzv_msg *m)
{
    const struct rdzv_kv *kv = &m->u.kv;
    uint64_t now = uv_now(p->srv->loop);

    switch (m->type) {
    case RDZV_MSG_KV_PUT:
        return rdzv_kv_put(sj->kv, p, kv->req_id, kv->key, kv->value, kv->value_len);
    case RDZV_MSG_KV_GET:
        return rdzv_kv_get(sj->kv, p, kv->req_id, kv->key, kv->wait_ms, now);
    default:
        return rdzv_kv_barrier(sj->kv, p, kv->req_id, kv->key, kv->count, kv->wait_ms, now);
    }
}

/* The job's cap on held requests grows with its worker connections (sjob.nworkers, counted at
 * ATTACH), so that a job of many processes each with a wait or two fits. O(1): set per message
 * rather than on every ATTACH and close, which happen in server.c. */
static void kv_held_cap(struct sjob *sj)
{
    const struct rdzv_limits *l = &sj->srv->limits;

    rdzv_kv_set_max_held(sj->kv, (size_t)l->kv_max_held_per_job +
                                     (size_t)l->kv_held_per_worker * sj->nworkers);
}

/* KV_PUT, KV_GET, BARRIER. A worker of another round than the job's (or of a dropped job)
 * is being replaced: STALE, whatever it asks. */
void rdzv__handle_kv(struct peer *p, const struct rdzv_msg *m)
{
    struct sjob *sj = p->kvjob;
    int err;

    if (!p->attached) {
        rdzv__send_error(p, RDZV_ERR_PROTOCOL, "%s before ATTACH", rdzv_msg_name(m->type));
        return;
    }
    if (sj == NULL || p->kv_round != rdzv_kv_round(sj->kv) || p->kv_round != sj->job->round) {
        rdzv__kv_reply(p->srv, p, m->u.kv.req_id, RDZV_KV_STALE, NULL, 0);
        return;
    }
    kv_held_cap(sj);
    err = kv_call(p, sj, m);
    if (err < 0) {
        rdzv__send_error(p, RDZV_ERR_PROTOCOL, "%s failed: %s", rdzv_msg_name(m->type),
                         strerror(-err));
        return;
    }
    rdzv__sjob_arm(sj);
}

/* The job a connection belongs to (agent: JOIN, worker: ATTACH), or NULL. */
static const char *own_job(const struct peer *p)
{
    if (p->job != NULL)
        return p->job->job->id;
    if (p->kvjob != NULL)
        return p->kvjob->job->id;
    return NULL;
}

/* Workers run the job's code, which may be anyone's (docs/SECURITY.md: a worker credential may
 * not see any status): the document names the job's hosts, addresses and node ids. Nothing of
 * muster's asks from a worker connection (libmuster never sends STATUS_REQ). */
static int refuse_worker(struct peer *p)
{
    if (p->role != RDZV_ROLE_WORKER && p->cred.kind != RDZV_CRED_WORKER)
        return 0;
    rdzv__peer_event(p, SRV_EV_AUTH_JOB_SCOPE, "STATUS_REQ from a worker connection");
    rdzv__send_error(p, RDZV_ERR_AUTH,
                     "workers may not read status; use an observer connection with the job's "
                     "credential or the server's token (muster status)");
    return 1;
}

/* Observers see every job (they hold the token, as operators do); an agent's connection sees
 * only its own job: "" means its job, another job's id is refused. Workers see none. */
void rdzv__handle_status_req(struct peer *p, const struct rdzv_status_req *r)
{
    const char *own = own_job(p), *job_id = r->job_id;
    struct rdzv_msg *m;
    size_t len = 0;

    if (own != NULL && job_id[0] != '\0' && strcmp(own, job_id) != 0) {
        rdzv__peer_event(p, SRV_EV_AUTH_JOB_SCOPE,
                         "STATUS_REQ for job %s on a connection of "
                         "job %s",
                         job_id, own);
        rdzv__send_error(p, RDZV_ERR_PROTOCOL, "this connection may only ask about job %s", own);
        return;
    }
    if (refuse_worker(p))
        return;
    if (own == NULL && !rdzv_cred_may_status(&p->cred, job_id)) {
        rdzv__peer_event(p, SRV_EV_AUTH_JOB_SCOPE,
                         "STATUS_REQ for job %s outside the "
                         "credential's scope",
                         job_id);
        rdzv__send_error(p, RDZV_ERR_AUTH, "this credential does not admit job %s", job_id);
        return;
    }
    if (own != NULL)
        job_id = own;
    else if (p->cred.kind == RDZV_CRED_JOB && job_id[0] == '\0')
        job_id = p->cred.scope; /* every job of the scope, and no other */
    m = malloc(sizeof(*m));
    if (m == NULL) {
        rdzv__send_error(p, RDZV_ERR_PROTOCOL, "server out of memory");
        return;
    }
    m->type = RDZV_MSG_STATUS;
    if (rdzv_status_json(p->srv, job_id, m->u.status.json, sizeof(m->u.status.json), &len) < 0) {
        free(m);
        rdzv__send_error(p, RDZV_ERR_PROTOCOL, "status document failed");
        return;
    }
    m->u.status.len = (uint32_t)len;
    rdzv__send(p, m);
    free(m);
}
