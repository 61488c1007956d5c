/* The plugin context and the device-level API: init, devices,
 * getProperties, finalize. */
#include "plugin.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "linkpass.h"
#include "log.h"
#include "nccl_env.h"
#include "pool.h"

/* The only mutable global of the library. */
static struct lp_plugin the_plugin = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .stderr_level = -1,
};

struct lp_plugin *lp_plugin(void) { return &the_plugin; }

uint64_t lp_random_u64(void) {
  uint64_t v = 0;
  while (v == 0) {
    if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v)) {
      /* No entropy yet (early boot): time and pid are unique enough for ids. */
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      v = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40) ^ (uint64_t)(uintptr_t)&v;
    }
  }
  return v;
}

struct lp_ctx *lp_ctx_get(void *ctx) {
  if (ctx == NULL) return &lp_plugin()->default_ctx;
  struct lp_ctx *c = ctx;
  return c->magic == LP_CTX_MAGIC ? c : NULL;
}

int lp_ctx_tc(const struct lp_ctx *ctx) {
  if (ctx && ctx->traffic_class != NCCL_NET_TRAFFIC_CLASS_UNDEF) return ctx->traffic_class;
  return lp_plugin()->cfg.tc;
}

static const char *env_get(void *arg, const char *name) {
  (void)arg;
  return getenv(name);
}

static void warn_line(void *arg, const char *msg) {
  (void)arg;
  LP_WARN("%s", msg);
}

static void info_line(void *arg, const char *msg) {
  (void)arg;
  LP_INFO(NCCL_INIT | NCCL_NET | NCCL_ENV, "%s", msg);
}

static int read_numa(const struct lp_nic *nic) {
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/device/numa_node", nic->ibdev_path);
  FILE *f = fopen(path, "r");
  int numa = -1;
  if (f != NULL) {
    if (fscanf(f, "%d", &numa) != 1) numa = -1;
    fclose(f);
  }
  return numa;
}

/* Each device's NIC pool, logged once: closeness order unless
 * LINKPASS_NIC_POOL spells it out. */
static void build_pools(struct lp_plugin *p) {
  struct lp_health *h = &p->health;
  struct lp_pool_nic in[LP_MAX_DEVS];
  int n = p->ndevs < LP_POOL_MAX ? p->ndevs : LP_POOL_MAX;
  for (int d = 0; d < n; d++) {
    snprintf(in[d].name, sizeof(in[d].name), "%s", p->devs[d].name);
    in[d].pci_path = p->nics[p->devs[d].nic].pci_path;
    in[d].numa = read_numa(&p->nics[p->devs[d].nic]);
  }
  int explicit_ok = p->cfg.nic_pool[0] != '\0';
  for (int d = 0; d < n; d++) {
    char why[160];
    int m = explicit_ok ? lp_pool_parse(p->cfg.nic_pool, in, n, d, h->pool[d], why, sizeof(why)) : 0;
    if (m < 0) {
      LP_WARN("LINKPASS_NIC_POOL=\"%s\" is not valid (%s): expected NIC=NIC[,NIC...][;...]; pools follow closeness",
              p->cfg.nic_pool, why);
      explicit_ok = 0;
      d = -1; /* start over without it */
      continue;
    }
    h->pool_n[d] = m > 0 ? m : lp_pool_order(in, n, d, h->pool[d]);
    char line[512];
    int o = snprintf(line, sizeof(line), "NIC pool of %s:", p->devs[d].name);
    for (int k = 0; k < h->pool_n[d] && o < (int)sizeof(line); k++)
      o += snprintf(line + o, sizeof(line) - (size_t)o, " %s", p->devs[h->pool[d][k]].name);
    LP_INFO(NCCL_INIT | NCCL_NET, "%s", line);
  }
}

