#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/mempolicy.h> /* MPOL_PREFERRED */
#include <linux/sched.h>     /* struct clone_args, CLONE_INTO_CGROUP */
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

struct spawn_ctx {
    const struct agent_spawn_opts *o;
    pid_t parent;
    int err; /* written by the child: shared memory (CLONE_VM), read after it exec'd or died */
    int write_cgroup; /* the child joins by writing cgroup.procs (no clone3) */
    int cgroup_err;
    int bind_err;
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
        fd[i] = want[i] >= 0 ? fcntl(want[i], F_DUPFD_CLOEXEC, 3)
                             : open("/dev/null", O_RDWR | O_CLOEXEC);
        if (fd[i] < 0)
            return -1;
    }
    for (int i = 0; i < 3; i++)
        if (dup2(fd[i], i) < 0) /* dup2 clears close-on-exec on the new fd */
            return -1;
    return 0;
}

/* --numa-binding (numa.h), in the child, before exec: the program's first thread and all it
 * starts run there. MPOL_PREFERRED: a full node spills over rather than call the OOM killer.
 * Returns 0 or an errno. */
static int apply_bind(const struct agent_spawn_bind *b)
{
    int err = 0;

    if (CPU_COUNT(&b->cpus) > 0 && sched_setaffinity(0, sizeof(b->cpus), &b->cpus) != 0)
        err = errno;
    if (b->mem_node >= 0 &&
        syscall(SYS_set_mempolicy, MPOL_PREFERRED, b->mems, 8 * sizeof(b->mems) + 1) != 0 &&
        err == 0)
        err = errno;
    return err;
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
    /* before exec, so nothing the program starts can be born outside (see start_child) */
    if (c->write_cgroup && write(c->o->cgroup_procs_fd, "0", 1) != 1)
        c->cgroup_err = errno ? errno : EIO;
    if (c->o->bind != NULL)
        c->bind_err = apply_bind(c->o->bind);
    if (install_stdio(c->o->stdio) != 0)
        goto fail;
    sigprocmask(SIG_SETMASK, &none, NULL);
    execvpe(c->o->file, c->o->argv, c->o->envp);
fail:
    c->err = errno ? errno : EINVAL;
    _exit(127);
}

/* -DMUSTER_NO_CLONE3 builds the other path (cgroup.procs written by the child) for tests */
#if (defined(__x86_64__) || defined(__aarch64__)) && !defined(MUSTER_NO_CLONE3)
/* clone3() with the child on its own stack, which glibc 2.36 does not export: the child starts
 * with the stack pointer at the new stack's top and must not return into the caller's frame,
 * so it calls fn(arg) and exits right there, like glibc's clone(). The parent gets the raw
 * result: a pid or a negative errno. syscall/svc keep the registers used for fn and arg. */
long agent_spawn_clone3_(struct clone_args *ca, size_t size, int (*fn)(void *), void *arg)
    __attribute__((visibility("hidden")));
#if defined(__x86_64__)
__asm__(".text\n"
        ".globl agent_spawn_clone3_\n"
        ".hidden agent_spawn_clone3_\n"
        ".type agent_spawn_clone3_,@function\n"
        "agent_spawn_clone3_:\n"
        "  mov %rdx, %r8\n"
        "  mov %rcx, %r9\n"
        "  mov $435, %eax\n" /* __NR_clone3 */
        "  syscall\n"
        "  test %rax, %rax\n"
        "  jnz 1f\n"
        "  xor %ebp, %ebp\n"
        "  mov %r9, %rdi\n"
        "  call *%r8\n"
        "  mov %eax, %edi\n"
        "  mov $60, %eax\n" /* __NR_exit */
        "  syscall\n"
        "  hlt\n"
        "1: ret\n"
        ".size agent_spawn_clone3_, .-agent_spawn_clone3_\n");
#else
__asm__(".text\n"
        ".globl agent_spawn_clone3_\n"
        ".hidden agent_spawn_clone3_\n"
        ".type agent_spawn_clone3_,%function\n"
        "agent_spawn_clone3_:\n"
        "  mov x10, x2\n"
        "  mov x11, x3\n"
        "  mov x8, #435\n" /* __NR_clone3 */
        "  svc #0\n"
        "  cbnz x0, 1f\n"
        "  mov x29, #0\n"
        "  mov x0, x11\n"
        "  blr x10\n"
        "  mov x8, #93\n" /* __NR_exit */
        "  svc #0\n"
        "1: ret\n"
        ".size agent_spawn_clone3_, .-agent_spawn_clone3_\n");
#endif
#define HAVE_CLONE3 1
#endif

/* Starts the child (the caller blocked every signal). Joining a cgroup: clone3's
 * CLONE_INTO_CGROUP creates the child inside it. Writing "0" to cgroup.procs in the child
 * instead takes the kernel's cgroup_threadgroup_rwsem for writing, whose first use waits for
 * an RCU grace period: 13-24 ms measured on a 16-core host, blocking the agent (CLONE_VFORK);
 * that path is only the fallback where clone3 is refused (Docker's default seccomp profile
 * answers ENOSYS) or on other architectures. Returns a pid or -1 with errno. */
static pid_t start_child(struct spawn_ctx *c)
{
    const int flags = CLONE_VM | CLONE_VFORK;
#ifdef HAVE_CLONE3
    static int no_clone3;

    if (c->o->join_cgroup && c->o->cgroup_dir_fd >= 0 && !no_clone3) {
        struct clone_args ca = {.flags = flags | CLONE_INTO_CGROUP,
                                .exit_signal = SIGCHLD,
                                .stack = (uintptr_t)child_stack,
                                .stack_size = sizeof(child_stack),
                                .cgroup = (uint64_t)c->o->cgroup_dir_fd};
        long p = agent_spawn_clone3_(&ca, sizeof(ca), child_main, c);
        if (p >= 0)
            return (pid_t)p;
        if (p == -ENOSYS || p == -EPERM || p == -E2BIG)
            no_clone3 = 1; /* from now on the write */
        else
            c->cgroup_err = (int)-p; /* the cgroup refuses: start outside, say so */
    }
#endif
    c->write_cgroup = c->o->join_cgroup && c->cgroup_err == 0 && c->o->cgroup_procs_fd >= 0;
    return clone(child_main, child_stack + sizeof(child_stack), flags | SIGCHLD, c);
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
    p = start_child(&c);
    int clone_err = errno;
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (p < 0)
        return -clone_err;
    if (o->cgroup_err != NULL)
        *o->cgroup_err = c.cgroup_err;
    if (o->bind_err != NULL)
        *o->bind_err = c.bind_err;
    if (c.err != 0) {
        while (waitpid(p, NULL, 0) < 0 && errno == EINTR)
            ;
        return -c.err;
    }
    *pid = p;
    return 0;
}
