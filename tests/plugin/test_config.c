/* Environment parsing: defaults, valid values, malformed values. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "config.h"

struct fake_env {
  const char *kv[32][2];
  int n;
  char warnings[64][800];
  int nwarn;
};

static const char *fake_get(void *arg, const char *name) {
  struct fake_env *e = arg;
  for (int i = 0; i < e->n; i++)
    if (strcmp(e->kv[i][0], name) == 0) return e->kv[i][1];
  return NULL;
}

static void fake_warn(void *arg, const char *msg) {
  struct fake_env *e = arg;
  if (e->nwarn < 64) snprintf(e->warnings[e->nwarn], sizeof(e->warnings[0]), "%s", msg);
  e->nwarn++;
}

static void set(struct fake_env *e, const char *k, const char *v) {
  e->kv[e->n][0] = k;
  e->kv[e->n][1] = v;
  e->n++;
}

static int load(struct fake_env *e, struct lp_config *cfg) { return lp_config_load(cfg, fake_get, e, fake_warn, e); }

Test(config, defaults) {
  struct fake_env e = {0};
  struct lp_config cfg;
  cr_assert_eq(load(&e, &cfg), 0);
  cr_expect_eq(cfg.gid_index, -1);
  cr_expect_eq(cfg.tc, 0);
  cr_expect_eq(cfg.sl, 0);
  cr_expect_eq(cfg.pkey, 0);
  cr_expect_eq(cfg.timeout, 20);
  cr_expect_eq(cfg.retry_cnt, 7);
  cr_expect_eq(cfg.qps_per_conn, 1);
  cr_expect_eq(cfg.roce_version, 2);
  cr_expect_eq(cfg.hca.set, 0);
  cr_expect_eq(cfg.ifname.set, 0);
  cr_expect_eq(cfg.family, LP_FAMILY_ANY);
  cr_expect_gt(cfg.setup_timeout_ms, 0);
}

Test(config, valid_values) {
  struct fake_env e = {0};
  set(&e, "NCCL_IB_GID_INDEX", "3");
  set(&e, "NCCL_IB_TC", "106");
  set(&e, "NCCL_IB_SL", " 5 ");
  set(&e, "NCCL_IB_PKEY", "0x1");
  set(&e, "NCCL_IB_TIMEOUT", "22");
  set(&e, "NCCL_IB_RETRY_CNT", "0");
  set(&e, "NCCL_IB_QPS_PER_CONNECTION", "4");
  set(&e, "NCCL_SOCKET_FAMILY", "AF_INET6");
  set(&e, "LINKPASS_SETUP_TIMEOUT_MS", "0");
  struct lp_config cfg;
  cr_assert_eq(load(&e, &cfg), 0, "unexpected warning: %s", e.warnings[0]);
  cr_expect_eq(cfg.gid_index, 3);
  cr_expect_eq(cfg.tc, 106);
  cr_expect_eq(cfg.sl, 5);
  cr_expect_eq(cfg.pkey, 1);
  cr_expect_eq(cfg.timeout, 22);
  cr_expect_eq(cfg.retry_cnt, 0);
  cr_expect_eq(cfg.qps_per_conn, 4);
  cr_expect_eq(cfg.family, LP_FAMILY_INET6);
  cr_expect_eq(cfg.setup_timeout_ms, 0);
}

/* Each malformed value: one warning naming variable, value and the range;
 * the default stays. */
static void expect_rejected(const char *var, const char *val, const char *range) {
  struct fake_env e = {0};
  set(&e, var, val);
  struct lp_config cfg, def;
  lp_config_defaults(&def);
  cr_assert_eq(load(&e, &cfg), 1, "%s=%s: expected one warning, got %d", var, val, e.nwarn);
  cr_expect(strstr(e.warnings[0], var) != NULL, "warning does not name %s: %s", var, e.warnings[0]);
  cr_expect(strstr(e.warnings[0], val) != NULL, "warning does not show the value: %s", e.warnings[0]);
  cr_expect(strstr(e.warnings[0], range) != NULL, "warning does not say what is accepted: %s", e.warnings[0]);
  cr_expect(memcmp(&cfg, &def, sizeof(cfg)) == 0, "%s=%s changed the configuration", var, val);
}

