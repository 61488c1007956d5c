/*
 * config.c: read a simverbs topology file into the fabric's host and device
 * tables.
 *
 * The format is line based; docs/SIMVERBS.md has the full description and an
 * example.  In short:
 *
 *   # comment (from '#' to the end of the line)
 *   fabric <name>              optional: the fabric this file describes
 *   netns on|off               hosts in network namespaces, ports backed by
 *                              veth interfaces (before the first host line)
 *   link ib|roce               defaults for the nic lines that follow
 *   rate 10|25|50|100|200|400  (Gb/s)
 *   latency_us <0..1000000>
 *   ports 1|2
 *   adaptive_routing on|off    plain RDMA WRITEs may land out of order
 *   dmabuf on|off              nics register dma-bufs (ibv_reg_dmabuf_mr); on
 *   peer_memory on|off         the hosts that follow have GPU peer memory
 *                              (nvidia-peermem's sysfs file); off
 *   host <name>                starts a host
 *   nic <name> [link=ib|roce] [rate=N] [latency_us=N] [ports=N] [numa=N]
 *       [pci=DDDD:BB:DD.F] [netdev=IF[,IF]] [ip=A.B.C.D[,A.B.C.D]]
 *       [ar=on|off] [ece=MASK] [dmabuf=on|off]
 *
 * Everything a real device would report and the file does not say (GUIDs,
 * LIDs, GIDs, PCI address, addresses) is derived from the position of the
 * device, so the same file always yields the same fabric.  Every error names
 * the file and line, what was wrong and what is accepted.
 */
#include "fabric.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CFG_LINE_MAX 1024
#define CFG_MAX_TOKENS 16
#define CFG_NETDEV_MAX 15 /* IFNAMSIZ - 1 */
#define CFG_LATENCY_US_MAX 1000000u
#define CFG_NUMA_MAX 1023

/* Identity of every simulated NIC.  The OUI is Mellanox's, as on real
 * ConnectX GUIDs, so tools that pretty-print GUIDs see a familiar shape.
 * vendor_id is Mellanox's verbs vendor id; vendor_part_id is deliberately one
 * perftest does not know: for known ConnectX parts perftest switches to the
 * mlx5 extended verbs (ibv_wr_* post API, inline data, DC) that the simulated
 * library does not implement, while for an unknown part it takes its generic
 * path (ibv_create_qp, ibv_post_send, no inline). */
#define CFG_GUID_BASE 0x0c42a10000000000ull /* Mellanox's OUI, then the fabric's tag (fabric_tag) */
#define CFG_VENDOR_ID 0x02c9u
#define CFG_ECE_DEFAULT 0x30000002u /* the options a ConnectX RoCE NIC reports (NCCL's query_ece lines) */
#define CFG_VENDOR_PART_ID 0xfff0u
/* RFC 2544 benchmark range: never routed, so a GID built from it can never
 * be mistaken for a real address.  They are only GID values here. */
#define CFG_IPV4_NET 0xc6120000u /* 198.18.0.0 */
/* With `netns on`, 198.18.255.0/24 is the management network (netns.c): a
 * RoCE address there would shadow a host's management address. */
#define CFG_MGMT_NET 0xc612ff00u
#define CFG_MGMT_MASK 0xffffff00u

/* Link properties settable as file-wide defaults or per nic. */
struct cfg_link {
  uint32_t link_layer; /* IBV_LINK_LAYER_INFINIBAND or IBV_LINK_LAYER_ETHERNET */
  uint32_t rate_gbps;
  uint32_t latency_us;
  uint32_t nports;
  uint32_t adaptive_routing; /* 1: plain RDMA WRITEs may land out of order */
  uint32_t dmabuf;           /* 1: ibv_reg_dmabuf_mr works (a ConnectX on Linux 5.12+) */
};

/* Parser state for one file. */
struct cfg {
  struct sv_fabric *f;
  const char *path;
  unsigned line;
  bool fabric_seen;
  bool netns_seen;
  bool netns_forced; /* `simverbs up --netns`: the command line wins over the file */
  bool netns;        /* hosts get namespaces, every port a network interface */
  struct cfg_link defaults;
  uint32_t peer_memory; /* for the host lines that follow */
  int host;             /* current host index, -1 before the first host line */
  uint32_t host_devs;   /* devices added to the current host */
  uint32_t host_ports;  /* ports added to the current host (names default IPs) */
  uint32_t next_lid;    /* IB LIDs are unique over the whole subnet */
};

