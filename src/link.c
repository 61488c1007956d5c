/* A connection's resources on one NIC (link.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "link.h"
#include "log.h"

const struct lp_dev *lp_link_dev(const struct lp_link *link) { return &link->env->devs[link->dev]; }
const struct lp_nic *lp_link_nic(const struct lp_link *link) { return lp_env_nic_of(link->env, link->dev); }

/* NCCL_IB_ECE_ENABLE: what QP `q` offers (before RTR) or agreed (after),
 * into link->local.  A device or library without ECE offers none. */
static void query_ece(struct lp_link *link, int q) {
  const struct lp_ibv *ibv = &link->env->ibv;
  struct lp_link_info *l = &link->local;
  l->ece_supported = 0;
  if (!link->env->cfg.ece_enable || ibv->query_ece == NULL || ibv->set_ece == NULL) return;
  struct ibv_ece ece;
  memset(&ece, 0, sizeof(ece));
  int err = ibv->query_ece(link->qps[q], &ece);
  if (err == EOPNOTSUPP || err == ENOTSUP) return;
  if (err != 0) {
    LP_WARN("ibv_query_ece(%s:%u, qp 0x%x) failed: %s; connecting without ECE", l->dev_name, l->port,
            link->qps[q]->qp_num, strerror(err));
    return;
  }
  l->ece_supported = 1;
  l->ece_vendor = ece.vendor_id;
  l->ece_options = ece.options;
}

/* QP `q` to INIT (from RESET) or to RESET, on the port `d` describes. */
static int qp_to(struct lp_link *link, int q, enum ibv_qp_state st, const struct lp_dev *d) {
  struct ibv_qp_attr qa;
  memset(&qa, 0, sizeof(qa));
  qa.qp_state = st;
  int mask = IBV_QP_STATE;
  if (st == IBV_QPS_INIT) {
    qa.pkey_index = (uint16_t)link->env->cfg.pkey;
    qa.port_num = (uint8_t)d->port;
    qa.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  }
  int err = link->env->ibv.modify_qp(link->qps[q], &qa, mask);
  if (err != 0)
    LP_WARN("ibv_modify_qp(%s:%d, qp 0x%x, %s) failed: %s", d->name, d->port, link->qps[q]->qp_num,
            st == IBV_QPS_INIT ? "INIT" : "RESET", strerror(err));
  return err;
}

/* What the peer needs to reach the port `d` describes (link->local), but
 * the control memory's address and key; and what the port allows. */
static void describe(struct lp_link *link, const struct lp_dev *d) {
  const struct lp_nic *nic = lp_link_nic(link);
  struct lp_link_info *l = &link->local;
  uint64_t ctrl_addr = l->ctrl_addr;
  uint32_t ctrl_rkey = l->ctrl_rkey;
  memset(l, 0, sizeof(*l));
  memcpy(l->gid, d->gid.raw, 16);
  l->lid = d->lid;
  l->link_layer = (uint8_t)d->link_layer;
  l->mtu = (uint8_t)d->active_mtu;
  l->port = (uint8_t)d->port;
  l->nqps = (uint8_t)link->nqps;
  l->gid_index = (uint8_t)d->gid_index;
  for (int q = 0; q < link->nqps; q++) l->qpn[q] = link->qps[q]->qp_num;
  l->ctrl_addr = ctrl_addr;
  l->ctrl_rkey = ctrl_rkey;
  l->nic_guid = nic->attr.sys_image_guid;
  snprintf(l->dev_name, sizeof(l->dev_name), "%.*s", (int)sizeof(l->dev_name) - 1, d->name);
  query_ece(link, 0);
  const int ar = link->env->cfg.adaptive_routing;
  link->adaptive = ar == -2 ? d->link_layer == IBV_LINK_LAYER_INFINIBAND : ar != 0;
}

