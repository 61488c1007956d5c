/*
 * Sender data path.  isend waits for the receiver's CTS for the next
 * message, matches it by tag, and once every sub-receive of that message
 * has its isend, the message is posted: RDMA WRITEs of each payload split
 * across the QPs, then one signaled RDMA_WRITE_WITH_IMM per QP whose
 * immediate is the low 32 bits of the message's sequence number.  On QP 0
 * that final write carries the completion record (sizes, full sequence
 * number) into the receiver's record slot, unless the immediate can say
 * it all (one sub-receive on one QP: the compact form, fifo.h).
 *
 * Posting is incremental: a message that needs more work requests than the
 * send queue has room for is continued from test()/isend as completions
 * return credits, so even a 1 TiB message never overruns the queue.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

#include "send.h"
#include "clock.h"
#include "log.h"

static ncclResult_t post(struct lp_send_comm *s, int q, struct ibv_send_wr *wr, enum lp_wr_kind kind, int force,
                         uint64_t seq) {
  return lp_comm_post(&s->base, q, wr, kind, LP_SIGNAL_EVERY, force, seq);
}

/* A message of one sub-receive on a one-QP connection, under 16 MiB: the
 * immediate names it and its size (fifo.h, compact form), and no record
 * goes with it. */
static int imm_says_all(const struct lp_send_comm *s, const struct lp_send_msg *m) {
  return s->base.link.nqps == 1 && m->nreqs == 1 && m->sub[0].size <= LP_COMPACT_MAX_SIZE;
}

/* Such a message goes out whole in a single WRITE_WITH_IMM of its payload:
 * half the work requests of a data write plus a final write, which is what
 * small-message latency is made of.  With adaptive routing, a message above
 * NCCL_IB_AR_THRESHOLD goes as plain WRITEs, which the fabric may route
 * packet by packet, and a final zero-length write with the immediate, as
 * NCCL does (post_qp). */
static int is_compact(const struct lp_send_comm *s, const struct lp_send_msg *m) {
  const struct lp_link *link = &s->base.link;
  return imm_says_all(s, m) && m->sub[0].size <= s->max_wr_bytes &&
         (!link->adaptive || m->sub[0].size <= link->env->cfg.ar_threshold_bytes);
}

static ncclResult_t post_compact(struct lp_send_comm *s, struct lp_send_msg *m) {
  if (s->base.link.sq_free[0] < 1) return ncclSuccess;
  struct ibv_sge sge = {.addr = m->sub[0].laddr, .length = (uint32_t)m->sub[0].size, .lkey = m->sub[0].lkey};
  struct ibv_send_wr wr;
  memset(&wr, 0, sizeof(wr));
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.imm_data = htonl(lp_imm_compact(m->seq, m->sub[0].size));
  wr.wr.rdma.remote_addr = m->sub[0].raddr;
  wr.wr.rdma.rkey = m->sub[0].rkey;
  if (m->sub[0].size > 0) {
    wr.sg_list = &sge;
    wr.num_sge = 1;
  }
  ncclResult_t rc = post(s, 0, &wr, LP_WR_FINAL, 1, m->seq);
  if (rc == ncclSuccess) m->q_done[0] = 1;
  return rc;
}

/* Post what QP q still owes for message m; stops when the queue is full.
 * Returns ncclSuccess with m->q_done[q] set when the QP is finished.  The
 * writes and the final write go out chained, one ibv_post_send for up to
 * LP_CHAIN_MAX of them. */
