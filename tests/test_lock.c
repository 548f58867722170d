/* test_lock.c: the one lock order (common/internal/wt/lock.h). What a
 * developer would notice: a lock taken against the order ends the process
 * at once, naming both locks, in a build with the check (Debug, or
 * -DWT_LOCK_CHECK=ON); the right order and lock-free waits pass. */

#include <CUnit/CUnit.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "wt/clock.h"
#include "wt/lock.h"
#include "wt_test.h"

/* Runs fn in a child with stderr into a pipe; returns its wait status and
 * what it printed. */
static int in_child(void (*fn)(void), char *err, size_t n) {
  int fds[2];
  CU_ASSERT_FATAL(pipe(fds) == 0);
  pid_t pid = fork();
  CU_ASSERT_FATAL(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    fn();
    _exit(0);
  }
  close(fds[1]);
  size_t at = 0;
  ssize_t r;
  while (at + 1 < n && (r = read(fds[0], err + at, n - 1 - at)) > 0)
    at += (size_t)r;
  err[at] = '\0';
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

static void round_then_store(void) {
  wt_mutex round, store;
  wt_mutex_init(&round, WT_LOCK_ROUND, 0, "round.mu");
  wt_mutex_init(&store, WT_LOCK_STORE, 1, "store.lock");
  wt_mutex_lock(&round);
  wt_mutex_lock(&store); /* STORE (300) under ROUND (400): wrong */
  wt_mutex_unlock(&store);
  wt_mutex_unlock(&round);
}

static void workers_descending(void) {
  wt_mutex w0, w1;
  wt_mutex_init(&w0, WT_LOCK_WORKER, 0, "worker[0].mu");
  wt_mutex_init(&w1, WT_LOCK_WORKER, 1, "worker[1].mu");
  wt_mutex_lock(&w1);
  wt_mutex_lock(&w0); /* same rank: by index, ascending only */
  wt_mutex_unlock(&w0);
  wt_mutex_unlock(&w1);
}

static void test_wrong_order_aborts(void) {
  if (!wt_lock_checked()) {
    printf(
        "\n    skipped: this build has no lock-order check "
        "(-DWT_LOCK_CHECK=ON or a Debug build) ");
    return;
  }
  char err[2048];
  int st = in_child(round_then_store, err, sizeof(err));
  CU_ASSERT(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "lock order violated"));
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "store.lock"));
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "round.mu"));
  st = in_child(workers_descending, err, sizeof(err));
  CU_ASSERT(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "worker[0].mu"));
}

static void test_right_order_passes(void) {
  wt_mutex store, round, w0, w1, leaf;
  wt_mutex_init(&store, WT_LOCK_STORE, 0, "store.lock");
  wt_mutex_init(&round, WT_LOCK_ROUND, 0, "round.mu");
  wt_mutex_init(&w0, WT_LOCK_WORKER, 0, "worker[0].mu");
  wt_mutex_init(&w1, WT_LOCK_WORKER, 1, "worker[1].mu");
  wt_mutex_init(&leaf, WT_LOCK_LEAF, 0, "leaf");
  CU_ASSERT_EQUAL(wt_lock_held_count(), 0);
  wt_mutex_lock(&store);
  wt_mutex_lock(&round);
  wt_mutex_lock(&w0);
  wt_mutex_lock(&w1);
  wt_mutex_lock(&leaf);
  if (wt_lock_checked()) CU_ASSERT_EQUAL(wt_lock_held_count(), 5);
  /* Released out of order, then taken again: fine. */
  wt_mutex_unlock(&round);
  wt_mutex_unlock(&leaf);
  wt_mutex_unlock(&w0);
  wt_mutex_unlock(&w1);
  wt_mutex_lock(&round);
  wt_mutex_unlock(&round);
  wt_mutex_unlock(&store);
  CU_ASSERT_EQUAL(wt_lock_held_count(), 0);
  /* A try-lock never waits, so it may go against the order. */
  wt_mutex_lock(&round);
  CU_ASSERT(wt_mutex_trylock(&store));
  wt_mutex_unlock(&store);
  wt_mutex_unlock(&round);
  wt_mutex_destroy(&store);
  wt_mutex_destroy(&round);
  wt_mutex_destroy(&w0);
  wt_mutex_destroy(&w1);
  wt_mutex_destroy(&leaf);
}

/* A timed wait gives the lock back while it waits and holds it again on
 * return: the held list says so. */
static void test_timed_wait(void) {
  wt_mutex m;
  pthread_cond_t cv;
  wt_mutex_init(&m, WT_LOCK_ROUND, 0, "round.mu");
  CU_ASSERT_FATAL(wt_cond_init_monotonic(&cv) == 0);
  wt_mutex_lock(&m);
  int64_t t0 = wt_mono_ms();
  int rc = wt_cond_wait_until(&cv, &m, t0 + 50);
  CU_ASSERT(rc != 0); /* timed out */
  CU_ASSERT(wt_mono_ms() - t0 >= 49);
  if (wt_lock_checked()) CU_ASSERT_EQUAL(wt_lock_held_count(), 1);
  wt_mutex_unlock(&m);
  pthread_cond_destroy(&cv);
  wt_mutex_destroy(&m);
}

void wt_test_suite_lock(void) {
  CU_pSuite s = CU_add_suite("lock", NULL, NULL);
  CU_add_test(s, "a lock against the order aborts, naming both",
              test_wrong_order_aborts);
  CU_add_test(s, "the order, released in any order, and try-locks pass",
              test_right_order_passes);
  CU_add_test(s, "a timed wait returns at its deadline holding the lock",
              test_timed_wait);
}
