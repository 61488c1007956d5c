/* NIC pools: closeness order, explicit pools, choosing where to move. */
#include <criterion/criterion.h>
#include <string.h>

#include "pool.h"

/* A 4-NIC machine: 0 and 1 behind one PCIe switch on NUMA 0, 2 alone on
 * NUMA 0's other root port, 3 on NUMA 1. */
static const struct lp_pool_nic machine[] = {
    {"mlx5_0", "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:03:00.0", 0, 1},
    {"mlx5_1", "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:02.0/0000:04:00.0", 0, 1},
    {"mlx5_2", "/sys/devices/pci0000:00/0000:00:03.0/0000:17:00.0", 0, 1},
    {"mlx5_3", "/sys/devices/pci0000:80/0000:80:01.0/0000:b1:00.0", 1, 1},
};

Test(pool, primary_first_then_switch_then_numa_then_rest) {
  int order[4];
  cr_assert_eq(lp_pool_order(machine, 4, 0, order), 4);
  cr_assert_arr_eq(order, ((int[]){0, 1, 2, 3}), sizeof(order));
  cr_assert_eq(lp_pool_order(machine, 4, 3, order), 4);
  cr_assert_eq(order[0], 3);
  cr_assert_arr_eq(order + 1, ((int[]){0, 1, 2}), 3 * sizeof(int), "no NIC shares NUMA 1: by index");
  cr_assert_eq(lp_pool_order(machine, 4, 2, order), 4);
  cr_assert_arr_eq(order, ((int[]){2, 0, 1, 3}), sizeof(order), "same NUMA before the other socket");
}

Test(pool, numa_decides_when_pci_paths_are_flat) {
  const struct lp_pool_nic flat[] = {{"a", "/x/sys/devices/pci0000:00/0000:10:00.0", 1, 1},
                                     {"b", "/x/sys/devices/pci0000:00/0000:11:00.0", 0, 1},
                                     {"c", "/x/sys/devices/pci0000:00/0000:12:00.0", 1, 1},
                                     {"d", "", -1, 1}};
  int order[4];
  lp_pool_order(flat, 4, 0, order);
  cr_assert_arr_eq(order, ((int[]){0, 2, 1, 3}), sizeof(order));
}

Test(pool, explicit_pool_is_used_as_written) {
  int order[4];
  char why[128];
  cr_assert_eq(lp_pool_parse("mlx5_0=mlx5_3,mlx5_2;mlx5_1=mlx5_0", machine, 4, 0, order, why, sizeof(why)), 3);
  cr_assert_arr_eq(order, ((int[]){0, 3, 2}), 3 * sizeof(int));
  cr_assert_eq(lp_pool_parse("mlx5_0=mlx5_3,mlx5_2;mlx5_1=mlx5_0", machine, 4, 1, order, why, sizeof(why)), 2);
  cr_assert_eq(lp_pool_parse("mlx5_1=mlx5_0", machine, 4, 2, order, why, sizeof(why)), 0, "not mentioned");
}

Test(pool, malformed_explicit_pools_are_rejected_with_a_reason) {
  int order[4];
  char why[128];
  cr_assert_eq(lp_pool_parse("mlx5_0", machine, 4, 0, order, why, sizeof(why)), -1);
  cr_assert(strstr(why, "NIC=NIC"), "%s", why);
  cr_assert_eq(lp_pool_parse("mlx5_0=mlx5_9", machine, 4, 0, order, why, sizeof(why)), -1);
  cr_assert(strstr(why, "mlx5_9"), "%s", why);
  cr_assert_eq(lp_pool_parse("eth0=mlx5_1", machine, 4, 0, order, why, sizeof(why)), -1);
  cr_assert_eq(lp_pool_parse("mlx5_0=mlx5_1,mlx5_1", machine, 4, 0, order, why, sizeof(why)), -1);
  cr_assert(strstr(why, "twice"), "%s", why);
  /* a NIC whose pool names nothing else would never move */
  cr_assert_eq(lp_pool_parse("mlx5_0=", machine, 4, 0, order, why, sizeof(why)), -1);
  cr_assert(strstr(why, "NIC=NIC"), "%s", why);
  cr_assert_eq(lp_pool_parse("mlx5_0=;mlx5_1=mlx5_0", machine, 4, 1, order, why, sizeof(why)), -1);
}

Test(pool, pick_least_loaded_healthy_then_pool_order) {
  int order[] = {0, 1, 2, 3};
  int healthy[] = {0, 1, 1, 1}, load[] = {9, 2, 1, 1};
  cr_assert_eq(lp_pool_pick(order, 4, healthy, load), 2, "least loaded, earlier in the pool on ties");
  healthy[2] = 0;
  cr_assert_eq(lp_pool_pick(order, 4, healthy, load), 3);
  int none[] = {0, 0, 0, 0};
  cr_assert_eq(lp_pool_pick(order, 4, none, load), -1);
}

