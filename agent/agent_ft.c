/* The agent's fault tolerance: the checkpoint registry (resume point, records reported to the
 * server) and hang detection, glued to the agent's state. */
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
#include "path.h"
#include "safefile.h"

/* Before an attempt: MUSTER_RESUME_FROM is the checkpoint the node of group rank 0 chose (the
 * server copies its JOIN's pick into every ASSIGN), so every node resumes from the same one;
 * that node records new checkpoints from now on. Fresh heartbeat files. */
void agent_ft_prepare_(struct agent *a)
{
    const struct rdzv_assign *as = &a->as;
    char shown[MC_ESCAPE_SIZE(sizeof(a->resume_from))];
    struct stat st;

    a->resume_from[0] = '\0';
    if (a->ckpt_on) {
        agent_ckptwatch_set_recording(&a->ckpt, as->group_rank == 0);
        if (as->resume[0] != '\0')
            snprintf(a->resume_from, sizeof(a->resume_from), "%.3800s/%s", a->o->checkpoint_dir,
                     as->resume);
        /* the name is the node of group rank 0's, through the server: escaped when shown */
        mc_escape(a->resume_from, shown, sizeof(shown));
        if (a->resume_from[0] != '\0')
            agent_log("attempt %u resumes from %s", as->restart_count, shown);
        else if (as->restart_count > 0 || a->my_resume_step >= 0)
            agent_log("attempt %u starts from scratch: no checkpoint verifies on the node of "
                      "group rank 0",
                      as->restart_count);
        if (a->resume_from[0] != '\0' && stat(a->resume_from, &st) != 0)
            agent_log("warning: %s is not on this node; its workers cannot read it (share "
                      "--checkpoint-dir between nodes, or load on rank 0 and broadcast)",
                      shown);
        if (a->my_resume_step > as->resume_step)
            agent_log("warning: this node has a newer verified checkpoint (step %lld) than the "
                      "node of group rank 0 can reach; resuming from step %lld instead",
                      (long long)a->my_resume_step, (long long)as->resume_step);
    }
    if (a->hang_on)
        agent_hang_start(&a->hang, as->restart_count);
}

/* This node's candidate for where the next round resumes: only the one of the node that gets
 * group rank 0 is used. Workers are stopped here, so the last checkpoint has landed. */
void agent_ft_pick_resume_(struct agent *a, struct rdzv_join *j)
{
    struct agent_ckpt_entry e;

    j->resume[0] = '\0';
    j->resume_step = -1;
    a->my_resume_step = -1;
    if (!a->ckpt_on)
        return;
    agent_ckptwatch_sync(&a->ckpt);
    if (agent_ckptwatch_pick(&a->ckpt, &e) != 0)
        return;
    snprintf(j->resume, sizeof(j->resume), "%s", e.name);
    j->resume_step = e.step;
    a->my_resume_step = e.step;
}

static void on_hang(struct agent_hang *h, int local_rank, uint64_t silent_ms)
{
    struct agent *a = h->data;
    struct agent_worker *w;
    struct rdzv_failure f;

    if (a->group == NULL || local_rank >= a->group->n)
        return;
    w = &a->group->workers[local_rank];
    if (!w->alive || a->round_failed || a->stop_signal || a->next != NEXT_NONE || a->finished)
        return;
    /* a hung worker gets no grace: it cannot checkpoint, and a SIGSTOPped one would ignore
     * SIGTERM until the shutdown timeout */
    agent_worker_kill(w, SIGKILL);
    agent_fill_failure_(a, w, &f);
    f.exit_code = -1;
    f.time_ms = (uint64_t)time(NULL) * 1000;
    snprintf(f.text, sizeof(f.text), "hung: no heartbeat for %.1f s (--hang-timeout %.1f s)",
             silent_ms / 1000.0, a->o->hang_timeout_ms / 1000.0);
    agent_local_failure_(a, &f, w->pid);
}

static void ckpt_log(void *data, const char *line)
{
    (void)data;
    agent_log("%s", line);
}

static void report_ckpt(struct agent *a, const struct agent_ckpt_entry *e, const char *why)
{
    struct rdzv_ckpt ck = {.step = e->step,
                           .size = e->size,
                           .checksum = e->checksum,
                           .time_ms = (uint64_t)(e->recorded_ns / 1000000)};

    if (a->client == NULL || !a->was_rank0 || !rdzv_ckpt_name_ok(e->name))
        return;
    snprintf(ck.name, sizeof(ck.name), "%s", e->name);
    if (why != NULL) {
        ck.verified_bad = 1;
        snprintf(ck.reason, sizeof(ck.reason), "%s", why);
    }
    rdzv_client_report_ckpt(a->client, &ck); /* for `muster status`: losing one is harmless */
}

static void on_ckpt_recorded(void *data, const struct agent_ckpt_entry *e)
{
    report_ckpt(data, e, NULL);
}

static void on_ckpt_bad(void *data, const struct agent_ckpt_entry *e, const char *why)
{
    report_ckpt(data, e, why);
}

static const struct agent_ckptwatch_cbs ckpt_cbs = {
    .log = ckpt_log,
    .recorded_cb = on_ckpt_recorded,
    .bad_cb = on_ckpt_bad,
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
        agent_log("error: %s", err);
    return rc;
}

int agent_ft_start_(struct agent *a)
{
    const struct agent_options *o = a->o;
    char dir[PATH_MAX];
    int rc;

    if (o->checkpoint_dir != NULL) {
        rc = agent_ckptwatch_init(&a->loop, &a->ckpt, o->checkpoint_dir, o->keep_checkpoints,
                                  &ckpt_cbs, a);
        if (rc != 0)
            return rc; /* ckptwatch logged why */
        a->ckpt_on = 1;
        /* one node, or ranks fixed by the flags: this node's rank is known now */
        if (o->max_nodes <= 1 && !o->static_ranks)
            agent_ckptwatch_set_recording(&a->ckpt, 1);
        else if (o->static_ranks)
            agent_ckptwatch_set_recording(&a->ckpt, o->static_node_rank == 0);
    }
    if (o->hang_timeout_ms > 0) {
        if ((rc = heartbeat_dir(a, dir, sizeof(dir))) != 0)
            return rc;
        rc =
            agent_hang_init(&a->loop, &a->hang, dir, (int)o->nproc, o->hang_timeout_ms, on_hang, a);
        if (rc != 0) {
            agent_log("error: cannot watch heartbeat files in %s: %s", dir, strerror(-rc));
            return rc;
        }
        a->hang_on = 1;
    }
    return 0;
}
