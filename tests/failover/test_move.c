/* A move as one end runs it (failover.c), through its public calls: a
 * comm built in memory on three InfiniBand devices whose verbs are stand-ins
 * that hand out CQs, QPs and keys and accept every state change, and a
 * control channel over a socket pair whose other end the test plays.  A
 * broken move counts one fault twice in the metrics, or destroys the path
 * it keeps on the primary for the failback. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include "clock.h"
#include "failover.h"
#include "fo_wire.h"
#include "health.h"
#include "idle_watch.h"
#include "log.h"
#include "progress.h"
#include "../lib/tcp_pair.h"
#include "../lib/warn_capture.h"

static struct ibv_context ctx;
static struct ibv_pd pd;
static uint32_t next_qpn;
static int qps_destroyed;

static int fake_poll(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
  (void)cq;
  (void)n;
  (void)wc;
  return 0; /* nothing posted, nothing to flush */
}
static struct ibv_cq *fake_create_cq(struct ibv_context *cx, int cqe, void *cq_context, struct ibv_comp_channel *ch,
                                     int vector) {
  (void)cqe;
  (void)cq_context;
  (void)ch;
  (void)vector;
  struct ibv_cq *cq = calloc(1, sizeof(*cq));
  if (cq != NULL) cq->context = cx;
  return cq;
}
static int fake_destroy_cq(struct ibv_cq *cq) {
  free(cq);
  return 0;
}
static struct ibv_qp *fake_create_qp(struct ibv_pd *p, struct ibv_qp_init_attr *a) {
  (void)p;
  (void)a;
  struct ibv_qp *qp = calloc(1, sizeof(*qp));
  if (qp == NULL) return NULL;
  qp->context = &ctx;
  qp->qp_num = next_qpn++;
  return qp;
}
static int fake_destroy_qp(struct ibv_qp *qp) {
  qps_destroyed++;
  free(qp);
  return 0;
}
static int fail_rtr;          /* the next modify to RTR fails (once) */
static uint32_t stopped[64]; /* QPs moved to ERR, by number */
static int nstopped;
static int fake_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask) {
  if ((mask & IBV_QP_STATE) && a->qp_state == IBV_QPS_RTR && fail_rtr) {
    fail_rtr = 0;
    return EINVAL;
  }
  if ((mask & IBV_QP_STATE) && a->qp_state == IBV_QPS_ERR && nstopped < 64) stopped[nstopped++] = qp->qp_num;
  return 0;
}
static int was_stopped(uint32_t qpn) {
  for (int i = 0; i < nstopped; i++)
    if (stopped[i] == qpn) return 1;
  return 0;
}
static struct ibv_mr *fake_reg_mr(struct ibv_pd *p, void *addr, size_t len, int access) {
  (void)p;
  (void)access;
  struct ibv_mr *mr = calloc(1, sizeof(*mr));
  if (mr == NULL) return NULL;
  mr->addr = addr;
  mr->length = len;
  mr->rkey = 0x77;
  return mr;
}
static int fake_dereg_mr(struct ibv_mr *mr) {
  free(mr);
  return 0;
}
static int fake_query_port(struct ibv_context *cx, uint8_t port, struct ibv_port_attr *a) {
  (void)cx;
  (void)port;
  memset(a, 0, sizeof(*a));
  a->state = IBV_PORT_ACTIVE;
  a->link_layer = IBV_LINK_LAYER_INFINIBAND;
  a->lid = 1;
  a->active_mtu = IBV_MTU_4096;
  a->gid_tbl_len = 1;
  return 0;
}
static int fake_query_gid(struct ibv_context *cx, uint8_t port, int index, union ibv_gid *gid) {
  (void)cx;
  (void)port;
  (void)index;
  memset(gid, 0, sizeof(*gid));
  return 0;
}

static struct lp_env env;
static struct lp_health h;

/* Devices 0, 1 and 2 on NICs of their own, healthy; each one's pool is
 * itself, then the others in order. */
static void machine(void) {
  memset(&env, 0, sizeof(env));
  memset(&h, 0, sizeof(h));
  memset(&ctx, 0, sizeof(ctx));
  ctx.ops.poll_cq = fake_poll;
  next_qpn = 0x100;
  qps_destroyed = 0;
  fail_rtr = 0;
  nstopped = 0;
  env.ndevs = env.nnics = 3;
  for (int d = 0; d < 3; d++) {
    env.devs[d].nic = d;
    env.devs[d].port = 1;
    env.devs[d].link_layer = IBV_LINK_LAYER_INFINIBAND;
    snprintf(env.devs[d].name, sizeof(env.devs[d].name), "mlx5_%d", d);
    snprintf(env.nics[d].name, sizeof(env.nics[d].name), "mlx5_%d", d);
    env.nics[d].ctx = &ctx;
    env.nics[d].pd = &pd;
    env.nics[d].attr.sys_image_guid = 0x100 + (uint64_t)d;
    env.pool_n[d] = 3;
    for (int k = 0; k < 3; k++) env.pool[d][k] = (d + k) % 3;
    atomic_store(&h.healthy[d], 1);
    atomic_store(&h.link_up[d], 1);
  }
  env.ibv.query_port = fake_query_port;
  env.ibv.query_gid = fake_query_gid;
  env.ibv.create_cq = fake_create_cq;
  env.ibv.destroy_cq = fake_destroy_cq;
  env.ibv.create_qp = fake_create_qp;
  env.ibv.destroy_qp = fake_destroy_qp;
  env.ibv.modify_qp = fake_modify_qp;
  env.ibv.reg_mr = fake_reg_mr;
  env.ibv.dereg_mr = fake_dereg_mr;
  env.cfg.gid_index = -1;
  env.cfg.timeout = 20;
  env.cfg.retry_cnt = 7;
  env.cfg.move_timeout_ms = 1000;
  env.cfg.ns.move_timeout_ns = 1000000000ull;
  h.env = &env;
}

