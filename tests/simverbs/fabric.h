/*
 * simverbs: the shared state of one simulated RDMA fabric.
 *
 * One file in /dev/shm (named by SIMVERBS_FABRIC, default "default") holds the
 * topology, the port states, the faults being injected, and every object a
 * remote peer must reach without help from its owner's CPU: memory regions
 * (for rkey checks), receive queues and completion queues.  Every process that
 * opens a simulated device maps it; the `simverbs` tool maps it to bring the
 * fabric up, pull links and inject faults.
 *
 * Offsets, never pointers, are stored in the segment: each process maps it at
 * its own address.  Locks are robust process-shared mutexes so that a process
 * that dies holding one never wedges the fabric.
 */
#ifndef SIMVERBS_FABRIC_H
#define SIMVERBS_FABRIC_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SV_MAGIC 0x3156534d56495353ull /* "SSIVMSV1" */
#define SV_VERSION \
  18 /* 2: struct sv_fabric gained `netns`; 3, 4: hot fields on their own cache lines; 5: atomics; 6: the access-error fault; 7: adaptive routing, ECE, inline and out-of-order counters; 8: rate and loss faults, port counters; 9: dma-buf and peer memory; 10: fault_gen; 11: resends_written ; 12: recv_post_fail; 13: sv_proc.cq_events; 14: sv_mr.seq; 15: sv_mr.win_lo, win_hi; 16: query_fail, create_qp_fail, rtr_fail; 17: queue slots freed at the polled completion (sv_qp.sq_freed, rq_freed, sv_cqe.frees), sv_cq.broken, sv_device.fatal_gen; 18: sv_qp.comm_est */

#define SV_MAX_HOSTS 16
#define SV_MAX_DEVS 64
#define SV_MAX_PORTS 2
#define SV_MAX_PROCS 256
#define SV_MAX_QPS 16384 /* 14 bits of the QP number: sv_make_qpn */
#define SV_MAX_CQS 16384
#define SV_MAX_MRS 65536
#define SV_MAX_RD_ATOM 16 /* READs and atomics a QP may have outstanding, as initiator or responder */
#define SV_MAX_HEAP_BLOCKS 65536
#define SV_HEAP_BYTES (1ull << 30) /* sparse: tmpfs only backs touched pages */
#define SV_NAME_LEN 64
#define SV_NGIDS 4
#define SV_EVENT_LOG 64
#define SV_MAX_SGE 16
#define SV_MAX_WR 16384
#define SV_MAX_CQE 65536
#define SV_PAGE 4096ul

static inline uintptr_t sv_page_down(uintptr_t v) { return v & ~(SV_PAGE - 1); }
static inline uintptr_t sv_page_up(uintptr_t v) { return (v + SV_PAGE - 1) & ~(SV_PAGE - 1); }

