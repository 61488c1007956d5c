/*
 * simverbs: the operator's tool for a simulated RDMA fabric.
 *
 *   simverbs up <config> [--netns] [--fabric NAME]   bring a fabric up (replaces an old one)
 *   simverbs down [--fabric NAME]             remove it
 *   simverbs run --host H [--fabric NAME] -- CMD [ARGS...]
 *   simverbs link HOST:NIC[:PORT] down|up
 *   simverbs fault ...                        inject faults
 *   simverbs status [--fabric NAME]
 *   simverbs host-addr HOST                   where other hosts reach HOST
 *   simverbs watch [--fabric NAME]            the link watcher of a netns fabric
 *
 * Every bad input gets a message that says what was wrong and what is
 * accepted, and a non-zero exit: 2 for usage errors, 1 when the command could
 * not be carried out.  docs/SIMVERBS.md has examples.
 */
#include "fabric.h"
#include "netns.h"
#include "sysview.h"

#include <dirent.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXIT_USAGE 2
#define LIB_NAME "libibverbs.so.1"
#define MAX_COUNT 1000000u     /* ack-loss / partial-write */
#define MAX_DELAY_US 60000000u /* one minute: beyond any sane QP timeout */
#define LINK_FOLLOW_MS 5000    /* netns: how long `link` waits for the port to follow */

/* ---- usage ---- */

struct cmd_help {
  const char *name, *usage, *text;
};

static const struct cmd_help helps[] = {
    {"up", "simverbs up <config> [--netns] [--fabric NAME]",
     "Create the fabric from a topology file, build each host's sysfs tree and\n"
     "mark it ready.  An existing fabric of that name is replaced (processes\n"
     "still using it keep their old copy).  Without --fabric or $SIMVERBS_FABRIC\n"
     "the name comes from the file's 'fabric' line, else \"default\".\n"
     "With 'netns on' in the file, or --netns (needs root), each host gets a\n"
     "network namespace sv-<fabric>-<host>, each port a veth interface on a\n"
     "per-rail bridge in sv-<fabric>-sw, each host a management interface\n"
     "mgmt0 (198.18.255.<n>/24), and a watcher daemon makes every port follow\n"
     "its interface: `ip link set <if> down` in the host pulls the cable.\n"},
    {"down", "simverbs down [--fabric NAME]",
     "Remove the fabric's segment and sysfs trees and, for a netns fabric, stop\n"
     "its watcher and delete its namespaces (also what a crashed `up` left).\n"
     "Running processes are not killed; they keep their mapping until they exit.\n"},
    {"run", "simverbs run --host HOST [--fabric NAME] -- CMD [ARGS...]",
     "Run CMD as a process of HOST: sets SIMVERBS_FABRIC and SIMVERBS_HOST and\n"
     "puts the simulated " LIB_NAME " first on LD_LIBRARY_PATH.  CMD sees HOST's\n"
     "simulated /sys/class/infiniband, /sys/class/infiniband_verbs and the NICs'\n"
     "PCI directories at their kernel paths, the rest of /sys as it is (this\n"
     "needs root; otherwise a warning says why, and only ibv_get_sysfs_path()\n"
     "leads to them).  On a netns fabric CMD also runs in HOST's network\n"
     "namespace, with a /sys of its own, as with `ip netns exec`.\n"},
    {"link", "simverbs link HOST:NIC[:PORT][,HOST:NIC[:PORT]...] down|up",
     "Pull or restore a link (port 1 by default), or several at once, as a\n"
     "failing switch does: each port changes state, its sysfs files follow,\n"
     "and every context of the NIC gets IBV_EVENT_PORT_ERR or\n"
     "IBV_EVENT_PORT_ACTIVE.  It prints when each port changed state (\"at\",\n"
     "wall-clock seconds since the epoch).  On a netns fabric this sets the\n"
     "port's interface down or up in its host's namespace and waits for the\n"
     "port to follow.\n"},
    {"fault",
     "simverbs fault HOST:NIC[:PORT][,HOST:NIC[:PORT]...] blackhole on|off|ack-loss [N]|partial-write [N]|\n"
     "                               access-error [N]|delay US|\n"
     "                               rate PERCENT|loss PERCENT|recv-post-fail [N]|\n"
     "                               query-fail on|off|clear\n"
     "simverbs fault HOST:NIC device-fatal|device-recover\n"
     "simverbs fault HOST:NIC[,HOST:NIC...] create-qp-fail|rtr-fail [N]\n"
     "simverbs fault qp QPN fatal",
     "Port faults (on the sending port): blackhole drops everything while the\n"
     "port stays ACTIVE (only retries running out reveal it); ack-loss makes the\n"
     "next N requests land without their ACK; partial-write makes the next N\n"
     "writes land half their payload before the link dies; access-error makes\n"
     "the responder refuse the next N requests (REM_ACCESS_ERR, as for a bad\n"
     "rkey; the responder's QP breaks with IBV_EVENT_QP_ACCESS_ERR); delay adds US\n"
     "microseconds to every request.  Gray failures, the port ACTIVE and its\n"
     "attributes unchanged: rate makes it move data at PERCENT (1-100) of its\n"
     "rate; loss drops PERCENT (0-100, up to 4 decimals) of the packets it sends\n"
     "or receives (a packet before a message's last: a NAK and a resend one round\n"
     "trip later; the last: a local ACK timeout, then the resend).  recv-post-fail\n"
     "makes the next N ibv_post_recv calls on the port's QPs fail with ENOMEM\n"
     "(a consumer's error path, on this host).  query-fail makes ibv_query_port\n"
     "of the port fail with EIO while the port works on, as for a device that\n"
     "was hot-removed or cut off from its driver.  clear removes them all.  Ports\n"
     "joined by commas get the fault together, in one pass.\n"
     "device-fatal\n"
     "raises IBV_EVENT_DEVICE_FATAL and errors every QP of the NIC;\n"
     "device-recover lets it be opened again.  create-qp-fail makes the next N\n"
     "ibv_create_qp calls on the NIC fail with ENOMEM (its QP resources\n"
     "exhausted; 0 ends it); rtr-fail makes the next N ibv_modify_qp to RTR on\n"
     "it fail with EINVAL.  qp QPN fatal moves one QP\n"
     "(decimal or 0x hex) to the error state with IBV_EVENT_QP_FATAL.\n"},
    {"status", "simverbs status [--fabric NAME]",
     "Show hosts, NICs, port states, faults, traffic counters, live processes\n"
     "and the QPs, CQs and MRs they own.\n"},
    {"host-addr", "simverbs host-addr HOST [--fabric NAME]",
     "Print the IPv4 address at which the other hosts reach HOST's out-of-band\n"
     "services (TCP): its management address on a netns fabric, else 127.0.0.1.\n"},
    {"watch", "simverbs watch [--fabric NAME]",
     "The link watcher of a netns fabric: makes every port follow the\n"
     "operational state of its interface, through route netlink.  `up` starts\n"
     "it as a daemon (log in the run directory, watch.log) and `down` stops it;\n"
     "run it by hand only to debug.  It exits when the fabric goes down.\n"},
};
#define NHELPS (sizeof(helps) / sizeof(helps[0]))

/* A usage may span lines: the first gets `first`, the others `rest`. */
static void print_usage(FILE *out, const char *usage, const char *first, const char *rest) {
  const char *prefix = first;
  while (*usage) {
    size_t n = strcspn(usage, "\n");
    fprintf(out, "%s%.*s\n", prefix, (int)n, usage);
    usage += n + (usage[n] == '\n');
    prefix = rest;
  }
}

static void usage_all(FILE *out) {
  fputs("simverbs: a simulated RDMA fabric for testing verbs programs without hardware\n\nUsage:\n", out);
  for (size_t i = 0; i < NHELPS; i++) print_usage(out, helps[i].usage, "  ", "  ");
  fputs(
      "\nThe fabric name comes from --fabric, else $SIMVERBS_FABRIC, else \"default\".\n"
      "'simverbs <command> --help' explains a command; docs/SIMVERBS.md has examples.\n",
      out);
}

