/* agent/proctree.c in its fallback (MUSTER_CGROUP_ROOT names no directory: no cgroup), with
 * orphan adoption on: whatever a worker started dies with the group, also a grandchild in its
 * own session (setsid) and an orphan that double-forked away; an open group's workers are left
 * alone by another group's kill. After a kill -9 of "muster" (this program run again), its
 * reaper process kills what PR_SET_PDEATHSIG cannot reach (a worker's child), in the fallback
 * and in the cgroup mode where the host has one; the cgroup mode's group kill runs in
 * test_agent_group. Real processes; each wait is for a file a child writes or a pid's end. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "proctree.h"
#include "spawn.h"

extern char **environ;

static char dir[128];

/* Starts `sh -c script` as worker i of t, the way agent_worker_spawn does. */
static pid_t start(struct agent_proctree_group *t, int i, const char *script)
{
    char *argv[] = {"/bin/sh", "-c", (char *)script, NULL};
    struct agent_spawn_opts o = {
        .file = "/bin/sh", .argv = argv, .envp = environ, .stdio = {-1, -1, -1}};
    int err = 0;
    pid_t pid = 0;

    o.join_cgroup = agent_proctree_group_fds(t, &o.cgroup_dir_fd, &o.cgroup_procs_fd);
    assert_int_equal(o.join_cgroup, 0); /* the fallback: nobody joins a cgroup */
    o.cgroup_err = &err;
    assert_int_equal(agent_spawn(&o, &pid), 0);
    agent_proctree_group_started(t, i, pid, err);
    return pid;
}

/* Runs a worker whose script starts `pre sh -c ... & post` which writes the pid of the
 * process it leaves behind into `name` (in dir); returns that pid once the worker exited. */
static pid_t leave_behind(struct agent_proctree_group *t, int i, const char *pre, const char *post,
                          const char *name)
{
    char script[1400], path[256], buf[32];
    int status;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    snprintf(
        script, sizeof(script),
        "%s sh -c 'echo $$ > %s.tmp; mv %s.tmp %s; exec sleep 30' </dev/null >/dev/null 2>&1 & %s"
        " while [ ! -s %s ]; do :; done; exit 0",
        pre, path, path, path, post, path);
    pid_t w = start(t, i, script);
    assert_int_equal(waitpid(w, &status, 0), w);
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_true(harness_read_file(path, buf, sizeof(buf)) > 0);
    pid_t p = (pid_t)atoi(buf);
    assert_true(p > 1);
    assert_int_equal(kill(p, 0), 0);
    return p;
}

/* Not running: gone, or a zombie nobody reaped yet. */
static int ended(pid_t pid)
{
    char path[64], text[512];

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if (harness_read_file(path, text, sizeof(text)) <= 0)
        return 1;
    char *p = strrchr(text, ')');
    return p != NULL && (p[2] == 'Z' || p[2] == 'X');
}

static void test_fallback_chosen(void **state)
{
    assert_int_equal(agent_proctree_start(1), AGENT_PROCTREE_FALLBACK);
    assert_int_equal(agent_proctree_start(0), AGENT_PROCTREE_FALLBACK); /* once per process */
    assert_non_null(strstr(agent_proctree_describe(), "fallback"));
}

/* setsid: out of the worker's process group and session, still below this process */
static void test_session_escape_killed(void **state)
{
    struct agent_proctree_group t;

    assert_int_equal(agent_proctree_group_open(&t, 2), 0);
    pid_t p = leave_behind(&t, 0, "setsid", "", "setsid.pid");
    agent_proctree_group_kill(&t);
    assert_true(ended(p));
    agent_proctree_group_close(&t);
    agent_proctree_group_close(&t); /* twice: nothing left to do */
}

/* setsid and orphaned (its parent, a subshell, exited): neither in a worker's session nor below
 * one; adopted by this process (a child subreaper) and killed as an orphan no group claims */
static void test_orphan_killed(void **state)
{
    struct agent_proctree_group t;

    assert_int_equal(agent_proctree_group_open(&t, 1), 0);
    pid_t p = leave_behind(&t, 0, "(setsid", ");", "orphan.pid");
    agent_proctree_group_close(&t);
    assert_true(ended(p));
}

/* one group's kill leaves another open group's worker running */
static void test_other_group_spared(void **state)
{
    struct agent_proctree_group a, b;
    int status;

    assert_int_equal(agent_proctree_group_open(&a, 1), 0);
    assert_int_equal(agent_proctree_group_open(&b, 1), 0);
    pid_t wb = start(&b, 0, "exec sleep 30");
    pid_t p = leave_behind(&a, 0, "setsid", "", "a.pid");
    agent_proctree_group_close(&a);
    assert_true(ended(p));
    assert_int_equal(kill(wb, 0), 0);
    assert_int_equal(waitpid(wb, &status, WNOHANG), 0); /* not reaped by a's close either */
    agent_proctree_group_kill(&b);
    assert_int_equal(waitpid(wb, &status, 0), wb);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    agent_proctree_group_close(&b);
}

