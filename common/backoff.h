/* Restart backoff (--restart-backoff MIN[:MAX]): the delay before restart n of a run of
 * quick failures is min(MAX, MIN * 2^n), then ±20 % jitter, so nodes or tasks that crash
 * together do not all come back in the same millisecond. A round (or task run) that lasted at
 * least mc_backoff_healthy_ms() was healthy: the next failure starts the sequence again at MIN.
 * Pure arithmetic plus a private xorshift generator, so tests can pin the sequence. */
#ifndef MUSTER_COMMON_BACKOFF_H
#define MUSTER_COMMON_BACKOFF_H

#include <stdint.h>

/* A run of at least this long resets the sequence (when MAX is smaller). */
#define MC_BACKOFF_HEALTHY_MS 60000u
/* MAX when only MIN is given (unless MIN is larger). */
#define MC_BACKOFF_DEFAULT_MAX_MS 60000u
/* Upper bound of MIN and MAX: one hour. */
#define MC_BACKOFF_LIMIT_MS 3600000u
#define MC_BACKOFF_JITTER_PCT 20u

struct mc_backoff {
    uint32_t min_ms, max_ms; /* min_ms 0: no backoff, every delay is 0 */
    uint32_t n;              /* quick failures in a row so far */
    uint64_t rng;            /* xorshift64 state; 0 is replaced by a fixed seed */
};

/* Parses "MIN[:MAX]" in seconds (decimals allowed, e.g. "0.5:2") into milliseconds. MAX
 * defaults to max(MIN, 60 s); MAX < MIN, a negative or non-numeric value, or more than an hour
 * is an error. "0" means no backoff. Returns 0 or -EINVAL. */
int mc_backoff_parse(const char *s, uint32_t *min_ms, uint32_t *max_ms);

/* min(max_ms, min_ms * 2^n), without jitter; 0 when min_ms is 0. */
uint32_t mc_backoff_base_ms(uint32_t min_ms, uint32_t max_ms, uint32_t n);

/* The healthy interval: max(MC_BACKOFF_HEALTHY_MS, max_ms). */
uint32_t mc_backoff_healthy_ms(uint32_t max_ms);

/* The delay before the next restart of something that ran ran_ms before it failed: resets the
 * sequence when ran_ms was healthy, returns base(n) scaled by a factor in [0.8, 1.2] and
 * counts the failure. 0 when min_ms is 0. */
uint32_t mc_backoff_next(struct mc_backoff *b, uint64_t ran_ms);

#endif
