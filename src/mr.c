/* Memory registration (mr.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mr.h"
#include "clock.h"
#include "log.h"

#define LP_MR_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

/* What one registration call asks for, once its range is settled. */
struct want {
  uintptr_t addr;
  size_t len;
  int type, fd;
  uint64_t offset; /* of `addr` in the dma-buf */
};

/* GPU memory is registered in whole pages, as NCCL's own transport does
 * (the NIC maps pages; the cache then finds the next buffer of the same
 * pages).  Host memory keeps the caller's exact range: a larger one would
 * let a peer's write reach bytes the caller never offered.  A dma-buf's
 * offset moves back with the address; if it cannot (the buffer starts
 * inside the first page), the exact range is registered. */
static struct want settle(const struct lp_env *env, void *data, size_t size, int type, int fd, uint64_t offset) {
  struct want w = {.addr = (uintptr_t)data, .len = size ? size : 1, .type = type, .fd = fd, .offset = offset};
  if (type != NCCL_PTR_CUDA) return w;
  uintptr_t page = (uintptr_t)env->page_size;
  uintptr_t start = w.addr & ~(page - 1), end = (w.addr + w.len + page - 1) & ~(page - 1);
  if (fd >= 0 && offset < w.addr - start) return w;
  w.offset -= w.addr - start;
  w.addr = start;
  w.len = end - start;
  return w;
}

