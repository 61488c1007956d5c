/*
 * The control plane: which ports may carry traffic right now.
 *
 * One thread per NIC waits on its async events (PORT_ERR, PORT_ACTIVE,
 * DEVICE_FATAL...) and pushes them into the event ring; data paths push
 * what they see too (error completions, stalls, peer notices).  One control
 * thread alone consumes the ring, decides each port's health — a port that
 * goes down is unusable at once, one that comes back only after its
 * hold-down (holddown.h) — runs the timers (hold-down expiry, polling of
 * ports as a backstop for lost events), writes the port log lines and the
 * metrics file (metrics.h).  RoCE interfaces are watched through route
 * netlink as well (netwatch.h).
 *
 * Connections never block on it: each one compares the health generation
 * with the one it last acted on (a single atomic load per progress call) and
 * moves when its port is no longer healthy or its primary is healthy again.
 */
#ifndef LP_HEALTH_H
#define LP_HEALTH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "env.h"
#include "event_ring.h"
#include "gray.h"
#include "holddown.h"
#include "metrics.h"
#include "netwatch.h"
#include "nic.h"
#include "rateboard.h"

/* Counters for the metrics file, which this control plane writes.  Moves
 * are counted by the connections (failover.c report()), port changes by the
 * control thread: relaxed atomics, no locks. */
struct lp_fo_dev_stats {
  _Atomic uint64_t failovers;         /* connection ends that left the device because of a failure */
  _Atomic uint64_t failbacks;         /* connection ends that came back to it */
  _Atomic uint64_t flaps;             /* times it went down */
  _Atomic uint64_t degraded;          /* times it was drained as degraded (gray.h) */
  _Atomic uint64_t degraded_ns;       /* finished periods of not being usable */
  _Atomic uint64_t degraded_since_ns; /* start of the current period, 0 while usable */
};

struct lp_fo_stats {
  _Atomic uint64_t failovers, failbacks, paths_lost, replayed, replayed_bytes;
  _Atomic uint64_t last_failover_ns; /* the latest failover, from the fault being seen to traffic flowing */
  struct lp_fo_dev_stats dev[LP_MAX_DEVS];
};

/* A device's transmit meter (gray.h, slowness): the time at least one
 * large message of this process was in flight on it, and the bytes those
 * messages moved.  Every connection's data path writes it (atomics, large
 * messages only), the control thread reads it (lp_health_tx_busy). */
struct lp_tx_meter {
  _Alignas(64) _Atomic int inflight; /* the writers' count; the reader goes by busy_since_ns */
  _Atomic uint64_t busy_since_ns;    /* when inflight last rose from 0; 0 once the period ended */
  _Atomic uint64_t busy_ns;          /* finished busy periods */
  _Atomic uint64_t bytes;
  /* Time within them that the process did not look (a gap between two
   * progress calls of a connection with a timed message out): a completion
   * that arrived then was seen late, and that time says nothing about the
   * port.  Counted once however many connections saw the same gap. */
  _Atomic uint64_t unwatched_ns;
  _Atomic uint64_t unwatched_until_ns;
  /* When a connection with a timed message out on the port last ended a
   * progress call: the period under way counts as busy up to then only
   * (lp_gray_busy), since whether the time after it was the port's or the
   * process's absence is known only at the next call. */
  _Atomic uint64_t looked_ns;
};

/* Which end of a connection: each direction is spread on its own (a NIC's
 * transmit and receive sides are separate), and so is counted. */
enum lp_dir { LP_DIR_SEND = 0, LP_DIR_RECV = 1 };

