/* signals.c: synchronous SIGINT/SIGTERM handling (see wt/signals.h). */

#include "wt/signals.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

static void termination_set(sigset_t *set) {
  sigemptyset(set);
  sigaddset(set, SIGINT);
  sigaddset(set, SIGTERM);
}

wt_status *wt_signal_block_termination(void) {
  sigset_t set;
  termination_set(&set);
  int rc = pthread_sigmask(SIG_BLOCK, &set, NULL);
  if (rc != 0) return wt_status_from_errno(rc, "blocking SIGINT and SIGTERM");
  /* A peer that closes its socket must cost an error code, not the
   * process. */
  signal(SIGPIPE, SIG_IGN);
  return NULL;
}

int wt_signal_wait(int64_t timeout_ms) {
  sigset_t set;
  termination_set(&set);
  for (;;) {
    int sig;
    if (timeout_ms < 0) {
      sig = sigwaitinfo(&set, NULL);
    } else {
      struct timespec ts = {(time_t)(timeout_ms / 1000),
                            (long)(timeout_ms % 1000) * 1000000L};
      sig = sigtimedwait(&set, NULL, &ts);
    }
    if (sig > 0) return sig;
    if (errno == EAGAIN) return 0;
    if (errno != EINTR) return 0;
  }
}
