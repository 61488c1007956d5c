/*
 * Connection setup: listen, connect and accept as non-blocking state
 * machines over an out-of-band TCP socket.  Each call does what can be done
 * without waiting and returns a NULL comm until the connection is ready.
 *
 *   connector                          listener
 *   TCP connect  ------------------->  accept (any number of strangers)
 *   HELLO {listen id, QPs, FIFO} --->  validate, create QPs, RTR/RTS
 *                <-------------------  ACCEPT {QPs, record buffer}
 *   RTR/RTS, READY  ---------------->  recv comm ready
 *   send comm ready
 *
 * The TCP socket stays open afterwards: it is the connection's control
 * channel, independent of the RDMA path.  With failover on, and where the
 * listener has a second interface (the handle's second address), the
 * connector also makes a second TCP connection there at the same time and
 * names the connection in it (JOIN); READY says whether it did, and the
 * listener waits for that JOIN before the comm is ready.  The control
 * channel then runs over both (ctlchan.h).  Either end that cannot make or
 * find the second connection within LP_ALT_SETUP_NS goes on with one.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "connect.h"

#include "clock.h"
#include "ctlchan.h"
#include "failover.h"
#include "ids.h"
#include "idle_watch.h"
#include "linkpass.h"
#include "log.h"

#define LP_LISTEN_MAGIC 0x4c504c69u
#define LP_MAX_PENDING 16
/* A connection on a LAN is made in well under a millisecond: a second
 * interface that does not answer within this is not waited for (each
 * connection waits at most this long once, and NCCL sets them up side by
 * side). */
#define LP_ALT_SETUP_NS (1000ull * 1000 * 1000)

/* ---- connector ----------------------------------------------------------- */

enum { CS_CONNECTING = 1, CS_SEND_HELLO, CS_RECV_ACCEPT, CS_SEND_READY };
/* The second control connection, beside the states above. */
enum { ALT_NONE = 0, ALT_CONNECTING, ALT_SEND_JOIN, ALT_JOINED };

struct lp_connect_stage {
  struct lp_connect_stage *next;
  uint64_t token;
  int state;
  uint64_t deadline_ns; /* 0: none */
  union lp_sockaddr to;
  struct lp_send_comm *comm;
  struct lp_msg_hello hello;
  struct lp_msg_accept accept;
  struct lp_msg_ready ready;
  size_t off;
  int alt_state;
  uint64_t alt_deadline_ns;
  union lp_sockaddr alt_to;
  struct lp_msg_hello join;
  size_t alt_off;
};

/* ---- listener ------------------------------------------------------------ */

struct lp_pending {
  int fd; /* -1: free */
  uint64_t since_ns;
  int complete; /* the hello arrived whole and valid (a JOIN waits here for its connection's READY) */
  size_t off;
  union lp_sockaddr from;
  struct lp_msg_hello hello;
};

enum { AS_SEND_REPLY = 1, AS_RECV_READY, AS_AWAIT_JOIN };

struct lp_accept_stage {
  int state;
  uint64_t deadline_ns;
  uint64_t join_deadline_ns;
  struct lp_recv_comm *comm;
  struct lp_msg_accept reply;
  struct lp_msg_ready ready;
  size_t off;
};

struct lp_listen_comm {
  uint32_t magic;
  struct lp_setup *setup;
  int dev;
  int fd;
  int alt_fd; /* on the second interface; -1: none */
  int traffic_class;
  uint64_t listen_id;
  union lp_sockaddr addr, alt_addr;
  struct lp_pending pend[LP_MAX_PENDING];
  struct lp_accept_stage *stage;
  int accept_err; /* the last accept error warned about (-errno; 0: none since) */
  int full_said;  /* a table full of connections being set up was warned about (until one made room) */
};

static uint64_t deadline_after(uint64_t ns) { return ns > 0 ? lp_now_ns() + ns : 0; }
static int expired(uint64_t deadline) { return deadline != 0 && lp_now_ns() > deadline; }

/* How long a connection waits for its second control connection:
 * LP_ALT_SETUP_NS, and never more than half of LINKPASS_SETUP_TIMEOUT_MS,
 * so that the setup, which goes on with one, still has time to finish. */
static uint64_t alt_wait_ns(const struct lp_env *env) {
  uint64_t setup = env->cfg.ns.setup_timeout_ns;
  return setup > 0 && setup / 2 < LP_ALT_SETUP_NS ? setup / 2 : LP_ALT_SETUP_NS;
}

/* What to do about an error of socket(2), connect(2) or accept(2) that
 * says this process ran out of descriptors. */
static const char *open_file_hint(int err) {
  return err == EMFILE || err == ENFILE ? " (raise the open-file limit, ulimit -n)" : "";
}

