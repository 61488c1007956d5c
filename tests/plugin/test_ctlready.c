/* Which control sockets have news (ctlready.h): one epoll set, flags per comm. */
#include <criterion/criterion.h>
#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ctlready.h"

#define STEP (LP_CTL_READY_EVERY_NS + 1) /* past the process's look limit */

static void put(int fd) { cr_assert_eq(write(fd, "x", 1), 1); }
static void take(int fd) {
  char b[16];
  while (recv(fd, b, sizeof(b), MSG_DONTWAIT) > 0) {}
}

Test(ctlready, a_flag_goes_up_once_per_arrival_and_never_after_removal) {
  struct lp_ctl_ready r;
  int sv[2], other[2];
  cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, other), 0);
  cr_assert_eq(lp_ctl_ready_start(&r), 0);
  _Atomic int flag = 0, quiet = 0;
  cr_assert_eq(lp_ctl_ready_add(&r, sv[0], &flag), 0);
  cr_assert_eq(lp_ctl_ready_add(&r, other[0], &quiet), 0);
  uint64_t now = 1000000000ull;
  lp_ctl_ready_poll(&r, now += STEP);
  cr_expect_eq(flag, 0, "nothing came yet");
  put(sv[1]);
  lp_ctl_ready_poll(&r, now + 1);
  cr_expect_eq(flag, 0, "a look right after another does nothing (at most one per 50 us a process)");
  lp_ctl_ready_poll(&r, now += STEP);
  cr_expect_eq(flag, 1, "data came");
  cr_expect_eq(quiet, 0, "only on the socket it came on");
  flag = 0; /* the comm clears its flag, then reads until EAGAIN */
  take(sv[0]);
  lp_ctl_ready_poll(&r, now += STEP);
  cr_expect_eq(flag, 0, "edge-triggered: read, nothing new");
  put(sv[1]);
  lp_ctl_ready_poll(&r, now += STEP);
  cr_expect_eq(flag, 1, "new data raises it again");
  flag = 0; /* cleared but not read: the data stays, and no new edge comes */
  lp_ctl_ready_poll(&r, now += STEP);
  cr_expect_eq(flag, 0, "the comm that clears its flag must read to EAGAIN");
  lp_ctl_ready_remove(&r, sv[0]);
  put(sv[1]);
  lp_ctl_ready_poll(&r, now += STEP);
  cr_expect_eq(flag, 0, "a socket out of the set writes no flag (its comm may be freed)");
  close(sv[1]); /* the peer's end of file is news too */
  put(other[1]);
  close(other[1]);
  lp_ctl_ready_poll(&r, now += STEP);
  cr_expect_eq(quiet, 1, "data and end of file");
  lp_ctl_ready_stop(&r);
  cr_expect_eq(lp_ctl_ready_add(&r, sv[0], &flag), -ENODEV, "stopped: nothing joins");
  lp_ctl_ready_poll(&r, now += STEP); /* and a look does nothing */
  close(sv[0]);
  close(other[0]);
}
