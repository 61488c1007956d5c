/*
 * The event ring: a small bounded lock-free multi-producer single-consumer
 * queue that carries fault and state events from the data-path and monitor
 * threads to the one control thread.  docs/EVENT_RING.md has the design.
 *
 * - Any number of threads may call lp_ring_push() at once.  It never blocks,
 *   takes no lock and makes no system call, except one eventfd write when the
 *   consumer has announced that it is going to sleep.  When the ring is full
 *   it returns false and counts the event in the overflow counter.
 * - Exactly one thread (the consumer) calls lp_ring_pop() and lp_ring_wait().
 * - Events come out in the order their pushes claimed a slot; in particular
 *   the events of one producer come out in the order it pushed them.
 *
 * The ring holds no global state: every ring is a caller-owned struct.
 */
#ifndef LP_EVENT_RING_H
#define LP_EVENT_RING_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* What happened.  The meaning of `status` and `arg` depends on the type. */
enum lp_event_type {
  LP_EV_NONE = 0,
  LP_EV_ASYNC, /* a NIC's async event (PORT_ERR, PORT_ACTIVE, DEVICE_FATAL...): nic, port, status = ibv_event_type */
  LP_EV_PORT_DOWN,    /* a device's RoCE interface lost its link (netwatch.c): dev */
  LP_EV_PORT_UP,      /* it has its link again: dev */
  LP_EV_SILENT_FAULT, /* a connection left a device whose port is up (stall, error completion): dev, status = reason */
  LP_EV_LINES_HELD,   /* a sweep's first event line is held: the control thread looks (report.h) */
  LP_EV_STOP,         /* the control thread is asked to finish */
  LP_EV_TYPE_COUNT
};

#define LP_EV_NO_DEV UINT32_MAX

/* One event, copied in and out of the ring by value.  A NIC (nic, an
 * index in lp_env.nics) and a device (dev, a port NCCL sees: lp_env.devs)
 * are different things; each type says which it carries. */
struct lp_event {
  uint32_t type; /* enum lp_event_type */
  uint32_t nic;  /* NIC index, for LP_EV_ASYNC */
  uint32_t dev;  /* device index, for the port and connection events (LP_EV_NO_DEV: none) */
  uint32_t port;
  int32_t status;
  uint32_t reserved; /* 0: no padding, so an event compares whole */
  uint64_t comm_id;  /* the connection concerned, 0 if none */
  uint64_t arg;
  uint64_t time_ns; /* CLOCK_MONOTONIC when the producer saw it */
};

#define LP_RING_CACHELINE 64
#define LP_RING_MIN_CAPACITY 2u
#define LP_RING_MAX_CAPACITY (1u << 24)

/* One slot per cache line, so that producers filling neighbouring slots do
 * not fight over a line.  `seq` tells who may touch `ev` (see event_ring.c). */
struct lp_ring_slot {
  alignas(LP_RING_CACHELINE) _Atomic uint64_t seq;
  struct lp_event ev;
};

/* Callers use the functions below and never touch the fields.  The fields
 * that different threads write often are kept at least a cache line apart,
 * with padding rather than alignas, so that the ring needs no more than the
 * usual alignment: it may live in any malloc'd or embedded struct. */
struct lp_event_ring {
  /* Set at init, then only read. */
  struct lp_ring_slot *slots;
  uint64_t mask; /* capacity - 1 */
  uint32_t capacity;
  int wake_fd; /* eventfd, -1 when closed */
  char pad0[LP_RING_CACHELINE];
  _Atomic uint64_t tail; /* producers: next position to claim */
  char pad1[LP_RING_CACHELINE];
  _Atomic uint32_t sleeping;  /* consumer is about to sleep, or sleeps; producers read it */
  _Atomic uint64_t overflows; /* producers, on a full ring only */
  char pad2[LP_RING_CACHELINE];
  uint64_t head; /* consumer only: next position to read */
};

/* Set up a ring of `capacity_pow2` slots: a power of two between
 * LP_RING_MIN_CAPACITY and LP_RING_MAX_CAPACITY.  Returns 0, or a negative
 * errno: -EINVAL for any other capacity, -ENOMEM, or the error of eventfd(2).
 * On failure the ring is left so that lp_ring_fini() is harmless. */
int lp_ring_init(struct lp_event_ring *r, uint32_t capacity_pow2);

/* Free the ring.  No thread may use it any more.  Safe to call twice. */
void lp_ring_fini(struct lp_event_ring *r);

/* Any thread.  Copy `*e` into the ring.  Returns false, and adds one to the
 * overflow counter, when the ring is full; never waits for the consumer. */
bool lp_ring_push(struct lp_event_ring *r, const struct lp_event *e);
/* The same, not counted when the ring is full: for an event whose loss
 * loses nothing (a wake-up that a later look makes up for, one retried). */
bool lp_ring_try_push(struct lp_event_ring *r, const struct lp_event *e);

/* Consumer only.  Take the oldest event into `*out`.  Returns false when
 * there is none ready: the ring is empty, or the producer of the oldest event
 * has claimed its slot but not finished writing it. */
bool lp_ring_pop(struct lp_event_ring *r, struct lp_event *out);

/* Consumer only.  Wait until lp_ring_pop() has an event to return, at most
 * `timeout_ms` milliseconds (negative: no limit; 0: just look).  Returns 1 if
 * an event is ready, 0 on timeout, or a negative errno if poll(2) or read(2)
 * failed.  A push that completes after the consumer started waiting always
 * wakes it: no wake-up is ever lost. */
int lp_ring_wait(struct lp_event_ring *r, int timeout_ms);

/* Any thread.  Pushes refused because the ring was full, since init. */
uint64_t lp_ring_overflows(const struct lp_event_ring *r);

/* Slot count given at init. */
static inline uint32_t lp_ring_capacity(const struct lp_event_ring *r) { return r->capacity; }

/* "async", "port_down"...; "unknown" for a value outside the enum. */
const char *lp_event_type_name(uint32_t type);

#endif
