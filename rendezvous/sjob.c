/* Server side of one job (struct sjob): wraps the pure round logic (job.c) and the workers' KV
 * store (kv.c) with the one timer they need, and turns the job's decisions into messages. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mbedtls/platform_util.h>

#include "sjob.h"
#include "tls.h"

static void sjob_closed_cb(uv_handle_t *handle)
{
    struct sjob *sj = handle->data;
    struct rdzv_server *srv = sj->srv;

    rdzv_kv_free(sj->kv);
    rdzv_ckptlog_free(sj->ckpts);
    rdzv_logring_free(sj->logs);
    free(sj->restarts);
    free(sj->warnings);
    rdzv_pfrec_clear(&sj->pfrec);
    rdzv_job_free(sj->job);
    if (sj->scope != NULL)
        sj->scope->jobs--;
    rdzv__scope_put(&srv->scopes, sj->scope);
    free(sj);
    rdzv__handle_closed(srv);
}

/* Unlinks at once, so that a JOIN arriving meanwhile creates a fresh job; frees on close.
 * Workers still attached lose their job: their held requests get STALE, later ones too. */
void rdzv__sjob_drop(struct sjob *sj)
{
    struct rdzv_server *srv = sj->srv;

    if (sj->dropped)
        return;
    sj->dropped = 1;
    if (srv->job_dropped != NULL)
        srv->job_dropped(sj);
    if (sj->prev != NULL)
        sj->prev->next = sj->next;
    else
        srv->jobs = sj->next;
    if (sj->next != NULL)
        sj->next->prev = sj->prev;
    srv->n_jobs--;
    for (struct peer *p = srv->peers; p != NULL; p = p->next) {
        if (p->kvjob == sj) {
            p->kvjob = NULL;
            rdzv__peer_arm(p); /* in no job now: the idle deadline applies */
        }
    }
    if (!srv->closing)
        rdzv_kv_set_round(sj->kv, sj->job->round + 1); /* answers held requests: STALE */
    uv_close((uv_handle_t *)&sj->timer, sjob_closed_cb);
}

struct sjob *rdzv__sjob_find(struct rdzv_server *srv, const char *id)
{
    for (struct sjob *sj = srv->jobs; sj != NULL; sj = sj->next)
        if (strcmp(sj->job->id, id) == 0)
            return sj;
    return NULL;
}

/* scope: the creating credential's (scope.h), NULL for operators: the job is charged to it
 * and its KV store draws on the scope's pool, which draws on the server's. */
int rdzv__sjob_new(struct rdzv_server *srv, const struct rdzv_join *j, struct rdzv__scope *scope,
                   struct sjob **out)
{
    struct rdzv_kv_limits kl = {.max_keys = srv->limits.kv_max_keys,
                                .max_bytes = srv->limits.kv_max_bytes,
                                .pool = scope != NULL ? &scope->kv : &srv->kv_pool,
                                .max_held = srv->limits.kv_max_held_per_job,
                                .max_held_per_peer = srv->limits.kv_max_held_per_conn};
    struct sjob *sj;
    int err;

    if (srv->n_jobs >= srv->limits.max_jobs)
        return -EUSERS; /* the dispatcher refuses such JOINs first; this is the backstop */
    sj = calloc(1, sizeof(*sj));
    if (sj == NULL)
        return -ENOMEM;
    err = rdzv_job_new(j, &sj->job);
    if (err == 0)
        err = rdzv_kv_new(&kl, 0, rdzv__kv_reply, srv, &sj->kv);
    if (err < 0) {
        rdzv_job_free(sj->job);
        free(sj);
        return err;
    }
    uv_timer_init(srv->loop, &sj->timer); /* cannot fail on unix */
    sj->timer.data = sj;
    sj->srv = srv;
    srv->handles++;
    srv->n_jobs++;
    sj->next = srv->jobs;
    if (srv->jobs != NULL)
        srv->jobs->prev = sj;
    srv->jobs = sj;
    rdzv__scope_charge_job(sj, scope); /* before any KV charge can reach its pool */
    *out = sj;
    return 0;
}

/* --- job events -> messages ------------------------------------------------------------------ */
static void broadcast_waiting(struct sjob *sj);

