/* iflush when a flush path cannot take its read at once (recv.c, flush.c).
 * A read through a path that is broken, with reads of an earlier flush
 * still to reap, has to wait for the path's rebuild.  The flush used to
 * count such a read as made: iflush handed NCCL "done" (no request) with
 * no read behind it, so the GPU could use data still on its way, and
 * nothing said so.  The flush must hold its request until the read is
 * posted and completes; a device through which no read can be made at all
 * is dropped (flush.c warns).
 *
 * Its own binary: it defines the flush paths (lp_flush_post, _poll,
 * _close), so flush.c is not linked and each path does what a test says,
 * and clock_gettime, which takes libc's place for the code linked into it:
 * time moves only when a test moves it. */
#include <criterion/criterion.h>
#include <string.h>
#include <time.h>

#include "comm.h"
#include "env.h"
#include "mr.h"
#include "recv.h"

static uint64_t fake_ns = 1000000000ull;

int clock_gettime(clockid_t id, struct timespec *ts) {
  (void)id;
  ts->tv_sec = (time_t)(fake_ns / 1000000000ull);
  ts->tv_nsec = (long)(fake_ns % 1000000000ull);
  return 0;
}

enum answer { POST, LATER, FAIL };

static struct {
  enum answer answer[LP_MAX_DEVS]; /* what a post through each device does */
  int posted[LP_MAX_DEVS];         /* reads posted through each device */
  int *reads[16];                  /* the counters of the reads not yet completed */
  int nreads;
  uint64_t addr[16];
} fake;

ncclResult_t lp_flush_post(struct lp_flush *f, const struct lp_env *env, int dev, uint64_t addr, uint32_t rkey,
                           int *reads) {
  (void)f;
  (void)env;
  (void)rkey;
  if (fake.answer[dev] == LATER) return ncclInProgress;
  if (fake.answer[dev] == FAIL) return ncclSystemError;
  fake.posted[dev]++;
  fake.addr[fake.nreads] = addr;
  fake.reads[fake.nreads++] = reads;
  (*reads)++;
  return ncclSuccess;
}

/* Every read posted so far completes at the next poll. */
void lp_flush_poll(struct lp_flush *f) {
  (void)f;
  for (int i = 0; i < fake.nreads; i++) (*fake.reads[i])--;
  fake.nreads = 0;
}

void lp_flush_close(struct lp_flush *f) { (void)f; }

static struct lp_env env;
static struct lp_recv_comm r;
static struct lp_mr mh;
static struct ibv_mr nic_mr[2];
static char buffer[64];

/* A receiver on device 0 of two (one NIC each), failover off (no health),
 * its buffer registered on both NICs, which both delivered data. */
static void receiver(void) {
  memset(&fake, 0, sizeof(fake));
  memset(&env, 0, sizeof(env));
  memset(&r, 0, sizeof(r));
  memset(&mh, 0, sizeof(mh));
  env.ndevs = 2;
  env.devs[0].nic = 0;
  env.devs[1].nic = 1;
  r.base.kind = LP_COMM_RECV;
  r.base.env = &env;
  r.base.link.dev = 0;
  mh.magic = LP_MR_MAGIC;
  mh.type = NCCL_PTR_CUDA;
  mh.nics = 3;
  mh.mr[0] = &nic_mr[0];
  mh.mr[1] = &nic_mr[1];
  r.flush_devs = 3;
}

/* test() of a flush request, as calls.c runs it. */
static int flush_done(struct lp_req *req) {
  lp_recv_flush_test(&r, req);
  return req->done;
}

Test(flush, a_read_that_must_wait_for_its_path_holds_the_flush_until_it_is_made) {
  receiver();
  fake.answer[1] = LATER; /* device 1's path is broken, reads still to reap */
  struct lp_req *req = NULL;
  cr_assert_eq(lp_recv_flush(&r, buffer, &mh, &req), ncclSuccess);
  cr_assert_not_null(req, "iflush said done while the read through device 1 was not made");
  cr_assert_eq(fake.posted[0], 1);
  cr_assert_eq(fake.posted[1], 0);
  for (int i = 0; i < 3; i++) cr_assert_not(flush_done(req), "the flush completed with no read through device 1");
  fake.answer[1] = POST; /* the path is rebuilt */
  cr_assert_not(flush_done(req), "the flush completed before its late read did");
  cr_assert_eq(fake.posted[1], 1, "the read through device 1 was never posted");
  cr_assert_eq(fake.addr[0], (uint64_t)(uintptr_t)buffer, "the late read reads another address");
  cr_assert(flush_done(req));
  cr_assert_eq(r.flush_devs, 0);
}

Test(flush, a_device_through_which_no_read_can_be_made_is_not_waited_for) {
  receiver();
  fake.answer[1] = FAIL;
  struct lp_req *req = NULL;
  cr_assert_eq(lp_recv_flush(&r, buffer, &mh, &req), ncclSuccess);
  cr_assert_not_null(req);
  cr_assert(flush_done(req), "the flush waits for a read that can never be made");
  cr_assert_eq(fake.posted[0], 1);
}

Test(flush, a_flush_with_every_read_refused_is_done_at_once) {
  receiver();
  fake.answer[0] = fake.answer[1] = FAIL;
  struct lp_req *req = (struct lp_req *)&req;
  cr_assert_eq(lp_recv_flush(&r, buffer, &mh, &req), ncclSuccess);
  cr_assert_null(req);
}

Test(flush, with_no_device_noted_the_current_one_is_read) {
  receiver();
  r.flush_devs = 0;
  r.base.link.dev = 1;
  struct lp_req *req = NULL;
  cr_assert_eq(lp_recv_flush(&r, buffer, &mh, &req), ncclSuccess);
  cr_assert_not_null(req);
  cr_assert_eq(fake.posted[0], 0);
  cr_assert_eq(fake.posted[1], 1);
  cr_assert(flush_done(req));
}

Test(flush, a_path_that_is_never_rebuilt_holds_the_flush_one_second_at_most) {
  receiver();
  fake.answer[1] = LATER; /* its broken QP's reads never come back */
  struct lp_req *req = NULL;
  cr_assert_eq(lp_recv_flush(&r, buffer, &mh, &req), ncclSuccess);
  cr_assert_not_null(req);
  fake_ns += 999ull * 1000 * 1000;
  cr_assert_not(flush_done(req), "the flush gave up on device 1 before 1 s");
  fake_ns += 2ull * 1000 * 1000;
  cr_assert(flush_done(req), "the flush waits for good for a path that is never rebuilt");
  cr_assert_eq(fake.posted[1], 0);
}
