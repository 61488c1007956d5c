/*
 * Gray failures: a port that is up but loses packets, or moves data slowly.
 *
 * Loss.  Each RC
 * retransmission is counted by the NIC (mlx5 hw_counters: a NAK for a packet
 * out of sequence, packet_seq_err; a local ACK timeout,
 * local_ack_timeout_err), and every packet it sends too (counters/
 * port_xmit_packets); their ratio over a window is the share of packets
 * the port had to send again.  A clean port shows none.
 *
 * Slowness.  A port whose lanes or speed dropped under it (and that does not
 * say so in its attributes) loses nothing: it only takes longer.  Each
 * process times its large messages per port (health.h, the transmit
 * meter): the bytes they moved and the time at least one of them was in
 * flight, so the figure is the port's rate while busy, whatever the number
 * of connections sharing it.  A port is slow when, window after window, it
 * moves data at under a share of what another port of its pool does in the
 * same windows, and under that share of its own nominal speed.
 *
 * Pure: the control thread (health.c) reads the counters and decides; this
 * only keeps one port's windows, so tests can feed it any sequence.
 */
#ifndef LP_GRAY_H
#define LP_GRAY_H

#include <stdint.h>

/* A port's counters, as its NIC keeps them for the whole host (sysfs, read
 * by nic.c): every process on the host sees the same. */
struct lp_port_counters {
  int ok;           /* the packet and resend counters could be read */
  uint64_t packets; /* sent (counters/port_xmit_packets) */
  uint64_t resends; /* retransmissions its requests needed (hw_counters/packet_seq_err + local_ack_timeout_err) */
  int bytes_ok;     /* and this one (a port may lack it: no window is then taken for shared) */
  uint64_t bytes;   /* sent (counters/port_xmit_data, which counts 4-byte words) */
};

#define LP_GRAY_MIN_PACKETS 2000 /* a window closes once this many packets went out: an idle port is no evidence */
#define LP_GRAY_QUIET_WINDOWS 8  /* ticks (250 ms) without a closed window before a port stops counting as better */
#define LP_GRAY_STRIKES 2        /* windows in a row over the threshold before the port is judged, and */
                                 /* under a quarter of it before another counts as clearly better */

struct lp_gray {
  int valid;                /* the counters could be read at the last window */
  uint64_t packets, errors; /* their values then */
  int32_t ppm;              /* this tick's closed window's retransmissions per million packets, -1: none closed */
  int32_t last_ppm;         /* the last window that closed, at whatever tick (-1: none yet) */
  int strikes;              /* windows in a row at or over the threshold */
  int good;                 /* windows in a row under a quarter of it */
  int quiet;                /* ticks since the window opened with too little traffic to close it */
  uint64_t opened_ns;       /* when the open window opened */
  uint64_t last_opened_ns;  /* when the last closed window opened */
  uint64_t struck_since_ns; /* when the first window of the run of strikes closed */
  uint64_t fault_ns;        /* the latest fault seen on the port (lp_gray_fault) */
};

void lp_gray_reset(struct lp_gray *g);

/* The port was last left for a fault (a port down here or at the peer, an
 * error completion, a stall) at `fault_ns` (0: never), by this process or
 * by another of the host (the rate board).  What the port resent until
 * then was that fault's retries (a pulled cable's local ACK timeouts), not
 * a gray failure's, and the port counts them for every process that uses
 * it, whatever its own connections saw: when `fault_ns` is newer than the
 * last fault seen, the windows start over.  Call it at every tick, before
 * lp_gray_window. */
void lp_gray_fault(struct lp_gray *g, uint64_t fault_ns);

/* A tick (every 250 ms) with these counter values (`ok` 0: unreadable).
 * The window closes when at least LP_GRAY_MIN_PACKETS went out since it
 * opened; then this returns its retransmissions per million packets.
 * Otherwise -1: unreadable, the first tick, counters that went back (each
 * starts over), or too little traffic yet (the window stays open).  A
 * closed window at or over `threshold_ppm` is a strike, one under it clears
 * the strikes; a port that closes no window for LP_GRAY_QUIET_WINDOWS ticks
 * loses its run of good windows (it is clearly better only by what it
 * shows now).  `now_ns` is the tick's time, the same for every port of a
 * tick: it dates the windows, so that a port is compared with what another
 * measured in the same time. */
int32_t lp_gray_window(struct lp_gray *g, int ok, uint64_t packets, uint64_t errors, uint32_t threshold_ppm,
                       uint64_t now_ns);

