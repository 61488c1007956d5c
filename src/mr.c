/* Memory registration.  Registrations are per NIC, not per comm (regIsGlobal
 * = 1): NCCL may use a handle with any comm on the same device. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "log.h"

#define LP_MR_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

static ncclResult_t reg(struct lp_comm *c, void *data, size_t size, int type, int fd, uint64_t offset,
                        void **mhandle) {
  struct lp_plugin *p = lp_plugin();
  *mhandle = NULL;
  if (type != NCCL_PTR_HOST && fd < 0) {
    LP_WARN("regMr: pointer type %d is not supported (only host memory, NCCL_PTR_HOST)", type);
    return ncclInvalidArgument;
  }
  struct lp_mr *m = calloc(1, sizeof(*m));
  if (m == NULL) return ncclSystemError;
  /* Exactly the caller's range: the NIC pins whole pages anyway, and a
   * larger range would let a peer's write reach memory the caller never
   * offered (and makes sanitizers and the simulator touch foreign bytes). */
  m->magic = LP_MR_MAGIC;
  m->addr = (uintptr_t)data;
  m->len = size ? size : 1;
  /* With failover on, every NIC gets the registration now: a move must
   * never wait for one, and the peer needs keys valid on its new NIC. */
  int home = p->devs[c->link.dev].nic;
  for (int n = 0; n < p->nnics; n++) {
    if (n != home && !(p->cfg.failover && p->health.running)) continue;
    if (n != home && atomic_load(&p->health.fatal[n])) continue;
    struct lp_nic *on = &p->nics[n];
    struct ibv_mr *mr;
    if (fd >= 0) {
      if (p->ibv.reg_dmabuf_mr == NULL) {
        LP_WARN("regMrDmaBuf: this libibverbs has no ibv_reg_dmabuf_mr");
        goto fail;
      }
      mr = p->ibv.reg_dmabuf_mr(on->pd, offset, size, (uint64_t)(uintptr_t)data, fd, LP_MR_ACCESS);
    } else {
      mr = p->ibv.reg_mr(on->pd, (void *)m->addr, m->len, LP_MR_ACCESS);
    }
    if (mr == NULL) {
      LP_WARN("ibv_reg_mr(%s, %p, %zu bytes) failed: %s%s", on->name, (void *)m->addr, m->len, strerror(errno),
              n == home ? "" : " (connections cannot move to this NIC with this buffer)");
      if (n == home) goto fail;
      continue;
    }
    m->mr[n] = mr;
  }
  *mhandle = m;
  return ncclSuccess;
fail:
  for (int n = 0; n < LP_MAX_NICS; n++)
    if (m->mr[n]) p->ibv.dereg_mr(m->mr[n]);
  free(m);
  return ncclSystemError;
}

ncclResult_t lp_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle) {
  struct lp_comm *c = lp_comm_check(comm, 0);
  if (c == NULL) {
    LP_WARN("regMr: invalid comm %p", comm);
    return ncclInvalidArgument;
  }
  return reg(c, data, size, type, -1, 0, mhandle);
}

ncclResult_t lp_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset, int fd,
                              void **mhandle) {
  struct lp_comm *c = lp_comm_check(comm, 0);
  if (c == NULL) {
    LP_WARN("regMrDmaBuf: invalid comm %p", comm);
    return ncclInvalidArgument;
  }
  /* Host memory needs no dma-buf: register it the ordinary way. */
  if (type == NCCL_PTR_HOST) fd = -1;
  return reg(c, data, size, type, fd, offset, mhandle);
}

ncclResult_t lp_dereg_mr(void *comm, void *mhandle) {
  (void)comm; /* registrations belong to NICs, not comms: the comm may be gone */
  struct lp_mr *m = mhandle;
  if (m == NULL || m->magic != LP_MR_MAGIC) {
    LP_WARN("deregMr: invalid memory handle %p", mhandle);
    return ncclInvalidArgument;
  }
  struct lp_plugin *p = lp_plugin();
  ncclResult_t rc = ncclSuccess;
  for (int i = 0; i < LP_MAX_NICS; i++) {
    if (m->mr[i] == NULL) continue;
    int err = p->ibv.dereg_mr(m->mr[i]);
    if (err != 0) {
      LP_WARN("ibv_dereg_mr(%s) failed: %s", p->nics[i].name, strerror(err));
      rc = ncclSystemError;
    }
  }
  m->magic = 0;
  free(m);
  return rc;
}
