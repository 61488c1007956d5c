/* Comm lifetime, requests, failure reporting, posting, the peer check. */
#include <errno.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "clock.h"
#include "log.h"

struct lp_req *lp_comm_reqs(struct lp_comm *comm, int *n) {
  if (comm->kind == LP_COMM_SEND) {
    *n = LP_MAX_SEND_REQS;
    return ((struct lp_send_comm *)comm)->reqs;
  }
  *n = LP_MAX_REQS;
  return ((struct lp_recv_comm *)comm)->reqs;
}

struct lp_req *lp_req_alloc(struct lp_comm *comm) {
  int n;
  struct lp_req *pool = lp_comm_reqs(comm, &n);
  for (int i = 0; i < n; i++) {
    struct lp_req *r = &pool[i];
    if (!r->used) {
      /* The header only: what the union holds is written by the request's
       * kind (recv.c, send.c) before it is read. */
      r->comm = comm;
      r->type = 0;
      r->used = 1;
      r->done = 0;
      r->nsub = 0;
      r->events = 0;
      r->seq = 0;
      r->size = 0;
      return r;
    }
  }
  return NULL;
}

void lp_req_free(struct lp_req *req) { req->used = 0; }

ncclResult_t lp_comm_fail(struct lp_comm *comm, ncclResult_t err, const char *fmt, ...) {
  if (comm->error != ncclSuccess) return comm->error;
  comm->error = err;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  const struct lp_link_info *l = &comm->link.local;
  LP_WARN("%s connection 0x%llx on %s:%u to %s: %s", comm->kind == LP_COMM_SEND ? "send" : "recv",
          (unsigned long long)comm->conn_id, l->dev_name, l->port, comm->peer, msg);
  return err;
}

void lp_send_msg_unmeter(struct lp_comm *c, struct lp_send_msg *m, int finished, uint64_t now) {
  if (!m->metered) return;
  int dev = m->metered - 1;
  uint64_t bytes = 0;
  for (int i = 0; finished && dev == c->link.dev && i < m->nreqs; i++) bytes += m->sub[i].size;
  lp_health_tx_end(c->health, dev, bytes, now);
  m->metered = 0;
  c->metered--;
}

int lp_comm_awaits_move(struct lp_comm *comm, void *mhandle) {
  const struct lp_mr *m = mhandle;
  int nic = comm->env->devs[comm->link.dev].nic;
  if (comm->fo == NULL || m == NULL || m->magic != LP_MR_MAGIC || m->nics == 0 || !(m->dead_nics >> nic & 1u)) return 0;
  /* Confirmed: the NIC's fatal error was read, or its port is no longer
   * healthy (a NIC whose events cannot be read is found by polling). */
  int confirmed = lp_health_nic_fatal(comm->health, nic) || !lp_health_ok(comm->health, comm->link.dev);
  if (!confirmed && lp_now_ns() - m->made_ns > LP_MR_DEAD_WAIT_NS) {
    LP_WARN(
        "%s answered EIO when %p+%zu was registered, and has reported no fatal error in the %llu s since: the "
        "connection to %s does not move, and cannot use the buffer",
        comm->link.local.dev_name, (void *)m->addr, m->len, LP_MR_DEAD_WAIT_NS / 1000000000ull, comm->peer);
    return 0;
  }
  lp_comm_uses(comm, mhandle);
  return 1;
}

void lp_comm_destroy(struct lp_comm *comm) {
  if (comm == NULL) return;
  if (comm->kind == LP_COMM_SEND) { /* messages NCCL left in flight: their NIC is not busy with them any more */
    uint64_t now = lp_now_ns();
    for (int i = 0; i < LP_FIFO_DEPTH; i++) lp_send_msg_unmeter(comm, &((struct lp_send_comm *)comm)->msgs[i], 0, now);
  }
  if (comm->kind == LP_COMM_RECV) lp_flush_close(&((struct lp_recv_comm *)comm)->flush);
  lp_link_close(&comm->link);
  free(comm->ctrl);
  lp_ctl_close(&comm->ctl);
  comm->magic = 0;
  free(comm);
}

