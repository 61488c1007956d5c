/* simverbs: the process-local side of the simulated libibverbs.
 *
 * Each process that opens a simulated device gets one engine thread — its
 * "NIC" — that executes send queues, delivers completion-channel and async
 * events, and reaps crashed peers.  Objects a peer must reach (receive queues,
 * CQ rings, MR keys) live in the shared fabric segment; the send queue, which
 * only the owner's engine consumes, lives in private memory. */
#ifndef SIMVERBS_H
#define SIMVERBS_H

#include "fabric.h"
#include "sv_export.h"

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>

#define SV_MAX_INLINE 256

struct sv_device_handle {
  struct ibv_device dev;
  int index; /* fabric device index */
};

struct sv_ctx {
  struct verbs_context vctx; /* ibv_context sits at its end, as libibverbs requires */
  int dev;
  int async_rd, async_wr; /* pipe carrying struct sv_async_record */
  uint64_t event_seq_seen;
  uint32_t fatal_gen; /* the device's fatal_gen when it was opened */
  struct sv_ctx *next;
};

/* A context whose device went fatal since it was opened is dead for good,
 * as rdma-core's disassociated context: every command through the kernel
 * (create, modify, register, query) fails with EIO, even once the device
 * recovered; destroys still succeed, so that it can be torn down. */
int sv_ctx_dead(struct ibv_context *c);

/* What the engine writes into the async pipe (the kernel's format). */
struct sv_async_record {
  uint64_t element;
  uint32_t type;
  uint32_t serial; /* the QP's or CQ's (never 0), or 0 */
};

struct sv_pd {
  struct ibv_pd pd;
  uint64_t id;
  /* One for the PD itself and one for each of its QPs and registrations:
   * the kernel refuses to free a PD in use (EBUSY).  A dead context's PD
   * goes at once for its caller (the kernel destroyed it with the rest),
   * and its memory with the last object that points to it. */
  _Atomic int refs;
};
void sv_pd_hold(struct ibv_pd *pd);
void sv_pd_drop(struct ibv_pd *pd);

struct sv_mr_handle {
  struct ibv_mr mr;
  int index;
};

struct sv_channel {
  struct ibv_comp_channel ch;
  int wr_fd;
};

struct sv_cq_local {
  struct ibv_cq cq;
  int index;
  struct sv_cqe *ring;
  pthread_mutex_t poll_lock; /* pollers of this process among themselves */
  int users;                 /* QPs completing into it, once per queue (sv_lib.lock): destroy_cq's EBUSY */
  /* Names it in its events (sv_async_record.serial); its CQ_ERR events its
   * reader took, and those acked: ibv_destroy_cq waits for the acks
   * (sv_await_acks). */
  uint32_t serial;
  _Atomic uint32_t events_taken, events_acked;
  struct sv_cq_local *next;
};

/* Send work request as copied at post time (inline data included, so the
 * caller may reuse its buffer at once, as on hardware).  An entry is as
 * large as the QP's caps need, as a ConnectX's WQE: its max_send_sge
 * gather entries, or its max_inline_data bytes in their place
 * (sv_qp_local.sq_stride). */
struct sv_swqe {
  uint64_t wr_id;
  uint64_t remote_addr;
  uint32_t opcode, send_flags, imm, num_sge;
  uint32_t rkey, inline_len;
  uint64_t compare_add, swap; /* atomics */
  uint64_t post_ns;           /* when it was posted: the wire may start it from then on */
  struct ibv_sge sge[];       /* num_sge of them; an inline WR's payload instead (sv_swqe_inline) */
};

static inline uint8_t *sv_swqe_inline(struct sv_swqe *w) { return (uint8_t *)w->sge; }

/* Progress of the WR at the head of a send queue. */
enum sv_head_state {
  SV_HEAD_NEW = 0,   /* not yet scheduled on the wire */
  SV_HEAD_SCHEDULED, /* bandwidth reserved; executes at due_ns */
  SV_HEAD_UNACKED,   /* data went out but no ACK will come: runs out the retries */
};

/* Why the head WR waits for resend_ns before it goes out again. */
enum sv_resend {
  SV_RESEND_NONE = 0,
  SV_RESEND_TIMEOUT, /* a transmission drew no ACK: the local ACK timer runs */
  SV_RESEND_RNR,     /* the responder answered RNR NAK: the RNR timer runs */
};

