/*
 * netns.c: namespace-backed links for `simverbs up`, `down`, `run` and
 * `link` (see netns.h for the layout, docs/SIMVERBS.md for examples).
 *
 * Namespaces, bridges, veths and addresses are made with iproute2's `ip`,
 * fed one batch per namespace: named namespaces are a convention of
 * iproute2 (a bind mount under /run/netns that `ip netns exec` and
 * `ip -n` find), and keeping to its own tool keeps the two in agreement.
 * Every veth is created inside the switch namespace with its peer placed
 * straight into the host namespace, so nothing ever appears in the
 * namespace `simverbs` runs in and no name can clash with its interfaces.
 *
 * Each namespace is written to the ledger before it is created, and the
 * ledger lives in the run directory, which outlives a crashed `up`: `down`
 * and the next `up` read it and remove whatever is listed.
 */
#include "netns.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LEDGER_FILE "netns.state"
#define LEDGER_MAX_NS 64   /* distinct namespaces one ledger may name */
#define WATCH_TERM_MS 3000 /* SIGTERM, then this long before SIGKILL */
#define WATCH_KILL_MS 2000

/* ---- names ---- */

int sv_netns_host_ns(const char *fabric, const char *host, char *out, size_t len) {
  int n = snprintf(out, len, "sv-%s-%s", fabric, host);
  return n < 0 || (size_t)n >= len ? -1 : 0;
}

int sv_netns_switch_ns(const char *fabric, char *out, size_t len) {
  int n = snprintf(out, len, "sv-%s-sw", fabric);
  return n < 0 || (size_t)n >= len ? -1 : 0;
}

uint32_t sv_netns_mgmt_ipv4(uint32_t host) { return SV_NETNS_MGMT_NET | ((host + 1) & 0xffu); }

uint32_t sv_netns_rail(const struct sv_fabric *f, int dev) {
  uint32_t rail = 0;
  for (int d = 0; d < dev && d < SV_MAX_DEVS; d++)
    if (f->devs[d].in_use && f->devs[d].host == f->devs[dev].host) rail++;
  return rail;
}

void sv_netns_switch_port(uint32_t host, uint32_t rail, uint32_t port, char *out, size_t len) {
  snprintf(out, len, "h%ud%up%u", host, rail, port); /* at most "h15d63p2" */
}

void sv_netns_rail_bridge(uint32_t rail, uint32_t port, char *out, size_t len) {
  snprintf(out, len, "rail%up%u", rail, port);
}

/* iproute2 keeps named namespaces in /var/run/netns, which Debian links to
 * /run/netns; look in both in case a system keeps them apart. */
bool sv_netns_path(const char *ns, char *out, size_t len) {
  static const char *const dirs[] = {"/run/netns", "/var/run/netns"};
  for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
    snprintf(out, len, "%s/%s", dirs[i], ns);
    if (access(out, F_OK) == 0) return true;
  }
  snprintf(out, len, "%s/%s", dirs[0], ns);
  return false;
}

/* A ledger may have been edited: only ever delete a namespace whose name
 * this fabric could have made. */
static bool ns_name_ours(const char *fabric, const char *ns) {
  size_t n = strlen(fabric);
  if (strncmp(ns, "sv-", 3) != 0 || strncmp(ns + 3, fabric, n) != 0 || ns[3 + n] != '-' || !ns[4 + n]) return false;
  for (const char *s = ns; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '.' || *s == '_' ||
          *s == '-'))
      return false;
  return true;
}

/* ---- running ip ---- */

