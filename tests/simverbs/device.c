/* simverbs: device discovery, contexts and the query verbs. */
#include "simverbs.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct sv_lib sv_lib = {.lock = PTHREAD_MUTEX_INITIALIZER,
                        .window_lock = PTHREAD_MUTEX_INITIALIZER,
                        .active_lock = PTHREAD_MUTEX_INITIALIZER,
                        .ack_lock = PTHREAD_MUTEX_INITIALIZER,
                        .ack_cond = PTHREAD_COND_INITIALIZER,
                        .proc = -1,
                        .host = -1,
                        .deferred_due_ns = UINT64_MAX};

/* A forked child inherits none of the parent's contexts (as with hardware,
 * whose doorbells and queues are not shared across fork): it starts afresh,
 * with its own process slot and engine once it opens a device. */
static void forget_parent_state(void) {
  pthread_mutex_init(&sv_lib.lock, NULL);
  sv_lib.proc = -1;
  sv_lib.open_contexts = 0;
  sv_lib.ctxs = NULL;
  sv_lib.qps = NULL;
  sv_lib.cqs = NULL;
  pthread_mutex_init(&sv_lib.active_lock, NULL);
  sv_lib.nactive = sv_lib.nactive_spare = 0; /* the parent's QPs are not ours */
  sv_lib.engine_running = 0;
  atomic_store(&sv_lib.engine_stop, 0);
  atomic_store(&sv_lib.engine_sleeping, 0);
  atomic_store(&sv_lib.deferred_due_ns, UINT64_MAX);
  atomic_store(&sv_lib.engine_wake_ns, 0);
}

/* Map the fabric and find our host once per process.  No fabric means no
 * devices, as on a machine without RDMA hardware. */
static int lib_attach_locked(void) {
  if (sv_lib.fab) return 0;
  struct sv_fabric *f = sv_fabric_attach(NULL);
  if (!f) {
    if (getenv("SIMVERBS_FABRIC"))
      fprintf(stderr, "simverbs: fabric '%s' is not up (%s): run `simverbs up <config>` first\n",
              getenv("SIMVERBS_FABRIC"), errno == EPROTO ? "made by another simverbs version" : "no segment");
    return -1;
  }
  const char *host = getenv("SIMVERBS_HOST");
  int h = host ? sv_host_index(f, host) : 0;
  if (h < 0 || !f->ready) {
    if (h < 0) fprintf(stderr, "simverbs: SIMVERBS_HOST=%s is not a host of fabric %s\n", host, f->name);
    sv_fabric_detach(f);
    return -1;
  }
  int n = 0;
  for (uint32_t i = 0; i < f->ndevs; i++) n += f->devs[i].in_use && f->devs[i].host == (uint32_t)h;
  sv_lib.devs = calloc((size_t)n + 1, sizeof(*sv_lib.devs));
  if (!sv_lib.devs) {
    sv_fabric_detach(f);
    return -1;
  }
  char root[160]; /* short enough that every derived path fits ibv_device */
  sv_sysfs_root(f, (uint32_t)h, root, sizeof(root));
  for (uint32_t i = 0; i < f->ndevs; i++) {
    if (!f->devs[i].in_use || f->devs[i].host != (uint32_t)h) continue;
    struct sv_device_handle *d = &sv_lib.devs[sv_lib.ndevs];
    d->index = (int)i;
    d->dev.node_type = IBV_NODE_CA;
    d->dev.transport_type = IBV_TRANSPORT_IB;
    snprintf(d->dev.name, sizeof(d->dev.name), "%s", f->devs[i].name);
    snprintf(d->dev.dev_name, sizeof(d->dev.dev_name), "uverbs%d", sv_lib.ndevs);
    snprintf(d->dev.dev_path, sizeof(d->dev.dev_path), "%s/class/infiniband_verbs/uverbs%d", root, sv_lib.ndevs);
    snprintf(d->dev.ibdev_path, sizeof(d->dev.ibdev_path), "%s/class/infiniband/%s", root, f->devs[i].name);
    sv_lib.ndevs++;
  }
  sv_lib.host = h;
  sv_lib.fab = f;
  pthread_atfork(NULL, NULL, forget_parent_state);
  return 0;
}