/* SJOB_WAITING_EVERY_MS, longer for large jobs (service.h). */
static uint64_t sjob_waiting_every_ms(const struct sjob *sj)
{
    uint64_t every = (uint64_t)sj->job->n_members * 1000u / SJOB_WAITING_PER_S;

    if (every < SJOB_WAITING_EVERY_MS)
        return SJOB_WAITING_EVERY_MS;
    return every > SJOB_WAITING_MAX_MS ? SJOB_WAITING_MAX_MS : every;
}

static void timer_cb(uv_timer_t *timer)
{
    struct sjob *sj = timer->data;
    uint64_t now = uv_now(sj->srv->loop);

    if (sj->waiting_due && now >= sj->waiting_sent_at + sjob_waiting_every_ms(sj)) {
        sj->waiting_due = 0;
        if (sj->job->state == RDZV_JOB_FILLING && sj->job->n_members > 0)
            broadcast_waiting(sj);
    }
    rdzv_kv_tick(sj->kv, now);
    rdzv__sjob_apply(sj, rdzv_job_tick(sj->job, now, mc_wall_ms()));
}

static int64_t earliest(int64_t a, int64_t b)
{
    if (a < 0)
        return b;
    if (b < 0)
        return a;
    return a < b ? a : b;
}

void rdzv__sjob_arm(struct sjob *sj)
{
    int64_t deadline = earliest(rdzv_job_deadline(sj->job), rdzv_kv_deadline(sj->kv));
    uint64_t now = uv_now(sj->srv->loop);

    if (sj->waiting_due)
        deadline = earliest(deadline, (int64_t)(sj->waiting_sent_at + sjob_waiting_every_ms(sj)));

    if (deadline < 0) {
        uv_timer_stop(&sj->timer);
        return;
    }
    uv_timer_start(&sj->timer, timer_cb, (uint64_t)deadline > now ? deadline - now : 0, 0);
}

static void send_list(const struct rdzv_job_member *list, size_t n, const struct rdzv_msg *m)
{
    for (size_t i = 0; i < n; i++)
        rdzv__send(list[i].peer, m);
}

static void send_members(struct sjob *sj, const struct rdzv_msg *m)
{
    send_list(sj->job->members, sj->job->n_members, m);
}

/* The job's worker credential (cred.h), which agents hand to their workers instead of their
 * own: derived from the server's secret, so it survives a server restart unchanged. */
static void worker_key(const struct sjob *sj, uint8_t key[RDZV_KEY_LEN])
{
    const unsigned char *master = rdzv_tls_master(sj->srv->tls);
    struct rdzv_cred c;

    memset(key, 0, RDZV_KEY_LEN);
    if (master == NULL || rdzv_cred_derive(master, RDZV_CRED_WORKER, sj->job->id, &c) < 0)
        return;
    memcpy(key, c.key, RDZV_KEY_LEN);
    rdzv_cred_wipe(&c);
}

static void send_assign(struct sjob *sj)
{
    struct rdzv_msg m;

    rdzv_msg_init(&m, RDZV_MSG_ASSIGN);
    uint8_t key[RDZV_KEY_LEN];

    sj->srv->stats.rounds_total++;
    sj->waiting_due = 0; /* the round closed: no count to report */
    worker_key(sj, key);
    for (size_t i = 0; i < sj->job->n_members; i++) {
        rdzv_job_assign(sj->job, i, &m.u.assign);
        memcpy(m.u.assign.worker_key, key, sizeof(key));
        rdzv__send(sj->job->members[i].peer, &m);
    }
    mbedtls_platform_zeroize(key, sizeof(key));
    mbedtls_platform_zeroize(m.u.assign.worker_key, sizeof(key));
}

static void broadcast_waiting(struct sjob *sj)
{
    struct rdzv_msg m;

    rdzv_msg_init(&m, RDZV_MSG_WAITING);

    sj->waiting_sent_at = uv_now(sj->srv->loop);
    rdzv_job_waiting(sj->job, sj->waiting_sent_at, &m.u.waiting);
    send_members(sj, &m);
}

/* The count changed: tell every member now, or at the next sjob_waiting_every_ms tick (the
 * timer is armed by rdzv__sjob_apply through rdzv__sjob_arm); the round closing first makes it
 * moot. The newest member, who just joined, hears it at once either way. */
