/*
 * The plugin context: the one place that owns global state (the logger,
 * the configuration, the loaded verbs library, the NICs and devices, the
 * connects in progress).  There is exactly one instance per process, and no
 * other mutable global anywhere in the library.
 */
#ifndef LP_PLUGIN_H
#define LP_PLUGIN_H

#include <net/if.h>
#include <pthread.h>
#include <stdint.h>

#include "config.h"
#include "failover.h"
#include "health.h"
#include "ibv.h"
#include "linkpass/nccl_net.h"
#include "nic.h"
#include "report.h"
#include "sock.h"
#include "wire.h"

#define LP_CTX_MAGIC 0x4c504354u

/* What NCCL's init hands us per communicator (v11+); v8-v10 have none and
 * use the plugin's default context. */
struct lp_ctx {
  uint32_t magic;
  uint64_t comm_id;
  int traffic_class; /* NCCL_NET_TRAFFIC_CLASS_UNDEF: use NCCL_IB_TC */
};

struct lp_connect_stage;

struct lp_plugin {
  pthread_mutex_t lock; /* guards everything below except the logger */
  ncclDebugLogger_t logger;
  int stderr_level; /* -1 until NCCL_DEBUG is read */
  int ready;        /* devices discovered, verbs loaded */
  int config_logged; /* the effective settings go to the INFO log once */
  int nctx;         /* live contexts (init calls not yet finalized) */
  struct lp_config cfg;
  struct lp_ibv ibv;
  int nnics;
  struct lp_nic nics[LP_MAX_NICS];
  int ndevs;
  struct lp_dev devs[LP_MAX_DEVS];
  union lp_sockaddr oob_addr;
  char oob_ifname[IF_NAMESIZE + 1];
  char hostname[LP_HOST_MAX];
  struct lp_ctx default_ctx;
  struct lp_connect_stage *stages; /* connects in progress */
  uint64_t next_token;
  /* Link failover (failover.h, health.h). */
  struct lp_health health;
  struct lp_fo_stats fo_stats;
  struct lp_syslog syslog;
};

struct lp_plugin *lp_plugin(void);

/* Non-zero random 64-bit value (ids that must not collide across processes). */
uint64_t lp_random_u64(void);

/* Resolve an NCCL context pointer (NULL: the default one).  NULL if bogus. */
struct lp_ctx *lp_ctx_get(void *ctx);

/* Free connects NCCL started and abandoned (connect.c). */
void lp_connect_stages_free(void);

/* Traffic class a comm made under `ctx` uses. */
int lp_ctx_tc(const struct lp_ctx *ctx);

#endif
