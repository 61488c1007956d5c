/*
 * simverbs: the rest of rdma-core 44's libibverbs ABI.
 *
 * The simulated fabric implements the verbs real clients use (device.c,
 * objects.c, qp.c).  Everything else a Debian binary or a provider library
 * may import lives here, so that loading never fails on a missing symbol:
 *   - pure helpers (status strings, rate conversions, sysfs readers, kernel
 *     struct copies), implemented for real because clients print and compute
 *     with them;
 *   - verbs the fabric does not model (AH, SRQ, multicast, imports, ECE...),
 *     which fail cleanly with EOPNOTSUPP;
 *   - the IBVERBS_1.0 compat entry points, which take the pre-1.1 struct
 *     layouts that nobody has built against since 2006: they fail too;
 *   - the IBVERBS_PRIVATE_34 provider interface.  libmlx5/libefa import it
 *     and call verbs_register_driver_34 from their constructors, but as the
 *     registration is dropped no provider code ever runs, so every command
 *     helper can simply refuse.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#if defined(__has_include)
#if __has_include(<infiniband/sa.h>) && __has_include(<rdma/ib_user_verbs.h>) && \
    __has_include(<rdma/ib_user_sa.h>)
#include <infiniband/sa.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>
#define SV_HAVE_KERN_STRUCTS 1
#endif
#endif

#include "sv_export.h"

/* Failure conventions of the real library: pointer-returning verbs give NULL,
 * most int verbs return the errno value itself, a few return -1. */
static void *sv_fail_ptr(void) {
  errno = EOPNOTSUPP;
  return NULL;
}

static int sv_fail_errno(void) {
  errno = EOPNOTSUPP;
  return EOPNOTSUPP;
}

static int sv_fail_minus1(void) {
  errno = EOPNOTSUPP;
  return -1;
}

/* ------------------------------------------------------------------------ */
/* Strings.  Callers print these and tests compare them, so they must be
 * rdma-core 44's, byte for byte. */

SV_EXPORT const char *ibv_wc_status_str(enum ibv_wc_status status) {
  switch ((int)status) {
  case IBV_WC_SUCCESS: return "success";
  case IBV_WC_LOC_LEN_ERR: return "local length error";
  case IBV_WC_LOC_QP_OP_ERR: return "local QP operation error";
  case IBV_WC_LOC_EEC_OP_ERR: return "local EE context operation error";
  case IBV_WC_LOC_PROT_ERR: return "local protection error";
  case IBV_WC_WR_FLUSH_ERR: return "Work Request Flushed Error";
  case IBV_WC_MW_BIND_ERR: return "memory management operation error";
  case IBV_WC_BAD_RESP_ERR: return "bad response error";
  case IBV_WC_LOC_ACCESS_ERR: return "local access error";
  case IBV_WC_REM_INV_REQ_ERR: return "remote invalid request error";
  case IBV_WC_REM_ACCESS_ERR: return "remote access error";
  case IBV_WC_REM_OP_ERR: return "remote operation error";
  case IBV_WC_RETRY_EXC_ERR: return "transport retry counter exceeded";
  case IBV_WC_RNR_RETRY_EXC_ERR: return "RNR retry counter exceeded";
  case IBV_WC_LOC_RDD_VIOL_ERR: return "local RDD violation error";
  case IBV_WC_REM_INV_RD_REQ_ERR: return "remote invalid RD request";
  case IBV_WC_REM_ABORT_ERR: return "aborted error";
  case IBV_WC_INV_EECN_ERR: return "invalid EE context number";
  case IBV_WC_INV_EEC_STATE_ERR: return "invalid EE context state";
  case IBV_WC_FATAL_ERR: return "fatal error";
  case IBV_WC_RESP_TIMEOUT_ERR: return "response timeout error";
  case IBV_WC_GENERAL_ERR: return "general error";
  case IBV_WC_TM_ERR: return "TM error";
  case IBV_WC_TM_RNDV_INCOMPLETE: return "TM software rendezvous";
  default: return "unknown";
  }
}

SV_EXPORT const char *ibv_event_type_str(enum ibv_event_type event) {
  switch ((int)event) {
  case IBV_EVENT_CQ_ERR: return "CQ error";
  case IBV_EVENT_QP_FATAL: return "local work queue catastrophic error";
  case IBV_EVENT_QP_REQ_ERR: return "invalid request local work queue error";
  case IBV_EVENT_QP_ACCESS_ERR: return "local access violation work queue error";
  case IBV_EVENT_COMM_EST: return "communication established";
  case IBV_EVENT_SQ_DRAINED: return "send queue drained";
  case IBV_EVENT_PATH_MIG: return "path migrated";
  case IBV_EVENT_PATH_MIG_ERR: return "path migration request error";
  case IBV_EVENT_DEVICE_FATAL: return "local catastrophic error";
  case IBV_EVENT_PORT_ACTIVE: return "port active";
  case IBV_EVENT_PORT_ERR: return "port error";
  case IBV_EVENT_LID_CHANGE: return "LID change";
  case IBV_EVENT_PKEY_CHANGE: return "P_Key change";
  case IBV_EVENT_SM_CHANGE: return "SM change";
  case IBV_EVENT_SRQ_ERR: return "SRQ catastrophic error";
  case IBV_EVENT_SRQ_LIMIT_REACHED: return "SRQ limit reached";
  case IBV_EVENT_QP_LAST_WQE_REACHED: return "last WQE reached";
  case IBV_EVENT_CLIENT_REREGISTER: return "client reregistration";
  case IBV_EVENT_GID_CHANGE: return "GID table change";
  case IBV_EVENT_WQ_FATAL: return "WQ fatal";
  default: return "unknown";
  }
}

SV_EXPORT const char *ibv_port_state_str(enum ibv_port_state port_state) {
  switch ((int)port_state) {
  case IBV_PORT_NOP: return "no state change (NOP)";
  case IBV_PORT_DOWN: return "down";
  case IBV_PORT_INIT: return "init";
  case IBV_PORT_ARMED: return "armed";
  case IBV_PORT_ACTIVE: return "active";
  case IBV_PORT_ACTIVE_DEFER: return "active defer";
  default: return "unknown";
  }
}