/* Failover: pools, event lines, the control plane. */
static void start_failover(struct lp_plugin *p) {
  if (!p->cfg.failover) {
    LP_INFO(NCCL_INIT | NCCL_NET, "link failover is off (LINKPASS_FAILOVER=0)");
    return;
  }
  build_pools(p);
  p->syslog.enabled = p->cfg.syslog;
  p->syslog.facility = p->cfg.syslog_facility;
  snprintf(p->syslog.socket, sizeof(p->syslog.socket), "%s", p->cfg.syslog_socket);
  if (lp_health_start() != 0) LP_WARN("link failover is off: the control plane did not start");
}

/* Threads must be gone before the library is: NCCL may dlclose it. */
__attribute__((destructor)) static void stop_threads(void) { lp_health_stop(); }

/* First successful init: configuration, verbs, devices, OOB interface. */
static ncclResult_t bring_up(struct lp_plugin *p) {
  char why[640];
  /* A failed init is retried by the next one; warn and describe once. */
  lp_config_load(&p->cfg, env_get, NULL, p->config_logged ? NULL : warn_line, NULL);
  if (!p->config_logged) {
    lp_config_describe(&p->cfg, info_line, NULL);
    lp_nccl_env_report(env_get, NULL, info_line, warn_line, NULL);
  }
  p->config_logged = 1;
  if (p->cfg.ib_disable) {
    LP_INFO(NCCL_INIT | NCCL_NET, "NCCL_IB_DISABLE=%d: linkpass offers no devices; NCCL uses another net",
            p->cfg.ib_disable);
    return ncclInternalError;
  }

  if (lp_ibv_load(&p->ibv, p->cfg.ibverbs_lib, why, sizeof(why)) != 0) {
    LP_WARN("init failed: %s", why);
    return ncclSystemError;
  }
  p->ndevs = lp_nic_discover(&p->ibv, &p->cfg, p->nics, &p->nnics, p->devs, LP_MAX_DEVS);
  if (p->ndevs == 0) {
    LP_WARN("init failed: no ACTIVE InfiniBand or RoCE port found%s%s%s (library %s)",
            p->cfg.hca.set ? " matching NCCL_IB_HCA=\"" : "", p->cfg.hca.set ? p->cfg.hca_str : "",
            p->cfg.hca.set ? "\"" : "", p->ibv.path);
    goto fail;
  }
  if (lp_oob_pick(&p->cfg, &p->oob_addr, p->oob_ifname, sizeof(p->oob_ifname)) != 0) {
    LP_WARN("init failed: no usable network interface for the out-of-band connection%s%s%s",
            p->cfg.ifname.set ? " matching NCCL_SOCKET_IFNAME=\"" : "", p->cfg.ifname.set ? p->cfg.ifname_str : "",
            p->cfg.ifname.set ? "\"" : "");
    goto fail;
  }
  if (gethostname(p->hostname, sizeof(p->hostname) - 1) != 0) snprintf(p->hostname, sizeof(p->hostname), "?");

  char a[64];
  LP_INFO(NCCL_INIT | NCCL_NET, "using %s, out-of-band interface %s %s", p->ibv.path, p->oob_ifname,
          lp_sockaddr_str(&p->oob_addr, a, sizeof(a)));
  for (int i = 0; i < p->ndevs; i++) {
    const struct lp_dev *d = &p->devs[i];
    char g[64];
    LP_INFO(NCCL_INIT | NCCL_NET, "device %d: %s:%d %s %d Mbps, GID index %d (%s), LID %u, PCI %s", i, d->name,
            d->port, d->link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "IB", d->speed_mbps, d->gid_index,
            lp_gid_str(&d->gid, g, sizeof(g)), d->lid, p->nics[d->nic].pci_path);
  }
  p->default_ctx.magic = LP_CTX_MAGIC;
  p->default_ctx.traffic_class = NCCL_NET_TRAFFIC_CLASS_UNDEF;
  p->ready = 1;
  start_failover(p);
  return ncclSuccess;
fail:
  lp_nic_close_all(&p->ibv, p->nics, p->nnics);
  p->nnics = p->ndevs = 0;
  lp_ibv_unload(&p->ibv);
  return ncclSystemError;
}

