/*
 * linkpass-perf: collective schedules, inputs and checks.
 */
#include "coll.h"

#include <string.h>

#include "pattern.h"

static int mod(int a, int n) { return ((a % n) + n) % n; }

int coll_nchans(enum perf_op op, int nranks, int channels) {
  return op == PERF_ALLTOALL ? channels * nranks : channels;
}

int coll_send_peer(enum perf_op op, int nranks, int rank, int channels, int i) {
  (void)channels;
  return op == PERF_ALLTOALL ? i % nranks : mod(rank + 1, nranks);
}

int coll_recv_peer(enum perf_op op, int nranks, int rank, int channels, int i) {
  (void)channels;
  return op == PERF_ALLTOALL ? i % nranks : mod(rank - 1, nranks);
}

/* Ring primitives, named after NCCL's. */
enum prim { SEND, RECV, RECV_REDUCE_SEND, RECV_REDUCE_COPY_SEND, RECV_COPY_SEND, RECV_REDUCE_COPY };

/* One primitive over `nelem` elements, cut into messages of one slot. */
static int add_prim(const struct coll_plan *p, struct xchan *ch, enum prim pr, const char *in, char *out,
                    size_t nelem) {
  size_t es = perf_dtype_size(p->dtype);
  size_t per = p->step / es;
  for (size_t k = 0; k < nelem; k += per) {
    size_t n = nelem - k < per ? nelem - k : per;
    size_t b = n * es, off = k * es;
    const char *i = in ? in + off : NULL;
    char *o = out ? out + off : NULL;
    int32_t r = (int32_t)ch->nrecvs, s = (int32_t)ch->nsends;
    int err = 0;
    switch (pr) {
    case SEND: err = xchan_add_send(ch, b, i, -1); break;
    case RECV: err = xchan_add_recv(ch, b, NULL, o, -1); break;
    case RECV_REDUCE_COPY: err = xchan_add_recv(ch, b, i, o, -1); break;
    case RECV_REDUCE_SEND:
      err = xchan_add_recv(ch, b, i, NULL, s) || xchan_add_send(ch, b, NULL, r);
      break;
    case RECV_REDUCE_COPY_SEND:
      err = xchan_add_recv(ch, b, i, o, s) || xchan_add_send(ch, b, NULL, r);
      break;
    case RECV_COPY_SEND:
      err = xchan_add_recv(ch, b, NULL, o, s) || xchan_add_send(ch, b, NULL, r);
      break;
    }
    if (err) return -1;
  }
  return 0;
}

static size_t div_up(size_t a, size_t b) { return (a + b - 1) / b; }
static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* Elements per chunk for this loop: NCCL's realChunkSize, kept a multiple of
 * 16 bytes so that every block boundary is aligned. */
static size_t real_chunk(const struct coll_plan *p, size_t remaining, size_t parts) {
  size_t es = perf_dtype_size(p->dtype);
  size_t align = es < 16 ? 16 / es : 1;
  size_t chunk = p->chunk_bytes / es;
  size_t c = min_sz(chunk, div_up(remaining, parts));
  c = div_up(c, align) * align;
  return c ? c : align;
}

/* Elements of a block starting at `off` in a buffer of `total`. */
static size_t clamp_elems(size_t off, size_t total, size_t chunk) { return off >= total ? 0 : min_sz(chunk, total - off); }

static int build_all_reduce(const struct coll_plan *p, struct xchan *ch, int c) {
  size_t es = perf_dtype_size(p->dtype), count = p->counts.paramcount;
  int n = p->nranks, x = p->rank, C = p->channels;
  for (size_t grid = 0; grid < count;) {
    size_t rc = real_chunk(p, count - grid, (size_t)C * (size_t)n);
    size_t base = grid + (size_t)c * (size_t)n * rc;
#define BLK(b) (base + (size_t)(b) * rc)
#define ARGS(b) p->sendbuf + BLK(b) * es, p->recvbuf + BLK(b) * es, clamp_elems(BLK(b), count, rc)
    if (add_prim(p, ch, SEND, ARGS(mod(x - 1, n)))) return -1;
    for (int j = 2; j < n; j++)
      if (add_prim(p, ch, RECV_REDUCE_SEND, ARGS(mod(x - j, n)))) return -1;
    if (add_prim(p, ch, RECV_REDUCE_COPY_SEND, ARGS(x))) return -1;
    for (int j = 1; j < n - 1; j++)
      if (add_prim(p, ch, RECV_COPY_SEND, ARGS(mod(x - j, n)))) return -1;
    if (add_prim(p, ch, RECV, ARGS(mod(x + 1, n)))) return -1;
#undef ARGS
#undef BLK
    grid += (size_t)C * (size_t)n * rc;
  }
  return 0;
}

