/*
 * linkpass-status: what linkpass is doing on this node, for a person at a
 * terminal (or, with --json, for a tool).  It reads the metrics files the
 * plugin's processes write (LINKPASS_METRICS_FILE, one per process) and,
 * when it can, the event lines in syslog, and prints per process and per
 * NIC port: whether the path is up, how many connections it carries now,
 * the moves, flaps and degraded time, and the last events.
 *
 * It only reads files: no verbs, no plugin, no privileges beyond reading
 * the metrics directory and the log.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "metrics.h"
#include "wire.h"

#define MAX_PROCS 256
#define MAX_DEVS 64
#define MAX_EVENTS 64
#define NAME_MAX_LEN 64
#define MAX_BAD_LINES 3 /* said per metrics file; the rest are counted */
/* A live process rewrites its file every second (docs/OPERATIONS.md): one
 * not written for this long is not live, whatever has its pid.  30 s, as
 * the alert rules: the control thread may send a large sweep's held event
 * lines for seconds before it writes again. */
#define STALE_S 30

/* The per-port series, in the order they are printed. */
static const char *const dev_series[] = {"linkpass_path_up",          "linkpass_connections",
                                         "linkpass_failovers_total",  "linkpass_failbacks_total",
                                         "linkpass_port_flaps_total", "linkpass_degraded_seconds_total"};
enum { D_UP, D_CONNS, D_FAILOVERS, D_FAILBACKS, D_FLAPS, D_DEGRADED, D_COUNT };

/* The per-process series. */
static const char *const proc_series[] = {
    "linkpass_replayed_requests_total",           "linkpass_replayed_bytes_total",       "linkpass_paths_lost_total",
    "linkpass_last_failover_duration_seconds",    "linkpass_event_ring_overflows_total", "linkpass_up",
    "linkpass_metrics_updated_timestamp_seconds", "linkpass_syslog_lines_lost_total"};
enum { P_REPLAYED, P_REPLAYED_BYTES, P_LOST, P_LAST_FAILOVER, P_OVERFLOWS, P_UP, P_UPDATED, P_SYSLOG_LOST, P_COUNT };

struct dev {
  char name[NAME_MAX_LEN];
  int port;
  double v[D_COUNT];
};

struct proc {
  char file[4096];
  int pid;
  char host[128]; /* its host label: the host name, with the pid what names the process ("": none) */
  int ndevs;
  struct dev devs[MAX_DEVS];
  double v[P_COUNT];
  int have[P_COUNT];
  const char *state; /* running, stale, exited, gone (died without a last write) */
  double age_s;      /* since the file was last written */
};

static struct proc procs[MAX_PROCS + 1]; /* the last: a file read while the others are full */
static int nprocs;
static char events[MAX_EVENTS][1024];
static int nevents;

/* The end of a quoted label value that starts at v (past its opening
 * quote): its closing quote, or NULL.  A backslash escapes what follows. */
static const char *value_end(const char *v) {
  for (; *v && *v != '"'; v++)
    if (*v == '\\' && v[1] != '\0') v++;
  return *v == '"' ? v : NULL;
}

/* The value of label `key` in "k1=\"v1\",k2=\"v2\"" into out, unescaped
 * (\\, \" and \n, as the text format writes them); 0, -1 when it is absent
 * or malformed, -2 when it is longer than out holds.  Label by label, so a
 * key inside another label's value is not taken for one. */
static int label(const char *labels, const char *key, char *out, size_t len) {
  size_t klen = strlen(key);
  for (const char *p = labels; *p;) {
    const char *eq = strchr(p, '=');
    if (eq == NULL || eq[1] != '"') return -1;
    const char *v = eq + 2, *end = value_end(v);
    if (end == NULL) return -1;
    if ((size_t)(eq - p) == klen && strncmp(p, key, klen) == 0) {
      size_t o = 0;
      for (; v < end; v++) {
        if (o + 1 >= len) return -2;
        int escaped = *v == '\\';
        v += escaped;
        out[o++] = escaped && *v == 'n' ? '\n' : *v;
      }
      out[o] = '\0';
      return 0;
    }
    p = end + 1;
    if (*p == ',') p++;
  }
  return -1;
}

/* A whole number in [lo, hi] into *out; 0, or -1 when s is anything else
 * (atoi took "4294967297" for pid 1, and a pid of 1 is always running). */