int sv_netns_ip(const char *const *argv, const char *input) {
  static const char *const fallbacks[] = {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"};
  struct sigaction ign = {.sa_handler = SIG_IGN}, old_pipe;
  int in[2] = {-1, -1}, status, rc = 0;
  pid_t pid;
  if (input && pipe2(in, O_CLOEXEC) != 0) return -1;
  pid = fork();
  if (pid < 0) {
    if (input) close(in[0]), close(in[1]);
    return -1;
  }
  if (pid == 0) {
    int fd = input ? in[0] : open("/dev/null", O_RDONLY);
    if (fd < 0 || dup2(fd, STDIN_FILENO) < 0) _exit(126);
    execvp("ip", (char *const *)argv);
    for (size_t i = 0; i < sizeof(fallbacks) / sizeof(fallbacks[0]); i++) execv(fallbacks[i], (char *const *)argv);
    fprintf(stderr, "simverbs: cannot run `ip`: %s: install iproute2 (namespace-backed links need it)\n",
            strerror(errno));
    _exit(127);
  }
  if (input) {
    size_t left = strlen(input);
    close(in[0]);
    sigaction(SIGPIPE, &ign, &old_pipe); /* ip may stop reading at a failed command */
    while (left) {
      ssize_t n = write(in[1], input, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break; /* ip's exit status tells what went wrong */
      input += n;
      left -= (size_t)n;
    }
    close(in[1]);
    sigaction(SIGPIPE, &old_pipe, NULL);
  }
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  if (WIFEXITED(status))
    rc = WEXITSTATUS(status);
  else
    rc = 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return rc;
}

/* `ip -n NS -batch -` with `script`; on failure show what was asked. */
static int ip_batch(const char *ns, const char *script) {
  const char *argv[] = {"ip", "-n", ns, "-batch", "-", NULL};
  int rc = sv_netns_ip(argv, script);
  if (rc == 0) return 0;
  fprintf(stderr, "simverbs: `ip -n %s -batch -` failed (status %d); its commands were:\n", ns, rc);
  for (const char *s = script; *s;) {
    size_t n = strcspn(s, "\n");
    fprintf(stderr, "  %.*s\n", (int)n, s);
    s += n + (s[n] == '\n');
  }
  return -1;
}

/* ---- the ledger ---- */

static int ledger_path(const char *name, char *out, size_t len) {
  char seg[PATH_MAX];
  sv_fabric_path(name, seg, sizeof(seg));
  return snprintf(out, len, "%s.d/" LEDGER_FILE, seg) >= (int)len ? -1 : 0;
}

int sv_netns_ledger_add(const char *name, const char *fmt, ...) {
  char path[PATH_MAX];
  va_list ap;
  int fd, rc;
  if (ledger_path(name, path, sizeof(path)) != 0) {
    errno = ENAMETOOLONG;
    return -1;
  }
  fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    fprintf(stderr, "simverbs: cannot write %s: %s\n", path, strerror(errno));
    return -1;
  }
  va_start(ap, fmt);
  rc = vdprintf(fd, fmt, ap) < 0 ? -1 : 0;
  va_end(ap);
  if (rc == 0 && write(fd, "\n", 1) != 1) rc = -1;
  if (close(fd) != 0) rc = -1;
  if (rc) fprintf(stderr, "simverbs: cannot write %s: %s\n", path, strerror(errno));
  return rc;
}

struct ledger {
  int nns;
  char ns[LEDGER_MAX_NS][SV_NETNS_NAME_MAX];
  pid_t watch_pid;
  uint64_t watch_start;
};

static void ledger_add_ns(struct ledger *l, const char *ns) {
  for (int i = 0; i < l->nns; i++)
    if (strcmp(l->ns[i], ns) == 0) return;
  if (l->nns < LEDGER_MAX_NS && strlen(ns) < SV_NETNS_NAME_MAX) snprintf(l->ns[l->nns++], SV_NETNS_NAME_MAX, "%s", ns);
}

/* A missing ledger is an empty one. */
static void ledger_read(const char *name, struct ledger *l) {
  char path[PATH_MAX], line[512], word[SV_NETNS_NAME_MAX];
  FILE *in;
  memset(l, 0, sizeof(*l));
  if (ledger_path(name, path, sizeof(path)) != 0 || !(in = fopen(path, "re"))) return;
  while (fgets(line, sizeof(line), in)) {
    int pid;
    unsigned long long start;
    if (sscanf(line, "ns %159s", word) == 1 && ns_name_ours(name, word))
      ledger_add_ns(l, word);
    else if (sscanf(line, "watch %d %llu", &pid, &start) == 2 && pid > 1) {
      l->watch_pid = pid;
      l->watch_start = start;
    }
  }
  fclose(in);
}

/* ---- the watcher's lifetime ---- */

uint64_t sv_netns_start_time(pid_t pid) {
  char path[64], buf[1024], *p;
  ssize_t n;
  int fd;
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) return 0;
  n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  /* The command name may hold spaces and parentheses: fields start after
   * the last ')'.  Field 3 is the state, field 22 the start time. */
  if (!(p = strrchr(buf, ')')) || p[1] != ' ') return 0;
  p += 2;
  if (*p == 'Z' || *p == 'X') /* a zombie has stopped watching; its parent may never reap it */
    return 0;
  for (int field = 3; field < 22; field++) {
    if (!(p = strchr(p, ' '))) return 0;
    p++;
  }
  return strtoull(p, NULL, 10);
}

