/* Agent messages: one handler per message type. Each validates, asks the job (job.c) what
 * happens, and lets rdzv__sjob_apply() send the consequences. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "escape.h"
#include "ids.h"
#include "handler.h"
#include "sjob.h"

/* HELLO.token is no longer compared (protocol 3): the TLS handshake proved a credential, and
 * that credential (cred.h) decides which roles and jobs this connection may use. */
void rdzv__handle_hello(struct peer *p, const struct rdzv_hello *h)
{
    struct rdzv_msg m;

    rdzv_msg_init(&m, RDZV_MSG_WELCOME);

    if (h->version != RDZV_PROTO_VERSION) {
        rdzv__send_error(p, RDZV_ERR_VERSION,
                         "protocol version %" PRIu32 " not supported (server speaks %d)",
                         h->version, RDZV_PROTO_VERSION);
        return;
    }
    if (rdzv_conn_cred(&p->conn, &p->cred) < 0) {
        rdzv__peer_event(p, SRV_EV_AUTH_TOKEN, "HELLO without a proven credential");
        rdzv__send_error(p, RDZV_ERR_AUTH, "authentication failed: no credential");
        return;
    }
    if (h->role < RDZV_ROLE_AGENT || h->role > RDZV_ROLE_OBSERVER) {
        rdzv__send_error(p, RDZV_ERR_PROTOCOL, "unknown role %u", h->role);
        return;
    }
    if (!rdzv_cred_may_role(&p->cred, h->role)) {
        rdzv__peer_event(p, SRV_EV_AUTH_JOB_SCOPE, "HELLO role %u with a %s credential", h->role,
                         p->cred.kind == RDZV_CRED_WORKER ? "worker" : "read-only");
        rdzv__send_error(p, RDZV_ERR_AUTH, "this credential may not act as %s",
                         h->role == RDZV_ROLE_AGENT    ? "an agent"
                         : h->role == RDZV_ROLE_WORKER ? "a worker"
                                                       : "an observer");
        return;
    }
    if (!rdzv__scope_admit_peer(p))
        return;
    p->welcomed = 1;
    p->role = h->role;
    rdzv__peer_arm(p); /* the handshake deadline gives way to the idle one */
    rdzv__send(p, &m);
}

/* The credential must cover the job, and the node must prove its id with its secret (cred.h):
 * otherwise anyone who read a node id in `muster status` could rejoin, fail or leave for it. */
static int join_allowed(struct peer *p, const struct rdzv_join *j)
{
    if (!rdzv_cred_may_join(&p->cred, j->job_id)) {
        rdzv__peer_event(p, SRV_EV_AUTH_JOB_SCOPE, "JOIN for job %s outside the credential's scope",
                         j->job_id);
        rdzv__send_error(p, RDZV_ERR_AUTH, "this credential does not admit job %s", j->job_id);
        return 0;
    }
    if (!rdzv_node_secret_ok(j->node_secret, j->node_id)) {
        rdzv__peer_event(p, SRV_EV_AUTH_NODE,
                         "JOIN for node %016" PRIx64 " of job %s without its "
                         "node secret",
                         j->node_id, j->job_id);
        rdzv__send_error(p, RDZV_ERR_AUTH, "node %016" PRIx64 ": the node secret does not match",
                         j->node_id);
        return 0;
    }
    return 1;
}

/* Finds or creates the job a JOIN names, or answers with an ERROR (then returns NULL). */
static struct sjob *join_target(struct peer *p, const struct rdzv_join *j)
{
    struct sjob *sj = p->job;

    if (sj != NULL && strcmp(sj->job->id, j->job_id) != 0) {
        rdzv__peer_event(p, SRV_EV_AUTH_JOB_SCOPE, "JOIN for job %s on a connection of job %s",
                         j->job_id, sj->job->id);
        rdzv__send_error(p, RDZV_ERR_PROTOCOL, "this connection already joined job %s",
                         sj->job->id);
        return NULL;
    }
    if (sj == NULL)
        sj = rdzv__sjob_find(p->srv, j->job_id);
    if (sj == NULL) {
        if (rdzv__sjob_new(p->srv, j, p->scope, &sj) < 0)
            rdzv__send_error(p, RDZV_ERR_PROTOCOL, "server out of memory");
        return sj;
    }
    if (rdzv_job_check(sj->job, j) < 0) {
        rdzv__send_error(
            p, RDZV_ERR_MISMATCH,
            "job %s has nnodes %" PRIu32 ":%" PRIu32 ", this node asked for %" PRIu32 ":%" PRIu32,
            sj->job->id, sj->job->min_nodes, sj->job->max_nodes, j->min_nodes, j->max_nodes);
        return NULL;
    }
    return sj;
}