Test(config, malformed_integers) {
  expect_rejected("NCCL_IB_TIMEOUT", "abc", "[1, 31]");
  expect_rejected("NCCL_IB_TIMEOUT", "0", "[1, 31]");
  expect_rejected("NCCL_IB_TIMEOUT", "32", "[1, 31]");
  expect_rejected("NCCL_IB_TIMEOUT", "20x", "[1, 31]");
  expect_rejected("NCCL_IB_TIMEOUT", "2 0", "[1, 31]");
  expect_rejected("NCCL_IB_RETRY_CNT", "8", "[0, 7]");
  expect_rejected("NCCL_IB_RETRY_CNT", "-1", "[0, 7]");
  expect_rejected("NCCL_IB_SL", "16", "[-1, 15]");
  expect_rejected("NCCL_IB_TC", "256", "[-1, 255]");
  expect_rejected("NCCL_IB_TC", "99999999999999999999999", "[-1, 255]");
  expect_rejected("NCCL_IB_GID_INDEX", "-2", "[-1, 255]");
  expect_rejected("NCCL_IB_GID_INDEX", "1.5", "[-1, 255]");
  expect_rejected("NCCL_IB_QPS_PER_CONNECTION", "0", "[1, 16]");
  expect_rejected("NCCL_IB_QPS_PER_CONNECTION", "17", "[1, 16]");
  expect_rejected("NCCL_IB_PKEY", "65536", "[0, 65535]");
  expect_rejected("NCCL_IB_ROCE_VERSION_NUM", "3", "[1, 2]");
  expect_rejected("LINKPASS_SETUP_TIMEOUT_MS", "-5", "[0, ");
  expect_rejected("NCCL_SOCKET_FAMILY", "AF_UNIX", "AF_INET or AF_INET6");
  expect_rejected("NCCL_IB_HCA", "mlx5_0:x", "[^][=]name[:port]");
  expect_rejected("NCCL_IB_HCA", "mlx5_0:0", "[^][=]name[:port]");
  expect_rejected("NCCL_IB_HCA", "^", "[^][=]name[:port]");
  expect_rejected("NCCL_IB_HCA", ":1", "[^][=]name[:port]");
  expect_rejected("NCCL_SOCKET_IFNAME", "eth0:1", "[^][=]prefix");
  expect_rejected("NCCL_IB_USE_INLINE", "2", "[0, 1]");
  expect_rejected("NCCL_IB_USE_INLINE", "yes", "[0, 1]");
  expect_rejected("NCCL_IB_PCI_RELAXED_ORDERING", "3", "[0, 2]");
  expect_rejected("NCCL_IB_PCI_RELAXED_ORDERING", "-1", "[0, 2]");
  expect_rejected("NCCL_IB_ADAPTIVE_ROUTING", "2", "[-2, 1]");
  expect_rejected("NCCL_IB_ADAPTIVE_ROUTING", "on", "[-2, 1]");
  expect_rejected("NCCL_IB_AR_THRESHOLD", "-3", "[-2, 2147483647]");
  expect_rejected("NCCL_IB_AR_THRESHOLD", "8K", "[-2, 2147483647]");
  expect_rejected("NCCL_IB_ECE_ENABLE", "2", "[0, 1]");
  expect_rejected("NCCL_IB_DEVICE_PCI_ORDER", "-1", "[0, 1]");
}

/* NCCL_IB_AR_THRESHOLD: NCCL 2.30 spells its default -2; any negative
 * value means 8192 bytes. */