static char ctrl[8192];
static struct lp_ctl peer; /* the other end's control channel: the test */

/* A link of the peer's, as a message describes it. */
static struct lp_link_info peer_link(void) {
  struct lp_link_info l;
  memset(&l, 0, sizeof(l));
  l.nqps = 1;
  l.qpn[0] = 0x900;
  l.link_layer = IBV_LINK_LAYER_INFINIBAND;
  l.mtu = IBV_MTU_4096;
  l.port = 1;
  l.lid = 9;
  l.ctrl_addr = 0x1000;
  l.ctrl_rkey = 0x55;
  snprintf(l.dev_name, sizeof(l.dev_name), "mlx5_9");
  return l;
}

/* Comm `c` of `kind`, set up on device `dev` with failover on, its control
 * channel joined to `peer`: over a socket pair, or (`two`) over two TCP
 * connections, the comm's ends accepted where it is the receiver. */
static void join_paths(struct lp_comm *c, int kind, int dev, int two) {
  c->kind = kind;
  c->env = &env;
  c->health = &h;
  c->mr_nics = 7;
  c->conn_id = 0x1234;
  c->ctrl = ctrl;
  c->ctrl_len = sizeof(ctrl);
  snprintf(c->peer, sizeof(c->peer), "peer");
  lp_ctl_init(&c->ctl);
  lp_ctl_init(&peer);
  for (int i = 0; i < (two ? 2 : 1); i++) {
    int sv[2];
    if (two) {
      tcp_pair(sv);
    } else {
      cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
      for (int k = 0; k < 2; k++) fcntl(sv[k], F_SETFL, O_NONBLOCK);
    }
    c->ctl.path[i].fd = sv[kind == LP_COMM_RECV];
    peer.path[i].fd = sv[kind != LP_COMM_RECV];
  }
  cr_assert_eq(lp_ctl_start(&peer, kind == LP_COMM_SEND), 0);
  cr_assert_eq(lp_link_open(&c->link, &env, &h, lp_comm_dir(c), dev, 1, ctrl, sizeof(ctrl), 0), ncclSuccess);
  c->link.remote = peer_link();
  lp_fo_init(c);
  cr_assert_not_null(c->fo);
}

static void join(struct lp_comm *c, int kind, int dev) { join_paths(c, kind, dev, 0); }

static void leave(struct lp_comm *c) {
  lp_fo_fini(c);
  lp_link_close(&c->link);
  lp_ctl_close(&c->ctl);
  lp_ctl_close(&peer);
}

/* The next message the comm sent the peer, of type `type`, copied into
 * `out` (`len` bytes at most). */
static void expect_msg(int type, void *out, size_t len) {
  const void *msg = NULL;
  size_t n = 0;
  int rc = 0;
  for (int tries = 0; tries < 1000 && rc == 0; tries++) rc = lp_ctl_recv(&peer, "test", &msg, &n);
  cr_assert_eq(rc, 1, "the comm sent the peer nothing");
  const struct lp_msg_hdr *hd = msg;
  cr_assert_eq((int)hd->type, type, "the comm sent message type %d, not %d", (int)hd->type, type);
  memcpy(out, msg, n < len ? n : len);
}

static void send_req(uint32_t epoch, int reason, int rail) {
  struct lp_fo_req m;
  memset(&m, 0, sizeof(m));
  lp_msg_hdr_init(&m.hdr, (enum lp_msg_type)LP_MSG_FO_REQ, sizeof(m));
  m.conn_id = 0x1234;
  m.epoch = epoch;
  m.reason = (uint32_t)reason;
  m.rail = rail;
  m.avoid_rail = -1;
  m.link = peer_link();
  cr_assert_eq(lp_ctl_send(&peer, "test", &m, sizeof(m)), 0);
}

/* A receive comm on device 0 with nothing outstanding (nothing to replay),
 * its control channel joined to `peer` over one connection, or two TCP
 * ones (`two`). */
