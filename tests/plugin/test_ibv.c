/* Run-time loading of libibverbs. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "ibv.h"
#include "log.h"
#include "../lib/warn_capture.h"

/* A library that is not libibverbs: refused with a reason naming what is
 * missing, never a crash. */
Test(ibv, wrong_library_is_refused) {
  struct lp_ibv ibv;
  char why[512];
  cr_assert_eq(lp_ibv_load(&ibv, "libc.so.6", why, sizeof(why)), -1);
  cr_expect(strstr(why, "ibv_get_device_list") != NULL, "reason: %s", why);
  cr_expect(strstr(why, "IBVERBS_1.1") != NULL, "reason: %s", why);
  cr_expect_null(ibv.dl);
}

/* Whatever libibverbs is installed (if any) loads with versioned symbols. */
Test(ibv, default_names) {
  struct lp_ibv ibv;
  char why[512];
  if (lp_ibv_load(&ibv, NULL, why, sizeof(why)) != 0) {
    cr_expect(strstr(why, "libibverbs") != NULL, "reason: %s", why);
    return;
  }
  cr_expect_not_null(ibv.get_device_list);
  cr_expect_not_null(ibv.query_port);
  cr_expect_not_null(ibv.wc_status_str);
  cr_expect_str_eq(lp_ibv_wc_status(&ibv, IBV_WC_RETRY_EXC_ERR), "transport retry counter exceeded");
  lp_ibv_unload(&ibv);
}

/* NCCL_IBVERBS_LIB naming a library that does not load: the default one is
 * used, and a warning says so and names the variable (it fell back with an
 * INFO line only). */
Test(ibv, an_override_that_does_not_load_is_warned_about) {
  struct lp_ibv ibv;
  char why[512];
  lp_test_warned[0] = '\0';
  lp_log_set_logger(lp_test_capture_warn);
  int rc = lp_ibv_load(&ibv, "/nonexistent/libibverbs.so.1", why, sizeof(why));
  lp_log_set_logger(NULL);
  if (rc != 0) {
    cr_expect(strstr(why, "/nonexistent/libibverbs.so.1") != NULL, "reason: %s", why);
    return;
  }
  cr_expect(strstr(lp_test_warned, "NCCL_IBVERBS_LIB=/nonexistent/libibverbs.so.1") != NULL, "warning: '%s'",
            lp_test_warned);
  lp_ibv_unload(&ibv);
}
