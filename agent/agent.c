/* The agent's state machine. Everything is an event on one loop: rendezvous messages, worker
 * exits (the group's SIGCHLD watcher reaps its own pids), signals and timers. There is no
 * polling interval anywhere, which is what makes a restart take milliseconds. */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <mbedtls/platform_util.h>

#include "agent_priv.h"
#include "escape.h"
#include "path.h"
#include "cred.h"
#include "failure.h"
#include "port.h"
#include "proctree.h"
#include "tls.h"

static const int handled_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
#define NSIGNALS ((int)(sizeof(handled_signals) / sizeof(handled_signals[0])))
#define NSIGHANDLES AGENT_NSIGHANDLES
_Static_assert(NSIGNALS + 1 + 32 == AGENT_NSIGHANDLES,
               "one spare handle for --preempt-signal, 32 for --signals-to-handle");

void agent_log(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    fprintf(stderr, "muster: %s\n", buf);
    fflush(stderr);
}

void agent_fill_failure_(struct agent *a, const struct agent_worker *w, struct rdzv_failure *f)
{
    memset(f, 0, sizeof(*f));
    f->round = a->as.round;
    f->rank = w->rank;
    f->local_rank = w->local_rank;
    f->exit_code = w->term_signal ? -1 : (int32_t)w->exit_status;
    f->signal = w->term_signal;
    f->time_ms = w->exit_time_ms;
    snprintf(f->host, sizeof(f->host), "%s", a->host);
    char dir[PATH_MAX];
    agent_logdir_worker(&a->logdir, a->as.restart_count, w->local_rank, 0, dir,
                        a->local_error_file);
    if (a->local_error_file[0] == '\0' ||
        agent_error_file_message(a->local_error_file, f->text, sizeof(f->text)) == -ENOENT)
        a->local_error_file[0] = '\0';
}

/* A local worker failed (the first in this round): stop the others and tell the server,
 * which answers RESTART or JOB_FAILED. */
void agent_local_failure_(struct agent *a, const struct rdzv_failure *f, int pid)
{
    char how[RDZV_TEXT_MAX + 64];

    a->round_failed = 1;
    a->local_failure = *f;
    agent_failure_describe(f, how, sizeof(how));
    if (pid > 0)
        agent_log("worker rank %d (local_rank %d, pid %d) %s; stopping the other workers", f->rank,
                  f->local_rank, pid, how);
    else
        agent_log("worker rank %d (local_rank %d) could not start: %s; stopping the other "
                  "workers",
                  f->rank, f->local_rank, f->text);
    /* Stop first, report second: the others' SIGTERM is on its way before any round trip. */
    agent_group_stop(a->group, SIGTERM, a->o->shutdown_timeout_ms);
    if (rdzv_client_report_failure(a->client, f, 0) != 0) {
        a->next = NEXT_EXIT;
        a->exit_code = AGENT_EXIT_RDZV;
    }
}

static void on_worker_exit(struct agent_group *g, struct agent_worker *w)
{
    struct agent *a = g->data;
    struct rdzv_failure f;

    if (a->hang_on)
        agent_hang_disarm(&a->hang, w->local_rank);
    if (w->exit_status == 0 && w->term_signal == 0)
        return;
    if (a->round_failed || a->stop_signal || a->next != NEXT_NONE || a->finished)
        return; /* already stopping: a worker dying of our SIGTERM is no new failure */
    agent_fill_failure_(a, w, &f);
    agent_local_failure_(a, &f, w->pid);
}

static void after_group_closed(void *data)
{
    (void)data;
}

static void print_job_failed(struct agent *a)
{
    const struct rdzv_failure *f = &a->job_failed.cause;
    int ours = a->round_failed && f->rank == a->local_failure.rank && strcmp(f->host, a->host) == 0;
    agent_failure_print_summary(stderr, a->o->run_id, a->job_failed.restarts, f,
                                ours ? a->local_error_file : NULL);
}

