/*
 * GPUDirect RDMA: what this host and its NICs offer for GPU memory, found as
 * NCCL's own IB transport finds it (shared/reference/gpu-memory.md).
 */
#ifndef LP_GDR_H
#define LP_GDR_H

#include "ibv.h"
#include "nic.h"

/* 1 when a GPU peer-memory module is loaded (nvidia-peermem, or MLNX_OFED's
 * nv_peer_mem): ibv_reg_mr then takes CUDA pointers (NCCL_PTR_CUDA). */
int lp_gdr_peer_memory(void);

/* 1 when `nic` registers dma-bufs: ibv_reg_dmabuf_mr exists and, asked with
 * no buffer (fd -1), complains about the fd rather than saying the device
 * or kernel cannot do it (EOPNOTSUPP, EPROTONOSUPPORT). */
int lp_gdr_dmabuf_supported(const struct lp_ibv *ibv, const struct lp_nic *nic);

#endif