static int whole_number(const char *s, long lo, long hi, int *out) {
  char *end;
  errno = 0;
  long n = strtol(s, &end, 10);
  if (*s < '0' || *s > '9' || *end != '\0' || errno == ERANGE || n < lo || n > hi) return -1;
  *out = (int)n;
  return 0;
}

/* The next line of f into buf, without its newline: 1, 0 at the end, or
 * LINE_LONG for a line longer than buf holds (read to its end and not cut:
 * its head would carry a cut value, and its tail would be taken for a line
 * of its own) or LINE_NUL for one with a NUL byte (which would hide the
 * rest of it from the string functions), both with what fit in buf; or
 * LINE_ERROR when the read failed, with errno its reason (taken at once:
 * what the caller prints about earlier lines would change errno). */
enum { LINE_ERROR = -3, LINE_NUL = -2, LINE_LONG = -1 };
static int next_line(FILE *f, char *buf, size_t len) {
  size_t n = 0;
  int c, got = 1;
  while ((c = getc_unlocked(f)) != EOF && c != '\n') {
    if (c == '\0')
      got = LINE_NUL;
    else if (n + 1 < len)
      buf[n++] = (char)c;
    else if (got == 1)
      got = LINE_LONG;
  }
  buf[n] = '\0';
  if (c == EOF && ferror(f)) return LINE_ERROR;
  return c == EOF && n == 0 && got == 1 ? 0 : got;
}

/* "name{labels} value [timestamp]", cut in place into line (the name),
 * *labels and *value: NULL, or what is wrong with the line. */
static const char *parse_sample(char *line, char **labels, double *value) {
  char *brace = strchr(line, '{'), *close = brace, *end, *rest;
  /* The first '}' outside the labels' quoted values. */
  while (close != NULL && *close != '\0' && *close != '}') {
    close = *close == '"' ? (char *)value_end(close + 1) : close;
    if (close != NULL) close++;
  }
  if (brace == NULL || close == NULL || *close != '}') return "no {labels}";
  *brace = '\0';
  *close = '\0';
  *labels = brace + 1;
  /* strtod takes Prometheus' NaN and +Inf, and makes 1e999 infinite. */
  *value = strtod(close + 1, &end);
  if (end == close + 1) return "no number after the labels";
  (void)strtoll(end, &rest, 10); /* the optional timestamp */
  if (rest[strspn(rest, " \t\r")] != '\0') return "more than a number and a timestamp after the labels";
  return NULL;
}

/* A metrics file being read, for what is said about its bad lines. */
struct reading {
  const char *path;
  size_t line, bad; /* a file of newlines can hold more than an int counts */
};

/* A linkpass line that is not what the plugin writes is left out and said,
 * for the first few of a file only: a file of garbage says so once, not for
 * a screenful. */
static void bad_line(struct reading *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bad_line(struct reading *r, const char *fmt, ...) {
  if (++r->bad > MAX_BAD_LINES) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "linkpass-status: %s:%zu: ", r->path, r->line);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, ": line left out\n");
  va_end(ap);
}

static int series_index(const char *name, const char *const *list, int n) {
  for (int i = 0; i < n; i++)
    if (strcmp(name, list[i]) == 0) return i;
  return -1;
}

static struct dev *dev_of(struct proc *p, const char *name, int port) {
  for (int i = 0; i < p->ndevs; i++)
    if (p->devs[i].port == port && strcmp(p->devs[i].name, name) == 0) return &p->devs[i];
  if (p->ndevs == MAX_DEVS) return NULL;
  struct dev *d = &p->devs[p->ndevs++];
  memset(d, 0, sizeof(*d));
  snprintf(d->name, sizeof(d->name), "%s", name);
  d->port = port;
  return d;
}

/* Whether st is /dev/null: it reads as empty, and stays a way to name no file. */
static int is_dev_null(const struct stat *st) {
  struct stat null;
  return S_ISCHR(st->st_mode) && stat("/dev/null", &null) == 0 && S_ISCHR(null.st_mode) && null.st_rdev == st->st_rdev;
}

