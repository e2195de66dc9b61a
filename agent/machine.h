/* The agent's state machine as a pure function: a state and an event in, the next state and
 * the actions to take out. agent.c feeds it every rendezvous message, signal and worker event
 * and carries the actions out; nothing here touches the loop, so unit tests drive it directly.
 *
 *   state        what is true                                   leaves on
 *   ----------   --------------------------------------------   ------------------------------
 *   JOINING      JOIN sent, waiting for ASSIGN; no processes    ASSIGN, RESTART, exit events
 *   PREFLIGHT    the pre-flight node process runs (the agent's  ALL_EXITED, RESTART, exits
 *                first round: round 0, or a joining node's)
 *   RUNNING      this attempt's workers run                     WORKER_FAILED, ALL_EXITED, ...
 *   FAILING      a local failure was reported (FAILED sent):    RESTART, JOB_FAILED, exits
 *                workers stop; the server's verdict is awaited
 *   DONE_WAIT    every local worker exited 0, DONE sent:        JOB_DONE, RESTART, exits
 *                waiting for the other nodes
 *   RESTARTING   RESTART came: workers stop, JOIN when gone     ALL_EXITED, exits
 *   HEALTH       between a restart round's RESTART and JOIN:    ALL_EXITED, exits
 *                the health check runs (this node's ranks
 *                failed or hung; agent/health.c)
 *   STOPPING     the exit code is chosen: workers stop, the     ALL_EXITED, JOB_DONE, SIGNAL
 *                agent finishes when they are gone
 *   FINISHED     handles are closing; the loop ends             (final: every event ignored)
 *
 *   event          in state                      next state / actions
 *   -------------  ----------------------------  ----------------------------------------------
 *   ASSIGN         JOINING                       PREFLIGHT  START_PREFLIGHT  (pre-flight due)
 *                                                DONE_WAIT  REPORT_DONE      (pre-flight only)
 *                                                RUNNING    START_WORKERS    (otherwise)
 *                  any other                     ignored (an old round's)
 *   RESTART        STOPPING, FINISHED            ignored
 *                  HEALTH                        ignored (it JOINs once the check passed)
 *                  processes alive               RESTARTING STOP_WORKERS
 *                  no process alive              HEALTH     START_HEALTH     (check due)
 *                                                JOINING    JOIN             (otherwise)
 *   JOB_DONE       FINISHED                      ignored
 *   JOB_FAILED     FINISHED, or stopped by a     ignored
 *                  signal
 *   (both)         processes alive               STOPPING   STOP_WORKERS     (exit code set)
 *                  no process alive              FINISHED   FINISH           (exit code set)
 *   RDZV_ERROR     STOPPING, FINISHED            ignored
 *                  otherwise                     as JOB_FAILED with exit code 3
 *   SIGNAL         first one, processes alive    STOPPING   REPORT_SIGNAL|STOP_WORKERS
 *                    (the pre-emption signal: not REPORT_SIGNAL, every node gets it)
 *                  first one, none alive         FINISHED   FINISH
 *                  a second one                  same state KILL_WORKERS (processes alive)
 *   WORKER_FAILED  RUNNING                       FAILING    STOP_WORKERS|REPORT_FAILURE
 *                  any other                     ignored (a worker dying of our SIGTERM)
 *   REPORT_FAILED  processes alive               STOPPING   (workers already stopping; code 3)
 *                  none alive                    FINISHED   FINISH
 *   ALL_EXITED     PREFLIGHT                     FAILING    REPORT_PF_FAILURE (check failed)
 *                                                FINISHED   REPORT_PF_FAILURE|FINISH, exit 4
 *                                                           (check failed on a joining node:
 *                                                           it leaves, the job goes on)
 *                                                DONE_WAIT  REPORT_DONE      (pre-flight only)
 *                                                RUNNING    START_WORKERS    (passed)
 *                  RUNNING                       DONE_WAIT  REPORT_DONE
 *                  RESTARTING                    HEALTH     START_HEALTH     (check due)
 *                                                JOINING    JOIN             (otherwise)
 *                  HEALTH                        JOINING    JOIN             (passed)
 *                                                FINISHED   REPORT_HEALTH_FAILURE|FINISH,
 *                                                           exit 4 (failed: it leaves the
 *                                                           job, a spare takes its place)
 *                  STOPPING                      FINISHED   FINISH
 *                  FAILING and others            unchanged (the server's verdict is awaited)
 *   FATAL          any but FINISHED              FINISHED   FINISH           (exit code set)
 *
 * Restarts themselves are the server's decision (restart budget = the JOIN's max_restarts,
 * counted per job): the agent only follows RESTART, JOB_FAILED and JOB_DONE. */
#ifndef MUSTER_AGENT_MACHINE_H
#define MUSTER_AGENT_MACHINE_H