SV_EXPORT const char *ibv_node_type_str(enum ibv_node_type node_type) {
  switch ((int)node_type) {
  case IBV_NODE_CA: return "InfiniBand channel adapter";
  case IBV_NODE_SWITCH: return "InfiniBand switch";
  case IBV_NODE_ROUTER: return "InfiniBand router";
  case IBV_NODE_RNIC: return "iWARP NIC";
  case IBV_NODE_USNIC: return "usNIC";
  case IBV_NODE_USNIC_UDP: return "usNIC UDP";
  case IBV_NODE_UNSPECIFIED: return "unspecified";
  default: return "unknown";
  }
}

/* ------------------------------------------------------------------------ */
/* Static rate conversions.  rdma-core's "multiple of 2.5 Gb/s" tables only
 * know the SDR-derived rates: FDR/EDR-style rates (14, 25, 56, 100...) have
 * no multiple and map to -1 / IBV_RATE_MAX, and perftest relies on that. */

SV_EXPORT int ibv_rate_to_mult(enum ibv_rate rate) {
  switch ((int)rate) {
  case IBV_RATE_2_5_GBPS: return 1;
  case IBV_RATE_5_GBPS: return 2;
  case IBV_RATE_10_GBPS: return 4;
  case IBV_RATE_20_GBPS: return 8;
  case IBV_RATE_30_GBPS: return 12;
  case IBV_RATE_40_GBPS: return 16;
  case IBV_RATE_60_GBPS: return 24;
  case IBV_RATE_80_GBPS: return 32;
  case IBV_RATE_120_GBPS: return 48;
  case IBV_RATE_28_GBPS: return 11;
  case IBV_RATE_50_GBPS: return 20;
  case IBV_RATE_400_GBPS: return 160;
  case IBV_RATE_600_GBPS: return 240;
  case IBV_RATE_800_GBPS: return 320;
  case IBV_RATE_1200_GBPS: return 480;
  default: return -1;
  }
}

SV_EXPORT enum ibv_rate mult_to_ibv_rate(int mult) {
  switch (mult) {
  case 1: return IBV_RATE_2_5_GBPS;
  case 2: return IBV_RATE_5_GBPS;
  case 4: return IBV_RATE_10_GBPS;
  case 8: return IBV_RATE_20_GBPS;
  case 12: return IBV_RATE_30_GBPS;
  case 16: return IBV_RATE_40_GBPS;
  case 24: return IBV_RATE_60_GBPS;
  case 32: return IBV_RATE_80_GBPS;
  case 48: return IBV_RATE_120_GBPS;
  case 11: return IBV_RATE_28_GBPS;
  case 20: return IBV_RATE_50_GBPS;
  case 160: return IBV_RATE_400_GBPS;
  case 240: return IBV_RATE_600_GBPS;
  case 320: return IBV_RATE_800_GBPS;
  case 480: return IBV_RATE_1200_GBPS;
  default: return IBV_RATE_MAX;
  }
}

/* Signalling rates after line coding: 64b/66b rates are not round numbers. */
SV_EXPORT int ibv_rate_to_mbps(enum ibv_rate rate) {
  switch ((int)rate) {
  case IBV_RATE_2_5_GBPS: return 2500;
  case IBV_RATE_5_GBPS: return 5000;
  case IBV_RATE_10_GBPS: return 10000;
  case IBV_RATE_20_GBPS: return 20000;
  case IBV_RATE_30_GBPS: return 30000;
  case IBV_RATE_40_GBPS: return 40000;
  case IBV_RATE_60_GBPS: return 60000;
  case IBV_RATE_80_GBPS: return 80000;
  case IBV_RATE_120_GBPS: return 120000;
  case IBV_RATE_14_GBPS: return 14062;
  case IBV_RATE_56_GBPS: return 56250;
  case IBV_RATE_112_GBPS: return 112500;
  case IBV_RATE_168_GBPS: return 168750;
  case IBV_RATE_25_GBPS: return 25781;
  case IBV_RATE_100_GBPS: return 103125;
  case IBV_RATE_200_GBPS: return 206250;
  case IBV_RATE_300_GBPS: return 309375;
  case IBV_RATE_28_GBPS: return 28125;
  case IBV_RATE_50_GBPS: return 53125;
  case IBV_RATE_400_GBPS: return 425000;
  case IBV_RATE_600_GBPS: return 637500;
  case IBV_RATE_800_GBPS: return 850000;
  case IBV_RATE_1200_GBPS: return 1275000;
  default: return -1;
  }
}

SV_EXPORT enum ibv_rate mbps_to_ibv_rate(int mbps) {
  switch (mbps) {
  case 2500: return IBV_RATE_2_5_GBPS;
  case 5000: return IBV_RATE_5_GBPS;
  case 10000: return IBV_RATE_10_GBPS;
  case 20000: return IBV_RATE_20_GBPS;
  case 30000: return IBV_RATE_30_GBPS;
  case 40000: return IBV_RATE_40_GBPS;
  case 60000: return IBV_RATE_60_GBPS;
  case 80000: return IBV_RATE_80_GBPS;
  case 120000: return IBV_RATE_120_GBPS;
  case 14062: return IBV_RATE_14_GBPS;
  case 56250: return IBV_RATE_56_GBPS;
  case 112500: return IBV_RATE_112_GBPS;
  case 168750: return IBV_RATE_168_GBPS;
  case 25781: return IBV_RATE_25_GBPS;
  case 103125: return IBV_RATE_100_GBPS;
  case 206250: return IBV_RATE_200_GBPS;
  case 309375: return IBV_RATE_300_GBPS;
  case 28125: return IBV_RATE_28_GBPS;
  case 53125: return IBV_RATE_50_GBPS;
  case 425000: return IBV_RATE_400_GBPS;
  case 637500: return IBV_RATE_600_GBPS;
  case 850000: return IBV_RATE_800_GBPS;
  case 1275000: return IBV_RATE_1200_GBPS;
  default: return IBV_RATE_MAX;
  }
}

