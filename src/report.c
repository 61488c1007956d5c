/* Failover, failback and lost-path lines for syslog and NCCL's log. */
#include "report.h"

#include <errno.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
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

/* RFC 3339 in UTC with microseconds ("-" when unknown): one token, sorts
 * as text, and read the same wherever the reader's time zone is. */
void lp_report_time(uint64_t at_us, char *out, size_t len) {
  time_t s = (time_t)(at_us / 1000000);
  struct tm tm;
  if (at_us == 0 || gmtime_r(&s, &tm) == NULL) {
    snprintf(out, len, "-");
    return;
  }
  char day[24];
  strftime(day, sizeof(day), "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(out, len, "%s.%06uZ", day, (unsigned)(at_us % 1000000));
}

int lp_report_format(const struct lp_report *r, char *buf, size_t len) {
  char at[LP_REPORT_TIME_LEN];
  lp_report_time(r->at_us, at, sizeof(at));
  return snprintf(buf, len,
                  "event=%s comm=0x%llx dir=%s dev=%s port=%d new_dev=%s new_port=%d peer=%s reason=%s "
                  "inflight=%d replayed=%d replayed_bytes=%llu duration_us=%llu path=%s time=%s",
                  kind_name(r->kind), (unsigned long long)r->comm, field(r->dir), field(r->dev), r->port,
                  field(r->new_dev), r->new_dev ? r->new_port : 0, field(r->peer), field(r->reason), r->inflight,
                  r->replayed, (unsigned long long)r->replayed_bytes, (unsigned long long)r->duration_us,
                  field(r->path), at);
}

int lp_syslog_format(int facility, int severity, const char *msg, char *buf, size_t len) {
  time_t now = time(NULL);
  struct tm tm;
  char stamp[32];
  localtime_r(&now, &tm);
  /* RFC 3164's month is English, whatever LC_TIME the application set
   * (strftime's %b follows it: "Dez"), as glibc's syslog(3) writes it. */
  static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                     "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  char clock_part[16];
  strftime(clock_part, sizeof(clock_part), "%H:%M:%S", &tm);
  snprintf(stamp, sizeof(stamp), "%s %2d %s", months[tm.tm_mon % 12], tm.tm_mday, clock_part);
  return snprintf(buf, len, "<%d>%s linkpass[%d]: %s", facility | severity, stamp, (int)getpid(), msg);
}

#define LP_SYSLOG_DGRAM 1024         /* the longest datagram sent */
#define LP_SYSLOG_HELD 8192          /* lines held at most, for room in the socket or a sweep's end (8.5 MiB) */
#define LP_SYSLOG_CLOSE_S 2          /* how long the last ones may wait for room at exit, in all */
#define LP_HOLD_MAX_NS 1000000000ull /* a line held for a sweep goes out after this, sweep or not */
#define LP_SYSLOG_WAIT_MS 2          /* after a sweep, how long one send waits for room */
#define LP_FLUSH_BATCH 1             /* lines sent under the lock at a time then: a mover waits for one send at most */

/* Lines not sent yet, oldest first.  Two reasons to hold one:
 *  - the socket had no room: a sweep of a thousand moves makes a thousand
 *    lines in a millisecond or two; the kernel queues only
 *    net.unix.max_dgram_qlen of them (10 unless raised), and a blocking send
 *    would stall the thread that moves connections until the daemon caught
 *    up: a sweep was timed at the pace of the syslog reader;
 *  - the line tells of a move made in a sweep (lp_report_emit's `sweep`):
 *    sending it, mirroring it to NCCL's log and the daemon's reading it took
 *    a sixth of the CPU of a sweep of 4,096 moves on two cores
 *    (docs/SCALE.md), from the moves still waiting.  Such a line waits,
 *    with the time of the move in its header, until the control thread
 *    says the sweep is over (lp_syslog_flush), LP_HOLD_MAX_NS at most.
 * Lines leave in order: a line behind a held one waits for it. */
struct lp_held_line {
  uint64_t at_ns;  /* when it was held */
  uint16_t len;    /* of the datagram */
  uint16_t msg;    /* where the message starts in it (after the syslog header) */
  uint8_t mirror;  /* NCCL's log has not had it yet */
  uint8_t sweep;   /* held for the sweep's end, not only for room */
  uint8_t to_sock; /* for the syslog socket */
  char dgram[LP_SYSLOG_DGRAM];
};

struct lp_syslog_held {
  pthread_mutex_t mu;
  /* A ring of LP_SYSLOG_HELD lines, allocated whole at open: only the
   * pages a sweep writes are ever touched.  Grown by doubling, it was
   * copied in the middle of a sweep, onto pages never touched before, and
   * page faults cost a sweep more than their count says (docs/SCALE.md). */
  struct lp_held_line *line;
  unsigned head, count;
  /* Lines from the ring's start whose pages are touched (lp_syslog_ends),
   * for `ends` connection ends: a ring left empty starts again at line 0,
   * so a sweep writes its lines there. */
  unsigned touched, ends;
  unsigned early_sent;            /* lines of the sweep under way sent before its end (lp_syslog_flush's `early`) */
  uint64_t dropped, dropped_said; /* lines that found the ring full too */
  uint64_t refused, refused_said; /* lines the socket refused (no daemon: ENOENT, ECONNREFUSED) */
  int refused_err;                /* why the last one was */
  /* Once per outage: set when a refusal was said (or the socket was
   * missing at open, which said so), cleared when a line goes out. */
  int outage_said;
};

/* What the socket did with a line (send_dgram's answer, not -EAGAIN):
 * refused for good, or taken; under h->mu. */
static void took(struct lp_syslog_held *h, int rc) {
  if (rc == 0) {
    h->outage_said = 0;
    return;
  }
  h->refused++;
  h->refused_err = -rc;
}

/* 0, -EAGAIN (no room: the daemon has not read), or -errno. */
static int send_dgram(const struct lp_syslog *sl, const char *dgram, size_t n, int flags) {
  struct sockaddr_un to = {.sun_family = AF_UNIX};
  snprintf(to.sun_path, sizeof(to.sun_path), "%s", sl->socket);
  if (sendto(sl->fd, dgram, n, MSG_NOSIGNAL | flags, (struct sockaddr *)&to, sizeof(to)) >= 0) return 0;
  return errno == EWOULDBLOCK ? -EAGAIN : -errno;
}

/* Send held lines while the socket takes them and they may go (one held for
 * a sweep: once `sweep_over`, past LP_HOLD_MAX_NS, or while fewer than
 * `early` of the sweep's lines went before its end, counted in
 * h->early_sent); under h->mu.  A line the socket refuses for another
 * reason (no daemon, one restarting) is lost, as syslog(3) loses it, and
 * counted (lp_syslog_flush says so).  Returns the lines still held. */
static unsigned send_held(const struct lp_syslog *sl, struct lp_syslog_held *h, int flags, int sweep_over, uint64_t now,
                          unsigned most, unsigned early) {
  for (unsigned sent = 0; h->count > 0 && sent < most; sent++) {
    struct lp_held_line *l = &h->line[h->head % LP_SYSLOG_HELD];
    if (l->sweep && !sweep_over && now - l->at_ns < LP_HOLD_MAX_NS) {
      if (h->early_sent >= early) break;
      h->early_sent++;
    }
    l->sweep = 0;
    if (l->mirror) LP_WARN("%s", l->dgram + l->msg);
    l->mirror = 0;
    if (l->to_sock) {
      int rc = send_dgram(sl, l->dgram, l->len, flags);
      if (rc == -EAGAIN) break;
      took(h, rc);
    }
    h->head = --h->count == 0 ? 0 : h->head + 1;
  }
  return h->count;
}

/* Every held line NCCL's log has not had yet goes there now, in order;
 * under h->mu.  They stay held for the syslog socket. */
static void mirror_held(struct lp_syslog_held *h) {
  for (unsigned i = 0; i < h->count; i++) {
    struct lp_held_line *l = &h->line[(h->head + i) % LP_SYSLOG_HELD];
    if (l->mirror) LP_WARN("%s", l->dgram + l->msg);
    l->mirror = 0;
    l->sweep = 0;
  }
}

/* Keep a line at the ring's end; under h->mu.  A full ring lets its
 * oldest lines go first: a sweep longer than the ring sends
 * its first lines sooner.  A line that still finds no place (the socket has
 * no room for the oldest) is dropped from syslog, and counted. */
static void hold(const struct lp_syslog *sl, struct lp_syslog_held *h, const struct lp_held_line *l) {
  if (h->count == LP_SYSLOG_HELD) send_held(sl, h, MSG_DONTWAIT, 1, l->at_ns, LP_SYSLOG_HELD, 0);
  if (h->count == LP_SYSLOG_HELD) {
    h->dropped++;
    if (l->mirror) LP_WARN("%s", l->dgram + l->msg);
    return;
  }
  struct lp_held_line *at = &h->line[(h->head + h->count++) % LP_SYSLOG_HELD];
  memcpy(at, l, offsetof(struct lp_held_line, dgram) + l->len + 1);
}

/* One line to the syslog socket (when enabled) and to NCCL's log, never
 * waiting for room: lines the socket cannot take yet are held, in order,
 * and so are lines of a sweep (lp_syslog_held).  A missing daemon loses the
 * line, as syslog(3) does; NCCL's log still has it.  The socket is opened
 * once (lp_syslog_open) and shared by every thread; naming the address each
 * time keeps working when the syslog daemon restarts and makes its socket
 * anew. */
static int emit(const struct lp_syslog *sl, int severity, const char *msg, int sweep) {
  struct lp_syslog_held *h = sl->held;
  if (h == NULL) {
    LP_WARN("%s", msg);
    return 0;
  }
  struct lp_held_line l = {.at_ns = lp_now_ns(), .mirror = 1, .sweep = (uint8_t)(sweep != 0), .to_sock = sl->fd >= 0};
  int n = lp_syslog_format(sl->facility, severity, msg, l.dgram, sizeof(l.dgram));
  size_t msg_len = strlen(msg);
  if (n < 0 || (size_t)n < msg_len) return 0;
  l.msg = (uint16_t)((size_t)n - msg_len); /* the message ends the datagram */
  if ((size_t)n >= sizeof(l.dgram)) n = (int)sizeof(l.dgram) - 1;
  l.len = (uint16_t)n;
  int first = 0;
  pthread_mutex_lock(&h->mu);
  if (sweep) {
    first = h->count == 0;
    hold(sl, h, &l);
  } else {
    /* A line not of a sweep (a lost path, a degraded port) may be the
     * process's last: the sweep's lines it follows go out first, in order,
     * then it, at once in NCCL's log and as room allows in syslog. */
    mirror_held(h);
    unsigned left = send_held(sl, h, MSG_DONTWAIT, 1, l.at_ns, LP_SYSLOG_HELD, 0);
    LP_WARN("%s", msg);
    l.mirror = 0;
    int rc = l.to_sock && left == 0 ? send_dgram(sl, l.dgram, l.len, MSG_DONTWAIT) : -EAGAIN;
    if (l.to_sock && rc == -EAGAIN)
      hold(sl, h, &l);
    else if (l.to_sock)
      took(h, rc);
  }
  pthread_mutex_unlock(&h->mu);
  return first;
}

/* Once the sweep is over, its lines go at the pace the daemon reads: each
 * send waits for room, LP_SYSLOG_WAIT_MS at most (the socket's send
 * timeout), LP_FLUSH_BATCH lines at a time so that a thread with a new
 * line to hold is not kept waiting long (64 at a time, as before
 * 2026-12-06, held a move of a new sweep up to 128 ms behind a daemon that
 * read slowly).  Without the wait, the control
 * thread sent the queue's ten lines every 2 ms: a sweep's 2,000 lines
 * reached syslog 400 ms after it ended.  During a sweep nothing waits. */
unsigned lp_syslog_flush(const struct lp_syslog *sl, int sweep_over, unsigned early) {
  struct lp_syslog_held *h = sl->held;
  if (h == NULL) return 0;
  unsigned before, left;
  /* What this call's rounds added, said once after them. */
  uint64_t dropped = 0, refused = 0;
  int err = 0, say = 0;
  do {
    pthread_mutex_lock(&h->mu);
    before = h->count;
    if (sweep_over) h->early_sent = 0;
    left = send_held(sl, h, sweep_over ? 0 : MSG_DONTWAIT, sweep_over, lp_now_ns(),
                     sweep_over ? LP_FLUSH_BATCH : LP_SYSLOG_HELD, early);
    dropped += h->dropped - h->dropped_said;
    h->dropped_said = h->dropped;
    refused += h->refused - h->refused_said;
    h->refused_said = h->refused;
    err = h->refused_err;
    if (refused > 0 && !h->outage_said) say = h->outage_said = 1;
    pthread_mutex_unlock(&h->mu);
  } while (sweep_over && left > 0 && left < before);
  if (dropped > 0)
    LP_WARN(
        "syslog socket %s was full: %llu event lines were not sent to syslog (NCCL's log has them); raise "
        "net.unix.max_dgram_qlen or check that the syslog daemon keeps up",
        sl->socket, (unsigned long long)dropped);
  /* Once per outage: a job on a host without a daemon would otherwise say
   * it at every sweep. */
  if (say)
    LP_WARN(
        "syslog socket %s refused %llu event lines (%s): they are in NCCL's log only, and so are the next ones "
        "until it takes lines again; check that the syslog daemon listens there (linkpass_syslog_lines_lost_total "
        "counts them)",
        sl->socket, (unsigned long long)refused, strerror(err));
  return left;
}

uint64_t lp_syslog_lost(const struct lp_syslog *sl) {
  struct lp_syslog_held *h = sl->held;
  if (h == NULL) return 0;
  pthread_mutex_lock(&h->mu);
  uint64_t n = h->dropped + h->refused;
  pthread_mutex_unlock(&h->mu);
  return n;
}

void lp_syslog_ends(const struct lp_syslog *sl, int delta) {
  struct lp_syslog_held *h = sl->held;
  if (h == NULL) return;
  pthread_mutex_lock(&h->mu);
  h->ends += (unsigned)delta;
  for (; h->touched < h->ends && h->touched < LP_SYSLOG_HELD; h->touched++)
    memset(&h->line[h->touched], 0, sizeof(*h->line));
  pthread_mutex_unlock(&h->mu);
}

/* How long a blocking send on the socket waits for room: 0, or -1. */
static int send_wait(const struct lp_syslog *sl, uint64_t ns) {
  struct timeval t = {.tv_sec = (time_t)(ns / 1000000000u), .tv_usec = (suseconds_t)(ns % 1000000000u / 1000)};
  return sl->fd >= 0 && setsockopt(sl->fd, SOL_SOCKET, SO_SNDTIMEO, &t, sizeof(t)) == 0 ? 0 : -1;
}

/* The held lines exist with syslog or without: a sweep's lines wait for
 * NCCL's log too. */
int lp_syslog_open(struct lp_syslog *sl) {
  sl->fd = -1;
  sl->held = NULL;
  struct lp_syslog_held *h = calloc(1, sizeof(*h));
  if (h == NULL) goto fail;
  h->line = malloc(sizeof(*h->line) * LP_SYSLOG_HELD);
  if (h->line == NULL || pthread_mutex_init(&h->mu, NULL) != 0) goto fail;
  if (sl->enabled) {
    sl->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (sl->fd < 0) goto fail_mu;
    send_wait(sl, LP_SYSLOG_WAIT_MS * 1000000ull); /* for lp_syslog_flush; other sends never wait */
    /* Said once here: a line the socket refuses later is lost with an
     * INFO line only, and NCCL's default level hides those. */
    struct stat st;
    const char *wrong = stat(sl->socket, &st) != 0 ? strerror(errno) : !S_ISSOCK(st.st_mode) ? "not a socket" : NULL;
    h->outage_said = wrong != NULL; /* said here: the refusals that follow are only counted */
    if (wrong != NULL)
      LP_WARN(
          "syslog socket %s: %s: event lines reach NCCL's log only until a syslog daemon listens there (start "
          "rsyslog, set LINKPASS_SYSLOG_SOCKET, or LINKPASS_SYSLOG=0 to keep them in NCCL's log)",
          sl->socket, wrong);
  }
  sl->held = h;
  return 0;
fail_mu:
  pthread_mutex_destroy(&h->mu);
fail:
  LP_WARN("cannot create a socket for syslog (%s): event lines go to NCCL's log only", strerror(errno));
  if (h != NULL) free(h->line);
  free(h);
  return -1;
}

/* The lines still held go out first, waiting up to LP_SYSLOG_CLOSE_S for
 * room: the process is ending, and its last moves are worth the wait. */
void lp_syslog_drain(struct lp_syslog *sl) {
  struct lp_syslog_held *h = sl->held;
  if (h == NULL) return;
  pthread_mutex_lock(&h->mu);
  mirror_held(h); /* NCCL's log first, whatever room the socket has */
  send_held(sl, h, MSG_DONTWAIT, 1, lp_now_ns(), LP_SYSLOG_HELD, 0);
  /* LP_SYSLOG_CLOSE_S in all, not a line: a daemon that reads slowly but
   * steadily would otherwise hold the exit up for as many waits as lines.
   * A line at a time, each send waiting only for what is left. */
  uint64_t until = lp_now_ns() + LP_SYSLOG_CLOSE_S * 1000000000ull;
  for (uint64_t now = lp_now_ns(); h->count > 0 && now < until; now = lp_now_ns()) {
    unsigned before = h->count;
    if (send_wait(sl, until - now) != 0 || send_held(sl, h, 0, 1, now, 1, 0) == before) break;
  }
  /* Given up: NCCL's log has them (mirror_held above). */
  h->dropped += h->count;
  h->count = 0;
  h->head = 0;
  send_wait(sl, LP_SYSLOG_WAIT_MS * 1000000ull);
  pthread_mutex_unlock(&h->mu);
  lp_syslog_flush(sl, 1, 0); /* says what was dropped */
}

void lp_syslog_close(struct lp_syslog *sl) {
  struct lp_syslog_held *h = sl->held;
  if (h != NULL) {
    lp_syslog_drain(sl);
    pthread_mutex_destroy(&h->mu);
    free(h->line);
    free(h);
    sl->held = NULL;
  }
  if (sl->fd >= 0) close(sl->fd);
  sl->fd = -1;
}

int lp_report_emit(const struct lp_syslog *sl, const struct lp_report *r, int sweep) {
  char line[LP_SYSLOG_DGRAM]; /* the longest a line can be (names of 63, a peer of 159) fits, header and all */
  lp_report_format(r, line, sizeof(line));
  return emit(sl, r->kind == LP_REPORT_FAILBACK ? LOG_NOTICE : LOG_WARNING, line, sweep);
}

void lp_report_line(const struct lp_syslog *sl, int severity, const char *line) { (void)emit(sl, severity, line, 0); }
