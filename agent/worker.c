#include "worker.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "group.h"
#include "log.h"
#include "proctree.h"
#include "spawn.h"
#include "clock.h"

void agent__group_handle_closed(struct agent_group *g);

/* One loop thread, and read_cb consumes the bytes before returning: a single buffer serves
 * every pipe. */
static char read_buf[64 * 1024];

/* What drain_pipe reads at most after the worker exited: the pipe's worth (64 KiB by default,
 * F_SETPIPE_SZ may raise it) and some; grandchildren still writing fast must not keep the loop
 * here, nor fill the sinks past their hard limit. */
#define DRAIN_MAX (1024 * 1024)

static void on_handle_closed(uv_handle_t *h)
{
    struct agent_worker *w = h->data;
    agent__group_handle_closed(w->group);
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    buf->base = read_buf;
    buf->len = sizeof(read_buf);
}

static void data(struct agent_worker *w, int i, const char *buf, size_t n)
{
    if (w->group != NULL && w->group->cbs->data_cb != NULL)
        w->group->cbs->data_cb(w->group, w, i, buf, n);
}

static void close_pipe(struct agent_worker *w, int i)
{
    if (!w->pipe_open[i])
        return;
    w->pipe_open[i] = 0;
    data(w, i, NULL, 0);
    agent_output_close(&w->out[i]);
    uv_read_stop((uv_stream_t *)&w->pipe[i]);
    uv_close((uv_handle_t *)&w->pipe[i], on_handle_closed);
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct agent_worker *w = s->data;
    int i = s == (uv_stream_t *)&w->pipe[1];

    if (nread > 0) {
        if (w->group != NULL && w->group->cbs->output_cb != NULL) /* progress: goodput, hangs */
            w->group->cbs->output_cb(w->group, w, i);
        data(w, i, buf->base, (size_t)nread);
        /* the console or the log file holds its budget: the worker waits in its own write()
         * until they drain (resume_reading), never the agent */
        if (agent_output_feed(&w->out[i], buf->base, (size_t)nread))
            uv_read_stop(s);
    } else if (nread < 0)
        close_pipe(w, i); /* EOF or error: the worker closed its end */
}

/* The exit notification can overtake the last bytes the worker wrote: they are already in
 * the pipe, so read them synchronously before closing, or the final lines (often the error
 * message) would be lost. Grandchildren that keep the pipe open lose what they write later. */
static void drain_pipe(struct agent_worker *w, int i)
{
    uv_os_fd_t fd;
    ssize_t n;
    size_t total = 0;

    if (!w->pipe_open[i] || uv_fileno((uv_handle_t *)&w->pipe[i], &fd) != 0)
        return;
    /* over budget or not: what the exited worker left is bounded by DRAIN_MAX */
    while (total < DRAIN_MAX &&
           ((n = read(fd, read_buf, sizeof(read_buf))) > 0 || (n < 0 && errno == EINTR)))
        if (n > 0) {
            data(w, i, read_buf, (size_t)n);
            agent_output_feed(&w->out[i], read_buf, (size_t)n);
            total += (size_t)n;
        }
    close_pipe(w, i);
}

int agent_worker_reap(struct agent_worker *w)
{
    int status;
    pid_t r;

    if (!w->alive)
        return 0;
    while ((r = waitpid(w->pid, &status, WNOHANG)) < 0 && errno == EINTR)
        ;
    if (r != w->pid)
        return 0;
    w->exit_time_ms = mc_wall_ms();
    w->exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
    w->term_signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    w->alive = 0;
    drain_pipe(w, 0);
    drain_pipe(w, 1);
    return 1;
}

static void resume_reading(struct agent_output *o, void *data)
{
    struct agent_worker *w = data;
    int i = o == &w->out[1];

    if (w->pipe_open[i] && uv_read_start((uv_stream_t *)&w->pipe[i], alloc_cb, read_cb) != 0)
        close_pipe(w, i); /* cannot happen on an open pipe; if it did, the worker gets EPIPE */
}

