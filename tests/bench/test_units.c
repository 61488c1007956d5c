/*
 * Unit tests of linkpass-perf's pure parts: sizes and flags, bandwidth
 * factors and the table, the data pattern and its checker, the schedules,
 * the plugin loader's rules.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "launch.h"
#include "netload.h"
#include "opts.h"
#include "pattern.h"
#include "report.h"

/* ---------------------------------------------------------------- sizes */

static size_t size_ok(const char *s) {
  size_t v = 0;
  char err[256];
  cr_assert_eq(perf_parse_size(s, "-b", &v, err, sizeof(err)), 0, "\"%s\" rejected: %s", s, err);
  return v;
}

static void size_bad(const char *s, const char *needle) {
  size_t v = 0;
  char err[256] = "";
  cr_assert_eq(perf_parse_size(s, "-e", &v, err, sizeof(err)), -1, "\"%s\" accepted", s);
  cr_assert(strstr(err, needle), "message for \"%s\" lacks \"%s\": %s", s, needle, err);
  cr_assert(strstr(err, "-e"), "message does not name the flag: %s", err);
}

Test(size, units) {
  cr_assert_eq(size_ok("0"), 0);
  cr_assert_eq(size_ok("8"), 8);
  cr_assert_eq(size_ok("1K"), 1024);
  cr_assert_eq(size_ok("1k"), 1024);
  cr_assert_eq(size_ok("64M"), 64u << 20);
  cr_assert_eq(size_ok("64MB"), 64u << 20);
  cr_assert_eq(size_ok("64MiB"), 64u << 20);
  cr_assert_eq(size_ok("2G"), 2ull << 30);
  cr_assert_eq(size_ok("1.5K"), 1536);
  cr_assert_eq(size_ok("1T"), 1ull << 40);
}

Test(size, garbage) {
  size_bad("garbage", "invalid size \"garbage\"");
  size_bad("", "invalid size");
  size_bad("1X", "optional K, M or G");
  size_bad("-1", "invalid size");
  size_bad("K", "invalid size");
  size_bad("8 K", "invalid size");
  size_bad("1.3", "whole number of bytes");
  size_bad("2T", "larger than 1T");
  size_bad("99999999999999999999999", "larger than 1T");
}

/* ---------------------------------------------------------------- flags */

static int parse(struct perf_opts *o, char *err, size_t len, ...) {
  char *argv[32] = {"linkpass-perf"};
  int argc = 1, help = 0;
  va_list ap;
  va_start(ap, len);
  for (char *a; (a = va_arg(ap, char *));) argv[argc++] = a;
  va_end(ap);
  return perf_opts_parse(o, argc, argv, &help, err, len);
}

Test(opts, defaults_like_nccl_tests) {
  struct perf_opts o;
  char err[256];
  cr_assert_eq(parse(&o, err, sizeof(err), NULL), 0, "%s", err);
  cr_assert_eq(o.op, PERF_ALL_REDUCE);
  cr_assert_eq(o.dtype, PERF_FLOAT);
  cr_assert_eq(o.redop, PERF_SUM);
  cr_assert_eq(o.minbytes, 32u << 20);
  cr_assert_eq(o.iters, 20);
  cr_assert_eq(o.warmup, 5);
  cr_assert_eq(o.check, 1);
  cr_assert_eq(o.rank, -1);
  cr_assert_eq(o.slots, 8);
}

Test(opts, nccl_tests_flags) {
  struct perf_opts o;
  char err[256];
  cr_assert_eq(parse(&o, err, sizeof(err), "-b", "8", "-e", "128M", "-f", "2", "-n", "7", "-w", "0", "-c", "0", "-d",
                     "int32", "-o", "max", "--op", "reduce_scatter", "-N", "4", "--abi", "9", NULL),
               0, "%s", err);
  cr_assert_eq(o.minbytes, 8);
  cr_assert_eq(o.maxbytes, 128u << 20);
  cr_assert_eq(o.factor, 2);
  cr_assert_eq(o.iters, 7);
  cr_assert_eq(o.warmup, 0);
  cr_assert_eq(o.check, 0);
  cr_assert_eq(o.dtype, PERF_INT32);
  cr_assert_eq(o.redop, PERF_MAX);
  cr_assert_eq(o.op, PERF_REDUCE_SCATTER);
  cr_assert_eq(o.nranks, 4);
  cr_assert_eq(o.abi, 9);
  cr_assert_eq(parse(&o, err, sizeof(err), "--op", "all_gather_perf", NULL), 0, "%s", err);
  cr_assert_eq(o.op, PERF_ALL_GATHER);
  cr_assert_eq(o.reg_pad, 0);
  cr_assert_eq(parse(&o, err, sizeof(err), "--reg-pad", "64", NULL), 0, "%s", err);
  cr_assert_eq(o.reg_pad, 64);
}