struct lp_health {
  const struct lp_env *env;         /* set by lp_health_start */
  _Atomic uint32_t gen;             /* bumped whenever any healthy[] changes */
  _Atomic int healthy[LP_MAX_DEVS]; /* 1: may carry traffic */
  _Atomic int link_up[LP_MAX_DEVS]; /* 1: the port is up, maybe still in hold-down (a last resort) */
  _Atomic int load[2][LP_MAX_DEVS]; /* [enum lp_dir]: connection ends on the device (offers and claims included) */
  /* [enum lp_dir][from][to]: standby paths on `to` of the ends now on `from`
   * (standby.h): when `from` fails, its ends move to their standbys, which
   * this count spread over the pool beforehand. */
  _Atomic int standby[2][LP_MAX_DEVS][LP_MAX_DEVS];
  _Atomic int standby_ready[LP_MAX_DEVS];  /* standby paths connected on the device (the metrics) */
  _Atomic int moving;                      /* connection ends of this process with a move under way */
  _Atomic uint64_t paced_until;            /* lp_health_paced: no paced work before this time */
  _Atomic uint64_t sweep_quiet_at;         /* lp_health_sweep_over: no sweep before this time */
  _Atomic int left_for_fault[LP_MAX_DEVS]; /* lp_health_left_for_fault since the last gray tick */
  _Atomic int fatal[LP_MAX_NICS];          /* NIC reported DEVICE_FATAL: never used again */
  /* A device a connection left for a silent fault (a stall, an error
   * completion: its port stayed up) is suspect until this time (0: not):
   * no failback onto it and no new path there while another will do, but
   * the connections still on it stay.  The hold-down and its damping are
   * those of a port flap (silent[]). */
  _Atomic uint64_t suspect_until[LP_MAX_DEVS];
  /* Silent faults queued for the control thread and not handled yet: the
   * device is suspect from the moment a connection leaves it, not from when
   * the control thread gets to the event.  A receiver answering a move for
   * a stall says in its ACK whether its primary may be used; read a moment
   * too early, "trusted" let the sender fail back before the receiver's
   * hold-down began, and put the receiver on a third NIC. */
  _Atomic int suspect_pending[LP_MAX_DEVS];
  /* When the control thread last counted a silent fault of the device as a
   * flap (silent[].since_ns, published): faults within LP_SILENT_COALESCE_NS
   * of it are not even queued (lp_health_silent_fault). */
  _Atomic uint64_t silent_counted_ns[LP_MAX_DEVS];
  /* Why a device is not healthy (enum lp_fo_reason): LP_FO_PORT_DOWN, or
   * LP_FO_DEGRADED for a port that is up but resends too many packets. */
  _Atomic int down_reason[LP_MAX_DEVS];
  struct lp_fo_stats stats;
  struct lp_tx_meter tx[LP_MAX_DEVS];
  /* Owned by the control thread. */
  struct lp_holddown hd[LP_MAX_DEVS];
  struct lp_holddown silent[LP_MAX_DEVS];
  struct lp_gray gray[LP_MAX_DEVS];      /* LINKPASS_GRAY: each port's resend windows */
  struct lp_gray_rate rate[LP_MAX_DEVS]; /* and its rate windows, from tx[] */
  uint64_t rate_at_ns[LP_MAX_DEVS];      /* when each port's last rate window closed */
  uint64_t fault_ns[LP_MAX_DEVS];        /* when this process last left each port for a fault (on the board) */
  struct lp_rateboard board;             /* the host's ports' rates, as the other processes measure them */
  uint64_t next_gray_ns;
  int fatal_handled[LP_MAX_NICS]; /* its DEVICE_FATAL acted on (the ports marked down) */
  int query_fails[LP_MAX_DEVS];   /* ibv_query_port failures in a row (control thread) */
  uint64_t next_poll_ns;
  struct lp_metrics_file metrics; /* LINKPASS_METRICS_FILE (metrics.h), control thread only */
  struct lp_netwatch nw;          /* RoCE interfaces (netwatch.h) */
  struct lp_event_ring ring;
  int stop_fd;         /* eventfd: wakes the async threads to exit */
  int change_fd;       /* eventfd: counts generation changes, for the idle watch (-1: none) */
  _Atomic int running; /* read by NCCL's threads while the exit stops the control plane */
  pthread_t control;
  int nasync;
  pthread_t async[LP_MAX_NICS];
  struct lp_async_arg {
    struct lp_health *h;
    int nic;
  } async_arg[LP_MAX_NICS];
};

/* Start the threads for the devices of `env`; idempotent.  0 or -1. */
int lp_health_start(struct lp_health *h, const struct lp_env *env);
/* Stop and join every thread (unload, exit).  The event ring, which NCCL's
 * threads push into, stays until lp_health_free. */
void lp_health_stop(struct lp_health *h);
void lp_health_free(struct lp_health *h);

/* A connection end left `dev` for a silent fault (`reason`, enum
 * lp_fo_reason): the device becomes suspect (lp_health_trusted); never
 * blocks.  A fault the control thread would take for the same flap is not
 * queued: a black-holed NIC makes hundreds at once, and each woke the
 * control thread, which took the CPU from the threads moving connections. */
