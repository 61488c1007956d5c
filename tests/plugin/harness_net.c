/* Version adapters for the integration harness (see harness_net.h). */
#include "harness_net.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#define T12 ((const ncclNet_v12_t *)n->tbl)
#define T11 ((const ncclNet_v11_t *)n->tbl)
#define T10 ((const ncclNet_v10_t *)n->tbl)
#define T9 ((const ncclNet_v9_t *)n->tbl)
#define T8 ((const ncclNet_v8_t *)n->tbl)

/* Calls a member that has the same signature in every version. */
#define SAME(member, ...)                      \
  switch (n->version) {                        \
    case 12: return T12->member(__VA_ARGS__); \
    case 11: return T11->member(__VA_ARGS__); \
    case 10: return T10->member(__VA_ARGS__); \
    case 9: return T9->member(__VA_ARGS__);   \
    default: return T8->member(__VA_ARGS__);  \
  }

int hnet_open(struct hnet *n, const char *path, int version) {
  memset(n, 0, sizeof(*n));
  n->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (n->dl == NULL) {
    fprintf(stderr, "harness: dlopen(%s): %s\n", path, dlerror());
    return -1;
  }
  for (int v = 12; v >= 8; v--) {
    if (version != 0 && v != version) continue;
    char sym[32];
    snprintf(sym, sizeof(sym), "ncclNetPlugin_v%d", v);
    n->tbl = dlsym(n->dl, sym);
    if (n->tbl) {
      n->version = v;
      return 0;
    }
  }
  fprintf(stderr, "harness: %s exports no ncclNetPlugin_v%d\n", path, version);
  return -1;
}

ncclResult_t hnet_init(struct hnet *n, ncclDebugLogger_t logger) {
  ncclNetCommConfig_v12_t cfg = {.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF};
  switch (n->version) {
    case 12: return T12->init(&n->ctx, 0x1234, &cfg, logger, NULL);
    case 11: return T11->init(&n->ctx, 0x1234, (ncclNetCommConfig_v11_t *)&cfg, logger, NULL);
    case 10: return T10->init(logger, NULL);
    case 9: return T9->init(logger);
    default: return T8->init(logger);
  }
}

ncclResult_t hnet_finalize(struct hnet *n) {
  if (n->version == 12) return T12->finalize(n->ctx);
  if (n->version == 11) return T11->finalize(n->ctx);
  return ncclSuccess;
}

const char *hnet_name(struct hnet *n) { return *(const char *const *)n->tbl; }

ncclResult_t hnet_devices(struct hnet *n, int *ndev) { SAME(devices, ndev); }

ncclResult_t hnet_props(struct hnet *n, int dev, ncclNetProperties_v12_t *p) {
  memset(p, 0, sizeof(*p));
  ncclResult_t rc;
  switch (n->version) {
    case 12: return T12->getProperties(dev, p);
    case 11: {
      ncclNetProperties_v11_t q;
      rc = T11->getProperties(dev, &q);
      memcpy(p, &q, offsetof(ncclNetProperties_v11_t, vProps));
      p->vProps.ndevs = q.vProps.ndevs;
      memcpy(p->vProps.devs, q.vProps.devs, sizeof(q.vProps.devs));
      p->maxP2pBytes = q.maxP2pBytes;
      p->maxCollBytes = q.maxCollBytes;
      p->maxMultiRequestSize = q.maxMultiRequestSize;
      return rc;
    }
    case 10:
    case 9: {
      ncclNetProperties_v10_t q;
      rc = n->version == 10 ? T10->getProperties(dev, &q) : T9->getProperties(dev, (ncclNetProperties_v9_t *)&q);
      memcpy(p, &q, offsetof(ncclNetProperties_v10_t, vProps));
      p->vProps.ndevs = q.vProps.ndevs;
      memcpy(p->vProps.devs, q.vProps.devs, sizeof(q.vProps.devs));
      p->maxP2pBytes = q.maxP2pBytes;
      p->maxCollBytes = q.maxCollBytes;
      return rc;
    }
    default: {
      ncclNetProperties_v8_t q;
      rc = T8->getProperties(dev, &q);
      p->name = q.name;
      p->pciPath = q.pciPath;
      p->guid = q.guid;
      p->ptrSupport = q.ptrSupport;
      p->regIsGlobal = q.regIsGlobal;
      p->speed = q.speed;
      p->port = q.port;
      p->latency = q.latency;
      p->maxComms = q.maxComms;
      p->maxRecvs = q.maxRecvs;
      p->netDeviceType = q.netDeviceType;
      p->netDeviceVersion = q.netDeviceVersion;
      return rc;
    }
  }
}

