/* Failover control messages: garbage from a peer or a stranger is refused. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "fo_wire.h"

static struct lp_link_info link_info(void) {
  struct lp_link_info l;
  memset(&l, 0, sizeof(l));
  l.link_layer = 1;
  l.mtu = 5;
  l.port = 1;
  l.nqps = 1;
  l.lid = 3;
  l.ctrl_addr = 0x10000;
  l.ctrl_rkey = 0x42;
  l.qpn[0] = 0x2001;
  snprintf(l.dev_name, sizeof(l.dev_name), "mlx5_1");
  return l;
}

static struct lp_fo_ack *ack_with(uint32_t npending, size_t *len) {
  static struct lp_fo_ack a;
  memset(&a, 0, sizeof(a));
  *len = lp_fo_ack_len(npending);
  lp_msg_hdr_init(&a.hdr, (enum lp_msg_type)LP_MSG_FO_ACK, *len);
  a.conn_id = 77;
  a.epoch = 1;
  a.npending = npending;
  a.resume_seq = 10;
  a.link = link_info();
  for (uint32_t i = 0; i < npending; i++) {
    a.pending[i].seq = 10 + i;
    a.pending[i].nreqs = 2;
    for (int k = 0; k < 2; k++) {
      a.pending[i].cts[k].seq = 10 + i;
      a.pending[i].cts[k].idx = (uint16_t)k;
      a.pending[i].cts[k].nreqs = 2;
    }
  }
  return &a;
}

Test(fo_wire, a_well_formed_ack_passes) {
  size_t len;
  struct lp_fo_ack *a = ack_with(3, &len);
  char why[160];
  cr_assert_eq(lp_fo_msg_check(a, len, 77, 1, why, sizeof(why)), LP_MSG_FO_ACK, "%s", why);
}

Test(fo_wire, wrong_connection_size_or_order_is_refused) {
  size_t len;
  char why[160];
  struct lp_fo_ack *a = ack_with(3, &len);
  cr_assert_eq(lp_fo_msg_check(a, len, 78, 1, why, sizeof(why)), -1);
  cr_assert(strstr(why, "another connection"), "%s", why);
  cr_assert_eq(lp_fo_msg_check(a, len - 1, 77, 1, why, sizeof(why)), -1, "length disagrees");
  a = ack_with(3, &len);
  a->pending[1].seq = 99;
  cr_assert_eq(lp_fo_msg_check(a, len, 77, 1, why, sizeof(why)), -1);
  cr_assert(strstr(why, "out of order"), "%s", why);
  a = ack_with(2, &len);
  a->pending[0].cts[1].idx = 0;
  cr_assert_eq(lp_fo_msg_check(a, len, 77, 1, why, sizeof(why)), -1);
  a = ack_with(1, &len);
  a->npending = 999;
  cr_assert_eq(lp_fo_msg_check(a, len, 77, 1, why, sizeof(why)), -1);
  a = ack_with(1, &len);
  a->link.nqps = 2; /* the connection has one QP per side */
  cr_assert_eq(lp_fo_msg_check(a, len, 77, 1, why, sizeof(why)), -1);
}

Test(fo_wire, garbage_headers_are_refused) {
  char junk[64];
  memset(junk, 0x41, sizeof(junk));
  char why[160];
  cr_assert_eq(lp_fo_msg_check(junk, sizeof(junk), 77, 1, why, sizeof(why)), -1);
  cr_assert(strstr(why, "magic"), "%s", why);
  cr_assert_eq(lp_fo_msg_check(junk, 3, 77, 1, why, sizeof(why)), -1);
  struct lp_fo_notice n;
  memset(&n, 0, sizeof(n));
  lp_msg_hdr_init(&n.hdr, (enum lp_msg_type)99, sizeof(n));
  n.conn_id = 77;
  cr_assert_eq(lp_fo_msg_check(&n, sizeof(n), 77, 1, why, sizeof(why)), -1);
  cr_assert(strstr(why, "unknown"), "%s", why);
  lp_msg_hdr_init(&n.hdr, (enum lp_msg_type)LP_MSG_FO_NOTICE, sizeof(n));
  n.reason = LP_FO_PORT_DOWN;
  cr_assert_eq(lp_fo_msg_check(&n, sizeof(n), 77, 1, why, sizeof(why)), LP_MSG_FO_NOTICE);
}

/* A notice or a request gives the reason that shows in the event lines
 * (reason=): one this end does not know is a peer's bug or a corrupt
 * message, refused as such, not a move with reason=unknown. */
Test(fo_wire, a_move_with_an_unknown_reason_is_refused) {
  struct lp_fo_notice n;
  char why[160];
  memset(&n, 0, sizeof(n));
  lp_msg_hdr_init(&n.hdr, (enum lp_msg_type)LP_MSG_FO_NOTICE, sizeof(n));
  n.conn_id = 77;
  cr_assert_eq(lp_fo_msg_check(&n, sizeof(n), 77, 1, why, sizeof(why)), -1, "reason 0 passed");
  cr_assert(strstr(why, "unknown reason"), "%s", why);
  n.reason = LP_FO_REASON_MAX;
  cr_assert_eq(lp_fo_msg_check(&n, sizeof(n), 77, 1, why, sizeof(why)), -1, "reason %d passed", LP_FO_REASON_MAX);
  n.reason = LP_FO_DEGRADED;
  cr_assert_eq(lp_fo_msg_check(&n, sizeof(n), 77, 1, why, sizeof(why)), LP_MSG_FO_NOTICE, "%s", why);
}

