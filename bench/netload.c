/*
 * linkpass-perf: plugin loading (NCCL's rules) and the per-ABI shims.
 */
#include "netload.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---------------------------------------------------------------- logger */

static int log_level = -1;
static int log_rank = -1;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static void log_init(void) {
  const char *e = getenv("NCCL_DEBUG");
  log_level = NCCL_LOG_WARN;
  if (!e) return;
  if (!strcasecmp(e, "VERSION")) log_level = NCCL_LOG_VERSION;
  else if (!strcasecmp(e, "WARN")) log_level = NCCL_LOG_WARN;
  else if (!strcasecmp(e, "INFO")) log_level = NCCL_LOG_INFO;
  else if (!strcasecmp(e, "TRACE")) log_level = NCCL_LOG_TRACE;
  else if (!strcasecmp(e, "NONE")) log_level = NCCL_LOG_NONE;
}

void lp_logger_set_rank(int rank) { log_rank = rank; }

void lp_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line, const char *fmt, ...) {
  (void)flags;
  pthread_once(&log_once, log_init);
  /* ABORT is printed like WARN; TRACE only when asked for */
  int eff = level == NCCL_LOG_ABORT ? NCCL_LOG_WARN : (int)level;
  if (eff > log_level || level == NCCL_LOG_NONE) return;
  /* Like NCCL: one fixed 1024-byte buffer per message, written in one go so
   * lines from the plugin's threads do not interleave.  A plugin whose lines
   * come out cut short here is cut short in NCCL too. */
  char buf[1024];
  char host[64] = "";
  gethostname(host, sizeof(host) - 1);
  const char *lvl = level == NCCL_LOG_WARN || level == NCCL_LOG_ABORT ? "WARN" : level == NCCL_LOG_TRACE ? "TRACE" : "INFO";
  int n = snprintf(buf, sizeof(buf), "%s:%d:%ld [%d] NCCL %s ", host, (int)getpid(), (long)syscall(SYS_gettid),
                   log_rank, lvl);
  if (level == NCCL_LOG_TRACE && file && n < (int)sizeof(buf))
    n += snprintf(buf + n, sizeof(buf) - (size_t)n, "%s:%d ", file, line);
  if (n < (int)sizeof(buf)) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
    va_end(ap);
  }
  size_t len = strnlen(buf, sizeof(buf) - 1);
  if (len == sizeof(buf) - 2 || len == 0 || buf[len - 1] != '\n') buf[len++] = '\n';
  fwrite(buf, 1, len, stderr);
}

const char *lp_result_str(ncclResult_t r) {
  switch (r) {
  case ncclSuccess: return "ncclSuccess";
  case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
  case ncclSystemError: return "ncclSystemError";
  case ncclInternalError: return "ncclInternalError";
  case ncclInvalidArgument: return "ncclInvalidArgument";
  case ncclInvalidUsage: return "ncclInvalidUsage";
  case ncclRemoteError: return "ncclRemoteError";
  case ncclInProgress: return "ncclInProgress";
  case ncclTimeout: return "ncclTimeout";
  default: return "unknown ncclResult_t";
  }
}

/* NCCL hands plugins a profiler callback from v10 on; ours records nothing. */
static ncclResult_t prof_callback(void **eHandle, int type, void *pHandle, int64_t pluginId, void *extData) {
  (void)type, (void)pHandle, (void)pluginId, (void)extData;
  if (eHandle) *eHandle = NULL;
  return ncclSuccess;
}

/* ------------------------------------------------------------- the shims */

#define P(V) ((const ncclNet_##V##_t *)n->plugin)

/* Calls whose signature is the same in every version. */
#define COMMON_SHIMS(V)                                                                                       \
  static ncclResult_t V##_devices(struct lp_net *n, int *nd) { return P(V)->devices(nd); }                  \
  static ncclResult_t V##_accept(struct lp_net *n, void *lc, void **rc) {                                   \
    ncclNetDeviceHandle_##V##_t *dh = NULL;                                                                  \
    return P(V)->accept(lc, rc, &dh);                                                                        \
  }                                                                                                          \
  static ncclResult_t V##_reg_mr(struct lp_net *n, void *c, void *d, size_t s, int t, void **mh) {           \
    return P(V)->regMr(c, d, s, t, mh);                                                                      \
  }                                                                                                          \
  static ncclResult_t V##_reg_mr_dmabuf(struct lp_net *n, void *c, void *d, size_t s, int t, uint64_t off,     \
                                       int fd, void **mh) {                                                  \
    return P(V)->regMrDmaBuf ? P(V)->regMrDmaBuf(c, d, s, t, off, fd, mh) : ncclInvalidUsage;                \
  }                                                                                                          \
  static ncclResult_t V##_dereg_mr(struct lp_net *n, void *c, void *mh) { return P(V)->deregMr(c, mh); }    \
  static ncclResult_t V##_iflush(struct lp_net *n, void *rc, int k, void **d, int *s, void **mh, void **r) { \
    return P(V)->iflush(rc, k, d, s, mh, r);                                                                 \
  }                                                                                                          \
  static ncclResult_t V##_test(struct lp_net *n, void *r, int *done, int *sizes) {                           \
    return P(V)->test(r, done, sizes);                                                                       \
  }                                                                                                          \
  static ncclResult_t V##_close_send(struct lp_net *n, void *c) { return P(V)->closeSend(c); }              \
  static ncclResult_t V##_close_recv(struct lp_net *n, void *c) { return P(V)->closeRecv(c); }              \
  static ncclResult_t V##_close_listen(struct lp_net *n, void *c) { return P(V)->closeListen(c); }

