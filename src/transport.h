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
#include "recv.h"
#include "send.h"

/* Act on one successful completion (send or receive side). */
ncclResult_t lp_transport_completion(struct lp_comm *comm, const struct ibv_wc *wc);
/* What the layer above does with an error completion: move, or fail. */
typedef ncclResult_t (*lp_wc_error_fn)(struct lp_comm *comm, const struct ibv_wc *wc);
/* Poll the CQ a bounded number of batches (test() must return promptly),
 * act on each successful completion and hand each error one to `on_error`.
 * *got: the completions taken (the caller feeds the watchdog with them).
 * *drained: the last poll found the CQ empty (every completion there was
 * is taken).  Inline: NCCL's spin loop, test(), is made of it
 * (progress.h). */
static inline __attribute__((always_inline)) ncclResult_t lp_transport_poll(struct lp_comm *comm,
                                                                            lp_wc_error_fn on_error, int *got,
                                                                            int *drained) {
  struct ibv_wc wcs[LP_POLL_BATCH];
  *got = 0;
  *drained = 0;
  for (int iter = 0; iter < 4; iter++) {
    int n = ibv_poll_cq(comm->link.cq, LP_POLL_BATCH, wcs);
    if (n < 0) return lp_comm_fail(comm, ncclSystemError, "ibv_poll_cq failed (%d)", n);
    *got += n;
    for (int i = 0; i < n; i++) {
      if (lp_wrid_kind(wcs[i].wr_id) == LP_WR_RECV) comm->link.rq_owed--; /* delivered or flushed */
      /* An error: later completions of its QP are flushes caused by it. */
      ncclResult_t rc =
          wcs[i].status == IBV_WC_SUCCESS ? lp_transport_completion(comm, &wcs[i]) : on_error(comm, &wcs[i]);
      if (rc != ncclSuccess) return rc;
    }
    if (n < LP_POLL_BATCH) {
      *drained = 1;
      break;
    }
  }
  return ncclSuccess;
}

/* After the poll: post what waits (sender) or the probe (receiver).  `now`
 * 0: the call read no clock (progress.c), and the probe, a timed chore,
 * waits for a call that did. */
static inline ncclResult_t lp_transport_advance(struct lp_comm *comm, uint64_t now) {
  if (comm->error != ncclSuccess) return comm->error;
  if (comm->kind == LP_COMM_SEND) return lp_send_progress((struct lp_send_comm *)comm);
  return now != 0 ? lp_recv_probe((struct lp_recv_comm *)comm, now) : ncclSuccess;
}

#endif
