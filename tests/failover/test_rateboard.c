/* The rate board (rateboard.h): two processes' views of one file. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "gray.h"
#include "rateboard.h"

static char path[64];

static void fresh_path(void) { snprintf(path, sizeof(path), "/tmp/lp-rateboard-test.%d", (int)getpid()); }

/* Open the board at `path` as process `pid`; the test stops if it cannot. */
static void open_as(struct lp_rateboard *b, int pid) {
  char why[256];
  cr_assert_eq(lp_rateboard_open(b, path, pid, why, sizeof(why)), 0, "%s", why);
}

Test(rateboard, another_process_reads_what_one_posted) {
  fresh_path();
  struct lp_rateboard a, b;
  /* Two live pids: this process and its parent stand for two ranks. */
  open_as(&a, (int)getpid());
  open_as(&b, (int)getppid());
  uint64_t now = lp_now_ns();
  lp_rateboard_post(&a, 0, 0x1234, 1, 1180, now - 100, 0, now);
  lp_rateboard_post(&a, 1, 0x5678, 1, -1, 0, 0, now); /* a port without a window yet */
  cr_expect_eq(lp_rateboard_read(&b, 0x1234, 1, now - 1000, now), 1180);
  cr_expect_eq(lp_rateboard_read(&b, 0x1234, 1, now - 1000, now - 2000000), 1180,
               "a holder that ticked after the reader read the clock is alive");
  cr_expect_eq(lp_rateboard_read(&b, 0x1234, 2, 0, now), -1, "another port of the NIC");
  cr_expect_eq(lp_rateboard_read(&b, 0x5678, 1, 0, now), -1, "nothing measured");
  cr_expect_eq(lp_rateboard_read(&a, 0x1234, 1, 0, now), -1, "a process's own posts are not another's view");
  cr_expect_eq(lp_rateboard_read(&b, 0x1234, 1, now, now), -1, "a window closed before `since`");
  cr_expect_eq(lp_rateboard_read(&b, 0x1234, 1, 0, now + LP_RB_STALE_NS + 1), -1, "a holder that stopped ticking");
  lp_rateboard_post(&b, 0, 0x1234, 2, 1100, now, 0, now); /* b holds a slot: a live holder besides a */
  lp_rateboard_post(&a, 0, 0x1234, 1, 300, now + 10, 0, now + 10);
  cr_expect_eq(lp_rateboard_read(&b, 0x1234, 1, 0, now + 10), 300, "the latest window");
  lp_rateboard_close(&a);
  cr_expect_eq(lp_rateboard_read(&b, 0x1234, 1, 0, now + 10), -1, "a closed holder's slots are free");
  cr_expect_eq(access(path, F_OK), 0, "b still holds the board");
  lp_rateboard_close(&b);
  cr_expect_neq(access(path, F_OK), 0, "the last one out removed the file");
}

Test(rateboard, a_fault_one_process_left_a_port_for_is_every_other_ones) {
  fresh_path();
  struct lp_rateboard a, b;
  open_as(&a, (int)getpid());
  open_as(&b, (int)getppid());
  uint64_t now = lp_now_ns();
  lp_rateboard_post(&a, 0, 0x1234, 1, -1, 0, 0, now);
  cr_expect_eq(lp_rateboard_fault(&b, 0x1234, 1, now), 0, "no fault yet");
  lp_rateboard_post(&a, 0, 0x1234, 1, -1, 0, now - 5, now);
  cr_expect_eq(lp_rateboard_fault(&b, 0x1234, 1, now), now - 5);
  cr_expect_eq(lp_rateboard_fault(&b, 0x1234, 2, now), 0, "another port of the NIC");
  cr_expect_eq(lp_rateboard_fault(&a, 0x1234, 1, now), 0, "a process's own faults are its own business");
  lp_rateboard_post(&b, 0, 0x1234, 1, -1, 0, now - 2, now);
  cr_expect_eq(lp_rateboard_fault(&a, 0x1234, 1, now), now - 2, "b's");
  lp_rateboard_post(&b, 1, 0x1234, 2, -1, 0, now - 1, now);
  cr_expect_eq(lp_rateboard_fault(&a, 0x1234, 1, now), now - 2, "not b's other port's");
  cr_expect_eq(lp_rateboard_fault(&b, 0x1234, 1, now + LP_RB_STALE_NS + 1), 0, "a holder that stopped ticking");
  lp_rateboard_post(&a, 0, 0x1234, 1, -1, 0, now + 3600ull * 1000000000ull, now);
  cr_expect_eq(lp_rateboard_fault(&b, 0x1234, 1, now), 0, "a fault in the future is a corrupt slot");
  lp_rateboard_close(&a);
  lp_rateboard_close(&b);
}

