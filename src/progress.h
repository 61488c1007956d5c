/*
 * One progress call on a connection: what every NCCL call that waits runs
 * (test, and isend / irecv when they cannot go ahead), and what the idle
 * watch runs for a comm NCCL is not calling.  It composes the layers in
 * order: the completion queue (comm.c, error completions handed to
 * failover), the move protocol's control channel and health (failover.c),
 * the watchdog, then posting what waits.
 */
#ifndef LP_PROGRESS_H
#define LP_PROGRESS_H

#include "comm.h"

/* Returns the comm's state: ncclSuccess, or its sticky error. */
ncclResult_t lp_comm_progress(struct lp_comm *c);

/* Called right after lp_comm_progress when a request is waiting: notices
 * (rate-limited) that the peer closed the control socket, so a dead peer is
 * an error, not a hang.  Completions that arrived before it left still
 * count: they are drained first. */
ncclResult_t lp_comm_check_peer(struct lp_comm *c);

#endif
