/* nccl-smoke: one rank of a small, checked NCCL job on a real GPU.
 *
 * scripts/gpu-check.sh starts two of these (one process per rank, both on
 * GPU 0, each under `simverbs run` as a different simulated host) to see
 * real NCCL carry all_reduce and sendrecv through linkpass, and through
 * NCCL's own IB transport for comparison.  Every iteration is checked: the
 * send buffer gets a pattern that depends on the rank, the size and the
 * iteration, and the result is compared with what it must be on the host.
 *
 * Plain C against libcudart and libnccl: no kernels, no nvcc.
 *
 * Exit status: 0 every iteration completed and every element was right;
 * 1 an NCCL or CUDA error, a timeout, or wrong elements; 2 no NVIDIA GPU is
 * visible (nothing else was tried); 64 a usage error. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <link.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_NO_GPU = 2, EXIT_USAGE = 64 };
enum op_kind { OP_ALL_REDUCE, OP_SENDRECV };

struct opts {
  int probe; /* --probe: only say whether a GPU is visible */
  int rank, nranks, device;
  const char *id_file;
  enum op_kind op;
  size_t min_bytes, max_bytes;
  size_t factor;
  int iters, warmup;
  double duration;     /* > 0: repeat max_bytes this long */
  double timeout;      /* the longest one operation or finalize may take */
  double init_timeout; /* the longest ncclCommInitRank may take */
  double id_wait;      /* how long rank != 0 waits for the id file */
};

