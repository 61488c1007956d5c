/*
 * The flush of GPU memory (iflush): with GPUDirect RDMA, the NIC's PCIe
 * writes into GPU memory may still be on their way when their completion
 * is seen; a read through the same NIC forces them out.  As NCCL's own
 * transport: per device a QP connected to itself, which reads one byte of
 * the received buffer into a sink.  A receive comm keeps one flush path
 * per device it flushed through, made on first use; a flush path is not a
 * data path: its errors never move the connection.
 */
#ifndef LP_FLUSH_H
#define LP_FLUSH_H

#include <stdint.h>

#include "env.h"
#include "link.h"

struct lp_flush_path;

struct lp_flush {
  struct lp_flush_path *path[LP_MAX_DEVS];
  uint64_t warned;                /* bit d: a failure through device d said, no read completed since */
  uint64_t retry_ns[LP_MAX_DEVS]; /* no new path through d before then (a failure's back-off) */
};

/* Read one byte at `addr` (key `rkey` on `dev`'s NIC) through `dev`:
 * *reads counts it now, and its completion (lp_flush_poll) takes it off.
 * ncclInProgress: not now (the path is full, or broken with reads still
 * to reap before it is rebuilt): post again later.  ncclSystemError: no
 * read can be made through `dev` (said in a WARN). */
ncclResult_t lp_flush_post(struct lp_flush *f, const struct lp_env *env, int dev, uint64_t addr, uint32_t rkey,
                           int *reads);
/* Reap the completions of every flush path; a failed read is logged and
 * counts as done (the data was delivered; only its visibility is at stake),
 * and its path is rebuilt on its next use. */
void lp_flush_poll(struct lp_flush *f);
void lp_flush_close(struct lp_flush *f);

#endif
