/* A connection's control channel over one or two TCP connections
 * (ctlchan.h). */
#include "ctlchan.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fo_wire.h"
#include "ids.h"
#include "log.h"
#include "sock.h"

/* Room for the message at the front and a whole next one: a bulk read
 * always has room for what the front one lacks. */
#define RX_LEN (2 * LP_FO_MSG_MAX)
#define TX_LEN (4 * LP_FO_MSG_MAX)
/* Bytes of each buffer touched at start (below). */
#define TOUCHED_LEN 4096
_Static_assert(TOUCHED_LEN <= RX_LEN && TOUCHED_LEN <= TX_LEN, "the touched start lies in each buffer");
#define REMAKE_FIRST_NS 1000000000ull /* 1 s after the failure */
#define REMAKE_MAX_NS 30000000000ull  /* 30 s between two attempts, at most */

static void remake_clear(struct lp_ctl_remake *rm) {
  rm->path = -1;
  rm->fd = rm->conn = -1;
  rm->off = 0;
  rm->connected = 0;
}

void lp_ctl_init(struct lp_ctl *ch) {
  memset(ch, 0, sizeof(*ch));
  for (int i = 0; i < LP_CTL_PATHS; i++) ch->path[i].fd = -1;
  ch->last_err = -EPIPE;
  remake_clear(&ch->rm);
  ch->rm.backoff_ns = REMAKE_FIRST_NS;
}

int lp_ctl_start(struct lp_ctl *ch, int listens) {
  ch->listens = listens;
  for (int i = 0; i < LP_CTL_PATHS; i++) {
    struct lp_ctl_path *p = &ch->path[i];
    if (p->fd < 0) continue;
    p->rx = malloc(RX_LEN);
    p->tx = malloc(TX_LEN);
    if (p->rx == NULL || p->tx == NULL) return -ENOMEM;
    /* Messages start where the buffers do, and a move's are under 4 KiB:
     * their pages are faulted in now, not by the first message to cross
     * into them, which at a failover is in the middle of a sweep of
     * thousands of moves (docs/SCALE.md). */
    memset(p->rx, 0, TOUCHED_LEN);
    memset(p->tx, 0, TOUCHED_LEN);
    socklen_t alen = sizeof(p->local);
    if (getsockname(p->fd, &p->local.sa, &alen) != 0) p->local.sa.sa_family = AF_UNSPEC; /* not made again */
  }
  return 0;
}

void lp_ctl_not_taken(struct lp_ctl *ch, int i) {
  ch->path[i].failed = 1; /* fd -1: not live, not made again (given_up_path) */
  ch->path[i].told = 0;
}

/* Closed with bytes unread, a TCP socket sends a reset instead of an end
 * of file, and the peer takes its end for a process that died (ECONNRESET)
 * where this one only closed its comm.  Bytes unread at a close are usual:
 * a standby's offer or answer, or a DROP, that crossed it.  They are read
 * away first, a bounded amount (a peer that floods still gets its reset). */
static void close_read(int fd) {
  char buf[4096];
  for (int i = 0; i < 64 && recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0; i++) {}
  close(fd);
}

void lp_ctl_close(struct lp_ctl *ch) {
  for (int i = 0; i < LP_CTL_PATHS; i++) {
    struct lp_ctl_path *p = &ch->path[i];
    if (p->fd >= 0) close_read(p->fd);
    free(p->rx);
    free(p->tx);
  }
  for (int i = 0; i < ch->nspent; i++) close_read(ch->spent[i]);
  lp_sock_abort(ch->rm.fd);
  lp_sock_abort(ch->rm.conn);
  lp_ctl_init(ch);
}

int lp_ctl_live(const struct lp_ctl *ch) {
  int n = 0;
  for (int i = 0; i < LP_CTL_PATHS; i++) n += lp_ctl_path_live(ch, i);
  return n;
}

