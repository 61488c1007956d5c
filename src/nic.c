/* Device discovery, port properties, GID selection. */
#include "nic.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "log.h"

static int first_bit(int val, int max) {
  int i = 0;
  while (i < max && (val & (1 << i)) == 0) i++;
  return i;
}

int lp_port_speed_mbps(uint8_t active_width, uint8_t active_speed) {
  /* Index = first set bit of the verbs encoding, as in NCCL. */
  static const int widths[] = {1, 4, 8, 12, 2};
  static const int speeds[] = {2500, 5000, 10000, 10000, 14000, 25000, 50000, 100000, 200000};
  int w = widths[first_bit(active_width, (int)(sizeof(widths) / sizeof(widths[0])) - 1)];
  int s = speeds[first_bit(active_speed, (int)(sizeof(speeds) / sizeof(speeds[0])) - 1)];
  return w * s;
}

const char *lp_gid_str(const union ibv_gid *gid, char *buf, size_t len) {
  if (inet_ntop(AF_INET6, gid->raw, buf, (socklen_t)len) == NULL) snprintf(buf, len, "?");
  return buf;
}

static int gid_is_zero(const union ibv_gid *g) {
  static const uint8_t zero[16];
  return memcmp(g->raw, zero, 16) == 0;
}

static int gid_is_v4_mapped(const union ibv_gid *g) {
  static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return memcmp(g->raw, prefix, 12) == 0;
}

static int gid_is_link_local(const union ibv_gid *g) { return g->raw[0] == 0xfe && (g->raw[1] & 0xc0) == 0x80; }

/* Whether the GID's address lies in `range`: an IPv4 range takes only
 * IPv4-mapped GIDs, an IPv6 range compares the whole GID. */
static int gid_in_range(const union ibv_gid *g, const struct lp_addr_range *range) {
  if (range == NULL || !range->set) return 1;
  if (range->family == LP_FAMILY_INET) return gid_is_v4_mapped(g) && lp_addr_in_range(range, g->raw + 12);
  return lp_addr_in_range(range, g->raw);
}

int lp_gid_pick(const union ibv_gid *gids, const int *types, int n, int roce_version, int family,
                const struct lp_addr_range *range) {
  int want = roce_version == 1 ? IBV_GID_TYPE_ROCE_V1 : IBV_GID_TYPE_ROCE_V2;
  /* RoCE v1 and IB share one type value in verbs; v1 is what a port with
   * unknown types most likely runs, so unknown counts as v1. */
  int best = -1, best_score = -1;
  for (int i = 0; i < n; i++) {
    if (gid_is_zero(&gids[i]) || !gid_in_range(&gids[i], range)) continue;
    int t = types[i] < 0 ? IBV_GID_TYPE_ROCE_V1 : types[i];
    int v4 = gid_is_v4_mapped(&gids[i]);
    int fam_ok = family == LP_FAMILY_ANY || (family == LP_FAMILY_INET) == v4;
    int score = 0;
    if (t == want) score += 4;
    if (fam_ok && !gid_is_link_local(&gids[i])) score += 2;
    if (v4 && family != LP_FAMILY_INET6) score += 1;
    if (score > best_score) {
      best = i;
      best_score = score;
    }
  }
  return best;
}

/* GID type from sysfs when the library cannot tell (_ibv_query_gid_ex is
 * IBVERBS_1.11). */
static int gid_type_sysfs(const struct lp_nic *nic, int port, int index) {
  char path[LP_PATH_MAX], buf[32] = "";
  snprintf(path, sizeof(path), "%s/ports/%d/gid_attrs/types/%d", nic->ibdev_path, port, index);
  FILE *f = fopen(path, "r");
  if (f == NULL) return -1;
  char *ok = fgets(buf, sizeof(buf), f);
  fclose(f);
  if (ok == NULL) return -1;
  if (strncasecmp(buf, "RoCE v2", 7) == 0) return IBV_GID_TYPE_ROCE_V2;
  if (strncasecmp(buf, "IB/RoCE v1", 10) == 0 || strncasecmp(buf, "RoCE v1", 7) == 0) return IBV_GID_TYPE_ROCE_V1;
  return -1;
}

