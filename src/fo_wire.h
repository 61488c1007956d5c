/*
 * The failover control messages, sent over the connection's out-of-band TCP
 * socket (kept open after setup precisely for this: it does not depend on
 * any NIC of the RDMA fabric).
 *
 *   NOTICE  either side -> the other: "my end of the path failed" (a local
 *           port went down, an error completion, a stall).  The peer moves
 *           at once instead of waiting ~30 s for its own retries to run out.
 *   REQ     sender -> receiver: "move to a new path": the sender's new link
 *           (QPs on the NIC it chose, its CTS FIFO's key there) and the rail
 *           it would like the receiver to use.
 *   ACK     receiver -> sender: the receiver's new link, the first message it
 *           has not completed (resume_seq), and the CTS entries of every
 *           message it is still waiting for, with keys valid on its new NIC.
 *   NACK    receiver -> sender: no healthy NIC on this side: the path is lost.
 *   READY   sender -> receiver: "my new QPs are ready to receive" (RTR, sent
 *           once the ACK connected them).  Until it comes the receiver writes
 *           nothing into them: an RC write that reaches a QP still in INIT
 *           is dropped and resent only one local ACK timeout later (4.3 s at
 *           NCCL's default), which would stall the connection and set off a
 *           second move.
 *   SB_OFFER  sender -> receiver: "a standby path": the sender's link on
 *           another NIC, to be connected now and used by a later move.
 *   SB_ANSWER receiver -> sender: the receiver's standby link, connected to
 *           the offer (or "none": no healthy NIC for it here).
 *   MOVED   receiver -> sender: "my port failed, and I moved onto our standby
 *           by myself": an ACK nobody asked for, with the move's epoch (one
 *           past the last).  The sender moves onto the standby too and answers
 *           READY; until then the receiver announces no new receive.  A
 *           sender that cannot follow (its side of the standby is gone) starts
 *           a move of its own, which supersedes it.
 *
 * The receiver's own port failing with a standby in place is a MOVED: one
 * message where a NOTICE, a REQ and an ACK were three, and the sender's end
 * moves as soon as it reads it.  A REQ of the same epoch that crosses it is
 * ignored by the receiver, and the sender takes the MOVED as its answer.
 *
 * A REQ that names a standby (its id) asks the receiver to move onto the
 * standby both ends hold, connected and ready since its answer: nothing is
 * created, nothing connected, and no READY is needed.  A receiver whose
 * standby is gone or unhealthy answers with a refusing ACK, and the sender
 * offers a new path as without a standby.
 *
 * The sender drives every move, so two sides that detect a failure at once
 * never start two moves: a NOTICE only asks the sender to start one.  Every
 * move has an epoch; a message about an older epoch is ignored.
 */
#ifndef LP_FO_WIRE_H
#define LP_FO_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "wire.h"

enum lp_fo_msg_type {
  LP_MSG_FO_NOTICE = 16,
  LP_MSG_FO_REQ = 17,
  LP_MSG_FO_ACK = 18,
  LP_MSG_FO_NACK = 19,
  LP_MSG_FO_READY = 20,
  LP_MSG_FO_SB_OFFER = 21,
  LP_MSG_FO_SB_ANSWER = 22,
  /* The control channel's own (ctlchan.h): never numbered, never handed up. */
  LP_MSG_CTL_DROP = 23,   /* either side: "I gave connection `path` up" */
  LP_MSG_CTL_OFFER = 24,  /* listening side: "make connection `path` again: connect here" */
  LP_MSG_CTL_REJOIN = 25, /* dialing side, first on the new connection: "this is the one you offered" */
  LP_MSG_FO_MOVED = 26,
};

/* Why a connection moves (also the syslog reason= value). */
enum lp_fo_reason {
  LP_FO_PORT_DOWN = 1,  /* local port went down (async event or polling) */
  LP_FO_PEER_NOTICE,    /* the peer told us its end failed */
  LP_FO_COMPLETION_ERR, /* an error completion on the data path */
  LP_FO_STALL,          /* the watchdog saw no progress */
  LP_FO_DEVICE_FATAL,   /* the NIC reported a fatal error */
  LP_FO_QP_FATAL,       /* a QP of the connection broke */
  LP_FO_FAILBACK,       /* the primary NIC is stable again */
  LP_FO_DEGRADED,       /* the port is up but resends many of its packets (gray.h) */
  LP_FO_REASON_MAX
};

const char *lp_fo_reason_str(int reason);

struct lp_fo_notice {
  struct lp_msg_hdr hdr;
  uint64_t conn_id;
  uint32_t epoch; /* the epoch the notifier was on */
  uint32_t reason;
  int32_t failed_rail; /* notifier's NIC index that failed, -1 unknown */
  uint32_t reserved;
};

