/*
 * The rate board: where the processes of a host post the rates their ports
 * moved data at (gray.h, slowness), so that each can compare its ports with
 * those the others measure.  NCCL runs a process per GPU and each mostly
 * uses its own NIC: alone, a process would have no other port to compare
 * its port with, and a slow rail would go unseen.
 *
 * A small file in shared memory (LINKPASS_RATE_BOARD, by default
 * /dev/shm/linkpass-rates-<uid>) that every process of the user on the host
 * maps: a table of slots, each held by one process for one port, keyed by
 * the NIC's node GUID and the port number (unique on the host and beyond,
 * also between the simulated hosts of one machine).  A slot is written by
 * its holder's control thread only, under a sequence count, and read by
 * anyone; its holder refreshes it every tick, and a slot not refreshed for
 * LP_RB_STALE_NS is free again (its process ended or hangs).  Every
 * process keeps the file open under a shared flock; whoever closes it and
 * then gets the lock exclusively (no other process has it open, crashed
 * ones included: the kernel dropped their locks with their files and
 * mappings) removes the file, and one
 * that opened it meanwhile finds it unlinked once it has its shared lock,
 * and opens the new one: every process of the host shares one board.
 * Nothing else blocks (the lock waits at most for a closer's unlink), and
 * a board that cannot be opened only leaves the process to compare its
 * own ports.
 */
#ifndef LP_RATEBOARD_H
#define LP_RATEBOARD_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define LP_RB_SLOTS 512
#define LP_RB_STALE_MS 5000u
#define LP_RB_STALE_NS (LP_RB_STALE_MS * 1000ull * 1000)
#define LP_RB_MAX_PORTS 64 /* slots one process holds at most (one per device) */

struct lp_rb_slot {
  _Atomic uint32_t seq; /* odd while its holder writes it */
  /* The holder and its heartbeat in one word, so that taking a free slot
   * is one compare-and-swap that only one process wins: its pid << 32 |
   * its last tick in ms (CLOCK_MONOTONIC, modulo 2^32); 0: never held. */
  _Atomic uint64_t owner;
  _Atomic uint64_t guid;
  _Atomic int32_t port;
  _Atomic int64_t mbps;      /* the port's last closed window: MB/s while busy, -1: none */
  _Atomic uint64_t at_ns;    /* when that window closed */
  _Atomic uint64_t fault_ns; /* when the holder last left the port for a fault, 0: never (lp_gray_fault) */
};

struct lp_rb_table {
  uint32_t magic, version;
  struct lp_rb_slot slot[LP_RB_SLOTS];
};

struct lp_rateboard {
  struct lp_rb_table *t; /* NULL: no board */
  int fd;                /* open while mapped, under a shared flock */
  int pid;
  char path[512];
  int held[LP_RB_MAX_PORTS]; /* slot per device index, -1: none yet */
};

/* Map the board at `path`, creating it if needed: 0; 1 for "none" (no
 * board, as asked); -1 with the reason in `why` when it cannot be used
 * (the process then compares its own ports only). */
int lp_rateboard_open(struct lp_rateboard *b, const char *path, int pid, char *why, size_t why_len);
void lp_rateboard_close(struct lp_rateboard *b);

/* 1 while the board's file still holds the whole table; 0, with the board
 * given up and the reason in `why`, when another program cut it short: a
 * read or a write of the mapping past the file's end would raise SIGBUS.
 * Call it before each tick's posts and reads; a cut in the middle of one
 * tick is not caught. */
int lp_rateboard_intact(struct lp_rateboard *b, char *why, size_t why_len);

/* Post device `dev`'s port (guid, port): its last window's rate (-1: none
 * yet) and when it closed, and when this process last left the port for a
 * fault (0: never); also the holder's heartbeat, so call it every tick for
 * every device.  A full board leaves the port unposted. */
void lp_rateboard_post(struct lp_rateboard *b, int dev, uint64_t guid, int port, int64_t mbps, uint64_t at_ns,
                       uint64_t fault_ns, uint64_t now_ns);

/* The freshest rate another live process posted for (guid, port) from a
 * window that closed at `since_ns` or later: MB/s, -1 when none. */
int64_t lp_rateboard_read(const struct lp_rateboard *b, uint64_t guid, int port, uint64_t since_ns, uint64_t now_ns);

/* The latest time another live process posted that it left (guid, port)
 * for a fault: the port counted that fault's resends for this process
 * too (lp_gray_fault).  0: none. */
uint64_t lp_rateboard_fault(const struct lp_rateboard *b, uint64_t guid, int port, uint64_t now_ns);

#endif
