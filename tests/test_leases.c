/* test_leases.c: consumers' leases and the rule that lets a round write
 * (server/src/leases.c, compiled into the runner: its functions are hidden
 * in libwt_server). What a user would notice: the round that waits, the
 * error that names the holder, the consumer refused past its limit, the
 * lease another consumer cannot end. */

#include <CUnit/CUnit.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "../server/src/leases.h"
#include "support/fixture.h"
#include "wt/clock.h"
#include "wt_test.h"

static void test_take_and_drop(void) {
  wt_leases *t = NULL;
  WT_ASSERT_OK(wt_leases_new(NULL, &t));
  uint64_t a = 0, b = 0;
  WT_ASSERT_OK(wt_leases_take(t, 1, 100, 1000, 7, "v7", &a));
  WT_ASSERT_OK(wt_leases_take(t, 1, 100, 1000, 7, "v7", &b));
  CU_ASSERT(a != 0 && b != 0 && a != b);
  wt_lease_info info[4];
  CU_ASSERT_EQUAL(wt_leases_list(t, info, 4), 2);
  CU_ASSERT_EQUAL(info[0].id, a); /* the oldest first */
  CU_ASSERT_STRING_EQUAL(info[0].version, "v7");
  CU_ASSERT_EQUAL(info[0].pid, 100);
  /* Another consumer cannot end it, nor can an id no one holds. */
  WT_ASSERT_ERR(wt_leases_drop(t, 2, a), WT_NOT_FOUND, "holds no such lease");
  WT_ASSERT_ERR(wt_leases_drop(t, 1, a ^ b ^ 1), WT_NOT_FOUND, "lease");
  WT_ASSERT_OK(wt_leases_drop(t, 1, a));
  WT_ASSERT_ERR(wt_leases_drop(t, 1, a), WT_NOT_FOUND, "holds no such lease");
  CU_ASSERT_EQUAL(wt_leases_list(t, info, 4), 1);
  CU_ASSERT_EQUAL(wt_leases_drop_consumer(t, 1), 1);
  CU_ASSERT_EQUAL(wt_leases_list(t, info, 4), 0);
  wt_leases_free(t);
}

static void test_limits(void) {
  wt_leases *t = NULL;
  wt_lease_limits lim = {.max_total = 5, .max_per_consumer = 3};
  WT_ASSERT_OK(wt_leases_new(&lim, &t));
  uint64_t id = 0;
  for (int i = 0; i < 3; i++)
    WT_ASSERT_OK(wt_leases_take(t, 1, 100, 10, 1, "v1", &id));
  WT_ASSERT_ERR(wt_leases_take(t, 1, 100, 10, 1, "v1", &id),
                WT_RESOURCE_EXHAUSTED, "(pid 100) holds 3 leases, the limit");
  CU_ASSERT_EQUAL(id, 0);
  WT_ASSERT_OK(wt_leases_take(t, 2, 200, 20, 1, "v1", &id));
  WT_ASSERT_OK(wt_leases_take(t, 2, 200, 20, 1, "v1", &id));
  WT_ASSERT_ERR(wt_leases_take(t, 3, 300, 30, 1, "v1", &id),
                WT_RESOURCE_EXHAUSTED, "the server holds 5 leases");
  /* A consumer that goes frees its places. */
  CU_ASSERT_EQUAL(wt_leases_drop_consumer(t, 1), 3);
  WT_ASSERT_OK(wt_leases_take(t, 3, 300, 30, 1, "v1", &id));
  wt_leases_free(t);
}

/* Trust row 3: one uid, however many consumers it opens, holds at most its
 * share of the table (its part among the uids holding leases and one
 * more), so another uid always finds room. */
