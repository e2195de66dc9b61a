/* The agent's transition function: see the table in machine.h. One small handler per event. */
#include "machine.h"

#include "agent.h"

static struct agent_step stay(enum agent_state s)
{
    return (struct agent_step){.state = s, .ignored = 1};
}

static struct agent_step go(enum agent_state s, unsigned actions)
{
    return (struct agent_step){.state = s, .actions = actions};
}

/* Stop the processes first and finish when they are gone, or finish now. */
static struct agent_step exit_with(const struct agent_machine_ctx *c, int code)
{
    struct agent_step st = c->have_procs ? go(AGENT_S_STOPPING, AGENT_ACT_STOP_WORKERS)
                                         : go(AGENT_S_FINISHED, AGENT_ACT_FINISH);
    st.set_exit_code = 1;
    st.exit_code = code;
    return st;
}

static struct agent_step on_assign(enum agent_state s, const struct agent_machine_ctx *c)
{
    if (s != AGENT_S_JOINING)
        return stay(s); /* an old round's: only the ASSIGN of our JOIN starts anything */
    /* the pre-flight runs once per agent, at its first round: every node of round 0 takes
     * part, so the checks can meet in that round's KV store; a node that joins later checks
     * itself alone (agent/preflight.c) before its workers start */
    if (c->preflight_due)
        return go(AGENT_S_PREFLIGHT, AGENT_ACT_START_PREFLIGHT);
    if (c->preflight_only) /* a later round of `muster preflight`: nothing to run */
        return go(AGENT_S_DONE_WAIT, AGENT_ACT_REPORT_DONE);
    return go(AGENT_S_RUNNING, AGENT_ACT_START_WORKERS);
}

/* The JOIN of a restart round, or first the health check of a node whose ranks failed or hung
 * in the attempt that ended (docs/PREFLIGHT.md "Health check before a restart round"). */
static struct agent_step rejoin(const struct agent_machine_ctx *c)
{
    if (c->health_due)
        return go(AGENT_S_HEALTH, AGENT_ACT_START_HEALTH);
    return go(AGENT_S_JOINING, AGENT_ACT_JOIN);
}

static struct agent_step on_restart(enum agent_state s, const struct agent_machine_ctx *c)
{
    /* HEALTH: not in a round yet (the JOIN follows the check); a RESTART then is for the round
     * this node already left */
    if (s == AGENT_S_STOPPING || s == AGENT_S_FINISHED || s == AGENT_S_HEALTH)
        return stay(s);
    if (c->have_procs)
        return go(AGENT_S_RESTARTING, AGENT_ACT_STOP_WORKERS);
    return rejoin(c);
}

static struct agent_step on_signal(enum agent_state s, const struct agent_event *ev,
                                   const struct agent_machine_ctx *c)
{
    struct agent_step st;

    if (s == AGENT_S_FINISHED)
        return stay(s);
    if (c->stop_signal) /* a second signal: the user does not want to wait for the grace */
        return go(s, c->have_procs ? AGENT_ACT_KILL_WORKERS : 0);
    st = exit_with(c, agent_signal_exit_code(ev->signum, c->preempt_signal));
    /* Pre-emption is not a failure of this node: under Slurm every node of the job gets the
     * signal at about the same time. Reported, it started a restart round on the nodes whose
     * signal was still on its way (their new workers then sat out the shutdown timeout; found
     * by the slurm.preempt test); a node pre-empted alone is seen leaving when it exits. */
    if (c->have_procs && ev->signum != c->preempt_signal)
        st.actions |= AGENT_ACT_REPORT_SIGNAL;
    return st;
}

