/* leases.c: see leases.h. A small table (bounded by max_total) under one
 * mutex; a writer waiting for a set marks it, and every drop broadcasts. */

#include "leases.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wt/clock.h"
#include "wt/secure.h"
#include "wt/lock.h"

#define POLL_MS 20

struct wt_leases {
  wt_mutex mu;
  pthread_cond_t cv; /* a lease ended, or a writer's wait ended */
  wt_lease_info *held;
  size_t n, cap;
  uint32_t max_per_consumer;
  /* A round waits for the leases on versions below this to end (0: no
   * round waits). */
  uint64_t writer_below;
  uint64_t last_id;
};

wt_status *wt_leases_new(const wt_lease_limits *limits, wt_leases **out) {
  *out = NULL;
  wt_leases *t = calloc(1, sizeof(*t));
  if (t == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "leases: out of memory");
  t->cap = limits && limits->max_total ? limits->max_total
                                       : WT_LEASES_DEFAULT_MAX_TOTAL;
  t->max_per_consumer = limits && limits->max_per_consumer
                            ? limits->max_per_consumer
                            : WT_LEASES_DEFAULT_MAX_PER_CONSUMER;
  t->held = calloc(t->cap, sizeof(*t->held));
  if (t->held == NULL) {
    free(t);
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "leases: out of memory");
  }
  wt_mutex_init(&t->mu, WT_LOCK_LEASES, 0, "leases.mu");
  wt_cond_init_monotonic(&t->cv);
  *out = t;
  return NULL;
}

void wt_leases_free(wt_leases *t) {
  if (t == NULL) return;
  wt_mutex_destroy(&t->mu);
  pthread_cond_destroy(&t->cv);
  free(t->held);
  free(t);
}

wt_status *wt_leases_take(wt_leases *t, uint64_t consumer, int pid,
                          unsigned uid, uint64_t sequence, const char *version,
                          uint64_t *id) {
  *id = 0;
  wt_mutex_lock(&t->mu);
  wt_status *st = NULL;
  size_t mine = 0, of_uid = 0, uids = 1;
  for (size_t i = 0; i < t->n; i++) {
    mine += t->held[i].consumer == consumer;
    of_uid += t->held[i].uid == uid;
    /* distinct uids holding leases (first of each), this one counted */
    bool first = t->held[i].uid != uid;
    for (size_t j = 0; first && j < i; j++)
      first = t->held[j].uid != t->held[i].uid;
    uids += first;
  }
  /* A uid's share of the table: its part among the uids holding leases
   * and one more, so a newcomer always finds room; never below the
   * per-consumer limit (trust row 3). */
  size_t share = t->cap / (uids + 1);
  if (share < t->max_per_consumer) share = t->max_per_consumer;
  if (sequence < t->writer_below) {
    st = wt_status_new(WT_UNAVAILABLE,
                       "version '%s' (sequence %llu) is about to be "
                       "overwritten by a round; acquire again once it "
                       "commits",
                       version ? version : "", (unsigned long long)sequence);
  } else if (mine >= t->max_per_consumer) {
    st = wt_status_new(WT_RESOURCE_EXHAUSTED,
                       "this consumer (pid %d) holds %zu leases, the limit "
                       "per consumer; release one first",
                       pid, mine);
  } else if (of_uid >= share) {
    st = wt_status_new(WT_RESOURCE_EXHAUSTED,
                       "uid %u holds %zu leases, its share (%zu) while %zu "
                       "uid(s) hold leases; release one first",
                       uid, of_uid, share, uids);
  } else if (t->n >= t->cap) {
    st = wt_status_new(WT_RESOURCE_EXHAUSTED,
                       "the server holds %zu leases, its limit; try again "
                       "once consumers release theirs",
                       t->n);
  } else {
    wt_lease_info *l = &t->held[t->n++];
    memset(l, 0, sizeof(*l));
    l->id = wt_random_u64(t->last_id);
    t->last_id = l->id;
    l->consumer = consumer;
    l->pid = pid;
    l->uid = uid;
    l->sequence = sequence;
    snprintf(l->version, sizeof(l->version), "%s", version ? version : "");
    l->since_unix_ms = wt_unix_ms();
    *id = l->id;
  }
  wt_mutex_unlock(&t->mu);
  return st;
}

