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
#include "log.h"
#include "sock.h"

#define RX_LEN LP_FO_MSG_MAX
#define TX_LEN (2 * LP_FO_MSG_MAX)

void lp_ctl_init(struct lp_ctl *ch) {
  memset(ch, 0, sizeof(*ch));
  for (int i = 0; i < LP_CTL_PATHS; i++) ch->path[i].fd = -1;
  ch->last_err = -EPIPE;
}

int lp_ctl_start(struct lp_ctl *ch) {
  for (int i = 0; i < LP_CTL_PATHS; i++) {
    struct lp_ctl_path *p = &ch->path[i];
    if (p->fd < 0) continue;
    p->rx = malloc(RX_LEN);
    p->tx = malloc(TX_LEN);
    if (p->rx == NULL || p->tx == NULL) return -ENOMEM;
  }
  return 0;
}

void lp_ctl_close(struct lp_ctl *ch) {
  for (int i = 0; i < LP_CTL_PATHS; i++) {
    struct lp_ctl_path *p = &ch->path[i];
    if (p->fd >= 0) close(p->fd);
    free(p->rx);
    free(p->tx);
  }
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
  return a.sa.sa_family == AF_UNSPEC ? "(no address: reset)" : lp_sockaddr_str(&a, buf, len);
}

/* Give path i up.  Said only while another one goes on: the end of the
 * last one is the caller's to report, as the channel's failure. */
static void give_up(struct lp_ctl *ch, int i, const char *who, int err, const char *why) {
  struct lp_ctl_path *p = &ch->path[i];
  p->failed = 1;
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
  for (int j = 0; j < LP_CTL_PATHS; j++) ch->path[j].failed = 1;
  ch->last_err = -EPIPE;
}

static const char *sock_why(int err) { return err == -EPIPE ? "it was closed or timed out" : strerror(-err); }

static void flush_path(struct lp_ctl *ch, int i, const char *who) {
  struct lp_ctl_path *p = &ch->path[i];
  if (!lp_ctl_path_live(ch, i) || p->tx_off == p->tx_len) return;
  int rc = lp_sock_send_progress(p->fd, p->tx, p->tx_len, &p->tx_off);
  if (rc < 0) give_up(ch, i, who, rc, sock_why(rc));
  if (rc == 1) p->tx_len = p->tx_off = 0;
}

int lp_ctl_flush(struct lp_ctl *ch, const char *who) {
  for (int i = 0; i < LP_CTL_PATHS; i++) flush_path(ch, i, who);
  return lp_ctl_live(ch) > 0 ? 0 : ch->last_err;
}

int lp_ctl_send(struct lp_ctl *ch, const char *who, void *msg, size_t len) {
  ((struct lp_msg_hdr *)msg)->reserved = ch->tx_seq++;
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
  return lp_ctl_live(ch) > 0 ? 0 : ch->last_err;
}

int lp_ctl_tx_pending(const struct lp_ctl *ch) {
  for (int i = 0; i < LP_CTL_PATHS; i++)
    if (lp_ctl_path_live(ch, i) && ch->path[i].tx_off != ch->path[i].tx_len) return 1;
  return 0;
}

/* Read path i up to one whole message: 1 whole (its length in *len), 0 not
 * yet, -1 given up. */
static int read_path(struct lp_ctl *ch, int i, const char *who, size_t *len) {
  struct lp_ctl_path *p = &ch->path[i];
  for (;;) {
    size_t want = sizeof(struct lp_msg_hdr);
    if (p->rx_off >= want) {
      const struct lp_msg_hdr *h = (const struct lp_msg_hdr *)p->rx;
      if (h->magic != LP_MSG_MAGIC || h->length < want || h->length > RX_LEN) {
        char why[96];
        snprintf(why, sizeof(why), "garbage on it (magic 0x%x, length %u)", h->magic, h->length);
        give_up(ch, i, who, -EBADMSG, why);
        return -1;
      }
      want = h->length;
    }
    if (p->rx_off == want) {
      *len = want;
      return 1;
    }
    int rc = lp_sock_recv_progress(p->fd, p->rx, want, &p->rx_off);
    if (rc == -EPIPE) { /* end of file: the peer closed its comm, and with it every connection */
      peer_closed(ch);
      return -1;
    }
    if (rc < 0) {
      give_up(ch, i, who, rc, sock_why(rc));
      return -1;
    }
    if (rc == 0) return 0;
  }
}

int lp_ctl_recv(struct lp_ctl *ch, const char *who, const void **msg, size_t *len) {
  for (int i = 0; i < LP_CTL_PATHS; i++) {
    struct lp_ctl_path *p = &ch->path[i];
    while (lp_ctl_path_live(ch, i) && read_path(ch, i, who, len) == 1) {
      uint32_t seq = ((const struct lp_msg_hdr *)p->rx)->reserved;
      p->rx_off = 0;
      if (seq == ch->rx_seq) {
        ch->rx_seq++;
        *msg = p->rx;
        return 1;
      }
      if ((int32_t)(seq - ch->rx_seq) > 0) { /* a gap: this connection lost a message */
        char why[96];
        snprintf(why, sizeof(why), "message %u arrived where %u was due", seq, ch->rx_seq);
        give_up(ch, i, who, -EPROTO, why);
      }
      /* else a copy of one the other connection delivered */
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
