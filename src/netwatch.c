/* RoCE link state from route netlink (libnl-3): see netwatch.h. */
#include "netwatch.h"

#include <errno.h>
#include <linux/rtnetlink.h>
#include <netlink/cache.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>
#include <netlink/route/link.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "log.h"

#define LP_NETWATCH_RCVBUF (1 << 20) /* bursts of link messages (many VFs) must not overrun it */

const char *lp_netwatch_ifname(const struct lp_netwatch *w, int dev) {
  for (int i = 0; i < w->n; i++)
    if (w->ifs[i].dev == dev) return w->ifs[i].ifname;
  return NULL;
}

/* A new state for one interface: tell the control thread when it changed. */
static void set_state(struct lp_netwatch *w, struct lp_netwatch_if *wi, int up, const char *detail) {
  int before = wi->state;
  if (before == up) return;
  wi->state = up;
  atomic_store_explicit(&w->down[wi->dev], !up, memory_order_relaxed);
  const struct lp_dev *d = &w->env->devs[wi->dev];
  if (before < 0 && up) return; /* first sight, as expected: nothing happened */
  if (up) {
    LP_INFO(NCCL_NET, "netwatch: %s (%s:%d) has its link again (%s)", wi->ifname, d->name, d->port, detail);
  } else {
    LP_WARN("netwatch: %s (%s:%d) lost its link (%s)", wi->ifname, d->name, d->port, detail);
  }
  struct lp_event e = {.type = up ? LP_EV_PORT_UP : LP_EV_PORT_DOWN, .dev = (uint32_t)wi->dev, .time_ns = lp_now_ns()};
  lp_ring_push(w->ring, &e); /* a full ring counts the loss; polling finds the port later */
}

static void on_link(struct lp_netwatch *w, struct rtnl_link *l, int deleted) {
  const char *name = rtnl_link_get_name(l);
  if (name == NULL) return;
  unsigned flags = rtnl_link_get_flags(l);
  int up = !deleted && (flags & IFF_UP) && (flags & IFF_RUNNING);
  char detail[64], op[32];
  if (deleted)
    snprintf(detail, sizeof(detail), "interface removed");
  else if (!(flags & IFF_UP))
    snprintf(detail, sizeof(detail), "administratively down");
  else
    snprintf(detail, sizeof(detail), "operstate %s",
             rtnl_link_operstate2str(rtnl_link_get_operstate(l), op, sizeof(op)));
  for (int i = 0; i < w->n; i++) {
    struct lp_netwatch_if *wi = &w->ifs[i];
    if (strcmp(wi->ifname, name) != 0) continue;
    wi->seen = 1;
    set_state(w, wi, up, detail);
  }
}

static void on_object(struct nl_object *obj, void *arg) {
  struct rtnl_link *l = (struct rtnl_link *)obj;
  if (strcmp(nl_object_get_type(obj), "route/link") != 0 || rtnl_link_get_family(l) == AF_BRIDGE) return;
  on_link(arg, l, nl_object_get_msgtype(obj) == RTM_DELLINK);
}

static int on_msg(struct nl_msg *msg, void *arg) {
  nl_msg_parse(msg, on_object, arg); /* a message it cannot parse is not a link we watch */
  return NL_OK;
}

/* Read every interface.  Interfaces seen before and gone now are down. */
static int resync(struct lp_netwatch *w) {
  struct nl_cache *cache = NULL;
  int err = rtnl_link_alloc_cache(w->dump, AF_UNSPEC, &cache);
  if (err < 0) {
    LP_WARN("netwatch: cannot list the network interfaces: %s", nl_geterror(err));
    return -1;
  }
  for (int i = 0; i < w->n; i++) w->ifs[i].seen = 0;
  for (struct nl_object *o = nl_cache_get_first(cache); o != NULL; o = nl_cache_get_next(o)) on_object(o, w);
  nl_cache_free(cache);
  for (int i = 0; i < w->n; i++)
    if (!w->ifs[i].seen && w->ifs[i].state > 0) set_state(w, &w->ifs[i], 0, "interface removed");
  return 0;
}

