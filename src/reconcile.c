/* Both halves of a move's reconciliation (reconcile.h). */
#include "reconcile.h"

#include <string.h>

#include "clock.h"
#include "log.h"

/* Everything below resume_seq was delivered; the rest is written again. */
ncclResult_t lp_fo_sender_reconcile(struct lp_send_comm *s, const struct lp_fo_ack *a, int *replayed, uint64_t *bytes) {
  struct lp_comm *c = &s->base;
  uint64_t resume = a->resume_seq;
  if (resume > s->head || resume + LP_FIFO_DEPTH < s->head)
    return lp_comm_fail(c, ncclRemoteError, "peer resumes at message %llu, outside %llu..%llu",
                        (unsigned long long)resume, (unsigned long long)(s->head - LP_FIFO_DEPTH),
                        (unsigned long long)s->head);
  /* Messages from post_seq on were not written whole (some not at all):
   * none can have completed at the receiver. */
  if (resume > s->post_seq)
    return lp_comm_fail(c, ncclRemoteError,
                        "peer resumes at message %llu, but messages from %llu on were never written whole",
                        (unsigned long long)resume, (unsigned long long)s->post_seq);
  /* A message the receiver has not completed but this end has: the
   * receiver's old NIC acknowledged its writes, then wrote no completion
   * for it, not even a flush, within the drain's bound (failover.c drain).
   * Its send buffer is NCCL's again, so it cannot be written again, and
   * its receive would wait for good: the connection fails, saying why. */
  for (uint64_t seq = resume; seq < s->head; seq++) {
    const struct lp_send_msg *m = &s->msgs[lp_fifo_slot(seq)];
    if (m->seq == seq && m->events == 0)
      return lp_comm_fail(c, ncclRemoteError,
                          "message %llu completed here (the peer's NIC acknowledged it) but not at the peer, "
                          "whose old NIC wrote no completion for it: it cannot be sent again; the connection fails",
                          (unsigned long long)seq);
  }
  /* The receiver's current CTS entries, keyed for its new NIC. */
  for (uint32_t i = 0; i < a->npending; i++) {
    const struct lp_fo_pending *pm = &a->pending[i];
    struct lp_cts *slot = &s->fifo[lp_fifo_slot(pm->seq) * LP_MAX_RECVS];
    memcpy(slot, pm->cts, sizeof(pm->cts[0]) * pm->nreqs);
  }
  for (int i = 0; i < LP_FIFO_DEPTH; i++) {
    struct lp_send_msg *m = &s->msgs[i];
    int matched = m->events > 0, partial = m->seq == s->head && m->taken;
    if (!matched && !partial) continue;
    lp_send_msg_unmeter(c, m, 0, lp_now_ns()); /* its time on the old path measured the fault, not the port's rate */
    if (matched && m->seq < resume) {          /* landed; only the acknowledgement was lost */
      m->events = 0;
      for (int k = 0; k < m->nreqs; k++) m->reqs[k]->done = 1;
      continue;
    }
    if (m->seq - resume >= a->npending)
      return lp_comm_fail(c, ncclRemoteError, "peer does not list message %llu it has not completed",
                          (unsigned long long)m->seq);
    const struct lp_fo_pending *pm = &a->pending[m->seq - resume];
    /* The receiver lists the receives it announced, only their keys new
     * (lp_fo_receiver_reconcile): a list that disagrees with what this end
     * matched comes from a broken or mismatched peer, and writing by it
     * could overrun a receive, which isend's own check (send.c) prevents. */
    if (pm->nreqs != (uint32_t)m->nreqs)
      return lp_comm_fail(c, ncclRemoteError, "peer lists message %llu with %u receives, not the %d it announced",
                          (unsigned long long)m->seq, pm->nreqs, m->nreqs);
    for (int k = 0; k < m->nreqs; k++) {
      if (!(m->taken & (1u << k))) continue;
      if (pm->cts[k].size < m->sub[k].size)
        return lp_comm_fail(c, ncclRemoteError,
                            "peer lists receive %d of message %llu with %llu bytes, fewer than the %zu sent to it", k,
                            (unsigned long long)m->seq, (unsigned long long)pm->cts[k].size, m->sub[k].size);
      m->sub[k].raddr = pm->cts[k].addr;
      m->sub[k].rkey = pm->cts[k].rkey;
      struct ibv_mr *mr = m->sub[k].size ? lp_mr_for(c, m->sub[k].mh) : NULL;
      if (m->sub[k].size && mr == NULL)
        return lp_comm_fail(c, ncclInternalError, "message %llu's buffer is not registered on %s",
                            (unsigned long long)m->seq, c->link.local.dev_name);
      m->sub[k].lkey = mr ? mr->lkey : 0;
      if (matched) *bytes += m->sub[k].size;
    }
    if (!matched) continue;
    lp_send_msg_rewind(m);
    m->events = c->link.nqps;
    (*replayed)++;
  }
  if (resume < s->post_seq) s->post_seq = resume;
  return ncclSuccess;
}

ncclResult_t lp_fo_receiver_reconcile(struct lp_recv_comm *r, int dev, struct lp_fo_ack *a, uint64_t *bytes) {
  struct lp_comm *c = &r->base;
  int nic = c->env->devs[dev].nic;
  a->resume_seq = r->oldest;
  a->npending = 0;
  for (uint64_t seq = r->oldest; seq < r->tail; seq++) {
    int slot = lp_fifo_slot(seq);
    struct lp_req *req = r->slot_req[slot];
    struct lp_cts *cts = &r->cts_stage[slot * LP_MAX_RECVS];
    if (req == NULL || req->seq != seq)
      return lp_comm_fail(c, ncclInternalError, "message %llu is outstanding but has no request",
                          (unsigned long long)seq);
    for (int k = 0; k < req->nsub; k++) {
      if (cts[k].size == 0) continue;
      struct lp_mr *mh = r->cts_mh[slot][k];
      struct ibv_mr *mr = mh ? mh->mr[nic] : NULL;
      if (mr == NULL)
        return lp_comm_fail(c, ncclInternalError, "receive buffer of message %llu is not registered on %s",
                            (unsigned long long)seq, c->env->devs[dev].name);
      cts[k].rkey = mr->rkey;
      *bytes += cts[k].size;
    }
    struct lp_fo_pending *pm = &a->pending[a->npending++];
    pm->seq = seq;
    pm->nreqs = req->nsub;
    memcpy(pm->cts, cts, sizeof(cts[0]) * req->nsub);
  }
  return ncclSuccess;
}

ncclResult_t lp_fo_post_replays(struct lp_recv_comm *r, struct lp_link *next, const struct lp_fo_ack *a) {
  for (uint32_t i = 0; i < a->npending; i++) {
    uint64_t seq = a->pending[i].seq;
    r->slot_req[lp_fifo_slot(seq)]->events = next->nqps;
    for (int q = 0; q < next->nqps; q++) {
      struct ibv_recv_wr wr, *bad = NULL;
      memset(&wr, 0, sizeof(wr));
      wr.wr_id = lp_wrid(LP_WR_RECV, q, 0, seq);
      int err = ibv_post_recv(next->qps[q], &wr, &bad);
      if (err == 0) next->rq_owed++;
      if (err != 0)
        return lp_comm_fail(&r->base, ncclSystemError, "ibv_post_recv on the new path failed: %s", strerror(err));
    }
  }
  return ncclSuccess;
}