/* Every worker of the attempt is gone: act on what the server (or a signal) decided. */
static void on_all_exited(struct agent_group *g)
{
    struct agent *a = g->data;
    int failed = a->round_failed || g->stopping;

    agent_group_close(g, after_group_closed, a);
    a->group = NULL;
    if (a->ckpt_on)
        agent_ckptwatch_sync(&a->ckpt); /* a final checkpoint may have landed just now */
    if (a->port_fd >= 0) {
        close(a->port_fd);
        a->port_fd = -1;
    }
    if (!failed && a->next == NEXT_NONE) {
        if (rdzv_client_report_done(a->client, a->as.round) != 0)
            agent_finish_(a, AGENT_EXIT_RDZV);
        return; /* JOB_DONE comes from the server once every node is done */
    }
    if (a->next == NEXT_REJOIN)
        agent_do_join_(a);
    else if (a->next == NEXT_EXIT)
        agent_finish_(a, a->exit_code);
    /* NEXT_NONE after a failure: the server's RESTART or JOB_FAILED is on its way */
}

static const struct agent_group_cbs group_cbs = {
    .exit_cb = on_worker_exit,
    .all_exited_cb = on_all_exited,
};

/* The program could not be executed (e.g. PYTHON_EXEC names no interpreter): that worker
 * failed like one exiting with the shell's code, 127 or 126. */
static void spawn_failure(struct agent *a, int i, int err)
{
    struct agent_worker w = {.local_rank = i,
                             .rank = (int)a->as.rank_offset + i,
                             .exit_status = err == -ENOENT ? 127 : 126};
    struct rdzv_failure f;
    struct timeval tv;

    gettimeofday(&tv, NULL);
    w.exit_time_ms = (uint64_t)tv.tv_sec * 1000 + (uint64_t)tv.tv_usec / 1000;
    agent_fill_failure_(a, &w, &f);
    snprintf(f.text, sizeof(f.text), "cannot execute '%s': %s", a->o->argv[0], strerror(-err));
    agent_local_failure_(a, &f, 0);
}

void agent_start_workers_(struct agent *a)
{
    int rc = agent_group_new(&a->loop, (int)a->o->nproc, &group_cbs, a, &a->group);
    if (rc != 0) {
        agent_log("error: %s", strerror(-rc));
        agent_finish_(a, AGENT_EXIT_INTERNAL);
        return;
    }
    a->round_failed = 0;
    agent_ft_prepare_(a);
    for (unsigned i = 0; i < a->o->nproc; i++) {
        if ((rc = agent_spawn_one_(a, (int)i)) != 0) {
            spawn_failure(a, (int)i, rc);
            break;
        }
    }
    if (a->round_failed && a->group->alive == 0)
        on_all_exited(a->group); /* nothing runs: no exit will come to move on */
}

/* ---- rendezvous events -------------------------------------------------------------- */

static void on_waiting(struct rdzv_client *c, const struct rdzv_waiting *w)
{
    struct agent *a = rdzv_client_data(c);

    if (a->o->max_nodes > 1 && !a->finished)
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

    agent_progress_stop(&a->progress);
    if (a->finished || a->next != NEXT_NONE)
        return;
    a->as = *as;
    set_worker_cred(a, as);
    a->was_rank0 = as->group_rank == 0;
    if (a->o->static_ranks) {
        const struct agent_options *o = a->o;
        a->as.group_rank = o->static_node_rank;
        a->as.group_world_size = o->static_nnodes;
        a->as.rank_offset = o->static_node_rank * o->nproc;
        a->as.world_size = o->static_nnodes * o->nproc;
        snprintf(a->as.master_addr, sizeof(a->as.master_addr), "%s", o->static_master_addr);
        a->as.master_port = o->static_master_port;
    }
    /* the pre-flight runs once, before the job's first attempt: every node of round 0 takes
     * part, so the checks can meet in that round's KV store */
    if (a->o->preflight && !a->preflight_ran && as->restart_count == 0) {
        a->preflight_ran = 1;
        agent_preflight_start_(a);
        return;
    }
    if (a->o->preflight_only) { /* a later round of `muster preflight`: nothing to run */
        if (rdzv_client_report_done(a->client, a->as.round) != 0)
            agent_finish_(a, AGENT_EXIT_RDZV);
        return;
    }
    agent_start_workers_(a);
}

static void on_restart(struct rdzv_client *c, const struct rdzv_restart *r)
{
    struct agent *a = rdzv_client_data(c);
    char how[RDZV_TEXT_MAX + 64];

    if (a->finished || a->next == NEXT_EXIT)
        return;
    agent_failure_describe(&r->cause, how, sizeof(how));
    if (r->cause.rank >= 0)
        agent_log("restarting workers (restart %u/%u): rank %d %s", r->restart_count,
                  a->o->max_restarts, r->cause.rank, how);
    else
        agent_log("restarting workers (restart %u/%u): %s", r->restart_count, a->o->max_restarts,
                  how);
    a->next = NEXT_REJOIN;
    if (a->group == NULL)
        agent_do_join_(a);
    else
        agent_group_stop(a->group, SIGTERM, a->o->shutdown_timeout_ms);
}