/* One nic line, before it becomes a device. */
struct cfg_nic {
  const char *name;
  struct cfg_link link;
  int32_t numa;
  char pci[32];
  uint32_t nnetdevs, nips;
  char netdev[SV_MAX_PORTS][CFG_NETDEV_MAX + 1];
  uint32_t ipv4[SV_MAX_PORTS];
  bool ece_given;
  uint32_t ece;
};

static int cfg_err(const struct cfg *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int cfg_err(const struct cfg *c, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "%s:%u: ", c->path, c->line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  return -1;
}

/* ---- value parsers: each reports its own error ---- */

static bool name_char_ok(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' ||
         ch == '-';
}

/* Names end up in file paths and in "host:dev:port" targets, so keep them to
 * a charset that can be neither a path separator nor a target separator. */
static bool name_ok(const char *s, size_t max_len) {
  size_t n = strlen(s);
  if (n == 0 || n > max_len) return false;
  if (!((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= '0' && s[0] <= '9'))) return false;
  for (size_t i = 0; i < n; i++)
    if (!name_char_ok(s[i])) return false;
  return true;
}

static int parse_name(const struct cfg *c, const char *what, const char *s, size_t max_len) {
  if (name_ok(s, max_len)) return 0;
  return cfg_err(c,
                 "%s name '%s' is invalid: use 1 to %zu letters, digits, '.', '_' or '-', "
                 "starting with a letter or digit",
                 what, s, max_len);
}

/* Strict unsigned decimal: no sign, no spaces, no trailing text. */
static int parse_u32(const char *s, uint32_t max, uint32_t *out) {
  char *end;
  unsigned long v;
  if (s[0] < '0' || s[0] > '9') return -1;
  errno = 0;
  v = strtoul(s, &end, 10);
  if (errno || *end || v > max) return -1;
  *out = (uint32_t)v;
  return 0;
}

static int parse_link(const struct cfg *c, const char *s, uint32_t *out) {
  if (strcmp(s, "ib") == 0)
    *out = IBV_LINK_LAYER_INFINIBAND;
  else if (strcmp(s, "roce") == 0)
    *out = IBV_LINK_LAYER_ETHERNET;
  else
    return cfg_err(c, "link '%s' is not supported: use ib or roce", s);
  return 0;
}

static int parse_rate(const struct cfg *c, const char *s, uint32_t *out) {
  static const uint32_t rates[] = {10, 25, 50, 100, 200, 400};
  uint32_t v;
  if (parse_u32(s, UINT32_MAX, &v) == 0)
    for (size_t i = 0; i < sizeof(rates) / sizeof(rates[0]); i++)
      if (v == rates[i]) {
        *out = v;
        return 0;
      }
  return cfg_err(c, "rate '%s' is not supported: use 10, 25, 50, 100, 200 or 400 (Gb/s)", s);
}

static int parse_on_off(const struct cfg *c, const char *key, const char *s, uint32_t *out) {
  if (strcmp(s, "on") == 0 || strcmp(s, "off") == 0) {
    *out = strcmp(s, "on") == 0;
    return 0;
  }
  return cfg_err(c, "%s '%s' is invalid: use on or off", key, s);
}

/* ECE options: hexadecimal (0x...) or decimal, 32 bits; 0 offers no ECE. */
static int parse_ece(const struct cfg *c, const char *s, uint32_t *out) {
  char *end;
  errno = 0;
  unsigned long v = strtoul(s, &end, 0);
  if (*s && *s != '-' && *end == '\0' && errno == 0 && v <= UINT32_MAX) {
    *out = (uint32_t)v;
    return 0;
  }
  return cfg_err(c,
                 "ece '%s' is invalid: give the options bit mask as a 32-bit number (e.g. 0x30000002), "
                 "or 0 for a NIC without ECE",
                 s);
}

static int parse_latency(const struct cfg *c, const char *s, uint32_t *out) {
  if (parse_u32(s, CFG_LATENCY_US_MAX, out) == 0) return 0;
  return cfg_err(c, "latency_us '%s' is invalid: use a whole number of microseconds, 0 to %u", s, CFG_LATENCY_US_MAX);
}

static int parse_ports(const struct cfg *c, const char *s, uint32_t *out) {
  if (parse_u32(s, SV_MAX_PORTS, out) == 0 && *out >= 1) return 0;
  return cfg_err(c, "ports '%s' is invalid: a nic has 1 to %d ports", s, SV_MAX_PORTS);
}

static int parse_numa(const struct cfg *c, const char *s, int32_t *out) {
  uint32_t v;
  if (strcmp(s, "-1") == 0) { /* what the kernel reports when it does not know */
    *out = -1;
    return 0;
  }
  if (parse_u32(s, CFG_NUMA_MAX, &v) == 0) {
    *out = (int32_t)v;
    return 0;
  }
  return cfg_err(c, "numa '%s' is invalid: use a NUMA node 0 to %d, or -1 for none", s, CFG_NUMA_MAX);
}

static bool hex_digits(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') || (s[i] >= 'A' && s[i] <= 'F'))) return false;
  return true;
}

/* A PCI address as sysfs spells it: domain:bus:device.function, lower case. */
static int parse_pci(const struct cfg *c, const char *s, char *out, size_t len) {
  unsigned dom, bus, dev, fn;
  bool shape = strlen(s) == 12 && s[4] == ':' && s[7] == ':' && s[10] == '.' && hex_digits(s, 4) &&
               hex_digits(s + 5, 2) && hex_digits(s + 8, 2) && s[11] >= '0' && s[11] <= '7';
  if (!shape || sscanf(s, "%4x:%2x:%2x.%1u", &dom, &bus, &dev, &fn) != 4 || dev > 0x1f)
    return cfg_err(c,
                   "pci '%s' is invalid: use DDDD:BB:DD.F in hex, device 00-1f, function 0-7 "
                   "(e.g. 0000:17:00.0)",
                   s);
  snprintf(out, len, "%04x:%02x:%02x.%u", dom, bus, dev, fn);
  return 0;
}

/* Split "a,b" into at most SV_MAX_PORTS items; each item checked by the
 * caller.  Empty items ("a,", ",b") are mistakes, not "use the default". */
static int split_list(const struct cfg *c, const char *key, char *s, char *items[SV_MAX_PORTS], uint32_t *n) {
  char *item = s;
  *n = 0;
  for (;;) {
    char *comma = strchr(item, ',');
    if (comma) *comma = '\0';
    if (*item == '\0') return cfg_err(c, "%s= has an empty value: give one value per port, separated by ','", key);
    if (*n == SV_MAX_PORTS)
      return cfg_err(c, "%s= has more than %d values: give one per port, separated by ','", key, SV_MAX_PORTS);
    items[(*n)++] = item;
    if (!comma) return 0;
    item = comma + 1;
  }
}

static int parse_netdevs(const struct cfg *c, char *s, struct cfg_nic *nic) {
  char *items[SV_MAX_PORTS] = {0};
  if (split_list(c, "netdev", s, items, &nic->nnetdevs)) return -1;
  for (uint32_t i = 0; i < nic->nnetdevs; i++) {
    if (parse_name(c, "netdev", items[i], CFG_NETDEV_MAX)) return -1;
    snprintf(nic->netdev[i], sizeof(nic->netdev[i]), "%s", items[i]);
  }
  return 0;
}

static int parse_ips(const struct cfg *c, char *s, struct cfg_nic *nic) {
  char *items[SV_MAX_PORTS] = {0};
  struct in_addr a;
  if (split_list(c, "ip", s, items, &nic->nips)) return -1;
  for (uint32_t i = 0; i < nic->nips; i++) {
    /* inet_pton takes only the plain dotted quad: no octal, no short forms. */
    if (inet_pton(AF_INET, items[i], &a) != 1 || a.s_addr == 0)
      return cfg_err(c, "ip '%s' is invalid: use a dotted-quad IPv4 address such as 198.18.0.1", items[i]);
    nic->ipv4[i] = ntohl(a.s_addr);
  }
  return 0;
}

/* ---- nic lines ---- */

enum nic_key { K_LINK, K_RATE, K_LATENCY, K_PORTS, K_NUMA, K_PCI, K_NETDEV, K_IP, K_AR, K_ECE, K_DMABUF, K_COUNT };
static const char *const nic_keys[K_COUNT] = {"link",   "rate", "latency_us", "ports", "numa",  "pci",
                                              "netdev", "ip",   "ar",         "ece",   "dmabuf"};

static int nic_option(const struct cfg *c, enum nic_key k, char *v, struct cfg_nic *nic) {
  switch (k) {
  case K_LINK: return parse_link(c, v, &nic->link.link_layer);
  case K_RATE: return parse_rate(c, v, &nic->link.rate_gbps);
  case K_LATENCY: return parse_latency(c, v, &nic->link.latency_us);
  case K_PORTS: return parse_ports(c, v, &nic->link.nports);
  case K_NUMA: return parse_numa(c, v, &nic->numa);
  case K_PCI: return parse_pci(c, v, nic->pci, sizeof(nic->pci));
  case K_NETDEV: return parse_netdevs(c, v, nic);
  case K_IP: return parse_ips(c, v, nic);
  case K_AR: return parse_on_off(c, "ar", v, &nic->link.adaptive_routing);
  case K_ECE: nic->ece_given = true; return parse_ece(c, v, &nic->ece);
  case K_DMABUF: return parse_on_off(c, "dmabuf", v, &nic->link.dmabuf);
  case K_COUNT: break;
  }
  return -1;
}

/* Parse the key=value options of a nic line; each key at most once. */
static int nic_options(const struct cfg *c, char **tok, int ntok, struct cfg_nic *nic) {
  unsigned seen = 0;
  for (int i = 0; i < ntok; i++) {
    char *eq = strchr(tok[i], '=');
    int k = 0;
    if (!eq)
      return cfg_err(c,
                     "nic option '%s' has no value: write key=value with key link, rate, "
                     "latency_us, ports, numa, pci, netdev, ip, ar, ece or dmabuf",
                     tok[i]);
    *eq = '\0';
    while (k < K_COUNT && strcmp(tok[i], nic_keys[k]) != 0) k++;
    if (k == K_COUNT)
      return cfg_err(c,
                     "unknown nic option '%s': use link, rate, latency_us, ports, numa, pci, "
                     "netdev, ip, ar, ece or dmabuf",
                     tok[i]);
    if (seen & (1u << k)) return cfg_err(c, "nic option '%s' given twice: give each option at most once", tok[i]);
    seen |= 1u << k;
    if (nic_option(c, (enum nic_key)k, eq + 1, nic)) return -1;
  }
  return 0;
}

/* Options that only make sense together, checked once the line is read. */
static int nic_check(const struct cfg *c, const struct cfg_nic *nic) {
  if (nic->nips && nic->link.link_layer != IBV_LINK_LAYER_ETHERNET)
    return cfg_err(c,
                   "nic '%s': ip= is for RoCE nics (link=roce); InfiniBand ports have no IP "
                   "address in their GIDs",
                   nic->name);
  if (nic->nips > nic->link.nports || nic->nnetdevs > nic->link.nports)
    return cfg_err(c,
                   "nic '%s' has %u port(s) but %u ip and %u netdev values: give at most one "
                   "per port",
                   nic->name, nic->link.nports, nic->nips, nic->nnetdevs);
  return 0;
}

/* ---- turning a nic into a device ---- */

static void gid_set(union ibv_gid *g, uint64_t prefix, uint64_t iid) {
  for (int i = 0; i < 8; i++) {
    g->raw[i] = (uint8_t)(prefix >> (56 - 8 * i));
    g->raw[8 + i] = (uint8_t)(iid >> (56 - 8 * i));
  }
}

static void gid_set_ipv4(union ibv_gid *g, uint32_t ipv4) {
  memset(g->raw, 0, sizeof(g->raw));
  g->raw[10] = 0xff;
  g->raw[11] = 0xff;
  for (int i = 0; i < 4; i++) g->raw[12 + i] = (uint8_t)(ipv4 >> (24 - 8 * i));
}

/* 16 bits of the fabric's name for its GUIDs.  GUIDs are unique in the
 * world: two fabrics up on one machine at once (tests run side by side)
 * must not share them, or consumers that key what they learn by GUID (the
 * plugin's rate board in /dev/shm) mix up ports of different fabrics. */
static uint64_t fabric_tag(const char *name) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 16777619u;
  return (h ^ h >> 16) & 0xffffu;
}

