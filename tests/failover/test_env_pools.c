/* Each device's pool as init builds it (env.c lp_env_build_pools), from an
 * environment filled in by hand: no devices, no threads. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "env.h"
#include "pool.h"

static struct lp_env env;

/* `nnics` dual-port NICs, each port a device, numbered as discovery does:
 * a NIC's ports one after the other, in port order. */
static void dual_port_machine(int nnics) {
  memset(&env, 0, sizeof(env));
  env.nnics = nnics;
  env.ndevs = 2 * nnics;
  for (int i = 0; i < nnics; i++) {
    snprintf(env.nics[i].name, sizeof(env.nics[i].name), "mlx5_%d", i);
    snprintf(env.nics[i].pci_path, sizeof(env.nics[i].pci_path), "/sys/devices/pci0000:00/0000:%02x:00.0", i + 1);
    env.nics[i].numa = 0;
    for (int port = 1; port <= 2; port++) {
      struct lp_dev *dev = &env.devs[2 * i + port - 1];
      dev->nic = i;
      dev->port = port;
      snprintf(dev->name, sizeof(dev->name), "%s", env.nics[i].name);
    }
  }
}

static int in_pool(int primary, int dev) {
  for (int k = 0; k < env.pool_n[primary]; k++)
    if (env.pool[primary][k] == dev) return 1;
  return 0;
}

Test(env_pools, every_device_gets_a_pool_beyond_32) {
  dual_port_machine(20); /* 40 devices */
  lp_env_build_pools(&env);
  for (int d = 0; d < env.ndevs; d++) {
    cr_assert_eq(env.pool_n[d], env.ndevs, "device %d: a pool of every device", d);
    cr_assert_eq(env.pool[d][0], d, "device %d first in its own pool", d);
  }
  cr_assert(in_pool(0, 39), "device 0 may move to the last device");
  cr_assert(in_pool(39, 0), "and the last device to the first");
}

Test(env_pools, a_port_of_a_dual_port_nic_can_be_named) {
  dual_port_machine(2); /* mlx5_0:1 mlx5_0:2 mlx5_1:1 mlx5_1:2 */
  snprintf(env.cfg.nic_pool, sizeof(env.cfg.nic_pool), "mlx5_0:2=mlx5_1:2;mlx5_1=mlx5_0:1");
  lp_env_build_pools(&env);
  cr_assert_eq(env.pool_n[1], 2);
  cr_assert_arr_eq(env.pool[1], ((int[]){1, 3}), 2 * sizeof(int), "mlx5_0:2 moves to mlx5_1:2 only");
  cr_assert_eq(env.pool_n[2], 2);
  cr_assert_arr_eq(env.pool[2], ((int[]){2, 0}), 2 * sizeof(int), "a bare head names each port: mlx5_1:1");
  cr_assert_eq(env.pool_n[3], 2);
  cr_assert_arr_eq(env.pool[3], ((int[]){3, 0}), 2 * sizeof(int), "and mlx5_1:2");
  cr_assert_eq(env.pool_n[0], 4, "mlx5_0:1 is not named: closeness");
}

Test(env_pools, an_unknown_port_means_closeness_for_all) {
  dual_port_machine(2);
  snprintf(env.cfg.nic_pool, sizeof(env.cfg.nic_pool), "mlx5_0:1=mlx5_1:1;mlx5_1:1=mlx5_0:3");
  lp_env_build_pools(&env);
  for (int d = 0; d < env.ndevs; d++) cr_assert_eq(env.pool_n[d], 4, "device %d: closeness", d);
}
