/*
 * simverbs: namespace-backed links (the `simverbs` tool only; the library
 * never links this).
 *
 * With `netns on` every simulated host lives in a network namespace
 * sv-<fabric>-<host> and every port is backed by one end of a veth pair in
 * that namespace.  The other end sits in the switch namespace sv-<fabric>-sw,
 * on one bridge per rail (NIC position and port), so pulling one host's cable
 * leaves the peer's port up.  A management veth per host (mgmt0, on the
 * bridge `mgmt`, 198.18.255.<host + 1>/24) carries out-of-band TCP and is
 * never flapped.  A watcher daemon (watch.c) makes each port follow the
 * operational state of its interface.
 *
 * What `up` creates is recorded, before it is created, in a ledger
 * (<run_dir>/netns.state) so that `down`, or the next `up`, removes it even
 * after a crash.
 */
#ifndef SIMVERBS_NETNS_H
#define SIMVERBS_NETNS_H

#include "fabric.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SV_NETNS_MGMT_IF "mgmt0"      /* in every host namespace */
#define SV_NETNS_MGMT_BRIDGE "mgmt"   /* in the switch namespace */
#define SV_NETNS_MGMT_NET 0xc612ff00u /* 198.18.255.0/24 (RFC 2544 benchmark range) */
#define SV_NETNS_MGMT_PREFIX 24
#define SV_NETNS_NAME_MAX 160 /* "sv-" + fabric + "-" + host, with room to spare */

/* ---- names ---- */
/* sv-<fabric>-<host> and sv-<fabric>-sw.  Return -1 when they do not fit. */
int sv_netns_host_ns(const char *fabric, const char *host, char *out, size_t len);
int sv_netns_switch_ns(const char *fabric, char *out, size_t len);
/* Management address of host index h, host byte order. */
uint32_t sv_netns_mgmt_ipv4(uint32_t host);
/* Position of device `dev` among its host's devices: its rail. */
uint32_t sv_netns_rail(const struct sv_fabric *f, int dev);
/* Switch-side names: h<host>d<rail>p<port> for a port, h<host>m for the
 * management link, rail<rail>p<port> for a rail's bridge. */
void sv_netns_switch_port(uint32_t host, uint32_t rail, uint32_t port, char *out, size_t len);
void sv_netns_rail_bridge(uint32_t rail, uint32_t port, char *out, size_t len);
/* Path of a named namespace (/run/netns/<ns>, or /var/run/netns/<ns> when
 * only that exists); true when it exists. */
bool sv_netns_path(const char *ns, char *out, size_t len);

/* ---- up, down, run, link ---- */
/* Create the namespaces, bridges, veths and addresses of fabric `f` (its
 * run_dir must exist).  On failure the caller tears down what was made. */
int sv_netns_create(const struct sv_fabric *f);
/* Stop the watcher and delete every namespace of fabric `name`: those in
 * the ledger and, when `f` (may be NULL) is a netns fabric, those its hosts
 * imply.  Prints what it removed when `verbose`.  Returns the number of
 * namespaces removed, or -1 when some could not be. */
int sv_netns_teardown(const char *name, const struct sv_fabric *f, bool verbose);
/* Move the calling (single-threaded) process into host `host`'s network
 * namespace, with a private mount namespace whose /sys shows that
 * namespace's interfaces, as `ip netns exec` does.  `who` prefixes errors. */
int sv_netns_enter(const struct sv_fabric *f, uint32_t host, const char *who);
/* `ip link set <if> up|down` in the namespace of the port's host. */
int sv_netns_set_link(const struct sv_fabric *f, int dev, int port, bool up);
/* Run iproute2's ip: `argv` is "ip" and its arguments, NULL-terminated;
 * `input` goes to its stdin (NULL: /dev/null).  Returns its exit status, or
 * -1 when it could not be run. */
int sv_netns_ip(const char *const *argv, const char *input);

/* ---- the ledger ---- */
int sv_netns_ledger_add(const char *name, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The watcher recorded in the ledger, when it is still alive (0 if not). */
pid_t sv_netns_watcher(const char *name);
/* /proc/<pid>/stat field 22 (0 when the process is gone or a zombie). */
uint64_t sv_netns_start_time(pid_t pid);

/* ---- watch.c ---- */
/* Start `simverbs watch --fabric <name>` as a daemon (log in
 * <run_dir>/watch.log) and wait until it has synced every port.  Returns
 * the number of ports it found down, or -1 (the log is shown). */
int sv_watch_start(const struct sv_fabric *f, pid_t *pid);
/* The `simverbs watch` command: runs until the fabric goes down or a
 * signal stops it.  Returns the exit status. */
int sv_watch_main(const char *name);

#endif