/* RoCE link-local GIDs come from the netdev MAC (EUI-64: ff:fe in the middle,
 * universal/local bit flipped).  The MAC is made of the OUI and the low 24
 * bits of the port GUID, so every port gets a distinct one. */
static uint64_t roce_interface_id(uint64_t port_guid) {
  uint64_t mac = (CFG_GUID_BASE >> 40) << 24 | (port_guid & 0xffffffu);
  uint64_t oui = mac >> 24, nic = mac & 0xffffffu;
  return ((oui ^ 0x020000u) << 40) | (0xfffeull << 24) | nic;
}

static void port_gids(struct sv_port *p, uint64_t port_guid) {
  const uint64_t link_local = 0xfe80000000000000ull;
  if (p->link_layer == IBV_LINK_LAYER_INFINIBAND) {
    gid_set(&p->gids[0], link_local, port_guid);
    p->gid_types[0] = IBV_GID_TYPE_IB;
    p->ngids = 1;
    return;
  }
  /* The table mlx5 builds for a netdev with one IPv4 address. */
  gid_set(&p->gids[0], link_local, roce_interface_id(port_guid));
  p->gids[1] = p->gids[0];
  gid_set_ipv4(&p->gids[2], p->ipv4);
  p->gids[3] = p->gids[2];
  p->gid_types[0] = p->gid_types[2] = IBV_GID_TYPE_ROCE_V1;
  p->gid_types[1] = p->gid_types[3] = IBV_GID_TYPE_ROCE_V2;
  p->ngids = 4;
}

