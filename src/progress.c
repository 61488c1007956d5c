/* One progress call on a connection (progress.h). */
#include "progress.h"

#include <string.h>

#include "clock.h"
#include "failover.h"
#include "transport.h"

ncclResult_t lp_comm_progress(struct lp_comm *c) {
  if (c->error != ncclSuccess) return c->error;
  uint64_t now = c->progress_ns = lp_now_ns();
  /* The NIC before the peer: a request the peer refused completes here
   * with its error before the peer's notice of the flushes that refusal
   * caused it can arrive over TCP, and must decide first (fail, not move). */
  ncclResult_t rc = lp_transport_poll(c, now, lp_fo_on_error);
  if (rc == ncclSuccess) rc = lp_fo_progress(c, now);
  if (rc == ncclSuccess) rc = lp_fo_watchdog(c, now);
  if (rc == ncclSuccess) rc = lp_transport_advance(c, now);
  return rc;
}

ncclResult_t lp_comm_check_peer(struct lp_comm *c) {
  if (c->error != ncclSuccess) return c->error;
  int err;
  if (!lp_comm_peer_gone(c, &err)) return ncclSuccess;
  ncclResult_t rc = lp_comm_progress(c);
  if (rc != ncclSuccess) return rc;
  return lp_comm_fail(c, ncclRemoteError, "the peer closed the connection (%s)",
                      err == 0 ? "its process exited or it closed its comm" : strerror(-err));
}