struct sv_qp_local {
  struct ibv_qp qp;
  int index; /* fabric QP index */
  struct sv_ctx *ctx;
  /* sq_size entries of sq_stride bytes, populated at create: a NIC's queue
   * is pinned memory, and a ring faulted in entry by entry cost K = 1,024
   * connections tens of thousands of page faults a second (docs/SIMVERBS.md). */
  unsigned char *sq;
  uint32_t sq_size, sq_stride, max_inline, max_send_sge, max_recv_sge;
  int sig_all;
  /* ibv_set_ece's request: applied, reduced to what the device offers, when
   * the QP moves to RTR (as mlx5 passes it with the next modify). */
  int ece_pending;
  uint32_t ece_request;
  int tail_lost;             /* the head WR's last packet is lost (engine.c transmit) */
  uint64_t rng;              /* its packet losses' random state (engine.c) */
  pthread_mutex_t post_lock; /* posters among themselves */
  pthread_mutex_t exec_lock; /* whoever executes the send queue: a poster or the engine */
  pthread_mutex_t recv_lock; /* posters of receives among themselves */
  _Atomic uint32_t sq_head, sq_tail;
  /* Engine-only state for the head WR. */
  enum sv_head_state head_state;
  enum sv_resend resend;
  uint64_t due_ns, resend_ns;    /* resend_ns: when it goes (went) out again; UINT64_MAX: never (timeout 0) */
  uint32_t retries, rnr_retries; /* retransmissions so far, after timeouts / after RNR NAKs */
  _Atomic int listed;            /* in sv_lib.active (engine.c: sv_qp_active) */
  /* Names it in its events (sv_async_record.serial); its affiliated events
   * its reader took, and those acked: ibv_destroy_qp waits for the acks
   * (sv_await_acks). */
  uint32_t serial;
  _Atomic uint32_t events_taken, events_acked;
  struct sv_qp_local *next;
};

/* Send queue entry at position `pos`. */
static inline struct sv_swqe *sv_sq_entry(struct sv_qp_local *lq, uint32_t pos) {
  return (struct sv_swqe *)(lq->sq + (size_t)(pos & (lq->sq_size - 1)) * lq->sq_stride);
}

#define SV_PEER_MAPS 1024

/* A peer's shared window mapped into this process (window.c). */
struct sv_peer_map {
  char *base;
  pid_t pid;
  uint64_t id;
};

struct sv_window;
struct sv_span;

/* The one per-process instance of the simulated library. */
struct sv_lib {
  pthread_mutex_t lock; /* lists below; held by the engine for a whole pass */
  struct sv_fabric *fab;
  int proc, host;
  int open_contexts;
  struct sv_device_handle *devs; /* this host's devices, kept for the process lifetime */
  int ndevs;
  struct sv_ctx *ctxs;
  struct sv_qp_local *qps;
  struct sv_cq_local *cqs;
  pthread_t engine;
  int engine_running;
  _Atomic int engine_stop;
  _Atomic int engine_sleeping;
  _Atomic uint64_t deferred_due_ns; /* pollers run deferred work from then on; UINT64_MAX: none */
  _Atomic uint64_t deferred_ns;     /* when a poster last left work for later */
  _Atomic uint64_t engine_wake_ns;  /* when the sleeping engine wakes by itself; 0 while it runs */
  /* The QPs that may have work (engine.c): passes look at these, and at
   * every QP only once per SV_FULL_SCAN_NS (faults set from outside). */
  pthread_mutex_t active_lock;
  struct sv_qp_local **active, **active_spare;
  int nactive, active_cap, nactive_spare, active_spare_cap;
  int scan_all; /* a QP could not be listed (out of memory): the next pass looks at every QP */
  uint64_t last_full_scan_ns;
  uint64_t seen_fault_gen;  /* the fabric's fault_gen at the last pass */
  uint32_t seen_cq_events;  /* our sv_proc.cq_events when the engine last looked at the CQs */
  unsigned pass_turn;       /* where the next pass over the active QPs starts (engine.c) */
  pthread_mutex_t ack_lock; /* ibv_ack_async_event's signal to a destroy waiting for it */
  pthread_cond_t ack_cond;
  _Atomic uint32_t next_serial; /* the last QP's or CQ's serial */
  pthread_mutex_t window_lock;  /* the tables below */
  struct sv_window **windows;   /* our registered memory, shared with peers, by address (they never overlap) */
  int nwindows, windows_cap;
  struct sv_span *spans; /* the pages under each live registration of ours, shared or not */
  int nspans, spans_cap;
  struct sv_peer_map peer_maps[SV_PEER_MAPS]; /* entries never change once counted */
  int npeer_maps;
  /* by MR index: the peer map its window was last found in (a hint,
   * checked against the MR on every use) */
  struct sv_peer_map *_Atomic window_hint[SV_MAX_MRS];
  /* until when a peer process (by fabric slot) is taken to be alive without
   * asking the kernel again, and the pid that answer was for (engine.c) */
  _Atomic uint64_t peer_alive_until_ns[SV_MAX_PROCS];
  _Atomic int peer_alive_pid[SV_MAX_PROCS];
};

