/* simverbs: RC queue pairs — creation, the state machine with the kernel's
 * attribute-mask rules, and posting work requests. */
#include "simverbs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static struct sv_fabric *fab(void) { return sv_lib.fab; }

static struct sv_qp *shared_qp(struct sv_qp_local *lq) { return &fab()->qps[lq->index]; }

SV_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr) {
  struct sv_fabric *f = fab();
  struct ibv_qp_cap *cap = &attr->cap;
  if (attr->qp_type != IBV_QPT_RC) {
    errno = EOPNOTSUPP; /* the fabric models reliable connections only */
    return NULL;
  }
  if (attr->srq) {
    errno = EOPNOTSUPP;
    return NULL;
  }
  if (sv_ctx_dead(pd->context)) {
    errno = EIO;
    return NULL;
  }
  if (!attr->send_cq || !attr->recv_cq || cap->max_send_wr > SV_MAX_WR || cap->max_recv_wr > SV_MAX_WR ||
      cap->max_send_sge > SV_MAX_SGE || cap->max_recv_sge > SV_MAX_SGE || cap->max_inline_data > SV_MAX_INLINE ||
      attr->send_cq->context != pd->context || attr->recv_cq->context != pd->context) {
    errno = EINVAL;
    return NULL;
  }
  /* The create-qp-fail fault: the NIC's QP resources are exhausted. */
  _Atomic uint32_t *fail = &f->devs[sv_ctx_of(pd->context)->dev].create_qp_fail;
  for (uint32_t n = atomic_load(fail); n > 0;)
    if (atomic_compare_exchange_weak(fail, &n, n - 1)) {
      errno = ENOMEM;
      return NULL;
    }
  struct sv_qp_local *lq = calloc(1, sizeof(*lq));
  if (!lq) goto nomem;
  lq->serial = sv_new_serial();
  /* Like hardware, round queue sizes up; report what was granted. */
  lq->sq_size = 1;
  while (lq->sq_size < cap->max_send_wr) lq->sq_size <<= 1;
  size_t body = (size_t)cap->max_send_sge * sizeof(struct ibv_sge);
  if (body < cap->max_inline_data) body = cap->max_inline_data;
  lq->sq_stride = (uint32_t)((sizeof(struct sv_swqe) + body + 63) & ~(size_t)63); /* 64-byte blocks, as mlx5 */
  size_t sq_bytes = (size_t)lq->sq_size * lq->sq_stride;
  lq->sq = aligned_alloc(64, sq_bytes);
  if (!lq->sq) goto nomem;
  memset(lq->sq, 0, sq_bytes); /* every page now, as a NIC pins its queue at create */
  uint32_t rq_size = 1;
  while (rq_size < cap->max_recv_wr + 1) rq_size <<= 1;
  uint32_t rq_sge = cap->max_recv_sge ? cap->max_recv_sge : 1;
  uint32_t stride = (uint32_t)(sizeof(struct sv_rwqe) + rq_sge * sizeof(struct ibv_sge));
  uint64_t off = sv_heap_alloc(f, (uint64_t)rq_size * stride, sv_lib.proc);
  if (off == UINT64_MAX) goto nomem;
  int idx = -1;
  sv_lock(&f->lock);
  for (int i = 0; i < SV_MAX_QPS; i++)
    if (!atomic_load(&f->qps[i].in_use)) {
      struct sv_qp *q = &f->qps[i];
      idx = i;
      q->gen = (q->gen + 1) & SV_QPN_GEN_MASK;
      if (q->gen == 0) q->gen = 1; /* keeps QP numbers 0 and 1 (SMI/GSI) unused */
      q->owner = sv_lib.proc;
      q->dev = (uint32_t)sv_ctx_of(pd->context)->dev;
      q->port = 1;
      q->qp_type = IBV_QPT_RC;
      q->pd_id = ((struct sv_pd *)pd)->id;
      q->qpn = sv_make_qpn((uint32_t)i, q->gen);
      q->dest_qpn = 0;
      q->access = 0;
      q->send_cq = ((struct sv_cq_local *)attr->send_cq)->index;
      q->recv_cq = ((struct sv_cq_local *)attr->recv_cq)->index;
      atomic_store(&q->fault, SV_QP_FAULT_NONE);
      atomic_store(&q->comm_est, 0);
      atomic_store(&q->requests, 0);
      atomic_store(&q->inline_wrs, 0);
      atomic_store(&q->ooo_writes, 0);
      q->ece = f->devs[q->dev].ece;
      q->rq_size = rq_size;
      q->rq_max_sge = rq_sge;
      q->rq_stride = stride;
      q->rq_tail = 0;
      atomic_store(&q->rq_head, 0);
      atomic_store(&q->sq_freed, sv_queue_mark(q->qpn, 0));
      atomic_store(&q->rq_freed, sv_queue_mark(q->qpn, 0));
      q->rq_off = off;
      atomic_store(&q->state, IBV_QPS_RESET);
      atomic_store(&q->in_use, 1);
      break;
    }
  sv_unlock(&f->lock);
  if (idx < 0) {
    sv_heap_free(f, off);
    goto nomem;
  }
  lq->index = idx;
  lq->ctx = sv_ctx_of(pd->context);
  lq->max_inline = cap->max_inline_data;
  lq->max_send_sge = cap->max_send_sge;
  lq->max_recv_sge = rq_sge;
  lq->sig_all = attr->sq_sig_all;
  pthread_mutex_init(&lq->post_lock, NULL);
  pthread_mutex_init(&lq->exec_lock, NULL);
  pthread_mutex_init(&lq->recv_lock, NULL);
  lq->qp.context = pd->context;
  lq->qp.qp_context = attr->qp_context;
  lq->qp.pd = pd;
  lq->qp.send_cq = attr->send_cq;
  lq->qp.recv_cq = attr->recv_cq;
  lq->qp.handle = (uint32_t)idx;
  lq->qp.qp_num = f->qps[idx].qpn;
  lq->qp.state = IBV_QPS_RESET;
  lq->qp.qp_type = IBV_QPT_RC;
  pthread_mutex_init(&lq->qp.mutex, NULL);
  pthread_cond_init(&lq->qp.cond, NULL);
  cap->max_send_wr = lq->sq_size;
  cap->max_recv_wr = rq_size - 1;
  cap->max_recv_sge = rq_sge;
  pthread_mutex_lock(&sv_lib.lock);
  lq->next = sv_lib.qps;
  sv_lib.qps = lq;
  ((struct sv_cq_local *)attr->send_cq)->users++;
  ((struct sv_cq_local *)attr->recv_cq)->users++;
  pthread_mutex_unlock(&sv_lib.lock);
  sv_pd_hold(pd);
  return &lq->qp;
nomem:
  if (lq) free(lq->sq);
  free(lq);
  errno = ENOMEM;
  return NULL;
}

