/* One progress call on a connection (progress.h). */
#include "progress.h"

#include <string.h>

#include "clock.h"
#include "failover.h"
#include "transport.h"

ncclResult_t lp_comm_progress(struct lp_comm *c) {
  if (c->error != ncclSuccess) return c->error;
  uint64_t now = c->progress_ns = lp_now_ns();
  /* Between the end of the last call and this one, with timed messages
   * out, nobody looked: the transmit meter must not take the process's
   * absence for the port's slowness (the time inside a call is the
   * port's: a completion found there was found at once). */
  int timed = c->kind == LP_COMM_SEND && ((struct lp_send_comm *)c)->metered > 0;
  if (timed && c->progress_end_ns != 0 && now - c->progress_end_ns > LP_METER_GAP_NS)
    lp_health_tx_unwatched(c->health, c->link.dev, c->progress_end_ns, now);
  /* The NIC before the peer: a request the peer refused completes here
   * with its error before the peer's notice of the flushes that refusal
   * caused it can arrive over TCP, and must decide first (fail, not move). */
  ncclResult_t rc = lp_transport_poll(c, now, lp_fo_on_error);
  if (rc == ncclSuccess) rc = lp_fo_progress(c, now);
  if (rc == ncclSuccess) rc = lp_fo_watchdog(c, now);
  if (rc == ncclSuccess) rc = lp_transport_advance(c, now);
  c->progress_end_ns = c->kind == LP_COMM_SEND && ((struct lp_send_comm *)c)->metered > 0 ? lp_now_ns() : 0;
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
