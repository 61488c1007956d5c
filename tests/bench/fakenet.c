/*
 * fakenet: a tiny NCCL net plugin over TCP on loopback, for testing
 * linkpass-perf without RDMA or the real plugin.
 *
 * It is deliberately strict about how it is called, so the driver's NCCL
 * impersonation is checked too: memory handles must come from regMr on the
 * same comm and cover the buffer, at most NCCL_NET_MAX_REQUESTS requests per
 * comm, receive tags must match the sender's, a message larger than the
 * posted buffer is an error.  It also behaves like NCCL's IB transport where
 * the driver must cope: connect() needs several calls (its state lives in the
 * handle), isend/irecv sometimes return a NULL request ("not now").
 *
 * Faults for the driver's own tests, on the rank named by FAKENET_FAULT_RANK
 * (each rank learns its number from FAKENET_RANK, set with --rank-env):
 *   FAKENET_CORRUPT=K  flip a bit (an exponent bit) in the K-th non-empty received message
 *   FAKENET_EXIT=K     _exit(3) at the K-th isend
 *   FAKENET_STALL=K    from the K-th isend on, never accept a send again
 *   FAKENET_ERROR=K    the K-th test() returns ncclRemoteError
 *
 * Built a second time with FAKENET_LATE_FILL (libnccl-net-fakelate.so), it
 * exports only ncclNetPlugin_v11 holding a name and init, and init fills in
 * the rest, as the reference IB plugin does; FAKENET_LATE_NULL=MEMBER
 * (devices, test or finalize) leaves that member NULL, for the driver's
 * check after init.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "linkpass/nccl_net.h"

#define EXPORT __attribute__((visibility("default")))
/* The full tables; in the late-fill build they are private sources for init. */
#ifdef FAKENET_LATE_FILL
#define TABLE(V) static const __attribute__((unused)) ncclNet_##V##_t full_##V
#else
#define TABLE(V) EXPORT const ncclNet_##V##_t ncclNetPlugin_##V
#endif
#define MAGIC 0x46414b45u
#define MAXREQ NCCL_NET_MAX_REQUESTS

struct handle {
  uint32_t magic;
  uint16_t port;
  uint8_t stage; /* connect() progress, kept in the handle like NCCL's IB */
};

struct mr {
  uint32_t magic;
  void *comm;
  char *addr;
  size_t size;
};

struct req {
  struct comm *comm;
  int used, done, is_send;
  char *data;
  size_t size, moved;
  int tag, got;
  struct req *next;
};

struct msg_hdr {
  int32_t tag;
  uint32_t pad;
  uint64_t size;
};

struct comm {
  int fd, is_send;
  struct req reqs[MAXREQ];
  struct req *head, *tail; /* in posting order */
  int outstanding;
  /* partial header on either side */
  struct msg_hdr hdr;
  size_t hdr_done;
};

static ncclDebugLogger_t logf_;
static int ndev = 2;
static long fault_corrupt, fault_exit, fault_stall, fault_error;
static long nsends, nrecvd, ntests, calls;

#define WARN(...) \
  do { if (logf_) logf_(NCCL_LOG_WARN, NCCL_NET, __FILE__, __LINE__, "NET/fakenet " __VA_ARGS__); } while (0)

static long env_long(const char *name) {
  const char *e = getenv(name);
  return e ? atol(e) : 0;
}

static ncclResult_t do_init(ncclDebugLogger_t l) {
  logf_ = l;
  if (getenv("FAKENET_NDEV")) ndev = atoi(getenv("FAKENET_NDEV"));
  const char *me = getenv("FAKENET_RANK"), *bad = getenv("FAKENET_FAULT_RANK");
  if (me && bad && strcmp(me, bad) == 0) {
    fault_corrupt = env_long("FAKENET_CORRUPT");
    fault_exit = env_long("FAKENET_EXIT");
    fault_stall = env_long("FAKENET_STALL");
    fault_error = env_long("FAKENET_ERROR");
  }
  return ncclSuccess;
}