COMMON_SHIMS(v8)
COMMON_SHIMS(v9)
COMMON_SHIMS(v10)
COMMON_SHIMS(v11)
COMMON_SHIMS(v12)

/* Properties: v9..v12 share the head of the layout; copy field by field so a
 * version's own struct is what the plugin fills. */
#define COPY_PROPS_COMMON(dst, src)                                                   \
  do {                                                                                \
    snprintf((dst)->name, sizeof((dst)->name), "%s", (src).name ? (src).name : "");    \
    snprintf((dst)->pci_path, sizeof((dst)->pci_path), "%s", (src).pciPath ? (src).pciPath : ""); \
    (dst)->guid = (src).guid;                                                         \
    (dst)->ptr_support = (src).ptrSupport;                                            \
    (dst)->reg_is_global = (src).regIsGlobal;                                         \
    (dst)->speed = (src).speed;                                                       \
    (dst)->port = (src).port;                                                         \
    (dst)->latency = (src).latency;                                                   \
    (dst)->max_comms = (src).maxComms;                                                \
    (dst)->max_recvs = (src).maxRecvs;                                                \
  } while (0)

#define PROPS_SHIM(V)                                                            \
  static ncclResult_t V##_get_props(struct lp_net *n, int dev, struct lp_props *p) { \
    ncclNetProperties_##V##_t q;                                                 \
    memset(&q, 0, sizeof(q));                                                    \
    ncclResult_t r = P(V)->getProperties(dev, &q);                               \
    if (r != ncclSuccess) return r;                                              \
    memset(p, 0, sizeof(*p));                                                    \
    COPY_PROPS_COMMON(p, q);                                                     \
    p->force_flush = q.forceFlush;                                               \
    p->max_p2p_bytes = q.maxP2pBytes;                                            \
    p->max_coll_bytes = q.maxCollBytes;                                          \
    p->vdevs = q.vProps.ndevs;                                                   \
    return ncclSuccess;                                                          \
  }
PROPS_SHIM(v9)
PROPS_SHIM(v10)
PROPS_SHIM(v11)
PROPS_SHIM(v12)

static ncclResult_t v8_get_props(struct lp_net *n, int dev, struct lp_props *p) {
  ncclNetProperties_v8_t q;
  memset(&q, 0, sizeof(q));
  ncclResult_t r = P(v8)->getProperties(dev, &q);
  if (r != ncclSuccess) return r;
  memset(p, 0, sizeof(*p));
  COPY_PROPS_COMMON(p, q);
  return ncclSuccess;
}

/* init: v8/v9 take the logger only, v10 adds the profiler, v11+ a ctx,
 * the communicator id and a config. */
static ncclResult_t v8_init(struct lp_net *n, uint64_t id, ncclDebugLogger_t log) {
  (void)id;
  return P(v8)->init(log);
}
static ncclResult_t v9_init(struct lp_net *n, uint64_t id, ncclDebugLogger_t log) {
  (void)id;
  return P(v9)->init(log);
}
static ncclResult_t v10_init(struct lp_net *n, uint64_t id, ncclDebugLogger_t log) {
  (void)id;
  return P(v10)->init(log, prof_callback);
}
static ncclResult_t v11_init(struct lp_net *n, uint64_t id, ncclDebugLogger_t log) {
  ncclNetCommConfig_v11_t cfg = {.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF};
  return P(v11)->init(&n->ctx, id, &cfg, log, prof_callback);
}
static ncclResult_t v12_init(struct lp_net *n, uint64_t id, ncclDebugLogger_t log) {
  ncclNetCommConfig_v12_t cfg = {.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF};
  return P(v12)->init(&n->ctx, id, &cfg, log, prof_callback);
}

