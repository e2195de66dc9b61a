/* Round logic of one job. Pure: time comes in as arguments, decisions go out as events.
 * All allocation happens in rdzv_job_join(), so that failure, restart and loss handling can
 * never fail half-way through. */
#include "job.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"
#include "ids.h"

int rdzv_job_validate_join(const struct rdzv_join *j)
{
    /* one id character set everywhere (common/ids.h): an id becomes a directory name and a word
     * in log lines on every node */
    if (!mc_id_valid(j->job_id, NULL, 0) || j->min_nodes < 1 || j->min_nodes > j->max_nodes)
        return -EINVAL;
    if (j->max_nodes > RDZV_JOB_MAX_NODES || j->nproc < 1 || j->nproc > RDZV_JOB_MAX_NPROC)
        return -EINVAL;
    if (j->master_port > 65535 || (j->flags & ~RDZV_JOIN_FLAGS_KNOWN) != 0)
        return -EINVAL;
    return 0;
}

int rdzv_job_new(const struct rdzv_join *j, struct rdzv_job **out)
{
    struct rdzv_job *job;

    if (rdzv_job_validate_join(j) < 0)
        return -EINVAL;
    job = calloc(1, sizeof(*job));
    if (job == NULL)
        return -ENOMEM;
    snprintf(job->id, sizeof(job->id), "%s", j->job_id);
    job->min_nodes = j->min_nodes;
    job->max_nodes = j->max_nodes;
    job->max_restarts = j->max_restarts;
    job->last_call_ms = j->last_call_ms;
    job->join_timeout_ms = j->join_timeout_ms;
    job->reconnect_grace_ms =
        j->reconnect_grace_ms ? j->reconnect_grace_ms : RDZV_JOB_RECONNECT_GRACE_MS;
    job->backoff.min_ms = j->backoff_min_ms;
    job->backoff.max_ms =
        j->backoff_max_ms < j->backoff_min_ms ? j->backoff_min_ms : j->backoff_max_ms;
    /* jitter must differ between jobs (and servers), not be cryptographic */
    job->backoff.rng = j->node_id ^ (uint64_t)(uintptr_t)job;
    job->exclude_after =
        j->exclude_after > RDZV_JOB_EXCLUDE_MAX ? RDZV_JOB_EXCLUDE_MAX : j->exclude_after;
    job->exclude_window_ms =
        j->exclude_window_ms ? j->exclude_window_ms : RDZV_JOB_EXCLUDE_WINDOW_MS;
    job->max_same_failure = j->same_failure ? j->same_failure - 1 : RDZV_SAME_FAILURE_DEFAULT;
    job->exclude_stragglers =
        j->stragglers > RDZV_STRAGGLERS_MAX ? RDZV_STRAGGLERS_MAX : j->stragglers;
    job->ckpt_step = -1;
    job->state = RDZV_JOB_FILLING;
    *out = job;
    return 0;
}

void rdzv_job_free(struct rdzv_job *job)
{
    if (job == NULL)
        return;
    free(job->members);
    free(job->prev);
    free(job->prev_slots);
    free(job->member_slots);
    free(job->by_rank);
    free(job->pending);
    free(job->nodes);
    rdzv_parts_free(job->parts);
    free(job);
}

int rdzv_job_check(const struct rdzv_job *job, const struct rdzv_join *j)
{
    if (j->min_nodes != job->min_nodes || j->max_nodes != job->max_nodes)
        return -EINVAL;
    return 0;
}

/* member_slots[]: members[] indexed by connection and by node id (every
 * FAILED, DONE, CKPT, PREFLIGHT and REPL_BEGIN looked its sender up with a walk of members[],
 * and every JOIN walked it twice: quadratic per round). Two open-addressing regions of
 * 4 * cap_members slots, by peer then by node id, each 0 or 1 + an index into members[]. A slot
 * may be stale (a member's peer changed or went NULL): lookups check the member it names.
 * Appends insert; removals, which shift members[], rebuild; so does a new round. */
static size_t mix(uint64_t key, size_t mask)
{
    return (size_t)((key * 0x9e3779b97f4a7c15ull) >> 32) & mask;
}

static void slot_put(uint32_t *region, size_t n, uint64_t key, size_t i)
{
    size_t s = mix(key, n - 1);

    while (region[s] != 0)
        s = (s + 1) & (n - 1);
    region[s] = (uint32_t)i + 1;
}

static void member_slot_put(struct rdzv_job *job, size_t i)
{
    size_t n = 4 * job->cap_members;

    if (job->members[i].peer != NULL)
        slot_put(job->member_slots, n, (uintptr_t)job->members[i].peer, i);
    slot_put(job->member_slots + n, n, job->members[i].node_id, i);
    job->member_slots_used++;
}

static void members_index(struct rdzv_job *job)
{
    if (job->member_slots == NULL)
        return;
    memset(job->member_slots, 0, 8 * job->cap_members * sizeof(*job->member_slots));
    job->member_slots_used = 0;
    for (size_t i = 0; i < job->n_members; i++)
        member_slot_put(job, i);
}

/* members[i] was appended or got a new peer. Stale slots are swept once they are as many as
 * the members could be (load at most 1/2: probes stay short and always end). */
static void member_indexed(struct rdzv_job *job, size_t i)
{
    if (job->member_slots == NULL)
        return;
    if (job->member_slots_used >= 2 * job->cap_members)
        members_index(job);
    else
        member_slot_put(job, i);
}

int rdzv_job_find(const struct rdzv_job *job, const void *peer)
{
    size_t n = 4 * job->cap_members, s;

    if (peer == NULL || job->member_slots == NULL)
        return -1;
    for (s = mix((uintptr_t)peer, n - 1); job->member_slots[s] != 0; s = (s + 1) & (n - 1)) {
        size_t k = job->member_slots[s] - 1;

        if (k < job->n_members && job->members[k].peer == peer)
            return (int)k;
    }
    return -1;
}

