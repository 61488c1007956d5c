/*
 * Sequence numbers, CTS slots and work-request ids: the bookkeeping of the
 * data path that does not need verbs, kept pure so it can be unit-tested.
 *
 * Every message of a connection (one irecv, with up to 8 sub-receives, and
 * the isends matched to it) has a 64-bit sequence number, starting at 1.
 * The receiver's CTS entries carry it in full; the sender's completion
 * record carries it in full; the immediate data of every WRITE_WITH_IMM
 * names it.  Both sides can therefore always name exactly which messages
 * were delivered, which the failover protocol relies on.
 *
 * The immediate has two forms, told apart by bit 31:
 * - record form (bit 31 clear): the low 31 bits of the sequence number; the
 *   completion record written by QP 0 carries the sizes and the full number;
 * - compact form (bit 31 set), for a message of one sub-receive on a
 *   one-QP connection and under 16 MiB, sent as a single WRITE_WITH_IMM of
 *   its payload (as NCCL sends most messages), or with adaptive routing as
 *   plain WRITEs and a zero-length WRITE_WITH_IMM: bits 24-30 the sequence
 *   number modulo 128, bits 0-23 the size.  Fewer than 128 messages are in
 *   flight (LP_FIFO_DEPTH), so the number is still exact.
 */
#ifndef LP_FIFO_H
#define LP_FIFO_H

#include <stddef.h>
#include <stdint.h>

#include "wire.h"

static inline int lp_fifo_slot(uint64_t seq) { return (int)(seq % LP_FIFO_DEPTH); }

#define LP_IMM_COMPACT 0x80000000u
#define LP_COMPACT_MAX_SIZE 0xffffffu
_Static_assert(LP_FIFO_DEPTH < 128, "compact immediates name messages modulo 128");

/* Immediate data of the final writes of message `seq` (record form). */
static inline uint32_t lp_imm_of(uint64_t seq) { return (uint32_t)seq & ~LP_IMM_COMPACT; }
/* Immediate of message `seq` sent whole in one write of `size` bytes
 * (size <= LP_COMPACT_MAX_SIZE). */
static inline uint32_t lp_imm_compact(uint64_t seq, size_t size) {
  return LP_IMM_COMPACT | (uint32_t)(seq & 0x7f) << 24 | ((uint32_t)size & LP_COMPACT_MAX_SIZE);
}
static inline int lp_imm_is_compact(uint32_t imm) { return (imm & LP_IMM_COMPACT) != 0; }
static inline uint32_t lp_imm_size(uint32_t imm) { return imm & LP_COMPACT_MAX_SIZE; }

/* The full sequence number of an immediate, given the oldest message still
 * expected (`base`): messages in flight span fewer than 128 numbers. */
static inline uint64_t lp_seq_from_imm(uint32_t imm, uint64_t base) {
  if (lp_imm_is_compact(imm)) return base + (uint64_t)(((imm >> 24) - (uint32_t)base) & 0x7fu);
  return base + (uint64_t)((imm - (uint32_t)base) & ~LP_IMM_COMPACT);
}

/* Has the CTS for message `seq` fully arrived in `slot` (LP_MAX_RECVS
 * entries)?  1 yes (*nreqs set), 0 not yet, -1 the entry is inconsistent
 * (nreqs out of range, or idx not matching its position). */
int lp_cts_ready(const struct lp_cts *slot, uint64_t seq, int *nreqs);
/* lp_cts_ready for the sender's look at its next slot, which the peer's
 * write may still be landing in: InfiniBand promises no order of placement
 * within a write, only its completion, so an entry whose seq is new may
 * show its other fields old for a moment (seen on simverbs: whole at the
 * next look, 23 us later).  1 ready, 0 not yet, -1 inconsistent for
 * LP_CTS_TORN_NS: the peer's fault.  *torn_ns: when the entry was first
 * seen inconsistent, 0 while it was not; the clock is read only then. */
#define LP_CTS_TORN_NS 100000000ull /* 100 ms */
int lp_cts_look(const struct lp_cts *slot, uint64_t seq, int *nreqs, uint64_t *torn_ns);

/* Find the first sub-receive of a ready CTS with this tag not yet taken
 * (`taken` is a bit mask).  Returns its index or -1. */
int lp_cts_match(const struct lp_cts *slot, int nreqs, int tag, unsigned taken);

/* Part of a `size`-byte buffer that queue pair `q` of `nqps` carries: chunks
 * are 128-byte aligned so that each QP writes whole cache lines. */
void lp_qp_chunk(size_t size, int nqps, int q, size_t *off, size_t *len);

/* Work-request ids: what a completion is about. */
enum lp_wr_kind {
  LP_WR_DATA = 1,  /* sender: payload write (signaled only to return credits) */
  LP_WR_FINAL = 2, /* sender: last write of a message on one QP */
  LP_WR_CTS = 3,   /* receiver: CTS write */
  LP_WR_RECV = 4,  /* receiver: receive consumed by a WRITE_WITH_IMM */
};

static inline uint64_t lp_wrid(enum lp_wr_kind kind, int qp, unsigned credits, uint64_t seq) {
  return (uint64_t)kind | ((uint64_t)(qp & 0xff) << 4) | ((uint64_t)(credits & 0xffff) << 12) |
         ((uint64_t)(uint32_t)seq << 32);
}
static inline enum lp_wr_kind lp_wrid_kind(uint64_t id) { return (enum lp_wr_kind)(id & 0xf); }
static inline int lp_wrid_qp(uint64_t id) { return (int)((id >> 4) & 0xff); }
static inline unsigned lp_wrid_credits(uint64_t id) { return (unsigned)((id >> 12) & 0xffff); }
static inline uint32_t lp_wrid_seq(uint64_t id) { return (uint32_t)(id >> 32); }

#endif
