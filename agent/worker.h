/* One worker process: started by agent_spawn() in its own process group with
 * PR_SET_PDEATHSIG armed and inside its group's cgroup where there is one (proctree.h), its
 * stdout/stderr piped through the agent (prefix, tee) or straight into a log file. */
#ifndef MUSTER_AGENT_WORKER_H
#define MUSTER_AGENT_WORKER_H

#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "output.h"

struct agent_group;
struct agent_spawn_bind; /* spawn.h */

struct agent_worker_spec {
    char **argv;    /* the worker command, NULL-terminated; borrowed */
    char **env;     /* the complete environment, NULL-terminated; borrowed */
    int console[2]; /* stdout/stderr console fd, or -1 */
    int file[2];    /* log file fd per stream or -1; ownership passes to the worker */
    const struct agent_spawn_bind *bind;   /* --numa-binding (numa.h), NULL: none; borrowed */
    const struct agent_output_cfg *output; /* prefix, --dedup, filters; NULL: defaults */
};

struct agent_worker {
    uv_pipe_t pipe[2];
    struct agent_output out[2];
    int pipe_open[2];
    int local_rank, rank;
    pid_t pid;       /* 0: never started */
    int alive;       /* started and not reaped yet */
    int exit_status; /* valid once reaped */
    int term_signal;
    uint64_t exit_time_ms; /* wall clock */
    struct agent_group *group;
};

/* Starts w (w->group, local_rank and rank set by the caller). Returns 0 or a negative errno
 * (-ENOENT / -EACCES when the program cannot be executed); on error the files in spec are
 * closed and no handle is left open. */
int agent_worker_spawn(uv_loop_t *loop, struct agent_worker *w,
                       const struct agent_worker_spec *spec);

/* Reaps w if it has exited (waitpid WNOHANG on its own pid). Returns 1 when it was reaped:
 * its output is drained, its pipes are closing and exit_status/term_signal are set. */
int agent_worker_reap(struct agent_worker *w);

/* Sends sig to the worker's whole process group (its children too; descendants in other
 * sessions die with the group: agent_group_stop/close). */
void agent_worker_kill(struct agent_worker *w, int sig);

#endif
