/* Run-time loading of libibverbs with versioned symbols. */
#include "ibv.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "log.h"

struct sym {
  const char *name;
  const char *version;
  size_t off;
  int optional;
};

#define REQ(field, sym) \
  { sym, "IBVERBS_1.1", offsetof(struct lp_ibv, field), 0 }
#define OPT(field, sym, ver) \
  { sym, ver, offsetof(struct lp_ibv, field), 1 }

static const struct sym syms[] = {
    REQ(get_device_list, "ibv_get_device_list"),
    REQ(free_device_list, "ibv_free_device_list"),
    REQ(get_device_name, "ibv_get_device_name"),
    REQ(open_device, "ibv_open_device"),
    REQ(close_device, "ibv_close_device"),
    REQ(query_device, "ibv_query_device"),
    REQ(query_port, "ibv_query_port"),
    REQ(query_gid, "ibv_query_gid"),
    REQ(alloc_pd, "ibv_alloc_pd"),
    REQ(dealloc_pd, "ibv_dealloc_pd"),
    REQ(reg_mr, "ibv_reg_mr"),
    REQ(dereg_mr, "ibv_dereg_mr"),
    REQ(create_cq, "ibv_create_cq"),
    REQ(destroy_cq, "ibv_destroy_cq"),
    REQ(create_qp, "ibv_create_qp"),
    REQ(modify_qp, "ibv_modify_qp"),
    REQ(destroy_qp, "ibv_destroy_qp"),
    REQ(get_async_event, "ibv_get_async_event"),
    REQ(ack_async_event, "ibv_ack_async_event"),
    REQ(wc_status_str, "ibv_wc_status_str"),
    REQ(event_type_str, "ibv_event_type_str"),
    OPT(reg_mr_iova2, "ibv_reg_mr_iova2", "IBVERBS_1.8"),
    OPT(reg_dmabuf_mr, "ibv_reg_dmabuf_mr", "IBVERBS_1.12"),
    OPT(query_gid_ex, "_ibv_query_gid_ex", "IBVERBS_1.11"),
    OPT(query_ece, "ibv_query_ece", "IBVERBS_1.10"),
    OPT(set_ece, "ibv_set_ece", "IBVERBS_1.10"),
};

int lp_ibv_load(struct lp_ibv *ibv, const char *override, char *why, size_t whylen) {
  memset(ibv, 0, sizeof(*ibv));
  const char *names[3];
  int nnames = 0;
  if (override != NULL && *override != '\0') names[nnames++] = override;
  names[nnames++] = "libibverbs.so";
  names[nnames++] = "libibverbs.so.1";

  char errs[512] = "";
  size_t used = 0;
  for (int i = 0; i < nnames && ibv->dl == NULL; i++) {
    ibv->dl = dlopen(names[i], RTLD_NOW);
    if (ibv->dl != NULL) {
      snprintf(ibv->path, sizeof(ibv->path), "%s", names[i]);
    } else if (used < sizeof(errs)) {
      const char *e = dlerror();
      used += (size_t)snprintf(errs + used, sizeof(errs) - used, "%s%s", used ? "; " : "", e ? e : names[i]);
    }
  }
  if (ibv->dl == NULL) {
    snprintf(why, whylen, "cannot load libibverbs (%s); is rdma-core installed?", errs);
    return -1;
  }
  if (nnames == 3 && strcmp(ibv->path, override) != 0)
    LP_WARN("NCCL_IBVERBS_LIB=%s cannot be loaded (%s); using %s instead: fix or unset the variable", override, errs,
            ibv->path);
  for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
    void *p = dlvsym(ibv->dl, syms[i].name, syms[i].version);
    if (p == NULL && !syms[i].optional) {
      snprintf(why, whylen, "%s has no %s@%s (library too old or not rdma-core's)", ibv->path, syms[i].name,
               syms[i].version);
      lp_ibv_unload(ibv);
      return -1;
    }
    /* Function pointers and void* have the same representation on every
     * platform dlsym works on; memcpy keeps -Wpedantic quiet. */
    memcpy((char *)ibv + syms[i].off, &p, sizeof(p));
  }
  return 0;
}

void lp_ibv_unload(struct lp_ibv *ibv) {
  if (ibv->dl) dlclose(ibv->dl);
  memset(ibv, 0, sizeof(*ibv));
}

const char *lp_ibv_wc_status(const struct lp_ibv *ibv, enum ibv_wc_status status) {
  const char *s = ibv->wc_status_str ? ibv->wc_status_str(status) : NULL;
  return s ? s : "unknown";
}
