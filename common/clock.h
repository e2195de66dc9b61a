/* Clocks. One owner for "what time is it": every component reads time through these.
 *
 * Monotonic time (CLOCK_MONOTONIC) for timeouts, intervals and measurements; wall time
 * (CLOCK_REALTIME) only for what is shown to people or written into records. */
#ifndef MUSTER_COMMON_CLOCK_H
#define MUSTER_COMMON_CLOCK_H

#include <stdint.h>

/* Monotonic time in nanoseconds / milliseconds since an arbitrary point (boot). */
uint64_t mc_mono_ns(void);
uint64_t mc_mono_ms(void);
/* The same in milliseconds with the sub-millisecond part, for measurements. */
double mc_mono_ms_f(void);
/* Wall-clock time in milliseconds / nanoseconds since the Unix epoch. */
uint64_t mc_wall_ms(void);
uint64_t mc_wall_ns(void);

#endif