static void join_error(struct peer *p, struct sjob *sj, int err, const struct rdzv_join *j,
                       const char *addr, const char *seen)
{
    const struct rdzv_job *job = sj->job;
    const struct rdzv_job_node *bad;
    uint64_t node_id = j->node_id;

    if (err == -EPERM && (bad = rdzv_job_excluded(job, j->host, addr, seen)) != NULL) {
        rdzv__send_error(p, RDZV_ERR_EXCLUDED, "node %s (%s) is excluded from job %s: %s",
                         bad->host, bad->addr, job->id, bad->reason);
        char shown[MC_ESCAPE_SIZE(RDZV_HOST_MAX)];

        mc_escape(bad->host, shown, sizeof(shown)); /* the agent's words */
        rdzv__log(p->srv, "job %s: refused the JOIN of excluded node %s", job->id, shown);
    } else if (err == -ESHUTDOWN)
        rdzv__send_error(p, RDZV_ERR_CLOSED, "job %s already finished", job->id);
    else if (err == -ENOSPC)
        rdzv__send_error(
            p, RDZV_ERR_PROTOCOL,
            "job %s has %zu nodes waiting already (its max_nodes + %u): no room to wait", job->id,
            job->n_pending, RDZV_JOB_PENDING_SLACK);
    else if (err == -EEXIST)
        rdzv__send_error(p, RDZV_ERR_PROTOCOL,
                         "node %016" PRIx64 " already joined round %" PRIu32 " of job %s", node_id,
                         job->round, job->id);
    else
        rdzv__send_error(p, RDZV_ERR_PROTOCOL, "join failed: %s", strerror(-err));
    if (sj->npeers == 0)
        rdzv__sjob_drop(sj); /* e.g. created for this very JOIN */
}

static int join_valid(struct peer *p, const struct rdzv_join *j)
{
    if (rdzv_job_validate_join(j) == 0)
        return 1;
    rdzv__send_error(p, RDZV_ERR_PROTOCOL,
                     "invalid JOIN: need a job id of %s, 1 <= min_nodes <= max_nodes <= %u, "
                     "1 <= nproc <= %u, port <= 65535",
                     MC_ID_CHARSET_TEXT, RDZV_JOB_MAX_NODES, RDZV_JOB_MAX_NPROC);
    return 0;
}

/* Where the node may be reached (*addr: JOIN's addr, else the address the connection came from)
 * and where the server saw it (*seen: always the connection's). The claimed addr is only ever
 * advertised (MASTER_ADDR, the replica link's host): a multi-homed node names its fast
 * interface there. Anything that decides about a node (the failure ledger, exclusion) uses
 * *seen, which a client on another machine cannot choose. */
static void join_addr(struct peer *p, const struct rdzv_join *j, char *addr, char *seen, size_t len)
{
    rdzv__peer_addr(p, seen, len);
    snprintf(addr, len, "%s", j->addr[0] != '\0' ? j->addr : seen);
}

void rdzv__handle_join(struct peer *p, const struct rdzv_join *j)
{
    enum rdzv_job_event ev = RDZV_JOB_EV_NONE;
    char addr[RDZV_HOST_MAX + 1], seen[RDZV_HOST_MAX + 1];
    struct sjob *sj;
    int err;

    if (!join_valid(p, j) || !join_allowed(p, j) || (sj = join_target(p, j)) == NULL)
        return;
    join_addr(p, j, addr, seen, sizeof(addr));
    err = rdzv_job_join(sj->job, j, addr, seen, p, uv_now(p->srv->loop), &ev);
    if (err < 0) {
        join_error(p, sj, err, j, addr, seen);
        return;
    }
    rdzv__sjob_attach(sj, p);
    rdzv__peer_heartbeat_start(p, j);
    rdzv__sjob_apply(sj, ev);
}

void rdzv__handle_failed(struct peer *p, const struct rdzv_failure *f, int leaving)
{
    if (p->job == NULL)
        return; /* never joined: nothing to fail */
    if (!leaving && rdzv__ev_failed(p, f))
        return; /* decided once every rank's evidence is in (handler_ev.c) */
    rdzv__sjob_apply(p->job, rdzv_job_failed(p->job->job, p, f, leaving, uv_now(p->srv->loop)));
}

