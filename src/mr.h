/*
 * Memory registration.  Registrations are per NIC, not per comm
 * (regIsGlobal = 1): NCCL may use a handle with any comm on the same device.
 */
#ifndef LP_MR_H
#define LP_MR_H

#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>

#include "env.h"
#include "health.h"
#include "linkpass/nccl_net.h"

#define LP_MR_MAGIC 0x4c504d52u

/* Registered memory handed to NCCL. */
struct lp_mr {
  uint32_t magic;
  const struct lp_env *env; /* to deregister after the comm is gone */
  uintptr_t addr;
  size_t len;
  struct ibv_mr *mr[LP_MAX_NICS]; /* per NIC: every NIC when failover is on, so a move never waits */
};

/* Register `data` on NIC `home`, and on every other NIC when `health` is
 * set (failover on: a move never waits for a registration).  fd >= 0: a
 * dma-buf. */
ncclResult_t lp_mr_register(const struct lp_env *env, struct lp_health *health, int home, void *data, size_t size,
                            int type, int fd, uint64_t offset, void **mhandle);
/* Deregister everywhere and free the handle (checked by the caller). */
ncclResult_t lp_mr_deregister(struct lp_mr *m);
/* The registration of an mhandle on NIC `nic`.  NULL when invalid. */
struct ibv_mr *lp_mr_on(void *mhandle, int nic);

#endif
