/* The idle-receiver watch (idle_watch.h). */
#include "idle_watch.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
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

/* One progress call on a comm whose control socket is ready, if NCCL is
 * not calling it and has not for LP_IDLE_NS.  Under w->mu. */
static void answer(struct lp_comm *c, uint64_t now) {
  c->fo->watch_skip_until_ns = now + LP_IDLE_NS;                              /* at most one look per idle period */
  if (atomic_exchange_explicit(&c->in_call, 1, memory_order_acquire)) return; /* NCCL is in it */
  if (now - c->progress_ns < LP_IDLE_NS) {
    c->fo->watch_skip_until_ns = c->progress_ns + LP_IDLE_NS; /* NCCL is calling: it reads the socket */
  } else {
    /* An error stays in the comm: NCCL's next call reports it. */
    lp_comm_progress(c);
    c->fo->watch_tx = c->fo->tx_off != c->fo->tx_len; /* an answer the socket did not take whole */
  }
  /* A closed peer or a failed comm keeps the socket readable for good:
   * nothing more to answer there. */
  c->fo->watch_off = c->error != ncclSuccess || c->fo->peer_closed;
  lp_comm_leave(c);
}

static void *watch_main(void *arg) {
  struct lp_idle_watch *w = arg;
  struct pollfd *pfds = NULL;
  struct lp_comm **who = NULL;
  int cap = 0;
  pthread_mutex_lock(&w->mu);
  while (!w->stop) {
    if (cap < w->n + 1) {
      int ncap = w->n + 16;
      struct pollfd *np = realloc(pfds, sizeof(*np) * (size_t)ncap);
      if (np) pfds = np;
      struct lp_comm **nw = realloc(who, sizeof(*nw) * (size_t)ncap);
      if (nw) who = nw;
      if (!np || !nw) {
        LP_WARN("out of memory in the idle-receiver watch: idle receivers answer moves at NCCL's next call");
        break;
      }
      cap = ncap;
    }
    uint64_t now = lp_now_ns(), next = UINT64_MAX;
    int k = 0;
    pfds[k++] = (struct pollfd){.fd = w->wake_fd, .events = POLLIN};
    for (int i = 0; i < w->n; i++) {
      struct lp_comm *c = w->comms[i];
      if (c->fo->watch_off) continue;
      if (c->fo->watch_skip_until_ns > now) {
        if (c->fo->watch_skip_until_ns < next) next = c->fo->watch_skip_until_ns;
        continue;
      }
      who[k] = c;
      pfds[k++] = (struct pollfd){.fd = c->fd, .events = (short)(POLLIN | (c->fo->watch_tx ? POLLOUT : 0))};
    }
    unsigned gen = w->gen;
    int timeout = next == UINT64_MAX ? -1 : (int)((next - now) / 1000000ull) + 1;
    pthread_mutex_unlock(&w->mu);
    int r = poll(pfds, (nfds_t)k, timeout);
    pthread_mutex_lock(&w->mu);
    if (r <= 0) continue;
    if (pfds[0].revents) {
      uint64_t v;
      if (read(w->wake_fd, &v, sizeof(v)) < 0 && errno != EAGAIN) LP_WARN("idle-receiver watch: %s", strerror(errno));
    }
    if (w->gen != gen) continue; /* a comm may be gone: look again */
    now = lp_now_ns();
    for (int j = 1; j < k; j++)
      if (pfds[j].revents) answer(who[j], now);
  }
  pthread_mutex_unlock(&w->mu);
  free(pfds);
  free(who);
  return NULL;
}

int lp_idle_watch_start(struct lp_idle_watch *w) {
  memset(w, 0, sizeof(*w));
  w->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (w->wake_fd < 0) goto fail;
  if (pthread_mutex_init(&w->mu, NULL) != 0) goto fail_fd;
  if (pthread_create(&w->thread, NULL, watch_main, w) != 0) goto fail_mu;
  w->running = 1;
  return 0;
fail_mu:
  pthread_mutex_destroy(&w->mu);
fail_fd:
  close(w->wake_fd);
fail:
  LP_WARN("cannot start the idle-receiver watch: a receiver NCCL is not calling answers a move only at its next call");
  return -1;
}

void lp_idle_watch_stop(struct lp_idle_watch *w) {
  if (!w->running) return;
  pthread_mutex_lock(&w->mu);
  w->stop = 1;
  pthread_mutex_unlock(&w->mu);
  wake(w);
  pthread_join(w->thread, NULL);
  w->running = 0;
  free(w->comms);
  pthread_mutex_destroy(&w->mu);
  close(w->wake_fd);
  memset(w, 0, sizeof(*w));
}

void lp_idle_watch_add(struct lp_idle_watch *w, struct lp_comm *c) {
  if (!w->running) return;
  pthread_mutex_lock(&w->mu);
  if (w->n == w->cap) {
    int ncap = w->cap ? w->cap * 2 : 16;
    struct lp_comm **nc = realloc(w->comms, sizeof(*nc) * (size_t)ncap);
    if (nc == NULL) {
      pthread_mutex_unlock(&w->mu);
      LP_WARN("out of memory: %s is not watched while idle (it answers moves at NCCL's next call)", c->peer);
      return;
    }
    w->comms = nc;
    w->cap = ncap;
  }
  c->fo->watch = w;
  c->fo->watch_skip_until_ns = 0;
  c->fo->watch_off = 0;
  c->fo->watch_tx = 0;
  w->comms[w->n++] = c;
  w->gen++;
  pthread_mutex_unlock(&w->mu);
  wake(w);
}

void lp_idle_watch_remove(struct lp_idle_watch *w, struct lp_comm *c) {
  if (!w->running) return;
  pthread_mutex_lock(&w->mu);
  for (int i = 0; i < w->n; i++) {
    if (w->comms[i] != c) continue;
    w->comms[i] = w->comms[--w->n];
    w->gen++;
    pthread_mutex_unlock(&w->mu);
    wake(w); /* its fd is about to close: stop polling it */
    return;
  }
  pthread_mutex_unlock(&w->mu);
}
