/* The operator-facing event lines. */
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "config.h"
#include "log.h"
#include "report.h"

Test(report, failover_line_has_every_field_in_order) {
  struct lp_report r = {.kind = LP_REPORT_FAILOVER,
                        .comm = 0x1a2b,
                        .dir = "send",
                        .dev = "mlx5_0",
                        .port = 1,
                        .new_dev = "mlx5_1",
                        .new_port = 1,
                        .peer = "node1/198.18.0.2:mlx5_0",
                        .reason = "port_down",
                        .inflight = 4,
                        .replayed = 2,
                        .replayed_bytes = 2097152,
                        .duration_us = 812,
                        .path = "standby",
                        .at_us = 1796496354000042};
  char line[512];
  lp_report_format(&r, line, sizeof(line));
  cr_assert_str_eq(line,
                   "event=failover comm=0x1a2b dir=send dev=mlx5_0 port=1 new_dev=mlx5_1 new_port=1 "
                   "peer=node1/198.18.0.2:mlx5_0 reason=port_down inflight=4 replayed=2 "
                   "replayed_bytes=2097152 duration_us=812 path=standby time=2026-12-05T18:45:54.000042Z");
}

Test(report, missing_values_stay_parseable) {
  struct lp_report r = {
      .kind = LP_REPORT_PATH_LOST, .comm = 7, .dir = "recv", .dev = "mlx5_0", .port = 1, .reason = "no_healthy_nic"};
  char line[512];
  lp_report_format(&r, line, sizeof(line));
  cr_assert(strstr(line, "event=path_lost "));
  cr_assert(strstr(line, " new_dev=- new_port=0 peer=- "), "%s", line);
  cr_assert(strstr(line, " path=- time=-"), "%s", line);
  /* Every field is key=value: no blank inside a value. */
  for (char *tok = strtok(line, " "); tok; tok = strtok(NULL, " ")) cr_assert(strchr(tok, '='), "%s", tok);
}

Test(report, facilities_by_name) {
  cr_assert_eq(lp_syslog_facility("user"), LOG_USER);
  cr_assert_eq(lp_syslog_facility("local7"), LOG_LOCAL7);
  cr_assert_eq(lp_syslog_facility("kern"), -1, "the kernel facility is not ours to use");
  cr_assert_eq(lp_syslog_facility(""), -1);
}

Test(report, syslog_datagram_is_rfc3164) {
  char buf[256];
  lp_syslog_format(LOG_LOCAL3, LOG_WARNING, "event=failover comm=0x1", buf, sizeof(buf));
  char want[32];
  snprintf(want, sizeof(want), "<%d>", LOG_LOCAL3 | LOG_WARNING);
  cr_assert_eq(strncmp(buf, want, strlen(want)), 0, "%s", buf);
  cr_assert(strstr(buf, " linkpass["), "%s", buf);
  cr_assert(strstr(buf, "]: event=failover comm=0x1"), "%s", buf);
}

/* A syslog daemon that has not read yet: a datagram socket bound at a
 * fresh path, read only when the test says so. */
struct slow_daemon {
  char dir[32], path[64];
  int fd;
};

static void daemon_start(struct slow_daemon *d, struct lp_syslog *sl) {
  snprintf(d->dir, sizeof(d->dir), "/tmp/lp_report_XXXXXX");
  cr_assert_not_null(mkdtemp(d->dir));
  snprintf(d->path, sizeof(d->path), "%s/log.sock", d->dir);
  d->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(a.sun_path, sizeof(a.sun_path), "%s", d->path);
  cr_assert_eq(bind(d->fd, (struct sockaddr *)&a, sizeof(a)), 0, "%s", strerror(errno));
  memset(sl, 0, sizeof(*sl));
  sl->enabled = 1;
  sl->facility = LOG_USER;
  snprintf(sl->socket, sizeof(sl->socket), "%s", d->path);
  cr_assert_eq(lp_syslog_open(sl), 0);
}

static void daemon_stop(struct slow_daemon *d) {
  close(d->fd);
  unlink(d->path);
  rmdir(d->dir);
}

/* The number in "seq=N" of the next datagram the daemon reads. */
static int read_seq(int fd) {
  char buf[1100];
  ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
  cr_assert_gt(n, 0, "%s", strerror(errno));
  buf[n] = '\0';
  const char *at = strstr(buf, "seq=");
  cr_assert_not_null(at, "%s", buf);
  return atoi(at + 4);
}

static void emit_seq(const struct lp_syslog *sl, int i) {
  char line[64];
  snprintf(line, sizeof(line), "event=failover seq=%d", i);
  lp_report_line(sl, LOG_WARNING, line);
}

