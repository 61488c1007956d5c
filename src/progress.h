/*
 * One progress call on a connection: what every NCCL call that waits runs
 * (test, and isend / irecv when they cannot go ahead), and what the idle
 * watch runs for a comm NCCL is not calling.  It composes the layers in
 * order: the completion queue (comm.c, error completions handed to
 * failover), the move protocol's control channel and health (failover.c),
 * the watchdog, then posting what waits.
 */
#ifndef LP_PROGRESS_H
#define LP_PROGRESS_H

#include "comm.h"
#include "failover.h"
#include "transport.h"

/* test() is NCCL's spin loop, and a clock read there is not free: at 8
 * bytes, the read on every call was most of what linkpass added to the
 * reference plugin's latency (docs/PERFORMANCE.md, "The clock in
 * test()").  A call reads it only when it has timed work: a timed
 * message out (the transmit meter must see every gap), a move, news or a
 * chore (lp_fo_due), or every LP_CLOCK_EVERY_CALLS-th call for the looks
 * between moves, which are a millisecond apart and so come at most that
 * many calls late. */
#define LP_CLOCK_EVERY_CALLS 16

static inline int lp_comm_clock_due(struct lp_comm *c) {
  return c->metered > 0 || lp_fo_due(c) || ++c->calls_unclocked >= LP_CLOCK_EVERY_CALLS;
}

/* A progress call that reads the clock (progress.c). */
ncclResult_t lp_comm_progress_clocked(struct lp_comm *c);

/* Returns the comm's state: ncclSuccess, or its sticky error.  A failure
 * found anywhere in the call (a completion, a post, failover's own steps)
 * may end a move: lp_fo_settle says so to the peer.  Inline, as the
 * transport's poll: the call that reads no clock is what NCCL's spin loop
 * runs, and it had three calls' worth of prologues (docs/PERFORMANCE.md). */
static inline ncclResult_t lp_comm_progress(struct lp_comm *c) {
  if (c->error != ncclSuccess) return c->error;
  if (lp_comm_clock_due(c)) return lp_comm_progress_clocked(c);
  /* Nothing timed: completions, and what the sender can post.  Those taken
   * here feed the watchdog at the next call that reads the clock, at most
   * LP_CLOCK_EVERY_CALLS calls later: the completion that ends a wait is on
   * the critical path, and its limit is seconds. */
  int got, drained;
  ncclResult_t rc = lp_transport_poll(c, lp_fo_on_error, &got, &drained);
  c->fed_unclocked |= got > 0;
  if (rc == ncclSuccess) rc = lp_transport_advance(c, 0);
  return rc == ncclSuccess ? rc : lp_fo_settle(c, rc);
}

/* The look lp_comm_check_peer paces (progress.c). */
ncclResult_t lp_comm_look_for_peer(struct lp_comm *c);

/* Called right after lp_comm_progress when a request is waiting: notices
 * (rate-limited) that the peer closed the control socket, so a dead peer is
 * an error, not a hang.  Completions that arrived before it left still
 * count: they are drained first.  Inline: NCCL's spin loop comes here on
 * every test() of a request not done, and between looks it is two
 * comparisons. */
static inline ncclResult_t lp_comm_check_peer(struct lp_comm *c) {
  if (c->error != ncclSuccess) return c->error;
  if (c->peer_check_ns != 0 && c->progress_ns < c->peer_next_ns) return ncclSuccess;
  return lp_comm_look_for_peer(c);
}

#endif
