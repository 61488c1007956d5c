/* The watchdog unit (watchdog.h): stalls, idle time, back-off. */
#include <criterion/criterion.h>

#include "watchdog.h"

#define MS 1000000ull

Test(watchdog, off_never_stalls) {
  struct lp_watchdog w;
  lp_watchdog_init(&w, 0, 0);
  cr_assert(!lp_watchdog_on(&w));
  cr_assert_eq(lp_watchdog_check(&w, 3600000 * MS, 1), LP_WATCHDOG_OK);
}

Test(watchdog, stalls_only_with_work_outstanding_past_the_limit) {
  struct lp_watchdog w;
  lp_watchdog_init(&w, 50 * MS, 0);
  cr_assert_eq(lp_watchdog_check(&w, 40 * MS, 1), LP_WATCHDOG_OK);
  cr_assert_eq(lp_watchdog_check(&w, 1000 * MS, 0), LP_WATCHDOG_OK, "nothing outstanding: idle, no stall");
  lp_watchdog_armed(&w); /* the first signaled WR after the idle spell */
  cr_assert_eq(lp_watchdog_check(&w, 1040 * MS, 1), LP_WATCHDOG_OK, "the idle second before does not count");
  lp_watchdog_fed(&w, 1040 * MS);
  cr_assert_eq(lp_watchdog_check(&w, 1080 * MS, 1), LP_WATCHDOG_OK, "a completion restarts the wait");
  cr_assert_eq(lp_watchdog_check(&w, 1091 * MS, 1), LP_WATCHDOG_STALL);
}

Test(watchdog, armed_work_is_timed_from_the_next_check) {
  struct lp_watchdog w;
  lp_watchdog_init(&w, 50 * MS, 0);
  lp_watchdog_armed(&w); /* posted long after the last completion (at 0) */
  cr_assert_eq(lp_watchdog_check(&w, 5000 * MS, 1), LP_WATCHDOG_OK, "the idle spell before the post is no stall");
  cr_assert_eq(lp_watchdog_check(&w, 5049 * MS, 1), LP_WATCHDOG_OK);
  cr_assert_eq(lp_watchdog_check(&w, 5051 * MS, 1), LP_WATCHDOG_STALL, "timed from the first check after the post");
}

Test(watchdog, stalls_in_a_row_double_the_limit_up_to_the_cap) {
  struct lp_watchdog w;
  lp_watchdog_init(&w, 10 * MS, 0);
  uint64_t now = 0;
  cr_assert_eq(lp_watchdog_check(&w, now += 11 * MS, 1), LP_WATCHDOG_STALL, "the first stall moves at the limit");
  int scale = 1;
  for (int i = 0; i < 6; i++) {
    now += lp_watchdog_limit(&w) + 1 * MS; /* stalled again right after the move */
    enum lp_watchdog_verdict v = lp_watchdog_check(&w, now, 1);
    if (scale < LP_WATCHDOG_BACKOFF_MAX) {
      cr_assert_eq(v, LP_WATCHDOG_STALL_AGAIN, "stall %d", i);
      scale *= 2;
    } else {
      cr_assert_eq(v, LP_WATCHDOG_STALL, "at the cap it still moves, at the capped limit");
    }
    cr_assert_eq(w.scale, scale);
  }
  cr_assert_eq(lp_watchdog_limit(&w), LP_WATCHDOG_BACKOFF_MAX * 10 * MS);
  /* A quiet spell of ten limits: the fabric is well again. */
  now += 11 * lp_watchdog_limit(&w);
  cr_assert_eq(lp_watchdog_check(&w, now, 0), LP_WATCHDOG_OK);
  cr_assert_eq(w.scale, 1);
}