static struct lp_comm *receiver(struct lp_recv_comm *r, int two) {
  memset(r, 0, sizeof(*r));
  r->records = (struct lp_record *)(void *)(ctrl + 4096);
  r->oldest = r->tail = 1;
  join_paths(&r->base, LP_COMM_RECV, 0, two);
  return &r->base;
}

/* A send comm on device 0, its control channel joined to `peer`. */
static struct lp_comm *sender(struct lp_send_comm *s) {
  memset(s, 0, sizeof(*s));
  join(&s->base, LP_COMM_SEND, 0);
  return &s->base;
}

/* A send comm on device 1, where an earlier failover left it, its path on
 * the primary (device 0) stopped and kept for the failback (swap_link). */
static struct lp_comm *sender_away(struct lp_send_comm *s) {
  struct lp_comm *c = sender(s);
  lp_link_uncount(&c->link);
  c->fo->home = c->link;
  cr_assert_eq(lp_link_open(&c->link, &env, &h, LP_DIR_SEND, 1, 1, ctrl, sizeof(ctrl), 0), ncclSuccess);
  return c;
}

/* NCCL registers for comm c a buffer that only the NICs in `nics` took
 * (regMr narrows the comm's mr_nics as this does). */
static void uses_buffer_on(struct lp_comm *c, uint32_t nics) {
  struct lp_mr mr;
  memset(&mr, 0, sizeof(mr));
  mr.magic = LP_MR_MAGIC;
  mr.nics = nics;
  lp_comm_uses(c, &mr);
}

/* Device d's port goes down, as the control thread records it; the
 * connections see it at the generation's next change. */
static void port_down(int d) {
  atomic_store(&h.healthy[d], 0);
  atomic_store(&h.link_up[d], 0);
  atomic_store(&h.down_reason[d], LP_FO_PORT_DOWN);
}

/* Comm c's standby path 7, ready on device 1. */
static void standby_on_1(struct lp_comm *c) {
  struct lp_fo *fo = c->fo;
  cr_assert_eq(lp_link_open(&fo->sb.link, &env, NULL, lp_comm_dir(c), 1, 1, ctrl, sizeof(ctrl), 0), ncclSuccess);
  fo->sb.link.remote = peer_link();
  fo->sb.id = 7;
  fo->sb.state = LP_SB_READY;
}

/* mlx5_0's port goes down, and comm c sees it at its next progress call. */
static void pull_mlx5_0(struct lp_comm *c) {
  port_down(0);
  atomic_fetch_add(&h.gen, 1);
  cr_assert_eq(lp_fo_progress(c, lp_now_ns()), ncclSuccess);
}

/* Send comm c, with its standby 7 on mlx5_1, offers it when mlx5_0's port
 * goes down: the REQ into *m. */
static void offer_standby_on_1(struct lp_comm *c, struct lp_fo_req *m) {
  standby_on_1(c);
  pull_mlx5_0(c);
  expect_msg(LP_MSG_FO_REQ, m, sizeof(*m));
  cr_assert_eq(m->standby, 7, "the REQ names standby %u, not 7", m->standby);
}

/* The peer, a sender NCCL is calling, reads and ticks while comm c is left
 * to the watch, until c's second control connection is made again or 6 s
 * pass.  Returns c's live connections once the peer offered one again (0
 * before: the watch never made the first step). */
static int wait_made_again(struct lp_comm *c) {
  uint64_t deadline = lp_now_ns() + 6000000000ull;
  int live = 0;
  while (live < 2 && lp_now_ns() < deadline) {
    const void *msg;
    size_t len;
    while (lp_ctl_recv(&peer, "test", &msg, &len) == 1) {}
    lp_ctl_tick(&peer, "test", lp_now_ns());
    if (peer.path[1].gen > 0 && lp_comm_try_enter(c)) { /* as NCCL would: the watch may be in it */
      live = lp_ctl_live(&c->ctl);
      lp_comm_leave(c);
    }
    usleep(1000);
  }
  return live;
}

TestSuite(move, .init = machine);

/* The receiver's port fails and it moves onto its standby by itself
 * (MOVED); the sender cannot follow (its own REQ had built a new path) and
 * asks for a newer move, which the receiver answers from the standby.  One
 * fault, one connection end that left mlx5_0: counted once, as the sender
 * counts it.  It was counted at the MOVED and again at the ACK. */
