/*
 * linkpass-perf: option parsing.  nccl-tests' single-letter flags keep their
 * meaning (-b -e -f -i -n -w -c -d -o -R), so a command line written for
 * all_reduce_perf works here with --op added.
 */
#include "opts.h"
#include "gpumem.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const op_names[PERF_NOPS] = {"sendrecv", "all_reduce", "all_gather", "reduce_scatter", "alltoall"};
static const char *const dtype_names[PERF_NDTYPES] = {"int8",  "uint8",  "int32", "uint32",
                                                      "int64", "uint64", "float", "double"};
static const size_t dtype_sizes[PERF_NDTYPES] = {1, 1, 4, 4, 8, 8, 4, 8};
static const char *const redop_names[PERF_NREDOPS] = {"sum", "min", "max"};

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (err && errlen) vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -1;
}

const char *perf_op_name(enum perf_op op) { return (unsigned)op < PERF_NOPS ? op_names[op] : "?"; }
const char *perf_dtype_name(enum perf_dtype t) { return (unsigned)t < PERF_NDTYPES ? dtype_names[t] : "?"; }
const char *perf_redop_name(enum perf_redop r) { return (unsigned)r < PERF_NREDOPS ? redop_names[r] : "?"; }
size_t perf_dtype_size(enum perf_dtype t) { return (unsigned)t < PERF_NDTYPES ? dtype_sizes[t] : 0; }

int perf_op_parse(const char *s, enum perf_op *op) {
  for (int i = 0; i < PERF_NOPS; i++) {
    if (strcmp(s, op_names[i]) == 0) {
      *op = (enum perf_op)i;
      return 0;
    }
  }
  /* nccl-tests binary names, for copy-paste: all_reduce_perf -> all_reduce. */
  for (int i = 0; i < PERF_NOPS; i++) {
    size_t n = strlen(op_names[i]);
    if (strncmp(s, op_names[i], n) == 0 && strcmp(s + n, "_perf") == 0) {
      *op = (enum perf_op)i;
      return 0;
    }
  }
  return -1;
}

int perf_dtype_parse(const char *s, enum perf_dtype *t) {
  for (int i = 0; i < PERF_NDTYPES; i++) {
    if (strcmp(s, dtype_names[i]) == 0) {
      *t = (enum perf_dtype)i;
      return 0;
    }
  }
  /* NCCL's aliases */
  if (strcmp(s, "char") == 0) *t = PERF_INT8;
  else if (strcmp(s, "int") == 0) *t = PERF_INT32;
  else if (strcmp(s, "float32") == 0) *t = PERF_FLOAT;
  else if (strcmp(s, "float64") == 0) *t = PERF_DOUBLE;
  else return -1;
  return 0;
}

int perf_redop_parse(const char *s, enum perf_redop *r) {
  for (int i = 0; i < PERF_NREDOPS; i++) {
    if (strcmp(s, redop_names[i]) == 0) {
      *r = (enum perf_redop)i;
      return 0;
    }
  }
  return -1;
}

int perf_parse_size(const char *s, const char *what, size_t *out, char *err, size_t errlen) {
  const char *p = s;
  unsigned long long whole = 0, frac_num = 0, frac_den = 1;
  int digits = 0;

  if (!s) return fail(err, errlen, "%s: missing size", what);
  while (isdigit((unsigned char)*p)) {
    if (whole > (~0ull - 9) / 10) goto too_big;
    whole = whole * 10 + (unsigned)(*p++ - '0');
    digits++;
  }
  if (*p == '.') {
    p++;
    while (isdigit((unsigned char)*p)) {
      if (frac_den < 1000000000ull) { /* more digits than that cannot matter */
        frac_num = frac_num * 10 + (unsigned)(*p - '0');
        frac_den *= 10;
      }
      p++;
      digits++;
    }
  }
  if (digits == 0) goto bad;
  unsigned long long unit = 1;
  switch (*p) {
  case 'k': case 'K': unit = 1ull << 10; p++; break;
  case 'm': case 'M': unit = 1ull << 20; p++; break;
  case 'g': case 'G': unit = 1ull << 30; p++; break;
  case 't': case 'T': unit = 1ull << 40; p++; break;
  default: break;
  }
  /* accept an optional B (and iB after a unit): "64MB", "64MiB" */
  if (unit > 1 && *p == 'i' && p[1] == 'B') p += 2;
  else if (*p == 'B') p++;
  if (*p != '\0') goto bad;
  if (whole > (~0ull) / unit) goto too_big;
  unsigned long long bytes = whole * unit;
  if (frac_num) {
    /* the fraction must give a whole number of bytes */
    if ((frac_num * unit) % frac_den != 0)
      return fail(err, errlen, "invalid size \"%s\" for %s: not a whole number of bytes", s, what);
    bytes += frac_num * unit / frac_den;
  }
  if (bytes > (1ull << 40)) goto too_big; /* NCCL_MAX_NET_SIZE_BYTES */
  *out = (size_t)bytes;
  return 0;
bad:
  return fail(err, errlen,
              "invalid size \"%s\" for %s: expected a number of bytes with an optional K, M or G suffix "
              "(powers of 1024), e.g. 8, 1K, 64M",
              s, what);
too_big:
  return fail(err, errlen, "invalid size \"%s\" for %s: larger than 1T", s, what);
}