static const char *where(const struct lp_ctl_path *p, char *buf, size_t len) {
  union lp_sockaddr a;
  socklen_t alen = sizeof(a);
  if (getpeername(p->fd, &a.sa, &alen) != 0) a.sa.sa_family = AF_UNSPEC;
  return a.sa.sa_family == AF_UNSPEC ? "(no address: the connection is gone)" : lp_sockaddr_str(&a, buf, len);
}

/* Give path i up.  Said only while another one goes on: the end of the
 * last one is the caller's to report, as the channel's failure. */
static void give_up(struct lp_ctl *ch, int i, const char *who, int err, const char *why) {
  struct lp_ctl_path *p = &ch->path[i];
  p->failed = 1;
  p->told = 0; /* lp_ctl_tick sends the DROP */
  ch->last_err = err;
  for (int j = 0; j < LP_CTL_PATHS; j++) {
    if (!lp_ctl_path_live(ch, j)) continue;
    char a[64], b[64];
    LP_WARN("control connection to %s over %s failed: %s; the connection's control messages go on over %s", who,
            where(p, a, sizeof(a)), why, where(&ch->path[j], b, sizeof(b)));
    return;
  }
}

/* The peer closes every connection at once (it never closes one it gave
 * up): the first end of file ends the channel, without a word. */
static void peer_closed(struct lp_ctl *ch) {
  for (int j = 0; j < LP_CTL_PATHS; j++) ch->path[j].failed = ch->path[j].told = 1;
  ch->last_err = -EPIPE;
}

const char *lp_ctl_err_str(int err) {
  switch (err < 0 ? -err : err) {
  case 0:
  case EPIPE: return "the peer closed it: its process exited, it closed its comm, or it gave this connection up";
  case ECONNRESET: return "the peer reset it: its process died, or its host restarted";
  case ETIMEDOUT:
    return "no answer on it within TCP's timeout (Connection timed out): the peer's host is down or frozen, or this "
           "connection's network is cut";
  case EHOSTUNREACH:
  case ENETUNREACH: return "the peer's host cannot be reached (No route to host): this connection's network is cut";
  case ENOBUFS: return "its backlog is full: the peer does not read it";
  case EBADMSG:
  case EPROTO: return "the peer sent garbage on it (the WARN before says what)";
  default: return strerror(err < 0 ? -err : err);
  }
}

static void flush_path(struct lp_ctl *ch, int i, const char *who) {
  struct lp_ctl_path *p = &ch->path[i];
  if (!lp_ctl_path_live(ch, i) || p->tx_off == p->tx_len) return;
  int rc = lp_sock_send_progress(p->fd, p->tx, p->tx_len, &p->tx_off);
  if (rc < 0) give_up(ch, i, who, rc, lp_ctl_err_str(rc));
  if (rc == 1) p->tx_len = p->tx_off = 0;
}

int lp_ctl_flush(struct lp_ctl *ch, const char *who) {
  for (int i = 0; i < LP_CTL_PATHS; i++) flush_path(ch, i, who);
  return lp_ctl_live(ch) > 0 ? 0 : ch->last_err;
}

/* Queue msg on every live connection. */
static void queue_all(struct lp_ctl *ch, const char *who, const void *msg, size_t len) {
  for (int i = 0; i < LP_CTL_PATHS; i++) {
    struct lp_ctl_path *p = &ch->path[i];
    if (!lp_ctl_path_live(ch, i)) continue;
    if (p->tx_len + len > TX_LEN) {
      give_up(ch, i, who, -ENOBUFS, "its backlog is full: the peer does not read it");
      continue;
    }
    memcpy(p->tx + p->tx_len, msg, len);
    p->tx_len += len;
    flush_path(ch, i, who);
  }
}

int lp_ctl_send(struct lp_ctl *ch, const char *who, void *msg, size_t len) {
  ((struct lp_msg_hdr *)msg)->reserved = ch->tx_seq++;
  queue_all(ch, who, msg, len);
  return lp_ctl_live(ch) > 0 ? 0 : ch->last_err;
}

