/* Failover, failback and lost-path lines for syslog and NCCL's log. */
#include "report.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
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

/* One datagram to the syslog socket.  A missing daemon loses the line, as
 * syslog(3) does; NCCL's log still has it.  The socket is opened once
 * (lp_syslog_open) and shared by every thread: sendto on an unconnected
 * datagram socket is atomic, and naming the address each time keeps
 * working when the syslog daemon restarts and makes its socket anew. */
static void syslog_send(const struct lp_syslog *sl, int severity, const char *msg) {
  char dgram[1024];
  int n = lp_syslog_format(sl->facility, severity, msg, dgram, sizeof(dgram));
  if (n < 0 || sl->fd < 0) return;
  if ((size_t)n >= sizeof(dgram)) n = (int)sizeof(dgram) - 1;
  struct sockaddr_un to = {.sun_family = AF_UNIX};
  snprintf(to.sun_path, sizeof(to.sun_path), "%s", sl->socket);
  if (sendto(sl->fd, dgram, (size_t)n, MSG_NOSIGNAL, (struct sockaddr *)&to, sizeof(to)) < 0)
    LP_INFO(NCCL_NET, "syslog socket %s does not take lines; the event is in this log only", sl->socket);
}

int lp_syslog_open(struct lp_syslog *sl) {
  sl->fd = -1;
  if (!sl->enabled) return 0;
  sl->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (sl->fd < 0) {
    LP_WARN("cannot create a socket for syslog (%s): event lines go to NCCL's log only", strerror(errno));
    return -1;
  }
  return 0;
}

void lp_syslog_close(struct lp_syslog *sl) {
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
