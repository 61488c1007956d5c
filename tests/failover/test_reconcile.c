/* The sender's half of a move (reconcile.c lp_fo_sender_reconcile): which
 * messages complete, which are written again and with which keys, from a
 * send comm and an ACK built in memory.  A broken reconciliation loses a
 * message (completes one the receiver never got) or repeats one. */
#include <criterion/criterion.h>
#include <string.h>

#include "reconcile.h"

static struct lp_env env;
static struct lp_send_comm s;
static struct lp_cts fifo[LP_FIFO_DEPTH * LP_MAX_RECVS];
static struct lp_fo_ack ack;
static struct lp_req reqs[8];
static struct ibv_mr mr_new; /* the buffer's registration on the NIC the connection moved to */
static struct lp_mr mh;

/* Messages 1..4 matched and fully posted (awaiting their completions), one
 * 100-byte sub-send each; the connection now on device 1 (NIC 1), 2 QPs. */
static void comm(void) {
  memset(&env, 0, sizeof(env));
  memset(&s, 0, sizeof(s));
  memset(&ack, 0, sizeof(ack));
  memset(reqs, 0, sizeof(reqs));
  env.ndevs = env.nnics = 2;
  env.devs[0].nic = 0;
  env.devs[1].nic = 1;
  mr_new.lkey = 0x77;
  mh.magic = LP_MR_MAGIC;
  mh.mr[1] = &mr_new;
  s.base.env = &env;
  s.base.kind = LP_COMM_SEND;
  s.base.link.env = &env;
  s.base.link.dev = 1;
  s.base.link.nqps = 2;
  s.fifo = fifo;
  s.head = 5;
  s.post_seq = 5;
  for (uint64_t seq = 1; seq <= 4; seq++) {
    struct lp_send_msg *m = &s.msgs[lp_fifo_slot(seq)];
    m->seq = seq;
    m->nreqs = 1;
    m->taken = 1;
    m->events = 1; /* one QP's final write still unacknowledged */
    m->reqs[0] = &reqs[seq];
    reqs[seq].used = 1;
    m->sub[0].size = 100;
    m->sub[0].mh = &mh;
    m->sub[0].lkey = 0x11; /* the old NIC's key */
    m->sub[0].raddr = 0x1000 * seq;
    memset(m->q_done, 1, sizeof(m->q_done));
  }
}

/* The receiver completed everything below `resume` and re-announces the
 * rest with keys for its new NIC. */
static void ack_from(uint64_t resume) {
  ack.resume_seq = resume;
  ack.npending = 0;
  for (uint64_t seq = resume; seq < s.head; seq++) {
    struct lp_fo_pending *p = &ack.pending[ack.npending++];
    p->seq = seq;
    p->nreqs = 1;
    p->cts[0].addr = 0x9000 + seq;
    p->cts[0].size = 100;
    p->cts[0].rkey = 0x500 + (uint32_t)seq;
    p->cts[0].seq = seq;
  }
}

Test(reconcile, delivered_complete_the_rest_is_written_again_whole, .init = comm) {
  ack_from(3);
  int replayed = 0;
  uint64_t bytes = 0;
  cr_assert_eq(lp_fo_sender_reconcile(&s, &ack, &replayed, &bytes), ncclSuccess);
  for (uint64_t seq = 1; seq <= 2; seq++) {
    cr_assert(reqs[seq].done, "message %llu landed before the move: it completes", (unsigned long long)seq);
    cr_assert_eq(s.msgs[lp_fifo_slot(seq)].events, 0);
  }
  for (uint64_t seq = 3; seq <= 4; seq++) {
    const struct lp_send_msg *m = &s.msgs[lp_fifo_slot(seq)];
    cr_assert(!reqs[seq].done, "message %llu did not land: it must not complete yet", (unsigned long long)seq);
    cr_assert_eq(m->events, 2, "written again on both new QPs");
    cr_assert_eq(m->sub[0].raddr, 0x9000 + seq, "to the receiver's re-announced buffer");
    cr_assert_eq(m->sub[0].rkey, 0x500 + seq, "with its key on the receiver's new NIC");
    cr_assert_eq(m->sub[0].lkey, 0x77, "from our buffer's registration on our new NIC");
    for (int q = 0; q < LP_MAX_QPS; q++) cr_assert_eq(m->q_done[q], 0, "from its first byte on QP %d", q);
  }
  cr_assert_eq(replayed, 2);
  cr_assert_eq(bytes, 200);
  cr_assert_eq(s.post_seq, 3, "posting restarts at the first message the receiver lacks");
}

Test(reconcile, nothing_delivered_everything_replayed, .init = comm) {
  ack_from(1);
  int replayed = 0;
  uint64_t bytes = 0;
  cr_assert_eq(lp_fo_sender_reconcile(&s, &ack, &replayed, &bytes), ncclSuccess);
  cr_assert_eq(replayed, 4);
  for (uint64_t seq = 1; seq <= 4; seq++) cr_assert(!reqs[seq].done);
}

Test(reconcile, all_delivered_only_acks_were_lost, .init = comm) {
  ack_from(5);
  int replayed = 0;
  uint64_t bytes = 0;
  cr_assert_eq(lp_fo_sender_reconcile(&s, &ack, &replayed, &bytes), ncclSuccess);
  cr_assert_eq(replayed, 0);
  cr_assert_eq(bytes, 0);
  for (uint64_t seq = 1; seq <= 4; seq++) cr_assert(reqs[seq].done);
}