/* More lines than the kernel queues for a daemon that does not read (10 by
 * default, 512 where systemd raised it): every call returns at once (a
 * blocking send would hang this test), the lines beyond the queue are held,
 * and every one arrives once, in order, as the daemon reads. */
Test(report, lines_a_full_syslog_socket_cannot_take_are_held_in_order) {
  struct lp_syslog sl;
  struct slow_daemon d;
  daemon_start(&d, &sl);
  const int n = 1500;
  for (int i = 0; i < n; i++) emit_seq(&sl, i);
  cr_assert_gt(lp_syslog_flush(&sl, 0, 0), 0, "the socket took %d lines at once: no line was held", n);
  for (int i = 0; i < n; i++) {
    cr_assert_eq(read_seq(d.fd), i, "line %d came out of order", i);
    lp_syslog_flush(&sl, 0, 0); /* the control thread's look, in a sweep: it does not wait for room */
  }
  cr_assert_eq(lp_syslog_flush(&sl, 1, 0), 0);
  lp_syslog_close(&sl);
  daemon_stop(&d);
}

struct reader {
  int fd, want, got;
};

/* The daemon reads `want` lines, stopping at the first one out of order or
 * a read that fails or times out (no assertion off the test's thread):
 * `got` says how far it came. */
static void *read_in_order(void *arg) {
  struct reader *r = arg;
  char buf[1100];
  for (r->got = 0; r->got < r->want; r->got++) {
    ssize_t n = recv(r->fd, buf, sizeof(buf) - 1, 0);
    if (n <= 0) break;
    buf[n] = '\0';
    const char *at = strstr(buf, "seq=");
    if (at == NULL || atoi(at + 4) != r->got) break;
  }
  return NULL;
}

struct steady_reader {
  int fd;
  _Atomic int stop, got;
};

/* A daemon that keeps up, barely: a line every 20 ms. */
static void *read_steadily(void *arg) {
  struct steady_reader *r = arg;
  char buf[1100];
  while (!atomic_load(&r->stop)) {
    struct pollfd p = {.fd = r->fd, .events = POLLIN};
    if (poll(&p, 1, 20) == 1 && recv(r->fd, buf, sizeof(buf), MSG_DONTWAIT) > 0) atomic_fetch_add(&r->got, 1);
    nanosleep(&(struct timespec){.tv_nsec = 20 * 1000 * 1000}, NULL); /* its pace, not synchronisation */
  }
  return NULL;
}

/* The wait at close is bounded in all (2 s), not per line: a daemon that
 * reads slowly but steadily held the exit up for a wait of up to a second
 * a line, here 1,000 lines at 20 ms each: 20 s. */
Test(report, close_waits_two_seconds_in_all_for_a_slow_daemon) {
  struct lp_syslog sl;
  struct slow_daemon d;
  daemon_start(&d, &sl);
  const int n = 1000;
  for (int i = 0; i < n; i++) emit_seq(&sl, i);
  cr_assert_gt(lp_syslog_flush(&sl, 0, 0), 0);
  struct steady_reader r = {.fd = d.fd};
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, read_steadily, &r), 0);
  uint64_t t0 = lp_now_ns();
  lp_syslog_close(&sl);
  double took = (double)(lp_now_ns() - t0) / 1e9;
  atomic_store(&r.stop, 1);
  pthread_join(t, NULL);
  cr_expect_lt(took, 4.0, "close took %.1f s with a daemon that reads a line every 20 ms", took);
  cr_expect_gt(atomic_load(&r.got), 0, "the daemon got none of the held lines");
  daemon_stop(&d);
}

/* Lines still held when the process ends go out at close, once the daemon
 * makes room. */
Test(report, held_lines_go_out_at_close) {
  struct lp_syslog sl;
  struct slow_daemon d;
  daemon_start(&d, &sl);
  const int n = 1000;
  for (int i = 0; i < n; i++) emit_seq(&sl, i);
  cr_assert_gt(lp_syslog_flush(&sl, 1, 0), 0);
  struct reader r = {.fd = d.fd, .want = n};
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, read_in_order, &r), 0);
  lp_syslog_close(&sl);
  pthread_join(t, NULL);
  cr_assert_eq(r.got, n, "the daemon read %d of %d lines in order", r.got, n);
  daemon_stop(&d);
}

/* NCCL's log, as the plugin's logger sees it: the lines with "seq=". */
static _Atomic int logged_seq[8], logged;
static void count_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line, const char *fmt,
                         ...) {
  (void)level, (void)flags, (void)file, (void)line;
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  const char *at = strstr(msg, "seq=");
  if (at == NULL) return;
  int i = logged++;
  if (i < 8) logged_seq[i] = atoi(at + 4);
}

