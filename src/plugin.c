/* The plugin context and the device-level API: init, devices,
 * getProperties, finalize. */
#include "plugin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gdr.h"
#include "linkpass.h"
#include "log.h"
#include "nccl_env.h"

/* The plugin context (plugin.h): the only mutable global of the library
 * besides the log sink, reached from this file only. */
static struct lp_plugin the_plugin = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .setup = {.lock = PTHREAD_MUTEX_INITIALIZER, .mrs = &the_plugin.mrs},
    .mrs = {.lock = PTHREAD_MUTEX_INITIALIZER},
    .env = {.syslog = {.fd = -1}},
};

/* Where `ctx` is linked among the live contexts; NULL if it is not one.
 * Called with p->lock held. */
static struct lp_ctx **ctx_link(struct lp_plugin *p, const void *ctx) {
  struct lp_ctx **at = &p->ctxs;
  while (*at != NULL && *at != ctx) at = &(*at)->next;
  return *at != NULL ? at : NULL;
}

/* The traffic class of a comm made under `ctx` (NULL: the default
 * context) into *tc, read under the lock: a finalize at the same time
 * frees it.  -1 when `ctx` is not a live context: finalized already, or
 * never ours. */
static int ctx_tc(struct lp_plugin *p, void *ctx, int *tc) {
  pthread_mutex_lock(&p->lock);
  const struct lp_ctx *c = ctx == NULL ? &p->default_ctx : ctx_link(p, ctx) != NULL ? ctx : NULL;
  if (c != NULL) *tc = c->traffic_class != NCCL_NET_TRAFFIC_CLASS_UNDEF ? c->traffic_class : p->env.cfg.tc;
  pthread_mutex_unlock(&p->lock);
  return c != NULL ? 0 : -1;
}

extern char **environ; /* libc's; read once, at the first init */

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

/* Failover: pools, event lines, the control plane. */
static void start_failover(struct lp_plugin *p) {
  struct lp_env *env = &p->env;
  p->setup.env = env;
  if (!env->cfg.failover) {
    LP_INFO(NCCL_INIT | NCCL_NET, "link failover is off (LINKPASS_FAILOVER=0)");
    /* The metrics are the control plane's, which is not started. */
    if (env->cfg.metrics_file[0] != '\0')
      LP_WARN(
          "LINKPASS_METRICS_FILE=\"%s\" writes nothing while link failover is off (LINKPASS_FAILOVER=0): its "
          "figures are failover's",
          env->cfg.metrics_file);
    return;
  }
  lp_env_build_pools(env);
  env->syslog.enabled = env->cfg.syslog;
  env->syslog.facility = env->cfg.syslog_facility;
  snprintf(env->syslog.socket, sizeof(env->syslog.socket), "%s", env->cfg.syslog_socket);
  lp_syslog_open(&env->syslog);
  p->threads_pid = getpid();
  if (lp_health_start(&p->health, env) != 0) {
    LP_WARN("link failover is off: the control plane did not start");
    return;
  }
  p->setup.health = &p->health;
  if (lp_idle_watch_start(&p->idle, lp_health_change_fd(&p->health)) == 0)
    p->setup.idle = &p->idle; /* it warns itself when it cannot */
  int err = lp_ctl_ready_start(&p->ctl_news);
  if (err == 0)
    p->setup.ready = &p->ctl_news;
  else
    LP_INFO(NCCL_INIT | NCCL_NET, "no epoll set for the control sockets (%s): each connection reads its own to see",
            strerror(-err));
}

/* Threads must be gone before the library is: NCCL may dlclose it.  A
 * child forked after init (a data loader's worker) has none of them, only
 * copies of their fds and of the shared state: stopping them from there
 * would write the parent's stop eventfds, free its rate-board slots and
 * send its held syslog lines again.  It leaves all that to the parent. */
__attribute__((destructor)) static void stop_threads(void) {
  struct lp_plugin *p = &the_plugin;
  if (p->threads_pid != 0 && p->threads_pid != getpid()) return;
  lp_idle_watch_stop(&p->idle);
  lp_ctl_ready_stop(&p->ctl_news);
  lp_health_stop(&p->health);
  /* Every context finalized: NCCL is unloading the plugin, and nothing can
   * use what the threads leave.  With contexts live the process is exiting
   * under NCCL's threads (an error path that calls exit()), which may still
   * be inside a call, moving a connection or closing one: what they use
   * stays, for the kernel to take back. */
  if (p->nctx == 0) {
    lp_idle_watch_free(&p->idle);
    lp_health_free(&p->health);
    lp_syslog_close(&p->env.syslog);
  } else {
    lp_syslog_drain(&p->env.syslog);
  }
}

