/* Moving a connection between NICs: detection on the connection's own
 * progress path, the control-channel exchange, and the exactly-once
 * reconciliation of both ends (see failover.h for the protocol). */
#include "failover.h"

#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "comm.h"
#include "reconcile.h"
#include "send.h"
#include "transport.h"
#include "health.h"
#include "clock.h"
#include "log.h"
#include "report.h"
#include "sock.h"

#define LP_FO_READ_EVERY_NS 1000000ull     /* 1 ms */
#define LP_FO_READ_ANYWAY_NS 1000000000ull /* 1 s: a read whatever the set says */
/* A standby is offered again this long after a move (the other moves of a
 * sweep come first), or after an offer that found no device or no answer. */
#define LP_SB_AFTER_MOVE_NS 100000000ull  /* 100 ms */
#define LP_SB_RETRY_NS 1000000000ull      /* 1 s */
#define LP_SB_RETRY_MAX_NS 32000000000ull /* 32 s: five doublings */
#define LP_SB_PACE_NS 2000000ull          /* 2 ms between two pieces of such work in a process */
#define LP_SWEEP_QUIET_NS 100000000ull    /* 100 ms without a move before paced work resumes (set_state) */
#define LP_SB_ANSWER_NS 10000000000ull    /* 10 s: a standby offer not answered by then is made again */

static const char *dev_name(const struct lp_comm *c, int dev) { return c->env->devs[dev].name; }
static int dev_port(const struct lp_comm *c, int dev) { return c->env->devs[dev].port; }

/* Every state change goes through here: the transport holds new work
 * while a move is agreed.  A move that starts or ends also holds back the
 * process's paced work (standbys built, old paths destroyed) for
 * LP_SWEEP_QUIET_NS: in a sweep the ends of one process learn of the fault
 * one after another (a peer's ends only as its messages arrive), so the
 * count of moves under way alone drops to 0 between them, and the paced
 * work took a third of the thread the rest of the sweep needed.  Not for
 * failbacks: they wait for the paced work (a standby on the primary).
 * Every move, failbacks too, also counts in the sweep whose event lines
 * after its first LP_SWEEP_EARLY_LINES wait for its end (lp_health_sweep_over,
 * lp_report_emit). */
static void set_state(struct lp_comm *c, enum lp_fo_state st) {
  int was_idle = c->fo->state == LP_FO_IDLE, idle = st == LP_FO_IDLE;
  if (was_idle != idle) {
    uint64_t now = lp_now_ns();
    lp_health_moving_add(c->health, idle ? -1 : 1);
    lp_health_sweep_seen(c->health, now, LP_SWEEP_QUIET_NS);
    if (c->fo->reason != LP_FO_FAILBACK) lp_health_paced_after(c->health, now + LP_SWEEP_QUIET_NS);
  }
  c->fo->state = st;
  c->paused = !idle;
}

/* ---- control channel ---- */

static ncclResult_t flush_tx(struct lp_comm *c) {
  int rc = lp_ctl_flush(&c->ctl, c->peer);
  if (rc < 0) return lp_comm_fail(c, ncclRemoteError, "control channel to the peer failed: %s", lp_ctl_err_str(rc));
  return ncclSuccess;
}

static ncclResult_t send_msg(struct lp_comm *c, void *msg, size_t len) {
  int rc = lp_ctl_send(&c->ctl, c->peer, msg, len);
  if (rc < 0) return lp_comm_fail(c, ncclRemoteError, "control channel to the peer failed: %s", lp_ctl_err_str(rc));
  return ncclSuccess;
}

static void hdr(struct lp_msg_hdr *h, int type, size_t len) { lp_msg_hdr_init(h, (enum lp_msg_type)type, len); }

static ncclResult_t send_notice(struct lp_comm *c, int reason, int failed_dev) {
  struct lp_fo_notice n;
  memset(&n, 0, sizeof(n));
  hdr(&n.hdr, LP_MSG_FO_NOTICE, sizeof(n));
  n.conn_id = c->conn_id;
  n.epoch = c->fo->epoch;
  n.reason = (uint32_t)reason;
  n.failed_rail = failed_dev;
  n.reserved = failed_dev == c->fo->primary_dev; /* the notifier's primary is the one that failed */
  return send_msg(c, &n, sizeof(n));
}

static ncclResult_t send_ready(struct lp_comm *c) {
  struct lp_fo_ready m;
  memset(&m, 0, sizeof(m));
  hdr(&m.hdr, LP_MSG_FO_READY, sizeof(m));
  m.conn_id = c->conn_id;
  m.epoch = c->fo->epoch;
  return send_msg(c, &m, sizeof(m));
}

static ncclResult_t send_nack(struct lp_comm *c, int reason, enum lp_fo_nack_cause cause) {
  struct lp_fo_nack n;
  memset(&n, 0, sizeof(n));
  hdr(&n.hdr, LP_MSG_FO_NACK, sizeof(n));
  n.conn_id = c->conn_id;
  n.epoch = c->fo->epoch;
  n.reason = (uint32_t)reason;
  n.cause = cause;
  return send_msg(c, &n, sizeof(n));
}

/* The receiver's end failed while answering a move (`rc`, already
 * reported): refuse, so that the sender fails at once instead of waiting
 * for the move's deadline on every NIC in turn. */
static ncclResult_t refuse_failed(struct lp_comm *c, int reason, ncclResult_t rc) {
  send_nack(c, reason, LP_NACK_FAILED);
  set_state(c, LP_FO_IDLE); /* said: settle() has nothing more to say */
  return rc;
}

/* A move that ended in the comm's failure is told to the peer, which would
 * otherwise wait for it (the receiver has no deadline: the side that finds
 * out says so), and the comm no longer counts as moving (the process's
 * chores and a sweep's end wait for every move to end).  Every progress
 * call ends here (progress.c), wherever the failure was found. */
ncclResult_t lp_fo_settle(struct lp_comm *c, ncclResult_t rc) {
  struct lp_fo *fo = c->fo;
  if (rc == ncclSuccess || fo == NULL || fo->state == LP_FO_IDLE) return rc;
  send_nack(c, fo->reason, LP_NACK_FAILED);
  (void)lp_ctl_flush(&c->ctl, c->peer); /* NCCL may close the comm next */
  set_state(c, LP_FO_IDLE);
  return rc;
}

/* ---- shared steps ---- */

static int outstanding_requests(struct lp_comm *c) {
  int n = 0, nreqs;
  const struct lp_req *reqs = lp_comm_reqs(c, &nreqs);
  for (int i = 0; i < nreqs; i++) n += reqs[i].used && !reqs[i].done;
  return n;
}

/* Stop a path: once its QPs are in ERR nothing more lands through
 * them, on either side.  A NIC that reported a fatal error stopped them
 * itself and refuses every command since: nothing to do.  When the move
 * came from its flushed completions before its DEVICE_FATAL event was
 * read, its QPs answer EIO: said once, at INFO, not warned about one by
 * one (thousands on a busy node); EIO from a NIC not in fatal error is a
 * failing firmware command, and the other QPs are still asked. */
static void stop_link(struct lp_comm *c, struct lp_link *link) {
  if (c->health != NULL && lp_health_nic_fatal(c->health, lp_link_dev(link)->nic)) return;
  const struct lp_ibv *ibv = &link->env->ibv;
  int refused = 0;
  for (int q = 0; q < link->nqps; q++) {
    if (link->qps[q] == NULL) continue;
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_ERR;
    /* A NIC refuses this firmware command only when it is broken, and a
     * broken NIC writes nothing more either; said, since a QP left in RTS
     * would break the premise. */
    int err = ibv->modify_qp(link->qps[q], &a, IBV_QP_STATE);
    if (err == EIO)
      refused++;
    else if (err != 0)
      LP_WARN(
          "cannot stop queue pair %u on %s (ibv_modify_qp to ERR: %s): the move goes on, counting on its NIC to "
          "write nothing more",
          link->qps[q]->qp_num, link->local.dev_name, strerror(err));
  }
  if (refused > 0)
    LP_INFO(NCCL_NET,
            "%s refused to stop %d queue pair(s) of connection 0x%llx (EIO: a NIC in fatal error, or a failing "
            "firmware command): the move goes on, counting on it to write nothing more",
            link->local.dev_name, refused, (unsigned long long)c->conn_id);
}

