/*
 * Everything that crosses a process boundary: the listen handle NCCL
 * exchanges for us, the out-of-band setup messages, the clear-to-send (CTS)
 * entries and the completion records written by RDMA.  docs/PROTOCOL.md
 * describes the same layouts; all integers are in the host's native byte
 * order (both ends run the same architecture, as with NCCL's own transport).
 *
 * Every structure received from the network is validated before use; the
 * checks are pure functions so unit tests can feed them garbage.
 */
#ifndef LP_WIRE_H
#define LP_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "linkpass/nccl_net.h"

#define LP_PROTO_VERSION \
  9 /* 9: lp_link_info says whether its end moves (flags, LP_LINK_MOVES); 8: an ACK says when the receiver's primary is not trusted (primary_failed); 7: a receiver moves onto its standby by itself (MOVED); 6: control connections made again (CTL_DROP, CTL_OFFER, CTL_REJOIN); 5: a second control connection (JOIN, numbered control messages); 4: ECE in lp_link_info; 3: standby paths (fo_wire.h); 2: a move ends with READY */
#define LP_HANDLE_MAGIC 0x5353415050b14e4cull /* arbitrary, unlikely in garbage */
#define LP_MSG_MAGIC 0x4d32504cu              /* "LP2M" */

#define LP_MAX_RECVS 8                      /* maxRecvs: sub-receives per irecv */
#define LP_FIFO_DEPTH NCCL_NET_MAX_REQUESTS /* CTS slots per connection */
#define LP_HOST_MAX 64
#define LP_WIRE_DEV_NAME 32

/* ---- the handle (inside NCCL's 128-byte buffer) ------------------------ */
struct lp_handle {
  uint64_t magic;
  uint32_t version;
  uint16_t family; /* AF_INET or AF_INET6 */
  uint16_t port;   /* network byte order */
  uint8_t addr[16];
  uint32_t scope_id;
  int32_t dev;        /* the listener's device, for logs */
  uint64_t listen_id; /* random per listen: strangers on the port are dropped */
  /* Owned by the connecting process, never sent: identifies its connect in
   * progress across calls (NCCL passes the same handle buffer each time).
   * The listener writes 0. */
  uint64_t connect_token;
  /* NCCL_IB_SUBNET_AWARE_ROUTING: the GID of the listener's RoCE device, so
   * that the connector can pick a device on the same subnet; zero otherwise. */
  uint8_t listen_gid[16];
  /* The listener's address on a second interface, for the control
   * channel's second connection (ctlchan.h); alt_family 0: none. */
  uint16_t alt_family;
  uint16_t alt_port; /* network byte order */
  uint32_t alt_scope_id;
  uint8_t alt_addr[16];
  uint8_t reserved[8];
};

/* 0 when the handle can be connected to, else -1 with a reason. */
int lp_handle_check(const void *handle, char *why, size_t whylen);

/* ---- setup messages (TCP) ---------------------------------------------- */
enum lp_msg_type {
  LP_MSG_HELLO = 1,  /* connector -> listener: who I am, my QPs and my CTS FIFO */
  LP_MSG_ACCEPT = 2, /* listener -> connector: my QPs and my completion records */
  LP_MSG_READY = 3,  /* connector -> listener: my QPs are ready to receive */
  LP_MSG_JOIN = 4,   /* connector -> listener, on the second connection: the connection it joins
                        (a struct lp_msg_hello whose link is not used) */
};

struct lp_msg_hdr {
  uint32_t magic;
  uint16_t version;
  uint16_t type;
  uint32_t length; /* whole message, header included */
  uint32_t reserved;
};

/* One side of a connection on one NIC. */
struct lp_link_info {
  uint8_t gid[16];
  uint16_t lid;
  uint8_t link_layer; /* IBV_LINK_LAYER_* */
  uint8_t mtu;        /* enum ibv_mtu */
  uint8_t port;
  uint8_t nqps;
  uint8_t gid_index;
  uint8_t ece_supported; /* 1: ece_vendor/ece_options are this side's ibv_query_ece (NCCL_IB_ECE_ENABLE) */
  uint32_t qpn[LP_MAX_QPS];
  uint64_t ctrl_addr; /* sender: CTS FIFO; receiver: completion records */
  uint32_t ctrl_rkey;
  uint32_t ece_options;
  uint64_t nic_guid;
  char dev_name[LP_WIRE_DEV_NAME];
  uint32_t ece_vendor;
  uint32_t flags; /* LP_LINK_* */
};
/* This end moves the connection when its path fails (LINKPASS_FAILOVER=1,
 * and its control plane started): a move needs both ends, so both must say
 * the same (connect.c, set in HELLO and ACCEPT). */
#define LP_LINK_MOVES 1u

struct lp_msg_hello {
  struct lp_msg_hdr hdr;
  uint64_t listen_id; /* echo of the handle's */
  uint64_t conn_id;   /* chosen by the connector: names the connection in both logs */
  char host[LP_HOST_MAX];
  struct lp_link_info link;
};

struct lp_msg_accept {
  struct lp_msg_hdr hdr;
  uint64_t conn_id;
  char host[LP_HOST_MAX];
  struct lp_link_info link;
};

struct lp_msg_ready {
  struct lp_msg_hdr hdr;
  uint64_t conn_id;
  uint32_t joined; /* 1: the second connection is made and its JOIN sent */
  uint32_t reserved;
};

void lp_msg_hdr_init(struct lp_msg_hdr *h, enum lp_msg_type type, size_t len);
/* Validate a header as soon as it has arrived (garbage is rejected early). */
int lp_msg_hdr_check(const struct lp_msg_hdr *h, enum lp_msg_type type, size_t len, char *why, size_t whylen);
/* Validate a peer's link description; `nqps_expect` 0 accepts any count. */
int lp_link_info_check(const struct lp_link_info *l, int nqps_expect, char *why, size_t whylen);
/* Validate a complete message of each kind (a HELLO or a JOIN for the
 * first). */
int lp_msg_hello_check(const struct lp_msg_hello *m, uint64_t listen_id, char *why, size_t whylen);
int lp_msg_accept_check(const struct lp_msg_accept *m, uint64_t conn_id, int nqps, char *why, size_t whylen);
int lp_msg_ready_check(const struct lp_msg_ready *m, uint64_t conn_id, char *why, size_t whylen);

/* ---- clear-to-send entries (RDMA WRITE from receiver to sender) -------- */
/* One per sub-receive, 64 bytes.  `seq` is last so that an entry whose seq
 * matches has been written completely (NICs write in address order). */
struct lp_cts {
  uint64_t addr; /* receive buffer */
  uint64_t size; /* posted size */
  uint32_t rkey; /* of the buffer, on the receiver's NIC */
  int32_t tag;
  uint16_t idx;   /* position within the irecv */
  uint16_t nreqs; /* n of the irecv */
  uint32_t reserved;
  uint8_t pad[24];
  uint64_t seq; /* message sequence number; 0 never valid */
};

/* Completion record written by the sender's final WRITE_WITH_IMM into the
 * receiver's slot: the sizes actually sent (they may be smaller than posted). */
struct lp_record {
  uint64_t seq;
  uint32_t nreqs;
  uint32_t reserved;
  uint64_t sizes[LP_MAX_RECVS];
  uint8_t pad[48];
};

#endif
