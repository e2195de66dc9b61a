/* Running one child program to its end from the launcher (outside the agent): nvidia-smi with
 * its stdout captured and a time limit, or a probe run that inherits the terminal and receives
 * our SIGINT/SIGTERM. A private libuv loop reaps it (SIGCHLD, never waitpid(-1)); the child
 * starts through agent_spawn(), so it has its own session and dies with us. */
#ifndef MUSTER_LAUNCHER_CHILD_H
#define MUSTER_LAUNCHER_CHILD_H

#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#define LAUNCHER_CHILD_OUT_MAX 4096 /* captured stdout beyond this is read and dropped */

struct launcher_child {
    uv_loop_t loop;
    uv_signal_t sig[3]; /* SIGCHLD, SIGINT, SIGTERM */
    uv_timer_t timer;
    uv_pipe_t out;
    int nsig, has_timer, has_out;
    pid_t pid;
    int exited, status, timed_out, forwarded;
    char buf[LAUNCHER_CHILD_OUT_MAX];
    size_t len;
};

/* Runs argv to its end. capture: read its stdout into c->buf (stdin/stderr: /dev/null); else it
 * inherits our stdin and stderr, gets out_fd as stdout and receives our SIGINT/SIGTERM.
 * timeout_ms 0: no limit. Returns 0 once the child was reaped (c->status, c->timed_out,
 * c->forwarded), or a negative errno when it could not start (-ENOENT: no such program). */
int launcher_child_run(struct launcher_child *c, char *const *argv, int capture, int out_fd,
                       uint64_t timeout_ms);

#endif
