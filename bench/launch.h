/*
 * linkpass-perf: the launcher.  Runs the rendezvous, starts one process per
 * rank (through `simverbs run --host H --fabric F --` when --fabric is
 * given, directly otherwise), and supervises them: the first rank that fails,
 * a --timeout or a SIGINT/SIGTERM stops every rank, with a message naming
 * the rank and why.
 */
#ifndef LINKPASS_PERF_LAUNCH_H
#define LINKPASS_PERF_LAUNCH_H

#include "opts.h"

/* argv as given to this process: every rank gets the same arguments plus
 * its own --rank/--local-rank/--rdv/--comm-id.  Returns the exit code. */
int perf_launch(const struct perf_opts *o, int argc, char **argv);

/* Expand %r (rank), %l (local rank), %h (host) and %% in a --rank-env value. */
int perf_expand_env(const char *tmpl, int rank, int local_rank, const char *host, char *out, size_t outlen);

#endif
