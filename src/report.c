/* Failover, failback and lost-path lines for syslog and NCCL's log. */
#include "report.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

static const char *kind_name(enum lp_report_kind k) {
  switch (k) {
  case LP_REPORT_FAILOVER: return "failover";
  case LP_REPORT_FAILBACK: return "failback";
  case LP_REPORT_PATH_LOST: return "path_lost";
  }
  return "unknown";
}

/* Values never contain blanks, so a line splits on spaces then on '='. */
static const char *field(const char *s) { return s && *s ? s : "-"; }

int lp_report_format(const struct lp_report *r, char *buf, size_t len) {
  return snprintf(buf, len,
                  "event=%s comm=0x%llx dir=%s dev=%s port=%d new_dev=%s new_port=%d peer=%s reason=%s "
                  "inflight=%d replayed=%d replayed_bytes=%llu duration_us=%llu path=%s",
                  kind_name(r->kind), (unsigned long long)r->comm, field(r->dir), field(r->dev), r->port,
                  field(r->new_dev), r->new_dev ? r->new_port : 0, field(r->peer), field(r->reason), r->inflight,
                  r->replayed, (unsigned long long)r->replayed_bytes, (unsigned long long)r->duration_us,
                  field(r->path));
}

int lp_syslog_format(int facility, int severity, const char *msg, char *buf, size_t len) {
  time_t now = time(NULL);
  struct tm tm;
  char stamp[32];
  localtime_r(&now, &tm);
  strftime(stamp, sizeof(stamp), "%b %e %H:%M:%S", &tm);
  return snprintf(buf, len, "<%d>%s linkpass[%d]: %s", facility | severity, stamp, (int)getpid(), msg);
}

#define LP_SYSLOG_DGRAM 1024 /* the longest datagram sent */
#define LP_SYSLOG_HELD 2048  /* datagrams held while the daemon's socket is full */
#define LP_SYSLOG_CLOSE_S 1  /* how long the last ones may wait for room at exit */

/* Lines the socket had no room for, oldest first, sent by the next line or
 * the control thread's next look (lp_syslog_flush).  A sweep of a thousand
 * moves makes a thousand lines in a millisecond or two; the kernel queues
 * only net.unix.max_dgram_qlen of them (10 unless raised), and a blocking
 * send would stall the thread that moves connections until the daemon
 * caught up: a sweep was timed at the pace of the syslog reader. */
struct lp_syslog_held {
  pthread_mutex_t mu;
  char (*dgram)[LP_SYSLOG_DGRAM]; /* a ring, allocated when the socket is first full */
  uint16_t *len;
  unsigned head, count;
  uint64_t dropped, dropped_said; /* lines that found the ring full too */
};

/* 0, -EAGAIN (no room: the daemon has not read), or -errno. */
static int send_dgram(const struct lp_syslog *sl, const char *dgram, size_t n, int flags) {
  struct sockaddr_un to = {.sun_family = AF_UNIX};
  snprintf(to.sun_path, sizeof(to.sun_path), "%s", sl->socket);
  if (sendto(sl->fd, dgram, n, MSG_NOSIGNAL | flags, (struct sockaddr *)&to, sizeof(to)) >= 0) return 0;
  return errno == EWOULDBLOCK ? -EAGAIN : -errno;
}

/* Send held lines while the socket takes them; under h->mu.  A line the
 * socket refuses for another reason (no daemon) is lost, as syslog(3)
 * loses it.  Returns the lines still held. */
static unsigned send_held(const struct lp_syslog *sl, struct lp_syslog_held *h, int flags) {
  while (h->count > 0) {
    unsigned i = h->head % LP_SYSLOG_HELD;
    if (send_dgram(sl, h->dgram[i], h->len[i], flags) == -EAGAIN) break;
    h->head++;
    h->count--;
  }
  return h->count;
}

static void hold(struct lp_syslog_held *h, const char *dgram, size_t n) {
  if (h->dgram == NULL) h->dgram = malloc(sizeof(*h->dgram) * LP_SYSLOG_HELD);
  if (h->len == NULL) h->len = malloc(sizeof(*h->len) * LP_SYSLOG_HELD);
  if (h->dgram == NULL || h->len == NULL || h->count == LP_SYSLOG_HELD) {
    h->dropped++;
    return;
  }
  unsigned i = (h->head + h->count++) % LP_SYSLOG_HELD;
  memcpy(h->dgram[i], dgram, n);
  h->len[i] = (uint16_t)n;
}

