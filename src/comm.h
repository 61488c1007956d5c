/*
 * Connections.  A send comm and a recv comm are two ends of one connection;
 * both start with struct lp_comm so requests and registrations can find
 * their way back without knowing which end they belong to.
 * Everything the connection owns on one NIC is its link (link.h).
 */
#ifndef LP_COMM_H
#define LP_COMM_H

#include <infiniband/verbs.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ctlchan.h"
#include "env.h"
#include "fifo.h"
#include "flush.h"
#include "health.h"
#include "link.h"
#include "linkpass/nccl_net.h"
#include "mr.h"
#include "watchdog.h"
#include "wire.h"

#define LP_COMM_MAGIC 0x4c50436fu
/* Requests a comm can have outstanding.  A receive comm: an irecv or an
 * iflush per step NCCL has in flight, within the FIFO's depth.  A send
 * comm: an isend per sub-receive, and a message of the FIFO may gather up
 * to LP_MAX_RECVS of them (several subs of NCCL's proxy on one
 * connection), as NCCL's own transport sizes its pool. */
#define LP_MAX_REQS NCCL_NET_MAX_REQUESTS
#define LP_MAX_SEND_REQS (NCCL_NET_MAX_REQUESTS * LP_MAX_RECVS)

#define LP_SIGNAL_EVERY 64           /* force a signaled WR at least this often */
#define LP_CTS_SIGNAL_EVERY 16       /* receiver: one clear-to-send in this many is signaled */
#define LP_PROBE_AFTER_NS 1000000ull /* receiver: quiet time before its unsignaled writes get a signaled one */

enum lp_comm_kind { LP_COMM_SEND = 1, LP_COMM_RECV = 2, LP_COMM_LISTEN = 3 };
enum lp_req_type { LP_REQ_SEND = 1, LP_REQ_RECV = 2, LP_REQ_FLUSH = 3 };

struct lp_comm;
struct lp_fo;

struct lp_req {
  struct lp_comm *comm;
  uint8_t type; /* enum lp_req_type */
  uint8_t used;
  uint8_t done;
  uint8_t nsub;
  int events; /* recv: WRITE_WITH_IMM completions still expected; flush: reads not yet complete */
  uint64_t seq;
  size_t size; /* send: bytes sent */
  union {
    size_t sizes[LP_MAX_RECVS]; /* recv: bytes received per sub-receive */
    struct {                    /* flush: the reads that could not be posted yet */
      uint64_t devs;            /* bit d: device d */
      uint64_t since_ns;        /* when a read first had to wait (0: none has) */
      void *data;
      void *mhandle;
    } unposted;
  };
};

struct lp_comm {
  uint32_t magic;
  int kind; /* enum lp_comm_kind */
  const struct lp_env *env;
  struct lp_health *health; /* the control plane; NULL when failover is off */
  struct lp_mr_cache *mrs;  /* the process's registrations (regMr on this comm) */
  /* NICs on which every buffer NCCL used with this connection is
   * registered (bit n: NIC n): the only ones it may move to. */
  uint32_t mr_nics;
  struct lp_ctl ctl; /* the control channel: the setup socket, kept open, and a second one where there is one */
  uint64_t conn_id;
  int traffic_class;
  struct lp_link link;
  void *ctrl; /* control memory: CTS FIFO and records, registered on the link's NIC */
  size_t ctrl_len;
  ncclResult_t error;       /* sticky: once a comm fails every call reports it */
  char peer[160];           /* "host addr dev:port" for messages */
  uint64_t peer_check_ns;   /* when the control sockets were last looked at for a vanished peer (0: look at once) */
  uint64_t peer_next_ns;    /* before then, lp_comm_check_peer does not even consider a look (progress.h) */
  uint64_t progress_ns;     /* when the last progress call that read the clock began (progress.c) */
  int calls_unclocked;      /* progress calls since then */
  int fed_unclocked;        /* and whether they took completions (the watchdog's) */
  uint64_t progress_end_ns; /* the transmit meter's last look, while a timed message is out (progress.c) */
  int metered;              /* send comm: messages out that the transmit meter times (lp_send_msg.metered) */
  char peer_id[160];        /* `peer` without blanks, for key=value event lines */
  struct lp_watchdog wd;    /* fed here, consulted by failover */
  /* Set by failover while a move is agreed (failover.h): nothing new goes
   * out, and NCCL's calls only progress the move. */
  int paused;
  struct lp_fo *fo; /* link failover state (failover.h); NULL when off */
  /* Held by whoever is inside the comm: NCCL's call, or the idle-receiver
   * watch answering a move for a receive comm NCCL is not calling. */
  _Atomic int in_call;
};

/* Which end of its connection the comm is. */
static inline enum lp_dir lp_comm_dir(const struct lp_comm *c) {
  return c->kind == LP_COMM_SEND ? LP_DIR_SEND : LP_DIR_RECV;
}

/* Enter / leave a comm: NCCL's calls into a comm, which the idle watch may
 * be in for a moment (idle_watch.h).  lp_comm_try_enter does not wait: 1
 * when the caller now holds the comm. */
