/* Sequence numbers, CTS slots, chunking and work-request ids. */
#include <criterion/criterion.h>
#include <string.h>

#include "fifo.h"

static void put(struct lp_cts *slot, int n, uint64_t seq, const int *tags) {
  for (int i = 0; i < n; i++) {
    memset(&slot[i], 0, sizeof(slot[i]));
    slot[i].addr = 0x1000u * (unsigned)(i + 1);
    slot[i].size = 100;
    slot[i].tag = tags[i];
    slot[i].idx = (uint16_t)i;
    slot[i].nreqs = (uint16_t)n;
    slot[i].seq = seq;
  }
}

Test(fifo, cts_ready_only_for_its_seq) {
  struct lp_cts slot[LP_MAX_RECVS];
  memset(slot, 0, sizeof(slot));
  int n = 0, tags[3] = {1, 2, 3};
  cr_expect_eq(lp_cts_ready(slot, 1, &n), 0, "an empty slot is ready");
  put(slot, 3, 5, tags);
  cr_expect_eq(lp_cts_ready(slot, 4, &n), 0);
  cr_expect_eq(lp_cts_ready(slot, 5 + LP_FIFO_DEPTH, &n), 0, "an old entry counts for a later lap");
  cr_expect_eq(lp_cts_ready(slot, 5, &n), 1);
  cr_expect_eq(n, 3);
}

Test(fifo, cts_partially_written) {
  struct lp_cts slot[LP_MAX_RECVS];
  int n = 0, tags[4] = {1, 2, 3, 4};
  put(slot, 4, 9, tags);
  slot[3].seq = 8; /* last entry not yet written */
  cr_expect_eq(lp_cts_ready(slot, 9, &n), 0);
}

/* An entry read while it lands may look corrupt for a moment: the
 * sender waits for it, and fails only when it stays so. */
Test(fifo, cts_torn_waits_then_fails) {
  struct lp_cts slot[LP_MAX_RECVS];
  int n = 0, tags[2] = {1, 2};
  uint64_t torn = 0;
  put(slot, 2, 9, tags);
  slot[1].idx = 0; /* seq landed, idx not yet */
  cr_expect_eq(lp_cts_look(slot, 9, &n, &torn), 0, "a torn entry failed the connection at once");
  cr_expect_neq(torn, 0, "when it was first seen torn is kept");
  uint64_t first = torn;
  cr_expect_eq(lp_cts_look(slot, 9, &n, &torn), 0);
  cr_expect_eq(torn, first, "the wait counts from the first look");
  slot[1].idx = 1; /* landed */
  cr_expect_eq(lp_cts_look(slot, 9, &n, &torn), 1);
  cr_expect_eq(n, 2);
  cr_expect_eq(torn, 0, "a whole entry ends the wait");
  slot[1].idx = 0;
  cr_expect_eq(lp_cts_look(slot, 9, &n, &torn), 0);
  torn -= LP_CTS_TORN_NS; /* as if LP_CTS_TORN_NS had passed */
  cr_expect_eq(lp_cts_look(slot, 9, &n, &torn), -1, "an entry that stays corrupt was waited on for ever");
}

Test(fifo, cts_corrupt) {
  struct lp_cts slot[LP_MAX_RECVS];
  int n = 0, tags[2] = {1, 2};
  put(slot, 2, 3, tags);
  slot[0].nreqs = 9;
  cr_expect_eq(lp_cts_ready(slot, 3, &n), -1);
  put(slot, 2, 3, tags);
  slot[0].nreqs = 0;
  cr_expect_eq(lp_cts_ready(slot, 3, &n), -1);
  put(slot, 2, 3, tags);
  slot[1].idx = 0;
  cr_expect_eq(lp_cts_ready(slot, 3, &n), -1);
}

Test(fifo, tag_matching) {
  struct lp_cts slot[LP_MAX_RECVS];
  int tags[4] = {7, 8, 7, 9};
  put(slot, 4, 1, tags);
  cr_expect_eq(lp_cts_match(slot, 4, 7, 0), 0);
  cr_expect_eq(lp_cts_match(slot, 4, 7, 1u << 0), 2);
  cr_expect_eq(lp_cts_match(slot, 4, 7, (1u << 0) | (1u << 2)), -1);
  cr_expect_eq(lp_cts_match(slot, 4, 9, 0), 3);
  cr_expect_eq(lp_cts_match(slot, 4, 42, 0), -1);
}

