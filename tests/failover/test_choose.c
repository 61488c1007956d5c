/* Where a connection moves (health.c lp_health_choose): from its inputs
 * alone, an environment and a health table, no threads or devices. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>

#include "clock.h"
#include "fo_wire.h"
#include "health.h"

static struct lp_env env;
static struct lp_health h;

/* Four devices on four NICs: 0-2 InfiniBand, 3 RoCE; device 0's pool is
 * 0,1,2,3 and device 1's is 1,0,2,3.  Everything healthy and idle. */
static void machine(void) {
  memset(&env, 0, sizeof(env));
  memset(&h, 0, sizeof(h));
  env.ndevs = env.nnics = 4;
  for (int d = 0; d < 4; d++) {
    env.devs[d].nic = d;
    env.devs[d].port = 1;
    env.devs[d].link_layer = d == 3 ? IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
    atomic_store(&h.healthy[d], 1);
    atomic_store(&h.link_up[d], 1);
  }
  env.pool_n[0] = env.pool_n[1] = 4;
  memcpy(env.pool[0], (int[]){0, 1, 2, 3}, 4 * sizeof(int));
  memcpy(env.pool[1], (int[]){1, 0, 2, 3}, 4 * sizeof(int));
  h.env = &env;
}

static void down(int d) {
  atomic_store(&h.healthy[d], 0);
  atomic_store(&h.link_up[d], 0);
}

Test(choose, a_healthy_preference_wins, .init = machine) {
  cr_assert_eq(lp_health_choose(&h, LP_DIR_SEND, 0, 2, 0, ~0u), 2);
  down(2);
  cr_assert_eq(lp_health_choose(&h, LP_DIR_SEND, 0, 2, 0, ~0u), 1, "an unhealthy preference is ignored: pool order then");
  cr_assert_eq(lp_health_choose(&h, LP_DIR_SEND, 0, 0, 0, ~0u), 1, "the device being left is never preferred");
}

Test(choose, least_loaded_first_pool_order_on_ties, .init = machine) {
  lp_health_load_add(&h, LP_DIR_SEND, 1, 3);
  lp_health_load_add(&h, LP_DIR_SEND, 2, 1);
  cr_assert_eq(lp_health_choose(&h, LP_DIR_SEND, 0, -1, 0, ~0u), 2, "device 2 carries fewer connections than 1");
  lp_health_load_add(&h, LP_DIR_SEND, 2, 2);
  cr_assert_eq(lp_health_choose(&h, LP_DIR_SEND, 0, -1, 0, ~0u), 1, "a tie: device 0's pool order puts 1 first");
  cr_assert_eq(lp_health_choose(&h, LP_DIR_SEND, 1, -1, 1, ~0u), 0, "device 1's own pool puts 0 first");
}

Test(choose, never_another_link_layer, .init = machine) {
  down(1);
  down(2);
  /* Only the RoCE device 3 is healthy besides the one being left. */
  cr_assert_eq(lp_health_choose(&h, LP_DIR_SEND, 0, -1, 0, ~0u), 0, "the device being left, when it is all that is healthy");
  down(0);
  cr_assert_eq(lp_health_choose(&h, LP_DIR_SEND, 0, -1, 0, ~0u), -1, "RoCE cannot carry an InfiniBand connection");
}

Test(choose, held_down_port_beats_losing_the_path, .init = machine) {
  down(0);
  down(1);
  down(2);
  atomic_store(&h.link_up[2], 1); /* up again, in hold-down: not healthy */
  cr_assert_eq(lp_health_choose(&h, LP_DIR_SEND, 0, -1, 0, ~0u), 2);
  atomic_store(&h.fatal[2], 1);
  cr_assert_eq(lp_health_choose(&h, LP_DIR_SEND, 0, -1, 0, ~0u), -1, "a NIC that reported DEVICE_FATAL is never used again");
}

/* Connections leaving one NIC spread over the rest within one of each
 * other, as long as each move counts itself (the sender's offer does). */
Test(choose, a_sweep_of_moves_spreads_evenly, .init = machine) {
  down(0);
  for (int k = 0; k < 101; k++) {
    int d = lp_health_choose(&h, LP_DIR_SEND, 0, -1, 0, ~0u);
    cr_assert(d == 1 || d == 2, "move %d went to device %d", k, d);
    lp_health_load_add(&h, LP_DIR_SEND, d, 1);
  }
  int a = atomic_load(&h.load[LP_DIR_SEND][1]), b = atomic_load(&h.load[LP_DIR_SEND][2]);
  cr_assert_eq(a + b, 101);
  cr_assert_leq(abs(a - b), 1, "%d and %d connections", a, b);
}

/* Each direction is spread on its own: receive ends on a device do not
 * push send ends away from it. */
Test(choose, directions_are_spread_apart, .init = machine) {
  lp_health_load_add(&h, LP_DIR_RECV, 1, 5);
  cr_assert_eq(lp_health_choose(&h, LP_DIR_SEND, 0, -1, 0, ~0u), 1, "receive ends do not count against sends");
  cr_assert_eq(lp_health_choose(&h, LP_DIR_RECV, 0, -1, 0, ~0u), 2);
  cr_assert_eq(lp_health_connections(&h, 1), 5, "the metrics count both");
}

/* A claim counts at once: three moves leaving device 0, with no link
 * opened in between, take one device each. */