static const char *sock_err(int rc) { return rc == -EPIPE ? "connection closed by peer" : strerror(-rc); }

static void describe_peer(char *out, size_t len, const char *host, const union lp_sockaddr *addr,
                          const struct lp_link_info *l) {
  char a[64];
  snprintf(out, len, "%s (%s) %s:%u", host, lp_sockaddr_str(addr, a, sizeof(a)), l->dev_name, l->port);
}

/* Allocate a comm with its page-aligned control memory. */
static void *comm_alloc(const struct lp_setup *p, size_t size, int kind, size_t ctrl_len, int tc) {
  struct lp_comm *c = calloc(1, size);
  if (c == NULL) return NULL;
  c->env = p->env;
  c->health = p->health;
  c->mrs = p->mrs;
  c->mr_nics = ~0u;
  if (posix_memalign(&c->ctrl, 4096, ctrl_len) != 0) {
    free(c);
    return NULL;
  }
  memset(c->ctrl, 0, ctrl_len);
  c->ctrl_len = ctrl_len;
  c->magic = LP_COMM_MAGIC;
  c->kind = kind;
  lp_ctl_init(&c->ctl);
  c->traffic_class = tc;
  snprintf(c->peer, sizeof(c->peer), "(connecting)");
  return c;
}

/* A connection set up, either end: failover state, and the idle watch
 * (idle_watch.h) answers its moves while NCCL is not calling it. */
static void comm_ready(const struct lp_setup *p, struct lp_comm *c) {
  lp_fo_init(c);
  /* A second connection announced and not taken (accept_step): the DROP
   * goes now, before the idle watch shares the comm, and before NCCL's
   * closeListen resets that connection (the connector would WARN of the
   * reset as of a failure). */
  if (c->fo != NULL) lp_ctl_tick(&c->ctl, c->peer, lp_now_ns());
  if (p->ready != NULL) lp_fo_watch_ready(c, p->ready);
  if (c->fo != NULL && p->idle != NULL) lp_idle_watch_add(p->idle, c);
}

static void stage_unlink(struct lp_setup *p, struct lp_connect_stage *st) {
  pthread_mutex_lock(&p->lock);
  for (struct lp_connect_stage **pp = &p->stages; *pp; pp = &(*pp)->next) {
    if (*pp == st) {
      *pp = st->next;
      break;
    }
  }
  pthread_mutex_unlock(&p->lock);
}

static void stage_free(struct lp_setup *p, struct lp_connect_stage *st, struct lp_handle *h) {
  stage_unlink(p, st);
  if (h) h->connect_token = 0;
  if (st->comm) lp_comm_destroy(&st->comm->base);
  free(st);
}

/* NCCL_IB_SUBNET_AWARE_ROUTING: on RoCE fabrics whose NICs sit on
 * different subnets (point-to-point links, no switch), the device NCCL
 * chose may not reach the listener's; take one on its subnet instead. */
static int subnet_dev(const struct lp_env *env, int dev, const struct lp_handle *h) {
  if (!env->cfg.subnet_routing) return dev;
  int d = lp_subnet_pick(env->devs, env->ndevs, dev, h->listen_gid, env->cfg.subnet_prefix);
  if (d != dev) {
    char a[64], b[64], c[64];
    union ibv_gid peer;
    memcpy(peer.raw, h->listen_gid, sizeof(peer.raw));
    LP_INFO(NCCL_NET,
            "NCCL_IB_SUBNET_AWARE_ROUTING: connecting from %s:%d (%s) instead of %s:%d (%s): it shares a /%d "
            "with the listener's GID %s",
            env->devs[d].name, env->devs[d].port, lp_gid_str(&env->devs[d].gid, a, sizeof(a)), env->devs[dev].name,
            env->devs[dev].port, lp_gid_str(&env->devs[dev].gid, b, sizeof(b)), env->cfg.subnet_prefix,
            lp_gid_str(&peer, c, sizeof(c)));
  }
  return d;
}

static void alt_drop(struct lp_connect_stage *st, int err) {
  char a[64];
  struct lp_ctl_path *path = &st->comm->base.ctl.path[1];
  LP_INFO(NCCL_INIT | NCCL_NET,
          "connect: no second control connection to %s: %s; connection 0x%llx's control channel has one",
          lp_sockaddr_str(&st->alt_to, a, sizeof(a)), strerror(-err), (unsigned long long)st->comm->base.conn_id);
  if (path->fd >= 0) close(path->fd);
  path->fd = -1;
  st->alt_state = ALT_NONE;
}