/* Port fault flags and counters: set by the tool or a test, read by senders. */
struct sv_port {
  _Atomic uint32_t state; /* enum ibv_port_state: IBV_PORT_ACTIVE or IBV_PORT_DOWN */
  uint32_t link_layer;    /* IBV_LINK_LAYER_INFINIBAND or IBV_LINK_LAYER_ETHERNET */
  uint32_t rate_gbps;     /* reported and enforced on the sending side */
  uint32_t latency_ns;    /* one-way latency added to every work request */
  uint16_t lid;           /* IB only; 0 on RoCE */
  uint16_t pad0;
  uint32_t ngids;
  union ibv_gid gids[SV_NGIDS];
  uint32_t gid_types[SV_NGIDS]; /* enum ibv_gid_type (IBV_GID_TYPE_IB/ROCE_V1/ROCE_V2) */
  uint32_t ipv4;                /* RoCE: address in the IPv4-mapped GIDs, host order */
  char netdev[16];              /* backing network interface, "" when none */
  /* The switches route this port's plain RDMA WRITEs adaptively (the subnet
   * manager's choice, as on an InfiniBand fabric with AR): their packets may
   * land out of order.  Packets carrying an immediate or a SEND stay in order. */
  uint32_t adaptive_routing;
  /* Faults.  A blackholed port stays ACTIVE but drops everything (a broken
   * switch path): no event anywhere, only retries that run out. */
  _Atomic uint32_t blackhole;
  _Atomic uint32_t ack_loss;       /* next N requests: data lands, the ACK never comes back */
  _Atomic uint32_t partial_write;  /* next N writes: half the payload lands, then the link dies */
  _Atomic uint32_t delay_us;       /* extra delay on every work request */
  _Atomic uint32_t access_error;   /* next N requests: the responder refuses them (REM_ACCESS_ERR), as for a bad rkey */
  _Atomic uint32_t recv_post_fail; /* next N ibv_post_recv calls on its QPs: ENOMEM, nothing posted */
  _Atomic uint32_t query_fail;     /* ibv_query_port of it fails with EIO (a device cut off from its driver) */
  /* Gray failures: the port stays ACTIVE and reports its full rate, as a
   * link that degraded under it (a lane down, errors corrected by
   * retransmission) does not say so in its attributes. */
  _Atomic uint32_t rate_pct;   /* it moves data at this percentage of its rate (1..100; 0 counts as 100) */
  _Atomic uint32_t loss_ppm;   /* packets lost per million, sent or received through it */
  _Atomic uint32_t link_downs; /* times it went down (sysfs counters/link_downed) */
  /* Written on every work request, each line by one side only: the port's
   * own senders (wire and tx) and its peers' senders (rx).  On the lines
   * above, which every sender reads, they would bounce between processes. */
  _Alignas(64) _Atomic uint64_t busy_until_ns; /* rate limiter: when the wire is free again */
  _Atomic uint64_t tx_bytes, tx_wrs, tx_packets;
  /* The requester's side of a loss (mlx5 hw_counters): a NAK for a packet
   * out of sequence (packet_seq_err), a local ACK timeout
   * (local_ack_timeout_err; on RoCE also roce_adp_retrans). */
  _Atomic uint64_t seq_err_naks, ack_timeouts;
  _Atomic uint64_t xmit_discards; /* packets thrown away because the port was down (PortXmitDiscards) */
  _Alignas(64) _Atomic uint64_t rx_bytes, rx_wrs, rx_packets;
  _Atomic uint64_t out_of_sequence;     /* the responder's side: packets after a lost one (mlx5 out_of_sequence) */
  _Atomic uint64_t counters_written_ns; /* sysfs counters of the port last rewritten (engine.c) */
  _Atomic uint64_t resends_written;     /* seq_err_naks + ack_timeouts then */
};

struct sv_device {
  uint32_t in_use;
  uint32_t host;
  char name[SV_NAME_LEN];
  uint64_t node_guid;      /* host order */
  uint64_t sys_image_guid; /* host order */
  char pci[32];            /* e.g. 0000:17:00.0 */
  int32_t numa_node;
  uint32_t nports;
  uint32_t vendor_id, vendor_part_id;
  uint32_t ece;    /* Enhanced Connection Establishment options the device offers; 0: ibv_query_ece unsupported */
  uint32_t dmabuf; /* 1: ibv_reg_dmabuf_mr works; 0: it answers EOPNOTSUPP as on an older kernel */
  _Atomic uint32_t fatal;          /* device fatal injected: every QP errors, opens fail */
  _Atomic uint32_t fatal_gen;      /* fatal errors so far: a context opened before the last is dead (sv_ctx_dead) */
  _Atomic uint32_t create_qp_fail; /* next N ibv_create_qp calls on it: ENOMEM (its QP resources exhausted) */
  _Atomic uint32_t rtr_fail;       /* next N ibv_modify_qp to RTR on it: EINVAL (attributes it refuses) */
  /* Serialises the atomic operations that target this NIC's memory: as
   * IBV_ATOMIC_HCA promises, they are atomic among themselves, not with
   * the CPU's accesses. */
  pthread_mutex_t atomic_lock;
  struct sv_port ports[SV_MAX_PORTS];
  /* Async events for every context that has the device open (port events,
   * device fatal).  Readers remember the last seq they delivered. */
  _Atomic uint64_t event_seq;
  struct {
    uint64_t seq;
    uint32_t type;    /* enum ibv_event_type */
    uint32_t element; /* port number for port events */
  } events[SV_EVENT_LOG];
};

