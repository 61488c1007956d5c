/*
 * The event ring: a bounded MPSC queue in the style of Dmitry Vyukov's
 * bounded MPMC queue, with a single consumer and an eventfd to wake it.
 *
 * Positions.  Producers claim positions 0, 1, 2... from `tail`; the consumer
 * reads them in the same order from `head`.  Position p lives in slot
 * p & mask.  Positions are 64-bit and never wrap in practice (2^64 events).
 *
 * Slot sequence numbers.  Each slot's `seq` says who owns it:
 *   seq == p          free, waiting for the producer of position p;
 *   seq == p + 1      holds the event of position p, for the consumer;
 *   seq == p + cap    freed again by the consumer, for position p + cap.
 * Only the owner of the slot's current state moves `seq` on, so a producer
 * preempted between claiming a slot and filling it just leaves seq == p: the
 * consumer sees "not ready" there and never reads a half-written event, and
 * no other producer can claim that slot until the consumer has read it, a
 * full lap later.
 *
 * Wake-up.  See lp_ring_wait() and docs/EVENT_RING.md.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "event_ring.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

/* "Lock-free" must hold for real: were these atomics not lock-free, the
 * compiler would implement them with hidden locks (libatomic). */
_Static_assert(ATOMIC_LONG_LOCK_FREE == 2 && ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2,
               "the event ring needs lock-free 32- and 64-bit atomics");

int lp_ring_init(struct lp_event_ring *r, uint32_t capacity_pow2) {
  memset(r, 0, sizeof(*r));
  r->wake_fd = -1;
  uint32_t cap = capacity_pow2;
  /* Capacity 1 cannot work: "full" (seq == p - cap + 1) and "free"
   * (seq == p) would be the same number. */
  if (cap < LP_RING_MIN_CAPACITY || cap > LP_RING_MAX_CAPACITY || (cap & (cap - 1)) != 0) return -EINVAL;

  struct lp_ring_slot *slots = aligned_alloc(LP_RING_CACHELINE, (size_t)cap * sizeof(*slots));
  if (!slots) return -ENOMEM;
  memset(slots, 0, (size_t)cap * sizeof(*slots));
  for (uint32_t i = 0; i < cap; i++) atomic_init(&slots[i].seq, i);

  /* Non-blocking, so that a producer's write can never block (the counter
   * cannot realistically reach its limit, but the push path must not wait
   * even then). */
  int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    free(slots);
    return -err;
  }

  atomic_init(&r->tail, 0);
  r->head = 0;
  atomic_init(&r->sleeping, 0);
  atomic_init(&r->overflows, 0);
  r->slots = slots;
  r->mask = cap - 1;
  r->capacity = cap;
  r->wake_fd = fd;
  return 0;
}

void lp_ring_fini(struct lp_event_ring *r) {
  free(r->slots);
  r->slots = NULL;
  if (r->wake_fd >= 0) close(r->wake_fd);
  r->wake_fd = -1;
  r->capacity = 0;
  r->mask = 0;
}

/* Wake the consumer if it announced that it sleeps, or is about to.  Called
 * by a producer right after publishing a slot with a seq_cst store. */
static void wake_consumer(struct lp_event_ring *r) {
  /* seq_cst, pairing with the consumer's seq_cst store of sleeping = 1 and
   * its seq_cst re-load of the head slot: store-then-load on both sides (the
   * Dekker pattern), which acquire/release alone does not order.  In the
   * single total order of these operations, either the consumer's re-load
   * comes after our publish (it sees the event and does not sleep), or our
   * load here comes after its store (we see sleeping = 1 and wake it). */
  if (!atomic_load_explicit(&r->sleeping, memory_order_seq_cst)) return;
  /* Several producers may see sleeping = 1: only the one that flips it back
   * to 0 makes the system call.  Any later pusher finds 0 and skips it, which
   * is fine: the consumer is already being woken and re-checks the ring. */
  if (!atomic_exchange_explicit(&r->sleeping, 0, memory_order_seq_cst)) return;
  uint64_t one = 1;
  /* Only fails with EAGAIN if the counter is at its limit, i.e. the consumer
   * has a wake-up pending anyway. */
  ssize_t n = write(r->wake_fd, &one, sizeof(one));
  (void)n;
}

static bool push(struct lp_event_ring *r, const struct lp_event *e, bool count) {
  /* Relaxed: tail is only a ticket counter.  The CAS below is an atomic
   * read-modify-write on it, so each position is claimed by exactly one
   * producer whatever the ordering; no data is published through tail. */
  uint64_t pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
  struct lp_ring_slot *slot;
  for (;;) {
    slot = &r->slots[pos & r->mask];
    /* Acquire, pairing with the consumer's release store of seq == pos when
     * it finished reading the slot's previous event: its reads of that event
     * happen before our writes below, so we never overwrite an event while
     * it is being copied out. */
    uint64_t seq = atomic_load_explicit(&slot->seq, memory_order_acquire);
    int64_t diff = (int64_t)(seq - pos);
    if (diff == 0) {
      /* The slot is free for position pos: try to claim pos.  On failure
       * another producer took it and `pos` now holds the current tail. */
      if (atomic_compare_exchange_weak_explicit(&r->tail, &pos, pos + 1, memory_order_relaxed, memory_order_relaxed))
        break;
    } else if (diff < 0) {
      /* The slot still holds (or is being filled with) the event of
       * position pos - capacity, which the consumer has not read: the ring
       * is full.  Even if `pos` is stale, at the moment of our load tail was
       * >= pos and head <= pos - capacity, so the ring really was full. */
      if (count) atomic_fetch_add_explicit(&r->overflows, 1, memory_order_relaxed);
      return false;
    } else {
      /* Another producer claimed pos (and maybe filled it) since we read
       * tail: start again from the current tail. */
      pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
    }
  }

  slot->ev = *e;
  /* Publish: release so that the event's bytes are visible to the consumer
   * once its acquire load sees pos + 1.  seq_cst (and not just release) for
   * the wake-up protocol only: see wake_consumer().  On x86 this costs an
   * xchg instead of a mov; the CAS above already cost a locked instruction. */
  atomic_store_explicit(&slot->seq, pos + 1, memory_order_seq_cst);
  wake_consumer(r);
  return true;
}

