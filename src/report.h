/*
 * What operators read: one line per failover, failback and lost path, to
 * syslog (ident "linkpass") and mirrored to NCCL's log at WARN.  key=value
 * fields so that a log pipeline can parse them without a custom grammar:
 *
 *   event=failover comm=0x1a2b dir=send dev=mlx5_0 port=1 new_dev=mlx5_1
 *   new_port=1 peer=node1/198.18.0.2:mlx5_0 reason=port_down inflight=4
 *   replayed=2 replayed_bytes=2097152 duration_us=812 path=standby
 *   time=2026-12-05T18:45:54.123456Z
 *
 * Formatting is pure and tested; emitting is the only side effect.
 */
#ifndef LP_REPORT_H
#define LP_REPORT_H

#include <stddef.h>
#include <stdint.h>

enum lp_report_kind { LP_REPORT_FAILOVER = 1, LP_REPORT_FAILBACK, LP_REPORT_PATH_LOST };

struct lp_report {
  enum lp_report_kind kind;
  uint64_t comm;   /* connection id, the same in both peers' logs */
  const char *dir; /* "send" or "recv" */
  const char *dev; /* where the connection was */
  int port;
  const char *new_dev; /* where it is now (NULL for path_lost) */
  int new_port;
  const char *peer;
  const char *reason;
  int inflight; /* requests outstanding when it moved */
  int replayed; /* messages written again on the new path */
  uint64_t replayed_bytes;
  uint64_t duration_us; /* from the fault being seen to traffic flowing again */
  const char *path;     /* "standby" (it moved onto its standby path), "new" (a path built for the move) */
  /* Wall clock, microseconds since the epoch (0: unknown), when traffic
   * flowed again (the path was lost): a sweep's lines go out after it, so
   * neither the line's syslog stamp nor its arrival says when. */
  uint64_t at_us;
};

/* An event line's time= value: the wall clock `at_us` (microseconds since
 * the epoch; 0: "-") in UTC, RFC 3339, to the microsecond. */
#define LP_REPORT_TIME_LEN 40
void lp_report_time(uint64_t at_us, char *out, size_t len);

/* The line, without trailing newline.  Returns its length (as snprintf). */
int lp_report_format(const struct lp_report *r, char *buf, size_t len);

/* Where lines go: the syslog socket (LINKPASS_SYSLOG_SOCKET, default
 * /dev/log: containers often mount the host's elsewhere), its facility, and
 * whether syslog is used at all.  Set once at init. */
struct lp_syslog {
  int enabled;
  int facility; /* LOG_* value */
  char socket[108];
  int fd;                      /* one datagram socket for every line, -1: none (lp_syslog_open) */
  struct lp_syslog_held *held; /* lines the socket had no room for yet (report.c) */
};

/* Open / close the one socket lines are sent through, and the lines held
 * (below).  0, or -1 (warned: lines then go to NCCL's log only). */
int lp_syslog_open(struct lp_syslog *sl);
void lp_syslog_close(struct lp_syslog *sl);
/* The lines still held go out, as at close, but the socket and the held
 * lines stay for threads that may still send (a process exiting under
 * NCCL's threads). */
void lp_syslog_drain(struct lp_syslog *sl);
/* Lines are never waited for, and a sweep's are held: those the socket has
 * no room for (8,192 lines at most are held; more are counted and warned
 * about) and those of moves made in a sweep (lp_report_emit) go out with
 * the next line that is not held or with this call, which the control
 * thread makes on every look; a sweep's lines once `sweep_over`, a second
 * after they were held, or while the sweep's lines sent before its end
 * number fewer than `early` (the count starts again once a call says the
 * sweep is over).  At close, every line goes.  Returns how many are still
 * held. */
unsigned lp_syslog_flush(const struct lp_syslog *sl, int sweep_over, unsigned early);
/* `delta` connection ends more (or fewer) that a sweep may move, each with
 * a line: the held lines' room for that many is faulted in now, at setup,
 * not by the sweep's lines (a page fault costs a sweep more than its time
 * says: docs/SCALE.md).  About 1 KiB an end, kept once touched. */
void lp_syslog_ends(const struct lp_syslog *sl, int delta);
/* Event lines syslog did not get (NCCL's log has them): the socket full
 * for too long, or refusing them (no daemon). */
uint64_t lp_syslog_lost(const struct lp_syslog *sl);

/* RFC 3164 datagram for `msg` at `severity` (LOG_*): "<PRI>Mmm dd hh:mm:ss
 * linkpass[pid]: msg".  Returns its length (as snprintf). */
int lp_syslog_format(int facility, int severity, const char *msg, char *buf, size_t len);

/* Send the line to syslog (when enabled) and to NCCL's log.  With `sweep`
 * (the move is one of a sweep that is still going on), both wait for
 * lp_syslog_flush: the thread that moves connections makes no system call
 * for the line, and the line's syslog header keeps the time of the move.
 * Returns 1 when the line is the first held (none was before): whoever
 * calls lp_syslog_flush should look soon. */
int lp_report_emit(const struct lp_syslog *sl, const struct lp_report *r, int sweep);

/* Any event line, already formatted as key=value fields (the lines above,
 * a port drained as degraded: health.c), the same two ways at `severity`. */
void lp_report_line(const struct lp_syslog *sl, int severity, const char *line);

#endif