/* A port is degraded when it struck LP_GRAY_STRIKES windows in a row, the
 * last closing at this tick.  Strikes from before a quiet spell are old
 * news: judged against a port that was clean since (when the loss ended
 * everywhere), they would drain a port that loses no more than the rest. */
static inline int lp_gray_struck(const struct lp_gray *g) { return g->strikes >= LP_GRAY_STRIKES && g->ppm >= 0; }

/* Clearly better than `struck`, a degraded port: measured in its last
 * windows, LP_GRAY_STRIKES in a row, each under a quarter of the threshold
 * (one lucky window of a port that loses like the others is not enough),
 * the last of them opened after `struck`'s first strike closed, in the
 * time `struck` was shown to lose.  An idle port is no evidence, and nor
 * is one whose clean windows are from before: with the loss everywhere at
 * once, a port whose window spans its start would otherwise pass for clean
 * (its packets mostly from before the loss) next to one that closes its
 * windows faster.  When every port loses alike, none is better and nothing
 * moves. */
static inline int lp_gray_clearly_better(const struct lp_gray *g, const struct lp_gray *struck) {
  return g->good >= LP_GRAY_STRIKES && g->last_opened_ns >= struck->struck_since_ns;
}

/* ---- slowness ---- */

#define LP_GRAY_RATE_MIN_BYTES \
  (16ull << 20)              /* a rate window closes once this much moved: a few messages are no evidence */
#define LP_GRAY_RATE_FRESH 1 /* a window that closed this many ticks ago still counts as now */

struct lp_gray_rate {
  int valid;                    /* the window is open: bytes, busy_ns and opened_ns are its start */
  uint64_t bytes, busy_ns;      /* the meter at the window's opening */
  uint64_t opened_ns;           /* and the clock */
  struct lp_port_counters port; /* and the port's counters (zero when unreadable) */
  int lossy;                    /* the last closed window resent packets: its slowness is the loss detector's */
  int shared;                   /* in the last closed window the port sent much more than this process's messages */
  int64_t mbps;                 /* the last closed window: MB/s while busy (bytes per microsecond), -1: none */
  int busy_pct;                 /* and the share of its wall-clock time the port was busy */
  int age;                      /* ticks since that window closed */
  unsigned recent;              /* the last LP_GRAY_RATE_SPAN windows judged, newest in bit 0: 1 slow */
  int unjudged;                 /* closed windows in a row that could not be judged (lp_gray_rate_judge) */
};

void lp_gray_rate_reset(struct lp_gray_rate *r);

/* A port's busy time at a tick at `now`, from its meter: the finished
 * periods (`busy_ns`), the one under way (`inflight` messages out since
 * `since`) up to when the process last looked (`looked`, not past `now`),
 * less the time the process did not look (`unwatched`).  Counting the
 * period under way up to `now` instead made a window that a tick cut in a
 * gap of the process's (a descheduled proxy thread) busy and slow, and the
 * next one, once the gap was known as unwatched, went back and was thrown
 * away unjudged. */
uint64_t lp_gray_busy(uint64_t busy_ns, int inflight, uint64_t since, uint64_t looked, uint64_t unwatched,
                      uint64_t now);

/* A rate window is shared when its port sent over this share of what the
 * process's messages moved (lp_gray_rate_window) ... */
#define LP_GRAY_RATE_SHARED_PCT 150
/* ... and that much more: a message's bytes count for the meter when it
 * completes, for the port as they go, so a window's two figures differ by
 * up to a message or two in flight (4 MiB messages in a ring: 20 MiB of
 * the process's against 45 of the port's in one window, alone on it). */
#define LP_GRAY_RATE_SHARED_SLACK (2 * LP_GRAY_RATE_MIN_BYTES)

