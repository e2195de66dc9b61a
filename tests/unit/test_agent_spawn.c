/* agent/spawn.c with real child processes: what the child gets (its own session, PDEATHSIG,
 * default signal dispositions and an empty mask, the stdio asked for, a CPU binding, the
 * cgroup.procs write), what the parent keeps (its signal mask), exec failures reported and
 * reaped, and a child that really dies with the thread that started it.
 *
 * The child reports on itself by running this very program with "report" (main below): a
 * shell cannot read its PR_GET_PDEATHSIG. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "spawn.h"

extern char **environ;

/* The child's side: one line about itself on stdout. */
static int report(void)
{
    int pdeathsig = -1, blocked = 0, ignored = 0, handled = 0;
    struct sigaction sa;
    sigset_t mask;
    cpu_set_t cpus;

    prctl(PR_GET_PDEATHSIG, &pdeathsig);
    sigprocmask(SIG_SETMASK, NULL, &mask);
    for (int s = 1; s < NSIG; s++) {
        if (s == SIGKILL || s == SIGSTOP || sigaction(s, NULL, &sa) != 0)
            continue;
        blocked += sigismember(&mask, s) == 1;
        ignored += sa.sa_handler == SIG_IGN;
        handled += sa.sa_handler != SIG_IGN && sa.sa_handler != SIG_DFL;
    }
    CPU_ZERO(&cpus);
    sched_getaffinity(0, sizeof(cpus), &cpus);
    printf("pdeathsig=%d session=%d group=%d blocked=%d ignored=%d handled=%d cpus=%d cpu0=%d\n",
           pdeathsig, getsid(0) == getpid(), getpgid(0) == getpid(), blocked, ignored, handled,
           CPU_COUNT(&cpus), CPU_ISSET(0, &cpus));
    return 0;
}

static char self[4096]; /* this program, for "report" */

/* Spawns o (stdout into a pipe when o->stdio[1] is -2), waits for the child and returns its
 * exit status; what it wrote goes to out. */
