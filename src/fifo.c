/* CTS slot inspection and chunking. */
#include "fifo.h"

#include "clock.h"

int lp_cts_ready(const struct lp_cts *slot, uint64_t seq, int *nreqs) {
  /* The NIC writes the entries while we look: read seq first (acquire), and
   * only then the rest of the entry. */
  if (__atomic_load_n(&slot[0].seq, __ATOMIC_ACQUIRE) != seq) return 0;
  int n = slot[0].nreqs;
  if (n < 1 || n > LP_MAX_RECVS) return -1;
  for (int i = 0; i < n; i++) {
    if (__atomic_load_n(&slot[i].seq, __ATOMIC_ACQUIRE) != seq) return 0;
    if (slot[i].idx != i || slot[i].nreqs != n) return -1;
  }
  /* An entry past the count that already holds this message: the count is
   * the slot's previous message's, read where the write has placed its
   * later entries before the first one's start (a fabric may place a write
   * out of address order): not whole yet.  Its entries past the count are
   * never written, so theirs are an older lap's. */
  if (n < LP_MAX_RECVS && __atomic_load_n(&slot[n].seq, __ATOMIC_ACQUIRE) == seq) return 0;
  *nreqs = n;
  return 1;
}

int lp_cts_look(const struct lp_cts *slot, uint64_t seq, int *nreqs, uint64_t *torn_ns) {
  int ready = lp_cts_ready(slot, seq, nreqs);
  if (ready >= 0) {
    if (ready) *torn_ns = 0;
    return ready;
  }
  uint64_t now = lp_now_ns();
  if (*torn_ns == 0) *torn_ns = now;
  return now - *torn_ns < LP_CTS_TORN_NS ? 0 : -1;
}

int lp_cts_match(const struct lp_cts *slot, int nreqs, int tag, unsigned taken) {
  for (int i = 0; i < nreqs; i++) {
    if (taken & (1u << i)) continue;
    if (slot[i].tag == tag) return i;
  }
  return -1;
}

#define LP_CHUNK_ALIGN 128

void lp_qp_chunk(size_t size, int nqps, int q, size_t *off, size_t *len) {
  size_t per = (size + (size_t)nqps - 1) / (size_t)nqps;
  per = (per + LP_CHUNK_ALIGN - 1) / LP_CHUNK_ALIGN * LP_CHUNK_ALIGN;
  size_t start = per * (size_t)q;
  if (start >= size) {
    *off = size;
    *len = 0;
    return;
  }
  *off = start;
  *len = size - start < per ? size - start : per;
}
