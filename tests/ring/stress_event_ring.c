/*
 * Stress of the event ring, meant to run under ThreadSanitizer as well
 * (ctest -R ring.stress in a LINKPASS_SANITIZE=thread build; Criterion cannot
 * run under TSan, so this program also repeats the concurrent scenarios of
 * test_event_ring.c).  Three phases:
 *
 *  1. flow: many producer threads push into a small ring while one consumer
 *     thread drains it, sleeping in lp_ring_wait() whenever it is empty.
 *     Producers retry refused pushes.  Every event must arrive exactly once,
 *     intact, in its producer's order, and the overflow counter must equal
 *     the number of refused pushes.
 *  2. ping-pong: one event at a time through a 2-slot ring, the consumer
 *     going to sleep before nearly every event: a lost wake-up shows as a
 *     wait that times out.
 *  3. stopped consumer: the producers push far more than the capacity into a
 *     ring nobody drains: exactly `capacity` pushes get in, every other one is
 *     counted, and the ring then holds each accepted event once.
 *
 * Prints one summary line.  Exit status 0 on success, 1 on any failure, 2 on
 * bad usage.
 *
 * usage: stress_event_ring [-p producers] [-n events_per_producer] [-c capacity] [-w ping_pong_rounds]
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "event_ring.h"

/* A consumer that waits this long for a single event has lost a wake-up. */
#define WAIT_LIMIT_MS 20000
/* Ping-pong: the producer pushes the next event at once; no wait lasts this
 * long unless a wake-up was lost. */
#define PINGPONG_WAIT_MS 5000

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static struct lp_event ev_of(uint32_t producer, uint64_t n) {
  struct lp_event e = {
      .type = (uint32_t)(n % (LP_EV_TYPE_COUNT - 1)) + 1,
      .dev = producer,
      .port = (uint32_t)(n & 0xffff),
      .status = (int32_t)(n * 2654435761u),
      .comm_id = ((uint64_t)producer << 48) ^ (n * 0x9e3779b97f4a7c15ull),
      .arg = n,
      .time_ns = ~n,
  };
  return e;
}

static void die(const char *what) {
  fprintf(stderr, "stress: %s failed\n", what);
  exit(1);
}

static void ring_init_or_exit(struct lp_event_ring *r, uint32_t capacity) {
  int rc = lp_ring_init(r, capacity);
  if (rc) {
    fprintf(stderr, "stress: lp_ring_init(%u): %s\n", capacity, strerror(-rc));
    exit(2);
  }
}

/* ---- phases 1 and 3: producers ---- */

struct flow {
  struct lp_event_ring ring;
  pthread_barrier_t start;
  uint32_t nproducers;
  uint64_t per_producer;
  bool retry;               /* phase 1 retries refused pushes; phase 3 drops them */
  _Atomic uint64_t refused; /* refused pushes, all producers */
  /* consumer results (phase 1) */
  uint64_t delivered, sleeps, errors;
  uint64_t *next;      /* per producer: the next event number expected */
  uint64_t **accepted; /* phase 3, per producer: numbers of its accepted events */
  uint64_t *naccepted;
};

struct producer_arg {
  struct flow *f;
  uint32_t id;
};

static void *producer(void *p) {
  struct producer_arg *a = p;
  struct flow *f = a->f;
  uint64_t refused = 0;
  pthread_barrier_wait(&f->start);
  for (uint64_t n = 0; n < f->per_producer; n++) {
    struct lp_event e = ev_of(a->id, n);
    unsigned spins = 0;
    bool in;
    while (!(in = lp_ring_push(&f->ring, &e))) {
      refused++;
      if (!f->retry) break;
      /* Full: the consumer needs the CPU (8 producers, 2 cores). */
      if (++spins > 4) sched_yield();
    }
    if (in && f->accepted) f->accepted[a->id][f->naccepted[a->id]++] = n;
  }
  atomic_fetch_add_explicit(&f->refused, refused, memory_order_relaxed);
  return NULL;
}

static void start_producers(struct flow *f, pthread_t *threads, struct producer_arg *args) {
  for (uint32_t i = 0; i < f->nproducers; i++) {
    args[i] = (struct producer_arg){.f = f, .id = i};
    if (pthread_create(&threads[i], NULL, producer, &args[i])) die("pthread_create");
  }
}

