/* Shared-GPU mode: ngpus * K independent one-rank tasks on one loop. Each task is its own
 * agent_group of one worker, so a task restarts alone: its group is closed and a new one made,
 * with a new MASTER_PORT, while the other tasks' groups are never touched. */
#include "shared.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "agent_priv.h" /* agent__worker_streams, AGENT_FLUSH_MIN_MS */
#include "backoff.h"
#include "failure.h"
#include "group.h"
#include "log.h"
#include "logdir.h"
#include "mps.h"
#include "output.h"
#include "path.h"
#include "port.h"
#include "proctree.h"
#include "telemetry.h"

extern char **environ;

static const int stop_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
#define NSTOP ((int)(sizeof(stop_signals) / sizeof(stop_signals[0])))

struct shared;

struct task {
    struct shared *s;
    unsigned index, gpu;
    int nvml_gpu; /* the GPU's NVML index for the telemetry (AGENT_TELEM_GPU_GIVEN: a UUID) */
    unsigned restarts;
    struct agent_group *group; /* the running attempt; NULL between attempts and once ended */
    int port_fd;               /* MASTER_PORT kept reserved while the attempt runs */
    unsigned port;
    int code;  /* the last attempt's exit code (128+signal) */
    int ended; /* succeeded, or failed with no restart left */
    /* --restart-backoff per task: a crash-looping task waits on `retry` before its next
     * attempt instead of using its restarts up in milliseconds */
    uv_timer_t retry;
    struct mc_backoff backoff;
    uint64_t started_ms; /* loop time of the attempt's start, to see a healthy run */
    uint32_t delay_ms;   /* set by task_failed(): wait this long before the next attempt */
};

struct shared {
    uv_loop_t loop;
    const struct agent_shared_options *o;
    struct task *tasks;
    unsigned ntasks, running;
    uv_signal_t sig[NSTOP];
    int stop_signal;
    uint64_t stop_at_ms; /* uv_now when stop_signal came */
    int failed_code;     /* the first task that failed finally; 0 none */
    int finished;
    struct agent_logdir logdir;
    struct agent_mps mps;
    struct agent_telem *telem; /* --gpu-telemetry: warnings on the console only; NULL off */
};

int agent_shared_task_env(const struct agent_shared_options *o, unsigned task, unsigned master_port,
                          unsigned restart_count, const char *error_file, struct agent_env *env,
                          char *const *parent)
{
    unsigned count = o->ngpus * o->per_gpu, g = task / o->per_gpu;
    /* a world of one: every rank 0 (left to the initializer), every world size 1 */
    struct agent_worker_info w = {
        .local_world_size = 1,
        .group_world_size = 1,
        .role_world_size = 1,
        .world_size = 1,
        .master_port = master_port,
        .role = "default",
        .master_addr = "127.0.0.1",
        .restart_count = restart_count,
        .max_restarts = o->max_restarts,
        .run_id = o->run_id,
        .error_file = error_file ? error_file : "",
        .endpoint = NULL, /* no rendezvous server in this mode */
        .signals_to_handle = o->signals_to_handle,
    };
    int rc = agent_env_for_worker(env, &w, parent);

    rc |= agent_env_set(env, "CUDA_VISIBLE_DEVICES", o->gpu_ids[g]);
    rc |= agent_env_setf(env, "MUSTER_TASK_INDEX", "%u", task);
    rc |= agent_env_setf(env, "MUSTER_TASK_COUNT", "%u", count);
    rc |= agent_env_setf(env, "MUSTER_GPU_INDEX", "%u", g);
    rc |= agent_env_setf(env, "MUSTER_GPU_MEM_FRACTION", "%.4f", o->mem_fraction / o->per_gpu);
    if (o->batch_size != NULL)
        rc |= agent_env_set(env, "MUSTER_BATCH_SIZE", o->batch_size);
    /* K processes per GPU share the node's cores: torchrun's reason for one OpenMP thread
     * per worker (agent_env_for_worker sees a one-rank world and would not set it) */
    if (count > 1) {
        int inherited = 0;
        for (char *const *p = parent; p && *p; p++)
            inherited |= strncmp(*p, "OMP_NUM_THREADS=", 16) == 0;
        if (!inherited)
            rc |= agent_env_set(env, "OMP_NUM_THREADS", "1");
    }
    return rc ? -ENOMEM : 0;
}

