/*
 * The exactly-once core of a move (failover.h has the protocol): what the
 * receiver tells the sender in its ACK, and what the sender completes and
 * writes again from it.  Pure functions of a connection's state and an
 * ACK, unit-tested from both ends (tests/failover/test_reconcile*.c).
 */
#ifndef LP_RECONCILE_H
#define LP_RECONCILE_H

#include <stdint.h>

#include "comm.h"
#include "fo_wire.h"
#include "linkpass/nccl_net.h"

/* The sender's half of a move's reconciliation (exposed for unit tests):
 * everything below the ACK's resume_seq was delivered and completes; every
 * matched message from there on is keyed for the receiver's new NIC and
 * written again, whole.  Counts what is replayed. */
ncclResult_t lp_fo_sender_reconcile(struct lp_send_comm *s, const struct lp_fo_ack *a, int *replayed, uint64_t *bytes);
/* The receiver's half (exposed for unit tests): the ACK's resume_seq (its
 * first message not complete) and the CTS entries of every message from
 * there on, keyed for device `dev`'s NIC; adds their bytes to *bytes.
 * Fails the connection when a message has no request or a buffer no key
 * on that NIC.  Posts nothing. */
ncclResult_t lp_fo_receiver_reconcile(struct lp_recv_comm *r, int dev, struct lp_fo_ack *a, uint64_t *bytes);

/* The receiver re-posts the receive of every message the ACK lists, once
 * per QP of its new path. */
ncclResult_t lp_fo_post_replays(struct lp_recv_comm *r, struct lp_link *next, const struct lp_fo_ack *a);

#endif
