/* Gray failures: one port's resend windows (gray.h), fed by hand. */
#include <criterion/criterion.h>

#include "gray.h"
#include "health.h"

#define T 2000 /* 0.2 %, LINKPASS_GRAY_RESEND_PPM's default */
#define TICK_NS 250000000ull

/* The next tick's time (every 250 ms, as the control thread's). */
static uint64_t tick(uint64_t *now) { return *now += TICK_NS; }

Test(gray, two_windows_over_the_threshold_strike) {
  struct lp_gray g;
  uint64_t now = 0;
  lp_gray_reset(&g);
  cr_expect_eq(lp_gray_window(&g, 1, 1000000, 0, T, tick(&now)), -1, "the first window only sets the start");
  cr_expect_eq(lp_gray_window(&g, 1, 1100000, 1000, T, tick(&now)), 10000, "1,000 resends in 100,000 packets: 1 %");
  cr_expect(!lp_gray_struck(&g));
  cr_expect_eq(lp_gray_window(&g, 1, 1200000, 2000, T, tick(&now)), 10000);
  cr_expect(lp_gray_struck(&g), "a second window over it");
  cr_expect_eq(lp_gray_window(&g, 1, 1201000, 2000, T, tick(&now)), -1, "too few packets: the window stays open");
  cr_expect(!lp_gray_struck(&g), "the strikes are from a window already judged, not news of this tick");
  cr_expect_eq(lp_gray_window(&g, 1, 1300000, 2010, T, tick(&now)), 100, "a clean window");
  cr_expect_eq(g.strikes, 0, "clears the strikes");
}

Test(gray, idle_or_unreadable_windows_say_nothing) {
  struct lp_gray g, never; /* never: a port struck since time 0 */
  uint64_t now = 0;
  lp_gray_reset(&g);
  lp_gray_reset(&never);
  lp_gray_window(&g, 1, 0, 0, T, tick(&now));
  lp_gray_window(&g, 1, 100000, 1000, T, tick(&now));
  cr_assert_eq(g.strikes, 1);
  cr_expect_eq(lp_gray_window(&g, 1, 101500, 1000, T, tick(&now)), -1, "1,500 packets are too few to judge");
  cr_expect_eq(g.strikes, 1, "and leave the strikes as they were");
  cr_expect_eq(lp_gray_window(&g, 1, 102500, 1001, T, tick(&now)), 400, "the window went on: 2,500 packets, 1 resent");
  cr_expect_eq(g.strikes, 0);
  cr_expect(!lp_gray_clearly_better(&g, &never), "an idle port is no evidence");
  cr_expect_eq(lp_gray_window(&g, 0, 0, 0, T, tick(&now)), -1, "unreadable counters");
  cr_expect_eq(lp_gray_window(&g, 1, 200000, 2000, T, tick(&now)), -1, "the window after them only sets the start");
  cr_expect_eq(lp_gray_window(&g, 1, 100, 0, T, tick(&now)), -1, "counters that went back (a reset NIC) start over");
}

Test(gray, clearly_better_means_measured_and_well_under_twice) {
  struct lp_gray g, never; /* never: a port struck since time 0 */
  uint64_t now = 0;
  lp_gray_reset(&g);
  lp_gray_reset(&never);
  lp_gray_window(&g, 1, 0, 0, T, tick(&now));
  lp_gray_window(&g, 1, 100000, 0, T, tick(&now));
  cr_expect(!lp_gray_clearly_better(&g, &never), "one clean window could be luck");
  lp_gray_window(&g, 1, 200000, 40, T, tick(&now));
  cr_expect(lp_gray_clearly_better(&g, &never), "two in a row, the second at 400 ppm: under a quarter of 2,000");
  lp_gray_window(&g, 1, 300000, 100, T, tick(&now));
  cr_expect(!lp_gray_clearly_better(&g, &never), "600 ppm: over a quarter, even if under the threshold");
  lp_gray_window(&g, 1, 400000, 100, T, tick(&now));
  lp_gray_window(&g, 1, 500000, 100, T, tick(&now));
  cr_expect(lp_gray_clearly_better(&g, &never), "two clean windows again");
  for (int i = 1; i < LP_GRAY_QUIET_WINDOWS; i++) lp_gray_window(&g, 1, 500500, 100, T, tick(&now));
  cr_expect(lp_gray_clearly_better(&g, &never), "a few quiet ticks: the window is still open");
  lp_gray_window(&g, 1, 500500, 100, T, tick(&now));
  cr_expect(!lp_gray_clearly_better(&g, &never), "quiet for 2 s: no longer evidence of now");
}

