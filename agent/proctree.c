#include "proctree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cgroup.h"
#include "log.h"
#include "path.h"

/* How long ending a group may block the loop until its cgroup is empty. SIGKILLed processes
 * are gone in well under a millisecond unless stuck in the kernel (D state, e.g. a GPU
 * context's teardown); then the cgroup stays and agent_proctree_stop() or the reaper removes
 * it later. Long enough that the next attempt never meets the last one's processes. */
#define CLOSE_WAIT_MS 500
/* The reaper outlives muster: it may wait longer for a stuck process before removing. */
#define REAPER_WAIT_MS 10000
/* How long muster's normal exit waits for its reaper to finish (reaper_join). */
#define REAPER_JOIN_MS 1000
/* Fallback reaper: the sessions it kills when muster dies (workers of the running groups). */
#define REAPER_MAX_SESSIONS 4096

/* Per process, like the loop thread it serves: one job, one reaper. */
static struct {
    enum agent_proctree_mode mode;
    int adopt;          /* fallback: child subreaper, adopted orphans die at group end */
    char job[PATH_MAX]; /* <own cgroup>/muster-<pid>, "" in the fallback */
    char describe[PATH_MAX + 160];
    int reaper_fd;    /* write end of the reaper's pipe (muster's only), -1 none */
    int reaper_state; /* 0 not started yet, 1 running, or the negative errno of its start */
    pid_t reaper;
    unsigned next_id;
    int warned;
} pt = {.reaper_fd = -1};

/* ---- /proc scanning (also run by the fallback reaper: no malloc) ------------------------ */

struct proc_ent {
    pid_t pid, ppid, sid;
    char state; /* 'Z': a zombie */
    char reap;  /* scan_kill: ours to reap */
};

/* Fields 4 and 6 of /proc/<pid>/stat, after the comm in parentheses (which may hold spaces
 * and ')'), hence the last ')'. Returns 0 or -1. */
static int read_stat(pid_t pid, struct proc_ent *e)
{
    char path[64], buf[512];
    int fd, n, ppid, pgrp, sid;
    char state;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return -1;
    n = (int)read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (p == NULL || sscanf(p + 1, " %c %d %d %d", &state, &ppid, &pgrp, &sid) != 4)
        return -1;
    e->pid = pid;
    e->ppid = ppid;
    e->sid = sid;
    e->state = state;
    return 0;
}

/* Calls fn(e, data) for every process. Returns 0 or a negative errno. */
static int each_proc(void (*fn)(const struct proc_ent *e, void *data), void *data)
{
    char buf[4096];
    int fd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ssize_t n;

    if (fd < 0)
        return -errno;
    while ((n = getdents64(fd, buf, sizeof(buf))) > 0) {
        for (ssize_t off = 0; off < n;) {
            struct dirent64 *d = (struct dirent64 *)(buf + off);
            struct proc_ent e;
            off += d->d_reclen;
            if (d->d_name[0] >= '1' && d->d_name[0] <= '9' &&
                read_stat((pid_t)atoi(d->d_name), &e) == 0)
                fn(&e, data);
        }
    }
    close(fd);
    return 0;
}

/* ---- the reaper ----------------------------------------------------------------------- */

struct reaper_sessions {
    pid_t sid[REAPER_MAX_SESSIONS];
    int n;
};

static void reaper_note(struct reaper_sessions *s, int32_t v)
{
    for (int i = 0; i < s->n; i++)
        if (s->sid[i] == (v < 0 ? -v : v)) {
            if (v < 0)
                s->sid[i] = s->sid[--s->n]; /* the group ended: forget it (pid reuse) */
            return;
        }
    if (v > 0 && s->n < REAPER_MAX_SESSIONS)
        s->sid[s->n++] = v;
}

static void reaper_kill_session(const struct proc_ent *e, void *data)
{
    const struct reaper_sessions *s = data;
    for (int i = 0; i < s->n; i++)
        if (e->sid == s->sid[i])
            kill(e->pid, SIGKILL);
}

/* Stop signals meant for muster's process group or session (Ctrl-C, a hang-up) must not end
 * the reaper before muster: it acts only once muster is gone. */
static int reaper_ignores(int s)
{
    return s == SIGINT || s == SIGTERM || s == SIGHUP || s == SIGQUIT || s == SIGPIPE;
}