Test(config, ar_threshold_default_spellings) {
  const char *vals[] = {"-2", "-1", NULL};
  for (int i = 0; i < 3; i++) {
    struct fake_env e = {0};
    if (vals[i]) set(&e, "NCCL_IB_AR_THRESHOLD", vals[i]);
    struct lp_config cfg;
    cr_assert_eq(load(&e, &cfg), 0);
    cr_expect_eq(cfg.ar_threshold_bytes, 8192, "%s", vals[i] ? vals[i] : "unset");
  }
  struct fake_env e = {0};
  set(&e, "NCCL_IB_AR_THRESHOLD", "0");
  struct lp_config cfg;
  cr_assert_eq(load(&e, &cfg), 0);
  cr_expect_eq(cfg.ar_threshold_bytes, 0, "0: every message above 0 bytes is split");
}

/* NCCL's own default, spelled out in a job script, is no mistake. */
Test(config, nccl_default_tc_and_sl_spellings) {
  struct fake_env e = {0};
  set(&e, "NCCL_IB_TC", "-1");
  set(&e, "NCCL_IB_SL", "-1");
  struct lp_config cfg;
  cr_assert_eq(load(&e, &cfg), 0, "%s", e.warnings[0]);
  cr_expect_eq(cfg.tc, 0);
  cr_expect_eq(cfg.sl, 0);
  struct fake_env bad = {0};
  set(&bad, "NCCL_IB_TC", "-2");
  cr_expect_eq(load(&bad, &cfg), 1, "-2 is no traffic class");
  cr_expect_eq(cfg.tc, 0);
}

Test(config, empty_is_unset) {
  struct fake_env e = {0};
  set(&e, "NCCL_IB_TIMEOUT", "");
  set(&e, "NCCL_IB_HCA", "");
  struct lp_config cfg;
  cr_expect_eq(load(&e, &cfg), 0);
  cr_expect_eq(cfg.timeout, 20);
  cr_expect_eq(cfg.hca.set, 0);
}

Test(config, describe_lists_every_setting) {
  struct lp_config cfg;
  lp_config_defaults(&cfg);
  struct fake_env e = {0};
  lp_config_describe(&cfg, fake_warn, &e);
  const char *names[] = {"NCCL_IB_GID_INDEX",
                         "NCCL_IB_TC",
                         "NCCL_IB_SL",
                         "NCCL_IB_PKEY",
                         "NCCL_IB_TIMEOUT=20",
                         "NCCL_IB_RETRY_CNT=7",
                         "NCCL_IB_QPS_PER_CONNECTION=1",
                         "NCCL_IB_HCA",
                         "NCCL_SOCKET_IFNAME",
                         "NCCL_SOCKET_FAMILY",
                         "LINKPASS_SETUP_TIMEOUT_MS",
                         "NCCL_IBVERBS_LIB",
                         "LINKPASS_FAILOVER=1",
                         "LINKPASS_WATCHDOG_MS=2000",
                         "LINKPASS_FAILBACK_HOLDDOWN_MS=2000",
                         "LINKPASS_FAILBACK_HOLDDOWN_MAX_MS=60000",
                         "LINKPASS_SYSLOG=1",
                         "LINKPASS_NIC_POOL",
                         "LINKPASS_SYSLOG_SOCKET=/dev/log",
                         "LINKPASS_SYSLOG_FACILITY=user", /* the name the variable takes, not a number */
                         "LINKPASS_METRICS_FILE",
                         "NCCL_IB_USE_INLINE=0",
                         "NCCL_IB_PCI_RELAXED_ORDERING=2",
                         "NCCL_IB_ADAPTIVE_ROUTING=-2",
                         "NCCL_IB_AR_THRESHOLD=8192",
                         "NCCL_IB_ECE_ENABLE=1",
                         "NCCL_IB_DEVICE_PCI_ORDER=1"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    int found = 0;
    for (int j = 0; j < e.nwarn && j < 64; j++) found |= strstr(e.warnings[j], names[i]) != NULL;
    cr_expect(found, "%s is not described", names[i]);
  }
}

static struct lp_filter parse_ok(const char *spec, int allow_port) {
  struct lp_filter f;
  char why[128];
  cr_assert_eq(lp_filter_parse(spec, allow_port, &f, why, sizeof(why)), 0, "%s: %s", spec, why);
  return f;
}