void lp_health_silent_fault(struct lp_health *h, int dev, int reason, uint64_t comm_id);

/* A sweep's first event line was held (lp_report_emit returned 1): the
 * control thread looks now, and sends it (LP_SWEEP_EARLY_LINES, health.c).
 * One eventfd write; never blocks. */
void lp_health_lines_held(struct lp_health *h);

/* Where a `dir` end whose primary device is `primary` goes: a healthy
 * device of the primary's pool with the same link layer, fewest ends of
 * that direction first,
 * pool order on ties, devices suspect of a silent fault only when no other
 * will do; `prefer` first when trusted (lp_health_trusted).  `avoid` (the device it
 * is leaving) only when nothing else is healthy: the failure may have been
 * the peer's.  With nothing healthy at all, a port that is up again but
 * still in hold-down beats losing the path.  Only devices of the NICs in
 * `nics` (bit n: NIC n), where every buffer the connection uses is
 * registered.  -1: no path on this side. */
int lp_health_choose(const struct lp_health *h, enum lp_dir dir, int primary, int prefer, int avoid, uint32_t nics);

/* lp_health_choose, and the chosen device counts one more `dir` end at
 * once, atomically with the choice: two threads moving connections at the
 * same moment (NCCL's proxy thread and the idle watch) never both take the
 * device that was least loaded before either chose.  The caller gives the
 * claim back with lp_health_load_add(..., -1) once the link it opened there
 * counts itself (lp_link_open), or the open failed. */
int lp_health_claim(struct lp_health *h, enum lp_dir dir, int primary, int prefer, int avoid, uint32_t nics);

/* A standby path for a `dir` end now on `from` (primary `primary`): a
 * healthy device of the pool other than `from`, with the same link layer,
 * the fewest standbys of `from`'s ends first, pool order on ties; claimed
 * atomically like lp_health_claim, and given back with
 * lp_health_standby_release.  `prefer` first when healthy and not `from`.
 * -1: none. */
int lp_health_claim_standby(struct lp_health *h, enum lp_dir dir, int primary, int from, int prefer, uint32_t nics);
static inline void lp_health_standby_release(struct lp_health *h, enum lp_dir dir, int from, int to) {
  atomic_fetch_sub_explicit(&h->standby[dir][from][to], 1, memory_order_relaxed);
}

/* A connection leaves `dev` for a fault (a port down here or at the peer,
 * an error completion, a stall): what its port resent until then is that
 * fault's retries, not a gray failure's, so the port's resend window starts
 * over at the next gray tick.  Else a peer's pulled cable, whose local ACK
 * timeouts this port counted, made it "degraded" two windows later, once
 * traffic came back to close them (seen at 1,024 connections).  The port
 * counts them for every process of the host that uses it: the tick posts
 * the fault on the rate board, and theirs start over too (lp_gray_fault). */
static inline void lp_health_left_for_fault(struct lp_health *h, int dev) {
  atomic_store_explicit(&h->left_for_fault[dev], 1, memory_order_relaxed);
}

/* Moves under way in this process: standby paths are rebuilt, and retired
 * paths destroyed, only while it is 0, off the critical path of a sweep. */
static inline void lp_health_moving_add(struct lp_health *h, int delta) {
  atomic_fetch_add_explicit(&h->moving, delta, memory_order_relaxed);
}
static inline int lp_health_moving(struct lp_health *h) {
  return atomic_load_explicit(&h->moving, memory_order_relaxed);
}

/* A move began or ended at `now`: the sweep it belongs to is over once no
 * move is under way and none began or ended for `quiet_ns`.  The event
 * lines of a sweep wait for its end (lp_report_emit). */
static inline void lp_health_sweep_seen(struct lp_health *h, uint64_t now, uint64_t quiet_ns) {
  uint64_t until = atomic_load_explicit(&h->sweep_quiet_at, memory_order_relaxed), t = now + quiet_ns;
  while (until < t && !atomic_compare_exchange_weak_explicit(&h->sweep_quiet_at, &until, t, memory_order_relaxed,
                                                             memory_order_relaxed)) {}
}
static inline int lp_health_sweep_over(struct lp_health *h, uint64_t now) {
  return lp_health_moving(h) == 0 && now >= atomic_load_explicit(&h->sweep_quiet_at, memory_order_relaxed);
}