Test(move, a_moved_superseded_by_a_req_counts_the_fault_once) {
  static struct lp_recv_comm r;
  struct lp_comm *c = receiver(&r, 0);
  standby_on_1(c);
  pull_mlx5_0(c);
  static struct lp_fo_ack a;
  expect_msg(LP_MSG_FO_MOVED, &a, sizeof(a));
  cr_assert_eq(a.epoch, 1);
  cr_assert_eq(c->link.dev, 1, "on the standby's device");
  cr_assert_eq(atomic_load(&h.stats.failovers), 1, "the MOVED counts the move");

  send_req(2, LP_FO_PEER_NOTICE, 2);
  cr_assert_eq(lp_fo_progress(c, lp_now_ns()), ncclSuccess);
  expect_msg(LP_MSG_FO_ACK, &a, sizeof(a));
  cr_assert_eq(a.epoch, 2);
  cr_assert_eq(c->link.dev, 2, "on the path the newer move asked for");
  cr_expect_eq(atomic_load(&h.stats.failovers), 1, "one fault counted %llu times",
               (unsigned long long)atomic_load(&h.stats.failovers));
  cr_expect_eq(atomic_load(&h.stats.dev[0].failovers), 1, "mlx5_0 counted %llu ends leaving it, not 1",
               (unsigned long long)atomic_load(&h.stats.dev[0].failovers));
  leave(c);
}

/* A failback revives the path the sender left on its primary; its REQ goes
 * unanswered past the move's deadline and the move is offered again.  The
 * retry revives the same path again (the same QPs): it was destroyed and a
 * new one built, and with it the kept path was gone for every later
 * failback too. */
Test(move, a_retried_failback_revives_the_kept_path_again) {
  static struct lp_send_comm s;
  struct lp_comm *c = sender_away(&s);
  struct lp_fo *fo = c->fo;
  uint32_t home_qpn = fo->home.qps[0]->qp_num;

  cr_assert_eq(lp_fo_progress(c, lp_now_ns()), ncclSuccess); /* the primary is trusted: fail back */
  static struct lp_fo_req m;
  expect_msg(LP_MSG_FO_REQ, &m, sizeof(m));
  cr_assert_eq(m.reason, LP_FO_FAILBACK);
  cr_assert_eq(m.link.qpn[0], home_qpn, "the failback revives the kept path");
  cr_assert(fo->via_home);

  cr_assert_eq(lp_fo_progress(c, fo->deadline_ns), ncclSuccess); /* no answer: offered again */
  expect_msg(LP_MSG_FO_REQ, &m, sizeof(m));
  cr_assert_eq(m.epoch, 2);
  cr_expect_eq(m.link.qpn[0], home_qpn, "the retry offered QP 0x%x, not the kept path's 0x%x", m.link.qpn[0], home_qpn);
  cr_expect(fo->via_home, "the retry's path is the revived one (path=revived)");
  cr_expect_eq(qps_destroyed, 0, "%d QPs destroyed by the retry", qps_destroyed);
  cr_expect_eq(atomic_load(&h.load[LP_DIR_SEND][0]), 1, "the offer counts once on the primary");
  leave(c);
}

/* The receiver's answer to the sender's REQ of epoch `epoch`: a new path,
 * nothing pending. */
/* The receiver's ACK of move `epoch`, with nothing pending; `refused`: it
 * no longer holds the standby the REQ named. */
static void send_ack_of(uint32_t epoch, int refused) {
  static struct lp_fo_ack a;
  memset(&a, 0, sizeof(a));
  lp_msg_hdr_init(&a.hdr, (enum lp_msg_type)LP_MSG_FO_ACK, lp_fo_ack_len(0));
  a.conn_id = 0x1234;
  a.epoch = epoch;
  a.refused = (uint32_t)refused;
  if (!refused) a.link = peer_link();
  cr_assert_eq(lp_ctl_send(&peer, "test", &a, lp_fo_ack_len(0)), 0);
}

static void send_ack(uint32_t epoch) { send_ack_of(epoch, 0); }

/* Between the sender's REQ and the receiver's ACK, NCCL registers for the
 * connection a buffer that the offer's NIC could not take (a dma-buf on a
 * NIC without dma-buf support, say): the connection may no longer go
 * there (mr_nics).  The sender offers a path elsewhere instead of
 * following the ACK, and the answered offer does not count among the
 * unanswered ones.  It moved onto mlx5_1, where that buffer's messages
 * cannot go out: the reconciliation of a message from it failed the
 * connection ("message's buffer is not registered on mlx5_1"). */
Test(move, a_buffer_used_during_the_offer_that_its_nic_lacks_moves_it_elsewhere) {
  static struct lp_send_comm s;
  struct lp_comm *c = sender(&s);
  struct lp_fo *fo = c->fo;
  pull_mlx5_0(c);
  static struct lp_fo_req m;
  expect_msg(LP_MSG_FO_REQ, &m, sizeof(m));
  cr_assert_eq(fo->next.dev, 1, "the offer is on mlx5_1, the first of mlx5_0's pool");

  uses_buffer_on(c, 1u << 0 | 1u << 2); /* registered on mlx5_0 and mlx5_2 only */
  send_ack(m.epoch);
  cr_assert_eq(lp_fo_progress(c, lp_now_ns()), ncclSuccess);
  cr_expect_eq(c->error, ncclSuccess, "the connection failed");
  cr_expect_eq(c->link.dev, 0, "the sender followed the ACK onto mlx5_%d", c->link.dev);
  expect_msg(LP_MSG_FO_REQ, &m, sizeof(m));
  cr_expect_eq(m.epoch, 2, "the newer offer's epoch is %u", m.epoch);
  cr_expect_eq(m.reason, LP_FO_PORT_DOWN, "the same move, for the same fault");
  cr_expect_eq(fo->next.dev, 2, "the newer offer is on mlx5_%d, not mlx5_2", fo->next.dev);
  cr_expect_eq(fo->attempts, 1, "the answered offer counted as unanswered (%d attempts)", fo->attempts);
  leave(c);
}