static ncclResult_t do_devices(int *n) {
  *n = ndev;
  return ncclSuccess;
}

static ncclResult_t do_props(int dev, ncclNetProperties_v12_t *p) {
  static char names[8][16];
  if (dev < 0 || dev >= ndev || dev >= 8) return ncclInvalidArgument;
  snprintf(names[dev], sizeof(names[dev]), "fake%d", dev);
  memset(p, 0, sizeof(*p));
  p->name = names[dev];
  p->pciPath = names[dev];
  p->guid = 0x1000 + (uint64_t)dev;
  p->ptrSupport = NCCL_PTR_HOST;
  p->regIsGlobal = 0;
  p->speed = 100000;
  p->port = 1;
  p->maxComms = 65536;
  p->maxRecvs = 1;
  p->maxP2pBytes = NCCL_MAX_NET_SIZE_BYTES;
  p->maxCollBytes = NCCL_MAX_NET_SIZE_BYTES;
  p->maxMultiRequestSize = 1;
  return ncclSuccess;
}

static ncclResult_t do_listen(int dev, void *opaque, void **lc) {
  struct handle *h = opaque;
  struct sockaddr_in sa = {.sin_family = AF_INET};
  socklen_t sl = sizeof(sa);
  if (dev < 0 || dev >= ndev) return ncclInvalidArgument;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 16) ||
      getsockname(fd, (struct sockaddr *)&sa, &sl)) {
    WARN("listen: %s", strerror(errno));
    if (fd >= 0) close(fd);
    return ncclSystemError;
  }
  memset(h, 0, NCCL_NET_HANDLE_MAXSIZE);
  h->magic = MAGIC;
  h->port = ntohs(sa.sin_port);
  int *l = malloc(sizeof(int));
  *l = fd;
  *lc = l;
  return ncclSuccess;
}

static struct comm *new_comm(int fd, int is_send) {
  struct comm *c = calloc(1, sizeof(*c));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  c->fd = fd;
  c->is_send = is_send;
  return c;
}

static ncclResult_t do_connect(int dev, void *opaque, void **sc) {
  struct handle *h = opaque;
  *sc = NULL;
  if (dev < 0 || dev >= ndev || h->magic != MAGIC) return ncclInvalidArgument;
  /* like NCCL's IB connect: a few calls before the comm appears */
  if (h->stage < 2) {
    h->stage++;
    return ncclSuccess;
  }
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(h->port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
    WARN("connect to port %u: %s", h->port, strerror(errno));
    if (fd >= 0) close(fd);
    return ncclSystemError;
  }
  *sc = new_comm(fd, 1);
  return ncclSuccess;
}

static ncclResult_t do_accept(void *lc, void **rc) {
  int fd = accept4(*(int *)lc, NULL, NULL, SOCK_CLOEXEC);
  *rc = NULL;
  if (fd < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return ncclSuccess;
    WARN("accept: %s", strerror(errno));
    return ncclSystemError;
  }
  *rc = new_comm(fd, 0);
  return ncclSuccess;
}

static ncclResult_t do_reg(void *comm, void *data, size_t size, int type, void **mh) {
  if (!comm || type != NCCL_PTR_HOST) {
    WARN("regMr: comm %p type %d (only host memory)", comm, type);
    return ncclInvalidArgument;
  }
  struct mr *m = malloc(sizeof(*m));
  *m = (struct mr){MAGIC, comm, data, size};
  *mh = m;
  return ncclSuccess;
}

static ncclResult_t do_dereg(void *comm, void *mh) {
  struct mr *m = mh;
  if (!m || m->magic != MAGIC || m->comm != comm) {
    WARN("deregMr: not a handle of this comm");
    return ncclInvalidArgument;
  }
  m->magic = 0;
  free(m);
  return ncclSuccess;
}

static int mr_covers(void *comm, void *mh, void *data, size_t size) {
  struct mr *m = mh;
  return m && m->magic == MAGIC && m->comm == comm && (char *)data >= m->addr &&
         (char *)data + size <= m->addr + m->size;
}