static ncclResult_t post_qp(struct lp_send_comm *s, struct lp_send_msg *m, int q) {
  struct lp_link *link = &s->base.link;
  if (is_compact(s, m)) return post_compact(s, m);
  struct lp_chain ch;
  lp_chain_init(&ch, q);
  ncclResult_t rc;
  while (m->q_sub[q] < m->nreqs) {
    int i = m->q_sub[q];
    size_t off, len;
    lp_qp_chunk(m->sub[i].size, link->nqps, q, &off, &len);
    while (m->q_off[q] < len) {
      /* keep one slot for the final write so a message can always finish */
      if (link->sq_free[q] < 2) return lp_comm_chain_post(&s->base, &ch);
      size_t piece = len - m->q_off[q];
      if (piece > s->max_wr_bytes) piece = s->max_wr_bytes;
      size_t at = off + m->q_off[q];
      struct ibv_sge sge = {.addr = m->sub[i].laddr + at, .length = (uint32_t)piece, .lkey = m->sub[i].lkey};
      struct ibv_send_wr wr;
      memset(&wr, 0, sizeof(wr));
      wr.opcode = IBV_WR_RDMA_WRITE;
      wr.wr.rdma.remote_addr = m->sub[i].raddr + at;
      wr.wr.rdma.rkey = m->sub[i].rkey;
      rc = lp_comm_chain_add(&s->base, &ch, &wr, &sge, LP_WR_DATA, LP_SIGNAL_EVERY, 0, m->seq);
      if (rc != ncclSuccess) return rc;
      m->q_off[q] += piece;
    }
    m->q_sub[q]++;
    m->q_off[q] = 0;
  }
  if (link->sq_free[q] < 1) return lp_comm_chain_post(&s->base, &ch);

  int slot = lp_fifo_slot(m->seq);
  struct ibv_send_wr wr;
  struct ibv_sge sge;
  int compact = imm_says_all(s, m), record = q == 0 && !compact;
  memset(&wr, 0, sizeof(wr));
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.imm_data = htonl(compact ? lp_imm_compact(m->seq, m->sub[0].size) : lp_imm_of(m->seq));
  wr.wr.rdma.remote_addr = link->remote.ctrl_addr + (uint64_t)slot * sizeof(struct lp_record);
  wr.wr.rdma.rkey = link->remote.ctrl_rkey;
  if (record) { /* the sizes and the whole sequence number, in the record */
    struct lp_record *rec = &s->rec_stage[slot];
    memset(rec, 0, sizeof(*rec));
    rec->seq = m->seq;
    rec->nreqs = (uint32_t)m->nreqs;
    for (int i = 0; i < m->nreqs; i++) rec->sizes[i] = m->sub[i].size;
    sge.addr = (uintptr_t)rec;
    sge.length = sizeof(*rec);
    sge.lkey = link->ctrl_mr->lkey;
  }
  rc = lp_comm_chain_add(&s->base, &ch, &wr, record ? &sge : NULL, LP_WR_FINAL, LP_SIGNAL_EVERY, 1, m->seq);
  if (rc == ncclSuccess) rc = lp_comm_chain_post(&s->base, &ch);
  if (rc != ncclSuccess) return rc;
  m->q_done[q] = 1;
  return ncclSuccess;
}

static ncclResult_t head_msg(struct lp_send_comm *s, struct lp_send_msg **out);

/* A large message goes out: its NIC is busy until its last completion
 * (lp_send_msg_unmeter), which times the port's rate for the gray-failure
 * detector. */
static void meter(struct lp_send_comm *s, struct lp_send_msg *m) {
  struct lp_comm *c = &s->base;
  if (c->health == NULL || !c->env->cfg.gray) return;
  size_t bytes = 0;
  for (int i = 0; i < m->nreqs; i++) bytes += m->sub[i].size;
  if (bytes < LP_METER_MIN_BYTES) return;
  uint64_t now = lp_now_ns();
  /* The post is one of the meter's looks (progress.c).  An absence of the
   * process between here and the next progress call is a gap, as one
   * between two calls is, not the port's busy time.  An absence that ends
   * here, with timed messages already out, is left out: whether they
   * finished in it is known only at the next poll, and by then this one is
   * out, which would make the whole gap look like the port's work. */
  if (c->progress_end_ns != 0 && now - c->progress_end_ns > LP_METER_GAP_NS)
    lp_health_tx_unwatched(c->health, c->link.dev, c->progress_end_ns, now);
  c->progress_end_ns = now;
  m->metered = c->link.dev + 1;
  c->metered++;
  lp_health_tx_begin(c->health, c->link.dev, now);
}

ncclResult_t lp_send_progress(struct lp_send_comm *s) {
  if (s->base.error != ncclSuccess) return s->base.error;
  if (s->base.paused) return ncclSuccess; /* nothing goes out until the new path is agreed */
  while (s->post_seq < s->head) {
    struct lp_send_msg *m = &s->msgs[lp_fifo_slot(s->post_seq)];
    int all = 1;
    for (int q = 0; q < s->base.link.nqps; q++) {
      if (m->q_done[q]) continue;
      ncclResult_t rc = post_qp(s, m, q);
      if (rc != ncclSuccess) return rc;
      all &= m->q_done[q];
    }
    if (!all) break; /* out of credits: continue when completions return some */
    s->post_seq++;
  }
  /* Look for the next clear-to-send while NCCL polls: the receiver's write
   * took its line from this CPU's cache, and the isend that needs it is on
   * the critical path. */
  struct lp_send_msg *next;
  return head_msg(s, &next);
}

ncclResult_t lp_send_completion(struct lp_send_comm *s, const struct ibv_wc *wc) {
  uint64_t id = wc->wr_id;
  int q = lp_wrid_qp(id);
  enum lp_wr_kind kind = lp_wrid_kind(id);
  if ((kind != LP_WR_DATA && kind != LP_WR_FINAL) || q >= s->base.link.nqps)
    return lp_comm_fail(&s->base, ncclInternalError, "unexpected completion (wr_id 0x%llx)", (unsigned long long)id);
  s->base.link.sq_free[q] += (int)lp_wrid_credits(id);
  if (kind != LP_WR_FINAL) return ncclSuccess;
  uint32_t low = lp_wrid_seq(id);
  struct lp_send_msg *m = &s->msgs[low % LP_FIFO_DEPTH];
  if ((uint32_t)m->seq != low || m->events <= 0)
    return lp_comm_fail(&s->base, ncclInternalError, "completion for unknown message %u", low);
  if (--m->events == 0) {
    for (int i = 0; i < m->nreqs; i++) m->reqs[i]->done = 1;
    /* A timed message out makes every progress call read the clock
     * (progress.h): the call's start is when its poll found the end. */
    lp_send_msg_unmeter(&s->base, m, 1, s->base.progress_ns);
  }
  return ncclSuccess;
}

