#include "backoff.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* One number of seconds, decimals allowed, into ms; the whole string must be used. */
static int parse_seconds(const char *s, const char *end, uint32_t *ms)
{
    char buf[32], *e = NULL;
    size_t n = (size_t)(end - s);
    double v;

    if (n == 0 || n >= sizeof(buf))
        return -EINVAL;
    memcpy(buf, s, n);
    buf[n] = '\0';
    if (strspn(buf, "0123456789.") != n) /* no sign, exponent, "inf" or "nan" */
        return -EINVAL;
    errno = 0;
    v = strtod(buf, &e);
    if (errno != 0 || e != buf + n || !(v >= 0) || v * 1000.0 > MC_BACKOFF_LIMIT_MS)
        return -EINVAL;
    *ms = (uint32_t)(v * 1000.0 + 0.5);
    return 0;
}

int mc_backoff_parse(const char *s, uint32_t *min_ms, uint32_t *max_ms)
{
    const char *colon;
    uint32_t lo = 0, hi = 0;

    if (s == NULL)
        return -EINVAL;
    colon = strchr(s, ':');
    if (parse_seconds(s, colon ? colon : s + strlen(s), &lo) < 0)
        return -EINVAL;
    if (colon) {
        if (parse_seconds(colon + 1, colon + 1 + strlen(colon + 1), &hi) < 0 || hi < lo)
            return -EINVAL;
        if (lo == 0 && hi != 0)
            return -EINVAL; /* 0:MAX would double nothing */
    } else {
        hi = lo > MC_BACKOFF_DEFAULT_MAX_MS ? lo : MC_BACKOFF_DEFAULT_MAX_MS;
    }
    if (lo == 0)
        hi = 0;
    *min_ms = lo;
    *max_ms = hi;
    return 0;
}

uint32_t mc_backoff_base_ms(uint32_t min_ms, uint32_t max_ms, uint32_t n)
{
    uint64_t d = min_ms;

    for (uint32_t i = 0; i < n && d < max_ms; i++)
        d *= 2;
    return d > max_ms ? max_ms : (uint32_t)d;
}

uint32_t mc_backoff_healthy_ms(uint32_t max_ms)
{
    return max_ms > MC_BACKOFF_HEALTHY_MS ? max_ms : MC_BACKOFF_HEALTHY_MS;
}

static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s ? *s : 0x9e3779b97f4a7c15ull;

    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return x;
}

uint32_t mc_backoff_next(struct mc_backoff *b, uint64_t ran_ms)
{
    uint64_t base, span, d;

    if (b->min_ms == 0)
        return 0;
    if (ran_ms >= mc_backoff_healthy_ms(b->max_ms))
        b->n = 0;
    base = mc_backoff_base_ms(b->min_ms, b->max_ms, b->n);
    if (b->n < 64)
        b->n++;
    /* base * (1 - 20 %) + a uniform part of base * 2 * 20 %: [0.8, 1.2] * base */
    span = base * 2 * MC_BACKOFF_JITTER_PCT / 100;
    d = base - base * MC_BACKOFF_JITTER_PCT / 100 + (span ? xorshift(&b->rng) % (span + 1) : 0);
    return d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
}