/* Every port lost 1 % from the same tick on.  One closes a window each
 * tick and strikes; another's window spans the start of the loss, its
 * packets mostly from before: its clean windows say nothing of the time
 * the first was shown to lose, and it is not clearly better until a window
 * of its own from that time is. */
Test(gray, clean_windows_from_before_the_strikes_are_no_evidence) {
  struct lp_gray lossy, other;
  uint64_t now = 0;
  lp_gray_reset(&lossy);
  lp_gray_reset(&other);
  uint64_t lp = 0, op = 0;
  for (int i = 0; i < 3; i++) { /* clean before the loss: both close a window each tick */
    tick(&now);
    lp_gray_window(&lossy, 1, lp += 3000, 0, T, now);
    lp_gray_window(&other, 1, op += 3000, 0, T, now);
  }
  cr_assert(lp_gray_clearly_better(&other, &lossy), "a port clean for 2 windows, nothing struck");
  /* The loss begins; `other` has just opened a window, and slows down:
   * 700 packets a tick, so its window stays open for 3 ticks. */
  tick(&now);
  lp_gray_window(&lossy, 1, lp += 3000, 30, T, now);
  lp_gray_window(&other, 1, op += 700, 0, T, now);
  tick(&now);
  lp_gray_window(&lossy, 1, lp += 3000, 60, T, now);
  lp_gray_window(&other, 1, op += 700, 0, T, now);
  cr_assert(lp_gray_struck(&lossy), "two windows at 1 %%");
  cr_expect(!lp_gray_clearly_better(&other, &lossy), "its clean windows are from before the loss");
  tick(&now);
  lp_gray_window(&lossy, 1, lp += 3000, 90, T, now);
  cr_expect_eq(lp_gray_window(&other, 1, op += 700, 7, T, now), 3333, "its window spanning the start");
  cr_expect(!lp_gray_clearly_better(&other, &lossy), "it loses too");
  /* Had its window stayed clean, it would still not count: it opened
   * before the first strike closed (the same ticks again, against `lossy`). */
  struct lp_gray lucky;
  lp_gray_reset(&lucky);
  now = 0, op = 0;
  for (int i = 0; i < 3; i++) lp_gray_window(&lucky, 1, op += 3000, 0, T, tick(&now));
  lp_gray_window(&lucky, 1, op += 700, 0, T, tick(&now));
  lp_gray_window(&lucky, 1, op += 700, 0, T, tick(&now));
  cr_expect_eq(lp_gray_window(&lucky, 1, op += 700, 0, T, tick(&now)), 0);
  cr_expect(!lp_gray_clearly_better(&lucky, &lossy), "a clean window opened before the strikes began");
  /* A window wholly after the first strike closed is evidence. */
  lp_gray_window(&lucky, 1, op += 3000, 0, T, tick(&now));
  cr_expect(lp_gray_clearly_better(&lucky, &lossy), "two clean windows, the last measured while the other lost");
}

Test(gray, every_resend_at_most_one_million_ppm) {
  struct lp_gray g;
  uint64_t now = 0;
  lp_gray_reset(&g);
  lp_gray_window(&g, 1, 0, 0, T, tick(&now));
  cr_expect_eq(lp_gray_window(&g, 1, 2000, 5000, T, tick(&now)), 1000000);
}

/* ---- slowness: rate windows ---- */

#define MIB (1ull << 20)
#define MS 1000000ull

/* A tick of a process alone on its port: the port sent what the meter
 * counted, a packet per 4 KiB, and `resends` packets again so far; the
 * loss threshold is the default 2,000 ppm. */
static int64_t window(struct lp_gray_rate *r, uint64_t now, uint64_t bytes, uint64_t busy, uint64_t resends,
                      int speed_mbps) {
  struct lp_port_counters port = {.ok = 1, .packets = bytes / 4096, .resends = resends, .bytes_ok = 1, .bytes = bytes};
  return lp_gray_rate_window(r, now, bytes, busy, &port, 2000, speed_mbps);
}