/* The same with the standby: the receiver answered from its standby on
 * the NIC beside mlx5_1 and has moved (its ACK ended its move), while this
 * end's standby on mlx5_1 lacks the buffer.  The newer offer, a new path on
 * mlx5_2, is a move the peer asked for at the receiver (peer_notice), not a
 * fault of the receiver's new NIC (a completion error or a stall would make
 * that NIC suspect there). */
Test(move, a_standby_whose_nic_lacks_a_buffer_used_during_the_offer_is_not_followed) {
  static struct lp_send_comm s;
  struct lp_comm *c = sender(&s);
  struct lp_fo *fo = c->fo;
  static struct lp_fo_req m;
  offer_standby_on_1(c, &m);

  uint32_t sb_qpn = fo->sb.link.qps[0]->qp_num;
  uses_buffer_on(c, 1u << 0 | 1u << 2);
  static struct lp_fo_ack a;
  memset(&a, 0, sizeof(a));
  lp_msg_hdr_init(&a.hdr, (enum lp_msg_type)LP_MSG_FO_ACK, lp_fo_ack_len(0));
  a.conn_id = 0x1234;
  a.epoch = m.epoch;
  a.standby = 7;
  a.link = peer_link();
  cr_assert_eq(lp_ctl_send(&peer, "test", &a, lp_fo_ack_len(0)), 0);
  cr_assert_eq(lp_fo_progress(c, lp_now_ns()), ncclSuccess);
  cr_expect_eq(c->error, ncclSuccess, "the connection failed");
  cr_expect_eq(c->link.dev, 0, "the sender followed the ACK onto its standby on mlx5_%d", c->link.dev);
  expect_msg(LP_MSG_FO_REQ, &m, sizeof(m));
  cr_expect_eq(m.epoch, 2);
  cr_expect_eq(m.standby, 0, "the newer offer is a new path, not standby %u", m.standby);
  cr_expect_eq(m.reason, LP_FO_PEER_NOTICE, "the newer offer's reason is %u", m.reason);
  cr_expect(was_stopped(sb_qpn), "this end's side of the standby the receiver moved onto was left in RTS");
  cr_expect_eq(fo->next.dev, 2, "the newer offer is on mlx5_%d, not mlx5_2", fo->next.dev);
  leave(c);
}

/* A connection away from its primary has used a buffer the primary could
 * not register: no failback is offered (it would go elsewhere, and again
 * at every change of health). */
Test(move, no_failback_to_a_primary_that_lacks_a_buffer_the_connection_used) {
  static struct lp_send_comm s;
  struct lp_comm *c = sender_away(&s);
  struct lp_fo *fo = c->fo;
  uses_buffer_on(c, 1u << 1 | 1u << 2);
  cr_assert_eq(lp_fo_progress(c, lp_now_ns()), ncclSuccess);
  const void *msg = NULL;
  size_t n = 0;
  cr_expect_eq(lp_ctl_recv(&peer, "test", &msg, &n), 0, "a failback was offered (message type %d)",
               msg ? (int)((const struct lp_msg_hdr *)msg)->type : -1);
  cr_expect_eq(fo->state, LP_FO_IDLE);
  cr_expect_eq(c->link.dev, 1);
  leave(c);
}

/* The receiver's side of the same: a failback's REQ revives the path it
 * kept on its primary, whose connection to the sender's new QPs fails
 * once.  The kept path stays kept, and the next try on the primary revives
 * it again: it was destroyed, and a new one built in its place. */
Test(move, a_receivers_kept_path_that_fails_to_connect_is_kept) {
  static struct lp_recv_comm r;
  struct lp_comm *c = receiver(&r, 0);
  struct lp_fo *fo = c->fo;
  lp_link_uncount(&c->link);
  fo->home = c->link;
  cr_assert_eq(lp_link_open(&c->link, &env, &h, LP_DIR_RECV, 1, 1, ctrl, sizeof(ctrl), 0), ncclSuccess);
  uint32_t home_qpn = fo->home.qps[0]->qp_num;

  fail_rtr = 1;
  send_req(1, LP_FO_FAILBACK, 0);
  cr_assert_eq(lp_fo_progress(c, lp_now_ns()), ncclSuccess);
  static struct lp_fo_ack a;
  expect_msg(LP_MSG_FO_ACK, &a, sizeof(a));
  cr_assert_eq(fail_rtr, 0, "the first connection was tried and failed");
  cr_assert_eq(c->link.dev, 0, "back on the primary");
  cr_expect_eq(a.link.qpn[0], home_qpn, "the answer's QP 0x%x is not the kept path's 0x%x", a.link.qpn[0], home_qpn);
  cr_expect_eq(qps_destroyed, 0, "%d QPs destroyed", qps_destroyed);
  cr_expect_eq(atomic_load(&h.load[LP_DIR_RECV][0]), 1, "the path counts once on the primary");
  leave(c);
}

