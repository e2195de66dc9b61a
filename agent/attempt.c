/* One attempt's workers: their log directory, environment, spawn, and the failure record of
 * one that failed. Calls nothing in agent.c (agent_priv.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "agent_priv.h"
#include "env.h"
#include "failure.h"
#include "signature.h"
#include "log.h"
#include "numa.h"
#include "output.h"
#include "path.h"

extern char **environ;

static int wants_files(const struct agent_output_opts *o, unsigned nproc)
{
    for (unsigned i = 0; i < nproc; i++)
        if (o->redirect[i] | o->tee[i])
            return 1;
    /* the filter files live in the attempt directories */
    for (int s = 0; s < 2; s++)
        if (o->dup_filters[s] != NULL && o->dup_filters[s][0] != NULL)
            return 1;
    return 0;
}

int agent__prepare_logdir(struct agent *a)
{
    const struct agent_output_opts *o = &a->o->out;
    char err[PATH_MAX + 128];
    int keep = o->log_dir == NULL && wants_files(o, a->o->work.nproc);
    int rc = agent_logdir_open(&a->logdir, o->logs_disabled ? "/dev/null" : o->log_dir,
                               a->o->run_id, keep, err, sizeof(err));
    if (rc != 0)
        mc_error("%s", err);
    else if (keep || (o->log_dir != NULL && a->logdir.base[0] != '\0'))
        mc_info("worker logs in %s", a->logdir.base); /* a re-run's may carry a suffix */
    return rc;
}

/* ---- starting an attempt ------------------------------------------------------------ */

static int open_log(const char *dir, const char *name)
{
    int fd, rc = agent_output_open_log(dir, name, &fd);
    if (rc != 0)
        mc_warn("cannot open %s/%s: %s; that stream is not logged", dir, name, strerror(-rc));
    return fd;
}

static void worker_info(const struct agent *a, int i, const char *error_file,
                        struct agent_worker_info *w)
{
    const struct rdzv_assign *as = &a->as;
    const struct agent_options *o = a->o;
    memset(w, 0, sizeof(*w));
    w->rank = (int)as->rank_offset + i;
    w->local_rank = i;
    w->local_world_size = (int)o->work.nproc;
    w->group_rank = (int)as->group_rank;
    w->group_world_size = (int)as->group_world_size;
    w->role_rank = w->rank; /* one role per job, as torchrun's CLI allows */
    w->role_world_size = (int)as->world_size;
    w->world_size = (int)as->world_size;
    w->role = o->work.role;
    w->master_addr = as->master_addr;
    w->master_port = as->master_port;
    w->restart_count = as->restart_count;
    w->max_restarts = o->restart.max_restarts;
    w->run_id = o->run_id;
    w->error_file = error_file;
    w->endpoint = a->endpoint;
    w->token = a->worker_cred; /* never the agent's own credential */
    w->round = as->round;
    w->checkpoint_dir = o->ckpt.dir;
    w->resume_from = a->ft.resume_from;
    w->resume_parts = a->ft.resume_parts;
    w->virtual_local_rank = o->work.virtual_local_rank;
    w->signals_to_handle = o->work.signals_to_handle;
    w->agent_store = a->use_agent_store;
    w->torch_version = o->work.torch_version;
}

/* ---- the agent's TCPStore ------------------------------------------------------------- */

void agent__store_stop(struct agent *a)
{
    agent_store_close(a->store, NULL, NULL);
    a->store = NULL;
}

int agent__store_start(struct agent *a)
{
    const struct rdzv_assign *as = &a->as;
    int rc;

    agent__store_stop(a); /* a store outliving its attempt hands out stale keys */
    a->use_agent_store = agent_env_agent_store_wanted(environ);
    if (!a->use_agent_store || as->group_rank != 0)
        return 0;
    rc = agent_store_new(&a->loop, as->master_addr, as->master_port, NULL, &a->store);
    if (rc == 0) {
        mc_debug("agent store listening on %s:%u", as->master_addr, as->master_port);
        return 0;
    }
    if (rc == UV_EADDRINUSE) {
        /* worker rank 0 could not bind it either: a 28-line traceback from every rank's
         * init_process_group, where one line says it all */
        mc_error("MASTER_PORT %u is in use on this node (%s): the job's TCPStore listens "
                 "there; pick another --master-port, or leave it out for a free one",
                 as->master_port, as->master_addr);
        return rc;
    }
    if (as->group_world_size > 1) {
        /* the other nodes' workers are clients of a store no one would host */
        mc_error("cannot serve the TCPStore on %s:%u: %s", as->master_addr, as->master_port,
                 uv_strerror(rc));
        return rc;
    }
    /* one node: its workers alone decide, so worker rank 0 can host it as before */
    mc_warn("cannot serve the TCPStore on %s:%u: %s; worker rank 0 hosts it "
            "(TORCHELASTIC_USE_AGENT_STORE=False)",
            as->master_addr, as->master_port, uv_strerror(rc));
    a->use_agent_store = 0;
    return 0;
}

