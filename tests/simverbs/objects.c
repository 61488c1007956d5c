/* simverbs: protection domains, memory regions, completion queues and
 * channels, async events. */
#include "simverbs.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct sv_fabric *fab(void) { return sv_lib.fab; }

SV_EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *c) {
  if (sv_ctx_dead(c)) {
    errno = EIO;
    return NULL;
  }
  struct sv_pd *pd = calloc(1, sizeof(*pd));
  if (!pd) {
    errno = ENOMEM;
    return NULL;
  }
  pd->pd.context = c;
  pd->refs = 1;
  pd->id = atomic_fetch_add(&fab()->next_pd_id, 1);
  pd->pd.handle = (uint32_t)pd->id;
  return &pd->pd;
}

void sv_pd_hold(struct ibv_pd *pd) { atomic_fetch_add(&((struct sv_pd *)pd)->refs, 1); }

void sv_pd_drop(struct ibv_pd *pd) {
  if (atomic_fetch_sub(&((struct sv_pd *)pd)->refs, 1) == 1) free(pd);
}

/* A consumer that deallocates a PD while another of its threads creates a
 * QP or a registration on it is not serialized as the kernel's object locks
 * do (docs/SIMVERBS.md). */
SV_EXPORT int ibv_dealloc_pd(struct ibv_pd *pd) {
  if (atomic_load(&((struct sv_pd *)pd)->refs) > 1 && !sv_ctx_dead(pd->context)) {
    errno = EBUSY; /* as the failed command sets it, besides the return value */
    return EBUSY;  /* a QP or a registration still uses it */
  }
  sv_pd_drop(pd);
  return 0;
}

/* ---- memory regions ---- */

/* Every field of a slot but in_use and seq, copied with `op` (below). */
#define SV_MR_FIELDS(op)                                                                                       \
  op(gen) op(owner) op(dev) op(pd_id) op(addr) op(length) op(iova) op(access) op(win_fd) op(dmabuf) op(win_id) \
      op(win_lo) op(win_hi) op(win_off) op(win_len)
#define SV_MR_LOAD(field) out->field = __atomic_load_n(&m->field, __ATOMIC_ACQUIRE);
#define SV_MR_STORE(field) __atomic_store_n(&m->field, from->field, __ATOMIC_RELEASE);

int sv_mr_read(struct sv_fabric *f, uint32_t key, struct sv_mr *out) {
  uint32_t idx = sv_key_index(key);
  if (idx >= SV_MAX_MRS) return 0;
  struct sv_mr *m = &f->mrs[idx];
  for (;;) {
    uint32_t s1 = atomic_load_explicit(&m->seq, memory_order_acquire);
    if (!atomic_load_explicit(&m->in_use, memory_order_acquire)) return 0;
    if (s1 & 1) { /* being rewritten: the key it had is gone */
      sched_yield();
      continue;
    }
    SV_MR_FIELDS(SV_MR_LOAD) /* acquire: the second look at seq stays after them */
    if (atomic_load_explicit(&m->seq, memory_order_relaxed) == s1) break;
  }
  return out->gen == sv_key_gen(key);
}

/* Rewrite slot m from *from (the fabric lock held: one writer a slot). */
static void mr_write(struct sv_mr *m, const struct sv_mr *from) {
  uint32_t s = atomic_load_explicit(&m->seq, memory_order_relaxed);
  s += s & 1; /* odd: its last writer died in the middle, and the slot was reclaimed free */
  atomic_store_explicit(&m->seq, s + 1, memory_order_relaxed);
  SV_MR_FIELDS(SV_MR_STORE) /* release: a reader that sees one of them sees seq odd */
  atomic_store_explicit(&m->seq, s + 2, memory_order_release);
}

static const int sv_known_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                   IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED |
                                   IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB | IBV_ACCESS_RELAXED_ORDERING;

/* The access flags the kernel takes for a registration; 0 or EINVAL. */
static int access_ok(unsigned int access) {
  /* Optional-range bits (relaxed ordering and future ones) are hints: accept. */
  unsigned mandatory = access & ~(unsigned)IBV_ACCESS_OPTIONAL_RANGE;
  if ((mandatory & ~(unsigned)sv_known_access) ||
      ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE)))
    return EINVAL; /* the kernel refuses remote write without local write */
  return 0;
}

/* Give `shared` (its memory and window already set up) a slot of the
 * fabric's MR table and the caller its handle; on failure the window goes. */
