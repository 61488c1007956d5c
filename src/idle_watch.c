/* The idle-receiver watch (idle_watch.h). */
#include "idle_watch.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "clock.h"
#include "failover.h"
#include "log.h"
#include "progress.h"

static void wake(struct lp_idle_watch *w) {
  uint64_t one = 1;
  if (write(w->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
    LP_WARN("cannot wake the idle-receiver watch: %s", strerror(errno));
}

/* Note the control connections to watch (bit i: path i) and their fds: a
 * connection given up stays disarmed, one made again is armed on its new
 * fd.  Only while the comm is held: the watch reads the copies. */
static void note_paths(struct lp_comm *c) {
  unsigned m = 0;
  for (int i = 0; i < LP_CTL_PATHS; i++) {
    m |= (unsigned)lp_ctl_path_live(&c->ctl, i) << i;
    c->fo->watch_fd[i] = c->ctl.path[i].fd;
  }
  c->fo->watch_paths = m;
}

/* One progress call on a comm whose control socket is ready, if NCCL is
 * not calling it and has not for LP_IDLE_NS.  Under w->mu. */
static void answer(struct lp_comm *c, uint64_t now) {
  c->fo->watch_skip_until_ns = now + LP_IDLE_NS; /* at most one look per idle period */
  if (!lp_comm_try_enter(c)) return;             /* NCCL is in it */
  if (now - c->progress_ns < LP_IDLE_NS) {
    c->fo->watch_skip_until_ns = c->progress_ns + LP_IDLE_NS; /* NCCL is calling: it reads the socket */
  } else {
    /* An error stays in the comm: NCCL's next call reports it.  Its
     * socket fired: read it, whatever the process's set has seen yet. */
    atomic_store_explicit(&c->fo->rx_ready, 1, memory_order_relaxed);
    lp_comm_progress(c);
    c->fo->watch_tx = lp_ctl_tx_pending(&c->ctl); /* an answer a socket did not take whole */
  }
  note_paths(c);
  /* A closed peer or a failed comm keeps the socket readable for good:
   * nothing more to answer there. */
  c->fo->watch_off = c->error != ncclSuccess || c->fo->peer_closed;
  lp_comm_leave(c);
}

/* The looks at a comm whose connection is being made again: a LAN
 * connection is made in well under this, an attempt has 2 s
 * (LP_CTL_REMAKE_WAIT_NS), and a thousand comms trying at once after a
 * cut cost the thread a progress call each per look. */
#define LP_REMAKE_LOOK_NS 10000000ull /* 10 ms */
#define LP_REMAKE_DEFER_NS 1000000ull /* a step due, past a pass's budget (rearm_due) */

/* Comms looked at between two waits of a sweep: the answers to sockets
 * that fired meanwhile do not wait for a thousand moves to start. */
#define LP_SWEEP_BATCH 16

/* A control connection given up is made again in the ticks of progress
 * calls (ctlchan.h): a comm NCCL does not call would keep the one left
 * until NCCL calls it again, and a fault of that one's interface meanwhile
 * would end its control channel.  So such a comm stays on the list while
 * it has one to make again, and gets a progress call when the channel's
 * next step is due and NCCL has left it idle (LP_IDLE_NS).  Returns when
 * that step is due next (UINT64_MAX: nothing to make).  Under w->mu, the
 * comm held. */
static uint64_t remake_step(struct lp_comm *c, uint64_t now, int *budget) {
  uint64_t due = lp_ctl_next_tick_ns(&c->ctl);
  if (due > now || now - c->progress_ns < LP_IDLE_NS) return due; /* not yet, or NCCL is calling: it ticks */
  if (*budget == 0) return now; /* this pass made its calls: the next one, after the sockets' answers */
  --*budget;
  atomic_store_explicit(&c->fo->rx_ready, 1, memory_order_relaxed); /* the call reads the clock (lp_fo_due) */
  lp_comm_progress(c);
  c->fo->watch_tx = lp_ctl_tx_pending(&c->ctl);
  c->fo->watch_off = c->error != ncclSuccess || c->fo->peer_closed;
  return c->fo->watch_off ? UINT64_MAX : lp_ctl_next_tick_ns(&c->ctl);
}

/* Watch c's control sockets for one event each (EPOLLONESHOT: a socket is
 * disarmed once it fires, until answered and its idle period is over).
 * Their fds stay open until the comm is freed, after it left the watch
 * (ctlchan.h keeps those of connections made again).  A connection made
 * again is not in the set yet: added.  Under w->mu. */
static void arm(struct lp_idle_watch *w, struct lp_comm *c) {
  for (int i = 0; i < LP_CTL_PATHS; i++) {
    if (!(c->fo->watch_paths >> i & 1u)) continue;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLONESHOT | (c->fo->watch_tx ? EPOLLOUT : 0u), .data.ptr = c};
    int fd = c->fo->watch_fd[i];
    if (epoll_ctl(w->epfd, EPOLL_CTL_MOD, fd, &ev) != 0 &&
        (errno != ENOENT || epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) != 0))
      LP_WARN("idle-receiver watch: cannot watch the control socket to %s: %s (it answers moves at NCCL's next call)",
              c->peer, strerror(errno));
  }
}

