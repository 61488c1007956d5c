/* Port speed, automatic GID selection, device order and the NICs' interfaces. */
#define _GNU_SOURCE /* mkdtemp */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "log.h"
#include "../lib/warn_capture.h"
#include "nic.h"

Test(nic, speed_from_width_and_speed) {
  cr_expect_eq(lp_port_speed_mbps(2, 32), 100000, "4X EDR");
  cr_expect_eq(lp_port_speed_mbps(2, 64), 200000, "4X HDR");
  cr_expect_eq(lp_port_speed_mbps(1, 1), 2500, "1X SDR");
  cr_expect_eq(lp_port_speed_mbps(2, 128), 400000, "4X NDR");
  cr_expect_eq(lp_port_speed_mbps(16, 32), 50000, "2X EDR");
  cr_expect_eq(lp_port_speed_mbps(8, 4), 120000, "12X QDR");
}

static union ibv_gid gid_of(const char *text) {
  union ibv_gid g;
  memset(&g, 0, sizeof(g));
  if (text) inet_pton(AF_INET6, text, g.raw);
  return g;
}

/* mlx5's usual table: link-local v1, v2, then IPv4-mapped v1, v2. */
Test(nic, gid_prefers_roce_v2_ipv4) {
  union ibv_gid g[4] = {gid_of("fe80::1"), gid_of("fe80::1"), gid_of("::ffff:198.18.0.1"), gid_of("::ffff:198.18.0.1")};
  int t[4] = {IBV_GID_TYPE_ROCE_V1, IBV_GID_TYPE_ROCE_V2, IBV_GID_TYPE_ROCE_V1, IBV_GID_TYPE_ROCE_V2};
  cr_expect_eq(lp_gid_pick(g, t, 4, 2, LP_FAMILY_ANY, NULL), 3);
  cr_expect_eq(lp_gid_pick(g, t, 4, 1, LP_FAMILY_ANY, NULL), 2);
}

Test(nic, gid_skips_empty_and_handles_ipv6) {
  union ibv_gid g[5] = {gid_of(NULL), gid_of("fe80::1"), gid_of("fd00::2"), gid_of("fd00::2"),
                        gid_of("::ffff:10.0.0.1")};
  int t[5] = {-1, IBV_GID_TYPE_ROCE_V2, IBV_GID_TYPE_ROCE_V1, IBV_GID_TYPE_ROCE_V2, IBV_GID_TYPE_ROCE_V1};
  cr_expect_eq(lp_gid_pick(g, t, 5, 2, LP_FAMILY_INET6, NULL), 3);
  cr_expect_eq(lp_gid_pick(g, t, 1, 2, LP_FAMILY_ANY, NULL), -1, "an all-zero table has no GID");
  int unknown[5] = {-1, -1, -1, -1, -1};
  cr_expect_eq(lp_gid_pick(g, unknown, 5, 2, LP_FAMILY_ANY, NULL), 4, "unknown types: an IPv4 address first");
}

static struct lp_addr_range range4(const char *net, int prefix) {
  struct lp_addr_range r = {.set = 1, .family = LP_FAMILY_INET, .prefix = prefix};
  inet_pton(AF_INET, net, r.addr);
  return r;
}

/* NCCL_IB_ADDR_RANGE: only GIDs in the subnet are candidates. */
Test(nic, gid_range_filters_candidates) {
  union ibv_gid g[6] = {gid_of("fe80::1"),           gid_of("fe80::1"),         gid_of("::ffff:198.18.0.1"),
                        gid_of("::ffff:198.18.0.1"), gid_of("::ffff:10.1.2.3"), gid_of("::ffff:10.1.2.3")};
  int t[6] = {IBV_GID_TYPE_ROCE_V1, IBV_GID_TYPE_ROCE_V2, IBV_GID_TYPE_ROCE_V1,
              IBV_GID_TYPE_ROCE_V2, IBV_GID_TYPE_ROCE_V1, IBV_GID_TYPE_ROCE_V2};
  struct lp_addr_range ten = range4("10.0.0.0", 8), bench = range4("198.18.0.0", 15), none = range4("172.16.0.0", 12);
  cr_expect_eq(lp_gid_pick(g, t, 6, 2, LP_FAMILY_INET, NULL), 3, "without a range: the first v2 IPv4 GID");
  cr_expect_eq(lp_gid_pick(g, t, 6, 2, LP_FAMILY_INET, &ten), 5);
  cr_expect_eq(lp_gid_pick(g, t, 6, 1, LP_FAMILY_INET, &ten), 4);
  cr_expect_eq(lp_gid_pick(g, t, 6, 2, LP_FAMILY_INET, &bench), 3);
  cr_expect_eq(lp_gid_pick(g, t, 6, 2, LP_FAMILY_INET, &none), -1, "a range that matches nothing leaves nothing");
  struct lp_addr_range ll = {.set = 1, .family = LP_FAMILY_INET6, .prefix = 10};
  inet_pton(AF_INET6, "fe80::", ll.addr);
  cr_expect_eq(lp_gid_pick(g, t, 6, 2, LP_FAMILY_INET6, &ll), 1, "an IPv6 range compares the whole GID");
  cr_expect_eq(lp_gid_pick(g, t, 6, 2, LP_FAMILY_INET6, NULL), 1, "AF_INET6: no IPv4-mapped GID preferred");
}