/* What the error paths need: the communicator to abort, the rank to name. */
static ncclComm_t g_comm;
static int g_rank = -1;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double unix_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_s(double s) {
  struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static void say(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(FILE *f, const char *fmt, ...) {
  va_list ap;
  if (g_rank >= 0)
    fprintf(f, "nccl-smoke: rank %d: ", g_rank);
  else
    fputs("nccl-smoke: ", f);
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fputc('\n', f);
  fflush(f);
}

/* ---- a watchdog for calls that may block inside NCCL (init, the first
 * operation's connection setup, finalize, abort): SIGALRM writes a message
 * prepared in advance and ends the process. */
static char g_alarm_msg[512];
static size_t g_alarm_len;

static void on_alarm(int sig) {
  (void)sig;
  ssize_t w = write(STDERR_FILENO, g_alarm_msg, g_alarm_len);
  (void)w;
  _exit(EXIT_FAIL);
}

static void arm(double seconds, const char *what) {
  int n = snprintf(g_alarm_msg, sizeof(g_alarm_msg),
                   "nccl-smoke: rank %d: %s did not return within %.0f s: giving up (the peer rank may be gone, or "
                   "NCCL is stuck; see NCCL_DEBUG=INFO output)\n",
                   g_rank, what, seconds);
  g_alarm_len = n < 0 ? 0 : (size_t)n < sizeof(g_alarm_msg) ? (size_t)n : sizeof(g_alarm_msg) - 1;
  unsigned s = (unsigned)seconds;
  alarm(s < 1 ? 1 : s);
}

static void disarm(void) { alarm(0); }

static void abort_comm(void) {
  if (!g_comm) return;
  ncclComm_t c = g_comm;
  g_comm = NULL;
  arm(30, "ncclCommAbort");
  ncclResult_t r = ncclCommAbort(c);
  disarm();
  if (r != ncclSuccess) say(stderr, "ncclCommAbort failed: %s (%d)", ncclGetErrorString(r), (int)r);
}

/* _exit, not exit: after a failure, the CUDA runtime's and NCCL's exit-time
 * teardown may wait on the very thing that failed. */
static _Noreturn void die(void) {
  abort_comm();
  say(stderr, "FAILED");
  fflush(NULL);
  _exit(EXIT_FAIL);
}

static void check_cuda(cudaError_t e, const char *call) {
  if (e == cudaSuccess) return;
  say(stderr, "%s failed: %s: %s (%d)", call, cudaGetErrorName(e), cudaGetErrorString(e), (int)e);
  die();
}

static void check_nccl(ncclResult_t r, const char *call) {
  if (r == ncclSuccess) return;
  const char *last = ncclGetLastError(g_comm);
  say(stderr, "%s failed: %s (%d); NCCL's last error: %s", call, ncclGetErrorString(r), (int)r,
      last && *last ? last : "(none)");
  die();
}

#define CUDA(call) check_cuda((call), #call)
#define NCCL(call) check_nccl((call), #call)

/* ---- command line */

static void usage(FILE *f) {
  fputs(
      "usage: nccl-smoke --probe\n"
      "       nccl-smoke --rank R --id-file PATH [--nranks N] [--op all_reduce|sendrecv] [-b MIN] [-e MAX]\n"
      "                  [-f FACTOR] [-n ITERS] [-w WARMUP] [--duration S] [--timeout S] [--init-timeout S]\n"
      "                  [--id-wait S] [--device D]\n"
      "  --probe          say whether an NVIDIA GPU is visible: exit 0 if so, 2 if not\n"
      "  --rank R         this process's rank (0 .. N-1); one process per rank\n"
      "  --nranks N       ranks in the job (default 2)\n"
      "  --id-file PATH   rendezvous: rank 0 writes NCCL's unique id there (write + rename), the\n"
      "                   others wait for it (--id-wait, default 60 s); use a fresh path per job\n"
      "  --op OP          all_reduce (int32 sum) or sendrecv (to rank+1, from rank-1); default all_reduce\n"
      "  -b, -e SIZE      smallest and largest message in bytes, K/M/G suffixes (default 8 .. 64M)\n"
      "  -f FACTOR        size step, an integer >= 2 (default 2)\n"
      "  -n ITERS         checked, timed iterations per size (default 5)\n"
      "  -w WARMUP        checked, untimed iterations per size first (default 1)\n"
      "  --duration S     repeat the largest size for S seconds instead of the sweep, one\n"
      "                   'progress' line per iteration\n"
      "  --timeout S      the longest one operation (or finalize) may take (default 60)\n"
      "  --init-timeout S the longest ncclCommInitRank may take (default 90)\n"
      "  --device D       CUDA device (default 0)\n"
      "exit: 0 all iterations right, 1 an error or wrong elements, 2 no NVIDIA GPU visible, 64 usage\n",
      f);
}

static _Noreturn void bad_usage(const char *fmt, const char *arg) {
  fputs("nccl-smoke: ", stderr);
  fprintf(stderr, fmt, arg);
  fputs("\n", stderr);
  usage(stderr);
  exit(EXIT_USAGE);
}

/* "64", "8K", "256M", "1G" (powers of 1024). */
static int parse_size(const char *s, size_t *out) {
  char *end;
  errno = 0;
  if (*s < '0' || *s > '9') return -1;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s) return -1;
  unsigned long long mul = 1;
  switch (*end) {
  case '\0': break;
  case 'k':
  case 'K':
    mul = 1ull << 10;
    end++;
    break;
  case 'm':
  case 'M':
    mul = 1ull << 20;
    end++;
    break;
  case 'g':
  case 'G':
    mul = 1ull << 30;
    end++;
    break;
  default: return -1;
  }
  if (*end != '\0' || (v && mul > ULLONG_MAX / v) || v * mul > SIZE_MAX) return -1;
  *out = (size_t)(v * mul);
  return 0;
}

static int parse_int(const char *s, int lo, int hi, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

static int parse_secs(const char *s, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !(v > 0) || v > 86400) return -1;
  *out = v;
  return 0;
}

static void parse_args(int argc, char **argv, struct opts *o) {
  *o = (struct opts){.rank = -1,
                     .nranks = 2,
                     .op = OP_ALL_REDUCE,
                     .min_bytes = 8,
                     .max_bytes = 64u << 20,
                     .factor = 2,
                     .iters = 5,
                     .warmup = 1,
                     .timeout = 60,
                     .init_timeout = 90,
                     .id_wait = 60};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      exit(EXIT_OK);
    }
    if (!strcmp(a, "--probe")) {
      o->probe = 1;
      continue;
    }
    if (i + 1 >= argc) bad_usage("%s needs a value (or is not an option)", a);
    const char *v = argv[++i];
    int n;
    if (!strcmp(a, "--rank")) {
      if (parse_int(v, 0, 1 << 20, &o->rank)) bad_usage("bad --rank %s", v);
    } else if (!strcmp(a, "--nranks")) {
      if (parse_int(v, 2, 1 << 20, &o->nranks)) bad_usage("bad --nranks %s (at least 2)", v);
    } else if (!strcmp(a, "--device")) {
      if (parse_int(v, 0, 1024, &o->device)) bad_usage("bad --device %s", v);
    } else if (!strcmp(a, "--id-file")) {
      o->id_file = v;
    } else if (!strcmp(a, "--op")) {
      if (!strcmp(v, "all_reduce"))
        o->op = OP_ALL_REDUCE;
      else if (!strcmp(v, "sendrecv"))
        o->op = OP_SENDRECV;
      else
        bad_usage("unknown --op %s (all_reduce or sendrecv)", v);
    } else if (!strcmp(a, "-b")) {
      if (parse_size(v, &o->min_bytes) || o->min_bytes == 0) bad_usage("bad -b %s (bytes >= 1, K/M/G suffixes)", v);
    } else if (!strcmp(a, "-e")) {
      if (parse_size(v, &o->max_bytes) || o->max_bytes == 0) bad_usage("bad -e %s (bytes >= 1, K/M/G suffixes)", v);
    } else if (!strcmp(a, "-f")) {
      if (parse_int(v, 2, 1024, &n)) bad_usage("bad -f %s (an integer >= 2)", v);
      o->factor = (size_t)n;
    } else if (!strcmp(a, "-n")) {
      if (parse_int(v, 1, 1 << 24, &o->iters)) bad_usage("bad -n %s", v);
    } else if (!strcmp(a, "-w")) {
      if (parse_int(v, 0, 1 << 24, &o->warmup)) bad_usage("bad -w %s", v);
    } else if (!strcmp(a, "--duration")) {
      if (parse_secs(v, &o->duration)) bad_usage("bad --duration %s (seconds > 0)", v);
    } else if (!strcmp(a, "--timeout")) {
      if (parse_secs(v, &o->timeout)) bad_usage("bad --timeout %s (seconds > 0)", v);
    } else if (!strcmp(a, "--init-timeout")) {
      if (parse_secs(v, &o->init_timeout)) bad_usage("bad --init-timeout %s (seconds > 0)", v);
    } else if (!strcmp(a, "--id-wait")) {
      if (parse_secs(v, &o->id_wait)) bad_usage("bad --id-wait %s (seconds > 0)", v);
    } else {
      bad_usage("unknown option %s", a);
    }
  }
  if (o->probe) return;
  if (o->rank < 0) bad_usage("%s", "--rank is required");
  if (o->rank >= o->nranks) bad_usage("%s", "--rank must be below --nranks");
  if (!o->id_file) bad_usage("%s", "--id-file is required");
  if (o->min_bytes > o->max_bytes) bad_usage("%s", "-b must not be larger than -e");
}

