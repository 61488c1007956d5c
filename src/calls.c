/*
 * NCCL's calls on a connection: isend, irecv, test, iflush, the memory
 * registrations and close.  Each checks what NCCL handed it, lets a move in
 * progress run first (failover.h: nothing new goes out until the new path
 * is agreed), and otherwise hands the work to the transport (send.c,
 * recv.c).  A call that cannot go ahead now returns a NULL request after
 * one progress call, and NCCL retries.
 */
#include <limits.h>

#include "comm.h"
#include "recv.h"
#include "send.h"
#include "failover.h"
#include "idle_watch.h"
#include "linkpass.h"
#include "log.h"
#include "progress.h"

/* NCCL's proxy thread moves every connection of its GPU: it must never
 * wait on one.  isend, irecv and test find a comm the idle watch is in
 * (answering a move, which may wait for the old path's flushes) busy, and
 * return as for "not now": a NULL request, or not done.  NCCL calls again
 * and, meanwhile, the other comms.  Waiting there was seen at 1,024
 * connections: 100,000 sched_yield calls in 350 ms of a sweep on one
 * process's NCCL thread (docs/SCALE.md). */

/* Nothing to do now: use the call to move earlier work along, and notice a
 * peer that is gone. */
static ncclResult_t not_now(struct lp_comm *c, int progress) {
  ncclResult_t rc = progress ? lp_comm_progress(c) : ncclSuccess;
  return rc == ncclSuccess ? lp_comm_check_peer(c) : rc;
}

static ncclResult_t isend_entered(struct lp_comm *c, void *data, size_t size, int tag, void *mhandle, void **request) {
  if (c->error != ncclSuccess) return c->error;
  if (c->paused) return lp_comm_progress(c); /* moving: NCCL retries */
  struct lp_req *req;
  int progress;
  ncclResult_t rc = lp_send_match((struct lp_send_comm *)c, data, size, tag, mhandle, &req, &progress);
  if (rc != ncclSuccess) return rc;
  if (req == NULL) return not_now(c, progress);
  *request = req;
  return ncclSuccess;
}

ncclResult_t lp_isend(void *sendComm, void *data, size_t size, int tag, void *mhandle, void *phandle, void **request) {
  (void)phandle;
  *request = NULL;
  struct lp_comm *c = lp_comm_check(sendComm, LP_COMM_SEND);
  if (c == NULL) {
    LP_WARN("isend: invalid send comm %p", sendComm);
    return ncclInvalidArgument;
  }
  if (!lp_comm_try_enter(c)) return ncclSuccess; /* the idle watch is in it: not now (busy) */
  ncclResult_t rc = isend_entered(c, data, size, tag, mhandle, request);
  lp_comm_leave(c);
  return rc;
}

static ncclResult_t irecv_entered(struct lp_comm *c, int n, void **data, size_t *sizes, int *tags, void **mhandles,
                                  void **request) {
  if (c->error != ncclSuccess) return c->error;
  if (c->paused) return lp_comm_progress(c); /* moving: NCCL retries */
  struct lp_req *req;
  ncclResult_t rc = lp_recv_post((struct lp_recv_comm *)c, n, data, sizes, tags, mhandles, &req);
  if (rc != ncclSuccess) return rc;
  if (req == NULL) return not_now(c, 1);
  *request = req;
  return ncclSuccess;
}

ncclResult_t lp_irecv(void *recvComm, int n, void **data, size_t *sizes, int *tags, void **mhandles, void **phandles,
                      void **request) {
  (void)phandles;
  *request = NULL;
  struct lp_comm *c = lp_comm_check(recvComm, LP_COMM_RECV);
  if (c == NULL) {
    LP_WARN("irecv: invalid recv comm %p", recvComm);
    return ncclInvalidArgument;
  }
  if (!lp_comm_try_enter(c)) return ncclSuccess; /* busy */
  ncclResult_t rc = irecv_entered(c, n, data, sizes, tags, mhandles, request);
  lp_comm_leave(c);
  return rc;
}

/* The registration of the last receive that holds data, as NCCL's own
 * transport flushes; NULL with *rc ncclSuccess when none holds any. */
static struct lp_mr *flush_target(int n, int *sizes, void **mhandles, int *last, ncclResult_t *rc) {
  *rc = ncclSuccess;
  *last = -1;
  for (int i = 0; i < n; i++)
    if (sizes != NULL && sizes[i] > 0) *last = i;
  if (*last < 0) return NULL;
  struct lp_mr *m = mhandles != NULL ? mhandles[*last] : NULL;
  if (m == NULL || m->magic != LP_MR_MAGIC) {
    LP_WARN("iflush: receive %d of %d has no valid memory handle (%p)", *last, n, (void *)m);
    *rc = ncclInvalidArgument;
    return NULL;
  }
  return m;
}

