/*
 * Shared by the per-version shims: every exported ncclNetPlugin_vN is a
 * table of thin adapters over the one internal API (src/linkpass.h).
 */
#ifndef LP_SHIM_H
#define LP_SHIM_H

#include "linkpass.h"
#include "linkpass/nccl_net.h"

#define LP_EXPORT __attribute__((visibility("default")))

/* Properties of the newest layout; each shim copies what its version has. */
static inline ncclResult_t lp_shim_props(int dev, ncclNetProperties_v12_t *p) { return lp_get_properties(dev, p); }

#define LP_COPY_PROPS_COMMON(dst, src)         \
  do {                                         \
    (dst)->name = (src)->name;                 \
    (dst)->pciPath = (src)->pciPath;           \
    (dst)->guid = (src)->guid;                 \
    (dst)->ptrSupport = (src)->ptrSupport;     \
    (dst)->regIsGlobal = (src)->regIsGlobal;   \
    (dst)->speed = (src)->speed;               \
    (dst)->port = (src)->port;                 \
    (dst)->latency = (src)->latency;           \
    (dst)->maxComms = (src)->maxComms;         \
    (dst)->maxRecvs = (src)->maxRecvs;         \
    (dst)->netDeviceType = (src)->netDeviceType; \
    (dst)->netDeviceVersion = (src)->netDeviceVersion; \
  } while (0)

/* v9..v11 also have forceFlush, vProps (4 devices) and the size limits. */
#define LP_COPY_PROPS_V9(dst, src)                                                 \
  do {                                                                             \
    LP_COPY_PROPS_COMMON(dst, src);                                                \
    (dst)->forceFlush = (src)->forceFlush;                                         \
    (dst)->vProps.ndevs = (src)->vProps.ndevs > 4 ? 4 : (src)->vProps.ndevs;       \
    for (int i_ = 0; i_ < (dst)->vProps.ndevs; i_++) (dst)->vProps.devs[i_] = (src)->vProps.devs[i_]; \
    (dst)->maxP2pBytes = (src)->maxP2pBytes;                                       \
    (dst)->maxCollBytes = (src)->maxCollBytes;                                     \
  } while (0)

#endif