/* ---- the GPU, or a clear word that there is none */

static void gpu_or_exit(const struct opts *o, int *ndev) {
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv); /* 0: no CUDA driver (libcuda.so.1) could be loaded */
  const char *vis = getenv("CUDA_VISIBLE_DEVICES");
  char checked[256], driver[64];
  if (drv)
    snprintf(driver, sizeof(driver), "CUDA driver %d.%d", drv / 1000, drv % 1000 / 10);
  else
    snprintf(driver, sizeof(driver), "no CUDA driver (libcuda.so.1) loaded");
  snprintf(checked, sizeof(checked),
           "checked: cudaGetDeviceCount() with CUDA runtime %d.%d, %s, CUDA_VISIBLE_DEVICES=%s", rt / 1000,
           rt % 1000 / 10, driver, vis ? (*vis ? vis : "(empty)") : "(unset)");
  cudaError_t e = cudaGetDeviceCount(ndev);
  if (e != cudaSuccess || *ndev <= 0) {
    if (e != cudaSuccess)
      say(stderr,
          "no NVIDIA GPU is visible: cudaGetDeviceCount() returned %s (%s); %s; this program needs an NVIDIA GPU",
          cudaGetErrorName(e), cudaGetErrorString(e), checked);
    else
      say(stderr,
          "no NVIDIA GPU is visible: cudaGetDeviceCount() found 0 devices; %s; this program needs an NVIDIA GPU",
          checked);
    /* _exit: nothing to tear down, and a sanitizer build's exit-time leak
     * report on the CUDA runtime must not turn 2 into another status. */
    fflush(NULL);
    _exit(EXIT_NO_GPU);
  }
  if (o->device >= *ndev) {
    say(stderr, "--device %d, but only %d CUDA device(s) are visible", o->device, *ndev);
    exit(EXIT_FAIL);
  }
}

