/* The agent's fault tolerance: the checkpoint registry (resume point, records reported to the
 * server) and hang detection, owned in struct agent_ft. Calls nothing in agent.c: a hang goes
 * up through the callback agent__ft_start() was given. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent_priv.h"
#include "escape.h"
#include "log.h"
#include "path.h"
#include "safefile.h"

/* Before an attempt: MUSTER_RESUME_FROM is the checkpoint the node of group rank 0 chose (the
 * server copies its JOIN's pick into every ASSIGN), so every node resumes from the same one;
 * that node records new checkpoints from now on. Fresh heartbeat files. */
static void log_resume(const struct agent *a)
{
    const struct agent_ft *ft = &a->ft;
    const struct rdzv_assign *as = &a->as;
    char shown[MC_ESCAPE_SIZE(sizeof(ft->resume_from))];
    struct stat st;

    /* the name is the node of group rank 0's, through the server: escaped when shown */
    mc_escape(ft->resume_from, shown, sizeof(shown));
    if (ft->resume_from[0] != '\0')
        mc_info("attempt %u resumes from %s", as->restart_count, shown);
    else if (as->restart_count > 0 || ft->my_resume_step >= 0)
        mc_info("attempt %u starts from scratch: no checkpoint verifies on the node of group "
                "rank 0",
                as->restart_count);
    if (ft->resume_from[0] != '\0' && stat(ft->resume_from, &st) != 0)
        mc_warn("%s is not on this node; its workers cannot read it (share --checkpoint-dir "
                "between nodes, or load on rank 0 and broadcast)",
                shown);
    if (ft->my_resume_step > as->resume_step)
        mc_warn("this node has a newer verified checkpoint (step %lld) than the node of group "
                "rank 0 can reach; resuming from step %lld instead",
                (long long)ft->my_resume_step, (long long)as->resume_step);
}

/* A sharded checkpoint (ASSIGN.resume_parts): the members of the round hold its parts between
 * them; this node's are its own part (DIR/NAME) and the copies of other nodes' parts it keeps
 * (agent_ckpt_part_name), as its registry lists them. MUSTER_RESUME_FROM is its own part (or
 * the first it holds; DIR/NAME, absent, when it holds none), MUSTER_RESUME_PARTS every one of
 * them, ':' between. In memory and a stat
 * per part: bounded by the parts this node holds of one checkpoint. */
static void prepare_parts(struct agent *a)
{
    struct agent_ft *ft = &a->ft;
    const struct agent_ckpt_registry *reg = &ft->ckpt.reg;
    const char *dir = a->o->ckpt.dir, *name = a->as.resume;
    size_t len = 0, cap = 0, held = 0;
    char path[PATH_MAX];
    struct stat st;

    for (size_t i = 0; i < reg->n; i++) {
        const struct agent_ckpt_entry *e = &reg->entries[i];
        size_t n;
        char *t;

        if (strcmp(agent_ckpt_part_of(e->name), name) != 0 ||
            (e->part != 0 && e->parts != a->as.resume_parts) ||
            snprintf(path, sizeof(path), "%s/%s", dir, e->name) >= (int)sizeof(path) ||
            lstat(path, &st) != 0 || strchr(path, ':') != NULL)
            continue;
        n = strlen(path);
        if (len + n + 2 > cap) {
            cap = (len + n + 2) * 2;
            if ((t = realloc(ft->resume_parts, cap)) == NULL)
                break;
            ft->resume_parts = t;
        }
        if (len > 0)
            ft->resume_parts[len++] = ':';
        memcpy(ft->resume_parts + len, path, n + 1);
        len += n;
        if (held++ == 0 || strcmp(e->name, name) == 0)
            snprintf(ft->resume_from, sizeof(ft->resume_from), "%s", path);
    }
    /* none here (a node taking a lost one's place): the workers must still know that the job
     * resumes, and from which checkpoint, to take their shards from the other nodes */
    if (held == 0)
        snprintf(ft->resume_from, sizeof(ft->resume_from), "%.3800s/%s", dir, name);
    mc_info("attempt %u resumes from sharded checkpoint %s (step %lld): %zu of its %u parts "
            "on this node",
            a->as.restart_count, name, (long long)a->as.resume_step, held, a->as.resume_parts);
}

