/* The workers of one attempt on this node: spawn, watch (event-driven: a SIGCHLD watcher
 * reaps our own pids at once), stop with SIGTERM then SIGKILL after a grace. */
#ifndef MUSTER_AGENT_GROUP_H
#define MUSTER_AGENT_GROUP_H

#include <uv.h>

#include "proctree.h"
#include "worker.h"

struct agent_group;

/* exit_cb: one worker was reaped (w->exit_status/term_signal set). all_exited_cb: no worker
 * is alive any more. Both run on the loop thread; the group may be stopped or closed
 * from inside them. */
struct agent_group_cbs {
    void (*exit_cb)(struct agent_group *g, struct agent_worker *w);
    void (*all_exited_cb)(struct agent_group *g);
    /* optional: worker w's stream (0 stdout, 1 stderr) delivered bytes through its pipe */
    void (*output_cb)(struct agent_group *g, struct agent_worker *w, int stream);
    /* optional: the bytes themselves, as read (n == 0: the stream ended); the job's log */
    void (*data_cb)(struct agent_group *g, struct agent_worker *w, int stream, const char *data,
                    size_t n);
};

struct agent_group {
    uv_loop_t *loop;
    struct agent_worker *workers;
    int n;
    int alive;
    int open_handles;
    int stopping;
    int closing;
    uv_timer_t kill_timer;
    uv_signal_t sigchld;
    struct agent_proctree_group tree; /* the workers' whole process trees */
    const struct agent_group_cbs *cbs;
    void (*close_cb)(void *data);
    void *data;
};

/* Allocates a group of n workers. Borrows loop and cbs. Returns 0 or -ENOMEM. */
int agent_group_new(uv_loop_t *loop, int n, const struct agent_group_cbs *cbs, void *data,
                    struct agent_group **out);

/* Spawns worker i. Returns 0 or a negative errno (the worker then counts as not started). */
int agent_group_spawn(struct agent_group *g, int i, int rank, const struct agent_worker_spec *s);

/* Sends sig to every worker's process group and, after timeout_ms, SIGKILL to all that remain
 * and to everything the workers started (also in other sessions: proctree.h). Calling it
 * again while stopping only forwards the new signal; SIGKILL kills the trees at once. */
void agent_group_stop(struct agent_group *g, int sig, unsigned timeout_ms);

/* Once no worker is alive: kills everything the workers left (process groups, and whole
 * trees: proctree.h; waits briefly until they are gone), closes every handle and frees the
 * group from the last close callback, then calls close_cb(data). Accepts NULL. */
void agent_group_close(struct agent_group *g, void (*close_cb)(void *data), void *data);

#endif