int rdzv_job_find_node(const struct rdzv_job *job, uint64_t node_id)
{
    size_t n = 4 * job->cap_members, s;
    const uint32_t *by_node;

    if (job->member_slots == NULL)
        return -1;
    by_node = job->member_slots + n;
    for (s = mix(node_id, n - 1); by_node[s] != 0; s = (s + 1) & (n - 1)) {
        size_t k = by_node[s] - 1;

        if (k < job->n_members && job->members[k].node_id == node_id)
            return (int)k;
    }
    return -1;
}

int rdzv_job_find_pending(const struct rdzv_job *job, const void *peer)
{
    for (size_t i = 0; i < job->n_pending; i++)
        if (job->pending[i].peer == peer)
            return (int)i;
    return -1;
}

/* prev_slots[]: an open-addressing index of prev[] by node id: looking up a
 * previous member was a walk of prev[] per node, so closing a round and every refill of a
 * filling round (prev_coming) were quadratic in the node count. 2 * cap_members slots (a power
 * of two: cap_members is), each 0 or 1 + an index into prev[]; rebuilt when prev[] changes. */
static size_t prev_slot(const struct rdzv_job *job, uint64_t node_id)
{
    return (size_t)((node_id * 0x9e3779b97f4a7c15ull) >> 32) & (2 * job->cap_members - 1);
}

static void prev_index(struct rdzv_job *job)
{
    size_t mask = 2 * job->cap_members - 1;

    if (job->prev_slots == NULL)
        return;
    memset(job->prev_slots, 0, 2 * job->cap_members * sizeof(*job->prev_slots));
    for (size_t i = 0; i < job->n_prev; i++) {
        size_t s = prev_slot(job, job->prev[i].node_id);

        while (job->prev_slots[s] != 0)
            s = (s + 1) & mask;
        job->prev_slots[s] = (uint32_t)i + 1;
    }
}

/* Index in prev[] of node_id, or -1. */
static int64_t prev_find(const struct rdzv_job *job, uint64_t node_id)
{
    size_t mask, s;

    if (job->n_prev == 0 || job->prev_slots == NULL)
        return -1;
    mask = 2 * job->cap_members - 1;
    for (s = prev_slot(job, node_id); job->prev_slots[s] != 0; s = (s + 1) & mask)
        if (job->prev[job->prev_slots[s] - 1].node_id == node_id)
            return job->prev_slots[s] - 1;
    return -1;
}

/* prev[] and by_rank[] grow with members[] so that a restart, which copies members into prev
 * and admits pending joiners into members, needs no allocation. Room for `want` members. */
static int reserve(struct rdzv_job *job, size_t want)
{
    size_t cap = job->cap_members ? job->cap_members : 4;
    void *p;

    if (want <= job->cap_members)
        return 0;
    while (cap < want)
        cap *= 2;
    p = realloc(job->members, cap * sizeof(*job->members));
    if (p == NULL)
        return -ENOMEM;
    job->members = p;
    p = realloc(job->prev, cap * sizeof(*job->prev));
    if (p == NULL)
        return -ENOMEM;
    job->prev = p;
    p = realloc(job->by_rank, cap * sizeof(*job->by_rank));
    if (p == NULL)
        return -ENOMEM;
    job->by_rank = p;
    p = realloc(job->prev_slots, 2 * cap * sizeof(*job->prev_slots));
    if (p == NULL)
        return -ENOMEM;
    job->prev_slots = p;
    p = realloc(job->member_slots, 8 * cap * sizeof(*job->member_slots));
    if (p == NULL)
        return -ENOMEM;
    job->member_slots = p;
    job->cap_members = cap;
    prev_index(job); /* the slots depend on the capacity */
    members_index(job);
    return 0;
}

static int64_t prev_rank(const struct rdzv_job *job, uint64_t node_id)
{
    int64_t i = prev_find(job, node_id);

    return i >= 0 ? (int64_t)job->prev[i].group_rank : -1;
}

/* Whether member a would resume from a newer checkpoint than member b (none is oldest). */
static int resumes_newer(const struct rdzv_job_member *a, const struct rdzv_job_member *b)
{
    if (a->resume[0] == '\0')
        return 0;
    return b->resume[0] == '\0' || a->resume_step > b->resume_step;
}

/* Group rank 0 goes where the newest verified checkpoint is: every JOIN names the
 * newest checkpoint that verifies on that node, and the round resumes from rank 0's. Without a
 * shared file system, the previous rank 0 may be gone with its checkpoints while a replica
 * (--replicate-checkpoints) survives elsewhere. Only a strictly newer one moves rank 0 away
 * from the node that held it (sticky ranks otherwise), and never away from a --node-rank 0. */
static void newest_to_rank0(struct rdzv_job *job)
{
    size_t n = job->n_members, best = n, sticky = n;

    if (job->by_rank[0] != 0)
        return;
    for (size_t i = 0; i < n; i++) {
        if (job->members[i].group_rank != UINT32_MAX)
            continue;
        if (prev_rank(job, job->members[i].node_id) == 0)
            sticky = i;
        if (best == n || resumes_newer(&job->members[i], &job->members[best]))
            best = i;
    }
    if (best == n || job->members[best].resume[0] == '\0')
        return;
    if (sticky != n && !resumes_newer(&job->members[best], &job->members[sticky]))
        return;
    job->members[best].group_rank = 0;
    job->by_rank[0] = (uint32_t)best + 1;
}

static int is_member(void *arg, uint64_t id)
{
    return rdzv_job_find_node(arg, id) >= 0;
}

/* A job that writes sharded checkpoints (every node its part, parts.h) resumes from the newest
 * one whose every part the members of the new round hold between them, not from rank 0's pick:
 * rank 0's own part of a newer step is no checkpoint once another part is lost with its node.
 * None complete: from scratch. */

