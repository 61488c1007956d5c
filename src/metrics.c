/* Prometheus text-format metrics, written atomically. */
#include "metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

struct out {
  char *buf;
  size_t len, off;
  int overflow;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out *o, const char *fmt, ...) {
  if (o->overflow) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(o->buf + o->off, o->len - o->off, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= o->len - o->off)
    o->overflow = 1;
  else
    o->off += (size_t)n;
}

static void family(struct out *o, const char *name, const char *type, const char *help) {
  put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value as the text format writes it: backslash, double quote and
 * newline escaped (a device renamed with `rdma dev set ... name` may hold
 * any of them); cut to what `out` holds. */
static const char *label_value(const char *v, char *out, size_t len) {
  size_t o = 0;
  for (; *v && o + 2 < len; v++) {
    if (*v == '\\' || *v == '"' || *v == '\n') out[o++] = '\\';
    out[o++] = *v == '\n' ? 'n' : *v;
  }
  out[o] = '\0';
  return out;
}

int lp_metrics_format(const struct lp_metrics *m, char *buf, size_t len) {
  struct out o = {.buf = buf, .len = len};
  static const struct {
    const char *name, *type, *help;
  } per_dev[] = {
      {"linkpass_path_up", "gauge", "1 when the NIC port may carry traffic, 0 while it is down or held down."},
      {"linkpass_connections", "gauge", "Connections whose path currently uses the NIC port."},
      {"linkpass_failovers_total", "counter", "Connections moved off the NIC port because of a failure."},
      {"linkpass_failbacks_total", "counter", "Connections moved back to the NIC port once it was stable."},
      {"linkpass_port_flaps_total", "counter", "Times the NIC port went down or was drained as degraded."},
      {"linkpass_degraded_seconds_total", "counter", "Time the NIC port was not usable."},
      {"linkpass_standby_paths", "gauge", "Standby paths connected on the NIC port, ready for a move to take."},
      {"linkpass_port_resend_ratio", "gauge",
       "Share of its packets the NIC port sent again in its last window judged (250 ms, longer while it carries "
       "under 2000 packets; RC NAKs and local ACK timeouts); 0 before it carried enough traffic to judge."},
      {"linkpass_port_degraded_total", "counter",
       "Times the NIC port was drained for resending too many packets, or moving data too slowly, while up (a "
       "gray failure)."},
      {"linkpass_port_busy_tx_bytes_per_second", "gauge",
       "Rate at which the NIC port moved this process's large messages while one was in flight, in the last "
       "window that carried enough of them; 0 when too little traffic to judge."},
  };
  /* Every series names its process by pid and host: ranks in containers
   * of one node, each in its own PID namespace, may have the same pid, and
   * node_exporter refuses a series that two files both hold. */
  char host[2 * 64 + 1], proc[sizeof(host) + 32];
  snprintf(proc, sizeof(proc), "pid=\"%d\",host=\"%s\"", m->pid,
           label_value(m->host != NULL ? m->host : "", host, sizeof(host)));
  for (size_t f = 0; f < sizeof(per_dev) / sizeof(per_dev[0]); f++) {
    family(&o, per_dev[f].name, per_dev[f].type, per_dev[f].help);
    for (int i = 0; i < m->ndevs; i++) {
      const struct lp_metrics_dev *d = &m->devs[i];
      char name[2 * 64 + 1];
      put(&o, "%s{device=\"%s\",port=\"%d\",%s} ", per_dev[f].name, label_value(d->name, name, sizeof(name)), d->port,
          proc);
      switch (f) {
      case 0: put(&o, "%d\n", d->up); break;
      case 1: put(&o, "%d\n", d->connections); break;
      case 2: put(&o, "%llu\n", (unsigned long long)d->failovers); break;
      case 3: put(&o, "%llu\n", (unsigned long long)d->failbacks); break;
      case 4: put(&o, "%llu\n", (unsigned long long)d->flaps); break;
      case 5: put(&o, "%.3f\n", d->degraded_seconds); break;
      case 6: put(&o, "%d\n", d->standby); break;
      case 7: put(&o, "%.6f\n", d->resend_ratio); break;
      case 8: put(&o, "%llu\n", (unsigned long long)d->degraded); break;
      default: put(&o, "%.0f\n", d->tx_rate); break;
      }
    }
  }
  family(&o, "linkpass_replayed_requests_total", "counter", "Messages written again on a new path after a move.");
  put(&o, "linkpass_replayed_requests_total{%s} %llu\n", proc, (unsigned long long)m->replayed_requests);
  family(&o, "linkpass_replayed_bytes_total", "counter", "Bytes written again on a new path after a move.");
  put(&o, "linkpass_replayed_bytes_total{%s} %llu\n", proc, (unsigned long long)m->replayed_bytes);
  family(&o, "linkpass_paths_lost_total", "counter", "Connections that failed because no healthy path remained.");
  put(&o, "linkpass_paths_lost_total{%s} %llu\n", proc, (unsigned long long)m->paths_lost);
  family(&o, "linkpass_last_failover_duration_seconds", "gauge",
         "From the fault being seen to traffic flowing on the new path, for the latest move.");
  put(&o, "linkpass_last_failover_duration_seconds{%s} %.6f\n", proc, m->last_failover_seconds);
  family(&o, "linkpass_up", "gauge", "1 while the process runs; 0 once it has exited (its file stays behind).");
  put(&o, "linkpass_up{%s} %d\n", proc, m->running);
  family(&o, "linkpass_metrics_updated_timestamp_seconds", "gauge",
         "When this file was last written (Unix time): a file not rewritten for long belongs to a dead process.");
  put(&o, "linkpass_metrics_updated_timestamp_seconds{%s} %.3f\n", proc, m->updated_seconds);
  family(&o, "linkpass_syslog_lines_lost_total", "counter",
         "Event lines syslog did not get (NCCL's log has them): its socket was full for too long, or refused them.");
  put(&o, "linkpass_syslog_lines_lost_total{%s} %llu\n", proc, (unsigned long long)m->syslog_lines_lost);
  family(&o, "linkpass_event_ring_overflows_total", "counter", "Control events lost because the ring was full.");
  put(&o, "linkpass_event_ring_overflows_total{%s} %llu\n", proc, (unsigned long long)m->ring_overflows);
  return o.overflow ? -1 : (int)o.off;
}

int lp_metrics_path(const char *pattern, int pid, const char *host, char *out, size_t len) {
  size_t o = 0;
  for (const char *p = pattern; *p; p++) {
    char tmp[96];
    const char *add = tmp;
    if (p[0] == '%' && p[1] == 'p')
      snprintf(tmp, sizeof(tmp), "%d", pid), p++;
    else if (p[0] == '%' && p[1] == 'h')
      add = host, p++;
    else
      tmp[0] = *p, tmp[1] = '\0';
    size_t n = strlen(add);
    if (o + n >= len) return -1;
    memcpy(out + o, add, n);
    o += n;
  }
  out[o] = '\0';
  return 0;
}

int lp_metrics_write(const char *path, const char *text, size_t len) {
  char tmp[4200];
  if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof(tmp)) return -ENAMETOOLONG;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -errno;
  size_t off = 0;
  while (off < len) {
    ssize_t n = write(fd, text + off, len - off);
    if (n < 0) {
      int err = errno;
      close(fd);
      unlink(tmp);
      return -err;
    }
    off += (size_t)n;
  }
  if (close(fd) != 0 || rename(tmp, path) != 0) {
    int err = errno;
    unlink(tmp);
    return -err;
  }
  return 0;
}