int lp_ctl_tx_pending(const struct lp_ctl *ch) {
  for (int i = 0; i < LP_CTL_PATHS; i++)
    if (lp_ctl_path_live(ch, i) && ch->path[i].tx_off != ch->path[i].tx_len) return 1;
  return 0;
}

/* The front message's bytes are spent: what follows it moves to the front
 * (messages are read where the buffer starts: aligned). */
static void take(struct lp_ctl_path *p, size_t len) {
  p->rx_off -= len;
  if (p->rx_off > 0) memmove(p->rx, p->rx + len, p->rx_off);
}

/* Path i's next whole message, at p->rx: 1 (its length in *len), 0 not yet
 * there, -1 given up.  One recv takes all the socket holds (up to the
 * room): a message costs a read and the empty read that ends the pass, not
 * a header's, a body's and the empty one (docs/SCALE.md).  The empty read
 * stays: a short read does not say that no end of file or reset waits
 * behind the data, and the process's edge-triggered set would not report
 * it again. */
static int read_path(struct lp_ctl *ch, int i, const char *who, size_t *len) {
  struct lp_ctl_path *p = &ch->path[i];
  if (p->rx_drop > 0) {
    take(p, p->rx_drop);
    p->rx_drop = 0;
  }
  for (;;) {
    size_t want = sizeof(struct lp_msg_hdr);
    if (p->rx_off >= want) {
      const struct lp_msg_hdr *h = (const struct lp_msg_hdr *)p->rx;
      if (h->magic != LP_MSG_MAGIC || h->length < want || h->length > LP_FO_MSG_MAX) {
        char why[96];
        snprintf(why, sizeof(why), "garbage on it (magic 0x%x, length %u)", h->magic, h->length);
        give_up(ch, i, who, -EBADMSG, why);
        return -1;
      }
      want = h->length;
    }
    if (p->rx_off >= want) {
      *len = want;
      return 1;
    }
    ssize_t n = lp_sock_recv_some(p->fd, p->rx + p->rx_off, RX_LEN - p->rx_off);
    if (n == -EPIPE) { /* end of file: the peer closed its comm, and with it every connection */
      peer_closed(ch);
      return -1;
    }
    if (n < 0) {
      give_up(ch, i, who, (int)n, lp_ctl_err_str((int)n));
      return -1;
    }
    if (n == 0) return 0;
    p->rx_off += (size_t)n;
  }
}

/* ---- making a connection again ---- */

static void remake_attempt_failed(struct lp_ctl *ch, const char *who, uint64_t now, int err) {
  struct lp_ctl_remake *rm = &ch->rm;
  char a[64];
  if (ch->listens) {
    rm->backoff_ns = rm->backoff_ns * 2 > REMAKE_MAX_NS ? REMAKE_MAX_NS : rm->backoff_ns * 2;
    rm->next_ns = now + rm->backoff_ns;
    LP_INFO(NCCL_NET, "control connection to %s over %s: making it again failed: %s; next try in %llu s", who,
            lp_sockaddr_str(&ch->path[rm->path].local, a, sizeof(a)), strerror(-err),
            (unsigned long long)(rm->backoff_ns / 1000000000ull));
  } else {
    LP_INFO(NCCL_NET, "control connection %d to %s: making it again failed: %s (the peer offers it again)", rm->path,
            who, strerror(-err));
  }
  lp_sock_abort(rm->fd);
  lp_sock_abort(rm->conn);
  remake_clear(rm);
}

/* Connection i is made again on fd, of the offer's generation `gen`: both
 * ends send on it from here on.  The old fd joins the spent ones.  Each end
 * takes the offer's number rather than counting: the dialing end installs
 * once its REJOIN is sent, the listening end once it is read, and an
 * attempt the listener gave up in between (its deadline, a reset) left the
 * dialing end one ahead, which made every later offer look stale to it. */
