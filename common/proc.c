/* One helper program run to its end on a private libuv loop (see proc.h). */
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "log.h"

extern char **environ;

#define CAPTURE_DEFAULT 4096

struct run {
    uv_loop_t loop;
    uv_signal_t sig[3]; /* SIGCHLD, SIGINT, SIGTERM */
    uv_timer_t timer;
    uv_pipe_t out;
    int nsig, has_timer, has_out, out_open;
    pid_t pid;
    int exited, term_sent;
    uint64_t grace_ms;
    struct mc_proc_result *r;
    size_t cap;       /* bytes of r->out that hold output (one more for the NUL) */
    char drain[1024]; /* past cap, output is read into this and dropped */
};

int mc_proc_exit_code(int status)
{
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int is_exe(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

static int try_dir(const char *dir, size_t dirlen, const char *name, char *path, size_t len)
{
    int n = snprintf(path, len, "%.*s/%s", (int)dirlen, dir, name);
    return dirlen > 0 && n > 0 && (size_t)n < len && is_exe(path);
}

int mc_proc_find(const char *name, int driver_dirs, char *path, size_t len)
{
    static const char *const extra[] = {"/usr/local/nvidia/bin", "/usr/bin"};
    const char *p = getenv("PATH");

    while (p != NULL && *p != '\0') {
        const char *end = strchr(p, ':');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (try_dir(p, n, name, path, len))
            return 0;
        p = end ? end + 1 : NULL;
    }
    for (size_t i = 0; driver_dirs && i < sizeof(extra) / sizeof(extra[0]); i++)
        if (try_dir(extra[i], strlen(extra[i]), name, path, len))
            return 0;
    if (len > 0)
        path[0] = '\0';
    return -ENOENT;
}

void mc_proc_result_free(struct mc_proc_result *r)
{
    if (r == NULL)
        return;
    free(r->out);
    r->out = NULL;
    r->out_len = 0;
}

static void close_if_open(uv_handle_t *h)
{
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

/* The timer outlives the child while its output is still open (a grandchild may hold it), so
 * the deadline still bounds the run; everything closes once both are done. */
static void close_watchers(struct run *x)
{
    for (int i = 0; i < x->nsig; i++)
        close_if_open((uv_handle_t *)&x->sig[i]);
    if (x->has_timer && !x->out_open)
        close_if_open((uv_handle_t *)&x->timer);
}

static void on_signal(uv_signal_t *h, int signum)
{
    struct run *x = h->data;
    int st;

    if (signum != SIGCHLD) {
        /* the child has its own session, so the terminal's ^C reaches only us */
        if (x->pid > 0 && !x->exited)
            kill(-x->pid, signum);
        x->r->forwarded = signum;
        return;
    }
    if (x->pid > 0 && !x->exited && waitpid(x->pid, &st, WNOHANG) == x->pid) {
        x->exited = 1;
        x->r->status = st;
        close_watchers(x);
    }
}

static void on_timeout(uv_timer_t *t)
{
    struct run *x = t->data;

    if (x->exited) { /* only its output is still open: stop waiting for it */
        x->out_open = 0;
        close_if_open((uv_handle_t *)&x->out);
        close_if_open((uv_handle_t *)t);
        return;
    }
    x->r->timed_out = 1;
    if (x->grace_ms > 0 && !x->term_sent) {
        x->term_sent = 1;
        kill(-x->pid, SIGTERM);
        uv_timer_start(t, on_timeout, x->grace_ms, 0);
        return;
    }
    kill(-x->pid, SIGKILL);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    struct run *x = h->data;

    (void)hint;
    /* past the limit, keep draining so the child never blocks on a full pipe */
    if (x->r->out_len >= x->cap)
        *b = uv_buf_init(x->drain, sizeof(x->drain));
    else
        *b = uv_buf_init(x->r->out + x->r->out_len, (unsigned)(x->cap - x->r->out_len));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    struct run *x = s->data;

    if (n > 0 && b->base != x->drain)
        x->r->out_len += (size_t)n;
    if (n < 0) {
        x->out_open = 0;
        close_if_open((uv_handle_t *)s);
        if (x->exited && x->has_timer)
            close_if_open((uv_handle_t *)&x->timer);
    }
}

/* SIGCHLD always (before the fork, so no exit is missed), SIGINT and SIGTERM when forwarding. */
static int watch_signals(struct run *x, int forward)
{
    static const int sigs[3] = {SIGCHLD, SIGINT, SIGTERM};
    int rc;

    for (int i = 0; i < (forward ? 3 : 1); i++) {
        if ((rc = uv_signal_init(&x->loop, &x->sig[i])) != 0)
            return rc;
        x->nsig++;
        x->sig[i].data = x;
        if ((rc = uv_signal_start(&x->sig[i], on_signal, sigs[i])) != 0)
            return rc;
    }
    return 0;
}

/* In the child, between fork and exec: only async-signal-safe calls. Reports a failed exec's
 * errno on errfd. Each fd is first copied above 2, so that installing one as 0..2 cannot
 * overwrite another still to be installed. */
static void child_exec(const struct mc_proc_opts *o, const int src[3], int errfd, pid_t parent)
{
    char *const *envp = o->envp != NULL ? o->envp : environ;
    int tmp[3], e;
    sigset_t none;

    for (int s = 1; s < NSIG; s++)
        signal(s, SIG_DFL); /* libuv's handlers must not run here; SIGKILL/SIGSTOP just fail */
    setsid();
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
        _exit(127); /* the parent is already gone */
    for (int i = 0; i < 3; i++) {
        tmp[i] =
            src[i] >= 0 ? fcntl(src[i], F_DUPFD_CLOEXEC, 3) : open("/dev/null", O_RDWR | O_CLOEXEC);
        if (tmp[i] < 0)
            goto fail;
    }
    for (int i = 0; i < 3; i++)
        if (dup2(tmp[i], i) < 0)
            goto fail;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execvpe(o->argv[0], o->argv, envp);
fail:
    e = errno;
    if (write(errfd, &e, sizeof(e)) < 0)
        e = 0;
    _exit(127);
}

/* Forks with every signal blocked (restored in both after the fork) and waits until the child
 * exec'd or failed to. Returns 0 with x->pid set, or the exec's negative errno (reaped). */
static int start_child(struct run *x, const struct mc_proc_opts *o, const int src[3])
{
    sigset_t all, old;
    int ep[2], e = 0;
    pid_t parent = getpid();
    ssize_t n;

    if (pipe2(ep, O_CLOEXEC) != 0)
        return -errno;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    x->pid = fork();
    if (x->pid == 0)
        child_exec(o, src, ep[1], parent);
    e = x->pid < 0 ? errno : 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(ep[1]);
    if (x->pid < 0) {
        close(ep[0]);
        return -e;
    }
    while ((n = read(ep[0], &e, sizeof(e))) < 0 && errno == EINTR)
        ;
    close(ep[0]);
    if (n == (ssize_t)sizeof(e)) { /* exec failed: the child _exit()s at once */
        while (waitpid(x->pid, &x->r->status, 0) < 0 && errno == EINTR)
            ;
        x->exited = 1;
        return e > 0 ? -e : -ENOEXEC;
    }
    return 0;
}

/* Starts the reader on the pipe's read end (takes ownership of fd) and the deadline. */
static int watch_child(struct run *x, int fd, uint64_t timeout_ms)
{
    int rc;

    if (fd >= 0) {
        if ((rc = uv_pipe_init(&x->loop, &x->out, 0)) != 0) {
            close(fd);
            return rc;
        }
        x->has_out = x->out_open = 1;
        x->out.data = x;
        if ((rc = uv_pipe_open(&x->out, fd)) != 0) {
            close(fd);
            return rc;
        }
        if ((rc = uv_read_start((uv_stream_t *)&x->out, on_alloc, on_read)) != 0)
            return rc;
    }
    if (timeout_ms > 0) {
        if ((rc = uv_timer_init(&x->loop, &x->timer)) != 0)
            return rc;
        x->has_timer = 1;
        x->timer.data = x;
        return uv_timer_start(&x->timer, on_timeout, timeout_ms, 0);
    }
    return 0;
}

/* Runs the loop until every handle closed and closes it. */
static void finish(struct run *x)
{
    uv_run(&x->loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&x->loop) != 0)
        mc_warn("a child's event loop still had handles at exit");
}

int mc_proc_run(const struct mc_proc_opts *o, struct mc_proc_result *r)
{
    struct run *x = calloc(1, sizeof(*x));
    int src[3] = {o->stdio[0], o->stdio[1], o->stdio[2]}, p[2] = {-1, -1}, rc;

    memset(r, 0, sizeof(*r));
    if (x == NULL)
        return -ENOMEM;
    x->r = r;
    x->grace_ms = o->grace_ms;
    x->cap = o->capture_max > 0 ? o->capture_max : CAPTURE_DEFAULT;
    if ((rc = uv_loop_init(&x->loop)) != 0) {
        free(x);
        return rc;
    }
    if ((rc = watch_signals(x, o->forward_signals)) != 0)
        goto out;
    if (o->capture) {
        if ((r->out = malloc(x->cap + 1)) == NULL || pipe2(p, O_CLOEXEC) != 0) {
            rc = r->out == NULL ? -ENOMEM : -errno;
            goto out;
        }
        src[1] = p[1];
    }
    rc = start_child(x, o, src);
    if (p[1] >= 0)
        close(p[1]); /* the child holds its copy: EOF comes when it exits */
    if (rc != 0) {
        if (p[0] >= 0)
            close(p[0]);
        goto out;
    }
    if ((rc = watch_child(x, p[0], o->timeout_ms)) != 0) {
        kill(-x->pid, SIGKILL); /* cannot watch it: do not leave it running; SIGCHLD reaps */
        x->out_open = 0;
        if (x->has_out)
            close_if_open((uv_handle_t *)&x->out);
        rc = 0;
    }
out:
    if (rc != 0)
        close_watchers(x);
    finish(x);
    if (r->out != NULL)
        r->out[r->out_len] = '\0';
    free(x);
    return rc;
}
