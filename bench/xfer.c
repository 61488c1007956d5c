/*
 * linkpass-perf: pipelined transfers over the plugin.
 */
#include "xfer.h"

#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pattern.h"

double xfer_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int efail(struct xengine *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int efail(struct xengine *e, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->err, sizeof(e->err), fmt, ap);
  va_end(ap);
  return -1;
}

int xconn_setup(struct xengine *e, struct xconn *c) {
  /* the slots use slots*step bytes; --reg-pad makes the registration longer,
   * so that it can end inside a page as NCCL's user registrations do */
  size_t bytes = (size_t)e->slots * e->step + e->reg_pad;
  ncclResult_t r;
  if (perf_buf_alloc(&c->slots_buf, e->mem, bytes, e->err, sizeof(e->err))) return -1;
  c->slots = c->slots_buf.base;
  r = perf_buf_reg(e->net, c->comm, &c->slots_buf, c->slots, bytes, &c->slots_mh);
  if (r != ncclSuccess) goto fail;
  for (int i = 0; e->direct && i < e->nregions; i++) {
    r = perf_buf_reg(e->net, c->comm, e->regions[i].buf, e->regions[i].base, e->regions[i].len, &c->region_mh[i]);
    if (r != ncclSuccess) goto fail;
  }
  return 0;
fail:
  efail(e, "%s of %s memory on the %s comm of rank %d (channel %d, dev %d) failed: %s",
        e->mem == PERF_MEM_DMABUF ? "regMrDmaBuf" : "regMr", perf_mem_name(e->mem), c->is_send ? "send" : "recv",
        c->peer, c->channel, c->dev, lp_result_str(r));
  return -1;
}

void xconn_teardown(struct xengine *e, struct xconn *c) {
  /* Memory under a send still outstanding stays registered and allocated:
   * the NIC may still read it.  The process is about to exit. */
  if (c->sdone < c->sent) return;
  for (int i = 0; i < XFER_MAX_REGIONS; i++) {
    if (c->region_mh[i]) e->net->ops->dereg_mr(e->net, c->comm, c->region_mh[i]);
    c->region_mh[i] = NULL;
  }
  if (c->slots_mh) e->net->ops->dereg_mr(e->net, c->comm, c->slots_mh);
  c->slots_mh = NULL;
  perf_buf_free(&c->slots_buf);
  c->slots = NULL;
}

void xchan_clear(struct xchan *ch) {
  ch->nsends = ch->nrecvs = 0;
  ch->rpost = ch->rdone = ch->rcons = ch->spost = ch->sbase = ch->sfilled = 0;
}

void xchan_free(struct xchan *ch) {
  free(ch->sends);
  free(ch->recvs);
  ch->sends = NULL;
  ch->recvs = NULL;
  ch->sends_cap = ch->recvs_cap = 0;
  xchan_clear(ch);
}

static int grow(void **arr, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t nc = *cap ? *cap * 2 : 64;
  while (nc < need) nc *= 2;
  void *p = realloc(*arr, nc * elem);
  if (!p) return -1;
  *arr = p;
  *cap = nc;
  return 0;
}

int xchan_add_send(struct xchan *ch, size_t bytes, const char *src, int32_t dep) {
  if (grow((void **)&ch->sends, &ch->sends_cap, ch->nsends + 1, sizeof(*ch->sends))) return -1;
  ch->sends[ch->nsends++] = (struct xsend){bytes, src, dep};
  return 0;
}

int xchan_add_recv(struct xchan *ch, size_t bytes, const char *in, char *out, int32_t fwd) {
  if (grow((void **)&ch->recvs, &ch->recvs_cap, ch->nrecvs + 1, sizeof(*ch->recvs))) return -1;
  ch->recvs[ch->nrecvs++] = (struct xrecv){bytes, in, out, fwd};
  return 0;
}

/* ------------------------------------------------------------ helpers */

static char *slot(struct xengine *e, struct xconn *c, size_t idx) {
  return c->slots + (idx % (size_t)e->slots) * e->step;
}

/* Memory handle of a user pointer on a connection (direct mode). */
static void *region_mh(struct xengine *e, struct xconn *c, const char *p) {
  for (int i = 0; i < e->nregions; i++)
    if (p >= e->regions[i].base && p <= e->regions[i].base + e->regions[i].len) return c->region_mh[i];
  return NULL;
}