static struct ibv_mr *mr_publish(struct ibv_pd *pd, struct sv_mr *shared, uint64_t iova, uint64_t offset,
                                 unsigned int access) {
  struct sv_fabric *f = fab();
  struct sv_mr_handle *h = calloc(1, sizeof(*h));
  int idx = -1;
  uint32_t gen = 0;
  if (h) {
    sv_lock(&f->lock);
    for (int i = 1; i < SV_MAX_MRS; i++) /* index 0 unused: key 0 is never valid */
      if (!atomic_load(&f->mrs[i].in_use)) {
        idx = i;
        struct sv_mr *m = &f->mrs[i];
        struct sv_mr next = *shared;
        next.gen = (__atomic_load_n(&m->gen, __ATOMIC_RELAXED) + 1) & 0xffff;
        if (next.gen == 0) next.gen = 1;
        next.owner = sv_lib.proc;
        next.dev = (uint32_t)sv_ctx_of(pd->context)->dev;
        next.pd_id = ((struct sv_pd *)pd)->id;
        next.iova = iova;
        next.access = access;
        mr_write(m, &next);
        gen = next.gen;
        atomic_store_explicit(&m->in_use, 1, memory_order_release);
        break;
      }
    sv_unlock(&f->lock);
  }
  if (idx < 0) {
    sv_window_release(shared);
    free(h);
    errno = ENOMEM;
    return NULL;
  }
  sv_pd_hold(pd);
  h->index = idx;
  h->mr.context = pd->context;
  h->mr.pd = pd;
  /* As rdma-core's ibv_reg_dmabuf_mr does, a dma-buf registration's addr
   * is its offset in the dma-buf, neither its iova nor any address in the
   * caller's space: a consumer that checks its buffers against addr fails
   * here as on hardware. */
  h->mr.addr = (void *)(uintptr_t)(shared->dmabuf ? offset : shared->addr);
  h->mr.length = shared->length;
  h->mr.lkey = h->mr.rkey = sv_make_key((uint32_t)idx, gen);
  h->mr.handle = (uint32_t)idx;
  return &h->mr;
}

SV_EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                                          unsigned int access) {
  int err = sv_ctx_dead(pd->context) ? EIO : access_ok(access);
  if (!err && !addr && length) err = EINVAL;
  if (err) {
    errno = err;
    return NULL;
  }
  /* Share the pages before taking the fabric lock: it copies the region. */
  struct sv_mr shared = {.addr = (uint64_t)(uintptr_t)addr, .length = length};
  sv_window_share(&shared);
  return mr_publish(pd, &shared, iova, 0, access);
}

/* As mlx5 on a kernel with dma-buf support (5.12+): the memory is the
 * buffer's pages [offset, offset + length), reached at `iova`, held by the
 * registration after the caller closes its fd.  A device without dma-buf
 * support answers EOPNOTSUPP before it looks at the fd, which is what
 * NCCL's probe (fd -1) relies on. */
SV_EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova, int fd,
                                           int access) {
  struct sv_fabric *f = fab();
  int err = sv_ctx_dead(pd->context)                      ? EIO
            : f->devs[sv_ctx_of(pd->context)->dev].dmabuf ? access_ok((unsigned)access)
                                                          : EOPNOTSUPP;
  struct sv_mr shared = {.length = length};
  if (!err) err = sv_window_dmabuf(&shared, fd, offset, length, iova);
  if (err) {
    errno = err;
    return NULL;
  }
  return mr_publish(pd, &shared, iova, offset, (unsigned)access);
}

#undef ibv_reg_mr
SV_EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access) {
  return ibv_reg_mr_iova2(pd, addr, length, (uint64_t)(uintptr_t)addr, (unsigned)access);
}

#undef ibv_reg_mr_iova
SV_EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access) {
  return ibv_reg_mr_iova2(pd, addr, length, iova, (unsigned)access);
}

SV_EXPORT int ibv_dereg_mr(struct ibv_mr *mr) {
  struct sv_mr_handle *h = (struct sv_mr_handle *)mr;
  struct sv_mr *m = &fab()->mrs[h->index];
  /* Release the window while the slot is still this registration's: once
   * in_use drops, a registration in any thread or process may take the
   * slot and overwrite its window fields. */
  sv_window_release(m);
  atomic_store_explicit(&m->in_use, 0, memory_order_release);
  sv_pd_drop(h->mr.pd);
  free(h);
  return 0;
}

/* ---- completion channels ---- */

