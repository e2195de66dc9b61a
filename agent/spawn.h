/* Starting one worker process: fork-and-exec with the steps libuv's uv_spawn cannot run in
 * the child.
 *
 * Why not uv_spawn (STYLE.md rule 8): a worker must die with the agent even when the agent is
 * SIGKILLed, which takes prctl(PR_SET_PDEATHSIG) in the child between fork and exec. With
 * uv_spawn that needs a wrapper program, i.e. a second exec per worker: 1 ms of CPU each on
 * the 2-core reference machine, 15 % of an 8-worker job's whole run. This does what glibc's
 * posix_spawn does (clone with CLONE_VM | CLONE_VFORK: no page-table copy, the parent resumes
 * once the child has exec'd) plus the prctl. Reaping stays event-driven: the group watches
 * SIGCHLD through a uv_signal_t and waits for its own pids only, never waitpid(-1). */
#ifndef MUSTER_AGENT_SPAWN_H
#define MUSTER_AGENT_SPAWN_H

#include <sched.h>
#include <sys/types.h>

/* Where a child runs and allocates: computed by the parent, applied by the child with two
 * system calls (sched_setaffinity, set_mempolicy). */
struct agent_spawn_bind {
    cpu_set_t cpus;         /* no CPU set: not bound */
    int mem_node;           /* the NUMA node preferred for memory, -1: no memory policy */
    unsigned long mems[16]; /* mem_node as set_mempolicy's mask (1024 nodes) */
};

struct agent_spawn_opts {
    const char *file;  /* looked up on the child's PATH when it has no '/' */
    char *const *argv; /* NULL-terminated */
    char *const *envp; /* NULL-terminated, the complete environment */
    int stdio[3];      /* fds installed as 0, 1, 2 in the child; -1: /dev/null */
    /* join_cgroup: the child is born in a cgroup (proctree.h): created there by clone3's
     * CLONE_INTO_CGROUP through cgroup_dir_fd (the cgroup's directory), or where clone3 is
     * refused, it writes "0" into cgroup_procs_fd (its cgroup.procs) before exec. Either way
     * everything it starts is born inside. Failing to join does not stop the child: the errno
     * goes to *cgroup_err (0 when it joined), if not NULL. */
    int join_cgroup;
    int cgroup_dir_fd;
    int cgroup_procs_fd;
    int *cgroup_err;
    /* bind (NULL: none): the child binds itself before exec (numa.h); failing to does not
     * stop it: the errno goes to *bind_err (0 when bound), if not NULL */
    const struct agent_spawn_bind *bind;
    int *bind_err;
};

/* Starts a child in a new session (its own process group, pgid == pid) with every signal at
 * its default disposition and none blocked, armed to receive SIGKILL when the calling thread
 * exits, in the cgroup asked for (join_cgroup). Returns 0 and sets *pid once the child runs
 * the program, or a negative errno when clone or exec failed (the child is then already
 * reaped). The caller's fds are untouched. */
int agent_spawn(const struct agent_spawn_opts *o, pid_t *pid);

#endif