/* Returns lp_report_emit's answer: 1 when the line is the first held. */
static int emit_sweep_seq(const struct lp_syslog *sl, int i) {
  struct lp_report r = {.kind = LP_REPORT_FAILOVER, .comm = (uint64_t)i, .reason = "port_down"};
  char peer[16];
  snprintf(peer, sizeof(peer), "seq=%d", i);
  r.peer = peer;
  return lp_report_emit(sl, &r, 1);
}

/* The lines of a sweep's moves wait for its end, in syslog and in NCCL's
 * log alike; a line that is not a sweep's (a lost path, maybe the
 * process's last) brings them out first, in order, then itself.  Send the
 * sweep's lines at once and the daemon reads them before the sweep is over;
 * hold the other line too (or behind them) and it is late or lost. */
Test(report, a_sweeps_lines_wait_for_its_end_or_for_a_line_not_of_a_sweep) {
  struct lp_syslog sl;
  struct slow_daemon d;
  daemon_start(&d, &sl);
  lp_log_set_logger(count_logger);
  emit_sweep_seq(&sl, 0);
  emit_sweep_seq(&sl, 1);
  cr_assert_eq(logged, 0, "NCCL's log had %d lines of a sweep not over", (int)logged);
  cr_assert_eq(lp_syslog_flush(&sl, 0, 0), 2, "lines of a sweep not over went out");
  char buf[64];
  cr_assert_lt(recv(d.fd, buf, sizeof(buf), MSG_DONTWAIT), 0, "the daemon got a line while the sweep went on");
  emit_seq(&sl, 2); /* not a sweep's */
  cr_assert_eq(logged, 3, "NCCL's log had %d lines, not the sweep's two and the other", (int)logged);
  for (int i = 0; i < 3; i++) cr_assert_eq(logged_seq[i], i, "NCCL's log: line %d came out of order", i);
  cr_assert_eq(lp_syslog_flush(&sl, 0, 0), 0, "lines are still held");
  for (int i = 0; i < 3; i++) cr_assert_eq(read_seq(d.fd), i, "syslog: line %d came out of order", i);
  lp_log_set_logger(NULL);
  lp_syslog_close(&sl);
  daemon_stop(&d);
}

/* A sweep that ends sends its lines: the control thread's look. */
Test(report, a_sweeps_lines_go_out_when_it_is_over) {
  struct lp_syslog sl;
  struct slow_daemon d;
  daemon_start(&d, &sl);
  lp_log_set_logger(count_logger);
  emit_sweep_seq(&sl, 0);
  emit_sweep_seq(&sl, 1);
  cr_assert_eq(lp_syslog_flush(&sl, 0, 0), 2);
  cr_assert_eq(lp_syslog_flush(&sl, 1, 0), 0, "the sweep is over but lines are still held");
  cr_assert_eq(logged, 2);
  for (int i = 0; i < 2; i++) cr_assert_eq(read_seq(d.fd), i, "line %d came out of order", i);
  lp_log_set_logger(NULL);
  lp_syslog_close(&sl);
  daemon_stop(&d);
}

/* A sweep's first lines go out at the control thread's next look, which
 * the first line held asks for; past `early` lines in the sweep, the rest
 * wait for its end; the next sweep has its first lines at once again.
 * Hold them all and a job with one connection on the NIC learns of its
 * move 100 ms late; send them all and a sweep of a thousand moves pays
 * for a thousand lines while its moves wait. */
Test(report, a_sweeps_first_lines_go_out_at_once_and_the_rest_at_its_end) {
  struct lp_syslog sl;
  struct slow_daemon d;
  daemon_start(&d, &sl);
  logged = 0;
  lp_log_set_logger(count_logger);
  cr_assert_eq(emit_sweep_seq(&sl, 0), 1, "the first line held did not ask for a look");
  cr_assert_eq(emit_sweep_seq(&sl, 1), 0, "a line behind a held one asked for a look");
  cr_assert_eq(lp_syslog_flush(&sl, 0, 3), 0, "the sweep's first lines were held");
  cr_assert_eq(logged, 2);
  cr_assert_eq(emit_sweep_seq(&sl, 2), 1, "a line held after the others went did not ask for a look");
  cr_assert_eq(emit_sweep_seq(&sl, 3), 0);
  cr_assert_eq(lp_syslog_flush(&sl, 0, 3), 1, "the sweep's 4th line went before its end, with 3 allowed");
  cr_assert_eq(lp_syslog_flush(&sl, 0, 3), 1, "a later look sent it");
  cr_assert_eq(logged, 3, "NCCL's log had %d lines, not the first 3", (int)logged);
  cr_assert_eq(lp_syslog_flush(&sl, 1, 3), 0, "the sweep is over but a line is still held");
  for (int i = 0; i < 4; i++) cr_assert_eq(read_seq(d.fd), i, "line %d came out of order", i);
  emit_sweep_seq(&sl, 4);
  cr_assert_eq(lp_syslog_flush(&sl, 0, 3), 0, "the next sweep's first line waited: the count did not start again");
  cr_assert_eq(read_seq(d.fd), 4);
  lp_log_set_logger(NULL);
  lp_syslog_close(&sl);
  daemon_stop(&d);
}

