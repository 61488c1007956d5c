/*
 * Logging: every message goes through NCCL's logger with the "NET/linkpass"
 * prefix and the NCCL_NET subsystem flag.  Without a logger (unit tests,
 * tools) messages go to stderr, filtered by NCCL_DEBUG like NCCL would.
 *
 * Nothing here is meant for the data path: only setup, teardown and errors
 * log, so a healthy transfer never pays for a format string.
 */
#ifndef LP_LOG_H
#define LP_LOG_H

#include "linkpass/nccl_net.h"

#define LP_LOG_PREFIX "NET/linkpass"

/* Install NCCL's logger (NULL: fall back to stderr). */
void lp_log_set_logger(ncclDebugLogger_t logger);

/* Emit one message; the caller's file/line are forwarded to NCCL. */
void lp_log(ncclDebugLogLevel level, unsigned long flags, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Level at which stderr logging happens when no logger is installed. */
ncclDebugLogLevel lp_log_stderr_level(void);

#define LP_WARN(...) lp_log(NCCL_LOG_WARN, NCCL_NET, __FILE__, __LINE__, __VA_ARGS__)
#define LP_INFO(flags, ...) lp_log(NCCL_LOG_INFO, (flags), __FILE__, __LINE__, __VA_ARGS__)
#define LP_TRACE(...) lp_log(NCCL_LOG_TRACE, NCCL_NET, __FILE__, __LINE__, __VA_ARGS__)

#endif