static void resume_sharded(struct rdzv_job *job)
{
    job->resume_parts = 0;
    if (!rdzv_parts_sharded(job->parts))
        return;
    if (!rdzv_parts_complete(job->parts, is_member, job, job->resume, sizeof(job->resume),
                             &job->resume_step, &job->resume_parts)) {
        job->resume[0] = '\0';
        job->resume_step = -1;
    }
}

/* A node that asks for a group rank (JOIN.want_rank: --node-rank of torchrun's static recipe)
 * gets it when it fits and is free; nodes of the previous round keep their group rank when it
 * still fits (rank 0 is where the newest checkpoint is); the others fill the gaps in join order.
 * Linear in the node count: prev_rank() is a lookup in prev_slots[]. */
static void close_round(struct rdzv_job *job, uint64_t now_ms)
{
    size_t n = job->n_members, next = 0;
    uint64_t offset = 0;

    memset(job->by_rank, 0, n * sizeof(*job->by_rank));
    for (size_t i = 0; i < n; i++) {                /* --node-rank of the static recipe first */
        uint32_t w = job->members[i].want_rank - 1; /* 0 - 1: UINT32_MAX, asks for nothing */

        job->members[i].group_rank = UINT32_MAX;
        if (w < n && job->by_rank[w] == 0) {
            job->members[i].group_rank = (uint32_t)w;
            job->by_rank[w] = (uint32_t)i + 1;
        }
    }
    newest_to_rank0(job);
    for (size_t i = 0; i < n; i++) {
        int64_t r = prev_rank(job, job->members[i].node_id);

        if (job->members[i].group_rank != UINT32_MAX)
            continue;
        if (r >= 0 && (size_t)r < n && job->by_rank[r] == 0) {
            job->members[i].group_rank = (uint32_t)r;
            job->by_rank[r] = (uint32_t)i + 1;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (job->members[i].group_rank != UINT32_MAX)
            continue;
        while (job->by_rank[next] != 0)
            next++;
        job->members[i].group_rank = (uint32_t)next;
        job->by_rank[next] = (uint32_t)i + 1;
    }
    for (size_t r = 0; r < n; r++) {
        struct rdzv_job_member *m = &job->members[job->by_rank[r] - 1];

        m->rank_offset = (uint32_t)offset;
        m->done = 0;
        offset += m->nproc;
    }
    job->master = job->by_rank[0] - 1;
    /* Only rank 0's node can verify checkpoints (they are written there): its pick is where
     * every node resumes, or nodes would load different steps and diverge silently. */
    snprintf(job->resume, sizeof(job->resume), "%s", job->members[job->master].resume);
    job->resume_step = job->members[job->master].resume_step;
    resume_sharded(job);
    job->world_size = (uint32_t)offset;
    job->keep_nodes = (uint32_t)n; /* the size spares keep the job at */
    job->n_done = 0;
    job->running_since_ms = now_ms;
    job->hold_until_ms = 0;
    job->state = RDZV_JOB_RUNNING;
}

static int in_list(const struct rdzv_job_member *list, size_t n, const void *peer, uint64_t node_id)
{
    for (size_t i = 0; i < n; i++)
        if (list[i].peer == peer || list[i].node_id == node_id)
            return 1;
    return 0;
}

static void make_member(struct rdzv_job_member *m, const struct rdzv_join *j, const char *addr,
                        const char *seen, void *peer)
{
    memset(m, 0, sizeof(*m));
    m->node_id = j->node_id;
    m->peer = peer;
    m->nproc = j->nproc;
    m->want_rank = j->want_rank;
    m->master_port = j->master_port;
    snprintf(m->host, sizeof(m->host), "%s", j->host);
    snprintf(m->addr, sizeof(m->addr), "%s", addr);
    snprintf(m->seen, sizeof(m->seen), "%s", seen);
    snprintf(m->resume, sizeof(m->resume), "%s", j->resume);
    m->resume_step = j->resume[0] != '\0' ? j->resume_step : -1;
    m->spare = (j->flags & RDZV_JOIN_SPARE) != 0;
    m->parts = (j->flags & RDZV_JOIN_PARTS) != 0;
}

/* Appends m to the filling round (capacity reserved by the caller); returns ASSIGNED when that
 * closed the round, else WAITING. */
static enum rdzv_job_event add_member(struct rdzv_job *job, const struct rdzv_job_member *m,
                                      uint64_t now_ms)
{
    job->members[job->n_members++] = *m;
    member_indexed(job, job->n_members - 1);
    if (job->n_members == 1)
        job->first_join_ms = now_ms;
    if (job->n_members >= job->min_nodes && !job->min_reached) {
        job->min_reached = 1;
        job->min_reached_ms = now_ms;
    }
    if ((job->n_members == job->max_nodes || (job->min_reached && job->last_call_ms == 0)) &&
        now_ms >= job->hold_until_ms) {
        close_round(job, now_ms);
        return RDZV_JOB_EV_ASSIGNED;
    }
    return RDZV_JOB_EV_WAITING;
}

static enum rdzv_job_event new_round(struct rdzv_job *job, uint64_t now_ms);
static enum rdzv_job_event refill(struct rdzv_job *job, uint64_t now_ms, enum rdzv_job_event ev);

/* Appends m to pending[]. Room in members[] (and prev[], by_rank[]) for every member and every
 * pending joiner, so that admitting them later needs no allocation. */
static int add_pending(struct rdzv_job *job, const struct rdzv_job_member *m)
{
    size_t want = job->n_pending + 1;
    void *p;

    if (want > job->cap_pending) {
        size_t cap = job->cap_pending ? job->cap_pending * 2 : 4;

        p = realloc(job->pending, cap * sizeof(*job->pending));
        if (p == NULL)
            return -ENOMEM;
        job->pending = p;
        job->cap_pending = cap;
    }
    if (reserve(job, job->n_members + want) < 0)
        return -ENOMEM;
    job->pending[job->n_pending++] = *m;
    return 0;
}

/* A spare waits in pending[] and never starts a round: while a round fills, it takes a place
 * that a lost or excluded node left (refill); otherwise it waits for one. */
static int join_spare(struct rdzv_job *job, const struct rdzv_job_member *m, uint64_t now_ms,
                      enum rdzv_job_event *ev)
{
    int err = add_pending(job, m);

    if (err < 0)
        return err;
    *ev = refill(job, now_ms, RDZV_JOB_EV_PENDING);
    return 0;
}

/* Scale-up: the joiner waits in pending[]; a round with room restarts to take it in. */
static int join_running(struct rdzv_job *job, const struct rdzv_job_member *m, uint64_t now_ms,
                        enum rdzv_job_event *ev)
{
    int err = add_pending(job, m);

    if (err < 0)
        return err;
    *ev = RDZV_JOB_EV_PENDING;
    if (job->n_members >= job->max_nodes || job->rebuilding)
        return 0;
    memset(&job->cause, 0, sizeof(job->cause));
    job->cause.round = job->round;
    job->cause.rank = job->cause.local_rank = job->cause.exit_code = -1;
    snprintf(job->cause.host, sizeof(job->cause.host), "%s", m->host);
    snprintf(job->cause.text, sizeof(job->cause.text), RDZV_JOB_SCALE_UP_FMT, m->host);
    job->restart_delay_ms = 0; /* growing is no failure: no backoff */
    job->hold_until_ms = 0;
    *ev = new_round(job, now_ms);
    return 0;
}

static int m_spare(const struct rdzv_join *j)
{
    return (j->flags & RDZV_JOIN_SPARE) != 0;
}

int rdzv_job_join(struct rdzv_job *job, const struct rdzv_join *j, const char *addr,
                  const char *seen, void *peer, uint64_t now_ms, enum rdzv_job_event *ev)
{
    struct rdzv_job_member m;

    /* first: an excluded node whose agent took long to stop its workers may find the job
     * finished by its replacement; it must still learn why it was left out */
    if (rdzv_job_excluded(job, j->host, addr, seen) != NULL)
        return -EPERM;
    if (job->state == RDZV_JOB_FINISHED)
        return -ESHUTDOWN;
    if (rdzv_job_find(job, peer) >= 0 || rdzv_job_find_node(job, j->node_id) >= 0 ||
        in_list(job->pending, job->n_pending, peer, j->node_id)) /* pending[] is bounded */
        return -EEXIST;
    /* bounded: many more waiting nodes than the job can ever run are no use,
     * and each costs every later refill a look */
    if ((job->state != RDZV_JOB_FILLING || m_spare(j)) && prev_rank(job, j->node_id) < 0 &&
        job->n_pending >= (size_t)job->max_nodes + RDZV_JOB_PENDING_SLACK)
        return -ENOSPC;
    make_member(&m, j, addr, seen, peer);
    /* a spare that already ran in the previous round re-joins as the member it is now */
    if (m.spare && prev_rank(job, m.node_id) < 0)
        return join_spare(job, &m, now_ms, ev);
    if (job->state == RDZV_JOB_RUNNING)
        return join_running(job, &m, now_ms, ev);
    if (reserve(job, job->n_members + 1 + job->n_pending) < 0)
        return -ENOMEM;
    *ev = add_member(job, &m, now_ms);
    return 0;
}

int64_t rdzv_job_deadline(const struct rdzv_job *job)
{
    int64_t d = -1;

    if (job->state == RDZV_JOB_RUNNING && job->rebuilding)
        return (int64_t)job->grace_deadline_ms;
    if (job->state != RDZV_JOB_FILLING || job->n_members == 0)
        return -1;
    if (job->join_timeout_ms > 0)
        d = (int64_t)(job->first_join_ms + job->join_timeout_ms);
    if (job->min_reached) {
        int64_t lc = (int64_t)(job->min_reached_ms + job->last_call_ms);

        if (job->n_members >= job->max_nodes || lc < (int64_t)job->hold_until_ms)
            lc = (int64_t)job->hold_until_ms; /* ready, but a restart backoff holds it */
        if (d < 0 || lc < d)
            d = lc;
    }
    return d;
}

/* A round that reached min_nodes closes at its join deadline instead of timing out: the job can
 * run, and failing it would only make the user retry with the same nodes. */
static enum rdzv_job_event grace_over(struct rdzv_job *job, uint64_t now_ms, uint64_t wall_ms);

enum rdzv_job_event rdzv_job_tick(struct rdzv_job *job, uint64_t now_ms, uint64_t wall_ms)
{
    int64_t now = (int64_t)now_ms;
    int timed_out;

    if (job->state == RDZV_JOB_RUNNING && job->rebuilding)
        return now_ms >= job->grace_deadline_ms ? grace_over(job, now_ms, wall_ms)
                                                : RDZV_JOB_EV_NONE;
    if (job->state != RDZV_JOB_FILLING || job->n_members == 0)
        return RDZV_JOB_EV_NONE;
    timed_out =
        job->join_timeout_ms > 0 && now >= (int64_t)(job->first_join_ms + job->join_timeout_ms);
    /* The join timeout closes a round that has min nodes even during a backoff hold. */
    if (job->min_reached &&
        (timed_out || ((job->n_members >= job->max_nodes ||
                        now >= (int64_t)(job->min_reached_ms + job->last_call_ms)) &&
                       now_ms >= job->hold_until_ms))) {
        close_round(job, now_ms);
        return RDZV_JOB_EV_ASSIGNED;
    }
    if (timed_out) {
        job->state = RDZV_JOB_FINISHED;
        return RDZV_JOB_EV_TIMEOUT;
    }
    return RDZV_JOB_EV_NONE;
}

static int32_t ms_left(uint64_t deadline, uint64_t now)
{
    if (deadline <= now)
        return 0;
    return deadline - now > INT32_MAX ? INT32_MAX : (int32_t)(deadline - now);
}

void rdzv_job_waiting(const struct rdzv_job *job, uint64_t now_ms, struct rdzv_waiting *w)
{
    w->joined = (uint32_t)job->n_members;
    w->min_nodes = job->min_nodes;
    w->max_nodes = job->max_nodes;
    w->last_call_ms_left = -1;
    w->join_ms_left = -1;
    if (job->min_reached) {
        uint64_t close = job->min_reached_ms + job->last_call_ms;

        /* a --restart-backoff hold: the round closes when it ends (the agents show it) */
        if (job->n_members >= job->max_nodes || close < job->hold_until_ms)
            close = job->hold_until_ms; /* as rdzv_job_deadline() */
        w->last_call_ms_left = ms_left(close, now_ms);
    }
    if (job->join_timeout_ms > 0 && job->n_members > 0)
        w->join_ms_left = ms_left(job->first_join_ms + job->join_timeout_ms, now_ms);
}

void rdzv_job_assign(const struct rdzv_job *job, size_t i, struct rdzv_assign *a)
{
    const struct rdzv_job_member *m = &job->members[i];
    const struct rdzv_job_member *master = &job->members[job->master];

    memset(a, 0, sizeof(*a));
    a->round = job->round;
    a->group_rank = m->group_rank;
    a->group_world_size = (uint32_t)job->n_members;
    a->rank_offset = m->rank_offset;
    a->world_size = job->world_size;
    a->restart_count = job->restart_count;
    snprintf(a->master_addr, sizeof(a->master_addr), "%s", master->addr);
    a->master_port = master->master_port;
    snprintf(a->resume, sizeof(a->resume), "%s", job->resume);
    a->resume_step = job->resume_step;
    a->resume_parts = job->resume[0] != '\0' ? job->resume_parts : 0;
}

void rdzv_job_timeout_text(const struct rdzv_job *job, char *buf, size_t len)
{
    snprintf(buf, len,
             "rendezvous of job %s timed out after %g s: %zu of %" PRIu32
             " nodes joined (need %" PRIu32 ")",
             job->id, job->join_timeout_ms / 1000.0, job->n_members, job->max_nodes,
             job->min_nodes);
}

static void remove_pending(struct rdzv_job *job, size_t i)
{
    memmove(&job->pending[i], &job->pending[i + 1],
            (job->n_pending - i - 1) * sizeof(*job->pending));
    job->n_pending--;
}

static void remove_member(struct rdzv_job *job, size_t i)
{
    if (job->state == RDZV_JOB_RUNNING && job->members[i].done)
        job->n_done--;
    memmove(&job->members[i], &job->members[i + 1],
            (job->n_members - i - 1) * sizeof(*job->members));
    job->n_members--;
    members_index(job); /* the indices moved: O(n), like the memmove */
    if (job->n_members < job->min_nodes)
        job->min_reached = 0;
}

/* Members of the previous round that may still re-join the filling round (after stopping
 * their workers): connected, not excluded, not in it yet. Their places are kept for them. */
static size_t prev_coming(const struct rdzv_job *job)
{
    size_t n = 0;

    /* those that may come, less those already in: node ids are unique in both lists, so this is
     * linear, not a walk of members[] per previous member */
    for (size_t i = 0; i < job->n_prev; i++)
        n += job->prev[i].peer != NULL && !job->prev[i].excluded;
    for (size_t i = 0; i < job->n_members; i++) {
        int64_t k = prev_find(job, job->members[i].node_id);

        n -= k >= 0 && job->prev[k].peer != NULL && !job->prev[k].excluded;
    }
    return n;
}

/* Pending joiners enter the filling round in join order while there is room next to the
 * previous round's members still coming back (they keep priority): up to max_nodes for a node
 * that wants to grow the job, up to keep_nodes for a spare, which only takes the place of a
 * node that will not come back (lost, left, excluded). Capacity was reserved when they joined.
 * Returns 1 when an admission closed the round; *admitted counts them. */
static int admit_pending(struct rdzv_job *job, uint64_t now_ms, size_t *admitted)
{
    size_t coming = job->n_pending > 0 ? prev_coming(job) : 0, i = 0;

    while (i < job->n_pending && job->state == RDZV_JOB_FILLING) {
        size_t nodes = job->n_members + coming; /* the round's size if nobody else comes */

        if (nodes >= job->max_nodes)
            break;
        if (job->pending[i].spare && nodes >= job->keep_nodes) {
            i++; /* a node that grows the job may still fit */
            continue;
        }
        /* Hook for a pre-flight of nodes that join a running job: a
         * spare or joiner is admitted here, before its ASSIGN; a check would hold it back here
         * and admit it once it passed. */
        (void)add_member(job, &job->pending[i], now_ms);
        remove_pending(job, i);
        (*admitted)++;
    }
    return job->state == RDZV_JOB_RUNNING;
}

/* A place in the filling round may have come free (or a spare arrived): pending joiners and
 * spares take it. Returns ASSIGNED when that closed the round, WAITING when someone entered,
 * else ev. */
static enum rdzv_job_event refill(struct rdzv_job *job, uint64_t now_ms, enum rdzv_job_event ev)
{
    size_t admitted = 0;

    if (job->state != RDZV_JOB_FILLING)
        return ev;
    if (admit_pending(job, now_ms, &admitted))
        return RDZV_JOB_EV_ASSIGNED;
    return admitted > 0 ? RDZV_JOB_EV_WAITING : ev;
}

/* Opens the next round (job->cause says why): members become prev, pending joiners enter. An
 * excluded member gets RESTART like the others (its JOIN is then refused), but its place is
 * free at once: a spare need not wait for that JOIN. */
static enum rdzv_job_event new_round(struct rdzv_job *job, uint64_t now_ms)
{
    size_t admitted = 0;

    for (size_t i = 0; i < job->n_members; i++) {
        const struct rdzv_job_member *m = &job->members[i];

        job->prev[i].node_id = m->node_id;
        job->prev[i].group_rank = m->group_rank;
        job->prev[i].peer = m->peer;
        job->prev[i].excluded = rdzv_job_excluded(job, m->host, m->addr, m->seen) != NULL;
    }
    job->n_prev = job->n_members;
    prev_index(job);
    job->n_members = 0;
    members_index(job);
    job->min_reached = 0;
    job->rebuilding = 0;
    job->round++;
    job->state = RDZV_JOB_FILLING;
    (void)admit_pending(job, now_ms, &admitted); /* RUNNING: the caller sends ASSIGN too */
    return RDZV_JOB_EV_RESTART;
}

/* The seen address first: it is what a JOIN cannot choose (see rdzv_job_node). */
static struct rdzv_job_node *ledger_find(const struct rdzv_job *job, const char *host,
                                         const char *addr, const char *seen)
{
    for (size_t i = 0; i < job->n_nodes; i++) {
        const struct rdzv_job_node *n = &job->nodes[i];

        if (strcmp(n->seen, seen) == 0 && strcmp(n->host, host) == 0 && strcmp(n->addr, addr) == 0)
            return &job->nodes[i];
    }
    return NULL;
}

const struct rdzv_job_node *rdzv_job_excluded(const struct rdzv_job *job, const char *host,
                                              const char *addr, const char *seen)
{
    const struct rdzv_job_node *n = ledger_find(job, host, addr, seen);

    return n != NULL && n->excluded ? n : NULL;
}

static struct rdzv_job_node *ledger_add(struct rdzv_job *job, const struct rdzv_job_member *who)
{
    struct rdzv_job_node *n = ledger_find(job, who->host, who->addr, who->seen);

    if (n != NULL)
        return n;
    if (job->n_nodes == job->cap_nodes) {
        size_t cap = job->cap_nodes ? job->cap_nodes * 2 : 4;
        void *p;

        if (job->n_nodes >= RDZV_JOB_LEDGER_MAX) /* bounded: a flood of fake hosts */
            return NULL;
        if ((p = realloc(job->nodes, cap * sizeof(*job->nodes))) == NULL)
            return NULL; /* counting is best effort: the restart itself must go on */
        job->nodes = p;
        job->cap_nodes = cap;
    }
    n = &job->nodes[job->n_nodes++];
    memset(n, 0, sizeof(*n));
    snprintf(n->host, sizeof(n->host), "%s", who->host);
    snprintf(n->addr, sizeof(n->addr), "%s", who->addr);
    snprintf(n->seen, sizeof(n->seen), "%s", who->seen);
    return n;
}

/* Counts failure f against the member `who` that caused it (NULL: a node this server never
 * saw); with --exclude-after N, the N-th failure within the window excludes it. */
static void note_failure(struct rdzv_job *job, const struct rdzv_job_member *who,
                         const struct rdzv_failure *f, uint64_t now_ms)
{
    struct rdzv_job_node *n = who != NULL && who->host[0] != '\0' ? ledger_add(job, who) : NULL;
    uint32_t recent = 0;

    if (n == NULL)
        return;
    n->failures++;
    n->times[n->next] = now_ms;
    n->next = (n->next + 1) % RDZV_JOB_EXCLUDE_MAX;
    for (uint32_t i = 0; i < RDZV_JOB_EXCLUDE_MAX && i < n->failures; i++)
        recent += now_ms - n->times[i] < job->exclude_window_ms;
    if (job->exclude_after == 0 || n->excluded || recent < job->exclude_after)
        return;
    n->excluded = 1;
    snprintf(n->reason, sizeof(n->reason), "caused %u failures within %.0f s (last: %.150s)",
             recent, job->exclude_window_ms / 1000.0, f->text);
    mc_utf8_sanitize(n->reason); /* %.150s may cut a character: /status must stay valid JSON */
}

/* Counts f into the run of same failures; 1 when that run reached --max-same-failure. */
static int same_failure(struct rdzv_job *job, const struct rdzv_failure *f)
{
    int again = job->same_count > 0 && !job->ckpt_since && job->same_class == f->sig_class &&
                strcmp(job->same_sig, f->sig) == 0;

    job->ckpt_since = 0;
    if (!rdzv_sig_retry_limited(f->sig_class) || f->sig[0] == '\0') {
        job->same_count = 0; /* infrastructure, or nothing known: the run of same ones ends */
        job->same_sig[0] = '\0';
        return 0;
    }
    if (!again) {
        job->same_count = 0;
        job->same_class = f->sig_class;
        snprintf(job->same_sig, sizeof(job->same_sig), "%s", f->sig);
    }
    job->same_count++;
    return job->max_same_failure > 0 && job->same_count >= job->max_same_failure;
}

void rdzv_job_checkpoint(struct rdzv_job *job, const char *name, int64_t step)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a: a name's identity, not a checksum */

    if (step >= 0) {
        if (step > job->ckpt_step) {
            job->ckpt_step = step;
            job->ckpt_since = 1;
        }
        return;
    }
    for (const char *p = name; *p != '\0'; p++)
        h = (h ^ (uint8_t)*p) * 1099511628211ull;
    if (h != job->ckpt_name_hash) {
        job->ckpt_name_hash = h;
        job->ckpt_since = 1;
    }
}