int sv_lib_attach(void) {
  pthread_mutex_lock(&sv_lib.lock);
  int rc = lib_attach_locked();
  pthread_mutex_unlock(&sv_lib.lock);
  return rc;
}

SV_EXPORT struct ibv_device **ibv_get_device_list(int *num) {
  int n = sv_lib_attach() == 0 ? sv_lib.ndevs : 0;
  struct ibv_device **list = calloc((size_t)n + 1, sizeof(*list));
  if (!list) {
    errno = ENOMEM;
    return NULL;
  }
  for (int i = 0; i < n; i++) list[i] = &sv_lib.devs[i].dev;
  if (num) *num = n;
  return list;
}

SV_EXPORT void ibv_free_device_list(struct ibv_device **list) { free(list); }

SV_EXPORT const char *ibv_get_device_name(struct ibv_device *device) { return device->name; }

static struct sv_device *fab_dev(struct ibv_device *device) {
  return &sv_lib.fab->devs[((struct sv_device_handle *)device)->index];
}

SV_EXPORT __be64 ibv_get_device_guid(struct ibv_device *device) { return htobe64(fab_dev(device)->node_guid); }

SV_EXPORT int ibv_get_device_index(struct ibv_device *device) {
  return (int)(((struct sv_device_handle *)device - sv_lib.devs));
}

struct sv_ctx *sv_ctx_of(struct ibv_context *c) {
  return (struct sv_ctx *)((char *)c - offsetof(struct sv_ctx, vctx.context));
}

static int query_port_full(struct ibv_context *c, uint8_t port_num, struct ibv_port_attr *a, size_t len);

SV_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device) {
  struct sv_device *d = fab_dev(device);
  /* Before the look at `fatal`: a fatal error injected between the two
   * leaves a context that counts itself dead, not one that counts itself
   * alive on a fatal device. */
  uint32_t fatal_gen = atomic_load(&d->fatal_gen);
  if (atomic_load(&d->fatal)) {
    errno = EIO; /* a device in fatal error refuses new contexts until recovered */
    return NULL;
  }
  struct sv_ctx *ctx = calloc(1, sizeof(*ctx));
  int fds[2] = {-1, -1};
  if (!ctx || pipe2(fds, O_CLOEXEC) != 0) goto fail;
  ctx->dev = ((struct sv_device_handle *)device)->index;
  ctx->async_rd = fds[0];
  ctx->async_wr = fds[1];
  /* The engine must never block on a full pipe nobody reads. */
  fcntl(ctx->async_wr, F_SETFL, O_NONBLOCK);
  ctx->event_seq_seen = atomic_load(&d->event_seq);
  ctx->fatal_gen = fatal_gen;
  struct ibv_context *c = &ctx->vctx.context;
  ctx->vctx.sz = sizeof(struct verbs_context);
  ctx->vctx.query_port = query_port_full;
  c->device = device;
  c->cmd_fd = -1;
  c->async_fd = ctx->async_rd;
  c->num_comp_vectors = 1;
  c->abi_compat = __VERBS_ABI_IS_EXTENDED;
  pthread_mutex_init(&c->mutex, NULL);
  c->ops.poll_cq = sv_poll_cq;
  c->ops.req_notify_cq = sv_req_notify_cq;
  c->ops.post_send = sv_post_send;
  c->ops.post_recv = sv_post_recv;
  c->ops.post_srq_recv = sv_post_srq_recv;

  pthread_mutex_lock(&sv_lib.lock);
  if (sv_lib.proc < 0) sv_lib.proc = sv_proc_register(sv_lib.fab, (uint32_t)sv_lib.host);
  if (sv_lib.proc < 0) {
    pthread_mutex_unlock(&sv_lib.lock);
    errno = EMFILE;
    goto fail;
  }
  ctx->next = sv_lib.ctxs;
  sv_lib.ctxs = ctx;
  sv_lib.open_contexts++;
  pthread_mutex_unlock(&sv_lib.lock);
  if (sv_engine_start() != 0) {
    errno = EAGAIN;
    ibv_close_device(c);
    return NULL;
  }
  return c;
fail:
  if (fds[0] >= 0) close(fds[0]), close(fds[1]);
  free(ctx);
  return NULL;
}