struct sv_host {
  uint32_t in_use;
  char name[SV_NAME_LEN];
  uint32_t peer_memory; /* 1: GPU peer memory is loaded (its sysfs file is in the host's tree) */
};

struct sv_proc {
  _Atomic uint32_t in_use;
  pid_t pid;
  uint64_t start_time; /* /proc/<pid>/stat field 22: tells a reused pid apart */
  uint32_t host;
  _Atomic uint32_t doorbell;  /* futex word: bumped to wake the owner's engine */
  _Atomic uint32_t cq_events; /* bumped after a CQ of the owner overran or owes its channel a notice */
};

/* Receive work request as stored in a shared receive queue ring. */
struct sv_rwqe {
  _Atomic uint64_t seq; /* position + 1 once posted; written last */
  uint64_t wr_id;
  uint32_t num_sge;
  uint32_t pad;
  struct ibv_sge sge[]; /* stride = sizeof(struct sv_rwqe) + max_sge * sizeof(struct ibv_sge) */
};

/* QP fault requests, handled by the owner's engine: FATAL raises QP_FATAL,
 * ACCESS (a peer broke an rkey rule) raises QP_ACCESS_ERR, ERR (the error
 * completion was already posted) moves to ERR silently. */
enum sv_qp_fault { SV_QP_FAULT_NONE = 0, SV_QP_FAULT_FATAL = 1, SV_QP_FAULT_ACCESS = 2, SV_QP_FAULT_ERR = 3 };

/* Cache lines: peers' executors read the first part on every WR, so only
 * state changes write it; the receive queue, which the owner's posts and
 * the peer's executor both write, has lines of its own. */
struct sv_qp {
  _Alignas(64) _Atomic uint32_t in_use;
  uint32_t gen;
  int32_t owner; /* proc index */
  uint32_t dev;
  uint32_t port;
  uint32_t qp_type;
  _Atomic uint64_t requests;   /* send requests completed successfully (`simverbs status`: req) */
  _Atomic uint64_t inline_wrs; /* send requests posted with IBV_SEND_INLINE (`simverbs status`: inl) */
  _Atomic uint64_t ooo_writes; /* writes whose payload landed out of order (`simverbs status`: ooo) */
  uint32_t ece;                /* the ECE options in force (ibv_set_ece / ibv_query_ece) */
  uint64_t pd_id;
  _Atomic uint32_t state; /* enum ibv_qp_state */
  uint32_t qpn;
  uint32_t dest_qpn;
  uint32_t access; /* IBV_ACCESS_REMOTE_* allowed on this QP as responder */
  int32_t recv_cq; /* CQ table index */
  int32_t send_cq;
  _Atomic uint32_t fault; /* enum sv_qp_fault */
  /* IBV_EVENT_COMM_EST: 1 once a request reached the QP while it was in
   * RTR (its owner's engine raises the event), 2 once raised; 0 again at
   * RESET. */
  _Atomic uint32_t comm_est;
  /* Attributes kept for ibv_query_qp and the transport rules. */
  uint32_t rq_psn, sq_psn, path_mtu, timeout, retry_cnt, rnr_retry, min_rnr_timer;
  uint32_t max_rd_atomic, max_dest_rd_atomic, pkey_index;
  struct ibv_ah_attr ah;
  /* Receive queue ring in the heap.  The owner's posters fill it (one at a
   * time, under their process's lock), publishing each entry through its
   * seq; consumers (the peer's executor, a flush) take from rq_head under
   * rq_lock.  Neither side writes the other's line. */
  uint32_t rq_size, rq_max_sge, rq_stride;
  uint64_t rq_off;
  _Alignas(64) uint64_t rq_tail; /* next position to fill */
  /* The owner's: how far its pollers freed each queue (sv_queue_mark).  A
   * slot is free again only once the completion that covers it was polled,
   * as on mlx5, not when its request executed: an unsignaled request holds
   * its slot until a later signaled one is polled. */
  _Atomic uint64_t sq_freed, rq_freed;
  _Alignas(64) pthread_mutex_t rq_lock;
  _Atomic uint64_t rq_head;
};

