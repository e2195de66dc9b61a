#include "worker.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "group.h"

void agent_group_handle_closed_(struct agent_group *g);
void agent_group_worker_exited_(struct agent_group *g, struct agent_worker *w);

/* One loop thread, and read_cb consumes the bytes before returning: a single buffer serves
 * every pipe. */
static char read_buf[64 * 1024];

static void on_handle_closed(uv_handle_t *h)
{
    struct agent_worker *w = h->data;
    agent_group_handle_closed_(w->group);
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    buf->base = read_buf;
    buf->len = sizeof(read_buf);
}

static void close_pipe(struct agent_worker *w, int i)
{
    if (!w->pipe_open[i])
        return;
    w->pipe_open[i] = 0;
    agent_output_close(&w->out[i]);
    uv_read_stop((uv_stream_t *)&w->pipe[i]);
    uv_close((uv_handle_t *)&w->pipe[i], on_handle_closed);
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct agent_worker *w = s->data;
    int i = s == (uv_stream_t *)&w->pipe[1];

    if (nread > 0)
        agent_output_feed(&w->out[i], buf->base, (size_t)nread);
    else if (nread < 0)
        close_pipe(w, i); /* EOF or error: the worker closed its end */
}

/* The exit notification can overtake the last bytes the worker wrote: they are already in
 * the pipe, so read them synchronously before closing, or the final lines (often the error
 * message) would be lost. Grandchildren that keep the pipe open lose what they write later. */
static void drain_pipe(struct agent_worker *w, int i)
{
    uv_os_fd_t fd;
    ssize_t n;

    if (!w->pipe_open[i] || uv_fileno((uv_handle_t *)&w->pipe[i], &fd) != 0)
        return;
    while ((n = read(fd, read_buf, sizeof(read_buf))) > 0 || (n < 0 && errno == EINTR))
        if (n > 0)
            agent_output_feed(&w->out[i], read_buf, (size_t)n);
    close_pipe(w, i);
}

static void exit_cb(uv_process_t *p, int64_t exit_status, int term_signal)
{
    struct agent_worker *w = p->data;
    struct timeval tv;

    gettimeofday(&tv, NULL);
    w->exit_time_ms = (uint64_t)tv.tv_sec * 1000 + (uint64_t)tv.tv_usec / 1000;
    w->exit_status = exit_status;
    w->term_signal = term_signal;
    w->alive = 0;
    drain_pipe(w, 0);
    drain_pipe(w, 1);
    w->proc_open = 0;
    uv_close((uv_handle_t *)p, on_handle_closed);
    agent_group_worker_exited_(w->group, w);
}

static int setup_stream(uv_loop_t *loop, struct agent_worker *w, const struct agent_worker_spec *s,
                        int i, uv_stdio_container_t *c)
{
    int rc;

    if (s->console[i] < 0 && s->file[i] >= 0) {
        /* redirect only: the worker writes the file itself, the agent stays out of it */
        c->flags = UV_INHERIT_FD;
        c->data.fd = s->file[i];
        return 0;
    }
    if (s->console[i] < 0) {
        c->flags = UV_IGNORE; /* filtered out and not logged */
        return 0;
    }
    if ((rc = uv_pipe_init(loop, &w->pipe[i], 0)) != 0)
        return rc;
    w->pipe[i].data = w;
    w->pipe_open[i] = 1;
    w->group->open_handles++;
    agent_output_init(&w->out[i], s->console[i], s->file[i], w->rank);
    c->flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    c->data.stream = (uv_stream_t *)&w->pipe[i];
    return 0;
}

static char **wrapper_argv(const struct agent_worker_spec *s, char *ppid)
{
    size_t n = 0;
    while (s->argv[n])
        n++;
    char **argv = calloc(n + 4, sizeof(*argv));
    if (argv == NULL)
        return NULL;
    argv[0] = "muster";
    argv[1] = "__worker";
    argv[2] = ppid;
    memcpy(argv + 3, s->argv, n * sizeof(*argv));
    return argv;
}

int agent_worker_spawn(uv_loop_t *loop, struct agent_worker *w, const struct agent_worker_spec *s)
{
    uv_stdio_container_t stdio[3] = {{.flags = UV_INHERIT_FD, .data.fd = 0}};
    uv_process_options_t o = {0};
    char ppid[24];
    char **argv = NULL;
    int rc;

    snprintf(ppid, sizeof(ppid), "%d", (int)getpid());
    if ((rc = setup_stream(loop, w, s, 0, &stdio[1])) != 0 ||
        (rc = setup_stream(loop, w, s, 1, &stdio[2])) != 0)
        goto out;
    if ((argv = wrapper_argv(s, ppid)) == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    o.file = s->exe;
    o.args = argv;
    o.env = s->env;
    o.flags = UV_PROCESS_DETACHED; /* setsid(): a process group we can signal as a whole */
    o.stdio_count = 3;
    o.stdio = stdio;
    o.exit_cb = exit_cb;
    w->proc.data = w;
    rc = uv_spawn(loop, &w->proc, &o);
    /* uv_spawn leaves the handle initialised even when it fails: it must be closed */
    w->proc_open = 1;
    w->group->open_handles++;
    if (rc == 0) {
        w->pid = w->proc.pid;
        w->alive = 1;
        for (int i = 0; i < 2 && rc == 0; i++)
            if (w->pipe_open[i])
                rc = uv_read_start((uv_stream_t *)&w->pipe[i], alloc_cb, read_cb);
        if (rc != 0) {
            /* cannot happen for a fresh pipe; if it does, the worker must not run unseen:
             * it dies and is reported like any other failed worker */
            fprintf(stderr, "muster: cannot read worker output: %s\n", uv_strerror(rc));
            uv_kill(w->pid, SIGKILL);
            rc = 0;
        }
    } else {
        w->proc_open = 0;
        uv_close((uv_handle_t *)&w->proc, on_handle_closed);
    }
out:
    free(argv);
    for (int i = 0; i < 2; i++) {
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
        uv_kill(-w->pid, sig); /* ESRCH once the whole group is gone: nothing to do */
}
