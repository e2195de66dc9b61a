#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

struct spawn_ctx {
    const struct agent_spawn_opts *o;
    pid_t parent;
    int err; /* written by the child: shared memory (CLONE_VM), read after it exec'd or died */
    int cgroup_err;
};

/* The child runs on this stack while the parent is suspended (CLONE_VFORK), so one stack
 * serves every spawn of the (single) loop thread. It is touched only a few pages deep. */
static _Alignas(64) char child_stack[256 * 1024];

/* Moves the fds meant for 0..2 out of that range first, so that installing one cannot close
 * another (e.g. the caller's stdout handed over as the child's stderr). */
static int install_stdio(const int *want)
{
    int fd[3];

    for (int i = 0; i < 3; i++) {
        fd[i] = want[i] >= 0 ? fcntl(want[i], F_DUPFD_CLOEXEC, 3) : open("/dev/null", O_RDWR | O_CLOEXEC);
        if (fd[i] < 0)
            return -1;
    }
    for (int i = 0; i < 3; i++)
        if (dup2(fd[i], i) < 0) /* dup2 clears close-on-exec on the new fd */
            return -1;
    return 0;
}

/* Async-signal-safe calls only: this shares the parent's memory. */
static int child_main(void *arg)
{
    struct spawn_ctx *c = arg;
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigset_t none;

    /* handlers do not survive exec, but ignored signals (SIGPIPE) would; and a handler must
     * not run on this borrowed stack before exec */
    for (int s = 1; s < NSIG; s++)
        if (s != SIGKILL && s != SIGSTOP)
            sigaction(s, &dfl, NULL);
    sigemptyset(&none);
    if (setsid() < 0 || prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        goto fail;
    if (getppid() != c->parent) { /* the agent died before PDEATHSIG was armed */
        errno = ESRCH;
        goto fail;
    }
    /* Before exec, so nothing the program starts can be born outside. Not clone3's
     * CLONE_INTO_CGROUP: glibc has no wrapper and a CLONE_VM child on its own stack needs
     * assembly; the write costs ~10 us here (60 us for a process's first migration). */
    if (c->o->join_cgroup && write(c->o->cgroup_fd, "0", 1) != 1)
        c->cgroup_err = errno ? errno : EIO;
    if (install_stdio(c->o->stdio) != 0)
        goto fail;
    sigprocmask(SIG_SETMASK, &none, NULL);
    execvpe(c->o->file, c->o->argv, c->o->envp);
fail:
    c->err = errno ? errno : EINVAL;
    _exit(127);
}

int agent_spawn(const struct agent_spawn_opts *o, pid_t *pid)
{
    struct spawn_ctx c = {.o = o, .parent = getpid()};
    sigset_t all, old;
    pid_t p;

    /* No signal may be delivered to the child before it reset the handlers (they would run
     * libuv's code in the child); the parent's mask is restored right after. */
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &old);
    p = clone(child_main, child_stack + sizeof(child_stack), CLONE_VM | CLONE_VFORK | SIGCHLD, &c);
    int clone_err = errno;
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (p < 0)
        return -clone_err;
    if (o->cgroup_err != NULL)
        *o->cgroup_err = c.cgroup_err;
    if (c.err != 0) {
        while (waitpid(p, NULL, 0) < 0 && errno == EINTR)
            ;
        return -c.err;
    }
    *pid = p;
    return 0;
}
