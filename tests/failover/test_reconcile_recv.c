/* The receiver's half of a move (reconcile.c lp_fo_receiver_reconcile): the
 * first message it has not completed, and the CTS entries of every message
 * from there on, keyed for its new NIC, from a receive comm built in memory.
 * A broken one names a message it completed (the sender writes it again
 * over a buffer NCCL already reused), skips one (lost), or hands out keys
 * of the old NIC (the sender's writes fail on the new path). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "reconcile.h"

static struct lp_env env;
static struct lp_recv_comm r;
static struct lp_cts stage[LP_FIFO_DEPTH * LP_MAX_RECVS];
static struct lp_fo_ack ack;
static struct lp_req reqs[8];
static struct ibv_mr mr_old, mr_new; /* the buffers' registrations on NIC 0 (old) and NIC 1 (new) */
static struct lp_mr mh;

/* Messages 1 and 2 complete; 3, 4 and 5 announced and outstanding (5 with
 * two sub-receives, the second of size 0); the connection moves from
 * device 0 to device 1. */
static void comm(void) {
  memset(&env, 0, sizeof(env));
  memset(&r, 0, sizeof(r));
  memset(stage, 0, sizeof(stage));
  memset(&ack, 0, sizeof(ack));
  memset(reqs, 0, sizeof(reqs));
  env.ndevs = env.nnics = 2;
  env.devs[0].nic = 0;
  env.devs[1].nic = 1;
  snprintf(env.devs[1].name, sizeof(env.devs[1].name), "mlx5_1");
  mr_old.rkey = 0x11;
  mr_new.rkey = 0x99;
  mh.magic = LP_MR_MAGIC;
  mh.mr[0] = &mr_old;
  mh.mr[1] = &mr_new;
  r.base.env = &env;
  r.base.kind = LP_COMM_RECV;
  r.base.link.env = &env;
  r.base.link.dev = 0;
  r.base.link.nqps = 1;
  r.cts_stage = stage;
  r.oldest = 3;
  r.tail = 6;
  for (uint64_t seq = 3; seq <= 5; seq++) {
    int slot = lp_fifo_slot(seq);
    struct lp_req *q = &reqs[seq];
    q->used = 1;
    q->seq = seq;
    q->nsub = seq == 5 ? 2 : 1;
    r.slot_req[slot] = q;
    for (int k = 0; k < q->nsub; k++) {
      struct lp_cts *c = &stage[slot * LP_MAX_RECVS + k];
      c->addr = 0x10000 * seq + 0x100 * (uint64_t)k;
      c->size = k == 0 ? 1000 * seq : 0;
      c->rkey = mr_old.rkey;
      c->idx = (uint16_t)k;
      c->nreqs = (uint16_t)q->nsub;
      c->seq = seq;
      r.cts_mh[slot][k] = &mh;
    }
  }
}

Test(reconcile_recv, the_first_incomplete_message_and_every_one_after_it, .init = comm) {
  uint64_t bytes = 0;
  cr_assert_eq(lp_fo_receiver_reconcile(&r, 1, &ack, &bytes), ncclSuccess);
  cr_assert_eq(ack.resume_seq, 3, "messages 1 and 2 are complete: resume at 3");
  cr_assert_eq(ack.npending, 3);
  for (uint32_t i = 0; i < 3; i++) {
    const struct lp_fo_pending *p = &ack.pending[i];
    cr_assert_eq(p->seq, 3 + i);
    cr_assert_eq(p->nreqs, p->seq == 5 ? 2u : 1u);
    cr_assert_eq(p->cts[0].addr, 0x10000 * p->seq);
    cr_assert_eq(p->cts[0].rkey, mr_new.rkey, "message %llu keeps the old NIC's key", (unsigned long long)p->seq);
  }
  cr_assert_eq(ack.pending[2].cts[1].rkey, mr_old.rkey, "an empty sub-receive is not re-keyed");
  cr_assert_eq(bytes, 3000 + 4000 + 5000);
  cr_assert_eq(r.base.error, ncclSuccess);
}

Test(reconcile_recv, everything_complete_lists_nothing, .init = comm) {
  r.oldest = r.tail = 6;
  uint64_t bytes = 0;
  cr_assert_eq(lp_fo_receiver_reconcile(&r, 1, &ack, &bytes), ncclSuccess);
  cr_assert_eq(ack.resume_seq, 6);
  cr_assert_eq(ack.npending, 0);
  cr_assert_eq(bytes, 0);
}

Test(reconcile_recv, an_outstanding_message_without_its_request_fails, .init = comm) {
  r.slot_req[lp_fifo_slot(4)] = NULL;
  uint64_t bytes = 0;
  cr_assert_eq(lp_fo_receiver_reconcile(&r, 1, &ack, &bytes), ncclInternalError);
  cr_assert_eq(r.base.error, ncclInternalError, "the connection fails rather than skip message 4");
}

Test(reconcile_recv, a_buffer_not_registered_on_the_new_nic_fails, .init = comm) {
  mh.mr[1] = NULL;
  uint64_t bytes = 0;
  cr_assert_eq(lp_fo_receiver_reconcile(&r, 1, &ack, &bytes), ncclInternalError);
  cr_assert_eq(r.base.error, ncclInternalError);
}
