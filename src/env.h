/*
 * The environment: what the process found at init (settings, the loaded
 * verbs library, the NICs and devices, each device's NIC pool, the
 * out-of-band address, where event lines go).  Built once by plugin.c,
 * read-only afterwards, and handed to every module that needs it: a
 * connection keeps a pointer to it, the control plane too.  Nothing here is
 * ever written after init, so it is read without a lock from any thread.
 */
#ifndef LP_ENV_H
#define LP_ENV_H

#include <net/if.h>

#include "config.h"
#include "ibv.h"
#include "nic.h"
#include "report.h"
#include "sock.h"
#include "wire.h"

struct lp_env {
  struct lp_config cfg;
  struct lp_ibv ibv;
  /* NCCL_IB_PCI_RELAXED_ORDERING in force: data registrations (never the
   * control memory, whose order the protocol needs) take
   * IBV_ACCESS_RELAXED_ORDERING, through ibv_reg_mr_iova2. */
  int relaxed_ordering;
  /* GPU peer memory is loaded (gdr.h): CUDA pointers can be registered. */
  int peer_memory;
  long page_size; /* GPU registrations cover whole pages, as NCCL's */
  int nnics;
  struct lp_nic nics[LP_MAX_NICS];
  int ndevs;
  struct lp_dev devs[LP_MAX_DEVS];
  /* Each device's pool, primary first (pool.h): where its connections move. */
  int pool_n[LP_MAX_DEVS];
  int pool[LP_MAX_DEVS][LP_MAX_DEVS];
  union lp_sockaddr oob_addr;
  char oob_ifname[IF_NAMESIZE + 1];
  /* A second interface for the control channel's second connection
   * (ctlchan.h); oob_alt_ifname empty: none, or failover is off. */
  union lp_sockaddr oob_alt_addr;
  char oob_alt_ifname[IF_NAMESIZE + 1];
  char hostname[LP_HOST_MAX];
  struct lp_syslog syslog;
};

/* Each device's pool (LINKPASS_NIC_POOL, or closeness), logged: part of
 * building the environment at init, when failover is on. */
void lp_env_build_pools(struct lp_env *env);

/* The NIC a device is a port of. */
static inline const struct lp_nic *lp_env_nic_of(const struct lp_env *env, int dev) {
  return &env->nics[env->devs[dev].nic];
}

#endif
