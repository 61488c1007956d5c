/*
 * Connection setup: listen, connect and accept as non-blocking state
 * machines over an out-of-band TCP socket (the protocol is in connect.c and
 * docs/PROTOCOL.md).  What setup needs from the process is handed to it in
 * struct lp_setup, which the plugin context owns.
 */
#ifndef LP_CONNECT_H
#define LP_CONNECT_H

#include <pthread.h>
#include <stdint.h>

#include "comm.h"

struct lp_connect_stage;
struct lp_idle_watch;
struct lp_ctl_ready;

struct lp_setup {
  const struct lp_env *env;
  struct lp_health *health;   /* new connections fail over through it; NULL: failover is off */
  struct lp_idle_watch *idle; /* new receive comms are watched while idle; NULL: no watch */
  struct lp_ctl_ready *ready; /* which control sockets have news (ctlready.h); NULL: each comm reads to see */
  struct lp_mr_cache *mrs;    /* the process's registrations, for regMr on the new comms */
  pthread_mutex_t lock;       /* guards the connects in progress */
  struct lp_connect_stage *stages;
  uint64_t next_token;
};

/* listen / connect on device `dev` (valid: the caller checked it) with
 * traffic class `tc` (resolved: never NCCL_NET_TRAFFIC_CLASS_UNDEF). */
ncclResult_t lp_setup_listen(struct lp_setup *su, int dev, int tc, void *handle, void **listenComm);
ncclResult_t lp_setup_connect(struct lp_setup *su, int dev, int tc, void *handle, void **sendComm);

/* Free connects NCCL started and abandoned (finalize). */
void lp_setup_free_stages(struct lp_setup *su);

#endif