Test(fo_wire, reasons_have_names) {
  cr_assert_str_eq(lp_fo_reason_str(LP_FO_PORT_DOWN), "port_down");
  cr_assert_str_eq(lp_fo_reason_str(LP_FO_FAILBACK), "failback");
  cr_assert_str_eq(lp_fo_reason_str(0), "unknown");
  cr_assert_str_eq(lp_fo_reason_str(1000), "unknown");
}

Test(fo_wire, ready_is_checked_like_the_others) {
  struct lp_fo_ready r;
  char why[160];
  memset(&r, 0, sizeof(r));
  lp_msg_hdr_init(&r.hdr, (enum lp_msg_type)LP_MSG_FO_READY, sizeof(r));
  r.conn_id = 77;
  r.epoch = 3;
  cr_assert_eq(lp_fo_msg_check(&r, sizeof(r), 77, 1, why, sizeof(why)), LP_MSG_FO_READY, "%s", why);
  cr_assert_eq(lp_fo_msg_check(&r, sizeof(r), 78, 1, why, sizeof(why)), -1);
  cr_assert(strstr(why, "another connection"), "%s", why);
  lp_msg_hdr_init(&r.hdr, (enum lp_msg_type)LP_MSG_FO_READY, sizeof(r) - 4);
  cr_assert_eq(lp_fo_msg_check(&r, sizeof(r) - 4, 77, 1, why, sizeof(why)), -1, "a short READY");
}

/* A refusal says why: no NIC left, or the receiver's end failed. */
Test(fo_wire, a_refusal_names_a_known_cause) {
  struct lp_fo_nack n;
  char why[160];
  memset(&n, 0, sizeof(n));
  lp_msg_hdr_init(&n.hdr, (enum lp_msg_type)LP_MSG_FO_NACK, sizeof(n));
  n.conn_id = 77;
  n.reason = LP_FO_STALL;
  cr_assert_eq(lp_fo_msg_check(&n, sizeof(n), 77, 1, why, sizeof(why)), LP_MSG_FO_NACK, "%s", why);
  n.cause = LP_NACK_FAILED;
  cr_assert_eq(lp_fo_msg_check(&n, sizeof(n), 77, 1, why, sizeof(why)), LP_MSG_FO_NACK, "%s", why);
  n.cause = 2;
  cr_assert_eq(lp_fo_msg_check(&n, sizeof(n), 77, 1, why, sizeof(why)), -1);
  cr_assert(strstr(why, "refusal with cause 2"), "%s", why);
}

/* A MOVED is an ACK nobody asked for: checked the same way, and it must
 * name the standby it moved onto and refuse nothing; either says only 0
 * or 1 of the receiver's primary. */
Test(fo_wire, a_moved_is_checked_as_an_ack_and_names_its_standby) {
  size_t len;
  char why[160];
  struct lp_fo_ack *a = ack_with(2, &len);
  a->hdr.type = LP_MSG_FO_MOVED;
  a->standby = 5;
  a->primary_failed = 1;
  cr_assert_eq(lp_fo_msg_check(a, len, 77, 1, why, sizeof(why)), LP_MSG_FO_MOVED, "%s", why);
  a->pending[1].seq = 99;
  cr_assert_eq(lp_fo_msg_check(a, len, 77, 1, why, sizeof(why)), -1, "a MOVED's list is checked as an ACK's");
  a = ack_with(0, &len);
  a->hdr.type = LP_MSG_FO_MOVED;
  cr_assert_eq(lp_fo_msg_check(a, len, 77, 1, why, sizeof(why)), -1, "a MOVED without a standby passed");
  cr_assert(strstr(why, "standby"), "%s", why);
  a->standby = 5;
  a->refused = 1;
  cr_assert_eq(lp_fo_msg_check(a, len, 77, 1, why, sizeof(why)), -1, "a MOVED that refuses passed");
  a->refused = 0;
  a->primary_failed = 2;
  cr_assert_eq(lp_fo_msg_check(a, len, 77, 1, why, sizeof(why)), -1, "primary_failed = 2 passed");
  cr_assert(strstr(why, "primary_failed = 2"), "%s", why);
  a = ack_with(0, &len);
  a->primary_failed = 1;
  cr_assert_eq(lp_fo_msg_check(a, len, 77, 1, why, sizeof(why)), LP_MSG_FO_ACK, "%s", why);
  a->primary_failed = 3;
  cr_assert_eq(lp_fo_msg_check(a, len, 77, 1, why, sizeof(why)), -1, "an ACK with primary_failed = 3 passed");
}

/* The sender keeps the receiver's latest word on its primary: a flag left
 * at "not trusted" by an earlier answer held a failback back for good. */
Test(fo_wire, every_answer_but_a_refusal_sets_the_senders_word_on_the_primary) {
  size_t len;
  struct lp_fo_ack *a = ack_with(0, &len);
  int ok = 1;
  a->primary_failed = 1;
  cr_assert_eq(lp_fo_take_primary_word(a, &ok), 0);
  cr_assert_eq(ok, 0, "an answer off an untrusted primary clears it");
  a->primary_failed = 0;
  cr_assert_eq(lp_fo_take_primary_word(a, &ok), 1, "the primary became usable: failing back is to be looked at");
  cr_assert_eq(ok, 1, "an answer that says the primary is trusted sets it again");
  cr_assert_eq(lp_fo_take_primary_word(a, &ok), 0, "already usable: nothing new to look at");
  cr_assert_eq(ok, 1);
  a->primary_failed = 1;
  lp_fo_take_primary_word(a, &ok);
  a->refused = 1;
  a->primary_failed = 0;
  cr_assert_eq(lp_fo_take_primary_word(a, &ok), 0);
  cr_assert_eq(ok, 0, "a refused ACK says nothing of the primary");
}