/* Leaves muster's session, signals and fds: only the end of muster may end it. */
static int reaper_detach(int rfd)
{
    struct sigaction ign = {.sa_handler = SIG_IGN}, dfl = {.sa_handler = SIG_DFL};
    sigset_t none;
    int keep = fcntl(rfd, F_DUPFD, 3), nul = open("/dev/null", O_RDWR);

    if (keep < 0)
        _exit(1); /* cannot watch muster: muster still kills its trees while it lives */
    for (int s = 1; s < NSIG; s++)
        if (s != SIGKILL && s != SIGSTOP)
            sigaction(s, reaper_ignores(s) ? &ign : &dfl, NULL);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    setsid(); /* a Ctrl-C or kill of muster's process group is not for it */
    prctl(PR_SET_NAME, "muster-reaper");
    for (int i = 0; i < 3; i++)
        dup2(nul, i); /* it must not hold muster's stdout open (a pipe reader would wait) */
    if (keep != 3)
        dup2(keep, 3);
    /* nor the rendezvous socket, log files, the workers' pipes */
    if (close_range(4, ~0U, 0) != 0)
        for (int fd = 4; fd < 1024; fd++)
            close(fd);
    return 3;
}

/* The reaper's whole life: wait until every write end of the pipe is closed, which happens
 * when muster exits whichever way, then kill and remove what muster left. */
/* Removes the empty job cgroups of musters that are gone: a muster killed together with its
 * reaper (a test's cleanup SIGKILLs both), or before the reaper started. One whose pid lives
 * (maybe reused) is left alone, and rmdir refuses a populated cgroup: nothing is killed. */