static inline int lp_comm_try_enter(struct lp_comm *c) {
  return !atomic_exchange_explicit(&c->in_call, 1, memory_order_acquire);
}
static inline void lp_comm_enter(struct lp_comm *c) {
  while (!lp_comm_try_enter(c)) sched_yield();
}
static inline void lp_comm_leave(struct lp_comm *c) { atomic_store_explicit(&c->in_call, 0, memory_order_release); }

/* Sender side of one FIFO slot: a message being matched or in flight. */
struct lp_send_msg {
  uint64_t seq;
  int nreqs;
  unsigned taken; /* sub-receives matched by isend so far (bit mask) */
  int events;     /* final-write completions still expected, one per QP */
  struct lp_req *reqs[LP_MAX_RECVS];
  struct {
    uintptr_t laddr;
    size_t size;
    struct lp_mr *mh; /* to find the key on whichever NIC carries the message */
    uint32_t lkey;
    uint64_t raddr;
    uint32_t rkey;
  } sub[LP_MAX_RECVS];
  /* Timed by its NIC's transmit meter (health.h): that device + 1; 0 when
   * not (a small message, or no control plane). */
  int metered;
  /* posting cursor per QP: next sub-receive and offset inside its chunk */
  uint8_t q_sub[LP_MAX_QPS];
  uint8_t q_done[LP_MAX_QPS];
  size_t q_off[LP_MAX_QPS];
};

/* Message m is posted from its first byte on each of its QPs (a new
 * message, or one written again after a move).  Every QP's cursor, of a
 * constant size: a loop over the connection's QPs became three calls of
 * memset, on the path of every message. */
static inline void lp_send_msg_rewind(struct lp_send_msg *m) {
  memset(m->q_sub, 0, sizeof(m->q_sub));
  memset(m->q_done, 0, sizeof(m->q_done));
  memset(m->q_off, 0, sizeof(m->q_off));
}

struct lp_send_comm {
  struct lp_comm base;
  struct lp_cts *fifo;         /* [LP_FIFO_DEPTH][LP_MAX_RECVS], written by the peer */
  struct lp_record *rec_stage; /* [LP_FIFO_DEPTH], source of the final writes */
  uint64_t head;               /* next message to match (first is 1) */
  uint64_t head_torn_ns;       /* when head's clear-to-send was first seen torn; 0: not */
  uint64_t post_seq;           /* next matched message to post */
  size_t max_wr_bytes;
  struct lp_send_msg msgs[LP_FIFO_DEPTH];
  struct lp_req reqs[LP_MAX_SEND_REQS];
};

/* Messages of at least this many bytes are timed for their NIC's rate
 * (gray.h): smaller ones would time the latency. */
#define LP_METER_MIN_BYTES (64u << 10)
/* A gap between two progress calls longer than this, with a timed message
 * out, is time the process did not look (lp_tx_meter.unwatched_ns, when
 * none is still out after it: progress.c): a polling proxy thread comes
 * back within microseconds. */
#define LP_METER_GAP_NS (100u * 1000)

/* Message m leaves its NIC's transmit meter at `now`: with the bytes it
 * moved when it `finished` on the NIC it started on, without them otherwise
 * (written again elsewhere after a move, or dropped by a close). */
void lp_send_msg_unmeter(struct lp_comm *c, struct lp_send_msg *m, int finished, uint64_t now);

struct lp_recv_comm {
  struct lp_comm base;
  struct lp_cts *cts_stage;  /* [LP_FIFO_DEPTH][LP_MAX_RECVS], source of CTS writes */
  struct lp_record *records; /* [LP_FIFO_DEPTH], written by the peer */
  uint64_t tail;             /* next message to announce (first is 1) */
  uint64_t oldest;           /* oldest message not yet complete */
  struct lp_req *slot_req[LP_FIFO_DEPTH];
  struct lp_mr *cts_mh[LP_FIFO_DEPTH][LP_MAX_RECVS]; /* to re-key CTS entries on another NIC */
  uint64_t flush_devs;   /* devices that delivered data since the last iflush (bit d: device d) */
  struct lp_flush flush; /* the loopback paths iflush reads through */
  struct lp_req reqs[LP_MAX_REQS];
};

#define LP_SEND_CTRL_LEN \
  (sizeof(struct lp_cts) * LP_FIFO_DEPTH * LP_MAX_RECVS + sizeof(struct lp_record) * LP_FIFO_DEPTH)
#define LP_RECV_CTRL_LEN LP_SEND_CTRL_LEN

/* ---- comm.c ---- */
/* The comm NCCL handed over, checked: NULL when it is not one, or not of
 * `kind` (0: send or recv).  Inline: every isend, irecv and test checks. */