/* ------------------------------------------------------------------------ */
/* Fork safety.  No DMA engine pins our pages: a forked child sees ordinary
 * copy-on-write memory, exactly what kernels with copy-on-fork pinning
 * report as "unneeded". */

SV_EXPORT int ibv_fork_init(void) { return 0; }

SV_EXPORT enum ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }

SV_EXPORT int ibv_dontfork_range(void *base, size_t size) {
  (void)base;
  (void)size;
  return 0;
}

SV_EXPORT int ibv_dofork_range(void *base, size_t size) {
  (void)base;
  (void)size;
  return 0;
}

/* ------------------------------------------------------------------------ */
/* sysfs readers.  Providers and tools read attributes through these; the
 * contract is one text value, trailing newline removed, NUL-terminated. */

static int sv_read_text_file(const char *path, char *buf, size_t size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  if (size > INT_MAX) size = INT_MAX;

  /* Our sysfs tree is on tmpfs, where a short read is legal: keep reading
   * until the buffer is full or the file ends. */
  size_t len = 0;
  while (len < size) {
    ssize_t n = read(fd, buf + len, size - len);
    if (n < 0) {
      if (errno == EINTR) continue;
      int saved = errno;
      close(fd);
      errno = saved;
      return -1;
    }
    if (n == 0) break;
    len += (size_t)n;
  }
  close(fd);

  if (len == 0) return 0;
  if (buf[len - 1] == '\n') {
    buf[--len] = '\0';
  } else if (len < size) {
    buf[len] = '\0';
  } else {
    /* No room for the terminator: fail now rather than hand back an
     * unterminated string. */
    errno = EOVERFLOW;
    return -1;
  }
  return (int)len;
}

SV_EXPORT int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size) {
  char path[PATH_MAX];
  int n = snprintf(path, sizeof(path), "%s/%s", dir, file);
  if (n < 0 || (size_t)n >= sizeof(path)) {
    errno = ENAMETOOLONG;
    return -1;
  }
  return sv_read_text_file(path, buf, size);
}

/*
 * The provider ABI's view of a device found in sysfs (struct verbs_sysfs_dev
 * of IBVERBS_PRIVATE_34), up to the one field we read.  Providers own these
 * structs, so the layout is theirs and must not change.
 */
struct verbs_sysfs_dev;
struct sv_abi_sysfs_dev_head {
  void *entry_next, *entry_prev; /* struct list_node */
  void *provider_data;
  const void *match;
  unsigned int flags;
  char sysfs_name[IBV_SYSFS_NAME_MAX];
  dev_t sysfs_cdev;
  char ibdev_name[IBV_SYSFS_NAME_MAX];
  char ibdev_path[IBV_SYSFS_PATH_MAX];
};

SV_EXPORT __attribute__((format(printf, 4, 5))) int ibv_read_ibdev_sysfs_file(char *buf, size_t size,
                                                                              struct verbs_sysfs_dev *sysfs_dev,
                                                                              const char *fnfmt, ...) {
  if (!sysfs_dev || !fnfmt) {
    errno = EINVAL;
    return -1;
  }
  const struct sv_abi_sysfs_dev_head *dev = (const struct sv_abi_sysfs_dev_head *)sysfs_dev;

  char file[PATH_MAX];
  va_list ap;
  va_start(ap, fnfmt);
  int n = vsnprintf(file, sizeof(file), fnfmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof(file)) {
    errno = ENAMETOOLONG;
    return -1;
  }

  char path[PATH_MAX];
  n = snprintf(path, sizeof(path), "%.*s/%s", (int)sizeof(dev->ibdev_path), dev->ibdev_path, file);
  if (n < 0 || (size_t)n >= sizeof(path)) {
    errno = ENAMETOOLONG;
    return -1;
  }
  return sv_read_text_file(path, buf, size);
}

/* ------------------------------------------------------------------------ */
/* Kernel ABI struct copies (the old ibcm/rdma_cm marshalling helpers).  The
 * kernel layouts come from the uapi headers; without them nobody could have
 * built a caller either, so the helpers shrink to no-ops. */

#ifdef SV_HAVE_KERN_STRUCTS

SV_EXPORT void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct ib_uverbs_ah_attr *src) {
  memcpy(dst->grh.dgid.raw, src->grh.dgid, sizeof(dst->grh.dgid.raw));
  dst->grh.flow_label = src->grh.flow_label;
  dst->grh.sgid_index = src->grh.sgid_index;
  dst->grh.hop_limit = src->grh.hop_limit;
  dst->grh.traffic_class = src->grh.traffic_class;
  dst->dlid = src->dlid;
  dst->sl = src->sl;
  dst->src_path_bits = src->src_path_bits;
  dst->static_rate = src->static_rate;
  dst->is_global = src->is_global;
  dst->port_num = src->port_num;
}

/* qp_state is deliberately left alone, as rdma-core does: callers ask for
 * it through the attribute mask and read it from their own bookkeeping. */
