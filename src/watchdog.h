/*
 * The watchdog of one connection: work is outstanding and no completion
 * came for too long, so the path is black-holed (no event anywhere) and the
 * RC retries would take their whole budget to say so.
 *
 * A pure unit with its own timestamps.  The transport feeds it one way
 * (lp_watchdog_armed when a signaled WR goes out with none outstanding,
 * lp_watchdog_fed on every completion); failover asks it (lp_watchdog_check)
 * after each completion poll and acts on a stall.  It never calls anyone.
 */
#ifndef LP_WATCHDOG_H
#define LP_WATCHDOG_H

#include <stdint.h>

/* The limit grows at most this many times on stalls that follow moves for
 * stalls (see lp_watchdog_check). */
#define LP_WATCHDOG_BACKOFF_MAX 8

struct lp_watchdog {
  uint64_t limit_ns;      /* LINKPASS_WATCHDOG_MS; 0: off */
  uint64_t since_ns;      /* the oldest outstanding signaled work was posted then (or the watch restarted) */
  uint64_t last_cqe_ns;   /* the latest completion */
  uint64_t last_stall_ns; /* the latest stall it reported */
  int scale;              /* back-off: the limit is limit_ns x scale */
};

enum lp_watchdog_verdict {
  LP_WATCHDOG_OK = 0,
  LP_WATCHDOG_STALL,       /* move */
  LP_WATCHDOG_STALL_AGAIN, /* move, and the limit just doubled: every path may be slow */
};

static inline void lp_watchdog_init(struct lp_watchdog *w, uint64_t limit_ns, uint64_t now) {
  w->limit_ns = limit_ns;
  w->since_ns = w->last_cqe_ns = now;
  w->last_stall_ns = 0;
  w->scale = 1;
}

static inline int lp_watchdog_on(const struct lp_watchdog *w) { return w->limit_ns != 0; }

/* since_ns of work whose clock starts at the next check. */
#define LP_WATCHDOG_UNTIMED UINT64_MAX

/* A signaled WR went out while none was outstanding: its clock starts at
 * the next check (once a millisecond while NCCL calls: failover.c), not
 * here: a
 * post is on the critical path of every message, and reading the clock
 * there was a tenth of an 8-byte message's cost.  The last completion may
 * be long ago when NCCL left the comm alone, and that idle time is no
 * stall. */
static inline void lp_watchdog_armed(struct lp_watchdog *w) { w->since_ns = LP_WATCHDOG_UNTIMED; }

/* A completion arrived: the path moves. */
static inline void lp_watchdog_fed(struct lp_watchdog *w, uint64_t now) { w->last_cqe_ns = now; }

/* The current limit (with back-off). */
static inline uint64_t lp_watchdog_limit(const struct lp_watchdog *w) { return w->limit_ns * (uint64_t)w->scale; }

/* After a completion poll at `now` (read when the progress call began),
 * with `outstanding` non-zero when signaled work waits.  A stall soon after
 * the previous one says the new path is no faster, and maybe no NIC is
 * (congestion, a delay everywhere): moving again at the same limit would
 * loop for ever, so each such stall doubles the limit, up to
 * LP_WATCHDOG_BACKOFF_MAX times the setting (three doublings); a quiet spell
 * of ten limits resets it. */
static inline enum lp_watchdog_verdict lp_watchdog_check(struct lp_watchdog *w, uint64_t now, int outstanding) {
  if (w->since_ns == LP_WATCHDOG_UNTIMED) w->since_ns = now;
  uint64_t limit = lp_watchdog_limit(w);
  if (limit == 0 || !outstanding) w->since_ns = now; /* idle: nothing to wait for */
  uint64_t since = w->since_ns > w->last_cqe_ns ? w->since_ns : w->last_cqe_ns;
  /* Work posted after `now` was read (a move's replay) may set `since` later. */
  if (limit == 0 || !outstanding || now <= since || now - since <= limit) {
    if (w->scale > 1 && now - w->last_stall_ns > 10 * limit) w->scale = 1;
    return LP_WATCHDOG_OK;
  }
  enum lp_watchdog_verdict v = LP_WATCHDOG_STALL;
  if (w->last_stall_ns && now - w->last_stall_ns < 2 * limit + w->limit_ns && w->scale < LP_WATCHDOG_BACKOFF_MAX) {
    w->scale *= 2;
    v = LP_WATCHDOG_STALL_AGAIN;
  }
  w->last_stall_ns = now;
  w->since_ns = now;
  return v;
}

#endif