/* The first failure of a running round decides: a new round, or the end of the job. The member
 * `who` (a copy: it may have left members[] already) that caused it is charged with it. */
static enum rdzv_job_event restart_or_fail(struct rdzv_job *job, const struct rdzv_failure *f,
                                           const struct rdzv_job_member *who, uint64_t now_ms)
{
    enum rdzv_job_event ev;

    note_failure(job, who, f, now_ms);
    job->cause = *f;
    mc_utf8_sanitize(job->cause.text); /* built by snprintf from peers' texts: maybe cut short */
    if (same_failure(job, f)) {
        job->cause.flags |= RDZV_FAILURE_NOT_RETRYABLE;
        job->state = RDZV_JOB_FINISHED;
        return RDZV_JOB_EV_FAILED;
    }
    if (job->restart_count >= job->max_restarts || (f->flags & RDZV_FAILURE_FINAL)) {
        job->state = RDZV_JOB_FINISHED;
        return RDZV_JOB_EV_FAILED;
    }
    job->restart_count++;
    job->restart_delay_ms = mc_backoff_next(&job->backoff, now_ms - job->running_since_ms);
    /* before new_round(): pending joiners it admits must not close the round early either */
    job->hold_until_ms = now_ms + job->restart_delay_ms;
    ev = new_round(job, now_ms);
    return ev;
}