static int build_all_gather(const struct coll_plan *p, struct xchan *ch, int c) {
  size_t es = perf_dtype_size(p->dtype), m = p->counts.sendcount;
  int n = p->nranks, x = p->rank, C = p->channels;
  for (size_t grid = 0; grid < m;) {
    size_t rc = real_chunk(p, m - grid, (size_t)C);
    size_t off = grid + (size_t)c * rc, ne = clamp_elems(off, m, rc);
#define OUT(b) (p->recvbuf + ((size_t)(b) * m + off) * es)
    if (add_prim(p, ch, SEND, p->sendbuf + off * es, NULL, ne)) return -1;
    for (int j = 1; j < n - 1; j++)
      if (add_prim(p, ch, RECV_COPY_SEND, NULL, OUT(mod(x - j, n)), ne)) return -1;
    if (add_prim(p, ch, RECV, NULL, OUT(mod(x + 1, n)), ne)) return -1;
#undef OUT
    grid += (size_t)C * rc;
  }
  return 0;
}

static int build_reduce_scatter(const struct coll_plan *p, struct xchan *ch, int c) {
  size_t es = perf_dtype_size(p->dtype), m = p->counts.recvcount;
  int n = p->nranks, x = p->rank, C = p->channels;
  for (size_t grid = 0; grid < m;) {
    size_t rc = real_chunk(p, m - grid, (size_t)C);
    size_t off = grid + (size_t)c * rc, ne = clamp_elems(off, m, rc);
#define IN(b) (p->sendbuf + ((size_t)(b) * m + off) * es)
    if (add_prim(p, ch, SEND, IN(mod(x - 1, n)), NULL, ne)) return -1;
    for (int j = 2; j < n; j++)
      if (add_prim(p, ch, RECV_REDUCE_SEND, IN(mod(x - j, n)), NULL, ne)) return -1;
    if (add_prim(p, ch, RECV_REDUCE_COPY, IN(x), p->recvbuf + off * es, ne)) return -1;
#undef IN
    grid += (size_t)C * rc;
  }
  return 0;
}

/* Point-to-point: channel c carries its share [m*c/C, m*(c+1)/C) of a block,
 * kept 16-byte aligned. */
static void p2p_part(const struct coll_plan *p, size_t m, int c, size_t *lo, size_t *hi) {
  size_t es = perf_dtype_size(p->dtype);
  size_t align = es < 16 ? 16 / es : 1;
  size_t C = (size_t)p->channels;
  *lo = (m * (size_t)c / C) / align * align;
  *hi = c + 1 == p->channels ? m : (m * (size_t)(c + 1) / C) / align * align;
}

static int build_p2p(const struct coll_plan *p, struct xchan *ch, const char *src, char *dst, size_t m, int c) {
  size_t es = perf_dtype_size(p->dtype), lo, hi;
  p2p_part(p, m, c, &lo, &hi);
  if (add_prim(p, ch, SEND, src + lo * es, NULL, hi - lo)) return -1;
  if (add_prim(p, ch, RECV, NULL, dst + lo * es, hi - lo)) return -1;
  return 0;
}

