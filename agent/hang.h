/* Hang detection (--hang-timeout): each worker gets MUSTER_HEARTBEAT_FILE and touches it now
 * and then. A worker that touched it once and then stays silent longer than the timeout is
 * reported hung: its heartbeat alone decides (it opted in). The workers that never touch it are
 * watched without code changes: output (agent_hang_progress) and CPU time (of the worker and
 * its children, sampled every timeout/4, 0.2 to 5 s; more than 1/20 of the period is progress)
 * are progress, and when every one of them made none for the timeout the node is hung (one
 * report, for the rank whose progress is oldest). A node whose ranks all wait, in a
 * collective, a lock, a sleep, is hung; one rank computing or printing keeps it alive.
 *
 * Event-driven: an inotify watch (uv_fs_event) on the heartbeat directory reports each touch;
 * one timer is armed at the earliest deadline. Touch times are the agent's monotonic clock at
 * the event, never the file's mtime (another clock). */
#ifndef MUSTER_AGENT_HANG_H
#define MUSTER_AGENT_HANG_H

#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "loopclock.h"

struct agent_hang;

/* local_rank stopped beating: silent_ms since its last touch. */
typedef void (*agent_hang_cb)(struct agent_hang *h, int local_rank, uint64_t silent_ms);

struct agent_hang {
    uv_loop_t *loop;
    uv_fs_event_t event;
    uv_timer_t timer;
    /* time and the timer go through it: mc_clock_uv from init; a unit test may set its own
     * (tests/unit/fakeclock.h) before agent_hang_start */
    const struct mc_clock *clock;
    char dir[4096];
    unsigned timeout_ms;
    int n;
    uint64_t *last_touch; /* clock now of the last touch; 0 = never touched */
    uint64_t *progress;   /* the ranks without heartbeats: clock now of their last progress */
    int64_t *cpu;         /* ... their CPU ticks at that sample; -1 none yet */
    pid_t *pid;           /* ... their pid (0: not started) */
    int *armed;           /* watching this local rank in the current attempt */
    unsigned attempt;
    agent_hang_cb cb;
    void *data;
    int watching;
    int open_handles;
    void (*close_cb)(void *data);
};

/* Sets up watching dir (created if missing) for n workers. Borrows loop. Returns 0 or a
 * negative errno; on error nothing needs closing. */
int agent_hang_init(uv_loop_t *loop, struct agent_hang *h, const char *dir, int n,
                    unsigned timeout_ms, agent_hang_cb cb, void *data);

/* The heartbeat file of local_rank in this attempt (PATH_MAX buffer). */
void agent_hang_file(const struct agent_hang *h, unsigned attempt, int local_rank, char *path);

/* A new attempt starts: forget old touches, remove old files, watch every local rank. */
void agent_hang_start(struct agent_hang *h, unsigned attempt);

/* local_rank was started as pid: watch its output and CPU time until it touches its heartbeat. */
void agent_hang_watch(struct agent_hang *h, int local_rank, pid_t pid);

/* local_rank wrote output: progress. */
void agent_hang_progress(struct agent_hang *h, int local_rank);

/* How long local_rank has shown no progress (heartbeat, or output/CPU), ms. */
uint64_t agent_hang_silent_ms(const struct agent_hang *h, int local_rank);

/* Stops watching local_rank (it exited) or every rank (local_rank < 0). */
void agent_hang_disarm(struct agent_hang *h, int local_rank);

/* Closes both handles; close_cb(data) after the last one (may be NULL). */
void agent_hang_close(struct agent_hang *h, void (*close_cb)(void *data));

#endif
