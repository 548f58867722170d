/* wt/worker.h: one receiver of a server: a param store, the engine of the
 * backend the trainer chose, and the round state machine they share.
 *
 * States (wt_worker_state_name): "uninitialized" (no engine) ->
 * InitWeightTransferEngine -> "ready" -> start -> "updating" -> finish or
 * abort -> "ready". A new init replaces the engine (aborting a round first);
 * a failed init leaves the worker "uninitialized". Calls out of order return
 * FAILED_PRECONDITION naming the state.
 *
 * Threads: the server serialises the state-changing calls of one worker;
 * wt_worker_cancel may be called from any thread at any time, and the
 * getters of state and backend may be read under the server's lock.
 */
#ifndef WT_WORKER_H
#define WT_WORKER_H

#include <stdbool.h>
#include <stdint.h>

#include "wt/engine.h"
#include "wt/param_store.h"
#include "wt/status.h"
#include "wt/v1/wt.pb-c.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum wt_worker_state {
  WT_WORKER_UNINITIALIZED = 0,
  WT_WORKER_READY = 1,
  WT_WORKER_UPDATING = 2,
} wt_worker_state;

/* "uninitialized", "ready", "updating". Static. */
const char *wt_worker_state_name(wt_worker_state state);

typedef struct wt_worker_options {
  uint32_t rank; /* within the server */
  uint32_t num_workers;
  const char *device; /* NULL: "cpu" */
  const char *host;   /* where listening engines bind; NULL: loopback */
  uint32_t default_timeout_ms; /* engine waits when the init info says 0 */
  uint64_t max_message_bytes;  /* the control channel's receive limit */
  wt_registry *engines;        /* where backends are found; NULL: global */
} wt_worker_options;

typedef struct wt_worker wt_worker;

/* A worker in state "uninitialized" holding `store`, which it owns from now
 * on (also on failure). Strings in `o` are copied. The caller owns *out and
 * releases it with wt_worker_destroy(). */
wt_status *wt_worker_new(const wt_worker_options *o, wt_param_store *store,
                         wt_worker **out);

/* Aborts a round, destroys the engine and the store. NULL is ignored. */
void wt_worker_destroy(wt_worker *w);

uint32_t wt_worker_rank(const wt_worker *w);
const char *wt_worker_device(const wt_worker *w);
wt_param_store *wt_worker_store(const wt_worker *w);
wt_worker_state wt_worker_get_state(const wt_worker *w);
/* The engine's backend name; "" before a successful init. Owned by the
 * worker. */
const char *wt_worker_backend(const wt_worker *w);
/* The engine's table, NULL before a successful init. */
const wt_engine_ops *wt_worker_engine_ops(const wt_worker *w);

/* Replaces the engine: aborts a round, destroys the old engine, creates one
 * of init->backend from the worker-engine registry and runs its
 * init_transfer (which may block; wt_worker_cancel unblocks it). Fills
 * `endpoint` (zeroed here) when the engine listens. */
wt_status *wt_worker_init_engine(wt_worker *w,
                                 const Wt__V1__WeightTransferInitInfo *init,
                                 wt_engine_endpoint *endpoint);

/* ready -> updating: begins the store's round and the engine's. */
wt_status *wt_worker_start(wt_worker *w, uint64_t round_id);

/* The engine's receive (blocks while the trainer sends). */
wt_status *wt_worker_receive(wt_worker *w, const wt_update *u,
                             wt_receive_stats *stats);

/* The engine's stream ops (FAILED_PRECONDITION when it has none). */
wt_status *wt_worker_push_begin(wt_worker *w, const wt_update *u);
wt_status *wt_worker_push_chunk(wt_worker *w, uint32_t bucket, uint64_t offset,
                                const struct iovec *iov, size_t iovcnt);
wt_status *wt_worker_push_end(wt_worker *w, bool stream_ended,
                              wt_receive_stats *stats);

/* Finishing is two-phase, so that a server with many workers commits on all
 * of them or on none:
 *  1. wt_worker_check_finish: whether the store could commit (no partly
 *     received tensor); changes nothing, the round stays open on error;
 *  2. wt_worker_prepare_finish: the engine's finish_update; on error the
 *     caller aborts the round on every worker;
 *  3. wt_worker_commit: the store's commit; updating -> ready. Never fails;
 *     the caller holds the store's write lock (wt_param_store_write_lock),
 *     taken before any lock of its own since it waits for readers. */
wt_status *wt_worker_check_finish(const wt_worker *w);
wt_status *wt_worker_prepare_finish(wt_worker *w);
void wt_worker_commit(wt_worker *w);

/* Destroys the engine: back to "uninitialized" (after aborting a round). */
void wt_worker_release_engine(wt_worker *w);

/* updating -> ready without commit (no-op in another state). */
void wt_worker_abort(wt_worker *w);

/* From any thread: unblocks the engine's init_transfer or receive. */
void wt_worker_cancel(wt_worker *w);

#ifdef __cplusplus
}
#endif

#endif /* WT_WORKER_H */