Test(nic, addr_in_range_prefix_bits) {
  struct lp_addr_range r = range4("10.128.0.0", 9);
  uint8_t in[4] = {10, 200, 1, 1}, out[4] = {10, 100, 1, 1};
  cr_expect(lp_addr_in_range(&r, in));
  cr_expect(!lp_addr_in_range(&r, out));
  struct lp_addr_range all = range4("0.0.0.0", 0);
  cr_expect(lp_addr_in_range(&all, out), "/0 holds everything");
}

/* NCCL_IB_DEVICE_PCI_ORDER: the address is the path's last component. */
Test(nic, pci_path_ids_order_addresses) {
  cr_expect_eq(lp_pci_path_id("/sys/devices/pci0000:00/0000:00:01.0/0000:17:00.0"), 0x1700ll);
  cr_expect_eq(lp_pci_path_id("0001:b1:00.1"), 0x1b101ll);
  cr_expect_lt(lp_pci_path_id("/x/0000:17:00.0"), lp_pci_path_id("/x/0000:17:00.1"));
  cr_expect_lt(lp_pci_path_id("/x/0000:17:1f.7"), lp_pci_path_id("/x/0000:18:00.0"));
  cr_expect_lt(lp_pci_path_id("/x/0000:ff:1f.7"), lp_pci_path_id("/x/0001:00:00.0"));
  cr_expect_eq(lp_pci_path_id("/sys/class/infiniband/mlx5_0/device"), -1);
  cr_expect_eq(lp_pci_path_id("/x/0000:17:00.0x"), -1);
  cr_expect_eq(lp_pci_path_id(""), -1);
}

Test(nic, devices_sort_by_pci_address_stably_unknown_last) {
  struct lp_nic nics[3];
  memset(nics, 0, sizeof(nics));
  snprintf(nics[0].pci_path, sizeof(nics[0].pci_path), "/sys/devices/pci0000:80/0000:b1:00.0");
  snprintf(nics[1].pci_path, sizeof(nics[1].pci_path), "/nowhere");
  snprintf(nics[2].pci_path, sizeof(nics[2].pci_path), "/sys/devices/pci0000:00/0000:17:00.0");
  struct lp_dev devs[5] = {{.nic = 0, .port = 1},
                           {.nic = 0, .port = 2},
                           {.nic = 1, .port = 1},
                           {.nic = 2, .port = 1},
                           {.nic = 2, .port = 2}};
  lp_dev_sort_pci(devs, 5, nics);
  const int nic[5] = {2, 2, 0, 0, 1}, port[5] = {1, 2, 1, 2, 1};
  for (int i = 0; i < 5; i++) {
    cr_expect_eq(devs[i].nic, nic[i], "device %d: NIC %d, expected %d", i, devs[i].nic, nic[i]);
    cr_expect_eq(devs[i].port, port[i], "device %d: port %d, expected %d", i, devs[i].port, port[i]);
  }
}

static struct lp_dev roce_dev(const char *ipv4) {
  struct lp_dev d;
  memset(&d, 0, sizeof(d));
  d.link_layer = IBV_LINK_LAYER_ETHERNET;
  d.gid.raw[10] = d.gid.raw[11] = 0xff;
  cr_assert_eq(inet_pton(AF_INET, ipv4, &d.gid.raw[12]), 1);
  return d;
}

/* NCCL_IB_SUBNET_AWARE_ROUTING: a device on the listener's subnet. */
Test(nic, subnet_pick_prefers_the_listeners_subnet) {
  struct lp_dev devs[3] = {roce_dev("10.0.0.1"), roce_dev("10.0.1.1"), roce_dev("10.0.2.1")};
  struct lp_dev peer = roce_dev("10.0.2.7");
  cr_expect_eq(lp_subnet_pick(devs, 3, 0, peer.gid.raw, 24), 2, "mlx5_2 shares 10.0.2.0/24");
  cr_expect_eq(lp_subnet_pick(devs, 3, 2, peer.gid.raw, 24), 2, "already on it");
  cr_expect_eq(lp_subnet_pick(devs, 3, 1, peer.gid.raw, 16), 1, "every device shares 10.0.0.0/16");
  struct lp_dev far = roce_dev("192.168.0.1");
  cr_expect_eq(lp_subnet_pick(devs, 3, 1, far.gid.raw, 24), 1, "no device on it: NCCL's choice");
  uint8_t zero[16] = {0};
  cr_expect_eq(lp_subnet_pick(devs, 3, 1, zero, 24), 1, "a listener without a GID in its handle");
  devs[2].link_layer = IBV_LINK_LAYER_INFINIBAND;
  cr_expect_eq(lp_subnet_pick(devs, 3, 0, peer.gid.raw, 24), 0, "InfiniBand ports have no subnet to match");
  struct lp_dev edge = roce_dev("10.0.2.255");
  cr_expect_eq(lp_subnet_pick(devs, 2, 0, edge.gid.raw, 32), 0, "a /32 matches one address only");
}

