/*
 * The idle-receiver watch: a receiver answers its sender's move even while
 * NCCL is not calling its comm.
 *
 * The sender drives every move and needs the receiver's answer (an ACK
 * naming the first message it has not completed: failover.h).  A receiver
 * reads that request while NCCL calls its comm (irecv, test).  A receiver
 * that has completed everything is not called until its next operation,
 * and that operation may wait for the sender: with a registered buffer,
 * NCCL's kernel waits for its send to complete, and the receiving rank may
 * then wait on the sending one elsewhere (an MPI barrier, another
 * collective).  The send would never complete.
 *
 * So one thread polls the control sockets of the failover-enabled receive
 * comms. When a socket turns readable and NCCL has not called the comm for
 * LP_IDLE_NS, the thread takes the comm and runs one progress call: the move is
 * answered, and what the call finds (completions, errors) waits in the comm
 * for NCCL's next call. A comm NCCL is calling is left to NCCL: it reads
 * its socket within 1 ms itself.
 *
 * NCCL's thread and this one take a comm with lp_comm_enter/leave (an
 * uncontended atomic exchange on the comm's own line in every irecv and
 * test of a receive comm; this thread tries and never waits).
 */
#ifndef LP_IDLE_WATCH_H
#define LP_IDLE_WATCH_H

#include <pthread.h>

#define LP_IDLE_NS 2000000ull /* a comm NCCL has not called for this long is idle */

struct lp_comm;

struct lp_idle_watch {
  pthread_mutex_t mu; /* the list, and any call this thread makes into a comm */
  struct lp_comm **comms;
  int n, cap;
  unsigned gen; /* bumped whenever the list changes */
  int wake_fd;  /* eventfd: the list changed, or stop */
  int stop;
  int running;
  pthread_t thread;
};

/* Start the thread; 0, or -1 (moves then wait for NCCL's next call). */
int lp_idle_watch_start(struct lp_idle_watch *w);
/* Stop and join it; comms may stay on the list and are removed at close. */
void lp_idle_watch_stop(struct lp_idle_watch *w);
/* Watch a receive comm with failover state (c->fo) from now on / no longer
 * (before it is freed).  Both are no-ops when the watch is not running. */
void lp_idle_watch_add(struct lp_idle_watch *w, struct lp_comm *c);
void lp_idle_watch_remove(struct lp_idle_watch *w, struct lp_comm *c);

#endif