SV_EXPORT int ibv_destroy_qp(struct ibv_qp *qp) {
  struct sv_qp_local *lq = (struct sv_qp_local *)qp;
  struct sv_qp *q = shared_qp(lq);
  pthread_mutex_lock(&sv_lib.lock); /* the engine is between passes */
  for (struct sv_qp_local **p = &sv_lib.qps; *p; p = &(*p)->next)
    if (*p == lq) {
      *p = lq->next;
      break;
    }
  ((struct sv_cq_local *)qp->send_cq)->users--;
  ((struct sv_cq_local *)qp->recv_cq)->users--;
  sv_pd_drop(qp->pd);
  sv_qp_inactive(lq);
  pthread_mutex_lock(&lq->exec_lock); /* and no poster is executing it */
  pthread_mutex_unlock(&lq->exec_lock);
  /* Read before the slot is given up: from then on another thread's
   * create_qp may take the slot and write its own receive queue's offset. */
  uint64_t rq_off = q->rq_off;
  uint32_t qpn = q->qpn;
  sv_lock(&q->rq_lock);
  atomic_store(&q->state, IBV_QPS_RESET);
  atomic_store(&q->in_use, 0); /* peers now see an unreachable QP */
  sv_unlock(&q->rq_lock);
  /* Nothing completes into its CQs from here on: no executor runs it, and
   * peers find it gone. */
  sv_cq_clean(qp->recv_cq, qpn);
  if (qp->send_cq != qp->recv_cq) sv_cq_clean(qp->send_cq, qpn);
  pthread_mutex_unlock(&sv_lib.lock);
  sv_heap_free(fab(), rq_off);
  /* Off this process's list: an event of it not read yet is discarded
   * (ibv_get_async_event), and each one read must be acked before it is
   * gone. */
  sv_await_acks(&lq->events_taken, &lq->events_acked, "ibv_destroy_qp", qpn);
  free(lq->sq);
  free(lq);
  return 0;
}

/* Required and optional attribute masks per RC transition, as the kernel
 * checks them (IB spec table "QP state transition attributes"). */
