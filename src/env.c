/* The environment (env.h): the parts derived from what discovery found. */
#include "env.h"

#include <stdio.h>

#include "log.h"
#include "pool.h"

/* A device left out of the pools could never move, nor take a moved
 * connection: the pools must hold every device discovery may keep. */
_Static_assert(LP_POOL_MAX >= LP_MAX_DEVS, "LP_POOL_MAX must cover LP_MAX_DEVS");

/* Each device's NIC pool, logged once: closeness order unless
 * LINKPASS_NIC_POOL spells it out. */
void lp_env_build_pools(struct lp_env *env) {
  struct lp_pool_nic in[LP_MAX_DEVS];
  int n = env->ndevs;
  for (int d = 0; d < n; d++) {
    const struct lp_nic *nic = lp_env_nic_of(env, d);
    snprintf(in[d].name, sizeof(in[d].name), "%s", env->devs[d].name);
    in[d].pci_path = nic->pci_path;
    in[d].numa = nic->numa;
    in[d].port = env->devs[d].port;
  }
  const char *spec = env->cfg.nic_pool;
  int explicit_ok = spec[0] != '\0';
  for (int d = 0; d < n; d++) {
    char why[256];
    int m = explicit_ok ? lp_pool_parse(spec, in, n, d, env->pool[d], why, sizeof(why)) : 0;
    if (m < 0) {
      LP_WARN(
          "LINKPASS_NIC_POOL=\"%s\" is not valid (%s): expected NIC[:PORT]=NIC[:PORT][,...][;...]; pools follow "
          "closeness",
          spec, why);
      explicit_ok = 0;
      d = -1; /* start over without it */
      continue;
    }
    env->pool_n[d] = m > 0 ? m : lp_pool_order(in, n, d, env->pool[d]);
    char line[LP_POOL_MAX * 16]; /* room for a whole pool of typical names */
    /* NIC:PORT, as the device lines and LINKPASS_NIC_POOL spell them: the
     * ports of a dual-port NIC share its name. */
    int o = snprintf(line, sizeof(line), "NIC pool of %s:%d:", env->devs[d].name, env->devs[d].port);
    for (int k = 0; k < env->pool_n[d] && o < (int)sizeof(line); k++) {
      const struct lp_dev *dev = &env->devs[env->pool[d][k]];
      o += snprintf(line + o, sizeof(line) - (size_t)o, " %s:%d", dev->name, dev->port);
    }
    LP_INFO(NCCL_INIT | NCCL_NET, "%s", line);
  }
}
