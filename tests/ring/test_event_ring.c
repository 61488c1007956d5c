/*
 * Unit tests of the event ring (src/event_ring.c).  Threads synchronise with
 * barriers and atomics only; every test has a Criterion timeout, and every
 * wait on the ring has its own bound, so a broken ring fails instead of
 * hanging.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "event_ring.h"

static struct lp_event ev_of(uint32_t producer, uint64_t n) {
  struct lp_event e = {
      .type = LP_EV_PORT_DOWN,
      .dev = producer,
      .port = (uint32_t)(n % 3) + 1,
      .status = -(int32_t)(n % 1000),
      .comm_id = (uint64_t)producer * 0x9e3779b97f4a7c15ull ^ n,
      .arg = n,
      .time_ns = n * 7 + producer,
  };
  return e;
}

/* Every field as ev_of() made it: a torn or mixed-up event fails. */
static void assert_ev(const struct lp_event *e, uint32_t producer, uint64_t n) {
  struct lp_event want = ev_of(producer, n);
  cr_assert_eq(e->dev, producer, "event from producer %u, expected %u", e->dev, producer);
  cr_assert_eq(e->arg, n, "producer %u: event #%llu, expected #%llu", producer, (unsigned long long)e->arg,
               (unsigned long long)n);
  cr_assert(memcmp(e, &want, sizeof(want)) == 0, "producer %u event #%llu: fields corrupted", producer,
            (unsigned long long)n);
}

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* No Criterion .timeout here or in any suite: each one is a timer request
 * in Criterion 2.4.1's runner (BoxFort), which now and then is never freed
 * (48 bytes), and LeakSanitizer fails the ASan run on it.  ctest's TIMEOUT
 * bounds the binary instead (CMakeLists.txt). */

Test(ring, init_rejects_bad_capacities) {
  struct lp_event_ring r;
  const uint32_t bad[] = {0, 1, 3, 6, 1000, 1023, LP_RING_MAX_CAPACITY + 1, LP_RING_MAX_CAPACITY * 2u, 0xffffffffu};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    int rc = lp_ring_init(&r, bad[i]);
    cr_assert_eq(rc, -EINVAL, "capacity %u: got %d (%s), expected -EINVAL", bad[i], rc, strerror(-rc));
    lp_ring_fini(&r); /* harmless after a failed init */
  }
  const uint32_t good[] = {LP_RING_MIN_CAPACITY, 4, 1024};
  for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
    cr_assert_eq(lp_ring_init(&r, good[i]), 0, "capacity %u refused", good[i]);
    cr_assert_eq(lp_ring_capacity(&r), good[i]);
    lp_ring_fini(&r);
    lp_ring_fini(&r); /* twice is harmless */
  }
}

Test(ring, pop_on_empty_returns_false) {
  struct lp_event_ring r;
  cr_assert_eq(lp_ring_init(&r, 4), 0);
  struct lp_event out;
  memset(&out, 0xab, sizeof(out));
  struct lp_event untouched = out;
  cr_assert_not(lp_ring_pop(&r, &out), "pop on a fresh ring");
  cr_assert(memcmp(&out, &untouched, sizeof(out)) == 0, "a failed pop wrote to *out");
  /* Empty again after some laps. */
  for (uint64_t i = 0; i < 10; i++) {
    struct lp_event e = ev_of(0, i);
    cr_assert(lp_ring_push(&r, &e));
    cr_assert(lp_ring_pop(&r, &out));
    assert_ev(&out, 0, i);
    cr_assert_not(lp_ring_pop(&r, &out), "pop after draining, lap %llu", (unsigned long long)i);
  }
  cr_assert_eq(lp_ring_overflows(&r), 0);
  lp_ring_fini(&r);
}

