/*
 * linkpass-perf: out-of-band rendezvous (TCP; loopback unless told otherwise).
 */
#include "oob.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define OOB_MAGIC 0x4c50504fu /* "LPPO" */

enum { OOB_HELLO = 1, OOB_GATHER = 2, OOB_ALL = 3, OOB_BYE_MSG = 4 };

struct oob_hdr {
  uint32_t magic, type;
  int32_t rank;
  uint32_t len;
};

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (err && errlen) vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -1;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* How long a wait that has idle work sleeps between two calls of it. */
#define OOB_IDLE_POLL_NS 100000

/* Wait until fd is ready for `events` or the deadline passes (< 0: none),
 * doing `idle`'s work meanwhile: -ECANCELED when that failed (err says why). */
static int wait_fd(int fd, short events, double deadline, const struct oob_idle *idle, char *err, size_t errlen) {
  for (;;) {
    int busy = 0;
    if (idle && idle->fn) {
      busy = idle->fn(idle->arg, err, errlen);
      if (busy < 0) return -ECANCELED;
    }
    struct timespec ts, *tp = NULL;
    if (deadline >= 0) {
      double left = deadline - now_s();
      if (left <= 0) return -ETIMEDOUT;
      ts = (struct timespec){.tv_sec = (time_t)left, .tv_nsec = (long)((left - (double)(time_t)left) * 1e9)};
      tp = &ts;
    }
    if (busy && (!tp || ts.tv_sec > 0 || ts.tv_nsec > OOB_IDLE_POLL_NS)) {
      ts = (struct timespec){.tv_sec = 0, .tv_nsec = OOB_IDLE_POLL_NS};
      tp = &ts;
    }
    struct pollfd p = {.fd = fd, .events = events};
    int r = ppoll(&p, 1, tp, NULL);
    if (r > 0) return 0;
    if (r < 0 && errno != EINTR) return -errno;
  }
}

static int io_full(int fd, void *buf, size_t len, int writing, double deadline, const struct oob_idle *idle, char *err,
                   size_t errlen) {
  char *p = buf;
  while (len) {
    int w = wait_fd(fd, writing ? POLLOUT : POLLIN, deadline, idle, err, errlen);
    if (w) return w;
    ssize_t r = writing ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
    if (r == 0) return -ECONNRESET; /* the other end closed */
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return -errno;
    }
    p += r;
    len -= (size_t)r;
  }
  return 0;
}

static int send_frame(int fd, uint32_t type, int rank, const void *data, size_t len, double deadline) {
  struct oob_hdr h = {OOB_MAGIC, type, rank, (uint32_t)len};
  int r = io_full(fd, &h, sizeof(h), 1, deadline, NULL, NULL, 0);
  if (!r && len) r = io_full(fd, (void *)data, len, 1, deadline, NULL, NULL, 0);
  return r;
}

static double deadline_of(double timeout) { return timeout < 0 ? -1 : now_s() + timeout; }

static int parse_addr(const char *addr, struct sockaddr_in *sa) {
  char host[64];
  const char *colon = strrchr(addr, ':');
  if (!colon || (size_t)(colon - addr) >= sizeof(host)) return -1;
  memcpy(host, addr, (size_t)(colon - addr));
  host[colon - addr] = '\0';
  char *end;
  long port = strtol(colon + 1, &end, 10);
  if (*end || port <= 0 || port > 65535) return -1;
  memset(sa, 0, sizeof(*sa));
  sa->sin_family = AF_INET;
  sa->sin_port = htons((uint16_t)port);
  return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? 0 : -1;
}

int oob_connect(const char *addr, int rank, int nranks, double timeout, char *err, size_t errlen) {
  struct sockaddr_in sa;
  double deadline = deadline_of(timeout);
  if (parse_addr(addr, &sa)) return fail(err, errlen, "bad rendezvous address \"%s\" (want IPv4:port)", addr);
  for (;;) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return fail(err, errlen, "socket: %s", strerror(errno));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      uint32_t n = (uint32_t)nranks;
      int r = send_frame(fd, OOB_HELLO, rank, &n, sizeof(n), deadline);
      if (r) {
        close(fd);
        return fail(err, errlen, "rendezvous %s: hello failed: %s", addr, strerror(-r));
      }
      return fd;
    }
    int e = errno;
    close(fd);
    /* the launcher listens before it forks: refusal means it is gone */
    if (e != EINTR && e != EAGAIN) return fail(err, errlen, "rendezvous %s: connect: %s", addr, strerror(e));
    if (deadline >= 0 && now_s() > deadline) return fail(err, errlen, "rendezvous %s: connect timed out", addr);
  }
}