Test(choose, a_claim_counts_at_once, .init = machine) {
  env.devs[3].link_layer = IBV_LINK_LAYER_INFINIBAND;
  down(0);
  int got[3];
  for (int k = 0; k < 3; k++) got[k] = lp_health_claim(&h, LP_DIR_SEND, 0, -1, 0, ~0u);
  cr_assert(got[0] == 1 && got[1] == 2 && got[2] == 3, "claims went to %d, %d, %d", got[0], got[1], got[2]);
  for (int d = 1; d < 4; d++) cr_assert_eq(atomic_load(&h.load[LP_DIR_SEND][d]), 1);
  cr_assert_eq(lp_health_claim(&h, LP_DIR_SEND, 0, 2, 0, ~0u), 2, "a healthy preference is claimed too");
  cr_assert_eq(atomic_load(&h.load[LP_DIR_SEND][2]), 2);
}

/* NCCL's proxy thread and the idle watch move connections at the same
 * time.  Rounds of 6 claims, 3 from each of two threads, over three equally
 * loaded devices must always end 2/2/2; a choice and its count that are
 * not one atomic step let both threads take the same device now and then.
 * The threads meet on the round number, so they start within nanoseconds. */
static _Atomic int round_go, round_done;

static void claim_three(void) {
  for (int k = 0; k < 3; k++) lp_health_claim(&h, LP_DIR_SEND, 0, -1, 0, ~0u);
}

static void *claim_rounds(void *arg) {
  int rounds = *(const int *)arg;
  for (int r = 1; r <= rounds; r++) {
    while (atomic_load(&round_go) != r) sched_yield();
    claim_three();
    atomic_store(&round_done, r);
  }
  return NULL;
}

Test(choose, concurrent_claims_spread_evenly, .init = machine) {
  env.devs[3].link_layer = IBV_LINK_LAYER_INFINIBAND;
  down(0);
  int rounds = 50000, uneven = 0;
  atomic_store(&round_go, 0);
  atomic_store(&round_done, 0);
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, claim_rounds, &rounds), 0);
  for (int r = 1; r <= rounds; r++) {
    for (int d = 1; d < 4; d++) atomic_store(&h.load[LP_DIR_SEND][d], 0);
    atomic_store(&round_go, r);
    claim_three();
    while (atomic_load(&round_done) != r) sched_yield();
    for (int d = 1; d < 4; d++) uneven += atomic_load(&h.load[LP_DIR_SEND][d]) != 2;
  }
  pthread_join(t, NULL);
  cr_assert_eq(uneven, 0, "%d device-rounds of %d did not end with 2 claims each", uneven, 3 * rounds);
}

/* A device suspect of a silent fault (health.h) is taken only when no
 * trusted one will do, and is never preferred. */
Test(choose, a_suspect_device_only_as_a_last_healthy_resort, .init = machine) {
  uint64_t later = lp_now_ns() + 60ull * 1000 * 1000 * 1000;
  atomic_store(&h.suspect_until[1], later);
  cr_assert_eq(lp_health_choose(&h, LP_DIR_SEND, 0, 1, 0, ~0u), 2, "a suspect preference is ignored: pool order then");
  cr_assert(!lp_health_trusted(&h, 1, lp_now_ns()));
  cr_assert(lp_health_trusted(&h, 2, lp_now_ns()));
  down(2);
  cr_assert_eq(lp_health_choose(&h, LP_DIR_SEND, 0, -1, 0, ~0u), 1, "healthy but suspect beats the device being left");
  atomic_store(&h.suspect_until[1], lp_now_ns() - 1);
  cr_assert(lp_health_trusted(&h, 1, lp_now_ns()), "its hold-down passed");
}

/* A silent fault is queued for the control thread, which sets the
 * hold-down a moment later; the device is untrusted from the push, or a
 * receiver's ACK made in between said "trusted" and let the sender fail
 * back onto a primary the receiver then refused. */
Test(choose, a_queued_silent_fault_makes_its_device_untrusted_at_once, .init = machine) {
  cr_assert_eq(lp_ring_init(&h.ring, LP_RING_MIN_CAPACITY), 0);
  h.running = 1;
  lp_health_silent_fault(&h, 1, LP_FO_STALL, 42);
  cr_assert_eq(atomic_load(&h.suspect_until[1]), 0, "no control thread ran: no hold-down yet");
  cr_assert(!lp_health_trusted(&h, 1, lp_now_ns()), "a device with a silent fault queued was trusted");
  cr_assert(lp_health_trusted(&h, 2, lp_now_ns()));
  cr_assert_eq(lp_health_choose(&h, LP_DIR_SEND, 0, 1, 0, ~0u), 2, "a device with a fault queued is not preferred");
  /* The ring (2 slots) takes one more; a fault it refuses leaves no suspicion. */
  lp_health_silent_fault(&h, 2, LP_FO_STALL, 42);
  lp_health_silent_fault(&h, 3, LP_FO_STALL, 42);
  cr_assert(!lp_health_trusted(&h, 2, lp_now_ns()));
  cr_assert(lp_health_trusted(&h, 3, lp_now_ns()), "a fault the full ring refused left device 3 untrusted for good");
  h.running = 0;
  lp_ring_fini(&h.ring);
}

/* The preference may come from the peer (its rail): a device the pool
 * leaves out, or of another link layer, is not taken for it. */
Test(choose, a_preference_outside_the_pool_is_not_taken, .init = machine) {
  env.pool_n[0] = 3;
  memcpy(env.pool[0], (int[]){0, 2, 3}, 3 * sizeof(int)); /* LINKPASS_NIC_POOL=mlx5_0=mlx5_2,mlx5_3 */
  cr_assert_eq(lp_health_choose(&h, LP_DIR_SEND, 0, 1, 0, ~0u), 2, "device 1 is not in device 0's pool");
  cr_assert_eq(lp_health_choose(&h, LP_DIR_SEND, 0, 3, 0, ~0u), 2, "device 3 is RoCE: another link layer");
  cr_assert_eq(lp_health_choose(&h, LP_DIR_SEND, 0, 0, -1, ~0u), 0, "the primary itself is taken");
}