ncclResult_t hnet_listen(struct hnet *n, int dev, void *handle, void **lc) {
  switch (n->version) {
    case 12: return T12->listen(n->ctx, dev, handle, lc);
    case 11: return T11->listen(n->ctx, dev, handle, lc);
    case 10: return T10->listen(dev, handle, lc);
    case 9: return T9->listen(dev, handle, lc);
    default: return T8->listen(dev, handle, lc);
  }
}

ncclResult_t hnet_connect(struct hnet *n, int dev, void *handle, void **sc) {
  ncclNetDeviceHandle_v12_t *dh = NULL;
  ncclNetCommConfig_v10_t cfg = {.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF};
  switch (n->version) {
    case 12: return T12->connect(n->ctx, dev, handle, sc, &dh);
    case 11: return T11->connect(n->ctx, dev, handle, sc, &dh);
    case 10: return T10->connect(dev, &cfg, handle, sc, &dh);
    case 9: return T9->connect(dev, handle, sc, &dh);
    default: return T8->connect(dev, handle, sc, &dh);
  }
}

ncclResult_t hnet_accept(struct hnet *n, void *lc, void **rc) {
  ncclNetDeviceHandle_v12_t *dh = NULL;
  SAME(accept, lc, rc, &dh);
}

ncclResult_t hnet_regmr(struct hnet *n, void *comm, void *data, size_t size, void **mh) {
  SAME(regMr, comm, data, size, NCCL_PTR_HOST, mh);
}

ncclResult_t hnet_regmr_type(struct hnet *n, void *comm, void *data, size_t size, int type, void **mh) {
  SAME(regMr, comm, data, size, type, mh);
}

ncclResult_t hnet_regmr_dmabuf(struct hnet *n, void *comm, void *data, size_t size, uint64_t offset, int fd,
                               void **mh) {
  SAME(regMrDmaBuf, comm, data, size, NCCL_PTR_CUDA, offset, fd, mh);
}

ncclResult_t hnet_deregmr(struct hnet *n, void *comm, void *mh) { SAME(deregMr, comm, mh); }

ncclResult_t hnet_isend(struct hnet *n, void *sc, void *data, size_t size, int tag, void *mh, void **req) {
  switch (n->version) {
    case 12: return T12->isend(sc, data, size, tag, mh, NULL, req);
    case 11: return T11->isend(sc, data, size, tag, mh, NULL, req);
    case 10: return T10->isend(sc, data, size, tag, mh, NULL, req);
    case 9: return T9->isend(sc, data, size, tag, mh, req);
    default: return T8->isend(sc, data, (int)size, tag, mh, req);
  }
}

ncclResult_t hnet_irecv(struct hnet *n, void *rc, int cnt, void **data, size_t *sizes, int *tags, void **mhs,
                        void **req) {
  void *ph[8] = {0};
  switch (n->version) {
    case 12: return T12->irecv(rc, cnt, data, sizes, tags, mhs, ph, req);
    case 11: return T11->irecv(rc, cnt, data, sizes, tags, mhs, ph, req);
    case 10: return T10->irecv(rc, cnt, data, sizes, tags, mhs, ph, req);
    case 9: return T9->irecv(rc, cnt, data, sizes, tags, mhs, req);
    default: {
      int narrow[8];
      for (int i = 0; i < cnt && i < 8; i++) narrow[i] = (int)sizes[i];
      return T8->irecv(rc, cnt, data, narrow, tags, mhs, req);
    }
  }
}

ncclResult_t hnet_iflush(struct hnet *n, void *rc, int cnt, void **data, int *sizes, void **mhs, void **req) {
  SAME(iflush, rc, cnt, data, sizes, mhs, req);
}

ncclResult_t hnet_test(struct hnet *n, void *req, int *done, int *sizes) { SAME(test, req, done, sizes); }
ncclResult_t hnet_close_send(struct hnet *n, void *c) { SAME(closeSend, c); }
ncclResult_t hnet_close_recv(struct hnet *n, void *c) { SAME(closeRecv, c); }
ncclResult_t hnet_close_listen(struct hnet *n, void *c) { SAME(closeListen, c); }