#define LP_GID_SCAN_MAX 256

static int choose_gid(const struct lp_ibv *ibv, const struct lp_config *cfg, const struct lp_nic *nic,
                      struct lp_dev *dev, int tbl_len) {
  int n = tbl_len < LP_GID_SCAN_MAX ? tbl_len : LP_GID_SCAN_MAX;
  if (n <= 0) n = 1;
  if (cfg->gid_index >= 0) {
    if (cfg->gid_index >= n && tbl_len > 0) {
      LP_WARN("NCCL_IB_GID_INDEX=%d is outside the GID table of %s:%d (%d entries); selecting automatically",
              cfg->gid_index, nic->name, dev->port, tbl_len);
    } else if (ibv->query_gid(nic->ctx, (uint8_t)dev->port, cfg->gid_index, &dev->gid) == 0) {
      /* An empty slot reads as all zeros: connections would fail at RTR
       * with EINVAL, far from the setting that caused it. */
      if (!gid_is_zero(&dev->gid)) {
        dev->gid_index = cfg->gid_index;
        dev->gid_type = -1;
        return 0;
      }
      LP_WARN(
          "NCCL_IB_GID_INDEX=%d names an empty GID slot on %s:%d (no address is assigned there: see "
          "`show_gids` or %s/ports/%d/gids/); selecting automatically",
          cfg->gid_index, nic->name, dev->port, nic->ibdev_path, dev->port);
    } else {
      LP_WARN("NCCL_IB_GID_INDEX=%d cannot be read on %s:%d; selecting automatically", cfg->gid_index, nic->name,
              dev->port);
    }
  }
  if (dev->link_layer == IBV_LINK_LAYER_INFINIBAND) {
    /* IB routes on LIDs; the GID is informational. */
    dev->gid_index = 0;
    dev->gid_type = IBV_GID_TYPE_IB;
    if (ibv->query_gid(nic->ctx, (uint8_t)dev->port, 0, &dev->gid) != 0) memset(&dev->gid, 0, sizeof(dev->gid));
    return 0;
  }
  union ibv_gid *gids = calloc((size_t)n, sizeof(*gids));
  int *types = calloc((size_t)n, sizeof(*types));
  int rc = -1;
  if (gids == NULL || types == NULL) goto out;
  for (int i = 0; i < n; i++) {
    types[i] = -1;
    if (ibv->query_gid_ex != NULL) {
      struct ibv_gid_entry e;
      memset(&e, 0, sizeof(e));
      if (ibv->query_gid_ex(nic->ctx, (uint32_t)dev->port, (uint32_t)i, &e, 0, sizeof(e)) == 0) {
        gids[i] = e.gid;
        types[i] = (int)e.gid_type;
        continue;
      }
    }
    if (ibv->query_gid(nic->ctx, (uint8_t)dev->port, i, &gids[i]) != 0) memset(&gids[i], 0, sizeof(gids[i]));
    if (!gid_is_zero(&gids[i])) types[i] = gid_type_sysfs(nic, dev->port, i);
  }
  int idx = lp_gid_pick(gids, types, n, cfg->roce_version, cfg->gid_family, &cfg->gid_range);
  if (idx < 0 && cfg->gid_range.set) {
    LP_WARN("NCCL_IB_ADDR_RANGE=%s matches no GID of %s:%d; choosing among all of them", cfg->gid_range_str, nic->name,
            dev->port);
    idx = lp_gid_pick(gids, types, n, cfg->roce_version, cfg->gid_family, NULL);
  }
  if (idx >= 0) {
    dev->gid_index = idx;
    dev->gid = gids[idx];
    dev->gid_type = types[idx];
    rc = 0;
  }
out:
  free(gids);
  free(types);
  return rc;
}