/* ---- one task's attempts ------------------------------------------------------------ */

static void finish(struct shared *s);
static void start_task(struct task *t);
static void restart_task(struct task *t);

static void after_group_closed(void *data)
{
    (void)data;
}

static void release_port(struct task *t)
{
    if (t->port_fd >= 0)
        close(t->port_fd);
    t->port_fd = -1;
}

static void task_ended(struct task *t, int code)
{
    struct shared *s = t->s;

    t->ended = 1;
    t->code = code;
    if (code != 0 && s->failed_code == 0)
        s->failed_code = code;
    if (--s->running == 0)
        finish(s);
}

/* The attempt failed with code (how: its words). Returns 1 when the task is to start again. */
/* The message of the attempt's error file (TORCHELASTIC_ERROR_FILE), as "; message: ...", or
 * "" when the worker wrote none. */
static void error_message(const struct task *t, char *out, size_t cap)
{
    char dir[PATH_MAX], file[PATH_MAX], text[512];

    out[0] = '\0';
    if (agent_logdir_worker(&t->s->logdir, t->restarts, (int)t->index, 0, dir, file) == 0 &&
        file[0] != '\0' && agent_error_file_message(file, text, sizeof(text)) == 0)
        snprintf(out, cap, "; message: %s", text);
}

static int task_failed(struct task *t, int code, const char *how_code)
{
    struct shared *s = t->s;
    const char *gpu = s->o->gpu_ids[t->gpu];
    char how[700], msg[600];

    error_message(t, msg, sizeof(msg));
    snprintf(how, sizeof(how), "%s%s", how_code, msg);

    if (s->stop_signal) {
        task_ended(t, code); /* stopping: dying of our signal is no failure to restart */
        return 0;
    }
    if (t->restarts < s->o->max_restarts) {
        t->restarts++;
        mc_info("task %u (GPU %s) %s; restarting it alone (restart %u/%u)", t->index, gpu, how,
                t->restarts, s->o->max_restarts);
        t->delay_ms = mc_backoff_next(&t->backoff, uv_now(&s->loop) - t->started_ms);
        if (t->delay_ms > 0)
            mc_info("task %u: restarting in %.1f s (attempt %u of %u)", t->index,
                    t->delay_ms / 1000.0, t->restarts + 1, s->o->max_restarts + 1);
        return 1;
    }
    mc_warn("task %u (GPU %s) %s; no restart left (%u/%u), the other tasks go on", t->index, gpu,
            how, t->restarts, s->o->max_restarts);
    task_ended(t, code);
    return 0;
}

static void on_task_exit(struct agent_group *g, struct agent_worker *w)
{
    struct task *t = g->data;
    t->code = w->term_signal ? 128 + w->term_signal : w->exit_status;
}

/* The task's worker (and with it its attempt) is gone. */
static void on_all_exited(struct agent_group *g)
{
    struct task *t = g->data;
    char how[64];

    agent_group_close(g, after_group_closed, NULL); /* kills what it left in its group */
    t->group = NULL;
    release_port(t);
    if (t->code == 0) {
        task_ended(t, 0);
        return;
    }
    if (t->code > 128 && g->workers[0].term_signal)
        snprintf(how, sizeof(how), "exited with signal %d (SIG%s)", t->code - 128,
                 sigabbrev_np(t->code - 128));
    else
        snprintf(how, sizeof(how), "exited with code %d", t->code);
    if (task_failed(t, t->code, how))
        restart_task(t);
}

static const struct agent_group_cbs group_cbs = {
    .exit_cb = on_task_exit,
    .all_exited_cb = on_all_exited,
};

/* Log files and console of task t, as the agent does per local rank (attempt.c): the
 * attempt number is the task's restart count, the local rank its index. */
