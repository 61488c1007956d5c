/* Handle and setup-message validation: everything a peer (or a stranger)
 * can send must be checked. */
#include <criterion/criterion.h>
#include <infiniband/verbs.h>
#include <string.h>
#include <sys/socket.h>

#include "wire.h"

static struct lp_handle good_handle(void) {
  struct lp_handle h;
  memset(&h, 0, sizeof(h));
  h.magic = LP_HANDLE_MAGIC;
  h.version = LP_PROTO_VERSION;
  h.family = AF_INET;
  h.port = 1234;
  h.listen_id = 99;
  return h;
}

Test(handle, fits_and_valid) {
  cr_expect_leq(sizeof(struct lp_handle), NCCL_NET_HANDLE_MAXSIZE);
  struct lp_handle h = good_handle();
  char why[128];
  cr_expect_eq(lp_handle_check(&h, why, sizeof(why)), 0, "%s", why);
}

Test(handle, rejects_garbage) {
  char why[128];
  struct lp_handle h = good_handle();
  h.magic ^= 1;
  cr_expect_eq(lp_handle_check(&h, why, sizeof(why)), -1);
  h = good_handle();
  h.version = LP_PROTO_VERSION + 1;
  cr_expect_eq(lp_handle_check(&h, why, sizeof(why)), -1);
  h = good_handle();
  h.family = AF_UNIX;
  cr_expect_eq(lp_handle_check(&h, why, sizeof(why)), -1);
  h = good_handle();
  h.alt_family = AF_INET;
  h.alt_port = 99;
  cr_expect_eq(lp_handle_check(&h, why, sizeof(why)), 0, "%s", why);
  h.alt_port = 0;
  cr_expect_eq(lp_handle_check(&h, why, sizeof(why)), -1, "second address with port 0 accepted");
  h.alt_family = AF_UNIX;
  h.alt_port = 99;
  cr_expect_eq(lp_handle_check(&h, why, sizeof(why)), -1, "second address of family AF_UNIX accepted");
  h = good_handle();
  h.port = 0;
  cr_expect_eq(lp_handle_check(&h, why, sizeof(why)), -1);
  h = good_handle();
  h.listen_id = 0;
  cr_expect_eq(lp_handle_check(&h, why, sizeof(why)), -1);
  unsigned char junk[NCCL_NET_HANDLE_MAXSIZE];
  for (size_t i = 0; i < sizeof(junk); i++) junk[i] = (unsigned char)(i * 37 + 11);
  cr_expect_eq(lp_handle_check(junk, why, sizeof(why)), -1);
}

static struct lp_link_info good_link(void) {
  struct lp_link_info l;
  memset(&l, 0, sizeof(l));
  l.lid = 3;
  l.link_layer = IBV_LINK_LAYER_INFINIBAND;
  l.mtu = IBV_MTU_4096;
  l.port = 1;
  l.nqps = 2;
  l.qpn[0] = 0x100;
  l.qpn[1] = 0x101;
  l.ctrl_addr = 0x10000;
  l.ctrl_rkey = 7;
  strcpy(l.dev_name, "mlx5_0");
  return l;
}

Test(messages, hello_roundtrip) {
  struct lp_msg_hello m;
  memset(&m, 0, sizeof(m));
  lp_msg_hdr_init(&m.hdr, LP_MSG_HELLO, sizeof(m));
  m.listen_id = 42;
  m.conn_id = 5;
  strcpy(m.host, "node1");
  m.link = good_link();
  char why[160];
  cr_expect_eq(lp_msg_hello_check(&m, 42, why, sizeof(why)), 0, "%s", why);
  cr_expect_eq(lp_msg_hello_check(&m, 43, why, sizeof(why)), -1, "hello for another listener accepted");
  /* A JOIN names the connection; its link is not used, and not checked. */
  m.hdr.type = LP_MSG_JOIN;
  memset(&m.link, 0, sizeof(m.link));
  cr_expect_eq(lp_msg_hello_check(&m, 42, why, sizeof(why)), 0, "%s", why);
  cr_expect_eq(lp_msg_hello_check(&m, 43, why, sizeof(why)), -1, "join for another listener accepted");
  m.hdr.type = LP_MSG_HELLO;
  cr_expect_eq(lp_msg_hello_check(&m, 42, why, sizeof(why)), -1, "hello without a link accepted");
}