static void describe_gpu(int device, int ndev) {
  struct cudaDeviceProp p;
  char bus[64] = "?";
  int rt = 0, drv = 0, nv = 0;
  CUDA(cudaGetDeviceProperties(&p, device));
  if (cudaDeviceGetPCIBusId(bus, sizeof(bus), device) != cudaSuccess) snprintf(bus, sizeof(bus), "?");
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  NCCL(ncclGetVersion(&nv));
  /* Two ranks share the GPU: an exclusive-process GPU takes only one. */
  int mode = -1;
  const char *mode_s = "unknown";
  if (cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, device) == cudaSuccess)
    mode_s = mode == cudaComputeModeDefault            ? "default"
             : mode == cudaComputeModeExclusiveProcess ? "exclusive-process"
             : mode == cudaComputeModeProhibited       ? "prohibited"
                                                       : "other";
  printf("# device %d of %d: %s, PCI %s, compute capability %d.%d, %.1f GiB, compute mode %s\n", device, ndev, p.name,
         bus, p.major, p.minor, (double)p.totalGlobalMem / (1u << 30), mode_s);
  printf("# NCCL %d.%d.%d (nccl.h %d.%d.%d), CUDA runtime %d.%d, driver %d.%d\n", nv / 10000, nv / 100 % 100, nv % 100,
         NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, rt / 1000, rt % 1000 / 10, drv / 1000, drv % 1000 / 10);
}

/* ---- rendezvous through a file */