/* A completion in a CQ's ring.  `seq` is published last: the entry at
 * position p is there when seq == p + 1, as a CQE's owner bit tells a
 * poller on hardware, so an empty poll reads only the line the next
 * completion will be written to. */
struct sv_cqe {
  _Alignas(64) _Atomic uint64_t seq;
  struct ibv_wc wc;
  uint64_t frees; /* the queue slots its poll frees (sv_frees), 0: none */
};

struct sv_cq {
  _Alignas(64) _Atomic uint32_t in_use;
  uint32_t gen;
  int32_t owner;
  uint32_t dev;
  uint32_t size;                   /* entries */
  uint64_t ring_off;               /* struct sv_cqe[size] in the heap */
  _Atomic uint32_t armed;          /* 0 none, 1 any completion, 2 solicited only */
  _Atomic uint32_t notify_pending; /* completions seen while armed: owner writes the channel */
  _Atomic uint32_t overrun;        /* CQ overflowed: owner raises IBV_EVENT_CQ_ERR */
  _Atomic uint32_t broken;         /* it overflowed once: it takes no completion again (sv_cq_push) */
  /* Producers (the owner's and remote executors), under the lock. */
  _Alignas(64) pthread_mutex_t lock;
  uint64_t tail;      /* next position to fill */
  uint64_t head_seen; /* `head` when producers last looked: re-read only when the ring seems full */
  /* The consumer (the owner's pollers, one at a time). */
  _Alignas(64) _Atomic uint64_t head;
};

/* A slot of the MR table.  Every process's engine reads it while a
 * registration in any process may take the slot once it is free and
 * rewrite it: the fields are written with release and read with acquire
 * accesses, and `seq` is a sequence lock (odd while mr_publish rewrites
 * them), so that a reader holding a stale key never takes half of one
 * registration and half of the next (sv_mr_read). */
struct sv_mr {
  _Atomic uint32_t in_use;
  _Atomic uint32_t seq;
  uint32_t gen;
  int32_t owner;
  uint32_t dev;
  uint64_t pd_id;
  uint64_t addr; /* in the owner's address space */
  uint64_t length;
  uint64_t iova; /* address remote peers use; addr + (va - iova) */
  uint32_t access;
  /* Shared window (window.c): the owner's fd of a memfd now backing
   * [win_lo, win_hi) of the registration's memory (all of it, or the pages
   * wholly inside it), which peers map to write with a plain memcpy.  -1
   * when none could be shared: peers use process_vm_writev, as they do for
   * bytes outside [win_lo, win_hi). */
  int32_t win_fd;
  uint32_t dmabuf;           /* 1: a dma-buf registration: addr is the library's own mapping of the buffer */
  uint64_t win_id;           /* unique per fabric: a peer's cached mapping never goes stale */
  uint64_t win_lo, win_hi;   /* the owner's addresses the memfd backs */
  uint64_t win_off, win_len; /* where win_lo sits in the memfd; the memfd's size */
};

struct sv_heap_block {
  uint64_t off, size;
  int32_t owner; /* proc index, -1 when free */
  uint32_t in_use;
};

struct sv_fabric {
  uint64_t magic;
  uint32_t version;
  uint32_t ready; /* set last by `simverbs up` */
  char name[SV_NAME_LEN];
  char run_dir[256];    /* holds the per-host sysfs trees */
  pthread_mutex_t lock; /* robust; guards allocation of every table below */
  _Atomic uint64_t next_pd_id;
  _Atomic uint64_t next_window_id;
  /* Bumped after a QP fault or a device fatal is set, by whichever process
   * sets it: the owners' engines then look at every QP (engine.c). */
  _Atomic uint64_t fault_gen;
  uint32_t nhosts, ndevs;
  struct sv_host hosts[SV_MAX_HOSTS];
  struct sv_device devs[SV_MAX_DEVS];
  struct sv_proc procs[SV_MAX_PROCS];
  struct sv_qp qps[SV_MAX_QPS];
  struct sv_cq cqs[SV_MAX_CQS];
  struct sv_mr mrs[SV_MAX_MRS];
  struct sv_heap_block heap_blocks[SV_MAX_HEAP_BLOCKS];
  uint64_t heap_off; /* offset of the heap from the start of the segment */
  /* 1: every host has its own network namespace and every port a veth
   * interface whose operational state the port follows (netns.c, watch.c in
   * the tool; config line `netns on`).  The library never looks at it. */
  uint32_t netns;
  uint32_t pad_netns;
};

