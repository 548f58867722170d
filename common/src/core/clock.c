/* clock.c: the one monotonic clock (see wt/clock.h). */

#include "wt/clock.h"

#include <time.h>

static int64_t read_ms(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t wt_mono_ms(void) {
  return read_ms(CLOCK_MONOTONIC);
}

int64_t wt_unix_ms(void) {
  return read_ms(CLOCK_REALTIME);
}

int64_t wt_mono_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int wt_cond_init_monotonic(pthread_cond_t *cv) {
  pthread_condattr_t attr;
  int rc = pthread_condattr_init(&attr);
  if (rc != 0) return rc;
  int clock_rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  rc = pthread_cond_init(cv, &attr); /* usable in any case */
  pthread_condattr_destroy(&attr);
  return rc != 0 ? rc : clock_rc;
}