/* The second control connection, to the listener's second address. */
static void alt_start(struct lp_connect_stage *st, const struct lp_handle *h, uint64_t wait_ns) {
  lp_sockaddr_from_wire(&st->alt_to, h->alt_family, h->alt_port, h->alt_scope_id, h->alt_addr);
  st->join = st->hello;
  st->join.hdr.type = LP_MSG_JOIN;
  memset(&st->join.link, 0, sizeof(st->join.link));
  st->alt_state = ALT_CONNECTING;
  st->alt_deadline_ns = deadline_after(wait_ns);
  int fd = lp_sock_connect_start(&st->alt_to);
  if (fd < 0) {
    alt_drop(st, fd);
    return;
  }
  st->comm->base.ctl.path[1].fd = fd;
}

static void alt_step(struct lp_connect_stage *st) {
  int fd = st->comm->base.ctl.path[1].fd, r = 0;
  switch (st->alt_state) {
  case ALT_CONNECTING:
    r = lp_sock_connect_check(fd);
    if (r < 0) {
      alt_drop(st, r);
      return;
    }
    if (r == 0) break;
    st->alt_state = ALT_SEND_JOIN;
    /* fall through */
  case ALT_SEND_JOIN:
    r = lp_sock_send_progress(fd, &st->join, sizeof(st->join), &st->alt_off);
    if (r < 0) {
      alt_drop(st, r);
      return;
    }
    if (r == 1) st->alt_state = ALT_JOINED;
    break;
  default: return;
  }
  if (st->alt_state != ALT_JOINED && expired(st->alt_deadline_ns)) alt_drop(st, -ETIMEDOUT);
}

static ncclResult_t connect_start(struct lp_setup *p, int dev, int tc, struct lp_handle *h,
                                  struct lp_connect_stage **out) {
  ncclResult_t rc = ncclSystemError;
  struct lp_connect_stage *st = calloc(1, sizeof(*st));
  if (st == NULL) return ncclSystemError;
  struct lp_send_comm *s = comm_alloc(p, sizeof(*s), LP_COMM_SEND, LP_SEND_CTRL_LEN, tc);
  if (s == NULL) goto fail;
  st->comm = s;
  s->fifo = s->base.ctrl;
  s->rec_stage = (struct lp_record *)(s->fifo + LP_FIFO_DEPTH * LP_MAX_RECVS);
  s->head = 1;
  s->post_seq = 1;
  s->max_wr_bytes = (size_t)p->env->cfg.max_wr_bytes;
  s->base.conn_id = lp_random_u64();
  dev = subnet_dev(p->env, dev, h);
  rc = lp_comm_link_open(&s->base.link, &s->base, dev, p->env->cfg.qps_per_conn, 0);
  if (rc != ncclSuccess) goto fail;

  lp_sockaddr_from_wire(&st->to, h->family, h->port, h->scope_id, h->addr);
  int fd = lp_sock_connect_start(&st->to);
  if (fd < 0) {
    char a[64];
    /* Out of descriptors or buffers: this host's fault, not the peer's. */
    int here = fd == -EMFILE || fd == -ENFILE || fd == -ENOBUFS || fd == -ENOMEM;
    LP_WARN("connect: %s the listener at %s: %s%s", here ? "no socket for a connection to" : "cannot reach",
            lp_sockaddr_str(&st->to, a, sizeof(a)), strerror(-fd), open_file_hint(-fd));
    rc = here ? ncclSystemError : ncclRemoteError;
    goto fail;
  }
  s->base.ctl.path[0].fd = fd;
  lp_msg_hdr_init(&st->hello.hdr, LP_MSG_HELLO, sizeof(st->hello));
  st->hello.listen_id = h->listen_id;
  st->hello.conn_id = s->base.conn_id;
  snprintf(st->hello.host, sizeof(st->hello.host), "%s", p->env->hostname);
  st->hello.link = s->base.link.local;
  st->hello.link.flags = s->base.health != NULL ? LP_LINK_MOVES : 0; /* moves_disagree */
  st->state = CS_CONNECTING;
  st->deadline_ns = deadline_after(p->env->cfg.ns.setup_timeout_ns);
  if (p->health != NULL && h->alt_family != 0) alt_start(st, h, alt_wait_ns(p->env));

  pthread_mutex_lock(&p->lock);
  st->token = ++p->next_token;
  st->next = p->stages;
  p->stages = st;
  pthread_mutex_unlock(&p->lock);
  h->connect_token = st->token;
  *out = st;
  return ncclSuccess;
fail:
  if (st->comm) lp_comm_destroy(&st->comm->base);
  free(st);
  return rc;
}

/* 1 (after a WARN that says what to do) when one end of comm c moves its
 * connections and the other does not: a move needs both, and the end that
 * does not would never answer one.  Each end finds it once it has the
 * other's link (the connector in ACCEPT, the listener in HELLO, after it
 * answered, so that both say why). */
