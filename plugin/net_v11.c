/* ncclNetPlugin_v11 (NCCL 2.28, 2.29): v12 with a smaller properties struct. */
#include <string.h>

#include "shim.h"

static ncclResult_t v11_init(void **ctx, uint64_t commId, ncclNetCommConfig_v11_t *config,
                             ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction) {
  ncclNetCommConfig_v12_t c;
  if (config) c.trafficClass = config->trafficClass;
  return lp_init(ctx, commId, config ? &c : NULL, logFunction, profFunction);
}

static ncclResult_t v11_get_properties(int dev, ncclNetProperties_v11_t *props) {
  ncclNetProperties_v12_t p;
  ncclResult_t rc = lp_shim_props(dev, &p);
  if (rc != ncclSuccess) return rc;
  memset(props, 0, sizeof(*props));
  LP_COPY_PROPS_V9(props, &p);
  props->maxMultiRequestSize = p.maxMultiRequestSize;
  return ncclSuccess;
}

static ncclResult_t v11_connect(void *ctx, int dev, void *handle, void **sendComm,
                                ncclNetDeviceHandle_v11_t **sendDevComm) {
  return lp_connect(ctx, dev, NCCL_NET_TRAFFIC_CLASS_UNDEF, handle, sendComm, sendDevComm);
}

static ncclResult_t v11_set_net_attr(void *ctx, ncclNetAttr_v11_t *attr) {
  ncclNetAttr_v12_t a;
  memcpy(&a, attr, sizeof(a)); /* same layout */
  return lp_set_net_attr(ctx, &a);
}

LP_EXPORT const ncclNet_v11_t ncclNetPlugin_v11 = {
    .name = LP_PLUGIN_NAME,
    .init = v11_init,
    .devices = lp_devices,
    .getProperties = v11_get_properties,
    .listen = lp_listen,
    .connect = v11_connect,
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
    .finalize = lp_finalize,
    .setNetAttr = v11_set_net_attr,
};