static const struct cmd_help *help_of(const char *cmd) {
  for (size_t i = 0; i < NHELPS; i++)
    if (strcmp(helps[i].name, cmd) == 0) return &helps[i];
  return NULL;
}

static void usage_cmd(const char *cmd, FILE *out) {
  const struct cmd_help *h = help_of(cmd);
  if (!h) { /* not a command: the overview is the most useful answer */
    usage_all(out);
    return;
  }
  print_usage(out, h->usage, "Usage: ", "       ");
  fprintf(out, "\n%s", h->text);
}

static int bad_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A usage error: say what was wrong, show the usage, exit 2. */
static int bad_usage(const char *cmd, const char *fmt, ...) {
  const struct cmd_help *h = help_of(cmd);
  va_list ap;
  fprintf(stderr, "simverbs %s: ", cmd);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  if (h) print_usage(stderr, h->usage, "Usage: ", "       ");
  return EXIT_USAGE;
}

/* ---- arguments ---- */

struct args {
  const char *cmd;
  const char *fabric; /* --fabric, NULL when not given */
  const char *host;   /* --host (run only) */
  bool netns;         /* --netns (up only) */
  bool help;
  int npos;
  char **pos;  /* positional arguments (points into argv) */
  char **exec; /* run: the command and its arguments */
};

static bool is_number_like(const char *s) { return s[0] == '-' && s[1] >= '0' && s[1] <= '9'; }

/* Options with a value: "--opt VALUE" or "--opt=VALUE".  Returns 1 when
 * argv[*i] is that option, 0 when not, -1 on a missing value. */
static int opt_value(char **argv, int argc, int *i, const char *opt, const char **out) {
  size_t n = strlen(opt);
  if (strncmp(argv[*i], opt, n) != 0) return 0;
  if (argv[*i][n] == '=') {
    *out = argv[*i] + n + 1;
    return **out ? 1 : -1;
  }
  if (argv[*i][n] != '\0') return 0;
  /* "--host --fabric x" is a forgotten value, not a host named "--fabric". */
  if (*i + 1 >= argc || (argv[*i + 1][0] == '-' && argv[*i + 1][1] != '\0')) return -1;
  *out = argv[++*i];
  return 1;
}

static int parse_one_opt(struct args *a, int argc, char **argv, int *i) {
  const char *opt = argv[*i];
  int r;
  if (strcmp(opt, "--help") == 0 || strcmp(opt, "-h") == 0) {
    a->help = true;
    return 0;
  }
  if ((r = opt_value(argv, argc, i, "--fabric", &a->fabric)) != 0)
    return r < 0 ? bad_usage(a->cmd, "--fabric needs a fabric name") : 0;
  if (strcmp(a->cmd, "run") == 0 && (r = opt_value(argv, argc, i, "--host", &a->host)) != 0)
    return r < 0 ? bad_usage(a->cmd, "--host needs a host name") : 0;
  if (strcmp(a->cmd, "up") == 0 && strcmp(opt, "--netns") == 0) {
    a->netns = true;
    return 0;
  }
  return bad_usage(a->cmd, "unknown option '%s'", opt);
}

/* Split a subcommand's arguments into options and positionals.  For `run`,
 * everything after "--" (or from the first non-option) is the command. */
static int parse_args(struct args *a, int argc, char **argv) {
  bool run = strcmp(a->cmd, "run") == 0, only_pos = false;
  a->pos = calloc((size_t)argc + 1, sizeof(*a->pos));
  if (!a->pos) {
    perror("simverbs");
    return 1;
  }
  for (int i = 0; i < argc; i++) {
    char *s = argv[i];
    int rc;
    if (!only_pos && strcmp(s, "--") == 0) {
      if (run) {
        a->exec = argv + i + 1;
        return 0;
      }
      only_pos = true;
      continue;
    }
    if (only_pos || s[0] != '-' || s[1] == '\0' || is_number_like(s)) {
      if (run) {
        a->exec = argv + i;
        return 0;
      }
      a->pos[a->npos++] = s;
      continue;
    }
    if ((rc = parse_one_opt(a, argc, argv, &i)) != 0) return rc;
  }
  return 0;
}

/* Fabric and host names become file names: keep to a safe charset. */
static bool name_ok(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n >= SV_NAME_LEN || s[0] == '.' || s[0] == '-') return false;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '.' ||
          s[i] == '_' || s[i] == '-'))
      return false;
  return true;
}

/* --fabric, else $SIMVERBS_FABRIC, else `fallback` (NULL: "default"). */
static const char *fabric_name(const struct args *a, const char *fallback) {
  const char *env = getenv("SIMVERBS_FABRIC");
  const char *name = a->fabric ? a->fabric : env && *env ? env : fallback ? fallback : "default";
  if (name_ok(name)) return name;
  fprintf(stderr,
          "simverbs %s: fabric name '%s'%s is invalid: use 1 to %d letters, digits, '.', '_' or "
          "'-', not starting with '.' or '-'\n",
          a->cmd, name,
          a->fabric     ? ""
          : name == env ? " (from $SIMVERBS_FABRIC)"
                        : " (from the config file's fabric line)",
          SV_NAME_LEN - 1);
  return NULL;
}

/* Digits only: strtoull alone would take signs, blanks and a second "0x". */
static int parse_uint(const char *s, uint32_t max, int base, uint32_t *out) {
  const char *digits = base == 16 ? "0123456789abcdefABCDEF" : "0123456789";
  char *end;
  unsigned long long v;
  if (!*s || s[strspn(s, digits)] != '\0') return -1;
  errno = 0;
  v = strtoull(s, &end, base);
  if (errno || *end || v > max) return -1;
  *out = (uint32_t)v;
  return 0;
}

/* ---- attaching ---- */

static struct sv_fabric *open_fabric(const char *cmd, const char *name) {
  char path[PATH_MAX];
  struct sv_fabric *f;
  sv_fabric_path(name, path, sizeof(path));
  f = sv_fabric_attach(name);
  if (!f) {
    if (errno == ENOENT)
      fprintf(stderr, "simverbs %s: fabric '%s' is not up (no %s): start it with `simverbs up <config> --fabric %s`\n",
              cmd, name, path, name);
    else if (errno == EPROTO)
      fprintf(stderr, "simverbs %s: %s was made by another simverbs version: run `simverbs up` again\n", cmd, path);
    else
      fprintf(stderr, "simverbs %s: cannot map %s: %s\n", cmd, path, strerror(errno));
    return NULL;
  }
  if (!__atomic_load_n(&f->ready, __ATOMIC_ACQUIRE)) {
    fprintf(stderr, "simverbs %s: fabric '%s' is not ready (an `up` is running or failed): run `simverbs up` again\n",
            cmd, name);
    sv_fabric_detach(f);
    return NULL;
  }
  return f;
}

static void list_hosts(struct sv_fabric *f, FILE *out) {
  for (uint32_t h = 0; h < f->nhosts; h++) fprintf(out, "%s%s", h ? ", " : "", f->hosts[h].name);
}

static void list_nics(struct sv_fabric *f, int host, FILE *out) {
  bool first = true;
  for (uint32_t d = 0; d < f->ndevs; d++)
    if (f->devs[d].in_use && (int)f->devs[d].host == host) {
      fprintf(out, "%s%s", first ? "" : ", ", f->devs[d].name);
      first = false;
    }
  if (first) fputs("none", out);
}