void rdzv__handle_done(struct peer *p, uint32_t round)
{
    if (p->job == NULL)
        return;
    rdzv__sjob_apply(p->job, rdzv_job_done(p->job->job, p, round));
}

/* Receiving it already refreshed last_seen (msg_cb); the echo lets the agent time the server. */
void rdzv__handle_heartbeat(struct peer *p, const struct rdzv_heartbeat *hb)
{
    struct rdzv_msg m;

    rdzv_msg_init(&m, RDZV_MSG_HEARTBEAT);

    m.u.heartbeat = *hb;
    rdzv__send(p, &m);
}

/* The server moved on while the agent was away: it must stop its workers and JOIN again. */
static void rejoin_stale(struct peer *p, struct sjob *sj, const struct rdzv_rejoin *rj)
{
    struct rdzv_msg m;

    rdzv_msg_init(&m, RDZV_MSG_RESTART);
    struct rdzv_failure *c = &m.u.restart.cause;

    m.u.restart.restart_count = sj->job->restart_count;
    c->round = rj->assign.round;
    c->rank = c->local_rank = c->exit_code = -1;
    c->time_ms = mc_wall_ms();
    snprintf(c->host, sizeof(c->host), "%s", rj->join.host);
    snprintf(c->text, sizeof(c->text), "round %" PRIu32 " ended while the node was away",
             rj->assign.round);
    rdzv__sjob_attach(sj, p); /* its JOIN comes on this connection */
    rdzv__send(p, &m);
}

/* The connection a reconnecting agent replaces is forgotten without counting a loss. */
static void rejoin_replace(struct sjob *sj, struct peer *p, struct peer *old)
{
    if (old == NULL || old == p)
        return;
    if (old->job == sj) {
        rdzv__repl_forget(sj, old);
        old->job = NULL;
        sj->npeers--;
    }
    rdzv__peer_close(old, 0);
}

static void rejoin_running(struct peer *p, struct sjob *sj, const struct rdzv_rejoin *rj)
{
    struct rdzv_msg m;

    rdzv_msg_init(&m, RDZV_MSG_REJOIN_OK);
    enum rdzv_job_event ev = RDZV_JOB_EV_NONE;
    char addr[RDZV_HOST_MAX + 1], seen[RDZV_HOST_MAX + 1];
    void *old = NULL;
    int err;

    join_addr(p, &rj->join, addr, seen, sizeof(addr));
    err = rdzv_job_rejoin(sj->job, rj, addr, seen, p, uv_now(p->srv->loop), &old, &ev);
    if (err == -ESTALE) {
        rejoin_stale(p, sj, rj);
    } else if (err < 0) {
        join_error(p, sj, err, &rj->join, addr, seen);
        return;
    } else {
        rdzv__sjob_attach(sj, p);
        rejoin_replace(sj, p, old);
        m.u.rejoin_ok.round = sj->job->round;
        rdzv__send(p, &m);
    }
    rdzv__peer_heartbeat_start(p, &rj->join);
    rdzv__sjob_apply(sj, ev);
}

/* A reconnecting agent that was still waiting may find its old, half-open connection in the
 * round (the server never saw it break): that one is closed first, or the JOIN would clash. */
static void drop_old_connection(struct peer *p, const struct rdzv_join *j)
{
    struct sjob *sj = rdzv__sjob_find(p->srv, j->job_id);
    const struct rdzv_job *job;

    if (sj == NULL)
        return;
    job = sj->job;
    int k = rdzv_job_find_node(job, j->node_id); /* indexed: pending[] alone is walked */

    if (k >= 0 && job->members[k].peer != p && job->members[k].peer != NULL) {
        rdzv__peer_close(job->members[k].peer, 0);
        return;
    }
    for (size_t i = 0; i < job->n_pending; i++) {
        const struct rdzv_job_member *m = &job->pending[i];

        if (m->node_id == j->node_id && m->peer != p && m->peer != NULL) {
            rdzv__peer_close(m->peer, 0);
            return;
        }
    }
}

void rdzv__handle_rejoin(struct peer *p, const struct rdzv_rejoin *rj)
{
    struct sjob *sj;

    if (!join_valid(p, &rj->join) || !join_allowed(p, &rj->join))
        return; /* before drop_old_connection: only the node itself may displace its conn */
    if (!rj->running) {
        drop_old_connection(p, &rj->join);
        rdzv__handle_join(p, &rj->join);
        return;
    }
    if ((sj = join_target(p, &rj->join)) == NULL)
        return;
    rejoin_running(p, sj, rj);
}