Test(ring, fifo_one_producer) {
  struct lp_event_ring r;
  cr_assert_eq(lp_ring_init(&r, 8), 0);
  struct lp_event out;
  /* Fill completely, drain completely. */
  for (uint64_t i = 0; i < 8; i++) {
    struct lp_event e = ev_of(3, i);
    cr_assert(lp_ring_push(&r, &e), "push %llu of 8 into an 8-slot ring", (unsigned long long)i);
  }
  for (uint64_t i = 0; i < 8; i++) {
    cr_assert(lp_ring_pop(&r, &out));
    assert_ev(&out, 3, i);
  }
  cr_assert_not(lp_ring_pop(&r, &out));
  /* Then many laps with the fill level varying from 1 to 8. */
  uint64_t pushed = 8, popped = 8;
  for (int round = 0; round < 2000; round++) {
    int burst = 1 + round % 8;
    for (int k = 0; k < burst; k++) {
      struct lp_event e = ev_of(3, pushed);
      cr_assert(lp_ring_push(&r, &e));
      pushed++;
    }
    for (int k = 0; k < burst; k++) {
      cr_assert(lp_ring_pop(&r, &out));
      assert_ev(&out, 3, popped);
      popped++;
    }
  }
  cr_assert_not(lp_ring_pop(&r, &out));
  cr_assert_eq(lp_ring_overflows(&r), 0);
  lp_ring_fini(&r);
}

Test(ring, overflow_counted_exactly_one_thread) {
  struct lp_event_ring r;
  cr_assert_eq(lp_ring_init(&r, 16), 0);
  for (uint64_t i = 0; i < 16; i++) {
    struct lp_event e = ev_of(0, i);
    cr_assert(lp_ring_push(&r, &e));
  }
  for (uint64_t i = 0; i < 5; i++) {
    struct lp_event e = ev_of(0, 100 + i);
    cr_assert_not(lp_ring_push(&r, &e), "push into a full ring succeeded");
    cr_assert_eq(lp_ring_overflows(&r), i + 1);
  }
  /* The refused events left no trace; one pop makes room for one push. */
  struct lp_event out;
  cr_assert(lp_ring_pop(&r, &out));
  assert_ev(&out, 0, 0);
  struct lp_event e = ev_of(0, 16);
  cr_assert(lp_ring_push(&r, &e));
  cr_assert_not(lp_ring_push(&r, &e));
  cr_assert_eq(lp_ring_overflows(&r), 6);
  for (uint64_t i = 1; i <= 16; i++) {
    cr_assert(lp_ring_pop(&r, &out));
    assert_ev(&out, 0, i);
  }
  cr_assert_not(lp_ring_pop(&r, &out));
  lp_ring_fini(&r);
}

/* A try-push into a full ring is refused without being counted: a wake-up
 * or a retried STOP loses no event, and the overflow counter (a metric that
 * alerts) counted every retry of the STOP at exit. */
Test(ring, a_try_push_refused_is_not_an_overflow) {
  struct lp_event_ring r;
  cr_assert_eq(lp_ring_init(&r, 16), 0);
  for (uint64_t i = 0; i < 16; i++) {
    struct lp_event e = ev_of(0, i);
    cr_assert(lp_ring_try_push(&r, &e));
  }
  struct lp_event e = ev_of(0, 99);
  cr_assert_not(lp_ring_try_push(&r, &e), "try-push into a full ring succeeded");
  cr_assert_eq(lp_ring_overflows(&r), 0, "a refused try-push counted as lost");
  cr_assert_not(lp_ring_push(&r, &e));
  cr_assert_eq(lp_ring_overflows(&r), 1);
  struct lp_event out;
  cr_assert(lp_ring_pop(&r, &out));
  cr_assert(lp_ring_try_push(&r, &e), "room again");
  lp_ring_fini(&r);
}

/* A producer preempted between claiming a slot and publishing it: emulated by
 * claiming position 0 by hand (white box: the slot protocol of event_ring.c).
 * The consumer must neither read the half-written slot nor skip past it. */
