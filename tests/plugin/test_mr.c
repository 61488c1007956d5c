/* The registration cache (mr.c): on which NICs a registration is made,
 * against a fake verbs table that records each ibv_reg_mr. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "env.h"
#include "mr.h"

static struct ibv_pd fake_pd[2];
static struct ibv_mr fake_mr[8];
static int nreg;

static struct ibv_mr *fake_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) {
  (void)access;
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
