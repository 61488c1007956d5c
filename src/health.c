/* The control plane: async-event threads, the control thread, port health. */
#include "health.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "fo_wire.h"
#include "log.h"
#include "metrics.h"
#include "pool.h"
#include "report.h"

#define LP_POLL_DOWN_NS 100000000ull /* re-read a down port this often */
#define LP_POLL_ALL_NS 1000000000ull /* and every port this often: events can be lost */
#define LP_QUERY_FAILS_DOWN 3        /* a port whose state cannot be read this often in a row is down */
#define LP_RING_CAPACITY 1024
#define LP_SYSLOG_RETRY_NS 2000000ull /* held syslog lines are tried again this often */
#define LP_SWEEP_LOOK_NS 10000000ull  /* and lines held for a sweep's end, this often */
/* A sweep's first lines go out as soon as this thread looks (woken by the
 * first line held: lp_health_lines_held): a job with a few connections on
 * the failed NIC, most jobs, sees each move within milliseconds.  Only a
 * large sweep's later lines wait for its end, when sending them no longer
 * takes CPU from the moves still to come. */
#define LP_SWEEP_EARLY_LINES 64

/* A connection left `dev` for a fault its port did not report.  Every
 * connection on a black-holed NIC stalls at about the same moment: the
 * faults of one LP_SILENT_COALESCE_NS count as one flap of the hold-down. */
#define LP_SILENT_COALESCE_NS (1000ull * 1000 * 1000)

/* The control thread ignores a fault of a suspect device within
 * LP_SILENT_COALESCE_NS of the flap it counted (silent_fault): such a fault
 * is not queued at all. */
static int silent_fault_counted(struct lp_health *h, int dev, uint64_t now) {
  return atomic_load_explicit(&h->suspect_until[dev], memory_order_relaxed) != 0 &&
         now - atomic_load_explicit(&h->silent_counted_ns[dev], memory_order_relaxed) < LP_SILENT_COALESCE_NS;
}

void lp_health_silent_fault(struct lp_health *h, int dev, int reason, uint64_t comm_id) {
  if (!h->running || dev < 0 || dev >= h->env->ndevs) return;
  uint64_t now = lp_now_ns();
  if (silent_fault_counted(h, dev, now)) return;
  struct lp_event e = {
      .type = LP_EV_SILENT_FAULT, .dev = (uint32_t)dev, .status = reason, .comm_id = comm_id, .time_ns = now};
  atomic_fetch_add_explicit(&h->suspect_pending[dev], 1, memory_order_relaxed);
  /* A full ring counts the loss itself; the device is then not suspect. */
  if (!lp_ring_push(&h->ring, &e)) atomic_fetch_sub_explicit(&h->suspect_pending[dev], 1, memory_order_release);
}

void lp_health_lines_held(struct lp_health *h) {
  if (!h->running) return;
  struct lp_event e = {.type = LP_EV_LINES_HELD, .dev = LP_EV_NO_DEV, .time_ns = lp_now_ns()};
  lp_ring_try_push(&h->ring, &e); /* lost to a full ring: the next look (10 ms) sends them, and nothing is lost */
}

/* ---- async events: one thread per NIC ---- */

#define LP_ASYNC_MAX_FAILURES 100 /* ibv_get_async_event failures in a row before the fd is given up */

static void *async_main(void *arg) {
  const struct lp_async_arg *a = arg;
  struct lp_health *h = a->h;
  const struct lp_env *env = h->env;
  int nic_index = a->nic;
  const struct lp_nic *nic = &env->nics[nic_index];
  struct pollfd fds[2] = {{.fd = nic->ctx->async_fd, .events = POLLIN}, {.fd = h->stop_fd, .events = POLLIN}};
  int failures = 0;
  /* Non-blocking, as rdma-core advises for poll(): the kernel drops the
   * unread events of a QP destroyed meanwhile, and a blocking read after
   * poll() said "readable" would then wait for the next event, out of
   * reach of the stop fd (the library's unload would wait for it). */
  int fl = fcntl(nic->ctx->async_fd, F_GETFL);
  if (fl < 0 || fcntl(nic->ctx->async_fd, F_SETFL, fl | O_NONBLOCK) != 0)
    LP_INFO(NCCL_NET, "%s: its async event fd stays blocking (%s)", nic->name, strerror(errno));
  for (;;) {
    if (poll(fds, 2, -1) < 0 && errno != EINTR) break;
    if (fds[1].revents) break;
    /* A dead device's fd may stay in error for good: polling it again
     * would spin a core.  Its ports are still polled by the control thread. */
    int broken = (fds[0].revents & (POLLERR | POLLHUP | POLLNVAL)) && !(fds[0].revents & POLLIN);
    struct ibv_async_event ev;
    if (!broken && !(fds[0].revents & POLLIN)) continue;
    if (!broken && env->ibv.get_async_event(nic->ctx, &ev) != 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) continue; /* its QP was destroyed before it was read */
      if (++failures < LP_ASYNC_MAX_FAILURES) continue;
      broken = 1;
    }
    if (broken) {
      LP_WARN("%s: its async events can no longer be read (%s): its ports are polled instead", nic->name,
              fds[0].revents & POLLIN ? "ibv_get_async_event keeps failing" : "the event fd is in error");
      fds[0].fd = -1; /* poll() ignores it from now on */
      continue;
    }
    failures = 0;
    /* A QP that took its first packet in RTR, before its own RTS (a move's
     * peer may write that early): nothing to act on, and at a thousand
     * connections a burst that would fill the ring the port events share. */
    if (ev.event_type == IBV_EVENT_COMM_EST) {
      env->ibv.ack_async_event(&ev);
      continue;
    }
    /* Set before the event is queued: a full ring may lose the event, never the fact. */
    if (ev.event_type == IBV_EVENT_DEVICE_FATAL) atomic_store(&h->fatal[nic_index], 1);
    int port = 0;
    if (ev.event_type == IBV_EVENT_PORT_ERR || ev.event_type == IBV_EVENT_PORT_ACTIVE ||
        ev.event_type == IBV_EVENT_LID_CHANGE || ev.event_type == IBV_EVENT_GID_CHANGE)
      port = ev.element.port_num;
    struct lp_event e = {.type = LP_EV_ASYNC,
                         .nic = (uint32_t)nic_index,
                         .dev = LP_EV_NO_DEV,
                         .port = (uint32_t)port,
                         .status = (int32_t)ev.event_type,
                         .time_ns = lp_now_ns()};
    env->ibv.ack_async_event(&ev);
    lp_ring_push(&h->ring, &e);
  }
  return NULL;
}