SV_EXPORT void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, struct ib_uverbs_qp_attr *src) {
  dst->cur_qp_state = src->cur_qp_state;
  dst->path_mtu = src->path_mtu;
  dst->path_mig_state = src->path_mig_state;
  dst->qkey = src->qkey;
  dst->rq_psn = src->rq_psn;
  dst->sq_psn = src->sq_psn;
  dst->dest_qp_num = src->dest_qp_num;
  dst->qp_access_flags = src->qp_access_flags;
  dst->cap.max_send_wr = src->max_send_wr;
  dst->cap.max_recv_wr = src->max_recv_wr;
  dst->cap.max_send_sge = src->max_send_sge;
  dst->cap.max_recv_sge = src->max_recv_sge;
  dst->cap.max_inline_data = src->max_inline_data;
  ibv_copy_ah_attr_from_kern(&dst->ah_attr, &src->ah_attr);
  ibv_copy_ah_attr_from_kern(&dst->alt_ah_attr, &src->alt_ah_attr);
  dst->pkey_index = src->pkey_index;
  dst->alt_pkey_index = src->alt_pkey_index;
  dst->en_sqd_async_notify = src->en_sqd_async_notify;
  dst->sq_draining = src->sq_draining;
  dst->max_rd_atomic = src->max_rd_atomic;
  dst->max_dest_rd_atomic = src->max_dest_rd_atomic;
  dst->min_rnr_timer = src->min_rnr_timer;
  dst->port_num = src->port_num;
  dst->timeout = src->timeout;
  dst->retry_cnt = src->retry_cnt;
  dst->rnr_retry = src->rnr_retry;
  dst->alt_port_num = src->alt_port_num;
  dst->alt_timeout = src->alt_timeout;
}

/* The two path record layouts hold the same fields, in a different order and
 * with different widths; values are already in wire byte order on both sides. */
#define SV_COPY_PATH_REC_SCALARS(dst, src)                               \
  do {                                                                   \
    (dst)->dlid = (src)->dlid;                                           \
    (dst)->slid = (src)->slid;                                           \
    (dst)->raw_traffic = (src)->raw_traffic;                             \
    (dst)->flow_label = (src)->flow_label;                               \
    (dst)->hop_limit = (src)->hop_limit;                                 \
    (dst)->traffic_class = (src)->traffic_class;                         \
    (dst)->reversible = (src)->reversible;                               \
    (dst)->numb_path = (src)->numb_path;                                 \
    (dst)->pkey = (src)->pkey;                                           \
    (dst)->sl = (src)->sl;                                               \
    (dst)->mtu_selector = (src)->mtu_selector;                           \
    (dst)->mtu = (src)->mtu;                                             \
    (dst)->rate_selector = (src)->rate_selector;                         \
    (dst)->rate = (src)->rate;                                           \
    (dst)->packet_life_time_selector = (src)->packet_life_time_selector; \
    (dst)->packet_life_time = (src)->packet_life_time;                   \
    (dst)->preference = (src)->preference;                               \
  } while (0)

SV_EXPORT void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst, struct ib_user_path_rec *src) {
  memcpy(dst->dgid.raw, src->dgid, sizeof(dst->dgid.raw));
  memcpy(dst->sgid.raw, src->sgid, sizeof(dst->sgid.raw));
  SV_COPY_PATH_REC_SCALARS(dst, src);
}

SV_EXPORT void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst, struct ibv_sa_path_rec *src) {
  memcpy(dst->dgid, src->dgid.raw, sizeof(dst->dgid));
  memcpy(dst->sgid, src->sgid.raw, sizeof(dst->sgid));
  SV_COPY_PATH_REC_SCALARS(dst, src);
}

#else /* !SV_HAVE_KERN_STRUCTS */

SV_EXPORT void ibv_copy_ah_attr_from_kern(void *dst, void *src) {
  (void)dst;
  (void)src;
}
SV_EXPORT void ibv_copy_qp_attr_from_kern(void *dst, void *src) {
  (void)dst;
  (void)src;
}
SV_EXPORT void ibv_copy_path_rec_from_kern(void *dst, void *src) {
  (void)dst;
  (void)src;
}
SV_EXPORT void ibv_copy_path_rec_to_kern(void *dst, void *src) {
  (void)dst;
  (void)src;
}

#endif

/* ------------------------------------------------------------------------ */
/* Verbs the fabric does not model.  The simulated transport is RC only, with
 * no address handles, shared receive queues, multicast, CQ resizing or
 * cross-process object import. */

/* Every stub below ignores its arguments by design. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"

/* The verbs that also have an @IBVERBS_1.0 twin further down bind their
 * default version explicitly: with LTO, GCC drops a plain definition that
 * shares its translation unit with a symver alias of the same name.  The
 * __typeof__ declarations keep them checked against verbs.h. */

__typeof__(ibv_create_ah) sv_ibv_create_ah;
SV_EXPORT struct ibv_ah *sv_ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr) { return sv_fail_ptr(); }
SV_SYMVER(sv_ibv_create_ah, "ibv_create_ah@@IBVERBS_1.1");

__typeof__(ibv_destroy_ah) sv_ibv_destroy_ah;
SV_EXPORT int sv_ibv_destroy_ah(struct ibv_ah *ah) { return sv_fail_errno(); }
SV_SYMVER(sv_ibv_destroy_ah, "ibv_destroy_ah@@IBVERBS_1.1");

SV_EXPORT int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num, struct ibv_wc *wc, struct ibv_grh *grh,
                                  struct ibv_ah_attr *ah_attr) {
  return sv_fail_minus1();
}

SV_EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh,
                                               uint8_t port_num) {
  return sv_fail_ptr();
}

/* The real function reports failures as negative errno values. */
SV_EXPORT int ibv_resolve_eth_l2_from_gid(struct ibv_context *context, struct ibv_ah_attr *attr,
                                          uint8_t eth_mac[ETHERNET_LL_SIZE], uint16_t *vid) {
  errno = EOPNOTSUPP;
  return -EOPNOTSUPP;
}

__typeof__(ibv_create_srq) sv_ibv_create_srq;
SV_EXPORT struct ibv_srq *sv_ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *srq_init_attr) {
  return sv_fail_ptr();
}
SV_SYMVER(sv_ibv_create_srq, "ibv_create_srq@@IBVERBS_1.1");

__typeof__(ibv_destroy_srq) sv_ibv_destroy_srq;
SV_EXPORT int sv_ibv_destroy_srq(struct ibv_srq *srq) { return sv_fail_errno(); }
SV_SYMVER(sv_ibv_destroy_srq, "ibv_destroy_srq@@IBVERBS_1.1");