static void send_waiting(struct sjob *sj)
{
    struct rdzv_msg m;

    rdzv_msg_init(&m, RDZV_MSG_WAITING);
    uint64_t now = uv_now(sj->srv->loop);

    if (now >= sj->waiting_sent_at + sjob_waiting_every_ms(sj)) {
        broadcast_waiting(sj);
        return;
    }
    sj->waiting_due = 1;
    if (sj->job->n_members == 0)
        return;
    rdzv_job_waiting(sj->job, now, &m.u.waiting);
    rdzv__send(sj->job->members[sj->job->n_members - 1].peer, &m);
}

/* RESTART to the previous round; the new round may already hold admitted pending joiners
 * (WAITING) or even have closed with them (ASSIGN). */
static void send_restart(struct sjob *sj)
{
    struct rdzv_msg m;

    rdzv_msg_init(&m, RDZV_MSG_RESTART);

    m.u.restart.restart_count = sj->job->restart_count;
    m.u.restart.cause = sj->job->cause;
    m.u.restart.delay_ms = sj->job->restart_delay_ms;
    for (size_t i = 0; i < sj->job->n_prev; i++)
        rdzv__send(sj->job->prev[i].peer, &m);
    if (sj->job->state == RDZV_JOB_RUNNING)
        send_assign(sj);
    else if (sj->job->n_members > 0)
        send_waiting(sj);
}

/* A joiner waiting for a later round hears how many wait with it. */
static void send_pending(struct sjob *sj)
{
    struct rdzv_msg m;

    rdzv_msg_init(&m, RDZV_MSG_WAITING);
    const struct rdzv_job *job = sj->job;

    m.u.waiting =
        (struct rdzv_waiting){(uint32_t)job->n_pending, job->min_nodes, job->max_nodes, -1, -1};
    send_list(job->pending, job->n_pending, &m);
}

/* The job ended: members and anyone still waiting to join hear it. */
static void send_final(struct sjob *sj, const struct rdzv_msg *m)
{
    send_members(sj, m);
    send_list(sj->job->pending, sj->job->n_pending, m);
}

/* Every connection of the job hears about the timeout, also one that has not re-joined after
 * a RESTART yet: the job is gone for all of them. */
static void sjob_timeout(struct sjob *sj)
{
    struct rdzv_server *srv = sj->srv;
    char text[RDZV_TEXT_MAX + 1];

    rdzv_job_timeout_text(sj->job, text, sizeof(text));
    for (struct peer *p = srv->peers, *next; p != NULL; p = next) {
        next = p->next; /* rdzv__peer_close() unlinks only from its close callback, but be safe */
        if (p->job != sj)
            continue;
        p->job = NULL;
        sj->npeers--;
        rdzv__send_error(p, RDZV_ERR_TIMEOUT, "%s", text);
    }
    rdzv__sjob_drop(sj);
}

/* A restart or the job's end into the history STATUS shows (its memory: ~1.6 KB an entry, at
 * most SJOB_RESTARTS_KEPT a job, only for jobs that restarted). Out of memory: not kept. */
static void note_restart(struct sjob *sj, enum rdzv_job_event ev)
{
    struct sjob_restart *r;

    if (sj->restarts == NULL &&
        (sj->restarts = calloc(SJOB_RESTARTS_KEPT, sizeof(*sj->restarts))) == NULL)
        return;
    r = &sj->restarts[sj->n_restarts++ % SJOB_RESTARTS_KEPT];
    r->cause = sj->job->cause;
    r->at_ms = uv_now(sj->srv->loop);
    r->wall_ms = mc_wall_ms();
    r->restart_count = sj->job->restart_count;
    r->counted = sj->job->restart_count > sj->last_restart_count;
    r->final = ev == RDZV_JOB_EV_FAILED;
}

/* Counters for /metrics, the restart history, and the KV store follows the job into its new
 * round. */