/* First successful init: configuration, verbs, devices, OOB interface. */
/* NCCL_IB_PCI_RELAXED_ORDERING: 1 asks for it, 2 (the default) takes it
 * where the library can register with it (ibv_reg_mr_iova2), as NCCL. */
static int relaxed_ordering(const struct lp_config *cfg, const struct lp_ibv *ibv) {
  if (cfg->pci_ro == 0) return 0;
  if (ibv->reg_mr_iova2 == NULL) {
    if (cfg->pci_ro == 1)
      LP_WARN(
          "NCCL_IB_PCI_RELAXED_ORDERING=1, but %s has no ibv_reg_mr_iova2 (rdma-core 29 or later): registering "
          "without relaxed ordering",
          ibv->path);
    return 0;
  }
  return 1;
}

/* GPUDirect RDMA as NCCL's own transport finds it: GPU peer memory for the
 * host, dma-buf support per NIC. */
static void find_gpu_support(struct lp_env *env) {
  long page = sysconf(_SC_PAGESIZE);
  env->page_size = page > 0 ? page : 4096;
  env->peer_memory = lp_gdr_peer_memory();
  char dmabuf[256] = "";
  size_t used = 0;
  for (int n = 0; n < env->nnics; n++) {
    env->nics[n].dmabuf = lp_gdr_dmabuf_supported(&env->ibv, &env->nics[n]);
    if (env->nics[n].dmabuf && used < sizeof(dmabuf))
      used += (size_t)snprintf(dmabuf + used, sizeof(dmabuf) - used, "%s%s", used ? " " : "", env->nics[n].name);
  }
  LP_INFO(NCCL_INIT | NCCL_NET, "GPU memory: peer memory %s; dma-buf on %s",
          env->peer_memory ? "loaded (NCCL_PTR_CUDA)" : "not loaded", used ? dmabuf : "no NIC");
  /* Once, not per registration: a connection whose buffers are dma-bufs
   * cannot move to such a NIC (mr.c). */
  for (int n = 0; used && env->cfg.failover && n < env->nnics; n++)
    if (!env->nics[n].dmabuf)
      LP_WARN(
          "%s cannot register dma-bufs while other NICs can: connections whose buffers NCCL registers as "
          "dma-bufs never move to it",
          env->nics[n].name);
}