/* The first entry that starts after `addr`. */
static size_t upper_bound(const struct lp_mr_cache *cache, uintptr_t addr) {
  size_t lo = 0, hi = cache->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (cache->by_addr[mid]->addr <= addr)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

#define LP_MR_LOOK_BACK 8 /* entries that start at or before the range, nearest first */

/* A cached registration of the same kind that covers the range on `home`
 * (with failover off, each NIC registers only what its comms use), or,
 * when `home` reported DEVICE_FATAL, one made while it was dead: it stays
 * dead for the process, and a registration made now would be the same, on
 * every live NIC.  (An EIO that no fatal error confirmed is not taken for
 * death here: the next registration asks the NIC again.)  Only
 * the nearest entries that start at or before it are looked at: one that
 * covers it from further back is missed, and the range is then registered
 * again, which is correct, merely not shared. */
static struct lp_mr *cache_find(struct lp_mr_cache *cache, const struct want *w, int home, int home_fatal) {
  size_t i = upper_bound(cache, w->addr);
  for (size_t k = 0; k < LP_MR_LOOK_BACK && i > 0; k++) {
    struct lp_mr *m = cache->by_addr[--i];
    uint32_t on = m->nics | (home_fatal ? m->dead_nics : 0u);
    if (m->type == w->type && (on >> home & 1u) && w->addr + w->len <= m->addr + m->len) return m;
  }
  return NULL;
}

static int cache_insert(struct lp_mr_cache *cache, struct lp_mr *m) {
  if (cache->n == cache->cap) {
    size_t cap = cache->cap ? 2 * cache->cap : 64;
    struct lp_mr **a = realloc(cache->by_addr, cap * sizeof(*a));
    if (a == NULL) return -1;
    cache->by_addr = a;
    cache->cap = cap;
  }
  size_t i = upper_bound(cache, m->addr);
  memmove(&cache->by_addr[i + 1], &cache->by_addr[i], (cache->n - i) * sizeof(*cache->by_addr));
  cache->by_addr[i] = m;
  cache->n++;
  return 0;
}

static void cache_remove(struct lp_mr_cache *cache, struct lp_mr *m) {
  for (size_t i = upper_bound(cache, m->addr); i > 0; i--) {
    if (cache->by_addr[i - 1] != m) continue;
    memmove(&cache->by_addr[i - 1], &cache->by_addr[i], (cache->n - i) * sizeof(*cache->by_addr));
    cache->n--;
    return;
  }
}

/* Deregister everywhere and free the handle. */
static ncclResult_t destroy(struct lp_mr *m) {
  ncclResult_t rc = ncclSuccess;
  for (int n = 0; n < LP_MAX_NICS; n++) {
    if (m->mr[n] == NULL) continue;
    int err = m->env->ibv.dereg_mr(m->mr[n]);
    if (err != 0) {
      LP_WARN("ibv_dereg_mr(%s) failed: %s", m->env->nics[n].name, strerror(err));
      rc = ncclSystemError;
    }
  }
  m->magic = 0;
  free(m);
  return rc;
}

/* What to do about a refused registration, for the common causes. */
static const char *remedy(int err, const struct want *w) {
  if (w->type != NCCL_PTR_CUDA)
    return err == ENOMEM || err == EPERM || err == EAGAIN
               ? ": the memory this process may pin is used up: raise its limit (ulimit -l unlimited, or "
                 "LimitMEMLOCK=infinity in its systemd unit)"
               : "";
  if (w->fd >= 0)
    return ": the GPU driver does not export this memory as a dma-buf to the NIC; NCCL_DMABUF_ENABLE=0 makes NCCL "
           "use peer memory (nvidia_peermem) instead, or NCCL_NET_GDR_LEVEL=LOC keeps GPU memory off the network";
  return ": peer memory (nvidia_peermem) did not map this GPU memory for the NIC; check that the module is loaded "
         "for this driver, or set NCCL_NET_GDR_LEVEL=LOC to keep GPU memory off the network";
}

/* `call` refused the registration on `on`: said, errno kept for create().
 * EIO is what every command of a dead device's context answers: INFO, as
 * create() says what follows. */
static struct ibv_mr *refused(const char *call, const struct lp_nic *on, const struct want *w) {
  int err = errno;
  char via[64] = "";
  if (w->fd >= 0) snprintf(via, sizeof(via), ", dma-buf fd %d at offset %llu", w->fd, (unsigned long long)w->offset);
  if (err == EIO)
    LP_INFO(NCCL_NET, "%s(%s, %p, %zu bytes%s): %s", call, on->name, (void *)w->addr, w->len, via, strerror(err));
  else
    LP_WARN("%s(%s, %s memory %p, %zu bytes%s) failed: %s%s", call, on->name, w->type == NCCL_PTR_CUDA ? "GPU" : "host",
            (void *)w->addr, w->len, via, strerror(err), remedy(err, w));
  errno = err;
  return NULL;
}

/* One NIC's registration of the range; NULL (errno set) if refused, WARNed
 * unless the NIC takes no dma-bufs at all (said at init, or by create()). */
static struct ibv_mr *register_on(const struct lp_env *env, const struct lp_nic *on, const struct want *w) {
  /* Payload only: the receiver reads it after the completion, which the NIC
   * orders behind every write of the message. */
  int access = LP_MR_ACCESS | (env->relaxed_ordering ? IBV_ACCESS_RELAXED_ORDERING : 0);
  if (w->fd >= 0) {
    if (!on->dmabuf) {
      errno = EOPNOTSUPP;
      return NULL;
    }
    struct ibv_mr *mr = env->ibv.reg_dmabuf_mr(on->pd, w->offset, w->len, w->addr, w->fd, access);
    return mr != NULL ? mr : refused("ibv_reg_dmabuf_mr", on, w);
  }
  struct ibv_mr *mr = env->relaxed_ordering
                          ? env->ibv.reg_mr_iova2(on->pd, (void *)w->addr, w->len, w->addr, (unsigned)access)
                          : env->ibv.reg_mr(on->pd, (void *)w->addr, w->len, access);
  return mr != NULL ? mr : refused("ibv_reg_mr", on, w);
}

/* Register the range on `home` and, with failover on, every other live NIC:
 * a move must never wait for a registration, and the peer needs keys valid
 * on its new NIC.  A NIC that refuses is left out of the handle's `nics`,
 * which keeps the connections that use it from moving there.  With subnet
 * routing, every NIC too: a connection NCCL made for one device may run on
 * another NIC (connect.c), and NCCL hands it the registration it made for
 * that device (regIsGlobal).
 *
 * With failover on, a dead NIC (DEVICE_FATAL, or EIO, which is what every
 * command of a dead device's context answers before its event is read) is
 * left out and named in `dead_nics`, the home NIC too: a connection there
 * is about to move, and its isend or irecv waits for that move
 * (lp_comm_awaits_move).  Failing the registration ended the job on a
 * fault failover is there to survive. */
static struct lp_mr *create(const struct lp_env *env, struct lp_health *health, int home, const struct want *w) {
  int everywhere = health != NULL || env->cfg.subnet_routing;
  struct lp_mr *m = calloc(1, sizeof(*m));
  if (m == NULL) return NULL;
  m->magic = LP_MR_MAGIC;
  m->env = env;
  m->addr = w->addr;
  m->len = w->len;
  m->type = w->type;
  m->made_ns = lp_now_ns();
  for (int n = 0; n < env->nnics; n++) {
    if (health != NULL && lp_health_nic_fatal(health, n)) {
      m->dead_nics |= 1u << n;
      continue;
    }
    if (n != home && !everywhere) continue;
    m->mr[n] = register_on(env, &env->nics[n], w);
    if (m->mr[n] != NULL) {
      m->nics |= 1u << n;
    } else if (health != NULL && errno == EIO) {
      m->dead_nics |= 1u << n;
    } else if (n == home) {
      if (w->fd >= 0 && !env->nics[n].dmabuf)
        LP_WARN(
            "regMrDmaBuf: %s, the NIC this connection uses, cannot register dma-bufs (ibv_reg_dmabuf_mr is "
            "missing, or the kernel or the device refuses it), though another NIC of the node can; set "
            "NCCL_DMABUF_ENABLE=0 so that NCCL registers GPU memory through peer memory (nvidia_peermem), or keep "
            "connections off %s (NCCL_IB_HCA)",
            env->nics[n].name, env->nics[n].name);
      destroy(m);
      return NULL;
    } else if (w->fd < 0 || env->nics[n].dmabuf) { /* a NIC without dma-bufs was named once, at init */
      LP_WARN("connections that use %p+%zu cannot move to %s", (void *)w->addr, w->len, env->nics[n].name);
    }
  }
  if (m->nics == 0) {
    LP_WARN("regMr: %p+%zu could be registered on no NIC: %s is dead, and no other NIC took it", (void *)w->addr,
            w->len, env->nics[home].name);
    destroy(m);
    return NULL;
  }
  return m;
}

ncclResult_t lp_mr_register(struct lp_mr_cache *cache, const struct lp_env *env, struct lp_health *health, int home,
                            void *data, size_t size, int type, int fd, uint64_t offset, void **mhandle) {
  *mhandle = NULL;
  if (type != NCCL_PTR_HOST && type != NCCL_PTR_CUDA) {
    LP_WARN("regMr: pointer type %d is not NCCL_PTR_HOST (%d) or NCCL_PTR_CUDA (%d)", type, NCCL_PTR_HOST,
            NCCL_PTR_CUDA);
    return ncclInvalidArgument;
  }
  if (type == NCCL_PTR_CUDA && fd < 0 && !env->peer_memory) {
    LP_WARN(
        "regMr: %p+%zu is GPU memory (NCCL_PTR_CUDA), but no GPU peer memory module is loaded on this host "
        "(nvidia-peermem): nothing was registered; load the module, or let NCCL register it as a dma-buf "
        "(NCCL_DMABUF_ENABLE=1, the default, with a CUDA driver and kernel that support it)",
        data, size);
    return ncclInvalidArgument;
  }
  struct want w = settle(env, data, size, type, fd, offset);
  pthread_mutex_lock(&cache->lock);
  struct lp_mr *m = cache_find(cache, &w, home, health != NULL && lp_health_nic_fatal(health, home));
  if (m == NULL) {
    m = create(env, health, home, &w);
    if (m != NULL && cache_insert(cache, m) != 0) {
      destroy(m);
      m = NULL;
    }
    if (m != NULL) m->cache = cache;
  }
  if (m != NULL) m->refs++;
  pthread_mutex_unlock(&cache->lock);
  if (m == NULL) return ncclSystemError;
  *mhandle = m;
  return ncclSuccess;
}

ncclResult_t lp_mr_deregister(struct lp_mr *m) {
  struct lp_mr_cache *cache = m->cache;
  pthread_mutex_lock(&cache->lock);
  int last = --m->refs == 0;
  if (last) cache_remove(cache, m);
  pthread_mutex_unlock(&cache->lock);
  if (!last) return ncclSuccess;
  return destroy(m);
}

struct ibv_mr *lp_mr_on(void *mhandle, int nic) {
  struct lp_mr *m = mhandle;
  if (m == NULL || m->magic != LP_MR_MAGIC) return NULL;
  return m->mr[nic];
}

uint32_t lp_mr_nics(void *mhandle) {
  struct lp_mr *m = mhandle;
  return m != NULL && m->magic == LP_MR_MAGIC ? m->nics : 0;
}