__typeof__(ibv_modify_srq) sv_ibv_modify_srq;
SV_EXPORT int sv_ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr, int srq_attr_mask) {
  return sv_fail_errno();
}
SV_SYMVER(sv_ibv_modify_srq, "ibv_modify_srq@@IBVERBS_1.1");

__typeof__(ibv_query_srq) sv_ibv_query_srq;
SV_EXPORT int sv_ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr) { return sv_fail_errno(); }
SV_SYMVER(sv_ibv_query_srq, "ibv_query_srq@@IBVERBS_1.1");

__typeof__(ibv_attach_mcast) sv_ibv_attach_mcast;
SV_EXPORT int sv_ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid) { return sv_fail_errno(); }
SV_SYMVER(sv_ibv_attach_mcast, "ibv_attach_mcast@@IBVERBS_1.1");

__typeof__(ibv_detach_mcast) sv_ibv_detach_mcast;
SV_EXPORT int sv_ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid) { return sv_fail_errno(); }
SV_SYMVER(sv_ibv_detach_mcast, "ibv_detach_mcast@@IBVERBS_1.1");

__typeof__(ibv_resize_cq) sv_ibv_resize_cq;
SV_EXPORT int sv_ibv_resize_cq(struct ibv_cq *cq, int cqe) { return sv_fail_errno(); }
SV_SYMVER(sv_ibv_resize_cq, "ibv_resize_cq@@IBVERBS_1.1");

/* The old registration is untouched, but "invalid input" would tell the
 * caller its arguments were wrong; a failed command is what a provider
 * without rereg support produces. */
SV_EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access) {
  errno = EOPNOTSUPP;
  return IBV_REREG_MR_ERR_CMD;
}

/* QPs are only created through the classic interface, never with the
 * extended send ops, so no QP has a qp_ex to hand out. */
SV_EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp) { return sv_fail_ptr(); }

/* 0 promises nothing, which is always true.  In-order placement is an
 * engine detail that clients must not come to depend on. */
SV_EXPORT int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags) { return 0; }

SV_EXPORT struct ibv_context *ibv_import_device(int cmd_fd) { return sv_fail_ptr(); }

SV_EXPORT struct ibv_pd *ibv_import_pd(struct ibv_context *context, uint32_t pd_handle) { return sv_fail_ptr(); }

SV_EXPORT struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle) { return sv_fail_ptr(); }

SV_EXPORT struct ibv_dm *ibv_import_dm(struct ibv_context *context, uint32_t dm_handle) { return sv_fail_ptr(); }

/* Nothing can have been imported, so there is nothing to release. */
SV_EXPORT void ibv_unimport_pd(struct ibv_pd *pd) {}
SV_EXPORT void ibv_unimport_mr(struct ibv_mr *mr) {}
SV_EXPORT void ibv_unimport_dm(struct ibv_dm *dm) {}

/* ------------------------------------------------------------------------ */
/* IBVERBS_1.0 compat entry points.  Their arguments are the pre-1.1 wrapper
 * structs (ibv_device_1_0, ibv_context_1_0, ...), which the fabric does not
 * emulate, so they stay opaque and are never touched.  The local names must
 * be exported for the versioned alias to be visible; the version script's
 * `local: *` then keeps the sv_compat* names themselves out of the table. */

SV_EXPORT void *sv_compat10_ibv_get_device_list(int *num) {
  if (num) *num = 0;
  return sv_fail_ptr();
}
SV_SYMVER(sv_compat10_ibv_get_device_list, "ibv_get_device_list@IBVERBS_1.0");

SV_EXPORT void sv_compat10_ibv_free_device_list(void *list) {}
SV_SYMVER(sv_compat10_ibv_free_device_list, "ibv_free_device_list@IBVERBS_1.0");

SV_EXPORT const char *sv_compat10_ibv_get_device_name(void *device) { return sv_fail_ptr(); }
SV_SYMVER(sv_compat10_ibv_get_device_name, "ibv_get_device_name@IBVERBS_1.0");

SV_EXPORT __be64 sv_compat10_ibv_get_device_guid(void *device) {
  errno = EOPNOTSUPP;
  return 0;
}
SV_SYMVER(sv_compat10_ibv_get_device_guid, "ibv_get_device_guid@IBVERBS_1.0");

SV_EXPORT void *sv_compat10_ibv_open_device(void *device) { return sv_fail_ptr(); }
SV_SYMVER(sv_compat10_ibv_open_device, "ibv_open_device@IBVERBS_1.0");

SV_EXPORT int sv_compat10_ibv_close_device(void *context) { return sv_fail_minus1(); }
SV_SYMVER(sv_compat10_ibv_close_device, "ibv_close_device@IBVERBS_1.0");

SV_EXPORT int sv_compat10_ibv_get_async_event(void *context, struct ibv_async_event *event) { return sv_fail_minus1(); }
SV_SYMVER(sv_compat10_ibv_get_async_event, "ibv_get_async_event@IBVERBS_1.0");

SV_EXPORT void sv_compat10_ibv_ack_async_event(struct ibv_async_event *event) {}
SV_SYMVER(sv_compat10_ibv_ack_async_event, "ibv_ack_async_event@IBVERBS_1.0");

SV_EXPORT int sv_compat10_ibv_query_device(void *context, struct ibv_device_attr *device_attr) {
  return sv_fail_errno();
}
SV_SYMVER(sv_compat10_ibv_query_device, "ibv_query_device@IBVERBS_1.0");

SV_EXPORT int sv_compat10_ibv_query_port(void *context, uint8_t port_num, struct ibv_port_attr *port_attr) {
  return sv_fail_errno();
}
SV_SYMVER(sv_compat10_ibv_query_port, "ibv_query_port@IBVERBS_1.0");

SV_EXPORT int sv_compat10_ibv_query_gid(void *context, uint8_t port_num, int index, union ibv_gid *gid) {
  return sv_fail_minus1();
}
SV_SYMVER(sv_compat10_ibv_query_gid, "ibv_query_gid@IBVERBS_1.0");