/* Work that is not urgent (building a standby path, destroying a retired
 * one: about a millisecond of verbs calls each on a ConnectX) is paced over
 * the whole process: 1 when the caller may do one piece now, the next
 * coming `gap_ns` later at the earliest.  A thousand connections then
 * never stall NCCL's progress thread for seconds in one go. */
static inline int lp_health_paced(struct lp_health *h, uint64_t now, uint64_t gap_ns) {
  uint64_t until = atomic_load_explicit(&h->paced_until, memory_order_relaxed);
  return now >= until && atomic_compare_exchange_strong_explicit(&h->paced_until, &until, now + gap_ns,
                                                                 memory_order_relaxed, memory_order_relaxed);
}

/* No paced work before `t` (nor before what was asked already). */
static inline void lp_health_paced_after(struct lp_health *h, uint64_t t) {
  uint64_t until = atomic_load_explicit(&h->paced_until, memory_order_relaxed);
  while (until < t && !atomic_compare_exchange_weak_explicit(&h->paced_until, &until, t, memory_order_relaxed,
                                                             memory_order_relaxed)) {}
}

/* The piece of paced work that began at `t0` ended at `t1`: the next one
 * waits twice as long as this one took, if that is longer than the gap, so
 * that paced work takes at most a third of a thread however slow the verbs
 * calls are (a sanitizer build, a busy NIC firmware). */
static inline void lp_health_paced_took(struct lp_health *h, uint64_t t0, uint64_t t1) {
  lp_health_paced_after(h, t1 + 2 * (t1 - t0));
}

/* A message of `bytes` (large ones only: small ones time the latency, not
 * the rate) starts out on `dev` at `now`; lp_health_tx_end when its last
 * completion arrived, with the bytes it moved there (0: it did not finish
 * there, e.g. it was written again elsewhere after a move). */
static inline void lp_health_tx_begin(struct lp_health *h, int dev, uint64_t now) {
  struct lp_tx_meter *m = &h->tx[dev];
  /* Acquire: a period that begins here comes after the decrement of the
   * one that ended (lp_health_tx_end), whose read of the start it must not
   * see. */
  if (atomic_fetch_add_explicit(&m->inflight, 1, memory_order_acquire) == 0)
    atomic_store_explicit(&m->busy_since_ns, now, memory_order_relaxed);
}
static inline void lp_health_tx_end(struct lp_health *h, int dev, uint64_t bytes, uint64_t now) {
  struct lp_tx_meter *m = &h->tx[dev];
  if (bytes) atomic_fetch_add_explicit(&m->bytes, bytes, memory_order_relaxed);
  /* The period's start, read while this message still holds it open: no
   * begin can store another before the decrement (release: the read stays
   * before it). */
  uint64_t since = atomic_load_explicit(&m->busy_since_ns, memory_order_relaxed);
  if (atomic_fetch_sub_explicit(&m->inflight, 1, memory_order_release) != 1) return;
  /* The last out: the period leaves "under way" (busy_since_ns 0) before
   * it joins the finished ones, and the release orders the two for the
   * reader's acquire (lp_health_tx_busy): a tick may find it in neither
   * (its busy time then seems to go back, and the window starts over),
   * never in both.  A period another thread began since the decrement has
   * stored its own start: the exchange fails and leaves it under way.  A
   * start this thread did not see yet (another thread's begin, whose store
   * was late) is taken as it is now. */
  uint64_t expected = since;
  if (since == 0)
    since = atomic_exchange_explicit(&m->busy_since_ns, 0, memory_order_relaxed);
  else
    atomic_compare_exchange_strong_explicit(&m->busy_since_ns, &expected, 0, memory_order_relaxed,
                                            memory_order_relaxed);
  if (since != 0 && now > since) atomic_fetch_add_explicit(&m->busy_ns, now - since, memory_order_release);
}

/* The busy time of `dev`'s port at a tick at `now` (lp_gray_busy): the
 * control thread's read of the meter.  A period is under way while
 * busy_since_ns is set, not while inflight > 0: a begin raises inflight
 * before it stores the period's start, and a tick that read inflight in
 * between paired it with the last period's start, counting that period
 * again (it is among the finished ones already) and the idle time after
 * it: a slow window that never was.  Read in this order (not as a call's arguments, whose order C leaves
 * open): busy_ns first, with acquire, so that a period found among the
 * finished ones is no longer found under way (lp_health_tx_end), and the
 * unwatched time last, so that it covers no more than the busy time. */