static void quiesce(struct lp_comm *c) { stop_link(c, &c->link); }

/* Errors a path causes, which another NIC may not have.  Protection and
 * access errors (a bad key, a buffer outside its registration, an
 * operation the peer refuses) come from the request itself: they repeat on
 * every NIC, and moving on them would loop for ever. */
static int path_failure(enum ibv_wc_status st) {
  switch (st) {
  case IBV_WC_LOC_LEN_ERR:
  case IBV_WC_LOC_PROT_ERR:
  case IBV_WC_MW_BIND_ERR:
  case IBV_WC_REM_INV_REQ_ERR:
  case IBV_WC_REM_ACCESS_ERR:
  case IBV_WC_REM_OP_ERR:
  case IBV_WC_LOC_ACCESS_ERR:
  case IBV_WC_INV_EECN_ERR:
  case IBV_WC_INV_EEC_STATE_ERR: return 0;
  default: /* retries exhausted, flushes, fatal and general errors, a bad response */ return 1;
  }
}

/* "completion error on mlx5_0 qp 0x2001: transport retry counter exceeded
 * (status 12, vendor error 0x81, wr kind 2)": the error as the NIC gave it. */
static const char *wc_desc(const struct lp_comm *c, const struct ibv_wc *wc, char *buf, size_t len) {
  snprintf(buf, len, "completion error on %s qp 0x%x: %s (status %d, vendor error 0x%x, wr kind %d)",
           c->link.local.dev_name, wc->qp_num, lp_ibv_wc_status(&c->env->ibv, wc->status), (int)wc->status,
           wc->vendor_err, (int)lp_wrid_kind(wc->wr_id));
  return buf;
}

/* An error completion that is not the path's: fail, moving or not. */
static ncclResult_t fail_not_path(struct lp_comm *c, const struct ibv_wc *wc) {
  char what[256];
  return lp_comm_fail(c, ncclSystemError,
                      "%s: not a path failure (every NIC would refuse the request the same way), so the "
                      "connection does not move and fails: check the buffers and their registrations",
                      wc_desc(c, wc, what, sizeof(what)));
}

#define LP_DRAIN_WAIT_NS (100ull * LP_NS_PER_MS)

/* Act on every successful completion the old path produced before it
 * stopped; its path errors and flushes mean nothing any more.  A receiver
 * waits until every receive WR it posted there has completed, delivered or
 * flushed (a QP in the error state completes each one): a NIC writes the
 * flushes after the state change returns, and a delivery that raced with
 * it may come among them; stopping at the first empty poll could leave it
 * behind and name a resume_seq before a message that in fact arrived.
 * Bounded: a NIC that flushes nothing within LP_DRAIN_WAIT_NS is warned
 * about and the move goes on. */
static ncclResult_t drain(struct lp_comm *c) {
  struct ibv_wc wcs[LP_POLL_BATCH];
  uint64_t deadline = 0;
  for (;;) {
    int n = ibv_poll_cq(c->link.cq, LP_POLL_BATCH, wcs);
    if (n < 0) return lp_comm_fail(c, ncclSystemError, "ibv_poll_cq failed (%d) while draining the old path", n);
    if (n == 0) {
      if (c->link.rq_owed <= 0) return ncclSuccess;
      uint64_t now = lp_now_ns();
      if (deadline == 0) deadline = now + LP_DRAIN_WAIT_NS;
      if (now >= deadline) {
        LP_WARN(
            "connection from %s: %d receives on %s were neither delivered nor flushed within %llu ms of "
            "stopping the old path; the move goes on without them",
            c->peer, c->link.rq_owed, c->link.local.dev_name, (unsigned long long)(LP_DRAIN_WAIT_NS / LP_NS_PER_MS));
        return ncclSuccess;
      }
      sched_yield();
      continue;
    }
    for (int i = 0; i < n; i++) {
      if (lp_wrid_kind(wcs[i].wr_id) == LP_WR_RECV) c->link.rq_owed--;
      if (wcs[i].status != IBV_WC_SUCCESS) {
        /* An access error is no flush even now: the peer refused a request
         * (its end may have started this move on the flushes that caused). */
        if (!path_failure(wcs[i].status)) return fail_not_path(c, &wcs[i]);
        continue;
      }
      ncclResult_t rc = lp_transport_completion(c, &wcs[i]);
      if (rc != ncclSuccess) return rc;
    }
  }
}

/* Into the first free slot of fo->retired; with none free, the link in
 * the first slot is destroyed now to make room. */
static void retire(struct lp_fo *fo, struct lp_link *l) {
  int i = 0;
  while (i < LP_FO_RETIRED && fo->retired[i].env != NULL) i++;
  if (i == LP_FO_RETIRED) {
    i = 0;
    lp_link_close(&fo->retired[0]);
  }
  fo->retired[i] = *l;
  memset(l, 0, sizeof(*l));
  fo->chores = 1;
}

/* The standby goes with the path it stood by: destroyed later, as it. */
static void drop_standby(struct lp_comm *c) {
  struct lp_link l;
  lp_sb_set_aside(c, &c->fo->sb, &l);
  if (l.env != NULL) retire(c->fo, &l);
}

/* The new path replaces the old one (each link counts on its device from
 * open to close: link.h). */
static void swap_link(struct lp_comm *c, struct lp_link *next) {
  struct lp_fo *fo = c->fo;
  /* Destroying QPs costs about a millisecond each on a ConnectX: the old
   * path is destroyed later, off the critical path of a sweep (tidy()).
   * It stops counting on its device now.  The primary's path is kept
   * instead, for the failback (fo->home); one back there by another way
   * (a standby) no longer needs it. */
  lp_link_uncount(&c->link);
  if (next->dev == fo->primary_dev && fo->home.env != NULL) retire(fo, &fo->home);
  if (c->link.dev == fo->primary_dev && fo->home.env == NULL)
    fo->home = c->link;
  else
    retire(fo, &c->link);
  c->link = *next;
  memset(next, 0, sizeof(*next));
  fo->sb.next_ns = lp_now_ns() + LP_SB_AFTER_MOVE_NS;
}

/* Where this connection goes (health.h): its primary's pool. */
static int choose_dev(const struct lp_comm *c, int prefer, int avoid) {
  return lp_health_choose(c->health, lp_comm_dir(c), c->fo->primary_dev, prefer, avoid, c->mr_nics);
}

/* `dev`'s NIC could not take this move's path (no QPs, or they would not
 * connect): the move does not offer it again, or a fault that repeats
 * there would have the two ends rebuild paths on it for ever. */
static void nic_failed(struct lp_comm *c, int dev) { c->fo->failed_nics |= 1u << c->env->devs[dev].nic; }

/* A path on `dev`: the one a move left there (the primary's), revived,
 * or else a new one. */
static ncclResult_t open_on(struct lp_comm *c, struct lp_link *next, int dev, int nqps) {
  struct lp_fo *fo = c->fo;
  if (fo->home.env != NULL && fo->home.dev == dev) {
    *next = fo->home;
    memset(&fo->home, 0, sizeof(fo->home));
    if (next->nqps == nqps && lp_link_revive(next, c->health) == ncclSuccess) {
      fo->via_home = 1;
      return ncclSuccess;
    }
    lp_link_close(next);
  }
  return lp_comm_link_open(next, c, dev, nqps, lp_comm_ctrl_remote_off(c));
}