/* A part of a sharded checkpoint (parts.h), filed under the member this connection is: a node
 * speaks only for what it holds itself. */
static void ckpt_part(struct sjob *sj, struct peer *p, const struct rdzv_ckpt *ck)
{
    int me = rdzv_job_find(sj->job, p);

    if (me < 0)
        return; /* a new round began meanwhile: the agent reports again after its JOIN */
    if (ck->verified_bad)
        rdzv_parts_drop(sj->job->parts, ck, sj->job->members[me].node_id);
    else /* out of memory: not kept, as if never reported (no round resumes from it) */
        (void)rdzv_parts_add(&sj->job->parts, ck, sj->job->members[me].node_id);
}

/* Whether a member other than members[me] records parts (RDZV_JOIN_PARTS). */
static int any_parts(const struct rdzv_job *job, int me)
{
    for (size_t i = 0; i < job->n_members; i++)
        if ((int)i != me && job->members[i].parts)
            return 1;
    return 0;
}

/* A record of a whole checkpoint. Rank 0's own is part 1 of the round's nodes: every other
 * member that records parts (RDZV_JOIN_PARTS) is told to record its part of it (CKPT_PART).
 * A copy of it is that part too, held by the copy's holder. */
static void ckpt_whole(struct sjob *sj, struct peer *p, int me, const struct rdzv_ckpt *ck)
{
    struct rdzv_job *job = sj->job;
    struct rdzv_ckpt part = *ck;
    struct rdzv_msg m;

    if (me < 0 || job->state != RDZV_JOB_RUNNING)
        return;
    if (ck->holder[0] != '\0') {
        part.part = 1;
        part.parts = rdzv_parts_whole(job->parts, ck->name, ck->checksum);
        if (ck->verified_bad)
            rdzv_parts_drop(job->parts, &part, job->members[me].node_id);
        else if (part.parts != 0)
            (void)rdzv_parts_add(&job->parts, &part, job->members[me].node_id);
        return;
    }
    if (ck->verified_bad || job->members[me].group_rank != 0 || job->n_members < 2 ||
        job->n_members > RDZV_PARTS_MAX || !any_parts(job, me))
        return; /* nobody records parts: nothing to keep */
    part.part = 1;
    part.parts = (uint32_t)job->n_members;
    if (rdzv_parts_add(&job->parts, &part, job->members[me].node_id) < 0)
        return;
    rdzv_msg_init(&m, RDZV_MSG_CKPT_PART);
    snprintf(m.u.ckpt_part.name, sizeof(m.u.ckpt_part.name), "%s", ck->name);
    m.u.ckpt_part.step = ck->step;
    m.u.ckpt_part.checksum = ck->checksum;
    m.u.ckpt_part.round = job->round;
    m.u.ckpt_part.parts = (uint32_t)job->n_members;
    for (size_t i = 0; i < job->n_members; i++) {
        const struct rdzv_job_member *o = &job->members[i];
        if ((int)i == me || !o->parts || o->peer == NULL)
            continue;
        m.u.ckpt_part.part = o->group_rank + 1;
        rdzv__send(o->peer, &m);
    }
}

/* CKPT: bookkeeping for STATUS, and progress for --max-same-failure (rdzv_job_checkpoint);
 * the resume point travels in JOIN and ASSIGN. The job is the one this connection joined: a
 * CKPT names none, so an agent cannot write into another job's records. */
void rdzv__handle_ckpt(struct peer *p, const struct rdzv_ckpt *ck)
{
    struct sjob *sj = p->job;

    if (sj == NULL) {
        rdzv__send_error(p, RDZV_ERR_PROTOCOL, "CKPT before JOIN: no job to record it for");
        return;
    }
    if (ck->name[0] == '\0') {
        rdzv__send_error(p, RDZV_ERR_PROTOCOL, "CKPT without a checkpoint name");
        return;
    }
    if (ck->part != 0) { /* one node's part of a sharded checkpoint: parts.h, not the log */
        ckpt_part(sj, p, ck);
        return;
    }
    /* a newer checkpoint is progress: the next failure is no repeat of the last one. The
     * writer's record only (not a replica's, not a bad one), also when it comes after the
     * FAILED of its attempt (recorded in the thread pool, or at the attempt's end): counted
     * then toward the next failure, which at worst costs one attempt more. A lying agent of
     * the job can only spare its job a stop, which it could as well by failing differently. */
    if (!ck->verified_bad && ck->holder[0] == '\0')
        rdzv_job_checkpoint(sj->job, ck->name, ck->step);
    if (sj->ckpts == NULL && rdzv_ckptlog_new(&sj->ckpts) < 0)
        return; /* out of memory: the record only feeds STATUS, the job runs on without it */
    int me = rdzv_job_find(sj->job, p);
    const char *host = me >= 0 ? sj->job->members[me].host : "";

    ckpt_whole(sj, p, me, ck);
    if (ck->holder[0] != '\0') {
        /* a replica: the holder is the node this connection joined as, not what it claims */
        struct rdzv_ckpt rep = *ck;

        if (host[0] != '\0')
            snprintf(rep.holder, sizeof(rep.holder), "%s", host);
        if (ck->verified_bad) /* this node's copy is gone (pruned, or found bad) */
            rdzv_ckptlog_drop_replica(sj->ckpts, &rep);
        else
            rdzv_ckptlog_add_replica(sj->ckpts, &rep);
        return;
    }
    rdzv_ckptlog_add_from(sj->ckpts, ck, host);
}

