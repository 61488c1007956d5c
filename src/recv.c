/*
 * Receiver data path.  irecv posts one zero-length receive per QP (each
 * will be consumed by the sender's final WRITE_WITH_IMM on that QP) and
 * RDMA-writes the CTS entries for its sub-receives into the sender's FIFO
 * slot.  The message is complete when every QP has delivered its final
 * write; the completion record written by QP 0 then holds the sizes, or,
 * for a message sent whole in one write, its immediate does (fifo.h).
 */
#include <arpa/inet.h>
#include <string.h>

#include "recv.h"

#include "clock.h"
#include "log.h"

/* Message in `slot` fully delivered, sizes set. */
static ncclResult_t finish(struct lp_recv_comm *r, struct lp_req *req, int slot) {
  req->done = 1;
  /* The slot is free for message seq + LP_FIFO_DEPTH; the request itself
   * lives on until NCCL tests it. */
  r->slot_req[slot] = NULL;
  while (r->oldest < r->tail && r->slot_req[lp_fifo_slot(r->oldest)] == NULL) r->oldest++;
  return ncclSuccess;
}

ncclResult_t lp_recv_completion(struct lp_recv_comm *r, const struct ibv_wc *wc) {
  struct lp_link *link = &r->base.link;
  enum lp_wr_kind kind = lp_wrid_kind(wc->wr_id);
  if (kind == LP_WR_CTS) {
    link->sq_free[0] += (int)lp_wrid_credits(wc->wr_id);
    return ncclSuccess;
  }
  if (kind != LP_WR_RECV || wc->opcode != IBV_WC_RECV_RDMA_WITH_IMM)
    return lp_comm_fail(&r->base, ncclInternalError, "unexpected completion (opcode %d, wr_id 0x%llx)", (int)wc->opcode,
                        (unsigned long long)wc->wr_id);
  r->flush_devs |= 1ull << link->dev; /* the NIC whose writes a flush must push out */
  uint32_t imm = ntohl(wc->imm_data);
  uint64_t seq = lp_seq_from_imm(imm, r->oldest);
  int slot = lp_fifo_slot(seq);
  struct lp_req *req = r->slot_req[slot];
  if (req == NULL || req->seq != seq || req->events <= 0)
    return lp_comm_fail(&r->base, ncclRemoteError, "data for message %llu, which is not posted",
                        (unsigned long long)seq);
  if (--req->events > 0) return ncclSuccess;

  const struct lp_cts *cts = &r->cts_stage[slot * LP_MAX_RECVS];
  if (lp_imm_is_compact(imm)) {
    /* one sub-receive, whose size is the immediate's: the data came in
     * this write, or in plain writes before it (adaptive routing) */
    if (req->nsub != 1 || lp_imm_size(imm) > cts[0].size)
      return lp_comm_fail(&r->base, ncclRemoteError,
                          "compact completion of message %llu does not fit its receive (%u bytes for %u "
                          "sub-receives of %llu bytes)",
                          (unsigned long long)seq, lp_imm_size(imm), req->nsub, (unsigned long long)cts[0].size);
    req->sizes[0] = lp_imm_size(imm);
    return finish(r, req, slot);
  }
  const struct lp_record *rec = &r->records[slot];
  if (rec->seq != seq || rec->nreqs != req->nsub)
    return lp_comm_fail(&r->base, ncclRemoteError,
                        "completion record for message %llu is inconsistent (seq %llu, %u sub-receives, expected %u)",
                        (unsigned long long)seq, (unsigned long long)rec->seq, rec->nreqs, req->nsub);
  for (int i = 0; i < req->nsub; i++) {
    if (rec->sizes[i] > cts[i].size)
      return lp_comm_fail(&r->base, ncclRemoteError, "peer reports %llu bytes for a %llu-byte receive",
                          (unsigned long long)rec->sizes[i], (unsigned long long)cts[i].size);
    req->sizes[i] = rec->sizes[i];
  }
  return finish(r, req, slot);
}