static int task_streams(struct task *t, struct agent_worker_spec *spec, char *error_file)
{
    const struct agent_shared_options *o = t->s->o;
    unsigned i = t->index;
    char dir[PATH_MAX];
    int rc = agent_logdir_worker(&t->s->logdir, t->restarts, (int)i, 1, dir, error_file);

    if (rc != 0) {
        mc_error("cannot create the log directory of task %u: %s", i, strerror(-rc));
        return rc;
    }
    unlink(error_file); /* a stale file of an earlier run would be taken for this one's */
    agent__worker_streams(dir, o->log_dir != NULL, o->redirect[i], o->tee[i], o->shown[i], spec);
    return 0;
}

/* Starts one attempt of t. Returns 0, or a negative errno with nothing left running (spawn's
 * -ENOENT / -EACCES: the program cannot be executed). */
static int spawn_task(struct task *t)
{
    struct shared *s = t->s;
    struct agent_worker_spec spec = {.argv = s->o->argv, .file = {-1, -1}};
    struct agent_env env, full;
    char error_file[PATH_MAX] = "";
    int rc;

    agent_env_init(&env);
    agent_env_init(&full);
    if ((rc = agent_port_reserve(&t->port_fd, &t->port)) != 0) {
        mc_error("cannot find a free port for task %u's MASTER_PORT: %s", t->index, strerror(-rc));
        goto out;
    }
    if ((rc = task_streams(t, &spec, error_file)) != 0)
        goto out;
    rc = agent_shared_task_env(s->o, t->index, t->port, t->restarts, error_file, &env, environ);
    if (rc == 0)
        rc = agent_mps_worker_env(&s->mps, s->o, t->index, &env);
    if (rc == 0)
        rc = agent_env_merge(&env, environ, &full);
    if (rc == 0)
        rc = agent_group_new(&s->loop, 1, &group_cbs, t, &t->group);
    if (rc != 0) {
        for (int st = 0; st < 2; st++)
            if (spec.file[st] >= 0)
                close(spec.file[st]);
        goto out;
    }
    spec.env = full.vars;
    rc = agent_group_spawn(t->group, 0, (int)t->index, &spec); /* console prefix: task index */
out:
    if (rc != 0) {
        agent_group_close(t->group, after_group_closed, NULL);
        t->group = NULL;
        release_port(t);
    }
    agent_env_free(&env);
    agent_env_free(&full);
    return rc;
}

/* Starts t, again while it cannot start and has restarts left. A program that cannot be
 * executed counts as a worker exiting with the shell's code, 127 or 126 (as agent.c does). */
static void start_task(struct task *t)
{
    char how[PATH_MAX + 64];
    int rc;

    t->started_ms = uv_now(&t->s->loop);
    while ((rc = spawn_task(t)) != 0) {
        int code = rc == -ENOENT ? 127 : 126;
        snprintf(how, sizeof(how), "could not start (cannot execute '%s': %s), code %d",
                 t->s->o->argv[0], strerror(-rc), code);
        t->code = code;
        if (!task_failed(t, code, how))
            return;
        if (t->delay_ms > 0) {
            restart_task(t);
            return;
        }
    }
}

static void on_retry(uv_timer_t *h)
{
    start_task(h->data);
}

/* The next attempt of a failed task: at once, or after its backoff delay. */
static void restart_task(struct task *t)
{
    if (t->delay_ms == 0)
        start_task(t);
    else
        uv_timer_start(&t->retry, on_retry, t->delay_ms, 0);
}

/* ---- signals and the end ------------------------------------------------------------ */

static void on_signal(uv_signal_t *h, int signum)
{
    struct shared *s = h->data;
    int again = s->stop_signal != 0;

    if (!again) {
        s->stop_signal = signum;
        s->stop_at_ms = uv_now(&s->loop);
        mc_info("received SIG%s: stopping the tasks (up to %.0f s; a second signal kills them "
                "at once)",
                sigabbrev_np(signum), s->o->shutdown_timeout_ms / 1000.0);
    }
    /* a task waiting out its backoff has no process to stop: it ends with its last code */
    for (unsigned i = 0; i < s->ntasks && !s->finished; i++)
        if (uv_is_active((uv_handle_t *)&s->tasks[i].retry)) {
            uv_timer_stop(&s->tasks[i].retry);
            task_ended(&s->tasks[i], s->tasks[i].code);
        }
    /* a second signal: the user does not want to wait for the grace period */
    for (unsigned i = 0; i < s->ntasks; i++)
        if (s->tasks[i].group != NULL)
            agent_group_stop(s->tasks[i].group, again ? SIGKILL : signum,
                             again ? 0 : s->o->shutdown_timeout_ms);
}

