/* The agent's driver of its state machine (machine.h). Everything is an event on one loop:
 * rendezvous messages, worker exits (the group's SIGCHLD watcher reaps its own pids), signals
 * and timers; each handler turns its event into one transition() and carries out the actions
 * the machine returns. There is no polling interval anywhere, which is what makes a restart
 * take milliseconds. */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <mbedtls/platform_util.h>

#include "agent_priv.h"
#include "cred.h"
#include "clock.h"
#include "escape.h"
#include "failure.h"
#include "log.h"
#include "output.h"
#include "path.h"
#include "port.h"
#include "proctree.h"
#include "safefile.h"
#include "tls.h"

/* The job's log (logfwd.h): LOG batches over the agent's connection, when there is one. */
static int logfwd_send(void *ctx, const struct rdzv_msg *m)
{
    struct agent *a = ctx;

    return a->client != NULL ? rdzv_client_send_log(a->client, m) : UV_ENOTCONN;
}

static size_t logfwd_unsent(void *ctx)
{
    struct agent *a = ctx;

    return a->client != NULL ? rdzv_client_unsent(a->client) : 0;
}

/* GPU telemetry (telemetry.h): TELEMETRY over the agent's connection; the running workers. */
static int telem_send(void *ctx, const struct rdzv_msg *m)
{
    struct agent *a = ctx;

    return a->client != NULL ? rdzv_client_send_telemetry(a->client, m) : UV_ENOTCONN;
}

static int telem_workers(void *ctx, struct agent_telem_worker *w, int cap)
{
    struct agent *a = ctx;
    int n = 0;

    if (a->state != AGENT_S_RUNNING || a->group == NULL)
        return 0;
    for (int i = 0; i < a->group->n && n < cap; i++)
        if (a->group->workers[i].alive)
            w[n++] = (struct agent_telem_worker){.pid = a->group->workers[i].pid,
                                                 .rank = a->group->workers[i].rank,
                                                 .local_rank = a->group->workers[i].local_rank,
                                                 .gpu = AGENT_TELEM_GPU_OWN};
    return n;
}

static void agent__logfwd_flush(struct agent *a)
{
    if (a->logfwd != NULL)
        agent_logfwd_flush(a->logfwd);
}

static const int handled_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
#define NSIGNALS ((int)(sizeof(handled_signals) / sizeof(handled_signals[0])))
#define NSIGHANDLES AGENT_NSIGHANDLES
_Static_assert(NSIGNALS + 1 + 32 == AGENT_NSIGHANDLES,
               "one spare handle for --preempt-signal, 32 for --signals-to-handle");

static void transition(struct agent *a, const struct agent_event *ev);

static struct agent_machine_ctx machine_ctx(const struct agent *a)
{
    const struct agent_options *o = a->o;
    return (struct agent_machine_ctx){
        .have_procs = a->group != NULL,
        .stop_signal = a->stop_signal,
        .preempt_signal = o->restart.preempt_signal,
        /* round 0: every node together; a node whose first round is a later one (it joined a
         * running job or replaces a lost node) checks itself before its workers start */
        .preflight_due = o->pf.on && !a->pf.ran,
        .preflight_only = o->pf.only,
        .preflight_failed = a->pf.code != 0,
        .preflight_alone = a->pf.joined,
        .health_due = agent__health_due(a),
        .health_failed = a->health.failed,
    };
}

/* Whether an event of this kind would change anything now: asked before work that only an
 * accepted event should do (killing a hung worker, recording a failure, logging). */
static int accepts(const struct agent *a, enum agent_event_kind kind)
{
    struct agent_event ev = {.kind = kind};
    struct agent_machine_ctx c = machine_ctx(a);
    return !agent_machine_next(a->state, &ev, &c).ignored;
}

static void fire(struct agent *a, enum agent_event_kind kind, int code)
{
    struct agent_event ev = {.kind = kind, .code = code};
    transition(a, &ev);
}

/* ---- actions ---------------------------------------------------------------------- */

static void close_handle_cb(uv_handle_t *h)
{
    (void)h;
}

static void after_group_closed(void *data)
{
    (void)data;
}

static void print_job_failed(struct agent *a)
{
    const struct rdzv_failure *f = &a->job_failed.cause;
    int ours =
        a->have_local_failure && f->rank == a->local_failure.rank && strcmp(f->host, a->host) == 0;
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);

    /* into memory, then behind the workers' last lines: stderr's stdio would block the loop
     * on a stalled console, and could overtake lines still queued */
    if (mem == NULL)
        return;
    agent_failure_print_summary(mem, a->o->run_id, a->job_failed.restarts, f,
                                ours ? a->local_error_file : NULL);
    if (f->flags & RDZV_FAILURE_NOT_RETRYABLE)
        agent_failure_print_not_retryable(mem, f, a->o->restart.max_same_failure);
    if (agent_output_missing_module() != NULL) /* the wrong interpreter, most likely */
        fprintf(mem,
                "muster:   hint       : the workers printed \"No module named '%s'\": %s does "
                "not have it; set PYTHON_EXEC to the Python that does\n",
                agent_output_missing_module(), a->o->work.argv[0]);
    if (fclose(mem) == 0)
        agent_output_console_write(STDERR_FILENO, text, len);
    free(text);
}

/* The goodput table (goodput.h), into memory then behind the workers' last lines like the
 * failure summary; not for a run that never started a worker (a usage error, --preflight-only),
 * nor under --quiet. */
static void print_goodput(struct agent *a)
{
    struct rdzv_goodput g;
    char *text = NULL;
    size_t len = 0;
    FILE *mem;

    agent_goodput_get(&a->gp, &g);
    if (g.phase_ms[RDZV_GP_STARTUP] + g.phase_ms[RDZV_GP_TRAINING] == 0 ||
        !mc_log_enabled(MC_LOG_INFO) || (mem = open_memstream(&text, &len)) == NULL)
        return;
    agent_goodput_print(mem, &g);
    if (fclose(mem) == 0)
        agent_output_console_write(STDERR_FILENO, text, len);
    free(text);
}