Test(reconcile, a_partly_matched_head_gets_new_keys_but_is_not_posted, .init = comm) {
  /* Message 5 is being matched: one of its two sub-sends taken so far. */
  struct lp_send_msg *m = &s.msgs[lp_fifo_slot(5)];
  m->seq = 5;
  m->nreqs = 2;
  m->taken = 1;
  m->reqs[0] = &reqs[5];
  m->sub[0].size = 100;
  m->sub[0].mh = &mh;
  s.head = 5;
  ack_from(3);
  struct lp_fo_pending *p = &ack.pending[ack.npending++];
  p->seq = 5;
  p->nreqs = 2;
  p->cts[0].addr = 0xabc0;
  p->cts[0].size = 100;
  p->cts[0].rkey = 0x555;
  int replayed = 0;
  uint64_t bytes = 0;
  cr_assert_eq(lp_fo_sender_reconcile(&s, &ack, &replayed, &bytes), ncclSuccess);
  cr_assert_eq(m->sub[0].raddr, 0xabc0);
  cr_assert_eq(m->sub[0].rkey, 0x555);
  cr_assert_eq(m->events, 0, "not complete, not posted: isend still matches its other half");
  cr_assert_eq(replayed, 2, "only the matched messages 3 and 4");
}

Test(reconcile, a_resume_point_outside_the_window_fails_the_connection, .init = comm) {
  ack_from(3);
  ack.resume_seq = 9; /* beyond anything we sent */
  int replayed = 0;
  uint64_t bytes = 0;
  cr_assert_eq(lp_fo_sender_reconcile(&s, &ack, &replayed, &bytes), ncclRemoteError);
  cr_assert_eq(s.base.error, ncclRemoteError, "sticky");
  for (uint64_t seq = 1; seq <= 4; seq++) cr_assert(!reqs[seq].done, "nothing completes on a bad ACK");
}

/* Messages 4 on matched but not yet posted: a peer that says it has
 * completed message 4 is wrong, and must not complete it here. */
Test(reconcile, a_resume_point_past_what_was_posted_fails_the_connection, .init = comm) {
  s.post_seq = 4;
  memset(s.msgs[lp_fifo_slot(4)].q_done, 0, sizeof(s.msgs[0].q_done));
  ack_from(5);
  int replayed = 0;
  uint64_t bytes = 0;
  cr_assert_eq(lp_fo_sender_reconcile(&s, &ack, &replayed, &bytes), ncclRemoteError);
  for (uint64_t seq = 1; seq <= 4; seq++) cr_assert(!reqs[seq].done, "nothing completes on a bad ACK");
}

Test(reconcile, a_message_missing_from_the_ack_fails_the_connection, .init = comm) {
  ack_from(3);
  ack.npending = 1; /* message 4 not listed although not complete */
  int replayed = 0;
  uint64_t bytes = 0;
  cr_assert_eq(lp_fo_sender_reconcile(&s, &ack, &replayed, &bytes), ncclRemoteError);
}

Test(reconcile, a_buffer_not_registered_on_the_new_nic_fails, .init = comm) {
  mh.mr[1] = NULL;
  ack_from(3);
  int replayed = 0;
  uint64_t bytes = 0;
  cr_assert_eq(lp_fo_sender_reconcile(&s, &ack, &replayed, &bytes), ncclInternalError);
}

/* The receiver lists message 3 as not complete, but this end saw its
 * writes complete and gave the buffer back to NCCL: nothing can write it
 * again, and skipping it left the receive waiting for good.  It fails,
 * before anything completes. */
Test(reconcile, a_message_complete_here_but_not_at_the_peer_fails_the_connection, .init = comm) {
  s.msgs[lp_fifo_slot(3)].events = 0;
  ack_from(3);
  int replayed = 0;
  uint64_t bytes = 0;
  cr_assert_eq(lp_fo_sender_reconcile(&s, &ack, &replayed, &bytes), ncclRemoteError);
  cr_assert_eq(s.base.error, ncclRemoteError, "sticky");
  for (uint64_t seq = 1; seq <= 4; seq++) cr_assert(!reqs[seq].done, "nothing completes on such an ACK");
}

/* An ACK that lists a receive smaller than what this end sent into it, or
 * a different number of receives for a message, comes from a broken or
 * mismatched peer: the replay would write past the receive (isend refuses
 * that at the match, send.c). It fails, saying so, and nothing is written
 * again with the listed keys. */
Test(reconcile, a_listed_receive_smaller_than_what_was_sent_fails_the_connection, .init = comm) {
  ack_from(3);
  ack.pending[1].cts[0].size = 64; /* message 4: 100 bytes sent */
  int replayed = 0;
  uint64_t bytes = 0;
  cr_assert_eq(lp_fo_sender_reconcile(&s, &ack, &replayed, &bytes), ncclRemoteError);
  cr_assert_eq(s.base.error, ncclRemoteError, "sticky");
  cr_assert_neq(s.msgs[lp_fifo_slot(4)].sub[0].raddr, 0x9004, "message 4 took the listed address");
}

Test(reconcile, a_listed_message_with_other_receives_fails_the_connection, .init = comm) {
  ack_from(3);
  ack.pending[0].nreqs = 2; /* message 3 was one receive */
  ack.pending[0].cts[1] = ack.pending[0].cts[0];
  ack.pending[0].cts[1].idx = 1;
  int replayed = 0;
  uint64_t bytes = 0;
  cr_assert_eq(lp_fo_sender_reconcile(&s, &ack, &replayed, &bytes), ncclRemoteError);
  cr_assert_eq(s.base.error, ncclRemoteError, "sticky");
}