/* The message for `head` in its slot, or NULL when its CTS is not there yet. */
static ncclResult_t head_msg(struct lp_send_comm *s, struct lp_send_msg **out) {
  *out = NULL;
  struct lp_send_msg *m = &s->msgs[lp_fifo_slot(s->head)];
  if (m->seq == s->head) {
    *out = m;
    return ncclSuccess;
  }
  /* The slot's previous message may still await its send completions even
   * though the receiver already reused the slot. */
  if (m->events > 0) return ncclSuccess;
  int nreqs = 0;
  int ready = lp_cts_look(&s->fifo[lp_fifo_slot(s->head) * LP_MAX_RECVS], s->head, &nreqs, &s->head_torn_ns);
  if (ready < 0)
    return lp_comm_fail(&s->base, ncclRemoteError, "malformed clear-to-send entry for message %llu",
                        (unsigned long long)s->head);
  if (ready == 0) return ncclSuccess;
  /* The slot starts over; sub[] and reqs[] are written as isend matches
   * each sub-receive (`taken`), and nothing reads one before.  Not a
   * memset of the slot: at 640 bytes it was the largest single cost of a
   * message in the plugin (docs/PERFORMANCE.md, "by line"). */
  m->seq = s->head;
  m->nreqs = nreqs;
  m->taken = 0;
  m->events = 0;
  m->metered = 0;
  lp_send_msg_rewind(m);
  *out = m;
  return ncclSuccess;
}

ncclResult_t lp_send_match(struct lp_send_comm *s, void *data, size_t size, int tag, void *mhandle, struct lp_req **out,
                           int *progress) {
  struct lp_comm *c = &s->base;
  *out = NULL;
  *progress = 1;
  struct lp_send_msg *m;
  ncclResult_t rc = head_msg(s, &m);
  if (rc != ncclSuccess || m == NULL) return rc; /* nothing to match yet */
  *progress = 0;
  const struct lp_cts *cts = &s->fifo[lp_fifo_slot(m->seq) * LP_MAX_RECVS];
  int r = lp_cts_match(cts, m->nreqs, tag, m->taken);
  if (r < 0) return ncclSuccess; /* no receive for this tag in this message */
  if (size > cts[r].size) {
    LP_WARN("isend of %zu bytes (tag %d) to %s exceeds the %llu bytes the receiver posted: message truncated", size,
            tag, c->peer, (unsigned long long)cts[r].size);
    return ncclInvalidUsage;
  }
  uint32_t lkey = 0;
  if (size > 0) {
    struct ibv_mr *mr = lp_mr_for(c, mhandle);
    if (mr == NULL) {
      if (lp_comm_awaits_move(c, mhandle)) {
        *progress = 1;
        return ncclSuccess;
      }
      LP_WARN("isend: memory handle %p is not registered on %s", mhandle, c->link.local.dev_name);
      return ncclInvalidArgument;
    }
    const struct lp_mr *m = mhandle;
    if (!lp_mr_covers(m, data, size)) {
      LP_WARN("isend: buffer %p+%zu lies outside its registration %p+%zu", data, size, (void *)m->addr, m->len);
      return ncclInvalidArgument;
    }
    lkey = mr->lkey;
    lp_comm_uses(c, mhandle);
  }
  struct lp_req *req = lp_req_alloc(c);
  if (req == NULL) {
    LP_WARN("isend: more than %d requests outstanding on the connection to %s", LP_MAX_SEND_REQS, c->peer);
    return ncclInternalError;
  }
  req->type = LP_REQ_SEND;
  req->seq = m->seq;
  req->size = size;
  req->nsub = 1;
  m->sub[r].laddr = (uintptr_t)data;
  m->sub[r].size = size;
  m->sub[r].lkey = lkey;
  m->sub[r].mh = mhandle;
  m->sub[r].raddr = cts[r].addr;
  m->sub[r].rkey = cts[r].rkey;
  m->reqs[r] = req;
  m->taken |= 1u << r;
  if (m->taken == (1u << m->nreqs) - 1) {
    m->events = c->link.nqps;
    meter(s, m);
    s->head++;
    /* A failure here fails the comm for good: the request stays with its
     * message, which still names it (freed, a later use of the slot would
     * be completed by this message's completions). */
    rc = lp_send_progress(s);
    if (rc != ncclSuccess) return rc;
  }
  *out = req;
  return ncclSuccess;
}
