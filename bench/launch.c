/*
 * linkpass-perf: launcher and supervisor of the rank processes.
 */
#include "launch.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "oob.h"
#include "rank.h"
#include "xfer.h"

struct child {
  pid_t pid;  /* 0 once reaped */
  int status; /* from waitpid */
  int exited;
  const char *host;
  int local_rank;
  double lost_at; /* when its rendezvous connection dropped without a bye */
};

int perf_expand_env(const char *tmpl, int rank, int local_rank, const char *host, char *out, size_t outlen) {
  size_t used = 0;
  for (const char *p = tmpl; *p; p++) {
    char buf[64];
    const char *add = buf;
    if (*p == '%' && p[1]) {
      p++;
      if (*p == 'r')
        snprintf(buf, sizeof(buf), "%d", rank);
      else if (*p == 'l')
        snprintf(buf, sizeof(buf), "%d", local_rank);
      else if (*p == 'h')
        add = host ? host : "";
      else if (*p == '%')
        snprintf(buf, sizeof(buf), "%%");
      else
        return -1;
    } else {
      buf[0] = *p;
      buf[1] = '\0';
    }
    size_t len = strlen(add);
    if (used + len + 1 > outlen) return -1;
    memcpy(out + used, add, len);
    used += len;
  }
  out[used] = '\0';
  return 0;
}

