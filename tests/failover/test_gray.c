/* Gray failures: one port's resend windows (gray.h), fed by hand. */
#include <criterion/criterion.h>

#include "gray.h"

#define T 2000 /* 0.2 %, LINKPASS_GRAY_RESEND_PPM's default */

Test(gray, two_windows_over_the_threshold_strike) {
  struct lp_gray g;
  lp_gray_reset(&g);
  cr_expect_eq(lp_gray_window(&g, 1, 1000000, 0, T), -1, "the first window only sets the start");
  cr_expect_eq(lp_gray_window(&g, 1, 1100000, 1000, T), 10000, "1,000 resends in 100,000 packets: 1 %");
  cr_expect(!lp_gray_struck(&g));
  cr_expect_eq(lp_gray_window(&g, 1, 1200000, 2000, T), 10000);
  cr_expect(lp_gray_struck(&g), "a second window over it");
  cr_expect_eq(lp_gray_window(&g, 1, 1300000, 2010, T), 100, "a clean window");
  cr_expect_eq(g.strikes, 0, "clears the strikes");
}

Test(gray, idle_or_unreadable_windows_say_nothing) {
  struct lp_gray g;
  lp_gray_reset(&g);
  lp_gray_window(&g, 1, 0, 0, T);
  lp_gray_window(&g, 1, 100000, 1000, T);
  cr_assert_eq(g.strikes, 1);
  cr_expect_eq(lp_gray_window(&g, 1, 101500, 1000, T), -1, "1,500 packets are too few to judge");
  cr_expect_eq(g.strikes, 1, "and leave the strikes as they were");
  cr_expect_eq(lp_gray_window(&g, 1, 102500, 1001, T), 400, "the window went on: 2,500 packets, 1 resent");
  cr_expect_eq(g.strikes, 0);
  cr_expect(!lp_gray_clearly_better(&g), "an idle port is no evidence");
  cr_expect_eq(lp_gray_window(&g, 0, 0, 0, T), -1, "unreadable counters");
  cr_expect_eq(lp_gray_window(&g, 1, 200000, 2000, T), -1, "the window after them only sets the start");
  cr_expect_eq(lp_gray_window(&g, 1, 100, 0, T), -1, "counters that went back (a reset NIC) start over");
}

Test(gray, clearly_better_means_measured_and_well_under_twice) {
  struct lp_gray g;
  lp_gray_reset(&g);
  lp_gray_window(&g, 1, 0, 0, T);
  lp_gray_window(&g, 1, 100000, 0, T);
  cr_expect(!lp_gray_clearly_better(&g), "one clean window could be luck");
  lp_gray_window(&g, 1, 200000, 40, T);
  cr_expect(lp_gray_clearly_better(&g), "two in a row, the second at 400 ppm: under a quarter of 2,000");
  lp_gray_window(&g, 1, 300000, 100, T);
  cr_expect(!lp_gray_clearly_better(&g), "600 ppm: over a quarter, even if under the threshold");
  lp_gray_window(&g, 1, 400000, 100, T);
  lp_gray_window(&g, 1, 500000, 100, T);
  cr_expect(lp_gray_clearly_better(&g), "two clean windows again");
  for (int i = 1; i < LP_GRAY_QUIET_WINDOWS; i++) lp_gray_window(&g, 1, 500500, 100, T);
  cr_expect(lp_gray_clearly_better(&g), "a few quiet ticks: the window is still open");
  lp_gray_window(&g, 1, 500500, 100, T);
  cr_expect(!lp_gray_clearly_better(&g), "quiet for 2 s: no longer evidence of now");
}

Test(gray, every_resend_at_most_one_million_ppm) {
  struct lp_gray g;
  lp_gray_reset(&g);
  lp_gray_window(&g, 1, 0, 0, T);
  cr_expect_eq(lp_gray_window(&g, 1, 2000, 5000, T), 1000000);
}