static ncclResult_t no_finalize(struct lp_net *n) {
  (void)n;
  return ncclSuccess;
}
static ncclResult_t v11_finalize(struct lp_net *n) { return P(v11)->finalize(n->ctx); }
static ncclResult_t v12_finalize(struct lp_net *n) { return P(v12)->finalize(n->ctx); }

/* listen: a ctx from v11 on. */
static ncclResult_t v8_listen(struct lp_net *n, int d, void *h, void **lc) { return P(v8)->listen(d, h, lc); }
static ncclResult_t v9_listen(struct lp_net *n, int d, void *h, void **lc) { return P(v9)->listen(d, h, lc); }
static ncclResult_t v10_listen(struct lp_net *n, int d, void *h, void **lc) { return P(v10)->listen(d, h, lc); }
static ncclResult_t v11_listen(struct lp_net *n, int d, void *h, void **lc) { return P(v11)->listen(n->ctx, d, h, lc); }
static ncclResult_t v12_listen(struct lp_net *n, int d, void *h, void **lc) { return P(v12)->listen(n->ctx, d, h, lc); }

/* connect: v10 passes a per-comm config, v11+ a ctx instead. */
static ncclResult_t v8_connect(struct lp_net *n, int d, void *h, void **sc) {
  ncclNetDeviceHandle_v8_t *dh = NULL;
  return P(v8)->connect(d, h, sc, &dh);
}
static ncclResult_t v9_connect(struct lp_net *n, int d, void *h, void **sc) {
  ncclNetDeviceHandle_v9_t *dh = NULL;
  return P(v9)->connect(d, h, sc, &dh);
}
static ncclResult_t v10_connect(struct lp_net *n, int d, void *h, void **sc) {
  ncclNetDeviceHandle_v10_t *dh = NULL;
  ncclNetCommConfig_v10_t cfg = {.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF};
  return P(v10)->connect(d, &cfg, h, sc, &dh);
}
static ncclResult_t v11_connect(struct lp_net *n, int d, void *h, void **sc) {
  ncclNetDeviceHandle_v11_t *dh = NULL;
  return P(v11)->connect(n->ctx, d, h, sc, &dh);
}
static ncclResult_t v12_connect(struct lp_net *n, int d, void *h, void **sc) {
  ncclNetDeviceHandle_v12_t *dh = NULL;
  return P(v12)->connect(n->ctx, d, h, sc, &dh);
}

/* isend/irecv: v8 sizes are int; v8/v9 have no profiler handles. */
#define MAX_RECVS 8

static ncclResult_t v8_isend(struct lp_net *n, void *sc, void *d, size_t s, int tag, void *mh, void **req) {
  if (s > INT_MAX) return ncclInvalidArgument;
  return P(v8)->isend(sc, d, (int)s, tag, mh, req);
}
static ncclResult_t v9_isend(struct lp_net *n, void *sc, void *d, size_t s, int tag, void *mh, void **req) {
  return P(v9)->isend(sc, d, s, tag, mh, req);
}
static ncclResult_t v10_isend(struct lp_net *n, void *sc, void *d, size_t s, int tag, void *mh, void **req) {
  return P(v10)->isend(sc, d, s, tag, mh, NULL, req);
}
static ncclResult_t v11_isend(struct lp_net *n, void *sc, void *d, size_t s, int tag, void *mh, void **req) {
  return P(v11)->isend(sc, d, s, tag, mh, NULL, req);
}
static ncclResult_t v12_isend(struct lp_net *n, void *sc, void *d, size_t s, int tag, void *mh, void **req) {
  return P(v12)->isend(sc, d, s, tag, mh, NULL, req);
}