pid_t sv_netns_watcher(const char *name) {
  struct ledger *l = malloc(sizeof(*l));
  pid_t pid = 0;
  if (!l) return 0;
  ledger_read(name, l);
  if (l->watch_pid > 0 && l->watch_start && sv_netns_start_time(l->watch_pid) == l->watch_start) pid = l->watch_pid;
  free(l);
  return pid;
}

static bool wait_gone(pid_t pid, uint64_t start, int ms) {
  struct timespec tick = {0, 10 * 1000 * 1000};
  for (int waited = 0;; waited += 10) {
    waitpid(pid, NULL, WNOHANG); /* reaps it when we are its parent (a failed `up`) */
    if (sv_netns_start_time(pid) != start) return true;
    if (waited >= ms) return false;
    nanosleep(&tick, NULL);
  }
}

/* 1: stopped it, 0: it was not running, -1: it would not die. */
static int stop_watcher(pid_t pid, uint64_t start, bool verbose) {
  if (pid <= 1 || !start || sv_netns_start_time(pid) != start) /* gone, or the pid was reused */
    return 0;
  kill(pid, SIGTERM);
  if (!wait_gone(pid, start, WATCH_TERM_MS)) {
    kill(pid, SIGKILL);
    if (!wait_gone(pid, start, WATCH_KILL_MS)) {
      fprintf(stderr, "simverbs: the link watcher (pid %d) survived SIGKILL\n", (int)pid);
      return -1;
    }
  }
  if (verbose) printf("stopped the link watcher (pid %d)\n", (int)pid);
  return 1;
}

/* ---- teardown ---- */

int sv_netns_teardown(const char *name, const struct sv_fabric *f, bool verbose) {
  struct ledger *l = malloc(sizeof(*l));
  char ns[SV_NETNS_NAME_MAX], path[PATH_MAX], removed[1024] = "";
  int rc = 0, nremoved = 0;
  size_t off = 0;
  if (!l) {
    perror("simverbs");
    return -1;
  }
  ledger_read(name, l);
  if (f && f->netns) { /* the ledger may be gone (a run directory removed by hand) */
    for (uint32_t h = 0; h < f->nhosts && h < SV_MAX_HOSTS; h++)
      if (sv_netns_host_ns(name, f->hosts[h].name, ns, sizeof(ns)) == 0) ledger_add_ns(l, ns);
    if (sv_netns_switch_ns(name, ns, sizeof(ns)) == 0) ledger_add_ns(l, ns);
  }
  /* First the watcher: its sockets hold the namespaces alive. */
  if (stop_watcher(l->watch_pid, l->watch_start, verbose) < 0) rc = -1;
  for (int i = 0; i < l->nns; i++) {
    const char *argv[] = {"ip", "netns", "delete", l->ns[i], NULL};
    if (!sv_netns_path(l->ns[i], path, sizeof(path))) continue;
    if (sv_netns_ip(argv, NULL) != 0) {
      fprintf(stderr, "simverbs: cannot delete network namespace %s: remove it with `ip netns delete %s`\n", l->ns[i],
              l->ns[i]);
      rc = -1;
      continue;
    }
    nremoved++;
    if (off < sizeof(removed))
      off += (size_t)snprintf(removed + off, sizeof(removed) - off, "%s%s", off ? ", " : "", l->ns[i]);
  }
  if (verbose && nremoved) printf("removed network namespace%s %s\n", nremoved == 1 ? "" : "s", removed);
  if (rc == 0 && ledger_path(name, path, sizeof(path)) == 0) unlink(path);
  free(l);
  return rc ? -1 : nremoved;
}

