/* ncclNetPlugin_v8 (NCCL 2.20 - 2.23): int sizes, the oldest properties. */
#include <string.h>

#include "log.h"
#include "shim.h"
#include "wire.h"

static ncclResult_t v8_init(ncclDebugLogger_t logFunction) { return lp_init(NULL, 0, NULL, logFunction, NULL); }

static ncclResult_t v8_get_properties(int dev, ncclNetProperties_v8_t *props) {
  ncclNetProperties_v12_t p;
  ncclResult_t rc = lp_shim_props(dev, &p);
  if (rc != ncclSuccess) return rc;
  memset(props, 0, sizeof(*props));
  LP_COPY_PROPS_COMMON(props, &p);
  return ncclSuccess;
}

static ncclResult_t v8_listen(int dev, void *handle, void **listenComm) {
  return lp_listen(NULL, dev, handle, listenComm);
}

static ncclResult_t v8_connect(int dev, void *handle, void **sendComm, ncclNetDeviceHandle_v8_t **sendDevComm) {
  return lp_connect(NULL, dev, NCCL_NET_TRAFFIC_CLASS_UNDEF, handle, sendComm, sendDevComm);
}

static ncclResult_t v8_isend(void *sendComm, void *data, int size, int tag, void *mhandle, void **request) {
  if (size < 0) {
    *request = NULL;
    LP_WARN("isend: negative size %d", size);
    return ncclInvalidArgument;
  }
  return lp_isend(sendComm, data, (size_t)size, tag, mhandle, NULL, request);
}

static ncclResult_t v8_irecv(void *recvComm, int n, void **data, int *sizes, int *tags, void **mhandles,
                             void **request) {
  size_t wide[LP_MAX_RECVS];
  *request = NULL;
  if (n < 1 || n > LP_MAX_RECVS) {
    LP_WARN("irecv: %d sub-receives (accepted: 1..%d)", n, LP_MAX_RECVS);
    return ncclInvalidArgument;
  }
  for (int i = 0; i < n; i++) {
    if (sizes[i] < 0) {
      LP_WARN("irecv: negative size %d", sizes[i]);
      return ncclInvalidArgument;
    }
    wide[i] = (size_t)sizes[i];
  }
  return lp_irecv(recvComm, n, data, wide, tags, mhandles, NULL, request);
}

LP_EXPORT const ncclNet_v8_t ncclNetPlugin_v8 = {
    .name = LP_PLUGIN_NAME,
    .init = v8_init,
    .devices = lp_devices,
    .getProperties = v8_get_properties,
    .listen = v8_listen,
    .connect = v8_connect,
    .accept = lp_accept,
    .regMr = lp_reg_mr,
    .regMrDmaBuf = lp_reg_mr_dmabuf,
    .deregMr = lp_dereg_mr,
    .isend = v8_isend,
    .irecv = v8_irecv,
    .iflush = lp_iflush,
    .test = lp_test,
    .closeSend = lp_close_send,
    .closeRecv = lp_close_recv,
    .closeListen = lp_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
};