int perf_parse_int(const char *s, const char *what, long lo, long hi, long *out, char *err, size_t errlen) {
  char *end;
  errno = 0;
  long v = s ? strtol(s, &end, 10) : 0;
  if (!s || *s == '\0' || *end != '\0' || errno) return fail(err, errlen, "invalid value \"%s\" for %s: expected an integer", s ? s : "", what);
  if (v < lo || v > hi) return fail(err, errlen, "invalid value %ld for %s: must be between %ld and %ld", v, what, lo, hi);
  *out = v;
  return 0;
}

int perf_parse_seconds(const char *s, const char *what, double *out, char *err, size_t errlen) {
  char *end;
  errno = 0;
  double v = s ? strtod(s, &end) : 0;
  if (!s || *s == '\0' || *end != '\0' || errno || !isfinite(v) || v < 0)
    return fail(err, errlen, "invalid value \"%s\" for %s: expected a non-negative number of seconds", s ? s : "", what);
  *out = v;
  return 0;
}

int perf_split_list(const char *list, char *buf, size_t buflen, char **items, int max) {
  size_t n = strlen(list);
  if (n + 1 > buflen) return -1;
  memcpy(buf, list, n + 1);
  int count = 0;
  char *save = NULL;
  for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    if (count == max) return -1;
    items[count++] = t;
  }
  return count;
}

size_t perf_next_size(const struct perf_opts *o, size_t size) {
  /* nccl-tests: multiply when the factor is above 1, else add -i bytes.  A
   * zero size would multiply to itself forever: step to one element. */
  if (o->factor > 1) return size == 0 ? perf_dtype_size(o->dtype) : size * (size_t)o->factor;
  return size + o->stepbytes;
}

int perf_rank_host(int rank, int nranks, int nhosts) {
  if (nhosts <= 1 || nranks <= 0) return 0;
  return (int)((long)rank * nhosts / nranks);
}

int perf_rank_local(int rank, int nranks, int nhosts) {
  int h = perf_rank_host(rank, nranks, nhosts);
  int first = rank;
  while (first > 0 && perf_rank_host(first - 1, nranks, nhosts) == h) first--;
  return rank - first;
}

static void defaults(struct perf_opts *o) {
  memset(o, 0, sizeof(*o));
  o->op = PERF_ALL_REDUCE;
  o->dtype = PERF_FLOAT;
  o->redop = PERF_SUM;
  o->minbytes = 32 << 20; /* nccl-tests defaults */
  o->maxbytes = 32 << 20;
  o->factor = 1;
  o->stepbytes = 1 << 20;
  o->iters = 20;
  o->warmup = 5;
  o->check = 1;
  o->nranks = 2;
  o->channels = 1;
  o->slots = 8;            /* NCCL_STEPS */
  o->step_bytes = 512 << 10; /* NCCL's 4 MiB Simple buffer / NCCL_STEPS */
  o->dev = -1;
  o->timeout = 600;
  o->conn_timeout = 60;
  o->stall_timeout = 60;
  o->rank = -1;
  o->local_rank = -1;
}

