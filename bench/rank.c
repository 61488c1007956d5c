/*
 * linkpass-perf: one rank.  Connects, runs the size sweep or the --duration
 * loop, gathers per-rank results out of band; rank 0 prints the table.
 */
#include "rank.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <signal.h>
#include <unistd.h>

#include "coll.h"
#include "mesh.h"
#include "netload.h"
#include "oob.h"
#include "pattern.h"
#include "report.h"
#include "watchdog.h"
#include "xfer.h"

struct rank_ctx {
  const struct perf_opts *o;
  int oob;
  struct lp_net net;
  int net_up;
  struct perf_mesh mesh;
  struct xengine eng;
  struct xchan *chans;
  int nchans;
  char *sendbuf, *recvbuf; /* sendb.base, recvb.base */
  struct perf_buf sendb, recvb;
  size_t bufbytes;
  struct coll_plan plan;
  uint64_t iter_counter;
  char host[64];
  char label[96]; /* "all_reduce 1048576 B" for messages */
  /* --duration, rank 0's per-second lines */
  double start, next_line;
  long long line_iters, line_wrong;
};

/* What each rank reports after a size or an iteration. */
struct result {
  double elapsed; /* since the loop started (rank 0's decides when to stop) */
  double time;    /* seconds per iteration */
  uint64_t wrong; /* wrong elements */
};

/* What each rank tells rank 0 once, for the header. */
struct rank_info {
  int32_t pid, port, speed, abi;
  int32_t devs[PERF_MAX_CHANNELS];
  char host[64];
  char dev_name[64];
};

