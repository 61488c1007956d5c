/* How a sender posts a message (send.c): its writes and its final write go
 * out chained, one ibv_post_send a QP for up to LP_CHAIN_MAX of them, as
 * NCCL's own transport posts them.  A doorbell a WR cost simverbs a
 * wake-up of its engine (and costs a NIC an MMIO write): at 64 KiB linkpass
 * made 3 calls a rank-iteration against the reference plugin's 2.  A
 * broken chain posts one call a WR, loses a WR, or signals the wrong one.
 *
 * The comm is built in memory over a QP whose post_send records what it is
 * handed (the progress_units binary). */
#include <criterion/criterion.h>
#include <string.h>

#include "comm.h"
#include "env.h"
#include "clock.h"
#include "fifo.h"
#include "health.h"
#include "mr.h"
#include "send.h"

#define MAX_SEEN 64

static struct {
  int calls;
  int nwr;
  struct ibv_send_wr wr[MAX_SEEN];
  struct ibv_sge sge[MAX_SEEN];
  int per_call[MAX_SEEN];
} seen;

static int record_post(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
  (void)qp;
  (void)bad;
  int n = 0;
  for (; wr != NULL; wr = wr->next, n++) {
    cr_assert_lt(seen.nwr, MAX_SEEN);
    seen.wr[seen.nwr] = *wr;
    if (wr->num_sge > 0) seen.sge[seen.nwr] = wr->sg_list[0];
    seen.nwr++;
  }
  seen.per_call[seen.calls++] = n;
  return 0;
}

static struct ibv_context ctx;
static struct ibv_qp qp;
static struct lp_env env;
static struct lp_send_comm s;
static struct lp_cts fifo[LP_FIFO_DEPTH * LP_MAX_RECVS];

/* A one-QP sender with adaptive routing (messages above 8 KiB go as plain
 * writes and a final write), message 1 matched: `size` bytes in one
 * sub-receive, pieces of at most `max_wr` bytes. */
static void one_message(size_t size, size_t max_wr) {
  memset(&seen, 0, sizeof(seen));
  memset(&ctx, 0, sizeof(ctx));
  memset(&qp, 0, sizeof(qp));
  memset(&env, 0, sizeof(env));
  memset(&s, 0, sizeof(s));
  memset(fifo, 0, sizeof(fifo));
  ctx.ops.post_send = record_post;
  qp.context = &ctx;
  env.cfg.ar_threshold_bytes = 8192;
  s.base.kind = LP_COMM_SEND;
  s.base.env = &env;
  s.base.link.env = &env;
  s.base.link.nqps = 1;
  s.base.link.qps[0] = &qp;
  s.base.link.sq_free[0] = LP_SQ_DEPTH;
  s.base.link.adaptive = 1;
  s.base.link.remote.ctrl_addr = 0x900000;
  s.base.link.remote.ctrl_rkey = 77;
  s.fifo = fifo;
  s.max_wr_bytes = max_wr;
  s.post_seq = 1;
  s.head = 2;
  struct lp_send_msg *m = &s.msgs[lp_fifo_slot(1)];
  m->seq = 1;
  m->nreqs = 1;
  m->events = 1;
  m->sub[0].laddr = 0x100000;
  m->sub[0].size = size;
  m->sub[0].lkey = 5;
  m->sub[0].raddr = 0x500000;
  m->sub[0].rkey = 9;
}