/* sv_parse_target only says no; work out which part was wrong. */
static void explain_target(struct sv_fabric *f, const char *cmd, const char *spec, bool with_port) {
  char buf[3 * SV_NAME_LEN];
  const char *shape = with_port ? "HOST:NIC[:PORT], e.g. a:mlx5_0:1" : "HOST:NIC (no port), e.g. a:mlx5_0";
  char *nic, *port;
  int h, d;
  if (snprintf(buf, sizeof(buf), "%s", spec) >= (int)sizeof(buf)) {
    fprintf(stderr, "simverbs %s: target is too long: names have at most %d characters; use %s\n", cmd, SV_NAME_LEN - 1,
            shape);
    return;
  }
  if (!(nic = strchr(buf, ':'))) {
    fprintf(stderr, "simverbs %s: target '%s' is malformed: use %s\n", cmd, spec, shape);
    return;
  }
  *nic++ = '\0';
  if ((port = strchr(nic, ':'))) *port++ = '\0';
  if ((h = sv_host_index(f, buf)) < 0) {
    fprintf(stderr, "simverbs %s: fabric '%s' has no host '%s': its hosts are ", cmd, f->name, buf);
    list_hosts(f, stderr);
  } else if ((d = sv_device_index(f, (uint32_t)h, nic)) < 0) {
    fprintf(stderr, "simverbs %s: host '%s' has no nic '%s': its nics are ", cmd, buf, nic);
    list_nics(f, h, stderr);
  } else if (!with_port) {
    fprintf(stderr, "simverbs %s: '%s' names a port; this fault applies to a whole nic: use %s", cmd, spec, shape);
  } else {
    fprintf(stderr, "simverbs %s: port '%s' of %s:%s is invalid: it has port%s 1%s", cmd, port, buf, nic,
            f->devs[d].nports > 1 ? "s" : "", f->devs[d].nports > 1 ? " and 2" : "");
  }
  fputc('\n', stderr);
}

static int resolve_target(struct sv_fabric *f, const char *cmd, const char *spec, bool with_port, int *dev, int *port) {
  if (sv_parse_target(f, spec, dev, with_port ? port : NULL) == 0) return 0;
  explain_target(f, cmd, spec, with_port);
  return -1;
}

/* The ports a->pos[0] names, HOST:NIC[:PORT] joined by commas, at most
 * MAX_TARGETS: 0, or the exit status after saying what was wrong. */