/* Message v of all repetitions, and the repetition it belongs to. */
static struct xrecv *recv_at(const struct xchan *ch, size_t v) { return &ch->recvs[v % ch->nrecvs]; }
static struct xsend *send_at(const struct xchan *ch, size_t v) { return &ch->sends[v % ch->nsends]; }
static size_t recv_total(const struct xchan *ch) { return ch->nrecvs * ch->reps; }
static size_t send_total(const struct xchan *ch) { return ch->nsends * ch->reps; }

/* Sends of this run that completed (earlier runs' sends complete first). */
static size_t sends_done(const struct xchan *ch) {
  return ch->sc && ch->sc->sdone > ch->sbase ? ch->sc->sdone - ch->sbase : 0;
}
/* Whether send v of this run may use its slot: the slot's previous send completed. */
static int send_slot_free(struct xengine *e, const struct xchan *ch, size_t v) {
  return ch->sbase + v < ch->sc->sdone + (size_t)e->slots;
}

/* A receive lands in place when nothing has to be combined with it. */
static int recv_in_place(struct xengine *e, const struct xrecv *r) { return e->direct && !r->in && r->out; }
/* A forwarded result is sent from the user buffer when it was stored there. */
static int fwd_in_place(struct xengine *e, const struct xrecv *r) { return e->direct && r->out; }

/* Where receive v of a channel lands: the user buffer in place, else its slot. */
static char *recv_buf(struct xengine *e, struct xchan *ch, size_t v) {
  struct xrecv *r = recv_at(ch, v);
  return recv_in_place(e, r) ? r->out : slot(e, ch->rc, v);
}

/* ------------------------------------------------------------ progress */

/* --gap-log: a pause between two completions of this rank, with both ends. */
static void note_completion(struct xengine *e) {
  if (!e->gap_log) return;
  double now = xfer_now();
  if (e->last_completion > 0 && now - e->last_completion >= XFER_GAP_S)
    fprintf(e->gap_log, "%d %.6f %.6f\n", e->rank, e->last_completion, now);
  e->last_completion = now;
}

static int post_recvs(struct xengine *e, struct xchan *ch, int *progress) {
  struct xconn *c = ch->rc;
  while (ch->rpost < recv_total(ch) && ch->rpost < ch->rcons + (size_t)e->slots) {
    struct xrecv *r = recv_at(ch, ch->rpost);
    size_t rep = ch->rpost / ch->nrecvs;
    void *data, *mh;
    size_t size;
    int tag = c->peer; /* NCCL tags a receive with the sender's rank */
    if (recv_in_place(e, r)) {
      /* the user buffer is free once this channel finished the repetition before */
      if (ch->rcons < rep * ch->nrecvs || sends_done(ch) < rep * ch->nsends) break;
      data = r->out;
      mh = region_mh(e, c, r->out);
      size = r->bytes;
    } else {
      /* post the whole slot: the plugin must cope with a sender sending less */
      data = slot(e, c, ch->rpost);
      mh = c->slots_mh;
      size = e->step;
    }
    void *req = NULL;
    ncclResult_t res = e->net->ops->irecv(e->net, c->comm, 1, &data, &size, &tag, &mh, &req);
    if (res != ncclSuccess)
      return efail(e, "irecv from rank %d (channel %d, dev %d, message %zu of %zu, %zu bytes) failed: %s", c->peer,
                   c->channel, c->dev, ch->rpost, recv_total(ch), size, lp_result_str(res));
    if (!req) {
      c->nulls++;
      break;
    }
    ch->rreq[ch->rpost % (size_t)e->slots] = req;
    ch->rpost++;
    *progress = 1;
  }
  return 0;
}

/* A receive into GPU memory is flushed before its data is used, as NCCL's
 * proxy does for the Simple protocol: iflush on the received buffer, then
 * test() until the flush is done (a NULL request: nothing to wait for). */
static int flush_recv(struct xengine *e, struct xchan *ch, size_t v, int size) {
  struct xconn *c = ch->rc;
  struct xrecv *r = recv_at(ch, v);
  void *data = recv_buf(e, ch, v);
  void *mh = recv_in_place(e, r) ? region_mh(e, c, r->out) : c->slots_mh, *req = NULL;
  ncclResult_t res = e->net->ops->iflush(e->net, c->comm, 1, &data, &size, &mh, &req);
  double since = xfer_now();
  for (int done = req == NULL; res == ncclSuccess && !done;) {
    res = e->net->ops->test(e->net, req, &done, NULL);
    if (!done && xfer_now() - since > e->stall_timeout)
      return efail(e, "the flush of a receive from rank %d (channel %d, dev %d) did not complete in %.0f s", c->peer,
                   c->channel, c->dev, e->stall_timeout);
  }
  if (res != ncclSuccess)
    return efail(e, "iflush of a receive from rank %d (channel %d, dev %d, message %zu) failed: %s", c->peer,
                 c->channel, c->dev, v, lp_result_str(res));
  return 0;
}

