/* ncclNetPlugin_v10 (NCCL 2.26, 2.27): no context; the traffic class comes
 * with connect. */
#include <string.h>

#include "shim.h"

static ncclResult_t v10_init(ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction) {
  return lp_init(NULL, 0, NULL, logFunction, profFunction);
}

static ncclResult_t v10_get_properties(int dev, ncclNetProperties_v10_t *props) {
  ncclNetProperties_v12_t p;
  ncclResult_t rc = lp_shim_props(dev, &p);
  if (rc != ncclSuccess) return rc;
  memset(props, 0, sizeof(*props));
  LP_COPY_PROPS_V9(props, &p);
  return ncclSuccess;
}

static ncclResult_t v10_listen(int dev, void *handle, void **listenComm) {
  return lp_listen(NULL, dev, handle, listenComm);
}

static ncclResult_t v10_connect(int dev, ncclNetCommConfig_v10_t *config, void *handle, void **sendComm,
                                ncclNetDeviceHandle_v10_t **sendDevComm) {
  int tc = config ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF;
  return lp_connect(NULL, dev, tc, handle, sendComm, sendDevComm);
}

LP_EXPORT const ncclNet_v10_t ncclNetPlugin_v10 = {
    .name = LP_PLUGIN_NAME,
    .init = v10_init,
    .devices = lp_devices,
    .getProperties = v10_get_properties,
    .listen = v10_listen,
    .connect = v10_connect,
    .accept = lp_accept,
    .regMr = lp_reg_mr,
    .regMrDmaBuf = lp_reg_mr_dmabuf,
    .deregMr = lp_dereg_mr,
    .isend = lp_isend,
    .irecv = lp_irecv,
    .iflush = lp_iflush,
    .test = lp_test,
    .closeSend = lp_close_send,
    .closeRecv = lp_close_recv,
    .closeListen = lp_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = NULL,
};
