/* How often a progress call reads the clock (progress.c), on comms built in
 * memory over a completion queue that hands out what the test says.  NCCL's
 * spin loop calls test() millions of times a second, and a clock read on
 * each was most of what linkpass added to the 8-byte latency.  A broken
 * cadence reads it on every call (the latency comes back), or never (the
 * watchdog and the looks between moves stop), or loses the completions an
 * unclocked call took (the watchdog takes a busy connection for stalled).
 *
 * This binary has its own clock_gettime, which takes libc's place for the
 * code linked into it: it moves 1 us a read, and counts the reads made
 * inside progress calls on the test's thread (Criterion reads it too). */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ctlready.h"
#include "failover.h"
#include "fifo.h"
#include "health.h"
#include "progress.h"

static int reads;
static _Thread_local int counting;
static uint64_t fake_ns = 1000000000ull;

int clock_gettime(clockid_t id, struct timespec *ts) {
  (void)id;
  reads += counting;
  fake_ns += 1000;
  ts->tv_sec = (time_t)(fake_ns / 1000000000ull);
  ts->tv_nsec = (long)(fake_ns % 1000000000ull);
  return 0;
}

/* The completion queue: empty, unless `cqe_at` names the poll (counted from
 * 1) that finds one clear-to-send completion. */
static int polls, cqe_at, cqe_kind = LP_WR_CTS;

static int fake_poll(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
  (void)cq;
  (void)n;
  if (++polls != cqe_at) return 0;
  memset(wc, 0, sizeof(*wc));
  wc->status = IBV_WC_SUCCESS;
  wc->wr_id = lp_wrid(cqe_kind, 0, 1, 1);
  return 1;
}

static struct ibv_context ctx;
static struct ibv_cq cq;
static struct lp_recv_comm r;
static struct lp_send_comm s;
static struct lp_cts fifo[LP_FIFO_DEPTH * LP_MAX_RECVS];

/* Failover off (no fo), the watchdog off, nothing posted. */
static void comms(void) {
  memset(&ctx, 0, sizeof(ctx));
  memset(&cq, 0, sizeof(cq));
  memset(&r, 0, sizeof(r));
  memset(&s, 0, sizeof(s));
  memset(fifo, 0, sizeof(fifo));
  ctx.ops.poll_cq = fake_poll;
  cq.context = &ctx;
  r.base.kind = LP_COMM_RECV;
  r.base.link.cq = &cq;
  r.base.link.nqps = 1;
  s.base.kind = LP_COMM_SEND;
  s.base.link.cq = &cq;
  s.base.link.nqps = 1;
  s.fifo = fifo;
  s.head = s.post_seq = 1;
  reads = polls = cqe_at = 0;
  cqe_kind = LP_WR_CTS;
}

TestSuite(progress_clock, .init = comms);

static ncclResult_t progress(struct lp_comm *c) {
  counting = 1;
  ncclResult_t rc = lp_comm_progress(c);
  counting = 0;
  return rc;
}

Test(progress_clock, a_comm_with_nothing_timed_reads_the_clock_once_in_16_calls) {
  for (int i = 0; i < 160; i++) cr_assert_eq(progress(&r.base), ncclSuccess);
  cr_assert_eq(polls, 160, "every call polls the completion queue");
  cr_assert_eq(reads, 10, "160 calls read the clock %d times, not 10", reads);
}

Test(progress_clock, a_sender_with_a_timed_message_out_reads_it_on_every_call) {
  s.base.metered = 1; /* a message of 64 KiB or more out: the meter sees every gap */
  for (int i = 0; i < 50; i++) cr_assert_eq(progress(&s.base), ncclSuccess);
  /* one read a call: the end of a call that took no completion is its start */
  cr_assert_eq(reads, 50, "50 calls read the clock %d times, not 50", reads);
  cr_assert_neq(s.base.progress_end_ns, 0, "the meter's end of the last call");
}

/* The meter's looks start at the post (send.c, meter): a timed message
 * that completes after the process was away since then leaves that gap out
 * (here a second), instead of counting it as the port's busy time. */
Test(progress_clock, a_timed_message_completed_after_a_gap_leaves_the_gap_out_at_once) {
  static struct lp_health health;
  memset(&health, 0, sizeof(health));
  s.base.health = &health;
  struct lp_send_msg *m = &s.msgs[lp_fifo_slot(1)];
  m->seq = 1;
  m->events = 1;
  m->metered = 1; /* device 0, + 1 */
  s.base.metered = 1;
  s.head = s.post_seq = 2;                          /* posted */
  s.base.progress_end_ns = fake_ns - 1000000000ull; /* the post, a second ago */
  cqe_kind = LP_WR_FINAL;
  cqe_at = 1;
  cr_assert_eq(progress(&s.base), ncclSuccess);
  cr_assert_eq(s.base.metered, 0, "the message completed");
  /* one read, by the call's start, which also stands for the message's end */
  cr_assert_eq(reads, 1, "the call read the clock %d times, not 1", reads);
  cr_assert_geq(atomic_load(&health.tx[0].unwatched_ns), 1000000000ull, "the gap was left out at this call");
  cr_assert_eq(s.base.progress_end_ns, 0, "nothing timed is out");
}