static void forget_prev(struct rdzv_job *job, const void *peer)
{
    for (size_t i = 0; i < job->n_prev; i++)
        if (job->prev[i].peer == peer)
            job->prev[i].peer = NULL;
}

enum rdzv_job_event rdzv_job_failed(struct rdzv_job *job, void *peer, const struct rdzv_failure *f,
                                    int leaving, uint64_t now_ms)
{
    int i = rdzv_job_find(job, peer);
    int pi = rdzv_job_find_pending(job, peer);
    struct rdzv_failure cause;
    struct rdzv_job_member who;

    if (leaving && pi >= 0)
        remove_pending(job, (size_t)pi); /* it never ran: nobody else needs to know */
    if (leaving && job->state == RDZV_JOB_FILLING) {
        forget_prev(job, peer); /* it will not come back: a spare may take its place */
        if (i >= 0)
            remove_member(job, (size_t)i);
        return refill(job, now_ms, i >= 0 ? RDZV_JOB_EV_WAITING : RDZV_JOB_EV_NONE);
    }
    if (job->state == RDZV_JOB_FINISHED || i < 0)
        return RDZV_JOB_EV_NONE;
    /* A FAILED naming another round, or one for a round still filling, is stale: its sender
     * already got RESTART for it (the first failure of a round wins). */
    if (job->state != RDZV_JOB_RUNNING || (!leaving && f->round != job->round))
        return RDZV_JOB_EV_NONE;
    cause = *f;
    cause.round = job->round;
    cause.flags &= ~RDZV_FAILURE_NOT_RETRYABLE; /* the server's verdict, never a peer's */
    if (cause.host[0] == '\0')
        snprintf(cause.host, sizeof(cause.host), "%s", job->members[i].host);
    who = job->members[i]; /* remove_member() moves it */
    if (leaving)
        remove_member(job, (size_t)i);
    return restart_or_fail(job, &cause, &who, now_ms);
}

