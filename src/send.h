/*
 * The sending end's data path: matching isends against the receiver's
 * clear-to-sends, posting RDMA writes, acting on their completions.
 */
#ifndef LP_SEND_H
#define LP_SEND_H

#include "comm.h"

ncclResult_t lp_send_progress(struct lp_send_comm *s);
ncclResult_t lp_send_completion(struct lp_send_comm *s, const struct ibv_wc *wc);
/* Match one isend against the receiver's clear-to-sends.  *req NULL: not
 * now (NCCL retries); *progress then says whether completions may help
 * (no clear-to-send yet) or only time (no receive of this tag yet). */
ncclResult_t lp_send_match(struct lp_send_comm *s, void *data, size_t size, int tag, void *mhandle, struct lp_req **req,
                           int *progress);

#endif