Test(progress_clock, a_completion_taken_without_the_clock_feeds_the_watchdog_at_the_next_read) {
  cqe_at = 3;
  for (int i = 0; i < 3; i++) cr_assert_eq(progress(&r.base), ncclSuccess);
  cr_assert_eq(reads, 0, "the call that took the completion read no clock");
  cr_assert_eq(r.base.wd.last_cqe_ns, 0);
  cr_assert_eq(r.base.link.sq_free[0], 1, "the completion was taken (its credit returned)");
  for (int i = 3; i < 16; i++) cr_assert_eq(progress(&r.base), ncclSuccess);
  cr_assert_eq(reads, 1);
  cr_assert_eq(r.base.wd.last_cqe_ns, r.base.progress_ns, "fed at the call that read the clock");
  cr_assert_neq(r.base.wd.last_cqe_ns, 0);
}

/* Failover on: a chore (here a standby path to offer) is paced work whose
 * turn comes at a look, and looks need the clock.  With every 16th call
 * only, standby paths at 1,024 connections took twice as long. */
Test(progress_clock, a_sender_with_a_standby_to_build_reads_it_on_every_call) {
  static struct lp_env env;
  static struct lp_health health;
  static struct lp_fo fo;
  memset(&env, 0, sizeof(env));
  memset(&health, 0, sizeof(health));
  memset(&fo, 0, sizeof(fo));
  env.cfg.standby = 1;
  fo.chores = 1;                                   /* as the first look finds it */
  fo.next_read_ns = fo.next_watch_ns = UINT64_MAX; /* no look due: only the cadence is tested */
  s.base.env = &env;
  s.base.health = &health;
  s.base.fo = &fo;
  for (int i = 0; i < 20; i++) cr_assert_eq(progress(&s.base), ncclSuccess);
  cr_assert_eq(reads, 20, "with the standby not built, 20 calls read the clock %d times", reads);
  fo.sb.state = LP_SB_READY; /* built, and the connection on its primary: nothing waits */
  reads = 0;
  for (int i = 0; i < 32; i++) cr_assert_eq(progress(&s.base), ncclSuccess);
  cr_assert_eq(reads, 2, "with it ready, 32 calls read the clock %d times, not 2", reads);
}

/* A request NCCL waits on also looks for a vanished peer: a peek at each
 * control connection (progress.c, lp_comm_check_peer).  Counted here on the
 * one socket the test names. */
static int peek_fd = -1, peeks;

ssize_t recv(int fd, void *buf, size_t len, int flags) {
  static ssize_t (*real)(int, void *, size_t, int);
  if (real == NULL) real = (ssize_t(*)(int, void *, size_t, int))dlsym(RTLD_NEXT, "recv");
  if (fd == peek_fd && (flags & MSG_PEEK)) peeks++;
  return real(fd, buf, len, flags);
}

/* The peeks made by lp_comm_check_peer at each time of `at` (ms). */
static int peeks_at(struct lp_comm *c, const int *at, int n) {
  peeks = 0;
  for (int i = 0; i < n; i++) {
    c->progress_ns = 5000000000ull + (uint64_t)at[i] * 1000000ull;
    cr_assert_eq(lp_comm_check_peer(c), ncclSuccess, "the peer is there");
  }
  return peeks;
}

/* Where the comm's own reads would see the peer go (every control socket is
 * in the process's set), the peek is a safety net once a second; without
 * the set every 100 ms; once the reads found the end of file, at once.  At
 * 1,024 connections a direction the looks every 100 ms were 41,000 system
 * calls a second on NCCL's thread. */
Test(progress_clock, a_waiting_request_looks_for_a_vanished_peer_once_a_second_where_reads_would_see_it) {
  int sv[2];
  cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  lp_ctl_init(&r.base.ctl);
  r.base.ctl.path[0].fd = peek_fd = sv[0];
  const int at[] = {0, 50, 100, 150, 200, 900, 1000, 1050, 2000};
  const int n = (int)(sizeof(at) / sizeof(at[0]));
  int k = peeks_at(&r.base, at, n);
  cr_expect_eq(k, 6, "failover off: %d looks, not 6 (0, 100, 200, 900, 1000 and 2000 ms)", k);
  static struct lp_fo fo;
  static struct lp_ctl_ready set;
  memset(&fo, 0, sizeof(fo));
  fo.ready = &set;
  fo.ready_all = 1;
  r.base.fo = &fo;
  r.base.peer_check_ns = 0;
  k = peeks_at(&r.base, at, n);
  cr_expect_eq(k, 3, "every socket in the set: %d looks, not 3 (0, 1000 and 2000 ms)", k);
  fo.ready_all = 0; /* a connection made again, not in the set yet */
  r.base.peer_check_ns = 0;
  k = peeks_at(&r.base, at, n);
  cr_expect_eq(k, 6, "a socket outside the set: %d looks, not 6 (every 100 ms again)", k);
  /* The comm's own read finds the end of file, 10 ms after the last look:
   * the check right after it looks at once and finds the peer gone. */
  static struct lp_env env;
  static struct lp_health health;
  memset(&env, 0, sizeof(env));
  memset(&health, 0, sizeof(health));
  r.base.env = &env;
  r.base.health = &health;
  fo.ready_all = 1;
  cr_assert_eq(lp_ctl_start(&r.base.ctl, 0), 0);
  cr_assert_eq(peeks_at(&r.base, (const int[]){3000}, 1), 1);
  close(sv[1]);
  r.base.progress_ns += 10000000ull;
  cr_assert_eq(lp_fo_progress(&r.base, r.base.progress_ns), ncclSuccess);
  cr_assert(fo.peer_closed, "the read found the end of file");
  cr_expect_eq(lp_comm_check_peer(&r.base), ncclRemoteError, "the check waited for its next look");
  r.base.fo = NULL;
  lp_ctl_close(&r.base.ctl); /* closes sv[0] */
  peek_fd = -1;
}
