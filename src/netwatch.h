/*
 * RoCE link state from the kernel: a RoCE port has no link of its own, its
 * state is the carrier of the Ethernet interface behind it (the netdev named
 * in sysfs <ibdev_path>/ports/<p>/gid_attrs/ndevs/<gid index>).  One thread
 * listens on a route netlink socket (libnl-3, RTNLGRP_LINK) and pushes
 * LP_EV_PORT_DOWN / LP_EV_PORT_UP for the device into the event ring as soon
 * as the kernel reports that the interface lost or regained its link, so a
 * pulled cable is acted on without waiting for the verbs port event or for
 * polling.  InfiniBand ports are not watched: their port event is the
 * signal (an IPoIB interface follows the port, it does not drive it).
 *
 * An interface is up when it is IFF_UP and IFF_RUNNING (the kernel sets
 * RUNNING only while the operstate is UP: carrier present).  An interface
 * that is not visible in the process's network namespace is not watched.
 */
#ifndef LP_NETWATCH_H
#define LP_NETWATCH_H

#include <net/if.h>
#include <pthread.h>
#include <stdatomic.h>

#include "env.h"
#include "event_ring.h"
#include "nic.h"

struct nl_sock;

struct lp_netwatch_if {
  int dev;                  /* the linkpass device it backs */
  char ifname[IF_NAMESIZE]; /* from gid_attrs/ndevs */
  int state;                /* -1 not seen yet, 0 down, 1 up (watch thread only) */
  int seen;                 /* seen in the current full read (watch thread only) */
};

struct lp_netwatch {
  const struct lp_env *env;
  struct lp_event_ring *ring; /* where port events go (the control plane's) */
  int n;
  struct lp_netwatch_if ifs[LP_MAX_DEVS];
  _Atomic int down[LP_MAX_DEVS]; /* by device: its interface has no link now */
  struct nl_sock *ev;            /* RTNLGRP_LINK notifications */
  struct nl_sock *dump;          /* full reads (start, after lost notifications) */
  int stop_fd;                   /* borrowed: readable when the thread must exit */
  int running;
  pthread_t thread;
};

/* Read the RoCE devices' interfaces and start watching them (nothing to
 * do without RoCE devices); changes go into `ring`.  stop_fd becomes
 * readable when the thread must end.  0, or -1 when the watch could not
 * start (port events still work). */
int lp_netwatch_start(struct lp_netwatch *w, const struct lp_env *env, struct lp_event_ring *ring, int stop_fd);

/* Join the thread (stop_fd must be readable already) and close the sockets. */
void lp_netwatch_stop(struct lp_netwatch *w);

/* 1 while the interface behind `dev` is known to have no link. */
static inline int lp_netwatch_down(struct lp_netwatch *w, int dev) {
  return atomic_load_explicit(&w->down[dev], memory_order_relaxed);
}

/* The interface watched for `dev`, or NULL. */
const char *lp_netwatch_ifname(const struct lp_netwatch *w, int dev);

#endif
