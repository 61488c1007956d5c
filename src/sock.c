/* Out-of-band TCP sockets. */
#include "sock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

socklen_t lp_sockaddr_len(const union lp_sockaddr *a) {
  return a->sa.sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

void lp_sockaddr_to_wire(const union lp_sockaddr *a, uint16_t *family, uint16_t *port, uint32_t *scope_id,
                         uint8_t addr[16]) {
  *family = a->sa.sa_family;
  if (*family == AF_INET) {
    *port = a->in.sin_port;
    *scope_id = 0;
    memcpy(addr, &a->in.sin_addr, 4);
  } else {
    *port = a->in6.sin6_port;
    *scope_id = a->in6.sin6_scope_id;
    memcpy(addr, &a->in6.sin6_addr, 16);
  }
}

void lp_sockaddr_from_wire(union lp_sockaddr *a, uint16_t family, uint16_t port, uint32_t scope_id,
                           const uint8_t addr[16]) {
  memset(a, 0, sizeof(*a));
  a->sa.sa_family = family;
  if (family == AF_INET) {
    a->in.sin_port = port;
    memcpy(&a->in.sin_addr, addr, 4);
  } else {
    a->in6.sin6_port = port;
    memcpy(&a->in6.sin6_addr, addr, 16);
    a->in6.sin6_scope_id = scope_id;
  }
}

const char *lp_sockaddr_str(const union lp_sockaddr *a, char *buf, size_t len) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (a->sa.sa_family == AF_INET) {
    inet_ntop(AF_INET, &a->in.sin_addr, host, sizeof(host));
    snprintf(buf, len, "%s:%u", host, ntohs(a->in.sin_port));
  } else if (a->sa.sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &a->in6.sin6_addr, host, sizeof(host));
    snprintf(buf, len, "[%s]:%u", host, ntohs(a->in6.sin6_port));
  } else {
    snprintf(buf, len, "(family %d)", a->sa.sa_family);
  }
  return buf;
}

static int family_ok(const struct lp_config *cfg, int fam) {
  if (fam != AF_INET && fam != AF_INET6) return 0;
  if (cfg->family == LP_FAMILY_INET) return fam == AF_INET;
  if (cfg->family == LP_FAMILY_INET6) return fam == AF_INET6;
  return 1;
}

static int usable(const struct ifaddrs *ifa) {
  if (ifa->ifa_addr == NULL || !(ifa->ifa_flags & IFF_UP)) return 0;
  if (ifa->ifa_addr->sa_family == AF_INET6) {
    /* Link-local addresses need a scope id the peer cannot use. */
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ifa->ifa_addr;
    if (IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr)) return 0;
  }
  return 1;
}

/* One pass of the search: the first usable address accepted by `accept`,
 * IPv4 preferred over IPv6 within the pass when both are allowed. */
struct pick {
  const struct lp_config *cfg;
  const struct lp_oob_avoid *avoid;
  int backed;          /* 1: RDMA-backed interfaces only, 0: the others only, -1: either */
  const char *exclude; /* never this interface; NULL: none */
};
typedef int (*if_accept_fn)(const struct pick *p, const char *name);

static int is_backed(const struct lp_oob_avoid *avoid, const char *name) {
  for (int i = 0; avoid && i < avoid->n; i++)
    if (strcmp(avoid->name[i], name) == 0) return 1;
  return 0;
}

