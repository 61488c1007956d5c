/*
 * Moving a connection to another NIC without losing or repeating a message.
 *
 * The protocol (docs/FAILOVER.md has the full argument):
 *  1. Whoever sees the failure first stops using the old path (its QPs go
 *     to ERR, so nothing more lands through them).  The receiver tells the
 *     sender (NOTICE); the sender builds QPs on a healthy NIC and asks the
 *     receiver to move (REQ), all over the out-of-band TCP socket.
 *  2. The receiver stops its old QPs too and drains their completions, so
 *     it knows exactly which messages it has completed: all below
 *     resume_seq (completion is in order, see recv.c).  It builds its new
 *     QPs, re-posts the receives of every message it still waits for, and
 *     answers (ACK) with resume_seq and those messages' CTS entries, keyed
 *     for its new NIC.
 *  3. The sender completes every message below resume_seq (delivered, even
 *     if the acknowledgement was lost), and writes every message from
 *     resume_seq on again, whole, on the new QPs.  A message is never
 *     rewritten once the receiver has completed it, and always rewritten
 *     whole when it has not, so each isend and irecv completes exactly once
 *     with the right bytes even after a partial write.
 *
 * Failback is the same move with reason "failback", towards the primary NIC.
 */
#ifndef LP_FAILOVER_H
#define LP_FAILOVER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "fo_wire.h"
#include "nic.h"
#include "linkpass/nccl_net.h"

struct lp_comm;
struct ibv_wc;

/* A move whose REQ goes unanswered is offered again on another NIC, this
 * many times in all; then the peer is taken for gone. */
#define LP_FO_MAX_ATTEMPTS 3
/* The watchdog's limit grows at most this many times on stalls that follow
 * moves for stalls (failover.c lp_fo_watchdog). */
#define LP_WATCHDOG_BACKOFF_MAX 8

enum lp_fo_state {
  LP_FO_IDLE = 0,
  LP_FO_NOTICED,   /* receiver: told the sender, waiting for its REQ */
  LP_FO_REQUESTED, /* sender: REQ sent, waiting for the ACK */
  LP_FO_AWAIT_READY, /* receiver: ACK sent, waiting for READY before writing to the new QPs */
};

/* Counters for the metrics file (health.c writes it).  Moves are counted
 * by the proxy threads in report(), port changes by the control thread:
 * relaxed atomics, no locks.  Owned by the plugin context. */
struct lp_fo_dev_stats {
  _Atomic uint64_t failovers;         /* connection ends that left the device because of a failure */
  _Atomic uint64_t failbacks;         /* connection ends that came back to it */
  _Atomic uint64_t flaps;             /* times it went down */
  _Atomic uint64_t degraded_ns;       /* finished periods of not being usable */
  _Atomic uint64_t degraded_since_ns; /* start of the current period, 0 while usable */
};

struct lp_fo_stats {
  _Atomic uint64_t failovers, failbacks, paths_lost, replayed, replayed_bytes;
  _Atomic uint64_t last_failover_ns; /* the latest failover, from the fault being seen to traffic flowing */
  struct lp_fo_dev_stats dev[LP_MAX_DEVS];
};

struct lp_fo {
  int enabled;
  int state;
  uint32_t epoch;
  int reason;
  uint64_t start_ns;
  uint64_t deadline_ns; /* sender: the receiver must answer the REQ by then (LINKPASS_MOVE_TIMEOUT_MS) */
  int attempts;         /* REQs sent for this fault; LP_FO_MAX_ATTEMPTS unanswered ones lose the path */
  int from_dev;     /* where the connection was when this move began */
  int inflight;     /* requests outstanding when it began */
  uint32_t seen_gen;
  int primary_dev;
  int peer_primary_ok; /* sender: the receiver's primary NIC can be used */
  int peer_closed;     /* the control channel reached end of file */
  uint64_t next_read_ns; /* when to look at the control channel again */
  uint64_t watch_since_ns, last_cqe_ns; /* watchdog: work outstanding since, last completion */
  uint64_t last_stall_ns; /* watchdog: when it last moved the connection */
  int wd_scale;           /* watchdog: its limit is LINKPASS_WATCHDOG_MS x this (back-off) */
  /* Control channel. */
  size_t rx_off;
  size_t tx_len, tx_off;
  uint8_t rx[LP_FO_MSG_MAX];
  uint8_t tx[2 * LP_FO_MSG_MAX];
};

/* Set up once the connection is established on its primary device. */
void lp_fo_init(struct lp_comm *c);
/* Release what the connection holds in the shared tables (close). */
void lp_fo_fini(struct lp_comm *c);
/* Control channel and health changes; called on every progress with the
 * time it started. */
ncclResult_t lp_fo_progress(struct lp_comm *c, uint64_t now);
/* The watchdog; called on every progress after the completion queue. */
ncclResult_t lp_fo_watchdog(struct lp_comm *c, uint64_t now);
/* An error completion: move (returns ncclSuccess) or fail the connection. */
ncclResult_t lp_fo_on_error(struct lp_comm *c, const struct ibv_wc *wc);
/* A move is in progress: new work must wait (NULL request). */
static inline int lp_fo_busy(const struct lp_fo *fo) { return fo->state != LP_FO_IDLE; }

#endif
