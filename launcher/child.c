/* One child program run to its end on a private libuv loop (see child.h). */
#include "child.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "spawn.h"

extern char **environ;

static void close_if_open(uv_handle_t *h)
{
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

/* The pipe closes itself at EOF; everything else closes once the child is reaped. */
static void close_watchers(struct launcher_child *c)
{
    for (int i = 0; i < c->nsig; i++)
        close_if_open((uv_handle_t *)&c->sig[i]);
    if (c->has_timer)
        close_if_open((uv_handle_t *)&c->timer);
}

static void on_signal(uv_signal_t *h, int signum)
{
    struct launcher_child *c = h->data;
    int st;

    if (signum != SIGCHLD) {
        /* the child has its own session, so the terminal's ^C reaches only us */
        if (c->pid > 0 && !c->exited)
            kill(-c->pid, signum);
        c->forwarded = signum;
        return;
    }
    if (c->pid > 0 && !c->exited && waitpid(c->pid, &st, WNOHANG) == c->pid) {
        c->exited = 1;
        c->status = st;
        close_watchers(c);
    }
}

static void on_timeout(uv_timer_t *t)
{
    struct launcher_child *c = t->data;

    if (!c->exited) {
        c->timed_out = 1;
        kill(-c->pid, SIGKILL);
    }
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    struct launcher_child *c = h->data;

    (void)hint;
    /* past the limit, keep draining into the last byte so the child never blocks on a full pipe */
    if (c->len >= sizeof(c->buf) - 1)
        *b = uv_buf_init(c->buf + sizeof(c->buf) - 1, 1);
    else
        *b = uv_buf_init(c->buf + c->len, (unsigned)(sizeof(c->buf) - 1 - c->len));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    struct launcher_child *c = s->data;

    (void)b;
    if (n > 0 && c->len < sizeof(c->buf) - 1)
        c->len += (size_t)n;
    if (n < 0)
        close_if_open((uv_handle_t *)s);
}

/* Starts the loop's watchers: SIGCHLD always (before the spawn, so no exit is missed), SIGINT
 * and SIGTERM when forwarding. */
static int watch_signals(struct launcher_child *c, int forward)
{
    static const int sigs[3] = {SIGCHLD, SIGINT, SIGTERM};
    int rc;

    for (int i = 0; i < (forward ? 3 : 1); i++) {
        if ((rc = uv_signal_init(&c->loop, &c->sig[i])) != 0)
            return rc;
        c->nsig++;
        c->sig[i].data = c;
        if ((rc = uv_signal_start(&c->sig[i], on_signal, sigs[i])) != 0)
            return rc;
    }
    return 0;
}

/* Starts the reader on the pipe's read end (takes ownership of fd) and the time limit. */
static int watch_output(struct launcher_child *c, int fd, uint64_t timeout_ms)
{
    int rc;

    if (fd >= 0) {
        if ((rc = uv_pipe_init(&c->loop, &c->out, 0)) != 0) {
            close(fd);
            return rc;
        }
        c->has_out = 1;
        c->out.data = c;
        if ((rc = uv_pipe_open(&c->out, fd)) != 0) {
            close(fd);
            return rc;
        }
        if ((rc = uv_read_start((uv_stream_t *)&c->out, on_alloc, on_read)) != 0)
            return rc;
    }
    if (timeout_ms > 0) {
        if ((rc = uv_timer_init(&c->loop, &c->timer)) != 0)
            return rc;
        c->has_timer = 1;
        c->timer.data = c;
        return uv_timer_start(&c->timer, on_timeout, timeout_ms, 0);
    }
    return 0;
}

int launcher_child_run(struct launcher_child *c, char *const *argv, int capture, int out_fd,
                       uint64_t timeout_ms)
{
    struct agent_spawn_opts so = {
        .file = argv[0], .argv = argv, .envp = environ, .stdio = {0, out_fd, 2}};
    int p[2] = {-1, -1}, rc;

    memset(c, 0, sizeof(*c));
    if ((rc = uv_loop_init(&c->loop)) != 0)
        return rc;
    if ((rc = watch_signals(c, !capture)) != 0)
        goto out;
    if (capture) {
        if (pipe2(p, O_CLOEXEC) != 0) {
            rc = -errno;
            goto out;
        }
        so.stdio[0] = so.stdio[2] = -1;
        so.stdio[1] = p[1];
    }
    rc = agent_spawn(&so, &c->pid);
    if (p[1] >= 0)
        close(p[1]); /* the child holds its copy: EOF comes when it exits */
    if (rc != 0) {
        if (p[0] >= 0)
            close(p[0]);
        goto out;
    }
    if ((rc = watch_output(c, p[0], timeout_ms)) != 0) {
        kill(-c->pid, SIGKILL); /* cannot watch it: do not leave it running; SIGCHLD reaps */
        if (c->has_out)
            close_if_open((uv_handle_t *)&c->out);
        rc = 0;
    }
out:
    if (rc != 0)
        close_watchers(c);
    uv_run(&c->loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&c->loop) != 0)
        fprintf(stderr, "muster: warning: a child's event loop still had handles at exit\n");
    return rc;
}