/* Closes every handle: the loop ends once they are closed. */
static void finish_now(struct agent *a)
{
    if (a->finished)
        return;
    a->finished = 1;
    if (a->have_job_failed && !a->stop_signal)
        print_job_failed(a);
    agent_goodput_state(&a->gp, AGENT_S_FINISHED);
    agent__goodput_report(a); /* the job's final figures */
    print_goodput(a);
    agent__logfwd_flush(a);
    agent_logfwd_close(a->logfwd);
    a->logfwd = NULL;
    agent_telem_close(a->telem);
    a->telem = NULL;
    rdzv_client_close(a->client, NULL, NULL);
    a->client = NULL;
    rdzv_server_close(a->server, NULL, NULL);
    a->server = NULL;
    if (a->http_cred[0] != '\0')
        (void)unlink(a->http_cred);
    a->http_cred[0] = '\0';
    agent__store_stop(a);
    for (int i = 0; i < NSIGHANDLES; i++)
        uv_close((uv_handle_t *)&a->sig[i], close_handle_cb);
    uv_close((uv_handle_t *)&a->health.timer, close_handle_cb);
    agent_progress_close(&a->progress, close_handle_cb);
    agent__ft_close(a);
    if (a->group != NULL) {
        agent_group_close(a->group, after_group_closed, a); /* kills what is left */
        a->group = NULL;
    }
}

/* The checkpoint the workers wrote last (a pre-emption's, the final one) is recorded before
 * the watcher closes: the flush runs off the loop, the handles close after it. */
static void finish(struct agent *a)
{
    if (a->finish_asked)
        return;
    a->finish_asked = 1;
    agent__ft_flush(a, !a->attempt_unclean, finish_now);
}

static void join_send(struct agent *a);

static void join_picked(struct agent *a)
{
    if (a->state == a->join_state)
        join_send(a); /* else a signal or the server moved on while the pick ran */
}

static void join(struct agent *a)
{
    const struct agent_options *o = a->o;
    const struct agent_rdzv_opts *r = &o->rdzv;
    struct rdzv_join j = {.min_nodes = r->min_nodes,
                          .max_nodes = r->max_nodes,
                          .nproc = o->work.nproc,
                          .master_port = r->master_port,
                          .max_restarts = o->restart.max_restarts,
                          .backoff_min_ms = o->restart.backoff_min_ms,
                          .backoff_max_ms = o->restart.backoff_max_ms,
                          .exclude_after = o->restart.exclude_after,
                          .exclude_window_ms = o->restart.exclude_window_ms,
                          .flags =
                              (o->restart.spare ? RDZV_JOIN_SPARE : 0) |
                              (o->ckpt.dir != NULL && o->ckpt.replicate > 0 ? RDZV_JOIN_PARTS : 0),
                          /* the default is sent as nothing: older servers take that JOIN */
                          .same_failure = o->restart.max_same_failure == RDZV_SAME_FAILURE_DEFAULT
                                              ? 0
                                              : o->restart.max_same_failure + 1,
                          .stragglers = o->restart.exclude_stragglers,
                          .last_call_ms = r->last_call_ms,
                          .join_timeout_ms = r->join_timeout_ms,
                          .keep_alive_ms = r->keep_alive_ms,
                          .heartbeat_timeout_ms = r->heartbeat_timeout_ms,
                          .reconnect_grace_ms = r->reconnect_grace_ms,
                          .node_id = a->node_id,
                          .want_rank = r->want_rank};
    int rc;

    snprintf(j.job_id, sizeof(j.job_id), "%s", o->run_id);
    snprintf(j.host, sizeof(j.host), "%s", a->host);
    snprintf(j.addr, sizeof(j.addr), "%s", r->local_addr ? r->local_addr : "");
    if (j.master_port == 0) {
        if ((rc = agent_port_reserve(&a->port_fd, &a->port)) != 0) {
            mc_error("cannot find a free port for MASTER_PORT: %s", strerror(-rc));
            fire(a, AGENT_EV_FATAL, AGENT_EXIT_INTERNAL);
            return;
        }
        j.master_port = a->port;
    }
    memcpy(j.node_secret, a->node_secret, sizeof(j.node_secret));
    a->join_msg = j;
    a->join_state = a->state;
    agent__ft_pick_resume(a, &a->join_msg, join_picked);
}

static void join_send(struct agent *a)
{
    const struct agent_options *o = a->o;
    const struct agent_rdzv_opts *r = &o->rdzv;
    int rc = a->client == NULL ? -ENOTCONN : rdzv_client_join(a->client, &a->join_msg);

    if (rc != 0) {
        mc_error("cannot join the rendezvous at %s:%u", r->host, r->port);
        fire(a, AGENT_EV_FATAL, AGENT_EXIT_RDZV);
    } else if (o->restart.spare && !a->spare_said) {
        /* later JOINs of a spare that took a place are a member's (the server knows it) */
        a->spare_said = 1;
        mc_info("joining job %s as a spare: waiting to replace a lost or excluded node", o->run_id);
        if (o->restart.max_restarts == 0) /* the job's own value is its first JOIN's */
            mc_warn("--max-restarts 0: a lost node ends the job, so a spare is never used "
                    "(replacing a node is a restart)");
    }
}

static const struct agent_group_cbs group_cbs;