/* RoCE GIDs route traffic, so an IPv4 address may appear only once. */
static int check_ipv4_unique(const struct cfg *c, uint32_t ipv4) {
  const struct sv_fabric *f = c->f;
  for (uint32_t d = 0; d < f->ndevs; d++)
    for (uint32_t p = 0; p < f->devs[d].nports; p++)
      if (f->devs[d].ports[p].link_layer == IBV_LINK_LAYER_ETHERNET && f->devs[d].ports[p].ipv4 == ipv4)
        return cfg_err(c,
                       "ip %u.%u.%u.%u is already used by %s:%s:%u: give each RoCE port its own "
                       "address with ip=",
                       ipv4 >> 24, (ipv4 >> 16) & 0xff, (ipv4 >> 8) & 0xff, ipv4 & 0xff, f->hosts[f->devs[d].host].name,
                       f->devs[d].name, p + 1);
  return 0;
}

/* `dflt`: the name was not given but derived, which the message says, since
 * the clash is then with a name the user did not write on this line. */
static int check_netdev_unique(const struct cfg *c, const char *netdev, bool dflt) {
  const struct sv_fabric *f = c->f;
  for (uint32_t d = 0; d < f->ndevs; d++)
    for (uint32_t p = 0; p < f->devs[d].nports; p++)
      if ((int)f->devs[d].host == c->host && strcmp(f->devs[d].ports[p].netdev, netdev) == 0)
        return cfg_err(c,
                       "netdev '%s'%s is already used by nic %s port %u of this host: netdev "
                       "names must be unique within a host%s",
                       netdev, dflt ? " (the default name of this port)" : "", f->devs[d].name, p + 1,
                       dflt ? "; name this port with netdev=" : "");
  return 0;
}