int coll_build(const struct coll_plan *p, struct xchan *chans) {
  int nch = coll_nchans(p->op, p->nranks, p->channels);
  size_t total = p->counts.sendcount + p->counts.recvcount;
  size_t es = perf_dtype_size(p->dtype);
  for (int i = 0; i < nch; i++) xchan_clear(&chans[i]);
  for (int c = 0; c < p->channels; c++) {
    int err = 0;
    switch (p->op) {
    case PERF_ALL_REDUCE: err = build_all_reduce(p, &chans[c], c); break;
    case PERF_ALL_GATHER: err = build_all_gather(p, &chans[c], c); break;
    case PERF_REDUCE_SCATTER: err = build_reduce_scatter(p, &chans[c], c); break;
    case PERF_SENDRECV: err = build_p2p(p, &chans[c], p->sendbuf, p->recvbuf, p->counts.sendcount, c); break;
    case PERF_ALLTOALL: {
      size_t m = p->counts.paramcount;
      for (int peer = 0; peer < p->nranks && !err; peer++) {
        if (peer == p->rank) continue;
        err = build_p2p(p, &chans[c * p->nranks + peer], p->sendbuf + (size_t)peer * m * es,
                        p->recvbuf + (size_t)peer * m * es, m, c);
      }
      break;
    }
    default: return -1;
    }
    if (err) return -1;
  }
  /* Nothing to move: one empty message per connection and direction still
   * goes through the plugin, so zero-byte messages are exercised. */
  if (total == 0) {
    for (int i = 0; i < nch; i++) {
      if (p->op == PERF_ALLTOALL && i % p->nranks == p->rank) continue;
      if (xchan_add_send(&chans[i], 0, p->sendbuf, -1) || xchan_add_recv(&chans[i], 0, NULL, p->recvbuf, -1)) return -1;
    }
  }
  return 0;
}

void coll_local(const struct coll_plan *p) {
  size_t es = perf_dtype_size(p->dtype);
  if (p->op == PERF_ALL_GATHER) {
    size_t m = p->counts.sendcount;
    memcpy(p->recvbuf + (size_t)p->rank * m * es, p->sendbuf, m * es);
  } else if (p->op == PERF_ALLTOALL) {
    size_t m = p->counts.paramcount, off = (size_t)p->rank * m * es;
    memcpy(p->recvbuf + off, p->sendbuf + off, m * es);
  }
}

void coll_fill(const struct coll_plan *p, uint64_t seed) {
  pattern_fill(p->sendbuf, p->dtype, p->counts.sendcount, seed, p->rank, 0);
}

size_t coll_check(const struct coll_plan *p, uint64_t seed, FILE *log, const char *who) {
  size_t es = perf_dtype_size(p->dtype), wrong = 0;
  int n = p->nranks, x = p->rank, budget = 5;
  char what[160];
  switch (p->op) {
  case PERF_SENDRECV:
    snprintf(what, sizeof(what), "%s: data from rank %d", who, mod(x - 1, n));
    wrong = pattern_check(p->recvbuf, p->dtype, p->redop, p->counts.recvcount, seed, mod(x - 1, n), 1, 0, log, what,
                          &budget);
    break;
  case PERF_ALL_REDUCE:
    snprintf(what, sizeof(what), "%s: reduced data", who);
    wrong = pattern_check(p->recvbuf, p->dtype, p->redop, p->counts.recvcount, seed, 0, n, 0, log, what, &budget);
    break;
  case PERF_REDUCE_SCATTER:
    snprintf(what, sizeof(what), "%s: reduced block %d", who, x);
    wrong = pattern_check(p->recvbuf, p->dtype, p->redop, p->counts.recvcount, seed, 0, n,
                          (size_t)x * p->counts.recvcount, log, what, &budget);
    break;
  case PERF_ALL_GATHER:
  case PERF_ALLTOALL: {
    /* block b holds rank b's data: all of it (all_gather) or the part of it
     * meant for this rank (alltoall) */
    size_t m = p->op == PERF_ALL_GATHER ? p->counts.sendcount : p->counts.paramcount;
    size_t first = p->op == PERF_ALL_GATHER ? 0 : (size_t)x * m;
    for (int b = 0; b < n; b++) {
      snprintf(what, sizeof(what), "%s: block from rank %d", who, b);
      wrong += pattern_check(p->recvbuf + (size_t)b * m * es, p->dtype, p->redop, m, seed, b, 1, first, log, what,
                             &budget);
    }
    break;
  }
  default: break;
  }
  return wrong;
}