int lp_dev_refresh(const struct lp_ibv *ibv, const struct lp_config *cfg, const struct lp_nic *nic,
                   struct lp_dev *dev) {
  struct ibv_port_attr pa;
  memset(&pa, 0, sizeof(pa));
  if (ibv->query_port(nic->ctx, (uint8_t)dev->port, &pa) != 0) {
    LP_WARN("ibv_query_port(%s, %d) failed: %s", nic->name, dev->port, strerror(errno));
    return -1;
  }
  /* The link layer and the speed are set once, at discovery: they are read
   * without the plugin's lock (pool choice, getProperties), and NCCL has
   * taken the speed into its topology anyway. */
  if (dev->link_layer == 0) {
    dev->link_layer = pa.link_layer;
    dev->speed_mbps = lp_port_speed_mbps(pa.active_width, pa.active_speed);
  } else if (dev->link_layer != pa.link_layer) {
    LP_WARN("%s:%d changed its link layer (%d, was %d): it cannot carry this process's connections any more", nic->name,
            dev->port, pa.link_layer, dev->link_layer);
    return -1;
  }
  dev->lid = pa.lid;
  dev->active_mtu = pa.active_mtu;
  if (choose_gid(ibv, cfg, nic, dev, pa.gid_tbl_len) != 0) {
    LP_WARN("%s:%d has no usable GID for RoCE", nic->name, dev->port);
    return -1;
  }
  return 0;
}

static int port_usable(const struct ibv_port_attr *pa) {
  return pa->state == IBV_PORT_ACTIVE &&
         (pa->link_layer == IBV_LINK_LAYER_INFINIBAND || pa->link_layer == IBV_LINK_LAYER_ETHERNET);
}

/* The NUMA node of the NIC's PCI device (pools prefer close NICs). */
static int read_numa(const char *ibdev_path) {
  char path[LP_PATH_MAX];
  snprintf(path, sizeof(path), "%s/device/numa_node", ibdev_path);
  FILE *f = fopen(path, "r");
  int numa = -1;
  if (f != NULL) {
    if (fscanf(f, "%d", &numa) != 1) numa = -1;
    fclose(f);
  }
  return numa;
}

int lp_nic_discover(const struct lp_ibv *ibv, const struct lp_config *cfg, struct lp_nic *nics, int *nnics,
                    struct lp_dev *devs, int max_devs) {
  int ndevs = 0, nlist = 0, d, ports_left = 0;
  *nnics = 0;
  struct ibv_device **list = ibv->get_device_list(&nlist);
  if (list == NULL) {
    LP_WARN("ibv_get_device_list failed: %s", strerror(errno));
    return 0;
  }
  for (d = 0; d < nlist && *nnics < LP_MAX_NICS; d++) {
    const char *name = ibv->get_device_name(list[d]);
    if (name == NULL) continue;
    struct lp_nic *nic = &nics[*nnics];
    memset(nic, 0, sizeof(*nic));
    snprintf(nic->name, sizeof(nic->name), "%s", name);
    snprintf(nic->ibdev_path, sizeof(nic->ibdev_path), "%s", list[d]->ibdev_path);
    nic->ctx = ibv->open_device(list[d]);
    if (nic->ctx == NULL) {
      LP_WARN("cannot open %s: %s", name, strerror(errno));
      continue;
    }
    if (ibv->query_device(nic->ctx, &nic->attr) != 0) {
      LP_WARN("ibv_query_device(%s) failed: %s", name, strerror(errno));
      goto drop;
    }
    int kept = 0;
    for (int port = 1; port <= nic->attr.phys_port_cnt; port++) {
      struct ibv_port_attr pa;
      memset(&pa, 0, sizeof(pa));
      if (ibv->query_port(nic->ctx, (uint8_t)port, &pa) != 0) {
        LP_WARN("ibv_query_port(%s, %d) failed: %s", name, port, strerror(errno));
        continue;
      }
      if (!port_usable(&pa)) {
        LP_INFO(NCCL_INIT | NCCL_NET, "skipping %s:%d (state %d, link layer %d)", name, port, pa.state, pa.link_layer);
        continue;
      }
      if (!lp_filter_match(&cfg->hca, name, port)) {
        LP_INFO(NCCL_INIT | NCCL_NET, "skipping %s:%d (excluded by NCCL_IB_HCA)", name, port);
        continue;
      }
      if (ndevs == max_devs) {
        ports_left++;
        continue;
      }
      struct lp_dev *dev = &devs[ndevs];
      memset(dev, 0, sizeof(*dev));
      dev->nic = *nnics;
      dev->port = port;
      snprintf(dev->name, sizeof(dev->name), "%s", name);
      if (lp_dev_refresh(ibv, cfg, nic, dev) != 0) continue;
      ndevs++;
      kept++;
    }
    if (kept == 0) goto drop;
    nic->pd = ibv->alloc_pd(nic->ctx);
    if (nic->pd == NULL) {
      LP_WARN("ibv_alloc_pd(%s) failed: %s", name, strerror(errno));
      ndevs -= kept;
      goto drop;
    }
    char path[sizeof(nic->ibdev_path) + 16];
    snprintf(path, sizeof(path), "%s/device", nic->ibdev_path);
    if (realpath(path, nic->pci_path) == NULL) snprintf(nic->pci_path, sizeof(nic->pci_path), "%s", path);
    nic->numa = read_numa(nic->ibdev_path);
    (*nnics)++;
    continue;
  drop:
    ibv->close_device(nic->ctx);
    nic->ctx = NULL;
  }
  /* What did not fit is said: its ports could neither carry connections
   * nor take moved ones, and NCCL would never know they exist. */
  if (d < nlist)
    LP_WARN(
        "%d RDMA devices found; linkpass opens the first %d it can use and leaves out the other %d: choose "
        "them with NCCL_IB_HCA",
        nlist, LP_MAX_NICS, nlist - d);
  if (ports_left > 0)
    LP_WARN("%d usable ports left out: linkpass offers at most %d devices (ports); choose them with NCCL_IB_HCA",
            ports_left, max_devs);
  ibv->free_device_list(list);
  if (cfg->device_pci_order) lp_dev_sort_pci(devs, ndevs, nics);
  return ndevs;
}

