/*
 * Gray failures: a port that is up but loses packets.  Each RC
 * retransmission is counted by the NIC (mlx5 hw_counters: a NAK for a packet
 * out of sequence, packet_seq_err; a local ACK timeout,
 * local_ack_timeout_err), and every packet it sends too (counters/
 * port_xmit_packets); their ratio over a window is the share of packets
 * the port had to send again.  A clean port shows none.
 *
 * Pure: the control thread (health.c) reads the counters and decides; this
 * only keeps one port's windows, so tests can feed it any sequence.
 */
#ifndef LP_GRAY_H
#define LP_GRAY_H

#include <stdint.h>

#define LP_GRAY_MIN_PACKETS 2000 /* a window closes once this many packets went out: an idle port is no evidence */
#define LP_GRAY_QUIET_WINDOWS 8  /* ticks (250 ms) without a closed window before a port stops counting as better */
#define LP_GRAY_STRIKES 2        /* windows in a row over the threshold before the port is judged, and */
                                 /* under a quarter of it before another counts as clearly better */

struct lp_gray {
  int valid;                /* the counters could be read at the last window */
  uint64_t packets, errors; /* their values then */
  int32_t ppm;              /* the last window's retransmissions per million packets, -1: nothing to judge */
  int strikes;              /* windows in a row at or over the threshold */
  int good;                 /* windows in a row under a quarter of it */
  int quiet;                /* ticks since the window opened with too little traffic to close it */
};

void lp_gray_reset(struct lp_gray *g);

/* A tick (every 250 ms) with these counter values (`ok` 0: unreadable).
 * The window closes when at least LP_GRAY_MIN_PACKETS went out since it
 * opened; then this returns its retransmissions per million packets.
 * Otherwise -1: unreadable, the first tick, counters that went back (each
 * starts over), or too little traffic yet (the window stays open).  A
 * closed window at or over `threshold_ppm` is a strike, one under it clears
 * the strikes; a port that closes no window for LP_GRAY_QUIET_WINDOWS ticks
 * loses its run of good windows (it is clearly better only by what it
 * shows now). */
int32_t lp_gray_window(struct lp_gray *g, int ok, uint64_t packets, uint64_t errors, uint32_t threshold_ppm);

/* A port is degraded when it struck LP_GRAY_STRIKES windows in a row. */
static inline int lp_gray_struck(const struct lp_gray *g) { return g->strikes >= LP_GRAY_STRIKES; }

/* Clearly better than a degraded port: measured in its last windows,
 * LP_GRAY_STRIKES in a row, each under a quarter of the threshold (one
 * lucky window of a port that loses like the others is not enough).  An
 * idle port is no evidence; when every port loses alike, none is better
 * and nothing moves. */
static inline int lp_gray_clearly_better(const struct lp_gray *g) { return g->good >= LP_GRAY_STRIKES; }

#endif