/* Check one popped event against what its producer must send next. */
static bool check_next(struct flow *f, const struct lp_event *e, uint64_t want_n) {
  if (e->dev >= f->nproducers) {
    fprintf(stderr, "stress: event from unknown producer %u\n", e->dev);
    return false;
  }
  struct lp_event want = ev_of(e->dev, want_n);
  if (memcmp(e, &want, sizeof(*e)) != 0) {
    fprintf(stderr, "stress: producer %u: got event #%" PRIu64 " (type %u), expected #%" PRIu64 "%s\n", e->dev,
            e->arg, e->type, want_n, e->arg == want_n ? " (fields corrupted)" : "");
    return false;
  }
  return true;
}

static void *flow_consumer(void *p) {
  struct flow *f = p;
  uint64_t total = (uint64_t)f->nproducers * f->per_producer;
  pthread_barrier_wait(&f->start);
  while (f->delivered < total) {
    struct lp_event e;
    if (!lp_ring_pop(&f->ring, &e)) {
      int rc = lp_ring_wait(&f->ring, WAIT_LIMIT_MS);
      if (rc != 1) {
        fprintf(stderr, "stress: lp_ring_wait returned %d after %" PRIu64 " of %" PRIu64 " events%s\n", rc,
                f->delivered, total, rc == 0 ? " (lost wake-up?)" : "");
        f->errors++;
        return NULL;
      }
      f->sleeps++;
      continue;
    }
    if (!check_next(f, &e, f->next[e.dev])) {
      f->errors++;
      return NULL;
    }
    f->next[e.dev]++;
    f->delivered++;
  }
  return NULL;
}

/* Phase 1.  Returns true if all is well. */
static bool phase_flow(uint32_t nproducers, uint64_t per_producer, uint32_t capacity, char *summary, size_t len) {
  struct flow *f = calloc(1, sizeof(*f));
  pthread_t *threads = calloc(nproducers, sizeof(*threads));
  struct producer_arg *args = calloc(nproducers, sizeof(*args));
  if (!f || !threads || !args) die("calloc");
  ring_init_or_exit(&f->ring, capacity);
  f->nproducers = nproducers;
  f->per_producer = per_producer;
  f->retry = true;
  f->next = calloc(nproducers, sizeof(*f->next));
  if (!f->next) die("calloc");
  /* Producers and the consumer start together. */
  pthread_barrier_init(&f->start, NULL, nproducers + 1);

  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  start_producers(f, threads, args);
  pthread_t cons;
  if (pthread_create(&cons, NULL, flow_consumer, f)) die("pthread_create");
  pthread_join(cons, NULL);
  if (f->errors) {
    /* Producers may be stuck on a full ring nobody drains: do not join. */
    fprintf(stderr, "stress: FAILED\n");
    _exit(1);
  }
  for (uint32_t i = 0; i < nproducers; i++) pthread_join(threads[i], NULL);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;

  bool ok = true;
  struct lp_event extra;
  if (lp_ring_pop(&f->ring, &extra)) {
    fprintf(stderr, "stress: an extra event (producer %u #%" PRIu64 ") after all were delivered\n", extra.dev,
            extra.arg);
    ok = false;
  }
  for (uint32_t i = 0; i < nproducers; i++) {
    if (f->next[i] != per_producer) {
      fprintf(stderr, "stress: producer %u: %" PRIu64 " of %" PRIu64 " events delivered\n", i, f->next[i],
              per_producer);
      ok = false;
    }
  }
  uint64_t refused = atomic_load(&f->refused), counted = lp_ring_overflows(&f->ring);
  if (refused != counted) {
    fprintf(stderr, "stress: %" PRIu64 " pushes refused but the overflow counter says %" PRIu64 "\n", refused,
            counted);
    ok = false;
  }
  snprintf(summary, len,
           "%u producers x %" PRIu64 " events into %u slots: %" PRIu64
           " delivered exactly once in order, %" PRIu64 " overflows counted and retried, consumer slept %" PRIu64
           " times, %.2f s",
           nproducers, per_producer, capacity, f->delivered, counted, f->sleeps, secs);

  pthread_barrier_destroy(&f->start);
  lp_ring_fini(&f->ring);
  free(f->next);
  free(f);
  free(threads);
  free(args);
  return ok;
}

