/* Validation of the failover control messages: nothing a peer (or a
 * stranger) sends is trusted before it has been checked here. */
#include "fo_wire.h"

#include <stdio.h>
#include <string.h>

const char *lp_fo_reason_str(int reason) {
  static const char *names[LP_FO_REASON_MAX] = {[LP_FO_PORT_DOWN] = "port_down",
                                                [LP_FO_PEER_NOTICE] = "peer_notice",
                                                [LP_FO_COMPLETION_ERR] = "completion_error",
                                                [LP_FO_STALL] = "stall",
                                                [LP_FO_DEVICE_FATAL] = "device_fatal",
                                                [LP_FO_QP_FATAL] = "qp_fatal",
                                                [LP_FO_FAILBACK] = "failback",
                                                [LP_FO_DEGRADED] = "degraded"};
  return reason > 0 && reason < LP_FO_REASON_MAX ? names[reason] : "unknown";
}

static int bad(char *why, size_t whylen, const char *fmt, const char *what, unsigned long long v) {
  snprintf(why, whylen, fmt, what, v);
  return -1;
}

int lp_fo_msg_check(const void *buf, size_t len, uint64_t conn_id, int nqps, char *why, size_t whylen) {
  const struct lp_msg_hdr *h = buf;
  if (len < sizeof(*h)) return bad(why, whylen, "%s of %llu bytes", "truncated message", len);
  if (h->magic != LP_MSG_MAGIC) return bad(why, whylen, "%s 0x%llx", "bad magic", h->magic);
  if (h->version != LP_PROTO_VERSION) return bad(why, whylen, "%s %llu", "unsupported protocol version", h->version);
  if (h->length != len) return bad(why, whylen, "%s %llu", "length field disagrees with the message:", h->length);
  size_t want;
  switch (h->type) {
  case LP_MSG_FO_NOTICE: want = sizeof(struct lp_fo_notice); break;
  case LP_MSG_FO_REQ: want = sizeof(struct lp_fo_req); break;
  case LP_MSG_FO_NACK: want = sizeof(struct lp_fo_nack); break;
  case LP_MSG_FO_READY: want = sizeof(struct lp_fo_ready); break;
  case LP_MSG_FO_SB_OFFER: want = sizeof(struct lp_fo_sb_offer); break;
  case LP_MSG_FO_SB_ANSWER: want = sizeof(struct lp_fo_sb_answer); break;
  case LP_MSG_FO_ACK:
  case LP_MSG_FO_MOVED: {
    if (len < offsetof(struct lp_fo_ack, pending)) return bad(why, whylen, "%s of %llu bytes", "truncated ack", len);
    const struct lp_fo_ack *a = buf;
    if (a->npending > LP_FIFO_DEPTH) return bad(why, whylen, "%s %llu", "ack lists too many messages:", a->npending);
    want = lp_fo_ack_len(a->npending);
    break;
  }
  default: return bad(why, whylen, "%s %llu", "unknown control message type", h->type);
  }
  if (len != want) return bad(why, whylen, "%s (%llu bytes)", "control message has the wrong size", len);
  /* conn_id sits at the same place in every control message. */
  uint64_t id;
  memcpy(&id, (const char *)buf + sizeof(*h), sizeof(id));
  if (id != conn_id) return bad(why, whylen, "%s 0x%llx", "control message for another connection", id);
  const struct lp_link_info *l = NULL; /* the link the message describes, when it counts */
  if (h->type == LP_MSG_FO_REQ) l = &((const struct lp_fo_req *)buf)->link;
  int ack = h->type == LP_MSG_FO_ACK || h->type == LP_MSG_FO_MOVED; /* the same layout */
  if (ack && !((const struct lp_fo_ack *)buf)->refused) l = &((const struct lp_fo_ack *)buf)->link;
  if (h->type == LP_MSG_FO_SB_OFFER) l = &((const struct lp_fo_sb_offer *)buf)->link;
  if (h->type == LP_MSG_FO_SB_ANSWER && ((const struct lp_fo_sb_answer *)buf)->ok)
    l = &((const struct lp_fo_sb_answer *)buf)->link;
  if (l != NULL && lp_link_info_check(l, nqps, why, whylen) != 0) return -1;
  if (ack && ((const struct lp_fo_ack *)buf)->refused > (h->type == LP_MSG_FO_ACK))
    return bad(why, whylen, "%s %llu", "ack with refused =", ((const struct lp_fo_ack *)buf)->refused);
  if (h->type == LP_MSG_FO_MOVED && ((const struct lp_fo_ack *)buf)->standby == 0)
    return bad(why, whylen, "%s %llu", "a move onto the standby that names no standby: id", 0);
  if (ack && ((const struct lp_fo_ack *)buf)->primary_failed > 1)
    return bad(why, whylen, "%s %llu", "ack with a flag that is neither 0 nor 1, primary_failed =",
               ((const struct lp_fo_ack *)buf)->primary_failed);
  if (h->type == LP_MSG_FO_SB_ANSWER && ((const struct lp_fo_sb_answer *)buf)->ok > 1)
    return bad(why, whylen, "%s %llu",
               "standby answer with a flag that is neither 0 nor 1, ok =", ((const struct lp_fo_sb_answer *)buf)->ok);
  uint32_t reason = h->type == LP_MSG_FO_NOTICE ? ((const struct lp_fo_notice *)buf)->reason
                    : h->type == LP_MSG_FO_REQ  ? ((const struct lp_fo_req *)buf)->reason
                                                : 1;
  if (reason < 1 || reason >= LP_FO_REASON_MAX)
    return bad(why, whylen, "%s %llu", "move with an unknown reason", reason);
  if (h->type == LP_MSG_FO_NACK && ((const struct lp_fo_nack *)buf)->cause > LP_NACK_FAILED)
    return bad(why, whylen, "%s %llu", "refusal with cause", ((const struct lp_fo_nack *)buf)->cause);
  if (h->type == LP_MSG_FO_SB_OFFER && ((const struct lp_fo_sb_offer *)buf)->id == 0)
    return bad(why, whylen, "%s %llu", "standby offer with id", 0);
  if (ack) {
    const struct lp_fo_ack *a = buf;
    for (uint32_t i = 0; i < a->npending; i++) {
      const struct lp_fo_pending *p = &a->pending[i];
      if (p->seq != a->resume_seq + i) return bad(why, whylen, "%s %llu", "ack lists messages out of order at", p->seq);
      if (p->nreqs < 1 || p->nreqs > LP_MAX_RECVS)
        return bad(why, whylen, "%s %llu", "ack lists a message with sub-receive count", p->nreqs);
      for (uint32_t k = 0; k < p->nreqs; k++)
        if (p->cts[k].seq != p->seq || p->cts[k].idx != k || p->cts[k].nreqs != p->nreqs)
          return bad(why, whylen, "%s %llu", "inconsistent clear-to-send entry for message", p->seq);
    }
  }
  return h->type;
}

int lp_fo_take_primary_word(const struct lp_fo_ack *a, int *peer_primary_ok) {
  if (a->refused) return 0; /* a refusal says nothing else */
  int ok = !a->primary_failed, became = ok && !*peer_primary_ok;
  *peer_primary_ok = ok;
  return became;
}
