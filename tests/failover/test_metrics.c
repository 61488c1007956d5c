/* The Prometheus metrics file. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "metrics.h"

static struct lp_metrics sample(void) {
  struct lp_metrics m = {.ndevs = 2,
                         .replayed_requests = 5,
                         .replayed_bytes = 4096,
                         .paths_lost = 1,
                         .last_failover_seconds = 0.000812,
                         .pid = 42,
                         .host = "n\"7",
                         .running = 1,
                         .updated_seconds = 1764633600.25};
  m.devs[0] = (struct lp_metrics_dev){"mlx5_0", 1, 0, 0, 3, 0, 2, 1.5, 0, 0.0069, 1, 0};
  m.devs[1] = (struct lp_metrics_dev){"mlx5_1", 1, 1, 4, 0, 2, 0, 0, 4, 0, 0, 2.5e9};
  return m;
}

Test(metrics, every_series_with_labels_and_types) {
  struct lp_metrics m = sample();
  char buf[8192];
  cr_assert_gt(lp_metrics_format(&m, buf, sizeof(buf)), 0);
  cr_assert(strstr(buf, "# TYPE linkpass_failovers_total counter\n"));
  cr_assert(strstr(buf, "linkpass_failovers_total{device=\"mlx5_0\",port=\"1\",pid=\"42\",host=\"n\\\"7\"} 3\n"), "%s",
            buf);
  cr_assert(strstr(buf, "linkpass_failbacks_total{device=\"mlx5_1\",port=\"1\",pid=\"42\",host=\"n\\\"7\"} 2\n"));
  cr_assert(strstr(buf, "linkpass_path_up{device=\"mlx5_0\",port=\"1\",pid=\"42\",host=\"n\\\"7\"} 0\n"));
  cr_assert(strstr(buf, "linkpass_connections{device=\"mlx5_1\",port=\"1\",pid=\"42\",host=\"n\\\"7\"} 4\n"));
  cr_assert(strstr(buf, "# TYPE linkpass_standby_paths gauge\n"));
  cr_assert(strstr(buf, "linkpass_standby_paths{device=\"mlx5_1\",port=\"1\",pid=\"42\",host=\"n\\\"7\"} 4\n"), "%s",
            buf);
  cr_assert(
      strstr(buf, "linkpass_degraded_seconds_total{device=\"mlx5_0\",port=\"1\",pid=\"42\",host=\"n\\\"7\"} 1.500\n"));
  cr_assert(
      strstr(buf, "linkpass_port_resend_ratio{device=\"mlx5_0\",port=\"1\",pid=\"42\",host=\"n\\\"7\"} 0.006900\n"),
      "%s", buf);
  cr_assert(strstr(buf, "linkpass_port_degraded_total{device=\"mlx5_0\",port=\"1\",pid=\"42\",host=\"n\\\"7\"} 1\n"));
  cr_assert(strstr(buf, "# TYPE linkpass_port_degraded_total counter\n"));
  cr_assert(strstr(buf,
                   "linkpass_port_busy_tx_bytes_per_second{device=\"mlx5_1\",port=\"1\",pid=\"42\",host=\"n\\\"7\"} "
                   "2500000000\n"),
            "%s", buf);
  cr_assert(strstr(buf, "linkpass_replayed_bytes_total{pid=\"42\",host=\"n\\\"7\"} 4096\n"));
  cr_assert(strstr(buf, "linkpass_last_failover_duration_seconds{pid=\"42\",host=\"n\\\"7\"} 0.000812\n"));
  cr_assert(strstr(buf, "linkpass_up{pid=\"42\",host=\"n\\\"7\"} 1\n"));
  cr_assert(strstr(buf, "linkpass_metrics_updated_timestamp_seconds{pid=\"42\",host=\"n\\\"7\"} 1764633600.250\n"),
            "%s", buf);
  /* Every non-comment line is "name{labels} value". */
  for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
    if (line[0] == '#') continue;
    cr_assert(strchr(line, '{') && strstr(line, "} "), "%s", line);
  }
}

Test(metrics, label_values_are_escaped) {
  struct lp_metrics m = sample();
  m.devs[0].name = "we\"ird\\dev\n";
  char buf[8192];
  cr_assert_gt(lp_metrics_format(&m, buf, sizeof(buf)), 0);
  cr_expect(strstr(buf, "linkpass_path_up{device=\"we\\\"ird\\\\dev\\n\",port=\"1\",pid=\"42\",host=\"n\\\"7\"} 0\n"),
            "%s", buf);
}

/* Two ranks in two containers of a node, each pid 42 in its own PID
 * namespace: their series differ by host (node_exporter refuses a series
 * that two files both hold). */
Test(metrics, the_same_pid_on_two_hosts_gives_two_series) {
  struct lp_metrics a = sample(), b = sample();
  a.host = "pod-a";
  b.host = "pod-b";
  char x[8192], y[8192];
  cr_assert_gt(lp_metrics_format(&a, x, sizeof(x)), 0);
  cr_assert_gt(lp_metrics_format(&b, y, sizeof(y)), 0);
  for (char *line = strtok(x, "\n"); line; line = strtok(NULL, "\n")) {
    if (line[0] == '#') continue;
    char series[512];
    snprintf(series, sizeof(series), "%.*s", (int)(strstr(line, "} ") - line + 1), line);
    cr_assert(strstr(series, "host=\"pod-a\""), "%s", series);
    cr_assert_null(strstr(y, series), "%s is in both files", series);
  }
}

