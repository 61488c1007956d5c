#define _GNU_SOURCE /* clock_gettime, for clock.h */
/* The registration cache (mr.c): on which NICs a registration is made,
 * against a fake verbs table that records each ibv_reg_mr. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "comm.h"
#include "env.h"
#include "health.h"
#include "mr.h"
#include "recv.h"
#include "send.h"
#include "../lib/warn_capture.h"

static struct ibv_pd fake_pd[2];
static struct ibv_mr fake_mr[8];
static int nreg, nreg_on[2];
static int eio_on;     /* 1 + the NIC whose context answers EIO (dead); 0: none */
static int enomem_on; /* 1 + the NIC that answers ENOMEM (the memlock limit); 0: none */

static struct ibv_mr *fake_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) {
  (void)access;
  nreg_on[pd - fake_pd]++;
  if (eio_on == 1 + (pd - fake_pd) || enomem_on == 1 + (pd - fake_pd)) {
    errno = eio_on ? EIO : ENOMEM;
    return NULL;
  }
  struct ibv_mr *mr = &fake_mr[nreg++ % 8];
  memset(mr, 0, sizeof(*mr));
  mr->pd = pd;
  mr->addr = addr;
  mr->length = len;
  mr->lkey = (uint32_t)(pd - fake_pd) + 1;
  return mr;
}

static int fake_dereg_mr(struct ibv_mr *mr) {
  (void)mr;
  return 0;
}

static struct lp_env env;
static struct lp_mr_cache cache = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void two_nics(void) {
  memset(&env, 0, sizeof(env));
  nreg = 0;
  nreg_on[0] = nreg_on[1] = 0;
  eio_on = enomem_on = 0;
  env.nnics = 2;
  env.page_size = 4096;
  for (int n = 0; n < 2; n++) {
    env.nics[n].pd = &fake_pd[n];
    snprintf(env.nics[n].name, sizeof(env.nics[n].name), "mlx5_%d", n);
  }
  env.ibv.reg_mr = fake_reg_mr;
  env.ibv.dereg_mr = fake_dereg_mr;
}

Test(mr, failover_off_registers_on_the_home_nic_only, .init = two_nics) {
  static char buf[8192];
  void *h;
  cr_assert_eq(lp_mr_register(&cache, &env, NULL, 1, buf, sizeof(buf), NCCL_PTR_HOST, -1, 0, &h), ncclSuccess);
  cr_expect_eq(lp_mr_nics(h), 2u, "NIC 1 only");
  cr_expect_null(lp_mr_on(h, 0));
  cr_expect_eq(nreg, 1);
  cr_assert_eq(lp_mr_deregister(h), ncclSuccess);
}

/* A connection NCCL made for device 0 may run on NIC 1 (subnet routing),
 * and NCCL hands it what it registered for device 0: keys on NIC 1 too. */
Test(mr, subnet_routing_registers_on_every_nic, .init = two_nics) {
  static char buf[8192];
  void *h;
  env.cfg.subnet_routing = 1;
  cr_assert_eq(lp_mr_register(&cache, &env, NULL, 0, buf, sizeof(buf), NCCL_PTR_HOST, -1, 0, &h), ncclSuccess);
  cr_expect_eq(lp_mr_nics(h), 3u, "both NICs");
  cr_expect_not_null(lp_mr_on(h, 1));
  cr_expect_eq(lp_mr_on(h, 1)->pd, &fake_pd[1]);
  cr_assert_eq(lp_mr_deregister(h), ncclSuccess);
}

/* isend and irecv check a buffer against the handle's own range: what an
 * ibv_mr says is no address for a dma-buf (rdma-core reports the offset
 * inside the dma-buf there), and a size that wraps the address space must
 * not pass. */
