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

#include "event_ring.h"
#include "holddown.h"
#include "idle_watch.h"
#include "netwatch.h"
#include "nic.h"

struct lp_health {
  _Atomic uint32_t gen;             /* bumped whenever any healthy[] changes */
  _Atomic int healthy[LP_MAX_DEVS]; /* 1: may carry traffic */
  _Atomic int link_up[LP_MAX_DEVS]; /* 1: the port is up, maybe still in hold-down (a last resort) */
  _Atomic int load[LP_MAX_DEVS];    /* connections whose link is on the device */
  _Atomic int fatal[LP_MAX_NICS];   /* NIC reported DEVICE_FATAL: never used again */
  /* Each device's pool, primary first (set at start, read-only after). */
  int pool_n[LP_MAX_DEVS];
  int pool[LP_MAX_DEVS][LP_MAX_DEVS];
  /* Owned by the control thread. */
  struct lp_holddown hd[LP_MAX_DEVS];
  uint64_t next_poll_ns;
  /* The metrics file (LINKPASS_METRICS_FILE; metrics.h), control thread only. */
  char metrics_path[LP_PATH_MAX]; /* "" when none is written */
  char *metrics_buf;
  size_t metrics_cap;
  uint64_t next_metrics_ns;
  int metrics_dirty; /* something changed since the last write */
  int metrics_err;   /* errno of the last failed write, 0 after a good one */
  struct lp_netwatch nw; /* RoCE interfaces (netwatch.h) */
  struct lp_idle_watch idle; /* answers moves for receivers NCCL is not calling */
  struct lp_event_ring ring;
  int stop_fd; /* eventfd: wakes the async threads to exit */
  int running;
  pthread_t control;
  int nasync;
  pthread_t async[LP_MAX_NICS];
  int async_nic[LP_MAX_NICS];
};

/* Start the threads once devices are known; idempotent.  0 or -1. */
int lp_health_start(void);
/* Stop and join every thread (finalize / unload). */
void lp_health_stop(void);

/* Tell the control thread something happened; never blocks. */
void lp_health_note(uint32_t type, int dev, int status, uint64_t comm_id, uint64_t arg);

static inline uint32_t lp_health_gen(struct lp_health *h) {
  return atomic_load_explicit(&h->gen, memory_order_acquire);
}
static inline int lp_health_ok(struct lp_health *h, int dev) {
  return atomic_load_explicit(&h->healthy[dev], memory_order_relaxed);
}
static inline int lp_health_link_up(struct lp_health *h, int dev) {
  return atomic_load_explicit(&h->link_up[dev], memory_order_relaxed);
}

#endif