/* ---- creation ---- */

/* RoCE ports get the MAC their link-local GID was made from (config.c), so
 * the kernel's fe80:: address on the interface is GID 0, as with mlx5. */
static void roce_mac(const struct sv_port *p, char *out, size_t len) {
  const uint8_t *g = p->gids[0].raw;
  snprintf(out, len, "%02x:%02x:%02x:%02x:%02x:%02x", g[8] ^ 0x02, g[9], g[10], g[13], g[14], g[15]);
}

static void fmt_ipv4(uint32_t a, char *out, size_t len) {
  snprintf(out, len, "%u.%u.%u.%u", a >> 24, (a >> 16) & 0xff, (a >> 8) & 0xff, a & 0xff);
}

/* The switch: lo, the management bridge, one bridge per rail, and every
 * veth, each created here with its peer put straight into its host.  Its
 * interfaces get no IPv6 link-local address (addrgenmode none, set before
 * they go up): a switch port has no business chattering. */
static int switch_script(const struct sv_fabric *f, FILE *s) {
  bool rails[SV_MAX_DEVS][SV_MAX_PORTS] = {{false}};
  char ns[SV_NETNS_NAME_MAX], sp[16], br[16], mac[24];
  fprintf(s, "link set lo up\nlink add " SV_NETNS_MGMT_BRIDGE " type bridge\n");
  fprintf(s, "link set " SV_NETNS_MGMT_BRIDGE " addrgenmode none\nlink set " SV_NETNS_MGMT_BRIDGE " up\n");
  for (uint32_t d = 0; d < f->ndevs && d < SV_MAX_DEVS; d++) {
    uint32_t rail = sv_netns_rail(f, (int)d);
    for (uint32_t p = 0; f->devs[d].in_use && p < f->devs[d].nports && p < SV_MAX_PORTS; p++) {
      if (rails[rail][p]) continue;
      rails[rail][p] = true;
      sv_netns_rail_bridge(rail, p + 1, br, sizeof(br));
      fprintf(s, "link add %s type bridge\nlink set %s addrgenmode none\nlink set %s up\n", br, br, br);
    }
  }
  for (uint32_t h = 0; h < f->nhosts && h < SV_MAX_HOSTS; h++) {
    if (sv_netns_host_ns(f->name, f->hosts[h].name, ns, sizeof(ns)) != 0) return -1;
    fprintf(s, "link add h%um type veth peer name " SV_NETNS_MGMT_IF " netns %s\n", h, ns);
    fprintf(s, "link set h%um addrgenmode none\n", h);
    fprintf(s, "link set h%um master " SV_NETNS_MGMT_BRIDGE " alias %s:" SV_NETNS_MGMT_IF " up\n", h, f->hosts[h].name);
    for (uint32_t d = 0; d < f->ndevs && d < SV_MAX_DEVS; d++) {
      const struct sv_device *dv = &f->devs[d];
      uint32_t rail = sv_netns_rail(f, (int)d);
      if (!dv->in_use || dv->host != h) continue;
      for (uint32_t p = 0; p < dv->nports && p < SV_MAX_PORTS; p++) {
        const struct sv_port *pt = &dv->ports[p];
        if (!pt->netdev[0]) {
          fprintf(stderr, "simverbs up: %s:%s:%u has no interface name\n", f->hosts[h].name, dv->name, p + 1);
          return -1;
        }
        sv_netns_switch_port(h, rail, p + 1, sp, sizeof(sp));
        sv_netns_rail_bridge(rail, p + 1, br, sizeof(br));
        fprintf(s, "link add %s type veth peer name %s", sp, pt->netdev);
        if (pt->link_layer == IBV_LINK_LAYER_ETHERNET) {
          roce_mac(pt, mac, sizeof(mac));
          fprintf(s, " address %s", mac);
        }
        fprintf(s, " netns %s\n", ns);
        fprintf(s, "link set %s addrgenmode none\n", sp);
        fprintf(s, "link set %s master %s alias %s:%s:%u up\n", sp, br, f->hosts[h].name, dv->name, p + 1);
      }
    }
  }
  return 0;
}