Test(mr, covers_checks_the_handles_own_range) {
  struct lp_mr m = {.addr = 0x10000, .len = 0x1000};
  cr_assert(lp_mr_covers(&m, (void *)0x10000, 0x1000));
  cr_assert(lp_mr_covers(&m, (void *)0x10800, 0x800));
  cr_assert(lp_mr_covers(&m, (void *)0x11000, 0)); /* an empty range at the end */
  cr_assert_not(lp_mr_covers(&m, (void *)0x10800, 0x801));
  cr_assert_not(lp_mr_covers(&m, (void *)0xffff, 1));
  cr_assert_not(lp_mr_covers(&m, (void *)0x11000, 1));
  cr_assert_not(lp_mr_covers(&m, (void *)0x10800, SIZE_MAX)); /* at + size wraps */
}

/* Failover on (a control plane), and NIC 0, the home, died: before its
 * DEVICE_FATAL was read (every command of its context answers EIO), or
 * after (health knows; the NIC is not asked).  The registration is made on
 * NIC 1, where the connection is about to move; failing it ended the job
 * on a fault failover is there to survive. */
static struct lp_health health;

Test(mr, a_dead_home_nic_is_left_out_with_failover_on, .init = two_nics) {
  static char buf[8192];
  void *h;
  memset(&health, 0, sizeof(health));
  eio_on = 1;
  cr_assert_eq(lp_mr_register(&cache, &env, &health, 0, buf, sizeof(buf), NCCL_PTR_HOST, -1, 0, &h), ncclSuccess,
               "NIC 0 answered EIO");
  cr_expect_eq(lp_mr_nics(h), 2u, "NIC 1 only");
  cr_expect_eq(((struct lp_mr *)h)->dead_nics, 1u, "NIC 0 named dead");
  cr_assert_eq(lp_mr_deregister(h), ncclSuccess);

  eio_on = 0;
  nreg_on[0] = nreg_on[1] = 0;
  atomic_store(&health.fatal[0], 1);
  cr_assert_eq(lp_mr_register(&cache, &env, &health, 0, buf, sizeof(buf), NCCL_PTR_HOST, -1, 0, &h), ncclSuccess,
               "NIC 0 reported DEVICE_FATAL");
  cr_expect_eq(lp_mr_nics(h), 2u, "NIC 1 only");
  cr_expect_eq(nreg_on[0], 0, "a fatal NIC is not asked");
  cr_expect_eq(((struct lp_mr *)h)->dead_nics, 1u, "NIC 0 named dead");
  cr_assert_eq(lp_mr_deregister(h), ncclSuccess);

  /* Dead, and the only other NIC dead too: nothing to register on. */
  atomic_store(&health.fatal[1], 1);
  h = &h;
  cr_expect_eq(lp_mr_register(&cache, &env, &health, 0, buf, sizeof(buf), NCCL_PTR_HOST, -1, 0, &h), ncclSystemError);
  cr_expect_null(h);
}

/* A registration made while its home NIC was dead is shared by the next
 * one for the same NIC and range: the NIC stays dead, and registering the
 * range again on every live NIC pinned it once more for nothing.  Only
 * once the NIC's death is known (DEVICE_FATAL): after a lone EIO the next
 * registration asks it again. */
Test(mr, a_registration_made_while_home_was_dead_is_shared, .init = two_nics) {
  static char buf[8192];
  void *h1, *h2;
  memset(&health, 0, sizeof(health));
  atomic_store(&health.fatal[0], 1);
  cr_assert_eq(lp_mr_register(&cache, &env, &health, 0, buf, sizeof(buf), NCCL_PTR_HOST, -1, 0, &h1), ncclSuccess);
  cr_assert_eq(lp_mr_register(&cache, &env, &health, 0, buf, 4096, NCCL_PTR_HOST, -1, 0, &h2), ncclSuccess);
  cr_expect_eq(h2, h1, "the second registration shares the first");
  cr_expect_eq(nreg_on[1], 1, "NIC 1 registered the range once");
  cr_expect_eq(nreg_on[0], 0, "the dead NIC was never asked");
  cr_assert_eq(lp_mr_deregister(h2), ncclSuccess);
  cr_assert_eq(lp_mr_deregister(h1), ncclSuccess);

  atomic_store(&health.fatal[0], 0);
  eio_on = 1;
  cr_assert_eq(lp_mr_register(&cache, &env, &health, 0, buf, sizeof(buf), NCCL_PTR_HOST, -1, 0, &h1), ncclSuccess);
  eio_on = 0;
  cr_assert_eq(lp_mr_register(&cache, &env, &health, 0, buf, 4096, NCCL_PTR_HOST, -1, 0, &h2), ncclSuccess);
  cr_expect_neq(h2, h1, "NIC 0 only answered EIO: asked again, not taken for dead");
  cr_expect_eq(lp_mr_nics(h2), 3u, "registered on both NICs");
  cr_assert_eq(lp_mr_deregister(h2), ncclSuccess);
  cr_assert_eq(lp_mr_deregister(h1), ncclSuccess);
}

