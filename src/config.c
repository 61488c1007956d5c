/* Environment parsing and validation (pure: no globals, no I/O). */
#include "config.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <syslog.h>

int lp_parse_int(const char *s, long long *out) {
  if (s == NULL) return -1;
  while (isspace((unsigned char)*s)) s++;
  if (*s == '\0') return -1;
  errno = 0;
  char *end = NULL;
  long long v = strtoll(s, &end, 0);
  if (errno != 0 || end == s) return -1;
  while (isspace((unsigned char)*end)) end++;
  if (*end != '\0') return -1;
  *out = v;
  return 0;
}

/* The LEN characters at S as a decimal number up to MAX: digits only, as
 * NCCL reads a port or a prefix (not the octal or hex that strtoll's base
 * 0 takes, which the integer variables accept).  -1 if they are not. */
static int parse_decimal(const char *s, size_t len, long long max, long long *out) {
  if (len == 0 || len > 9) return -1;
  long long v = 0;
  for (size_t i = 0; i < len; i++) {
    if (!isdigit((unsigned char)s[i])) return -1;
    v = v * 10 + (s[i] - '0');
  }
  if (v > max) return -1;
  *out = v;
  return 0;
}

/* ---- name filters ---------------------------------------------------- */

static void filter_reset(struct lp_filter *f) { memset(f, 0, sizeof(*f)); }

int lp_filter_parse(const char *spec, int allow_port, struct lp_filter *f, char *why, size_t whylen) {
  filter_reset(f);
  if (spec == NULL) return 0;
  const char *s = spec;
  if (*s == '^') {
    f->exclude = 1;
    s++;
  }
  if (*s == '=') {
    f->exact = 1;
    s++;
  }
  while (*s != '\0') {
    const char *end = strchr(s, ',');
    size_t len = end ? (size_t)(end - s) : strlen(s);
    if (len > 0) {
      if (f->n == LP_FILTER_MAX) {
        snprintf(why, whylen, "more than %d entries", LP_FILTER_MAX);
        goto bad;
      }
      struct lp_filter_entry *e = &f->e[f->n];
      const char *colon = memchr(s, ':', len);
      size_t nlen = colon ? (size_t)(colon - s) : len;
      if (nlen == 0) {
        snprintf(why, whylen, "entry %d has an empty name", f->n + 1);
        goto bad;
      }
      if (nlen >= sizeof(e->name)) {
        snprintf(why, whylen, "entry %d is longer than %d characters", f->n + 1, LP_FILTER_NAME_MAX - 1);
        goto bad;
      }
      for (size_t i = 0; i < nlen; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!isgraph(c) || c == '^' || c == '=') {
          snprintf(why, whylen, "entry %d contains an invalid character", f->n + 1);
          goto bad;
        }
      }
      memcpy(e->name, s, nlen);
      e->name[nlen] = '\0';
      e->port = -1;
      if (colon) {
        if (!allow_port) {
          snprintf(why, whylen, "entry %d has a ':port' suffix, which this variable does not take", f->n + 1);
          goto bad;
        }
        size_t plen = len - nlen - 1;
        long long port;
        if (parse_decimal(colon + 1, plen, 255, &port) != 0 || port < 1) {
          snprintf(why, whylen, "entry %d has a port that is not a decimal number in 1..255", f->n + 1);
          goto bad;
        }
        e->port = (int)port;
      }
      f->n++;
    }
    if (!end) break;
    s = end + 1;
  }
  if (f->n == 0) {
    snprintf(why, whylen, "no device or interface names");
    goto bad;
  }
  f->set = 1;
  return 0;
bad:
  filter_reset(f);
  return -1;
}

int lp_filter_hits(const struct lp_filter *f, const char *name, int port) {
  for (int i = 0; i < f->n; i++) {
    const struct lp_filter_entry *e = &f->e[i];
    int name_ok = f->exact ? strcmp(name, e->name) == 0 : strncmp(name, e->name, strlen(e->name)) == 0;
    int port_ok = e->port == -1 || port == -1 || e->port == port;
    if (name_ok && port_ok) return 1;
  }
  return 0;
}