enum agent_state {
    AGENT_S_JOINING,
    AGENT_S_PREFLIGHT,
    AGENT_S_RUNNING,
    AGENT_S_FAILING,
    AGENT_S_DONE_WAIT,
    AGENT_S_RESTARTING,
    AGENT_S_HEALTH,
    AGENT_S_STOPPING,
    AGENT_S_FINISHED,
};

enum agent_event_kind {
    AGENT_EV_ASSIGN,        /* ASSIGN for our JOIN */
    AGENT_EV_RESTART,       /* the server restarts the job */
    AGENT_EV_JOB_DONE,      /* every node is done */
    AGENT_EV_JOB_FAILED,    /* no restart left, or a final failure; code: the exit code */
    AGENT_EV_RDZV_ERROR,    /* the rendezvous connection failed for good */
    AGENT_EV_SIGNAL,        /* a handled signal; signum set */
    AGENT_EV_WORKER_FAILED, /* a local worker failed, hung, or could not start */
    AGENT_EV_REPORT_FAILED, /* FAILED could not be sent; code: the exit code */
    AGENT_EV_ALL_EXITED,    /* the workers (or the pre-flight process) are all gone */
    AGENT_EV_FATAL,         /* the agent cannot go on; code: the exit code */
};

struct agent_event {
    enum agent_event_kind kind;
    int code;   /* JOB_FAILED, REPORT_FAILED, FATAL: the exit code to end with */
    int signum; /* SIGNAL */
};

/* What agent.c knows when the event comes. */
struct agent_machine_ctx {
    int have_procs;       /* a worker group or the pre-flight process exists */
    int stop_signal;      /* a signal is already stopping the agent (its number) */
    int preempt_signal;   /* --preempt-signal, 0: none */
    int preflight_due;    /* at ASSIGN: this agent has not run the pre-flight yet (its first
                           * round: round 0, or the round a joining node enters) */
    int preflight_only;   /* `muster preflight`: no workers after the checks */
    int preflight_failed; /* at ALL_EXITED in PREFLIGHT: the node process failed */
    int preflight_alone;  /* the pre-flight ran node-local: this node joined a running job */
    int health_due;       /* before this restart round's JOIN: the health check is to run
                           * (this node's ranks failed or hung, it has GPUs, not off) */
    int health_failed;    /* at ALL_EXITED in HEALTH: the check failed or timed out */
};

/* Carried out in the order of the bits: a report of a signal goes out before the workers get
 * it; a local failure stops the other workers before the round trip of its report. */
enum agent_action {
    AGENT_ACT_JOIN = 1 << 0,                  /* send JOIN (a fresh MASTER_PORT, resume pick) */
    AGENT_ACT_START_PREFLIGHT = 1 << 1,       /* start the pre-flight node process */
    AGENT_ACT_START_HEALTH = 1 << 2,          /* start the health check (agent/health.c) */
    AGENT_ACT_START_WORKERS = 1 << 3,         /* start this attempt's workers */
    AGENT_ACT_REPORT_SIGNAL = 1 << 4,         /* FAILED, final: this agent is stopped by a signal */
    AGENT_ACT_STOP_WORKERS = 1 << 5,          /* SIGTERM (or the signal) now, SIGKILL after grace */
    AGENT_ACT_KILL_WORKERS = 1 << 6,          /* SIGKILL now */
    AGENT_ACT_REPORT_FAILURE = 1 << 7,        /* FAILED with the local failure */
    AGENT_ACT_REPORT_PF_FAILURE = 1 << 8,     /* FAILED, final, with the pre-flight's reason (a
                                               * joining node: LEAVE, not final) */
    AGENT_ACT_REPORT_HEALTH_FAILURE = 1 << 9, /* LEAVE, not final, with the health check's
                                               * reason: the node leaves before the round */
    AGENT_ACT_REPORT_DONE = 1 << 10,          /* DONE for this round */
    AGENT_ACT_FINISH = 1 << 11,               /* close every handle: the loop ends */
};

struct agent_step {
    enum agent_state state;
    unsigned actions;  /* enum agent_action bits */
    int set_exit_code; /* 1: exit_code is the agent's exit code from now on */
    int exit_code;
    int ignored; /* the event does not apply in this state: nothing changes */
};

/* The next state and actions for ev in state s. Pure: no side effects. */
struct agent_step agent_machine_next(enum agent_state s, const struct agent_event *ev,
                                     const struct agent_machine_ctx *c);

/* The exit code of an agent stopped by signum: 75 (requeue) for the pre-emption signal,
 * else 128 + signum, as a shell reports it. */
int agent_signal_exit_code(int signum, int preempt_signal);

/* "JOINING" ... "FINISHED", for logs and tests. */
const char *agent_state_name(enum agent_state s);

#endif