/* Two ranks of a host share a NIC's port.  Rank a's connections on it go
 * to a peer whose cable is pulled; rank b's go elsewhere and stay.  The
 * port counts the local ACK timeouts of a's writes, for the whole host:
 * b's resend windows see them too.  a leaves the port for the fault and
 * starts its windows over; b must as well, or it drains a healthy port
 * for a's pulled cable (its second window over the threshold in a row). */
Test(rateboard, a_port_another_rank_left_for_a_fault_does_not_strike_for_its_resends) {
  fresh_path();
  struct lp_rateboard a, b;
  open_as(&a, (int)getpid());
  open_as(&b, (int)getppid());
  struct lp_gray g; /* b's windows of the port */
  lp_gray_reset(&g);
  const uint64_t tick = 250000000ull;
  uint64_t now = lp_now_ns(), packets = 0, resends = 0;
  lp_gray_fault(&g, lp_rateboard_fault(&b, 0x1234, 1, now));
  lp_gray_window(&g, 1, packets, resends, 2000, now);
  /* The cable is pulled: a window at 1 % closes. */
  now += tick, packets += 10000, resends += 100;
  lp_gray_fault(&g, lp_rateboard_fault(&b, 0x1234, 1, now));
  cr_assert_eq(lp_gray_window(&g, 1, packets, resends, 2000, now), 10000);
  cr_assert_eq(g.strikes, 1);
  /* a's connections leave the port; its next tick posts the fault. */
  uint64_t fault = now + tick / 2;
  lp_rateboard_post(&a, 0, 0x1234, 1, -1, 0, fault, fault);
  /* b's next tick: the window that closes holds the fault's last resends. */
  now += tick, packets += 10000, resends += 100;
  lp_gray_fault(&g, lp_rateboard_fault(&b, 0x1234, 1, now));
  lp_gray_window(&g, 1, packets, resends, 2000, now);
  cr_expect(!lp_gray_struck(&g), "drained for another rank's pulled cable: %d strikes", g.strikes);
  /* Clean since: a stays away, and posts the same fault every tick. */
  for (int i = 0; i < 3; i++) {
    now += tick, packets += 10000;
    lp_rateboard_post(&a, 0, 0x1234, 1, -1, 0, fault, now);
    lp_gray_fault(&g, lp_rateboard_fault(&b, 0x1234, 1, now));
    cr_expect_eq(lp_gray_window(&g, 1, packets, resends, 2000, now), 0, "the same fault starts nothing over again");
  }
  cr_expect_eq(g.good, 3);
  lp_rateboard_close(&a);
  lp_rateboard_close(&b);
}

