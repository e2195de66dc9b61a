/* The health check before a restart round (docs/PREFLIGHT.md "Health check before a restart
 * round"). The pre-flight runs once per agent; a GPU that fails later (an Xid, ECC errors, a
 * hung context whose memory never comes back) would rejoin every restart round and fail it
 * again. So a node whose ranks failed or hung checks its GPUs before it JOINs the next round:
 * one `muster-preflight health --device I` per GPU, all at once (CUDA context creation is most
 * of the time), in a->group like the workers, bounded by --health-timeout on the agent's side
 * too (a GPU that hangs in the driver would hang its check). The agent itself never touches
 * CUDA or NVML. What follows is agent.c's decision: this file reports the end through done_cb. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent_priv.h"
#include "clock.h"
#include "env.h"
#include "log.h"
#include "tmpdir.h"

extern char **environ;

int agent__health_due(const struct agent *a)
{
    const struct agent_health_opts *o = &a->o->health;

    if (o->mode == AGENT_HEALTH_OFF || o->ngpus == 0 || a->health.done || a->o->pf.only)
        return 0;
    return o->mode == AGENT_HEALTH_ALWAYS || a->have_local_failure;
}

void agent__health_note_pids(struct agent *a, const struct agent_group *g)
{
    a->health.npids = 0;
    for (int i = 0; i < g->n && a->health.npids < AGENT_HEALTH_PIDS_MAX; i++)
        if (g->workers[i].pid > 0)
            a->health.pids[a->health.npids++] = g->workers[i].pid;
}

/* Bounded: the first line (and how many lines) of the reason file, at most 4 KiB read. */
static int read_reason(const struct agent *a, char *out, size_t cap)
{
    char buf[4096];
    ssize_t n = 0;
    int fd, lines = 0;

    out[0] = '\0';
    if (a->health.reason[0] == '\0' || (fd = open(a->health.reason, O_RDONLY | O_CLOEXEC)) < 0)
        return 0;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    for (ssize_t i = 0; i < n; i++)
        lines += buf[i] == '\n';
    if (buf[n - 1] != '\n')
        lines++;
    buf[strcspn(buf, "\n")] = '\0';
    for (char *p = buf; *p != '\0'; p++) /* a line that goes to the server: printable only */
        if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
            *p = '?';
    snprintf(out, cap, "%.*s", (int)(cap - 1), buf);
    return lines;
}

void agent__health_failure(struct agent *a, struct rdzv_failure *f)
{
    const struct agent_health *h = &a->health;
    char reason[RDZV_TEXT_MAX + 1];
    int lines = read_reason(a, reason, sizeof(reason));

    memset(f, 0, sizeof(*f));
    f->round = a->as.round;
    f->rank = -1;
    f->local_rank = -1;
    f->exit_code = AGENT_EXIT_PREFLIGHT;
    f->flags = 0; /* not final: the node leaves, the job goes on (a spare takes its place) */
    f->time_ms = mc_wall_ms();
    snprintf(f->host, sizeof(f->host), "%s", a->host);
    if (h->timed_out)
        snprintf(f->text, sizeof(f->text),
                 "health check on %s did not finish within %.1f s (--health-timeout): GPU %d may "
                 "be hung",
                 a->host, a->o->health.timeout_ms / 1000.0, h->failed_gpu);
    else if (reason[0] != '\0' && lines > 1)
        snprintf(f->text, sizeof(f->text), "health check failed on %s: %s (and %d more)", a->host,
                 reason, lines - 1);
    else if (reason[0] != '\0')
        snprintf(f->text, sizeof(f->text), "health check failed on %s: %s", a->host, reason);
    else
        snprintf(f->text, sizeof(f->text),
                 "health check failed on %s: GPU %d: muster-preflight "
                 "health exited with code %d",
                 a->host, h->failed_gpu, h->code);
}

static void after_close(void *data)
{
    (void)data;
}

static void on_health_exit(struct agent_group *g, struct agent_worker *w)
{
    struct agent *a = g->data;
    int code = w->term_signal ? 128 + w->term_signal : w->exit_status;

    if (code != 0 && a->health.code == 0 && !a->health.timed_out) {
        a->health.code = code;
        a->health.failed_gpu = w->local_rank; /* process i checks GPU i */
    }
}

static void on_health_done(struct agent_group *g)
{
    struct agent *a = g->data;
    struct agent_health *h = &a->health;

    uv_timer_stop(&h->timer);
    agent_group_close(g, after_close, a);
    a->group = NULL;
    h->started = 0;
    h->failed = h->code != 0 || h->timed_out;
    if (!h->failed)
        mc_info("health check passed in %.2f s (%u GPU%s)",
                (uv_now(&a->loop) - h->start_ms) / 1000.0, a->o->health.ngpus,
                a->o->health.ngpus == 1 ? "" : "s");
    h->done_cb(a);
    if (h->reason[0] != '\0')
        unlink(h->reason);
    h->reason[0] = '\0';
}

static const struct agent_group_cbs health_cbs = {.exit_cb = on_health_exit,
                                                  .all_exited_cb = on_health_done};

/* --health-timeout: a check stuck in the driver is killed; the first GPU still checking is
 * named. */
