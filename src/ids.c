/* Identifiers that must not collide across processes (ids.h). */
#include "ids.h"

#include <sys/random.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

uint64_t lp_random_u64(void) {
  uint64_t v = 0;
  while (v == 0) {
    if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v)) {
      /* No entropy yet (early boot): time and pid are unique enough for ids. */
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      v = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40) ^ (uint64_t)(uintptr_t)&v;
    }
  }
  return v;
}