Test(gray_rate, a_window_closes_with_enough_bytes_and_gives_mb_per_s) {
  struct lp_gray_rate r;
  lp_gray_rate_reset(&r);
  cr_expect_eq(window(&r, 0, 0, 0, 0, 0), -1, "the first tick only opens the window");
  cr_expect(!lp_gray_rate_fresh(&r));
  cr_expect_eq(window(&r, 25 * MS, 8 * MIB, 10 * MS, 0, 0), -1, "8 MiB are too few: the window stays open");
  cr_expect_eq(window(&r, 50 * MS, 32 * MIB, 40 * MS, 0, 0), 838, "32 MiB in 40 ms busy: 838 MB/s");
  cr_expect_eq(r.busy_pct, 80, "busy 40 ms of the window's 50");
  cr_expect(lp_gray_rate_fresh(&r));
  cr_expect_eq(window(&r, 75 * MS, 33 * MIB, 45 * MS, 0, 0), -1, "a quiet tick");
  cr_expect(lp_gray_rate_fresh(&r), "one tick old still counts as now");
  window(&r, 100 * MS, 33 * MIB, 45 * MS, 0, 0);
  cr_expect(!lp_gray_rate_fresh(&r), "two ticks old does not");
  cr_expect_eq(window(&r, 125 * MS, MIB, 0, 0, 0), -1, "totals that went back (a reset) start over");
  cr_expect_eq(window(&r, 165 * MS, 20 * MIB, 10 * MS, 0, 0), 1992, "and the next window measures from there");
  cr_expect_eq(r.busy_pct, 25, "busy 10 ms of the window's 40");
}

/* One window of a 25 Gb/s port (3,125 MB/s) judged against a typical port
 * at 3,000 MB/s: `slow` at a quarter of its rate, else at 2/3 of the best. */
static int judge(struct lp_gray_rate *r, int slow) {
  r->mbps = slow ? 780 : 2000;
  r->busy_pct = 100;
  return lp_gray_rate_judge(r, 3000, 25000, 25000, 50);
}

Test(gray_rate, three_slow_windows_of_the_last_four_against_the_pool_and_its_speed) {
  struct lp_gray_rate r;
  lp_gray_rate_reset(&r);
  cr_expect(!judge(&r, 1), "one slow window is not enough");
  cr_expect(!judge(&r, 1), "nor two (a sender preempted for a while)");
  cr_expect(judge(&r, 1), "the third is");
  lp_gray_rate_reset(&r);
  cr_expect(!judge(&r, 1));
  cr_expect(!judge(&r, 0), "a window that measured fast (the process was away while the port worked)");
  cr_expect(!judge(&r, 1));
  cr_expect(judge(&r, 1), "does not hide the three slow ones of the last four");
  lp_gray_rate_reset(&r);
  cr_expect(!judge(&r, 1));
  cr_expect(!judge(&r, 1));
  cr_expect(!judge(&r, 0), "a fast window never drains a port");
  cr_expect(!judge(&r, 0));
  cr_expect(!judge(&r, 1), "two slow of the last four are not enough");
  cr_expect(!judge(&r, 0));
}

Test(gray_rate, windows_that_cannot_be_judged_count_neither_way_for_a_while) {
  struct lp_gray_rate r;
  lp_gray_rate_reset(&r);
  cr_expect(!judge(&r, 1));
  cr_expect(!judge(&r, 1));
  r.mbps = 780;
  r.busy_pct = 100;
  cr_expect(!lp_gray_rate_judge(&r, 1500, 25000, 25000, 50), "the typical port not wire-bound: no evidence");
  cr_expect(!lp_gray_rate_judge(&r, -1, 0, 25000, 50), "no typical port measured: none either");
  cr_expect(judge(&r, 1), "the slow ones before still count");
  lp_gray_rate_reset(&r);
  cr_expect(!judge(&r, 1));
  cr_expect(!judge(&r, 1));
  for (int i = 0; i <= LP_GRAY_RATE_SPAN; i++) cr_expect(!lp_gray_rate_judge(&r, -1, 0, 25000, 50));
  cr_expect(!judge(&r, 1), "after more than LP_GRAY_RATE_SPAN of them, the slow ones are forgotten");
}

Test(gray_rate, nothing_is_slow_without_a_clearly_faster_port) {
  struct lp_gray_rate r;
  lp_gray_rate_reset(&r);
  r.mbps = 780;
  r.busy_pct = 100;
  for (int i = 0; i < 5; i++) cr_expect(!lp_gray_rate_judge(&r, -1, 0, 25000, 50), "no other port measured");
  for (int i = 0; i < 5; i++) cr_expect(!lp_gray_rate_judge(&r, 1500, 25000, 25000, 50), "every port slowed alike");
  r.mbps = 2000; /* a 25 Gb/s port at 64 % of its speed, next to a faster one (a 50 Gb/s port of the pool) */
  for (int i = 0; i < 5; i++) cr_expect(!lp_gray_rate_judge(&r, 5000, 50000, 25000, 50), "a port near its own speed");
  r.mbps = 300; /* 200 Gb/s ports, none of them near its speed: the traffic, not the wire, sets the pace */
  for (int i = 0; i < 5; i++)
    cr_expect(!lp_gray_rate_judge(&r, 1500, 200000, 200000, 50), "a pool the wire does not limit");
}