/* The receiver's second control connection fails while NCCL does not call
 * the comm (idle between collectives): the idle watch answers the socket
 * that failed (the comm gives it up, says DROP), and must also drive the
 * steps that make it again (the OFFER 1 s later, the accept, the REJOIN),
 * or the comm goes on with one connection until NCCL calls it, and a fault
 * of that one's interface meanwhile ends its control channel.  Before,
 * nothing ticked the channel after the answer: no OFFER ever came. */
Test(move, an_idle_comm_makes_a_lost_control_connection_again) {
  static struct lp_recv_comm r;
  struct lp_comm *c = receiver(&r, 1);
  struct lp_idle_watch w;
  cr_assert_eq(lp_idle_watch_start(&w, -1), 0);
  lp_idle_watch_add(&w, c);
  struct lp_msg_hdr junk = {.magic = 0x41414141, .length = 16};
  cr_assert_eq(write(peer.path[1].fd, &junk, sizeof(junk)), (ssize_t)sizeof(junk));
  int live = wait_made_again(c); /* its first try comes 1 s after the failure */
  cr_expect_gt(peer.path[1].gen, 0u, "the idle receiver never offered its lost control connection again");
  cr_expect_eq(live, 2, "the idle receiver has %d control connection(s), not 2 made again", live);
  cr_expect_eq(lp_ctl_live(&peer), 2);
  lp_idle_watch_remove(&w, c);
  lp_idle_watch_free(&w);
  leave(c);
}

/* The same loss found by NCCL's own call, after which NCCL leaves the comm
 * idle: the watch answered nothing, so nothing of its put the comm on its
 * list; its scan (once a second) still finds the connection to make again. */
Test(move, a_connection_given_up_in_nccls_call_is_made_again_while_idle) {
  static struct lp_recv_comm r;
  struct lp_comm *c = receiver(&r, 1);
  struct lp_msg_hdr junk = {.magic = 0x41414141, .length = 16};
  cr_assert_eq(write(peer.path[1].fd, &junk, sizeof(junk)), (ssize_t)sizeof(junk));
  /* NCCL's calls read it and give the connection up, before the watch has
   * the comm (it would otherwise answer the socket itself). */
  uint64_t deadline = lp_now_ns() + 3000000000ull;
  int live = 2;
  while (live == 2 && lp_now_ns() < deadline) {
    lp_comm_enter(c);
    atomic_store(&c->fo->rx_ready, 1);
    lp_comm_progress(c);
    live = lp_ctl_live(&c->ctl);
    lp_comm_leave(c);
    usleep(1000);
  }
  cr_assert_eq(live, 1, "NCCL's call did not give the broken connection up");
  struct lp_idle_watch w;
  cr_assert_eq(lp_idle_watch_start(&w, -1), 0);
  lp_idle_watch_add(&w, c);
  live = wait_made_again(c);
  cr_expect_gt(peer.path[1].gen, 0u, "the comm NCCL left idle never offered its lost control connection again");
  cr_expect_eq(live, 2, "the comm has %d control connection(s), not 2 made again", live);
  lp_idle_watch_remove(&w, c);
  lp_idle_watch_free(&w);
  leave(c);
}

/* One look of comm c's, the last WARN it logged in lp_test_warned. */
static ncclResult_t look_capturing(struct lp_comm *c) {
  lp_test_warned[0] = '\0';
  lp_log_set_logger(lp_test_capture_warn);
  ncclResult_t rc = lp_fo_progress(c, lp_now_ns());
  lp_log_set_logger(NULL);
  return rc;
}

/* The port fails, and the other NICs are healthy but hold none of the
 * connection's buffers (NCCL registered them as dma-bufs, which those NICs
 * take none of, say): the path is lost, and the line says why.  It said
 * "no healthy NIC on this side", which sends an operator after hardware
 * that is fine. */
Test(move, a_path_lost_because_no_healthy_nic_holds_the_buffers_says_so) {
  static struct lp_send_comm s;
  struct lp_comm *c = sender(&s);
  c->mr_nics = 1u; /* its buffers are registered on NIC 0 alone */
  port_down(0);
  atomic_fetch_add(&h.gen, 1);
  cr_assert_eq(look_capturing(c), ncclRemoteError, "the path is lost");
  cr_expect_not_null(strstr(lp_test_warned, "hold no registration of buffers"), "the line said: %s", lp_test_warned);
  cr_expect_null(strstr(lp_test_warned, "no healthy NIC"), "the line said: %s", lp_test_warned);
  leave(c);
}