Test(fifo, imm_roundtrip_and_wrap) {
  uint64_t bases[] = {1, 1000, 0xfffffff0ull, 0x100000000ull, 0x1fffffffeull, 0xffffffffffff0000ull};
  for (size_t b = 0; b < sizeof(bases) / sizeof(bases[0]); b++) {
    for (uint64_t d = 0; d < 2 * LP_FIFO_DEPTH; d++) {
      uint64_t seq = bases[b] + d;
      cr_expect_eq(lp_seq_from_imm(lp_imm_of(seq), bases[b]), seq, "seq 0x%llx base 0x%llx", (unsigned long long)seq,
                   (unsigned long long)bases[b]);
    }
  }
  cr_expect_eq(lp_fifo_slot(LP_FIFO_DEPTH), 0);
  cr_expect_eq(lp_fifo_slot(0x100000001ull), 1);
  /* the slot of a seq equals the slot of its immediate (depth divides 2^32) */
  cr_expect_eq(lp_fifo_slot(0x123456789ull), (int)(lp_imm_of(0x123456789ull) % LP_FIFO_DEPTH));
}

Test(fifo, imm_compact_roundtrip_and_wrap) {
  /* bases around the 7-bit and 31-bit wraps; every message in flight */
  uint64_t bases[] = {1, 120, 0x7ffffff0ull, 0x80000000ull, 0xfffffff0ull, 0xffffffffffffff00ull};
  size_t sizes[] = {0, 1, 8, 4096, LP_COMPACT_MAX_SIZE};
  for (size_t b = 0; b < sizeof(bases) / sizeof(bases[0]); b++) {
    for (uint64_t d = 0; d < LP_FIFO_DEPTH; d++) {
      uint64_t seq = bases[b] + d;
      for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
        uint32_t imm = lp_imm_compact(seq, sizes[z]);
        cr_expect(lp_imm_is_compact(imm));
        cr_expect_eq(lp_imm_size(imm), (uint32_t)sizes[z]);
        cr_expect_eq(lp_seq_from_imm(imm, bases[b]), seq, "seq 0x%llx base 0x%llx size %zu", (unsigned long long)seq,
                     (unsigned long long)bases[b], sizes[z]);
      }
      /* the record form never looks compact, even when seq has bit 31 set */
      cr_expect(!lp_imm_is_compact(lp_imm_of(seq)));
      cr_expect_eq(lp_seq_from_imm(lp_imm_of(seq), bases[b]), seq);
    }
  }
}

Test(fifo, chunks_cover_exactly) {
  size_t sizes[] = {0, 1, 127, 128, 129, 1000, 4096, 65537, 1 << 20, (1 << 20) + 3};
  for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
    for (int nqps = 1; nqps <= LP_MAX_QPS; nqps++) {
      size_t total = 0, expect_off = 0;
      for (int q = 0; q < nqps; q++) {
        size_t off, len;
        lp_qp_chunk(sizes[s], nqps, q, &off, &len);
        if (len == 0) continue;
        cr_expect_eq(off, expect_off, "size %zu nqps %d q %d: gap or overlap", sizes[s], nqps, q);
        cr_expect_eq(off % 128, 0u, "chunk not 128-byte aligned");
        expect_off = off + len;
        total += len;
      }
      cr_expect_eq(total, sizes[s], "size %zu over %d QPs: %zu bytes covered", sizes[s], nqps, total);
    }
  }
}

Test(fifo, wrid_fields) {
  uint64_t id = lp_wrid(LP_WR_FINAL, 13, 511, 0x1234567890abcdefull);
  cr_expect_eq(lp_wrid_kind(id), LP_WR_FINAL);
  cr_expect_eq(lp_wrid_qp(id), 13);
  cr_expect_eq(lp_wrid_credits(id), 511u);
  cr_expect_eq(lp_wrid_seq(id), 0x90abcdefu);
  cr_expect_neq(lp_wrid(LP_WR_DATA, 0, 1, 0), 0u, "a signaled wr_id must never be 0");
}

/* A clear-to-send of two sub-receives placed out of order over the slot's
 * previous one, of one: its second entry and the first one's sequence
 * number have landed, the first one's count not yet.  Taken as whole, the
 * message went out as one sub-receive and the receiver failed the
 * connection for a completion that did not fit. */
Test(fifo, cts_whose_count_is_the_previous_laps_is_not_ready) {
  struct lp_cts slot[LP_MAX_RECVS];
  memset(slot, 0, sizeof(slot));
  int n = 0, tags[2] = {1, 2};
  put(slot, 2, 33, tags);
  slot[0].nreqs = 1; /* entry 0: its seq landed, its count still message 1's */
  cr_expect_eq(lp_cts_ready(slot, 33, &n), 0, "took a 2-receive clear-to-send as one of %d", n);
  slot[0].nreqs = 2; /* the rest lands */
  cr_expect_eq(lp_cts_ready(slot, 33, &n), 1);
  cr_expect_eq(n, 2);
}