SV_EXPORT int sv_compat10_ibv_query_pkey(void *context, uint8_t port_num, int index, __be16 *pkey) {
  return sv_fail_minus1();
}
SV_SYMVER(sv_compat10_ibv_query_pkey, "ibv_query_pkey@IBVERBS_1.0");

SV_EXPORT void *sv_compat10_ibv_alloc_pd(void *context) { return sv_fail_ptr(); }
SV_SYMVER(sv_compat10_ibv_alloc_pd, "ibv_alloc_pd@IBVERBS_1.0");

SV_EXPORT int sv_compat10_ibv_dealloc_pd(void *pd) { return sv_fail_errno(); }
SV_SYMVER(sv_compat10_ibv_dealloc_pd, "ibv_dealloc_pd@IBVERBS_1.0");

SV_EXPORT void *sv_compat10_ibv_reg_mr(void *pd, void *addr, size_t length, int access) { return sv_fail_ptr(); }
SV_SYMVER(sv_compat10_ibv_reg_mr, "ibv_reg_mr@IBVERBS_1.0");

SV_EXPORT int sv_compat10_ibv_dereg_mr(void *mr) { return sv_fail_errno(); }
SV_SYMVER(sv_compat10_ibv_dereg_mr, "ibv_dereg_mr@IBVERBS_1.0");

SV_EXPORT void *sv_compat10_ibv_create_cq(void *context, int cqe, void *cq_context, struct ibv_comp_channel *channel,
                                          int comp_vector) {
  return sv_fail_ptr();
}
SV_SYMVER(sv_compat10_ibv_create_cq, "ibv_create_cq@IBVERBS_1.0");

SV_EXPORT int sv_compat10_ibv_resize_cq(void *cq, int cqe) { return sv_fail_errno(); }
SV_SYMVER(sv_compat10_ibv_resize_cq, "ibv_resize_cq@IBVERBS_1.0");

SV_EXPORT int sv_compat10_ibv_destroy_cq(void *cq) { return sv_fail_errno(); }
SV_SYMVER(sv_compat10_ibv_destroy_cq, "ibv_destroy_cq@IBVERBS_1.0");

SV_EXPORT int sv_compat10_ibv_get_cq_event(struct ibv_comp_channel *channel, void **cq, void **cq_context) {
  return sv_fail_minus1();
}
SV_SYMVER(sv_compat10_ibv_get_cq_event, "ibv_get_cq_event@IBVERBS_1.0");

SV_EXPORT void sv_compat10_ibv_ack_cq_events(void *cq, unsigned int nevents) {}
SV_SYMVER(sv_compat10_ibv_ack_cq_events, "ibv_ack_cq_events@IBVERBS_1.0");

SV_EXPORT void *sv_compat10_ibv_create_srq(void *pd, struct ibv_srq_init_attr *srq_init_attr) { return sv_fail_ptr(); }
SV_SYMVER(sv_compat10_ibv_create_srq, "ibv_create_srq@IBVERBS_1.0");

SV_EXPORT int sv_compat10_ibv_modify_srq(void *srq, struct ibv_srq_attr *srq_attr, int srq_attr_mask) {
  return sv_fail_errno();
}
SV_SYMVER(sv_compat10_ibv_modify_srq, "ibv_modify_srq@IBVERBS_1.0");

SV_EXPORT int sv_compat10_ibv_query_srq(void *srq, struct ibv_srq_attr *srq_attr) { return sv_fail_errno(); }
SV_SYMVER(sv_compat10_ibv_query_srq, "ibv_query_srq@IBVERBS_1.0");

SV_EXPORT int sv_compat10_ibv_destroy_srq(void *srq) { return sv_fail_errno(); }
SV_SYMVER(sv_compat10_ibv_destroy_srq, "ibv_destroy_srq@IBVERBS_1.0");

SV_EXPORT void *sv_compat10_ibv_create_qp(void *pd, void *qp_init_attr) { return sv_fail_ptr(); }
SV_SYMVER(sv_compat10_ibv_create_qp, "ibv_create_qp@IBVERBS_1.0");

SV_EXPORT int sv_compat10_ibv_query_qp(void *qp, struct ibv_qp_attr *attr, int attr_mask, void *init_attr) {
  return sv_fail_errno();
}
SV_SYMVER(sv_compat10_ibv_query_qp, "ibv_query_qp@IBVERBS_1.0");

SV_EXPORT int sv_compat10_ibv_modify_qp(void *qp, struct ibv_qp_attr *attr, int attr_mask) { return sv_fail_errno(); }
SV_SYMVER(sv_compat10_ibv_modify_qp, "ibv_modify_qp@IBVERBS_1.0");

SV_EXPORT int sv_compat10_ibv_destroy_qp(void *qp) { return sv_fail_errno(); }
SV_SYMVER(sv_compat10_ibv_destroy_qp, "ibv_destroy_qp@IBVERBS_1.0");

SV_EXPORT void *sv_compat10_ibv_create_ah(void *pd, struct ibv_ah_attr *attr) { return sv_fail_ptr(); }
SV_SYMVER(sv_compat10_ibv_create_ah, "ibv_create_ah@IBVERBS_1.0");

SV_EXPORT int sv_compat10_ibv_destroy_ah(void *ah) { return sv_fail_errno(); }
SV_SYMVER(sv_compat10_ibv_destroy_ah, "ibv_destroy_ah@IBVERBS_1.0");

SV_EXPORT int sv_compat10_ibv_attach_mcast(void *qp, union ibv_gid *gid, uint16_t lid) { return sv_fail_errno(); }
SV_SYMVER(sv_compat10_ibv_attach_mcast, "ibv_attach_mcast@IBVERBS_1.0");

SV_EXPORT int sv_compat10_ibv_detach_mcast(void *qp, union ibv_gid *gid, uint16_t lid) { return sv_fail_errno(); }
SV_SYMVER(sv_compat10_ibv_detach_mcast, "ibv_detach_mcast@IBVERBS_1.0");

