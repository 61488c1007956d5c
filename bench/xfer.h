/*
 * linkpass-perf: the pipelined transfer engine, NCCL's proxy in miniature.
 *
 * A channel is one send connection and one receive connection, used by no
 * other channel of a run (sends are counted per connection).  A collective
 * is compiled (coll.c) into an ordered list of messages per direction; a
 * received message may be reduced with local data and stored, and may be
 * forwarded by a later send of the same channel (the ring's recvReduceSend).
 *
 * Each connection owns `slots` buffers of `step` bytes registered with the
 * plugin (NCCL_STEPS buffers of the Simple protocol): up to `slots` receives
 * are posted ahead, a slot is re-posted only after its data was consumed, and
 * a send slot is refilled only after its previous send completed.  With -R 1
 * user buffers are registered instead and used in place where no reduction
 * is needed (zero copy).  isend/irecv returning a NULL request means "not
 * now" and is retried; test() is polled on the oldest request.
 *
 * A run repeats the lists `reps` times back to back, as nccl-tests launches
 * its timed iterations without waiting in between.  Stream order is kept the
 * way a GPU keeps it: the sends of repetition k wait until every channel has
 * consumed all receives of repetition k-1 (the previous kernel finished),
 * while receives into slots are posted ahead across repetitions, as NCCL's
 * proxy does for the next operation, so the clear-to-send is not on the
 * critical path.  A receive in place (-R 1) waits until its channel finished
 * the previous repetition: it would overwrite the user buffer under it.
 *
 * A run ends when every receive was consumed and every send posted, not
 * completed, as a NCCL kernel ends once its last send is in the proxy's
 * hands: the send's data sits in its slot, which is reused only after the
 * send completed.  Sends still outstanding are carried into the next run,
 * whose test() calls finish them, and xfer_drain() finishes the last ones.
 * Waiting for them instead can deadlock under failover: a send whose
 * acknowledgement was lost completes only after its receiver answered the
 * move, and a receiver that got everything may sit in the out-of-band
 * all-gather, calling nothing, until the sender's run ends.  With -R 1 the
 * data is the user's buffer, which may be rewritten once the run returns:
 * those sends complete within their run.
 */
#ifndef LINKPASS_PERF_XFER_H
#define LINKPASS_PERF_XFER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gpumem.h"
#include "netload.h"
#include "opts.h"

#define XFER_MAX_REGIONS 2
#define XFER_GAP_S 1e-3 /* --gap-log threshold */

/* One direction of one plugin connection. */
struct xconn {
  void *comm;        /* sendComm or recvComm */
  int is_send;
  int peer, channel, dev;
  char *slots;       /* slots * step bytes, in slots_buf */
  struct perf_buf slots_buf;
  void *slots_mh;
  void *region_mh[XFER_MAX_REGIONS];
  /* a send connection's sends over all runs: number `sent` is the next to
   * post, [sdone, sent) are outstanding; send k uses slot k % slots */
  size_t sent, sdone;
  void *sreq[PERF_MAX_SLOTS];
  uint64_t nulls;    /* isend/irecv that said "not now" */
  uint64_t msgs;
};

struct xrecv {
  size_t bytes;
  const char *in; /* local operand to reduce with, or NULL */
  char *out;      /* where the result is stored, or NULL */
  int32_t fwd;    /* send index that forwards the result, or -1 */
};

struct xsend {
  size_t bytes;
  const char *src; /* data to send when dep < 0 */
  int32_t dep;     /* recv index whose result this send carries, or -1 */
};

struct xchan {
  struct xconn *sc, *rc;
  struct xsend *sends;
  size_t nsends, sends_cap;
  struct xrecv *recvs;
  size_t nrecvs, recvs_cap;
  /* progress over reps repetitions (reset by xfer_run); indexes count
   * messages of all repetitions: message v is list entry v % n of
   * repetition v / n, and send v is the connection's send sbase + v */
  size_t reps, rpost, rdone, rcons, spost, sbase;
  size_t sfilled; /* sends below this index have their slot staged */
  void *rreq[PERF_MAX_SLOTS];
};

struct xengine {
  struct lp_net *net;
  int rank;
  int slots;
  size_t step;
  int direct; /* -R 1 */
  size_t reg_pad; /* --reg-pad: extra bytes allocated and registered with the slots */
  enum perf_mem mem; /* --mem: where the slots live; GPU kinds are flushed after each receive */
  struct {
    char *base;
    size_t len;
    const struct perf_buf *buf; /* the allocation, for registering it as its kind */
  } regions[XFER_MAX_REGIONS];
  int nregions;
  enum perf_dtype dtype;
  enum perf_redop redop;
  double stall_timeout;
  /* --gap-log: pauses of XFER_GAP_S or more between completions go here */
  FILE *gap_log;
  double last_completion;
  /* called about every 50 ms while a transfer runs (per-second output) */
  void (*tick)(void *arg);
  void *tick_arg;
  char err[1024];
};

/* Register the slots (and, with direct, every region) on a connection. */
int xconn_setup(struct xengine *e, struct xconn *c);
void xconn_teardown(struct xengine *e, struct xconn *c);

/* Message lists. */
void xchan_clear(struct xchan *ch);
void xchan_free(struct xchan *ch);
int xchan_add_send(struct xchan *ch, size_t bytes, const char *src, int32_t dep);
int xchan_add_recv(struct xchan *ch, size_t bytes, const char *in, char *out, int32_t fwd);

/* Run every channel's lists `reps` times back to back, to completion; 0, or
 * -1 with e->err set. */
int xfer_run(struct xengine *e, struct xchan *chans, int nchans, size_t reps);

/* Test the sends outstanding on `n` connections once (the send
 * connections of the mesh; others are skipped): -1 with e->err set, else
 * how many connections still have some. */
int xfer_test_sends(struct xengine *e, struct xconn *conns, size_t n, int *progress);
/* Test the sends still outstanding on `n` connections until they complete,
 * for at most e->stall_timeout without progress; 0, or -1 with e->err set
 * (sends are left outstanding, and xconn_teardown leaves their memory). */
int xfer_drain(struct xengine *e, struct xconn *conns, size_t n);

double xfer_now(void);

#endif