static ncclResult_t v8_irecv(struct lp_net *n, void *rc, int k, void **d, size_t *s, int *tags, void **mh,
                             void **req) {
  int sizes[MAX_RECVS];
  if (k < 1 || k > MAX_RECVS) return ncclInvalidArgument;
  for (int i = 0; i < k; i++) {
    if (s[i] > INT_MAX) return ncclInvalidArgument;
    sizes[i] = (int)s[i];
  }
  return P(v8)->irecv(rc, k, d, sizes, tags, mh, req);
}
static ncclResult_t v9_irecv(struct lp_net *n, void *rc, int k, void **d, size_t *s, int *tags, void **mh,
                             void **req) {
  return P(v9)->irecv(rc, k, d, s, tags, mh, req);
}
static ncclResult_t v10_irecv(struct lp_net *n, void *rc, int k, void **d, size_t *s, int *tags, void **mh,
                              void **req) {
  void *ph[MAX_RECVS] = {0};
  if (k < 1 || k > MAX_RECVS) return ncclInvalidArgument;
  return P(v10)->irecv(rc, k, d, s, tags, mh, ph, req);
}
static ncclResult_t v11_irecv(struct lp_net *n, void *rc, int k, void **d, size_t *s, int *tags, void **mh,
                              void **req) {
  void *ph[MAX_RECVS] = {0};
  if (k < 1 || k > MAX_RECVS) return ncclInvalidArgument;
  return P(v11)->irecv(rc, k, d, s, tags, mh, ph, req);
}
static ncclResult_t v12_irecv(struct lp_net *n, void *rc, int k, void **d, size_t *s, int *tags, void **mh,
                              void **req) {
  void *ph[MAX_RECVS] = {0};
  if (k < 1 || k > MAX_RECVS) return ncclInvalidArgument;
  return P(v12)->irecv(rc, k, d, s, tags, mh, ph, req);
}

#define OPS_TABLE(V, FIN)                                                                              \
  static const struct lp_net_ops V##_ops = {                                                           \
      V##_init,   V##_devices,   V##_get_props,  V##_listen,     V##_connect,    V##_accept,           \
      V##_reg_mr, V##_reg_mr_dmabuf, V##_dereg_mr, V##_isend,    V##_irecv,      V##_iflush,     V##_test, \
      V##_close_send, V##_close_recv, V##_close_listen, FIN,                                           \
  };
OPS_TABLE(v8, no_finalize)
OPS_TABLE(v9, no_finalize)
OPS_TABLE(v10, no_finalize)
OPS_TABLE(v11, v11_finalize)
OPS_TABLE(v12, v12_finalize)

/* ---------------------------------------------------------------- loader */

static const struct {
  int abi;
  const char *sym;
  const struct lp_net_ops *ops;
} versions[] = {
    {12, NCCL_NET_PLUGIN_SYMBOL_V12, &v12_ops}, {11, NCCL_NET_PLUGIN_SYMBOL_V11, &v11_ops},
    {10, NCCL_NET_PLUGIN_SYMBOL_V10, &v10_ops}, {9, NCCL_NET_PLUGIN_SYMBOL_V9, &v9_ops},
    {8, NCCL_NET_PLUGIN_SYMBOL_V8, &v8_ops},
};

int lp_net_candidates(const char *name, char out[2][512]) {
  int k = 0;
  if (!name) return 0; /* also keeps -fsanitize=null's format check quiet */
  size_t len = strlen(name);
  snprintf(out[k++], 512, "%s", name);
  int is_lib_so = len >= 6 && strncmp(name, "lib", 3) == 0 && strcmp(name + len - 3, ".so") == 0;
  if (!strchr(name, '/') && !is_lib_so) snprintf(out[k++], 512, "libnccl-net-%s.so", name);
  return k;
}

/* The members every shim calls; a plugin with one of them NULL would crash
 * NCCL too, so it is refused with its name.  Only after init: a plugin may
 * export a table holding just its name and init, and fill in the rest when
 * init runs (the reference IB plugin does, to pick its transport), and NCCL
 * looks at the other members only once init has returned. */
