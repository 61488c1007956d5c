/*
 * A connection's resources on one NIC: its CQ, QPs and the registration of
 * its control memory, with what each end told the other.  A connection has
 * one link at a time; a move builds a second one elsewhere and switches to
 * it, which is why nothing outside the link refers to a QP or key directly.
 */
#ifndef LP_LINK_H
#define LP_LINK_H

#include <infiniband/verbs.h>
#include <stddef.h>

#include "env.h"
#include "health.h"
#include "linkpass/nccl_net.h"
#include "wire.h"

#define LP_SQ_DEPTH 512  /* send WRs per QP, as NCCL */
#define LP_RQ_DEPTH 256  /* receive WRs per QP */
#define LP_POLL_BATCH 16 /* completions taken from a CQ per ibv_poll_cq */
/* NCCL_IB_USE_INLINE: inline room asked for on a receiver's QPs, enough for
 * the clear-to-sends of an irecv of up to four sub-receives (a larger one
 * goes through the control memory's key as without the setting). */
#define LP_INLINE_CTS_BYTES (4 * sizeof(struct lp_cts))

struct lp_link {
  const struct lp_env *env; /* set by lp_link_open */
  /* Counted on its device from open to close (the spread of moves,
   * health.h): a sender's offered path counts before the peer answers. */
  struct lp_health *health; /* NULL: not counted (failover off) */
  enum lp_dir dir;
  int dev; /* index in env->devs */
  struct ibv_cq *cq;
  int nqps;
  struct ibv_qp *qps[LP_MAX_QPS];
  int sq_free[LP_MAX_QPS];    /* send-queue slots not yet known complete */
  int unsignaled[LP_MAX_QPS]; /* WRs posted since the last signaled one */
  int rq_owed;                /* receive WRs posted and not yet completed (delivered or flushed) */
  struct ibv_mr *ctrl_mr;     /* the comm's control memory on this NIC */
  int max_inline;             /* bytes a WR may carry inline (NCCL_IB_USE_INLINE), 0: none */
  int adaptive;               /* NCCL_IB_ADAPTIVE_ROUTING on this port: large messages split */
  struct lp_link_info local;  /* what we told the peer */
  struct lp_link_info remote; /* what the peer told us */
};

/* Create CQ, QPs (in INIT) on device `dev` and register the connection's
 * control memory `ctrl` there; `remote_off`: where in it the peer writes
 * (advertised as ctrl_addr).  With `health`, the link counts as a `dir`
 * end on `dev` until it is closed. */
ncclResult_t lp_link_open(struct lp_link *link, const struct lp_env *env, struct lp_health *health, enum lp_dir dir,
                          int dev, int nqps, void *ctrl, size_t ctrl_len, size_t remote_off);
/* A link left stopped (its QPs in ERR) made ready to connect again, as
 * lp_link_open leaves a new one: every QP reset and back to INIT, with the
 * same QP numbers and control memory key, its CQ emptied, the port's
 * address read again, counted on `health` if not NULL.  Creating QPs and
 * registering memory cost a ConnectX about a millisecond each; this is four
 * state changes.  On failure the link is still only fit to be closed. */
ncclResult_t lp_link_revive(struct lp_link *link, struct lp_health *health);
/* Bring every QP to RTS towards `link->remote`; with ECE offered by both
 * ends, each QP first takes the peer's offer (the device keeps what both
 * support) and `link->local` then says what was agreed. */
ncclResult_t lp_link_connect(struct lp_link *link, int traffic_class);
/* Connect every QP to itself (the flush's loopback reads, flush.h), with
 * its own transport timer rather than NCCL_IB_TIMEOUT / _RETRY_CNT. */
ncclResult_t lp_link_loopback(struct lp_link *link, int timeout, int retry_cnt);
void lp_link_close(struct lp_link *link);
/* It no longer counts as an end on its device (a path being left). */
void lp_link_uncount(struct lp_link *link);
const struct lp_dev *lp_link_dev(const struct lp_link *link);
const struct lp_nic *lp_link_nic(const struct lp_link *link);

#endif