/* One datagram to the syslog socket, never waiting for room: lines the
 * socket cannot take yet are held, in order (lp_syslog_held).  A missing
 * daemon loses the line, as syslog(3) does; NCCL's log still has it.  The
 * socket is opened once (lp_syslog_open) and shared by every thread;
 * naming the address each time keeps working when the syslog daemon
 * restarts and makes its socket anew. */
static void syslog_send(const struct lp_syslog *sl, int severity, const char *msg) {
  char dgram[LP_SYSLOG_DGRAM];
  int n = lp_syslog_format(sl->facility, severity, msg, dgram, sizeof(dgram));
  if (n < 0 || sl->fd < 0) return;
  if ((size_t)n >= sizeof(dgram)) n = (int)sizeof(dgram) - 1;
  struct lp_syslog_held *h = sl->held;
  pthread_mutex_lock(&h->mu);
  int rc = send_held(sl, h, MSG_DONTWAIT) > 0 ? -EAGAIN : send_dgram(sl, dgram, (size_t)n, MSG_DONTWAIT);
  if (rc == -EAGAIN) hold(h, dgram, (size_t)n);
  pthread_mutex_unlock(&h->mu);
  if (rc != 0 && rc != -EAGAIN)
    LP_INFO(NCCL_NET, "syslog socket %s does not take lines (%s); the event is in this log only", sl->socket,
            strerror(-rc));
}

unsigned lp_syslog_flush(const struct lp_syslog *sl) {
  struct lp_syslog_held *h = sl->held;
  if (h == NULL || sl->fd < 0) return 0;
  pthread_mutex_lock(&h->mu);
  unsigned left = send_held(sl, h, MSG_DONTWAIT);
  uint64_t dropped = h->dropped, said = h->dropped_said;
  h->dropped_said = dropped;
  pthread_mutex_unlock(&h->mu);
  if (dropped != said)
    LP_WARN(
        "syslog socket %s was full: %llu event lines were not sent to syslog (NCCL's log has them); raise "
        "net.unix.max_dgram_qlen or check that the syslog daemon keeps up",
        sl->socket, (unsigned long long)(dropped - said));
  return left;
}

int lp_syslog_open(struct lp_syslog *sl) {
  sl->fd = -1;
  sl->held = NULL;
  if (!sl->enabled) return 0;
  struct lp_syslog_held *h = calloc(1, sizeof(*h));
  if (h == NULL || pthread_mutex_init(&h->mu, NULL) != 0) goto fail;
  sl->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (sl->fd < 0) goto fail_mu;
  sl->held = h;
  return 0;
fail_mu:
  pthread_mutex_destroy(&h->mu);
fail:
  LP_WARN("cannot create a socket for syslog (%s): event lines go to NCCL's log only", strerror(errno));
  free(h);
  return -1;
}

/* The lines still held go out first, waiting up to LP_SYSLOG_CLOSE_S for
 * room: the process is ending, and its last moves are worth the wait. */
void lp_syslog_close(struct lp_syslog *sl) {
  struct lp_syslog_held *h = sl->held;
  if (h != NULL) {
    struct timeval limit = {.tv_sec = LP_SYSLOG_CLOSE_S};
    if (h->count > 0 && setsockopt(sl->fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit)) == 0) {
      pthread_mutex_lock(&h->mu);
      h->dropped += send_held(sl, h, 0);
      pthread_mutex_unlock(&h->mu);
    }
    lp_syslog_flush(sl); /* says what was dropped */
    pthread_mutex_destroy(&h->mu);
    free(h->dgram);
    free(h->len);
    free(h);
    sl->held = NULL;
  }
  if (sl->fd >= 0) close(sl->fd);
  sl->fd = -1;
}

void lp_report_emit(const struct lp_syslog *sl, const struct lp_report *r) {
  char line[512];
  lp_report_format(r, line, sizeof(line));
  lp_report_line(sl, r->kind == LP_REPORT_FAILBACK ? LOG_NOTICE : LOG_WARNING, line);
}

void lp_report_line(const struct lp_syslog *sl, int severity, const char *line) {
  if (sl->enabled) syslog_send(sl, severity, line);
  LP_WARN("%s", line);
}
