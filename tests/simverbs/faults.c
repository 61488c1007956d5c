/*
 * faults.c: what an operator (the simverbs tool) or a test injects into a
 * running fabric.
 *
 * These functions only flip state in the shared segment and wake the
 * processes that must notice: each process's engine reacts to the flags (a
 * port that is DOWN, a device in fatal error, a QP asked to fail) and raises
 * completions and async events in its own context, as a NIC would.
 *
 * None of them may be called with f->lock held: posting an event takes it.
 */
#include "fabric.h"

#include <errno.h>

static struct sv_device *dev_get(struct sv_fabric *f, int dev) {
  if (dev < 0 || dev >= SV_MAX_DEVS || (uint32_t)dev >= f->ndevs || !f->devs[dev].in_use) {
    errno = ENODEV;
    return NULL;
  }
  return &f->devs[dev];
}

/* Appends one event to the device's ring.  Readers remember the last seq
 * they delivered and read forward from it; they find an entry valid when its
 * seq is the one they expect (a slower reader that was lapped sees a larger
 * seq and knows it lost events).  Hence the order: the entry's fields, then
 * its seq, then the ring's event_seq, each publication with release order.
 * The lock only orders writers among themselves. */
void sv_device_post_event(struct sv_fabric *f, int dev, enum ibv_event_type type, uint32_t element) {
  struct sv_device *d = dev_get(f, dev);
  uint64_t seq, slot;
  if (!d) return;
  sv_lock(&f->lock);
  seq = atomic_load_explicit(&d->event_seq, memory_order_relaxed) + 1;
  slot = seq % SV_EVENT_LOG;
  /* The entry is plain memory that readers poll: GCC's atomic builtins give
   * the stores the ordering the header's plain fields cannot. */
  __atomic_store_n(&d->events[slot].type, (uint32_t)type, __ATOMIC_RELAXED);
  __atomic_store_n(&d->events[slot].element, element, __ATOMIC_RELAXED);
  __atomic_store_n(&d->events[slot].seq, seq, __ATOMIC_RELEASE);
  atomic_store_explicit(&d->event_seq, seq, memory_order_release);
  sv_unlock(&f->lock);
}

/* Link up/down.  The state flips first, so that by the time anyone reads
 * the event (or sysfs) the port already behaves as reported; a port set to
 * the state it already has raises no event, as on hardware. */
int sv_port_set_state(struct sv_fabric *f, int dev, int port, int up) {
  struct sv_device *d = dev_get(f, dev);
  uint32_t want = up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  uint32_t old;
  int rc;
  if (!d) return -1;
  if (port < 1 || (uint32_t)port > d->nports || port > SV_MAX_PORTS) {
    errno = EINVAL;
    return -1;
  }
  old = atomic_exchange(&d->ports[port - 1].state, want);
  if (old != want && !up) atomic_fetch_add(&d->ports[port - 1].link_downs, 1);
  rc = sv_sysfs_update_port(f, dev, port);
  if (old != want) sv_device_post_event(f, dev, up ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR, (uint32_t)port);
  sv_wake_all(f);
  return rc;
}

/* Device fatal: every context of the device sees DEVICE_FATAL, its QPs
 * error out and its commands fail from then on (sv_ctx_dead); clearing it
 * lets new opens succeed again (a reset NIC), but raises no event: on
 * hardware the old contexts stay dead. */
int sv_device_set_fatal(struct sv_fabric *f, int dev, int fatal) {
  struct sv_device *d = dev_get(f, dev);
  uint32_t old;
  if (!d) return -1;
  old = atomic_exchange(&d->fatal, fatal ? 1u : 0u);
  if (fatal && !old) atomic_fetch_add(&d->fatal_gen, 1); /* the contexts open now are dead for good */
  atomic_fetch_add(&f->fault_gen, 1);
  if (fatal && !old) sv_device_post_event(f, dev, IBV_EVENT_DEVICE_FATAL, 0);
  sv_wake_all(f);
  return 0;
}

/* A QPN names a table slot and a generation; a stale QPN (slot reused or
 * freed) must not reach whatever lives in the slot now. */
struct sv_qp *sv_qp_by_qpn(struct sv_fabric *f, uint32_t qpn) {
  uint32_t idx = sv_qpn_index(qpn);
  struct sv_qp *qp;
  if (idx >= SV_MAX_QPS) return NULL;
  qp = &f->qps[idx];
  if (!atomic_load_explicit(&qp->in_use, memory_order_acquire)) return NULL;
  if ((qp->gen & SV_QPN_GEN_MASK) != sv_qpn_gen(qpn)) return NULL;
  return qp;
}

/* Ask the owner's engine to fail the QP as the hardware would (error
 * completion for the head WR, flush for the rest, IBV_EVENT_QP_FATAL).
 * The lookup and the flag are done under the lock that guards QP slot
 * allocation, so the flag cannot land on a slot being reused. */
int sv_qp_inject_fatal(struct sv_fabric *f, uint32_t qpn) {
  struct sv_qp *qp;
  int32_t owner = -1;
  sv_lock(&f->lock);
  qp = sv_qp_by_qpn(f, qpn);
  if (qp) {
    atomic_store(&qp->fault, SV_QP_FAULT_FATAL);
    atomic_fetch_add(&f->fault_gen, 1);
    owner = qp->owner;
  }
  sv_unlock(&f->lock);
  if (!qp) {
    errno = ENOENT;
    return -1;
  }
  sv_proc_wake(f, owner);
  return 0;
}