Test(filter, prefix_match) {
  struct lp_filter f = parse_ok("mlx5", 1);
  cr_expect(lp_filter_match(&f, "mlx5_0", 1));
  cr_expect(lp_filter_match(&f, "mlx5_10", 2));
  cr_expect(!lp_filter_match(&f, "mlx4_0", 1));
}

Test(filter, exact_match) {
  struct lp_filter f = parse_ok("=mlx5_1", 1);
  cr_expect(lp_filter_match(&f, "mlx5_1", 1));
  cr_expect(!lp_filter_match(&f, "mlx5_10", 1));
}

Test(filter, exclude_and_ports) {
  struct lp_filter f = parse_ok("^mlx5_0:1,mlx5_2", 1);
  cr_expect_eq(f.n, 2);
  cr_expect(!lp_filter_match(&f, "mlx5_0", 1));
  cr_expect(lp_filter_match(&f, "mlx5_0", 2));
  cr_expect(!lp_filter_match(&f, "mlx5_2", 1));
  cr_expect(lp_filter_match(&f, "mlx5_1", 1));
}

/* Ports are decimal, as NCCL and LINKPASS_NIC_POOL read them: a leading 0
 * is no octal (":010" was port 8, and ":08" refused as out of range). */
Test(filter, ports_are_decimal) {
  struct lp_filter f = parse_ok("mlx5_0:010,mlx5_1:08", 1);
  cr_expect_eq(f.e[0].port, 10);
  cr_expect_eq(f.e[1].port, 8);
}

Test(filter, exclude_exact) {
  struct lp_filter f = parse_ok("^=mlx5_1", 1);
  cr_expect(f.exclude && f.exact);
  cr_expect(!lp_filter_match(&f, "mlx5_1", 1));
  cr_expect(lp_filter_match(&f, "mlx5_10", 1));
}

Test(filter, empty_entries_ignored) {
  struct lp_filter f = parse_ok(",mlx5_0,,mlx5_1:2,", 1);
  cr_expect_eq(f.n, 2);
  cr_expect_eq(f.e[1].port, 2);
}

Test(filter, malformed) {
  struct lp_filter f;
  char why[128];
  char longname[200];
  memset(longname, 'a', sizeof(longname) - 1);
  longname[sizeof(longname) - 1] = '\0';
  const char *bad[] = {"mlx5_0:", "mlx5_0:256", "mlx5_0:1x", "=", "^=", ",,,", "a b", longname};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    cr_expect_eq(lp_filter_parse(bad[i], 1, &f, why, sizeof(why)), -1, "accepted '%s'", bad[i]);
    cr_expect_eq(f.set, 0);
  }
  /* A port each of the 64 devices linkpass takes, no more. */
  char many[400] = "";
  for (int i = 0; i < 64; i++) strcat(many, "d:1,");
  cr_expect_eq(lp_filter_parse(many, 1, &f, why, sizeof(why)), 0, "refused 64 entries: %s", why);
  strcat(many, "e");
  cr_expect_eq(lp_filter_parse(many, 1, &f, why, sizeof(why)), -1, "accepted 65 entries");
}

Test(filter, unset_matches_all) {
  struct lp_filter f;
  memset(&f, 0, sizeof(f));
  cr_expect(lp_filter_match(&f, "anything", 3));
}

Test(parse_int, forms) {
  long long v;
  cr_expect(lp_parse_int("42", &v) == 0 && v == 42);
  cr_expect(lp_parse_int("0x10", &v) == 0 && v == 16);
  cr_expect(lp_parse_int("-1", &v) == 0 && v == -1);
  cr_expect_eq(lp_parse_int("", &v), -1);
  cr_expect_eq(lp_parse_int("   ", &v), -1);
  cr_expect_eq(lp_parse_int("4k", &v), -1);
  cr_expect_eq(lp_parse_int(NULL, &v), -1);
}