static void exit_after_workers(struct agent *a, int code)
{
    a->next = NEXT_EXIT;
    a->exit_code = code;
    if (a->group == NULL)
        agent_finish_(a, code);
    else
        agent_group_stop(a->group, SIGTERM, a->o->shutdown_timeout_ms);
}

static void on_job_done(struct rdzv_client *c)
{
    exit_after_workers(rdzv_client_data(c), 0);
}

static void on_job_failed(struct rdzv_client *c, const struct rdzv_job_failed *f)
{
    struct agent *a = rdzv_client_data(c);

    if (a->finished || a->stop_signal)
        return;
    a->job_failed = *f;
    a->have_job_failed = 1;
    exit_after_workers(a, agent_failure_exit_code(&f->cause));
}

static void on_rdzv_error(struct rdzv_client *c, int err, const char *text)
{
    struct agent *a = rdzv_client_data(c);

    a->client = NULL; /* no more callbacks; closed in agent_finish_() */
    if (a->finished || a->next == NEXT_EXIT) {
        rdzv_client_close(c, NULL, NULL);
        return;
    }
    char shown[MC_ESCAPE_SIZE(RDZV_TEXT_MAX)];

    mc_escape(text, shown, sizeof(shown)); /* the server's words */
    if (err == UV_EACCES && a->o->token_hint != NULL)
        agent_log("error: rendezvous failed: %s: %s", shown, a->o->token_hint);
    else
        agent_log("error: rendezvous failed: %s", shown);
    rdzv_client_close(c, NULL, NULL);
    exit_after_workers(a, AGENT_EXIT_RDZV);
}

static void on_disconnected(struct rdzv_client *c, const char *why)
{
    char shown[MC_ESCAPE_SIZE(RDZV_TEXT_MAX)];

    (void)c;
    mc_escape(why, shown, sizeof(shown));
    agent_log("rendezvous server lost (%s); reconnecting, workers keep running", shown);
}

/* The first connection failed: the node hosting the rendezvous may not have started yet. One
 * line at once, then one a minute, so a user sees what it waits for and until when. */
static void on_server_wait(struct rdzv_client *c, int err, uint64_t waited_ms)
{
    struct agent *a = rdzv_client_data(c);
    const struct agent_options *o = a->o;
    char until[48] = "without a deadline";

    if (a->server_wait_logs > 0 && waited_ms < a->server_wait_logs * 60000u)
        return;
    if (o->join_timeout_ms > 0)
        snprintf(until, sizeof(until), "until the join timeout (%u s)", o->join_timeout_ms / 1000);
    agent_log("waiting for the rendezvous at %s:%u (%s, %llu s so far); retrying %s", o->rdzv_host,
              o->rdzv_port, uv_strerror(err), (unsigned long long)(waited_ms / 1000), until);
    a->server_wait_logs++;
}

static void on_reconnected(struct rdzv_client *c)
{
    (void)c;
    agent_log("rendezvous server reached again; round re-registered");
}

