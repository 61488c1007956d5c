/* The last WARN the plugin's code logged, for unit tests that check what
 * a user is told (lp_log_set_logger(lp_test_capture_warn) around the call). */
#ifndef LP_TEST_WARN_CAPTURE_H
#define LP_TEST_WARN_CAPTURE_H

#include "log.h"

extern char lp_test_warned[1024];
void lp_test_capture_warn(ncclDebugLogLevel level, unsigned long flags, const char *file, int line, const char *fmt,
                          ...);

#endif