Test(ring, unpublished_slot_is_never_read_nor_skipped) {
  struct lp_event_ring r;
  cr_assert_eq(lp_ring_init(&r, 4), 0);
  uint64_t pos = atomic_fetch_add(&r.tail, 1); /* the "slow producer" claims position 0 */
  cr_assert_eq(pos, 0);
  memset(&r.slots[0].ev, 0xee, sizeof(r.slots[0].ev)); /* half written */
  struct lp_event e1 = ev_of(1, 1);
  cr_assert(lp_ring_push(&r, &e1)); /* position 1, published */
  struct lp_event out;
  cr_assert_not(lp_ring_pop(&r, &out), "consumer read an unpublished slot or skipped it");
  cr_assert_eq(lp_ring_wait(&r, 0), 0, "wait(0) reports an unpublished slot as ready");
  /* The ring is full for other producers until the consumer gets past. */
  struct lp_event e = ev_of(1, 2);
  cr_assert(lp_ring_push(&r, &e));
  e = ev_of(1, 3);
  cr_assert(lp_ring_push(&r, &e));
  cr_assert_not(lp_ring_push(&r, &e), "a producer claimed the slow producer's slot");
  cr_assert_eq(lp_ring_overflows(&r), 1);
  /* The slow producer finishes. */
  r.slots[0].ev = ev_of(0, 0);
  atomic_store_explicit(&r.slots[0].seq, pos + 1, memory_order_release);
  cr_assert_eq(lp_ring_wait(&r, 0), 1);
  cr_assert(lp_ring_pop(&r, &out));
  assert_ev(&out, 0, 0);
  for (uint64_t i = 1; i <= 3; i++) {
    cr_assert(lp_ring_pop(&r, &out));
    assert_ev(&out, 1, i);
  }
  cr_assert_not(lp_ring_pop(&r, &out));
  lp_ring_fini(&r);
}

/* ---- many producers ---- */

struct mp {
  struct lp_event_ring ring;
  pthread_barrier_t start;
  uint32_t nproducers;
  uint64_t per_producer;
  bool retry;                /* retry a refused push (else drop it) */
  _Atomic uint64_t refused;  /* refused pushes, all producers */
  _Atomic uint64_t accepted; /* accepted pushes, all producers */
  _Atomic uint32_t finished; /* producers done */
};

struct producer_arg {
  struct mp *mp;
  uint32_t id;
  uint64_t *accepted_ids; /* retry == false: which of its events got in */
};

static void *producer(void *p) {
  struct producer_arg *a = p;
  struct mp *mp = a->mp;
  uint64_t refused = 0, accepted = 0;
  pthread_barrier_wait(&mp->start);
  for (uint64_t n = 0; n < mp->per_producer; n++) {
    struct lp_event e = ev_of(a->id, n);
    bool in;
    while (!(in = lp_ring_push(&mp->ring, &e))) {
      refused++;
      if (!mp->retry) break;
      sched_yield(); /* let the consumer run on a small machine */
    }
    if (!in) continue; /* dropped */
    if (a->accepted_ids) a->accepted_ids[accepted] = n;
    accepted++;
  }
  atomic_fetch_add(&mp->refused, refused);
  atomic_fetch_add(&mp->accepted, accepted);
  atomic_fetch_add_explicit(&mp->finished, 1, memory_order_release);
  return NULL;
}

static void mp_start(struct mp *mp, pthread_t *threads, struct producer_arg *args) {
  for (uint32_t i = 0; i < mp->nproducers; i++) {
    args[i].mp = mp;
    args[i].id = i;
    cr_assert_eq(pthread_create(&threads[i], NULL, producer, &args[i]), 0);
  }
}

Test(ring, exactly_once_with_many_producers) {
  enum { P = 6, M = 50000 };
  struct mp mp = {.nproducers = P, .per_producer = M, .retry = true};
  cr_assert_eq(lp_ring_init(&mp.ring, 64), 0);
  pthread_barrier_init(&mp.start, NULL, P + 1);
  pthread_t threads[P];
  struct producer_arg args[P] = {0};
  mp_start(&mp, threads, args);

  uint64_t next[P] = {0};
  uint64_t total = 0, waits = 0;
  pthread_barrier_wait(&mp.start);
  while (total < (uint64_t)P * M) {
    struct lp_event e;
    if (!lp_ring_pop(&mp.ring, &e)) {
      /* Bounded: a lost wake-up fails the test instead of hanging it. */
      int rc = lp_ring_wait(&mp.ring, 10000);
      cr_assert_eq(rc, 1, "wait returned %d after %llu of %d events", rc, (unsigned long long)total, P * M);
      waits++;
      continue;
    }
    cr_assert_lt(e.dev, P, "event from unknown producer %u", e.dev);
    assert_ev(&e, e.dev, next[e.dev]); /* per-producer order: no loss, duplicate or reordering */
    next[e.dev]++;
    total++;
  }
  for (uint32_t i = 0; i < P; i++) pthread_join(threads[i], NULL);
  struct lp_event e;
  cr_assert_not(lp_ring_pop(&mp.ring, &e), "an extra event after all were delivered");
  for (uint32_t i = 0; i < P; i++) cr_assert_eq(next[i], M, "producer %u: %llu events delivered", i, (unsigned long long)next[i]);
  /* Every refusal was counted, and only those. */
  cr_assert_eq(lp_ring_overflows(&mp.ring), atomic_load(&mp.refused));
  cr_log_info("%d producers x %d events: %llu refused and retried, consumer waited %llu times", P, M,
              (unsigned long long)atomic_load(&mp.refused), (unsigned long long)waits);
  pthread_barrier_destroy(&mp.start);
  lp_ring_fini(&mp.ring);
}

