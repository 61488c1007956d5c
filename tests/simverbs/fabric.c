/* simverbs: lifetime of the shared fabric segment, robust locks, the process
 * registry (with reaping of crashed processes) and the shared heap that holds
 * receive queues and completion rings. */
#include "fabric.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SV_TABLES_BYTES ((sizeof(struct sv_fabric) + 4095) & ~(size_t)4095)

size_t sv_fabric_size(void) { return SV_TABLES_BYTES + SV_HEAP_BYTES; }

uint64_t sv_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void sv_fabric_path(const char *name, char *out, size_t len) {
  if (!name || !*name) name = getenv("SIMVERBS_FABRIC");
  if (!name || !*name) name = "default";
  snprintf(out, len, "/dev/shm/simverbs-%s", name);
}

void sv_mutex_init(pthread_mutex_t *m) {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(m, &a);
  pthread_mutexattr_destroy(&a);
}

/* A holder that died leaves the protected data as it was mid-update; every
 * structure guarded here stays usable after such a death (counters and
 * in_use flags are written last), so marking it consistent is enough. */
void sv_lock(pthread_mutex_t *m) {
  if (pthread_mutex_lock(m) == EOWNERDEAD) pthread_mutex_consistent(m);
}

void sv_unlock(pthread_mutex_t *m) { pthread_mutex_unlock(m); }

static struct sv_fabric *map_segment(int fd) {
  void *p = mmap(NULL, sv_fabric_size(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? NULL : p;
}

struct sv_fabric *sv_fabric_create(const char *name) {
  char path[200]; /* leaves room for the run_dir suffix */
  struct sv_fabric *f = NULL;
  sv_fabric_path(name, path, sizeof(path));
  unlink(path); /* processes still mapping an old fabric keep their own copy */
  int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0666);
  if (fd < 0) return NULL;
  fchmod(fd, 0666);
  if (ftruncate(fd, (off_t)sv_fabric_size()) != 0) goto out;
  f = map_segment(fd);
  if (!f) goto out;
  const char *base = strrchr(path, '/') + 1 + strlen("simverbs-");
  snprintf(f->name, sizeof(f->name), "%s", base);
  snprintf(f->run_dir, sizeof(f->run_dir), "%s.d", path);
  sv_mutex_init(&f->lock);
  for (int i = 0; i < SV_MAX_QPS; i++) sv_mutex_init(&f->qps[i].rq_lock);
  for (int i = 0; i < SV_MAX_DEVS; i++) sv_mutex_init(&f->devs[i].atomic_lock);
  for (int i = 0; i < SV_MAX_CQS; i++) sv_mutex_init(&f->cqs[i].lock);
  f->heap_off = SV_TABLES_BYTES;
  f->heap_blocks[0].off = 0;
  f->heap_blocks[0].size = SV_HEAP_BYTES;
  f->heap_blocks[0].owner = -1;
  f->heap_blocks[0].in_use = 1;
  atomic_store(&f->next_pd_id, 1);
  f->version = SV_VERSION;
  f->magic = SV_MAGIC;
out:
  close(fd);
  return f;
}

struct sv_fabric *sv_fabric_attach(const char *name) {
  char path[PATH_MAX];
  sv_fabric_path(name, path, sizeof(path));
  int fd = open(path, O_RDWR);
  if (fd < 0) return NULL;
  struct stat st;
  struct sv_fabric *f = NULL;
  if (fstat(fd, &st) != 0 || (size_t)st.st_size != sv_fabric_size()) {
    errno = EPROTO; /* built by another simverbs version */
    goto out;
  }
  f = map_segment(fd);
  if (f && (f->magic != SV_MAGIC || f->version != SV_VERSION)) {
    munmap(f, sv_fabric_size());
    f = NULL;
    errno = EPROTO;
  }
out:
  close(fd);
  return f;
}

void sv_fabric_detach(struct sv_fabric *f) {
  if (f) munmap(f, sv_fabric_size());
}

/* Goes on past a failure: nftw stops at the first non-zero return, which
 * left most of the tree behind. */
static int remove_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  remove(p);
  return 0;
}