/* ---- the control thread ---- */

static int dev_of(struct lp_health *h, int nic, int port) {
  for (int d = 0; d < h->env->ndevs; d++)
    if (h->env->devs[d].nic == nic && h->env->devs[d].port == port) return d;
  return -1;
}

/* The generation moves on, and the idle watch hears of it (health.h
 * lp_health_change_fd).  An eventfd write never blocks: it adds to a
 * counter, which the watch reads and clears. */
static void changed(struct lp_health *h) {
  atomic_fetch_add_explicit(&h->gen, 1, memory_order_release);
  uint64_t one = 1;
  if (h->running && h->change_fd >= 0 && write(h->change_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
    LP_INFO(NCCL_NET, "cannot wake the idle watch after a health change: %s", strerror(errno));
}

/* Health changes also open and close the device's degraded periods.
 * 1 when the health changed (and with it the generation). */
static int set_healthy(struct lp_health *h, int dev, int ok) {
  if (atomic_exchange(&h->healthy[dev], ok) == ok) return 0;
  struct lp_fo_dev_stats *ds = &h->stats.dev[dev];
  uint64_t now = lp_now_ns();
  if (!ok) {
    atomic_store_explicit(&ds->degraded_since_ns, now, memory_order_relaxed);
  } else {
    uint64_t since = atomic_exchange_explicit(&ds->degraded_since_ns, 0, memory_order_relaxed);
    if (since != 0) atomic_fetch_add_explicit(&ds->degraded_ns, now - since, memory_order_relaxed);
  }
  changed(h);
  h->metrics.dirty = 1;
  return 1;
}

static void port_down(struct lp_health *h, int dev, const char *why, uint64_t now) {
  if (h->hd[dev].down) return;
  atomic_store_explicit(&h->down_reason[dev], LP_FO_PORT_DOWN, memory_order_relaxed);
  unsigned flaps = lp_holddown_down(&h->hd[dev], now);
  atomic_fetch_add_explicit(&h->stats.dev[dev].flaps, 1, memory_order_relaxed);
  int was_up = atomic_exchange(&h->link_up[dev], 0);
  /* A port in its hold-down, or drained as degraded, is unhealthy already
   * but may carry connections that had nowhere else to go: its link going
   * is news to them too. */
  if (!set_healthy(h, dev, 0) && was_up) {
    changed(h);
    h->metrics.dirty = 1;
  }
  LP_WARN("%s:%d is down (%s): connections on it move to other NICs (flap %u, next hold-down %llu ms)",
          h->env->devs[dev].name, h->env->devs[dev].port, why, flaps,
          (unsigned long long)(h->hd[dev].hold_ns / 1000000));
}

static void port_up(struct lp_health *h, int dev, const char *why, uint64_t now) {
  int nic = h->env->devs[dev].nic;
  if (!h->hd[dev].down || lp_health_nic_fatal(h, nic)) return;
  if (lp_netwatch_down(&h->nw, dev)) return; /* the port says ACTIVE, its interface has no link yet */
  lp_holddown_up(&h->hd[dev], now);
  atomic_store(&h->link_up[dev], 1);
  /* Not healthy yet, but a connection with nowhere else to go may use it. */
  changed(h);
  h->metrics.dirty = 1;
  LP_INFO(NCCL_NET, "%s:%d is up again (%s): usable after a %llu ms hold-down", h->env->devs[dev].name,
          h->env->devs[dev].port, why, (unsigned long long)(h->hd[dev].hold_ns / 1000000));
}

/* A port event from the RoCE interface watch. */
static void port_event(struct lp_health *h, const struct lp_event *e, uint64_t now) {
  int dev = (int)e->dev;
  if (dev < 0 || dev >= h->env->ndevs) return;
  const char *ifname = lp_netwatch_ifname(&h->nw, dev);
  char why[64];
  snprintf(why, sizeof(why), "netdev %s %s", ifname ? ifname : "?", e->type == LP_EV_PORT_DOWN ? "down" : "up");
  if (e->type == LP_EV_PORT_DOWN) {
    port_down(h, dev, why, now);
    return;
  }
  /* The interface has its link again; the port itself must be ACTIVE too
   * (real mlx5 ports follow the carrier a little later: then the port
   * event or polling brings it back). */
  struct ibv_port_attr pa;
  memset(&pa, 0, sizeof(pa));
  if (h->env->ibv.query_port(lp_env_nic_of(h->env, dev)->ctx, (uint8_t)h->env->devs[dev].port, &pa) == 0 &&
      pa.state == IBV_PORT_ACTIVE)
    port_up(h, dev, why, now);
}

static void silent_fault(struct lp_health *h, const struct lp_event *e, uint64_t now) {
  int dev = (int)e->dev;
  if (dev < 0 || dev >= h->env->ndevs) return;
  struct lp_holddown *sd = &h->silent[dev];
  uint64_t until = atomic_load_explicit(&h->suspect_until[dev], memory_order_relaxed);
  if (until != 0 && now - sd->since_ns < LP_SILENT_COALESCE_NS) return;
  unsigned flaps = lp_holddown_down(sd, now);
  lp_holddown_up(sd, now);
  atomic_store_explicit(&h->silent_counted_ns[dev], sd->since_ns, memory_order_relaxed);
  atomic_store_explicit(&h->suspect_until[dev], lp_holddown_ready_at(sd), memory_order_relaxed);
  changed(h);
  LP_WARN(
      "%s:%d is suspect: a connection left it (%s) while its port is up; no connection moves back onto it for "
      "%llu ms (silent fault %u in a row)",
      h->env->devs[dev].name, h->env->devs[dev].port, lp_fo_reason_str(e->status),
      (unsigned long long)(sd->hold_ns / 1000000), flaps);
}

/* A suspect device whose hold-down passed without another silent fault is
 * trusted again: the connections that left it re-evaluate (failback). */
static uint64_t suspect_expiry(struct lp_health *h, uint64_t now, uint64_t next) {
  for (int d = 0; d < h->env->ndevs; d++) {
    uint64_t until = atomic_load_explicit(&h->suspect_until[d], memory_order_relaxed);
    if (until == 0) continue;
    if (now < until) {
      if (until < next) next = until;
      continue;
    }
    atomic_store_explicit(&h->suspect_until[d], 0, memory_order_relaxed);
    changed(h);
    LP_INFO(NCCL_NET, "%s:%d: no silent fault for its hold-down: traffic may move back", h->env->devs[d].name,
            h->env->devs[d].port);
  }
  return next;
}

/* A NIC that reported DEVICE_FATAL: its ports go down and stay down.  Once
 * per NIC, from its event or, should a full ring have lost that, from the
 * flag its async thread set first (fatal_sweep). */
static void device_fatal(struct lp_health *h, int nic, const char *name, uint64_t now) {
  atomic_store(&h->fatal[nic], 1);
  if (h->fatal_handled[nic]) return;
  h->fatal_handled[nic] = 1;
  for (int d = 0; d < h->env->ndevs; d++)
    if (h->env->devs[d].nic == nic) port_down(h, d, name, now);
  LP_WARN("%s reported a fatal error: it is not used again by this process", h->env->nics[nic].name);
}

static void fatal_sweep(struct lp_health *h, uint64_t now) {
  for (int n = 0; n < h->env->nnics; n++)
    if (lp_health_nic_fatal(h, n) && !h->fatal_handled[n]) device_fatal(h, n, "DEVICE_FATAL (its event was lost)", now);
}

static void handle(struct lp_health *h, const struct lp_event *e, uint64_t now) {
  if (e->type == LP_EV_SILENT_FAULT) {
    silent_fault(h, e, now);
    if (e->dev < (uint32_t)h->env->ndevs)
      atomic_fetch_sub_explicit(&h->suspect_pending[e->dev], 1, memory_order_release); /* suspect_until is set */
    return;
  }
  if (e->type != LP_EV_ASYNC) {
    if (e->type == LP_EV_PORT_DOWN || e->type == LP_EV_PORT_UP) port_event(h, e, now);
    return;
  }
  int nic = (int)e->nic;
  const char *name = h->env->ibv.event_type_str ? h->env->ibv.event_type_str((enum ibv_event_type)e->status) : "event";
  switch (e->status) {
  case IBV_EVENT_PORT_ERR:
  case IBV_EVENT_PORT_ACTIVE: {
    int dev = dev_of(h, nic, (int)e->port);
    if (dev < 0) return; /* a port NCCL does not use */
    if (e->status == IBV_EVENT_PORT_ERR)
      port_down(h, dev, name, now);
    else
      port_up(h, dev, name, now);
    return;
  }
  case IBV_EVENT_DEVICE_FATAL: device_fatal(h, nic, name, now); return;
  default: LP_INFO(NCCL_NET, "%s: async event %s", h->env->nics[nic].name, name);
  }
}

/* Ports are also read directly: an event can be lost (a full queue, a port
 * that flapped faster than the events could say). */
static void poll_ports(struct lp_health *h, uint64_t now) {
  int all = now >= h->next_poll_ns;
  if (all) h->next_poll_ns = now + LP_POLL_ALL_NS;
  for (int d = 0; d < h->env->ndevs; d++) {
    if (!all && !h->hd[d].down) continue;
    const struct lp_nic *nic = lp_env_nic_of(h->env, d);
    if (lp_health_nic_fatal(h, h->env->devs[d].nic)) continue;
    struct ibv_port_attr pa;
    memset(&pa, 0, sizeof(pa));
    int rc = h->env->ibv.query_port(nic->ctx, (uint8_t)h->env->devs[d].port, &pa);
    if (rc != 0) {
      /* A device removed, or whose verbs file was cut off, answers no
       * query again and may send no event: a port that cannot be read is
       * not taken for up.  At and after the limit: an event that brought
       * the port up while it still cannot be read is overruled at the next
       * poll. */
      if (++h->query_fails[d] >= LP_QUERY_FAILS_DOWN) {
        char why[96];
        snprintf(why, sizeof(why), "ibv_query_port failed %d times in a row: %s", h->query_fails[d],
                 strerror(rc > 0 ? rc : errno));
        port_down(h, d, why, now);
      }
      continue;
    }
    h->query_fails[d] = 0;
    if (pa.state == IBV_PORT_ACTIVE)
      port_up(h, d, "polling", now);
    else
      port_down(h, d, "polling", now);
  }
}

/* ---- where connections go ---- */

/* `dev` is in `primary`'s pool (the primary first) and carries the same
 * link layer: where a connection of `primary` may go at all. */
static int in_pool(const struct lp_env *env, int primary, int dev) {
  if (env->devs[dev].link_layer != env->devs[primary].link_layer) return 0;
  for (int k = 0; k < env->pool_n[primary]; k++)
    if (env->pool[primary][k] == dev) return 1;
  return 0;
}

/* The choice among `loads` (one per device), and the load the chosen
 * device had when it was made.  Round 0 takes trusted devices (healthy, not
 * suspect) but `avoid`, round 1 healthy ones but `avoid`, round 2 healthy
 * ones, round 3 ports that are up but held down; only the first `rounds`
 * are tried. */
static int pick(const struct lp_health *h, _Atomic int *loads, int primary, int prefer, int avoid, uint32_t nics,
                int rounds, int *seen) {
  const struct lp_env *env = h->env;
  uint64_t now = lp_now_ns();
  /* The preference may be the peer's (its rail): only where the pool
   * allows, or a connection went to a NIC its pool leaves out. */
  if (prefer >= 0 && prefer < env->ndevs && prefer != avoid && (nics >> env->devs[prefer].nic & 1u) &&
      in_pool(env, primary, prefer) && lp_health_trusted(h, prefer, now)) {
    *seen = atomic_load_explicit(&loads[prefer], memory_order_relaxed);
    return prefer;
  }
  int usable[LP_MAX_DEVS], load[LP_MAX_DEVS];
  for (int round = 0; round < rounds; round++) {
    for (int d = 0; d < env->ndevs; d++) {
      /* the same link layer, and every buffer the connection uses registered there */
      int fits = env->devs[d].link_layer == env->devs[primary].link_layer && (nics >> env->devs[d].nic & 1u);
      int ok = round == 0  ? lp_health_trusted(h, d, now)
               : round < 3 ? lp_health_ok(h, d)
                           : lp_health_link_up(h, d) && !lp_health_nic_fatal(h, env->devs[d].nic);
      usable[d] = fits && ok && (round > 1 || d != avoid);
      load[d] = atomic_load_explicit(&loads[d], memory_order_relaxed);
    }
    int dev = lp_pool_pick(env->pool[primary], env->pool_n[primary], usable, load);
    if (dev >= 0) {
      *seen = load[dev];
      return dev;
    }
  }
  return -1;
}

/* The choice holds only if no other thread claimed the chosen device since
 * its load was read; else choose again.  Lock-free: a failed exchange means
 * another claim (or a release) succeeded. */
static int claim(const struct lp_health *h, _Atomic int *loads, int primary, int prefer, int avoid, uint32_t nics,
                 int rounds) {
  for (;;) {
    int seen, dev = pick(h, loads, primary, prefer, avoid, nics, rounds, &seen);
    if (dev < 0) return -1;
    if (atomic_compare_exchange_weak_explicit(&loads[dev], &seen, seen + 1, memory_order_relaxed, memory_order_relaxed))
      return dev;
  }
}

int lp_health_choose(const struct lp_health *h, enum lp_dir dir, int primary, int prefer, int avoid, uint32_t nics) {
  int seen;
  return pick(h, (_Atomic int *)h->load[dir], primary, prefer, avoid, nics, 4, &seen);
}

int lp_health_claim(struct lp_health *h, enum lp_dir dir, int primary, int prefer, int avoid, uint32_t nics) {
  return claim(h, h->load[dir], primary, prefer, avoid, nics, 4);
}

/* A standby is only worth having on another device: never `from` itself,
 * and only a healthy one (a standby is no last resort): round 0 alone. */
int lp_health_claim_standby(struct lp_health *h, enum lp_dir dir, int primary, int from, int prefer, uint32_t nics) {
  return claim(h, h->standby[dir][from], primary, prefer, from, nics, 1);
}

/* ---- the metrics file ---- */

/* A snapshot of the counters, into the file; `running` 0 for the last. */
static void metrics_write(struct lp_health *h, uint64_t now, int running) {
  struct lp_fo_stats *st = &h->stats;
  const memory_order rx = memory_order_relaxed;
  struct lp_metrics m;
  memset(&m, 0, sizeof(m));
  m.pid = (int)getpid();
  m.host = h->env->hostname;
  m.ndevs = h->env->ndevs < LP_METRICS_MAX_DEVS ? h->env->ndevs : LP_METRICS_MAX_DEVS;
  for (int d = 0; d < m.ndevs; d++) {
    struct lp_metrics_dev *md = &m.devs[d];
    struct lp_fo_dev_stats *ds = &st->dev[d];
    md->name = h->env->devs[d].name;
    md->port = h->env->devs[d].port;
    md->up = lp_health_ok(h, d);
    md->connections = lp_health_connections(h, d);
    md->standby = atomic_load_explicit(&h->standby_ready[d], rx);
    md->failovers = atomic_load_explicit(&ds->failovers, rx);
    md->failbacks = atomic_load_explicit(&ds->failbacks, rx);
    md->flaps = atomic_load_explicit(&ds->flaps, rx);
    uint64_t degraded = atomic_load_explicit(&ds->degraded_ns, rx);
    uint64_t since = atomic_load_explicit(&ds->degraded_since_ns, rx);
    if (since != 0 && now > since) degraded += now - since;
    md->degraded_seconds = (double)degraded / 1e9;
    md->degraded = atomic_load_explicit(&ds->degraded, rx);
    md->resend_ratio = h->gray[d].last_ppm > 0 ? (double)h->gray[d].last_ppm / 1e6 : 0.0; /* the last window judged */
    md->tx_rate = lp_gray_rate_fresh(&h->rate[d]) ? (double)h->rate[d].mbps * 1e6 : 0.0;
  }
  m.replayed_requests = atomic_load_explicit(&st->replayed, rx);
  m.replayed_bytes = atomic_load_explicit(&st->replayed_bytes, rx);
  m.paths_lost = atomic_load_explicit(&st->paths_lost, rx);
  m.ring_overflows = lp_ring_overflows(&h->ring);
  m.syslog_lines_lost = lp_syslog_lost(&h->env->syslog);
  /* In whole microseconds, as the event line's duration_us: the two agree. */
  m.last_failover_seconds = (double)(atomic_load_explicit(&st->last_failover_ns, rx) / 1000) / 1e6;
  m.running = running;
  struct timespec wall;
  clock_gettime(CLOCK_REALTIME, &wall);
  m.updated_seconds = (double)wall.tv_sec + (double)wall.tv_nsec / 1e9;
  lp_metrics_file_put(&h->metrics, &m, now);
}

/* ---- gray failures (gray.h) ---- */

#define LP_GRAY_WINDOW_NS (250ull * 1000 * 1000)

/* A port that is up but resends too many of its packets, or moves data
 * at a fraction of what a port of its pool does, while that port shows it
 * could do clearly better: its connections move, as off a port that went
 * down (reason `degraded`), but it stays usable as a last resort.  The
 * hold-down and its damping are a flap's; when it has passed, connections
 * fail back, and that traffic is the probe: a port still degraded is
 * drained again, for twice as long.  Returns the flap count for the WARN. */
static unsigned drain_degraded(struct lp_health *h, int dev, uint64_t now) {
  unsigned flaps = lp_holddown_down(&h->hd[dev], now);
  lp_holddown_up(&h->hd[dev], now); /* the port is up: its hold-down runs from now */
  atomic_store_explicit(&h->down_reason[dev], LP_FO_DEGRADED, memory_order_relaxed);
  atomic_fetch_add_explicit(&h->stats.dev[dev].flaps, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&h->stats.dev[dev].degraded, 1, memory_order_relaxed);
  set_healthy(h, dev, 0);
  lp_gray_reset(&h->gray[dev]);
  lp_gray_rate_reset(&h->rate[dev]);
  return flaps;
}

/* The port's event line (docs/OPERATIONS.md): what was measured
 * (`evidence`, key=value fields) between the fields every such line has. */
static void report_degraded(struct lp_health *h, int dev, const char *evidence, int windows, unsigned flaps) {
  const struct lp_dev *d = &h->env->devs[dev];
  char line[360], at[LP_REPORT_TIME_LEN];
  lp_report_time(lp_wall_us(), at, sizeof(at));
  snprintf(line, sizeof(line), "event=degraded dev=%s port=%d %s windows=%d holddown_ms=%llu flap=%u time=%s", d->name,
           d->port, evidence, windows, (unsigned long long)(h->hd[dev].hold_ns / 1000000), flaps, at);
  lp_report_line(&h->env->syslog, LOG_WARNING, line);
}

static void degrade_lossy(struct lp_health *h, int dev, int better, uint64_t now) {
  const struct lp_dev *d = &h->env->devs[dev], *b = &h->env->devs[better];
  int32_t ppm = h->gray[dev].ppm, bppm = h->gray[better].last_ppm;    /* better: clean in its own last windows */
  uint64_t window_ms = (now - h->gray[dev].last_opened_ns) / 1000000; /* a tick, or more until enough packets */
  /* Read before the drain resets the windows (no better port may have been
   * seen at the first strike: then more than LP_GRAY_STRIKES). */
  int strikes = h->gray[dev].strikes;
  unsigned flaps = drain_degraded(h, dev, now);
  char evidence[160];
  snprintf(evidence, sizeof(evidence), "evidence=resends resent_ppm=%d threshold_ppm=%d better=%s:%d better_ppm=%d",
           ppm, h->env->cfg.gray_ppm, b->name, b->port, bppm);
  report_degraded(h, dev, evidence, strikes, flaps);
  LP_WARN(
      "%s:%d is degraded: it resent %d.%02d%% of its packets in the last %llu ms, the %d. window in a row at or "
      "over %d.%02d%%, while %s:%d resent %d.%02d%%: connections on it move to other NICs; traffic may try it "
      "again after %llu ms (flap %u)",
      d->name, d->port, ppm / 10000, ppm / 100 % 100, (unsigned long long)window_ms, strikes,
      h->env->cfg.gray_ppm / 10000, h->env->cfg.gray_ppm / 100 % 100, b->name, b->port, bppm / 10000, bppm / 100 % 100,
      (unsigned long long)(h->hd[dev].hold_ns / 1000000), flaps);
}

static void degrade_slow(struct lp_health *h, int dev, int typical, int64_t typical_mbps, uint64_t now) {
  const struct lp_dev *d = &h->env->devs[dev], *t = &h->env->devs[typical];
  long long mbps = (long long)h->rate[dev].mbps, tmbps = (long long)typical_mbps;
  int busy_pct = h->rate[dev].busy_pct; /* read before the drain resets the windows */
  int slow = __builtin_popcount(h->rate[dev].recent);
  unsigned flaps = drain_degraded(h, dev, now);
  char evidence[176];
  snprintf(evidence, sizeof(evidence),
           "evidence=rate rate_mbps=%lld expected_mbps=%lld typical=%s:%d speed_mbps=%d busy_pct=%d", mbps * 8,
           tmbps * 8, t->name, t->port, d->speed_mbps, busy_pct); /* every _mbps key in Mb/s, as the speed */
  report_degraded(h, dev, evidence, slow, flaps);
  LP_WARN(
      "%s:%d is degraded: it moved %lld MB/s while busy, %d%% of the time (expected: %lld MB/s, as %s:%d did, the "
      "typical port of its pool), %d of its last %d windows under %d%% of that and of its %d Mb/s: connections on it "
      "move to other NICs; traffic may try it again after %llu ms (flap %u)",
      d->name, d->port, mbps, busy_pct, tmbps, t->name, t->port, slow, LP_GRAY_RATE_SPAN, h->env->cfg.gray_rate_pct,
      d->speed_mbps, (unsigned long long)(h->hd[dev].hold_ns / 1000000), flaps);
}

/* Another device of `dev`'s pool, healthy, of the same link layer: a fair
 * comparison (loads on the same fabric, the same pool). */
static int peer_of(const struct lp_health *h, int dev, int o) {
  const struct lp_env *env = h->env;
  return o != dev && env->devs[o].link_layer == env->devs[dev].link_layer && lp_health_ok(h, o);
}

/* A port's rate for comparisons: this process's own last window while it
 * counts as now, or else what another process of the host measured on it
 * in a window as fresh (the rate board).  -1: nobody measured it lately. */
static int64_t rate_now(const struct lp_health *h, int dev, uint64_t now) {
  if (lp_gray_rate_fresh(&h->rate[dev])) return h->rate[dev].mbps;
  const struct lp_dev *d = &h->env->devs[dev];
  uint64_t fresh = (LP_GRAY_RATE_FRESH + 1) * LP_GRAY_WINDOW_NS;
  int64_t r = lp_rateboard_read(&h->board, lp_env_nic_of(h->env, dev)->attr.node_guid, d->port,
                                now > fresh ? now - fresh : 0, now);
  /* Every poster caps its rates at the port's speed: a rate above ours
   * is another port's that shares this GUID (a misconfigured or
   * simulated host), no evidence about this one. */
  return d->speed_mbps > 0 && r > d->speed_mbps / 8 ? -1 : r;
}

/* The typical other port of `dev`'s pool: of those with a rate measured
 * lately (here or by another process), the lower median, and its rate in
 * *mbps.  One slow port among four is measured against a fast one; two
 * slow ones still against a fast one; ports whose rates vary with the
 * traffic's timing against one in the middle of them, not the luckiest.
 * -1: no other port measured. */
static int typical_peer(const struct lp_health *h, int dev, uint64_t now, int64_t *mbps) {
  const struct lp_env *env = h->env;
  int sorted[LP_MAX_DEVS], n = 0;
  int64_t rate[LP_MAX_DEVS];
  for (int i = 0; i < env->pool_n[dev]; i++) {
    int o = env->pool[dev][i], k = n;
    int64_t r = peer_of(h, dev, o) ? rate_now(h, o, now) : -1;
    if (r < 0) continue;
    n++;
    for (; k > 0 && rate[k - 1] > r; k--) sorted[k] = sorted[k - 1], rate[k] = rate[k - 1];
    sorted[k] = o, rate[k] = r;
  }
  if (n == 0) return -1;
  *mbps = rate[(n - 1) / 2];
  return sorted[(n - 1) / 2];
}

static void gray_tick(struct lp_health *h, uint64_t now) {
  const struct lp_env *env = h->env;
  uint32_t threshold = (uint32_t)env->cfg.gray_ppm;
  int closed[LP_MAX_DEVS];
  char why[768];
  if (!lp_rateboard_intact(&h->board, why, sizeof(why))) LP_WARN("%s", why);
  for (int d = 0; d < env->ndevs; d++) {
    struct lp_port_counters port;
    int ok = lp_port_counters(lp_env_nic_of(env, d), env->devs[d].port, &port) == 0;
    uint64_t guid = lp_env_nic_of(env, d)->attr.node_guid;
    if (atomic_exchange_explicit(&h->left_for_fault[d], 0, memory_order_relaxed)) h->fault_ns[d] = now;
    uint64_t fault = lp_rateboard_fault(&h->board, guid, env->devs[d].port, now);
    if (fault < h->fault_ns[d]) fault = h->fault_ns[d];
    /* A connection left the port for a fault (here or in another process
     * of the host): the rate window under way holds the fault's time too
     * (a message out on a dead path counts as busy until the move took
     * it), and starts over, as the resend windows do. */
    if (fault > h->gray[d].fault_ns) lp_gray_rate_reset(&h->rate[d]);
    lp_gray_fault(&h->gray[d], fault);
    lp_gray_window(&h->gray[d], ok, port.packets, port.resends, threshold, now);
    struct lp_tx_meter *m = &h->tx[d];
    uint64_t bytes = atomic_load_explicit(&m->bytes, memory_order_relaxed);
    uint64_t busy = lp_health_tx_busy(h, d, now); /* time the port had a message out while this process looked */
    closed[d] = lp_gray_rate_window(&h->rate[d], now, bytes, busy, &port, threshold, env->devs[d].speed_mbps) >= 0;
    if (closed[d]) h->rate_at_ns[d] = now;
    lp_rateboard_post(&h->board, d, guid, env->devs[d].port, h->rate[d].mbps, h->rate_at_ns[d], h->fault_ns[d], now);
  }
  for (int d = 0; d < env->ndevs; d++) {
    if (!lp_health_ok(h, d) || !lp_gray_struck(&h->gray[d])) continue;
    for (int i = 0; i < env->pool_n[d]; i++) {
      int o = env->pool[d][i];
      if (peer_of(h, d, o) && lp_gray_clearly_better(&h->gray[o], &h->gray[d])) {
        degrade_lossy(h, d, o, now);
        break;
      }
    }
  }
  for (int d = 0; d < env->ndevs; d++) {
    if (!lp_health_ok(h, d) || !closed[d]) continue;
    int64_t ref = -1;
    int t = typical_peer(h, d, now, &ref);
    if (lp_gray_rate_judge(&h->rate[d], ref, t >= 0 ? env->devs[t].speed_mbps : 0, env->devs[d].speed_mbps,
                           env->cfg.gray_rate_pct))
      degrade_slow(h, d, t, ref, now);
  }
}

/* Every move counted so far, whatever its kind. */
static uint64_t moves_counted(struct lp_fo_stats *st) {
  const memory_order rx = memory_order_relaxed;
  return atomic_load_explicit(&st->failovers, rx) + atomic_load_explicit(&st->failbacks, rx) +
         atomic_load_explicit(&st->paths_lost, rx);
}

static void *control_main(void *arg) {
  struct lp_health *h = arg;
  uint64_t reported_overflows = 0, moves_written = 0;
  int metrics = lp_metrics_file_on(&h->metrics);
  for (;;) {
    uint64_t now = lp_now_ns(), next = now + LP_POLL_DOWN_NS;
    if (metrics && h->metrics.next_ns < next) next = h->metrics.next_ns > now ? h->metrics.next_ns : now;
    for (int d = 0; d < h->env->ndevs; d++) {
      if (lp_holddown_ready(&h->hd[d], now)) {
        if (!lp_health_ok(h, d) && !lp_health_nic_fatal(h, h->env->devs[d].nic)) {
          set_healthy(h, d, 1);
          LP_INFO(NCCL_NET, "%s:%d has been stable for its hold-down: traffic may move back", h->env->devs[d].name,
                  h->env->devs[d].port);
        }
      } else {
        uint64_t at = lp_holddown_ready_at(&h->hd[d]);
        if (at < next) next = at;
      }
    }
    next = suspect_expiry(h, now, next);
    /* Event lines the syslog socket had no room for: soon again; those of
     * a sweep: its first LP_SWEEP_EARLY_LINES now, the rest once it is
     * over. */
    int sweep_over = lp_health_sweep_over(h, now);
    uint64_t retry = sweep_over ? LP_SYSLOG_RETRY_NS : LP_SWEEP_LOOK_NS;
    if (lp_syslog_flush(&h->env->syslog, sweep_over, LP_SWEEP_EARLY_LINES) > 0 && now + retry < next)
      next = now + retry;
    if (h->env->cfg.gray && h->next_gray_ns < next) next = h->next_gray_ns > now ? h->next_gray_ns : now;
    int ms = (int)((next - now) / 1000000ull) + 1;
    lp_ring_wait(&h->ring, ms);
    struct lp_event e;
    int stop = 0;
    now = lp_now_ns();
    while (lp_ring_pop(&h->ring, &e)) {
      if (e.type == LP_EV_STOP)
        stop = 1;
      else
        handle(h, &e, now);
    }
    if (stop) {
      if (metrics) metrics_write(h, lp_now_ns(), 0); /* the final counters */
      break;
    }
    fatal_sweep(h, now);
    poll_ports(h, now);
    if (h->env->cfg.gray && now >= h->next_gray_ns) {
      gray_tick(h, now);
      h->next_gray_ns = now + LP_GRAY_WINDOW_NS;
    }
    uint64_t lost = lp_ring_overflows(&h->ring);
    if (lost != reported_overflows) {
      LP_WARN("event ring overflowed: %llu events lost so far (ports are still polled)", (unsigned long long)lost);
      reported_overflows = lost;
      h->metrics.dirty = 1;
    }
    /* A connection end that moved changed the counters: the file follows
     * within this thread's longest wait (LP_POLL_DOWN_NS), or once its
     * sweep is over.  Moves do not wake the thread: a thousand of them in
     * one sweep would rewrite the file a thousand times, on the cores the
     * moves need; and while a sweep goes on, the thread's looks for its
     * event lines (every 10 ms) rewrite it only at its period. */
    uint64_t moves = moves_counted(&h->stats);
    if (moves != moves_written) {
      moves_written = moves;
      h->metrics.dirty = 1;
    }
    now = lp_now_ns();
    if (lp_metrics_file_due(&h->metrics, now) && (now >= h->metrics.next_ns || lp_health_sweep_over(h, now)))
      metrics_write(h, now, 1);
  }
  return NULL;
}

int lp_health_start(struct lp_health *h, const struct lp_env *env) {
  if (h->running) return 0;
  h->env = env;
  uint64_t now = lp_now_ns();
  uint64_t base = env->cfg.ns.holddown_ns, max = env->cfg.ns.holddown_max_ns;
  for (int d = 0; d < h->env->ndevs; d++) {
    lp_holddown_init(&h->hd[d], base, max, now);
    lp_holddown_init(&h->silent[d], base, max, now);
    lp_gray_reset(&h->gray[d]);
    lp_gray_rate_reset(&h->rate[d]);
    h->rate_at_ns[d] = 0;
    h->fault_ns[d] = 0;
    atomic_store(&h->down_reason[d], LP_FO_PORT_DOWN);
    atomic_store(&h->healthy[d], 1);
    atomic_store(&h->link_up[d], 1);
  }
  h->next_poll_ns = now + LP_POLL_ALL_NS;
  if (env->cfg.gray) {
    char why[700];
    int rc = lp_rateboard_open(&h->board, env->cfg.rate_board, (int)getpid(), why, sizeof(why));
    if (rc > 0)
      LP_INFO(NCCL_INIT | NCCL_NET, "no rate board (%s): each port's rate is compared with this process's own only",
              why);
    else if (rc < 0)
      LP_WARN("no rate board: %s; a slow port is judged against this process's own ports only", why);
  } else {
    h->board.t = NULL;
  }
  lp_metrics_file_open(&h->metrics, env->cfg.metrics_file, (int)getpid(), env->hostname, env->ndevs);
  if (lp_ring_init(&h->ring, LP_RING_CAPACITY) != 0) goto fail_metrics;
  h->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (h->stop_fd < 0) goto fail_ring;
  h->change_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (h->change_fd < 0)
    LP_INFO(NCCL_INIT | NCCL_NET,
            "no eventfd for health changes (%s): a comm NCCL is not calling moves at its next call", strerror(errno));
  h->running = 1;
  if (pthread_create(&h->control, NULL, control_main, h) != 0) goto fail_fd;
  pthread_setname_np(h->control, "lp-control"); /* for top -H, perf and gdb; best effort */
  h->nasync = 0;
  for (int n = 0; n < env->nnics; n++) {
    h->async_arg[h->nasync] = (struct lp_async_arg){.h = h, .nic = n};
    if (pthread_create(&h->async[h->nasync], NULL, async_main, &h->async_arg[h->nasync]) != 0) {
      LP_WARN("cannot start the async-event thread of %s: its port events are seen by polling only", env->nics[n].name);
      continue;
    }
    char name[16]; /* the kernel's limit with the NUL: a long NIC name is cut to fit */
    snprintf(name, sizeof(name), "lp-ev-%.9s", env->nics[n].name);
    pthread_setname_np(h->async[h->nasync], name);
    h->nasync++;
  }
  lp_netwatch_start(&h->nw, env, &h->ring, h->stop_fd); /* RoCE only; it warns itself when it cannot */
  return 0;
fail_fd:
  h->running = 0;
  close(h->stop_fd);
  if (h->change_fd >= 0) close(h->change_fd);
fail_ring:
  lp_ring_fini(&h->ring);
fail_metrics:
  lp_metrics_file_close(&h->metrics);
  lp_rateboard_close(&h->board);
  LP_WARN("cannot start the control thread: link failover is off");
  return -1;
}

void lp_health_stop(struct lp_health *h) {
  if (!h->running) return;
  uint64_t one = 1;
  if (write(h->stop_fd, &one, sizeof(one)) < 0) LP_WARN("cannot wake the async-event threads: %s", strerror(errno));
  for (int i = 0; i < h->nasync; i++) pthread_join(h->async[i], NULL);
  lp_netwatch_stop(&h->nw);
  struct lp_event stop = {.type = LP_EV_STOP};
  while (!lp_ring_try_push(&h->ring, &stop)) { /* retried, not lost: not an overflow */
    /* Full ring: the control thread is draining it; the stop gets in next. */
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  pthread_join(h->control, NULL);
  lp_rateboard_close(&h->board);
  h->running = 0;
  close(h->stop_fd);
  if (h->change_fd >= 0) close(h->change_fd);
  h->change_fd = -1;
  lp_metrics_file_close(&h->metrics);
}

void lp_health_free(struct lp_health *h) {
  if (h->running || h->ring.slots == NULL) return; /* not stopped, or no ring made */
  lp_ring_fini(&h->ring);
}