static void install(struct lp_ctl *ch, const char *who, int i, int fd, uint32_t gen) {
  struct lp_ctl_path *p = &ch->path[i];
  ch->spent[ch->nspent++] = p->fd;
  p->fd = fd;
  p->failed = p->told = 0;
  p->gen = gen;
  p->rx_off = p->rx_drop = p->tx_len = p->tx_off = 0;
  char a[64];
  LP_INFO(NCCL_NET, "control connection to %s over %s made again (%d of %d connections in use)", who,
          where(p, a, sizeof(a)), lp_ctl_live(ch), LP_CTL_PATHS);
  remake_clear(&ch->rm);
  ch->rm.backoff_ns = REMAKE_FIRST_NS;
  ch->rm.next_ns = 0;
}

/* The given-up connection to make again (the lowest), or -1. */
static int given_up_path(const struct lp_ctl *ch) {
  for (int i = 0; i < LP_CTL_PATHS; i++)
    if (ch->path[i].fd >= 0 && ch->path[i].failed && ch->path[i].local.sa.sa_family != AF_UNSPEC) return i;
  return -1;
}

/* Listening end: listen where connection i was accepted, and offer it. */
static void offer(struct lp_ctl *ch, const char *who, int i, uint64_t now) {
  struct lp_ctl_remake *rm = &ch->rm;
  union lp_sockaddr local = ch->path[i].local, bound;
  if (local.sa.sa_family == AF_INET)
    local.in.sin_port = 0;
  else
    local.in6.sin6_port = 0;
  rm->path = i;
  rm->fd = lp_sock_listen(&local, &bound);
  if (rm->fd < 0) {
    int err = rm->fd;
    rm->fd = -1;
    remake_attempt_failed(ch, who, now, err);
    return;
  }
  rm->deadline_ns = now + LP_CTL_REMAKE_WAIT_NS;
  struct lp_ctl_offer m;
  memset(&m, 0, sizeof(m));
  lp_msg_hdr_init(&m.hdr, (enum lp_msg_type)LP_MSG_CTL_OFFER, sizeof(m));
  m.path = (uint32_t)i;
  /* Past every generation offered before: the dialing end may have taken
   * one this end then gave up. */
  struct lp_ctl_path *p = &ch->path[i];
  m.gen = (p->offered_gen > p->gen ? p->offered_gen : p->gen) + 1;
  p->offered_gen = m.gen;
  m.nonce = (uint32_t)lp_random_u64(); /* the clock and an fd number were guessable */
  lp_sockaddr_to_wire(&bound, &m.family, &m.port, &m.scope_id, m.addr);
  rm->rejoin.path = m.path;
  rm->rejoin.gen = m.gen;
  rm->rejoin.nonce = m.nonce;
  queue_all(ch, who, &m, sizeof(m));
}

static void listen_step(struct lp_ctl *ch, const char *who, uint64_t now) {
  struct lp_ctl_remake *rm = &ch->rm;
  if (rm->path < 0) {
    int i = given_up_path(ch);
    if (i < 0 || ch->nspent == LP_CTL_SPENT) return;
    if (rm->next_ns == 0) rm->next_ns = now + rm->backoff_ns;
    if (now >= rm->next_ns) offer(ch, who, i, now);
    return;
  }
  if (rm->conn < 0) {
    int fd = lp_sock_accept(rm->fd);
    if (fd < 0) {
      remake_attempt_failed(ch, who, now, fd);
      return;
    }
    if (fd > 0) rm->conn = fd;
  }
  if (rm->conn >= 0) {
    int r = lp_sock_recv_progress(rm->conn, &rm->in, sizeof(rm->in), &rm->off);
    if (r == 1) {
      const struct lp_ctl_rejoin *a = &rm->in, *b = &rm->rejoin;
      if (a->hdr.magic == LP_MSG_MAGIC && a->hdr.type == LP_MSG_CTL_REJOIN && a->hdr.length == sizeof(*a) &&
          a->path == b->path && a->gen == b->gen && a->nonce == b->nonce) {
        int fd = rm->conn;
        rm->conn = -1;
        lp_sock_abort(rm->fd);
        install(ch, who, (int)b->path, fd, b->gen);
        return;
      }
      r = -EPROTO;
    }
    if (r < 0) {
      remake_attempt_failed(ch, who, now, r);
      return;
    }
  }
  if (now >= rm->deadline_ns) remake_attempt_failed(ch, who, now, -ETIMEDOUT);
}

