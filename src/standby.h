/*
 * A connection's standby path: a link on another NIC of its pool whose QPs
 * are already connected to the peer's standby link, idle, so that a move
 * onto it creates nothing, connects nothing and needs no READY (its QPs
 * have been ready to receive since the answer).  On ConnectX, creating and
 * connecting QPs costs about a millisecond each; a NIC that carries a
 * thousand connection ends would otherwise stall them for seconds.
 *
 * The sender offers one (SB_OFFER, fo_wire.h) just after setup and again a
 * moment after each move, once no move of its process is under way; the
 * receiver builds and connects its side and answers (SB_ANSWER); the sender
 * connects its side.  The standbys of the ends now on one device are spread
 * over the other devices of the pool (health.h, lp_health_claim_standby),
 * so that when the device fails, its ends land evenly.  A standby is not a
 * connection end on its device (the metrics, the spread of moves) until a
 * move takes it.  Failover calls these on the connection's own thread.
 */
#ifndef LP_STANDBY_H
#define LP_STANDBY_H

#include <stdint.h>

#include "comm.h"
#include "fo_wire.h"

enum lp_sb_state {
  LP_SB_NONE = 0,
  LP_SB_OFFERED, /* sender: offered, waiting for the answer */
  LP_SB_ASKED,   /* receiver: an offer to answer (paced, like building it) */
  LP_SB_READY,   /* connected at both ends */
};

struct lp_standby {
  int state;                   /* enum lp_sb_state */
  uint32_t id;                 /* the offer it belongs to; a sender's ids grow */
  int from;                    /* the device of the path it stands by for (its count in health.h) */
  struct lp_link link;         /* the standby link itself */
  uint64_t next_ns;            /* sender: no new offer before this time */
  uint64_t retry_ns;           /* sender: the wait after the last offer that made none, 0 after one that made one */
  uint64_t offered_ns;         /* sender, OFFERED: when */
  struct lp_fo_sb_offer asked; /* receiver, ASKED: the offer */
};

/* Sender: a new standby for the connection's current path, on another
 * healthy device of the pool of its primary `primary`; fills `m`.  0: an
 * offer to send; -1: no device for one now (state stays NONE). */
int lp_sb_offer(struct lp_comm *c, struct lp_standby *sb, int primary, struct lp_fo_sb_offer *m);

/* Receiver: an offer arrived; any standby it held is dropped, and the
 * offer waits to be answered (ASKED). */
void lp_sb_asked(struct lp_comm *c, struct lp_standby *sb, const struct lp_fo_sb_offer *m);

/* Receiver, ASKED: its side of the offer, built and connected; fills `a`,
 * whose `ok` says whether it has one. */
void lp_sb_answer(struct lp_comm *c, struct lp_standby *sb, int primary, struct lp_fo_sb_answer *a);

/* Sender: the receiver's answer.  1: the standby is ready; 0: the answer
 * is stale, or there is no standby (then the state is NONE). */
int lp_sb_on_answer(struct lp_comm *c, struct lp_standby *sb, const struct lp_fo_sb_answer *a);

/* 1 when a move may take the standby now: ready, and its device healthy,
 * not `avoid`, and one where the connection's buffers are registered. */
int lp_sb_usable(const struct lp_comm *c, const struct lp_standby *sb, int avoid);

/* A move takes the standby: `out` becomes the connection's next path,
 * counted on its device from now; the standby is NONE afterwards. */
void lp_sb_take(struct lp_comm *c, struct lp_standby *sb, struct lp_link *out);

/* Forget it: close its link, give its count back.  Safe on NONE. */
void lp_sb_drop(struct lp_comm *c, struct lp_standby *sb);
/* The same, but its link goes to `out` (zeroed when it had none), to be
 * closed later: destroying QPs costs as much as creating them. */
void lp_sb_set_aside(struct lp_comm *c, struct lp_standby *sb, struct lp_link *out);

#endif
