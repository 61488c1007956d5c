/*
 * NICs and the devices NCCL sees.
 *
 * struct lp_nic owns what belongs to one opened HCA (verbs context and
 * protection domain); struct lp_dev is one ACTIVE port of a NIC, which is
 * what NCCL calls a device.  Everything a connection creates on a NIC (CQ,
 * QPs, registrations) hangs off the NIC's PD, so a connection can later be
 * rebuilt on another NIC by creating the same resources there.
 */
#ifndef LP_NIC_H
#define LP_NIC_H

#include <infiniband/verbs.h>
#include <net/if.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "gray.h"
#include "ibv.h"

#define LP_MAX_NICS 32
#define LP_MAX_DEVS 64
#define LP_DEV_NAME_MAX 64
#define LP_PATH_MAX 4096 /* PATH_MAX, without needing POSIX feature macros in users */

struct lp_nic {
  char name[LP_DEV_NAME_MAX];
  char ibdev_path[256];
  char pci_path[LP_PATH_MAX];
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_device_attr attr;
  int numa;   /* NUMA node of its PCI device, -1 unknown */
  int dmabuf; /* registers dma-bufs (gdr.h): NCCL_PTR_DMABUF is advertised on its ports */
};

struct lp_dev {
  int nic;  /* index in lp_env.nics */
  int port; /* 1-based */
  char name[LP_DEV_NAME_MAX];
  int link_layer; /* IBV_LINK_LAYER_INFINIBAND / _ETHERNET */
  int speed_mbps;
  enum ibv_mtu active_mtu;
  uint16_t lid;
  int gid_index; /* the GID used for RoCE (and reported for IB) */
  union ibv_gid gid;
  int gid_type; /* IBV_GID_TYPE_*, -1 unknown */
};

/* Port speed in Mbps from the verbs width/speed encodings (NCCL's tables). */
int lp_port_speed_mbps(uint8_t active_width, uint8_t active_speed);

/* Open every device, keep the ACTIVE IB/Ethernet ports that NCCL_IB_HCA lets
 * through.  Returns the number of devices found (0 is not an error here). */
int lp_nic_discover(const struct lp_ibv *ibv, const struct lp_config *cfg, struct lp_nic *nics, int *nnics,
                    struct lp_dev *devs, int max_devs);

/* A PCI path's last component, DDDD:BB:DD.F, as one number that orders
 * addresses; -1 when the path does not end with one. */
long long lp_pci_path_id(const char *path);

/* NCCL_IB_DEVICE_PCI_ORDER: devices in their NICs' PCI address order (a
 * stable sort: a NIC's ports keep their order; unknown addresses last), so
 * that device numbers mean the same NIC on every node. */
void lp_dev_sort_pci(struct lp_dev *devs, int ndevs, const struct lp_nic *nics);

/* NCCL_IB_SUBNET_AWARE_ROUTING: the device to connect from to reach a
 * listener whose RoCE GID is `peer_gid`: `dev` itself when its GID's IPv4
 * address shares the first `prefix` bits with the peer's (or when either is
 * not an IPv4-mapped GID), else the first device whose GID does, else `dev`. */
int lp_subnet_pick(const struct lp_dev *devs, int ndevs, int dev, const uint8_t *peer_gid, int prefix);

/* The netdev behind a RoCE port: the first line of
 * <ibdev_path>/ports/<port>/gid_attrs/ndevs/<gid_index>.  0, or -1. */
int lp_gid_netdev(const char *ibdev_path, int port, int gid_index, char *out, size_t len);

/* The network interfaces the NICs back, which the control channel must not
 * depend on: every entry of <PCI device>/net/ (RoCE netdevs, IPoIB
 * interfaces) and each RoCE port's GID netdev (a VLAN or bond above it).
 * Fills up to `max` names of LP_IFNAME_MAX bytes; returns how many. */
#define LP_IFNAME_MAX IF_NAMESIZE
int lp_nic_netdevs(const struct lp_nic *nics, int nnics, const struct lp_dev *devs, int ndevs,
                   char (*out)[LP_IFNAME_MAX], int max);

/* A port's counters from sysfs, as mlx5 exposes them (gray.h).  0, or -1
 * when the port has no packet or resend counters (out->ok 0; bytes_ok says
 * whether port_xmit_data was read either way). */
int lp_port_counters(const struct lp_nic *nic, int port, struct lp_port_counters *out);

/* Close everything discover opened. */
void lp_nic_close_all(const struct lp_ibv *ibv, struct lp_nic *nics, int nnics);

/* Re-read the port (LID, MTU) and choose the GID, right before a
 * connection uses it: addresses can change after init.  The first call (at
 * discovery) also sets the link layer and speed, which stay as found.
 * `dev` is the caller's own copy.  0 or -1. */
int lp_dev_refresh(const struct lp_ibv *ibv, const struct lp_config *cfg, const struct lp_nic *nic, struct lp_dev *dev);

/* Automatic GID choice (pure, for tests): given the table, pick the index
 * NCCL would: the preferred RoCE version with an IPv4-mapped address first,
 * then that version with any non-link-local address, then any usable entry.
 * types[i] is IBV_GID_TYPE_* or -1 when unknown.  Returns -1 when none. */
int lp_gid_pick(const union ibv_gid *gids, const int *types, int n, int roce_version, int family,
                const struct lp_addr_range *range);

/* "fe80::1" style text for logs. */
const char *lp_gid_str(const union ibv_gid *gid, char *buf, size_t len);

#endif