/* Opens a file to read lines from; NULL, with *why, when it cannot be read
 * or is nothing to read lines from: a directory opens and reads as nothing
 * (it was skipped without a word), a device such as /dev/zero never ends,
 * and the open of a FIFO no one writes blocks (hence O_NONBLOCK where a
 * FIFO is refused, cleared once the file is known).  Only a regular file
 * or /dev/null is read, and where pipe_ok a pipe (bash's <(journalctl
 * ...), a FIFO named on the command line). */
static FILE *open_text(const char *path, int pipe_ok, const char **why) {
  struct stat st;
  int flags, saved;
  FILE *f;
  /* Opened without waiting, a FIFO nobody writes yet would read as empty
   * at once: one the user named is waited for, as cat does. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | (pipe_ok ? 0 : O_NONBLOCK));
  if (fd < 0) goto fail;
  if (fstat(fd, &st) != 0) goto fail_fd;
  if (S_ISDIR(st.st_mode)) {
    errno = EISDIR;
    goto fail_fd;
  }
  if (!S_ISREG(st.st_mode) && !is_dev_null(&st) && !(pipe_ok && S_ISFIFO(st.st_mode))) {
    close(fd);
    *why = pipe_ok ? "not a regular file or a pipe" : "not a regular file";
    return NULL;
  }
  flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) goto fail_fd;
  f = fdopen(fd, "r");
  if (f == NULL) goto fail_fd;
  return f;
fail_fd:
  saved = errno;
  close(fd);
  errno = saved;
fail:
  *why = strerror(errno);
  return NULL;
}

/* One metrics file.  1 when it is linkpass's, 0 when not, -1, with *why,
 * when it cannot be read. */
static int read_file(const char *path, struct proc *p, int pipe_ok, const char **why) {
  FILE *f = open_text(path, pipe_ok, why);
  if (f == NULL) return -1;
  memset(p, 0, sizeof(*p));
  snprintf(p->file, sizeof(p->file), "%s", path);
  p->pid = -1;
  char line[2048];
  int ours = 0, full = 0, got;
  struct reading r = {.path = path};
  while ((got = next_line(f, line, sizeof(line))) != 0 && got != LINE_ERROR) {
    r.line++;
    /* Comments, and other exporters' series in the textfile directory. */
    if (strncmp(line, "linkpass_", 9) != 0) continue;
    if (got == LINE_LONG) {
      bad_line(&r, "longer than %zu characters", sizeof(line) - 1);
      continue;
    }
    if (got == LINE_NUL) {
      bad_line(&r, "a NUL byte");
      continue;
    }
    char *labels, pid[32], dev[NAME_MAX_LEN], port[16];
    double value;
    int n;
    const char *wrong = parse_sample(line, &labels, &value);
    if (wrong != NULL) {
      bad_line(&r, "%s", wrong);
      continue;
    }
    int has_pid = label(labels, "pid", pid, sizeof(pid));
    if (has_pid == -2 || (has_pid == 0 && whole_number(pid, 1, INT_MAX, &n) != 0)) {
      bad_line(&r, "pid=\"%.31s\" is no process id", has_pid == 0 ? pid : "...");
      continue;
    }
    if (has_pid == 0) p->pid = n;
    if (p->host[0] == '\0' && label(labels, "host", p->host, sizeof(p->host)) != 0) p->host[0] = '\0';
    ours = 1;
    int k = series_index(line, dev_series, D_COUNT);
    if (k >= 0) {
      if (label(labels, "device", dev, sizeof(dev)) != 0 || label(labels, "port", port, sizeof(port)) != 0) {
        bad_line(&r, "%s without a device (up to %d characters) and a port", line, NAME_MAX_LEN - 1);
        continue;
      }
      if (whole_number(port, 1, 255, &n) != 0) {
        bad_line(&r, "port=\"%s\" is no port number (1..255)", port);
        continue;
      }
      struct dev *d = dev_of(p, dev, n);
      if (d != NULL) {
        d->v[k] = value;
      } else if (!full) {
        full = 1;
        fprintf(stderr, "linkpass-status: %s: more than %d ports: the others left out\n", path, MAX_DEVS);
      }
      continue;
    }
    k = series_index(line, proc_series, P_COUNT);
    if (k >= 0) {
      p->v[k] = value;
      p->have[k] = 1;
    }
  }
  if (r.bad > MAX_BAD_LINES)
    fprintf(stderr, "linkpass-status: %s: %zu lines left out in all (is it a linkpass metrics file?)\n", path, r.bad);
  if (got == LINE_ERROR) {
    *why = strerror(errno);
    fclose(f);
    return -1;
  }
  fclose(f);
  return ours;
}

/* When the file was last written: its own timestamp, else its mtime. */
static double written_at(const struct proc *p) {
  struct stat st;
  double written = p->have[P_UPDATED] ? p->v[P_UPDATED] : 0;
  if (written == 0 && stat(p->file, &st) == 0) written = (double)st.st_mtim.tv_sec;
  return written;
}

/* written_at, ordered: a time that is no number (NaN, infinities) is the
 * oldest, where it would make every comparison false. */
static double written_key(const struct proc *p) {
  double w = written_at(p);
  return isfinite(w) ? w : -HUGE_VAL;
}

/* Running, exited (its last write says so), gone (it died without one:
 * killed, crashed; its file counts for nothing) or stale: a process with
 * its pid runs, but the file is not rewritten any more, so that process is
 * another (a pid in another container, or one reused) or linkpass there is
 * stuck; its figures are not live either.  A process of another host, or of
 * a container with a host name of its own, has its pid in another PID
 * namespace: kill() here says nothing of it (a rank that is pid 1 in its
 * container would always be "running"), so only its file's age does. */
static void judge(struct proc *p, double now, const char *local_host) {
  p->age_s = now - written_at(p);
  if (p->have[P_UP] && p->v[P_UP] == 0) {
    p->state = "exited";
  } else if (p->host[0] != '\0' && strcmp(p->host, local_host) != 0) {
    p->state = p->age_s > STALE_S ? "gone" : "running";
  } else if (p->pid > 0 && (kill(p->pid, 0) == 0 || errno == EPERM)) {
    p->state = p->age_s > STALE_S ? "stale" : "running";
  } else {
    p->state = "gone";
  }
}

/* Compared, not subtracted: a file without a pid (-1) and one of INT_MAX
 * would overflow. */
static int by_pid(const void *a, const void *b) {
  int x = ((const struct proc *)a)->pid, y = ((const struct proc *)b)->pid;
  return (x > y) - (x < y);
}

static int read_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (d == NULL) {
    fprintf(stderr,
            "linkpass-status: cannot open the metrics directory %s: %s (name the directory the ranks write to "
            "with --dir, or set LINKPASS_METRICS_FILE as they do)\n",
            dir, strerror(errno));
    return -1;
  }
  struct dirent *e;
  int left_out = 0;
  while ((e = readdir(d)) != NULL) {
    size_t n = strlen(e->d_name);
    if (n < 6 || strcmp(e->d_name + n - 5, ".prom") != 0) continue;
    char path[4096];
    if (snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= (int)sizeof(path)) continue;
    /* Not one named by the user: the rest of the directory still counts.
     * A FIFO here would be no metrics file, so only regular files. */
    const char *why;
    int r = read_file(path, &procs[nprocs], 0, &why);
    if (r < 0) fprintf(stderr, "linkpass-status: skipping %s: %s\n", path, why);
    if (r != 1) continue;
    if (nprocs < MAX_PROCS) {
      nprocs++;
      continue;
    }
    /* Full: the file written longest ago is left out.  A directory that
     * keeps every job's files (the epilogue did not remove them) has the
     * live processes among the newest, and readdir's order is none. */
    int oldest = 0;
    for (int i = 1; i < MAX_PROCS; i++)
      if (written_key(&procs[i]) < written_key(&procs[oldest])) oldest = i;
    if (written_key(&procs[MAX_PROCS]) > written_key(&procs[oldest])) procs[oldest] = procs[MAX_PROCS];
    left_out++;
  }
  closedir(d);
  if (left_out > 0)
    fprintf(stderr,
            "linkpass-status: %d metrics files in %s beyond %d: the %d written longest ago left out (remove the files "
            "of jobs that ended)\n",
            MAX_PROCS + left_out, dir, MAX_PROCS, left_out);
  return 0;
}