static int moves_disagree(const struct lp_comm *c) {
  int here = c->health != NULL, there = (c->link.remote.flags & LP_LINK_MOVES) != 0;
  if (here == there) return 0;
  LP_WARN(
      "connection 0x%llx with %s: link failover is %s in this process and %s in the peer's, and a connection moves "
      "only if both ends do: set LINKPASS_FAILOVER the same for every rank of the job (a process whose control "
      "plane could not start said so at init)",
      (unsigned long long)c->conn_id, c->peer, here ? "on" : "off", there ? "on" : "off");
  return 1;
}

/* Advance a connect; *done when the send comm is ready.  On error the
 * caller frees the stage. */
static ncclResult_t connect_step(struct lp_setup *p, struct lp_connect_stage *st, int *done) {
  struct lp_send_comm *s = st->comm;
  int fd = s->base.ctl.path[0].fd;
  char a[64];
  int r;
  *done = 0;
  alt_step(st);
  for (;;) {
    switch (st->state) {
    case CS_CONNECTING:
      r = lp_sock_connect_check(fd);
      if (r < 0) {
        LP_WARN("connect: TCP connection to the listener at %s failed: %s", lp_sockaddr_str(&st->to, a, sizeof(a)),
                strerror(-r));
        return ncclRemoteError;
      }
      if (r == 0) goto again;
      st->state = CS_SEND_HELLO;
      st->off = 0;
      break;
    case CS_SEND_HELLO:
      r = lp_sock_send_progress(fd, &st->hello, sizeof(st->hello), &st->off);
      if (r < 0) goto sock_fail;
      if (r == 0) goto again;
      st->state = CS_RECV_ACCEPT;
      st->off = 0;
      break;
    case CS_RECV_ACCEPT: {
      r = lp_sock_recv_progress(fd, &st->accept, sizeof(st->accept), &st->off);
      if (r < 0) goto sock_fail;
      char why[160];
      if (st->off >= sizeof(struct lp_msg_hdr) &&
          lp_msg_hdr_check(&st->accept.hdr, LP_MSG_ACCEPT, sizeof(st->accept), why, sizeof(why)) != 0) {
        LP_WARN("connect: invalid reply from the listener at %s: %s", lp_sockaddr_str(&st->to, a, sizeof(a)), why);
        return ncclRemoteError;
      }
      if (r == 0) goto again;
      if (lp_msg_accept_check(&st->accept, s->base.conn_id, s->base.link.nqps, why, sizeof(why)) != 0) {
        LP_WARN("connect: invalid reply from the listener at %s: %s", lp_sockaddr_str(&st->to, a, sizeof(a)), why);
        return ncclRemoteError;
      }
      s->base.link.remote = st->accept.link;
      describe_peer(s->base.peer, sizeof(s->base.peer), st->accept.host, &st->to, &st->accept.link);
      if (moves_disagree(&s->base)) return ncclInvalidUsage;
      ncclResult_t rc = lp_link_connect(&s->base.link, s->base.traffic_class);
      if (rc != ncclSuccess) return rc;
      lp_msg_hdr_init(&st->ready.hdr, LP_MSG_READY, sizeof(st->ready));
      st->ready.conn_id = s->base.conn_id;
      st->state = CS_SEND_READY;
      st->off = 0;
      break;
    }
    case CS_SEND_READY:
      if (st->off == 0) { /* READY says whether the second connection is there: settle it first */
        if (st->alt_state == ALT_CONNECTING || st->alt_state == ALT_SEND_JOIN) {
          /* alt_step drops it after alt_wait_ns, half the setup's time at
           * most: until then, not yet (the deadline is not read twice). */
          if (!expired(st->alt_deadline_ns)) return ncclSuccess;
          alt_drop(st, -ETIMEDOUT);
        }
        st->ready.joined = st->alt_state == ALT_JOINED;
      }
      r = lp_sock_send_progress(fd, &st->ready, sizeof(st->ready), &st->off);
      if (r < 0) goto sock_fail;
      if (r == 0) goto again;
      LP_INFO(NCCL_INIT | NCCL_NET, "connection 0x%llx: %s:%u -> %s, %d QP(s), %d control connection(s)",
              (unsigned long long)s->base.conn_id, s->base.link.local.dev_name, s->base.link.local.port, s->base.peer,
              s->base.link.nqps, 1 + st->ready.joined);
      *done = 1;
      return ncclSuccess;
    }
  }
again:
  if (expired(st->deadline_ns)) {
    LP_WARN("connect: no answer from the listener at %s within LINKPASS_SETUP_TIMEOUT_MS=%d",
            lp_sockaddr_str(&st->to, a, sizeof(a)), p->env->cfg.setup_timeout_ms);
    return ncclRemoteError;
  }
  return ncclSuccess;
sock_fail:
  LP_WARN("connect: the listener at %s went away during connection setup: %s", lp_sockaddr_str(&st->to, a, sizeof(a)),
          sock_err(r));
  return ncclRemoteError;
}

