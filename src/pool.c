/* NIC pools: closeness ordering, explicit pools, choosing a target. */
#include "pool.h"

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

static int nic_index(const struct lp_pool_nic *nics, int n, const char *name, size_t len) {
  for (int i = 0; i < n; i++)
    if (strlen(nics[i].name) == len && strncmp(nics[i].name, name, len) == 0) return i;
  return -1;
}

int lp_pool_parse(const char *spec, const struct lp_pool_nic *nics, int n, int primary, int *order, char *why,
                  size_t whylen) {
  int found = 0;
  for (const char *entry = spec; entry && *entry;) {
    const char *end = strchr(entry, ';');
    size_t elen = end ? (size_t)(end - entry) : strlen(entry);
    const char *eq = memchr(entry, '=', elen);
    if (!eq || eq == entry) {
      snprintf(why, whylen, "entry '%.*s' is not NIC=NIC[,NIC...]", (int)elen, entry);
      return -1;
    }
    int head = nic_index(nics, n, entry, (size_t)(eq - entry));
    if (head < 0) {
      snprintf(why, whylen, "unknown NIC '%.*s'", (int)(eq - entry), entry);
      return -1;
    }
    int m = 0, list[LP_POOL_MAX];
    list[m++] = head;
    for (const char *p = eq + 1; p < entry + elen;) {
      const char *comma = memchr(p, ',', (size_t)(entry + elen - p));
      size_t len = comma ? (size_t)(comma - p) : (size_t)(entry + elen - p);
      int idx = nic_index(nics, n, p, len);
      if (idx < 0) {
        snprintf(why, whylen, "unknown NIC '%.*s' in the pool of %s", (int)len, p, nics[head].name);
        return -1;
      }
      int dup = 0;
      for (int k = 0; k < m; k++) dup |= list[k] == idx;
      if (dup) {
        snprintf(why, whylen, "NIC %s listed twice in the pool of %s", nics[idx].name, nics[head].name);
        return -1;
      }
      if (m == LP_POOL_MAX) break;
      list[m++] = idx;
      p = comma ? comma + 1 : entry + elen;
    }
    if (head == primary) {
      memcpy(order, list, sizeof(int) * (size_t)m);
      found = m;
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
