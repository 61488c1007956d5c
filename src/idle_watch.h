/*
 * The idle watch: either end of a connection answers a move even while
 * NCCL is not calling its comm.
 *
 * A receiver reads its sender's move request (REQ) and a sender its
 * receiver's notice (NOTICE) and answer (ACK) while NCCL calls the comm
 * (isend, irecv, test).  A comm that has completed everything is not
 * called until its next operation, and that operation may wait for the
 * other direction: with a registered buffer NCCL's kernel waits for a send
 * to complete; in a ring the next send waits for data received; the rank
 * may wait on another elsewhere (an MPI barrier).  A receiver whose port
 * failed tells its sender, and a sender NCCL is not calling never reads
 * that notice: both directions then wait on each other for good (seen with
 * 256 connections a direction on one NIC, where a sweep of moves takes
 * longer than the senders' last operations).
 *
 * So one thread waits (epoll) on the control sockets of the failover-enabled
 * comms of both kinds. When a socket turns readable and NCCL has not called the comm
 * for LP_IDLE_NS, the thread takes the comm and runs one progress call: the
 * move is started or answered, and what the call finds (completions,
 * errors) waits in the comm for NCCL's next call. A comm NCCL is calling is
 * left to NCCL: it reads its socket within 1 ms itself.
 *
 * A port's health change (the control plane's eventfd, health.h) wakes the
 * thread too: a comm learns of it only at a progress call, so the thread
 * sweeps its list, a few comms between two waits, and makes that call on
 * each comm NCCL is not inside (whether idle or not: see look_again).  An
 * idle comm on a failed NIC moves at once rather than at its next
 * operation (docs/SCALE.md).
 *
 * A control connection given up is made again at progress calls
 * (ctlchan.h): a comm NCCL is not calling gets one from this thread
 * whenever that is due, until the connection is made again.
 *
 * NCCL's thread and this one take a comm with lp_comm_try_enter/leave (an
 * uncontended atomic exchange on the comm's own line in every isend, irecv
 * and test); neither waits for the other: NCCL's call returns "not now",
 * this thread leaves the comm to NCCL.
 */
#ifndef LP_IDLE_WATCH_H
#define LP_IDLE_WATCH_H

#include <pthread.h>
#include <stdint.h>

#define LP_IDLE_NS 2000000ull /* a comm NCCL has not called for this long is idle */

struct lp_comm;

struct lp_idle_watch {
  pthread_mutex_t mu; /* the list, and any call this thread makes into a comm */
  struct lp_comm **comms;
  int n, cap;
  struct lp_comm **later; /* answered lately: armed again after their idle period */
  int nlater;
  unsigned gen;     /* bumped whenever the list changes */
  int epfd;         /* every watched socket, armed for one event at a time */
  int wake_fd;      /* eventfd: stop */
  int health_fd;    /* the control plane's eventfd of health changes (not ours), -1: none */
  int sweep_next;   /* the next comm the sweep after a health change looks at, -1: no sweep */
  uint64_t scan_ns; /* the next look for connections given up in NCCL's calls (scan_remakes) */
  int stop;
  int running;
  pthread_t thread;
};

/* Start the thread, watching `health_fd` for health changes (-1: none);
 * 0, or -1 (moves then wait for NCCL's next call). */
int lp_idle_watch_start(struct lp_idle_watch *w, int health_fd);
/* Stop and join it; comms may stay on the list and are removed at close.
 * What NCCL's threads use (the list, its lock, the fds) stays until
 * lp_idle_watch_free. */
void lp_idle_watch_stop(struct lp_idle_watch *w);
/* Free what a stopped watch left, once no comm can be closed any more. */
void lp_idle_watch_free(struct lp_idle_watch *w);
/* Watch a comm with failover state (c->fo) from now on / no longer (before
 * it is freed).  Both are no-ops when the watch is not running. */
void lp_idle_watch_add(struct lp_idle_watch *w, struct lp_comm *c);
void lp_idle_watch_remove(struct lp_idle_watch *w, struct lp_comm *c);

#endif