struct transition {
  enum ibv_qp_state from, to;
  int required, optional;
};

static const struct transition rc_transitions[] = {
    {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0},
    {IBV_QPS_INIT, IBV_QPS_INIT, IBV_QP_STATE, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS},
    {IBV_QPS_INIT, IBV_QPS_RTR,
     IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
         IBV_QP_MIN_RNR_TIMER,
     IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX},
    {IBV_QPS_RTR, IBV_QPS_RTS,
     IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC,
     IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE},
    {IBV_QPS_RTS, IBV_QPS_RTS, IBV_QP_STATE,
     IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE | IBV_QP_MIN_RNR_TIMER},
};

static int check_transition(enum ibv_qp_state from, enum ibv_qp_state to, int mask) {
  if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) return (mask & ~(IBV_QP_STATE | IBV_QP_CUR_STATE)) ? EINVAL : 0;
  for (size_t i = 0; i < sizeof(rc_transitions) / sizeof(rc_transitions[0]); i++) {
    const struct transition *t = &rc_transitions[i];
    if (t->from != from || t->to != to) continue;
    if ((mask & t->required) != t->required) return EINVAL;
    if (mask & ~(t->required | t->optional)) return EINVAL;
    return 0;
  }
  return EINVAL; /* SQD/SQE and every other edge are not modelled */
}

static int check_attr_values(struct sv_qp *q, struct ibv_qp_attr *a, int mask) {
  struct sv_device *d = &fab()->devs[q->dev];
  if ((mask & IBV_QP_PORT) && (a->port_num < 1 || a->port_num > d->nports)) return EINVAL;
  if ((mask & IBV_QP_PKEY_INDEX) && a->pkey_index != 0) return EINVAL;
  if ((mask & IBV_QP_PATH_MTU) && (a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_4096)) return EINVAL;
  if ((mask & IBV_QP_TIMEOUT) && a->timeout > 31) return EINVAL;
  if ((mask & IBV_QP_RETRY_CNT) && a->retry_cnt > 7) return EINVAL;
  if ((mask & IBV_QP_RNR_RETRY) && a->rnr_retry > 7) return EINVAL;
  if ((mask & IBV_QP_MIN_RNR_TIMER) && a->min_rnr_timer > 31) return EINVAL;
  /* At most what ibv_query_device reports (max_qp_init_rd_atom, max_qp_rd_atom). */
  if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a->max_rd_atomic > SV_MAX_RD_ATOM) return EINVAL;
  if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a->max_dest_rd_atomic > SV_MAX_RD_ATOM) return EINVAL;
  if ((mask & IBV_QP_AV)) {
    /* As the kernel's uverbs checks it: a port of the device, and at RTR
     * the port the QP was bound to at INIT (an AV whose port is another,
     * a consumer's mix-up of two ports, is refused rather than routed). */
    uint8_t av_port = a->ah_attr.port_num;
    if (av_port < 1 || av_port > d->nports) return EINVAL;
    if (a->qp_state == IBV_QPS_RTR && av_port != q->port) return EINVAL;
    if ((mask & IBV_QP_PORT) && a->port_num != av_port) return EINVAL;
    struct sv_port *p = &d->ports[av_port - 1];
    if (p->link_layer == IBV_LINK_LAYER_ETHERNET && !a->ah_attr.is_global) return EINVAL; /* RoCE needs a GRH */
    if (a->ah_attr.is_global && a->ah_attr.grh.sgid_index >= p->ngids) return EINVAL;
  }
  if ((mask & IBV_QP_CUR_STATE) && a->cur_qp_state != atomic_load(&q->state)) return EINVAL;
  return 0;
}

/* Map the pages of `len` bytes at `p` into this process now. */
static void populate(void *p, size_t len) {
  uintptr_t start = sv_page_down((uintptr_t)p), end = sv_page_up((uintptr_t)p + len);
  (void)madvise((void *)start, end - start, MADV_POPULATE_WRITE); /* before Linux 5.14: on first use, as before */
}

/* A NIC reaches the responder's receive queue and completion queue without
 * a page fault.  This process's engine reaches the peer QP's through the
 * fabric's shared mapping, whose pages it would otherwise fault in at its
 * first request: on a standby path, in the middle of a failover sweep
 * (docs/SIMVERBS.md, "Queues in shared memory").  So they are mapped when the QP
 * learns its peer, at RTR.  A peer destroyed meanwhile only costs a
 * mapping of pages the fabric holds anyway. */
