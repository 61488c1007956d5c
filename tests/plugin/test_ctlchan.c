/* The control channel over two connections (ctlchan.h): every message is
 * delivered once and in order, whichever connection brings it, and the
 * channel goes on when one connection fails. */
#define _GNU_SOURCE /* RTLD_NEXT */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ctlchan.h"
#include "fo_wire.h"
#include "../lib/tcp_pair.h"

/* recv() on the fd watched here is counted (the others pass through
 * uncounted): what a message costs in system calls. */
static int counted_fd = -1;
static int recv_calls;

ssize_t recv(int fd, void *buf, size_t len, int flags) {
  static ssize_t (*real)(int, void *, size_t, int);
  if (real == NULL) real = (ssize_t(*)(int, void *, size_t, int))dlsym(RTLD_NEXT, "recv");
  if (fd == counted_fd) recv_calls++;
  return real(fd, buf, len, flags);
}

/* A sender and a receiver joined by one or two socket pairs. */
struct ends {
  struct lp_ctl tx, rx;
  int far[LP_CTL_PATHS]; /* the sender's fds, also kept here to cut them */
};

/* Close with a reset, as a host whose TCP gave the connection up. */
static void reset(int *fd) {
  struct linger lg = {.l_onoff = 1, .l_linger = 0};
  setsockopt(*fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  close(*fd);
  *fd = -1;
}

static void setup(struct ends *e, int paths) {
  lp_ctl_init(&e->tx);
  lp_ctl_init(&e->rx);
  for (int i = 0; i < paths; i++) {
    int sv[2];
    tcp_pair(sv);
    e->tx.path[i].fd = e->far[i] = sv[0];
    e->rx.path[i].fd = sv[1];
  }
  cr_assert_eq(lp_ctl_start(&e->tx, 0), 0);
  cr_assert_eq(lp_ctl_start(&e->rx, 1), 0);
}

static void teardown(struct ends *e) {
  lp_ctl_close(&e->tx);
  lp_ctl_close(&e->rx);
}

static int send_notice(struct ends *e, uint32_t epoch) {
  struct lp_fo_notice n;
  memset(&n, 0, sizeof(n));
  lp_msg_hdr_init(&n.hdr, (enum lp_msg_type)LP_MSG_FO_NOTICE, sizeof(n));
  n.conn_id = 7;
  n.epoch = epoch;
  return lp_ctl_send(&e->tx, "peer", &n, sizeof(n));
}

/* Every message the receiver has now: their epochs in *epochs; returns
 * how many, or the channel's error. */
static int receive_all(struct ends *e, uint32_t *epochs, int max) {
  int n = 0;
  for (;;) {
    const void *msg;
    size_t len;
    int rc = lp_ctl_recv(&e->rx, "peer", &msg, &len);
    if (rc < 0) return rc;
    if (rc == 0) return n;
    cr_assert_eq(len, sizeof(struct lp_fo_notice));
    cr_assert_lt(n, max, "more messages than were sent");
    epochs[n++] = ((const struct lp_fo_notice *)msg)->epoch;
  }
}

Test(ctlchan, every_message_once_over_two_connections) {
  struct ends e;
  setup(&e, 2);
  for (uint32_t i = 0; i < 10; i++) cr_assert_eq(send_notice(&e, i), 0);
  uint32_t got[20];
  cr_assert_eq(receive_all(&e, got, 20), 10, "each message must be delivered once");
  for (uint32_t i = 0; i < 10; i++) cr_expect_eq(got[i], i, "message %u out of order", i);
  cr_expect_eq(lp_ctl_live(&e.rx), 2);
  teardown(&e);
}

Test(ctlchan, the_sender_goes_on_when_one_connection_fails) {
  struct ends e;
  setup(&e, 2);
  for (uint32_t i = 0; i < 3; i++) cr_assert_eq(send_notice(&e, i), 0);
  reset(&e.rx.path[0].fd); /* the first connection dies, reset by the receiving host */
  for (uint32_t i = 3; i < 6; i++) cr_assert_eq(send_notice(&e, i), 0, "a channel with one connection left failed");
  cr_expect_eq(lp_ctl_live(&e.tx), 1, "the sender still uses the dead connection");
  uint32_t got[20];
  cr_assert_eq(receive_all(&e, got, 20), 6);
  for (uint32_t i = 0; i < 6; i++) cr_expect_eq(got[i], i);
  teardown(&e);
}

Test(ctlchan, the_receiver_goes_on_when_one_connection_fails) {
  struct ends e;
  setup(&e, 2);
  for (uint32_t i = 0; i < 3; i++) cr_assert_eq(send_notice(&e, i), 0);
  reset(&e.tx.path[0].fd); /* reset by the sending host */
  int err;
  cr_expect_eq(lp_ctl_peer_gone(&e.rx, "peer", &err), 0, "one connection left is not a peer gone");
  for (uint32_t i = 3; i < 6; i++) cr_assert_eq(send_notice(&e, i), 0);
  uint32_t got[20];
  cr_assert_eq(receive_all(&e, got, 20), 6);
  for (uint32_t i = 0; i < 6; i++) cr_expect_eq(got[i], i);
  cr_expect_eq(lp_ctl_live(&e.rx), 1, "the receiver still reads the dead connection");
  cr_expect_eq(lp_ctl_peer_gone(&e.rx, "peer", &err), 0, "one connection left is not a peer gone");
  teardown(&e);
}

Test(ctlchan, the_peer_closing_one_connection_ends_the_channel) {
  struct ends e;
  setup(&e, 2);
  close(e.far[0]); /* a peer closes only when its comm goes: all of them */
  e.tx.path[0].fd = -1;
  int err = 1;
  cr_expect_eq(lp_ctl_peer_gone(&e.rx, "peer", &err), 1);
  cr_expect_eq(err, 0, "a close is no error");
  cr_expect_eq(lp_ctl_live(&e.rx), 0);
  teardown(&e);
}

Test(ctlchan, garbage_or_a_gap_gives_one_connection_up) {
  struct ends e;
  setup(&e, 2);
  struct lp_msg_hdr junk = {.magic = 0x41414141, .length = 16};
  cr_assert_eq(write(e.far[0], &junk, sizeof(junk)), (ssize_t)sizeof(junk));
  struct lp_fo_notice ahead;
  memset(&ahead, 0, sizeof(ahead));
  lp_msg_hdr_init(&ahead.hdr, (enum lp_msg_type)LP_MSG_FO_NOTICE, sizeof(ahead));
  ahead.hdr.reserved = 5; /* message 5 where 0 is due: the connection lost some */
  cr_assert_eq(write(e.far[1], &ahead, sizeof(ahead)), (ssize_t)sizeof(ahead));
  uint32_t got[4];
  cr_expect_eq(receive_all(&e, got, 4), -EPROTO, "the channel must fail once both connections are given up");
  cr_expect_eq(lp_ctl_live(&e.rx), 0);
  int err;
  cr_expect_eq(lp_ctl_peer_gone(&e.rx, "peer", &err), 1);
  teardown(&e);
}

Test(ctlchan, the_last_connection_closed_is_the_peer_gone) {
  struct ends e;
  setup(&e, 1);
  cr_assert_eq(send_notice(&e, 1), 0);
  close(e.far[0]);
  e.tx.path[0].fd = -1;
  int err = 1;
  cr_expect_eq(lp_ctl_peer_gone(&e.rx, "peer", &err), 0, "a message still to read is no peer gone");
  uint32_t got[4];
  cr_expect_eq(receive_all(&e, got, 4), -EPIPE, "the message, then the end");
  cr_expect_eq(got[0], 1u);
  teardown(&e);
}

Test(ctlchan, a_connection_that_takes_nothing_is_given_up) {
  struct ends e;
  setup(&e, 2);
  /* The receiver never reads the first connection; the test reads the
   * second, as a live peer would. */
  static uint8_t ack[LP_FO_MSG_MAX];
  memset(ack, 0, sizeof(ack));
  lp_msg_hdr_init((struct lp_msg_hdr *)ack, (enum lp_msg_type)LP_MSG_FO_ACK, sizeof(ack));
  int sends = 0;
  while (lp_ctl_path_live(&e.tx, 0) && sends < 1000) {
    cr_assert_eq(lp_ctl_send(&e.tx, "peer", ack, sizeof(ack)), 0);
    sends++;
    static uint8_t sink[LP_FO_MSG_MAX];
    while (recv(e.rx.path[1].fd, sink, sizeof(sink), MSG_DONTWAIT) > 0) {}
  }
  cr_expect(!lp_ctl_path_live(&e.tx, 0), "a connection whose peer never reads was kept for %d messages", sends);
  cr_expect(lp_ctl_path_live(&e.tx, 1));
  cr_expect_eq(e.tx.last_err, -ENOBUFS);
  teardown(&e);
}

/* ---- connections made again ---- */

#define STEP_NS 100000000ull /* 100 ms of the channel's clock a round */

/* Both ends read what came (the receiver's messages into got[], counted in
 * *ngot) and tick, `rounds` times, the clock going on by STEP_NS a round;
 * stops early once both ends use `want` connections. */
static void pump(struct ends *e, uint64_t *now, int rounds, int want, uint32_t *got, int *ngot, int max) {
  for (int k = 0; k < rounds; k++) {
    const void *msg;
    size_t len;
    while (lp_ctl_recv(&e->tx, "peer", &msg, &len) == 1) cr_assert_fail("the sender got a message");
    while (lp_ctl_recv(&e->rx, "peer", &msg, &len) == 1) {
      cr_assert_lt(*ngot, max, "more messages than were sent");
      got[(*ngot)++] = ((const struct lp_fo_notice *)msg)->epoch;
    }
    lp_ctl_tick(&e->tx, "peer", *now);
    lp_ctl_tick(&e->rx, "peer", *now);
    if (lp_ctl_live(&e->tx) == want && lp_ctl_live(&e->rx) == want) return;
    *now += STEP_NS;
  }
}

static void garbage_on(int fd) {
  struct lp_msg_hdr junk = {.magic = 0x41414141, .length = 16};
  cr_assert_eq(write(fd, &junk, sizeof(junk)), (ssize_t)sizeof(junk));
}

Test(ctlchan, a_connection_given_up_is_made_again_and_carries_the_channel) {
  struct ends e;
  setup(&e, 2);
  uint64_t now = 1000 * STEP_NS;
  uint32_t got[32];
  int n = 0;
  for (uint32_t i = 0; i < 3; i++) cr_assert_eq(send_notice(&e, i), 0);
  garbage_on(e.far[0]); /* the receiver gives the first connection up */
  pump(&e, &now, 1, 2, got, &n, 32);
  cr_assert_eq(lp_ctl_live(&e.rx), 1);
  pump(&e, &now, 5, 1, got, &n, 32);
  cr_expect_eq(lp_ctl_live(&e.tx), 1, "the sender must give it up on the receiver's DROP");
  uint64_t t0 = now;
  pump(&e, &now, 100, 2, got, &n, 32);
  cr_assert_eq(lp_ctl_live(&e.tx), 2, "the sender did not make the connection again");
  cr_assert_eq(lp_ctl_live(&e.rx), 2, "the receiver did not make the connection again");
  cr_expect_leq(now - t0, 12 * STEP_NS, "made again %llu ms after the failure, not about 1 s",
                (unsigned long long)((now - t0) / 1000000ull));
  cr_expect_eq(e.tx.path[0].gen, 1u);
  cr_expect_eq(e.rx.path[0].gen, 1u);
  cr_expect_eq(e.tx.nspent, 1);
  cr_expect_neq(e.tx.path[0].fd, e.far[0], "still the old connection");
  /* A stale DROP (about the connection given up) changes nothing. */
  struct lp_ctl_drop d;
  memset(&d, 0, sizeof(d));
  lp_msg_hdr_init(&d.hdr, (enum lp_msg_type)LP_MSG_CTL_DROP, sizeof(d));
  d.path = 0;
  d.gen = 0;
  cr_assert_eq(write(e.far[1], &d, sizeof(d)), (ssize_t)sizeof(d));
  for (uint32_t i = 3; i < 6; i++) cr_assert_eq(send_notice(&e, i), 0);
  pump(&e, &now, 3, 3, got, &n, 32);
  cr_expect_eq(lp_ctl_live(&e.rx), 2, "a stale DROP gave a connection made again up");
  garbage_on(e.far[1]); /* now the second one: the one made again must carry the channel */
  for (uint32_t i = 6; i < 9; i++) cr_assert_eq(send_notice(&e, i), 0);
  pump(&e, &now, 5, 3, got, &n, 32);
  cr_assert_eq(n, 9, "each message must be delivered once, %d were", n);
  for (uint32_t i = 0; i < 9; i++) cr_expect_eq(got[i], i, "message %u out of order", i);
  cr_expect_eq(lp_ctl_live(&e.rx), 1);
  cr_expect(lp_ctl_path_live(&e.rx, 0), "the connection made again was given up");
  teardown(&e);
}

/* A JOIN that reached the listener after it stopped waiting for it
 * (connect.c): the connector made its second connection and sends on it,
 * the listener never took it (its end sits unread).  Told at the
 * listener's first tick, the connector gives it up; both ends then go on
 * over one, as when a JOIN never comes, and neither offers it again.
 * Before, the connector counted on two connections for good. */
Test(ctlchan, a_second_connection_the_listener_did_not_take_is_given_up_at_both_ends) {
  struct ends e;
  int sv[2], late[2];
  lp_ctl_init(&e.tx);
  lp_ctl_init(&e.rx);
  tcp_pair(sv);
  tcp_pair(late);
  e.tx.path[0].fd = e.far[0] = sv[0];
  e.rx.path[0].fd = sv[1];
  e.tx.path[1].fd = e.far[1] = late[0];
  lp_ctl_not_taken(&e.rx, 1);
  cr_assert_eq(lp_ctl_start(&e.tx, 0), 0);
  cr_assert_eq(lp_ctl_start(&e.rx, 1), 0);
  cr_assert_eq(lp_ctl_live(&e.tx), 2);
  cr_assert_eq(lp_ctl_live(&e.rx), 1);
  uint64_t now = 1000 * STEP_NS;
  uint32_t got[8];
  int n = 0;
  for (uint32_t i = 0; i < 3; i++) cr_assert_eq(send_notice(&e, i), 0);
  pump(&e, &now, 5, 1, got, &n, 8);
  cr_assert_eq(lp_ctl_live(&e.tx), 1, "the connector still counts on a connection the listener never read");
  cr_expect(lp_ctl_path_live(&e.tx, 0), "the connector gave the wrong connection up");
  pump(&e, &now, 50, 2, got, &n, 8); /* 5 s: past any offer's first try */
  cr_expect_eq(lp_ctl_live(&e.tx), 1);
  cr_expect_eq(lp_ctl_live(&e.rx), 1);
  cr_expect_eq(e.rx.rm.path, -1, "the listener offers a connection it never had");
  for (uint32_t i = 3; i < 6; i++) cr_assert_eq(send_notice(&e, i), 0, "the channel failed with one connection left");
  pump(&e, &now, 3, 0, got, &n, 8);
  cr_assert_eq(n, 6, "each message must be delivered once, %d were", n);
  for (uint32_t i = 0; i < 6; i++) cr_expect_eq(got[i], i, "message %u out of order", i);
  close(late[1]);
  teardown(&e);
}

Test(ctlchan, an_offer_not_taken_is_made_again_later) {
  struct ends e;
  setup(&e, 2);
  uint64_t now = 1000 * STEP_NS;
  garbage_on(e.far[0]);
  const void *msg;
  size_t len;
  cr_assert_eq(lp_ctl_recv(&e.rx, "peer", &msg, &len), 0);
  /* The sender is not called (NCCL computes): the offer goes unanswered. */
  for (int k = 0; k < 40; k++, now += STEP_NS) lp_ctl_tick(&e.rx, "peer", now);
  cr_expect_eq(lp_ctl_live(&e.rx), 1);
  cr_expect_eq(e.rx.rm.path, -1, "an attempt is still open past its %llu ms",
               (unsigned long long)(LP_CTL_REMAKE_WAIT_NS / 1000000ull));
  cr_expect_eq(e.rx.rm.backoff_ns, 2000000000ull, "the next try must wait twice as long");
  uint32_t got[4];
  int n = 0;
  pump(&e, &now, 100, 2, got, &n, 4);
  cr_expect_eq(lp_ctl_live(&e.tx), 2, "made again once the sender answers");
  cr_expect_eq(lp_ctl_live(&e.rx), 2);
  teardown(&e);
}

/* The sender (the dialing end) takes the connection made again once its
 * REJOIN is out; the receiver only once it reads it.  An attempt the
 * receiver gives up in between (here: its listener reset before it
 * accepted) left the sender a generation ahead, and every later offer
 * looked stale to it: the connection was never made again. */
Test(ctlchan, an_attempt_the_listener_gives_up_after_the_rejoin_is_made_again) {
  struct ends e;
  setup(&e, 2);
  uint64_t now = 1000 * STEP_NS;
  const void *msg;
  size_t len;
  garbage_on(e.far[0]);
  cr_assert_eq(lp_ctl_recv(&e.rx, "peer", &msg, &len), 0);
  for (int k = 0; k < 40 && e.tx.path[0].gen == 0; k++, now += STEP_NS) {
    lp_ctl_tick(&e.rx, "peer", now); /* DROP, then the offer; it does not accept yet */
    if (e.rx.rm.path < 0) continue;
    while (lp_ctl_recv(&e.tx, "peer", &msg, &len) == 1) cr_assert_fail("the sender got a message");
    lp_ctl_tick(&e.tx, "peer", now);
  }
  cr_assert_eq(e.tx.path[0].gen, 1u, "the sender did not take the offer");
  cr_assert_eq(e.rx.path[0].gen, 0u);
  reset(&e.rx.rm.fd); /* the receiver's attempt fails before it read the REJOIN */
  uint32_t got[4];
  int n = 0;
  pump(&e, &now, 400, 2, got, &n, 4);
  cr_assert_eq(lp_ctl_live(&e.rx), 2, "the receiver never made the connection again");
  cr_assert_eq(lp_ctl_live(&e.tx), 2, "the sender never made the connection again");
  cr_expect_eq(e.tx.path[0].gen, e.rx.path[0].gen, "the ends disagree on the connection's generation");
  for (uint32_t i = 0; i < 3; i++) cr_assert_eq(send_notice(&e, i), 0);
  garbage_on(e.far[1]); /* the one made again must carry the channel */
  pump(&e, &now, 5, 1, got, &n, 4);
  cr_assert_eq(n, 3, "%d of 3 messages over the connection made again", n);
  teardown(&e);
}

Test(ctlchan, a_message_ahead_on_one_connection_waits_for_the_other) {
  struct ends e;
  setup(&e, 2);
  struct lp_fo_notice m;
  memset(&m, 0, sizeof(m));
  lp_msg_hdr_init(&m.hdr, (enum lp_msg_type)LP_MSG_FO_NOTICE, sizeof(m));
  m.conn_id = 7;
  /* A connection made again starts where its sender stands: message 1. */
  m.hdr.reserved = m.epoch = 1;
  cr_assert_eq(write(e.far[1], &m, sizeof(m)), (ssize_t)sizeof(m));
  uint32_t got[4];
  cr_assert_eq(receive_all(&e, got, 4), 0, "message 1 must wait for message 0");
  cr_expect_eq(lp_ctl_live(&e.rx), 2, "a message ahead gave its connection up");
  for (uint32_t s = 0; s < 2; s++) {
    m.hdr.reserved = m.epoch = s;
    cr_assert_eq(write(e.far[0], &m, sizeof(m)), (ssize_t)sizeof(m));
  }
  cr_assert_eq(receive_all(&e, got, 4), 2);
  cr_expect_eq(got[0], 0u);
  cr_expect_eq(got[1], 1u);
  cr_expect_eq(lp_ctl_live(&e.rx), 2);
  teardown(&e);
}

Test(ctlchan, a_message_costs_one_read_on_each_connection) {
  struct ends e;
  setup(&e, 2);
  uint32_t got[4];
  for (int i = 0; i < LP_CTL_PATHS; i++) {
    counted_fd = e.rx.path[i].fd;
    recv_calls = 0;
    cr_assert_eq(send_notice(&e, (uint32_t)i), 0);
    cr_assert_eq(receive_all(&e, got, 4), 1);
    /* The message and the empty read that ends the pass; a header, a body
     * and the empty read were three. */
    cr_expect_eq(recv_calls, 2, "connection %d: %d reads for one message (or its copy)", i, recv_calls);
  }
  counted_fd = -1;
  teardown(&e);
}

Test(ctlchan, messages_cut_anywhere_by_the_stream_come_whole_and_in_order) {
  struct ends e;
  setup(&e, 1);
  enum { N = 40 };
  struct lp_fo_notice m[N];
  memset(m, 0, sizeof(m));
  for (uint32_t s = 0; s < N; s++) {
    lp_msg_hdr_init(&m[s].hdr, (enum lp_msg_type)LP_MSG_FO_NOTICE, sizeof(m[s]));
    m[s].conn_id = 7;
    m[s].hdr.reserved = m[s].epoch = s;
  }
  /* 7 bytes at a time (never a whole header), then the rest at once (more
   * than the receive buffer holds), with reads between. */
  const uint8_t *bytes = (const uint8_t *)m;
  size_t total = sizeof(m), off = 0;
  uint32_t got[N + 1];
  int n = 0;
  while (off < total) {
    size_t chunk = off < 3 * sizeof(m[0]) ? 7 : total - off;
    if (chunk > total - off) chunk = total - off;
    cr_assert_eq(write(e.far[0], bytes + off, chunk), (ssize_t)chunk);
    off += chunk;
    int r = receive_all(&e, got + n, N + 1 - n);
    cr_assert_geq(r, 0);
    n += r;
  }
  for (int tries = 0; n < N && tries < 1000; tries++) {
    int r = receive_all(&e, got + n, N + 1 - n);
    cr_assert_geq(r, 0);
    n += r;
  }
  cr_assert_eq(n, N, "%d messages of %d", n, N);
  for (uint32_t s = 0; s < N; s++) cr_expect_eq(got[s], s, "message %u out of order", s);
  cr_expect_eq(lp_ctl_live(&e.rx), 1);
  teardown(&e);
}

/* Whether the page holding `p` is in this process's page table
 * (/proc/self/pagemap: bit 63 of the page's entry). */
static int page_present(const void *p) {
  int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  cr_assert_geq(fd, 0, "cannot open /proc/self/pagemap: %s", strerror(errno));
  uint64_t e = 0;
  long page = sysconf(_SC_PAGESIZE);
  ssize_t n = pread(fd, &e, sizeof(e), (off_t)((uintptr_t)p / (uintptr_t)page * sizeof(e)));
  close(fd);
  cr_assert_eq(n, (ssize_t)sizeof(e));
  return (int)(e >> 63);
}

/* A move's messages (under 4 KiB) are written and read where the buffers
 * start, on pages faulted in at start: not by the first message that
 * crosses into them, at a failover, in the middle of a sweep of thousands
 * of moves (docs/SCALE.md). */
Test(ctlchan, the_start_of_every_buffer_is_faulted_in_at_start) {
  struct ends e;
  setup(&e, 2);
  struct lp_ctl *chans[2] = {&e.tx, &e.rx};
  for (int c = 0; c < 2; c++)
    for (int i = 0; i < 2; i++) {
      const struct lp_ctl_path *p = &chans[c]->path[i];
      for (int off = 0; off < 4096; off += 512) {
        cr_assert(page_present(p->rx + off), "%s path %d: the receive buffer's byte %d is not faulted in",
                  c ? "receiver" : "sender", i, off);
        cr_assert(page_present(p->tx + off), "%s path %d: the send buffer's byte %d is not faulted in",
                  c ? "receiver" : "sender", i, off);
      }
    }
  teardown(&e);
}

/* Why a connection ended, as the errors say it: a closed connection, a
 * reset and TCP's timeout are three causes, not one "closed or timed out"
 * (a silent host was reported as the peer having closed the connection). */
Test(ctlchan, each_end_of_a_connection_is_said_as_what_it_was) {
  cr_expect(strstr(lp_ctl_err_str(0), "the peer closed it"));
  cr_expect(strstr(lp_ctl_err_str(-EPIPE), "the peer closed it"));
  cr_expect(strstr(lp_ctl_err_str(-ECONNRESET), "the peer reset it"));
  const char *t = lp_ctl_err_str(-ETIMEDOUT);
  cr_expect(strstr(t, "Connection timed out") && strstr(t, "host is down or frozen") && !strstr(t, "closed"), "%s", t);
  cr_expect(strstr(lp_ctl_err_str(-ENOBUFS), "does not read"));
  cr_expect(strstr(lp_ctl_err_str(-EPROTO), "garbage"));
  cr_expect_str_eq(lp_ctl_err_str(-EACCES), strerror(EACCES));
}

/* A comm closed with a message still unread on its control connections (a
 * standby's offer that crossed the close, say) ends them as a close does:
 * the peer reads an end of file, not a reset, which it takes for a process
 * that died.  Linux resets a socket closed with bytes unread. */
Test(ctlchan, a_close_with_a_message_unread_is_an_end_not_a_reset) {
  struct ends e;
  setup(&e, 2);
  cr_assert_eq(send_notice(&e, 1), 0); /* never read by the receiver */
  lp_ctl_close(&e.rx);
  int err = 1;
  cr_expect_eq(lp_ctl_peer_gone(&e.tx, "peer", &err), 1, "the close is not seen");
  cr_expect_eq(err, 0, "the close was seen as %s", lp_ctl_err_str(err));
  lp_ctl_close(&e.tx);
}
