/*
 * flap_inject: pulls and replugs simulated cables on a schedule and prints
 * the CLOCK_MONOTONIC time of each change, taken right before the port
 * changes state.  It calls what `simverbs link` calls (sv_port_set_state),
 * without the tool's process start-up between the timestamp and the fault,
 * so failover times measured against these timestamps start at the fault.
 *
 * usage: flap_inject FABRIC COUNT DOWN_MS UP_MS HOST:NIC[:PORT]...
 * Injection i pulls the (i mod n)-th target, keeps it down DOWN_MS, plugs it
 * back and waits UP_MS.  Output, a line per change:
 *   down <i> <host>:<nic>:<port> <seconds>
 *   up   <i> <host>:<nic>:<port> <seconds>
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fabric.h"

#define MAX_TARGETS 16

struct target {
  int dev, port;
  char name[160];
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(long ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static long parse_ms(const char *s, const char *what) {
  char *end;
  long v = strtol(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v < 0 || v > 3600000) {
    fprintf(stderr, "flap_inject: %s must be 0..3600000, got '%s'\n", what, s);
    exit(2);
  }
  return v;
}

/* HOST:NIC[:PORT] to a device index and port. */
static int resolve(const struct sv_fabric *f, const char *spec, struct target *t) {
  char host[SV_NAME_LEN], nic[SV_NAME_LEN];
  int port = 1, n = 0;
  if (sscanf(spec, "%63[^:]:%63[^:]%n", host, nic, &n) != 2) return -1;
  if (spec[n] == ':' && sscanf(spec + n + 1, "%d", &port) != 1) return -1;
  for (uint32_t d = 0; d < f->ndevs; d++) {
    const struct sv_device *dev = &f->devs[d];
    if (!dev->in_use || strcmp(dev->name, nic) != 0 || strcmp(f->hosts[dev->host].name, host) != 0) continue;
    if (port < 1 || (uint32_t)port > dev->nports) return -1;
    t->dev = (int)d;
    t->port = port;
    snprintf(t->name, sizeof(t->name), "%s:%s:%d", host, nic, port);
    return 0;
  }
  return -1;
}

int main(int argc, char **argv) {
  if (argc < 6 || argc - 5 > MAX_TARGETS) {
    fprintf(stderr, "usage: flap_inject FABRIC COUNT DOWN_MS UP_MS HOST:NIC[:PORT]... (at most %d targets)\n",
            MAX_TARGETS);
    return 2;
  }
  long count = parse_ms(argv[2], "COUNT"), down_ms = parse_ms(argv[3], "DOWN_MS"), up_ms = parse_ms(argv[4], "UP_MS");
  struct sv_fabric *f = sv_fabric_attach(argv[1]);
  if (!f) {
    fprintf(stderr, "flap_inject: fabric '%s' is not up: %s\n", argv[1], strerror(errno));
    return 1;
  }
  struct target t[MAX_TARGETS];
  int nt = argc - 5;
  for (int i = 0; i < nt; i++) {
    if (resolve(f, argv[5 + i], &t[i]) != 0) {
      fprintf(stderr, "flap_inject: no port '%s' in fabric '%s' (HOST:NIC[:PORT])\n", argv[5 + i], argv[1]);
      sv_fabric_detach(f);
      return 2;
    }
  }
  int rc = 0;
  for (long i = 0; i < count && rc == 0; i++) {
    const struct target *x = &t[i % nt];
    for (int up = 0; up <= 1 && rc == 0; up++) {
      double at = now_s();
      if (sv_port_set_state(f, x->dev, x->port, up) != 0) {
        fprintf(stderr, "flap_inject: setting %s %s failed: %s\n", x->name, up ? "up" : "down", strerror(errno));
        rc = 1;
        break;
      }
      printf("%-4s %ld %s %.6f\n", up ? "up" : "down", i, x->name, at);
      fflush(stdout);
      sleep_ms(up ? up_ms : down_ms);
    }
  }
  sv_fabric_detach(f);
  return rc;
}
