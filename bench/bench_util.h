/* bench_util.h: what the bench reference programs share. */
#ifndef WT_BENCH_UTIL_H
#define WT_BENCH_UTIL_H

#include <time.h>

/* Monotonic seconds. */
static inline double bench_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* qsort order of doubles. */
static inline int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#endif
