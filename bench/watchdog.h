/*
 * linkpass-perf: a rank's watchdog thread.  It ends the process (exit code
 * 2, with the phase the rank was in) when the run outlives --timeout or the
 * launcher goes away, so no rank is ever left spinning on a dead fabric.
 */
#ifndef LINKPASS_PERF_WATCHDOG_H
#define LINKPASS_PERF_WATCHDOG_H

/* Start watching; `oob_fd` < 0 until connected (see watchdog_set_fd). */
int watchdog_start(int rank, double timeout);
void watchdog_set_fd(int oob_fd);
void watchdog_stop(void);
/* What the rank is doing, for the message (printf-style, kept short). */
void watchdog_phase(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