/* Without failover nothing moves: a home NIC that answers EIO fails the
 * registration, as before. */
Test(mr, a_dead_home_nic_fails_the_registration_without_failover, .init = two_nics) {
  static char buf[8192];
  void *h;
  eio_on = 1;
  cr_expect_eq(lp_mr_register(&cache, &env, NULL, 0, buf, sizeof(buf), NCCL_PTR_HOST, -1, 0, &h), ncclSystemError);
  cr_expect_null(h);
}

/* A comm on NIC 0, which died, and a buffer registered on NIC 1 only (as
 * above): irecv and isend take no request and ask for a progress call (the
 * move), and the comm may from now on go only where the buffer is.  Before,
 * both failed with ncclInvalidArgument ("not registered on mlx5_0").  A
 * handle without a key on a live NIC is still refused. */
static _Alignas(max_align_t) char some_fo; /* the comm has failover state (opaque here) */

static void comm_on_dead_nic(struct lp_comm *c, int kind) {
  memset(&health, 0, sizeof(health));
  c->fo = (struct lp_fo *)&some_fo;
  atomic_store(&health.fatal[0], 1);
  env.ndevs = 2;
  env.devs[1].nic = 1;
  c->magic = LP_COMM_MAGIC;
  c->kind = kind;
  c->env = &env;
  c->health = &health;
  c->mr_nics = 3u;
  c->link.dev = 0;
  c->link.nqps = 1;
  c->link.sq_free[0] = LP_SQ_DEPTH;
}

/* 4 KiB at 0x10000, registered on NIC 1 just now: NIC 0 was dead. */
static struct lp_mr registered_while_nic0_died(void) {
  return (struct lp_mr){.magic = LP_MR_MAGIC,
                        .addr = 0x10000,
                        .len = 4096,
                        .nics = 2u,
                        .dead_nics = 1u,
                        .made_ns = lp_now_ns(),
                        .mr = {NULL, &fake_mr[0]}};
}

