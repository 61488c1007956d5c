/* Logging through NCCL's logger, or stderr when there is none. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

/* NCCL formats into 1024 bytes; staying below that avoids a silent cut in
 * the middle of the prefix when our message is long. */
#define LP_LOG_BUF 1000

/* Where messages go.  Process-wide by nature, like the logger NCCL hands
 * every init: the one piece of mutable state outside the plugin context
 * (plugin.h), so that any module on any thread, before init and after
 * finalize, can say what went wrong without reaching for that context.
 * Both fields are written atomically and only ever converge. */
static struct {
  ncclDebugLogger_t logger; /* NULL: stderr */
  int stderr_level;         /* -1 until NCCL_DEBUG is read */
} sink = {NULL, -1};

void lp_log_set_logger(ncclDebugLogger_t logger) { __atomic_store_n(&sink.logger, logger, __ATOMIC_RELEASE); }

static ncclDebugLogLevel parse_nccl_debug(const char *s) {
  if (s == NULL || *s == '\0') return NCCL_LOG_NONE;
  if (strcasecmp(s, "VERSION") == 0) return NCCL_LOG_VERSION;
  if (strcasecmp(s, "WARN") == 0) return NCCL_LOG_WARN;
  if (strcasecmp(s, "INFO") == 0) return NCCL_LOG_INFO;
  if (strcasecmp(s, "ABORT") == 0) return NCCL_LOG_ABORT;
  if (strcasecmp(s, "TRACE") == 0) return NCCL_LOG_TRACE;
  return NCCL_LOG_NONE;
}

ncclDebugLogLevel lp_log_stderr_level(void) {
  /* Parsed once; -1 means not yet.  A benign race: every thread computes the
   * same value from the same environment. */
  int lvl = __atomic_load_n(&sink.stderr_level, __ATOMIC_ACQUIRE);
  if (lvl < 0) {
    lvl = (int)parse_nccl_debug(getenv("NCCL_DEBUG"));
    __atomic_store_n(&sink.stderr_level, lvl, __ATOMIC_RELEASE);
  }
  return (ncclDebugLogLevel)lvl;
}

static const char *level_name(ncclDebugLogLevel level) {
  switch (level) {
  case NCCL_LOG_WARN: return "WARN";
  case NCCL_LOG_INFO: return "INFO";
  case NCCL_LOG_TRACE: return "TRACE";
  case NCCL_LOG_VERSION: return "VERSION";
  case NCCL_LOG_ABORT: return "ABORT";
  default: return "LOG";
  }
}

void lp_log(ncclDebugLogLevel level, unsigned long flags, const char *file, int line, const char *fmt, ...) {
  ncclDebugLogger_t logger = __atomic_load_n(&sink.logger, __ATOMIC_ACQUIRE);
  if (logger == NULL && level > lp_log_stderr_level()) return;

  char msg[LP_LOG_BUF];
  int off = snprintf(msg, sizeof(msg), "%s : ", LP_LOG_PREFIX);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg + off, sizeof(msg) - (size_t)off, fmt, ap);
  va_end(ap);

  if (logger != NULL) {
    logger(level, flags, file, line, "%s", msg);
    return;
  }
  char host[64] = "?";
  gethostname(host, sizeof(host) - 1);
  host[sizeof(host) - 1] = '\0';
  fprintf(stderr, "%s:%d:%ld [linkpass] %s %s\n", host, (int)getpid(), (long)syscall(SYS_gettid), level_name(level),
          msg);
}