static int test_recvs(struct xengine *e, struct xchan *ch, int *progress) {
  struct xconn *c = ch->rc;
  while (ch->rdone < ch->rpost) {
    int done = 0, size = -1;
    ncclResult_t res = e->net->ops->test(e->net, ch->rreq[ch->rdone % (size_t)e->slots], &done, &size);
    if (res != ncclSuccess)
      return efail(e, "test of a receive from rank %d (channel %d, dev %d, message %zu of %zu) failed: %s", c->peer,
                   c->channel, c->dev, ch->rdone, recv_total(ch), lp_result_str(res));
    if (!done) break;
    if (size < 0 || (size_t)size != recv_at(ch, ch->rdone)->bytes)
      return efail(e, "receive from rank %d (channel %d, dev %d, message %zu of %zu) completed with %d bytes, "
                   "expected %zu",
                   c->peer, c->channel, c->dev, ch->rdone, recv_total(ch), size, recv_at(ch, ch->rdone)->bytes);
    if (e->mem != PERF_MEM_HOST && size > 0 && flush_recv(e, ch, ch->rdone, size)) return -1;
    ch->rreq[ch->rdone % (size_t)e->slots] = NULL;
    ch->rdone++;
    note_completion(e);
    c->msgs++;
    *progress = 1;
    /* one at a time: what waits on it (a reduction, a forward, the next
     * iteration's send) goes before another round of polling */
    break;
  }
  return 0;
}

/* Combine a received message with local data; store and/or stage it for
 * the send that forwards it. */
static void consume_recvs(struct xengine *e, struct xchan *ch, int *progress) {
  size_t es = perf_dtype_size(e->dtype);
  while (ch->rcons < ch->rdone) {
    struct xrecv *r = recv_at(ch, ch->rcons);
    char *stage = NULL;
    if (r->fwd >= 0 && !fwd_in_place(e, r)) {
      size_t fwd = ch->rcons / ch->nrecvs * ch->nsends + (size_t)r->fwd;
      /* the forwarding send's slot must have finished its previous use */
      if (!send_slot_free(e, ch, fwd)) return;
      stage = slot(e, ch->sc, ch->sbase + fwd);
    }
    const char *got = recv_buf(e, ch, ch->rcons);
    if (r->in) {
      char *dst = r->out ? r->out : stage;
      if (dst) pattern_reduce(dst, got, r->in, e->dtype, e->redop, r->bytes / es);
      if (r->out && stage) memcpy(stage, r->out, r->bytes);
    } else {
      if (r->out && got != r->out) memcpy(r->out, got, r->bytes);
      if (stage) memcpy(stage, got, r->bytes);
    }
    ch->rcons++;
    *progress = 1;
  }
}

/* `reps_consumed`: repetitions whose receives every channel has consumed. */
static int post_sends(struct xengine *e, struct xchan *ch, size_t reps_consumed, int *progress) {
  struct xconn *c = ch->sc;
  while (ch->spost < send_total(ch) && send_slot_free(e, ch, ch->spost)) {
    struct xsend *s = send_at(ch, ch->spost);
    size_t rep = ch->spost / ch->nsends;
    void *data, *mh;
    if (rep > reps_consumed) break; /* stream order: the previous repetition is not finished */
    if (s->dep >= 0) {
      size_t dep = rep * ch->nrecvs + (size_t)s->dep;
      if (dep >= ch->rcons) break; /* its data has not arrived yet */
      struct xrecv *r = recv_at(ch, dep);
      if (fwd_in_place(e, r)) {
        data = r->out;
        mh = region_mh(e, c, r->out);
      } else {
        data = slot(e, c, ch->sbase + ch->spost); /* filled by consume_recvs */
        mh = c->slots_mh;
      }
    } else if (e->direct) {
      data = (void *)s->src;
      mh = region_mh(e, c, s->src);
    } else {
      data = slot(e, c, ch->sbase + ch->spost);
      mh = c->slots_mh;
      /* stage once: a NULL request (no clear-to-send yet) leaves it staged */
      if (ch->sfilled <= ch->spost) {
        memcpy(data, s->src, s->bytes);
        ch->sfilled = ch->spost + 1;
      }
    }
    void *req = NULL;
    /* NCCL tags a send with the sender's own rank */
    ncclResult_t res = e->net->ops->isend(e->net, c->comm, data, s->bytes, e->rank, mh, &req);
    if (res != ncclSuccess)
      return efail(e, "isend to rank %d (channel %d, dev %d, message %zu of %zu, %zu bytes) failed: %s", c->peer,
                   c->channel, c->dev, ch->spost, send_total(ch), s->bytes, lp_result_str(res));
    if (!req) {
      c->nulls++;
      break;
    }
    c->sreq[c->sent % (size_t)e->slots] = req;
    c->sent++;
    ch->spost++;
    *progress = 1;
  }
  return 0;
}

