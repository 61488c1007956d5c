/*
 * Counters operators scrape: a Prometheus text-format file for
 * node_exporter's textfile collector, rewritten atomically (temporary file,
 * then rename) by the control thread once a second and after every change.
 *
 * LINKPASS_METRICS_FILE names the file; "%p" in it becomes the process id
 * and "%h" the host name, so several ranks on one node can write side by
 * side (node_exporter reads every *.prom file of its directory).
 */
#ifndef LP_METRICS_H
#define LP_METRICS_H

#include <stddef.h>
#include <stdint.h>

#define LP_METRICS_MAX_DEVS 64

struct lp_metrics_dev {
  const char *name;
  int port;
  int up;                  /* may carry traffic now */
  int connections;         /* connections whose path is on it */
  uint64_t failovers;      /* connections moved off it */
  uint64_t failbacks;      /* connections moved back to it */
  uint64_t flaps;          /* times it went down */
  double degraded_seconds; /* time spent not usable */
  int standby;             /* standby paths ready on it (LINKPASS_STANDBY) */
  double resend_ratio;     /* share of its packets resent in the last window (gray.h), 0 when unknown */
  uint64_t degraded;       /* times it was drained as degraded: resending too many packets, or slow */
  double tx_rate;          /* bytes per second it moved while busy, last window (gray.h), 0 when unknown */
};

struct lp_metrics {
  int ndevs;
  struct lp_metrics_dev devs[LP_METRICS_MAX_DEVS];
  uint64_t replayed_requests, replayed_bytes, paths_lost, ring_overflows, syslog_lines_lost;
  double last_failover_seconds;
  int pid;
  const char *host;       /* the host name: with pid, a process's series are its own (pids repeat across containers) */
  int running;            /* 1 while the process runs; 0 in the last write, at its exit */
  double updated_seconds; /* wall clock (Unix time) of this write: a crashed process's file goes stale */
};

/* The file's text.  Returns its length, or -1 if it does not fit. */
int lp_metrics_format(const struct lp_metrics *m, char *buf, size_t len);

/* Expand %p and %h in `pattern`.  0, or -1 when the result is too long. */
int lp_metrics_path(const char *pattern, int pid, const char *host, char *out, size_t len);

/* Write `text` to `path` atomically.  0 or -errno. */
int lp_metrics_write(const char *path, const char *text, size_t len);

#define LP_METRICS_PERIOD_NS 1000000000ull /* the file is rewritten this often, and soon after a change */
#define LP_METRICS_PATH_MAX 4096

/* The file and its writer's state: the control thread's alone. */
struct lp_metrics_file {
  char path[LP_METRICS_PATH_MAX]; /* "" when none is written */
  char *buf;
  size_t cap;
  uint64_t next_ns; /* the next periodic rewrite */
  int dirty;        /* something changed since the last write */
  int err;          /* errno of the last failed write, 0 after a good one */
};

/* LINKPASS_METRICS_FILE `pattern` ("" : none) for a process with `ndevs`
 * devices.  Warns and writes nothing when it cannot.  0, or -1. */
int lp_metrics_file_open(struct lp_metrics_file *f, const char *pattern, int pid, const char *host, int ndevs);
void lp_metrics_file_close(struct lp_metrics_file *f);
static inline int lp_metrics_file_on(const struct lp_metrics_file *f) { return f->path[0] != '\0'; }
/* Due now: something changed, or a period passed. */
static inline int lp_metrics_file_due(const struct lp_metrics_file *f, uint64_t now) {
  return lp_metrics_file_on(f) && (f->dirty || now >= f->next_ns);
}
/* Write `m` now.  A failure is warned about once until a write works again
 * (and that is said too); the next try comes a period later. */
void lp_metrics_file_put(struct lp_metrics_file *f, const struct lp_metrics *m, uint64_t now);

#endif