enum rdzv_job_event rdzv_job_done(struct rdzv_job *job, void *peer, uint32_t round)
{
    int i = rdzv_job_find(job, peer);

    if (job->state != RDZV_JOB_RUNNING || round != job->round || i < 0)
        return RDZV_JOB_EV_NONE;
    if (!job->members[i].done) {
        job->members[i].done = 1;
        job->n_done++;
    }
    /* A rebuilt job with members still away cannot know that they are done too. */
    if (job->n_done < job->n_members || job->rebuilding)
        return RDZV_JOB_EV_NONE;
    job->state = RDZV_JOB_FINISHED;
    return RDZV_JOB_EV_DONE;
}

/* A failure the member m itself is (lost, excluded): no rank, no exit code, its host; text and
 * signature are the caller's. */
static void node_failure(const struct rdzv_job *job, const struct rdzv_job_member *m,
                         uint64_t wall_ms, struct rdzv_failure *f)
{
    memset(f, 0, sizeof(*f));
    f->round = job->round;
    f->rank = -1;
    f->local_rank = -1;
    f->exit_code = -1;
    f->time_ms = wall_ms;
    snprintf(f->host, sizeof(f->host), "%s", m->host);
}

enum rdzv_job_event rdzv_job_lost(struct rdzv_job *job, void *peer, const char *reason,
                                  uint64_t now_ms, uint64_t wall_ms)
{
    int i = rdzv_job_find(job, peer);
    int pi = rdzv_job_find_pending(job, peer);
    struct rdzv_job_member *m;
    struct rdzv_failure f;
    struct rdzv_job_member who;

    forget_prev(job, peer);
    if (pi >= 0)
        remove_pending(job, (size_t)pi);
    if (i < 0) /* a previous member that had not re-joined yet frees its place */
        return refill(job, now_ms, RDZV_JOB_EV_NONE);
    m = &job->members[i];
    /* A node that already reported DONE may hang up before JOB_DONE arrives; its workers
     * succeeded, so that is no failure. Finished jobs only forget the pointer. */
    if (job->state == RDZV_JOB_FINISHED || (job->state == RDZV_JOB_RUNNING && m->done)) {
        m->peer = NULL;
        return RDZV_JOB_EV_NONE;
    }
    if (job->state == RDZV_JOB_FILLING) {
        remove_member(job, (size_t)i);
        return refill(job, now_ms, RDZV_JOB_EV_WAITING);
    }
    node_failure(job, m, wall_ms, &f);
    snprintf(f.text, sizeof(f.text), "lost node %s (%s): %s", m->host, m->addr, reason);
    f.sig_class = RDZV_SIG_LOST;
    snprintf(f.sig, sizeof(f.sig), "lost node");
    who = *m; /* remove_member() moves it */
    remove_member(job, (size_t)i);
    return restart_or_fail(job, &f, &who, now_ms);
}