static void *watch_main(void *arg) {
  struct lp_netwatch *w = arg;
  struct pollfd fds[2] = {{.fd = nl_socket_get_fd(w->ev), .events = POLLIN}, {.fd = w->stop_fd, .events = POLLIN}};
  int errors = 0;
  for (;;) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      LP_WARN("netwatch: poll failed (%s): RoCE interfaces are no longer watched; port events and polling still are",
              strerror(errno));
      break;
    }
    if (fds[1].revents) return NULL; /* stopped */
    if (!(fds[0].revents & POLLIN)) continue;
    int err = nl_recvmsgs_default(w->ev);
    if (err >= 0 || err == -NLE_AGAIN) {
      errors = 0;
      continue;
    }
    /* Mostly an overrun (the kernel dropped notifications): read it all again. */
    if (++errors > 100) {
      LP_WARN(
          "netwatch: route netlink keeps failing (%s): RoCE interfaces are no longer watched; port events "
          "and polling still are",
          nl_geterror(err));
      break;
    }
    LP_INFO(NCCL_NET, "netwatch: route netlink: %s; reading every interface again", nl_geterror(err));
    resync(w);
  }
  /* Given up: an interface last seen down must not hold its port down for
   * good (health.c port_up waits for it); the port's own events and polling
   * decide from now on, as when the watch could not start. */
  for (int d = 0; d < LP_MAX_DEVS; d++) atomic_store(&w->down[d], 0);
  return NULL;
}

static void close_socks(struct lp_netwatch *w) {
  nl_socket_free(w->ev); /* NULL-safe */
  nl_socket_free(w->dump);
  w->ev = w->dump = NULL;
}

int lp_netwatch_start(struct lp_netwatch *w, const struct lp_env *env, struct lp_event_ring *ring, int stop_fd) {
  memset(w, 0, sizeof(*w));
  w->env = env;
  w->ring = ring;
  w->stop_fd = stop_fd;
  for (int d = 0; d < env->ndevs; d++) {
    const struct lp_dev *dev = &env->devs[d];
    if (dev->link_layer != IBV_LINK_LAYER_ETHERNET) continue;
    struct lp_netwatch_if *wi = &w->ifs[w->n];
    if (lp_gid_netdev(env->nics[dev->nic].ibdev_path, dev->port, dev->gid_index, wi->ifname, sizeof(wi->ifname)) != 0) {
      LP_INFO(NCCL_NET,
              "netwatch: %s:%d has no network interface in gid_attrs/ndevs/%d: only its port events "
              "are watched",
              dev->name, dev->port, dev->gid_index);
      continue;
    }
    wi->dev = d;
    wi->state = -1;
    w->n++;
  }
  if (w->n == 0) return 0;
  int err = -NLE_NOMEM;
  if ((w->ev = nl_socket_alloc()) == NULL || (w->dump = nl_socket_alloc()) == NULL) goto fail;
  nl_socket_disable_seq_check(w->ev); /* notifications carry no sequence numbers */
  nl_socket_modify_cb(w->ev, NL_CB_VALID, NL_CB_CUSTOM, on_msg, w);
  /* Subscribe before the first read: no change can slip in between. */
  if ((err = nl_connect(w->ev, NETLINK_ROUTE)) < 0 || (err = nl_socket_add_membership(w->ev, RTNLGRP_LINK)) < 0 ||
      (err = nl_socket_set_nonblocking(w->ev)) < 0 ||
      (err = nl_socket_set_buffer_size(w->ev, LP_NETWATCH_RCVBUF, 0)) < 0 ||
      (err = nl_connect(w->dump, NETLINK_ROUTE)) < 0)
    goto fail;
  if (resync(w) != 0) {
    err = -NLE_FAILURE;
    goto fail;
  }
  for (int i = 0; i < w->n; i++) {
    const struct lp_netwatch_if *wi = &w->ifs[i];
    const struct lp_dev *d = &env->devs[wi->dev];
    if (wi->state < 0)
      LP_INFO(NCCL_NET, "netwatch: %s (%s:%d) is not in this network namespace: only its port events are watched",
              wi->ifname, d->name, d->port);
    else
      LP_INFO(NCCL_INIT | NCCL_NET, "netwatch: %s:%d follows network interface %s (%s)", d->name, d->port, wi->ifname,
              wi->state ? "up" : "down");
  }
  if (pthread_create(&w->thread, NULL, watch_main, w) != 0) {
    err = -NLE_FAILURE;
    goto fail;
  }
  pthread_setname_np(w->thread, "lp-netwatch"); /* for top -H, perf and gdb; best effort */
  w->running = 1;
  return 0;
fail:
  LP_WARN(
      "netwatch: cannot watch the RoCE interfaces through route netlink (%s): link changes are seen through "
      "port events and polling only",
      nl_geterror(err));
  close_socks(w);
  for (int d = 0; d < LP_MAX_DEVS; d++) atomic_store(&w->down[d], 0);
  w->n = 0;
  return -1;
}

void lp_netwatch_stop(struct lp_netwatch *w) {
  if (w->running) pthread_join(w->thread, NULL);
  w->running = 0;
  close_socks(w);
}