static void map_peer_queues(struct sv_fabric *f, uint32_t dest_qpn) {
  struct sv_qp *d = sv_qp_by_qpn(f, dest_qpn);
  if (d == NULL) return;
  populate(sv_rq_entry(f, d, 0), (size_t)d->rq_size * d->rq_stride);
  struct sv_cq *cq = &f->cqs[d->recv_cq];
  populate(sv_heap_ptr(f, cq->ring_off), (size_t)cq->size * sizeof(struct sv_cqe));
}

SV_EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask) {
  struct sv_qp_local *lq = (struct sv_qp_local *)qp;
  struct sv_qp *q = shared_qp(lq);
  if (!(mask & IBV_QP_STATE)) return EINVAL; /* not modelled: attribute-only changes */
  if (sv_ctx_dead(qp->context)) return EIO;
  pthread_mutex_lock(&sv_lib.lock);
  pthread_mutex_lock(&lq->exec_lock);
  enum ibv_qp_state from = atomic_load(&q->state), to = a->qp_state;
  int rc = check_transition(from, to, mask);
  if (!rc) rc = check_attr_values(q, a, mask);
  /* The rtr-fail fault: the device refuses the connection's attributes. */
  _Atomic uint32_t *fail = &fab()->devs[q->dev].rtr_fail;
  for (uint32_t n = atomic_load(fail); !rc && to == IBV_QPS_RTR && n > 0;)
    if (atomic_compare_exchange_weak(fail, &n, n - 1)) rc = EINVAL;
  if (rc) goto out;
  if (mask & IBV_QP_PORT) q->port = a->port_num;
  if (mask & IBV_QP_ACCESS_FLAGS) q->access = a->qp_access_flags;
  if (mask & IBV_QP_PKEY_INDEX) q->pkey_index = a->pkey_index;
  if (mask & IBV_QP_AV) q->ah = a->ah_attr;
  if (mask & IBV_QP_PATH_MTU) q->path_mtu = a->path_mtu;
  if (mask & IBV_QP_DEST_QPN) q->dest_qpn = a->dest_qp_num;
  if (mask & IBV_QP_RQ_PSN) q->rq_psn = a->rq_psn;
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) q->max_dest_rd_atomic = a->max_dest_rd_atomic;
  if (mask & IBV_QP_MIN_RNR_TIMER) q->min_rnr_timer = a->min_rnr_timer;
  if (mask & IBV_QP_TIMEOUT) q->timeout = a->timeout;
  if (mask & IBV_QP_RETRY_CNT) q->retry_cnt = a->retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) q->rnr_retry = a->rnr_retry;
  if (mask & IBV_QP_SQ_PSN) q->sq_psn = a->sq_psn;
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) q->max_rd_atomic = a->max_rd_atomic;
  if (to == IBV_QPS_RTR && lq->ece_pending) {
    q->ece = lq->ece_request & fab()->devs[q->dev].ece; /* the device keeps what both ends offer */
    lq->ece_pending = 0;
  }
  if (to == IBV_QPS_RESET) {
    atomic_store(&q->comm_est, 0); /* a QP connected again raises it again */
    /* Reset discards both queues without completions: every slot is free. */
    uint32_t tail = atomic_load(&lq->sq_tail);
    atomic_store(&lq->sq_head, tail);
    atomic_store(&q->sq_freed, sv_queue_mark(q->qpn, tail));
    sv_head_reset(lq);
    pthread_mutex_lock(&lq->recv_lock);
    sv_lock(&q->rq_lock);
    atomic_store(&q->rq_head, q->rq_tail);
    atomic_store(&q->rq_freed, sv_queue_mark(q->qpn, q->rq_tail));
    sv_unlock(&q->rq_lock);
    pthread_mutex_unlock(&lq->recv_lock);
  }
  atomic_store(&q->state, to);
  qp->state = to;
  sv_qp_active(lq); /* a new state may have work: a flush, queued WRs */
out:
  pthread_mutex_unlock(&lq->exec_lock);
  pthread_mutex_unlock(&sv_lib.lock);
  if (!rc && to == IBV_QPS_ERR) sv_defer_now(); /* a poller flushes, or the engine */
  if (!rc && to == IBV_QPS_RTR) map_peer_queues(fab(), q->dest_qpn);
  return rc;
}

