/*
 * linkpass-perf: the data every rank sends and the check of what it got.
 *
 * Element i of rank r's input in the iteration with seed s holds
 * value(s, r, i), a hash of all three: a chunk delivered to the wrong
 * offset, from the wrong rank, from an earlier iteration (stale) or twice
 * (a replay over newer data) no longer matches.  Values are small enough that
 * float/double sums of up to PERF_MAX_RANKS ranks are exact, so the check is
 * an equality test whatever order the ring reduced in; integer types wrap
 * identically on both sides.
 */
#ifndef LINKPASS_PERF_PATTERN_H
#define LINKPASS_PERF_PATTERN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "opts.h"

/* A seed for iteration `iter` of the run (distinct for every iteration). */
uint64_t pattern_seed(uint64_t run_id, uint64_t iter);

/* Write value(seed, rank, first + k) into element k of buf, k < count. */
void pattern_fill(void *buf, enum perf_dtype t, size_t count, uint64_t seed, int rank, size_t first);

/* dst[k] = a[k] op b[k]; dst may alias a or b. */
void pattern_reduce(void *dst, const void *a, const void *b, enum perf_dtype t, enum perf_redop op, size_t count);

/* Check that element k of buf holds the reduction over ranks rank0 ..
 * rank0+nsrc-1 of value(seed, rank, first + k) (nsrc == 1: a plain copy).
 * Returns the number of wrong elements; prints the first few (at most
 * *report_budget, decremented) to `log` naming `who`. */
size_t pattern_check(const void *buf, enum perf_dtype t, enum perf_redop op, size_t count, uint64_t seed, int rank0,
                     int nsrc, size_t first, FILE *log, const char *who, int *report_budget);

/* Fill with a byte pattern no result ever has (NaN for floats), so an element
 * nobody wrote is caught. */
void pattern_poison(void *buf, size_t bytes);

#endif