/* Dialing end: connect to the offer and send the REJOIN first. */
static void dial_step(struct lp_ctl *ch, const char *who, uint64_t now) {
  struct lp_ctl_remake *rm = &ch->rm;
  if (rm->offered && rm->path < 0) {
    const struct lp_ctl_offer *o = &rm->offer;
    union lp_sockaddr to;
    lp_sockaddr_from_wire(&to, o->family, o->port, o->scope_id, o->addr);
    rm->offered = 0;
    rm->path = (int)o->path;
    memset(&rm->rejoin, 0, sizeof(rm->rejoin));
    lp_msg_hdr_init(&rm->rejoin.hdr, (enum lp_msg_type)LP_MSG_CTL_REJOIN, sizeof(rm->rejoin));
    rm->rejoin.path = o->path;
    rm->rejoin.gen = o->gen;
    rm->rejoin.nonce = o->nonce;
    rm->deadline_ns = now + LP_CTL_REMAKE_WAIT_NS;
    rm->fd = lp_sock_connect_start(&to);
    if (rm->fd < 0) {
      int err = rm->fd;
      rm->fd = -1;
      remake_attempt_failed(ch, who, now, err);
      return;
    }
  }
  if (rm->path < 0) return;
  int r = rm->connected ? 1 : lp_sock_connect_check(rm->fd);
  if (r == 1) {
    rm->connected = 1;
    r = lp_sock_send_progress(rm->fd, &rm->rejoin, sizeof(rm->rejoin), &rm->off);
    if (r == 1) {
      install(ch, who, rm->path, rm->fd, rm->rejoin.gen);
      return;
    }
  }
  if (r < 0)
    remake_attempt_failed(ch, who, now, r);
  else if (now >= rm->deadline_ns)
    remake_attempt_failed(ch, who, now, -ETIMEDOUT);
}

uint64_t lp_ctl_next_tick_ns(const struct lp_ctl *ch) {
  if (lp_ctl_live(ch) == 0) return UINT64_MAX; /* lp_ctl_tick does nothing more */
  for (int i = 0; i < LP_CTL_PATHS; i++)
    if (ch->path[i].failed && !ch->path[i].told) return 0;
  if (ch->rm.path >= 0 || ch->rm.offered) return 0;
  if (!ch->listens || given_up_path(ch) < 0 || ch->nspent == LP_CTL_SPENT) return UINT64_MAX;
  return ch->rm.next_ns; /* 0 until a tick set it */
}

void lp_ctl_tick(struct lp_ctl *ch, const char *who, uint64_t now) {
  if (lp_ctl_live(ch) == 0) return; /* the channel failed: nothing left to make one again over */
  for (int i = 0; i < LP_CTL_PATHS; i++) {
    struct lp_ctl_path *p = &ch->path[i];
    if (!p->failed || p->told) continue; /* fd -1 too: one announced and not taken (lp_ctl_not_taken) */
    struct lp_ctl_drop m;
    memset(&m, 0, sizeof(m));
    lp_msg_hdr_init(&m.hdr, (enum lp_msg_type)LP_MSG_CTL_DROP, sizeof(m));
    m.path = (uint32_t)i;
    m.gen = p->gen;
    p->told = 1;
    queue_all(ch, who, &m, sizeof(m));
  }
  if (ch->listens)
    listen_step(ch, who, now);
  else
    dial_step(ch, who, now);
}

/* ---- receiving ---- */

/* The channel's own message, whole in path i's buffer: DROP or OFFER.
 * Returns 0, or -1 after giving path i up for a malformed one. */
