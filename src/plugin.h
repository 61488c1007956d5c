/*
 * The plugin context: the one instance per process that owns the library's
 * state (the environment found at init, connection setup, the control
 * plane, the idle-receiver watch) and assembles them.  Only plugin.c
 * reaches it; every module below gets what it needs passed to it
 * (docs/DESIGN.md).  The only other process-wide state is the log sink
 * (log.c).
 */
#ifndef LP_PLUGIN_H
#define LP_PLUGIN_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "connect.h"
#include "env.h"
#include "health.h"
#include "ctlready.h"
#include "idle_watch.h"
#include "mr.h"

/* What NCCL's init hands us per communicator (v11+); v8-v10 have none and
 * use the plugin's default context. */
struct lp_ctx {
  uint64_t comm_id;
  int traffic_class;   /* NCCL_NET_TRAFFIC_CLASS_UNDEF: use NCCL_IB_TC */
  struct lp_ctx *next; /* the plugin's live contexts */
};

struct lp_plugin {
  pthread_mutex_t lock; /* init and finalize */
  int ready;            /* devices discovered, verbs loaded: env is complete and read-only */
  int config_logged;    /* the effective settings go to the INFO log once */
  int nctx;             /* live contexts (init calls not yet finalized) */
  /* Those init handed out, so that a context finalized already (or never
   * ours) is told apart without reading the memory it points to. */
  struct lp_ctx *ctxs;
  struct lp_env env;
  struct lp_ctx default_ctx;
  struct lp_setup setup;        /* connects in progress */
  struct lp_mr_cache mrs;       /* every registration, shared by the comms (regIsGlobal) */
  struct lp_health health;      /* link failover's control plane */
  struct lp_idle_watch idle;    /* answers moves for receivers NCCL is not calling */
  struct lp_ctl_ready ctl_news; /* which control sockets have news, for every comm */
  pid_t threads_pid;            /* the process that started the threads above (0: none) */
};

#endif