static void start_workers(struct agent *a)
{
    int rc, failed = 0;

    if ((rc = agent__store_start(a)) != 0) {
        /* a busy --master-port is the operator's to fix, like a bad flag (said) */
        fire(a, AGENT_EV_FATAL, rc == UV_EADDRINUSE ? AGENT_EXIT_USAGE : AGENT_EXIT_INTERNAL);
        return;
    }
    if ((rc = agent_group_new(&a->loop, (int)a->o->work.nproc, &group_cbs, a, &a->group)) != 0) {
        mc_error("%s", strerror(-rc));
        fire(a, AGENT_EV_FATAL, AGENT_EXIT_INTERNAL);
        return;
    }
    if (a->logfwd != NULL && agent_logfwd_reset(a->logfwd, (int)a->o->work.nproc) != 0)
        mc_warn("the workers' lines are not forwarded to the server this attempt: out of memory");
    agent_telem_attempt(a->telem, uv_now(&a->loop));
    a->have_local_failure = 0;
    a->attempt_unclean = 0;
    a->health.done = 0; /* this attempt's failures are checked before the next round */
    agent__ft_prepare(a);
    for (unsigned i = 0; i < a->o->work.nproc; i++) {
        if ((rc = agent__spawn_one(a, (int)i)) != 0) {
            struct rdzv_failure f;
            agent__spawn_failure(a, (int)i, rc, &f);
            a->local_failure = f;
            a->local_failure_pid = 0;
            fire(a, AGENT_EV_WORKER_FAILED, 0);
            failed = 1;
            break;
        }
    }
    if (failed && a->group != NULL && a->group->alive == 0)
        group_cbs.all_exited_cb(a->group); /* nothing runs: no exit will come to move on */
}

static void preflight_done(struct agent *a);

static void start_preflight(struct agent *a)
{
    int rc;

    a->pf.ran = 1;
    a->have_local_failure = 0;
    if ((rc = agent__preflight_start(a, preflight_done)) != 0) {
        mc_error("%s", strerror(-rc));
        fire(a, AGENT_EV_FATAL, AGENT_EXIT_INTERNAL);
    }
}

static void health_done(struct agent *a);

static void start_health(struct agent *a)
{
    int rc;

    if ((rc = agent__health_start(a, health_done)) != 0) {
        mc_error("cannot start the health check: %s", strerror(-rc));
        fire(a, AGENT_EV_FATAL, AGENT_EXIT_INTERNAL);
    }
}

/* Why a restart round's JOIN comes without a health check, on a node whose ranks failed: said
 * at debug level (a CPU job has nothing to check). */
static void note_no_health(const struct agent *a)
{
    if (!a->have_local_failure || a->health.done || a->o->pf.only)
        return;
    if (a->o->health.mode == AGENT_HEALTH_OFF)
        mc_debug("health check off (--health-check off): rejoining without it");
    else if (a->o->health.ngpus == 0)
        mc_debug("health check skipped: no GPU on this node (CPU job)");
}

static void log_local_failure(const struct agent *a)
{
    const struct rdzv_failure *f = &a->local_failure;
    char how[RDZV_TEXT_MAX + 64], sig[MC_ESCAPE_SIZE(RDZV_SIG_MAX) + 32];

    agent_failure_describe(f, how, sizeof(how));
    /* the signature where it says more than `how` (a signal's, a hang's, a bare code's does
     * not); escaped: it comes from the worker's own output */
    sig[0] = '\0';
    if (f->sig_class == RDZV_SIG_SCRIPT || f->sig_class == RDZV_SIG_OOM ||
        f->sig_class == RDZV_SIG_NETWORK) {
        size_t n = (size_t)snprintf(sig, sizeof(sig), " [%s: ", rdzv_sig_class_name(f->sig_class));
        mc_escape(f->sig, sig + n, sizeof(sig) - n - 1);
        strcat(sig, "]");
    }
    if (a->local_failure_pid > 0)
        mc_info("worker rank %d (local_rank %d, pid %d) %s%s; stopping the other workers", f->rank,
                f->local_rank, a->local_failure_pid, how, sig);
    else
        mc_info("worker rank %d (local_rank %d) could not start: %s; stopping the other workers",
                f->rank, f->local_rank, f->text);
}

/* FAILED with a->local_failure, which from now on is this attempt's (the job's summary names
 * its error file when the server's cause is this one). */
static void report_failure(struct agent *a, int final, int code_if_lost)
{
    a->have_local_failure = 1;
    agent__logfwd_flush(a); /* the failing rank's last lines first */
    if (rdzv_client_report_failure(a->client, &a->local_failure, final) != 0)
        fire(a, AGENT_EV_REPORT_FAILED, code_if_lost);
}

static void report_signal(struct agent *a, int signum)
{
    struct rdzv_failure f = {.round = a->as.round, .rank = -1, .exit_code = -1};

    if (a->client == NULL)
        return;
    snprintf(f.host, sizeof(f.host), "%s", a->host);
    snprintf(f.text, sizeof(f.text), "agent on %s stopped by SIG%s", a->host, sigabbrev_np(signum));
    f.sig_class = RDZV_SIG_SIGNAL;
    snprintf(f.sig, sizeof(f.sig), "agent stopped by SIG%s", sigabbrev_np(signum));
    rdzv_client_report_failure(a->client, &f, 1);
}

static void report_done_now(void *data)
{
    struct agent *a = data;

    if (a->state != a->done_state || a->client == NULL)
        return;             /* something else happened meanwhile (a signal, the server gone) */
    agent__logfwd_flush(a); /* the last lines before the job may end */
    if (rdzv_client_report_done(a->client, a->as.round) != 0)
        fire(a, AGENT_EV_FATAL, AGENT_EXIT_RDZV);
}

/* The job's last checkpoint is recorded, and reaches its replicas, before this node says it is
 * done: the job ends, and the agents receiving it stop, once every node said so. */
static void report_done_recorded(struct agent *a)
{
    if (a->state != a->done_state)
        return;
    if (a->ft.repl_on &&
        agent_replica_drain(&a->ft.repl, AGENT_DONE_DRAIN_MS, report_done_now, a)) {
        mc_info("waiting for the replicas of checkpoint %s (at most %d s) before the job ends",
                a->ft.repl.cur.name, AGENT_DONE_DRAIN_MS / 1000);
        return;
    }
    report_done_now(a);
}

static void report_done(struct agent *a)
{
    a->done_state = a->state;
    agent__ft_flush(a, 1, report_done_recorded); /* every worker exited 0 */
}