void agent__ft_prepare(struct agent *a)
{
    struct agent_ft *ft = &a->ft;
    const struct rdzv_assign *as = &a->as;

    ft->resume_from[0] = '\0';
    if (ft->resume_parts != NULL)
        ft->resume_parts[0] = '\0';
    if (ft->ckpt_on) {
        agent_ckptwatch_set_recording(&ft->ckpt, as->group_rank == 0);
        if (as->resume[0] != '\0' && as->resume_parts > 0)
            prepare_parts(a);
        else if (as->resume[0] != '\0')
            snprintf(ft->resume_from, sizeof(ft->resume_from), "%.3800s/%s", a->o->ckpt.dir,
                     as->resume);
        if (as->resume_parts == 0)
            log_resume(a);
    }
    if (ft->hang_on)
        agent_hang_start(&ft->hang, as->restart_count);
    if (ft->ev_on)
        agent_evidence_attempt(&ft->ev, as->restart_count);
}

void agent__ft_worker_exited(struct agent *a, int local_rank)
{
    if (a->ft.hang_on)
        agent_hang_disarm(&a->ft.hang, local_rank);
}

void agent__ft_sync(struct agent *a, int clean)
{
    if (a->ft.ckpt_on)
        agent_ckptwatch_flush(&a->ft.ckpt, clean, NULL, NULL);
}

void agent__ft_close(struct agent *a)
{
    free(a->ft.resume_parts);
    a->ft.resume_parts = NULL;
    if (a->ft.repl_on)
        agent_replica_close(&a->ft.repl);
    a->ft.repl_on = 0;
    if (a->ft.hang_on)
        agent_hang_close(&a->ft.hang, NULL);
    if (a->ft.ckpt_on)
        agent_ckptwatch_close(&a->ft.ckpt, NULL); /* what was due is recorded before DONE */
    a->ft.ckpt_on = 0;
    if (a->ft.ev_on) {
        agent_evidence_close(&a->ft.ev);
        /* a private log directory goes at exit, unless it holds evidence now */
        if (a->ft.ev.kept && a->logdir.flat && agent_logdir_keep(&a->logdir) == 0)
            mc_info("evidence kept in %s/evidence", a->logdir.base);
    }
    a->ft.ev_on = 0;
}

/* ---- evidence before the kill ---------------------------------------------------------- */

static void evidence_sent(struct agent_evidence *e, void *data)
{
    struct agent *a = data;
    void (*done)(struct agent * a) = a->ft.ev_done;
    int sent = 0;

    a->ft.ev_done = NULL;
    for (int i = 0; i < e->n; i++) {
        int rc = a->client != NULL ? rdzv_client_send_evidence(a->client, &e->out[i]) : UV_ENOTCONN;
        if (rc == 0)
            sent++;
        else
            mc_debug("evidence of rank %d not sent: %s", e->out[i].rank, uv_strerror(rc));
    }
    if (e->written[0] != '\0')
        mc_info("evidence of %d rank%s in %s (%llu ms)", e->n, e->n == 1 ? "" : "s", e->written,
                (unsigned long long)e->took_ms);
    else
        mc_info("evidence of %d rank%s taken (%llu ms)%s", e->n, e->n == 1 ? "" : "s",
                (unsigned long long)e->took_ms, sent ? "; sent to the server" : "");
    for (int i = 0; i < e->n; i++) {
        const struct rdzv_evidence *r = &e->out[i];
        if (r->flags & RDZV_EV_HOOKED)
            mc_log_untrusted(MC_LOG_DEBUG, "evidence: rank %d: %s%s %s", r->rank,
                             r->op[0] ? "in " : "", r->op[0] ? r->op : "", r->where);
    }
    if (done != NULL)
        done(a);
}

