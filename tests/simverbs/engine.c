/* simverbs: the per-process engine thread — the simulated NIC.
 *
 * It executes each QP's send queue in order: checks the path (ports up, no
 * blackhole, destination QP ready, address right), reserves wire time on the
 * sending port (rate and latency), moves the bytes straight into the peer's
 * registered memory with process_vm_writev (no action by the peer's CPU), and
 * posts completions, data first.  Retransmission follows RC hardware's
 * timers: a transmission that draws no ACK (a path that is down or black-
 * holed, a responder not yet RTR, a lost ACK) goes out again one local ACK
 * timeout (4.096 us x 2^timeout) later, retry_cnt times, and then the WR
 * completes with RETRY_EXC_ERR and the QP flushes the rest; an RNR NAK is
 * answered one RNR timer later, rnr_retry times (7: forever).  Nothing is
 * retried early, so a protocol slip costs here what it costs on a NIC. */
#include "simverbs.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define SV_SPIN_NS 20000ull          /* stay awake this long after the last work */
#define SV_BACKSTOP_NS 1000000ull    /* while pollers drive deferred work, the engine checks this often */
#define SV_ASSIST_NS 10000000ull     /* ... for this long after the last deferral */
#define SV_REPOLL_NS 20000ull        /* pollers retry work that waits without a deadline this often */
#define SV_IDLE_WAIT_NS 200000000ull /* housekeeping period when idle */
#define SV_REAP_PERIOD_NS 1000000000ull
#define SV_BATCH 64 /* WRs per QP per pass: keeps QPs fair */

static struct sv_fabric *fab(void) { return sv_lib.fab; }

/* ---- wake-ups ---- */

