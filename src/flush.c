/* The flush of GPU memory (flush.h). */
#include "flush.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"

/* A loopback read needs no long retry budget: 16.8 ms x (3 + 1) at most
 * when the port is down, instead of the data path's NCCL_IB_TIMEOUT. */
#define LP_FLUSH_TIMEOUT 12
#define LP_FLUSH_RETRY_CNT 3
#define LP_FLUSH_DEPTH 64 /* reads in flight on one path (NCCL flushes one receive at a time) */

struct lp_flush_path {
  struct lp_link link; /* one QP, connected to itself */
  uint32_t sink;       /* where the byte lands: the link's control memory */
  int outstanding;     /* reads posted and not yet reaped */
  int broken;          /* a read failed: rebuilt once nothing is outstanding */
};

static void path_close(struct lp_flush *f, int dev) {
  struct lp_flush_path *p = f->path[dev];
  if (p == NULL) return;
  lp_link_close(&p->link);
  free(p);
  f->path[dev] = NULL;
}

/* A path that could not be made, or whose post the NIC refused, is tried
 * again after this long: a flush in between reads nothing through that
 * device (said once until a read completes there again). */
#define LP_FLUSH_RETRY_NS (1000ull * 1000 * 1000)

/* No read through `dev` for a while: `what` went wrong, said once until a
 * read completes there again. */
static void path_failed(struct lp_flush *f, const struct lp_env *env, int dev, const char *what) {
  f->retry_ns[dev] = lp_now_ns() + LP_FLUSH_RETRY_NS;
  if (f->warned >> dev & 1u) return;
  f->warned |= 1ull << dev;
  LP_WARN(
      "iflush: %s through %s:%d: received data may not yet be visible to the GPU when NCCL uses it; flushes "
      "through it are tried again in 1 s",
      what, env->devs[dev].name, env->devs[dev].port);
}

/* Reap every completion of one path; a failed read is logged once per
 * breakage and counts as done (flush.h). */
static void path_poll(struct lp_flush *f, int dev) {
  struct lp_flush_path *p = f->path[dev];
  struct ibv_wc wc[8];
  int n;
  while (p->outstanding > 0 && (n = ibv_poll_cq(p->link.cq, 8, wc)) > 0) {
    for (int i = 0; i < n; i++) {
      int *reads = (int *)(uintptr_t)wc[i].wr_id;
      if (wc[i].status == IBV_WC_SUCCESS) {
        f->warned &= ~(1ull << dev);
      } else if (!p->broken) {
        LP_WARN(
            "iflush: the read through %s:%u failed (%s): the received data is delivered but may not yet be "
            "visible to the GPU; the flush path is rebuilt for the next flush",
            p->link.local.dev_name, p->link.local.port, lp_ibv_wc_status(&p->link.env->ibv, wc[i].status));
        p->broken = 1;
      }
      p->outstanding--;
      (*reads)--;
    }
  }
}

/* The path to read through now: NULL with *later set while a broken path
 * still has reads to reap before it can be rebuilt. */
static struct lp_flush_path *path_open(struct lp_flush *f, const struct lp_env *env, int dev, int *later) {
  struct lp_flush_path *p = f->path[dev];
  *later = 0;
  if (p != NULL && p->broken) path_poll(f, dev); /* a broken QP flushes all it holds at once */
  if (p != NULL && p->broken && p->outstanding == 0) path_close(f, dev);
  if ((p = f->path[dev]) != NULL) {
    *later = p->broken || p->outstanding >= LP_FLUSH_DEPTH;
    return *later ? NULL : p;
  }
  if (f->retry_ns[dev] != 0 && lp_now_ns() < f->retry_ns[dev]) return NULL;
  p = calloc(1, sizeof(*p));
  if (p == NULL) goto fail;
  if (lp_link_open(&p->link, env, NULL, LP_DIR_RECV, dev, 1, &p->sink, sizeof(p->sink), 0) != ncclSuccess)
    goto fail_free;
  if (lp_link_loopback(&p->link, LP_FLUSH_TIMEOUT, LP_FLUSH_RETRY_CNT) != ncclSuccess) goto fail_close;
  f->path[dev] = p;
  f->retry_ns[dev] = 0;
  return p;
fail_close:
  lp_link_close(&p->link);
fail_free:
  free(p);
fail:
  path_failed(f, env, dev, "no flush path could be made");
  return NULL;
}

ncclResult_t lp_flush_post(struct lp_flush *f, const struct lp_env *env, int dev, uint64_t addr, uint32_t rkey,
                           int *reads) {
  int later;
  struct lp_flush_path *p = path_open(f, env, dev, &later);
  if (p == NULL) return later ? ncclInProgress : ncclSystemError;
  /* The completion finds its request's count through the work request id. */
  struct ibv_sge sge = {.addr = (uintptr_t)&p->sink, .length = 1, .lkey = p->link.ctrl_mr->lkey};
  struct ibv_send_wr wr = {.wr_id = (uintptr_t)reads,
                           .sg_list = &sge,
                           .num_sge = 1,
                           .opcode = IBV_WR_RDMA_READ,
                           .send_flags = IBV_SEND_SIGNALED};
  wr.wr.rdma.remote_addr = addr;
  wr.wr.rdma.rkey = rkey;
  struct ibv_send_wr *bad = NULL;
  int err = ibv_post_send(p->link.qps[0], &wr, &bad);
  if (err != 0) {
    char what[96];
    snprintf(what, sizeof(what), "posting the read failed (%s)", strerror(err));
    path_failed(f, env, dev, what);
    p->broken = 1;
    return ncclSystemError;
  }
  p->outstanding++;
  (*reads)++;
  return ncclSuccess;
}

void lp_flush_poll(struct lp_flush *f) {
  for (int d = 0; d < LP_MAX_DEVS; d++)
    if (f->path[d] != NULL) path_poll(f, d);
}

void lp_flush_close(struct lp_flush *f) {
  for (int d = 0; d < LP_MAX_DEVS; d++) path_close(f, d);
}