enum rdzv_job_event rdzv_job_exclude(struct rdzv_job *job, void *peer, const char *reason,
                                     uint64_t now_ms, uint64_t wall_ms)
{
    int i = rdzv_job_find(job, peer);
    struct rdzv_job_node *n;
    struct rdzv_job_member *m, who;
    struct rdzv_failure f;

    if (job->state != RDZV_JOB_RUNNING || i < 0)
        return RDZV_JOB_EV_NONE;
    m = &job->members[i];
    if ((n = ledger_add(job, m)) == NULL)
        return RDZV_JOB_EV_NONE; /* the ledger is full: nothing would keep it out */
    if (!n->excluded) {
        n->excluded = 1;
        snprintf(n->reason, sizeof(n->reason), "%s", reason);
        mc_utf8_sanitize(n->reason);
    }
    node_failure(job, m, wall_ms, &f);
    snprintf(f.text, sizeof(f.text), "node %s (%s) excluded: %s", m->host, m->addr, reason);
    who = *m; /* new_round() moves the members */
    /* the member stays: it gets RESTART with the others, and its JOIN is refused */
    return restart_or_fail(job, &f, &who, now_ms);
}

/* --- server restart: rebuilding a running round from REJOINs ------------------------------ */

/* pending[] may hold spares: a spare that reconnects to the restarted server before every
 * member (its JOIN creates the job) must not keep the members from rebuilding their round. In a
 * round 0 without members nothing else can be pending. */
