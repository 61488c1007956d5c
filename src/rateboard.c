/* The rate board (rateboard.h). */
#include "rateboard.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"

#define LP_RB_MAGIC 0x4c505242u /* "LPRB" */
#define LP_RB_VERSION 1

static const memory_order rx = memory_order_relaxed;

int lp_rateboard_open(struct lp_rateboard *b, const char *path, int pid, char *why, size_t why_len) {
  memset(b, 0, sizeof(*b));
  for (int i = 0; i < LP_RB_MAX_PORTS; i++) b->held[i] = -1;
  b->pid = pid;
  if (strcmp(path, "none") == 0) {
    snprintf(why, why_len, "LINKPASS_RATE_BOARD=none");
    return -1;
  }
  snprintf(b->path, sizeof(b->path), "%s", path);
  size_t len = sizeof(struct lp_rb_table);
  struct stat st;
  int fd = -1, err;
  /* The last one out may unlink the file between our open and our lock:
   * then the board is the file created after it. */
  for (int tries = 0; tries < 8 && fd < 0; tries++) {
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) goto fail;
    if (flock(fd, LOCK_SH) != 0 || fstat(fd, &st) != 0) goto fail_fd;
    if (st.st_nlink == 0) {
      close(fd);
      fd = -1;
    }
  }
  if (fd < 0) {
    snprintf(why, why_len, "%s is removed as soon as it is made (another process closing it over and over?)", path);
    return -1;
  }
  /* Two processes may both find it empty: both give it the same size. */
  if ((size_t)st.st_size < len && ftruncate(fd, (off_t)len) != 0) goto fail_fd;
  void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) goto fail_fd;
  struct lp_rb_table *t = m;
  /* A new file is zeros; whoever comes first writes the header (a second
   * writer writes the same words). */
  if (t->magic == 0) {
    t->version = LP_RB_VERSION;
    t->magic = LP_RB_MAGIC;
  }
  if (t->magic != LP_RB_MAGIC || t->version != LP_RB_VERSION) {
    snprintf(why, why_len, "%s is not a linkpass rate board of version %d (another version running?)", path,
             LP_RB_VERSION);
    munmap(m, len);
    close(fd);
    return -1;
  }
  b->t = t;
  b->fd = fd;
  return 0;
fail_fd:
  err = errno; /* the failed call's, not close's */
  close(fd);
  errno = err;
fail:
  snprintf(why, why_len, "%s: %s", path, strerror(errno));
  return -1;
}

/* Held by a process that still runs: refreshed lately, and its process
 * exists (kill(pid, 0): EPERM means it exists under another user). */
static int alive(const struct lp_rb_slot *s, uint64_t now_ns) {
  uint64_t beat = atomic_load_explicit(&s->beat_ns, rx);
  int pid = atomic_load_explicit(&s->pid, rx);
  if (pid == 0 || beat == 0 || now_ns - beat > LP_RB_STALE_NS) return 0;
  return kill(pid, 0) == 0 || errno == EPERM;
}

void lp_rateboard_close(struct lp_rateboard *b) {
  if (b->t == NULL) return;
  for (int i = 0; i < LP_RB_MAX_PORTS; i++)
    if (b->held[i] >= 0) atomic_store_explicit(&b->t->slot[b->held[i]].beat_ns, 0, rx); /* free again */
  munmap(b->t, sizeof(*b->t));
  b->t = NULL;
  /* The last one out removes the file: nobody else has it open.  (Losing
   * the shared lock when the exclusive one is refused does not matter: we
   * are leaving.) */
  if (flock(b->fd, LOCK_EX | LOCK_NB) == 0) unlink(b->path);
  close(b->fd);
  b->fd = -1;
}

/* A slot for a new port: one never held, or whose holder is gone. */
static int claim(struct lp_rateboard *b, uint64_t now_ns) {
  for (int i = 0; i < LP_RB_SLOTS; i++) {
    struct lp_rb_slot *s = &b->t->slot[i];
    uint64_t beat = atomic_load_explicit(&s->beat_ns, rx);
    if (beat != 0 && alive(s, now_ns)) continue;
    if (atomic_compare_exchange_strong_explicit(&s->beat_ns, &beat, now_ns, rx, rx)) return i;
  }
  return -1;
}

void lp_rateboard_post(struct lp_rateboard *b, int dev, uint64_t guid, int port, int64_t mbps, uint64_t at_ns,
                       uint64_t now_ns) {
  if (b->t == NULL || dev < 0 || dev >= LP_RB_MAX_PORTS) return;
  if (b->held[dev] < 0 && (b->held[dev] = claim(b, now_ns)) < 0) return; /* a full board */
  struct lp_rb_slot *s = &b->t->slot[b->held[dev]];
  atomic_fetch_add_explicit(&s->seq, 1, memory_order_acq_rel); /* odd: readers skip it */
  atomic_store_explicit(&s->pid, b->pid, rx);
  atomic_store_explicit(&s->guid, guid, rx);
  atomic_store_explicit(&s->port, port, rx);
  atomic_store_explicit(&s->mbps, mbps, rx);
  atomic_store_explicit(&s->at_ns, at_ns, rx);
  atomic_store_explicit(&s->beat_ns, now_ns, rx);
  atomic_fetch_add_explicit(&s->seq, 1, memory_order_release);
}

int64_t lp_rateboard_read(const struct lp_rateboard *b, uint64_t guid, int port, uint64_t since_ns, uint64_t now_ns) {
  if (b->t == NULL) return -1;
  int64_t best = -1;
  uint64_t best_at = 0;
  for (int i = 0; i < LP_RB_SLOTS; i++) {
    struct lp_rb_slot *s = &b->t->slot[i];
    uint32_t s1 = atomic_load_explicit(&s->seq, memory_order_acquire);
    if (s1 & 1) continue; /* being written: next tick */
    int pid = atomic_load_explicit(&s->pid, rx);
    uint64_t g = atomic_load_explicit(&s->guid, rx), at = atomic_load_explicit(&s->at_ns, rx);
    int p = atomic_load_explicit(&s->port, rx);
    int64_t m = atomic_load_explicit(&s->mbps, rx);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&s->seq, rx) != s1) continue;
    if (pid == b->pid || g != guid || p != port || m < 0 || at < since_ns || !alive(s, now_ns)) continue;
    if (at >= best_at) best = m, best_at = at;
  }
  return best;
}
