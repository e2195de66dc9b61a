/* One worker process: spawned through the muster binary's exec wrapper (which arms
 * PR_SET_PDEATHSIG before exec'ing the real command), in its own process group, with its
 * stdout/stderr piped through the agent (prefix, tee) or straight into a log file. */
#ifndef MUSTER_AGENT_WORKER_H
#define MUSTER_AGENT_WORKER_H

#include <stdint.h>
#include <uv.h>

#include "output.h"

struct agent_group;

struct agent_worker_spec {
    const char *exe; /* the muster binary, run as `muster __worker PPID CMD...` */
    char **argv;     /* the worker command, NULL-terminated; borrowed */
    char **env;      /* the complete environment, NULL-terminated; borrowed */
    int console[2];  /* stdout/stderr console fd, or -1 */
    int file[2];     /* log file fd per stream or -1; ownership passes to the worker */
};

struct agent_worker {
    uv_process_t proc;
    uv_pipe_t pipe[2];
    struct agent_output out[2];
    int pipe_open[2];
    int proc_open;
    int local_rank, rank;
    int pid;
    int alive;           /* spawned and not reaped yet */
    int64_t exit_status; /* valid once !alive */
    int term_signal;
    uint64_t exit_time_ms; /* wall clock */
    struct agent_group *group;
};

/* Spawns w (w->group, local_rank and rank set by the caller). Returns 0 or a negative errno;
 * on error the files in spec are closed and no handle is left open. */
int agent_worker_spawn(uv_loop_t *loop, struct agent_worker *w,
                       const struct agent_worker_spec *spec);

/* Sends sig to the worker's whole process group (its children too). */
void agent_worker_kill(struct agent_worker *w, int sig);

#endif