#define MAX_TARGETS 16
static int resolve_targets(struct args *a, struct sv_fabric *f, int *dev, int *port, int *n) {
  char targets[512];
  *n = 0;
  if (snprintf(targets, sizeof(targets), "%s", a->pos[0]) >= (int)sizeof(targets))
    return bad_usage(a->cmd, "the target list is too long");
  char *save = NULL;
  for (char *t = strtok_r(targets, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    if (*n == MAX_TARGETS) return bad_usage(a->cmd, "at most %d ports at once", MAX_TARGETS);
    if (resolve_target(f, a->cmd, t, true, &dev[*n], &port[*n]) != 0) return 1;
    (*n)++;
  }
  if (*n == 0) return bad_usage(a->cmd, "expected a port: HOST:NIC[:PORT], or several joined by commas");
  return 0;
}

/* ---- up ---- */

/* The name a config file declares with `fabric <name>`, if any.  Only a
 * peek: sv_config_load checks the file properly. */
static void declared_fabric(const char *path, char *out, size_t len) {
  FILE *in = fopen(path, "re");
  char line[1024], *save = NULL;
  out[0] = '\0';
  if (!in) return;
  while (!out[0] && fgets(line, sizeof(line), in)) {
    char *hash = strchr(line, '#'), *w1, *w2;
    if (hash) *hash = '\0';
    w1 = strtok_r(line, " \t\r\n", &save);
    w2 = w1 ? strtok_r(NULL, " \t\r\n", &save) : NULL;
    if (w1 && w2 && strcmp(w1, "fabric") == 0) snprintf(out, len, "%s", w2);
  }
  fclose(in);
}

static void print_summary(struct sv_fabric *f) {
  uint32_t nports = 0;
  for (uint32_t d = 0; d < f->ndevs; d++) nports += f->devs[d].nports;
  printf("fabric '%s' is up: %u host%s, %u nic%s, %u port%s\n", f->name, f->nhosts, f->nhosts == 1 ? "" : "s", f->ndevs,
         f->ndevs == 1 ? "" : "s", nports, nports == 1 ? "" : "s");
  for (uint32_t h = 0; h < f->nhosts; h++) {
    printf("  host %s\n", f->hosts[h].name);
    for (uint32_t d = 0; d < f->ndevs; d++) {
      const struct sv_device *dv = &f->devs[d];
      const struct sv_port *p = &dv->ports[0];
      if (dv->host != h) continue;
      printf("    %-10s %-4s %3u Gb/s  %u port%s  pci %s  numa %d", dv->name,
             p->link_layer == IBV_LINK_LAYER_INFINIBAND ? "IB" : "RoCE", p->rate_gbps, dv->nports,
             dv->nports == 1 ? " " : "s", dv->pci, (int)dv->numa_node);
      for (uint32_t i = 0; i < dv->nports; i++)
        if (dv->ports[i].link_layer == IBV_LINK_LAYER_INFINIBAND)
          printf("  lid %u%s%s", dv->ports[i].lid, f->netns ? " " : "", f->netns ? dv->ports[i].netdev : "");
        else
          printf("  %s %u.%u.%u.%u", dv->ports[i].netdev, dv->ports[i].ipv4 >> 24, (dv->ports[i].ipv4 >> 16) & 0xff,
                 (dv->ports[i].ipv4 >> 8) & 0xff, dv->ports[i].ipv4 & 0xff);
      putchar('\n');
    }
  }
  printf("sysfs trees under %s\n", f->run_dir);
}

/* Where each host lives on a netns fabric, and how to pull a cable. */
static void print_netns(struct sv_fabric *f, pid_t watcher, int down) {
  char ns[SV_NETNS_NAME_MAX];
  uint32_t ip;
  sv_netns_switch_ns(f->name, ns, sizeof(ns));
  printf("network namespaces: switch %s (bridges " SV_NETNS_MGMT_BRIDGE ", rail<nic>p<port>)\n", ns);
  for (uint32_t h = 0; h < f->nhosts; h++) {
    sv_netns_host_ns(f->name, f->hosts[h].name, ns, sizeof(ns));
    ip = sv_netns_mgmt_ipv4(h);
    printf("  host %-12s %s  " SV_NETNS_MGMT_IF " %u.%u.%u.%u\n", f->hosts[h].name, ns, ip >> 24, (ip >> 16) & 0xff,
           (ip >> 8) & 0xff, ip & 0xff);
  }
  if (watcher > 0)
    printf("link watcher: pid %d, log %s/watch.log%s\n", (int)watcher, f->run_dir,
           down > 0 ? "  (some ports start DOWN: see the log)" : "");
  for (uint32_t d = 0; d < f->ndevs; d++)
    if (f->devs[d].in_use && f->devs[d].nports) {
      sv_netns_host_ns(f->name, f->hosts[f->devs[d].host].name, ns, sizeof(ns));
      printf("pull a cable: ip netns exec %s ip link set %s down    # %s:%s:1\n", ns, f->devs[d].ports[0].netdev,
             f->hosts[f->devs[d].host].name, f->devs[d].name);
      break;
    }
}

/* Build the new fabric under a temporary name and rename it into place only
 * once it is complete: a bad config leaves the running fabric alone, and no
 * process can attach to a half-built one. */
static int cmd_up(struct args *a) {
  char declared[SV_NAME_LEN], tmp_name[SV_NAME_LEN + 32], tmp_path[PATH_MAX], path[PATH_MAX];
  const char *name;
  struct sv_fabric *f, *old;
  pid_t watcher = 0;
  int down = 0;
  if (a->npos != 1)
    return a->npos ? bad_usage(a->cmd, "expected one config file, got extra argument '%s'", a->pos[1])
                   : bad_usage(a->cmd, "missing the config file");
  declared_fabric(a->pos[0], declared, sizeof(declared));
  if (!(name = fabric_name(a, declared[0] ? declared : NULL))) return EXIT_USAGE;
  if (access(a->pos[0], R_OK) != 0) {
    fprintf(stderr, "%s: cannot read the config file: %s\n", a->pos[0], strerror(errno));
    return 1;
  }
  snprintf(tmp_name, sizeof(tmp_name), "%s.up-%ld", name, (long)getpid());
  sv_fabric_path(tmp_name, tmp_path, sizeof(tmp_path));
  sv_fabric_path(name, path, sizeof(path));
  if (!(f = sv_fabric_create(tmp_name))) {
    fprintf(stderr, "simverbs up: cannot create %s: %s\n", tmp_path, strerror(errno));
    return 1;
  }
  /* The segment was made under the temporary name: give it its real one.
   * Names are at most SV_NAME_LEN - 1 characters, so neither truncates. */
  if (snprintf(f->name, sizeof(f->name), "%s", name) >= (int)sizeof(f->name) ||
      snprintf(f->run_dir, sizeof(f->run_dir), "%s.d", path) >= (int)sizeof(f->run_dir)) {
    fprintf(stderr, "simverbs up: fabric name '%s' is too long\n", name);
    goto fail_tmp;
  }
  f->netns = a->netns; /* --netns: on whatever the file says */
  if (sv_config_load(f, a->pos[0]) != 0) goto fail_tmp;
  if (f->netns && geteuid() != 0) {
    fprintf(stderr,
            "simverbs up: netns on needs root: creating network namespaces, veths and bridges takes "
            "CAP_SYS_ADMIN and CAP_NET_ADMIN\n");
    goto fail_tmp;
  }
  /* The old fabric: its watcher and namespaces (and those a crashed `up`
   * left), then its segment and sysfs trees, if any. */
  old = sv_fabric_attach(name); /* NULL when there is none: the ledger still counts */
  sv_netns_teardown(name, old, false);
  sv_fabric_detach(old);
  sv_fabric_destroy(name);
  if (sv_sysfs_create(f) != 0) goto fail_sysfs;
  if (f->netns && sv_netns_create(f) != 0) goto fail_sysfs;
  __atomic_store_n(&f->ready, 1, __ATOMIC_RELEASE);
  if (rename(tmp_path, path) != 0) {
    fprintf(stderr, "simverbs up: cannot move %s to %s: %s\n", tmp_path, path, strerror(errno));
    goto fail_sysfs;
  }
  /* The watcher attaches by name: only now can it find the fabric. */
  if (f->netns && (down = sv_watch_start(f, &watcher)) < 0) {
    sv_netns_teardown(name, f, false);
    sv_fabric_detach(f);
    sv_fabric_destroy(name);
    fprintf(stderr, "simverbs up: fabric '%s' was not brought up\n", name);
    return 1;
  }
  print_summary(f);
  if (f->netns) print_netns(f, watcher, down);
  printf("next: simverbs run --host %s --fabric %s -- ibv_devinfo\n", f->hosts[0].name, f->name);
  sv_fabric_detach(f);
  return 0;
fail_sysfs:
  /* Only what the ledger lists: a namespace that made the creation fail
   * because it already existed belongs to someone else. */
  sv_netns_teardown(name, NULL, false);
  sv_fabric_destroy(name); /* removes the half-written run directory */
fail_tmp:
  sv_fabric_detach(f);
  sv_fabric_destroy(tmp_name);
  fprintf(stderr, "simverbs up: fabric '%s' was not brought up%s\n", name,
          access(path, F_OK) == 0 ? "; the one already up is unchanged" : "");
  return 1;
}

/* ---- down ---- */

/* Segments of `up`s that died before renaming theirs into place:
 * /dev/shm/simverbs-<name>.up-<pid>, with no such process any more, and
 * holding fabric <name> (not a fabric that happens to be named so). */
static bool stale_tmp(const char *name, const char *file, size_t prefix_len) {
  const char *pid = file + prefix_len;
  struct sv_fabric *t;
  bool ours;
  if (!*pid || pid[strspn(pid, "0123456789")] || kill((pid_t)atoi(pid), 0) == 0 || errno != ESRCH) return false;
  if (!(t = sv_fabric_attach(file + strlen("simverbs-"))))
    return errno == EPROTO; /* the shape of ours, from another version */
  ours = strcmp(t->name, name) == 0;
  sv_fabric_detach(t);
  return ours;
}

static int remove_stale_tmp(const char *name) {
  char prefix[SV_NAME_LEN + 32], path[PATH_MAX];
  struct dirent *e;
  int n = 0;
  DIR *dir = opendir("/dev/shm");
  if (!dir) return 0;
  snprintf(prefix, sizeof(prefix), "simverbs-%s.up-", name);
  while ((e = readdir(dir))) {
    if (strncmp(e->d_name, prefix, strlen(prefix)) != 0 || !stale_tmp(name, e->d_name, strlen(prefix))) continue;
    snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
    if (unlink(path) == 0) {
      printf("removed %s, left by an `up` that died\n", path);
      n++;
    }
  }
  closedir(dir);
  return n;
}

static int cmd_down(struct args *a) {
  const char *name;
  char path[PATH_MAX];
  struct sv_fabric *f;
  int live = 0, removed, stale;
  bool netns = false;
  if (a->npos) return bad_usage(a->cmd, "unexpected argument '%s'", a->pos[0]);
  if (!(name = fabric_name(a, NULL))) return EXIT_USAGE;
  sv_fabric_path(name, path, sizeof(path));
  if ((f = sv_fabric_attach(name))) {
    sv_reap_dead(f);
    for (int i = 0; i < SV_MAX_PROCS; i++) live += atomic_load(&f->procs[i].in_use) != 0;
    netns = f->netns != 0;
  }
  /* The watcher and namespaces first: the ledger lives in the run directory. */
  removed = sv_netns_teardown(name, f, true);
  sv_fabric_detach(f);
  stale = remove_stale_tmp(name);
  if (sv_fabric_destroy(name) != 0) {
    if (errno == ENOENT && (removed > 0 || stale > 0)) {
      printf("fabric '%s' was not up: removed what an earlier `up` left behind\n", name);
      return 0;
    }
    if (errno == ENOENT)
      fprintf(stderr, "simverbs down: fabric '%s' is not up (no %s)\n", name, path);
    else
      fprintf(stderr, "simverbs down: cannot remove %s: %s\n", path, strerror(errno));
    return 1;
  }
  if (removed < 0) {
    fprintf(stderr, "simverbs down: fabric '%s' is down, but some of its namespaces could not be removed (above)\n",
            name);
    return 1;
  }
  printf("fabric '%s' is down\n", name);
  if (live)
    printf("note: %d process%s still had it open and keep%s running on the old copy until exit%s\n", live,
           live == 1 ? "" : "es", live == 1 ? "s" : "",
           netns ? " (their hosts' network namespaces live on, nameless, until then)" : "");
  return 0;
}

/* ---- run ---- */

/* The simulated library lives in lib/ next to this executable. */
static int library_dir(char *out, size_t len) {
  char exe[PATH_MAX], lib[PATH_MAX + 32];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  char *slash;
  if (n <= 0) {
    fprintf(stderr, "simverbs run: cannot find this executable (/proc/self/exe): %s\n", strerror(errno));
    return -1;
  }
  exe[n] = '\0';
  if (!(slash = strrchr(exe, '/'))) return -1;
  *slash = '\0';
  if (snprintf(out, len, "%s/lib", exe) >= (int)len) return -1;
  snprintf(lib, sizeof(lib), "%s/" LIB_NAME, out);
  if (access(lib, R_OK) != 0) {
    fprintf(stderr, "simverbs run: the simulated library %s is missing (%s): build the simverbs_ibverbs target\n", lib,
            strerror(errno));
    return -1;
  }
  return 0;
}

static int set_env(const char *libdir, const char *fabric, const char *host) {
  const char *old = getenv("LD_LIBRARY_PATH");
  char *ld;
  int rc;
  if (asprintf(&ld, "%s%s%s", libdir, old && *old ? ":" : "", old ? old : "") < 0) return -1;
  rc = setenv("LD_LIBRARY_PATH", ld, 1) || setenv("SIMVERBS_FABRIC", fabric, 1) || setenv("SIMVERBS_HOST", host, 1);
  free(ld);
  return rc ? -1 : 0;
}

static int cmd_run(struct args *a) {
  char libdir[PATH_MAX], sysroot[PATH_MAX], why[PATH_MAX + 256];
  const char *name;
  struct sv_fabric *f;
  int h, view = 0;
  if (!a->host) return bad_usage(a->cmd, "missing --host HOST");
  if (!a->exec || !a->exec[0]) return bad_usage(a->cmd, "missing the command to run after --");
  if (!(name = fabric_name(a, NULL))) return EXIT_USAGE;
  if (!(f = open_fabric(a->cmd, name))) return 1;
  h = sv_host_index(f, a->host);
  if (h < 0) {
    fprintf(stderr, "simverbs run: fabric '%s' has no host '%s': its hosts are ", name, a->host);
    list_hosts(f, stderr);
    fputc('\n', stderr);
  }
  if (h >= 0 && f->netns && sv_netns_enter(f, (uint32_t)h, "simverbs run") != 0) h = -1;
  /* After the netns /sys is mounted: the view is built on top of it. */
  if (h >= 0) {
    sv_sysfs_root(f, (uint32_t)h, sysroot, sizeof(sysroot));
    view = sv_sysview_enter(sysroot, f->netns, why, sizeof(why));
  }
  sv_fabric_detach(f);
  if (view == -2) {
    fprintf(stderr,
            "simverbs run: cannot show host %s's sysfs at /sys: could not %s. What was mounted could not "
            "all be removed either, so '%s' is not run\n",
            a->host, why, a->exec[0]);
    return 1;
  }
  /* The simulated library never needs the view, so the program can still
   * run; only what reads /sys by absolute path misses it. */
  if (view == -1)
    fprintf(stderr,
            "simverbs run: warning: cannot show host %s's sysfs at /sys: could not %s. Programs find it "
            "only through ibv_get_sysfs_path() and the devices' ibdev_path (%s)\n",
            a->host, why, sysroot);
  if (h < 0 || library_dir(libdir, sizeof(libdir)) != 0) return 1;
  if (set_env(libdir, name, a->host) != 0) {
    perror("simverbs run: setting the environment");
    return 1;
  }
  execvp(a->exec[0], a->exec);
  fprintf(stderr, "simverbs run: cannot run '%s': %s\n", a->exec[0], strerror(errno));
  return errno == ENOENT ? 127 : 126; /* what shells return */
}

/* ---- link ---- */

/* A netns fabric: the interface is the cable.  Set it, then wait (bounded)
 * for the watcher to move the port, so that the command still returns with
 * the port in the state asked for. */
static int link_netns(struct sv_fabric *f, int dev, int port, int up, int was_up) {
  const struct sv_device *d = &f->devs[dev];
  const char *host = f->hosts[d->host].name, *ifname = d->ports[port - 1].netdev;
  char ns[SV_NETNS_NAME_MAX], sw[16];
  struct timespec tick = {0, 5 * 1000 * 1000};
  uint64_t deadline = sv_now_ns() + LINK_FOLLOW_MS * 1000000ull;
  sv_netns_host_ns(f->name, host, ns, sizeof(ns));
  if (sv_netns_set_link(f, dev, port, up) != 0) {
    fprintf(stderr, "simverbs link: cannot set %s %s in %s (`ip -n %s link set %s %s` failed)\n", ifname,
            up ? "up" : "down", ns, ns, ifname, up ? "up" : "down");
    return 1;
  }
  while ((atomic_load(&d->ports[port - 1].state) == IBV_PORT_ACTIVE) != (up != 0)) {
    if (sv_now_ns() >= deadline) {
      sv_netns_switch_port(d->host, sv_netns_rail(f, dev), (uint32_t)port, sw, sizeof(sw));
      fprintf(stderr,
              "simverbs link: %s is %s in %s, but %s:%s:%d did not follow within %d ms: is the link watcher "
              "running (`simverbs status`)?\n",
              ifname, up ? "up" : "down", ns, host, d->name, port, LINK_FOLLOW_MS);
      if (up) {
        sv_netns_switch_ns(f->name, ns, sizeof(ns));
        fprintf(stderr,
                "  A port also stays down while the switch side of its cable is down: ip -n %s link set %s up\n", ns,
                sw);
      }
      return 1;
    }
    nanosleep(&tick, NULL);
  }
  printf("%s:%s:%d %s (%s in %s)%s\n", host, d->name, port, up ? "up" : "down", ifname, ns,
         was_up == up ? " (it already was: no event raised)" : "");
  return 0;
}

static int cmd_link(struct args *a) {
  const char *name;
  struct sv_fabric *f;
  int dev[MAX_TARGETS], port[MAX_TARGETS], n, up, rc = 0;
  if (a->npos != 2)
    return bad_usage(a->cmd, "expected HOST:NIC[:PORT] then down or up, got %d argument%s", a->npos,
                     a->npos == 1 ? "" : "s");
  if (strcmp(a->pos[1], "down") != 0 && strcmp(a->pos[1], "up") != 0)
    return bad_usage(a->cmd, "unknown link state '%s': use down or up", a->pos[1]);
  up = strcmp(a->pos[1], "up") == 0;
  if (!(name = fabric_name(a, NULL))) return EXIT_USAGE;
  if (!(f = open_fabric(a->cmd, name))) return 1;
  int bad = resolve_targets(a, f, dev, port, &n);
  if (bad != 0) {
    sv_fabric_detach(f);
    return bad;
  }
  int was_up[MAX_TARGETS];
  for (int i = 0; i < n; i++) was_up[i] = atomic_load(&f->devs[dev[i]].ports[port[i] - 1].state) == IBV_PORT_ACTIVE;
  if (f->netns) {
    for (int i = 0; i < n && rc == 0; i++) rc = link_netns(f, dev[i], port[i], up, was_up[i]);
    sv_fabric_detach(f);
    return rc;
  }
  /* Every port flips before any line is printed: ports that fail together
   * (a switch, a shared cable) do so within microseconds.  A state flips
   * first thing in its call: a benchmark times a pull from here, not from
   * this tool's start (milliseconds on a busy host). */
  struct timespec at[MAX_TARGETS];
  int failed[MAX_TARGETS];
  for (int i = 0; i < n; i++) {
    clock_gettime(CLOCK_REALTIME, &at[i]);
    failed[i] = sv_port_set_state(f, dev[i], port[i], up) != 0;
  }
  for (int i = 0; i < n; i++) {
    const char *host = f->hosts[f->devs[dev[i]].host].name, *nic = f->devs[dev[i]].name;
    if (failed[i]) {
      fprintf(stderr, "simverbs link: %s:%s:%d is %s but its sysfs files could not be updated\n", host, nic, port[i],
              up ? "up" : "down");
      rc = 1;
    } else {
      printf("%s:%s:%d %s at %lld.%06ld%s\n", host, nic, port[i], up ? "up" : "down", (long long)at[i].tv_sec,
             at[i].tv_nsec / 1000, was_up[i] == up ? " (it already was: no event raised)" : "");
    }
  }
  sv_fabric_detach(f);
  return rc;
}

/* ---- fault ---- */

static int fault_qp(struct args *a, struct sv_fabric *f) {
  const char *s = a->pos[1];
  bool hex = s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
  uint32_t qpn;
  if (a->npos != 3 || strcmp(a->pos[2], "fatal") != 0) return bad_usage(a->cmd, "expected: qp QPN fatal");
  if (parse_uint(hex ? s + 2 : s, 0xffffff, hex ? 16 : 10, &qpn) != 0)
    return bad_usage(a->cmd, "QP number '%s' is invalid: use decimal or 0x hex, at most 0xffffff", s);
  if (sv_qp_inject_fatal(f, qpn) != 0) {
    fprintf(stderr,
            "simverbs fault: no live QP 0x%06x (%u): it may have been destroyed; `simverbs status` lists "
            "the processes that own QPs\n",
            qpn, qpn);
    return 1;
  }
  printf("QP 0x%06x (%u): fatal error injected\n", qpn, qpn);
  return 0;
}

static int fault_device(struct args *a, struct sv_fabric *f) {
  bool fatal = strcmp(a->pos[1], "device-fatal") == 0;
  int dev;
  if (a->npos != 2) return bad_usage(a->cmd, "%s takes no value", a->pos[1]);
  if (resolve_target(f, a->cmd, a->pos[0], false, &dev, NULL) != 0) return 1;
  sv_device_set_fatal(f, dev, fatal);
  printf("%s:%s: %s\n", f->hosts[f->devs[dev].host].name, f->devs[dev].name,
         fatal ? "device fatal error injected" : "recovered (new opens succeed again)");
  return 0;
}

static int fault_value(struct args *a, bool required, uint32_t dflt, uint32_t max, uint32_t *out);

/* create-qp-fail [N] or rtr-fail [N] on one or more NICs (a port named
 * picks its NIC). */
static int fault_device_count(struct args *a, struct sv_fabric *f) {
  int dev[MAX_TARGETS], port[MAX_TARGETS], n = 0, rc, rtr = strcmp(a->pos[1], "rtr-fail") == 0;
  uint32_t v;
  if ((rc = fault_value(a, false, 1, MAX_COUNT, &v)) != 0) return rc;
  if ((rc = resolve_targets(a, f, dev, port, &n)) != 0) return rc;
  for (int i = 0; i < n; i++) atomic_store(rtr ? &f->devs[dev[i]].rtr_fail : &f->devs[dev[i]].create_qp_fail, v);
  for (int i = 0; i < n; i++)
    printf("%s:%s: the next %u %s fail (%s)\n", f->hosts[f->devs[dev[i]].host].name, f->devs[dev[i]].name, v,
           rtr ? "ibv_modify_qp calls to RTR" : "ibv_create_qp calls", rtr ? "EINVAL" : "ENOMEM");
  return 0;
}

/* Parse the value of a port fault: `count` faults default to 1. */
static int fault_value(struct args *a, bool required, uint32_t dflt, uint32_t max, uint32_t *out) {
  if (a->npos > 3) return bad_usage(a->cmd, "unexpected argument '%s'", a->pos[3]);
  if (a->npos < 3) {
    if (required) return bad_usage(a->cmd, "%s needs a value", a->pos[1]);
    *out = dflt;
    return 0;
  }
  if (parse_uint(a->pos[2], max, 10, out) != 0) {
    fprintf(stderr, "simverbs fault: %s value '%s' is invalid: use a whole number 0 to %u\n", a->pos[1], a->pos[2],
            max);
    return EXIT_USAGE;
  }
  return 0;
}

/* "1", "0.05", "100": a percentage with up to 4 decimals, as parts per million. */
static int parse_ppm(const char *s, uint32_t *out) {
  uint32_t whole = 0, frac = 0, scale = 10000;
  const char *p = s;
  if (!isdigit((unsigned char)*p)) return -1;
  for (; isdigit((unsigned char)*p); p++)
    if ((whole = whole * 10 + (uint32_t)(*p - '0')) > 100) return -1;
  if (*p == '.') {
    if (!isdigit((unsigned char)*++p)) return -1;
    for (; isdigit((unsigned char)*p); p++) {
      if (scale == 1) return -1;
      scale /= 10;
      frac = frac * 10 + (uint32_t)(*p - '0');
    }
  }
  if (*p != '\0' || whole * 10000 + frac * scale > 1000000) return -1;
  *out = whole * 10000 + frac * scale;
  return 0;
}

static bool is_port_fault(const char *what) {
  static const char *const names[] = {"blackhole", "ack-loss", "partial-write",  "access-error", "delay",
                                      "rate",      "loss",     "recv-post-fail", "query-fail",   "clear"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (strcmp(what, names[i]) == 0) return true;
  return false;
}

static int fault_port_apply(struct args *a, struct sv_port *p) {
  const char *what = a->pos[1];
  uint32_t v;
  int rc;
  if (strcmp(what, "blackhole") == 0) {
    if (a->npos != 3 || (strcmp(a->pos[2], "on") != 0 && strcmp(a->pos[2], "off") != 0))
      return bad_usage(a->cmd, "blackhole takes on or off");
    atomic_store(&p->blackhole, strcmp(a->pos[2], "on") == 0);
  } else if (strcmp(what, "query-fail") == 0) {
    if (a->npos != 3 || (strcmp(a->pos[2], "on") != 0 && strcmp(a->pos[2], "off") != 0))
      return bad_usage(a->cmd, "query-fail takes on or off");
    atomic_store(&p->query_fail, strcmp(a->pos[2], "on") == 0);
  } else if (strcmp(what, "ack-loss") == 0 || strcmp(what, "partial-write") == 0 || strcmp(what, "access-error") == 0 ||
             strcmp(what, "recv-post-fail") == 0) {
    if ((rc = fault_value(a, false, 1, MAX_COUNT, &v)) != 0) return rc;
    atomic_store(strcmp(what, "ack-loss") == 0 ? &p->ack_loss
                 : what[0] == 'p'              ? &p->partial_write
                 : what[0] == 'r'              ? &p->recv_post_fail
                                               : &p->access_error,
                 v);
  } else if (strcmp(what, "delay") == 0) {
    if ((rc = fault_value(a, true, 0, MAX_DELAY_US, &v)) != 0) return rc;
    atomic_store(&p->delay_us, v);
  } else if (strcmp(what, "rate") == 0) {
    if ((rc = fault_value(a, true, 100, 100, &v)) != 0) return rc;
    if (v == 0) return bad_usage(a->cmd, "rate 0 would stop the port: use a percentage 1 to 100, or blackhole on");
    atomic_store(&p->rate_pct, v == 100 ? 0 : v);
  } else if (strcmp(what, "loss") == 0) {
    if (a->npos != 3 || parse_ppm(a->pos[2], &v) != 0)
      return bad_usage(a->cmd, "loss takes a percentage of packets, 0 to 100 with up to 4 decimals (e.g. 1 or 0.05)");
    atomic_store(&p->loss_ppm, v);
  } else { /* clear */
    if (a->npos != 2) return bad_usage(a->cmd, "clear takes no value");
    atomic_store(&p->blackhole, 0);
    atomic_store(&p->ack_loss, 0);
    atomic_store(&p->partial_write, 0);
    atomic_store(&p->access_error, 0);
    atomic_store(&p->recv_post_fail, 0);
    atomic_store(&p->query_fail, 0);
    atomic_store(&p->delay_us, 0);
    atomic_store(&p->rate_pct, 0);
    atomic_store(&p->loss_ppm, 0);
  }
  return 0;
}

/* One port fault on one or more ports (HOST:NIC[:PORT],HOST:NIC...): every
 * target is checked first, then the fault is set on all of them in one
 * pass, microseconds apart.  "Every port alike" must hold from the first
 * packet: set one command at a time, under load, the first port was faulty
 * half a second before the last, and a detector that compares ports rightly
 * saw the difference. */
static int fault_port(struct args *a, struct sv_fabric *f) {
  int dev[MAX_TARGETS], port[MAX_TARGETS], n = 0, rc;
  if (!is_port_fault(a->pos[1]))
    return bad_usage(
        a->cmd,
        "unknown fault '%s': use blackhole on|off, ack-loss [N], partial-write [N], access-error [N], delay US, "
        "rate PERCENT, loss PERCENT, recv-post-fail [N], query-fail on|off, clear, "
        "device-fatal or device-recover",
        a->pos[1]);
  if ((rc = resolve_targets(a, f, dev, port, &n)) != 0) return rc;
  for (int i = 0; i < n; i++)
    if ((rc = fault_port_apply(a, &f->devs[dev[i]].ports[port[i] - 1])) != 0) return rc;
  sv_wake_all(f); /* engines re-check the ports at once */
  for (int i = 0; i < n; i++) {
    struct sv_port *p = &f->devs[dev[i]].ports[port[i] - 1];
    uint32_t pct = atomic_load(&p->rate_pct), ppm = atomic_load(&p->loss_ppm);
    printf(
        "%s:%s:%d: blackhole %s, ack-loss %u, partial-write %u, access-error %u, delay %u us, rate %u%%, loss "
        "%u.%04u%%, recv-post-fail %u, query-fail %s\n",
        f->hosts[f->devs[dev[i]].host].name, f->devs[dev[i]].name, port[i], atomic_load(&p->blackhole) ? "on" : "off",
        atomic_load(&p->ack_loss), atomic_load(&p->partial_write), atomic_load(&p->access_error),
        atomic_load(&p->delay_us), pct ? pct : 100, ppm / 10000, ppm % 10000, atomic_load(&p->recv_post_fail),
        atomic_load(&p->query_fail) ? "on" : "off");
  }
  return 0;
}

static int cmd_fault(struct args *a) {
  const char *name;
  struct sv_fabric *f;
  int rc;
  if (a->npos < 2) return bad_usage(a->cmd, "expected a target and a fault");
  if (!(name = fabric_name(a, NULL))) return EXIT_USAGE;
  if (!(f = open_fabric(a->cmd, name))) return 1;
  if (strcmp(a->pos[0], "qp") == 0)
    rc = fault_qp(a, f);
  else if (strcmp(a->pos[1], "device-fatal") == 0 || strcmp(a->pos[1], "device-recover") == 0)
    rc = fault_device(a, f);
  else if (strcmp(a->pos[1], "create-qp-fail") == 0 || strcmp(a->pos[1], "rtr-fail") == 0)
    rc = fault_device_count(a, f);
  else
    rc = fault_port(a, f);
  sv_fabric_detach(f);
  return rc;
}

/* ---- status ---- */

static const char *ibv_qp_state_name(uint32_t s) {
  static const char *const names[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
  return s < sizeof(names) / sizeof(names[0]) ? names[s] : "?";
}

static void print_port(const struct sv_fabric *f, const struct sv_port *p, uint32_t port) {
  uint32_t bh = atomic_load(&p->blackhole), al = atomic_load(&p->ack_loss);
  uint32_t pw = atomic_load(&p->partial_write), dl = atomic_load(&p->delay_us), ae = atomic_load(&p->access_error);
  uint32_t pct = atomic_load(&p->rate_pct), ppm = atomic_load(&p->loss_ppm), rpf = atomic_load(&p->recv_post_fail);
  printf("      port %u  %-6s", port, atomic_load(&p->state) == IBV_PORT_ACTIVE ? "ACTIVE" : "DOWN");
  if (p->link_layer == IBV_LINK_LAYER_INFINIBAND && f->netns)
    printf("  lid %u  if %s", p->lid, p->netdev);
  else if (p->link_layer == IBV_LINK_LAYER_INFINIBAND)
    printf("  lid %u", p->lid);
  else
    printf("  %s %u.%u.%u.%u", p->netdev, p->ipv4 >> 24, (p->ipv4 >> 16) & 0xff, (p->ipv4 >> 8) & 0xff, p->ipv4 & 0xff);
  if (p->adaptive_routing) printf("  ar");
  printf("  tx %llu B %llu WRs  rx %llu B %llu WRs  faults:", (unsigned long long)atomic_load(&p->tx_bytes),
         (unsigned long long)atomic_load(&p->tx_wrs), (unsigned long long)atomic_load(&p->rx_bytes),
         (unsigned long long)atomic_load(&p->rx_wrs));
  if (!bh && !al && !pw && !dl && !ae && !pct && !ppm && !rpf) printf(" none");
  if (bh) printf(" blackhole");
  if (al) printf(" ack-loss %u", al);
  if (pw) printf(" partial-write %u", pw);
  if (ae) printf(" access-error %u", ae);
  if (dl) printf(" delay %u us", dl);
  if (pct) printf(" rate %u%%", pct);
  if (ppm) printf(" loss %u.%04u%%", ppm / 10000, ppm % 10000);
  if (rpf) printf(" recv-post-fail %u", rpf);
  putchar('\n');
  printf(
      "        counters: tx %llu packets  rx %llu packets  packet_seq_err %llu  out_of_sequence %llu  "
      "local_ack_timeout_err %llu  link_downed %u\n",
      (unsigned long long)atomic_load(&p->tx_packets), (unsigned long long)atomic_load(&p->rx_packets),
      (unsigned long long)atomic_load(&p->seq_err_naks), (unsigned long long)atomic_load(&p->out_of_sequence),
      (unsigned long long)atomic_load(&p->ack_timeouts), (unsigned)atomic_load(&p->link_downs));
}

static void print_devices(struct sv_fabric *f) {
  for (uint32_t h = 0; h < f->nhosts; h++) {
    printf("  host %s\n", f->hosts[h].name);
    for (uint32_t d = 0; d < f->ndevs; d++) {
      struct sv_device *dv = &f->devs[d];
      if (!dv->in_use || dv->host != h) continue;
      printf("    %-10s %-4s %3u Gb/s  pci %s  events %llu", dv->name,
             dv->ports[0].link_layer == IBV_LINK_LAYER_INFINIBAND ? "IB" : "RoCE", dv->ports[0].rate_gbps, dv->pci,
             (unsigned long long)atomic_load(&dv->event_seq));
      if (dv->ece) printf("  ece 0x%08x", dv->ece);
      printf("%s\n", atomic_load(&dv->fatal) ? "  DEVICE FATAL" : "");
      for (uint32_t p = 0; p < dv->nports && p < SV_MAX_PORTS; p++) print_port(f, &dv->ports[p], p + 1);
    }
  }
}

/* Objects per owning process, from the shared tables. */
struct obj_counts {
  int qps[SV_MAX_PROCS], cqs[SV_MAX_PROCS], mrs[SV_MAX_PROCS], mrs_ro[SV_MAX_PROCS];
  int qp_total, cq_total, mr_total;
};

static void count_one(int32_t owner, int *per, int *total) {
  (*total)++;
  if (owner >= 0 && owner < SV_MAX_PROCS) per[owner]++;
}

static void count_objects(struct sv_fabric *f, struct obj_counts *c) {
  memset(c, 0, sizeof(*c));
  for (int i = 0; i < SV_MAX_QPS; i++)
    if (atomic_load(&f->qps[i].in_use)) count_one(f->qps[i].owner, c->qps, &c->qp_total);
  for (int i = 0; i < SV_MAX_CQS; i++)
    if (atomic_load(&f->cqs[i].in_use)) count_one(f->cqs[i].owner, c->cqs, &c->cq_total);
  for (int i = 0; i < SV_MAX_MRS; i++)
    if (atomic_load(&f->mrs[i].in_use)) {
      count_one(f->mrs[i].owner, c->mrs, &c->mr_total);
      if ((f->mrs[i].access & IBV_ACCESS_RELAXED_ORDERING) && f->mrs[i].owner >= 0 && f->mrs[i].owner < SV_MAX_PROCS)
        c->mrs_ro[f->mrs[i].owner]++;
    }
}

/* The QPs of one process, with the QPN `simverbs fault qp` takes. */
static void print_qps(struct sv_fabric *f, int proc) {
  for (int q = 0; q < SV_MAX_QPS; q++) {
    const struct sv_qp *qp = &f->qps[q];
    const struct sv_device *d;
    if (!atomic_load(&qp->in_use) || qp->owner != proc || qp->dev >= SV_MAX_DEVS) continue;
    d = &f->devs[qp->dev];
    printf("    qp 0x%06x (%u)  %s:%s:%u  %s  sl %u", qp->qpn, qp->qpn,
           d->host < SV_MAX_HOSTS ? f->hosts[d->host].name : "?", d->name, qp->port,
           ibv_qp_state_name(atomic_load(&qp->state)), qp->ah.sl);
    if (qp->ah.is_global) printf("  tc %u", qp->ah.grh.traffic_class); /* RoCE, or a routed IB path */
    printf("  req %llu  inl %llu  ooo %llu", (unsigned long long)atomic_load(&qp->requests),
           (unsigned long long)atomic_load(&qp->inline_wrs), (unsigned long long)atomic_load(&qp->ooo_writes));
    if (d->ece) printf("  ece 0x%08x", qp->ece);
    enum ibv_qp_state st = atomic_load(&qp->state);
    if ((st == IBV_QPS_RTR || st == IBV_QPS_RTS) && qp->dest_qpn == qp->qpn)
      printf("  loopback"); /* connected to itself: NCCL's flush */
    putchar('\n');
  }
}

static void print_procs(struct sv_fabric *f) {
  struct obj_counts c;
  int live = 0;
  count_objects(f, &c);
  printf("processes:\n");
  for (int i = 0; i < SV_MAX_PROCS; i++) {
    struct sv_proc *p = &f->procs[i];
    if (!atomic_load(&p->in_use)) continue;
    live++;
    printf("  pid %-8d host %-12s %d QPs, %d CQs, %d MRs (%d relaxed-ordering)\n", (int)p->pid,
           p->host < f->nhosts ? f->hosts[p->host].name : "?", c.qps[i], c.cqs[i], c.mrs[i], c.mrs_ro[i]);
    print_qps(f, i);
  }
  if (!live) printf("  none\n");
  printf("objects: %d QPs, %d CQs, %d MRs\n", c.qp_total, c.cq_total, c.mr_total);
}

static void print_netns_status(struct sv_fabric *f) {
  char ns[SV_NETNS_NAME_MAX], path[PATH_MAX];
  pid_t watcher = sv_netns_watcher(f->name);
  sv_netns_switch_ns(f->name, ns, sizeof(ns));
  printf("  network namespaces: switch %s%s\n", ns, sv_netns_path(ns, path, sizeof(path)) ? "" : " (MISSING)");
  for (uint32_t h = 0; h < f->nhosts; h++) {
    uint32_t ip = sv_netns_mgmt_ipv4(h);
    sv_netns_host_ns(f->name, f->hosts[h].name, ns, sizeof(ns));
    printf("    host %-12s %s%s  " SV_NETNS_MGMT_IF " %u.%u.%u.%u\n", f->hosts[h].name, ns,
           sv_netns_path(ns, path, sizeof(path)) ? "" : " (MISSING)", ip >> 24, (ip >> 16) & 0xff, (ip >> 8) & 0xff,
           ip & 0xff);
  }
  if (watcher > 0)
    printf("  link watcher: pid %d, log %s/watch.log\n", (int)watcher, f->run_dir);
  else
    printf(
        "  link watcher: NOT RUNNING: ports no longer follow their interfaces (see %s/watch.log); bring the "
        "fabric up again\n",
        f->run_dir);
}

static int cmd_status(struct args *a) {
  const char *name;
  char path[PATH_MAX];
  struct sv_fabric *f;
  if (a->npos) return bad_usage(a->cmd, "unexpected argument '%s'", a->pos[0]);
  if (!(name = fabric_name(a, NULL))) return EXIT_USAGE;
  if (!(f = open_fabric(a->cmd, name))) return 1;
  sv_fabric_path(name, path, sizeof(path));
  sv_reap_dead(f); /* crashed processes would otherwise show as live */
  printf("fabric '%s'  segment %s  sysfs %s\n", f->name, path, f->run_dir);
  if (f->netns) print_netns_status(f);
  print_devices(f);
  print_procs(f);
  sv_fabric_detach(f);
  return 0;
}

/* ---- host-addr, watch ---- */

static int cmd_host_addr(struct args *a) {
  const char *name;
  struct sv_fabric *f;
  uint32_t ip = 0x7f000001u; /* without namespaces every host shares the loopback */
  int h;
  if (a->npos != 1)
    return a->npos ? bad_usage(a->cmd, "expected one host, got extra argument '%s'", a->pos[1])
                   : bad_usage(a->cmd, "missing the host");
  if (!(name = fabric_name(a, NULL))) return EXIT_USAGE;
  if (!(f = open_fabric(a->cmd, name))) return 1;
  if ((h = sv_host_index(f, a->pos[0])) < 0) {
    fprintf(stderr, "simverbs host-addr: fabric '%s' has no host '%s': its hosts are ", name, a->pos[0]);
    list_hosts(f, stderr);
    fputc('\n', stderr);
  } else if (f->netns) {
    ip = sv_netns_mgmt_ipv4((uint32_t)h);
  }
  sv_fabric_detach(f);
  if (h < 0) return 1;
  printf("%u.%u.%u.%u\n", ip >> 24, (ip >> 16) & 0xff, (ip >> 8) & 0xff, ip & 0xff);
  return 0;
}

static int cmd_watch(struct args *a) {
  const char *name;
  if (a->npos) return bad_usage(a->cmd, "unexpected argument '%s'", a->pos[0]);
  if (!(name = fabric_name(a, NULL))) return EXIT_USAGE;
  return sv_watch_main(name);
}

/* ---- main ---- */

static int dispatch(struct args *a) {
  static const struct {
    const char *name;
    int (*fn)(struct args *);
  } cmds[] = {{"up", cmd_up},
              {"down", cmd_down},
              {"run", cmd_run},
              {"link", cmd_link},
              {"fault", cmd_fault},
              {"status", cmd_status},
              {"host-addr", cmd_host_addr},
              {"watch", cmd_watch}};
  for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
    if (strcmp(cmds[i].name, a->cmd) == 0) {
      if (a->help) {
        usage_cmd(a->cmd, stdout);
        return 0;
      }
      return cmds[i].fn(a);
    }
  return -1;
}

int main(int argc, char **argv) {
  struct args a = {0};
  int first = 1, rc;
  /* Options before the subcommand: --help and --fabric. */
  while (first < argc && argv[first][0] == '-') {
    int r;
    if (strcmp(argv[first], "--help") == 0 || strcmp(argv[first], "-h") == 0) {
      usage_all(stdout);
      return 0;
    }
    a.cmd = "";
    if ((r = opt_value(argv, argc, &first, "--fabric", &a.fabric)) <= 0) {
      fprintf(stderr, r < 0 ? "simverbs: --fabric needs a fabric name\n" : "simverbs: unknown option '%s'\n",
              argv[first]);
      usage_all(stderr);
      return EXIT_USAGE;
    }
    first++;
  }
  if (first >= argc) {
    usage_all(stderr);
    return EXIT_USAGE;
  }
  a.cmd = argv[first];
  if (strcmp(a.cmd, "help") == 0) {
    if (first + 1 < argc)
      usage_cmd(argv[first + 1], stdout);
    else
      usage_all(stdout);
    return 0;
  }
  if (!help_of(a.cmd)) {
    fprintf(stderr, "simverbs: unknown command '%s': use up, down, run, link, fault, status, host-addr or watch\n",
            a.cmd);
    return EXIT_USAGE;
  }
  rc = parse_args(&a, argc - first - 1, argv + first + 1);
  if (rc == 0) rc = dispatch(&a);
  free(a.pos);
  return rc;
}