/* A new path for this connection on the device it claims: the claim counts
 * from the choice until the link counts itself, so the moves of one sweep,
 * on any thread, spread over the pool instead of all taking the device that
 * was least loaded before any of them chose.  -1: no device left. */
static int open_claimed(struct lp_comm *c, struct lp_link *next, int prefer, int avoid, int nqps,
                        ncclResult_t *opened) {
  enum lp_dir dir = lp_comm_dir(c);
  int dev = lp_health_claim(c->health, dir, c->fo->primary_dev, prefer, avoid, c->mr_nics & ~c->fo->failed_nics);
  if (dev < 0) return -1;
  *opened = open_on(c, next, dev, nqps);
  lp_health_load_add(c->health, dir, dev, -1);
  return dev;
}

/* The event line, and the counters of the metrics file: the only place
 * that counts moves. */
static void report(struct lp_comm *c, int kind, int new_dev, int replayed, uint64_t bytes) {
  struct lp_fo *fo = c->fo;
  uint64_t took_ns = lp_now_ns() - fo->start_ns;
  struct lp_report r = {.kind = (enum lp_report_kind)kind,
                        .comm = c->conn_id,
                        .dir = c->kind == LP_COMM_SEND ? "send" : "recv",
                        .dev = dev_name(c, fo->from_dev),
                        .port = dev_port(c, fo->from_dev),
                        .new_dev = new_dev >= 0 ? dev_name(c, new_dev) : NULL,
                        .new_port = new_dev >= 0 ? dev_port(c, new_dev) : 0,
                        .peer = c->peer_id,
                        .reason = lp_fo_reason_str(fo->reason),
                        .inflight = fo->inflight,
                        .replayed = replayed,
                        .replayed_bytes = bytes,
                        .duration_us = took_ns / 1000,
                        .path = kind == LP_REPORT_PATH_LOST ? NULL
                                : fo->via_standby           ? "standby"
                                : fo->via_home              ? "revived"
                                                            : "new",
                        .at_us = lp_wall_us()};
  /* A lost path goes out at once: it may end the job. */
  if (lp_report_emit(&c->env->syslog, &r, kind != LP_REPORT_PATH_LOST)) lp_health_lines_held(c->health);
  struct lp_fo_stats *st = &c->health->stats;
  const memory_order rx = memory_order_relaxed;
  if (kind == LP_REPORT_FAILOVER) {
    atomic_fetch_add_explicit(&st->failovers, 1, rx);
    atomic_fetch_add_explicit(&st->dev[fo->from_dev].failovers, 1, rx); /* counted where it left */
    atomic_store_explicit(&st->last_failover_ns, took_ns, rx);
  } else if (kind == LP_REPORT_FAILBACK) {
    atomic_fetch_add_explicit(&st->failbacks, 1, rx);
    atomic_fetch_add_explicit(&st->dev[new_dev].failbacks, 1, rx); /* counted where it came back */
  } else {
    atomic_fetch_add_explicit(&st->paths_lost, 1, rx);
  }
  atomic_fetch_add_explicit(&st->replayed, (uint64_t)replayed, rx);
  atomic_fetch_add_explicit(&st->replayed_bytes, bytes, rx);
}

static ncclResult_t path_lost(struct lp_comm *c, const char *why) {
  set_state(c, LP_FO_IDLE);
  report(c, LP_REPORT_PATH_LOST, -1, 0, 0);
  return lp_comm_fail(c, ncclRemoteError, "no healthy path to the peer remains (%s): the connection fails", why);
}

/* A move found nowhere to go on this side: the peer hears why (NICs that
 * failed this move are more than "none healthy"), and the path is lost.
 * A healthy NIC left out only because the connection's buffers are not
 * registered there (mr_nics) is said as such: "no healthy NIC" would send
 * the operator looking for a hardware fault that is not there. */
static ncclResult_t nowhere_left(struct lp_comm *c, int reason, int avoid) {
  int failed = c->fo->failed_nics != 0;
  send_nack(c, reason, failed ? LP_NACK_FAILED : LP_NACK_NO_NIC);
  if (failed) return path_lost(c, "no NIC on this side could take the connection (the WARNs before say why)");
  if (lp_health_choose(c->health, lp_comm_dir(c), c->fo->primary_dev, -1, avoid, ~c->mr_nics) >= 0)
    return path_lost(c,
                     "the healthy NICs left on this side hold no registration of buffers the connection has used: "
                     "NCCL registered them where those NICs could not take them, the WARNs at registration say why");
  return path_lost(c, "no healthy NIC on this side");
}

/* A fault its port did not report: the device becomes suspect, so that
 * nothing moves back onto a black hole until it has been quiet for a
 * hold-down (health.h).  Either end may be at fault; both ends say so. */
static int silent(int reason) {
  return reason == LP_FO_STALL || reason == LP_FO_COMPLETION_ERR || reason == LP_FO_QP_FATAL;
}

static void begin(struct lp_comm *c, int reason) {
  struct lp_fo *fo = c->fo;
  if (fo->state == LP_FO_IDLE) {
    if (silent(reason) && lp_health_ok(c->health, c->link.dev))
      lp_health_silent_fault(c->health, c->link.dev, reason, c->conn_id);
    if (reason != LP_FO_DEGRADED && reason != LP_FO_FAILBACK) lp_health_left_for_fault(c->health, c->link.dev);
    fo->start_ns = lp_now_ns();
    fo->from_dev = c->link.dev;
    fo->inflight = outstanding_requests(c);
    fo->reason = reason;
    fo->attempts = 0;
    fo->via_standby = 0;
    fo->via_home = 0;
    fo->failed_nics = 0;
  }
}

/* ---- sender ---- */

/* Ask the receiver to move: onto the standby `standby` both ends hold, or
 * (0) onto a new path, whose link is `link`. */
static ncclResult_t request(struct lp_comm *c, int reason, int avoid_rail, int rail, uint32_t standby,
                            const struct lp_link_info *link) {
  struct lp_fo *fo = c->fo;
  struct lp_fo_req m;
  memset(&m, 0, sizeof(m));
  hdr(&m.hdr, LP_MSG_FO_REQ, sizeof(m));
  m.conn_id = c->conn_id;
  m.epoch = fo->epoch;
  m.reason = (uint32_t)reason;
  m.rail = rail;
  m.avoid_rail = avoid_rail;
  m.standby = standby;
  m.link = *link;
  set_state(c, LP_FO_REQUESTED);
  fo->attempts++;
  fo->deadline_ns = lp_now_ns() + c->env->cfg.ns.move_timeout_ns;
  return send_msg(c, &m, sizeof(m));
}

/* Start (or restart) a move: onto the standby path when it is usable,
 * else new QPs on a chosen device; REQ to the peer. */
static ncclResult_t sender_start(struct lp_send_comm *s, int reason, int avoid_rail) {
  struct lp_comm *c = &s->base;
  struct lp_fo *fo = c->fo;
  begin(c, reason);
  if (fo->state == LP_FO_REQUESTED) { /* the offer is void: a newer one follows */
    if (fo->via_home && fo->home.env == NULL) {
      /* The primary's path, revived for this offer: kept, not destroyed,
       * so that the next try (a failback's goes back to the primary) or
       * the next failback revives it again; the revival resets its QPs,
       * whatever state this offer left them in. */
      lp_link_uncount(&fo->next);
      fo->home = fo->next;
      memset(&fo->next, 0, sizeof(fo->next));
    } else {
      lp_link_close(&fo->next);
    }
    fo->via_home = 0; /* what the newer offer's path is, it says (open_on) */
  }
  fo->epoch++;
  quiesce(c);
  int failback = reason == LP_FO_FAILBACK;
  int avoid = failback ? -1 : c->link.dev;
  int prefer = failback ? fo->primary_dev : -1;
  if (!failback && lp_sb_usable(c, &fo->sb, avoid))
    return request(c, reason, avoid_rail, fo->sb.link.dev, fo->sb.id, &fo->sb.link.local);
  drop_standby(c); /* it stood by the path being left: the peer drops its side at this REQ */
  for (int tries = 0; tries < LP_MAX_DEVS; tries++) {
    /* The offer counts on its device from now, not only once the peer answers. */
    ncclResult_t opened;
    int dev = open_claimed(c, &fo->next, prefer, avoid, c->link.nqps, &opened);
    if (dev < 0) break;
    if (opened == ncclSuccess) return request(c, reason, avoid_rail, failback ? -1 : dev, 0, &fo->next.local);
    prefer = -1;
    nic_failed(c, dev); /* could not build there: try the next one */
  }
  return nowhere_left(c, reason, avoid);
}

