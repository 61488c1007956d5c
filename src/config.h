/*
 * Configuration: every environment variable the transport honours, parsed
 * and validated in one place.  Pure: the environment is read through a
 * callback and problems are reported through another, so unit tests can
 * feed malformed values and check the warnings without touching the
 * process environment or any device.
 *
 * The NCCL_* variables keep NCCL's meaning and syntax; the transport's own
 * settings use the LINKPASS_ prefix.  A bad value never aborts: it is
 * reported (variable, value, what is accepted) and the default is used.
 */
#ifndef LP_CONFIG_H
#define LP_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#define LP_MAX_QPS 16         /* NCCL_IB_QPS_PER_CONNECTION upper bound */
#define LP_FILTER_MAX 64      /* entries in an NCCL_IB_HCA / NCCL_SOCKET_IFNAME list: a port each of LP_MAX_DEVS */
#define LP_FILTER_NAME_MAX 64 /* bytes of one entry's name, NUL included */
#define LP_CONFIG_STR_MAX 512 /* raw string variables kept for the log */
#define LP_AR_THRESHOLD_DEFAULT 8192 /* NCCL_IB_AR_THRESHOLD when unset or negative, as NCCL */

/* A name filter with NCCL's syntax: "[^][=]name[:port][,name[:port]...]".
 * '^' keeps everything that does NOT match, '=' asks for exact names instead
 * of prefixes, ":port" restricts an entry to one port. */
struct lp_filter_entry {
  char name[LP_FILTER_NAME_MAX];
  int port; /* -1: any port */
};

struct lp_filter {
  int set;     /* 0: no filter given, everything matches */
  int exclude; /* leading '^' */
  int exact;   /* leading '=' (after '^' when both) */
  int n;
  struct lp_filter_entry e[LP_FILTER_MAX];
};

/* Parse `spec` into `f`.  Returns 0, or -1 with a reason in `why` (and `f`
 * reset to "no filter").  Empty entries (",,") are ignored as NCCL does. */
int lp_filter_parse(const char *spec, int allow_port, struct lp_filter *f, char *why, size_t whylen);

/* 1 when (name, port) passes the filter; port -1 matches any entry port. */
int lp_filter_match(const struct lp_filter *f, const char *name, int port);

/* 1 when `name` matches an entry of the list itself, ignoring '^' (used for
 * the interface search order, which NCCL expresses as several lists). */
int lp_filter_hits(const struct lp_filter *f, const char *name, int port);

enum lp_family { LP_FAMILY_ANY = 0, LP_FAMILY_INET = 4, LP_FAMILY_INET6 = 6 };

/* NCCL_IB_ADDR_RANGE: a subnet, ADDRESS/PREFIX, in NCCL_IB_ADDR_FAMILY. */
struct lp_addr_range {
  int set;
  int family;       /* LP_FAMILY_INET or LP_FAMILY_INET6 */
  uint8_t addr[16]; /* network byte order; 4 bytes used for IPv4 */
  int prefix;       /* bits */
};

/* 1 when the 4 (IPv4) or 16 (IPv6) bytes at `addr` lie in `r`. */
int lp_addr_in_range(const struct lp_addr_range *r, const uint8_t *addr);

