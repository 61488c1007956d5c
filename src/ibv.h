/*
 * libibverbs, loaded at run time the way NCCL loads it: dlopen of
 * $NCCL_IBVERBS_LIB, then "libibverbs.so", then "libibverbs.so.1"; every
 * symbol through dlvsym() at the version NCCL asks for, so the plugin loads
 * on machines without rdma-core and fails init with a clear warning instead.
 *
 * Only control-path verbs are symbols.  The data path (post_send, post_recv,
 * poll_cq) goes through context->ops via the inline wrappers of verbs.h,
 * exactly as NCCL does: those are not exported by the library.
 */
#ifndef LP_IBV_H
#define LP_IBV_H

#include <infiniband/verbs.h>
#include <stddef.h>

struct lp_ibv {
  void *dl;
  char path[256]; /* the name that loaded */
  struct ibv_device **(*get_device_list)(int *num);
  void (*free_device_list)(struct ibv_device **list);
  const char *(*get_device_name)(struct ibv_device *dev);
  struct ibv_context *(*open_device)(struct ibv_device *dev);
  int (*close_device)(struct ibv_context *ctx);
  int (*query_device)(struct ibv_context *ctx, struct ibv_device_attr *attr);
  int (*query_port)(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr);
  int (*query_gid)(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid);
  struct ibv_pd *(*alloc_pd)(struct ibv_context *ctx);
  int (*dealloc_pd)(struct ibv_pd *pd);
  struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t len, int access);
  int (*dereg_mr)(struct ibv_mr *mr);
  struct ibv_cq *(*create_cq)(struct ibv_context *ctx, int cqe, void *cq_context, struct ibv_comp_channel *ch,
                              int comp_vector);
  int (*destroy_cq)(struct ibv_cq *cq);
  struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
  int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
  int (*destroy_qp)(struct ibv_qp *qp);
  int (*get_async_event)(struct ibv_context *ctx, struct ibv_async_event *ev);
  void (*ack_async_event)(struct ibv_async_event *ev);
  const char *(*wc_status_str)(enum ibv_wc_status status);
  const char *(*event_type_str)(enum ibv_event_type type);
  /* Optional (NULL when the library is too old). */
  struct ibv_mr *(*reg_mr_iova2)(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, unsigned int access);
  struct ibv_mr *(*reg_dmabuf_mr)(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova, int fd, int access);
  int (*query_gid_ex)(struct ibv_context *ctx, uint32_t port, uint32_t index, struct ibv_gid_entry *entry,
                      uint32_t flags, size_t entry_size);
  int (*query_ece)(struct ibv_qp *qp, struct ibv_ece *ece);
  int (*set_ece)(struct ibv_qp *qp, struct ibv_ece *ece);
};

/* Load the library.  `override` is $NCCL_IBVERBS_LIB ("" or NULL: default
 * names).  Returns 0, or -1 with a human-readable reason in `why`. */
int lp_ibv_load(struct lp_ibv *ibv, const char *override, char *why, size_t whylen);
void lp_ibv_unload(struct lp_ibv *ibv);

/* Status string even when the library lacks one (never NULL). */
const char *lp_ibv_wc_status(const struct lp_ibv *ibv, enum ibv_wc_status status);

#endif