int sv_fabric_destroy(const char *name) {
  char path[PATH_MAX], dir[PATH_MAX + 2];
  sv_fabric_path(name, path, sizeof(path));
  snprintf(dir, sizeof(dir), "%s.d", path);
  /* A process on the fabric may still be writing its port counters there
   * (its engine thread), a file at a time, for as long as the port's
   * directory is there: a walk of the tree in place raced it, and a busy
   * writer kept directories from going pass after pass.  The tree is moved
   * aside first, in one step: from then on every path the writer builds
   * names nothing, and at most the file it was writing lands in the moved
   * tree, which the next pass takes. */
  char doomed[PATH_MAX + 32];
  snprintf(doomed, sizeof(doomed), "%s.gone.%d", dir, (int)getpid());
  const char *tree = rename(dir, doomed) == 0 ? doomed : dir;
  for (int pass = 0; pass < 4 && access(tree, F_OK) == 0; pass++) nftw(tree, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  return unlink(path);
}

/* ---- heap: first fit over a table of blocks, coalescing on free ---- */

uint64_t sv_heap_alloc(struct sv_fabric *f, uint64_t size, int32_t owner) {
  uint64_t off = UINT64_MAX;
  size = (size + 4095) & ~4095ull; /* whole pages: freed rings go back to tmpfs */
  sv_lock(&f->lock);
  int spare = -1;
  for (int i = 0; i < SV_MAX_HEAP_BLOCKS && spare < 0; i++)
    if (!f->heap_blocks[i].in_use) spare = i;
  for (int i = 0; i < SV_MAX_HEAP_BLOCKS; i++) {
    struct sv_heap_block *b = &f->heap_blocks[i];
    if (!b->in_use || b->owner != -1 || b->size < size) continue;
    if (b->size > size) {
      if (spare < 0) break; /* table full: fail rather than lose bytes */
      struct sv_heap_block *rest = &f->heap_blocks[spare];
      rest->off = b->off + size;
      rest->size = b->size - size;
      rest->owner = -1;
      rest->in_use = 1;
      b->size = size;
    }
    b->owner = owner;
    off = b->off;
    break;
  }
  sv_unlock(&f->lock);
  if (off != UINT64_MAX) memset(sv_heap_ptr(f, off), 0, size);
  return off;
}

/* Join free block `i` with the free blocks just before and after it: one
 * pass over the table (a full pairwise merge on every free cost O(blocks^2)
 * and made a sweep of a thousand QP moves take seconds). */
static void heap_merge_around(struct sv_fabric *f, int i) {
  struct sv_heap_block *a = &f->heap_blocks[i];
  int prev = -1, next = -1;
  for (int j = 0; j < SV_MAX_HEAP_BLOCKS && (prev < 0 || next < 0); j++) {
    const struct sv_heap_block *b = &f->heap_blocks[j];
    if (j == i || !b->in_use || b->owner != -1) continue;
    if (b->off == a->off + a->size)
      next = j;
    else if (b->off + b->size == a->off)
      prev = j;
  }
  if (next >= 0) {
    a->size += f->heap_blocks[next].size;
    f->heap_blocks[next].in_use = 0;
  }
  if (prev >= 0) {
    f->heap_blocks[prev].size += a->size;
    a->in_use = 0;
  }
}

void sv_heap_free(struct sv_fabric *f, uint64_t off) {
  sv_lock(&f->lock);
  for (int i = 0; i < SV_MAX_HEAP_BLOCKS; i++) {
    struct sv_heap_block *b = &f->heap_blocks[i];
    if (b->in_use && b->owner != -1 && b->off == off) {
      b->owner = -1;
      /* Give the pages back to tmpfs: rings can be large. */
      madvise(sv_heap_ptr(f, off), b->size & ~4095ull, MADV_REMOVE);
      heap_merge_around(f, i);
      break;
    }
  }
  sv_unlock(&f->lock);
}

/* ---- names ---- */

int sv_host_index(struct sv_fabric *f, const char *name) {
  for (uint32_t i = 0; i < f->nhosts; i++)
    if (f->hosts[i].in_use && strcmp(f->hosts[i].name, name) == 0) return (int)i;
  return -1;
}

int sv_device_index(struct sv_fabric *f, uint32_t host, const char *name) {
  for (uint32_t i = 0; i < f->ndevs; i++)
    if (f->devs[i].in_use && f->devs[i].host == host && strcmp(f->devs[i].name, name) == 0) return (int)i;
  return -1;
}

int sv_parse_target(struct sv_fabric *f, const char *spec, int *dev, int *port) {
  char buf[3 * SV_NAME_LEN];
  if (snprintf(buf, sizeof(buf), "%s", spec) >= (int)sizeof(buf)) return -1;
  char *host = buf, *name = strchr(buf, ':');
  if (!name) return -1;
  *name++ = '\0';
  char *portstr = strchr(name, ':');
  if (portstr) *portstr++ = '\0';
  int h = sv_host_index(f, host);
  if (h < 0) return -1;
  int d = sv_device_index(f, (uint32_t)h, name);
  if (d < 0) return -1;
  if (port) {
    long p = 1;
    if (portstr) {
      char *end;
      p = strtol(portstr, &end, 10);
      if (*portstr == '\0' || *end != '\0') return -1;
    }
    if (p < 1 || p > (long)f->devs[d].nports) return -1;
    *port = (int)p;
  } else if (portstr) {
    return -1;
  }
  *dev = d;
  return 0;
}

void sv_rate_to_width_speed(uint32_t rate_gbps, uint8_t *width, uint8_t *speed) {
  /* active_width: 1=1X 2=4X 4=8X 8=12X; active_speed: 1=SDR 2=DDR 4=QDR
   * 8=FDR10 16=FDR 32=EDR 64=HDR 128=NDR.  4X links are the common case. */
  switch (rate_gbps) {
  case 10: *width = 1, *speed = 4; break; /* 1X QDR: a slow port, where the wire outpaces no CPU */
  case 25: *width = 1, *speed = 32; break;
  case 50: *width = 1, *speed = 64; break;
  case 200: *width = 2, *speed = 64; break;
  case 400: *width = 2, *speed = 128; break;
  case 100:
  default: *width = 2, *speed = 32; break;
  }
}

/* ---- processes ---- */

static uint64_t proc_start_time(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  /* Field 22 (starttime) counts from after the ")" that ends the command name. */
  char *p = strrchr(buf, ')');
  if (!p) return 0;
  int field = 2;
  for (; *p && field < 22; p++)
    if (*p == ' ') field++;
  return strtoull(p, NULL, 10);
}

static int take_proc_slot(struct sv_fabric *f, uint32_t host, pid_t pid, uint64_t start) {
  int slot = -1;
  sv_lock(&f->lock);
  for (int i = 0; i < SV_MAX_PROCS; i++) {
    if (!atomic_load(&f->procs[i].in_use)) {
      slot = i;
      f->procs[i].pid = pid;
      f->procs[i].start_time = start;
      f->procs[i].host = host;
      atomic_store(&f->procs[i].in_use, 1);
      break;
    }
  }
  sv_unlock(&f->lock);
  return slot;
}

/* A full table is first cleared of processes that are gone, as the kernel
 * frees a process's contexts when it exits: the engines reap only once a
 * second (SV_REAP_PERIOD_NS), and a string of runs shorter than that, each
 * exiting without closing its devices, filled the table (EMFILE). */
int sv_proc_register(struct sv_fabric *f, uint32_t host) {
  pid_t pid = getpid();
  uint64_t start = proc_start_time(pid);
  int slot = take_proc_slot(f, host, pid, start);
  if (slot < 0) {
    sv_reap_dead(f);
    slot = take_proc_slot(f, host, pid, start);
  }
  return slot;
}

int sv_proc_alive(struct sv_fabric *f, int proc) {
  struct sv_proc *p = &f->procs[proc];
  if (!atomic_load(&p->in_use)) return 0;
  if (kill(p->pid, 0) != 0 && errno == ESRCH) return 0;
  return proc_start_time(p->pid) == p->start_time;
}

/* Free everything a process owned.  Its peers already see its QPs as gone:
 * senders check in_use and the state before touching a remote queue. */
static void release_proc_objects(struct sv_fabric *f, int proc) {
  for (int i = 0; i < SV_MAX_QPS; i++) {
    struct sv_qp *q = &f->qps[i];
    if (atomic_load(&q->in_use) && q->owner == proc) {
      atomic_store(&q->state, IBV_QPS_ERR);
      atomic_store(&q->in_use, 0);
    }
  }
  for (int i = 0; i < SV_MAX_CQS; i++)
    if (atomic_load(&f->cqs[i].in_use) && f->cqs[i].owner == proc) atomic_store(&f->cqs[i].in_use, 0);
  for (int i = 0; i < SV_MAX_MRS; i++)
    if (atomic_load(&f->mrs[i].in_use) && f->mrs[i].owner == proc) atomic_store(&f->mrs[i].in_use, 0);
  sv_lock(&f->lock);
  for (int i = 0; i < SV_MAX_HEAP_BLOCKS; i++)
    if (f->heap_blocks[i].in_use && f->heap_blocks[i].owner == proc) {
      f->heap_blocks[i].owner = -1;
      heap_merge_around(f, i);
    }
  sv_unlock(&f->lock);
}

void sv_proc_unregister(struct sv_fabric *f, int proc) {
  release_proc_objects(f, proc);
  atomic_store(&f->procs[proc].in_use, 0);
}

void sv_reap_dead(struct sv_fabric *f) {
  for (int i = 0; i < SV_MAX_PROCS; i++) {
    if (!atomic_load(&f->procs[i].in_use) || sv_proc_alive(f, i)) continue;
    release_proc_objects(f, i);
    atomic_store(&f->procs[i].in_use, 0);
  }
}

void sv_proc_wake(struct sv_fabric *f, int proc) {
  if (proc < 0 || proc >= SV_MAX_PROCS) return;
  atomic_fetch_add(&f->procs[proc].doorbell, 1);
  syscall(SYS_futex, &f->procs[proc].doorbell, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void sv_wake_all(struct sv_fabric *f) {
  for (int i = 0; i < SV_MAX_PROCS; i++)
    if (atomic_load(&f->procs[i].in_use)) sv_proc_wake(f, i);
}
