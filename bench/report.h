/*
 * linkpass-perf: sizes of each collective and the nccl-tests table.
 *
 * Counts, bandwidth factors and column formats follow nccl-tests, so numbers
 * from this tool and from all_reduce_perf & co. compare directly.
 */
#ifndef LINKPASS_PERF_REPORT_H
#define LINKPASS_PERF_REPORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "opts.h"

struct perf_counts {
  size_t sendcount;  /* elements in each rank's send buffer */
  size_t recvcount;  /* elements in each rank's receive buffer */
  size_t paramcount; /* the count NCCL would be called with (the table's "count") */
  size_t rowbytes;   /* the table's "size": max(send, recv) bytes */
};

/* nccl-tests' GetCollByteCount for `bytes` requested with -b/-e. */
void perf_counts(enum perf_op op, size_t bytes, size_t elemsize, int nranks, struct perf_counts *c);

/* busbw = algbw * factor: all_reduce 2(n-1)/n, all_gather, reduce_scatter and
 * alltoall (n-1)/n, sendrecv 1. */
double perf_busbw_factor(enum perf_op op, int nranks);

/* algbw and busbw in GB/s (1e9) for one iteration taking `sec`. */
void perf_bandwidth(enum perf_op op, const struct perf_counts *c, size_t elemsize, int nranks, double sec,
                    double *algbw, double *busbw);

/* nccl-tests' fixed-width float: fewer decimals, then exponent, to fit. */
void perf_format_float(double v, int width, char *out, size_t outlen);

/* The two comment lines naming the columns. */
void perf_print_header(FILE *f);
/* One row: size count type redop root time algbw busbw #wrong (wrong < 0: N/A). */
void perf_print_row(FILE *f, const struct perf_counts *c, const char *type, const char *redop, double time_us,
                    double algbw, double busbw, long long wrong);
/* The closing lines: out-of-bounds count and average bus bandwidth. */
void perf_print_footer(FILE *f, long long wrong_rows, double avg_busbw);

#endif