static ncclResult_t bring_up(struct lp_plugin *p) {
  char why[640];
  /* A failed init is retried by the next one; warn and describe once. */
  lp_config_load(&p->env.cfg, env_get, NULL, p->config_logged ? NULL : warn_line, NULL);
  if (!p->config_logged) {
    lp_config_unknown(environ, warn_line, NULL);
    lp_config_describe(&p->env.cfg, info_line, NULL);
    lp_nccl_env_report(env_get, NULL, info_line, NULL);
  }
  p->config_logged = 1;
  if (p->env.cfg.ib_disable) {
    LP_INFO(NCCL_INIT | NCCL_NET, "NCCL_IB_DISABLE=%d: linkpass offers no devices; NCCL uses another net",
            p->env.cfg.ib_disable);
    return ncclInternalError;
  }

  if (lp_ibv_load(&p->env.ibv, p->env.cfg.ibverbs_lib, why, sizeof(why)) != 0) {
    LP_WARN("init failed: %s", why);
    return ncclSystemError;
  }
  p->env.relaxed_ordering = relaxed_ordering(&p->env.cfg, &p->env.ibv);
  p->env.ndevs = lp_nic_discover(&p->env.ibv, &p->env.cfg, p->env.nics, &p->env.nnics, p->env.devs, LP_MAX_DEVS);
  if (p->env.ndevs == 0) {
    LP_WARN("init failed: no ACTIVE InfiniBand or RoCE port found%s%s%s (library %s)",
            p->env.cfg.hca.set ? " matching NCCL_IB_HCA=\"" : "", p->env.cfg.hca.set ? p->env.cfg.hca_str : "",
            p->env.cfg.hca.set ? "\"" : "", p->env.ibv.path);
    goto fail;
  }
  find_gpu_support(&p->env);
  struct lp_oob_avoid avoid;
  avoid.n = lp_nic_netdevs(p->env.nics, p->env.nnics, p->env.devs, p->env.ndevs, avoid.name, LP_OOB_AVOID_MAX);
  int backed = 0;
  if (lp_oob_pick(&p->env.cfg, &avoid, &p->env.oob_addr, p->env.oob_ifname, sizeof(p->env.oob_ifname), &backed) != 0) {
    LP_WARN("init failed: no usable network interface for the out-of-band connection%s%s%s",
            p->env.cfg.ifname.set ? " matching NCCL_SOCKET_IFNAME=\"" : "",
            p->env.cfg.ifname.set ? p->env.cfg.ifname_str : "", p->env.cfg.ifname.set ? "\"" : "");
    goto fail;
  }
  if (backed)
    LP_WARN(
        "the control channel uses %s, an interface of one of the RDMA NICs it protects%s: a fault of that NIC "
        "also cuts the channel a move needs, and moves wait until it returns; give NCCL_SOCKET_IFNAME a "
        "management interface",
        p->env.oob_ifname, p->env.cfg.ifname.set ? " (NCCL_SOCKET_IFNAME)" : " (no other interface is usable)");
  /* The name whole first: a legal 64-character name did not fit the
   * wire's field and read as "?"; it is cut to the field instead, as
   * linkpass-status cuts it. */
  char host[256];
  if (gethostname(host, sizeof(host)) != 0) snprintf(host, sizeof(host), "?");
  host[sizeof(host) - 1] = '\0';
  snprintf(p->env.hostname, sizeof(p->env.hostname), "%.*s", (int)sizeof(p->env.hostname) - 1, host);

  char a[64];
  LP_INFO(NCCL_INIT | NCCL_NET, "using %s%s, out-of-band interface %s %s", p->env.ibv.path,
          p->env.relaxed_ordering ? " [RO]" : "", p->env.oob_ifname, lp_sockaddr_str(&p->env.oob_addr, a, sizeof(a)));
  /* Moves need the control channel most when an interface fails: with a
   * second one, each connection's channel also has a connection there. */
  if (p->env.cfg.failover && lp_oob_pick_second(&p->env.cfg, &avoid, p->env.oob_ifname, &p->env.oob_alt_addr,
                                                p->env.oob_alt_ifname, sizeof(p->env.oob_alt_ifname)) == 0)
    LP_INFO(NCCL_INIT | NCCL_NET, "control channel: a second connection per connection over %s %s",
            p->env.oob_alt_ifname, lp_sockaddr_str(&p->env.oob_alt_addr, a, sizeof(a)));
  else
    LP_INFO(NCCL_INIT | NCCL_NET, "control channel: over %s only (%s)", p->env.oob_ifname,
            p->env.cfg.failover ? "no second usable interface" : "failover is off");
  for (int i = 0; i < p->env.ndevs; i++) {
    const struct lp_dev *d = &p->env.devs[i];
    char g[64];
    LP_INFO(NCCL_INIT | NCCL_NET, "device %d: %s:%d %s %d Mbps, GID index %d (%s), LID %u, PCI %s", i, d->name, d->port,
            d->link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "IB", d->speed_mbps, d->gid_index,
            lp_gid_str(&d->gid, g, sizeof(g)), d->lid, p->env.nics[d->nic].pci_path);
  }
  p->default_ctx.traffic_class = NCCL_NET_TRAFFIC_CLASS_UNDEF;
  p->ready = 1;
  start_failover(p);
  return ncclSuccess;
fail:
  lp_nic_close_all(&p->env.ibv, p->env.nics, p->env.nnics);
  p->env.nnics = p->env.ndevs = 0;
  lp_ibv_unload(&p->env.ibv);
  return ncclSystemError;
}

ncclResult_t lp_init(void **ctx, uint64_t commId, ncclNetCommConfig_v12_t *config, ncclDebugLogger_t logFunction,
                     ncclProfilerCallback_t profFunction) {
  (void)profFunction; /* no profiler events yet */
  struct lp_plugin *p = &the_plugin;
  if (ctx) *ctx = NULL;
  if (logFunction) lp_log_set_logger(logFunction);
  pthread_mutex_lock(&p->lock);
  ncclResult_t rc = p->ready ? ncclSuccess : bring_up(p);
  if (rc == ncclSuccess && ctx != NULL) {
    struct lp_ctx *c = calloc(1, sizeof(*c));
    if (c == NULL) {
      rc = ncclSystemError;
    } else {
      c->comm_id = commId;
      c->traffic_class = config ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF;
      c->next = p->ctxs;
      p->ctxs = c;
      *ctx = c;
    }
  }
  if (rc == ncclSuccess) p->nctx++;
  pthread_mutex_unlock(&p->lock);
  return rc;
}