static const char *missing_member(int abi, const void *p) {
#define NEED(V, m) \
  if (!((const ncclNet_##V##_t *)p)->m) return #m
#define NEED_ALL(V)                                                                               \
  do {                                                                                            \
    NEED(V, init); NEED(V, devices); NEED(V, getProperties); NEED(V, listen); NEED(V, connect);   \
    NEED(V, accept); NEED(V, regMr); NEED(V, deregMr); NEED(V, isend); NEED(V, irecv);            \
    NEED(V, test); NEED(V, closeSend); NEED(V, closeRecv); NEED(V, closeListen);                   \
  } while (0)
  switch (abi) {
  case 8: NEED_ALL(v8); break;
  case 9: NEED_ALL(v9); break;
  case 10: NEED_ALL(v10); break;
  case 11: NEED_ALL(v11); NEED(v11, finalize); break;
  case 12: NEED_ALL(v12); NEED(v12, finalize); break;
  default: break;
  }
  return NULL;
#undef NEED_ALL
#undef NEED
}

/* The init member of any version: second in every layout, but typed per
 * version, so read through each version's own struct. */
static const void *init_member(int abi, const void *p) {
  switch (abi) {
  case 8: return (const void *)((const ncclNet_v8_t *)p)->init;
  case 9: return (const void *)((const ncclNet_v9_t *)p)->init;
  case 10: return (const void *)((const ncclNet_v10_t *)p)->init;
  case 11: return (const void *)((const ncclNet_v11_t *)p)->init;
  case 12: return (const void *)((const ncclNet_v12_t *)p)->init;
  default: return NULL;
  }
}

static void append(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *err, size_t errlen, const char *fmt, ...) {
  size_t used = strnlen(err, errlen);
  if (used + 1 >= errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err + used, errlen - used, fmt, ap);
  va_end(ap);
}

int lp_net_load(const char *plugin, int abi, struct lp_net *n, char *err, size_t errlen) {
  char list[1024], *save = NULL;
  const char *src = plugin ? "--plugin" : "NCCL_NET_PLUGIN";
  const char *names = plugin ? plugin : getenv("NCCL_NET_PLUGIN");
  memset(n, 0, sizeof(*n));
  err[0] = '\0';
  if (!names || !*names) {
    names = "libnccl-net.so";
    src = "default";
  }
  if (strcasecmp(names, "none") == 0) {
    snprintf(err, errlen, "%s=none: no external plugin to drive (set --plugin or NCCL_NET_PLUGIN)", src);
    return -1;
  }
  if (strlen(names) >= sizeof(list)) {
    snprintf(err, errlen, "%s: list too long", src);
    return -1;
  }
  strcpy(list, names);
  append(err, errlen, "no usable net plugin (%s=\"%s\"):", src, names);
  for (char *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
    char cand[2][512];
    int nc = lp_net_candidates(name, cand);
    void *dl = NULL;
    int which = -1;
    for (int i = 0; i < nc && !dl; i++) {
      /* NCCL opens plugins RTLD_NOW | RTLD_LOCAL: unresolved symbols fail here */
      dl = dlopen(cand[i], RTLD_NOW | RTLD_LOCAL);
      if (dl) which = i;
      else append(err, errlen, "\n  dlopen(%s): %s", cand[i], dlerror());
    }
    if (!dl) continue;
    int null_init = 0;
    for (size_t v = 0; v < sizeof(versions) / sizeof(versions[0]); v++) {
      if (abi && versions[v].abi != abi) continue;
      const void *p = dlsym(dl, versions[v].sym);
      if (!p) continue;
      /* NCCL takes the first symbol it finds and calls its init: without
       * one there is nothing to call.  The rest is checked after init. */
      if (!init_member(versions[v].abi, p)) {
        append(err, errlen, "\n  %s: %s has a NULL init", cand[which], versions[v].sym);
        null_init = 1;
        break;
      }
      n->abi = versions[v].abi;
      n->plugin = p;
      n->ops = versions[v].ops;
      n->dl = dl;
      n->name = *(const char *const *)p; /* `name` is the first member of every version */
      memcpy(n->path, cand[which], sizeof(n->path)); /* both 512, NUL-terminated */
      err[0] = '\0';
      return 0;
    }
    if (!null_init && abi) append(err, errlen, "\n  %s: no usable ncclNetPlugin_v%d", cand[which], abi);
    else if (!null_init) append(err, errlen, "\n  %s: exports none of ncclNetPlugin_v12..v8", cand[which]);
    dlclose(dl);
  }
  return -1;
}

int lp_net_init(struct lp_net *n, uint64_t comm_id, ncclDebugLogger_t log, char *err, size_t errlen) {
  const char *sym = NULL;
  for (size_t v = 0; v < sizeof(versions) / sizeof(versions[0]); v++)
    if (versions[v].abi == n->abi) sym = versions[v].sym;
  ncclResult_t r = n->ops->init(n, comm_id, log);
  if (r != ncclSuccess) {
    snprintf(err, errlen, "%s: %s.init failed: %s", n->path, sym, lp_result_str(r));
    return -1;
  }
  const char *miss = missing_member(n->abi, n->plugin);
  if (miss) {
    /* init succeeded, so the plugin holds resources; finalize if it can */
    snprintf(err, errlen, "%s: %s has a NULL %s after init", n->path, sym, miss);
    if (n->abi >= 11 && strcmp(miss, "finalize") != 0) n->ops->finalize(n);
    return -1;
  }
  /* init may also have rewritten the name (the reference IB plugin's table
   * says "NCCL RDMA Plugin v11" until init installs "IBext_v11") */
  n->name = *(const char *const *)n->plugin;
  return 0;
}

void lp_net_unload(struct lp_net *n) {
  /* Plugins start threads (async events, progress) that may outlive
   * finalize by a moment; unmapping their code under them would crash the
   * process at exit, so the library stays loaded, as NCCL leaves it. */
  n->plugin = NULL;
  n->ops = NULL;
}
