/*
 * Memory registration.  Registrations are per NIC, not per comm
 * (regIsGlobal = 1): NCCL may use a handle with any comm on the same device.
 * NCCL registers the same buffers again and again (each comm, each
 * channel), so registrations go through a refcounted cache: a range already
 * registered is handed out again, and deregistered with its last handle.
 */
#ifndef LP_MR_H
#define LP_MR_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "env.h"
#include "health.h"
#include "linkpass/nccl_net.h"

#define LP_MR_MAGIC 0x4c504d52u

/* Registered memory handed to NCCL (one per cached range). */
struct lp_mr {
  uint32_t magic;
  const struct lp_env *env;  /* to deregister after the comm is gone */
  struct lp_mr_cache *cache; /* the cache it lives in */
  uintptr_t addr;            /* the registered range: GPU memory in whole pages */
  size_t len;
  int type;      /* NCCL_PTR_HOST or NCCL_PTR_CUDA (a dma-buf is GPU memory) */
  int refs;      /* handles NCCL holds (under the cache's lock) */
  uint32_t nics; /* bit n: registered on NIC n (mr[n] != NULL) */
  /* Bit n: NIC n was left out as dead (DEVICE_FATAL, or it answered EIO),
   * with failover on: a connection still there waits for its move
   * (lp_comm_awaits_move), at most LP_MR_DEAD_WAIT_NS after made_ns unless
   * the NIC's fatal error is confirmed. */
  uint32_t dead_nics;
  uint64_t made_ns;
  struct lp_mr *next;
  struct ibv_mr *mr[LP_MAX_NICS]; /* per NIC: every NIC when failover is on, so a move never waits */
};

#define LP_MR_DEAD_WAIT_NS (5ull * 1000 * 1000 * 1000)

/* The process's registrations, owned by the plugin context: sorted by
 * start address, so that a lookup among thousands (a comm per peer and
 * channel, each registering its buffers) is a binary search. */
struct lp_mr_cache {
  pthread_mutex_t lock;
  struct lp_mr **by_addr;
  size_t n, cap;
};

/* Register `data` on NIC `home`, and on every other NIC when `health` is
 * set (failover on: a move never waits for a registration) or subnet
 * routing is on (a connection may run on another NIC), or take the
 * cached registration that covers it.  `type` NCCL_PTR_CUDA needs GPU
 * peer memory (env->peer_memory) unless `fd` >= 0: a dma-buf, registered
 * on every NIC before the call returns (NCCL closes the fd right after). */
ncclResult_t lp_mr_register(struct lp_mr_cache *cache, const struct lp_env *env, struct lp_health *health, int home,
                            void *data, size_t size, int type, int fd, uint64_t offset, void **mhandle);
/* Give back one handle; the last one deregisters everywhere. */
ncclResult_t lp_mr_deregister(struct lp_mr *m);
/* The registration of an mhandle on NIC `nic`.  NULL when invalid. */
struct ibv_mr *lp_mr_on(void *mhandle, int nic);
/* The NICs an mhandle is registered on (bit n: NIC n); 0 when invalid. */
uint32_t lp_mr_nics(void *mhandle);
/* 1 when [data, data + size) lies inside registration m.  Checked against
 * m's own range, the buffer's addresses: an ibv_mr's addr is not one for a
 * dma-buf, where rdma-core reports the offset inside the dma-buf. */
static inline int lp_mr_covers(const struct lp_mr *m, const void *data, size_t size) {
  uintptr_t at = (uintptr_t)data;
  return at >= m->addr && at - m->addr <= m->len && size <= m->len - (at - m->addr);
}

#endif