static int run_child(struct agent_spawn_opts *o, char *out, size_t len)
{
    int fds[2], status = -1;
    pid_t pid = 0;

    assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
    o->stdio[1] = fds[1];
    assert_int_equal(agent_spawn(o, &pid), 0);
    assert_true(pid > 0);
    close(fds[1]);
    size_t got = 0;
    ssize_t n;
    while (got + 1 < len && (n = read(fds[0], out + got, len - 1 - got)) > 0)
        got += (size_t)n;
    out[got] = '\0';
    close(fds[0]);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

static void test_child_state(void **state)
{
    char *argv[] = {self, "report", NULL};
    struct agent_spawn_opts o = {
        .file = self, .argv = argv, .envp = environ, .stdio = {-1, -1, -1}};
    struct sigaction ign = {.sa_handler = SIG_IGN}, old_pipe, old_usr2;
    sigset_t block, before, after;
    char out[512];

    /* the parent blocks one signal and ignores two: the child must get none of that */
    sigemptyset(&block);
    sigaddset(&block, SIGUSR1);
    sigprocmask(SIG_BLOCK, &block, &before);
    sigaction(SIGPIPE, &ign, &old_pipe);
    sigaction(SIGUSR2, &ign, &old_usr2);
    int status = run_child(&o, out, sizeof(out));
    sigprocmask(SIG_SETMASK, NULL, &after);
    sigprocmask(SIG_SETMASK, &before, NULL);
    sigaction(SIGPIPE, &old_pipe, NULL);
    sigaction(SIGUSR2, &old_usr2, NULL);

    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_non_null(strstr(out, "pdeathsig=9 "));
    assert_non_null(strstr(out, " session=1 group=1 "));
    /* (caught signals are reset by exec anyway: the report's own count is what the program
     * installed itself, e.g. AddressSanitizer's handlers) */
    assert_non_null(strstr(out, " blocked=0 ignored=0 "));
    /* the parent's own mask is back as it was (SIGUSR1 still blocked, nothing more) */
    assert_int_equal(sigismember(&after, SIGUSR1), 1);
    assert_int_equal(sigismember(&after, SIGCHLD), sigismember(&before, SIGCHLD));
    assert_int_equal(sigismember(&after, SIGTERM), sigismember(&before, SIGTERM));
}

/* stdin from a file, stdout and stderr swapped onto each other's pipes: fds 0..2 of the
 * caller may be among them without one closing another. */
static void test_stdio(void **state)
{
    char dir[128], in[256], buf[256];
    int out_p[2], err_p[2], status;
    pid_t pid;

    harness_mkdtemp(dir, sizeof(dir), "spawn");
    snprintf(in, sizeof(in), "%s/in", dir);
    harness_write_file(in, "from-stdin\n");
    int in_fd = open(in, O_RDONLY | O_CLOEXEC);
    assert_true(in_fd >= 0);
    assert_int_equal(pipe2(out_p, O_CLOEXEC), 0);
    assert_int_equal(pipe2(err_p, O_CLOEXEC), 0);
    char *argv[] = {"sh", "-c", "read l; echo \"out:$l\"; echo err >&2", NULL};
    struct agent_spawn_opts o = {
        .file = "sh", .argv = argv, .envp = environ, .stdio = {in_fd, out_p[1], err_p[1]}};
    assert_int_equal(agent_spawn(&o, &pid), 0);
    close(out_p[1]);
    close(err_p[1]);
    close(in_fd);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ssize_t n = read(out_p[0], buf, sizeof(buf) - 1);
    assert_true(n > 0);
    buf[n] = '\0';
    assert_string_equal(buf, "out:from-stdin\n");
    n = read(err_p[0], buf, sizeof(buf) - 1);
    assert_true(n > 0);
    buf[n] = '\0';
    assert_string_equal(buf, "err\n");
    close(out_p[0]);
    close(err_p[0]);
    /* -1: /dev/null, so a read gets EOF at once */
    char *argv2[] = {"sh", "-c", "read l || exit 7", NULL};
    struct agent_spawn_opts o2 = {
        .file = "sh", .argv = argv2, .envp = environ, .stdio = {-1, -1, -1}};
    assert_int_equal(agent_spawn(&o2, &pid), 0);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_int_equal(WEXITSTATUS(status), 7);
    harness_rmtree(dir);
}

/* exec failures come back as the errno, and the failed child is already reaped */
static void test_exec_failure(void **state)
{
    char dir[128], file[256];
    pid_t pid = 0;
    int status;

    char *argv[] = {"x", NULL};
    struct agent_spawn_opts o = {.argv = argv, .envp = environ, .stdio = {-1, -1, -1}};
    o.file = "/nonexistent/program";
    assert_int_equal(agent_spawn(&o, &pid), -ENOENT);
    o.file = "muster-no-such-program-on-path";
    assert_int_equal(agent_spawn(&o, &pid), -ENOENT);
    harness_mkdtemp(dir, sizeof(dir), "spawn");
    snprintf(file, sizeof(file), "%s/not-executable", dir);
    harness_write_file(file, "#!/bin/sh\nexit 0\n");
    o.file = file;
    assert_int_equal(agent_spawn(&o, &pid), -EACCES);
    assert_int_equal(pid, 0);
    /* nothing left to reap: no zombie of the failed children */
    assert_int_equal(waitpid(-1, &status, WNOHANG), -1);
    assert_int_equal(errno, ECHILD);
    harness_rmtree(dir);
}

/* --numa-binding: the CPU set is applied in the child before exec */
static void test_bind(void **state)
{
    struct agent_spawn_bind b = {.mem_node = -1};
    char *argv[] = {self, "report", NULL};
    int bind_err = -1;
    struct agent_spawn_opts o = {.file = self,
                                 .argv = argv,
                                 .envp = environ,
                                 .stdio = {-1, -1, -1},
                                 .bind = &b,
                                 .bind_err = &bind_err};
    char out[512];

    CPU_ZERO(&b.cpus);
    CPU_SET(0, &b.cpus);
    assert_int_equal(run_child(&o, out, sizeof(out)), 0);
    assert_int_equal(bind_err, 0);
    assert_non_null(strstr(out, " cpus=1 cpu0=1"));
    /* a memory policy for node 0: bound, or the kernel's errno reported, never a failure */
    b.mem_node = 0;
    b.mems[0] = 1;
    assert_int_equal(run_child(&o, out, sizeof(out)), 0);
    assert_true(bind_err >= 0);
}

/* Joining a cgroup by writing "0" into its cgroup.procs (the path where clone3 is refused):
 * here a plain file stands in for cgroup.procs. A directory that is no cgroup makes clone3
 * fail: the child starts anyway and the errno is reported. */
static void test_cgroup_join(void **state)
{
    char dir[128], procs[256], buf[16];
    char *argv[] = {"true", NULL};
    int cgroup_err = -1, status;
    pid_t pid;

    harness_mkdtemp(dir, sizeof(dir), "spawn");
    snprintf(procs, sizeof(procs), "%s/cgroup.procs", dir);
    harness_write_file(procs, "");
    int procs_fd = open(procs, O_WRONLY | O_CLOEXEC);
    int dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(procs_fd >= 0 && dir_fd >= 0);
    struct agent_spawn_opts o = {.file = "true",
                                 .argv = argv,
                                 .envp = environ,
                                 .stdio = {-1, -1, -1},
                                 .join_cgroup = 1,
                                 .cgroup_dir_fd = -1,
                                 .cgroup_procs_fd = procs_fd,
                                 .cgroup_err = &cgroup_err};
    assert_int_equal(agent_spawn(&o, &pid), 0);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_int_equal(cgroup_err, 0);
    assert_int_equal(harness_read_file(procs, buf, sizeof(buf)), 1);
    assert_string_equal(buf, "0");

    o.cgroup_dir_fd = dir_fd;
    o.cgroup_procs_fd = -1;
    cgroup_err = -1;
    assert_int_equal(agent_spawn(&o, &pid), 0);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_true(cgroup_err >= 0); /* EBADF where clone3 ran, 0 where it is refused */
    close(procs_fd);
    close(dir_fd);
    harness_rmtree(dir);
}

/* PR_SET_PDEATHSIG for real: a middle process starts `sleep 60` and exits; the sleeper gets
 * SIGKILL. This process is a child subreaper, so the orphan is reparented here and its end
 * can be awaited (pidfd) and reaped. */
static void test_dies_with_parent(void **state)
{
    int fds[2], status;
    pid_t mid, pid = 0;

    assert_int_equal(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
    mid = fork();
    assert_true(mid >= 0);
    if (mid == 0) { /* never asserts */
        char *argv[] = {"sleep", "60", NULL};
        struct agent_spawn_opts o = {
            .file = "sleep", .argv = argv, .envp = environ, .stdio = {-1, -1, -1}};
        if (agent_spawn(&o, &pid) != 0)
            _exit(1);
        _exit(write(fds[1], &pid, sizeof(pid)) == sizeof(pid) ? 0 : 1);
    }
    close(fds[1]);
    assert_int_equal(read(fds[0], &pid, sizeof(pid)), sizeof(pid));
    close(fds[0]);
    assert_int_equal(waitpid(mid, &status, 0), mid);
    assert_int_equal(WEXITSTATUS(status), 0);
    int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pfd >= 0) { /* readable once it exited: 10 s at most, not 60 */
        struct pollfd p = {.fd = pfd, .events = POLLIN};
        assert_int_equal(poll(&p, 1, 10000), 1);
        close(pfd);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGKILL);
    prctl(PR_SET_CHILD_SUBREAPER, 0);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "report") == 0)
        return report();
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        return 1;
    self[n] = '\0';

    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_child_state),  cmocka_unit_test(test_stdio),
        cmocka_unit_test(test_exec_failure), cmocka_unit_test(test_bind),
        cmocka_unit_test(test_cgroup_join),  cmocka_unit_test(test_dies_with_parent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