ncclResult_t lp_setup_connect(struct lp_setup *p, int dev, int tc, void *handle, void **sendComm) {
  *sendComm = NULL;
  char why[160];
  if (handle == NULL || lp_handle_check(handle, why, sizeof(why)) != 0) {
    LP_WARN("connect: invalid handle: %s", handle ? why : "NULL");
    return ncclInvalidArgument;
  }
  struct lp_handle *h = handle;
  struct lp_connect_stage *st = NULL;
  if (h->connect_token != 0) {
    pthread_mutex_lock(&p->lock);
    /* The listener's id too: a token alone is a small count, and a handle
     * that carried one in from elsewhere must not take another's connect. */
    for (st = p->stages; st && (st->token != h->connect_token || st->hello.listen_id != h->listen_id); st = st->next) {}
    pthread_mutex_unlock(&p->lock);
    if (st == NULL) {
      LP_WARN("connect: the handle names a connect that no longer exists (token %llu)",
              (unsigned long long)h->connect_token);
      return ncclInvalidUsage;
    }
  } else {
    ncclResult_t rc = connect_start(p, dev, tc, h, &st);
    if (rc != ncclSuccess) return rc;
  }
  int done = 0;
  ncclResult_t rc = connect_step(p, st, &done);
  if (rc != ncclSuccess) {
    stage_free(p, st, h);
    return rc;
  }
  if (done) {
    comm_ready(p, &st->comm->base);
    *sendComm = st->comm;
    st->comm = NULL;
    stage_free(p, st, h);
  }
  return ncclSuccess;
}

/* ---- listen / accept ------------------------------------------------------ */

ncclResult_t lp_setup_listen(struct lp_setup *p, int dev, int tc, void *handle, void **listenComm) {
  *listenComm = NULL;
  struct lp_listen_comm *l = calloc(1, sizeof(*l));
  if (l == NULL) return ncclSystemError;
  l->magic = LP_LISTEN_MAGIC;
  l->setup = p;
  l->dev = dev;
  l->traffic_class = tc;
  l->listen_id = lp_random_u64();
  for (int i = 0; i < LP_MAX_PENDING; i++) l->pend[i].fd = -1;
  l->fd = lp_sock_listen(&p->env->oob_addr, &l->addr);
  if (l->fd < 0) {
    char a[64];
    LP_WARN("listen: cannot listen on %s (%s): %s", lp_sockaddr_str(&p->env->oob_addr, a, sizeof(a)),
            p->env->oob_ifname, strerror(-l->fd));
    free(l);
    return ncclSystemError;
  }
  l->alt_fd = -1;
  if (p->health != NULL && p->env->oob_alt_ifname[0] != '\0') {
    l->alt_fd = lp_sock_listen(&p->env->oob_alt_addr, &l->alt_addr);
    if (l->alt_fd < 0) {
      char a[64];
      LP_WARN(
          "listen: cannot listen on the second control interface %s (%s): %s; connections to this listener have "
          "one control connection",
          lp_sockaddr_str(&p->env->oob_alt_addr, a, sizeof(a)), p->env->oob_alt_ifname, strerror(-l->alt_fd));
      l->alt_fd = -1;
    }
  }
  struct lp_handle h;
  memset(&h, 0, sizeof(h));
  h.magic = LP_HANDLE_MAGIC;
  h.version = LP_PROTO_VERSION;
  h.dev = dev;
  h.listen_id = l->listen_id;
  if (p->env->cfg.subnet_routing && p->env->devs[dev].link_layer == IBV_LINK_LAYER_ETHERNET)
    memcpy(h.listen_gid, p->env->devs[dev].gid.raw, sizeof(h.listen_gid));
  lp_sockaddr_to_wire(&l->addr, &h.family, &h.port, &h.scope_id, h.addr);
  if (l->alt_fd >= 0) lp_sockaddr_to_wire(&l->alt_addr, &h.alt_family, &h.alt_port, &h.alt_scope_id, h.alt_addr);
  memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
  memcpy(handle, &h, sizeof(h));
  *listenComm = l;
  return ncclSuccess;
}

/* With a reset: a JOIN whose wait ran out (AS_AWAIT_JOIN) is a control
 * connection to its connector, which would read an end of file as its
 * peer's comm closed and fail a healthy connection. */
static void pending_drop(struct lp_pending *pd) {
  lp_sock_abort(pd->fd);
  pd->fd = -1;
  pd->off = 0;
  pd->complete = 0;
}