/* ---- phase 2: ping-pong ---- */

struct pingpong {
  struct lp_event_ring ring;
  uint64_t rounds;
  _Atomic uint64_t acked; /* events the consumer has taken */
  _Atomic int failed;
};

static void *pingpong_consumer(void *p) {
  struct pingpong *pp = p;
  for (uint64_t i = 0; i < pp->rounds; i++) {
    struct lp_event e;
    while (!lp_ring_pop(&pp->ring, &e)) {
      /* The producer pushes as soon as it sees the previous ack, so a wait
       * that runs into its timeout means a wake-up was lost, even if the
       * event is there by then (the wait then returns 1). */
      uint64_t t0 = now_ms();
      int rc = lp_ring_wait(&pp->ring, PINGPONG_WAIT_MS);
      uint64_t waited = now_ms() - t0;
      if (rc != 1 || waited >= PINGPONG_WAIT_MS) {
        fprintf(stderr, "stress: ping-pong round %" PRIu64 ": lp_ring_wait returned %d after %" PRIu64 " ms%s\n", i,
                rc, waited, rc >= 0 ? " (lost wake-up)" : "");
        atomic_store(&pp->failed, 1);
        return NULL;
      }
    }
    if (e.arg != i) {
      fprintf(stderr, "stress: ping-pong round %" PRIu64 ": got event #%" PRIu64 "\n", i, e.arg);
      atomic_store(&pp->failed, 1);
      return NULL;
    }
    atomic_store_explicit(&pp->acked, i + 1, memory_order_release);
  }
  return NULL;
}

static bool phase_pingpong(uint64_t rounds, char *summary, size_t len) {
  struct pingpong *pp = calloc(1, sizeof(*pp));
  if (!pp) die("calloc");
  ring_init_or_exit(&pp->ring, 2);
  pp->rounds = rounds;
  pthread_t t;
  if (pthread_create(&t, NULL, pingpong_consumer, pp)) die("pthread_create");
  uint64_t i;
  for (i = 0; i < rounds; i++) {
    /* A delay that sweeps the push across the consumer's way to sleep. */
    for (volatile unsigned k = 0; k < (i * 37) % 512; k++) {
    }
    struct lp_event e = ev_of(0, i);
    if (!lp_ring_push(&pp->ring, &e)) {
      fprintf(stderr, "stress: ping-pong round %" PRIu64 ": push refused\n", i);
      atomic_store(&pp->failed, 1);
      break;
    }
    while (atomic_load_explicit(&pp->acked, memory_order_acquire) <= i && !atomic_load(&pp->failed))
      if (i & 1) sched_yield(); /* vary the timing: half the rounds spin */
    if (atomic_load(&pp->failed)) break;
  }
  if (atomic_load(&pp->failed)) _exit(1); /* the consumer may still be waiting */
  pthread_join(t, NULL);
  snprintf(summary, len, "%" PRIu64 " ping-pong wake-ups", rounds);
  lp_ring_fini(&pp->ring);
  free(pp);
  return true;
}

/* ---- phase 3: stopped consumer ---- */