SV_EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *c) {
  if (sv_ctx_dead(c)) {
    errno = EIO;
    return NULL;
  }
  struct sv_channel *ch = calloc(1, sizeof(*ch));
  int fds[2];
  if (!ch || pipe2(fds, O_CLOEXEC) != 0) {
    free(ch);
    errno = ENOMEM;
    return NULL;
  }
  fcntl(fds[1], F_SETFL, O_NONBLOCK);
  ch->ch.context = c;
  ch->ch.fd = fds[0];
  ch->wr_fd = fds[1];
  return &ch->ch;
}

SV_EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel) {
  struct sv_channel *ch = (struct sv_channel *)channel;
  if (channel->refcnt) return EBUSY;
  close(ch->ch.fd);
  close(ch->wr_fd);
  free(ch);
  return 0;
}

/* ---- completion queues ---- */

SV_EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *c, int cqe, void *cq_context,
                                       struct ibv_comp_channel *channel, int comp_vector) {
  struct sv_fabric *f = fab();
  if (sv_ctx_dead(c)) {
    errno = EIO;
    return NULL;
  }
  if (cqe < 1 || cqe >= SV_MAX_CQE || comp_vector < 0 || comp_vector >= c->num_comp_vectors) {
    errno = EINVAL;
    return NULL;
  }
  struct sv_cq_local *lc = calloc(1, sizeof(*lc));
  if (!lc) {
    errno = ENOMEM;
    return NULL;
  }
  lc->serial = sv_new_serial();
  uint32_t size = 1;
  while (size < (uint32_t)cqe + 1) size <<= 1;                                          /* hardware rounds up too */
  uint64_t off = sv_heap_alloc(f, (uint64_t)size * sizeof(struct sv_cqe), sv_lib.proc); /* zeroed */
  int idx = -1;
  if (off != UINT64_MAX) {
    sv_lock(&f->lock);
    for (int i = 0; i < SV_MAX_CQS; i++)
      if (!atomic_load(&f->cqs[i].in_use)) {
        struct sv_cq *q = &f->cqs[i];
        idx = i;
        q->gen++;
        q->owner = sv_lib.proc;
        q->dev = (uint32_t)sv_ctx_of(c)->dev;
        q->size = size;
        q->tail = q->head_seen = 0;
        atomic_store(&q->head, 0);
        q->ring_off = off;
        atomic_store(&q->armed, 0);
        atomic_store(&q->notify_pending, 0);
        atomic_store(&q->overrun, 0);
        atomic_store(&q->broken, 0);
        atomic_store(&q->in_use, 1);
        break;
      }
    sv_unlock(&f->lock);
  }
  if (idx < 0) {
    if (off != UINT64_MAX) sv_heap_free(f, off);
    free(lc);
    errno = ENOMEM;
    return NULL;
  }
  lc->index = idx;
  lc->ring = sv_heap_ptr(f, off);
  pthread_mutex_init(&lc->poll_lock, NULL);
  lc->cq.context = c;
  lc->cq.channel = channel;
  lc->cq.cq_context = cq_context;
  lc->cq.handle = (uint32_t)idx;
  lc->cq.cqe = (int)size - 1;
  pthread_mutex_init(&lc->cq.mutex, NULL);
  pthread_cond_init(&lc->cq.cond, NULL);
  if (channel) atomic_fetch_add((_Atomic int *)&channel->refcnt, 1);
  pthread_mutex_lock(&sv_lib.lock);
  lc->next = sv_lib.cqs;
  sv_lib.cqs = lc;
  pthread_mutex_unlock(&sv_lib.lock);
  return &lc->cq;
}

SV_EXPORT int ibv_destroy_cq(struct ibv_cq *cq) {
  struct sv_cq_local *lc = (struct sv_cq_local *)cq;
  struct sv_fabric *f = fab();
  pthread_mutex_lock(&sv_lib.lock);
  if (lc->users > 0) {
    pthread_mutex_unlock(&sv_lib.lock);
    errno = EBUSY;
    return EBUSY; /* a QP still completes into it */
  }
  for (struct sv_cq_local **p = &sv_lib.cqs; *p; p = &(*p)->next)
    if (*p == lc) {
      *p = lc->next;
      break;
    }
  pthread_mutex_unlock(&sv_lib.lock);
  struct sv_cq *q = &f->cqs[lc->index];
  uint64_t ring_off = q->ring_off; /* before the slot is free for another create_cq to fill */
  sv_lock(&q->lock);
  atomic_store(&q->in_use, 0);
  sv_unlock(&q->lock);
  sv_heap_free(f, ring_off);
  if (cq->channel) atomic_fetch_sub((_Atomic int *)&cq->channel->refcnt, 1);
  sv_await_acks(&lc->events_taken, &lc->events_acked, "ibv_destroy_cq", (uint32_t)lc->index);
  free(lc);
  return 0;
}