/* ---- fabric.c: segment lifetime, locks, processes, heap ---- */

/* Path of the segment for fabric `name` (NULL: $SIMVERBS_FABRIC or "default"). */
void sv_fabric_path(const char *name, char *out, size_t len);
/* Create (truncating any old one) a zeroed, initialised segment. */
struct sv_fabric *sv_fabric_create(const char *name);
/* Map an existing segment; NULL with errno set (ENOENT: not up). */
struct sv_fabric *sv_fabric_attach(const char *name);
void sv_fabric_detach(struct sv_fabric *f);
/* Remove the segment and the run directory. */
int sv_fabric_destroy(const char *name);
size_t sv_fabric_size(void);

/* Robust mutex helpers: recover a lock whose holder died. */
void sv_mutex_init(pthread_mutex_t *m);
void sv_lock(pthread_mutex_t *m);
void sv_unlock(pthread_mutex_t *m);

static inline void *sv_heap_ptr(struct sv_fabric *f, uint64_t off);

/* Receive queue entry at position `pos`. */
static inline struct sv_rwqe *sv_rq_entry(struct sv_fabric *f, struct sv_qp *q, uint64_t pos) {
  return (struct sv_rwqe *)((char *)sv_heap_ptr(f, q->rq_off) + (size_t)(pos & (q->rq_size - 1)) * q->rq_stride);
}
/* The posted receive at the head, or NULL; rq_lock held. */
static inline struct sv_rwqe *sv_rq_head(struct sv_fabric *f, struct sv_qp *q) {
  uint64_t h = atomic_load_explicit(&q->rq_head, memory_order_relaxed);
  struct sv_rwqe *w = sv_rq_entry(f, q, h);
  return atomic_load_explicit(&w->seq, memory_order_acquire) == h + 1 ? w : NULL;
}
/* Consume the head (its fields read); rq_lock held.  Release: the owner
 * reuses the entry only after seeing the head pass it.  Returns the
 * position consumed (what its completion frees: sv_frees). */
static inline uint64_t sv_rq_pop(struct sv_qp *q) {
  uint64_t h = atomic_load_explicit(&q->rq_head, memory_order_relaxed);
  atomic_store_explicit(&q->rq_head, h + 1, memory_order_release);
  return h;
}

/* Queue slots: what a completion frees when it is polled (its sv_cqe.frees),
 * and how far a QP's queue is freed (sv_qp.sq_freed, rq_freed: the QP's
 * number and the position after the last freed slot, so that a completion
 * of a QP destroyed since never frees the next QP on the slot). */
#define SV_FREES_ANY (1ull << 62)
#define SV_FREES_RECV (1ull << 63)
static inline uint64_t sv_frees(int recv, uint64_t pos) {
  return SV_FREES_ANY | (recv ? SV_FREES_RECV : 0) | (uint32_t)(pos + 1);
}
static inline uint64_t sv_queue_mark(uint32_t qpn, uint64_t freed_to) {
  return (uint64_t)qpn << 32 | (uint32_t)freed_to;
}
/* Slots in use, of a queue filled up to `tail`, by its mark. */
static inline uint32_t sv_queue_used(uint64_t tail, uint64_t mark) { return (uint32_t)tail - (uint32_t)mark; }

/* A port's active MTU: 4096 on InfiniBand, 1024 on RoCE (an Ethernet MTU
 * of 1500, as most fabrics run). */
static inline enum ibv_mtu sv_port_active_mtu(const struct sv_port *p) {
  return p->link_layer == IBV_LINK_LAYER_INFINIBAND ? IBV_MTU_4096 : IBV_MTU_1024;
}