static void write_id(const char *path, const ncclUniqueId *id) {
  char tmp[PATH_MAX], hex[2 * NCCL_UNIQUE_ID_BYTES + 2];
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) snprintf(hex + 2 * i, 3, "%02x", (unsigned char)id->internal[i]);
  strcat(hex, "\n");
  if (snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof(tmp)) {
    say(stderr, "--id-file path is too long: %s", path);
    die();
  }
  FILE *f = fopen(tmp, "w");
  int ok = f && fputs(hex, f) >= 0;
  if (f && fclose(f) != 0) ok = 0;
  if (!ok || rename(tmp, path) != 0) {
    say(stderr, "cannot write the NCCL unique id to %s: %s", path, strerror(errno));
    unlink(tmp);
    die();
  }
}

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static void read_id(const char *path, double wait_s, ncclUniqueId *id) {
  double deadline = now_s() + wait_s;
  for (;;) {
    FILE *f = fopen(path, "r");
    if (f) {
      char buf[2 * NCCL_UNIQUE_ID_BYTES + 8];
      size_t n = fread(buf, 1, sizeof(buf) - 1, f);
      fclose(f);
      buf[n] = '\0';
      while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) buf[--n] = '\0';
      int ok = n == 2 * NCCL_UNIQUE_ID_BYTES;
      for (int i = 0; ok && i < NCCL_UNIQUE_ID_BYTES; i++) {
        int hi = hexval(buf[2 * i]), lo = hexval(buf[2 * i + 1]);
        if (hi < 0 || lo < 0)
          ok = 0;
        else
          id->internal[i] = (char)(hi << 4 | lo);
      }
      if (ok) return;
      say(stderr, "%s does not hold an NCCL unique id (%zu characters, expected %d hex digits)", path, n,
          2 * NCCL_UNIQUE_ID_BYTES);
      die();
    }
    if (errno != ENOENT) {
      say(stderr, "cannot read %s: %s", path, strerror(errno));
      die();
    }
    if (now_s() > deadline) {
      say(stderr,
          "no NCCL unique id in %s after %.0f s: rank 0 writes it once ncclGetUniqueId() returns; is it running?", path,
          wait_s);
      die();
    }
    sleep_s(0.05);
  }
}

/* ---- which verbs library and net plugin this process loaded */

static int show_lib(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size, (void)data;
  const char *n = info->dlpi_name;
  if (!n || !*n) return 0;
  if (strstr(n, "libibverbs") || strstr(n, "libnccl-net") || strstr(n, "libnccl.so") || strstr(n, "libmlx5")) {
    char *real = realpath(n, NULL);
    printf("# loaded: %s%s%s%s\n", n, real && strcmp(real, n) ? " (" : "", real && strcmp(real, n) ? real : "",
           real && strcmp(real, n) ? ")" : "");
    free(real);
  }
  return 0;
}

/* ---- data: a pattern per (rank, size, iteration, element), 20 bits so
 * that the sum over up to 2048 ranks stays in int32 */

static int32_t pattern(int rank, size_t bytes, long iter, size_t i) {
  uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull;
  x ^= ((uint64_t)(rank + 1) << 44) ^ ((uint64_t)bytes << 4) ^ ((uint64_t)iter * 0xD1B54A32D192ED03ull);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return (int32_t)(x & 0xFFFFF);
}

static void fill(int32_t *h, size_t count, int rank, size_t bytes, long iter) {
  for (size_t i = 0; i < count; i++) h[i] = pattern(rank, bytes, iter, i);
}

/* Wrong elements of the result, the first few printed. */
static size_t check(const struct opts *o, const int32_t *got, size_t count, size_t bytes, long iter) {
  size_t wrong = 0;
  int src = (o->rank - 1 + o->nranks) % o->nranks; /* sendrecv: who sent to us */
  for (size_t i = 0; i < count; i++) {
    int32_t want = 0;
    if (o->op == OP_ALL_REDUCE)
      for (int r = 0; r < o->nranks; r++) want += pattern(r, bytes, iter, i);
    else
      want = pattern(src, bytes, iter, i);
    if (got[i] != want) {
      if (wrong < 5)
        say(stderr, "wrong element: %zu bytes, iteration %ld, element %zu: got %" PRId32 ", expected %" PRId32, bytes,
            iter, i, got[i], want);
      wrong++;
    }
  }
  return wrong;
}

/* ---- one operation, waited for with a bound */

/* Waits for the stream: polls cudaStreamQuery and NCCL's asynchronous
 * error, and gives up (aborting the communicator) after `timeout` seconds. */