static struct req *new_req(struct comm *c) {
  if (c->outstanding >= MAXREQ) return NULL;
  for (int i = 0; i < MAXREQ; i++) {
    if (!c->reqs[i].used) {
      struct req *r = &c->reqs[i];
      memset(r, 0, sizeof(*r));
      r->used = 1;
      r->comm = c;
      if (c->tail) c->tail->next = r;
      else c->head = r;
      c->tail = r;
      c->outstanding++;
      return r;
    }
  }
  return NULL;
}

/* Move bytes for the oldest unfinished requests of a comm. */
static ncclResult_t progress(struct comm *c) {
  for (struct req *r = c->head; r; r = r->next) {
    if (r->done) continue;
    if (c->is_send) {
      if (c->hdr_done < sizeof(c->hdr)) {
        if (c->hdr_done == 0) c->hdr = (struct msg_hdr){r->tag, 0, r->size};
        ssize_t k = send(c->fd, (char *)&c->hdr + c->hdr_done, sizeof(c->hdr) - c->hdr_done, MSG_NOSIGNAL);
        if (k < 0) return errno == EAGAIN ? ncclSuccess : ncclSystemError;
        c->hdr_done += (size_t)k;
        if (c->hdr_done < sizeof(c->hdr)) return ncclSuccess;
      }
      while (r->moved < r->size) {
        ssize_t k = send(c->fd, r->data + r->moved, r->size - r->moved, MSG_NOSIGNAL);
        if (k < 0) return errno == EAGAIN ? ncclSuccess : ncclSystemError;
        r->moved += (size_t)k;
      }
    } else {
      while (c->hdr_done < sizeof(c->hdr)) {
        ssize_t k = recv(c->fd, (char *)&c->hdr + c->hdr_done, sizeof(c->hdr) - c->hdr_done, 0);
        if (k == 0) {
          WARN("peer closed the connection");
          return ncclRemoteError;
        }
        if (k < 0) return errno == EAGAIN ? ncclSuccess : ncclSystemError;
        c->hdr_done += (size_t)k;
      }
      if (c->hdr.tag != r->tag || c->hdr.size > r->size) {
        WARN("message tag %d size %llu does not fit the receive (tag %d, %zu bytes)", c->hdr.tag,
             (unsigned long long)c->hdr.size, r->tag, r->size);
        return ncclInternalError;
      }
      while (r->moved < c->hdr.size) {
        ssize_t k = recv(c->fd, r->data + r->moved, c->hdr.size - r->moved, 0);
        if (k == 0) return ncclRemoteError;
        if (k < 0) return errno == EAGAIN ? ncclSuccess : ncclSystemError;
        r->moved += (size_t)k;
      }
      r->got = (int)c->hdr.size;
      /* An exponent bit of the first 4-byte element: a flip in the low
       * mantissa of a float could fall inside the checker's rounding
       * tolerance and go unseen. */
      if (c->hdr.size > 0 && ++nrecvd == fault_corrupt) r->data[c->hdr.size >= 4 ? 3 : 0] ^= 0x40;
    }
    r->done = 1;
    c->hdr_done = 0;
  }
  return ncclSuccess;
}

static ncclResult_t do_isend(void *sc, void *data, size_t size, int tag, void *mh, void **request) {
  struct comm *c = sc;
  *request = NULL;
  if (!mr_covers(sc, mh, data, size)) {
    WARN("isend: memory handle does not cover %p + %zu", data, size);
    return ncclInvalidArgument;
  }
  if (++calls % 5 == 0) return ncclSuccess; /* "no clear-to-send yet" */
  if (fault_stall && nsends + 1 >= fault_stall) return ncclSuccess;
  if (++nsends == fault_exit) _exit(3);
  struct req *r = new_req(c);
  if (!r) {
    WARN("isend: more than %d requests outstanding", MAXREQ);
    return ncclInvalidUsage;
  }
  r->is_send = 1;
  r->data = data;
  r->size = size;
  r->tag = tag;
  *request = r;
  return progress(c);
}