Test(rateboard, a_dead_holders_slot_is_taken_over_and_the_file_removed) {
  fresh_path();
  struct lp_rateboard a, dead;
  open_as(&dead, 0x7ffffff0); /* no such process */
  uint64_t now = lp_now_ns();
  for (int d = 0; d < LP_RB_MAX_PORTS; d++) lp_rateboard_post(&dead, d, 0x99, d + 1, 500, now, 0, now);
  open_as(&a, (int)getpid());
  cr_expect_eq(lp_rateboard_read(&a, 0x99, 1, 0, now), -1, "a process that does not exist is nobody's view");
  lp_rateboard_post(&a, 0, 0x42, 1, 900, now, 0, now);
  cr_expect_lt(a.held[0], LP_RB_MAX_PORTS, "the first slot whose holder is gone is taken over");
  /* A crash: the kernel unmaps the process's memory and closes its files,
   * and with the last reference to the open file goes its lock. */
  munmap(dead.t, sizeof(*dead.t));
  close(dead.fd);
  lp_rateboard_close(&a); /* the only one with the file open: removes it */
  cr_expect_neq(access(path, F_OK), 0);
}

Test(rateboard, a_slot_left_mid_write_is_read_again_once_its_new_holder_posts) {
  fresh_path();
  struct lp_rateboard a, b, dead;
  open_as(&dead, 0x7ffffff0); /* no such process */
  uint64_t now = lp_now_ns();
  lp_rateboard_post(&dead, 0, 0x99, 1, 500, now, 0, now);
  int slot = dead.held[0];
  /* Killed between its two adds: the sequence word stays odd. */
  atomic_fetch_add(&dead.t->slot[slot].seq, 1);
  open_as(&a, (int)getpid());
  open_as(&b, (int)getppid());
  lp_rateboard_post(&a, 0, 0x42, 1, 900, now, 0, now);
  cr_assert_eq(a.held[0], slot, "the dead holder's slot is the first free one");
  cr_expect_eq(lp_rateboard_read(&b, 0x42, 1, 0, now), 900, "the slot stays hidden from readers");
  lp_rateboard_post(&a, 0, 0x42, 1, 700, now + 1, 0, now + 1);
  cr_expect_eq(lp_rateboard_read(&b, 0x42, 1, 0, now + 1), 700);
  munmap(dead.t, sizeof(*dead.t));
  close(dead.fd);
  lp_rateboard_close(&a);
  lp_rateboard_close(&b);
}

/* Slots written by something other than a holder (a stray write into the
 * file): their fields are checked, not trusted. */
Test(rateboard, a_corrupt_slot_is_nobodys_view) {
  fresh_path();
  struct lp_rateboard a, b;
  open_as(&a, (int)getpid());
  open_as(&b, (int)getppid());
  uint64_t now = lp_now_ns();
  lp_rateboard_post(&a, 0, 0x42, 1, 900, now, 0, now);
  cr_assert_eq(lp_rateboard_read(&b, 0x42, 1, 0, now), 900);
  struct lp_rb_slot *s = &a.t->slot[a.held[0]];
  /* A window that closes an hour from now would stay the freshest one. */
  atomic_store(&s->at_ns, now + 3600ull * 1000000000ull);
  cr_expect_eq(lp_rateboard_read(&b, 0x42, 1, 0, now), -1, "a window closed in the future");
  atomic_store(&s->at_ns, now);
  cr_expect_eq(lp_rateboard_read(&b, 0x42, 1, 0, now), 900);
  /* kill(0, 0) and kill(-1, 0) succeed: they name a group, every process. */
  uint64_t beat = (uint32_t)(now / 1000000u);
  atomic_store(&s->owner, beat);
  cr_expect_eq(lp_rateboard_read(&b, 0x42, 1, 0, now), -1, "pid 0 holds nothing");
  atomic_store(&s->owner, (uint64_t)UINT32_MAX << 32 | beat);
  cr_expect_eq(lp_rateboard_read(&b, 0x42, 1, 0, now), -1, "pid -1 holds nothing");
  lp_rateboard_close(&a);
  lp_rateboard_close(&b);
}

