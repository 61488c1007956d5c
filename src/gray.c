/* Gray failures: one port's retransmission and rate windows (gray.h). */
#include "gray.h"

#include <string.h>

void lp_gray_reset(struct lp_gray *g) {
  memset(g, 0, sizeof(*g));
  g->ppm = -1;
  g->last_ppm = -1;
}

/* lp_gray_reset (a drain) forgets the last fault seen too: the next tick
 * then starts over a window that is not open yet, which changes nothing. */
void lp_gray_fault(struct lp_gray *g, uint64_t fault_ns) {
  if (fault_ns <= g->fault_ns) return;
  lp_gray_reset(g);
  g->fault_ns = fault_ns;
}

int32_t lp_gray_window(struct lp_gray *g, int ok, uint64_t packets, uint64_t errors, uint32_t threshold_ppm,
                       uint64_t now_ns) {
  int had = g->valid;
  uint64_t dp = packets - g->packets, de = errors - g->errors;
  int back = packets < g->packets || errors < g->errors; /* a reset counter: start over */
  g->ppm = -1;
  if (ok && had && !back && dp < LP_GRAY_MIN_PACKETS) {
    /* Too little traffic yet: the window goes on (a slow or loaded
     * process still measures, only over a longer time), but being better
     * is evidence of now: a port silent for long is no longer counted so. */
    if (++g->quiet >= LP_GRAY_QUIET_WINDOWS) g->good = 0;
    return -1;
  }
  g->valid = ok;
  g->packets = packets;
  g->errors = errors;
  g->quiet = 0;
  g->last_opened_ns = g->opened_ns;
  g->opened_ns = now_ns;
  if (!ok || !had || back) {
    g->good = 0;
    return -1;
  }
  uint64_t ppm = de >= dp ? 1000000u : de * 1000000u / dp;
  g->ppm = g->last_ppm = (int32_t)ppm;
  g->strikes = ppm >= threshold_ppm ? g->strikes + 1 : 0;
  if (g->strikes == 1) g->struck_since_ns = now_ns;
  g->good = ppm * 4 < threshold_ppm ? g->good + 1 : 0;
  return g->ppm;
}

uint64_t lp_gray_busy(uint64_t busy_ns, int inflight, uint64_t since, uint64_t looked, uint64_t unwatched,
                      uint64_t now) {
  uint64_t until = looked < now ? looked : now;
  if (inflight > 0 && until > since) busy_ns += until - since;
  return busy_ns > unwatched ? busy_ns - unwatched : 0;
}

void lp_gray_rate_reset(struct lp_gray_rate *r) {
  memset(r, 0, sizeof(*r));
  r->mbps = -1;
}

int64_t lp_gray_rate_window(struct lp_gray_rate *r, uint64_t now, uint64_t bytes, uint64_t busy_ns,
                            const struct lp_port_counters *port, uint32_t threshold_ppm, int speed_mbps) {
  if (r->age < INT32_MAX) r->age++;
  /* Counters that went back, or that could be read at one end of the
   * window only, say nothing of it. */
  int back = bytes < r->bytes || busy_ns < r->busy_ns || port->ok != r->port.ok || port->bytes_ok != r->port.bytes_ok ||
             port->resends < r->port.resends || port->packets < r->port.packets || port->bytes < r->port.bytes;
  if (r->valid && !back && bytes - r->bytes < LP_GRAY_RATE_MIN_BYTES) return -1;
  int closes = r->valid && !back && busy_ns > r->busy_ns;
  uint64_t db = bytes - r->bytes, dt = busy_ns - r->busy_ns, wall = now > r->opened_ns ? now - r->opened_ns : 0;
  uint64_t dp = port->packets - r->port.packets, dr = port->resends - r->port.resends;
  r->lossy = port->ok && dr > 0 && dr * 4000000u >= dp * threshold_ppm;
  r->shared = port->bytes_ok &&
              (port->bytes - r->port.bytes) * 100u > db * LP_GRAY_RATE_SHARED_PCT + LP_GRAY_RATE_SHARED_SLACK * 100u;
  r->valid = 1;
  r->bytes = bytes;
  r->busy_ns = busy_ns;
  r->opened_ns = now;
  r->port = *port;
  if (!closes) return -1;                                /* the first tick, or totals that went back: start over */
  if (r->age > LP_GRAY_RATE_FORGET_TICKS) r->recent = 0; /* slow windows from before a long quiet spell */
  r->mbps = (int64_t)(db * 1000u / dt);
  r->busy_pct = dt >= wall ? 100 : (int)(dt * 100u / wall);
  if (speed_mbps > 0 && r->mbps > speed_mbps / 8) r->mbps = speed_mbps / 8; /* MB/s: Mb/s over 8 */
  r->age = 0;
  return r->mbps;
}

int lp_gray_rate_judge(struct lp_gray_rate *r, int64_t ref_mbps, int ref_speed_mbps, int speed_mbps, int pct) {
  /* MB/s against Mb/s: a nominal speed in MB/s is speed_mbps / 8. */
  int wire_bound = ref_mbps > 0 && ref_mbps * 800 >= (int64_t)ref_speed_mbps * LP_GRAY_RATE_WIRE_PCT;
  if (r->lossy || r->shared || !wire_bound || r->busy_pct < LP_GRAY_RATE_BUSY_PCT) {
    if (++r->unjudged > LP_GRAY_RATE_SPAN) r->recent = 0;
    return 0;
  }
  r->unjudged = 0;
  int slow = r->mbps * 100 < ref_mbps * pct && r->mbps * 800 < (int64_t)speed_mbps * pct;
  r->recent = (r->recent << 1 | (unsigned)slow) & ((1u << LP_GRAY_RATE_SPAN) - 1);
  int n = 0;
  for (unsigned bits = r->recent; bits != 0; bits &= bits - 1) n++;
  return slow && n >= LP_GRAY_RATE_STRIKES;
}
