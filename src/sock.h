/*
 * Out-of-band TCP: the interface choice (NCCL_SOCKET_IFNAME) and small
 * non-blocking helpers.  Nothing here ever blocks: every call does what the
 * kernel can do now and reports "again" otherwise, because NCCL drives
 * listen/connect/accept from its proxy thread and expects them to return.
 */
#ifndef LP_SOCK_H
#define LP_SOCK_H

#include <net/if.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "config.h"

union lp_sockaddr {
  struct sockaddr sa;
  struct sockaddr_in in;
  struct sockaddr_in6 in6;
};

/* Interfaces backed by the RDMA NICs in use (nic.h, lp_nic_netdevs). */
#define LP_OOB_AVOID_MAX 64
struct lp_oob_avoid {
  int n;
  char name[LP_OOB_AVOID_MAX][IF_NAMESIZE];
};

/* Choose the local address for out-of-band sockets, the control channel
 * of every connection.  NCCL_SOCKET_IFNAME wins.  Otherwise NCCL's order,
 * "ib*" interfaces, then any interface except docker*, lo*, virbr*, then
 * docker*, then loopback, but first among the interfaces no RDMA NIC in
 * `avoid` backs: a control channel over the NIC it protects dies with it,
 * and a move waits for the link to return.  `*backed` says whether the
 * choice is such an interface all the same.  Returns 0 or -1. */
int lp_oob_pick(const struct lp_config *cfg, const struct lp_oob_avoid *avoid, union lp_sockaddr *addr, char *ifname,
                size_t iflen, int *backed);

/* A second interface for the control channel (ctlchan.h), never
 * `primary`, loopback or docker*: with NCCL_SOCKET_IFNAME among those it
 * names, else in lp_oob_pick's order, interfaces no RDMA NIC backs first.
 * Returns 0, or -1 when there is none. */
int lp_oob_pick_second(const struct lp_config *cfg, const struct lp_oob_avoid *avoid, const char *primary,
                       union lp_sockaddr *addr, char *ifname, size_t iflen);

/* Non-blocking listening socket on `local` (port 0: any); `bound` gets the
 * real address.  Returns the fd or -errno. */
int lp_sock_listen(const union lp_sockaddr *local, union lp_sockaddr *bound);
/* Start a non-blocking connect.  Returns the fd or -errno. */
int lp_sock_connect_start(const union lp_sockaddr *to);
/* 1 connected, 0 still in progress, -errno failed. */
int lp_sock_connect_check(int fd);
/* Accept one pending connection: fd (never 0), 0 when none, -errno. */
int lp_sock_accept(int lfd);
/* Close with a reset (no-op for fd < 0): the far end reads an error, not
 * the end of file that means "the peer closed its comm".  For a socket the
 * far end may already count as a control connection. */
void lp_sock_abort(int fd);
/* Move bytes between `buf[*off..len)` and the socket.  1 when all done,
 * 0 to call again, -errno on error; -EPIPE when the peer closed. */
int lp_sock_send_progress(int fd, const void *buf, size_t len, size_t *off);
int lp_sock_recv_progress(int fd, void *buf, size_t len, size_t *off);
/* One read of what the socket holds, up to len bytes: the count, 0 when it
 * holds nothing, -EPIPE when the peer closed, -errno. */
ssize_t lp_sock_recv_some(int fd, void *buf, size_t len);
/* 1 when the peer closed `fd` or it failed; 0 while it is open (data
 * waiting or not: nothing is read). */
int lp_sock_closed(int fd);

/* An address as the wire carries it (the handle, CTL_OFFER): the family,
 * the port in network order, the IPv6 scope, and 16 address bytes of which
 * IPv4 uses 4. */
void lp_sockaddr_to_wire(const union lp_sockaddr *a, uint16_t *family, uint16_t *port, uint32_t *scope_id,
                         uint8_t addr[16]);
void lp_sockaddr_from_wire(union lp_sockaddr *a, uint16_t family, uint16_t port, uint32_t scope_id,
                           const uint8_t addr[16]);

const char *lp_sockaddr_str(const union lp_sockaddr *a, char *buf, size_t len);
socklen_t lp_sockaddr_len(const union lp_sockaddr *a);

#endif
