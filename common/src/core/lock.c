/* lock.c: wt's mutexes and the lock-order check (see wt/lock.h). */

#include "wt/lock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wt/clock.h"

#ifdef WT_LOCK_CHECK

/* More than any path of wt holds at once (the deepest is a finish holding
 * every store's write lock: one per worker, at most WT_MAX_WORKERS, plus
 * a few); a thread that holds more is reported as out of order too. */
#define HELD_MAX 64

typedef struct held_lock {
  const void *lock;
  uint32_t order;
  const char *name;
} held_lock;

static __thread held_lock g_held[HELD_MAX];
static __thread int g_nheld;

static void describe(char *buf, size_t n, uint32_t order, const char *name) {
  unsigned idx = order & 0xffff;
  if (idx)
    snprintf(buf, n, "'%s' (rank %u, index %u)", name ? name : "?", order >> 16,
             idx);
  else
    snprintf(buf, n, "'%s' (rank %u)", name ? name : "?", order >> 16);
}

static void report(const char *what, const void *lock, uint32_t order,
                   const char *name, const held_lock *above) {
  char want[160], have[160];
  describe(want, sizeof(want), order, name);
  fprintf(stderr, "wt: lock order violated: %s %s", what, want);
  if (above != NULL) {
    describe(have, sizeof(have), above->order, above->name);
    fprintf(stderr, " while holding %s", have);
  }
  fprintf(stderr,
          "; a lock is taken only above every lock held "
          "(common/internal/wt/lock.h). Held by this thread, first "
          "taken first:\n");
  for (int i = 0; i < g_nheld; i++) {
    describe(have, sizeof(have), g_held[i].order, g_held[i].name);
    fprintf(stderr, "  %s at %p\n", have, g_held[i].lock);
  }
  (void)lock;
  fflush(stderr);
  abort();
}

static void check_order(const void *lock, uint32_t order, const char *name) {
  for (int i = 0; i < g_nheld; i++) {
    if (g_held[i].lock == lock) report("taking again", lock, order, name, NULL);
    if (g_held[i].order >= order)
      report("taking", lock, order, name, &g_held[i]);
  }
}

static void push_held(const void *lock, uint32_t order, const char *name) {
  if (g_nheld >= HELD_MAX)
    report("taking (too many held)", lock, order, name, NULL);
  g_held[g_nheld++] = (held_lock){lock, order, name};
}

static void pop_held(const void *lock, uint32_t order, const char *name) {
  for (int i = g_nheld - 1; i >= 0; i--) {
    if (g_held[i].lock != lock) continue;
    memmove(&g_held[i], &g_held[i + 1],
            (size_t)(g_nheld - i - 1) * sizeof(g_held[0]));
    g_nheld--;
    return;
  }
  report("releasing (not held)", lock, order, name, NULL);
}

static bool is_held(const void *lock) {
  for (int i = 0; i < g_nheld; i++)
    if (g_held[i].lock == lock) return true;
  return false;
}

bool wt_lock_checked(void) {
  return true;
}

int wt_lock_held_count(void) {
  return g_nheld;
}

#define CHECK_ORDER(l) check_order((l), (l)->order, (l)->name)
#define PUSH_HELD(l) push_held((l), (l)->order, (l)->name)
#define POP_HELD(l) pop_held((l), (l)->order, (l)->name)

#else

bool wt_lock_checked(void) {
  return false;
}

int wt_lock_held_count(void) {
  return 0;
}

#define CHECK_ORDER(l) ((void)0)
#define PUSH_HELD(l) ((void)0)
#define POP_HELD(l) ((void)0)

#endif

void wt_mutex_init(wt_mutex *m, wt_lock_rank rank, unsigned index,
                   const char *name) {
  pthread_mutex_init(&m->mu, NULL);
  m->order = (uint32_t)rank << 16 | (index & 0xffff);
  m->name = name;
}

void wt_mutex_destroy(wt_mutex *m) {
  pthread_mutex_destroy(&m->mu);
}

void wt_mutex_lock(wt_mutex *m) {
  CHECK_ORDER(m);
  pthread_mutex_lock(&m->mu);
  PUSH_HELD(m);
}

bool wt_mutex_trylock(wt_mutex *m) {
  if (pthread_mutex_trylock(&m->mu) != 0) return false;
  PUSH_HELD(m);
  return true;
}

void wt_mutex_unlock(wt_mutex *m) {
  POP_HELD(m);
  pthread_mutex_unlock(&m->mu);
}

void wt_mutex_assert_held(const wt_mutex *m) {
#ifdef WT_LOCK_CHECK
  if (!is_held(m)) report("needing (not held)", m, m->order, m->name, NULL);
#else
  (void)m;
#endif
}

void wt_cond_wait(pthread_cond_t *cv, wt_mutex *m) {
  pthread_cond_wait(cv, &m->mu);
}

int wt_cond_wait_until(pthread_cond_t *cv, wt_mutex *m, int64_t deadline_ms) {
  if (deadline_ms <= wt_mono_ms()) return ETIMEDOUT;
  struct timespec ts = {.tv_sec = (time_t)(deadline_ms / 1000),
                        .tv_nsec = (long)(deadline_ms % 1000) * 1000000L};
  return pthread_cond_timedwait(cv, &m->mu, &ts);
}

int wt_rwlock_init(wt_rwlock *l, wt_lock_rank rank, unsigned index,
                   const char *name) {
  l->order = (uint32_t)rank << 16 | (index & 0xffff);
  l->name = name;
  /* Writers first: readers may be continuous (a store's checksums), a
   * writer (a commit) is rare and short and must not starve. */
  pthread_rwlockattr_t attr;
  pthread_rwlockattr_init(&attr);
  pthread_rwlockattr_setkind_np(&attr,
                                PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  int rc = pthread_rwlock_init(&l->rw, &attr);
  pthread_rwlockattr_destroy(&attr);
  return rc;
}

void wt_rwlock_destroy(wt_rwlock *l) {
  pthread_rwlock_destroy(&l->rw);
}

void wt_rwlock_rdlock(wt_rwlock *l) {
  CHECK_ORDER(l);
  pthread_rwlock_rdlock(&l->rw);
  PUSH_HELD(l);
}

void wt_rwlock_wrlock(wt_rwlock *l) {
  CHECK_ORDER(l);
  pthread_rwlock_wrlock(&l->rw);
  PUSH_HELD(l);
}

void wt_rwlock_unlock(wt_rwlock *l) {
  POP_HELD(l);
  pthread_rwlock_unlock(&l->rw);
}