/* In a host's namespace, lo and the management interface already exist. */
static int check_netdev_reserved(const struct cfg *c, const char *netdev) {
  if (c->netns && (strcmp(netdev, "lo") == 0 || strcmp(netdev, "mgmt0") == 0))
    return cfg_err(c,
                   "netdev '%s' is reserved with netns on (loopback and the management "
                   "interface): choose another name",
                   netdev);
  return 0;
}

/* Fill one port; `n` numbers the port within its host and names its
 * defaults.  Values are checked before they are stored so that a port never
 * collides with itself. */
static int port_fill(struct cfg *c, const struct cfg_nic *nic, uint32_t idx, uint64_t port_guid, struct sv_port *p) {
  uint32_t n = c->host_ports;
  char netdev[sizeof(p->netdev)] = "";
  bool given = idx < nic->nnetdevs;
  if (given)
    snprintf(netdev, sizeof(netdev), "%s", nic->netdev[idx]);
  else if (nic->link.link_layer == IBV_LINK_LAYER_ETHERNET) /* a RoCE port always has a netdev */
    snprintf(netdev, sizeof(netdev), "eth%u", n);
  else if (c->netns) /* the interface backing an IB port, named like IPoIB's */
    snprintf(netdev, sizeof(netdev), "ib%u", n);
  if (netdev[0] && (check_netdev_reserved(c, netdev) || check_netdev_unique(c, netdev, !given))) return -1;
  if (nic->link.link_layer == IBV_LINK_LAYER_INFINIBAND) {
    if (c->next_lid > 0xbfff) /* last unicast LID */
      return cfg_err(c, "out of InfiniBand LIDs: at most %u IB ports in one fabric", 0xbfffu);
    p->lid = (uint16_t)c->next_lid++;
  } else {
    uint32_t ipv4 = idx < nic->nips ? nic->ipv4[idx] : CFG_IPV4_NET | (n & 0xff) << 8 | ((uint32_t)c->host + 1);
    if (check_ipv4_unique(c, ipv4)) return -1;
    if (c->netns && (ipv4 & CFG_MGMT_MASK) == CFG_MGMT_NET)
      return cfg_err(c,
                     "ip %u.%u.%u.%u is in 198.18.255.0/24, the management network of a netns "
                     "fabric: give this port another address with ip=",
                     ipv4 >> 24, (ipv4 >> 16) & 0xff, (ipv4 >> 8) & 0xff, ipv4 & 0xff);
    p->ipv4 = ipv4;
  }
  memcpy(p->netdev, netdev, sizeof(p->netdev));
  p->link_layer = nic->link.link_layer;
  p->rate_gbps = nic->link.rate_gbps;
  p->latency_ns = nic->link.latency_us * 1000u;
  p->adaptive_routing = nic->link.adaptive_routing;
  port_gids(p, port_guid);
  atomic_store(&p->state, IBV_PORT_ACTIVE);
  c->host_ports++;
  return 0;
}

