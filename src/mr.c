/* Memory registration (mr.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mr.h"
#include "log.h"

#define LP_MR_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

ncclResult_t lp_mr_register(const struct lp_env *env, struct lp_health *health, int home, void *data, size_t size,
                            int type, int fd, uint64_t offset, void **mhandle) {
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
  m->env = env;
  m->addr = (uintptr_t)data;
  m->len = size ? size : 1;
  /* Payload only: the receiver reads it after the completion, which the NIC
   * orders behind every write of the message. */
  int access = LP_MR_ACCESS | (env->relaxed_ordering ? IBV_ACCESS_RELAXED_ORDERING : 0);
  /* With failover on, every NIC gets the registration now: a move must
   * never wait for one, and the peer needs keys valid on its new NIC. */
  for (int n = 0; n < env->nnics; n++) {
    if (n != home && (health == NULL || lp_health_nic_fatal(health, n))) continue;
    const struct lp_nic *on = &env->nics[n];
    struct ibv_mr *mr;
    if (fd >= 0) {
      if (env->ibv.reg_dmabuf_mr == NULL) {
        LP_WARN("regMrDmaBuf: this libibverbs has no ibv_reg_dmabuf_mr");
        goto fail;
      }
      mr = env->ibv.reg_dmabuf_mr(on->pd, offset, size, (uint64_t)(uintptr_t)data, fd, access);
    } else if (env->relaxed_ordering) {
      mr = env->ibv.reg_mr_iova2(on->pd, (void *)m->addr, m->len, m->addr, (unsigned)access);
    } else {
      mr = env->ibv.reg_mr(on->pd, (void *)m->addr, m->len, access);
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
    if (m->mr[n]) env->ibv.dereg_mr(m->mr[n]);
  free(m);
  return ncclSystemError;
}

ncclResult_t lp_mr_deregister(struct lp_mr *m) {
  const struct lp_env *env = m->env;
  ncclResult_t rc = ncclSuccess;
  for (int i = 0; i < LP_MAX_NICS; i++) {
    if (m->mr[i] == NULL) continue;
    int err = env->ibv.dereg_mr(m->mr[i]);
    if (err != 0) {
      LP_WARN("ibv_dereg_mr(%s) failed: %s", env->nics[i].name, strerror(err));
      rc = ncclSystemError;
    }
  }
  m->magic = 0;
  free(m);
  return rc;
}

struct ibv_mr *lp_mr_on(void *mhandle, int nic) {
  struct lp_mr *m = mhandle;
  if (m == NULL || m->magic != LP_MR_MAGIC) return NULL;
  return m->mr[nic];
}
