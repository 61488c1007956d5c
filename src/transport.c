/* One transport step on a connection (transport.h). */
#include "transport.h"

ncclResult_t lp_transport_completion(struct lp_comm *comm, const struct ibv_wc *wc) {
  return comm->kind == LP_COMM_SEND ? lp_send_completion((struct lp_send_comm *)comm, wc)
                                    : lp_recv_completion((struct lp_recv_comm *)comm, wc);
}