static void opts_bad(const char *needle, ...) {
  char *argv[32] = {"linkpass-perf"};
  int argc = 1, help = 0;
  va_list ap;
  va_start(ap, needle);
  for (char *a; (a = va_arg(ap, char *));) argv[argc++] = a;
  va_end(ap);
  struct perf_opts o;
  char err[512] = "";
  cr_assert_eq(perf_opts_parse(&o, argc, argv, &help, err, sizeof(err)), -1, "accepted: %s ...", argv[1]);
  cr_assert(strstr(err, needle), "message lacks \"%s\": %s", needle, err);
}

Test(opts, validation) {
  opts_bad("between 2 and", "-N", "1", NULL);
  opts_bad("between 2 and", "-N", "65", NULL);
  opts_bad("must be 8, 9, 10, 11 or 12", "--abi", "7", NULL);
  opts_bad("invalid operation \"allreduce\"", "--op", "allreduce", NULL);
  opts_bad("invalid data type", "-d", "half", NULL);
  opts_bad("invalid reduction", "-o", "prod", NULL);
  opts_bad("larger than -e", "-b", "1M", "-e", "1K", NULL);
  opts_bad("-i 0 never gets", "-b", "1K", "-e", "1M", "-i", "0", NULL);
  opts_bad("between 1 and 32", "--slots", "33", NULL);
  opts_bad("multiple of 128", "--step-bytes", "100", NULL);
  opts_bad("does not reduce", "--op", "all_gather", "-o", "max", NULL);
  opts_bad("--fabric needs --hosts", "--fabric", "f", NULL);
  opts_bad("only 2 ranks", "--hosts", "a,b,c", NULL);
  opts_bad("--rank needs --rdv", "--rank", "0", NULL);
  opts_bad("is not below -N", "--rank", "3", "--rdv", "127.0.0.1:1", NULL);
  opts_bad("does not fit in --timeout", "--duration", "30", "--timeout", "10", NULL);
  opts_bad("expected NAME=VALUE", "--rank-env", "FOO", NULL);
  opts_bad("expected an IPv4 address", "--rendezvous-addr", "node0", NULL);
  opts_bad("unknown option", "--bogus", NULL);
  opts_bad("needs a value", "-b", NULL);
  opts_bad("unexpected argument", "extra", NULL);
  opts_bad("expected an integer", "-n", "ten", NULL);
  opts_bad("between 0 and 2", "-c", "3", NULL);
  opts_bad("between 0 and 1048576", "--reg-pad", "2000000", NULL);
}

Test(opts, size_sweep) {
  struct perf_opts o;
  char err[256];
  cr_assert_eq(parse(&o, err, sizeof(err), "-b", "0", "-e", "64", "-f", "4", NULL), 0, "%s", err);
  cr_assert_eq(perf_next_size(&o, 0), 4); /* one float */
  cr_assert_eq(perf_next_size(&o, 4), 16);
  cr_assert_eq(parse(&o, err, sizeof(err), "-b", "1K", "-e", "4K", "-i", "1K", NULL), 0, "%s", err);
  cr_assert_eq(perf_next_size(&o, 1024), 2048);
}

Test(opts, rank_placement) {
  int host[4], local[4];
  for (int r = 0; r < 4; r++) {
    host[r] = perf_rank_host(r, 4, 2);
    local[r] = perf_rank_local(r, 4, 2);
  }
  cr_assert(host[0] == 0 && host[1] == 0 && host[2] == 1 && host[3] == 1);
  cr_assert(local[0] == 0 && local[1] == 1 && local[2] == 0 && local[3] == 1);
  cr_assert_eq(perf_rank_host(2, 3, 1), 0);
  cr_assert_eq(perf_rank_local(2, 3, 1), 2);
}

