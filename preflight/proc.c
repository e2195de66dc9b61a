/* Child processes of the node process: muster-preflight inventory (output captured) and the
 * per-GPU ranks (nccl.c). posix_spawn: the node process is single-threaded when it spawns. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "node_priv.h"

extern char **environ;

#define CAPTURE_MAX (1 << 20)

static int exit_code(int status)
{
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int pf_run_capture(char *const argv[], int timeout_ms, char **out)
{
    posix_spawn_file_actions_t fa;
    double deadline = pf_now_ms() + timeout_ms;
    size_t len = 0;
    char *buf = malloc(CAPTURE_MAX + 1);
    int fds[2] = {-1, -1}, status = 0, rc, timed_out = 0;
    pid_t pid;

    *out = NULL;
    if (buf == NULL || pipe2(fds, O_CLOEXEC) != 0) {
        free(buf);
        return -errno;
    }
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        free(buf);
        return -rc;
    }
    for (;;) {
        struct pollfd p = {.fd = fds[0], .events = POLLIN};
        int left = (int)(deadline - pf_now_ms());
        ssize_t r;
        if (left <= 0) {
            timed_out = 1;
            break;
        }
        if (poll(&p, 1, left) <= 0)
            continue;
        r = read(fds[0], buf + len, CAPTURE_MAX - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        len += (size_t)r;
        if (len == CAPTURE_MAX)
            break;
    }
    close(fds[0]);
    if (timed_out)
        kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    buf[len] = '\0';
    *out = buf;
    return timed_out ? -ETIMEDOUT : exit_code(status);
}