Test(send_chain, a_message_goes_out_in_one_post) {
  one_message(64 << 10, 1u << 30);
  cr_assert_eq(lp_send_progress(&s), ncclSuccess);
  cr_assert_eq(seen.calls, 1, "%d ibv_post_send calls for one message, not 1", seen.calls);
  cr_assert_eq(seen.nwr, 2);
  cr_expect_eq(seen.wr[0].opcode, IBV_WR_RDMA_WRITE);
  cr_expect_eq(seen.sge[0].length, 64u << 10);
  cr_expect_eq(seen.wr[0].wr.rdma.remote_addr, 0x500000u);
  cr_expect_eq(seen.wr[1].opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
  cr_expect_eq(seen.wr[1].num_sge, 0, "the final write of a one-receive message carries no record");
  cr_expect(seen.wr[1].send_flags & IBV_SEND_SIGNALED, "the final write is signaled");
  cr_expect_eq(s.base.link.sq_free[0], LP_SQ_DEPTH - 2, "two credits taken");
  cr_expect_eq(s.post_seq, 2u, "the message is posted whole");
}

Test(send_chain, a_message_of_many_pieces_goes_out_in_chains_of_16) {
  one_message(20 * 4096, 4096);
  cr_assert_eq(lp_send_progress(&s), ncclSuccess);
  cr_assert_eq(seen.nwr, 21, "20 pieces and the final write, not %d WRs", seen.nwr);
  cr_assert_eq(seen.calls, 2, "%d ibv_post_send calls, not 2", seen.calls);
  cr_expect_eq(seen.per_call[0], LP_CHAIN_MAX);
  cr_expect_eq(seen.per_call[1], 21 - LP_CHAIN_MAX);
  for (int i = 0; i < 20; i++) {
    cr_expect_eq(seen.wr[i].opcode, IBV_WR_RDMA_WRITE);
    cr_expect_eq(seen.sge[i].addr, 0x100000u + 4096u * (unsigned)i, "piece %d in order", i);
    cr_expect_eq(seen.wr[i].wr.rdma.remote_addr, 0x500000u + 4096u * (unsigned)i);
  }
  cr_expect_eq(seen.wr[20].opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
  /* Unsignaled WRs are credited by the next signaled one: one in
   * LP_SIGNAL_EVERY, and always the final write. */
  int signaled = 0;
  for (int i = 0; i < 21; i++) signaled += (seen.wr[i].send_flags & IBV_SEND_SIGNALED) != 0;
  cr_expect_eq(signaled, 20 / LP_SIGNAL_EVERY + 1, "%d signaled WRs", signaled);
  cr_expect_eq(s.base.link.sq_free[0], LP_SQ_DEPTH - 21);
  cr_expect_eq(s.post_seq, 2u);
}

Test(send_chain, a_queue_without_room_posts_what_fits_and_the_rest_later) {
  one_message(20 * 4096, 4096);
  s.base.link.sq_free[0] = 6; /* 5 pieces and one kept for the final write */
  cr_assert_eq(lp_send_progress(&s), ncclSuccess);
  cr_assert_eq(seen.calls, 1);
  cr_assert_eq(seen.nwr, 5, "5 pieces fit, not %d", seen.nwr);
  cr_expect_eq(s.post_seq, 1u, "the message is not posted whole yet");
  s.base.link.sq_free[0] += LP_SQ_DEPTH - 6; /* completions returned every credit */
  cr_assert_eq(lp_send_progress(&s), ncclSuccess);
  cr_assert_eq(seen.nwr, 21, "the rest follows: %d WRs in all", seen.nwr);
  cr_expect_eq(seen.sge[5].addr, 0x100000u + 5 * 4096u, "it continues where it stopped");
  cr_expect_eq(seen.wr[20].opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
  cr_expect_eq(s.post_seq, 2u);
}

/* A message of the FIFO may gather LP_MAX_RECVS sub-receives, each an
 * isend of its own, and the FIFO holds LP_FIFO_DEPTH messages: a send comm
 * needs a request for each (NCCL's proxy puts several subs on one
 * connection).  With a pool the size of a receive comm's, the 33rd isend
 * failed and NCCL aborted. */
Test(requests, a_send_comm_holds_an_isend_for_every_sub_receive_of_the_fifo) {
  static struct lp_send_comm sc;
  static struct lp_recv_comm rc;
  memset(&sc, 0, sizeof(sc));
  memset(&rc, 0, sizeof(rc));
  sc.base.kind = LP_COMM_SEND;
  rc.base.kind = LP_COMM_RECV;
  for (int i = 0; i < LP_FIFO_DEPTH * LP_MAX_RECVS; i++)
    cr_assert_not_null(lp_req_alloc(&sc.base), "isend %d of %d found no request", i + 1, LP_FIFO_DEPTH * LP_MAX_RECVS);
  cr_assert_null(lp_req_alloc(&sc.base));
  for (int i = 0; i < LP_FIFO_DEPTH; i++) cr_assert_not_null(lp_req_alloc(&rc.base));
  cr_assert_null(lp_req_alloc(&rc.base));
}

/* The gray-failure meter times a port by its messages of 64 KiB or more,
 * leaving out the time the process did not look (progress.c).  NCCL's
 * proxy posts before it tests: after an absence of the process, an isend
 * that posts a timed message while an earlier one is out ends that gap,
 * and the gap is left out then, since the next poll would find the new
 * message out and take the whole gap for the port's work (a healthy port
 * drained as slow after the process was descheduled). */
Test(send_meter, an_isend_after_an_absence_leaves_the_gap_out) {
  static struct lp_health health;
  static struct ibv_mr mr = {.lkey = 5};
  static struct lp_mr mh;
  one_message(64 << 10, 1u << 30);
  memset(&health, 0, sizeof(health));
  memset(&mh, 0, sizeof(mh));
  mh.magic = LP_MR_MAGIC;
  mh.addr = 0x100000;
  mh.len = 1 << 20;
  mh.nics = 1;
  mh.mr[0] = &mr;
  env.cfg.gray = 1;
  s.base.health = &health;
  s.base.mr_nics = 1;
  /* message 1 is out and timed; the process last looked a second ago */
  s.base.metered = 1;
  s.msgs[lp_fifo_slot(1)].metered = 1;
  s.post_seq = s.head = 2;
  s.base.progress_end_ns = lp_now_ns() - 1000000000ull;
  struct lp_cts *cts = &fifo[lp_fifo_slot(2) * LP_MAX_RECVS];
  cts->addr = 0x600000;
  cts->size = 64 << 10;
  cts->rkey = 9;
  cts->tag = 3;
  cts->nreqs = 1;
  cts->seq = 2;
  struct lp_req *req = NULL;
  int progress;
  cr_assert_eq(lp_send_match(&s, (void *)0x100000, 64 << 10, 3, &mh, &req, &progress), ncclSuccess);
  cr_assert_not_null(req, "the isend matched message 2");
  cr_assert_eq(s.base.metered, 2, "message 2 is timed too");
  cr_assert_geq(atomic_load(&health.tx[0].unwatched_ns), 1000000000ull,
                "the second without a look was not left out (%llu ns)",
                (unsigned long long)atomic_load(&health.tx[0].unwatched_ns));
  uint64_t posted = s.base.progress_end_ns;
  cr_assert_gt(posted, lp_now_ns() - 1000000ull, "the post is the meter's last look");
}