Test(opts, rank_env_expansion) {
  char out[64];
  cr_assert_eq(perf_expand_env("h=%h r=%r l=%l %%", 3, 1, "node1", out, sizeof(out)), 0);
  cr_assert_str_eq(out, "h=node1 r=3 l=1 %");
  cr_assert_eq(perf_expand_env("%q", 0, 0, "x", out, sizeof(out)), -1);
  cr_assert_eq(perf_expand_env("%h%h%h", 0, 0, "0123456789012345678901234", out, 16), -1);
}

/* ----------------------------------------------------- bandwidth, table */

Test(report, busbw_factors) {
  cr_assert_float_eq(perf_busbw_factor(PERF_ALL_REDUCE, 4), 1.5, 1e-12);
  cr_assert_float_eq(perf_busbw_factor(PERF_ALL_REDUCE, 2), 1.0, 1e-12);
  cr_assert_float_eq(perf_busbw_factor(PERF_ALL_GATHER, 4), 0.75, 1e-12);
  cr_assert_float_eq(perf_busbw_factor(PERF_REDUCE_SCATTER, 8), 0.875, 1e-12);
  cr_assert_float_eq(perf_busbw_factor(PERF_ALLTOALL, 2), 0.5, 1e-12);
  cr_assert_float_eq(perf_busbw_factor(PERF_SENDRECV, 16), 1.0, 1e-12);
}

Test(report, counts_like_nccl_tests) {
  struct perf_counts c;
  perf_counts(PERF_ALL_REDUCE, 1 << 20, 4, 4, &c);
  cr_assert(c.sendcount == 262144 && c.recvcount == 262144 && c.paramcount == 262144 && c.rowbytes == 1 << 20);
  perf_counts(PERF_ALL_GATHER, 1 << 20, 4, 4, &c);
  cr_assert(c.sendcount == 65536 && c.recvcount == 262144 && c.paramcount == 65536 && c.rowbytes == 1 << 20);
  perf_counts(PERF_REDUCE_SCATTER, 1 << 20, 4, 4, &c);
  cr_assert(c.sendcount == 262144 && c.recvcount == 65536 && c.paramcount == 65536);
  /* blocks stay 16-byte aligned: 1000 floats over 3 ranks -> 332 each */
  perf_counts(PERF_ALLTOALL, 4000, 4, 3, &c);
  cr_assert_eq(c.paramcount, 332);
  cr_assert_eq(c.sendcount, 996);
  perf_counts(PERF_ALL_GATHER, 8, 4, 4, &c);
  cr_assert(c.sendcount == 0 && c.rowbytes == 0);
}

Test(report, bandwidth) {
  struct perf_counts c;
  double alg, bus;
  perf_counts(PERF_ALL_REDUCE, 1000000000, 4, 4, &c);
  perf_bandwidth(PERF_ALL_REDUCE, &c, 4, 4, 1.0, &alg, &bus);
  cr_assert_float_eq(alg, 1.0, 1e-9);
  cr_assert_float_eq(bus, 1.5, 1e-9);
  perf_counts(PERF_ALL_GATHER, 1 << 20, 4, 4, &c);
  perf_bandwidth(PERF_ALL_GATHER, &c, 4, 4, 1e-3, &alg, &bus);
  cr_assert_float_eq(alg, 1048576 / 1e9 / 1e-3, 1e-9); /* all blocks count */
  cr_assert_float_eq(bus, alg * 0.75, 1e-9);
}

Test(report, float_columns) {
  char s[32];
  perf_format_float(12.345, 7, s, sizeof(s));
  cr_assert_str_eq(s, "  12.35");
  perf_format_float(12345.67, 7, s, sizeof(s));
  cr_assert_str_eq(s, "12345.7");
  perf_format_float(123456.7, 7, s, sizeof(s));
  cr_assert_str_eq(s, " 123457");
  perf_format_float(12345678.0, 7, s, sizeof(s));
  cr_assert_str_eq(s, "1.2e+07");
  perf_format_float(1.5e12, 7, s, sizeof(s));
  cr_assert_str_eq(s, "1.5e+12");
}

