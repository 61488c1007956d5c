/* Which control sockets have something to read (ctlready.h). */
#include "ctlready.h"

#include <errno.h>
#include <sys/epoll.h>
#include <unistd.h>

int lp_ctl_ready_start(struct lp_ctl_ready *r) {
  r->epfd = -1;
  atomic_store_explicit(&r->next_ns, 0, memory_order_relaxed);
  int err = pthread_mutex_init(&r->mu, NULL); /* an error number, not errno */
  if (err != 0) return -err;
  r->started = 1;
  r->epfd = epoll_create1(EPOLL_CLOEXEC);
  return r->epfd >= 0 ? 0 : -errno;
}

void lp_ctl_ready_stop(struct lp_ctl_ready *r) {
  if (!r->started) return;
  pthread_mutex_lock(&r->mu);
  if (r->epfd >= 0) close(r->epfd);
  r->epfd = -1;
  pthread_mutex_unlock(&r->mu);
}

int lp_ctl_ready_add(struct lp_ctl_ready *r, int fd, _Atomic int *flag) {
  struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.ptr = flag};
  pthread_mutex_lock(&r->mu);
  int rc = r->epfd < 0 ? -ENODEV : epoll_ctl(r->epfd, EPOLL_CTL_ADD, fd, &ev) == 0 ? 0 : -errno;
  pthread_mutex_unlock(&r->mu);
  return rc;
}

void lp_ctl_ready_remove(struct lp_ctl_ready *r, int fd) {
  pthread_mutex_lock(&r->mu);
  if (r->epfd >= 0) epoll_ctl(r->epfd, EPOLL_CTL_DEL, fd, NULL); /* ENOENT: it never got in */
  pthread_mutex_unlock(&r->mu);
}

void lp_ctl_ready_poll(struct lp_ctl_ready *r, uint64_t now) {
  uint64_t next = atomic_load_explicit(&r->next_ns, memory_order_relaxed);
  if (now < next || !atomic_compare_exchange_strong_explicit(&r->next_ns, &next, now + LP_CTL_READY_EVERY_NS,
                                                             memory_order_relaxed, memory_order_relaxed))
    return;
  if (pthread_mutex_trylock(&r->mu) != 0) return; /* another thread is looking, or one leaves the set */
  struct epoll_event evs[256];
  int n;
  do {
    n = r->epfd < 0 ? 0 : epoll_wait(r->epfd, evs, (int)(sizeof(evs) / sizeof(evs[0])), 0);
    for (int i = 0; i < n; i++) atomic_store_explicit((_Atomic int *)evs[i].data.ptr, 1, memory_order_release);
  } while (n == (int)(sizeof(evs) / sizeof(evs[0])));
  pthread_mutex_unlock(&r->mu);
}
