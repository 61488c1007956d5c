/*
 * The receiving end's data path: posting receives and their clear-to-sends,
 * acting on write-with-immediate completions, the probe of quiet writes.
 */
#ifndef LP_RECV_H
#define LP_RECV_H

#include "comm.h"

ncclResult_t lp_recv_completion(struct lp_recv_comm *r, const struct ibv_wc *wc);
/* Post one irecv: receives and its clear-to-send.  *req NULL: no room now,
 * completions must free some (NCCL retries). */
ncclResult_t lp_recv_post(struct lp_recv_comm *r, int n, void **data, size_t *sizes, int *tags, void **mhandles,
                          struct lp_req **req);
ncclResult_t lp_recv_probe(struct lp_recv_comm *r, uint64_t now);
/* iflush: read one byte of `data` (registered as `mhandle`) through each
 * live device that delivered data since the last flush (the current one
 * if none), so the NIC's writes into GPU memory are visible.  *req NULL:
 * nothing to wait for. */
ncclResult_t lp_recv_flush(struct lp_recv_comm *r, void *data, void *mhandle, struct lp_req **req);
/* Reap flush reads and post those that had to wait (a flush path being
 * rebuilt); the request is done once every read of it was posted and
 * completed (failed ones too), or could not be made (warned). */
void lp_recv_flush_test(struct lp_recv_comm *r, struct lp_req *req);

#endif