static void report_pf_failure(struct agent *a)
{
    agent__preflight_failure(a, &a->local_failure);
    if (a->pf.joined) {
        /* a joining node leaves: not a final failure of the job that ran fine without it */
        a->local_failure.flags &= ~RDZV_FAILURE_FINAL;
        mc_error("this node failed its pre-flight on joining the running job; it leaves the job, "
                 "which goes on without it");
        if (a->client != NULL)
            rdzv_client_report_failure(a->client, &a->local_failure, 1);
        return;
    }
    report_failure(a, 0, AGENT_EXIT_PREFLIGHT);
}

/* A failed health check: the node leaves before the round (LEAVE, not final), so that the
 * server fills the round with a spare, or without it (docs/PREFLIGHT.md). */
static void report_health_failure(struct agent *a)
{
    agent__health_failure(a, &a->local_failure);
    mc_error("%s; this node leaves the job (exit %d): a spare takes its place, or the round goes "
             "on without it where --nnodes allows",
             a->local_failure.text, AGENT_EXIT_PREFLIGHT);
    if (a->client != NULL)
        rdzv_client_report_failure(a->client, &a->local_failure, 1);
}

/* Carries out st's actions for ev, in the order of the bits (machine.h). An action that
 * fires an event of its own (a spawn failing, a report that cannot be sent) ends the list:
 * the nested transition has decided what follows. */
static void perform(struct agent *a, const struct agent_event *ev, const struct agent_step *st)
{
    int sig = ev->kind == AGENT_EV_SIGNAL ? ev->signum : SIGTERM;
    unsigned acts = st->actions;

    for (unsigned bit = 1; acts != 0 && a->state == st->state; bit <<= 1) {
        if (!(acts & bit))
            continue;
        acts &= ~bit;
        switch ((enum agent_action)bit) {
        case AGENT_ACT_JOIN:
            note_no_health(a);
            join(a);
            break;
        case AGENT_ACT_START_PREFLIGHT:
            start_preflight(a);
            break;
        case AGENT_ACT_START_HEALTH:
            start_health(a);
            break;
        case AGENT_ACT_REPORT_HEALTH_FAILURE:
            report_health_failure(a);
            break;
        case AGENT_ACT_START_WORKERS:
            start_workers(a);
            break;
        case AGENT_ACT_REPORT_SIGNAL:
            report_signal(a, sig);
            break;
        case AGENT_ACT_STOP_WORKERS:
            if (st->actions & AGENT_ACT_REPORT_FAILURE)
                log_local_failure(a); /* said before the others' SIGTERM goes out */
            agent_group_stop(a->group, sig, a->o->restart.shutdown_timeout_ms);
            break;
        case AGENT_ACT_KILL_WORKERS:
            agent_group_stop(a->group, SIGKILL, 0);
            break;
        case AGENT_ACT_REPORT_FAILURE:
            report_failure(a, 0, AGENT_EXIT_RDZV);
            break;
        case AGENT_ACT_REPORT_PF_FAILURE:
            report_pf_failure(a);
            break;
        case AGENT_ACT_REPORT_DONE:
            report_done(a);
            break;
        case AGENT_ACT_FINISH:
            finish(a);
            break;
        }
    }
}

/* The one place a->state changes. */
static void transition(struct agent *a, const struct agent_event *ev)
{
    struct agent_machine_ctx c = machine_ctx(a);
    struct agent_step st = agent_machine_next(a->state, ev, &c);

    if (st.ignored)
        return;
    int changed = st.state != a->state;

    if (changed)
        mc_debug("agent: %s -> %s", agent_state_name(a->state), agent_state_name(st.state));
    a->state = st.state;
    if (changed && st.state != AGENT_S_FINISHED) {
        /* a few per round: the server's figures stay as fresh as its phases (finish_now sends
         * the last one) */
        agent_goodput_state(&a->gp, st.state);
        agent__goodput_report(a);
    }
    if (st.set_exit_code)
        a->exit_code = st.exit_code;
    if (ev->kind == AGENT_EV_SIGNAL && a->stop_signal == 0)
        a->stop_signal = ev->signum;
    perform(a, ev, &st);
}

/* ---- the workers' events ------------------------------------------------------------ */

static void on_all_exited(struct agent_group *g);

/* The evidence of a local failure or hang is in (and with the server): now the failure is
 * reported and the other workers stop, as they would have at once without evidence. */
static void evidence_failed(struct agent *a)
{
    struct agent_group *exited = a->ev_all_exited;

    a->ev_failing = 0;
    a->ev_all_exited = NULL;
    if (a->ev_hung > 0 && a->group != NULL && a->group->workers[a->ev_hung - 1].alive)
        agent_worker_kill(&a->group->workers[a->ev_hung - 1], SIGKILL);
    a->ev_hung = 0;
    if (a->state == AGENT_S_RUNNING) {
        a->local_failure.flags |= RDZV_FAILURE_EVIDENCE;
        fire(a, AGENT_EV_WORKER_FAILED, 0);
    }
    if (exited != NULL)
        on_all_exited(exited);
}

/* Evidence first where there is anyone left to take it from; then evidence_failed. Returns 1
 * when it was started. */
static int evidence_first(struct agent *a, const char *why)
{
    if (agent__ft_evidence(a, why, 0, evidence_failed) != 0)
        return 0;
    a->ev_failing = 1;
    mc_info("worker rank %d %s: taking every rank's evidence before the workers stop (at most "
            "%.1f s, --evidence-timeout)",
            a->local_failure.rank, strcmp(why, "a hang") == 0 ? "hung" : "failed",
            a->o->ckpt.evidence_timeout_ms / 1000.0);
    return 1;
}

