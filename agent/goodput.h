/* Where a job's time went on this node (docs/FAULT_TOLERANCE.md "Goodput"): wall time split
 * into phases, plus the training redone after restarts ("work lost"). Pure bookkeeping: agent.c
 * tells it each state change and the few events below; it reads time through a struct mc_clock
 * (common/loopclock.h) and starts no timer, so unit tests drive it on tests/unit/fakeclock.h.
 *
 * The phases follow the agent's states (machine.h):
 *   rendezvous    JOINING (the JOIN prepared and sent -> ASSIGN), less the restart backoff
 *   restart_wait  the part of JOINING before the server's --restart-backoff hold ends: from
 *                 the RESTART, the hold is delay_ms; what of it the stopping took is stopping
 *   preflight     PREFLIGHT
 *   startup       RUNNING before the attempt's first progress
 *   training      RUNNING from the first progress on
 *   stopping      FAILING, RESTARTING, STOPPING and DONE_WAIT: from the failure, RESTART or
 *                 the last worker's exit until the workers are gone and the verdict came
 * First progress (agent_goodput_progress) is the first of: a line a worker of this attempt
 * wrote on stdout, or a checkpoint recorded in this attempt. An attempt that ended cleanly
 * without either counts its whole RUNNING time as training (nothing told us when it began).
 *
 * Work lost: at each restart, the training of the failed attempt after the checkpoint the next
 * attempt resumes from (all of it when it resumes from nothing, from a checkpoint older than the
 * attempt's training, or from one whose time this node does not know); at a failed end, the
 * training since the newest checkpoint known. Goodput = (training - lost) / wall. */
#ifndef MUSTER_AGENT_GOODPUT_H
#define MUSTER_AGENT_GOODPUT_H

#include <stdint.h>
#include <stdio.h>
#include <uv.h>

#include "loopclock.h"
#include "machine.h"
#include "message.h"

#define AGENT_GP_CKPTS 8 /* checkpoints whose times are remembered, newest kept */

struct agent_goodput {
    const struct mc_clock *clock; /* mc_clock_uv unless a test set its own */
    uv_loop_t *loop;
    int phase;                    /* RDZV_GP_*, or -1 once ended */
    uint64_t since;               /* clock now when the current phase began */
    uint64_t ms[RDZV_GP_NPHASES]; /* closed phases */
    uint64_t lost_ms;
    uint64_t backoff_until; /* clock now: JOINING before it is restart_wait */
    uint32_t restarts, round;
    /* the current attempt's training: its start on the wall clock, its length so far */
    int progressed;
    int64_t train_wall_ms;
    uint64_t train_ms;
    struct {
        char name[RDZV_CKPT_NAME_MAX + 1];
        int64_t wall_ms; /* when it was recorded (the registry's recorded_ns) */
    } ck[AGENT_GP_CKPTS];
    unsigned nck, ck_next;
};

/* Starts the count now, in the rendezvous phase (the agent starts by joining). loop and clock
 * are borrowed; clock NULL = mc_clock_uv. */
void agent_goodput_init(struct agent_goodput *g, uv_loop_t *loop, const struct mc_clock *clock);

/* The agent entered st (FINISHED ends the count; later calls change nothing). */
void agent_goodput_state(struct agent_goodput *g, enum agent_state st);

/* The current attempt showed progress at wall_ms (a worker's first stdout line, a checkpoint):
 * startup ends, training begins. Returns 1 when it did just now (the first time), else 0. */
int agent_goodput_progress(struct agent_goodput *g, int64_t wall_ms);

/* RESTART came: the server holds the next round delay_ms from now. */
void agent_goodput_restart(struct agent_goodput *g, uint64_t delay_ms);

/* A checkpoint name recorded (or picked) at wall_ms: remembered for the work-lost figure. */
void agent_goodput_checkpoint(struct agent_goodput *g, const char *name, int64_t wall_ms);

/* An attempt after a restart is assigned, resuming from resume ("" = from nothing): the work
 * of the failed attempt after that checkpoint is counted lost. round is the new round. */
void agent_goodput_resume(struct agent_goodput *g, const char *resume, uint32_t round);

/* The job failed for good: the training since the newest known checkpoint is lost too. */
void agent_goodput_failed(struct agent_goodput *g);

/* The figures now (the current phase counted up to now). */
void agent_goodput_get(const struct agent_goodput *g, struct rdzv_goodput *out);

/* The table of the final summary: one line per phase with seconds and %, work lost, and the
 * ratio; every line starts "muster: ". */
void agent_goodput_print(FILE *f, const struct rdzv_goodput *gp);

#endif