static void close_handle_cb(uv_handle_t *h)
{
    (void)h;
}

static void finish(struct shared *s)
{
    if (s->finished)
        return;
    s->finished = 1;
    agent_telem_close(s->telem);
    s->telem = NULL;
    for (int i = 0; i < NSTOP; i++)
        uv_close((uv_handle_t *)&s->sig[i], close_handle_cb);
    for (unsigned i = 0; i < s->ntasks; i++) {
        uv_close((uv_handle_t *)&s->tasks[i].retry, close_handle_cb);
        agent_group_close(s->tasks[i].group, after_group_closed, NULL); /* kills what is left */
        s->tasks[i].group = NULL;
        release_port(&s->tasks[i]);
    }
}

/* The running tasks, for the telemetry: each named by its index, on the GPU it was given, with
 * its memory cap (MPS's pinned limit, else its --gpu-mem-fraction share). */
static int telem_workers(void *ctx, struct agent_telem_worker *w, int cap)
{
    struct shared *s = ctx;
    int n = 0;

    for (unsigned i = 0; i < s->ntasks && n < cap; i++) {
        const struct task *t = &s->tasks[i];

        if (t->group == NULL || !t->group->workers[0].alive)
            continue;
        w[n++] = (struct agent_telem_worker){.pid = t->group->workers[0].pid,
                                             .rank = (int)i,
                                             .local_rank = (int)i,
                                             .gpu = t->nvml_gpu,
                                             .cap_bytes = s->mps.on ? s->mps.limit_mib << 20 : 0,
                                             .cap_frac = s->o->mem_fraction / s->o->per_gpu};
    }
    return n;
}

static void start_telemetry(struct shared *s)
{
    char host[256] = "";

    if (s->o->telemetry_ms == 0)
        return;
    if (gethostname(host, sizeof(host) - 1) != 0)
        snprintf(host, sizeof(host), "this node");
    s->telem = agent_telem_new(&s->loop, s->o->telemetry_ms, host,
                               &(struct agent_telem_io){.workers = telem_workers, .ctx = s});
    agent_telem_attempt(s->telem, uv_now(&s->loop));
}

static int wants_files(const struct agent_shared_options *o, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (o->redirect[i] | o->tee[i])
            return 1;
    return 0;
}

/* Everything up to the first spawn. Returns 0 or muster's exit code (reason logged). */
static int prepare(struct shared *s)
{
    const struct agent_shared_options *o = s->o;
    char err[PATH_MAX + 128];
    int keep = o->log_dir == NULL && wants_files(o, s->ntasks);
    int rc;

    rc = agent_logdir_open(&s->logdir, o->log_dir, o->run_id, keep, err, sizeof(err));
    if (rc != 0) {
        mc_error("%s", err);
        return agent_path_refused(rc) ? AGENT_EXIT_USAGE : AGENT_EXIT_INTERNAL;
    }
    if (keep)
        mc_info("worker logs in %s", s->logdir.base);
    if ((rc = agent_mps_start(&s->mps, o)) != 0)
        return rc;
    mc_info("shared-GPU mode: %u tasks, %u per GPU on %u GPU%s, memory fraction %.4f each%s",
            s->ntasks, o->per_gpu, o->ngpus, o->ngpus == 1 ? "" : "s", o->mem_fraction / o->per_gpu,
            s->mps.on ? ", MPS" : "");
    return 0;
}