static int pass(const struct pick *p, struct ifaddrs *all, if_accept_fn accept, union lp_sockaddr *addr, char *ifname,
                size_t iflen) {
  for (int want = AF_INET; want != 0; want = want == AF_INET ? AF_INET6 : 0) {
    for (struct ifaddrs *ifa = all; ifa; ifa = ifa->ifa_next) {
      if (!usable(ifa) || ifa->ifa_addr->sa_family != want || !family_ok(p->cfg, want)) continue;
      if (p->backed >= 0 && is_backed(p->avoid, ifa->ifa_name) != p->backed) continue;
      /* A second interface is never loopback, where a peer on another
       * host would reach its own, nor docker*. */
      if (p->exclude != NULL && (strcmp(p->exclude, ifa->ifa_name) == 0 || strncmp(ifa->ifa_name, "lo", 2) == 0 ||
                                 strncmp(ifa->ifa_name, "docker", 6) == 0))
        continue;
      if (!accept(p, ifa->ifa_name)) continue;
      memset(addr, 0, sizeof(*addr));
      memcpy(addr, ifa->ifa_addr, want == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
      snprintf(ifname, iflen, "%s", ifa->ifa_name);
      return 0;
    }
  }
  return -1;
}

static int by_user(const struct pick *p, const char *name) { return lp_filter_match(&p->cfg->ifname, name, -1); }
static int by_ib(const struct pick *p, const char *name) {
  (void)p;
  return strncmp(name, "ib", 2) == 0;
}
static int by_other(const struct pick *p, const char *name) {
  (void)p;
  return strncmp(name, "docker", 6) != 0 && strncmp(name, "lo", 2) != 0 && strncmp(name, "virbr", 5) != 0;
}
static int by_docker(const struct pick *p, const char *name) {
  (void)p;
  return strncmp(name, "docker", 6) == 0;
}
static int by_lo(const struct pick *p, const char *name) {
  (void)p;
  return strncmp(name, "lo", 2) == 0;
}

/* The search of both picks: NCCL's order, interfaces no RDMA NIC backs
 * first.  With `exclude` (the second pick) pass() skips it, loopback and
 * docker*, so the last two steps find nothing there. */
static int search(const struct lp_config *cfg, const struct lp_oob_avoid *avoid, const char *exclude,
                  union lp_sockaddr *addr, char *ifname, size_t iflen) {
  struct ifaddrs *all = NULL;
  if (getifaddrs(&all) != 0) return -1;
  struct pick free_only = {cfg, avoid, 0, exclude}, any = {cfg, avoid, -1, exclude};
  int rc;
  if (cfg->ifname.set) {
    rc = pass(&any, all, by_user, addr, ifname, iflen);
  } else {
    rc = pass(&free_only, all, by_ib, addr, ifname, iflen);
    if (rc != 0) rc = pass(&free_only, all, by_other, addr, ifname, iflen);
    if (rc != 0) rc = pass(&any, all, by_ib, addr, ifname, iflen);
    if (rc != 0) rc = pass(&any, all, by_other, addr, ifname, iflen);
    if (rc != 0) rc = pass(&any, all, by_docker, addr, ifname, iflen);
    if (rc != 0) rc = pass(&any, all, by_lo, addr, ifname, iflen);
  }
  freeifaddrs(all);
  if (rc == 0 && addr->sa.sa_family == AF_INET) addr->in.sin_port = 0;
  if (rc == 0 && addr->sa.sa_family == AF_INET6) addr->in6.sin6_port = 0;
  return rc;
}

int lp_oob_pick(const struct lp_config *cfg, const struct lp_oob_avoid *avoid, union lp_sockaddr *addr, char *ifname,
                size_t iflen, int *backed) {
  int rc = search(cfg, avoid, NULL, addr, ifname, iflen);
  if (rc == 0) *backed = is_backed(avoid, ifname);
  return rc;
}

int lp_oob_pick_second(const struct lp_config *cfg, const struct lp_oob_avoid *avoid, const char *primary,
                       union lp_sockaddr *addr, char *ifname, size_t iflen) {
  return search(cfg, avoid, primary, addr, ifname, iflen);
}

/* A peer host that freezes or loses power closes nothing: without these,
 * its socket stays "established" while TCP retransmits for ~15 minutes
 * (tcp_retries2), and a move waiting on it waits as long.  Data left
 * unacknowledged for LP_SOCK_DEAD_MS fails the socket (TCP_USER_TIMEOUT),
 * and an idle connection is probed after LP_SOCK_KEEPIDLE_S seconds, every
 * second, LP_SOCK_KEEPCNT times, so it fails within about as long. */
#define LP_SOCK_DEAD_MS 10000
#define LP_SOCK_KEEPIDLE_S 5
#define LP_SOCK_KEEPCNT 5

static int set_common(int fd) {
  int one = 1, dead = LP_SOCK_DEAD_MS, idle = LP_SOCK_KEEPIDLE_S, cnt = LP_SOCK_KEEPCNT;
  /* Setup messages are small and latency-bound. */
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &one, sizeof(one)) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt)) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &dead, sizeof(dead)) != 0)
    return -errno;
  return 0;
}