long long lp_pci_path_id(const char *path) {
  const char *last = strrchr(path, '/');
  last = last ? last + 1 : path;
  unsigned domain, bus, dev, fn;
  int n = 0;
  if (sscanf(last, "%4x:%2x:%2x.%1x%n", &domain, &bus, &dev, &fn, &n) != 4 || last[n] != '\0') return -1;
  return (long long)domain << 16 | bus << 8 | dev << 3 | fn;
}

void lp_dev_sort_pci(struct lp_dev *devs, int ndevs, const struct lp_nic *nics) {
  for (int i = 1; i < ndevs; i++) {
    struct lp_dev d = devs[i];
    long long id = lp_pci_path_id(nics[d.nic].pci_path);
    int j = i;
    for (; j > 0; j--) {
      long long before = lp_pci_path_id(nics[devs[j - 1].nic].pci_path);
      if (id < 0 || (before >= 0 && before <= id)) break;
      devs[j] = devs[j - 1];
    }
    devs[j] = d;
  }
}

/* The IPv4 address of an IPv4-mapped GID (::ffff:a.b.c.d), host order; 0 otherwise. */
static uint32_t gid_ipv4(const uint8_t *g) {
  static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (memcmp(g, mapped, sizeof(mapped)) != 0) return 0;
  return (uint32_t)g[12] << 24 | (uint32_t)g[13] << 16 | (uint32_t)g[14] << 8 | g[15];
}

int lp_subnet_pick(const struct lp_dev *devs, int ndevs, int dev, const uint8_t *peer_gid, int prefix) {
  uint32_t peer = gid_ipv4(peer_gid);
  uint32_t mask = prefix >= 32 ? 0xffffffffu : ~(0xffffffffu >> prefix);
  uint32_t mine = devs[dev].link_layer == IBV_LINK_LAYER_ETHERNET ? gid_ipv4(devs[dev].gid.raw) : 0;
  if (peer == 0 || mine == 0 || ((mine ^ peer) & mask) == 0) return dev;
  for (int d = 0; d < ndevs; d++) {
    uint32_t a = devs[d].link_layer == IBV_LINK_LAYER_ETHERNET ? gid_ipv4(devs[d].gid.raw) : 0;
    if (a != 0 && ((a ^ peer) & mask) == 0) return d;
  }
  return dev;
}