/* A process that ends in a sweep still says what it did: close sends the
 * held lines to both logs. */
Test(report, a_sweeps_lines_go_out_at_close) {
  struct lp_syslog sl;
  struct slow_daemon d;
  daemon_start(&d, &sl);
  logged = 0;
  lp_log_set_logger(count_logger);
  emit_sweep_seq(&sl, 0);
  cr_assert_eq(logged, 0);
  lp_syslog_close(&sl);
  cr_assert_eq(logged, 1, "NCCL's log did not get the held line at close");
  cr_assert_eq(read_seq(d.fd), 0);
  lp_log_set_logger(NULL);
  daemon_stop(&d);
}

/* After a sweep, the control thread's looks send every held line, in
 * order, as the daemon reads them (each send may wait a little for room;
 * a look that finds none gives up, and the next one goes on). */
Test(report, after_a_sweep_the_looks_send_every_line_in_order_as_the_daemon_reads) {
  struct lp_syslog sl;
  struct slow_daemon d;
  daemon_start(&d, &sl);
  const int n = 1000;
  for (int i = 0; i < n; i++) emit_sweep_seq(&sl, i);
  struct timeval patience = {.tv_sec = 2}; /* the reader gives up rather than hang the test */
  cr_assert_eq(setsockopt(d.fd, SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof(patience)), 0);
  struct reader r = {.fd = d.fd, .want = n};
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, read_in_order, &r), 0);
  unsigned left = n, looks = 0;
  while (left > 0 && looks++ < 1000) left = lp_syslog_flush(&sl, 1, 0);
  pthread_join(t, NULL);
  cr_assert_eq(left, 0, "%u looks after the sweep left %u of %d lines held", looks, left, n);
  cr_assert_eq(r.got, n, "the daemon read %d of %d lines in order", r.got, n);
  lp_syslog_close(&sl);
  daemon_stop(&d);
}

/* A sweep of more lines than the plugin holds (8,192), to a daemon that
 * does not read: NCCL's log still gets every line once, and syslog gets
 * what the daemon's queue and the ring take. */
Test(report, a_sweep_longer_than_the_ring_loses_no_line_from_nccls_log) {
  struct lp_syslog sl;
  struct slow_daemon d;
  daemon_start(&d, &sl);
  logged = 0;
  lp_log_set_logger(count_logger);
  const int n = 9000;
  for (int i = 0; i < n; i++) emit_sweep_seq(&sl, i);
  cr_assert_geq(logged, n - 8192, "the oldest lines of a full ring did not go to NCCL's log");
  cr_assert_lt(logged, n, "lines of a sweep not over went to NCCL's log though the ring had room");
  lp_syslog_flush(&sl, 0, 0); /* MSG_DONTWAIT: nothing waits for the daemon */
  cr_assert_lt(logged, n);
  lp_syslog_close(&sl); /* waits 1 s for room */
  cr_assert_eq(logged, n, "NCCL's log got %d of %d lines", (int)logged, n);
  lp_log_set_logger(NULL);
  daemon_stop(&d);
}

static long minor_faults(void) {
  struct rusage ru;
  cr_assert_eq(getrusage(RUSAGE_THREAD, &ru), 0);
  return ru.ru_minflt;
}

/* A sweep's lines land on pages touched when its connection ends were set
 * up, the next sweep's on the same ones: a page fault in a sweep of
 * thousands of moves costs more than its time (docs/SCALE.md).  Without
 * the ends' room, 2,000 lines fault in some 500 pages; a ring that did not
 * start again at its start once empty faults as many in the next sweep. */