int lp_filter_match(const struct lp_filter *f, const char *name, int port) {
  if (!f->set) return 1;
  return lp_filter_hits(f, name, port) ^ f->exclude;
}

/* ---- address families and ranges -------------------------------------- */

/* "AF_INET" or "AF_INET6" as an lp_family; LP_FAMILY_ANY for anything else. */
static int family_parse(const char *s) {
  return strcmp(s, "AF_INET") == 0 ? LP_FAMILY_INET : strcmp(s, "AF_INET6") == 0 ? LP_FAMILY_INET6 : LP_FAMILY_ANY;
}

/* "ADDRESS/PREFIX" in `family`; 0, or -1 with a reason. */
static int range_parse(const char *s, int family, struct lp_addr_range *r, char *why, size_t whylen) {
  memset(r, 0, sizeof(*r));
  const char *slash = strchr(s, '/');
  char addr[INET6_ADDRSTRLEN];
  long long prefix;
  int max = family == LP_FAMILY_INET6 ? 128 : 32;
  if (slash == NULL) {
    snprintf(why, whylen, "no /PREFIX");
    return -1;
  }
  if ((size_t)(slash - s) >= sizeof(addr)) {
    snprintf(why, whylen, "the address is longer than any %s address", family == LP_FAMILY_INET6 ? "IPv6" : "IP");
    return -1;
  }
  memcpy(addr, s, (size_t)(slash - s));
  addr[slash - s] = '\0';
  if (inet_pton(family == LP_FAMILY_INET6 ? AF_INET6 : AF_INET, addr, r->addr) != 1) {
    snprintf(why, whylen, "'%.46s' is not an %s address", addr, family == LP_FAMILY_INET6 ? "IPv6" : "IPv4");
    return -1;
  }
  if (parse_decimal(slash + 1, strlen(slash + 1), max, &prefix) != 0) {
    snprintf(why, whylen, "the prefix is not a decimal number in 0..%d", max);
    return -1;
  }
  r->family = family;
  r->prefix = (int)prefix;
  r->set = 1;
  return 0;
}

int lp_addr_in_range(const struct lp_addr_range *r, const uint8_t *addr) {
  int full = r->prefix / 8, rest = r->prefix % 8;
  if (memcmp(addr, r->addr, (size_t)full) != 0) return 0;
  if (rest == 0) return 1;
  uint8_t mask = (uint8_t)(0xff << (8 - rest));
  return (addr[full] & mask) == (r->addr[full] & mask);
}

/* ---- integer variables ------------------------------------------------ */

struct int_var {
  const char *name;
  size_t off;
  int def, min, max;
  const char *extra; /* what else the accepted set says, for the warning */
};

