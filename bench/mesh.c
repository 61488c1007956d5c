/*
 * linkpass-perf: listen / exchange handles / connect + accept.
 */
#include "mesh.h"

#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oob.h"

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -1;
}

static int mod(int a, int n) { return ((a % n) + n) % n; }

int perf_mesh_needs_send(enum perf_op op, int nranks, int rank, int peer) {
  if (peer == rank) return 0;
  return op == PERF_ALLTOALL || peer == mod(rank + 1, nranks);
}

int perf_mesh_needs_recv(enum perf_op op, int nranks, int rank, int peer) {
  if (peer == rank) return 0;
  return op == PERF_ALLTOALL || peer == mod(rank - 1, nranks);
}

#define HANDLE NCCL_NET_HANDLE_MAXSIZE

int perf_mesh_connect(struct perf_mesh *m, struct lp_net *net, const struct perf_opts *o, int oob_fd, char *err,
                      size_t errlen) {
  int n = o->nranks, me = o->rank, C = o->channels, ndev = 0, rc = -1;
  size_t nconn = (size_t)C * (size_t)n, blob = nconn * HANDLE;
  char *mine = NULL, *all = NULL, *handles = NULL;
  void **listens = NULL;
  ncclResult_t r;

  m->nranks = n;
  m->rank = me;
  m->channels = C;
  m->send = calloc(nconn, sizeof(*m->send));
  m->recv = calloc(nconn, sizeof(*m->recv));
  listens = calloc(nconn, sizeof(*listens));
  mine = calloc(1, blob);
  all = calloc((size_t)n, blob);
  handles = calloc(nconn, HANDLE);
  if (!m->send || !m->recv || !listens || !mine || !all || !handles) {
    fail(err, errlen, "out of memory for %zu connections", nconn);
    goto out;
  }

  r = net->ops->devices(net, &ndev);
  if (r != ncclSuccess || ndev <= 0) {
    fail(err, errlen, "the plugin reports %d devices (%s): nothing to run on", ndev, lp_result_str(r));
    goto out;
  }
  int base = o->dev >= 0 ? o->dev : (o->local_rank >= 0 ? o->local_rank : 0);
  for (int c = 0; c < C; c++) m->devs[c] = (base + (o->same_dev ? 0 : c)) % ndev;

  /* 1. listen on each receive connection; handles go out in [channel][peer] */
  for (int c = 0; c < C; c++) {
    for (int p = 0; p < n; p++) {
      size_t i = (size_t)c * (size_t)n + (size_t)p;
      if (!perf_mesh_needs_recv(o->op, n, me, p)) continue;
      r = net->ops->listen(net, m->devs[c], mine + i * HANDLE, &listens[i]);
      if (r != ncclSuccess || !listens[i]) {
        fail(err, errlen, "listen on dev %d (channel %d, for rank %d) failed: %s", m->devs[c], c, p, lp_result_str(r));
        goto out;
      }
    }
  }

  /* 2. everybody's handles */
  if (oob_allgather(oob_fd, me, n, mine, blob, all, o->conn_timeout, NULL, err, errlen)) goto out;

  /* 3. connect and accept, interleaved, polled until all are up.  connect()
   * keeps its state in the handle between calls (NCCL's IB transport does),
   * so each connection polls its own copy. */
  for (int c = 0; c < C; c++)
    for (int p = 0; p < n; p++) {
      size_t i = (size_t)c * (size_t)n + (size_t)p;
      memcpy(handles + i * HANDLE, all + (size_t)p * blob + ((size_t)c * (size_t)n + (size_t)me) * HANDLE, HANDLE);
      m->send[i] = (struct xconn){.is_send = 1, .peer = p, .channel = c, .dev = m->devs[c]};
      m->recv[i] = (struct xconn){.is_send = 0, .peer = p, .channel = c, .dev = m->devs[c]};
    }
  double deadline = xfer_now() + o->conn_timeout;
  for (;;) {
    int pending = 0;
    for (size_t i = 0; i < nconn; i++) {
      int c = (int)(i / (size_t)n), p = (int)(i % (size_t)n);
      if (perf_mesh_needs_send(o->op, n, me, p) && !m->send[i].comm) {
        r = net->ops->connect(net, m->devs[c], handles + i * HANDLE, &m->send[i].comm);
        if (r != ncclSuccess) {
          fail(err, errlen, "connect to rank %d (channel %d, dev %d) failed: %s", p, c, m->devs[c], lp_result_str(r));
          goto out;
        }
        pending += !m->send[i].comm;
      }
      if (listens[i] && !m->recv[i].comm) {
        r = net->ops->accept(net, listens[i], &m->recv[i].comm);
        if (r != ncclSuccess) {
          fail(err, errlen, "accept from rank %d (channel %d, dev %d) failed: %s", p, c, m->devs[c], lp_result_str(r));
          goto out;
        }
        pending += !m->recv[i].comm;
        if (m->recv[i].comm) {
          /* NCCL closes a listening comm as soon as its one accept is done */
          net->ops->close_listen(net, listens[i]);
          listens[i] = NULL;
        }
      }
    }
    if (!pending) break;
    if (xfer_now() > deadline) {
      char who[512] = "";
      size_t used = 0;
      for (size_t i = 0; i < nconn && used < sizeof(who); i++) {
        int c = (int)(i / (size_t)n), p = (int)(i % (size_t)n);
        if (perf_mesh_needs_send(o->op, n, me, p) && !m->send[i].comm)
          used += (size_t)snprintf(who + used, sizeof(who) - used, " connect to rank %d ch %d;", p, c);
        if (listens[i] && !m->recv[i].comm && used < sizeof(who))
          used += (size_t)snprintf(who + used, sizeof(who) - used, " accept from rank %d ch %d;", p, c);
      }
      fail(err, errlen, "connections not up after %.0f s (--connect-timeout):%s", o->conn_timeout, who);
      goto out;
    }
    sched_yield();
  }
  rc = 0;
out:
  for (size_t i = 0; listens && i < nconn; i++)
    if (listens[i]) net->ops->close_listen(net, listens[i]);
  free(listens);
  free(mine);
  free(all);
  free(handles);
  return rc;
}

void perf_mesh_close(struct perf_mesh *m, struct lp_net *net) {
  size_t nconn = perf_mesh_nconns(m);
  for (size_t i = 0; m->send && i < nconn; i++)
    if (m->send[i].comm) net->ops->close_send(net, m->send[i].comm);
  for (size_t i = 0; m->recv && i < nconn; i++)
    if (m->recv[i].comm) net->ops->close_recv(net, m->recv[i].comm);
  free(m->send);
  free(m->recv);
  m->send = m->recv = NULL;
}