/* Enhanced Connection Establishment, as rdma-core's mlx5 provider: the
 * vendor must be Mellanox's PCI id, a device without ECE answers
 * EOPNOTSUPP, and a request takes effect with the move to RTR (a request
 * made later is kept but never applied). */
#define SV_ECE_VENDOR 0x15b3u

SV_EXPORT int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece) {
  struct sv_qp *q = shared_qp((struct sv_qp_local *)qp);
  if (fab()->devs[q->dev].ece == 0) return EOPNOTSUPP;
  memset(ece, 0, sizeof(*ece));
  ece->vendor_id = SV_ECE_VENDOR;
  ece->options = q->ece;
  return 0;
}

SV_EXPORT int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece) {
  struct sv_qp_local *lq = (struct sv_qp_local *)qp;
  struct sv_qp *q = shared_qp(lq);
  if (ece->comp_mask != 0 || ece->vendor_id != SV_ECE_VENDOR) return EINVAL;
  if (fab()->devs[q->dev].ece == 0) return EOPNOTSUPP;
  pthread_mutex_lock(&lq->exec_lock);
  lq->ece_request = ece->options;
  lq->ece_pending = 1;
  pthread_mutex_unlock(&lq->exec_lock);
  return 0;
}

SV_EXPORT int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask, struct ibv_qp_init_attr *init) {
  struct sv_qp_local *lq = (struct sv_qp_local *)qp;
  struct sv_qp *q = shared_qp(lq);
  (void)mask; /* everything is cheap to report */
  if (sv_ctx_dead(qp->context)) return EIO;
  memset(a, 0, sizeof(*a));
  a->qp_state = a->cur_qp_state = atomic_load(&q->state);
  a->path_mtu = q->path_mtu;
  a->qp_access_flags = (int)q->access;
  a->pkey_index = (uint16_t)q->pkey_index;
  a->port_num = (uint8_t)q->port;
  a->ah_attr = q->ah;
  a->dest_qp_num = q->dest_qpn;
  a->rq_psn = q->rq_psn;
  a->sq_psn = q->sq_psn;
  a->max_dest_rd_atomic = (uint8_t)q->max_dest_rd_atomic;
  a->max_rd_atomic = (uint8_t)q->max_rd_atomic;
  a->min_rnr_timer = (uint8_t)q->min_rnr_timer;
  a->timeout = (uint8_t)q->timeout;
  a->retry_cnt = (uint8_t)q->retry_cnt;
  a->rnr_retry = (uint8_t)q->rnr_retry;
  a->cap.max_send_wr = lq->sq_size;
  a->cap.max_recv_wr = q->rq_size - 1;
  a->cap.max_send_sge = lq->max_send_sge;
  a->cap.max_recv_sge = lq->max_recv_sge;
  a->cap.max_inline_data = lq->max_inline;
  if (init) {
    memset(init, 0, sizeof(*init));
    init->qp_context = qp->qp_context;
    init->send_cq = qp->send_cq;
    init->recv_cq = qp->recv_cq;
    init->cap = a->cap;
    init->qp_type = IBV_QPT_RC;
    init->sq_sig_all = lq->sig_all;
  }
  return 0;
}

static int valid_send_opcode(enum ibv_wr_opcode op) {
  return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_RDMA_WRITE ||
         op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_RDMA_READ || op == IBV_WR_ATOMIC_FETCH_AND_ADD ||
         op == IBV_WR_ATOMIC_CMP_AND_SWP;
}

/* Copy one WR into the send queue; inline payload is captured now.  A slot
 * is taken until the completion that covers it was polled (sv_qp.sq_freed). */
