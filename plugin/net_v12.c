/* ncclNetPlugin_v12 (NCCL 2.30): the internal API almost as is. */
#include <string.h>

#include "shim.h"

static ncclResult_t v12_connect(void *ctx, int dev, void *handle, void **sendComm,
                                ncclNetDeviceHandle_v12_t **sendDevComm) {
  return lp_connect(ctx, dev, NCCL_NET_TRAFFIC_CLASS_UNDEF, handle, sendComm, sendDevComm);
}

LP_EXPORT const ncclNet_v12_t ncclNetPlugin_v12 = {
    .name = LP_PLUGIN_NAME,
    .init = lp_init,
    .devices = lp_devices,
    .getProperties = lp_get_properties,
    .listen = lp_listen,
    .connect = v12_connect,
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
    .getDeviceMr = NULL,   /* no device offload */
    .irecvConsumed = NULL, /* no device offload */
    .makeVDevice = NULL,   /* NCCL then uses the physical devices; failover does its own pooling */
    .finalize = lp_finalize,
    .setNetAttr = lp_set_net_attr,
};
