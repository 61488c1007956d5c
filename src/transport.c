/* One transport step on a connection (transport.h). */
#include "transport.h"
#include "recv.h"
#include "send.h"

ncclResult_t lp_transport_completion(struct lp_comm *comm, const struct ibv_wc *wc) {
  return comm->kind == LP_COMM_SEND ? lp_send_completion((struct lp_send_comm *)comm, wc)
                                    : lp_recv_completion((struct lp_recv_comm *)comm, wc);
}

ncclResult_t lp_transport_poll(struct lp_comm *comm, lp_wc_error_fn on_error, int *got, int *drained) {
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

ncclResult_t lp_transport_advance(struct lp_comm *comm, uint64_t now) {
  if (comm->error != ncclSuccess) return comm->error;
  if (comm->kind == LP_COMM_SEND) return lp_send_progress((struct lp_send_comm *)comm);
  return now != 0 ? lp_recv_probe((struct lp_recv_comm *)comm, now) : ncclSuccess;
}