ncclResult_t lp_link_open(struct lp_link *link, const struct lp_env *env, struct lp_health *health, enum lp_dir dir,
                          int dev, int nqps, void *ctrl, size_t ctrl_len, size_t remote_off) {
  const struct lp_ibv *ibv = &env->ibv;
  memset(link, 0, sizeof(*link));
  link->env = env;
  link->dev = dev;
  link->nqps = nqps;

  /* The port may have changed since init (address, MTU): re-read it now,
   * into this link's own copy (the environment stays as init found it). */
  const struct lp_nic *nic = lp_env_nic_of(env, dev);
  struct lp_dev dcopy = env->devs[dev];
  if (lp_dev_refresh(ibv, &env->cfg, nic, &dcopy) != 0)
    goto fail; /* closed: a failed open leaves no link to close or release again */

  int cqe = nqps * (LP_SQ_DEPTH + LP_RQ_DEPTH);
  if (nic->attr.max_cqe > 0 && cqe > nic->attr.max_cqe) cqe = nic->attr.max_cqe;
  link->cq = ibv->create_cq(nic->ctx, cqe, NULL, NULL, 0);
  if (link->cq == NULL) {
    LP_WARN("ibv_create_cq(%s:%d, %d entries) failed: %s", dcopy.name, dcopy.port, cqe, strerror(errno));
    goto fail;
  }
  for (int q = 0; q < nqps; q++) {
    struct ibv_qp_init_attr ia;
    memset(&ia, 0, sizeof(ia));
    ia.send_cq = link->cq;
    ia.recv_cq = link->cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = LP_SQ_DEPTH;
    ia.cap.max_recv_wr = LP_RQ_DEPTH;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    /* Only a receiver posts small writes worth inlining: its clear-to-sends. */
    if (env->cfg.use_inline && dir == LP_DIR_RECV) ia.cap.max_inline_data = LP_INLINE_CTS_BYTES;
    link->qps[q] = ibv->create_qp(nic->pd, &ia);
    if (link->qps[q] == NULL) {
      LP_WARN("ibv_create_qp(%s:%d) failed: %s", dcopy.name, dcopy.port, strerror(errno));
      goto fail;
    }
    /* create_qp grants at least what was asked; we never use more. */
    link->sq_free[q] = LP_SQ_DEPTH;
    link->max_inline = (int)ia.cap.max_inline_data;

    if (qp_to(link, q, IBV_QPS_INIT, &dcopy) != 0) goto fail;
  }
  link->ctrl_mr =
      ibv->reg_mr(nic->pd, ctrl, ctrl_len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  if (link->ctrl_mr == NULL) {
    LP_WARN("ibv_reg_mr(%s:%d, %zu bytes of control memory) failed: %s", dcopy.name, dcopy.port, ctrl_len,
            strerror(errno));
    goto fail;
  }

  describe(link, &dcopy);
  link->local.ctrl_addr = (uint64_t)(uintptr_t)ctrl + remote_off;
  link->local.ctrl_rkey = link->ctrl_mr->rkey;
  link->health = health;
  link->dir = dir;
  if (link->health != NULL) lp_health_load_add(link->health, link->dir, dev, 1);
  return ncclSuccess;
fail:
  lp_link_close(link);
  return ncclSystemError;
}

ncclResult_t lp_link_revive(struct lp_link *link, struct lp_health *health) {
  const struct lp_nic *nic = lp_link_nic(link);
  struct lp_dev dcopy = link->env->devs[link->dev];
  if (lp_dev_refresh(&link->env->ibv, &link->env->cfg, nic, &dcopy) != 0) return ncclSystemError;
  for (int q = 0; q < link->nqps; q++) {
    /* RESET discards both queues; the provider cleans the QP's entries
     * from the CQ, which the poll below makes sure of. */
    if (qp_to(link, q, IBV_QPS_RESET, &dcopy) != 0 || qp_to(link, q, IBV_QPS_INIT, &dcopy) != 0) return ncclSystemError;
    link->sq_free[q] = LP_SQ_DEPTH;
    link->unsignaled[q] = 0;
  }
  struct ibv_wc wcs[LP_POLL_BATCH];
  int n;
  while ((n = ibv_poll_cq(link->cq, LP_POLL_BATCH, wcs)) > 0) continue; /* completions of its former life */
  if (n < 0) {
    LP_WARN("ibv_poll_cq(%s:%d) failed (%d) while reviving a path", dcopy.name, dcopy.port, n);
    return ncclSystemError;
  }
  link->rq_owed = 0;
  describe(link, &dcopy); /* the port's address may have changed while it was down */
  link->health = health;
  if (health != NULL) lp_health_load_add(health, link->dir, link->dev, 1);
  return ncclSuccess;
}

/* Every QP to RTS towards link->remote, with the given transport timer. */
static ncclResult_t connect_qps(struct lp_link *link, int traffic_class, int timeout, int retry_cnt) {
  const struct lp_ibv *ibv = &link->env->ibv;
  const struct lp_config *cfg = &link->env->cfg;
  const struct lp_link_info *l = &link->local, *r = &link->remote;
  if (l->link_layer != r->link_layer) {
    LP_WARN("%s:%u is %s but the peer's %s:%u is %s: cannot connect", l->dev_name, l->port,
            l->link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand", r->dev_name, r->port,
            r->link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand");
    return ncclSystemError;
  }
  int ece = l->ece_supported && r->ece_supported;
  for (int q = 0; q < link->nqps; q++) {
    if (ece) {
      struct ibv_ece offer = {.vendor_id = r->ece_vendor, .options = r->ece_options, .comp_mask = 0};
      int err = ibv->set_ece(link->qps[q], &offer);
      if (err != 0) {
        LP_WARN(
            "ibv_set_ece(%s:%u, qp 0x%x, the peer's vendor 0x%x options 0x%x) failed: %s; NCCL_IB_ECE_ENABLE=0 "
            "connects without ECE",
            l->dev_name, l->port, l->qpn[q], r->ece_vendor, r->ece_options, strerror(err));
        return ncclSystemError;
      }
    }
    struct ibv_qp_attr qa;
    memset(&qa, 0, sizeof(qa));
    qa.qp_state = IBV_QPS_RTR;
    qa.path_mtu = (enum ibv_mtu)(l->mtu < r->mtu ? l->mtu : r->mtu);
    qa.dest_qp_num = r->qpn[q];
    qa.rq_psn = 0;
    qa.max_dest_rd_atomic = 1;
    qa.min_rnr_timer = 12;
    qa.ah_attr.sl = (uint8_t)cfg->sl;
    qa.ah_attr.port_num = l->port;
    if (l->link_layer == IBV_LINK_LAYER_ETHERNET) {
      qa.ah_attr.is_global = 1;
      memcpy(qa.ah_attr.grh.dgid.raw, r->gid, 16);
      qa.ah_attr.grh.flow_label = 0;
      qa.ah_attr.grh.sgid_index = l->gid_index;
      qa.ah_attr.grh.hop_limit = 255;
      qa.ah_attr.grh.traffic_class = (uint8_t)traffic_class;
    } else {
      qa.ah_attr.is_global = 0;
      qa.ah_attr.dlid = r->lid;
    }
    int err = ibv->modify_qp(link->qps[q], &qa,
                             IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (err != 0) {
      LP_WARN("ibv_modify_qp(%s:%u, qp 0x%x, RTR towards %s:%u qp 0x%x) failed: %s", l->dev_name, l->port, l->qpn[q],
              r->dev_name, r->port, r->qpn[q], strerror(err));
      return ncclSystemError;
    }
    memset(&qa, 0, sizeof(qa));
    qa.qp_state = IBV_QPS_RTS;
    qa.timeout = (uint8_t)timeout;
    qa.retry_cnt = (uint8_t)retry_cnt;
    qa.rnr_retry = 7;
    qa.sq_psn = 0;
    qa.max_rd_atomic = 1;
    err = ibv->modify_qp(
        link->qps[q], &qa,
        IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
    if (err != 0) {
      LP_WARN("ibv_modify_qp(%s:%u, qp 0x%x, RTS) failed: %s", l->dev_name, l->port, l->qpn[q], strerror(err));
      return ncclSystemError;
    }
  }
  if (ece) {
    uint32_t offered = link->local.ece_options;
    query_ece(link, 0);
    LP_INFO(NCCL_NET, "%s:%u ECE: offered 0x%x, the peer's %s:%u 0x%x, agreed 0x%x", l->dev_name, l->port, offered,
            r->dev_name, r->port, r->ece_options, link->local.ece_options);
  }
  return ncclSuccess;
}

ncclResult_t lp_link_connect(struct lp_link *link, int traffic_class) {
  return connect_qps(link, traffic_class, link->env->cfg.timeout, link->env->cfg.retry_cnt);
}

ncclResult_t lp_link_loopback(struct lp_link *link, int timeout, int retry_cnt) {
  link->remote = link->local;
  return connect_qps(link, 0, timeout, retry_cnt);
}

void lp_link_uncount(struct lp_link *link) {
  if (link->health != NULL) lp_health_load_add(link->health, link->dir, link->dev, -1);
  link->health = NULL;
}

void lp_link_close(struct lp_link *link) {
  if (link->env == NULL) return; /* never opened */
  lp_link_uncount(link);
  const struct lp_ibv *ibv = &link->env->ibv;
  /* QPs first: destroying them stops the NIC from touching our memory. */
  for (int q = 0; q < LP_MAX_QPS; q++) {
    if (link->qps[q]) ibv->destroy_qp(link->qps[q]);
    link->qps[q] = NULL;
  }
  if (link->ctrl_mr) ibv->dereg_mr(link->ctrl_mr);
  link->ctrl_mr = NULL;
  if (link->cq) ibv->destroy_cq(link->cq);
  link->cq = NULL;
  link->env = NULL; /* closed: closing it again does nothing */
}
