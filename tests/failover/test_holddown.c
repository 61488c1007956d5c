/* Failback hold-down and flap damping. */
#include <criterion/criterion.h>

#include "holddown.h"

#define S 1000000000ull

Test(holddown, stable_port_is_ready_after_base_hold) {
  struct lp_holddown h;
  lp_holddown_init(&h, 2 * S, 60 * S, 0);
  cr_assert(lp_holddown_ready(&h, 0), "a port that never failed is usable");
  cr_assert_eq(lp_holddown_down(&h, 100 * S), 1);
  cr_assert_not(lp_holddown_ready(&h, 101 * S), "down");
  lp_holddown_up(&h, 101 * S);
  cr_assert_not(lp_holddown_ready(&h, 102 * S));
  cr_assert_eq(lp_holddown_ready_at(&h), 103 * S);
  cr_assert(lp_holddown_ready(&h, 103 * S));
}

Test(holddown, each_quick_flap_doubles_the_hold_up_to_the_cap) {
  struct lp_holddown h;
  lp_holddown_init(&h, 2 * S, 30 * S, 0);
  uint64_t t = 1000 * S, expect[] = {2, 4, 8, 16, 30, 30, 30};
  for (int i = 0; i < 7; i++) {
    cr_assert_eq(lp_holddown_down(&h, t), (unsigned)i + 1);
    lp_holddown_up(&h, t + S);
    cr_assert_eq(lp_holddown_ready_at(&h) - (t + S), expect[i] * S, "flap %d", i + 1);
    t += 3 * S; /* goes down again long before the cap has passed */
  }
}

/* A base of 0 fails back at once after one flap; what flaps again is
 * still damped, from LP_HOLDDOWN_SEED_NS (it stayed 0 for good). */
Test(holddown, a_base_of_zero_still_damps_repeated_flaps) {
  struct lp_holddown h;
  lp_holddown_init(&h, 0, 4 * S, 0);
  uint64_t t = 1000 * S, ms = S / 1000, expect[] = {0, 250, 500, 1000, 2000, 4000, 4000};
  for (int i = 0; i < 7; i++) {
    lp_holddown_down(&h, t);
    lp_holddown_up(&h, t + ms);
    cr_assert_eq(lp_holddown_ready_at(&h) - (t + ms), expect[i] * ms, "flap %d", i + 1);
    t += 100 * ms;
  }
  lp_holddown_init(&h, 0, 0, 0);
  lp_holddown_down(&h, t);
  lp_holddown_down(&h, t + 10 * ms);
  lp_holddown_up(&h, t + 20 * ms);
  lp_holddown_down(&h, t + 30 * ms);
  lp_holddown_up(&h, t + 40 * ms);
  cr_assert_eq(lp_holddown_ready_at(&h), t + 40 * ms, "a maximum of 0 too: no hold-down, as asked");
}

/* A port that fails again soon after each failback stays at the cap:
 * the hold-down itself is no stable time (it went back to the base once
 * the hold-down alone lasted the capped period). */
Test(holddown, a_port_that_fails_soon_after_each_failback_stays_at_the_cap) {
  struct lp_holddown h;
  lp_holddown_init(&h, 2 * S, 16 * S, 0);
  uint64_t t = 1000 * S, expect[] = {2, 4, 8, 16, 16, 16, 16};
  for (int i = 0; i < 7; i++) {
    lp_holddown_down(&h, t);
    lp_holddown_up(&h, t + S / 10);
    uint64_t usable = lp_holddown_ready_at(&h);
    cr_assert_eq(usable - (t + S / 10), expect[i] * S, "flap %d", i + 1);
    t = usable + S; /* fails 1 s after each failback */
  }
}

Test(holddown, never_gives_up_and_forgives_after_a_stable_period) {
  struct lp_holddown h;
  lp_holddown_init(&h, 1 * S, 16 * S, 0);
  uint64_t t = 100 * S;
  for (int i = 0; i < 50; i++) { /* a flap storm */
    lp_holddown_down(&h, t);
    lp_holddown_up(&h, t + S / 10);
    t += S;
  }
  cr_assert(lp_holddown_ready(&h, t + 16 * S), "even after 50 flaps it comes back");
  lp_holddown_down(&h, t + 40 * S); /* stable for longer than the cap first */
  lp_holddown_up(&h, t + 41 * S);
  cr_assert_eq(lp_holddown_ready_at(&h), t + 42 * S, "back to the base hold-down");
}

Test(holddown, repeated_events_are_idempotent) {
  struct lp_holddown h;
  lp_holddown_init(&h, S, 8 * S, 0);
  lp_holddown_down(&h, 10 * S);
  cr_assert_eq(lp_holddown_down(&h, 11 * S), 1, "a second down event is the same flap");
  lp_holddown_up(&h, 12 * S);
  lp_holddown_up(&h, 12 * S + S / 2);
  cr_assert_eq(lp_holddown_ready_at(&h), 13 * S, "a second up event does not restart the clock");
}
