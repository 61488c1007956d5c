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
  g->valid = ok;
  g->packets = packets;
  g->errors = errors;
  g->ppm = -1;
  if (!ok || !had || back || dp < LP_GRAY_MIN_PACKETS) return -1;
  uint64_t ppm = de >= dp ? 1000000u : de * 1000000u / dp;
  g->ppm = (int32_t)ppm;
  g->strikes = ppm >= threshold_ppm ? g->strikes + 1 : 0;
  g->good = ppm * 4 < threshold_ppm ? g->good + 1 : 0;
  return g->ppm;
}