struct lp_fo_req {
  struct lp_msg_hdr hdr;
  uint64_t conn_id;
  uint32_t epoch;
  uint32_t reason;
  int32_t rail;       /* NIC index the sender moved to: the receiver prefers the same */
  int32_t avoid_rail; /* receiver's NIC index known to be bad, -1 none */
  uint32_t standby;   /* 0: a new path, `link`; else the id of the standby both ends hold */
  uint32_t reserved;
  struct lp_link_info link;
};

/* One message the receiver still waits for. */
struct lp_fo_pending {
  uint64_t seq;
  uint32_t nreqs;
  uint32_t reserved;
  struct lp_cts cts[LP_MAX_RECVS];
};

struct lp_fo_ack {
  struct lp_msg_hdr hdr;
  uint64_t conn_id;
  uint32_t epoch;
  uint32_t npending;
  uint64_t resume_seq;     /* every message below this one is complete here */
  uint32_t standby;        /* the REQ's standby id, when the receiver moved onto it (a MOVED's: never 0) */
  uint32_t refused;        /* 1: the REQ's standby is gone here; nothing else in this ACK counts (a MOVED: 0) */
  uint32_t primary_failed; /* 1: the receiver is off its primary, not trusted there now (a NOTICE's `reserved`) */
  uint32_t reserved;
  struct lp_link_info link;
  struct lp_fo_pending pending[LP_FIFO_DEPTH];
};

/* Why a receiver refuses a move: the sender fails the connection either
 * way, and says which. */
enum lp_fo_nack_cause {
  LP_NACK_NO_NIC = 0, /* no healthy NIC on the receiver's side */
  LP_NACK_FAILED = 1, /* the receiver's end failed while moving (its log says why) */
};

struct lp_fo_nack {
  struct lp_msg_hdr hdr;
  uint64_t conn_id;
  uint32_t epoch;
  uint32_t reason;
  uint32_t cause; /* enum lp_fo_nack_cause */
  uint32_t reserved;
};

struct lp_fo_ready {
  struct lp_msg_hdr hdr;
  uint64_t conn_id;
  uint32_t epoch; /* the move whose new QPs are ready */
  uint32_t reserved;
};

struct lp_fo_sb_offer {
  struct lp_msg_hdr hdr;
  uint64_t conn_id;
  uint32_t id;        /* grows with every offer of the connection: a late answer names an older one */
  int32_t rail;       /* NIC index of the sender's standby: the receiver prefers the same */
  uint32_t reserved0; /* 0 (was: for a failback, before failbacks revived the primary's path) */
  uint32_t reserved;
  struct lp_link_info link;
};

struct lp_fo_sb_answer {
  struct lp_msg_hdr hdr;
  uint64_t conn_id;
  uint32_t id;        /* the offer answered */
  uint32_t ok;        /* 0: no standby here (no healthy NIC, or it could not be built) */
  uint32_t reserved0; /* 0 (was: the primary not usable, for a failback's standby) */
  uint32_t reserved;
  struct lp_link_info link;
};

/* A control connection given up, or to be made again (ctlchan.h).  `gen`
 * counts the times connection `path` was made again: a DROP or an OFFER
 * about an older one is stale and ignored. */
struct lp_ctl_drop {
  struct lp_msg_hdr hdr;
  uint32_t path;
  uint32_t gen; /* the connection given up */
};

struct lp_ctl_offer {
  struct lp_msg_hdr hdr;
  uint32_t path;
  uint32_t gen;    /* the connection to be made: one more than the one given up */
  uint32_t nonce;  /* the REJOIN repeats it */
  uint16_t family; /* AF_INET or AF_INET6 */
  uint16_t port;   /* network order */
  uint32_t scope_id;
  uint8_t addr[16];
};

struct lp_ctl_rejoin {
  struct lp_msg_hdr hdr;
  uint32_t path;
  uint32_t gen;
  uint32_t nonce;
  uint32_t reserved;
};

/* Largest control message: the receive buffer size. */
#define LP_FO_MSG_MAX sizeof(struct lp_fo_ack)

/* Length of an ACK carrying `npending` messages. */
static inline size_t lp_fo_ack_len(uint32_t npending) {
  return offsetof(struct lp_fo_ack, pending) + (size_t)npending * sizeof(struct lp_fo_pending);
}

/* Validate a complete control message of any type for connection `conn_id`
 * and `nqps` QPs.  Returns its type, or -1 with a reason. */
int lp_fo_msg_check(const void *buf, size_t len, uint64_t conn_id, int nqps, char *why, size_t whylen);

/* The receiver's word on its primary in a checked ACK or MOVED
 * (`primary_failed`), taken into the sender's `*peer_primary_ok`: every
 * answer but a refusal carries the receiver's current word, and the
 * channel keeps its order, so the latest one stands, even from an answer a
 * newer move superseded.  Returns 1 when the primary became usable by it
 * (failing back is to be looked at), else 0. */
int lp_fo_take_primary_word(const struct lp_fo_ack *a, int *peer_primary_ok);

#endif