/* The interfaces the control channel avoids, from a sysfs-shaped tree. */
Test(nic, netdevs_of_the_nics_from_sysfs) {
  char root[] = "/tmp/lpnetdevs.XXXXXX";
  cr_assert_not_null(mkdtemp(root));
  char cmd[512];
  snprintf(cmd, sizeof(cmd),
           "mkdir -p %s/pci0/net/ens1f0np0 %s/pci0/net/ib0 %s/pci1 %s/ib/mlx5_0/ports/1/gid_attrs/ndevs && "
           "echo ens1f0np0.100 > %s/ib/mlx5_0/ports/1/gid_attrs/ndevs/3",
           root, root, root, root, root);
  cr_assert_eq(system(cmd), 0);
  struct lp_nic nics[2];
  memset(nics, 0, sizeof(nics));
  snprintf(nics[0].pci_path, sizeof(nics[0].pci_path), "%s/pci0", root);
  snprintf(nics[0].ibdev_path, sizeof(nics[0].ibdev_path), "%s/ib/mlx5_0", root);
  snprintf(nics[1].pci_path, sizeof(nics[1].pci_path), "%s/pci1", root); /* no net/ */
  struct lp_dev devs[2] = {{.nic = 0, .port = 1, .link_layer = IBV_LINK_LAYER_ETHERNET, .gid_index = 3},
                           {.nic = 1, .port = 1, .link_layer = IBV_LINK_LAYER_INFINIBAND, .gid_index = 0}};
  char names[8][LP_IFNAME_MAX];
  int n = lp_nic_netdevs(nics, 2, devs, 2, names, 8);
  cr_expect_eq(n, 3, "%d names", n);
  int seen = 0;
  for (int i = 0; i < n; i++) {
    seen |= strcmp(names[i], "ens1f0np0") == 0 ? 1 : 0;
    seen |= strcmp(names[i], "ib0") == 0 ? 2 : 0;
    seen |= strcmp(names[i], "ens1f0np0.100") == 0 ? 4 : 0;
  }
  cr_expect_eq(seen, 7, "the PCI function's interfaces and the RoCE GID's netdev (a VLAN above it)");
  cr_expect_eq(lp_nic_netdevs(nics, 2, devs, 2, names, 1), 1, "bounded by the room given");
  snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
  cr_assert_eq(system(cmd), 0);
}

/* Discovery over a verbs library that offers one NIC with two usable
 * ports, where linkpass has room for none: what does not fit is said (it
 * was left out without a word). */
static struct ibv_device fake_dev = {.name = "fake_0", .ibdev_path = "/nonexistent/fake_0"};
static struct ibv_device *fake_list[] = {&fake_dev, NULL};
static struct ibv_context fake_ctx;

static struct ibv_device **fake_get_list(int *n) {
  *n = 1;
  return fake_list;
}
static void fake_free_list(struct ibv_device **l) { (void)l; }
static const char *fake_name(struct ibv_device *d) { return d->name; }
static struct ibv_context *fake_open(struct ibv_device *d) {
  (void)d;
  return &fake_ctx;
}
static int fake_close(struct ibv_context *c) {
  (void)c;
  return 0;
}
static int fake_query_device(struct ibv_context *c, struct ibv_device_attr *a) {
  (void)c;
  memset(a, 0, sizeof(*a));
  a->phys_port_cnt = 2;
  return 0;
}
static int fake_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a) {
  (void)c, (void)port;
  a->state = IBV_PORT_ACTIVE;
  a->link_layer = IBV_LINK_LAYER_INFINIBAND;
  return 0;
}
Test(nic, ports_beyond_the_devices_linkpass_has_room_for_are_said) {
  struct lp_ibv ibv = {.get_device_list = fake_get_list,
                       .free_device_list = fake_free_list,
                       .get_device_name = fake_name,
                       .open_device = fake_open,
                       .close_device = fake_close,
                       .query_device = fake_query_device,
                       .query_port = fake_query_port};
  struct lp_config cfg;
  memset(&cfg, 0, sizeof(cfg));
  static struct lp_nic nics[LP_MAX_NICS];
  struct lp_dev devs[1];
  int nnics = -1;
  lp_test_warned[0] = '\0';
  lp_log_set_logger(lp_test_capture_warn);
  int n = lp_nic_discover(&ibv, &cfg, nics, &nnics, devs, 0);
  lp_log_set_logger(NULL);
  cr_assert_eq(n, 0);
  cr_assert_eq(nnics, 0);
  cr_assert(strstr(lp_test_warned, "2 usable ports left out") != NULL, "warned: \"%s\"", lp_test_warned);
  cr_assert(strstr(lp_test_warned, "NCCL_IB_HCA") != NULL, "warned: \"%s\"", lp_test_warned);
}