int lp_comm_busy(const struct lp_comm *comm) {
  for (int q = 0; q < comm->link.nqps; q++)
    if (lp_comm_signaled_outstanding(comm, q) > 0) return 1;
  return 0;
}

/* Signal WR w as the chain's rules say and count it against QP q's
 * credits; 1 when it is signaled with none outstanding (the watchdog's
 * clock starts once it is posted). */
static int stage(struct lp_comm *c, int q, struct ibv_send_wr *w, enum lp_wr_kind kind, int every, int force,
                 uint64_t seq) {
  struct lp_link *link = &c->link;
  int was_idle = lp_comm_signaled_outstanding(c, q) == 0;
  int signal = force || link->unsignaled[q] + 1 >= every || link->sq_free[q] - 1 < LP_SIGNAL_EVERY;
  if (signal) {
    w->send_flags |= IBV_SEND_SIGNALED;
    w->wr_id = lp_wrid(kind, q, (unsigned)link->unsignaled[q] + 1, seq);
  } else {
    w->wr_id = 0;
  }
  link->sq_free[q]--;
  link->unsignaled[q] = signal ? 0 : link->unsignaled[q] + 1;
  return signal && was_idle;
}

/* Post the n linked WRs from `first` (their kinds in `kinds`, for the error). */
static ncclResult_t ring(struct lp_comm *c, int q, struct ibv_send_wr *first, const enum lp_wr_kind *kinds, int n,
                         int arm) {
  static const char *const what[] = {
      [LP_WR_DATA] = "data", [LP_WR_FINAL] = "final write", [LP_WR_CTS] = "clear-to-send"};
  struct ibv_send_wr *bad = NULL;
  int err = ibv_post_send(c->link.qps[q], first, &bad);
  if (err != 0) { /* the comm fails: what went out before `bad` no longer matters */
    int i = 0;
    for (struct ibv_send_wr *w = first; w != NULL && w != bad; w = w->next) i++;
    if (i >= n) i = 0;
    return lp_comm_fail(c, ncclSystemError, "ibv_post_send (%s, %d of %d) on qp 0x%x failed: %s", what[kinds[i]], i + 1,
                        n, c->link.qps[q]->qp_num, strerror(err));
  }
  if (arm && lp_watchdog_on(&c->wd)) lp_watchdog_armed(&c->wd);
  return ncclSuccess;
}

ncclResult_t lp_comm_chain_add(struct lp_comm *c, struct lp_chain *ch, const struct ibv_send_wr *wr,
                               const struct ibv_sge *sge, enum lp_wr_kind kind, int every, int force, uint64_t seq) {
  if (ch->n == LP_CHAIN_MAX) {
    ncclResult_t rc = lp_comm_chain_post(c, ch);
    if (rc != ncclSuccess) return rc;
  }
  int i = ch->n++;
  struct ibv_send_wr *w = &ch->wr[i];
  *w = *wr;
  w->next = NULL;
  if (i > 0) ch->wr[i - 1].next = w;
  if (sge != NULL) {
    ch->sge[i] = *sge;
    w->sg_list = &ch->sge[i];
    w->num_sge = 1;
  }
  ch->kind[i] = kind;
  ch->arm |= stage(c, ch->q, w, kind, every, force, seq);
  return ncclSuccess;
}

ncclResult_t lp_comm_chain_post(struct lp_comm *c, struct lp_chain *ch) {
  if (ch->n == 0) return ncclSuccess;
  int n = ch->n, arm = ch->arm;
  lp_chain_init(ch, ch->q);
  return ring(c, ch->q, &ch->wr[0], ch->kind, n, arm);
}

ncclResult_t lp_comm_post(struct lp_comm *c, int q, struct ibv_send_wr *wr, enum lp_wr_kind kind, int every, int force,
                          uint64_t seq) {
  int arm = stage(c, q, wr, kind, every, force, seq);
  return ring(c, q, wr, &kind, 1, arm);
}

int lp_comm_peer_gone(struct lp_comm *comm, int *err) {
  comm->peer_check_ns = comm->progress_ns; /* callers progressed just before */
  return lp_ctl_peer_gone(&comm->ctl, comm->peer, err);
}