int lp_metrics_file_open(struct lp_metrics_file *f, const char *pattern, int pid, const char *host, int ndevs) {
  memset(f, 0, sizeof(*f));
  if (pattern[0] == '\0') return 0;
  if (lp_metrics_path(pattern, pid, host, f->path, sizeof(f->path)) != 0) {
    LP_WARN("LINKPASS_METRICS_FILE=\"%s\" expands to a path that is too long: no metrics file is written", pattern);
    goto fail;
  }
  /* Ten lines per device of at most ~300 bytes (a 64-byte device name and
   * host name, escaped), and the rest. */
  f->cap = (size_t)ndevs * 10 * 384 + 8192;
  f->buf = malloc(f->cap);
  if (f->buf == NULL) {
    LP_WARN("out of memory for the metrics file: none is written");
    goto fail;
  }
  f->dirty = 1; /* the first write comes at once */
  LP_INFO(NCCL_INIT | NCCL_NET, "metrics file: %s (rewritten every second and within 0.1 s of a change)", f->path);
  return 0;
fail:
  f->path[0] = '\0';
  return -1;
}

void lp_metrics_file_close(struct lp_metrics_file *f) {
  free(f->buf);
  memset(f, 0, sizeof(*f));
}

void lp_metrics_file_put(struct lp_metrics_file *f, const struct lp_metrics *m, uint64_t now) {
  int len = lp_metrics_format(m, f->buf, f->cap);
  int err = len < 0 ? -ENOBUFS : lp_metrics_write(f->path, f->buf, (size_t)len);
  if (err != 0 && -err != f->err)
    LP_WARN("cannot write the metrics file %s: %s (retrying every second)", f->path, strerror(-err));
  else if (err == 0 && f->err != 0)
    LP_INFO(NCCL_NET, "the metrics file %s is written again", f->path);
  f->err = -err;
  f->dirty = 0;
  f->next_ns = now + LP_METRICS_PERIOD_NS;
}
