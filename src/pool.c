/* NIC pools: closeness ordering, explicit pools, choosing a target. */
#include "pool.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* PCI bridges two NICs share below the root complex ("pciDDDD:BB"): 1
 * means the same root port, 2 or more the same PCIe switch as well. */
static int shared_pci_depth(const char *a, const char *b) {
  const char *ra = a ? strstr(a, "/pci") : NULL, *rb = b ? strstr(b, "/pci") : NULL;
  if (!ra || !rb || ra - a != rb - b || strncmp(a, b, (size_t)(ra - a)) != 0) return 0;
  int depth = 0;
  for (size_t i = (size_t)(ra - a) + 1; a[i] == b[i]; i++) {
    if (a[i] == '/') depth++; /* one more whole component in common */
    if (a[i] == '\0') {
      depth++;
      break;
    }
  }
  return depth > 0 ? depth - 1 : 0; /* the root complex itself does not count */
}

struct ranked {
  int index, depth, same_numa;
};

static int closer_first(const void *pa, const void *pb) {
  const struct ranked *a = pa, *b = pb;
  if (a->depth != b->depth) return b->depth - a->depth;
  if (a->same_numa != b->same_numa) return b->same_numa - a->same_numa;
  return a->index - b->index;
}

int lp_pool_order(const struct lp_pool_nic *nics, int n, int primary, int *order) {
  struct ranked r[LP_POOL_MAX];
  int m = 0;
  if (n > LP_POOL_MAX) n = LP_POOL_MAX;
  for (int i = 0; i < n; i++) {
    if (i == primary) continue;
    r[m].index = i;
    r[m].depth = shared_pci_depth(nics[primary].pci_path, nics[i].pci_path);
    r[m].same_numa = nics[primary].numa >= 0 && nics[i].numa == nics[primary].numa;
    m++;
  }
  qsort(r, (size_t)m, sizeof(r[0]), closer_first);
  order[0] = primary;
  for (int i = 0; i < m; i++) order[i + 1] = r[i].index;
  return m + 1;
}

/* The devices `name` (len bytes: "NIC" or "NIC:PORT") names, into out, in
 * index order, which is port order (discovery keeps a NIC's ports in order,
 * and the PCI sort is stable): NIC:PORT names that port, a bare NIC every
 * port of it.  Returns how many, or -1 with a reason that ends with
 * `where` (the name's place in the spec). */
static int resolve(const struct lp_pool_nic *nics, int n, const char *name, size_t len, const char *where, int *out,
                   char *why, size_t whylen) {
  const char *colon = memchr(name, ':', len);
  size_t nlen = colon ? (size_t)(colon - name) : len;
  int port = -1;
  if (colon) {
    size_t plen = len - nlen - 1;
    int digits = plen > 0 && plen <= 3; /* ports are 1..255 */
    port = 0;
    for (size_t i = 0; digits && i < plen; i++) {
      digits = isdigit((unsigned char)colon[1 + i]) != 0;
      port = port * 10 + (colon[1 + i] - '0');
    }
    if (!digits) {
      snprintf(why, whylen, "'%.*s'%s has a port that is not a number", (int)len, name, where);
      return -1;
    }
  }
  int k = 0, nic_known = 0;
  for (int i = 0; i < n; i++) {
    if (strlen(nics[i].name) != nlen || strncmp(nics[i].name, name, nlen) != 0) continue;
    nic_known = 1;
    if (port < 0 || (port > 0 && nics[i].port == port)) out[k++] = i;
  }
  if (!nic_known)
    snprintf(why, whylen, "unknown NIC '%.*s'%s", (int)nlen, name, where);
  else if (k == 0)
    snprintf(why, whylen, "unknown port '%.*s'%s: not an active port NCCL_IB_HCA keeps", (int)len, name, where);
  return k > 0 ? k : -1;
}

static int listed(const int *list, int m, int dev) {
  for (int k = 0; k < m; k++)
    if (list[k] == dev) return 1;
  return 0;
}

/* The pool of `head` from the names in [p, end): head first, then each
 * name's devices not listed yet.  A name that adds none is listed twice
 * (a bare NIC name may bring back the head's own port: that is a sibling
 * port's way of naming its NIC).  Returns its length, or -1 with a reason. */
static int pool_of(const struct lp_pool_nic *nics, int n, int head, const char *p, const char *end, int *list,
                   char *why, size_t whylen) {
  char where[LP_POOL_NAME_MAX + 32];
  int m = 0, named[LP_POOL_MAX];
  snprintf(where, sizeof(where), " in the pool of %s", nics[head].name);
  if (nics[head].port > 0) {
    size_t o = strlen(where);
    snprintf(where + o, sizeof(where) - o, ":%d", nics[head].port);
  }
  list[m++] = head;
  while (p < end) {
    const char *comma = memchr(p, ',', (size_t)(end - p));
    size_t len = comma ? (size_t)(comma - p) : (size_t)(end - p);
    int k = resolve(nics, n, p, len, where, named, why, whylen);
    if (k < 0) return -1;
    int added = 0;
    for (int i = 0; i < k; i++) {
      if (listed(list, m, named[i])) continue;
      list[m++] = named[i];
      added++;
    }
    if (added == 0) {
      snprintf(why, whylen, "'%.*s' listed twice%s", (int)len, p, where);
      return -1;
    }
    p = comma ? comma + 1 : end;
  }
  return m;
}

int lp_pool_parse(const char *spec, const struct lp_pool_nic *nics, int n, int primary, int *order, char *why,
                  size_t whylen) {
  int found = 0;
  if (n > LP_POOL_MAX) n = LP_POOL_MAX;
  for (const char *entry = spec; entry && *entry;) {
    const char *end = strchr(entry, ';');
    size_t elen = end ? (size_t)(end - entry) : strlen(entry);
    const char *eq = memchr(entry, '=', elen);
    /* "NIC=" is refused too: a pool of the NIC alone would never move. */
    if (!eq || eq == entry || eq + 1 == entry + elen) {
      snprintf(why, whylen, "entry '%.*s' is not NIC=NIC[,NIC...]", (int)elen, entry);
      return -1;
    }
    int heads[LP_POOL_MAX], list[LP_POOL_MAX];
    int nh = resolve(nics, n, entry, (size_t)(eq - entry), "", heads, why, whylen);
    if (nh < 0) return -1;
    /* Every head is checked, not only `primary`: a spec is valid or not
     * whichever device asks. */
    for (int h = 0; h < nh; h++) {
      int m = pool_of(nics, n, heads[h], eq + 1, entry + elen, list, why, whylen);
      if (m < 0) return -1;
      if (heads[h] == primary) {
        memcpy(order, list, sizeof(int) * (size_t)m);
        found = m;
      }
    }
    entry = end ? end + 1 : NULL;
  }
  return found;
}

int lp_pool_pick(const int *order, int n, const int *healthy, const int *load) {
  int best = -1;
  for (int i = 0; i < n; i++) {
    int nic = order[i];
    if (!healthy[nic]) continue;
    if (best < 0 || load[nic] < load[best]) best = nic;
  }
  return best;
}
