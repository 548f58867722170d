/* fake_engine.h: worker engines for tests, registered beside the built-ins.
 *
 * receive marks its tensors as being written, blocks until the test
 * releases it (as a trainer's transfer would run), cancel or its deadline,
 * then fills them for the init option "seed". init, start, finish and abort
 * can each be made to block for a while, ignoring cancel, as a stream sync
 * or a communicator abort on a GPU can. Every op records whether it ran on
 * a thread bound to the worker's device (fake_cuda.h).
 *
 *   "fake"          every memory kind, survives an abort
 *   "fake-fragile"  every memory kind, needs a new init after an abort
 *   "fake-host"     host memory kinds only
 */
#ifndef WT_TEST_FAKE_ENGINE_H
#define WT_TEST_FAKE_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "fixture.h"
#include "wt/engine.h"
#include "wt/registry.h"

extern const wt_engine_ops fake_engine_ops;
extern const wt_engine_ops fake_fragile_engine_ops;
extern const wt_engine_ops fake_host_engine_ops;

typedef struct fake_engine_stats {
  int inits, starts, receives, finishes, aborts, destroyed;
  int blocked;       /* receives waiting now */
  int wrong_device;  /* ops on a thread not bound to the worker's GPU */
  int ops_on_device; /* ops of cuda workers, on a bound thread */
  int busy;          /* init, start, finish, abort blocking now (delays) */
  int busy_done;     /* of those, the ones whose block has ended */
} fake_engine_stats;

/* Counters to zero, no delays, receives held. */
void fake_engine_reset(void);
/* How long (ms) init_transfer, start_update, finish_update and
 * abort_update block from now on; 0: not at all. */
void fake_engine_set_delays(int init_ms, int start_ms, int finish_ms,
                            int abort_ms);
/* Lets blocked (and later) receives go on, or holds them again. */
void fake_engine_release(bool release);
/* Whether `n` receives are blocked within `ms`. */
bool fake_engine_wait_blocked(int n, int64_t ms);
/* Whether at least `n` init/start/finish/abort ops block (their delay)
 * within `ms`. */
bool fake_engine_wait_busy(int n, int64_t ms);
fake_engine_stats fake_engine_get_stats(void);

/* A registry with the built-in backends and the three fakes; the caller
 * destroys it after the server that uses it. */
wt_registry *fake_engine_registry(void);

/* InitWeightTransferEngine for `backend` with option seed=`seed` and the
 * engine deadline `timeout_ms` (0: the server's). */
wt_status *fake_engine_init(wt_rpc_channel *ch, const char *backend,
                            const char *seed, uint32_t timeout_ms,
                            Wt__V1__InitWeightTransferEngineResponse **resp);
/* UpdateWeights of `u` started asynchronously. */
wt_status *fake_update_start(wt_rpc_channel *ch, const wtt_upd *u,
                             uint64_t round_id, wt_rpc_pending **p);

#endif
