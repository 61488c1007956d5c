/*
 * The transport's one internal API, written against the newest NCCL types
 * (v12).  plugin/ holds a thin shim per ABI version that adapts to it.
 */
#ifndef LP_LINKPASS_H
#define LP_LINKPASS_H

#include "linkpass/nccl_net.h"

#define LP_PLUGIN_NAME "linkpass"

ncclResult_t lp_init(void **ctx, uint64_t commId, ncclNetCommConfig_v12_t *config, ncclDebugLogger_t logFunction,
                     ncclProfilerCallback_t profFunction);
ncclResult_t lp_devices(int *ndev);
ncclResult_t lp_get_properties(int dev, ncclNetProperties_v12_t *props);
ncclResult_t lp_listen(void *ctx, int dev, void *handle, void **listenComm);
/* traffic_class: NCCL_NET_TRAFFIC_CLASS_UNDEF to use the context's. */
ncclResult_t lp_connect(void *ctx, int dev, int traffic_class, void *handle, void **sendComm,
                        ncclNetDeviceHandle_v12_t **sendDevComm);
ncclResult_t lp_accept(void *listenComm, void **recvComm, ncclNetDeviceHandle_v12_t **recvDevComm);
ncclResult_t lp_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle);
ncclResult_t lp_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset, int fd, void **mhandle);
ncclResult_t lp_dereg_mr(void *comm, void *mhandle);
ncclResult_t lp_isend(void *sendComm, void *data, size_t size, int tag, void *mhandle, void *phandle, void **request);
ncclResult_t lp_irecv(void *recvComm, int n, void **data, size_t *sizes, int *tags, void **mhandles, void **phandles,
                      void **request);
ncclResult_t lp_iflush(void *recvComm, int n, void **data, int *sizes, void **mhandles, void **request);
ncclResult_t lp_test(void *request, int *done, int *sizes);
ncclResult_t lp_close_send(void *sendComm);
ncclResult_t lp_close_recv(void *recvComm);
ncclResult_t lp_close_listen(void *listenComm);
ncclResult_t lp_finalize(void *ctx);
ncclResult_t lp_set_net_attr(void *ctx, ncclNetAttr_v12_t *netAttr);

#endif
