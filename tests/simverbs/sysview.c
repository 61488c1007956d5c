/*
 * sysview.c: a simulated host's sysfs tree at /sys, for `simverbs run`
 * (see sysview.h for what it looks like).
 *
 * The simulated tree is walked from its root alongside /sys.  Each of its
 * entries either
 *   - merges with the real directory of that name (class, devices and the
 *     buses under devices: they must keep every real entry), or
 *   - covers the real entry of the same kind: a read-only bind mount on it, or
 *   - is inserted, when /sys has no such entry (or one of another kind): its
 *     directory is then covered by a tmpfs that holds every real entry again
 *     and the simulated ones, and is made read-only once filled.
 * sysfs refuses mkdir, hence the tmpfs; only directories on the way to a
 * simulated entry are ever covered, so the rest of /sys is the real thing.
 *
 * The real entries are reached through directory fds opened before the
 * tmpfs covers them: a lookup that starts at such an fd sees what lies under
 * the tmpfs.  open_tree(OPEN_TREE_CLONE) turns an entry into a detached bind
 * mount and move_mount() attaches it, so no staging directory is needed and
 * nothing is left behind: the mounts live in the program's mount namespace
 * and die with it.
 *
 * A view built halfway would be worse than none (a /sys/class missing
 * entries), so every mount placed on the tree as it was is recorded, and on
 * failure they are all detached again, newest first.  Mounts made inside a
 * tmpfs of ours go with it.
 */
#include "sysview.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#define SYSVIEW_FS "simverbs-sysview" /* the tmpfs's source name, as /proc/self/mountinfo shows it */

enum how {
  MERGE,  /* a real directory that gains simulated entries: walk into it */
  COVER,  /* bind the simulated entry over the real one of the same kind */
  INSERT, /* /sys lacks it (or has another kind of entry): the directory needs a tmpfs */
};

struct entry {
  char name[NAME_MAX + 1];
  enum how how;
};

struct view {
  char *why; /* the first failure, for the caller's warning */
  size_t why_len;
  char **anchors; /* mount points on the tree as it was, oldest first: what undo detaches */
  size_t nanchors, cap;
};

/* Record what failed, with errno's text, unless something failed before:
 * the first failure is the cause, what follows only its consequences. */