_Static_assert(sizeof(struct sv_cqe) == 64, "a completion is one cache line");

/* Append one completion, which frees `frees` (sv_frees) when it is polled.
 * Called by the CQ's owner and by remote senders.  Returns SV_CQ_BROKEN
 * when the CQ is full or broke before: the completion is lost, the owner
 * is told at the first (CQ_ERR), and the CQ takes nothing again, as the IB
 * spec has it (C11-37); the caller breaks the QP that completed into it.
 * SV_CQ_GONE: the CQ was destroyed (its owner died). */
int sv_cq_push(struct sv_fabric *f, int cq_index, const struct ibv_wc *wc, uint64_t frees) {
  struct sv_cq *q = &f->cqs[cq_index];
  int rc = 0;
  sv_lock(&q->lock);
  if (!atomic_load(&q->in_use)) {
    sv_unlock(&q->lock);
    return SV_CQ_GONE;
  }
  uint64_t t = q->tail;
  if (t - q->head_seen >= q->size) q->head_seen = atomic_load_explicit(&q->head, memory_order_acquire);
  int first_overrun = 0;
  if (atomic_load(&q->broken)) {
    rc = SV_CQ_BROKEN;
  } else if (t - q->head_seen >= q->size) {
    atomic_store(&q->broken, 1);
    atomic_store(&q->overrun, 1);
    rc = SV_CQ_BROKEN;
    first_overrun = 1;
  } else {
    struct sv_cqe *e = (struct sv_cqe *)sv_heap_ptr(f, q->ring_off) + (t & (q->size - 1));
    e->wc = *wc;
    e->frees = frees;
    atomic_store_explicit(&e->seq, t + 1, memory_order_release);
    q->tail = t + 1;
  }
  sv_unlock(&q->lock);
  uint32_t armed = atomic_load(&q->armed);
  int wake = first_overrun;
  if (armed && (armed == 1 || (wc->wc_flags & IBV_WC_WITH_IMM) || wc->status != IBV_WC_SUCCESS) &&
      atomic_exchange(&q->armed, 0)) {
    atomic_fetch_add(&q->notify_pending, 1);
    wake = 1;
  }
  if (wake) {
    /* After the flags: the engine looks at its CQs only when this moved. */
    if (q->owner >= 0 && q->owner < SV_MAX_PROCS) atomic_fetch_add(&f->procs[q->owner].cq_events, 1);
    sv_proc_wake(f, q->owner);
  }
  return rc;
}

/* A polled completion frees its queue's slots up to its request's
 * (sv_frees); one of a QP destroyed since frees nothing.  Release: the
 * poster reuses the slots after this, and the executor read them before
 * it pushed the completion. */
static void free_slots(struct sv_fabric *f, uint32_t qpn, uint64_t frees) {
  struct sv_qp *q = &f->qps[sv_qpn_index(qpn)];
  _Atomic uint64_t *mark = (frees & SV_FREES_RECV) ? &q->rq_freed : &q->sq_freed;
  uint64_t want = sv_queue_mark(qpn, (uint32_t)frees);
  uint64_t cur = atomic_load_explicit(mark, memory_order_relaxed);
  do {
    if ((uint32_t)(cur >> 32) != qpn || (int32_t)((uint32_t)frees - (uint32_t)cur) <= 0) return;
  } while (!atomic_compare_exchange_weak_explicit(mark, &cur, want, memory_order_release, memory_order_relaxed));
}

/* Whether the entry at position `h` is there. */
static int cqe_ready(const struct sv_cq_local *lc, uint32_t size, uint64_t h) {
  return atomic_load_explicit(&lc->ring[h & (size - 1)].seq, memory_order_acquire) == h + 1;
}

