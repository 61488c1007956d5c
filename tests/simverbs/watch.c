/*
 * watch.c: `simverbs watch`, the daemon that makes every port of a netns
 * fabric follow the interface backing it.
 *
 * One rtnetlink socket per host namespace, made inside that namespace (a
 * socket belongs to the namespace it was created in, so the daemon enters
 * each namespace in turn, creates its sockets and comes back; it is single
 * threaded, so nothing else runs meanwhile), subscribed to RTNLGRP_LINK.
 *
 * A port is up when its interface is administratively up and running:
 * IFF_UP and IFF_RUNNING, which the kernel sets only while the operstate is
 * UP; a veth is UP only while both of its ends are up.  A change calls
 * sv_port_set_state(), as `simverbs link` does on a plain fabric: the port
 * changes state, its sysfs files follow, every context of the NIC gets
 * IBV_EVENT_PORT_ERR or IBV_EVENT_PORT_ACTIVE, every engine is woken.
 *
 * The subscription comes before the first dump, so no change can fall
 * between them, and an overrun receive buffer (ENOBUFS) is answered with a
 * fresh dump.  The daemon exits on SIGTERM/SIGINT/SIGHUP, and by itself
 * once the fabric's segment is removed or replaced.
 */
#include "netns.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netlink/cache.h>
#include <netlink/errno.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>
#include <netlink/object.h>
#include <netlink/route/link.h>
#include <netlink/socket.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WATCH_READY_ENV "SIMVERBS_WATCH_READY_FD"
#define WATCH_SETTLE_MS 5000 /* interfaces just set up: time for their link state to settle */
#define WATCH_TICK_MS 500    /* how often the fabric is checked for being gone */
#define WATCH_START_MS 20000 /* how long `up` waits for the daemon to be ready */
#define WATCH_MAX_ERRORS 100 /* consecutive receive errors before giving up */
#define WATCH_RCVBUF (1 << 20)
#define WATCH_MAX_PORTS (SV_MAX_DEVS * SV_MAX_PORTS)

struct wport {
  int dev, port;
  char ifname[16];
  int ifindex; /* 0 until the interface has been seen */
  int seen;    /* what the interface says: -1 not seen yet, 0 down, 1 up */
  char why[128];
};

struct watcher;

struct whost {
  uint32_t host;
  char ns[SV_NETNS_NAME_MAX];
  struct nl_sock *ev;   /* RTNLGRP_LINK notifications */
  struct nl_sock *dump; /* requests: the full list of links */
  int nports;
  struct wport ports[WATCH_MAX_PORTS];
  struct watcher *w;
};

struct watcher {
  struct sv_fabric *f;
  const char *name;
  char seg_path[PATH_MAX];
  dev_t seg_dev;
  ino_t seg_ino;
  bool apply; /* false while settling: record what interfaces say, change no port */
  int errors;
  uint32_t nhosts;
  struct whost hosts[SV_MAX_HOSTS];
};

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig) { stop_signal = sig; }