Test(report, row_layout) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  struct perf_counts c;
  perf_counts(PERF_ALL_REDUCE, 1 << 20, 4, 2, &c);
  perf_print_row(f, &c, "float", "sum", 100.0, 10.49, 10.49, 0);
  perf_print_footer(f, 0, 10.49);
  fclose(f);
  cr_assert(strstr(buf, "     1048576        262144     float     sum      -1   100.00   10.49   10.49       0\n"),
            "row: %s", buf);
  cr_assert(strstr(buf, "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 10.49\n"), "footer: %s", buf);
  free(buf);
}

/* ---------------------------------------------------- pattern, checker */

Test(pattern, copy_checks_clean) {
  float buf[1000];
  pattern_fill(buf, PERF_FLOAT, 1000, 42, 3, 500);
  cr_assert_eq(pattern_check(buf, PERF_FLOAT, PERF_SUM, 1000, 42, 3, 1, 500, NULL, NULL, NULL), 0);
}

Test(pattern, catches_one_wrong_byte) {
  static uint8_t buf[1 << 16];
  for (int t = 0; t < PERF_NDTYPES; t++) {
    size_t es = perf_dtype_size((enum perf_dtype)t), n = sizeof(buf) / es;
    pattern_fill(buf, (enum perf_dtype)t, n, 7, 1, 0);
    for (size_t pos = 0; pos < sizeof(buf); pos += 4099) {
      buf[pos] ^= 0x01;
      cr_assert_eq(pattern_check(buf, (enum perf_dtype)t, PERF_SUM, n, 7, 1, 1, 0, NULL, NULL, NULL), 1,
                   "%s: a flipped byte at %zu not caught", perf_dtype_name((enum perf_dtype)t), pos);
      buf[pos] ^= 0x01;
    }
  }
}

Test(pattern, catches_misplaced_stale_foreign_chunks) {
  enum { N = 4096, CH = 512 };
  static float good[N], bad[N];
  pattern_fill(good, PERF_FLOAT, N, 99, 2, 0);
  /* a chunk delivered one chunk too far */
  memcpy(bad, good, sizeof(bad));
  memcpy(bad + 2 * CH, good + CH, CH * sizeof(float));
  cr_assert_geq(pattern_check(bad, PERF_FLOAT, PERF_SUM, N, 99, 2, 1, 0, NULL, NULL, NULL), CH * 99 / 100);
  /* a chunk from the previous iteration (stale) */
  memcpy(bad, good, sizeof(bad));
  pattern_fill(bad + CH, PERF_FLOAT, CH, 98, 2, CH);
  cr_assert_geq(pattern_check(bad, PERF_FLOAT, PERF_SUM, N, 99, 2, 1, 0, NULL, NULL, NULL), CH * 99 / 100);
  /* a chunk from another rank */
  memcpy(bad, good, sizeof(bad));
  pattern_fill(bad + CH, PERF_FLOAT, CH, 99, 1, CH);
  cr_assert_geq(pattern_check(bad, PERF_FLOAT, PERF_SUM, N, 99, 2, 1, 0, NULL, NULL, NULL), CH * 99 / 100);
  /* never written (poison) */
  memcpy(bad, good, sizeof(bad));
  pattern_poison(bad + CH, CH * sizeof(float));
  cr_assert_eq(pattern_check(bad, PERF_FLOAT, PERF_SUM, N, 99, 2, 1, 0, NULL, NULL, NULL), CH);
}

Test(pattern, seeds_differ_per_iteration) {
  cr_assert_neq(pattern_seed(1, 0), pattern_seed(1, 1));
  cr_assert_neq(pattern_seed(1, 0), pattern_seed(2, 0));
}

/* The reduction of every rank's input, done the slow way, checks clean;
 * with 64 ranks the float sums stay exact. */