static void reject(struct lp_listen_comm *l, struct lp_pending *pd, const char *why) {
  char a[64], b[64];
  LP_WARN("listener %s: rejected connection from %s: %s", lp_sockaddr_str(&l->addr, a, sizeof(a)),
          lp_sockaddr_str(&pd->from, b, sizeof(b)), why);
  pending_drop(pd);
}

static void take_new(struct lp_listen_comm *l, int lfd) {
  /* At most a table's worth a call: a flood of connections must not keep
   * NCCL's accept call here. */
  for (int taken = 0; taken < LP_MAX_PENDING; taken++) {
    int fd = lp_sock_accept(lfd);
    if (fd < 0 && fd != l->accept_err) { /* once per error, not per call of NCCL's accept loop */
      char a[64];
      LP_WARN("listener %s: cannot accept connections: %s%s", lp_sockaddr_str(&l->addr, a, sizeof(a)), strerror(-fd),
              open_file_hint(-fd));
    }
    if (fd < 0) l->accept_err = fd;
    if (fd <= 0) break;
    l->accept_err = 0;
    int slot = -1;
    for (int i = 0; i < LP_MAX_PENDING && slot < 0; i++)
      if (l->pend[i].fd < 0) slot = i;
    if (slot < 0) {
      /* Full: the oldest that has not said a whole hello makes room.  One
       * that has is a connection being set up, never dropped for a
       * stranger: with every entry such, the new connection goes. */
      for (int i = 0; i < LP_MAX_PENDING; i++)
        if (!l->pend[i].complete && (slot < 0 || l->pend[i].since_ns < l->pend[slot].since_ns)) slot = i;
      if (slot < 0) {
        char a[64];
        if (!l->full_said)
          LP_WARN(
              "listener %s: %d connections are waiting for their connects to finish; new ones are refused "
              "until one does",
              lp_sockaddr_str(&l->addr, a, sizeof(a)), LP_MAX_PENDING);
        l->full_said = 1;
        lp_sock_abort(fd);
        continue;
      }
      reject(l, &l->pend[slot], "too many connections without a hello; dropping the oldest");
    }
    l->full_said = 0;
    struct lp_pending *pd = &l->pend[slot];
    memset(pd, 0, sizeof(*pd));
    pd->fd = fd;
    pd->since_ns = lp_now_ns();
    socklen_t alen = sizeof(pd->from);
    if (getpeername(fd, &pd->from.sa, &alen) != 0) pd->from.sa.sa_family = AF_UNSPEC;
  }
}

/* Take new TCP connections (on both interfaces) and read hellos; returns
 * the first pending connection with a complete, valid HELLO, or NULL.  A
 * complete JOIN stays pending until its connection's READY (find_join). */
static struct lp_pending *gather(struct lp_setup *p, struct lp_listen_comm *l) {
  struct lp_pending *hello = NULL;
  take_new(l, l->fd);
  if (l->alt_fd >= 0) take_new(l, l->alt_fd);
  for (int i = 0; i < LP_MAX_PENDING; i++) {
    struct lp_pending *pd = &l->pend[i];
    if (pd->fd < 0) continue;
    char why[160];
    if (!pd->complete) {
      int r = lp_sock_recv_progress(pd->fd, &pd->hello, sizeof(pd->hello), &pd->off);
      enum lp_msg_type type = pd->hello.hdr.type == LP_MSG_JOIN ? LP_MSG_JOIN : LP_MSG_HELLO;
      if (pd->off >= sizeof(struct lp_msg_hdr) &&
          lp_msg_hdr_check(&pd->hello.hdr, type, sizeof(pd->hello), why, sizeof(why)) != 0) {
        reject(l, pd, why);
        continue;
      }
      if (r < 0) {
        snprintf(why, sizeof(why), "closed before a complete hello (%zu bytes): %s", pd->off, sock_err(r));
        reject(l, pd, why);
        continue;
      }
      if (r == 1 && lp_msg_hello_check(&pd->hello, l->listen_id, why, sizeof(why)) != 0) {
        reject(l, pd, why);
        continue;
      }
      pd->complete = r == 1;
    }
    /* The first HELLO is taken, after the pass: a JOIN further on (another
     * connection's second control connection, awaited now) is read too. */
    if (pd->complete && pd->hello.hdr.type == LP_MSG_HELLO) {
      if (hello == NULL) hello = pd;
      continue;
    }
    /* A JOIN waits for its connection's READY unread: one whose connector
     * went away would hold its slot until the setup timeout, and a table
     * full of such refuses new connections (take_new). */
    if (pd->complete && lp_sock_closed(pd->fd)) {
      reject(l, pd, "a second control connection (JOIN) closed before its connection was set up here");
      continue;
    }
    uint64_t limit = p->env->cfg.ns.setup_timeout_ns;
    if (limit > 0 && lp_now_ns() - pd->since_ns > limit)
      reject(l, pd,
             pd->complete ? "a second control connection (JOIN) for no connection set up here within "
                            "LINKPASS_SETUP_TIMEOUT_MS"
                          : "no hello within LINKPASS_SETUP_TIMEOUT_MS");
  }
  return hello;
}