static void on_worker_exit(struct agent_group *g, struct agent_worker *w)
{
    struct agent *a = g->data;

    agent__ft_worker_exited(a, w->local_rank);
    if (w->exit_status == 0 && w->term_signal == 0)
        return;
    a->attempt_unclean = 1; /* a checkpoint it wrote in place may be cut */
    if (!accepts(a, AGENT_EV_WORKER_FAILED) || a->ev_failing)
        return; /* already stopping: a worker dying of our SIGTERM is no new failure */
    agent__fill_failure(a, w, &a->local_failure);
    a->local_failure_pid = w->pid;
    if (g->alive > 0 && evidence_first(a, "a worker failed"))
        return;
    fire(a, AGENT_EV_WORKER_FAILED, 0);
}

/* Every worker of the attempt is gone: act on what the server (or a signal) decided. */
static void on_all_exited(struct agent_group *g)
{
    struct agent *a = g->data;

    if (a->ev_failing) { /* the failure is reported first, when the evidence is in */
        a->ev_all_exited = g;
        return;
    }
    agent__health_note_pids(a, g); /* before the close: the check waits for their GPU memory */
    agent_group_close(g, after_group_closed, a);
    a->group = NULL;
    agent__ft_sync(a, !a->attempt_unclean); /* a final checkpoint may have landed just now */
    if (a->port_fd >= 0) {
        close(a->port_fd);
        a->port_fd = -1;
    }
    fire(a, AGENT_EV_ALL_EXITED, 0);
}

/* Output: progress for hang detection (hang.h, any stream); a line on a worker's stdout is the
 * end of the attempt's start-up (goodput.h; on stderr come the framework's warnings, which an
 * import prints before any training). */
static void on_worker_output(struct agent_group *g, struct agent_worker *w, int stream)
{
    struct agent *a = g->data;

    if (a->ft.hang_on)
        agent_hang_progress(&a->ft.hang, w->local_rank);
    if (stream == 0 && a->state == AGENT_S_RUNNING && agent_goodput_progress(&a->gp, mc_wall_ms()))
        agent__goodput_report(a);
}

/* The job's one log (logfwd.h): every line of every rank to the server. */
static void on_worker_data(struct agent_group *g, struct agent_worker *w, int stream,
                           const char *data, size_t n)
{
    struct agent *a = g->data;

    if (a->logfwd != NULL)
        agent_logfwd_feed(a->logfwd, w->local_rank, w->rank, stream, data, n, uv_now(&a->loop),
                          mc_wall_ms());
}

static const struct agent_group_cbs group_cbs = {
    .exit_cb = on_worker_exit,
    .all_exited_cb = on_all_exited,
    .output_cb = on_worker_output,
    .data_cb = on_worker_data,
};

/* The health check's group is closed already (health.c); a->health.failed says how it went. */
static void health_done(struct agent *a)
{
    fire(a, AGENT_EV_ALL_EXITED, 0);
}

/* The pre-flight's group is closed already (preflight.c); a->pf.code says how it went. */
static void preflight_done(struct agent *a)
{
    fire(a, AGENT_EV_ALL_EXITED, 0);
}

/* A worker silent past --hang-timeout (or, without heartbeats, the whole node: hang.h). A hung
 * worker gets no grace: it cannot checkpoint, and a SIGSTOPped one would ignore SIGTERM until
 * the shutdown timeout. Its evidence (and its node's) is taken before the kill. */
static void on_hang(struct agent_hang *h, int local_rank, uint64_t silent_ms)
{
    struct agent *a = h->data;
    struct agent_worker *w;
    struct rdzv_failure *f = &a->local_failure;

    if (a->group == NULL || local_rank >= a->group->n)
        return;
    w = &a->group->workers[local_rank];
    if (!w->alive || !accepts(a, AGENT_EV_WORKER_FAILED) || a->ev_failing)
        return;
    agent__fill_failure(a, w, f);
    f->exit_code = -1;
    f->time_ms = (uint64_t)time(NULL) * 1000;
    if (h->last_touch[local_rank] != 0)
        snprintf(f->text, sizeof(f->text), "hung: no heartbeat for %.1f s (--hang-timeout %.1f s)",
                 silent_ms / 1000.0, a->o->ckpt.hang_timeout_ms / 1000.0);
    else
        snprintf(f->text, sizeof(f->text),
                 "hung: no progress (output, CPU time) on this node for %.1f s (--hang-timeout "
                 "%.1f s)",
                 silent_ms / 1000.0, a->o->ckpt.hang_timeout_ms / 1000.0);
    f->sig_class = RDZV_SIG_HANG; /* our own SIGKILL: not the script's failure, not outside's */
    snprintf(f->sig, sizeof(f->sig), "hang");
    a->local_failure_pid = w->pid;
    if (evidence_first(a, "a hang")) {
        a->ev_hung = local_rank + 1;
        return;
    }
    agent_worker_kill(w, SIGKILL);
    fire(a, AGENT_EV_WORKER_FAILED, 0);
}

/* ---- rendezvous events -------------------------------------------------------------- */

static void on_waiting(struct rdzv_client *c, const struct rdzv_waiting *w)
{
    struct agent *a = rdzv_client_data(c);

    if (a->o->rdzv.max_nodes > 1 && a->state != AGENT_S_FINISHED)
        agent_progress_update(&a->progress, w);
}

/* The workers' credential admits them to this job's KV store only (rendezvous/cred.h); the key
 * is not kept in a->as, which lives as long as the agent. */
static void set_worker_cred(struct agent *a, const struct rdzv_assign *as)
{
    struct rdzv_cred c = {.kind = RDZV_CRED_WORKER};

    snprintf(c.scope, sizeof(c.scope), "%s", a->o->run_id);
    memcpy(c.key, as->worker_key, sizeof(c.key));
    if (rdzv_cred_format(&c, a->worker_cred, sizeof(a->worker_cred)) < 0)
        a->worker_cred[0] = '\0';
    rdzv_cred_wipe(&c);
    mbedtls_platform_zeroize(a->as.worker_key, sizeof(a->as.worker_key));
}