Test(messages, header_garbage) {
  struct lp_msg_hdr h;
  char why[160];
  lp_msg_hdr_init(&h, LP_MSG_HELLO, sizeof(struct lp_msg_hello));
  cr_expect_eq(lp_msg_hdr_check(&h, LP_MSG_HELLO, sizeof(struct lp_msg_hello), why, sizeof(why)), 0);
  cr_expect_eq(lp_msg_hdr_check(&h, LP_MSG_ACCEPT, sizeof(struct lp_msg_hello), why, sizeof(why)), -1);
  cr_expect_eq(lp_msg_hdr_check(&h, LP_MSG_HELLO, sizeof(struct lp_msg_hello) + 1, why, sizeof(why)), -1);
  h.magic = 0x41414141;
  cr_expect_eq(lp_msg_hdr_check(&h, LP_MSG_HELLO, sizeof(struct lp_msg_hello), why, sizeof(why)), -1);
  cr_expect(strstr(why, "magic") != NULL);
  lp_msg_hdr_init(&h, LP_MSG_HELLO, sizeof(struct lp_msg_hello));
  h.version = 77;
  cr_expect_eq(lp_msg_hdr_check(&h, LP_MSG_HELLO, sizeof(struct lp_msg_hello), why, sizeof(why)), -1);
}

Test(messages, link_info_fields) {
  char why[160];
  struct lp_link_info l = good_link();
  cr_expect_eq(lp_link_info_check(&l, 0, why, sizeof(why)), 0, "%s", why);
  cr_expect_eq(lp_link_info_check(&l, 2, why, sizeof(why)), 0);
  cr_expect_eq(lp_link_info_check(&l, 3, why, sizeof(why)), -1, "QP count mismatch accepted");
  l = good_link();
  l.nqps = 0;
  cr_expect_eq(lp_link_info_check(&l, 0, why, sizeof(why)), -1);
  l.nqps = LP_MAX_QPS + 1;
  cr_expect_eq(lp_link_info_check(&l, 0, why, sizeof(why)), -1);
  l = good_link();
  l.mtu = 9;
  cr_expect_eq(lp_link_info_check(&l, 0, why, sizeof(why)), -1);
  l = good_link();
  l.link_layer = 0;
  cr_expect_eq(lp_link_info_check(&l, 0, why, sizeof(why)), -1);
  l = good_link();
  l.lid = 0; /* IB without LID */
  cr_expect_eq(lp_link_info_check(&l, 0, why, sizeof(why)), -1);
  l.link_layer = IBV_LINK_LAYER_ETHERNET; /* fine on RoCE */
  cr_expect_eq(lp_link_info_check(&l, 0, why, sizeof(why)), 0, "%s", why);
  l = good_link();
  l.qpn[1] = 0;
  cr_expect_eq(lp_link_info_check(&l, 0, why, sizeof(why)), -1);
  l = good_link();
  l.qpn[0] = 0x1000000;
  cr_expect_eq(lp_link_info_check(&l, 0, why, sizeof(why)), -1);
  l = good_link();
  l.ctrl_rkey = 0;
  cr_expect_eq(lp_link_info_check(&l, 0, why, sizeof(why)), -1);
  l = good_link();
  memset(l.dev_name, 'x', sizeof(l.dev_name));
  cr_expect_eq(lp_link_info_check(&l, 0, why, sizeof(why)), -1, "unterminated name accepted");
}

Test(messages, accept_and_ready) {
  char why[160];
  struct lp_msg_accept a;
  memset(&a, 0, sizeof(a));
  lp_msg_hdr_init(&a.hdr, LP_MSG_ACCEPT, sizeof(a));
  a.conn_id = 9;
  strcpy(a.host, "node0");
  a.link = good_link();
  cr_expect_eq(lp_msg_accept_check(&a, 9, 2, why, sizeof(why)), 0, "%s", why);
  cr_expect_eq(lp_msg_accept_check(&a, 8, 2, why, sizeof(why)), -1);
  cr_expect_eq(lp_msg_accept_check(&a, 9, 1, why, sizeof(why)), -1);
  memset(a.host, 'h', sizeof(a.host));
  cr_expect_eq(lp_msg_accept_check(&a, 9, 2, why, sizeof(why)), -1);
  struct lp_msg_ready r;
  memset(&r, 0, sizeof(r));
  lp_msg_hdr_init(&r.hdr, LP_MSG_READY, sizeof(r));
  r.conn_id = 9;
  cr_expect_eq(lp_msg_ready_check(&r, 9, why, sizeof(why)), 0);
  cr_expect_eq(lp_msg_ready_check(&r, 10, why, sizeof(why)), -1);
  r.joined = 1;
  cr_expect_eq(lp_msg_ready_check(&r, 9, why, sizeof(why)), 0);
  r.joined = 2;
  cr_expect_eq(lp_msg_ready_check(&r, 9, why, sizeof(why)), -1, "joined = 2 accepted");
}
