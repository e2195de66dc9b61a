/* A private MPS control daemon: see mps.h. Everything here is synchronous (it runs before the
 * loop starts and after it ended) and waits for its own child pids only. */
#include "mps.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "log.h"
#include "clock.h"
#include "gpuquery.h"
#include "path.h"
#include "proc.h"
#include "safefile.h"

extern char **environ;

#define QUERY_TIMEOUT_MS 10000
#define START_TIMEOUT_MS 10000
#define PIDFILE_WAIT_MS 5000
#define PIDFILE "nvidia-cuda-mps-control.pid" /* the daemon writes it into the pipe dir */
/* The pipe directory holds UNIX sockets (sun_path: 108 bytes with the NUL); leave room for
 * the daemon's own names in it. */
#define PIPE_DIR_MAX 64

uint64_t agent_mps_limit_mib(uint64_t gpu_mem_bytes, double fraction, unsigned per_gpu)
{
    if (per_gpu == 0 || fraction <= 0)
        return 0;
    /* F comes from decimal text (0.85 is stored as 0.8499999...): without the 1e-6 MiB
     * slack an exact share such as 20 GiB * 0.85 = 17408 MiB would floor to 17407 */
    long double mib = (long double)gpu_mem_bytes * fraction / per_gpu / (1024.0L * 1024.0L);
    return (uint64_t)floorl(mib + 1e-6L);
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* Runs argv[0] (an absolute path) with envp and stdio (-1 = /dev/null) for up to timeout_ms
 * (then SIGTERM, SIGKILL a second later, to its group). Returns 0 with *status set, or a
 * negative errno (-ETIMEDOUT, spawn's). */
static int run_wait(char **argv, char **envp, const int stdio[3], unsigned timeout_ms, int *status)
{
    struct mc_proc_opts o = {.argv = argv,
                             .envp = envp,
                             .stdio = {stdio[0], stdio[1], stdio[2]},
                             .timeout_ms = timeout_ms,
                             .grace_ms = 1000};
    struct mc_proc_result r;
    int rc = mc_proc_run(&o, &r);

    mc_proc_result_free(&r);
    if (rc != 0)
        return rc;
    *status = r.status;
    return r.timed_out ? -ETIMEDOUT : 0;
}

static int exited_ok(int status)
{
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* Reads what a finished child wrote into a pipe (small: it fits the pipe buffer). */
static int read_all(int fd, char *buf, size_t len)
{
    size_t n = 0;
    ssize_t r;

    while (n + 1 < len && ((r = read(fd, buf + n, len - 1 - n)) > 0 || (r < 0 && errno == EINTR)))
        if (r > 0)
            n += (size_t)r;
    buf[n] = '\0';
    return (int)n;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void remove_dir(struct agent_mps *m)
{
    if (m->dir[0] != '\0')
        nftw(m->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    m->dir[0] = '\0';
}

/* $TMPDIR/muster-RUN_ID-mps-XXXXXX/{pipe,log}, or /tmp/muster-mps-XXXXXX when that path is
 * too long for the daemon's sockets. */
static int make_dirs(struct agent_mps *m, const char *run_id)
{
    const char *tmp = mc_tmpdir();
    int rc;

    rc = agent_path_fmt(m->dir, sizeof(m->dir), "%s/muster-%s-mps-XXXXXX", tmp, run_id);
    if (rc != 0 || strlen(m->dir) + strlen("/pipe") >= PIPE_DIR_MAX)
        rc = agent_path_fmt(m->dir, sizeof(m->dir), "/tmp/muster-mps-XXXXXX");
    if (rc != 0 || mkdtemp(m->dir) == NULL) {
        rc = rc ? rc : -errno;
        m->dir[0] = '\0';
        return rc;
    }
    if (agent_path_fmt(m->pipe_dir, sizeof(m->pipe_dir), "%s/pipe", m->dir) != 0 ||
        agent_path_fmt(m->log_dir, sizeof(m->log_dir), "%s/log", m->dir) != 0)
        return -ENAMETOOLONG;
    if (mkdir(m->pipe_dir, 0700) != 0 || mkdir(m->log_dir, 0700) != 0)
        return -errno;
    return 0;
}

/* The daemon's environment: muster's own plus the directories and the GPUs in use. */
static int daemon_env(struct agent_mps *m, const struct agent_shared_options *o)
{
    char visible[4096] = "";
    size_t n = 0;

    for (unsigned g = 0; g < o->ngpus; g++) {
        int w = snprintf(visible + n, sizeof(visible) - n, "%s%s", g ? "," : "", o->gpu_ids[g]);
        if (w < 0 || (size_t)w >= sizeof(visible) - n)
            return -ENAMETOOLONG;
        n += (size_t)w;
    }
    if (agent_env_set(&m->env, "CUDA_MPS_PIPE_DIRECTORY", m->pipe_dir) != 0 ||
        agent_env_set(&m->env, "CUDA_MPS_LOG_DIRECTORY", m->log_dir) != 0 ||
        agent_env_set(&m->env, "CUDA_VISIBLE_DEVICES", visible) != 0)
        return -ENOMEM;
    return 0;
}

static int file_exists(const char *dir, const char *name)
{
    char path[PATH_MAX];
    return agent_path_fmt(path, sizeof(path), "%s/%s", dir, name) == 0 && access(path, F_OK) == 0;
}

/* `nvidia-cuda-mps-control -d` forks the daemon and exits 0. A client that finds no daemon
 * silently runs without MPS (and without the cap), so wait until the daemon wrote its pid
 * file before any worker starts. (On the H200 host, driver 580, the pipe directory held
 * control, control_lock, control_privileged, log and the pid file as soon as -d returned:
 * the wait costs nothing there; it guards other versions.) */
static int start_daemon(struct agent_mps *m, char *why, size_t whylen)
{
    char *argv[] = {m->control, "-d", NULL};
    struct agent_env full;
    int status, rc;

    if ((rc = agent_env_merge(&m->env, environ, &full)) != 0)
        return rc;
    /* no stdio of ours: a daemon holding muster's stderr would keep a pipe reader waiting */
    rc = run_wait(argv, full.vars, (const int[3]){-1, -1, -1}, START_TIMEOUT_MS, &status);
    agent_env_free(&full);
    if (rc != 0) {
        snprintf(why, whylen, "%s -d: %s", m->control, strerror(-rc));
        return rc;
    }
    if (!exited_ok(status)) {
        if (WIFEXITED(status))
            snprintf(why, whylen, "%.*s -d exited with code %d", PATH_MAX / 2, m->control,
                     WEXITSTATUS(status));
        else
            snprintf(why, whylen, "%s -d was killed by signal %d", m->control, WTERMSIG(status));
        return -EIO;
    }
    for (uint64_t deadline = mc_mono_ms() + PIDFILE_WAIT_MS; !file_exists(m->pipe_dir, PIDFILE);) {
        if (mc_mono_ms() >= deadline) {
            mc_warn("the MPS daemon wrote no %s in %u s; going on", PIDFILE,
                    PIDFILE_WAIT_MS / 1000);
            break;
        }
        sleep_ms(5);
    }
    return 0;
}

static int mps_fail(struct agent_mps *m, int on, int code, const char *what)
{
    if (on)
        mc_error("--mps: %s", what);
    else
        mc_warn("--mps=auto: %s; the workers share the GPUs without MPS "
                "(no hard memory cap)",
                what);
    remove_dir(m);
    agent_env_free(&m->env);
    m->on = 0;
    return on ? code : 0;
}

int agent_mps_start(struct agent_mps *m, const struct agent_shared_options *o)
{
    int on = o->mps == AGENT_MPS_ON;
    uint64_t bytes = o->gpu_mem_bytes;
    char why[PATH_MAX + 128];
    int rc;

    memset(m, 0, sizeof(*m));
    agent_env_init(&m->env);
    if (o->mps == AGENT_MPS_OFF)
        return 0;
    if (mc_proc_find(AGENT_MPS_CONTROL, 1, m->control, sizeof(m->control)) != 0)
        return mps_fail(m, on, AGENT_EXIT_USAGE,
                        on ? AGENT_MPS_CONTROL " not found (install the NVIDIA driver's MPS "
                                               "tools or run without --mps)"
                           : AGENT_MPS_CONTROL " not found");
    if (bytes == 0 && mc_gpu_mem_query(o->gpu_ids[0], 1, QUERY_TIMEOUT_MS, &bytes, NULL, 0) != 0)
        return mps_fail(m, on, AGENT_EXIT_USAGE,
                        "cannot learn the GPU memory for the MPS cap; pass --gpu-mem SIZE");
    m->limit_mib = agent_mps_limit_mib(bytes, o->mem_fraction, o->per_gpu);
    if (m->limit_mib == 0)
        return mps_fail(m, on, AGENT_EXIT_USAGE, "each worker's memory share is under 1 MiB");
    if ((rc = make_dirs(m, o->run_id)) != 0) {
        snprintf(why, sizeof(why), "cannot create the MPS run directory: %s", strerror(-rc));
        return mps_fail(m, on, AGENT_EXIT_INTERNAL, why);
    }
    if ((rc = daemon_env(m, o)) != 0) {
        snprintf(why, sizeof(why), "%s", strerror(-rc));
        return mps_fail(m, on, AGENT_EXIT_INTERNAL, why);
    }
    if ((rc = start_daemon(m, why, sizeof(why))) != 0) {
        m->on = 1; /* -d may have started a daemon before it failed: stop it */
        agent_mps_stop(m);
        return mps_fail(m, on, AGENT_EXIT_INTERNAL, why);
    }
    m->on = 1;
    mc_info("MPS daemon started (pipe directory %s); each worker capped at %" PRIu64 " MiB",
            m->pipe_dir, m->limit_mib);
    mc_info("MPS clients on one GPU share a fault domain: a fatal GPU fault in one can end "
            "the others; muster restarts each of them");
    return 0;
}

static int all_digits(const char *s)
{
    if (*s == '\0')
        return 0;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s))
            return 0;
    return 1;
}

int agent_mps_worker_env(const struct agent_mps *m, const struct agent_shared_options *o,
                         unsigned task, struct agent_env *env)
{
    unsigned g = task / o->per_gpu;
    int rc = 0;

    if (!m->on)
        return 0;
    rc |= agent_env_set(env, "CUDA_MPS_PIPE_DIRECTORY", m->pipe_dir);
    rc |= agent_env_set(env, "CUDA_MPS_LOG_DIRECTORY", m->log_dir);
    /* The limit's device names a device as the client enumerates it (the variable takes
     * CUDA_VISIBLE_DEVICES' syntax: ordinals or UUIDs, each "=limit"). The client sees exactly
     * one GPU, so that is ordinal 0 whatever the GPU's system index. An ordinal, not the UUID:
     * NVIDIA's k8s device plugin (0.15) moved to indices because limits given by UUID were
     * not applied. */
    rc |= agent_env_setf(env, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=%" PRIu64 "M", m->limit_mib);
    /* The daemon runs with CUDA_VISIBLE_DEVICES = the GPUs in use, and the MPS server then
     * remaps devices: with "0,2" set on the daemon its clients see devices 0 and 1, and a
     * client keeping CUDA_VISIBLE_DEVICES=2 fails (MPS docs, "CUDA_VISIBLE_DEVICES"). So an
     * index becomes the GPU's position in the daemon's list; a UUID (or MIG id) names the
     * same GPU either way and stays. Checked on a 2 x H200 host: daemon on "1", a client with
     * CUDA_VISIBLE_DEVICES=1 got "No CUDA GPUs are available", one with 0 ran on GPU 1 (its
     * UUID) with the cap applied (mem_get_info free = cap - ~0.5 GiB of context). */
    if (all_digits(o->gpu_ids[g]))
        rc |= agent_env_setf(env, "CUDA_VISIBLE_DEVICES", "%u", g);
    return rc ? -ENOMEM : 0;
}

/* A daemon that quit but was not reaped yet (a container without an init that reaps
 * orphans: seen on the GPU host, "[nvidia-cuda-mps] <defunct>") is gone too. */
static int daemon_alive(pid_t pid)
{
    char path[64], buf[512], *p;
    int fd, n;

    if (kill(pid, 0) != 0)
        return 0;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return 1;
    n = read_all(fd, buf, sizeof(buf));
    close(fd);
    p = n > 0 ? strrchr(buf, ')') : NULL; /* "pid (comm) S ...": comm may hold spaces */
    return !(p != NULL && p[1] == ' ' && p[2] == 'Z');
}

static pid_t read_pidfile(const char *dir)
{
    char path[PATH_MAX], buf[32];
    int fd, n;
    long pid;

    if (agent_path_fmt(path, sizeof(path), "%s/%s", dir, PIDFILE) != 0 ||
        (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return 0;
    n = read_all(fd, buf, sizeof(buf));
    close(fd);
    pid = n > 0 ? strtol(buf, NULL, 10) : 0;
    return pid > 1 ? (pid_t)pid : 0;
}

/* `echo quit | nvidia-cuda-mps-control`, with the daemon's environment. Returns 0 or a
 * negative errno. */
static int send_quit(struct agent_mps *m, unsigned timeout_ms)
{
    char *argv[] = {m->control, NULL};
    struct agent_env full;
    int fds[2], status, rc;

    if ((rc = agent_env_merge(&m->env, environ, &full)) != 0)
        return rc;
    if (pipe2(fds, O_CLOEXEC) != 0) {
        agent_env_free(&full);
        return -errno;
    }
    /* "quit\n" fits the pipe buffer: written before the program even runs, never blocking;
     * EPIPE (it died at once) is ignored as SIGPIPE is (shared.c) */
    if (write(fds[1], "quit\n", 5) != 5)
        rc = -EIO;
    close(fds[1]);
    if (rc == 0)
        rc = run_wait(argv, full.vars, (const int[3]){fds[0], -1, 2}, timeout_ms, &status);
    close(fds[0]);
    agent_env_free(&full);
    if (rc == 0 && !exited_ok(status))
        rc = -EIO;
    return rc;
}

void agent_mps_stop(struct agent_mps *m)
{
    sigset_t stop, old;
    uint64_t deadline = mc_mono_ms() + AGENT_MPS_STOP_TIMEOUT_MS;

    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGHUP);
    sigaddset(&stop, SIGQUIT);
    sigprocmask(SIG_BLOCK, &stop, &old);
    if (m->on) {
        pid_t daemon = read_pidfile(m->pipe_dir); /* read first: the daemon removes it */
        int rc = send_quit(m, AGENT_MPS_STOP_TIMEOUT_MS);
        if (rc != 0)
            mc_warn("stopping the MPS daemon: %s quit: %s", m->control, strerror(-rc));
        while (daemon > 0 && daemon_alive(daemon) && mc_mono_ms() < deadline)
            sleep_ms(10);
        if (daemon > 0 && daemon_alive(daemon)) {
            mc_warn("the MPS daemon (pid %d) did not quit; killing it", (int)daemon);
            kill(daemon, SIGKILL);
        }
        mc_info("MPS daemon stopped");
        m->on = 0;
    }
    remove_dir(m);
    agent_env_free(&m->env);
    /* a stop signal that came meanwhile is dropped: muster is on its way out already, and
     * libuv's handlers may be gone (the default action would end muster by the signal) */
    struct timespec zero = {0, 0};
    while (sigtimedwait(&stop, NULL, &zero) > 0)
        ;
    sigprocmask(SIG_SETMASK, &old, NULL);
}