Test(pattern, reductions_exact) {
  enum { N = 777, R = 64 };
  static uint8_t acc[N * 8], tmp[N * 8];
  for (int t = 0; t < PERF_NDTYPES; t++)
    for (int op = 0; op < PERF_NREDOPS; op++) {
      enum perf_dtype dt = (enum perf_dtype)t;
      pattern_fill(acc, dt, N, 5, 0, 10);
      for (int r = 1; r < R; r++) {
        pattern_fill(tmp, dt, N, 5, r, 10);
        pattern_reduce(acc, tmp, acc, dt, (enum perf_redop)op, N); /* other operand order than the checker */
      }
      cr_assert_eq(pattern_check(acc, dt, (enum perf_redop)op, N, 5, 0, R, 10, NULL, NULL, NULL), 0, "%s %s",
                   perf_dtype_name(dt), perf_redop_name((enum perf_redop)op));
    }
}

Test(pattern, reports_first_errors) {
  float buf[64];
  char *log = NULL;
  size_t len = 0;
  int budget = 2;
  FILE *f = open_memstream(&log, &len);
  pattern_fill(buf, PERF_FLOAT, 64, 1, 0, 0);
  buf[3] += 1;
  buf[10] += 1;
  buf[20] += 1;
  cr_assert_eq(pattern_check(buf, PERF_FLOAT, PERF_SUM, 64, 1, 0, 1, 0, f, "rank 0", &budget), 3);
  fclose(f);
  cr_assert(strstr(log, "rank 0: element 3: want "), "%s", log);
  cr_assert(strstr(log, "element 10"), "%s", log);
  cr_assert_null(strstr(log, "element 20"), "budget ignored: %s", log);
  free(log);
}

/* ------------------------------------------------------------ schedules */

/* Every byte of the ring's output is produced by exactly one message, and
 * what rank r sends on a connection is what rank r+1 expects, in order. */
Test(coll, ring_messages_match_between_neighbours) {
  for (int op = PERF_SENDRECV; op <= PERF_REDUCE_SCATTER; op++)
    for (int n = 2; n <= 5; n++)
      for (int C = 1; C <= 3; C++) {
        size_t bytes = 3 * 1000 * 1000 + 36;
        struct xchan chans[2][3];
        static char sbuf[2][4 << 20], rbuf[2][4 << 20];
        memset(chans, 0, sizeof(chans));
        for (int k = 0; k < 2; k++) {
          struct coll_plan p = {.op = (enum perf_op)op, .dtype = PERF_FLOAT, .nranks = n, .rank = k, .channels = C,
                                .step = 64 << 10, .chunk_bytes = 256 << 10, .sendbuf = sbuf[k], .recvbuf = rbuf[k]};
          perf_counts(p.op, bytes, 4, n, &p.counts);
          cr_assert_eq(coll_build(&p, chans[k]), 0);
        }
        for (int c = 0; c < C; c++) {
          cr_assert_eq(chans[0][c].nsends, chans[1][c].nrecvs, "%s n=%d C=%d ch %d", perf_op_name((enum perf_op)op),
                       n, C, c);
          for (size_t i = 0; i < chans[0][c].nsends; i++)
            cr_assert_eq(chans[0][c].sends[i].bytes, chans[1][c].recvs[i].bytes);
        }
        for (int k = 0; k < 2; k++)
          for (int c = 0; c < C; c++) xchan_free(&chans[k][c]);
      }
}

Test(coll, all_reduce_output_covered_once) {
  enum { n = 4, C = 2 };
  static char sbuf[1 << 20], rbuf[1 << 20];
  static unsigned char hits[1 << 20];
  struct xchan chans[C];
  memset(chans, 0, sizeof(chans));
  struct coll_plan p = {.op = PERF_ALL_REDUCE, .dtype = PERF_FLOAT, .nranks = n, .rank = 1, .channels = C,
                        .step = 8 << 10, .chunk_bytes = 32 << 10, .sendbuf = sbuf, .recvbuf = rbuf};
  perf_counts(p.op, 1000 * 1000, 4, n, &p.counts);
  cr_assert_eq(coll_build(&p, chans), 0);
  for (int c = 0; c < C; c++)
    for (size_t i = 0; i < chans[c].nrecvs; i++)
      if (chans[c].recvs[i].out)
        for (size_t b = 0; b < chans[c].recvs[i].bytes; b++) hits[chans[c].recvs[i].out - rbuf + (long)b]++;
  for (size_t b = 0; b < p.counts.recvcount * 4; b++) cr_assert_eq(hits[b], 1, "byte %zu written %d times", b, hits[b]);
  for (int c = 0; c < C; c++) xchan_free(&chans[c]);
}

