/*
 * The one clock: CLOCK_MONOTONIC in nanoseconds.  Every deadline, watchdog
 * and hold-down compares values of this clock only, so a wall-clock step
 * (NTP) never fires or postpones one.  The wall clock below only stamps
 * what people read.
 */
#ifndef LP_CLOCK_H
#define LP_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t lp_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define LP_NS_PER_MS 1000000ull

/* The wall clock in microseconds since the epoch: for stamps people read
 * (an event line's time=), never for a deadline. */
static inline uint64_t lp_wall_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000ull + (uint64_t)ts.tv_nsec / 1000;
}

#endif