extern struct sv_lib sv_lib;

/* device.c */
int sv_lib_attach(void);
struct sv_ctx *sv_ctx_of(struct ibv_context *c);

/* objects.c */
#define SV_CQ_BROKEN (-1) /* sv_cq_push: full, or broken by an overrun */
#define SV_CQ_GONE (-2)   /* sv_cq_push: destroyed */
int sv_cq_push(struct sv_fabric *f, int cq_index, const struct ibv_wc *wc, uint64_t frees);
int sv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
/* Take QP `qpn`'s unpolled completions out of `cq` (ibv_destroy_qp). */
void sv_cq_clean(struct ibv_cq *cq, uint32_t qpn);
int sv_req_notify_cq(struct ibv_cq *cq, int solicited_only);
/* A consistent copy of the registration `key` names into *out; 0 when it
 * names none (never registered, deregistered, or its slot taken since). */
int sv_mr_read(struct sv_fabric *f, uint32_t key, struct sv_mr *out);

/* window.c */
void sv_window_share(struct sv_mr *m);
void sv_window_release(struct sv_mr *m);
/* Map the dma-buf `fd`'s [offset, offset + length) for a registration at
 * `iova` into `m` (addr, window); 0 or the errno the kernel would give. */
int sv_window_dmabuf(struct sv_mr *m, int fd, uint64_t offset, size_t length, uint64_t iova);
/* `m`: a copy of MR table slot `slot` (sv_mr_read). */
char *sv_window_map(struct sv_fabric *f, const struct sv_mr *m, uint32_t slot);

/* qp.c */
int sv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int sv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int sv_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);

/* engine.c */
int sv_engine_start(void);
void sv_engine_stop(void);
void sv_engine_kick(void);
/* `serial`: the QP's or CQ's an affiliated event names (sv_qp_local.serial), 0 for a device's or a port's. */
void sv_async_post(struct sv_ctx *ctx, uint32_t type, uint64_t element, uint32_t serial);
/* Wait until every event of the object its reader took is acked (objects.c). */
uint32_t sv_new_serial(void); /* for a new QP or CQ: never 0 */
void sv_await_acks(_Atomic uint32_t *taken, _Atomic uint32_t *acked, const char *call, uint32_t num);
void sv_qp_to_error(struct sv_qp_local *lq);
/* Forget everything the engine knew of the head WR (it left, or the queue was reset). */
void sv_head_reset(struct sv_qp_local *lq);
/* Execute what a QP's send queue can execute now, in the caller's thread. */
void sv_qp_run(struct sv_qp_local *lq, uint64_t now);
/* Run one progress pass over deferred work if nobody else is. */
void sv_progress_deferred(void);
/* Work left for later, due at `due` (UINT64_MAX: look again soon), or now
 * (a QP moved to the error state has WRs to flush): the next poller of an
 * empty CQ after then does it, as a NIC writes the flushes at once; the
 * engine is woken only when it would not look by itself soon after (it
 * stands by every SV_BACKSTOP_NS while pollers are active).  A move of a
 * thousand connections woke it with a system call for every QP it put in
 * the error state (docs/SIMVERBS.md). */
void sv_defer_work(uint64_t now, uint64_t due);
/* Work due now (a QP put in the error state, whose WRs are flushed). */
void sv_defer_now(void);
/* The QP may have work now (a post, a state change): passes look at it
 * until it is idle again.  Any thread. */
void sv_qp_active(struct sv_qp_local *lq);
/* Forget it (destroy_qp, sv_lib.lock held). */
void sv_qp_inactive(struct sv_qp_local *lq);

#endif