static void wlog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* One line per event on stderr (the log file when daemonised). */
static void wlog(const char *fmt, ...) {
  struct timespec ts;
  struct tm tm;
  char stamp[32];
  va_list ap;
  clock_gettime(CLOCK_REALTIME, &ts);
  localtime_r(&ts.tv_sec, &tm);
  strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
  fprintf(stderr, "%s.%03ld simverbs watch: ", stamp, ts.tv_nsec / 1000000);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

static int64_t now_ms(void) { return (int64_t)(sv_now_ns() / 1000000u); }

/* ---- ports follow interfaces ---- */

static const char *port_host(const struct watcher *w, const struct wport *p) {
  return w->f->hosts[w->f->devs[p->dev].host].name;
}

static void apply_port(struct watcher *w, struct whost *h, struct wport *p) {
  struct sv_port *sp = &w->f->devs[p->dev].ports[p->port - 1];
  bool up = p->seen == 1, cur = atomic_load(&sp->state) == IBV_PORT_ACTIVE;
  if (up == cur) return;
  if (sv_port_set_state(w->f, p->dev, p->port, up) != 0)
    wlog("%s:%s:%d %s, but its sysfs files could not be updated", port_host(w, p), w->f->devs[p->dev].name, p->port,
         up ? "ACTIVE" : "DOWN");
  else
    wlog("%s:%s:%d %s  (%s in %s: %s)", port_host(w, p), w->f->devs[p->dev].name, p->port, up ? "ACTIVE" : "DOWN",
         p->ifname, h->ns, p->why);
}

static void observe(struct whost *h, struct wport *p, int up, const char *why) {
  p->seen = up;
  snprintf(p->why, sizeof(p->why), "%s", why);
  if (h->w->apply) apply_port(h->w, h, p);
}

/* Up means IFF_UP and IFF_RUNNING; `why` says how the interface looks. */
static int link_up(struct rtnl_link *l, char *why, size_t len) {
  unsigned flags = rtnl_link_get_flags(l);
  char op[32];
  rtnl_link_operstate2str(rtnl_link_get_operstate(l), op, sizeof(op));
  snprintf(why, len, "admin %s, carrier %s, operstate %s", (flags & IFF_UP) ? "up" : "down",
           rtnl_link_get_carrier(l) ? "on" : "off", op);
  return (flags & IFF_UP) && (flags & IFF_RUNNING);
}

static void on_link(struct whost *h, struct rtnl_link *l, bool deleted) {
  const char *name = rtnl_link_get_name(l);
  int ifindex = rtnl_link_get_ifindex(l);
  char why[128];
  for (int i = 0; i < h->nports; i++) {
    struct wport *p = &h->ports[i];
    if (name && strcmp(name, p->ifname) == 0) {
      if (deleted) {
        p->ifindex = 0;
        observe(h, p, 0, "interface deleted");
      } else {
        int up = link_up(l, why, sizeof(why));
        p->ifindex = ifindex;
        observe(h, p, up, why);
      }
    } else if (p->ifindex && p->ifindex == ifindex) { /* renamed away: the port lost its cable */
      p->ifindex = 0;
      snprintf(why, sizeof(why), "interface renamed to %s", name ? name : "?");
      observe(h, p, 0, why);
    }
  }
}

static void on_object(struct nl_object *obj, void *arg) {
  struct rtnl_link *l = (struct rtnl_link *)obj;
  if (strcmp(nl_object_get_type(obj), "route/link") != 0 || rtnl_link_get_family(l) == AF_BRIDGE) return;
  on_link(arg, l, nl_object_get_msgtype(obj) == RTM_DELLINK);
}

static int on_msg(struct nl_msg *msg, void *arg) {
  int err = nl_msg_parse(msg, on_object, arg);
  if (err < 0 && err != -NLE_MSGTYPE_NOSUPPORT) wlog("cannot parse a netlink message: %s", nl_geterror(err));
  return NL_OK;
}

/* The current state of every port's interface. */
static int dump_host(struct whost *h) {
  struct nl_cache *cache = NULL;
  char why[128];
  int err = rtnl_link_alloc_cache(h->dump, AF_UNSPEC, &cache);
  if (err < 0) {
    wlog("%s: cannot list the interfaces: %s", h->ns, nl_geterror(err));
    return -1;
  }
  for (int i = 0; i < h->nports; i++) {
    struct wport *p = &h->ports[i];
    struct rtnl_link *l = rtnl_link_get_by_name(cache, p->ifname);
    if (!l) {
      p->ifindex = 0;
      observe(h, p, 0, "no such interface");
      continue;
    }
    p->ifindex = rtnl_link_get_ifindex(l);
    observe(h, p, link_up(l, why, sizeof(why)), why);
    rtnl_link_put(l);
  }
  nl_cache_free(cache);
  return 0;
}

/* ---- sockets in each host's namespace ---- */

static int open_sockets(struct whost *h) {
  int err;
  if (!(h->ev = nl_socket_alloc()) || !(h->dump = nl_socket_alloc())) {
    wlog("%s: out of memory for netlink sockets", h->ns);
    return -1;
  }
  nl_socket_disable_seq_check(h->ev); /* notifications carry no sequence numbers */
  nl_socket_modify_cb(h->ev, NL_CB_VALID, NL_CB_CUSTOM, on_msg, h);
  if ((err = nl_connect(h->ev, NETLINK_ROUTE)) < 0 || (err = nl_socket_add_membership(h->ev, RTNLGRP_LINK)) < 0 ||
      (err = nl_socket_set_nonblocking(h->ev)) < 0 || (err = nl_socket_set_buffer_size(h->ev, WATCH_RCVBUF, 0)) < 0 ||
      (err = nl_connect(h->dump, NETLINK_ROUTE)) < 0) {
    wlog("%s: cannot open a route netlink socket: %s", h->ns, nl_geterror(err));
    return -1;
  }
  return 0;
}

/* Enter the namespace, make the sockets there, come back to `home`. */
static int open_host(struct whost *h, int home) {
  char path[PATH_MAX];
  int fd, rc;
  if (!sv_netns_path(h->ns, path, sizeof(path))) {
    wlog("network namespace %s is missing (%s): was the fabric brought up with netns on?", h->ns, path);
    return -1;
  }
  if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 || setns(fd, CLONE_NEWNET) != 0) {
    wlog("cannot enter network namespace %s: %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  close(fd);
  rc = open_sockets(h);
  if (setns(home, CLONE_NEWNET) != 0) {
    wlog("cannot return to the original network namespace: %s", strerror(errno));
    return -1;
  }
  return rc;
}

/* The ports of every host, named by their interfaces. */
static int setup_hosts(struct watcher *w) {
  struct sv_fabric *f = w->f;
  for (uint32_t hi = 0; hi < f->nhosts && hi < SV_MAX_HOSTS; hi++) {
    struct whost *h = &w->hosts[w->nhosts++];
    h->host = hi;
    h->w = w;
    if (sv_netns_host_ns(w->name, f->hosts[hi].name, h->ns, sizeof(h->ns)) != 0) {
      wlog("host %s: namespace name too long", f->hosts[hi].name);
      return -1;
    }
    for (uint32_t d = 0; d < f->ndevs && d < SV_MAX_DEVS; d++) {
      const struct sv_device *dv = &f->devs[d];
      if (!dv->in_use || dv->host != hi) continue;
      for (uint32_t p = 0; p < dv->nports && p < SV_MAX_PORTS && h->nports < WATCH_MAX_PORTS; p++) {
        struct wport *wp = &h->ports[h->nports++];
        wp->dev = (int)d;
        wp->port = (int)p + 1;
        wp->seen = -1;
        snprintf(wp->ifname, sizeof(wp->ifname), "%s", dv->ports[p].netdev);
        if (!wp->ifname[0]) {
          wlog("%s:%s:%u has no interface: bring the fabric up again with netns on", f->hosts[hi].name, dv->name,
               p + 1);
          return -1;
        }
      }
    }
  }
  return 0;
}

/* ---- the loop ---- */

/* Wait up to `ms` for notifications and handle them. */
static int pump(struct watcher *w, int ms) {
  struct pollfd fds[SV_MAX_HOSTS];
  int n;
  for (uint32_t i = 0; i < w->nhosts; i++)
    fds[i] = (struct pollfd){.fd = nl_socket_get_fd(w->hosts[i].ev), .events = POLLIN};
  n = poll(fds, w->nhosts, ms);
  if (n < 0) return errno == EINTR ? 0 : -1;
  for (uint32_t i = 0; i < w->nhosts && n > 0; i++) {
    struct whost *h = &w->hosts[i];
    int err;
    if (!fds[i].revents) continue;
    err = nl_recvmsgs_default(h->ev);
    if (err == -NLE_NOMEM) { /* ENOBUFS: notifications were lost, so ask for the whole picture */
      wlog("%s: netlink receive buffer overrun: reading every interface again", h->ns);
      err = dump_host(h);
    }
    if (err < 0 && err != -NLE_AGAIN) {
      if (++w->errors >= WATCH_MAX_ERRORS) {
        wlog("%s: %d receive errors in a row, the last: %s: giving up", h->ns, w->errors, nl_geterror(err));
        return -1;
      }
      wlog("%s: receive error: %s", h->ns, nl_geterror(err));
    } else {
      w->errors = 0;
    }
  }
  return 0;
}

static bool all_seen_up(const struct watcher *w) {
  for (uint32_t i = 0; i < w->nhosts; i++)
    for (int j = 0; j < w->hosts[i].nports; j++)
      if (w->hosts[i].ports[j].seen != 1) return false;
  return true;
}

/* Fresh interfaces need a moment before they report RUNNING: wait for all
 * of them (bounded), then set every port to what its interface says. */
static int settle(struct watcher *w) {
  int64_t deadline = now_ms() + WATCH_SETTLE_MS;
  int down = 0;
  while (!stop_signal && !all_seen_up(w) && now_ms() < deadline)
    if (pump(w, 50) != 0) return -1;
  w->apply = true;
  for (uint32_t i = 0; i < w->nhosts; i++)
    for (int j = 0; j < w->hosts[i].nports; j++) {
      struct wport *p = &w->hosts[i].ports[j];
      apply_port(w, &w->hosts[i], p);
      if (p->seen != 1) {
        down++;
        wlog("%s:%s:%d starts DOWN  (%s in %s: %s)", port_host(w, p), w->f->devs[p->dev].name, p->port, p->ifname,
             w->hosts[i].ns, p->why);
      }
    }
  return down;
}

static bool fabric_alive(const struct watcher *w) {
  struct stat st;
  return stat(w->seg_path, &st) == 0 && st.st_dev == w->seg_dev && st.st_ino == w->seg_ino;
}

static int attach(struct watcher *w) {
  struct stat st;
  sv_fabric_path(w->name, w->seg_path, sizeof(w->seg_path));
  if (!(w->f = sv_fabric_attach(w->name))) {
    wlog("cannot attach fabric '%s' (%s): %s", w->name, w->seg_path,
         errno == ENOENT   ? "it is not up"
         : errno == EPROTO ? "made by another simverbs version"
                           : strerror(errno));
    return -1;
  }
  if (stat(w->seg_path, &st) != 0) {
    wlog("fabric '%s' went down while starting", w->name);
    return -1;
  }
  w->seg_dev = st.st_dev;
  w->seg_ino = st.st_ino;
  if (!w->f->netns) {
    wlog("fabric '%s' has no network namespaces (netns off): there is nothing to watch", w->name);
    return -1;
  }
  return 0;
}

static void watcher_free(struct watcher *w) {
  for (uint32_t i = 0; i < w->nhosts; i++) {
    nl_socket_free(w->hosts[i].ev); /* NULL-safe */
    nl_socket_free(w->hosts[i].dump);
  }
  sv_fabric_detach(w->f);
  free(w);
}

int sv_watch_main(const char *name) {
  struct sigaction sa = {.sa_handler = on_signal}, ign = {.sa_handler = SIG_IGN};
  sigset_t stop_set;
  struct watcher *w = calloc(1, sizeof(*w));
  const char *env = getenv(WATCH_READY_ENV);
  int ready_fd = env && *env ? atoi(env) : -1, home = -1, rc = 1, down, nports = 0;
  unsetenv(WATCH_READY_ENV);
  if (ready_fd >= 0 && fcntl(ready_fd, F_GETFD) < 0) /* a stray variable, not a pipe from `up` */
    ready_fd = -1;
  if (!w) {
    perror("simverbs watch");
    return 1;
  }
  w->name = name;
  sigemptyset(&sa.sa_mask); /* no SA_RESTART: a signal ends poll() */
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  sigaction(SIGPIPE, &ign, NULL);
  sigemptyset(&stop_set); /* a mask inherited from whoever ran `up` must not hide them */
  sigaddset(&stop_set, SIGTERM);
  sigaddset(&stop_set, SIGINT);
  sigaddset(&stop_set, SIGHUP);
  sigprocmask(SIG_UNBLOCK, &stop_set, NULL);
  wlog("fabric '%s': starting (pid %d)", name, (int)getpid());
  if (attach(w) != 0 || setup_hosts(w) != 0) goto out;
  if ((home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC)) < 0) {
    wlog("cannot open this process's network namespace: %s", strerror(errno));
    goto out;
  }
  for (uint32_t i = 0; i < w->nhosts; i++) {
    if (open_host(&w->hosts[i], home) != 0) goto out;
    nports += w->hosts[i].nports;
  }
  for (uint32_t i = 0; i < w->nhosts; i++) /* after every subscription: nothing falls in between */
    if (dump_host(&w->hosts[i]) != 0) goto out;
  if ((down = settle(w)) < 0) goto out;
  wlog("watching %d port%s of %u host%s (%d down)", nports, nports == 1 ? "" : "s", w->nhosts,
       w->nhosts == 1 ? "" : "s", down);
  if (ready_fd >= 0) {
    dprintf(ready_fd, "ready %d\n", down);
    close(ready_fd);
    ready_fd = -1;
  }
  while (!stop_signal) {
    if (pump(w, WATCH_TICK_MS) != 0) goto out;
    if (!fabric_alive(w)) {
      wlog("fabric '%s' is down or was replaced (%s): exiting", name, w->seg_path);
      rc = 0;
      goto out;
    }
  }
  wlog("stopped by signal %d", (int)stop_signal);
  rc = 0;
out:
  if (rc) wlog("exiting on the error above: ports no longer follow their interfaces");
  if (ready_fd >= 0) close(ready_fd);
  if (home >= 0) close(home);
  watcher_free(w);
  return rc;
}

/* ---- starting the daemon from `up` ---- */

/* The end of the daemon's log, for a failed start. */
static void show_log(const char *path) {
  char buf[4096];
  ssize_t n;
  off_t size;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  size = lseek(fd, 0, SEEK_END);
  lseek(fd, size > (off_t)sizeof(buf) - 1 ? size - (off_t)sizeof(buf) + 1 : 0, SEEK_SET);
  n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n > 0) {
    buf[n] = '\0';
    fprintf(stderr, "%s", buf);
  }
}