/* Providers have registered through verbs_register_driver_<N> since
 * rdma-core 13; this pre-13 entry point has no default version at all. */
typedef struct ibv_device *(*sv_driver_init_func_1_1)(const char *uverbs_sys_path, int abi_version);
SV_EXPORT void sv_compat11_ibv_register_driver(const char *name, sv_driver_init_func_1_1 init_func) {}
SV_SYMVER(sv_compat11_ibv_register_driver, "ibv_register_driver@IBVERBS_1.1");

/* ------------------------------------------------------------------------ */
/* IBVERBS_PRIVATE_34: the provider interface.  Only provider libraries link
 * against it, and only from code that runs once their driver is registered,
 * which never happens here.  Prototypes follow rdma-core 44's driver.h;
 * command and response buffers are plain pointers since no one may look
 * inside them. */

struct ibv_command_buffer;
struct verbs_context_ops;
struct verbs_counters;
struct verbs_cq;
struct verbs_device_ops;
struct verbs_dm;
struct verbs_flow_action;
struct verbs_mr;
struct verbs_qp;
struct verbs_srq;
struct verbs_xrcd;

/* Read by providers while tearing down a context after a device fatal. */
_Static_assert(sizeof(bool) == 1, "verbs_allow_disassociate_destroy is a 1-byte object");
SV_EXPORT bool verbs_allow_disassociate_destroy;

/* Providers call this from their ELF constructors.  Dropping the
 * registration keeps every provider (and its kernel-facing code) inert. */
SV_EXPORT void verbs_register_driver_34(const struct verbs_device_ops *ops) {}

SV_EXPORT void __verbs_log(struct verbs_context *ctx, uint32_t level, const char *fmt, ...) {}

SV_EXPORT struct ibv_context *verbs_open_device(struct ibv_device *device, void *private_data) { return sv_fail_ptr(); }

SV_EXPORT void *_verbs_init_and_alloc_context(struct ibv_device *device, int cmd_fd, size_t alloc_size,
                                              struct verbs_context *context_offset, uint32_t driver_id) {
  return sv_fail_ptr();
}

SV_EXPORT void verbs_uninit_context(struct verbs_context *context) {}

SV_EXPORT void verbs_set_ops(struct verbs_context *vctx, const struct verbs_context_ops *ops) {}

SV_EXPORT void verbs_init_cq(struct ibv_cq *cq, struct ibv_context *context, struct ibv_comp_channel *channel,
                             void *cq_context) {}

SV_EXPORT int execute_ioctl(struct ibv_context *context, struct ibv_command_buffer *cmd) { return sv_fail_errno(); }

/* This one is not a status: providers size an on-stack attribute array with
 * its result, so it must stay the plain attribute count. */
SV_EXPORT unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, struct ibv_command_buffer *link) {
  return num_attrs;
}

/* rdma-core reports failure here as -1 with errno set. */
SV_EXPORT int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index, void *type) {
  return sv_fail_minus1();
}

SV_EXPORT int ibv_cmd_get_context(struct verbs_context *context, void *cmd, size_t cmd_size, void *resp,
                                  size_t resp_size) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_query_context(struct ibv_context *ctx, struct ibv_command_buffer *driver) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_create_flow_action_esp(struct ibv_context *ctx, struct ibv_flow_action_esp_attr *attr,
                                             struct verbs_flow_action *flow_action, struct ibv_command_buffer *driver) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_modify_flow_action_esp(struct verbs_flow_action *flow_action,
                                             struct ibv_flow_action_esp_attr *attr, struct ibv_command_buffer *driver) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_query_device_any(struct ibv_context *context, const struct ibv_query_device_ex_input *input,
                                       struct ibv_device_attr_ex *attr, size_t attr_size, void *resp,
                                       size_t *resp_size) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_query_port(struct ibv_context *context, uint8_t port_num, struct ibv_port_attr *port_attr,
                                 void *cmd, size_t cmd_size) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_alloc_pd(struct ibv_context *context, struct ibv_pd *pd, void *cmd, size_t cmd_size, void *resp,
                               size_t resp_size) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_dealloc_pd(struct ibv_pd *pd) { return sv_fail_errno(); }

SV_EXPORT int ibv_cmd_open_xrcd(struct ibv_context *context, struct verbs_xrcd *xrcd, int vxrcd_size,
                                struct ibv_xrcd_init_attr *attr, void *cmd, size_t cmd_size, void *resp,
                                size_t resp_size) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_close_xrcd(struct verbs_xrcd *xrcd) { return sv_fail_errno(); }

SV_EXPORT int ibv_cmd_reg_mr(struct ibv_pd *pd, void *addr, size_t length, uint64_t hca_va, int access,
                             struct verbs_mr *vmr, void *cmd, size_t cmd_size, void *resp, size_t resp_size) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_rereg_mr(struct verbs_mr *vmr, uint32_t flags, void *addr, size_t length, uint64_t hca_va,
                               int access, struct ibv_pd *pd, void *cmd, size_t cmd_sz, void *resp, size_t resp_sz) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_dereg_mr(struct verbs_mr *vmr) { return sv_fail_errno(); }

SV_EXPORT int ibv_cmd_query_mr(struct ibv_pd *pd, struct verbs_mr *vmr, uint32_t mr_handle) { return sv_fail_errno(); }

SV_EXPORT int ibv_cmd_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags,
                                struct ibv_sge *sg_list, uint32_t num_sge) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova, int fd,
                                    int access, struct verbs_mr *vmr) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type, struct ibv_mw *mw, void *cmd, size_t cmd_size,
                               void *resp, size_t resp_size) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_dealloc_mw(struct ibv_mw *mw) { return sv_fail_errno(); }