static void reaper_sweep(void)
{
    char parent[PATH_MAX], path[PATH_MAX], buf[4096];
    char *slash = strrchr(pt.job, '/');
    int fd;
    ssize_t n;

    if (slash == NULL || slash == pt.job || (size_t)(slash - pt.job) >= sizeof(parent))
        return;
    memcpy(parent, pt.job, (size_t)(slash - pt.job));
    parent[slash - pt.job] = '\0';
    if ((fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        return;
    while ((n = getdents64(fd, buf, sizeof(buf))) > 0) {
        for (ssize_t off = 0; off < n;) {
            struct dirent64 *d = (struct dirent64 *)(buf + off);
            char *end;
            off += d->d_reclen;
            if (d->d_type != DT_DIR || strncmp(d->d_name, "muster-", 7) != 0)
                continue;
            long pid = strtol(d->d_name + 7, &end, 10);
            if (*end != '\0' || pid <= 0 || pid == (long)getppid() || kill((pid_t)pid, 0) == 0 ||
                errno != ESRCH)
                continue;
            if (agent_path_fmt(path, sizeof(path), "%s/%s", parent, d->d_name) == 0)
                agent_cgroup_remove(path);
        }
    }
    close(fd);
}

static void reaper_main(int rfd)
{
    static struct reaper_sessions s;
    int32_t msg[256];
    ssize_t n;
    int fd = reaper_detach(rfd);

    if (pt.job[0] != '\0')
        reaper_sweep(); /* here, off muster's path: muster does not wait for it */

    while ((n = read(fd, msg, sizeof(msg))) != 0) {
        if (n < 0 && errno != EINTR)
            break;
        for (ssize_t i = 0; i < n / (ssize_t)sizeof(msg[0]); i++)
            reaper_note(&s, msg[i]); /* 4-byte writes to a pipe are atomic: never split */
    }
    if (pt.job[0] != '\0') {
        agent_cgroup_kill(pt.job);
        agent_cgroup_wait_empty(pt.job, REAPER_WAIT_MS);
        agent_cgroup_remove(pt.job);
    }
    if (s.n > 0)
        each_proc(reaper_kill_session, &s);
    _exit(0);
}

/* Forks the reaper. fork() copies page tables (~0.5 ms on the 16-core host): cheaper than
 * exec'ing a helper program, and paid once per muster, not per worker. The child only makes
 * system calls and formats numbers on its stack (no malloc, no locks), as a fork of a process
 * with threads (libuv's pool) must. */
static int start_reaper(void)
{
    int fds[2];
    pid_t p;

    if (pipe2(fds, O_CLOEXEC) != 0)
        return -errno;
    if ((p = fork()) < 0) {
        int err = errno;
        close(fds[0]);
        close(fds[1]);
        return -err;
    }
    if (p == 0) {
        close(fds[1]);
        reaper_main(fds[0]);
    }
    close(fds[0]);
    /* never block muster on a stuck reaper: a lost note only narrows the fallback */
    fcntl(fds[1], F_SETFL, O_NONBLOCK);
    pt.reaper_fd = fds[1];
    pt.reaper = p;
    return 0;
}

static void reaper_tell(int32_t v)
{
    if (pt.reaper_fd >= 0 && pt.mode == AGENT_PROCTREE_FALLBACK)
        (void)!write(pt.reaper_fd, &v, sizeof(v));
}

/* Every open group, for the pids that only a group may reap (its workers). */
static struct agent_proctree_group *open_groups;
static int is_session(const struct agent_proctree_group *t, pid_t pid);

/* Starts the reaper once, right after the first group's last worker: forking it (~0.5 ms on a
 * 16-core host, page tables) then overlaps the workers' exec instead of delaying the launch.
 * The cost is a window of one spawn loop where a kill -9 of muster finds no reaper yet. */
static void ensure_reaper(void)
{
    int rc;

    if (pt.reaper_state != 0 || pt.mode == AGENT_PROCTREE_DISABLED)
        return;
    if ((rc = start_reaper()) != 0) {
        pt.reaper_state = rc;
        mc_warn("cannot start the reaper process (%s): a kill -9 of muster would "
                "leave the workers' descendants running",
                strerror(-rc));
        return;
    }
    pt.reaper_state = 1;
    for (const struct agent_proctree_group *g = open_groups; g != NULL; g = g->next)
        for (int i = 0; i < g->n; i++)
            if (g->sessions[i] > 0)
                reaper_tell(g->sessions[i]); /* spawned before it existed */
}

/* ---- choosing the mechanism ----------------------------------------------------------- */

static int debug_wanted(void)
{
    const char *v = getenv("MUSTER_DEBUG_PROCTREE");
    return v != NULL && v[0] != '\0' && strcmp(v, "0") != 0;
}

/* Makes <base>/muster-<pid>. Returns 0, or a negative errno with why[] set. */
static int make_job_cgroup(char *why, size_t len)
{
    char base[PATH_MAX], kill_file[PATH_MAX + 16];
    const char *root = getenv("MUSTER_CGROUP_ROOT");
    int rc = 0;

    if (root != NULL && root[0] != '\0')
        rc = agent_path_fmt(base, sizeof(base), "%s", root);
    else if ((rc = agent_cgroup_self_dir(base, sizeof(base))) != 0)
        snprintf(why, len, "no cgroup v2 of this process found (%s)", strerror(-rc));
    if (rc == 0 &&
        (rc = agent_path_fmt(pt.job, sizeof(pt.job), "%s/muster-%d", base, (int)getpid())) != 0)
        snprintf(why, len, "cgroup path too long");
    if (rc == 0 && mkdir(pt.job, 0755) != 0) {
        rc = -errno;
        snprintf(why, len, "cannot create %s: %s", pt.job, strerror(errno));
    }
    if (rc == 0 && (agent_path_fmt(kill_file, sizeof(kill_file), "%s/cgroup.kill", pt.job) != 0 ||
                    access(kill_file, W_OK) != 0)) {
        rc = -ENOTSUP; /* a plain directory (the test seam) or Linux < 5.14 */
        snprintf(why, len, "%s has no writable cgroup.kill", pt.job);
        rmdir(pt.job);
    }
    if (rc != 0)
        pt.job[0] = '\0';
    return rc;
}

/* Switches this process to the fallback (at start, or when a worker could not join). */
static void use_fallback(const char *why)
{
    /* orphans re-parent to the agent instead of init: the scan then walks only our own
     * descendants (cheap) and still finds them */
    int sub = prctl(PR_SET_CHILD_SUBREAPER, 1) == 0;

    pt.mode = AGENT_PROCTREE_FALLBACK;
    pt.adopt = pt.adopt && sub;
    snprintf(pt.describe, sizeof(pt.describe),
             "process trees: fallback (%s): worker sessions%s killed at attempt end; %s", why,
             pt.adopt ? " and orphans adopted as child subreaper" : "",
             "only worker sessions after kill -9 of muster");
}

enum agent_proctree_mode agent_proctree_start(int adopt_orphans)
{
    char why[PATH_MAX + 64] = "";
    int rc;

    if (pt.mode != AGENT_PROCTREE_OFF)
        return pt.mode;
    pt.adopt = adopt_orphans;
    if (getenv("MUSTER_PROCTREE") != NULL && strcmp(getenv("MUSTER_PROCTREE"), "off") == 0) {
        /* the escape hatch: process groups only, as before process trees */
        pt.mode = AGENT_PROCTREE_DISABLED;
        snprintf(pt.describe, sizeof(pt.describe),
                 "process trees: off (MUSTER_PROCTREE=off): only the workers' process groups "
                 "are killed");
    } else if ((rc = make_job_cgroup(why, sizeof(why))) == 0) {
        pt.mode = AGENT_PROCTREE_CGROUP;
        snprintf(pt.describe, sizeof(pt.describe),
                 "process trees: cgroup v2 %s (cgroup.kill at attempt end; a reaper process "
                 "kills it if muster dies)",
                 pt.job);
    } else {
        use_fallback(why);
    }
    if (debug_wanted())
        mc_info("%s", pt.describe);
    return pt.mode;
}

const char *agent_proctree_describe(void)
{
    return pt.mode == AGENT_PROCTREE_OFF ? "process trees: not set up" : pt.describe;
}

/* The reaper's last check takes a millisecond once the job's cgroup is gone: wait for it, so
 * that it ends as this process's child. Left to exit as an orphan, it becomes a zombie under
 * a PID 1 that never reaps (many container entrypoints). A reaper still busy after
 * REAPER_JOIN_MS (a process stuck in the kernel) is left to finish on its own. */
static void reaper_join(void)
{
    struct timespec nap = {0, 2 * 1000 * 1000};

    for (int waited = 0; pt.reaper > 0 && waited < REAPER_JOIN_MS; waited += 2) {
        pid_t r = waitpid(pt.reaper, NULL, WNOHANG);

        if (r == pt.reaper || (r < 0 && errno != EINTR)) {
            pt.reaper = 0;
            return;
        }
        nanosleep(&nap, NULL);
    }
}

void agent_proctree_stop(void)
{
    if (pt.job[0] != '\0') {
        agent_cgroup_kill(pt.job);
        agent_cgroup_wait_empty(pt.job, CLOSE_WAIT_MS);
        agent_cgroup_remove(pt.job); /* a stuck leftover: the reaper tries again */
    }
    if (pt.reaper_fd >= 0) {
        close(pt.reaper_fd); /* EOF: the reaper checks once more and exits */
        reaper_join();
    }
    pt.reaper_fd = -1;
}

/* ---- one group ------------------------------------------------------------------------ */

int agent_proctree_group_open(struct agent_proctree_group *t, int n)
{
    char procs[PATH_MAX + 16];

    memset(t, 0, sizeof(*t));
    t->procs_fd = -1;
    t->dir_fd = -1;
    if ((t->sessions = calloc((size_t)(n > 0 ? n : 1), sizeof(*t->sessions))) == NULL)
        return -ENOMEM;
    t->n = n;
    t->open = 1;
    t->next = open_groups;
    open_groups = t;
    enum agent_proctree_mode mode = agent_proctree_start(0);
    t->scan = mode == AGENT_PROCTREE_FALLBACK;
    if (mode != AGENT_PROCTREE_CGROUP)
        return 0;
    if (agent_path_fmt(t->dir, sizeof(t->dir), "%s/g%u", pt.job, pt.next_id++) != 0 ||
        mkdir(t->dir, 0755) != 0) {
        if (!pt.warned++)
            mc_warn("cannot create cgroup %s: %s; this attempt's process trees are "
                    "killed by session instead",
                    t->dir, strerror(errno));
        t->dir[0] = '\0';
        t->scan = 1;
        return 0;
    }
    if (agent_path_fmt(procs, sizeof(procs), "%s/cgroup.procs", t->dir) == 0)
        t->procs_fd = open(procs, O_WRONLY | O_CLOEXEC);
    t->dir_fd = open(t->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    t->scan = t->procs_fd < 0 || t->dir_fd < 0;
    return 0;
}

int agent_proctree_group_fds(const struct agent_proctree_group *t, int *dir_fd, int *procs_fd)
{
    int on = t->open && !t->scan;
    *dir_fd = on ? t->dir_fd : -1;
    *procs_fd = on ? t->procs_fd : -1;
    return on;
}

void agent_proctree_group_started(struct agent_proctree_group *t, int i, pid_t pid, int join_err)
{
    if (!t->open || i < 0 || i >= t->n)
        return;
    t->sessions[i] = pid;
    if (join_err != 0 && !t->scan) {
        /* EBUSY (controllers enabled below), EACCES (not delegated to us): the cgroup is
         * unusable here, for this group and the ones to come */
        char why[PATH_MAX + 64];
        snprintf(why, sizeof(why), "a worker cannot join %s: %s", t->dir, strerror(join_err));
        use_fallback(why);
        mc_warn("%s", pt.describe);
        t->scan = 1;
    }
    if (pt.reaper_state == 0 && i == t->n - 1)
        ensure_reaper(); /* tells it every session so far */
    else
        reaper_tell(pid);
}

static int is_session(const struct agent_proctree_group *t, pid_t pid)
{
    for (int i = 0; i < t->n; i++)
        if (t->sessions[i] == pid && pid > 0)
            return 1;
    return 0;
}

/* ---- the fallback's kill: a /proc scan -------------------------------------------------- */

struct scan {
    struct proc_ent *v;
    size_t n, cap;
};

static void collect(const struct proc_ent *e, void *data)
{
    struct scan *s = data;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        struct proc_ent *v = realloc(s->v, cap * sizeof(*v));
        if (v == NULL)
            return; /* a process missed: the next pass, kill or the reaper gets another chance */
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = *e;
}

/* Appends the children that the pids in text (a children file's chunk) name; *part carries a
 * number cut at the chunk's end. */
static void collect_pids(struct scan *s, const char *text, size_t len, long *part)
{
    struct proc_ent e;

    for (size_t i = 0; i <= len; i++) {
        if (i < len && text[i] >= '0' && text[i] <= '9') {
            *part = *part * 10 + (text[i] - '0');
        } else if (i<len && * part> 0) {
            if (read_stat((pid_t)*part, &e) == 0)
                collect(&e, s);
            *part = 0;
        }
    }
}

/* Appends pid's children: every thread's children file (a thread may have forked them).
 * Returns 0, or -ENOENT where the kernel lacks the file (CONFIG_PROC_CHILDREN). */
static int add_children(struct scan *s, pid_t pid)
{
    char path[96], buf[4096];
    int dfd, fd, found = 0;
    ssize_t n, r;
    long part;

    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    if ((dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        return 0; /* gone meanwhile */
    while ((n = getdents64(dfd, buf, sizeof(buf))) > 0) {
        for (ssize_t off = 0; off < n;) {
            struct dirent64 *d = (struct dirent64 *)(buf + off);
            char text[4096];
            off += d->d_reclen;
            if (d->d_name[0] < '0' || d->d_name[0] > '9')
                continue;
            snprintf(path, sizeof(path), "/proc/%d/task/%.16s/children", (int)pid, d->d_name);
            if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
                continue;
            found = 1;
            part = 0;
            while ((r = read(fd, text, sizeof(text))) > 0)
                collect_pids(s, text, (size_t)r, &part);
            collect_pids(s, "", 0, &part);
            close(fd);
        }
    }
    close(dfd);
    return found || pid != getpid() ? 0 : -ENOENT;
}

/* This process's descendants (breadth first), or every process where the kernel cannot list
 * children. The subreaper keeps orphans among the descendants. */
static void scan_tree(struct scan *s)
{
    s->n = 0;
    if (add_children(s, getpid()) != 0) {
        each_proc(collect, s);
        return;
    }
    for (size_t i = 0; i < s->n; i++)
        add_children(s, s->v[i].pid);
}

static int by_pid(const void *a, const void *b)
{
    pid_t x = ((const struct proc_ent *)a)->pid, y = ((const struct proc_ent *)b)->pid;
    return (x > y) - (x < y);
}

/* Which of our children only someone else may reap: the reaper, another group's workers. */
static int known_child(pid_t pid)
{
    if (pid == pt.reaper)
        return 1;
    for (const struct agent_proctree_group *g = open_groups; g != NULL; g = g->next)
        if (is_session(g, pid))
            return 1;
    return 0;
}

/* In a worker's session, below a worker, or (adopt) an orphan below this process that no
 * other group claims. */
static int is_target(const struct scan *s, const struct proc_ent *e,
                     const struct agent_proctree_group *t, pid_t self)
{
    pid_t cur = e->ppid, last = e->pid;

    if (e->pid == self || e->pid == pt.reaper)
        return 0;
    if (is_session(t, e->sid))
        return 1;
    for (int depth = 0; depth < 64 && cur > 1; depth++) {
        if (cur == self)
            return pt.adopt && !known_child(last);
        if (is_session(t, cur))
            return 1;
        struct proc_ent key = {.pid = cur}, *p = bsearch(&key, s->v, s->n, sizeof(key), by_pid);
        if (p == NULL)
            return 0;
        last = cur;
        cur = p->ppid;
    }
    return 0;
}

/* Reaps our children that were just killed or are zombies, unless a group reaps them (its
 * workers), waiting at most CLOSE_WAIT_MS in all. Adopted orphans have nobody else. */
static void reap_adopted(struct scan *s, const struct agent_proctree_group *t, pid_t self)
{
    struct timespec ms = {0, 1000000};
    size_t todo = 0;

    for (size_t i = 0; i < s->n; i++) /* decided on the whole table, compacted after */
        s->v[i].reap = s->v[i].ppid == self && !known_child(s->v[i].pid) &&
                       (s->v[i].state == 'Z' || is_target(s, &s->v[i], t, self));
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i].reap)
            s->v[todo++] = s->v[i];
    for (int round = 0; todo > 0 && round < CLOSE_WAIT_MS; round++) {
        size_t left = 0;
        for (size_t i = 0; i < todo; i++)
            if (waitpid(s->v[i].pid, NULL, WNOHANG) == 0)
                s->v[left++] = s->v[i];
        if ((todo = left) > 0)
            nanosleep(&ms, NULL);
    }
}

/* A few passes: a process may fork between the scan and its kill. */
static void scan_kill(const struct agent_proctree_group *t)
{
    struct scan s = {0};
    pid_t self = getpid();

    for (int pass = 0; pass < 3; pass++) {
        int hits = 0;
        scan_tree(&s);
        if (s.n == 0) /* nothing below us: qsort(NULL, 0) is undefined (UBSan aborts) */
            break;
        qsort(s.v, s.n, sizeof(*s.v), by_pid);
        for (size_t i = 0; i < s.n; i++)
            if (s.v[i].state != 'Z' && is_target(&s, &s.v[i], t, self)) {
                kill(s.v[i].pid, SIGKILL);
                hits++;
            }
        reap_adopted(&s, t, self); /* reorders s: last */
        if (hits == 0)
            break;
    }
    free(s.v);
}

void agent_proctree_group_kill(struct agent_proctree_group *t)
{
    if (!t->open)
        return;
    if (t->dir[0] != '\0')
        agent_cgroup_kill(t->dir);
    if (t->scan)
        scan_kill(t);
}

void agent_proctree_group_close(struct agent_proctree_group *t)
{
    if (!t->open)
        return;
    agent_proctree_group_kill(t);
    if (t->dir[0] != '\0' && agent_cgroup_wait_empty(t->dir, CLOSE_WAIT_MS) == 0)
        rmdir(t->dir);
    for (int i = 0; i < t->n; i++)
        if (t->sessions[i] > 0)
            reaper_tell(-t->sessions[i]);
    if (t->procs_fd >= 0)
        close(t->procs_fd);
    if (t->dir_fd >= 0)
        close(t->dir_fd);
    for (struct agent_proctree_group **p = &open_groups; *p != NULL; p = &(*p)->next)
        if (*p == t) {
            *p = t->next;
            break;
        }
    free(t->sessions);
    memset(t, 0, sizeof(*t));
    t->procs_fd = -1;
    t->dir_fd = -1;
}