static void rank_err(const struct rank_ctx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rank_err(const struct rank_ctx *x, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  fprintf(stderr, "linkpass-perf: rank %d (host %s): %s\n", x->o->rank, x->host, msg);
  fflush(stderr);
}

/* While a rank waits out of band, its sends still outstanding are tested,
 * as NCCL's proxy thread tests them while the host thread waits in MPI: a
 * send that has to move to another NIC moves only while its comm is
 * called, and its receiver may be waiting for it to finish its run. */
static int test_outstanding(void *arg, char *err, size_t errlen) {
  struct rank_ctx *x = arg;
  int progress = 0;
  if (!x->mesh.send) return 0;
  int busy = xfer_test_sends(&x->eng, x->mesh.send, perf_mesh_nconns(&x->mesh), &progress);
  if (busy < 0) snprintf(err, errlen, "%s", x->eng.err);
  return busy;
}

static int allgather(struct rank_ctx *x, const void *mine, size_t len, void *all) {
  char err[1024];
  struct oob_idle idle = {test_outstanding, x};
  if (oob_allgather(x->oob, x->o->rank, x->o->nranks, mine, len, all, -1, &idle, err, sizeof(err))) {
    rank_err(x, "%s", err);
    return -1;
  }
  return 0;
}

static int barrier(struct rank_ctx *x) {
  char one = 1, all[PERF_MAX_RANKS];
  return allgather(x, &one, 1, all);
}

static int gather_results(struct rank_ctx *x, const struct result *mine, struct result *all) {
  return allgather(x, mine, sizeof(*mine), all);
}

/* `reps` collectives back to back, as nccl-tests launches them (xfer.h). */
static int run_reps(struct rank_ctx *x, int reps) {
  if (reps <= 0) return 0;
  for (int i = 0; i < reps; i++) coll_local(&x->plan);
  if (xfer_run(&x->eng, x->chans, x->nchans, (size_t)reps)) {
    rank_err(x, "%s: %s", x->label, x->eng.err);
    return -1;
  }
  return 0;
}

static int run_once(struct rank_ctx *x) { return run_reps(x, 1); }

static const char *redop_column(const struct perf_opts *o) {
  /* nccl-tests prints "none" for the collectives that do not reduce */
  return o->op == PERF_ALL_GATHER || o->op == PERF_ALLTOALL ? "none" : perf_redop_name(o->redop);
}

static int set_size(struct rank_ctx *x, size_t bytes) {
  const struct perf_opts *o = x->o;
  perf_counts(o->op, bytes, perf_dtype_size(o->dtype), o->nranks, &x->plan.counts);
  snprintf(x->label, sizeof(x->label), "%s %zu B", perf_op_name(o->op), x->plan.counts.rowbytes);
  if (coll_build(&x->plan, x->chans)) {
    rank_err(x, "%s: out of memory building the schedule", x->label);
    return -1;
  }
  return 0;
}

/* Input for a fresh seed, and a poisoned output so nothing stale passes. */
static uint64_t prepare(struct rank_ctx *x) {
  uint64_t seed = pattern_seed(x->o->comm_id, x->iter_counter++);
  coll_fill(&x->plan, seed);
  pattern_poison(x->recvbuf, x->plan.counts.recvcount * perf_dtype_size(x->o->dtype));
  return seed;
}

static uint64_t check(struct rank_ctx *x, uint64_t seed) {
  char who[160];
  snprintf(who, sizeof(who), "linkpass-perf: rank %d: %s iteration %" PRIu64, x->o->rank, x->label, x->iter_counter);
  return coll_check(&x->plan, seed, stderr, who);
}

/* ------------------------------------------------------------- the sweep */

static int sweep(struct rank_ctx *x, long long *wrong_total) {
  const struct perf_opts *o = x->o;
  size_t es = perf_dtype_size(o->dtype);
  double bw_sum = 0;
  int rows = 0;
  long long bad_rows = 0;
  if (o->rank == 0) perf_print_header(stdout);
  for (size_t size = o->minbytes; size <= o->maxbytes;) {
    struct result mine = {0}, all[PERF_MAX_RANKS];
    if (set_size(x, size)) return -1;
    watchdog_phase("%s: warmup", x->label);
    uint64_t seed = prepare(x);
    if (o->check == 2) {
      /* every iteration on fresh data and checked; the time is the sum of
       * the collectives alone */
      for (int i = 0; i < o->warmup + o->iters; i++) {
        watchdog_phase("%s: checked iteration %d", x->label, i);
        seed = i ? prepare(x) : seed;
        double t0 = xfer_now();
        if (run_once(x)) return -1;
        if (i >= o->warmup) mine.time += xfer_now() - t0;
        mine.wrong += check(x, seed);
      }
      mine.time /= o->iters;
    } else {
      if (run_reps(x, o->warmup)) return -1;
      if (barrier(x)) return -1;
      watchdog_phase("%s: timed iterations", x->label);
      double t0 = xfer_now();
      if (run_reps(x, o->iters)) return -1;
      mine.time = (xfer_now() - t0) / o->iters;
    }
    if (o->check == 1) {
      /* the timed result, then one more run on fresh data: a chunk left
       * over from the timed loop would not match the new seed */
      watchdog_phase("%s: checked iteration", x->label);
      mine.wrong = check(x, seed);
      seed = prepare(x);
      if (run_once(x)) return -1;
      mine.wrong += check(x, seed);
    }
    if (gather_results(x, &mine, all)) return -1;
    double tsum = 0;
    long long wrong = 0;
    for (int r = 0; r < o->nranks; r++) {
      tsum += all[r].time;
      wrong += (long long)all[r].wrong;
    }
    *wrong_total += wrong;
    if (o->rank == 0) {
      /* nccl-tests averages the time over ranks */
      double t = tsum / o->nranks, algbw, busbw;
      perf_bandwidth(o->op, &x->plan.counts, es, o->nranks, t, &algbw, &busbw);
      perf_print_row(stdout, &x->plan.counts, perf_dtype_name(o->dtype), redop_column(o), t * 1e6, algbw, busbw,
                     o->check ? wrong : -1);
      bw_sum += busbw;
      rows++;
      bad_rows += wrong > 0;
    }
    size_t next = perf_next_size(o, size);
    if (next <= size) break; /* overflow */
    size = next;
  }
  if (o->rank == 0) perf_print_footer(stdout, bad_rows, rows ? bw_sum / rows : 0);
  return 0;
}

/* ---------------------------------------------------------- --duration */

static void duration_lines(struct rank_ctx *x, double now) {
  const struct perf_opts *o = x->o;
  while (now - x->start >= x->next_line) {
    double algbw = 0, busbw = 0;
    if (x->line_iters > 0)
      perf_bandwidth(o->op, &x->plan.counts, perf_dtype_size(o->dtype), o->nranks, 1.0 / (double)x->line_iters,
                     &algbw, &busbw);
    printf("%9.1f  %7lld  %8.2f  %8.2f  %7lld\n", x->next_line, x->line_iters, algbw, busbw, x->line_wrong);
    fflush(stdout);
    x->line_iters = x->line_wrong = 0;
    x->next_line += 1.0;
  }
}

static void duration_tick(void *arg) {
  struct rank_ctx *x = arg;
  duration_lines(x, xfer_now()); /* a stalled second still gets its line */
}

static int duration(struct rank_ctx *x, long long *wrong_total) {
  const struct perf_opts *o = x->o;
  long long iters = 0;
  double slowest = 0;
  if (set_size(x, o->maxbytes)) return -1;
  if (o->rank == 0) {
    printf("# --duration %g s: %s, %zu elements %s, a line per second\n", o->duration, x->label,
           x->plan.counts.paramcount, perf_dtype_name(o->dtype));
    printf("# %7s  %7s  %8s  %8s  %7s\n", "time", "iters", "algbw", "busbw", "#wrong");
    printf("# %7s  %7s  %8s  %8s  %7s\n", "(s)", "", "(GB/s)", "(GB/s)", "");
    fflush(stdout);
    x->eng.tick = duration_tick;
    x->eng.tick_arg = x;
  }
  if (barrier(x)) return -1;
  x->start = xfer_now();
  x->next_line = 1.0;
  for (;;) {
    struct result mine = {0}, all[PERF_MAX_RANKS];
    watchdog_phase("%s: --duration iteration %lld", x->label, iters);
    uint64_t seed = prepare(x);
    double t0 = xfer_now();
    if (run_once(x)) return -1;
    mine.time = xfer_now() - t0;
    if (o->check) mine.wrong = check(x, seed);
    mine.elapsed = xfer_now() - x->start;
    if (gather_results(x, &mine, all)) return -1;
    iters++;
    long long wrong = 0;
    for (int r = 0; r < o->nranks; r++) {
      wrong += (long long)all[r].wrong;
      if (all[r].time > slowest) slowest = all[r].time;
    }
    *wrong_total += wrong;
    if (o->rank == 0) {
      x->line_iters++;
      x->line_wrong += wrong;
      duration_lines(x, xfer_now());
    }
    if (all[0].elapsed >= o->duration) break; /* rank 0's clock decides for everyone */
  }
  if (o->rank == 0) {
    double total = xfer_now() - x->start, algbw = 0, busbw = 0;
    double part = total - (x->next_line - 1.0); /* the last, partial second */
    if (x->line_iters > 0 && part > 0) {
      perf_bandwidth(o->op, &x->plan.counts, perf_dtype_size(o->dtype), o->nranks, part / (double)x->line_iters,
                     &algbw, &busbw);
      printf("%9.1f  %7lld  %8.2f  %8.2f  %7lld\n", total, x->line_iters, algbw, busbw, x->line_wrong);
    }
    if (iters > 0)
      perf_bandwidth(o->op, &x->plan.counts, perf_dtype_size(o->dtype), o->nranks, total / (double)iters, &algbw,
                     &busbw);
    printf("# %-20s : %lld in %.1f s\n", "Iterations", iters, total);
    printf("# %-20s : %g\n", "Avg bus bandwidth", busbw);
    printf("# %-20s : %.1f ms\n", "Slowest iteration", slowest * 1e3);
    printf("# %-20s : %lld %s\n", "Wrong elements", *wrong_total, *wrong_total ? "FAILED" : "OK");
    printf("#\n");
    fflush(stdout);
  }
  x->eng.tick = NULL;
  return 0;
}

/* ------------------------------------------------------------- set up */

static void host_name(const struct perf_opts *o, char *out, size_t len) {
  if (o->hosts) {
    char buf[1024];
    char *items[PERF_MAX_RANKS];
    int nh = perf_split_list(o->hosts, buf, sizeof(buf), items, PERF_MAX_RANKS);
    if (nh > 0) {
      snprintf(out, len, "%s", items[perf_rank_host(o->rank, o->nranks, nh)]);
      return;
    }
  }
  if (gethostname(out, len)) snprintf(out, len, "?");
  out[len - 1] = '\0';
}

static int print_header(struct rank_ctx *x) {
  const struct perf_opts *o = x->o;
  struct rank_info mine, *all = calloc((size_t)o->nranks, sizeof(*all));
  struct lp_props props;
  int rc = -1;
  if (!all) return -1;
  memset(&mine, 0, sizeof(mine));
  mine.pid = (int32_t)getpid();
  mine.abi = x->net.abi;
  snprintf(mine.host, sizeof(mine.host), "%s", x->host);
  for (int c = 0; c < o->channels; c++) mine.devs[c] = x->mesh.devs[c];
  if (x->net.ops->get_props(&x->net, x->mesh.devs[0], &props) == ncclSuccess) {
    snprintf(mine.dev_name, sizeof(mine.dev_name), "%s", props.name);
    mine.port = props.port;
    mine.speed = props.speed;
  }
  if (allgather(x, &mine, sizeof(mine), all)) goto out;
  if (o->rank == 0) {
    char what[96];
    if (o->duration > 0) snprintf(what, sizeof(what), "--duration %g s at -e %zu", o->duration, o->maxbytes);
    else snprintf(what, sizeof(what), "-b %zu -e %zu, %d iters, %d warmup", o->minbytes, o->maxbytes, o->iters, o->warmup);
    char pad[64] = "";
    if (o->reg_pad) snprintf(pad, sizeof(pad), ", registrations padded by %zu B", o->reg_pad);
    printf("# linkpass-perf: %s, %d ranks, %s %s, %s, check %d, %d channel(s), %d slots of %zu B%s%s\n",
           perf_op_name(o->op), o->nranks, perf_dtype_name(o->dtype), redop_column(o), what, o->check, o->channels,
           o->slots, o->step_bytes, o->reg ? ", registered buffers" : "", pad);
    printf("# plugin: %s (name \"%s\", ncclNetPlugin_v%d)\n", x->net.path, x->net.name ? x->net.name : "?",
           x->net.abi);
    for (int r = 0; r < o->nranks; r++) {
      printf("#   rank %2d pid %6d on %-12s dev %d %s port %d, %d Mbps", r, all[r].pid, all[r].host, all[r].devs[0],
             all[r].dev_name, all[r].port, all[r].speed);
      int listed = o->channels <= 16 ? o->channels : 1; /* a thousand devices say nothing */
      for (int c = 1; c < listed; c++) printf("%s%d", c == 1 ? " (channel devs: " : ",", all[r].devs[c]);
      if (listed < o->channels) printf(" (%d channels%s)", o->channels, o->same_dev ? ", all on it" : "");
      printf("%s\n", listed > 1 ? ")" : "");
    }
    fflush(stdout);
  }
  rc = 0;
out:
  free(all);
  return rc;
}

/* Register buffers on every connection in use and wire the channels. */
static int setup_engine(struct rank_ctx *x) {
  const struct perf_opts *o = x->o;
  int n = o->nranks, me = o->rank;
  size_t es = perf_dtype_size(o->dtype);
  x->bufbytes = (o->maxbytes + 4095) / 4096 * 4096;
  if (x->bufbytes == 0) x->bufbytes = 4096;
  /* --reg-pad: the user buffers are registered (-R 1) this much longer than
   * the page multiple; data placement does not change */
  x->bufbytes += o->reg_pad;
  char why[256];
  if (perf_buf_alloc(&x->sendb, (enum perf_mem)o->mem, x->bufbytes, why, sizeof(why)) ||
      perf_buf_alloc(&x->recvb, (enum perf_mem)o->mem, x->bufbytes, why, sizeof(why))) {
    rank_err(x, "%s", why);
    return -1;
  }
  x->sendbuf = x->sendb.base;
  x->recvbuf = x->recvb.base;
  x->eng = (struct xengine){
      .net = &x->net,
      .rank = me,
      .slots = o->slots,
      .step = o->step_bytes,
      .direct = o->reg,
      .reg_pad = o->reg_pad,
      .mem = (enum perf_mem)o->mem,
      .nregions = 2,
      .dtype = o->dtype,
      .redop = o->redop,
      .stall_timeout = o->stall_timeout,
  };
  if (o->gap_log) {
    x->eng.gap_log = fopen(o->gap_log, "a");
    if (!x->eng.gap_log) {
      rank_err(x, "--gap-log %s: %s", o->gap_log, strerror(errno));
      return -1;
    }
    setvbuf(x->eng.gap_log, NULL, _IOLBF, 0); /* whole lines: every rank appends to the file */
  }
  x->eng.regions[0].base = x->sendbuf;
  x->eng.regions[0].len = x->bufbytes;
  x->eng.regions[0].buf = &x->sendb;
  x->eng.regions[1].buf = &x->recvb;
  x->eng.regions[1].base = x->recvbuf;
  x->eng.regions[1].len = x->bufbytes;
  for (size_t i = 0; i < perf_mesh_nconns(&x->mesh); i++) {
    watchdog_phase("registering memory");
    if (x->mesh.send[i].comm && xconn_setup(&x->eng, &x->mesh.send[i])) goto fail;
    if (x->mesh.recv[i].comm && xconn_setup(&x->eng, &x->mesh.recv[i])) goto fail;
  }
  x->nchans = coll_nchans(o->op, n, o->channels);
  x->chans = calloc((size_t)x->nchans, sizeof(*x->chans));
  if (!x->chans) {
    rank_err(x, "out of memory");
    return -1;
  }
  for (int i = 0; i < x->nchans; i++) {
    int c = o->op == PERF_ALLTOALL ? i / n : i;
    int sp = coll_send_peer(o->op, n, me, o->channels, i), rp = coll_recv_peer(o->op, n, me, o->channels, i);
    if (sp != me) x->chans[i].sc = &x->mesh.send[(size_t)c * (size_t)n + (size_t)sp];
    if (rp != me) x->chans[i].rc = &x->mesh.recv[(size_t)c * (size_t)n + (size_t)rp];
  }
  x->plan = (struct coll_plan){
      .op = o->op,
      .dtype = o->dtype,
      .redop = o->redop,
      .nranks = n,
      .rank = me,
      .channels = o->channels,
      .step = o->step_bytes / es * es,
      /* NCCL's chunk: half of the steps (ALLREDUCE_CHUNKSTEPS = NCCL_STEPS/2) */
      .chunk_bytes = o->step_bytes * (size_t)(o->slots > 1 ? o->slots / 2 : 1),
      .sendbuf = x->sendbuf,
      .recvbuf = x->recvbuf,
  };
  return 0;
fail:
  rank_err(x, "%s", x->eng.err);
  return -1;
}

static void teardown(struct rank_ctx *x) {
  size_t nconns = perf_mesh_nconns(&x->mesh);
  /* Called after the final barrier: every receive everywhere completed, so
   * a send that does not complete now (its peer may close meanwhile) lost
   * nothing; xconn_teardown keeps its memory. */
  watchdog_phase("finishing the last sends");
  if (x->mesh.send && xfer_drain(&x->eng, x->mesh.send, nconns))
    rank_err(x, "warning: closing with sends outstanding, whose data every receiver already has: %s", x->eng.err);
  watchdog_phase("closing connections");
  for (int i = 0; x->chans && i < x->nchans; i++) xchan_free(&x->chans[i]);
  free(x->chans);
  x->chans = NULL;
  for (size_t i = 0; x->mesh.send && i < nconns; i++) {
    if (x->mesh.send[i].comm) xconn_teardown(&x->eng, &x->mesh.send[i]);
    if (x->mesh.recv[i].comm) xconn_teardown(&x->eng, &x->mesh.recv[i]);
  }
  perf_mesh_close(&x->mesh, &x->net);
  if (x->net_up) {
    watchdog_phase("finalizing the plugin");
    ncclResult_t r = x->net.ops->finalize(&x->net);
    if (r != ncclSuccess) rank_err(x, "plugin finalize failed: %s", lp_result_str(r));
  }
  perf_buf_free(&x->sendb);
  perf_buf_free(&x->recvb);
  x->sendbuf = x->recvbuf = NULL;
  if (x->eng.gap_log) fclose(x->eng.gap_log);
  x->eng.gap_log = NULL;
}

int perf_rank_main(const struct perf_opts *o) {
  struct rank_ctx x;
  char err[4096];
  long long wrong = 0;
  int code = PERF_EXIT_ERROR;

  memset(&x, 0, sizeof(x));
  x.o = o;
  x.oob = -1;
  host_name(o, x.host, sizeof(x.host));
  lp_logger_set_rank(o->rank);
  /* a rank must not outlive its launcher, whatever sits in between */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (watchdog_start(o->rank, o->timeout)) {
    rank_err(&x, "cannot start the watchdog thread");
    return PERF_EXIT_ERROR;
  }
  watchdog_phase("joining the rendezvous");
  x.oob = oob_connect(o->rdv, o->rank, o->nranks, o->conn_timeout, err, sizeof(err));
  if (x.oob < 0) {
    rank_err(&x, "%s", err);
    goto out;
  }
  watchdog_set_fd(x.oob);

  watchdog_phase("loading the plugin");
  if (lp_net_load(o->plugin, o->abi, &x.net, err, sizeof(err))) {
    rank_err(&x, "%s", err);
    goto out;
  }
  watchdog_phase("plugin init");
  if (lp_net_init(&x.net, o->comm_id, lp_logger, err, sizeof(err))) {
    rank_err(&x, "%s", err);
    goto out;
  }
  x.net_up = 1;
  ncclResult_t r;

  watchdog_phase("connecting");
  if (perf_mesh_connect(&x.mesh, &x.net, o, x.oob, err, sizeof(err))) {
    rank_err(&x, "%s", err);
    goto out;
  }
  for (int c = 0; c < o->channels; c++) {
    struct lp_props p;
    r = x.net.ops->get_props(&x.net, x.mesh.devs[c], &p);
    if (r != ncclSuccess) {
      rank_err(&x, "getProperties(%d) failed: %s", x.mesh.devs[c], lp_result_str(r));
      goto out;
    }
    int need = perf_mem_ptr_bit((enum perf_mem)o->mem);
    if (!(p.ptr_support & need)) {
      rank_err(&x, "device %d (%s) does not support --mem %s (ptrSupport 0x%x lacks %s)%s", x.mesh.devs[c], p.name,
               perf_mem_name((enum perf_mem)o->mem), p.ptr_support,
               need == NCCL_PTR_CUDA ? "NCCL_PTR_CUDA" : need == NCCL_PTR_DMABUF ? "NCCL_PTR_DMABUF" : "NCCL_PTR_HOST",
               need == NCCL_PTR_CUDA ? ": no GPU peer memory on this host (simverbs: peer_memory on)"
               : need == NCCL_PTR_DMABUF ? ": the NIC does not register dma-bufs" : "");
      goto out;
    }
    if (p.max_p2p_bytes && o->step_bytes > p.max_p2p_bytes) {
      rank_err(&x, "--step-bytes %zu is over device %d's maxP2pBytes %zu", o->step_bytes, x.mesh.devs[c],
               p.max_p2p_bytes);
      goto out;
    }
  }
  if (setup_engine(&x) || print_header(&x)) goto out;

  int rc = o->duration > 0 ? duration(&x, &wrong) : sweep(&x, &wrong);
  if (rc) goto out;
  code = wrong ? PERF_EXIT_WRONG : PERF_EXIT_OK;
  /* every rank has finished its receives before anyone closes a comm */
  watchdog_phase("final barrier");
  if (barrier(&x)) code = PERF_EXIT_ERROR;
  teardown(&x);
out:
  fflush(stdout);
  watchdog_stop();
  if (x.oob >= 0) {
    oob_bye(x.oob, o->rank, code);
    close(x.oob);
  }
  if (code == PERF_EXIT_ERROR) {
    /* a failed plugin may hold locks or threads that make exit() hang */
    fflush(stderr);
    _exit(code);
  }
  return code;
}
