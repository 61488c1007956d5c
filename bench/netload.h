/*
 * linkpass-perf: finds and loads a net plugin the way NCCL does, and hides
 * the differences between ABI versions v8..v12 behind one call table.
 *
 * Every version keeps its own shim (v8 narrows sizes to int, v9 has no
 * phandles, v10 has no ctx, v11+ have init/finalize with a ctx), so running
 * the same benchmark with --abi 8 .. --abi 12 drives each exported struct of
 * the plugin through the calls NCCL of that era would make.
 */
#ifndef LINKPASS_PERF_NETLOAD_H
#define LINKPASS_PERF_NETLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "linkpass/nccl_net.h"

/* Device properties, widened to the newest layout. */
struct lp_props {
  char name[64];
  char pci_path[256];
  uint64_t guid;
  int ptr_support, reg_is_global, force_flush;
  int speed, port;
  float latency;
  int max_comms, max_recvs;
  size_t max_p2p_bytes, max_coll_bytes; /* 0: not reported (v8) */
  int vdevs;                            /* fused devices (0: not reported) */
};

struct lp_net;

/* One version's shims.  Sizes are size_t everywhere; the v8 shim refuses
 * what an int cannot hold (NCCL of that era never asked for more). */
struct lp_net_ops {
  ncclResult_t (*init)(struct lp_net *n, uint64_t comm_id, ncclDebugLogger_t log);
  ncclResult_t (*devices)(struct lp_net *n, int *ndev);
  ncclResult_t (*get_props)(struct lp_net *n, int dev, struct lp_props *p);
  ncclResult_t (*listen)(struct lp_net *n, int dev, void *handle, void **listen_comm);
  ncclResult_t (*connect)(struct lp_net *n, int dev, void *handle, void **send_comm);
  ncclResult_t (*accept)(struct lp_net *n, void *listen_comm, void **recv_comm);
  ncclResult_t (*reg_mr)(struct lp_net *n, void *comm, void *data, size_t size, int type, void **mhandle);
  /* regMrDmaBuf: ncclInvalidUsage where the plugin has none (NCCL then uses regMr) */
  ncclResult_t (*reg_mr_dmabuf)(struct lp_net *n, void *comm, void *data, size_t size, int type, uint64_t offset,
                                int fd, void **mhandle);
  ncclResult_t (*dereg_mr)(struct lp_net *n, void *comm, void *mhandle);
  ncclResult_t (*isend)(struct lp_net *n, void *send_comm, void *data, size_t size, int tag, void *mhandle,
                        void **request);
  ncclResult_t (*irecv)(struct lp_net *n, void *recv_comm, int nrecv, void **data, size_t *sizes, int *tags,
                        void **mhandles, void **request);
  ncclResult_t (*iflush)(struct lp_net *n, void *recv_comm, int nrecv, void **data, int *sizes, void **mhandles,
                         void **request);
  ncclResult_t (*test)(struct lp_net *n, void *request, int *done, int *sizes);
  ncclResult_t (*close_send)(struct lp_net *n, void *comm);
  ncclResult_t (*close_recv)(struct lp_net *n, void *comm);
  ncclResult_t (*close_listen)(struct lp_net *n, void *comm);
  ncclResult_t (*finalize)(struct lp_net *n); /* no-op before v11 */
};

struct lp_net {
  int abi;              /* 8..12 */
  const char *name;     /* the struct's name field */
  char path[512];       /* what dlopen succeeded with */
  void *dl;
  const void *plugin;   /* ncclNet_vN_t * */
  void *ctx;            /* v11+: from init */
  const struct lp_net_ops *ops;
};

/* Load a plugin.  `plugin` (the --plugin flag) wins over NCCL_NET_PLUGIN; each
 * comma-separated name is tried with dlopen(name), then, when it has no '/'
 * and is not lib*.so, as libnccl-net-<name>.so; unset means libnccl-net.so.
 * abi 0 takes the newest of ncclNetPlugin_v12..v8, else exactly vN; the first
 * symbol found wins, as in NCCL.  Only its init is checked here (see
 * lp_net_init).  0 on success, -1 with every attempt explained in err. */
int lp_net_load(const char *plugin, int abi, struct lp_net *n, char *err, size_t errlen);
/* Call the plugin's init (per communicator from v11 on), then check the
 * members every shim calls: NCCL calls init before anything else, and a
 * plugin may fill its table in there.  0 on success, -1 with the reason
 * (init's result, or the member left NULL) in err. */
int lp_net_init(struct lp_net *n, uint64_t comm_id, ncclDebugLogger_t log, char *err, size_t errlen);
void lp_net_unload(struct lp_net *n);

/* The candidate file names for one entry of the list, in the order tried
 * (1 or 2 of them); exposed for the unit tests. */
int lp_net_candidates(const char *name, char out[2][512]);

/* A logger with NCCL's signature and NCCL_DEBUG levels (WARN by default: a
 * plugin that cannot start must be heard), prefixed like NCCL's lines. */
void lp_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
void lp_logger_set_rank(int rank);

const char *lp_result_str(ncclResult_t r);

#endif