int sv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
  struct sv_fabric *f = fab();
  struct sv_cq_local *lc = (struct sv_cq_local *)cq;
  struct sv_cq *q = &f->cqs[lc->index];
  if (n < 0) return -1;
  if (!cqe_ready(lc, q->size, atomic_load_explicit(&q->head, memory_order_relaxed))) {
    /* Busy pollers drive deferred work: on 2 cores the engine thread may not
     * get a CPU for a whole time slice while they spin.  What that work
     * completes into this CQ is taken by this poll: a NIC wrote those
     * completions when they were due, before this poll came, and a poll
     * that left them to the next one delayed every completion by one turn
     * of the caller's loop, more for a caller whose loop is longer
     * (docs/SIMVERBS.md). */
    uint64_t due = atomic_load_explicit(&sv_lib.deferred_due_ns, memory_order_relaxed);
    if (due == UINT64_MAX || sv_now_ns() < due) return 0;
    sv_progress_deferred();
    if (!cqe_ready(lc, q->size, atomic_load_explicit(&q->head, memory_order_relaxed))) return 0;
  }
  pthread_mutex_lock(&lc->poll_lock);
  uint64_t h = atomic_load_explicit(&q->head, memory_order_relaxed);
  int got = 0;
  while (got < n && cqe_ready(lc, q->size, h)) {
    const struct sv_cqe *e = &lc->ring[h & (q->size - 1)];
    wc[got] = e->wc;
    if (e->frees) free_slots(f, e->wc.qp_num, e->frees);
    got++;
    h++;
  }
  /* release: producers reuse an entry only after seeing head pass it */
  atomic_store_explicit(&q->head, h, memory_order_release);
  pthread_mutex_unlock(&lc->poll_lock);
  return got;
}

/* ibv_destroy_qp: QP `qpn`'s completions not polled yet leave the CQ, as
 * mlx5's destroy takes them out of its CQs: a poll after the destroy never
 * returns a completion of a QP that is gone (its wr_id may name memory the
 * consumer freed with it), and a consumer that counts on those completions
 * to finish its work hangs here as it would on a NIC.  The others keep
 * their order: they are moved up toward the tail over the ones taken out,
 * and the head steps past the gap.  Under both the pollers' and the
 * producers' locks. */
void sv_cq_clean(struct ibv_cq *cq, uint32_t qpn) {
  struct sv_cq_local *lc = (struct sv_cq_local *)cq;
  struct sv_cq *q = &fab()->cqs[lc->index];
  uint64_t mask = q->size - 1;
  pthread_mutex_lock(&lc->poll_lock);
  sv_lock(&q->lock);
  uint64_t head = atomic_load_explicit(&q->head, memory_order_relaxed), kept = q->tail;
  for (uint64_t i = q->tail; i-- > head;) {
    struct sv_cqe *e = &lc->ring[i & mask];
    if (e->wc.qp_num == qpn) continue;
    kept--;
    if (kept == i) continue;
    struct sv_cqe *to = &lc->ring[kept & mask];
    to->wc = e->wc;
    to->frees = e->frees;
    atomic_store_explicit(&to->seq, kept + 1, memory_order_release);
  }
  /* Release: a producer reuses the slots behind the new head only after
   * it sees it. */
  atomic_store_explicit(&q->head, kept, memory_order_release);
  sv_unlock(&q->lock);
  pthread_mutex_unlock(&lc->poll_lock);
}

int sv_req_notify_cq(struct ibv_cq *cq, int solicited_only) {
  struct sv_cq *q = &fab()->cqs[((struct sv_cq_local *)cq)->index];
  atomic_store(&q->armed, solicited_only ? 2u : 1u);
  return 0;
}

SV_EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context) {
  uint64_t handle;
  ssize_t n = read(channel->fd, &handle, sizeof(handle));
  if (n != (ssize_t)sizeof(handle)) return -1;
  *cq = (struct ibv_cq *)(uintptr_t)handle;
  *cq_context = (*cq)->cq_context;
  return 0;
}

SV_EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents) {
  pthread_mutex_lock(&cq->mutex);
  cq->comp_events_completed += nevents;
  pthread_cond_signal(&cq->cond);
  pthread_mutex_unlock(&cq->mutex);
}

/* ---- async events ---- */

/* An event that names a QP (element.qp). */
static int qp_event(uint32_t type) {
  switch (type) {
  case IBV_EVENT_QP_FATAL:
  case IBV_EVENT_QP_REQ_ERR:
  case IBV_EVENT_QP_ACCESS_ERR:
  case IBV_EVENT_COMM_EST:
  case IBV_EVENT_SQ_DRAINED:
  case IBV_EVENT_PATH_MIG:
  case IBV_EVENT_PATH_MIG_ERR:
  case IBV_EVENT_QP_LAST_WQE_REACHED: return 1;
  default: return 0;
  }
}

