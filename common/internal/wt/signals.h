/* wt/signals.h: SIGINT and SIGTERM for processes that run wt servers.
 *
 * wt_signal_block_termination() in main() before any thread exists, then
 * wt_signal_wait() on one thread: the signals are taken synchronously
 * (sigwaitinfo), so no gRPC or wt call ever runs in a signal handler.
 */
#ifndef WT_SIGNALS_H
#define WT_SIGNALS_H

#include <stdint.h>

#include "wt/status.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

/* Blocks SIGINT and SIGTERM in the calling thread (and ignores SIGPIPE), so
 * that every thread created afterwards inherits the mask and the signals wait
 * for wt_signal_wait(). Call from main() before creating any thread,
 * including before any channel or server exists. */
wt_status *wt_signal_block_termination(void);

/* Waits up to `timeout_ms` (-1: forever) for SIGINT or SIGTERM. Returns the
 * signal number, or 0 on timeout. */
int wt_signal_wait(int64_t timeout_ms);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_SIGNALS_H */
