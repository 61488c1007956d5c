/*
 * One transport step on a connection: poll its completion queue, hand each
 * completion to its end (send.c or recv.c) and each error one to the layer
 * above, then let the end post what waits.  Above comm, send and recv, so
 * that none of them calls another in a circle.
 */
#ifndef LP_TRANSPORT_H
#define LP_TRANSPORT_H

#include <stdint.h>

#include "comm.h"

/* Act on one successful completion (send or receive side). */
ncclResult_t lp_transport_completion(struct lp_comm *comm, const struct ibv_wc *wc);
/* What the layer above does with an error completion: move, or fail. */
typedef ncclResult_t (*lp_wc_error_fn)(struct lp_comm *comm, const struct ibv_wc *wc);
/* Poll the CQ a bounded number of batches (test() must return promptly),
 * act on each successful completion and hand each error one to `on_error`.
 * *got: the completions taken (the caller feeds the watchdog with them).
 * *drained: the last poll found the CQ empty (every completion there was
 * is taken). */
ncclResult_t lp_transport_poll(struct lp_comm *comm, lp_wc_error_fn on_error, int *got, int *drained);
/* After the poll: post what waits (sender) or the probe (receiver).  `now`
 * 0: the call read no clock (progress.c), and the probe, a timed chore,
 * waits for a call that did. */
ncclResult_t lp_transport_advance(struct lp_comm *comm, uint64_t now);

#endif