ncclResult_t lp_finalize(void *ctx) {
  struct lp_plugin *p = &the_plugin;
  pthread_mutex_lock(&p->lock);
  struct lp_ctx **at = ctx != NULL ? ctx_link(p, ctx) : NULL;
  if (ctx != NULL && at == NULL) {
    pthread_mutex_unlock(&p->lock);
    LP_WARN("finalize: context %p is not a live one (finalized already, or not made by this plugin's init)", ctx);
    return ncclInvalidArgument;
  }
  if (at != NULL) {
    struct lp_ctx *c = *at;
    *at = c->next;
    free(c);
  }
  /* Devices stay open: NCCL may init again, and comms it forgot to close
   * still reference them.  Connects NCCL abandoned can go, under the lock
   * that decided they were the last context's: an init on another thread
   * waits, or its first connect would be freed with them. */
  if (p->nctx > 0 && --p->nctx == 0) lp_setup_free_stages(&p->setup);
  pthread_mutex_unlock(&p->lock);
  return ncclSuccess;
}

ncclResult_t lp_devices(int *ndev) {
  struct lp_plugin *p = &the_plugin;
  *ndev = p->ready ? p->env.ndevs : 0;
  return ncclSuccess;
}

ncclResult_t lp_get_properties(int dev, ncclNetProperties_v12_t *props) {
  struct lp_plugin *p = &the_plugin;
  if (!p->ready || dev < 0 || dev >= p->env.ndevs) {
    LP_WARN("getProperties: invalid device %d (of %d)", dev, p->ready ? p->env.ndevs : 0);
    return ncclInvalidArgument;
  }
  struct lp_dev *d = &p->env.devs[dev]; /* NCCL's props take non-const names */
  struct lp_nic *n = &p->env.nics[d->nic];
  memset(props, 0, sizeof(*props));
  props->name = d->name;
  props->pciPath = n->pci_path;
  props->guid = n->attr.sys_image_guid;
  /* GPUDirect RDMA where the host and NIC allow it, as NCCL's own transport. */
  props->ptrSupport = NCCL_PTR_HOST | (p->env.peer_memory ? NCCL_PTR_CUDA : 0) | (n->dmabuf ? NCCL_PTR_DMABUF : 0);
  props->regIsGlobal = 1;
  /* As NCCL's own transport on a NIC without mlx5 Data Direct: NCCL asks
   * for flushes where the GPU needs them (before sm90, or when
   * NCCL_NET_FORCE_FLUSH=1), and iflush does them. */
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
  int tc;
  if (ctx_tc(&the_plugin, ctx, &tc) != 0) {
    LP_WARN("setNetAttr: invalid context %p", ctx);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* Connection setup (connect.c), once the call is known to be valid. */
ncclResult_t lp_listen(void *ctx, int dev, void *handle, void **listenComm) {
  struct lp_plugin *p = &the_plugin;
  *listenComm = NULL;
  int tc = 0;
  if (!p->ready || ctx_tc(p, ctx, &tc) != 0 || dev < 0 || dev >= p->env.ndevs || handle == NULL) {
    LP_WARN("listen: invalid call (initialized %d, context %p, device %d of %d)", p->ready, ctx, dev, p->env.ndevs);
    return ncclInvalidArgument;
  }
  return lp_setup_listen(&p->setup, dev, tc, handle, listenComm);
}

ncclResult_t lp_connect(void *ctx, int dev, int traffic_class, void *handle, void **sendComm,
                        ncclNetDeviceHandle_v12_t **sendDevComm) {
  struct lp_plugin *p = &the_plugin;
  *sendComm = NULL;
  if (sendDevComm) *sendDevComm = NULL; /* no device offload */
  int ctx_class = 0;
  if (!p->ready || ctx_tc(p, ctx, &ctx_class) != 0 || dev < 0 || dev >= p->env.ndevs) {
    LP_WARN("connect: invalid call (initialized %d, context %p, device %d of %d)", p->ready, ctx, dev, p->env.ndevs);
    return ncclInvalidArgument;
  }
  int tc = traffic_class != NCCL_NET_TRAFFIC_CLASS_UNDEF ? traffic_class : ctx_class;
  return lp_setup_connect(&p->setup, dev, tc, handle, sendComm);
}