/* The false drain of 2026-12-05: on a machine whose CPU set the pace, a
 * healthy 200 Gb/s port measured 4,200-5,800 MB/s while busy next to one at
 * 23,000-25,000 (near its speed only because the gaps in which the process
 * did not look are left out), with 250 MB/s moving in all: it was busy a
 * few percent of each window.  A port that mostly waits for the process
 * sets no pace, and its windows count neither way. */
Test(gray_rate, a_port_busy_a_small_share_of_the_window_is_not_judged) {
  struct lp_gray_rate r;
  lp_gray_rate_reset(&r);
  uint64_t t = 0, bytes = 0, busy = 0;
  window(&r, t, bytes, busy, 0, 200000);
  for (int i = 0; i < 8; i++) {
    t += 250 * MS, bytes += 32 * MIB, busy += 7 * MS; /* 4,793 MB/s while busy, 2.8 % of the time */
    cr_expect_eq(window(&r, t, bytes, busy, 0, 200000), 4793);
    cr_expect_eq(r.busy_pct, 2);
    cr_expect(!lp_gray_rate_judge(&r, 24000, 200000, 200000, 50), "window %d: a port that waits is not slow", i);
  }
  cr_expect_eq(r.recent, 0u);
  for (int i = 0; i < 3; i++) {
    t += 250 * MS, bytes += 32 * MIB, busy += 200 * MS; /* 167 MB/s, busy 80 % of the time: slow for real */
    window(&r, t, bytes, busy, 0, 200000);
    cr_expect_eq(r.busy_pct, 80);
    cr_expect_eq(lp_gray_rate_judge(&r, 24000, 200000, 200000, 50), i == 2, "window %d of a busy slow port", i);
  }
}

Test(gray_rate, a_window_with_resends_is_the_loss_detectors) {
  struct lp_gray_rate r;
  lp_gray_rate_reset(&r);
  window(&r, 0, 0, 0, 7, 0);
  cr_expect_eq(window(&r, 80 * MS, 16 * MIB, 80 * MS, 27, 0), 209,
               "a slow window, 20 of its 4,096 packets resent (4,883 ppm)");
  cr_expect(r.lossy);
  for (int i = 0; i < 3; i++) cr_expect(!lp_gray_rate_judge(&r, 3000, 25000, 25000, 50), "is not judged for its rate");
  cr_expect_eq(r.recent, 0u);
  cr_expect_eq(window(&r, 160 * MS, 32 * MIB, 160 * MS, 27, 0), 209, "the next one, without resends");
  cr_expect(!r.lossy);
  cr_expect(!lp_gray_rate_judge(&r, 3000, 25000, 25000, 50));
  cr_expect_eq(r.recent, 1u, "is");
}

Test(gray_rate, no_port_measures_above_its_speed) {
  struct lp_gray_rate r;
  lp_gray_rate_reset(&r);
  window(&r, 0, 0, 0, 0, 10000);
  cr_expect_eq(window(&r, 20 * MS, 64 * MIB, 20 * MS, 0, 10000), 1250,
               "64 MiB in 20 ms is 3,355 MB/s: more than a 10 Gb/s port moves, so 1,250");
}

/* A slow port that also drops a packet now and then: a resend or two in a
 * window (under a quarter of the loss threshold) leave it to the rate
 * windows, which drain it; counted as lossy, it was never judged at all. */
Test(gray_rate, a_few_resends_do_not_hide_a_slow_port) {
  struct lp_gray_rate r;
  lp_gray_rate_reset(&r);
  uint64_t t = 0, bytes = 0, busy = 0, resends = 0;
  window(&r, t, bytes, busy, resends, 25000);
  int drained = 0;
  for (int i = 0; i < 3; i++) {
    t += 250 * MS, bytes += 32 * MIB, busy += 200 * MS, resends += 2; /* 2 of 8,192 packets: 244 ppm */
    window(&r, t, bytes, busy, resends, 25000);
    cr_expect(!r.lossy, "window %d", i);
    drained = lp_gray_rate_judge(&r, 3000, 25000, 25000, 50);
  }
  cr_expect(drained, "three slow windows with a few resends each: slow");
}