/* The JOIN of connection `conn_id`, arrived whole, or NULL. */
static struct lp_pending *find_join(struct lp_listen_comm *l, uint64_t conn_id) {
  for (int i = 0; i < LP_MAX_PENDING; i++) {
    struct lp_pending *pd = &l->pend[i];
    if (pd->fd >= 0 && pd->complete && pd->hello.hdr.type == LP_MSG_JOIN && pd->hello.conn_id == conn_id) return pd;
  }
  return NULL;
}

/* Build the recv comm for a valid hello and queue the reply. */
static ncclResult_t accept_start(struct lp_setup *p, struct lp_listen_comm *l, struct lp_pending *pd) {
  ncclResult_t rc = ncclSystemError;
  struct lp_accept_stage *st = calloc(1, sizeof(*st));
  if (st == NULL) goto fail;
  /* NCCL_IB_FIFO_TC: the receiver's QPs carry the clear-to-sends, and may
   * ride their own traffic class (RoCE), as in NCCL's transport */
  int tc = p->env->cfg.fifo_tc >= 0 ? p->env->cfg.fifo_tc : l->traffic_class;
  struct lp_recv_comm *r = comm_alloc(p, sizeof(*r), LP_COMM_RECV, LP_RECV_CTRL_LEN, tc);
  if (r == NULL) goto fail;
  st->comm = r;
  r->cts_stage = r->base.ctrl;
  r->records = (struct lp_record *)(r->cts_stage + LP_FIFO_DEPTH * LP_MAX_RECVS);
  r->tail = 1;
  r->oldest = 1;
  r->base.conn_id = pd->hello.conn_id;
  r->base.ctl.path[0].fd = pd->fd;
  pd->fd = -1;
  describe_peer(r->base.peer, sizeof(r->base.peer), pd->hello.host, &pd->from, &pd->hello.link);
  /* The receiver uses the sender's QP count: both ends must pair QPs 1:1. */
  rc = lp_comm_link_open(&r->base.link, &r->base, l->dev, pd->hello.link.nqps,
                         (size_t)((char *)r->records - (char *)r->base.ctrl));
  if (rc != ncclSuccess) goto fail;
  r->base.link.remote = pd->hello.link;
  rc = lp_link_connect(&r->base.link, r->base.traffic_class);
  if (rc != ncclSuccess) goto fail;
  lp_msg_hdr_init(&st->reply.hdr, LP_MSG_ACCEPT, sizeof(st->reply));
  st->reply.conn_id = r->base.conn_id;
  snprintf(st->reply.host, sizeof(st->reply.host), "%s", p->env->hostname);
  st->reply.link = r->base.link.local;
  st->reply.link.flags = r->base.health != NULL ? LP_LINK_MOVES : 0; /* moves_disagree */
  st->state = AS_SEND_REPLY;
  st->deadline_ns = deadline_after(p->env->cfg.ns.setup_timeout_ns);
  l->stage = st;
  pending_drop(pd);
  return ncclSuccess;
fail:
  pending_drop(pd);
  if (st && st->comm) lp_comm_destroy(&st->comm->base);
  free(st);
  return rc;
}