static ncclResult_t sender_on_ack(struct lp_send_comm *s, const struct lp_fo_ack *a) {
  struct lp_comm *c = &s->base;
  struct lp_fo *fo = c->fo;
  if (lp_fo_take_primary_word(a, &fo->peer_primary_ok)) fo->seen_gen--;          /* check_health looks once idle */
  if (fo->state != LP_FO_REQUESTED || a->epoch != fo->epoch) return ncclSuccess; /* superseded */
  ncclResult_t rc;
  if (a->refused) { /* the receiver no longer holds the standby: a new path, as without one */
    LP_WARN(
        "send connection to %s: its standby path is gone at the peer (its NIC failed there): moving onto a "
        "new path",
        c->peer);
    lp_sb_drop(c, &fo->sb);
    return sender_start(s, fo->reason, -1);
  }
  if (a->standby != 0 && (fo->sb.state != LP_SB_READY || a->standby != fo->sb.id))
    return lp_comm_fail(c, ncclRemoteError, "the peer moved onto standby path %u, which this end does not hold",
                        a->standby);
  /* A buffer NCCL registered for this connection since the offer, which
   * the offer's NIC could not take (a dma-buf on a NIC without dma-buf
   * support, say: mr_nics; isend waits while the comm is paused): its
   * messages cannot go out there, and the reconciliation would fail the
   * connection.  The offer is void, and a newer one goes where every
   * buffer is registered; mr_nics only narrows, so this ends, and the
   * answered offer is not counted among the unanswered ones (check_deadline).
   * The receiver takes the REQ as one that supersedes its answer; one that
   * already moved onto the standby (its ACK ended its move) takes it as a
   * move its peer asked for, a second move there, not as a fault of its own
   * new NIC.  This end's side of that standby is stopped first, as the old
   * path is: a clear-to-send the receiver wrote through it must not land
   * after the newer move's reconciliation. */
  int to = a->standby != 0 ? fo->sb.link.dev : fo->next.dev;
  if (!lp_comm_may_use(c, to)) {
    LP_INFO(NCCL_NET,
            "send connection 0x%llx: a buffer registered since the move's offer is not registered on %s: offered "
            "again elsewhere",
            (unsigned long long)c->conn_id, c->env->devs[to].name);
    if (a->standby != 0) stop_link(c, &fo->sb.link);
    fo->attempts--;
    return sender_start(s, a->standby != 0 ? LP_FO_PEER_NOTICE : fo->reason, -1);
  }
  if (a->standby != 0) { /* both ends were connected and ready since the standby's answer */
    lp_sb_take(c, &fo->sb, &fo->next);
    fo->via_standby = 1;
  } else {
    fo->next.remote = a->link;
    if (lp_link_connect(&fo->next, c->traffic_class) != ncclSuccess) {
      nic_failed(c, fo->next.dev);
      return sender_start(s, LP_FO_COMPLETION_ERR, -1);
    }
    rc = send_ready(c);
    if (rc != ncclSuccess) return rc;
  }
  rc = drain(c);
  if (rc != ncclSuccess) return rc;
  int replayed = 0;
  uint64_t bytes = 0;
  swap_link(c, &fo->next);
  rc = lp_fo_sender_reconcile(s, a, &replayed, &bytes);
  if (rc != ncclSuccess) return rc;
  set_state(c, LP_FO_IDLE);
  fo->peer_away = a->link.nic_guid != fo->peer_home_guid || a->link.port != fo->peer_home_port;
  report(c, fo->reason == LP_FO_FAILBACK ? LP_REPORT_FAILBACK : LP_REPORT_FAILOVER, to, replayed, bytes);
  return lp_send_progress(s);
}

/* The receiver moved onto the standby by itself: this end follows, as if
 * it had asked (the MOVED is the ACK), and says READY, which lets the
 * receiver announce new receives again.  An end that cannot follow (its
 * side of that standby is gone, or its own REQ built a new path) starts a
 * move of its own, whose REQ supersedes the MOVED at the receiver. */
static ncclResult_t sender_on_moved(struct lp_send_comm *s, const struct lp_fo_ack *a) {
  struct lp_comm *c = &s->base;
  struct lp_fo *fo = c->fo;
  if (lp_fo_take_primary_word(a, &fo->peer_primary_ok)) fo->seen_gen--; /* check_health looks once idle */
  int crossed = fo->state != LP_FO_IDLE;
  if (!crossed) {
    if (a->epoch <= fo->epoch) return ncclSuccess; /* older than a move made since */
    begin(c, LP_FO_PEER_NOTICE);
    fo->epoch = a->epoch;
    quiesce(c);
    set_state(c, LP_FO_REQUESTED);
  } else if (a->epoch != fo->epoch) {
    return ncclSuccess; /* older than the REQ this end sent since */
  }
  /* Requested at its epoch: this end's REQ crossed it, or the lines above. */
  if (crossed)
    LP_INFO(NCCL_NET, "send connection 0x%llx: its REQ (epoch %u) crossed the receiver's MOVED, taken as the answer",
            (unsigned long long)c->conn_id, a->epoch);
  if (!lp_sb_usable(c, &fo->sb, c->link.dev) || fo->sb.id != a->standby || fo->next.env != NULL) {
    fo->reason = LP_FO_PEER_NOTICE;
    return sender_start(s, LP_FO_PEER_NOTICE, -1);
  }
  ncclResult_t rc = sender_on_ack(s, a);
  if (rc != ncclSuccess || fo->state != LP_FO_IDLE) return rc;
  return send_ready(c);
}

/* ---- receiver ---- */

/* The REQ names a standby this end no longer holds (dropped when its
 * device failed) or cannot use now: the sender offers a new path next,
 * and the old one stays stopped until then. */
static ncclResult_t refuse_standby(struct lp_comm *c) {
  lp_sb_drop(c, &c->fo->sb);
  set_state(c, LP_FO_NOTICED);
  struct lp_fo_ack *a = calloc(1, sizeof(*a));
  if (a == NULL) return lp_comm_fail(c, ncclSystemError, "out of memory while moving the connection");
  hdr(&a->hdr, LP_MSG_FO_ACK, lp_fo_ack_len(0));
  a->conn_id = c->conn_id;
  a->epoch = c->fo->epoch;
  a->refused = 1;
  ncclResult_t rc = send_msg(c, a, lp_fo_ack_len(0));
  free(a);
  return rc;
}

/* The receiver's end of a move, once its old path is stopped and drained
 * and `next` is where it goes: receives re-posted there, the CTS entries of
 * every message it still waits for keyed for it, and the answer: an ACK
 * (`standby` the REQ's), or a MOVED it makes by itself (`standby` its own).
 * `reason` is the move's. */