int oob_allgather(int fd, int rank, int nranks, const void *mine, size_t len, void *all, double timeout,
                  const struct oob_idle *idle, char *err, size_t errlen) {
  double deadline = deadline_of(timeout);
  struct oob_hdr h;
  if (len > OOB_MAX_BLOB) return fail(err, errlen, "all-gather of %zu bytes is over the %u limit", len, OOB_MAX_BLOB);
  int r = send_frame(fd, OOB_GATHER, rank, mine, len, deadline);
  if (!r) r = io_full(fd, &h, sizeof(h), 0, deadline, idle, err, errlen);
  if (r == -ECANCELED) return -1; /* idle's own message */
  if (r == -ETIMEDOUT) return fail(err, errlen, "rendezvous: all-gather timed out after %.0f s (a rank is late)", timeout);
  if (r) return fail(err, errlen, "rendezvous: lost the launcher: %s", strerror(-r));
  if (h.magic != OOB_MAGIC || h.type != OOB_ALL || h.len != len * (size_t)nranks)
    return fail(err, errlen, "rendezvous: unexpected reply (type %u, %u bytes)", h.type, h.len);
  r = io_full(fd, all, h.len, 0, deadline, NULL, NULL, 0);
  if (r) return fail(err, errlen, "rendezvous: all-gather reply: %s", strerror(-r));
  return 0;
}

int oob_bye(int fd, int rank, int code) {
  uint32_t c = (uint32_t)code;
  return send_frame(fd, OOB_BYE_MSG, rank, &c, sizeof(c), now_s() + 5);
}

/* ------------------------------------------------------------- server */

struct oob_peer {
  int fd;
  enum oob_rank_state state;
  int bye_code;
  struct oob_hdr h;     /* header being read */
  size_t got;           /* bytes of header + payload read so far */
  char *payload;        /* payload being read */
  char *gather;         /* complete GATHER payload waiting for the others */
  size_t gather_len;
  int has_gather;
};

struct oob_server {
  int lfd, nranks;
  struct oob_peer *peers;
};

struct oob_server *oob_server_create(int nranks, const char *bind_ip, char *addr, size_t addrlen, char *err,
                                     size_t errlen) {
  struct oob_server *s = calloc(1, sizeof(*s));
  struct sockaddr_in sa = {.sin_family = AF_INET};
  socklen_t sl = sizeof(sa);
  if (!s) goto oom;
  s->lfd = -1;
  s->nranks = nranks;
  s->peers = calloc((size_t)nranks, sizeof(*s->peers));
  if (!s->peers) goto oom;
  for (int i = 0; i < nranks; i++) s->peers[i].fd = -1;
  s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s->lfd < 0) goto sys;
  if (!bind_ip) bind_ip = "127.0.0.1";
  if (inet_pton(AF_INET, bind_ip, &sa.sin_addr) != 1) {
    fail(err, errlen, "rendezvous server: \"%s\" is not an IPv4 address", bind_ip);
    oob_server_destroy(s);
    return NULL;
  }
  if (bind(s->lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(s->lfd, nranks + 8) ||
      getsockname(s->lfd, (struct sockaddr *)&sa, &sl)) {
    fail(err, errlen, "rendezvous server on %s: %s%s", bind_ip, strerror(errno),
         errno == EADDRNOTAVAIL ? " (not an address of this host: run the launcher where it is)" : "");
    oob_server_destroy(s);
    return NULL;
  }
  snprintf(addr, addrlen, "%s:%u", bind_ip, ntohs(sa.sin_port));
  return s;
sys:
  fail(err, errlen, "rendezvous server: %s", strerror(errno));
  oob_server_destroy(s);
  return NULL;
oom:
  fail(err, errlen, "rendezvous server: out of memory");
  oob_server_destroy(s);
  return NULL;
}

void oob_server_destroy(struct oob_server *s) {
  if (!s) return;
  if (s->peers) {
    for (int i = 0; i < s->nranks; i++) {
      if (s->peers[i].fd >= 0) close(s->peers[i].fd);
      free(s->peers[i].payload);
      free(s->peers[i].gather);
    }
    free(s->peers);
  }
  if (s->lfd >= 0) close(s->lfd);
  free(s);
}

int oob_server_pollfds(struct oob_server *s, struct pollfd *pfds) {
  int n = 0;
  pfds[n++] = (struct pollfd){.fd = s->lfd, .events = POLLIN};
  for (int i = 0; i < s->nranks; i++)
    if (s->peers[i].fd >= 0) pfds[n++] = (struct pollfd){.fd = s->peers[i].fd, .events = POLLIN};
  return n;
}

enum oob_rank_state oob_server_state(const struct oob_server *s, int rank, int *bye_code) {
  if (bye_code) *bye_code = s->peers[rank].bye_code;
  return s->peers[rank].state;
}

static void drop(struct oob_peer *p) {
  close(p->fd);
  p->fd = -1;
  if (p->state != OOB_BYE) p->state = OOB_LOST;
}

/* A new connection: read its hello right away (the rank sends it with the
 * connect), bounded so a stray client cannot hold the launcher. */
