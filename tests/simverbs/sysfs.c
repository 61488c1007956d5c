/*
 * sysfs.c: a sysfs-like tree per simulated host.
 *
 * Real programs (and NCCL-style plugins) read RDMA facts from sysfs as well as
 * through verbs: GID types, the netdev behind a RoCE GID, the PCI path and
 * NUMA node of a NIC.  Each host of the fabric gets its own tree under
 * <run_dir>/<host>/sys, laid out and formatted as the kernel does it, and the
 * simulated library points ibv_get_sysfs_path() and the device paths there.
 *
 * Every file is written to a temporary name and renamed into place, so a
 * reader racing a link flap sees either the old line or the new one, never
 * half of one.
 */
#include "fabric.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SYSFS_FW_VER "22.36.1010\n"         /* the same string ibv_query_device reports (device.c) */
#define SYSFS_PCI_VENDOR "0x15b3\n"         /* Mellanox's PCI vendor id (verbs reports 0x02c9) */
#define SYSFS_MAX_CPUS 4096                 /* local_cpus/local_cpulist describe at most this many */
#define SYSFS_UVERBS_ABI "6\n"              /* what rdma-core 44 expects in class/infiniband_verbs */
#define SYSFS_PEER_MEMORY_VERSION "1.3-0\n" /* what MLNX_OFED's nv_peer_mem reports */

/* ---- small file helpers ---- */

static int sysfs_err(const char *what, const char *path) {
  fprintf(stderr, "simverbs: cannot %s %s: %s\n", what, path, strerror(errno));
  return -1;
}

/* ENOENT from a write into a directory that was made first: the tree is
 * being removed under it (the fabric goes down while a process on it still
 * writes its counters), nothing to say. */
static int gone(void) { return errno == ENOENT; }

/* mkdir -p: every component of `path`, which must be absolute. */
static int mkdir_p(const char *path) {
  char buf[PATH_MAX];
  if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf)) {
    errno = ENAMETOOLONG;
    return sysfs_err("create directory", path);
  }
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return sysfs_err("create directory", buf);
    *p = '/';
  }
  if (mkdir(buf, 0755) != 0 && errno != EEXIST) return sysfs_err("create directory", buf);
  return 0;
}