static void on_assign(struct rdzv_client *c, const struct rdzv_assign *as)
{
    struct agent *a = rdzv_client_data(c);
    const struct agent_static_opts *st = &a->o->static_ranks;

    agent_progress_stop(&a->progress);
    if (!accepts(a, AGENT_EV_ASSIGN))
        return;
    a->as = *as;
    agent_goodput_resume(&a->gp, as->resume, as->round); /* counts the last attempt's lost work */
    set_worker_cred(a, as);
    a->ft.was_rank0 = as->group_rank == 0;
    if (st->on) {
        unsigned nproc = a->o->work.nproc;
        a->as.group_rank = st->node_rank;
        a->as.group_world_size = st->nnodes;
        a->as.rank_offset = st->node_rank * nproc;
        a->as.world_size = st->nnodes * nproc;
        snprintf(a->as.master_addr, sizeof(a->as.master_addr), "%s", st->master_addr);
        a->as.master_port = st->master_port;
    }
    fire(a, AGENT_EV_ASSIGN, 0);
}

static void on_restart(struct rdzv_client *c, const struct rdzv_restart *r)
{
    struct agent *a = rdzv_client_data(c);
    unsigned max = a->o->restart.max_restarts;
    char how[RDZV_TEXT_MAX + 64];

    if (!accepts(a, AGENT_EV_RESTART))
        return;
    /* the next attempt's workers must not meet this one's keys: on a fixed MASTER_PORT they
     * could reach this store before the next attempt replaces it */
    agent__store_stop(a);
    agent_failure_describe(&r->cause, how, sizeof(how));
    if (r->cause.rank >= 0)
        mc_info("restarting workers (restart %u/%u): rank %d %s", r->restart_count, max,
                r->cause.rank, how);
    else
        mc_info("restarting workers (restart %u/%u): %s", r->restart_count, max, how);
    if (r->delay_ms > 0) /* the server holds the next round that long (--restart-backoff) */
        mc_info("restarting in %.1f s (attempt %u of %u)", r->delay_ms / 1000.0,
                r->restart_count + 1, max + 1);
    agent_goodput_restart(&a->gp, r->delay_ms);
    fire(a, AGENT_EV_RESTART, 0);
}

static void collected(struct agent *a)
{
    (void)a; /* sent already (agent__ft_evidence); the workers go on */
}

/* The server wants this node's evidence (another node failed or hung, or `muster debug`): it
 * is taken while the workers run on; the RESTART that follows stops them. */
static void on_collect(struct rdzv_client *c, const struct rdzv_collect *col)
{
    struct agent *a = rdzv_client_data(c);
    char why[MC_ESCAPE_SIZE(RDZV_EV_WHY_MAX)];
    int rc;

    if (col->round != a->as.round || a->group == NULL || a->state == AGENT_S_FINISHED)
        return;
    mc_escape(col->why, why, sizeof(why));
    rc = agent__ft_evidence(a, why, col->req, collected);
    if (rc == 0)
        mc_info("taking this node's evidence for the server: %s", why);
    else if (rc != -EAGAIN || a->ft.ev_on)
        mc_debug("COLLECT for round %u not served: %s", col->round,
                 a->ft.ev.busy ? "a collection is running" : strerror(-rc));
}

static void on_job_done(struct rdzv_client *c)
{
    fire(rdzv_client_data(c), AGENT_EV_JOB_DONE, 0);
}

static void on_job_failed(struct rdzv_client *c, const struct rdzv_job_failed *f)
{
    struct agent *a = rdzv_client_data(c);

    if (!accepts(a, AGENT_EV_JOB_FAILED))
        return;
    a->job_failed = *f;
    a->have_job_failed = 1;
    agent_goodput_failed(&a->gp);
    fire(a, AGENT_EV_JOB_FAILED, agent_failure_job_exit_code(&f->cause));
}

static void on_rdzv_error(struct rdzv_client *c, int err, const char *text)
{
    struct agent *a = rdzv_client_data(c);
    char shown[MC_ESCAPE_SIZE(RDZV_TEXT_MAX)];

    a->client = NULL; /* no more callbacks; closed here */
    if (accepts(a, AGENT_EV_RDZV_ERROR)) {
        mc_escape(text, shown, sizeof(shown)); /* the server's words */
        if (err == UV_EACCES && a->o->rdzv.token_hint != NULL)
            mc_error("rendezvous failed: %s: %s", shown, a->o->rdzv.token_hint);
        else
            mc_error("rendezvous failed: %s", shown);
    }
    rdzv_client_close(c, NULL, NULL);
    fire(a, AGENT_EV_RDZV_ERROR, 0);
}

static void on_disconnected(struct rdzv_client *c, const char *why)
{
    mc_log_untrusted(MC_LOG_INFO, "rendezvous server lost (%s); reconnecting, workers keep running",
                     why);
    agent__ft_disconnected(rdzv_client_data(c)); /* replicas in flight died with it */
}

/* The first connection failed: the node hosting the rendezvous may not have started yet. One
 * line at once, then one a minute, so a user sees what it waits for and until when. */
static void on_server_wait(struct rdzv_client *c, int err, uint64_t waited_ms)
{
    struct agent *a = rdzv_client_data(c);
    const struct agent_rdzv_opts *r = &a->o->rdzv;
    char until[48] = "without a deadline";

    if (a->server_wait_logs > 0 && waited_ms < a->server_wait_logs * 60000u)
        return;
    if (r->join_timeout_ms > 0)
        snprintf(until, sizeof(until), "until the join timeout (%u s)", r->join_timeout_ms / 1000);
    mc_info("waiting for the rendezvous at %s:%u (%s, %llu s so far); retrying %s", r->host,
            r->port,
            err == UV_EOF         ? "closed before it answered"
            : err == UV_ETIMEDOUT ? "no answer"
                                  : uv_strerror(err),
            (unsigned long long)(waited_ms / 1000), until);
    a->server_wait_logs++;
}

static void on_reconnected(struct rdzv_client *c)
{
    mc_info("rendezvous server reached again; round re-registered");
    agent__ft_reconnected(rdzv_client_data(c));
}