static int own_message(struct lp_ctl *ch, int i, const char *who) {
  const struct lp_msg_hdr *h = (const struct lp_msg_hdr *)ch->path[i].rx;
  size_t want = h->type == LP_MSG_CTL_DROP ? sizeof(struct lp_ctl_drop) : sizeof(struct lp_ctl_offer);
  const struct lp_ctl_offer *o = (const struct lp_ctl_offer *)h; /* path and gen lead both */
  const char *bad = NULL;
  if (h->version != LP_PROTO_VERSION || h->length != want)
    bad = "a control connection message of the wrong version or size";
  else if (o->path >= LP_CTL_PATHS)
    bad = "a control connection message for a connection that does not exist";
  else if (h->type == LP_MSG_CTL_OFFER && (ch->listens || (o->family != AF_INET && o->family != AF_INET6)))
    bad = "an offer the listening end cannot get, or of an unknown address family";
  if (bad != NULL) {
    give_up(ch, i, who, -EPROTO, bad);
    return -1;
  }
  struct lp_ctl_path *p = &ch->path[o->path];
  if (h->type == LP_MSG_CTL_DROP) {
    if (o->gen == p->gen && lp_ctl_path_live(ch, (int)o->path)) {
      p->failed = p->told = 1; /* the peer said why in its log */
      LP_INFO(NCCL_NET, "control connection %u to %s: the peer gave it up", o->path, who);
    }
    return 0;
  }
  /* An offer past the connection in use (the listening end may skip
   * numbers: offer()); stale otherwise, or beyond what we keep. */
  if (o->gen <= p->gen || p->fd < 0 || ch->nspent == LP_CTL_SPENT) return 0;
  p->failed = p->told = 1; /* the peer gave it up: it offers it again */
  if (ch->rm.path >= 0) {  /* an attempt of ours it no longer waits for */
    lp_sock_abort(ch->rm.fd);
    remake_clear(&ch->rm);
  }
  ch->rm.offer = *o;
  ch->rm.offered = 1;
  return 0;
}

int lp_ctl_recv(struct lp_ctl *ch, const char *who, const void **msg, size_t *len) {
  int held = 0; /* connections whose next message is ahead of the one due */
  for (int i = 0; i < LP_CTL_PATHS; i++) {
    struct lp_ctl_path *p = &ch->path[i];
    while (lp_ctl_path_live(ch, i) && read_path(ch, i, who, len) == 1) {
      const struct lp_msg_hdr *h = (const struct lp_msg_hdr *)p->rx;
      if (h->type == LP_MSG_CTL_DROP || h->type == LP_MSG_CTL_OFFER) {
        if (own_message(ch, i, who) == 0) take(p, *len);
        continue;
      }
      uint32_t seq = h->reserved;
      if ((int32_t)(seq - ch->rx_seq) > 0) { /* a connection made again: the others bring the ones before */
        held++;
        break;
      }
      if (seq == ch->rx_seq) {
        ch->rx_seq++;
        p->rx_drop = *len;
        *msg = p->rx;
        return 1;
      }
      take(p, *len); /* a copy of one another connection delivered */
    }
  }
  if (held > 0 && held == lp_ctl_live(ch)) { /* every connection is ahead: the ones due were lost */
    for (int i = 0; i < LP_CTL_PATHS; i++) {
      if (!lp_ctl_path_live(ch, i)) continue;
      char why[96];
      snprintf(why, sizeof(why), "message %u arrived where %u was due",
               ((const struct lp_msg_hdr *)ch->path[i].rx)->reserved, ch->rx_seq);
      give_up(ch, i, who, -EPROTO, why);
    }
  }
  return lp_ctl_live(ch) > 0 ? 0 : ch->last_err;
}

int lp_ctl_peer_gone(struct lp_ctl *ch, const char *who, int *err) {
  *err = 0;
  for (int i = 0; i < LP_CTL_PATHS; i++) {
    if (!lp_ctl_path_live(ch, i)) continue;
    char b;
    ssize_t n = recv(ch->path[i].fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) {
      peer_closed(ch);
      return 1;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      give_up(ch, i, who, -errno, strerror(errno));
  }
  if (lp_ctl_live(ch) > 0) return 0;
  *err = ch->last_err == -EPIPE ? 0 : ch->last_err;
  return 1;
}