int lp_gid_netdev(const char *ibdev_path, int port, int gid_index, char *out, size_t len) {
  char path[512];
  if (gid_index < 0) return -1;
  if (snprintf(path, sizeof(path), "%s/ports/%d/gid_attrs/ndevs/%d", ibdev_path, port, gid_index) >= (int)sizeof(path))
    return -1;
  FILE *f = fopen(path, "r");
  if (f == NULL) return -1;
  char line[64];
  int ok = fgets(line, sizeof(line), f) != NULL;
  fclose(f);
  if (!ok) return -1;
  line[strcspn(line, "\r\n")] = '\0';
  if (line[0] == '\0' || strlen(line) >= len) return -1;
  snprintf(out, len, "%s", line);
  return 0;
}

static int read_u64(const char *dir, int port, const char *name, uint64_t *out) {
  char path[512];
  if (snprintf(path, sizeof(path), "%s/ports/%d/%s", dir, port, name) >= (int)sizeof(path)) return -1;
  FILE *f = fopen(path, "r");
  if (f == NULL) return -1;
  unsigned long long v;
  int ok = fscanf(f, "%llu", &v) == 1;
  fclose(f);
  if (!ok) return -1;
  *out = v;
  return 0;
}

int lp_port_counters(const struct lp_nic *nic, int port, struct lp_port_counters *out) {
  uint64_t naks = 0, timeouts = 0, words = 0;
  memset(out, 0, sizeof(*out));
  out->bytes_ok = read_u64(nic->ibdev_path, port, "counters/port_xmit_data", &words) == 0;
  out->bytes = out->bytes_ok ? words * 4 : 0;
  if (read_u64(nic->ibdev_path, port, "counters/port_xmit_packets", &out->packets) != 0 ||
      read_u64(nic->ibdev_path, port, "hw_counters/packet_seq_err", &naks) != 0 ||
      read_u64(nic->ibdev_path, port, "hw_counters/local_ack_timeout_err", &timeouts) != 0) {
    out->packets = 0;
    return -1;
  }
  out->ok = 1;
  out->resends = naks + timeouts;
  return 0;
}

static int add_name(char (*out)[LP_IFNAME_MAX], int n, int max, const char *name) {
  if (n >= max || strlen(name) >= LP_IFNAME_MAX) return n;
  for (int i = 0; i < n; i++)
    if (strcmp(out[i], name) == 0) return n;
  snprintf(out[n], LP_IFNAME_MAX, "%s", name);
  return n + 1;
}

int lp_nic_netdevs(const struct lp_nic *nics, int nnics, const struct lp_dev *devs, int ndevs,
                   char (*out)[LP_IFNAME_MAX], int max) {
  int n = 0;
  for (int i = 0; i < nnics; i++) {
    char path[LP_PATH_MAX + 8];
    if (snprintf(path, sizeof(path), "%s/net", nics[i].pci_path) >= (int)sizeof(path)) continue;
    DIR *dir = opendir(path);
    if (dir == NULL) continue;
    for (struct dirent *e = readdir(dir); e != NULL; e = readdir(dir))
      if (e->d_name[0] != '.') n = add_name(out, n, max, e->d_name);
    closedir(dir);
  }
  for (int d = 0; d < ndevs; d++) {
    char name[LP_IFNAME_MAX];
    if (devs[d].link_layer == IBV_LINK_LAYER_ETHERNET &&
        lp_gid_netdev(nics[devs[d].nic].ibdev_path, devs[d].port, devs[d].gid_index, name, sizeof(name)) == 0)
      n = add_name(out, n, max, name);
  }
  return n;
}

void lp_nic_close_all(const struct lp_ibv *ibv, struct lp_nic *nics, int nnics) {
  for (int i = 0; i < nnics; i++) {
    if (nics[i].pd) ibv->dealloc_pd(nics[i].pd);
    if (nics[i].ctx) ibv->close_device(nics[i].ctx);
    nics[i].pd = NULL;
    nics[i].ctx = NULL;
  }
}