/* After a failover two processes send on one port: this one's messages
 * move at its share of the wire, not at the port's speed.  Its windows in
 * which the port sent much more than its own messages are not judged, and
 * the port is not drained for the other process's traffic. */
Test(gray_rate, a_port_another_process_sends_on_is_not_judged) {
  struct lp_gray_rate r;
  lp_gray_rate_reset(&r);
  uint64_t t = 0, bytes = 0, busy = 0;
  struct lp_port_counters port = {.ok = 1, .bytes_ok = 1};
  lp_gray_rate_window(&r, t, bytes, busy, &port, 2000, 25000);
  for (int i = 0; i < 4; i++) {
    t += 250 * MS, bytes += 32 * MIB, busy += 200 * MS;   /* 167 MB/s of this process's own */
    port.bytes += 5 * 32 * MIB, port.packets += 5 * 8192; /* the port sent five times that */
    cr_expect_eq(lp_gray_rate_window(&r, t, bytes, busy, &port, 2000, 25000), 167);
    cr_expect(r.shared, "window %d", i);
    cr_expect(!lp_gray_rate_judge(&r, 3000, 25000, 25000, 50), "window %d is not judged", i);
  }
  cr_expect_eq(r.recent, 0u);
  t += 250 * MS, bytes += 32 * MIB, busy += 200 * MS;
  port.bytes += 33 * MIB, port.packets += 8448; /* alone again, with its clear-to-sends and headers */
  lp_gray_rate_window(&r, t, bytes, busy, &port, 2000, 25000);
  cr_expect(!r.shared, "a window of its own traffic is judged again");
}

/* A tick in a gap of the process's (its proxy thread descheduled with a
 * message out): the period under way counts up to the last look only, so
 * the window is not made slow by time that may be the process's; once the
 * gap is known (unwatched, or the port's after all) the busy time only
 * grows, and the next window is judged, not thrown away as gone back. */
Test(gray_rate, a_tick_in_the_process_absence_counts_busy_up_to_its_last_look) {
  uint64_t since = 100 * MS, looked = 110 * MS, now = 150 * MS;
  uint64_t in_gap = lp_gray_busy(0, 1, since, looked, 0, now);
  cr_expect_eq(in_gap, 10 * MS, "up to the last look, not the tick");
  cr_expect_eq(lp_gray_busy(0, 1, since, 90 * MS, 0, now), 0, "no look since the period began");
  cr_expect_eq(lp_gray_busy(0, 1, since, 200 * MS, 0, now), 50 * MS, "never past the tick");
  cr_expect_eq(lp_gray_busy(5 * MS, 0, since, looked, 0, now), 5 * MS, "nothing under way");
  /* The process is back at 160 ms: the message had completed in the gap,
   * which is unwatched (110-160 ms), and the period (100-160 ms) ends. */
  uint64_t after = lp_gray_busy(60 * MS, 0, since, 160 * MS, 50 * MS, 175 * MS);
  cr_expect_eq(after, 10 * MS);
  cr_expect_geq(after, in_gap, "the busy time did not go back");
  /* Or the message was still out when it came back: the gap was the port's. */
  cr_expect_eq(lp_gray_busy(0, 1, since, 160 * MS, 0, 175 * MS), 60 * MS);
}

/* The transmit meter (health.h) read between the two steps of a writer:
 * a message's begin raises the count of messages out, then stores when the
 * period began; its end lowers the count, then adds the period to the
 * finished ones.  The control thread may read the meter in between (the
 * writer preempted there, or its stores seen out of order): it must never
 * count time twice, nor time nobody was busy. */
