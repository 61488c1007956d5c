/*
 * linkpass-perf: an nccl-tests style benchmark that plays NCCL's part over a
 * net plugin.  Without --rank this process is the launcher; with --rank
 * (added by the launcher) it is one rank.
 */
#include <stdio.h>
#include <stdlib.h>

#include "launch.h"
#include "opts.h"
#include "rank.h"

int main(int argc, char **argv) {
  struct perf_opts o;
  char err[512];
  int help = 0;
  if (perf_opts_parse(&o, argc, argv, &help, err, sizeof(err))) {
    fprintf(stderr, "linkpass-perf: %s\n", err);
    return PERF_EXIT_ERROR;
  }
  if (help) {
    perf_opts_usage(argv[0]);
    return PERF_EXIT_OK;
  }
  /* results go to a pipe as often as to a terminal: line by line */
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (o.rank >= 0) return perf_rank_main(&o);
  return perf_launch(&o, argc, argv);
}
