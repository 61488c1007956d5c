/* A minimal syslog receiver for the failover scenario tests: binds a UNIX
 * datagram socket and appends every datagram, one per line, to a file,
 * until SIGTERM or SIGINT.  (The operator-facing test uses the real rsyslogd;
 * this one keeps the many scenario tests light.)
 * usage: syslog_sink SOCKET_PATH OUTPUT_FILE [--stamp]
 *   --stamp  each line starts with "@SECONDS.MICROS " (wall clock at
 *            arrival): the demo groups the lines by the cable pull they follow */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig, stop = 1; }

int main(int argc, char **argv) {
  int stamp = argc == 4 && strcmp(argv[3], "--stamp") == 0;
  if (argc != 3 && !stamp) {
    fprintf(stderr, "usage: %s SOCKET_PATH OUTPUT_FILE [--stamp]\n", argv[0]);
    return 2;
  }
  struct sigaction sa = {.sa_handler = on_signal};
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  if (fd < 0 || strlen(argv[1]) >= sizeof(a.sun_path)) {
    fprintf(stderr, "syslog_sink: cannot use socket path %s\n", argv[1]);
    return 1;
  }
  strcpy(a.sun_path, argv[1]);
  unlink(argv[1]);
  if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
    fprintf(stderr, "syslog_sink: bind %s: %s\n", argv[1], strerror(errno));
    return 1;
  }
  FILE *out = fopen(argv[2], "a");
  if (!out) {
    fprintf(stderr, "syslog_sink: cannot open %s: %s\n", argv[2], strerror(errno));
    return 1;
  }
  char buf[2048];
  while (!stop) {
    ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
    if (n < 0) continue; /* EINTR on the stop signal */
    buf[n] = '\0';
    if (stamp) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      fprintf(out, "@%lld.%06ld ", (long long)ts.tv_sec, ts.tv_nsec / 1000);
    }
    fprintf(out, "%s\n", buf);
    fflush(out);
  }
  fclose(out);
  unlink(argv[1]);
  return 0;
}