void sv_engine_kick(void) {
  struct sv_fabric *f = fab();
  if (sv_lib.proc < 0) return;
  atomic_fetch_add(&f->procs[sv_lib.proc].doorbell, 1);
  if (atomic_load(&sv_lib.engine_sleeping))
    syscall(SYS_futex, &f->procs[sv_lib.proc].doorbell, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void sv_async_post(struct sv_ctx *ctx, uint32_t type, uint64_t element, uint32_t serial) {
  struct sv_async_record r = {.element = element, .type = type, .serial = serial};
  /* A full pipe means nobody reads events: dropping is what a full kernel
   * event queue does too. */
  if (write(ctx->async_wr, &r, sizeof(r)) < 0) return;
}

/* ---- completions ---- */

static int is_atomic(uint32_t wr_opcode) {
  return wr_opcode == IBV_WR_ATOMIC_FETCH_AND_ADD || wr_opcode == IBV_WR_ATOMIC_CMP_AND_SWP;
}

static enum ibv_wc_opcode wc_opcode(uint32_t wr_opcode) {
  switch (wr_opcode) {
  case IBV_WR_RDMA_WRITE:
  case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
  case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
  case IBV_WR_ATOMIC_FETCH_AND_ADD: return IBV_WC_FETCH_ADD;
  case IBV_WR_ATOMIC_CMP_AND_SWP: return IBV_WC_COMP_SWAP;
  default: return IBV_WC_SEND;
  }
}

static int push_completion(struct sv_qp *q, int cq, const struct ibv_wc *wc, uint64_t frees);

/* w is the head request: its completion frees the queue up to it.  -1 when
 * its CQ broke (push_completion): the QP must stop. */
static int complete_send(struct sv_qp_local *lq, struct sv_swqe *w, enum ibv_wc_status st, uint32_t len) {
  struct sv_qp *q = &fab()->qps[lq->index];
  /* Successful unsignaled WRs complete silently; errors always surface. */
  if (st == IBV_WC_SUCCESS && !lq->sig_all && !(w->send_flags & IBV_SEND_SIGNALED)) return 0;
  struct ibv_wc wc = {.wr_id = w->wr_id, .status = st, .opcode = wc_opcode(w->opcode), .qp_num = q->qpn};
  if (st == IBV_WC_SUCCESS && (w->opcode == IBV_WR_RDMA_READ || is_atomic(w->opcode))) wc.byte_len = len;
  if (st != IBV_WC_SUCCESS) wc.vendor_err = st == IBV_WC_WR_FLUSH_ERR ? 0xf9 : 0x81;
  return push_completion(q, q->send_cq, &wc, sv_frees(0, atomic_load(&lq->sq_head)));
}

void sv_head_reset(struct sv_qp_local *lq) {
  lq->head_state = SV_HEAD_NEW;
  lq->resend = SV_RESEND_NONE;
  lq->due_ns = lq->resend_ns = 0;
  lq->retries = lq->rnr_retries = 0;
}

static void sq_pop(struct sv_qp_local *lq) {
  atomic_store_explicit(&lq->sq_head, atomic_load(&lq->sq_head) + 1, memory_order_release);
  sv_head_reset(lq);
}

static int flush_queues(struct sv_qp_local *lq) {
  struct sv_fabric *f = fab();
  struct sv_qp *q = &f->qps[lq->index];
  int progress = 0;
  while (atomic_load(&lq->sq_head) != atomic_load_explicit(&lq->sq_tail, memory_order_acquire)) {
    complete_send(lq, sv_sq_entry(lq, atomic_load(&lq->sq_head)), IBV_WC_WR_FLUSH_ERR, 0);
    sq_pop(lq);
    progress = 1;
  }
  sv_lock(&q->rq_lock);
  for (struct sv_rwqe *w; (w = sv_rq_head(f, q));) {
    struct ibv_wc wc = {
        .wr_id = w->wr_id, .status = IBV_WC_WR_FLUSH_ERR, .opcode = IBV_WC_RECV, .qp_num = q->qpn, .vendor_err = 0xf9};
    uint64_t pos = sv_rq_pop(q);
    push_completion(q, q->recv_cq, &wc, sv_frees(1, pos));
    progress = 1;
  }
  sv_unlock(&q->rq_lock);
  return progress;
}

void sv_qp_to_error(struct sv_qp_local *lq) {
  atomic_store(&fab()->qps[lq->index].state, IBV_QPS_ERR);
  lq->qp.state = IBV_QPS_ERR;
}

/* ---- addressing and path checks ---- */

/* The local ACK timeout; timeout 0 disables the timer (never retransmit). */
static uint64_t ack_timeout_ns(struct sv_qp *q) { return q->timeout ? 4096ull << q->timeout : UINT64_MAX; }

/* rdma-core's min_rnr_timer encoding, in microseconds. */
static uint64_t rnr_timer_ns(uint32_t code) {
  static const uint32_t us[32] = {655360, 10,    20,    30,    40,    60,     80,     120,    160,    240,   320,
                                  480,    640,   960,   1280,  1920,  2560,   3840,   5120,   7680,   10240, 15360,
                                  20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520};
  return (uint64_t)us[code & 31] * 1000ull;
}

/* 1 when QP q's address vector points at port p: its LID on InfiniBand,
 * one of its GIDs on RoCE. */
static int addressed_to(const struct sv_qp *q, const struct sv_port *p) {
  if (p->link_layer == IBV_LINK_LAYER_INFINIBAND) return q->ah.dlid == p->lid;
  for (uint32_t i = 0; i < p->ngids; i++)
    if (memcmp(&q->ah.grh.dgid, &p->gids[i], sizeof(union ibv_gid)) == 0) return 1;
  return 0;
}

/* The destination QP this QP's packets reach, or NULL if they reach nothing
 * (wrong address, destroyed or not-ready QP, dead owner, or a responder
 * connected to another QP).  An RC responder sends its ACKs, read
 * responses and NAKs to the QP and address it was connected to: when that
 * is not this QP, nothing comes back here, and the requester retries until
 * RETRY_EXC as for a lost path.  That catches a move that reconnects one
 * end only, or with a stale QP number (docs/SIMVERBS.md, "Half-connected
 * pairs"). */
static struct sv_qp *resolve_dest(struct sv_qp *q) {
  struct sv_fabric *f = fab();
  uint32_t idx = sv_qpn_index(q->dest_qpn);
  if (idx >= SV_MAX_QPS) return NULL;
  struct sv_qp *d = &f->qps[idx];
  if (!atomic_load(&d->in_use) || d->qpn != q->dest_qpn) return NULL;
  enum ibv_qp_state st = atomic_load(&d->state);
  if (st != IBV_QPS_RTR && st != IBV_QPS_RTS) return NULL;
  struct sv_port *lp = &f->devs[q->dev].ports[q->port - 1];
  struct sv_port *rp = &f->devs[d->dev].ports[d->port - 1];
  if (lp->link_layer != rp->link_layer || !addressed_to(q, rp)) return NULL;
  if (d->dest_qpn != q->qpn || !addressed_to(d, lp)) return NULL; /* its answers go elsewhere */
  return d;
}

static int port_passes(struct sv_port *p) {
  return atomic_load(&p->state) == IBV_PORT_ACTIVE && !atomic_load(&p->blackhole);
}

/* ---- data movement ---- */

struct xfer {
  struct iovec local[SV_MAX_SGE + 1];
  int nlocal;
  size_t len;
};

/* Translate the WR's gather list through the local MR table. */
static enum ibv_wc_status local_iov(struct sv_qp *q, struct sv_swqe *w, int need_write, struct xfer *x) {
  struct sv_fabric *f = fab();
  x->nlocal = 0;
  x->len = 0;
  if (w->inline_len) {
    x->local[0].iov_base = sv_swqe_inline(w);
    x->local[0].iov_len = w->inline_len;
    x->nlocal = 1;
    x->len = w->inline_len;
    return IBV_WC_SUCCESS;
  }
  for (uint32_t i = 0; i < w->num_sge; i++) {
    struct ibv_sge *s = &w->sge[i];
    if (!s->length) continue;
    struct sv_mr m;
    if (!sv_mr_read(f, s->lkey, &m) || m.owner != sv_lib.proc || m.pd_id != q->pd_id) return IBV_WC_LOC_PROT_ERR;
    if (need_write && !(m.access & IBV_ACCESS_LOCAL_WRITE)) return IBV_WC_LOC_PROT_ERR;
    if (s->addr < m.iova || s->addr + s->length > m.iova + m.length) return IBV_WC_LOC_PROT_ERR;
    x->local[x->nlocal].iov_base = (void *)(uintptr_t)(m.addr + (s->addr - m.iova));
    x->local[x->nlocal].iov_len = s->length;
    x->nlocal++;
    x->len += s->length;
  }
  return IBV_WC_SUCCESS;
}

/* Where this process can reach [remote, remote + len) of a peer's
 * registration directly: our own memory, or the peer's shared window mapped
 * here.  NULL: use process_vm_writev/readv. */
static char *direct_ptr(struct sv_fabric *f, const struct sv_mr *m, uint32_t key, void *remote, size_t len) {
  if (m->owner == sv_lib.proc) return remote;
  uintptr_t r = (uintptr_t)remote;
  if (r < m->win_lo || r + len > m->win_hi) return NULL; /* on an edge page the window leaves out */
  char *base = sv_window_map(f, m, sv_key_index(key));
  return base ? base + (r - m->win_lo) : NULL;
}

/* Resolve an rkey range on the destination QP; 0 on access violation. */
static int remote_range(struct sv_qp *d, uint32_t rkey, uint64_t va, size_t len, uint32_t need, struct iovec *out,
                        char **direct, pid_t *pid, uint32_t *mr_access) {
  struct sv_fabric *f = fab();
  struct sv_mr m;
  if (!sv_mr_read(f, rkey, &m) || m.pd_id != d->pd_id || !(m.access & need) || !(d->access & need)) return 0;
  if (va < m.iova || va + len > m.iova + m.length || va + len < va) return 0;
  out->iov_base = (void *)(uintptr_t)(m.addr + (va - m.iova));
  out->iov_len = len;
  *direct = direct_ptr(f, &m, rkey, out->iov_base, len);
  *pid = f->procs[m.owner].pid;
  *mr_access = m.access;
  return 1;
}

/* Store n bytes at d as a NIC's DMA places a packet: cache line after
 * cache line, from the first to the last.  A reader that sees a line's
 * last bytes new finds the lines before it, and the rest of that line,
 * new too: NCCL-style consumers poll a field at the end of a 64-byte entry
 * (linkpass's CTS seq) and then read the entry.  memcpy makes no such
 * promise: glibc's stores the tail of a 65-128 byte copy before its
 * middle.  Line by line costs a quarter of memcpy's bandwidth on large
 * copies, which nobody reads before their completion: above
 * SV_ASCENDING_MAX bytes it is memcpy (docs/SIMVERBS.md). */
#define SV_ASCENDING_MAX 4096
static void copy_ascending(char *d, const char *l, size_t n) {
  if (n > SV_ASCENDING_MAX) {
    memcpy(d, l, n);
    return;
  }
  while (n) {
    size_t k = 64 - ((uintptr_t)d & 63);
    if (k >= n) {
      memcpy(d, l, n); /* ≤ 64 bytes: glibc stores the head, then the tail */
      return;
    }
    if (k == 64) /* a constant size: the compiler stores it inline, in order */
      memcpy(d, l, 64);
    else
      memcpy(d, l, k);
    atomic_thread_fence(memory_order_release);
    d += k;
    l += k;
    n -= k;
  }
}

/* Write bytes [from, from + n) of the transfer into the remote segments. */
static void copy_span(struct xfer *x, struct iovec *remote, char **direct, int nremote, size_t from, size_t n) {
  size_t li = 0, loff = from, r = 0, roff = from;
  while (li < (size_t)x->nlocal && loff >= x->local[li].iov_len) loff -= x->local[li++].iov_len;
  while (r < (size_t)nremote && roff >= remote[r].iov_len) roff -= remote[r++].iov_len;
  while (n && li < (size_t)x->nlocal && r < (size_t)nremote) {
    size_t k = x->local[li].iov_len - loff;
    if (k > remote[r].iov_len - roff) k = remote[r].iov_len - roff;
    if (k > n) k = n;
    copy_ascending(direct[r] + roff, (char *)x->local[li].iov_base + loff, k);
    n -= k;
    loff += k;
    roff += k;
    if (loff == x->local[li].iov_len) li++, loff = 0;
    if (roff == remote[r].iov_len) r++, roff = 0;
  }
}

/* A write whose packets are routed adaptively, or that lands in memory
 * registered with relaxed ordering, is placed out of order: one packet
 * (`mtu` bytes) at a time from the last to the first, the worst order a
 * consumer that reads before the completion could meet. */
static void copy_reversed(struct xfer *x, struct iovec *remote, char **direct, int nremote, size_t limit, size_t mtu) {
  size_t last = (limit - 1) / mtu * mtu;
  for (size_t off = last;; off -= mtu) {
    copy_span(x, remote, direct, nremote, off, limit - off < mtu ? limit - off : mtu);
    if (off == 0) break;
  }
}

/* Copy between our gather list and directly reachable remote segments.
 * A write of up to SV_ASCENDING_MAX bytes lands line by line in address
 * order, and any write's last byte is stored last, with release order:
 * programs such as ib_write_lat spin on a buffer's final byte and read the
 * rest after it. */
static void copy_direct(struct xfer *x, struct iovec *remote, char **direct, int nremote, size_t limit, int read) {
  size_t li = 0, loff = 0;
  for (int r = 0; r < nremote && limit; r++) {
    size_t roff = 0;
    while (roff < remote[r].iov_len && limit) {
      size_t n = x->local[li].iov_len - loff;
      if (n > remote[r].iov_len - roff) n = remote[r].iov_len - roff;
      if (n > limit) n = limit;
      char *l = (char *)x->local[li].iov_base + loff, *d = direct[r] + roff;
      if (read) {
        memcpy(l, d, n);
      } else if (n == limit) {
        copy_ascending(d, l, n - 1);
        __atomic_store_n(d + n - 1, l[n - 1], __ATOMIC_RELEASE);
      } else {
        copy_ascending(d, l, n);
      }
      limit -= n;
      roff += n;
      loff += n;
      if (loff == x->local[li].iov_len) li++, loff = 0;
    }
  }
}

/* Whether the process in fabric slot `owner` (pid `pid`) still lives.  A
 * shared window outlives its process, so a copy into it proves nothing; but
 * asking the kernel (kill(pid, 0)) costs a system call, about 1 us on these
 * machines and more than a small write itself.  A live answer is therefore
 * trusted for SV_ALIVE_TRUST_NS: a crashed peer is noticed up to that much
 * later, far inside the transport timeout after which a real HCA would
 * report it (docs/SIMVERBS.md). */
#define SV_ALIVE_TRUST_NS 1000000ull
static int peer_alive(int owner, pid_t pid, uint64_t now) {
  if (owner == sv_lib.proc) return 1;
  if (atomic_load(&sv_lib.peer_alive_pid[owner]) == pid && now < atomic_load(&sv_lib.peer_alive_until_ns[owner]))
    return 1;
  if (kill(pid, 0) != 0 && errno == ESRCH) return 0;
  atomic_store(&sv_lib.peer_alive_until_ns[owner], 0); /* no reader pairs the new pid with the old time */
  atomic_store(&sv_lib.peer_alive_pid[owner], pid);
  atomic_store(&sv_lib.peer_alive_until_ns[owner], now + SV_ALIVE_TRUST_NS);
  return 1;
}

/* Copy between our gather list and the peer's memory.  Returns bytes moved,
 * or -1 when the peer process is gone. */
static ssize_t move_bytes(int owner, pid_t pid, struct xfer *x, struct iovec *remote, char **direct, int nremote,
                          size_t limit, int read, size_t ooo_mtu, uint64_t now) {
  if (limit == 0) return 0;
  int all_direct = 1;
  for (int i = 0; i < nremote; i++) all_direct &= direct[i] != NULL;
  if (all_direct) {
    if (!peer_alive(owner, pid, now)) return -1; /* a window outlives its process */
    if (ooo_mtu && !read)
      copy_reversed(x, remote, direct, nremote, limit, ooo_mtu);
    else
      copy_direct(x, remote, direct, nremote, limit, read);
    return (ssize_t)limit;
  }
  struct iovec local[SV_MAX_SGE + 1];
  int n = 0;
  size_t left = limit;
  for (int i = 0; i < x->nlocal && left; i++) {
    local[n] = x->local[i];
    if (local[n].iov_len > left) local[n].iov_len = left;
    left -= local[n].iov_len;
    n++;
  }
  ssize_t done = read ? process_vm_readv(pid, local, (unsigned long)n, remote, (unsigned long)nremote, 0)
                      : process_vm_writev(pid, local, (unsigned long)n, remote, (unsigned long)nremote, 0);
  return done < 0 ? -1 : done;
}

/* Scatter list of a receive WQE in the receiver's memory. */
static int recv_iov(struct sv_qp *d, struct sv_rwqe *r, size_t len, struct iovec *out, char **direct, int *n,
                    pid_t *pid) {
  struct sv_fabric *f = fab();
  size_t left = len;
  *n = 0;
  *pid = f->procs[d->owner].pid;
  for (uint32_t i = 0; i < r->num_sge && left; i++) {
    struct ibv_sge *s = &r->sge[i];
    struct sv_mr m;
    if (!sv_mr_read(f, s->lkey, &m) || m.pd_id != d->pd_id || !(m.access & IBV_ACCESS_LOCAL_WRITE))
      return IBV_WC_LOC_PROT_ERR;
    if (s->addr < m.iova || s->addr + s->length > m.iova + m.length) return IBV_WC_LOC_PROT_ERR;
    size_t take = s->length < left ? s->length : left;
    out[*n].iov_base = (void *)(uintptr_t)(m.addr + (s->addr - m.iova));
    out[*n].iov_len = take;
    direct[*n] = direct_ptr(f, &m, s->lkey, out[*n].iov_base, take);
    (*n)++;
    left -= take;
  }
  return left ? IBV_WC_LOC_LEN_ERR : IBV_WC_SUCCESS;
}

/* The responder's QP breaks (bad access, overlong send): it goes to ERR and
 * its owner raises the event.  A FATAL already set stays: its event must
 * not be lost to a milder fault. */
static void fail_responder(struct sv_qp *d, enum sv_qp_fault why) {
  uint32_t cur = atomic_load(&d->fault);
  while (cur != SV_QP_FAULT_FATAL && !atomic_compare_exchange_weak(&d->fault, &cur, why)) {}
  atomic_fetch_add(&fab()->fault_gen, 1);
  sv_proc_wake(fab(), d->owner);
}

/* A completion of QP q's into CQ `cq`.  One the CQ cannot take (full, or
 * broken by an earlier overrun) breaks the QP: ERR and QP_FATAL, as a
 * ConnectX does to every QP that completes into a CQ in error (IB spec
 * C9-218); the QP's flushes after that find it in ERR already. */
static int push_completion(struct sv_qp *q, int cq, const struct ibv_wc *wc, uint64_t frees) {
  if (sv_cq_push(fab(), cq, wc, frees) != SV_CQ_BROKEN) return 0; /* taken, or the CQ is gone with its owner */
  if (atomic_load(&q->in_use) && q->qpn == wc->qp_num && atomic_load(&q->state) != IBV_QPS_ERR &&
      atomic_load(&q->state) != IBV_QPS_RESET)
    fail_responder(q, SV_QP_FAULT_FATAL);
  return -1;
}

enum exec_result { EXEC_DONE, EXEC_WAIT, EXEC_PATH_DOWN, EXEC_RNR, EXEC_FAIL };

struct exec_out {
  enum ibv_wc_status status;
  uint32_t len;
  /* The responder breaks too (an access error, an invalid request): done
   * by the caller after the requester's error completion is written.  On a
   * NIC the NAK that carries the error leaves as the responder breaks and
   * arrives within microseconds, long before the responder's process can
   * see its flushes and tell the requester's over TCP; broken first here,
   * the responder's notice could be read before the requester's CQE existed,
   * and the requester took its own refusal for the peer's path failure. */
  enum sv_qp_fault responder;
};

/* Packets of a request of `bytes` at the QP's path MTU (a zero-length one is one). */
static uint64_t packets_of(const struct sv_qp *q, size_t bytes) {
  uint64_t mtu = 128u << q->path_mtu; /* enum ibv_mtu: 1 is 256 bytes */
  return bytes ? (bytes + mtu - 1) / mtu : 1;
}

static void count_traffic(struct sv_qp *q, struct sv_qp *d, size_t bytes) {
  struct sv_fabric *f = fab();
  if (q == d) return; /* looped back inside the NIC: the port's counters never see it */
  struct sv_port *lp = &f->devs[q->dev].ports[q->port - 1];
  struct sv_port *rp = &f->devs[d->dev].ports[d->port - 1];
  atomic_fetch_add(&lp->tx_bytes, bytes);
  atomic_fetch_add(&lp->tx_wrs, 1);
  atomic_fetch_add(&rp->rx_bytes, bytes);
  atomic_fetch_add(&rp->rx_wrs, 1);
  atomic_fetch_add_explicit(&rp->rx_packets, packets_of(q, bytes), memory_order_relaxed);
}

/* FETCH_AND_ADD / CMP_AND_SWP on 8 aligned bytes of the responder's
 * memory; the value found there lands in the local buffer.  Atomic with
 * respect to every other atomic that targets the same NIC. */
static enum exec_result execute_atomic(struct sv_qp *q, struct sv_qp *d, struct sv_swqe *w, struct xfer *x,
                                       uint64_t now, struct exec_out *out) {
  struct sv_fabric *f = fab();
  struct iovec remote;
  char *direct;
  pid_t pid;
  if (x->len != sizeof(uint64_t)) {
    out->status = IBV_WC_LOC_LEN_ERR; /* the result buffer is one 8-byte word */
    return EXEC_FAIL;
  }
  uint32_t mr_access;
  if (!remote_range(d, w->rkey, w->remote_addr, sizeof(uint64_t), IBV_ACCESS_REMOTE_ATOMIC, &remote, &direct, &pid,
                    &mr_access)) {
    out->responder = SV_QP_FAULT_ACCESS;
    out->status = IBV_WC_REM_ACCESS_ERR;
    return EXEC_FAIL;
  }
  if (w->remote_addr % sizeof(uint64_t)) { /* an invalid request: NAKed, and the responder breaks */
    out->responder = SV_QP_FAULT_ERR;
    out->status = IBV_WC_REM_INV_REQ_ERR;
    return EXEC_FAIL;
  }
  uint64_t old = 0, val;
  struct xfer word = {.local = {{.iov_base = &old, .iov_len = sizeof(old)}}, .nlocal = 1, .len = sizeof(old)};
  sv_lock(&f->devs[d->dev].atomic_lock);
  ssize_t got = move_bytes(d->owner, pid, &word, &remote, &direct, 1, sizeof(old), 1, 0, now);
  val = w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ? old + w->compare_add : old == w->compare_add ? w->swap : old;
  uint64_t found = old;
  word.local[0].iov_base = &val;
  ssize_t put = got == sizeof(old) && val != old
                    ? move_bytes(d->owner, pid, &word, &remote, &direct, 1, sizeof(val), 0, 0, now)
                    : got;
  sv_unlock(&f->devs[d->dev].atomic_lock);
  if (got != sizeof(old) || put != sizeof(val)) return EXEC_PATH_DOWN; /* the responder's process is gone */
  char *src = (char *)&found;
  for (int i = 0, off = 0; i < x->nlocal; off += (int)x->local[i].iov_len, i++)
    memcpy(x->local[i].iov_base, src + off, x->local[i].iov_len);
  out->len = sizeof(found);
  count_traffic(q, d, sizeof(found));
  return EXEC_DONE;
}

/* A request reached responder d while it is in RTR: a ConnectX raises
 * IBV_EVENT_COMM_EST on d once (IB spec 11.6.3.1, an affiliated event), which
 * its owner's engine posts, as it does a fault's. */
static void comm_established(struct sv_qp *d) {
  uint32_t none = 0;
  if (atomic_load(&d->state) != IBV_QPS_RTR || atomic_load(&d->comm_est) != 0 ||
      !atomic_compare_exchange_strong(&d->comm_est, &none, 1))
    return;
  atomic_fetch_add(&fab()->fault_gen, 1);
  sv_proc_wake(fab(), d->owner);
}

/* Execute the head WR now; the path was found up. */
static enum exec_result execute(struct sv_qp_local *lq, struct sv_qp *q, struct sv_qp *d, struct sv_swqe *w,
                                int partial, uint64_t now, struct exec_out *out) {
  struct sv_fabric *f = fab();
  struct xfer x;
  int is_read = w->opcode == IBV_WR_RDMA_READ;
  out->status = local_iov(q, w, is_read || is_atomic(w->opcode), &x);
  if (out->status != IBV_WC_SUCCESS) return EXEC_FAIL; /* a local error: nothing left the NIC */
  comm_established(d);
  if ((is_read || is_atomic(w->opcode)) && d->max_dest_rd_atomic == 0) {
    /* A responder given no resources for READs and atomics (RTR's
     * max_dest_rd_atomic 0) NAKs one as an invalid request and breaks. */
    out->responder = SV_QP_FAULT_ERR;
    out->status = IBV_WC_REM_INV_REQ_ERR;
    return EXEC_FAIL;
  }
  if (is_atomic(w->opcode)) return execute_atomic(q, d, w, &x, now, out);
  out->len = (uint32_t)x.len;
  size_t limit = partial ? x.len / 2 : x.len;
  struct iovec remote[SV_MAX_SGE];
  char *direct[SV_MAX_SGE];
  int nremote = 1;
  pid_t pid = 0;
  uint32_t mr_access = 0;
  if (w->opcode == IBV_WR_RDMA_WRITE || w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM || is_read) {
    uint32_t need = is_read ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE;
    if (x.len && !remote_range(d, w->rkey, w->remote_addr, x.len, need, remote, direct, &pid, &mr_access)) {
      out->responder = SV_QP_FAULT_ACCESS;
      out->status = IBV_WC_REM_ACCESS_ERR;
      return EXEC_FAIL;
    }
  }
  int wants_rwqe =
      w->opcode == IBV_WR_SEND || w->opcode == IBV_WR_SEND_WITH_IMM || w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
  struct sv_rwqe *r = NULL;
  if (wants_rwqe) {
    sv_lock(&d->rq_lock);
    r = sv_rq_head(f, d);
    if (!r) {
      sv_unlock(&d->rq_lock);
      return EXEC_RNR;
    }
    if (w->opcode != IBV_WR_RDMA_WRITE_WITH_IMM) {
      enum ibv_wc_status rs = recv_iov(d, r, x.len, remote, direct, &nremote, &pid);
      if (rs != IBV_WC_SUCCESS) {
        /* The receiver completes its WQE in error and breaks; we see a NAK. */
        struct ibv_wc wc = {
            .wr_id = r->wr_id, .status = rs, .opcode = IBV_WC_RECV, .qp_num = d->qpn, .vendor_err = 0x81};
        uint64_t pos = sv_rq_pop(d);
        push_completion(d, d->recv_cq, &wc, sv_frees(1, pos));
        sv_unlock(&d->rq_lock);
        fail_responder(d, SV_QP_FAULT_ERR);
        out->status = IBV_WC_REM_INV_REQ_ERR;
        return EXEC_FAIL;
      }
    }
  }
  /* Out-of-order placement: a plain WRITE over adaptively routed ports, or
   * any write into a relaxed-ordering registration (the PCIe writes may
   * pass each other).  Receives and their immediates stay in order. */
  size_t mtu = 128u << q->path_mtu; /* enum ibv_mtu: 1 is 256 bytes */
  int ooo = !is_read && ((w->opcode == IBV_WR_RDMA_WRITE && f->devs[q->dev].ports[q->port - 1].adaptive_routing) ||
                         (mr_access & IBV_ACCESS_RELAXED_ORDERING));
  if (ooo && limit > mtu) atomic_fetch_add_explicit(&q->ooo_writes, 1, memory_order_relaxed);
  ssize_t moved =
      x.len ? move_bytes(d->owner, pid, &x, remote, direct, nremote, limit, is_read, ooo ? mtu : 0, now) : 0;
  if (moved < 0 || (size_t)moved != limit) {
    if (r) sv_unlock(&d->rq_lock);
    if (moved < 0 && errno == EFAULT) { /* registered memory was unmapped under the MR */
      out->status = IBV_WC_REM_ACCESS_ERR;
      return EXEC_FAIL;
    }
    return EXEC_PATH_DOWN; /* peer vanished: nothing answers any more */
  }
  if (partial) {
    if (r) sv_unlock(&d->rq_lock);
    return EXEC_PATH_DOWN; /* the rest of the message never arrives */
  }
  if (r) {
    struct ibv_wc wc = {
        .wr_id = r->wr_id, .status = IBV_WC_SUCCESS, .qp_num = d->qpn, .src_qp = q->qpn, .byte_len = (uint32_t)x.len};
    if (w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
      wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
      wc.byte_len = (uint32_t)x.len; /* mlx5 reports the write length */
    } else {
      wc.opcode = IBV_WC_RECV;
    }
    if (w->opcode != IBV_WR_SEND) {
      wc.wc_flags = IBV_WC_WITH_IMM;
      wc.imm_data = w->imm;
    }
    /* Pushed under the receive queue's lock, as a flush pushes: the
     * completions of one receive queue reach the CQ in its order, and none
     * of this incarnation lands after a RESET emptied the queue. */
    uint64_t pos = sv_rq_pop(d);
    push_completion(d, d->recv_cq, &wc, sv_frees(1, pos));
    sv_unlock(&d->rq_lock);
  }
  count_traffic(q, d, x.len);
  (void)lq;
  return EXEC_DONE;
}

/* Reserve wire time on the sending port and return when the WR may execute.
 * The copy itself takes real time, so the wire only delays a WR that would
 * otherwise start before the previous one has left the port: over a stream
 * that caps the rate, and a lone WR pays just the latency.  `now` is when
 * the WR was posted: WRs posted back to back fly together, as on an HCA,
 * rather than each waiting for the one before it to land. */
static uint64_t schedule(struct sv_port *p, size_t bytes, uint64_t now) {
  uint32_t pct = atomic_load_explicit(&p->rate_pct, memory_order_relaxed); /* a degraded port (rate fault) */
  if (pct == 0 || pct > 100) pct = 100;
  uint64_t wire = p->rate_gbps ? (uint64_t)bytes * 800ull / ((uint64_t)p->rate_gbps * pct) : 0; /* ns */
  uint64_t start, busy = atomic_load(&p->busy_until_ns);
  do {
    start = busy > now ? busy : now;
  } while (!atomic_compare_exchange_weak(&p->busy_until_ns, &busy, start + wire));
  return start + p->latency_ns + (uint64_t)atomic_load(&p->delay_us) * 1000ull;
}

/* ---- packet loss (the loss fault) ---- */

static double pow_int(double b, uint64_t e) {
  double r = 1.0;
  for (; e; e >>= 1, b *= b)
    if (e & 1) r *= b;
  return r;
}

/* Uniform in [0, 1): xorshift64* with the QP's own state (its executor
 * holds the QP's exec_lock), no libm.  Not thread-local: sanitizers'
 * leak checkers trip over the dynamic TLS of a dlopen'ed library. */
static double uniform01(uint64_t *state) {
  uint64_t x = *state;
  if (x == 0) x = (sv_now_ns() ^ (uint64_t)(uintptr_t)state) | 1;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *state = x;
  return (double)((x * 0x2545f4914f6cdd1dull) >> 11) * 0x1.0p-53;
}

/* A transmission of `n` packets through two ports losing `a` and `b` parts
 * per million: -1 when every packet gets through, else the index of the
 * first one lost (P(at least k get through) = keep^k, inverted by bisection). */
static int64_t first_lost(uint64_t *rng, uint32_t a, uint32_t b, uint64_t n) {
  if (a == 0 && b == 0) return -1;
  double keep = (1.0 - a / 1e6) * (1.0 - b / 1e6), u = uniform01(rng);
  if (u < pow_int(keep, n)) return -1;
  uint64_t lo = 0, hi = n - 1;
  while (lo < hi) {
    uint64_t mid = (lo + hi + 1) / 2;
    if (pow_int(keep, mid) > u)
      lo = mid;
    else
      hi = mid - 1;
  }
  return (int64_t)lo;
}

/* The head WR's transmission as the wire treats it, decided when it is
 * scheduled.  A lost packet before the last makes the responder NAK the
 * next one out of sequence: the requester sends again from the lost packet
 * one round trip later (more wire time, a later completion).  A lost last
 * packet draws no NAK: the requester finds out when its local ACK timer
 * runs out (lq->tail_lost), the way a lossy link costs an RC job dearly. */
static void transmit(struct sv_qp_local *lq, struct sv_qp *q, struct sv_qp *d, struct sv_port *lp, size_t bytes,
                     uint64_t post_ns, int loopback) {
  struct sv_port *rp = &fab()->devs[d->dev].ports[d->port - 1];
  uint64_t n = packets_of(q, bytes), mtu = 128u << q->path_mtu;
  if (loopback) { /* inside the NIC: no wire time, latency, delay or loss */
    lq->due_ns = post_ns;
    lq->tail_lost = 0;
    return;
  }
  lq->due_ns = schedule(lp, bytes, post_ns);
  atomic_fetch_add_explicit(&lp->tx_packets, n, memory_order_relaxed);
  int64_t lost = first_lost(&lq->rng, atomic_load_explicit(&lp->loss_ppm, memory_order_relaxed),
                            atomic_load_explicit(&rp->loss_ppm, memory_order_relaxed), n);
  lq->tail_lost = lost >= 0 && (uint64_t)lost == n - 1;
  if (lost < 0 || lq->tail_lost) return;
  uint64_t again = n - (uint64_t)lost, resent = bytes - (uint64_t)lost * mtu;
  atomic_fetch_add_explicit(&rp->out_of_sequence, again - 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&lp->seq_err_naks, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&lp->tx_packets, again, memory_order_relaxed);
  lq->due_ns = schedule(lp, resent, lq->due_ns + 2 * lp->latency_ns);
}

static size_t wr_bytes(struct sv_swqe *w) {
  if (w->inline_len) return w->inline_len;
  size_t n = 0;
  for (uint32_t i = 0; i < w->num_sge; i++) n += w->sge[i].length;
  return n;
}

/* Packets larger than a port's MTU are dropped on the way (the RoCE NIC's
 * netdev, a switch): a request whose packets, at its path MTU, are larger
 * than either port's active MTU draws no answer and runs out its retries.
 * A READ's packets are the responder's, at the responder's path MTU. */
static int fits_wire_mtu(struct sv_qp *q, struct sv_qp *d, struct sv_swqe *w, struct sv_port *lp) {
  enum ibv_mtu mine = sv_port_active_mtu(lp), theirs = sv_port_active_mtu(&fab()->devs[d->dev].ports[d->port - 1]);
  enum ibv_mtu wire = mine < theirs ? mine : theirs;
  uint32_t path = w->opcode == IBV_WR_RDMA_READ ? d->path_mtu : q->path_mtu;
  return path <= (uint32_t)wire || wr_bytes(w) <= (size_t)(128u << wire);
}

/* A WR that waits for its due time: fetch now, for writing, the first line
 * of its destination and the receive entry it will consume, both last
 * written by the responder's process.  A NIC's DMA stalls no CPU; here the
 * delivery is a CPU's copy, and pulling those lines across cores while the
 * WR waits keeps that stall out of the delivery. */
static void warm_up(struct sv_qp *d, struct sv_swqe *w) {
  struct sv_fabric *f = fab();
  if ((w->opcode == IBV_WR_RDMA_WRITE || w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) && wr_bytes(w) > 0) {
    struct sv_mr m;
    if (sv_mr_read(f, w->rkey, &m) && w->remote_addr >= m.iova && w->remote_addr < m.iova + m.length) {
      char *p = direct_ptr(f, &m, w->rkey, (void *)(uintptr_t)(m.addr + (w->remote_addr - m.iova)), 1);
      if (p) __builtin_prefetch(p, 1);
    }
  }
  if (w->opcode != IBV_WR_RDMA_WRITE && w->opcode != IBV_WR_RDMA_READ)
    __builtin_prefetch(sv_rq_entry(f, d, atomic_load_explicit(&d->rq_head, memory_order_relaxed)), 0);
}

/* Consume one use of a port's one-shot fault counter (ack-loss,
 * partial-write, access-error); 1 when this request takes it. */
static int take_one(_Atomic uint32_t *count) {
  uint32_t left = atomic_load(count);
  return left && atomic_compare_exchange_strong(count, &left, left - 1);
}

static void fail_qp(struct sv_qp_local *lq, struct sv_swqe *w, enum ibv_wc_status st) {
  complete_send(lq, w, st, 0);
  sq_pop(lq);
  sv_qp_to_error(lq);
  flush_queues(lq);
}

static void note_deadline(uint64_t *next, uint64_t t) {
  if (t < *next) *next = t;
}

/* The head WR's transmission at `now` drew no ACK.  The requester learns
 * it only when its local ACK timer runs out, and then sends again. */
static void unanswered(struct sv_qp_local *lq, struct sv_qp *q, uint64_t now, uint64_t *next) {
  uint64_t t = ack_timeout_ns(q);
  /* A retransmission left when its timer ran out, not when a busy poller
   * got to it: timing from then keeps late passes from adding up. */
  uint64_t sent = lq->resend_ns ? lq->resend_ns : now;
  lq->resend = SV_RESEND_TIMEOUT;
  lq->resend_ns = t == UINT64_MAX ? UINT64_MAX : sent + t;
  if (lq->resend_ns != UINT64_MAX) note_deadline(next, lq->resend_ns);
}

/* The responder had no receive posted: it answers RNR NAK at once, and the
 * requester sends again one RNR timer later.  1 when the QP failed. */
static int rnr_nak(struct sv_qp_local *lq, struct sv_qp *q, struct sv_qp *d, struct sv_swqe *w, uint64_t now,
                   uint64_t *next) {
  if (q->rnr_retry != 7 && lq->rnr_retries >= q->rnr_retry) {
    fail_qp(lq, w, IBV_WC_RNR_RETRY_EXC_ERR);
    return 1;
  }
  lq->resend = SV_RESEND_RNR;
  lq->resend_ns = now + rnr_timer_ns(d->min_rnr_timer);
  note_deadline(next, lq->resend_ns);
  return 0;
}

/* Whether the head WR may go on the wire now: 0 while a timer runs, -1
 * when its timer ran out with no retry left (the QP failed), 1 to go. */
static int resend_due(struct sv_qp_local *lq, struct sv_qp *q, struct sv_swqe *w, uint64_t now, uint64_t *next) {
  if (lq->resend == SV_RESEND_NONE) return 1;
  if (now < lq->resend_ns) {
    if (lq->resend_ns != UINT64_MAX) note_deadline(next, lq->resend_ns);
    return 0;
  }
  if (lq->resend == SV_RESEND_TIMEOUT) {
    /* Every expiry of the local ACK timer counts, whatever drew no answer
     * (a loss, a black hole, a pulled cable, a lost ACK, a dead peer), as
     * a ConnectX counts local_ack_timeout_err. */
    struct sv_port *lp = &fab()->devs[q->dev].ports[q->port - 1];
    atomic_fetch_add_explicit(&lp->ack_timeouts, 1, memory_order_relaxed);
    if (lq->retries >= q->retry_cnt) {
      fail_qp(lq, w, IBV_WC_RETRY_EXC_ERR);
      return -1;
    }
    lq->retries++;
  } else {
    lq->rnr_retries++;
  }
  lq->resend = SV_RESEND_NONE; /* resend_ns stays: when this transmission left */
  return 1;
}

static int qp_progress(struct sv_qp_local *lq, uint64_t now, uint64_t *next) {
  struct sv_fabric *f = fab();
  struct sv_qp *q = &f->qps[lq->index];
  int progress = 0;
  /* Look before taking: a write on every pass would pull the line that
   * peers read for every WR away from them. */
  enum sv_qp_fault fault =
      atomic_load(&q->fault) == SV_QP_FAULT_NONE ? SV_QP_FAULT_NONE : atomic_exchange(&q->fault, SV_QP_FAULT_NONE);
  if (fault != SV_QP_FAULT_NONE && atomic_load(&q->state) != IBV_QPS_RESET) {
    sv_qp_to_error(lq);
    if (fault == SV_QP_FAULT_FATAL) sv_async_post(lq->ctx, IBV_EVENT_QP_FATAL, (uintptr_t)&lq->qp, lq->serial);
    if (fault == SV_QP_FAULT_ACCESS) sv_async_post(lq->ctx, IBV_EVENT_QP_ACCESS_ERR, (uintptr_t)&lq->qp, lq->serial);
  }
  uint32_t est = 1;
  if (atomic_load(&q->comm_est) == 1 && atomic_compare_exchange_strong(&q->comm_est, &est, 2))
    sv_async_post(lq->ctx, IBV_EVENT_COMM_EST, (uintptr_t)&lq->qp, lq->serial);
  if (atomic_load(&f->devs[q->dev].fatal) && atomic_load(&q->state) != IBV_QPS_RESET) sv_qp_to_error(lq);
  enum ibv_qp_state st = atomic_load(&q->state);
  if (st == IBV_QPS_ERR) return flush_queues(lq);
  if (st != IBV_QPS_RTS) return 0;
  for (int n = 0; n < SV_BATCH; n++) {
    uint32_t head = atomic_load(&lq->sq_head);
    if (head == atomic_load_explicit(&lq->sq_tail, memory_order_acquire)) break;
    struct sv_swqe *w = sv_sq_entry(lq, head);
    struct sv_port *lp = &f->devs[q->dev].ports[q->port - 1];
    int go = resend_due(lq, q, w, now, next);
    if (go < 0) progress = 1;
    if (go <= 0) break;
    if (lq->head_state == SV_HEAD_UNACKED) { /* delivered; the ACK is never coming */
      unanswered(lq, q, now, next);
      break;
    }
    struct sv_qp *d = resolve_dest(q);
    /* A QP connected to itself (NCCL's flush) loops back inside the NIC:
     * the wire's faults never touch it, a port that is down does. */
    int loopback = d == q;
    int path_up = d && (loopback ? atomic_load(&lp->state) == IBV_PORT_ACTIVE
                                 : port_passes(lp) && port_passes(&f->devs[d->dev].ports[d->port - 1]));
    if (path_up && !loopback && !fits_wire_mtu(q, d, w, lp)) path_up = 0;
    if (!path_up) {                                   /* dropped on the way, or by a responder that is not ready */
      if (atomic_load(&lp->state) != IBV_PORT_ACTIVE) /* at our own port, which counts them */
        atomic_fetch_add_explicit(&lp->xmit_discards, packets_of(q, wr_bytes(w)), memory_order_relaxed);
      unanswered(lq, q, now, next);
      break;
    }
    if (lq->head_state == SV_HEAD_NEW) {
      transmit(lq, q, d, lp, wr_bytes(w), w->post_ns, loopback);
      lq->head_state = SV_HEAD_SCHEDULED;
      if (lq->due_ns > now) warm_up(d, w);
    }
    if (lq->due_ns > now) {
      note_deadline(next, lq->due_ns);
      break;
    }
    if (lq->tail_lost) { /* nothing answers; the timer runs out, then it goes again, lost or not */
      unanswered(lq, q, now, next);
      lq->tail_lost = 0;
      lq->head_state = SV_HEAD_NEW;
      w->post_ns = lq->resend_ns == UINT64_MAX ? now : lq->resend_ns;
      break;
    }
    int partial = !loopback && w->opcode != IBV_WR_RDMA_READ && !is_atomic(w->opcode) && wr_bytes(w) > 1 &&
                  take_one(&lp->partial_write);
    struct exec_out out = {0};
    enum exec_result r;
    if (!loopback && take_one(&lp->access_error)) {
      /* as a bad rkey: the responder NAKs and breaks, nothing lands */
      out.responder = SV_QP_FAULT_ACCESS;
      out.status = IBV_WC_REM_ACCESS_ERR;
      r = EXEC_FAIL;
    } else {
      r = execute(lq, q, d, w, partial, now, &out);
    }
    if (r == EXEC_RNR) {
      progress |= rnr_nak(lq, q, d, w, now, next);
      break;
    }
    if (r == EXEC_PATH_DOWN) {
      if (partial) lq->head_state = SV_HEAD_UNACKED;
      unanswered(lq, q, now, next);
      break;
    }
    progress = 1;
    if (r == EXEC_FAIL) {
      fail_qp(lq, w, out.status);
      if (out.responder != SV_QP_FAULT_NONE) fail_responder(d, out.responder);
      break;
    }
    if (!loopback && take_one(&lp->ack_loss)) {
      lq->head_state = SV_HEAD_UNACKED;
      unanswered(lq, q, now, next);
      break;
    }
    int broke = complete_send(lq, w, IBV_WC_SUCCESS, out.len);
    atomic_fetch_add_explicit(&q->requests, 1, memory_order_relaxed);
    sq_pop(lq);
    if (broke) break; /* its CQ broke: the QP goes to ERR at the next pass, before anything more runs */
  }
  return progress;
}

/* Pollers look at deferred work again at `due` at the latest. */
static void defer_until(uint64_t due) {
  uint64_t cur = atomic_load(&sv_lib.deferred_due_ns);
  while (due < cur && !atomic_compare_exchange_weak(&sv_lib.deferred_due_ns, &cur, due))
    ;
}

/* When pollers should look at a queue with work left, given the deadline
 * its progress noted (none: it waits for something else, e.g. a link to
 * come back, so look again soon). */
static uint64_t look_again(uint64_t now, uint64_t qnext) { return qnext != UINT64_MAX ? qnext : now + SV_REPOLL_NS; }

/* Progress every QP whose executor lock is free; sv_lib.lock held.  Resets
 * deferred_due_ns before looking: a poster deferring meanwhile lowers it
 * again after its enqueue, so no WR is forgotten. */
/* Nothing for a pass to do on this QP: no fault to apply, no work queued,
 * nothing left to flush.  Read without its locks (a poster that queues
 * work after this look kicks or defers as usual): a pass over thousands of
 * idle QPs (standby paths) then takes no lock at all. */
static int qp_idle(struct sv_qp_local *lq) {
  struct sv_fabric *f = fab();
  struct sv_qp *q = &f->qps[lq->index];
  enum ibv_qp_state st = atomic_load(&q->state);
  if (atomic_load(&q->fault) != SV_QP_FAULT_NONE || atomic_load(&q->comm_est) == 1) return 0;
  if (atomic_load(&f->devs[q->dev].fatal) && st != IBV_QPS_RESET && st != IBV_QPS_ERR) return 0;
  if (atomic_load(&lq->sq_head) != atomic_load_explicit(&lq->sq_tail, memory_order_acquire)) return 0;
  return st != IBV_QPS_ERR || sv_rq_head(f, q) == NULL;
}

/* Faults and fatal devices are set from outside the process, without a
 * post or a state change: a pass looks at every QP when the fabric's
 * fault_gen moved since the last such pass, and this often at least, a
 * backstop that costs little (a pass over every QP of a process with
 * thousands of standby paths takes a good part of a millisecond, which at
 * a 2 ms pace took a fifth of a core per process from the moves measured
 * with them). */
#define SV_FULL_SCAN_NS 100000000ull

void sv_qp_active(struct sv_qp_local *lq) {
  if (atomic_exchange(&lq->listed, 1)) return;
  pthread_mutex_lock(&sv_lib.active_lock);
  if (sv_lib.nactive == sv_lib.active_cap) {
    int cap = sv_lib.active_cap ? 2 * sv_lib.active_cap : 256;
    struct sv_qp_local **n = realloc(sv_lib.active, sizeof(*n) * (size_t)cap);
    if (n == NULL) {
      sv_lib.scan_all = 1; /* not listed: the next pass looks at every QP */
      atomic_store(&lq->listed, 0);
      pthread_mutex_unlock(&sv_lib.active_lock);
      return;
    }
    sv_lib.active = n;
    sv_lib.active_cap = cap;
  }
  sv_lib.active[sv_lib.nactive++] = lq;
  pthread_mutex_unlock(&sv_lib.active_lock);
}

void sv_qp_inactive(struct sv_qp_local *lq) {
  pthread_mutex_lock(&sv_lib.active_lock);
  for (int i = 0; i < sv_lib.nactive; i++)
    if (sv_lib.active[i] == lq) sv_lib.active[i--] = sv_lib.active[--sv_lib.nactive];
  pthread_mutex_unlock(&sv_lib.active_lock);
}

/* One QP of a pass: progress it unless a poster is executing it. */
static int progress_one(struct sv_qp_local *lq, uint64_t now, uint64_t *next, uint64_t *due) {
  if (qp_idle(lq)) return 0;
  if (pthread_mutex_trylock(&lq->exec_lock) != 0) {
    *due = now; /* a poster is executing it right now: look again */
    return 0;
  }
  uint64_t qnext = UINT64_MAX;
  int progress = qp_progress(lq, now, &qnext);
  if (atomic_load(&lq->sq_head) != atomic_load(&lq->sq_tail) && look_again(now, qnext) < *due)
    *due = look_again(now, qnext);
  if (qnext < *next) *next = qnext;
  pthread_mutex_unlock(&lq->exec_lock);
  return progress;
}

/* Progress every QP that may have work and whose executor lock is free;
 * sv_lib.lock held.  The listed QPs are taken off the list first, and put
 * back if they still have work: a poster that lists one meanwhile finds it
 * unlisted (and lists it) or sees it listed by us.  Every SV_FULL_SCAN_NS
 * the pass looks at every QP instead.  Resets deferred_due_ns before
 * looking: a poster deferring meanwhile lowers it again after its enqueue,
 * so no WR is forgotten. */
static int progress_all(uint64_t now, uint64_t *next) {
  int progress = 0;
  uint64_t due = UINT64_MAX;
  atomic_store(&sv_lib.deferred_due_ns, UINT64_MAX);
  pthread_mutex_lock(&sv_lib.active_lock);
  struct sv_qp_local **work = sv_lib.active;
  int nwork = sv_lib.nactive, cap = sv_lib.active_cap;
  sv_lib.active = sv_lib.active_spare;
  sv_lib.active_cap = sv_lib.active_spare_cap;
  sv_lib.nactive = 0;
  uint64_t gen = atomic_load(&fab()->fault_gen);
  int full = sv_lib.scan_all || gen != sv_lib.seen_fault_gen || now - sv_lib.last_full_scan_ns >= SV_FULL_SCAN_NS;
  sv_lib.seen_fault_gen = gen;
  sv_lib.scan_all = 0;
  pthread_mutex_unlock(&sv_lib.active_lock);
  for (int i = 0; i < nwork; i++) atomic_store(&work[i]->listed, 0);
  if (full) {
    sv_lib.last_full_scan_ns = now;
    for (struct sv_qp_local *lq = sv_lib.qps; lq; lq = lq->next) {
      progress |= progress_one(lq, now, next, &due);
      if (!qp_idle(lq)) sv_qp_active(lq);
    }
  } else {
    /* Each pass starts one QP further on.  The pass executes the copies
     * one after another, so a QP always served last would always complete
     * last: a NIC serves its QPs side by side, and a reader timing its
     * ports (linkpass's gray detector) must not find one port slower only
     * because its QP was listed after the others. */
    unsigned turn = nwork ? sv_lib.pass_turn++ % (unsigned)nwork : 0;
    for (int k = 0; k < nwork; k++) {
      struct sv_qp_local *lq = work[((unsigned)k + turn) % (unsigned)nwork];
      progress |= progress_one(lq, now, next, &due);
      if (!qp_idle(lq)) sv_qp_active(lq);
    }
  }
  /* The array taken is the spare for the next pass. */
  pthread_mutex_lock(&sv_lib.active_lock);
  sv_lib.active_spare = work;
  sv_lib.active_spare_cap = cap;
  pthread_mutex_unlock(&sv_lib.active_lock);
  if (due != UINT64_MAX) defer_until(due);
  return progress;
}

void sv_qp_run(struct sv_qp_local *lq, uint64_t now) {
  sv_qp_active(lq);
  uint64_t next = now; /* busy executor: it may already be past our WR, so look again now */
  if (pthread_mutex_trylock(&lq->exec_lock) == 0) {
    next = UINT64_MAX;
    qp_progress(lq, now, &next);
    int left = atomic_load(&lq->sq_head) != atomic_load(&lq->sq_tail);
    pthread_mutex_unlock(&lq->exec_lock);
    if (!left) return;
  }
  sv_defer_work(now, next);
}

void sv_defer_work(uint64_t now, uint64_t due) {
  /* Like an HCA's doorbell, posting never waits for the wire: the WR runs
   * when due, in whichever of this process's pollers (poll_cq) gets there
   * first, or in the engine.  Wake the engine only if it would not look by
   * itself soon after the WR is due: an application that stops polling
   * (it sleeps on a completion channel, say) still sees its WR go out.
   * Sequentially consistent with wait_for_work: either the engine sees
   * deferred_ns and stays near, or we see its far wake time and kick. */
  defer_until(look_again(now, due));
  atomic_store(&sv_lib.deferred_ns, now);
  if (due == UINT64_MAX || atomic_load(&sv_lib.engine_wake_ns) > due + SV_BACKSTOP_NS) sv_engine_kick();
}

void sv_defer_now(void) {
  uint64_t now = sv_now_ns();
  sv_defer_work(now, now);
}

void sv_progress_deferred(void) {
  if (pthread_mutex_trylock(&sv_lib.lock) != 0) return;
  uint64_t next = UINT64_MAX;
  progress_all(sv_now_ns(), &next);
  pthread_mutex_unlock(&sv_lib.lock);
}

/* ---- events ---- */

static int deliver_device_events(struct sv_ctx *ctx) {
  struct sv_device *d = &fab()->devs[ctx->dev];
  uint64_t seq = atomic_load_explicit(&d->event_seq, memory_order_acquire);
  int progress = 0;
  while (ctx->event_seq_seen < seq) {
    uint64_t want = ++ctx->event_seq_seen;
    if (seq - want >= SV_EVENT_LOG) continue; /* overwritten before we looked */
    uint32_t slot = (uint32_t)(want % SV_EVENT_LOG);
    if (__atomic_load_n(&d->events[slot].seq, __ATOMIC_ACQUIRE) != want) continue;
    /* Acquire loads keep the re-check below after them: if the writer
     * lapped us while we read, the entry is gone and seq says so. */
    uint32_t type = __atomic_load_n(&d->events[slot].type, __ATOMIC_ACQUIRE);
    uint32_t element = __atomic_load_n(&d->events[slot].element, __ATOMIC_ACQUIRE);
    if (__atomic_load_n(&d->events[slot].seq, __ATOMIC_RELAXED) != want) continue;
    sv_async_post(ctx, type, element, 0);
    progress = 1;
  }
  return progress;
}

/* Overruns and channel notices of this process's CQs.  A process can own
 * thousands of CQs (linkpass's standby paths): they are looked at only
 * when sv_cq_push said one has something, not on every engine pass, where
 * walking them all took a fifth of a core per process from the moves of
 * a thousand connections (docs/SIMVERBS.md). */
static int deliver_cq_events(void) {
  struct sv_fabric *f = fab();
  int progress = 0;
  uint32_t events = atomic_load(&f->procs[sv_lib.proc].cq_events);
  if (events == sv_lib.seen_cq_events) return 0;
  sv_lib.seen_cq_events = events;
  for (struct sv_cq_local *lc = sv_lib.cqs; lc; lc = lc->next) {
    struct sv_cq *q = &f->cqs[lc->index];
    if (atomic_exchange(&q->overrun, 0)) {
      sv_async_post(sv_ctx_of(lc->cq.context), IBV_EVENT_CQ_ERR, (uintptr_t)&lc->cq, lc->serial);
      progress = 1;
    }
    if (!atomic_load(&q->notify_pending) || !lc->cq.channel) continue;
    atomic_store(&q->notify_pending, 0);
    uint64_t handle = (uintptr_t)&lc->cq;
    struct sv_channel *ch = (struct sv_channel *)lc->cq.channel;
    if (write(ch->wr_fd, &handle, sizeof(handle)) < 0) continue;
    progress = 1;
  }
  return progress;
}

/* ---- the thread ---- */

static void wait_for_work(uint32_t seen, uint64_t now, uint64_t next) {
  struct sv_fabric *f = fab();
  _Atomic uint32_t *db = &f->procs[sv_lib.proc].doorbell;
  uint64_t until = next < now + SV_IDLE_WAIT_NS ? next : now + SV_IDLE_WAIT_NS;
  atomic_store(&sv_lib.engine_wake_ns, until);
  /* `now` is when this pass began: a poster that deferred work during the
   * pass, seeing the engine awake, did not wake it, and its deferred_ns is
   * later than `now`.  Recent too: taken as old (the difference wrapped),
   * the engine slept up to SV_IDLE_WAIT_NS past that work. */
  uint64_t deferred = atomic_load(&sv_lib.deferred_ns);
  if (deferred >= now || now - deferred < SV_ASSIST_NS) {
    /* Pollers are running the deferred work, deadlines included: only
     * stand by behind them, at a steady pace and without spinning, either
     * of which would take a core from them. */
    until = now + SV_BACKSTOP_NS;
    atomic_store(&sv_lib.engine_wake_ns, until);
  } else {
    /* Spin briefly first: a futex sleep costs more than a short wire delay. */
    uint64_t spin_until = now + SV_SPIN_NS;
    while (sv_now_ns() < (until < spin_until ? until : spin_until)) {
      if (atomic_load(db) != seen || atomic_load(&sv_lib.engine_stop)) goto awake;
      sched_yield();
    }
  }
  now = sv_now_ns();
  if (now >= until) goto awake;
  uint64_t wait = until - now;
  struct timespec ts = {.tv_sec = (time_t)(wait / 1000000000ull), .tv_nsec = (long)(wait % 1000000000ull)};
  atomic_store(&sv_lib.engine_sleeping, 1);
  if (atomic_load(db) == seen && !atomic_load(&sv_lib.engine_stop))
    syscall(SYS_futex, db, FUTEX_WAIT, seen, &ts, NULL, 0);
  atomic_store(&sv_lib.engine_sleeping, 0);
awake:
  atomic_store(&sv_lib.engine_wake_ns, 0);
}

/* The sysfs counters of this host's ports follow the shared ones, as a
 * kernel's read them from the NIC: one process of the host (whichever
 * claims the port's turn first) rewrites a port's files every
 * SV_COUNTERS_NS, and within SV_COUNTERS_RESEND_NS of a resend.  Files,
 * not a live view: a reader sees them at most that old.  A NIC's resend
 * counters are read from its firmware at every read, so a reader that
 * compares them with the time its own traffic took (linkpass's gray
 * detector) must not see a loss one window late. */
#define SV_COUNTERS_NS 100000000ull
#define SV_COUNTERS_RESEND_NS 10000000ull
static void refresh_counters(struct sv_fabric *f, uint64_t now) {
  for (uint32_t d = 0; d < f->ndevs && d < SV_MAX_DEVS; d++) {
    struct sv_device *dv = &f->devs[d];
    if (!dv->in_use || (int)dv->host != sv_lib.host) continue;
    for (uint32_t p = 0; p < dv->nports && p < SV_MAX_PORTS; p++) {
      struct sv_port *pt = &dv->ports[p];
      uint64_t last = atomic_load_explicit(&pt->counters_written_ns, memory_order_relaxed);
      uint64_t resends = atomic_load_explicit(&pt->seq_err_naks, memory_order_relaxed) +
                         atomic_load_explicit(&pt->ack_timeouts, memory_order_relaxed);
      int resent = resends != atomic_load_explicit(&pt->resends_written, memory_order_relaxed);
      if (now - last < (resent ? SV_COUNTERS_RESEND_NS : SV_COUNTERS_NS) ||
          !atomic_compare_exchange_strong(&pt->counters_written_ns, &last, now))
        continue;
      atomic_store_explicit(&pt->resends_written, resends, memory_order_relaxed);
      sv_sysfs_write_counters(f, (int)d, (int)p + 1); /* a failure says why on stderr; the next turn retries */
    }
  }
}

static void *engine_main(void *arg) {
  (void)arg;
  struct sv_fabric *f = fab();
  uint64_t last_reap = sv_now_ns(), last_counters = 0;
  while (!atomic_load(&sv_lib.engine_stop)) {
    uint32_t seen = atomic_load(&f->procs[sv_lib.proc].doorbell);
    uint64_t now = sv_now_ns(), next = UINT64_MAX;
    int progress = 0;
    pthread_mutex_lock(&sv_lib.lock);
    progress |= progress_all(now, &next);
    for (struct sv_ctx *c = sv_lib.ctxs; c; c = c->next) progress |= deliver_device_events(c);
    progress |= deliver_cq_events();
    pthread_mutex_unlock(&sv_lib.lock);
    if (now - last_reap > SV_REAP_PERIOD_NS) {
      sv_reap_dead(f);
      last_reap = now;
    }
    if (now - last_counters >= SV_COUNTERS_RESEND_NS) {
      refresh_counters(f, now);
      last_counters = now;
    }
    if (!progress) wait_for_work(seen, now, next);
  }
  return NULL;
}

int sv_engine_start(void) {
  pthread_mutex_lock(&sv_lib.lock);
  int rc = 0;
  if (!sv_lib.engine_running) {
    atomic_store(&sv_lib.engine_stop, 0);
    rc = pthread_create(&sv_lib.engine, NULL, engine_main, NULL);
    sv_lib.engine_running = rc == 0;
  }
  pthread_mutex_unlock(&sv_lib.lock);
  return rc;
}

void sv_engine_stop(void) {
  pthread_mutex_lock(&sv_lib.lock);
  int running = sv_lib.engine_running;
  sv_lib.engine_running = 0;
  pthread_mutex_unlock(&sv_lib.lock);
  if (!running) return;
  atomic_store(&sv_lib.engine_stop, 1);
  sv_engine_kick();
  atomic_store(&sv_lib.engine_sleeping, 1);
  sv_engine_kick();
  pthread_join(sv_lib.engine, NULL);
}