/* look_again's progress call, the comm held. */
static void health_look(struct lp_idle_watch *w, struct lp_comm *c) {
  c->fo->watch_relook = 0;
  if (lp_fo_due(c)) {
    lp_comm_progress(c);
    c->fo->watch_tx = lp_ctl_tx_pending(&c->ctl);
    note_paths(c);
    c->fo->watch_off = c->error != ncclSuccess || c->fo->peer_closed;
    /* A message that did not go out whole, or a connection made again:
     * armed now, unless it waits on the list to be armed anyway. */
    if (!c->fo->watch_off && !c->fo->watch_queued) {
      arm(w, c);
      /* A connection given up in this call: the list makes it again
       * (remake_step). */
      if (lp_ctl_next_tick_ns(&c->ctl) != UINT64_MAX) {
        c->fo->watch_skip_until_ns = lp_now_ns() + LP_REMAKE_LOOK_NS;
        c->fo->watch_queued = 1;
        w->later[w->nlater++] = c;
      }
    }
  }
}

/* A health change: one progress call on a comm NCCL is not in, which
 * starts its move (or its failback) if its NIC is concerned.  Unlike an
 * answer, it does not wait for the comm to be idle: the last progress call
 * may have been this thread's own (a standby's set-up), and a comm NCCL
 * is calling only starts its move a little sooner.  Under w->mu. */
static void look_again(struct lp_idle_watch *w, struct lp_comm *c) {
  if (c->fo->watch_off) return;
  if (!lp_comm_try_enter(c)) {
    /* Held: a data call of NCCL's looks at the health itself, unless it
     * read it before this change; a registration or a flush holds the comm
     * and does not look.  So the look comes back (rearm_due): a comm left
     * idle after it stayed on a dead NIC, its peer unwarned. */
    c->fo->watch_relook = 1;
    if (!c->fo->watch_queued) {
      c->fo->watch_skip_until_ns = lp_now_ns() + LP_REMAKE_DEFER_NS;
      c->fo->watch_queued = 1;
      w->later[w->nlater++] = c;
    }
    return;
  }
  health_look(w, c);
  lp_comm_leave(c);
}

/* The next few comms of the sweep; 1 while it is not over.  Comms added
 * or removed meanwhile may be looked at twice or not at all: those learn
 * of the change at NCCL's next call, as without the sweep.  Under w->mu. */
static int sweep_some(struct lp_idle_watch *w) {
  for (int k = 0; k < LP_SWEEP_BATCH && w->sweep_next >= 0; k++) {
    if (w->sweep_next >= w->n) {
      w->sweep_next = -1;
      break;
    }
    look_again(w, w->comms[w->sweep_next++]);
  }
  return w->sweep_next >= 0;
}

/* Connections a comm gave up in NCCL's own calls, which NCCL then left
 * idle, are made again by no call of the watch's (rearm_due takes the
 * comms the watch itself answered): once in LP_REMAKE_SCAN_NS, every comm
 * NCCL has left idle with a connection to make joins the list.  One NCCL
 * is calling makes it itself, and is left out: on the list it would be
 * taken and armed every 10 ms for nothing (the next scan finds it if NCCL
 * leaves it).  Under w->mu. */
#define LP_REMAKE_SCAN_NS 1000000000ull /* 1 s: a remake's first try comes 1 s after the loss */

static void scan_remakes(struct lp_idle_watch *w, uint64_t now) {
  for (int i = 0; i < w->n; i++) {
    struct lp_comm *c = w->comms[i];
    if (c->fo->watch_queued || c->fo->watch_off || !lp_comm_try_enter(c)) continue;
    if (c->progress_ns + LP_IDLE_NS <= now && lp_ctl_next_tick_ns(&c->ctl) != UINT64_MAX) {
      c->fo->watch_skip_until_ns = now;
      c->fo->watch_queued = 1;
      w->later[w->nlater++] = c;
    }
    lp_comm_leave(c);
  }
}

/* An eventfd that fired, read back to 0 (it is non-blocking). */
static void clear_eventfd(int fd) {
  uint64_t v;
  if (read(fd, &v, sizeof(v)) < 0 && errno != EAGAIN) LP_WARN("idle-receiver watch: %s", strerror(errno));
}

/* c is still on the list (the list changed while the thread waited). */
static int listed(const struct lp_idle_watch *w, const struct lp_comm *c) {
  for (int i = 0; i < w->n; i++)
    if (w->comms[i] == c) return 1;
  return 0;
}