/* Read "ready N\n" from the daemon; -1 on EOF, error or timeout. */
static int await_ready(int fd) {
  char buf[64];
  size_t got = 0;
  int64_t deadline = now_ms() + WATCH_START_MS;
  int down;
  while (got < sizeof(buf) - 1) {
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int64_t left = deadline - now_ms();
    ssize_t n;
    if (left <= 0) return -1;
    if (poll(&pfd, 1, (int)left) < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    n = read(fd, buf + got, sizeof(buf) - 1 - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    got += (size_t)n;
    buf[got] = '\0';
    if (strchr(buf, '\n')) return sscanf(buf, "ready %d", &down) == 1 && down >= 0 ? down : -1;
  }
  return -1;
}

int sv_watch_start(const struct sv_fabric *f, pid_t *out) {
  char exe[PATH_MAX], log[PATH_MAX], fdnum[16];
  int pfd[2], status, down;
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  pid_t pid;
  if (n <= 0 || snprintf(log, sizeof(log), "%s/watch.log", f->run_dir) >= (int)sizeof(log)) {
    fprintf(stderr, "simverbs up: cannot find this executable or the log path: %s\n", strerror(errno));
    return -1;
  }
  exe[n] = '\0';
  if (pipe2(pfd, O_CLOEXEC) != 0) {
    perror("simverbs up: pipe");
    return -1;
  }
  fflush(NULL);
  if ((pid = fork()) < 0) {
    perror("simverbs up: fork");
    close(pfd[0]);
    close(pfd[1]);
    return -1;
  }
  if (pid == 0) {
    /* A daemon: its own session (a Ctrl-C for the shell does not reach it),
     * stdin from /dev/null, stdout and stderr to the log, the readiness pipe
     * as fd 3 and nothing else: an inherited pipe kept open would make
     * whoever reads its other end, say a shell's $(simverbs up ...), wait
     * for the daemon to exit. */
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    int lfd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (null < 0 || lfd < 0 || setsid() < 0 || dup2(null, STDIN_FILENO) < 0 || dup2(lfd, STDOUT_FILENO) < 0 ||
        dup2(lfd, STDERR_FILENO) < 0 || (pfd[1] != 3 && dup2(pfd[1], 3) < 0) || fcntl(3, F_SETFD, 0) != 0)
      _exit(126);
    close_range(4, ~0u, 0);
    snprintf(fdnum, sizeof(fdnum), "%d", 3);
    setenv(WATCH_READY_ENV, fdnum, 1);
    execl(exe, "simverbs", "watch", "--fabric", f->name, (char *)NULL);
    fprintf(stderr, "simverbs up: cannot run %s: %s\n", exe, strerror(errno));
    _exit(127);
  }
  close(pfd[1]);
  /* Recorded at once: whatever happens next, `down` can find it. */
  sv_netns_ledger_add(f->name, "watch %d %llu", (int)pid, (unsigned long long)sv_netns_start_time(pid));
  down = await_ready(pfd[0]);
  close(pfd[0]);
  if (down >= 0) {
    *out = pid;
    return down;
  }
  kill(pid, SIGKILL); /* not ready in time, or already dead */
  waitpid(pid, &status, 0);
  fprintf(stderr, "simverbs up: the link watcher (pid %d) did not start; the end of its log %s:\n", (int)pid, log);
  show_log(log);
  return -1;
}