/* The last event lines linkpass sent to syslog ("... linkpass[pid]: event=..."),
 * from a file or, for "-", standard input (journalctl's output).  0, or -1
 * when a log the user named cannot be read; the default one is read only
 * when it can be (a node whose log is the journal has none). */
static int read_events(const char *log, int named, int want) {
  const char *why = NULL;
  FILE *f = strcmp(log, "-") == 0 ? stdin : open_text(log, 1, &why);
  if (f == NULL) goto fail;
  char line[sizeof(events[0])];
  size_t seen = 0, unread = 0; /* a log of years: more lines than an int counts */
  int got;
  while ((got = next_line(f, line, sizeof(line))) != 0 && got != LINE_ERROR) {
    if (strstr(line, "linkpass[") == NULL || strstr(line, "event=") == NULL) continue;
    if (got != 1) {
      unread++;
      continue;
    }
    memcpy(events[seen++ % MAX_EVENTS], line, sizeof(line));
  }
  if (got == LINE_ERROR) why = strerror(errno);
  if (f != stdin) fclose(f);
  if (unread > 0)
    fprintf(stderr,
            "linkpass-status: %s: %zu linkpass event lines longer than %zu characters or with a NUL byte left out\n",
            strcmp(log, "-") == 0 ? "standard input" : log, unread, sizeof(line) - 1);
  if (want > MAX_EVENTS) want = MAX_EVENTS;
  /* Keep the last `want`, oldest first. */
  size_t keep_n = seen < (size_t)want ? seen : (size_t)want;
  char keep[MAX_EVENTS][sizeof(events[0])];
  for (size_t i = 0; i < keep_n; i++) memcpy(keep[i], events[(seen - keep_n + i) % MAX_EVENTS], sizeof(keep[i]));
  memcpy(events, keep, sizeof(keep[0]) * keep_n);
  nevents = (int)keep_n;
  if (why != NULL) goto fail;
  return 0;
fail:
  if (!named) return 0;
  fprintf(stderr,
          "linkpass-status: cannot read the log %s: %s (name a syslog file that can be read, or - for standard "
          "input)\n",
          strcmp(log, "-") == 0 ? "on standard input" : log, why);
  return -1;
}