Test(report, a_sweeps_lines_fault_in_no_page_of_their_own) {
  struct lp_syslog sl = {.enabled = 0};
  cr_assert_eq(lp_syslog_open(&sl), 0);
  lp_log_set_logger(count_logger);
  const int n = 2000;
  lp_syslog_ends(&sl, n);
  for (int sweep = 0; sweep < 2; sweep++) {
    long before = minor_faults();
    for (int i = 0; i < n; i++) emit_sweep_seq(&sl, i);
    long faults = minor_faults() - before;
    cr_assert_lt(faults, n / 40, "sweep %d: %ld page faults for %d lines", sweep, faults, n);
    cr_assert_eq(lp_syslog_flush(&sl, 1, 0), 0, "sweep %d: lines are still held", sweep);
  }
  lp_syslog_ends(&sl, -n);
  lp_log_set_logger(NULL);
  lp_syslog_close(&sl);
}

static _Atomic int refusals_said;
static void refusal_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line, const char *fmt,
                           ...) {
  (void)flags, (void)file, (void)line;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (level == NCCL_LOG_WARN && strstr(msg, "refused") && strstr(msg, "event lines")) refusals_said++;
}

/* The daemon goes away (its socket removed, as while rsyslog restarts):
 * the lines it refused are counted, for the metrics file, and none of the
 * held ones is lost without being counted; a WARN says so once for the
 * outage, not at every flush.  Before, held lines the socket refused were
 * dropped without a count or a word. */
Test(report, lines_the_socket_refuses_are_counted) {
  struct lp_syslog sl;
  struct slow_daemon d;
  daemon_start(&d, &sl);
  emit_seq(&sl, 0);
  cr_assert_eq(read_seq(d.fd), 0);
  daemon_stop(&d); /* no daemon now: ENOENT */
  refusals_said = 0;
  lp_log_set_logger(refusal_logger);
  for (int i = 1; i <= 3; i++) emit_seq(&sl, i);
  struct lp_report r = {.kind = LP_REPORT_FAILOVER, .dir = "send", .dev = "mlx5_0", .port = 1, .reason = "port_down"};
  for (int i = 0; i < 2; i++) lp_report_emit(&sl, &r, 1); /* a sweep's: held, then refused at the flush */
  lp_syslog_flush(&sl, 1, 0);
  cr_expect_eq(lp_syslog_lost(&sl), 5, "%llu lines counted lost of the 5 refused",
               (unsigned long long)lp_syslog_lost(&sl));
  lp_report_emit(&sl, &r, 1);
  lp_syslog_flush(&sl, 1, 0);
  lp_log_set_logger(NULL);
  cr_expect_eq(lp_syslog_lost(&sl), 6);
  cr_expect_eq(refusals_said, 1, "%d WARNs for one outage", refusals_said);
  lp_syslog_close(&sl);
}

/* RFC 3164's month is English whatever locale the application set. */
Test(report, the_syslog_month_is_english_in_any_locale) {
  char buf[256];
  lp_syslog_format(LOG_USER, LOG_WARNING, "x", buf, sizeof(buf));
  static const char *const months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  const char *stamp = strchr(buf, '>') + 1;
  int found = 0;
  for (int m = 0; m < 12; m++) found |= strncmp(stamp, months[m], 3) == 0 && stamp[3] == ' ';
  cr_expect(found, "%s", buf);
}

/* The longest line (device names of 63 characters, a peer of 159, every
 * number at its largest) goes out whole, its time= last. */
Test(report, the_longest_event_line_is_not_cut) {
  char dev[64], peer[160];
  memset(dev, 'd', sizeof(dev) - 1);
  dev[sizeof(dev) - 1] = '\0';
  memset(peer, 'p', sizeof(peer) - 1);
  peer[sizeof(peer) - 1] = '\0';
  struct lp_report r = {.kind = LP_REPORT_FAILOVER, .comm = ~0ull, .dir = "send", .dev = dev, .port = 255,
                        .new_dev = dev, .new_port = 255, .peer = peer, .reason = "completion_error",
                        .inflight = 2147483647, .replayed = 2147483647, .replayed_bytes = ~0ull,
                        .duration_us = ~0ull, .path = "standby", .at_us = 4102444800000000ull};
  char line[1024];
  int n = lp_report_format(&r, line, sizeof(line));
  cr_assert_lt(n, 900, "%d characters", n);
  struct lp_syslog sl;
  struct slow_daemon d;
  daemon_start(&d, &sl);
  lp_report_emit(&sl, &r, 0);
  char buf[1100];
  ssize_t got = recv(d.fd, buf, sizeof(buf) - 1, 0);
  cr_assert_gt(got, 0);
  buf[got] = '\0';
  cr_expect(strstr(buf, " time=2100-01-01T00:00:00.000000Z"), "cut: %s", buf);
  lp_syslog_close(&sl);
  daemon_stop(&d);
}