Test(mr, irecv_on_a_dead_nic_waits_for_the_move, .init = two_nics) {
  struct lp_recv_comm *r = calloc(1, sizeof(*r));
  cr_assert_not_null(r);
  comm_on_dead_nic(&r->base, LP_COMM_RECV);
  r->tail = 1;
  struct lp_mr m = registered_while_nic0_died();
  void *data = (void *)0x10000, *mh = &m;
  size_t size = 4096;
  int tag = 1;
  struct lp_req *req = (void *)&req;
  cr_assert_eq(lp_recv_post(r, 1, &data, &size, &tag, &mh, &req), ncclSuccess);
  cr_expect_null(req, "no request until the comm has moved");
  cr_expect_eq(r->base.mr_nics, 2u, "the comm may go only where the buffer is registered");
  /* NIC 0 answered EIO at the registration; its fatal error is not read
   * yet, and its port still looks healthy. */
  atomic_store(&health.fatal[0], 0);
  atomic_store(&health.healthy[0], 1);
  cr_assert_eq(lp_recv_post(r, 1, &data, &size, &tag, &mh, &req), ncclSuccess);
  cr_expect_null(req, "waits for the fatal error that EIO announces");
  /* ... but not for ever: nothing would move the comm. */
  m.made_ns -= LP_MR_DEAD_WAIT_NS + 1;
  cr_expect_eq(lp_recv_post(r, 1, &data, &size, &tag, &mh, &req), ncclInvalidArgument, "an EIO never confirmed");
  atomic_store(&health.healthy[0], 0);
  cr_assert_eq(lp_recv_post(r, 1, &data, &size, &tag, &mh, &req), ncclSuccess, "its port's health confirms it");
  cr_expect_null(req);
  atomic_store(&health.healthy[0], 1);
  m.dead_nics = 0;
  cr_expect_eq(lp_recv_post(r, 1, &data, &size, &tag, &mh, &req), ncclInvalidArgument, "NIC 0 alive: a bad handle");
  /* A comm without failover state never moves: it does not wait. */
  m.dead_nics = 1u;
  m.made_ns = lp_now_ns();
  r->base.fo = NULL;
  cr_expect_eq(lp_recv_post(r, 1, &data, &size, &tag, &mh, &req), ncclInvalidArgument, "no failover state");
  free(r);
}

Test(mr, isend_on_a_dead_nic_waits_for_the_move, .init = two_nics) {
  struct lp_send_comm *s = calloc(1, sizeof(*s));
  struct lp_cts *fifo = calloc(LP_FIFO_DEPTH * LP_MAX_RECVS, sizeof(*fifo));
  cr_assert(s != NULL && fifo != NULL);
  comm_on_dead_nic(&s->base, LP_COMM_SEND);
  s->fifo = fifo;
  s->head = 1;
  /* The receiver's clear-to-send for message 1: one 4 KiB receive, tag 1. */
  fifo[lp_fifo_slot(1) * LP_MAX_RECVS] =
      (struct lp_cts){.addr = 0x20000, .size = 4096, .rkey = 7, .tag = 1, .idx = 0, .nreqs = 1, .seq = 1};
  struct lp_mr m = registered_while_nic0_died();
  struct lp_req *req = (void *)&req;
  int progress = 0;
  cr_assert_eq(lp_send_match(s, (void *)0x10000, 4096, 1, &m, &req, &progress), ncclSuccess);
  cr_expect_null(req, "no request until the comm has moved");
  cr_expect_eq(progress, 1, "a progress call moves it");
  cr_expect_eq(s->base.mr_nics, 2u, "the comm may go only where the buffer is registered");
  s->base.fo = NULL;
  cr_expect_eq(lp_send_match(s, (void *)0x10000, 4096, 1, &m, &req, &progress), ncclInvalidArgument,
               "no failover state: nothing to wait for");
  s->base.fo = (struct lp_fo *)&some_fo;
  m.dead_nics = 0;
  atomic_store(&health.fatal[0], 0);
  atomic_store(&health.healthy[0], 1);
  cr_expect_eq(lp_send_match(s, (void *)0x10000, 4096, 1, &m, &req, &progress), ncclInvalidArgument,
               "NIC 0 alive: a bad handle");
  free(fifo);
  free(s);
}

/* A registration refused for the memory a process may pin says what to
 * do about it, not only "Cannot allocate memory". */
Test(mr, a_registration_refused_for_the_pin_limit_says_what_to_do, .init = two_nics) {
  static char buf[8192];
  void *h;
  enomem_on = 1;
  lp_log_set_logger(lp_test_capture_warn);
  cr_expect_eq(lp_mr_register(&cache, &env, NULL, 0, buf, sizeof(buf), NCCL_PTR_HOST, -1, 0, &h), ncclSystemError);
  lp_log_set_logger(NULL);
  cr_expect(strstr(lp_test_warned, "ibv_reg_mr(mlx5_0, host memory") && strstr(lp_test_warned, "ulimit -l"), "%s",
            lp_test_warned);
}