enum {
  OPT_OP = 1000,
  OPT_DURATION,
  OPT_TIMEOUT,
  OPT_CONN_TIMEOUT,
  OPT_STALL_TIMEOUT,
  OPT_GAP_LOG,
  OPT_ABI,
  OPT_PLUGIN,
  OPT_HOSTS,
  OPT_FABRIC,
  OPT_SIMVERBS,
  OPT_RANK_ENV,
  OPT_CHANNELS,
  OPT_SAME_DEV,
  OPT_SLOTS,
  OPT_STEP_BYTES,
  OPT_REG_PAD,
  OPT_MEM,
  OPT_DEV,
  OPT_RANK,
  OPT_LOCAL_RANK,
  OPT_RDV,
  OPT_COMM_ID,
  OPT_RDV_ADDR,
};

static const struct option long_opts[] = {
    {"minbytes", required_argument, 0, 'b'},
    {"maxbytes", required_argument, 0, 'e'},
    {"stepfactor", required_argument, 0, 'f'},
    {"stepbytes", required_argument, 0, 'i'},
    {"iters", required_argument, 0, 'n'},
    {"warmup_iters", required_argument, 0, 'w'},
    {"check", required_argument, 0, 'c'},
    {"datatype", required_argument, 0, 'd'},
    {"op", required_argument, 0, OPT_OP},
    {"redop", required_argument, 0, 'o'},
    {"local_register", required_argument, 0, 'R'},
    {"nranks", required_argument, 0, 'N'},
    {"duration", required_argument, 0, OPT_DURATION},
    {"timeout", required_argument, 0, OPT_TIMEOUT},
    {"connect-timeout", required_argument, 0, OPT_CONN_TIMEOUT},
    {"stall-timeout", required_argument, 0, OPT_STALL_TIMEOUT},
    {"gap-log", required_argument, 0, OPT_GAP_LOG},
    {"abi", required_argument, 0, OPT_ABI},
    {"plugin", required_argument, 0, OPT_PLUGIN},
    {"hosts", required_argument, 0, OPT_HOSTS},
    {"fabric", required_argument, 0, OPT_FABRIC},
    {"simverbs", required_argument, 0, OPT_SIMVERBS},
    {"rank-env", required_argument, 0, OPT_RANK_ENV},
    {"channels", required_argument, 0, OPT_CHANNELS},
    {"same-dev", no_argument, 0, OPT_SAME_DEV},
    {"slots", required_argument, 0, OPT_SLOTS},
    {"step-bytes", required_argument, 0, OPT_STEP_BYTES},
    {"reg-pad", required_argument, 0, OPT_REG_PAD},
    {"mem", required_argument, 0, OPT_MEM},
    {"dev", required_argument, 0, OPT_DEV},
    {"rank", required_argument, 0, OPT_RANK},
    {"local-rank", required_argument, 0, OPT_LOCAL_RANK},
    {"rdv", required_argument, 0, OPT_RDV},
    {"comm-id", required_argument, 0, OPT_COMM_ID},
    {"rendezvous-addr", required_argument, 0, OPT_RDV_ADDR},
    {"verbose", no_argument, 0, 'v'},
    {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};

int perf_opts_parse(struct perf_opts *o, int argc, char **argv, int *help, char *err, size_t errlen) {
  long v;
  char what[32];
  defaults(o);
  *help = 0;
  optind = 1;
  opterr = 0; /* we word the errors ourselves */
  for (;;) {
    int idx = -1;
    int c = getopt_long(argc, argv, ":b:e:f:i:n:w:c:d:o:R:N:vh", long_opts, &idx);
    if (c == -1) break;
    if (idx >= 0) snprintf(what, sizeof(what), "--%s", long_opts[idx].name);
    else snprintf(what, sizeof(what), "-%c", c);
    switch (c) {
    case 'b':
      if (perf_parse_size(optarg, what, &o->minbytes, err, errlen)) return -1;
      break;
    case 'e':
      if (perf_parse_size(optarg, what, &o->maxbytes, err, errlen)) return -1;
      break;
    case 'f':
      if (perf_parse_int(optarg, what, 0, 1024, &v, err, errlen)) return -1;
      o->factor = (int)v;
      break;
    case 'i':
      if (perf_parse_size(optarg, what, &o->stepbytes, err, errlen)) return -1;
      break;
    case 'n':
      if (perf_parse_int(optarg, what, 1, 1000000000, &v, err, errlen)) return -1;
      o->iters = (int)v;
      break;
    case 'w':
      if (perf_parse_int(optarg, what, 0, 1000000000, &v, err, errlen)) return -1;
      o->warmup = (int)v;
      break;
    case 'c':
      if (perf_parse_int(optarg, what, 0, 2, &v, err, errlen)) return -1;
      o->check = (int)v;
      break;
    case 'R':
      if (perf_parse_int(optarg, what, 0, 1, &v, err, errlen)) return -1;
      o->reg = (int)v;
      break;
    case 'd':
      if (perf_dtype_parse(optarg, &o->dtype))
        return fail(err, errlen,
                    "invalid data type \"%s\" for %s: expected int8, uint8, int32, uint32, int64, uint64, float or double",
                    optarg, what);
      break;
    case 'o':
      if (perf_redop_parse(optarg, &o->redop))
        return fail(err, errlen, "invalid reduction \"%s\" for %s: expected sum, min or max", optarg, what);
      break;
    case OPT_OP:
      if (perf_op_parse(optarg, &o->op))
        return fail(err, errlen,
                    "invalid operation \"%s\" for --op: expected sendrecv, all_reduce, all_gather, reduce_scatter or alltoall",
                    optarg);
      break;
    case 'N':
      if (perf_parse_int(optarg, what, 2, PERF_MAX_RANKS, &v, err, errlen)) return -1;
      o->nranks = (int)v;
      break;
    case OPT_DURATION:
      if (perf_parse_seconds(optarg, what, &o->duration, err, errlen)) return -1;
      break;
    case OPT_TIMEOUT:
      if (perf_parse_seconds(optarg, what, &o->timeout, err, errlen)) return -1;
      break;
    case OPT_CONN_TIMEOUT:
      if (perf_parse_seconds(optarg, what, &o->conn_timeout, err, errlen)) return -1;
      break;
    case OPT_STALL_TIMEOUT:
      if (perf_parse_seconds(optarg, what, &o->stall_timeout, err, errlen)) return -1;
      break;
    case OPT_GAP_LOG: o->gap_log = optarg; break;
    case OPT_ABI:
      if (perf_parse_int(optarg, what, 0, 12, &v, err, errlen)) return -1;
      if (v != 0 && v < 8) return fail(err, errlen, "invalid value %ld for --abi: must be 8, 9, 10, 11 or 12", v);
      o->abi = (int)v;
      break;
    case OPT_PLUGIN: o->plugin = optarg; break;
    case OPT_HOSTS: o->hosts = optarg; break;
    case OPT_FABRIC: o->fabric = optarg; break;
    case OPT_SIMVERBS: o->simverbs = optarg; break;
    case OPT_RANK_ENV:
      if (!strchr(optarg, '=') || optarg[0] == '=')
        return fail(err, errlen, "invalid value \"%s\" for --rank-env: expected NAME=VALUE", optarg);
      if (o->nrank_env == PERF_MAX_RANK_ENV)
        return fail(err, errlen, "too many --rank-env options (at most %d)", PERF_MAX_RANK_ENV);
      o->rank_env[o->nrank_env++] = optarg;
      break;
    case OPT_SAME_DEV: o->same_dev = 1; break;
    case OPT_CHANNELS:
      if (perf_parse_int(optarg, what, 1, PERF_MAX_CHANNELS, &v, err, errlen)) return -1;
      o->channels = (int)v;
      break;
    case OPT_SLOTS:
      if (perf_parse_int(optarg, what, 1, PERF_MAX_SLOTS, &v, err, errlen)) return -1;
      o->slots = (int)v;
      break;
    case OPT_STEP_BYTES:
      if (perf_parse_size(optarg, what, &o->step_bytes, err, errlen)) return -1;
      break;
    case OPT_REG_PAD:
      if (perf_parse_int(optarg, what, 0, 1 << 20, &v, err, errlen)) return -1;
      o->reg_pad = (size_t)v;
      break;
    case OPT_MEM:
      if ((o->mem = perf_mem_parse(optarg)) < 0) {
        snprintf(err, errlen, "%s '%s' is not a memory kind: use host, cuda or dmabuf", what, optarg);
        return -1;
      }
      break;
    case OPT_DEV:
      if (perf_parse_int(optarg, what, 0, 1023, &v, err, errlen)) return -1;
      o->dev = (int)v;
      break;
    case OPT_RANK:
      if (perf_parse_int(optarg, what, 0, PERF_MAX_RANKS - 1, &v, err, errlen)) return -1;
      o->rank = (int)v;
      break;
    case OPT_LOCAL_RANK:
      if (perf_parse_int(optarg, what, 0, PERF_MAX_RANKS - 1, &v, err, errlen)) return -1;
      o->local_rank = (int)v;
      break;
    case OPT_RDV: o->rdv = optarg; break;
    case OPT_RDV_ADDR: {
      struct in_addr ia;
      if (inet_pton(AF_INET, optarg, &ia) != 1)
        return fail(err, errlen, "invalid value \"%s\" for --rendezvous-addr: expected an IPv4 address", optarg);
      o->rdv_addr = optarg;
      break;
    }
    case OPT_COMM_ID: {
      char *end;
      errno = 0;
      o->comm_id = strtoull(optarg, &end, 16);
      if (*optarg == '\0' || *end != '\0' || errno) return fail(err, errlen, "invalid value \"%s\" for --comm-id: expected hex", optarg);
      break;
    }
    case 'v': o->verbose++; break;
    case 'h': *help = 1; return 0;
    case ':': return fail(err, errlen, "option %s needs a value", argv[optind - 1]);
    case '?':
    default:
      if (optopt) return fail(err, errlen, "unknown option -%c (see --help)", optopt);
      return fail(err, errlen, "unknown option %s (see --help)", argv[optind - 1]);
    }
  }
  if (optind < argc) return fail(err, errlen, "unexpected argument \"%s\" (see --help)", argv[optind]);
  return perf_opts_validate(o, err, errlen);
}

int perf_opts_validate(const struct perf_opts *o, char *err, size_t errlen) {
  if (o->minbytes > o->maxbytes && o->duration == 0) /* --duration only uses -e */
    return fail(err, errlen, "-b (%zu bytes) is larger than -e (%zu bytes)", o->minbytes, o->maxbytes);
  if (o->factor <= 1 && o->stepbytes == 0 && o->minbytes != o->maxbytes && o->duration == 0)
    return fail(err, errlen, "-i 0 never gets from -b to -e: use -f 2 or more, or -i BYTES");
  if (o->step_bytes < 128 || o->step_bytes % 128)
    return fail(err, errlen, "--step-bytes %zu: must be a multiple of 128 bytes, at least 128", o->step_bytes);
  if (o->step_bytes > (1u << 30)) return fail(err, errlen, "--step-bytes %zu: at most 1G", o->step_bytes);
  if (o->redop != PERF_SUM && (o->op == PERF_SENDRECV || o->op == PERF_ALL_GATHER || o->op == PERF_ALLTOALL))
    return fail(err, errlen, "-o %s: %s does not reduce", perf_redop_name(o->redop), perf_op_name(o->op));
  if (o->timeout <= 0) return fail(err, errlen, "--timeout must be positive");
  if (o->duration > 0 && o->duration >= o->timeout)
    return fail(err, errlen, "--duration %.0f s does not fit in --timeout %.0f s: raise --timeout", o->duration,
                o->timeout);
  if (o->conn_timeout <= 0) return fail(err, errlen, "--connect-timeout must be positive");
  if (o->stall_timeout <= 0) return fail(err, errlen, "--stall-timeout must be positive");
  if (o->rank >= 0 && o->rank >= o->nranks)
    return fail(err, errlen, "--rank %d is not below -N %d", o->rank, o->nranks);
  if (o->rank >= 0 && !o->rdv) return fail(err, errlen, "--rank needs --rdv HOST:PORT (the launcher passes both)");
  if (o->fabric && !o->hosts) return fail(err, errlen, "--fabric needs --hosts a,b,... (the simulated hosts to run ranks on)");
  if (o->hosts) {
    char buf[1024];
    char *items[PERF_MAX_RANKS];
    int n = perf_split_list(o->hosts, buf, sizeof(buf), items, PERF_MAX_RANKS);
    if (n <= 0) return fail(err, errlen, "invalid --hosts \"%s\": expected a comma list of host names", o->hosts);
    if (n > o->nranks) return fail(err, errlen, "--hosts names %d hosts but only %d ranks (-N) run", n, o->nranks);
  }
  return 0;
}

void perf_opts_usage(const char *prog) {
  printf(
      "usage: %s [options]\n"
      "Plays NCCL's part over a net plugin: starts N rank processes, connects them through the\n"
      "plugin and runs checked collectives on host memory, printing an nccl-tests style table.\n"
      "\n"
      "What to run (nccl-tests flags):\n"
      "  --op NAME           sendrecv | all_reduce | all_gather | reduce_scatter | alltoall [all_reduce]\n"
      "  -b, --minbytes SIZE smallest size (8, 1K, 64M, 1G) [32M]\n"
      "  -e, --maxbytes SIZE largest size [32M]\n"
      "  -f, --stepfactor N  multiply the size by N between rows (N > 1) [1]\n"
      "  -i, --stepbytes SIZE add SIZE between rows when -f is 1 [1M]\n"
      "  -n, --iters N       timed iterations per size [20]\n"
      "  -w, --warmup_iters N untimed iterations per size [5]\n"
      "  -c, --check 0|1|2   1: check the last timed and one extra iteration (nccl-tests);\n"
      "                      2: fresh data and a check for every iteration [1]\n"
      "  -d, --datatype T    int8 uint8 int32 uint32 int64 uint64 float double [float]\n"
      "  -o, --redop OP      sum | min | max [sum]\n"
      "  -R, --local_register 0|1  register user buffers (zero copy) instead of staging [0]\n"
      "  --duration SEC      loop the largest size for SEC seconds, a line per second\n"
      "\n"
      "How:\n"
      "  -N, --nranks N      rank processes [2]\n"
      "  --hosts a,b         simulated hosts; ranks are spread over them in blocks\n"
      "  --fabric NAME       start each rank with `simverbs run --host H --fabric NAME --`\n"
      "  --simverbs PATH     the simverbs tool [next to this binary's build tree, else PATH]\n"
      "  --rank-env N=V      set N=V for every rank started directly (%%r rank, %%l local rank, %%h host)\n"
      "  --rendezvous-addr IP  listen for the ranks on IP, an address of the launcher's host that\n"
      "                      every rank reaches (a netns fabric: the management address) [127.0.0.1]\n"
      "  --plugin PATH       plugin library (default: NCCL_NET_PLUGIN rules, then libnccl-net.so)\n"
      "  --abi 8..12         use only ncclNetPlugin_vN (default: newest exported)\n"
      "  --channels N        connections per peer, data split over them, 1..1024 [1]\n"
      "  --same-dev          every channel on the first device, not one device after another\n"
      "  --slots N           messages in flight per connection, like NCCL_STEPS [8]\n"
      "  --step-bytes SIZE   largest message, one slot [512K]\n"
      "  --reg-pad BYTES     register (and allocate) every buffer BYTES longer than its page\n"
      "                      multiple, e.g. 64: registrations that end inside a page [0]\n"
      "  --mem host|cuda|dmabuf  where registered buffers live, registered as NCCL core does:\n"
      "                      regMr(HOST), regMr(CUDA) through peer memory, or regMrDmaBuf;\n"
      "                      GPU kinds are flushed (iflush) after each receive [host]\n"
      "  --dev N             first device index (default: the rank's index on its host)\n"
      "  --timeout SEC       whole run [600]\n"
      "  --connect-timeout SEC  listen/connect/accept [60]\n"
      "  --stall-timeout SEC no completion for this long fails the run [60]\n"
      "  --gap-log FILE      append \"rank before after\" (CLOCK_MONOTONIC s) for each pause of\n"
      "                      1 ms or more between a rank's completions (failover timing)\n"
      "  -v, --verbose       more output (repeat for more)\n"
      "\n"
      "Exit status: 0 all results correct, 1 wrong data, 2 error or timeout, 130 interrupted.\n",
      prog);
}