/* The oldest outstanding sends of a connection, this run's or earlier ones'. */
static int test_sends(struct xengine *e, struct xconn *c, int *progress) {
  while (c->sdone < c->sent) {
    int done = 0, size = -1;
    ncclResult_t res = e->net->ops->test(e->net, c->sreq[c->sdone % (size_t)e->slots], &done, &size);
    if (res != ncclSuccess)
      return efail(e, "test of a send to rank %d (channel %d, dev %d, send %zu of the connection, %zu posted) "
                   "failed: %s",
                   c->peer, c->channel, c->dev, c->sdone, c->sent, lp_result_str(res));
    if (!done) break;
    c->sreq[c->sdone % (size_t)e->slots] = NULL;
    c->sdone++;
    note_completion(e);
    c->msgs++;
    *progress = 1;
  }
  return 0;
}

/* Receives consumed and sends posted; with -R 1, sends completed too (xfer.h). */
static int chan_done(const struct xengine *e, const struct xchan *ch) {
  return ch->rcons == recv_total(ch) && ch->spost == send_total(ch) && (!e->direct || sends_done(ch) == send_total(ch));
}

/* Repetitions whose receives every channel has consumed. */
static size_t reps_consumed(const struct xchan *chans, int nchans) {
  size_t reps = chans[0].reps;
  for (int i = 0; i < nchans; i++)
    if (chans[i].nrecvs && chans[i].rcons / chans[i].nrecvs < reps) reps = chans[i].rcons / chans[i].nrecvs;
  return reps;
}

/* What a stalled channel waits for, in words. */
static void describe_stall(struct xengine *e, struct xchan *chans, int nchans, double idle) {
  size_t used = (size_t)snprintf(e->err, sizeof(e->err), "no progress for %.1f s (--stall-timeout):", idle);
  for (int i = 0; i < nchans && used < sizeof(e->err); i++) {
    struct xchan *ch = &chans[i];
    if (chan_done(e, ch)) continue;
    if (ch->rcons < recv_total(ch))
      used += (size_t)snprintf(e->err + used, sizeof(e->err) - used,
                               " [recv from rank %d ch %d dev %d: %zu/%zu done, %zu posted%s]", ch->rc->peer,
                               ch->rc->channel, ch->rc->dev, ch->rdone, recv_total(ch), ch->rpost,
                               ch->rpost == ch->rdone ? ", irecv refused" : "");
    if (used < sizeof(e->err) && ch->nsends && sends_done(ch) < send_total(ch)) {
      size_t rep = ch->spost / ch->nsends;
      const char *why = ch->spost == send_total(ch) || !send_slot_free(e, ch, ch->spost)
                            ? "waiting for completion"
                        : rep > reps_consumed(chans, nchans) ? "waiting for the previous repetition"
                        : send_at(ch, ch->spost)->dep >= 0 &&
                                rep * ch->nrecvs + (size_t)send_at(ch, ch->spost)->dep >= ch->rcons
                            ? "waiting for data from upstream"
                            : "no clear-to-send (isend returned NULL)";
      used += (size_t)snprintf(e->err + used, sizeof(e->err) - used,
                               " [send to rank %d ch %d dev %d: %zu/%zu done, %zu posted, %zu outstanding, %s]",
                               ch->sc->peer, ch->sc->channel, ch->sc->dev, sends_done(ch), send_total(ch), ch->spost,
                               ch->sc->sent - ch->sc->sdone, why);
    }
  }
}

/* Passes over the channels between two looks at the clock. */
#define XFER_PASSES_PER_LOOK 64
/* Idle time after which the loop yields the CPU on each look. */
#define XFER_YIELD_AFTER_S 50e-6

