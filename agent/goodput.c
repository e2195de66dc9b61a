#include "goodput.h"

#include <string.h>

#include "gprec.h"

static int phase_of(const struct agent_goodput *g, enum agent_state st)
{
    switch (st) {
    case AGENT_S_JOINING:
        return RDZV_GP_RENDEZVOUS;
    case AGENT_S_PREFLIGHT:
        return RDZV_GP_PREFLIGHT;
    case AGENT_S_RUNNING:
        return g->progressed ? RDZV_GP_TRAINING : RDZV_GP_STARTUP;
    case AGENT_S_FINISHED:
        return -1;
    default: /* FAILING, DONE_WAIT, RESTARTING, STOPPING */
        return RDZV_GP_STOPPING;
    }
}

/* Adds [since, now) of the open phase to ms[] (JOINING split at the backoff's end). */
static void add_open(const struct agent_goodput *g, uint64_t now, uint64_t *ms, uint64_t *train)
{
    uint64_t dur = now > g->since ? now - g->since : 0;

    if (g->phase < 0)
        return;
    if (g->phase == RDZV_GP_RENDEZVOUS && g->backoff_until > g->since) {
        uint64_t wait = (now < g->backoff_until ? now : g->backoff_until) - g->since;
        ms[RDZV_GP_RESTART_WAIT] += wait;
        dur -= wait;
    }
    ms[g->phase] += dur;
    if (g->phase == RDZV_GP_TRAINING && train != NULL)
        *train += dur;
}

static void close_open(struct agent_goodput *g, uint64_t now)
{
    add_open(g, now, g->ms, &g->train_ms);
    g->since = now;
}

void agent_goodput_init(struct agent_goodput *g, uv_loop_t *loop, const struct mc_clock *clock)
{
    memset(g, 0, sizeof(*g));
    g->clock = clock != NULL ? clock : &mc_clock_uv;
    g->loop = loop;
    g->phase = RDZV_GP_RENDEZVOUS;
    g->since = mc_clock_now(g->clock, loop);
}

void agent_goodput_state(struct agent_goodput *g, enum agent_state st)
{
    uint64_t now = mc_clock_now(g->clock, g->loop);
    int next;

    if (g->phase < 0)
        return;
    if (st == AGENT_S_DONE_WAIT && g->phase == RDZV_GP_STARTUP) {
        /* a clean end without a sign of progress: its time was training, from when we
         * cannot tell (its start on the wall clock unknown: a restart after it loses it all) */
        g->phase = RDZV_GP_TRAINING;
        g->train_wall_ms = 0;
    }
    close_open(g, now);
    if (st == AGENT_S_RUNNING && g->phase != RDZV_GP_STARTUP && g->phase != RDZV_GP_TRAINING) {
        g->progressed = 0; /* a new attempt */
        g->train_ms = 0;
        g->train_wall_ms = 0;
    }
    next = phase_of(g, st);
    g->phase = next;
}

int agent_goodput_progress(struct agent_goodput *g, int64_t wall_ms)
{
    if (g->phase != RDZV_GP_STARTUP)
        return 0;
    close_open(g, mc_clock_now(g->clock, g->loop));
    g->progressed = 1;
    g->train_wall_ms = wall_ms;
    g->phase = RDZV_GP_TRAINING;
    return 1;
}

void agent_goodput_restart(struct agent_goodput *g, uint64_t delay_ms)
{
    g->restarts++;
    g->backoff_until = mc_clock_now(g->clock, g->loop) + delay_ms;
}

void agent_goodput_checkpoint(struct agent_goodput *g, const char *name, int64_t wall_ms)
{
    unsigned i = g->ck_next;

    snprintf(g->ck[i].name, sizeof(g->ck[i].name), "%s", name);
    g->ck[i].wall_ms = wall_ms;
    g->ck_next = (i + 1) % AGENT_GP_CKPTS;
    if (g->nck < AGENT_GP_CKPTS)
        g->nck++;
}

/* The training of the attempt that ended lost against a checkpoint of wall_ms (-1: none). */
static uint64_t lost_since(const struct agent_goodput *g, int64_t wall_ms)
{
    uint64_t kept;

    if (wall_ms < 0 || g->train_wall_ms <= 0 || wall_ms < g->train_wall_ms)
        return g->train_ms;
    kept = (uint64_t)(wall_ms - g->train_wall_ms);
    return kept >= g->train_ms ? 0 : g->train_ms - kept;
}

void agent_goodput_resume(struct agent_goodput *g, const char *resume, uint32_t round)
{
    int64_t at = -1;

    g->round = round;
    for (unsigned k = 0; resume[0] != '\0' && k < g->nck; k++) {
        /* newest first: a name written again (a rotating "latest") is its last write */
        unsigned i = (g->ck_next + AGENT_GP_CKPTS - 1 - k) % AGENT_GP_CKPTS;
        if (strcmp(g->ck[i].name, resume) == 0) {
            at = g->ck[i].wall_ms;
            break;
        }
    }
    g->lost_ms += lost_since(g, at);
    g->train_ms = 0; /* counted: a second ASSIGN must not count it again */
}

void agent_goodput_failed(struct agent_goodput *g)
{
    int64_t newest = -1;

    close_open(g, mc_clock_now(g->clock, g->loop));
    for (unsigned i = 0; i < g->nck; i++)
        if (g->ck[i].wall_ms > newest)
            newest = g->ck[i].wall_ms;
    g->lost_ms += lost_since(g, newest);
    g->train_ms = 0;
}

void agent_goodput_get(const struct agent_goodput *g, struct rdzv_goodput *out)
{
    memset(out, 0, sizeof(*out));
    memcpy(out->phase_ms, g->ms, sizeof(out->phase_ms));
    add_open(g, mc_clock_now(g->clock, g->loop), out->phase_ms, NULL);
    for (int i = 0; i < RDZV_GP_NPHASES; i++)
        out->wall_ms += out->phase_ms[i];
    out->lost_ms =
        g->lost_ms < out->phase_ms[RDZV_GP_TRAINING] ? g->lost_ms : out->phase_ms[RDZV_GP_TRAINING];
    out->restarts = g->restarts;
    out->round = g->round;
}

void agent_goodput_print(FILE *f, const struct rdzv_goodput *gp)
{
    double wall = gp->wall_ms > 0 ? (double)gp->wall_ms : 1;

    fprintf(f, "muster: goodput: where this node's %.1f s went (%u restart%s)\n",
            gp->wall_ms / 1000.0, gp->restarts, gp->restarts == 1 ? "" : "s");
    for (int i = 0; i < RDZV_GP_NPHASES; i++)
        fprintf(f, "muster:   %-13s %9.1f s %5.1f %%\n", rdzv_goodput_phase_name(i),
                gp->phase_ms[i] / 1000.0, 100.0 * gp->phase_ms[i] / wall);
    fprintf(f, "muster:   %-13s %9.1f s %5.1f %% (training redone after restarts)\n", "work lost",
            gp->lost_ms / 1000.0, 100.0 * gp->lost_ms / wall);
    fprintf(f, "muster:   goodput ratio %.3f ((training - work lost) / wall)\n",
            rdzv_goodput_ratio(gp));
}