Test(config, watchdog_at_or_above_the_retry_budget_warns_naming_both) {
  struct fake_env e = {0};
  struct lp_config cfg;
  set(&e, "NCCL_IB_TIMEOUT", "12"); /* 16.8 ms x 8 = 134 ms */
  set(&e, "LINKPASS_WATCHDOG_MS", "200");
  cr_assert_eq(load(&e, &cfg), 1);
  cr_expect(strstr(e.warnings[0], "LINKPASS_WATCHDOG_MS=200") && strstr(e.warnings[0], "134 ms") &&
                strstr(e.warnings[0], "NCCL_IB_TIMEOUT=12") && strstr(e.warnings[0], "NCCL_IB_RETRY_CNT=7"),
            "%s", e.warnings[0]);
  struct fake_env ok = {0};
  set(&ok, "NCCL_IB_TIMEOUT", "12");
  set(&ok, "LINKPASS_WATCHDOG_MS", "100");
  cr_expect_eq(load(&ok, &cfg), 0, "below the budget: no warning");
  struct fake_env off = {0};
  set(&off, "NCCL_IB_TIMEOUT", "12");
  set(&off, "LINKPASS_WATCHDOG_MS", "200");
  set(&off, "LINKPASS_FAILOVER", "0");
  cr_expect_eq(load(&off, &cfg), 1, "no failover, no watchdog: only that the setting does nothing");
  cr_expect(
      strstr(off.warnings[0], "LINKPASS_WATCHDOG_MS is set but has no effect") && !strstr(off.warnings[0], "budget"),
      "%s", off.warnings[0]);
}

/* Settings of failover, or of its gray-failure detector, set while that
 * part is off: one warning names them all, and says which setting turned
 * it off.  Before, they were taken without a word (a LINKPASS_NIC_POOL
 * not even checked). */
Test(config, settings_of_a_part_that_is_off_are_named) {
  struct fake_env e = {0};
  struct lp_config cfg;
  set(&e, "LINKPASS_FAILOVER", "0");
  set(&e, "LINKPASS_NIC_POOL", "garbage");
  set(&e, "LINKPASS_STANDBY", "0");
  set(&e, "NCCL_IB_TIMEOUT", "14");
  cr_assert_eq(load(&e, &cfg), 1, "%s", e.warnings[0]);
  cr_expect(strstr(e.warnings[0],
                   "LINKPASS_STANDBY, LINKPASS_NIC_POOL are set but have no effect while link failover "
                   "is off (LINKPASS_FAILOVER=0)"),
            "%s", e.warnings[0]);
  struct fake_env g = {0};
  set(&g, "LINKPASS_GRAY", "0");
  set(&g, "LINKPASS_GRAY_RATE_PCT", "30");
  set(&g, "LINKPASS_WATCHDOG_MS", "500");
  cr_assert_eq(load(&g, &cfg), 1, "%s", g.warnings[0]);
  cr_expect(strstr(g.warnings[0],
                   "LINKPASS_GRAY_RATE_PCT is set but has no effect while the gray-failure detector is "
                   "off (LINKPASS_GRAY=0)"),
            "%s", g.warnings[0]);
  struct fake_env on = {0};
  set(&on, "LINKPASS_NIC_POOL", "mlx5_0=mlx5_1");
  set(&on, "LINKPASS_GRAY_RATE_PCT", "30");
  cr_expect_eq(load(&on, &cfg), 0, "every part on: nothing to say");
}

/* A LINKPASS_ name linkpass does not read is named, with the setting it
 * most likely meant; a known name, another program's and other variables
 * are not. */