static int write_all(int fd, const char *s, size_t len) {
  while (len) {
    ssize_t n = write(fd, s, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    s += n;
    len -= (size_t)n;
  }
  return 0;
}

/* The temporary name starts with '.' so directory listings that skip
 * hidden entries (as sysfs walkers do) never pick it up. */
static int tmp_name(const char *dir, const char *base, char *out, size_t len) {
  if (snprintf(out, len, "%s/.%s.tmp.%ld", dir, base, (long)getpid()) >= (int)len) {
    errno = ENAMETOOLONG;
    return -1;
  }
  return 0;
}

/* Write `content` as <dir>/<base>, replacing any old file atomically. */
static int put_file(const char *dir, const char *base, const char *content) {
  char path[PATH_MAX], tmp[PATH_MAX];
  int fd;
  if (snprintf(path, sizeof(path), "%s/%s", dir, base) >= (int)sizeof(path) || tmp_name(dir, base, tmp, sizeof(tmp))) {
    errno = ENAMETOOLONG;
    return sysfs_err("write", dir);
  }
  fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return gone() ? -1 : sysfs_err("create", tmp);
  if (write_all(fd, content, strlen(content)) != 0) {
    sysfs_err("write", tmp);
    goto fail;
  }
  if (close(fd) != 0) {
    fd = -1;
    sysfs_err("write", tmp);
    goto fail;
  }
  fd = -1;
  if (rename(tmp, path) != 0) {
    if (!gone()) sysfs_err("rename into", path);
    goto fail;
  }
  return 0;
fail:
  if (fd >= 0) close(fd);
  unlink(tmp);
  return -1;
}

static int put_fmt(const char *dir, const char *base, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int put_fmt(const char *dir, const char *base, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  int n;
  va_start(ap, fmt);
  n = vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  if (n < 0 || n >= (int)sizeof(buf)) {
    errno = EOVERFLOW;
    return sysfs_err("format", base);
  }
  return put_file(dir, base, buf);
}

/* Symlink <dir>/<base> -> target, replacing any old link atomically. */
static int put_link(const char *dir, const char *base, const char *target) {
  char path[PATH_MAX], tmp[PATH_MAX];
  if (snprintf(path, sizeof(path), "%s/%s", dir, base) >= (int)sizeof(path) || tmp_name(dir, base, tmp, sizeof(tmp))) {
    errno = ENAMETOOLONG;
    return sysfs_err("link", dir);
  }
  unlink(tmp);
  if (symlink(target, tmp) != 0) return sysfs_err("create symlink", tmp);
  if (rename(tmp, path) != 0) {
    unlink(tmp);
    return sysfs_err("rename into", path);
  }
  return 0;
}

/* join: out = a/b[/c...]; fails rather than truncates. */
static int join(char *out, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int join(char *out, size_t len, const char *fmt, ...) {
  va_list ap;
  int n;
  va_start(ap, fmt);
  n = vsnprintf(out, len, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= len) {
    errno = ENAMETOOLONG;
    return sysfs_err("build a path under", out);
  }
  return 0;
}

/* ---- formatting as the kernel does ---- */

/* "0c42:a103:0001:0000" from a host-order GUID. */
static void fmt_guid(uint64_t g, char *out, size_t len) {
  snprintf(out, len, "%04x:%04x:%04x:%04x", (unsigned)(g >> 48) & 0xffff, (unsigned)(g >> 32) & 0xffff,
           (unsigned)(g >> 16) & 0xffff, (unsigned)g & 0xffff);
}

/* %pI6: eight groups of four hex digits, never compressed. */
static void fmt_gid(const union ibv_gid *g, char *out, size_t len) {
  size_t o = 0;
  for (int i = 0; i < 16 && o < len; i += 2)
    o += (size_t)snprintf(out + o, len - o, "%s%02x%02x", i ? ":" : "", g->raw[i], g->raw[i + 1]);
}

/* ports/<p>/rate, computed from the encoded width and speed exactly as the
 * kernel's rate_show() does, so it always agrees with ibv_query_port. */
static void fmt_rate(uint32_t rate_gbps, char *out, size_t len) {
  uint8_t width, speed;
  int lanes, tenths;
  const char *name;
  sv_rate_to_width_speed(rate_gbps, &width, &speed);
  switch (width) {
  case 1: lanes = 1; break;
  case 4: lanes = 8; break;
  case 8: lanes = 12; break;
  case 16: lanes = 2; break;
  case 2:
  default: lanes = 4; break;
  }
  switch (speed) {
  case 2: name = " DDR", tenths = 50; break;
  case 4: name = " QDR", tenths = 100; break;
  case 8: name = " FDR10", tenths = 100; break;
  case 16: name = " FDR", tenths = 140; break;
  case 32: name = " EDR", tenths = 250; break;
  case 64: name = " HDR", tenths = 500; break;
  case 128: name = " NDR", tenths = 1000; break;
  default: name = "", tenths = 25; break; /* SDR */
  }
  tenths *= lanes;
  snprintf(out, len, "%d%s Gb/sec (%dX%s)\n", tenths / 10, tenths % 10 ? ".5" : "", lanes, name);
}

/* ---- the tree ---- */

/* Names come from the config parser, which already forbids '/', but a path
 * built from the shared segment must never escape run_dir. */
static bool path_safe(const char *s) {
  return s[0] && strchr(s, '/') == NULL && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

void sv_sysfs_root(struct sv_fabric *f, uint32_t host, char *out, size_t len) {
  const char *name = host < SV_MAX_HOSTS ? f->hosts[host].name : "";
  snprintf(out, len, "%s/%s/sys", f->run_dir, name);
}

static int write_port_state(const char *pdir, const struct sv_port *p) {
  bool up = atomic_load(&p->state) == IBV_PORT_ACTIVE;
  if (put_file(pdir, "state", up ? "4: ACTIVE\n" : "1: DOWN\n")) return -1;
  return put_file(pdir, "phys_state", up ? "5: LinkUp\n" : "3: Disabled\n");
}

/* gids/<i> for the whole table; the attribute files only for valid entries
 * (the kernel answers EINVAL for the others, a missing file is the closest). */
static int write_port_gids(const char *pdir, const struct sv_port *p) {
  char gdir[PATH_MAX], tdir[PATH_MAX], ndir[PATH_MAX], name[16], gid[48];
  bool roce = p->link_layer == IBV_LINK_LAYER_ETHERNET;
  if (join(gdir, sizeof(gdir), "%s/gids", pdir) || join(tdir, sizeof(tdir), "%s/gid_attrs/types", pdir) ||
      join(ndir, sizeof(ndir), "%s/gid_attrs/ndevs", pdir) || mkdir_p(gdir) || mkdir_p(tdir) || mkdir_p(ndir))
    return -1;
  for (uint32_t i = 0; i < p->ngids && i < SV_NGIDS; i++) {
    snprintf(name, sizeof(name), "%u", i);
    fmt_gid(&p->gids[i], gid, sizeof(gid));
    if (put_fmt(gdir, name, "%s\n", gid) ||
        put_file(tdir, name, p->gid_types[i] == IBV_GID_TYPE_ROCE_V2 ? "RoCE v2\n" : "IB/RoCE v1\n"))
      return -1;
    /* Only RoCE GIDs are bound to a netdev; IB ones read back EINVAL. */
    if (roce && p->netdev[0] && put_fmt(ndir, name, "%s\n", p->netdev)) return -1;
  }
  return 0;
}

/* A port's two counter directories (PATH_MAX each). */
static int counter_dirs(const char *pdir, char *cdir, char *hdir) {
  return join(cdir, PATH_MAX, "%s/counters", pdir) || join(hdir, PATH_MAX, "%s/hw_counters", pdir);
}

/* The counters a ConnectX keeps per port, under the names the kernel and
 * mlx5 give them: counters/ (the IB PortCounters; the data ones count
 * 4-byte words) and hw_counters/ (the QP-level retransmission events).
 * Into the directories write_port made: an engine thread that writes them
 * while the fabric goes down must not make the tree again. */
static int write_counters(const char *pdir, const struct sv_port *p) {
  char cdir[PATH_MAX], hdir[PATH_MAX];
  if (counter_dirs(pdir, cdir, hdir)) return -1;
  unsigned long long tx = atomic_load(&p->tx_bytes), rx = atomic_load(&p->rx_bytes);
  unsigned long long timeouts = atomic_load(&p->ack_timeouts);
  bool roce = p->link_layer == IBV_LINK_LAYER_ETHERNET;
  if (put_fmt(cdir, "port_xmit_data", "%llu\n", tx / 4) || put_fmt(cdir, "port_rcv_data", "%llu\n", rx / 4) ||
      put_fmt(cdir, "port_xmit_packets", "%llu\n", (unsigned long long)atomic_load(&p->tx_packets)) ||
      put_fmt(cdir, "port_rcv_packets", "%llu\n", (unsigned long long)atomic_load(&p->rx_packets)) ||
      put_fmt(cdir, "link_downed", "%u\n", (unsigned)atomic_load(&p->link_downs)) ||
      put_file(cdir, "symbol_error", "0\n") || put_file(cdir, "port_rcv_errors", "0\n") ||
      put_fmt(cdir, "port_xmit_discards", "%llu\n", (unsigned long long)atomic_load(&p->xmit_discards)) ||
      put_file(cdir, "link_error_recovery", "0\n") || put_fmt(hdir, "local_ack_timeout_err", "%llu\n", timeouts) ||
      put_fmt(hdir, "packet_seq_err", "%llu\n", (unsigned long long)atomic_load(&p->seq_err_naks)) ||
      put_fmt(hdir, "out_of_sequence", "%llu\n", (unsigned long long)atomic_load(&p->out_of_sequence)) ||
      put_file(hdir, "rnr_nak_retry_err", "0\n") || put_file(hdir, "duplicate_request", "0\n") ||
      put_file(hdir, "implied_nak_seq_err", "0\n"))
    return -1;
  return roce ? put_fmt(hdir, "roce_adp_retrans", "%llu\n", timeouts) : 0;
}

static int write_port(const char *ddir, const struct sv_port *p, uint32_t port) {
  char pdir[PATH_MAX], pkdir[PATH_MAX], rate[64];
  bool ib = p->link_layer == IBV_LINK_LAYER_INFINIBAND;
  if (join(pdir, sizeof(pdir), "%s/ports/%u", ddir, port) || join(pkdir, sizeof(pkdir), "%s/pkeys", pdir) ||
      mkdir_p(pkdir))
    return -1;
  fmt_rate(p->rate_gbps, rate, sizeof(rate));
  if (write_port_state(pdir, p) || put_file(pdir, "rate", rate) ||
      put_file(pdir, "link_layer", ib ? "InfiniBand\n" : "Ethernet\n") ||
      put_fmt(pdir, "lid", "0x%x\n", (unsigned)p->lid) ||
      put_fmt(pdir, "sm_lid", "0x%x\n", ib ? 1u : 0u) || /* the library reports sm_lid 1 */
      put_file(pdir, "lid_mask_count", "0\n") || put_file(pdir, "sm_sl", "0\n") || put_file(pkdir, "0", "0xffff\n"))
    return -1;
  char cdir[PATH_MAX], hdir[PATH_MAX];
  if (counter_dirs(pdir, cdir, hdir) || mkdir_p(cdir) || mkdir_p(hdir)) return -1;
  return write_port_gids(pdir, p) || write_counters(pdir, p);
}

/* "0000000f,ffffffff\n"-style mask of the first `ncpu` CPUs, as local_cpus. */
static void fmt_cpumask(long ncpu, char *out, size_t len) {
  long words = (ncpu + 31) / 32;
  size_t o = 0;
  for (long w = words - 1; w >= 0 && o < len; w--) {
    long bits = ncpu - w * 32;
    uint32_t m = bits >= 32 ? 0xffffffffu : (uint32_t)((1u << bits) - 1);
    o += (size_t)snprintf(out + o, len - o, "%08x%s", m, w ? "," : "\n");
  }
}

/* <root>/devices/pci0000:00/<pci>/: what NUMA-aware code reads about the NIC. */
static int write_pci(const char *root, const struct sv_device *d, bool ib) {
  char dir[PATH_MAX], mask[SYSFS_MAX_CPUS / 32 * 9 + 2];
  long ncpu = sysconf(_SC_NPROCESSORS_CONF);
  if (ncpu < 1) ncpu = 1;
  if (ncpu > SYSFS_MAX_CPUS) ncpu = SYSFS_MAX_CPUS;
  fmt_cpumask(ncpu, mask, sizeof(mask));
  if (join(dir, sizeof(dir), "%s/devices/pci0000:00/%s", root, d->pci) || mkdir_p(dir)) return -1;
  if (put_fmt(dir, "numa_node", "%d\n", (int)d->numa_node) ||
      (ncpu == 1 ? put_file(dir, "local_cpulist", "0\n") : put_fmt(dir, "local_cpulist", "0-%ld\n", ncpu - 1)) ||
      put_file(dir, "local_cpus", mask) || put_file(dir, "vendor", SYSFS_PCI_VENDOR) ||
      put_fmt(dir, "device", "0x%04x\n", (unsigned)d->vendor_part_id) ||
      put_file(dir, "class", ib ? "0x020700\n" : "0x020000\n")) /* InfiniBand / Ethernet controller */
    return -1;
  /* net/<ifname>/ for each network interface of the function, as the
   * kernel lists a RoCE netdev or an IPoIB interface under its PCI device. */
  for (uint32_t p = 0; p < d->nports && p < SV_MAX_PORTS; p++) {
    char ndir[PATH_MAX];
    if (!d->ports[p].netdev[0]) continue;
    if (join(ndir, sizeof(ndir), "%s/net/%s", dir, d->ports[p].netdev) || mkdir_p(ndir) ||
        put_fmt(ndir, "dev_port", "%u\n", p))
      return -1;
  }
  return 0;
}

/* <root>/class/infiniband/<dev>/ with its ports and the device symlink. */
static int write_ibdev(struct sv_fabric *f, const char *root, const struct sv_device *d) {
  char dir[PATH_MAX], target[PATH_MAX], guid[32];
  if (join(dir, sizeof(dir), "%s/class/infiniband/%s", root, d->name) || mkdir_p(dir)) return -1;
  fmt_guid(d->node_guid, guid, sizeof(guid));
  if (put_fmt(dir, "node_guid", "%s\n", guid)) return -1;
  fmt_guid(d->sys_image_guid, guid, sizeof(guid));
  if (put_fmt(dir, "sys_image_guid", "%s\n", guid) || put_file(dir, "node_type", "1: CA\n") ||
      put_file(dir, "fw_ver", SYSFS_FW_VER) || put_fmt(dir, "hca_type", "MT%u\n", (unsigned)d->vendor_part_id) ||
      put_fmt(dir, "board_id", "SIM_%010u\n", (unsigned)(d - f->devs)) ||
      put_fmt(dir, "node_desc", "%s %s\n", f->hosts[d->host].name, d->name))
    return -1;
  /* Relative, like the kernel's: realpath() of it is the PCI directory. */
  if (join(target, sizeof(target), "../../../devices/pci0000:00/%s", d->pci) || put_link(dir, "device", target))
    return -1;
  for (uint32_t p = 0; p < d->nports && p < SV_MAX_PORTS; p++)
    if (write_port(dir, &d->ports[p], p + 1)) return -1;
  return 0;
}

/* <root>/class/infiniband_verbs/uverbs<n>/: how rdma-core names devices. */
static int write_uverbs(const char *root, const struct sv_device *d, unsigned n) {
  char dir[PATH_MAX], name[32];
  snprintf(name, sizeof(name), "uverbs%u", n);
  if (join(dir, sizeof(dir), "%s/class/infiniband_verbs/%s", root, name) || mkdir_p(dir)) return -1;
  if (put_fmt(dir, "ibdev", "%s\n", d->name) || put_file(dir, "abi_version", "1\n") ||
      put_fmt(dir, "dev", "231:%u\n", 192 + n))
    return -1;
  return 0;
}

static int write_device(struct sv_fabric *f, const char *root, const struct sv_device *d, unsigned n) {
  bool ib = d->nports > 0 && d->ports[0].link_layer == IBV_LINK_LAYER_INFINIBAND;
  if (!path_safe(d->name) || !path_safe(d->pci)) {
    fprintf(stderr, "simverbs: device name '%s' or pci '%s' cannot be a file name\n", d->name, d->pci);
    return -1;
  }
  if (write_pci(root, d, ib) || write_ibdev(f, root, d)) return -1;
  return write_uverbs(root, d, n);
}

static int write_host(struct sv_fabric *f, uint32_t h) {
  char root[PATH_MAX], vdir[PATH_MAX];
  unsigned n = 0;
  if (!path_safe(f->hosts[h].name)) {
    fprintf(stderr, "simverbs: host name '%s' cannot be a file name\n", f->hosts[h].name);
    return -1;
  }
  sv_sysfs_root(f, h, root, sizeof(root));
  /* class/infiniband even for a host without NICs, as with ib_core loaded:
   * `simverbs run` then shows it empty rather than the machine's own. */
  if (join(vdir, sizeof(vdir), "%s/class/infiniband", root) || mkdir_p(vdir)) return -1;
  if (join(vdir, sizeof(vdir), "%s/class/infiniband_verbs", root) || mkdir_p(vdir) ||
      put_file(vdir, "abi_version", SYSFS_UVERBS_ABI))
    return -1;
  /* GPU peer memory (nvidia-peermem through MLNX_OFED's peer-memory API):
   * NCCL only asks whether this file exists. */
  if (f->hosts[h].peer_memory && (join(vdir, sizeof(vdir), "%s/kernel/mm/memory_peers/nv_mem", root) || mkdir_p(vdir) ||
                                  put_file(vdir, "version", SYSFS_PEER_MEMORY_VERSION)))
    return -1;
  /* uverbs<n> numbers a host's devices in fabric order, as the library does. */
  for (uint32_t i = 0; i < f->ndevs && i < SV_MAX_DEVS; i++) {
    const struct sv_device *d = &f->devs[i];
    if (!d->in_use || d->host != h) continue;
    if (write_device(f, root, d, n++)) return -1;
  }
  return 0;
}

int sv_sysfs_create(struct sv_fabric *f) {
  if (f->run_dir[0] != '/') {
    fprintf(stderr, "simverbs: the fabric has no run directory (run_dir '%s')\n", f->run_dir);
    return -1;
  }
  if (mkdir_p(f->run_dir)) return -1;
  for (uint32_t h = 0; h < f->nhosts && h < SV_MAX_HOSTS; h++)
    if (f->hosts[h].in_use && write_host(f, h)) return -1;
  return 0;
}

/* <host root>/class/infiniband/<dev>/ports/<port> of a device's port, and
 * the port itself; NULL (errno EINVAL) for a device or port that is not. */
static const struct sv_port *port_dir(struct sv_fabric *f, int dev, int port, char *pdir, size_t len) {
  char root[PATH_MAX];
  const struct sv_device *d;
  if (dev < 0 || dev >= SV_MAX_DEVS || !f->devs[dev].in_use || port < 1 || port > (int)f->devs[dev].nports) {
    errno = EINVAL;
    return NULL;
  }
  d = &f->devs[dev];
  sv_sysfs_root(f, d->host, root, sizeof(root));
  if (join(pdir, len, "%s/class/infiniband/%s/ports/%d", root, d->name, port)) return NULL;
  return &d->ports[port - 1];
}

int sv_sysfs_write_counters(struct sv_fabric *f, int dev, int port) {
  char pdir[PATH_MAX];
  const struct sv_port *p = port_dir(f, dev, port, pdir, sizeof(pdir));
  if (!p || access(pdir, F_OK) != 0)
    return -1; /* (a missing directory: the fabric is going down under a running process, nothing to say) */
  return write_counters(pdir, p);
}

int sv_sysfs_update_port(struct sv_fabric *f, int dev, int port) {
  char pdir[PATH_MAX];
  const struct sv_port *p = port_dir(f, dev, port, pdir, sizeof(pdir));
  return p ? write_port_state(pdir, p) : -1;
}