int agent__ft_evidence(struct agent *a, const char *why, uint32_t req,
                       void (*done)(struct agent *a))
{
    struct agent_evidence_target *t;
    struct agent_group *g = a->group;
    int rc;

    if (!a->ft.ev_on || g == NULL || a->ft.ev.busy)
        return -EAGAIN;
    if ((t = calloc((size_t)g->n, sizeof(*t))) == NULL)
        return -ENOMEM;
    for (int i = 0; i < g->n; i++) {
        const struct agent_worker *w = &g->workers[i];
        t[i].rank = w->rank;
        t[i].local_rank = w->local_rank;
        t[i].pid = w->pid;
        t[i].alive = w->alive;
        t[i].exit_code = w->exit_status;
        t[i].term_signal = w->term_signal;
        t[i].silent_ms = a->ft.hang_on ? agent_hang_silent_ms(&a->ft.hang, i) : 0;
        for (int k = 0; k < 2; k++)
            agent_output_tail(&w->out[k], t[i].tail[k], sizeof(t[i].tail[k]));
    }
    a->ft.ev_done = done;
    rc = agent_evidence_collect(&a->ft.ev, t, g->n, a->as.restart_count, a->as.round, req, why,
                                evidence_sent, a);
    if (rc != 0)
        a->ft.ev_done = NULL;
    return rc;
}

/* The pick is off the loop (it re-hashes the candidates, and may put a last good copy back in
 * place): picks complete in the order they were asked, and only the last one asked counts (a
 * JOIN given up for another one, e.g. after a reconnect, must not send a stale candidate). */
static void on_picked(void *data, int rc, const struct agent_ckpt_entry *e)
{
    struct agent *a = data;
    struct agent_ft *ft = &a->ft;

    if (++ft->picks_done != ft->picks_asked || ft->pick_join == NULL)
        return;
    if (rc == 0 && rdzv_ckpt_name_ok(e->name)) { /* else the JOIN could not carry it */
        snprintf(ft->pick_join->resume, sizeof(ft->pick_join->resume), "%s", e->name);
        ft->pick_join->resume_step = e->step;
        ft->my_resume_step = e->step;
        agent_goodput_checkpoint(&a->gp, e->name, e->recorded_ns / 1000000);
    }
    ft->pick_join = NULL;
    ft->pick_done(a);
}

/* This node's candidate for where the next round resumes: only the one of the node that gets
 * group rank 0 is used. Workers are stopped here; the flush inside the pick records what
 * landed last. */
void agent__ft_pick_resume(struct agent *a, struct rdzv_join *j, void (*done)(struct agent *a))
{
    struct agent_ft *ft = &a->ft;

    j->resume[0] = '\0';
    j->resume_step = -1;
    ft->my_resume_step = -1;
    if (!ft->ckpt_on) {
        done(a);
        return;
    }
    ft->pick_join = j;
    ft->pick_done = done;
    ft->picks_asked++;
    agent_ckptwatch_pick(&ft->ckpt, on_picked, a);
}

static void on_flushed(void *data)
{
    struct agent *a = data;

    if (a->ft.flush_done != NULL) {
        void (*cb)(struct agent *) = a->ft.flush_done;
        a->ft.flush_done = NULL;
        cb(a);
    }
}

void agent__ft_flush(struct agent *a, int clean, void (*done)(struct agent *a))
{
    if (!a->ft.ckpt_on) {
        done(a);
        return;
    }
    a->ft.flush_done = done;
    agent_ckptwatch_flush(&a->ft.ckpt, clean, on_flushed, a);
}

static void ckpt_log(void *data, enum mc_log_level level, const char *line)
{
    (void)data;
    mc_log(level, "%s", line); /* escaped by ckptwatch */
}

static void report_ckpt(struct agent *a, const struct agent_ckpt_entry *e, const char *why)
{
    struct rdzv_ckpt ck = {.step = e->step,
                           .size = e->size,
                           .checksum = e->checksum,
                           .time_ms = (uint64_t)(e->recorded_ns / 1000000)};

    if (a->client == NULL || !a->ft.was_rank0 || !rdzv_ckpt_name_ok(e->name))
        return;
    snprintf(ck.name, sizeof(ck.name), "%s", e->name);
    if (why != NULL) {
        ck.verified_bad = 1;
        snprintf(ck.reason, sizeof(ck.reason), "%s", why);
    }
    rdzv_client_report_ckpt(a->client, &ck); /* for `muster status`: losing one is harmless */
}

void agent__goodput_report(struct agent *a)
{
    struct rdzv_goodput g;

    if (a->client == NULL)
        return;
    agent_goodput_get(&a->gp, &g);
    rdzv_client_report_goodput(a->client, &g); /* not connected: the next one says it all */
}