static void on_repl(struct rdzv_client *c, const struct rdzv_msg *m)
{
    agent__ft_repl_msg(rdzv_client_data(c), m);
}

/* A warning the server found about the job (its nodes compared): one line, as the agent's own. */
static void on_notice(struct rdzv_client *c, const char *text)
{
    (void)c;
    mc_warn("%s", text);
}

static const struct rdzv_client_cbs client_cbs = {
    .notice_cb = on_notice,
    .repl_cb = on_repl,
    .collect_cb = on_collect,
    .waiting_cb = on_waiting,
    .assign_cb = on_assign,
    .restart_cb = on_restart,
    .job_done_cb = on_job_done,
    .job_failed_cb = on_job_failed,
    .error_cb = on_rdzv_error,
    .disconnected_cb = on_disconnected,
    .reconnected_cb = on_reconnected,
    .server_wait_cb = on_server_wait,
};

/* ---- signals ------------------------------------------------------------------------ */

/* The signal handle i watches: INT, TERM, HUP and QUIT always (so that workers are never
 * left without their grace period, whatever --signals-to-handle says), then --preempt-signal,
 * then the rest of --signals-to-handle (torchrun's SignalException: the workers get the same
 * signal, then muster exits). 0: none. */
static int handle_signum(const struct agent_restart_opts *o, int i)
{
    if (i < NSIGNALS)
        return handled_signals[i];
    if (i == NSIGNALS)
        return o->preempt_signal > 0 ? o->preempt_signal : 0;
    i -= NSIGNALS + 1;
    return (unsigned)i < o->nhandle_signals ? o->handle_signals[i] : 0;
}

static void on_signal(uv_signal_t *h, int signum)
{
    struct agent *a = h->data;
    struct agent_event ev = {.kind = AGENT_EV_SIGNAL, .signum = signum};

    if (a->stop_signal == 0 && signum == a->o->restart.preempt_signal)
        mc_info("pre-empted (SIG%s): passing it to the workers, %.0f s for a final checkpoint, "
                "then exit %d (requeue)",
                sigabbrev_np(signum), a->o->restart.shutdown_timeout_ms / 1000.0,
                AGENT_EXIT_REQUEUE);
    else if (a->stop_signal == 0)
        mc_info("received SIG%s: stopping the workers (up to %.0f s; a second signal kills them "
                "at once)",
                sigabbrev_np(signum), a->o->restart.shutdown_timeout_ms / 1000.0);
    else
        mc_info("received SIG%s again: killing the workers now", sigabbrev_np(signum));
    if (a->stop_signal == 0)
        a->stop_at_ms = uv_now(&a->loop);
    transition(a, &ev);
}

/* ---- entry point -------------------------------------------------------------------- */

static int new_client(struct agent *a, const char *host, unsigned port)
{
    const struct agent_rdzv_opts *r = &a->o->rdzv;
    struct rdzv_tls_opts tls = {.token = r->token,
                                .cert_file = r->tls_cert,
                                .key_file = r->tls_key,
                                .ca_file = r->tls_ca,
                                .server_name = host,
                                .no_forward_secrecy = r->no_forward_secrecy};
    int rc;

    if (a->server != NULL) /* our own server: an in-process channel, no TCP and no TLS (the
                              handshake was ~6 ms of a standalone launch) */
        rc = rdzv_client_new_local(&a->loop, a->server, host, &client_cbs, a, &a->client);
    else
        rc = rdzv_client_new_tls(&a->loop, host, port, &tls, &client_cbs, a, &a->client);
    if (rc != 0)
        mc_error("rendezvous client: %s", uv_strerror(rc));
    return rc;
}

/* --http on the server this node hosts: the dashboard, /status, /logs and /metrics, as `muster
 * server --http`. The pages need the observer credential of the job's secret: it goes to a new
 * private file (0600, never shown on the console) whose name is logged; the file goes at exit. */
static void start_http(struct agent *a)
{
    const struct agent_rdzv_opts *r = &a->o->rdzv;
    char text[RDZV_CRED_TEXT_MAX + 1], shown[300];
    const char *tmp = getenv("TMPDIR");
    unsigned bound = 0;
    int rc;

    if ((rc = rdzv_server_http_listen(a->server, r->http_host, r->http_port, &bound)) != 0) {
        mc_warn("--http %s:%u: %s: no dashboard", r->http_host, r->http_port, uv_strerror(rc));
        return;
    }
    snprintf(shown, sizeof(shown), strchr(r->http_host, ':') ? "[%s]:%u" : "%s:%u", r->http_host,
             bound);
    if (r->token == NULL) {
        mc_info("dashboard on http://%s/ (certificate mode without a token: no observer "
                "credential exists, so /status and /logs answer 403)",
                shown);
        return;
    }
    rc = rdzv_cred_mint(r->token, RDZV_CRED_OBSERVER, "", text, sizeof(text));
    snprintf(a->http_cred, sizeof(a->http_cred), "%s/muster-dashboard-%d.cred",
             tmp != NULL && tmp[0] == '/' ? tmp : "/tmp", (int)getpid());
    if (rc != 0 || (rc = mc_secret_write_new(a->http_cred, text)) != 0) {
        mc_warn("dashboard on http://%s/, but its credential could not be written to %s: %s", shown,
                a->http_cred, strerror(rc < 0 ? -rc : EIO));
        a->http_cred[0] = '\0';
    } else {
        mc_info("dashboard on http://%s/ (read-only credential in %s: open "
                "http://%s/#cred=$(cat %s))",
                shown, a->http_cred, shown, a->http_cred);
    }
    explicit_bzero(text, sizeof(text));
}

