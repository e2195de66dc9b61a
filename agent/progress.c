#include "progress.h"

#include <stdio.h>
#include <unistd.h>

#include "log.h"
#include "output.h"

#define PROGRESS_LOG_EVERY_MS 10000

static void draw(struct agent_progress *p)
{
    uint64_t now = mc_clock_now(p->clock, p->timer.loop), gone = now - p->last_at;
    const struct rdzv_waiting *w = &p->last;
    char last[48] = "";

    if (!mc_log_enabled(MC_LOG_INFO))
        return; /* --quiet */
    if (w->last_call_ms_left >= 0) {
        int64_t left = (int64_t)w->last_call_ms_left - (int64_t)gone;
        snprintf(last, sizeof(last), ", last call in %lld s",
                 (long long)(left > 0 ? (left + 999) / 1000 : 0));
    }
    if (p->tty) {
        char line[512];
        int n = snprintf(line, sizeof(line), "\r\033[Kmuster: rendezvous %s: %u/%u nodes%s", p->job,
                         w->joined, w->max_nodes, last);
        /* through stderr's queue (output.h): a terminal that stopped reading (^S, a stalled
         * ssh) must not stop the loop in stdio's write */
        agent_output_console_write(STDERR_FILENO, line,
                                   n < (int)sizeof(line) ? (size_t)n : sizeof(line) - 1);
        p->drawn = 1;
    } else if (w->joined != p->printed_joined || now - p->printed_at >= PROGRESS_LOG_EVERY_MS) {
        mc_info("rendezvous %s: %u/%u nodes%s", p->job, w->joined, w->max_nodes, last);
        p->printed_at = now;
        p->printed_joined = w->joined;
    }
}

static void tick(uv_timer_t *t)
{
    draw(t->data);
}

void agent_progress_init(uv_loop_t *loop, struct agent_progress *p, const char *job)
{
    uv_timer_init(loop, &p->timer);
    p->timer.data = p;
    p->clock = &mc_clock_uv;
    p->job = job;
    p->tty = isatty(STDERR_FILENO);
    p->drawn = p->active = 0;
    p->printed_joined = UINT32_MAX;
}

void agent_progress_update(struct agent_progress *p, const struct rdzv_waiting *w)
{
    p->last = *w;
    p->last_at = mc_clock_now(p->clock, p->timer.loop);
    draw(p);
    if (!p->active) {
        p->active = 1;
        mc_clock_start(p->clock, &p->timer, tick, 1000, 1000);
    }
}

void agent_progress_stop(struct agent_progress *p)
{
    if (!p->active)
        return;
    p->active = 0;
    mc_clock_stop(p->clock, &p->timer);
    if (p->drawn)
        agent_output_console_write(STDERR_FILENO, "\n", 1);
    p->drawn = 0;
    p->printed_joined = UINT32_MAX;
}

void agent_progress_close(struct agent_progress *p, uv_close_cb close_cb)
{
    agent_progress_stop(p);
    uv_close((uv_handle_t *)&p->timer, close_cb);
}