static const struct int_var int_vars[] = {
    {"NCCL_IB_DISABLE", offsetof(struct lp_config, ib_disable), 0, -2147483647, 2147483647,
     "(non-zero: linkpass offers no devices)"},
    {"NCCL_IB_GID_INDEX", offsetof(struct lp_config, gid_index), -1, -1, 255, "(-1 selects automatically)"},
    {"NCCL_IB_ROCE_VERSION_NUM", offsetof(struct lp_config, roce_version), 2, 1, 2, ""},
    {"NCCL_IB_TC", offsetof(struct lp_config, tc), 0, -1, 255, "(-1: NCCL's default, 0)"},
    {"NCCL_IB_FIFO_TC", offsetof(struct lp_config, fifo_tc), -1, -1, 255, "(-1: the connection's class)"},
    {"NCCL_IB_SL", offsetof(struct lp_config, sl), 0, -1, 15, "(-1: NCCL's default, 0)"},
    {"NCCL_IB_PKEY", offsetof(struct lp_config, pkey), 0, 0, 65535, "(a P_Key table index)"},
    {"NCCL_IB_TIMEOUT", offsetof(struct lp_config, timeout), 20, 1, 31, ""},
    {"NCCL_IB_RETRY_CNT", offsetof(struct lp_config, retry_cnt), 7, 0, 7, ""},
    {"NCCL_IB_QPS_PER_CONNECTION", offsetof(struct lp_config, qps_per_conn), 1, 1, LP_MAX_QPS, ""},
    {"NCCL_IB_USE_INLINE", offsetof(struct lp_config, use_inline), 0, 0, 1, "(1: clear-to-sends go inline)"},
    {"NCCL_GDR_FLUSH_DISABLE", offsetof(struct lp_config, gdr_flush_disable), 0, 0, 1,
     "(1: iflush of GPU memory does nothing)"},
    {"NCCL_IB_PCI_RELAXED_ORDERING", offsetof(struct lp_config, pci_ro), 2, 0, 2,
     "(0 off, 1 on, 2 on where libibverbs has ibv_reg_mr_iova2)"},
    {"NCCL_IB_ADAPTIVE_ROUTING", offsetof(struct lp_config, adaptive_routing), -2, -2, 1,
     "(-2: on for InfiniBand ports only, 0 off, 1 on)"},
    {"NCCL_IB_AR_THRESHOLD", offsetof(struct lp_config, ar_threshold), LP_AR_THRESHOLD_DEFAULT, -2, 2147483647,
     "(bytes; negative: the default, 8192)"},
    {"NCCL_IB_ECE_ENABLE", offsetof(struct lp_config, ece_enable), 1, 0, 1, ""},
    {"NCCL_IB_DEVICE_PCI_ORDER", offsetof(struct lp_config, device_pci_order), 1, 0, 1,
     "(1: devices in PCI address order)"},
    {"NCCL_IB_SUBNET_AWARE_ROUTING", offsetof(struct lp_config, subnet_routing), 0, 0, 1,
     "(1: connect from a device on the listener's RoCE subnet)"},
    {"NCCL_IB_SUBNET_PREFIX_LEN", offsetof(struct lp_config, subnet_prefix), 24, 1, 32, "(IPv4 prefix bits)"},
    {"LINKPASS_SETUP_TIMEOUT_MS", offsetof(struct lp_config, setup_timeout_ms), 120000, 0, 86400000,
     "(0 waits forever)"},
    {"LINKPASS_MAX_WR_BYTES", offsetof(struct lp_config, max_wr_bytes), 1 << 30, 4096, 1 << 30, ""},
    {"LINKPASS_FAILOVER", offsetof(struct lp_config, failover), 1, 0, 1, "(0 turns link failover off)"},
    {"LINKPASS_WATCHDOG_MS", offsetof(struct lp_config, watchdog_ms), 2000, 0, 3600000, "(0 turns the watchdog off)"},
    {"LINKPASS_MOVE_TIMEOUT_MS", offsetof(struct lp_config, move_timeout_ms), 5000, 100, 600000, ""},
    {"LINKPASS_STANDBY", offsetof(struct lp_config, standby), 1, 0, 1,
     "(0: no standby path; a move builds its new path when it starts)"},
    {"LINKPASS_GRAY", offsetof(struct lp_config, gray), 1, 0, 1,
     "(0: a port that is up is never drained for resending packets)"},
    {"LINKPASS_GRAY_RESEND_PPM", offsetof(struct lp_config, gray_ppm), 2000, 1, 1000000,
     "(resent packets per million sent)"},
    {"LINKPASS_GRAY_RATE_PCT", offsetof(struct lp_config, gray_rate_pct), 50, 1, 99,
     "(a port moving data at under this percentage of another of its pool, and of its own speed, is slow)"},
    {"LINKPASS_FAILBACK_HOLDDOWN_MS", offsetof(struct lp_config, failback_holddown_ms), 2000, 0, 3600000, ""},
    {"LINKPASS_FAILBACK_HOLDDOWN_MAX_MS", offsetof(struct lp_config, failback_holddown_max_ms), 60000, 0, 86400000, ""},
    {"LINKPASS_SYSLOG", offsetof(struct lp_config, syslog), 1, 0, 1, "(0 keeps event lines in NCCL's log only)"},
};

#define NVARS (sizeof(int_vars) / sizeof(int_vars[0]))

/* Below these, a setting is taken but warned about: it fails by itself. */
#define LP_SETUP_TIMEOUT_LOW_MS 100
#define LP_WATCHDOG_LOW_MS 10