static int is_executable(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* --simverbs, then $LINKPASS_SIMVERBS, then the build tree's
 * <build>/simverbs/simverbs next to <build>/bench/linkpass-perf, then PATH. */
static void find_simverbs(const struct perf_opts *o, const char *self, char *out, size_t len) {
  const char *env = getenv("LINKPASS_SIMVERBS");
  if (o->simverbs) {
    snprintf(out, len, "%s", o->simverbs);
    return;
  }
  if (env && *env) {
    snprintf(out, len, "%s", env);
    return;
  }
  char dir[PATH_MAX];
  snprintf(dir, sizeof(dir), "%s", self);
  char *slash = strrchr(dir, '/');
  if (slash) {
    *slash = '\0';
    int k = snprintf(out, len, "%s/../simverbs/simverbs", dir);
    if (k > 0 && (size_t)k < len && is_executable(out)) return;
    k = snprintf(out, len, "%s/simverbs", dir);
    if (k > 0 && (size_t)k < len && is_executable(out)) return;
  }
  snprintf(out, len, "simverbs");
}

static void describe_status(int status, char *out, size_t len) {
  if (WIFEXITED(status)) {
    int c = WEXITSTATUS(status);
    snprintf(out, len, "exited with code %d%s", c,
             c == PERF_EXIT_WRONG ? " (wrong data)"
             : c == 127           ? " (could not start: see above)"
                                  : "");
  } else if (WIFSIGNALED(status)) {
    snprintf(out, len, "was killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
  } else {
    snprintf(out, len, "ended with status 0x%x", status);
  }
}

static void reap(struct child *kids, int n, int block) {
  for (;;) {
    int status;
    pid_t pid = waitpid(-1, &status, block ? 0 : WNOHANG);
    if (pid <= 0) return;
    for (int r = 0; r < n; r++) {
      if (kids[r].pid == pid) {
        kids[r].status = status;
        kids[r].exited = 1;
        kids[r].pid = 0;
      }
    }
  }
}

static int alive(const struct child *kids, int n) {
  int k = 0;
  for (int r = 0; r < n; r++) k += kids[r].pid > 0;
  return k;
}

/* Each rank leads its own process group (simverbs run and the rank it
 * starts): signal the whole group, politely first. */
/* Give the ranks up to `secs` to end by themselves: when one failed, the
 * others may be failing of the same cause (a refusal from the failed one
 * on its way to them) and say so, where being stopped says nothing. */
static void settle(struct child *kids, int n, double secs) {
  for (double until = xfer_now() + secs; alive(kids, n) && xfer_now() < until;) {
    reap(kids, n, 0);
    usleep(10 * 1000);
  }
}

static void kill_all(struct child *kids, int n) {
  for (int r = 0; r < n; r++)
    if (kids[r].pid > 0) kill(-kids[r].pid, SIGTERM);
  double until = xfer_now() + 3;
  while (alive(kids, n) && xfer_now() < until) {
    reap(kids, n, 0);
    usleep(20 * 1000);
  }
  for (int r = 0; r < n; r++)
    if (kids[r].pid > 0) {
      kill(-kids[r].pid, SIGKILL);
      kill(kids[r].pid, SIGKILL);
    }
  while (alive(kids, n)) reap(kids, n, 1);
}

static pid_t spawn(const struct perf_opts *o, int argc, char **argv, int rank, struct child *kid, const char *self,
                   const char *simverbs, const char *addr, uint64_t comm_id, const sigset_t *oldmask) {
  char rank_s[16], local_s[16], id_s[32];
  int extra = 8 + 7; /* simverbs prefix + our own options */
  char **cargv = calloc((size_t)(argc + extra + 1), sizeof(char *));
  int k = 0;
  if (!cargv) return -1;
  snprintf(rank_s, sizeof(rank_s), "%d", rank);
  snprintf(local_s, sizeof(local_s), "%d", kid->local_rank);
  snprintf(id_s, sizeof(id_s), "%" PRIx64, comm_id);
  if (o->fabric) {
    cargv[k++] = (char *)simverbs;
    cargv[k++] = "run";
    cargv[k++] = "--host";
    cargv[k++] = (char *)kid->host;
    cargv[k++] = "--fabric";
    cargv[k++] = (char *)o->fabric;
    cargv[k++] = "--";
  }
  cargv[k++] = (char *)self;
  for (int i = 1; i < argc; i++) cargv[k++] = argv[i];
  cargv[k++] = "--rank";
  cargv[k++] = rank_s;
  cargv[k++] = "--local-rank";
  cargv[k++] = local_s;
  cargv[k++] = "--rdv";
  cargv[k++] = (char *)addr;
  cargv[k++] = "--comm-id";
  cargv[k++] = id_s;
  cargv[k] = NULL;

  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    sigprocmask(SIG_SETMASK, oldmask, NULL);
    for (int i = 0; i < o->nrank_env; i++) {
      char val[1024];
      const char *eq = strchr(o->rank_env[i], '=');
      char name[128];
      snprintf(name, sizeof(name), "%.*s", (int)(eq - o->rank_env[i]), o->rank_env[i]);
      if (perf_expand_env(eq + 1, rank, kid->local_rank, kid->host, val, sizeof(val))) {
        fprintf(stderr, "linkpass-perf: rank %d: bad --rank-env %s (use %%r, %%l, %%h or %%%%)\n", rank,
                o->rank_env[i]);
        _exit(127);
      }
      setenv(name, val, 1);
    }
    if (strchr(cargv[0], '/'))
      execv(cargv[0], cargv);
    else
      execvp(cargv[0], cargv);
    fprintf(stderr, "linkpass-perf: rank %d: cannot start %s: %s\n", rank, cargv[0], strerror(errno));
    _exit(127);
  }
  free(cargv);
  if (pid > 0) setpgid(pid, pid); /* also here: no race with an early kill */
  return pid;
}

int perf_launch(const struct perf_opts *o, int argc, char **argv) {
  int n = o->nranks, code = PERF_EXIT_OK, sfd = -1;
  char addr[64], err[512], self[PATH_MAX], simverbs[PATH_MAX], hostbuf[1024];
  char *hosts[PERF_MAX_RANKS];
  int nh = 0;
  struct child kids[PERF_MAX_RANKS];
  struct oob_server *srv = NULL;
  sigset_t mask, oldmask;

  char myhost[64] = "localhost";
  gethostname(myhost, sizeof(myhost) - 1);
  memset(kids, 0, sizeof(kids));
  if (o->hosts) nh = perf_split_list(o->hosts, hostbuf, sizeof(hostbuf), hosts, PERF_MAX_RANKS);
  ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (sl <= 0) {
    fprintf(stderr, "linkpass-perf: cannot find my own executable: %s\n", strerror(errno));
    return PERF_EXIT_ERROR;
  }
  self[sl] = '\0';
  if (o->fabric) find_simverbs(o, self, simverbs, sizeof(simverbs));

  srv = oob_server_create(n, o->rdv_addr, addr, sizeof(addr), err, sizeof(err));
  if (!srv) {
    fprintf(stderr, "linkpass-perf: %s\n", err);
    return PERF_EXIT_ERROR;
  }
  /* signals arrive through a descriptor in the poll loop, never mid-fork */
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGHUP);
  sigaddset(&mask, SIGCHLD);
  sigprocmask(SIG_BLOCK, &mask, &oldmask);
  sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) {
    fprintf(stderr, "linkpass-perf: signalfd: %s\n", strerror(errno));
    code = PERF_EXIT_ERROR;
    goto out;
  }

  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t comm_id = ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 16);

  for (int r = 0; r < n; r++) {
    kids[r].host = nh > 0 ? hosts[perf_rank_host(r, n, nh)] : myhost;
    kids[r].local_rank = perf_rank_local(r, n, nh > 0 ? nh : 1);
    kids[r].pid = spawn(o, argc, argv, r, &kids[r], self, o->fabric ? simverbs : NULL, addr, comm_id, &oldmask);
    if (kids[r].pid < 0) {
      kids[r].pid = 0;
      fprintf(stderr, "linkpass-perf: cannot fork rank %d: %s\n", r, strerror(errno));
      code = PERF_EXIT_ERROR;
      kill_all(kids, n);
      goto out;
    }
  }

  /* the ranks' own watchdogs fire at --timeout and say where they were;
   * the launcher steps in a little later if one could not */
  double deadline = xfer_now() + o->timeout + 10;
  while (alive(kids, n)) {
    struct pollfd pfds[PERF_MAX_RANKS + 2];
    int np = oob_server_pollfds(srv, pfds);
    pfds[np++] = (struct pollfd){.fd = sfd, .events = POLLIN};
    if (poll(pfds, (nfds_t)np, 200) < 0 && errno != EINTR) break;

    struct signalfd_siginfo si;
    while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
      if (si.ssi_signo == SIGCHLD) continue;
      fprintf(stderr, "linkpass-perf: interrupted by %s: stopping all ranks\n", strsignal((int)si.ssi_signo));
      kill_all(kids, n);
      code = PERF_EXIT_INTERRUPTED;
      goto out;
    }
    reap(kids, n, 0);
    for (int r = 0; r < n; r++) {
      if (!kids[r].exited) continue;
      int st = kids[r].status;
      kids[r].exited = 2; /* judged */
      if (WIFEXITED(st) && (WEXITSTATUS(st) == PERF_EXIT_OK || WEXITSTATUS(st) == PERF_EXIT_WRONG)) {
        if (WEXITSTATUS(st) == PERF_EXIT_WRONG) code = PERF_EXIT_WRONG;
        continue;
      }
      char why[128];
      describe_status(st, why, sizeof(why));
      fprintf(stderr, "linkpass-perf: rank %d (host %s) %s: stopping all ranks\n", r, kids[r].host, why);
      settle(kids, n, 1.0);
      kill_all(kids, n);
      code = PERF_EXIT_ERROR;
      goto out;
    }
    if (oob_server_handle(srv, pfds, np - 1, err, sizeof(err))) {
      fprintf(stderr, "linkpass-perf: %s: stopping all ranks\n", err);
      kill_all(kids, n);
      code = PERF_EXIT_ERROR;
      goto out;
    }
    double now = xfer_now();
    for (int r = 0; r < n; r++) {
      if (kids[r].pid <= 0 || oob_server_state(srv, r, NULL) != OOB_LOST) continue;
      /* give the process a moment to exit: its status says more */
      if (kids[r].lost_at == 0)
        kids[r].lost_at = now;
      else if (now - kids[r].lost_at > 3) {
        fprintf(stderr,
                "linkpass-perf: rank %d (host %s) closed its rendezvous connection without finishing: "
                "stopping all ranks\n",
                r, kids[r].host);
        kill_all(kids, n);
        code = PERF_EXIT_ERROR;
        goto out;
      }
    }
    if (now > deadline) {
      char still[256] = "";
      size_t used = 0;
      for (int r = 0; r < n && used < sizeof(still); r++)
        if (kids[r].pid > 0) used += (size_t)snprintf(still + used, sizeof(still) - used, " %d", r);
      fprintf(stderr, "linkpass-perf: --timeout %.0f s expired; ranks still running:%s: stopping all ranks\n",
              o->timeout, still);
      kill_all(kids, n);
      code = PERF_EXIT_ERROR;
      goto out;
    }
  }
  /* Every process is gone, but a bye may still sit unread in its socket
   * (the exit can be reaped first): read until each connection ends. */
  for (double until = xfer_now() + 3; xfer_now() < until;) {
    struct pollfd pfds[PERF_MAX_RANKS + 1];
    int open_ranks = 0;
    for (int r = 0; r < n; r++) open_ranks += oob_server_state(srv, r, NULL) == OOB_UP;
    if (!open_ranks) break;
    int np = oob_server_pollfds(srv, pfds);
    if (poll(pfds, (nfds_t)np, 100) > 0 && oob_server_handle(srv, pfds, np, err, sizeof(err))) break;
  }
  /* a rank that never said bye did not finish */
  for (int r = 0; r < n && code != PERF_EXIT_ERROR; r++) {
    int bye = 0;
    if (oob_server_state(srv, r, &bye) != OOB_BYE) {
      fprintf(stderr, "linkpass-perf: rank %d (host %s) exited without finishing the run\n", r, kids[r].host);
      code = PERF_EXIT_ERROR;
    }
  }
out:
  if (sfd >= 0) close(sfd);
  oob_server_destroy(srv);
  sigprocmask(SIG_SETMASK, &oldmask, NULL);
  return code;
}