static int start_rendezvous(struct agent *a)
{
    const struct agent_rdzv_opts *r = &a->o->rdzv;
    const char *connect_host = r->host;
    unsigned port = r->port;
    int rc = 0;

    if (r->host_mode != AGENT_HOST_NEVER) {
        const char *bind_host = strcmp(r->host, "localhost") == 0 ? "127.0.0.1" : r->host;
        struct rdzv_tls_opts tls = {.token = r->token,
                                    .cert_file = r->tls_cert,
                                    .key_file = r->tls_key,
                                    .ca_file = r->tls_ca};
        rc = r->tls_cert ? rdzv_server_new_tls(&a->loop, bind_host, r->port, &tls, &a->server)
                         : rdzv_server_new(&a->loop, bind_host, r->port, r->token, &a->server);
        if (rc == 0) {
            rdzv_server_set_auth_hint(a->server, r->token_hint_host);
            port = rdzv_server_port(a->server);
            if (r->http_host != NULL)
                start_http(a);
            if (strcmp(bind_host, "0.0.0.0") == 0 || strcmp(bind_host, "::") == 0)
                connect_host = "127.0.0.1";
        } else if (r->host_mode == AGENT_HOST_ALWAYS) {
            mc_error("cannot start the rendezvous server on %s:%u: %s", bind_host, r->port,
                     uv_strerror(rc));
            return rc;
        }
        /* AGENT_HOST_IF_LOCAL: not this machine's address, or a server already runs there */
    }
    if (r->http_host != NULL && a->server == NULL)
        mc_warn("--http: this node does not host the rendezvous server (%s:%u): no dashboard "
                "here; `muster server --http` has the jobs' one",
                r->host, r->port);
    snprintf(a->endpoint, sizeof(a->endpoint), strchr(connect_host, ':') ? "[%s]:%u" : "%s:%u",
             connect_host, port);
    return new_client(a, connect_host, port);
}

static int agent_init(struct agent *a, const struct agent_options *o)
{
    int rc;

    memset(a, 0, sizeof(*a));
    a->o = o;
    a->state = AGENT_S_JOINING;
    a->port_fd = -1;
    a->ft.my_resume_step = -1;
    if ((rc = uv_loop_init(&a->loop)) != 0)
        return rc;
    if (gethostname(a->host, sizeof(a->host) - 1) != 0)
        snprintf(a->host, sizeof(a->host), "localhost");
    mc_utf8_sanitize(a->host); /* the server refuses a JOIN whose host is not UTF-8 */
    if ((rc = rdzv_node_secret_new(a->node_secret, &a->node_id)) != 0)
        return rc;
    signal(SIGPIPE, SIG_IGN); /* a closed console must not kill the agent (workers reset it) */
    /* before anything logs: a console nobody reads must never stop the loop (docs/OUTPUT.md "A
     * console that does not read (backpressure)") */
    if ((rc = agent_output_console_start(&a->loop, AGENT_OUTPUT_BUDGET)) != 0)
        mc_warn("console output is written directly: %s", uv_strerror(rc));
    agent_progress_init(&a->loop, &a->progress, o->run_id);
    uv_timer_init(&a->loop, &a->health.timer);
    a->health.timer.data = a;
    agent_goodput_init(&a->gp, &a->loop, NULL);
    a->logfwd = agent_logfwd_new(
        &a->loop,
        &(struct agent_logfwd_io){.send = logfwd_send, .unsent = logfwd_unsent, .ctx = a});
    if (o->health.telemetry_ms > 0)
        a->telem = agent_telem_new(
            &a->loop, o->health.telemetry_ms, a->host,
            &(struct agent_telem_io){.send = telem_send, .workers = telem_workers, .ctx = a});
    for (int i = 0; i < NSIGHANDLES; i++) {
        int signum = handle_signum(&o->restart, i), dup = 0;
        uv_signal_init(&a->loop, &a->sig[i]);
        a->sig[i].data = a;
        for (int j = 0; j < i; j++)
            dup |= handle_signum(&o->restart, j) == signum;
        if (signum > 0 && !dup)
            uv_signal_start(&a->sig[i], on_signal, signum);
    }
    return 0;
}

/* How long the console may take at exit: what is left of --shutdown-timeout since the
 * signal (SIGTERM means "gone within the grace"), at least AGENT_FLUSH_MIN_MS; the whole
 * timeout when the job ended by itself. Then muster exits whoever still waits. */
static unsigned flush_ms(struct agent *a)
{
    uint64_t grace = a->o->restart.shutdown_timeout_ms, now, used;

    if (a->stop_signal == 0)
        return (unsigned)grace;
    uv_update_time(&a->loop);
    now = uv_now(&a->loop);
    used = now > a->stop_at_ms ? now - a->stop_at_ms : 0;
    return used + AGENT_FLUSH_MIN_MS < grace ? (unsigned)(grace - used) : AGENT_FLUSH_MIN_MS;
}

int agent_run(const struct agent_options *o)
{
    struct agent a;
    int rc = agent_init(&a, o);

    if (rc != 0) {
        mc_error("cannot start the agent: %s", uv_strerror(rc));
        return AGENT_EXIT_INTERNAL;
    }
    agent_proctree_start(1); /* before any worker: the job's cgroup and its reaper */
    if ((rc = agent__prepare_logdir(&a)) != 0 || (rc = agent__ft_start(&a, on_hang)) != 0)
        /* a directory refused for safety is the operator's to fix, like a bad flag */
        fire(&a, AGENT_EV_FATAL, agent_path_refused(rc) ? AGENT_EXIT_USAGE : AGENT_EXIT_INTERNAL);
    else if (start_rendezvous(&a) != 0)
        fire(&a, AGENT_EV_FATAL, AGENT_EXIT_RDZV);
    else
        join(&a); /* the machine starts in JOINING */
    uv_run(&a.loop, UV_RUN_DEFAULT);
    agent_output_console_stop(flush_ms(&a));
    uv_run(&a.loop, UV_RUN_DEFAULT); /* the console's wake handle closes */
    agent_proctree_stop();
    if (a.port_fd >= 0)
        close(a.port_fd);
    rc = uv_loop_close(&a.loop);
    if (rc != 0)
        mc_error("internal error: handles left open at exit: %s", uv_strerror(rc));
    agent_logdir_close(&a.logdir);
    return a.exit_code;
}