static int failed(struct view *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int failed(struct view *v, const char *fmt, ...) {
  int err = errno;
  va_list ap;
  size_t n;
  if (v->why[0]) {
    errno = err;
    return -1;
  }
  va_start(ap, fmt);
  vsnprintf(v->why, v->why_len, fmt, ap);
  va_end(ap);
  n = strlen(v->why);
  snprintf(v->why + n, v->why_len - n, ": %s%s", strerror(err),
           err == EPERM ? "; this needs root or CAP_SYS_ADMIN" : "");
  errno = err;
  return -1;
}

/* The directories whose real entries must all stay: the root, class,
 * devices, kernel and kernel/mm, and each bus directory under devices.  Anything deeper that the
 * simulated tree has replaces what /sys has there, so that class/infiniband
 * lists only the simulated NICs even on a host with real HCAs, and a PCI
 * address that a real device also has shows the simulated NIC. */
static bool merged(const char *rel, const char *name) {
  if (!rel[0]) return strcmp(name, "class") == 0 || strcmp(name, "devices") == 0 || strcmp(name, "kernel") == 0;
  if (strcmp(rel, "kernel") == 0) /* kernel/mm/memory_peers: GPU peer memory (sysfs.c) */
    return strcmp(name, "mm") == 0;
  return strcmp(rel, "devices") == 0;
}

/* Reserve the record before mounting, so that a mount that succeeds is
 * always undone; anchor_pop() drops it when the mount itself failed. */
static int anchor_push(struct view *v, const char *path) {
  char *copy;
  if (v->nanchors == v->cap) {
    size_t cap = v->cap ? v->cap * 2 : 8;
    char **grown = realloc(v->anchors, cap * sizeof(*grown));
    if (!grown) return failed(v, "record the mount on %s", path);
    v->anchors = grown;
    v->cap = cap;
  }
  if (!(copy = strdup(path))) return failed(v, "record the mount on %s", path);
  v->anchors[v->nanchors++] = copy;
  return 0;
}

static void anchor_pop(struct view *v) { free(v->anchors[--v->nanchors]); }

/* Detach everything placed on the tree as it was, newest first.  0 when
 * /sys is back as it was. */
static int undo(struct view *v) {
  int rc = 0;
  while (v->nanchors) {
    if (umount2(v->anchors[v->nanchors - 1], MNT_DETACH) != 0) rc = -1;
    anchor_pop(v);
  }
  return rc;
}

/* Attach a clone of <src_dir>/<name> at <dst_dir>/<name>, which must exist.
 * The clone takes the mounts below it along (AT_RECURSIVE), and never follows
 * a symlink out of the tree. */
static int bind_at(struct view *v, int src_dir, int dst_dir, const char *name, bool rdonly, const char *where) {
  struct mount_attr ro = {.attr_set = MOUNT_ATTR_RDONLY};
  int tree = open_tree(src_dir, name, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_SYMLINK_NOFOLLOW);
  if (tree < 0) return failed(v, "clone %s for %s/%s", name, where, name);
  if (rdonly && mount_setattr(tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &ro, sizeof(ro)) != 0) {
    failed(v, "make the bind mount for %s/%s read-only", where, name);
    goto fail;
  }
  if (move_mount(tree, "", dst_dir, name, MOVE_MOUNT_F_EMPTY_PATH) != 0) {
    failed(v, "bind-mount onto %s/%s", where, name);
    goto fail;
  }
  close(tree);
  return 0;
fail:
  close(tree);
  return -1;
}

/* <src_dir>/<name> again in the tmpfs <dst_dir>: a symlink with the same
 * target (relative sysfs links then resolve as in /sys), or a directory or
 * an empty file with the entry bound over it. */
static int copy_entry(struct view *v, int src_dir, int dst_dir, const char *name, bool rdonly, const char *where) {
  char target[PATH_MAX];
  struct stat st;
  ssize_t len;
  int fd;
  if (fstatat(src_dir, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
    return errno == ENOENT ? 0 : failed(v, "stat %s for %s/%s", name, where, name); /* ENOENT: unplugged meanwhile */
  switch (st.st_mode & S_IFMT) {
  case S_IFLNK:
    len = readlinkat(src_dir, name, target, sizeof(target));
    if (len >= (ssize_t)sizeof(target)) errno = ENAMETOOLONG;
    if (len < 0 || len >= (ssize_t)sizeof(target)) return failed(v, "read the symlink %s for %s/%s", name, where, name);
    target[len] = '\0';
    if (symlinkat(target, dst_dir, name) != 0) return failed(v, "recreate the symlink %s/%s", where, name);
    return 0;
  case S_IFDIR:
    if (mkdirat(dst_dir, name, 0755) != 0) return failed(v, "make the mount point %s/%s", where, name);
    break;
  case S_IFREG:
    if ((fd = openat(dst_dir, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)) < 0)
      return failed(v, "make the mount point %s/%s", where, name);
    close(fd);
    break;
  default: return 0; /* sysfs has no other kind; an empty stand-in would only mislead */
  }
  return bind_at(v, src_dir, dst_dir, name, rdonly, where);
}

static const struct entry *find(const struct entry *e, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(e[i].name, name) == 0) return &e[i];
  return NULL;
}

/* The simulated directory's entries, each with what to do with it given
 * what /sys has under the same name. */
static int list_sim(struct view *v, int sim_dir, int real_dir, const char *rel, const char *tpath, struct entry **out,
                    size_t *count) {
  struct entry *e = NULL;
  struct stat sst, rst;
  struct dirent *de;
  size_t n = 0, cap = 0;
  DIR *dir = NULL;
  int fd, rc = -1;
  if ((fd = openat(sim_dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 || !(dir = fdopendir(fd))) {
    failed(v, "read the simulated tree for %s", tpath);
    if (fd >= 0) close(fd);
    return -1;
  }
  for (errno = 0; (de = readdir(dir)); errno = 0) {
    /* ".", ".." and the temporaries sysfs.c renames into place */
    if (de->d_name[0] == '.') continue;
    if (fstatat(sim_dir, de->d_name, &sst, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;
      failed(v, "stat the simulated %s for %s", de->d_name, tpath);
      goto out;
    }
    if (!S_ISDIR(sst.st_mode) && !S_ISREG(sst.st_mode) && !S_ISLNK(sst.st_mode)) continue;
    if (n == cap) {
      struct entry *grown = realloc(e, (cap = cap ? cap * 2 : 16) * sizeof(*e));
      if (!grown) {
        failed(v, "list the simulated entries of %s", tpath);
        goto out;
      }
      e = grown;
    }
    snprintf(e[n].name, sizeof(e[n].name), "%s", de->d_name);
    if (fstatat(real_dir, de->d_name, &rst, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno != ENOENT) {
        failed(v, "stat %s/%s", tpath, de->d_name);
        goto out;
      }
      e[n].how = INSERT;
    } else if (S_ISDIR(sst.st_mode) && S_ISDIR(rst.st_mode) && merged(rel, de->d_name)) {
      e[n].how = MERGE;
    } else if (!S_ISLNK(sst.st_mode) && (sst.st_mode & S_IFMT) == (rst.st_mode & S_IFMT)) {
      e[n].how = COVER;
    } else {
      e[n].how = INSERT; /* nothing can be mounted over a symlink, nor a directory over a file */
    }
    n++;
  }
  if (errno != 0) {
    failed(v, "read the simulated tree for %s", tpath);
    goto out;
  }
  *out = e;
  *count = n;
  e = NULL;
  rc = 0;
out:
  free(e);
  closedir(dir);
  return rc;
}

/* Cover `tpath` with a tmpfs holding its real entries (but those the
 * simulated tree replaces) and the simulated entries that are not merged;
 * merged ones are bound from the real tree here and walked into afterwards. */
static int cover_dir(struct view *v, const char *tpath, int real_dir, int sim_dir, const struct entry *e, size_t n,
                     bool anchored) {
  struct mount_attr ro = {.attr_set = MOUNT_ATTR_RDONLY};
  const struct entry *s;
  struct dirent *de;
  struct stat st;
  char opts[32];
  DIR *dir = NULL;
  int top = -1, fd, rc = -1;
  if (fstat(real_dir, &st) != 0) return failed(v, "stat %s", tpath);
  snprintf(opts, sizeof(opts), "mode=%04o", (unsigned)(st.st_mode & 07777));
  if (anchored && anchor_push(v, tpath) != 0) return -1;
  if (mount(SYSVIEW_FS, tpath, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts) != 0) {
    failed(v, "mount a tmpfs over %s", tpath);
    if (anchored) anchor_pop(v);
    return -1;
  }
  if ((top = open(tpath, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW)) < 0) {
    failed(v, "open the tmpfs over %s", tpath);
    goto out;
  }
  if ((fd = openat(real_dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 || !(dir = fdopendir(fd))) {
    failed(v, "read %s", tpath);
    if (fd >= 0) close(fd);
    goto out;
  }
  for (errno = 0; (de = readdir(dir)); errno = 0) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    if ((s = find(e, n, de->d_name)) && s->how != MERGE) continue;
    if (copy_entry(v, real_dir, top, de->d_name, false, tpath) != 0) goto out;
  }
  if (errno != 0) {
    failed(v, "read %s", tpath);
    goto out;
  }
  for (size_t i = 0; i < n; i++)
    if (e[i].how != MERGE && copy_entry(v, sim_dir, top, e[i].name, true, tpath) != 0) goto out;
  /* sysfs refuses new files; so does the view once it is built */
  if (mount_setattr(top, "", AT_EMPTY_PATH, &ro, sizeof(ro)) != 0) {
    failed(v, "make the tmpfs over %s read-only", tpath);
    goto out;
  }
  rc = 0;
out:
  if (dir) closedir(dir);
  if (top >= 0) close(top);
  return rc; /* on failure the tmpfs stays: it was recorded (or lies in one that was) and undo detaches it */
}

/* Show the simulated directory `sim_dir` (`rel` in the simulated tree) at
 * `tpath`, a directory of the view.  `anchored`: tpath is still part of the
 * tree as it was, not inside a tmpfs of ours, so mounts on it are recorded. */
static int graft(struct view *v, const char *tpath, int sim_dir, const char *rel, bool anchored) {
  char path[PATH_MAX], sub[PATH_MAX];
  struct entry *e = NULL;
  bool covered = false;
  size_t n = 0;
  int real_dir, child, rc = -1;
  if ((real_dir = open(tpath, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW)) < 0) return failed(v, "open %s", tpath);
  if (list_sim(v, sim_dir, real_dir, rel, tpath, &e, &n) != 0) goto out;
  for (size_t i = 0; i < n; i++) covered |= e[i].how == INSERT;
  if (covered) {
    if (cover_dir(v, tpath, real_dir, sim_dir, e, n, anchored) != 0) goto out;
  } else {
    for (size_t i = 0; i < n; i++) {
      if (e[i].how != COVER) continue;
      if (snprintf(path, sizeof(path), "%s/%s", tpath, e[i].name) >= (int)sizeof(path)) {
        errno = ENAMETOOLONG;
        failed(v, "build a path under %s", tpath);
        goto out;
      }
      if (anchored && anchor_push(v, path) != 0) goto out;
      if (bind_at(v, sim_dir, real_dir, e[i].name, true, tpath) != 0) {
        if (anchored) anchor_pop(v);
        goto out;
      }
    }
  }
  for (size_t i = 0; i < n; i++) {
    if (e[i].how != MERGE) continue;
    if (snprintf(path, sizeof(path), "%s/%s", tpath, e[i].name) >= (int)sizeof(path) ||
        snprintf(sub, sizeof(sub), "%s%s%s", rel, rel[0] ? "/" : "", e[i].name) >= (int)sizeof(sub)) {
      errno = ENAMETOOLONG;
      failed(v, "build a path under %s", tpath);
      goto out;
    }
    if ((child = openat(sim_dir, e[i].name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW)) < 0) {
      failed(v, "open the simulated %s", sub);
      goto out;
    }
    if (graft(v, path, child, sub, anchored && !covered) != 0) {
      close(child);
      goto out;
    }
    close(child);
  }
  rc = 0;
out:
  free(e);
  close(real_dir);
  return rc;
}

int sv_sysview_enter(const char *sim_root, bool private_ns, char *why, size_t why_len) {
  struct view v = {.why = why, .why_len = why_len};
  int sim, rc = -1;
  why[0] = '\0';
  if (!private_ns) {
    if (unshare(CLONE_NEWNS) != 0) return failed(&v, "make a mount namespace (unshare)");
    /* Until this holds, a mount here would show up in every namespace. */
    if (mount("", "/", NULL, MS_SLAVE | MS_REC, NULL) != 0)
      return failed(&v, "keep mounts from propagating out of the new mount namespace");
  }
  if ((sim = open(sim_root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
    return failed(&v, "open the simulated tree %s", sim_root);
  if (graft(&v, "/sys", sim, "", true) == 0)
    rc = 0;
  else if (undo(&v) != 0)
    rc = -2;
  close(sim);
  while (v.nanchors) anchor_pop(&v);
  free(v.anchors);
  return rc;
}