static int nic_unique(const struct cfg *c, const struct cfg_nic *nic) {
  const struct sv_fabric *f = c->f;
  for (uint32_t d = 0; d < f->ndevs; d++) {
    if ((int)f->devs[d].host != c->host) continue;
    if (strcmp(f->devs[d].name, nic->name) == 0)
      return cfg_err(c,
                     "nic '%s' is already defined on host '%s': nic names must be unique within "
                     "a host",
                     nic->name, f->hosts[c->host].name);
    if (strcmp(f->devs[d].pci, nic->pci) == 0)
      return cfg_err(c,
                     "pci %s is already used by nic '%s' of this host: give each nic its own "
                     "pci=",
                     nic->pci, f->devs[d].name);
  }
  return 0;
}

/* The device is counted before its ports are filled so that the uniqueness
 * checks see its earlier ports; a failure takes it back out. */
static int nic_add(struct cfg *c, const struct cfg_nic *nic) {
  struct sv_fabric *f = c->f;
  struct sv_device *d;
  if (f->ndevs >= SV_MAX_DEVS) return cfg_err(c, "too many nics: at most %d in one fabric (SV_MAX_DEVS)", SV_MAX_DEVS);
  if (nic_unique(c, nic)) return -1;
  d = &f->devs[f->ndevs++];
  d->host = (uint32_t)c->host;
  snprintf(d->name, sizeof(d->name), "%s", nic->name);
  /* GUID: host and nic position in the low bytes, the port in the lowest
   * bits of the port GUIDs.  A single-function ConnectX reports its node
   * GUID as sys_image_guid too; keeping them per nic stops NCCL-style
   * topology code from merging separate NICs into one multi-port NIC. */
  d->node_guid =
      CFG_GUID_BASE | fabric_tag(f->name) << 24 | ((uint64_t)c->host + 1) << 16 | (uint64_t)c->host_devs << 8;
  d->sys_image_guid = d->node_guid;
  snprintf(d->pci, sizeof(d->pci), "%s", nic->pci);
  d->numa_node = nic->numa;
  d->nports = nic->link.nports;
  d->vendor_id = CFG_VENDOR_ID;
  d->vendor_part_id = CFG_VENDOR_PART_ID;
  /* ECE is negotiated on RoCE connections: RoCE NICs offer it by default. */
  d->ece = nic->ece_given ? nic->ece : nic->link.link_layer == IBV_LINK_LAYER_ETHERNET ? CFG_ECE_DEFAULT : 0;
  d->dmabuf = nic->link.dmabuf;
  for (uint32_t p = 0; p < d->nports; p++)
    if (port_fill(c, nic, p, d->node_guid + p, &d->ports[p])) goto fail;
  d->in_use = 1;
  c->host_devs++;
  return 0;
fail:
  memset(d, 0, sizeof(*d));
  f->ndevs--;
  return -1;
}