static int accept_one(struct oob_server *s, char *err, size_t errlen) {
  int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
  if (fd < 0) return 0; /* raced away: nothing to do */
  struct oob_hdr h;
  uint32_t n = 0;
  int r = io_full(fd, &h, sizeof(h), 0, now_s() + 5, NULL, NULL, 0);
  if (!r && h.magic == OOB_MAGIC && h.type == OOB_HELLO && h.len == sizeof(n)) r = io_full(fd, &n, sizeof(n), 0, now_s() + 5, NULL, NULL, 0);
  else if (!r) r = -EPROTO;
  if (r || h.rank < 0 || h.rank >= s->nranks || (int)n != s->nranks || s->peers[h.rank].state != OOB_NONE) {
    close(fd);
    /* a foreign or garbled client is ignored; a rank with the wrong -N or a
     * duplicate rank is a launch bug worth stopping for */
    if (!r && h.rank >= 0 && h.rank < s->nranks)
      return fail(err, errlen, "rank %d said hello with %u ranks (want %d) or twice", h.rank, n, s->nranks);
    return 0;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  s->peers[h.rank].fd = fd;
  s->peers[h.rank].state = OOB_UP;
  return 0;
}

/* When every rank has posted its part, send everyone the whole. */
static int maybe_release(struct oob_server *s, char *err, size_t errlen) {
  size_t len = 0;
  for (int i = 0; i < s->nranks; i++) {
    if (!s->peers[i].has_gather) return 0;
    if (i == 0) len = s->peers[i].gather_len;
    else if (s->peers[i].gather_len != len)
      return fail(err, errlen, "all-gather size mismatch: rank 0 sent %zu bytes, rank %d sent %zu", len, i,
                  s->peers[i].gather_len);
  }
  struct oob_hdr h = {OOB_MAGIC, OOB_ALL, -1, (uint32_t)(len * (size_t)s->nranks)};
  for (int i = 0; i < s->nranks; i++) {
    struct oob_peer *p = &s->peers[i];
    if (p->fd < 0) continue;
    int r = io_full(p->fd, &h, sizeof(h), 1, now_s() + 30, NULL, NULL, 0);
    for (int j = 0; !r && j < s->nranks; j++) r = io_full(p->fd, s->peers[j].gather, len, 1, now_s() + 30, NULL, NULL, 0);
    if (r) drop(p);
  }
  for (int i = 0; i < s->nranks; i++) {
    free(s->peers[i].gather);
    s->peers[i].gather = NULL;
    s->peers[i].has_gather = 0;
  }
  return 0;
}

/* Read what is there; complete frames are acted on. */
static int read_peer(struct oob_server *s, int rank, char *err, size_t errlen) {
  struct oob_peer *p = &s->peers[rank];
  for (;;) {
    ssize_t r;
    if (p->got < sizeof(p->h)) {
      r = recv(p->fd, (char *)&p->h + p->got, sizeof(p->h) - p->got, 0);
    } else {
      size_t off = p->got - sizeof(p->h);
      r = recv(p->fd, p->payload + off, p->h.len - off, 0);
    }
    if (r == 0) {
      drop(p);
      return 0;
    }
    if (r < 0) {
      if (errno == EAGAIN || errno == EINTR) return 0;
      drop(p);
      return 0;
    }
    p->got += (size_t)r;
    if (p->got == sizeof(p->h)) {
      if (p->h.magic != OOB_MAGIC || p->h.rank != rank || p->h.len > OOB_MAX_BLOB) {
        drop(p);
        return fail(err, errlen, "rank %d sent a garbled rendezvous frame", rank);
      }
      p->payload = malloc(p->h.len ? p->h.len : 1);
      if (!p->payload) return fail(err, errlen, "rendezvous: out of memory");
    }
    if (p->got < sizeof(p->h) || p->got - sizeof(p->h) < p->h.len) continue;
    /* a whole frame */
    p->got = 0;
    if (p->h.type == OOB_GATHER && !p->has_gather) {
      p->gather = p->payload;
      p->gather_len = p->h.len;
      p->has_gather = 1;
      p->payload = NULL;
      if (maybe_release(s, err, errlen)) return -1;
    } else if (p->h.type == OOB_BYE_MSG && p->h.len == sizeof(uint32_t)) {
      uint32_t c;
      memcpy(&c, p->payload, sizeof(c));
      p->bye_code = (int)c;
      p->state = OOB_BYE;
      free(p->payload);
      p->payload = NULL;
    } else {
      free(p->payload);
      p->payload = NULL;
      drop(p);
      return fail(err, errlen, "rank %d sent an unexpected rendezvous frame (type %u)", rank, p->h.type);
    }
  }
}

int oob_server_handle(struct oob_server *s, const struct pollfd *pfds, int n, char *err, size_t errlen) {
  for (int i = 0; i < n; i++) {
    if (!pfds[i].revents) continue;
    if (pfds[i].fd == s->lfd) {
      if (accept_one(s, err, errlen)) return -1;
      continue;
    }
    for (int r = 0; r < s->nranks; r++)
      if (s->peers[r].fd == pfds[i].fd && s->peers[r].fd >= 0 && read_peer(s, r, err, errlen)) return -1;
  }
  return 0;
}