static ncclResult_t do_irecv(void *rc, int n, void **data, size_t *sizes, int *tags, void **mh, void **request) {
  struct comm *c = rc;
  *request = NULL;
  if (n != 1) return ncclInvalidArgument;
  if (!mr_covers(rc, mh[0], data[0], sizes[0])) {
    WARN("irecv: memory handle does not cover %p + %zu", data[0], sizes[0]);
    return ncclInvalidArgument;
  }
  if (++calls % 7 == 0) return ncclSuccess;
  struct req *r = new_req(c);
  if (!r) {
    WARN("irecv: more than %d requests outstanding", MAXREQ);
    return ncclInvalidUsage;
  }
  r->data = data[0];
  r->size = sizes[0];
  r->tag = tags[0];
  *request = r;
  return ncclSuccess;
}

static ncclResult_t do_test(void *request, int *done, int *size) {
  struct req *r = request;
  struct comm *c = r->comm;
  *done = 0;
  if (++ntests == fault_error) return ncclRemoteError;
  ncclResult_t res = progress(c);
  if (res != ncclSuccess) return res;
  if (!r->done) return ncclSuccess;
  if (c->head != r) {
    /* the driver tests oldest first; this plugin completes in order */
    WARN("test: request completed out of order");
    return ncclInternalError;
  }
  *done = 1;
  if (size) *size = r->is_send ? (int)r->size : r->got;
  c->head = r->next;
  if (!c->head) c->tail = NULL;
  r->used = 0;
  c->outstanding--;
  return ncclSuccess;
}

static ncclResult_t do_iflush(void *rc, int n, void **data, int *sizes, void **mh, void **request) {
  (void)rc, (void)n, (void)data, (void)sizes, (void)mh, (void)request;
  return ncclInternalError; /* host memory never needs a flush */
}

static ncclResult_t do_close(void *comm) {
  struct comm *c = comm;
  close(c->fd);
  free(c);
  return ncclSuccess;
}

static ncclResult_t do_close_listen(void *lc) {
  close(*(int *)lc);
  free(lc);
  return ncclSuccess;
}

/* ---- one thin shim per ABI version ---- */

