#include "clock.h"

#include <time.h>

static uint64_t read_ns(clockid_t id)
{
    struct timespec ts;

    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t mc_mono_ns(void)
{
    return read_ns(CLOCK_MONOTONIC);
}

uint64_t mc_mono_ms(void)
{
    return read_ns(CLOCK_MONOTONIC) / 1000000u;
}

double mc_mono_ms_f(void)
{
    return (double)read_ns(CLOCK_MONOTONIC) / 1e6;
}

uint64_t mc_wall_ms(void)
{
    return read_ns(CLOCK_REALTIME) / 1000000u;
}

uint64_t mc_wall_ns(void)
{
    return read_ns(CLOCK_REALTIME);
}