/* Two dual-port NICs around a single-port one, numbered as discovery does:
 * mlx5_0:1 mlx5_0:2 mlx5_1:1 mlx5_2:1 mlx5_2:2. */
static const struct lp_pool_nic ports[] = {
    {"mlx5_0", "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0", 0, 1},
    {"mlx5_0", "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0", 0, 2},
    {"mlx5_1", "/sys/devices/pci0000:00/0000:00:02.0/0000:02:00.0", 0, 1},
    {"mlx5_2", "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0", 1, 1},
    {"mlx5_2", "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0", 1, 2},
};

static int parse5(const char *spec, int primary, int *order, char *why) {
  return lp_pool_parse(spec, ports, 5, primary, order, why, 128);
}

Test(pool, nic_port_names_one_port_of_a_dual_port_nic) {
  int order[5];
  char why[128];
  cr_assert_eq(parse5("mlx5_0:2=mlx5_2:2,mlx5_1", 1, order, why), 3, "%s", why);
  cr_assert_arr_eq(order, ((int[]){1, 4, 2}), 3 * sizeof(int));
  cr_assert_eq(parse5("mlx5_0:2=mlx5_2:2,mlx5_1", 0, order, why), 0, "mlx5_0:1 is not named");
  cr_assert_eq(parse5("mlx5_1:1=mlx5_0", 2, order, why), 3, "a single-port NIC's port can be named too");
  cr_assert_arr_eq(order, ((int[]){2, 0, 1}), 3 * sizeof(int));
}

Test(pool, a_bare_name_is_every_port_in_port_order) {
  int order[5];
  char why[128];
  cr_assert_eq(parse5("mlx5_1=mlx5_2", 2, order, why), 3, "%s", why);
  cr_assert_arr_eq(order, ((int[]){2, 3, 4}), 3 * sizeof(int), "on the right: both ports of mlx5_2");
  cr_assert_eq(parse5("mlx5_0=mlx5_1", 0, order, why), 2);
  cr_assert_arr_eq(order, ((int[]){0, 2}), 2 * sizeof(int), "on the left: the pool of each port");
  cr_assert_eq(parse5("mlx5_0=mlx5_1", 1, order, why), 2);
  cr_assert_arr_eq(order, ((int[]){1, 2}), 2 * sizeof(int));
  cr_assert_eq(parse5("mlx5_0=mlx5_0,mlx5_1", 1, order, why), 3, "%s", why);
  cr_assert_arr_eq(order, ((int[]){1, 0, 2}), 3 * sizeof(int), "its own NIC: the sibling port first");
  cr_assert_eq(parse5("mlx5_1=mlx5_2:2,mlx5_2", 2, order, why), 3, "%s", why);
  cr_assert_arr_eq(order, ((int[]){2, 4, 3}), 3 * sizeof(int), "one port first, then the rest of its NIC");
  cr_assert_eq(parse5("mlx5_0=mlx5_1;mlx5_0:2=mlx5_2", 1, order, why), 3, "%s", why);
  cr_assert_arr_eq(order, ((int[]){1, 3, 4}), 3 * sizeof(int), "a later entry for one port replaces the NIC's");
  cr_assert_eq(parse5("mlx5_0=mlx5_1;mlx5_0:2=mlx5_2", 0, order, why), 2);
}

Test(pool, unknown_or_repeated_ports_are_rejected_with_a_reason) {
  int order[5];
  char why[128];
  cr_assert_eq(parse5("mlx5_0=mlx5_2:3", 0, order, why), -1);
  cr_assert(strstr(why, "unknown port 'mlx5_2:3'") && strstr(why, "pool of mlx5_0:1"), "%s", why);
  cr_assert_eq(parse5("mlx5_0:3=mlx5_1", 0, order, why), -1);
  cr_assert(strstr(why, "unknown port 'mlx5_0:3'"), "%s", why);
  cr_assert_eq(parse5("mlx5_9:1=mlx5_1", 0, order, why), -1);
  cr_assert(strstr(why, "unknown NIC 'mlx5_9'"), "%s", why);
  cr_assert_eq(parse5("mlx5_0=mlx5_2:x", 0, order, why), -1);
  cr_assert(strstr(why, "not a number"), "%s", why);
  cr_assert_eq(parse5("mlx5_0=mlx5_2:", 0, order, why), -1);
  cr_assert_eq(parse5("mlx5_1=mlx5_2,mlx5_2:1", 2, order, why), -1);
  cr_assert(strstr(why, "twice"), "%s", why);
  cr_assert_eq(parse5("mlx5_1=mlx5_1", 2, order, why), -1, "a single-port NIC naming itself, as before");
  cr_assert_eq(parse5("mlx5_0=mlx5_0:1", 3, order, why), -1, "invalid for mlx5_0:1, so for every device");
  cr_assert(strstr(why, "twice in the pool of mlx5_0:1"), "%s", why);
}