static void test_uid_shares(void) {
  wt_leases *t = NULL;
  wt_lease_limits lim = {.max_total = 12, .max_per_consumer = 2};
  WT_ASSERT_OK(wt_leases_new(&lim, &t));
  uint64_t id = 0;
  int taken = 0;
  for (uint64_t c = 1; c <= 8; c++)
    for (int k = 0; k < 2; k++) {
      wt_status *st = wt_leases_take(t, c, 100, 1000, 1, "v1", &id);
      taken += st == NULL;
      wt_status_free(st);
    }
  CU_ASSERT_EQUAL(taken, 6); /* 12 / (1 uid + 1) */
  WT_ASSERT_ERR(wt_leases_take(t, 9, 100, 1000, 1, "v1", &id),
                WT_RESOURCE_EXHAUSTED,
                "uid 1000 holds 6 leases, its share (6)");
  /* another uid gets its part: 12 / (2 + 1) = 4 */
  for (int k = 0; k < 2; k++) {
    WT_ASSERT_OK(wt_leases_take(t, 20, 200, 0, 1, "v1", &id));
    WT_ASSERT_OK(wt_leases_take(t, 21, 200, 0, 1, "v1", &id));
  }
  WT_ASSERT_ERR(wt_leases_take(t, 22, 200, 0, 1, "v1", &id),
                WT_RESOURCE_EXHAUSTED, "uid 0 holds 4 leases, its share (4)");
  wt_leases_free(t);
}

typedef struct waiter {
  wt_leases *t;
  uint64_t below;
  int64_t wait_ms;
  atomic_bool cancel;
  atomic_bool done; /* wt_leases_wait_free has returned */
  wt_status *st;
  int64_t took_ms;
  pthread_t th;
} waiter;

static bool is_cancelled(void *arg) {
  return atomic_load(&((waiter *)arg)->cancel);
}

static void *waiter_main(void *arg) {
  waiter *w = arg;
  int64_t t0 = wt_mono_ms();
  w->st = wt_leases_wait_free(w->t, w->below, t0 + w->wait_ms, "--lease-wait",
                              is_cancelled, w);
  w->took_ms = wt_mono_ms() - t0;
  atomic_store(&w->done, true);
  return NULL;
}

static void waiter_start(waiter *w, wt_leases *t, uint64_t below,
                         int64_t wait_ms) {
  memset(w, 0, sizeof(*w));
  w->t = t;
  w->below = below;
  w->wait_ms = wait_ms;
  atomic_init(&w->cancel, false);
  atomic_init(&w->done, false);
  CU_ASSERT_FATAL(pthread_create(&w->th, NULL, waiter_main, w) == 0);
}

/* A consumer of its own that only looks. */
#define PROBE_CONSUMER 999

/* Waits until the round of `w` waits (a lease on `seq`, below what it
 * waits for, is then refused as "about to be overwritten by a round"; one
 * taken before it waits is dropped at once) or its wait has ended; false
 * after 10 s, a deadline against hanging. */
static bool await_waiting(waiter *w, uint64_t seq) {
  for (int64_t end = wt_mono_ms() + 10000;;) {
    uint64_t id = 0;
    wt_status *st =
        wt_leases_take(w->t, PROBE_CONSUMER, 999, 0, seq, "probe", &id);
    if (st == NULL) {
      WT_ASSERT_OK(wt_leases_drop(w->t, PROBE_CONSUMER, id));
    } else {
      bool waiting =
          wt_status_code(st) == WT_UNAVAILABLE &&
          strstr(wt_status_message(st), "about to be overwritten") != NULL;
      wt_status_free(st);
      if (waiting) return true;
    }
    if (atomic_load(&w->done) || wt_mono_ms() > end) return false;
    wtt_sleep_ms(1);
  }
}

/* Shadow staging: a round writes the copies that are not live, which hold
 * older versions' bytes. A lease on the live version never delays it; one
 * on an older version does, until it is released, and new leases on older
 * versions are refused while the round waits. */