void agent__worker_streams(const char *dir, int all_to_files, unsigned char redirect,
                           unsigned char tee, unsigned char shown, struct agent_worker_spec *spec)
{
    for (int s = 0; s < 2; s++) {
        int bit = 1 << s;
        /* an explicit --log-dir keeps every stream; the private directory only what
         * --redirects/--tee send there */
        int to_file = all_to_files || ((redirect | tee) & bit);
        /* tee wins over redirect for the same stream, as in torchrun (file and console) */
        spec->console[s] = shown && (!(redirect & bit) || (tee & bit)) ? 1 + s : -1;
        spec->file[s] = -1;
        if (to_file && dir[0] != '\0')
            spec->file[s] = open_log(dir, s ? "stderr.log" : "stdout.log");
    }
}

/* The console options of worker i's streams; filter files go next to the LOCAL_RANK
 * directories in dir's parent (attempt_N/filtered_std{out,err}.log, torchrun's places). The
 * strings must live until the spawn: paths is two PATH_MAX buffers. */
static void output_cfg(const struct agent_options *opts, const char *dir, char (*paths)[PATH_MAX],
                       struct agent_output_cfg *cfg)
{
    const char *slash = strrchr(dir, '/');
    int dirlen = slash != NULL ? (int)(slash - dir) : 0;

    const struct agent_output_opts *o = &opts->out;

    memset(cfg, 0, sizeof(*cfg));
    cfg->prefix_template = o->prefix_template;
    cfg->no_prefix = o->no_prefix;
    cfg->role = opts->work.role;
    cfg->dedup_ms = o->dedup_ms;
    for (int s = 0; s < 2; s++) {
        cfg->filters[s] = o->dup_filters[s];
        if (o->dup_filters[s] == NULL || o->dup_filters[s][0] == NULL || dirlen == 0)
            continue;
        if (agent_path_fmt(paths[s], PATH_MAX, "%.*s/filtered_%s.log", dirlen, dir,
                           s ? "stderr" : "stdout") == 0)
            cfg->filter_path[s] = paths[s];
    }
}

/* --resume-arg: the worker's command with each TEMPLATE appended ("{}" = the checkpoint's path)
 * when this attempt resumes, so that scripts that resume only when told on their command line
 * (nanoGPT's --init_from=resume, HF's --resume_from_checkpoint PATH) just work. *argv is the
 * command itself otherwise. Returns 0 or -ENOMEM; free with free_resume_argv. */
static int resume_argv(const struct agent *a, char ***argv)
{
    const char *const *t = a->o->ckpt.resume_args;
    size_t n = 0, m = 0;
    char **v;

    *argv = a->o->work.argv;
    if (t == NULL || t[0] == NULL || a->ft.resume_from[0] == '\0')
        return 0;
    while (a->o->work.argv[n] != NULL)
        n++;
    while (t[m] != NULL)
        m++;
    if ((v = calloc(n + m + 1, sizeof(*v))) == NULL)
        return -ENOMEM;
    memcpy(v, a->o->work.argv, n * sizeof(*v));
    for (size_t k = 0; k < m; k++) {
        const char *brace = strstr(t[k], "{}");
        size_t len = strlen(t[k]) + (brace ? strlen(a->ft.resume_from) : 0) + 1;
        if ((v[n + k] = malloc(len)) == NULL) {
            *argv = v;
            return -ENOMEM;
        }
        if (brace != NULL)
            snprintf(v[n + k], len, "%.*s%s%s", (int)(brace - t[k]), t[k], a->ft.resume_from,
                     brace + 2);
        else
            snprintf(v[n + k], len, "%s", t[k]);
    }
    *argv = v;
    return 0;
}

static void free_resume_argv(const struct agent *a, char **argv)
{
    size_t n = 0;

    if (argv == NULL || argv == a->o->work.argv)
        return;
    while (a->o->work.argv[n] != NULL)
        n++;
    for (size_t k = n; argv[k] != NULL; k++)
        free(argv[k]);
    free(argv);
}

/* agent_env_build, plus the evidence hook's variables (evidence.h) when it is on. */
static int build_env(struct agent *a, const struct agent_worker_info *info, struct agent_env *full)
{
    struct agent_env env;
    int rc;

    if (!a->ft.ev_on)
        return agent_env_build(info, environ, full);
    agent_env_init(&env);
    agent_env_init(full);
    rc = agent_env_for_worker(&env, info, environ);
    if (rc == 0)
        rc = agent_evidence_env(&a->ft.ev, &env, environ, a->o->work.torch_version);
    if (rc == 0)
        rc = agent_env_merge(&env, environ, full);
    agent_env_free(&env);
    return rc;
}