static inline uint64_t lp_health_tx_busy(struct lp_health *h, int dev, uint64_t now) {
  struct lp_tx_meter *m = &h->tx[dev];
  uint64_t busy_ns = atomic_load_explicit(&m->busy_ns, memory_order_acquire);
  uint64_t since = atomic_load_explicit(&m->busy_since_ns, memory_order_relaxed);
  uint64_t looked = atomic_load_explicit(&m->looked_ns, memory_order_relaxed);
  uint64_t unwatched = atomic_load_explicit(&m->unwatched_ns, memory_order_relaxed);
  return lp_gray_busy(busy_ns, since != 0, since, looked, unwatched, now);
}

/* A connection with a timed message out on `dev` ended a progress call at
 * `now` (lp_tx_meter.looked_ns). */
static inline void lp_health_tx_looked(struct lp_health *h, int dev, uint64_t now) {
  atomic_store_explicit(&h->tx[dev].looked_ns, now, memory_order_relaxed);
}

/* A connection with a timed message out on `dev` was not progressed from
 * `from` to `to` (lp_tx_meter's unwatched time). */
static inline void lp_health_tx_unwatched(struct lp_health *h, int dev, uint64_t from, uint64_t to) {
  struct lp_tx_meter *m = &h->tx[dev];
  uint64_t until = atomic_load_explicit(&m->unwatched_until_ns, memory_order_relaxed);
  for (;;) {
    uint64_t start = from > until ? from : until; /* the part no other connection counted */
    if (start >= to) return;
    if (atomic_compare_exchange_weak_explicit(&m->unwatched_until_ns, &until, to, memory_order_relaxed,
                                              memory_order_relaxed)) {
      atomic_fetch_add_explicit(&m->unwatched_ns, to - start, memory_order_relaxed);
      return;
    }
  }
}

/* Connection ends of `dir` on each device (the spread of lp_health_choose). */
static inline void lp_health_load_add(struct lp_health *h, enum lp_dir dir, int dev, int delta) {
  atomic_fetch_add_explicit(&h->load[dir][dev], delta, memory_order_relaxed);
}
/* Connection ends of both directions on a device (the metrics). */
static inline int lp_health_connections(struct lp_health *h, int dev) {
  return atomic_load_explicit(&h->load[LP_DIR_SEND][dev], memory_order_relaxed) +
         atomic_load_explicit(&h->load[LP_DIR_RECV][dev], memory_order_relaxed);
}
static inline int lp_health_nic_fatal(const struct lp_health *h, int nic) {
  return atomic_load_explicit(&h->fatal[nic], memory_order_relaxed);
}

/* Readable after every change of the generation: a comm NCCL is not
 * calling learns of a health change only when someone calls it, and the
 * idle watch waits on this to be that someone (idle_watch.h).  -1 when
 * the control plane is not running. */
static inline int lp_health_change_fd(const struct lp_health *h) { return h->running ? h->change_fd : -1; }
static inline uint32_t lp_health_gen(struct lp_health *h) {
  return atomic_load_explicit(&h->gen, memory_order_acquire);
}
static inline int lp_health_ok(const struct lp_health *h, int dev) {
  return atomic_load_explicit(&h->healthy[dev], memory_order_relaxed);
}
/* Why `dev` is not healthy: the reason a connection leaving it gives. */
static inline int lp_health_down_reason(const struct lp_health *h, int dev) {
  return atomic_load_explicit(&h->down_reason[dev], memory_order_relaxed);
}
static inline int lp_health_link_up(const struct lp_health *h, int dev) {
  return atomic_load_explicit(&h->link_up[dev], memory_order_relaxed);
}
/* Healthy and not suspect of a silent fault, queued or counted: fit to
 * move back onto.  The acquire pairs with the control thread's release
 * once it has set suspect_until (health.c handle). */
static inline int lp_health_trusted(const struct lp_health *h, int dev, uint64_t now) {
  return lp_health_ok(h, dev) && atomic_load_explicit(&h->suspect_pending[dev], memory_order_acquire) == 0 &&
         now >= atomic_load_explicit(&h->suspect_until[dev], memory_order_relaxed);
}

#endif