Test(rateboard, bad_paths_and_none_say_why) {
  struct lp_rateboard b;
  char why[256];
  cr_expect_eq(lp_rateboard_open(&b, "none", 1, why, sizeof(why)), 1);
  cr_expect(strstr(why, "none"), "%s", why);
  cr_expect_eq(lp_rateboard_open(&b, "/nonexistent-dir/board", 1, why, sizeof(why)), -1);
  cr_expect(strstr(why, "/nonexistent-dir/board: No such file"), "%s", why);
  fresh_path();
  FILE *f = fopen(path, "w");
  cr_assert(f);
  for (int i = 0; i < 100000; i++) fputc('x', f); /* not a board */
  fclose(f);
  cr_expect_eq(lp_rateboard_open(&b, path, 1, why, sizeof(why)), -1);
  cr_expect(strstr(why, "is not a linkpass rate board (it starts with 0x78787878 and has 100000 bytes, not "), "%s",
            why);
  unlink(path);
  /* Nor is a short file, even one of zeros, and a refused one is left as
   * it was (it was grown to the board's size before its magic was read). */
  f = fopen(path, "w");
  cr_assert(f);
  for (int i = 0; i < 100; i++) fputc(i < 50 ? 0 : 'y', f);
  fclose(f);
  cr_expect_eq(lp_rateboard_open(&b, path, 1, why, sizeof(why)), -1);
  cr_expect(strstr(why, "is not a linkpass rate board (it starts with 0x00000000 and has 100 bytes, not "), "%s", why);
  struct stat st;
  cr_assert_eq(stat(path, &st), 0);
  cr_expect_eq(st.st_size, 100, "the refused file now has %lld bytes", (long long)st.st_size);
  unlink(path);
  /* A FIFO would block the open's mapping; a link could aim anywhere. */
  cr_assert_eq(mkfifo(path, 0600), 0);
  cr_expect_eq(lp_rateboard_open(&b, path, 1, why, sizeof(why)), -1);
  cr_expect(strstr(why, "is not a regular file: remove it"), "%s", why);
  unlink(path);
  cr_assert_eq(symlink("/dev/null", path), 0);
  cr_expect_eq(lp_rateboard_open(&b, path, 1, why, sizeof(why)), -1);
  cr_expect(strstr(why, "Too many levels of symbolic links"), "%s", why);
  unlink(path);
  /* Another user's file: its owner could post rates (only root can make
   * one here to try). */
  f = fopen(path, "w");
  cr_assert(f);
  fclose(f);
  if (chown(path, 65534, 65534) == 0) {
    cr_expect_eq(lp_rateboard_open(&b, path, 1, why, sizeof(why)), -1);
    cr_expect(strstr(why, "is another user's file: remove it"), "%s", why);
  }
  unlink(path);
}

Test(rateboard, one_that_opens_while_the_last_closes_joins_the_new_board) {
  fresh_path();
  struct lp_rateboard last, early, late;
  open_as(&last, (int)getpid());
  open_as(&early, (int)getppid());
  lp_rateboard_close(&last);
  cr_expect_eq(access(path, F_OK), 0, "`early` has the board open: it stays, though `early` holds no slot yet");
  open_as(&late, (int)getpid());
  uint64_t now = lp_now_ns();
  lp_rateboard_post(&late, 0, 0x77, 1, 640, now, 0, now);
  cr_expect_eq(lp_rateboard_read(&early, 0x77, 1, 0, now), 640, "both see one board");
  lp_rateboard_close(&early);
  lp_rateboard_close(&late);
  cr_expect_neq(access(path, F_OK), 0, "the last one out removed the file");
}

/* Ranks start together and claim their slots at once: no slot may end up
 * held by two of them (each would overwrite the other's rate every tick,
 * and the one that wrote last would hide its neighbour's port). */
struct claimer {
  struct lp_rateboard b;
  pthread_barrier_t *start;
};

static void *claim_all(void *arg) {
  struct claimer *c = arg;
  pthread_barrier_wait(c->start);
  uint64_t now = lp_now_ns();
  for (int d = 0; d < LP_RB_MAX_PORTS; d++)
    lp_rateboard_post(&c->b, d, 0x100u + (uint64_t)c->b.pid, d + 1, 700, now, 0, now);
  return NULL;
}

