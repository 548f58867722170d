/* reader_budget.c: the bytes a second each peer's checksums may hash (see
 * docs/trust.md, "Readers"). A token bucket per peer key ("uid:N",
 * "ip:ADDR"), shared by that peer's calls and dropped with its last one.
 * A call over its peer's budget sleeps (outside every lock), in steps
 * short enough to notice that its client left or the server is stopping. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server_state.h"
#include "wt/clock.h"
#include "wt/lock.h"

/* A budget may run this far ahead (a burst of 100 ms at the rate). */
#define BURST_SECONDS 0.1
#define SLEEP_STEP_MS 50

struct wt_reader_budget {
  wt_reader_budget *next;
  char key[80];
  int users;
  double tokens; /* bytes; negative: owed */
  int64_t last_us;
};

wt_reader_budget *wt_srv_budget_take(wt_server *srv, const char *key) {
  wt_mutex_lock(&srv->readers.mu);
  wt_reader_budget *b = srv->readers.budgets;
  while (b != NULL && strcmp(b->key, key) != 0) b = b->next;
  if (b == NULL && (b = calloc(1, sizeof(*b))) != NULL) {
    snprintf(b->key, sizeof(b->key), "%s", key);
    b->tokens = (double)srv->readers.bytes_per_sec * BURST_SECONDS;
    b->last_us = wt_mono_us();
    b->next = srv->readers.budgets;
    srv->readers.budgets = b;
  }
  if (b != NULL) b->users++;
  wt_mutex_unlock(&srv->readers.mu);
  return b;
}

void wt_srv_budget_release(wt_server *srv, wt_reader_budget *b) {
  if (b == NULL) return;
  wt_mutex_lock(&srv->readers.mu);
  if (--b->users == 0)
    for (wt_reader_budget **pp = &srv->readers.budgets; *pp != NULL;
         pp = &(*pp)->next)
      if (*pp == b) {
        *pp = b->next;
        free(b);
        break;
      }
  wt_mutex_unlock(&srv->readers.mu);
}

bool wt_srv_budget_spend(wt_server *srv, wt_reader_budget *b, uint64_t bytes,
                         bool (*stop)(void *arg), void *arg) {
  if (b == NULL || srv->readers.bytes_per_sec == 0) return true;
  double rate = (double)srv->readers.bytes_per_sec;
  wt_mutex_lock(&srv->readers.mu);
  int64_t now = wt_mono_us();
  b->tokens += rate * (double)(now - b->last_us) / 1e6;
  if (b->tokens > rate * BURST_SECONDS) b->tokens = rate * BURST_SECONDS;
  b->last_us = now;
  b->tokens -= (double)bytes;
  double owed = b->tokens < 0 ? -b->tokens : 0;
  wt_mutex_unlock(&srv->readers.mu);
  int64_t wait_ms = (int64_t)(owed / rate * 1000.0);
  while (wait_ms > 0) {
    if (stop(arg)) return false;
    int64_t step = wait_ms < SLEEP_STEP_MS ? wait_ms : SLEEP_STEP_MS;
    struct timespec ts = {step / 1000, (long)(step % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    wait_ms -= step;
  }
  return true;
}
