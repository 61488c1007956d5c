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
#define LP_RB_VERSION 3         /* 2: owner word (pid and heartbeat); 3: fault_ns */

static const memory_order rx = memory_order_relaxed;

int lp_rateboard_open(struct lp_rateboard *b, const char *path, int pid, char *why, size_t why_len) {
  memset(b, 0, sizeof(*b));
  for (int i = 0; i < LP_RB_MAX_PORTS; i++) b->held[i] = -1;
  b->pid = pid;
  if (strcmp(path, "none") == 0) {
    snprintf(why, why_len, "LINKPASS_RATE_BOARD=none");
    return 1;
  }
  snprintf(b->path, sizeof(b->path), "%s", path);
  size_t len = sizeof(struct lp_rb_table);
  struct stat st;
  int fd = -1, err;
  /* The last one out may unlink the file between our open and our lock:
   * then the board is the file created after it. */
  for (int tries = 0; tries < 8 && fd < 0; tries++) {
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) goto fail;
    if (fstat(fd, &st) != 0) goto fail_fd;
    /* Another user's file would let its owner post rates that drain our
     * ports; a device or a FIFO is no board (and a FIFO never maps). */
    if (!S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
      snprintf(why, why_len, "%s is %s: remove it, or name another file with LINKPASS_RATE_BOARD", path,
               S_ISREG(st.st_mode) ? "another user's file" : "not a regular file");
      close(fd);
      return -1;
    }
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
  /* A file that is no board is refused before anything is written to it:
   * one that does not start with the board's magic, unless it is new (empty,
   * or zeros of the board's size, as another process's ftruncate leaves it
   * before its header). */
  uint32_t head[2] = {0, 0};
  if (st.st_size > 0 && pread(fd, head, sizeof(head), 0) < 0) goto fail_fd;
  if (head[0] != LP_RB_MAGIC && (head[0] != 0 || head[1] != 0 || (st.st_size != 0 && (size_t)st.st_size != len))) {
    snprintf(why, why_len,
             "%s is not a linkpass rate board (it starts with 0x%08x and has %lld bytes, not %zu; a board of "
             "another version of linkpass being made starts with zeros too): remove it if no linkpass runs, or name "
             "another file with LINKPASS_RATE_BOARD",
             path, head[0], (long long)st.st_size, len);
    close(fd);
    return -1;
  }
  /* Two processes may both find it empty: both give it the same size. */
  if ((size_t)st.st_size < len && ftruncate(fd, (off_t)len) != 0) goto fail_fd;
  void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) goto fail_fd;
  struct lp_rb_table *t = m;
  /* A board of another version that nobody has open was left by processes
   * that crashed before an upgrade: back to zeros, a new file.  (The
   * exclusive lock replaces our shared one, which a refused attempt may
   * cost us: we then leave the board alone anyway.) */
  if (t->magic == LP_RB_MAGIC && t->version != LP_RB_VERSION && flock(fd, LOCK_EX | LOCK_NB) == 0) {
    memset(t, 0, len);
    if (flock(fd, LOCK_SH) != 0) {
      munmap(m, len);
      goto fail_fd;
    }
  }
  /* A new file is zeros; whoever comes first writes the header (a second
   * writer writes the same words). */
  if (t->magic == 0) {
    t->version = LP_RB_VERSION;
    t->magic = LP_RB_MAGIC;
  }
  if (t->magic != LP_RB_MAGIC || t->version != LP_RB_VERSION) {
    if (t->magic == LP_RB_MAGIC)
      snprintf(why, why_len, "%s is a linkpass rate board of version %u, not %d: another version of linkpass runs",
               path, t->version, LP_RB_VERSION);
    else
      snprintf(why, why_len,
               "%s is not a linkpass rate board (it starts with 0x%08x): remove it, or name another file with "
               "LINKPASS_RATE_BOARD",
               path, t->magic);
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

int lp_rateboard_intact(struct lp_rateboard *b, char *why, size_t why_len) {
  struct stat st;
  if (b->t == NULL || fstat(b->fd, &st) != 0 || (size_t)st.st_size >= sizeof(*b->t)) return 1;
  snprintf(why, why_len,
           "the rate board %s was cut to %lld bytes while in use (another program truncated or rewrote it): this "
           "process compares its own ports only from now on",
           b->path, (long long)st.st_size);
  munmap(b->t, sizeof(*b->t));
  b->t = NULL; /* its slots go with the file */
  close(b->fd);
  b->fd = -1;
  return 0;
}

static uint64_t owner_word(int pid, uint64_t now_ns) {
  return (uint64_t)(uint32_t)pid << 32 | (uint32_t)(now_ns / 1000000u);
}

static int owner_pid(uint64_t owner) { return (int)(uint32_t)(owner >> 32); }

/* How far a window may have closed after the reader's clock: the poster
 * read the same host clock, at most a tick's work earlier or later. */
#define LP_RB_AHEAD_NS 1000000000ull

/* Held by a process that still runs: refreshed lately, and its process
 * exists (kill(pid, 0): EPERM means it exists under another user). */
static int alive(uint64_t owner, uint64_t now_ns) {
  /* Modulo 2^32, and signed: a beat after `now_ns` (the holder read the
   * clock after our caller did) is fresh, not 49 days old. */
  int32_t since_ms = (int32_t)((uint32_t)(now_ns / 1000000u) - (uint32_t)owner);
  if (owner == 0 || since_ms >= (int32_t)LP_RB_STALE_MS) return 0;
  /* A pid of 0 or below in a corrupt word names a process group, or every
   * process, to kill(): such a holder is nobody. */
  if (owner_pid(owner) <= 0) return 0;
  return kill(owner_pid(owner), 0) == 0 || errno == EPERM;
}

void lp_rateboard_close(struct lp_rateboard *b) {
  if (b->t == NULL) return;
  for (int i = 0; i < LP_RB_MAX_PORTS; i++) {
    if (b->held[i] < 0) continue;
    _Atomic uint64_t *owner = &b->t->slot[b->held[i]].owner;
    uint64_t o = atomic_load_explicit(owner, rx);
    if (owner_pid(o) == b->pid) atomic_compare_exchange_strong_explicit(owner, &o, 0, rx, rx); /* free again */
  }
  munmap(b->t, sizeof(*b->t));
  b->t = NULL;
  /* The last one out removes the file: nobody else has it open.  (Losing
   * the shared lock when the exclusive one is refused does not matter: we
   * are leaving.) */
  if (flock(b->fd, LOCK_EX | LOCK_NB) == 0) unlink(b->path);
  close(b->fd);
  b->fd = -1;
}

/* A slot for a new port: one never held, or whose holder is gone.  Two
 * processes that find the same one free both try to swap their owner word
 * in for what they read; one wins, the other looks on. */
static int claim(struct lp_rateboard *b, uint64_t now_ns) {
  for (int i = 0; i < LP_RB_SLOTS; i++) {
    _Atomic uint64_t *owner = &b->t->slot[i].owner;
    uint64_t o = atomic_load_explicit(owner, rx);
    if (alive(o, now_ns)) continue;
    if (atomic_compare_exchange_strong_explicit(owner, &o, owner_word(b->pid, now_ns), rx, rx)) return i;
  }
  return -1;
}

/* Refresh the heartbeat of a slot we hold: 0, or -1 when another process
 * took it over (we did not tick for LP_RB_STALE_MS: stopped, or hung). */
static int beat(struct lp_rateboard *b, int slot, uint64_t now_ns) {
  _Atomic uint64_t *owner = &b->t->slot[slot].owner;
  uint64_t o = atomic_load_explicit(owner, rx);
  if (owner_pid(o) != b->pid) return -1;
  return atomic_compare_exchange_strong_explicit(owner, &o, owner_word(b->pid, now_ns), rx, rx) ? 0 : -1;
}

void lp_rateboard_post(struct lp_rateboard *b, int dev, uint64_t guid, int port, int64_t mbps, uint64_t at_ns,
                       uint64_t fault_ns, uint64_t now_ns) {
  if (b->t == NULL || dev < 0 || dev >= LP_RB_MAX_PORTS) return;
  if (b->held[dev] >= 0 && beat(b, b->held[dev], now_ns) != 0) b->held[dev] = -1;
  if (b->held[dev] < 0 && (b->held[dev] = claim(b, now_ns)) < 0) return; /* a full board */
  struct lp_rb_slot *s = &b->t->slot[b->held[dev]];
  /* To odd (readers skip it) in one step: from even by 1, from odd by 2.
   * Odd while nobody writes it is a holder killed between its two adds, or
   * a corrupt file: each post would leave it odd, hidden for good.  A
   * holder that stalled past the takeover and finishes its write meanwhile
   * makes the swap fail, not the count. */
  uint32_t seq = atomic_load_explicit(&s->seq, rx);
  while (!atomic_compare_exchange_weak_explicit(&s->seq, &seq, seq + ((seq & 1u) ? 2u : 1u), memory_order_acq_rel, rx))
    continue;
  /* The stores below stay after the odd count for a reader on another core
   * (a seqlock's writer fence): the swap's release orders only what came
   * before it, and on a weakly ordered CPU (AArch64) a reader could see a
   * new field next to old ones under an even count both times. */
  atomic_thread_fence(memory_order_release);
  atomic_store_explicit(&s->guid, guid, rx);
  atomic_store_explicit(&s->port, port, rx);
  atomic_store_explicit(&s->mbps, mbps, rx);
  atomic_store_explicit(&s->at_ns, at_ns, rx);
  atomic_store_explicit(&s->fault_ns, fault_ns, rx);
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
    uint64_t owner = atomic_load_explicit(&s->owner, rx);
    uint64_t g = atomic_load_explicit(&s->guid, rx), at = atomic_load_explicit(&s->at_ns, rx);
    int p = atomic_load_explicit(&s->port, rx);
    int64_t m = atomic_load_explicit(&s->mbps, rx);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&s->seq, rx) != s1) continue;
    if (owner_pid(owner) == b->pid || g != guid || p != port || m < 0 || at < since_ns || !alive(owner, now_ns))
      continue;
    /* A window that closes in the future is a corrupt slot; taken, it would
     * stay the freshest for as long as its slot lives. */
    if (at > now_ns + LP_RB_AHEAD_NS) continue;
    if (at >= best_at) best = m, best_at = at;
  }
  return best;
}

uint64_t lp_rateboard_fault(const struct lp_rateboard *b, uint64_t guid, int port, uint64_t now_ns) {
  if (b->t == NULL) return 0;
  uint64_t latest = 0;
  for (int i = 0; i < LP_RB_SLOTS; i++) {
    struct lp_rb_slot *s = &b->t->slot[i];
    uint32_t s1 = atomic_load_explicit(&s->seq, memory_order_acquire);
    if (s1 & 1) continue; /* being written: next tick */
    uint64_t owner = atomic_load_explicit(&s->owner, rx);
    uint64_t g = atomic_load_explicit(&s->guid, rx), f = atomic_load_explicit(&s->fault_ns, rx);
    int p = atomic_load_explicit(&s->port, rx);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&s->seq, rx) != s1) continue;
    if (owner_pid(owner) == b->pid || g != guid || p != port || !alive(owner, now_ns)) continue;
    /* A fault in the future is a corrupt slot: taken, it would hide every
     * later one (lp_gray_fault wants a newer one). */
    if (f > now_ns + LP_RB_AHEAD_NS) continue;
    if (f > latest) latest = f;
  }
  return latest;
}
