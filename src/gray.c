/* Gray failures: one port's retransmission windows (gray.h). */
#include "gray.h"

#include <string.h>

void lp_gray_reset(struct lp_gray *g) {
  memset(g, 0, sizeof(*g));
  g->ppm = -1;
}

int32_t lp_gray_window(struct lp_gray *g, int ok, uint64_t packets, uint64_t errors, uint32_t threshold_ppm) {
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
  if (!ok || !had || back) {
    g->good = 0;
    return -1;
  }
  uint64_t ppm = de >= dp ? 1000000u : de * 1000000u / dp;
  g->ppm = (int32_t)ppm;
  g->strikes = ppm >= threshold_ppm ? g->strikes + 1 : 0;
  g->good = ppm * 4 < threshold_ppm ? g->good + 1 : 0;
  return g->ppm;
}