static bool phase_stopped(uint32_t nproducers, uint64_t per_producer, uint32_t capacity, char *summary,
                          size_t len) {
  struct flow *f = calloc(1, sizeof(*f));
  pthread_t *threads = calloc(nproducers, sizeof(*threads));
  struct producer_arg *args = calloc(nproducers, sizeof(*args));
  if (!f || !threads || !args) die("calloc");
  ring_init_or_exit(&f->ring, capacity);
  f->nproducers = nproducers;
  f->per_producer = per_producer;
  f->retry = false;
  f->accepted = calloc(nproducers, sizeof(*f->accepted));
  f->naccepted = calloc(nproducers, sizeof(*f->naccepted));
  if (!f->accepted || !f->naccepted) die("calloc");
  for (uint32_t i = 0; i < nproducers; i++)
    if (!(f->accepted[i] = calloc(per_producer, sizeof(uint64_t)))) die("calloc");
  pthread_barrier_init(&f->start, NULL, nproducers + 1);
  start_producers(f, threads, args);
  pthread_barrier_wait(&f->start);
  for (uint32_t i = 0; i < nproducers; i++) pthread_join(threads[i], NULL);

  bool ok = true;
  uint64_t pushed = (uint64_t)nproducers * per_producer;
  uint64_t in = pushed > capacity ? capacity : pushed;
  uint64_t refused = atomic_load(&f->refused), counted = lp_ring_overflows(&f->ring);
  if (refused != pushed - in || counted != pushed - in) {
    fprintf(stderr, "stress: stopped consumer: %" PRIu64 " pushes into %u slots: %" PRIu64 " refused, %" PRIu64
            " counted, expected %" PRIu64 "\n", pushed, capacity, refused, counted, pushed - in);
    ok = false;
  }
  /* The ring holds exactly the accepted events, each producer's in order. */
  uint64_t *seen = calloc(nproducers, sizeof(*seen));
  if (!seen) die("calloc");
  struct lp_event e;
  uint64_t popped = 0;
  while (ok && lp_ring_pop(&f->ring, &e)) {
    if (e.dev >= nproducers || seen[e.dev] >= f->naccepted[e.dev] ||
        !check_next(f, &e, f->accepted[e.dev][seen[e.dev]])) {
      fprintf(stderr, "stress: stopped consumer: unexpected event (producer %u #%" PRIu64 ")\n", e.dev, e.arg);
      ok = false;
      break;
    }
    seen[e.dev]++;
    popped++;
  }
  if (ok && popped != in) {
    fprintf(stderr, "stress: stopped consumer: %" PRIu64 " events in the ring, expected %" PRIu64 "\n", popped, in);
    ok = false;
  }
  snprintf(summary, len, "stopped consumer: %" PRIu64 " pushes, %" PRIu64 " in, %" PRIu64 " overflows counted",
           pushed, popped, counted);

  for (uint32_t i = 0; i < nproducers; i++) free(f->accepted[i]);
  free(f->accepted);
  free(f->naccepted);
  free(seen);
  pthread_barrier_destroy(&f->start);
  lp_ring_fini(&f->ring);
  free(f);
  free(threads);
  free(args);
  return ok;
}

static uint64_t parse(const char *arg, uint64_t max) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(arg, &end, 0);
  if (errno || *end || v == 0 || v > max) {
    fprintf(stderr, "stress: bad number '%s' (1..%" PRIu64 ")\n", arg, max);
    exit(2);
  }
  return v;
}

int main(int argc, char **argv) {
  uint32_t nproducers = 8, capacity = 1024;
  uint64_t per_producer = 200000, rounds = 20000;
  int opt;
  while ((opt = getopt(argc, argv, "p:n:c:w:")) != -1) {
    switch (opt) {
    case 'p': nproducers = (uint32_t)parse(optarg, 1024); break;
    case 'n': per_producer = parse(optarg, UINT64_C(1) << 40); break;
    case 'c': capacity = (uint32_t)parse(optarg, UINT32_MAX); break;
    case 'w': rounds = parse(optarg, UINT64_C(1) << 40); break;
    default:
      fprintf(stderr, "usage: %s [-p producers] [-n events_per_producer] [-c capacity] [-w ping_pong_rounds]\n",
              argv[0]);
      return 2;
    }
  }

  char s1[512], s2[128], s3[256];
  bool ok = phase_flow(nproducers, per_producer, capacity, s1, sizeof(s1));
  ok = phase_pingpong(rounds, s2, sizeof(s2)) && ok;
  /* Enough pushes to overflow many times over, but bounded memory. */
  uint64_t stopped_per_producer = 4 * (uint64_t)capacity / nproducers + 1000;
  ok = phase_stopped(nproducers, stopped_per_producer, capacity, s3, sizeof(s3)) && ok;
  printf("ring stress: %s: %s; %s; %s\n", ok ? "ok" : "FAILED", s1, s2, s3);
  return ok ? 0 : 1;
}
