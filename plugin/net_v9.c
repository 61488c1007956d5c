/* ncclNetPlugin_v9 (NCCL 2.24, 2.25): no profiler handles, no comm config. */
#include <string.h>

#include "shim.h"

static ncclResult_t v9_init(ncclDebugLogger_t logFunction) { return lp_init(NULL, 0, NULL, logFunction, NULL); }

static ncclResult_t v9_get_properties(int dev, ncclNetProperties_v9_t *props) {
  ncclNetProperties_v12_t p;
  ncclResult_t rc = lp_shim_props(dev, &p);
  if (rc != ncclSuccess) return rc;
  memset(props, 0, sizeof(*props));
  LP_COPY_PROPS_V9(props, &p);
  return ncclSuccess;
}

static ncclResult_t v9_listen(int dev, void *handle, void **listenComm) {
  return lp_listen(NULL, dev, handle, listenComm);
}

static ncclResult_t v9_connect(int dev, void *handle, void **sendComm, ncclNetDeviceHandle_v9_t **sendDevComm) {
  return lp_connect(NULL, dev, NCCL_NET_TRAFFIC_CLASS_UNDEF, handle, sendComm, sendDevComm);
}

static ncclResult_t v9_isend(void *sendComm, void *data, size_t size, int tag, void *mhandle, void **request) {
  return lp_isend(sendComm, data, size, tag, mhandle, NULL, request);
}

static ncclResult_t v9_irecv(void *recvComm, int n, void **data, size_t *sizes, int *tags, void **mhandles,
                             void **request) {
  return lp_irecv(recvComm, n, data, sizes, tags, mhandles, NULL, request);
}

LP_EXPORT const ncclNet_v9_t ncclNetPlugin_v9 = {
    .name = LP_PLUGIN_NAME,
    .init = v9_init,
    .devices = lp_devices,
    .getProperties = v9_get_properties,
    .listen = v9_listen,
    .connect = v9_connect,
    .accept = lp_accept,
    .regMr = lp_reg_mr,
    .regMrDmaBuf = lp_reg_mr_dmabuf,
    .deregMr = lp_dereg_mr,
    .isend = v9_isend,
    .irecv = v9_irecv,
    .iflush = lp_iflush,
    .test = lp_test,
    .closeSend = lp_close_send,
    .closeRecv = lp_close_recv,
    .closeListen = lp_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = NULL,
};
