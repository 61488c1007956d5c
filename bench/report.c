/*
 * linkpass-perf: collective sizes, bandwidth and the results table.
 */
#include "report.h"

void perf_counts(enum perf_op op, size_t bytes, size_t elemsize, int nranks, struct perf_counts *c) {
  size_t count = elemsize ? bytes / elemsize : 0;
  /* nccl-tests keeps each rank's block a multiple of 16 bytes */
  size_t align_mask = elemsize && elemsize < 16 ? 16 / elemsize - 1 : 0;
  size_t base = nranks > 0 ? (count / (size_t)nranks) & ~align_mask : 0;
  switch (op) {
  case PERF_ALL_GATHER:
    c->sendcount = base;
    c->recvcount = base * (size_t)nranks;
    c->paramcount = base;
    break;
  case PERF_REDUCE_SCATTER:
    c->sendcount = base * (size_t)nranks;
    c->recvcount = base;
    c->paramcount = base;
    break;
  case PERF_ALLTOALL:
    c->paramcount = base;
    c->sendcount = base * (size_t)nranks;
    c->recvcount = c->sendcount;
    break;
  case PERF_SENDRECV:
  case PERF_ALL_REDUCE:
  default:
    c->sendcount = count;
    c->recvcount = count;
    c->paramcount = count;
    break;
  }
  size_t s = c->sendcount > c->recvcount ? c->sendcount : c->recvcount;
  c->rowbytes = s * elemsize;
}

double perf_busbw_factor(enum perf_op op, int nranks) {
  if (nranks <= 0) return 0;
  switch (op) {
  case PERF_ALL_REDUCE: return 2.0 * (nranks - 1) / nranks;
  case PERF_ALL_GATHER:
  case PERF_REDUCE_SCATTER:
  case PERF_ALLTOALL: return (double)(nranks - 1) / nranks;
  case PERF_SENDRECV:
  default: return 1.0;
  }
}

void perf_bandwidth(enum perf_op op, const struct perf_counts *c, size_t elemsize, int nranks, double sec,
                    double *algbw, double *busbw) {
  double bytes = (double)c->paramcount * (double)elemsize;
  /* the gather/scatter family count per-rank blocks: algbw is over all of them */
  if (op == PERF_ALL_GATHER || op == PERF_REDUCE_SCATTER || op == PERF_ALLTOALL) bytes *= nranks;
  *algbw = sec > 0 ? bytes / 1.0e9 / sec : 0;
  *busbw = *algbw * perf_busbw_factor(op, nranks);
}

void perf_format_float(double v, int width, char *out, size_t outlen) {
  /* out holds width+1 bytes at least: each attempt fits or falls through */
  if (snprintf(out, outlen, "%*.2f", width, v) <= width) return;
  if (snprintf(out, outlen, "%*.1f", width, v) <= width) return;
  if (snprintf(out, outlen, "%*.0f", width, v) <= width) return;
  snprintf(out, outlen, width >= 7 ? "%*.1e" : "%*.0e", width, v);
}

void perf_print_header(FILE *f) {
  fprintf(f, "#\n");
  fprintf(f, "# %10s  %12s  %8s  %6s  %6s           out-of-place\n", "", "", "", "", "");
  fprintf(f, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size", "count", "type", "redop", "root", "time",
          "algbw", "busbw", "#wrong");
  fprintf(f, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)",
          "(GB/s)", "");
}

void perf_print_row(FILE *f, const struct perf_counts *c, const char *type, const char *redop, double time_us,
                    double algbw, double busbw, long long wrong) {
  char ts[32], as[32], bs[32];
  perf_format_float(time_us, 7, ts, sizeof(ts));
  perf_format_float(algbw, 6, as, sizeof(as));
  perf_format_float(busbw, 6, bs, sizeof(bs));
  fprintf(f, "%12zu  %12zu  %8s  %6s  %6d  %7s  %6s  %6s", c->rowbytes, c->paramcount, type, redop, -1, ts, as, bs);
  if (wrong < 0) fprintf(f, "    N/A\n");
  else fprintf(f, "  %6lld\n", wrong);
  fflush(f);
}

void perf_print_footer(FILE *f, long long wrong_rows, double avg_busbw) {
  fprintf(f, "# %-20s : %lld %s\n", "Out of bounds values", wrong_rows, wrong_rows ? "FAILED" : "OK");
  fprintf(f, "# %-20s : %g\n", "Avg bus bandwidth", avg_busbw);
  fprintf(f, "#\n");
  fflush(f);
}