SV_EXPORT int ibv_close_device(struct ibv_context *c) {
  struct sv_ctx *ctx = sv_ctx_of(c);
  int last;
  pthread_mutex_lock(&sv_lib.lock);
  for (struct sv_ctx **p = &sv_lib.ctxs; *p; p = &(*p)->next)
    if (*p == ctx) {
      *p = ctx->next;
      break;
    }
  last = --sv_lib.open_contexts == 0;
  pthread_mutex_unlock(&sv_lib.lock);
  if (last) {
    sv_engine_stop();
    pthread_mutex_lock(&sv_lib.lock);
    sv_proc_unregister(sv_lib.fab, sv_lib.proc);
    sv_lib.proc = -1;
    pthread_mutex_unlock(&sv_lib.lock);
  }
  close(ctx->async_rd);
  close(ctx->async_wr);
  free(ctx);
  return 0;
}

int sv_ctx_dead(struct ibv_context *c) {
  struct sv_ctx *ctx = sv_ctx_of(c);
  return atomic_load(&sv_lib.fab->devs[ctx->dev].fatal_gen) != ctx->fatal_gen;
}

SV_EXPORT int ibv_query_device(struct ibv_context *c, struct ibv_device_attr *a) {
  struct sv_device *d = &sv_lib.fab->devs[sv_ctx_of(c)->dev];
  if (sv_ctx_dead(c)) return EIO;
  memset(a, 0, sizeof(*a));
  snprintf(a->fw_ver, sizeof(a->fw_ver), "22.36.1010");
  a->node_guid = htobe64(d->node_guid);
  a->sys_image_guid = htobe64(d->sys_image_guid);
  a->max_mr_size = 1ull << 40;
  a->page_size_cap = 0xfffffffffffff000ull;
  a->vendor_id = d->vendor_id;
  a->vendor_part_id = d->vendor_part_id;
  a->hw_ver = 0;
  a->max_qp = SV_MAX_QPS;
  a->max_qp_wr = SV_MAX_WR;
  a->device_cap_flags =
      IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_CHANGE_PHY_PORT;
  a->max_sge = SV_MAX_SGE;
  a->max_sge_rd = SV_MAX_SGE;
  a->max_cq = SV_MAX_CQS;
  a->max_cqe = SV_MAX_CQE - 1;
  a->max_mr = SV_MAX_MRS;
  a->max_pd = 1 << 20;
  a->max_qp_rd_atom = SV_MAX_RD_ATOM;
  a->max_qp_init_rd_atom = SV_MAX_RD_ATOM;
  a->max_res_rd_atom = SV_MAX_RD_ATOM * SV_MAX_QPS;
  a->atomic_cap = IBV_ATOMIC_HCA; /* as ConnectX: atomic among the HCA's own atomics */
  a->max_pkeys = 1;
  a->local_ca_ack_delay = 16;
  a->phys_port_cnt = (uint8_t)d->nports;
  return 0;
}

static struct sv_port *ctx_port(struct ibv_context *c, unsigned port_num) {
  struct sv_device *d = &sv_lib.fab->devs[sv_ctx_of(c)->dev];
  return port_num >= 1 && port_num <= d->nports ? &d->ports[port_num - 1] : NULL;
}

static int query_port_full(struct ibv_context *c, uint8_t port_num, struct ibv_port_attr *a, size_t len) {
  struct sv_port *p = ctx_port(c, port_num);
  if (!p) return EINVAL;
  if (atomic_load(&p->query_fail) || sv_ctx_dead(c)) return EIO;
  struct ibv_port_attr full = {0};
  int ib = p->link_layer == IBV_LINK_LAYER_INFINIBAND;
  int up = atomic_load(&p->state) == IBV_PORT_ACTIVE;
  full.state = up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  full.max_mtu = IBV_MTU_4096;
  full.active_mtu = sv_port_active_mtu(p);
  full.gid_tbl_len = (int)p->ngids;
  full.port_cap_flags = ib ? (IBV_PORT_CM_SUP | IBV_PORT_VENDOR_CLASS_SUP) : IBV_PORT_CM_SUP;
  full.max_msg_sz = 1u << 30;
  full.pkey_tbl_len = 1;
  full.lid = p->lid;
  full.sm_lid = ib ? 1 : 0;
  full.max_vl_num = ib ? 4 : 1;
  full.subnet_timeout = ib ? 18 : 0;
  sv_rate_to_width_speed(p->rate_gbps, &full.active_width, &full.active_speed);
  full.phys_state = up ? 5 /* LinkUp */ : 3 /* Disabled */;
  full.link_layer = (uint8_t)p->link_layer;
  memcpy(a, &full, len < sizeof(full) ? len : sizeof(full));
  return 0;
}

