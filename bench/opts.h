/*
 * linkpass-perf: command-line options, their parsing and validation.
 *
 * The launcher and every rank parse the same argument vector (the launcher
 * appends --rank/--rdv/... for each rank it starts), so both sides derive the
 * same schedule from the same options.  Pure code: no I/O except the error
 * text handed back to the caller.
 */
#ifndef LINKPASS_PERF_OPTS_H
#define LINKPASS_PERF_OPTS_H

#include <stddef.h>
#include <stdint.h>

enum perf_op { PERF_SENDRECV, PERF_ALL_REDUCE, PERF_ALL_GATHER, PERF_REDUCE_SCATTER, PERF_ALLTOALL, PERF_NOPS };

enum perf_dtype {
  PERF_INT8,
  PERF_UINT8,
  PERF_INT32,
  PERF_UINT32,
  PERF_INT64,
  PERF_UINT64,
  PERF_FLOAT,
  PERF_DOUBLE,
  PERF_NDTYPES
};

enum perf_redop { PERF_SUM, PERF_MIN, PERF_MAX, PERF_NREDOPS };

#define PERF_MAX_RANKS 64
#define PERF_MAX_CHANNELS 1024
#define PERF_MAX_SLOTS 32 /* NCCL_NET_MAX_REQUESTS: outstanding requests per comm */
#define PERF_MAX_RANK_ENV 8

struct perf_opts {
  /* what to run */
  enum perf_op op;
  enum perf_dtype dtype;
  enum perf_redop redop;
  size_t minbytes, maxbytes; /* -b, -e */
  int factor;                /* -f: multiply the size by this when above 1 */
  size_t stepbytes;          /* -i: else add this to the size */
  int iters, warmup;         /* -n, -w */
  int check;                 /* -c 0|1|2 (2: every iteration) */
  double duration;           /* --duration: loop maxbytes for this long (0: off) */
  int reg;                   /* -R 0|1: register user buffers (zero copy) */
  /* how to run it */
  int nranks;                /* -N */
  int channels;              /* --channels: connections per peer, like NCCL channels */
  int same_dev;              /* --same-dev: every channel on the first device (a NIC with many connections) */
  int slots;                 /* --slots: buffers in flight per connection (NCCL_STEPS) */
  size_t step_bytes;         /* --step-bytes: largest network message */
  size_t reg_pad;            /* --reg-pad: bytes added to every registration's length */
  int mem;                   /* --mem: enum perf_mem, where registered buffers live (gpumem.h) */
  int dev;                   /* --dev: first device (-1: local rank) */
  int abi;                   /* --abi 8..12 (0: newest the plugin exports) */
  const char *plugin;        /* --plugin (NULL: NCCL_NET_PLUGIN rules) */
  double timeout;            /* --timeout: whole run, seconds */
  double conn_timeout;       /* --connect-timeout */
  double stall_timeout;      /* --stall-timeout: no completion for this long is an error */
  const char *gap_log;       /* --gap-log: append every pause between completions of 1 ms or more */
  int verbose;               /* -v */
  /* where ranks run */
  const char *hosts;         /* --hosts a,b */
  const char *fabric;        /* --fabric: spawn ranks through `simverbs run` */
  const char *simverbs;      /* --simverbs: path of the simverbs tool */
  const char *rank_env[PERF_MAX_RANK_ENV]; /* --rank-env NAME=VALUE (%r %l %h expanded) */
  const char *rdv_addr;      /* --rendezvous-addr: IPv4 the launcher listens on [127.0.0.1] */
  int nrank_env;
  /* set by the launcher for each rank */
  int rank;                  /* --rank (-1: this process is the launcher) */
  int local_rank;            /* --local-rank */
  const char *rdv;           /* --rdv 127.0.0.1:port */
  uint64_t comm_id;          /* --comm-id */
};

/* Defaults, then argv; 0 on success, -1 with a message in err.  Sets *help
 * when -h/--help was given (nothing else is validated then). */
int perf_opts_parse(struct perf_opts *o, int argc, char **argv, int *help, char *err, size_t errlen);
/* Cross-option checks (also run by perf_opts_parse). */
int perf_opts_validate(const struct perf_opts *o, char *err, size_t errlen);
void perf_opts_usage(const char *prog);

/* "8", "1K", "64M", "1G" (binary units, like nccl-tests; "1.5M" allowed when
 * it is a whole number of bytes).  0 on success, -1 with a message naming
 * `what` (e.g. "-b") otherwise. */
int perf_parse_size(const char *s, const char *what, size_t *out, char *err, size_t errlen);
/* Decimal integer in [lo, hi]. */
int perf_parse_int(const char *s, const char *what, long lo, long hi, long *out, char *err, size_t errlen);
/* Non-negative seconds (fractions allowed). */
int perf_parse_seconds(const char *s, const char *what, double *out, char *err, size_t errlen);

int perf_op_parse(const char *s, enum perf_op *op);
int perf_dtype_parse(const char *s, enum perf_dtype *t);
int perf_redop_parse(const char *s, enum perf_redop *r);
const char *perf_op_name(enum perf_op op);
const char *perf_dtype_name(enum perf_dtype t);
const char *perf_redop_name(enum perf_redop r);
size_t perf_dtype_size(enum perf_dtype t);

/* The size after `size` in the -b..-e sweep. */
size_t perf_next_size(const struct perf_opts *o, size_t size);

/* Host of rank `rank` when `nhosts` hosts share `nranks` ranks (blocks of
 * consecutive ranks per host, as one launches ranks per node), and the rank's
 * index on that host. */
int perf_rank_host(int rank, int nranks, int nhosts);
int perf_rank_local(int rank, int nranks, int nhosts);
/* Split a comma list into at most max entries copied into buf; count or -1. */
int perf_split_list(const char *list, char *buf, size_t buflen, char **items, int max);

#endif
