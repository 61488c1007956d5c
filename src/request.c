/* test(): the one call that completes requests. */
#include <limits.h>

#include "comm.h"
#include "log.h"

static int clamp_int(size_t v) { return v > INT_MAX ? INT_MAX : (int)v; }

ncclResult_t lp_test(void *request, int *done, int *sizes) {
  struct lp_req *req = request;
  *done = 0;
  if (req == NULL || !req->used || lp_comm_check(req->comm, 0) == NULL) {
    LP_WARN("test: invalid request %p", request);
    return ncclInvalidArgument;
  }
  struct lp_comm *c = req->comm;
  lp_comm_enter(c);
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
