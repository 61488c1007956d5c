/*
 * ring_bench: cost of the event ring (src/event_ring.c), in nanoseconds per
 * event.
 *   - one thread pushing and popping in turn: the bare round trip, no sharing;
 *   - 1, 2 and 4 producer threads into one consumer thread that polls
 *     lp_ring_pop() (throughput: wall time / events delivered);
 *   - 1 producer into a consumer that sleeps in lp_ring_wait() whenever the
 *     ring is empty, the way the control thread uses it.
 * Each figure is the median of a few runs.  Producers retry a refused push
 * (ring full); the "full" column is refused pushes per delivered event.
 * With more threads than CPUs the threads share CPUs, and the figures include
 * the scheduler: the header says how many CPUs the run had.
 *
 * usage: ring_bench [-n events_per_run] [-r runs] [-c capacity]
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

#define MAX_RUNS 15

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(*v), cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void ring_init_or_die(struct lp_event_ring *r, uint32_t capacity) {
  int rc = lp_ring_init(r, capacity);
  if (rc) {
    fprintf(stderr, "ring_bench: lp_ring_init(%u): %s\n", capacity, strerror(-rc));
    exit(2);
  }
}

/* ---- one thread ---- */

static double round_trip(uint32_t capacity, uint64_t n) {
  struct lp_event_ring r;
  ring_init_or_die(&r, capacity);
  struct lp_event e = {.type = LP_EV_PORT_UP}, out;
  uint64_t sum = 0;
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < n; i++) {
    e.arg = i;
    if (!lp_ring_push(&r, &e) || !lp_ring_pop(&r, &out)) {
      fprintf(stderr, "ring_bench: round trip %" PRIu64 " failed\n", i);
      exit(1);
    }
    sum += out.arg;
  }
  uint64_t t1 = now_ns();
  lp_ring_fini(&r);
  if (sum != n * (n - 1) / 2) {
    fprintf(stderr, "ring_bench: round trip lost events\n");
    exit(1);
  }
  return (double)(t1 - t0) / (double)n;
}

/* ---- producers and a consumer ---- */

struct mp_run {
  struct lp_event_ring ring;
  pthread_barrier_t start;
  uint32_t nproducers;
  uint64_t per_producer;
  bool sleeping_consumer;
  _Atomic uint64_t refused;
  uint64_t t0, t1; /* consumer: first pop attempt, last event */
};

struct producer_arg {
  struct mp_run *run;
  uint32_t id;
};

static void *producer(void *p) {
  struct producer_arg *a = p;
  struct mp_run *run = a->run;
  struct lp_event e = {.type = LP_EV_PORT_DOWN, .dev = a->id};
  uint64_t refused = 0;
  pthread_barrier_wait(&run->start);
  for (uint64_t i = 0; i < run->per_producer; i++) {
    e.arg = i;
    unsigned spins = 0;
    while (!lp_ring_push(&run->ring, &e)) {
      refused++;
      if (++spins > 16) sched_yield(); /* the consumer may need this CPU */
    }
  }
  atomic_fetch_add_explicit(&run->refused, refused, memory_order_relaxed);
  return NULL;
}

static void consume(struct mp_run *run) {
  uint64_t total = run->per_producer * run->nproducers, got = 0;
  uint64_t *next = calloc(run->nproducers, sizeof(*next));
  if (!next) exit(1);
  pthread_barrier_wait(&run->start);
  run->t0 = now_ns();
  unsigned empty = 0;
  while (got < total) {
    struct lp_event e;
    if (lp_ring_pop(&run->ring, &e)) {
      if (e.dev >= run->nproducers || e.arg != next[e.dev]) {
        fprintf(stderr, "ring_bench: event out of order\n");
        exit(1);
      }
      next[e.dev]++;
      got++;
      empty = 0;
    } else if (run->sleeping_consumer) {
      if (lp_ring_wait(&run->ring, 10000) != 1) {
        fprintf(stderr, "ring_bench: consumer not woken\n");
        exit(1);
      }
    } else if (++empty > 64) {
      sched_yield(); /* producers may need this CPU */
      empty = 0;
    }
  }
  run->t1 = now_ns();
  free(next);
}