ncclResult_t lp_recv_post(struct lp_recv_comm *r, int n, void **data, size_t *sizes, int *tags, void **mhandles,
                          struct lp_req **request) {
  struct lp_comm *c = &r->base;
  *request = NULL;
  if (n < 1 || n > LP_MAX_RECVS) {
    LP_WARN("irecv: %d sub-receives (accepted: 1..%d)", n, LP_MAX_RECVS);
    return ncclInvalidArgument;
  }
  struct lp_link *link = &c->link;
  int slot = lp_fifo_slot(r->tail);
  /* Slot still owned by a message in flight, or no room for the CTS write. */
  if (r->slot_req[slot] != NULL || link->sq_free[0] < 1) return ncclSuccess;

  struct lp_cts *cts = &r->cts_stage[slot * LP_MAX_RECVS];
  for (int i = 0; i < n; i++) {
    uint32_t rkey = 0;
    if (sizes[i] > 0) {
      struct ibv_mr *mr = lp_mr_for(c, mhandles ? mhandles[i] : NULL);
      if (mr == NULL) {
        if (lp_comm_awaits_move(c, mhandles ? mhandles[i] : NULL)) return ncclSuccess;
        LP_WARN("irecv: memory handle %p is not registered on %s", mhandles ? mhandles[i] : NULL, link->local.dev_name);
        return ncclInvalidArgument;
      }
      const struct lp_mr *m = mhandles[i];
      if (!lp_mr_covers(m, data[i], sizes[i])) {
        LP_WARN("irecv: buffer %p+%zu lies outside its registration %p+%zu", data[i], sizes[i], (void *)m->addr,
                m->len);
        return ncclInvalidArgument;
      }
      rkey = mr->rkey;
      lp_comm_uses(c, mhandles[i]);
    }
    memset(&cts[i], 0, sizeof(cts[i]));
    cts[i].addr = (uint64_t)(uintptr_t)data[i];
    cts[i].size = sizes[i];
    cts[i].rkey = rkey;
    cts[i].tag = tags[i];
    cts[i].idx = (uint16_t)i;
    cts[i].nreqs = (uint16_t)n;
    cts[i].seq = r->tail;
    r->cts_mh[slot][i] = sizes[i] > 0 ? mhandles[i] : NULL;
  }
  struct lp_req *req = lp_req_alloc(c);
  if (req == NULL) {
    LP_WARN("irecv: more than %d requests outstanding on the connection from %s", LP_MAX_REQS, c->peer);
    return ncclInternalError;
  }
  req->type = LP_REQ_RECV;
  req->seq = r->tail;
  req->nsub = (uint8_t)n;
  req->events = link->nqps;

  /* Receives first: the sender may write as soon as it sees the CTS. */
  for (int q = 0; q < link->nqps; q++) {
    struct ibv_recv_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = lp_wrid(LP_WR_RECV, q, 0, r->tail);
    wr.num_sge = 0;
    int err = ibv_post_recv(link->qps[q], &wr, &bad);
    if (err == 0) link->rq_owed++;
    if (err != 0) {
      lp_req_free(req);
      return lp_comm_fail(c, ncclSystemError, "ibv_post_recv on qp 0x%x failed: %s", link->qps[q]->qp_num,
                          strerror(err));
    }
  }
  struct ibv_sge sge = {
      .addr = (uintptr_t)cts, .length = (uint32_t)(sizeof(*cts) * (size_t)n), .lkey = link->ctrl_mr->lkey};
  struct ibv_send_wr wr;
  memset(&wr, 0, sizeof(wr));
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  if (sge.length <= (uint32_t)link->max_inline) wr.send_flags = IBV_SEND_INLINE; /* NCCL_IB_USE_INLINE */
  wr.wr.rdma.remote_addr = link->remote.ctrl_addr + (uint64_t)slot * LP_MAX_RECVS * sizeof(struct lp_cts);
  wr.wr.rdma.rkey = link->remote.ctrl_rkey;
  /* one in LP_CTS_SIGNAL_EVERY signaled: the receiver's probe covers the
   * unsignaled ones a quiet spell leaves behind */
  ncclResult_t prc = lp_comm_post(c, 0, &wr, LP_WR_CTS, LP_CTS_SIGNAL_EVERY, 0, r->tail);
  if (prc != ncclSuccess) {
    lp_req_free(req);
    return prc;
  }
  r->slot_req[slot] = req;
  r->tail++;
  *request = req;
  return ncclSuccess;
}

/* A receiver whose only outstanding writes are unsignaled clear-to-sends
 * and that has had no completion for LP_PROBE_AFTER_NS posts a signaled
 * zero-length write behind them.  Were the path dead without an error yet
 * (a blackhole), the sender would have no clear-to-send and so nothing
 * outstanding, and the receiver nothing signaled: the watchdog now has
 * something to wait on.  Once per quiet spell; never during steady traffic. */
