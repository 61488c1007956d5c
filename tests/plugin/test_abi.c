/* Struct sizes and offsets of the NCCL net ABI (reference sheet, x86_64). */
#include <criterion/criterion.h>
#include <stddef.h>

#include "linkpass/nccl_net.h"

#define SZ(t, n) cr_expect_eq(sizeof(t), (size_t)(n), #t " is %zu bytes, expected %d", sizeof(t), n)
#define OFF(t, f, n) \
  cr_expect_eq(offsetof(t, f), (size_t)(n), #t "." #f " at %zu, expected %d", offsetof(t, f), n)

Test(abi, constants) {
  cr_expect_eq(NCCL_NET_HANDLE_MAXSIZE, 128);
  cr_expect_eq(NCCL_NET_MAX_REQUESTS, 32);
  cr_expect_eq(NCCL_PTR_HOST, 1);
  cr_expect_eq(NCCL_PTR_CUDA, 2);
  cr_expect_eq(NCCL_PTR_DMABUF, 4);
  cr_expect_eq(NCCL_NET, 0x10);
  cr_expect_eq(ncclRemoteError, 6);
  cr_expect_eq(ncclInProgress, 7);
  cr_expect_eq(NCCL_LOG_WARN, 2);
  cr_expect_eq(NCCL_LOG_TRACE, 5);
  cr_expect_eq(NCCL_MAX_NET_SIZE_BYTES, 1ull << 40);
}

Test(abi, v12) {
  SZ(ncclNetVDeviceProps_v12_t, 36);
  SZ(ncclNetProperties_v12_t, 128);
  OFF(ncclNetProperties_v12_t, guid, 16);
  OFF(ncclNetProperties_v12_t, forceFlush, 32);
  OFF(ncclNetProperties_v12_t, speed, 36);
  OFF(ncclNetProperties_v12_t, netDeviceType, 56);
  OFF(ncclNetProperties_v12_t, vProps, 64);
  OFF(ncclNetProperties_v12_t, maxP2pBytes, 104);
  OFF(ncclNetProperties_v12_t, maxCollBytes, 112);
  OFF(ncclNetProperties_v12_t, maxMultiRequestSize, 120);
  OFF(ncclNetProperties_v12_t, railId, 124);
  OFF(ncclNetProperties_v12_t, planeId, 126);
  SZ(ncclNetCommAttr_v12_t, 16);
  SZ(ncclNetAttr_v12_t, 44);
  SZ(ncclNet_v12_t, 176);
  OFF(ncclNet_v12_t, init, 8);
  OFF(ncclNet_v12_t, isend, 80);
  OFF(ncclNet_v12_t, test, 104);
  OFF(ncclNet_v12_t, makeVDevice, 152);
  OFF(ncclNet_v12_t, finalize, 160);
  OFF(ncclNet_v12_t, setNetAttr, 168);
}

Test(abi, v11) {
  SZ(ncclNetVDeviceProps_v11_t, 20);
  SZ(ncclNetProperties_v11_t, 112);
  OFF(ncclNetProperties_v11_t, vProps, 64);
  OFF(ncclNetProperties_v11_t, maxP2pBytes, 88);
  OFF(ncclNetProperties_v11_t, maxCollBytes, 96);
  OFF(ncclNetProperties_v11_t, maxMultiRequestSize, 104);
  SZ(ncclNetAttr_v11_t, 44);
  SZ(ncclNet_v11_t, 176);
  OFF(ncclNet_v11_t, finalize, 160);
}

Test(abi, v10_v9) {
  SZ(ncclNetProperties_v10_t, 104);
  OFF(ncclNetProperties_v10_t, vProps, 64);
  OFF(ncclNetProperties_v10_t, maxP2pBytes, 88);
  SZ(ncclNetProperties_v9_t, 104);
  OFF(ncclNetProperties_v9_t, maxCollBytes, 96);
  SZ(ncclNet_v10_t, 160);
  OFF(ncclNet_v10_t, makeVDevice, 152);
  SZ(ncclNet_v9_t, 160);
  SZ(ncclNetCommConfig_v10_t, 4);
}

Test(abi, v8) {
  SZ(ncclNetProperties_v8_t, 64);
  OFF(ncclNetProperties_v8_t, speed, 32);
  OFF(ncclNetProperties_v8_t, netDeviceVersion, 56);
  SZ(ncclNet_v8_t, 152);
  OFF(ncclNet_v8_t, irecvConsumed, 144);
  SZ(ncclNetDeviceHandle_v8_t, 32);
  OFF(ncclNetDeviceHandle_v8_t, needsProxyProgress, 24);
}