static void test_round_waits_for_its_set(void) {
  wt_leases *t = NULL;
  WT_ASSERT_OK(wt_leases_new(NULL, &t));
  uint64_t live = 0, old = 0, id = 0;
  WT_ASSERT_OK(wt_leases_take(t, 1, 100, 0, 8, "v8", &live));
  waiter w;
  /* v8 is live: the round waits for below. With its deadline already past
   * (0 ms), a wait that found anything to wait for would fail: passing
   * proves it does not wait at all, on any machine. */
  waiter_start(&w, t, 8, 0);
  pthread_join(w.th, NULL);
  WT_ASSERT_OK(w.st);

  WT_ASSERT_OK(wt_leases_take(t, 2, 200, 0, 7, "v7", &old));
  /* 30 s: a deadline against hanging; only the release ends the wait. */
  waiter_start(&w, t, 8, 30000);
  CU_ASSERT_FATAL(await_waiting(&w, 7));
  WT_ASSERT_ERR(wt_leases_take(t, 3, 300, 0, 7, "v7", &id), WT_UNAVAILABLE,
                "about to be overwritten by a round");
  WT_ASSERT_OK(wt_leases_take(t, 3, 300, 0, 8, "v8", &id)); /* the live */
  CU_ASSERT_FALSE(atomic_load(&w.done)); /* it waits for the old lease */
  WT_ASSERT_OK(wt_leases_drop(t, 2, old));
  pthread_join(w.th, NULL);
  WT_ASSERT_OK(w.st); /* the release ended it, not the deadline */
  printf("\n  a round waited %lld ms for the lease on an older version\n",
         (long long)w.took_ms);
  /* The round's wait is over: any version may be leased again. */
  WT_ASSERT_OK(wt_leases_take(t, 3, 300, 0, 7, "v7", &id));
  wt_leases_free(t);
}

/* In-place staging (one copy): a held lease makes the round fail at its
 * deadline, naming the holder; a consumer that dies (its connection's
 * leases dropped) lets it through at once; a cancelled wait says so. */
static void test_wait_deadline_and_death(void) {
  wt_leases *t = NULL;
  WT_ASSERT_OK(wt_leases_new(NULL, &t));
  uint64_t id = 0;
  WT_ASSERT_OK(wt_leases_take(t, 1, 4242, 1000, 3, "step-3", &id));
  waiter w;
  waiter_start(&w, t, UINT64_MAX, 300);
  pthread_join(w.th, NULL);
  WT_ASSERT_ERR(w.st, WT_FAILED_PRECONDITION,
                "pid 4242 (uid 1000) has held version 'step-3' (sequence 3)");
  CU_ASSERT(w.took_ms >= 300 && w.took_ms < 1500);
  printf("\n  a held lease failed the round after %lld ms (deadline 300)",
         (long long)w.took_ms);

  /* Deadlines of 30 s, against hanging: the status says what ended each
   * wait (OK: the death; CANCELLED: the cancel; the deadline would fail it
   * naming the holder). */
  waiter_start(&w, t, UINT64_MAX, 30000);
  CU_ASSERT_FATAL(await_waiting(&w, 3));
  CU_ASSERT_FALSE(atomic_load(&w.done));
  CU_ASSERT_EQUAL(wt_leases_drop_consumer(t, 1), 1);
  pthread_join(w.th, NULL);
  WT_ASSERT_OK(w.st);

  WT_ASSERT_OK(wt_leases_take(t, 1, 4242, 1000, 4, "step-4", &id));
  waiter_start(&w, t, UINT64_MAX, 30000);
  CU_ASSERT_FATAL(await_waiting(&w, 4));
  CU_ASSERT_FALSE(atomic_load(&w.done));
  atomic_store(&w.cancel, true);
  pthread_join(w.th, NULL);
  WT_ASSERT_ERR(w.st, WT_CANCELLED, "cancelled");
  printf("\n");
  wt_leases_free(t);
}

void wt_test_suite_leases(void) {
  CU_pSuite s = CU_add_suite("leases", NULL, NULL);
  CU_add_test(s, "take and drop", test_take_and_drop);
  CU_add_test(s, "limits per consumer and in all", test_limits);
  CU_add_test(s, "a uid holds its share, another finds room", test_uid_shares);
  CU_add_test(s, "a round waits for leases on older versions",
              test_round_waits_for_its_set);
  CU_add_test(s, "deadline, death, cancel", test_wait_deadline_and_death);
}