/* Decides where stream i goes. Sets *child_fd to what the child gets as fd 1+i and, when
 * the agent reads the stream, opens the pipe. Returns 0 or a negative errno. */
static int setup_stream(uv_loop_t *loop, struct agent_worker *w, const struct agent_worker_spec *s,
                        int i, int *child_fd)
{
    int fds[2], rc;

    *child_fd = -1;
    if (s->console[i] < 0) {
        /* redirect only: the worker writes the file itself and the agent stays out of it;
         * neither file nor console: /dev/null */
        *child_fd = s->file[i];
        return 0;
    }
    if (pipe2(fds, O_CLOEXEC) != 0)
        return -errno;
    if ((rc = uv_pipe_init(loop, &w->pipe[i], 0)) != 0) {
        close(fds[0]);
        close(fds[1]);
        return rc;
    }
    w->pipe[i].data = w;
    w->pipe_open[i] = 1; /* from here on close_pipe() owns the handle */
    w->group->open_handles++;
    if ((rc = uv_pipe_open(&w->pipe[i], fds[0])) != 0) {
        close(fds[0]);
        close(fds[1]);
        return rc;
    }
    agent_output_init(&w->out[i], s->console[i], s->file[i], w->rank);
    agent_output_configure(&w->out[i], loop, s->output, w->local_rank, i);
    agent_output_on_resume(&w->out[i], resume_reading, w);
    *child_fd = fds[1];
    return 0;
}

int agent_worker_spawn(uv_loop_t *loop, struct agent_worker *w, const struct agent_worker_spec *s)
{
    int cgroup_err = 0, bind_err = 0;
    struct agent_spawn_opts o = {.file = s->argv[0],
                                 .argv = s->argv,
                                 .envp = s->env,
                                 .stdio = {0, -1, -1},
                                 .cgroup_err = &cgroup_err,
                                 .bind = s->bind,
                                 .bind_err = &bind_err};
    int rc = 0;

    o.join_cgroup = agent_proctree_group_fds(&w->group->tree, &o.cgroup_dir_fd, &o.cgroup_procs_fd);

    for (int i = 0; i < 2 && rc == 0; i++)
        rc = setup_stream(loop, w, s, i, &o.stdio[1 + i]);
    if (rc == 0)
        rc = agent_spawn(&o, &w->pid);
    if (rc == 0) {
        w->alive = 1;
        if (bind_err != 0)
            mc_warn("worker local_rank %d: --numa-binding not (fully) applied: %s", w->local_rank,
                    strerror(bind_err));
        agent_proctree_group_started(&w->group->tree, w->local_rank, w->pid, cgroup_err);
        for (int i = 0; i < 2 && rc == 0; i++)
            if (w->pipe_open[i])
                rc = uv_read_start((uv_stream_t *)&w->pipe[i], alloc_cb, read_cb);
        if (rc != 0) {
            /* cannot happen for a fresh pipe; if it does, the worker must not run unseen:
             * it dies and is reported like any other failed worker */
            mc_error("cannot read worker output: %s", uv_strerror(rc));
            kill(w->pid, SIGKILL);
            rc = 0;
        }
    } else {
        w->pid = 0;
    }
    for (int i = 0; i < 2; i++) {
        if (w->pipe_open[i] && o.stdio[1 + i] >= 0)
            close(o.stdio[1 + i]); /* the child's end of the pipe */
        /* a redirected file was dup'ed into the child; a tee'd one is owned by out[i] */
        if (s->file[i] >= 0 && !(w->pipe_open[i] && w->out[i].file_fd == s->file[i]))
            close(s->file[i]);
        if (rc != 0)
            close_pipe(w, i);
    }
    return rc;
}

void agent_worker_kill(struct agent_worker *w, int sig)
{
    if (w->pid > 0)
        kill(-w->pid, sig); /* ESRCH once the whole group is gone: nothing to do */
}