ncclResult_t lp_iflush(void *recvComm, int n, void **data, int *sizes, void **mhandles, void **request) {
  *request = NULL; /* NULL: nothing to wait for */
  struct lp_comm *c = lp_comm_check(recvComm, LP_COMM_RECV);
  if (c == NULL) {
    LP_WARN("iflush: invalid recv comm %p", recvComm);
    return ncclInvalidArgument;
  }
  if (n < 0 || n > LP_MAX_RECVS) {
    LP_WARN("iflush: %d receives (1 to %d)", n, LP_MAX_RECVS);
    return ncclInvalidArgument;
  }
  int last;
  ncclResult_t rc;
  struct lp_mr *m = flush_target(n, sizes, mhandles, &last, &rc);
  /* The CPU sees the NIC's writes to host memory once the completion is
   * seen: only GPU memory needs the read.  Decided before entering the
   * comm, which the idle watch may hold for a move: a flush with nothing
   * to read never waits for it (nor reports a failed comm's error, which
   * NCCL's next test() of the receive does). */
  if (m == NULL || m->type != NCCL_PTR_CUDA || c->env->cfg.gdr_flush_disable) return rc;
  lp_comm_enter(c);
  rc = c->error != ncclSuccess ? c->error
                               : lp_recv_flush((struct lp_recv_comm *)c, data[last], m, (struct lp_req **)request);
  lp_comm_leave(c);
  return rc;
}

static int clamp_int(size_t v) { return v > INT_MAX ? INT_MAX : (int)v; }

/* test(): the one call that completes requests. */
ncclResult_t lp_test(void *request, int *done, int *sizes) {
  struct lp_req *req = request;
  *done = 0;
  if (req == NULL || !req->used || lp_comm_check(req->comm, 0) == NULL) {
    LP_WARN("test: invalid request %p", request);
    return ncclInvalidArgument;
  }
  struct lp_comm *c = req->comm;
  if (!lp_comm_try_enter(c)) return ncclSuccess; /* busy */
  if (req->type == LP_REQ_FLUSH) lp_recv_flush_test((struct lp_recv_comm *)c, req);
  if (!req->done) {
    ncclResult_t rc = lp_comm_progress(c);
    if (rc == ncclSuccess && !req->done) rc = lp_comm_check_peer(c);
    /* A request that completed before the comm failed is still done. */
    if (!req->done) {
      lp_comm_leave(c);
      return rc;
    }
  }
  *done = 1;
  if (sizes != NULL) {
    if (req->type == LP_REQ_RECV) {
      for (int i = 0; i < req->nsub; i++) sizes[i] = clamp_int(req->sizes[i]);
    } else {
      sizes[0] = clamp_int(req->size);
    }
  }
  lp_req_free(req);
  lp_comm_leave(c);
  return ncclSuccess;
}

/* Register for comm `c`, on the NIC it is on; from then on it moves only
 * where the buffer is registered too (narrowed at its first isend or irecv
 * only, a move before that could take it to a NIC that refused the buffer,
 * a dma-buf on a NIC without them, and its first use failed).  The comm is
 * held throughout: the idle watch may be moving it (idle_watch.h), and a
 * move between reading its NIC and narrowing where it may go had the same
 * effect.  The watch answers this comm's moves after the registration. */
static ncclResult_t register_for(struct lp_comm *c, void *data, size_t size, int type, int fd, uint64_t offset,
                                 void **mhandle) {
  lp_comm_enter(c);
  ncclResult_t rc =
      lp_mr_register(c->mrs, c->env, c->health, lp_link_dev(&c->link)->nic, data, size, type, fd, offset, mhandle);
  if (rc == ncclSuccess) lp_comm_uses(c, *mhandle);
  lp_comm_leave(c);
  return rc;
}

ncclResult_t lp_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle) {
  struct lp_comm *c = lp_comm_check(comm, 0);
  *mhandle = NULL;
  if (c == NULL) {
    LP_WARN("regMr: invalid comm %p", comm);
    return ncclInvalidArgument;
  }
  return register_for(c, data, size, type, -1, 0, mhandle);
}

ncclResult_t lp_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset, int fd, void **mhandle) {
  struct lp_comm *c = lp_comm_check(comm, 0);
  *mhandle = NULL;
  if (c == NULL) {
    LP_WARN("regMrDmaBuf: invalid comm %p", comm);
    return ncclInvalidArgument;
  }
  /* Host memory needs no dma-buf: register it the ordinary way. */
  return register_for(c, data, size, type, type == NCCL_PTR_HOST ? -1 : fd, offset, mhandle);
}

ncclResult_t lp_dereg_mr(void *comm, void *mhandle) {
  (void)comm; /* registrations belong to NICs, not comms: the comm may be gone */
  struct lp_mr *m = mhandle;
  if (m == NULL || m->magic != LP_MR_MAGIC) {
    LP_WARN("deregMr: invalid memory handle %p", mhandle);
    return ncclInvalidArgument;
  }
  return lp_mr_deregister(m);
}

/* closeSend / closeRecv.  The order matters: the idle watch may be in the
 * comm until it is off the list; failover state goes before the QPs it may
 * hold. */
static ncclResult_t close_comm(void *comm, int kind, const char *call) {
  struct lp_comm *c = lp_comm_check(comm, kind);
  if (c == NULL) {
    LP_WARN("%s: invalid %s comm %p", call, kind == LP_COMM_SEND ? "send" : "recv", comm);
    return ncclInvalidArgument;
  }
  if (c->fo != NULL && c->fo->watch != NULL) lp_idle_watch_remove(c->fo->watch, c);
  lp_fo_fini(c);
  lp_comm_destroy(c);
  return ncclSuccess;
}

ncclResult_t lp_close_send(void *sendComm) { return close_comm(sendComm, LP_COMM_SEND, "closeSend"); }

ncclResult_t lp_close_recv(void *recvComm) { return close_comm(recvComm, LP_COMM_RECV, "closeRecv"); }