static void wait_done(cudaStream_t st, double timeout, const char *what, size_t bytes, long iter) {
  double t0 = now_s();
  for (unsigned long polls = 1;; polls++) {
    cudaError_t e = cudaStreamQuery(st);
    int done = e == cudaSuccess;
    if (!done && e != cudaErrorNotReady) {
      say(stderr, "%s of %zu bytes, iteration %ld: cudaStreamQuery: %s: %s (%d)", what, bytes, iter,
          cudaGetErrorName(e), cudaGetErrorString(e), (int)e);
      die();
    }
    double waited = now_s() - t0;
    if (!done && waited < 0.002 && polls % 256) continue;
    /* Every 256 polls at first, then at every poll, and once at the end:
     * what NCCL itself has seen. */
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(g_comm, &async);
    if (r != ncclSuccess) check_nccl(r, "ncclCommGetAsyncError");
    if (async != ncclSuccess && async != ncclInProgress) {
      const char *last = ncclGetLastError(g_comm);
      say(stderr, "%s of %zu bytes, iteration %ld: NCCL reported an asynchronous error: %s (%d); NCCL's last error: %s",
          what, bytes, iter, ncclGetErrorString(async), (int)async, last && *last ? last : "(none)");
      die();
    }
    if (done) return;
    if (waited > timeout) {
      say(stderr,
          "%s of %zu bytes, iteration %ld did not complete within %.0f s (--timeout): aborting the communicator", what,
          bytes, iter, timeout);
      die();
    }
    /* Past the first few milliseconds, leave the CPU to NCCL's proxy
     * thread (and the simulated NICs, which copy with the CPU). */
    if (waited > 0.002) sleep_s(50e-6);
  }
}

struct bufs {
  void *d_send, *d_recv;
  int32_t *h_send, *h_recv;
  int32_t *d_flag;
  cudaStream_t st;
};

/* One checked iteration: returns wrong elements, sets *secs to the time
 * the operation took (enqueue to completion). */
static size_t one_iter(const struct opts *o, struct bufs *b, size_t bytes, long iter, double *secs) {
  size_t count = bytes / sizeof(int32_t);
  size_t nbytes = count * sizeof(int32_t);
  int to = (o->rank + 1) % o->nranks, from = (o->rank - 1 + o->nranks) % o->nranks;
  const char *what = o->op == OP_ALL_REDUCE ? "all_reduce" : "sendrecv";

  fill(b->h_send, count, o->rank, bytes, iter);
  /* Everything on the operation's stream: it is non-blocking, so a copy on
   * the legacy default stream would not be ordered before the operation. */
  if (nbytes) CUDA(cudaMemcpyAsync(b->d_send, b->h_send, nbytes, cudaMemcpyHostToDevice, b->st));
  if (nbytes) CUDA(cudaMemsetAsync(b->d_recv, 0xff, nbytes, b->st)); /* -1: never a right value */
  CUDA(cudaStreamSynchronize(b->st));

  /* The first call on a connection may block while NCCL connects it. */
  arm(o->timeout, o->op == OP_ALL_REDUCE ? "ncclAllReduce" : "ncclGroupEnd (send/recv)");
  double t0 = now_s();
  if (o->op == OP_ALL_REDUCE) {
    NCCL(ncclAllReduce(b->d_send, b->d_recv, count, ncclInt32, ncclSum, g_comm, b->st));
  } else {
    NCCL(ncclGroupStart());
    NCCL(ncclSend(b->d_send, count, ncclInt32, to, g_comm, b->st));
    NCCL(ncclRecv(b->d_recv, count, ncclInt32, from, g_comm, b->st));
    NCCL(ncclGroupEnd());
  }
  disarm();
  wait_done(b->st, o->timeout, what, bytes, iter);
  *secs = now_s() - t0;

  if (nbytes) CUDA(cudaMemcpyAsync(b->h_recv, b->d_recv, nbytes, cudaMemcpyDeviceToHost, b->st));
  CUDA(cudaStreamSynchronize(b->st));
  return check(o, b->h_recv, count, bytes, iter);
}

/* Duration mode: every rank must stop after the same iteration, so the
 * ranks agree with a 1-element max all_reduce of "my time is up". */