Test(config, an_unknown_linkpass_name_is_named_with_the_nearest_setting) {
  struct fake_env e = {0};
  char *const environ_list[] = {"PATH=/bin",
                                "LINKPASS_WATCHDOG=500",
                                "LINKPASS_WATCHDOG_MS=100",
                                "LINKPASS_SIMVERBS=/opt/simverbs",
                                "LINKPASS_NIC_POOL=",
                                "LINKPASS_XYZ=1",
                                "NCCL_IB_HCA=mlx5",
                                "LINKPASS_SYSLOG_FACILITY=local0",
                                "LINKPASS_METRICS_FIL=/run/lp-%p.prom",
                                NULL};
  cr_assert_eq(lp_config_unknown(environ_list, fake_warn, &e), 3);
  cr_expect(strstr(e.warnings[0], "LINKPASS_WATCHDOG is not a linkpass setting") &&
                strstr(e.warnings[0], "did you mean LINKPASS_WATCHDOG_MS?"),
            "%s", e.warnings[0]);
  cr_expect(strstr(e.warnings[1], "LINKPASS_XYZ is not a linkpass setting") && !strstr(e.warnings[1], "did you mean"),
            "%s", e.warnings[1]);
  /* a string setting is suggested as well as an integer one */
  cr_expect(strstr(e.warnings[2], "did you mean LINKPASS_METRICS_FILE?"), "%s", e.warnings[2]);
  cr_expect_eq(lp_config_unknown(NULL, fake_warn, &e), 0);
}

/* A setup timeout or a watchdog so short that it fails by itself is taken
 * as set, and named: it was taken without a word. */
Test(config, values_that_fail_by_themselves_are_named) {
  struct fake_env e = {0};
  struct lp_config cfg;
  set(&e, "LINKPASS_SETUP_TIMEOUT_MS", "20");
  set(&e, "LINKPASS_WATCHDOG_MS", "3");
  cr_assert_eq(load(&e, &cfg), 2);
  cr_expect(strstr(e.warnings[0], "LINKPASS_SETUP_TIMEOUT_MS=20 is below 100 ms"), "%s", e.warnings[0]);
  cr_expect(strstr(e.warnings[1], "LINKPASS_WATCHDOG_MS=3 is below 10 ms") && strstr(e.warnings[1], "stall"), "%s",
            e.warnings[1]);
  cr_expect_eq(cfg.setup_timeout_ms, 20, "taken as set");
  cr_expect_eq(cfg.watchdog_ms, 3, "taken as set");
  struct fake_env ok = {0};
  set(&ok, "LINKPASS_SETUP_TIMEOUT_MS", "100");
  set(&ok, "LINKPASS_WATCHDOG_MS", "10");
  cr_expect_eq(load(&ok, &cfg), 0, "at the bounds: no warning");
  struct fake_env off = {0};
  set(&off, "LINKPASS_SETUP_TIMEOUT_MS", "0");
  set(&off, "LINKPASS_WATCHDOG_MS", "0");
  cr_expect_eq(load(&off, &cfg), 0, "0 turns each off: no warning");
}

/* A ceiling below the first hold-down was raised to it without a word. */
Test(config, a_holddown_ceiling_below_the_first_hold_down_warns) {
  struct fake_env e = {0};
  struct lp_config cfg;
  set(&e, "LINKPASS_FAILBACK_HOLDDOWN_MS", "10000");
  set(&e, "LINKPASS_FAILBACK_HOLDDOWN_MAX_MS", "5000");
  cr_assert_eq(load(&e, &cfg), 1);
  cr_expect(strstr(e.warnings[0], "LINKPASS_FAILBACK_HOLDDOWN_MAX_MS=5000") &&
                strstr(e.warnings[0], "LINKPASS_FAILBACK_HOLDDOWN_MS=10000"),
            "%s", e.warnings[0]);
  struct fake_env ok = {0};
  set(&ok, "LINKPASS_FAILBACK_HOLDDOWN_MS", "5000");
  set(&ok, "LINKPASS_FAILBACK_HOLDDOWN_MAX_MS", "5000");
  cr_expect_eq(load(&ok, &cfg), 0, "equal: no warning");
}

