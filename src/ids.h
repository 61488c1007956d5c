/* Identifiers that must not collide across processes (connection and
 * listener ids). */
#ifndef LP_IDS_H
#define LP_IDS_H

#include <stdint.h>

/* Non-zero random 64-bit value. */
uint64_t lp_random_u64(void);

#endif
