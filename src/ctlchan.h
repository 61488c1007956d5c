/*
 * A connection's control channel: the control messages of its moves
 * (fo_wire.h) over one or two TCP connections to the peer.
 *
 * The first is the setup connection (connect.c).  The second is made at
 * setup over another interface, where the listener has one (the handle's
 * second address, sock.h lp_oob_pick_second): a fault a move is for may
 * also take the first one's interface (IPoIB on the failing HCA, its RoCE
 * netdev, a management port that fails with it), and TCP notices a cable cut
 * on the far side only after its user timeout (10 s), while the move waits.
 *
 * Every message goes out on every connection still in use, numbered (the
 * header's `reserved` field), and is delivered once: each connection keeps
 * its order, so the first copy of message n always arrives after message
 * n - 1 was delivered, and every later copy is dropped.  A connection that
 * fails (an error, garbage, a backlog it does not take) is given up and the
 * channel goes on over the other; only when none is left does the channel
 * fail.
 *
 * A connection given up is made again, over the same interfaces, once they
 * carry it (docs/FAILOVER.md, "The control channel"): otherwise a long job
 * loses one connection per fault, and the channel dies at the second.  The
 * end that gave it up says so (DROP) over the others; the listening end
 * (the receiver: it accepted both at setup) opens a listener on the
 * address it had for it and OFFERs it; the dialing end connects and sends
 * REJOIN first; both then send on it.  An attempt not done within
 * LP_CTL_REMAKE_WAIT_NS is dropped and made again later, 1 s after the
 * failure at first, then twice as long each time up to 30 s.  A connection
 * made again joins the sequence where it stands: its first message may be
 * ahead of the next one due, and waits until the others delivered the ones
 * before it.
 */
#ifndef LP_CTLCHAN_H
#define LP_CTLCHAN_H

#include <stddef.h>
#include <stdint.h>

#include "fo_wire.h"
#include "sock.h"

#define LP_CTL_PATHS 2
/* Connections given up and made again in a comm's life, at most: their fds
 * stay open until lp_ctl_close (below), so that the idle watch never arms
 * a number the kernel handed out again. */
#define LP_CTL_SPENT 16
#define LP_CTL_REMAKE_WAIT_NS 2000000000ull /* 2 s for an attempt */

struct lp_ctl_path {
  int fd;                  /* -1: none */
  int failed;              /* given up; its fd stays open until lp_ctl_close (the idle watch may still have it) */
  int told;                /* the peer knows it was given up: its DROP came, or ours went */
  uint32_t gen;            /* the generation of the connection in use: the offer it was made again on (0: set up) */
  uint32_t offered_gen;    /* listening end: the highest generation offered for it, taken or not */
  union lp_sockaddr local; /* listening end: the address it was accepted on, to listen there again */
  /* rx holds what the socket gave, read in bulk: the next message first.
   * rx_off bytes are in it; the first rx_drop of them are a message already
   * handed out (valid until the next lp_ctl_recv, dropped then). */
  size_t rx_off, rx_drop, tx_len, tx_off;
  uint8_t *rx, *tx; /* lp_ctl_start: two messages, and a backlog of four */
};

/* A connection being made again: at most one at a time. */
struct lp_ctl_remake {
  int path;                    /* -1: none under way */
  int fd;                      /* listening end: the listener; dialing end: the socket connecting */
  int conn;                    /* listening end: the accepted socket, until its REJOIN is whole */
  int connected;               /* dialing end: the connect completed; the REJOIN goes out */
  size_t off;                  /* bytes of `rejoin` moved */
  struct lp_ctl_rejoin rejoin; /* listening end: the one awaited; dialing end: the one to send */
  struct lp_ctl_rejoin in;     /* listening end: the one arriving */
  uint64_t deadline_ns;
  uint64_t next_ns;    /* listening end: the next attempt (0: to be set from the next tick's clock) */
  uint64_t backoff_ns; /* the wait before that */
  int offered;         /* dialing end: `offer` waits to be tried */
  struct lp_ctl_offer offer;
};

struct lp_ctl {
  struct lp_ctl_path path[LP_CTL_PATHS];
  uint32_t tx_seq; /* the next message's number */
  uint32_t rx_seq; /* the next number to deliver */
  int last_err;    /* -errno of the last connection given up */
  int listens;     /* this end accepted the connections: it makes them again */
  struct lp_ctl_remake rm;
  int spent[LP_CTL_SPENT]; /* fds of connections made again */
  int nspent;
};

/* No connection yet (every fd -1). */
void lp_ctl_init(struct lp_ctl *ch);
/* Buffers for the connections set up (failover on); `listens`: this end
 * accepted them.  0 or -ENOMEM. */
int lp_ctl_start(struct lp_ctl *ch, int listens);
/* Make given-up connections again, and tell the peer of those given up;
 * call it often (every progress call: it costs nothing while none is). */
void lp_ctl_tick(struct lp_ctl *ch, const char *who, uint64_t now);
/* Listening end, at setup: connection i was announced (READY's `joined`)
 * but did not come in time, and the comm goes on without it.  The peer made
 * it and sends on it; the next tick tells it with a DROP, as for one given
 * up (connect.c).  It is never made again (none was set up here). */
void lp_ctl_not_taken(struct lp_ctl *ch, int i);
/* When lp_ctl_tick next has work, for a caller that does not tick at every
 * progress call (the idle watch): 0 at once (a DROP to send, an attempt
 * under way, an offer to take), the listening end's next attempt, or
 * UINT64_MAX when nothing is to be made again or told. */
uint64_t lp_ctl_next_tick_ns(const struct lp_ctl *ch);
/* Close every fd, free the buffers. */
void lp_ctl_close(struct lp_ctl *ch);
/* Connections set up and not given up. */
int lp_ctl_live(const struct lp_ctl *ch);
/* 1 when path i is set up and not given up (the idle watch arms it). */
static inline int lp_ctl_path_live(const struct lp_ctl *ch, int i) {
  return ch->path[i].fd >= 0 && !ch->path[i].failed;
}

/* Queue a message (its header's `reserved` gets its number) on every live
 * connection and send what the sockets take now.  0, or -errno once no
 * connection is left.  `who` names the peer in the WARN of a connection
 * given up. */
int lp_ctl_send(struct lp_ctl *ch, const char *who, void *msg, size_t len);
/* Send what is queued; 0 or -errno as above. */
int lp_ctl_flush(struct lp_ctl *ch, const char *who);
/* 1 while some live connection has bytes queued. */
int lp_ctl_tx_pending(const struct lp_ctl *ch);
/* The next message: 1 with *msg and *len (valid until the next call), 0 when
 * none has arrived whole, -errno once no connection is left. */
int lp_ctl_recv(struct lp_ctl *ch, const char *who, const void **msg, size_t *len);
/* Without reading: 1 when the peer closed a connection (*err 0; it closes
 * all of them at once) or none is left (*err its error); connections that
 * failed on their own are given up on the way. */
int lp_ctl_peer_gone(struct lp_ctl *ch, const char *who, int *err);
/* Why a control connection ended, in words, from the -errno above (0 or
 * -EPIPE: an end of file, or a send after the peer's close). */
const char *lp_ctl_err_str(int err);

#endif