static int do_nic(struct cfg *c, char **tok, int ntok) {
  struct cfg_nic nic;
  if (c->host < 0) return cfg_err(c, "'nic' before any 'host' line: start a host with 'host <name>' first");
  if (ntok < 2) return cfg_err(c, "'nic' needs a name: nic <name> [key=value ...]");
  if (parse_name(c, "nic", tok[1], SV_NAME_LEN - 1)) return -1;
  memset(&nic, 0, sizeof(nic));
  nic.name = tok[1];
  nic.link = c->defaults;
  /* Default PCI address: one bus per nic, as on a server with one NIC per
   * PCIe switch. */
  snprintf(nic.pci, sizeof(nic.pci), "0000:%02x:00.0", 0x10u + c->host_devs);
  if (nic_options(c, tok + 2, ntok - 2, &nic) || nic_check(c, &nic)) return -1;
  return nic_add(c, &nic);
}

/* ---- the other directives ---- */

static int do_host(struct cfg *c, const char *name) {
  struct sv_fabric *f = c->f;
  if (parse_name(c, "host", name, SV_NAME_LEN - 1)) return -1;
  if (c->netns && strcmp(name, "sw") == 0) /* sv-<fabric>-sw is the switch's namespace */
    return cfg_err(c,
                   "host name 'sw' is reserved with netns on (the switch's namespace is "
                   "sv-<fabric>-sw): choose another name");
  for (uint32_t h = 0; h < f->nhosts; h++)
    if (strcmp(f->hosts[h].name, name) == 0)
      return cfg_err(c, "host '%s' is already defined: host names must be unique", name);
  if (f->nhosts >= SV_MAX_HOSTS)
    return cfg_err(c, "too many hosts: at most %d in one fabric (SV_MAX_HOSTS)", SV_MAX_HOSTS);
  snprintf(f->hosts[f->nhosts].name, sizeof(f->hosts[f->nhosts].name), "%s", name);
  f->hosts[f->nhosts].in_use = 1;
  f->hosts[f->nhosts].peer_memory = c->peer_memory;
  c->host = (int)f->nhosts++;
  c->host_devs = 0;
  c->host_ports = 0;
  return 0;
}

/* `fabric <name>` declares which fabric the file is for; bringing it up under
 * another name is almost certainly a mix-up, so refuse it. */
static int do_fabric(struct cfg *c, const char *name) {
  if (c->fabric_seen) return cfg_err(c, "'fabric' given twice: a file describes one fabric");
  if (parse_name(c, "fabric", name, SV_NAME_LEN - 1)) return -1;
  c->fabric_seen = true;
  if (c->f->name[0] && strcmp(c->f->name, name) != 0)
    return cfg_err(c,
                   "this file is for fabric '%s' but fabric '%s' is being brought up: use "
                   "--fabric %s, or drop the 'fabric' line",
                   name, c->f->name, name);
  return 0;
}

/* `netns on|off`: a property of the whole fabric, so it must come before
 * the hosts it shapes (their names, their ports' interface names). */
static int do_netns(struct cfg *c, const char *v) {
  if (c->netns_seen) return cfg_err(c, "'netns' given twice: give it at most once");
  if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0) return cfg_err(c, "netns '%s' is invalid: use on or off", v);
  if (c->host >= 0)
    return cfg_err(c,
                   "'netns' after a 'host' line: put it before the first host, it applies to "
                   "the whole fabric");
  c->netns_seen = true;
  if (!c->netns_forced) c->netns = strcmp(v, "on") == 0;
  return 0;
}

static int do_directive(struct cfg *c, char **tok, int ntok) {
  const char *d = tok[0];
  bool one_arg = strcmp(d, "fabric") == 0 || strcmp(d, "host") == 0 || strcmp(d, "link") == 0 ||
                 strcmp(d, "rate") == 0 || strcmp(d, "latency_us") == 0 || strcmp(d, "ports") == 0 ||
                 strcmp(d, "netns") == 0 || strcmp(d, "adaptive_routing") == 0 || strcmp(d, "dmabuf") == 0 ||
                 strcmp(d, "peer_memory") == 0;
  if (strcmp(d, "nic") == 0) return do_nic(c, tok, ntok);
  if (!one_arg)
    return cfg_err(c,
                   "unknown directive '%s': use fabric, netns, link, rate, latency_us, ports, "
                   "adaptive_routing, dmabuf, peer_memory, host or nic",
                   d);
  if (ntok != 2) return cfg_err(c, "'%s' takes exactly one value: %s <value>", d, d);
  if (strcmp(d, "fabric") == 0) return do_fabric(c, tok[1]);
  if (strcmp(d, "netns") == 0) return do_netns(c, tok[1]);
  if (strcmp(d, "host") == 0) return do_host(c, tok[1]);
  if (strcmp(d, "link") == 0) return parse_link(c, tok[1], &c->defaults.link_layer);
  if (strcmp(d, "rate") == 0) return parse_rate(c, tok[1], &c->defaults.rate_gbps);
  if (strcmp(d, "latency_us") == 0) return parse_latency(c, tok[1], &c->defaults.latency_us);
  if (strcmp(d, "adaptive_routing") == 0)
    return parse_on_off(c, "adaptive_routing", tok[1], &c->defaults.adaptive_routing);
  if (strcmp(d, "dmabuf") == 0) return parse_on_off(c, "dmabuf", tok[1], &c->defaults.dmabuf);
  if (strcmp(d, "peer_memory") == 0) return parse_on_off(c, "peer_memory", tok[1], &c->peer_memory);
  return parse_ports(c, tok[1], &c->defaults.nports);
}