/* Comms answered lately are armed again once their idle period is over;
 * returns the earliest such time still ahead (UINT64_MAX: none).  The fds
 * are noted again first: NCCL's calls may have made a connection again
 * since the answer (one that found NCCL in the comm noted nothing), and
 * arming the old copies would leave the new socket unwatched.  A comm
 * NCCL is in waits for the next period. */
static uint64_t rearm_due(struct lp_idle_watch *w, uint64_t now) {
  uint64_t next = UINT64_MAX;
  /* Progress calls a pass makes for connections to make again: a thousand
   * comms whose shared interface was cut all try at once, and a pass of a
   * thousand calls would hold the lock (NCCL's add and remove) and the
   * answers to moves behind it.  The rest wait for the next pass, a
   * millisecond later. */
  int budget = LP_SWEEP_BATCH;
  for (int i = 0; i < w->nlater;) {
    struct lp_comm *c = w->later[i];
    if (c->fo->watch_skip_until_ns <= now && !lp_comm_try_enter(c)) c->fo->watch_skip_until_ns = now + LP_IDLE_NS;
    if (c->fo->watch_skip_until_ns <= now) {
      if (c->fo->watch_relook && !c->fo->watch_off) health_look(w, c); /* a look that found it held */
      uint64_t due = c->fo->watch_off ? UINT64_MAX : remake_step(c, now, &budget);
      /* What is queued now, not at the watch's last call: NCCL's calls may
       * have sent it, and an EPOLLOUT armed for nothing fires at once. */
      c->fo->watch_tx = lp_ctl_tx_pending(&c->ctl);
      note_paths(c);
      /* Armed before leaving, as look_again does: once NCCL is back in the
       * comm it may make a connection again, and the fds noted would be
       * the old ones. */
      if (!c->fo->watch_off) arm(w, c); /* set meanwhile by a look (a failed comm, a closed peer) */
      lp_comm_leave(c);
      if (due != UINT64_MAX) { /* a connection to make again: back when its step is due */
        c->fo->watch_skip_until_ns = due == now                      ? now + LP_REMAKE_DEFER_NS /* over budget */
                                     : due > now + LP_REMAKE_LOOK_NS ? due
                                                                     : now + LP_REMAKE_LOOK_NS;
        if (c->fo->watch_skip_until_ns < next) next = c->fo->watch_skip_until_ns;
        i++;
        continue;
      }
      c->fo->watch_queued = 0;
      w->later[i] = w->later[--w->nlater];
    } else {
      if (c->fo->watch_skip_until_ns < next) next = c->fo->watch_skip_until_ns;
      i++;
    }
  }
  return next;
}

/* The sockets are in an epoll set, each armed for one event: a wait costs
 * what is ready, not what is watched (a poll() over a thousand sockets
 * cost a sweep of moves more than the moves). */
static void *watch_main(void *arg) {
  struct lp_idle_watch *w = arg;
  struct epoll_event evs[64];
  pthread_mutex_lock(&w->mu);
  while (!w->stop) {
    uint64_t now = lp_now_ns();
    /* Also with no comm: lp_idle_watch_add does not wake the thread, and a
     * watch asleep without a timeout would never scan the comms added. */
    if (now >= w->scan_ns) {
      scan_remakes(w, now);
      w->scan_ns = now + LP_REMAKE_SCAN_NS;
    }
    uint64_t next = rearm_due(w, now);
    if (w->scan_ns < next) next = w->scan_ns;
    unsigned gen = w->gen;
    int timeout = next == UINT64_MAX ? -1 : (int)((next - now) / 1000000ull) + 1;
    if (w->sweep_next >= 0 && sweep_some(w)) timeout = 0; /* more to look at after the sockets */
    pthread_mutex_unlock(&w->mu);
    int r = epoll_wait(w->epfd, evs, (int)(sizeof(evs) / sizeof(evs[0])), timeout);
    pthread_mutex_lock(&w->mu);
    now = lp_now_ns();
    for (int j = 0; j < r; j++) {
      struct lp_comm *c = evs[j].data.ptr;
      if (c == NULL) { /* the eventfd: the list changed, or stop */
        clear_eventfd(w->wake_fd);
        continue;
      }
      if ((void *)c == (void *)w) { /* a health change: every comm looks again, from the first */
        clear_eventfd(w->health_fd);
        w->sweep_next = 0;
        continue;
      }
      if (w->gen != gen && !listed(w, c)) continue; /* removed (and maybe freed) while we waited */
      answer(c, now);
      /* A closed peer or a failed comm stays disarmed: nothing more to answer.
       * With two control sockets both may fire before they are armed again. */
      if (!c->fo->watch_off && !c->fo->watch_queued) {
        c->fo->watch_queued = 1;
        w->later[w->nlater++] = c;
      }
    }
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

int lp_idle_watch_start(struct lp_idle_watch *w, int health_fd) {
  memset(w, 0, sizeof(*w));
  w->health_fd = -1;
  w->sweep_next = -1;
  w->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (w->wake_fd < 0) goto fail;
  w->epfd = epoll_create1(EPOLL_CLOEXEC);
  if (w->epfd < 0) goto fail_fd;
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
  if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->wake_fd, &ev) != 0) goto fail_ep;
  struct epoll_event hev = {.events = EPOLLIN, .data.ptr = w};
  if (health_fd >= 0 && epoll_ctl(w->epfd, EPOLL_CTL_ADD, health_fd, &hev) == 0)
    w->health_fd = health_fd;
  else if (health_fd >= 0)
    LP_INFO(NCCL_INIT | NCCL_NET,
            "idle-receiver watch: cannot watch health changes (%s): an idle comm moves at its "
            "next call",
            strerror(errno));
  if (pthread_mutex_init(&w->mu, NULL) != 0) goto fail_ep;
  if (pthread_create(&w->thread, NULL, watch_main, w) != 0) goto fail_mu;
  pthread_setname_np(w->thread, "lp-idle-watch"); /* for top -H, perf and gdb; best effort */
  w->running = 1;
  return 0;
fail_mu:
  pthread_mutex_destroy(&w->mu);
fail_ep:
  close(w->epfd);
fail_fd:
  close(w->wake_fd);
fail:
  LP_WARN("cannot start the idle-receiver watch: a receiver NCCL is not calling answers a move only at its next call");
  return -1;
}

