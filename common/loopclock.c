#include "loopclock.h"

static uint64_t uv_clock_now(const struct mc_clock *c, uv_loop_t *loop)
{
    (void)c;
    return uv_now(loop);
}

static void uv_clock_start(const struct mc_clock *c, uv_timer_t *t, uv_timer_cb cb,
                           uint64_t timeout_ms, uint64_t repeat_ms)
{
    (void)c;
    uv_timer_start(t, cb, timeout_ms, repeat_ms); /* only fails on a closing handle: as before */
}

static void uv_clock_stop(const struct mc_clock *c, uv_timer_t *t)
{
    (void)c;
    uv_timer_stop(t);
}

const struct mc_clock mc_clock_uv = {
    .now = uv_clock_now,
    .start = uv_clock_start,
    .stop = uv_clock_stop,
};
