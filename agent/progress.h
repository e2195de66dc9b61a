/* The live "rendezvous JOB: 3/4 nodes, last call in 12 s" line while a round fills.
 * On a terminal it is one line redrawn every second; elsewhere (logs, CI) a line is written
 * when the count changes and every 10 s, so that logs stay readable. */
#ifndef MUSTER_AGENT_PROGRESS_H
#define MUSTER_AGENT_PROGRESS_H

#include <stdint.h>
#include <uv.h>

#include "loopclock.h"
#include "message.h"

struct agent_progress {
    uv_timer_t timer;
    /* time and the redraw timer go through it: mc_clock_uv from init; a unit test may set its
     * own (tests/unit/fakeclock.h) before the first update */
    const struct mc_clock *clock;
    const char *job;
    struct rdzv_waiting last; /* as the server sent it */
    uint64_t last_at;         /* clock now when it arrived */
    uint64_t printed_at;      /* clock now of the last line (not on a terminal) */
    uint32_t printed_joined;
    int tty;
    int drawn; /* a terminal line is on screen without its newline */
    int active;
};

/* Initialises the timer on loop (close it with agent_progress_close). job is borrowed. */
void agent_progress_init(uv_loop_t *loop, struct agent_progress *p, const char *job);

/* A WAITING message arrived: (re)draws the line and keeps it live. */
void agent_progress_update(struct agent_progress *p, const struct rdzv_waiting *w);

/* The round closed (or the wait ended otherwise): stops redrawing, ends the line. */
void agent_progress_stop(struct agent_progress *p);

/* Stops and closes the timer handle (close_cb as for uv_close, may be NULL). */
void agent_progress_close(struct agent_progress *p, uv_close_cb close_cb);

#endif
