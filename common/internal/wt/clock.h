/* wt/clock.h: the one clock of wt's deadlines, and wall-clock time for what
 * a user reads (commit times). */
#ifndef WT_CLOCK_H
#define WT_CLOCK_H

#include <pthread.h>
#include <stdint.h>

#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

/* Milliseconds on CLOCK_MONOTONIC: every deadline and duration in wt. */
int64_t wt_mono_ms(void);
/* Microseconds on CLOCK_MONOTONIC, for what is measured finer. */
int64_t wt_mono_us(void);
/* Milliseconds since the Unix epoch (CLOCK_REALTIME): only for what is
 * shown, never for a deadline. */
int64_t wt_unix_ms(void);

/* Condition variables whose timed waits run on wt_mono_ms's clock: every
 * timed wait in wt goes through this and wt_cond_wait_until (wt/lock.h),
 * so that setting the wall clock never shortens or stretches a deadline. */

/* pthread_cond_init with CLOCK_MONOTONIC: 0 or an errno. */
int wt_cond_init_monotonic(pthread_cond_t *cv);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_CLOCK_H */
