/* A struct mc_clock (common/loopclock.h) that the test advances by hand: a module given it
 * sees time move only when the test says so, and its timers fire inside fake_clock_advance,
 * in deadline order, with "now" at each one's deadline, as libuv would fire them. A timer test
 * then runs in no real time and cannot be made flaky by a loaded host. The handles themselves
 * are never started on the loop; the module still initialises and closes them as always. */
#ifndef MUSTER_TESTS_FAKECLOCK_H
#define MUSTER_TESTS_FAKECLOCK_H

#include <stdint.h>
#include <uv.h>

#include "loopclock.h"

#define FAKE_CLOCK_TIMERS 8

struct fake_clock {
    struct mc_clock clock; /* first: what the module is given (&fc->clock) */
    uint64_t now;
    struct fake_timer {
        uv_timer_t *t; /* NULL: a free slot */
        uv_timer_cb cb;
        uint64_t due, repeat;
    } timers[FAKE_CLOCK_TIMERS];
};

/* Starts fc at start_ms (not 0: modules may take 0 for "never"). */
void fake_clock_init(struct fake_clock *fc, uint64_t start_ms);

/* Moves now forward by ms, firing every timer that comes due on the way (a repeating one
 * again every repeat ms, a timer its callback arms within the window too). */
void fake_clock_advance(struct fake_clock *fc, uint64_t ms);

/* Whether t is armed on fc (what uv_is_active says of a real timer). */
int fake_clock_armed(const struct fake_clock *fc, const uv_timer_t *t);

#endif
