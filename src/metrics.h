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
};

struct lp_metrics {
  int ndevs;
  struct lp_metrics_dev devs[LP_METRICS_MAX_DEVS];
  uint64_t replayed_requests, replayed_bytes, paths_lost, ring_overflows;
  double last_failover_seconds;
  int pid;
};

/* The file's text.  Returns its length, or -1 if it does not fit. */
int lp_metrics_format(const struct lp_metrics *m, char *buf, size_t len);

/* Expand %p and %h in `pattern`.  0, or -1 when the result is too long. */
int lp_metrics_path(const char *pattern, int pid, const char *host, char *out, size_t len);

/* Write `text` to `path` atomically.  0 or -errno. */
int lp_metrics_write(const char *path, const char *text, size_t len);

#endif