bool lp_ring_push(struct lp_event_ring *r, const struct lp_event *e) { return push(r, e, true); }

bool lp_ring_try_push(struct lp_event_ring *r, const struct lp_event *e) { return push(r, e, false); }

bool lp_ring_pop(struct lp_event_ring *r, struct lp_event *out) {
  uint64_t pos = r->head; /* only the consumer touches head */
  struct lp_ring_slot *slot = &r->slots[pos & r->mask];
  /* Acquire, pairing with the producer's publishing store of pos + 1: the
   * event it wrote before that store is visible to the copy below. */
  uint64_t seq = atomic_load_explicit(&slot->seq, memory_order_acquire);
  /* seq == pos: empty, or its producer has claimed the slot and not yet
   * finished writing it.  Later slots may already be published, but FIFO
   * order means waiting for this one; its producer wakes us when done. */
  if (seq != pos + 1) return false;
  *out = slot->ev;
  /* Release, pairing with the acquire load of the producer of position
   * pos + capacity: our copy above happens before its overwrite. */
  atomic_store_explicit(&slot->seq, pos + r->capacity, memory_order_release);
  r->head = pos + 1;
  return true;
}

static bool head_ready(struct lp_event_ring *r, memory_order mo) {
  uint64_t pos = r->head;
  return atomic_load_explicit(&r->slots[pos & r->mask].seq, mo) == pos + 1;
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * The consumer's side of the wake-up protocol:
 *   1. if the head slot is published, return;
 *   2. store sleeping = 1 (seq_cst): "I am going to sleep";
 *   3. re-load the head slot's seq (seq_cst): if it is published now, clear
 *      sleeping and return;
 *   4. poll the eventfd; then clear sleeping, drain the eventfd, go to 1.
 * A producer publishes its slot (seq_cst store), then loads sleeping
 * (seq_cst); if it is 1, it exchanges it to 0 and, if it won the exchange,
 * writes the eventfd.  Steps 2-3 and the producer's store-then-load are the
 * two halves of a Dekker handshake, so at least one side sees the other: the
 * consumer never sleeps through the publication of the slot it waits for.
 * Spurious wake-ups (a wake meant for an earlier sleep, or a producer of a
 * later slot waking us while the head's producer is still writing) only cost
 * one more turn of the loop.
 */
int lp_ring_wait(struct lp_event_ring *r, int timeout_ms) {
  int64_t start = timeout_ms > 0 ? now_ms() : 0;
  for (;;) {
    if (head_ready(r, memory_order_acquire)) return 1;
    int left = -1;
    if (timeout_ms == 0) return 0;
    if (timeout_ms > 0) {
      int64_t elapsed = now_ms() - start;
      if (elapsed >= timeout_ms) return 0;
      left = (int)(timeout_ms - elapsed);
    }

    atomic_store_explicit(&r->sleeping, 1, memory_order_seq_cst);
    if (head_ready(r, memory_order_seq_cst)) {
      atomic_store_explicit(&r->sleeping, 0, memory_order_seq_cst);
      return 1;
    }
    struct pollfd pfd = {.fd = r->wake_fd, .events = POLLIN};
    int n = poll(&pfd, 1, left);
    int err = n < 0 ? errno : 0;
    atomic_store_explicit(&r->sleeping, 0, memory_order_seq_cst);
    if (n < 0 && err != EINTR) return -err;
    if (n > 0) {
      uint64_t count;
      if (read(r->wake_fd, &count, sizeof(count)) < 0 && errno != EAGAIN) return -errno;
    }
  }
}

uint64_t lp_ring_overflows(const struct lp_event_ring *r) {
  /* Relaxed: a statistic; the counter's own atomicity is all it needs. */
  return atomic_load_explicit(&r->overflows, memory_order_relaxed);
}

const char *lp_event_type_name(uint32_t type) {
  static const char *const names[LP_EV_TYPE_COUNT] = {
      [LP_EV_NONE] = "none",
      [LP_EV_ASYNC] = "async",
      [LP_EV_PORT_DOWN] = "port_down",
      [LP_EV_PORT_UP] = "port_up",
      [LP_EV_SILENT_FAULT] = "silent_fault",
      [LP_EV_LINES_HELD] = "lines_held",
      [LP_EV_STOP] = "stop",
  };
  return type < LP_EV_TYPE_COUNT ? names[type] : "unknown";
}