Test(metrics, too_small_a_buffer_is_reported_not_truncated) {
  struct lp_metrics m = sample();
  char buf[100];
  cr_assert_eq(lp_metrics_format(&m, buf, sizeof(buf)), -1);
}

Test(metrics, path_expansion) {
  char out[64];
  cr_assert_eq(lp_metrics_path("/var/lib/ne/linkpass-%h-%p.prom", 77, "node1", out, sizeof(out)), 0);
  cr_assert_str_eq(out, "/var/lib/ne/linkpass-node1-77.prom");
  cr_assert_eq(lp_metrics_path("%h%h%h%h%h%h%h%h%h%h%h%h%h%h", 1, "a-long-host-name", out, sizeof(out)), -1);
}

Test(metrics, written_atomically_by_rename) {
  char dir[] = "/tmp/lpmetricsXXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char path[128];
  snprintf(path, sizeof(path), "%s/m.prom", dir);
  cr_assert_eq(lp_metrics_write(path, "a 1\n", 4), 0);
  cr_assert_eq(lp_metrics_write(path, "b 2\n", 4), 0);
  FILE *f = fopen(path, "r");
  char line[16] = "";
  cr_assert_not_null(fgets(line, sizeof(line), f));
  fclose(f);
  cr_assert_str_eq(line, "b 2\n");
  char cmd[160];
  snprintf(cmd, sizeof(cmd), "test $(ls %s | wc -l) = 1", dir);
  cr_assert_eq(system(cmd), 0, "no temporary file is left behind");
  unlink(path);
  rmdir(dir);
  cr_assert_lt(lp_metrics_write("/nonexistent-dir/m.prom", "x", 1), 0);
}

/* The HELP texts stay as they are (docs/OPERATIONS.md, "During an
 * upgrade"): node_exporter's textfile collector drops a metric's samples
 * where the files of two versions in its directory differ in its HELP.  A
 * change here is a change of the interface: a new metric name instead. */
Test(metrics, the_help_texts_are_those_of_the_interface) {
  static const char *const help[] = {
      "# HELP linkpass_path_up 1 when the NIC port may carry traffic, 0 while it is down or held down.",
      "# HELP linkpass_connections Connections whose path currently uses the NIC port.",
      "# HELP linkpass_failovers_total Connections moved off the NIC port because of a failure.",
      "# HELP linkpass_failbacks_total Connections moved back to the NIC port once it was stable.",
      "# HELP linkpass_port_flaps_total Times the NIC port went down or was drained as degraded.",
      "# HELP linkpass_degraded_seconds_total Time the NIC port was not usable.",
      "# HELP linkpass_standby_paths Standby paths connected on the NIC port, ready for a move to take.",
      "# HELP linkpass_port_resend_ratio Share of its packets the NIC port sent again in its last window judged (250 ms, longer while it carries under 2000 packets; RC NAKs and local ACK timeouts); 0 before it carried enough traffic to judge.",
      "# HELP linkpass_port_degraded_total Times the NIC port was drained for resending too many packets, or moving data too slowly, while up (a gray failure).",
      "# HELP linkpass_port_busy_tx_bytes_per_second Rate at which the NIC port moved this process's large messages while one was in flight, in the last window that carried enough of them; 0 when too little traffic to judge.",
      "# HELP linkpass_replayed_requests_total Messages written again on a new path after a move.",
      "# HELP linkpass_replayed_bytes_total Bytes written again on a new path after a move.",
      "# HELP linkpass_paths_lost_total Connections that failed because no healthy path remained.",
      "# HELP linkpass_last_failover_duration_seconds From the fault being seen to traffic flowing on the new path, for the latest move.",
      "# HELP linkpass_up 1 while the process runs; 0 once it has exited (its file stays behind).",
      "# HELP linkpass_metrics_updated_timestamp_seconds When this file was last written (Unix time): a file not rewritten for long belongs to a dead process.",
      "# HELP linkpass_syslog_lines_lost_total Event lines syslog did not get (NCCL's log has them): its socket was full for too long, or refused them.",
      "# HELP linkpass_event_ring_overflows_total Control events lost because the ring was full."};
  struct lp_metrics m = sample();
  char buf[8192];
  cr_assert_gt(lp_metrics_format(&m, buf, sizeof(buf)), 0);
  size_t n = 0;
  for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
    if (strncmp(line, "# HELP ", 7) != 0) continue;
    cr_assert_lt(n, sizeof(help) / sizeof(help[0]), "a HELP more than the interface has: %s", line);
    cr_expect_str_eq(line, help[n], "HELP %zu changed", n);
    n++;
  }
  cr_expect_eq(n, sizeof(help) / sizeof(help[0]), "%zu HELP texts, the interface has %zu", n,
               sizeof(help) / sizeof(help[0]));
}