Test(gray_rate, the_meter_read_between_a_writers_two_steps_counts_no_time_twice) {
  static struct lp_health h; /* zero: no message out yet */
  struct lp_tx_meter *m = &h.tx[0];
  lp_health_tx_begin(&h, 0, 100 * MS);
  lp_health_tx_looked(&h, 0, 190 * MS);
  lp_health_tx_end(&h, 0, 64 * MIB, 200 * MS);
  cr_assert_eq(lp_health_tx_busy(&h, 0, 250 * MS), 100 * MS, "one period, 100-200 ms");
  /* The next message's begin at 300 ms, stopped after its first step. */
  atomic_fetch_add(&m->inflight, 1);
  cr_expect_eq(lp_health_tx_busy(&h, 0, 350 * MS), 100 * MS,
               "a period whose start is not stored yet has lasted nothing (not 100-190 ms again)");
  atomic_fetch_sub(&m->inflight, 1);
  lp_health_tx_begin(&h, 0, 300 * MS);
  lp_health_tx_looked(&h, 0, 340 * MS);
  cr_expect_eq(lp_health_tx_busy(&h, 0, 350 * MS), 140 * MS, "under way up to the last look");
  /* Its end at 360 ms, stopped after its first step: the period is not
   * among the finished ones yet, and still counts as under way. */
  atomic_fetch_sub(&m->inflight, 1);
  cr_expect_eq(lp_health_tx_busy(&h, 0, 370 * MS), 140 * MS, "the busy time does not go back");
  atomic_fetch_add(&m->inflight, 1);
  lp_health_tx_end(&h, 0, 64 * MIB, 360 * MS);
  cr_expect_eq(lp_health_tx_busy(&h, 0, 370 * MS), 160 * MS, "two periods");
}

/* Counters that could be read at one end of a window only say nothing of
 * it: the window starts over (no lifetime totals taken for a window's),
 * and a port without port_xmit_data is never taken for shared. */
Test(gray_rate, counters_readable_at_one_end_only_start_the_window_over) {
  struct lp_gray_rate r;
  lp_gray_rate_reset(&r);
  struct lp_port_counters none = {0},
                          port = {
                              .ok = 1, .packets = 1u << 30, .resends = 1u << 20, .bytes_ok = 1, .bytes = 1ull << 50};
  lp_gray_rate_window(&r, 0, 0, 0, &none, 2000, 25000);
  cr_expect_eq(lp_gray_rate_window(&r, 250 * MS, 32 * MIB, 200 * MS, &port, 2000, 25000), -1,
               "readable at the end only: starts over");
  port.packets += 8192, port.bytes += 32 * MIB;
  cr_expect_eq(lp_gray_rate_window(&r, 500 * MS, 64 * MIB, 400 * MS, &port, 2000, 25000), 167);
  cr_expect(!r.lossy && !r.shared);
  struct lp_gray_rate q;
  lp_gray_rate_reset(&q);
  struct lp_port_counters no_bytes = {.ok = 1};
  lp_gray_rate_window(&q, 0, 0, 0, &no_bytes, 2000, 25000);
  no_bytes.packets = 8192;
  lp_gray_rate_window(&q, 250 * MS, 32 * MIB, 200 * MS, &no_bytes, 2000, 25000);
  cr_expect(!q.shared, "no port_xmit_data: never shared");
}

/* Lossy and shared windows are unjudged windows like the others: more than
 * LP_GRAY_RATE_SPAN of them in a row forget the slow ones.  They counted
 * for nothing: two slow windows, then any number of shared ones (another
 * rank's connections on the port after a failover), and one more slow
 * window drained the port. */
Test(gray_rate, lossy_or_shared_windows_in_a_row_forget_the_slow_ones) {
  struct lp_gray_rate r;
  lp_gray_rate_reset(&r);
  cr_expect(!judge(&r, 1));
  cr_expect(!judge(&r, 1));
  for (int i = 0; i < 1000; i++) {
    r.shared = i % 2, r.lossy = !r.shared;
    cr_expect(!judge(&r, 1), "a %s window is judged", r.shared ? "shared" : "lossy");
  }
  r.shared = r.lossy = 0;
  cr_expect(!judge(&r, 1), "two slow windows from long before, and one now, drained the port");
}

/* A window that closes after a long quiet spell (no traffic to time: an
 * evaluation phase) forgets the slow ones from before it. */
Test(gray_rate, a_window_after_a_long_quiet_spell_forgets_the_slow_ones) {
  struct lp_gray_rate r;
  lp_gray_rate_reset(&r);
  cr_expect(!judge(&r, 1));
  cr_expect(!judge(&r, 1));
  uint64_t t = 0;
  window(&r, t, 0, 0, 0, 25000);
  for (int i = 0; i <= LP_GRAY_RATE_FORGET_TICKS; i++) window(&r, t += 250 * MS, 0, 0, 0, 25000);
  cr_expect_geq(window(&r, t += 250 * MS, 32 * MIB, 200 * MS, 0, 25000), 0, "the window closes");
  cr_expect(!judge(&r, 1), "slow windows from more than 10 s before still counted");
  cr_expect(!judge(&r, 1));
  cr_expect(judge(&r, 1), "three slow windows of now drain it");
}