static int init(struct shared *s, const struct agent_shared_options *o)
{
    int rc;

    memset(s, 0, sizeof(*s));
    s->o = o;
    s->ntasks = s->running = o->ngpus * o->per_gpu;
    if (s->ntasks == 0 || o->argv == NULL || o->argv[0] == NULL)
        return -EINVAL;
    if ((s->tasks = calloc(s->ntasks, sizeof(*s->tasks))) == NULL)
        return -ENOMEM;
    for (unsigned i = 0; i < s->ntasks; i++) {
        const char *id = o->gpu_ids[i / o->per_gpu];
        char *end;
        long idx = strtol(id, &end, 10);

        s->tasks[i] =
            (struct task){.s = s,
                          .index = i,
                          .gpu = i / o->per_gpu,
                          .nvml_gpu = end != id && *end == '\0' && idx >= 0 && idx < INT_MAX
                                          ? (int)idx
                                          : AGENT_TELEM_GPU_GIVEN,
                          .port_fd = -1};
    }
    if ((rc = uv_loop_init(&s->loop)) != 0)
        return rc;
    for (unsigned i = 0; i < s->ntasks; i++) {
        struct task *t = &s->tasks[i];

        uv_timer_init(&s->loop, &t->retry);
        t->retry.data = t;
        t->backoff = (struct mc_backoff){.min_ms = o->backoff_min_ms,
                                         .max_ms = o->backoff_max_ms,
                                         .rng = ((uint64_t)getpid() << 20) ^ (i + 1)};
    }
    signal(SIGPIPE, SIG_IGN); /* a closed console must not kill muster (workers reset it) */
    /* a console nobody reads must never stop the loop (output.h) */
    if ((rc = agent_output_console_start(&s->loop, AGENT_OUTPUT_BUDGET)) != 0)
        mc_warn("console output is written directly: %s", uv_strerror(rc));
    for (int i = 0; i < NSTOP; i++) {
        uv_signal_init(&s->loop, &s->sig[i]);
        s->sig[i].data = s;
        uv_signal_start(&s->sig[i], on_signal, stop_signals[i]);
    }
    return 0;
}

/* The console's time at exit, as agent.c's: what the signal left of --shutdown-timeout. */
static unsigned flush_ms(struct shared *s)
{
    uint64_t grace = s->o->shutdown_timeout_ms, now, used;

    if (s->stop_signal == 0)
        return (unsigned)grace;
    uv_update_time(&s->loop);
    now = uv_now(&s->loop);
    used = now > s->stop_at_ms ? now - s->stop_at_ms : 0;
    return used + AGENT_FLUSH_MIN_MS < grace ? (unsigned)(grace - used) : AGENT_FLUSH_MIN_MS;
}

int agent_shared_run(const struct agent_shared_options *o)
{
    struct shared s;
    int rc = init(&s, o), code;

    if (rc != 0) {
        mc_error("cannot start the shared-GPU mode: %s", strerror(-rc));
        if (s.tasks == NULL || rc == -EINVAL)
            return rc == -EINVAL ? AGENT_EXIT_USAGE : AGENT_EXIT_INTERNAL;
        free(s.tasks);
        return AGENT_EXIT_INTERNAL;
    }
    code = prepare(&s);
    if (code != 0)
        finish(&s);
    if (code == 0)
        start_telemetry(&s);
    for (unsigned i = 0; code == 0 && i < s.ntasks && !s.finished; i++)
        start_task(&s.tasks[i]);
    uv_run(&s.loop, UV_RUN_DEFAULT);
    agent_output_console_stop(flush_ms(&s));
    uv_run(&s.loop, UV_RUN_DEFAULT); /* the console's wake handle closes */
    if ((rc = uv_loop_close(&s.loop)) != 0)
        mc_error("internal error: handles left open at exit: %s", uv_strerror(rc));
    agent_mps_stop(&s.mps); /* every path ends here: done, failed, signalled, not started */
    agent_proctree_stop();  /* and the reaper ends as our child, not PID 1's */
    agent_logdir_close(&s.logdir);
    free(s.tasks);
    if (code != 0)
        return code;
    if (s.stop_signal)
        return 128 + s.stop_signal;
    return s.failed_code;
}
