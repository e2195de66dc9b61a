/* Whole process trees die with their worker and with muster (docs/SECURITY.md "Process trees").
 *
 * A worker's descendants escape kill(-pgid) when they call setsid() or double-fork, and
 * PR_SET_PDEATHSIG reaches only the worker itself. Two mechanisms, chosen once per process:
 *
 * cgroup v2 (where the node has a writable cgroup2 with cgroup.kill, Linux >= 5.14): muster
 *   makes <its own cgroup>/muster-<pid>/ and one child cgroup per agent_group (an attempt, the
 *   pre-flight, a shared-GPU task's attempt). Each worker is born in it (agent_spawn), so
 *   everything it starts is too. Ending the group writes cgroup.kill and waits until the
 *   cgroup is empty before the group is gone. A reaper process, forked after the first group's
 *   workers, holds the read end of a pipe whose write end only muster has: when muster dies,
 *   even by SIGKILL, the pipe reaches EOF and the reaper kills muster-<pid>/ and removes it.
 *
 * fallback (no cgroup2 mount, read-only, EACCES, EBUSY, no cgroup.kill): muster is a child
 *   subreaper, so orphans stay its descendants; at group end, every descendant in a worker's
 *   session or below a worker is SIGKILLed (a walk of /proc/<pid>/task/<tid>/children, or of
 *   all /proc where the kernel lacks it), and where the caller allows it every orphan muster
 *   adopted too. Not covered: after kill -9 of muster, descendants outside the workers'
 *   sessions (the reaper kills the sessions); without adopt_orphans, setsid()'d orphans.
 *
 * MUSTER_CGROUP_ROOT=<dir> replaces <its own cgroup> (a test seam: a non-existent dir forces
 * the fallback); MUSTER_PROCTREE=off turns all of this off (process groups only, as before);
 * MUSTER_DEBUG_PROCTREE=1 prints the mechanism chosen. Never fails a job. */
#ifndef MUSTER_AGENT_PROCTREE_H
#define MUSTER_AGENT_PROCTREE_H

#include <limits.h>
#include <sys/types.h>

enum agent_proctree_mode {
    AGENT_PROCTREE_OFF,      /* agent_proctree_start() not called yet */
    AGENT_PROCTREE_CGROUP,   /* cgroup v2 + cgroup.kill */
    AGENT_PROCTREE_FALLBACK, /* sessions, /proc scan, optionally child subreaper */
    AGENT_PROCTREE_DISABLED, /* MUSTER_PROCTREE=off: process groups only */
};

/* One agent_group's share: its cgroup, and its workers' pids (each leads its own session). */
struct agent_proctree_group {
    char dir[PATH_MAX]; /* "" in the fallback */
    int dir_fd;         /* dir itself (clone3's CLONE_INTO_CGROUP), -1 in the fallback */
    int procs_fd;       /* dir/cgroup.procs open for writing, -1 in the fallback */
    pid_t *sessions;    /* n entries, 0 = not started */
    int n;
    int open; /* agent_proctree_group_open() succeeded */
    int scan; /* kill by /proc scan too (no cgroup, or a worker could not join) */
    struct agent_proctree_group *next; /* the list of open groups */
};

/* Chooses the mechanism once per process (later calls only return it) and starts the reaper.
 * adopt_orphans: in the fallback, kill at group end every orphan this process adopted that
 * no open group claims; only for callers with no other long-lived descendants (the agent's
 * run mode, not shared-GPU mode with its MPS daemon). Never fails: returns the mode used. */
enum agent_proctree_mode agent_proctree_start(int adopt_orphans);

/* At the end of the process's job: kills whatever is left, removes the cgroups and lets the
 * reaper go. Safe without a start and when called twice. */
void agent_proctree_stop(void);

/* A one-line description of the mechanism in use, for logs. */
const char *agent_proctree_describe(void);

/* Prepares t for n workers (starting the mechanism with adopt_orphans 0 if nobody did).
 * Returns 0 or -ENOMEM; a cgroup that cannot be made is no error (t falls back). */
int agent_proctree_group_open(struct agent_proctree_group *t, int n);

/* The fds a new worker joins t's cgroup through (agent_spawn_opts: the cgroup's directory
 * and its cgroup.procs). Returns 1 when it is to join, 0 in the fallback (fds set to -1). */
int agent_proctree_group_fds(const struct agent_proctree_group *t, int *dir_fd, int *procs_fd);

/* Worker i started as pid; join_err: the errno of its move into the cgroup, 0 when it
 * moved (non-zero switches t to the fallback, logged once). */
void agent_proctree_group_started(struct agent_proctree_group *t, int i, pid_t pid, int join_err);

/* SIGKILLs everything in t's trees: the workers and all they started. */
void agent_proctree_group_kill(struct agent_proctree_group *t);

/* Kills, waits (briefly) until the trees are gone, removes the cgroup, frees t's memory.
 * Accepts a zeroed or half-opened t. */
void agent_proctree_group_close(struct agent_proctree_group *t);

#endif