Test(coll, zero_bytes_still_send_a_message) {
  struct xchan chans[1];
  char s[16], r[16];
  memset(chans, 0, sizeof(chans));
  struct coll_plan p = {.op = PERF_ALL_REDUCE, .dtype = PERF_FLOAT, .nranks = 2, .rank = 0, .channels = 1,
                        .step = 1024, .chunk_bytes = 4096, .sendbuf = s, .recvbuf = r};
  perf_counts(p.op, 0, 4, 2, &p.counts);
  cr_assert_eq(coll_build(&p, chans), 0);
  cr_assert(chans[0].nsends == 1 && chans[0].nrecvs == 1 && chans[0].sends[0].bytes == 0);
  xchan_free(&chans[0]);
}

/* --------------------------------------------------------------- loader */

Test(loader, candidate_names_follow_nccl) {
  char c[2][512];
  cr_assert_eq(lp_net_candidates("linkpass", c), 2);
  cr_assert_str_eq(c[0], "linkpass");
  cr_assert_str_eq(c[1], "libnccl-net-linkpass.so");
  cr_assert_eq(lp_net_candidates("/opt/x/libnccl-net-linkpass.so", c), 1);
  cr_assert_eq(lp_net_candidates("libnccl-net-foo.so", c), 1);
  cr_assert_eq(lp_net_candidates("lib/x.so", c), 1);
}

Test(loader, newest_first_and_forced_versions) {
  struct lp_net n;
  char err[2048];
  cr_assert_eq(lp_net_load(FAKENET_PATH, 0, &n, err, sizeof(err)), 0, "%s", err);
  cr_assert_eq(n.abi, 12);
  cr_assert_str_eq(n.name, "fakenet");
  for (int abi = 8; abi <= 12; abi++) {
    cr_assert_eq(lp_net_load(FAKENET_PATH, abi, &n, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(n.abi, abi);
    int nd = 0;
    struct lp_props p;
    cr_assert_eq(n.ops->init(&n, 1, lp_logger), ncclSuccess);
    cr_assert_eq(n.ops->devices(&n, &nd), ncclSuccess);
    cr_assert_gt(nd, 0);
    cr_assert_eq(n.ops->get_props(&n, 0, &p), ncclSuccess);
    cr_assert_str_eq(p.name, "fake0");
    cr_assert(p.ptr_support & NCCL_PTR_HOST);
    cr_assert_eq(p.max_p2p_bytes, abi >= 9 ? NCCL_MAX_NET_SIZE_BYTES : 0, "v%d: maxP2pBytes %zu", abi,
                 p.max_p2p_bytes);
    cr_assert_eq(n.ops->finalize(&n), ncclSuccess);
  }
}

Test(loader, explains_every_attempt) {
  struct lp_net n;
  char err[2048];
  cr_assert_eq(lp_net_load("nothere,alsonot", 0, &n, err, sizeof(err)), -1);
  cr_assert(strstr(err, "dlopen(nothere)"), "%s", err);
  cr_assert(strstr(err, "dlopen(libnccl-net-nothere.so)"), "%s", err);
  cr_assert(strstr(err, "dlopen(libnccl-net-alsonot.so)"), "%s", err);
  cr_assert_eq(lp_net_load("none", 0, &n, err, sizeof(err)), -1);
  cr_assert(strstr(err, "none"), "%s", err);
  /* a library without any ncclNetPlugin symbol: libm will do */
  cr_assert_eq(lp_net_load("libm.so.6", 0, &n, err, sizeof(err)), -1);
  cr_assert(strstr(err, "exports none of ncclNetPlugin_v12..v8"), "%s", err);
}

Test(loader, v8_refuses_sizes_over_int) {
  struct lp_net n;
  char err[2048];
  void *req = (void *)0x1;
  cr_assert_eq(lp_net_load(FAKENET_PATH, 8, &n, err, sizeof(err)), 0, "%s", err);
  cr_assert_eq(n.ops->isend(&n, NULL, NULL, (size_t)1 << 31, 0, NULL, &req), ncclInvalidArgument);
}