static int enqueue_send(struct sv_qp_local *lq, const struct ibv_send_wr *wr, uint64_t now) {
  uint64_t mark = atomic_load_explicit(&shared_qp(lq)->sq_freed, memory_order_acquire);
  uint32_t tail = atomic_load_explicit(&lq->sq_tail, memory_order_relaxed);
  if (sv_queue_used(tail, mark) >= lq->sq_size) return ENOMEM;
  if (!valid_send_opcode(wr->opcode) || wr->num_sge < 0 || (uint32_t)wr->num_sge > lq->max_send_sge) return EINVAL;
  struct sv_swqe *w = sv_sq_entry(lq, tail);
  w->wr_id = wr->wr_id;
  w->opcode = wr->opcode;
  w->send_flags = wr->send_flags;
  w->imm = wr->imm_data;
  w->remote_addr = wr->wr.rdma.remote_addr;
  w->rkey = wr->wr.rdma.rkey;
  if (wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD || wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
    if (wr->send_flags & IBV_SEND_INLINE) return EINVAL; /* the result lands in the local buffer */
    w->remote_addr = wr->wr.atomic.remote_addr;
    w->rkey = wr->wr.atomic.rkey; /* not where wr.rdma keeps it */
    w->compare_add = wr->wr.atomic.compare_add;
    w->swap = wr->wr.atomic.swap;
  }
  w->num_sge = (uint32_t)wr->num_sge;
  w->inline_len = 0;
  w->post_ns = now;
  if ((wr->send_flags & IBV_SEND_INLINE) && wr->opcode != IBV_WR_RDMA_READ) {
    size_t total = 0;
    for (int i = 0; i < wr->num_sge; i++) total += wr->sg_list[i].length;
    if (total > lq->max_inline) return EINVAL;
    for (int i = 0; i < wr->num_sge; i++) {
      memcpy(sv_swqe_inline(w) + w->inline_len, (void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
      w->inline_len += wr->sg_list[i].length;
    }
    w->num_sge = 0;
    atomic_fetch_add_explicit(&shared_qp(lq)->inline_wrs, 1, memory_order_relaxed);
  } else if (wr->num_sge) { /* sg_list may be NULL when there is nothing to gather */
    memcpy(w->sge, wr->sg_list, sizeof(struct ibv_sge) * (size_t)wr->num_sge);
  }
  atomic_store_explicit(&lq->sq_tail, tail + 1, memory_order_release);
  return 0;
}

int sv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
  struct sv_qp_local *lq = (struct sv_qp_local *)qp;
  enum ibv_qp_state st = atomic_load(&shared_qp(lq)->state);
  int rc = 0;
  /* Hardware accepts posts on an ERR QP and flushes them; before RTS it refuses. */
  if (st != IBV_QPS_RTS && st != IBV_QPS_ERR && st != IBV_QPS_SQD) {
    *bad = wr;
    return EINVAL;
  }
  uint64_t now = sv_now_ns();
  pthread_mutex_lock(&lq->post_lock);
  for (; wr; wr = wr->next)
    if ((rc = enqueue_send(lq, wr, now)) != 0) break;
  pthread_mutex_unlock(&lq->post_lock);
  if (rc) *bad = wr;
  sv_qp_run(lq, now);
  return rc;
}

int sv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
  struct sv_qp_local *lq = (struct sv_qp_local *)qp;
  struct sv_qp *q = shared_qp(lq);
  enum ibv_qp_state st = atomic_load(&q->state);
  int rc = 0;
  if (st == IBV_QPS_RESET) {
    *bad = wr;
    return EINVAL;
  }
  /* The recv-post-fail fault: the call fails as for a full receive queue,
   * so that a consumer's error path can be tried. */
  _Atomic uint32_t *fail = &fab()->devs[q->dev].ports[q->port - 1].recv_post_fail;
  uint32_t left = atomic_load(fail);
  if (left && atomic_compare_exchange_strong(fail, &left, left - 1)) {
    *bad = wr;
    return ENOMEM;
  }
  pthread_mutex_lock(&lq->recv_lock);
  for (; wr; wr = wr->next) {
    /* A slot is taken until its completion was polled (sv_qp.rq_freed). */
    if (sv_queue_used(q->rq_tail, atomic_load_explicit(&q->rq_freed, memory_order_acquire)) >= q->rq_size - 1) {
      rc = ENOMEM;
      break;
    }
    if (wr->num_sge < 0 || (uint32_t)wr->num_sge > q->rq_max_sge) {
      rc = EINVAL;
      break;
    }
    struct sv_rwqe *w = sv_rq_entry(fab(), q, q->rq_tail);
    w->wr_id = wr->wr_id;
    w->num_sge = (uint32_t)wr->num_sge;
    if (wr->num_sge) memcpy(w->sge, wr->sg_list, sizeof(struct ibv_sge) * (size_t)wr->num_sge);
    atomic_store_explicit(&w->seq, q->rq_tail + 1, memory_order_release);
    q->rq_tail++;
  }
  pthread_mutex_unlock(&lq->recv_lock);
  if (rc) *bad = wr;
  if (st == IBV_QPS_ERR) {
    sv_qp_active(lq); /* flushed by a poller, or the engine */
    sv_defer_now();
  }
  return rc;
}

int sv_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
  (void)srq;
  *bad = wr;
  return EOPNOTSUPP;
}