Test(config, metrics_file_without_the_pid_warns) {
  struct fake_env e = {0};
  struct lp_config cfg;
  set(&e, "LINKPASS_METRICS_FILE", "/var/lib/prometheus/node-exporter/linkpass.prom");
  cr_assert_eq(load(&e, &cfg), 1);
  cr_expect(strstr(e.warnings[0], "LINKPASS_METRICS_FILE=\"/var/lib/prometheus/node-exporter/linkpass.prom\"") &&
                strstr(e.warnings[0], "%p"),
            "%s", e.warnings[0]);
  cr_expect_str_eq(cfg.metrics_file, "/var/lib/prometheus/node-exporter/linkpass.prom", "the file is still written");
  struct fake_env ok = {0};
  set(&ok, "LINKPASS_METRICS_FILE", "/var/lib/prometheus/node-exporter/linkpass-%h-%p.prom");
  cr_expect_eq(load(&ok, &cfg), 0, "with %%p: no warning");
  /* Failover off writes no metrics file: the plugin says that instead. */
  struct fake_env off = {0};
  set(&off, "LINKPASS_METRICS_FILE", "/var/lib/prometheus/node-exporter/linkpass.prom");
  set(&off, "LINKPASS_FAILOVER", "0");
  cr_expect_eq(load(&off, &cfg), 0, "failover off: no warning about %%p");
}

Test(config, ib_addr_family_and_range) {
  struct fake_env e = {0};
  struct lp_config cfg;
  cr_assert_eq(load(&e, &cfg), 0);
  cr_expect_eq(cfg.gid_family, LP_FAMILY_INET, "NCCL's default is AF_INET");
  cr_expect(!cfg.gid_range.set);
  set(&e, "NCCL_IB_ADDR_FAMILY", "AF_INET6");
  set(&e, "NCCL_IB_ADDR_RANGE", "fd00::/8");
  cr_assert_eq(load(&e, &cfg), 0);
  cr_expect_eq(cfg.gid_family, LP_FAMILY_INET6);
  cr_expect(cfg.gid_range.set && cfg.gid_range.prefix == 8 && cfg.gid_range.addr[0] == 0xfd);
  const char *bad[][2] = {{"AF_INET", "10.0.0.0"},
                          {"AF_INET", "10.0.0.0/33"},
                          {"AF_INET", "fd00::/8"},
                          {"AF_INET", "10.0.0.0/x"},
                          {"AF_INET6", "10.0.0.0/8"},
                          {"AF_INET6", "fd00::/129"},
                          /* decimal only, as NCCL reads it: /010 was a /8, /0x18 a /24 */
                          {"AF_INET", "10.0.0.0/0x18"},
                          {"AF_INET", "10.0.0.0/ 8"},
                          {"AF_INET", "10.0.0.0/-8"}};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    struct fake_env b = {0};
    set(&b, "NCCL_IB_ADDR_FAMILY", bad[i][0]);
    set(&b, "NCCL_IB_ADDR_RANGE", bad[i][1]);
    cr_expect_eq(load(&b, &cfg), 1, "%s %s", bad[i][0], bad[i][1]);
    cr_expect(strstr(b.warnings[0], "NCCL_IB_ADDR_RANGE=") && strstr(b.warnings[0], "considering every GID"), "%s",
              b.warnings[0]);
    cr_expect(!cfg.gid_range.set);
  }
  struct fake_env z = {0};
  set(&z, "NCCL_IB_ADDR_RANGE", "10.0.0.0/010");
  cr_expect_eq(load(&z, &cfg), 0);
  cr_expect(cfg.gid_range.set && cfg.gid_range.prefix == 10, "/010 read as /%d", cfg.gid_range.prefix);
  struct fake_env f = {0};
  set(&f, "NCCL_IB_ADDR_FAMILY", "AF_UNIX");
  cr_expect_eq(load(&f, &cfg), 1);
  cr_expect(strstr(f.warnings[0], "NCCL_IB_ADDR_FAMILY=\"AF_UNIX\" is not valid"), "%s", f.warnings[0]);
  cr_expect_eq(cfg.gid_family, LP_FAMILY_INET);
}
