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
 * With a standby path (standby.h) the REQ names it: both ends take the
 * link they connected in advance instead of building one, and no READY is
 * needed; the rest of the move is the same.
 *
 * Failback is the same move with reason "failback", towards the primary NIC.
 */
#ifndef LP_FAILOVER_H
#define LP_FAILOVER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "ctlready.h"
#include "fo_wire.h"
#include "standby.h"
#include "linkpass/nccl_net.h"

struct lp_idle_watch;

/* A move whose REQ goes unanswered is offered again on another NIC, this
 * many times in all; then the peer is taken for gone. */
#define LP_FO_MAX_ATTEMPTS 3

enum lp_fo_state {
  LP_FO_IDLE = 0,
  LP_FO_NOTICED,     /* receiver: told the sender, waiting for its REQ */
  LP_FO_REQUESTED,   /* sender: REQ sent, waiting for the ACK */
  LP_FO_AWAIT_READY, /* receiver: ACK sent, waiting for READY before writing to the new QPs */
};

#define LP_FO_RETIRED 2 /* links a move leaves to destroy later: its old path, the standby it dropped */

/* A connection's failover state, allocated by lp_fo_init: lp_comm.fo. */
struct lp_fo {
  int state; /* enum lp_fo_state; lp_comm.paused says whether it is not IDLE */
  uint32_t epoch;
  int reason;
  uint64_t start_ns;
  uint64_t deadline_ns; /* sender: the receiver must answer the REQ by then (LINKPASS_MOVE_TIMEOUT_MS) */
  int attempts;         /* REQs sent for this fault; LP_FO_MAX_ATTEMPTS unanswered ones lose the path */
  uint32_t failed_nics; /* NICs that could not take this move's path: not offered again in it */
  int from_dev;         /* where the connection was when this move began */
  int inflight;         /* requests outstanding when it began */
  int via_standby;      /* the move took the standby path */
  int via_home;         /* the move revived the path a failover left on the primary */
  uint32_t seen_gen;
  int primary_dev;
  int peer_primary_ok;     /* sender: the receiver's primary NIC can be used */
  int peer_away;           /* sender: the receiver is off its primary (its last answer's NIC, or its NOTICE) */
  uint64_t peer_home_guid; /* sender: the receiver's primary NIC and port, as set up */
  int peer_home_port;
  int peer_closed;       /* the control channel reached end of file */
  uint64_t next_read_ns; /* when to look at the control channel again */
  /* News on the control sockets (ctlready.h). */
  struct lp_ctl_ready *ready; /* the process's set; NULL: every look reads */
  _Atomic int rx_ready;       /* data arrived since the last read (set by the set) */
  int ready_fd[LP_CTL_PATHS]; /* each connection's fd in the set, -1: not in it */
  int ready_all;              /* every live connection is in it: reading can wait for the flag */
  uint64_t next_full_read_ns; /* a read whatever the flag, in case a change of fds was missed */
  uint64_t next_watch_ns;     /* the watchdog's next look (lp_fo_watchdog) */
  struct lp_link next;        /* sender: the path offered to the peer, until it answers */
  struct lp_standby sb;       /* the standby path (standby.h) */
  /* What the last move left (its old path, the standby it dropped),
   * destroyed once no move of the process is under way (tidy). */
  struct lp_link retired[LP_FO_RETIRED];
  /* The path a move left on the primary NIC, stopped (QPs in ERR) and kept
   * for the failback to revive (lp_link_revive) instead of building one. */
  struct lp_link home;
  /* lp_fo_chore_waits as the last progress call that read the clock found
   * it, or 1 since a move retired a link: what lp_fo_due reads on every
   * call (a chore that comes up otherwise waits for a look, a millisecond
   * at most). */
  int chores;
  /* The idle watch's own (idle_watch.h), under its lock. */
  struct lp_idle_watch *watch; /* the watch this receive comm is on; NULL: none */
  uint64_t watch_skip_until_ns;
  int watch_off;              /* the peer closed or the comm failed: nothing to answer */
  int watch_tx;               /* an answer is still queued for a socket */
  int watch_queued;           /* on the watch's list of comms to arm again */
  int watch_relook;           /* a look after a health change found the comm held: it comes back */
  unsigned watch_paths;       /* the control sockets to arm (bit i: c->ctl.path[i]) */
  int watch_fd[LP_CTL_PATHS]; /* their fds when last looked at: a connection made again has a new one */
};