static ncclResult_t accept_step(struct lp_setup *p, struct lp_listen_comm *l, struct lp_accept_stage *st, int *done) {
  struct lp_recv_comm *r = st->comm;
  int fd = r->base.ctl.path[0].fd;
  struct lp_pending *pd;
  int rc;
  char why[160];
  *done = 0;
  for (;;) {
    switch (st->state) {
    case AS_SEND_REPLY:
      rc = lp_sock_send_progress(fd, &st->reply, sizeof(st->reply), &st->off);
      if (rc < 0) goto sock_fail;
      if (rc == 0) goto again;
      if (moves_disagree(&r->base)) return ncclInvalidUsage; /* the connector, told by the reply, says so too */
      st->state = AS_RECV_READY;
      st->off = 0;
      break;
    case AS_RECV_READY:
      rc = lp_sock_recv_progress(fd, &st->ready, sizeof(st->ready), &st->off);
      if (rc < 0) goto sock_fail;
      if (rc == 0) goto again;
      if (lp_msg_ready_check(&st->ready, r->base.conn_id, why, sizeof(why)) != 0) {
        LP_WARN("accept: invalid message from %s: %s", r->base.peer, why);
        return ncclRemoteError;
      }
      if (!st->ready.joined || l->alt_fd < 0) goto ready;
      st->state = AS_AWAIT_JOIN;
      st->join_deadline_ns = deadline_after(alt_wait_ns(p->env));
      break;
    case AS_AWAIT_JOIN:
      /* Sent before READY, on another connection: it may still be on its way. */
      pd = find_join(l, r->base.conn_id);
      if (pd == NULL) {
        gather(p, l);
        pd = find_join(l, r->base.conn_id);
      }
      if (pd != NULL) {
        r->base.ctl.path[1].fd = pd->fd;
        pd->fd = -1;
        pending_drop(pd);
        goto ready;
      }
      /* Within alt_wait_ns, half the setup's time at most: a JOIN that
       * does not come never fails the connection. */
      if (!expired(st->join_deadline_ns)) return ncclSuccess;
      /* The connector made it (READY said so) and sends on it: a JOIN that
       * comes late sits unread here, and the connector would count on a
       * connection nobody reads (its late reset, at closeListen, is not
       * one to rely on: a caller may keep the listen comm, or never have
       * accepted it).  It is told now over the one both ends have (DROP,
       * comm_ready), as for a connection given up, which it knows to go on
       * without: simpler than adopting a comm already handed to NCCL, and
       * than a close, which it would read as the whole comm closing. */
      lp_ctl_not_taken(&r->base.ctl, 1);
      LP_INFO(NCCL_INIT | NCCL_NET,
              "accept: the second control connection of connection 0x%llx did not arrive within %llu ms; its control "
              "channel has one, and the connector is told to stop using its second",
              (unsigned long long)r->base.conn_id, (unsigned long long)(alt_wait_ns(p->env) / 1000000ull));
      goto ready;
    }
  }
ready:
  LP_INFO(NCCL_INIT | NCCL_NET, "connection 0x%llx: %s:%u <- %s, %d QP(s), %d control connection(s)",
          (unsigned long long)r->base.conn_id, r->base.link.local.dev_name, r->base.link.local.port, r->base.peer,
          r->base.link.nqps, 1 + (r->base.ctl.path[1].fd >= 0));
  *done = 1;
  return ncclSuccess;
again:
  if (expired(st->deadline_ns)) {
    LP_WARN("accept: %s did not finish connection setup within LINKPASS_SETUP_TIMEOUT_MS=%d", r->base.peer,
            p->env->cfg.setup_timeout_ms);
    return ncclRemoteError;
  }
  return ncclSuccess;
sock_fail:
  LP_WARN("accept: %s went away during connection setup: %s", r->base.peer, sock_err(rc));
  return ncclRemoteError;
}

ncclResult_t lp_accept(void *listenComm, void **recvComm, ncclNetDeviceHandle_v12_t **recvDevComm) {
  struct lp_listen_comm *l = listenComm;
  *recvComm = NULL;
  if (recvDevComm) *recvDevComm = NULL;
  if (l == NULL || l->magic != LP_LISTEN_MAGIC) {
    LP_WARN("accept: invalid listen comm %p", listenComm);
    return ncclInvalidArgument;
  }
  struct lp_setup *p = l->setup;
  if (l->stage == NULL) {
    struct lp_pending *pd = gather(p, l);
    if (pd == NULL) return ncclSuccess;
    ncclResult_t rc = accept_start(p, l, pd);
    if (rc != ncclSuccess) return rc;
  }
  int done = 0;
  ncclResult_t rc = accept_step(p, l, l->stage, &done);
  if (rc != ncclSuccess || done) {
    struct lp_accept_stage *st = l->stage;
    l->stage = NULL;
    if (rc == ncclSuccess) {
      *recvComm = st->comm;
      comm_ready(p, &st->comm->base);
    } else {
      lp_comm_destroy(&st->comm->base);
    }
    free(st);
  }
  return rc;
}

ncclResult_t lp_close_listen(void *listenComm) {
  struct lp_listen_comm *l = listenComm;
  if (l == NULL || l->magic != LP_LISTEN_MAGIC) {
    LP_WARN("closeListen: invalid listen comm %p", listenComm);
    return ncclInvalidArgument;
  }
  for (int i = 0; i < LP_MAX_PENDING; i++) pending_drop(&l->pend[i]);
  if (l->stage) {
    lp_comm_destroy(&l->stage->comm->base);
    free(l->stage);
  }
  close(l->fd);
  if (l->alt_fd >= 0) close(l->alt_fd);
  l->magic = 0;
  free(l);
  return ncclSuccess;
}

void lp_setup_free_stages(struct lp_setup *p) {
  for (;;) {
    pthread_mutex_lock(&p->lock);
    struct lp_connect_stage *st = p->stages;
    pthread_mutex_unlock(&p->lock);
    if (st == NULL) break;
    stage_free(p, st, NULL);
  }
}