static int fresh(const struct rdzv_job *job)
{
    return job->state == RDZV_JOB_FILLING && job->round == 0 && job->n_members == 0 &&
           job->n_prev == 0;
}

/* The first REJOIN of a job this server never saw: adopt the agent's round as it is. */
static void adopt(struct rdzv_job *job, const struct rdzv_assign *a, uint64_t now_ms)
{
    job->state = RDZV_JOB_RUNNING;
    job->rebuilding = 1;
    job->round = a->round;
    job->restart_count = a->restart_count;
    job->expected = a->group_world_size;
    job->keep_nodes = a->group_world_size;
    job->world_size = a->world_size;
    /* The round was decided before the restart: keep its resume point, not a member's JOIN. */
    snprintf(job->resume, sizeof(job->resume), "%s", a->resume);
    job->resume_step = a->resume_step;
    job->resume_parts = 0; /* REJOIN's ASSIGN carries none: rank 0's pick */
    job->running_since_ms = now_ms;
    job->n_done = 0;
    job->grace_deadline_ms = now_ms + job->reconnect_grace_ms;
}

static int rank_taken(const struct rdzv_job *job, uint32_t rank)
{
    for (size_t i = 0; i < job->n_members; i++)
        if (job->members[i].group_rank == rank)
            return 1;
    return 0;
}

/* A member of the rebuilt round comes back with the ranks it runs with. */
static int readmit(struct rdzv_job *job, const struct rdzv_rejoin *rj, const char *addr,
                   const char *seen, void *peer)
{
    const struct rdzv_assign *a = &rj->assign;
    struct rdzv_job_member *m;

    if (a->group_rank >= job->expected || a->group_world_size != job->expected ||
        rank_taken(job, a->group_rank) || job->n_members >= job->expected)
        return -ESTALE;
    if (reserve(job, job->n_members + 1 + job->n_pending) < 0) /* see add_pending() */
        return -ENOMEM;
    m = &job->members[job->n_members++];
    make_member(m, &rj->join, addr, seen, peer);
    member_indexed(job, job->n_members - 1);
    m->group_rank = a->group_rank;
    m->rank_offset = a->rank_offset;
    if (a->group_rank == 0)
        job->master = job->n_members - 1;
    if (job->n_members == job->expected)
        job->rebuilding = 0;
    return 0;
}

int rdzv_job_rejoin(struct rdzv_job *job, const struct rdzv_rejoin *rj, const char *addr,
                    const char *seen, void *peer, uint64_t now_ms, void **old_peer,
                    enum rdzv_job_event *ev)
{
    int i, err;

    *old_peer = NULL;
    *ev = RDZV_JOB_EV_NONE;
    if (job->state == RDZV_JOB_FINISHED)
        return -ESHUTDOWN;
    if (fresh(job) && rj->assign.group_world_size > 0)
        adopt(job, &rj->assign, now_ms);
    if (job->state != RDZV_JOB_RUNNING || rj->assign.round != job->round)
        return -ESTALE;
    i = rdzv_job_find_node(job, rj->join.node_id);
    if (i >= 0) {
        *old_peer = job->members[i].peer;
        job->members[i].peer = peer;
        member_indexed(job, (size_t)i);
    } else {
        if (!job->rebuilding)
            return -ESTALE;
        err = readmit(job, rj, addr, seen, peer);
        if (err < 0)
            return err;
        i = (int)job->n_members - 1;
    }
    if (rj->done)
        *ev = rdzv_job_done(job, peer, job->round);
    return 0;
}

/* Reconnect grace over with members missing: the first missing group rank is the lost node. */
static enum rdzv_job_event grace_over(struct rdzv_job *job, uint64_t now_ms, uint64_t wall_ms)
{
    struct rdzv_failure f = {.round = job->round, .local_rank = -1, .exit_code = -1};
    uint32_t r = 0;

    while (r < job->expected && rank_taken(job, r))
        r++;
    f.rank = -1;
    f.time_ms = wall_ms;
    snprintf(f.text, sizeof(f.text),
             "lost node with group rank %" PRIu32 ": did not reconnect within %.1f s", r,
             job->reconnect_grace_ms / 1000.0);
    f.sig_class = RDZV_SIG_LOST;
    snprintf(f.sig, sizeof(f.sig), "lost node");
    job->rebuilding = 0;
    return restart_or_fail(job, &f, NULL, now_ms); /* a node this server never saw: nobody */
}