static ncclResult_t answer_onto(struct lp_recv_comm *r, struct lp_link *next, int type, uint32_t standby, int reason) {
  struct lp_comm *c = &r->base;
  struct lp_fo *fo = c->fo;
  /* A REQ that supersedes an answer this end gave (its MOVED, or an ACK
   * whose READY has not come: the sender could not follow or connect) goes
   * on with the same move, for the same fault: begin() left it as it was,
   * and that answer made its event line and counted it.  Once, as the
   * sender counts its move once, however many REQs it took. */
  int reported = fo->state == LP_FO_AWAIT_READY;
  /* 17 KiB at most, once per move: not worth a place in every comm. */
  struct lp_fo_ack *a = calloc(1, sizeof(*a));
  if (a == NULL) {
    lp_link_close(next);
    return refuse_failed(c, reason, lp_comm_fail(c, ncclSystemError, "out of memory while moving the connection"));
  }
  a->conn_id = c->conn_id;
  a->epoch = fo->epoch;
  int dev = next->dev;
  uint64_t bytes = 0;
  ncclResult_t rc = lp_fo_receiver_reconcile(r, dev, a, &bytes);
  if (rc == ncclSuccess) rc = lp_fo_post_replays(r, next, a);
  if (rc != ncclSuccess) {
    free(a);
    lp_link_close(next);
    return refuse_failed(c, reason, rc);
  }
  int replayed = (int)a->npending;
  swap_link(c, next);
  hdr(&a->hdr, type, lp_fo_ack_len(a->npending));
  a->link = c->link.local;
  a->standby = standby;
  /* Every answer says whether this end's primary may be used now; the
   * sender keeps the latest (lp_fo_take_primary_word).  Where it may not, the
   * sender fails back only after this end's NOTICE that it is trusted again
   * (check_health).  A REQ for a stall or an error makes the primary suspect
   * here too (begin), with a hold-down of its own that ends a little after
   * the sender's; a failback asked before it ends found the primary refused
   * here and put this end on a third NIC for good.  Said on every answer,
   * not only one that leaves the primary: a flag left over from an earlier
   * move, or one whose NOTICE was never due, would hold the failback back
   * for good. */
  a->primary_failed = dev != fo->primary_dev && !lp_health_trusted(c->health, fo->primary_dev, lp_now_ns());
  /* The sender's new QPs may still be in INIT, unless they are its
   * standby's.  After a MOVED, the sender is still on the old path until
   * it reads it: a clear-to-send written now could be matched there and be
   * missing from the MOVED's list, so none is until its READY. */
  set_state(c, type == LP_MSG_FO_ACK && standby != 0 ? LP_FO_IDLE : LP_FO_AWAIT_READY);
  int failback = reason == LP_FO_FAILBACK;
  fo->reason = failback ? LP_FO_FAILBACK : fo->reason;
  rc = send_msg(c, a, lp_fo_ack_len(a->npending));
  free(a);
  if (rc != ncclSuccess) return rc;
  if (!reported) report(c, failback ? LP_REPORT_FAILBACK : LP_REPORT_FAILOVER, dev, replayed, bytes);
  return ncclSuccess;
}

/* The receiver's new path `next`, open, connected to the sender's
 * `remote`: 1, or 0 with it closed.  The primary's kept path, revived for
 * it (open_on), is kept again instead, uncounted as a kept path is: the
 * next try or failback revives it (its revival resets the QPs), as the
 * sender keeps its own (sender_start). */
static int connect_to(struct lp_comm *c, struct lp_link *next, const struct lp_link_info *remote) {
  struct lp_fo *fo = c->fo;
  next->remote = *remote;
  if (lp_link_connect(next, c->traffic_class) == ncclSuccess) return 1;
  if (fo->via_home && fo->home.env == NULL) {
    lp_link_uncount(next);
    fo->home = *next;
    memset(next, 0, sizeof(*next));
    fo->via_home = 0;
    return 0;
  }
  lp_link_close(next);
  return 0;
}

/* A failback's receiving end goes home while its primary's port is up,
 * even where a silent fault of another connection made the primary suspect
 * since this end last said it was trusted: the sender has revived its own
 * path there already, and a third NIC would leave the connection across
 * rails for good (no later failback brings it home: the sender is home).
 * Seen in failover.failback_after_blackhole, when the other connection's
 * stall came a millisecond before the failback's REQ.  If the primary is a
 * black hole, the connection stalls again and moves off for a longer
 * hold-down.  The primary's device, connected to the sender's `remote`;
 * -1 (with nothing open) to choose as for any move. */
static int failback_home(struct lp_comm *c, struct lp_link *next, const struct lp_link_info *remote) {
  int home = c->fo->primary_dev;
  if (!lp_health_ok(c->health, home) || !lp_comm_may_use(c, home)) return -1;
  if (open_on(c, next, home, remote->nqps) != ncclSuccess) return -1;
  return connect_to(c, next, remote) ? home : -1;
}

static ncclResult_t receiver_on_req(struct lp_recv_comm *r, const struct lp_fo_req *m) {
  struct lp_comm *c = &r->base;
  struct lp_fo *fo = c->fo;
  if (m->epoch <= fo->epoch) return ncclSuccess; /* an old request */
  begin(c, fo->state == LP_FO_NOTICED ? fo->reason : (int)m->reason);
  fo->epoch = m->epoch;
  fo->via_standby = fo->via_home = 0; /* what this request's path is, not what an answer it supersedes took */
  quiesce(c);
  ncclResult_t rc = drain(c);
  if (rc != ncclSuccess) return refuse_failed(c, (int)m->reason, rc);
  int failback = m->reason == LP_FO_FAILBACK;
  int prefer = failback ? fo->primary_dev : m->rail;
  /* Off the old device, even when it looks healthy: a stall or an error
   * completion may be its fault without any port event to say so. */
  int avoid = failback ? -1 : c->link.dev;
  struct lp_link next;
  int dev = -1;
  if (m->standby != 0) {
    if (m->standby != fo->sb.id || !lp_sb_usable(c, &fo->sb, avoid)) return refuse_standby(c);
    lp_sb_take(c, &fo->sb, &next);
    dev = next.dev;
    fo->via_standby = 1;
  }
  if (dev < 0) drop_standby(c); /* the sender dropped its side: it offers a new path */
  if (dev < 0 && failback) dev = failback_home(c, &next, &m->link);
  for (int tries = 0; dev < 0 && tries < LP_MAX_DEVS; tries++) {
    ncclResult_t opened;
    dev = open_claimed(c, &next, prefer, avoid, m->link.nqps, &opened);
    if (dev < 0) break;
    if (opened == ncclSuccess && connect_to(c, &next, &m->link)) break;
    prefer = -1;
    nic_failed(c, dev);
    dev = -1;
  }
  if (dev < 0) return nowhere_left(c, (int)m->reason, avoid);
  return answer_onto(r, &next, LP_MSG_FO_ACK, m->standby, (int)m->reason);
}

/* The receiver cannot move by itself: it stops and asks the sender. */
static ncclResult_t receiver_notice(struct lp_recv_comm *r, int reason) {
  struct lp_comm *c = &r->base;
  if (c->fo->state != LP_FO_IDLE) return ncclSuccess;
  begin(c, reason);
  set_state(c, LP_FO_NOTICED);
  quiesce(c);
  return send_notice(c, reason, c->link.dev);
}

/* The receiver's own port failed and its standby is usable: it moves onto
 * it by itself and says so (MOVED), where a NOTICE would wait for the
 * sender's REQ.  Its epoch is one past the last; a REQ of the same epoch
 * that crosses it is ignored here (receiver_on_req), and the sender takes
 * the MOVED as its answer (sender_on_moved). */
static ncclResult_t receiver_moves_itself(struct lp_recv_comm *r, int reason) {
  struct lp_comm *c = &r->base;
  struct lp_fo *fo = c->fo;
  begin(c, reason);
  fo->epoch++;
  quiesce(c);
  ncclResult_t rc = drain(c);
  if (rc != ncclSuccess) return refuse_failed(c, reason, rc);
  uint32_t standby = fo->sb.id;
  struct lp_link next;
  lp_sb_take(c, &fo->sb, &next);
  fo->via_standby = 1;
  return answer_onto(r, &next, LP_MSG_FO_MOVED, standby, reason);
}

/* ---- standby paths ---- */