static int time_is_up(const struct opts *o, struct bufs *b, int mine, long iter) {
  int32_t flag = mine;
  CUDA(cudaMemcpyAsync(b->d_flag, &flag, sizeof(flag), cudaMemcpyHostToDevice, b->st));
  arm(o->timeout, "ncclAllReduce (stop flag)");
  NCCL(ncclAllReduce(b->d_flag, b->d_flag, 1, ncclInt32, ncclMax, g_comm, b->st));
  disarm();
  wait_done(b->st, o->timeout, "stop-flag all_reduce", sizeof(flag), iter);
  CUDA(cudaMemcpyAsync(&flag, b->d_flag, sizeof(flag), cudaMemcpyDeviceToHost, b->st));
  CUDA(cudaStreamSynchronize(b->st));
  return flag != 0;
}

static double busbw_factor(const struct opts *o) {
  return o->op == OP_ALL_REDUCE ? 2.0 * (o->nranks - 1) / o->nranks : 1.0;
}

static void table_header(void) {
  printf("#\n# %10s %12s %6s %6s %12s %11s %11s %8s\n", "size", "count", "type", "redop", "time(us)", "algbw(GB/s)",
         "busbw(GB/s)", "#wrong");
}

static void table_row(const struct opts *o, size_t bytes, double avg_s, size_t wrong) {
  size_t count = bytes / sizeof(int32_t);
  double nbytes = (double)(count * sizeof(int32_t));
  double algbw = avg_s > 0 ? nbytes / avg_s / 1e9 : 0;
  printf("  %10zu %12zu %6s %6s %12.2f %11.3f %11.3f %8zu\n", bytes, count, "int32",
         o->op == OP_ALL_REDUCE ? "sum" : "none", avg_s * 1e6, algbw, algbw * busbw_factor(o), wrong);
}

