/* The operator-facing event lines. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>

#include "config.h"
#include "report.h"

Test(report, failover_line_has_every_field_in_order) {
  struct lp_report r = {.kind = LP_REPORT_FAILOVER, .comm = 0x1a2b, .dir = "send", .dev = "mlx5_0", .port = 1,
                        .new_dev = "mlx5_1", .new_port = 1, .peer = "node1/198.18.0.2:mlx5_0",
                        .reason = "port_down", .inflight = 4, .replayed = 2, .replayed_bytes = 2097152,
                        .duration_us = 812, .path = "standby"};
  char line[512];
  lp_report_format(&r, line, sizeof(line));
  cr_assert_str_eq(line, "event=failover comm=0x1a2b dir=send dev=mlx5_0 port=1 new_dev=mlx5_1 new_port=1 "
                         "peer=node1/198.18.0.2:mlx5_0 reason=port_down inflight=4 replayed=2 "
                         "replayed_bytes=2097152 duration_us=812 path=standby");
}

Test(report, missing_values_stay_parseable) {
  struct lp_report r = {.kind = LP_REPORT_PATH_LOST, .comm = 7, .dir = "recv", .dev = "mlx5_0", .port = 1,
                        .reason = "no_healthy_nic"};
  char line[512];
  lp_report_format(&r, line, sizeof(line));
  cr_assert(strstr(line, "event=path_lost "));
  cr_assert(strstr(line, " new_dev=- new_port=0 peer=- "), "%s", line);
  cr_assert(strstr(line, " path=-"), "%s", line);
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
