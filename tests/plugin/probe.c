/*
 * Loads the plugin like NCCL and calls init through every ABI version where
 * no device can be used: the load must succeed, init must fail with a WARN
 * that says why (NCCL silently falls back to its own transports otherwise).
 * With a second argument, each init must instead log a line (any level)
 * containing it: a deliberate refusal such as NCCL_IB_DISABLE=1 is INFO.
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "linkpass/nccl_net.h"

static int warned;
static const char *want; /* argv[2]: the line each failed init must log */

static void logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line, const char *fmt, ...) {
  (void)file;
  (void)line;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (want ? strstr(msg, want) != NULL
           : level == NCCL_LOG_WARN && (flags & NCCL_NET) && strstr(msg, "NET/linkpass") && strstr(msg, "init failed"))
    warned++;
  fprintf(stderr, "[%d] %s\n", (int)level, msg);
}

int main(int argc, char **argv) {
  if (argc != 2 && argc != 3) return 2;
  want = argc == 3 ? argv[2] : NULL;
  void *dl = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (dl == NULL) {
    fprintf(stderr, "FAIL: dlopen: %s\n", dlerror());
    return 1;
  }
  ncclResult_t rc;
  void *ctx = NULL;
  ncclNetCommConfig_v12_t cfg = {NCCL_NET_TRAFFIC_CLASS_UNDEF};
  const ncclNet_v12_t *v12 = dlsym(dl, "ncclNetPlugin_v12");
  const ncclNet_v11_t *v11 = dlsym(dl, "ncclNetPlugin_v11");
  const ncclNet_v10_t *v10 = dlsym(dl, "ncclNetPlugin_v10");
  const ncclNet_v9_t *v9 = dlsym(dl, "ncclNetPlugin_v9");
  const ncclNet_v8_t *v8 = dlsym(dl, "ncclNetPlugin_v8");
  if (!v12 || !v11 || !v10 || !v9 || !v8) {
    fprintf(stderr, "FAIL: a plugin table is missing\n");
    return 1;
  }
  int fails = 0, ndev = -1;
  rc = v12->init(&ctx, 1, &cfg, logger, NULL);
  fails += rc != ncclSuccess;
  rc = v11->init(&ctx, 1, (ncclNetCommConfig_v11_t *)&cfg, logger, NULL);
  fails += rc != ncclSuccess;
  fails += v10->init(logger, NULL) != ncclSuccess;
  fails += v9->init(logger) != ncclSuccess;
  fails += v8->init(logger) != ncclSuccess;
  v12->devices(&ndev);
  if (fails != 5 || warned < 5 || ndev != 0) {
    fprintf(stderr, "FAIL: %d of 5 inits failed, %d warnings, %d devices\n", fails, warned, ndev);
    return 1;
  }
  if (strcmp(v12->name, "linkpass") || strcmp(v8->name, "linkpass")) return 1;
  printf("PASS: every init failed loudly, load succeeded\n");
  return 0;
}