/* The pace of a polling loop: when to read the clock, yield, tick, give up. */
struct xpace {
  double last_progress, last_tick;
  unsigned passes, idle_passes;
};

static struct xpace pace_start(void) {
  double now = xfer_now();
  return (struct xpace){.last_progress = now, .last_tick = now};
}

/* After a pass over the work; the seconds without progress when that is
 * over e->stall_timeout, else 0. */
static double pace(struct xengine *e, struct xpace *p, int progress) {
  /* A pass is a few hundred nanoseconds: the clock (and the stall and tick
   * checks behind it) is read every XFER_PASSES_PER_LOOK passes, so fewer
   * idle passes than that in a row means progress since the last look. */
  p->idle_passes = progress ? 0 : p->idle_passes + 1;
  if (++p->passes % XFER_PASSES_PER_LOOK) return 0;
  double now = xfer_now();
  if (p->idle_passes < XFER_PASSES_PER_LOOK) p->last_progress = now;
  else if (now - p->last_progress > e->stall_timeout) return now - p->last_progress;
  /* Ranks, the plugin's threads and (in simulation) the fabric's engine
   * share few cores: after XFER_YIELD_AFTER_S without progress, give them
   * the CPU.  Not sooner: a yield is a system call, longer than a wire's
   * latency, and would be paid on every message. */
  if (p->idle_passes >= XFER_PASSES_PER_LOOK && now - p->last_progress >= XFER_YIELD_AFTER_S) sched_yield();
  if (e->tick && now - p->last_tick > 0.05) {
    p->last_tick = now;
    e->tick(e->tick_arg);
  }
  return 0;
}

int xfer_run(struct xengine *e, struct xchan *chans, int nchans, size_t reps) {
  struct xpace p = pace_start();
  for (int i = 0; i < nchans; i++) {
    struct xchan *ch = &chans[i];
    ch->rpost = ch->rdone = ch->rcons = ch->spost = ch->sfilled = 0;
    ch->sbase = ch->sc ? ch->sc->sent : 0;
    ch->reps = reps;
    if ((ch->nrecvs && !ch->rc) || (ch->nsends && !ch->sc)) return efail(e, "internal: channel %d has no connection", i);
  }
  for (;;) {
    int progress = 0, busy = 0;
    size_t consumed = nchans ? reps_consumed(chans, nchans) : 0;
    for (int i = 0; i < nchans; i++) {
      struct xchan *ch = &chans[i];
      if (chan_done(e, ch)) continue;
      busy = 1;
      if (ch->rc && (post_recvs(e, ch, &progress) || test_recvs(e, ch, &progress))) return -1;
      if (ch->rc) {
        size_t before = ch->rcons;
        consume_recvs(e, ch, &progress);
        /* a repetition may have just finished: its successor's sends go now */
        if (ch->rcons != before) consumed = reps_consumed(chans, nchans);
      }
      if (ch->sc && (post_sends(e, ch, consumed, &progress) || test_sends(e, ch->sc, &progress))) return -1;
    }
    if (!busy) return 0;
    double idle = pace(e, &p, progress);
    if (idle > 0) {
      describe_stall(e, chans, nchans, idle);
      return -1;
    }
  }
}

int xfer_test_sends(struct xengine *e, struct xconn *conns, size_t n, int *progress) {
  int busy = 0;
  for (size_t i = 0; i < n; i++) {
    struct xconn *c = &conns[i];
    if (!c->comm || c->sdone == c->sent) continue;
    if (test_sends(e, c, progress)) return -1;
    busy += c->sdone < c->sent;
  }
  return busy;
}

int xfer_drain(struct xengine *e, struct xconn *conns, size_t n) {
  struct xpace p = pace_start();
  for (;;) {
    int progress = 0, busy = xfer_test_sends(e, conns, n, &progress);
    if (busy <= 0) return busy;
    double idle = pace(e, &p, progress);
    if (idle > 0) {
      size_t used = (size_t)snprintf(e->err, sizeof(e->err), "no send completed for %.1f s (--stall-timeout):", idle);
      for (size_t i = 0; i < n && used < sizeof(e->err); i++)
        if (conns[i].comm && conns[i].sdone < conns[i].sent)
          used += (size_t)snprintf(e->err + used, sizeof(e->err) - used, " [to rank %d ch %d dev %d: %zu outstanding]",
                                   conns[i].peer, conns[i].channel, conns[i].dev, conns[i].sent - conns[i].sdone);
      return -1;
    }
  }
}