static void account(struct sjob *sj, enum rdzv_job_event ev)
{
    struct rdzv_job *job = sj->job;

    if (ev == RDZV_JOB_EV_RESTART || ev == RDZV_JOB_EV_FAILED)
        note_restart(sj, ev);
    if (job->restart_count > sj->last_restart_count)
        sj->srv->stats.restarts_total += job->restart_count - sj->last_restart_count;
    sj->last_restart_count = job->restart_count;
    if ((ev == RDZV_JOB_EV_RESTART || ev == RDZV_JOB_EV_FAILED) &&
        strncmp(job->cause.text, "lost node", 9) == 0)
        sj->srv->stats.lost_nodes_total++;
    if (rdzv_kv_round(sj->kv) != job->round)
        rdzv_kv_set_round(sj->kv, job->round);
}

static void send_event(struct sjob *sj, enum rdzv_job_event ev)
{
    struct rdzv_msg m;

    switch (ev) {
    case RDZV_JOB_EV_WAITING:
        send_waiting(sj);
        break;
    case RDZV_JOB_EV_ASSIGNED:
        send_assign(sj);
        break;
    case RDZV_JOB_EV_RESTART:
        send_restart(sj);
        break;
    case RDZV_JOB_EV_PENDING:
        send_pending(sj);
        break;
    case RDZV_JOB_EV_FAILED:
        rdzv_msg_init(&m, RDZV_MSG_JOB_FAILED);
        m.u.job_failed.restarts = sj->job->restart_count;
        m.u.job_failed.cause = sj->job->cause;
        send_final(sj, &m);
        break;
    case RDZV_JOB_EV_DONE:
        rdzv_msg_init(&m, RDZV_MSG_JOB_DONE);
        send_final(sj, &m);
        break;
    default:
        break;
    }
}

/* A job without agent connections has nothing left to tell anyone; dropping it lets the next
 * JOIN with that id start afresh, and REJOINs rebuild it. */
void rdzv__sjob_apply(struct sjob *sj, enum rdzv_job_event ev)
{
    if (sj->dropped)
        return;
    if (ev == RDZV_JOB_EV_TIMEOUT) {
        sjob_timeout(sj);
        return;
    }
    account(sj, ev);
    send_event(sj, ev);
    if (sj->npeers == 0)
        rdzv__sjob_drop(sj);
    else
        rdzv__sjob_arm(sj);
}

/* The job's cap on attached worker connections: job_workers_per_proc x its world (members and
 * waiting joiners) + job_workers_slack. */
static unsigned worker_cap(const struct sjob *sj)
{
    const struct rdzv_limits *l = &sj->srv->limits;
    const struct rdzv_job *job = sj->job;
    uint64_t world = 0, cap;

    for (size_t i = 0; i < job->n_members; i++)
        world += job->members[i].nproc;
    for (size_t i = 0; i < job->n_pending; i++)
        world += job->pending[i].nproc;
    cap = world * l->job_workers_per_proc + l->job_workers_slack;
    return cap > UINT32_MAX ? UINT32_MAX : (unsigned)cap;
}

/* Attached workers are exempt from the idle timeout (they are silent between barriers), so
 * without this cap one token holder could pin every connection of the server through one job.
 * Counts p against sj and returns 1, or answers ERROR (counted) and returns 0. peer_lose()
 * gives the count back. */
int rdzv__sjob_worker_admit(struct sjob *sj, struct peer *p)
{
    unsigned cap = worker_cap(sj);

    if (sj->nworkers < cap) {
        sj->nworkers++;
        return 1;
    }
    rdzv__peer_event(p, SRV_EV_JOB_WORKERS, "ATTACH over the %u worker connections of job %s", cap,
                     sj->job->id);
    rdzv__send_error(p, RDZV_ERR_PROTOCOL,
                     "job %s has %u worker connections already, its limit "
                     "(muster server --job-workers-per-proc, --job-workers-slack)",
                     sj->job->id, sj->nworkers);
    return 0;
}

void rdzv__sjob_attach(struct sjob *sj, struct peer *p)
{
    if (p->job == sj)
        return;
    p->job = sj;
    sj->npeers++;
}

/* The agent connection p leaves the job (closed, silent, or replaced by a reconnect). */
void rdzv__sjob_detach(struct sjob *sj, struct peer *p, const char *reason)
{
    uint64_t now = uv_now(sj->srv->loop);

    rdzv__repl_forget(sj, p);
    p->job = NULL;
    sj->npeers--;
    rdzv__sjob_apply(sj, rdzv_job_lost(sj->job, p, reason, now, mc_wall_ms()));
}