/* The primary is trusted again on both sides: the sender moves back at
 * once (check_health).  Each end revives the path it left there (fo->home,
 * open_on): nothing is created, nothing waits for paced work.  Also when
 * only the receiver is away: a failback that found the receiver's primary
 * down left it on another NIC with the sender home, and its NOTICE once
 * that primary is back is the only thing that can bring it home.  Where
 * the receiver is, the sender knows from its last answer's NIC. */
static int failback_due(const struct lp_comm *c) {
  const struct lp_fo *fo = c->fo;
  /* A connection that has used a buffer its primary could not register
   * (mr_nics) stays away: a failback would go elsewhere, each time the
   * health changes. */
  return (c->link.dev != fo->primary_dev || fo->peer_away) && lp_comm_may_use(c, fo->primary_dev) &&
         lp_health_trusted(c->health, fo->primary_dev, lp_now_ns()) && fo->peer_primary_ok;
}

/* No standby now: the next offer waits LP_SB_RETRY_NS, twice as long
 * after each one in a row that made none, up to LP_SB_RETRY_MAX_NS.  A
 * peer with no second NIC answers every offer with none, and each offer
 * builds and destroys a link at both ends. */
static void standby_later(struct lp_fo *fo, uint64_t now) {
  uint64_t wait = fo->sb.retry_ns == 0 ? LP_SB_RETRY_NS : 2 * fo->sb.retry_ns;
  fo->sb.retry_ns = wait < LP_SB_RETRY_MAX_NS ? wait : LP_SB_RETRY_MAX_NS;
  fo->sb.next_ns = now + fo->sb.retry_ns;
}

/* Receiver: its side of the ready standby is gone (check_health): an
 * answer of none to the offer it had taken.  The sender drops its side and
 * offers a new one; a REQ of its that names the standby and crosses this
 * is refused, as before. */
static ncclResult_t standby_given_up(struct lp_comm *c) {
  struct lp_fo_sb_answer a;
  memset(&a, 0, sizeof(a));
  hdr(&a.hdr, LP_MSG_FO_SB_ANSWER, sizeof(a));
  a.conn_id = c->conn_id;
  a.id = c->fo->sb.id;
  return send_msg(c, &a, sizeof(a));
}

static ncclResult_t standby_answered(struct lp_send_comm *s, const struct lp_fo_sb_answer *a) {
  struct lp_comm *c = &s->base;
  struct lp_fo *fo = c->fo;
  if (fo->sb.state == LP_SB_READY && a->id == fo->sb.id && !a->ok) { /* the peer gave its side up */
    LP_INFO(NCCL_NET, "send connection 0x%llx: the peer gave its side of standby path %u up: offering a new one",
            (unsigned long long)c->conn_id, a->id);
    drop_standby(c);
    fo->sb.retry_ns = 0;
    standby_later(fo, lp_now_ns());
    return ncclSuccess;
  }
  if (lp_sb_on_answer(c, &fo->sb, a))
    fo->sb.retry_ns = 0;
  else if (fo->sb.state == LP_SB_NONE) /* not a late answer to an older offer: none for now */
    standby_later(fo, lp_now_ns());
  return ncclSuccess;
}

/* The piece of paced work this end has, if any (tidy). */
enum chore { CHORE_NONE, CHORE_DESTROY, CHORE_OFFER, CHORE_ANSWER };

static enum chore chore_of(const struct lp_comm *c, uint64_t now) {
  const struct lp_fo *fo = c->fo;
  if (lp_fo_has_retired(fo)) return CHORE_DESTROY;
  if (!c->env->cfg.standby) return CHORE_NONE;
  if (c->kind == LP_COMM_RECV) return fo->sb.state == LP_SB_ASKED ? CHORE_ANSWER : CHORE_NONE;
  if (fo->sb.state == LP_SB_NONE) return CHORE_OFFER;
  /* An offer the peer never answered (its answer lost with a failed comm
   * of its own, say) is made again, not waited for. */
  if (fo->sb.state == LP_SB_OFFERED && now - fo->sb.offered_ns > LP_SB_ANSWER_NS) return CHORE_OFFER;
  return CHORE_NONE;
}

/* Off the critical path of a sweep (no move of this process under way),
 * one piece at a time for the whole process (lp_health_paced): destroy the
 * path the last move left; or (sender) offer a standby, on the primary when
 * failing back is due; or (receiver) build and connect its side of one. */
static ncclResult_t tidy(struct lp_comm *c, uint64_t now) {
  struct lp_fo *fo = c->fo;
  enum chore chore = chore_of(c, now);
  if (chore == CHORE_NONE || fo->state != LP_FO_IDLE || now < fo->sb.next_ns || lp_health_moving(c->health) != 0 ||
      !lp_health_paced(c->health, now, LP_SB_PACE_NS))
    return ncclSuccess;
  ncclResult_t rc = ncclSuccess;
  if (chore == CHORE_DESTROY) {
    int i = 0;
    while (fo->retired[i].env == NULL) i++; /* one is (chore_of) */
    lp_link_close(&fo->retired[i]);
  } else if (chore == CHORE_ANSWER) {
    struct lp_fo_sb_answer a;
    lp_sb_answer(c, &fo->sb, fo->primary_dev, &a);
    rc = send_msg(c, &a, sizeof(a));
  } else {
    struct lp_fo_sb_offer m;
    if (lp_sb_offer(c, &fo->sb, fo->primary_dev, &m) == 0)
      rc = send_msg(c, &m, sizeof(m));
    else
      standby_later(fo, now); /* no other healthy device now */
  }
  lp_health_paced_took(c->health, now, lp_now_ns());
  return rc;
}

/* ---- dispatch ---- */

static ncclResult_t on_message(struct lp_comm *c, const void *buf, size_t len) {
  char why[160];
  int type = lp_fo_msg_check(buf, len, c->conn_id, c->link.nqps, why, sizeof(why));
  if (type < 0) return lp_comm_fail(c, ncclRemoteError, "malformed control message from the peer: %s", why);
  struct lp_fo *fo = c->fo;
  if (type == LP_MSG_FO_NACK) {
    const struct lp_fo_nack *n = buf;
    /* Idle here (this end had answered; the sender failed after), the
     * peer's reason says nothing of this end's device: no silent fault. */
    begin(c, fo->state == LP_FO_IDLE && silent((int)n->reason) ? LP_FO_PEER_NOTICE : (int)n->reason);
    return path_lost(c, n->cause == LP_NACK_FAILED ? "the peer's end failed while moving; its log says why"
                                                   : "the peer has no healthy NIC left");
  }
  if (c->kind == LP_COMM_SEND) {
    struct lp_send_comm *s = (struct lp_send_comm *)c;
    if (type == LP_MSG_FO_ACK) return sender_on_ack(s, buf);
    if (type == LP_MSG_FO_MOVED) return sender_on_moved(s, buf);
    if (type == LP_MSG_FO_NOTICE) {
      const struct lp_fo_notice *n = buf;
      if (n->reason == LP_FO_FAILBACK) {
        fo->peer_primary_ok = 1;
        fo->peer_away = 1;
        fo->seen_gen--; /* re-evaluate: failing back may be possible now */
        return ncclSuccess;
      }
      if (n->reserved) fo->peer_primary_ok = 0;
      if (n->epoch != fo->epoch || fo->state != LP_FO_IDLE) return ncclSuccess; /* already moving */
      /* The NIC before the peer (progress.c), once more: a request of ours
       * the peer refused broke its end, and the refusal's completion is
       * here before the notice of the flushes it caused was sent, but
       * maybe after this call's poll.  Moving for it would answer a
       * refusal, which every NIC repeats, with a move. */
      int got, drained;
      ncclResult_t rc = lp_transport_poll(c, lp_fo_on_error, &got, &drained);
      c->fed_unclocked |= got > 0; /* the watchdog hears of them at the next clocked call */
      if (rc != ncclSuccess || fo->state != LP_FO_IDLE) return rc; /* failed, or its own error moves it */
      return sender_start(s, LP_FO_PEER_NOTICE, n->failed_rail);
    }
    if (type == LP_MSG_FO_SB_ANSWER) return standby_answered(s, buf);
  } else if (type == LP_MSG_FO_REQ) {
    return receiver_on_req((struct lp_recv_comm *)c, buf);
  } else if (type == LP_MSG_FO_SB_OFFER) {
    lp_sb_asked(c, &fo->sb, buf); /* answered by tidy(), paced */
    return ncclSuccess;
  } else if (type == LP_MSG_FO_READY) {
    const struct lp_fo_ready *m = buf;
    if (fo->state == LP_FO_AWAIT_READY && m->epoch == fo->epoch) set_state(c, LP_FO_IDLE);
    return ncclSuccess; /* else: for a move a newer REQ superseded */
  }
  return lp_comm_fail(c, ncclRemoteError, "unexpected control message type %d from the peer", type);
}