/* A key=value field of an event line into out ("" when absent). */
static const char *field(const char *line, const char *key, char *out, size_t len) {
  out[0] = '\0';
  size_t klen = strlen(key);
  for (const char *p = line; (p = strstr(p, key)) != NULL; p += klen) {
    if ((p != line && p[-1] != ' ') || p[klen] != '=') continue;
    const char *v = p + klen + 1;
    size_t n = strcspn(v, " ");
    if (n >= len) n = len - 1;
    memcpy(out, v, n);
    out[n] = '\0';
    break;
  }
  return out;
}

/* The length of the UTF-8 sequence that starts at s, 0 when it is not a
 * valid one (a Latin-1 byte in a log line or a file name, a character cut
 * by a field's length): JSON text must be UTF-8. */
static size_t utf8_len(const unsigned char *s) {
  if (s[0] < 0x80) return 1;
  size_t n;
  unsigned long cp, min;
  if ((s[0] & 0xe0) == 0xc0) {
    n = 2, cp = s[0] & 0x1f, min = 0x80;
  } else if ((s[0] & 0xf0) == 0xe0) {
    n = 3, cp = s[0] & 0x0f, min = 0x800;
  } else if ((s[0] & 0xf8) == 0xf0) {
    n = 4, cp = s[0] & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  /* The terminating NUL is no continuation byte: a cut sequence stops here. */
  for (size_t i = 1; i < n; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (s[i] & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

/* A JSON string; a byte that is not valid UTF-8 becomes U+FFFD. */
static void json_str(const char *s) {
  putchar('"');
  while (*s) {
    size_t n = utf8_len((const unsigned char *)s);
    if (*s == '"' || *s == '\\')
      printf("\\%c", *s);
    else if ((unsigned char)*s < 0x20)
      printf("\\u%04x", *s);
    else if (n == 0)
      fputs("\\ufffd", stdout);
    else
      fwrite(s, 1, n, stdout);
    s += n ? n : 1;
  }
  putchar('"');
}

/* ", \"key\": value", or null for a value that is not finite: JSON has no NaN
 * or infinity, and a metrics file may say NaN, +Inf or 1e999 (which strtod
 * makes infinite), or a file's age be taken from such a timestamp. */
static void json_num(const char *key, double v, int decimals) {
  printf(", \"%s\": ", key);
  if (isfinite(v))
    printf("%.*f", decimals, v);
  else
    fputs("null", stdout);
}

/* A port's path_up: 1 up, 0 down, -1 for NaN, which says neither. */
static int path_state(double up) { return isnan(up) ? -1 : up != 0; }

static void print_json(void) {
  printf("{\"processes\": [");
  for (int i = 0; i < nprocs; i++) {
    const struct proc *p = &procs[i];
    printf("%s\n  {\"pid\": %d, \"host\": ", i ? "," : "", p->pid);
    json_str(p->host);
    printf(", \"file\": ");
    json_str(p->file);
    printf(", \"state\": \"%s\"", p->state);
    json_num("updated_age_seconds", p->age_s, 3);
    json_num("replayed_requests", p->v[P_REPLAYED], 0);
    json_num("replayed_bytes", p->v[P_REPLAYED_BYTES], 0);
    json_num("paths_lost", p->v[P_LOST], 0);
    json_num("last_failover_seconds", p->v[P_LAST_FAILOVER], 6);
    json_num("event_ring_overflows", p->v[P_OVERFLOWS], 0);
    json_num("syslog_lines_lost", p->v[P_SYSLOG_LOST], 0);
    printf(", \"devices\": [");
    for (int j = 0; j < p->ndevs; j++) {
      const struct dev *d = &p->devs[j];
      printf("%s\n    {\"device\": ", j ? "," : "");
      json_str(d->name);
      static const char *const up[] = {"null", "false", "true"};
      printf(", \"port\": %d, \"path_up\": %s", d->port, up[path_state(d->v[D_UP]) + 1]);
      json_num("connections", d->v[D_CONNS], 0);
      json_num("failovers", d->v[D_FAILOVERS], 0);
      json_num("failbacks", d->v[D_FAILBACKS], 0);
      json_num("flaps", d->v[D_FLAPS], 0);
      json_num("degraded_seconds", d->v[D_DEGRADED], 3);
      printf("}");
    }
    printf("]}");
  }
  printf("\n], \"events\": [");
  /* port, evidence and holddown_ms: a degraded line's (the port drained,
   * what was measured: its first word, the line has the rest) */
  static const char *const keys[] = {"event",    "comm",        "dir",  "dev",  "new_dev",  "peer",       "reason",
                                     "replayed", "duration_us", "time", "port", "evidence", "holddown_ms"};
  for (int i = 0; i < nevents; i++) {
    printf("%s\n  {", i ? "," : "");
    for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
      char v[256];
      printf("%s\"%s\": ", k ? ", " : "", keys[k]);
      json_str(field(events[i], keys[k], v, sizeof(v)));
    }
    printf("}");
  }
  printf("\n]}\n");
}

static void print_table(const char *where, int from_dir) {
  int running = 0;
  for (int i = 0; i < nprocs; i++) running += strcmp(procs[i].state, "running") == 0;
  printf("linkpass on this node: %d process%s in %s, %d running\n", nprocs, nprocs == 1 ? "" : "es", where, running);
  if (nprocs == 0 && from_dir)
    printf(
        "(no linkpass metrics file there: the ranks write where their LINKPASS_METRICS_FILE says; name that "
        "directory with --dir)\n");
  for (int i = 0; i < nprocs; i++) {
    const struct proc *p = &procs[i];
    printf(
        "\npid %d%s%s  %s, written %.1f s ago  replayed %.0f messages (%.1f MiB), paths lost %.0f, last failover "
        "%.2f ms\n",
        p->pid, p->host[0] ? " on " : "", p->host, p->state, p->age_s, p->v[P_REPLAYED],
        p->v[P_REPLAYED_BYTES] / 1048576.0, p->v[P_LOST], p->v[P_LAST_FAILOVER] * 1e3);
    if (p->v[P_SYSLOG_LOST] > 0)
      printf("  %.0f event lines did not reach syslog (NCCL's log has them: its WARNs say why)\n", p->v[P_SYSLOG_LOST]);
    if (strcmp(p->state, "gone") == 0)
      printf("  (the process is gone without a last write: these figures are its last, and count for nothing now)\n");
    if (strcmp(p->state, "stale") == 0)
      printf(
          "  (a process with this pid runs, but the file is not rewritten any more: another process has the pid, "
          "in another container or reused, or linkpass there is stuck; these figures are not live)\n");
    printf("  %-16s %-5s %11s %9s %9s %6s %11s\n", "port", "path", "connections", "failovers", "failbacks", "flaps",
           "degraded_s");
    for (int j = 0; j < p->ndevs; j++) {
      const struct dev *d = &p->devs[j];
      char port[NAME_MAX_LEN + 8];
      snprintf(port, sizeof(port), "%s:%d", d->name, d->port);
      static const char *const path[] = {"?", "DOWN", "up"};
      printf("  %-16s %-5s %11.0f %9.0f %9.0f %6.0f %11.3f\n", port, path[path_state(d->v[D_UP]) + 1], d->v[D_CONNS],
             d->v[D_FAILOVERS], d->v[D_FAILBACKS], d->v[D_FLAPS], d->v[D_DEGRADED]);
    }
  }
  if (nevents > 0) {
    printf("\nlast events:\n");
    for (int i = 0; i < nevents; i++) {
      char ev[32], dev[64], nd[64], reason[64], dur[32], peer[192], at[40];
      field(events[i], "event", ev, sizeof(ev));
      field(events[i], "dev", dev, sizeof(dev));
      field(events[i], "new_dev", nd, sizeof(nd));
      field(events[i], "reason", reason, sizeof(reason));
      field(events[i], "duration_us", dur, sizeof(dur));
      field(events[i], "peer", peer, sizeof(peer));
      /* When it happened: the line's time= (a sweep's lines are sent after
       * it), else, from a plugin before it, the line's own prefix (and
       * host): "<12>Dec  1 10:00:00 ", "2026-12-01T10:00:00.123+00:00 node7 "
       * as rsyslog writes it. */
      const char *pid = strstr(events[i], "linkpass[");
      const char *when = events[i];
      if (*when == '<' && strchr(when, '>') != NULL && strchr(when, '>') < pid) when = strchr(when, '>') + 1;
      int wlen = pid ? (int)(pid - when) : 0;
      if (*field(events[i], "time", at, sizeof(at)) != '\0' && strcmp(at, "-") != 0) {
        when = at;
        wlen = (int)strlen(at);
      }
      while (wlen > 0 && when[wlen - 1] == ' ') wlen--;
      int pidlen = pid ? (int)strcspn(pid + 9, "]") : 1;
      if (strcmp(ev, "degraded") == 0) { /* a port drained while up: what was measured, not a move */
        char port[16], hold[24];
        const char *evidence = strstr(events[i], " evidence="), *end = strstr(events[i], " windows=");
        int elen = evidence && end && end > evidence ? (int)(end - evidence) - 1 : 0;
        printf("  %.*s pid %.*s %-9s %s:%s drained (%.*s; hold-down %s ms)\n", wlen, when, pidlen, pid ? pid + 9 : "?",
               ev, dev, field(events[i], "port", port, sizeof(port)), elen, evidence ? evidence + 1 : "",
               field(events[i], "holddown_ms", hold, sizeof(hold)));
        continue;
      }
      printf("  %.*s pid %.*s %-9s %s -> %s (%s, %s us) peer %s\n", wlen, when, pidlen, pid ? pid + 9 : "?", ev, dev,
             nd[0] && strcmp(nd, "-") ? nd : "(none)", reason, dur, peer);
    }
  }
}

static void usage(FILE *out) {
  fprintf(out,
          "usage: linkpass-status [--dir DIR] [--log FILE] [--events N] [--json] [FILE.prom ...]\n"
          "  --dir DIR     metrics directory (default: that of $LINKPASS_METRICS_FILE, else\n"
          "                /var/lib/prometheus/node-exporter, the textfile directory of Debian's node exporter)\n"
          "  --log FILE    syslog file with linkpass's event lines (default /var/log/syslog, when readable;\n"
          "                a FILE named here that cannot be read is an error);\n"
          "                - reads them from standard input: journalctl -t linkpass | linkpass-status --log -\n"
          "  --events N    how many of the last event lines to show (default 8; 0: none)\n"
          "  --json        one JSON document instead of the table\n"
          "exit status: 0, 1 when an input cannot be read (the directory, a FILE.prom, the --log FILE),\n"
          "2 on a bad option\n");
}

/* This host's name, as the plugin puts it in %h and the host label: cut
 * to LP_HOST_MAX - 1 characters, its wire field's. */
static void local_host_name(char *out, size_t len) {
  char host[256];
  if (gethostname(host, sizeof(host)) != 0) snprintf(host, sizeof(host), "?");
  host[sizeof(host) - 1] = '\0';
  snprintf(out, len, "%.*s", LP_HOST_MAX - 1, host);
}

/* The directory of the plugin's LINKPASS_METRICS_FILE pattern, as the
 * plugin expands it on this host: %h is the host name.  0, or -1 after
 * saying why (a directory that depends on the pid, or too long). */
static int pattern_dir(const char *pattern, char *out, size_t len) {
  char dir[4096], host[256] = "";
  local_host_name(host, sizeof(host));
  /* "/linkpass-%p.prom" is in "/", not in "". */
  int dlen = (int)(strrchr(pattern, '/') - pattern);
  snprintf(dir, sizeof(dir), "%.*s", dlen > 0 ? dlen : 1, pattern);
  if (strstr(dir, "%p") != NULL) {
    fprintf(stderr,
            "linkpass-status: LINKPASS_METRICS_FILE=\"%s\" puts each process's file in a directory of its own (%%p "
            "in the directory): name one with --dir, or the files themselves\n",
            pattern);
    return -1;
  }
  if (lp_metrics_path(dir, 0, host, out, len) != 0) {
    fprintf(stderr, "linkpass-status: the directory of LINKPASS_METRICS_FILE=\"%s\" is too long\n", pattern);
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {
      {"dir", required_argument, NULL, 'd'},    {"log", required_argument, NULL, 'l'},
      {"events", required_argument, NULL, 'e'}, {"json", no_argument, NULL, 'j'},
      {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0}};
  const char *dir = NULL, *log = "/var/log/syslog";
  int json = 0, want_events = 8, log_named = 0, c;
  while ((c = getopt_long(argc, argv, "d:l:e:jh", longopts, NULL)) != -1) {
    switch (c) {
    case 'd': dir = optarg; break;
    case 'l':
      log = optarg;
      log_named = 1;
      break;
    case 'e': {
      char *end;
      long n = strtol(optarg, &end, 10);
      if (*optarg == '\0' || *end != '\0' || n < 0 || n > MAX_EVENTS) {
        fprintf(stderr, "linkpass-status: --events %s: expected 0..%d\n", optarg, MAX_EVENTS);
        return 2;
      }
      want_events = (int)n;
      break;
    }
    case 'j': json = 1; break;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
  }
  char where[4096];
  int rc = 0;
  if (optind < argc) {
    if (argc - optind > MAX_PROCS)
      fprintf(stderr, "linkpass-status: more than %d metrics files: the others left out\n", MAX_PROCS);
    for (int i = optind; i < argc && nprocs < MAX_PROCS; i++) {
      const char *why;
      int r = read_file(argv[i], &procs[nprocs], 1, &why);
      if (r < 0) fprintf(stderr, "linkpass-status: cannot read the metrics file %s: %s\n", argv[i], why);
      if (r < 0) rc = 1;
      if (r == 0) fprintf(stderr, "linkpass-status: %s has no linkpass sample: no linkpass metrics file\n", argv[i]);
      if (r == 1) nprocs++;
    }
    snprintf(where, sizeof(where), "%d file%s", argc - optind, argc - optind == 1 ? "" : "s");
  } else {
    const char *pattern = getenv("LINKPASS_METRICS_FILE");
    if (dir == NULL && pattern != NULL && strrchr(pattern, '/') != NULL) {
      if (pattern_dir(pattern, where, sizeof(where)) != 0) return 1;
      dir = where;
    }
    if (dir == NULL) dir = "/var/lib/prometheus/node-exporter";
    if (dir != where) snprintf(where, sizeof(where), "%s", dir);
    if (read_dir(dir) != 0) rc = 1;
  }
  if (want_events > 0 && read_events(log, log_named, want_events) != 0) rc = 1;
  /* Without an input the user asked for, a summary would pass for the
   * node's whole story: the errors said what is missing, print nothing. */
  if (rc != 0) return rc;
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  char local_host[256] = "";
  local_host_name(local_host, sizeof(local_host));
  for (int i = 0; i < nprocs; i++) judge(&procs[i], (double)now.tv_sec + (double)now.tv_nsec / 1e9, local_host);
  qsort(procs, (size_t)nprocs, sizeof(procs[0]), by_pid);
  if (json)
    print_json();
  else
    print_table(where, optind >= argc);
  return 0;
}
