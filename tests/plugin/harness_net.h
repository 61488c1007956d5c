/*
 * The integration harness's view of the plugin: it dlopens the .so like
 * NCCL, picks one ABI version, and calls it through these wrappers, which
 * present every version with the v12 signatures.  Forcing a version
 * exercises that version's shim.
 */
#ifndef LP_HARNESS_NET_H
#define LP_HARNESS_NET_H

#include <stddef.h>
#include <stdint.h>

#include "linkpass/nccl_net.h"

struct hnet {
  int version; /* 8..12 */
  void *dl;
  const void *tbl;
  void *ctx; /* v11+ */
};

/* dlopen `path` and bind ncclNetPlugin_v<version> (0: newest available). */
int hnet_open(struct hnet *n, const char *path, int version);
ncclResult_t hnet_init(struct hnet *n, ncclDebugLogger_t logger);
ncclResult_t hnet_finalize(struct hnet *n);
const char *hnet_name(struct hnet *n);
ncclResult_t hnet_devices(struct hnet *n, int *ndev);
ncclResult_t hnet_props(struct hnet *n, int dev, ncclNetProperties_v12_t *p);
ncclResult_t hnet_listen(struct hnet *n, int dev, void *handle, void **lc);
ncclResult_t hnet_connect(struct hnet *n, int dev, void *handle, void **sc);
ncclResult_t hnet_accept(struct hnet *n, void *lc, void **rc);
ncclResult_t hnet_regmr(struct hnet *n, void *comm, void *data, size_t size, void **mh);
/* regMr with a pointer type; regMrDmaBuf of GPU memory (NCCL_PTR_CUDA). */
ncclResult_t hnet_regmr_type(struct hnet *n, void *comm, void *data, size_t size, int type, void **mh);
ncclResult_t hnet_regmr_dmabuf(struct hnet *n, void *comm, void *data, size_t size, uint64_t offset, int fd,
                               void **mh);
ncclResult_t hnet_deregmr(struct hnet *n, void *comm, void *mh);
ncclResult_t hnet_isend(struct hnet *n, void *sc, void *data, size_t size, int tag, void *mh, void **req);
ncclResult_t hnet_irecv(struct hnet *n, void *rc, int cnt, void **data, size_t *sizes, int *tags, void **mhs,
                        void **req);
ncclResult_t hnet_iflush(struct hnet *n, void *rc, int cnt, void **data, int *sizes, void **mhs, void **req);
ncclResult_t hnet_test(struct hnet *n, void *req, int *done, int *sizes);
ncclResult_t hnet_close_send(struct hnet *n, void *c);
ncclResult_t hnet_close_recv(struct hnet *n, void *c);
ncclResult_t hnet_close_listen(struct hnet *n, void *c);

#endif