static void on_timeout(uv_timer_t *t)
{
    struct agent *a = t->data;
    struct agent_health *h = &a->health;

    if (!h->started || a->group == NULL)
        return;
    h->timed_out = 1;
    for (int i = 0; i < a->group->n; i++)
        if (a->group->workers[i].alive) {
            h->failed_gpu = i;
            break;
        }
    mc_error("health check: GPU %d did not finish within %.1f s (--health-timeout); killing the "
             "check",
             h->failed_gpu, a->o->health.timeout_ms / 1000.0);
    agent_group_stop(a->group, SIGKILL, 0);
}

/* "p1,p2,..." of the ended attempt's workers ("0" when none: nothing to wait for). */
static void pid_list(const struct agent_health *h, char *out, size_t cap)
{
    size_t len = 0;

    out[0] = '\0';
    for (unsigned i = 0; i < h->npids && len + 16 < cap; i++)
        len += (size_t)snprintf(out + len, cap - len, "%s%d", i ? "," : "", h->pids[i]);
    if (len == 0)
        snprintf(out, cap, "0");
}

static int spawn_checks(struct agent *a, const char *bin)
{
    static char pids[AGENT_HEALTH_PIDS_MAX * 12 + 16];
    const struct agent_health_opts *o = &a->o->health;
    char dev[16], drain[32], timeout[32], reason[PATH_MAX + 16];
    char *argv[] = {(char *)bin,    "health", "--device", dev,  "--drain-ms", drain,
                    "--timeout-ms", timeout,  "--pids",   pids, NULL,         NULL};
    struct agent_env env, full;
    int rc;

    pid_list(&a->health, pids, sizeof(pids));
    snprintf(drain, sizeof(drain), "%u", o->drain_ms);
    snprintf(timeout, sizeof(timeout), "%u", o->timeout_ms);
    if (a->health.reason[0] != '\0') {
        snprintf(reason, sizeof(reason), "--reason-file=%s", a->health.reason);
        argv[10] = reason;
    }
    /* the agent's own credential stays with the agent (its children are no exception) */
    agent_env_init(&env);
    agent_env_init(&full);
    rc = agent_env_set(&env, "MUSTER_TOKEN", "");
    if (rc == 0)
        rc = agent_env_merge(&env, environ, &full);
    for (unsigned i = 0; rc == 0 && i < o->ngpus; i++) {
        struct agent_worker_spec spec = {.argv = argv, .console = {-1, -1}, .file = {-1, -1}};

        snprintf(dev, sizeof(dev), "%u", i); /* argv is copied by the fork */
        /* its lines go straight to the agent's own stdout/stderr, without rank prefixes */
        spec.file[0] = dup(1);
        spec.file[1] = dup(2);
        spec.env = full.vars;
        rc = agent_group_spawn(a->group, (int)i, (int)i, &spec);
    }
    agent_env_free(&env);
    agent_env_free(&full);
    return rc;
}

int agent__health_start(struct agent *a, void (*done_cb)(struct agent *a))
{
    const struct agent_health_opts *o = &a->o->health;
    struct agent_health *h = &a->health;
    const char *node =
        a->o->pf.node_argv != NULL && a->o->pf.node_argv[0] != NULL ? a->o->pf.node_argv[0] : "";
    char bin[PATH_MAX];
    int fd, rc;

    h->done = 1;
    h->failed = h->timed_out = h->code = 0;
    h->failed_gpu = -1;
    h->done_cb = done_cb;
    h->start_ms = uv_now(&a->loop);
    agent__preflight_gpu_binary(node, bin, sizeof(bin));
    if (bin[0] == '\0') {
        /* an install problem is no GPU fault: the node is not excluded for it */
        mc_warn("health check skipped: muster-preflight not found (next to muster, on PATH or "
                "$MUSTER_PREFLIGHT_BIN)");
        done_cb(a);
        return 0;
    }
    if ((rc = agent_group_new(&a->loop, (int)o->ngpus, &health_cbs, a, &a->group)) != 0)
        return rc;
    snprintf(h->reason, sizeof(h->reason), "%s/muster-health-reason-XXXXXX", mc_tmpdir());
    if ((fd = mkstemp(h->reason)) < 0) {
        mc_info("health check: no reason file (%s); a failure is reported by its exit code",
                strerror(errno));
        h->reason[0] = '\0';
    } else {
        close(fd);
    }
    mc_info("health check before the restart round: %u GPU%s (NVML health, GEMM, memory of the "
            "%u killed worker%s released within %.1f s), at most %.1f s",
            o->ngpus, o->ngpus == 1 ? "" : "s", h->npids, h->npids == 1 ? "" : "s",
            o->drain_ms / 1000.0, o->timeout_ms / 1000.0);
    h->started = 1;
    uv_timer_start(&h->timer, on_timeout, o->timeout_ms, 0);
    if ((rc = spawn_checks(a, bin)) != 0) {
        mc_error("cannot start the health check: %s", strerror(-rc));
        if (h->code == 0)
            h->code = AGENT_EXIT_PREFLIGHT;
        if (a->group->alive == 0)
            on_health_done(a->group); /* nothing runs: no exit will come to move on */
        else
            agent_group_stop(a->group, SIGKILL, 0);
    }
    return 0;
}
