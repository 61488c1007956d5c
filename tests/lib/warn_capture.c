/* The last WARN logged (warn_capture.h). */
#include "warn_capture.h"

#include <stdarg.h>
#include <stdio.h>

char lp_test_warned[1024];

void lp_test_capture_warn(ncclDebugLogLevel level, unsigned long flags, const char *file, int line, const char *fmt,
                          ...) {
  (void)flags, (void)file, (void)line;
  if (level != NCCL_LOG_WARN) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(lp_test_warned, sizeof(lp_test_warned), fmt, ap);
  va_end(ap);
}