/* PREFLIGHT: bookkeeping for STATUS and /metrics only, like CKPT. Filed under the
 * member of the job that this connection is (its JOIN's host and node id): a PREFLIGHT names
 * no job and no host, so an agent can neither write into another job nor speak for another
 * node. */
void rdzv__handle_preflight(struct peer *p, const struct rdzv_preflight *pf)
{
    struct sjob *sj = p->job;
    const struct rdzv_job_member *m = NULL;
    const char *bad;
    int rc;

    if (sj == NULL) {
        rdzv__peer_event(p, SRV_EV_PROTOCOL, "PREFLIGHT before JOIN");
        rdzv__send_error(p, RDZV_ERR_PROTOCOL, "PREFLIGHT before JOIN: no job to record it for");
        return;
    }
    int me = rdzv_job_find(sj->job, p);

    m = me >= 0 ? &sj->job->members[me] : NULL;
    if (m == NULL)
        return; /* a new round began meanwhile (the agent is rejoining): not an error, and its
                 * connection must not pay for the race; nothing to file it under */
    if ((bad = rdzv_pfrec_check(pf)) != NULL) {
        rdzv__peer_event(p, SRV_EV_PROTOCOL, "PREFLIGHT refused: %s", bad);
        rdzv__send_error(p, RDZV_ERR_PROTOCOL, "PREFLIGHT refused: %s", bad);
        return;
    }
    rc = rdzv_pfrec_put(&sj->pfrec, m->node_id, m->host, mc_wall_ms(), pf);
    if (rc == -ENOSPC)
        rdzv__peer_event(p, SRV_EV_PROTOCOL, "PREFLIGHT not recorded: %u nodes recorded already",
                         RDZV_PFREC_MAX);
    /* -ENOMEM: the record only feeds STATUS, the job runs on without it */
}

/* GOODPUT: display only, like PREFLIGHT. The job's figures are those of the node holding group
 * rank 0 in the running round, and of the same connection while a new round fills (its last
 * GOODPUT of an attempt comes after the round it ran in ended). Another member's is ignored
 * without a word: every node sends its own, and only one is shown. A figure that cannot be true
 * (gprec.h rdzv_goodput_check) is refused and counted, and the connection closed like any other
 * malformed message: an honest agent never sends one. */
void rdzv__handle_goodput(struct peer *p, const struct rdzv_goodput *g)
{
    struct sjob *sj = p->job;
    const char *bad;
    int me;

    if (sj == NULL) {
        rdzv__peer_event(p, SRV_EV_PROTOCOL, "GOODPUT before JOIN");
        rdzv__send_error(p, RDZV_ERR_PROTOCOL, "GOODPUT before JOIN: no job to record it for");
        return;
    }
    if ((bad = rdzv_goodput_check(g)) != NULL) {
        rdzv__peer_event(p, SRV_EV_PROTOCOL, "GOODPUT refused: %s", bad);
        rdzv__send_error(p, RDZV_ERR_PROTOCOL, "GOODPUT refused: %s", bad);
        return;
    }
    me = rdzv_job_find(sj->job, p);
    if (me >= 0 && sj->job->state == RDZV_JOB_RUNNING && sj->job->members[me].group_rank == 0) {
        sj->gp_peer = p;
        snprintf(sj->gp_host, sizeof(sj->gp_host), "%s", sj->job->members[me].host);
    } else if (p != sj->gp_peer) {
        return; /* not the node of group rank 0 */
    }
    sj->gp = *g;
    sj->have_gp = 1;
}
