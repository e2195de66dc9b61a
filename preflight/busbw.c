#include "busbw.h"

#include <ctype.h>
#include <errno.h>
#include <strings.h>

double pf_algbw_gbps(double bytes, double seconds)
{
    if (!(seconds > 0) || !(bytes >= 0))
        return 0;
    return bytes / 1.0e9 / seconds;
}

double pf_busbw_allreduce(double algbw, int nranks)
{
    if (nranks < 1)
        return 0;
    return algbw * (2.0 * (double)(nranks - 1) / (double)nranks);
}

enum pf_busbw_verdict pf_busbw_judge(int nranks, double busbw, double min_busbw)
{
    if (!(min_busbw > 0))
        return PF_BUSBW_NO_FLOOR;
    if (nranks < 2)
        return PF_BUSBW_ONE_RANK;
    return busbw >= min_busbw ? PF_BUSBW_OK : PF_BUSBW_BELOW;
}

int pf_size_sweep(uint64_t min, uint64_t max, unsigned factor, uint64_t *out, int cap)
{
    int n = 0;
    uint64_t s = min;

    if (min == 0 || min > max || factor < 2 || cap < 1 || out == NULL)
        return -EINVAL;
    for (;;) {
        if (n == cap)
            return -ENOSPC;
        out[n++] = s;
        if (s == max)
            return n;
        /* Overflow-safe "s * factor > max": the next step would pass max, so max ends it. */
        if (s > max / factor)
            s = max;
        else
            s = s * factor;
    }
}

static int unit_shift(const char *u, unsigned *shift)
{
    static const struct {
        const char *name;
        unsigned shift;
    } units[] = {{"", 0},    {"b", 0},   {"k", 10},   {"m", 20},   {"g", 30},  {"kb", 10},
                 {"mb", 20}, {"gb", 30}, {"kib", 10}, {"mib", 20}, {"gib", 30}};
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcasecmp(u, units[i].name) == 0) {
            *shift = units[i].shift;
            return 0;
        }
    }
    return -EINVAL;
}

int pf_parse_size(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    unsigned shift = 0;
    const char *p = s;

    if (s == NULL || out == NULL || !isdigit((unsigned char)*p))
        return -EINVAL;
    for (; isdigit((unsigned char)*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -EINVAL;
        v = v * 10 + d;
    }
    if (unit_shift(p, &shift) < 0)
        return -EINVAL;
    if (shift > 0 && v > (UINT64_MAX >> shift))
        return -EINVAL;
    *out = v << shift;
    return 0;
}

/* Largest float-exact integer range: every sum must stay below 2^24. */
#define CHECK_EXACT_LIMIT 16777216.0
#define CHECK_SCALE 1024.0

static int distinct_ok(int n)
{
    double nn = (double)n;
    return nn * (nn + 1) / 2 + nn * 6 * CHECK_SCALE < CHECK_EXACT_LIMIT;
}

float pf_check_value(int r, int n, size_t i)
{
    if (distinct_ok(n))
        return (float)(r + 1) + (float)(i % 7) * (float)CHECK_SCALE;
    return 1.0f + (float)(i % 7);
}

float pf_check_expected(int n, size_t i)
{
    double nn = (double)n;
    if (distinct_ok(n))
        return (float)(nn * (nn + 1) / 2 + nn * (double)(i % 7) * CHECK_SCALE);
    return (float)(nn * (1.0 + (double)(i % 7)));
}