SV_EXPORT int ibv_cmd_create_cq(struct ibv_context *context, int cqe, struct ibv_comp_channel *channel, int comp_vector,
                                struct ibv_cq *cq, void *cmd, size_t cmd_size, void *resp, size_t resp_size) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_create_cq_ex(struct ibv_context *context, const struct ibv_cq_init_attr_ex *cq_attr,
                                   struct verbs_cq *cq, void *cmd, size_t cmd_size, void *resp, size_t resp_size,
                                   uint32_t cmd_flags) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_poll_cq(struct ibv_cq *cq, int ne, struct ibv_wc *wc) { return sv_fail_errno(); }

SV_EXPORT int ibv_cmd_req_notify_cq(struct ibv_cq *cq, int solicited_only) { return sv_fail_errno(); }

SV_EXPORT int ibv_cmd_resize_cq(struct ibv_cq *cq, int cqe, void *cmd, size_t cmd_size, void *resp, size_t resp_size) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_destroy_cq(struct ibv_cq *cq) { return sv_fail_errno(); }

SV_EXPORT int ibv_cmd_modify_cq(struct ibv_cq *cq, struct ibv_modify_cq_attr *attr, void *cmd, size_t cmd_size) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_create_srq(struct ibv_pd *pd, struct ibv_srq *srq, struct ibv_srq_init_attr *attr, void *cmd,
                                 size_t cmd_size, void *resp, size_t resp_size) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_create_srq_ex(struct ibv_context *context, struct verbs_srq *srq,
                                    struct ibv_srq_init_attr_ex *attr_ex, void *cmd, size_t cmd_size, void *resp,
                                    size_t resp_size) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr, int srq_attr_mask, void *cmd,
                                 size_t cmd_size) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr, void *cmd, size_t cmd_size) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_destroy_srq(struct ibv_srq *srq) { return sv_fail_errno(); }

SV_EXPORT int ibv_cmd_create_qp(struct ibv_pd *pd, struct ibv_qp *qp, struct ibv_qp_init_attr *attr, void *cmd,
                                size_t cmd_size, void *resp, size_t resp_size) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_create_qp_ex(struct ibv_context *context, struct verbs_qp *qp,
                                   struct ibv_qp_init_attr_ex *attr_ex, void *cmd, size_t cmd_size, void *resp,
                                   size_t resp_size) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_create_qp_ex2(struct ibv_context *context, struct verbs_qp *qp,
                                    struct ibv_qp_init_attr_ex *qp_attr, void *cmd, size_t cmd_size, void *resp,
                                    size_t resp_size) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_open_qp(struct ibv_context *context, struct verbs_qp *qp, int vqp_sz,
                              struct ibv_qp_open_attr *attr, void *cmd, size_t cmd_size, void *resp, size_t resp_size) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *qp_attr, int attr_mask,
                               struct ibv_qp_init_attr *qp_init_attr, void *cmd, size_t cmd_size) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask, void *cmd,
                                size_t cmd_size) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_modify_qp_ex(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask, void *cmd,
                                   size_t cmd_size, void *resp, size_t resp_size) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_destroy_qp(struct ibv_qp *qp) { return sv_fail_errno(); }

SV_EXPORT int ibv_cmd_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr) {
  if (bad_wr) *bad_wr = wr;
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr) {
  if (bad_wr) *bad_wr = wr;
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr) {
  if (bad_wr) *bad_wr = wr;
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_create_ah(struct ibv_pd *pd, struct ibv_ah *ah, struct ibv_ah_attr *attr, void *resp,
                                size_t resp_size) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_destroy_ah(struct ibv_ah *ah) { return sv_fail_errno(); }

SV_EXPORT int ibv_cmd_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_create_flow(struct ibv_qp *qp, struct ibv_flow *flow_id, struct ibv_flow_attr *flow_attr,
                                  void *ucmd, size_t ucmd_size) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_destroy_flow(struct ibv_flow *flow_id) { return sv_fail_errno(); }

SV_EXPORT int ibv_cmd_destroy_flow_action(struct verbs_flow_action *action) { return sv_fail_errno(); }

SV_EXPORT int ibv_cmd_create_wq(struct ibv_context *context, struct ibv_wq_init_attr *wq_init_attr, struct ibv_wq *wq,
                                void *cmd, size_t cmd_size, void *resp, size_t resp_size) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_modify_wq(struct ibv_wq *wq, struct ibv_wq_attr *attr, void *cmd, size_t cmd_size) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_destroy_wq(struct ibv_wq *wq) { return sv_fail_errno(); }

SV_EXPORT int ibv_cmd_create_rwq_ind_table(struct ibv_context *context, struct ibv_rwq_ind_table_init_attr *init_attr,
                                           struct ibv_rwq_ind_table *rwq_ind_table, void *resp, size_t resp_size) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_destroy_rwq_ind_table(struct ibv_rwq_ind_table *rwq_ind_table) { return sv_fail_errno(); }

SV_EXPORT int ibv_cmd_create_counters(struct ibv_context *context, struct ibv_counters_init_attr *init_attr,
                                      struct verbs_counters *vcounters, struct ibv_command_buffer *link) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_destroy_counters(struct verbs_counters *vcounters) { return sv_fail_errno(); }

SV_EXPORT int ibv_cmd_read_counters(struct verbs_counters *vcounters, uint64_t *counters_value, uint32_t ncounters,
                                    uint32_t flags, struct ibv_command_buffer *link) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_alloc_dm(struct ibv_context *ctx, const struct ibv_alloc_dm_attr *dm_attr, struct verbs_dm *dm,
                               struct ibv_command_buffer *link) {
  return sv_fail_errno();
}

SV_EXPORT int ibv_cmd_free_dm(struct verbs_dm *dm) { return sv_fail_errno(); }

SV_EXPORT int ibv_cmd_reg_dm_mr(struct ibv_pd *pd, struct verbs_dm *dm, uint64_t offset, size_t length,
                                unsigned int access, struct verbs_mr *vmr, struct ibv_command_buffer *link) {
  return sv_fail_errno();
}

#pragma GCC diagnostic pop
