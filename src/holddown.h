/*
 * Failback hold-down with flap damping, per port.
 *
 * A port that comes back is trusted only after it has stayed up for the
 * hold-down time.  Each flap that follows soon after the last doubles the
 * hold-down (capped), so a dirty optic that bounces every few seconds does
 * not drag traffic back and forth; a port that then stays healthy for a
 * whole capped period earns the base hold-down again.  It never gives up:
 * however often a port flapped, it is used again once it is stable.
 *
 * Pure: time is an argument, so tests can step through hours.
 */
#ifndef LP_HOLDDOWN_H
#define LP_HOLDDOWN_H

#include <stdbool.h>
#include <stdint.h>

/* Where the doubling starts when the base hold-down is 0. */
#define LP_HOLDDOWN_SEED_NS 250000000ull

struct lp_holddown {
  uint64_t base_ns, max_ns; /* configuration */
  bool down;
  uint64_t since_ns; /* when the current state began */
  uint64_t hold_ns;  /* hold-down in force for the current up period */
  unsigned flaps;    /* consecutive damped flaps */
};

void lp_holddown_init(struct lp_holddown *h, uint64_t base_ns, uint64_t max_ns, uint64_t now);
/* The port went down.  Returns the number of consecutive flaps so far. */
unsigned lp_holddown_down(struct lp_holddown *h, uint64_t now);
/* The port came back. */
void lp_holddown_up(struct lp_holddown *h, uint64_t now);
/* Up and stable for the hold-down: traffic may move back. */
bool lp_holddown_ready(const struct lp_holddown *h, uint64_t now);
/* When lp_holddown_ready will turn true if nothing changes (UINT64_MAX while down). */
uint64_t lp_holddown_ready_at(const struct lp_holddown *h);

#endif
