/*
 * dlvsym_check <path/to/libibverbs.so.1>
 *
 * Loads the library the way NCCL-style loaders do (dlopen + dlvsym with an
 * explicit version) and checks that the versioned entry points they and the
 * provider libraries ask for resolve, that the IBVERBS_1.0 compat entry point
 * is a distinct function that fails cleanly, and that a string helper gives
 * rdma-core's exact text.  Prints every failure; exits 1 if any.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <infiniband/verbs.h>

static int failures;

static void fail(const char *what, const char *why) {
  printf("FAIL: %s: %s\n", what, why);
  failures++;
}

static void *need_vsym(void *h, const char *name, const char *version) {
  char what[128];
  snprintf(what, sizeof(what), "dlvsym %s@%s", name, version);
  dlerror();
  void *p = dlvsym(h, name, version);
  if (!p) {
    const char *err = dlerror();
    fail(what, err ? err : "resolved to NULL");
    return NULL;
  }
  printf("ok: %s\n", what);
  return p;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s <path/to/libibverbs.so.1>\n", argv[0]);
    return 2;
  }
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    printf("FAIL: dlopen %s: %s\n", argv[1], dlerror());
    return 1;
  }

  /* What NCCL's and perftest's loaders and the providers ask for. */
  void *list11 = need_vsym(h, "ibv_get_device_list", "IBVERBS_1.1");
  need_vsym(h, "ibv_reg_mr_iova2", "IBVERBS_1.8");
  need_vsym(h, "ibv_query_ece", "IBVERBS_1.10");
  need_vsym(h, "verbs_register_driver_34", "IBVERBS_PRIVATE_34");
  need_vsym(h, "ibv_query_port", "IBVERBS_1.1");
  need_vsym(h, "verbs_allow_disassociate_destroy", "IBVERBS_PRIVATE_34");
  need_vsym(h, "ibv_register_driver", "IBVERBS_1.1");

  /* The 1.0 entry point takes the old struct layouts: it must be its own
   * function, and refuse rather than hand out a list in the new layout. */
  void *list10 = need_vsym(h, "ibv_get_device_list", "IBVERBS_1.0");
  if (list10) {
    if (list10 == list11)
      fail("ibv_get_device_list@IBVERBS_1.0", "same address as the IBVERBS_1.1 default");
    void *(*get_list10)(int *);
    memcpy(&get_list10, &list10, sizeof(get_list10));
    int num = -1;
    errno = 0;
    void *ret = get_list10(&num);
    int err = errno;
    if (ret != NULL) {
      fail("ibv_get_device_list@IBVERBS_1.0()", "returned non-NULL");
    } else if (err != EOPNOTSUPP) {
      char why[96];
      snprintf(why, sizeof(why), "errno %d (%s), want EOPNOTSUPP", err, strerror(err));
      fail("ibv_get_device_list@IBVERBS_1.0()", why);
    } else {
      printf("ok: ibv_get_device_list@IBVERBS_1.0() = NULL, errno EOPNOTSUPP\n");
    }
  }

  /* Plain dlsym must pick the default version. */
  dlerror();
  void *str_sym = dlsym(h, "ibv_wc_status_str");
  if (!str_sym) {
    const char *e = dlerror();
    fail("dlsym ibv_wc_status_str", e ? e : "resolved to NULL");
  } else {
    const char *(*wc_status_str)(enum ibv_wc_status);
    memcpy(&wc_status_str, &str_sym, sizeof(wc_status_str));
    const char *want = "transport retry counter exceeded";
    const char *got = wc_status_str(IBV_WC_RETRY_EXC_ERR);
    if (!got || strcmp(got, want) != 0) {
      char why[160];
      snprintf(why, sizeof(why), "got \"%s\", want \"%s\"", got ? got : "(null)", want);
      fail("ibv_wc_status_str(IBV_WC_RETRY_EXC_ERR)", why);
    } else {
      printf("ok: ibv_wc_status_str(IBV_WC_RETRY_EXC_ERR) = \"%s\"\n", got);
    }
  }

  dlclose(h);
  if (failures) {
    printf("%d check(s) failed\n", failures);
    return 1;
  }
  printf("all checks passed\n");
  return 0;
}