static ncclResult_t v12_init(void **ctx, uint64_t id, ncclNetCommConfig_v12_t *cfg, ncclDebugLogger_t l,
                             ncclProfilerCallback_t p) {
  (void)id, (void)cfg, (void)p;
  *ctx = (void *)0x1;
  return do_init(l);
}
static ncclResult_t v11_init(void **ctx, uint64_t id, ncclNetCommConfig_v11_t *cfg, ncclDebugLogger_t l,
                             ncclProfilerCallback_t p) {
  (void)id, (void)cfg, (void)p;
  *ctx = (void *)0x1;
  return do_init(l);
}
static ncclResult_t v10_init(ncclDebugLogger_t l, ncclProfilerCallback_t p) {
  (void)p;
  return do_init(l);
}
static ncclResult_t finalize(void *ctx) { return ctx == (void *)0x1 ? ncclSuccess : ncclInvalidArgument; }
static ncclResult_t ctx_listen(void *ctx, int d, void *h, void **l) {
  return ctx == (void *)0x1 ? do_listen(d, h, l) : ncclInvalidArgument;
}
static ncclResult_t v12_connect(void *ctx, int d, void *h, void **s, ncclNetDeviceHandle_v12_t **dc) {
  (void)dc;
  return ctx == (void *)0x1 ? do_connect(d, h, s) : ncclInvalidArgument;
}
static ncclResult_t v10_connect(int d, ncclNetCommConfig_v10_t *cfg, void *h, void **s, ncclNetDeviceHandle_v10_t **dc) {
  (void)cfg, (void)dc;
  return do_connect(d, h, s);
}
static ncclResult_t v8_connect(int d, void *h, void **s, ncclNetDeviceHandle_v8_t **dc) {
  (void)dc;
  return do_connect(d, h, s);
}
static ncclResult_t accept_(void *l, void **r, ncclNetDeviceHandle_v12_t **dc) {
  (void)dc;
  return do_accept(l, r);
}
static ncclResult_t reg_dmabuf(void *c, void *d, size_t s, int t, uint64_t o, int fd, void **mh) {
  (void)c, (void)d, (void)s, (void)t, (void)o, (void)fd, (void)mh;
  return ncclInternalError;
}
static ncclResult_t isend_ph(void *sc, void *d, size_t s, int tag, void *mh, void *ph, void **r) {
  (void)ph;
  return do_isend(sc, d, s, tag, mh, r);
}
static ncclResult_t v8_isend(void *sc, void *d, int s, int tag, void *mh, void **r) {
  if (s < 0) return ncclInvalidArgument;
  return do_isend(sc, d, (size_t)s, tag, mh, r);
}
static ncclResult_t irecv_ph(void *rc, int n, void **d, size_t *s, int *t, void **mh, void **ph, void **r) {
  (void)ph;
  return do_irecv(rc, n, d, s, t, mh, r);
}
static ncclResult_t v8_irecv(void *rc, int n, void **d, int *s, int *t, void **mh, void **r) {
  size_t sz;
  if (n != 1 || s[0] < 0) return ncclInvalidArgument;
  sz = (size_t)s[0];
  return do_irecv(rc, n, d, &sz, t, mh, r);
}
static ncclResult_t v12_props(int d, ncclNetProperties_v12_t *p) { return do_props(d, p); }
static ncclResult_t v11_props(int d, ncclNetProperties_v11_t *p) {
  ncclNetProperties_v12_t q = {0}; /* do_props may fail before filling it */
  ncclResult_t r = do_props(d, &q);
  /* not a memcpy: v11's vProps holds 4 devices, v12's 8, so the tail moves */
  memset(p, 0, sizeof(*p));
  p->name = q.name, p->pciPath = q.pciPath, p->guid = q.guid, p->ptrSupport = q.ptrSupport;
  p->speed = q.speed, p->port = q.port, p->maxComms = q.maxComms, p->maxRecvs = q.maxRecvs;
  p->maxP2pBytes = q.maxP2pBytes, p->maxCollBytes = q.maxCollBytes, p->maxMultiRequestSize = q.maxMultiRequestSize;
  return r;
}
static ncclResult_t v10_props(int d, ncclNetProperties_v10_t *p) {
  ncclNetProperties_v12_t q = {0}; /* do_props may fail before filling it */
  ncclResult_t r = do_props(d, &q);
  memset(p, 0, sizeof(*p));
  p->name = q.name, p->pciPath = q.pciPath, p->guid = q.guid, p->ptrSupport = q.ptrSupport;
  p->speed = q.speed, p->port = q.port, p->maxComms = q.maxComms, p->maxRecvs = q.maxRecvs;
  p->maxP2pBytes = q.maxP2pBytes, p->maxCollBytes = q.maxCollBytes;
  return r;
}
static ncclResult_t v9_props(int d, ncclNetProperties_v9_t *p) {
  ncclNetProperties_v12_t q = {0}; /* do_props may fail before filling it */
  ncclResult_t r = do_props(d, &q);
  memset(p, 0, sizeof(*p));
  p->name = q.name, p->pciPath = q.pciPath, p->guid = q.guid, p->ptrSupport = q.ptrSupport;
  p->speed = q.speed, p->port = q.port, p->maxComms = q.maxComms, p->maxRecvs = q.maxRecvs;
  p->maxP2pBytes = q.maxP2pBytes, p->maxCollBytes = q.maxCollBytes;
  return r;
}
static ncclResult_t v8_props(int d, ncclNetProperties_v8_t *p) {
  ncclNetProperties_v12_t q = {0}; /* do_props may fail before filling it */
  ncclResult_t r = do_props(d, &q);
  memset(p, 0, sizeof(*p));
  p->name = q.name, p->pciPath = q.pciPath, p->guid = q.guid, p->ptrSupport = q.ptrSupport;
  p->speed = q.speed, p->port = q.port, p->maxComms = q.maxComms, p->maxRecvs = q.maxRecvs;
  return r;
}