/* Returns ns per event; *full_per_event the refused pushes per event. */
static double producers_consumer(uint32_t capacity, uint32_t nproducers, uint64_t events, bool sleeping_consumer,
                                 double *full_per_event) {
  struct mp_run run = {.nproducers = nproducers, .sleeping_consumer = sleeping_consumer};
  run.per_producer = events / nproducers;
  ring_init_or_die(&run.ring, capacity);
  pthread_barrier_init(&run.start, NULL, nproducers + 1);
  pthread_t threads[8];
  struct producer_arg args[8];
  for (uint32_t i = 0; i < nproducers; i++) {
    args[i] = (struct producer_arg){.run = &run, .id = i};
    if (pthread_create(&threads[i], NULL, producer, &args[i])) {
      fprintf(stderr, "ring_bench: pthread_create failed\n");
      exit(1);
    }
  }
  consume(&run); /* this thread is the consumer */
  for (uint32_t i = 0; i < nproducers; i++) pthread_join(threads[i], NULL);
  uint64_t n = run.per_producer * nproducers;
  *full_per_event = (double)atomic_load(&run.refused) / (double)n;
  pthread_barrier_destroy(&run.start);
  lp_ring_fini(&run.ring);
  return (double)(run.t1 - run.t0) / (double)n;
}

static uint64_t parse(const char *arg, uint64_t max) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(arg, &end, 0);
  if (errno || *end || v == 0 || v > max) {
    fprintf(stderr, "ring_bench: bad number '%s' (1..%" PRIu64 ")\n", arg, max);
    exit(2);
  }
  return v;
}

int main(int argc, char **argv) {
  uint64_t events = 2000000;
  int runs = 5;
  uint32_t capacity = 1024;
  int opt;
  while ((opt = getopt(argc, argv, "n:r:c:")) != -1) {
    switch (opt) {
    case 'n': events = parse(optarg, UINT64_C(1) << 36); break;
    case 'r': runs = (int)parse(optarg, MAX_RUNS); break;
    case 'c': capacity = (uint32_t)parse(optarg, LP_RING_MAX_CAPACITY); break;
    default:
      fprintf(stderr, "usage: %s [-n events_per_run] [-r runs] [-c capacity]\n", argv[0]);
      return 2;
    }
  }
  if (events < 4) events = 4;

  cpu_set_t set;
  int usable = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : -1;
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  printf("event ring benchmark: capacity %u, %" PRIu64 " events per run, median of %d runs\n", capacity, events,
         runs);
  double load = -1;
  FILE *f = fopen("/proc/loadavg", "r");
  if (f) {
    if (fscanf(f, "%lf", &load) != 1) load = -1;
    fclose(f);
  }
  printf("CPUs: %ld online, %d usable by this process%s; load average %.2f\n", online, usable,
         usable >= 0 && usable < 5 ? " (rows with more threads than CPUs include scheduling)" : "", load);
  printf("%-44s %8s %10s %10s\n", "configuration", "threads", "ns/event", "full/event");

  uint64_t start = now_ns();
  double v[MAX_RUNS], full[MAX_RUNS];
  for (int i = 0; i < runs; i++) v[i] = round_trip(capacity, events * 4);
  printf("%-44s %8d %10.1f %10s\n", "one thread, push then pop (round trip)", 1, median(v, runs), "-");

  const uint32_t nprod[] = {1, 2, 4};
  for (size_t k = 0; k < sizeof(nprod) / sizeof(nprod[0]); k++) {
    for (int i = 0; i < runs; i++) v[i] = producers_consumer(capacity, nprod[k], events, false, &full[i]);
    char name[64];
    snprintf(name, sizeof(name), "%u producer%s -> 1 polling consumer", nprod[k], nprod[k] > 1 ? "s" : "");
    printf("%-44s %8u %10.1f %10.3f\n", name, nprod[k] + 1, median(v, runs), median(full, runs));
  }
  for (int i = 0; i < runs; i++) v[i] = producers_consumer(capacity, 1, events, true, &full[i]);
  printf("%-44s %8d %10.1f %10.3f\n", "1 producer -> 1 consumer in lp_ring_wait", 2, median(v, runs),
         median(full, runs));
  printf("total time %.2f s\n", (double)(now_ns() - start) / 1e9);
  return 0;
}