static ncclResult_t read_messages(struct lp_comm *c) {
  struct lp_fo *fo = c->fo;
  for (;;) {
    const void *msg;
    size_t len;
    int rc = lp_ctl_recv(&c->ctl, c->peer, &msg, &len);
    if (rc == 0) return ncclSuccess;
    if (rc < 0) {
      /* Mid-move a vanished peer leaves no path.  Otherwise the data path
       * decides: completions that arrived before it left still count
       * (lp_comm_check_peer fails the connection after draining them). */
      if (fo->state != LP_FO_IDLE)
        return lp_comm_fail(c, ncclRemoteError, "control channel to the peer failed during a move: %s",
                            lp_ctl_err_str(rc));
      fo->peer_closed = 1;
      c->peer_check_ns = 0; /* lp_comm_check_peer looks at once */
      return ncclSuccess;
    }
    ncclResult_t r = on_message(c, msg, len);
    if (r != ncclSuccess) return r;
  }
}

/* Whether this look reads the control sockets: data came on one (the
 * process's set says so), or the set cannot tell (none, a connection not
 * in it), or it is LP_FO_READ_ANYWAY_NS since the last read. */
static int news(struct lp_comm *c, uint64_t now) {
  struct lp_fo *fo = c->fo;
  if (fo->ready == NULL || !fo->ready_all || now >= fo->next_full_read_ns) {
    fo->next_full_read_ns = now + LP_FO_READ_ANYWAY_NS;
    atomic_store_explicit(&fo->rx_ready, 0, memory_order_relaxed);
    return 1;
  }
  lp_ctl_ready_poll(fo->ready, now);
  return atomic_exchange_explicit(&fo->rx_ready, 0, memory_order_acquire);
}

/* Every live control connection in the process's set: one made again
 * has a new fd, which replaces the old one there (open until the comm is
 * freed, ctlchan.h). */
static void sync_ready(struct lp_comm *c) {
  struct lp_fo *fo = c->fo;
  if (fo->ready == NULL) return;
  int all = 1;
  for (int i = 0; i < LP_CTL_PATHS; i++) {
    if (!lp_ctl_path_live(&c->ctl, i)) continue;
    int fd = c->ctl.path[i].fd;
    if (fd != fo->ready_fd[i]) {
      if (fo->ready_fd[i] >= 0) lp_ctl_ready_remove(fo->ready, fo->ready_fd[i]);
      fo->ready_fd[i] = lp_ctl_ready_add(fo->ready, fd, &fo->rx_ready) == 0 ? fd : -1;
      atomic_store_explicit(&fo->rx_ready, 1, memory_order_relaxed); /* what came before it joined */
    }
    all &= fo->ready_fd[i] == fd;
  }
  fo->ready_all = all;
}

void lp_fo_watch_ready(struct lp_comm *c, struct lp_ctl_ready *r) {
  if (c->fo == NULL) return;
  c->fo->ready = r;
  sync_ready(c);
}

static ncclResult_t check_health(struct lp_comm *c) {
  struct lp_fo *fo = c->fo;
  struct lp_health *h = c->health;
  uint32_t gen = lp_health_gen(h);
  if (gen == fo->seen_gen || fo->state != LP_FO_IDLE) return ncclSuccess;
  fo->seen_gen = gen;
  /* A held-down port carrying a connection as a last resort is left only
   * for a healthy one: among held-down ports the choice goes by load, which
   * counts this end where it is, and two such ports would trade it at
   * every change of health. */
  int here_ok = lp_health_ok(h, c->link.dev);
  if (!here_ok && lp_health_link_up(h, c->link.dev)) {
    int to = choose_dev(c, -1, c->link.dev);
    here_ok = to < 0 || to == c->link.dev || !lp_health_ok(h, to);
  }
  /* Rebuilt elsewhere: its port failed, or it was made before the
   * connection carried a buffer that is not registered there.  Only the
   * sender offers standbys: a receiver says it gave its side up, or the
   * sender would hold its own as ready until a move it refuses. */
  if (fo->sb.link.env != NULL && (!lp_health_ok(h, fo->sb.link.dev) || !lp_comm_may_use(c, fo->sb.link.dev))) {
    drop_standby(c);
    if (c->kind == LP_COMM_RECV) {
      ncclResult_t rc = standby_given_up(c);
      if (rc != ncclSuccess) return rc;
    }
  }
  if (c->kind == LP_COMM_SEND) {
    struct lp_send_comm *s = (struct lp_send_comm *)c;
    if (!here_ok) return sender_start(s, lp_health_down_reason(h, c->link.dev), -1);
    if (failback_due(c)) return sender_start(s, LP_FO_FAILBACK, -1);
    return ncclSuccess;
  }
  struct lp_recv_comm *r = (struct lp_recv_comm *)c;
  if (!here_ok && lp_sb_usable(c, &fo->sb, c->link.dev))
    return receiver_moves_itself(r, lp_health_down_reason(h, c->link.dev));
  if (!here_ok) return receiver_notice(r, lp_health_down_reason(h, c->link.dev));
  if (c->link.dev != fo->primary_dev && lp_health_trusted(h, fo->primary_dev, lp_now_ns()))
    return send_notice(c, LP_FO_FAILBACK, fo->primary_dev);
  return ncclSuccess;
}

/* A REQ the receiver has not answered in time.  A receiver answers within
 * milliseconds even while NCCL is not calling it (its idle watch), so
 * silence means the REQ or its ACK was lost, or the peer is frozen or gone.
 * The move is offered again on another NIC, LP_FO_MAX_ATTEMPTS times in
 * all; then the connection fails with ncclRemoteError naming the peer,
 * instead of waiting for ever.  A receiver has no deadline: its sender may
 * rightly be idle (NCCL calls nothing while it computes) and answers its
 * NOTICE or its ACK when NCCL calls it again. */
static ncclResult_t check_deadline(struct lp_send_comm *s, uint64_t now) {
  struct lp_comm *c = &s->base;
  struct lp_fo *fo = c->fo;
  if (fo->state != LP_FO_REQUESTED || now < fo->deadline_ns) return ncclSuccess;
  int ms = c->env->cfg.move_timeout_ms;
  int retry = fo->attempts < LP_FO_MAX_ATTEMPTS;
  LP_WARN("connection to %s: no answer to the move within %d ms (LINKPASS_MOVE_TIMEOUT_MS; attempt %d of %d)%s",
          c->peer, ms, fo->attempts, LP_FO_MAX_ATTEMPTS, retry ? ": offering it again" : "");
  if (retry) return sender_start(s, fo->reason, -1);
  report(c, LP_REPORT_PATH_LOST, -1, 0, 0);
  send_nack(c, fo->reason, LP_NACK_FAILED); /* a peer that was only frozen hears it when it thaws */
  set_state(c, LP_FO_IDLE);
  return lp_comm_fail(c, ncclRemoteError,
                      "the peer %s answered none of %d moves within %d ms each: it is frozen or gone", c->peer,
                      LP_FO_MAX_ATTEMPTS, ms);
}