/* The same with every other NIC down too: that is no healthy NIC. */
Test(move, a_path_lost_with_every_nic_down_says_no_healthy_nic) {
  static struct lp_send_comm s;
  struct lp_comm *c = sender(&s);
  for (int d = 0; d < 3; d++) port_down(d);
  atomic_fetch_add(&h.gen, 1);
  cr_assert_eq(look_capturing(c), ncclRemoteError, "the path is lost");
  cr_expect_not_null(strstr(lp_test_warned, "no healthy NIC on this side"), "the line said: %s", lp_test_warned);
  leave(c);
}

/* Whether the comm sent the peer nothing. */
static int sent_nothing(void) {
  const void *msg = NULL;
  size_t n = 0;
  int rc = 0;
  for (int tries = 0; tries < 100 && rc == 0; tries++) rc = lp_ctl_recv(&peer, "test", &msg, &n);
  return rc == 0;
}

static void send_sb_answer(uint32_t id, int ok) {
  struct lp_fo_sb_answer a;
  memset(&a, 0, sizeof(a));
  lp_msg_hdr_init(&a.hdr, (enum lp_msg_type)LP_MSG_FO_SB_ANSWER, sizeof(a));
  a.conn_id = 0x1234;
  a.id = id;
  a.ok = (uint32_t)ok;
  a.link = peer_link();
  cr_assert_eq(lp_ctl_send(&peer, "test", &a, sizeof(a)), 0);
}

/* The receiver's side of a ready standby goes with its NIC's port, and the
 * receiver says so: an answer of none to the offer it had taken.  It said
 * nothing, and only the sender offers standbys: the sender held its side
 * as ready, offered no new one even once that NIC was back, and its next
 * move named the standby, was refused and built a new path. */
Test(move, a_receiver_that_gives_its_standby_up_tells_the_sender) {
  static struct lp_recv_comm r;
  struct lp_comm *c = receiver(&r, 0);
  standby_on_1(c);
  port_down(1);
  atomic_fetch_add(&h.gen, 1);
  cr_assert_eq(lp_fo_progress(c, lp_now_ns()), ncclSuccess);
  cr_assert_eq(c->fo->sb.state, LP_SB_NONE, "the standby on the failed NIC is kept");
  struct lp_fo_sb_answer a;
  expect_msg(LP_MSG_FO_SB_ANSWER, &a, sizeof(a));
  cr_expect_eq(a.id, 7, "it names standby %u, not 7", a.id);
  cr_expect_eq(a.ok, 0);
  leave(c);
}

/* The sender, told so, drops its side and offers a new standby when its
 * wait is over; an answer of none to an offer it has since replaced is
 * ignored. */
Test(move, a_sender_told_its_standby_is_gone_offers_a_new_one) {
  static struct lp_send_comm s;
  struct lp_comm *c = sender(&s);
  struct lp_fo *fo = c->fo;
  env.cfg.standby = 1;
  standby_on_1(c);
  send_sb_answer(6, 0); /* an older offer's: stale */
  cr_assert_eq(lp_fo_progress(c, lp_now_ns()), ncclSuccess);
  cr_assert_eq(fo->sb.state, LP_SB_READY, "a stale answer dropped the standby");
  send_sb_answer(7, 0);
  fo->next_read_ns = 0;
  cr_assert_eq(lp_fo_progress(c, lp_now_ns()), ncclSuccess);
  cr_assert_eq(fo->sb.state, LP_SB_NONE, "the sender still holds the standby the peer gave up");
  cr_assert(lp_fo_has_retired(fo), "its side is not left to be destroyed");
  cr_assert_gt(fo->sb.next_ns, lp_now_ns(), "the next offer does not wait");
  fo->sb.next_ns = 0;
  fo->next_read_ns = 0;
  atomic_store(&h.paced_until, 0);
  for (int i = 0; i < 2 && fo->sb.state == LP_SB_NONE; i++) { /* the old side's destroy first, then the offer */
    atomic_store(&h.paced_until, 0);
    fo->next_read_ns = 0;
    cr_assert_eq(lp_fo_progress(c, lp_now_ns()), ncclSuccess);
  }
  struct lp_fo_sb_offer m;
  expect_msg(LP_MSG_FO_SB_OFFER, &m, sizeof(m));
  cr_expect_gt(m.id, 7, "the new offer's id %u is not newer", m.id);
  leave(c);
}

/* A peer that can never make a standby (no second NIC) answers every offer
 * with none: each one built and destroyed a link at both ends, once a
 * second for as long as the connection lived.  The waits double, to 32 s. */
