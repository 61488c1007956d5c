/*
 * linkpass-perf: data pattern, reductions and result checks.
 */
#include "pattern.h"

#include <inttypes.h>
#include <string.h>

/* splitmix64's finaliser: cheap, and every input bit changes every output bit,
 * so neighbouring elements, ranks and iterations get unrelated values. */
static inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

uint64_t pattern_seed(uint64_t run_id, uint64_t iter) { return mix64(run_id * 0x9e3779b97f4a7c15ull + iter + 1); }

static inline uint64_t raw_value(uint64_t seed, int rank, size_t idx) {
  return mix64(seed ^ ((uint64_t)(unsigned)rank * 0xd1b54a32d192ed03ull) ^ ((uint64_t)idx * 0x9e3779b97f4a7c15ull));
}

/* Floats get integers below 2^16 (float) or 2^32 (double): 64 ranks sum to
 * under 2^22 / 2^38, exact in both, whatever the order of the additions. */
#define FLOAT_MASK 0xffffull
#define DOUBLE_MASK 0xffffffffull

void pattern_fill(void *buf, enum perf_dtype t, size_t count, uint64_t seed, int rank, size_t first) {
  size_t k;
  switch (t) {
  case PERF_INT8:
  case PERF_UINT8:
    for (k = 0; k < count; k++) ((uint8_t *)buf)[k] = (uint8_t)raw_value(seed, rank, first + k);
    break;
  case PERF_INT32:
  case PERF_UINT32:
    for (k = 0; k < count; k++) ((uint32_t *)buf)[k] = (uint32_t)raw_value(seed, rank, first + k);
    break;
  case PERF_INT64:
  case PERF_UINT64:
    for (k = 0; k < count; k++) ((uint64_t *)buf)[k] = raw_value(seed, rank, first + k);
    break;
  case PERF_FLOAT:
    for (k = 0; k < count; k++) ((float *)buf)[k] = (float)(raw_value(seed, rank, first + k) & FLOAT_MASK);
    break;
  case PERF_DOUBLE:
    for (k = 0; k < count; k++) ((double *)buf)[k] = (double)(raw_value(seed, rank, first + k) & DOUBLE_MASK);
    break;
  default:
    break;
  }
}

/* One reduction loop per type.  Signed integers add through their unsigned
 * twins: wrap-around is then defined and identical on every rank. */
#define REDUCE_INT(T, UT)                                                              \
  do {                                                                                 \
    T *d = dst;                                                                        \
    const T *x = a, *y = b;                                                            \
    for (size_t k = 0; k < count; k++) {                                               \
      T u = x[k], v = y[k];                                                            \
      d[k] = op == PERF_SUM ? (T)(UT)((UT)u + (UT)v) : op == PERF_MIN ? (u < v ? u : v) \
                                                                      : (u > v ? u : v); \
    }                                                                                  \
  } while (0)

#define REDUCE_FP(T)                                                                        \
  do {                                                                                      \
    T *d = dst;                                                                             \
    const T *x = a, *y = b;                                                                 \
    for (size_t k = 0; k < count; k++) {                                                    \
      T u = x[k], v = y[k];                                                                 \
      d[k] = op == PERF_SUM ? u + v : op == PERF_MIN ? (u < v ? u : v) : (u > v ? u : v);   \
    }                                                                                       \
  } while (0)

void pattern_reduce(void *dst, const void *a, const void *b, enum perf_dtype t, enum perf_redop op, size_t count) {
  switch (t) {
  case PERF_INT8: REDUCE_INT(int8_t, uint8_t); break;
  case PERF_UINT8: REDUCE_INT(uint8_t, uint8_t); break;
  case PERF_INT32: REDUCE_INT(int32_t, uint32_t); break;
  case PERF_UINT32: REDUCE_INT(uint32_t, uint32_t); break;
  case PERF_INT64: REDUCE_INT(int64_t, uint64_t); break;
  case PERF_UINT64: REDUCE_INT(uint64_t, uint64_t); break;
  case PERF_FLOAT: REDUCE_FP(float); break;
  case PERF_DOUBLE: REDUCE_FP(double); break;
  default: break;
  }
}

/* The expected values of elements first .. first+n-1: the contributions
 * are generated and reduced the same way the ranks do it, a block at a time
 * so the check runs at memory speed rather than one call per element. */
static void expected_block(void *out, void *tmp, enum perf_dtype t, enum perf_redop op, uint64_t seed, int rank0,
                           int nsrc, size_t first, size_t n) {
  pattern_fill(out, t, n, seed, rank0, first);
  for (int r = 1; r < nsrc; r++) {
    pattern_fill(tmp, t, n, seed, rank0 + r, first);
    pattern_reduce(out, out, tmp, t, op, n);
  }
}

static void format_elem(char *s, size_t n, enum perf_dtype t, const void *p) {
  switch (t) {
  case PERF_INT8: snprintf(s, n, "%d", *(const int8_t *)p); break;
  case PERF_UINT8: snprintf(s, n, "%u", *(const uint8_t *)p); break;
  case PERF_INT32: snprintf(s, n, "%" PRId32, *(const int32_t *)p); break;
  case PERF_UINT32: snprintf(s, n, "%" PRIu32, *(const uint32_t *)p); break;
  case PERF_INT64: snprintf(s, n, "%" PRId64, *(const int64_t *)p); break;
  case PERF_UINT64: snprintf(s, n, "%" PRIu64, *(const uint64_t *)p); break;
  case PERF_FLOAT: snprintf(s, n, "%.9g", (double)*(const float *)p); break;
  case PERF_DOUBLE: snprintf(s, n, "%.17g", *(const double *)p); break;
  default: snprintf(s, n, "?"); break;
  }
}

#define CHECK_BLOCK 4096 /* elements per expected block */

size_t pattern_check(const void *buf, enum perf_dtype t, enum perf_redop op, size_t count, uint64_t seed, int rank0,
                     int nsrc, size_t first, FILE *log, const char *who, int *report_budget) {
  uint64_t want[CHECK_BLOCK], tmp[CHECK_BLOCK]; /* uint64_t: aligned for every type */
  size_t es = perf_dtype_size(t), wrong = 0;
  const uint8_t *p = buf;
  for (size_t base = 0; base < count; base += CHECK_BLOCK) {
    size_t n = count - base < CHECK_BLOCK ? count - base : CHECK_BLOCK;
    expected_block(want, tmp, t, op, seed, rank0, nsrc, first + base, n);
    /* bytewise: a NaN poison never compares equal, and -0.0 != 0.0 here */
    if (memcmp(want, p + base * es, n * es) == 0) continue;
    for (size_t k = 0; k < n; k++) {
      const uint8_t *w = (const uint8_t *)want + k * es, *g = p + (base + k) * es;
      if (memcmp(w, g, es) == 0) continue;
      wrong++;
      if (log && report_budget && *report_budget > 0) {
        char ws[32], gs[32];
        (*report_budget)--;
        format_elem(ws, sizeof(ws), t, w);
        format_elem(gs, sizeof(gs), t, g);
        fprintf(log, "%s: element %zu: want %s got %s\n", who ? who : "check", base + k, ws, gs);
      }
    }
  }
  return wrong;
}

void pattern_poison(void *buf, size_t bytes) { memset(buf, 0xff, bytes); }