/* A host: lo, the management address, its ports up.  RoCE ports carry the
 * IPv4 address their GIDs hold (and the fe80:: address GID 0 is); IB ports
 * carry no address at all, so that nothing picks one for socket traffic
 * (NCCL, left to itself, prefers interfaces named ib*). */
static void host_script(const struct sv_fabric *f, uint32_t h, FILE *s) {
  char ip[20];
  fmt_ipv4(sv_netns_mgmt_ipv4(h), ip, sizeof(ip));
  fprintf(s, "link set lo up\naddr add %s/%d dev " SV_NETNS_MGMT_IF "\nlink set " SV_NETNS_MGMT_IF " up\n", ip,
          SV_NETNS_MGMT_PREFIX);
  for (uint32_t d = 0; d < f->ndevs && d < SV_MAX_DEVS; d++) {
    const struct sv_device *dv = &f->devs[d];
    if (!dv->in_use || dv->host != h) continue;
    for (uint32_t p = 0; p < dv->nports && p < SV_MAX_PORTS; p++) {
      const struct sv_port *pt = &dv->ports[p];
      if (pt->link_layer == IBV_LINK_LAYER_INFINIBAND) fprintf(s, "link set %s addrgenmode none\n", pt->netdev);
      fprintf(s, "link set %s alias %s:%u up\n", pt->netdev, dv->name, p + 1);
      if (pt->link_layer == IBV_LINK_LAYER_ETHERNET && pt->ipv4) {
        fmt_ipv4(pt->ipv4, ip, sizeof(ip));
        fprintf(s, "addr add %s/24 dev %s\n", ip, pt->netdev);
      }
    }
  }
}

/* Build a script with `fill`, then run it in `ns`. */
static int run_script(const char *ns, const struct sv_fabric *f, int host) {
  char *script = NULL;
  size_t len = 0;
  FILE *s = open_memstream(&script, &len);
  int rc = 0;
  if (!s) {
    perror("simverbs up");
    return -1;
  }
  if (host < 0)
    rc = switch_script(f, s);
  else
    host_script(f, (uint32_t)host, s);
  if (fclose(s) != 0) {
    perror("simverbs up");
    rc = -1;
  }
  if (rc == 0) rc = ip_batch(ns, script);
  free(script);
  return rc;
}

static int add_ns(const char *fabric, const char *ns) {
  const char *argv[] = {"ip", "netns", "add", ns, NULL};
  char path[PATH_MAX];
  if (sv_netns_path(ns, path, sizeof(path))) {
    fprintf(stderr,
            "simverbs up: network namespace %s already exists and is not one this fabric left behind: "
            "remove it with `ip netns delete %s`, or choose another fabric name\n",
            ns, ns);
    return -1;
  }
  if (sv_netns_ledger_add(fabric, "ns %s", ns) != 0) return -1;
  if (sv_netns_ip(argv, NULL) != 0) {
    fprintf(stderr, "simverbs up: cannot create network namespace %s (`ip netns add %s` failed)\n", ns, ns);
    return -1;
  }
  return 0;
}