Test(move, offers_that_make_no_standby_wait_longer_each_time) {
  static struct lp_send_comm s;
  struct lp_comm *c = sender(&s);
  struct lp_fo *fo = c->fo;
  env.cfg.standby = 1;
  uint64_t want_s[] = {1, 2, 4, 8, 16, 32, 32};
  for (size_t i = 0; i < sizeof(want_s) / sizeof(want_s[0]); i++) {
    fo->sb.next_ns = 0;
    fo->next_read_ns = 0;
    atomic_store(&h.paced_until, 0);
    cr_assert_eq(lp_fo_progress(c, lp_now_ns()), ncclSuccess);
    struct lp_fo_sb_offer m;
    expect_msg(LP_MSG_FO_SB_OFFER, &m, sizeof(m));
    send_sb_answer(m.id, 0);
    fo->next_read_ns = 0;
    cr_assert_eq(lp_fo_progress(c, lp_now_ns()), ncclSuccess);
    cr_assert_eq(fo->sb.state, LP_SB_NONE);
    cr_assert_eq(fo->sb.retry_ns, want_s[i] * 1000000000ull, "after %zu offers of none the wait is %llu ms, not %llu s",
                 i + 1, (unsigned long long)(fo->sb.retry_ns / 1000000), (unsigned long long)want_s[i]);
    for (int k = 0; k < 2 && lp_fo_has_retired(fo); k++) { /* destroy what the refusal left, as tidy does */
      atomic_store(&h.paced_until, 0);
      fo->next_read_ns = 0;
      uint64_t next = fo->sb.next_ns;
      fo->sb.next_ns = 0;
      cr_assert_eq(lp_fo_progress(c, lp_now_ns()), ncclSuccess);
      fo->sb.next_ns = next;
    }
  }
  leave(c);
}

/* With no device for a standby (the others down), a sender's failed offer
 * left the chore waiting, and every test() of the connection read the
 * clock for it (lp_fo_due) for as long as no standby could be made. */
Test(move, a_sender_with_no_device_for_a_standby_does_not_keep_the_clock) {
  static struct lp_send_comm s;
  struct lp_comm *c = sender(&s);
  env.cfg.standby = 1;
  port_down(1);
  port_down(2);
  atomic_fetch_add(&h.gen, 1);
  cr_assert_eq(lp_fo_progress(c, lp_now_ns()), ncclSuccess);
  cr_assert_eq(c->fo->sb.state, LP_SB_NONE);
  cr_assert_eq(lp_fo_progress(c, lp_now_ns()), ncclSuccess); /* the next look */
  cr_expect_not(lp_fo_due(c), "failover still asks for the clock at every call");
  leave(c);
}

/* An end that went to a held-down port as the last resort (mlx5_0 down,
 * mlx5_1 and mlx5_2 up but held down) stays there until a healthy port
 * comes.  The choice among held-down ports goes by load, which counted the
 * end where it was: it moved to mlx5_2 at the next change of health, and
 * back at the one after. */
Test(move, an_end_on_a_held_down_last_resort_stays_until_a_healthy_port) {
  static struct lp_send_comm s;
  struct lp_comm *c = sender_away(&s);
  port_down(0);
  for (int d = 1; d < 3; d++) atomic_store(&h.healthy[d], 0); /* up, held down */
  atomic_fetch_add(&h.gen, 1);
  cr_assert_eq(lp_fo_progress(c, lp_now_ns()), ncclSuccess);
  cr_expect_eq(c->fo->state, LP_FO_IDLE, "it moved between two held-down ports");
  cr_expect(sent_nothing(), "it offered a move between two held-down ports");
  atomic_store(&h.healthy[2], 1); /* mlx5_2's hold-down ends */
  atomic_fetch_add(&h.gen, 1);
  c->fo->next_read_ns = 0;
  cr_assert_eq(lp_fo_progress(c, lp_now_ns()), ncclSuccess);
  struct lp_fo_req m;
  expect_msg(LP_MSG_FO_REQ, &m, sizeof(m));
  cr_expect_eq(c->fo->next.dev, 2, "it moves onto mlx5_%d, not the healthy mlx5_2", c->fo->next.dev);
  leave(c);
}

/* A REQ that names a standby the receiver gave up (the REQ crossed its
 * answer of none) is refused: the sender says so and offers a new path,
 * one epoch later, naming no standby. */
Test(move, a_refused_standby_is_followed_by_a_new_path) {
  static struct lp_send_comm s;
  struct lp_comm *c = sender(&s);
  struct lp_fo *fo = c->fo;
  static struct lp_fo_req m;
  offer_standby_on_1(c, &m);
  uint32_t epoch = m.epoch;
  send_ack_of(epoch, 1);
  cr_assert_eq(look_capturing(c), ncclSuccess);
  cr_expect_not_null(strstr(lp_test_warned, "its standby path is gone at the peer"), "the line said: %s",
                     lp_test_warned);
  cr_assert_eq(fo->sb.state, LP_SB_NONE, "the refused standby is kept");
  expect_msg(LP_MSG_FO_REQ, &m, sizeof(m));
  cr_expect_eq(m.standby, 0, "the new offer names standby %u", m.standby);
  cr_expect_eq(m.epoch, epoch + 1, "the new offer's epoch is %u", m.epoch);
  cr_expect_eq(fo->next.dev, 1, "the new path is on mlx5_%d, not mlx5_1", fo->next.dev);
  leave(c);
}