/* The exported symbol writes only the old 48-byte layout, which ends at
 * `flags`: callers may pass a struct of that size. */
#undef ibv_query_port
SV_EXPORT int ibv_query_port(struct ibv_context *c, uint8_t port_num, struct _compat_ibv_port_attr *a) {
  int rc = query_port_full(c, port_num, (struct ibv_port_attr *)a, offsetof(struct ibv_port_attr, port_cap_flags2));
  if (rc) errno = rc;
  return rc;
}

SV_EXPORT int ibv_query_gid(struct ibv_context *c, uint8_t port_num, int index, union ibv_gid *gid) {
  struct sv_port *p = ctx_port(c, port_num);
  if (sv_ctx_dead(c)) {
    errno = EIO;
    return -1;
  }
  if (!p || index < 0 || index >= (int)SV_NGIDS) {
    errno = EINVAL;
    return -1;
  }
  /* Unused table entries read as zero GIDs, as on hardware. */
  if ((uint32_t)index < p->ngids)
    *gid = p->gids[index];
  else
    memset(gid, 0, sizeof(*gid));
  return 0;
}

static void fill_gid_entry(struct sv_port *p, uint32_t port_num, uint32_t index, struct ibv_gid_entry *e) {
  memset(e, 0, sizeof(*e));
  e->gid = p->gids[index];
  e->gid_index = index;
  e->port_num = port_num;
  e->gid_type = p->gid_types[index];
  e->ndev_ifindex = 0;
}

SV_EXPORT int _ibv_query_gid_ex(struct ibv_context *c, uint32_t port_num, uint32_t gid_index,
                                struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size) {
  struct sv_port *p = ctx_port(c, port_num);
  if (sv_ctx_dead(c)) return EIO;
  if (!p || flags || entry_size < sizeof(*entry)) return EINVAL;
  if (gid_index >= p->ngids) return ENODATA;
  fill_gid_entry(p, port_num, gid_index, entry);
  return 0;
}

SV_EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *c, struct ibv_gid_entry *entries, size_t max_entries,
                                       uint32_t flags, size_t entry_size) {
  struct sv_device *d = &sv_lib.fab->devs[sv_ctx_of(c)->dev];
  if (sv_ctx_dead(c)) return -EIO;
  if (flags || entry_size < sizeof(*entries)) return -EINVAL;
  size_t n = 0;
  for (uint32_t port = 1; port <= d->nports; port++)
    for (uint32_t i = 0; i < d->ports[port - 1].ngids; i++) {
      if (n == max_entries) return -EINVAL;
      fill_gid_entry(&d->ports[port - 1], port, i, (struct ibv_gid_entry *)((char *)entries + n * entry_size));
      n++;
    }
  return (ssize_t)n;
}

SV_EXPORT int ibv_query_pkey(struct ibv_context *c, uint8_t port_num, int index, __be16 *pkey) {
  if (sv_ctx_dead(c)) {
    errno = EIO;
    return -1;
  }
  if (!ctx_port(c, port_num) || index != 0) {
    errno = EINVAL;
    return -1;
  }
  *pkey = htobe16(0xffff); /* the default full-membership partition */
  return 0;
}

SV_EXPORT int ibv_get_pkey_index(struct ibv_context *c, uint8_t port_num, __be16 pkey) {
  if (!ctx_port(c, port_num)) return -EINVAL;
  return (be16toh(pkey) & 0x7fff) == 0x7fff ? 0 : -ENOENT;
}

SV_EXPORT const char *ibv_get_sysfs_path(void) {
  static char path[512]; /* libibverbs returns a pointer it owns, too */
  if (sv_lib_attach() != 0) return "/sys";
  sv_sysfs_root(sv_lib.fab, (uint32_t)sv_lib.host, path, sizeof(path));
  return path;
}
