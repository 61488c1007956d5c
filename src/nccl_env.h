/*
 * Every environment variable NCCL's own IB transport reads (NCCL 2.28 to
 * 2.30), and what linkpass does with each.  linkpass replaces that
 * transport, so a job's environment was tuned for it: a variable an
 * operator set must never be ignored in silence.  Pure: the environment is
 * read and the lines are reported through callbacks (config.h).
 *
 * docs/CONFIGURATION.md carries the same table for people; a test checks
 * the two against each other.
 */
#ifndef LP_NCCL_ENV_H
#define LP_NCCL_ENV_H

#include <stddef.h>

#include "config.h"

enum lp_env_treatment {
  LP_ENV_HONOURED,       /* NCCL's meaning, syntax, default and range */
  LP_ENV_MAPPED,         /* linkpass's own mechanism does the job; the text says which */
  LP_ENV_NOT_APPLICABLE, /* nothing in linkpass it could act on (vNICs, GPU memory, mlx5dv, GIN) */
};

struct lp_nccl_var {
  const char *name;
  enum lp_env_treatment treatment;
  const char *nccl_default; /* as NCCL 2.30 documents or codes it */
  const char *linkpass;     /* what linkpass does with it, for the log line */
};

extern const struct lp_nccl_var lp_nccl_vars[];
extern const size_t lp_nccl_nvars;

/* "honoured", "mapped", "not applicable". */
const char *lp_env_treatment_str(enum lp_env_treatment t);

/* One INFO line per variable of the table that is set: its value and what
 * linkpass does with it.  The value itself is validated where the variable
 * is parsed (config.c). */
void lp_nccl_env_report(lp_env_fn env, void *env_arg, lp_diag_fn info, void *arg);

#endif
