/*
 * linkpass-perf: the memory a rank's registered buffers live in (--mem),
 * registered the way NCCL core registers each kind.
 *
 *   host    pinned host memory: regMr(NCCL_PTR_HOST)
 *   cuda    GPU memory through peer memory: regMr(NCCL_PTR_CUDA)
 *   dmabuf  GPU memory through a dma-buf: for each registration an fd for
 *           the buffer's pages, regMrDmaBuf(..., NCCL_PTR_CUDA, offset, fd),
 *           then the fd closed (cuMemGetHandleForAddressRange in NCCL core)
 *
 * There is no GPU here: "GPU memory" is host memory the simulated NIC
 * reaches as it would reach a GPU's (page-aligned, never touched by the
 * plugin's CPU code), and a dma-buf is a udmabuf made from a memfd where
 * /dev/udmabuf exists, else the memfd itself, simverbs' stand-in.
 */
#ifndef LINKPASS_PERF_GPUMEM_H
#define LINKPASS_PERF_GPUMEM_H

#include <stddef.h>

#include "netload.h"

enum perf_mem { PERF_MEM_HOST, PERF_MEM_CUDA, PERF_MEM_DMABUF, PERF_NMEMS };

struct perf_buf {
  char *base;
  size_t len;
  enum perf_mem mem;
  int fd; /* dmabuf: the allocation's dma-buf (or memfd), from which each registration's fd is made */
};

const char *perf_mem_name(enum perf_mem mem);
/* -1 for an unknown name. */
int perf_mem_parse(const char *s);
/* The ptrSupport bit a device needs for `mem`. */
int perf_mem_ptr_bit(enum perf_mem mem);

/* Allocate `len` bytes (zeroed, page-aligned); 0, or -1 with `err` set. */
int perf_buf_alloc(struct perf_buf *b, enum perf_mem mem, size_t len, char *err, size_t errlen);
void perf_buf_free(struct perf_buf *b);
/* Register [data, data + size) of `b` on `comm` as NCCL core would. */
ncclResult_t perf_buf_reg(struct lp_net *net, void *comm, const struct perf_buf *b, void *data, size_t size,
                          void **mhandle);

#endif
