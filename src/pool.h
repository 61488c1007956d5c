/*
 * NIC pools: for each device NCCL sees, the NICs its connections may move
 * to, nearest first.  The primary comes first, then the node's other NICs
 * ordered by closeness to it: behind the same PCIe switch, then on the same
 * NUMA node, then the rest — so a moved connection keeps as much of its
 * data path local as the machine allows.  An operator can also spell the
 * pools out (LINKPASS_NIC_POOL).
 *
 * Pure: the NIC descriptions are inputs, so unit tests can build machines.
 */
#ifndef LP_POOL_H
#define LP_POOL_H

#include <stddef.h>

/* Devices a pool can hold: as many as nic.h lets discovery keep
 * (LP_MAX_DEVS; env.c checks), so every device gets a pool of all the
 * others: a device past the limit would have none, and its connections
 * could never move. */
#define LP_POOL_MAX 64
#define LP_POOL_NAME_MAX 64

/* One device: a port of a NIC.  A dual-port NIC gives two, with one name. */
struct lp_pool_nic {
  char name[LP_POOL_NAME_MAX]; /* the NIC's */
  const char *pci_path;        /* resolved sysfs device path, "" when unknown */
  int numa;                    /* -1 unknown */
  int port;                    /* 1-based; 0 unknown, then only the bare name names it */
};

/* Fill order[0..n-1] for `primary`: primary first, then by closeness, ties
 * by index.  Returns n. */
int lp_pool_order(const struct lp_pool_nic *nics, int n, int primary, int *order);

/* Explicit pools: "mlx5_0=mlx5_2,mlx5_1;mlx5_1:2=mlx5_3:1".  A name is
 * NIC:PORT (that port) or a bare NIC (every port of it, in port order), on
 * either side of '='.  For `primary`, writes the device indices of its list
 * (primary first, then the named ones not listed yet, unnamed devices left
 * out) into order and returns how many; a later entry naming `primary`
 * replaces an earlier one.  Returns 0 when the spec does not name `primary`
 * (use lp_pool_order), -1 with a reason when the spec is malformed, names an
 * unknown NIC or port, or a name adds no device not already listed. */
int lp_pool_parse(const char *spec, const struct lp_pool_nic *nics, int n, int primary, int *order, char *why,
                  size_t whylen);

/* Choose where a connection moves: among `order` (len n) the healthy NIC
 * with the fewest connections (`load`), earlier in the pool on ties.
 * `healthy[i]`/`load[i]` are indexed by NIC.  -1 when none is healthy. */
int lp_pool_pick(const int *order, int n, const int *healthy, const int *load);

#endif