Test(rateboard, ranks_that_start_together_never_share_a_slot) {
  fresh_path();
  /* Three live pids stand for three ranks. */
  int pids[] = {(int)getpid(), (int)getppid(), 1};
  enum { N = 3 };
  for (int round = 0; round < 300; round++) {
    struct claimer c[N];
    pthread_t th[N];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, N);
    for (int i = 0; i < N; i++) {
      open_as(&c[i].b, pids[i]);
      c[i].start = &start;
    }
    for (int i = 0; i < N; i++) pthread_create(&th[i], NULL, claim_all, &c[i]);
    for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);
    static int holder[LP_RB_SLOTS];
    memset(holder, -1, sizeof(holder));
    for (int i = 0; i < N; i++)
      for (int d = 0; d < LP_RB_MAX_PORTS; d++) {
        int s = c[i].b.held[d];
        cr_assert_geq(s, 0);
        cr_assert_eq(holder[s], -1, "round %d: slot %d held by rank %d and rank %d", round, s, holder[s], i);
        holder[s] = i;
      }
    for (int i = 0; i < N; i++) lp_rateboard_close(&c[i].b);
  }
}

Test(rateboard, a_board_of_another_version_is_started_afresh_only_when_nobody_has_it) {
  fresh_path();
  struct lp_rateboard a, b;
  char why[256];
  open_as(&a, (int)getpid());
  a.t->version = 1; /* an older linkpass that still runs */
  cr_expect_eq(lp_rateboard_open(&b, path, (int)getppid(), why, sizeof(why)), -1);
  cr_expect(strstr(why, "version 1, not 3: another version"), "%s", why);
  /* It crashes: the kernel closes its file and drops its lock; the file stays. */
  munmap(a.t, sizeof(*a.t));
  close(a.fd);
  cr_assert_eq(lp_rateboard_open(&b, path, (int)getppid(), why, sizeof(why)), 0, "left over: %s", why);
  uint64_t now = lp_now_ns();
  lp_rateboard_post(&b, 0, 0x31, 1, 800, now, 0, now);
  cr_expect_eq(b.held[0], 0, "the slots start free");
  lp_rateboard_close(&b);
  cr_expect_neq(access(path, F_OK), 0);
}

/* Another program cuts the board's file short while it is mapped (an
 * operator's `truncate`, a stray rewrite): a read or a post of the mapping
 * past the file's end raised SIGBUS, and every process of the host died at
 * its next tick.  The check each tick makes first gives the board up, says
 * why, and the process goes on comparing its own ports. */
Test(rateboard, a_board_cut_short_under_its_readers_is_given_up_not_a_crash) {
  fresh_path();
  struct lp_rateboard a;
  open_as(&a, (int)getpid());
  uint64_t now = lp_now_ns();
  char why[768];
  lp_rateboard_post(&a, 0, 0x1234, 1, 1180, now, 0, now);
  cr_assert_eq(lp_rateboard_intact(&a, why, sizeof(why)), 1, "a whole board is kept");
  cr_assert_eq(truncate(path, 0), 0);
  cr_assert_eq(lp_rateboard_intact(&a, why, sizeof(why)), 0, "a board cut to nothing is kept");
  cr_expect_not_null(strstr(why, "cut to 0 bytes"), "%s", why);
  cr_expect_not_null(strstr(why, path), "%s", why);
  /* What a tick does next: no SIGBUS. */
  lp_rateboard_post(&a, 0, 0x1234, 1, 1180, now, 0, now);
  cr_expect_eq(lp_rateboard_read(&a, 0x1234, 1, 0, now), -1);
  cr_expect_eq(lp_rateboard_fault(&a, 0x1234, 1, now), 0);
  cr_expect_eq(lp_rateboard_intact(&a, why, sizeof(why)), 1, "given up once");
  lp_rateboard_close(&a);
  unlink(path);
}
