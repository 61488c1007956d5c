/* linkpass-perf: buffers by memory kind (gpumem.h). */
#include "gpumem.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/udmabuf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

static const char *const mem_names[PERF_NMEMS] = {"host", "cuda", "dmabuf"};

const char *perf_mem_name(enum perf_mem mem) { return mem < PERF_NMEMS ? mem_names[mem] : "?"; }

int perf_mem_parse(const char *s) {
  for (int i = 0; i < PERF_NMEMS; i++)
    if (strcmp(s, mem_names[i]) == 0) return i;
  return -1;
}

int perf_mem_ptr_bit(enum perf_mem mem) {
  return mem == PERF_MEM_CUDA ? NCCL_PTR_CUDA : mem == PERF_MEM_DMABUF ? NCCL_PTR_DMABUF : NCCL_PTR_HOST;
}

/* A real dma-buf over the memfd's pages where the kernel can make one. */
static int udmabuf_of(int memfd, size_t len) {
  int dev = open("/dev/udmabuf", O_RDWR | O_CLOEXEC);
  if (dev < 0) return -1;
  struct udmabuf_create c = {.memfd = (uint32_t)memfd, .flags = UDMABUF_FLAGS_CLOEXEC, .offset = 0, .size = len};
  int fd = fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK) == 0 ? ioctl(dev, UDMABUF_CREATE, &c) : -1;
  close(dev);
  return fd;
}

int perf_buf_alloc(struct perf_buf *b, enum perf_mem mem, size_t len, char *err, size_t errlen) {
  long page = sysconf(_SC_PAGESIZE);
  *b = (struct perf_buf){.mem = mem, .fd = -1, .len = len};
  size_t mapped = (len + (size_t)page - 1) / (size_t)page * (size_t)page;
  if (mem == PERF_MEM_HOST) {
    if (posix_memalign((void **)&b->base, (size_t)page, len ? len : 1)) goto oom;
    memset(b->base, 0, len);
    return 0;
  }
  if (mem == PERF_MEM_CUDA) { /* cudaMalloc's stand-in: whole pages of their own */
    void *p = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) goto oom;
    b->base = p;
    return 0;
  }
  int memfd = memfd_create("linkpass-perf-gpu", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (memfd < 0 || ftruncate(memfd, (off_t)mapped) != 0) {
    snprintf(err, errlen, "cannot make a %zu-byte memfd for --mem dmabuf: %s", mapped, strerror(errno));
    if (memfd >= 0) close(memfd);
    return -1;
  }
  void *p = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  if (p == MAP_FAILED) {
    snprintf(err, errlen, "cannot map the %zu-byte memfd for --mem dmabuf: %s", mapped, strerror(errno));
    close(memfd);
    return -1;
  }
  b->base = p;
  int dmabuf = udmabuf_of(memfd, mapped);
  if (dmabuf >= 0) {
    close(memfd); /* the udmabuf and the mapping hold the pages */
    b->fd = dmabuf;
  } else {
    b->fd = memfd;
  }
  return 0;
oom:
  snprintf(err, errlen, "out of memory for a %zu-byte %s buffer", len, perf_mem_name(mem));
  return -1;
}

void perf_buf_free(struct perf_buf *b) {
  if (b->base == NULL) return;
  if (b->mem == PERF_MEM_HOST) {
    free(b->base);
  } else {
    long page = sysconf(_SC_PAGESIZE);
    munmap(b->base, (b->len + (size_t)page - 1) / (size_t)page * (size_t)page);
  }
  if (b->fd >= 0) close(b->fd);
  *b = (struct perf_buf){.fd = -1};
}

ncclResult_t perf_buf_reg(struct lp_net *net, void *comm, const struct perf_buf *b, void *data, size_t size,
                          void **mhandle) {
  if (b->mem == PERF_MEM_HOST) return net->ops->reg_mr(net, comm, data, size, NCCL_PTR_HOST, mhandle);
  if (b->mem == PERF_MEM_CUDA) return net->ops->reg_mr(net, comm, data, size, NCCL_PTR_CUDA, mhandle);
  /* A fresh fd per registration, closed as soon as the call returns. */
  int fd = fcntl(b->fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return ncclSystemError;
  ncclResult_t r = net->ops->reg_mr_dmabuf(net, comm, data, size, NCCL_PTR_CUDA,
                                           (uint64_t)((char *)data - b->base), fd, mhandle);
  close(fd);
  return r;
}