/* The live QP or CQ of this process an affiliated event names, with the
 * count of its events taken; NULL when it was destroyed since (or the
 * event is not affiliated).  sv_lib.lock held. */
static _Atomic uint32_t *taken_count(const struct sv_async_record *r) {
  if (r->type == IBV_EVENT_CQ_ERR) {
    for (struct sv_cq_local *lc = sv_lib.cqs; lc; lc = lc->next)
      if ((uintptr_t)&lc->cq == r->element && lc->serial == r->serial) return &lc->events_taken;
  } else if (qp_event(r->type)) {
    for (struct sv_qp_local *lq = sv_lib.qps; lq; lq = lq->next)
      if ((uintptr_t)&lq->qp == r->element && lq->serial == r->serial) return &lq->events_taken;
  }
  return NULL;
}

/* As the kernel hands them out: an event of a QP or CQ destroyed before it
 * was read is discarded with its object (the next one is read, and a
 * non-blocking fd with nothing left says EAGAIN); one that is read counts
 * against its object, whose destroy waits for its ack. */
SV_EXPORT int ibv_get_async_event(struct ibv_context *c, struct ibv_async_event *event) {
  struct sv_async_record r;
  for (;;) {
    ssize_t n = read(c->async_fd, &r, sizeof(r));
    if (n != (ssize_t)sizeof(r)) return -1;
    if (r.serial == 0) break;
    pthread_mutex_lock(&sv_lib.lock);
    _Atomic uint32_t *taken = taken_count(&r);
    if (taken != NULL) atomic_fetch_add(taken, 1);
    pthread_mutex_unlock(&sv_lib.lock);
    if (taken != NULL) break;
  }
  memset(event, 0, sizeof(*event));
  event->event_type = (enum ibv_event_type)r.type;
  if (r.type == IBV_EVENT_CQ_ERR)
    event->element.cq = (struct ibv_cq *)(uintptr_t)r.element;
  else if (qp_event(r.type))
    event->element.qp = (struct ibv_qp *)(uintptr_t)r.element;
  else
    event->element.port_num = r.type == IBV_EVENT_DEVICE_FATAL ? 0 : (int)r.element;
  return 0;
}

uint32_t sv_new_serial(void) {
  uint32_t s;
  while ((s = atomic_fetch_add(&sv_lib.next_serial, 1) + 1) == 0) continue; /* 0 names no object */
  return s;
}

/* rdma-core counts the affiliated events the kernel hands it and
 * ibv_destroy_qp or ibv_destroy_cq waits until each one read is acked (the
 * event names the object: it must outlive its reader).  A consumer that
 * destroys a QP while holding its event unacked hangs there on hardware;
 * here too, with a word on stderr after SV_ACK_SAY_S. */
SV_EXPORT void ibv_ack_async_event(struct ibv_async_event *event) {
  _Atomic uint32_t *acked;
  if (event->event_type == IBV_EVENT_CQ_ERR)
    acked = &((struct sv_cq_local *)event->element.cq)->events_acked;
  else if (qp_event(event->event_type))
    acked = &((struct sv_qp_local *)event->element.qp)->events_acked;
  else
    return; /* a device's or a port's: nothing waits for it */
  pthread_mutex_lock(&sv_lib.ack_lock);
  atomic_fetch_add(acked, 1);
  pthread_cond_broadcast(&sv_lib.ack_cond);
  pthread_mutex_unlock(&sv_lib.ack_lock);
}

#define SV_ACK_SAY_S 5

void sv_await_acks(_Atomic uint32_t *taken, _Atomic uint32_t *acked, const char *call, uint32_t num) {
  pthread_mutex_lock(&sv_lib.ack_lock);
  for (int waited_s = 0; atomic_load(acked) != atomic_load(taken);) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 1;
    if (pthread_cond_timedwait(&sv_lib.ack_cond, &sv_lib.ack_lock, &until) == ETIMEDOUT && ++waited_s == SV_ACK_SAY_S)
      fprintf(stderr,
              "simverbs: %s(0x%x) has waited %d s for ibv_ack_async_event of %u async event(s) of it that were "
              "read: rdma-core waits until they are acked (forever, if nobody will)\n",
              call, num, SV_ACK_SAY_S, atomic_load(taken) - atomic_load(acked));
  }
  pthread_mutex_unlock(&sv_lib.ack_lock);
}