int lp_fo_hears_peer(const struct lp_comm *c) {
  const struct lp_fo *fo = c->fo;
  return fo != NULL && !fo->peer_closed && fo->ready != NULL && fo->ready_all;
}

ncclResult_t lp_fo_progress(struct lp_comm *c, uint64_t now) {
  struct lp_fo *fo = c->fo;
  if (fo == NULL) return ncclSuccess;
  /* The peer closed its control connections: it closed its comm, or its
   * process is gone.  Nothing is said to it and nothing built for it any
   * more; the data path decides what the connection's last completions
   * were (lp_comm_check_peer).  Sending to it failed the comm with a WARN
   * at every job's end, in the comms one end had not closed yet. */
  if (fo->peer_closed) {
    fo->chores = 0;
    return ncclSuccess;
  }
  fo->chores = lp_fo_chore_waits(c, now);
  /* Between moves, with no port's health changed since the last look,
   * nothing below is due before the next look at the sockets: test() is
   * NCCL's spin loop, and this is on its path (docs/PERFORMANCE.md, "8-byte
   * latency").  A socket that did not take a whole message is flushed then;
   * paced chores wait as long. */
  if (fo->state == LP_FO_IDLE && now < fo->next_read_ns && lp_health_gen(c->health) == fo->seen_gen) return ncclSuccess;
  ncclResult_t rc = flush_tx(c);
  /* Reading the socket is a system call: between moves, look at most every
   * LP_FO_READ_EVERY_NS (far below any failover time) rather than on every
   * test() NCCL makes, and read only when data came (news()). */
  if (rc == ncclSuccess && !fo->peer_closed && (fo->state != LP_FO_IDLE || now >= fo->next_read_ns)) {
    fo->next_read_ns = now + LP_FO_READ_EVERY_NS;
    if (news(c, now)) rc = read_messages(c);
    lp_ctl_tick(&c->ctl, c->peer, now); /* control connections given up: tell the peer, make them again */
    sync_ready(c);
  }
  if (fo->peer_closed) return rc; /* this look found it (read_messages) */
  if (rc == ncclSuccess && c->kind == LP_COMM_SEND) rc = check_deadline((struct lp_send_comm *)c, now);
  if (rc == ncclSuccess) rc = check_health(c);
  if (rc == ncclSuccess) rc = tidy(c, now);
  return rc;
}

/* Called after the completion queue was polled: a process that was not
 * scheduled for a while finds its completions waiting, and only work that
 * is still outstanding after that poll counts as stalled (watchdog.h).
 * Both ends watch: a receiver whose CTS writes vanish is as stuck as a
 * sender whose data does. */
ncclResult_t lp_fo_watchdog(struct lp_comm *c, uint64_t now) {
  struct lp_fo *fo = c->fo;
  if (fo == NULL || fo->state != LP_FO_IDLE || c->error != ncclSuccess) return c->error;
  /* Its limit is LINKPASS_WATCHDOG_MS: a look a millisecond is plenty, and
   * test() is a spin loop (lp_fo_progress). */
  if (now < fo->next_watch_ns) return ncclSuccess;
  fo->next_watch_ns = now + LP_FO_READ_EVERY_NS;
  enum lp_watchdog_verdict v = lp_watchdog_check(&c->wd, now, lp_comm_busy(c));
  if (v == LP_WATCHDOG_OK) return ncclSuccess;
  if (v == LP_WATCHDOG_STALL_AGAIN)
    LP_WARN(
        "%s connection to %s stalled again on %s soon after moving for a stall: every NIC may be slow; its "
        "watchdog now waits %llu ms (LINKPASS_WATCHDOG_MS x %d)",
        c->kind == LP_COMM_SEND ? "send" : "recv", c->peer, c->link.local.dev_name,
        (unsigned long long)(lp_watchdog_limit(&c->wd) / 1000000ull), c->wd.scale);
  return c->kind == LP_COMM_SEND ? sender_start((struct lp_send_comm *)c, LP_FO_STALL, -1)
                                 : receiver_notice((struct lp_recv_comm *)c, LP_FO_STALL);
}

ncclResult_t lp_fo_on_error(struct lp_comm *c, const struct ibv_wc *wc) {
  struct lp_fo *fo = c->fo;
  char what[256];
  if (fo == NULL) return lp_comm_fail(c, ncclRemoteError, "%s", wc_desc(c, wc, what, sizeof(what)));
  /* Checked before "moving already": the peer's end may have started a move
   * on the flushes this very refusal caused it, and it must not hide it. */
  if (!path_failure(wc->status)) return fail_not_path(c, wc);
  if (fo->state != LP_FO_IDLE) return ncclSuccess; /* the old path's flushes */
  /* Once per move: the error that started it, as the NIC reported it (the
   * flushes that follow it say nothing more). */
  LP_WARN("%s connection to %s: %s: moving", c->kind == LP_COMM_SEND ? "send" : "recv", c->peer,
          wc_desc(c, wc, what, sizeof(what)));
  if (c->kind == LP_COMM_SEND) return sender_start((struct lp_send_comm *)c, LP_FO_COMPLETION_ERR, -1);
  return receiver_notice((struct lp_recv_comm *)c, LP_FO_COMPLETION_ERR);
}

void lp_fo_init(struct lp_comm *c) {
  if (c->health == NULL) return; /* failover is off */
  struct lp_fo *fo = calloc(1, sizeof(*fo));
  if (fo == NULL) {
    LP_WARN("out of memory: the connection to %s works without failover", c->peer);
    return;
  }
  if (lp_ctl_start(&c->ctl, c->kind == LP_COMM_RECV) != 0) {
    free(fo);
    LP_WARN("out of memory: the connection to %s works without failover", c->peer);
    return;
  }
  c->fo = fo;
  lp_syslog_ends(&c->env->syslog, 1);
  for (int i = 0; i < LP_CTL_PATHS; i++) fo->ready_fd[i] = -1;
  fo->primary_dev = c->link.dev;
  fo->peer_primary_ok = 1;
  fo->peer_home_guid = c->link.remote.nic_guid;
  fo->peer_home_port = c->link.remote.port;
  fo->from_dev = c->link.dev;
  /* One behind: the first progress call looks at the port's health.  A
   * connection set up on a port that went down after init (no change of
   * health since then for it to notice) moves at once, not when its RC
   * retries or the watchdog give up. */
  fo->seen_gen = lp_health_gen(c->health) - 1;
  lp_watchdog_init(&c->wd, c->env->cfg.ns.watchdog_ns, lp_now_ns());
  /* "host (addr) dev:port" -> "host/addr/dev:port": event values have no blanks. */
  size_t o = 0;
  for (const char *q = c->peer; *q && o + 1 < sizeof(c->peer_id); q++) {
    if (*q == '(' || *q == ')') continue;
    c->peer_id[o++] = *q == ' ' ? '/' : *q;
  }
  c->peer_id[o] = '\0';
}

void lp_fo_fini(struct lp_comm *c) {
  struct lp_fo *fo = c->fo;
  if (fo == NULL) return;
  for (int i = 0; i < LP_CTL_PATHS; i++) /* before the fds close: no flag written after the free */
    if (fo->ready_fd[i] >= 0) lp_ctl_ready_remove(fo->ready, fo->ready_fd[i]);
  lp_link_close(&fo->next);
  lp_sb_drop(c, &fo->sb);
  for (int i = 0; i < LP_FO_RETIRED; i++) lp_link_close(&fo->retired[i]);
  lp_link_close(&fo->home);
  if (fo->state != LP_FO_IDLE) lp_health_moving_add(c->health, -1);
  lp_syslog_ends(&c->env->syslog, -1);
  free(fo);
  c->fo = NULL;
  c->paused = 0;
}
