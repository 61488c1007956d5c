/*
 * linkpass-perf: collectives compiled into per-channel message lists.
 *
 * The rings follow NCCL's ring algorithms step for step (all_reduce:
 * send, recvReduceSend x n-2, recvReduceCopySend, recvCopySend x n-2, recv),
 * over NCCL's loop of chunks split across channels, each chunk cut into
 * messages of at most one slot.  Every rank derives the same plan from the
 * same options, so the n-th message a rank sends on a connection is the
 * n-th one its neighbour expects.
 */
#ifndef LINKPASS_PERF_COLL_H
#define LINKPASS_PERF_COLL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "opts.h"
#include "report.h"
#include "xfer.h"

struct coll_plan {
  enum perf_op op;
  enum perf_dtype dtype;
  enum perf_redop redop;
  int nranks, rank, channels;
  size_t step;        /* bytes per message at most */
  size_t chunk_bytes; /* per block and channel per loop (NCCL's chunkSize) */
  char *sendbuf, *recvbuf;
  struct perf_counts counts;
};

/* Channels a plan needs: one per channel for the ring algorithms and
 * sendrecv; channels * nranks for alltoall, indexed [c * nranks + peer]
 * (the entry of the rank itself stays empty). */
int coll_nchans(enum perf_op op, int nranks, int channels);
/* Peer of the send (and receive) connection of chans[i]. */
int coll_send_peer(enum perf_op op, int nranks, int rank, int channels, int i);
int coll_recv_peer(enum perf_op op, int nranks, int rank, int channels, int i);

/* Fill the channels' lists (connections are left as they are). */
int coll_build(const struct coll_plan *p, struct xchan *chans);
/* The part of a collective that never crosses the network (a rank's own
 * block of all_gather / alltoall). */
void coll_local(const struct coll_plan *p);
/* Write this rank's input for `seed`. */
void coll_fill(const struct coll_plan *p, uint64_t seed);
/* Count wrong output elements for `seed`, reporting a few to `log`. */
size_t coll_check(const struct coll_plan *p, uint64_t seed, FILE *log, const char *who);

#endif
