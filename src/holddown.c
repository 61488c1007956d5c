/* Failback hold-down with exponential flap damping. */
#include "holddown.h"

void lp_holddown_init(struct lp_holddown *h, uint64_t base_ns, uint64_t max_ns, uint64_t now) {
  h->base_ns = base_ns;
  h->max_ns = max_ns < base_ns ? base_ns : max_ns;
  h->down = false;
  h->since_ns = now;
  h->hold_ns = 0; /* a port that never failed needs no hold-down */
  h->flaps = 0;
}

unsigned lp_holddown_down(struct lp_holddown *h, uint64_t now) {
  if (h->down) return h->flaps;
  /* Stable for a whole capped period: the past is forgiven.  Counted from
   * when the port became usable again, not from when it came up: at the
   * cap, the hold-down alone lasted the whole period, and a port failing
   * each time soon after its failback went back to the base hold-down. */
  if (now - h->since_ns >= h->hold_ns + h->max_ns) h->flaps = 0;
  h->flaps++;
  uint64_t hold = h->base_ns;
  unsigned i = 1;
  /* A base of 0 (fail back at once) still damps what flaps again: the
   * doubling starts from a seed, or it would stay 0 for good. */
  if (hold == 0 && h->flaps > 1) hold = LP_HOLDDOWN_SEED_NS, i = 2;
  for (; i < h->flaps && hold < h->max_ns; i++) hold *= 2;
  h->hold_ns = hold < h->max_ns ? hold : h->max_ns;
  h->down = true;
  h->since_ns = now;
  return h->flaps;
}

void lp_holddown_up(struct lp_holddown *h, uint64_t now) {
  if (!h->down) return;
  h->down = false;
  h->since_ns = now;
}

bool lp_holddown_ready(const struct lp_holddown *h, uint64_t now) {
  return !h->down && now - h->since_ns >= h->hold_ns;
}

uint64_t lp_holddown_ready_at(const struct lp_holddown *h) { return h->down ? UINT64_MAX : h->since_ns + h->hold_ns; }
