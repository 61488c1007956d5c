/* GPUDirect RDMA support (gdr.h). */
#include "gdr.h"

#include <errno.h>
#include <unistd.h>

/* The files whose presence NCCL takes for loaded peer memory. */
static const char *const peer_memory_files[] = {
    "/sys/kernel/mm/memory_peers/nv_mem/version",
    "/sys/kernel/mm/memory_peers/nv_mem_nc/version",
    "/sys/module/nvidia_peermem/version",
};

int lp_gdr_peer_memory(void) {
  for (size_t i = 0; i < sizeof(peer_memory_files) / sizeof(peer_memory_files[0]); i++)
    if (access(peer_memory_files[i], F_OK) == 0) return 1;
  return 0;
}

int lp_gdr_dmabuf_supported(const struct lp_ibv *ibv, const struct lp_nic *nic) {
  if (ibv->reg_dmabuf_mr == NULL || nic->pd == NULL) return 0;
  errno = 0;
  struct ibv_mr *mr = ibv->reg_dmabuf_mr(nic->pd, 0, 0, 0, -1, 0);
  int err = errno;
  if (mr != NULL) { /* no library should take this; if one does, it can */
    ibv->dereg_mr(mr);
    return 1;
  }
  return err != EOPNOTSUPP && err != EPROTONOSUPPORT;
}