/* Builds worker i's spec and spawns it. Returns 0 or a negative errno. */
int agent__spawn_one(struct agent *a, int i)
{
    const struct agent_options *o = a->o;
    const struct agent_numa *numa = o->work.numa;
    struct agent_worker_spec spec = {.argv = o->work.argv,
                                     .file = {-1, -1},
                                     .bind =
                                         numa != NULL && i < numa->nbind ? &numa->bind[i] : NULL};
    struct agent_worker_info info;
    struct agent_env full;
    char dir[PATH_MAX] = "", error_file[PATH_MAX] = "", heartbeat[PATH_MAX] = "";
    char filter_paths[2][PATH_MAX];
    struct agent_output_cfg out_cfg;
    char **argv = NULL;
    int rc;

    agent_env_init(&full);
    rc = agent_logdir_worker(&a->logdir, a->as.restart_count, i, 1, dir, error_file);
    if (rc != 0) {
        mc_error("cannot create the log directory of local_rank %d: %s", i, strerror(-rc));
        goto out;
    }
    unlink(error_file); /* a stale file of an earlier run would be taken for this one's */
    agent__worker_streams(dir, o->out.log_dir != NULL, o->out.redirect[i], o->out.tee[i],
                          o->out.shown[i], &spec);
    output_cfg(o, dir, filter_paths, &out_cfg);
    spec.output = &out_cfg;
    worker_info(a, i, error_file, &info);
    if (a->ft.hang_on) {
        agent_hang_file(&a->ft.hang, a->as.restart_count, i, heartbeat);
        info.heartbeat_file = heartbeat;
    }
    /* certificate mode too: workers get the worker credential, not this node's certificate and
     * key (libmuster connects with the worker credential's PSK) */
    rc = build_env(a, &info, &full);
    if (rc != 0) {
        for (int s = 0; s < 2; s++)
            if (spec.file[s] >= 0)
                close(spec.file[s]);
        goto out;
    }
    spec.env = full.vars;
    if ((rc = resume_argv(a, &argv)) == 0) {
        spec.argv = argv;
        rc = agent_group_spawn(a->group, i, info.rank, &spec);
        if (rc == 0 && a->ft.hang_on)
            agent_hang_watch(&a->ft.hang, i, a->group->workers[i].pid);
    }
out:
    free_resume_argv(a, argv);
    agent_env_free(&full);
    return rc;
}

/* ---- failure records ---------------------------------------------------------------- */

/* A stream's tail as text for the signature: NULs (a binary write) would end it early. */
static void tail_text(const struct agent_output *o, char *buf, size_t len)
{
    size_t n = agent_output_tail(o, buf, len);

    for (size_t i = 0; i < n; i++)
        if (buf[i] == '\0')
            buf[i] = ' ';
}

/* One loop thread: static buffers, not 24 KiB of stack per failure. */
static char sig_err[AGENT_OUTPUT_TAIL], sig_out[AGENT_OUTPUT_TAIL], sig_stack[AGENT_OUTPUT_TAIL];

/* The failure's signature (signature.h) from what is left of the worker: its exit status, its
 * error file's message (f->text) and call stack (sig_stack), and the tails of its streams,
 * drained before the exit is reported. */
static void fill_signature(const struct agent_worker *w, struct rdzv_failure *f)
{
    struct agent_sig_input in = {.exit_code = f->exit_code,
                                 .signal = f->signal,
                                 .error_msg = f->text,
                                 .error_stack = sig_stack,
                                 .err_tail = sig_err,
                                 .out_tail = sig_out};
    struct agent_signature sig;

    tail_text(&w->out[1], sig_err, sizeof(sig_err));
    tail_text(&w->out[0], sig_out, sizeof(sig_out));
    agent_signature_derive(&in, &sig);
    f->sig_class = sig.cls;
    snprintf(f->sig, sizeof(f->sig), "%s", sig.text);
}

void agent__fill_failure(struct agent *a, const struct agent_worker *w, struct rdzv_failure *f)
{
    char dir[PATH_MAX];

    memset(f, 0, sizeof(*f));
    sig_stack[0] = '\0';
    f->round = a->as.round;
    f->rank = w->rank;
    f->local_rank = w->local_rank;
    f->exit_code = w->term_signal ? -1 : (int32_t)w->exit_status;
    f->signal = w->term_signal;
    f->time_ms = w->exit_time_ms;
    snprintf(f->host, sizeof(f->host), "%s", a->host);
    agent_logdir_worker(&a->logdir, a->as.restart_count, w->local_rank, 0, dir,
                        a->local_error_file);
    if (a->local_error_file[0] == '\0' ||
        agent_error_file_read(a->local_error_file, f->text, sizeof(f->text), sig_stack,
                              sizeof(sig_stack)) == -ENOENT)
        a->local_error_file[0] = '\0';
    fill_signature(w, f);
}

void agent__spawn_failure(struct agent *a, int i, int err, struct rdzv_failure *f)
{
    struct agent_worker w = {.local_rank = i,
                             .rank = (int)a->as.rank_offset + i,
                             .exit_status = err == -ENOENT ? 127 : 126};
    struct timeval tv;

    gettimeofday(&tv, NULL);
    w.exit_time_ms = (uint64_t)tv.tv_sec * 1000 + (uint64_t)tv.tv_usec / 1000;
    agent__fill_failure(a, &w, f);
    snprintf(f->text, sizeof(f->text), "cannot execute '%s': %s", a->o->work.argv[0],
             strerror(-err));
}