static struct agent_step on_all_exited(enum agent_state s, const struct agent_machine_ctx *c)
{
    switch (s) {
    case AGENT_S_PREFLIGHT:
        if (c->preflight_failed && c->preflight_alone) {
            /* a node that joined a running job and failed its checks leaves it: the running
             * nodes go on without it (the server sees a LEAVE, as of a lost node) */
            struct agent_step st = exit_with(c, AGENT_EXIT_PREFLIGHT);
            st.actions |= AGENT_ACT_REPORT_PF_FAILURE;
            return st;
        }
        if (c->preflight_failed) /* the job fails for good: JOB_FAILED comes from the server */
            return go(AGENT_S_FAILING, AGENT_ACT_REPORT_PF_FAILURE);
        if (c->preflight_only)
            return go(AGENT_S_DONE_WAIT, AGENT_ACT_REPORT_DONE);
        return go(AGENT_S_RUNNING, AGENT_ACT_START_WORKERS);
    case AGENT_S_RUNNING: /* JOB_DONE comes from the server once every node is done */
        return go(AGENT_S_DONE_WAIT, AGENT_ACT_REPORT_DONE);
    case AGENT_S_RESTARTING:
        return rejoin(c);
    case AGENT_S_HEALTH:
        if (c->health_failed) {
            /* like a joining node failing its pre-flight: it leaves (LEAVE, not final) while
             * the round fills, so a spare takes its place; exit 4 */
            struct agent_step st = exit_with(c, AGENT_EXIT_PREFLIGHT);
            st.actions |= AGENT_ACT_REPORT_HEALTH_FAILURE;
            return st;
        }
        return go(AGENT_S_JOINING, AGENT_ACT_JOIN);
    case AGENT_S_STOPPING:
        return go(AGENT_S_FINISHED, AGENT_ACT_FINISH);
    default: /* FAILING: the server's RESTART or JOB_FAILED is on its way */
        return stay(s);
    }
}

static struct agent_step on_report_failed(const struct agent_event *ev,
                                          const struct agent_machine_ctx *c)
{
    /* the workers are already stopping (STOP_WORKERS went with REPORT_FAILURE) */
    struct agent_step st =
        c->have_procs ? go(AGENT_S_STOPPING, 0) : go(AGENT_S_FINISHED, AGENT_ACT_FINISH);
    st.set_exit_code = 1;
    st.exit_code = ev->code;
    return st;
}

struct agent_step agent_machine_next(enum agent_state s, const struct agent_event *ev,
                                     const struct agent_machine_ctx *c)
{
    if (s == AGENT_S_FINISHED)
        return stay(s);
    switch (ev->kind) {
    case AGENT_EV_ASSIGN:
        return on_assign(s, c);
    case AGENT_EV_RESTART:
        return on_restart(s, c);
    case AGENT_EV_JOB_DONE:
        return exit_with(c, 0);
    case AGENT_EV_JOB_FAILED:
        return c->stop_signal ? stay(s) : exit_with(c, ev->code);
    case AGENT_EV_RDZV_ERROR:
        return s == AGENT_S_STOPPING ? stay(s) : exit_with(c, AGENT_EXIT_RDZV);
    case AGENT_EV_SIGNAL:
        return on_signal(s, ev, c);
    case AGENT_EV_WORKER_FAILED:
        if (s != AGENT_S_RUNNING) /* already stopping: a worker dying of our SIGTERM */
            return stay(s);
        return go(AGENT_S_FAILING, AGENT_ACT_STOP_WORKERS | AGENT_ACT_REPORT_FAILURE);
    case AGENT_EV_REPORT_FAILED:
        return on_report_failed(ev, c);
    case AGENT_EV_ALL_EXITED:
        return on_all_exited(s, c);
    case AGENT_EV_FATAL: {
        struct agent_step st = go(AGENT_S_FINISHED, AGENT_ACT_FINISH);
        st.set_exit_code = 1;
        st.exit_code = ev->code;
        return st;
    }
    }
    return stay(s);
}

int agent_signal_exit_code(int signum, int preempt_signal)
{
    return preempt_signal > 0 && signum == preempt_signal ? AGENT_EXIT_REQUEUE : 128 + signum;
}

const char *agent_state_name(enum agent_state s)
{
    static const char *const names[] = {
        [AGENT_S_JOINING] = "JOINING",     [AGENT_S_PREFLIGHT] = "PREFLIGHT",
        [AGENT_S_RUNNING] = "RUNNING",     [AGENT_S_FAILING] = "FAILING",
        [AGENT_S_DONE_WAIT] = "DONE_WAIT", [AGENT_S_RESTARTING] = "RESTARTING",
        [AGENT_S_HEALTH] = "HEALTH",       [AGENT_S_STOPPING] = "STOPPING",
        [AGENT_S_FINISHED] = "FINISHED",
    };
    return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "?";
}