/* A checkpoint recorded: its time dates the work lost at a restart that resumes from it, and
 * one recorded while the workers run is a sign of their progress (goodput.h). */
static void goodput_ckpt(struct agent *a, const struct agent_ckpt_entry *e)
{
    agent_goodput_checkpoint(&a->gp, e->name, e->recorded_ns / 1000000);
    if (a->state == AGENT_S_RUNNING && agent_goodput_progress(&a->gp, e->recorded_ns / 1000000))
        agent__goodput_report(a);
}

/* This node's part of a sharded checkpoint (CKPT_PART): recorded, or none here (an empty part,
 * so the server can tell the checkpoint is complete without it); sent to the next nodes like
 * rank 0's whole ones. A part that is cut or unreadable is not reported: no round resumes from
 * that checkpoint. */
static void on_part(void *data, int rc, const struct agent_ckpt_entry *e)
{
    struct agent *a = data;
    struct rdzv_ckpt ck = {.step = e->step,
                           .part = e->part,
                           .parts = e->parts,
                           .time_ms = (uint64_t)time(NULL) * 1000};

    if (a->client == NULL || (rc != 0 && rc != -ENOENT) || !rdzv_ckpt_name_ok(e->name))
        return;
    snprintf(ck.name, sizeof(ck.name), "%s", e->name);
    if (rc == 0) {
        ck.size = e->size;
        ck.checksum = e->checksum;
        ck.time_ms = (uint64_t)(e->recorded_ns / 1000000);
    } else {
        ck.part_flags = RDZV_CKPT_PART_EMPTY;
    }
    rdzv_client_report_ckpt(a->client, &ck);
    if (rc == 0 && a->ft.repl_on && a->state == AGENT_S_RUNNING)
        agent_replica_offer(&a->ft.repl, e, a->as.round, a->as.group_rank, a->as.group_world_size);
}

static void on_ckpt_part(struct agent *a, const struct rdzv_ckpt_part *cp)
{
    if (!a->ft.ckpt_on || cp->round != a->as.round || cp->part != a->as.group_rank + 1 ||
        cp->parts != a->as.group_world_size)
        return; /* a round that ended meanwhile, or not this node's place */
    agent_ckptwatch_part(&a->ft.ckpt, cp->name, cp->part, cp->parts, on_part, a);
}

static void on_ckpt_recorded(void *data, const struct agent_ckpt_entry *e)
{
    struct agent *a = data;

    goodput_ckpt(a, e);
    report_ckpt(a, e, NULL);
    if (a->ft.repl_on && a->ft.was_rank0 && a->client != NULL)
        agent_replica_offer(&a->ft.repl, e, a->as.round, a->as.group_rank, a->as.group_world_size);
}

/* --- checkpoint replicas (docs/FAULT_TOLERANCE.md "Checkpoint replicas")
 * ------------------------------------------------------- */

static int repl_send(void *data, const struct rdzv_msg *m)
{
    struct agent *a = data;

    return a->client != NULL ? rdzv_client_send_repl(a->client, m) : -ENOTCONN;
}

/* The server shows where each copy lives: a CKPT naming this node as the holder. */
static void repl_stored(void *data, const struct agent_ckpt_entry *e)
{
    struct agent *a = data;
    struct rdzv_ckpt ck = {.step = e->step,
                           .size = e->size,
                           .checksum = e->checksum,
                           .time_ms = (uint64_t)(e->recorded_ns / 1000000)};

    if (a->client == NULL || !rdzv_ckpt_name_ok(agent_ckpt_part_of(e->name)))
        return;
    snprintf(ck.name, sizeof(ck.name), "%s", agent_ckpt_part_of(e->name));
    snprintf(ck.holder, sizeof(ck.holder), "%s", a->host[0] ? a->host : "?");
    ck.part = e->part;
    ck.parts = e->parts;
    rdzv_client_report_ckpt(a->client, &ck);
}

/* --keep-checkpoints pruned e: the server stops listing this node as holding a replica of it
 * (a CKPT with the holder and verified_bad; the server ignores it for a record this node wrote). */
