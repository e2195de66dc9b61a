/* Tiny timing helper for bench/bench.sh (built by CMake as build/bench/stamp).
 * All times are CLOCK_MONOTONIC nanoseconds, comparable across processes on one machine.
 *
 *   stamp now                     print the current time
 *   stamp time CMD [ARGS...]      run CMD with stdin/stdout/stderr on /dev/null, then print
 *                                 "<elapsed_ns> <exit status or 128+signal>"
 *   stamp worker LOG              a launcher worker for the restart benchmark: appends
 *                                 "start <restart> <rank> <ns>" to LOG; in attempt 0 (restart
 *                                 count 0) rank 0 appends "fail 0 0 <ns>" and exits 1 at once
 *                                 while the other ranks wait to be stopped; in later attempts
 *                                 every rank exits 0
 *   stamp sleeper DIR SECONDS     create DIR/ready.<pid>, then sleep (for the RSS benchmark)
 *   stamp mark LOG [SECONDS]      rendezvous benchmark worker: append "start <rank> <ns> <ppid>"
 *                                 to LOG, then sleep SECONDS (default 0) and exit 0
 *   stamp hold LOG                lost-agent / host-cut benchmark worker: append
 *                                 "start <rank> <ns> <ppid>", wait; on SIGTERM/SIGINT append
 *                                 "stop <rank> <ns> <ppid-at-start>" and exit 0
 *
 * Each log record is one write(2) to an O_APPEND descriptor, so records of concurrent workers
 * never interleave. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void record(int fd, const char *what, const char *restart, const char *rank, long long t)
{
    char buf[128];
    int n = snprintf(buf, sizeof buf, "%s %s %s %lld\n", what, restart, rank, t);
    if (write(fd, buf, (size_t)n) != n)
        _exit(97);
}

static int hold_fd;
static char hold_rank[32];
static long long hold_ppid;

static void on_term(int sig)
{
    char buf[128];
    int n = snprintf(buf, sizeof buf, "stop %s %lld %lld\n", hold_rank, now_ns(), hold_ppid);
    (void)sig;
    if (write(hold_fd, buf, (size_t)n) != n)
        _exit(97);
    _exit(0);
}

/* mark|hold LOG [S]: appends "start RANK NS PPID"; mark sleeps S s and exits, hold waits for
 * SIGTERM/SIGINT and appends "stop ..." */
static int mark_or_hold(int argc, char **argv)
{
    long long t = now_ns();
    const char *rank = getenv("RANK");
    char buf[128];
    hold_fd = open(argv[2], O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (!rank || hold_fd < 0)
        return 96;
    snprintf(hold_rank, sizeof hold_rank, "%s", rank);
    hold_ppid = (long long)getppid();
    if (argv[1][0] == 'h') {
        signal(SIGTERM, on_term);
        signal(SIGINT, on_term);
    }
    int n = snprintf(buf, sizeof buf, "start %s %lld %lld\n", rank, t, hold_ppid);
    if (write(hold_fd, buf, (size_t)n) != n)
        return 97;
    if (argv[1][0] == 'm') {
        if (argc >= 4)
            sleep((unsigned)atoi(argv[3]));
        return 0;
    }
    for (;;)
        pause();
}

/* time CMD...: runs CMD (output to /dev/null), prints "NS EXIT_CODE" */
static int timed(char **cmd)
{
    long long t0 = now_ns();
    pid_t pid = fork();
    if (pid < 0)
        return 98;
    if (pid == 0) {
        int fd = open("/dev/null", O_RDWR);
        dup2(fd, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        execvp(cmd[0], cmd);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        ;
    long long t1 = now_ns();
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    printf("%lld %d\n", t1 - t0, code);
    return 0;
}

/* worker LOG: records its start; in restart 0 rank 0 records "fail" and exits 1, the others
 * sleep until the launcher stops them */
static int worker(const char *log)
{
    long long t = now_ns();
    const char *rank = getenv("RANK"), *restart = getenv("TORCHELASTIC_RESTART_COUNT");
    if (!rank || !restart)
        return 96;
    int fd = open(log, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0)
        return 95;
    record(fd, "start", restart, rank, t);
    if (strcmp(restart, "0") != 0)
        return 0;
    if (strcmp(rank, "0") == 0) {
        record(fd, "fail", restart, rank, now_ns());
        _exit(1);
    }
    sleep(60); /* the launcher stops us (SIGTERM, default action) */
    return 0;
}

/* sleeper DIR SECONDS: creates DIR/ready.PID, sleeps */
static int sleeper(const char *dir, const char *seconds)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/ready.%d", dir, (int)getpid());
    int fd = open(path, O_WRONLY | O_CREAT, 0644);
    if (fd >= 0)
        close(fd);
    sleep((unsigned)atoi(seconds));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && (strcmp(argv[1], "mark") == 0 || strcmp(argv[1], "hold") == 0))
        return mark_or_hold(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "now") == 0) {
        printf("%lld\n", now_ns());
        return 0;
    }
    if (argc >= 3 && strcmp(argv[1], "time") == 0)
        return timed(argv + 2);
    if (argc >= 3 && strcmp(argv[1], "worker") == 0)
        return worker(argv[2]);
    if (argc >= 4 && strcmp(argv[1], "sleeper") == 0)
        return sleeper(argv[2], argv[3]);
    fprintf(stderr, "usage: stamp now | time CMD... | worker LOG | sleeper DIR SECONDS | mark LOG "
                    "[S] | hold LOG\n");
    return 2;
}