int sv_netns_create(const struct sv_fabric *f) {
  char sw[SV_NETNS_NAME_MAX], ns[SV_NETNS_NAME_MAX];
  if (sv_netns_switch_ns(f->name, sw, sizeof(sw)) != 0 || add_ns(f->name, sw) != 0) return -1;
  for (uint32_t h = 0; h < f->nhosts && h < SV_MAX_HOSTS; h++)
    if (sv_netns_host_ns(f->name, f->hosts[h].name, ns, sizeof(ns)) != 0 || add_ns(f->name, ns) != 0) return -1;
  if (run_script(sw, f, -1) != 0) return -1;
  for (uint32_t h = 0; h < f->nhosts && h < SV_MAX_HOSTS; h++)
    if (sv_netns_host_ns(f->name, f->hosts[h].name, ns, sizeof(ns)) != 0 || run_script(ns, f, (int)h) != 0) return -1;
  return 0;
}

/* ---- run and link ---- */

int sv_netns_enter(const struct sv_fabric *f, uint32_t host, const char *who) {
  char ns[SV_NETNS_NAME_MAX], path[PATH_MAX];
  unsigned long sysfs_flags = 0;
  struct statvfs st;
  int fd;
  if (host >= f->nhosts || sv_netns_host_ns(f->name, f->hosts[host].name, ns, sizeof(ns)) != 0) return -1;
  if (!sv_netns_path(ns, path, sizeof(path))) {
    fprintf(stderr, "%s: host %s's network namespace %s is missing: run `simverbs up` again\n", who,
            f->hosts[host].name, ns);
    return -1;
  }
  if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 || setns(fd, CLONE_NEWNET) != 0) {
    int err = errno;
    fprintf(stderr, "%s: cannot enter network namespace %s: %s%s\n", who, path, strerror(err),
            err == EPERM ? " (entering a host of a netns fabric needs root)" : "");
    if (fd >= 0) close(fd);
    return -1;
  }
  close(fd);
  /* As `ip netns exec`: a private mount namespace whose /sys describes the
   * new network namespace (/sys/class/net lists the host's interfaces),
   * with nothing propagating back. */
  if (unshare(CLONE_NEWNS) != 0 || mount("", "/", "none", MS_SLAVE | MS_REC, NULL) != 0) {
    fprintf(stderr, "%s: cannot make a private mount namespace for %s: %s\n", who, ns, strerror(errno));
    return -1;
  }
  if (umount2("/sys", MNT_DETACH) != 0 && statvfs("/sys", &st) == 0 && (st.f_flag & ST_RDONLY))
    sysfs_flags = MS_RDONLY; /* a read-only /sys cannot be shadowed by a writable one */
  if (mount(ns, "/sys", "sysfs", sysfs_flags, NULL) != 0) {
    fprintf(stderr, "%s: cannot mount /sys for %s: %s\n", who, ns, strerror(errno));
    return -1;
  }
  return 0;
}

int sv_netns_set_link(const struct sv_fabric *f, int dev, int port, bool up) {
  const struct sv_device *d = &f->devs[dev];
  char ns[SV_NETNS_NAME_MAX];
  const char *argv[] = {"ip", "-n", ns, "link", "set", "dev", d->ports[port - 1].netdev, up ? "up" : "down", NULL};
  if (sv_netns_host_ns(f->name, f->hosts[d->host].name, ns, sizeof(ns)) != 0) return -1;
  return sv_netns_ip(argv, NULL) == 0 ? 0 : -1;
}