static const struct rdzv_client_cbs client_cbs = {
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

void agent_do_join_(struct agent *a)
{
    const struct agent_options *o = a->o;
    struct rdzv_join j;
    int rc;

    a->next = NEXT_NONE;
    memset(&j, 0, sizeof(j));
    snprintf(j.job_id, sizeof(j.job_id), "%s", o->run_id);
    j.min_nodes = o->min_nodes;
    j.max_nodes = o->max_nodes;
    j.nproc = o->nproc;
    snprintf(j.host, sizeof(j.host), "%s", a->host);
    snprintf(j.addr, sizeof(j.addr), "%s", o->local_addr ? o->local_addr : "");
    j.master_port = o->master_port;
    if (j.master_port == 0) {
        if ((rc = agent_port_reserve(&a->port_fd, &a->port)) != 0) {
            agent_log("error: cannot find a free port for MASTER_PORT: %s", strerror(-rc));
            agent_finish_(a, AGENT_EXIT_INTERNAL);
            return;
        }
        j.master_port = a->port;
    }
    j.max_restarts = o->max_restarts;
    j.last_call_ms = o->last_call_ms;
    j.join_timeout_ms = o->join_timeout_ms;
    j.keep_alive_ms = o->keep_alive_ms;
    j.heartbeat_timeout_ms = o->heartbeat_timeout_ms;
    j.reconnect_grace_ms = o->reconnect_grace_ms;
    j.node_id = a->node_id;
    memcpy(j.node_secret, a->node_secret, sizeof(j.node_secret));
    j.want_rank = o->want_rank;
    agent_ft_pick_resume_(a, &j);
    if (a->client == NULL || (rc = rdzv_client_join(a->client, &j)) != 0) {
        agent_log("error: cannot join the rendezvous at %s:%u", o->rdzv_host, o->rdzv_port);
        agent_finish_(a, AGENT_EXIT_RDZV);
    }
}

/* ---- signals and shutdown ----------------------------------------------------------- */

/* The signal handle i watches: INT, TERM, HUP and QUIT always (so that workers are never
 * left without their grace period, whatever --signals-to-handle says), then --preempt-signal,
 * then the rest of --signals-to-handle (torchrun's SignalException: the workers get the same
 * signal, then muster exits). 0: none. */
static int handle_signum(const struct agent_options *o, int i)
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

    if (a->stop_signal) {
        /* a second signal: the user does not want to wait for the grace period */
        if (a->group != NULL)
            agent_group_stop(a->group, SIGKILL, 0);
        return;
    }
    a->stop_signal = signum;
    if (signum == a->o->preempt_signal)
        agent_log("pre-empted (SIG%s): passing it to the workers, %.0f s for a final checkpoint, "
                  "then exit %d (requeue)",
                  sigabbrev_np(signum), a->o->shutdown_timeout_ms / 1000.0, AGENT_EXIT_REQUEUE);
    else
        agent_log("received SIG%s: stopping the workers", sigabbrev_np(signum));
    /* Pre-emption is not a failure of this node: under Slurm every node of the job gets the
     * signal at about the same time. Reported, it would start a restart round on the nodes
     * whose signal is still on its way (their new workers then sit out the shutdown timeout);
     * a node that really is alone in being pre-empted is seen leaving when it exits. */
    if (a->client != NULL && a->group != NULL && signum != a->o->preempt_signal) {
        struct rdzv_failure f = {.round = a->as.round, .rank = -1, .exit_code = -1};
        snprintf(f.host, sizeof(f.host), "%s", a->host);
        snprintf(f.text, sizeof(f.text), "agent on %s stopped by SIG%s", a->host,
                 sigabbrev_np(signum));
        rdzv_client_report_failure(a->client, &f, 1);
    }
    a->next = NEXT_EXIT;
    a->exit_code = signum == a->o->preempt_signal ? AGENT_EXIT_REQUEUE : 128 + signum;
    if (a->group == NULL)
        agent_finish_(a, a->exit_code);
    else
        agent_group_stop(a->group, signum, a->o->shutdown_timeout_ms);
}

static void close_handle_cb(uv_handle_t *h)
{
    (void)h;
}

void agent_finish_(struct agent *a, int code)
{
    if (a->finished)
        return;
    a->finished = 1;
    a->exit_code = code;
    if (a->have_job_failed && !a->stop_signal)
        print_job_failed(a);
    rdzv_client_close(a->client, NULL, NULL);
    a->client = NULL;
    rdzv_server_close(a->server, NULL, NULL);
    a->server = NULL;
    for (int i = 0; i < NSIGHANDLES; i++)
        uv_close((uv_handle_t *)&a->sig[i], close_handle_cb);
    agent_progress_close(&a->progress, close_handle_cb);
    if (a->hang_on)
        agent_hang_close(&a->hang, NULL);
    if (a->ckpt_on) {
        agent_ckptwatch_sync(&a->ckpt);
        agent_ckptwatch_close(&a->ckpt, NULL);
    }
    if (a->group != NULL) {
        agent_group_close(a->group, after_group_closed, a); /* kills what is left */
        a->group = NULL;
    }
}

/* ---- entry point -------------------------------------------------------------------- */