size_t wt_leases_held_by(wt_leases *t, uint64_t consumer) {
  size_t n = 0;
  wt_mutex_lock(&t->mu);
  for (size_t i = 0; i < t->n; i++) n += t->held[i].consumer == consumer;
  wt_mutex_unlock(&t->mu);
  return n;
}

/* Removes entry i, keeping the rest in age order. Under mu. */
static void remove_locked(wt_leases *t, size_t i) {
  memmove(&t->held[i], &t->held[i + 1], (t->n - i - 1) * sizeof(*t->held));
  t->n--;
}

wt_status *wt_leases_drop(wt_leases *t, uint64_t consumer, uint64_t id) {
  wt_mutex_lock(&t->mu);
  for (size_t i = 0; i < t->n; i++)
    if (t->held[i].id == id && t->held[i].consumer == consumer) {
      remove_locked(t, i);
      pthread_cond_broadcast(&t->cv);
      wt_mutex_unlock(&t->mu);
      return NULL;
    }
  wt_mutex_unlock(&t->mu);
  return wt_status_new(WT_NOT_FOUND,
                       "lease %llu: this consumer holds no such "
                       "lease",
                       (unsigned long long)id);
}

size_t wt_leases_drop_consumer(wt_leases *t, uint64_t consumer) {
  wt_mutex_lock(&t->mu);
  size_t dropped = 0;
  for (size_t i = 0; i < t->n;)
    if (t->held[i].consumer == consumer) {
      remove_locked(t, i);
      dropped++;
    } else {
      i++;
    }
  if (dropped) pthread_cond_broadcast(&t->cv);
  wt_mutex_unlock(&t->mu);
  return dropped;
}

static const wt_lease_info *oldest_below_locked(const wt_leases *t,
                                                uint64_t below) {
  for (size_t i = 0; i < t->n; i++)
    if (t->held[i].sequence < below) return &t->held[i];
  return NULL;
}

wt_status *wt_leases_wait_free(wt_leases *t, uint64_t below,
                               int64_t deadline_ms, const char *option,
                               bool (*cancelled)(void *), void *arg) {
  wt_mutex_lock(&t->mu);
  t->writer_below = below;
  wt_status *st = NULL;
  const wt_lease_info *h;
  while ((h = oldest_below_locked(t, below)) != NULL) {
    int64_t now = wt_mono_ms();
    /* Asked without the table's lock: the caller's answer may take locks
     * that come before it (the round's, whose holders take leases). */
    wt_mutex_unlock(&t->mu);
    bool stop = cancelled != NULL && cancelled(arg);
    wt_mutex_lock(&t->mu);
    if (stop) {
      st = wt_status_new(WT_CANCELLED,
                         "waiting for consumers' leases to end: cancelled");
      break;
    }
    if (now >= deadline_ms) {
      st = wt_status_new(
          WT_FAILED_PRECONDITION,
          "a consumer's lease holds the bytes this round would write: pid %d "
          "(uid %u) has held version '%s' (sequence %llu) for %lld ms%s%s",
          h->pid, h->uid, h->version, (unsigned long long)h->sequence,
          (long long)(wt_unix_ms() - h->since_unix_ms),
          option ? "; a round waits for it up to " : "", option ? option : "");
      break;
    }
    int64_t step = deadline_ms - now < POLL_MS ? deadline_ms - now : POLL_MS;
    wt_cond_wait_until(&t->cv, &t->mu, now + step);
  }
  t->writer_below = 0;
  pthread_cond_broadcast(&t->cv);
  wt_mutex_unlock(&t->mu);
  return st;
}

bool wt_leases_any_below(wt_leases *t, uint64_t below, wt_lease_info *holder) {
  wt_mutex_lock(&t->mu);
  const wt_lease_info *h = oldest_below_locked(t, below);
  if (h != NULL && holder != NULL) *holder = *h;
  wt_mutex_unlock(&t->mu);
  return h != NULL;
}

size_t wt_leases_list(wt_leases *t, wt_lease_info *out, size_t cap) {
  wt_mutex_lock(&t->mu);
  size_t n = t->n;
  for (size_t i = 0; i < n && i < cap; i++) out[i] = t->held[i];
  wt_mutex_unlock(&t->mu);
  return n;
}
