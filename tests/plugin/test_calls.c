/* NCCL's calls on a connection (calls.c) where they must not wait. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "comm.h"
#include "linkpass.h"

/* A flush with nothing to read returns at once, even while the idle watch
 * holds the comm for a move (in_call set: NCCL's proxy thread would spin
 * until the move ended, as it did before iflush decided that first). */
Test(calls, iflush_with_nothing_to_read_does_not_wait_for_a_held_comm, .timeout = 10) {
  static struct lp_env env;
  struct lp_recv_comm *r = calloc(1, sizeof(*r));
  cr_assert_not_null(r);
  r->base.magic = LP_COMM_MAGIC;
  r->base.kind = LP_COMM_RECV;
  r->base.env = &env;
  atomic_store(&r->base.in_call, 1); /* the idle watch is in it */
  struct lp_mr host = {.magic = LP_MR_MAGIC, .type = NCCL_PTR_HOST};
  struct lp_mr gpu = {.magic = LP_MR_MAGIC, .type = NCCL_PTR_CUDA};
  char buf[8];
  void *data[2] = {buf, buf}, *mh[2] = {&host, &host}, *req = &req;
  int sizes[2] = {8, 8}, none[2] = {0, 0};
  cr_assert_eq(lp_iflush(r, 2, data, sizes, mh, &req), ncclSuccess);
  cr_assert_null(req);
  mh[1] = &gpu;
  cr_assert_eq(lp_iflush(r, 2, data, none, mh, &req), ncclSuccess, "no receive holds data");
  cr_assert_null(req);
  env.cfg.gdr_flush_disable = 1;
  cr_assert_eq(lp_iflush(r, 2, data, sizes, mh, &req), ncclSuccess, "NCCL_GDR_FLUSH_DISABLE=1");
  cr_assert_null(req);
  free(r);
}
