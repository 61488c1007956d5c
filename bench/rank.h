/*
 * linkpass-perf: what one rank process does — connect through the plugin,
 * run the sweep (or the --duration loop), report to rank 0, which prints.
 */
#ifndef LINKPASS_PERF_RANK_H
#define LINKPASS_PERF_RANK_H

#include "opts.h"

/* Exit codes shared by ranks and launcher. */
enum { PERF_EXIT_OK = 0, PERF_EXIT_WRONG = 1, PERF_EXIT_ERROR = 2, PERF_EXIT_INTERRUPTED = 130 };

/* Never returns an error silently: prints why to stderr.  Returns the
 * process exit code. */
int perf_rank_main(const struct perf_opts *o);

#endif
