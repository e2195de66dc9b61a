/* A loop's time and timers behind one seam, so that a module whose logic is its timers (hang
 * detection, the rendezvous progress line) can be unit-tested with a clock the test advances
 * by hand (tests/unit/fakeclock.h) instead of waiting real time.
 *
 * The default, mc_clock_uv, is libuv itself: uv_now() and uv_timer_start/stop() on the handle.
 * The module still initialises and closes its uv_timer_t on its loop as always; only reading
 * the time and starting or stopping the timer go through the seam, so a module that takes a
 * clock behaves exactly as before with mc_clock_uv. */
#ifndef MUSTER_COMMON_LOOPCLOCK_H
#define MUSTER_COMMON_LOOPCLOCK_H

#include <stdint.h>
#include <uv.h>

struct mc_clock {
    /* The loop's notion of now in ms (uv_now: cached at the start of the iteration). */
    uint64_t (*now)(const struct mc_clock *c, uv_loop_t *loop);
    /* As uv_timer_start: (re)arms t to call cb after timeout_ms, then every repeat_ms (0: once). */
    void (*start)(const struct mc_clock *c, uv_timer_t *t, uv_timer_cb cb, uint64_t timeout_ms,
                  uint64_t repeat_ms);
    /* As uv_timer_stop: t will not fire (stopping a stopped timer is nothing). */
    void (*stop)(const struct mc_clock *c, uv_timer_t *t);
};

/* libuv's own clock and timers. */
extern const struct mc_clock mc_clock_uv;

static inline uint64_t mc_clock_now(const struct mc_clock *c, uv_loop_t *loop)
{
    return c->now(c, loop);
}

static inline void mc_clock_start(const struct mc_clock *c, uv_timer_t *t, uv_timer_cb cb,
                                  uint64_t timeout_ms, uint64_t repeat_ms)
{
    c->start(c, t, cb, timeout_ms, repeat_ms);
}

static inline void mc_clock_stop(const struct mc_clock *c, uv_timer_t *t)
{
    c->stop(c, t);
}

#endif