void lp_idle_watch_stop(struct lp_idle_watch *w) {
  if (!w->running || w->stop) return;
  pthread_mutex_lock(&w->mu);
  w->stop = 1;
  pthread_mutex_unlock(&w->mu);
  wake(w);
  pthread_join(w->thread, NULL);
}

void lp_idle_watch_free(struct lp_idle_watch *w) {
  if (!w->running) return;
  lp_idle_watch_stop(w);
  w->running = 0;
  free(w->comms);
  free(w->later);
  pthread_mutex_destroy(&w->mu);
  close(w->epfd);
  close(w->wake_fd);
  memset(w, 0, sizeof(*w));
}

void lp_idle_watch_add(struct lp_idle_watch *w, struct lp_comm *c) {
  if (!w->running) return;
  pthread_mutex_lock(&w->mu);
  if (w->n == w->cap) {
    /* `later` holds at most every comm: it grows with the list. */
    int ncap = w->cap ? w->cap * 2 : 16;
    struct lp_comm **nc = realloc(w->comms, sizeof(*nc) * (size_t)ncap);
    if (nc != NULL) w->comms = nc;
    struct lp_comm **nl = nc != NULL ? realloc(w->later, sizeof(*nl) * (size_t)ncap) : NULL;
    if (nl != NULL) w->later = nl;
    if (nc == NULL || nl == NULL) {
      pthread_mutex_unlock(&w->mu);
      LP_WARN("out of memory: %s is not watched while idle (it answers moves at NCCL's next call)", c->peer);
      return;
    }
    w->cap = ncap;
  }
  c->fo->watch = w;
  c->fo->watch_skip_until_ns = 0;
  c->fo->watch_off = 0;
  c->fo->watch_tx = 0;
  c->fo->watch_queued = 0;
  note_paths(c);
  w->comms[w->n++] = c;
  w->gen++;
  arm(w, c);
  pthread_mutex_unlock(&w->mu);
}

void lp_idle_watch_remove(struct lp_idle_watch *w, struct lp_comm *c) {
  if (!w->running) return;
  pthread_mutex_lock(&w->mu);
  for (int i = 0; i < w->n; i++) {
    if (w->comms[i] != c) continue;
    w->comms[i] = w->comms[--w->n];
    for (int j = 0; j < w->nlater; j++)
      if (w->later[j] == c) w->later[j--] = w->later[--w->nlater];
    /* Before its fds close (a closed fd leaves the set by itself, but not
     * while another copy of it is open: a child forked after init holds
     * one).  Every fd the comm ever had here: those of connections made
     * again stay open until the comm is freed, and may still be armed (one
     * was re-armed under its old number when the comm was busy); an event
     * on one after this would name a freed comm.  An event already taken
     * is dropped by the generation. */
    for (int k = 0; k < LP_CTL_PATHS; k++)
      if (c->ctl.path[k].fd >= 0) epoll_ctl(w->epfd, EPOLL_CTL_DEL, c->ctl.path[k].fd, NULL);
    for (int k = 0; k < c->ctl.nspent; k++) epoll_ctl(w->epfd, EPOLL_CTL_DEL, c->ctl.spent[k], NULL);
    w->gen++;
    break;
  }
  pthread_mutex_unlock(&w->mu);
}