/* Strip the comment, split on blanks; returns the token count or -1. */
static int tokenize(const struct cfg *c, char *line, char **tok) {
  int n = 0;
  char *save = NULL;
  char *hash = strchr(line, '#');
  if (hash) *hash = '\0';
  for (char *t = strtok_r(line, " \t\r\n\v\f", &save); t; t = strtok_r(NULL, " \t\r\n\v\f", &save)) {
    if (n == CFG_MAX_TOKENS) return cfg_err(c, "too many words on one line: at most %d", CFG_MAX_TOKENS);
    tok[n++] = t;
  }
  return n;
}

static int parse_line(struct cfg *c, char *line, ssize_t len) {
  char *tok[CFG_MAX_TOKENS];
  int ntok;
  if (len > CFG_LINE_MAX) return cfg_err(c, "line too long: at most %d characters", CFG_LINE_MAX);
  if ((size_t)len != strlen(line)) return cfg_err(c, "line contains a NUL byte: the file must be plain text");
  ntok = tokenize(c, line, tok);
  if (ntok <= 0) return ntok;
  return do_directive(c, tok, ntok);
}

static int parse_stream(struct cfg *c, FILE *in) {
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  int rc = 0;
  errno = 0;
  while (rc == 0 && (len = getline(&line, &cap, in)) >= 0) {
    c->line++;
    rc = parse_line(c, line, len);
  }
  free(line);
  if (rc) return rc;
  if (ferror(in)) return cfg_err(c, "read error: %s", strerror(errno ? errno : EIO));
  if (c->f->nhosts == 0)
    return cfg_err(c, "no 'host' line: a fabric needs at least one host (host <name>, then nic lines)");
  return 0;
}

/* Leave no half-loaded topology behind: a failed load leaves empty tables. */
static void config_reset(struct sv_fabric *f) {
  memset(f->hosts, 0, sizeof(f->hosts));
  memset(f->devs, 0, sizeof(f->devs));
  f->nhosts = 0;
  f->ndevs = 0;
}

/* f->netns on entry: 1 when the caller asks for namespaces whatever the
 * file says (`simverbs up --netns`).  On success it holds the outcome. */
int sv_config_load(struct sv_fabric *f, const char *path) {
  struct cfg c = {
      .f = f,
      .path = path,
      .defaults =
          {.link_layer = IBV_LINK_LAYER_INFINIBAND, .rate_gbps = 100, .latency_us = 1, .nports = 1, .dmabuf = 1},
      .host = -1,
      .next_lid = 1,
      .netns_forced = f->netns != 0,
      .netns = f->netns != 0,
  };
  struct stat st;
  FILE *in;
  int rc;
  if (f->nhosts || f->ndevs) {
    fprintf(stderr, "%s: the fabric already has a topology: load a config only into a fresh fabric\n", path);
    return -1;
  }
  in = fopen(path, "re");
  if (!in) {
    fprintf(stderr, "%s: cannot open the config file: %s\n", path, strerror(errno));
    return -1;
  }
  if (fstat(fileno(in), &st) == 0 && S_ISDIR(st.st_mode)) {
    fprintf(stderr, "%s: is a directory: give the path of a config file\n", path);
    fclose(in);
    return -1;
  }
  rc = parse_stream(&c, in);
  fclose(in);
  if (rc)
    config_reset(f);
  else
    f->netns = c.netns ? 1u : 0u;
  return rc;
}
