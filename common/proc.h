/* Running one helper program to its end: the one child-with-a-timeout of muster (nvidia-smi,
 * nvidia-cuda-mps-control, muster-preflight inventory, the plan's probe run).
 *
 * The child starts in its own session (its process group is its pid), with every signal at its
 * default disposition and none blocked, and armed to receive SIGKILL when the calling thread
 * exits, so it cannot outlive a killed muster. A private libuv loop waits for it: SIGCHLD
 * through a uv_signal_t and waitpid on its pid only (never waitpid(-1)), the deadline on a
 * timer: SIGTERM to its group, then SIGKILL to the group grace_ms later.
 *
 * Why not agent_spawn (agent/spawn.h): common/ sits below agent/, and these helpers need none
 * of its cgroup and NUMA steps; one fork per helper run costs nothing next to what they do. */
#ifndef MUSTER_COMMON_PROC_H
#define MUSTER_COMMON_PROC_H

#include <stddef.h>
#include <stdint.h>

struct mc_proc_opts {
    char *const *argv;   /* NULL-terminated; argv[0] looked up on PATH when it has no '/' */
    char *const *envp;   /* the complete environment; NULL: ours */
    int stdio[3];        /* fds installed as 0, 1, 2 in the child; -1: /dev/null */
    int capture;         /* stdout into the result's out (stdio[1] is then ignored) */
    size_t capture_max;  /* bytes kept of it (0: 4096); the rest is read and dropped */
    uint64_t timeout_ms; /* 0: no limit */
    uint64_t grace_ms;   /* from SIGTERM to SIGKILL at the deadline; 0: SIGKILL at once */
    int forward_signals; /* our SIGINT/SIGTERM go on to the child's group */
};

struct mc_proc_result {
    int status;    /* as waitpid returns it */
    int timed_out; /* the deadline passed and the child was signalled */
    int forwarded; /* the last signal forwarded to it, 0: none */
    char *out;     /* captured stdout, NUL-terminated (capture only; mc_proc_result_free) */
    size_t out_len;
};

/* Runs o->argv to its end. Returns 0 once the child was reaped (r filled in), or a negative
 * errno when it could not run: -ENOENT (no such program), -EACCES, or what fork, pipe or libuv
 * returned. Call mc_proc_result_free(r) after either. */
int mc_proc_run(const struct mc_proc_opts *o, struct mc_proc_result *r);

/* Frees r->out; accepts a zeroed or half-filled r. */
void mc_proc_result_free(struct mc_proc_result *r);

/* Finds the program name on PATH, then, with driver_dirs, in the NVIDIA driver's usual places
 * (/usr/local/nvidia/bin, /usr/bin: a container's PATH often lacks them). path gets the path
 * (len bytes). Returns 0 or -ENOENT (path ""). */
int mc_proc_find(const char *name, int driver_dirs, char *path, size_t len);

/* The shell's view of a wait status: the exit code, or 128 + the signal that killed it. */
int mc_proc_exit_code(int status);

#endif