static void on_ckpt_pruned(void *data, const struct agent_ckpt_entry *e)
{
    struct agent *a = data;
    struct rdzv_ckpt ck = {
        .step = e->step, .size = e->size, .checksum = e->checksum, .verified_bad = 1};

    if (a->client == NULL || !rdzv_ckpt_name_ok(agent_ckpt_part_of(e->name)))
        return;
    snprintf(ck.name, sizeof(ck.name), "%s", agent_ckpt_part_of(e->name));
    ck.part = e->part;
    ck.parts = e->parts;
    snprintf(ck.reason, sizeof(ck.reason), "pruned (--keep-checkpoints)");
    snprintf(ck.holder, sizeof(ck.holder), "%s", a->host[0] ? a->host : "?");
    rdzv_client_report_ckpt(a->client, &ck);
}

static void repl_log(void *data, enum mc_log_level level, const char *line)
{
    (void)data;
    mc_log(level, "%s", line); /* escaped by replica */
}

static const struct agent_replica_cbs repl_cbs = {
    .send = repl_send,
    .stored = repl_stored,
    .log = repl_log,
};

void agent__ft_repl_msg(struct agent *a, const struct rdzv_msg *m)
{
    struct rdzv_msg ack;

    if (m->type == RDZV_MSG_CKPT_PART) {
        on_ckpt_part(a, &m->u.ckpt_part);
        return;
    }
    if (a->ft.repl_on) {
        agent_replica_on_msg(&a->ft.repl, m);
        return;
    }
    if (m->type != RDZV_MSG_REPL_BEGIN || a->client == NULL)
        return;
    rdzv_msg_init(&ack, RDZV_MSG_REPL_ACK); /* refused at once: the sender moves on */
    ack.u.repl_ack.xfer = m->u.repl_begin.xfer;
    ack.u.repl_ack.status = RDZV_REPL_ABORT;
    snprintf(ack.u.repl_ack.text, sizeof(ack.u.repl_ack.text),
             "the receiving node has no --checkpoint-dir");
    rdzv_client_send_repl(a->client, &ack);
}

/* Parts reported again after an outage, at most this many of the registry's newest entries. */
#define REANNOUNCE_MAX 64

void agent__ft_reconnected(struct agent *a)
{
    const struct agent_ckpt_registry *reg = &a->ft.ckpt.reg;
    size_t sent = 0;

    if (!a->ft.ckpt_on || !a->ft.repl_on || a->o->ckpt.replicate == 0 || a->client == NULL ||
        a->as.group_world_size < 2)
        return;
    for (size_t i = 0; i < reg->n && sent < REANNOUNCE_MAX; i++) {
        const struct agent_ckpt_entry *e = &reg->entries[i];
        const char *name = agent_ckpt_part_of(e->name);
        /* a whole entry is the first part: rank 0's own, or a copy of it; as an explicit part,
         * so the server does not ask the other nodes to record theirs again */
        struct rdzv_ckpt ck = {.step = e->step,
                               .size = e->size,
                               .checksum = e->checksum,
                               .time_ms = (uint64_t)(e->recorded_ns / 1000000),
                               .part = e->part != 0 ? e->part : 1,
                               .parts = e->part != 0 ? e->parts : a->as.group_world_size};

        if (e->step < 0 || !rdzv_ckpt_name_ok(name))
            continue;
        snprintf(ck.name, sizeof(ck.name), "%s", name);
        if (name != e->name || (e->part == 0 && a->as.group_rank != 0)) /* a copy */
            snprintf(ck.holder, sizeof(ck.holder), "%s", a->host[0] ? a->host : "?");
        rdzv_client_report_ckpt(a->client, &ck);
        sent++;
    }
}

void agent__ft_disconnected(struct agent *a)
{
    if (a->ft.repl_on)
        agent_replica_reset(&a->ft.repl);
}

static void on_ckpt_bad(void *data, const struct agent_ckpt_entry *e, const char *why)
{
    report_ckpt(data, e, why);
}

static const struct agent_ckptwatch_cbs ckpt_cbs = {
    .log = ckpt_log,
    .recorded_cb = on_ckpt_recorded,
    .bad_cb = on_ckpt_bad,
    .pruned_cb = on_ckpt_pruned,
};

