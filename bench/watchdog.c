/*
 * linkpass-perf: rank watchdog.
 */
#include "watchdog.h"

#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "rank.h"
#include "xfer.h"

static pthread_t thread;
static atomic_int stop_flag, fd_watched = -1, started;
static int wd_rank;
static double wd_deadline, wd_timeout;
static pthread_mutex_t phase_lock = PTHREAD_MUTEX_INITIALIZER;
static char phase[256] = "starting";

void watchdog_phase(const char *fmt, ...) {
  va_list ap;
  pthread_mutex_lock(&phase_lock);
  va_start(ap, fmt);
  vsnprintf(phase, sizeof(phase), fmt, ap);
  va_end(ap);
  pthread_mutex_unlock(&phase_lock);
}

void watchdog_set_fd(int oob_fd) { atomic_store(&fd_watched, oob_fd); }

static void die(const char *why) {
  char msg[512];
  pthread_mutex_lock(&phase_lock);
  int n = snprintf(msg, sizeof(msg), "linkpass-perf: rank %d: watchdog: %s while %s; exiting\n", wd_rank, why, phase);
  pthread_mutex_unlock(&phase_lock);
  if (n > (int)sizeof(msg) - 1) n = (int)sizeof(msg) - 1;
  /* write(2), not stdio: the main thread may hold stderr's lock */
  if (write(STDERR_FILENO, msg, (size_t)n) < 0) { /* nothing left to tell */
  }
  _exit(PERF_EXIT_ERROR);
}

static void *run(void *arg) {
  (void)arg;
  while (!atomic_load(&stop_flag)) {
    int fd = atomic_load(&fd_watched);
    if (fd >= 0) {
      /* POLLRDHUP only: the rank's own reads must not be stolen, but the
       * launcher closing its end (it died or gave up) is seen at once */
      struct pollfd p = {.fd = fd, .events = POLLRDHUP};
      if (poll(&p, 1, 200) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) && !atomic_load(&stop_flag))
        die("the launcher went away");
    } else {
      usleep(200 * 1000);
    }
    if (xfer_now() > wd_deadline) {
      char why[96];
      snprintf(why, sizeof(why), "--timeout %.0f s expired", wd_timeout);
      die(why);
    }
  }
  return NULL;
}

int watchdog_start(int rank, double timeout) {
  wd_rank = rank;
  wd_timeout = timeout;
  wd_deadline = xfer_now() + timeout;
  atomic_store(&stop_flag, 0);
  if (pthread_create(&thread, NULL, run, NULL)) return -1;
  atomic_store(&started, 1);
  return 0;
}

void watchdog_stop(void) {
  if (!atomic_exchange(&started, 0)) return;
  atomic_store(&stop_flag, 1);
  pthread_join(thread, NULL);
}
