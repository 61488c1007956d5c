/* A connection's standby path (standby.h). */
#include "standby.h"

#include <string.h>

#include "clock.h"
#include "health.h"
#include "log.h"

/* The standby's link: a link of the connection that does not count as one
 * of its ends (health NULL) until a move takes it. */
static int open_link(struct lp_comm *c, struct lp_standby *sb, int dev, int nqps) {
  return lp_link_open(&sb->link, c->env, NULL, lp_comm_dir(c), dev, nqps, c->ctrl, c->ctrl_len,
                      lp_comm_ctrl_remote_off(c)) == ncclSuccess
             ? 0
             : -1;
}

/* READY standbys are counted on their device (the metrics file). */
static void set_state(struct lp_comm *c, struct lp_standby *sb, enum lp_sb_state st) {
  if ((sb->state == LP_SB_READY) != (st == LP_SB_READY))
    atomic_fetch_add_explicit(&c->health->standby_ready[sb->link.dev], st == LP_SB_READY ? 1 : -1,
                              memory_order_relaxed);
  sb->state = st;
}

/* Claim a device for the standby of the path on `from`, open its link. */
static int claim_and_open(struct lp_comm *c, struct lp_standby *sb, int primary, int prefer, int nqps) {
  enum lp_dir dir = lp_comm_dir(c);
  int from = c->link.dev;
  int dev = lp_health_claim_standby(c->health, dir, primary, from, prefer, c->mr_nics);
  if (dev < 0) return -1;
  if (open_link(c, sb, dev, nqps) != 0) {
    lp_health_standby_release(c->health, dir, from, dev);
    return -1;
  }
  sb->from = from;
  return 0;
}

int lp_sb_offer(struct lp_comm *c, struct lp_standby *sb, int primary, struct lp_fo_sb_offer *m) {
  lp_sb_drop(c, sb);
  if (claim_and_open(c, sb, primary, -1, c->link.nqps) != 0) return -1;
  set_state(c, sb, LP_SB_OFFERED);
  sb->offered_ns = lp_now_ns();
  sb->id++;
  memset(m, 0, sizeof(*m));
  lp_msg_hdr_init(&m->hdr, (enum lp_msg_type)LP_MSG_FO_SB_OFFER, sizeof(*m));
  m->conn_id = c->conn_id;
  m->id = sb->id;
  m->rail = sb->link.dev;
  m->link = sb->link.local;
  return 0;
}

void lp_sb_asked(struct lp_comm *c, struct lp_standby *sb, const struct lp_fo_sb_offer *m) {
  lp_sb_drop(c, sb);
  sb->asked = *m;
  set_state(c, sb, LP_SB_ASKED);
}

void lp_sb_answer(struct lp_comm *c, struct lp_standby *sb, int primary, struct lp_fo_sb_answer *a) {
  const struct lp_fo_sb_offer *m = &sb->asked;
  set_state(c, sb, LP_SB_NONE);
  memset(a, 0, sizeof(*a));
  lp_msg_hdr_init(&a->hdr, (enum lp_msg_type)LP_MSG_FO_SB_ANSWER, sizeof(*a));
  a->conn_id = c->conn_id;
  a->id = m->id;
  if (claim_and_open(c, sb, primary, m->rail, m->link.nqps) != 0) return;
  sb->link.remote = m->link;
  if (lp_link_connect(&sb->link, c->traffic_class) != ncclSuccess) {
    lp_sb_drop(c, sb);
    return;
  }
  set_state(c, sb, LP_SB_READY);
  sb->id = m->id;
  a->ok = 1;
  a->link = sb->link.local;
}

int lp_sb_on_answer(struct lp_comm *c, struct lp_standby *sb, const struct lp_fo_sb_answer *a) {
  if (sb->state != LP_SB_OFFERED || a->id != sb->id) return 0; /* dropped or offered anew since */
  if (!a->ok) {
    lp_sb_drop(c, sb);
    return 0;
  }
  sb->link.remote = a->link;
  if (lp_link_connect(&sb->link, c->traffic_class) != ncclSuccess) {
    lp_sb_drop(c, sb);
    return 0;
  }
  set_state(c, sb, LP_SB_READY);
  return 1;
}

int lp_sb_usable(const struct lp_comm *c, const struct lp_standby *sb, int avoid) {
  return sb->state == LP_SB_READY && sb->link.dev != avoid && lp_health_ok(c->health, sb->link.dev) &&
         lp_comm_may_use(c, sb->link.dev);
}

void lp_sb_take(struct lp_comm *c, struct lp_standby *sb, struct lp_link *out) {
  enum lp_dir dir = lp_comm_dir(c);
  set_state(c, sb, LP_SB_NONE);
  lp_health_standby_release(c->health, dir, sb->from, sb->link.dev);
  *out = sb->link;
  out->health = c->health;
  lp_health_load_add(c->health, dir, out->dev, 1);
  memset(&sb->link, 0, sizeof(sb->link));
}

void lp_sb_set_aside(struct lp_comm *c, struct lp_standby *sb, struct lp_link *out) {
  set_state(c, sb, LP_SB_NONE);
  memset(out, 0, sizeof(*out));
  if (sb->link.env != NULL) {
    lp_health_standby_release(c->health, lp_comm_dir(c), sb->from, sb->link.dev);
    *out = sb->link;
    memset(&sb->link, 0, sizeof(sb->link));
  }
}

void lp_sb_drop(struct lp_comm *c, struct lp_standby *sb) {
  struct lp_link l;
  lp_sb_set_aside(c, sb, &l);
  lp_link_close(&l);
}