ncclResult_t lp_init(void **ctx, uint64_t commId, ncclNetCommConfig_v12_t *config, ncclDebugLogger_t logFunction,
                     ncclProfilerCallback_t profFunction) {
  (void)profFunction; /* no profiler events yet */
  struct lp_plugin *p = lp_plugin();
  if (ctx) *ctx = NULL;
  if (logFunction) lp_log_set_logger(logFunction);
  pthread_mutex_lock(&p->lock);
  ncclResult_t rc = p->ready ? ncclSuccess : bring_up(p);
  if (rc == ncclSuccess && ctx != NULL) {
    struct lp_ctx *c = calloc(1, sizeof(*c));
    if (c == NULL) {
      rc = ncclSystemError;
    } else {
      c->magic = LP_CTX_MAGIC;
      c->comm_id = commId;
      c->traffic_class = config ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF;
      *ctx = c;
    }
  }
  if (rc == ncclSuccess) p->nctx++;
  pthread_mutex_unlock(&p->lock);
  return rc;
}

ncclResult_t lp_finalize(void *ctx) {
  struct lp_plugin *p = lp_plugin();
  struct lp_ctx *c = ctx;
  if (c != NULL && c->magic != LP_CTX_MAGIC) {
    LP_WARN("finalize: invalid context %p", ctx);
    return ncclInvalidArgument;
  }
  if (c != NULL) {
    c->magic = 0;
    free(c);
  }
  pthread_mutex_lock(&p->lock);
  int last = p->nctx > 0 && --p->nctx == 0;
  pthread_mutex_unlock(&p->lock);
  /* Devices stay open: NCCL may init again, and comms it forgot to close
   * still reference them.  Connects NCCL abandoned can go. */
  if (last) lp_connect_stages_free();
  return ncclSuccess;
}

ncclResult_t lp_devices(int *ndev) {
  struct lp_plugin *p = lp_plugin();
  *ndev = p->ready ? p->ndevs : 0;
  return ncclSuccess;
}

ncclResult_t lp_get_properties(int dev, ncclNetProperties_v12_t *props) {
  struct lp_plugin *p = lp_plugin();
  if (!p->ready || dev < 0 || dev >= p->ndevs) {
    LP_WARN("getProperties: invalid device %d (of %d)", dev, p->ready ? p->ndevs : 0);
    return ncclInvalidArgument;
  }
  struct lp_dev *d = &p->devs[dev];
  struct lp_nic *n = &p->nics[d->nic];
  memset(props, 0, sizeof(*props));
  props->name = d->name;
  props->pciPath = n->pci_path;
  props->guid = n->attr.sys_image_guid;
  props->ptrSupport = NCCL_PTR_HOST; /* no GPUDirect: no peer memory, no dma-buf here */
  props->regIsGlobal = 1;
  props->forceFlush = 0;
  props->speed = d->speed_mbps;
  props->port = d->port;
  props->latency = 0;
  props->maxComms = n->attr.max_qp;
  props->maxRecvs = LP_MAX_RECVS;
  props->netDeviceType = NCCL_NET_DEVICE_HOST;
  props->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = dev;
  props->maxP2pBytes = NCCL_MAX_NET_SIZE_BYTES;
  props->maxCollBytes = 512ull << 20;
  props->maxMultiRequestSize = 1;
  props->railId = NCCL_NET_ID_UNDEF;
  props->planeId = NCCL_NET_ID_UNDEF;
  return ncclSuccess;
}

ncclResult_t lp_set_net_attr(void *ctx, ncclNetAttr_v12_t *netAttr) {
  (void)netAttr; /* hints about the collective; nothing to tune yet */
  if (lp_ctx_get(ctx) == NULL) {
    LP_WARN("setNetAttr: invalid context %p", ctx);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}