static int start_rendezvous(struct agent *a)
{
    const struct agent_options *o = a->o;
    const char *connect_host = o->rdzv_host;
    unsigned port = o->rdzv_port;
    int rc = 0;

    if (o->host_mode != AGENT_HOST_NEVER) {
        const char *bind_host = strcmp(o->rdzv_host, "localhost") == 0 ? "127.0.0.1" : o->rdzv_host;
        struct rdzv_tls_opts tls = {.token = o->token,
                                    .cert_file = o->tls_cert,
                                    .key_file = o->tls_key,
                                    .ca_file = o->tls_ca};
        rc = o->tls_cert ? rdzv_server_new_tls(&a->loop, bind_host, o->rdzv_port, &tls, &a->server)
                         : rdzv_server_new(&a->loop, bind_host, o->rdzv_port, o->token, &a->server);
        if (rc == 0) {
            rdzv_server_set_auth_hint(a->server, o->token_hint_host);
            port = rdzv_server_port(a->server);
            if (strcmp(bind_host, "0.0.0.0") == 0 || strcmp(bind_host, "::") == 0)
                connect_host = "127.0.0.1";
        } else if (o->host_mode == AGENT_HOST_ALWAYS) {
            agent_log("error: cannot start the rendezvous server on %s:%u: %s", bind_host,
                      o->rdzv_port, uv_strerror(rc));
            return rc;
        }
        /* AGENT_HOST_IF_LOCAL: not this machine's address, or a server already runs there */
    }
    snprintf(a->endpoint, sizeof(a->endpoint), strchr(connect_host, ':') ? "[%s]:%u" : "%s:%u",
             connect_host, port);
    if (o->tls_cert != NULL) {
        struct rdzv_tls_opts tls = {.token = o->token,
                                    .cert_file = o->tls_cert,
                                    .key_file = o->tls_key,
                                    .ca_file = o->tls_ca,
                                    .server_name = connect_host};
        rc = rdzv_client_new_tls(&a->loop, connect_host, port, &tls, &client_cbs, a, &a->client);
    } else {
        rc = rdzv_client_new(&a->loop, connect_host, port, o->token, &client_cbs, a, &a->client);
    }
    if (rc != 0)
        agent_log("error: rendezvous client: %s", uv_strerror(rc));
    return rc;
}

static int agent_init(struct agent *a, const struct agent_options *o)
{
    int rc;

    memset(a, 0, sizeof(*a));
    a->o = o;
    a->port_fd = -1;
    a->my_resume_step = -1;
    if ((rc = uv_loop_init(&a->loop)) != 0)
        return rc;
    if (gethostname(a->host, sizeof(a->host) - 1) != 0)
        snprintf(a->host, sizeof(a->host), "localhost");
    if ((rc = rdzv_node_secret_new(a->node_secret, &a->node_id)) != 0)
        return rc;
    signal(SIGPIPE, SIG_IGN); /* a closed console must not kill the agent (workers reset it) */
    agent_progress_init(&a->loop, &a->progress, o->run_id);
    for (int i = 0; i < NSIGHANDLES; i++) {
        int signum = handle_signum(o, i), dup = 0;
        uv_signal_init(&a->loop, &a->sig[i]);
        a->sig[i].data = a;
        for (int j = 0; j < i; j++)
            dup |= handle_signum(o, j) == signum;
        if (signum > 0 && !dup)
            uv_signal_start(&a->sig[i], on_signal, signum);
    }
    return 0;
}

int agent_run(const struct agent_options *o)
{
    struct agent a;
    int rc = agent_init(&a, o);

    if (rc != 0) {
        agent_log("error: cannot start the agent: %s", uv_strerror(rc));
        return AGENT_EXIT_INTERNAL;
    }
    agent_proctree_start(1); /* before any worker: the job's cgroup and its reaper */
    if ((rc = agent_prepare_logdir_(&a)) != 0 || (rc = agent_ft_start_(&a)) != 0)
        /* a directory refused for safety is the operator's to fix, like a bad flag */
        agent_finish_(&a, agent_path_refused(rc) ? AGENT_EXIT_USAGE : AGENT_EXIT_INTERNAL);
    else if (start_rendezvous(&a) != 0)
        agent_finish_(&a, AGENT_EXIT_RDZV);
    else
        agent_do_join_(&a);
    uv_run(&a.loop, UV_RUN_DEFAULT);
    agent_proctree_stop();
    if (a.port_fd >= 0)
        close(a.port_fd);
    rc = uv_loop_close(&a.loop);
    if (rc != 0)
        agent_log("internal error: handles left open at exit: %s", uv_strerror(rc));
    agent_logdir_close(&a.logdir);
    return a.exit_code;
}