int lp_sock_listen(const union lp_sockaddr *local, union lp_sockaddr *bound) {
  int fd = socket(local->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  int err;
  if (bind(fd, &local->sa, lp_sockaddr_len(local)) != 0 || listen(fd, 128) != 0) goto fail;
  socklen_t len = sizeof(*bound);
  if (getsockname(fd, &bound->sa, &len) != 0) goto fail;
  return fd;
fail:
  err = errno;
  close(fd);
  return -err;
}

int lp_sock_connect_start(const union lp_sockaddr *to) {
  int fd = socket(to->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  int rc = set_common(fd);
  if (rc != 0) {
    close(fd);
    return rc;
  }
  if (connect(fd, &to->sa, lp_sockaddr_len(to)) != 0 && errno != EINPROGRESS) {
    int err = errno;
    close(fd);
    return -err;
  }
  return fd;
}

int lp_sock_connect_check(int fd) {
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return -errno;
  if (err != 0) return -err;
  /* Writable means connected; SO_ERROR alone cannot tell "pending". */
  union lp_sockaddr peer;
  socklen_t plen = sizeof(peer);
  if (getpeername(fd, &peer.sa, &plen) == 0) return 1;
  return errno == ENOTCONN ? 0 : -errno;
}

/* accept(2) errors that say nothing of the listener: none waiting, or a
 * connection that failed before it was taken (a reset: ECONNABORTED; and
 * the network errors accept(2) passes on, to be retried "like EAGAIN"). */
static int accept_again(int err) {
  switch (err) {
  case EAGAIN:
#if EWOULDBLOCK != EAGAIN
  case EWOULDBLOCK:
#endif
  case EINTR:
  case ECONNABORTED:
  case EPROTO:
  case ENOPROTOOPT:
  case ENETDOWN:
  case ENETUNREACH:
  case EHOSTDOWN:
  case EHOSTUNREACH:
  case ENONET:
  case EOPNOTSUPP: return 1;
  default: return 0;
  }
}

int lp_sock_accept(int lfd) {
  int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) return accept_again(errno) ? 0 : -errno;
  if (fd == 0) { /* stdin was closed: 0 means "none" here, so the socket moves */
    int moved = fcntl(fd, F_DUPFD_CLOEXEC, 1);
    close(fd);
    if (moved < 0) return 0;
    fd = moved;
  }
  int rc = set_common(fd);
  if (rc != 0) {
    lp_sock_abort(fd);
    return 0; /* a connection we cannot configure is dropped, not fatal */
  }
  return fd;
}

void lp_sock_abort(int fd) {
  if (fd < 0) return;
  struct linger lg = {.l_onoff = 1, .l_linger = 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  close(fd);
}

int lp_sock_send_progress(int fd, const void *buf, size_t len, size_t *off) {
  while (*off < len) {
    ssize_t n = send(fd, (const char *)buf + *off, len - *off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
      if (errno == EINTR) continue;
      return -errno;
    }
    *off += (size_t)n;
  }
  return 1;
}

int lp_sock_closed(int fd) {
  char b;
  ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

ssize_t lp_sock_recv_some(int fd, void *buf, size_t len) {
  for (;;) {
    ssize_t n = recv(fd, buf, len, MSG_DONTWAIT);
    if (n > 0) return n;
    if (n == 0) return -EPIPE;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    if (errno != EINTR) return -errno;
  }
}

int lp_sock_recv_progress(int fd, void *buf, size_t len, size_t *off) {
  while (*off < len) {
    ssize_t n = recv(fd, (char *)buf + *off, len - *off, MSG_DONTWAIT);
    if (n == 0) return -EPIPE;
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
      if (errno == EINTR) continue;
      return -errno;
    }
    *off += (size_t)n;
  }
  return 1;
}