Test(ring, overflow_counted_exactly_with_consumer_stopped) {
  enum { P = 4, M = 3000, CAP = 256 };
  struct mp mp = {.nproducers = P, .per_producer = M, .retry = false};
  cr_assert_eq(lp_ring_init(&mp.ring, CAP), 0);
  pthread_barrier_init(&mp.start, NULL, P + 1);
  pthread_t threads[P];
  struct producer_arg args[P] = {0};
  for (uint32_t i = 0; i < P; i++) args[i].accepted_ids = calloc(M, sizeof(uint64_t));
  mp_start(&mp, threads, args);
  pthread_barrier_wait(&mp.start);
  for (uint32_t i = 0; i < P; i++) pthread_join(threads[i], NULL);

  /* The consumer never ran: exactly CAP pushes got in, all others counted. */
  cr_assert_eq(atomic_load(&mp.accepted), CAP);
  cr_assert_eq(atomic_load(&mp.refused), (uint64_t)P * M - CAP);
  cr_assert_eq(lp_ring_overflows(&mp.ring), (uint64_t)P * M - CAP);

  /* The ring holds exactly the accepted events, each once, each producer's
   * in its order. */
  uint64_t seen[P] = {0};
  struct lp_event e;
  for (int i = 0; i < CAP; i++) {
    cr_assert(lp_ring_pop(&mp.ring, &e), "only %d events in a full ring", i);
    cr_assert_lt(e.dev, P);
    assert_ev(&e, e.dev, args[e.dev].accepted_ids[seen[e.dev]]);
    seen[e.dev]++;
  }
  cr_assert_not(lp_ring_pop(&mp.ring, &e));
  /* And the ring works normally afterwards. */
  e = ev_of(9, 9);
  cr_assert(lp_ring_push(&mp.ring, &e));
  cr_assert(lp_ring_pop(&mp.ring, &e));
  assert_ev(&e, 9, 9);
  cr_assert_eq(lp_ring_overflows(&mp.ring), (uint64_t)P * M - CAP);
  for (uint32_t i = 0; i < P; i++) free(args[i].accepted_ids);
  pthread_barrier_destroy(&mp.start);
  lp_ring_fini(&mp.ring);
}

/* ---- wake-up ---- */

Test(ring, wait_times_out_on_an_empty_ring) {
  struct lp_event_ring r;
  cr_assert_eq(lp_ring_init(&r, 4), 0);
  cr_assert_eq(lp_ring_wait(&r, 0), 0);
  int64_t t0 = mono_ms();
  cr_assert_eq(lp_ring_wait(&r, 100), 0);
  int64_t dt = mono_ms() - t0;
  cr_assert_geq(dt, 99, "wait(100) returned after %lld ms", (long long)dt);
  cr_assert_lt(dt, 5000, "wait(100) returned after %lld ms", (long long)dt);
  /* Ready at once when an event is there. */
  struct lp_event e = ev_of(0, 0);
  cr_assert(lp_ring_push(&r, &e));
  cr_assert_eq(lp_ring_wait(&r, 0), 1);
  cr_assert_eq(lp_ring_wait(&r, -1), 1);
  cr_assert(lp_ring_pop(&r, &e));
  cr_assert_eq(lp_ring_wait(&r, 0), 0);
  lp_ring_fini(&r);
}

struct sleeper {
  struct lp_event_ring *ring;
  int timeout_ms;
  int rc;
  int64_t waited_ms;
};

static void *sleeper(void *p) {
  struct sleeper *s = p;
  int64_t t0 = mono_ms();
  s->rc = lp_ring_wait(s->ring, s->timeout_ms);
  s->waited_ms = mono_ms() - t0;
  return NULL;
}