/* A tick at `now` with the meter's totals (bytes moved by large messages,
 * time with one in flight) and the port's counters (`ok`, `bytes_ok`:
 * which could be read; a window whose two ends differ there starts over).  The window closes when at least LP_GRAY_RATE_MIN_BYTES
 * moved since it opened, and then this returns its rate in MB/s while busy
 * (and keeps the share of the window's wall-clock time that was busy,
 * `busy_pct`); otherwise -1 (the first tick, totals that went back, too
 * little yet: the window stays open, and the last rate grows older).  A
 * window in which the port resent a quarter of `threshold_ppm` of its
 * packets or more is `lossy`: a lost packet can cost a whole local ACK
 * timeout, so its rate says more about bad luck than about the port's
 * speed, and the resend windows judge such a port (a few resends do not
 * make a slow port's windows lossy: it would then never be judged at all).
 * A window in which the port sent over LP_GRAY_RATE_SHARED_PCT % of what this
 * process's messages moved, and LP_GRAY_RATE_SHARED_SLACK more, is `shared`: another process's traffic took the
 * wire too (after a failover, connections of two processes on one NIC), and
 * this process's rate is its share of the port, not the port's speed.  A rate is at most the port's nominal
 * speed (`speed_mbps`, 0: no limit): the busy time leaves out, whole, each gap
 * in which the process did not look and its messages all completed, though
 * the wire may have worked through part of it, so a port near its speed can
 * measure above it. */
int64_t lp_gray_rate_window(struct lp_gray_rate *r, uint64_t now, uint64_t bytes, uint64_t busy_ns,
                            const struct lp_port_counters *port, uint32_t threshold_ppm, int speed_mbps);

/* Whether the last window counts as now (for the port judged, and for the
 * ports it is compared with). */
static inline int lp_gray_rate_fresh(const struct lp_gray_rate *r) {
  return r->mbps >= 0 && r->age <= LP_GRAY_RATE_FRESH;
}

#define LP_GRAY_RATE_WIRE_PCT 80 /* the typical port runs at this share of its speed or more: the wire sets the pace */
#define LP_GRAY_RATE_BUSY_PCT 20 /* and the port judged was busy this share of the window or more: it set the pace */
#define LP_GRAY_RATE_STRIKES 3   /* slow windows among the last LP_GRAY_RATE_SPAN judged before a port is slow */
#define LP_GRAY_RATE_SPAN 4      /* (a preempted sender makes one slow window; a sender away makes one fast) */
/* A window that closes this many ticks (10 s) after the last one forgets
 * the slow ones before: they were of another time (an evaluation phase
 * between two training phases, say). */
#define LP_GRAY_RATE_FORGET_TICKS 40

/* Judge a window that closed this tick against `ref_mbps`, the rate of the
 * typical other port of the pool (-1: none measured), whose nominal speed
 * is `ref_speed_mbps`: slow when under `pct` % of it and of the port's own
 * nominal speed.  Only while the typical port runs at LP_GRAY_RATE_WIRE_PCT
 * of its speed or more: then the wire sets the pace, and a port under a
 * share of the others is slower than they are.  Traffic that leaves the
 * wire idle part of the time (latency-bound, or bound by the CPU, as on a
 * simulated fabric) makes rates that vary with the traffic's timing, not
 * the ports' speed, and is not judged: a slow port also costs it little.
 * Nor is a window in which the port judged was busy under
 * LP_GRAY_RATE_BUSY_PCT of its wall-clock time: the traffic waited for the
 * process, not for the port.  A rate while busy leaves out the gaps in
 * which the process did not look, so where the CPU sets the pace the
 * typical port can seem wire-bound (near its speed while busy) though the
 * wires idle most of the time, and the port judged, measured over other
 * messages' timing, slow (on a 2-core machine, 4,200-5,800 MB/s next to
 * 23,000-25,000 at 200 Gb/s, with 250 MB/s moving in all).  A port that is
 * slow for real and carries the traffic is busy most of the time.
 * Returns 1 when this window is slow and LP_GRAY_RATE_STRIKES of the last
 * LP_GRAY_RATE_SPAN judged were.  Not "so many in a row": a process that is
 * away (reducing on the CPU) while a slow port finishes its messages leaves
 * that time out of the port's busy time, and the window measures fast (in a
 * 4-rank ring, a slow rail at 25 % measured 700-1,250 MB/s of 1,250 in one
 * window in four): each such window started the count of slow ones over,
 * and delayed the drain by seconds.
 * A window that cannot be judged (no typical port measured, the typical
 * port not wire-bound, the port mostly idle, lossy or shared) counts
 * neither way; more than LP_GRAY_RATE_SPAN unjudged in a row forget the
 * slow ones (lossy and shared ones did not count, and two slow windows
 * drained the port with a third after any number of them).  When every port is slow alike, none is under a share of the
 * others, and nothing is judged slow. */
int lp_gray_rate_judge(struct lp_gray_rate *r, int64_t ref_mbps, int ref_speed_mbps, int speed_mbps, int pct);

#endif