/* Where the workers' heartbeat files go: LOG_DIR/RUN_ID/heartbeats (checked like the log
 * directory), or with --log-dir /dev/null a fresh directory in $TMPDIR: mkdtemp, because a
 * predictable name there (it was muster-heartbeats-PID) can be planted by another user. */
static int heartbeat_dir(struct agent *a, char *dir, size_t len)
{
    char err[PATH_MAX + 256];
    int rc;

    if (a->logdir.base[0] != '\0') {
        rc = agent_path_fmt(dir, len, "%s/heartbeats", a->logdir.base);
        if (rc == 0)
            rc = mc_dir_open(dir, 0700, "heartbeat directory", NULL, NULL, err, sizeof(err));
        else
            snprintf(err, sizeof(err), "heartbeat directory in %s: %s", a->logdir.base,
                     strerror(-rc));
    } else {
        rc = agent_path_fmt(dir, len, "%s/muster-heartbeats-XXXXXX", mc_tmpdir());
        if (rc == 0 && mkdtemp(dir) == NULL)
            rc = -errno;
        snprintf(err, sizeof(err), "cannot create a heartbeat directory in %s: %s", mc_tmpdir(),
                 strerror(-rc));
    }
    if (rc != 0)
        mc_error("%s", err);
    return rc;
}

int agent__ft_start(struct agent *a, agent_hang_cb hang_cb)
{
    const struct agent_options *o = a->o;
    struct agent_ft *ft = &a->ft;
    char dir[PATH_MAX];
    int rc;

    if (o->ckpt.dir != NULL) {
        rc = agent_ckptwatch_init(&a->loop, &ft->ckpt, o->ckpt.dir, o->ckpt.keep, &ckpt_cbs, a);
        if (rc != 0)
            return rc; /* ckptwatch logged why */
        ft->ckpt_on = 1;
        agent_ckptwatch_configure(&ft->ckpt, o->ckpt.settle_ms, o->ckpt.marker);
        /* every node with a directory receives replicas; o->ckpt.replicate says how many it
         * sends when it holds group rank 0 */
        rc = agent_replica_init(&a->loop, &ft->repl, &ft->ckpt, o->ckpt.replicate,
                                o->ckpt.replicate_mbps, &repl_cbs, a);
        if (rc != 0)
            return rc;
        agent_replica_bind(&ft->repl, o->rdzv.local_addr, o->ckpt.replicate_port);
        agent_replica_parts(&ft->repl, o->ckpt.replicate > 0);
        ft->repl_on = 1;
        /* one node, or ranks fixed by the flags: this node's rank is known now */
        if (o->rdzv.max_nodes <= 1 && !o->static_ranks.on)
            agent_ckptwatch_set_recording(&ft->ckpt, 1);
        else if (o->static_ranks.on)
            agent_ckptwatch_set_recording(&ft->ckpt, o->static_ranks.node_rank == 0);
    }
    if (o->ckpt.hang_timeout_ms > 0) {
        if ((rc = heartbeat_dir(a, dir, sizeof(dir))) != 0)
            return rc;
        rc = agent_hang_init(&a->loop, &ft->hang, dir, (int)o->work.nproc, o->ckpt.hang_timeout_ms,
                             hang_cb, a);
        if (rc != 0) {
            mc_error("cannot watch heartbeat files in %s: %s", dir, strerror(-rc));
            return rc;
        }
        ft->hang_on = 1;
    }
    if (o->ckpt.evidence_timeout_ms > 0) {
        const char *bundle = NULL;
        char live[PATH_MAX];
        /* in the log directory, the private one too: a muster killed with SIGKILL leaves
         * nothing new in $TMPDIR (the sweep removes a private directory whole) */
        if (a->logdir.base[0] != '\0') {
            if ((rc = agent_path_fmt(dir, sizeof(dir), "%s/evidence", a->logdir.base)) != 0 ||
                (rc = agent_path_fmt(live, sizeof(live), "%s/evidence/.live", a->logdir.base)) != 0)
                return rc;
            bundle = dir;
        }
        rc = agent_evidence_init(&a->loop, &ft->ev, bundle != NULL ? live : NULL, bundle,
                                 o->ckpt.evidence_timeout_ms, a->host);
        if (rc != 0)
            return rc;
        ft->ev_on = 1;
    }
    return 0;
}