static void diag(lp_diag_fn fn, void *arg, int *count, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void diag(lp_diag_fn fn, void *arg, int *count, const char *fmt, ...) {
  char buf[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  (*count)++;
  if (fn) fn(arg, buf);
}

static const struct {
  const char *name;
  int facility;
} syslog_facilities[] = {{"user", LOG_USER},     {"daemon", LOG_DAEMON}, {"local0", LOG_LOCAL0}, {"local1", LOG_LOCAL1},
                         {"local2", LOG_LOCAL2}, {"local3", LOG_LOCAL3}, {"local4", LOG_LOCAL4}, {"local5", LOG_LOCAL5},
                         {"local6", LOG_LOCAL6}, {"local7", LOG_LOCAL7}};

int lp_syslog_facility(const char *name) {
  for (size_t i = 0; i < sizeof(syslog_facilities) / sizeof(syslog_facilities[0]); i++)
    if (strcmp(name, syslog_facilities[i].name) == 0) return syslog_facilities[i].facility;
  return -1;
}

/* The name LINKPASS_SYSLOG_FACILITY takes for a facility: the effective
 * values are logged as they are set. */
static const char *syslog_facility_name(int facility) {
  for (size_t i = 0; i < sizeof(syslog_facilities) / sizeof(syslog_facilities[0]); i++)
    if (syslog_facilities[i].facility == facility) return syslog_facilities[i].name;
  return "?";
}

/* The RC retry budget: the local ACK timeout is 4.096 us x 2^NCCL_IB_TIMEOUT,
 * tried NCCL_IB_RETRY_CNT + 1 times. */
static uint64_t retry_budget_ns(int timeout, int retry_cnt) { return (4096ull << timeout) * (uint64_t)(retry_cnt + 1); }

static void derive(struct lp_config *cfg) {
  const uint64_t ms = 1000000ull;
  cfg->ns.setup_timeout_ns = (uint64_t)cfg->setup_timeout_ms * ms;
  cfg->ns.watchdog_ns = (uint64_t)cfg->watchdog_ms * ms;
  cfg->ns.move_timeout_ns = (uint64_t)cfg->move_timeout_ms * ms;
  cfg->ns.holddown_ns = (uint64_t)cfg->failback_holddown_ms * ms;
  cfg->ns.holddown_max_ns = (uint64_t)cfg->failback_holddown_max_ms * ms;
  cfg->ns.retry_budget_ns = retry_budget_ns(cfg->timeout, cfg->retry_cnt);
  cfg->ar_threshold_bytes = cfg->ar_threshold < 0 ? LP_AR_THRESHOLD_DEFAULT : (uint64_t)cfg->ar_threshold;
  /* NCCL spells its own default -1: class and level 0. */
  if (cfg->tc < 0) cfg->tc = 0;
  if (cfg->sl < 0) cfg->sl = 0;
}

void lp_config_defaults(struct lp_config *cfg) {
  memset(cfg, 0, sizeof(*cfg));
  for (size_t i = 0; i < NVARS; i++) *(int *)((char *)cfg + int_vars[i].off) = int_vars[i].def;
  cfg->family = LP_FAMILY_ANY;
  cfg->gid_family = LP_FAMILY_INET;
  cfg->syslog_facility = LOG_USER;
  snprintf(cfg->syslog_socket, sizeof(cfg->syslog_socket), "/dev/log");
  snprintf(cfg->rate_board, sizeof(cfg->rate_board), "/dev/shm/linkpass-rates-%u", (unsigned)getuid());
  derive(cfg);
}

/* The settings kept as the strings they are given as, if they fit. */
#define STR_FIELD(f) offsetof(struct lp_config, f), sizeof(((struct lp_config *)0)->f)
static const struct str_var {
  const char *name;
  size_t off, len;
  const char *fallback; /* what is used instead of a value too long */
} str_vars[] = {
    {"NCCL_IBVERBS_LIB", STR_FIELD(ibverbs_lib), "using the default library names"},
    {"LINKPASS_NIC_POOL", STR_FIELD(nic_pool), "using pools ordered by closeness"},
    {"LINKPASS_METRICS_FILE", STR_FIELD(metrics_file), "writing no metrics file"},
    {"LINKPASS_SYSLOG_SOCKET", STR_FIELD(syslog_socket), "using /dev/log"},
    {"LINKPASS_RATE_BOARD", STR_FIELD(rate_board), "using the default board"},
};

#define NELEMS(a) (sizeof(a) / sizeof((a)[0]))

static void string_var(const struct str_var *v, const char *s, struct lp_config *cfg, lp_diag_fn warn, void *warn_arg,
                       int *nwarn) {
  if (s == NULL || *s == '\0') return;
  if (strlen(s) >= v->len) {
    diag(warn, warn_arg, nwarn, "%s is not valid: longer than %d characters; %s", v->name, (int)v->len - 1,
         v->fallback);
    return;
  }
  snprintf((char *)cfg + v->off, v->len, "%s", s);
}

/* Every name linkpass reads, by index, NULL past the last: the integer
 * settings, the strings, the facility (parsed on its own) and the one
 * name linkpass's own programs read (linkpass-perf's --simverbs default). */
static const char *setting_name(size_t i) {
  static const char *const others[] = {"LINKPASS_SYSLOG_FACILITY", "LINKPASS_SIMVERBS"};
  if (i < NVARS) return int_vars[i].name;
  i -= NVARS;
  if (i < NELEMS(str_vars)) return str_vars[i].name;
  i -= NELEMS(str_vars);
  return i < NELEMS(others) ? others[i] : NULL;
}

/* Settings of a part that another setting turns off.  One that is set
 * then is named, once, so that whoever set it does not wait for its effect.
 * (LINKPASS_METRICS_FILE with failover off: the plugin says so itself.) */
static const char *const failover_settings[] = {"LINKPASS_WATCHDOG_MS",
                                                "LINKPASS_MOVE_TIMEOUT_MS",
                                                "LINKPASS_STANDBY",
                                                "LINKPASS_GRAY",
                                                "LINKPASS_GRAY_RESEND_PPM",
                                                "LINKPASS_GRAY_RATE_PCT",
                                                "LINKPASS_FAILBACK_HOLDDOWN_MS",
                                                "LINKPASS_FAILBACK_HOLDDOWN_MAX_MS",
                                                "LINKPASS_SYSLOG",
                                                "LINKPASS_SYSLOG_SOCKET",
                                                "LINKPASS_SYSLOG_FACILITY",
                                                "LINKPASS_NIC_POOL",
                                                "LINKPASS_RATE_BOARD"};
static const char *const gray_settings[] = {"LINKPASS_GRAY_RESEND_PPM", "LINKPASS_GRAY_RATE_PCT",
                                            "LINKPASS_RATE_BOARD"};

static void name_inert(const char *const *names, size_t n, const char *off, lp_env_fn env, void *env_arg,
                       lp_diag_fn warn, void *warn_arg, int *nwarn) {
  char list[640];
  size_t used = 0;
  int count = 0;
  list[0] = '\0';
  for (size_t i = 0; i < n && used < sizeof(list); i++) {
    const char *v = env(env_arg, names[i]);
    if (v == NULL || *v == '\0') continue;
    used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s", count ? ", " : "", names[i]);
    count++;
  }
  if (count > 0)
    diag(warn, warn_arg, nwarn, "%s %s set but %s no effect while %s", list, count > 1 ? "are" : "is",
         count > 1 ? "have" : "has", off);
}

/* The setting that is the LEN characters at `name` (an environment
 * entry's name), or the one that shares the longest start with it past
 * "LINKPASS_", or NULL: what a misspelt name most likely meant.  *exact
 * says which. */
static const char *nearest_name(const char *name, size_t len, int *exact) {
  const char *best = NULL;
  size_t best_len = strlen("LINKPASS_");
  *exact = 0;
  for (size_t i = 0; setting_name(i) != NULL; i++) {
    const char *k = setting_name(i);
    size_t n = 0;
    while (n < len && k[n] != '\0' && k[n] == name[n]) n++;
    if (n == len && k[n] == '\0') {
      *exact = 1;
      return k;
    }
    if (n > best_len) {
      best = k;
      best_len = n;
    }
  }
  return best;
}

int lp_config_unknown(char *const *environ_list, lp_diag_fn warn, void *warn_arg) {
  int nwarn = 0;
  for (size_t i = 0; environ_list != NULL && environ_list[i] != NULL; i++) {
    const char *e = environ_list[i];
    if (strncmp(e, "LINKPASS_", strlen("LINKPASS_")) != 0) continue;
    const char *eq = strchr(e, '=');
    size_t len = eq ? (size_t)(eq - e) : strlen(e);
    int exact;
    const char *near = nearest_name(e, len, &exact);
    if (exact) continue;
    diag(warn, warn_arg, &nwarn,
         "%.*s is not a linkpass setting, and does nothing%s%s%s (docs/CONFIGURATION.md lists them)",
         (int)(len > 64 ? 64 : len), e, near ? ": did you mean " : "", near ? near : "", near ? "?" : "");
  }
  return nwarn;
}

/* Env values are copied for the log with a bounded length so a hostile
 * variable cannot blow up the message. */
static void shown(char *dst, size_t len, const char *v) {
  snprintf(dst, len, "%.*s%s", 64, v, strlen(v) > 64 ? "..." : "");
}

int lp_config_load(struct lp_config *cfg, lp_env_fn env, void *env_arg, lp_diag_fn warn, void *warn_arg) {
  int nwarn = 0;
  char val[96];
  lp_config_defaults(cfg);

  for (size_t i = 0; i < NVARS; i++) {
    const struct int_var *v = &int_vars[i];
    const char *s = env(env_arg, v->name);
    if (s == NULL || *s == '\0') continue; /* empty means unset, as in NCCL */
    long long x;
    if (lp_parse_int(s, &x) != 0 || x < v->min || x > v->max) {
      shown(val, sizeof(val), s);
      diag(warn, warn_arg, &nwarn, "%s=\"%s\" is not valid: expected an integer in [%d, %d]%s%s; using the default %d",
           v->name, val, v->min, v->max, *v->extra ? " " : "", v->extra, v->def);
      continue;
    }
    *(int *)((char *)cfg + v->off) = (int)x;
  }

  char why[160];
  const char *s = env(env_arg, "NCCL_IB_HCA");
  if (s != NULL && *s != '\0') {
    if (lp_filter_parse(s, 1, &cfg->hca, why, sizeof(why)) != 0) {
      shown(val, sizeof(val), s);
      diag(warn, warn_arg, &nwarn,
           "NCCL_IB_HCA=\"%s\" is not valid (%s): expected [^][=]name[:port][,name[:port]...]; using every device", val,
           why);
    } else {
      snprintf(cfg->hca_str, sizeof(cfg->hca_str), "%s", s);
    }
  }

  s = env(env_arg, "NCCL_SOCKET_IFNAME");
  if (s != NULL && *s != '\0') {
    if (lp_filter_parse(s, 0, &cfg->ifname, why, sizeof(why)) != 0) {
      shown(val, sizeof(val), s);
      diag(warn, warn_arg, &nwarn,
           "NCCL_SOCKET_IFNAME=\"%s\" is not valid (%s): expected [^][=]prefix[,prefix...]; using the automatic "
           "interface choice",
           val, why);
    } else {
      snprintf(cfg->ifname_str, sizeof(cfg->ifname_str), "%s", s);
    }
  }

  /* The family first: NCCL_IB_ADDR_RANGE is read in it. */
  s = env(env_arg, "NCCL_IB_ADDR_FAMILY");
  if (s != NULL && *s != '\0') {
    if (family_parse(s) != LP_FAMILY_ANY) {
      cfg->gid_family = family_parse(s);
    } else {
      shown(val, sizeof(val), s);
      diag(warn, warn_arg, &nwarn,
           "NCCL_IB_ADDR_FAMILY=\"%s\" is not valid: expected AF_INET or AF_INET6; using AF_INET", val);
    }
  }
  s = env(env_arg, "NCCL_IB_ADDR_RANGE");
  if (s != NULL && *s != '\0') {
    if (range_parse(s, cfg->gid_family, &cfg->gid_range, why, sizeof(why)) != 0) {
      shown(val, sizeof(val), s);
      diag(warn, warn_arg, &nwarn,
           "NCCL_IB_ADDR_RANGE=\"%s\" is not valid (%s): expected ADDRESS/PREFIX in NCCL_IB_ADDR_FAMILY (%s); "
           "considering every GID",
           val, why, cfg->gid_family == LP_FAMILY_INET6 ? "AF_INET6, prefix 0..128" : "AF_INET, prefix 0..32");
    } else {
      snprintf(cfg->gid_range_str, sizeof(cfg->gid_range_str), "%s", s);
    }
  }

  s = env(env_arg, "NCCL_SOCKET_FAMILY");
  if (s != NULL && *s != '\0') {
    cfg->family = family_parse(s);
    if (cfg->family == LP_FAMILY_ANY) {
      shown(val, sizeof(val), s);
      diag(warn, warn_arg, &nwarn,
           "NCCL_SOCKET_FAMILY=\"%s\" is not valid: expected AF_INET or AF_INET6; using either family", val);
    }
  }

  for (size_t i = 0; i < NELEMS(str_vars); i++)
    string_var(&str_vars[i], env(env_arg, str_vars[i].name), cfg, warn, warn_arg, &nwarn);
  /* NCCL runs a process per GPU: without the pid in the name the ranks of
   * a node overwrite one file, and each scrape shows one of them at random. */
  if (cfg->failover && cfg->metrics_file[0] != '\0' && strstr(cfg->metrics_file, "%p") == NULL)
    diag(warn, warn_arg, &nwarn,
         "LINKPASS_METRICS_FILE=\"%s\" has no %%p: the ranks that share a node write over each other's file; put "
         "%%p (the process id) in the name",
         cfg->metrics_file);

  derive(cfg);
  /* Checked against each other: the watchdog exists to find a black hole
   * before the RC retries give up; at or above their budget it never does. */
  double budget_ms = (double)cfg->ns.retry_budget_ns / 1e6;
  if (cfg->failover && cfg->ns.watchdog_ns > 0 && cfg->ns.watchdog_ns >= cfg->ns.retry_budget_ns)
    diag(warn, warn_arg, &nwarn,
         "LINKPASS_WATCHDOG_MS=%d is at or above the RC retry budget of %.0f ms (NCCL_IB_TIMEOUT=%d, "
         "NCCL_IB_RETRY_CNT=%d: 4.096 us x 2^%d x %d): a silent path is found by the retry error first; "
         "set the watchdog below the budget",
         cfg->watchdog_ms, budget_ms, cfg->timeout, cfg->retry_cnt, cfg->timeout, cfg->retry_cnt + 1);
  /* The damped hold-down doubles from the first up to the ceiling; a
   * ceiling below the first would raise itself (holddown.c). */
  if (cfg->failback_holddown_max_ms < cfg->failback_holddown_ms)
    diag(warn, warn_arg, &nwarn,
         "LINKPASS_FAILBACK_HOLDDOWN_MAX_MS=%d is below LINKPASS_FAILBACK_HOLDDOWN_MS=%d: every hold-down lasts %d ms; "
         "set the maximum at or above the first",
         cfg->failback_holddown_max_ms, cfg->failback_holddown_ms, cfg->failback_holddown_ms);

  /* Values that fail by themselves, taken but named. */
  if (cfg->setup_timeout_ms > 0 && cfg->setup_timeout_ms < LP_SETUP_TIMEOUT_LOW_MS)
    diag(warn, warn_arg, &nwarn,
         "LINKPASS_SETUP_TIMEOUT_MS=%d is below %d ms: a connection's setup across hosts (a TCP connect, the exchange, "
         "the QPs of both ends, a peer that starts later) takes longer, and its connect would fail; use seconds, or 0 "
         "for no limit",
         cfg->setup_timeout_ms, LP_SETUP_TIMEOUT_LOW_MS);
  if (cfg->failover && cfg->watchdog_ms > 0 && cfg->watchdog_ms < LP_WATCHDOG_LOW_MS)
    diag(warn, warn_arg, &nwarn,
         "LINKPASS_WATCHDOG_MS=%d is below %d ms: a healthy connection can go that long without a completion (a large "
         "message on a slow or shared port, a busy host), and would move (reason stall); use 100 ms or more, or 0 to "
         "turn the watchdog off",
         cfg->watchdog_ms, LP_WATCHDOG_LOW_MS);

  s = env(env_arg, "LINKPASS_SYSLOG_FACILITY");
  if (s != NULL && *s != '\0') {
    int facility = lp_syslog_facility(s);
    if (facility < 0) {
      shown(val, sizeof(val), s);
      diag(warn, warn_arg, &nwarn,
           "LINKPASS_SYSLOG_FACILITY=\"%s\" is not valid: expected user, daemon or local0..local7; using user", val);
    } else {
      cfg->syslog_facility = facility;
    }
  }
  if (!cfg->failover)
    name_inert(failover_settings, NELEMS(failover_settings), "link failover is off (LINKPASS_FAILOVER=0)", env, env_arg,
               warn, warn_arg, &nwarn);
  else if (!cfg->gray)
    name_inert(gray_settings, NELEMS(gray_settings), "the gray-failure detector is off (LINKPASS_GRAY=0)", env, env_arg,
               warn, warn_arg, &nwarn);
  return nwarn;
}

void lp_config_describe(const struct lp_config *cfg, lp_diag_fn line, void *arg) {
  char buf[768];
  for (size_t i = 0; i < NVARS; i++) {
    snprintf(buf, sizeof(buf), "%s=%d", int_vars[i].name, *(const int *)((const char *)cfg + int_vars[i].off));
    line(arg, buf);
  }
  snprintf(buf, sizeof(buf), "NCCL_IB_HCA=%s", cfg->hca.set ? cfg->hca_str : "(all devices)");
  line(arg, buf);
  snprintf(buf, sizeof(buf), "NCCL_SOCKET_IFNAME=%s", cfg->ifname.set ? cfg->ifname_str : "(automatic)");
  line(arg, buf);
  snprintf(buf, sizeof(buf), "NCCL_IB_ADDR_FAMILY=%s", cfg->gid_family == LP_FAMILY_INET6 ? "AF_INET6" : "AF_INET");
  line(arg, buf);
  snprintf(buf, sizeof(buf), "NCCL_IB_ADDR_RANGE=%s", cfg->gid_range.set ? cfg->gid_range_str : "(every GID)");
  line(arg, buf);
  snprintf(buf, sizeof(buf), "NCCL_SOCKET_FAMILY=%s",
           cfg->family == LP_FAMILY_INET    ? "AF_INET"
           : cfg->family == LP_FAMILY_INET6 ? "AF_INET6"
                                            : "(any)");
  line(arg, buf);
  snprintf(buf, sizeof(buf), "NCCL_IBVERBS_LIB=%s", cfg->ibverbs_lib[0] ? cfg->ibverbs_lib : "(default names)");
  line(arg, buf);
  snprintf(buf, sizeof(buf), "LINKPASS_NIC_POOL=%s", cfg->nic_pool[0] ? cfg->nic_pool : "(by closeness)");
  line(arg, buf);
  snprintf(buf, sizeof(buf), "LINKPASS_SYSLOG_SOCKET=%s", cfg->syslog_socket);
  line(arg, buf);
  snprintf(buf, sizeof(buf), "LINKPASS_SYSLOG_FACILITY=%s", syslog_facility_name(cfg->syslog_facility));
  line(arg, buf);
  snprintf(buf, sizeof(buf), "LINKPASS_METRICS_FILE=%s", cfg->metrics_file[0] ? cfg->metrics_file : "(none)");
  line(arg, buf);
  snprintf(buf, sizeof(buf), "LINKPASS_RATE_BOARD=%s", cfg->rate_board);
  line(arg, buf);
}
