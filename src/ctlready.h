/*
 * Which control sockets have something to read: one epoll set per process,
 * so that a thousand connections do not each make a system call to find
 * out that nothing came.
 *
 * Between moves a connection looked at its control sockets every
 * millisecond NCCL called it (failover.c), a recv() on each of its two
 * connections that almost always said EAGAIN: with 1,024 connections a
 * direction on one NIC, about 130,000 system calls a second per process,
 * whether anything failed or not.  Here every control socket is in one
 * edge-triggered epoll set whose events carry a flag of the connection's
 * own: the thread that looks for news (any of NCCL's, at most once every
 * LP_CTL_READY_EVERY_NS for the whole process) sets the flags of the
 * sockets data arrived on, and a connection reads only once its flag is
 * set.  Edge-triggered: a connection clears its flag before it reads until
 * EAGAIN, and data that arrives after that read raises a new event.
 *
 * Flags are written only under the set's lock, and a socket leaves the set
 * under it, before its connection is freed.
 */
#ifndef LP_CTLREADY_H
#define LP_CTLREADY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define LP_CTL_READY_EVERY_NS 50000ull /* the process looks for news at most this often */

struct lp_ctl_ready {
  pthread_mutex_t mu; /* the set's membership, and every flag written */
  int epfd;           /* -1: none (each connection reads on its own schedule) */
  int started;        /* the lock exists (a zeroed struct was never started) */
  _Atomic uint64_t next_ns;
};

/* 0, or -errno (epfd stays -1: connections read as if their flags were always set). */
int lp_ctl_ready_start(struct lp_ctl_ready *r);
void lp_ctl_ready_stop(struct lp_ctl_ready *r);
/* Watch fd: `flag` is set when data (or its end) arrives.  0, or -errno. */
int lp_ctl_ready_add(struct lp_ctl_ready *r, int fd, _Atomic int *flag);
/* Stop watching fd (still open); its flag is not written afterwards. */
void lp_ctl_ready_remove(struct lp_ctl_ready *r, int fd);
/* Set the flags of the sockets data arrived on since the last look, if no
 * look was made in the last LP_CTL_READY_EVERY_NS and no other thread is
 * looking now. */
void lp_ctl_ready_poll(struct lp_ctl_ready *r, uint64_t now);

#endif