static inline void *sv_heap_ptr(struct sv_fabric *f, uint64_t off) { return (char *)f + f->heap_off + off; }
/* Allocate/free heap bytes for proc `owner`; returns offset or UINT64_MAX. */
uint64_t sv_heap_alloc(struct sv_fabric *f, uint64_t size, int32_t owner);
void sv_heap_free(struct sv_fabric *f, uint64_t off);

int sv_host_index(struct sv_fabric *f, const char *name);
int sv_device_index(struct sv_fabric *f, uint32_t host, const char *name);
/* Parse "host:dev[:port]" (port defaults to 1 when `port` is non-NULL). */
int sv_parse_target(struct sv_fabric *f, const char *spec, int *dev, int *port);

/* Process registry: a live process gets a slot; dead ones are reaped. */
int sv_proc_register(struct sv_fabric *f, uint32_t host);
void sv_proc_unregister(struct sv_fabric *f, int proc);
int sv_proc_alive(struct sv_fabric *f, int proc);
void sv_reap_dead(struct sv_fabric *f);
void sv_proc_wake(struct sv_fabric *f, int proc);
void sv_wake_all(struct sv_fabric *f);

/* ---- faults.c: what the tool and tests inject ---- */
/* Port up/down: changes the state, logs PORT_ACTIVE/PORT_ERR, wakes everyone. */
int sv_port_set_state(struct sv_fabric *f, int dev, int port, int up);
void sv_device_post_event(struct sv_fabric *f, int dev, enum ibv_event_type type, uint32_t element);
int sv_device_set_fatal(struct sv_fabric *f, int dev, int fatal);
int sv_qp_inject_fatal(struct sv_fabric *f, uint32_t qpn);
struct sv_qp *sv_qp_by_qpn(struct sv_fabric *f, uint32_t qpn);

/* ---- sysfs.c: a sysfs-like tree per host under run_dir ---- */
/* Create <run_dir>/<host>/sys/class/infiniband/<dev>/... for every device. */
int sv_sysfs_create(struct sv_fabric *f);
/* Rewrite ports/<port>/state and phys_state after a link change. */
int sv_sysfs_update_port(struct sv_fabric *f, int dev, int port);
/* Rewrite a port's counters/ and hw_counters/ files from its shared
 * counters (the engines do, a few times a second). */
int sv_sysfs_write_counters(struct sv_fabric *f, int dev, int port);
/* The sysfs root a process of `host` sees: <run_dir>/<host>/sys */
void sv_sysfs_root(struct sv_fabric *f, uint32_t host, char *out, size_t len);

/* ---- config.c: topology file -> fabric ---- */
/* Fill hosts and devices from a config file; on error, print file:line: why.
 * f->netns set beforehand forces `netns on`; afterwards it is the outcome. */
int sv_config_load(struct sv_fabric *f, const char *path);

/* Helpers shared by the library and the tool. */
uint64_t sv_now_ns(void);
/* IB rate encoding of a port: active_width and active_speed for rate_gbps. */
void sv_rate_to_width_speed(uint32_t rate_gbps, uint8_t *width, uint8_t *speed);

/* Keys and QP numbers encode a table index and a generation, so a stale key
 * never matches a reused slot. */
static inline uint32_t sv_make_key(uint32_t idx, uint32_t gen) { return (gen << 16) | (idx & 0xffff); }
static inline uint32_t sv_key_index(uint32_t key) { return key & 0xffff; }
static inline uint32_t sv_key_gen(uint32_t key) { return key >> 16; }
#define SV_QPN_GEN_MASK 0x3ffu /* 10 bits of generation above the 14 of the slot: a 24-bit QP number */
static inline uint32_t sv_make_qpn(uint32_t idx, uint32_t gen) {
  return ((gen & SV_QPN_GEN_MASK) << 14) | (idx & 0x3fff);
}
static inline uint32_t sv_qpn_index(uint32_t qpn) { return qpn & 0x3fff; }
static inline uint32_t sv_qpn_gen(uint32_t qpn) { return (qpn >> 14) & SV_QPN_GEN_MASK; }

#endif
