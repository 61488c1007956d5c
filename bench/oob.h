/*
 * linkpass-perf: the out-of-band rendezvous over TCP, on 127.0.0.1 unless the
 * launcher is told another address of its host (--rendezvous-addr: hosts in
 * network namespaces reach each other only over their management network).
 *
 * The launcher runs a tiny server; each rank opens one connection, says
 * hello, and then takes part in all-gathers of small blobs (the plugin's
 * listen handles, per-size results, barriers).  The plugin's own traffic
 * never goes through here: this only replaces NCCL's bootstrap network.
 *
 * Frames: a 16-byte header {magic, type, rank, length} then `length` bytes.
 */
#ifndef LINKPASS_PERF_OOB_H
#define LINKPASS_PERF_OOB_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#define OOB_MAX_BLOB (1u << 20) /* per rank, per all-gather */

/* ---- rank side (blocking, bounded by a timeout in seconds; < 0: none) ---- */
int oob_connect(const char *addr, int rank, int nranks, double timeout, char *err, size_t errlen);
/* Work a rank keeps doing while it waits, as NCCL's proxy thread keeps
 * progressing sends while the host thread waits in MPI: fn returns < 0
 * (with err set) on failure, 0 when nothing is left to do (the wait then
 * blocks), > 0 when it should be called again soon. */
struct oob_idle {
  int (*fn)(void *arg, char *err, size_t errlen);
  void *arg;
};
/* Everybody's `len` bytes, in rank order, into all (nranks * len bytes);
 * idle may be NULL. */
int oob_allgather(int fd, int rank, int nranks, const void *mine, size_t len, void *all, double timeout,
                  const struct oob_idle *idle, char *err, size_t errlen);
/* Tell the launcher this rank ends on purpose, with its exit code. */
int oob_bye(int fd, int rank, int code);

/* ---- launcher side (driven by the launcher's poll loop) ---- */
enum oob_rank_state { OOB_NONE, OOB_UP, OOB_BYE, OOB_LOST };

struct oob_server;
/* Listen on bind_ip (IPv4; NULL: 127.0.0.1), an ephemeral port; addr gets
 * "IP:port" for the ranks. */
struct oob_server *oob_server_create(int nranks, const char *bind_ip, char *addr, size_t addrlen, char *err,
                                     size_t errlen);
void oob_server_destroy(struct oob_server *s);
/* Fill pfds with what to poll (at most nranks + 1 entries); returns count. */
int oob_server_pollfds(struct oob_server *s, struct pollfd *pfds);
/* Handle what poll reported; -1 on a protocol error (err says which rank). */
int oob_server_handle(struct oob_server *s, const struct pollfd *pfds, int n, char *err, size_t errlen);
enum oob_rank_state oob_server_state(const struct oob_server *s, int rank, int *bye_code);

#endif