Test(ring, push_wakes_a_sleeping_consumer) {
  struct lp_event_ring r;
  cr_assert_eq(lp_ring_init(&r, 4), 0);
  struct sleeper s = {.ring = &r, .timeout_ms = 8000};
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, sleeper, &s), 0);
  /* White box: wait until the consumer has announced that it sleeps. */
  int64_t t0 = mono_ms();
  while (!atomic_load(&r.sleeping)) {
    cr_assert_lt(mono_ms() - t0, 5000, "consumer never announced its sleep");
    sched_yield();
  }
  struct lp_event e = ev_of(2, 5);
  cr_assert(lp_ring_push(&r, &e));
  pthread_join(t, NULL);
  cr_assert_eq(s.rc, 1, "consumer not woken: wait returned %d after %lld ms", s.rc, (long long)s.waited_ms);
  cr_assert_lt(s.waited_ms, 4000, "consumer woken only after %lld ms", (long long)s.waited_ms);
  cr_assert(lp_ring_pop(&r, &e));
  assert_ev(&e, 2, 5);
  lp_ring_fini(&r);
}

/* Ping-pong many times, so that the consumer goes to sleep at every point of
 * the producer's push: any lost wake-up shows as a 3 s timeout. */
struct pingpong {
  struct lp_event_ring ring;
  _Atomic uint64_t acked; /* events the consumer has taken */
  uint64_t rounds;
  _Atomic int failures;
};

static void *pingpong_consumer(void *p) {
  struct pingpong *pp = p;
  for (uint64_t i = 0; i < pp->rounds; i++) {
    struct lp_event e;
    while (!lp_ring_pop(&pp->ring, &e)) {
      /* The producer pushes as soon as it sees the previous ack: a wait that
       * runs into its timeout lost a wake-up, even if it then returns 1. */
      int64_t t0 = mono_ms();
      int rc = lp_ring_wait(&pp->ring, 3000);
      if (rc != 1 || mono_ms() - t0 >= 3000) {
        pp->failures++;
        return NULL;
      }
    }
    if (e.arg != i) {
      pp->failures++;
      return NULL;
    }
    atomic_store_explicit(&pp->acked, i + 1, memory_order_release);
  }
  return NULL;
}

Test(ring, no_lost_wakeup_in_ping_pong) {
  struct pingpong pp = {.rounds = 20000};
  cr_assert_eq(lp_ring_init(&pp.ring, 2), 0);
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, pingpong_consumer, &pp), 0);
  int64_t t0 = mono_ms();
  for (uint64_t i = 0; i < pp.rounds; i++) {
    /* A delay that sweeps the push across the consumer's way to sleep. */
    for (volatile unsigned k = 0; k < (i * 37) % 512; k++) {
    }
    struct lp_event e = ev_of(0, i);
    cr_assert(lp_ring_push(&pp.ring, &e));
    /* Wait for the ack (bounded; the consumer exits on its own failure). */
    while (atomic_load_explicit(&pp.acked, memory_order_acquire) <= i) {
      if (atomic_load(&pp.failures) || mono_ms() - t0 > 50000) break;
      if ((i & 1) == 0) sched_yield(); /* vary the timing: half the rounds spin */
    }
    if (atomic_load_explicit(&pp.acked, memory_order_acquire) <= i) break;
  }
  pthread_join(t, NULL);
  cr_assert_eq(atomic_load(&pp.failures), 0, "consumer lost a wake-up or an event");
  cr_assert_eq(atomic_load(&pp.acked), pp.rounds);
  lp_ring_fini(&pp.ring);
}

Test(ring, event_type_names) {
  cr_assert_str_eq(lp_event_type_name(LP_EV_ASYNC), "async");
  cr_assert_str_eq(lp_event_type_name(LP_EV_PORT_DOWN), "port_down");
  cr_assert_str_eq(lp_event_type_name(LP_EV_STOP), "stop");
  cr_assert_str_eq(lp_event_type_name(LP_EV_TYPE_COUNT), "unknown");
  for (uint32_t t = 0; t < LP_EV_TYPE_COUNT; t++) cr_assert_not_null(lp_event_type_name(t));
}