/* --- kill -9 of muster: the reaper process ends the trees -------------------------------- */

/* The "muster" of test_reaper_after_kill, this program run again: one group, one worker that
 * starts `sleep 60` in its session and says "gc PID"; then "ready" once the reaper runs, and it
 * waits to be killed. The worker dies with it (PDEATHSIG), the sleeper only by the reaper.
 * Never asserts. */
static int muster_child(int cgroup)
{
    struct agent_proctree_group t;
    char *argv[] = {"/bin/sh", "-c", "sleep 60 </dev/null >/dev/null & echo gc $!; wait", NULL};
    struct agent_spawn_opts o = {
        .file = "/bin/sh", .argv = argv, .envp = environ, .stdio = {-1, 1, 2}};
    int err = 0;
    pid_t pid = 0;

    if (cgroup) /* where the host has a usable cgroup v2: that mechanism */
        unsetenv("MUSTER_CGROUP_ROOT");
    if (agent_proctree_group_open(&t, 1) != 0)
        return 1;
    o.join_cgroup = agent_proctree_group_fds(&t, &o.cgroup_dir_fd, &o.cgroup_procs_fd);
    o.cgroup_err = &err;
    if (agent_spawn(&o, &pid) != 0)
        return 1;
    agent_proctree_group_started(&t, 0, pid, err); /* the last worker: starts the reaper */
    printf("ready\n");
    fflush(stdout);
    for (;;)
        pause();
}

static char self[4096];

/* Runs muster_child, SIGKILLs it once its worker's child runs and waits (10 s at most) for
 * that child to be killed by the reaper. This process is a child subreaper: the orphans come here.
 */
static void reaper_after_kill(const char *mode)
{
    int fds[2], status;
    char buf[128] = "";

    assert_int_equal(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
    pid_t m = fork();
    assert_true(m >= 0);
    if (m == 0) { /* never asserts */
        char *argv[] = {self, "muster-child", (char *)mode, NULL};
        dup2(fds[1], 1);
        execv(self, argv);
        _exit(127);
    }
    close(fds[1]);
    size_t got = 0;
    ssize_t n;
    while ((strstr(buf, "ready\n") == NULL || strstr(buf, "gc ") == NULL ||
            strchr(strstr(buf, "gc "), '\n') == NULL) &&
           (n = read(fds[0], buf + got, sizeof(buf) - 1 - got)) > 0) {
        got += (size_t)n;
        buf[got] = '\0';
    }
    close(fds[0]);
    assert_non_null(strstr(buf, "ready\n"));
    assert_non_null(strstr(buf, "gc "));
    pid_t worker = (pid_t)atoi(strstr(buf, "gc ") + 3);
    assert_true(worker > 1);
    assert_int_equal(kill(worker, 0), 0);
    assert_int_equal(kill(m, SIGKILL), 0);
    assert_int_equal(waitpid(m, &status, 0), m);
    int pfd = (int)syscall(SYS_pidfd_open, worker, 0);
    assert_true(pfd >= 0);
    struct pollfd p = {.fd = pfd, .events = POLLIN};
    /* it ended, not 60 s later (whose child it is when it ends depends on who dies first: no
     * waitpid on it here) */
    assert_int_equal(poll(&p, 1, 10000), 1);
    close(pfd);
    /* what was reparented here by now (the sleeper, the orphaned reaper once done) */
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
}

static void test_reaper_after_kill_fallback(void **state)
{
    reaper_after_kill("fallback");
}

static void test_reaper_after_kill_cgroup(void **state)
{
    reaper_after_kill("cgroup");
}

int main(int argc, char **argv)
{
    if (argc > 2 && strcmp(argv[1], "muster-child") == 0)
        return muster_child(strcmp(argv[2], "cgroup") == 0);
    ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len <= 0)
        return 1;
    self[len] = '\0';

    /* before anything starts the mechanism: no cgroup here, so the fallback */
    setenv("MUSTER_CGROUP_ROOT", "/nonexistent/muster-test-cgroup", 1);
    harness_mkdtemp(dir, sizeof(dir), "proctree");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fallback_chosen),
        cmocka_unit_test(test_session_escape_killed),
        cmocka_unit_test(test_orphan_killed),
        cmocka_unit_test(test_other_group_spared),
        cmocka_unit_test(test_reaper_after_kill_fallback),
        cmocka_unit_test(test_reaper_after_kill_cgroup),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);

    agent_proctree_stop();
    agent_proctree_stop(); /* twice: safe */
    harness_rmtree(dir);
    return rc;
}