/* Set up once the connection is established on its primary device, when
 * c->health is set (failover on).  Without memory for it the connection
 * works without failover, and says so. */
void lp_fo_init(struct lp_comm *c);
/* Read the control sockets only when the process's set says data came
 * (ctlready.h); without it, at every look. */
void lp_fo_watch_ready(struct lp_comm *c, struct lp_ctl_ready *r);
/* Release it, and what the connection holds in the shared tables (close). */
void lp_fo_fini(struct lp_comm *c);
/* 1 when the comm's own reads of its control connections would see the
 * peer go: every live one is in the process's set, whose events make the
 * comm read them.  A read that finds them closed clears c->peer_check_ns,
 * so that the next check looks at once.  0 without failover or the set. */
int lp_fo_hears_peer(const struct lp_comm *c);
/* Control channel and health changes; called by every progress call that
 * read the clock, with the time it started. */
ncclResult_t lp_fo_progress(struct lp_comm *c, uint64_t now);
/* `rc` ended the call of a comm: a move that it ended (the comm failed
 * mid-move, wherever it was found) is told to the peer with NACK and no
 * longer counts as moving.  Returns rc. */
ncclResult_t lp_fo_settle(struct lp_comm *c, ncclResult_t rc);
/* The watchdog; called after the completion queue by every progress call
 * that read the clock. */
ncclResult_t lp_fo_watchdog(struct lp_comm *c, uint64_t now);
/* An error completion: move (returns ncclSuccess) or fail the connection. */
ncclResult_t lp_fo_on_error(struct lp_comm *c, const struct ibv_wc *wc);
/* The last move left a link to destroy (tidy). */
static inline int lp_fo_has_retired(const struct lp_fo *fo) {
  for (int i = 0; i < LP_FO_RETIRED; i++)
    if (fo->retired[i].env != NULL) return 1;
  return 0;
}

/* A chore of tidy() waits at `now`: its paced turn comes at a look, so the
 * looks keep their millisecond until it is done (standby paths built at
 * every 16th call took twice as long at 1,024 connections).  An offer out
 * waits for its answer, which the control socket's news brings, and one
 * not due before next_ns waits for a later look: neither keeps the looks
 * (a sender with no NIC for a standby read the clock at every call). */
static inline int lp_fo_chore_waits(const struct lp_comm *c, uint64_t now) {
  const struct lp_fo *fo = c->fo;
  if (lp_fo_has_retired(fo)) return 1;
  if (!c->env->cfg.standby) return 0;
  if (c->kind == LP_COMM_RECV) return fo->sb.state == LP_SB_ASKED;
  return fo->sb.state == LP_SB_NONE && now >= fo->sb.next_ns;
}

/* Whether failover has work that needs a progress call to read the clock:
 * a move under way, news the control sockets' set reported, a health
 * change not looked at yet, or a chore (a standby path to build, an old
 * path to destroy).  With none of these, what failover does is a look
 * every millisecond, which may wait for the next call that reads the
 * clock anyway (progress.c).  Inline: every progress call asks, and
 * NCCL's spin loop is made of them. */
static inline int lp_fo_due(const struct lp_comm *c) {
  const struct lp_fo *fo = c->fo;
  return fo != NULL && (fo->state != LP_FO_IDLE || atomic_load_explicit(&fo->rx_ready, memory_order_relaxed) ||
                        lp_health_gen(c->health) != fo->seen_gen || fo->chores);
}

#endif
