/* Validation of everything received from a peer. */
#include "wire.h"

#include <infiniband/verbs.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

_Static_assert(sizeof(struct lp_handle) <= NCCL_NET_HANDLE_MAXSIZE, "handle too large for NCCL");
_Static_assert(sizeof(struct lp_cts) == 64, "CTS entry must be 64 bytes");
_Static_assert(sizeof(struct lp_record) == 128, "completion record must be 128 bytes");
_Static_assert(offsetof(struct lp_cts, seq) == 56, "seq must be the last word of a CTS entry");

int lp_handle_check(const void *handle, char *why, size_t whylen) {
  struct lp_handle h;
  memcpy(&h, handle, sizeof(h));
  if (h.magic != LP_HANDLE_MAGIC) {
    snprintf(why, whylen, "not a linkpass handle (magic 0x%016llx)", (unsigned long long)h.magic);
    return -1;
  }
  if (h.version != LP_PROTO_VERSION) {
    snprintf(why, whylen, "protocol version %u, this library speaks %u", h.version, LP_PROTO_VERSION);
    return -1;
  }
  if (h.family != AF_INET && h.family != AF_INET6) {
    snprintf(why, whylen, "unknown address family %u", h.family);
    return -1;
  }
  if (h.port == 0) {
    snprintf(why, whylen, "port 0");
    return -1;
  }
  if (h.listen_id == 0) {
    snprintf(why, whylen, "listen id 0");
    return -1;
  }
  if (h.alt_family != 0 && ((h.alt_family != AF_INET && h.alt_family != AF_INET6) || h.alt_port == 0)) {
    snprintf(why, whylen, "second address of family %u, port %u", h.alt_family, h.alt_port);
    return -1;
  }
  return 0;
}

void lp_msg_hdr_init(struct lp_msg_hdr *h, enum lp_msg_type type, size_t len) {
  memset(h, 0, sizeof(*h));
  h->magic = LP_MSG_MAGIC;
  h->version = LP_PROTO_VERSION;
  h->type = (uint16_t)type;
  h->length = (uint32_t)len;
}

int lp_msg_hdr_check(const struct lp_msg_hdr *h, enum lp_msg_type type, size_t len, char *why, size_t whylen) {
  if (h->magic != LP_MSG_MAGIC) {
    snprintf(why, whylen, "bad magic 0x%08x", h->magic);
    return -1;
  }
  if (h->version != LP_PROTO_VERSION) {
    snprintf(why, whylen, "protocol version %u, expected %u", h->version, LP_PROTO_VERSION);
    return -1;
  }
  if (h->type != type) {
    snprintf(why, whylen, "message type %u, expected %u", h->type, (unsigned)type);
    return -1;
  }
  if (h->length != len) {
    snprintf(why, whylen, "message length %u, expected %zu", h->length, len);
    return -1;
  }
  return 0;
}

static int terminated(const char *s, size_t len) { return memchr(s, '\0', len) != NULL; }

int lp_link_info_check(const struct lp_link_info *l, int nqps_expect, char *why, size_t whylen) {
  if (l->nqps < 1 || l->nqps > LP_MAX_QPS) {
    snprintf(why, whylen, "%u queue pairs (accepted: 1..%d)", l->nqps, LP_MAX_QPS);
    return -1;
  }
  if (nqps_expect && l->nqps != nqps_expect) {
    snprintf(why, whylen, "%u queue pairs, expected %d", l->nqps, nqps_expect);
    return -1;
  }
  if (l->link_layer != IBV_LINK_LAYER_INFINIBAND && l->link_layer != IBV_LINK_LAYER_ETHERNET) {
    snprintf(why, whylen, "link layer %u", l->link_layer);
    return -1;
  }
  if (l->mtu < IBV_MTU_256 || l->mtu > IBV_MTU_4096) {
    snprintf(why, whylen, "MTU code %u", l->mtu);
    return -1;
  }
  if (l->port == 0) {
    snprintf(why, whylen, "port 0");
    return -1;
  }
  if (l->link_layer == IBV_LINK_LAYER_INFINIBAND && l->lid == 0) {
    snprintf(why, whylen, "InfiniBand port without a LID");
    return -1;
  }
  for (int i = 0; i < l->nqps; i++) {
    if (l->qpn[i] == 0 || l->qpn[i] > 0xffffff) {
      snprintf(why, whylen, "invalid QP number 0x%x", l->qpn[i]);
      return -1;
    }
  }
  if (l->ctrl_addr == 0 || l->ctrl_rkey == 0) {
    snprintf(why, whylen, "no control buffer");
    return -1;
  }
  if (!terminated(l->dev_name, sizeof(l->dev_name))) {
    snprintf(why, whylen, "unterminated device name");
    return -1;
  }
  if (l->ece_supported > 1) {
    snprintf(why, whylen, "ECE flag %u", l->ece_supported);
    return -1;
  }
  return 0;
}

int lp_msg_hello_check(const struct lp_msg_hello *m, uint64_t listen_id, char *why, size_t whylen) {
  enum lp_msg_type type = m->hdr.type == LP_MSG_JOIN ? LP_MSG_JOIN : LP_MSG_HELLO;
  if (lp_msg_hdr_check(&m->hdr, type, sizeof(*m), why, whylen) != 0) return -1;
  if (m->listen_id != listen_id) {
    snprintf(why, whylen, "connection meant for another listener (id 0x%llx)", (unsigned long long)m->listen_id);
    return -1;
  }
  if (m->conn_id == 0) {
    snprintf(why, whylen, "connection id 0");
    return -1;
  }
  if (!terminated(m->host, sizeof(m->host))) {
    snprintf(why, whylen, "unterminated host name");
    return -1;
  }
  return type == LP_MSG_JOIN ? 0 : lp_link_info_check(&m->link, 0, why, whylen);
}

int lp_msg_accept_check(const struct lp_msg_accept *m, uint64_t conn_id, int nqps, char *why, size_t whylen) {
  if (lp_msg_hdr_check(&m->hdr, LP_MSG_ACCEPT, sizeof(*m), why, whylen) != 0) return -1;
  if (m->conn_id != conn_id) {
    snprintf(why, whylen, "reply for connection 0x%llx, expected 0x%llx", (unsigned long long)m->conn_id,
             (unsigned long long)conn_id);
    return -1;
  }
  if (!terminated(m->host, sizeof(m->host))) {
    snprintf(why, whylen, "unterminated host name");
    return -1;
  }
  return lp_link_info_check(&m->link, nqps, why, whylen);
}

int lp_msg_ready_check(const struct lp_msg_ready *m, uint64_t conn_id, char *why, size_t whylen) {
  if (lp_msg_hdr_check(&m->hdr, LP_MSG_READY, sizeof(*m), why, whylen) != 0) return -1;
  if (m->conn_id != conn_id) {
    snprintf(why, whylen, "ready for connection 0x%llx, expected 0x%llx", (unsigned long long)m->conn_id,
             (unsigned long long)conn_id);
    return -1;
  }
  if (m->joined > 1) {
    snprintf(why, whylen, "ready with joined = %u", m->joined);
    return -1;
  }
  return 0;
}