struct lp_config {
  /* ibverbs */
  int ib_disable;   /* NCCL_IB_DISABLE: non-zero offers no devices, as NCCL's transport does */
  int gid_index;    /* NCCL_IB_GID_INDEX, -1: automatic */
  int roce_version; /* NCCL_IB_ROCE_VERSION_NUM: preferred RoCE version in automatic GID selection */
  int gid_family;   /* NCCL_IB_ADDR_FAMILY: GIDs the automatic choice looks for, LP_FAMILY_INET or _INET6 */
  struct lp_addr_range gid_range; /* NCCL_IB_ADDR_RANGE: only GIDs in this subnet, when set */
  char gid_range_str[64];
  int tc;                /* NCCL_IB_TC */
  int fifo_tc;           /* NCCL_IB_FIFO_TC: the receiver's QPs (clear-to-sends), -1: as the connection */
  int sl;                /* NCCL_IB_SL */
  int pkey;              /* NCCL_IB_PKEY (P_Key table index) */
  int timeout;           /* NCCL_IB_TIMEOUT */
  int retry_cnt;         /* NCCL_IB_RETRY_CNT */
  int qps_per_conn;      /* NCCL_IB_QPS_PER_CONNECTION */
  int use_inline;        /* NCCL_IB_USE_INLINE: clear-to-sends posted with IBV_SEND_INLINE */
  int gdr_flush_disable; /* NCCL_GDR_FLUSH_DISABLE: iflush of GPU memory does nothing */
  int pci_ro;            /* NCCL_IB_PCI_RELAXED_ORDERING: 0 off, 1 on, 2 on where the library can */
  int adaptive_routing;  /* NCCL_IB_ADAPTIVE_ROUTING: -2 on InfiniBand only, 0 off, else on */
  int ar_threshold;      /* NCCL_IB_AR_THRESHOLD: larger messages split for adaptive routing, negative: 8192 */
  int ece_enable;        /* NCCL_IB_ECE_ENABLE: negotiate Enhanced Connection Establishment */
  int device_pci_order;  /* NCCL_IB_DEVICE_PCI_ORDER: devices sorted by PCI address */
  int subnet_routing;    /* NCCL_IB_SUBNET_AWARE_ROUTING: connect from a device on the listener's RoCE subnet */
  int subnet_prefix;     /* NCCL_IB_SUBNET_PREFIX_LEN: IPv4 prefix bits of that subnet */
  struct lp_filter hca;  /* NCCL_IB_HCA */
  /* out-of-band sockets */
  struct lp_filter ifname; /* NCCL_SOCKET_IFNAME */
  int family;              /* NCCL_SOCKET_FAMILY: enum lp_family */
  /* linkpass */
  int setup_timeout_ms;         /* LINKPASS_SETUP_TIMEOUT_MS: connection setup deadline, 0: none */
  int max_wr_bytes;             /* LINKPASS_MAX_WR_BYTES: largest single RDMA write */
  int failover;                 /* LINKPASS_FAILOVER: 0 behaves as the plain transport */
  int watchdog_ms;              /* LINKPASS_WATCHDOG_MS: no progress this long moves a connection, 0: off */
  int move_timeout_ms;          /* LINKPASS_MOVE_TIMEOUT_MS: the peer's answer to each step of a move */
  int standby;                  /* LINKPASS_STANDBY: a pre-connected path on another NIC per connection */
  int gray;                     /* LINKPASS_GRAY: drain ports that resend many packets (gray.h) */
  int gray_ppm;                 /* LINKPASS_GRAY_RESEND_PPM: resent packets per million that count */
  int gray_rate_pct;            /* LINKPASS_GRAY_RATE_PCT: share of the pool's best rate under which a port is slow */
  int failback_holddown_ms;     /* LINKPASS_FAILBACK_HOLDDOWN_MS: a recovered port's first hold-down */
  int failback_holddown_max_ms; /* LINKPASS_FAILBACK_HOLDDOWN_MAX_MS: the cap of the doubling */
  int syslog;                   /* LINKPASS_SYSLOG: 0 keeps event lines in NCCL's log only */
  int syslog_facility;          /* LINKPASS_SYSLOG_FACILITY, as a LOG_* value */
  char syslog_socket[108];      /* LINKPASS_SYSLOG_SOCKET */
  char nic_pool[LP_CONFIG_STR_MAX];     /* LINKPASS_NIC_POOL, "" when unset */
  char metrics_file[LP_CONFIG_STR_MAX]; /* LINKPASS_METRICS_FILE, "" when unset */
  char rate_board[LP_CONFIG_STR_MAX];   /* LINKPASS_RATE_BOARD: the host's board of port rates (rateboard.h) */
  char ibverbs_lib[LP_CONFIG_STR_MAX];  /* NCCL_IBVERBS_LIB, "" when unset */
  char hca_str[LP_CONFIG_STR_MAX];
  char ifname_str[LP_CONFIG_STR_MAX];
  /* Derived once from the above (lp_config_load, lp_config_defaults): what
   * the code compares against, so nothing converts a setting at use. */
  struct {
    uint64_t setup_timeout_ns; /* 0: none */
    uint64_t watchdog_ns;      /* 0: off */
    uint64_t move_timeout_ns;
    uint64_t holddown_ns, holddown_max_ns;
    uint64_t retry_budget_ns; /* how long an RC QP retries a silent path before its error completion */
  } ns;
  uint64_t ar_threshold_bytes; /* NCCL_IB_AR_THRESHOLD, its default applied */
};

/* Reads one variable; NULL when unset. */
typedef const char *(*lp_env_fn)(void *arg, const char *name);
/* Receives one complete warning (no trailing newline). */
typedef void (*lp_diag_fn)(void *arg, const char *msg);

/* Syslog facility by name: user, daemon, local0..local7 (a LOG_* value).  -1 if unknown. */
int lp_syslog_facility(const char *name);

/* Defaults only. */
void lp_config_defaults(struct lp_config *cfg);

/* Fill `cfg` from the environment.  Returns the number of warnings issued. */
int lp_config_load(struct lp_config *cfg, lp_env_fn env, void *env_arg, lp_diag_fn warn, void *warn_arg);

/* Every LINKPASS_ name in `environ_list` (NAME=VALUE strings, NULL at the
 * end) that linkpass does not read: a misspelt setting would do nothing
 * without a word.  Returns the number of warnings issued. */
int lp_config_unknown(char *const *environ_list, lp_diag_fn warn, void *warn_arg);

/* One line per effective setting, for the INFO log. */
void lp_config_describe(const struct lp_config *cfg, lp_diag_fn line, void *arg);

/* Strict integer parse: decimal or 0x hex, optional sign, surrounding blanks
 * allowed, nothing else.  Returns 0 and *out, or -1. */
int lp_parse_int(const char *s, long long *out);

#endif