TABLE(v12) = {
    .name = "fakenet", .init = v12_init, .devices = do_devices, .getProperties = v12_props,
    .listen = ctx_listen, .connect = v12_connect, .accept = accept_, .regMr = do_reg,
    .regMrDmaBuf = reg_dmabuf, .deregMr = do_dereg, .isend = isend_ph, .irecv = irecv_ph,
    .iflush = do_iflush, .test = do_test, .closeSend = do_close, .closeRecv = do_close,
    .closeListen = do_close_listen, .finalize = finalize,
};
TABLE(v11) = {
    .name = "fakenet", .init = v11_init, .devices = do_devices, .getProperties = v11_props,
    .listen = ctx_listen, .connect = v12_connect, .accept = accept_, .regMr = do_reg,
    .regMrDmaBuf = reg_dmabuf, .deregMr = do_dereg, .isend = isend_ph, .irecv = irecv_ph,
    .iflush = do_iflush, .test = do_test, .closeSend = do_close, .closeRecv = do_close,
    .closeListen = do_close_listen, .finalize = finalize,
};
TABLE(v10) = {
    .name = "fakenet", .init = v10_init, .devices = do_devices, .getProperties = v10_props,
    .listen = do_listen, .connect = v10_connect, .accept = accept_, .regMr = do_reg,
    .regMrDmaBuf = reg_dmabuf, .deregMr = do_dereg, .isend = isend_ph, .irecv = irecv_ph,
    .iflush = do_iflush, .test = do_test, .closeSend = do_close, .closeRecv = do_close,
    .closeListen = do_close_listen,
};
TABLE(v9) = {
    .name = "fakenet", .init = do_init, .devices = do_devices, .getProperties = v9_props,
    .listen = do_listen, .connect = v8_connect, .accept = accept_, .regMr = do_reg,
    .regMrDmaBuf = reg_dmabuf, .deregMr = do_dereg, .isend = do_isend, .irecv = do_irecv,
    .iflush = do_iflush, .test = do_test, .closeSend = do_close, .closeRecv = do_close,
    .closeListen = do_close_listen,
};
TABLE(v8) = {
    .name = "fakenet", .init = do_init, .devices = do_devices, .getProperties = v8_props,
    .listen = do_listen, .connect = v8_connect, .accept = accept_, .regMr = do_reg,
    .regMrDmaBuf = reg_dmabuf, .deregMr = do_dereg, .isend = v8_isend, .irecv = v8_irecv,
    .iflush = do_iflush, .test = do_test, .closeSend = do_close, .closeRecv = do_close,
    .closeListen = do_close_listen,
};

#ifdef FAKENET_LATE_FILL
static ncclResult_t late_init(void **ctx, uint64_t id, ncclNetCommConfig_v11_t *cfg, ncclDebugLogger_t l,
                              ncclProfilerCallback_t p);

/* Not const: init writes it.  Until then only the name and init are set,
 * and the name differs from the one init installs, so the driver's header
 * shows which one it read. */
EXPORT ncclNet_v11_t ncclNetPlugin_v11 = {.name = "fakelate-before-init", .init = late_init};

static ncclResult_t late_init(void **ctx, uint64_t id, ncclNetCommConfig_v11_t *cfg, ncclDebugLogger_t l,
                              ncclProfilerCallback_t p) {
  const char *leave = getenv("FAKENET_LATE_NULL");
  ncclNet_v11_t t = full_v11;
  t.name = "fakelate";
  t.init = late_init;
  if (leave && strcmp(leave, "devices") == 0) t.devices = NULL;
  if (leave && strcmp(leave, "test") == 0) t.test = NULL;
  if (leave && strcmp(leave, "finalize") == 0) t.finalize = NULL;
  ncclNetPlugin_v11 = t;
  return v11_init(ctx, id, cfg, l, p);
}
#endif