int main(int argc, char **argv) {
  struct opts o;
  int ndev = 0;
  setvbuf(stdout, NULL, _IOLBF, 0);
  parse_args(argc, argv, &o);
  if (!o.probe) g_rank = o.rank;

  gpu_or_exit(&o, &ndev);
  if (o.probe) {
    CUDA(cudaSetDevice(o.device));
    describe_gpu(o.device, ndev);
    say(stdout, "an NVIDIA GPU is visible (%d device(s))", ndev);
    return EXIT_OK;
  }

  struct sigaction sa = {.sa_handler = on_alarm};
  sigaction(SIGALRM, &sa, NULL);

  char host[256] = "?";
  gethostname(host, sizeof(host));
  const char *hostid = getenv("NCCL_HOSTID"), *svhost = getenv("SIMVERBS_HOST");
  printf("# nccl-smoke: rank %d of %d, pid %ld, host %s, NCCL_HOSTID=%s, SIMVERBS_HOST=%s\n", o.rank, o.nranks,
         (long)getpid(), host, hostid ? hostid : "(unset)", svhost ? svhost : "(unset)");
  CUDA(cudaSetDevice(o.device));
  describe_gpu(o.device, ndev);

  ncclUniqueId id;
  if (o.rank == 0) {
    arm(o.timeout, "ncclGetUniqueId");
    NCCL(ncclGetUniqueId(&id));
    disarm();
    write_id(o.id_file, &id);
  } else {
    read_id(o.id_file, o.id_wait, &id);
  }

  double t_init = now_s();
  arm(o.init_timeout, "ncclCommInitRank");
  NCCL(ncclCommInitRank(&g_comm, o.nranks, id, o.rank));
  disarm();
  printf("# ncclCommInitRank: %.2f s\n", now_s() - t_init);
  dl_iterate_phdr(show_lib, NULL);

  struct bufs b = {0};
  size_t cap = (o.max_bytes + sizeof(int32_t) - 1) / sizeof(int32_t) * sizeof(int32_t);
  if (cap < sizeof(int32_t)) cap = sizeof(int32_t);
  CUDA(cudaStreamCreateWithFlags(&b.st, cudaStreamNonBlocking));
  CUDA(cudaMalloc(&b.d_send, cap));
  CUDA(cudaMalloc(&b.d_recv, cap));
  CUDA(cudaMalloc((void **)&b.d_flag, sizeof(int32_t)));
  b.h_send = malloc(cap);
  b.h_recv = malloc(cap);
  if (!b.h_send || !b.h_recv) {
    say(stderr, "cannot allocate 2 x %zu bytes of host memory", cap);
    die();
  }

  const char *opname = o.op == OP_ALL_REDUCE ? "all_reduce (int32 sum)" : "sendrecv (int32, to rank+1, from rank-1)";
  size_t total_wrong = 0;
  long iters_done = 0;
  if (o.duration > 0) {
    printf("# op %s, %zu bytes, repeated for %.1f s, every iteration checked\n", opname, o.max_bytes, o.duration);
    double t0 = now_s(), sum = 0, worst = 0;
    long timed = 0, worst_iter = -1;
    int stop = 0;
    for (long it = 0; !stop; it++) {
      double secs;
      size_t wrong = one_iter(&o, &b, o.max_bytes, it, &secs);
      double t = now_s() - t0;
      double algbw = secs > 0 ? (double)(o.max_bytes / sizeof(int32_t) * sizeof(int32_t)) / secs / 1e9 : 0;
      printf("progress iter=%ld t=%.3f unix=%.3f bytes=%zu us=%.1f algbw=%.3f busbw=%.3f wrong=%zu\n", it, t, unix_s(),
             o.max_bytes, secs * 1e6, algbw, algbw * busbw_factor(&o), wrong);
      total_wrong += wrong;
      iters_done++;
      if (it >= o.warmup) {
        sum += secs, timed++;
        if (secs > worst) worst = secs, worst_iter = it;
      }
      stop = time_is_up(&o, &b, now_s() - t0 >= o.duration, it);
    }
    table_header();
    table_row(&o, o.max_bytes, timed ? sum / (double)timed : 0, total_wrong);
    printf("# duration run: %ld iterations in %.1f s, slowest after warm-up %.1f ms (iteration %ld)\n", iters_done,
           now_s() - t0, worst * 1e3, worst_iter);
  } else {
    printf("# op %s, sizes %zu .. %zu bytes x%zu, %d iteration(s) + %d warm-up per size, every iteration checked\n",
           opname, o.min_bytes, o.max_bytes, o.factor, o.iters, o.warmup);
    table_header();
    for (size_t bytes = o.min_bytes;; bytes *= o.factor) {
      double sum = 0;
      size_t wrong = 0;
      for (long it = 0; it < o.warmup + o.iters; it++) {
        double secs;
        wrong += one_iter(&o, &b, bytes, it, &secs);
        iters_done++;
        if (it >= o.warmup) sum += secs;
      }
      table_row(&o, bytes, sum / o.iters, wrong);
      total_wrong += wrong;
      if (bytes > o.max_bytes / o.factor) break;
    }
  }

  arm(o.timeout, "ncclCommFinalize");
  NCCL(ncclCommFinalize(g_comm));
  disarm();
  arm(o.timeout, "ncclCommDestroy");
  NCCL(ncclCommDestroy(g_comm));
  disarm();
  g_comm = NULL;
  cudaFree(b.d_send);
  cudaFree(b.d_recv);
  cudaFree(b.d_flag);
  cudaStreamDestroy(b.st);
  free(b.h_send);
  free(b.h_recv);

  printf("# Wrong elements: %zu %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
  if (total_wrong) {
    say(stderr, "%zu wrong element(s) in %ld checked iteration(s)", total_wrong, iters_done);
    return EXIT_FAIL;
  }
  printf("# nccl-smoke: rank %d: PASS (%ld checked iterations, every element right)\n", o.rank, iters_done);
  return EXIT_OK;
}
