#include "fakeclock.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

static struct fake_clock *fake_of(const struct mc_clock *c)
{
    return (struct fake_clock *)((char *)c - offsetof(struct fake_clock, clock));
}

static struct fake_timer *slot_of(struct fake_clock *fc, const uv_timer_t *t)
{
    for (int i = 0; i < FAKE_CLOCK_TIMERS; i++)
        if (fc->timers[i].t == t)
            return &fc->timers[i];
    return NULL;
}

static uint64_t fake_now(const struct mc_clock *c, uv_loop_t *loop)
{
    (void)loop;
    return fake_of(c)->now;
}

static void fake_stop(const struct mc_clock *c, uv_timer_t *t)
{
    struct fake_timer *s = slot_of(fake_of(c), t);

    if (s != NULL)
        memset(s, 0, sizeof(*s));
}

static void fake_start(const struct mc_clock *c, uv_timer_t *t, uv_timer_cb cb, uint64_t timeout_ms,
                       uint64_t repeat_ms)
{
    struct fake_clock *fc = fake_of(c);
    struct fake_timer *s = slot_of(fc, t);

    if (s == NULL)
        s = slot_of(fc, NULL);
    assert_non_null(s); /* more timers than FAKE_CLOCK_TIMERS: raise it */
    *s = (struct fake_timer){.t = t, .cb = cb, .due = fc->now + timeout_ms, .repeat = repeat_ms};
}

void fake_clock_init(struct fake_clock *fc, uint64_t start_ms)
{
    memset(fc, 0, sizeof(*fc));
    fc->clock = (struct mc_clock){.now = fake_now, .start = fake_start, .stop = fake_stop};
    fc->now = start_ms;
}

/* The armed timer with the earliest deadline not after until, or NULL. */
static struct fake_timer *next_due(struct fake_clock *fc, uint64_t until)
{
    struct fake_timer *best = NULL;

    for (int i = 0; i < FAKE_CLOCK_TIMERS; i++) {
        struct fake_timer *s = &fc->timers[i];
        if (s->t != NULL && s->due <= until && (best == NULL || s->due < best->due))
            best = s;
    }
    return best;
}

void fake_clock_advance(struct fake_clock *fc, uint64_t ms)
{
    uint64_t until = fc->now + ms;
    struct fake_timer *s;

    while ((s = next_due(fc, until)) != NULL) {
        uv_timer_t *t = s->t;
        uv_timer_cb cb = s->cb;

        fc->now = s->due;
        if (s->repeat > 0)
            s->due += s->repeat;
        else
            memset(s, 0, sizeof(*s)); /* fired: stopped, as libuv's one-shot timer */
        cb(t);
    }
    fc->now = until;
}

int fake_clock_armed(const struct fake_clock *fc, const uv_timer_t *t)
{
    for (int i = 0; i < FAKE_CLOCK_TIMERS; i++)
        if (fc->timers[i].t == t)
            return 1;
    return 0;
}
