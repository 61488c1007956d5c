/*
 * linkpass-perf: the connections of one rank, set up as NCCL's proxy does:
 * listen on every receive connection, exchange the handles out of band,
 * then poll connect() and accept() — all of them interleaved, since either
 * side may need the other to progress — until each returns a comm.
 */
#ifndef LINKPASS_PERF_MESH_H
#define LINKPASS_PERF_MESH_H

#include "netload.h"
#include "opts.h"
#include "xfer.h"

struct perf_mesh {
  int nranks, rank, channels;
  int devs[PERF_MAX_CHANNELS]; /* device of each channel */
  /* [channel * nranks + peer]; comm NULL where not needed */
  struct xconn *send, *recv;
};

/* Entries in send[] and recv[]. */
static inline size_t perf_mesh_nconns(const struct perf_mesh *m) { return (size_t)m->channels * (size_t)m->nranks; }

/* Which connections a run needs: ring neighbours, or everybody for alltoall. */
int perf_mesh_needs_send(enum perf_op op, int nranks, int rank, int peer);
int perf_mesh_needs_recv(enum perf_op op, int nranks, int rank, int peer);

/* Build every connection; `oob_fd` is the rendezvous.  0, or -1 with err. */
int perf_mesh_connect(struct perf_mesh *m, struct lp_net *net, const struct perf_opts *o, int oob_fd, char *err,
                      size_t errlen);
/* Close every comm (registrations must be gone already). */
void perf_mesh_close(struct perf_mesh *m, struct lp_net *net);

#endif