static inline struct lp_comm *lp_comm_check(void *comm, int kind) {
  struct lp_comm *c = comm;
  if (c == NULL || c->magic != LP_COMM_MAGIC) return NULL;
  if (kind != 0) return c->kind == kind ? c : NULL;
  return c->kind == LP_COMM_SEND || c->kind == LP_COMM_RECV ? c : NULL;
}
struct lp_req *lp_req_alloc(struct lp_comm *comm);
/* The comm's requests: *n of them (its kind's pool). */
struct lp_req *lp_comm_reqs(struct lp_comm *comm, int *n);
void lp_req_free(struct lp_req *req);
/* Record a failure once (WARN) and make the comm fail from now on. */
ncclResult_t lp_comm_fail(struct lp_comm *comm, ncclResult_t err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void lp_comm_destroy(struct lp_comm *comm);
/* 1 while any QP has signaled work outstanding (what the watchdog waits on). */
int lp_comm_busy(const struct lp_comm *comm);
/* 1 when the peer closed the control channel or none of its connections
 * is left (-errno or 0 in *err).  A look: its time (the last progress
 * call's) goes in peer_check_ns, which the caller paces by. */
int lp_comm_peer_gone(struct lp_comm *comm, int *err);
/* This comm's registration of an mhandle, on its current NIC.  NULL when invalid. */
static inline struct ibv_mr *lp_mr_for(const struct lp_comm *comm, void *mhandle) {
  return lp_mr_on(mhandle, comm->env->devs[comm->link.dev].nic);
}
/* The connection uses this buffer: it may only move where it is registered. */
static inline void lp_comm_uses(struct lp_comm *comm, void *mhandle) { comm->mr_nics &= lp_mr_nics(mhandle); }
/* An isend or irecv whose buffer has no key on the comm's NIC, because that
 * NIC was dead when NCCL registered it (mr.c, dead_nics): 1 when the call
 * is to wait for the move the NIC's death calls for, the comm from now on
 * going only where the buffer is registered; 0 when the handle is not
 * valid here.  An EIO that neither a fatal error nor the port's health
 * confirms within LP_MR_DEAD_WAIT_NS of the registration stops the wait:
 * nothing would move the connection. */
int lp_comm_awaits_move(struct lp_comm *comm, void *mhandle);
/* Every buffer the connection has used is registered on `dev`'s NIC. */
static inline int lp_comm_may_use(const struct lp_comm *comm, int dev) {
  return comm->mr_nics >> comm->env->devs[dev].nic & 1u;
}

/* Where in its control memory the peer writes: the sender's CTS FIFO is at
 * its start, the receiver's completion records follow its CTS staging. */
static inline size_t lp_comm_ctrl_remote_off(const struct lp_comm *c) {
  if (c->kind == LP_COMM_SEND) return 0;
  return (size_t)((const char *)((const struct lp_recv_comm *)c)->records - (const char *)c->ctrl);
}

/* Open a link for this comm on `dev` (link.h), counted as its direction. */
static inline ncclResult_t lp_comm_link_open(struct lp_link *link, const struct lp_comm *c, int dev, int nqps,
                                             size_t remote_off) {
  return lp_link_open(link, c->env, c->health, lp_comm_dir(c), dev, nqps, c->ctrl, c->ctrl_len, remote_off);
}

/* Signaled WRs of QP q not yet known complete: those posted and not
 * returned, less the unsignaled ones since the last signaled post (a
 * receiver's trailing clear-to-sends may stay unsignaled indefinitely). */
static inline int lp_comm_signaled_outstanding(const struct lp_comm *c, int q) {
  return LP_SQ_DEPTH - c->link.sq_free[q] - c->link.unsignaled[q];
}

/* Work requests for one QP that go out with one ibv_post_send: one
 * doorbell for a message's writes and its final write, as NCCL's own
 * transport posts them (a doorbell each cost simverbs a wake-up of its
 * engine, and a NIC an MMIO write). */
#define LP_CHAIN_MAX 16
struct lp_chain {
  int q, n;
  int arm; /* a signaled WR goes out with none outstanding: the watchdog's clock starts */
  struct ibv_send_wr wr[LP_CHAIN_MAX];
  struct ibv_sge sge[LP_CHAIN_MAX];
  enum lp_wr_kind kind[LP_CHAIN_MAX];
};

static inline void lp_chain_init(struct lp_chain *ch, int q) {
  ch->q = q;
  ch->n = 0;
  ch->arm = 0;
}

/* Add a WR (and its one sge, or none) to the chain, counted against QP q's
 * credits at once; signaled when `force`d, once in `every`, or when credits
 * run low: a signaled completion returns the credits of the unsignaled WRs
 * before it.  The watchdog waits on signaled work only; when this WR is the
 * only signaled one outstanding, its clock starts when the chain goes out
 * (watchdog.h; without this, a comm unused for longer than
 * LINKPASS_WATCHDOG_MS failed over on its next message).  A full chain
 * goes out first. */
ncclResult_t lp_comm_chain_add(struct lp_comm *c, struct lp_chain *ch, const struct ibv_send_wr *wr,
                               const struct ibv_sge *sge, enum lp_wr_kind kind, int every, int force, uint64_t seq);
/* Post the chain (nothing when empty) and empty it. */
ncclResult_t lp_comm_chain_post(struct lp_comm *c, struct lp_chain *ch);
/* One WR on QP q, alone: a chain of one. */
ncclResult_t lp_comm_post(struct lp_comm *c, int q, struct ibv_send_wr *wr, enum lp_wr_kind kind, int every, int force,
                          uint64_t seq);

#endif