ncclResult_t lp_recv_probe(struct lp_recv_comm *r, uint64_t now) {
  struct lp_comm *c = &r->base;
  struct lp_link *link = &c->link;
  if (!lp_watchdog_on(&c->wd) || c->paused || link->unsignaled[0] == 0 || lp_comm_signaled_outstanding(c, 0) > 0 ||
      link->sq_free[0] < 1 || now - c->wd.last_cqe_ns < LP_PROBE_AFTER_NS)
    return c->error;
  struct ibv_send_wr wr;
  memset(&wr, 0, sizeof(wr));
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.wr.rdma.remote_addr = link->remote.ctrl_addr;
  wr.wr.rdma.rkey = link->remote.ctrl_rkey;
  return lp_comm_post(c, 0, &wr, LP_WR_CTS, LP_CTS_SIGNAL_EVERY, 1, r->tail);
}

/* How long a flush waits for a device's flush path to be rebuilt (its
 * broken QP's reads to be reaped): they come back within microseconds of
 * the breakage on a NIC, and a CQ that never returns them must not hold
 * every later flush for good. */
#define LP_FLUSH_WAIT_NS (1000ull * 1000 * 1000)

/* A read of `req` through `d` could not be posted now: 1 while it may wait
 * longer, 0 once it waited too long (said). */
static int flush_may_wait(struct lp_comm *c, struct lp_req *req, int d) {
  uint64_t now = lp_now_ns();
  if (req->unposted.since_ns == 0) req->unposted.since_ns = now;
  if (now - req->unposted.since_ns < LP_FLUSH_WAIT_NS) return 1;
  LP_WARN(
      "iflush on the connection to %s: the flush path through %s:%d was not rebuilt within 1 s (the reads of "
      "its broken QP never completed): this receive's data may not yet be visible to the GPU",
      c->peer, c->env->devs[d].name, c->env->devs[d].port);
  return 0;
}

/* Post the reads of `req` still unposted; a device that cannot take one
 * now keeps its bit, for a while, one that cannot take any is dropped
 * (flush.c said why). */
static void post_flush_reads(struct lp_recv_comm *r, struct lp_req *req) {
  struct lp_comm *c = &r->base;
  for (int d = 0; d < c->env->ndevs; d++) {
    if (!(req->unposted.devs >> d & 1u)) continue;
    int nic = c->env->devs[d].nic;
    struct ibv_mr *mr = lp_mr_on(req->unposted.mhandle, nic);
    /* A NIC that is gone has no writes left to push; its port being down
     * would only cost the read's retry budget. */
    int gone = c->health != NULL && (!lp_health_link_up(c->health, d) || lp_health_nic_fatal(c->health, nic));
    if (!gone && mr != NULL &&
        lp_flush_post(&r->flush, c->env, d, (uint64_t)(uintptr_t)req->unposted.data, mr->rkey, &req->events) ==
            ncclInProgress &&
        flush_may_wait(c, req, d))
      continue;
    req->unposted.devs &= ~(1ull << d);
  }
}

ncclResult_t lp_recv_flush(struct lp_recv_comm *r, void *data, void *mhandle, struct lp_req **out) {
  struct lp_comm *c = &r->base;
  *out = NULL;
  struct lp_req *req = lp_req_alloc(c);
  if (req == NULL) {
    LP_WARN("iflush: more than %d requests outstanding on the connection to %s", LP_MAX_REQS, c->peer);
    return ncclInternalError;
  }
  req->type = LP_REQ_FLUSH; /* events (its reads) start at 0 */
  req->unposted.since_ns = 0;
  req->unposted.devs = r->flush_devs ? r->flush_devs : 1ull << c->link.dev;
  req->unposted.data = data;
  req->unposted.mhandle = mhandle;
  r->flush_devs = 0;
  post_flush_reads(r, req);
  if (req->events == 0 && req->unposted.devs == 0) { /* nothing to wait for: NCCL takes NULL as done */
    lp_req_free(req);
    return ncclSuccess;
  }
  *out = req;
  return ncclSuccess;
}

void lp_recv_flush_test(struct lp_recv_comm *r, struct lp_req *req) {
  lp_flush_poll(&r->flush);
  if (req->unposted.devs != 0) post_flush_reads(r, req);
  if (req->events == 0 && req->unposted.devs == 0) req->done = 1;
}
