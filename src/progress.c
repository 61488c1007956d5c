/* One progress call on a connection (progress.h). */
#include "progress.h"

#include <string.h>

#include "clock.h"
#include "failover.h"
#include "transport.h"
#include "watchdog.h"

static ncclResult_t progress_clocked(struct lp_comm *c) {
  c->calls_unclocked = 0;
  uint64_t now = c->progress_ns = lp_now_ns();
  /* The NIC before the peer: a request the peer refused completes here
   * with its error before the peer's notice of the flushes that refusal
   * caused it can arrive over TCP, and must decide first (fail, not move). */
  int dev = c->link.dev, got, drained;
  ncclResult_t rc = lp_transport_poll(c, lp_fo_on_error, &got, &drained);
  if (got > 0 || c->fed_unclocked) lp_watchdog_fed(&c->wd, now);
  c->fed_unclocked = 0;
  /* Between the end of the last call and this one, with timed messages
   * out, nobody looked.  If every one of them has now completed, the port
   * may have finished them anywhere in that gap: the transmit meter must
   * not take the process's absence for the port's slowness, and leaves
   * the gap out.  If one is still out though the CQ holds no completion
   * more, the port was at work on it all along: the gap is the port's
   * time, as the time inside a call is. */
  if (c->progress_end_ns != 0 && now - c->progress_end_ns > LP_METER_GAP_NS && (c->metered == 0 || !drained))
    lp_health_tx_unwatched(c->health, dev, c->progress_end_ns, now);
  if (rc == ncclSuccess) rc = lp_fo_progress(c, now);
  if (rc == ncclSuccess) rc = lp_fo_watchdog(c, now);
  if (rc == ncclSuccess) rc = lp_transport_advance(c, now);
  /* A call takes a microsecond or two, against the meter's
   * LP_METER_GAP_NS: its start stands for its end, as it does for the
   * messages whose end its poll found (lp_send_completion): no second
   * read of the clock on the path of every large message. */
  c->progress_end_ns = c->metered > 0 ? now : 0;
  if (c->progress_end_ns != 0 && c->health != NULL) lp_health_tx_looked(c->health, dev, c->progress_end_ns);
  return rc;
}

ncclResult_t lp_comm_progress_clocked(struct lp_comm *c) {
  ncclResult_t rc = progress_clocked(c);
  return rc == ncclSuccess ? rc : lp_fo_settle(c, rc);
}

/* A peek at each control connection for a peer that is gone, while NCCL
 * waits on a request: every LP_PEER_LOOK_NS, or at once when the comm's own
 * reads found the connections closed (failover clears peer_check_ns).
 * Where those reads would see the peer go (the process's set reports an
 * end of file or a reset like data), the peek is only a safety net, once a
 * second: at 1,024 connections a direction the looks were 41,000 system
 * calls a second on NCCL's thread (docs/SCALE.md). */
#define LP_PEER_LOOK_NS 100000000ull        /* 100 ms */
#define LP_PEER_LOOK_HEARD_NS 1000000000ull /* 1 s */

ncclResult_t lp_comm_look_for_peer(struct lp_comm *c) {
  /* Where the comm's own reads would hear the peer go, the look waits for
   * LP_PEER_LOOK_HEARD_NS; whether they still would is asked again every
   * LP_PEER_LOOK_NS, not on every call (a connection given up leaves the
   * set, and the looks go back to LP_PEER_LOOK_NS). */
  uint64_t since = c->progress_ns - c->peer_check_ns;
  if (c->peer_check_ns != 0 && since < LP_PEER_LOOK_HEARD_NS && lp_fo_hears_peer(c)) {
    uint64_t ask = c->progress_ns + LP_PEER_LOOK_NS, look = c->peer_check_ns + LP_PEER_LOOK_HEARD_NS;
    c->peer_next_ns = ask < look ? ask : look;
    return ncclSuccess;
  }
  int err;
  int gone = lp_comm_peer_gone(c, &err);
  c->peer_next_ns = c->peer_check_ns + LP_PEER_LOOK_NS;
  if (!gone) return ncclSuccess;
  ncclResult_t rc = lp_comm_progress(c);
  if (rc != ncclSuccess) return rc;
  return lp_comm_fail(c, ncclRemoteError, "the control connection to the peer ended: %s", lp_ctl_err_str(err));
}
