/*
 * A connected pair of loopback TCP sockets, for the unit tests of what
 * runs over a control connection (the control channel, the moves).  Unlike
 * a socket pair it can be reset, and it is set up as the plugin sets up its
 * own (sock.c): non-blocking, and TCP_NODELAY, so that small messages go
 * out at once, not after a delayed ACK.
 */
#ifndef LP_TEST_TCP_PAIR_H
#define LP_TEST_TCP_PAIR_H

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

static inline void tcp_pair(int sv[2]) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t alen = sizeof(a);
  int l = socket(AF_INET, SOCK_STREAM, 0);
  cr_assert(l >= 0);
  cr_assert_eq(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
  cr_assert_eq(listen(l, 1), 0);
  cr_assert_eq(getsockname(l, (struct sockaddr *)&a, &alen), 0);
  sv[0] = socket(AF_INET, SOCK_STREAM, 0);
  cr_assert_eq(connect(sv[0], (struct sockaddr *)&a, sizeof(a)), 0);
  sv[1] = accept(l, NULL, NULL);
  cr_assert(sv[1] >= 0);
  close(l);
  int one = 1;
  for (int i = 0; i < 2; i++) {
    setsockopt(sv[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    fcntl(sv[i], F_SETFL, O_NONBLOCK);
  }
}

#endif
